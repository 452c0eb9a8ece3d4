/*
 * options.c - the one table of configuration options, and the rules between
 * them.
 *
 * Adding an option is a row here and a field in struct cfg (or struct
 * cfg_target). The loader validates values against the bounds (and the
 * row's check, if any), the defaults come from `def` (parsed by the same
 * code as a file's value, so a default cannot escape its own bounds),
 * cfg_free releases string and map fields through the offset, and --help
 * and the example config are printed from the same rows.
 *
 * Rows of one section must be contiguous, and all TARGET rows must be
 * contiguous: the example config opens each section once, at its first row.
 * The unit tests load the example back, which catches a misplaced row.
 */
#include "internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#define G(field) offsetof(struct cfg, field)
#define T(field) offsetof(struct cfg_target, field)
#define NS_US 1000ull
#define NS_MS 1000000ull
#define NS_S 1000000000ull
#define KIB (1ull << 10)
#define MIB (1ull << 20)
#define PPM 1000000ull

/* Enum fields are stored through an int lvalue (see CFG_T_ENUM). */
_Static_assert(sizeof(enum cfg_log_level) == sizeof(int), "enum cfg_log_level is not int-sized");
_Static_assert(sizeof(enum cfg_upload_api) == sizeof(int), "enum cfg_upload_api is not int-sized");
_Static_assert(sizeof(enum cfg_store_on_damage) == sizeof(int),
               "enum cfg_store_on_damage is not int-sized");

/* In the order of the enum's values. */
const char *const cfg_log_level_names[] = {"debug", "info", "warn", "error", NULL};
const char *const cfg_upload_api_names[] = {"push", "ingest", NULL};
static const char *const cfg_store_on_damage_names[] = {"refuse", "move_aside", NULL};

/*
 * control.group: a group name as getgrnam takes it (resolved when the agent
 * starts). Only what cannot be a name on any system is refused here.
 */
const char *cfg_check_group(const char *s, size_t len, int is_key, const char *shown, char *buf,
                            size_t cap)
{
    (void)is_key;
    if (len > 0 && s[0] == '-') {
        snprintf(buf, cap, "'%s' is not a group name (it starts with '-')", shown);
        return buf;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 0x20 || ch == 0x7f || ch == ':' || ch == '/' || ch == ',') {
            snprintf(buf, cap, "'%s' is not a group name (no spaces, ':', '/' or ',')", shown);
            return buf;
        }
    }
    return NULL;
}

/*
 * metrics.listen, anomaly.latency.listen: a CFG_T_LISTEN value (already a
 * valid ip:port, localhost:port or [v6]:port when this runs) whose host is
 * loopback, so the page is never served beyond the host and the DogStatsD
 * input (unauthenticated UDP, whose tags decide what the detector tracks)
 * is taken only from the host's own processes. "" is off.
 */
const char *cfg_check_loopback(const char *s, size_t len, int is_key, const char *shown, char *buf,
                               size_t cap)
{
    (void)is_key;
    char host[320];
    const char *h = s, *he;
    if (len == 0)
        return NULL;
    if (len >= sizeof(host))
        return "is too long";
    if (s[0] == '[') {
        h = s + 1;
        he = memchr(s, ']', len);
    } else {
        he = NULL;
        for (size_t i = len; i-- > 0;)
            if (s[i] == ':') {
                he = s + i;
                break;
            }
    }
    if (he == NULL || he < h)
        return NULL; /* not a listen address: the type's own check said so */
    memcpy(host, h, (size_t)(he - h));
    host[he - h] = '\0';
    unsigned char a4[sizeof(struct in_addr)];
    struct in6_addr a6;
    if (strcmp(host, "localhost") == 0 || (inet_pton(AF_INET, host, a4) == 1 && a4[0] == 127) ||
        (inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6)))
        return NULL;
    snprintf(buf, cap, "'%s' is not a loopback address (127.0.0.0/8, [::1] or localhost)", shown);
    return buf;
}

const struct cfg_option cfg_options[] = {
    /* name, type, scope, default, min, max, required, reloadable, offset, help, check, choices */
    {"store.path", CFG_T_STRING, CFG_SCOPE_GLOBAL, "./isoprof-data", 0, 4096, 0, 0, G(store.path),
     "directory of the LMDB store (created if missing)", NULL, NULL},
    {"store.max_size", CFG_T_SIZE, CFG_SCOPE_GLOBAL, "1GiB", MIB, 0, 0, 0, G(store.max_size),
     "budget of stored data; the oldest windows are evicted before it is reached", NULL, NULL},
    {"store.on_damage", CFG_T_ENUM, CFG_SCOPE_GLOBAL, "refuse", 0, 0, 0, 0, G(store.on_damage),
     "a store found damaged at start: refuse (exit status 3), or move_aside (into "
     "<store.path>/damaged-<UTC time>/, then start a new store)",
     NULL, cfg_store_on_damage_names},

    {"inspector", CFG_T_INSPECTOR, CFG_SCOPE_TARGET, NULL, 0, 0, 1, 1, T(inspector),
     "inspector endpoint, host:port or [v6]:port", NULL, NULL},
    {"worker", CFG_T_STRING, CFG_SCOPE_TARGET, NULL, 0, 255, 0, 1, T(worker),
     "worker label (default: the workerd service, else the script's file name)", NULL, NULL},
    {"version", CFG_T_STRING, CFG_SCOPE_TARGET, NULL, 0, 255, 0, 1, T(version),
     "version label (default: unknown)", NULL, NULL},
    {"memory_limit", CFG_T_SIZE, CFG_SCOPE_TARGET, "128MiB", MIB, 0, 0, 1, T(memory_limit),
     "the isolate's heap limit; memory near it flags an anomaly", NULL, NULL},

    {"discovery.interval", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "5s", 100 * NS_MS, 3600 * NS_S, 0, 1,
     G(discovery.interval_ns), "how often each endpoint's /json/list is polled", NULL, NULL},

    {"sampling.cpu.duration", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "10s", 100 * NS_MS, 3600 * NS_S, 0,
     1, G(sampling.cpu.duration_ns), "length of one CPU profile window", NULL, NULL},
    {"sampling.cpu.period", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "60s", 100 * NS_MS, 86400 * NS_S, 0,
     1, G(sampling.cpu.period_ns), "one window per isolate every period (>= duration)", NULL, NULL},
    {"sampling.cpu.interval", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "10ms", 100 * NS_US, NS_S, 0, 1,
     G(sampling.cpu.interval_ns), "V8 sampling interval within a window", NULL, NULL},
    {"sampling.cpu.jitter", CFG_T_FRACTION, CFG_SCOPE_GLOBAL, "10%", 0, PPM / 2, 0, 1,
     G(sampling.cpu.jitter), "random shift of each window, as a share of the period (10% or 0.1)",
     NULL, NULL},
    {"sampling.cpu.max_concurrent", CFG_T_COUNT, CFG_SCOPE_GLOBAL, "4", 1, 1024, 0, 1,
     G(sampling.cpu.max_concurrent), "CPU windows at once on this host; more are delayed", NULL,
     NULL},

    {"sampling.heap.interval", CFG_T_SIZE, CFG_SCOPE_GLOBAL, "512KiB", 1024, 64 * MIB, 0, 0,
     G(sampling.heap.interval),
     "V8 heap sampling interval (average bytes between samples); set at attach", NULL, NULL},
    {"sampling.heap.period", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "5m", NS_S, 86400 * NS_S, 0, 1,
     G(sampling.heap.period_ns), "one heap window per isolate every period (each forces a full GC)",
     NULL, NULL},
    {"sampling.memory_poll", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "1s", 50 * NS_MS, 3600 * NS_S, 0, 1,
     G(sampling.memory_poll_ns), "how often each isolate's heap usage is read (no GC)", NULL, NULL},

    {"anomaly.memory.threshold", CFG_T_FRACTION, CFG_SCOPE_GLOBAL, "90%", PPM / 100, PPM, 0, 1,
     G(anomaly.memory.threshold),
     "memory_near_limit: used heap at or above this share of memory_limit", NULL, NULL},
    {"anomaly.memory.heap_period", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "10s", NS_S, 3600 * NS_S, 0, 1,
     G(anomaly.memory.heap_period_ns), "heap window period while memory stays near the limit", NULL,
     NULL},
    {"anomaly.cpu_interval", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "1ms", 100 * NS_US, NS_S, 0, 1,
     G(anomaly.cpu_interval_ns), "sampling interval of the CPU window an anomaly triggers", NULL,
     NULL},
    {"anomaly.cooldown", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "2m", NS_S, 86400 * NS_S, 0, 1,
     G(anomaly.cooldown_ns),
     "an episode ends this long after its measure fell back; triggers per isolate at most this "
     "often",
     NULL, NULL},
    {"anomaly.retention", CFG_T_COUNT, CFG_SCOPE_GLOBAL, "4", 1, 1000, 0, 0, G(anomaly.retention),
     "windows an anomaly pins are kept this many times as long as the others", NULL, NULL},
    {"anomaly.latency.listen", CFG_T_LISTEN, CFG_SCOPE_GLOBAL, "127.0.0.1:8125", 1, 300, 0, 0,
     G(anomaly.latency.listen),
     "loopback UDP address for DogStatsD timings (127.0.0.0/8, [::1] or localhost, with the "
     "port); \"\" turns it off",
     cfg_check_loopback, NULL},
    {"anomaly.latency.window", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "10s", 100 * NS_MS, 3600 * NS_S, 0,
     0, G(anomaly.latency.window_ns), "P999 is computed over windows of this length", NULL, NULL},
    {"anomaly.latency.factor", CFG_T_FRACTION, CFG_SCOPE_GLOBAL, "3", PPM + PPM / 10, 1000 * PPM, 0,
     0, G(anomaly.latency.factor), "latency_p999_spike: P999 above this many times its baseline",
     NULL, NULL},
    {"anomaly.latency.min", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "50ms", 0, 3600 * NS_S, 0, 0,
     G(anomaly.latency.min_ns), "latency_p999_spike: and above this", NULL, NULL},
    {"anomaly.latency.min_count", CFG_T_COUNT, CFG_SCOPE_GLOBAL, "500", 1, 0, 0, 0,
     G(anomaly.latency.min_count),
     "latency_p999_spike: and at least this many observations in the window", NULL, NULL},
    {"anomaly.latency.worker_tag", CFG_T_STRING, CFG_SCOPE_GLOBAL, "worker", 0, 200, 0, 0,
     G(anomaly.latency.worker_tag), "DogStatsD tag naming the worker", NULL, NULL},
    {"anomaly.latency.version_tag", CFG_T_STRING, CFG_SCOPE_GLOBAL, "version", 0, 200, 0, 0,
     G(anomaly.latency.version_tag), "DogStatsD tag naming the version", NULL, NULL},

    {"upload.url", CFG_T_STRING, CFG_SCOPE_GLOBAL, "", 1, 2048, 0, 0, G(upload.url),
     "Pyroscope server base URL (http:// or https://); \"\" turns upload off", cfg_upload_check_url,
     NULL},
    {"upload.api", CFG_T_ENUM, CFG_SCOPE_GLOBAL, "push", 0, 0, 0, 1, G(upload.api),
     "push.v1 Push API, or the legacy /ingest endpoint", NULL, cfg_upload_api_names},
    {"upload.timeout", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "10s", 100 * NS_MS, 600 * NS_S, 0, 1,
     G(upload.timeout_ns), "one request, connection included", NULL, NULL},
    {"upload.batch.max_profiles", CFG_T_COUNT, CFG_SCOPE_GLOBAL, "32", 1, 1024, 0, 1,
     G(upload.batch.max_profiles), "profiles a request at most", NULL, NULL},
    {"upload.batch.max_bytes", CFG_T_SIZE, CFG_SCOPE_GLOBAL, "1MiB", KIB, 64 * MIB, 0, 1,
     G(upload.batch.max_bytes), "uncompressed profile bytes a request at most", NULL, NULL},
    {"upload.batch.max_delay", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "10s", 10 * NS_MS, 3600 * NS_S, 0,
     1, G(upload.batch.max_delay_ns),
     "a batch that is not full is sent this long after its oldest window was queued", NULL, NULL},
    {"upload.max_profile_size", CFG_T_SIZE, CFG_SCOPE_GLOBAL, "4MiB", KIB, 256 * MIB, 0, 1,
     G(upload.max_profile_size),
     "a larger profile is rejected without sending (the server's limit)", NULL, NULL},
    {"upload.host", CFG_T_STRING, CFG_SCOPE_GLOBAL, "", 1, 255, 0, 1, G(upload.host),
     "the host label; \"\" = the machine's host name", NULL, NULL},
    {"upload.tls.ca_file", CFG_T_STRING, CFG_SCOPE_GLOBAL, "", 1, 4096, 0, 1, G(upload.tls.ca_file),
     "PEM bundle to verify the server with; \"\" = the system's", NULL, NULL},
    {"upload.tls.insecure_skip_verify", CFG_T_BOOL, CFG_SCOPE_GLOBAL, "false", 0, 0, 0, 1,
     G(upload.tls.insecure_skip_verify),
     "do not verify the server (logged as a warning at every start)", NULL, NULL},
    {"upload.basic_auth.username", CFG_T_STRING, CFG_SCOPE_GLOBAL, "", 1, 255, 0, 1,
     G(upload.basic_auth.username), "HTTP Basic auth user (Grafana Cloud)", NULL, NULL},
    {"upload.basic_auth.password_file", CFG_T_STRING, CFG_SCOPE_GLOBAL, "", 1, 4096, 0, 1,
     G(upload.basic_auth.password_file), "file holding the Basic auth password", NULL, NULL},
    {"upload.bearer_token_file", CFG_T_STRING, CFG_SCOPE_GLOBAL, "", 1, 4096, 0, 1,
     G(upload.bearer_token_file), "file holding a bearer token", NULL, NULL},
    {"upload.tenant_id", CFG_T_STRING, CFG_SCOPE_GLOBAL, "", 1, 255, 0, 1, G(upload.tenant_id),
     "X-Scope-OrgID header (multi-tenant servers)", cfg_upload_check_tenant, NULL},
    {"upload.headers", CFG_T_MAP, CFG_SCOPE_GLOBAL, "{}", 0, 32, 0, 1, G(upload.headers),
     "extra request headers", cfg_upload_check_header, NULL},
    {"upload.labels", CFG_T_MAP, CFG_SCOPE_GLOBAL, "{}", 0, 20, 0, 1, G(upload.labels),
     "static labels on every profile", cfg_upload_check_label, NULL},

    {"control.socket", CFG_T_STRING, CFG_SCOPE_GLOBAL, "", 1, 107, 0, 0, G(control.socket),
     "Unix socket (HTTP/1.1) for isoprof status, profile and metrics; \"\" = "
     "$RUNTIME_DIRECTORY/isoprof.sock under systemd, else <store.path>/control.sock",
     NULL, NULL},
    {"control.group", CFG_T_STRING, CFG_SCOPE_GLOBAL, "", 1, 32, 0, 0, G(control.group),
     "group that may use the control socket (mode 0660); \"\" = only the agent's user (0600)",
     cfg_check_group, NULL},

    {"metrics.listen", CFG_T_LISTEN, CFG_SCOPE_GLOBAL, "", 1, 300, 0, 0, G(metrics.listen),
     "loopback TCP address serving GET /metrics to Prometheus (127.0.0.0/8, [::1] or localhost, "
     "with the port); \"\" turns it off",
     cfg_check_loopback, NULL},

    {"log.level", CFG_T_ENUM, CFG_SCOPE_GLOBAL, "info", 0, 0, 0, 1, G(log.level),
     "debug, info, warn or error", NULL, cfg_log_level_names},
};

const size_t cfg_noptions = sizeof(cfg_options) / sizeof(cfg_options[0]);

const struct cfg_relation cfg_relations[] = {
    {"sampling.cpu.period", "sampling.cpu.duration", CFG_REL_AT_LEAST, NULL},
    {"upload.basic_auth.username", "upload.basic_auth.password_file", CFG_REL_NEEDS, NULL},
    {"upload.basic_auth.password_file", "upload.basic_auth.username", CFG_REL_NEEDS, NULL},
    {"upload.bearer_token_file", "upload.basic_auth", CFG_REL_EXCLUDES, NULL},
    {"upload.labels", "upload.api", CFG_REL_ENTRIES, cfg_upload_label_fits_api},
};

const size_t cfg_nrelations = sizeof(cfg_relations) / sizeof(cfg_relations[0]);

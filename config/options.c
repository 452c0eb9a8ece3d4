/*
 * options.c - the one table of configuration options, and the rules between
 * them.
 *
 * Adding an option is a row here and a field in struct cfg (or struct
 * cfg_target). The loader validates values against the bounds (and the
 * row's check, if any), the defaults come from `def` (parsed by the same
 * code as a file's value, so a default cannot escape its own bounds),
 * cfg_free releases string, map and list fields through the offset, and --help
 * and the example config are printed from the same rows.
 *
 * Rows of one section must be contiguous, and all TARGET rows must be
 * contiguous (and within them, the rows of a target's section such as
 * `threads`): the example config opens each section once, at its first
 * row. The unit tests load the example back, which catches a misplaced row.
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
_Static_assert(sizeof(enum cfg_cpu_mode) == sizeof(int), "enum cfg_cpu_mode is not int-sized");

/* In the order of the enum's values. */
const char *const cfg_log_level_names[] = {"debug", "info", "warn", "error", NULL};
const char *const cfg_upload_api_names[] = {"push", "ingest", NULL};
static const char *const cfg_store_on_damage_names[] = {"refuse", "move_aside", NULL};
const char *const cfg_cpu_mode_names[] = {"cold", "warm", "auto", NULL};

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
 * discovery.processes.executables: a base name, compared with the base name
 * of a process's executable, so a path can never match; say so, and which
 * name was probably meant.
 */
static const char *check_exe_name(const char *s, size_t len, int is_key, const char *shown,
                                  char *buf, size_t cap)
{
    (void)is_key;
    const char *slash = memchr(s, '/', len);
    if (slash == NULL)
        return NULL;
    const char *base = s + len;
    while (base > s && base[-1] != '/')
        base--;
    size_t blen = (size_t)(s + len - base);
    int plain = blen > 0 && blen <= 64; /* fit to quote as it is */
    for (size_t i = 0; i < blen && plain; i++)
        plain = (unsigned char)base[i] >= 0x20 && base[i] != 0x7f;
    if (plain)
        snprintf(buf, cap, "'%s' is not a base name (no '/'; as in '%.*s')", shown, (int)blen,
                 base);
    else
        snprintf(buf, cap, "'%s' is not a base name (no '/')", shown);
    return buf;
}

/*
 * discovery.processes.version_from: "package.json", or "env:" and a name
 * the shell would take as a variable's ([A-Za-z_][A-Za-z0-9_]*), so that a
 * typo is said here rather than found as a version that never comes.
 */
static const char *check_version_source(const char *s, size_t len, int is_key, const char *shown,
                                        char *buf, size_t cap)
{
    (void)is_key;
    if (len == 12 && memcmp(s, "package.json", 12) == 0)
        return NULL;
    if (len > 4 && memcmp(s, "env:", 4) == 0) {
        int ok = !(s[4] >= '0' && s[4] <= '9');
        for (size_t i = 4; i < len && ok; i++) {
            unsigned char ch = (unsigned char)s[i];
            ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_';
        }
        if (ok)
            return NULL;
        snprintf(buf, cap,
                 "'%s' does not name an environment variable (env:NAME, NAME of letters, digits "
                 "and '_', not starting with a digit)",
                 shown);
        return buf;
    }
    snprintf(buf, cap, "'%s' is not a version source (env:NAME or package.json)", shown);
    return buf;
}

/*
 * root and source_maps: absolute paths (they are read beneath the root,
 * and a relative path would depend on the daemon's working directory).
 */
static const char *check_abs_path(const char *s, size_t len, int is_key, const char *shown,
                                  char *buf, size_t cap)
{
    (void)is_key;
    if (len > 0 && s[0] == '/' && memchr(s, '\0', len) == NULL)
        return NULL;
    snprintf(buf, cap, "'%s' is not an absolute path", shown);
    return buf;
}

/*
 * A target's labels: those of upload.labels, and the bounds the store keeps
 * them in with each window (storage/store.h): a name of at most 64 bytes, a
 * value of 1 to 190, so that 16 of them always fit its 4096 bytes.
 */
#define TARGET_LABEL_NAME_MAX 64
#define TARGET_LABEL_VALUE_MAX 190
static const char *check_target_label(const char *s, size_t len, int is_key, const char *shown,
                                      char *buf, size_t cap)
{
    if (!is_key && len == 0)
        return "is empty";
    if (!is_key && len > TARGET_LABEL_VALUE_MAX)
        return "is longer than 190 bytes";
    if (is_key && len > TARGET_LABEL_NAME_MAX) {
        snprintf(buf, cap, "name '%.64s...' is longer than 64 bytes", s);
        return buf;
    }
    return cfg_upload_check_label(s, len, is_key, shown, buf, cap);
}

/*
 * discovery.processes.users: a numeric uid (0..4294967294; -1 is no uid),
 * or a user name as useradd takes one. Names are resolved by the daemon,
 * not here: a name unknown to this host is not an error in the file.
 */
static const char *check_user(const char *s, size_t len, int is_key, const char *shown, char *buf,
                              size_t cap)
{
    (void)is_key;
    size_t digits = 0;
    while (digits < len && s[digits] >= '0' && s[digits] <= '9')
        digits++;
    if (len > 0 && digits == len) {
        uint64_t v = 0;
        for (size_t i = 0; i < len && v <= UINT32_MAX; i++)
            v = v * 10 + (uint64_t)(s[i] - '0');
        if (v < UINT32_MAX)
            return NULL;
        snprintf(buf, cap, "'%s' is not a uid (0..4294967294)", shown);
        return buf;
    }
    if (len > 0 && s[0] == '-') {
        snprintf(buf, cap, "'%s' is not a user name (it starts with '-')", shown);
        return buf;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == '-')) {
            snprintf(buf, cap,
                     "'%s' is not a user name or uid (letters, digits, '_', '.' and '-' only)",
                     shown);
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

/*
 * A field left out of a row is 0 or NULL: no default (unset), no row it
 * takes its default from, no lower
 * bound (for a string: "" refused), no upper bound, not required,
 * restart-only (not reloadable), no check beyond the type's, no choices.
 */
const struct cfg_option cfg_options[] = {
    {.name = "store.path",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_GLOBAL,
     .def = CFG_DEFAULT_STORE_PATH,
     .max = 4096,
     .offset = G(store.path),
     .help = "directory of the LMDB store (created if missing)"},
    {.name = "store.max_size",
     .type = CFG_T_SIZE,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "1GiB",
     .min = MIB,
     .offset = G(store.max_size),
     .help = "budget of stored data; the oldest windows are evicted before it is reached"},
    {.name = "store.on_damage",
     .type = CFG_T_ENUM,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "refuse",
     .offset = G(store.on_damage),
     .help = "a store found damaged at start: refuse (exit status 3), or move_aside (into "
             "<store.path>/damaged-<UTC time>/, then start a new store)",
     .choices = cfg_store_on_damage_names},
    {.name = "store.pending_max",
     .type = CFG_T_SIZE,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "16MiB",
     .min = 16 * KIB,
     .max = 16 * MIB,
     .offset = G(store.pending_max),
     .help = "windows held in memory while the store cannot take them (a full disk), to be "
             "written when it can; past it the oldest are dropped and counted"},

    {.name = "inspector",
     .type = CFG_T_INSPECTOR,
     .scope = CFG_SCOPE_TARGET,
     .required = 1,
     .reloadable = 1,
     .offset = T(inspector),
     .help = "inspector endpoint, host:port or [v6]:port"},
    {.name = "worker",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_TARGET,
     .max = 255,
     .reloadable = 1,
     .offset = T(worker),
     .help = "worker label (default: the workerd service, else the script's file name)"},
    {.name = "version",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_TARGET,
     .max = 255,
     .reloadable = 1,
     .offset = T(version),
     .help = "version label (default: unknown)"},
    {.name = "memory_limit",
     .type = CFG_T_SIZE,
     .scope = CFG_SCOPE_TARGET,
     .def = "auto",
     .min = MIB,
     .reloadable = 1,
     .offset = T(memory_limit),
     .auto_ok = 1,
     .help = "the isolate's heap limit; memory near it flags an anomaly; auto: V8's "
             "heap_size_limit for a Node or Deno process (its --max-old-space-size, "
             "--max-semi-space-size, --max-heap-size, NODE_OPTIONS or DENO_V8_FLAGS, read "
             "from /proc, else V8's default for the host's memory), 128MiB for workerd"},
    {.name = "threads.enabled",
     .type = CFG_T_BOOL,
     .scope = CFG_SCOPE_TARGET,
     .def = "true",
     .reloadable = 1,
     .offset = T(threads.enabled),
     .help = "profile the target's worker threads (Node worker_threads), each as an isolate of "
             "its own; false: the main thread only"},
    {.name = "threads.memory_limit",
     .type = CFG_T_SIZE,
     .scope = CFG_SCOPE_TARGET,
     .def_row = "memory_limit",
     .min = MIB,
     .reloadable = 1,
     .offset = T(threads.memory_limit),
     .auto_ok = 1,
     .help = "a worker thread's heap limit (its Worker's resourceLimits); memory near it flags "
             "an anomaly; unset: the target's memory_limit; auto: its process's V8 limit "
             "(what a Worker without resourceLimits gets: a Worker's own resourceLimits are "
             "not visible outside it, so set them here)"},
    {.name = "threads.max",
     .type = CFG_T_COUNT,
     .scope = CFG_SCOPE_TARGET,
     .def = "64",
     .min = 1,
     .max = 1024,
     .reloadable = 1,
     .offset = T(threads.max),
     .help = "most worker threads of the target attached at once"},
    {.name = "root",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_TARGET,
     .max = 4095,
     .reloadable = 1,
     .offset = T(root),
     .help = "prefixed to every path read for the target's source maps (a bind mount of its "
             "container's files, or /proc/PID/root); unset: /",
     .check = check_abs_path},
    {.name = "source_maps",
     .type = CFG_T_STRLIST,
     .scope = CFG_SCOPE_TARGET,
     .def = "[]",
     .max = 4095,
     .reloadable = 1,
     .offset = T(source_maps),
     .help = "directories searched for a script's source map (<script>.map, or a map whose "
             "'file' names the script) when the script names none and has none beside it",
     .check = check_abs_path},
    {.name = "labels",
     .type = CFG_T_MAP,
     .scope = CFG_SCOPE_TARGET,
     .def = "{}",
     .max = 16,
     .reloadable = 1,
     .offset = T(labels),
     .help = "labels sent with every profile of the target (service_repository, "
             "service_git_ref, service_root_path: Pyroscope's links to the code); one named "
             "like an upload.labels entry replaces it for this target; names <= 64 bytes, "
             "values 1..190 bytes",
     .check = check_target_label},

    {.name = "source_maps_cache",
     .type = CFG_T_SIZE,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "32MiB",
     .min = 1 * MIB,
     .max = 4096 * MIB,
     .reloadable = 1,
     .offset = G(source_maps_cache),
     .help = "memory for parsed source maps, shared by all targets; the least recently used "
             "are evicted; a map larger than this alone is not used"},
    {.name = "source_maps_max_file",
     .type = CFG_T_SIZE,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "64MiB",
     .min = 1 * MIB,
     .max = 1024 * MIB,
     .reloadable = 1,
     .offset = G(source_maps_max_file),
     .help = "source map files larger than this are refused"},
    {.name = "source_maps_cpu",
     .type = CFG_T_FRACTION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "2%",
     .min = 100,
     .max = PPM,
     .reloadable = 1,
     .offset = G(source_maps_cpu),
     .help = "each target's share of one core for its source-map lookups (reading scripts and "
             "maps, parsing, lookups), holding 100 s of it at most; past it the target's frames "
             "stay unmapped until it refills"},

    {.name = "discovery.interval",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "5s",
     .min = 100 * NS_MS,
     .max = 3600 * NS_S,
     .reloadable = 1,
     .offset = G(discovery.interval_ns),
     .help = "how often each endpoint's /json/list is polled, and /proc scanned when "
             "discovery.processes is enabled"},
    {.name = "discovery.processes.enabled",
     .type = CFG_T_BOOL,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "false",
     .reloadable = 1,
     .offset = G(discovery.processes.enabled),
     .help = "scan /proc for runtime processes whose inspector can be profiled"},
    {.name = "discovery.processes.executables",
     .type = CFG_T_STRLIST,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "[node]",
     .max = 255,
     .reloadable = 1,
     .offset = G(discovery.processes.executables),
     .help = "base names of the executables to look at",
     .check = check_exe_name},
    {.name = "discovery.processes.activate",
     .type = CFG_T_BOOL,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "false",
     .reloadable = 1,
     .offset = G(discovery.processes.activate),
     .help = "send SIGUSR1 to opted-in Node processes (--inspect-port) to open their inspector"},
    {.name = "discovery.processes.users",
     .type = CFG_T_STRLIST,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "[]",
     .max = 32,
     .reloadable = 1,
     .offset = G(discovery.processes.users),
     .help = "only processes of these users (names or numeric uids); [] = any user",
     .check = check_user},
    {.name = "discovery.processes.version_from",
     .type = CFG_T_STRLIST,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "[]",
     .max = 128,
     .reloadable = 1,
     .offset = G(discovery.processes.version_from),
     .help = "where a process's version comes from when its target names none, tried in order: "
             "env:NAME (a variable of its environment), package.json (the nearest above its "
             "script); [] = the version stays unknown",
     .check = check_version_source},

    {.name = "sampling.cpu.duration",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "10s",
     .min = 100 * NS_MS,
     .max = 3600 * NS_S,
     .reloadable = 1,
     .offset = G(sampling.cpu.duration_ns),
     .help = "length of one CPU profile window"},
    {.name = "sampling.cpu.period",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "60s",
     .min = 100 * NS_MS,
     .max = 86400 * NS_S,
     .reloadable = 1,
     .offset = G(sampling.cpu.period_ns),
     .help = "one window per isolate every period (>= duration)"},
    {.name = "sampling.cpu.interval",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "10ms",
     .min = 100 * NS_US,
     .max = NS_S,
     .reloadable = 1,
     .offset = G(sampling.cpu.interval_ns),
     .help = "V8 sampling interval within a window"},
    {.name = "sampling.cpu.jitter",
     .type = CFG_T_FRACTION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "10%",
     .max = PPM / 2,
     .reloadable = 1,
     .offset = G(sampling.cpu.jitter),
     .help = "random shift of each window, as a share of the period (10% or 0.1)"},
    {.name = "sampling.cpu.max_concurrent",
     .type = CFG_T_COUNT,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "4",
     .min = 1,
     .max = 1024,
     .reloadable = 1,
     .offset = G(sampling.cpu.max_concurrent),
     .help = "CPU windows at once on this host; more are delayed"},
    {.name = "sampling.cpu.mode",
     .type = CFG_T_ENUM,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "auto",
     .reloadable = 1,
     .offset = G(sampling.cpu.mode),
     .help = "cold: V8's profiler made and torn down for every window; warm: kept alive "
             "between windows by a console profile the agent starts (Runtime.evaluate of "
             "console.profile), so a window starts and stops in ~1 ms whatever the app's "
             "size, at sampling.cpu.interval; auto: warm where cold windows cost more "
             "than the continuous sampler",
     .choices = cfg_cpu_mode_names},

    {.name = "sampling.heap.interval",
     .type = CFG_T_SIZE,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "512KiB",
     .min = 1024,
     .max = 64 * MIB,
     .offset = G(sampling.heap.interval),
     .help = "V8 heap sampling interval (average bytes between samples); set at attach"},
    {.name = "sampling.heap.period",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "5m",
     .min = NS_S,
     .max = 86400 * NS_S,
     .reloadable = 1,
     .offset = G(sampling.heap.period_ns),
     .help = "one heap window per isolate every period (each forces a full GC)"},
    {.name = "sampling.budget.pause_share",
     .type = CFG_T_FRACTION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "0.1%",
     .min = 1,
     .max = PPM,
     .reloadable = 1,
     .offset = G(sampling.budget.pause_share),
     .help = "share of an isolate's wall time its scheduled windows may stall it; "
             "costlier isolates get longer, rarer windows (100% = no limit)"},
    {.name = "sampling.budget.max_pause",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "100ms",
     .min = NS_MS,
     .max = 3600 * NS_S,
     .reloadable = 1,
     .offset = G(sampling.budget.max_pause_ns),
     .help = "the longest single stall the schedule plans: windows are lengthened only while "
             "their Profiler.stop stays under it"},
    {.name = "sampling.budget.max_duration",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "60s",
     .min = 100 * NS_MS,
     .max = 3600 * NS_S,
     .reloadable = 1,
     .offset = G(sampling.budget.max_duration_ns),
     .help = "the longest a CPU window is lengthened to when the budget makes windows rarer"},
    {.name = "sampling.budget.horizon",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "1m",
     .min = NS_S,
     .max = 3600 * NS_S,
     .reloadable = 1,
     .offset = G(sampling.budget.horizon_ns),
     .help = "pause_share is a cap over any span this long from attach, not an average: a "
             "scheduled window waits until it fits"},
    {.name = "sampling.memory_poll",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "1s",
     .min = 50 * NS_MS,
     .max = 3600 * NS_S,
     .reloadable = 1,
     .offset = G(sampling.memory_poll_ns),
     .help = "how often each isolate's heap usage is read (no GC)"},

    {.name = "anomaly.memory.threshold",
     .type = CFG_T_FRACTION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "90%",
     .min = PPM / 100,
     .max = PPM,
     .reloadable = 1,
     .offset = G(anomaly.memory.threshold),
     .help = "memory_near_limit: used heap at or above this share of the isolate's limit "
             "(memory_limit)"},
    {.name = "anomaly.memory.heap_period",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "10s",
     .min = NS_S,
     .max = 3600 * NS_S,
     .reloadable = 1,
     .offset = G(anomaly.memory.heap_period_ns),
     .help = "while memory stays near the limit, the first wait between the episode's heap "
             "windows; each wait after is twice the one before, up to sampling.heap.period"},
    {.name = "anomaly.memory.max_share",
     .type = CFG_T_FRACTION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "1%",
     .min = 1,
     .max = PPM,
     .reloadable = 1,
     .offset = G(anomaly.memory.max_share),
     .help = "the share of a memory episode's time its heap windows (a full GC each) may stall "
             "the isolate; one due past it waits (the first is always taken)"},
    {.name = "anomaly.memory.growth.enabled",
     .type = CFG_T_BOOL,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "true",
     .reloadable = 1,
     .offset = G(anomaly.memory.growth.enabled),
     .help = "memory_growth: flag an isolate whose heap after GC grows steadily over "
             "growth.window and would reach its limit within growth.horizon"},
    {.name = "anomaly.memory.growth.window",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "10m",
     .min = 60 * NS_S,
     .max = 86400 * NS_S,
     .reloadable = 1,
     .offset = G(anomaly.memory.growth.window_ns),
     .help = "the span over which the floor of the used heap must have grown, in each of its "
             "quarters; it is read in 32 buckets, so it must hold at least 32 memory polls "
             "(sampling.memory_poll), or it is never judged"},
    {.name = "anomaly.memory.growth.horizon",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "24h",
     .min = NS_S,
     .max = 30 * 86400 * NS_S,
     .reloadable = 1,
     .offset = G(anomaly.memory.growth.horizon_ns),
     .help = "memory_growth flags a growth whose trend reaches the limit within this"},
    {.name = "anomaly.memory.snapshot",
     .type = CFG_T_BOOL,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "false",
     .reloadable = 1,
     .offset = G(anomaly.memory.snapshot),
     .help = "once per memory episode (memory_near_limit or memory_growth), a heap snapshot of the "
             "isolate and the retained "
             "profile made from it (what holds the memory); the target stops while V8 writes it "
             "(about 10 s at 128 MiB of heap) and its RSS grows by 7 to 9 times its used heap, "
             "which it keeps"},
    {.name = "anomaly.memory.snapshot_max_heap",
     .type = CFG_T_SIZE,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "512MiB",
     .min = MIB,
     .reloadable = 1,
     .offset = G(anomaly.memory.snapshot_max_heap),
     .help = "no snapshot of an isolate whose used heap is above this (nor while the host's "
             "MemAvailable is under 9 x the used heap + 64 MiB)"},
    {.name = "anomaly.memory.snapshot_keep",
     .type = CFG_T_COUNT,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "3",
     .min = 1,
     .max = 100,
     .reloadable = 1,
     .offset = G(anomaly.memory.snapshot_keep),
     .help = "raw snapshots kept per worker/version (the oldest unpinned go first); they count "
             "against store.max_size"},
    {.name = "anomaly.cpu_interval",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "1ms",
     .min = 100 * NS_US,
     .max = NS_S,
     .reloadable = 1,
     .offset = G(anomaly.cpu_interval_ns),
     .help = "sampling interval of the CPU window an anomaly triggers"},
    {.name = "anomaly.cooldown",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "2m",
     .min = NS_S,
     .max = 86400 * NS_S,
     .reloadable = 1,
     .offset = G(anomaly.cooldown_ns),
     .help =
         "an episode ends this long after its measure fell back; triggers per isolate at most this "
         "often"},
    {.name = "anomaly.retention",
     .type = CFG_T_COUNT,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "4",
     .min = 1,
     .max = 1000,
     .offset = G(anomaly.retention),
     .help = "windows an anomaly pins are kept this many times as long as the others"},
    {.name = "anomaly.latency.listen",
     .type = CFG_T_LISTEN,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "127.0.0.1:8125",
     .min = 1,
     .max = 300,
     .offset = G(anomaly.latency.listen),
     .help =
         "loopback UDP address for DogStatsD timings (127.0.0.0/8, [::1] or localhost, with the "
         "port); \"\" turns it off",
     .check = cfg_check_loopback},
    {.name = "anomaly.latency.window",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "10s",
     .min = 100 * NS_MS,
     .max = 3600 * NS_S,
     .offset = G(anomaly.latency.window_ns),
     .help = "P999 is computed over windows of this length"},
    {.name = "anomaly.latency.factor",
     .type = CFG_T_FRACTION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "3",
     .min = PPM + PPM / 10,
     .max = 1000 * PPM,
     .offset = G(anomaly.latency.factor),
     .help = "latency_p999_spike: P999 above this many times its baseline"},
    {.name = "anomaly.latency.min",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "50ms",
     .max = 3600 * NS_S,
     .offset = G(anomaly.latency.min_ns),
     .help = "latency_p999_spike: and above this"},
    {.name = "anomaly.latency.min_count",
     .type = CFG_T_COUNT,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "500",
     .min = 1,
     .offset = G(anomaly.latency.min_count),
     .help = "latency_p999_spike: and at least this many observations in the window"},
    {.name = "anomaly.latency.worker_tag",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "worker",
     .max = 200,
     .offset = G(anomaly.latency.worker_tag),
     .help = "DogStatsD tag naming the worker"},
    {.name = "anomaly.latency.version_tag",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "version",
     .max = 200,
     .offset = G(anomaly.latency.version_tag),
     .help = "DogStatsD tag naming the version"},

    {.name = "anomaly.regression.enabled",
     .type = CFG_T_BOOL,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "true",
     .reloadable = 1,
     .offset = G(anomaly.regression.enabled),
     .help = "version_regression: keep each worker's CPU profile per version and judge a new "
             "version against the one before it, naming the functions whose share of the CPU "
             "grew"},
    {.name = "anomaly.regression.min_samples",
     .type = CFG_T_COUNT,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "1000",
     .min = 100,
     .max = 100000000,
     .reloadable = 1,
     .offset = G(anomaly.regression.min_samples),
     .help = "non-idle CPU samples each version needs before it is judged (one busy 10 s window "
             "at 10 ms)"},
    {.name = "anomaly.regression.min_windows",
     .type = CFG_T_COUNT,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "3",
     .min = 2,
     .max = 1000,
     .reloadable = 1,
     .offset = G(anomaly.regression.min_windows),
     .help = "CPU windows each version needs before it is judged: how much a function's share "
             "moves from window to window is measured, not assumed"},
    {.name = "anomaly.regression.min_delta",
     .type = CFG_T_FRACTION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "2%",
     .min = 1,
     .max = PPM / 2,
     .reloadable = 1,
     .offset = G(anomaly.regression.min_delta),
     .help = "a function is flagged only if its share of the non-idle CPU grew by at least this "
             "much (absolute: 2% is two points)"},
    {.name = "anomaly.regression.min_ratio",
     .type = CFG_T_FRACTION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "1.1",
     .min = PPM,
     .max = 100 * PPM,
     .reloadable = 1,
     .offset = G(anomaly.regression.min_ratio),
     .help = "... and by at least this factor (1.1: +10 % of its share)"},
    {.name = "anomaly.regression.alpha",
     .type = CFG_T_FRACTION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "0.01%",
     .min = 1,
     .max = PPM / 10,
     .reloadable = 1,
     .offset = G(anomaly.regression.alpha),
     .help = "the chance that one comparison flags a function by chance (two-proportion tests, "
             "Holm-corrected over every function compared)"},
    {.name = "anomaly.regression.max_versions",
     .type = CFG_T_COUNT,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "8",
     .min = 2,
     .max = 1000,
     .reloadable = 1,
     .offset = G(anomaly.regression.max_versions),
     .help = "per-version aggregates kept per worker, the one seen last longest ago dropped "
             "first; kept apart from the windows, so a replaced version stays a baseline"},
    {.name = "anomaly.regression.extra_windows",
     .type = CFG_T_COUNT,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "6",
     .max = 1000,
     .reloadable = 1,
     .offset = G(anomaly.regression.extra_windows),
     .help = "CPU windows at anomaly.cpu_interval a new version's isolates may take beyond the "
             "schedule until it has min_samples; each waits for room in the pause budget"},
    {.name = "anomaly.regression.max_functions",
     .type = CFG_T_COUNT,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "4096",
     .min = 16,
     .max = 1000000,
     .reloadable = 1,
     .offset = G(anomaly.regression.max_functions),
     .help = "functions one version's aggregate keeps; the least sampled fold into (other) "
             "past it"},
    {.name = "anomaly.regression.warmup",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "30s",
     .max = 3600 * NS_S,
     .reloadable = 1,
     .offset = G(anomaly.regression.warmup_ns),
     .help = "CPU windows that start this soon after an isolate attached are not folded into "
             "its version: a new process compiles and collects more while it warms up, which "
             "is not its code's doing"},

    {.name = "upload.url",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "",
     .min = 1,
     .max = 2048,
     .offset = G(upload.url),
     .help = "Pyroscope server base URL (http:// or https://); \"\" turns upload off",
     .check = cfg_upload_check_url},
    {.name = "upload.api",
     .type = CFG_T_ENUM,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "push",
     .reloadable = 1,
     .offset = G(upload.api),
     .help = "push.v1 Push API, or the legacy /ingest endpoint",
     .choices = cfg_upload_api_names},
    {.name = "upload.timeout",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "10s",
     .min = 100 * NS_MS,
     .max = 600 * NS_S,
     .reloadable = 1,
     .offset = G(upload.timeout_ns),
     .help = "one request, connection included"},
    {.name = "upload.backoff.min",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "500ms",
     .min = 10 * NS_MS,
     .max = 600 * NS_S,
     .reloadable = 1,
     .offset = G(upload.backoff.min_ns),
     .help = "the first retry's delay cap after a failed request (full jitter, doubling)"},
    {.name = "upload.backoff.max",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "60s",
     .min = 10 * NS_MS,
     .max = 3600 * NS_S,
     .reloadable = 1,
     .offset = G(upload.backoff.max_ns),
     .help = "the longest wait between retries, a server's Retry-After included"},
    {.name = "upload.batch.max_profiles",
     .type = CFG_T_COUNT,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "32",
     .min = 1,
     .max = 1024,
     .reloadable = 1,
     .offset = G(upload.batch.max_profiles),
     .help = "profiles a request at most"},
    {.name = "upload.batch.max_bytes",
     .type = CFG_T_SIZE,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "1MiB",
     .min = KIB,
     .max = 64 * MIB,
     .reloadable = 1,
     .offset = G(upload.batch.max_bytes),
     .help = "uncompressed profile bytes a request at most"},
    {.name = "upload.batch.max_delay",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "10s",
     .min = 10 * NS_MS,
     .max = 3600 * NS_S,
     .reloadable = 1,
     .offset = G(upload.batch.max_delay_ns),
     .help = "a batch that is not full is sent this long after its oldest window was queued"},
    {.name = "upload.max_profile_size",
     .type = CFG_T_SIZE,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "4MiB",
     .min = KIB,
     .max = 256 * MIB,
     .reloadable = 1,
     .offset = G(upload.max_profile_size),
     .help = "a larger profile is rejected without sending (the server's limit)"},
    {.name = "upload.max_age",
     .type = CFG_T_DURATION,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "1h",
     .min = 10 * NS_S,
     .max = 30 * 86400 * NS_S,
     .reloadable = 1,
     .offset = G(upload.max_age_ns),
     .help = "a window older is not sent but marked expired (the server's reject-older-than)"},
    {.name = "upload.max_rate",
     .type = CFG_T_SIZE,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "4KiB",
     .min = 0,
     .max = 1024 * MIB,
     .reloadable = 1,
     .offset = G(upload.max_rate),
     .help = "uncompressed profile bytes a second a backlog drains at, per host, on top of "
             "the host's own production (measured over 10 minutes), which always goes as fast "
             "as it is made (0 = no limit)"},
    {.name = "upload.isolate_label",
     .type = CFG_T_BOOL,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "false",
     .reloadable = 1,
     .offset = G(upload.isolate_label),
     .help = "send the isolate label (the process, stable across agent restarts): a series per "
             "process instead of per host"},
    {.name = "upload.host",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "",
     .min = 1,
     .max = 255,
     .reloadable = 1,
     .offset = G(upload.host),
     .help = "the host label; \"\" = the machine's host name"},
    {.name = "upload.tls.ca_file",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "",
     .min = 1,
     .max = 4096,
     .reloadable = 1,
     .offset = G(upload.tls.ca_file),
     .help = "PEM bundle to verify the server with; \"\" = the system's"},
    {.name = "upload.tls.insecure_skip_verify",
     .type = CFG_T_BOOL,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "false",
     .reloadable = 1,
     .offset = G(upload.tls.insecure_skip_verify),
     .help = "do not verify the server (logged as a warning at every start)"},
    {.name = "upload.basic_auth.username",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "",
     .min = 1,
     .max = 255,
     .reloadable = 1,
     .offset = G(upload.basic_auth.username),
     .help = "HTTP Basic auth user (Grafana Cloud)"},
    {.name = "upload.basic_auth.password_file",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "",
     .min = 1,
     .max = 4096,
     .reloadable = 1,
     .offset = G(upload.basic_auth.password_file),
     .help = "file holding the Basic auth password"},
    {.name = "upload.bearer_token_file",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "",
     .min = 1,
     .max = 4096,
     .reloadable = 1,
     .offset = G(upload.bearer_token_file),
     .help = "file holding a bearer token"},
    {.name = "upload.tenant_id",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "",
     .min = 1,
     .max = 255,
     .reloadable = 1,
     .offset = G(upload.tenant_id),
     .help = "X-Scope-OrgID header (multi-tenant servers)",
     .check = cfg_upload_check_tenant},
    {.name = "upload.headers",
     .type = CFG_T_MAP,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "{}",
     .max = 32,
     .reloadable = 1,
     .offset = G(upload.headers),
     .help = "extra request headers",
     .check = cfg_upload_check_header},
    {.name = "upload.labels",
     .type = CFG_T_MAP,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "{}",
     .max = 20,
     .reloadable = 1,
     .offset = G(upload.labels),
     .help = "static labels on every profile",
     .check = cfg_upload_check_label},

    {.name = "control.socket",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "",
     .min = 1,
     .max = 107,
     .offset = G(control.socket),
     .help = "Unix socket (HTTP/1.1) for isoprof status, profile and metrics; \"\" = "
             "$RUNTIME_DIRECTORY/isoprof.sock under systemd, else <store.path>/control.sock"},
    {.name = "control.group",
     .type = CFG_T_STRING,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "",
     .min = 1,
     .max = 32,
     .offset = G(control.group),
     .help =
         "group that may use the control socket (mode 0660); \"\" = only the agent's user (0600)",
     .check = cfg_check_group},

    {.name = "metrics.listen",
     .type = CFG_T_LISTEN,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "",
     .min = 1,
     .max = 300,
     .offset = G(metrics.listen),
     .help = "loopback TCP address serving GET /metrics to Prometheus (127.0.0.0/8, [::1] or "
             "localhost, "
             "with the port); \"\" turns it off",
     .check = cfg_check_loopback},

    {.name = "log.level",
     .type = CFG_T_ENUM,
     .scope = CFG_SCOPE_GLOBAL,
     .def = "info",
     .reloadable = 1,
     .offset = G(log.level),
     .help = "debug, info, warn or error",
     .choices = cfg_log_level_names},
};

const size_t cfg_noptions = sizeof(cfg_options) / sizeof(cfg_options[0]);

const struct cfg_relation cfg_relations[] = {
    {.name = "sampling.cpu.period", .other = "sampling.cpu.duration", .kind = CFG_REL_AT_LEAST},
    {.name = "upload.backoff.max", .other = "upload.backoff.min", .kind = CFG_REL_AT_LEAST},
    {.name = "upload.basic_auth.username",
     .other = "upload.basic_auth.password_file",
     .kind = CFG_REL_NEEDS},
    {.name = "upload.basic_auth.password_file",
     .other = "upload.basic_auth.username",
     .kind = CFG_REL_NEEDS},
    {.name = "upload.bearer_token_file", .other = "upload.basic_auth", .kind = CFG_REL_EXCLUDES},
    {.name = "upload.labels",
     .other = "upload.api",
     .kind = CFG_REL_ENTRIES,
     .entry_rule = cfg_upload_label_fits_api},
    {.name = "discovery.processes.executables",
     .other = "discovery.processes.enabled",
     .kind = CFG_REL_NONEMPTY},
};

const size_t cfg_nrelations = sizeof(cfg_relations) / sizeof(cfg_relations[0]);

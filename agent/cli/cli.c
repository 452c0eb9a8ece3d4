/*
 * isoprof - reads an isoprof store: list windows, export pprof, show the
 * top functions, inspect the store. Read-only transactions only, so it
 * works while isoprofd writes the same store. status, profile and metrics
 * ask a running isoprofd instead, over its control socket (HTTP/1.1 on a
 * Unix socket, libcurl easy: blocking is fine here).
 *
 * Exit codes: 0 ok, 1 nothing matched, 2 usage or store error (one line on
 * stderr saying why).
 */
#include "config.h"
#include "flamegraph.h"
#include "guard.h"
#include "pprof.h"
#include "replay.h"
#include "store.h"

#include "base.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

/* The agent's JSON answers nest a few levels; deeper is not the agent. */
#define CLI_JSON_MAX_DEPTH 32
#define EXIT_NOMATCH 1
#define EXIT_USAGE 2
#define CLI_MAX_MERGE 100000
/* The window types, as messages name them (store_type_name's). */
#define CLI_TYPES_OR "cpu, heap, retained or snapshot"
_Static_assert(STORE_TYPE_MAX == 4, "a new window type: update CLI_TYPES_OR and usage()");
/* --pid: Linux's largest pid (PID_MAX_LIMIT on 64-bit). */
#define CLI_PID_MAX 4194304u
/* store check: the longest its child may take (reading every page and
 * inflating every window). */
#define CLI_CHECK_TIMEOUT_MS (30ull * 60 * 1000)

struct cli {
    const char *store_path;
    const char *config_path; /* --config: where store.path is read when --store is not given */
    struct store_filter f;
    const char *id;
    const char *out;
    int json;
    long top_n;
    const char *anomaly_id;         /* export --anomaly ID */
    struct store_anomaly_filter af; /* anomalies */
    const char *format;             /* export --format */
    double fold;                    /* flamegraph --fold, a share */
    struct store_filter bf;         /* flamegraph: the base set of a diff */
    int diff;                       /* a --base-* option was given */
};

/* Which command parse_args reads for: options valid for it. */
enum {
    ARG_ID = 1,
    ARG_OUT = 2,
    ARG_JSON = 4,
    ARG_N = 8,
    ARG_PINNED = 16,
    ARG_ANOMALY_ID = 32,
    ARG_KIND = 64,
    ARG_FORMAT = 128,
    ARG_FLAME = 256,
    ARG_PID = 512
};

__attribute__((format(printf, 1, 2))) static int die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "isoprof: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return EXIT_USAGE;
}

/* usage() and parse_ctl_args's --interval message spell the on-demand
 * limits out. */
_Static_assert(CFG_OD_SECONDS_MAX == 3600u && CFG_OD_INTERVAL_MIN_NS == 100000ull &&
                   CFG_OD_INTERVAL_MAX_NS == 1000000000ull,
               "the on-demand limits changed: update usage() and the --interval message");

/* The installed config (system_config() below), from the build. */
#ifndef ISOPROF_SYSTEM_CONFIG
#error "ISOPROF_SYSTEM_CONFIG (the installed config's path) is set by agent/cli/CMakeLists.txt"
#endif

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: isoprof windows   [--store DIR] [FILTERS] [--anomaly [KIND|ID]] [--json]\n"
        "       isoprof export    [--store DIR] (--id ID | --anomaly ID --type T | FILTERS) [-o "
        "FILE]\n"
        "       isoprof top       [--store DIR] [FILTERS] [-n 20]\n"
        "       isoprof flamegraph [--store DIR] [FILTERS] [BASE] [--fold PCT] [-o FILE.html]\n"
        "       isoprof anomalies [--store DIR] [--kind K] [--worker W] [--version V] [--thread "
        "T]\n"
        "                         [--since T] [--until T] [--json]\n"
        "       isoprof store     stat|check [--store DIR]\n"
        "       isoprof status    [--socket S] [--json]\n"
        "       isoprof profile   --worker W [--version V] [--thread T | --isolate I]\n"
        "                         --type cpu|heap|snapshot\n"
        "                         [--seconds 10] [--interval 1ms] [--all] [-o FILE] [--socket S]\n"
        "       isoprof metrics   [--socket S]\n"
        "       isoprof upload    --since T [FILTERS] [--config FILE] [--store DIR] [--json]\n"
        "\n"
        "The store DIR: --store, else $ISOPROF_STORE, else store.path of --config FILE or of\n"
        "the system's config (when it exists), else ./isoprof-data (isoprofd's default). The\n"
        "system's config: $ISOPROF_CONFIG if set, else " ISOPROF_SYSTEM_CONFIG ".\n"
        "\n"
        "Reads the windows isoprofd stored. FILTERS:\n"
        "  --worker W      only worker W          --version V   only version V\n"
        "  --thread T      only thread T: main, or a worker thread's label (its Worker's\n"
        "                  name option, else its script's file name or worker, then\n"
        "                  #<threadId>: resize.js#7)\n"
        "  --pid N         only the isolates of process N (1..4194304; windows stored\n"
        "                  without a pid never match)\n"
        "  --type T        only windows of type T: cpu, heap, retained (what the objects of\n"
        "                  a heap snapshot retain, as pprof) or snapshot (the heap snapshot)\n"
        "  --since T       windows starting at or after T\n"
        "  --until T       windows starting before T\n"
        "T is RFC 3339 (2026-12-01T10:00:00Z, offsets and fractions allowed) or relative to\n"
        "now (-15m, -2h, -7d).\n"
        "\n"
        "windows    one line per window (an aligned table, or with --json one JSON object per\n"
        "           line: id, worker, version, thread, pid (0: unknown), container (only when\n"
        "           known), labels (the target's, only when it has some), isolate, runtime,\n"
        "           type, start, end, samples, bytes and raw_bytes (stored, and uncompressed:\n"
        "           the pprof, or a snapshot's JSON), frames_mapped and frames_unmapped (the\n"
        "           frames mapped through source maps, and those that could have been but\n"
        "           were not), anomaly, pinned, memory, upload); --anomaly [KIND]: only the\n"
        "           windows anomalies (of that kind) keep as evidence; --anomaly ID: those\n"
        "           anomaly ID keeps\n"
        "export     one window (--id), the window of --type an anomaly pinned last before its\n"
        "           end (--anomaly ID: for oom_suspected the last profile before the death), or\n"
        "           all matching windows of one type merged, to FILE or stdout. --format:\n"
        "             pprof       gzip'd pprof (the default; read it with 'go tool pprof')\n"
        "             folded      one line a stack, 'root;...;leaf COUNT' (flamegraph.pl,\n"
        "                         inferno); a frame is 'name (file:line)'; CPU counts samples,\n"
        "                         heap bytes\n"
        "             cpuprofile  Chrome DevTools / speedscope JSON (CPU windows only; the\n"
        "                         samples' order is synthetic, the totals exact)\n"
        "             raw         a snapshot window as it was taken: the V8 .heapsnapshot\n"
        "                         JSON that Chrome DevTools' Memory panel loads (the only\n"
        "                         format of a snapshot, and its default; one window, never\n"
        "                         merged; streamed, never to a terminal)\n"
        "top        flat and cumulative share per function over the matching windows (a\n"
        "           snapshot window holds no profile: export it, or read its retained window)\n"
        "flamegraph the matching windows merged (or one: --id, --anomaly ID --type T) as one\n"
        "           self-contained HTML page that opens in any browser, offline: a flame graph\n"
        "           (click to zoom, search, tooltips), a table of functions by self and total,\n"
        "           and what was merged. Frames under PCT %% of the total (--fold, default\n"
        "           0.01; 0 keeps all) are folded into one '(folded)' frame a parent.\n"
        "           BASE makes it a diff against a second set of windows: the FILTERS with\n"
        "           --base-worker W, --base-version V, --base-since T or --base-until T in\n"
        "           place of their own; frames are coloured by the change in their share\n"
        "           (red grew, blue shrank) beside a table of the biggest changes. E.g.\n"
        "             isoprof flamegraph --store DIR --worker api --version v2 \\\n"
        "                 --base-version v1 -o v1-to-v2.html\n"
        "             isoprof flamegraph --store DIR --since -1h --base-since -2h \\\n"
        "                 --base-until -1h -o last-hour.html\n"
        "           Written to FILE, or stdout when it is not a terminal\n"
        "anomalies  one line per anomaly (with --json one object per line: id, kind, worker,\n"
        "           version, thread, isolate, time, end, open, value, threshold, unit,\n"
        "           limit and limit_source (memory kinds; null otherwise), windows);\n"
        "           KIND is memory_near_limit, memory_growth, oom_suspected or\n"
        "           latency_p999_spike\n"
        "store      stat: counts, sizes, schema, source maps, upload outbox; check: verify\n"
        "           every record and index\n"
        "\n"
        "These ask a running isoprofd over its control socket:\n"
        "status     targets (state, memory, last windows, open anomaly), schedule, store,\n"
        "           outbox and uptime; --json: the raw JSON of GET /status\n"
        "profile    take a window now and write its gzip'd pprof to FILE or stdout (never a\n"
        "           terminal); the window is also stored, marked on_demand. --seconds 1..3600\n"
        "           (cpu), --interval 100us..1s (default: sampling.cpu.interval); the main\n"
        "           thread unless --thread names a worker thread (or --isolate an isolate);\n"
        "           several isolates of the worker: name one with --isolate, or --all for one\n"
        "           merged profile. A progress line goes to stderr when it is a terminal.\n"
        "           --type snapshot: a heap snapshot of one isolate (it stops while V8 writes\n"
        "           it); the answer is its retained profile (what holds the memory), and the\n"
        "           raw snapshot stays in the store (export --type snapshot writes it)\n"
        "metrics    the agent's own Prometheus metrics (GET /metrics)\n"
        "upload     send the matching stored windows (cpu, heap, retained) to the server of\n"
        "           the config's upload section again, whatever their upload state (a\n"
        "           backfill once the server's acceptance window was raised; windows that\n"
        "           expired or were refused); upload.max_age does not apply, the outbox is\n"
        "           not touched. Prints how many were accepted and how many refused; exit\n"
        "           status 0 when all were accepted, 1 otherwise\n"
        "The socket S: --socket, else $ISOPROF_SOCKET, else $RUNTIME_DIRECTORY/isoprof.sock,\n"
        "else DIR/control.sock with --store DIR, else /run/isoprof/isoprof.sock (the first\n"
        "that exists).\n"
        "\n"
        "Exit status: 0 ok, 1 nothing matched, 2 usage or store error; for status, profile\n"
        "and metrics 1 is an unknown worker or several isolates, 2 an agent that cannot be\n"
        "reached or answers an error.\n");
}

/* --- time --- */

static int parse_time(const char *s, uint64_t *ns)
{
    uint64_t now = isoprof_now_wall_ns();
    if (strcmp(s, "now") == 0) {
        *ns = now;
        return 0;
    }
    if (s[0] == '-' || s[0] == '+') {
        uint64_t d;
        const char *body = s + 1;
        char buf[64];
        size_t len = strlen(body);
        if (len == 0 || len >= sizeof(buf))
            return -EINVAL;
        memcpy(buf, body, len + 1);
        if (buf[len - 1] == 'd') { /* days are not a config unit; the CLI takes them */
            char *end;
            double days = strtod(buf, &end);
            if (end != buf + len - 1 || days < 0 || days > 36500)
                return -EINVAL;
            d = (uint64_t)(days * 86400.0 * 1e9);
        } else if (cfg_parse_duration(buf, &d) != 0) {
            return -EINVAL;
        }
        if (s[0] == '-')
            *ns = d > now ? 0 : now - d;
        else
            *ns = now + d;
        return 0;
    }
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (p == NULL)
        p = strptime(s, "%Y-%m-%d %H:%M:%S", &tm);
    if (p == NULL)
        return -EINVAL;
    uint64_t frac = 0;
    if (*p == '.') {
        uint64_t scale = 100000000;
        p++;
        if (*p < '0' || *p > '9')
            return -EINVAL;
        while (*p >= '0' && *p <= '9') {
            frac += (uint64_t)(*p - '0') * scale;
            scale /= 10;
            p++;
        }
    }
    long off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p == '-' ? -1 : 1;
        int hh, mm;
        if (sscanf(p + 1, "%2d:%2d", &hh, &mm) != 2)
            return -EINVAL;
        off = sign * (hh * 3600L + mm * 60L);
        p += 6;
    } else {
        return -EINVAL;
    }
    if (*p != '\0')
        return -EINVAL;
    time_t t = timegm(&tm);
    if (t == (time_t)-1 || (long long)t - off < 0)
        return -EINVAL;
    *ns = (uint64_t)((long long)t - off) * 1000000000ull + frac;
    return 0;
}

static void format_time(uint64_t ns, char *buf, size_t cap)
{
    time_t t = (time_t)(ns / 1000000000ull);
    struct tm tm;
    gmtime_r(&t, &tm);
    char base[32];
    strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%03uZ", base, (unsigned)((ns / 1000000ull) % 1000));
}

/* The store's name of a window type; "unknown" for one of a later build. */
static const char *type_name(uint8_t t)
{
    const char *n = store_type_name(t);
    return n != NULL ? n : "unknown";
}

static const char *upload_name(uint8_t u)
{
    static const char *const names[] = {"off", "pending", "uploaded", "rejected", "expired"};
    return u < ISOPROF_ARRAY_SIZE(names) ? names[u] : "unknown";
}

/* How long ago wall time ns was, in its largest whole unit ("3m"). */
static void format_age(uint64_t ns, char *buf, size_t cap)
{
    uint64_t now = isoprof_now_wall_ns();
    uint64_t s = now > ns ? (now - ns) / 1000000000ull : 0;
    if (s < 60)
        snprintf(buf, cap, "%" PRIu64 "s", s);
    else if (s < 3600)
        snprintf(buf, cap, "%" PRIu64 "m", s / 60);
    else if (s < 86400)
        snprintf(buf, cap, "%" PRIu64 "h", s / 3600);
    else
        snprintf(buf, cap, "%" PRIu64 "d", s / 86400);
}

/* --- options --- */

static int parse_kind(const char *name, uint8_t *kind)
{
    unsigned k = store_anomaly_parse(name);
    if (k == STORE_ANOMALY_NONE)
        return die("'%s' is not an anomaly kind (memory_near_limit, memory_growth, "
                   "oom_suspected, latency_p999_spike)",
                   name);
    *kind = (uint8_t)k;
    return 0;
}

/*
 * The next option of argv for parse_args and parse_ctl_args: getopt_long
 * over shortopts (starting with ':', so a missing value is told apart from
 * an unknown option) and opts; the caller sets optind = 1 and opterr = 0
 * before the first call. Returns the option's letter; 0 once every option
 * is read and no argument is left over; or -1 after saying on stderr what
 * is wrong with the command line. --help prints the usage and exits 0.
 */
static int next_option(int argc, char **argv, const char *shortopts, const struct option *opts)
{
    int ch = getopt_long(argc, argv, shortopts, opts, NULL);
    switch (ch) {
    case -1:
        if (optind < argc) {
            die("unexpected argument '%s'", argv[optind]);
            return -1;
        }
        return 0;
    case 'h':
        usage(stdout);
        exit(0);
    case ':':
        die("option %s needs a value", argv[optind - 1]);
        return -1;
    case '?':
        die("unknown option '%s'; try 'isoprof --help'", argv[optind - 1]);
        return -1;
    default:
        return ch;
    }
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/*
 * The system's config, read when there is no --config: $ISOPROF_CONFIG when
 * set and not empty, else the file the install put in place
 * (ISOPROF_SYSTEM_CONFIG, set by the build from the install prefix:
 * /etc/isoprof/isoprof.yaml for /usr). The variable replaces the file and
 * nothing else, so the integration tests point it at a path that does not
 * exist and no host's config reaches them. *from names the path's source,
 * for messages.
 */
static const char *system_config(const char **from)
{
    const char *env = getenv("ISOPROF_CONFIG");
    if (env != NULL && *env != '\0') {
        *from = " ($ISOPROF_CONFIG)";
        return env;
    }
    *from = "";
    return ISOPROF_SYSTEM_CONFIG;
}

/*
 * The store the daemon uses, found as it does: --store, else
 * $ISOPROF_STORE, else store.path of the config (--config FILE, else the
 * system's when it exists), else the embedded default. A store named by one
 * of them that does not exist is an error that says where the name came
 * from; none at all, an error that lists what was tried.
 */
static int resolve_store(struct cli *c)
{
    static char from_cfg[4097]; /* store.path is at most 4096 bytes */
    if (c->store_path != NULL)
        return 0;
    const char *env = getenv("ISOPROF_STORE");
    if (env != NULL && *env != '\0') {
        c->store_path = env;
        return is_dir(env) ? 0 : die("no store at %s (from $ISOPROF_STORE)", env);
    }
    const char *cfgp = c->config_path, *from, *cfg_from = "";
    const char *sys = system_config(&from);
    if (cfgp == NULL && access(sys, F_OK) == 0) {
        cfgp = sys;
        cfg_from = from;
    }
    if (cfgp != NULL) {
        struct cfg *cfg = NULL;
        char *why = NULL;
        int rc = cfg_load_file(cfgp, &cfg, &why);
        if (rc != 0) {
            fprintf(stderr, "isoprof: cannot read the store's path from %s: %s\n", cfgp,
                    why ? why : isoprof_strerror(rc));
            isoprof_free(why);
            return EXIT_USAGE;
        }
        snprintf(from_cfg, sizeof(from_cfg), "%s", cfg->store.path);
        cfg_free(cfg);
        c->store_path = from_cfg;
        return is_dir(from_cfg)
                   ? 0
                   : die("no store at %s (store.path of %s%s)", from_cfg, cfgp, cfg_from);
    }
    const char *def = CFG_DEFAULT_STORE_PATH;
    if (is_dir(def)) {
        c->store_path = def;
        return 0;
    }
    return die("no store found: no --store, $ISOPROF_STORE unset, no --config and no %s%s, "
               "and no %s here",
               sys, from, def);
}

static int parse_args(struct cli *c, int argc, char **argv, unsigned allow)
{
    int allow_id = (allow & ARG_ID) != 0, allow_out = (allow & ARG_OUT) != 0;
    int allow_json = (allow & ARG_JSON) != 0, allow_n = (allow & ARG_N) != 0;
    static const struct option opts[] = {
        {"store", required_argument, NULL, 's'},
        {"worker", required_argument, NULL, 'w'},
        {"version", required_argument, NULL, 'v'},
        {"type", required_argument, NULL, 't'},
        {"since", required_argument, NULL, 'S'},
        {"until", required_argument, NULL, 'U'},
        {"id", required_argument, NULL, 'i'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {"anomaly", optional_argument, NULL, 'a'},
        {"kind", required_argument, NULL, 'k'},
        {"format", required_argument, NULL, 'F'},
        {"fold", required_argument, NULL, 'f'},
        {"base-worker", required_argument, NULL, 'W'},
        {"base-version", required_argument, NULL, 'V'},
        {"base-since", required_argument, NULL, 'B'},
        {"base-until", required_argument, NULL, 'E'},
        {"thread", required_argument, NULL, 'T'},
        {"pid", required_argument, NULL, 'P'},
        {"config", required_argument, NULL, 'C'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = next_option(argc, argv, ":o:n:h", opts)) > 0) {
        switch (ch) {
        case 's':
            c->store_path = optarg;
            break;
        case 'C':
            c->config_path = optarg;
            break;
        case 'w':
            c->f.worker = c->af.worker = optarg;
            break;
        case 'v':
            c->f.version = c->af.version = optarg;
            break;
        case 'T':
            c->f.thread = c->af.thread = optarg;
            break;
        case 'P': {
            if (!(allow & ARG_PID))
                return die("--pid is not an option of this command");
            /* Digits only: no sign, space or base prefix that strtoul
             * would take. */
            size_t n = strspn(optarg, "0123456789");
            unsigned long pid =
                n > 0 && n <= 7 && optarg[n] == '\0' ? strtoul(optarg, NULL, 10) : 0;
            if (pid == 0 || pid > CLI_PID_MAX)
                return die("--pid: '%s' is not a process id (a whole number from 1 to %u)", optarg,
                           CLI_PID_MAX);
            c->f.pid = (uint32_t)pid;
            break;
        }
        case 'a': {
            /* --anomaly KIND / --anomaly=KIND / --anomaly (windows), --anomaly ID (export) */
            const char *arg = optarg;
            if (arg == NULL && optind < argc && argv[optind][0] != '-')
                arg = argv[optind++];
            if ((allow & ARG_PINNED) && arg != NULL && arg[0] >= '0' && arg[0] <= '9') {
                c->anomaly_id = arg; /* windows --anomaly ID: a kind is never a number */
            } else if (allow & ARG_PINNED) {
                uint8_t kind = 0;
                if (arg && parse_kind(arg, &kind) != 0)
                    return EXIT_USAGE;
                c->f.pinned = kind ? 1u << kind : STORE_PINNED_ANY;
            } else if (allow & ARG_ANOMALY_ID) {
                if (arg == NULL)
                    return die("--anomaly needs an anomaly id (see 'isoprof anomalies')");
                c->anomaly_id = arg;
            } else {
                return die("--anomaly is not an option of this command");
            }
            break;
        }
        case 'k':
            if (!(allow & ARG_KIND))
                return die("--kind is not an option of this command");
            if (parse_kind(optarg, &c->af.kind) != 0)
                return EXIT_USAGE;
            break;
        case 't':
            c->f.type = 0;
            for (unsigned t = 1; t <= STORE_TYPE_MAX && c->f.type == 0; t++)
                if (store_type_name(t) != NULL && strcmp(optarg, store_type_name(t)) == 0)
                    c->f.type = (uint8_t)t;
            if (c->f.type == 0)
                return die("--type must be " CLI_TYPES_OR ", not '%s'", optarg);
            break;
        case 'S':
            if (parse_time(optarg, &c->f.since_ns) != 0)
                return die("--since: '%s' is not RFC 3339 or a relative time like -15m", optarg);
            c->af.since_ns = c->f.since_ns;
            break;
        case 'U':
            if (parse_time(optarg, &c->f.until_ns) != 0)
                return die("--until: '%s' is not RFC 3339 or a relative time like -15m", optarg);
            c->af.until_ns = c->f.until_ns;
            break;
        case 'F':
            if (!(allow & ARG_FORMAT))
                return die("--format is not an option of this command");
            if (strcmp(optarg, "pprof") != 0 && strcmp(optarg, "folded") != 0 &&
                strcmp(optarg, "cpuprofile") != 0 && strcmp(optarg, "raw") != 0)
                return die("--format must be pprof, folded, cpuprofile or raw, not '%s'", optarg);
            c->format = optarg;
            break;
        case 'f': {
            if (!(allow & ARG_FLAME))
                return die("--fold is not an option of this command");
            char *end;
            errno = 0;
            double pct = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || errno != 0 || !(pct >= 0 && pct < 100))
                return die("--fold: '%s' is not a percentage from 0 to under 100", optarg);
            c->fold = pct / 100;
            break;
        }
        case 'W':
        case 'V':
        case 'B':
        case 'E':
            if (!(allow & ARG_FLAME))
                return die("%s is not an option of this command", argv[optind - 1]);
            c->diff = 1;
            if (ch == 'W')
                c->bf.worker = optarg;
            else if (ch == 'V')
                c->bf.version = optarg;
            else if (parse_time(optarg, ch == 'B' ? &c->bf.since_ns : &c->bf.until_ns) != 0)
                return die("%s: '%s' is not RFC 3339 or a relative time like -15m",
                           ch == 'B' ? "--base-since" : "--base-until", optarg);
            break;
        case 'i':
            if (!allow_id)
                return die("--id is not an option of this command");
            c->id = optarg;
            break;
        case 'j':
            if (!allow_json)
                return die("--json is not an option of this command");
            c->json = 1;
            break;
        case 'o':
            if (!allow_out)
                return die("-o is not an option of this command");
            c->out = optarg;
            break;
        case 'n': {
            if (!allow_n)
                return die("-n is not an option of this command");
            char *end;
            c->top_n = strtol(optarg, &end, 10);
            if (*end != '\0' || c->top_n <= 0 || c->top_n > 100000)
                return die("-n: '%s' is not a count between 1 and 100000", optarg);
            break;
        }
        }
    }
    if (ch < 0)
        return EXIT_USAGE;
    if (resolve_store(c) != 0)
        return EXIT_USAGE;
    if (c->f.since_ns && c->f.until_ns && c->f.until_ns <= c->f.since_ns)
        return die("--until must be later than --since");
    if (c->diff) {
        /* the base set: the FILTERS, with the --base-* options in place of theirs */
        struct store_filter b = c->f;
        if (c->bf.worker)
            b.worker = c->bf.worker;
        if (c->bf.version)
            b.version = c->bf.version;
        if (c->bf.since_ns)
            b.since_ns = c->bf.since_ns;
        if (c->bf.until_ns)
            b.until_ns = c->bf.until_ns;
        if (b.since_ns && b.until_ns && b.until_ns <= b.since_ns)
            return die("the base set's --until must be later than its --since");
        c->bf = b;
    }
    return 0;
}

/* A store read failed with rc: one line on stderr saying so (what names
 * the read), and an exit code. A store that is found damaged (a record,
 * an index entry or a page that does not hold together) is named, with
 * the command that reports the damage. */
static const char *cli_store; /* the store open_store opened, for store_fail */

static int store_fail(const char *what, int rc)
{
    if (rc == ISOPROF_ECORRUPT || rc == ISOPROF_EDAMAGED)
        return die("the store at %s is damaged: %s: %s; 'isoprof store check --store %s' "
                   "reports what is damaged",
                   cli_store, what, isoprof_strerror(rc), cli_store);
    return die("%s: %s", what, isoprof_strerror(rc));
}

/*
 * The store's work runs in a child (guard.h): from open_store on, this
 * process is the child, and a fault of LMDB on a damaged page ends it,
 * not the command. Each call into the library below is bracketed so that
 * the parent can tell a stuck walk from a slow reader of the output.
 */
static int open_store(const struct cli *c, struct store **s)
{
    /* Without a child (no process, no pipe) the command still runs, as it
     * did before there was a guard. */
    cli_store = c->store_path;
    (void)cli_guard_begin(c->store_path, c->out, CLI_GUARD_STALL_MS);
    /* store_open's own free list check ends well before the guard's bound. */
    struct store_options o = {.readonly = 1, .check_ms = CLI_GUARD_STALL_MS / 2};
    char *why = NULL;
    cli_guard_enter();
    int rc = store_open(c->store_path, &o, s, &why);
    cli_guard_leave();
    if (rc != 0) {
        fprintf(stderr, "isoprof: %s\n", why ? why : isoprof_strerror(rc));
        isoprof_free(why);
        return EXIT_USAGE;
    }
    return 0;
}

struct guarded {
    store_window_cb window;
    store_anomaly_cb anomaly;
    int (*piece)(void *arg, const void *data, size_t len);
    void *arg;
};

static int guarded_on_window(const struct store_window *w, void *arg)
{
    const struct guarded *g = arg;
    cli_guard_leave();
    int rc = g->window(w, g->arg);
    cli_guard_enter();
    return rc;
}

static int guarded_on_anomaly(const struct store_anomaly *a, void *arg)
{
    const struct guarded *g = arg;
    cli_guard_leave();
    int rc = g->anomaly(a, g->arg);
    cli_guard_enter();
    return rc;
}

static int guarded_on_piece(void *arg, const void *data, size_t len)
{
    const struct guarded *g = arg;
    cli_guard_leave();
    int rc = g->piece(g->arg, data, len);
    cli_guard_enter();
    return rc;
}

static int g_windows(struct store *s, const struct store_filter *f, store_window_cb cb, void *arg)
{
    struct guarded g = {.window = cb, .arg = arg};
    cli_guard_enter();
    int rc = store_windows(s, f, guarded_on_window, &g);
    cli_guard_leave();
    return rc;
}

static int g_anomalies(struct store *s, const struct store_anomaly_filter *f, store_anomaly_cb cb,
                       void *arg)
{
    struct guarded g = {.anomaly = cb, .arg = arg};
    cli_guard_enter();
    int rc = store_anomalies(s, f, guarded_on_anomaly, &g);
    cli_guard_leave();
    return rc;
}

static int g_load(struct store *s, uint64_t id, void **pprof, size_t *len)
{
    cli_guard_enter();
    int rc = store_load(s, id, pprof, len);
    cli_guard_leave();
    return rc;
}

static int g_blob_read(struct store *s, uint64_t id,
                       int (*cb)(void *arg, const void *data, size_t len), void *arg)
{
    struct guarded g = {.piece = cb, .arg = arg};
    cli_guard_enter();
    int rc = store_blob_read(s, id, guarded_on_piece, &g);
    cli_guard_leave();
    return rc;
}

static int g_stat(struct store *s, struct store_stat *st)
{
    cli_guard_enter();
    int rc = store_stat(s, st);
    cli_guard_leave();
    return rc;
}

/* --- an anomaly's windows --- */

struct anomaly_copy {
    unsigned long long id;
    int found;
    uint64_t end_ns;
    int open;
    uint64_t *windows; /* the windows it pins, oldest first; freed by the caller */
    size_t n;
};

static int copy_on_anomaly(const struct store_anomaly *a, void *arg)
{
    struct anomaly_copy *c = arg;
    c->found = 1;
    c->end_ns = a->end_ns;
    c->open = (a->flags & STORE_ANOMALY_OPEN) != 0;
    c->windows = isoprof_calloc(a->nwindows ? a->nwindows : 1, sizeof(uint64_t));
    if (c->windows == NULL)
        return -ENOMEM;
    memcpy(c->windows, a->windows, a->nwindows * sizeof(uint64_t));
    c->n = a->nwindows;
    return 1;
}

/* Anomaly text (--anomaly ID) into *a; the caller frees a->windows (also
 * on failure). Returns an exit code. */
static int anomaly_load(struct store *s, const char *text, struct anomaly_copy *a)
{
    char *end;
    errno = 0;
    unsigned long long id = strtoull(text, &end, 10);
    if (*end != '\0' || id == 0 || errno != 0 || text[0] == '-')
        return die("--anomaly: '%s' is not an anomaly id (see 'isoprof anomalies')", text);
    struct store_anomaly_filter af = {.id = id};
    a->id = id;
    int rc = g_anomalies(s, &af, copy_on_anomaly, a);
    if (rc < 0)
        return store_fail("reading anomalies", rc);
    if (!a->found) {
        fprintf(stderr, "isoprof: no anomaly %llu in this store\n", id);
        return EXIT_NOMATCH;
    }
    return 0;
}

/* --- windows --- */

/* s as a JSON string on f, escaped as every JSON text isoprof writes
 * (isoprof_json_str: valid JSON and UTF-8 whatever a label holds). Out of
 * memory for the copy of one label, the command exits. */
static void json_str(FILE *f, const char *s)
{
    struct isoprof_buf b;
    /* every byte escaped as \u00XX, and the quotes: the cap is never hit */
    isoprof_buf_init(&b, s != NULL ? 6 * strlen(s) + 2 : 4);
    if (isoprof_json_str(&b, s) != 0)
        exit(die("out of memory"));
    fwrite(b.data, 1, b.len, f);
    isoprof_buf_free(&b);
}

struct list_ctx {
    struct store *s;
    int json;
    uint64_t count;
};

static int list_on_window(const struct store_window *w, void *arg)
{
    struct list_ctx *l = arg;
    char id[STORE_ID_LEN + 1], start[40], end[40];
    store_id_format(l->s, w->id, id);
    format_time(w->start_ns, start, sizeof(start));
    format_time(w->end_ns, end, sizeof(end));
    if (l->json) {
        fputs("{\"id\":", stdout);
        json_str(stdout, id);
        fputs(",\"worker\":", stdout);
        json_str(stdout, w->worker);
        fputs(",\"version\":", stdout);
        json_str(stdout, w->version);
        fputs(",\"thread\":", stdout);
        json_str(stdout, w->thread ? w->thread : "main");
        printf(",\"pid\":%" PRIu32, w->pid);
        if (w->container && *w->container) {
            fputs(",\"container\":", stdout);
            json_str(stdout, w->container);
        }
        if (w->nlabels > 0) {
            fputs(",\"labels\":{", stdout);
            for (size_t i = 0; i < w->nlabels; i++) {
                if (i > 0)
                    fputc(',', stdout);
                json_str(stdout, w->labels[i].name);
                fputc(':', stdout);
                json_str(stdout, w->labels[i].value);
            }
            fputc('}', stdout);
        }
        printf(",\"isolate\":%" PRIu32 ",\"runtime\":", w->isolate);
        json_str(stdout, w->runtime);
        printf(",\"type\":\"%s\",\"start\":\"%s\",\"end\":\"%s\",\"samples\":%" PRIu64
               ",\"bytes\":%" PRIu64 ",\"raw_bytes\":%" PRIu64 ",\"interval\":%" PRIu64
               ",\"on_demand\":%s,\"frames_mapped\":%" PRIu32 ",\"frames_unmapped\":%" PRIu32,
               type_name(w->type), start, end, w->samples, w->stored_size, w->raw_size, w->interval,
               (w->flags & STORE_FLAG_ON_DEMAND) ? "true" : "false", w->frames_mapped,
               w->frames_unmapped);
        if (w->anomaly)
            printf(",\"anomaly\":\"%s\"", store_anomaly_name(w->anomaly));
        else
            fputs(",\"anomaly\":null", stdout);
        fputs(",\"pinned\":[", stdout);
        for (unsigned k = 1, n = 0; k <= STORE_ANOMALY_MAX; k++)
            if (w->pinned & (1u << k))
                printf("%s\"%s\"", n++ ? "," : "", store_anomaly_name(k));
        fputc(']', stdout);
        if (w->mem.max)
            printf(",\"memory\":{\"min\":%" PRIu64 ",\"max\":%" PRIu64 ",\"last\":%" PRIu64
                   ",\"p999\":%" PRIu64 "}",
                   w->mem.min, w->mem.max, w->mem.last, w->mem.p999);
        else
            fputs(",\"memory\":null", stdout);
        printf(",\"upload\":\"%s\"", upload_name(w->upload));
        if (w->upload == STORE_UPLOAD_REJECTED || w->upload == STORE_UPLOAD_EXPIRED) {
            printf(",\"upload_status\":%u,\"upload_reason\":", (unsigned)w->reject_status);
            json_str(stdout, w->reject_reason ? w->reject_reason : "");
        }
        fputs("}\n", stdout);
    } else {
        if (l->count == 0)
            printf("%-36s  %-20s %-12s %-12s %-7s %-10s %-8s %-8s  %-24s %6s %8s %9s %10s  %s\n",
                   "ID", "WORKER", "VERSION", "THREAD", "PID", "ISOLATE", "RUNTIME", "TYPE",
                   "START", "SECS", "SAMPLES", "BYTES", "RAW", "ANOMALY");
        char pid[16] = "-";
        if (w->pid)
            snprintf(pid, sizeof(pid), "%" PRIu32, w->pid);
        /* The anomaly it was taken for, else one that pinned it afterwards. */
        const char *an = w->anomaly ? store_anomaly_name(w->anomaly) : "";
        for (unsigned k = 1; !*an && k <= STORE_ANOMALY_MAX; k++)
            if (w->pinned & (1u << k))
                an = store_anomaly_name(k);
        /* BYTES is what the window takes in the store, RAW its uncompressed
         * size: the pprof, or the snapshot's JSON that export writes. */
        printf("%-36s  %-20.20s %-12.12s %-12.12s %-7s %-10" PRIu32
               " %-8.8s %-8s  %-24s %6.1f %8" PRIu64 " %9" PRIu64 " %10" PRIu64 "  %s\n",
               id, w->worker, w->version, w->thread ? w->thread : "main", pid, w->isolate,
               w->runtime, type_name(w->type), start, (double)(w->end_ns - w->start_ns) / 1e9,
               w->samples, w->stored_size, w->raw_size, an);
    }
    l->count++;
    return 0;
}

/* isoprof upload --since T [FILTERS] [--config FILE]: send stored windows
 * again (replay.c). The config names the server (--config, else the
 * system's). */
static int cmd_upload(int argc, char **argv)
{
    struct cli c = {0};
    int rc = parse_args(&c, argc, argv, ARG_JSON | ARG_PID);
    if (rc)
        return rc;
    if (c.f.since_ns == 0)
        return die("upload: --since T is required (the windows to send again)");
    const char *from, *sys = system_config(&from);
    if (c.config_path == NULL && access(sys, F_OK) == 0)
        c.config_path = sys;
    if (c.config_path == NULL)
        return die("upload: no --config FILE and no %s%s: its upload section names the server", sys,
                   from);
    struct store *s;
    if ((rc = open_store(&c, &s)) != 0)
        return rc;
    rc = cli_replay(s, c.config_path, &c.f, c.json);
    store_close(s);
    return rc;
}

static int cmd_windows(int argc, char **argv)
{
    struct cli c = {0};
    int rc = parse_args(&c, argc, argv, ARG_ID | ARG_JSON | ARG_PINNED | ARG_PID);
    if (rc)
        return rc;
    struct store *s;
    if ((rc = open_store(&c, &s)) != 0)
        return rc;
    if (c.id && store_id_parse(s, c.id, &c.f.id) != 0) {
        store_close(s);
        return die("--id: '%s' is not a window id of this store", c.id);
    }
    struct list_ctx l = {.s = s, .json = c.json};
    if (c.anomaly_id) {
        /* The windows the anomaly keeps, oldest first, through the FILTERS. */
        struct anomaly_copy a = {0};
        if (c.id) {
            rc = die("--id and --anomaly exclude each other");
        } else if ((rc = anomaly_load(s, c.anomaly_id, &a)) == 0) {
            int err = 0;
            for (size_t i = 0; i < a.n && err == 0; i++) {
                struct store_filter wf = c.f;
                wf.id = a.windows[i];
                err = g_windows(s, &wf, list_on_window, &l);
            }
            if (err != 0)
                rc = store_fail("reading windows", err);
        }
        isoprof_free(a.windows);
        store_close(s);
        if (rc != 0)
            return rc;
        if (l.count == 0) {
            fprintf(stderr, "isoprof: anomaly %llu keeps no matching window\n", a.id);
            return EXIT_NOMATCH;
        }
        return 0;
    }
    rc = g_windows(s, &c.f, list_on_window, &l);
    store_close(s);
    if (rc != 0)
        return store_fail("reading windows", rc);
    if (l.count == 0) {
        fprintf(stderr, "isoprof: no window matched\n");
        return EXIT_NOMATCH;
    }
    return 0;
}

/* --- export / top: load and merge matching windows --- */

/* Distinct labels of the windows collected, for a flame graph's header:
 * the first few kept, the rest counted while they fit. */
#define CLI_LABELS_KEPT 3
#define CLI_LABELS_COUNTED 64
struct label_set {
    char *v[CLI_LABELS_COUNTED];
    size_t n;
    int more; /* more distinct ones than counted */
};

struct collect_ctx {
    uint64_t *ids;
    size_t n, cap;
    uint8_t type;
    int mixed;
    int overflow;
    struct label_set workers, versions;
    uint64_t start_ns, end_ns, samples;
};

static int label_add(struct label_set *l, const char *v)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i], v) == 0)
            return 0;
    if (l->n == CLI_LABELS_COUNTED) {
        l->more = 1;
        return 0;
    }
    if ((l->v[l->n] = isoprof_strdup(v)) == NULL)
        return -ENOMEM;
    l->n++;
    return 0;
}

/* "a", "a, b, c", "a, b, c and 4 more" (or "and more" past the count). */
static void label_text(const struct label_set *l, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < l->n && i < CLI_LABELS_KEPT && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", l->v[i]);
    if (len < cap && (l->n > CLI_LABELS_KEPT || l->more)) {
        if (l->more)
            snprintf(buf + len, cap - len, " and more");
        else
            snprintf(buf + len, cap - len, " and %zu more", l->n - CLI_LABELS_KEPT);
    }
}

static void collect_free(struct collect_ctx *k)
{
    for (size_t i = 0; i < k->workers.n; i++)
        isoprof_free(k->workers.v[i]);
    for (size_t i = 0; i < k->versions.n; i++)
        isoprof_free(k->versions.v[i]);
    isoprof_free(k->ids);
    memset(k, 0, sizeof(*k));
}

static int collect_on_window(const struct store_window *w, void *arg)
{
    struct collect_ctx *k = arg;
    if (k->n == 0)
        k->type = w->type;
    else if (w->type != k->type)
        k->mixed = 1;
    if (label_add(&k->workers, w->worker) != 0 || label_add(&k->versions, w->version) != 0)
        return -ENOMEM;
    if (k->start_ns == 0 || w->start_ns < k->start_ns)
        k->start_ns = w->start_ns;
    if (w->end_ns > k->end_ns)
        k->end_ns = w->end_ns;
    k->samples += w->samples;
    if (k->n == k->cap) {
        if (k->cap >= CLI_MAX_MERGE) {
            k->overflow = 1;
            return 1;
        }
        size_t ncap = k->cap ? k->cap * 2 : 64;
        uint64_t *ni = isoprof_realloc(k->ids, ncap * sizeof(*ni));
        if (ni == NULL)
            return -ENOMEM;
        k->ids = ni;
        k->cap = ncap;
    }
    k->ids[k->n++] = w->id;
    return 0;
}

/* --- anomalies --- */

struct pick_ctx {
    uint8_t type;
    uint64_t end_ns;
    uint64_t best, best_start;   /* the latest window of type starting by end_ns */
    uint64_t after, after_start; /* else the earliest one after it */
};

static int pick_on_window(const struct store_window *w, void *arg)
{
    struct pick_ctx *p = arg;
    if (w->type != p->type)
        return 0;
    if (w->start_ns <= p->end_ns) {
        if (p->best == 0 || w->start_ns >= p->best_start) {
            p->best = w->id;
            p->best_start = w->start_ns;
        }
    } else if (p->after == 0 || w->start_ns < p->after_start) {
        p->after = w->id;
        p->after_start = w->start_ns;
    }
    return 0;
}

/* export --anomaly ID --type T: turn the anomaly into the id of its pinned
 * window of type T nearest before the anomaly's end. Returns an exit code. */
static int resolve_anomaly(struct cli *c, struct store *s)
{
    if (c->f.type == 0)
        return die("--anomaly ID needs --type T (" CLI_TYPES_OR ")");
    struct anomaly_copy a = {0};
    int rc = anomaly_load(s, c->anomaly_id, &a);
    if (rc != 0) {
        isoprof_free(a.windows);
        return rc;
    }
    struct pick_ctx p = {.type = c->f.type, .end_ns = a.open ? UINT64_MAX : a.end_ns};
    for (size_t i = 0; i < a.n; i++) {
        struct store_filter wf = {.id = a.windows[i]};
        if ((rc = g_windows(s, &wf, pick_on_window, &p)) < 0)
            break;
    }
    isoprof_free(a.windows);
    if (rc < 0)
        return store_fail("reading windows", rc);
    uint64_t chosen = p.best ? p.best : p.after;
    if (chosen == 0) {
        fprintf(stderr, "isoprof: anomaly %llu pins no %s window\n", a.id, type_name(c->f.type));
        return EXIT_NOMATCH;
    }
    memset(&c->f, 0, sizeof(c->f));
    c->f.id = chosen;
    return 0;
}

struct anomalies_ctx {
    struct store *s;
    int json;
    uint64_t count;
};

static void print_quantity(uint8_t kind, uint64_t v)
{
    if (kind == STORE_ANOMALY_LATENCY_P999_SPIKE)
        printf("%.1fms", (double)v / 1e6);
    else
        printf("%.1fMiB", (double)v / (1024.0 * 1024.0));
}

static int list_on_anomaly(const struct store_anomaly *a, void *arg)
{
    struct anomalies_ctx *l = arg;
    char start[40], end[40];
    format_time(a->start_ns, start, sizeof(start));
    format_time(a->end_ns, end, sizeof(end));
    int open = (a->flags & STORE_ANOMALY_OPEN) != 0;
    /* NULL: no limit (latency, or recorded before the store kept it) */
    const char *from = store_limit_source_name(a->limit_source);
    if (l->json) {
        printf("{\"id\":%" PRIu64 ",\"kind\":\"%s\",\"worker\":", a->id,
               store_anomaly_name(a->kind));
        json_str(stdout, a->worker);
        fputs(",\"version\":", stdout);
        json_str(stdout, a->version);
        fputs(",\"thread\":", stdout);
        json_str(stdout, a->thread ? a->thread : "main");
        printf(",\"isolate\":%" PRIu32 ",\"time\":\"%s\",\"end\":\"%s\",\"open\":%s"
               ",\"value\":%" PRIu64 ",\"threshold\":%" PRIu64 ",\"unit\":\"%s\"",
               a->isolate, start, end, open ? "true" : "false", a->value, a->threshold,
               a->kind == STORE_ANOMALY_LATENCY_P999_SPIKE ? "nanoseconds" : "bytes");
        if (from != NULL)
            printf(",\"limit\":%" PRIu64 ",\"limit_source\":\"%s\"", a->limit, from);
        else
            fputs(",\"limit\":null,\"limit_source\":null", stdout);
        fputs(",\"windows\":[", stdout);
        for (size_t i = 0; i < a->nwindows; i++) {
            char id[STORE_ID_LEN + 1];
            store_id_format(l->s, a->windows[i], id);
            printf("%s\"%s\"", i ? "," : "", id);
        }
        fputs("]}\n", stdout);
    } else {
        if (l->count == 0)
            printf("%-6s %-18s %-20s %-12s %-12s %-10s %-24s %-24s %10s %10s %-28s %s\n", "ID",
                   "KIND", "WORKER", "VERSION", "THREAD", "ISOLATE", "START", "END", "VALUE",
                   "THRESHOLD", "LIMIT", "WINDOWS");
        printf("%-6" PRIu64 " %-18s %-20.20s %-12.12s %-12.12s %-10" PRIu32 " %-24s %-24s ", a->id,
               store_anomaly_name(a->kind), a->worker, a->version, a->thread ? a->thread : "main",
               a->isolate, start, open ? "(ongoing)" : end);
        print_quantity(a->kind, a->value);
        putchar(' ');
        print_quantity(a->kind, a->threshold);
        char limit[64] = "-";
        if (from != NULL)
            snprintf(limit, sizeof(limit), "%.1fMiB(%s)", (double)a->limit / (1024.0 * 1024.0),
                     from);
        printf(" %-28s %zu\n", limit, a->nwindows);
    }
    l->count++;
    return 0;
}

static int cmd_anomalies(int argc, char **argv)
{
    struct cli c = {0};
    int rc = parse_args(&c, argc, argv, ARG_JSON | ARG_KIND);
    if (rc)
        return rc;
    struct store *s;
    if ((rc = open_store(&c, &s)) != 0)
        return rc;
    struct anomalies_ctx l = {.s = s, .json = c.json};
    rc = g_anomalies(s, &c.af, list_on_anomaly, &l);
    store_close(s);
    if (rc != 0)
        return store_fail("reading anomalies", rc);
    if (l.count == 0) {
        fprintf(stderr, "isoprof: no anomaly matched\n");
        return EXIT_NOMATCH;
    }
    return 0;
}

/* --id or --anomaly ID (--type T) into c->f.id: one window. Returns an
 * exit code. */
static int resolve_one(struct cli *c, struct store *s)
{
    if (c->id && c->anomaly_id)
        return die("--id and --anomaly exclude each other");
    if (c->id && store_id_parse(s, c->id, &c->f.id) != 0)
        return die("--id: '%s' is not a window id of this store", c->id);
    if (c->anomaly_id)
        return resolve_anomaly(c, s);
    return 0;
}

/* The windows f matches into *k (the caller frees it with collect_free),
 * of one type. what names the set in messages ("" or " the base set").
 * Returns an exit code. */
static int collect_windows(struct store *s, const struct store_filter *f, const char *what,
                           struct collect_ctx *k)
{
    int rc = g_windows(s, f, collect_on_window, k);
    if (rc < 0)
        return store_fail("reading windows", rc);
    if (k->n == 0) {
        fprintf(stderr, "isoprof: no window matched%s\n", what);
        return EXIT_NOMATCH;
    }
    if (k->mixed)
        return die("windows of several types matched%s; add --type T (" CLI_TYPES_OR ")", what);
    if (k->overflow)
        fprintf(stderr, "isoprof: more than %d windows matched%s; using the first %d\n",
                CLI_MAX_MERGE, what, CLI_MAX_MERGE);
    return 0;
}

/* Opens the store and collects the windows c picks (--id, --anomaly ID
 * --type T or the FILTERS) into *k. Returns an exit code; on success the
 * caller closes *s and frees *k, on failure nothing is left open. */
static int open_collect(struct cli *c, struct store **s, struct collect_ctx *k)
{
    int rc;
    if ((rc = open_store(c, s)) != 0)
        return rc;
    if ((rc = resolve_one(c, *s)) != 0 || (rc = collect_windows(*s, &c->f, "", k)) != 0) {
        store_close(*s);
        *s = NULL;
        collect_free(k);
    }
    return rc;
}

/* top and flamegraph read profiles; a snapshot window holds none. An exit
 * code. */
static int refuse_snapshot(const struct collect_ctx *k, const char *cmd)
{
    if (k->type != STORE_TYPE_SNAPSHOT)
        return 0;
    return die("%s reads profiles, and a snapshot window is a raw heap snapshot: write it to a "
               "file with 'isoprof export --type snapshot --id ID -o FILE.heapsnapshot' (Chrome "
               "DevTools' Memory panel loads it), or use --type retained for what it retains",
               cmd);
}

/* The raw pprof of the windows of k, merged when there are several, into
 * *out. Returns an exit code. */
static int merge_windows(struct store *s, const struct collect_ctx *k, struct pprof_buf *out)
{
    struct pprof_buf *bufs = isoprof_calloc(k->n, sizeof(*bufs));
    if (bufs == NULL)
        return die("out of memory");
    int exit_code = 0, rc;
    size_t loaded = 0;
    for (size_t i = 0; i < k->n; i++) {
        void *data;
        size_t len;
        rc = g_load(s, k->ids[i], &data, &len);
        if (rc == ISOPROF_ENOTFOUND)
            continue; /* evicted since we listed it */
        if (rc != 0) {
            char what[64];
            snprintf(what, sizeof(what), "loading window %" PRIu64, k->ids[i]);
            exit_code = store_fail(what, rc);
            break;
        }
        bufs[loaded].data = data;
        bufs[loaded].len = len;
        loaded++;
    }
    if (exit_code == 0 && loaded == 0) {
        fprintf(stderr, "isoprof: no window matched\n");
        exit_code = EXIT_NOMATCH;
    }
    if (exit_code == 0) {
        if (loaded == 1) {
            *out = bufs[0];
            bufs[0].data = NULL;
        } else {
            char *why = NULL;
            rc = pprof_merge(bufs, loaded, out, &why);
            if (rc != 0) {
                fprintf(stderr, "isoprof: merging %zu windows: %s\n", loaded,
                        why ? why : isoprof_strerror(rc));
                isoprof_free(why);
                exit_code = EXIT_USAGE;
            }
        }
    }
    for (size_t i = 0; i < loaded; i++)
        pprof_buf_free(&bufs[i]);
    isoprof_free(bufs);
    return exit_code;
}

/* Opens -o FILE (or takes stdout) for a command's output. text: refuse
 * a terminal (an HTML page is not for one). NULL after saying why. */
static FILE *open_out(const struct cli *c, int refuse_tty, const char *what)
{
    if (c->out == NULL) {
        if (refuse_tty && isatty(STDOUT_FILENO)) {
            die("not writing %s to a terminal; use -o FILE or a redirection", what);
            return NULL;
        }
        return stdout;
    }
    FILE *f = fopen(c->out, "wb");
    if (f == NULL)
        die("%s: %s", c->out, strerror(errno));
    else
        cli_guard_out_opened();
    return f;
}

/* Removes the half-written -o FILE of a failed command: a regular file
 * only, never a device or a pipe that -o named (-o /dev/full as root). */
static void remove_out(const struct cli *c)
{
    struct stat st;
    if (c->out != NULL && stat(c->out, &st) == 0 && S_ISREG(st.st_mode))
        unlink(c->out);
}

/* Closes what open_out gave; rc is the writer's result. An exit code: a
 * failed write removes a half-written -o FILE. */
static int close_out(const struct cli *c, FILE *f, int rc, const char *why)
{
    int err = rc == -EIO ? errno : 0;
    int to_file = f != stdout;
    int bad = to_file ? fclose(f) != 0 : fflush(f) != 0;
    if (bad && rc == 0) {
        rc = -EIO;
        err = errno;
    }
    if (rc == 0)
        return 0;
    if (to_file)
        remove_out(c);
    if (rc == -EIO)
        return die("writing %s: %s", c->out ? c->out : "stdout", strerror(err ? err : EIO));
    return die("%s", why ? why : isoprof_strerror(rc));
}

/* Adds the windows of k to set of t (read one at a time). Returns an exit
 * code; *added counts the windows that were still there. */
static int tree_add_windows(struct store *s, const struct collect_ctx *k, int set,
                            struct pprof_tree *t, size_t *added)
{
    for (size_t i = 0; i < k->n; i++) {
        void *data;
        size_t len;
        int rc = g_load(s, k->ids[i], &data, &len);
        if (rc == ISOPROF_ENOTFOUND)
            continue; /* evicted since we listed it */
        if (rc != 0) {
            char what[64];
            snprintf(what, sizeof(what), "loading window %" PRIu64, k->ids[i]);
            return store_fail(what, rc);
        }
        struct pprof_buf b = {data, len};
        char *why = NULL;
        rc = pprof_tree_add(t, &b, set, &why);
        pprof_buf_free(&b);
        if (rc != 0) {
            char id[STORE_ID_LEN + 1];
            store_id_format(s, k->ids[i], id);
            fprintf(stderr, "isoprof: window %s: %s\n", id, why ? why : isoprof_strerror(rc));
            isoprof_free(why);
            return EXIT_USAGE;
        }
        (*added)++;
    }
    return 0;
}

/* export --format folded|cpuprofile: the merged windows as text. */
static int export_text(struct cli *c, const struct pprof_buf *raw)
{
    struct pprof_tree t = {0};
    char *why = NULL;
    int rc = pprof_tree_add(&t, raw, 0, &why);
    if (rc != 0) {
        rc = die("reading the merged profile: %s", why ? why : isoprof_strerror(rc));
        isoprof_free(why);
        pprof_tree_free(&t);
        return rc;
    }
    int cpuprofile = strcmp(c->format, "cpuprofile") == 0;
    const char *msg = NULL;
    FILE *f;
    if (cpuprofile && strcmp(t.unit, "nanoseconds") != 0) {
        pprof_tree_free(&t);
        return die("--format cpuprofile: a .cpuprofile holds CPU windows only");
    }
    if ((f = open_out(c, 0, NULL)) == NULL) {
        pprof_tree_free(&t);
        return EXIT_USAGE;
    }
    rc = cpuprofile ? fg_write_cpuprofile(f, &t, &msg) : fg_write_folded(f, &t, &msg);
    pprof_tree_free(&t);
    return close_out(c, f, rc, msg);
}

/* Where store_blob_read's pieces go. */
struct snapshot_out {
    FILE *f;
    int err; /* errno of the write that failed */
};

static int snapshot_on_piece(void *arg, const void *data, size_t len)
{
    struct snapshot_out *o = arg;
    if (fwrite(data, 1, len, o->f) == len)
        return 0;
    o->err = errno != 0 ? errno : EIO;
    return -EIO;
}

/*
 * export of a snapshot window: its JSON as it was taken (the .heapsnapshot
 * DevTools loads), streamed from the store to -o FILE or stdout a piece at
 * a time, so a snapshot of hundreds of MB costs the CLI no more than one
 * piece. A snapshot cannot be merged or converted: one window, --format
 * raw or none. A failure part way (a damaged chunk, found by the checksum
 * at the end; a full disk) removes the partial FILE. An exit code.
 */
static int export_snapshot(const struct cli *c, struct store *s, const struct collect_ctx *k)
{
    if (c->format != NULL && strcmp(c->format, "raw") != 0)
        return die("--format %s: a snapshot window is exported as it was taken, V8 heap "
                   "snapshot JSON (--format raw); its profile is the retained window "
                   "(--type retained)",
                   c->format);
    if (k->n > 1)
        return die("%zu snapshot windows matched: a heap snapshot is exported alone, never "
                   "merged; pick one with --id (see 'isoprof windows --type snapshot')",
                   k->n);
    char id[STORE_ID_LEN + 1];
    store_id_format(s, k->ids[0], id);
    FILE *f = open_out(c, 1, "a heap snapshot");
    if (f == NULL)
        return EXIT_USAGE;
    struct snapshot_out o = {.f = f};
    errno = 0;
    int rc = g_blob_read(s, k->ids[0], snapshot_on_piece, &o);
    int to_file = f != stdout;
    if ((to_file ? fclose(f) : fflush(f)) != 0 && rc == 0)
        o.err = errno != 0 ? errno : EIO;
    if (rc == 0 && o.err == 0)
        return 0;
    if (to_file)
        remove_out(c);
    if (rc == ISOPROF_ENOTFOUND) {
        fprintf(stderr, "isoprof: snapshot window %s was evicted while being read\n", id);
        return EXIT_NOMATCH;
    }
    if (o.err != 0)
        return die("writing %s: %s", c->out ? c->out : "stdout", strerror(o.err));
    char what[64];
    snprintf(what, sizeof(what), "reading snapshot window %s", id);
    return store_fail(what, rc);
}

static int cmd_export(int argc, char **argv)
{
    struct cli c = {0};
    int rc = parse_args(&c, argc, argv, ARG_ID | ARG_OUT | ARG_ANOMALY_ID | ARG_FORMAT | ARG_PID);
    if (rc)
        return rc;
    struct store *s;
    struct collect_ctx k = {0};
    if ((rc = open_collect(&c, &s, &k)) != 0)
        return rc;
    struct pprof_buf raw = {0}, gz = {0};
    if (k.type == STORE_TYPE_SNAPSHOT)
        rc = export_snapshot(&c, s, &k);
    else if (c.format && strcmp(c.format, "raw") == 0)
        rc = die("--format raw is the format of snapshot windows; a %s window exports as "
                 "pprof, folded or cpuprofile",
                 type_name(k.type));
    else
        rc = merge_windows(s, &k, &raw);
    int snapshot = k.type == STORE_TYPE_SNAPSHOT;
    store_close(s);
    collect_free(&k);
    if (rc != 0 || snapshot)
        return rc;
    if (c.format && strcmp(c.format, "pprof") != 0) {
        rc = export_text(&c, &raw);
        pprof_buf_free(&raw);
        return rc;
    }
    rc = pprof_gzip(raw.data, raw.len, &gz);
    pprof_buf_free(&raw);
    if (rc != 0)
        return die("compressing: %s", isoprof_strerror(rc));
    FILE *f = stdout;
    if (c.out && (f = fopen(c.out, "wb")) == NULL) {
        pprof_buf_free(&gz);
        return die("%s: %s", c.out, strerror(errno));
    }
    if (c.out)
        cli_guard_out_opened();
    size_t w = fwrite(gz.data, 1, gz.len, f);
    int bad = w != gz.len || fflush(f) != 0;
    if (c.out && fclose(f) != 0)
        bad = 1;
    pprof_buf_free(&gz);
    if (bad)
        return die("writing %s: %s", c.out ? c.out : "stdout", strerror(errno));
    return 0;
}

static int cmd_top(int argc, char **argv)
{
    struct cli c = {.top_n = 20};
    int rc = parse_args(&c, argc, argv, ARG_ID | ARG_N | ARG_PID);
    if (rc)
        return rc;
    struct store *s;
    struct collect_ctx k = {0};
    if ((rc = open_collect(&c, &s, &k)) != 0)
        return rc;
    struct pprof_buf raw = {0};
    if ((rc = refuse_snapshot(&k, "top")) == 0)
        rc = merge_windows(s, &k, &raw);
    store_close(s);
    collect_free(&k);
    if (rc != 0)
        return rc;
    struct pprof_top t = {0};
    rc = pprof_top(&raw, -1, &t);
    pprof_buf_free(&raw);
    if (rc != 0)
        return die("reading profile: %s", isoprof_strerror(rc));
    const char *unit = t.unit ? t.unit : "";
    int ns = strcmp(unit, "nanoseconds") == 0;
    double scale = ns ? 1e6 : 1.0;
    const char *shown_unit = ns ? "ms" : unit;
    printf("Type: %s\n", t.type ? t.type : "?");
    printf("Showing top %zu of %zu functions, total %.2f%s\n",
           t.n < (size_t)c.top_n ? t.n : (size_t)c.top_n, t.n, (double)t.total / scale, shown_unit);
    printf("%12s %7s %7s %12s %7s  %s\n", "flat", "flat%", "sum%", "cum", "cum%", "function");
    double sum = 0;
    for (size_t i = 0; i < t.n && i < (size_t)c.top_n; i++) {
        const struct pprof_top_row *r = &t.rows[i];
        double fp = t.total ? 100.0 * (double)r->flat / (double)t.total : 0;
        double cp = t.total ? 100.0 * (double)r->cum / (double)t.total : 0;
        sum += fp;
        printf("%10.2f%-2s %6.2f%% %6.2f%% %10.2f%-2s %6.2f%%  %s", (double)r->flat / scale,
               shown_unit, fp, sum, (double)r->cum / scale, shown_unit, cp,
               r->name && *r->name ? r->name : "(anonymous)");
        if (r->file && *r->file)
            printf(" %s:%" PRId64, r->file, r->line);
        putchar('\n');
    }
    pprof_top_free(&t);
    return 0;
}

/* --- flamegraph --- */

/* The header lines of a set of windows. Returns how many. */
static size_t header_pairs(const struct collect_ctx *k, size_t windows, struct fg_pair *p)
{
    size_t n = 0;
    p[n].key = k->workers.n + k->workers.more > 1 ? "workers" : "worker";
    label_text(&k->workers, p[n++].value, sizeof(p->value));
    p[n].key = k->versions.n + k->versions.more > 1 ? "versions" : "version";
    label_text(&k->versions, p[n++].value, sizeof(p->value));
    p[n].key = "type";
    snprintf(p[n++].value, sizeof(p->value), "%s", type_name(k->type));
    p[n].key = "from";
    format_time(k->start_ns, p[n++].value, sizeof(p->value));
    p[n].key = "to";
    format_time(k->end_ns, p[n++].value, sizeof(p->value));
    p[n].key = "windows";
    snprintf(p[n++].value, sizeof(p->value), "%zu", windows);
    p[n].key = "samples";
    snprintf(p[n++].value, sizeof(p->value), "%" PRIu64, k->samples);
    return n;
}

static int cmd_flamegraph(int argc, char **argv)
{
    struct cli c = {.fold = FG_FOLD_DEFAULT};
    int rc = parse_args(&c, argc, argv, ARG_ID | ARG_OUT | ARG_ANOMALY_ID | ARG_FLAME | ARG_PID);
    if (rc)
        return rc;
    if (c.diff && (c.id || c.anomaly_id))
        return die("--id and --anomaly pick one window; a diff compares two sets of FILTERS");
    struct store *s;
    if ((rc = open_store(&c, &s)) != 0)
        return rc;
    struct collect_ctx k[2] = {{0}, {0}};
    struct pprof_tree t = {0};
    size_t added[2] = {0, 0};
    if ((rc = resolve_one(&c, s)) != 0 || (rc = collect_windows(s, &c.f, "", &k[0])) != 0 ||
        (rc = refuse_snapshot(&k[0], "flamegraph")) != 0 ||
        (c.diff && (rc = collect_windows(s, &c.bf, " the base set", &k[1])) != 0) ||
        (c.diff && (rc = refuse_snapshot(&k[1], "flamegraph")) != 0) ||
        (rc = tree_add_windows(s, &k[0], 0, &t, &added[0])) != 0 ||
        (c.diff && (rc = tree_add_windows(s, &k[1], 1, &t, &added[1])) != 0))
        goto out;
    if (added[0] == 0 || (c.diff && added[1] == 0)) {
        fprintf(stderr, "isoprof: the matching windows were evicted while being read\n");
        rc = EXIT_NOMATCH;
        goto out;
    }
    struct fg_pair head[8], base[8];
    char title[4 * sizeof(head[0].value) + 64];
    struct fg_info info = {
        .title = title, .header = head, .base_header = base, .diff = c.diff, .fold_share = c.fold};
    info.nheader = header_pairs(&k[0], added[0], head);
    if (c.diff) {
        info.nbase = header_pairs(&k[1], added[1], base);
        snprintf(title, sizeof(title), "isoprof diff: %s %s against %s %s", head[0].value,
                 head[1].value, base[0].value, base[1].value);
    } else {
        snprintf(title, sizeof(title), "isoprof flame graph: %s %s", head[0].value, head[1].value);
    }
    FILE *f = open_out(&c, 1, "an HTML page");
    if (f == NULL) {
        rc = EXIT_USAGE;
        goto out;
    }
    const char *why = NULL;
    rc = close_out(&c, f, fg_write_html(f, &t, &info, &why), why);
out:
    store_close(s);
    collect_free(&k[0]);
    collect_free(&k[1]);
    pprof_tree_free(&t);
    return rc;
}

/* --- store --- */

static int cmd_store(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "stat") != 0 && strcmp(argv[1], "check") != 0))
        return die("usage: isoprof store stat|check --store DIR");
    int check = strcmp(argv[1], "check") == 0;
    struct cli c = {0};
    int rc = parse_args(&c, argc - 1, argv + 1, 0);
    if (rc)
        return rc;
    struct store *s;
    if (check) {
        /* The whole check runs in a child process (store_verify): a damaged
         * file that faults it is a finding to report, not a crash. */
        char *why = NULL;
        rc = store_verify(c.store_path, STORE_VERIFY_RECORDS, CLI_CHECK_TIMEOUT_MS, &why);
        if (rc == ISOPROF_ECORRUPT || rc == ISOPROF_EDAMAGED || rc == -ETIMEDOUT) {
            fprintf(stderr, "isoprof: store check failed: %s\n%s", isoprof_strerror(rc),
                    why ? why : "");
        } else if (rc != 0) {
            fprintf(stderr, "isoprof: %s\n", why ? why : isoprof_strerror(rc));
        }
        isoprof_free(why);
        if (rc != 0)
            return EXIT_USAGE;
        printf("%s: ok\n", c.store_path);
        return 0;
    }
    if ((rc = open_store(&c, &s)) != 0)
        return rc;
    struct store_stat st;
    rc = g_stat(s, &st);
    store_close(s);
    if (rc != 0)
        return store_fail("store stat", rc);
    char oldest[40] = "-", newest[40] = "-";
    if (st.windows) {
        format_time(st.oldest_ns, oldest, sizeof(oldest));
        format_time(st.newest_ns, newest, sizeof(newest));
    }
    printf("store           %s\n", c.store_path);
    printf("schema version  %" PRIu32 "\n", st.schema_version);
    printf("windows         %" PRIu64 " (cpu %" PRIu64 ", heap %" PRIu64 ", retained %" PRIu64
           ", snapshot %" PRIu64 ")\n",
           st.windows, st.windows_cpu, st.windows_heap, st.windows_retained, st.windows_snapshot);
    printf("oldest          %s\n", oldest);
    printf("newest          %s\n", newest);
    printf("pprof bytes     %" PRIu64 "\n", st.raw_bytes);
    printf("stored bytes    %" PRIu64 " (%.1f%% of pprof)\n", st.stored_bytes,
           st.raw_bytes ? 100.0 * (double)st.stored_bytes / (double)st.raw_bytes : 0.0);
    printf("dictionaries    %" PRIu64 " (%" PRIu64 " bytes, in stored bytes)\n", st.dicts,
           st.dict_bytes);
    printf("budget          %" PRIu64 "\n", st.budget);
    printf("map size        %" PRIu64 "\n", st.map_size);
    printf("file size       %" PRIu64 "\n", st.file_size);
    printf("evicted         %" PRIu64 "\n", st.evicted_total);
    printf("anomalies       %" PRIu64 " (windows pinned %" PRIu64 ")\n", st.anomalies,
           st.windows_pinned);
    printf("source maps     %" PRIu64 " frames mapped, %" PRIu64
           " unmapped (windows with a mapped frame: %" PRIu64 ")\n",
           st.frames_mapped, st.frames_unmapped, st.windows_mapped);
    if (st.outbox_pending) {
        char age[32];
        format_age(st.outbox_oldest_ns, age, sizeof(age));
        printf("outbox          %" PRIu64 " pending, oldest queued %s ago\n", st.outbox_pending,
               age);
    } else {
        printf("outbox          empty\n");
    }
    printf("uploads         %" PRIu64 " uploaded, %" PRIu64 " rejected, %" PRIu64
           " evicted before upload\n",
           st.outbox_uploaded, st.outbox_rejected, st.outbox_evicted);
    return 0;
}

/* --- the control socket: status, profile, metrics --- */

#define CTL_TIMEOUT_MS 10000L
#define CTL_MAX_PAGE ((size_t)64 << 20)      /* /status, /metrics, error bodies */
#define CTL_MAX_PROFILE ((size_t)1024 << 20) /* a merged profile of many isolates */

struct ctl_cli {
    const char *socket, *store;
    int json, all;
    const char *worker, *version, *thread, *isolate, *type, *seconds, *interval, *out;
};

/* Which command parse_ctl_args reads for. */
enum { CTL_STATUS, CTL_PROFILE, CTL_METRICS };

static int parse_ctl_args(struct ctl_cli *c, int argc, char **argv, int cmd)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 'S'},
        {"store", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'j'},
        {"worker", required_argument, NULL, 'w'},
        {"version", required_argument, NULL, 'v'},
        {"isolate", required_argument, NULL, 'i'},
        {"type", required_argument, NULL, 't'},
        {"seconds", required_argument, NULL, 's'},
        {"interval", required_argument, NULL, 'I'},
        {"all", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {"thread", required_argument, NULL, 'T'},
        {NULL, 0, NULL, 0},
    };
    int profile = cmd == CTL_PROFILE, ch;
    optind = 1;
    opterr = 0;
    while ((ch = next_option(argc, argv, ":o:h", opts)) > 0) {
        switch (ch) {
        case 'S':
            c->socket = optarg;
            break;
        case 'd':
            c->store = optarg;
            break;
        case 'j':
            if (cmd != CTL_STATUS)
                return die("--json is not an option of this command");
            c->json = 1;
            break;
        case 'w':
        case 'v':
        case 'T':
        case 'i':
        case 't':
        case 's':
        case 'I':
        case 'a':
        case 'o':
            if (!profile)
                return die("%s is not an option of this command", argv[optind - 1]);
            if (ch == 'w')
                c->worker = optarg;
            else if (ch == 'T')
                c->thread = optarg;
            else if (ch == 'v')
                c->version = optarg;
            else if (ch == 'i')
                c->isolate = optarg;
            else if (ch == 't')
                c->type = optarg;
            else if (ch == 's')
                c->seconds = optarg;
            else if (ch == 'I')
                c->interval = optarg;
            else if (ch == 'a')
                c->all = 1;
            else
                c->out = optarg;
            break;
        }
    }
    if (ch < 0)
        return EXIT_USAGE;
    if (!profile)
        return 0;
    if (c->worker == NULL || c->worker[0] == '\0')
        return die("--worker W is required");
    if (c->type == NULL)
        return die("--type cpu|heap|snapshot is required");
    if (strcmp(c->type, "cpu") != 0 && strcmp(c->type, "heap") != 0 &&
        strcmp(c->type, "snapshot") != 0)
        return die("--type must be cpu, heap or snapshot, not '%s'", c->type);
    if (strcmp(c->type, "cpu") != 0 && (c->seconds || c->interval))
        return die("--seconds and --interval are for --type cpu");
    if (strcmp(c->type, "snapshot") == 0 && c->all)
        return die("--all: a heap snapshot is of one isolate (name it with --isolate)");
    if (c->seconds) {
        char *end;
        errno = 0;
        long v = strtol(c->seconds, &end, 10);
        if (c->seconds[0] < '0' || c->seconds[0] > '9' || *end != '\0' || errno || v < 1 ||
            v > (long)CFG_OD_SECONDS_MAX)
            return die("--seconds: '%s' is not a whole number from 1 to %u", c->seconds,
                       CFG_OD_SECONDS_MAX);
    }
    if (c->interval) {
        uint64_t ns;
        if (cfg_parse_duration(c->interval, &ns) != 0 || ns < CFG_OD_INTERVAL_MIN_NS ||
            ns > CFG_OD_INTERVAL_MAX_NS)
            return die("--interval: '%s' is not a duration from 100us to 1s (like 1ms)",
                       c->interval);
    }
    if (c->isolate) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(c->isolate, &end, 10);
        if (c->isolate[0] < '0' || c->isolate[0] > '9' || *end != '\0' || errno || v > UINT32_MAX)
            return die("--isolate: '%s' is not an isolate id", c->isolate);
    }
    return 0;
}

/*
 * The socket to use, into buf (cap bytes): --socket, else $ISOPROF_SOCKET,
 * else the first that exists of $RUNTIME_DIRECTORY/isoprof.sock,
 * DIR/control.sock (--store DIR) and /run/isoprof/isoprof.sock, else the
 * first of those (for the message); the daemon's rule, from
 * cfg_control_socket_path. A path longer than buf cannot be a socket's
 * (sun_path is 108 bytes): it is cut, and connecting fails naming it.
 * NULL, said on stderr, when memory ran out.
 */
static const char *ctl_socket(const struct ctl_cli *c, char *buf, size_t cap)
{
    char *p;
    if (cfg_control_socket_path(c->socket, c->store, CFG_SOCKET_CLIENT, &p) != 0) {
        die("out of memory");
        return NULL;
    }
    snprintf(buf, cap, "%s", p);
    isoprof_free(p);
    return buf;
}

/* An answer, its body capped at ctl_request's max (body.data is NULL while
 * empty, else NUL-terminated). */
struct ctl_resp {
    long status;
    struct isoprof_buf body;
};

static size_t ctl_on_data(char *p, size_t size, size_t n, void *arg)
{
    struct ctl_resp *r = arg;
    size_t len = size * n;
    /* 0 aborts the transfer: past the cap (body.err says so), or ENOMEM */
    return isoprof_buf_append(&r->body, p, len) == 0 ? len : 0;
}

/* The progress line of `isoprof profile` (stderr is a terminal). */
struct ctl_progress {
    const char *worker;
    long seconds; /* 0: a heap window; -1: a heap snapshot */
    uint64_t start_ns;
    long shown; /* the last second printed, -1 before */
};

static int ctl_on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                           curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    struct ctl_progress *p = arg;
    long el = (long)((isoprof_now_mono_ns() - p->start_ns) / 1000000000ull);
    if (el == p->shown)
        return 0;
    p->shown = el;
    if (p->seconds < 0)
        fprintf(stderr, "\r\033[Ktaking a heap snapshot of %s... %ld s", p->worker, el);
    else if (p->seconds == 0)
        fprintf(stderr, "\r\033[Ktaking a heap profile of %s... %ld s", p->worker, el);
    else if (el < p->seconds)
        fprintf(stderr, "\r\033[Kprofiling %s for %ld s... %ld s left", p->worker, p->seconds,
                p->seconds - el);
    else
        fprintf(stderr, "\r\033[Kprofiling %s for %ld s... waiting for the window (%ld s)",
                p->worker, p->seconds, el);
    fflush(stderr);
    return 0;
}

/*
 * method path on the control socket sock; the answer in *r (body capped at
 * max). Returns 0, or an exit code after saying why on stderr (the agent
 * could not be reached or did not answer).
 */
static int ctl_request(const char *sock, const char *method, const char *path, long timeout_ms,
                       size_t max, struct ctl_progress *pr, struct ctl_resp *r)
{
    memset(r, 0, sizeof(*r));
    isoprof_buf_init(&r->body, max);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return die("cannot initialise libcurl");
    CURL *h = curl_easy_init();
    if (h == NULL)
        return die("out of memory");
    char url[8192];
    snprintf(url, sizeof(url), "http://localhost%s", path);
    curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, sock);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CTL_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ctl_on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "isoprof/" ISOPROF_VERSION);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    }
    if (pr != NULL) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, ctl_on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, pr);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }
    CURLcode rc = curl_easy_perform(h);
    long os_errno = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno);
    curl_easy_cleanup(h);
    if (pr != NULL && pr->shown >= 0) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    if (rc == CURLE_OK)
        return 0;
    int too_big = r->body.err == ISOPROF_ETOOBIG;
    isoprof_buf_free(&r->body);
    if (too_big)
        return die("%s: the answer is larger than %zu MiB", sock, max >> 20);
    if (rc == CURLE_COULDNT_CONNECT)
        return die("cannot connect to %s: %s (is isoprofd running? --socket)", sock,
                   os_errno ? strerror((int)os_errno) : curl_easy_strerror(rc));
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return die("%s: no answer within %ld s", sock, timeout_ms / 1000);
    return die("%s: %s", sock, curl_easy_strerror(rc));
}

static void ctl_resp_free(struct ctl_resp *r)
{
    isoprof_buf_free(&r->body);
}

static const char *jstr(yajl_val v, const char *key)
{
    const char *path[] = {key, NULL};
    yajl_val s = yajl_tree_get(v, path, yajl_t_string);
    return s ? YAJL_GET_STRING(s) : NULL;
}

static yajl_val jget(yajl_val v, const char *key)
{
    const char *path[] = {key, NULL};
    return v ? yajl_tree_get(v, path, yajl_t_any) : NULL;
}

/* A JSON number as uint64; -1 (as int) for null or missing. */
static int jnum(yajl_val v, const char *key, uint64_t *out)
{
    yajl_val n = jget(v, key);
    if (n == NULL || !YAJL_IS_INTEGER(n) || YAJL_GET_INTEGER(n) < 0)
        return -1;
    *out = (uint64_t)YAJL_GET_INTEGER(n);
    return 0;
}

/* A JSON number (integer or not) as a double; -1 for null or missing. */
static int jdouble(yajl_val v, const char *key, double *out)
{
    yajl_val n = jget(v, key);
    if (n == NULL || !YAJL_IS_NUMBER(n))
        return -1;
    *out = YAJL_IS_INTEGER(n) ? (double)YAJL_GET_INTEGER(n) : YAJL_GET_DOUBLE(n);
    return 0;
}

/* An error answer: its message on stderr (and the isolates of a 409). */
static int ctl_fail(const struct ctl_resp *r)
{
    const char *msg = NULL;
    yajl_val root = NULL;
    char err[128];
    const struct isoprof_buf *b = &r->body;
    if (b->data != NULL &&
        isoprof_json_depth(b->data, b->len, CLI_JSON_MAX_DEPTH) <= CLI_JSON_MAX_DEPTH)
        root = yajl_tree_parse(b->data, err, sizeof(err));
    if (root != NULL)
        msg = jstr(root, "error");
    if (msg != NULL)
        fprintf(stderr, "isoprof: %s (HTTP %ld)\n", msg, r->status);
    else
        fprintf(stderr, "isoprof: the agent answered HTTP %ld\n", r->status);
    yajl_val ids = jget(root, "isolates");
    if (ids != NULL && YAJL_IS_ARRAY(ids)) {
        fputs("isoprof: isolates:", stderr);
        for (size_t i = 0; i < ids->u.array.len; i++)
            if (YAJL_IS_INTEGER(ids->u.array.values[i]))
                fprintf(stderr, " %lld", YAJL_GET_INTEGER(ids->u.array.values[i]));
        fputs(" (pick one with --isolate, or --all)\n", stderr);
    }
    if (root != NULL)
        yajl_tree_free(root);
    return r->status == 404 || r->status == 409 ? EXIT_NOMATCH : EXIT_USAGE;
}

static void format_bytes(uint64_t v, char *buf, size_t cap)
{
    if (v >= (1ull << 30))
        snprintf(buf, cap, "%.1fGiB", (double)v / (double)(1ull << 30));
    else if (v >= (1ull << 20))
        snprintf(buf, cap, "%.1fMiB", (double)v / (double)(1ull << 20));
    else if (v >= (1ull << 10))
        snprintf(buf, cap, "%.1fKiB", (double)v / 1024.0);
    else
        snprintf(buf, cap, "%" PRIu64 "B", v);
}

/* An RFC 3339 time of the status page as "12s ago", or "-". */
static void format_when(const char *t, char *buf, size_t cap)
{
    uint64_t ns;
    if (t == NULL || parse_time(t, &ns) != 0) {
        snprintf(buf, cap, "-");
        return;
    }
    char age[32];
    format_age(ns, age, sizeof(age));
    snprintf(buf, cap, "%s ago", age);
}

static void format_uptime(uint64_t s, char *buf, size_t cap)
{
    if (s >= 86400)
        snprintf(buf, cap, "%" PRIu64 "d%" PRIu64 "h", s / 86400, s % 86400 / 3600);
    else if (s >= 3600)
        snprintf(buf, cap, "%" PRIu64 "h%" PRIu64 "m", s / 3600, s % 3600 / 60);
    else if (s >= 60)
        snprintf(buf, cap, "%" PRIu64 "m%" PRIu64 "s", s / 60, s % 60);
    else
        snprintf(buf, cap, "%" PRIu64 "s", s);
}

static const char *or_dash(const char *s)
{
    return s ? s : "-";
}

/* The pause budget's line: the isolates whose windows it stretched (a
 * line each), or that none was. */
static void print_budget(yajl_val targets)
{
    size_t nt = targets && YAJL_IS_ARRAY(targets) ? targets->u.array.len : 0;
    int limited = 0;
    for (size_t i = 0; i < nt; i++) {
        yajl_val t = targets->u.array.values[i], bu = jget(t, "budget");
        yajl_val lim = jget(bu, "limited");
        if (lim == NULL || !YAJL_IS_TRUE(lim))
            continue;
        double dur = 0, per = 0, f = 0, start = 0, spent = 0;
        uint64_t iso = 0, deferred = 0;
        jnum(t, "isolate", &iso);
        jdouble(bu, "duration_ms", &dur);
        jdouble(bu, "period_ms", &per);
        jdouble(bu, "factor", &f);
        jdouble(bu, "spent_share", &spent);
        jdouble(jget(bu, "estimate"), "start_ms", &start);
        jnum(bu, "deferred", &deferred);
        yajl_val over = jget(bu, "over_max_pause");
        int over_n = over && YAJL_IS_ARRAY(over) ? (int)over->u.array.len : 0;
        printf("%s %s/%s isolate %" PRIu64 ": %.1fs windows every %.1fs (x%.2f; "
               "Profiler.start %.0f ms%s), %.3f%% of its time stalled, %" PRIu64 " deferred\n",
               limited ? "         " : "budget   ", or_dash(jstr(t, "worker")),
               or_dash(jstr(t, "thread")), iso, dur / 1000.0, per / 1000.0, f, start,
               over_n ? ", over max_pause" : "", spent * 100.0, deferred);
        limited = 1;
    }
    if (!limited && nt > 0)
        printf("budget    every isolate on the configured schedule\n");
}

/* Warm or cold windows (sampling.cpu.mode): one line when every isolate is
 * cold by the config, else a line per isolate saying which and why. */
static void print_cpu_mode(yajl_val targets)
{
    size_t nt = targets && YAJL_IS_ARRAY(targets) ? targets->u.array.len : 0;
    int lines = 0;
    for (size_t i = 0; i < nt; i++) {
        yajl_val t = targets->u.array.values[i], cm = jget(t, "cpu_mode");
        const char *conf = jstr(cm, "configured"), *why = jstr(cm, "why");
        if (cm == NULL || conf == NULL || strcmp(conf, "cold") == 0)
            continue;
        uint64_t iso = 0, cold = 0;
        double sampler = 0;
        jnum(t, "isolate", &iso);
        int measured = jnum(cm, "cold_cost_ms", &cold) == 0;
        jdouble(cm, "sampler_cost_ms", &sampler);
        printf("%s %s/%s isolate %" PRIu64 ": %s (%s: %s", lines ? "         " : "cpu mode ",
               or_dash(jstr(t, "worker")), or_dash(jstr(t, "thread")), iso,
               or_dash(jstr(cm, "mode")), conf, or_dash(why));
        if (measured)
            printf(", cold start+stop %" PRIu64 " ms, sampler %.0f ms a period", cold, sampler);
        printf(")\n");
        lines = 1;
    }
    if (!lines && nt > 0)
        printf("cpu mode  cold windows (sampling.cpu.mode: cold)\n");
}

static void print_status(yajl_val root)
{
    const char *s;
    uint64_t v = 0, w = 0;
    char a[64], b[64];
    yajl_val targets = jget(root, "targets");
    size_t nt = targets && YAJL_IS_ARRAY(targets) ? targets->u.array.len : 0;
    printf("%-20s %-12s %-10s %-8s %-10s %-19s %-17s %-9s %-9s %s\n", "WORKER", "VERSION",
           "ISOLATE", "RUNTIME", "STATE", "MEMORY", "LIMIT FROM", "LAST CPU", "LAST HEAP",
           "ANOMALY");
    for (size_t i = 0; i < nt; i++) {
        yajl_val t = targets->u.array.values[i];
        uint64_t iso = 0;
        jnum(t, "isolate", &iso);
        printf("%-20.20s %-12.12s %-10" PRIu64 " %-8.8s %-10.10s ", or_dash(jstr(t, "worker")),
               or_dash(jstr(t, "version")), iso, or_dash(jstr(t, "runtime")),
               or_dash(jstr(t, "state")));
        yajl_val mem = jget(t, "memory");
        char m[160];
        if (jnum(mem, "limit", &w) == 0)
            format_bytes(w, b, sizeof(b));
        else
            snprintf(b, sizeof(b), "-");
        if (jnum(mem, "used", &v) == 0)
            format_bytes(v, a, sizeof(a));
        else
            snprintf(a, sizeof(a), "-");
        snprintf(m, sizeof(m), "%s/%s", a, b);
        const char *from = jstr(mem, "limit_source");
        yajl_val lw = jget(t, "last_window");
        format_when(jstr(lw, "cpu"), a, sizeof(a));
        format_when(jstr(lw, "heap"), b, sizeof(b));
        printf("%-19s %-17.17s %-9s %-9s ", m, or_dash(from), a, b);
        yajl_val an = jget(t, "anomaly");
        if (an != NULL && YAJL_IS_OBJECT(an)) {
            char since[64];
            format_when(jstr(an, "since"), since, sizeof(since));
            printf("%s (since %s", (s = jstr(an, "kind")) ? s : "?", since);
            /* A near-limit episode's cost: its heap windows and their stall. */
            yajl_val cost = jget(an, "cost");
            yajl_val share = jget(cost, "share");
            if (jnum(cost, "heap_windows", &v) == 0 && share && YAJL_IS_NUMBER(share))
                printf(", %" PRIu64 " heap windows, %.2f%% stalled", v,
                       YAJL_GET_DOUBLE(share) * 100.0);
            printf(")\n");
        } else {
            printf("-\n");
        }
    }
    if (nt == 0)
        printf("(no targets)\n");
    putchar('\n');
    yajl_val sc = jget(root, "schedule");
    uint64_t run = 0, del = 0, max = 0;
    jnum(sc, "running", &run);
    jnum(sc, "delayed", &del);
    int has_max = jnum(sc, "max_concurrent", &max) == 0;
    printf("schedule  %" PRIu64 " window%s running, %" PRIu64 " delayed", run, run == 1 ? "" : "s",
           del);
    if (has_max)
        printf(" (at most %" PRIu64 " at once)", max);
    putchar('\n');
    print_budget(targets);
    print_cpu_mode(targets);
    yajl_val st = jget(root, "store");
    printf("store     %s:", (s = jstr(st, "path")) ? s : "?");
    if (jnum(st, "windows", &v) == 0)
        printf(" %" PRIu64 " windows,", v);
    if (jnum(st, "bytes", &v) == 0) {
        format_bytes(v, a, sizeof(a));
        printf(" %s", a);
    }
    if (jnum(st, "budget", &v) == 0) {
        format_bytes(v, b, sizeof(b));
        printf(" of %s", b);
    }
    putchar('\n');
    yajl_val sm = jget(root, "source_maps");
    if (sm != NULL && YAJL_IS_OBJECT(sm)) {
        uint64_t maps = 0, fm = 0, fu = 0, fo = 0;
        jnum(sm, "maps", &maps);
        jnum(sm, "frames_over_allowance", &fo);
        jnum(sm, "bytes", &v);
        jnum(sm, "budget", &w);
        jnum(sm, "frames_mapped", &fm);
        jnum(sm, "frames_unmapped", &fu);
        format_bytes(v, a, sizeof(a));
        format_bytes(w, b, sizeof(b));
        printf("srcmaps   %" PRIu64 " map%s cached, %s of %s; frames %" PRIu64 " mapped, %" PRIu64
               " not",
               maps, maps == 1 ? "" : "s", a, b, fm, fu);
        if (fo > 0)
            printf(" (%" PRIu64 " over the CPU allowance)", fo);
        yajl_val rf = jget(sm, "refused");
        int any = 0;
        for (size_t i = 0; rf && YAJL_IS_OBJECT(rf) && i < rf->u.object.len; i++) {
            yajl_val n = rf->u.object.values[i];
            if (YAJL_IS_INTEGER(n) && YAJL_GET_INTEGER(n) > 0)
                printf("%s%s %lld", any++ ? ", " : "; refused: ", rf->u.object.keys[i],
                       (long long)YAJL_GET_INTEGER(n));
        }
        putchar('\n');
    }
    yajl_val ob = jget(root, "outbox");
    yajl_val up = jget(root, "upload");
    yajl_val en = jget(up, "enabled");
    if (en != NULL && YAJL_IS_TRUE(en)) {
        printf("outbox    ");
        if (jnum(ob, "pending", &v) == 0)
            printf("%" PRIu64 " pending", v);
        else
            printf("? pending");
        if (jnum(ob, "oldest_age_s", &w) == 0)
            printf(", oldest %" PRIu64 " s", w);
        if (jnum(up, "profiles_sent", &v) == 0)
            printf("; %" PRIu64 " profiles sent", v);
        if (jnum(up, "requests_failed", &v) == 0)
            printf(", %" PRIu64 " failed requests", v);
        if (jnum(ob, "expired", &v) == 0 && v > 0)
            printf("; %" PRIu64 " expired (older than upload.max_age, kept)", v);
        putchar('\n');
    } else {
        printf("upload    off\n");
    }
    uint64_t up_s = 0;
    jnum(root, "uptime_s", &up_s);
    format_uptime(up_s, a, sizeof(a));
    printf("agent     isoprofd %s", (s = jstr(root, "version")) ? s : "?");
    if (jnum(root, "pid", &v) == 0)
        printf(" (pid %" PRIu64 ")", v);
    printf(", up %s", a);
    if ((s = jstr(root, "config")) != NULL)
        printf(", config %s", s);
    putchar('\n');
}

/* The arguments of a GET command (kind), then GET path over the socket:
 * 0 with *r holding a 200 answer (free it with ctl_resp_free), else the
 * exit status, the reason already printed. *sock names the socket (in buf). */
static int ctl_get_page(int argc, char **argv, int kind, const char *path, struct ctl_cli *c,
                        char *buf, size_t cap, const char **sock, struct ctl_resp *r)
{
    int rc = parse_ctl_args(c, argc, argv, kind);
    if (rc)
        return rc;
    if ((*sock = ctl_socket(c, buf, cap)) == NULL)
        return EXIT_USAGE;
    if ((rc = ctl_request(*sock, "GET", path, CTL_TIMEOUT_MS, CTL_MAX_PAGE, NULL, r)) != 0)
        return rc;
    if (r->status != 200) {
        rc = ctl_fail(r);
        ctl_resp_free(r);
        return rc;
    }
    return 0;
}

static int cmd_status(int argc, char **argv)
{
    struct ctl_cli c = {0};
    char buf[4300];
    const char *sock;
    struct ctl_resp r;
    int rc = ctl_get_page(argc, argv, CTL_STATUS, "/status", &c, buf, sizeof(buf), &sock, &r);
    if (rc)
        return rc;
    if (c.json) {
        fwrite(r.body.data ? r.body.data : "", 1, r.body.len, stdout);
        if (r.body.len == 0 || r.body.data[r.body.len - 1] != '\n')
            putchar('\n');
        ctl_resp_free(&r);
        return fflush(stdout) == 0 ? 0 : die("writing stdout: %s", strerror(errno));
    }
    char err[256];
    /* Whatever answers on the socket, a deep body is refused before yajl
     * builds (and recursively frees) a tree of it. */
    yajl_val root = r.body.data && isoprof_json_depth(r.body.data, r.body.len,
                                                      CLI_JSON_MAX_DEPTH) <= CLI_JSON_MAX_DEPTH
                        ? yajl_tree_parse(r.body.data, err, sizeof(err))
                        : NULL;
    ctl_resp_free(&r);
    if (root == NULL || !YAJL_IS_OBJECT(root)) {
        if (root)
            yajl_tree_free(root);
        return die("%s: /status is not a JSON object", sock);
    }
    print_status(root);
    yajl_tree_free(root);
    return fflush(stdout) == 0 ? 0 : die("writing stdout: %s", strerror(errno));
}

static int cmd_metrics(int argc, char **argv)
{
    struct ctl_cli c = {0};
    char buf[4300];
    const char *sock;
    struct ctl_resp r;
    int rc = ctl_get_page(argc, argv, CTL_METRICS, "/metrics", &c, buf, sizeof(buf), &sock, &r);
    if (rc)
        return rc;
    fwrite(r.body.data ? r.body.data : "", 1, r.body.len, stdout);
    ctl_resp_free(&r);
    return fflush(stdout) == 0 ? 0 : die("writing stdout: %s", strerror(errno));
}

/* Append "&key=value" (value escaped) to q. */
static void query_add(char *q, size_t cap, const char *key, const char *value)
{
    char *e = curl_easy_escape(NULL, value, 0);
    size_t len = strlen(q);
    snprintf(q + len, cap - len, "%s%s=%s", len ? "&" : "", key, e ? e : "");
    curl_free(e);
}

/* len bytes to path, through path.tmp and a rename. Returns an exit code. */
static int write_file(const char *path, const char *data, size_t len)
{
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
        return die("-o: the file name is too long");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return die("%s: %s", tmp, strerror(errno));
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, data + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return die("writing %s: %s", tmp, strerror(e));
        }
        off += (size_t)n;
    }
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return die("writing %s: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return die("renaming %s to %s: %s", tmp, path, strerror(e));
    }
    return 0;
}

static int cmd_profile(int argc, char **argv)
{
    struct ctl_cli c = {0};
    int rc = parse_ctl_args(&c, argc, argv, CTL_PROFILE);
    if (rc)
        return rc;
    if (c.out == NULL && isatty(STDOUT_FILENO))
        return die("refusing to write a binary profile to a terminal: use -o FILE or redirect "
                   "stdout");
    char buf[4300];
    const char *sock = ctl_socket(&c, buf, sizeof(buf));
    if (sock == NULL)
        return EXIT_USAGE;
    char q[6000] = "";
    query_add(q, sizeof(q), "worker", c.worker);
    if (c.version)
        query_add(q, sizeof(q), "version", c.version);
    if (c.isolate)
        query_add(q, sizeof(q), "isolate", c.isolate);
    if (c.thread)
        query_add(q, sizeof(q), "thread", c.thread);
    query_add(q, sizeof(q), "type", c.type);
    if (c.seconds)
        query_add(q, sizeof(q), "seconds", c.seconds);
    if (c.interval)
        query_add(q, sizeof(q), "interval", c.interval);
    if (c.all)
        query_add(q, sizeof(q), "all", "1");
    char path[6100];
    snprintf(path, sizeof(path), "/profile?%s", q);
    long seconds = c.seconds ? strtol(c.seconds, NULL, 10) : 10;
    int heap = strcmp(c.type, "heap") == 0, snapshot = strcmp(c.type, "snapshot") == 0;
    /* The window may wait for a scheduled one to end first: room for that.
     * A snapshot waits for the windows in flight, then V8 may take minutes
     * to write a large heap (the daemon gives it up to 15). */
    long timeout_ms = snapshot ? 1200000L : heap ? 600000L : (2 * seconds + 600) * 1000L;
    struct ctl_progress pr = {.worker = c.worker,
                              .seconds = heap       ? 0
                                         : snapshot ? -1
                                                    : seconds,
                              .start_ns = isoprof_now_mono_ns(),
                              .shown = -1};
    struct ctl_resp r;
    rc = ctl_request(sock, "POST", path, timeout_ms, CTL_MAX_PROFILE,
                     isatty(STDERR_FILENO) ? &pr : NULL, &r);
    if (rc != 0)
        return rc;
    if (r.status != 200) {
        rc = ctl_fail(&r);
        ctl_resp_free(&r);
        return rc;
    }
    if (c.out != NULL) {
        rc = write_file(c.out, r.body.data ? r.body.data : "", r.body.len);
    } else {
        size_t wr = fwrite(r.body.data ? r.body.data : "", 1, r.body.len, stdout);
        rc = wr != r.body.len || fflush(stdout) != 0 ? die("writing stdout: %s", strerror(errno))
                                                     : 0;
    }
    ctl_resp_free(&r);
    if (rc == 0 && snapshot)
        fprintf(stderr,
                "isoprof: that is the snapshot's retained profile; the raw snapshot is stored: "
                "`isoprof windows --type snapshot --worker %s` lists it, `isoprof export --id ID "
                "-o FILE.heapsnapshot` writes it\n",
                c.worker);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
        printf("isoprof %s\n", ISOPROF_VERSION);
        return 0;
    }
    if (strcmp(cmd, "windows") == 0)
        return cmd_windows(argc - 1, argv + 1);
    if (strcmp(cmd, "export") == 0)
        return cmd_export(argc - 1, argv + 1);
    if (strcmp(cmd, "top") == 0)
        return cmd_top(argc - 1, argv + 1);
    if (strcmp(cmd, "flamegraph") == 0)
        return cmd_flamegraph(argc - 1, argv + 1);
    if (strcmp(cmd, "store") == 0)
        return cmd_store(argc - 1, argv + 1);
    if (strcmp(cmd, "anomalies") == 0)
        return cmd_anomalies(argc - 1, argv + 1);
    if (strcmp(cmd, "status") == 0)
        return cmd_status(argc - 1, argv + 1);
    if (strcmp(cmd, "profile") == 0)
        return cmd_profile(argc - 1, argv + 1);
    if (strcmp(cmd, "metrics") == 0)
        return cmd_metrics(argc - 1, argv + 1);
    if (strcmp(cmd, "upload") == 0)
        return cmd_upload(argc - 1, argv + 1);
    fprintf(stderr, "isoprof: unknown command '%s'; try 'isoprof --help'\n", cmd);
    return EXIT_USAGE;
}

/*
 * args.c - the command line of the store commands: options, their values
 * (times, kinds, ids) and where the store is (cli_parse_args); the formats
 * of times, types and ages that several commands print.
 */
#include "cli_internal.h"

#include "config.h"
#include "flamegraph.h"
#include "store.h"

#include "base.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* --- time --- */

int cli_parse_time(const char *s, uint64_t *ns)
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

void cli_format_time(uint64_t ns, char *buf, size_t cap)
{
    time_t t = (time_t)(ns / 1000000000ull);
    struct tm tm;
    gmtime_r(&t, &tm);
    char base[32];
    strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%03uZ", base, (unsigned)((ns / 1000000ull) % 1000));
}

/* The store's name of a window type; "unknown" for one of a later build. */
const char *cli_type_name(uint8_t t)
{
    const char *n = store_type_name(t);
    return n != NULL ? n : "unknown";
}

const char *cli_upload_name(uint8_t u)
{
    static const char *const names[] = {"off", "pending", "uploaded", "rejected", "expired"};
    return u < ISOPROF_ARRAY_SIZE(names) ? names[u] : "unknown";
}

/* How long ago wall time ns was, in its largest whole unit ("3m"). */
void cli_format_age(uint64_t ns, char *buf, size_t cap)
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
        return cli_die("'%s' is not an anomaly kind (memory_near_limit, memory_growth, "
                       "oom_suspected, latency_p999_spike, version_regression)",
                       name);
    *kind = (uint8_t)k;
    return 0;
}

/*
 * The next option of argv for cli_parse_args and parse_ctl_args: getopt_long
 * over shortopts (starting with ':', so a missing value is told apart from
 * an unknown option) and opts; the caller sets optind = 1 and opterr = 0
 * before the first call. Returns the option's letter; 0 once every option
 * is read and no argument is left over; or -1 after saying on stderr what
 * is wrong with the command line. --help prints the usage and exits 0.
 */
int cli_next_option(int argc, char **argv, const char *shortopts, const struct option *opts)
{
    int ch = getopt_long(argc, argv, shortopts, opts, NULL);
    switch (ch) {
    case -1:
        if (optind < argc) {
            cli_die("unexpected argument '%s'", argv[optind]);
            return -1;
        }
        return 0;
    case 'h':
        cli_usage(stdout);
        exit(0);
    case ':':
        cli_die("option %s needs a value", argv[optind - 1]);
        return -1;
    case '?':
        cli_die("unknown option '%s'; try 'isoprof --help'", argv[optind - 1]);
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

const char *cli_system_config(const char **from)
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
        return is_dir(env) ? 0 : cli_die("no store at %s (from $ISOPROF_STORE)", env);
    }
    const char *cfgp = c->config_path, *from, *cfg_from = "";
    const char *sys = cli_system_config(&from);
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
                   : cli_die("no store at %s (store.path of %s%s)", from_cfg, cfgp, cfg_from);
    }
    const char *def = CFG_DEFAULT_STORE_PATH;
    if (is_dir(def)) {
        c->store_path = def;
        return 0;
    }
    return cli_die("no store found: no --store, $ISOPROF_STORE unset, no --config and no %s%s, "
                   "and no %s here",
                   sys, from, def);
}

int cli_parse_args(struct cli *c, int argc, char **argv, unsigned allow)
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
        {"from", required_argument, NULL, 'r'},
        {"to", required_argument, NULL, 'x'},
        {"html", required_argument, NULL, 'H'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_option(argc, argv, ":o:n:h", opts)) > 0) {
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
                return cli_die("--pid is not an option of this command");
            /* Digits only: no sign, space or base prefix that strtoul
             * would take. */
            size_t n = strspn(optarg, "0123456789");
            unsigned long pid =
                n > 0 && n <= 7 && optarg[n] == '\0' ? strtoul(optarg, NULL, 10) : 0;
            if (pid == 0 || pid > CLI_PID_MAX)
                return cli_die("--pid: '%s' is not a process id (a whole number from 1 to %u)",
                               optarg, CLI_PID_MAX);
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
                    return cli_die("--anomaly needs an anomaly id (see 'isoprof anomalies')");
                c->anomaly_id = arg;
            } else {
                return cli_die("--anomaly is not an option of this command");
            }
            break;
        }
        case 'k':
            if (!(allow & ARG_KIND))
                return cli_die("--kind is not an option of this command");
            if (parse_kind(optarg, &c->af.kind) != 0)
                return EXIT_USAGE;
            break;
        case 't':
            c->f.type = 0;
            for (unsigned t = 1; t <= STORE_TYPE_MAX && c->f.type == 0; t++)
                if (store_type_name(t) != NULL && strcmp(optarg, store_type_name(t)) == 0)
                    c->f.type = (uint8_t)t;
            if (c->f.type == 0)
                return cli_die("--type must be " CLI_TYPES_OR ", not '%s'", optarg);
            break;
        case 'S':
            if (cli_parse_time(optarg, &c->f.since_ns) != 0)
                return cli_die("--since: '%s' is not RFC 3339 or a relative time like -15m",
                               optarg);
            c->af.since_ns = c->f.since_ns;
            break;
        case 'U':
            if (cli_parse_time(optarg, &c->f.until_ns) != 0)
                return cli_die("--until: '%s' is not RFC 3339 or a relative time like -15m",
                               optarg);
            c->af.until_ns = c->f.until_ns;
            break;
        case 'F':
            if (!(allow & ARG_FORMAT))
                return cli_die("--format is not an option of this command");
            if (strcmp(optarg, "pprof") != 0 && strcmp(optarg, "folded") != 0 &&
                strcmp(optarg, "cpuprofile") != 0 && strcmp(optarg, "raw") != 0)
                return cli_die("--format must be pprof, folded, cpuprofile or raw, not '%s'",
                               optarg);
            c->format = optarg;
            break;
        case 'f': {
            if (!(allow & ARG_FLAME))
                return cli_die("--fold is not an option of this command");
            char *end;
            errno = 0;
            double pct = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || errno != 0 || !(pct >= 0 && pct < 100))
                return cli_die("--fold: '%s' is not a percentage from 0 to under 100", optarg);
            c->fold = pct / 100;
            break;
        }
        case 'W':
        case 'V':
        case 'B':
        case 'E':
            if (!(allow & ARG_FLAME))
                return cli_die("%s is not an option of this command", argv[optind - 1]);
            c->diff = 1;
            if (ch == 'W')
                c->bf.worker = optarg;
            else if (ch == 'V')
                c->bf.version = optarg;
            else if (cli_parse_time(optarg, ch == 'B' ? &c->bf.since_ns : &c->bf.until_ns) != 0)
                return cli_die("%s: '%s' is not RFC 3339 or a relative time like -15m",
                               ch == 'B' ? "--base-since" : "--base-until", optarg);
            break;
        case 'r':
        case 'x':
        case 'H':
            if (!(allow & ARG_COMPARE))
                return cli_die("%s is not an option of this command", argv[optind - 1]);
            if (ch == 'r')
                c->from = optarg;
            else if (ch == 'x')
                c->to = optarg;
            else
                c->out = optarg;
            break;
        case 'i':
            if (!allow_id)
                return cli_die("--id is not an option of this command");
            c->id = optarg;
            break;
        case 'j':
            if (!allow_json)
                return cli_die("--json is not an option of this command");
            c->json = 1;
            break;
        case 'o':
            if (!allow_out)
                return cli_die("-o is not an option of this command");
            c->out = optarg;
            break;
        case 'n': {
            if (!allow_n)
                return cli_die("-n is not an option of this command");
            char *end;
            c->top_n = strtol(optarg, &end, 10);
            if (*end != '\0' || c->top_n <= 0 || c->top_n > 100000)
                return cli_die("-n: '%s' is not a count between 1 and 100000", optarg);
            break;
        }
        }
    }
    if (ch < 0)
        return EXIT_USAGE;
    if (resolve_store(c) != 0)
        return EXIT_USAGE;
    if (c->f.since_ns && c->f.until_ns && c->f.until_ns <= c->f.since_ns)
        return cli_die("--until must be later than --since");
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
            return cli_die("the base set's --until must be later than its --since");
        c->bf = b;
    }
    return 0;
}

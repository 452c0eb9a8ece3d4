/*
 * ctl.c - the client of a running isoprofd's control socket: status,
 * profile and metrics, over HTTP/1.1 on a Unix socket (libcurl easy:
 * blocking is fine here).
 */
#include "cli_internal.h"

#include "config.h"
#include "flamegraph.h"
#include "store.h"

#include "base.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

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
    while ((ch = cli_next_option(argc, argv, ":o:h", opts)) > 0) {
        switch (ch) {
        case 'S':
            c->socket = optarg;
            break;
        case 'd':
            c->store = optarg;
            break;
        case 'j':
            if (cmd != CTL_STATUS)
                return cli_die("--json is not an option of this command");
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
                return cli_die("%s is not an option of this command", argv[optind - 1]);
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
        return cli_die("--worker W is required");
    if (c->type == NULL)
        return cli_die("--type cpu|heap|snapshot is required");
    if (strcmp(c->type, "cpu") != 0 && strcmp(c->type, "heap") != 0 &&
        strcmp(c->type, "snapshot") != 0)
        return cli_die("--type must be cpu, heap or snapshot, not '%s'", c->type);
    if (strcmp(c->type, "cpu") != 0 && (c->seconds || c->interval))
        return cli_die("--seconds and --interval are for --type cpu");
    if (strcmp(c->type, "snapshot") == 0 && c->all)
        return cli_die("--all: a heap snapshot is of one isolate (name it with --isolate)");
    if (c->seconds) {
        char *end;
        errno = 0;
        long v = strtol(c->seconds, &end, 10);
        if (c->seconds[0] < '0' || c->seconds[0] > '9' || *end != '\0' || errno || v < 1 ||
            v > (long)CFG_OD_SECONDS_MAX)
            return cli_die("--seconds: '%s' is not a whole number from 1 to %u", c->seconds,
                           CFG_OD_SECONDS_MAX);
    }
    if (c->interval) {
        uint64_t ns;
        if (cfg_parse_duration(c->interval, &ns) != 0 || ns < CFG_OD_INTERVAL_MIN_NS ||
            ns > CFG_OD_INTERVAL_MAX_NS)
            return cli_die("--interval: '%s' is not a duration from 100us to 1s (like 1ms)",
                           c->interval);
    }
    if (c->isolate) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(c->isolate, &end, 10);
        if (c->isolate[0] < '0' || c->isolate[0] > '9' || *end != '\0' || errno || v > UINT32_MAX)
            return cli_die("--isolate: '%s' is not an isolate id", c->isolate);
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
        cli_die("out of memory");
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
        return cli_die("cannot initialise libcurl");
    CURL *h = curl_easy_init();
    if (h == NULL)
        return cli_die("out of memory");
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
        return cli_die("%s: the answer is larger than %zu MiB", sock, max >> 20);
    if (rc == CURLE_COULDNT_CONNECT)
        return cli_die("cannot connect to %s: %s (is isoprofd running? --socket)", sock,
                       os_errno ? strerror((int)os_errno) : curl_easy_strerror(rc));
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return cli_die("%s: no answer within %ld s", sock, timeout_ms / 1000);
    return cli_die("%s: %s", sock, curl_easy_strerror(rc));
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
    if (t == NULL || cli_parse_time(t, &ns) != 0) {
        snprintf(buf, cap, "-");
        return;
    }
    char age[32];
    cli_format_age(ns, age, sizeof(age));
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

int cli_cmd_status(int argc, char **argv)
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
        return fflush(stdout) == 0 ? 0 : cli_die("writing stdout: %s", strerror(errno));
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
        return cli_die("%s: /status is not a JSON object", sock);
    }
    print_status(root);
    yajl_tree_free(root);
    return fflush(stdout) == 0 ? 0 : cli_die("writing stdout: %s", strerror(errno));
}

int cli_cmd_metrics(int argc, char **argv)
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
    return fflush(stdout) == 0 ? 0 : cli_die("writing stdout: %s", strerror(errno));
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
        return cli_die("-o: the file name is too long");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return cli_die("%s: %s", tmp, strerror(errno));
    int rc = isoprof_write_full(fd, data, len);
    if (rc != 0) {
        close(fd);
        unlink(tmp);
        return cli_die("writing %s: %s", tmp, strerror(-rc));
    }
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return cli_die("writing %s: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return cli_die("renaming %s to %s: %s", tmp, path, strerror(e));
    }
    return 0;
}

int cli_cmd_profile(int argc, char **argv)
{
    struct ctl_cli c = {0};
    int rc = parse_ctl_args(&c, argc, argv, CTL_PROFILE);
    if (rc)
        return rc;
    if (c.out == NULL && isatty(STDOUT_FILENO))
        return cli_die("refusing to write a binary profile to a terminal: use -o FILE or redirect "
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
        rc = wr != r.body.len || fflush(stdout) != 0
                 ? cli_die("writing stdout: %s", strerror(errno))
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

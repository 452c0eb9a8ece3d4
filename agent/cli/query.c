/*
 * query.c - the store commands that list: windows, anomalies, store
 * stat|check and upload; and the store's reads, each bracketed for the
 * guard (guard.h) so that a damaged store ends the child, not the command.
 */
#include "cli_internal.h"

#include "guard.h"
#include "replay.h"
#include "store.h"

#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A store read failed with rc: one line on stderr saying so (what names
 * the read), and an exit code. A store that is found damaged (a record,
 * an index entry or a page that does not hold together) is named, with
 * the command that reports the damage. */
static const char *cli_store; /* the store cli_open_store opened, for cli_store_fail */

int cli_store_fail(const char *what, int rc)
{
    if (rc == ISOPROF_ECORRUPT || rc == ISOPROF_EDAMAGED)
        return cli_die("the store at %s is damaged: %s: %s; 'isoprof store check --store %s' "
                       "reports what is damaged",
                       cli_store, what, isoprof_strerror(rc), cli_store);
    return cli_die("%s: %s", what, isoprof_strerror(rc));
}

/*
 * The store's work runs in a child (guard.h): from cli_open_store on, this
 * process is the child, and a fault of LMDB on a damaged page ends it,
 * not the command. Each call into the library below is bracketed so that
 * the parent can tell a stuck walk from a slow reader of the output.
 */
int cli_open_store(const struct cli *c, struct store **s)
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
    store_agg_cb agg;
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

int cli_g_windows(struct store *s, const struct store_filter *f, store_window_cb cb, void *arg)
{
    struct guarded g = {.window = cb, .arg = arg};
    cli_guard_enter();
    int rc = store_windows(s, f, guarded_on_window, &g);
    cli_guard_leave();
    return rc;
}

static int cli_g_anomalies(struct store *s, const struct store_anomaly_filter *f,
                           store_anomaly_cb cb, void *arg)
{
    struct guarded g = {.anomaly = cb, .arg = arg};
    cli_guard_enter();
    int rc = store_anomalies(s, f, guarded_on_anomaly, &g);
    cli_guard_leave();
    return rc;
}

static int guarded_on_agg(const struct store_agg *a, void *arg)
{
    const struct guarded *g = arg;
    cli_guard_leave();
    int rc = g->agg(a, g->arg);
    cli_guard_enter();
    return rc;
}

int cli_g_aggs(struct store *s, const char *worker, store_agg_cb cb, void *arg)
{
    struct guarded g = {.agg = cb, .arg = arg};
    cli_guard_enter();
    int rc = store_aggs(s, worker, guarded_on_agg, &g);
    cli_guard_leave();
    return rc;
}

int cli_g_agg_get(struct store *s, const char *worker, const char *version, struct store_agg *out,
                  void **bytes, size_t *len)
{
    cli_guard_enter();
    int rc = store_agg_get(s, worker, version, out, bytes, len);
    cli_guard_leave();
    return rc;
}

int cli_g_load(struct store *s, uint64_t id, void **pprof, size_t *len)
{
    cli_guard_enter();
    int rc = store_load(s, id, pprof, len);
    cli_guard_leave();
    return rc;
}

int cli_g_blob_read(struct store *s, uint64_t id,
                    int (*cb)(void *arg, const void *data, size_t len), void *arg)
{
    struct guarded g = {.piece = cb, .arg = arg};
    cli_guard_enter();
    int rc = store_blob_read(s, id, guarded_on_piece, &g);
    cli_guard_leave();
    return rc;
}

static int cli_g_stat(struct store *s, struct store_stat *st)
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
        return cli_die("--anomaly: '%s' is not an anomaly id (see 'isoprof anomalies')", text);
    struct store_anomaly_filter af = {.id = id};
    a->id = id;
    int rc = cli_g_anomalies(s, &af, copy_on_anomaly, a);
    if (rc < 0)
        return cli_store_fail("reading anomalies", rc);
    if (!a->found) {
        fprintf(stderr, "isoprof: no anomaly %llu in this store\n", id);
        return EXIT_NOMATCH;
    }
    return 0;
}

/* --- windows --- */

void cli_json_str(FILE *f, const char *s)
{
    struct isoprof_buf b;
    /* every byte escaped as \u00XX, and the quotes: the cap is never hit */
    isoprof_buf_init(&b, s != NULL ? 6 * strlen(s) + 2 : 4);
    if (isoprof_json_str(&b, s != NULL ? s : "") != 0)
        exit(cli_die("out of memory"));
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
    cli_format_time(w->start_ns, start, sizeof(start));
    cli_format_time(w->end_ns, end, sizeof(end));
    if (l->json) {
        fputs("{\"id\":", stdout);
        cli_json_str(stdout, id);
        fputs(",\"worker\":", stdout);
        cli_json_str(stdout, w->worker);
        fputs(",\"version\":", stdout);
        cli_json_str(stdout, w->version);
        fputs(",\"thread\":", stdout);
        cli_json_str(stdout, w->thread ? w->thread : "main");
        printf(",\"pid\":%" PRIu32, w->pid);
        if (w->container && *w->container) {
            fputs(",\"container\":", stdout);
            cli_json_str(stdout, w->container);
        }
        if (w->nlabels > 0) {
            fputs(",\"labels\":{", stdout);
            for (size_t i = 0; i < w->nlabels; i++) {
                if (i > 0)
                    fputc(',', stdout);
                cli_json_str(stdout, w->labels[i].name);
                fputc(':', stdout);
                cli_json_str(stdout, w->labels[i].value);
            }
            fputc('}', stdout);
        }
        printf(",\"isolate\":%" PRIu32 ",\"runtime\":", w->isolate);
        cli_json_str(stdout, w->runtime);
        printf(",\"type\":\"%s\",\"start\":\"%s\",\"end\":\"%s\",\"samples\":%" PRIu64
               ",\"bytes\":%" PRIu64 ",\"raw_bytes\":%" PRIu64 ",\"interval\":%" PRIu64
               ",\"on_demand\":%s,\"frames_mapped\":%" PRIu32 ",\"frames_unmapped\":%" PRIu32,
               cli_type_name(w->type), start, end, w->samples, w->stored_size, w->raw_size,
               w->interval, (w->flags & STORE_FLAG_ON_DEMAND) ? "true" : "false", w->frames_mapped,
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
        printf(",\"upload\":\"%s\"", cli_upload_name(w->upload));
        if (w->upload == STORE_UPLOAD_REJECTED || w->upload == STORE_UPLOAD_EXPIRED) {
            printf(",\"upload_status\":%u,\"upload_reason\":", (unsigned)w->reject_status);
            cli_json_str(stdout, w->reject_reason ? w->reject_reason : "");
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
               w->runtime, cli_type_name(w->type), start, (double)(w->end_ns - w->start_ns) / 1e9,
               w->samples, w->stored_size, w->raw_size, an);
    }
    l->count++;
    return 0;
}

/* isoprof upload --since T [FILTERS] [--config FILE]: send stored windows
 * again (replay.c). The config names the server (--config, else the
 * system's). */
int cli_cmd_upload(int argc, char **argv)
{
    struct cli c = {0};
    int rc = cli_parse_args(&c, argc, argv, ARG_JSON | ARG_PID);
    if (rc)
        return rc;
    if (c.f.since_ns == 0)
        return cli_die("upload: --since T is required (the windows to send again)");
    const char *from, *sys = cli_system_config(&from);
    if (c.config_path == NULL && access(sys, F_OK) == 0)
        c.config_path = sys;
    if (c.config_path == NULL)
        return cli_die("upload: no --config FILE and no %s%s: its upload section names the server",
                       sys, from);
    struct store *s;
    if ((rc = cli_open_store(&c, &s)) != 0)
        return rc;
    rc = cli_replay(s, c.config_path, &c.f, c.json);
    store_close(s);
    return rc;
}

int cli_cmd_windows(int argc, char **argv)
{
    struct cli c = {0};
    int rc = cli_parse_args(&c, argc, argv, ARG_ID | ARG_JSON | ARG_PINNED | ARG_PID);
    if (rc)
        return rc;
    struct store *s;
    if ((rc = cli_open_store(&c, &s)) != 0)
        return rc;
    if (c.id && store_id_parse(s, c.id, &c.f.id) != 0) {
        store_close(s);
        return cli_die("--id: '%s' is not a window id of this store", c.id);
    }
    struct list_ctx l = {.s = s, .json = c.json};
    if (c.anomaly_id) {
        /* The windows the anomaly keeps, oldest first, through the FILTERS. */
        struct anomaly_copy a = {0};
        if (c.id) {
            rc = cli_die("--id and --anomaly exclude each other");
        } else if ((rc = anomaly_load(s, c.anomaly_id, &a)) == 0) {
            int err = 0;
            for (size_t i = 0; i < a.n && err == 0; i++) {
                struct store_filter wf = c.f;
                wf.id = a.windows[i];
                err = cli_g_windows(s, &wf, list_on_window, &l);
            }
            if (err != 0)
                rc = cli_store_fail("reading windows", err);
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
    rc = cli_g_windows(s, &c.f, list_on_window, &l);
    store_close(s);
    if (rc != 0)
        return cli_store_fail("reading windows", rc);
    if (l.count == 0) {
        fprintf(stderr, "isoprof: no window matched\n");
        return EXIT_NOMATCH;
    }
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
int cli_resolve_anomaly(struct cli *c, struct store *s)
{
    if (c->f.type == 0)
        return cli_die("--anomaly ID needs --type T (" CLI_TYPES_OR ")");
    struct anomaly_copy a = {0};
    int rc = anomaly_load(s, c->anomaly_id, &a);
    if (rc != 0) {
        isoprof_free(a.windows);
        return rc;
    }
    struct pick_ctx p = {.type = c->f.type, .end_ns = a.open ? UINT64_MAX : a.end_ns};
    for (size_t i = 0; i < a.n; i++) {
        struct store_filter wf = {.id = a.windows[i]};
        if ((rc = cli_g_windows(s, &wf, pick_on_window, &p)) < 0)
            break;
    }
    isoprof_free(a.windows);
    if (rc < 0)
        return cli_store_fail("reading windows", rc);
    uint64_t chosen = p.best ? p.best : p.after;
    if (chosen == 0) {
        fprintf(stderr, "isoprof: anomaly %llu pins no %s window\n", a.id,
                cli_type_name(c->f.type));
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
    else if (kind == STORE_ANOMALY_VERSION_REGRESSION)
        printf("%.1fpt", (double)v / 1e4); /* ppm of the CPU, as share points */
    else
        printf("%.1fMiB", (double)v / (1024.0 * 1024.0));
}

static const char *anomaly_unit(uint8_t kind)
{
    return kind == STORE_ANOMALY_LATENCY_P999_SPIKE   ? "nanoseconds"
           : kind == STORE_ANOMALY_VERSION_REGRESSION ? "ppm"
                                                      : "bytes";
}

static void json_double(double v)
{
    if (v >= 0 && v == v && v <= 1e308)
        printf("%.6g", v);
    else
        fputs("null", stdout);
}

/* A version_regression's findings, as JSON members after the others. */
static void json_regression(const struct store_regression *g)
{
    fputs(",\"baseline\":", stdout);
    cli_json_str(stdout, g->baseline);
    printf(",\"busy_before\":%" PRIu64 ",\"busy_after\":%" PRIu64 ",\"cpu_before\":",
           g->busy_before, g->busy_after);
    json_double(g->cpu_before);
    fputs(",\"cpu_after\":", stdout);
    json_double(g->cpu_after);
    fputs(",\"functions\":[", stdout);
    for (size_t i = 0; i < g->nfns; i++) {
        const struct store_regression_fn *f = &g->fns[i];
        fputs(i ? ",{\"name\":" : "{\"name\":", stdout);
        cli_json_str(stdout, f->name);
        fputs(",\"file\":", stdout);
        cli_json_str(stdout, f->file);
        printf(",\"before\":%" PRIu64 ",\"after\":%" PRIu64 ",\"share_before\":", f->before,
               f->after);
        json_double(f->share_before);
        fputs(",\"share_after\":", stdout);
        json_double(f->share_after);
        printf(",\"z\":%.6g,\"p_adj\":", f->z);
        json_double(f->p_adj);
        putchar('}');
    }
    putchar(']');
}

static int list_on_anomaly(const struct store_anomaly *a, void *arg)
{
    struct anomalies_ctx *l = arg;
    char start[40], end[40];
    cli_format_time(a->start_ns, start, sizeof(start));
    cli_format_time(a->end_ns, end, sizeof(end));
    int open = (a->flags & STORE_ANOMALY_OPEN) != 0;
    /* NULL: no limit (latency, or recorded before the store kept it) */
    const char *from = store_limit_source_name(a->limit_source);
    if (l->json) {
        printf("{\"id\":%" PRIu64 ",\"kind\":\"%s\",\"worker\":", a->id,
               store_anomaly_name(a->kind));
        cli_json_str(stdout, a->worker);
        fputs(",\"version\":", stdout);
        cli_json_str(stdout, a->version);
        fputs(",\"thread\":", stdout);
        cli_json_str(stdout, a->thread ? a->thread : "main");
        printf(",\"isolate\":%" PRIu32 ",\"time\":\"%s\",\"end\":\"%s\",\"open\":%s"
               ",\"value\":%" PRIu64 ",\"threshold\":%" PRIu64 ",\"unit\":\"%s\"",
               a->isolate, start, end, open ? "true" : "false", a->value, a->threshold,
               anomaly_unit(a->kind));
        if (a->kind == STORE_ANOMALY_VERSION_REGRESSION)
            printf(",\"cleared\":%s", a->flags & STORE_ANOMALY_CLEARED ? "true" : "false");
        if (a->regression != NULL)
            json_regression(a->regression);
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
        else if (a->regression != NULL) /* against what, and what grew most */
            snprintf(limit, sizeof(limit), "vs %.12s%s%.40s%s", a->regression->baseline,
                     a->regression->nfns ? ": " : "",
                     a->regression->nfns ? a->regression->fns[0].name : "",
                     a->flags & STORE_ANOMALY_CLEARED ? " (cleared)" : "");
        printf(" %-28s %zu\n", limit, a->nwindows);
    }
    l->count++;
    return 0;
}

int cli_cmd_anomalies(int argc, char **argv)
{
    struct cli c = {0};
    int rc = cli_parse_args(&c, argc, argv, ARG_JSON | ARG_KIND);
    if (rc)
        return rc;
    struct store *s;
    if ((rc = cli_open_store(&c, &s)) != 0)
        return rc;
    struct anomalies_ctx l = {.s = s, .json = c.json};
    rc = cli_g_anomalies(s, &c.af, list_on_anomaly, &l);
    store_close(s);
    if (rc != 0)
        return cli_store_fail("reading anomalies", rc);
    if (l.count == 0) {
        fprintf(stderr, "isoprof: no anomaly matched\n");
        return EXIT_NOMATCH;
    }
    return 0;
}

/* --id or --anomaly ID (--type T) into c->f.id: one window. Returns an
 * exit code. */

/* --- store --- */

int cli_cmd_store(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "stat") != 0 && strcmp(argv[1], "check") != 0))
        return cli_die("usage: isoprof store stat|check --store DIR");
    int check = strcmp(argv[1], "check") == 0;
    struct cli c = {0};
    int rc = cli_parse_args(&c, argc - 1, argv + 1, 0);
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
    if ((rc = cli_open_store(&c, &s)) != 0)
        return rc;
    struct store_stat st;
    rc = cli_g_stat(s, &st);
    store_close(s);
    if (rc != 0)
        return cli_store_fail("store stat", rc);
    char oldest[40] = "-", newest[40] = "-";
    if (st.windows) {
        cli_format_time(st.oldest_ns, oldest, sizeof(oldest));
        cli_format_time(st.newest_ns, newest, sizeof(newest));
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
    printf("aggregates      %" PRIu64 " versions (%" PRIu64 " bytes, in stored bytes)\n", st.aggs,
           st.agg_bytes);
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
        cli_format_age(st.outbox_oldest_ns, age, sizeof(age));
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

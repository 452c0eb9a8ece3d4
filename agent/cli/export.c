/*
 * export.c - the store commands that load and merge windows: export (pprof,
 * folded, cpuprofile, a snapshot's raw JSON), top and flamegraph.
 */
#include "cli_internal.h"

#include "flamegraph.h"
#include "guard.h"
#include "pprof.h"
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

static int resolve_one(struct cli *c, struct store *s)
{
    if (c->id && c->anomaly_id)
        return cli_die("--id and --anomaly exclude each other");
    if (c->id && store_id_parse(s, c->id, &c->f.id) != 0)
        return cli_die("--id: '%s' is not a window id of this store", c->id);
    if (c->anomaly_id)
        return cli_resolve_anomaly(c, s);
    return 0;
}

/* The windows f matches into *k (the caller frees it with collect_free),
 * of one type. what names the set in messages ("" or " the base set").
 * Returns an exit code. */
static int collect_windows(struct store *s, const struct store_filter *f, const char *what,
                           struct collect_ctx *k)
{
    int rc = cli_g_windows(s, f, collect_on_window, k);
    if (rc < 0)
        return cli_store_fail("reading windows", rc);
    if (k->n == 0) {
        fprintf(stderr, "isoprof: no window matched%s\n", what);
        return EXIT_NOMATCH;
    }
    if (k->mixed)
        return cli_die("windows of several types matched%s; add --type T (" CLI_TYPES_OR ")", what);
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
    if ((rc = cli_open_store(c, s)) != 0)
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
    return cli_die(
        "%s reads profiles, and a snapshot window is a raw heap snapshot: write it to a "
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
        return cli_die("out of memory");
    int exit_code = 0, rc;
    size_t loaded = 0;
    for (size_t i = 0; i < k->n; i++) {
        void *data;
        size_t len;
        rc = cli_g_load(s, k->ids[i], &data, &len);
        if (rc == ISOPROF_ENOTFOUND)
            continue; /* evicted since we listed it */
        if (rc != 0) {
            char what[64];
            snprintf(what, sizeof(what), "loading window %" PRIu64, k->ids[i]);
            exit_code = cli_store_fail(what, rc);
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

FILE *cli_open_out(const struct cli *c, int refuse_tty, const char *what)
{
    if (c->out == NULL) {
        if (refuse_tty && isatty(STDOUT_FILENO)) {
            cli_die("not writing %s to a terminal; use -o FILE or a redirection", what);
            return NULL;
        }
        return stdout;
    }
    FILE *f = fopen(c->out, "wb");
    if (f == NULL)
        cli_die("%s: %s", c->out, strerror(errno));
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

int cli_close_out(const struct cli *c, FILE *f, int rc, const char *why)
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
        return cli_die("writing %s: %s", c->out ? c->out : "stdout", strerror(err ? err : EIO));
    return cli_die("%s", why ? why : isoprof_strerror(rc));
}

/* Adds the windows of k to set of t (read one at a time). Returns an exit
 * code; *added counts the windows that were still there. */
static int tree_add_windows(struct store *s, const struct collect_ctx *k, int set,
                            struct pprof_tree *t, size_t *added)
{
    for (size_t i = 0; i < k->n; i++) {
        void *data;
        size_t len;
        int rc = cli_g_load(s, k->ids[i], &data, &len);
        if (rc == ISOPROF_ENOTFOUND)
            continue; /* evicted since we listed it */
        if (rc != 0) {
            char what[64];
            snprintf(what, sizeof(what), "loading window %" PRIu64, k->ids[i]);
            return cli_store_fail(what, rc);
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
        rc = cli_die("reading the merged profile: %s", why ? why : isoprof_strerror(rc));
        isoprof_free(why);
        pprof_tree_free(&t);
        return rc;
    }
    int cpuprofile = strcmp(c->format, "cpuprofile") == 0;
    const char *msg = NULL;
    FILE *f;
    if (cpuprofile && strcmp(t.unit, "nanoseconds") != 0) {
        pprof_tree_free(&t);
        return cli_die("--format cpuprofile: a .cpuprofile holds CPU windows only");
    }
    if ((f = cli_open_out(c, 0, NULL)) == NULL) {
        pprof_tree_free(&t);
        return EXIT_USAGE;
    }
    rc = cpuprofile ? fg_write_cpuprofile(f, &t, &msg) : fg_write_folded(f, &t, &msg);
    pprof_tree_free(&t);
    return cli_close_out(c, f, rc, msg);
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
        return cli_die("--format %s: a snapshot window is exported as it was taken, V8 heap "
                       "snapshot JSON (--format raw); its profile is the retained window "
                       "(--type retained)",
                       c->format);
    if (k->n > 1)
        return cli_die("%zu snapshot windows matched: a heap snapshot is exported alone, never "
                       "merged; pick one with --id (see 'isoprof windows --type snapshot')",
                       k->n);
    char id[STORE_ID_LEN + 1];
    store_id_format(s, k->ids[0], id);
    FILE *f = cli_open_out(c, 1, "a heap snapshot");
    if (f == NULL)
        return EXIT_USAGE;
    struct snapshot_out o = {.f = f};
    errno = 0;
    int rc = cli_g_blob_read(s, k->ids[0], snapshot_on_piece, &o);
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
        return cli_die("writing %s: %s", c->out ? c->out : "stdout", strerror(o.err));
    char what[64];
    snprintf(what, sizeof(what), "reading snapshot window %s", id);
    return cli_store_fail(what, rc);
}

int cli_cmd_export(int argc, char **argv)
{
    struct cli c = {0};
    int rc =
        cli_parse_args(&c, argc, argv, ARG_ID | ARG_OUT | ARG_ANOMALY_ID | ARG_FORMAT | ARG_PID);
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
        rc = cli_die("--format raw is the format of snapshot windows; a %s window exports as "
                     "pprof, folded or cpuprofile",
                     cli_type_name(k.type));
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
        return cli_die("compressing: %s", isoprof_strerror(rc));
    FILE *f = stdout;
    if (c.out && (f = fopen(c.out, "wb")) == NULL) {
        pprof_buf_free(&gz);
        return cli_die("%s: %s", c.out, strerror(errno));
    }
    if (c.out)
        cli_guard_out_opened();
    size_t w = fwrite(gz.data, 1, gz.len, f);
    int bad = w != gz.len || fflush(f) != 0;
    if (c.out && fclose(f) != 0)
        bad = 1;
    pprof_buf_free(&gz);
    if (bad)
        return cli_die("writing %s: %s", c.out ? c.out : "stdout", strerror(errno));
    return 0;
}

int cli_cmd_top(int argc, char **argv)
{
    struct cli c = {.top_n = 20};
    int rc = cli_parse_args(&c, argc, argv, ARG_ID | ARG_N | ARG_PID);
    if (rc)
        return rc;
    struct store *s;
    struct collect_ctx k = {0};
    if ((rc = cli_open_store(&c, &s)) != 0)
        return rc;
    /* A version of a worker and nothing else: its aggregate (every window
     * folded into it, evicted ones too), when the store has one; else its
     * windows. */
    if (c.f.worker && c.f.version && !c.f.thread && !c.f.pid && !c.f.type && !c.f.since_ns &&
        !c.f.until_ns && !c.id && (rc = cli_top_aggregate(&c, s)) != EXIT_NOMATCH) {
        store_close(s);
        return rc;
    }
    if ((rc = resolve_one(&c, s)) != 0 || (rc = collect_windows(s, &c.f, "", &k)) != 0) {
        store_close(s);
        collect_free(&k);
        return rc;
    }
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
        return cli_die("reading profile: %s", isoprof_strerror(rc));
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
    snprintf(p[n++].value, sizeof(p->value), "%s", cli_type_name(k->type));
    p[n].key = "from";
    cli_format_time(k->start_ns, p[n++].value, sizeof(p->value));
    p[n].key = "to";
    cli_format_time(k->end_ns, p[n++].value, sizeof(p->value));
    p[n].key = "windows";
    snprintf(p[n++].value, sizeof(p->value), "%zu", windows);
    p[n].key = "samples";
    snprintf(p[n++].value, sizeof(p->value), "%" PRIu64, k->samples);
    return n;
}

int cli_cmd_flamegraph(int argc, char **argv)
{
    struct cli c = {.fold = FG_FOLD_DEFAULT};
    int rc =
        cli_parse_args(&c, argc, argv, ARG_ID | ARG_OUT | ARG_ANOMALY_ID | ARG_FLAME | ARG_PID);
    if (rc)
        return rc;
    if (c.diff && (c.id || c.anomaly_id))
        return cli_die("--id and --anomaly pick one window; a diff compares two sets of FILTERS");
    struct store *s;
    if ((rc = cli_open_store(&c, &s)) != 0)
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
    FILE *f = cli_open_out(&c, 1, "an HTML page");
    if (f == NULL) {
        rc = EXIT_USAGE;
        goto out;
    }
    const char *why = NULL;
    rc = cli_close_out(&c, f, fg_write_html(f, &t, &info, &why), why);
out:
    store_close(s);
    collect_free(&k[0]);
    collect_free(&k[1]);
    pprof_tree_free(&t);
    return rc;
}

/*
 * fuzz_store_query - the read calls the CLI and the uploader make, run in
 * process on a real store whose records the input damages.
 *
 * Once, a small store is built with the library (CPU and heap windows of
 * two workers and three threads, window labels, enough windows for a
 * compression dictionary, an anomaly with pinned windows, queued, uploaded
 * and rejected windows, a heap snapshot in chunks, two per-version
 * aggregates and a version_regression with its findings) and opened
 * read-only.
 * Then every key and value of its databases is located in data.mdb. Each
 * input is a list of edits (5 bytes each: which record, where in it, a
 * byte to xor) applied to those bytes through a writable mapping of the
 * same file, which the store's read-only map sees at once; the read call
 * the input's first byte picks runs (store_windows with each access path
 * and filter, alone or followed by store_load and store_blob_read of what
 * it lists; store_anomalies likewise; store_outbox_peek, store_stat,
 * store_aggs with store_agg_get of each, store_check); the edits are
 * undone.
 *
 * What is damaged, and what is not. Records, keys and index entries are
 * arbitrary bytes here: headers, label lengths, zstd frames, dictionaries,
 * anomaly records and their findings, aggregates, pin lists, outbox and
 * rejected entries, meta counters, by_time and ids entries that name
 * nothing or the wrong window, keys out of order. LMDB's own page structure (page headers, node sizes and
 * offsets, branch pages, the main database's records of the named ones)
 * is not touched: LMDB trusts it and follows it with unchecked pointers,
 * so no code around LMDB can make its cursor walks safe on a damaged page
 * in process. That is what the CLI's guard is for (agent/cli/guard.h: the
 * store work runs in a child whose fault is reported as damage) and what
 * tests/integration/cli-damage.test.js exercises, with bits flipped in
 * page headers and files cut short.
 *
 * Every call must return 0, a callback's value, ISOPROF_ECORRUPT,
 * ISOPROF_ENOTFOUND or (store_load of a snapshot) -EMEDIUMTYPE (and on an
 * input that changes no byte, 0: no damage seen where there is none, which
 * the id-by-id anomaly query once did with a key it had copied), never read
 * out of bounds (ASan), never loop (libFuzzer's -timeout), and hand out
 * windows whose strings are as store.h promises.
 */
#include "store_internal.h"

#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SEC 1000000000ull
#define T0 (1700000000ull * SEC)
#define EDITS_MAX 64
#define REGIONS_MAX 4096

/* A key or value of the store: where its bytes are in data.mdb. */
struct region {
    size_t off, len;
};

static struct store *st;
static uint8_t *file;   /* writable shared mapping of data.mdb */
static size_t file_len;
static struct region regions[REGIONS_MAX];
static size_t nregions;
static volatile uint8_t sink; /* bytes read so that ASan sees the reads */

static void die(const char *what, int rc)
{
    fprintf(stderr, "fuzz_store_query: %s: %s\n", what, isoprof_strerror(rc));
    abort();
}

/* A pprof-like payload: a few hundred bytes that compress, different per i. */
static void payload(uint8_t *buf, size_t len, unsigned i)
{
    for (size_t k = 0; k < len; k++)
        buf[k] = (uint8_t)("function main app.js handler node:internal "[(k + i) % 42] ^ (k / 97));
}

static void build(const char *dir)
{
    struct store_options o = {.max_size = 64u << 20, .outbox = 1};
    struct store *s;
    char *why = NULL;
    int rc = store_open(dir, &o, &s, &why);
    if (rc != 0)
        die(why ? why : "store_open", rc);
    static const char *threads[] = {"main", "worker-1", "pool"};
    struct store_label labels[2] = {{"region", "eu-west-1"}, {"tier", "gold"}};
    struct store_anomaly a = {.kind = STORE_ANOMALY_MEMORY_NEAR_LIMIT,
                              .worker = "api",
                              .version = "v2",
                              .isolate = 1,
                              .start_ns = T0 + 5 * SEC,
                              .end_ns = T0 + 9 * SEC,
                              .value = 90u << 20,
                              .threshold = 80u << 20,
                              .limit = 88u << 20,
                              .limit_source = STORE_LIMIT_FLAG,
                              .flags = STORE_ANOMALY_OPEN};
    if ((rc = store_anomaly_put(s, &a, 0)) != 0)
        die("store_anomaly_put", rc);
    uint64_t ids[24];
    for (unsigned i = 0; i < 24; i++) {
        uint8_t buf[600];
        payload(buf, sizeof(buf), i);
        struct store_record r = {
            .w = {.worker = i % 3 ? "api" : "jobs",
                  .version = i % 2 ? "v2" : "v1",
                  .runtime = "node",
                  .thread = threads[i % 3],
                  .pid = 100 + i % 4,
                  .container = i % 4 ? "c0ffee" : "",
                  .labels = i % 2 ? labels : NULL,
                  .nlabels = i % 2 ? 2 : 0,
                  .isolate = i % 2,
                  .type = i % 5 == 4 ? STORE_TYPE_HEAP : STORE_TYPE_CPU,
                  .start_ns = T0 + i * SEC,
                  .end_ns = T0 + i * SEC + SEC / 2,
                  .samples = 10 + i,
                  .interval = SEC / 1000,
                  .frames_mapped = i,
                  .frames_unmapped = 1},
            .pprof = buf,
            .len = sizeof(buf),
            .pin = i % 6 == 1 ? a.id : 0};
        if ((rc = store_put(s, &r, 1, NULL)) != 0)
            die("store_put", rc);
        ids[i] = r.w.id;
    }
    if ((rc = store_outbox_ack(s, ids, 6)) != 0 ||
        (rc = store_outbox_reject(s, ids + 6, 3, 413, "too large")) != 0)
        die("outbox", rc);
    struct store_window w = {.worker = "api", .version = "v2", .runtime = "node",
                             .thread = "main", .isolate = 1, .type = STORE_TYPE_SNAPSHOT,
                             .start_ns = T0 + 30 * SEC, .end_ns = T0 + 30 * SEC};
    struct store_blob *b;
    if ((rc = store_blob_begin(s, &w, &b)) != 0)
        die("store_blob_begin", rc);
    for (unsigned i = 0; i < 8 && rc == 0; i++) {
        char piece[512];
        int n = snprintf(piece, sizeof(piece), "{\"snapshot\":{\"node_count\":%u},\"nodes\":[", i);
        memset(piece + n, '1' + (int)(i % 9), sizeof(piece) - (size_t)n);
        rc = store_blob_write(b, piece, sizeof(piece));
    }
    uint64_t sid;
    if (rc != 0 || (rc = store_blob_commit(b, T0 + 31 * SEC, a.id, 4, &sid, NULL)) != 0)
        die("snapshot", rc);
    /* Two per-version aggregates and a version_regression with findings,
     * pinning the CPU windows of api v2 after the fact. */
    for (unsigned i = 0; i < 2; i++) {
        uint8_t buf[900];
        payload(buf, sizeof(buf), 40 + i);
        struct store_agg ag = {.worker = "api",
                               .version = i ? "v2" : "v1",
                               .first_ns = T0 + i * SEC,
                               .last_ns = T0 + 20 * SEC,
                               .windows = 12,
                               .samples = 4000,
                               .busy = 3000};
        if ((rc = store_agg_put(s, &ag, buf, sizeof(buf), 8, NULL, NULL)) != 0)
            die("store_agg_put", rc);
    }
    static const struct store_regression_fn fns[2] = {{.name = "walkNested",
                                                       .file = "/app/x.js",
                                                       .after = 900,
                                                       .share_after = 0.3,
                                                       .z = 30,
                                                       .p_adj = 1e-100},
                                                      {.name = "replacer",
                                                       .file = "/app/x.js",
                                                       .before = 700,
                                                       .after = 1600,
                                                       .share_before = 0.23,
                                                       .share_after = 0.53,
                                                       .z = 25,
                                                       .p_adj = 1e-80}};
    struct store_regression g = {.baseline = "v1",
                                 .busy_before = 3000,
                                 .busy_after = 3000,
                                 .cpu_before = 0.5,
                                 .cpu_after = -1,
                                 .fns = fns,
                                 .nfns = 2};
    struct store_anomaly ra = {.kind = STORE_ANOMALY_VERSION_REGRESSION,
                               .worker = "api",
                               .version = "v2",
                               .start_ns = T0 + 21 * SEC,
                               .end_ns = T0 + 21 * SEC,
                               .value = 300000,
                               .threshold = 20000,
                               .regression = &g};
    if ((rc = store_anomaly_put(s, &ra, 0)) != 0 ||
        (rc = store_anomaly_pin_windows(s, ra.id, "api", "v2", STORE_TYPE_CPU, 0, 0, 4, NULL)) != 0)
        die("version_regression", rc);
    store_close(s);
}

/* Where each key and value of the named databases lies in data.mdb. */
static void locate(struct store *s)
{
    /* LMDB's map, as store_open found it (before this file mapped the
     * same file a second time). */
    const uint8_t *lo = s->map_lo, *hi = s->map_hi;
    if (lo == NULL || (size_t)(hi - lo) < file_len)
        die("locate the map", -ENOENT);
    hi = lo + file_len;
    MDB_dbi dbs[] = {s->windows, s->by_time, s->ids, s->meta, s->anomalies, s->anomaly_ids,
                     s->pins, s->outbox, s->rejected, s->dicts, s->dict_by_series, s->blobs,
                     s->aggs};
    MDB_txn *txn;
    if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0)
        die("txn", -EIO);
    for (size_t i = 0; i < sizeof(dbs) / sizeof(dbs[0]); i++) {
        MDB_cursor *c;
        MDB_val k, v;
        if (mdb_cursor_open(txn, dbs[i], &c) != 0)
            die("cursor", -EIO);
        for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
            const MDB_val *kv[2] = {&k, &v};
            for (int j = 0; j < 2 && nregions < REGIONS_MAX; j++) {
                const uint8_t *p = kv[j]->mv_data;
                if (kv[j]->mv_size == 0 || p < lo || p + kv[j]->mv_size > hi)
                    continue;
                regions[nregions++] = (struct region){(size_t)(p - lo), kv[j]->mv_size};
            }
        }
        mdb_cursor_close(c);
    }
    mdb_txn_abort(txn);
    if (nregions == 0)
        die("no records located", -ENOENT);
}

static void setup(void)
{
    char dir[] = "/tmp/fuzz-store-query-XXXXXX";
    if (mkdtemp(dir) == NULL)
        die("mkdtemp", -errno);
    build(dir);
    /* The store first: it finds its map by the file's inode, which must
     * be mapped once when it looks. */
    struct store_options o = {.readonly = 1};
    char *why = NULL;
    int rc = store_open(dir, &o, &st, &why);
    if (rc != 0)
        die(why ? why : "store_open", rc);
    char path[sizeof(dir) + 16];
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0)
        die("open data.mdb", -errno);
    file_len = (size_t)sb.st_size;
    file = mmap(NULL, file_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (file == MAP_FAILED)
        die("mmap", -errno);
    locate(st);
    /* Both maps and LMDB's descriptors keep the files; the names go, so
     * that nothing is left behind however the process ends. */
    char lock[sizeof(dir) + 16];
    snprintf(lock, sizeof(lock), "%s/lock.mdb", dir);
    unlink(path);
    unlink(lock);
    rmdir(dir);
}

/* Whether this run damaged the store: a healthy one answers every call. */
static int damaged;

/* A code a read call may return on a damaged store; on the healthy one,
 * success (a check that sees damage where there is none is a bug too). */
static void expect_code(int rc)
{
    if (rc != 0 && (!damaged || (rc != ISOPROF_ECORRUPT && rc != ISOPROF_ENOTFOUND)))
        die("unexpected result", rc);
}

static void str_ok(const char *s, size_t max)
{
    if (s == NULL || strnlen(s, max + 1) > max)
        __builtin_trap();
}

struct seen {
    uint64_t ids[64];
    size_t n;
};

static int on_window(const struct store_window *w, void *arg)
{
    struct seen *l = arg;
    str_ok(w->worker, STORE_WORKER_MAX);
    str_ok(w->version, STORE_VERSION_MAX);
    str_ok(w->runtime, STORE_RUNTIME_MAX);
    str_ok(w->thread, STORE_THREAD_MAX);
    str_ok(w->container, STORE_CONTAINER_MAX);
    if (w->thread[0] == '\0' || w->type < STORE_TYPE_CPU || w->type > STORE_TYPE_MAX ||
        w->nlabels > STORE_WINDOW_LABELS_MAX || w->id == 0)
        __builtin_trap();
    for (size_t i = 0; i < w->nlabels; i++) {
        str_ok(w->labels[i].name, STORE_WINDOW_LABELS_BYTES);
        str_ok(w->labels[i].value, STORE_WINDOW_LABELS_BYTES);
    }
    if (w->upload == STORE_UPLOAD_REJECTED)
        str_ok(w->reject_reason, STORE_REJECT_REASON_MAX);
    if (l->n < sizeof(l->ids) / sizeof(l->ids[0]))
        l->ids[l->n++] = w->id;
    return 0;
}

static int on_outbox(const struct store_window *w, uint64_t queued_ns, void *arg)
{
    (void)queued_ns;
    return on_window(w, arg);
}

static int on_anomaly(const struct store_anomaly *a, void *arg)
{
    struct seen *l = arg;
    str_ok(a->worker, STORE_WORKER_MAX);
    str_ok(a->version, STORE_VERSION_MAX);
    str_ok(a->thread, STORE_THREAD_MAX);
    if (a->nwindows > STORE_ANOMALY_WINDOWS_MAX || a->limit_source > STORE_LIMIT_SOURCE_MAX)
        __builtin_trap();
    for (size_t i = 0; i < a->nwindows && l->n < sizeof(l->ids) / sizeof(l->ids[0]); i++)
        l->ids[l->n++] = a->windows[i];
    const struct store_regression *g = a->regression;
    if (g != NULL) {
        if (a->kind != STORE_ANOMALY_VERSION_REGRESSION || g->nfns > STORE_REGRESSION_FNS_MAX)
            __builtin_trap();
        str_ok(g->baseline, STORE_VERSION_MAX);
        for (size_t i = 0; i < g->nfns; i++) {
            str_ok(g->fns[i].name, STORE_REGRESSION_NAME_MAX);
            str_ok(g->fns[i].file, STORE_REGRESSION_NAME_MAX);
        }
    }
    return 0;
}

static int on_agg(const struct store_agg *a, void *arg)
{
    (void)arg;
    str_ok(a->worker, STORE_WORKER_MAX);
    str_ok(a->version, STORE_VERSION_MAX);
    if (a->busy > a->samples || a->last_ns < a->first_ns || a->raw_size > STORE_AGG_RAW_MAX)
        __builtin_trap();
    void *out = NULL;
    size_t len = 0;
    int rc = store_agg_get(st, a->worker, a->version, NULL, &out, &len);
    if (rc == 0 && (out == NULL || len != a->raw_size))
        __builtin_trap();
    isoprof_free(out);
    expect_code(rc);
    return 0;
}

static int on_piece(void *arg, const void *p, size_t len)
{
    uint64_t *bytes = arg;
    if (len > 0)
        *bytes += ((const uint8_t *)p)[len - 1] + len;
    return 0;
}

/* Loads two of the windows l lists (pick chooses them): each load inflates
 * a frame, the bulk of a run's time. */
static void load_some(const struct seen *l, unsigned pick)
{
    for (size_t k = 0; k < 2 && l->n > 0; k++) {
        size_t i = k == 0 ? pick % l->n : l->n - 1;
        void *out = NULL;
        size_t len = 0;
        int rc = store_load(st, l->ids[i], &out, &len);
        if (rc == -EMEDIUMTYPE) {
            uint64_t bytes = 0;
            rc = store_blob_read(st, l->ids[i], on_piece, &bytes);
        } else if (rc == 0) {
            if (len == 0 || out == NULL)
                __builtin_trap(); /* a record holds at least one byte of pprof */
            sink ^= ((const uint8_t *)out)[len - 1];
            isoprof_free(out);
        }
        expect_code(rc);
    }
}

static const struct store_filter filters[] = {
    {0},
    {.worker = "api"},
    {.worker = "api", .version = "v2"},
    {.worker = "api", .version = "v1", .since_ns = T0 + 4 * SEC, .until_ns = T0 + 15 * SEC},
    {.worker = "jobs", .since_ns = T0 + 3 * SEC, .until_ns = T0 + 12 * SEC},
    {.since_ns = T0 + 6 * SEC, .until_ns = T0 + 20 * SEC, .type = STORE_TYPE_CPU},
    {.thread = "pool", .pid = 101},
    {.pinned = STORE_PINNED_ANY},
    {.id = 7},
    {.id = 25},
};
static const struct store_anomaly_filter afilters[] = {{0},
                                                       {.kind = STORE_ANOMALY_MEMORY_NEAR_LIMIT},
                                                       {.id = 1},
                                                       {.worker = "api", .thread = "main"},
                                                       {.kind = STORE_ANOMALY_VERSION_REGRESSION}};
#define NFILTERS (sizeof(filters) / sizeof(filters[0]))
#define NAFILTERS (sizeof(afilters) / sizeof(afilters[0]))
/* The queries an input picks from: each listing, each anomaly query, the
 * outbox, the stats, the aggregates (each one inflated). One a run keeps
 * the runs fast. A run in 8 also loads what its query listed (an inflate
 * costs more than a listing), and one in 256 runs the whole check (which
 * inflates every window) instead. */
#define NQUERIES (NFILTERS + NAFILTERS + 3)

static void query(unsigned selector, unsigned pick)
{
    struct seen l = {.n = 0};
    unsigned which = selector % NQUERIES;
    int load = selector % 8 == 7;
    if (selector == 255)
        which = NQUERIES; /* the check */
    if (which < NFILTERS) {
        expect_code(store_windows(st, &filters[which], on_window, &l));
        if (load)
            load_some(&l, pick);
        return;
    }
    which -= NFILTERS;
    if (which < NAFILTERS) {
        expect_code(store_anomalies(st, &afilters[which], on_anomaly, &l));
        if (load)
            load_some(&l, pick);
        return;
    }
    which -= NAFILTERS;
    if (which == 0) {
        expect_code(store_outbox_peek(st, 64, on_outbox, &l));
    } else if (which == 1) {
        struct store_stat ss;
        expect_code(store_stat(st, &ss));
    } else if (which == 2) {
        expect_code(store_aggs(st, pick % 2 ? "api" : NULL, on_agg, NULL));
    } else {
        char *why = NULL;
        int rc = store_check(st, &why);
        isoprof_free(why);
        expect_code(rc);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (st == NULL)
        setup();
    if (size < 2)
        return 0;
    unsigned selector = data[0], pick = data[1];
    data += 2;
    size -= 2;
    size_t n = size / 5 < EDITS_MAX ? size / 5 : EDITS_MAX;
    size_t at[EDITS_MAX];
    uint8_t was[EDITS_MAX];
    damaged = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *e = data + 5 * i;
        const struct region *r = &regions[((size_t)e[0] << 8 | e[1]) % nregions];
        at[i] = r->off + (((size_t)e[2] << 8 | e[3]) % r->len);
        was[i] = file[at[i]];
        file[at[i]] ^= e[4];
        damaged |= e[4] != 0;
    }
    query(selector, pick);
    /* Undone in reverse, so that two edits of one byte restore it. */
    for (size_t i = n; i-- > 0;)
        file[at[i]] = was[i];
    return 0;
}

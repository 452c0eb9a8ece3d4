/*
 * bench_store - throughput and latency of the LMDB store.
 *
 *   bench_store [N] [DIR]
 *   bench_store --corpus STORE [--windows N] [--dir DIR] [--batches 1,16,64]
 *               [--fill-batch 64] [--queries 200] [--budget-mib 4096] [--json]
 *
 * Fills a store with N windows (default 100000) inserted in time order the
 * way the daemon writes them (batched store_put, one write transaction and
 * one sync per batch), then measures inserts at each of --batches on top
 * of the full store (new windows, later in time) and times queries from
 * one thread:
 *   - one worker, 7 days (key-prefix range seek, all versions)
 *   - one worker and version, 7 days
 *   - all workers, 1 hour (time index)
 *   - anomalies of one kind over 7 days, of one worker, and one by id
 *   - windows pinned by anomalies: one worker over 7 days, all workers
 *     over 7 days
 *   - store_load of one window (inflate)
 *
 * With --corpus the payloads are the real windows of STORE (a store
 * isoprofd filled from real workloads; see storage.js): 50 workers, each
 * mapped to one corpus workload, 2 isolates each, 3 versions each rolled
 * out over 30 days, a heap window for every 6 windows of an isolate (the
 * CPU schedule's 60 s against the heap's 5 min), and about one anomaly per
 * 500 windows, recorded with store_anomaly_put before the window taken for
 * it, which is flagged and pinned to it (as the daemon does). Without
 * --corpus the payloads are synthetic pprof-like bytes of about 16 KiB
 * (20 workers, 2 versions) and there are no anomalies: the figures of
 * earlier versions of this benchmark.
 *
 * Also reports bytes per window: the zstd frame, the record (header +
 * frame), stored_size (record + keys: the budget counter) and the LMDB
 * pages of all DBs (leaf, branch and overflow pages, counted after the
 * run), against the same pprof gzip'd at zlib level 6. Frames are what
 * the store wrote, so windows compressed with their (worker, version)
 * dictionary count as such; the dictionaries themselves are reported
 * apart, spread over the windows stored at the end (dict_mean).
 *
 * Nothing is asserted about time; the exit status is non-zero only if a
 * store call fails. DIR (default: a fresh directory under $TMPDIR, removed
 * at exit) must not hold a store.
 */
#include "store_corpus.h"

#include "base.h"
#include "store.h"

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEC 1000000000ull
#define DAY (86400ull * SEC)
#define SPAN_DAYS 30
#define ISOLATES 2
#define VERSIONS 3
#define HEAP_EVERY 6
#define ANOMALY_EVERY 500
#define SYN_PAYLOADS 64
#define SYN_LEN 16384
#define MAX_BATCH 4096
#define RECORD_HEADER 88u

static char tmp_root[512];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void cleanup(void)
{
    if (tmp_root[0])
        nftw(tmp_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* Bytes that look like a pprof to a compressor: a string table of function
 * and file names, then samples of small varints. */
static void make_payload(uint8_t *b, size_t len)
{
    static const char *parts[] = {"handle", "Request", "render",         "json",
                                  "parse",  "Buffer",  "node:internal/", "src/",
                                  ".js",    "async ",  "Promise",        "run"};
    size_t o = 0;
    while (o < len / 3) {
        const char *p = parts[rnd() % ISOPROF_ARRAY_SIZE(parts)];
        size_t n = strlen(p);
        if (o + n + 2 > len)
            break;
        b[o++] = 0x32;
        b[o++] = (uint8_t)n;
        memcpy(b + o, p, n);
        o += n;
    }
    while (o + 6 <= len) {
        uint64_t r = rnd();
        b[o++] = 0x12;
        b[o++] = 4;
        b[o++] = (uint8_t)(1 + (r & 0xff) % (1 + (r >> 8 & 0x3f)));
        b[o++] = (uint8_t)(1 + (r >> 16 & 0x7f) % 24);
        b[o++] = 0x18;
        b[o++] = (r >> 24 & 7) ? 1 : (uint8_t)(r >> 32);
    }
    while (o < len)
        b[o++] = 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* --- the simulated fleet ------------------------------------------------ */

struct fleet {
    const struct corpus *c;
    unsigned workers, versions;
    int anomalies; /* record anomalies and pin the windows taken for them */
    char (*wname)[32];
    /* Per corpus workload: its windows of each type (indexes into c->w). */
    size_t **by_type[3];
    size_t *nby_type[3];
    uint64_t t0, step, span;
    uint64_t next_i; /* the next window to make */
    uint64_t gz_total, raw_total;
    uint64_t anomalies_made;
};

static const char *version_of(const struct fleet *f, unsigned w, uint64_t start_ns, char buf[16])
{
    /* Each worker rolls out a new version every span / versions, its own
     * deploy day shifted by the worker index. */
    uint64_t per = f->span / f->versions;
    uint64_t shift = (uint64_t)(w % 5) * DAY;
    uint64_t at = start_ns - f->t0 + shift;
    unsigned v = per ? (unsigned)(at / per) : 0;
    if (v >= f->versions)
        v = f->versions - 1;
    snprintf(buf, 16, "v%u", 40 + v);
    return buf;
}

static int fleet_init(struct fleet *f, const struct corpus *c, unsigned workers, uint64_t n)
{
    memset(f, 0, sizeof(*f));
    f->c = c;
    f->workers = workers;
    f->versions = VERSIONS;
    f->wname = isoprof_calloc(workers, sizeof(*f->wname));
    if (f->wname == NULL)
        return -ENOMEM;
    for (unsigned w = 0; w < workers; w++)
        snprintf(f->wname[w], sizeof(f->wname[w]), "svc-%02u", w);
    for (int t = 1; t <= 2; t++) {
        f->by_type[t] = isoprof_calloc(c->nworkers, sizeof(*f->by_type[t]));
        f->nby_type[t] = isoprof_calloc(c->nworkers, sizeof(*f->nby_type[t]));
        if (f->by_type[t] == NULL || f->nby_type[t] == NULL)
            return -ENOMEM;
        for (size_t k = 0; k < c->nworkers; k++) {
            f->by_type[t][k] = isoprof_calloc(c->n, sizeof(size_t));
            if (f->by_type[t][k] == NULL)
                return -ENOMEM;
        }
    }
    for (size_t i = 0; i < c->n; i++) {
        unsigned k = c->w[i].worker_idx, t = c->w[i].type;
        f->by_type[t][k][f->nby_type[t][k]++] = i;
    }
    f->t0 = 1764000000ull * SEC;
    f->span = SPAN_DAYS * DAY;
    uint64_t series = (uint64_t)workers * ISOLATES;
    uint64_t ticks = (n + series - 1) / series;
    f->step = ticks > 1 ? f->span / ticks : DAY;
    if (f->step < 2 * SEC)
        f->step = 2 * SEC;
    return 0;
}

static void fleet_free(struct fleet *f)
{
    for (int t = 1; t <= 2; t++) {
        for (size_t k = 0; f->by_type[t] && k < f->c->nworkers; k++)
            isoprof_free(f->by_type[t][k]);
        isoprof_free(f->by_type[t]);
        isoprof_free(f->nby_type[t]);
    }
    isoprof_free(f->wname);
}

/* Window number i of the fleet into r (strings in vbuf). */
static void fleet_window(struct fleet *f, uint64_t i, struct store_record *r, char vbuf[16])
{
    uint64_t series = (uint64_t)f->workers * ISOLATES;
    unsigned s = (unsigned)(i % series);
    uint64_t tick = i / series;
    unsigned w = s / ISOLATES;
    uint8_t type = (tick + s) % HEAP_EVERY == HEAP_EVERY - 1 ? STORE_TYPE_HEAP : STORE_TYPE_CPU;
    unsigned k = w % (unsigned)f->c->nworkers;
    if (f->nby_type[type][k] == 0) /* this workload has no window of that type */
        for (k = 0; f->nby_type[type][k] == 0; k++)
            ;
    const struct corpus_win *cw = &f->c->w[f->by_type[type][k][tick % f->nby_type[type][k]]];
    /* Spread the series over the step so that start times are distinct. */
    uint64_t start = f->t0 + tick * f->step + (uint64_t)s * (f->step / (series + 1));
    memset(r, 0, sizeof(*r));
    r->w.worker = f->wname[w];
    r->w.version = version_of(f, w, start, vbuf);
    r->w.runtime = cw->runtime[0] ? cw->runtime : "node";
    r->w.start_ns = start;
    r->w.end_ns = start + (type == STORE_TYPE_CPU ? 10 * SEC : SEC / 10);
    r->w.isolate = 1000 + s % ISOLATES;
    r->w.type = type;
    r->w.samples = cw->samples;
    r->w.interval = cw->interval;
    r->pprof = cw->pprof;
    r->len = cw->len;
    f->gz_total += cw->gzip6;
    f->raw_total += cw->len;
}

/* --- inserting -------------------------------------------------------- */

struct insert_result {
    uint64_t windows;
    size_t batch;
    double put_s; /* time inside store_put */
    uint64_t *commit_ns;
    size_t ncommits;
    uint64_t stored, klen_total, runtime_total; /* for the byte figures */
};

/* Make and store n windows in batches of `batch`; anomalies (if on) are
 * recorded before the window taken for them, which is flagged and
 * pinned. */
static int insert(struct store *s, struct fleet *f, uint64_t n, size_t batch,
                  struct insert_result *ir)
{
    struct store_record *r = isoprof_calloc(batch, sizeof(*r));
    char(*vb)[16] = isoprof_calloc(batch, sizeof(*vb));
    size_t ncap = (size_t)(n / batch + 2);
    memset(ir, 0, sizeof(*ir));
    ir->batch = batch;
    ir->commit_ns = isoprof_calloc(ncap, sizeof(*ir->commit_ns));
    if (r == NULL || vb == NULL || ir->commit_ns == NULL) {
        isoprof_free(r);
        isoprof_free(vb);
        return -ENOMEM;
    }
    uint64_t done = 0;
    int rc = 0;
    while (done < n && rc == 0) {
        size_t k = 0;
        for (; k < batch && done + k < n; k++) {
            fleet_window(f, f->next_i++, &r[k], vb[k]);
            if (f->anomalies && rnd() % ANOMALY_EVERY == 0) {
                unsigned kind = 1 + (unsigned)(f->anomalies_made % STORE_ANOMALY_MAX);
                struct store_anomaly a = {
                    .kind = (uint8_t)kind,
                    .worker = r[k].w.worker,
                    .version = r[k].w.version,
                    .isolate = kind == STORE_ANOMALY_LATENCY_P999_SPIKE ? 0 : r[k].w.isolate,
                    .start_ns = r[k].w.start_ns - SEC,
                    .end_ns = r[k].w.start_ns + 30 * SEC,
                    .value = 120u << 20,
                    .threshold = 115u << 20,
                };
                if ((rc = store_anomaly_put(s, &a, 0)) != 0)
                    break;
                f->anomalies_made++;
                r[k].w.anomaly = (uint8_t)kind;
                r[k].pin = a.id;
            }
        }
        if (rc != 0 || k == 0)
            break;
        uint64_t a = isoprof_now_mono_ns();
        rc = store_put(s, r, k, NULL);
        uint64_t el = isoprof_now_mono_ns() - a;
        ir->put_s += (double)el / 1e9;
        if (ir->ncommits < ncap)
            ir->commit_ns[ir->ncommits++] = el;
        for (size_t j = 0; rc == 0 && j < k; j++) {
            ir->stored += r[j].w.stored_size;
            ir->klen_total += strlen(r[j].w.worker) + 1 + strlen(r[j].w.version) + 1 + 13;
            ir->runtime_total += strlen(r[j].w.runtime);
        }
        done += k;
    }
    ir->windows = done;
    isoprof_free(r);
    isoprof_free(vb);
    return rc;
}

/* --- queries ---------------------------------------------------------- */

struct lat {
    const char *what;
    int goal;
    size_t runs;
    double rows_avg;
    uint64_t p50, p90, p99, max;
};

static void lat_done(struct lat *l, uint64_t *ns, size_t n, uint64_t rows)
{
    qsort(ns, n, sizeof(*ns), cmp_u64);
    l->runs = n;
    l->rows_avg = n ? (double)rows / (double)n : 0;
    l->p50 = ns[n / 2];
    l->p90 = ns[n * 9 / 10];
    l->p99 = ns[n * 99 / 100];
    l->max = ns[n - 1];
}

static int count_cb(const struct store_window *w, void *arg)
{
    (void)w;
    (*(uint64_t *)arg)++;
    return 0;
}

struct anom_ids {
    uint64_t *ids;
    size_t n, cap;
};

static int anom_count_cb(const struct store_anomaly *a, void *arg)
{
    (void)a;
    (*(uint64_t *)arg)++;
    return 0;
}

static int anom_collect_cb(const struct store_anomaly *a, void *arg)
{
    struct anom_ids *x = arg;
    if (x->n == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 1024;
        uint64_t *ni = isoprof_realloc(x->ids, cap * sizeof(*ni));
        if (ni == NULL)
            return -ENOMEM;
        x->ids = ni;
        x->cap = cap;
    }
    x->ids[x->n++] = a->id;
    return 0;
}

static uint64_t budget_bytes = 4ull << 30;

static struct store *open_at(const char *dir, const char *name, int readonly)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    struct store_options o = {.max_size = budget_bytes, .readonly = readonly};
    struct store *s = NULL;
    char *why = NULL;
    int rc = store_open(path, &o, &s, &why);
    if (rc != 0) {
        fprintf(stderr, "bench_store: %s\n", why ? why : isoprof_strerror(rc));
        isoprof_free(why);
        return NULL;
    }
    return s;
}

/* Pages of all named DBs of the environment at path (after the store is
 * closed): what the windows really cost on disk, free pages excluded. */
static uint64_t lmdb_pages(const char *path)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi main_db;
    MDB_cursor *cur;
    uint64_t pages = 0;
    if (mdb_env_create(&env) != 0)
        return 0;
    mdb_env_set_maxdbs(env, 32);
    if (mdb_env_open(env, path, MDB_RDONLY, 0) != 0 ||
        mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) != 0) {
        mdb_env_close(env);
        return 0;
    }
    MDB_stat ms = {.ms_psize = 4096};
    if (mdb_dbi_open(txn, NULL, 0, &main_db) == 0 && mdb_stat(txn, main_db, &ms) == 0)
        pages += ms.ms_branch_pages + ms.ms_leaf_pages + ms.ms_overflow_pages;
    if (mdb_cursor_open(txn, main_db, &cur) == 0) {
        MDB_val k, d;
        char name[64];
        while (mdb_cursor_get(cur, &k, &d, MDB_NEXT) == 0) {
            MDB_dbi db;
            if (k.mv_size >= sizeof(name))
                continue;
            memcpy(name, k.mv_data, k.mv_size);
            name[k.mv_size] = '\0';
            if (mdb_dbi_open(txn, name, 0, &db) == 0 && mdb_stat(txn, db, &ms) == 0)
                pages += ms.ms_branch_pages + ms.ms_leaf_pages + ms.ms_overflow_pages;
        }
        mdb_cursor_close(cur);
    }
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return pages * (uint64_t)ms.ms_psize;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_store [N] [DIR]\n"
            "       bench_store --corpus STORE [--windows N] [--dir DIR] "
            "[--batches 1,16,64] [--fill-batch 64] [--queries 200] [--budget-mib 4096] [--json]\n");
    exit(2);
}

static uint64_t num_arg(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || s == end)
        usage();
    return v;
}

int main(int argc, char **argv)
{
    uint64_t n = 100000;
    const char *dir = NULL, *corpus_dir = NULL;
    size_t batches[8] = {1, 16, 64}, nbatches = 3, fill_batch = 64;
    size_t queries = 200;
    int json = 0, pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--corpus") == 0 && i + 1 < argc) {
            corpus_dir = argv[++i];
        } else if (strcmp(a, "--windows") == 0 && i + 1 < argc) {
            n = num_arg(argv[++i]);
        } else if (strcmp(a, "--dir") == 0 && i + 1 < argc) {
            dir = argv[++i];
        } else if (strcmp(a, "--fill-batch") == 0 && i + 1 < argc) {
            fill_batch = (size_t)num_arg(argv[++i]);
        } else if (strcmp(a, "--queries") == 0 && i + 1 < argc) {
            queries = (size_t)num_arg(argv[++i]);
        } else if (strcmp(a, "--budget-mib") == 0 && i + 1 < argc) {
            budget_bytes = num_arg(argv[++i]) << 20;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--batches") == 0 && i + 1 < argc) {
            nbatches = 0;
            for (char *p = argv[++i]; *p && nbatches < ISOPROF_ARRAY_SIZE(batches);) {
                char *end;
                unsigned long v = strtoul(p, &end, 10);
                if (end == p || v == 0 || v > MAX_BATCH)
                    usage();
                batches[nbatches++] = v;
                p = *end == ',' ? end + 1 : end;
            }
        } else if (a[0] != '-' && pos == 0) {
            n = num_arg(a);
            pos++;
        } else if (a[0] != '-' && pos == 1) {
            dir = a;
            pos++;
        } else {
            usage();
        }
    }
    if (n == 0 || fill_batch == 0 || fill_batch > MAX_BATCH)
        usage();
    if (dir == NULL) {
        const char *t = getenv("TMPDIR");
        snprintf(tmp_root, sizeof(tmp_root), "%s/bench-store-XXXXXX", t && *t ? t : "/tmp");
        if (mkdtemp(tmp_root) == NULL) {
            perror("mkdtemp");
            return 1;
        }
        atexit(cleanup);
        dir = tmp_root;
    }

    /* The payloads: the corpus, or synthetic windows in its shape. */
    struct corpus c;
    unsigned workers;
    if (corpus_dir) {
        int rc = corpus_load(corpus_dir, &c);
        if (rc != 0) {
            fprintf(stderr, "bench_store: corpus %s: %s\n", corpus_dir, isoprof_strerror(rc));
            return 1;
        }
        workers = 50;
    } else {
        memset(&c, 0, sizeof(c));
        c.n = SYN_PAYLOADS;
        c.nworkers = 1;
        c.w = isoprof_calloc(c.n, sizeof(*c.w));
        c.workers = isoprof_calloc(1, sizeof(*c.workers));
        if (c.w == NULL || c.workers == NULL)
            return 1;
        snprintf(c.workers[0], sizeof(c.workers[0]), "synthetic");
        for (size_t i = 0; i < c.n; i++) {
            c.w[i].pprof = isoprof_malloc(SYN_LEN);
            if (c.w[i].pprof == NULL)
                return 1;
            make_payload(c.w[i].pprof, SYN_LEN);
            c.w[i].len = SYN_LEN - i * 13;
            c.w[i].gzip6 = corpus_gzip_size(c.w[i].pprof, c.w[i].len, 6);
            c.w[i].type = i % 10 == 9 ? STORE_TYPE_HEAP : STORE_TYPE_CPU;
            c.w[i].samples = 1000;
            c.w[i].interval = 10000000;
            snprintf(c.w[i].runtime, sizeof(c.w[i].runtime), "node-20");
        }
        workers = 20;
    }

    /* The main store: fill, then inserts at each batch size on top. */
    uint64_t extra = 0;
    uint64_t per_batch[8];
    for (size_t b = 0; b < nbatches; b++) {
        per_batch[b] = batches[b] == 1 ? 300 : batches[b] <= 16 ? 2000 : 8192;
        extra += per_batch[b];
    }
    struct fleet f;
    if (fleet_init(&f, &c, workers, n + extra) != 0)
        return 1;
    f.anomalies = corpus_dir != NULL;
    struct store *s = open_at(dir, "main", 0);
    if (s == NULL)
        return 1;
    fprintf(stderr, "bench_store: filling %" PRIu64 " windows (batch %zu)\n", n, fill_batch);
    struct insert_result fill, ins[8];
    int rc = insert(s, &f, n, fill_batch, &fill);
    if (rc != 0) {
        fprintf(stderr, "bench_store: fill: %s\n", isoprof_strerror(rc));
        return 1;
    }
    uint64_t fill_gz = f.gz_total, fill_raw = f.raw_total;
    for (size_t b = 0; b < nbatches; b++) {
        fprintf(stderr, "bench_store: %" PRIu64 " more windows at batch %zu\n", per_batch[b],
                batches[b]);
        if ((rc = insert(s, &f, per_batch[b], batches[b], &ins[b])) != 0) {
            fprintf(stderr, "bench_store: insert: %s\n", isoprof_strerror(rc));
            return 1;
        }
    }
    struct store_stat st;
    if ((rc = store_stat(s, &st)) != 0) {
        fprintf(stderr, "bench_store: store_stat: %s\n", isoprof_strerror(rc));
        return 1;
    }

    /* Queries. */
    fprintf(stderr, "bench_store: queries\n");
    struct lat lat[16];
    size_t nlat = 0;
    uint64_t *ns = isoprof_calloc(queries ? queries : 1, sizeof(*ns));
    struct anom_ids all = {0};
    if (ns == NULL)
        return 1;
    uint64_t span = st.newest_ns > st.oldest_ns ? st.newest_ns - st.oldest_ns : 0;
    uint64_t week = 7 * DAY;
    if ((rc = store_anomalies(s, NULL, anom_collect_cb, &all)) != 0) {
        fprintf(stderr, "bench_store: store_anomalies: %s\n", isoprof_strerror(rc));
        return 1;
    }
    static const struct {
        const char *what;
        int goal;
    } qs[] = {
        {"worker, 7 days (store_windows)", 1},
        {"worker + version, 7 days", 0},
        {"all workers, 1 hour (by_time)", 0},
        {"anomalies of one kind, 7 days (store_anomalies)", 1},
        {"anomalies of one worker (store_anomalies)", 1},
        {"one anomaly by id (store_anomalies)", 1},
        {"pinned windows of one worker, 7 days", 1},
        {"pinned windows, all workers, 7 days", 1},
        {"store_load (inflate one window)", 0},
    };
    for (size_t q = 0; queries > 0 && q < ISOPROF_ARRAY_SIZE(qs); q++) {
        if (q >= 3 && q <= 7 && all.n == 0)
            continue;
        uint64_t rows = 0;
        for (size_t r = 0; r < queries; r++) {
            uint64_t len = q == 2 ? 3600 * SEC : week;
            uint64_t since = st.oldest_ns + (span > len ? rnd() % (span - len) : 0);
            struct store_filter wf = {.since_ns = since, .until_ns = since + len};
            struct store_anomaly_filter af = {0};
            char vbuf[16];
            unsigned w = (unsigned)(rnd() % workers);
            uint64_t a = isoprof_now_mono_ns();
            switch (q) {
            case 0:
            case 6:
                wf.worker = f.wname[w];
                if (q == 6)
                    wf.pinned = STORE_PINNED_ANY;
                rc = store_windows(s, &wf, count_cb, &rows);
                break;
            case 1:
                wf.worker = f.wname[w];
                wf.version = version_of(&f, w, since + len / 2, vbuf);
                rc = store_windows(s, &wf, count_cb, &rows);
                break;
            case 2:
                rc = store_windows(s, &wf, count_cb, &rows);
                break;
            case 7:
                wf.pinned = STORE_PINNED_ANY;
                rc = store_windows(s, &wf, count_cb, &rows);
                break;
            case 3:
                af.kind = (uint8_t)(1 + rnd() % STORE_ANOMALY_MAX);
                af.since_ns = since;
                af.until_ns = since + len;
                rc = store_anomalies(s, &af, anom_count_cb, &rows);
                break;
            case 4:
                af.worker = f.wname[w];
                rc = store_anomalies(s, &af, anom_count_cb, &rows);
                break;
            case 5:
                af.id = all.ids[rnd() % all.n];
                rc = store_anomalies(s, &af, anom_count_cb, &rows);
                break;
            case 8: {
                void *out = NULL;
                size_t olen = 0;
                a = isoprof_now_mono_ns();
                rc = store_load(s, 1 + rnd() % (st.windows + st.evicted_total), &out, &olen);
                if (rc == ISOPROF_ENOTFOUND)
                    rc = 0;
                else
                    rows++;
                isoprof_free(out);
                break;
            }
            }
            ns[r] = isoprof_now_mono_ns() - a;
            if (rc != 0) {
                fprintf(stderr, "bench_store: %s: %s\n", qs[q].what, isoprof_strerror(rc));
                return 1;
            }
        }
        lat[nlat].what = qs[q].what;
        lat[nlat].goal = qs[q].goal;
        lat_done(&lat[nlat++], ns, queries, rows);
    }
    store_close(s);

    /* Bytes per window, over the fill. */
    char path[1024];
    snprintf(path, sizeof(path), "%s/main", dir);
    uint64_t pages = lmdb_pages(path);
    double wn = (double)fill.windows;
    double keys = (3.0 * (double)fill.klen_total + 16.0 * wn) / wn;
    double stored_mean = (double)fill.stored / wn;
    double record_mean = stored_mean - keys;
    double frame_mean = record_mean - RECORD_HEADER - (double)fill.runtime_total / wn;
    double total_windows = (double)st.windows;
    double dict_mean = st.windows ? (double)st.dict_bytes / total_windows : 0.0;

    if (json) {
        printf("{\"windows\": %" PRIu64 ", \"workers\": %u, \"isolates_per_worker\": %d, "
               "\"versions_per_worker\": %d, \"span_days\": %d, \"anomalies\": %zu, "
               "\"pinned\": %" PRIu64 ", \"corpus_windows\": %zu, \"synthetic\": %s,\n",
               st.windows, workers, ISOLATES, VERSIONS, SPAN_DAYS, all.n, st.windows_pinned, c.n,
               corpus_dir ? "false" : "true");
        printf(" \"bytes\": {\"raw_mean\": %.1f, \"gzip6_mean\": %.1f, \"frame_mean\": %.1f, "
               "\"record_mean\": %.1f, \"keys_mean\": %.1f, \"stored_mean\": %.1f, "
               "\"pages_mean\": %.1f, \"file_mean\": %.1f, \"file_size\": %" PRIu64
               ", \"dicts\": %" PRIu64 ", \"dict_bytes\": %" PRIu64 ", \"dict_mean\": %.1f},\n",
               (double)fill_raw / wn, (double)fill_gz / wn, frame_mean, record_mean, keys,
               stored_mean, (double)pages / total_windows, (double)st.file_size / total_windows,
               st.file_size, st.dicts, st.dict_bytes, dict_mean);
        printf(" \"inserts\": [\n");
        for (size_t b = 0; b <= nbatches; b++) {
            struct insert_result *ir = b == 0 ? &fill : &ins[b - 1];
            qsort(ir->commit_ns, ir->ncommits, sizeof(uint64_t), cmp_u64);
            printf("  {\"what\": \"%s\", \"windows\": %" PRIu64 ", \"batch\": %zu, "
                   "\"rate\": %.1f, \"put_s\": %.3f, \"commits\": %zu, \"commit_p50_ns\": %" PRIu64
                   ", \"commit_p99_ns\": %" PRIu64 "}%s\n",
                   b == 0 ? "fill" : "on full store", ir->windows, ir->batch,
                   ir->put_s > 0 ? (double)ir->windows / ir->put_s : 0.0, ir->put_s, ir->ncommits,
                   ir->ncommits ? ir->commit_ns[ir->ncommits / 2] : 0,
                   ir->ncommits ? ir->commit_ns[ir->ncommits * 99 / 100] : 0,
                   b < nbatches ? "," : "");
        }
        printf(" ],\n \"queries\": [\n");
        for (size_t q = 0; q < nlat; q++)
            printf("  {\"what\": \"%s\", \"goal\": %s, \"runs\": %zu, \"rows_avg\": %.2f, "
                   "\"p50_ns\": %" PRIu64 ", \"p90_ns\": %" PRIu64 ", \"p99_ns\": %" PRIu64
                   ", \"max_ns\": %" PRIu64 "}%s\n",
                   lat[q].what, lat[q].goal ? "true" : "false", lat[q].runs, lat[q].rows_avg,
                   lat[q].p50, lat[q].p90, lat[q].p99, lat[q].max, q + 1 < nlat ? "," : "");
        printf(" ]}\n");
    } else {
        printf("bench_store: %" PRIu64 " windows, %u workers x %d isolates, %d days, %s\n\n",
               st.windows, workers, ISOLATES, SPAN_DAYS,
               corpus_dir ? "real windows" : "synthetic ~16 KiB windows");
        printf("%-34s %8s %8s %12s %12s %12s\n", "insert", "windows", "batch", "windows/s",
               "ms/commit", "p99 ms");
        for (size_t b = 0; b <= nbatches; b++) {
            struct insert_result *ir = b == 0 ? &fill : &ins[b - 1];
            qsort(ir->commit_ns, ir->ncommits, sizeof(uint64_t), cmp_u64);
            printf("%-34s %8" PRIu64 " %8zu %12.0f %12.2f %12.2f\n",
                   b == 0 ? "store_put (fill)" : "store_put (on full store)", ir->windows,
                   ir->batch, ir->put_s > 0 ? (double)ir->windows / ir->put_s : 0.0,
                   ir->ncommits ? (double)ir->commit_ns[ir->ncommits / 2] / 1e6 : 0.0,
                   ir->ncommits ? (double)ir->commit_ns[ir->ncommits * 99 / 100] / 1e6 : 0.0);
        }
        printf("\nbytes/window: pprof %.0f, gzip %.0f, frame %.0f, record %.0f, stored %.0f, "
               "LMDB pages %.0f, file %.0f; %" PRIu64 " dictionaries, %.0f per window\n\n",
               (double)fill_raw / wn, (double)fill_gz / wn, frame_mean, record_mean, stored_mean,
               (double)pages / total_windows, (double)st.file_size / total_windows, st.dicts,
               dict_mean);
        printf("%-48s %6s %9s %9s %9s %9s %9s\n", "query (one thread)", "runs", "rows avg",
               "p50 us", "p90 us", "p99 us", "max us");
        for (size_t q = 0; q < nlat; q++)
            printf("%-48s %6zu %9.1f %9.1f %9.1f %9.1f %9.1f\n", lat[q].what, lat[q].runs,
                   lat[q].rows_avg, (double)lat[q].p50 / 1e3, (double)lat[q].p90 / 1e3,
                   (double)lat[q].p99 / 1e3, (double)lat[q].max / 1e3);
    }
    isoprof_free(ns);
    isoprof_free(all.ids);
    isoprof_free(fill.commit_ns);
    for (size_t b = 0; b < nbatches; b++)
        isoprof_free(ins[b].commit_ns);
    fleet_free(&f);
    corpus_free(&c);
    return 0;
}

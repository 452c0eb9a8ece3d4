/*
 * test_agg.c - schema 12: per-version aggregates (store_agg_*: put, get,
 * list, the per-worker bound, independence from window eviction, the
 * budget's charge, store_check), version_regression anomalies with their
 * findings (anomaly record version 4), store_anomaly_pin_windows, and a
 * schema 11 store read as it is and upgraded.
 */
#include "common.h"

#include <math.h>

/* Some bytes standing for an encoded aggregate: compressible, seeded. */
static uint8_t *agg_bytes(size_t len, uint64_t seed)
{
    uint8_t *b = isoprof_malloc(len);
    if (b == NULL)
        abort();
    for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t)((i / 7 + seed * 31) % 61);
    return b;
}

/* Put an aggregate of worker/version seen from first to last. */
static int put_agg(struct store *s, const char *worker, const char *version, uint64_t first,
                   uint64_t last, uint64_t samples, size_t len, unsigned keep, size_t *dropped)
{
    uint8_t *b = agg_bytes(len, samples);
    struct store_agg a = {.worker = worker,
                          .version = version,
                          .first_ns = first,
                          .last_ns = last,
                          .windows = samples / 1000,
                          .samples = samples,
                          .busy = samples / 2};
    int rc = store_agg_put(s, &a, b, len, keep, dropped, NULL);
    if (rc == 0)
        CHECK_EQ_INT(a.raw_size, len);
    isoprof_free(b);
    return rc;
}

struct listing {
    size_t n;
    struct {
        char worker[64], version[64];
        uint64_t first, last, samples, busy, windows, raw, stored;
    } a[32];
};

static int on_agg(const struct store_agg *a, void *arg)
{
    struct listing *l = arg;
    if (l->n == 32)
        return 1;
    snprintf(l->a[l->n].worker, sizeof(l->a[0].worker), "%s", a->worker);
    snprintf(l->a[l->n].version, sizeof(l->a[0].version), "%s", a->version);
    l->a[l->n].first = a->first_ns;
    l->a[l->n].last = a->last_ns;
    l->a[l->n].samples = a->samples;
    l->a[l->n].busy = a->busy;
    l->a[l->n].windows = a->windows;
    l->a[l->n].raw = a->raw_size;
    l->a[l->n].stored = a->stored_size;
    l->n++;
    return 0;
}

static struct listing *aggs_of(struct store *s, const char *worker)
{
    static struct listing l;
    memset(&l, 0, sizeof(l));
    CHECK_EQ_INT(store_aggs(s, worker, on_agg, &l), 0);
    return &l;
}

TEST(put_get_list)
{
    const char *path = tmp_store_path();
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    uint64_t before = stat_checked(s).stored_bytes;
    CHECK_EQ_INT(put_agg(s, "api", "v1", T0, T0 + 60 * SEC, 5000, 40000, 8, NULL), 0);
    CHECK_EQ_INT(put_agg(s, "api", "v2", T0 + 30 * SEC, T0 + 90 * SEC, 3000, 30000, 8, NULL), 0);
    CHECK_EQ_INT(put_agg(s, "apiary", "v1", T0, T0 + SEC, 100, 1000, 8, NULL), 0);
    CHECK_EQ_INT(put_agg(s, "ap", "v9", T0, T0 + SEC, 100, 1000, 8, NULL), 0);

    /* The bytes come back as put, with the figures. */
    struct store_agg got;
    void *b = NULL;
    size_t len = 0;
    CHECK_EQ_INT(store_agg_get(s, "api", "v2", &got, &b, &len), 0);
    uint8_t *want = agg_bytes(30000, 3000);
    CHECK(len == 30000 && b != NULL && memcmp(b, want, len) == 0);
    isoprof_free(want);
    isoprof_free(b);
    CHECK_STR(got.worker, "api");
    CHECK_STR(got.version, "v2");
    CHECK(got.first_ns == T0 + 30 * SEC && got.last_ns == T0 + 90 * SEC);
    CHECK(got.samples == 3000 && got.busy == 1500 && got.windows == 3 && got.raw_size == 30000);
    /* Compressed: far less than the bytes. */
    CHECK(got.stored_size > 56 && got.stored_size < 30000 / 4);
    CHECK_EQ_INT(store_agg_get(s, "api", "v3", NULL, NULL, NULL), ISOPROF_ENOTFOUND);
    CHECK_EQ_INT(store_agg_get(s, "api", "v1", NULL, NULL, NULL), 0);

    /* A worker's versions, in key order; another worker whose name starts
     * the same is not one of them. */
    struct listing *l = aggs_of(s, "api");
    REQUIRE(l->n == 2);
    CHECK_STR(l->a[0].version, "v1");
    CHECK_STR(l->a[1].version, "v2");
    CHECK(l->a[0].first == T0 && l->a[0].last == T0 + 60 * SEC && l->a[0].samples == 5000);
    l = aggs_of(s, NULL);
    CHECK_EQ_INT(l->n, 4);
    CHECK_EQ_INT(aggs_of(s, "nobody")->n, 0);

    /* Charged to the budget: stat counts them, check agrees. */
    struct store_stat st = stat_checked(s);
    CHECK_EQ_INT(st.aggs, 4);
    l = aggs_of(s, NULL);
    uint64_t sum = 0;
    for (size_t i = 0; i < l->n; i++)
        sum += l->a[i].stored;
    CHECK_EQ_INT(st.agg_bytes, sum);
    CHECK_EQ_INT(st.stored_bytes, before + sum);
    CHECK_EQ_INT(check_clean(s), 0);

    /* A put replaces: the charge follows the new value. */
    CHECK_EQ_INT(put_agg(s, "api", "v2", T0 + 30 * SEC, T0 + 120 * SEC, 9000, 90000, 8, NULL), 0);
    CHECK_EQ_INT(store_agg_get(s, "api", "v2", &got, NULL, NULL), 0);
    CHECK(got.samples == 9000 && got.last_ns == T0 + 120 * SEC && got.raw_size == 90000);
    CHECK_EQ_INT(stat_checked(s).aggs, 4);
    CHECK_EQ_INT(check_clean(s), 0);

    /* Refused: bad figures and sizes. */
    uint8_t one = 1;
    struct store_agg bad = {.worker = "w", .version = "v", .first_ns = 2, .last_ns = 1};
    CHECK_EQ_INT(store_agg_put(s, &bad, &one, 1, 0, NULL, NULL), -EINVAL);
    bad = (struct store_agg){.worker = "w", .version = "v", .samples = 1, .busy = 2};
    CHECK_EQ_INT(store_agg_put(s, &bad, &one, 1, 0, NULL, NULL), -EINVAL);
    bad = (struct store_agg){.worker = "w", .version = "v"};
    CHECK_EQ_INT(store_agg_put(s, &bad, &one, 0, 0, NULL, NULL), -EINVAL);
    CHECK_EQ_INT(store_agg_put(s, &bad, &one, STORE_AGG_RAW_MAX + 1, 0, NULL, NULL), -EINVAL);
    bad.version = NULL;
    CHECK_EQ_INT(store_agg_put(s, &bad, &one, 1, 0, NULL, NULL), -EINVAL);
    store_close(s);

    /* A reader sees them; it cannot write them. */
    s = open_ro(path);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(aggs_of(s, "api")->n, 2);
    CHECK_EQ_INT(store_agg_get(s, "ap", "v9", &got, NULL, NULL), 0);
    struct store_agg ro = {.worker = "w", .version = "v"};
    CHECK_EQ_INT(store_agg_put(s, &ro, &one, 1, 0, NULL, NULL), -EROFS);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    CHECK_EQ_INT(verify_clean(path), 0);
}

/* keep bounds a worker's aggregates: the one seen last longest ago goes,
 * never the one just put; other workers are not touched. */
TEST(keep_per_worker)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(put_agg(s, "other", "x", T0, T0, 10, 100, 3, NULL), 0);
    size_t dropped = 9;
    for (int v = 1; v <= 3; v++) {
        char ver[8];
        snprintf(ver, sizeof(ver), "v%d", v);
        CHECK_EQ_INT(put_agg(s, "api", ver, T0 + (uint64_t)v * SEC, T0 + (uint64_t)v * 100 * SEC,
                             1000, 2000, 3, &dropped),
                     0);
        CHECK_EQ_INT(dropped, 0);
    }
    /* v1 is updated: seen last now, so v2 is the oldest. */
    CHECK_EQ_INT(put_agg(s, "api", "v1", T0 + SEC, T0 + 500 * SEC, 2000, 2000, 3, &dropped), 0);
    CHECK_EQ_INT(dropped, 0);
    CHECK_EQ_INT(put_agg(s, "api", "v4", T0 + 400 * SEC, T0 + 450 * SEC, 1000, 2000, 3, &dropped),
                 0);
    CHECK_EQ_INT(dropped, 1);
    struct listing *l = aggs_of(s, "api");
    REQUIRE(l->n == 3);
    CHECK_STR(l->a[0].version, "v1");
    CHECK_STR(l->a[1].version, "v3");
    CHECK_STR(l->a[2].version, "v4");
    /* A put seen longest ago of all still stays, and takes the others'
     * places down to keep. */
    CHECK_EQ_INT(put_agg(s, "api", "v0", T0, T0, 1000, 2000, 1, &dropped), 0);
    CHECK_EQ_INT(dropped, 3);
    l = aggs_of(s, "api");
    REQUIRE(l->n == 1);
    CHECK_STR(l->a[0].version, "v0");
    CHECK_EQ_INT(aggs_of(s, "other")->n, 1);
    /* keep 0: no bound. */
    for (int v = 0; v < 12; v++) {
        char ver[8];
        snprintf(ver, sizeof(ver), "u%02d", v);
        CHECK_EQ_INT(put_agg(s, "api", ver, T0, T0 + (uint64_t)v, 1000, 500, 0, &dropped), 0);
    }
    CHECK_EQ_INT(aggs_of(s, "api")->n, 13);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/* Window eviction leaves the aggregates: a version whose windows are all
 * gone is still a baseline; the counter keeps them when the windows run
 * out, and check agrees. */
TEST(outlive_windows)
{
    const char *path = tmp_store_path();
    struct store *s = open_rw(path, 256 * 1024);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(put_agg(s, "api", "v1", T0, T0 + SEC, 5000, 50000, 8, NULL), 0);
    for (int i = 0; i < 200; i++)
        CHECK_EQ_INT(
            put_one(s, "api", "v2", T0 + (uint64_t)(i + 10) * SEC, 1, STORE_TYPE_CPU, 4000, NULL),
            0);
    struct store_stat st = stat_checked(s);
    CHECK(st.evicted_total > 0);
    CHECK(st.stored_bytes <= 256 * 1024);
    struct store_filter f = {.version = "v1"};
    CHECK_EQ_INT(count_of(s, &f), 0);
    CHECK_EQ_INT(store_agg_get(s, "api", "v1", NULL, NULL, NULL), 0);
    CHECK_EQ_INT(check_clean(s), 0);

    /* An aggregate that needs the room evicts windows for it. */
    uint64_t evicted = st.evicted_total;
    uint8_t *big = isoprof_malloc(400000);
    REQUIRE(big != NULL);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < 400000; i++) { /* xorshift: incompressible */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        big[i] = (uint8_t)(x >> 24);
    }
    struct store_agg a = {.worker = "api", .version = "v3", .samples = 1, .busy = 1};
    struct store_put_stats ps;
    CHECK_EQ_INT(store_agg_put(s, &a, big, 150000, 8, NULL, &ps), 0);
    CHECK(ps.evicted > 0);
    st = stat_checked(s);
    CHECK(st.evicted_total == evicted + ps.evicted && st.stored_bytes <= 256 * 1024);
    CHECK_EQ_INT(check_clean(s), 0);
    /* Alone larger than the budget: refused, nothing changed. */
    CHECK_EQ_INT(store_agg_put(s, &a, big, 400000, 8, NULL, NULL), -E2BIG);
    isoprof_free(big);
    CHECK_EQ_INT(store_agg_get(s, "api", "v3", &a, NULL, NULL), 0);
    CHECK_EQ_INT(a.raw_size, 150000);
    /* Windows that must go for a big new one leave the aggregates and a
     * counter that check confirms. */
    CHECK_EQ_INT(put_one(s, "api", "v2", T0 + 9000 * SEC, 1, STORE_TYPE_CPU, 60000, NULL), 0);
    CHECK_EQ_INT(stat_checked(s).aggs, 2);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    CHECK_EQ_INT(verify_clean(path), 0);
}

/* A damaged aggregate: check names it, get refuses it, listing skips a
 * key that does not decode. */
TEST(damaged)
{
    const char *path = tmp_store_path();
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(put_agg(s, "api", "v1", T0, T0, 5000, 20000, 8, NULL), 0);
    CHECK_EQ_INT(put_agg(s, "api", "v2", T0, T0, 5000, 20000, 8, NULL), 0);
    MDB_txn *txn;
    REQUIRE(mdb_txn_begin(s->env, NULL, 0, &txn) == 0);
    MDB_val k = {7, "api\0v1"}, v;
    REQUIRE(mdb_get(txn, s->aggs, &k, &v) == 0);
    uint8_t *copy = isoprof_malloc(v.mv_size);
    REQUIRE(copy != NULL);
    memcpy(copy, v.mv_data, v.mv_size);
    copy[v.mv_size - 6] ^= 0x40; /* in the frame */
    MDB_val nv = {v.mv_size, copy};
    REQUIRE(mdb_put(txn, s->aggs, &k, &nv, 0) == 0);
    REQUIRE(mdb_txn_commit(txn) == 0);
    isoprof_free(copy);
    void *b = NULL;
    size_t len;
    CHECK_EQ_INT(store_agg_get(s, "api", "v1", NULL, &b, &len), ISOPROF_ECORRUPT);
    CHECK(b == NULL);
    CHECK_EQ_INT(store_agg_get(s, "api", "v2", NULL, &b, &len), 0);
    isoprof_free(b);
    char *why = NULL;
    CHECK_EQ_INT(store_check(s, &why), ISOPROF_ECORRUPT);
    CHECK(why != NULL && strstr(why, "aggs: api/v1: zstd frame does not inflate") != NULL);
    isoprof_free(why);
    store_close(s);
}

static const struct store_regression_fn grown[2] = {
    {.name = "walkNested",
     .file = "/srv/app/replacer.js",
     .before = 0,
     .after = 3100,
     .share_before = 0.0,
     .share_after = 0.31,
     .z = 41.5,
     .p_adj = 1e-300},
    {.name = "replacer",
     .file = "/srv/app/replacer.js",
     .before = 2500,
     .after = 5200,
     .share_before = 0.25,
     .share_after = 0.52,
     .z = 38.25,
     .p_adj = 2.5e-200},
};

struct found {
    int n;
    uint64_t id, value, threshold;
    uint32_t flags;
    size_t nwin;
    int has;
    char baseline[64];
    uint64_t busy_before, busy_after;
    double cpu_before, cpu_after;
    size_t nfns;
    char names[4][64], files[4][64];
    uint64_t before[4], after[4];
    double sb[4], sa[4], z[4], p[4];
};

static int on_found(const struct store_anomaly *a, void *arg)
{
    struct found *f = arg;
    f->n++;
    f->id = a->id;
    f->value = a->value;
    f->threshold = a->threshold;
    f->flags = a->flags;
    f->nwin = a->nwindows;
    f->has = a->regression != NULL;
    if (a->regression) {
        const struct store_regression *g = a->regression;
        snprintf(f->baseline, sizeof(f->baseline), "%s", g->baseline);
        f->busy_before = g->busy_before;
        f->busy_after = g->busy_after;
        f->cpu_before = g->cpu_before;
        f->cpu_after = g->cpu_after;
        f->nfns = g->nfns;
        for (size_t i = 0; i < g->nfns && i < 4; i++) {
            snprintf(f->names[i], sizeof(f->names[0]), "%s", g->fns[i].name);
            snprintf(f->files[i], sizeof(f->files[0]), "%s", g->fns[i].file);
            f->before[i] = g->fns[i].before;
            f->after[i] = g->fns[i].after;
            f->sb[i] = g->fns[i].share_before;
            f->sa[i] = g->fns[i].share_after;
            f->z[i] = g->fns[i].z;
            f->p[i] = g->fns[i].p_adj;
        }
    }
    return 0;
}

static struct found find(struct store *s, uint64_t id)
{
    struct found f;
    memset(&f, 0, sizeof(f));
    struct store_anomaly_filter af = {.id = id};
    CHECK_EQ_INT(store_anomalies(s, &af, on_found, &f), 0);
    CHECK_EQ_INT(f.n, 1);
    return f;
}

TEST(version_regression)
{
    CHECK_STR(store_anomaly_name(STORE_ANOMALY_VERSION_REGRESSION), "version_regression");
    CHECK_EQ_INT(store_anomaly_parse("version_regression"), STORE_ANOMALY_VERSION_REGRESSION);
    const char *path = tmp_store_path();
    struct store *s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    struct store_regression g = {.baseline = "v1",
                                 .busy_before = 12000,
                                 .busy_after = 10000,
                                 .cpu_before = 0.42,
                                 .cpu_after = -1,
                                 .fns = grown,
                                 .nfns = 2};
    struct store_anomaly a = {.kind = STORE_ANOMALY_VERSION_REGRESSION,
                              .worker = "ledger",
                              .version = "v2",
                              .start_ns = T0,
                              .end_ns = T0,
                              .value = 310000,
                              .threshold = 20000,
                              .regression = &g};
    CHECK_EQ_INT(store_anomaly_put(s, &a, 0), 0);
    REQUIRE(a.id != 0);
    struct found f = find(s, a.id);
    CHECK(f.has && f.nfns == 2 && f.value == 310000 && f.threshold == 20000 && f.flags == 0);
    CHECK_STR(f.baseline, "v1");
    CHECK(f.busy_before == 12000 && f.busy_after == 10000);
    CHECK(f.cpu_before == 0.42 && f.cpu_after == -1);
    CHECK_STR(f.names[0], "walkNested");
    CHECK_STR(f.files[1], "/srv/app/replacer.js");
    CHECK(f.before[1] == 2500 && f.after[1] == 5200 && f.sa[0] == 0.31 && f.sb[1] == 0.25);
    CHECK(f.z[1] == 38.25 && f.p[0] == 1e-300 && f.p[1] == 2.5e-200);

    /* An update without findings keeps them; one with findings replaces
     * them (cleared: none left that count). */
    struct store_anomaly up = {.id = a.id,
                               .kind = STORE_ANOMALY_VERSION_REGRESSION,
                               .worker = "ledger",
                               .version = "v2",
                               .end_ns = T0 + 60 * SEC,
                               .value = 300000,
                               .threshold = 20000};
    CHECK_EQ_INT(store_anomaly_put(s, &up, 0), 0);
    f = find(s, a.id);
    CHECK(f.has && f.nfns == 2 && f.value == 300000);
    struct store_regression none = {.baseline = "v1",
                                    .busy_before = 12000,
                                    .busy_after = 30000,
                                    .cpu_before = 0.4,
                                    .cpu_after = 0.41};
    up.regression = &none;
    up.flags = STORE_ANOMALY_CLEARED;
    up.value = 0;
    CHECK_EQ_INT(store_anomaly_put(s, &up, 0), 0);
    f = find(s, a.id);
    CHECK(f.has && f.nfns == 0 && f.busy_after == 30000 && f.flags == STORE_ANOMALY_CLEARED);
    CHECK_EQ_INT(check_clean(s), 0);

    /* Refused: findings on another kind, or out of bounds. */
    struct store_anomaly bad = a;
    bad.id = 0;
    bad.kind = STORE_ANOMALY_LATENCY_P999_SPIKE;
    CHECK_EQ_INT(store_anomaly_put(s, &bad, 0), -EINVAL);
    bad.kind = STORE_ANOMALY_VERSION_REGRESSION;
    struct store_regression_fn many[STORE_REGRESSION_FNS_MAX + 1];
    for (size_t i = 0; i <= STORE_REGRESSION_FNS_MAX; i++)
        many[i] = grown[0];
    struct store_regression gb = g;
    gb.fns = many;
    gb.nfns = STORE_REGRESSION_FNS_MAX + 1;
    bad.regression = &gb;
    CHECK_EQ_INT(store_anomaly_put(s, &bad, 0), -EINVAL);
    char longname[STORE_REGRESSION_NAME_MAX + 2];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    many[0].name = longname;
    gb.nfns = 1;
    CHECK_EQ_INT(store_anomaly_put(s, &bad, 0), -EINVAL);
    longname[STORE_REGRESSION_NAME_MAX] = '\0'; /* at the bound: fine */
    gb.nfns = STORE_REGRESSION_FNS_MAX;
    many[1].file = longname;
    gb.baseline = "";
    CHECK_EQ_INT(store_anomaly_put(s, &bad, 0), -EINVAL);
    gb.baseline = "v1";
    CHECK_EQ_INT(store_anomaly_put(s, &bad, 0), 0);
    f = find(s, bad.id);
    CHECK(f.has && f.nfns == STORE_REGRESSION_FNS_MAX && strlen(f.names[0]) == 63);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    CHECK_EQ_INT(verify_clean(path), 0);
}

static int on_window_pins(const struct store_window *w, void *arg)
{
    uint32_t *p = arg;
    p[w->id] = w->pinned;
    return 0;
}

struct first {
    uint64_t id[8];
    size_t n;
};

static int on_peek(const struct store_window *w, uint64_t q, void *arg)
{
    (void)q;
    struct first *f = arg;
    if (f->n < 8)
        f->id[f->n++] = w->id;
    return 0;
}

/* pin_windows pins the newest windows of one pair and type in a span,
 * oldest first in the anomaly's list, and moves the pending ones ahead in
 * the outbox; the uploader's label reads the pin. */
TEST(pin_windows)
{
    struct store *s = open_outbox(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t ids[12];
    /* 1..6: ledger v2 cpu (isolates 1 and 2); 7: v2 heap; 8: v1 cpu;
     * 9: ledgers v2 cpu (another worker); 10..12: ledger v2 cpu later */
    for (int i = 0; i < 6; i++)
        ids[i] = put_labelled(s, "ledger", "v2", T0 + (uint64_t)i * SEC, 1u + (uint32_t)(i % 2),
                              STORE_TYPE_CPU, 0, NULL, NULL, 0, NULL);
    ids[6] =
        put_labelled(s, "ledger", "v2", T0 + 2 * SEC, 1, STORE_TYPE_HEAP, 0, NULL, NULL, 0, NULL);
    ids[7] =
        put_labelled(s, "ledger", "v1", T0 + 3 * SEC, 1, STORE_TYPE_CPU, 0, NULL, NULL, 0, NULL);
    ids[8] =
        put_labelled(s, "ledgers", "v2", T0 + 3 * SEC, 1, STORE_TYPE_CPU, 0, NULL, NULL, 0, NULL);
    for (int i = 9; i < 12; i++)
        ids[i] = put_labelled(s, "ledger", "v2", T0 + (uint64_t)(i + 100) * SEC, 1, STORE_TYPE_CPU,
                              0, NULL, NULL, 0, NULL);
    for (int i = 0; i < 12; i++)
        REQUIRE(ids[i] == (uint64_t)i + 1);
    struct store_regression g = {.baseline = "v1", .cpu_before = -1, .cpu_after = -1};
    struct store_anomaly a = {.kind = STORE_ANOMALY_VERSION_REGRESSION,
                              .worker = "ledger",
                              .version = "v2",
                              .start_ns = T0 + 50 * SEC,
                              .end_ns = T0 + 50 * SEC,
                              .regression = &g};
    REQUIRE(store_anomaly_put(s, &a, 0) == 0);
    size_t n = 99;
    /* [T0 + 1 s, T0 + 100 s): windows 2..6, the newest 4 of them. */
    CHECK_EQ_INT(store_anomaly_pin_windows(s, a.id, "ledger", "v2", STORE_TYPE_CPU, T0 + SEC,
                                           T0 + 100 * SEC, 4, &n),
                 0);
    CHECK_EQ_INT(n, 4);
    struct found f = find(s, a.id);
    CHECK_EQ_INT(f.nwin, 4);
    uint32_t pins[16] = {0};
    CHECK_EQ_INT(store_windows(s, NULL, on_window_pins, pins), 0);
    for (int i = 1; i <= 12; i++)
        CHECK_EQ_INT(pins[i], i >= 3 && i <= 6 ? 1u << STORE_ANOMALY_VERSION_REGRESSION : 0u);
    /* Pinned evidence drains first. */
    struct first pk = {0};
    CHECK_EQ_INT(store_outbox_peek(s, 8, on_peek, &pk), 0);
    CHECK(pk.n >= 4 && pk.id[0] == 3 && pk.id[1] == 4 && pk.id[2] == 5 && pk.id[3] == 6);
    /* Again, unbounded: the rest of the pair's CPU windows, nothing twice. */
    CHECK_EQ_INT(store_anomaly_pin_windows(s, a.id, "ledger", "v2", STORE_TYPE_CPU, 0, 0, 100, &n),
                 0);
    CHECK_EQ_INT(n, 9);
    f = find(s, a.id);
    CHECK_EQ_INT(f.nwin, 9);
    CHECK_EQ_INT(store_anomaly_pin_windows(s, 999, "ledger", "v2", STORE_TYPE_CPU, 0, 0, 1, NULL),
                 ISOPROF_ENOTFOUND);
    CHECK_EQ_INT(store_anomaly_pin_windows(s, a.id, "ledger", "v2", 9, 0, 0, 1, NULL), -EINVAL);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/* Make the store at path what a schema 11 build left: every anomaly in
 * version 3 (no findings' length), no aggs DB, the format 11. */
static void make_schema11(const char *path)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi anomalies;
    REQUIRE(mdb_env_create(&env) == 0);
    mdb_env_set_maxdbs(env, 16);
    REQUIRE(mdb_env_open(env, path, 0, 0640) == 0);
    REQUIRE(mdb_txn_begin(env, NULL, 0, &txn) == 0);
    REQUIRE(mdb_dbi_open(txn, "anomalies", 0, &anomalies) == 0);
    MDB_cursor *c;
    MDB_val k, v;
    struct {
        uint8_t key[512], val[512];
        size_t klen, vlen;
    } out[8];
    size_t n = 0;
    REQUIRE(mdb_cursor_open(txn, anomalies, &c) == 0);
    for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && n < 8;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT), n++) {
        const uint8_t *p = v.mv_data;
        REQUIRE(p[1] == 4 && v.mv_size < 512 && k.mv_size < 512);
        size_t at = 50 + p[49];
        REQUIRE(store_be32_get(p + at) == 0);
        memcpy(out[n].val, p, at);
        memcpy(out[n].val + at, p + at + 4, v.mv_size - at - 4);
        out[n].val[1] = 3;
        out[n].vlen = v.mv_size - 4;
        memcpy(out[n].key, k.mv_data, k.mv_size);
        out[n].klen = k.mv_size;
    }
    mdb_cursor_close(c);
    for (size_t i = 0; i < n; i++) {
        MDB_val ok = {out[i].klen, out[i].key}, ov = {out[i].vlen, out[i].val};
        REQUIRE(mdb_put(txn, anomalies, &ok, &ov, 0) == 0);
    }
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    downgrade_schema(path, "aggs", NULL, 11);
}

TEST(schema11_store)
{
    const char *path = tmp_store_path();
    struct store *s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    uint64_t ids[3];
    for (int i = 0; i < 3; i++)
        ids[i] = put_labelled(s, "w", "v", T0 + (uint64_t)i * SEC, 1, STORE_TYPE_CPU, 0, NULL, NULL,
                              0, NULL);
    struct store_anomaly a = {.kind = STORE_ANOMALY_MEMORY_NEAR_LIMIT,
                              .worker = "w",
                              .version = "v",
                              .isolate = 1,
                              .start_ns = T0,
                              .end_ns = T0,
                              .value = 100,
                              .threshold = 90,
                              .limit = 128,
                              .limit_source = STORE_LIMIT_CONFIG};
    REQUIRE(store_anomaly_put(s, &a, 1u << STORE_TYPE_CPU) == 0);
    uint64_t before = stat_checked(s).stored_bytes;
    store_close(s);
    make_schema11(path);

    /* A reader takes it as it is: no aggregates, the anomaly as it was. */
    s = open_ro(path);
    REQUIRE(s != NULL);
    struct store_stat st = stat_checked(s);
    CHECK_EQ_INT(st.schema_version, 11);
    CHECK_EQ_INT(st.aggs + st.agg_bytes, 0);
    CHECK_EQ_INT(st.stored_bytes, before); /* anomalies are not charged */
    CHECK_EQ_INT(aggs_of(s, NULL)->n, 0);
    CHECK_EQ_INT(store_agg_get(s, "w", "v", NULL, NULL, NULL), ISOPROF_ENOTFOUND);
    struct found f = find(s, a.id);
    CHECK(!f.has && f.nwin == 1 && f.value == 100);
    check_loads(s, ids, 3, 3000);
    store_close(s);
    CHECK_EQ_INT(verify_clean(path), 0);

    /* A writer upgrades it in place: schema 12, aggregates and
     * regressions work, the old anomaly reads the same. */
    s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    st = stat_checked(s);
    CHECK_EQ_INT(st.schema_version, STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(STORE_SCHEMA_VERSION, 12);
    CHECK_EQ_INT(check_clean(s), 0);
    f = find(s, a.id);
    CHECK(!f.has && f.nwin == 1 && f.value == 100);
    CHECK_EQ_INT(put_agg(s, "w", "v", T0, T0 + 3 * SEC, 3000, 5000, 8, NULL), 0);
    struct store_regression g = {
        .baseline = "u", .cpu_before = -1, .cpu_after = -1, .fns = grown, .nfns = 1};
    struct store_anomaly r = {.kind = STORE_ANOMALY_VERSION_REGRESSION,
                              .worker = "w",
                              .version = "v",
                              .start_ns = T0,
                              .end_ns = T0,
                              .regression = &g};
    CHECK_EQ_INT(store_anomaly_put(s, &r, 0), 0);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    CHECK_EQ_INT(verify_clean(path), 0);
    s = open_ro(path);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(aggs_of(s, "w")->n, 1);
    f = find(s, r.id);
    CHECK(f.has && f.nfns == 1);
    store_close(s);
}

int main(void)
{
    RUN(put_get_list);
    RUN(keep_per_worker);
    RUN(outlive_windows);
    RUN(damaged);
    RUN(version_regression);
    RUN(pin_windows);
    RUN(schema11_store);
    TEST_EXIT();
}

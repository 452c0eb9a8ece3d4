/*
 * test_thread.c - the thread label of windows and anomalies (schema 5):
 * put and read back (store_windows, store_outbox_peek, store_anomalies),
 * NULL and "" as "main", the filters on every access path, what store_put
 * and store_anomaly_put refuse, the budget when threads are long, a schema
 * 4 store (version 2 records, version 1 anomalies, written here by hand as
 * a schema 4 build left them) read as it is and upgraded by a writer, and
 * store_check on a damaged thread.
 */
#include "common.h"

#include <stdarg.h>

/* Put one window of thread th (NULL: as callers that predate threads);
 * its id, 0 on failure (*rc receives store_put's code if rc is set). */
static uint64_t put_th(struct store *s, const char *worker, const char *version, uint64_t start,
                       uint32_t isolate, uint8_t type, const char *th, uint64_t pin, int *rc)
{
    struct test_rec t;
    rec_make(&t, worker, version, start, isolate, type, 3000, 17); /* one payload for all */
    t.r.w.thread = th;
    t.r.pin = pin;
    int r = store_put(s, &t.r, 1, NULL);
    if (rc)
        *rc = r;
    uint64_t id = r == 0 ? t.r.w.id : 0;
    rec_free(&t);
    return id;
}

static struct store *open_outbox(const char *path, uint64_t max_size)
{
    struct store_options o = {.outbox = 1, .max_size = max_size};
    return open_with(path, &o);
}

static struct store *open_ro(const char *path)
{
    struct store_options o = {.readonly = 1};
    return open_with(path, &o);
}

/* The listing of f, as "id:thread" words in listing order. */
static const char *threads_of(struct store *s, const struct store_filter *f)
{
    static char out[4096];
    int rc;
    struct seen *l = list(s, f, &rc);
    size_t n = 0;
    out[0] = '\0';
    if (rc != 0)
        snprintf(out, sizeof(out), "error %d", rc);
    for (size_t i = 0; rc == 0 && i < l->n && n < sizeof(out); i++)
        n += (size_t)snprintf(out + n, sizeof(out) - n, "%s%" PRIu64 ":%s", i ? " " : "",
                              l->w[i].id, l->w[i].thread);
    return out;
}

static size_t count_of(struct store *s, const struct store_filter *f)
{
    int rc;
    struct seen *l = list(s, f, &rc);
    return rc == 0 ? l->n : (size_t)-1;
}

/* What store_outbox_peek hands out: "id:thread" words. */
static int peek_on(const struct store_window *w, uint64_t queued, void *arg)
{
    (void)queued;
    char *out = arg;
    size_t n = strlen(out);
    snprintf(out + n, 4096 - n, "%s%" PRIu64 ":%s", n ? " " : "", w->id,
             w->thread ? w->thread : "(null)");
    return 0;
}

static const char *peek_threads(struct store *s)
{
    static char out[4096];
    out[0] = '\0';
    int rc = store_outbox_peek(s, 100, peek_on, out);
    if (rc != 0)
        snprintf(out, sizeof(out), "error %d", rc);
    return out;
}

/* Anomalies as "id:thread" words. */
static int anom_on(const struct store_anomaly *a, void *arg)
{
    char *out = arg;
    size_t n = strlen(out);
    snprintf(out + n, 4096 - n, "%s%" PRIu64 ":%s", n ? " " : "", a->id,
             a->thread ? a->thread : "(null)");
    return 0;
}

static const char *anomaly_threads(struct store *s, const struct store_anomaly_filter *f)
{
    static char out[4096];
    out[0] = '\0';
    int rc = store_anomalies(s, f, anom_on, out);
    if (rc != 0)
        snprintf(out, sizeof(out), "error %d", rc);
    return out;
}

static char want_buf[4096];
__attribute__((format(printf, 1, 2))) static const char *want(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want_buf, sizeof(want_buf), fmt, ap);
    va_end(ap);
    return want_buf;
}

TEST(round_trip_and_filters)
{
    const char *path = tmp_store_path();
    struct store *s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    uint64_t a = put_th(s, "w", "v", T0, 1, STORE_TYPE_CPU, "main", 0, NULL);
    uint64_t b = put_th(s, "w", "v", T0 + 1 * SEC, 2, STORE_TYPE_CPU, "pool-1", 0, NULL);
    uint64_t c = put_th(s, "w", "v", T0 + 2 * SEC, 3, STORE_TYPE_HEAP, "worker-3", 0, NULL);
    uint64_t d = put_th(s, "w", "v2", T0 + 3 * SEC, 2, STORE_TYPE_CPU, "pool-1", 0, NULL);
    uint64_t e = put_th(s, "other", "v", T0 + 4 * SEC, 1, STORE_TYPE_CPU, NULL, 0, NULL);
    uint64_t f = put_th(s, "w", "v", T0 + 5 * SEC, 4, STORE_TYPE_CPU, "", 0, NULL);
    REQUIRE(a && b && c && d && e && f);

    /* What was put comes back; NULL and "" were stored as "main". */
    CHECK_STR(threads_of(s, NULL),
              want("%" PRIu64 ":main %" PRIu64 ":pool-1 %" PRIu64 ":worker-3 %" PRIu64
                   ":pool-1 %" PRIu64 ":main %" PRIu64 ":main",
                   a, b, c, d, e, f));
    CHECK_STR(peek_threads(s), want_buf); /* the outbox is in store order here */

    /* The filter on each access path: time index (no worker), key range
     * (worker; worker and version), one id, pinned windows. */
    struct store_filter flt = {.thread = "pool-1"};
    CHECK_STR(threads_of(s, &flt), want("%" PRIu64 ":pool-1 %" PRIu64 ":pool-1", b, d));
    flt.worker = "w";
    CHECK_STR(threads_of(s, &flt), want("%" PRIu64 ":pool-1 %" PRIu64 ":pool-1", b, d));
    flt.version = "v";
    CHECK_STR(threads_of(s, &flt), want("%" PRIu64 ":pool-1", b));
    flt.since_ns = T0 + 2 * SEC;
    CHECK_STR(threads_of(s, &flt), "");
    flt = (struct store_filter){.thread = "main"};
    CHECK_STR(threads_of(s, &flt),
              want("%" PRIu64 ":main %" PRIu64 ":main %" PRIu64 ":main", a, e, f));
    flt.thread = ""; /* "" is "main", as on put */
    CHECK_STR(threads_of(s, &flt), want_buf);
    flt.thread = "pool"; /* a prefix is not a match */
    CHECK_STR(threads_of(s, &flt), "");
    flt.thread = "Main";
    CHECK_STR(threads_of(s, &flt), "");
    flt = (struct store_filter){.id = c, .thread = "worker-3"};
    CHECK_EQ_INT(count_of(s, &flt), 1);
    flt.thread = "main";
    CHECK_EQ_INT(count_of(s, &flt), 0);
    flt = (struct store_filter){.type = STORE_TYPE_HEAP, .thread = "pool-1"};
    CHECK_EQ_INT(count_of(s, &flt), 0);

    /* A pinned window of a worker thread, told from the main thread's. */
    struct store_anomaly an = {.kind = STORE_ANOMALY_OOM_SUSPECTED,
                               .worker = "w",
                               .version = "v",
                               .thread = "pool-1",
                               .isolate = 5,
                               .start_ns = T0 + 6 * SEC,
                               .end_ns = T0 + 6 * SEC};
    REQUIRE(store_anomaly_put(s, &an, 0) == 0);
    uint64_t g = put_th(s, "w", "v", T0 + 6 * SEC, 5, STORE_TYPE_CPU, "pool-1", an.id, NULL);
    uint64_t h = put_th(s, "w", "v", T0 + 7 * SEC, 6, STORE_TYPE_CPU, "main", an.id, NULL);
    REQUIRE(g && h);
    flt = (struct store_filter){.pinned = STORE_PINNED_ANY, .thread = "pool-1"};
    CHECK_STR(threads_of(s, &flt), want("%" PRIu64 ":pool-1", g));
    flt.thread = "main";
    CHECK_STR(threads_of(s, &flt), want("%" PRIu64 ":main", h));
    flt.thread = NULL;
    CHECK_EQ_INT(count_of(s, &flt), 2);

    /* Refused: too long, not printable ASCII; nothing is stored. */
    char longest[STORE_THREAD_MAX + 2];
    memset(longest, 'x', sizeof(longest));
    longest[STORE_THREAD_MAX + 1] = '\0';
    const char *const bad[] = {longest, "tab\there", "del\x7f", "caf\xc3\xa9", "\n"};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(bad); i++) {
        int rc = 0;
        CHECK(put_th(s, "w", "v", T0 + 20 * SEC, 9, STORE_TYPE_CPU, bad[i], 0, &rc) == 0);
        CHECK_EQ_INT(rc, -EINVAL);
    }
    CHECK_EQ_INT(count_of(s, NULL), 8);
    longest[STORE_THREAD_MAX] = '\0'; /* the longest accepted */
    uint64_t l = put_th(s, "w", "v", T0 + 8 * SEC, 7, STORE_TYPE_CPU, longest, 0, NULL);
    REQUIRE(l != 0);
    flt = (struct store_filter){.id = l};
    CHECK_STR(threads_of(s, &flt), want("%" PRIu64 ":%s", l, longest));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* It is on disk: a reader sees the same. */
    s = open_ro(path);
    REQUIRE(s != NULL);
    flt = (struct store_filter){.thread = "worker-3"};
    CHECK_STR(threads_of(s, &flt), want("%" PRIu64 ":worker-3", c));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/* Anomalies carry the thread too, so that an oom_suspected of a worker
 * thread is told from the main thread's. */
TEST(anomaly_thread)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t wmain = put_th(s, "w", "v", T0, 1, STORE_TYPE_HEAP, NULL, 0, NULL);
    uint64_t wpool = put_th(s, "w", "v", T0, 2, STORE_TYPE_HEAP, "pool-1", 0, NULL);
    REQUIRE(wmain && wpool);
    struct store_anomaly a = {.kind = STORE_ANOMALY_OOM_SUSPECTED,
                              .worker = "w",
                              .version = "v",
                              .isolate = 2,
                              .thread = "pool-1",
                              .start_ns = T0 + SEC,
                              .end_ns = T0 + SEC,
                              .value = 130u << 20,
                              .threshold = 128u << 20,
                              .flags = STORE_ANOMALY_OPEN};
    REQUIRE(store_anomaly_put(s, &a, 1u << STORE_TYPE_HEAP) == 0);
    struct store_anomaly m = a;
    m.id = 0;
    m.isolate = 1;
    m.thread = NULL; /* the main thread's */
    REQUIRE(store_anomaly_put(s, &m, 1u << STORE_TYPE_HEAP) == 0);
    struct store_anomaly e = m;
    e.id = 0;
    e.isolate = 3;
    e.thread = ""; /* "main" too */
    e.kind = STORE_ANOMALY_LATENCY_P999_SPIKE;
    REQUIRE(store_anomaly_put(s, &e, 0) == 0);

    CHECK_STR(anomaly_threads(s, NULL),
              want("%" PRIu64 ":pool-1 %" PRIu64 ":main %" PRIu64 ":main", a.id, m.id, e.id));
    struct store_anomaly_filter f = {.kind = STORE_ANOMALY_OOM_SUSPECTED, .thread = "pool-1"};
    CHECK_STR(anomaly_threads(s, &f), want("%" PRIu64 ":pool-1", a.id));
    f.thread = "main";
    CHECK_STR(anomaly_threads(s, &f), want("%" PRIu64 ":main", m.id));
    f = (struct store_anomaly_filter){.thread = ""};
    CHECK_STR(anomaly_threads(s, &f), want("%" PRIu64 ":main %" PRIu64 ":main", m.id, e.id));
    f = (struct store_anomaly_filter){.id = a.id, .thread = "main"};
    CHECK_STR(anomaly_threads(s, &f), "");
    f.thread = "pool-2";
    CHECK_STR(anomaly_threads(s, &f), "");

    /* Each pinned its own isolate's heap window. */
    struct store_filter wf = {.pinned = 1u << STORE_ANOMALY_OOM_SUSPECTED, .thread = "pool-1"};
    CHECK_STR(threads_of(s, &wf), want("%" PRIu64 ":pool-1", wpool));

    /* An update keeps the thread (labels are the existing anomaly's). */
    a.end_ns = T0 + 9 * SEC;
    a.flags = 0;
    a.thread = "something-else";
    REQUIRE(store_anomaly_put(s, &a, 0) == 0);
    f = (struct store_anomaly_filter){.id = a.id};
    CHECK_STR(anomaly_threads(s, &f), want("%" PRIu64 ":pool-1", a.id));

    /* Refused like a window's. */
    char longest[STORE_THREAD_MAX + 2];
    memset(longest, 'y', sizeof(longest));
    longest[STORE_THREAD_MAX + 1] = '\0';
    struct store_anomaly bad = m;
    bad.id = 0;
    bad.start_ns = T0 + 30 * SEC;
    bad.thread = longest;
    CHECK_EQ_INT(store_anomaly_put(s, &bad, 0), -EINVAL);
    bad.thread = "nl\n";
    CHECK_EQ_INT(store_anomaly_put(s, &bad, 0), -EINVAL);
    CHECK(bad.id == 0);
    longest[STORE_THREAD_MAX] = '\0';
    bad.thread = longest;
    CHECK_EQ_INT(store_anomaly_put(s, &bad, 0), 0);
    f = (struct store_anomaly_filter){.id = bad.id};
    CHECK_STR(anomaly_threads(s, &f), want("%" PRIu64 ":%s", bad.id, longest));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

static struct store_stat stat_of(struct store *s)
{
    struct store_stat st;
    memset(&st, 0, sizeof(st));
    CHECK_EQ_INT(store_stat(s, &st), 0);
    return st;
}

/* The sum of the listed windows' stored_size. */
static uint64_t listed_bytes(struct store *s)
{
    int rc;
    struct seen *l = list(s, NULL, &rc);
    uint64_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        n += l->w[i].stored;
    return n;
}

/* A window is charged its thread's bytes exactly, and the budget holds
 * with threads at their longest. */
TEST(budget_long_threads)
{
    char longest[STORE_THREAD_MAX + 1];
    memset(longest, 't', STORE_THREAD_MAX);
    longest[STORE_THREAD_MAX] = '\0';
    for (int outbox = 0; outbox <= 1; outbox++) {
        struct store *s = outbox ? open_outbox(tmp_store_path(), 0) : open_rw(tmp_store_path(), 0);
        REQUIRE(s != NULL);
        /* Same key length, same payload: only the thread differs. */
        struct test_rec t[3];
        struct store_record r[3]; /* one batch */
        const char *th[3] = {NULL, "worker-77", longest};
        for (int i = 0; i < 3; i++) {
            rec_make(&t[i], "w", "v", T0 + (uint64_t)i * SEC, 1, STORE_TYPE_CPU, 3000, 17);
            t[i].r.w.thread = th[i];
            r[i] = t[i].r;
        }
        REQUIRE(store_put(s, r, 3, NULL) == 0);
        for (int i = 0; i < 3; i++)
            t[i].r = r[i];
        CHECK_EQ_INT(t[1].r.w.stored_size - t[0].r.w.stored_size, strlen("worker-77") - 4);
        CHECK_EQ_INT(t[2].r.w.stored_size - t[0].r.w.stored_size, STORE_THREAD_MAX - 4);
        /* ... as the store reads it back, and the counter holds the sum. */
        int rc;
        struct seen *l = list(s, NULL, &rc);
        REQUIRE(rc == 0 && l->n == 3);
        for (int i = 0; i < 3; i++)
            CHECK_EQ_INT(l->w[i].stored, t[i].r.w.stored_size);
        CHECK_EQ_INT(stat_of(s).stored_bytes,
                     t[0].r.w.stored_size + t[1].r.w.stored_size + t[2].r.w.stored_size);
        for (int i = 0; i < 3; i++)
            rec_free(&t[i]);
        CHECK_EQ_INT(check_clean(s), 0);
        store_close(s);
    }

    /* A small budget filled with longest-thread windows (and "main" ones
     * between them): evictions keep the counter exact and under it. */
    const uint64_t budget = 48 * 1024;
    struct store *s = open_outbox(tmp_store_path(), budget);
    REQUIRE(s != NULL);
    uint64_t evicted = 0;
    for (int i = 0; i < 120; i++) {
        struct test_rec t;
        rec_make(&t, "w", "v", T0 + (uint64_t)i * SEC, (uint32_t)i, STORE_TYPE_CPU, 2000,
                 (uint64_t)i);
        t.r.w.thread = i % 3 ? longest : NULL;
        struct store_put_stats ps;
        REQUIRE(store_put(s, &t.r, 1, &ps) == 0);
        evicted += ps.evicted;
        rec_free(&t);
        struct store_stat st = stat_of(s);
        CHECK(st.stored_bytes <= budget);
        CHECK_EQ_INT(st.stored_bytes, listed_bytes(s) + st.dict_bytes);
    }
    CHECK(evicted > 0);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/*
 * Make the store at path what a schema 4 build would have left: every
 * record in version 2 (the window with id v1_id, if any, in version 1, as
 * one stored before schema 2), every anomaly in version 1, stored_bytes
 * down by what the records lost, schema 4 in meta.
 */
static void make_schema4(const char *path, uint64_t v1_id)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi windows, anomalies, meta;
    MDB_cursor *c;
    MDB_val k, v;
    /* The new values are collected first and put after the walk: a put
     * of another size under a cursor would move it. */
    struct {
        MDB_dbi db;
        uint8_t key[STORE_TIME_KEY_MAX];
        size_t klen;
        uint8_t *val;
        size_t vlen;
    } out[16];
    size_t n = 0;
    REQUIRE(mdb_env_create(&env) == 0);
    mdb_env_set_maxdbs(env, 16);
    REQUIRE(mdb_env_open(env, path, 0, 0640) == 0);
    REQUIRE(mdb_txn_begin(env, NULL, 0, &txn) == 0);
    REQUIRE(mdb_dbi_open(txn, "windows", 0, &windows) == 0);
    REQUIRE(mdb_dbi_open(txn, "anomalies", 0, &anomalies) == 0);
    REQUIRE(mdb_dbi_open(txn, "meta", 0, &meta) == 0);
    uint64_t lost = 0;
    REQUIRE(mdb_cursor_open(txn, windows, &c) == 0);
    for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && n < 16;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT), n++) {
        int ver = store_be64_get((const uint8_t *)v.mv_data + STORE_REC_SEQ_OFF) == v1_id ? 1 : 2;
        out[n].db = windows;
        out[n].val = rec_downgrade(v.mv_data, v.mv_size, ver, &out[n].vlen);
        REQUIRE(out[n].val != NULL && k.mv_size <= sizeof(out[n].key));
        memcpy(out[n].key, k.mv_data, k.mv_size);
        out[n].klen = k.mv_size;
        lost += v.mv_size - out[n].vlen;
    }
    mdb_cursor_close(c);
    REQUIRE(mdb_cursor_open(txn, anomalies, &c) == 0);
    for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && n < 16;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT), n++) {
        /* version 1: the 40 fixed bytes, then the windows */
        const uint8_t *p = v.mv_data;
        REQUIRE(v.mv_size > 41 && p[1] == 2 && k.mv_size <= sizeof(out[n].key));
        size_t tl = p[40];
        out[n].db = anomalies;
        out[n].vlen = v.mv_size - 1 - tl;
        out[n].val = isoprof_malloc(out[n].vlen);
        REQUIRE(out[n].val != NULL);
        memcpy(out[n].val, p, 40);
        memcpy(out[n].val + 40, p + 41 + tl, v.mv_size - 41 - tl);
        out[n].val[1] = 1;
        memcpy(out[n].key, k.mv_data, k.mv_size);
        out[n].klen = k.mv_size;
    }
    mdb_cursor_close(c);
    for (size_t i = 0; i < n; i++) {
        MDB_val ok = {out[i].klen, out[i].key}, ov = {out[i].vlen, out[i].val};
        REQUIRE(mdb_put(txn, out[i].db, &ok, &ov, 0) == 0);
        isoprof_free(out[i].val);
    }
    MDB_val sk = {12, "stored_bytes"}, sv;
    REQUIRE(mdb_get(txn, meta, &sk, &sv) == 0 && sv.mv_size == 8);
    uint8_t nb[8];
    store_be64_put(nb, store_be64_get(sv.mv_data) - lost);
    MDB_val nv = {8, nb};
    REQUIRE(mdb_put(txn, meta, &sk, &nv, 0) == 0);
    MDB_val fk = {6, "format"}, fv = {12, "ISOPROF\0\0\0\0\x04"};
    REQUIRE(mdb_put(txn, meta, &fk, &fv, 0) == 0);
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
}

/* The version byte of window id's record and of anomaly id's value, read
 * with the raw API (the store never rewrites a window's record). */
static int rec_version(struct store *s, uint64_t id)
{
    MDB_txn *txn;
    MDB_val kv, dv;
    struct store_key key;
    int ver = -1;
    if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0)
        return -1;
    if (store_window_by_seq(s, txn, id, &kv, &key, &dv) == 0 && dv.mv_size > 1)
        ver = ((const uint8_t *)dv.mv_data)[1];
    mdb_txn_abort(txn);
    return ver;
}

TEST(schema4_store)
{
    const char *path = tmp_store_path();
    struct store *s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    uint64_t ids[4];
    for (int i = 0; i < 4; i++)
        ids[i] = put_th(s, "w", "v", T0 + (uint64_t)i * SEC, (uint32_t)i + 1,
                        i == 3 ? STORE_TYPE_HEAP : STORE_TYPE_CPU, NULL, 0, NULL);
    REQUIRE(ids[0] && ids[1] && ids[2] && ids[3]);
    struct store_anomaly a = {.kind = STORE_ANOMALY_MEMORY_NEAR_LIMIT,
                              .worker = "w",
                              .version = "v",
                              .isolate = 4,
                              .start_ns = T0 + 3 * SEC,
                              .end_ns = T0 + 3 * SEC,
                              .value = 100,
                              .threshold = 90,
                              .flags = STORE_ANOMALY_OPEN};
    REQUIRE(store_anomaly_put(s, &a, 1u << STORE_TYPE_HEAP) == 0);
    uint64_t before = stat_of(s).stored_bytes;
    store_close(s);
    make_schema4(path, ids[0]);

    /* A reader takes schema 4 as it is: every window and anomaly reads as
     * the main thread's, the sizes are those of the old records. */
    s = open_ro(path);
    REQUIRE(s != NULL);
    struct store_stat st = stat_of(s);
    CHECK_EQ_INT(st.schema_version, 4);
    CHECK_EQ_INT(st.windows, 4);
    /* pid and "main" x 4, v1's 40 fixed bytes */
    CHECK_EQ_INT(st.stored_bytes, before - 4 * (4 + 4) - 40);
    CHECK_EQ_INT(rec_version(s, ids[0]), 1);
    CHECK_EQ_INT(rec_version(s, ids[1]), 2);
    CHECK_STR(threads_of(s, NULL),
              want("%" PRIu64 ":main %" PRIu64 ":main %" PRIu64 ":main %" PRIu64 ":main", ids[0],
                   ids[1], ids[2], ids[3]));
    struct store_filter flt = {.thread = "main"};
    CHECK_EQ_INT(count_of(s, &flt), 4);
    flt.thread = "pool-1";
    CHECK_EQ_INT(count_of(s, &flt), 0);
    CHECK_STR(peek_threads(s),
              want("%" PRIu64 ":main %" PRIu64 ":main %" PRIu64 ":main %" PRIu64 ":main", ids[3],
                   ids[0], ids[1], ids[2])); /* evidence first */
    CHECK_STR(anomaly_threads(s, NULL), want("%" PRIu64 ":main", a.id));
    struct store_anomaly_filter af = {.thread = "main"};
    CHECK_STR(anomaly_threads(s, &af), want_buf);
    for (int i = 0; i < 4; i++) {
        void *out = NULL;
        size_t len = 0;
        CHECK_EQ_INT(store_load(s, ids[i], &out, &len), 0);
        CHECK_EQ_INT(len, 3000);
        isoprof_free(out);
    }
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* A writer upgrades it in place: schema 6, old records untouched (and
     * still "main"), new ones with their thread; the counter stays exact. */
    s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(stat_of(s).schema_version, STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(rec_version(s, ids[0]), 1);
    CHECK_EQ_INT(rec_version(s, ids[2]), 2);
    CHECK_EQ_INT(check_clean(s), 0);
    uint64_t n1 = put_th(s, "w", "v", T0 + 10 * SEC, 9, STORE_TYPE_CPU, "pool-1", a.id, NULL);
    REQUIRE(n1 != 0);
    CHECK_EQ_INT(rec_version(s, n1), STORE_REC_VERSION);
    flt = (struct store_filter){.worker = "w", .thread = "main"};
    CHECK_EQ_INT(count_of(s, &flt), 4);
    flt.thread = "pool-1";
    CHECK_STR(threads_of(s, &flt), want("%" PRIu64 ":pool-1", n1));
    /* The old anomaly (version 1) took a pin: rewritten, still "main". */
    af = (struct store_anomaly_filter){.id = a.id};
    CHECK_STR(anomaly_threads(s, &af), want("%" PRIu64 ":main", a.id));
    a.end_ns = T0 + 11 * SEC;
    a.flags = 0;
    REQUIRE(store_anomaly_put(s, &a, 0) == 0);
    CHECK_STR(anomaly_threads(s, &af), want("%" PRIu64 ":main", a.id));
    struct store_anomaly b = a;
    b.id = 0;
    b.isolate = 9;
    b.thread = "pool-1";
    REQUIRE(store_anomaly_put(s, &b, 0) == 0);
    af = (struct store_anomaly_filter){.thread = "pool-1"};
    CHECK_STR(anomaly_threads(s, &af), want("%" PRIu64 ":pool-1", b.id));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* Now schema 6 for readers too. */
    s = open_ro(path);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(stat_of(s).schema_version, STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(count_of(s, NULL), 5);
    flt = (struct store_filter){.thread = "pool-1"};
    CHECK_STR(threads_of(s, &flt), want("%" PRIu64 ":pool-1", n1));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/* Schemas 1 and 2 are still refused read-only, and a store of a later
 * schema than this build's by writer and reader alike. */
TEST(other_schemas)
{
    const char *path = tmp_store_path();
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    REQUIRE(put_th(s, "w", "v", T0, 1, STORE_TYPE_CPU, "pool-1", 0, NULL) != 0);
    store_close(s);
    static const char fmt7[] = "ISOPROF\0\0\0\0\x07";
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta;
    REQUIRE(mdb_env_create(&env) == 0);
    mdb_env_set_maxdbs(env, 16);
    REQUIRE(mdb_env_open(env, path, 0, 0640) == 0);
    REQUIRE(mdb_txn_begin(env, NULL, 0, &txn) == 0);
    REQUIRE(mdb_dbi_open(txn, "meta", 0, &meta) == 0);
    MDB_val fk = {6, "format"}, fv = {12, (void *)fmt7};
    REQUIRE(mdb_put(txn, meta, &fk, &fv, 0) == 0);
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    struct store_options ro = {.readonly = 1};
    char *why = NULL;
    s = NULL;
    CHECK_EQ_INT(store_open(path, &ro, &s, &why), ISOPROF_ESCHEMA);
    CHECK(why != NULL && strstr(why, "schema version 7, this build reads 6") != NULL);
    isoprof_free(why);
    CHECK_EQ_INT(store_open(path, NULL, &s, NULL), ISOPROF_ESCHEMA);
    CHECK(s == NULL);
}

enum thread_damage { TH_CONTROL, TH_LEN_ZERO, TH_LEN_LONG, TH_LEN_PAST, TH_NUL, ANOM_CONTROL };

/* Damage the thread of window id (or of anomaly aid) behind the store's
 * back. */
static int damage_thread(struct store *s, uint64_t id, uint64_t aid, enum thread_damage d)
{
    MDB_txn *txn;
    if (mdb_txn_begin(s->env, NULL, 0, &txn) != 0)
        return -1;
    MDB_val kv, dv;
    struct store_key key;
    int rc = -1;
    if (d == ANOM_CONTROL) {
        uint8_t ik[8];
        store_be64_put(ik, aid);
        MDB_val i = {8, ik}, ak, av;
        if (mdb_get(txn, s->anomaly_ids, &i, &ak) == 0 &&
            mdb_get(txn, s->anomalies, &ak, &av) == 0 && av.mv_size > 42) {
            uint8_t copy[512];
            uint8_t akey[512];
            memcpy(akey, ak.mv_data, ak.mv_size);
            memcpy(copy, av.mv_data, av.mv_size);
            copy[42] = 0x07;
            MDB_val k2 = {ak.mv_size, akey}, v2 = {av.mv_size, copy};
            rc = mdb_put(txn, s->anomalies, &k2, &v2, 0);
        }
    } else if (store_window_by_seq(s, txn, id, &kv, &key, &dv) == 0) {
        uint8_t *copy = isoprof_malloc(dv.mv_size);
        uint8_t wk[STORE_KEY_MAX];
        memcpy(copy, dv.mv_data, dv.mv_size);
        memcpy(wk, kv.mv_data, kv.mv_size);
        size_t at = STORE_REC_FIXED + copy[3];
        switch (d) {
        case TH_CONTROL:
            copy[at + 2] = 0x1b;
            break;
        case TH_LEN_ZERO:
            copy[STORE_REC_THREAD_OFF] = 0;
            break;
        case TH_LEN_LONG:
            copy[STORE_REC_THREAD_OFF] = STORE_THREAD_MAX + 1;
            break;
        case TH_LEN_PAST: /* the record is cut inside the thread */
            dv.mv_size = at + 3;
            break;
        case TH_NUL:
            copy[at + 1] = 0;
            break;
        default:
            break;
        }
        MDB_val k2 = {kv.mv_size, wk}, v2 = {dv.mv_size, copy};
        rc = mdb_put(txn, s->windows, &k2, &v2, 0);
        isoprof_free(copy);
    }
    if (rc != 0) {
        mdb_txn_abort(txn);
        return -1;
    }
    return mdb_txn_commit(txn) == 0 ? 0 : -1;
}

static void expect_thread_damage(enum thread_damage d, const char *needle)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t ids[4];
    for (int i = 0; i < 4; i++)
        ids[i] = put_th(s, "w", "v", T0 + (uint64_t)i * SEC, (uint32_t)i, STORE_TYPE_CPU,
                        "pool-worker", 0, NULL);
    struct store_anomaly a = {.kind = STORE_ANOMALY_OOM_SUSPECTED,
                              .worker = "w",
                              .version = "v",
                              .thread = "pool-worker",
                              .isolate = 2,
                              .start_ns = T0 + 5 * SEC,
                              .end_ns = T0 + 5 * SEC};
    REQUIRE(store_anomaly_put(s, &a, 0) == 0);
    REQUIRE(check_clean(s) == 0);
    REQUIRE(damage_thread(s, ids[2], a.id, d) == 0);
    char *why = NULL;
    CHECK_EQ_INT(store_check(s, &why), ISOPROF_ECORRUPT);
    if (why == NULL || strstr(why, needle) == NULL) {
        fprintf(stderr, "damage %d: wanted '%s' in:\n%s", (int)d, needle, why ? why : "(null)\n");
        CHECK(0);
    }
    isoprof_free(why);
    if (d == ANOM_CONTROL) {
        /* The anomaly is skipped by queries, the others are not. */
        CHECK_STR(anomaly_threads(s, NULL), "");
        CHECK_EQ_INT(count_of(s, NULL), 4);
    } else {
        /* The window is skipped by listings and cannot be loaded; the
         * others still can. */
        CHECK_EQ_INT(count_of(s, NULL), 3);
        struct store_filter f = {.thread = "pool-worker"};
        CHECK_EQ_INT(count_of(s, &f), 3);
        void *out = NULL;
        size_t len;
        CHECK_EQ_INT(store_load(s, ids[2], &out, &len), ISOPROF_ECORRUPT);
        CHECK_EQ_INT(store_load(s, ids[3], &out, &len), 0);
        isoprof_free(out);
    }
    store_close(s);
}

TEST(check_finds_damaged_thread)
{
    expect_thread_damage(TH_CONTROL, "thread label empty or not printable ASCII");
    expect_thread_damage(TH_NUL, "thread label empty or not printable ASCII");
    expect_thread_damage(TH_LEN_ZERO, "thread label empty or not printable ASCII");
    expect_thread_damage(TH_LEN_LONG, "thread or container label longer than the record");
    expect_thread_damage(TH_LEN_PAST, "thread or container label longer than the record");
    expect_thread_damage(ANOM_CONTROL, "names no decodable anomaly (thread label");
}

int main(void)
{
    RUN(round_trip_and_filters);
    RUN(anomaly_thread);
    RUN(budget_long_threads);
    RUN(schema4_store);
    RUN(other_schemas);
    RUN(check_finds_damaged_thread);
    TEST_EXIT();
}

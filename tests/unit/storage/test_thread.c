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

TEST(round_trip_and_filters)
{
    const char *path = tmp_store_path();
    struct store *s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    uint64_t a = put_labelled(s, "w", "v", T0, 1, STORE_TYPE_CPU, 0, NULL, "main", 0, NULL);
    uint64_t b =
        put_labelled(s, "w", "v", T0 + 1 * SEC, 2, STORE_TYPE_CPU, 0, NULL, "pool-1", 0, NULL);
    uint64_t c =
        put_labelled(s, "w", "v", T0 + 2 * SEC, 3, STORE_TYPE_HEAP, 0, NULL, "worker-3", 0, NULL);
    uint64_t d =
        put_labelled(s, "w", "v2", T0 + 3 * SEC, 2, STORE_TYPE_CPU, 0, NULL, "pool-1", 0, NULL);
    uint64_t e =
        put_labelled(s, "other", "v", T0 + 4 * SEC, 1, STORE_TYPE_CPU, 0, NULL, NULL, 0, NULL);
    uint64_t f = put_labelled(s, "w", "v", T0 + 5 * SEC, 4, STORE_TYPE_CPU, 0, NULL, "", 0, NULL);
    REQUIRE(a && b && c && d && e && f);

    /* What was put comes back; NULL and "" were stored as "main". */
    CHECK_STR(words_of(s, NULL, WORDS_THREAD),
              want("%" PRIu64 ":main %" PRIu64 ":pool-1 %" PRIu64 ":worker-3 %" PRIu64
                   ":pool-1 %" PRIu64 ":main %" PRIu64 ":main",
                   a, b, c, d, e, f));
    CHECK_STR(peek_words(s, WORDS_THREAD), want_buf); /* the outbox is in store order here */

    /* The filter on each access path: time index (no worker), key range
     * (worker; worker and version), one id, pinned windows. */
    struct store_filter flt = {.thread = "pool-1"};
    CHECK_STR(words_of(s, &flt, WORDS_THREAD), want("%" PRIu64 ":pool-1 %" PRIu64 ":pool-1", b, d));
    flt.worker = "w";
    CHECK_STR(words_of(s, &flt, WORDS_THREAD), want("%" PRIu64 ":pool-1 %" PRIu64 ":pool-1", b, d));
    flt.version = "v";
    CHECK_STR(words_of(s, &flt, WORDS_THREAD), want("%" PRIu64 ":pool-1", b));
    flt.since_ns = T0 + 2 * SEC;
    CHECK_STR(words_of(s, &flt, WORDS_THREAD), "");
    flt = (struct store_filter){.thread = "main"};
    CHECK_STR(words_of(s, &flt, WORDS_THREAD),
              want("%" PRIu64 ":main %" PRIu64 ":main %" PRIu64 ":main", a, e, f));
    flt.thread = ""; /* "" is "main", as on put */
    CHECK_STR(words_of(s, &flt, WORDS_THREAD), want_buf);
    flt.thread = "pool"; /* a prefix is not a match */
    CHECK_STR(words_of(s, &flt, WORDS_THREAD), "");
    flt.thread = "Main";
    CHECK_STR(words_of(s, &flt, WORDS_THREAD), "");
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
    uint64_t g =
        put_labelled(s, "w", "v", T0 + 6 * SEC, 5, STORE_TYPE_CPU, 0, NULL, "pool-1", an.id, NULL);
    uint64_t h =
        put_labelled(s, "w", "v", T0 + 7 * SEC, 6, STORE_TYPE_CPU, 0, NULL, "main", an.id, NULL);
    REQUIRE(g && h);
    flt = (struct store_filter){.pinned = STORE_PINNED_ANY, .thread = "pool-1"};
    CHECK_STR(words_of(s, &flt, WORDS_THREAD), want("%" PRIu64 ":pool-1", g));
    flt.thread = "main";
    CHECK_STR(words_of(s, &flt, WORDS_THREAD), want("%" PRIu64 ":main", h));
    flt.thread = NULL;
    CHECK_EQ_INT(count_of(s, &flt), 2);

    /* Refused: too long, not printable ASCII; nothing is stored. */
    char longest[STORE_THREAD_MAX + 2];
    memset(longest, 'x', sizeof(longest));
    longest[STORE_THREAD_MAX + 1] = '\0';
    const char *const bad[] = {longest, "tab\there", "del\x7f", "caf\xc3\xa9", "\n"};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(bad); i++) {
        int rc = 0;
        CHECK(put_labelled(s, "w", "v", T0 + 20 * SEC, 9, STORE_TYPE_CPU, 0, NULL, bad[i], 0,
                           &rc) == 0);
        CHECK_EQ_INT(rc, -EINVAL);
    }
    CHECK_EQ_INT(count_of(s, NULL), 8);
    longest[STORE_THREAD_MAX] = '\0'; /* the longest accepted */
    uint64_t l =
        put_labelled(s, "w", "v", T0 + 8 * SEC, 7, STORE_TYPE_CPU, 0, NULL, longest, 0, NULL);
    REQUIRE(l != 0);
    flt = (struct store_filter){.id = l};
    CHECK_STR(words_of(s, &flt, WORDS_THREAD), want("%" PRIu64 ":%s", l, longest));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* It is on disk: a reader sees the same. */
    s = open_ro(path);
    REQUIRE(s != NULL);
    flt = (struct store_filter){.thread = "worker-3"};
    CHECK_STR(words_of(s, &flt, WORDS_THREAD), want("%" PRIu64 ":worker-3", c));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/* Anomalies carry the thread too, so that an oom_suspected of a worker
 * thread is told from the main thread's. */
TEST(anomaly_thread)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t wmain = put_labelled(s, "w", "v", T0, 1, STORE_TYPE_HEAP, 0, NULL, NULL, 0, NULL);
    uint64_t wpool = put_labelled(s, "w", "v", T0, 2, STORE_TYPE_HEAP, 0, NULL, "pool-1", 0, NULL);
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
    CHECK_STR(words_of(s, &wf, WORDS_THREAD), want("%" PRIu64 ":pool-1", wpool));

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
        CHECK_EQ_INT(stat_checked(s).stored_bytes,
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
        struct store_stat st = stat_checked(s);
        CHECK(st.stored_bytes <= budget);
        CHECK_EQ_INT(st.stored_bytes, listed_bytes(s) + st.dict_bytes);
    }
    CHECK(evicted > 0);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

TEST(schema4_store)
{
    const char *path = tmp_store_path();
    uint64_t ids[4], before;
    struct store_anomaly a;
    REQUIRE(make_old_store(path, 4, 0, NULL, NULL, ids, &a, &before) == 0);

    /* A reader takes schema 4 as it is: every window and anomaly reads as
     * the main thread's, the sizes are those of the old records. */
    struct store *s = open_ro(path);
    REQUIRE(s != NULL);
    struct store_stat st = stat_checked(s);
    CHECK_EQ_INT(st.schema_version, 4);
    CHECK_EQ_INT(st.windows, 4);
    /* the fixed bytes of versions 4 and 5 (pid, frame figures, labels'
     * length) and "main" x 4, v1's 40 fixed bytes */
    CHECK_EQ_INT(st.stored_bytes, before - 4 * (STORE_REC_FIXED - STORE_REC_FIXED_V2 + 4) - 40);
    CHECK_EQ_INT(rec_version(s, ids[0]), 1);
    CHECK_EQ_INT(rec_version(s, ids[1]), 2);
    CHECK_STR(words_of(s, NULL, WORDS_THREAD),
              want("%" PRIu64 ":main %" PRIu64 ":main %" PRIu64 ":main %" PRIu64 ":main", ids[0],
                   ids[1], ids[2], ids[3]));
    struct store_filter flt = {.thread = "main"};
    CHECK_EQ_INT(count_of(s, &flt), 4);
    flt.thread = "pool-1";
    CHECK_EQ_INT(count_of(s, &flt), 0);
    CHECK_STR(peek_words(s, WORDS_THREAD),
              want("%" PRIu64 ":main %" PRIu64 ":main %" PRIu64 ":main %" PRIu64 ":main", ids[3],
                   ids[0], ids[1], ids[2])); /* evidence first */
    CHECK_STR(anomaly_threads(s, NULL), want("%" PRIu64 ":main", a.id));
    struct store_anomaly_filter af = {.thread = "main"};
    CHECK_STR(anomaly_threads(s, &af), want_buf);
    check_loads(s, ids, 4, 3000);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* A writer upgrades it in place: schema 8, old records untouched (and
     * still "main"), new ones with their thread; the counter stays exact. */
    s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(stat_checked(s).schema_version, STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(rec_version(s, ids[0]), 1);
    CHECK_EQ_INT(rec_version(s, ids[2]), 2);
    CHECK_EQ_INT(check_clean(s), 0);
    uint64_t n1 =
        put_labelled(s, "w", "v", T0 + 10 * SEC, 9, STORE_TYPE_CPU, 0, NULL, "pool-1", a.id, NULL);
    REQUIRE(n1 != 0);
    CHECK_EQ_INT(rec_version(s, n1), STORE_REC_VERSION);
    flt = (struct store_filter){.worker = "w", .thread = "main"};
    CHECK_EQ_INT(count_of(s, &flt), 4);
    flt.thread = "pool-1";
    CHECK_STR(words_of(s, &flt, WORDS_THREAD), want("%" PRIu64 ":pool-1", n1));
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

    /* Now schema 8 for readers too. */
    s = open_ro(path);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(stat_checked(s).schema_version, STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(count_of(s, NULL), 5);
    flt = (struct store_filter){.thread = "pool-1"};
    CHECK_STR(words_of(s, &flt, WORDS_THREAD), want("%" PRIu64 ":pool-1", n1));
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
    REQUIRE(put_labelled(s, "w", "v", T0, 1, STORE_TYPE_CPU, 0, NULL, "pool-1", 0, NULL) != 0);
    store_close(s);
    static const char fmt9[] = "ISOPROF\0\0\0\0\x0d";
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta;
    REQUIRE(mdb_env_create(&env) == 0);
    mdb_env_set_maxdbs(env, 16);
    REQUIRE(mdb_env_open(env, path, 0, 0640) == 0);
    REQUIRE(mdb_txn_begin(env, NULL, 0, &txn) == 0);
    REQUIRE(mdb_dbi_open(txn, "meta", 0, &meta) == 0);
    MDB_val fk = {6, "format"}, fv = {12, (void *)fmt9};
    REQUIRE(mdb_put(txn, meta, &fk, &fv, 0) == 0);
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    struct store_options ro = {.readonly = 1};
    char *why = NULL;
    s = NULL;
    CHECK_EQ_INT(store_open(path, &ro, &s, &why), ISOPROF_ESCHEMA);
    CHECK(why != NULL && strstr(why, "schema version 13, this build reads 12") != NULL);
    isoprof_free(why);
    CHECK_EQ_INT(store_open(path, NULL, &s, NULL), ISOPROF_ESCHEMA);
    CHECK(s == NULL);
}

enum thread_damage { TH_CONTROL, TH_LEN_ZERO, TH_LEN_LONG, TH_LEN_PAST, TH_NUL, ANOM_CONTROL };

/* Damage d of the thread of a window's record (a rec_edit). */
static void thread_edit(uint8_t *rec, size_t *len, int d)
{
    size_t at = STORE_REC_FIXED + rec[3];
    switch ((enum thread_damage)d) {
    case TH_CONTROL:
        rec[at + 2] = 0x1b;
        break;
    case TH_LEN_ZERO:
        rec[STORE_REC_THREAD_OFF] = 0;
        break;
    case TH_LEN_LONG:
        rec[STORE_REC_THREAD_OFF] = STORE_THREAD_MAX + 1;
        break;
    case TH_LEN_PAST: /* the record is cut inside the thread */
        *len = at + 3;
        break;
    case TH_NUL:
        rec[at + 1] = 0;
        break;
    default:
        break;
    }
}

/* Damage the thread of window id (or of anomaly aid) behind the store's
 * back. */
static int damage_thread(struct store *s, uint64_t id, uint64_t aid, enum thread_damage d)
{
    if (d != ANOM_CONTROL)
        return rec_rewrite(s, id, thread_edit, (int)d);
    MDB_txn *txn;
    if (mdb_txn_begin(s->env, NULL, 0, &txn) != 0)
        return -1;
    int rc = -1;
    uint8_t ik[8];
    store_be64_put(ik, aid);
    MDB_val i = {8, ik}, ak, av;
    if (mdb_get(txn, s->anomaly_ids, &i, &ak) == 0 && mdb_get(txn, s->anomalies, &ak, &av) == 0 &&
        av.mv_size > 51) {
        uint8_t copy[512];
        uint8_t akey[512];
        memcpy(akey, ak.mv_data, ak.mv_size);
        memcpy(copy, av.mv_data, av.mv_size);
        copy[51] = 0x07; /* in the thread (versions 3 and 4: at 50) */
        MDB_val k2 = {ak.mv_size, akey}, v2 = {av.mv_size, copy};
        rc = mdb_put(txn, s->anomalies, &k2, &v2, 0);
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
        ids[i] = put_labelled(s, "w", "v", T0 + (uint64_t)i * SEC, (uint32_t)i, STORE_TYPE_CPU, 0,
                              NULL, "pool-worker", 0, NULL);
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
    check_corrupt(s, (int)d, needle);
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

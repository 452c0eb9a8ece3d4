/*
 * test_evict.c - retention: the budget holds after every put, the oldest
 * windows go first, evictions are counted, store_check stays clean; a
 * record larger than the budget is refused; a full map is an error that
 * leaves the store consistent.
 */
#include "common.h"

static void fill_random(uint8_t *b, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b[i] = (uint8_t)(x >> 24);
    }
}

TEST(budget_oldest_first)
{
    const uint64_t budget = 256 * 1024;
    const char *path = tmp_store_path();
    struct store *s = open_rw(path, budget);
    REQUIRE(s != NULL);
    uint64_t evicted = 0, evicted_bytes = 0, stored_sum = 0;
    enum { N = 200 };
    static uint64_t stored[N];
    /* 200 windows of 8 KiB incompressible pprof, in start order, batches of 4. */
    for (int i = 0; i < N; i += 4) {
        struct store_record r[4];
        uint8_t *bufs[4];
        for (int j = 0; j < 4; j++) {
            bufs[j] = isoprof_malloc(8192);
            fill_random(bufs[j], 8192, (uint64_t)(i + j) * 7919 + 1);
            r[j] = (struct store_record){.w = {.worker = "w",
                                               .version = "v",
                                               .runtime = "node",
                                               .type = 1,
                                               .start_ns = T0 + (uint64_t)(i + j) * SEC,
                                               .end_ns = T0 + (uint64_t)(i + j) * SEC + 1},
                                         .pprof = bufs[j],
                                         .len = 8192};
        }
        struct store_put_stats ps;
        CHECK_EQ_INT(store_put(s, r, 4, &ps), 0);
        for (int j = 0; j < 4; j++) {
            stored[i + j] = r[j].w.stored_size;
            stored_sum += r[j].w.stored_size;
            isoprof_free(bufs[j]);
        }
        evicted += ps.evicted;
        evicted_bytes += ps.evicted_bytes;
        struct store_stat st;
        REQUIRE(store_stat(s, &st) == 0);
        CHECK(st.stored_bytes <= budget);
        CHECK(st.evicted_total == evicted);
        /* The windows' share of the counter; their dictionary (this
         * series earns one after 8 windows) is charged apart. */
        CHECK(st.stored_bytes - st.dict_bytes + evicted_bytes == stored_sum);
    }
    CHECK(evicted > 100);
    int rc;
    struct seen *l = list(s, NULL, &rc);
    CHECK_EQ_INT(l->n + evicted, N);
    /* What is left is exactly the newest windows. */
    for (size_t i = 0; i < l->n; i++)
        CHECK(l->w[i].start == T0 + (uint64_t)(N - l->n + i) * SEC);
    /* And it is as much as fits: one more old window would exceed the budget. */
    struct store_stat st;
    REQUIRE(store_stat(s, &st) == 0);
    CHECK(st.stored_bytes + stored[N - l->n - 1] > budget);
    CHECK(st.windows == l->n && st.oldest_ns == l->w[0].start &&
          st.newest_ns == T0 + (N - 1) * SEC);
    CHECK(st.budget == budget);
    CHECK(st.map_size >= 2 * budget);
    CHECK_EQ_INT(check_clean(s), 0);

    /* A late window older than everything is itself the oldest: it goes at once. */
    uint64_t id;
    struct test_rec t;
    rec_make(&t, "w", "v", T0 - SEC, 9, 1, 8192, 5);
    fill_random(t.payload, 8192, 99);
    struct store_put_stats ps;
    CHECK_EQ_INT(store_put(s, &t.r, 1, &ps), 0);
    id = t.r.w.id;
    CHECK(ps.evicted >= 1);
    void *out = NULL;
    size_t len;
    CHECK_EQ_INT(store_load(s, id, &out, &len), ISOPROF_ENOTFOUND);
    rec_free(&t);
    CHECK_EQ_INT(check_clean(s), 0);

    /* The counters are persistent. */
    uint64_t total = 0;
    REQUIRE(store_stat(s, &st) == 0);
    total = st.evicted_total;
    store_close(s);
    s = open_rw(path, budget);
    REQUIRE(s != NULL);
    REQUIRE(store_stat(s, &st) == 0);
    CHECK(st.evicted_total == total && st.stored_bytes <= budget);
    CHECK_EQ_INT(check_clean(s), 0);
    CHECK_EQ_INT(store_stat(NULL, &st), -EINVAL);
    store_close(s);
    store_close(NULL);
}

TEST(too_big)
{
    const uint64_t budget = 64 * 1024;
    struct store *s = open_rw(tmp_store_path(), budget);
    REQUIRE(s != NULL);
    REQUIRE(put_one(s, "w", "v", T0, 1, 1, 1000, NULL) == 0);
    struct test_rec t;
    rec_make(&t, "w", "v", T0 + SEC, 1, 1, 200000, 1);
    fill_random(t.payload, 200000, 3);
    struct store_put_stats ps = {7, 7};
    CHECK_EQ_INT(store_put(s, &t.r, 1, &ps), -E2BIG);
    CHECK(ps.evicted == 0 && t.r.w.id == 0);
    rec_free(&t);
    int rc;
    struct seen *l = list(s, NULL, &rc);
    CHECK_EQ_INT(l->n, 1);
    CHECK_EQ_INT(check_clean(s), 0);

    /* A batch larger than the budget whose records each fit: stored, then
     * trimmed from the oldest; the budget still holds. */
    struct test_rec b[12];
    struct store_record r[12];
    for (int i = 0; i < 12; i++) {
        rec_make(&b[i], "w", "v", T0 + (uint64_t)(10 + i) * SEC, 1, 1, 8192, (uint64_t)i);
        fill_random(b[i].payload, 8192, (uint64_t)i + 50);
        r[i] = b[i].r;
    }
    CHECK_EQ_INT(store_put(s, r, 12, &ps), 0);
    struct store_stat st;
    REQUIRE(store_stat(s, &st) == 0);
    CHECK(st.stored_bytes <= budget);
    CHECK(ps.evicted >= 2);
    l = list(s, NULL, &rc);
    CHECK(l->n >= 1 && l->w[l->n - 1].start == T0 + 21 * SEC);
    CHECK_EQ_INT(check_clean(s), 0);
    for (int i = 0; i < 12; i++)
        rec_free(&b[i]);
    store_close(s);
}

/* With a reader pinning an old snapshot, freed pages cannot be reused and
 * the map fills: store_put must return ISOPROF_EMAPFULL (after its evict
 * and retry) and leave a consistent store that works again once the
 * reader is gone. */
TEST(map_full)
{
    const uint64_t budget = 1024 * 1024;
    struct store *s = open_rw(tmp_store_path(), budget);
    REQUIRE(s != NULL);
    REQUIRE(put_one(s, "w", "v", T0, 1, 1, 1000, NULL) == 0);
    MDB_txn *pin;
    REQUIRE(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &pin) == 0);
    uint8_t *buf = isoprof_malloc(200000);
    REQUIRE(buf != NULL);
    int rc = 0, i;
    uint64_t committed = 0;
    for (i = 1; i < 400 && rc == 0; i++) {
        fill_random(buf, 200000, (uint64_t)i);
        struct store_record r = {.w = {.worker = "w",
                                       .version = "v",
                                       .runtime = "node",
                                       .type = 1,
                                       .start_ns = T0 + (uint64_t)i * SEC},
                                 .pprof = buf,
                                 .len = 200000};
        rc = store_put(s, &r, 1, NULL);
        committed += rc == 0;
    }
    CHECK_EQ_INT(rc, ISOPROF_EMAPFULL);
    CHECK(committed > 5);
    struct store_stat st;
    REQUIRE(store_stat(s, &st) == 0);
    CHECK(st.stored_bytes <= budget);
    CHECK_EQ_INT(check_clean(s), 0);
    mdb_txn_abort(pin);
    /* Without the pin the space is reusable again. */
    for (int j = 0; j < 20; j++) {
        fill_random(buf, 200000, (uint64_t)(1000 + j));
        struct store_record r = {.w = {.worker = "w",
                                       .version = "v",
                                       .runtime = "node",
                                       .type = 1,
                                       .start_ns = T0 + (uint64_t)(1000 + j) * SEC},
                                 .pprof = buf,
                                 .len = 200000};
        CHECK_EQ_INT(store_put(s, &r, 1, NULL), 0);
    }
    REQUIRE(store_stat(s, &st) == 0);
    CHECK(st.stored_bytes <= budget);
    CHECK_EQ_INT(check_clean(s), 0);
    isoprof_free(buf);
    store_close(s);
}

int main(void)
{
    RUN(budget_oldest_first);
    RUN(too_big);
    RUN(map_full);
    TEST_EXIT();
}

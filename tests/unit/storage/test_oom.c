/*
 * test_oom.c - allocation-failure walks (isoprof_alloc_fail_after) over
 * store_open (fresh, existing, read-only), store_put (including zstd's
 * first workspace allocation; with the outbox off and on), store_load,
 * store_windows and store_check.
 * Each failing call must return -ENOMEM and leave nothing behind: ASan's
 * leak check covers memory, and the store is checked to hold exactly what
 * it held before.
 */
#include "common.h"

#define WALK_MAX 10000

static int open_walk(const char *path, int readonly, uint64_t *steps)
{
    struct store_options o = {.readonly = readonly};
    for (long n = 0; n < WALK_MAX; n++) {
        struct store *s = NULL;
        char *why = NULL;
        isoprof_alloc_fail_after(n);
        int rc = store_open(path, &o, &s, &why);
        isoprof_alloc_fail_after(-1);
        if (rc == 0) {
            *steps = (uint64_t)n;
            CHECK(why == NULL);
            store_close(s);
            return 0;
        }
        CHECK_EQ_INT(rc, -ENOMEM);
        CHECK(s == NULL);
        isoprof_free(why);
        if (rc != -ENOMEM)
            return rc;
    }
    return -1;
}

TEST(open_fresh)
{
    const char *path = tmp_store_path();
    uint64_t steps = 0;
    CHECK_EQ_INT(open_walk(path, 0, &steps), 0);
    CHECK(steps >= 3); /* handle, path, compression context */
    /* The failed attempts left a store that opens clean and empty. */
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    struct store_stat st;
    CHECK_EQ_INT(store_stat(s, &st), 0);
    CHECK(st.windows == 0 && st.stored_bytes == 0);
    CHECK_EQ_INT(check_clean(s), 0);
    REQUIRE(put_one(s, "w", "v", T0, 1, 1, 100, NULL) == 0);
    store_close(s);
    CHECK_EQ_INT(open_walk(path, 0, &steps), 0);
    CHECK_EQ_INT(open_walk(path, 1, &steps), 0);
}

/* Count the windows; -1 on error. */
static long count(struct store *s)
{
    int rc;
    struct seen *l = list(s, NULL, &rc);
    return rc == 0 ? (long)l->n : -1;
}

/* Walk store_put over 12 batches of B on a fresh store with a small budget
 * (evictions), the outbox on or off. */
static void put_walk(int outbox)
{
    /* A fresh store: the first put also allocates zstd's workspace. */
    struct store_options o = {.max_size = 64 * 1024, .outbox = outbox};
    struct store *s = open_with(tmp_store_path(), &o);
    REQUIRE(s != NULL);
    enum { B = 5 };
    struct test_rec t[B];
    struct store_record r[B];
    uint64_t steps = 0;
    for (int round = 0; round < 12; round++) {
        for (int i = 0; i < B; i++) {
            rec_make(&t[i], "w", i % 2 ? "v1" : "v2", T0 + (uint64_t)(round * B + i) * SEC,
                     (uint32_t)i, (uint8_t)(1 + i % 2), 3000, (uint64_t)(round * B + i));
            r[i] = t[i].r;
        }
        long before = count(s);
        struct store_stat st0;
        REQUIRE(store_stat(s, &st0) == 0);
        long n;
        int rc = -1;
        for (n = 0; n < WALK_MAX; n++) {
            struct store_put_stats ps;
            isoprof_alloc_fail_after(n);
            rc = store_put(s, r, B, &ps);
            isoprof_alloc_fail_after(-1);
            if (rc == 0)
                break;
            CHECK_EQ_INT(rc, -ENOMEM);
            CHECK(ps.evicted == 0);
            /* Nothing of the batch is there, and the store is intact. */
            CHECK_EQ_INT(count(s), before);
            struct store_stat st1;
            REQUIRE(store_stat(s, &st1) == 0);
            CHECK(st1.stored_bytes == st0.stored_bytes);
            CHECK(st1.outbox_pending == st0.outbox_pending &&
                  st1.outbox_evicted == st0.outbox_evicted);
            if (rc != -ENOMEM)
                break;
        }
        CHECK_EQ_INT(rc, 0);
        if (round == 0)
            steps = (uint64_t)n;
        CHECK_EQ_INT(check_clean(s), 0);
        for (int i = 0; i < B; i++)
            rec_free(&t[i]);
    }
    CHECK(steps > B); /* items, one value per record, zstd workspace */
    struct store_stat st;
    REQUIRE(store_stat(s, &st) == 0);
    CHECK(st.stored_bytes <= 64 * 1024 && st.evicted_total > 0);
    if (outbox)
        CHECK(st.outbox_pending == st.windows && st.outbox_evicted == st.evicted_total);
    else
        CHECK(st.outbox_pending == 0 && st.outbox_evicted == 0);
    store_close(s);
}

TEST(put)
{
    put_walk(0);
}

TEST(put_outbox)
{
    put_walk(1);
}

TEST(reads)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t id;
    REQUIRE(put_one(s, "w", "v", T0, 1, 1, 20000, &id) == 0);
    for (long n = 0; n < WALK_MAX; n++) {
        void *out = NULL;
        size_t len = 0;
        isoprof_alloc_fail_after(n);
        int rc = store_load(s, id, &out, &len);
        isoprof_alloc_fail_after(-1);
        if (rc == 0) {
            CHECK(len == 20000);
            isoprof_free(out);
            break;
        }
        CHECK_EQ_INT(rc, -ENOMEM);
        CHECK(out == NULL);
    }
    for (long n = 0; n < WALK_MAX; n++) {
        char *why = NULL;
        isoprof_alloc_fail_after(n);
        int rc = store_check(s, &why);
        isoprof_alloc_fail_after(-1);
        CHECK(why == NULL);
        if (rc == 0)
            break;
        CHECK_EQ_INT(rc, -ENOMEM);
    }
    isoprof_alloc_fail_after(0);
    CHECK(count(s) == 1); /* listing allocates nothing */
    isoprof_alloc_fail_after(-1);
    store_close(s);
}

int main(void)
{
    RUN(open_fresh);
    RUN(put);
    RUN(put_outbox);
    RUN(reads);
    TEST_EXIT();
}

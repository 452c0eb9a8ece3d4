/*
 * test_query.c - store_put + store_windows + store_load: range queries by
 * worker, version, type and time (edges included), time-ordered listing
 * without a worker, id lookups, pprof round trip, input validation.
 */
#include "common.h"

static const char *W[] = {"api", "checkout", "checkout-v2"};
static const char *V[] = {"v1", "v10", "v2"};

/* 3 workers x 3 versions x 10 starts (one a minute) x 2 isolates x 2 types
 * = 360 windows, inserted in a scrambled order in batches of 7. */
static struct store *populate(void)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    if (s == NULL)
        return NULL;
    enum { N = 360 };
    static struct test_rec t[N];
    size_t n = 0;
    for (int w = 0; w < 3; w++)
        for (int v = 0; v < 3; v++)
            for (int m = 0; m < 10; m++)
                for (uint32_t iso = 0; iso < 2; iso++)
                    for (uint8_t ty = 1; ty <= 2; ty++) {
                        /* Start times interleave workers so time order and
                         * key order differ. */
                        uint64_t start = T0 + (uint64_t)m * 60 * SEC + (uint64_t)(w * 3 + v) * SEC;
                        rec_make(&t[n], W[w], V[v], start, iso, ty, 200 + n, n);
                        n++;
                    }
    for (size_t i = 0; i < N; i++) {
        size_t j = (i * 97) % N; /* 97 is coprime with 360 */
        struct test_rec tmp = t[i];
        t[i] = t[j];
        t[j] = tmp;
    }
    struct store_record batch[7];
    int rc = 0;
    for (size_t i = 0; i < N && rc == 0; i += 7) {
        size_t k = N - i < 7 ? N - i : 7;
        for (size_t j = 0; j < k; j++)
            batch[j] = t[i + j].r;
        rc = store_put(s, batch, k, NULL);
        for (size_t j = 0; j < k; j++)
            CHECK(batch[j].w.id != 0 && batch[j].w.raw_size == batch[j].len &&
                  batch[j].w.stored_size > 0);
    }
    for (size_t i = 0; i < N; i++)
        rec_free(&t[i]);
    if (rc != 0) {
        fprintf(stderr, "store_put: %s\n", isoprof_strerror(rc));
        store_close(s);
        return NULL;
    }
    return s;
}

static int key_before(const struct seen *l, size_t i)
{
    int c = strcmp(l->w[i - 1].worker, l->w[i].worker);
    if (c == 0)
        c = strcmp(l->w[i - 1].version, l->w[i].version);
    if (c == 0)
        c = l->w[i - 1].start < l->w[i].start ? -1 : l->w[i - 1].start > l->w[i].start;
    if (c == 0)
        c = l->w[i - 1].isolate < l->w[i].isolate ? -1 : l->w[i - 1].isolate > l->w[i].isolate;
    if (c == 0)
        c = l->w[i - 1].type < l->w[i].type ? -1 : 1;
    return c < 0;
}

TEST(listing)
{
    struct store *s = populate();
    REQUIRE(s != NULL);
    int rc;
    struct seen *l = list(s, NULL, &rc);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(l->n, 360);
    for (size_t i = 1; i < l->n; i++)
        CHECK(l->w[i - 1].start <= l->w[i].start);
    CHECK_STR(l->w[0].runtime, "node-20.11.0");

    /* Worker set: key order, only that worker ("checkout" is a prefix of
     * "checkout-v2", which must not leak in). */
    struct store_filter f = {.worker = "checkout"};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(l->n, 120);
    for (size_t i = 0; i < l->n; i++)
        CHECK_STR(l->w[i].worker, "checkout");
    for (size_t i = 1; i < l->n; i++)
        CHECK(key_before(l, i));

    f = (struct store_filter){.worker = "checkout", .version = "v1"};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 40);
    for (size_t i = 0; i < l->n; i++)
        CHECK_STR(l->w[i].version, "v1");

    f = (struct store_filter){.worker = "checkout", .version = "v1", .type = STORE_TYPE_HEAP};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 20);
    for (size_t i = 0; i < l->n; i++)
        CHECK(l->w[i].type == STORE_TYPE_HEAP);

    /* Version without worker (by_time path). */
    f = (struct store_filter){.version = "v10"};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 120);
    f = (struct store_filter){.type = STORE_TYPE_CPU};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 180);

    /* No such worker / version. */
    f = (struct store_filter){.worker = "check"};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(l->n, 0);
    f = (struct store_filter){.worker = "api", .version = "v"};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 0);
    store_close(s);
}

TEST(time_bounds)
{
    struct store *s = populate();
    REQUIRE(s != NULL);
    int rc;
    /* checkout/v1 (w=1, v=0) starts at T0 + m*60s + 3s. */
    uint64_t first = T0 + 3 * SEC;
    struct store_filter f = {.worker = "checkout",
                             .version = "v1",
                             .since_ns = first + 120 * SEC,
                             .until_ns = first + 300 * SEC};
    struct seen *l = list(s, &f, &rc);
    /* since is inclusive, until exclusive: minutes 2, 3, 4. */
    CHECK_EQ_INT(l->n, 12);
    CHECK(l->n && l->w[0].start == first + 120 * SEC);
    CHECK(l->n && l->w[l->n - 1].start == first + 240 * SEC);

    /* One nanosecond either way. */
    f.since_ns = first + 120 * SEC + 1;
    f.until_ns = first + 300 * SEC + 1;
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 12);
    CHECK(l->n && l->w[0].start == first + 180 * SEC);

    /* Worker without version: the cursor skips across versions. */
    f = (struct store_filter){
        .worker = "checkout", .since_ns = T0 + 120 * SEC, .until_ns = T0 + 180 * SEC};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 12); /* minute 2 of each of 3 versions, 4 windows each */
    for (size_t i = 0; i < l->n; i++)
        CHECK(l->w[i].start >= T0 + 120 * SEC && l->w[i].start < T0 + 180 * SEC);
    for (size_t i = 1; i < l->n; i++)
        CHECK(key_before(l, i));

    /* Only until / only since. */
    f = (struct store_filter){.worker = "api", .until_ns = T0 + 60 * SEC};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 12);
    f = (struct store_filter){.worker = "api", .since_ns = T0 + 540 * SEC};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 12);

    /* Time order without worker, with bounds. */
    f = (struct store_filter){.since_ns = T0 + 60 * SEC, .until_ns = T0 + 120 * SEC};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 36);
    for (size_t i = 1; i < l->n; i++)
        CHECK(l->w[i - 1].start <= l->w[i].start);
    CHECK(l->n && l->w[0].start == T0 + 60 * SEC);
    f = (struct store_filter){.since_ns = T0 + 60 * SEC, .until_ns = T0 + 60 * SEC};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 0);
    f = (struct store_filter){.since_ns = UINT64_MAX};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 0);
    store_close(s);
}

struct stop_arg {
    int n;
};

static int stop_after_three(const struct store_window *w, void *arg)
{
    (void)w;
    struct stop_arg *a = arg;
    return ++a->n == 3 ? 42 : 0;
}

TEST(callback_stop_and_id)
{
    struct store *s = populate();
    REQUIRE(s != NULL);
    struct stop_arg a = {0};
    CHECK_EQ_INT(store_windows(s, NULL, stop_after_three, &a), 42);
    CHECK_EQ_INT(a.n, 3);
    a.n = 0;
    struct store_filter f = {.worker = "api"};
    CHECK_EQ_INT(store_windows(s, &f, stop_after_three, &a), 42);

    int rc;
    f = (struct store_filter){.worker = "api", .version = "v2"};
    struct seen *l = list(s, &f, &rc);
    REQUIRE(l->n == 40);
    uint64_t id = l->w[5].id, start = l->w[5].start;
    f = (struct store_filter){.id = id};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 1);
    CHECK(l->n && l->w[0].id == id && l->w[0].start == start);
    f.worker = "checkout"; /* other filters still apply */
    l = list(s, &f, &rc);
    CHECK_EQ_INT(l->n, 0);
    f = (struct store_filter){.id = 100000};
    l = list(s, &f, &rc);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(l->n, 0);
    CHECK_EQ_INT(store_windows(s, NULL, NULL, NULL), -EINVAL);
    store_close(s);
}

TEST(round_trip)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    static const size_t sizes[] = {0, 1, 100, 65536, 3 << 20};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(sizes); i++) {
        struct test_rec t;
        rec_make(&t, "w", "v", T0 + i, 1, STORE_TYPE_HEAP, sizes[i], i + 100);
        t.r.w.runtime = "deno-1.40";
        t.r.w.flags = STORE_FLAG_ON_DEMAND;
        t.r.w.interval = 32768;
        REQUIRE(store_put(s, &t.r, 1, NULL) == 0);
        void *out = NULL;
        size_t len = 1;
        CHECK_EQ_INT(store_load(s, t.r.w.id, &out, &len), 0);
        CHECK(len == sizes[i]);
        CHECK(out && memcmp(out, t.payload, sizes[i]) == 0);
        isoprof_free(out);

        int rc;
        struct store_filter f = {.id = t.r.w.id};
        struct seen *l = list(s, &f, &rc);
        REQUIRE(l->n == 1);
        CHECK(l->w[0].raw == sizes[i]);
        CHECK(l->w[0].stored == t.r.w.stored_size);
        CHECK_STR(l->w[0].runtime, "deno-1.40");
        rec_free(&t);
    }
    void *out = NULL;
    size_t len = 0;
    CHECK_EQ_INT(store_load(s, 999, &out, &len), ISOPROF_ENOTFOUND);
    CHECK_EQ_INT(store_load(s, 0, &out, &len), -EINVAL);
    CHECK(out == NULL);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/* A window with the same key replaces the old one. */
TEST(replace)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t id1, id2;
    REQUIRE(put_one(s, "w", "v", T0, 1, 1, 1000, &id1) == 0);
    REQUIRE(put_one(s, "w", "v", T0, 1, 1, 2000, &id2) == 0);
    CHECK(id2 > id1);
    int rc;
    struct seen *l = list(s, NULL, &rc);
    CHECK_EQ_INT(l->n, 1);
    CHECK(l->n && l->w[0].id == id2 && l->w[0].raw == 2000);
    void *out = NULL;
    size_t len;
    CHECK_EQ_INT(store_load(s, id1, &out, &len), ISOPROF_ENOTFOUND);
    CHECK_EQ_INT(check_clean(s), 0);
    struct store_stat st;
    CHECK_EQ_INT(store_stat(s, &st), 0);
    CHECK(st.windows == 1 && st.evicted_total == 0 && st.stored_bytes == l->w[0].stored);
    store_close(s);
}

TEST(validation)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    struct test_rec t;
    rec_make(&t, "w", "v", T0, 1, 1, 10, 1);
    struct store_record good = t.r, r;
    char long_name[300];
    memset(long_name, 'x', sizeof(long_name));
    long_name[256] = '\0';

    r = good, r.w.worker = NULL;
    CHECK_EQ_INT(store_put(s, &r, 1, NULL), -EINVAL);
    r = good, r.w.runtime = NULL;
    CHECK_EQ_INT(store_put(s, &r, 1, NULL), -EINVAL);
    r = good, r.w.worker = long_name;
    CHECK_EQ_INT(store_put(s, &r, 1, NULL), -EINVAL);
    long_name[32] = '\0';
    r = good, r.w.runtime = long_name;
    CHECK_EQ_INT(store_put(s, &r, 1, NULL), -EINVAL);
    long_name[31] = '\0';
    r = good, r.w.runtime = long_name;
    CHECK_EQ_INT(store_put(s, &r, 1, NULL), 0);
    r = good, r.w.type = 0;
    CHECK_EQ_INT(store_put(s, &r, 1, NULL), -EINVAL);
    r = good, r.w.type = STORE_TYPE_SNAPSHOT; /* streamed in by store_blob_* only */
    CHECK_EQ_INT(store_put(s, &r, 1, NULL), -EINVAL);
    r = good, r.w.type = 5;
    CHECK_EQ_INT(store_put(s, &r, 1, NULL), -EINVAL);
    r = good, r.pprof = NULL;
    CHECK_EQ_INT(store_put(s, &r, 1, NULL), -EINVAL);
    r = good, r.len = (size_t)STORE_RAW_MAX + 1;
    CHECK_EQ_INT(store_put(s, &r, 1, NULL), -EINVAL);
    /* A bad record anywhere fails the whole batch. */
    struct store_record two[2] = {good, good};
    two[0].w.start_ns = T0 + 5;
    two[1].w.version = NULL;
    CHECK_EQ_INT(store_put(s, two, 2, NULL), -EINVAL);
    CHECK_EQ_INT(store_put(s, NULL, 0, NULL), 0);
    CHECK_EQ_INT(store_put(NULL, &r, 1, NULL), -EINVAL);
    int rc;
    struct seen *l = list(s, NULL, &rc);
    CHECK_EQ_INT(l->n, 1);
    rec_free(&t);
    store_close(s);
}

/* The walk's own checks: each key inside the file and after the last
 * one in LMDB's order (bytes, then length); anything else is damage. */
TEST(walk_order)
{
    /* The "file" is buf[2, 17): the bytes around it are outside. */
    static const uint8_t buf[] = "xx" "aaab" "aab" "ab" "b" "ba" "zz" "yy";
    const uint8_t *file = buf + 2, *end = buf + 17;
    struct store_walk w;
    memset(&w, 0, sizeof(w));
    w.b.lo = file;
    w.b.hi = end;
    MDB_val aa = {2, (void *)file}, aaa = {3, (void *)file}, aab = {3, (void *)(file + 4)};
    MDB_val b = {1, (void *)(file + 9)}, ba = {2, (void *)(file + 10)};
    CHECK_EQ_INT(store_walk_step(&w, &aa), 0);
    CHECK_EQ_INT(store_walk_step(&w, &aaa), 0); /* longer with the same prefix: after */
    CHECK_EQ_INT(store_walk_step(&w, &aab), 0);
    CHECK_EQ_INT(store_walk_step(&w, &b), 0);
    CHECK_EQ_INT(store_walk_step(&w, &ba), 0);
    CHECK_EQ_INT(store_walk_step(&w, &ba), ISOPROF_ECORRUPT); /* the same key again: a cycle */
    CHECK_EQ_INT(store_walk_step(&w, &b), ISOPROF_ECORRUPT);  /* back to a key passed */
    /* Outside the file, or running past its end. */
    MDB_val past = {3, (void *)(end - 2)}, before = {1, (void *)buf};
    memset(&w, 0, sizeof(w));
    w.b.lo = file;
    w.b.hi = end;
    CHECK_EQ_INT(store_walk_step(&w, &past), ISOPROF_ECORRUPT);
    CHECK_EQ_INT(store_walk_step(&w, &before), ISOPROF_ECORRUPT);
    /* Unknown bounds (a writer's handle): order only. */
    memset(&w, 0, sizeof(w));
    CHECK_EQ_INT(store_walk_step(&w, &past), 0);
    CHECK_EQ_INT(store_walk_step(&w, &aa), ISOPROF_ECORRUPT);
}

/* A read-only handle knows where its map is, and what it lists lies in it. */
static int inside_cb(const struct store_window *w, void *arg)
{
    const struct store_bounds *b = arg;
    MDB_val v = {strlen(w->worker), (void *)w->worker};
    CHECK(store_inside(b, &v));
    return 0;
}

TEST(bounds)
{
    const char *path = tmp_store_path();
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    struct store_bounds b;
    store_bounds_get(s, &b);
    CHECK(b.lo == NULL); /* a writer: its write txns hand out heap pages */
    REQUIRE(put_one(s, "api", "v1", T0, 0, STORE_TYPE_CPU, 200, NULL) == 0);
    store_close(s);
    struct store_options o = {.readonly = 1};
    REQUIRE(store_open(path, &o, &s, NULL) == 0);
    store_bounds_get(s, &b);
    REQUIRE(b.lo != NULL && b.hi > b.lo);
    CHECK_EQ_INT(store_windows(s, NULL, inside_cb, &b), 0);
    store_close(s);
}

int main(void)
{
    RUN(listing);
    RUN(time_bounds);
    RUN(callback_stop_and_id);
    RUN(round_trip);
    RUN(replace);
    RUN(validation);
    RUN(walk_order);
    RUN(bounds);
    TEST_EXIT();
}

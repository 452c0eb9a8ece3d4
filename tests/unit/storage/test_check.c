/*
 * test_check.c - store_check finds each kind of damage (written with the
 * raw LMDB API behind the store's back), listings skip a damaged record,
 * store_load reports it, and the report is capped.
 */
#include "common.h"

/* A store with 6 windows; returns it and the window keys' ids. */
static struct store *six(uint64_t ids[6])
{
    struct store *s = open_rw(tmp_store_path(), 0);
    if (s == NULL)
        return NULL;
    for (int i = 0; i < 6; i++)
        if (put_one(s, "w", "v", T0 + (uint64_t)i * SEC, 1, 1, 4000, &ids[i]) != 0) {
            store_close(s);
            return NULL;
        }
    return s;
}

/* Fetch the window key of id into key (copied). */
static size_t key_of(struct store *s, uint64_t id, uint8_t *key)
{
    MDB_txn *txn;
    if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0)
        return 0;
    uint8_t ik[8];
    store_be64_put(ik, id);
    MDB_val i = {8, ik}, k;
    size_t n = 0;
    if (mdb_get(txn, s->ids, &i, &k) == 0) {
        memcpy(key, k.mv_data, k.mv_size);
        n = k.mv_size;
    }
    mdb_txn_abort(txn);
    return n;
}

enum damage { HEADER, FRAME, TRUNCATE, NO_BY_TIME, NO_ID, COUNTER, EXTRA_TIME };

static int damage(struct store *s, uint64_t id, enum damage d)
{
    uint8_t key[STORE_KEY_MAX];
    size_t klen = key_of(s, id, key);
    if (klen == 0)
        return -1;
    MDB_txn *txn;
    if (mdb_txn_begin(s->env, NULL, 0, &txn) != 0)
        return -1;
    MDB_val k = {klen, key}, v;
    int rc = mdb_get(txn, s->windows, &k, &v);
    uint8_t *copy = NULL;
    if (rc == 0) {
        copy = isoprof_malloc(v.mv_size);
        memcpy(copy, v.mv_data, v.mv_size);
    }
    uint8_t tk[STORE_TIME_KEY_MAX];
    store_be64_put(tk, T0 + (id - 1) * SEC);
    memcpy(tk + 8, key, klen);
    MDB_val t = {8 + klen, tk};
    switch (d) {
    case HEADER:
        copy[0] = 0x00;
        v.mv_data = copy;
        rc = mdb_put(txn, s->windows, &k, &v, 0);
        break;
    case FRAME:
        copy[v.mv_size - 20] ^= 0xff;
        v.mv_data = copy;
        rc = mdb_put(txn, s->windows, &k, &v, 0);
        break;
    case TRUNCATE:
        v.mv_data = copy;
        v.mv_size /= 2;
        rc = mdb_put(txn, s->windows, &k, &v, 0);
        break;
    case NO_BY_TIME:
        rc = mdb_del(txn, s->by_time, &t, NULL);
        break;
    case NO_ID: {
        uint8_t ik[8];
        store_be64_put(ik, id);
        MDB_val i = {8, ik};
        rc = mdb_del(txn, s->ids, &i, NULL);
        break;
    }
    case COUNTER:
        rc = store_meta_put_u64(s, txn, "stored_bytes", 12345);
        break;
    case EXTRA_TIME: {
        store_be64_put(tk, 7); /* wrong time prefix for a real window */
        MDB_val e = {0, NULL};
        rc = mdb_put(txn, s->by_time, &t, &e, 0);
        break;
    }
    }
    isoprof_free(copy);
    if (rc != 0) {
        mdb_txn_abort(txn);
        return rc;
    }
    return mdb_txn_commit(txn);
}

static void expect_problem(enum damage d, const char *needle, int skips_listing)
{
    uint64_t ids[6];
    struct store *s = six(ids);
    REQUIRE(s != NULL);
    REQUIRE(check_clean(s) == 0);
    REQUIRE(damage(s, ids[2], d) == 0);
    char *why = NULL;
    CHECK_EQ_INT(store_check(s, &why), ISOPROF_ECORRUPT);
    if (why == NULL || strstr(why, needle) == NULL) {
        fprintf(stderr, "damage %d: wanted '%s' in:\n%s", (int)d, needle, why ? why : "(null)\n");
        CHECK(0);
    }
    /* Every line ends in a newline. */
    CHECK(why && why[strlen(why) - 1] == '\n');
    isoprof_free(why);
    int rc;
    struct seen *l = list(s, NULL, &rc);
    CHECK_EQ_INT(rc, 0);
    if (skips_listing) {
        CHECK_EQ_INT(l->n, 5);
        void *out = NULL;
        size_t len;
        CHECK_EQ_INT(store_load(s, ids[2], &out, &len), ISOPROF_ECORRUPT);
        CHECK(out == NULL);
    }
    /* The other windows still load. */
    void *out = NULL;
    size_t len;
    CHECK_EQ_INT(store_load(s, ids[4], &out, &len), 0);
    isoprof_free(out);
    store_close(s);
}

TEST(header)
{
    expect_problem(HEADER, "undecodable header", 1);
}

TEST(frame)
{
    uint64_t ids[6];
    expect_problem(FRAME, "zstd frame", 0);
    /* A damaged frame is listed (the header is fine) but does not load. */
    struct store *s = six(ids);
    REQUIRE(s != NULL);
    REQUIRE(damage(s, ids[1], FRAME) == 0);
    void *out = NULL;
    size_t len;
    CHECK_EQ_INT(store_load(s, ids[1], &out, &len), ISOPROF_ECORRUPT);
    CHECK(out == NULL);
    store_close(s);
}

TEST(truncated)
{
    expect_problem(TRUNCATE, "zstd frame", 0);
}

TEST(indexes)
{
    expect_problem(NO_BY_TIME, "no by_time entry", 0);
    expect_problem(NO_BY_TIME, "counts: windows 6, by_time 5, ids 6", 0);
    expect_problem(NO_ID, "missing from ids", 0);
    expect_problem(EXTRA_TIME, "time prefix does not match", 0);
}

TEST(counters)
{
    expect_problem(COUNTER, "meta: stored_bytes 12345", 0);
}

/* 150 damaged records: the report stops at 100 lines and says how many more. */
TEST(capped)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t ids[150];
    for (int i = 0; i < 150; i++)
        REQUIRE(put_one(s, "w", "v", T0 + (uint64_t)i * SEC, 1, 1, 300, &ids[i]) == 0);
    for (int i = 0; i < 150; i++)
        REQUIRE(damage(s, ids[i], HEADER) == 0);
    char *why = NULL;
    CHECK_EQ_INT(store_check(s, &why), ISOPROF_ECORRUPT);
    REQUIRE(why != NULL);
    int lines = 0;
    for (const char *p = why; *p; p++)
        lines += *p == '\n';
    CHECK_EQ_INT(lines, 101);
    /* 150 headers, and the dictionary of the series now counted by none of
     * the 141 records that name it. */
    CHECK(strstr(why, "... and 51 more\n") != NULL);
    isoprof_free(why);
    /* NULL why is fine too. */
    CHECK_EQ_INT(store_check(s, NULL), ISOPROF_ECORRUPT);
    store_close(s);
}

int main(void)
{
    RUN(header);
    RUN(frame);
    RUN(truncated);
    RUN(indexes);
    RUN(counters);
    RUN(capped);
    TEST_EXIT();
}

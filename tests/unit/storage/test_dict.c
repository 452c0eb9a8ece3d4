/*
 * test_dict.c - compression dictionaries: one per (worker, version), built
 * by the put that stores the 9th window of the pair from the earlier ones;
 * later windows are smaller for it and load byte-exact (also after reopen
 * and from a read-only handle); a dictionary goes with its last window
 * (eviction) and stays while a replacement still uses it; the budget
 * counts it; store_check finds a damaged or missing dictionary and a
 * wrong refcount; a schema 3 store is read as it is and upgraded in place.
 */
#include "common.h"

#include <sys/stat.h>

/* A pprof-like payload: samples whose values vary with seed, then a
 * string table of function names and script URLs that every window of a
 * deploy shares (what the dictionary captures). */
static size_t pprof_like(uint8_t *buf, size_t cap, uint64_t seed, const char *deploy)
{
    static const char *const fns[] = {
        "handleRequest", "parseJSON",    "renderTemplate", "validateInput", "computeTotals",
        "fetchUpstream", "serialize",    "deflateSync",    "resolveRoute",  "authorize",
        "lookupCache",   "writeHeaders", "onMessage",      "runMicrotasks", "(garbage collector)",
        "(program)",     "(idle)",       "mergeSorted",    "formatDate",    "escapeHtml"};
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 7;
    size_t o = 0;
    for (int i = 0; i < 40 && o + 16 < cap; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[o++] = 0x12; /* sample */
        buf[o++] = 6;
        buf[o++] = (uint8_t)(1 + i % 20); /* location ids */
        buf[o++] = (uint8_t)(1 + (i * 7) % 20);
        buf[o++] = (uint8_t)(x & 0x7f); /* values */
        buf[o++] = (uint8_t)((x >> 8) & 0x7f);
        buf[o++] = (uint8_t)((x >> 16) & 0x7f);
        buf[o++] = (uint8_t)((x >> 24) & 0x7f);
    }
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(fns); i++) {
        char s[200];
        int n = snprintf(s, sizeof(s), "%s", fns[i]);
        int m =
            snprintf(s + n + 1, sizeof(s) - (size_t)n - 1,
                     "file:///srv/app/%s/node_modules/lib%zu/src/module%zu.js", deploy, i % 7, i);
        for (int j = 0; j < 2; j++) {
            const char *str = j == 0 ? s : s + n + 1;
            size_t l = (size_t)(j == 0 ? n : m);
            if (o + l + 2 > cap)
                return o;
            buf[o++] = 0x32; /* string_table */
            buf[o++] = (uint8_t)l;
            memcpy(buf + o, str, l);
            o += l;
        }
    }
    return o;
}

struct win {
    uint8_t buf[4096];
    size_t len;
};

/* Put window i of (worker, version): a pprof-like payload; returns the
 * record (id, stored_size filled). */
static int put_win(struct store *s, const char *worker, const char *version, int i, struct win *w,
                   struct store_record *out)
{
    w->len = pprof_like(w->buf, sizeof(w->buf), (uint64_t)i * 31 + 5, version);
    struct store_record r = {.w = {.worker = worker,
                                   .version = version,
                                   .runtime = "node-22",
                                   .type = STORE_TYPE_CPU,
                                   .isolate = 1,
                                   .start_ns = T0 + (uint64_t)i * SEC,
                                   .end_ns = T0 + (uint64_t)i * SEC + 1},
                             .pprof = w->buf,
                             .len = w->len};
    int rc = store_put(s, &r, 1, NULL);
    if (out)
        *out = r;
    return rc;
}

static struct store_stat stat_of(struct store *s)
{
    struct store_stat st;
    if (store_stat(s, &st) != 0)
        abort();
    return st;
}

/* The dictionary id a window's record names (raw read). */
static uint32_t dict_of(struct store *s, uint64_t id)
{
    MDB_txn *txn;
    MDB_val k, d;
    struct store_key key;
    struct store_rec_hdr h;
    uint32_t out = UINT32_MAX;
    if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0)
        abort();
    if (store_window_by_seq(s, txn, id, &k, &key, &d) == 0 &&
        store_record_decode(d.mv_data, d.mv_size, &h) == 0)
        out = h.dict;
    mdb_txn_abort(txn);
    return out;
}

/* The dictionary of a series and its refs; 0 if none. */
static uint32_t series_dict(struct store *s, const char *worker, const char *version,
                            uint64_t *refs)
{
    uint8_t key[600];
    size_t wl = strlen(worker), vl = strlen(version);
    memcpy(key, worker, wl + 1);
    memcpy(key + wl + 1, version, vl + 1);
    MDB_txn *txn;
    if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0)
        abort();
    uint32_t id = 0;
    uint64_t r = 0;
    if (store_dict_find(s, txn, key, wl + vl + 2, &id, &r) != 0)
        id = 0;
    mdb_txn_abort(txn);
    if (refs)
        *refs = r;
    return id;
}

static int load_eq(struct store *s, uint64_t id, const struct win *w)
{
    void *out = NULL;
    size_t len = 0;
    int rc = store_load(s, id, &out, &len);
    if (rc != 0)
        return rc;
    int same = len == w->len && memcmp(out, w->buf, len) == 0;
    isoprof_free(out);
    return same ? 0 : -1;
}

enum { N = 40 };
static struct win wins[N];
static struct store_record recs[N];

TEST(built_after_eighth_and_smaller)
{
    const char *path = tmp_store_path();
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    for (int i = 0; i < N; i++) {
        REQUIRE(put_win(s, "checkout", "v42", i, &wins[i], &recs[i]) == 0);
        struct store_stat st = stat_of(s);
        /* Eight windows without: the 9th put builds it and uses it. */
        CHECK_EQ_INT(st.dicts, i >= 8 ? 1 : 0);
        CHECK_EQ_INT(dict_of(s, recs[i].w.id), i >= 8 ? 1 : 0);
    }
    uint64_t refs = 0;
    CHECK_EQ_INT(series_dict(s, "checkout", "v42", &refs), 1);
    CHECK_EQ_INT(refs, N - 8);
    struct store_stat st = stat_of(s);
    /* The dictionary holds the content of the 8 earlier windows. */
    size_t earlier = 0;
    for (int i = 0; i < 8; i++)
        earlier += wins[i].len;
    CHECK(st.dict_bytes > earlier && st.dict_bytes < earlier + 200);
    /* The budget counter: every window's stored_size, plus the dictionary. */
    uint64_t sum = 0;
    for (int i = 0; i < N; i++)
        sum += recs[i].w.stored_size;
    CHECK(st.stored_bytes == sum + st.dict_bytes);

    /* The same windows in a store without the history (each its own
     * version: no dictionary) take much more room each. */
    struct store *fresh = open_rw(tmp_store_path(), 0);
    REQUIRE(fresh != NULL);
    uint64_t with = 0, without = 0;
    for (int i = 8; i < N; i++) {
        struct store_record r;
        char v[32];
        snprintf(v, sizeof(v), "solo%d", i);
        r = recs[i];
        r.w.version = "v42";
        r.w.worker = v; /* its own series, same payload */
        r.pprof = wins[i].buf;
        r.len = wins[i].len;
        REQUIRE(store_put(fresh, &r, 1, NULL) == 0);
        CHECK_EQ_INT(dict_of(fresh, r.w.id), 0);
        /* stored_size minus the keys, so that the worker names do not count */
        without += r.w.stored_size - 3 * (strlen(v) + 5 + 13);
        with += recs[i].w.stored_size - 3 * (strlen("checkout") + 5 + 13);
    }
    fprintf(stderr, "dict: %llu B with, %llu B without (%.2fx)\n", (unsigned long long)with,
            (unsigned long long)without, (double)with / (double)without);
    CHECK(with * 10 < without * 7); /* < 0.7x */
    store_close(fresh);

    /* Byte-exact loads, before and after reopen, and from a reader. */
    for (int i = 0; i < N; i++)
        CHECK_EQ_INT(load_eq(s, recs[i].w.id, &wins[i]), 0);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    s = open_rw(path, 0);
    REQUIRE(s != NULL);
    for (int i = 0; i < N; i++)
        CHECK_EQ_INT(load_eq(s, recs[i].w.id, &wins[i]), 0);
    /* More windows after reopen use the same dictionary. */
    struct win more;
    struct store_record mr;
    REQUIRE(put_win(s, "checkout", "v42", N, &more, &mr) == 0);
    CHECK_EQ_INT(dict_of(s, mr.w.id), 1);
    CHECK_EQ_INT(load_eq(s, mr.w.id, &more), 0);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    struct store_options ro = {.readonly = 1};
    struct store *r = open_with(path, &ro);
    REQUIRE(r != NULL);
    for (int i = 0; i < N; i++)
        CHECK_EQ_INT(load_eq(r, recs[i].w.id, &wins[i]), 0);
    CHECK_EQ_INT(check_clean(r), 0);
    store_close(r);
}

TEST(one_per_version_and_batches)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    for (int i = 0; i < 12; i++)
        REQUIRE(put_win(s, "api", "v1", i, &wins[i], &recs[i]) == 0);
    /* v2 in one batch of 20: the dictionary comes within the batch, at its
     * 9th window, built from the 8 before it in the same transaction. */
    static struct win w2[20];
    struct store_record r2[20];
    for (int i = 0; i < 20; i++) {
        w2[i].len = pprof_like(w2[i].buf, sizeof(w2[i].buf), (uint64_t)i * 77, "v2");
        r2[i] = (struct store_record){.w = {.worker = "api",
                                            .version = "v2",
                                            .runtime = "node-22",
                                            .type = STORE_TYPE_HEAP,
                                            .isolate = 2,
                                            .start_ns = T0 + (uint64_t)(100 + i) * SEC},
                                      .pprof = w2[i].buf,
                                      .len = w2[i].len};
    }
    REQUIRE(store_put(s, r2, 20, NULL) == 0);
    uint32_t d1 = series_dict(s, "api", "v1", NULL), d2 = series_dict(s, "api", "v2", NULL);
    CHECK(d1 != 0 && d2 != 0 && d1 != d2);
    CHECK_EQ_INT(stat_of(s).dicts, 2);
    for (int i = 0; i < 20; i++) {
        CHECK_EQ_INT(dict_of(s, r2[i].w.id), i >= 8 ? d2 : 0);
        CHECK_EQ_INT(load_eq(s, r2[i].w.id, &w2[i]), 0);
    }
    for (int i = 0; i < 12; i++)
        CHECK_EQ_INT(dict_of(s, recs[i].w.id), i >= 8 ? d1 : 0);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

TEST(refcount_replace_and_evict)
{
    const uint64_t budget = 32 * 1024;
    struct store *s = open_rw(tmp_store_path(), budget);
    REQUIRE(s != NULL);
    for (int i = 0; i < 10; i++)
        REQUIRE(put_win(s, "old", "v1", i, &wins[i], &recs[i]) == 0);
    uint64_t refs = 0;
    uint32_t d = series_dict(s, "old", "v1", &refs);
    CHECK(d != 0 && refs == 2);
    /* Replacing windows 8 and 9 (same keys, new content) keeps the
     * dictionary: the new records name it before the old ones go. */
    for (int i = 8; i < 10; i++) {
        struct win w;
        w.len = pprof_like(w.buf, sizeof(w.buf), 999 + (uint64_t)i, "v1");
        struct store_record r = recs[i];
        r.pprof = w.buf;
        r.len = w.len;
        REQUIRE(store_put(s, &r, 1, NULL) == 0);
        CHECK_EQ_INT(dict_of(s, r.w.id), d);
        CHECK_EQ_INT(load_eq(s, r.w.id, &w), 0);
    }
    CHECK_EQ_INT(series_dict(s, "old", "v1", &refs), d);
    CHECK_EQ_INT(refs, 2);
    CHECK_EQ_INT(check_clean(s), 0);
    /* A newer deploy fills the budget: the old one is evicted, and its
     * dictionary leaves with its last window. */
    struct win w;
    struct store_record r;
    for (int i = 0; i < 400; i++) {
        REQUIRE(put_win(s, "old", "v2", 1000 + i, &w, &r) == 0);
        struct store_stat st = stat_of(s);
        CHECK(st.stored_bytes <= budget);
    }
    struct store_stat st = stat_of(s);
    CHECK(st.evicted_total > 10);
    CHECK_EQ_INT(series_dict(s, "old", "v1", NULL), 0);
    CHECK_EQ_INT(st.dicts, 1); /* v2's */
    uint32_t d2 = series_dict(s, "old", "v2", &refs);
    CHECK(d2 > d && refs > 0 && refs <= st.windows);
    CHECK_EQ_INT(check_clean(s), 0);
    /* The counter is exact: windows + the one dictionary. */
    int rc;
    struct seen *l = list(s, NULL, &rc);
    uint64_t sum = 0;
    for (size_t i = 0; i < l->n; i++)
        sum += l->w[i].stored;
    CHECK(st.stored_bytes == sum + st.dict_bytes);
    store_close(s);

    /* Everything evicted (a window larger than all the rest forces it): no
     * dictionary is left and the counter is the one window. */
    s = open_rw(tmp_store_path(), 64 * 1024);
    REQUIRE(s != NULL);
    for (int i = 0; i < 12; i++)
        REQUIRE(put_win(s, "x", "v", i, &wins[i], &recs[i]) == 0);
    CHECK_EQ_INT(stat_of(s).dicts, 1);
    struct test_rec big;
    rec_make(&big, "y", "v", T0 + 100 * SEC, 1, 1, 60 * 1024, 3);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < big.r.len; i++) { /* incompressible */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        big.payload[i] = (uint8_t)(x >> 32);
    }
    REQUIRE(store_put(s, &big.r, 1, NULL) == 0);
    rec_free(&big);
    st = stat_of(s);
    CHECK(st.windows == 1 && st.dicts == 0 && st.dict_bytes == 0);
    CHECK(st.stored_bytes == big.r.w.stored_size);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

enum damage { FLIP, DROP_DICT, DROP_SERIES, REFS };

static void damage(struct store *s, uint32_t id, const char *series, size_t slen, enum damage how)
{
    MDB_txn *txn;
    REQUIRE(mdb_txn_begin(s->env, NULL, 0, &txn) == 0);
    uint8_t key[4];
    store_be32_put(key, id);
    MDB_val k = {4, key}, d, sk = {slen, (void *)series};
    REQUIRE(mdb_get(txn, s->dicts, &k, &d) == 0);
    uint8_t *copy = isoprof_malloc(d.mv_size);
    REQUIRE(copy != NULL);
    memcpy(copy, d.mv_data, d.mv_size);
    switch (how) {
    case FLIP: /* the whole content, so that every frame notices */
        for (size_t i = STORE_DICT_HDR + slen; i < d.mv_size; i++)
            copy[i] ^= 0x5a;
        d.mv_data = copy;
        REQUIRE(mdb_put(txn, s->dicts, &k, &d, 0) == 0);
        break;
    case DROP_DICT:
        REQUIRE(mdb_del(txn, s->dicts, &k, NULL) == 0);
        break;
    case DROP_SERIES:
        REQUIRE(mdb_del(txn, s->dict_by_series, &sk, NULL) == 0);
        break;
    case REFS: {
        uint8_t v[STORE_DICT_SERIES_VAL];
        store_be32_put(v, id);
        store_be64_put(v + 4, 99);
        MDB_val vv = {sizeof(v), v};
        REQUIRE(mdb_put(txn, s->dict_by_series, &sk, &vv, 0) == 0);
        break;
    }
    }
    isoprof_free(copy);
    REQUIRE(mdb_txn_commit(txn) == 0);
}

static void expect_damage(enum damage how, const char *needle, int load_fails)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    for (int i = 0; i < 12; i++)
        REQUIRE(put_win(s, "w", "v", i, &wins[i], &recs[i]) == 0);
    CHECK_EQ_INT(check_clean(s), 0);
    uint32_t id = series_dict(s, "w", "v", NULL);
    REQUIRE(id != 0);
    damage(s, id, "w\0v", 4, how);
    char *why = NULL;
    CHECK_EQ_INT(store_check(s, &why), ISOPROF_ECORRUPT);
    if (why == NULL || strstr(why, needle) == NULL) {
        fprintf(stderr, "damage %d: wanted '%s' in:\n%s", (int)how, needle, why ? why : "(null)\n");
        CHECK(0);
    }
    isoprof_free(why);
    /* A window naming the dictionary: a clear error, never a crash; the
     * ones without still load. */
    void *out = NULL;
    size_t len = 0;
    CHECK_EQ_INT(store_load(s, recs[10].w.id, &out, &len), load_fails ? ISOPROF_ECORRUPT : 0);
    isoprof_free(out);
    CHECK_EQ_INT(load_eq(s, recs[2].w.id, &wins[2]), 0);
    store_close(s);
}

TEST(check_finds_damage)
{
    expect_damage(FLIP, "dicts: dictionary 1 (w/v): content damaged", 1);
    expect_damage(FLIP, "windows: w/v start=", 1);
    expect_damage(FLIP, "with dictionary 1", 1);
    expect_damage(DROP_DICT, "dictionary 1 is missing", 1);
    expect_damage(DROP_DICT, "dict_by_series: w/v -> dictionary 1: missing", 1);
    expect_damage(DROP_SERIES, "dicts: dictionary 1 (w/v): no dict_by_series entry", 0);
    expect_damage(REFS, "dicts: dictionary 1 (w/v): refcount 99, 4 records name it", 0);
}

/* Turn the store at path into a schema 3 one: no dictionary DBs, no
 * counter, version 3 (as a schema 3 build left it). */
static void make_schema3(const char *path)
{
    downgrade_schema(path, "dicts", "next_dict", 3);
    downgrade_schema(path, "dict_by_series", NULL, 3);
}

TEST(upgrade_from_schema3)
{
    const char *path = tmp_store_path();
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    for (int i = 0; i < 6; i++)
        REQUIRE(put_win(s, "w", "v", i, &wins[i], &recs[i]) == 0);
    store_close(s);
    make_schema3(path);

    /* A reader takes schema 3 as it is. */
    struct store_options ro = {.readonly = 1};
    struct store *r = open_with(path, &ro);
    REQUIRE(r != NULL);
    CHECK_EQ_INT(stat_of(r).schema_version, 3);
    CHECK_EQ_INT(stat_of(r).dicts, 0);
    for (int i = 0; i < 6; i++)
        CHECK_EQ_INT(load_eq(r, recs[i].w.id, &wins[i]), 0);
    CHECK_EQ_INT(check_clean(r), 0);
    store_close(r);

    /* A writer upgrades it; old windows stay as they are, new ones earn a
     * dictionary from the old ones' content. */
    s = open_rw(path, 0);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(stat_of(s).schema_version, STORE_SCHEMA_VERSION);
    for (int i = 6; i < 12; i++)
        REQUIRE(put_win(s, "w", "v", i, &wins[i], &recs[i]) == 0);
    for (int i = 0; i < 12; i++) {
        CHECK_EQ_INT(dict_of(s, recs[i].w.id), i >= 8 ? 1 : 0);
        CHECK_EQ_INT(load_eq(s, recs[i].w.id, &wins[i]), 0);
    }
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    r = open_with(path, &ro);
    REQUIRE(r != NULL);
    CHECK_EQ_INT(stat_of(r).schema_version, STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(load_eq(r, recs[11].w.id, &wins[11]), 0);
    store_close(r);
}

int main(void)
{
    RUN(built_after_eighth_and_smaller);
    RUN(one_per_version_and_batches);
    RUN(refcount_replace_and_evict);
    RUN(check_finds_damage);
    RUN(upgrade_from_schema3);
    TEST_EXIT();
}

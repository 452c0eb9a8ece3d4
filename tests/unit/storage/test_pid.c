/*
 * test_pid.c - the process labels of windows (schema 6): the pid and the
 * container id put and read back (store_windows, store_outbox_peek, a
 * reader), NULL and "" as no container, the pid filter on every access
 * path, what store_put refuses, a window charged its container's bytes, a
 * schema 5 store (version 3 records beside older ones, written here by
 * hand as a schema 5 build left them) read as it is and upgraded in place
 * by a writer, store_check and store_verify clean on the mixed store, and
 * store_check on a damaged container.
 */
#include "common.h"

#include <stdarg.h>

/* Put one window of process pid in container ct (thread th); its id, 0
 * on failure (*rc receives store_put's code if rc is set). */
static uint64_t put_pc(struct store *s, const char *worker, const char *version, uint64_t start,
                       uint32_t isolate, uint8_t type, uint32_t pid, const char *ct, const char *th,
                       uint64_t pin, int *rc)
{
    struct test_rec t;
    rec_make(&t, worker, version, start, isolate, type, 3000, 17); /* one payload for all */
    t.r.w.pid = pid;
    t.r.w.container = ct;
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

/* The listing of f, as "id:pid:container" words in listing order. */
static const char *labels_of(struct store *s, const struct store_filter *f)
{
    static char out[8192];
    int rc;
    struct seen *l = list(s, f, &rc);
    size_t n = 0;
    out[0] = '\0';
    if (rc != 0)
        snprintf(out, sizeof(out), "error %d", rc);
    for (size_t i = 0; rc == 0 && i < l->n && n < sizeof(out); i++)
        n += (size_t)snprintf(out + n, sizeof(out) - n, "%s%" PRIu64 ":%" PRIu32 ":%s",
                              i ? " " : "", l->w[i].id, l->w[i].pid, l->w[i].container);
    return out;
}

static size_t count_of(struct store *s, const struct store_filter *f)
{
    int rc;
    struct seen *l = list(s, f, &rc);
    return rc == 0 ? l->n : (size_t)-1;
}

/* What store_outbox_peek hands out: "id:pid:container" words. */
static int peek_on(const struct store_window *w, uint64_t queued, void *arg)
{
    (void)queued;
    char *out = arg;
    size_t n = strlen(out);
    snprintf(out + n, 8192 - n, "%s%" PRIu64 ":%" PRIu32 ":%s", n ? " " : "", w->id, w->pid,
             w->container ? w->container : "(null)");
    return 0;
}

static const char *peek_labels(struct store *s)
{
    static char out[8192];
    out[0] = '\0';
    int rc = store_outbox_peek(s, 100, peek_on, out);
    if (rc != 0)
        snprintf(out, sizeof(out), "error %d", rc);
    return out;
}

static char want_buf[8192];
__attribute__((format(printf, 1, 2))) static const char *want(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want_buf, sizeof(want_buf), fmt, ap);
    va_end(ap);
    return want_buf;
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

/* A container id as Docker writes one: 64 hex digits. */
#define CT64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

TEST(round_trip_and_filter)
{
    const char *path = tmp_store_path();
    struct store *s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    uint64_t a = put_pc(s, "w", "v", T0, 1, STORE_TYPE_CPU, 4242, CT64, NULL, 0, NULL);
    uint64_t b =
        put_pc(s, "w", "v", T0 + 1 * SEC, 2, STORE_TYPE_CPU, 4242, CT64, "pool-1", 0, NULL);
    uint64_t c =
        put_pc(s, "w", "v", T0 + 2 * SEC, 3, STORE_TYPE_HEAP, 77, "web_1.x-y", NULL, 0, NULL);
    uint64_t d = put_pc(s, "w", "v2", T0 + 3 * SEC, 1, STORE_TYPE_CPU, 4194304, "", NULL, 0, NULL);
    uint64_t e = put_pc(s, "other", "v", T0 + 4 * SEC, 1, STORE_TYPE_CPU, 0, NULL, NULL, 0, NULL);
    uint64_t f = put_pc(s, "w", "v", T0 + 5 * SEC, 4, STORE_TYPE_CPU, 4242, NULL, NULL, 0, NULL);
    REQUIRE(a && b && c && d && e && f);

    /* What was put comes back; NULL and "" were stored as no container,
     * pid 0 as unknown. */
    CHECK_STR(labels_of(s, NULL),
              want("%" PRIu64 ":4242:" CT64 " %" PRIu64 ":4242:" CT64 " %" PRIu64
                   ":77:web_1.x-y %" PRIu64 ":4194304: %" PRIu64 ":0: %" PRIu64 ":4242:",
                   a, b, c, d, e, f));
    CHECK_STR(peek_labels(s), want_buf); /* the outbox is in store order here */
    /* Never NULL on output, "" when none. */
    int rc;
    struct seen *l = list(s, NULL, &rc);
    REQUIRE(rc == 0 && l->n == 6);
    for (size_t i = 0; i < l->n; i++)
        CHECK(strcmp(l->w[i].container, "(null)") != 0);

    /* The filter on each access path: time index (no worker), key range
     * (worker; worker and version), one id, pinned windows; with others. */
    struct store_filter flt = {.pid = 4242};
    CHECK_STR(
        labels_of(s, &flt),
        want("%" PRIu64 ":4242:" CT64 " %" PRIu64 ":4242:" CT64 " %" PRIu64 ":4242:", a, b, f));
    flt.worker = "w";
    CHECK_STR(labels_of(s, &flt), want_buf);
    flt.version = "v";
    CHECK_STR(labels_of(s, &flt), want_buf);
    flt.since_ns = T0 + 1 * SEC;
    flt.until_ns = T0 + 5 * SEC;
    CHECK_STR(labels_of(s, &flt), want("%" PRIu64 ":4242:" CT64, b));
    flt = (struct store_filter){.pid = 4242, .thread = "main"};
    CHECK_STR(labels_of(s, &flt), want("%" PRIu64 ":4242:" CT64 " %" PRIu64 ":4242:", a, f));
    flt = (struct store_filter){.pid = 4194304, .worker = "w"};
    CHECK_STR(labels_of(s, &flt), want("%" PRIu64 ":4194304:", d));
    flt = (struct store_filter){.pid = 77, .type = STORE_TYPE_CPU};
    CHECK_EQ_INT(count_of(s, &flt), 0);
    flt.type = STORE_TYPE_HEAP;
    CHECK_EQ_INT(count_of(s, &flt), 1);
    flt = (struct store_filter){.id = c, .pid = 77};
    CHECK_EQ_INT(count_of(s, &flt), 1);
    flt.pid = 4242;
    CHECK_EQ_INT(count_of(s, &flt), 0);
    flt = (struct store_filter){.pid = 1}; /* nobody's */
    CHECK_EQ_INT(count_of(s, &flt), 0);
    flt = (struct store_filter){.pid = 0}; /* any, the unknown too */
    CHECK_EQ_INT(count_of(s, &flt), 6);

    /* A pinned window of one process, told from another's. */
    struct store_anomaly an = {.kind = STORE_ANOMALY_OOM_SUSPECTED,
                               .worker = "w",
                               .version = "v",
                               .isolate = 5,
                               .start_ns = T0 + 6 * SEC,
                               .end_ns = T0 + 6 * SEC};
    REQUIRE(store_anomaly_put(s, &an, 0) == 0);
    uint64_t g = put_pc(s, "w", "v", T0 + 6 * SEC, 5, STORE_TYPE_CPU, 9, "c9", NULL, an.id, NULL);
    uint64_t h = put_pc(s, "w", "v", T0 + 7 * SEC, 6, STORE_TYPE_CPU, 10, NULL, NULL, an.id, NULL);
    REQUIRE(g && h);
    flt = (struct store_filter){.pinned = STORE_PINNED_ANY, .pid = 9};
    CHECK_STR(labels_of(s, &flt), want("%" PRIu64 ":9:c9", g));
    flt.pid = 10;
    CHECK_STR(labels_of(s, &flt), want("%" PRIu64 ":10:", h));
    flt.pid = 0;
    CHECK_EQ_INT(count_of(s, &flt), 2);
    /* Pinned windows drain first. */
    CHECK_STR(peek_labels(s), want("%" PRIu64 ":9:c9 %" PRIu64 ":10: %" PRIu64 ":4242:" CT64
                                   " %" PRIu64 ":4242:" CT64 " %" PRIu64 ":77:web_1.x-y %" PRIu64
                                   ":4194304: %" PRIu64 ":0: %" PRIu64 ":4242:",
                                   g, h, a, b, c, d, e, f));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* It is on disk: a reader sees the same. */
    s = open_ro(path);
    REQUIRE(s != NULL);
    flt = (struct store_filter){.pid = 77};
    CHECK_STR(labels_of(s, &flt), want("%" PRIu64 ":77:web_1.x-y", c));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/* What store_put refuses: a container over STORE_CONTAINER_MAX bytes or
 * with a byte outside [0-9A-Za-z_.-]; nothing of the batch is stored. */
TEST(container_refused)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    char longer[STORE_CONTAINER_MAX + 2];
    memset(longer, 'a', sizeof(longer));
    longer[STORE_CONTAINER_MAX + 1] = '\0'; /* 65 bytes */
    const char *const bad[] = {longer,   "abc/def",     "abc def", "/docker/abc", " ",
                               "tab\tx", "caf\xc3\xa9", "a:b",     "nl\n",        "x\x7f"};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(bad); i++) {
        int rc = 0;
        CHECK(put_pc(s, "w", "v", T0, 1, STORE_TYPE_CPU, 1, bad[i], NULL, 0, &rc) == 0);
        CHECK_EQ_INT(rc, -EINVAL);
    }
    /* In a batch with a good one: all or nothing. */
    struct test_rec t[2];
    struct store_record r[2];
    for (int i = 0; i < 2; i++) {
        rec_make(&t[i], "w", "v", T0 + (uint64_t)i * SEC, 1, STORE_TYPE_CPU, 1000, 3);
        t[i].r.w.container = i ? "bad/one" : "good";
        r[i] = t[i].r;
    }
    CHECK_EQ_INT(store_put(s, r, 2, NULL), -EINVAL);
    for (int i = 0; i < 2; i++)
        rec_free(&t[i]);
    CHECK_EQ_INT(count_of(s, NULL), 0);

    /* The longest accepted, and every byte of the set. */
    longer[STORE_CONTAINER_MAX] = '\0';
    uint64_t id = put_pc(s, "w", "v", T0, 1, STORE_TYPE_CPU, 1, longer, NULL, 0, NULL);
    REQUIRE(id != 0);
    uint64_t id2 = put_pc(s, "w", "v", T0 + SEC, 1, STORE_TYPE_CPU, 1, "AZaz09_.-", NULL, 0, NULL);
    REQUIRE(id2 != 0);
    CHECK_STR(labels_of(s, NULL),
              want("%" PRIu64 ":1:%s %" PRIu64 ":1:AZaz09_.-", id, longer, id2));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/* A window is charged its container's bytes exactly (the pid is in the
 * fixed header), as stored and as read back. */
TEST(budget_container)
{
    struct store *s = open_outbox(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    struct test_rec t[3];
    struct store_record r[3]; /* one batch */
    const char *ct[3] = {NULL, "abc123", CT64};
    for (int i = 0; i < 3; i++) {
        rec_make(&t[i], "w", "v", T0 + (uint64_t)i * SEC, 1, STORE_TYPE_CPU, 3000, 17);
        t[i].r.w.container = ct[i];
        t[i].r.w.pid = (uint32_t)(i * 1000000);
        r[i] = t[i].r;
    }
    REQUIRE(store_put(s, r, 3, NULL) == 0);
    CHECK_EQ_INT(r[1].w.stored_size - r[0].w.stored_size, 6);
    CHECK_EQ_INT(r[2].w.stored_size - r[0].w.stored_size, STORE_CONTAINER_MAX);
    int rc;
    struct seen *l = list(s, NULL, &rc);
    REQUIRE(rc == 0 && l->n == 3);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(l->w[i].stored, r[i].w.stored_size);
    CHECK_EQ_INT(stat_of(s).stored_bytes,
                 r[0].w.stored_size + r[1].w.stored_size + r[2].w.stored_size);
    for (int i = 0; i < 3; i++)
        rec_free(&t[i]);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/*
 * Make the store at path what a schema 5 build would have left after
 * upgrades: every record in version 3 (the window with id v1_id in version
 * 1, as one stored before schema 2, the one with id v2_id in version 2, as
 * one stored before schema 5), stored_bytes down by what the records lost,
 * schema 5 in meta. Anomalies are as schema 5 wrote them already.
 */
static void make_schema5(const char *path, uint64_t v1_id, uint64_t v2_id)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi windows, meta;
    MDB_cursor *c;
    MDB_val k, v;
    /* The new values are collected first and put after the walk: a put
     * of another size under a cursor would move it. */
    struct {
        uint8_t key[STORE_KEY_MAX];
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
    REQUIRE(mdb_dbi_open(txn, "meta", 0, &meta) == 0);
    uint64_t lost = 0;
    REQUIRE(mdb_cursor_open(txn, windows, &c) == 0);
    for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && n < 16;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT), n++) {
        uint64_t seq = store_be64_get((const uint8_t *)v.mv_data + STORE_REC_SEQ_OFF);
        int ver = seq == v1_id ? 1 : seq == v2_id ? 2 : 3;
        out[n].val = rec_downgrade(v.mv_data, v.mv_size, ver, &out[n].vlen);
        REQUIRE(out[n].val != NULL && k.mv_size <= sizeof(out[n].key));
        memcpy(out[n].key, k.mv_data, k.mv_size);
        out[n].klen = k.mv_size;
        lost += v.mv_size - out[n].vlen;
    }
    mdb_cursor_close(c);
    for (size_t i = 0; i < n; i++) {
        MDB_val ok = {out[i].klen, out[i].key}, ov = {out[i].vlen, out[i].val};
        REQUIRE(mdb_put(txn, windows, &ok, &ov, 0) == 0);
        isoprof_free(out[i].val);
    }
    MDB_val sk = {12, "stored_bytes"}, sv;
    REQUIRE(mdb_get(txn, meta, &sk, &sv) == 0 && sv.mv_size == 8);
    uint8_t nb[8];
    store_be64_put(nb, store_be64_get(sv.mv_data) - lost);
    MDB_val nv = {8, nb};
    REQUIRE(mdb_put(txn, meta, &sk, &nv, 0) == 0);
    MDB_val fk = {6, "format"}, fv = {12, "ISOPROF\0\0\0\0\x05"};
    REQUIRE(mdb_put(txn, meta, &fk, &fv, 0) == 0);
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
}

/* The version byte of window id's record, read with the raw API (the
 * store never rewrites a window's record). */
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

/* store_verify with the records, as `isoprof store check` runs it. */
static int verify_clean(const char *path)
{
    char *why = NULL;
    int rc = store_verify(path, STORE_VERIFY_RECORDS, 60000, &why);
    if (rc != 0)
        fprintf(stderr, "store_verify: %s\n%s", isoprof_strerror(rc), why ? why : "");
    isoprof_free(why);
    return rc;
}

TEST(schema5_store)
{
    const char *path = tmp_store_path();
    struct store *s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    uint64_t ids[4];
    /* As a schema 5 build was given them: threads, no pid, no container
     * (the labels given here are dropped by make_schema5's downgrade). */
    for (int i = 0; i < 4; i++)
        ids[i] = put_pc(s, "w", "v", T0 + (uint64_t)i * SEC, (uint32_t)i + 1,
                        i == 3 ? STORE_TYPE_HEAP : STORE_TYPE_CPU, 555, "gone",
                        i == 2 ? "pool-1" : NULL, 0, NULL);
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
    make_schema5(path, ids[0], ids[1]);

    /* A reader takes schema 5 as it is: every window reads as of pid 0 and
     * no container, the sizes are those of the old records. */
    s = open_ro(path);
    REQUIRE(s != NULL);
    struct store_stat st = stat_of(s);
    CHECK_EQ_INT(st.schema_version, 5);
    CHECK_EQ_INT(st.windows, 4);
    /* per window the pid and "gone"; "main" of v1 and v2; v1's 40 bytes */
    CHECK_EQ_INT(st.stored_bytes, before - 4 * (4 + 4) - 2 * 4 - 40);
    CHECK_EQ_INT(rec_version(s, ids[0]), 1);
    CHECK_EQ_INT(rec_version(s, ids[1]), 2);
    CHECK_EQ_INT(rec_version(s, ids[2]), 3);
    CHECK_EQ_INT(rec_version(s, ids[3]), 3);
    CHECK_STR(labels_of(s, NULL),
              want("%" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64 ":0:", ids[0], ids[1],
                   ids[2], ids[3]));
    struct seen *l;
    int rc;
    l = list(s, NULL, &rc);
    REQUIRE(rc == 0 && l->n == 4);
    CHECK_STR(l->w[2].thread, "pool-1"); /* version 3 keeps its thread */
    CHECK_STR(l->w[0].thread, "main");
    struct store_filter flt = {.pid = 555};
    CHECK_EQ_INT(count_of(s, &flt), 0);
    CHECK_STR(peek_labels(s), want("%" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64 ":0:",
                                   ids[3], ids[0], ids[1], ids[2])); /* evidence first */
    for (int i = 0; i < 4; i++) {
        void *out = NULL;
        size_t len = 0;
        CHECK_EQ_INT(store_load(s, ids[i], &out, &len), 0);
        CHECK_EQ_INT(len, 3000);
        isoprof_free(out);
    }
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    CHECK_EQ_INT(verify_clean(path), 0);

    /* A writer upgrades it in place: schema 6, old records untouched (pid
     * 0, no container), new ones with their labels; the counter exact. */
    s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(stat_of(s).schema_version, STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(STORE_SCHEMA_VERSION, 6);
    CHECK_EQ_INT(rec_version(s, ids[0]), 1);
    CHECK_EQ_INT(rec_version(s, ids[1]), 2);
    CHECK_EQ_INT(rec_version(s, ids[2]), 3);
    CHECK_EQ_INT(check_clean(s), 0);
    uint64_t n1 =
        put_pc(s, "w", "v", T0 + 10 * SEC, 9, STORE_TYPE_CPU, 555, CT64, "pool-1", a.id, NULL);
    uint64_t n2 = put_pc(s, "w", "v", T0 + 11 * SEC, 9, STORE_TYPE_CPU, 0, NULL, NULL, 0, NULL);
    REQUIRE(n1 && n2);
    CHECK_EQ_INT(rec_version(s, n1), STORE_REC_VERSION);
    CHECK_EQ_INT(rec_version(s, n2), 4);
    CHECK_STR(labels_of(s, NULL), want("%" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64
                                       ":0: %" PRIu64 ":555:" CT64 " %" PRIu64 ":0:",
                                       ids[0], ids[1], ids[2], ids[3], n1, n2));
    flt = (struct store_filter){.pid = 555};
    CHECK_STR(labels_of(s, &flt), want("%" PRIu64 ":555:" CT64, n1));
    flt.worker = "w";
    CHECK_STR(labels_of(s, &flt), want_buf);
    flt = (struct store_filter){.pinned = STORE_PINNED_ANY, .pid = 555};
    CHECK_STR(labels_of(s, &flt), want("%" PRIu64 ":555:" CT64, n1));
    st = stat_of(s);
    CHECK_EQ_INT(st.stored_bytes, listed_bytes(s) + st.dict_bytes);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* The mixed store (records of versions 1 to 4) passes the whole check
     * `isoprof store check` runs, and reads as schema 6 for readers too. */
    CHECK_EQ_INT(verify_clean(path), 0);
    s = open_ro(path);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(stat_of(s).schema_version, STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(count_of(s, NULL), 6);
    flt = (struct store_filter){.pid = 555};
    CHECK_STR(labels_of(s, &flt), want("%" PRIu64 ":555:" CT64, n1));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

enum ct_damage { CT_SLASH, CT_SPACE, CT_LEN_LONG, CT_LEN_PAST };

/* Damage the container of window id behind the store's back. */
static int damage_container(struct store *s, uint64_t id, enum ct_damage d)
{
    MDB_txn *txn;
    if (mdb_txn_begin(s->env, NULL, 0, &txn) != 0)
        return -1;
    MDB_val kv, dv;
    struct store_key key;
    int rc = -1;
    if (store_window_by_seq(s, txn, id, &kv, &key, &dv) == 0) {
        uint8_t *copy = isoprof_malloc(dv.mv_size);
        uint8_t wk[STORE_KEY_MAX];
        if (copy == NULL) {
            mdb_txn_abort(txn);
            return -1;
        }
        memcpy(copy, dv.mv_data, dv.mv_size);
        memcpy(wk, kv.mv_data, kv.mv_size);
        size_t at = STORE_REC_FIXED + copy[3] + copy[STORE_REC_THREAD_OFF];
        switch (d) {
        case CT_SLASH:
            copy[at + 1] = '/';
            break;
        case CT_SPACE:
            copy[at] = ' ';
            break;
        case CT_LEN_LONG:
            copy[STORE_REC_CONTAINER_OFF] = STORE_CONTAINER_MAX + 1;
            break;
        case CT_LEN_PAST: /* the record is cut inside the container */
            dv.mv_size = at + 3;
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

static void expect_container_damage(enum ct_damage d, const char *needle)
{
    const char *path = tmp_store_path();
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    uint64_t ids[4];
    for (int i = 0; i < 4; i++)
        ids[i] = put_pc(s, "w", "v", T0 + (uint64_t)i * SEC, (uint32_t)i, STORE_TYPE_CPU, 31337,
                        "abcdef0123", NULL, 0, NULL);
    REQUIRE(check_clean(s) == 0);
    REQUIRE(damage_container(s, ids[2], d) == 0);
    char *why = NULL;
    CHECK_EQ_INT(store_check(s, &why), ISOPROF_ECORRUPT);
    if (why == NULL || strstr(why, needle) == NULL) {
        fprintf(stderr, "damage %d: wanted '%s' in:\n%s", (int)d, needle, why ? why : "(null)\n");
        CHECK(0);
    }
    isoprof_free(why);
    /* The window is skipped by listings and cannot be loaded; the others
     * still can. */
    struct store_filter f = {.pid = 31337};
    CHECK_EQ_INT(count_of(s, &f), 3);
    void *out = NULL;
    size_t len;
    CHECK_EQ_INT(store_load(s, ids[2], &out, &len), ISOPROF_ECORRUPT);
    CHECK_EQ_INT(store_load(s, ids[3], &out, &len), 0);
    isoprof_free(out);
    store_close(s);
    /* `isoprof store check` says so too. */
    why = NULL;
    CHECK_EQ_INT(store_verify(path, STORE_VERIFY_RECORDS, 60000, &why), ISOPROF_ECORRUPT);
    CHECK(why != NULL && strstr(why, needle) != NULL);
    isoprof_free(why);
}

TEST(check_finds_damaged_container)
{
    expect_container_damage(CT_SLASH, "container label not of [0-9A-Za-z_.-]");
    expect_container_damage(CT_SPACE, "container label not of [0-9A-Za-z_.-]");
    expect_container_damage(CT_LEN_LONG, "container label longer than the record");
    expect_container_damage(CT_LEN_PAST, "container label longer than the record");
}

int main(void)
{
    RUN(round_trip_and_filter);
    RUN(container_refused);
    RUN(budget_container);
    RUN(schema5_store);
    RUN(check_finds_damaged_container);
    TEST_EXIT();
}

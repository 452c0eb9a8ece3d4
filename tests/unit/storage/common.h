/*
 * common.h - helpers shared by the storage tests: temporary store
 * directories (removed at exit, also when a test fails), window records
 * with deterministic pseudo-pprof payloads, and collecting a listing.
 */
#ifndef ISOPROF_TEST_STORAGE_COMMON_H
#define ISOPROF_TEST_STORAGE_COMMON_H

#include "../scratch.h"
#include "../test.h"

#include "base.h"
#include "store.h"
#include "store_internal.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC 1000000000ull
#define DAY (86400ull * SEC)
#define T0 (1764000000ull * SEC) /* a fixed wall-clock origin */

/* A path inside a fresh temporary directory that does not exist yet. */
__attribute__((unused)) static const char *tmp_store_path(void)
{
    static char p[64][300];
    static int n;
    const char *d = tmp_dir();
    snprintf(p[n % 64], sizeof(p[0]), "%s/store", d);
    return p[n++ % 64];
}

struct test_rec {
    struct store_record r;
    uint8_t *payload;
};

static void rec_make(struct test_rec *t, const char *worker, const char *version, uint64_t start,
                     uint32_t isolate, uint8_t type, size_t len, uint64_t seed)
{
    memset(t, 0, sizeof(*t));
    t->payload = isoprof_malloc(len ? len : 1);
    if (t->payload == NULL)
        abort();
    fill_payload(t->payload, len, seed);
    t->r.w.worker = worker;
    t->r.w.version = version;
    t->r.w.runtime = "node-20.11.0";
    t->r.w.start_ns = start;
    t->r.w.end_ns = start + 10 * SEC;
    t->r.w.isolate = isolate;
    t->r.w.type = type;
    t->r.w.flags = 0;
    t->r.w.samples = 1000 + seed;
    t->r.w.interval = 10000000;
    t->r.pprof = t->payload;
    t->r.len = len;
}

static void rec_free(struct test_rec *t)
{
    isoprof_free(t->payload);
}

/* Put one window; returns store_put's code, the id in *id. */
__attribute__((unused)) static int put_one(struct store *s, const char *worker, const char *version,
                                           uint64_t start, uint32_t isolate, uint8_t type,
                                           size_t len, uint64_t *id)
{
    struct test_rec t;
    rec_make(&t, worker, version, start, isolate, type, len, start ^ isolate);
    int rc = store_put(s, &t.r, 1, NULL);
    if (id)
        *id = t.r.w.id;
    rec_free(&t);
    return rc;
}

/* The window labels' length in a version 5 record. */
__attribute__((unused)) static size_t rec_labels_len(const uint8_t *rec)
{
    return (size_t)rec[STORE_REC_LABELS_OFF] << 8 | rec[STORE_REC_LABELS_OFF + 1];
}

/*
 * The record val (vlen bytes, the current version 5) in an older layout, as
 * an older build wrote it: version 4 (schema 6) is version 5 without the
 * frame figures and the window labels (92 fixed bytes); version 3 (schema
 * 5) is version 4 without the pid and the container (88 fixed bytes, the
 * container's length byte reserved, zero); version 2 (schemas 2 to 4) is
 * version 3 without the thread (its length byte reserved, zero); version 1
 * (schema 1) is also without the anomaly, dictionary and memory fields
 * (the runtime at 48). Allocated (isoprof_free); *outlen its size. NULL if
 * val is not a version 5 record or version is not 1 to 4.
 */
__attribute__((unused)) static uint8_t *rec_downgrade(const uint8_t *val, size_t vlen, int version,
                                                      size_t *outlen)
{
    if (vlen < STORE_REC_FIXED || val[1] != 5 || version < 1 || version > 4)
        return NULL;
    size_t rl = val[3], tl = val[STORE_REC_THREAD_OFF], cl = val[STORE_REC_CONTAINER_OFF];
    size_t ll = rec_labels_len(val);
    size_t rest = vlen - STORE_REC_FIXED - rl - tl - cl - ll; /* the frame */
    size_t fixed = version == 1  ? STORE_REC_FIXED_V1
                   : version < 4 ? STORE_REC_FIXED_V2
                                 : STORE_REC_FIXED_V4;
    size_t keep_tl = version >= 3 ? tl : 0; /* the thread, versions 3 and 4 */
    size_t keep_cl = version == 4 ? cl : 0; /* the container, version 4 */
    uint8_t *out = isoprof_malloc(fixed + rl + keep_tl + keep_cl + rest);
    if (out == NULL)
        abort();
    memcpy(out, val, fixed);
    out[1] = (uint8_t)version;
    if (version == 2 || version == 3)
        out[STORE_REC_CONTAINER_OFF] = 0;
    if (version == 2)
        out[STORE_REC_THREAD_OFF] = 0;
    uint8_t *q = out + fixed;
    memcpy(q, val + STORE_REC_FIXED, rl + keep_tl);
    memcpy(q + rl + keep_tl, val + STORE_REC_FIXED + rl + tl, keep_cl);
    memcpy(q + rl + keep_tl + keep_cl, val + STORE_REC_FIXED + rl + tl + cl + ll, rest);
    *outlen = fixed + rl + keep_tl + keep_cl + rest;
    return out;
}

/* A listing, copied out of the callback. */
struct seen {
    size_t n;
    struct {
        uint64_t id, start, raw, stored;
        uint32_t isolate, pid;
        uint8_t type;
        char worker[64], version[64], runtime[32], thread[STORE_THREAD_MAX + 1];
        char container[STORE_CONTAINER_MAX + 1];
    } w[4096];
};

static int seen_on_window(const struct store_window *w, void *arg)
{
    struct seen *s = arg;
    if (s->n >= ISOPROF_ARRAY_SIZE(s->w))
        return 99;
    s->w[s->n].id = w->id;
    s->w[s->n].start = w->start_ns;
    s->w[s->n].raw = w->raw_size;
    s->w[s->n].stored = w->stored_size;
    s->w[s->n].isolate = w->isolate;
    s->w[s->n].pid = w->pid;
    s->w[s->n].type = w->type;
    snprintf(s->w[s->n].worker, sizeof(s->w[0].worker), "%s", w->worker);
    snprintf(s->w[s->n].version, sizeof(s->w[0].version), "%s", w->version);
    snprintf(s->w[s->n].runtime, sizeof(s->w[0].runtime), "%s", w->runtime);
    snprintf(s->w[s->n].thread, sizeof(s->w[0].thread), "%s", w->thread ? w->thread : "(null)");
    snprintf(s->w[s->n].container, sizeof(s->w[0].container), "%s",
             w->container ? w->container : "(null)");
    s->n++;
    return 0;
}

__attribute__((unused)) static struct seen *list(struct store *s, const struct store_filter *f,
                                                 int *rc)
{
    static struct seen out;
    memset(&out, 0, sizeof(out));
    *rc = store_windows(s, f, seen_on_window, &out);
    return &out;
}

/* store_open with options o; NULL (and a line on stderr) on failure. */
__attribute__((unused)) static struct store *open_with(const char *path,
                                                       const struct store_options *o)
{
    struct store *s = NULL;
    char *why = NULL;
    int rc = store_open(path, o, &s, &why);
    if (rc != 0) {
        fprintf(stderr, "store_open(%s): %s: %s\n", path, isoprof_strerror(rc), why ? why : "");
        isoprof_free(why);
        return NULL;
    }
    return s;
}

__attribute__((unused)) static struct store *open_rw(const char *path, uint64_t max_size)
{
    struct store_options o = {.max_size = max_size};
    return open_with(path, &o);
}

__attribute__((unused)) static int check_clean(struct store *s)
{
    char *why = NULL;
    int rc = store_check(s, &why);
    if (rc != 0)
        fprintf(stderr, "store_check: %s\n%s", isoprof_strerror(rc), why ? why : "");
    isoprof_free(why);
    return rc;
}

/*
 * A read-only process beside the writer. reader_start forks a child that
 * opens the store at path read-only and calls step(r, 0, arg); once that
 * is done the parent goes on, and reader_finish lets the child call
 * step(r, 1, arg), check the store and exit, and returns its exit status
 * (0: all passed; else the step's nonzero value, or 10+ for the harness).
 * The child never touches the parent's handle.
 */
typedef int (*reader_step)(struct store *r, int step, void *arg);

struct reader {
    pid_t pid;
    int p2c[2], c2p[2];
};

__attribute__((unused)) static int wait_byte(int fd)
{
    char c;
    return read(fd, &c, 1) == 1 ? 0 : -1;
}

__attribute__((unused)) static void send_byte(int fd)
{
    char c = 'x';
    if (write(fd, &c, 1) != 1)
        abort();
}

__attribute__((unused)) static void reader_close(struct reader *rd)
{
    close(rd->p2c[0]);
    close(rd->p2c[1]);
    close(rd->c2p[0]);
    close(rd->c2p[1]);
}

__attribute__((unused)) static int reader_start(struct reader *rd, const char *path,
                                                reader_step step, void *arg)
{
    if (pipe(rd->p2c) != 0)
        return -1;
    if (pipe(rd->c2p) != 0) {
        close(rd->p2c[0]);
        close(rd->p2c[1]);
        return -1;
    }
    fflush(stderr);
    rd->pid = fork();
    if (rd->pid < 0) {
        reader_close(rd);
        return -1;
    }
    if (rd->pid == 0) {
        struct store_options ro = {.readonly = 1};
        struct store *r = NULL;
        int rc;
        if (store_open(path, &ro, &r, NULL) != 0)
            _exit(10);
        if ((rc = step(r, 0, arg)) != 0)
            _exit(rc);
        send_byte(rd->c2p[1]);
        if (wait_byte(rd->p2c[0]) != 0)
            _exit(11);
        if ((rc = step(r, 1, arg)) != 0)
            _exit(rc);
        if (check_clean(r) != 0)
            _exit(12);
        store_close(r);
        _exit(0);
    }
    if (wait_byte(rd->c2p[0]) != 0) {
        /* The child failed before its first step was done. */
        reader_close(rd);
        int status = 0;
        waitpid(rd->pid, &status, 0);
        fprintf(stderr, "reader: exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return -1;
    }
    return 0;
}

__attribute__((unused)) static int reader_finish(struct reader *rd)
{
    send_byte(rd->p2c[1]);
    int status = 0;
    pid_t got = waitpid(rd->pid, &status, 0);
    reader_close(rd);
    if (got != rd->pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/*
 * Put one window of process pid in container ct, thread th (0, NULL, NULL:
 * as callers that predate the labels), pinned to anomaly pin (0: none),
 * with one payload for all; its id, 0 on failure (*rc receives store_put's
 * code if rc is set).
 */
__attribute__((unused)) static uint64_t put_labelled(struct store *s, const char *worker,
                                                     const char *version, uint64_t start,
                                                     uint32_t isolate, uint8_t type, uint32_t pid,
                                                     const char *ct, const char *th, uint64_t pin,
                                                     int *rc)
{
    struct test_rec t;
    rec_make(&t, worker, version, start, isolate, type, 3000, 17);
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

/* store_open of an outbox store of budget max_size (0: none); NULL (and a
 * line on stderr) on failure. */
__attribute__((unused)) static struct store *open_outbox(const char *path, uint64_t max_size)
{
    struct store_options o = {.outbox = 1, .max_size = max_size};
    return open_with(path, &o);
}

/* store_open read-only; NULL (and a line on stderr) on failure. */
__attribute__((unused)) static struct store *open_ro(const char *path)
{
    struct store_options o = {.readonly = 1};
    return open_with(path, &o);
}

/* The number of windows listed for f; (size_t)-1 if the listing failed. */
__attribute__((unused)) static size_t count_of(struct store *s, const struct store_filter *f)
{
    int rc;
    struct seen *l = list(s, f, &rc);
    return rc == 0 ? l->n : (size_t)-1;
}

/* store_stat of s, a failure CHECKed (and all zero then). */
__attribute__((unused)) static struct store_stat stat_checked(struct store *s)
{
    struct store_stat st;
    memset(&st, 0, sizeof(st));
    CHECK_EQ_INT(store_stat(s, &st), 0);
    return st;
}

/* The sum of the listed windows' stored_size. */
__attribute__((unused)) static uint64_t listed_bytes(struct store *s)
{
    int rc;
    struct seen *l = list(s, NULL, &rc);
    uint64_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        n += l->w[i].stored;
    return n;
}

/*
 * Windows as words for comparing with want(): "id:thread" (WORDS_THREAD)
 * or "id:pid:container" (WORDS_PID_CT), a NULL label as "(null)".
 */
enum words { WORDS_THREAD, WORDS_PID_CT };
#define WORDS_MAX 8192 /* the size of every words buffer */

/* Append the word of one window (id, pid, thread th, container ct) to the
 * string out of WORDS_MAX bytes, after a space if out is not empty. */
__attribute__((unused)) static void words_add(char *out, enum words k, uint64_t id, uint32_t pid,
                                              const char *th, const char *ct)
{
    size_t n = strlen(out);
    const char *sp = n ? " " : "";
    if (k == WORDS_THREAD)
        snprintf(out + n, WORDS_MAX - n, "%s%" PRIu64 ":%s", sp, id, th ? th : "(null)");
    else
        snprintf(out + n, WORDS_MAX - n, "%s%" PRIu64 ":%" PRIu32 ":%s", sp, id, pid,
                 ct ? ct : "(null)");
}

/* The listing of f as words k, in listing order ("error N" if it failed). */
__attribute__((unused)) static const char *words_of(struct store *s, const struct store_filter *f,
                                                    enum words k)
{
    static char out[WORDS_MAX];
    int rc;
    struct seen *l = list(s, f, &rc);
    out[0] = '\0';
    if (rc != 0)
        snprintf(out, sizeof(out), "error %d", rc);
    for (size_t i = 0; rc == 0 && i < l->n; i++)
        words_add(out, k, l->w[i].id, l->w[i].pid, l->w[i].thread, l->w[i].container);
    return out;
}

struct peek_words_arg {
    enum words k;
    char *out;
};

__attribute__((unused)) static int peek_words_on(const struct store_window *w, uint64_t queued,
                                                 void *arg)
{
    (void)queued;
    struct peek_words_arg *a = arg;
    words_add(a->out, a->k, w->id, w->pid, w->thread, w->container);
    return 0;
}

/* What store_outbox_peek hands out (up to 100 windows) as words k, in
 * its order ("error N" if it failed). */
__attribute__((unused)) static const char *peek_words(struct store *s, enum words k)
{
    static char out[WORDS_MAX];
    struct peek_words_arg a = {k, out};
    out[0] = '\0';
    int rc = store_outbox_peek(s, 100, peek_words_on, &a);
    if (rc != 0)
        snprintf(out, sizeof(out), "error %d", rc);
    return out;
}

/* The expected string, printf-style; also left in want_buf, to compare
 * again with a later result. */
__attribute__((unused)) static char want_buf[WORDS_MAX];
__attribute__((unused, format(printf, 1, 2))) static const char *want(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want_buf, sizeof(want_buf), fmt, ap);
    va_end(ap);
    return want_buf;
}

/* Each of the n windows ids loads, len bytes long (CHECKed). */
__attribute__((unused)) static void check_loads(struct store *s, const uint64_t *ids, int n,
                                                size_t len)
{
    for (int i = 0; i < n; i++) {
        void *out = NULL;
        size_t got = 0;
        CHECK_EQ_INT(store_load(s, ids[i], &out, &got), 0);
        CHECK_EQ_INT(got, len);
        isoprof_free(out);
    }
}

/* The version byte of window id's record, read with the raw API (the
 * store never rewrites a window's record); -1 if it is not found. */
__attribute__((unused)) static int rec_version(struct store *s, uint64_t id)
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

/*
 * Make the store at path what a build of schema (4, 5 or 6) would have
 * left after upgrades: every window record in that schema's version (2 for
 * schema 4, 3 for 5, 4 for 6), but the window with id v1_id in version 1 (as one
 * stored before schema 2) and the one with id v2_id in version 2 (as one
 * stored before schema 5), 0 for none; for schema 4 every anomaly in
 * version 1 (no thread), for 5 and 6 in version 2 (no limit); stored_bytes
 * down by what the records lost; the schema in meta.
 */
__attribute__((unused)) static void make_old_schema(const char *path, int schema, uint64_t v1_id,
                                                    uint64_t v2_id)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi windows, anomalies = 0, meta;
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
    REQUIRE(schema >= 4 && schema <= 6);
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
        uint64_t seq = store_be64_get((const uint8_t *)v.mv_data + STORE_REC_SEQ_OFF);
        int ver = seq == v1_id ? 1 : seq == v2_id ? 2 : schema - 2;
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
        /* version 4: 40 fixed bytes, limit:u64 and its source:u8, the
         * thread, the findings' length:u32 and bytes, the windows;
         * version 2 without the limit and the findings; version 1
         * without the thread either */
        const uint8_t *p = v.mv_data;
        REQUIRE(v.mv_size >= 54 && p[1] == 4 && k.mv_size <= sizeof(out[n].key));
        size_t tl = p[49];
        size_t dl = 4 + store_be32_get(p + 50 + tl); /* the findings, their length too */
        out[n].db = anomalies;
        out[n].vlen = v.mv_size - 9 - dl - (schema == 4 ? 1 + tl : 0);
        out[n].val = isoprof_malloc(out[n].vlen);
        REQUIRE(out[n].val != NULL);
        memcpy(out[n].val, p, 40);
        size_t o = 40;
        if (schema != 4) {
            memcpy(out[n].val + o, p + 49, 1 + tl);
            o += 1 + tl;
        }
        memcpy(out[n].val + o, p + 50 + tl + dl, v.mv_size - 50 - tl - dl);
        out[n].val[1] = schema == 4 ? 1 : 2;
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
    uint8_t fmt[12] = "ISOPROF\0\0\0\0";
    fmt[11] = (uint8_t)schema;
    MDB_val fk = {6, "format"}, fv = {12, fmt};
    REQUIRE(mdb_put(txn, meta, &fk, &fv, 0) == 0);
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
}

/*
 * A new outbox store at path as the tests of an older schema start it,
 * then closed and made a store of that schema by make_old_schema (ids[0]
 * in version 1, ids[1] in version 2): four windows, window i at T0 + i s
 * of isolate i + 1 (the last a heap window, the others CPU), of process
 * pid in container ct, of thread th2 for window 2 and NULL for the others,
 * their ids in ids; an open memory_near_limit anomaly of isolate 4
 * pinning the heap window, in *a; stored_bytes before the downgrade in
 * *before. 0, or -1 (CHECKed) if a step failed.
 */
__attribute__((unused)) static int make_old_store(const char *path, int schema, uint32_t pid,
                                                  const char *ct, const char *th2, uint64_t ids[4],
                                                  struct store_anomaly *a, uint64_t *before)
{
    struct store *s = open_outbox(path, 0);
    CHECK(s != NULL);
    if (s == NULL)
        return -1;
    for (int i = 0; i < 4; i++)
        ids[i] = put_labelled(s, "w", "v", T0 + (uint64_t)i * SEC, (uint32_t)i + 1,
                              i == 3 ? STORE_TYPE_HEAP : STORE_TYPE_CPU, pid, ct,
                              i == 2 ? th2 : NULL, 0, NULL);
    CHECK(ids[0] && ids[1] && ids[2] && ids[3]);
    if (!(ids[0] && ids[1] && ids[2] && ids[3]))
        return -1;
    *a = (struct store_anomaly){.kind = STORE_ANOMALY_MEMORY_NEAR_LIMIT,
                                .worker = "w",
                                .version = "v",
                                .isolate = 4,
                                .start_ns = T0 + 3 * SEC,
                                .end_ns = T0 + 3 * SEC,
                                .value = 100,
                                .threshold = 90,
                                .flags = STORE_ANOMALY_OPEN};
    int rc = store_anomaly_put(s, a, 1u << STORE_TYPE_HEAP);
    CHECK_EQ_INT(rc, 0);
    if (rc != 0)
        return -1;
    *before = stat_checked(s).stored_bytes;
    store_close(s);
    make_old_schema(path, schema, ids[0], ids[1]);
    return 0;
}

/* Make the store at path what an older build left: DB drop (empty) gone,
 * meta key meta_del (NULL: none) gone, the format of schema. */
__attribute__((unused)) static void downgrade_schema(const char *path, const char *drop,
                                                     const char *meta_del, int schema)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    REQUIRE(mdb_env_create(&env) == 0);
    mdb_env_set_maxdbs(env, 16);
    REQUIRE(mdb_env_open(env, path, 0, 0640) == 0);
    REQUIRE(mdb_txn_begin(env, NULL, 0, &txn) == 0);
    REQUIRE(mdb_dbi_open(txn, drop, 0, &dbi) == 0);
    MDB_stat ms;
    REQUIRE(mdb_stat(txn, dbi, &ms) == 0 && ms.ms_entries == 0);
    REQUIRE(mdb_drop(txn, dbi, 1) == 0);
    REQUIRE(mdb_dbi_open(txn, "meta", 0, &dbi) == 0);
    uint8_t fmt[12] = "ISOPROF\0\0\0\0";
    fmt[11] = (uint8_t)schema;
    MDB_val f = {6, "format"}, v = {12, fmt};
    if (meta_del != NULL) {
        MDB_val k = {strlen(meta_del), (void *)meta_del};
        REQUIRE(mdb_del(txn, dbi, &k, NULL) == 0);
    }
    REQUIRE(mdb_put(txn, dbi, &f, &v, 0) == 0);
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
}

/* store_verify with the records, as `isoprof store check` runs it. */
__attribute__((unused)) static int verify_clean(const char *path)
{
    char *why = NULL;
    int rc = store_verify(path, STORE_VERIFY_RECORDS, 60000, &why);
    if (rc != 0)
        fprintf(stderr, "store_verify: %s\n%s", isoprof_strerror(rc), why ? why : "");
    isoprof_free(why);
    return rc;
}

/* Changes a copy of a window's record for rec_rewrite: its bytes, or its
 * length *len made shorter; how is the caller's own code. */
typedef void (*rec_edit)(uint8_t *rec, size_t *len, int how);

/* Rewrite window id's record behind the store's back, as edit(rec, &len,
 * how) changed a copy of it. 0, or -1 if no such window or a step failed. */
__attribute__((unused)) static int rec_rewrite(struct store *s, uint64_t id, rec_edit edit, int how)
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
        size_t len = dv.mv_size;
        edit(copy, &len, how);
        MDB_val k2 = {kv.mv_size, wk}, v2 = {len, copy};
        rc = mdb_put(txn, s->windows, &k2, &v2, 0);
        isoprof_free(copy);
    }
    if (rc != 0) {
        mdb_txn_abort(txn);
        return -1;
    }
    return mdb_txn_commit(txn) == 0 ? 0 : -1;
}

/* store_check on s reports the store corrupt, with needle in its report;
 * else the report goes to stderr, labelled damage d (a test's own code). */
__attribute__((unused)) static void check_corrupt(struct store *s, int d, const char *needle)
{
    char *why = NULL;
    CHECK_EQ_INT(store_check(s, &why), ISOPROF_ECORRUPT);
    if (why == NULL || strstr(why, needle) == NULL) {
        fprintf(stderr, "damage %d: wanted '%s' in:\n%s", d, needle, why ? why : "(null)\n");
        CHECK(0);
    }
    isoprof_free(why);
}

/* The listing's stored sizes are those store_put gave the n windows of r
 * (stored in that order, alone in s) and store_stat's stored_bytes is
 * their sum (CHECKed). */
__attribute__((unused)) static void check_stored_sizes(struct store *s,
                                                       const struct store_record *r, size_t n)
{
    int rc;
    struct seen *l = list(s, NULL, &rc);
    REQUIRE(rc == 0 && l->n == n);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_INT(l->w[i].stored, r[i].w.stored_size);
        sum += r[i].w.stored_size;
    }
    CHECK_EQ_INT(stat_checked(s).stored_bytes, sum);
}

/* Put window i (0 to 3) of a damage test; its id, 0 on failure. */
typedef uint64_t (*damage_put)(struct store *s, int i);

/*
 * A fresh store of four windows put by put, the third's record then
 * changed by edit(how): store_check reports needle; the window is skipped
 * by listings (of f, which the four match: 3 listed) and does not load
 * while the fourth does; store_verify with the records, as `isoprof store
 * check` runs it, reports needle too (all CHECKed).
 */
__attribute__((unused)) static void expect_record_damage(damage_put put, rec_edit edit, int how,
                                                         const struct store_filter *f,
                                                         const char *needle)
{
    const char *path = tmp_store_path();
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    uint64_t ids[4];
    for (int i = 0; i < 4; i++)
        ids[i] = put(s, i);
    REQUIRE(ids[0] && ids[1] && ids[2] && ids[3]);
    REQUIRE(check_clean(s) == 0);
    REQUIRE(rec_rewrite(s, ids[2], edit, how) == 0);
    check_corrupt(s, how, needle);
    CHECK_EQ_INT(count_of(s, f), 3);
    void *out = NULL;
    size_t len;
    CHECK_EQ_INT(store_load(s, ids[2], &out, &len), ISOPROF_ECORRUPT);
    CHECK_EQ_INT(store_load(s, ids[3], &out, &len), 0);
    isoprof_free(out);
    store_close(s);
    char *why = NULL;
    CHECK_EQ_INT(store_verify(path, STORE_VERIFY_RECORDS, 60000, &why), ISOPROF_ECORRUPT);
    CHECK(why != NULL && strstr(why, needle) != NULL);
    isoprof_free(why);
}

#endif

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

/*
 * The record val (vlen bytes, the current version 4) in an older layout, as
 * an older build wrote it: version 3 (schema 5) is version 4 without the
 * pid and the container (88 fixed bytes, the container's length byte
 * reserved, zero); version 2 (schemas 2 to 4) is version 3 without the
 * thread (its length byte reserved, zero); version 1 (schema 1) is also
 * without the anomaly, dictionary and memory fields (the runtime at 48).
 * Allocated (isoprof_free); *outlen its size. NULL if val is not a
 * version 4 record or version is not 1 to 3.
 */
__attribute__((unused)) static uint8_t *rec_downgrade(const uint8_t *val, size_t vlen, int version,
                                                      size_t *outlen)
{
    if (vlen < STORE_REC_FIXED || val[1] != 4 || version < 1 || version > 3)
        return NULL;
    size_t rl = val[3], tl = val[STORE_REC_THREAD_OFF], cl = val[STORE_REC_CONTAINER_OFF];
    size_t rest = vlen - STORE_REC_FIXED - rl - tl - cl; /* the frame */
    size_t fixed = version == 1 ? STORE_REC_FIXED_V1 : STORE_REC_FIXED_V2;
    size_t keep_tl = version == 3 ? tl : 0; /* the thread, version 3 only */
    uint8_t *out = isoprof_malloc(fixed + rl + keep_tl + rest);
    if (out == NULL)
        abort();
    memcpy(out, val, fixed);
    out[1] = (uint8_t)version;
    if (version >= 2)
        out[STORE_REC_CONTAINER_OFF] = 0;
    if (version == 2)
        out[STORE_REC_THREAD_OFF] = 0;
    memcpy(out + fixed, val + STORE_REC_FIXED, rl);
    memcpy(out + fixed + rl, val + STORE_REC_FIXED + rl, keep_tl);
    memcpy(out + fixed + rl + keep_tl, val + STORE_REC_FIXED + rl + tl + cl, rest);
    *outlen = fixed + rl + keep_tl + rest;
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

#endif

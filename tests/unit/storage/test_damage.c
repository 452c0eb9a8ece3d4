/*
 * test_damage.c - a damaged data.mdb is refused or reported, never a
 * crash: store_open refuses a file cut short (read-only and writable),
 * store_verify reports truncation, damaged meta pages and random bit flips
 * and turns a walk that faults into a report, and a store it passes can be
 * opened, read and written without a fault. Healthy stores pass, also one
 * whose file is legitimately shorter than its last page (pages LMDB freed
 * before writing them).
 *
 * What the check does around the store, and what it is not: a check child
 * that opens a store without lock.mdb leaves one that the store's owner
 * can open; a check that cannot run (no pipe) or whose child is killed
 * (SIGKILL) is no verdict of damage; one bound covers the whole check at
 * start, and store_open neither repeats the free list check that
 * store_verify passed nor refuses a store because its own could not
 * finish after the walk did not.
 *
 * Every attempt that could fault runs in a fork of this test, which must
 * exit normally: the test process itself never dies. To hold a check
 * child where the test wants it, the test takes the lock mdb_env_open
 * waits for (lock_hold): the child blocks there until the test has
 * killed or stopped it.
 */
#include "common.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#define VERIFY_MS 60000
#define PSIZE_GUESS 4096 /* only for choosing where to cut; the store says */

/* Run fn(arg) in a child; 0 if it exited with status 0, else -1 (and a
 * line saying how it ended). */
static int isolated(int (*fn)(const void *arg), const void *arg, const char *what)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0)
        _exit(fn(arg)); /* _exit: the parent's atexit cleanup is not the child's */
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        ;
    if (WIFSIGNALED(st)) {
        fprintf(stderr, "%s: killed by signal %d\n", what, WTERMSIG(st));
        return -1;
    }
    if (WEXITSTATUS(st) != 0) {
        fprintf(stderr, "%s: exit status %d\n", what, WEXITSTATUS(st));
        return -1;
    }
    return 0;
}

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* A store of n windows over 3 workers and 2 versions, every 20th large
 * enough for overflow pages, queued for upload, with an anomaly pinning
 * some of them. */
static int make_store(const char *path, int n)
{
    struct store_options o = {.outbox = 1};
    struct store *s = open_with(path, &o);
    if (s == NULL)
        return -1;
    static const char *workers[] = {"api", "auth", "cart"};
    for (int i = 0; i < n; i += 10) {
        struct test_rec t[10];
        struct store_record r[10];
        int k = n - i < 10 ? n - i : 10;
        for (int j = 0; j < k; j++) {
            int w = i + j;
            rec_make(&t[j], workers[w % 3], w % 2 ? "v1" : "v2", T0 + (uint64_t)w * SEC, 1 + w % 4,
                     (uint8_t)(1 + (w % 5 == 0)),
                     w % 20 == 9 ? 24000 : 300 + (size_t)(w * 37 % 2000), (uint64_t)w);
            r[j] = t[j].r;
        }
        int rc = store_put(s, r, (size_t)k, NULL);
        for (int j = 0; j < k; j++)
            rec_free(&t[j]);
        if (rc != 0) {
            store_close(s);
            return rc;
        }
    }
    struct store_anomaly a = {.kind = STORE_ANOMALY_MEMORY_NEAR_LIMIT,
                              .worker = "api",
                              .version = "v2",
                              .isolate = 1,
                              .start_ns = T0,
                              .end_ns = T0 + (uint64_t)n * SEC,
                              .value = 100,
                              .threshold = 90};
    int rc = store_anomaly_put(s, &a, (1u << STORE_TYPE_CPU) | (1u << STORE_TYPE_HEAP));
    store_close(s);
    return rc;
}

static void file_of(const char *dir, char *out, size_t cap)
{
    snprintf(out, cap, "%s/data.mdb", dir);
}

static long file_size(const char *dir)
{
    char f[512];
    struct stat st;
    file_of(dir, f, sizeof(f));
    return stat(f, &st) == 0 ? (long)st.st_size : -1;
}

/* A fresh directory holding a copy of src's data.mdb (no lock file). */
static int copy_store(const char *src, const char *dst)
{
    char a[512], b[512];
    file_of(src, a, sizeof(a));
    file_of(dst, b, sizeof(b));
    if (mkdir(dst, 0750) != 0 && errno != EEXIST)
        return -1;
    int in = open(a, O_RDONLY), out = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0640);
    int rc = in >= 0 && out >= 0 ? 0 : -1;
    char buf[65536];
    ssize_t n;
    while (rc == 0 && (n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            rc = -1;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    char lock[512];
    snprintf(lock, sizeof(lock), "%s/lock.mdb", dst);
    unlink(lock);
    return rc;
}

static int cut(const char *dir, long size)
{
    char f[512];
    file_of(dir, f, sizeof(f));
    return truncate(f, size);
}

static int flip(const char *dir, long pos, int bit)
{
    char f[512];
    file_of(dir, f, sizeof(f));
    int fd = open(f, O_RDWR);
    if (fd < 0)
        return -1;
    uint8_t b;
    int rc = pread(fd, &b, 1, pos) == 1 ? 0 : -1;
    b ^= (uint8_t)(1u << bit);
    if (rc == 0 && pwrite(fd, &b, 1, pos) != 1)
        rc = -1;
    close(fd);
    return rc;
}

static int on_window_count(const struct store_window *w, void *arg)
{
    (void)w;
    (*(uint64_t *)arg)++;
    return 0;
}

static int on_window_load(const struct store_window *w, void *arg)
{
    struct store *s = arg;
    void *p = NULL;
    size_t len = 0;
    if (store_load(s, w->id, &p, &len) == 0)
        isoprof_free(p);
    return 0;
}

static int on_anomaly(const struct store_anomaly *a, void *arg)
{
    (void)a;
    (void)arg;
    return 0;
}

static int on_outbox(const struct store_window *w, uint64_t queued, void *arg)
{
    (void)w;
    (void)queued;
    (void)arg;
    return 0;
}

/* Everything a reader and the daemon do with a store: open read-only, list,
 * load every window, stat, anomalies, outbox; open writable, put, close.
 * Returns 0, or the step that failed (the caller's exit status). */
static int use_store(const char *path, int must_open)
{
    struct store_options ro = {.readonly = 1}, rw = {.outbox = 1};
    struct store *s = NULL;
    int rc = store_open(path, &ro, &s, NULL);
    if (rc != 0)
        return must_open ? 20 : 0;
    uint64_t n = 0;
    struct store_stat st;
    store_windows(s, NULL, on_window_count, &n);
    store_windows(s, NULL, on_window_load, s);
    store_stat(s, &st);
    store_anomalies(s, NULL, on_anomaly, NULL);
    store_outbox_peek(s, 1000, on_outbox, NULL);
    store_close(s);
    if (store_open(path, &rw, &s, NULL) != 0)
        return 0; /* a writer may refuse what a reader takes (a damaged meta DB) */
    struct test_rec t[3];
    struct store_record r[3];
    for (int i = 0; i < 3; i++) {
        rec_make(&t[i], "api", "v9", T0 + 100000 * SEC + (uint64_t)i * SEC, 1, 1, 2000,
                 (uint64_t)i);
        r[i] = t[i].r;
    }
    store_put(s, r, 3, NULL); /* one commit: each one syncs */
    for (int i = 0; i < 3; i++)
        rec_free(&t[i]);
    store_close(s);
    return 0;
}

/* --- truncation --- */

struct cut_case {
    const char *path;
    long size;
    int must_refuse;
};

static int cut_attempt(const void *arg)
{
    const struct cut_case *c = arg;
    struct store_options ro = {.readonly = 1};
    struct store *s = NULL;
    char *why = NULL;
    int rc = store_open(c->path, &ro, &s, &why);
    if (rc == 0)
        store_close(s);
    if (rc != 0 && rc != ISOPROF_EDAMAGED)
        return 2;
    if (c->must_refuse && rc != ISOPROF_EDAMAGED)
        return 3;
    if (rc == ISOPROF_EDAMAGED && (why == NULL || strstr(why, "data.mdb") == NULL)) {
        fprintf(stderr, "why: %s\n", why ? why : "(null)");
        return 4;
    }
    isoprof_free(why);
    why = NULL;
    int vrc = store_verify(c->path, STORE_VERIFY_RECORDS, VERIFY_MS, &why);
    if ((rc == ISOPROF_EDAMAGED) != (vrc == ISOPROF_EDAMAGED)) {
        fprintf(stderr, "store_open %d, store_verify %d: %s\n", rc, vrc, why ? why : "");
        return 5;
    }
    if (vrc != 0 && vrc != ISOPROF_EDAMAGED && vrc != ISOPROF_ECORRUPT)
        return 6;
    if (vrc != 0 && why == NULL)
        return 7;
    isoprof_free(why);
    /* A writable open refuses it just the same (and creates nothing). */
    struct store_options rw = {0};
    rc = store_open(c->path, &rw, &s, NULL);
    if (rc == 0)
        store_close(s);
    if (c->must_refuse && rc != ISOPROF_EDAMAGED)
        return 8;
    return vrc == 0 || vrc == ISOPROF_ECORRUPT ? use_store(c->path, 1) : 0;
}

TEST(truncated)
{
    const char *src = tmp_store_path();
    REQUIRE(make_store(src, 300) == 0);
    long size = file_size(src);
    REQUIRE(size > 16 * PSIZE_GUESS);
    /* Into the first meta page, between them, right after them (every
     * tree page gone), then ever less. */
    struct {
        long at;
        int must_refuse;
    } cuts[] = {{1, 1},
                {40, 1},
                {100, 1},
                {PSIZE_GUESS, 1},
                {PSIZE_GUESS + 100, 1},
                {2 * PSIZE_GUESS, 1},
                {3 * PSIZE_GUESS, 1},
                {size / 4, 1},
                {size / 2, 1},
                {size - 2 * PSIZE_GUESS, 0},
                {size - PSIZE_GUESS, 0},
                {size - 1, 0}};
    int refused = 0;
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(cuts); i++) {
        char dst[400], what[64];
        snprintf(dst, sizeof(dst), "%s-cut%zu", src, i);
        REQUIRE(copy_store(src, dst) == 0);
        REQUIRE(cut(dst, cuts[i].at) == 0);
        struct cut_case c = {dst, cuts[i].at, cuts[i].must_refuse};
        snprintf(what, sizeof(what), "cut at %ld of %ld", cuts[i].at, size);
        CHECK(isolated(cut_attempt, &c, what) == 0);
        struct store *s = NULL;
        struct store_options ro = {.readonly = 1};
        /* Safe in this process too: the meta pages are checked first. */
        char *why = NULL;
        int rc = store_open(dst, &ro, &s, &why);
        if (rc == 0)
            store_close(s);
        refused += rc == ISOPROF_EDAMAGED;
        if (cuts[i].at == 2 * PSIZE_GUESS) {
            char want[512];
            snprintf(want, sizeof(want), "%s: data.mdb is %d bytes but its meta page says ", dst,
                     2 * PSIZE_GUESS);
            CHECK(why != NULL && strncmp(why, want, strlen(want)) == 0);
            CHECK(why != NULL && strstr(why, " pages of 4096 (the ") != NULL);
            if (why)
                fprintf(stderr, "cut to 2 pages: %s\n", why);
        }
        if (cuts[i].at == size / 2)
            CHECK(why != NULL && strstr(why, "data.mdb is ") != NULL);
        isoprof_free(why);
    }
    CHECK(refused >= 9);
}

/* --- the meta pages --- */

TEST(meta_pages)
{
    const char *src = tmp_store_path();
    REQUIRE(make_store(src, 20) == 0);
    struct store *s = NULL;
    char *why = NULL;
    struct store_options ro = {.readonly = 1};
    /* The magic of meta page 1 (after its page header). */
    char dst[400];
    snprintf(dst, sizeof(dst), "%s-m1", src);
    REQUIRE(copy_store(src, dst) == 0);
    REQUIRE(flip(dst, PSIZE_GUESS + (long)sizeof(size_t) + 8, 0) == 0);
    CHECK_EQ_INT(store_open(dst, &ro, &s, &why), ISOPROF_EDAMAGED);
    CHECK(why != NULL && strstr(why, "meta page 1 is damaged (no LMDB magic)") != NULL);
    isoprof_free(why);
    why = NULL;
    CHECK_EQ_INT(store_verify(dst, 0, VERIFY_MS, &why), ISOPROF_EDAMAGED);
    CHECK(why != NULL && why[strlen(why) - 1] == '\n');
    isoprof_free(why);
    why = NULL;
    /* Meta page 0's flags: not a meta page any more. */
    snprintf(dst, sizeof(dst), "%s-m0", src);
    REQUIRE(copy_store(src, dst) == 0);
    REQUIRE(flip(dst, (long)sizeof(size_t) + 2, 3) == 0);
    CHECK_EQ_INT(store_open(dst, NULL, &s, &why), ISOPROF_EDAMAGED);
    CHECK(why != NULL && strstr(why, "meta page 0 is damaged (not marked as a meta page)"));
    isoprof_free(why);
    why = NULL;
    /* Not LMDB at all, and nothing there. */
    CHECK_EQ_INT(store_verify(tmp_store_path(), 0, VERIFY_MS, &why), -ENOENT);
    isoprof_free(why);
    why = NULL;
    snprintf(dst, sizeof(dst), "%s-junk", src);
    REQUIRE(mkdir(dst, 0750) == 0);
    char f[512];
    file_of(dst, f, sizeof(f));
    FILE *fp = fopen(f, "wb");
    REQUIRE(fp != NULL);
    for (int i = 0; i < 3 * PSIZE_GUESS; i++)
        fputc(0x5a, fp);
    fclose(fp);
    CHECK_EQ_INT(store_verify(dst, 0, VERIFY_MS, &why), ISOPROF_EMAGIC);
    CHECK(why != NULL && strstr(why, "not an LMDB file"));
    isoprof_free(why);
}

/* --- bit flips --- */

struct flip_case {
    const char *path;
};

/* Exit status: what store_verify said (FLIP_*), or 10 and up for a failure. */
enum { FLIP_INTACT, FLIP_CORRUPT, FLIP_DAMAGED, FLIP_OTHER, FLIP_VERDICTS };

static int flip_attempt(const void *arg)
{
    const struct flip_case *c = arg;
    char *why = NULL;
    int rc = store_verify(c->path, STORE_VERIFY_RECORDS, VERIFY_MS, &why);
    if (rc != 0 && rc != ISOPROF_EDAMAGED && rc != ISOPROF_ECORRUPT && rc != ISOPROF_EMAGIC &&
        rc != ISOPROF_ESCHEMA) {
        fprintf(stderr, "store_verify: %s: %s\n", isoprof_strerror(rc), why ? why : "");
        return 10;
    }
    if (rc != 0 && (why == NULL || why[0] == '\0'))
        return 11;
    isoprof_free(why);
    why = NULL;
    if (rc != 0 && rc != ISOPROF_ECORRUPT)
        return rc == ISOPROF_EDAMAGED ? FLIP_DAMAGED : FLIP_OTHER; /* refused: the daemon and
                                                                     store check stop here */
    /* It passed the walk: nothing a reader or the writer does may fault. */
    int urc = use_store(c->path, rc == 0);
    if (urc != 0)
        return urc;
    /* And what the writer did left a sound structure. */
    int vrc = store_verify(c->path, 0, VERIFY_MS, &why);
    if (vrc != 0) {
        fprintf(stderr, "after writing: %s: %s\n", isoprof_strerror(vrc), why ? why : "");
        isoprof_free(why);
        return 30;
    }
    return rc == 0 ? FLIP_INTACT : FLIP_CORRUPT;
}

/* Run flip_attempt in a child: its verdict, or -1 (said why). */
static int flip_isolated(const struct flip_case *c, const char *what)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0)
        _exit(flip_attempt(c));
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        ;
    if (WIFEXITED(st) && WEXITSTATUS(st) < FLIP_VERDICTS)
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        fprintf(stderr, "%s: killed by signal %d\n", what, WTERMSIG(st));
    else
        fprintf(stderr, "%s: exit status %d\n", what, WEXITSTATUS(st));
    return -1;
}

TEST(bitflips)
{
    const char *src = tmp_store_path();
    REQUIRE(make_store(src, 200) == 0);
    long size = file_size(src);
    REQUIRE(size > 0);
    uint64_t x = 0x5eed15090f0ull;
    unsigned tally[FLIP_VERDICTS] = {0};
    char dst[400];
    snprintf(dst, sizeof(dst), "%s-flip", src);
    /* 170 anywhere in the file, 30 in the meta pages' content. */
    for (int i = 0; i < 200; i++) {
        long pos;
        if (i < 170)
            pos = (long)(rng_next(&x) % (uint64_t)size);
        else
            pos = (long)((i % 2) * PSIZE_GUESS + 16 + (long)(rng_next(&x) % 136));
        int bit = (int)(rng_next(&x) % 8);
        REQUIRE(copy_store(src, dst) == 0);
        REQUIRE(flip(dst, pos, bit) == 0);
        struct flip_case c = {dst};
        char what[80];
        snprintf(what, sizeof(what), "flip %d: byte %ld bit %d", i, pos, bit);
        int v = flip_isolated(&c, what);
        CHECK(v >= 0);
        if (v >= 0)
            tally[v]++;
    }
    fprintf(stderr, "bitflips: %u intact, %u corrupt records, %u damaged, %u other\n",
            tally[FLIP_INTACT], tally[FLIP_CORRUPT], tally[FLIP_DAMAGED], tally[FLIP_OTHER]);
    CHECK(tally[FLIP_DAMAGED] > 0 && tally[FLIP_CORRUPT] > 0);
}

/* --- healthy stores, and a walk that faults --- */

/* From the current meta page, as LMDB's layout says (see verify.c): the
 * bytes the pages in use take, the page size, the main database's root. */
static int meta_of(const char *dir, uint64_t *need, uint32_t *psize, size_t *main_root)
{
    char f[512];
    file_of(dir, f, sizeof(f));
    int fd = open(f, O_RDONLY);
    if (fd < 0)
        return -1;
    const size_t w = sizeof(size_t), hdr = w + 8, dbs = 8 + 2 * w, db = 8 + 5 * w;
    const size_t last = dbs + 2 * db, root1 = dbs + db + 8 + 4 * w;
    uint8_t b[2][256];
    int rc = 0;
    if (pread(fd, b[0], sizeof(b[0]), 0) != (ssize_t)sizeof(b[0]))
        rc = -1;
    memcpy(psize, b[0] + hdr + dbs, 4);
    if (rc == 0 && pread(fd, b[1], sizeof(b[1]), *psize) != (ssize_t)sizeof(b[1]))
        rc = -1;
    close(fd);
    size_t lp[2], txn[2];
    for (int i = 0; i < 2; i++) {
        memcpy(&lp[i], b[i] + hdr + last, w);
        memcpy(&txn[i], b[i] + hdr + last + w, w);
    }
    int cur = txn[1] > txn[0];
    *need = ((uint64_t)lp[cur] + 1) * *psize;
    memcpy(main_root, b[cur] + hdr + root1, w);
    return rc;
}

/* Batches of large windows older than everything stored, in a small
 * budget: each batch is evicted by the transaction that stores it, and the
 * pages LMDB allocated and freed in it are never written. */
static const char *short_store(void)
{
    const char *p = tmp_store_path();
    struct store *s = open_rw(p, 1u << 20);
    if (s == NULL)
        return NULL;
    for (int i = 0; i < 12; i++) {
        struct test_rec t[8];
        struct store_record r[8];
        for (int j = 0; j < 8; j++) {
            rec_make(&t[j], "w", "v", T0 + (uint64_t)(1000 - i) * 10 * SEC + (uint64_t)j, 1, 1,
                     120000, (uint64_t)(i * 8 + j));
            r[j] = t[j].r;
        }
        store_put(s, r, 8, NULL);
        for (int j = 0; j < 8; j++)
            rec_free(&t[j]);
    }
    store_close(s);
    return p;
}

TEST(healthy)
{
    char *why = NULL;
    const char *p = tmp_store_path();
    REQUIRE(make_store(p, 300) == 0);
    CHECK_EQ_INT(store_verify(p, STORE_VERIFY_RECORDS, VERIFY_MS, &why), 0);
    CHECK(why == NULL);
    CHECK_EQ_INT(store_verify(p, 0, VERIFY_MS, &why), 0);
    CHECK(why == NULL);
    /* The bound: the child is killed, the caller told where it was. */
    CHECK_EQ_INT(store_verify(p, STORE_VERIFY_RECORDS, 1, &why), -ETIMEDOUT);
    CHECK(why != NULL && strncmp(why, "the walk did not finish within 1 ms", 35) == 0);
    isoprof_free(why);
    why = NULL;
    /* Empty store. */
    struct store *s = open_rw(p = tmp_store_path(), 0);
    REQUIRE(s != NULL);
    store_close(s);
    CHECK_EQ_INT(store_verify(p, STORE_VERIFY_RECORDS, VERIFY_MS, &why), 0);
    /* A file shorter than its last page, healthy. */
    p = short_store();
    REQUIRE(p != NULL);
    uint64_t need = 0;
    uint32_t psize = 0;
    size_t main_root = 0;
    REQUIRE(meta_of(p, &need, &psize, &main_root) == 0);
    REQUIRE((uint64_t)file_size(p) < need); /* LMDB did leave the last pages unwritten */
    struct store_options ro = {.readonly = 1};
    s = NULL;
    CHECK_EQ_INT(store_open(p, &ro, &s, &why), 0);
    store_close(s);
    CHECK(why == NULL);
    CHECK_EQ_INT(store_open(p, NULL, &s, &why), 0);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    CHECK_EQ_INT(store_verify(p, STORE_VERIFY_RECORDS, VERIFY_MS, &why), 0);
    if (why)
        fprintf(stderr, "%s", why);
    isoprof_free(why);
}

struct fault_case {
    const char *path;
    char why[1024];
};

static int fault_attempt(const void *arg)
{
    const struct fault_case *c = arg;
    char *why = NULL;
    int rc = store_verify(c->path, STORE_VERIFY_RECORDS, VERIFY_MS, &why);
    if (rc != ISOPROF_EDAMAGED) {
        fprintf(stderr, "store_verify: %d %s\n", rc, why ? why : "");
        return 2;
    }
    if (why == NULL ||
        strstr(why, "the walk faulted (SIGBUS) in DB windows after 0 records\n") != why) {
        fprintf(stderr, "why: %s\n", why ? why : "(null)");
        return 3;
    }
    isoprof_free(why);
    return 0;
}

/* A named database's root moved to a page the file lacks (but that the
 * free list holds, so the meta pages look fine): LMDB faults on the first
 * page of the walk, and the walk says where. */
TEST(walk_faults)
{
    const char *p = short_store();
    REQUIRE(p != NULL);
    uint64_t need = 0;
    uint32_t psize = 0;
    size_t main_root = 0;
    REQUIRE(meta_of(p, &need, &psize, &main_root) == 0);
    long size = file_size(p);
    REQUIRE((uint64_t)size < need);
    size_t missing = (size_t)(need / psize) - 1; /* the last page: free, unwritten */
    /* The main database is one leaf page; its node for "windows" is the key
     * (after its length, u16) and then the database's record (an MDB_db:
     * pad u32, flags u16, depth u16, four counters, root). */
    uint8_t page[65536], pat[9];
    uint16_t klen = 7;
    memcpy(pat, &klen, 2);
    memcpy(pat + 2, "windows", 7);
    char f[512];
    file_of(p, f, sizeof(f));
    int fd = open(f, O_RDWR);
    REQUIRE(fd >= 0);
    REQUIRE(psize <= sizeof(page) && main_root * psize < (uint64_t)size);
    REQUIRE(pread(fd, page, psize, (off_t)(main_root * psize)) == (ssize_t)psize);
    const uint8_t *node = memmem(page, psize, pat, sizeof(pat));
    REQUIRE(node != NULL);
    off_t at = (off_t)(main_root * psize) + (node - page) + (off_t)sizeof(pat) + 8 +
               4 * (off_t)sizeof(size_t);
    CHECK(pwrite(fd, &missing, sizeof(missing), at) == (ssize_t)sizeof(missing));
    close(fd);
    struct fault_case c = {p, ""};
    CHECK(isolated(fault_attempt, &c, "walk over a root past the end") == 0);
    /* In this process too: the fault stays in the walk's child. */
    char *why = NULL;
    CHECK_EQ_INT(store_verify(p, 0, VERIFY_MS, &why), ISOPROF_EDAMAGED);
    CHECK(why != NULL && strstr(why, "faulted (SIGBUS) in DB windows") != NULL);
    isoprof_free(why);
}

/* --- what the check leaves, and what is not a verdict --- */

static int lock_file(const char *dir, char *out, size_t cap)
{
    return snprintf(out, cap, "%s/lock.mdb", dir) < (int)cap ? 0 : -1;
}

/* The mode bits store_open gives the files it creates, under this
 * process's umask. */
static mode_t created_mode(void)
{
    mode_t um = umask(0);
    umask(um);
    return (mode_t)(0640 & ~um);
}

/* lock.mdb's permission bits, or -1 if there is none. */
static int lock_mode(const char *dir)
{
    char f[512];
    struct stat st;
    if (lock_file(dir, f, sizeof(f)) != 0 || stat(f, &st) != 0)
        return -1;
    return (int)(st.st_mode & 07777);
}

/* A store without lock.mdb (restored from an mdb_copy backup, or its lock
 * file deleted): the check children create it, with the mode store_open
 * uses, not 0000 (which the daemon, as a DynamicUser, could not open). */
TEST(lock_mode)
{
    char f[512];
    const char *p = tmp_store_path();
    REQUIRE(make_store(p, 100) == 0);
    uint64_t need = 0;
    uint32_t psize = 0;
    size_t main_root = 0;
    REQUIRE(meta_of(p, &need, &psize, &main_root) == 0);
    REQUIRE((uint64_t)file_size(p) >= need); /* no free list child: the walk's alone */
    REQUIRE(lock_file(p, f, sizeof(f)) == 0 && unlink(f) == 0);
    char *why = NULL;
    CHECK_EQ_INT(store_verify(p, 0, VERIFY_MS, &why), 0);
    isoprof_free(why);
    why = NULL;
    CHECK_EQ_INT(lock_mode(p), created_mode());
    struct store_options ro = {.readonly = 1};
    struct store *s = NULL;
    CHECK_EQ_INT(store_open(p, &ro, &s, &why), 0);
    store_close(s);
    isoprof_free(why);
    why = NULL;
    /* The free list child (a file shorter than its last page), from
     * store_open and from store_verify. */
    p = short_store();
    REQUIRE(p != NULL);
    REQUIRE(meta_of(p, &need, &psize, &main_root) == 0);
    REQUIRE((uint64_t)file_size(p) < need);
    REQUIRE(lock_file(p, f, sizeof(f)) == 0 && unlink(f) == 0);
    s = NULL;
    CHECK_EQ_INT(store_open(p, &ro, &s, &why), 0);
    store_close(s);
    isoprof_free(why);
    why = NULL;
    CHECK_EQ_INT(lock_mode(p), created_mode());
    REQUIRE(unlink(f) == 0);
    CHECK_EQ_INT(store_verify(p, STORE_VERIFY_RECORDS, VERIFY_MS, &why), 0);
    isoprof_free(why);
    CHECK_EQ_INT(lock_mode(p), created_mode());
}

/* Leave this process with at most `left` free descriptors (soft
 * RLIMIT_NOFILE lowered, the rest filled). 0 or -1. Only in a fork. */
static int starve_fds(int left)
{
    struct rlimit rl;
    int fds[64], n = 0;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    rl.rlim_cur = 64;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    for (int fd; n < 64 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;)
        fds[n++] = fd;
    if (n == 64 || errno != EMFILE || n < left)
        return -1;
    while (left-- > 0)
        close(fds[--n]);
    return 0;
}

struct pair {
    const char *full, *shortp; /* a store, and one shorter than its last page */
};

/* With one descriptor free, data.mdb can be read but no pipe made: every
 * check says it could not run, none that the store is damaged. */
static int cannot_run_attempt(const void *arg)
{
    const struct pair *c = arg;
    char *why = NULL;
    if (starve_fds(1) != 0)
        return 10;
    int rc = store_verify(c->full, 0, VERIFY_MS, &why);
    fprintf(stderr, "no pipe for the walk: %s: %s\n", isoprof_strerror(rc), why ? why : "");
    if (rc != -EMFILE || why == NULL || strstr(why, "could not check") == NULL)
        return 11;
    isoprof_free(why);
    why = NULL;
    rc = store_verify(c->shortp, 0, VERIFY_MS, &why);
    fprintf(stderr, "no pipe for the free list: %s: %s\n", isoprof_strerror(rc), why ? why : "");
    if (rc != -EMFILE || why == NULL || strstr(why, "could not check") == NULL)
        return 12;
    isoprof_free(why);
    why = NULL;
    struct store_options ro = {.readonly = 1};
    struct store *s = NULL;
    rc = store_open(c->shortp, &ro, &s, &why);
    isoprof_free(why);
    if (rc != -EMFILE)
        return 13;
    return 0;
}

TEST(cannot_run)
{
    struct pair c = {tmp_store_path(), NULL};
    REQUIRE(make_store(c.full, 50) == 0);
    c.shortp = short_store();
    REQUIRE(c.shortp != NULL);
    CHECK(isolated(cannot_run_attempt, &c, "checks without a pipe") == 0);
}

/* The child of parent (a process of ours), waiting up to ms for it to
 * appear; -1 if none did. */
static pid_t child_of(pid_t parent, int ms)
{
    for (int waited = 0; waited <= ms; waited += 5) {
        DIR *d = opendir("/proc");
        struct dirent *e;
        pid_t found = -1;
        while (d != NULL && found < 0 && (e = readdir(d)) != NULL) {
            char f[300], buf[512];
            if (e->d_name[0] < '1' || e->d_name[0] > '9')
                continue;
            snprintf(f, sizeof(f), "/proc/%s/stat", e->d_name);
            int fd = open(f, O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                continue;
            ssize_t n = read(fd, buf, sizeof(buf) - 1);
            close(fd);
            if (n <= 0)
                continue;
            buf[n] = '\0';
            const char *rp = strrchr(buf, ')'); /* the name may hold spaces */
            int ppid = 0;
            if (rp != NULL && sscanf(rp + 1, " %*c %d", &ppid) == 1 && ppid == parent)
                found = (pid_t)strtol(e->d_name, NULL, 10);
        }
        if (d != NULL)
            closedir(d);
        if (found > 0)
            return found;
        usleep(5000);
    }
    return -1;
}

/* Take the lock that mdb_env_open waits for (it tries byte 0 of lock.mdb
 * exclusively, then waits to share it): until the descriptor is closed,
 * another process's open of the store blocks there. The fd, or -1. */
static int lock_hold(const char *dir)
{
    char f[512];
    if (lock_file(dir, f, sizeof(f)) != 0)
        return -1;
    int fd = open(f, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    if (fcntl(fd, F_SETLK, &fl) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Run fn(arg) in a fork while this process holds dir's lock: the check
 * child the fork starts blocks in mdb_env_open and is sent sig there; then
 * the lock is let go. The fork's exit status, or -1. */
static int with_child_signalled(const char *dir, int (*fn)(const void *arg), const void *arg,
                                int sig, const char *what)
{
    int lfd = lock_hold(dir);
    if (lfd < 0)
        return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t a = fork();
    if (a < 0) {
        close(lfd);
        return -1;
    }
    if (a == 0)
        _exit(fn(arg));
    pid_t c = child_of(a, 20000);
    if (c > 0)
        kill(c, sig);
    close(lfd);
    int st = 0;
    while (waitpid(a, &st, 0) < 0 && errno == EINTR)
        ;
    if (c <= 0) {
        fprintf(stderr, "%s: no check child seen\n", what);
        return -1;
    }
    if (!WIFEXITED(st)) {
        fprintf(stderr, "%s: killed by signal %d\n", what, WTERMSIG(st));
        return -1;
    }
    return WEXITSTATUS(st);
}

static int killed_verify_attempt(const void *arg)
{
    char *why = NULL;
    int rc = store_verify(arg, 0, VERIFY_MS, &why);
    fprintf(stderr, "check child killed: %s: %s\n", isoprof_strerror(rc), why ? why : "");
    int ok = rc != 0 && rc != ISOPROF_EDAMAGED && why != NULL &&
             strstr(why, "could not check") != NULL && strstr(why, "SIGKILL") != NULL;
    isoprof_free(why);
    return ok ? 0 : 1;
}

static int killed_open_attempt(const void *arg)
{
    struct store_options ro = {.readonly = 1};
    struct store *s = NULL;
    char *why = NULL;
    int rc = store_open(arg, &ro, &s, &why);
    fprintf(stderr, "free list child killed: %s: %s\n", isoprof_strerror(rc), why ? why : "");
    isoprof_free(why);
    store_close(s);
    return rc != 0 && rc != ISOPROF_EDAMAGED ? 0 : 1;
}

/* A child killed from outside (SIGKILL: the OOM killer, a person) tells
 * nothing of the file: not damage. */
TEST(killed_not_damage)
{
    const char *p = tmp_store_path();
    REQUIRE(make_store(p, 50) == 0);
    CHECK_EQ_INT(with_child_signalled(p, killed_verify_attempt, p, SIGKILL, "walk"), 0);
    p = short_store();
    REQUIRE(p != NULL);
    CHECK_EQ_INT(with_child_signalled(p, killed_verify_attempt, p, SIGKILL, "free list"), 0);
    CHECK_EQ_INT(with_child_signalled(p, killed_open_attempt, p, SIGKILL, "open"), 0);
}

/* --- the bound at start --- */

static volatile sig_atomic_t children_ended;

static void count_child(int sig)
{
    (void)sig;
    children_ended++;
}

/* isoprofd at start: store_verify, then store_open told it passed. The
 * free list of a short file is read once (store_verify's child), not again
 * by store_open. */
TEST(no_second_check)
{
    const char *p = short_store();
    REQUIRE(p != NULL);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = count_child;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(SIGCHLD, &sa, &old) == 0);
    children_ended = 0;
    char *why = NULL;
    CHECK_EQ_INT(store_verify(p, 0, VERIFY_MS, &why), 0);
    CHECK_EQ_INT(children_ended, 2); /* the free list, the walk */
    isoprof_free(why);
    why = NULL;
    /* Not told: store_open reads the free list itself. */
    struct store_options ro = {.readonly = 1}, rw = {.verified = STORE_VERIFY_PASSED};
    struct store *s = NULL;
    CHECK_EQ_INT(store_open(p, &ro, &s, &why), 0);
    store_close(s);
    CHECK_EQ_INT(children_ended, 3);
    s = NULL;
    CHECK_EQ_INT(store_open(p, &rw, &s, &why), 0);
    CHECK_EQ_INT(children_ended, 3);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    isoprof_free(why);
    sigaction(SIGCHLD, &old, NULL);
}

struct open_case {
    const char *path;
    int verified;
};

/* store_open with the free list child held (stopped) past its 300 ms:
 * exit status 0 opened, 1 -ETIMEDOUT, 2 something else. */
static int held_open_attempt(const void *arg)
{
    const struct open_case *c = arg;
    struct store_options o = {.verified = c->verified, .check_ms = 300};
    struct store *s = NULL;
    char *why = NULL;
    uint64_t t0 = isoprof_now_mono_ns();
    int rc = store_open(c->path, &o, &s, &why);
    uint64_t ms = (isoprof_now_mono_ns() - t0) / 1000000;
    fprintf(stderr, "free list child stopped, verified %d: %" PRIu64 " ms: %s: %s\n", c->verified,
            ms, isoprof_strerror(rc), why ? why : "");
    isoprof_free(why);
    if (rc == 0 && check_clean(s) != 0)
        rc = ISOPROF_ECORRUPT;
    store_close(s);
    if (ms > 10000)
        return 3;
    return rc == 0 ? 0 : rc == -ETIMEDOUT ? 1 : 2;
}

/* store_verify's bound holds for the whole check, the free list child
 * included: here that child cannot open the store at all. */
TEST(one_bound)
{
    const char *p = short_store();
    REQUIRE(p != NULL);
    int lfd = lock_hold(p);
    REQUIRE(lfd >= 0);
    char *why = NULL;
    uint64_t t0 = isoprof_now_mono_ns();
    int rc = store_verify(p, 0, 1500, &why);
    uint64_t ms = (isoprof_now_mono_ns() - t0) / 1000000;
    close(lfd);
    fprintf(stderr, "free list child held: %" PRIu64 " ms: %s: %s", ms, isoprof_strerror(rc),
            why ? why : "\n");
    CHECK_EQ_INT(rc, -ETIMEDOUT);
    CHECK(ms < 10000);
    isoprof_free(why);
    /* Then store_open gets the rest of the bound (check_ms). Its free
     * list check not finishing in it refuses the store when the caller
     * knows nothing else, but not after a store_verify that could not
     * finish either: the daemon then starts without a verdict, as after
     * a walk out of time. */
    struct open_case c = {p, STORE_VERIFY_NONE};
    CHECK_EQ_INT(with_child_signalled(p, held_open_attempt, &c, SIGSTOP, "open"), 1);
    c.verified = STORE_VERIFY_UNFINISHED;
    CHECK_EQ_INT(with_child_signalled(p, held_open_attempt, &c, SIGSTOP, "open, unfinished"), 0);
}

int main(void)
{
    RUN(healthy);
    RUN(meta_pages);
    RUN(truncated);
    RUN(walk_faults);
    RUN(lock_mode);
    RUN(cannot_run);
    RUN(killed_not_damage);
    RUN(no_second_check);
    RUN(one_bound);
    RUN(bitflips);
    TEST_EXIT();
}

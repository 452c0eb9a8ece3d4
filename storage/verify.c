/*
 * verify.c - what can be known of a store without trusting it: its LMDB
 * meta pages against the file, read with pread before anything maps it
 * (store_verify_file, run by store_open), and a walk of every database in
 * a child process (store_verify).
 *
 * LMDB trusts its file. It maps data.mdb and follows the page numbers,
 * node offsets and sizes it finds there: a page past the end of a file cut
 * short raises SIGBUS when touched, a flipped bit can send a pointer
 * anywhere (SIGSEGV). Neither is an error LMDB could return. So:
 *
 *   - Before mdb_env_open, both meta pages are read and checked: LMDB's
 *     magic, data format version and page size, the roots of the free and
 *     main databases, and the file's size against the last page the newest
 *     meta names. A healthy file may be shorter than that last page: LMDB
 *     never writes a page that a transaction allocated and freed again
 *     before it committed (a loose page), so the last pages may be free
 *     and unwritten. Only in that case a child reads the free list and
 *     confirms that every missing page is on it.
 *   - store_verify walks every database in a forked child: the free list,
 *     the main database and each database it names, each through a cursor.
 *     Every key and value must lie inside the mapped file (and is then
 *     touched at both ends, so a page the file lacks faults here and not
 *     later in the caller); every key must find its own record again
 *     (which reads the keys of the branch pages above it, and finds keys
 *     out of order); every free list entry must name pages between the
 *     meta pages and the last page; each database must hold as many
 *     records as its header counts.
 *
 * DESIGN: the child reports through two channels that both outlive it. A
 * pipe carries its problems, one line each, written as they are found; a
 * shared anonymous page holds where it is (the database, the records
 * walked) and, once it is done, its result. A child that faults leaves
 * the lines it wrote and its position: the parent turns that into "the
 * walk faulted (SIGBUS) in DB windows after 1234 records". The child
 * resets the fault signals to their default action (no handler of the
 * caller's or of a sanitizer runs), dumps no core, and leaves by _exit
 * (the caller's atexit handlers and stdio buffers are not its own). The
 * parent waits for at most the caller's bound, then kills it.
 *
 * Only a fault is a finding: a child ended by SIGSEGV, SIGBUS, SIGILL,
 * SIGFPE (LMDB followed a damaged page number or offset) or SIGABRT (one of
 * its assertions). A child that could not start (no pipe, no process), was
 * killed by another signal (SIGKILL from the OOM killer or a person) or
 * ran out of time says nothing of the file: the check could not be done,
 * and the caller is told so (a negative errno, "could not check the
 * store"), never that the store is damaged. store_verify's bound covers
 * the free list child and the walk together.
 */
#include "internal.h"

#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*
 * LMDB's file layout (mdb.c; none of it is in lmdb.h). Integers are native.
 * W is the width of pgno_t, txnid_t, size_t and pointers. A page starts
 * with a header: pgno:W, pad:u16, flags:u16, lower:u16, upper:u16. Pages
 * 0 and 1 are meta pages (flag P_META); their content (MDB_meta) follows
 * the header: magic:u32, version:u32, address:W, mapsize:W, then two
 * MDB_db records (the free list's, whose pad holds the page size, and the
 * main database's), each pad:u32 flags:u16 depth:u16 branch_pages:W
 * leaf_pages:W overflow_pages:W entries:W root:W; then last_pg:W (the last
 * page in use) and txnid:W (the transaction that wrote this meta; the one
 * with the higher txnid is current). Meta page 1 starts at the page size.
 * A free list record is txnid -> count:W then count page numbers:W (the
 * record may have room for more).
 */
#define LMDB_MAGIC 0xBEEFC0DEu
#define LMDB_DATA_VERSION 1u /* MDB_DATA_VERSION of release builds */
#define LMDB_P_META 0x08u
#define LMDB_NUM_METAS 2u
#define LMDB_PSIZE_MIN 512u
#define LMDB_PSIZE_MAX 65536u
#define LMDB_W sizeof(size_t)
#define LMDB_PAGE_HDR (LMDB_W + 8)
#define LMDB_PAGE_FLAGS (LMDB_W + 2)
#define LMDB_DB_SIZE (8 + 5 * LMDB_W)
#define LMDB_META_DB(i) (8 + 2 * LMDB_W + (i)*LMDB_DB_SIZE)
#define LMDB_META_ROOT(i) (LMDB_META_DB(i) + 8 + 4 * LMDB_W)
#define LMDB_META_LAST_PG LMDB_META_DB(2)
#define LMDB_META_TXNID (LMDB_META_LAST_PG + LMDB_W)
#define LMDB_META_SIZE (LMDB_META_TXNID + LMDB_W)
#define LMDB_FREE_DBI 0
/* More than a 64-bit process can map (47 bits of user address space). */
#define LMDB_MAPSIZE_MAX (1ull << 47)

/* Pages missing from the end of the file that a child is asked about; a
 * meta page naming more than this many beyond the file is damaged. */
#define VERIFY_MISSING_MAX (1u << 27)
/* A child that confirms the free list gets at most this long. */
#define VERIFY_FREE_TIMEOUT_MS 60000u
/* The children's map: LMDB grows it to the pages in use, so the map size
 * a (damaged) meta page records plays no part. */
#define VERIFY_MAP_MIN (1u << 20)
/* Named databases a walk opens (the store uses 11). */
#define VERIFY_MAXDBS 64u
#define VERIFY_MAX_LINES 100u
#define VERIFY_DB_LINES 5u
/* What the parent keeps of the child's lines. */
#define VERIFY_TEXT_MAX ((size_t)64 * 1024)

/* --- the meta pages --- */

struct lmdb_meta {
    int magic;       /* LMDB's magic is there */
    const char *bad; /* why it is not a valid meta page; NULL if it is */
    uint32_t version, psize;
    size_t mapsize, last_pg, txnid, root[2];
};

static int psize_ok(uint32_t p)
{
    return p >= LMDB_PSIZE_MIN && p <= LMDB_PSIZE_MAX && (p & (p - 1)) == 0;
}

static void meta_decode(const uint8_t *pg, size_t got, struct lmdb_meta *m)
{
    const uint8_t *p = pg + LMDB_PAGE_HDR;
    uint32_t magic = 0;
    uint16_t flags;
    memset(m, 0, sizeof(*m));
    if (got >= LMDB_PAGE_HDR + 8) {
        memcpy(&magic, p, 4);
        memcpy(&m->version, p + 4, 4);
    }
    m->magic = magic == LMDB_MAGIC;
    if (!m->magic) {
        m->bad = got >= LMDB_PAGE_HDR + 8 ? "no LMDB magic" : "cut short";
        return;
    }
    if (got < LMDB_PAGE_HDR + LMDB_META_SIZE) {
        m->bad = "cut short";
        return;
    }
    memcpy(&flags, pg + LMDB_PAGE_FLAGS, 2);
    memcpy(&m->psize, p + LMDB_META_DB(0), 4);
    memcpy(&m->mapsize, p + 8 + LMDB_W, LMDB_W);
    memcpy(&m->last_pg, p + LMDB_META_LAST_PG, LMDB_W);
    memcpy(&m->txnid, p + LMDB_META_TXNID, LMDB_W);
    memcpy(&m->root[0], p + LMDB_META_ROOT(0), LMDB_W);
    memcpy(&m->root[1], p + LMDB_META_ROOT(1), LMDB_W);
    if (!(flags & LMDB_P_META))
        m->bad = "not marked as a meta page";
    else if (m->version != LMDB_DATA_VERSION)
        m->bad = "unknown data format version";
    else if (!psize_ok(m->psize))
        m->bad = "impossible page size";
    else if (m->last_pg < LMDB_NUM_METAS - 1 || (uint64_t)m->last_pg > (1ull << 47) / m->psize)
        m->bad = "impossible last page";
    else if ((uint64_t)m->mapsize > LMDB_MAPSIZE_MAX)
        m->bad = "impossible map size"; /* a reader would map that much */
    for (int i = 0; i < 2 && m->bad == NULL; i++)
        if (m->root[i] != SIZE_MAX && (m->root[i] < LMDB_NUM_METAS || m->root[i] > m->last_pg))
            m->bad = "a root beyond the last page";
}

/* What of len bytes at off could be read (0 when none). */
static size_t meta_read(int fd, void *buf, size_t len, off_t off)
{
    ssize_t n = isoprof_pread_full(fd, buf, len, off);
    return n < 0 ? 0 : (size_t)n;
}

/* What the meta pages say of data.mdb. */
struct file_verdict {
    char msg[300];
    uint64_t size;
};

/* file_check's result besides 0 and the ISOPROF_E* codes: the file is
 * shorter than the last page; the free list must account for the rest. */
#define VERDICT_MISSING 1

__attribute__((format(printf, 2, 3))) static int verdict(struct file_verdict *v, const char *fmt,
                                                         ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof(v->msg), fmt, ap);
    va_end(ap);
    return ISOPROF_EDAMAGED;
}

/* Read and judge both meta pages and the size of the file fd. */
static int file_check(int fd, struct file_verdict *v)
{
    static const uint32_t probe[] = {4096, 8192, 16384, 32768, 65536, 512, 1024, 2048};
    uint8_t b0[LMDB_PAGE_HDR + LMDB_META_SIZE], b1[sizeof(b0)];
    struct lmdb_meta m[2];
    struct stat st;
    meta_decode(b0, meta_read(fd, b0, sizeof(b0), 0), &m[0]);
    /* Meta page 1 is where meta page 0's page size says. When meta page 0
     * is unreadable, look for it at the usual sizes: finding it tells a
     * damaged LMDB file from something else. */
    memset(&m[1], 0, sizeof(m[1]));
    m[1].bad = "no LMDB magic";
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(probe) + 1; i++) {
        uint32_t at = i == 0 ? m[0].psize : probe[i - 1];
        if (!psize_ok(at) || (i > 0 && m[0].magic && m[0].bad == NULL))
            continue;
        meta_decode(b1, meta_read(fd, b1, sizeof(b1), (off_t)at), &m[1]);
        if (m[1].magic)
            break;
    }
    /* The size after the meta pages: a writer extends the file before it
     * writes the meta page naming the new pages. */
    if (fstat(fd, &st) != 0)
        return -errno;
    v->size = (uint64_t)st.st_size;
    if (!m[0].magic && !m[1].magic) {
        if (v->size < LMDB_PAGE_HDR + 8)
            return verdict(v, "data.mdb is %" PRIu64 " bytes, too short for its meta pages",
                           v->size);
        snprintf(v->msg, sizeof(v->msg), "data.mdb is not an LMDB file (no meta page)");
        return ISOPROF_EMAGIC;
    }
    if (m[0].magic && m[1].magic && m[0].version == m[1].version &&
        m[0].version != LMDB_DATA_VERSION) {
        snprintf(v->msg, sizeof(v->msg),
                 "data.mdb is LMDB data format %" PRIu32 ", this LMDB reads format %u",
                 m[0].version, LMDB_DATA_VERSION);
        return ISOPROF_ESCHEMA;
    }
    for (int i = 0; i < 2; i++)
        if (m[i].bad)
            return verdict(v, "data.mdb: meta page %d is damaged (%s)", i, m[i].bad);
    if (m[0].psize != m[1].psize)
        return verdict(
            v, "data.mdb: the meta pages disagree on the page size (%" PRIu32 " and %" PRIu32 ")",
            m[0].psize, m[1].psize);
    const struct lmdb_meta *cur = &m[m[1].txnid > m[0].txnid];
    uint64_t pages = v->size / cur->psize;
    if ((uint64_t)cur->last_pg < pages)
        return 0;
    verdict(v, "data.mdb is %" PRIu64 " bytes but its meta page says %zu pages of %" PRIu32,
            v->size, cur->last_pg + 1, cur->psize);
    /* A root is always written: one past the end is damage, no question. */
    static const char *const dbname[] = {"free list", "main database"};
    for (int i = 0; i < 2; i++)
        if (cur->root[i] != SIZE_MAX && cur->root[i] >= pages) {
            size_t l = strlen(v->msg);
            snprintf(v->msg + l, sizeof(v->msg) - l, " (the %s's root, page %zu, is missing)",
                     dbname[i], cur->root[i]);
            return ISOPROF_EDAMAGED;
        }
    if (cur->last_pg - pages + 1 > VERIFY_MISSING_MAX)
        return ISOPROF_EDAMAGED;
    return VERDICT_MISSING;
}

/* --- the child --- */

/* Shared between parent and child (an anonymous shared mapping). */
struct verify_shared {
    char where[64];   /* the database being walked */
    uint64_t records; /* records of it walked so far */
    uint64_t value;   /* a number for the parent (the free list check: pages in use) */
    int rc;           /* the child's result, once done */
    volatile sig_atomic_t done;
};

/* The child's work: returns its result; writes problem lines to fd. */
typedef int (*verify_child_fn)(const char *path, void *arg, struct verify_shared *sh, int fd);

struct child_out {
    int done, rc;    /* done: the child finished and rc is its result */
    int sig, status; /* how it ended otherwise */
    char where[64];
    uint64_t records, value;
    char *text; /* its lines (allocated, NUL-terminated), possibly NULL */
};

static void child_prepare(void)
{
    /* A fault here is the finding, not a crash to collect. */
    isoprof_fault_child();
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

static uint64_t ms_left(uint64_t deadline_ns)
{
    uint64_t now = isoprof_now_mono_ns();
    return now >= deadline_ns ? 0 : (deadline_ns - now + 999999) / 1000000;
}

/* Read what the child writes into text (capped at VERIFY_TEXT_MAX) until
 * it closes the pipe or the deadline (monotonic ns; 0: none) passes. 0
 * (EOF), -ETIMEDOUT, -ENOMEM or -errno. */
static int child_read(int fd, uint64_t deadline, struct isoprof_buf *text)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int wait = -1;
        if (deadline) {
            uint64_t left = ms_left(deadline);
            if (left == 0)
                return -ETIMEDOUT;
            wait = left > INT_MAX ? INT_MAX : (int)left;
        }
        int n = poll(&p, 1, wait);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            continue; /* the deadline is checked above */
        char buf[4096];
        ssize_t got = read(fd, buf, sizeof(buf));
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return -errno;
        if (got == 0)
            return text->err;
        /* Beyond the cap (and after a failed allocation, which the buffer
         * keeps as its sticky error) the bytes are read and dropped, so the
         * child never blocks on a full pipe. */
        size_t take = (size_t)got;
        if (take > text->max - text->len)
            take = text->max - text->len;
        if (take > 0)
            isoprof_buf_append(text, buf, take);
    }
}

/*
 * Run fn(path, arg, ...) in a child and wait for it (at most timeout_ms; 0
 * is no bound). 0 when the child ended (out says how), -ETIMEDOUT (it was
 * killed; out says where it was), -ENOMEM, or -errno (no pipe, mapping or
 * fork).
 */
static int child_run(const char *path, verify_child_fn fn, void *arg, uint64_t timeout_ms,
                     struct child_out *out)
{
    memset(out, 0, sizeof(*out));
    /* The bound runs from here, before the fork: a parent that the machine
     * kept from running until its child was done still finds the deadline
     * passed, so the bound does not depend on who ran first. */
    uint64_t deadline = timeout_ms ? isoprof_now_mono_ns() + timeout_ms * 1000000 : 0;
    struct verify_shared *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return -errno;
    memset(sh, 0, sizeof(*sh));
    int p[2], rc;
    if (pipe2(p, O_CLOEXEC) != 0) {
        rc = -errno;
        goto fail_pipe;
    }
    pid_t pid = fork();
    if (pid < 0) {
        rc = -errno;
        close(p[0]);
        close(p[1]);
        goto fail_pipe;
    }
    if (pid == 0) {
        close(p[0]);
        child_prepare();
        sh->rc = fn(path, arg, sh, p[1]);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        sh->done = 1;
        _exit(0);
    }
    close(p[1]);
    struct isoprof_buf text;
    isoprof_buf_init(&text, VERIFY_TEXT_MAX);
    rc = child_read(p[0], deadline, &text);
    close(p[0]);
    if (rc != 0)
        kill(pid, SIGKILL); /* timed out, or the parent cannot go on */
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    out->done = rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 && sh->done;
    out->rc = out->done ? sh->rc : 0;
    out->sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    out->status = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    memcpy(out->where, sh->where, sizeof(out->where));
    out->where[sizeof(out->where) - 1] = '\0';
    out->records = sh->records;
    out->value = sh->value;
    /* No output leaves text NULL; a failed allocation drops it all. */
    if (rc == -ENOMEM || text.data == NULL)
        isoprof_buf_free(&text);
    else
        isoprof_buf_take(&text, &out->text, NULL);
fail_pipe:
    munmap(sh, sizeof(*sh));
    return rc;
}

/* A child that ended without a result: did the file make it fault? */
static int child_faulted(const struct child_out *o)
{
    return !o->done && isoprof_fault_name(o->sig) != NULL;
}

/* "faulted (SIGBUS)", "was killed (SIGKILL)", "was killed (signal 12)",
 * "died (exit status 1)". */
static void death_text(const struct child_out *o, char *buf, size_t cap)
{
    const char *name = isoprof_fault_name(o->sig);
    if (o->sig && name)
        snprintf(buf, cap, "faulted (%s)", name);
    else if (o->sig == SIGKILL || o->sig == SIGTERM)
        snprintf(buf, cap, "was killed (%s)", o->sig == SIGKILL ? "SIGKILL" : "SIGTERM");
    else if (o->sig)
        snprintf(buf, cap, "was killed (signal %d)", o->sig);
    else
        snprintf(buf, cap, "died (exit status %d)", o->status);
}

/* --- the free list check (store_verify_file) --- */

/* Child: count the pages beyond the end of the file that the free list
 * does not hold (sh->value). Opens the environment read-only. */
static int free_check_child(const char *path, void *arg, struct verify_shared *sh, int fd)
{
    (void)arg;
    (void)fd;
    MDB_env *env;
    MDB_txn *txn;
    MDB_cursor *c;
    MDB_envinfo info;
    MDB_stat est;
    struct stat st;
    int mfd, rc;
    snprintf(sh->where, sizeof(sh->where), "free list");
    if ((rc = mdb_env_create(&env)) != 0)
        return store_err(rc);
    if ((rc = mdb_env_set_mapsize(env, VERIFY_MAP_MIN)) != 0 ||
        (rc = mdb_env_open(env, path, MDB_RDONLY | MDB_NOTLS, STORE_FILE_MODE)) != 0 ||
        (rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) != 0) {
        mdb_env_close(env);
        return store_err(rc);
    }
    /* Judged again from this snapshot: a writer may have written the
     * missing pages since the parent looked. */
    if ((rc = mdb_env_info(env, &info)) != 0 || (rc = mdb_env_stat(env, &est)) != 0 ||
        (rc = mdb_env_get_fd(env, &mfd)) != 0 || fstat(mfd, &st) != 0) {
        rc = rc ? store_err(rc) : -errno;
        goto out;
    }
    size_t first = (size_t)((uint64_t)st.st_size / est.ms_psize), last = info.me_last_pgno;
    if (last < first || last - first + 1 > VERIFY_MISSING_MAX) {
        sh->value = last < first ? 0 : last - first + 1;
        rc = 0;
        goto out;
    }
    size_t n = last - first + 1;
    uint8_t *seen = isoprof_calloc((n + 7) / 8, 1);
    if (seen == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    MDB_val k, d;
    if ((rc = mdb_cursor_open(txn, LMDB_FREE_DBI, &c)) == 0) {
        for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
            sh->records++;
            size_t cnt = 0, room = d.mv_size / LMDB_W;
            if (room > 0)
                memcpy(&cnt, d.mv_data, LMDB_W);
            for (size_t i = 1; i <= cnt && i < room; i++) {
                size_t pg;
                memcpy(&pg, (const uint8_t *)d.mv_data + i * LMDB_W, LMDB_W);
                if (pg >= first && pg <= last)
                    seen[(pg - first) / 8] |= (uint8_t)(1u << ((pg - first) % 8));
            }
        }
        mdb_cursor_close(c);
    }
    if (rc == MDB_NOTFOUND) {
        uint64_t missing = 0;
        for (size_t i = 0; i < n; i++)
            missing += !(seen[i / 8] & (1u << (i % 8)));
        sh->value = missing;
        rc = 0;
    } else {
        rc = store_err(rc);
    }
    isoprof_free(seen);
out:
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return rc;
}

int store_verify_file(const char *path, unsigned flags, uint64_t timeout_ms, char **why)
{
    char file[PATH_MAX + 16];
    struct file_verdict v;
    struct stat st;
    int n = snprintf(file, sizeof(file), "%s/data.mdb", path);
    if (n < 0 || (size_t)n >= sizeof(file))
        return 0; /* LMDB says what is wrong with the path */
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0; /* no file yet (a writer creates it), or LMDB says why not */
    if (fstat(fd, &st) != 0 || st.st_size == 0) {
        close(fd);
        return 0; /* an environment not written yet: LMDB initialises it */
    }
    memset(&v, 0, sizeof(v));
    int rc = file_check(fd, &v);
    /* A writer may have been between its two writes of a commit (pages,
     * then the meta page): look once more before saying so. */
    if (rc != 0)
        rc = file_check(fd, &v);
    close(fd);
    if (rc == VERDICT_MISSING && (flags & STORE_FILE_TRUST_SHORT))
        rc = 0;
    const char *unfinished = NULL; /* why the free list check could not be done */
    char how[64];
    if (rc == VERDICT_MISSING) {
        struct child_out o;
        uint64_t ms =
            timeout_ms && timeout_ms < VERIFY_FREE_TIMEOUT_MS ? timeout_ms : VERIFY_FREE_TIMEOUT_MS;
        int crc = child_run(path, free_check_child, NULL, ms, &o);
        isoprof_free(o.text);
        if (crc == 0 && o.done && o.rc == 0 && o.value == 0) {
            rc = 0;
        } else if (crc == 0 && o.done && o.rc == 0) {
            size_t l = strlen(v.msg);
            snprintf(v.msg + l, sizeof(v.msg) - l, " (%" PRIu64 " missing pages are in use)",
                     o.value);
            rc = ISOPROF_EDAMAGED;
        } else if (crc == 0 && o.done && o.rc < ISOPROF__ERR_END) {
            rc = o.rc == ISOPROF_ECORRUPT ? ISOPROF_EDAMAGED : o.rc; /* LMDB refused it */
        } else if (crc == 0 && child_faulted(&o)) {
            death_text(&o, how, sizeof(how));
            size_t l = strlen(v.msg);
            snprintf(v.msg + l, sizeof(v.msg) - l, " (reading its free list %s)", how);
            rc = ISOPROF_EDAMAGED;
        } else {
            /* Not a verdict: out of time, no child, a child that could
             * not read (-ENOMEM, -EACCES on lock.mdb), or one killed from
             * outside (the OOM killer). */
            if (crc == -ETIMEDOUT) {
                snprintf(how, sizeof(how), "timed out");
            } else if (crc != 0 || o.done) {
                crc = crc ? crc : o.rc;
                snprintf(how, sizeof(how), "failed: %s", isoprof_strerror(crc));
            } else {
                death_text(&o, how, sizeof(how));
                crc = -ECANCELED;
            }
            unfinished = how;
            rc = (flags & STORE_FILE_UNFINISHED_OK) ? 0 : crc;
        }
    }
    if (rc != 0 && why) {
        isoprof_free(*why);
        if (unfinished)
            *why = isoprof_asprintf("%s: could not check the store: %s; reading its free list, "
                                    "which must hold the missing pages, %s",
                                    path, v.msg, unfinished);
        else
            *why = isoprof_asprintf("%s: %s", path, v.msg[0] ? v.msg : isoprof_strerror(rc));
    }
    return rc;
}

/* --- the walk (store_verify) --- */

struct walker {
    MDB_txn *txn;
    const uint8_t *lo, *hi; /* the mapped bytes of the file */
    size_t last_pg;
    struct verify_shared *sh;
    int fd;
    unsigned lines, dropped;       /* in all: written, left out */
    unsigned db_lines, db_dropped; /* in the database being walked */
    uint8_t sink;
};

/* One problem line to the parent; at most VERIFY_DB_LINES a database and
 * VERIFY_MAX_LINES in all (one damaged page can make every record wrong). */
__attribute__((format(printf, 2, 3))) static void problem(struct walker *w, const char *fmt, ...)
{
    if (w->db_lines >= VERIFY_DB_LINES || w->lines >= VERIFY_MAX_LINES) {
        w->db_dropped++;
        w->dropped += w->lines >= VERIFY_MAX_LINES;
        return;
    }
    w->lines++;
    w->db_lines++;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t l = (size_t)n < sizeof(line) - 1 ? (size_t)n : sizeof(line) - 2;
    line[l++] = '\n';
    (void)isoprof_write_full(w->fd, line, l); /* the parent is gone or gave up */
}

/* Does v lie inside the file? Then read its first and last byte, so that
 * a page the file lacks faults now, in the child. */
static int inside(struct walker *w, const MDB_val *v)
{
    const uint8_t *p = v->mv_data;
    if (v->mv_size == 0)
        return 1;
    if (w->lo && (p < w->lo || p >= w->hi || v->mv_size > (size_t)(w->hi - p)))
        return 0;
    w->sink ^= *(volatile const uint8_t *)p;
    w->sink ^= *(volatile const uint8_t *)(p + v->mv_size - 1);
    return 1;
}

/* A printable name for the report. */
static void name_text(const void *name, size_t len, char *out, size_t cap)
{
    size_t n = len < cap - 1 ? len : cap - 1;
    memcpy(out, name, n);
    out[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < 0x20 || (unsigned char)out[i] >= 0x7f)
            out[i] = '?';
}

static void free_entry(struct walker *w, const char *db, const MDB_val *d, uint64_t n)
{
    size_t cnt = 0, room = d->mv_size / LMDB_W;
    if (d->mv_size % LMDB_W != 0 || room == 0) {
        problem(w, "%s: record %" PRIu64 " is %zu bytes, not a page list", db, n, d->mv_size);
        return;
    }
    memcpy(&cnt, d->mv_data, LMDB_W);
    if (cnt > room - 1) {
        problem(w, "%s: record %" PRIu64 " counts %zu pages in room for %zu", db, n, cnt, room - 1);
        return;
    }
    for (size_t i = 1; i <= cnt; i++) {
        size_t pg;
        memcpy(&pg, (const uint8_t *)d->mv_data + i * LMDB_W, LMDB_W);
        if (pg < LMDB_NUM_METAS || pg > w->last_pg) {
            problem(w, "%s: record %" PRIu64 " names page %zu, outside 2..%zu", db, n, pg,
                    w->last_pg);
            return;
        }
    }
}

/* Walk one database. is_free: the free list (its values are checked).
 * names/nnames: for the main database, receives the keys of the records
 * that may be databases (allocated; at most cap). */
static void walk_db(struct walker *w, MDB_dbi dbi, const char *db, int is_free, char **names,
                    size_t *nnames, size_t cap)
{
    MDB_stat st;
    MDB_cursor *c, *look;
    unsigned flags = 0;
    int rc;
    snprintf(w->sh->where, sizeof(w->sh->where), "%s", db);
    w->sh->records = 0;
    w->db_lines = w->db_dropped = 0;
    /* mdb_dbi_flags refuses the free list (integer keys, no duplicates). */
    if ((rc = mdb_stat(w->txn, dbi, &st)) != 0 ||
        (!is_free && (rc = mdb_dbi_flags(w->txn, dbi, &flags)) != 0) ||
        (rc = mdb_cursor_open(w->txn, dbi, &c)) != 0) {
        problem(w, "%s: %s", db, mdb_strerror(rc));
        return;
    }
    /* Lookups go through a second cursor: mdb_get refuses the free list. */
    if ((rc = mdb_cursor_open(w->txn, dbi, &look)) != 0) {
        problem(w, "%s: %s", db, mdb_strerror(rc));
        mdb_cursor_close(c);
        return;
    }
    MDB_val k, d, d2;
    uint64_t n = 0;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        w->sh->records = ++n;
        if (!inside(w, &k) || !inside(w, &d)) {
            problem(w, "%s: record %" PRIu64 " lies outside data.mdb", db, n);
            continue;
        }
        if (!(flags & MDB_DUPSORT)) {
            MDB_val k2 = k;
            int grc = mdb_cursor_get(look, &k2, &d2, MDB_SET_KEY);
            if (grc == MDB_NOTFOUND)
                problem(w, "%s: record %" PRIu64 ": its key does not find it (keys out of order)",
                        db, n);
            else if (grc != 0)
                problem(w, "%s: record %" PRIu64 ": looking up its key: %s", db, n,
                        mdb_strerror(grc));
            else if (d2.mv_data != d.mv_data)
                problem(w, "%s: record %" PRIu64 ": its key finds another record", db, n);
        }
        if (is_free)
            free_entry(w, db, &d, n);
        if (names && *nnames < cap && k.mv_size > 0 && k.mv_size < 512 &&
            memchr(k.mv_data, '\0', k.mv_size) == NULL) {
            names[*nnames] = isoprof_strndup(k.mv_data, k.mv_size);
            if (names[*nnames] != NULL)
                (*nnames)++;
        }
    }
    if (rc != MDB_NOTFOUND)
        problem(w, "%s: %s after %" PRIu64 " records", db, mdb_strerror(rc), n);
    else if (n != st.ms_entries)
        problem(w, "%s: %" PRIu64 " records, its header counts %zu", db, n, st.ms_entries);
    if (w->db_dropped > 0 && w->lines < VERIFY_MAX_LINES) {
        unsigned more = w->db_dropped;
        w->db_lines = 0; /* this one line more */
        problem(w, "%s: ... and %u more problems", db, more);
    }
    mdb_cursor_close(look);
    mdb_cursor_close(c);
}

struct walk_opts {
    unsigned flags;
};

static int walk_child(const char *path, void *arg, struct verify_shared *sh, int fd)
{
    const struct walk_opts *o = arg;
    struct walker w = {.sh = sh, .fd = fd};
    MDB_env *env;
    MDB_envinfo info;
    MDB_dbi main_db;
    struct stat st;
    char *names[VERIFY_MAXDBS];
    size_t nnames = 0;
    int mfd, rc;
    snprintf(sh->where, sizeof(sh->where), "(opening)");
    if ((rc = mdb_env_create(&env)) != 0)
        return store_err(rc);
    if ((rc = mdb_env_set_maxdbs(env, VERIFY_MAXDBS)) != 0 ||
        (rc = mdb_env_set_mapsize(env, VERIFY_MAP_MIN)) != 0 ||
        (rc = mdb_env_open(env, path, MDB_RDONLY | MDB_NOTLS, STORE_FILE_MODE)) != 0 ||
        (rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &w.txn)) != 0) {
        mdb_env_close(env);
        if (rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND) {
            problem(&w, "LMDB refuses the file: %s", mdb_strerror(rc));
            return ISOPROF_EDAMAGED;
        }
        return store_err(rc);
    }
    /* The file's size once the snapshot is taken: every page the snapshot
     * can reach was written before. */
    if ((rc = mdb_env_info(env, &info)) != 0 || (rc = mdb_env_get_fd(env, &mfd)) != 0 ||
        fstat(mfd, &st) != 0) {
        rc = rc ? store_err(rc) : -errno;
        goto out;
    }
    if (store_map_find(mfd, (uint64_t)st.st_size, &w.lo, &w.hi) != 0)
        w.lo = w.hi = NULL;
    w.last_pg = info.me_last_pgno;
    walk_db(&w, LMDB_FREE_DBI, "free list", 1, NULL, NULL, 0);
    if ((rc = mdb_dbi_open(w.txn, NULL, 0, &main_db)) != 0) {
        problem(&w, "main: %s", mdb_strerror(rc));
    } else {
        walk_db(&w, main_db, "main", 0, names, &nnames, VERIFY_MAXDBS - 2);
        for (size_t i = 0; i < nnames; i++) {
            MDB_dbi dbi;
            char shown[64];
            name_text(names[i], strlen(names[i]), shown, sizeof(shown));
            int orc = mdb_dbi_open(w.txn, names[i], 0, &dbi);
            if (orc == 0)
                walk_db(&w, dbi, shown, 0, NULL, NULL, 0);
            else if (orc != MDB_INCOMPATIBLE) /* INCOMPATIBLE: a plain record */
                problem(&w, "main: database %s: %s", shown, mdb_strerror(orc));
            isoprof_free(names[i]);
        }
    }
    rc = 0;
out:
    mdb_txn_abort(w.txn);
    mdb_env_close(env);
    if (rc == 0 && w.lines > 0) {
        if (w.dropped) {
            char tail[64];
            int n = snprintf(tail, sizeof(tail), "... and %u more\n", w.dropped);
            (void)isoprof_write_full(fd, tail, (size_t)n); /* the parent is gone or gave up */
        }
        return ISOPROF_EDAMAGED;
    }
    if (rc != 0 || !(o->flags & STORE_VERIFY_RECORDS))
        return rc;
    /* The structure holds: now the records, as store_check sees them. */
    snprintf(sh->where, sizeof(sh->where), "(records)");
    sh->records = 0;
    /* The walk read every page in use: a short file needs no free list
     * child of the child. */
    struct store_options ro = {.readonly = 1, .verified = STORE_VERIFY_PASSED};
    struct store *s = NULL;
    char *why = NULL;
    rc = store_open(path, &ro, &s, &why);
    if (rc == 0) {
        rc = store_check(s, &why);
        store_close(s);
    }
    if (why)
        (void)isoprof_write_full(fd, why, strlen(why)); /* the parent is gone or gave up */
    isoprof_free(why);
    return rc;
}

/* The child's text as the caller's why: problem lines (damage, store_check's
 * findings) each end in a newline; another error is store_open's one-line
 * message without one. Takes *text. */
static char *report_text(const char *path, int rc, char **text)
{
    char *t = *text;
    *text = NULL;
    if (t == NULL || t[0] == '\0') {
        isoprof_free(t);
        return isoprof_asprintf("%s: %s%s", path, isoprof_strerror(rc),
                                rc == ISOPROF_EDAMAGED || rc == ISOPROF_ECORRUPT ? "\n" : "");
    }
    size_t l = strlen(t);
    while (l > 0 && t[l - 1] == '\n')
        t[--l] = '\0';
    if (rc != ISOPROF_EDAMAGED && rc != ISOPROF_ECORRUPT)
        return t;
    char *nl = isoprof_asprintf("%s\n", t);
    isoprof_free(t);
    return nl;
}

/* Where the walk was, for a report: "in DB windows after 12 records". */
static void where_text(const struct child_out *o, char *buf, size_t cap)
{
    const char *where = o->where[0] ? o->where : "(starting)";
    if (strcmp(where, "(records)") == 0)
        snprintf(buf, cap, "while checking the records");
    else
        snprintf(buf, cap, "in DB %s after %" PRIu64 " records", where, o->records);
}

int store_verify(const char *path, unsigned flags, uint64_t timeout_ms, char **why)
{
    char file[PATH_MAX + 16];
    struct stat st;
    if (why)
        *why = NULL;
    if (path == NULL)
        return -EINVAL;
    /* One bound for the whole check: the free list child takes its time
     * from it and the walk gets the rest. */
    uint64_t deadline = timeout_ms ? isoprof_now_mono_ns() + timeout_ms * 1000000 : 0;
    int n = snprintf(file, sizeof(file), "%s/data.mdb", path);
    if (n < 0 || (size_t)n >= sizeof(file))
        return -ENAMETOOLONG;
    int src = stat(file, &st);
    if (src != 0 || st.st_size == 0) {
        int rc = src != 0 ? -errno : -ENOENT; /* empty: LMDB has not written it yet */
        if (why)
            *why = isoprof_asprintf("%s: %s", path, isoprof_strerror(rc));
        return rc;
    }
    char *fwhy = NULL;
    int rc = store_verify_file(path, 0, timeout_ms, &fwhy);
    if (rc != 0) {
        /* A report is one line a problem, like the walk's, so that every
         * report reads the same; the rest is one message. */
        int lines = rc == ISOPROF_EDAMAGED || rc == ISOPROF_ECORRUPT || rc == -ETIMEDOUT;
        if (why && fwhy)
            *why = isoprof_asprintf("%s%s", fwhy, lines ? "\n" : "");
        isoprof_free(fwhy);
        return rc;
    }
    uint64_t left = 0;
    if (timeout_ms) {
        left = ms_left(deadline);
        if (left == 0)
            left = 1; /* spent: the walk is killed as it starts, and says so */
    }
    struct walk_opts o = {flags};
    struct child_out out;
    char how[64], where[96];
    rc = child_run(path, walk_child, &o, left, &out);
    if (rc == 0 && out.done && out.rc < 0 && out.rc > ISOPROF__ERR_END &&
        (out.text == NULL || out.text[0] == '\0')) {
        /* The walk could not open the store (-EMFILE, -ENOMEM; -EACCES:
         * no lock.mdb and no right to make one). */
        rc = out.rc;
        if (why)
            *why = isoprof_asprintf("%s: could not check the store: the walk failed: %s", path,
                                    isoprof_strerror(rc));
    } else if (rc == 0 && out.done) {
        rc = out.rc;
        if (rc != 0 && why)
            *why = report_text(path, rc, &out.text);
    } else if (rc == -ETIMEDOUT || (rc == 0 && child_faulted(&out))) {
        if (rc == -ETIMEDOUT && timeout_ms % 1000 == 0)
            snprintf(how, sizeof(how), "did not finish within %" PRIu64 " s", timeout_ms / 1000);
        else if (rc == -ETIMEDOUT)
            snprintf(how, sizeof(how), "did not finish within %" PRIu64 " ms", timeout_ms);
        else
            death_text(&out, how, sizeof(how));
        where_text(&out, where, sizeof(where));
        if (why)
            *why = isoprof_asprintf("the walk %s %s\n%s", how, where, out.text ? out.text : "");
        rc = rc == -ETIMEDOUT ? -ETIMEDOUT : ISOPROF_EDAMAGED;
    } else if (rc != 0) {
        /* No pipe, mapping or process for the walk (-EMFILE, -EAGAIN,
         * -ENOMEM), or its output could not be kept. */
        if (why)
            *why = isoprof_asprintf("%s: could not check the store: the walk could not run: %s",
                                    path, isoprof_strerror(rc));
    } else {
        /* Killed from outside (SIGKILL: the OOM killer, a person), or gone
         * without a result: nothing is known of the file. */
        death_text(&out, how, sizeof(how));
        where_text(&out, where, sizeof(where));
        if (why)
            *why =
                isoprof_asprintf("%s: could not check the store: the walk %s %s", path, how, where);
        rc = -ECANCELED;
    }
    isoprof_free(out.text);
    return rc;
}

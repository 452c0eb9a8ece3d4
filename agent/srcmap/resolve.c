/*
 * resolve.c - finding, loading and caching the source maps of scripts
 * (see resolve.h for the rules).
 *
 * DESIGN: the cache holds two tables under one mutex: maps (parsed, with
 * a reference count and an LRU list, charged by srcmap_bytes) and scripts
 * (what a script resolved to: a map, "none", or a refusal with its
 * reason). A session resolves each script URL once: under the lock it
 * looks the script up; outside the lock it checks the files' identities
 * (stat through the root) and, when they changed or the script is new,
 * finds and parses the map; under the lock again it publishes the result.
 * Two sessions racing on the same new map both parse it and the second
 * drops its copy: conversions run one at a time in the daemon, so this
 * costs nothing in practice and keeps the lock off every read and parse.
 *
 * Every file is opened with openat2 beneath a directory fd: the target's
 * root (RESOLVE_IN_ROOT, so an absolute symlink inside a container stays
 * inside it) and, for a map a script names, the tree it must lie in
 * (RESOLVE_BENEATH, so a symlink out is EXDEV). Magic links (/proc/self/..)
 * are never followed.
 */
#include "resolve.h"

#include "base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK 65536
#define MAX_PATH 4096
#define NONE_RECHECK_NS (30ull * 1000000000ull) /* "no map" is looked for again after */
#define SCRIPT_BUCKETS 1024

/* A file's identity: a change of any field means "read it again". */
struct fid {
    uint64_t dev, ino, size;
    int64_t mtime_ns;
};

struct cmap {
    struct cmap *prev, *next; /* LRU: head is the most recent */
    char *key;                /* root \0 path, or root \0 script "#inline" */
    size_t keylen;
    struct fid id;
    struct srcmap *m;
    size_t bytes;
    unsigned refs;
};

enum script_state { S_NONE, S_MAP, S_REFUSED };

struct cscript {
    struct cscript *hnext;       /* hash chain */
    struct cscript *prev, *next; /* LRU */
    char *key;                   /* root \0 url */
    size_t keylen;
    uint32_t hash;
    struct fid sid; /* the script file's, zero when it is not a file */
    enum script_state state;
    struct cmap *map; /* S_MAP: a reference */
    char *map_key;    /* S_MAP, S_REFUSED: the map's key (root \0 path) */
    struct fid mid;   /* the map file's identity when resolved */
    bool has_mid;     /* mid is a file's (else the map was refused unopened) */
    bool no_comment;  /* the script (sid) ends without a sourceMappingURL comment */
    int reason;       /* S_REFUSED */
    uint64_t when_ns; /* S_NONE, and a refusal without mid: when it was looked for */
};

struct srcmap_cache {
    pthread_mutex_t mu;
    size_t budget, max_file;
    struct cmap *mhead, *mtail;
    size_t nmaps, bytes;
    struct cscript *buckets[SCRIPT_BUCKETS];
    struct cscript *shead, *stail;
    size_t nscripts;
    struct srcmap_stats st;
};

/* --- small helpers --- */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t fnv(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static void fid_of(const struct stat *st, struct fid *f)
{
    f->dev = (uint64_t)st->st_dev;
    f->ino = (uint64_t)st->st_ino;
    f->size = (uint64_t)st->st_size;
    f->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static bool fid_eq(const struct fid *a, const struct fid *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns;
}

/* key = a \0 b */
static char *key2(const char *a, const char *b, const char *suffix, size_t *len)
{
    size_t na = strlen(a), nb = strlen(b), ns = suffix ? strlen(suffix) : 0;
    char *k = isoprof_malloc(na + 1 + nb + ns + 1);
    if (k == NULL)
        return NULL;
    memcpy(k, a, na);
    k[na] = '\0';
    memcpy(k + na + 1, b, nb);
    if (ns)
        memcpy(k + na + 1 + nb, suffix, ns);
    k[na + 1 + nb + ns] = '\0';
    *len = na + 1 + nb + ns;
    return k;
}

/* Normalizes an absolute path into out (MAX_PATH). 0, or -1 when it
 * does not fit. */
static int path_norm(const char *in, char *out)
{
    return srcmap_path_norm("", in, out, MAX_PATH) > 0 ? 0 : -1;
}

/* Is path (normalized) dir itself or beneath it (normalized)? */
static bool path_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    if (n == 1 && dir[0] == '/')
        return true;
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static void dir_of(const char *path, char *out)
{
    snprintf(out, MAX_PATH, "%s", path);
    char *sl = strrchr(out, '/');
    if (sl == NULL || sl == out)
        snprintf(out, MAX_PATH, "/");
    else
        *sl = '\0';
}

static const char *base_of(const char *path)
{
    const char *sl = strrchr(path, '/');
    return sl ? sl + 1 : path;
}

/* Percent-decodes s[0..n) into out (MAX_PATH), stopping at '?' or '#'.
 * Returns 0, or -1 when it does not fit or decodes a NUL. */
static int pct_decode(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '?' || c == '#')
            break;
        int hi, lo;
        if (c == '%' && i + 2 < n + 0 && (hi = isoprof_hexval((unsigned char)s[i + 1])) >= 0 &&
            (lo = isoprof_hexval((unsigned char)s[i + 2])) >= 0) {
            c = (char)(hi << 4 | lo);
            i += 2;
        }
        if (c == '\0' || o + 1 >= MAX_PATH)
            return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

static long sys_openat2(int dirfd, const char *path, int flags, uint64_t resolve)
{
    struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC), .resolve = resolve};
    long fd;
    do
        fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
    while (fd < 0 && errno == EINTR);
    return fd;
}

/*
 * A readable fd of the regular file that the O_PATH fd pfd (consumed)
 * names, or -1 with errno set (EISDIR, EINVAL for anything else). A FIFO,
 * a socket or a device is never opened for reading: opening a FIFO blocks
 * until a writer comes, and a device's open can act (a tty, a watchdog).
 * The reopen goes through the fd itself, so it is the same file.
 */
static int reopen_file(long pfd)
{
    struct stat st;
    int e = fstat((int)pfd, &st) != 0 ? errno
            : S_ISREG(st.st_mode)     ? 0
            : S_ISDIR(st.st_mode)     ? EISDIR
                                      : EINVAL;
    int fd = -1;
    if (e == 0) {
        char link[64];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", (int)pfd);
        fd = open(link, O_RDONLY | O_NOCTTY | O_CLOEXEC);
        e = errno;
    }
    close((int)pfd);
    errno = e;
    return fd;
}

/*
 * Opens path (absolute, normalized, inside the root rootfd) for reading.
 * With tree (absolute, normalized, path beneath it): resolved beneath tree,
 * so that no symlink leads out of it. Returns the fd, or -reason:
 * SRCMAP_E_OUTSIDE for an escape, SRCMAP_E_READ for anything else, with
 * *enoent set when the file does not exist.
 */
static int open_in(int rootfd, const char *path, const char *tree, bool *enoent)
{
    *enoent = false;
    const uint64_t in_root = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    long fd;
    if (tree == NULL) {
        fd = sys_openat2(rootfd, path[1] ? path + 1 : ".", O_PATH, in_root);
    } else {
        long dfd = sys_openat2(rootfd, tree[1] ? tree + 1 : ".", O_PATH | O_DIRECTORY, in_root);
        if (dfd < 0) {
            *enoent = errno == ENOENT || errno == ENOTDIR;
            return -SRCMAP_E_READ;
        }
        const char *rel = path + strlen(tree);
        while (*rel == '/')
            rel++;
        fd = sys_openat2((int)dfd, *rel ? rel : ".", O_PATH,
                         RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
        int e = errno;
        close((int)dfd);
        errno = e;
    }
    if (fd < 0) {
        if (errno == EXDEV || errno == ELOOP)
            return -SRCMAP_E_OUTSIDE;
        *enoent = errno == ENOENT || errno == ENOTDIR;
        return -SRCMAP_E_READ;
    }
    int rfd = reopen_file(fd);
    return rfd >= 0 ? rfd : -SRCMAP_E_READ;
}

static ssize_t pread_full(int fd, void *buf, size_t n, off_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* --- the session --- */

struct memo {
    char *url;
    size_t len;
    uint32_t hash;
    struct cmap *map; /* a reference, or NULL: nothing to map with */
    bool file;        /* the script could have had a map (counts as unmapped) */
};

struct srcmap_session {
    struct srcmap_cache *c;
    const struct srcmap_where *w;
    int rootfd;
    char root[MAX_PATH]; /* "" for "/" */
    struct memo *memo;
    size_t nmemo, memocap;
    struct srcmap_event *ev;
    size_t nev, evcap;
    uint64_t mapped, unmapped;
    int deno_state; /* 0: DENO_DIR not looked for yet; 1 found; -1 none */
    char deno_dir[MAX_PATH];
    char *scratch; /* 2 * READ_CHUNK bytes: what is read, what it decodes to */
};

static void add_event(struct srcmap_session *s, int reason, const char *path, const char *script,
                      const char *why)
{
    if (s->nev == s->evcap) {
        size_t nc = s->evcap ? s->evcap * 2 : 4;
        struct srcmap_event *e = isoprof_realloc(s->ev, nc * sizeof(*e));
        if (e == NULL)
            return;
        s->ev = e;
        s->evcap = nc;
    }
    struct srcmap_event *e = &s->ev[s->nev];
    e->reason = reason;
    e->path = isoprof_strdup(path ? path : "");
    e->script = isoprof_strdup(script ? script : "");
    e->why = isoprof_strdup(why ? why : "");
    if (e->path == NULL || e->script == NULL || e->why == NULL) {
        isoprof_free((void *)e->path);
        isoprof_free((void *)e->script);
        isoprof_free((void *)e->why);
        return;
    }
    s->nev++;
}

int srcmap_session_new(struct srcmap_cache *c, const struct srcmap_where *w,
                       struct srcmap_session **out)
{
    struct srcmap_session *s = isoprof_calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->c = c;
    s->w = w;
    s->rootfd = -1;
    if ((s->scratch = isoprof_malloc(2 * READ_CHUNK)) == NULL) {
        isoprof_free(s);
        return -ENOMEM;
    }
    const char *root = w && w->root && w->root[0] ? w->root : "/";
    if (path_norm(root, s->root) != 0)
        snprintf(s->root, sizeof(s->root), "/");
    /* A root that cannot be opened (the process is gone) leaves every
     * frame unmapped. */
    s->rootfd = open(s->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    *out = s;
    return 0;
}

/* --- the cache --- */

int srcmap_cache_new(size_t budget, size_t max_file, struct srcmap_cache **out)
{
    struct srcmap_cache *c = isoprof_calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        isoprof_free(c);
        return -ENOMEM;
    }
    c->budget = budget ? budget : SRCMAP_DEFAULT_BUDGET;
    c->max_file = max_file ? max_file : SRCMAP_DEFAULT_MAX_FILE;
    *out = c;
    return 0;
}

static void map_unlink(struct srcmap_cache *c, struct cmap *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->mhead = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->mtail = e->prev;
    e->prev = e->next = NULL;
}

static void map_front(struct srcmap_cache *c, struct cmap *e)
{
    e->next = c->mhead;
    e->prev = NULL;
    if (c->mhead)
        c->mhead->prev = e;
    else
        c->mtail = e;
    c->mhead = e;
}

static void map_destroy(struct cmap *e)
{
    srcmap_free(e->m);
    isoprof_free(e->key);
    isoprof_free(e);
}

/* Under the lock: drops a reference; a map no longer listed goes. */
static void map_put(struct srcmap_cache *c, struct cmap *e)
{
    (void)c;
    ISOPROF_ASSERT(e->refs > 0);
    if (--e->refs == 0 && e->key == NULL)
        map_destroy(e);
}

/* Under the lock: evicts unused maps, oldest first, until the cache holds
 * at most budget - need bytes (or nothing unused is left). Maps are
 * referenced by the scripts that resolved to them too: a script's
 * reference is dropped with the map. */
static void script_drop_map(struct srcmap_cache *c, struct cmap *e);
static void evict(struct srcmap_cache *c, size_t need)
{
    struct cmap *e = c->mtail;
    while (e && c->bytes + need > c->budget) {
        struct cmap *prev = e->prev;
        script_drop_map(c, e); /* the scripts' references */
        if (e->refs == 0) {
            map_unlink(c, e);
            c->nmaps--;
            c->bytes -= e->bytes;
            c->st.evictions++;
            map_destroy(e);
        }
        e = prev;
    }
}

static void script_unlink_lru(struct srcmap_cache *c, struct cscript *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        c->shead = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        c->stail = s->prev;
    s->prev = s->next = NULL;
}

static void script_front(struct srcmap_cache *c, struct cscript *s)
{
    s->next = c->shead;
    s->prev = NULL;
    if (c->shead)
        c->shead->prev = s;
    else
        c->stail = s;
    c->shead = s;
}

static void script_clear(struct srcmap_cache *c, struct cscript *s)
{
    if (s->map)
        map_put(c, s->map);
    s->map = NULL;
    isoprof_free(s->map_key);
    s->map_key = NULL;
}

static void script_remove(struct srcmap_cache *c, struct cscript *s)
{
    struct cscript **pp = &c->buckets[s->hash % SCRIPT_BUCKETS];
    while (*pp != s)
        pp = &(*pp)->hnext;
    *pp = s->hnext;
    script_unlink_lru(c, s);
    script_clear(c, s);
    isoprof_free(s->key);
    isoprof_free(s);
    c->nscripts--;
}

static void script_drop_map(struct srcmap_cache *c, struct cmap *e)
{
    /* Scripts resolved to e forget it (they find it again by key, or load
     * it again, at their next use). A script holds at most one reference. */
    for (struct cscript *s = c->shead; s && e->refs > 0; s = s->next) {
        if (s->map == e) {
            e->refs--;
            s->map = NULL;
        }
    }
}

static struct cscript *script_find(struct srcmap_cache *c, const char *key, size_t keylen,
                                   uint32_t h)
{
    for (struct cscript *s = c->buckets[h % SCRIPT_BUCKETS]; s; s = s->hnext)
        if (s->hash == h && s->keylen == keylen && memcmp(s->key, key, keylen) == 0)
            return s;
    return NULL;
}

static struct cmap *map_find(struct srcmap_cache *c, const char *key, size_t keylen)
{
    for (struct cmap *e = c->mhead; e; e = e->next)
        if (e->keylen == keylen && memcmp(e->key, key, keylen) == 0)
            return e;
    return NULL;
}

void srcmap_cache_limits(struct srcmap_cache *c, size_t budget, size_t max_file)
{
    pthread_mutex_lock(&c->mu);
    budget = budget ? budget : SRCMAP_DEFAULT_BUDGET;
    max_file = max_file ? max_file : SRCMAP_DEFAULT_MAX_FILE;
    bool raised = budget > c->budget || max_file > c->max_file;
    c->budget = budget;
    c->max_file = max_file;
    evict(c, 0);
    /* Maps refused for their size are looked at again under the new
     * limits (counted and said again if still too big). */
    for (struct cscript *s = c->shead; raised && s; s = s->next)
        if (s->state == S_REFUSED &&
            (s->reason == SRCMAP_E_TOOBIG || s->reason == SRCMAP_E_FILE_TOOBIG))
            memset(&s->sid, 0xff, sizeof(s->sid));
    pthread_mutex_unlock(&c->mu);
}

void srcmap_cache_stats(struct srcmap_cache *c, struct srcmap_stats *st)
{
    pthread_mutex_lock(&c->mu);
    *st = c->st;
    st->maps = c->nmaps;
    st->bytes = c->bytes;
    st->budget = c->budget;
    pthread_mutex_unlock(&c->mu);
}

void srcmap_cache_free(struct srcmap_cache *c)
{
    if (c == NULL)
        return;
    while (c->shead)
        script_remove(c, c->shead);
    for (struct cmap *e = c->mhead, *n; e; e = n) {
        n = e->next;
        ISOPROF_ASSERT(e->refs == 0);
        map_destroy(e);
    }
    pthread_mutex_destroy(&c->mu);
    isoprof_free(c);
}

/* --- loading a map --- */

/* A source of map bytes: a file range, decoded as it is read. */
enum { ENC_RAW, ENC_BASE64, ENC_PCT };

struct loader {
    struct srcmap_session *s;
    char why[256];
};

/* Feeds fd[off, off + len) (len -1: to the end of the file) to a parser,
 * decoding base64 or percent-encoding. Returns 0 or a reason with l->why. */
static int feed_range(struct loader *l, struct srcmap_parser *p, int fd, off_t off, int64_t len,
                      int enc)
{
    char *buf = l->s->scratch, *out = l->s->scratch + READ_CHUNK;
    uint32_t acc = 0;
    int nacc = 0, pct = 0, pctv = 0;
    int64_t left = len;
    while (left != 0) {
        size_t want = READ_CHUNK;
        if (left > 0 && (int64_t)want > left)
            want = (size_t)left;
        ssize_t r = pread_full(fd, buf, want, off);
        if (r < 0) {
            snprintf(l->why, sizeof(l->why), "read: %s", strerror(errno));
            return SRCMAP_E_READ;
        }
        if (r == 0) {
            if (left > 0) {
                snprintf(l->why, sizeof(l->why), "the file was cut short while it was read");
                return SRCMAP_E_READ;
            }
            break;
        }
        off += r;
        if (left > 0)
            left -= r;
        size_t n = 0;
        if (enc == ENC_RAW) {
            int rc = srcmap_parser_feed(p, buf, (size_t)r);
            if (rc)
                return rc;
            continue;
        }
        for (ssize_t i = 0; i < r; i++) {
            unsigned char ch = (unsigned char)buf[i];
            if (enc == ENC_BASE64) {
                int d;
                if (ch >= 'A' && ch <= 'Z')
                    d = ch - 'A';
                else if (ch >= 'a' && ch <= 'z')
                    d = ch - 'a' + 26;
                else if (ch >= '0' && ch <= '9')
                    d = ch - '0' + 52;
                else if (ch == '+' || ch == '-')
                    d = 62;
                else if (ch == '/' || ch == '_')
                    d = 63;
                else if (ch == '=' || ch == '\r' || ch == ' ' || ch == '\t')
                    continue;
                else {
                    snprintf(l->why, sizeof(l->why), "a byte 0x%02x in base64 data", ch);
                    return SRCMAP_E_DATA_URL;
                }
                acc = acc << 6 | (uint32_t)d;
                if (++nacc == 4) {
                    out[n++] = (char)(acc >> 16);
                    out[n++] = (char)(acc >> 8);
                    out[n++] = (char)acc;
                    nacc = 0;
                    acc = 0;
                }
            } else {
                if (pct) {
                    int v = isoprof_hexval(ch);
                    if (v < 0) {
                        snprintf(l->why, sizeof(l->why), "a bad %%-escape in the data URL");
                        return SRCMAP_E_DATA_URL;
                    }
                    pctv = pctv << 4 | v;
                    if (++pct == 3) {
                        out[n++] = (char)pctv;
                        pct = 0;
                    }
                } else if (ch == '%') {
                    pct = 1;
                    pctv = 0;
                } else {
                    out[n++] = (char)ch;
                }
            }
        }
        if (n) {
            int rc = srcmap_parser_feed(p, out, n);
            if (rc)
                return rc;
        }
    }
    if (enc == ENC_BASE64 && nacc) {
        if (nacc == 1) {
            snprintf(l->why, sizeof(l->why), "base64 data cut in the middle of a byte");
            return SRCMAP_E_DATA_URL;
        }
        char tail[2];
        size_t n = 0;
        acc <<= 6 * (4 - nacc);
        tail[n++] = (char)(acc >> 16);
        if (nacc == 3)
            tail[n++] = (char)(acc >> 8);
        int rc = srcmap_parser_feed(p, tail, n);
        if (rc)
            return rc;
    }
    if (pct) {
        snprintf(l->why, sizeof(l->why), "a %%-escape cut at the end of the data URL");
        return SRCMAP_E_DATA_URL;
    }
    return 0;
}

/* Parses fd[off, off + len) as a map. On success *out; else a reason and
 * l->why. */
static int load_range(struct loader *l, int fd, off_t off, int64_t len, int enc, size_t budget,
                      struct srcmap **out)
{
    struct srcmap_parser *p;
    if (srcmap_parser_new(budget, &p) != 0)
        return SRCMAP_E_NOMEM;
    int rc = feed_range(l, p, fd, off, len, enc);
    char *why = NULL;
    if (rc == 0) {
        rc = srcmap_parser_finish(p, out, &why);
        if (rc != 0)
            snprintf(l->why, sizeof(l->why), "%s", why ? why : srcmap_reason(rc));
    } else if (l->why[0] == '\0') {
        srcmap_parser_finish(p, out, &why);
        snprintf(l->why, sizeof(l->why), "%s", why ? why : srcmap_reason(rc));
    }
    isoprof_free(why);
    srcmap_parser_free(p);
    return rc;
}

/* --- finding the map of a script --- */

/* What a script resolved to, before it is published. */
struct found {
    enum script_state state;
    int reason;
    char map_path[MAX_PATH]; /* inside root */
    struct fid mid;
    bool has_mid;     /* mid was read off the map file (or the script, inline) */
    bool no_comment;  /* in: the script is known to have no comment; out: it has none */
    struct srcmap *m; /* a fresh parse, or NULL when the cache had it */
    bool inline_map;
    char why[320];
};

/* Reads the map at path (opened as fd) unless the cache has it. */
static void load_file(struct srcmap_session *s, int fd, const char *path, struct found *f)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        f->state = S_REFUSED;
        f->reason = SRCMAP_E_READ;
        snprintf(f->why, sizeof(f->why), "fstat: %s", strerror(errno));
        return;
    }
    fid_of(&st, &f->mid);
    f->has_mid = true;
    snprintf(f->map_path, sizeof(f->map_path), "%s", path);
    f->state = S_MAP;
    pthread_mutex_lock(&s->c->mu);
    size_t max_file = s->c->max_file, budget = s->c->budget;
    size_t kl;
    char *key = key2(s->root, path, NULL, &kl);
    struct cmap *have = key ? map_find(s->c, key, kl) : NULL;
    bool fresh = have && fid_eq(&have->id, &f->mid);
    pthread_mutex_unlock(&s->c->mu);
    isoprof_free(key);
    if (fresh)
        return; /* published by key */
    if ((uint64_t)st.st_size > max_file) {
        f->state = S_REFUSED;
        f->reason = SRCMAP_E_FILE_TOOBIG;
        snprintf(f->why, sizeof(f->why), "%lld bytes, past source_maps_max_file (%zu)",
                 (long long)st.st_size, max_file);
        return;
    }
    struct loader l = {.s = s};
    int rc = load_range(&l, fd, 0, (int64_t)st.st_size, ENC_RAW, budget, &f->m);
    struct stat st2;
    if (rc == 0 &&
        (fstat(fd, &st2) != 0 || st2.st_size != st.st_size ||
         st2.st_mtim.tv_sec != st.st_mtim.tv_sec || st2.st_mtim.tv_nsec != st.st_mtim.tv_nsec)) {
        srcmap_free(f->m);
        f->m = NULL;
        rc = SRCMAP_E_READ;
        snprintf(l.why, sizeof(l.why), "the file changed while it was read");
    }
    if (rc != 0) {
        f->state = S_REFUSED;
        f->reason = rc;
        snprintf(f->why, sizeof(f->why), "%s", l.why);
        return;
    }
    char dir[MAX_PATH];
    dir_of(path, dir);
    rc = srcmap_rebase_sources(f->m, dir);
    if (rc != 0) {
        srcmap_free(f->m);
        f->m = NULL;
        f->state = S_REFUSED;
        f->reason = rc == -ENOMEM ? SRCMAP_E_NOMEM : SRCMAP_E_TOOBIG;
        snprintf(f->why, sizeof(f->why), "its sources pass the memory cap");
    }
}

/* Where fd's file is inside the session's root, into out (MAX_PATH): its
 * path as the kernel resolved it (/proc/self/fd), less the root's. */
static int fd_where(const struct srcmap_session *s, int fd, char *out)
{
    char link[64], host[MAX_PATH], root[MAX_PATH];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, host, sizeof(host) - 1);
    snprintf(link, sizeof(link), "/proc/self/fd/%d", s->rootfd);
    ssize_t rn = readlink(link, root, sizeof(root) - 1);
    if (n <= 0 || n >= (ssize_t)sizeof(host) - 1 || rn <= 0 || rn >= (ssize_t)sizeof(root) - 1)
        return -1;
    host[n] = root[rn] = '\0';
    if (host[0] != '/')
        return -1;
    if (strcmp(root, "/") == 0)
        return snprintf(out, MAX_PATH, "%s", host) < MAX_PATH ? 0 : -1;
    size_t rl = (size_t)rn;
    if (strncmp(host, root, rl) != 0 || (host[rl] != '/' && host[rl] != '\0'))
        return -1;
    return snprintf(out, MAX_PATH, "%s", host[rl] ? host + rl : "/") < MAX_PATH ? 0 : -1;
}

/* Is the file at where (inside the root, resolved) in the directory dir
 * (inside the root, not resolved) once dir is resolved too? */
static bool in_dir(const struct srcmap_session *s, const char *where, const char *dir)
{
    long dfd = sys_openat2(s->rootfd, dir[1] ? dir + 1 : ".", O_PATH | O_DIRECTORY,
                           RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
    if (dfd < 0)
        return false;
    char real[MAX_PATH];
    bool ok = fd_where(s, (int)dfd, real) == 0 && path_under(where, real);
    close((int)dfd);
    return ok;
}

/*
 * open_in for a map that must lie in tree or a source_maps dir.
 * RESOLVE_BENEATH refuses every absolute symlink (EXDEV), even one that
 * stays in the tree, and one that leads into a source_maps dir: such a
 * path is opened again within the root (RESOLVE_IN_ROOT) and accepted
 * when the file the kernel reached lies in the tree or a dir.
 */
static int open_allowed(struct srcmap_session *s, const char *path, const char *tree, bool *enoent)
{
    int fd = open_in(s->rootfd, path, tree, enoent);
    if (fd != -SRCMAP_E_OUTSIDE)
        return fd;
    bool e2;
    int rfd = open_in(s->rootfd, path, NULL, &e2);
    if (rfd < 0)
        return -SRCMAP_E_OUTSIDE;
    char where[MAX_PATH], dn[MAX_PATH];
    bool ok = fd_where(s, rfd, where) == 0 && in_dir(s, where, tree);
    for (size_t i = 0; !ok && s->w && i < s->w->ndirs; i++)
        ok = path_norm(s->w->dirs[i], dn) == 0 && in_dir(s, where, dn);
    if (ok)
        return rfd;
    close(rfd);
    return -SRCMAP_E_OUTSIDE;
}

/* Tries the map file at path, beneath tree. Returns true when the search
 * is over (a map, or a refusal); false when there is no such file. */
static bool try_path(struct srcmap_session *s, const char *path, const char *tree, struct found *f)
{
    bool enoent;
    int fd = open_allowed(s, path, tree, &enoent);
    if (fd == -SRCMAP_E_OUTSIDE) {
        f->state = S_REFUSED;
        f->reason = SRCMAP_E_OUTSIDE;
        snprintf(f->map_path, sizeof(f->map_path), "%s", path);
        snprintf(f->why, sizeof(f->why), "a symlink leads outside %s", tree ? tree : "the root");
        return true;
    }
    if (fd < 0) {
        if (enoent)
            return false;
        f->state = S_REFUSED;
        f->reason = SRCMAP_E_READ;
        snprintf(f->map_path, sizeof(f->map_path), "%s", path);
        snprintf(f->why, sizeof(f->why), "open: %s", strerror(errno));
        return true;
    }
    load_file(s, fd, path, f);
    close(fd);
    return true;
}

/* Does the start of map file fd name `base` in its "file" field? A textual
 * look at the first bytes: tsc and most bundlers write "file" near the top. */
static bool map_names_file(struct srcmap_session *s, int fd, const char *base)
{
    ssize_t r = pread_full(fd, s->scratch, 4095, 0);
    if (r <= 0)
        return false;
    s->scratch[r] = '\0';
    const char *k = strstr(s->scratch, "\"file\"");
    if (k == NULL)
        return false;
    k += 6;
    while (*k == ' ' || *k == '\t' || *k == '\n' || *k == '\r' || *k == ':')
        k++;
    if (*k != '"')
        return false;
    k++;
    size_t n = strlen(base);
    const char *kb = k;
    /* the field may carry a path: compare its base name */
    const char *end = strchr(k, '"');
    if (end == NULL)
        return false;
    for (const char *q = k; q < end; q++)
        if (*q == '/')
            kb = q + 1;
    return (size_t)(end - kb) == n && memcmp(kb, base, n) == 0;
}

/* Step 3: the target's source_maps directories. */
static bool try_dirs(struct srcmap_session *s, const char *base, struct found *f)
{
    const struct srcmap_where *w = s->w;
    if (w == NULL || *base == '\0')
        return false;
    char dir[MAX_PATH], path[MAX_PATH + 300];
    for (size_t i = 0; i < w->ndirs; i++) {
        if (path_norm(w->dirs[i], dir) != 0)
            continue;
        int pn = snprintf(path, sizeof(path), "%s/%s.map", strcmp(dir, "/") ? dir : "", base);
        if (pn < 0 || (size_t)pn >= MAX_PATH)
            continue; /* too long to be a path: no such file */
        if (try_path(s, path, dir, f))
            return true;
    }
    for (size_t i = 0; i < w->ndirs; i++) {
        if (path_norm(w->dirs[i], dir) != 0)
            continue;
        long dfd = sys_openat2(s->rootfd, dir[1] ? dir + 1 : ".", O_RDONLY | O_DIRECTORY,
                               RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
        if (dfd < 0)
            continue;
        DIR *d = fdopendir((int)dfd);
        if (d == NULL) {
            close((int)dfd);
            continue;
        }
        int looked = 0;
        struct dirent *de;
        bool done = false;
        while (!done && looked < SRCMAP_MAX_DIR_MAPS && (de = readdir(d)) != NULL) {
            size_t n = strlen(de->d_name);
            if (n < 5 || strcmp(de->d_name + n - 4, ".map") != 0)
                continue;
            looked++;
            long pfd =
                sys_openat2(dirfd(d), de->d_name, O_PATH, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
            long fd = pfd < 0 ? -1 : reopen_file(pfd);
            if (fd < 0)
                continue;
            struct stat st;
            if (fstat((int)fd, &st) == 0 && S_ISREG(st.st_mode) &&
                map_names_file(s, (int)fd, base)) {
                snprintf(path, sizeof(path), "%s/%s", strcmp(dir, "/") ? dir : "", de->d_name);
                load_file(s, (int)fd, path, f);
                done = true;
            }
            close((int)fd);
        }
        closedir(d);
        if (done)
            return true;
    }
    return false;
}

/* Moves *end back past blank bytes (newlines, spaces, tabs). False when
 * nothing else is left, or the blanks run past max_scan from size. */
static bool trim_blanks(struct srcmap_session *s, int fd, off_t size, size_t max_scan, off_t *end)
{
    char *buf = s->scratch;
    for (;;) {
        if (*end == 0)
            return false;
        size_t n = *end > SRCMAP_TAIL_BYTES ? SRCMAP_TAIL_BYTES : (size_t)*end;
        if (pread_full(fd, buf, n, *end - (off_t)n) != (ssize_t)n)
            return false;
        size_t k = n;
        while (k > 0 && (buf[k - 1] == '\n' || buf[k - 1] == '\r' || buf[k - 1] == ' ' ||
                         buf[k - 1] == '\t'))
            k--;
        *end -= (off_t)(n - k);
        if (k > 0)
            return true;
        if ((size_t)(size - *end) > max_scan)
            return false;
    }
}

/* The start of the line that ends at end: after the '\n' before it, read
 * backwards in chunks (a minified bundle's one line runs to megabytes),
 * at most max_scan bytes. */
static bool line_start(struct srcmap_session *s, int fd, off_t end, size_t max_scan, off_t *start)
{
    char *buf = s->scratch;
    off_t pos = end;
    while (pos > 0) {
        if ((size_t)(end - pos) > max_scan)
            return false;
        size_t n = pos > READ_CHUNK ? READ_CHUNK : (size_t)pos;
        if (pread_full(fd, buf, n, pos - (off_t)n) != (ssize_t)n)
            return false;
        for (size_t k = n; k > 0; k--) {
            if (buf[k - 1] == '\n') {
                *start = pos - (off_t)n + (off_t)k;
                return true;
            }
        }
        pos -= (off_t)n;
    }
    *start = 0;
    return true;
}

/*
 * The script's "//# sourceMappingURL=" (or "//@") comment: its last
 * non-blank line, or the line before it when the last is another line
 * comment (Deno's emit cache ends with "// denoCacheMetadata=..." after
 * the map). Sets *url_off and *url_len to the URL's place in the file.
 */
static bool find_comment(struct srcmap_session *s, int fd, off_t size, size_t max_scan,
                         off_t *url_off, int64_t *url_len)
{
    static const char a[] = "//# sourceMappingURL=", b[] = "//@ sourceMappingURL=";
    const size_t pl = sizeof(a) - 1;
    off_t end = size;
    for (int line = 0; line < 2; line++) {
        off_t start;
        if (!trim_blanks(s, fd, size, max_scan, &end) || !line_start(s, fd, end, max_scan, &start))
            return false;
        char head[64];
        size_t hn = end - start < (off_t)sizeof(head) ? (size_t)(end - start) : sizeof(head);
        if (pread_full(fd, head, hn, start) != (ssize_t)hn)
            return false;
        size_t ws = 0; /* indentation before the comment */
        while (ws < hn && (head[ws] == ' ' || head[ws] == '\t'))
            ws++;
        start += (off_t)ws;
        hn -= ws;
        memmove(head, head + ws, hn);
        if (hn >= pl && (memcmp(head, a, pl) == 0 || memcmp(head, b, pl) == 0)) {
            *url_off = start + (off_t)pl;
            *url_len = (int64_t)(end - *url_off);
            return true;
        }
        if (hn < 2 || memcmp(head, "//", 2) != 0)
            return false; /* code: no comment at the end */
        end = start;
    }
    return false;
}

/* Steps 1 and 2 for a script file at path (inside root). */
static void find_for_file(struct srcmap_session *s, int sfd, const struct stat *sst,
                          const char *path, struct found *f)
{
    char dir[MAX_PATH], target[MAX_PATH];
    dir_of(path, dir);
    pthread_mutex_lock(&s->c->mu);
    size_t max_file = s->c->max_file, budget = s->c->budget;
    pthread_mutex_unlock(&s->c->mu);
    off_t uoff;
    int64_t ulen;
    /* A script without the comment is not read again (a minified bundle's
     * last line is read back to its start to know) until it changes. */
    if (!f->no_comment && !find_comment(s, sfd, sst->st_size, max_file, &uoff, &ulen))
        f->no_comment = true;
    if (!f->no_comment) {
        char head[256]; /* "data:" and its media type, up to the comma */
        size_t hn = ulen < (int64_t)sizeof(head) - 1 ? (size_t)ulen : sizeof(head) - 1;
        if (pread_full(sfd, head, hn, uoff) != (ssize_t)hn)
            hn = 0;
        head[hn] = '\0';
        if (hn >= 5 && memcmp(head, "data:", 5) == 0) {
            /* the map inline: "data:<type>[;charset=..][;base64],<data>" */
            char *comma = memchr(head, ',', hn);
            if (comma == NULL) {
                f->state = S_REFUSED;
                f->reason = SRCMAP_E_DATA_URL;
                snprintf(f->why, sizeof(f->why), "a data: URL without a comma");
                snprintf(f->map_path, sizeof(f->map_path), "%s", path);
                f->inline_map = true;
                return;
            }
            *comma = '\0';
            int enc = strstr(head, ";base64") ? ENC_BASE64 : ENC_PCT;
            off_t doff = uoff + (comma - head) + 1;
            int64_t dlen = ulen - (int64_t)((comma - head) + 1);
            f->inline_map = true;
            fid_of(sst, &f->mid);
            f->has_mid = true;
            snprintf(f->map_path, sizeof(f->map_path), "%s", path);
            f->state = S_MAP;
            pthread_mutex_lock(&s->c->mu);
            size_t kl;
            char *key = key2(s->root, path, "#inline", &kl);
            struct cmap *have = key ? map_find(s->c, key, kl) : NULL;
            bool fresh = have && fid_eq(&have->id, &f->mid);
            pthread_mutex_unlock(&s->c->mu);
            isoprof_free(key);
            if (fresh)
                return;
            struct loader l = {.s = s};
            int rc = load_range(&l, sfd, doff, dlen, enc, budget, &f->m);
            if (rc == 0) {
                rc = srcmap_rebase_sources(f->m, dir);
                if (rc != 0) {
                    srcmap_free(f->m);
                    f->m = NULL;
                    rc = rc == -ENOMEM ? SRCMAP_E_NOMEM : SRCMAP_E_TOOBIG;
                    snprintf(l.why, sizeof(l.why), "its sources pass the memory cap");
                }
            }
            if (rc != 0) {
                f->state = S_REFUSED;
                f->reason = rc;
                snprintf(f->why, sizeof(f->why), "inline map: %.250s", l.why);
            }
            return;
        }
        /* a URL: a path relative to the script, or absolute */
        char url[MAX_PATH], joined[2 * MAX_PATH + 2];
        if (ulen >= MAX_PATH || pread_full(sfd, s->scratch, (size_t)ulen, uoff) != ulen ||
            pct_decode(s->scratch, (size_t)ulen, url) != 0) {
            f->state = S_REFUSED;
            f->reason = SRCMAP_E_OUTSIDE;
            snprintf(f->map_path, sizeof(f->map_path), "%s", path);
            snprintf(f->why, sizeof(f->why), "a sourceMappingURL that is not a usable path");
            return;
        }
        const char *u = url;
        bool other_scheme = false;
        if (strncmp(u, "file://", 7) == 0) {
            u += 7;
        } else {
            const char *colon = strchr(u, ':'), *slash = strchr(u, '/');
            other_scheme = colon && (slash == NULL || colon < slash);
        }
        if (!other_scheme) {
            if (u[0] == '/')
                snprintf(joined, sizeof(joined), "%s", u);
            else
                snprintf(joined, sizeof(joined), "%s/%s", dir, u);
            if (path_norm(joined, target) != 0) {
                f->state = S_REFUSED;
                f->reason = SRCMAP_E_OUTSIDE;
                snprintf(f->map_path, sizeof(f->map_path), "%s", u);
                snprintf(f->why, sizeof(f->why), "a path too long");
                return;
            }
            const char *tree = NULL;
            char dn[MAX_PATH];
            if (path_under(target, dir))
                tree = dir;
            for (size_t i = 0; tree == NULL && s->w && i < s->w->ndirs; i++) {
                if (path_norm(s->w->dirs[i], dn) == 0 && path_under(target, dn))
                    tree = dn;
            }
            if (tree == NULL) {
                f->state = S_REFUSED;
                f->reason = SRCMAP_E_OUTSIDE;
                snprintf(f->map_path, sizeof(f->map_path), "%s", target);
                snprintf(f->why, sizeof(f->why),
                         "sourceMappingURL %.100s leads outside the script's directory %.100s "
                         "and the source_maps dirs",
                         url, dir);
                return;
            }
            if (try_path(s, target, tree, f))
                return;
            /* named but missing: a hidden map or the dirs may still have it */
        }
    }
    /* 2: hidden, beside the script */
    char hidden[MAX_PATH + 8];
    snprintf(hidden, sizeof(hidden), "%s.map", path);
    if (strlen(hidden) < MAX_PATH && try_path(s, hidden, dir, f))
        return;
    /* 3 */
    if (try_dirs(s, base_of(path), f))
        return;
    f->state = S_NONE;
}

/* Publishes what a script resolved to and returns the map to use (a
 * reference for the session) or NULL. Logs a refusal seen first. */
static struct cmap *publish(struct srcmap_session *s, const char *key, size_t keylen, uint32_t h,
                            const struct fid *sid, struct found *f, const char *script)
{
    struct srcmap_cache *c = s->c;
    struct cmap *ret = NULL;
    bool first_refusal = false;
    pthread_mutex_lock(&c->mu);
    struct cscript *sc = script_find(c, key, keylen, h);
    if (sc == NULL) {
        while (c->nscripts >= SRCMAP_MAX_SCRIPTS && c->stail)
            script_remove(c, c->stail);
        sc = isoprof_calloc(1, sizeof(*sc));
        if (sc && (sc->key = isoprof_malloc(keylen + 1)) == NULL) {
            isoprof_free(sc);
            sc = NULL;
        }
        if (sc) {
            memcpy(sc->key, key, keylen);
            sc->key[keylen] = '\0';
            sc->keylen = keylen;
            sc->hash = h;
            sc->hnext = c->buckets[h % SCRIPT_BUCKETS];
            c->buckets[h % SCRIPT_BUCKETS] = sc;
            script_front(c, sc);
            c->nscripts++;
        }
    } else {
        script_unlink_lru(c, sc);
        script_front(c, sc);
    }
    if (f->state == S_REFUSED) {
        /* counted and reported once per script, map file and reason */
        first_refusal = sc == NULL || sc->state != S_REFUSED || sc->reason != f->reason ||
                        !fid_eq(&sc->mid, &f->mid) || !fid_eq(&sc->sid, sid);
        if (first_refusal)
            c->st.refused[f->reason < SRCMAP_NREASONS ? f->reason : 0]++;
    }
    if (f->state == S_MAP) {
        size_t kl;
        char *mkey = key2(s->root, f->map_path, f->inline_map ? "#inline" : NULL, &kl);
        struct cmap *e = mkey ? map_find(c, mkey, kl) : NULL;
        if (f->m) {
            if (e && fid_eq(&e->id, &f->mid)) {
                srcmap_free(f->m); /* another session was first */
                f->m = NULL;
            } else if (mkey) {
                if (e) {
                    /* the old version of the file: out of the table, freed
                     * when its last user lets go */
                    script_drop_map(c, e);
                    map_unlink(c, e);
                    c->nmaps--;
                    c->bytes -= e->bytes;
                    isoprof_free(e->key);
                    e->key = NULL;
                    if (e->refs == 0)
                        map_destroy(e);
                }
                size_t bytes = srcmap_bytes(f->m);
                e = NULL;
                if (bytes > c->budget) {
                    f->state = S_REFUSED;
                    f->reason = SRCMAP_E_TOOBIG;
                    first_refusal = true;
                    c->st.refused[SRCMAP_E_TOOBIG]++;
                    snprintf(f->why, sizeof(f->why), "%zu bytes parsed, past source_maps_cache",
                             bytes);
                    srcmap_free(f->m);
                    f->m = NULL;
                } else if ((e = isoprof_calloc(1, sizeof(*e))) != NULL) {
                    evict(c, bytes);
                    e->key = mkey;
                    e->keylen = kl;
                    mkey = NULL;
                    e->id = f->mid;
                    e->m = f->m;
                    f->m = NULL;
                    e->bytes = bytes;
                    map_front(c, e);
                    c->nmaps++;
                    c->bytes += bytes;
                    c->st.loads++;
                } else {
                    srcmap_free(f->m);
                    f->m = NULL;
                }
            }
        } else if (e && fid_eq(&e->id, &f->mid)) {
            c->st.hits++;
            map_unlink(c, e);
            map_front(c, e);
        } else {
            e = NULL; /* evicted meanwhile: the next window loads it */
        }
        isoprof_free(mkey);
        if (e) {
            e->refs++; /* the session's */
            ret = e;
        }
    }
    if (sc) {
        script_clear(c, sc);
        sc->sid = *sid;
        sc->state = f->state;
        sc->reason = f->reason;
        sc->mid = f->mid;
        sc->has_mid = f->has_mid;
        sc->no_comment = f->no_comment;
        sc->when_ns = mono_ns();
        if (ret) {
            ret->refs++;
            sc->map = ret;
        }
        size_t kl;
        sc->map_key = f->state != S_NONE
                          ? key2(s->root, f->map_path, f->inline_map ? "#inline" : NULL, &kl)
                          : NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (first_refusal)
        add_event(s, f->reason, f->map_path, script, f->why);
    return ret;
}

/*
 * The cached answer for a script, if it still holds: the script file and
 * its map file unchanged. Returns true with *map (a reference, or NULL for
 * "none" and refusals) when it holds.
 */
static bool cached(struct srcmap_session *s, const char *key, size_t keylen, uint32_t h,
                   const struct fid *sid, struct cmap **map)
{
    struct srcmap_cache *c = s->c;
    *map = NULL;
    pthread_mutex_lock(&c->mu);
    struct cscript *sc = script_find(c, key, keylen, h);
    if (sc == NULL || !fid_eq(&sc->sid, sid)) {
        pthread_mutex_unlock(&c->mu);
        return false;
    }
    enum script_state state = sc->state;
    /* An allocation failed: the agent's trouble, not the map's. Looked
     * for again by the next conversion (publish counts it only once). */
    if (state == S_REFUSED && sc->reason == SRCMAP_E_NOMEM) {
        pthread_mutex_unlock(&c->mu);
        return false;
    }
    /* Nothing found, or a map refused before it was opened (its path
     * leads out, a data: URL that does not decode): looked for again
     * after a while, never opened to check. */
    if (state == S_NONE || (state == S_REFUSED && !sc->has_mid)) {
        bool ok = mono_ns() - sc->when_ns < NONE_RECHECK_NS;
        pthread_mutex_unlock(&c->mu);
        return ok;
    }
    char *mkey = sc->map_key ? isoprof_strdup(sc->map_key) : NULL;
    /* map_key is root \0 path[#inline]: the path is after the NUL */
    char path[MAX_PATH];
    snprintf(path, sizeof(path), "%s", sc->map_key ? sc->map_key + strlen(sc->map_key) + 1 : "");
    struct fid mid = sc->mid;
    size_t pl = strlen(path);
    bool is_inline = pl > 7 && strcmp(path + pl - 7, "#inline") == 0;
    pthread_mutex_unlock(&c->mu);
    isoprof_free(mkey);
    /* an inline map changes with its script, which is unchanged */
    if (!is_inline) {
        bool enoent;
        int fd = open_in(s->rootfd, path, NULL, &enoent);
        if (fd < 0)
            return false;
        struct stat st;
        struct fid now;
        int rc = fstat(fd, &st);
        close(fd);
        if (rc != 0)
            return false;
        fid_of(&st, &now);
        if (!fid_eq(&now, &mid))
            return false;
    }
    pthread_mutex_lock(&c->mu);
    sc = script_find(c, key, keylen, h);
    bool ok = sc != NULL && fid_eq(&sc->sid, sid) && fid_eq(&sc->mid, &mid);
    if (ok && sc->state == S_MAP) {
        if (sc->map == NULL) {
            ok = false; /* evicted: load it again */
        } else {
            sc->map->refs++;
            *map = sc->map;
            c->st.hits++;
            map_unlink(c, sc->map);
            map_front(c, sc->map);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return ok;
}

/* The value of NAME= in an environ text (NUL-separated), or NULL. */
static const char *env_get(const char *env, size_t len, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = env, *end = env + len; p < end;) {
        const char *e = memchr(p, '\0', (size_t)(end - p));
        if (e == NULL)
            e = end;
        if ((size_t)(e - p) > nl && memcmp(p, name, nl) == 0 && p[nl] == '=')
            return p + nl + 1;
        p = e + 1;
    }
    return NULL;
}

/* The Deno process's DENO_DIR into out (MAX_PATH), as Deno finds it; false
 * when it has none (no cache, or nothing to find it by). Read once a
 * session. */
static bool deno_dir(struct srcmap_session *s, char *out)
{
    if (s->deno_state != 0)
        return s->deno_state > 0 && snprintf(out, MAX_PATH, "%s", s->deno_dir) < MAX_PATH;
    s->deno_state = -1;
    char path[64], cwd[MAX_PATH], comm[32];
    /* A pid from a title may be another pid namespace's (a container's):
     * the process must at least be a deno. */
    snprintf(path, sizeof(path), "/proc/%u/comm", (unsigned)s->w->deno_pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t cn = pread_full(fd, comm, sizeof(comm) - 1, 0);
    close(fd);
    if (cn < 5 || memcmp(comm, "deno\n", 5) != 0)
        return false;
    snprintf(path, sizeof(path), "/proc/%u/environ", (unsigned)s->w->deno_pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char *env = s->scratch;
    ssize_t n = pread_full(fd, env, READ_CHUNK - 1, 0);
    close(fd);
    if (n <= 0)
        return false;
    env[n] = '\0';
    const char *mode = env_get(env, (size_t)n, "DENO_EMIT_CACHE_MODE");
    if (mode && strcmp(mode, "disable") == 0)
        return false;
    const char *v;
    char joined[2 * MAX_PATH + 16];
    if ((v = env_get(env, (size_t)n, "DENO_DIR")) != NULL && v[0] != '\0') {
        if (v[0] == '/') {
            snprintf(joined, sizeof(joined), "%s", v);
        } else {
            snprintf(path, sizeof(path), "/proc/%u/cwd", (unsigned)s->w->deno_pid);
            ssize_t cl = readlink(path, cwd, sizeof(cwd) - 1);
            if (cl <= 0)
                return false;
            cwd[cl] = '\0';
            snprintf(joined, sizeof(joined), "%s/%s", cwd, v);
        }
    } else if ((v = env_get(env, (size_t)n, "XDG_CACHE_HOME")) != NULL && v[0] == '/') {
        snprintf(joined, sizeof(joined), "%s/deno", v);
    } else if ((v = env_get(env, (size_t)n, "HOME")) != NULL && v[0] == '/') {
        snprintf(joined, sizeof(joined), "%s/.cache/deno", v);
    } else {
        return false;
    }
    if (path_norm(joined, s->deno_dir) != 0)
        return false;
    s->deno_state = 1;
    return snprintf(out, MAX_PATH, "%s", s->deno_dir) < MAX_PATH;
}

/* Is path a TypeScript (or JSX) module, which Deno transpiles? */
static bool deno_transpiled(const char *path)
{
    static const char *const ext[] = {".ts", ".tsx", ".mts", ".cts", ".jsx"};
    size_t n = strlen(path);
    for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
        size_t e = strlen(ext[i]);
        if (n > e && strcmp(path + n - e, ext[i]) == 0)
            return true;
    }
    return false;
}

/* Resolves one script URL for the session. */
static void resolve(struct srcmap_session *s, struct memo *mm)
{
    char path[MAX_PATH], npath[MAX_PATH];
    const char *url = mm->url;
    bool is_file = false;
    if (strncmp(url, "file://", 7) == 0) {
        if (pct_decode(url + 7, mm->len - 7, path) == 0 && path[0] == '/')
            is_file = true;
    } else if (url[0] == '/') {
        if (mm->len < MAX_PATH) {
            memcpy(path, url, mm->len + 1);
            is_file = true;
        }
    }
    if (is_file && path_norm(path, npath) != 0)
        is_file = false;
    /* Deno: the JavaScript V8 runs is in the emit cache, with its map */
    char dd[MAX_PATH], emitted[2 * MAX_PATH + 16];
    if (is_file && s->w && s->w->deno_pid != 0 && deno_transpiled(npath) && deno_dir(s, dd)) {
        snprintf(emitted, sizeof(emitted), "%s/gen/file%s.js", dd, npath);
        bool enoent;
        int efd = s->rootfd >= 0 && strlen(emitted) < MAX_PATH
                      ? open_in(s->rootfd, emitted, NULL, &enoent)
                      : -1;
        if (efd >= 0) {
            close(efd);
            memcpy(npath, emitted, strlen(emitted) + 1);
        }
    }
    bool has_dirs = s->w && s->w->ndirs > 0;
    bool bare = !is_file && strchr(url, ':') == NULL && url[0] != '\0';
    if (!is_file && !(has_dirs && bare))
        return; /* node:internal/..., evalmachine, "": nothing to map */
    if (s->rootfd < 0)
        return;
    mm->file = true;
    size_t keylen;
    char *key = key2(s->root, is_file ? npath : url, NULL, &keylen);
    if (key == NULL)
        return;
    uint32_t h = fnv(key, keylen);
    struct fid sid = {0};
    int sfd = -1;
    struct stat sst;
    if (is_file) {
        bool enoent;
        sfd = open_in(s->rootfd, npath, NULL, &enoent);
        if (sfd < 0 || fstat(sfd, &sst) != 0) {
            /* the script is gone: no map for it (not a refusal) */
            if (sfd >= 0)
                close(sfd);
            isoprof_free(key);
            return;
        }
        fid_of(&sst, &sid);
    }
    struct cmap *map = NULL;
    if (!cached(s, key, keylen, h, &sid, &map)) {
        struct found *f = isoprof_calloc(1, sizeof(*f));
        if (f != NULL) {
            if (is_file) {
                /* what a look at this very script found before */
                pthread_mutex_lock(&s->c->mu);
                struct cscript *sc = script_find(s->c, key, keylen, h);
                f->no_comment = sc != NULL && sc->no_comment && fid_eq(&sc->sid, &sid);
                pthread_mutex_unlock(&s->c->mu);
                find_for_file(s, sfd, &sst, npath, f);
            } else if (!try_dirs(s, base_of(url), f))
                f->state = S_NONE;
            map = publish(s, key, keylen, h, &sid, f, is_file ? npath : url);
            srcmap_free(f->m);
            isoprof_free(f);
        }
    }
    if (sfd >= 0)
        close(sfd);
    isoprof_free(key);
    mm->map = map;
}

int srcmap_session_frame(struct srcmap_session *s, const char *url, size_t url_len, int32_t line,
                         int32_t column, struct srcmap_pos *out)
{
    /* a URL with a NUL names no file (and the memo keeps C strings) */
    if (url_len == 0 || line < 0 || memchr(url, '\0', url_len) != NULL)
        return SRCMAP_FRAME_NA;
    uint32_t h = fnv(url, url_len);
    struct memo *mm = NULL;
    for (size_t i = 0; i < s->nmemo; i++) {
        if (s->memo[i].hash == h && s->memo[i].len == url_len &&
            memcmp(s->memo[i].url, url, url_len) == 0) {
            mm = &s->memo[i];
            break;
        }
    }
    if (mm == NULL) {
        if (s->nmemo == s->memocap) {
            size_t nc = s->memocap ? s->memocap * 2 : 16;
            struct memo *m = isoprof_realloc(s->memo, nc * sizeof(*m));
            if (m == NULL)
                return SRCMAP_FRAME_NA;
            s->memo = m;
            s->memocap = nc;
        }
        mm = &s->memo[s->nmemo];
        memset(mm, 0, sizeof(*mm));
        if ((mm->url = isoprof_strndup(url, url_len)) == NULL)
            return SRCMAP_FRAME_NA;
        mm->len = url_len;
        mm->hash = h;
        s->nmemo++;
        resolve(s, mm);
    }
    if (!mm->file)
        return SRCMAP_FRAME_NA;
    if (mm->map &&
        srcmap_lookup(mm->map->m, (uint32_t)line, column < 0 ? 0 : (uint32_t)column, out)) {
        s->mapped++;
        return SRCMAP_FRAME_MAPPED;
    }
    s->unmapped++;
    return SRCMAP_FRAME_UNMAPPED;
}

size_t srcmap_session_events(const struct srcmap_session *s, const struct srcmap_event **ev)
{
    *ev = s->ev;
    return s->nev;
}

void srcmap_session_counts(const struct srcmap_session *s, uint64_t *mapped, uint64_t *unmapped)
{
    *mapped = s->mapped;
    *unmapped = s->unmapped;
}

void srcmap_session_free(struct srcmap_session *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->c->mu);
    for (size_t i = 0; i < s->nmemo; i++)
        if (s->memo[i].map)
            map_put(s->c, s->memo[i].map);
    s->c->st.mapped += s->mapped;
    s->c->st.unmapped += s->unmapped;
    evict(s->c, 0);
    pthread_mutex_unlock(&s->c->mu);
    for (size_t i = 0; i < s->nmemo; i++)
        isoprof_free(s->memo[i].url);
    isoprof_free(s->memo);
    for (size_t i = 0; i < s->nev; i++) {
        isoprof_free((void *)s->ev[i].path);
        isoprof_free((void *)s->ev[i].script);
        isoprof_free((void *)s->ev[i].why);
    }
    isoprof_free(s->ev);
    if (s->rootfd >= 0)
        close(s->rootfd);
    isoprof_free(s->scratch);
    isoprof_free(s);
}

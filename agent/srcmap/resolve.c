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
 * A script's answer is kept until its file changes: the first look reads
 * at most SRCMAP_TAIL_BYTES of it (find_comment), every later one is an
 * O_PATH lookup and an fstat. So one script path costs a few system calls
 * a window however large the file, and a path named again and again costs
 * nothing new.
 *
 * Every path is resolved with openat2 beneath a directory fd before
 * anything is opened: the target's root (RESOLVE_IN_ROOT, so an absolute
 * symlink inside a container stays inside it) and the tree the file must
 * lie in (RESOLVE_BENEATH, so a symlink out is EXDEV), as O_PATH, which
 * opens nothing. Only a regular file is then opened for reading, through
 * that O_PATH fd (the same inode) and O_NONBLOCK. Magic links
 * (/proc/self/..) are never followed.
 *
 * The allowances (one per target process, keyed by srcmap_where.owner)
 * live in the cache under its lock: a session charges its owner's bucket
 * the thread CPU time of each frame it had to work for, and serves no
 * frame while the bucket is empty. The bucket fills with wall time
 * (CLOCK_MONOTONIC), so an idle target's allowance is full again after
 * SRCMAP_ALLOWANCE_SPAN_NS.
 */
#include "resolve.h"

#include "base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
    int reason;       /* S_REFUSED */
};

/* One target's CPU allowance: a token bucket of thread CPU ns. */
struct owner {
    struct owner *prev, *next; /* LRU */
    char *key;
    int64_t tokens_ns; /* may go below zero: the last frame served overshot */
    uint64_t last_ns;  /* CLOCK_MONOTONIC of the last refill */
    unsigned refs;     /* sessions using it: never evicted while > 0 */
    bool dry;          /* ran out, not full again yet: said once until it refills */
};

struct srcmap_cache {
    pthread_mutex_t mu;
    size_t budget, max_file;
    struct cmap *mhead, *mtail;
    size_t nmaps, bytes;
    struct cscript *buckets[SCRIPT_BUCKETS];
    struct cscript *shead, *stail;
    size_t nscripts;
    struct owner *ohead, *otail;
    size_t nowners;
    uint32_t share_ppm;
    uint64_t burst_ns;
    struct srcmap_stats st;
};

/* --- small helpers --- */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* This thread's CPU time: what a lookup cost, whatever else the host runs. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
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
 * The O_PATH fd of path (absolute, normalized, inside the root rootfd).
 * With tree (absolute, normalized, path beneath it): resolved beneath
 * tree, so that no symlink leads out of it. O_PATH opens nothing: a FIFO,
 * a device or a socket is only looked up. Returns the fd, or -reason:
 * SRCMAP_E_OUTSIDE for an escape, SRCMAP_E_READ for anything else, with
 * *enoent set when the file does not exist.
 */
static int path_fd(int rootfd, const char *path, const char *tree, bool *enoent)
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
    return (int)fd;
}

/* fstat of the O_PATH fd pfd into *st: 0 for a regular file,
 * -SRCMAP_E_NOT_FILE for anything else (*st filled), -SRCMAP_E_READ when
 * it cannot be read. */
static int stat_file(int pfd, struct stat *st)
{
    if (fstat(pfd, st) != 0)
        return -SRCMAP_E_READ;
    return S_ISREG(st->st_mode) ? 0 : -SRCMAP_E_NOT_FILE;
}

/*
 * A readable fd of the regular file that the O_PATH fd pfd names (pfd
 * kept), or -1 with errno. Reopened through the fd itself, so it is the
 * inode that was checked, whatever the path names now; O_NONBLOCK so that
 * even a file that is not what stat_file saw could not block the read
 * open. (O_NOFOLLOW cannot apply here: /proc/self/fd/N is the magic link
 * to follow; the path's own symlinks were resolved by openat2 beneath its
 * tree.)
 */
static int open_read(int pfd)
{
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", pfd);
    return open(link, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
}

/* What a file that is not regular is, for a refusal's why. */
static const char *file_kind(const struct stat *st)
{
    return S_ISFIFO(st->st_mode)   ? "a FIFO"
           : S_ISCHR(st->st_mode)  ? "a character device"
           : S_ISBLK(st->st_mode)  ? "a block device"
           : S_ISSOCK(st->st_mode) ? "a socket"
           : S_ISDIR(st->st_mode)  ? "a directory"
                                   : "not a regular file";
}

/* --- the session --- */

struct memo {
    char *url;
    size_t len;
    uint32_t hash;
    struct cmap *map; /* a reference, or NULL: nothing to map with */
    bool file;        /* the script could have had a map (counts as unmapped) */
    bool resolved;    /* resolve() ran (not while the allowance was spent) */
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
    uint64_t mapped, unmapped, over;
    int deno_state; /* 0: DENO_DIR not looked for yet; 1 found; -1 none */
    char deno_dir[MAX_PATH];
    char *scratch; /* 2 * READ_CHUNK bytes: what is read, what it decodes to */
    /* Where scripts may be read (normalized, inside root): the trees of
     * srcmap_where, the process's working directory, the main script's
     * directory, the source_maps dirs (the last ndirs). Found at the first
     * file frame. */
    int trees_state; /* 0: not yet; 1: found; -1: an allocation failed (no refusal then) */
    char **trees;
    size_t ntrees, ndirs;
    struct owner *owner; /* a reference; NULL: nothing charged */
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

/* --- the allowances --- */

static void owner_unlink(struct srcmap_cache *c, struct owner *o)
{
    if (o->prev)
        o->prev->next = o->next;
    else
        c->ohead = o->next;
    if (o->next)
        o->next->prev = o->prev;
    else
        c->otail = o->prev;
    o->prev = o->next = NULL;
}

static void owner_front(struct srcmap_cache *c, struct owner *o)
{
    o->next = c->ohead;
    o->prev = NULL;
    if (c->ohead)
        c->ohead->prev = o;
    else
        c->otail = o;
    c->ohead = o;
}

/* Under the lock: fills o's bucket for the wall time since its last fill. */
static void owner_fill(struct srcmap_cache *c, struct owner *o, uint64_t now)
{
    if (now > o->last_ns) {
        uint64_t dt = now - o->last_ns;
        /* dt * ppm / 1e6 without overflow for any dt below ~584 years */
        uint64_t add = dt / 1000000u * c->share_ppm + dt % 1000000u * c->share_ppm / 1000000u;
        int64_t cap = (int64_t)c->burst_ns;
        o->tokens_ns = add >= (uint64_t)(cap - o->tokens_ns) ? cap : o->tokens_ns + (int64_t)add;
        o->last_ns = now;
    }
    if (o->tokens_ns >= (int64_t)c->burst_ns)
        o->dry = false; /* full again: a new run dry is said again */
}

/* The allowance of key, made full when new; a reference for a session.
 * Returns 0 or -ENOMEM. */
static int owner_get(struct srcmap_cache *c, const char *key, struct owner **out)
{
    pthread_mutex_lock(&c->mu);
    struct owner *o = c->ohead;
    while (o && strcmp(o->key, key) != 0)
        o = o->next;
    if (o != NULL) {
        owner_unlink(c, o);
    } else {
        /* Forget the least recently used idle ones: a target that comes
         * back after that starts full, as a new one does. */
        for (struct owner *v = c->otail, *p; v && c->nowners >= SRCMAP_MAX_OWNERS; v = p) {
            p = v->prev;
            if (v->refs == 0) {
                owner_unlink(c, v);
                c->nowners--;
                isoprof_free(v->key);
                isoprof_free(v);
            }
        }
        o = isoprof_calloc(1, sizeof(*o));
        if (o == NULL || (o->key = isoprof_strdup(key)) == NULL) {
            isoprof_free(o);
            pthread_mutex_unlock(&c->mu);
            return -ENOMEM;
        }
        o->tokens_ns = (int64_t)c->burst_ns;
        o->last_ns = mono_ns();
        c->nowners++;
    }
    owner_front(c, o);
    o->refs++;
    *out = o;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/*
 * May the session work for a frame now? True while its owner's bucket
 * holds anything; the first time it finds it empty (since it was last
 * full), counts it and adds the event that says so.
 */
static void add_event(struct srcmap_session *s, int reason, const char *path, const char *script,
                      const char *why);
static bool allowance_left(struct srcmap_session *s, const char *url)
{
    struct srcmap_cache *c = s->c;
    pthread_mutex_lock(&c->mu);
    struct owner *o = s->owner;
    owner_fill(c, o, mono_ns());
    bool ok = o->tokens_ns > 0, say = !ok && !o->dry;
    if (say) {
        o->dry = true;
        c->st.refused[SRCMAP_E_ALLOWANCE]++;
    }
    uint32_t ppm = c->share_ppm;
    uint64_t burst = c->burst_ns;
    pthread_mutex_unlock(&c->mu);
    if (say) {
        char why[200];
        snprintf(why, sizeof(why),
                 "the target's source-map lookups used their CPU allowance (%u.%02u%% of a core, "
                 "%" PRIu64 " ms at most): its frames stay unmapped until it refills",
                 ppm / 10000u, ppm / 100u % 100u, burst / 1000000u);
        add_event(s, SRCMAP_E_ALLOWANCE, o->key, url, why);
    }
    return ok;
}

/* Charges the session's owner cpu_ns of thread CPU time. */
static void allowance_charge(struct srcmap_session *s, uint64_t cpu_ns)
{
    struct srcmap_cache *c = s->c;
    pthread_mutex_lock(&c->mu);
    /* The debt of a frame that cost more than the bucket held (a large
     * map parsed) is paid back in full before the next frame is served:
     * what the target cost is what it waits for. */
    uint64_t debt = cpu_ns > (uint64_t)INT64_MAX / 4 ? (uint64_t)INT64_MAX / 4 : cpu_ns;
    int64_t t = s->owner->tokens_ns - (int64_t)debt;
    s->owner->tokens_ns = t < INT64_MIN / 2 ? INT64_MIN / 2 : t;
    c->st.cpu_ns += cpu_ns;
    pthread_mutex_unlock(&c->mu);
}

void srcmap_cache_allowance(struct srcmap_cache *c, uint32_t share_ppm, uint64_t burst_ns)
{
    pthread_mutex_lock(&c->mu);
    uint64_t now = mono_ns();
    for (struct owner *o = c->ohead; o; o = o->next)
        owner_fill(c, o, now); /* what the old share earned so far */
    c->share_ppm = share_ppm ? share_ppm : SRCMAP_DEFAULT_CPU_PPM;
    if (c->share_ppm > 1000000u)
        c->share_ppm = 1000000u;
    c->burst_ns = burst_ns ? burst_ns : SRCMAP_ALLOWANCE_SPAN_NS / 1000000u * c->share_ppm;
    for (struct owner *o = c->ohead; o; o = o->next)
        if (o->tokens_ns > (int64_t)c->burst_ns)
            o->tokens_ns = (int64_t)c->burst_ns;
    pthread_mutex_unlock(&c->mu);
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
    if (w && w->owner && w->owner[0] && owner_get(c, w->owner, &s->owner) != 0) {
        srcmap_session_free(s);
        return -ENOMEM;
    }
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
    c->share_ppm = SRCMAP_DEFAULT_CPU_PPM;
    c->burst_ns = SRCMAP_ALLOWANCE_SPAN_NS / 1000000u * c->share_ppm;
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
     * limits (counted and said again if still too big); scripts that had
     * no map (or were refused unopened: the tree may be another now) are
     * looked at again too, so a reload finds a map added beside a script
     * that did not change. */
    for (struct cscript *s = c->shead; s; s = s->next)
        if ((raised && s->state == S_REFUSED &&
             (s->reason == SRCMAP_E_TOOBIG || s->reason == SRCMAP_E_FILE_TOOBIG)) ||
            s->state == S_NONE || (s->state == S_REFUSED && !s->has_mid))
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
    for (struct owner *o = c->ohead, *n; o; o = n) {
        n = o->next;
        ISOPROF_ASSERT(o->refs == 0);
        isoprof_free(o->key);
        isoprof_free(o);
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
        ssize_t r = isoprof_pread_full(fd, buf, want, off);
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

/* Adds a tree (normalized) to the session's. */
static void tree_add(struct srcmap_session *s, const char *p)
{
    for (size_t i = 0; i < s->ntrees; i++)
        if (strcmp(s->trees[i], p) == 0)
            return;
    char *d = isoprof_strdup(p);
    if (d != NULL)
        s->trees[s->ntrees++] = d;
    else
        s->trees_state = -1;
}

/* The session's trees (struct srcmap_session), found at its first file
 * frame. A working directory or a main script's directory of "/" is no
 * tree: it would make every file on the host the target's own. */
static void trees_init(struct srcmap_session *s)
{
    if (s->trees_state)
        return;
    s->trees_state = 1;
    const struct srcmap_where *w = s->w;
    size_t cap = (w ? w->ntrees + w->ndirs : 0) + 2;
    if ((s->trees = isoprof_calloc(cap, sizeof(char *))) == NULL) {
        s->trees_state = -1;
        return;
    }
    char p[MAX_PATH];
    for (size_t i = 0; w && i < w->ntrees; i++)
        if (w->trees[i] != NULL && path_norm(w->trees[i], p) == 0)
            tree_add(s, p);
    if (w && w->cwd_pid != 0 && s->rootfd >= 0) {
        /* the directory itself, and where it is inside the root (a
         * process in a container sees its own paths) */
        char link[40];
        snprintf(link, sizeof(link), "/proc/%u/cwd", (unsigned)w->cwd_pid);
        int fd = open(link, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
            if (fd_where(s, fd, p) == 0 && strcmp(p, "/") != 0)
                tree_add(s, p);
            close(fd);
        }
    }
    if (w && w->main_url && strncmp(w->main_url, "file://", 7) == 0) {
        char dec[MAX_PATH], n[MAX_PATH];
        if (pct_decode(w->main_url + 7, strlen(w->main_url + 7), dec) == 0 && dec[0] == '/' &&
            path_norm(dec, n) == 0) {
            dir_of(n, p);
            if (strcmp(p, "/") != 0)
                tree_add(s, p);
        }
    }
    size_t before = s->ntrees;
    for (size_t i = 0; w && i < w->ndirs; i++)
        if (path_norm(w->dirs[i], p) == 0)
            tree_add(s, p);
    s->ndirs = s->ntrees - before;
}

/* The deepest of the session's trees that path (normalized) lies beneath
 * by its name, or NULL. */
static const char *pick_tree(const struct srcmap_session *s, const char *path)
{
    const char *best = NULL;
    for (size_t i = 0; i < s->ntrees; i++)
        if (path_under(path, s->trees[i]) && (best == NULL || strlen(s->trees[i]) > strlen(best)))
            best = s->trees[i];
    return best;
}

/*
 * The O_PATH fd of path, which must lie beneath tree or one of the
 * session's trees from first on (s->trees[first..ntrees)). RESOLVE_BENEATH
 * refuses every absolute symlink (EXDEV), even one that stays in the tree,
 * and one that leads into another allowed tree: such a path is resolved
 * again within the root (RESOLVE_IN_ROOT, O_PATH: still nothing opened)
 * and accepted when the file the kernel reached lies in tree or one of
 * those. Returns the fd or -reason (path_fd's).
 */
static int path_fd_allowed(struct srcmap_session *s, const char *path, const char *tree,
                           size_t first, bool *enoent)
{
    int fd = path_fd(s->rootfd, path, tree, enoent);
    if (fd != -SRCMAP_E_OUTSIDE)
        return fd;
    bool e2;
    int pfd = path_fd(s->rootfd, path, NULL, &e2);
    if (pfd < 0)
        return -SRCMAP_E_OUTSIDE;
    char where[MAX_PATH];
    bool ok = fd_where(s, pfd, where) == 0 && tree != NULL && in_dir(s, where, tree);
    for (size_t i = first; !ok && i < s->ntrees; i++)
        ok = in_dir(s, where, s->trees[i]);
    if (ok)
        return pfd;
    close(pfd);
    return -SRCMAP_E_OUTSIDE;
}

/* Tries the map file at path, beneath tree. Returns true when the search
 * is over (a map, or a refusal); false when there is no such file. */
static bool try_path(struct srcmap_session *s, const char *path, const char *tree, struct found *f)
{
    bool enoent;
    int pfd = path_fd_allowed(s, path, tree, s->ntrees - s->ndirs, &enoent);
    if (pfd == -SRCMAP_E_OUTSIDE) {
        f->state = S_REFUSED;
        f->reason = SRCMAP_E_OUTSIDE;
        snprintf(f->map_path, sizeof(f->map_path), "%s", path);
        snprintf(f->why, sizeof(f->why), "a symlink leads outside %s", tree ? tree : "the root");
        return true;
    }
    if (pfd < 0) {
        if (enoent)
            return false;
        f->state = S_REFUSED;
        f->reason = SRCMAP_E_READ;
        snprintf(f->map_path, sizeof(f->map_path), "%s", path);
        snprintf(f->why, sizeof(f->why), "open: %s", strerror(errno));
        return true;
    }
    struct stat st;
    int rc = stat_file(pfd, &st);
    int fd = rc == 0 ? open_read(pfd) : -1;
    int e = errno;
    close(pfd);
    if (rc == -SRCMAP_E_NOT_FILE) {
        f->state = S_REFUSED;
        f->reason = SRCMAP_E_NOT_FILE;
        fid_of(&st, &f->mid);
        f->has_mid = true;
        snprintf(f->map_path, sizeof(f->map_path), "%s", path);
        snprintf(f->why, sizeof(f->why), "%s, not a regular file: not opened", file_kind(&st));
        return true;
    }
    if (fd < 0) {
        f->state = S_REFUSED;
        f->reason = SRCMAP_E_READ;
        snprintf(f->map_path, sizeof(f->map_path), "%s", path);
        snprintf(f->why, sizeof(f->why), "open: %s", strerror(rc != 0 ? EIO : e));
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
    ssize_t r = isoprof_pread_full(fd, s->scratch, 4095, 0);
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
            if (pfd < 0)
                continue;
            struct stat pst;
            long fd = stat_file((int)pfd, &pst) == 0 ? open_read((int)pfd) : -1;
            close((int)pfd);
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

static bool is_blank(char c)
{
    return c == '\n' || c == '\r' || c == ' ' || c == '\t';
}

/* The value of a base64 digit (either alphabet), or -1. */
static int b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+' || ch == '-')
        return 62;
    if (ch == '/' || ch == '_')
        return 63;
    return -1;
}

/* Do the base64 characters t[0..n) (n >= 4, their data's end) decode to
 * the end of a JSON object: '}', maybe followed by blanks? Decoded from
 * the last whole groups of four, as the data is padded. */
static bool b64_ends_object(const char *t, size_t n)
{
    size_t g = n / 4 < 4 ? n / 4 : 4; /* the last groups, at most 12 bytes */
    const char *p = t + n - g * 4;
    unsigned char out[12];
    size_t o = 0;
    for (size_t k = 0; k < g; k++, p += 4) {
        int v[4], pad = 0;
        for (int j = 0; j < 4; j++) {
            if (p[j] == '=' && k == g - 1 && j >= 2) {
                v[j] = 0;
                pad++;
            } else if ((v[j] = b64_value((unsigned char)p[j])) < 0 || pad) {
                return false;
            }
        }
        uint32_t acc =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (unsigned char)(acc >> 16);
        if (pad < 2)
            out[o++] = (unsigned char)(acc >> 8);
        if (pad < 1)
            out[o++] = (unsigned char)acc;
    }
    while (o > 0 && is_blank((char)out[o - 1]))
        o--;
    return o > 0 && out[o - 1] == '}';
}

/*
 * The start of a base64 data: URL comment whose line ends at line_end and
 * began before the tail window: win[0..end) (the window's bytes up to
 * line_end) holds only base64 data. Looks back over base64 characters
 * alone, at most max_scan bytes from line_end (as much as the map it is
 * about to read whole), then checks the comment's head. Sets *url_off to
 * "data:" and *url_len.
 */
static bool long_data_url(struct srcmap_session *s, int fd, off_t line_end, const char *win,
                          size_t end, size_t max_scan, off_t *url_off, int64_t *url_len)
{
    static const char a[] = "//# sourceMappingURL=", b[] = "//@ sourceMappingURL=";
    const size_t pl = sizeof(a) - 1;
    size_t pad = 0;
    while (pad < 2 && pad < end && win[end - 1 - pad] == '=')
        pad++;
    for (size_t i = 0; i < end - pad; i++)
        if (b64_value((unsigned char)win[i]) < 0)
            return false; /* code, not a data URL's tail */
    if (end < 4 || !b64_ends_object(win, end))
        return false;
    /* back over the data to the byte before it (the data URL's comma) */
    char *buf = s->scratch + READ_CHUNK; /* win is at most SRCMAP_TAIL_BYTES at scratch */
    off_t pos = line_end - (off_t)end, comma = -1;
    while (comma < 0) {
        if (pos == 0 || (uint64_t)(line_end - pos) > max_scan)
            return false;
        size_t k = pos > READ_CHUNK ? READ_CHUNK : (size_t)pos;
        if (isoprof_pread_full(fd, buf, k, pos - (off_t)k) != (ssize_t)k)
            return false;
        size_t i = k;
        while (i > 0 && b64_value((unsigned char)buf[i - 1]) >= 0)
            i--;
        if (i > 0)
            comma = pos - (off_t)k + (off_t)i - 1;
        pos -= (off_t)(k - i);
    }
    /* "<indent>//# sourceMappingURL=data:<media type>[;param]*;base64," */
    char head[256];
    off_t hs = comma + 1 > (off_t)sizeof(head) ? comma + 1 - (off_t)sizeof(head) : 0;
    size_t hn = (size_t)(comma + 1 - hs);
    if (isoprof_pread_full(fd, head, hn, hs) != (ssize_t)hn || hn < 8 ||
        memcmp(head + hn - 8, ";base64,", 8) != 0)
        return false;
    size_t at = hn; /* the last "//# sourceMappingURL=data:" before ";base64," */
    for (size_t i = hn >= 8 + pl + 5 ? hn - 8 - pl - 5 + 1 : 0; i-- > 0;) {
        if ((memcmp(head + i, a, pl) == 0 || memcmp(head + i, b, pl) == 0) &&
            memcmp(head + i + pl, "data:", 5) == 0) {
            at = i;
            break;
        }
    }
    if (at >= hn || memchr(head + at, '\n', hn - at) != NULL)
        return false;
    size_t ls = at; /* the comment starts its line, after indentation */
    while (ls > 0 && (head[ls - 1] == ' ' || head[ls - 1] == '\t'))
        ls--;
    if (!(ls > 0 ? head[ls - 1] == '\n' : hs == 0))
        return false;
    *url_off = hs + (off_t)(at + pl);
    *url_len = (int64_t)(line_end - *url_off);
    return true;
}

/*
 * The script's "//# sourceMappingURL=" (or "//@") comment, from the last
 * SRCMAP_TAIL_BYTES of the file after its trailing blanks. What a comment
 * must satisfy to be found:
 *   - it starts its line (after spaces or tabs);
 *   - its line is the last non-blank one, or the one before when the last
 *     is another "//" comment (Deno's emit cache ends with
 *     "// denoCacheMetadata=..." after the map);
 *   - it starts within the window (any path URL does), or it is a base64
 *     data: URL that runs to the end of its line and whose data ends with
 *     the end of a JSON object, at most max_scan bytes long: then its start
 *     is looked for backwards over base64 characters only (a run that the
 *     map's own read covers anyway).
 * Anything else, such as a last line of code longer than the window, is
 * decided on the window alone: the cost of a script is O(window), never
 * O(file). Sets *url_off and *url_len to the URL's place in the file.
 */
static bool find_comment(struct srcmap_session *s, int fd, off_t size, size_t max_scan,
                         off_t *url_off, int64_t *url_len)
{
    static const char a[] = "//# sourceMappingURL=", b[] = "//@ sourceMappingURL=";
    const size_t pl = sizeof(a) - 1;
    char *win = s->scratch;
    size_t n = size > SRCMAP_TAIL_BYTES ? SRCMAP_TAIL_BYTES : (size_t)size;
    off_t base = size - (off_t)n;
    if (n == 0 || isoprof_pread_full(fd, win, n, base) != (ssize_t)n)
        return false;
    size_t end = n;
    for (int line = 0; line < 2; line++) {
        while (end > 0 && is_blank(win[end - 1]))
            end--;
        if (end == 0)
            return false; /* blank back to the window's start */
        size_t start = end;
        while (start > 0 && win[start - 1] != '\n')
            start--;
        if (start == 0 && base > 0) /* the line began before the window */
            return long_data_url(s, fd, base + (off_t)end, win, end, max_scan, url_off, url_len);
        while (start < end && (win[start] == ' ' || win[start] == '\t'))
            start++;
        if (end - start >= pl &&
            (memcmp(win + start, a, pl) == 0 || memcmp(win + start, b, pl) == 0)) {
            *url_off = base + (off_t)(start + pl);
            *url_len = (int64_t)(end - start - pl);
            return true;
        }
        if (end - start < 2 || memcmp(win + start, "//", 2) != 0)
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
    if (find_comment(s, sfd, sst->st_size, max_file, &uoff, &ulen)) {
        char head[256]; /* "data:" and its media type, up to the comma */
        size_t hn = ulen < (int64_t)sizeof(head) - 1 ? (size_t)ulen : sizeof(head) - 1;
        if (isoprof_pread_full(sfd, head, hn, uoff) != (ssize_t)hn)
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
        if (ulen >= MAX_PATH || isoprof_pread_full(sfd, s->scratch, (size_t)ulen, uoff) != ulen ||
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
    /* Nothing found, or a refusal decided without a map file (the
     * script lies outside the tree, its comment's path leads out, a data:
     * URL that does not decode): the answer holds until the script
     * changes (or a reload). */
    if (state == S_NONE || (state == S_REFUSED && !sc->has_mid)) {
        pthread_mutex_unlock(&c->mu);
        return true;
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
        int fd = path_fd(s->rootfd, path, NULL, &enoent);
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
    ssize_t cn = isoprof_pread_full(fd, comm, sizeof(comm) - 1, 0);
    close(fd);
    if (cn < 5 || memcmp(comm, "deno\n", 5) != 0)
        return false;
    snprintf(path, sizeof(path), "/proc/%u/environ", (unsigned)s->w->deno_pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char *env = s->scratch;
    ssize_t n = isoprof_pread_full(fd, env, READ_CHUNK - 1, 0);
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

/* A script refused before it was read: published like a map's refusal,
 * so that it is counted and said once, until the script changes. */
static void refuse_script(struct srcmap_session *s, const char *key, size_t keylen, uint32_t h,
                          const struct fid *sid, const char *script, int reason, const char *why)
{
    struct found *f = isoprof_calloc(1, sizeof(*f));
    if (f == NULL)
        return;
    f->state = S_REFUSED;
    f->reason = reason;
    snprintf(f->map_path, sizeof(f->map_path), "%s", script);
    snprintf(f->why, sizeof(f->why), "%s", why);
    struct cmap *m = publish(s, key, keylen, h, sid, f, script);
    ISOPROF_ASSERT(m == NULL);
    isoprof_free(f);
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
    bool has_dirs = s->w && s->w->ndirs > 0;
    bool bare = !is_file && strchr(url, ':') == NULL && url[0] != '\0';
    if (!is_file && !(has_dirs && bare))
        return; /* node:internal/..., evalmachine, "": nothing to map */
    if (s->rootfd < 0)
        return;
    mm->file = true;
    trees_init(s);
    size_t keylen;
    char *key = key2(s->root, is_file ? npath : url, NULL, &keylen);
    if (key == NULL)
        return;
    uint32_t h = fnv(key, keylen);
    struct fid sid = {0};
    struct cmap *map = NULL;
    /* The script's own tree, by its name: nothing outside it is looked at. */
    const char *tree = is_file ? pick_tree(s, npath) : NULL;
    if (is_file && tree == NULL) {
        /* the trees are not all known (no memory): the agent's trouble,
         * not the script's, so nothing is remembered */
        if (s->trees_state < 0) {
            isoprof_free(key);
            return;
        }
        if (!cached(s, key, keylen, h, &sid, &map))
            refuse_script(s, key, keylen, h, &sid, npath, SRCMAP_E_SCRIPT_OUTSIDE,
                          "not beneath the target's root, working directory, main script's "
                          "directory or source_maps dirs: not read");
        isoprof_free(key);
        return;
    }
    /* Deno: the JavaScript V8 runs is in the emit cache, with its map. The
     * module is in the tree; the cache is where the agent itself looks. */
    char dd[MAX_PATH], emitted[2 * MAX_PATH + 16];
    size_t first = 0; /* the trees a symlink may lead into */
    if (is_file && s->w && s->w->deno_pid != 0 && deno_transpiled(npath) && deno_dir(s, dd)) {
        snprintf(emitted, sizeof(emitted), "%s/gen/file%s.js", dd, npath);
        bool enoent;
        int efd = strlen(emitted) < MAX_PATH ? path_fd(s->rootfd, emitted, dd, &enoent) : -1;
        if (efd >= 0) {
            close(efd);
            memcpy(npath, emitted, strlen(emitted) + 1);
            tree = s->deno_dir;
            first = s->ntrees;
        }
    }
    int sfd = -1;
    struct stat sst;
    if (is_file) {
        bool enoent;
        int pfd = path_fd_allowed(s, npath, tree, first, &enoent);
        if (pfd == -SRCMAP_E_OUTSIDE) {
            if (!cached(s, key, keylen, h, &sid, &map))
                refuse_script(s, key, keylen, h, &sid, npath, SRCMAP_E_SCRIPT_OUTSIDE,
                              "a symlink leads outside the target's tree: not read");
            isoprof_free(key);
            return;
        }
        if (pfd < 0) {
            /* the script is gone: no map for it (not a refusal) */
            isoprof_free(key);
            return;
        }
        int rc = stat_file(pfd, &sst);
        if (rc == -SRCMAP_E_NOT_FILE) {
            fid_of(&sst, &sid);
            if (!cached(s, key, keylen, h, &sid, &map)) {
                char why[96];
                snprintf(why, sizeof(why), "%s, not a regular file: not opened", file_kind(&sst));
                refuse_script(s, key, keylen, h, &sid, npath, SRCMAP_E_NOT_FILE, why);
            }
            close(pfd);
            isoprof_free(key);
            return;
        }
        if (rc != 0) {
            close(pfd);
            isoprof_free(key);
            return;
        }
        fid_of(&sst, &sid);
        /* opened for reading only when its answer is not known yet */
        if (cached(s, key, keylen, h, &sid, &map)) {
            close(pfd);
            isoprof_free(key);
            mm->map = map;
            return;
        }
        sfd = open_read(pfd);
        close(pfd);
        if (sfd < 0) {
            isoprof_free(key);
            return;
        }
    } else if (cached(s, key, keylen, h, &sid, &map)) {
        isoprof_free(key);
        mm->map = map;
        return;
    }
    struct found *f = isoprof_calloc(1, sizeof(*f));
    if (f != NULL) {
        if (is_file)
            find_for_file(s, sfd, &sst, npath, f);
        else if (!try_dirs(s, base_of(url), f))
            f->state = S_NONE;
        map = publish(s, key, keylen, h, &sid, f, is_file ? npath : url);
        srcmap_free(f->m);
        isoprof_free(f);
    }
    if (sfd >= 0)
        close(sfd);
    isoprof_free(key);
    mm->map = map;
}

/* Could url name a script with a map (a file, or a module name the
 * source_maps dirs may have)? What resolve() would try, without a look. */
static bool maybe_file(const struct srcmap_session *s, const char *url)
{
    if (strncmp(url, "file://", 7) == 0 || url[0] == '/')
        return true;
    return s->w && s->w->ndirs > 0 && strchr(url, ':') == NULL;
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
    }
    if (mm->resolved && !mm->file)
        return SRCMAP_FRAME_NA;
    if (mm->resolved && mm->map == NULL) {
        s->unmapped++; /* known to have no map: no work */
        return SRCMAP_FRAME_UNMAPPED;
    }
    /* Work to do (a script to look at, or a map to look up in): charged
     * to the target's allowance, and not done while it is spent. */
    bool charged = s->owner != NULL && (mm->resolved || maybe_file(s, mm->url));
    if (charged && !allowance_left(s, mm->url)) {
        s->unmapped++;
        s->over++;
        return SRCMAP_FRAME_UNMAPPED;
    }
    uint64_t t0 = charged ? thread_cpu_ns() : 0;
    if (!mm->resolved) {
        mm->resolved = true;
        resolve(s, mm);
    }
    int r = SRCMAP_FRAME_NA;
    if (mm->file) {
        r = mm->map && srcmap_lookup(mm->map->m, (uint32_t)line, column < 0 ? 0 : (uint32_t)column,
                                     out)
                ? SRCMAP_FRAME_MAPPED
                : SRCMAP_FRAME_UNMAPPED;
        if (r == SRCMAP_FRAME_MAPPED)
            s->mapped++;
        else
            s->unmapped++;
    }
    if (charged)
        allowance_charge(s, thread_cpu_ns() - t0);
    return r;
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
    s->c->st.over_allowance += s->over;
    if (s->owner)
        s->owner->refs--;
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
    for (size_t i = 0; i < s->ntrees; i++)
        isoprof_free(s->trees[i]);
    isoprof_free(s->trees);
    isoprof_free(s->scratch);
    isoprof_free(s);
}

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
#include "resolve_internal.h"

#include "base.h"

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

/* --- small helpers --- */

uint64_t rs_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* This thread's CPU time: what a lookup cost, whatever else the host runs. */
uint64_t rs_thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint32_t rs_fnv(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

void rs_fid_of(const struct stat *st, struct fid *f)
{
    f->dev = (uint64_t)st->st_dev;
    f->ino = (uint64_t)st->st_ino;
    f->size = (uint64_t)st->st_size;
    f->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

bool rs_fid_eq(const struct fid *a, const struct fid *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns;
}

/* key = a \0 b */
char *rs_key2(const char *a, const char *b, const char *suffix, size_t *len)
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
int rs_path_norm(const char *in, char *out)
{
    return srcmap_path_norm("", in, out, MAX_PATH) > 0 ? 0 : -1;
}

/* Is path (normalized) dir itself or beneath it (normalized)? */
bool rs_path_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    if (n == 1 && dir[0] == '/')
        return true;
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

void rs_dir_of(const char *path, char *out)
{
    snprintf(out, MAX_PATH, "%s", path);
    char *sl = strrchr(out, '/');
    if (sl == NULL || sl == out)
        snprintf(out, MAX_PATH, "/");
    else
        *sl = '\0';
}

const char *rs_base_of(const char *path)
{
    const char *sl = strrchr(path, '/');
    return sl ? sl + 1 : path;
}

/* Percent-decodes s[0..n) into out (MAX_PATH), stopping at '?' or '#'.
 * Returns 0, or -1 when it does not fit or decodes a NUL. */
int rs_pct_decode(const char *s, size_t n, char *out)
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

long rs_sys_openat2(int dirfd, const char *path, int flags, uint64_t resolve)
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
int rs_path_fd(int rootfd, const char *path, const char *tree, bool *enoent)
{
    *enoent = false;
    const uint64_t in_root = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    long fd;
    if (tree == NULL) {
        fd = rs_sys_openat2(rootfd, path[1] ? path + 1 : ".", O_PATH, in_root);
    } else {
        long dfd = rs_sys_openat2(rootfd, tree[1] ? tree + 1 : ".", O_PATH | O_DIRECTORY, in_root);
        if (dfd < 0) {
            *enoent = errno == ENOENT || errno == ENOTDIR;
            return -SRCMAP_E_READ;
        }
        const char *rel = path + strlen(tree);
        while (*rel == '/')
            rel++;
        fd = rs_sys_openat2((int)dfd, *rel ? rel : ".", O_PATH,
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
int rs_stat_file(int pfd, struct stat *st)
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
int rs_open_read(int pfd)
{
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", pfd);
    return open(link, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
}

/* What a file that is not regular is, for a refusal's why. */
const char *rs_file_kind(const struct stat *st)
{
    return S_ISFIFO(st->st_mode)   ? "a FIFO"
           : S_ISCHR(st->st_mode)  ? "a character device"
           : S_ISBLK(st->st_mode)  ? "a block device"
           : S_ISSOCK(st->st_mode) ? "a socket"
           : S_ISDIR(st->st_mode)  ? "a directory"
                                   : "not a regular file";
}

/* --- the session --- */

void rs_add_event(struct srcmap_session *s, int reason, const char *path, const char *script,
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
        o->last_ns = rs_mono_ns();
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
static bool allowance_left(struct srcmap_session *s, const char *url)
{
    struct srcmap_cache *c = s->c;
    pthread_mutex_lock(&c->mu);
    struct owner *o = s->owner;
    owner_fill(c, o, rs_mono_ns());
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
        rs_add_event(s, SRCMAP_E_ALLOWANCE, o->key, url, why);
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
    uint64_t now = rs_mono_ns();
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
    if (rs_path_norm(root, s->root) != 0)
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
    if (rs_path_norm(joined, s->deno_dir) != 0)
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
    struct cmap *m = rs_publish(s, key, keylen, h, sid, f, script);
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
        if (rs_pct_decode(url + 7, mm->len - 7, path) == 0 && path[0] == '/')
            is_file = true;
    } else if (url[0] == '/') {
        if (mm->len < MAX_PATH) {
            memcpy(path, url, mm->len + 1);
            is_file = true;
        }
    }
    if (is_file && rs_path_norm(path, npath) != 0)
        is_file = false;
    bool has_dirs = s->w && s->w->ndirs > 0;
    bool bare = !is_file && strchr(url, ':') == NULL && url[0] != '\0';
    if (!is_file && !(has_dirs && bare))
        return; /* node:internal/..., evalmachine, "": nothing to map */
    if (s->rootfd < 0)
        return;
    mm->file = true;
    rs_trees_init(s);
    size_t keylen;
    char *key = rs_key2(s->root, is_file ? npath : url, NULL, &keylen);
    if (key == NULL)
        return;
    uint32_t h = rs_fnv(key, keylen);
    struct fid sid = {0};
    struct cmap *map = NULL;
    /* The script's own tree, by its name: nothing outside it is looked at. */
    const char *tree = is_file ? rs_pick_tree(s, npath) : NULL;
    if (is_file && tree == NULL) {
        /* the trees are not all known (no memory): the agent's trouble,
         * not the script's, so nothing is remembered */
        if (s->trees_state < 0) {
            isoprof_free(key);
            return;
        }
        if (!rs_cached(s, key, keylen, h, &sid, &map))
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
        int efd = strlen(emitted) < MAX_PATH ? rs_path_fd(s->rootfd, emitted, dd, &enoent) : -1;
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
        int pfd = rs_path_fd_allowed(s, npath, tree, first, &enoent);
        if (pfd == -SRCMAP_E_OUTSIDE) {
            if (!rs_cached(s, key, keylen, h, &sid, &map))
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
        int rc = rs_stat_file(pfd, &sst);
        if (rc == -SRCMAP_E_NOT_FILE) {
            rs_fid_of(&sst, &sid);
            if (!rs_cached(s, key, keylen, h, &sid, &map)) {
                char why[96];
                snprintf(why, sizeof(why), "%s, not a regular file: not opened",
                         rs_file_kind(&sst));
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
        rs_fid_of(&sst, &sid);
        /* opened for reading only when its answer is not known yet */
        if (rs_cached(s, key, keylen, h, &sid, &map)) {
            close(pfd);
            isoprof_free(key);
            mm->map = map;
            return;
        }
        sfd = rs_open_read(pfd);
        close(pfd);
        if (sfd < 0) {
            isoprof_free(key);
            return;
        }
    } else if (rs_cached(s, key, keylen, h, &sid, &map)) {
        isoprof_free(key);
        mm->map = map;
        return;
    }
    struct found *f = isoprof_calloc(1, sizeof(*f));
    if (f != NULL) {
        if (is_file)
            rs_find_for_file(s, sfd, &sst, npath, f);
        else if (!rs_try_dirs(s, rs_base_of(url), f))
            f->state = S_NONE;
        map = rs_publish(s, key, keylen, h, &sid, f, is_file ? npath : url);
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
    uint32_t h = rs_fnv(url, url_len);
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
    uint64_t t0 = charged ? rs_thread_cpu_ns() : 0;
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
        allowance_charge(s, rs_thread_cpu_ns() - t0);
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
            rs_map_put(s->c, s->memo[i].map);
    s->c->st.mapped += s->mapped;
    s->c->st.unmapped += s->unmapped;
    s->c->st.over_allowance += s->over;
    if (s->owner)
        s->owner->refs--;
    rs_evict(s->c, 0);
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

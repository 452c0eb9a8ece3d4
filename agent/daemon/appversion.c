/*
 * appversion.c - a process's version from its environment or its
 * package.json (see appversion.h).
 *
 * The package.json search works on the path as the process names it: the
 * script of its command line, made absolute with its working directory
 * (the link /proc/PID/cwd, which the kernel prints as the process sees
 * it), cut lexically into directories ("." dropped, ".." taken back, never
 * above "/"). Each candidate is opened beneath /proc/PID/root with
 * RESOLVE_IN_ROOT, so the kernel resolves every link and ".." as if that
 * directory were "/": a container's /app is the container's, and a link
 * to /etc/shadow or ../../.. lands inside the process's root, where the
 * host's file is not. The first package.json found ends the search,
 * version or not: it is the package the script belongs to.
 *
 * Nothing read is trusted: the file is capped (a larger one is refused,
 * not cut), must be a regular file, and goes through the project's JSON
 * lexer with a nesting limit; the version must be a string of at most
 * APPVER_VERSION_MAX bytes.
 */
#include "appversion.h"
#include "procscan.h"

#include "jsonlex.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* --- the package.json text ------------------------------------------------ */

struct pkg {
    struct jsonlex lx;
    char *out;
    size_t cap, len;
    int want;     /* the last top-level key was "version" */
    int found;    /* a string version is in out */
    int bad_type; /* the last version was not a string */
    int too_long;
    char fail[96]; /* the lexer's complaint */
    uint64_t fail_at;
};

static int pkg_open(void *ctx, int kind)
{
    struct pkg *p = ctx;
    (void)kind;
    if (p->want && jsonlex_depth(&p->lx) == 2) {
        p->want = 0;
        p->found = 0;
        p->bad_type = 1;
    }
    return 1;
}

static int pkg_close(void *ctx, int kind)
{
    (void)ctx;
    (void)kind;
    return 1;
}

static int pkg_string(void *ctx, bool key)
{
    struct pkg *p = ctx;
    if (jsonlex_depth(&p->lx) != 1)
        return 1;
    if (key) {
        jsonlex_sink(&p->lx, JSONLEX_BUF, 0);
    } else if (p->want) {
        p->len = 0;
        jsonlex_sink(&p->lx, JSONLEX_PUT, p->cap - 1);
    }
    return 1;
}

static int pkg_put(void *ctx, const char *s, size_t n)
{
    struct pkg *p = ctx;
    if (n > p->cap - 1 - p->len)
        n = p->cap - 1 - p->len;
    memcpy(p->out + p->len, s, n);
    p->len += n;
    return 1;
}

static int pkg_key(void *ctx, const char *s, size_t n)
{
    struct pkg *p = ctx;
    if (jsonlex_depth(&p->lx) == 1)
        p->want = n == 7 && memcmp(s, "version", 7) == 0;
    return 1;
}

static int pkg_value(void *ctx, int kind, const char *s, size_t n)
{
    struct pkg *p = ctx;
    (void)s;
    (void)n;
    if (!p->want || jsonlex_depth(&p->lx) != 1)
        return 1;
    p->want = 0;
    p->found = kind == 's';
    p->bad_type = kind != 's';
    p->too_long = kind == 's' && jsonlex_cut(&p->lx);
    if (p->found)
        p->out[p->len] = '\0';
    return 1;
}

static void pkg_fail(void *ctx, enum jsonlex_err err, const char *what, uint64_t at)
{
    struct pkg *p = ctx;
    (void)err;
    snprintf(p->fail, sizeof(p->fail), "%s", what);
    p->fail_at = at;
}

static const struct jsonlex_hooks pkg_hooks = {
    .open = pkg_open,
    .close = pkg_close,
    .string = pkg_string,
    .put = pkg_put,
    .key = pkg_key,
    .value = pkg_value,
    .fail = pkg_fail,
};

int appver_package_json_parse(const char *text, size_t len, char *out, size_t cap, char *why,
                              size_t wcap)
{
    uint8_t stack[JSONLEX_STACK_BYTES(APPVER_MAX_DEPTH)];
    struct pkg p = {.out = out, .cap = cap};
    out[0] = '\0';
    why[0] = '\0';
    jsonlex_init(&p.lx, &pkg_hooks, &p, stack, APPVER_MAX_DEPTH,
                 JSONLEX_TOP_CONTAINER | JSONLEX_NO_NUL);
    jsonlex_feed(&p.lx, text, len);
    if (p.fail[0] == '\0' && jsonlex_finish(&p.lx) && !jsonlex_done(&p.lx))
        snprintf(p.fail, sizeof(p.fail), "the text ends early");
    if (p.fail[0] != '\0') {
        snprintf(why, wcap, "malformed JSON at byte %llu: %s", (unsigned long long)p.fail_at,
                 p.fail);
        out[0] = '\0';
        return 0;
    }
    if (p.bad_type) {
        snprintf(why, wcap, "its version is not a string");
    } else if (!p.found) {
        snprintf(why, wcap, "it has no version");
    } else if (p.too_long || p.len > APPVER_VERSION_MAX) {
        snprintf(why, wcap, "its version is longer than %d bytes", APPVER_VERSION_MAX);
    } else if (p.len == 0) {
        snprintf(why, wcap, "its version is empty");
    } else {
        return 1;
    }
    out[0] = '\0';
    return 0;
}

/* --- the search ------------------------------------------------------------- */

/* The directories of the script's path, cut lexically: comp[i] points
 * into path (each NUL-terminated in place), the last component (the
 * script's file name) dropped. The count, or -1 when the path is not
 * absolute. */
#define APPVER_MAX_COMPS 128
static int split_dirs(char *path, char **comp)
{
    if (path[0] != '/')
        return -1;
    int n = 0;
    char *p = path;
    while (*p) {
        while (*p == '/')
            *p++ = '\0';
        if (*p == '\0')
            break;
        char *c = p;
        while (*p && *p != '/')
            p++;
        if (*p)
            *p++ = '\0';
        if (strcmp(c, ".") == 0)
            continue;
        if (strcmp(c, "..") == 0) {
            if (n > 0)
                n--;
            continue;
        }
        if (n == APPVER_MAX_COMPS)
            return -1;
        comp[n++] = c;
    }
    if (n > 0)
        n--; /* the script itself */
    /* Nothing at or below a node_modules directory is the app's own. */
    for (int i = 0; i < n; i++)
        if (strcmp(comp[i], "node_modules") == 0) {
            n = i;
            break;
        }
    return n;
}

static int open_in_root(int rootfd, const char *rel)
{
#ifdef SYS_openat2
    struct open_how how = {
        .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    int fd;
    do
        fd = (int)syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
    while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : fd;
#else
    (void)rootfd;
    (void)rel;
    return -ENOSYS;
#endif
}

/* Read fd whole into buf (cap bytes): the length, -EFBIG when it holds
 * more than cap - 1, or a negative errno. */
static ssize_t read_capped(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n < cap) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break;
        n += (size_t)r;
    }
    return n >= cap ? -EFBIG : (ssize_t)n;
}

/* 1 found, 0 not (out->why set when worth saying). */
static int from_package_json(const char *root, uint32_t pid, const char *cmdline, size_t clen,
                             char *scratch, struct appver *out)
{
    size_t slen = 0;
    const char *script = procscan_script(cmdline, clen, &slen);
    if (script == NULL)
        return 0; /* no script: -e, the REPL, stdin */
    char path[4096], link[512];
    if (script[0] == '/') {
        if (slen >= sizeof(path))
            return 0;
        memcpy(path, script, slen);
        path[slen] = '\0';
    } else {
        snprintf(link, sizeof(link), "%s/%u/cwd", root, (unsigned)pid);
        char cwd[2048];
        ssize_t n = readlink(link, cwd, sizeof(cwd) - 1);
        if (n <= 0 || cwd[0] != '/')
            return 0; /* gone, or not ours to read */
        cwd[n] = '\0';
        if ((size_t)n + 1 + slen >= sizeof(path))
            return 0;
        snprintf(path, sizeof(path), "%s/%.*s", cwd, (int)slen, script);
    }
    char *comp[APPVER_MAX_COMPS];
    int nc = split_dirs(path, comp);
    if (nc < 0)
        return 0;
    snprintf(link, sizeof(link), "%s/%u/root", root, (unsigned)pid);
    int rootfd = open(link, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) {
        if (errno == EACCES || errno == EPERM)
            snprintf(out->why, sizeof(out->why), "cannot open the process's root: %s",
                     strerror(errno));
        return 0;
    }
    int found = 0;
    for (int level = 0; level < APPVER_LEVELS && nc >= 0; level++, nc--) {
        char rel[4096];
        size_t at = 0;
        for (int i = 0; i < nc && at < sizeof(rel); i++)
            at += (size_t)snprintf(rel + at, sizeof(rel) - at, "%s/", comp[i]);
        if (at >= sizeof(rel) - sizeof("package.json"))
            continue;
        snprintf(rel + at, sizeof(rel) - at, "package.json");
        snprintf(out->file, sizeof(out->file), "/%.254s", rel);
        int fd = open_in_root(rootfd, rel);
        if (fd == -ENOENT || fd == -ENOTDIR)
            continue;
        if (fd == -ENOSYS) {
            snprintf(out->why, sizeof(out->why),
                     "package.json not read: the kernel has no openat2 (Linux 5.6)");
            break;
        }
        if (fd < 0) {
            snprintf(out->why, sizeof(out->why), "%.255s: %.120s", out->file, strerror(-fd));
            break;
        }
        struct stat st;
        ssize_t len;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
            snprintf(out->why, sizeof(out->why), "%.255s: not a regular file", out->file);
        else if ((uint64_t)st.st_size > APPVER_MAX_FILE ||
                 (len = read_capped(fd, scratch, APPVER_MAX_FILE + 1)) == -EFBIG)
            snprintf(out->why, sizeof(out->why), "%.255s: larger than %u KiB", out->file,
                     APPVER_MAX_FILE >> 10);
        else if (len < 0)
            snprintf(out->why, sizeof(out->why), "%.255s: %.120s", out->file, strerror((int)-len));
        else {
            char why[200];
            found = appver_package_json_parse(scratch, (size_t)len, out->version,
                                              sizeof(out->version), why, sizeof(why));
            if (!found)
                snprintf(out->why, sizeof(out->why), "%.255s: %.120s", out->file, why);
        }
        close(fd);
        break;
    }
    close(rootfd);
    if (!found)
        out->file[0] = '\0';
    return found;
}

int appver_find(const char *root, uint32_t pid, int node, const char *cmdline, size_t clen,
                const char *env, size_t elen, const char *const *src, size_t nsrc, char *scratch,
                struct appver *out)
{
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < nsrc; i++) {
        const char *s = src[i];
        if (strncmp(s, "env:", 4) == 0) {
            size_t vl = 0;
            const char *v = env ? procscan_env(env, elen, s + 4, &vl) : NULL;
            if (v == NULL || vl == 0 || vl > APPVER_VERSION_MAX)
                continue;
            memcpy(out->version, v, vl);
            out->version[vl] = '\0';
            out->file[0] = '\0';
        } else if (strcmp(s, "package.json") == 0) {
            if (!node || !from_package_json(root, pid, cmdline, clen, scratch, out))
                continue;
        } else {
            continue;
        }
        snprintf(out->source, sizeof(out->source), "%s", s);
        return 1;
    }
    return 0;
}

/*
 * find.c - finding and loading the source map of a script: the trees a
 * script may be read from, the map next to it or in the source_maps
 * directories, its sourceMappingURL comment (a path or an inline data:
 * URL), and the map read and parsed within the memory and file caps. See
 * resolve.c for the design.
 */
#include "resolve_internal.h"

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
#include <unistd.h>

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
    rs_fid_of(&st, &f->mid);
    f->has_mid = true;
    snprintf(f->map_path, sizeof(f->map_path), "%s", path);
    f->state = S_MAP;
    pthread_mutex_lock(&s->c->mu);
    size_t max_file = s->c->max_file, budget = s->c->budget;
    size_t kl;
    char *key = rs_key2(s->root, path, NULL, &kl);
    struct cmap *have = key ? rs_map_find(s->c, key, kl) : NULL;
    bool fresh = have && rs_fid_eq(&have->id, &f->mid);
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
    rs_dir_of(path, dir);
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
    long dfd = rs_sys_openat2(s->rootfd, dir[1] ? dir + 1 : ".", O_PATH | O_DIRECTORY,
                              RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
    if (dfd < 0)
        return false;
    char real[MAX_PATH];
    bool ok = fd_where(s, (int)dfd, real) == 0 && rs_path_under(where, real);
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
void rs_trees_init(struct srcmap_session *s)
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
        if (w->trees[i] != NULL && rs_path_norm(w->trees[i], p) == 0)
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
        if (rs_pct_decode(w->main_url + 7, strlen(w->main_url + 7), dec) == 0 && dec[0] == '/' &&
            rs_path_norm(dec, n) == 0) {
            rs_dir_of(n, p);
            if (strcmp(p, "/") != 0)
                tree_add(s, p);
        }
    }
    size_t before = s->ntrees;
    for (size_t i = 0; w && i < w->ndirs; i++)
        if (rs_path_norm(w->dirs[i], p) == 0)
            tree_add(s, p);
    s->ndirs = s->ntrees - before;
}

/* The deepest of the session's trees that path (normalized) lies beneath
 * by its name, or NULL. */
const char *rs_pick_tree(const struct srcmap_session *s, const char *path)
{
    const char *best = NULL;
    for (size_t i = 0; i < s->ntrees; i++)
        if (rs_path_under(path, s->trees[i]) &&
            (best == NULL || strlen(s->trees[i]) > strlen(best)))
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
int rs_path_fd_allowed(struct srcmap_session *s, const char *path, const char *tree, size_t first,
                       bool *enoent)
{
    int fd = rs_path_fd(s->rootfd, path, tree, enoent);
    if (fd != -SRCMAP_E_OUTSIDE)
        return fd;
    bool e2;
    int pfd = rs_path_fd(s->rootfd, path, NULL, &e2);
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
    int pfd = rs_path_fd_allowed(s, path, tree, s->ntrees - s->ndirs, &enoent);
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
    int rc = rs_stat_file(pfd, &st);
    int fd = rc == 0 ? rs_open_read(pfd) : -1;
    int e = errno;
    close(pfd);
    if (rc == -SRCMAP_E_NOT_FILE) {
        f->state = S_REFUSED;
        f->reason = SRCMAP_E_NOT_FILE;
        rs_fid_of(&st, &f->mid);
        f->has_mid = true;
        snprintf(f->map_path, sizeof(f->map_path), "%s", path);
        snprintf(f->why, sizeof(f->why), "%s, not a regular file: not opened", rs_file_kind(&st));
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
bool rs_try_dirs(struct srcmap_session *s, const char *base, struct found *f)
{
    const struct srcmap_where *w = s->w;
    if (w == NULL || *base == '\0')
        return false;
    char dir[MAX_PATH], path[MAX_PATH + 300];
    for (size_t i = 0; i < w->ndirs; i++) {
        if (rs_path_norm(w->dirs[i], dir) != 0)
            continue;
        int pn = snprintf(path, sizeof(path), "%s/%s.map", strcmp(dir, "/") ? dir : "", base);
        if (pn < 0 || (size_t)pn >= MAX_PATH)
            continue; /* too long to be a path: no such file */
        if (try_path(s, path, dir, f))
            return true;
    }
    for (size_t i = 0; i < w->ndirs; i++) {
        if (rs_path_norm(w->dirs[i], dir) != 0)
            continue;
        long dfd = rs_sys_openat2(s->rootfd, dir[1] ? dir + 1 : ".", O_RDONLY | O_DIRECTORY,
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
            long pfd = rs_sys_openat2(dirfd(d), de->d_name, O_PATH,
                                      RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
            if (pfd < 0)
                continue;
            struct stat pst;
            long fd = rs_stat_file((int)pfd, &pst) == 0 ? rs_open_read((int)pfd) : -1;
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
void rs_find_for_file(struct srcmap_session *s, int sfd, const struct stat *sst, const char *path,
                      struct found *f)
{
    char dir[MAX_PATH], target[MAX_PATH];
    rs_dir_of(path, dir);
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
            rs_fid_of(sst, &f->mid);
            f->has_mid = true;
            snprintf(f->map_path, sizeof(f->map_path), "%s", path);
            f->state = S_MAP;
            pthread_mutex_lock(&s->c->mu);
            size_t kl;
            char *key = rs_key2(s->root, path, "#inline", &kl);
            struct cmap *have = key ? rs_map_find(s->c, key, kl) : NULL;
            bool fresh = have && rs_fid_eq(&have->id, &f->mid);
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
            rs_pct_decode(s->scratch, (size_t)ulen, url) != 0) {
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
            if (rs_path_norm(joined, target) != 0) {
                f->state = S_REFUSED;
                f->reason = SRCMAP_E_OUTSIDE;
                snprintf(f->map_path, sizeof(f->map_path), "%s", u);
                snprintf(f->why, sizeof(f->why), "a path too long");
                return;
            }
            const char *tree = NULL;
            char dn[MAX_PATH];
            if (rs_path_under(target, dir))
                tree = dir;
            for (size_t i = 0; tree == NULL && s->w && i < s->w->ndirs; i++) {
                if (rs_path_norm(s->w->dirs[i], dn) == 0 && rs_path_under(target, dn))
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
    if (rs_try_dirs(s, rs_base_of(path), f))
        return;
    f->state = S_NONE;
}

/* Publishes what a script resolved to and returns the map to use (a
 * reference for the session) or NULL. Logs a refusal seen first. */

/*
 * procscan.c - one scan of /proc (see procscan.h).
 *
 * The listening sockets are read once a scan from net/tcp and net/tcp6
 * (the agent's network namespace) into a table sorted by inode; each
 * process whose executable matches then has its fd links looked up in it.
 * Reading a process is a handful of small files; every one may vanish or
 * be refused between the readdir and the read (the process exits, it
 * belongs to another user), which skips the process or the fact, never
 * the scan. Nothing read from /proc is trusted to be well formed: lengths
 * are capped, numbers range-checked, text never used as a path.
 */
#include "procscan.h"

#include "base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Read at most cap - 1 bytes of root/pid/name (pid 0: root/name) into
 * buf, NUL-terminated. The length, or a negative errno. */
static ssize_t read_small(const char *root, uint32_t pid, const char *name, char *buf, size_t cap)
{
    char path[512];
    if (pid)
        snprintf(path, sizeof(path), "%s/%u/%s", root, (unsigned)pid, name);
    else
        snprintf(path, sizeof(path), "%s/%s", root, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    return (ssize_t)n;
}

static ssize_t read_link(const char *root, uint32_t pid, const char *name, char *buf, size_t cap)
{
    char path[512];
    if (pid)
        snprintf(path, sizeof(path), "%s/%u/%s", root, (unsigned)pid, name);
    else
        snprintf(path, sizeof(path), "%s/%s", root, name);
    ssize_t n = readlink(path, buf, cap - 1);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return n;
}

/* --- net/tcp ------------------------------------------------------------ */

static int hexnum(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 16)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int h = isoprof_hexval((unsigned char)s[i]);
        if (h < 0)
            return -1;
        v = v << 4 | (uint64_t)h;
    }
    *out = v;
    return 0;
}

/* The address of "HEX:PORT" as the kernel prints it: each 32-bit word in
 * host order, so copying the words back gives the bytes on the wire. */
static int parse_addr(const char *s, size_t n, int v6, uint8_t *addr, uint16_t *port)
{
    size_t alen = v6 ? 32 : 8;
    if (n != alen + 5 || s[alen] != ':')
        return -1;
    for (size_t w = 0; w < alen / 8; w++) {
        uint64_t v;
        if (hexnum(s + w * 8, 8, &v) != 0)
            return -1;
        uint32_t word = (uint32_t)v;
        memcpy(addr + w * 4, &word, 4);
    }
    uint64_t p;
    if (hexnum(s + alen + 1, 4, &p) != 0)
        return -1;
    *port = (uint16_t)p;
    return 0;
}

static int is_loopback(const uint8_t *a, int v6)
{
    static const uint8_t one[16] = {[15] = 1};
    static const uint8_t mapped[12] = {[10] = 0xff, [11] = 0xff};
    if (!v6)
        return a[0] == 127;
    return memcmp(a, one, 16) == 0 || (memcmp(a, mapped, 12) == 0 && a[12] == 127);
}

/* The next space-separated field of [*p, end). */
static int field(const char **p, const char *end, const char **f, size_t *n)
{
    const char *s = *p;
    while (s < end && *s == ' ')
        s++;
    const char *e = s;
    while (e < end && *e != ' ')
        e++;
    if (e == s)
        return -1;
    *f = s;
    *n = (size_t)(e - s);
    *p = e;
    return 0;
}

static int parse_tcp_line(const char *s, const char *end, int v6, struct procscan_listener *out)
{
    const char *f[10];
    size_t fl[10];
    /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
    for (int i = 0; i < 10; i++)
        if (field(&s, end, &f[i], &fl[i]) != 0)
            return -1;
    if (fl[3] != 2 || f[3][0] != '0' || (f[3][1] != 'A' && f[3][1] != 'a'))
        return 1; /* not LISTEN */
    uint8_t addr[16];
    uint16_t port;
    if (parse_addr(f[1], fl[1], v6, addr, &port) != 0 || port == 0)
        return -1;
    uint64_t inode = 0;
    if (fl[9] > 20)
        return -1;
    for (size_t i = 0; i < fl[9]; i++) {
        if (f[9][i] < '0' || f[9][i] > '9')
            return -1;
        inode = inode * 10 + (uint64_t)(f[9][i] - '0');
    }
    if (inode == 0)
        return 1; /* a socket being torn down */
    out->inode = inode;
    out->port = port;
    out->loopback = (uint8_t)is_loopback(addr, v6);
    return 0;
}

size_t procscan_parse_tcp(const char *text, size_t len, int v6, struct procscan_listener *l,
                          size_t *n, size_t max, size_t *bad)
{
    size_t over = 0;
    const char *p = text, *end = text + len;
    int first = 1;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (first) {
            first = 0; /* the header */
        } else if (le > p) {
            struct procscan_listener x;
            int rc = parse_tcp_line(p, le, v6, &x);
            if (rc < 0)
                (*bad)++;
            else if (rc == 0 && *n < max)
                l[(*n)++] = x;
            else if (rc == 0)
                over++;
        }
        p = nl ? nl + 1 : end;
    }
    return over;
}

/* --- Node's options -------------------------------------------------------- */

static int digits(const char *s, size_t n, unsigned long max)
{
    unsigned long v = 0;
    if (n == 0 || n > 10)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    return v <= max;
}

/* "[host:]port" of --inspect-port with a host Node would bind on loopback
 * (none means 127.0.0.1). */
static int optin_ok(const char *v, size_t n)
{
    const char *colon = NULL;
    for (size_t i = n; i-- > 0;)
        if (v[i] == ':') {
            colon = v + i;
            break;
        }
    if (colon == NULL)
        return digits(v, n, 65535);
    const char *port = colon + 1;
    if (!digits(port, (size_t)(v + n - port), 65535))
        return 0;
    size_t hl = (size_t)(colon - v);
    if ((hl == 9 && memcmp(v, "localhost", 9) == 0) || (hl == 5 && memcmp(v, "[::1]", 5) == 0))
        return 1;
    /* 127.a.b.c */
    if (hl < 9 || hl > 15 || memcmp(v, "127.", 4) != 0)
        return 0;
    int dots = 0;
    size_t run = 0;
    for (size_t i = 4; i < hl; i++) {
        if (v[i] == '.') {
            if (run == 0 || ++dots > 2)
                return 0;
            run = 0;
        } else if (v[i] >= '0' && v[i] <= '9' && run < 3) {
            run++;
        } else {
            return 0;
        }
    }
    return dots == 2 && run > 0;
}

/* Options whose value may come as the next argument. */
static int takes_value(const char *t, size_t n)
{
    static const char *const opts[] = {"-r",
                                       "--require",
                                       "--import",
                                       "--loader",
                                       "--experimental-loader",
                                       "-e",
                                       "--eval",
                                       "-p",
                                       "--print",
                                       "--title",
                                       "--inspect-port",
                                       "--debug-port",
                                       "--input-type",
                                       "-C",
                                       "--conditions",
                                       "--env-file",
                                       "--redirect-warnings"};
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
        if (strlen(opts[i]) == n && memcmp(opts[i], t, n) == 0)
            return 1;
    return 0;
}

struct optstate {
    unsigned flags;
    int have_port; /* an --inspect-port seen (the last one wins) */
    char *optin;
    size_t cap;
    struct procscan_heap *heap; /* NULL: not asked for */
    uint8_t heap_src;           /* what the tokens scanned now come from */
    const char *script;         /* the command line's script (not NUL-terminated), or NULL */
    size_t script_len;
};

/* A V8 heap flag's value in MiB (a bare whole number, as V8 reads it), or
 * 0 when it is not one. */
static uint64_t heap_mb(const char *v, size_t n)
{
    uint64_t x = 0;
    if (n == 0 || n > 9)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return 0;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    return x;
}

/* name (with '-' for '_') a V8 heap flag: its value v[0..n) is kept. */
static int heap_flag(struct optstate *s, const char *name, const char *v, size_t n)
{
    uint64_t *slot = NULL;
    uint8_t *src = NULL;
    if (strcmp(name, "--max-old-space-size") == 0) {
        slot = &s->heap->old_mb;
        src = &s->heap->old_src;
    } else if (strcmp(name, "--max-semi-space-size") == 0) {
        slot = &s->heap->semi_mb;
        src = &s->heap->semi_src;
    } else if (strcmp(name, "--max-heap-size") == 0) {
        slot = &s->heap->heap_mb;
        src = &s->heap->heap_src;
    } else {
        return 0;
    }
    uint64_t mb = heap_mb(v, n);
    if (mb != 0) {
        *slot = mb;
        *src = s->heap_src;
    }
    return 1;
}

static void set_optin(struct optstate *s, const char *v, size_t n)
{
    s->have_port = 1;
    s->flags &= ~(unsigned)(PROCSCAN_OPTIN | PROCSCAN_OPTIN_REFUSED);
    s->flags |= optin_ok(v, n) ? PROCSCAN_OPTIN : PROCSCAN_OPTIN_REFUSED;
    if (s->cap) {
        size_t k = n < s->cap - 1 ? n : s->cap - 1;
        memcpy(s->optin, v, k);
        s->optin[k] = '\0';
    }
}

/* One option token t[0..n) (its name with '_' read as '-'), next the
 * following token (NULL: none). Returns how many tokens it took (1 or 2). */
static int one_option(struct optstate *s, const char *t, size_t n, const char *next, size_t nn)
{
    char name[32];
    size_t k = 0;
    while (k < n && t[k] != '=' && k < sizeof(name) - 1) {
        name[k] = t[k] == '_' && k > 1 ? '-' : t[k];
        k++;
    }
    name[k] = '\0';
    const char *val = k < n && t[k] == '=' ? t + k + 1 : NULL;
    size_t vl = val ? (size_t)(t + n - val) : 0;
    if (strcmp(name, "--inspect-port") == 0 || strcmp(name, "--debug-port") == 0) {
        if (val) {
            set_optin(s, val, vl);
            return 1;
        }
        if (next) {
            set_optin(s, next, nn);
            return 2;
        }
        set_optin(s, "", 0);
        return 1;
    }
    if (strcmp(name, "--inspect") == 0 || strcmp(name, "--inspect-brk") == 0 ||
        strcmp(name, "--inspect-wait") == 0 || strcmp(name, "--debug") == 0) {
        s->flags |= PROCSCAN_INSPECT;
        return 1;
    }
    if (strcmp(name, "--disable-sigusr1") == 0) {
        s->flags |= PROCSCAN_NO_SIGUSR1;
        return 1;
    }
    if (s->heap != NULL && val != NULL && heap_flag(s, name, val, vl))
        return 1;
    if (val == NULL && next && takes_value(name, k))
        return 2;
    return 1;
}

/* Split NODE_OPTIONS as Node does: spaces separate, double quotes group,
 * a backslash in quotes escapes the next byte. Tokens go through
 * one_option (their values always attached or following). */
static void node_options_scan(struct optstate *s, const char *v, size_t n)
{
    char tok[2][512];
    size_t tl[2] = {0, 0};
    int have = 0; /* tokens buffered: a value may follow its option */
    size_t i = 0;
    for (;;) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n'))
            i++;
        if (i >= n)
            break;
        char *out = tok[have];
        size_t o = 0;
        int quoted = 0;
        for (; i < n; i++) {
            char c = v[i];
            if (!quoted && (c == ' ' || c == '\t' || c == '\n'))
                break;
            if (c == '"') {
                quoted = !quoted;
                continue;
            }
            if (quoted && c == '\\' && i + 1 < n)
                c = v[++i];
            if (o < sizeof(tok[0]) - 1)
                out[o++] = c;
        }
        out[o] = '\0';
        tl[have] = o;
        if (++have == 2) {
            int took = one_option(s, tok[0], tl[0], tok[1], tl[1]);
            if (took == 2) {
                have = 0;
            } else {
                memcpy(tok[0], tok[1], tl[1] + 1);
                tl[0] = tl[1];
                have = 1;
            }
        }
    }
    if (have == 1)
        one_option(s, tok[0], tl[0], NULL, 0);
}

/* The options of cmdline (len bytes, NUL-separated argv: those before the
 * script) through one_option, after NODE_OPTIONS' (node_options, nlen). */
static void options_scan(struct optstate *s, const char *cmdline, size_t len,
                         const char *node_options, size_t nlen)
{
    if (node_options) {
        s->heap_src = PROCSCAN_HEAP_ENV;
        node_options_scan(s, node_options, nlen);
    }
    /* The command line's options come after NODE_OPTIONS and win. */
    s->heap_src = PROCSCAN_HEAP_CMDLINE;
    int port_from_env = s->have_port;
    unsigned env_port_flags = s->flags & (PROCSCAN_OPTIN | PROCSCAN_OPTIN_REFUSED);
    s->have_port = 0;
    const char *p = cmdline, *end = cmdline + len;
    const char *argv0_end = cmdline ? memchr(p, '\0', len) : NULL;
    if (argv0_end == NULL)
        goto done; /* one unterminated word: no options */
    p = argv0_end + 1;
    while (p < end) {
        const char *te = memchr(p, '\0', (size_t)(end - p));
        if (te == NULL)
            te = end;
        size_t n = (size_t)(te - p);
        if (n == 2 && p[0] == '-' && p[1] == '-' && te + 1 < end) {
            /* "--": the next word is the script, whatever it looks like */
            const char *se = memchr(te + 1, '\0', (size_t)(end - te - 1));
            s->script = te + 1;
            s->script_len = (size_t)((se ? se : end) - s->script);
            break;
        }
        if (n > 0 && p[0] != '-') {
            s->script = p;
            s->script_len = n;
        }
        if (n == 0 || p[0] != '-' || (n == 2 && p[1] == '-') || (n == 1))
            break; /* the script (or "--", or "-": stdin): options end */
        const char *next = te < end ? te + 1 : NULL;
        size_t nn = 0;
        if (next && next < end) {
            const char *ne = memchr(next, '\0', (size_t)(end - next));
            nn = (size_t)((ne ? ne : end) - next);
        } else {
            next = NULL;
        }
        int took = one_option(s, p, n, next, nn);
        p = te + 1;
        if (took == 2 && next)
            p = next + nn + 1;
    }
done:
    if (!s->have_port && port_from_env) {
        s->flags &= ~(unsigned)(PROCSCAN_OPTIN | PROCSCAN_OPTIN_REFUSED);
        s->flags |= env_port_flags;
    }
}

unsigned procscan_options(const char *cmdline, size_t len, const char *node_options, size_t nlen,
                          char *optin, size_t cap)
{
    struct optstate s = {.optin = optin, .cap = cap};
    if (cap)
        optin[0] = '\0';
    options_scan(&s, cmdline, len, node_options, nlen);
    return s.flags;
}

void procscan_heap_flags(const char *cmdline, size_t len, const char *node_options, size_t nlen,
                         struct procscan_heap *out)
{
    char optin[8];
    memset(out, 0, sizeof(*out));
    struct optstate s = {.optin = optin, .cap = sizeof(optin), .heap = out};
    options_scan(&s, cmdline, len, node_options, nlen);
}

const char *procscan_script(const char *cmdline, size_t len, size_t *slen)
{
    char optin[8];
    struct optstate s = {.optin = optin, .cap = sizeof(optin)};
    options_scan(&s, cmdline, len, NULL, 0);
    if (s.script == NULL || s.script_len == 0 || memchr(s.script, '\0', s.script_len) != NULL)
        return NULL;
    *slen = s.script_len;
    return s.script;
}

const char *procscan_env(const char *env, size_t len, const char *name, size_t *vlen)
{
    size_t kl = strlen(name);
    const char *p = env, *end = env + len;
    while (p < end) {
        const char *e = memchr(p, '\0', (size_t)(end - p));
        if (e == NULL)
            e = end;
        if ((size_t)(e - p) > kl && memcmp(p, name, kl) == 0 && p[kl] == '=') {
            *vlen = (size_t)(e - p) - kl - 1;
            return p + kl + 1;
        }
        p = e + 1;
    }
    return NULL;
}

const char *procscan_node_options(const char *env, size_t len, size_t *vlen)
{
    return procscan_env(env, len, "NODE_OPTIONS", vlen);
}

/* --- cgroup, status, names --------------------------------------------------- */

int procscan_container(const char *cgroup, size_t len, char *out)
{
    out[0] = '\0';
    int found = 0;
    const char *p = cgroup, *end = cgroup + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        /* hierarchy-ID:controllers:path */
        const char *c1 = memchr(p, ':', (size_t)(le - p));
        const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(le - c1 - 1)) : NULL;
        if (c2) {
            const char *s = c2 + 1;
            while (s < le) {
                const char *r = s;
                while (r < le && isoprof_hexval((unsigned char)*r) >= 0)
                    r++;
                if (r - s == PROCSCAN_CONTAINER_LEN) {
                    memcpy(out, s, PROCSCAN_CONTAINER_LEN);
                    out[PROCSCAN_CONTAINER_LEN] = '\0';
                    found = 1;
                }
                s = r < le ? r + 1 : le;
            }
        }
        p = nl ? nl + 1 : end;
    }
    return found;
}

int procscan_is_node(const char *base)
{
    if (strcmp(base, "nodejs") == 0)
        return 1;
    if (strncmp(base, "node", 4) != 0)
        return 0;
    const char *v = base + 4;
    if (*v == '\0')
        return 1;
    if (*v == '-' || *v == '_')
        v++;
    if (*v < '0' || *v > '9')
        return 0;
    for (; *v; v++)
        if ((*v < '0' || *v > '9') && *v != '.')
            return 0;
    return 1;
}

static int status_mask(const char *status, size_t len, const char *key, uint64_t *out)
{
    size_t kl = strlen(key);
    const char *p = status, *end = status + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if ((size_t)(le - p) > kl && memcmp(p, key, kl) == 0) {
            const char *v = p + kl;
            while (v < le && (*v == ' ' || *v == '\t'))
                v++;
            return hexnum(v, (size_t)(le - v), out);
        }
        p = nl ? nl + 1 : end;
    }
    return -1;
}

unsigned procscan_status(const char *status, size_t len, uint32_t *uid)
{
    unsigned flags = 0;
    uint64_t cgt, ign;
    /* SIGUSR1 is 10: bit 9. Caught and not ignored, or it kills. */
    if (status_mask(status, len, "SigCgt:", &cgt) == 0 &&
        status_mask(status, len, "SigIgn:", &ign) == 0 && (cgt >> 9 & 1) && !(ign >> 9 & 1))
        flags |= PROCSCAN_SIGUSR1;
    const char *p = status, *end = status + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (le - p > 4 && memcmp(p, "Uid:", 4) == 0) {
            const char *v = p + 4;
            while (v < le && (*v == ' ' || *v == '\t'))
                v++;
            const char *e = v;
            while (e < le && *e >= '0' && *e <= '9')
                e++;
            if (e > v && digits(v, (size_t)(e - v), 0xffffffffUL))
                *uid = (uint32_t)strtoul(v, NULL, 10);
            break;
        }
        p = nl ? nl + 1 : end;
    }
    return flags;
}

/* starttime, field 22 of stat: counted after the last ')' (the command
 * name in parentheses may hold spaces and parentheses). */
static int stat_start(const char *stat, size_t len, uint64_t *out)
{
    const char *rp = NULL;
    for (size_t i = len; i-- > 0;)
        if (stat[i] == ')') {
            rp = stat + i;
            break;
        }
    if (rp == NULL)
        return -1;
    const char *p = rp + 1, *end = stat + len, *f;
    size_t n;
    for (int i = 3; i <= 22; i++)
        if (field(&p, end, &f, &n) != 0)
            return -1;
    uint64_t v = 0;
    if (n > 20)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (f[i] < '0' || f[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(f[i] - '0');
    }
    *out = v;
    return 0;
}

int procscan_start_ticks(const char *root, uint32_t pid, uint64_t *out)
{
    char buf[1024];
    ssize_t n = read_small(root, pid, "stat", buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    return stat_start(buf, (size_t)n, out) == 0 ? 0 : -EINVAL;
}

/* --- the scan ----------------------------------------------------------------- */

static int by_inode(const void *x, const void *y)
{
    const struct procscan_listener *a = x, *b = y;
    return a->inode < b->inode ? -1 : a->inode > b->inode;
}

static int by_pid(const void *x, const void *y)
{
    const struct procscan_proc *a = x, *b = y;
    return a->pid < b->pid ? -1 : a->pid > b->pid;
}

struct scan {
    const char *root;
    const struct procscan_filter *f;
    struct procscan_listener *l;
    size_t nl;
    char self_net[64];
    char *buf; /* PROCSCAN_MAX_FILE bytes */
    char *buf2;
    char *buf3; /* APPVER_MAX_FILE + 1 bytes, with f->nversion */
};

static int settled(const struct procscan_filter *f, uint32_t pid, uint64_t start)
{
    size_t lo = 0, hi = f->nsettled;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (f->settled[mid].pid < pid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < f->nsettled && f->settled[lo].pid == pid && f->settled[lo].start_ticks == start;
}

static void add_port(struct procscan_proc *p, uint16_t port)
{
    unsigned i = 0;
    while (i < p->nports && p->ports[i] < port)
        i++;
    if (i < p->nports && p->ports[i] == port)
        return;
    if (p->nports == PROCSCAN_MAX_PORTS) {
        p->ports_over++;
        return;
    }
    memmove(&p->ports[i + 1], &p->ports[i], (p->nports - i) * sizeof(p->ports[0]));
    p->ports[i] = port;
    p->nports++;
}

static void read_fds(struct scan *s, struct procscan_proc *p)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%u/fd", s->root, (unsigned)p->pid);
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        if (errno == EACCES || errno == EPERM)
            p->flags |= PROCSCAN_FD_DENIED;
        return;
    }
    DIR *d = fdopendir(dfd);
    if (d == NULL) {
        close(dfd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char link[64];
        ssize_t n = readlinkat(dfd, e->d_name, link, sizeof(link) - 1);
        if (n <= 9 || memcmp(link, "socket:[", 8) != 0 || link[n - 1] != ']')
            continue;
        link[n - 1] = '\0';
        char *endp;
        errno = 0;
        unsigned long long ino = strtoull(link + 8, &endp, 10);
        if (errno || *endp != '\0' || ino == 0)
            continue;
        struct procscan_listener key = {.inode = ino};
        const struct procscan_listener *hit = bsearch(&key, s->l, s->nl, sizeof(*s->l), by_inode);
        if (hit == NULL)
            continue;
        if (hit->loopback)
            add_port(p, hit->port);
        else
            p->other_listeners++;
    }
    closedir(d);
}

static int exe_listed(const struct procscan_filter *f, const char *base)
{
    for (size_t i = 0; i < f->nexe; i++)
        if (strcmp(f->exe[i], base) == 0)
            return 1;
    return 0;
}

static int uid_listed(const struct procscan_filter *f, uint32_t uid)
{
    if (f->nuids == 0)
        return 1;
    for (size_t i = 0; i < f->nuids; i++)
        if (f->uids[i] == uid)
            return 1;
    return 0;
}

/* 1: p filled; 0: not a match; -1: vanished or unreadable. */
static int scan_one(struct scan *s, uint32_t pid, struct procscan_proc *p, size_t *denied)
{
    char link[4096];
    ssize_t n = read_link(s->root, pid, "exe", link, sizeof(link));
    if (n < 0) {
        if (n == -EACCES || n == -EPERM)
            (*denied)++;
        if (n != -ENOENT && n != -ESRCH)
            return 0;
        /* A kernel thread has no exe but a status; a process gone has neither. */
        char st[64];
        return read_small(s->root, pid, "status", st, sizeof(st)) >= 0 ? 0 : -1;
    }
    static const char deleted[] = " (deleted)";
    size_t dl = sizeof(deleted) - 1;
    if ((size_t)n > dl && memcmp(link + n - dl, deleted, dl) == 0)
        link[n - dl] = '\0';
    const char *base = strrchr(link, '/');
    base = base ? base + 1 : link;
    if (!exe_listed(s->f, base))
        return 0;
    memset(p, 0, sizeof(*p));
    p->pid = pid;
    size_t bl = strlen(base); /* a listed name: at most 255 bytes */
    if (bl >= sizeof(p->exe))
        bl = sizeof(p->exe) - 1;
    memcpy(p->exe, base, bl);
    p->exe[bl] = '\0';
    if (procscan_is_node(base))
        p->flags |= PROCSCAN_NODE;
    ssize_t len = read_small(s->root, pid, "status", s->buf, PROCSCAN_MAX_FILE);
    if (len < 0)
        return -1;
    p->uid = UINT32_MAX;
    p->flags |= procscan_status(s->buf, (size_t)len, &p->uid);
    if (p->uid == UINT32_MAX || !uid_listed(s->f, p->uid))
        return 0;
    len = read_small(s->root, pid, "stat", s->buf, PROCSCAN_MAX_FILE);
    if (len < 0 || stat_start(s->buf, (size_t)len, &p->start_ticks) != 0)
        return -1;
    char net[64];
    if (s->self_net[0] && read_link(s->root, pid, "ns/net", net, sizeof(net)) > 0 &&
        strcmp(net, s->self_net) != 0)
        p->flags |= PROCSCAN_OTHER_NETNS;
    ssize_t cl = read_small(s->root, pid, "cmdline", s->buf, PROCSCAN_MAX_FILE);
    if (cl < 0)
        return -1;
    ssize_t el = read_small(s->root, pid, "environ", s->buf2, PROCSCAN_MAX_FILE);
    const char *no = NULL;
    size_t nol = 0;
    if (el >= 0)
        no = procscan_node_options(s->buf2, (size_t)el, &nol);
    else if (el == -EACCES || el == -EPERM)
        p->flags |= PROCSCAN_ENV_DENIED;
    p->flags |= procscan_options(s->buf, (size_t)cl, no, nol, p->optin, sizeof(p->optin));
    if (s->f->nversion && !settled(s->f, pid, p->start_ticks)) {
        appver_find(s->root, pid, (p->flags & PROCSCAN_NODE) != 0, s->buf, (size_t)cl,
                    el >= 0 ? s->buf2 : NULL, el >= 0 ? (size_t)el : 0, s->f->version_from,
                    s->f->nversion, s->buf3, &p->version);
        p->flags |= PROCSCAN_VERSION_READ;
    }
    len = read_small(s->root, pid, "cgroup", s->buf, PROCSCAN_MAX_FILE);
    if (len > 0)
        procscan_container(s->buf, (size_t)len, p->container);
    if (!(p->flags & PROCSCAN_OTHER_NETNS))
        read_fds(s, p);
    return 1;
}

static int read_listeners(struct scan *s, char *why, size_t cap)
{
    size_t bad = 0;
    s->l = isoprof_malloc(PROCSCAN_MAX_LISTENERS * sizeof(*s->l));
    if (s->l == NULL)
        return -ENOMEM;
    const char *files[2] = {"net/tcp", "net/tcp6"};
    for (int v6 = 0; v6 < 2; v6++) {
        /* A busy host's table is larger than a small file: read it whole,
         * up to a cap (a line is 150 bytes). */
        size_t cap_bytes = (size_t)PROCSCAN_MAX_LISTENERS * 160, have = 0;
        char *text = NULL;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", s->root, files[v6]);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            if (v6)
                continue; /* no IPv6 */
            snprintf(why, cap, "%s: %s", path, strerror(errno));
            return -errno;
        }
        size_t tcap = 0;
        for (;;) {
            if (have == tcap) {
                size_t nc = tcap ? tcap * 2 : 64u << 10;
                if (tcap == cap_bytes)
                    break; /* the rest is not read */
                if (nc > cap_bytes)
                    nc = cap_bytes;
                char *t = isoprof_realloc(text, nc);
                if (t == NULL) {
                    close(fd);
                    isoprof_free(text);
                    return -ENOMEM;
                }
                text = t;
                tcap = nc;
            }
            ssize_t r = read(fd, text + have, tcap - have);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            have += (size_t)r;
        }
        close(fd);
        if (text)
            procscan_parse_tcp(text, have, v6, s->l, &s->nl, PROCSCAN_MAX_LISTENERS, &bad);
        isoprof_free(text);
    }
    qsort(s->l, s->nl, sizeof(*s->l), by_inode);
    return 0;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int procscan_run(const char *root, const struct procscan_filter *f, struct procscan_result *out,
                 char *why, size_t cap)
{
    uint64_t cpu0 = thread_cpu_ns();
    memset(out, 0, sizeof(*out));
    why[0] = '\0';
    struct scan s = {.root = root, .f = f};
    int rc = -ENOMEM;
    s.buf = isoprof_malloc(PROCSCAN_MAX_FILE);
    s.buf2 = isoprof_malloc(PROCSCAN_MAX_FILE);
    if (f->nversion)
        s.buf3 = isoprof_malloc(APPVER_MAX_FILE + 1);
    if (s.buf == NULL || s.buf2 == NULL || (f->nversion && s.buf3 == NULL))
        goto done;
    if ((rc = read_listeners(&s, why, cap)) != 0)
        goto done;
    out->listeners = s.nl;
    if (read_link(root, 0, "self/ns/net", s.self_net, sizeof(s.self_net)) < 0)
        s.self_net[0] = '\0';
    DIR *d = opendir(root);
    if (d == NULL) {
        rc = -errno;
        snprintf(why, cap, "%s: %s", root, strerror(errno));
        goto done;
    }
    size_t pcap = 0;
    struct dirent *e;
    rc = 0;
    while ((e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        size_t nl = strlen(name);
        if (!digits(name, nl, 0x7fffffffUL))
            continue;
        uint32_t pid = (uint32_t)strtoul(name, NULL, 10);
        out->entries++;
        if (pid == 0 || pid == f->self_pid)
            continue;
        if (out->n == pcap) {
            if (pcap == PROCSCAN_MAX_PROCS) {
                struct procscan_proc tmp;
                if (scan_one(&s, pid, &tmp, &out->denied) == 1)
                    out->over++;
                continue;
            }
            size_t nc = pcap ? pcap * 2 : 16;
            if (nc > PROCSCAN_MAX_PROCS)
                nc = PROCSCAN_MAX_PROCS;
            struct procscan_proc *np = isoprof_realloc(out->p, nc * sizeof(*np));
            if (np == NULL) {
                rc = -ENOMEM;
                break;
            }
            out->p = np;
            pcap = nc;
        }
        int r = scan_one(&s, pid, &out->p[out->n], &out->denied);
        if (r == 1)
            out->n++;
        else if (r < 0)
            out->vanished++;
    }
    closedir(d);
done:
    isoprof_free(s.buf);
    isoprof_free(s.buf2);
    isoprof_free(s.buf3);
    isoprof_free(s.l);
    if (rc != 0) {
        if (why[0] == '\0')
            snprintf(why, cap, "%s", strerror(-rc));
        procscan_result_free(out);
        return rc;
    }
    qsort(out->p, out->n, sizeof(*out->p), by_pid);
    out->cpu_ns = thread_cpu_ns() - cpu0;
    return 0;
}

void procscan_result_free(struct procscan_result *r)
{
    isoprof_free(r->p);
    r->p = NULL;
    r->n = 0;
}

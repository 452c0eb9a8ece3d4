/*
 * bench_heapsnap - what a heap snapshot costs the agent once it has
 * arrived (agent/pprof/heapsnap.h): the streaming parse, the dominator
 * tree and the retained pprof, in time and in memory, per million nodes.
 *
 * It generates, in a temp dir, a synthetic .heapsnapshot for each size
 * asked for (default 100,000 and 1,000,000 nodes) with the shape of a real
 * Node heap: V8's meta (7 node fields), its mix of node types (code 29 %,
 * strings 26 %, closures 13 %, object shapes 11 %, hidden 9 %, objects 6 %,
 * arrays 3 %...), about 5 edges a node in V8's mix (internal 75 %, property
 * 10 %, hidden 7 %, weak 2.5 %, context 2.5 %, element 2 %), most of them
 * to nearby nodes and many to a few shared shapes, every node reachable
 * through a tree edge from an earlier node, and a strings table of about
 * half a string a node (class and function names, property names, and the
 * contents of each string node: 5 to 60 bytes of words).
 *
 * Each measurement runs in a fresh process (this program re-executed), so
 * that nothing of the generation counts in its peak RSS: it reads the file
 * in --chunk pieces (64 KiB: the text is never held whole, as the CDP
 * chunks are not) and feeds the parser, then computes the dominators, then
 * the pprof, and reports each phase's time and the process's VmHWM after
 * it, beside what the structures hold by their own count (heapsnap_bytes,
 * heapsnap_dom_need, the result). By default the parse is the daemon's:
 * edges spilled to an unlinked file beside the snapshot, only the names
 * the profile uses kept; --in-memory keeps everything in memory.
 * --budget MIB runs instead the daemon's whole conversion
 * (heapsnap_retained) within that budget (0: none, to see what it would
 * take) and reports its peak, or its refusal. --reps runs (default 3) give the median. It asserts nothing;
 * it exits non-zero only when something does not work.
 *
 * Usage:
 *   bench_heapsnap [--nodes N]... [--reps R] [--chunk BYTES] [--keep]
 *                  [--in-memory | --budget MIB]
 *   bench_heapsnap --file SNAPSHOT [--pprof OUT.pb.gz] [--reps R] [...]
 *       a real snapshot instead; --pprof writes its retained profile,
 *       gzipped, for `go tool pprof -top -cum OUT.pb.gz`
 *   bench_heapsnap --generate N FILE
 *       only writes the synthetic snapshot of N nodes (for
 *       tests/unit/pprof/heapsnap_budget.cmake)
 *   bench_heapsnap --child FILE CHUNK MODE BUDGET [OUT]
 *       internal: one fresh process's measurement, one line of figures
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "heapsnap.h"
#include "pprof.h"

#define MIB (1024.0 * 1024.0)
#define MAX_SIZES 8

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench_heapsnap: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The process's peak resident set (VmHWM), in bytes. */
static double hwm_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = strtod(line + 6, NULL);
    if (f)
        fclose(f);
    return kb * 1024;
}

/* --- the generator --- */

static struct isoprof_rng rng;

static uint32_t rnd(uint32_t n)
{
    return (uint32_t)(isoprof_rng_next(&rng) % n);
}

/* A buffered writer of the snapshot text. */
struct out {
    FILE *f;
    char buf[1 << 16];
    size_t n;
    uint64_t bytes;
};

static void o_flush(struct out *o)
{
    if (o->n && fwrite(o->buf, 1, o->n, o->f) != o->n)
        die("write: %s", strerror(errno));
    o->bytes += o->n;
    o->n = 0;
}

static void o_puts(struct out *o, const char *s)
{
    size_t n = strlen(s);
    if (o->n + n > sizeof(o->buf))
        o_flush(o);
    if (n > sizeof(o->buf))
        die("a piece too long");
    memcpy(o->buf + o->n, s, n);
    o->n += n;
}

static void o_uint(struct out *o, uint64_t v)
{
    char t[24];
    size_t k = sizeof(t);
    do {
        t[--k] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (o->n + sizeof(t) > sizeof(o->buf))
        o_flush(o);
    memcpy(o->buf + o->n, t + k, sizeof(t) - k);
    o->n += sizeof(t) - k;
}

static void o_putc(struct out *o, char c)
{
    if (o->n == sizeof(o->buf))
        o_flush(o);
    o->buf[o->n++] = c;
}

static const char *const node_types[] = {"hidden",
                                         "array",
                                         "string",
                                         "object",
                                         "code",
                                         "closure",
                                         "regexp",
                                         "number",
                                         "native",
                                         "synthetic",
                                         "concatenated string",
                                         "sliced string",
                                         "symbol",
                                         "bigint",
                                         "object shape"};
enum {
    T_HIDDEN,
    T_ARRAY,
    T_STRING,
    T_OBJECT,
    T_CODE,
    T_CLOSURE,
    T_REGEXP,
    T_NUMBER,
    T_NATIVE,
    T_SYNTHETIC,
    T_CONS,
    T_SLICED,
    T_SYMBOL,
    T_BIGINT,
    T_SHAPE
};
enum { E_CONTEXT, E_ELEMENT, E_PROPERTY, E_INTERNAL, E_HIDDEN, E_SHORTCUT, E_WEAK };

static const char *const words[] = {
    "handle",   "request", "session", "token",   "buffer", "stream", "query",  "record",
    "config",   "plugin",  "module",  "render",  "cache",  "index",  "schema", "field",
    "value",    "option",  "result",  "payload", "user",   "order",  "item",   "price",
    "checkout", "cart",    "the",     "a",       "of",     "and",    "with",   "for"};
static const char *const classes[] = {
    "Object",  "Array",    "Map",         "Set",        "Promise",
    "Request", "Response", "Buffer",      "Session",    "EventEmitter",
    "Socket",  "Timeout",  "URL",         "Headers",    "Cart",
    "Order",   "User",     "Router",      "Context",    "Error",
    "Date",    "WeakMap",  "ArrayBuffer", "Uint8Array", "system / Context"};
static const char *const props[] = {
    "map",       "properties", "elements", "context", "code",    "shared", "feedback_cell",
    "prototype", "next",       "value",    "data",    "items",   "cache",  "length",
    "name",      "id",         "user",     "session", "headers", "body",   "handlers",
    "listeners", "_events",    "children", "parent",  "buffer"};

/* The string table: fixed names first (their indices are known), then the
 * contents of string nodes, one each, written as they are made. */
enum { S_EMPTY, S_GCROOTS, S_GLOBAL };
#define S_CLASSES 3
#define S_PROPS (S_CLASSES + ISOPROF_ARRAY_SIZE(classes))
#define S_FUNCS (S_PROPS + ISOPROF_ARRAY_SIZE(props))
#define NFUNCS 4096
#define S_DYN (S_FUNCS + NFUNCS)

static void o_words(struct out *o, unsigned nwords)
{
    for (unsigned w = 0; w < nwords; w++) {
        if (w)
            o_putc(o, ' ');
        o_puts(o, words[rnd(ISOPROF_ARRAY_SIZE(words))]);
    }
}

/* Writes a synthetic snapshot of n nodes to path; returns its bytes and
 * the edge count in *edges. */
static uint64_t generate(const char *path, uint32_t n, uint64_t *edges)
{
    struct out *o = isoprof_calloc(1, sizeof(*o));
    uint8_t *type = isoprof_malloc(n);
    uint32_t *parent = isoprof_malloc((size_t)n * sizeof(uint32_t));
    uint32_t *coff = isoprof_calloc((size_t)n + 1, sizeof(uint32_t));
    uint32_t *kids = isoprof_malloc((size_t)n * sizeof(uint32_t));
    uint32_t *extra = isoprof_malloc((size_t)n * sizeof(uint32_t));
    uint32_t *name = isoprof_malloc((size_t)n * sizeof(uint32_t));
    uint32_t *shapes = isoprof_malloc((size_t)n * sizeof(uint32_t));
    if (o == NULL || type == NULL || parent == NULL || coff == NULL || kids == NULL ||
        extra == NULL || name == NULL || shapes == NULL)
        die("out of memory");
    if ((o->f = fopen(path, "w")) == NULL)
        die("%s: %s", path, strerror(errno));
    isoprof_rng_seed(&rng, 1234567);

    /* node types in V8's proportions (per mille); the first few are the
     * synthetic roots */
    static const struct {
        uint8_t t;
        unsigned pm;
    } mix[] = {{T_CODE, 290},  {T_STRING, 262}, {T_CLOSURE, 135}, {T_SHAPE, 110},
               {T_HIDDEN, 85}, {T_OBJECT, 60},  {T_ARRAY, 26},    {T_CONS, 20},
               {T_SYMBOL, 5},  {T_NATIVE, 3},   {T_NUMBER, 2},    {T_REGEXP, 2}};
    uint32_t nshapes = 0, nstr = S_DYN;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t t = T_SYNTHETIC;
        if (i >= 3) {
            unsigned r = rnd(1000), acc = 0;
            t = T_OBJECT;
            for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(mix); k++)
                if (r < (acc += mix[k].pm)) {
                    t = mix[k].t;
                    break;
                }
        }
        type[i] = t;
        if (t == T_SHAPE)
            shapes[nshapes++] = i;
        switch (t) {
        case T_SYNTHETIC:
            name[i] = i == 1 ? S_GCROOTS : S_EMPTY;
            break;
        case T_OBJECT:
        case T_NATIVE:
            name[i] = i == 2 ? S_GLOBAL : S_CLASSES + rnd(ISOPROF_ARRAY_SIZE(classes));
            break;
        case T_CLOSURE:
        case T_CODE:
            name[i] = S_FUNCS + rnd(NFUNCS);
            break;
        case T_STRING:
        case T_CONS:
            name[i] = nstr++; /* its own contents */
            break;
        default:
            name[i] = S_EMPTY;
        }
        /* a tree edge from an earlier node, mostly a near one */
        if (i == 0)
            parent[i] = UINT32_MAX;
        else if (i < 3)
            parent[i] = 0;
        else
            parent[i] = rnd(8) == 0 ? rnd(i) : i - 1 - rnd(i - 1 < 64 ? i - 1 : 64);
        if (i > 0)
            coff[parent[i] + 1]++;
        /* about 4 more edges a node (5 with the tree edge); strings have
         * fewer */
        extra[i] = type[i] == T_STRING ? rnd(3) : type[i] == T_CODE ? 3 + rnd(4) : 3 + rnd(6);
    }
    for (uint32_t i = 0; i < n; i++)
        coff[i + 1] += coff[i];
    {
        uint32_t *at = isoprof_malloc((size_t)n * sizeof(uint32_t));
        if (at == NULL)
            die("out of memory");
        memcpy(at, coff, (size_t)n * sizeof(uint32_t));
        for (uint32_t i = 1; i < n; i++)
            kids[at[parent[i]]++] = i;
        isoprof_free(at);
    }
    uint64_t ne = 0;
    for (uint32_t i = 0; i < n; i++)
        ne += coff[i + 1] - coff[i] + extra[i];

    o_puts(o, "{\"snapshot\":{\"meta\":{\"node_fields\":[\"type\",\"name\",\"id\",\"self_size\","
              "\"edge_count\",\"trace_node_id\",\"detachedness\"],\"node_types\":[[");
    for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(node_types); k++) {
        o_puts(o, k ? ",\"" : "\"");
        o_puts(o, node_types[k]);
        o_puts(o, "\"");
    }
    o_puts(o, "],\"string\",\"number\",\"number\",\"number\",\"number\",\"number\"],"
              "\"edge_fields\":[\"type\",\"name_or_index\",\"to_node\"],\"edge_types\":[["
              "\"context\",\"element\",\"property\",\"internal\",\"hidden\",\"shortcut\","
              "\"weak\"],\"string_or_number\",\"node\"],\"trace_function_info_fields\":["
              "\"function_id\",\"name\",\"script_name\",\"script_id\",\"line\",\"column\"],"
              "\"trace_node_fields\":[\"id\",\"function_info_index\",\"count\",\"size\","
              "\"children\"],\"sample_fields\":[\"timestamp_us\",\"last_assigned_id\"],"
              "\"location_fields\":[\"object_index\",\"script_id\",\"line\",\"column\"]},"
              "\"node_count\":");
    o_uint(o, n);
    o_puts(o, ",\"edge_count\":");
    o_uint(o, ne);
    o_puts(o, ",\"trace_function_count\":0},\n\"nodes\":[");
    static const uint16_t sizes[] = {
        [T_HIDDEN] = 32,  [T_ARRAY] = 64,  [T_STRING] = 24, [T_OBJECT] = 40,  [T_CODE] = 180,
        [T_CLOSURE] = 32, [T_REGEXP] = 48, [T_NUMBER] = 16, [T_NATIVE] = 400, [T_SYNTHETIC] = 0,
        [T_CONS] = 32,    [T_SLICED] = 32, [T_SYMBOL] = 24, [T_BIGINT] = 24,  [T_SHAPE] = 80};
    for (uint32_t i = 0; i < n; i++) {
        if (i)
            o_puts(o, "\n,");
        uint64_t self = type[i] == T_SYNTHETIC ? 0 : sizes[type[i]] + rnd(sizes[type[i]] + 1);
        if (type[i] == T_ARRAY && rnd(50) == 0)
            self += rnd(1 << 20); /* now and then a large backing store */
        uint64_t f[7] = {
            type[i], name[i], (uint64_t)i * 2 + 1, self, coff[i + 1] - coff[i] + extra[i], 0, 0};
        for (int k = 0; k < 7; k++) {
            if (k)
                o_putc(o, ',');
            o_uint(o, f[k]);
        }
    }
    o_puts(o, "],\n\"edges\":[");
    uint64_t written = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t m = coff[i + 1] - coff[i] + extra[i];
        for (uint32_t k = 0; k < m; k++) {
            uint32_t to, et, nm;
            if (k < coff[i + 1] - coff[i]) {
                to = kids[coff[i] + k];
                et = i == 0          ? E_ELEMENT
                     : rnd(100) < 70 ? E_INTERNAL
                     : rnd(2)        ? E_PROPERTY
                                     : E_ELEMENT;
            } else {
                unsigned r = rnd(100);
                if (r < 45 && nshapes) {
                    to = shapes[rnd(nshapes) % (rnd(4) ? 64 : nshapes)]; /* a few hot shapes */
                    et = E_INTERNAL;
                } else if (r < 80) {
                    uint32_t j = i + 1 + rnd(200);
                    to = j < n ? j : rnd(n);
                    et = rnd(100) < 80 ? E_INTERNAL : E_HIDDEN;
                } else if (r < 90) {
                    to = rnd(n);
                    et = E_PROPERTY;
                } else if (r < 94) {
                    to = rnd(n);
                    et = E_WEAK;
                } else {
                    to = rnd(n);
                    et = rnd(2) ? E_CONTEXT : E_ELEMENT;
                }
            }
            if (et == E_ELEMENT || et == E_HIDDEN)
                nm = rnd(64);
            else
                nm = (uint32_t)(S_PROPS + rnd(ISOPROF_ARRAY_SIZE(props)));
            if (written++)
                o_puts(o, "\n,");
            o_uint(o, et);
            o_putc(o, ',');
            o_uint(o, nm);
            o_putc(o, ',');
            o_uint(o, (uint64_t)to * 7);
        }
    }
    if (written != ne)
        die("generator: %" PRIu64 " edges written, %" PRIu64 " counted", written, ne);
    o_puts(o, "],\n\"trace_function_infos\":[],\n\"trace_tree\":[],\n\"samples\":[],\n"
              "\"locations\":[],\n\"strings\":[\"\",\"(GC roots)\",\"global\"");
    for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(classes); k++) {
        o_puts(o, ",\n\"");
        o_puts(o, classes[k]);
        o_putc(o, '"');
    }
    for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(props); k++) {
        o_puts(o, ",\n\"");
        o_puts(o, props[k]);
        o_putc(o, '"');
    }
    for (uint32_t k = 0; k < NFUNCS; k++) {
        o_puts(o, ",\n\"");
        o_puts(o, words[k % 20]);
        o_puts(o, words[(k / 20) % 20]);
        o_uint(o, k);
        o_putc(o, '"');
    }
    for (uint32_t k = S_DYN; k < nstr; k++) {
        o_puts(o, ",\n\"");
        o_words(o, 1 + rnd(8));
        o_putc(o, '"');
    }
    o_puts(o, "]}");
    o_flush(o);
    if (fclose(o->f) != 0)
        die("%s: %s", path, strerror(errno));
    uint64_t bytes = o->bytes;
    isoprof_free(o);
    isoprof_free(type);
    isoprof_free(parent);
    isoprof_free(coff);
    isoprof_free(kids);
    isoprof_free(extra);
    isoprof_free(name);
    isoprof_free(shapes);
    *edges = ne;
    return bytes;
}

/* --- one measurement, in a fresh process --- */

struct figures {
    double nodes, edges, strings, parse_s, dom_s, pprof_s;
    double snap_bytes, dom_need, dom_bytes;
    double hwm0, hwm_parse, hwm_dom, hwm_pprof;
    double reachable, samples, frames, folded, deeper, pprof_bytes;
};

/* An unlinked file beside `file`, for the spill (as the daemon makes one
 * in its store). */
static int spill_file(const char *file)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", file);
    int fd = open(dirname(dir), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        die("O_TMPFILE in %s: %s", dir, strerror(errno));
    return fd;
}

struct file_src {
    int fd;
    size_t chunk;
};

static int file_read(void *arg, heapsnap_feed_fn feed, void *feed_arg)
{
    struct file_src *fs = arg;
    char *buf = isoprof_malloc(fs->chunk);
    if (buf == NULL)
        return -ENOMEM;
    int rc = 0;
    for (;;) {
        ssize_t n = read(fs->fd, buf, fs->chunk);
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0 || feed(feed_arg, buf, (size_t)n) != 0)
            break;
    }
    isoprof_free(buf);
    return rc;
}

/* The daemon's whole conversion within budget bytes: one line, the peak
 * or the refusal. */
static int child_budget(const char *file, size_t chunk, size_t budget)
{
    double hwm0 = hwm_bytes(), t0 = now_s();
    struct file_src fs = {open(file, O_RDONLY), chunk};
    if (fs.fd < 0)
        die("%s: %s", file, strerror(errno));
    struct heapsnap_retained_opts o = {.budget = budget, .spill_fd = spill_file(file)};
    struct heapsnap_pprof_result r;
    char *why = NULL;
    int rc = heapsnap_retained(&o, file_read, &fs, &r, &why);
    close(fs.fd);
    if (rc == -ENOMEM)
        die("out of memory");
    if (rc != 0) {
        printf("refused %.0f %.0f %s\n", hwm0, hwm_bytes(), why ? why : "");
        isoprof_free(why);
        return 0;
    }
    printf("converted %.0f %.0f %.6f %.0f %.0f %.0f\n", hwm0, hwm_bytes(), now_s() - t0,
           (double)r.objects, (double)r.samples, (double)r.pprof.len);
    pprof_buf_free(&r.pprof);
    return 0;
}

static int child(const char *file, size_t chunk, bool spill, const char *out)
{
    struct figures f = {0};
    f.hwm0 = hwm_bytes();
    int fd = open(file, O_RDONLY);
    if (fd < 0)
        die("%s: %s", file, strerror(errno));
    char *buf = isoprof_malloc(chunk);
    struct heapsnap_parser *p;
    struct heapsnap_parse_opts po = {.spill_fd = spill ? spill_file(file) : -1,
                                     .used_names = spill};
    if (buf == NULL || heapsnap_parser_new_opts(&po, &p) != 0)
        die("out of memory");
    double t0 = now_s();
    for (;;) {
        ssize_t n = read(fd, buf, chunk);
        if (n < 0)
            die("read: %s", strerror(errno));
        if (n == 0 || heapsnap_parser_feed(p, buf, (size_t)n) != HEAPSNAP_OK)
            break;
    }
    close(fd);
    struct heapsnap *s;
    char *why;
    int rc = heapsnap_parser_finish(p, &s, &why);
    if (rc != 0)
        die("%s refused: %s: %s", file, heapsnap_reason(rc), why ? why : "");
    heapsnap_parser_free(p);
    isoprof_free(buf);
    f.parse_s = now_s() - t0;
    f.hwm_parse = hwm_bytes();
    f.nodes = (double)heapsnap_node_count(s);
    f.edges = (double)heapsnap_edge_count(s);
    f.strings = (double)heapsnap_string_count(s);
    f.snap_bytes = (double)heapsnap_bytes(s);
    f.dom_need = (double)heapsnap_dom_need(s);

    t0 = now_s();
    struct heapsnap_dom *d;
    if ((rc = heapsnap_dominators(s, 0, &d)) != 0)
        die("dominators: %s", isoprof_strerror(rc));
    f.dom_s = now_s() - t0;
    f.hwm_dom = hwm_bytes();
    struct heapsnap_dom_stats st;
    heapsnap_dom_stats(d, &st);
    f.dom_bytes = (double)st.bytes;
    f.reachable = (double)st.reachable;

    t0 = now_s();
    struct heapsnap_pprof_result r;
    if ((rc = heapsnap_pprof(s, d, NULL, &r)) != 0)
        die("pprof: %s", isoprof_strerror(rc));
    f.pprof_s = now_s() - t0;
    f.hwm_pprof = hwm_bytes();
    f.samples = (double)r.samples;
    f.frames = (double)r.frames;
    f.folded = (double)r.folded;
    f.deeper = (double)r.deeper;
    f.pprof_bytes = (double)r.pprof.len;
    if (r.bytes != st.total || r.objects != st.reachable)
        die("the profile does not add up");
    if (out) {
        struct pprof_buf gz;
        if (pprof_gzip(r.pprof.data, r.pprof.len, &gz) != 0)
            die("gzip");
        FILE *o = fopen(out, "wb");
        if (o == NULL || fwrite(gz.data, 1, gz.len, o) != gz.len || fclose(o) != 0)
            die("%s: %s", out, strerror(errno));
        pprof_buf_free(&gz);
    }
    pprof_buf_free(&r.pprof);
    heapsnap_dom_free(d);
    heapsnap_free(s);
    printf("%.0f %.0f %.0f %.6f %.6f %.6f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f "
           "%.0f %.0f\n",
           f.nodes, f.edges, f.strings, f.parse_s, f.dom_s, f.pprof_s, f.snap_bytes, f.dom_need,
           f.dom_bytes, f.hwm0, f.hwm_parse, f.hwm_dom, f.hwm_pprof, f.reachable, f.samples,
           f.frames, f.folded, f.deeper, f.pprof_bytes);
    return 0;
}

/* What the child is to do: the phases with edges in memory or spilled,
 * or the budgeted conversion. */
enum mode { M_SPILL, M_MEMORY, M_BUDGET };
static const char *const mode_names[] = {"spill", "memory", "budget"};

/* Runs the child on file; its figures into *f (with M_BUDGET its line
 * into line). */
static void measure(const char *file, size_t chunk, enum mode mode, size_t budget, const char *out,
                    struct figures *f, char *line, size_t linecap)
{
    int fds[2];
    if (pipe(fds) != 0)
        die("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        char cs[32], bs[32];
        snprintf(cs, sizeof(cs), "%zu", chunk);
        snprintf(bs, sizeof(bs), "%zu", budget);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execl("/proc/self/exe", "bench_heapsnap", "--child", file, cs, mode_names[mode], bs, out,
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *r = fdopen(fds[0], "r");
    line[0] = '\0';
    if (r == NULL || fgets(line, (int)linecap, r) == NULL)
        line[0] = '\0';
    if (r)
        fclose(r);
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("the measuring process failed");
    if (mode == M_BUDGET)
        return;
    if (sscanf(line, "%lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf",
               &f->nodes, &f->edges, &f->strings, &f->parse_s, &f->dom_s, &f->pprof_s,
               &f->snap_bytes, &f->dom_need, &f->dom_bytes, &f->hwm0, &f->hwm_parse, &f->hwm_dom,
               &f->hwm_pprof, &f->reachable, &f->samples, &f->frames, &f->folded, &f->deeper,
               &f->pprof_bytes) != 19)
        die("the measuring process said: %s", line);
}

static int cmp_dbl(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_dbl);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void report(const char *what, double file_bytes, const struct figures *runs, size_t reps)
{
    double parse[32], dom[32], prof[32];
    for (size_t i = 0; i < reps; i++) {
        parse[i] = runs[i].parse_s;
        dom[i] = runs[i].dom_s;
        prof[i] = runs[i].pprof_s;
    }
    const struct figures *f = &runs[0];
    double per = 1e6 / f->nodes; /* to per million nodes */
    double mp = median(parse, reps), md = median(dom, reps), mq = median(prof, reps);
    printf("\n%s: %.0f nodes, %.0f edges (%.2f a node), %.0f strings, %.1f MiB of JSON\n", what,
           f->nodes, f->edges, f->edges / f->nodes, f->strings, file_bytes / MIB);
    printf("  %-28s %10s %16s\n", "phase (median of runs)", "seconds", "per M nodes");
    printf("  %-28s %10.3f %13.3f s   (%.0f MB/s of JSON)\n", "parse (64 KiB chunks)", mp, mp * per,
           file_bytes / MIB / mp);
    printf("  %-28s %10.3f %13.3f s\n", "dominators + retained", md, md * per);
    printf("  %-28s %10.3f %13.3f s\n", "retained pprof", mq, mq * per);
    printf("  %-28s %10.3f %13.3f s\n", "total", mp + md + mq, (mp + md + mq) * per);
    printf("  memory, by the structures' own count:      MiB   per M nodes\n");
    printf("  %-36s %8.1f %10.1f MiB\n", "snapshot (heapsnap_bytes)", f->snap_bytes / MIB,
           f->snap_bytes / MIB * per);
    printf("  %-36s %8.1f %10.1f MiB\n", "dominators working set (need)", f->dom_need / MIB,
           f->dom_need / MIB * per);
    printf("  %-36s %8.1f %10.1f MiB\n", "dominator result", f->dom_bytes / MIB,
           f->dom_bytes / MIB * per);
    printf("  peak RSS of the process (VmHWM), above its start (%.1f MiB):\n", f->hwm0 / MIB);
    printf("  %-36s %8.1f %10.1f MiB\n", "after the parse", (f->hwm_parse - f->hwm0) / MIB,
           (f->hwm_parse - f->hwm0) / MIB * per);
    printf("  %-36s %8.1f %10.1f MiB\n", "after the dominators", (f->hwm_dom - f->hwm0) / MIB,
           (f->hwm_dom - f->hwm0) / MIB * per);
    printf("  %-36s %8.1f %10.1f MiB\n", "after the pprof (the peak)",
           (f->hwm_pprof - f->hwm0) / MIB, (f->hwm_pprof - f->hwm0) / MIB * per);
    printf("  profile: %.0f of %.0f nodes reachable, %.0f samples, %.0f frames, %.0f nodes "
           "folded by the caps, %.0f under (deeper); %.1f KiB\n",
           f->reachable, f->nodes, f->samples, f->frames, f->folded, f->deeper,
           f->pprof_bytes / 1024);
}

/* The budgeted conversion's figures, from the child's line. */
static void report_budget(const char *what, double file_bytes, size_t budget, const char *line)
{
    double hwm0, hwm, secs, objects, samples, plen;
    if (budget)
        printf("\n%s, %.1f MiB of JSON, within a budget of %.0f MiB:\n", what, file_bytes / MIB,
               (double)budget / MIB);
    else
        printf("\n%s, %.1f MiB of JSON, the daemon's conversion without a budget:\n", what,
               file_bytes / MIB);
    if (sscanf(line, "converted %lf %lf %lf %lf %lf %lf", &hwm0, &hwm, &secs, &objects, &samples,
               &plen) == 6) {
        printf("  converted in %.3f s: %.0f objects, %.0f samples, %.1f KiB of pprof\n", secs,
               objects, samples, plen / 1024);
        printf("  peak RSS (VmHWM) %.1f MiB, %.1f MiB above the process's start (%.1f MiB)\n",
               hwm / MIB, (hwm - hwm0) / MIB, hwm0 / MIB);
    } else if (sscanf(line, "refused %lf %lf", &hwm0, &hwm) == 2) {
        const char *why = line;
        for (int k = 0; k < 3 && why; k++)
            why = strchr(why, ' ') ? strchr(why, ' ') + 1 : NULL;
        printf("  refused: %s", why ? why : "\n");
        printf("  peak RSS (VmHWM) %.1f MiB, %.1f MiB above the process's start (%.1f MiB)\n",
               hwm / MIB, (hwm - hwm0) / MIB, hwm0 / MIB);
    } else {
        die("the measuring process said: %s", line);
    }
}

static void run(const char *what, const char *path, double bytes, size_t chunk, enum mode mode,
                size_t budget, const char *out, size_t reps)
{
    struct figures runs[32];
    char line[1024];
    if (mode == M_BUDGET) {
        measure(path, chunk, mode, budget, NULL, &runs[0], line, sizeof(line));
        report_budget(what, bytes, budget, line);
        return;
    }
    for (size_t r = 0; r < reps; r++)
        measure(path, chunk, mode, 0, r == 0 ? out : NULL, &runs[r], line, sizeof(line));
    report(what, bytes, runs, reps);
}

int main(int argc, char **argv)
{
    if (argc >= 6 && strcmp(argv[1], "--child") == 0) {
        size_t chunk = (size_t)strtoull(argv[3], NULL, 10);
        if (strcmp(argv[4], "budget") == 0)
            return child_budget(argv[2], chunk, (size_t)strtoull(argv[5], NULL, 10));
        return child(argv[2], chunk, strcmp(argv[4], "spill") == 0, argc > 6 ? argv[6] : NULL);
    }
    if (argc == 4 && strcmp(argv[1], "--generate") == 0) {
        uint64_t edges;
        uint64_t bytes = generate(argv[3], (uint32_t)strtoul(argv[2], NULL, 10), &edges);
        printf("%s: %" PRIu64 " bytes, %" PRIu64 " edges\n", argv[3], bytes, edges);
        return 0;
    }
    uint32_t sizes[MAX_SIZES];
    size_t nsizes = 0, reps = 3, chunk = 65536, budget = 0;
    const char *file = NULL, *out = NULL;
    bool keep = false;
    enum mode mode = M_SPILL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--nodes") == 0 && i + 1 < argc && nsizes < MAX_SIZES)
            sizes[nsizes++] = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc)
            chunk = strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--file") == 0 && i + 1 < argc)
            file = argv[++i];
        else if (strcmp(argv[i], "--pprof") == 0 && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--keep") == 0)
            keep = true;
        else if (strcmp(argv[i], "--in-memory") == 0)
            mode = M_MEMORY;
        else if (strcmp(argv[i], "--budget") == 0 && i + 1 < argc) {
            mode = M_BUDGET;
            budget = (size_t)(strtod(argv[++i], NULL) * MIB);
        } else
            die("usage: bench_heapsnap [--nodes N]... [--reps R] [--chunk BYTES] [--keep] "
                "[--in-memory | --budget MIB] | --file SNAPSHOT [--pprof OUT.pb.gz] | "
                "--generate N FILE");
    }
    if (reps < 1 || reps > 32 || chunk < 1)
        die("--reps is 1 to 32, --chunk at least 1");
    if (nsizes == 0) {
        sizes[nsizes++] = 100000;
        sizes[nsizes++] = 1000000;
    }
    if (file) {
        FILE *fp = fopen(file, "rb");
        if (fp == NULL)
            die("%s: %s", file, strerror(errno));
        fseek(fp, 0, SEEK_END);
        double bytes = (double)ftell(fp);
        fclose(fp);
        run(file, file, bytes, chunk, mode, budget, out, reps);
        if (out && mode != M_BUDGET)
            printf("  retained profile written to %s\n", out);
        return 0;
    }
    const char *base = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/bench-heapsnap-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(dir) == NULL)
        die("mkdtemp: %s", strerror(errno));
    for (size_t k = 0; k < nsizes; k++) {
        char path[640], what[96];
        snprintf(path, sizeof(path), "%s/synthetic-%u.heapsnapshot", dir, sizes[k]);
        uint64_t edges;
        double t0 = now_s();
        uint64_t bytes = generate(path, sizes[k], &edges);
        fprintf(stderr, "generated %s (%.1f MiB, %" PRIu64 " edges) in %.1f s\n", path,
                (double)bytes / MIB, edges, now_s() - t0);
        snprintf(what, sizeof(what), "synthetic, %u nodes%s", sizes[k],
                 mode == M_MEMORY  ? " (in memory)"
                 : mode == M_SPILL ? " (edges spilled)"
                                   : "");
        run(what, path, (double)bytes, chunk, mode, budget, NULL, reps);
        if (!keep)
            remove(path);
    }
    if (!keep)
        rmdir(dir);
    else
        printf("\nkept %s\n", dir);
    return 0;
}

/*
 * bench_srcmap - what mapping frames through source maps costs a CPU
 * window's conversion, in time and in memory: agent/srcmap/ (parse,
 * lookup, the cache and its sessions) wired into pprof_from_cpu_json as
 * the daemon wires it (agent/daemon/writer.c, conv_map: copied below).
 *
 * It generates, in a temp dir, two scripts with their maps, each of the
 * shape a real build gives:
 *   bundle  an esbuild-like minified bundle: one line of N functions, a
 *           linked v3 map of about --map-mb MB with names (one per
 *           renamed identifier), ~1,500 sources, sourcesContent, and a
 *           segment every 5 or so bytes of code;
 *   tsc     tsc-like output: one statement a line, hundreds of thousands
 *           of lines, 2 to 4 segments a line, no names, no sourcesContent;
 * and for each a CPU profile (CDP JSON) of --nodes nodes whose frames are
 * --funcs distinct functions of the script at their starts (line and
 * column of the '(' as V8 gives them), plus (root), (program), (garbage
 * collector), (idle) and node:internal frames.
 *
 * Every function start is first looked up in the parsed map and must give
 * the function's original name (bundle) or line (tsc): a check of the
 * generator and of srcmap_lookup, not a timing.
 *
 * Then, the variants interleaved rep by rep (a b c, b c a, c a b, ...):
 *   a  pprof_from_cpu_json without a mapper;
 *   b  with the mapper over a warm cache (the map already parsed and
 *      held): a session per window, as the daemon opens one per
 *      conversion, so the script's and the map's stat are in it;
 *   c  with a new cache each time: the first window after a start or a
 *      deploy, which reads, parses and indexes the map (from the page
 *      cache: the file was just written).
 * It reports each variant's median, the per-rep ratios b/a and c/a, and
 * b - a per mapper call and per distinct frame. Beside them:
 * srcmap_parse's throughput on the text in memory (the JSON pass and the
 * index pass apart), the JSON pass again fed in 64 KiB pieces as
 * resolve.c reads a map file, srcmap_lookup's cost at random positions of
 * the generated code and at function starts, and the peak RSS (VmHWM) of
 * a fresh process (this program re-executed, so nothing of the generation
 * counts) that converts --windows windows without maps, with the map
 * under the default 32 MiB budget, and under budgets of 8 MiB (which holds
 * the bundle's ~6 MiB parsed map) and 4 MiB (which refuses it); against
 * srcmap_bytes. A map the 32 MiB budget refuses (a large --tsc-mb) is
 * reported as such: (b) and (c) then time the refusal.
 *
 * It measures and asserts nothing about time; it exits non-zero only when
 * something does not work (a conversion fails, a function start maps
 * wrong).
 *
 * Usage:
 *   bench_srcmap [--map-mb 20] [--tsc-mb 8] [--nodes 20000] [--funcs 5000]
 *                [--reps 15] [--lookups 1000000] [--windows 5]
 *                [--json FILE] [--keep]
 *       the whole benchmark; --keep leaves the temp dir (its path printed).
 *       --callgrind adds instruction counts of the conversion with and
 *       without a mapper, of srcmap_lookup and of srcmap_parse (valgrind's
 *       callgrind: the same from run to run however busy the machine; see
 *       "instruction counts" below for why its mapper is a direct one).
 *   bench_srcmap --write DIR [--map-mb 20] [--busy-ms 3] [--every-ms 10]
 *       writes DIR/bundle.js and DIR/bundle.js.map and prints one JSON
 *       line describing them, for tests/bench/bench_srcmap.js. `node
 *       DIR/bundle.js` runs: every --every-ms it spends --busy-ms in its
 *       hot function HOT (large, so V8 never inlines it) and in calls to
 *       the bundle's small functions through a table.
 *   bench_srcmap --rss-child MODE BUDGET URL PROFILE WINDOWS
 *       internal: one fresh process's conversions (MODE none or map),
 *       printing its figures on one line.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "pprof.h"
#include "resolve.h"
#include "srcmap.h"

#define MIB (1024.0 * 1024.0)
#define GEN_MAX ((size_t)1 << 30)     /* cap of every generation buffer */
#define RESOLVE_CHUNK ((size_t)65536) /* resolve.c's READ_CHUNK: how it feeds a map file */

static struct isoprof_rng rng;
static uint32_t rnd(uint32_t n)
{
    return (uint32_t)(isoprof_rng_next(&rng) % n);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench_srcmap: ", stderr);
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

static int cmp_dbl(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* The median of v[0..n) (sorts a copy). */
static double median(const double *v, size_t n)
{
    double *c = isoprof_malloc(n * sizeof(*c));
    if (c == NULL)
        die("out of memory");
    memcpy(c, v, n * sizeof(*c));
    qsort(c, n, sizeof(*c), cmp_dbl);
    double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    isoprof_free(c);
    return m;
}

static double vmin(const double *v, size_t n)
{
    double m = v[0];
    for (size_t i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static double vmax(const double *v, size_t n)
{
    double m = v[0];
    for (size_t i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* --- the generator ------------------------------------------------------ */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static const char *const verbs[] = {"handle",  "parse",  "render",   "load",     "build",
                                    "resolve", "create", "update",   "format",   "validate",
                                    "compute", "fetch",  "merge",    "encode",   "decode",
                                    "apply",   "select", "register", "dispatch", "normalize"};
static const char *const nouns[] = {
    "Request", "Header", "Route",  "Session", "Token",   "Buffer", "Stream", "Query",   "Record",
    "Config",  "Plugin", "Module", "Node",    "Element", "Style",  "Event",  "Handler", "Cache",
    "Index",   "Schema", "Field",  "Value",   "Option",  "Result", "Payload"};
#define NVERBS (sizeof(verbs) / sizeof(verbs[0]))
#define NNOUNS (sizeof(nouns) / sizeof(nouns[0]))
/* the parameters' original names */
static const char *const pool[] = {
    "value", "options", "index",  "count",  "input", "result", "state", "context", "node",  "key",
    "item",  "data",    "offset", "length", "size",  "flags",  "mode",  "level",   "depth", "total",
    "prev",  "next",    "start",  "end",    "limit", "weight", "score", "hash",    "seed",  "step"};
#define NPOOL (sizeof(pool) / sizeof(pool[0]))
static const char *const comments[] = {
    "/**\n * Returns the value for the given options, or the input unchanged.\n */\n",
    "// Fast path: the common case first.\n",
    ("/**\n * Folds the record into the running state.\n *\n * @param value the record\n"
     " * @param options how to fold it\n */\n"),
    "",
    "",
};

/* A function of the script, as a profile frame points at it. */
struct fn {
    uint32_t k;     /* its number: the minified and original names derive from it */
    char kind;      /* 's' small, 'h' the hot one, 'r' the driver */
    uint32_t line;  /* 0-based generated line of its '(' */
    uint32_t col;   /* 0-based generated column of its '(' */
    uint32_t oline; /* 0-based original line of its header */
};

struct gen {
    bool multiline;    /* tsc: a statement a line, original names kept */
    bool with_names;   /* the map has names (a bundler renames) */
    bool with_content; /* the map has sourcesContent */
    struct isoprof_buf js, mappings, names, sources, contents, cur;
    uint32_t gline, gcol, oline, ocol;
    int32_t src;
    uint32_t nsources, nnames;
    int32_t pg, ps, pl, pc, pn; /* the VLQ deltas' bases */
    bool line_first;
    size_t nsegs;
    int32_t pool_name[NPOOL];
    struct fn *fns;
    size_t nfns, fncap;
};

static void gen_init(struct gen *g, bool multiline)
{
    memset(g, 0, sizeof(*g));
    g->multiline = multiline;
    g->with_names = !multiline;
    g->with_content = !multiline;
    struct isoprof_buf *bufs[] = {&g->js,      &g->mappings, &g->names,
                                  &g->sources, &g->contents, &g->cur};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        isoprof_buf_init(bufs[i], GEN_MAX);
    g->src = -1;
    g->line_first = true;
    for (size_t i = 0; i < NPOOL; i++)
        g->pool_name[i] = -1;
}

static void gen_free(struct gen *g)
{
    struct isoprof_buf *bufs[] = {&g->js,      &g->mappings, &g->names,
                                  &g->sources, &g->contents, &g->cur};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        isoprof_buf_free(bufs[i]);
    isoprof_free(g->fns);
}

static void vlq(struct isoprof_buf *b, int32_t v)
{
    uint32_t u = v < 0 ? ((uint32_t)(-(int64_t)v) << 1) | 1 : (uint32_t)v << 1;
    do {
        uint32_t d = u & 31;
        u >>= 5;
        if (u)
            d |= 32;
        isoprof_buf_putc(b, B64[d]);
    } while (u);
}

/* s as a JSON string (the few escapes generated text needs). */
static void json_str(struct isoprof_buf *b, const char *s, size_t n)
{
    isoprof_buf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n')
            isoprof_buf_append(b, "\\n", 2);
        else if (s[i] == '"' || s[i] == '\\')
            isoprof_buf_putc(b, '\\'), isoprof_buf_putc(b, s[i]);
        else
            isoprof_buf_putc(b, s[i]);
    }
    isoprof_buf_putc(b, '"');
}

#define NOSEG (-2)  /* a piece with no segment */
#define NONAME (-1) /* a segment with no name */

/* A segment at the current generated position, to the current original one. */
static void seg(struct gen *g, int32_t name)
{
    struct isoprof_buf *m = &g->mappings;
    if (!g->line_first)
        isoprof_buf_putc(m, ',');
    g->line_first = false;
    vlq(m, (int32_t)g->gcol - g->pg);
    g->pg = (int32_t)g->gcol;
    vlq(m, g->src - g->ps);
    g->ps = g->src;
    vlq(m, (int32_t)g->oline - g->pl);
    g->pl = (int32_t)g->oline;
    vlq(m, (int32_t)g->ocol - g->pc);
    g->pc = (int32_t)g->ocol;
    if (name >= 0 && g->with_names) {
        vlq(m, name - g->pn);
        g->pn = name;
    }
    g->nsegs++;
}

static void gtext(struct gen *g, const char *s)
{
    size_t n = strlen(s);
    isoprof_buf_append(&g->js, s, n);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n') {
            isoprof_buf_putc(&g->mappings, ';');
            g->gline++;
            g->gcol = 0;
            g->pg = 0;
            g->line_first = true;
        } else {
            g->gcol++;
        }
    }
}

static void otext(struct gen *g, const char *s)
{
    size_t n = strlen(s);
    if (g->with_content)
        isoprof_buf_append(&g->cur, s, n);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n') {
            g->oline++;
            g->ocol = 0;
        } else {
            g->ocol++;
        }
    }
}

/* A piece of code: a segment (unless NOSEG), then its generated and its
 * original text. */
static void piece(struct gen *g, int32_t name, const char *gen, const char *orig)
{
    if (name != NOSEG)
        seg(g, name);
    gtext(g, gen);
    otext(g, orig);
}

static void flush_source(struct gen *g)
{
    if (g->src < 0 || !g->with_content)
        return;
    if (g->src > 0)
        isoprof_buf_putc(&g->contents, ',');
    json_str(&g->contents, g->cur.data ? g->cur.data : "", g->cur.len);
    isoprof_buf_reset(&g->cur);
}

static void begin_source(struct gen *g, const char *path)
{
    flush_source(g);
    if (g->nsources)
        isoprof_buf_putc(&g->sources, ',');
    json_str(&g->sources, path, strlen(path));
    g->src = (int32_t)g->nsources++;
    g->oline = g->ocol = 0;
}

static int32_t add_name(struct gen *g, const char *s)
{
    if (!g->with_names)
        return NONAME;
    if (g->nnames)
        isoprof_buf_putc(&g->names, ',');
    json_str(&g->names, s, strlen(s));
    return (int32_t)g->nnames++;
}

static int32_t pool_name(struct gen *g, size_t w)
{
    if (g->pool_name[w] < 0 && g->with_names)
        g->pool_name[w] = add_name(g, pool[w]);
    return g->with_names ? g->pool_name[w] : NONAME;
}

/* The minified name of function k: [A-Z][0-9][0-9a-z]*, never a keyword nor
 * a global. */
static void mini_name(uint32_t k, char *out, size_t cap)
{
    char tail[16] = "";
    size_t n = 0;
    for (uint32_t v = k / 260; v; v /= 36)
        tail[n++] = "0123456789abcdefghijklmnopqrstuvwxyz"[v % 36];
    tail[n] = '\0';
    snprintf(out, cap, "%c%c%s", 'A' + (int)(k % 26), '0' + (int)((k / 26) % 10), tail);
}

/* The original name of function k: handleRequest, parseHeader3... */
static void orig_name(uint32_t k, char *out, size_t cap)
{
    uint32_t gen = k / (uint32_t)(NVERBS * NNOUNS);
    if (gen)
        snprintf(out, cap, "%s%s%" PRIu32, verbs[k % NVERBS], nouns[(k / NVERBS) % NNOUNS], gen);
    else
        snprintf(out, cap, "%s%s", verbs[k % NVERBS], nouns[(k / NVERBS) % NNOUNS]);
}

static void add_fn(struct gen *g, uint32_t k, char kind, uint32_t oline)
{
    if (g->nfns == g->fncap) {
        size_t nc = g->fncap ? g->fncap * 2 : 1024;
        struct fn *f = isoprof_realloc(g->fns, nc * sizeof(*f));
        if (f == NULL)
            die("out of memory");
        g->fns = f;
        g->fncap = nc;
    }
    g->fns[g->nfns++] = (struct fn){k, kind, g->gline, g->gcol, oline};
}

/* "@" is the first parameter's name, "#" the second's. */
static void subst(const char *t, const char *p0, const char *p1, char *out, size_t cap)
{
    size_t n = 0;
    for (; *t && n + 32 < cap; t++) {
        const char *r = *t == '@' ? p0 : *t == '#' ? p1 : NULL;
        if (r) {
            size_t l = strlen(r);
            memcpy(out + n, r, l);
            n += l;
        } else {
            out[n++] = *t;
        }
    }
    out[n] = '\0';
}

/* The statements of a small function: pieces of (segment, minified code,
 * original code). seg '0' and '1': a segment named after a parameter; 's':
 * a segment without a name; 0: none. */
struct tpl {
    char seg;
    const char *gen, *orig;
};
static const struct tpl stmts[][8] = {
    {{'0', "a", "@"}, {0, "=", " = "}, {'s', "a*31+b|0", "(@ * 31 + #) | 0"}, {0, ";", ";"}},
    {{'s', "if(", "if ("},
     {'0', "a", "@"},
     {0, "%7===0)", " % 7 === 0) "},
     {'1', "b", "#"},
     {0, "^=", " ^= "},
     {'0', "a", "@"},
     {0, ";", ";"}},
    {{'1', "b", "#"}, {0, "=", " = "}, {'s', "b+(a>>3)|0", "(# + (@ >> 3)) | 0"}, {0, ";", ";"}},
    {{'0', "a", "@"}, {0, "^=", " ^= "}, {'1', "b<<1", "# << 1"}, {0, ";", ";"}},
    {{'1', "b", "#"},
     {0, "=", " = "},
     {'s', "(b*17+a)%1000003", "(# * 17 + @) % 1000003"},
     {0, ";", ";"}},
};
#define NSTMTS (sizeof(stmts) / sizeof(stmts[0]))

static void tpl_emit(struct gen *g, const struct tpl *t, size_t n, const char *p0, const char *p1,
                     int32_t n0, int32_t n1)
{
    char o[256], m[256];
    for (size_t i = 0; i < n && t[i].gen; i++) {
        int32_t name = t[i].seg == '0' ? n0 : t[i].seg == '1' ? n1 : t[i].seg ? NONAME : NOSEG;
        subst(t[i].orig, p0, p1, o, sizeof(o));
        /* tsc keeps the names and the spacing: its code is the original's */
        if (!g->multiline)
            subst(t[i].gen, "a", "b", m, sizeof(m));
        piece(g, name, g->multiline ? o : m, o);
    }
}

/* One small function: function A0(a,b){...} */
static void small_fn(struct gen *g, uint32_t k)
{
    char mn[24], on[48], hdr[80];
    mini_name(k, mn, sizeof(mn));
    orig_name(k, on, sizeof(on));
    size_t w0 = rnd(NPOOL), w1 = (w0 + 1 + rnd(NPOOL - 1)) % NPOOL;
    const char *p0 = pool[w0], *p1 = pool[w1];
    int32_t n0 = pool_name(g, w0), n1 = pool_name(g, w1);
    int32_t nf = add_name(g, on);
    otext(g, comments[rnd(sizeof(comments) / sizeof(comments[0]))]);
    uint32_t oline = g->oline;
    piece(g, NONAME, "function ", "export function ");
    piece(g, nf, g->multiline ? on : mn, on);
    add_fn(g, k, 's', oline);
    piece(g, NOSEG, "(", "(");
    piece(g, n0, g->multiline ? p0 : "a", p0);
    piece(g, NOSEG, g->multiline ? ", " : ",", ": number, ");
    piece(g, n1, g->multiline ? p1 : "b", p1);
    piece(g, NOSEG, g->multiline ? ") {" : "){", ": number): number {");
    for (uint32_t i = 0, n = 3 + rnd(12); i < n; i++) {
        piece(g, NOSEG, g->multiline ? "\n    " : "", "\n  ");
        tpl_emit(g, stmts[rnd(NSTMTS)], 8, p0, p1, n0, n1);
    }
    piece(g, NOSEG, g->multiline ? "\n    " : "", "\n  ");
    snprintf(hdr, sizeof(hdr), "%s ^ %s", p0, p1);
    piece(g, NONAME, "return ", "return ");
    piece(g, n0, g->multiline ? hdr : "a^b", hdr);
    piece(g, NOSEG, g->multiline ? ";\n}\n" : "}", ";\n}\n\n");
}

/* The hot function: a loop with enough branches that its bytecode passes
 * TurboFan's inlining limit (460 bytes), so it keeps its own frame. */
static const int primes[] = {19, 23, 29, 31, 37, 41, 43,  47,  53,  59,  61, 67,
                             71, 73, 79, 83, 89, 97, 101, 103, 107, 109, 113};

static void hot_fn(struct gen *g)
{
    char a[160], b[160];
    begin_source(g, "../src/core/checksum.ts");
    otext(g, "// The CPU-heavy part: a checksum over the batch, round by round.\n\n");
    uint32_t oline = g->oline;
    piece(g, NONAME, "function ", "export function ");
    piece(g, add_name(g, "checksumHot"), "HOT", "checksumHot");
    add_fn(g, 0, 'h', oline);
    piece(g, NOSEG, "(", "(");
    piece(g, add_name(g, "data"), "d", "data");
    piece(g, NOSEG, ",", ": number[], ");
    piece(g, add_name(g, "rounds"), "n", "rounds");
    piece(g, NOSEG, "){", "): number {\n  ");
    piece(g, NONAME, "let c=0;", "let acc = 0;\n  ");
    piece(g, NONAME, "for(let r=0;r<n;r++)", "for (let r = 0; r < rounds; r++) {\n    ");
    piece(g, NONAME, "for(let i=0;i<d.length;i++){",
          "for (let i = 0; i < data.length; i++) {\n      ");
    piece(g, NONAME, "c=(c*31+d[i]*(r+1))%1000003;",
          "acc = (acc * 31 + data[i] * (r + 1)) % 1000003;\n      ");
    piece(g, NONAME, "if(c%7===0)c^=i;", "if (acc % 7 === 0) acc ^= i;\n      ");
    piece(g, NONAME, "else if(c%11===0)c+=r;", "else if (acc % 11 === 0) acc += r;\n      ");
    piece(g, NONAME, "else if(c%13===0)c-=i&3;", "else if (acc % 13 === 0) acc -= i & 3;\n      ");
    piece(g, NONAME, "else if(c%17===0)c=(c<<1)%1000003;",
          "else if (acc % 17 === 0) acc = (acc << 1) % 1000003;\n      ");
    for (size_t i = 0; i < sizeof(primes) / sizeof(primes[0]); i++) {
        snprintf(a, sizeof(a), "else if(c%%%d===0)c=(c+%zu*i)%%1000003;", primes[i], i + 3);
        snprintf(b, sizeof(b),
                 "else if (acc %% %d === 0) acc = (acc + %zu * i) %% 1000003;\n      ", primes[i],
                 i + 3);
        piece(g, NONAME, a, b);
    }
    piece(g, NOSEG, "}", "}\n  }\n  ");
    piece(g, NONAME, "return c}", "return acc;\n}\n");
}

/* The driver: every every_ms, busy_ms in HOT and in calls to the small
 * functions through a table (a megamorphic call: never inlined). */
static void driver(struct gen *g, unsigned busy_ms, unsigned every_ms)
{
    char a[200], b[300];
    begin_source(g, "../src/main.ts");
    otext(g,
          "import * as lib from \"./lib\";\nimport { checksumHot } from \"./core/checksum\";\n\n");
    piece(g, NONAME, "var T=[", "const table = [");
    bool first = true;
    for (size_t i = 0; i < g->nfns; i++) {
        if (g->fns[i].kind != 's')
            continue;
        char mn[24];
        mini_name(g->fns[i].k, mn, sizeof(mn));
        if (!first)
            gtext(g, ",");
        first = false;
        gtext(g, mn);
    }
    piece(g, NOSEG, "];", "...Object.values(lib)];\n");
    piece(g, NONAME, "var D=[];for(let i=0;i<2000;i++)D.push(i*7);",
          "const batch: number[] = [];\nfor (let i = 0; i < 2000; i++) batch.push(i * 7);\n");
    piece(g, NONAME, "let S=0;", "let sum = 0;\n\n");
    uint32_t oline = g->oline;
    piece(g, NONAME, "function ", "function ");
    piece(g, add_name(g, "run"), "RUN", "run");
    add_fn(g, 0, 'r', oline);
    piece(g, NOSEG, "(){", "(): void {\n  ");
    snprintf(a, sizeof(a), "const t=Date.now();while(Date.now()-t<%u){", busy_ms);
    snprintf(b, sizeof(b), "const t = Date.now();\n  while (Date.now() - t < %u) {\n    ", busy_ms);
    piece(g, NONAME, a, b);
    piece(g, NONAME, "S=HOT(D,2)+S|0;", "sum = (checksumHot(batch, 2) + sum) | 0;\n    ");
    piece(g, NONAME, "for(let k=0;k<300;k++)S=T[(S>>>0)%T.length](S,k)|0}}",
          "for (let k = 0; k < 300; k++) sum = table[(sum >>> 0) % table.length](sum, k) | 0;\n"
          "  }\n}\n\n");
    snprintf(a, sizeof(a), "setInterval(RUN,%u);", every_ms);
    snprintf(b, sizeof(b), "setInterval(run, %u);\n", every_ms);
    piece(g, NONAME, a, b);
}

static const char *const dirs[] = {"api", "core", "util", "render", "store", "net", "auth", "db"};

/* Generates a script and its map of about map_bytes (the map file). */
static void generate(struct gen *g, bool multiline, size_t map_bytes, unsigned busy_ms,
                     unsigned every_ms)
{
    gen_init(g, multiline);
    if (!multiline)
        gtext(g, "\"use strict\";");
    uint32_t k = 0, left = 0;
    bool hot = multiline;
    for (;;) {
        size_t est = g->mappings.len + g->names.len + g->sources.len + g->contents.len +
                     g->cur.len + g->cur.len / 8;
        if (est >= map_bytes)
            break;
        if (!hot && est >= map_bytes / 2) {
            hot_fn(g);
            hot = true;
            left = 0;
        }
        if (left == 0) {
            /* a new module: ~20 functions, from the app or a dependency */
            char path[128];
            uint32_t s = g->nsources;
            if (rnd(10) < 3)
                snprintf(path, sizeof(path), "../src/%s/%s%s.ts", dirs[s % 8], verbs[s % NVERBS],
                         nouns[(s / 3) % NNOUNS]);
            else
                snprintf(path, sizeof(path), "../node_modules/%s-%s/lib/%s%" PRIu32 ".ts",
                         verbs[(s / 7) % NVERBS], nouns[s % NNOUNS], verbs[(s / 2) % NVERBS], s);
            begin_source(g, path);
            left = 1 + rnd(40);
        }
        small_fn(g, k++);
        left--;
    }
    if (!multiline)
        driver(g, busy_ms, every_ms);
    flush_source(g);
    gtext(g, "\n");
}

static void write_file(const char *path, const void *a, size_t an, const void *b, size_t bn)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(a, 1, an, f) != an || (bn && fwrite(b, 1, bn, f) != bn) ||
        fclose(f) != 0)
        die("%s: %s", path, strerror(errno));
}

/* The script (with its sourceMappingURL comment) and its map, into dir.
 * Returns the map file's size. */
static size_t write_pair(struct gen *g, const char *dir, const char *base, char *script, size_t cap,
                         size_t *script_bytes)
{
    int bad =
        g->js.err | g->mappings.err | g->names.err | g->sources.err | g->contents.err | g->cur.err;
    if (bad)
        die("generation: %s", isoprof_strerror(bad));
    char mapname[128], mappath[4096], tail[192];
    snprintf(mapname, sizeof(mapname), "%s.map", base);
    snprintf(script, cap, "%s/%s", dir, base);
    snprintf(mappath, sizeof(mappath), "%s/%s", dir, mapname);
    int tn = snprintf(tail, sizeof(tail), "//# sourceMappingURL=%s\n", mapname);
    write_file(script, g->js.data, g->js.len, tail, (size_t)tn);
    *script_bytes = g->js.len + (size_t)tn;
    FILE *f = fopen(mappath, "wb");
    if (f == NULL)
        die("%s: %s", mappath, strerror(errno));
    fprintf(f, "{\"version\":3,\"file\":\"%s\",\"sources\":[", base);
    fwrite(g->sources.data, 1, g->sources.len, f);
    if (g->with_content) {
        fputs("],\"sourcesContent\":[", f);
        fwrite(g->contents.data, 1, g->contents.len, f);
    }
    fputs("],\"mappings\":\"", f);
    fwrite(g->mappings.data, 1, g->mappings.len, f);
    fputs("\",\"names\":[", f);
    if (g->names.len)
        fwrite(g->names.data, 1, g->names.len, f);
    fputs("]}\n", f);
    long size = ftell(f);
    if (ferror(f) || fclose(f) != 0 || size < 0)
        die("%s: write failed", mappath);
    return (size_t)size;
}

/* --- the profile ------------------------------------------------------ */

struct frame {
    const char *fname;
    const char *url;
    int32_t line, col;
    char name[24];
};

struct profile {
    char *json;
    size_t len;
    size_t nodes, samples;
    size_t distinct;     /* distinct frames, (root) included */
    size_t script_nodes; /* nodes whose frame is in the script */
};

/*
 * A CPU profile of `nodes` nodes over `funcs` distinct functions of the
 * script (url), the shape of V8's: a call tree rooted at (root), ids that
 * are not 1..N, samples whose count is sum(hitCount) + 1.
 */
static void gen_profile(const struct gen *g, const char *url, size_t nodes, size_t funcs,
                        struct profile *p)
{
    static const char *const internal[] = {"processTimers", "listOnTimeout"};
    size_t nsmall = 0;
    for (size_t i = 0; i < g->nfns; i++)
        nsmall += g->fns[i].kind == 's';
    if (funcs > nsmall)
        funcs = nsmall;
    /* the distinct script functions: a random sample, plus HOT and RUN */
    size_t nfr = 6 + funcs + 2;
    struct frame *fr = isoprof_calloc(nfr, sizeof(*fr));
    uint32_t *pick = isoprof_malloc(g->nfns * sizeof(*pick));
    if (fr == NULL || pick == NULL)
        die("out of memory");
    size_t np = 0;
    for (size_t i = 0; i < g->nfns; i++)
        if (g->fns[i].kind == 's')
            pick[np++] = (uint32_t)i;
    for (size_t i = 0; i < funcs; i++) { /* partial Fisher-Yates */
        size_t j = i + rnd((uint32_t)(np - i));
        uint32_t t = pick[i];
        pick[i] = pick[j];
        pick[j] = t;
    }
    fr[0] = (struct frame){"(root)", "", -1, -1, ""};
    fr[1] = (struct frame){"(program)", "", -1, -1, ""};
    fr[2] = (struct frame){"(garbage collector)", "", -1, -1, ""};
    fr[3] = (struct frame){"(idle)", "", -1, -1, ""};
    fr[4] = (struct frame){internal[0], "node:internal/timers", 511, 24, ""};
    fr[5] = (struct frame){internal[1], "node:internal/timers", 531, 24, ""};
    size_t nf = 6;
    for (size_t i = 0; i < g->nfns; i++) {
        if (g->fns[i].kind == 'h' || g->fns[i].kind == 'r') {
            fr[nf] = (struct frame){NULL, url, (int32_t)g->fns[i].line, (int32_t)g->fns[i].col, ""};
            snprintf(fr[nf].name, sizeof(fr[nf].name), "%s", g->fns[i].kind == 'h' ? "HOT" : "RUN");
            fr[nf].fname = fr[nf].name;
            nf++;
        }
    }
    size_t first_small = nf;
    for (size_t i = 0; i < funcs; i++) {
        const struct fn *f = &g->fns[pick[i]];
        fr[nf] = (struct frame){NULL, url, (int32_t)f->line, (int32_t)f->col, ""};
        if (g->multiline)
            orig_name(f->k, fr[nf].name, sizeof(fr[nf].name));
        else
            mini_name(f->k, fr[nf].name, sizeof(fr[nf].name));
        fr[nf].fname = fr[nf].name;
        nf++;
    }
    isoprof_free(pick);
    size_t nsmall_fr = nf - first_small;

    /* the tree: (root) -> (program) (gc) (idle), and timers -> the script */
    uint32_t *parent = isoprof_malloc(nodes * sizeof(*parent));
    uint32_t *depth = isoprof_malloc(nodes * sizeof(*depth));
    uint32_t *frame = isoprof_malloc(nodes * sizeof(*frame));
    uint32_t *nkids = isoprof_calloc(nodes, sizeof(*nkids));
    uint32_t *first = isoprof_malloc((nodes + 1) * sizeof(*first));
    uint32_t *kids = isoprof_malloc(nodes * sizeof(*kids));
    uint32_t *hits = isoprof_calloc(nodes, sizeof(*hits));
    if (!parent || !depth || !frame || !nkids || !first || !kids || !hits)
        die("out of memory");
    const size_t fixed = 7; /* root, program, gc, idle, timers, listOnTimeout, entry */
    if (nodes < fixed + nsmall_fr)
        die("--nodes must be at least --funcs + %zu", fixed);
    parent[0] = UINT32_MAX, depth[0] = 0, frame[0] = 0;
    for (uint32_t i = 1; i <= 4; i++)
        parent[i] = 0, depth[i] = 1, frame[i] = i;
    parent[5] = 4, depth[5] = 2, frame[5] = 5;
    /* the script's entry: RUN for the bundle, a small function for tsc */
    parent[6] = 5, depth[6] = 3, frame[6] = first_small > 6 ? 7 : (uint32_t)first_small;
    size_t small_seen = 0, script_nodes = 1;
    for (size_t i = fixed; i < nodes; i++) {
        uint32_t par = rnd(4)
                           ? (uint32_t)(i - 1 - rnd(i - fixed < 8 ? (uint32_t)(i - fixed) + 1 : 8))
                           : (uint32_t)(6 + rnd((uint32_t)(i - 6)));
        if (par < 6 || depth[par] > 40)
            par = (uint32_t)(6 + rnd((uint32_t)(i - 6)));
        uint32_t f;
        if (rnd(20) == 0) {
            f = 4 + rnd(2); /* node:internal, called back from the script */
        } else {
            /* every distinct function once, then any; the hot one often */
            if (small_seen < nsmall_fr)
                f = (uint32_t)(first_small + small_seen++);
            else if (first_small > 6 && rnd(10) == 0)
                f = 6;
            else
                f = (uint32_t)(first_small + rnd((uint32_t)nsmall_fr));
            script_nodes++;
        }
        parent[i] = par;
        depth[i] = depth[par] + 1;
        frame[i] = f;
    }
    if (small_seen < nsmall_fr)
        die("--nodes too small for --funcs");
    for (size_t i = 1; i < nodes; i++)
        nkids[parent[i]]++;
    first[0] = 0;
    for (size_t i = 0; i < nodes; i++)
        first[i + 1] = first[i] + nkids[i];
    memset(nkids, 0, nodes * sizeof(*nkids));
    for (size_t i = 1; i < nodes; i++)
        kids[first[parent[i]] + nkids[parent[i]]++] = (uint32_t)i;
    size_t samples = nodes; /* a busy 1 s window at 50 us, or 20 s at 1 ms */
    /* The samples are drawn twice from the same generator state, once to
     * count hits and once to write them (as bench_convert does). */
    struct isoprof_rng saved = rng;
    for (size_t s = 1; s < samples; s++)
        hits[1 + rnd((uint32_t)nodes - 1)]++;
    struct isoprof_rng after = rng;
    struct isoprof_buf o;
    isoprof_buf_init(&o, GEN_MAX);
#define ID(i) ((unsigned)(i)*3 + 1)
    isoprof_buf_puts(&o, "{\"id\":42,\"result\":{\"profile\":{\"nodes\":[");
    for (size_t i = 0; i < nodes; i++) {
        const struct frame *x = &fr[frame[i]];
        isoprof_buf_printf(
            &o,
            "%s{\"id\":%u,\"callFrame\":{\"functionName\":\"%s\",\"scriptId\":\"%s\","
            "\"url\":\"%s\",\"lineNumber\":%" PRId32 ",\"columnNumber\":%" PRId32
            "},\"hitCount\":%u",
            i ? "," : "", ID(i), x->fname,
            x->url[0] == '\0'  ? "0"
            : x->url[0] == 'n' ? "7"
                               : "91",
            x->url, x->line, x->col, hits[i]);
        if (hits[i])
            isoprof_buf_printf(&o, ",\"positionTicks\":[{\"line\":%" PRId32 ",\"ticks\":%u}]",
                               x->line + 1, hits[i]);
        if (first[i + 1] > first[i]) {
            isoprof_buf_puts(&o, ",\"children\":[");
            for (uint32_t k = first[i]; k < first[i + 1]; k++)
                isoprof_buf_printf(&o, "%s%u", k > first[i] ? "," : "", ID(kids[k]));
            isoprof_buf_putc(&o, ']');
        }
        isoprof_buf_putc(&o, '}');
    }
    isoprof_buf_printf(&o, "],\"startTime\":5017309000,\"endTime\":%" PRIu64 ",\"samples\":[%u",
                       (uint64_t)5017309000 + samples * 1000, ID(0));
    rng = saved;
    for (size_t s = 1; s < samples; s++)
        isoprof_buf_printf(&o, ",%u", ID(1 + rnd((uint32_t)nodes - 1)));
    rng = after;
    isoprof_buf_puts(&o, "],\"timeDeltas\":[");
    for (size_t s = 0; s < samples; s++)
        isoprof_buf_printf(&o, "%s%u", s ? "," : "", 950 + rnd(100));
    isoprof_buf_puts(&o, "]}}}");
#undef ID
    if (isoprof_buf_take(&o, &p->json, &p->len) != 0)
        die("profile generation failed");
    p->nodes = nodes;
    p->samples = samples;
    p->distinct = nf;
    p->script_nodes = script_nodes;
    isoprof_free(fr);
    isoprof_free(parent);
    isoprof_free(depth);
    isoprof_free(frame);
    isoprof_free(nkids);
    isoprof_free(first);
    isoprof_free(kids);
    isoprof_free(hits);
}

/* --- conversion, as the daemon does it ----------------------------------- */

/* pprof's mapper over the job's source-map session (agent/daemon/writer.c). */
static int conv_map(void *arg, const char *url, size_t url_len, int32_t line, int32_t column,
                    struct pprof_mapped *out)
{
    struct srcmap_pos pos;
    int r = srcmap_session_frame(arg, url, url_len, line, column, &pos);
    if (r != SRCMAP_FRAME_MAPPED)
        return r == SRCMAP_FRAME_UNMAPPED ? 0 : -1;
    out->name = pos.name;
    out->file = pos.source;
    out->line = (int64_t)pos.line + 1;
    out->column = (int64_t)pos.column + 1;
    return 1;
}

struct window {
    double seconds;
    uint64_t mapped, unmapped; /* Locations (pprof_result) */
    uint64_t calls;            /* the session's frames mapped + unmapped */
    size_t pprof_len;
};

/* One window: pprof_from_cpu_json, through a session of cache c when c is
 * not NULL. Dies if the conversion fails. */
static void convert(const char *json, size_t len, struct srcmap_cache *c, struct window *w)
{
    /* the bundle is written under a scratch dir: the host's tree whole */
    static const char *const trees[] = {"/"};
    static const struct srcmap_where where = {.trees = trees, .ntrees = 1};
    struct pprof_result r;
    memset(&r, 0, sizeof(r));
    char *why = NULL;
    struct srcmap_session *s = NULL;
    double t0 = now_s();
    struct pprof_mapper mapper = {conv_map, NULL};
    if (c != NULL && srcmap_session_new(c, &where, &s) == 0)
        mapper.arg = s;
    struct pprof_cpu_opts o = {.interval_ns = 1000000, .mapper = mapper.arg ? &mapper : NULL};
    int rc = pprof_from_cpu_json(json, len, &o, &r, &why);
    uint64_t m = 0, u = 0;
    if (s)
        srcmap_session_counts(s, &m, &u);
    srcmap_session_free(s);
    w->seconds = now_s() - t0;
    if (rc != 0)
        die("conversion: %s: %s", isoprof_strerror(rc), why ? why : "");
    w->mapped = r.mapped;
    w->unmapped = r.unmapped;
    w->calls = m + u;
    w->pprof_len = r.pprof.len;
    pprof_buf_free(&r.pprof);
}

static char *read_all(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        die("%s: %s", path, strerror(errno));
    char *d = isoprof_malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (d && got < (size_t)st.st_size) {
        ssize_t n = read(fd, d + got, (size_t)st.st_size - got);
        if (n <= 0)
            die("%s: short read", path);
        got += (size_t)n;
    }
    close(fd);
    if (d == NULL)
        die("out of memory");
    d[got] = '\0';
    *len = got;
    return d;
}

/* --- the fresh process: peak RSS ------------------------------------- */

static long status_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':')
            v = strtol(line + kl + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

/* --rss-child MODE BUDGET URL PROFILE WINDOWS: prints
 * "hwm rss input_hwm bytes maps loads too_big first_s rest_s mapped". */
static int rss_child(char **argv)
{
    const char *mode = argv[0];
    size_t budget = (size_t)strtoull(argv[1], NULL, 10);
    long windows = strtol(argv[4], NULL, 10);
    size_t len;
    char *json = read_all(argv[3], &len);
    long input_hwm = status_kib("VmHWM");
    struct srcmap_cache *c = NULL;
    if (strcmp(mode, "map") == 0 && srcmap_cache_new(budget, 0, &c) != 0)
        die("out of memory");
    double first = 0, *rest = isoprof_calloc((size_t)windows, sizeof(double));
    uint64_t mapped = 0;
    for (long i = 0; i < windows; i++) {
        struct window w;
        convert(json, len, c, &w);
        if (i == 0)
            first = w.seconds, mapped = w.mapped;
        else
            rest[i - 1] = w.seconds;
    }
    struct srcmap_stats st = {0};
    if (c)
        srcmap_cache_stats(c, &st);
    printf("%ld %ld %ld %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %.6f %.6f %" PRIu64 "\n",
           status_kib("VmHWM"), status_kib("VmRSS"), input_hwm, st.bytes, st.maps, st.loads,
           st.refused[SRCMAP_E_TOOBIG], first,
           windows > 1 ? median(rest, (size_t)windows - 1) : 0.0, mapped);
    srcmap_cache_free(c);
    isoprof_free(rest);
    isoprof_free(json);
    return 0;
}

struct rss {
    const char *what;
    long hwm, rss, input_hwm;
    uint64_t bytes, maps, loads, too_big, mapped;
    double first_s, rest_s;
};

/* Runs this program again as --rss-child and reads its line. */
static void rss_run(const char *self, const char *mode, size_t budget, const char *url,
                    const char *profile, long windows, struct rss *r)
{
    int fds[2];
    if (pipe(fds) != 0)
        die("pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        char b[32], w[32];
        snprintf(b, sizeof(b), "%zu", budget);
        snprintf(w, sizeof(w), "%ld", windows);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execl(self, self, "--rss-child", mode, b, url, profile, w, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char line[512];
    size_t n = 0;
    ssize_t k;
    while (n < sizeof(line) - 1 && (k = read(fds[0], line + n, sizeof(line) - 1 - n)) > 0)
        n += (size_t)k;
    line[n] = '\0';
    close(fds[0]);
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("the --rss-child %s process failed", mode);
    if (sscanf(line, "%ld %ld %ld %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %lf %lf %" SCNu64,
               &r->hwm, &r->rss, &r->input_hwm, &r->bytes, &r->maps, &r->loads, &r->too_big,
               &r->first_s, &r->rest_s, &r->mapped) != 10)
        die("the --rss-child %s process said '%s'", mode, line);
}

/* --- one case: a script, its map, its profile ----------------------------- */

/* Instruction counts of one case (callgrind, --callgrind). */
struct instr {
    bool done;
    uint64_t nomap, mapped, lookups, parse_whole, parse_chunked;
    size_t nlookups;
};

struct scase {
    const char *name;
    struct gen g;
    char script[4200], url[4300], profile_path[4200];
    size_t map_file, script_file;
    struct profile prof;
    /* parse */
    size_t map_bytes, nsegments, nsources, nnames;
    double parse_json_s, parse_index_s, parse_s; /* medians */
    double parse_chunked_json_s;                 /* the JSON pass fed in RESOLVE_CHUNK pieces */
    /* lookup */
    double ns_random, ns_starts;
    /* conversions */
    int reps;
    double *ta, *tb, *tc;
    uint64_t calls, mapped_locs, unmapped_locs;
    uint64_t refused_too_big; /* the default budget refused the map */
    size_t pprof_a, pprof_b;
    struct rss rss[6];
    size_t nrss;
    struct instr instr;
};

/* Every function start maps to its original name (bundle) or line (tsc). */
static void check_starts(struct scase *k, const struct srcmap *m)
{
    size_t bad = 0;
    char want[48];
    for (size_t i = 0; i < k->g.nfns; i++) {
        const struct fn *f = &k->g.fns[i];
        struct srcmap_pos pos;
        if (!srcmap_lookup(m, f->line, f->col, &pos)) {
            bad++;
            continue;
        }
        if (f->kind == 's')
            orig_name(f->k, want, sizeof(want));
        else
            snprintf(want, sizeof(want), "%s", f->kind == 'h' ? "checksumHot" : "run");
        if (pos.line != f->oline ||
            (k->g.with_names && (pos.name == NULL || strcmp(pos.name, want))))
            bad++;
    }
    if (bad)
        die("%s: %zu of %zu function starts do not map to their original name and line", k->name,
            bad, k->g.nfns);
}

static void bench_parse(struct scase *k, int reps)
{
    size_t len;
    char path[4300];
    snprintf(path, sizeof(path), "%s.map", k->script);
    char *text = read_all(path, &len);
    double *tj = isoprof_calloc((size_t)reps, sizeof(double));
    double *ti = isoprof_calloc((size_t)reps, sizeof(double));
    double *tt = isoprof_calloc((size_t)reps, sizeof(double));
    if (!tj || !ti || !tt)
        die("out of memory");
    struct srcmap *keep = NULL;
    for (int r = 0; r < reps; r++) {
        struct srcmap_parser *p;
        struct srcmap *m;
        char *why = NULL;
        double t0 = now_s();
        if (srcmap_parser_new(0, &p) != 0)
            die("out of memory");
        int rc = srcmap_parser_feed(p, text, len);
        double t1 = now_s();
        if (rc == 0)
            rc = srcmap_parser_finish(p, &m, &why);
        double t2 = now_s();
        srcmap_parser_free(p);
        if (rc != 0)
            die("%s: srcmap_parse: %s: %s", k->name, srcmap_reason(rc), why ? why : "");
        tj[r] = t1 - t0;
        ti[r] = t2 - t1;
        tt[r] = t2 - t0;
        if (keep == NULL)
            keep = m;
        else
            srcmap_free(m);
    }
    /* the JSON pass again, fed as resolve.c reads a map file: in chunks of
     * its READ_CHUNK (64 KiB) */
    for (int r = 0; r < reps; r++) {
        struct srcmap_parser *p;
        struct srcmap *m = NULL;
        double t0 = now_s();
        if (srcmap_parser_new(0, &p) != 0)
            die("out of memory");
        int rc = 0;
        for (size_t off = 0; off < len && rc == 0; off += RESOLVE_CHUNK)
            rc = srcmap_parser_feed(p, text + off,
                                    len - off < RESOLVE_CHUNK ? len - off : RESOLVE_CHUNK);
        tt[r] = now_s() - t0;
        if (rc == 0)
            rc = srcmap_parser_finish(p, &m, NULL);
        srcmap_parser_free(p);
        srcmap_free(m);
        if (rc != 0)
            die("%s: srcmap_parse in chunks: %s", k->name, srcmap_reason(rc));
    }
    k->parse_chunked_json_s = median(tt, (size_t)reps);
    for (int r = 0; r < reps; r++)
        tt[r] = tj[r] + ti[r];
    k->parse_json_s = median(tj, (size_t)reps);
    k->parse_index_s = median(ti, (size_t)reps);
    k->parse_s = median(tt, (size_t)reps);
    k->map_bytes = srcmap_bytes(keep);
    k->nsegments = srcmap_nsegments(keep);
    k->nsources = srcmap_nsources(keep);
    k->nnames = srcmap_nnames(keep);
    if (k->nsegments != k->g.nsegs)
        die("%s: %zu segments parsed, %zu generated", k->name, k->nsegments, k->g.nsegs);
    check_starts(k, keep);
    isoprof_free(tj);
    isoprof_free(ti);
    isoprof_free(tt);
    isoprof_free(text);
    srcmap_free(keep);
}

static volatile size_t lookup_sink;

/* ns per srcmap_lookup: n positions drawn uniformly over the generated
 * code (each line's length known), and n function starts. */
static void bench_lookup(struct scase *k, size_t n)
{
    size_t len;
    char path[4300];
    snprintf(path, sizeof(path), "%s.map", k->script);
    char *text = read_all(path, &len);
    struct srcmap *m;
    char *why = NULL;
    if (srcmap_parse(text, len, 0, &m, &why) != 0)
        die("%s: srcmap_parse: %s", k->name, why ? why : "");
    isoprof_free(text);
    /* the lines' lengths, from the script itself */
    const char *js = k->g.js.data;
    size_t nlines = k->g.gline + 1;
    uint32_t *ll = isoprof_calloc(nlines, sizeof(*ll));
    uint32_t *pl = isoprof_malloc(n * sizeof(*pl)), *pc = isoprof_malloc(n * sizeof(*pc));
    if (!ll || !pl || !pc)
        die("out of memory");
    for (size_t i = 0, line = 0; i < k->g.js.len; i++) {
        if (js[i] == '\n')
            line++;
        else
            ll[line]++;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < nlines; i++)
        total += ll[i];
    double res[2];
    for (int kind = 0; kind < 2; kind++) {
        for (size_t i = 0; i < n; i++) {
            if (kind == 0) {
                /* uniform over the code's bytes */
                uint64_t at = isoprof_rng_next(&rng) % (total ? total : 1);
                size_t line = 0;
                if (nlines == 1) {
                    pl[i] = 0;
                    pc[i] = (uint32_t)at;
                    continue;
                }
                /* lines are short here: draw a line, then a column in it */
                line = rnd((uint32_t)nlines);
                pl[i] = (uint32_t)line;
                pc[i] = ll[line] ? rnd(ll[line]) : 0;
            } else {
                const struct fn *f = &k->g.fns[rnd((uint32_t)k->g.nfns)];
                pl[i] = f->line;
                pc[i] = f->col;
            }
        }
        double best = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            size_t hits = 0;
            double t0 = now_s();
            for (size_t i = 0; i < n; i++) {
                struct srcmap_pos pos;
                hits += (size_t)srcmap_lookup(m, pl[i], pc[i], &pos);
            }
            double t = now_s() - t0;
            lookup_sink += hits; /* the loop's result is used */
            best = t < best ? t : best;
        }
        res[kind] = best / (double)n * 1e9;
    }
    k->ns_random = res[0];
    k->ns_starts = res[1];
    isoprof_free(ll);
    isoprof_free(pl);
    isoprof_free(pc);
    srcmap_free(m);
}

/* a, b and c interleaved, the order rotated each rep. */
static void bench_convert(struct scase *k, int reps)
{
    const char *json = k->prof.json;
    size_t len = k->prof.len;
    k->reps = reps;
    k->ta = isoprof_calloc((size_t)reps, sizeof(double));
    k->tb = isoprof_calloc((size_t)reps, sizeof(double));
    k->tc = isoprof_calloc((size_t)reps, sizeof(double));
    if (!k->ta || !k->tb || !k->tc)
        die("out of memory");
    struct srcmap_cache *warm;
    if (srcmap_cache_new(0, 0, &warm) != 0)
        die("out of memory");
    struct window w;
    convert(json, len, warm, &w); /* loads the map */
    convert(json, len, NULL, &w); /* and warms the allocator for a */
    k->pprof_a = w.pprof_len;
    for (int r = 0; r < reps; r++) {
        for (int j = 0; j < 3; j++) {
            switch ((r + j) % 3) {
            case 0:
                convert(json, len, NULL, &w);
                k->ta[r] = w.seconds;
                break;
            case 1:
                convert(json, len, warm, &w);
                k->tb[r] = w.seconds;
                k->calls = w.calls;
                k->mapped_locs = w.mapped;
                k->unmapped_locs = w.unmapped;
                k->pprof_b = w.pprof_len;
                break;
            default: {
                struct srcmap_cache *cold;
                if (srcmap_cache_new(0, 0, &cold) != 0)
                    die("out of memory");
                convert(json, len, cold, &w);
                k->tc[r] = w.seconds;
                srcmap_cache_free(cold);
                break;
            }
            }
        }
    }
    struct srcmap_stats st;
    srcmap_cache_stats(warm, &st);
    srcmap_cache_free(warm);
    /* a map past the budget is refused (b and c then time the refusal);
     * anything else that maps nothing is broken */
    k->refused_too_big = st.refused[SRCMAP_E_TOOBIG];
    if (k->refused_too_big == 0 && (st.loads != 1 || st.maps != 1 || k->mapped_locs == 0))
        die("%s: the warm cache loaded %" PRIu64 " maps (holds %" PRIu64 "), %" PRIu64
            " Locations mapped",
            k->name, st.loads, st.maps, k->mapped_locs);
}

/* --- instruction counts (callgrind) --------------------------------------- */

/*
 * Timings on these machines spread by 2x and more; callgrind's instruction
 * counts do not (the project's BENCHMARKING.md). But valgrind does not know
 * openat2 (it answers ENOSYS), through which resolve.c opens every script
 * and map: under valgrind no map is ever found. So the counted runs map
 * frames through a direct mapper, the map parsed with srcmap_parse and
 * looked up with srcmap_lookup, which is the session's work less its
 * per-window stat of the script and the map and its per-url memo. Each
 * measured step is a function of its own, counted with
 * --toggle-collect=instr_*.
 */
struct direct {
    const char *url;
    size_t url_len;
    const struct srcmap *m;
};

static int direct_map(void *arg, const char *url, size_t url_len, int32_t line, int32_t column,
                      struct pprof_mapped *out)
{
    const struct direct *d = arg;
    /* pprof hands over a file:// url as the path it names */
    bool ours =
        (url_len == d->url_len && memcmp(url, d->url, url_len) == 0) ||
        (d->url_len > 7 && url_len == d->url_len - 7 && memcmp(url, d->url + 7, url_len) == 0);
    if (!ours || line < 0)
        return -1;
    struct srcmap_pos pos;
    if (!srcmap_lookup(d->m, (uint32_t)line, column < 0 ? 0 : (uint32_t)column, &pos))
        return 0;
    out->name = pos.name;
    out->file = pos.source;
    out->line = (int64_t)pos.line + 1;
    out->column = (int64_t)pos.column + 1;
    return 1;
}

/* One conversion. Not named instr_*: a nested instr_* function would toggle
 * the collection off again. */
static uint64_t conv_once(const char *json, size_t len, const struct pprof_mapper *mp)
{
    struct pprof_result r;
    memset(&r, 0, sizeof(r));
    struct pprof_cpu_opts o = {.interval_ns = 1000000, .mapper = mp};
    if (pprof_from_cpu_json(json, len, &o, &r, NULL) != 0)
        die("conversion failed");
    pprof_buf_free(&r.pprof);
    return r.mapped;
}

/* The empty asm after each call keeps it from being a tail call, which
 * would leave the instr_* function itself nothing to count. */
static __attribute__((noinline)) uint64_t instr_convert_nomap(const char *json, size_t len)
{
    uint64_t r = conv_once(json, len, NULL);
    __asm__ volatile("" ::: "memory");
    return r;
}

static __attribute__((noinline)) uint64_t instr_convert_mapped(const char *json, size_t len,
                                                               const struct pprof_mapper *mp)
{
    uint64_t r = conv_once(json, len, mp);
    __asm__ volatile("" ::: "memory");
    return r;
}

static __attribute__((noinline)) size_t instr_lookups(const struct srcmap *m, const uint32_t *line,
                                                      const uint32_t *col, size_t n)
{
    size_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        struct srcmap_pos pos;
        hits += (size_t)srcmap_lookup(m, line[i], col[i], &pos);
    }
    return hits;
}

static struct srcmap *parse_in(const char *text, size_t len, size_t chunk)
{
    struct srcmap_parser *p;
    struct srcmap *m = NULL;
    if (srcmap_parser_new(0, &p) != 0)
        die("out of memory");
    int rc = 0;
    for (size_t off = 0; off < len && rc == 0; off += chunk)
        rc = srcmap_parser_feed(p, text + off, len - off < chunk ? len - off : chunk);
    if (rc == 0)
        rc = srcmap_parser_finish(p, &m, NULL);
    srcmap_parser_free(p);
    if (rc != 0)
        die("srcmap_parse: %s", srcmap_reason(rc));
    return m;
}

static __attribute__((noinline)) struct srcmap *instr_parse_whole(const char *text, size_t len)
{
    struct srcmap *m = parse_in(text, len, len);
    __asm__ volatile("" ::: "memory");
    return m;
}

static __attribute__((noinline)) struct srcmap *instr_parse_chunked(const char *text, size_t len)
{
    struct srcmap *m = parse_in(text, len, RESOLVE_CHUNK);
    __asm__ volatile("" ::: "memory");
    return m;
}

/* --instr URL MAP PROFILE: each counted step once. */
static int instr_child(char **argv)
{
    size_t mlen, plen;
    char *map = read_all(argv[1], &mlen);
    char *json = read_all(argv[2], &plen);
    struct srcmap *m = instr_parse_whole(map, mlen);
    srcmap_free(instr_parse_chunked(map, mlen));
    struct direct d = {argv[0], strlen(argv[0]), m};
    struct pprof_mapper mp = {direct_map, &d};
    instr_convert_nomap(json, plen);
    uint64_t mapped = instr_convert_mapped(json, plen, &mp);
    /* the lookups the mapped conversion made: each script node's frame,
     * read back from the profile text ("url":"<url>","lineNumber":L,
     * "columnNumber":C) */
    size_t n = 0, cap = 1024;
    uint32_t *line = isoprof_malloc(cap * sizeof(*line)), *col = isoprof_malloc(cap * sizeof(*col));
    char pat[4400];
    int pl = snprintf(pat, sizeof(pat), "\"url\":\"%s\",\"lineNumber\":", argv[0]);
    for (const char *q = json; line && col && (q = strstr(q, pat)) != NULL; q += pl) {
        if (n == cap) {
            cap *= 2;
            uint32_t *a = isoprof_realloc(line, cap * sizeof(*line));
            uint32_t *b = a ? isoprof_realloc(col, cap * sizeof(*col)) : NULL;
            if (a == NULL || b == NULL)
                die("out of memory");
            line = a;
            col = b;
        }
        char *end;
        line[n] = (uint32_t)strtoul(q + pl, &end, 10);
        col[n++] = (uint32_t)strtoul(end + strlen(",\"columnNumber\":"), NULL, 10);
    }
    if (line == NULL || col == NULL)
        die("out of memory");
    size_t hits = instr_lookups(m, line, col, n);
    printf("%zu %zu %" PRIu64 "\n", n, hits, mapped);
    isoprof_free(line);
    isoprof_free(col);
    srcmap_free(m);
    isoprof_free(map);
    isoprof_free(json);
    return 0;
}

/* Runs --instr under callgrind and reads each instr_* function's inclusive
 * count from callgrind_annotate. Leaves k->instr.done false (and says why)
 * when valgrind is not there or fails. */
static void bench_instr(struct scase *k, const char *self, const char *dir)
{
    char out[4400], map[4400], cmd[13500], nb[64];
    snprintf(out, sizeof(out), "%s/%s.callgrind", dir, k->name);
    snprintf(map, sizeof(map), "%s.map", k->script);
    snprintf(cmd, sizeof(cmd),
             "valgrind --tool=callgrind --callgrind-out-file='%s' '--toggle-collect=instr_*' '%s' "
             "--instr '%s' '%s' '%s' 2>/dev/null",
             out, self, k->url, map, k->profile_path);
    FILE *f = popen(cmd, "r");
    if (f == NULL || fscanf(f, "%zu", &k->instr.nlookups) != 1) {
        if (f)
            pclose(f);
        fprintf(stderr,
                "%s: valgrind --tool=callgrind failed (installed?): no instruction counts\n",
                k->name);
        return;
    }
    while (fgetc(f) != EOF)
        ;
    if (pclose(f) != 0) {
        fprintf(stderr, "%s: valgrind --tool=callgrind failed\n", k->name);
        return;
    }
    snprintf(cmd, sizeof(cmd), "callgrind_annotate --inclusive=yes --auto=no '%s' 2>/dev/null",
             out);
    if ((f = popen(cmd, "r")) == NULL)
        return;
    char line[8192];
    int got = 0;
    while (fgets(line, sizeof(line), f)) {
        /* "12,345,678 (12.34%)  /path/bench_srcmap.c:instr_convert_nomap [/path/bin]" */
        const char *fn = strstr(line, ":instr_");
        if (fn == NULL || strstr(line, "=>") != NULL)
            continue;
        size_t n = 0;
        for (const char *c = line; *c && *c != '(' && n + 1 < sizeof(nb); c++)
            if (*c >= '0' && *c <= '9')
                nb[n++] = *c;
        nb[n] = '\0';
        uint64_t v = strtoull(nb, NULL, 10);
        fn += 1;
        size_t fl = strcspn(fn, " .\n"); /* GCC's clones: instr_x.isra.0 */
#define IS(name) (fl == strlen(name) && strncmp(fn, name, fl) == 0)
        if (IS("instr_convert_nomap"))
            k->instr.nomap = v, got++;
        else if (IS("instr_convert_mapped"))
            k->instr.mapped = v, got++;
        else if (IS("instr_lookups"))
            k->instr.lookups = v, got++;
        else if (IS("instr_parse_whole"))
            k->instr.parse_whole = v, got++;
        else if (IS("instr_parse_chunked"))
            k->instr.parse_chunked = v, got++;
#undef IS
    }
    pclose(f);
    unlink(out);
    k->instr.done = got == 5;
    if (!k->instr.done)
        fprintf(stderr, "%s: callgrind_annotate gave %d of 5 counts\n", k->name, got);
}

static void scase_free(struct scase *k)
{
    gen_free(&k->g);
    isoprof_free(k->prof.json);
    isoprof_free(k->ta);
    isoprof_free(k->tb);
    isoprof_free(k->tc);
}

/* --- output ------------------------------------------------------------- */

static void print_case(const struct scase *k)
{
    size_t reps = (size_t)k->reps;
    double *rb = isoprof_malloc(reps * sizeof(double)), *rc = isoprof_malloc(reps * sizeof(double));
    double *d = isoprof_malloc(reps * sizeof(double));
    if (!rb || !rc || !d)
        die("out of memory");
    for (size_t i = 0; i < reps; i++) {
        rb[i] = k->tb[i] / k->ta[i];
        rc[i] = k->tc[i] / k->ta[i];
        d[i] = k->tb[i] - k->ta[i];
    }
    double ma = median(k->ta, reps), mb = median(k->tb, reps), mc = median(k->tc, reps);
    double md = median(d, reps);
    printf("\n== %s: %s (%.2f MB, %u lines), map %.2f MB (mappings %.2f MB, %zu segments, "
           "%zu sources, %zu names%s)\n",
           k->name, k->script, (double)k->script_file / 1e6, k->g.gline, (double)k->map_file / 1e6,
           (double)k->g.mappings.len / 1e6, k->nsegments, k->nsources, k->nnames,
           k->g.with_content ? ", sourcesContent" : "");
    printf("parsed: srcmap_bytes %.2f MiB (%.1f%% of the file, %.1f%% of the 32 MiB budget); "
           "%.1f bytes of mappings a segment\n",
           (double)k->map_bytes / MIB, 100.0 * (double)k->map_bytes / (double)k->map_file,
           100.0 * (double)k->map_bytes / (double)SRCMAP_DEFAULT_BUDGET,
           (double)k->g.mappings.len / (double)k->nsegments);
    printf("srcmap_parse, text in memory: %.1f ms (%.0f MB/s of map file): JSON pass %.1f ms, "
           "index pass %.1f ms (%.1f ns a segment)\n",
           k->parse_s * 1e3, (double)k->map_file / 1e6 / k->parse_s, k->parse_json_s * 1e3,
           k->parse_index_s * 1e3, k->parse_index_s * 1e9 / (double)k->nsegments);
    printf("JSON pass fed in 64 KiB chunks (as resolve.c reads a file): %.1f ms, %.1fx the pass "
           "fed whole\n",
           k->parse_chunked_json_s * 1e3, k->parse_chunked_json_s / k->parse_json_s);
    printf("srcmap_lookup: %.0f ns at random positions, %.0f ns at function starts (best of 3)\n",
           k->ns_random, k->ns_starts);
    if (k->refused_too_big)
        printf("THE MAP IS REFUSED by the default 32 MiB budget (too_big): (b) and (c) time the "
               "refusal, nothing is mapped\n");
    printf("profile: %.2f MB, %zu nodes (%zu in the script), %zu distinct frames, %zu samples; "
           "mapper calls %" PRIu64 ", Locations mapped %" PRIu64 ", unmapped %" PRIu64 "\n",
           (double)k->prof.len / 1e6, k->prof.nodes, k->prof.script_nodes, k->prof.distinct,
           k->prof.samples, k->calls, k->mapped_locs, k->unmapped_locs);
    printf("%-44s %10s %10s %10s %22s\n", "conversion, one window", "median ms", "min ms", "max ms",
           "x (a), median [min,max]");
    printf("%-44s %10.2f %10.2f %10.2f %22s\n", "(a) no mapper", ma * 1e3, vmin(k->ta, reps) * 1e3,
           vmax(k->ta, reps) * 1e3, "1");
    printf("%-44s %10.2f %10.2f %10.2f %10.2f [%.2f,%.2f]\n", "(b) mapper, warm cache", mb * 1e3,
           vmin(k->tb, reps) * 1e3, vmax(k->tb, reps) * 1e3, median(rb, reps), vmin(rb, reps),
           vmax(rb, reps));
    printf("%-44s %10.2f %10.2f %10.2f %10.2f [%.2f,%.2f]\n",
           "(c) mapper, cold cache (read+parse the map)", mc * 1e3, vmin(k->tc, reps) * 1e3,
           vmax(k->tc, reps) * 1e3, median(rc, reps), vmin(rc, reps), vmax(rc, reps));
    printf("(b)-(a), paired per rep, median: %.2f ms = %.2f us per mapper call (%" PRIu64
           "), %.2f us per distinct frame (%zu); pprof %.2f MB -> %.2f MB\n",
           md * 1e3, md * 1e6 / (double)k->calls, k->calls, md * 1e6 / (double)k->prof.distinct,
           k->prof.distinct, (double)k->pprof_a / 1e6, (double)k->pprof_b / 1e6);
    if (k->nrss) {
        printf("%-32s %9s %9s %9s %9s %5s %7s %9s %9s %7s\n", "fresh process, windows", "VmHWM MiB",
               "VmRSS", "input", "cache MiB", "maps", "too_big", "first ms", "next ms", "mapped");
        for (size_t i = 0; i < k->nrss; i++) {
            const struct rss *r = &k->rss[i];
            printf("%-32s %9.1f %9.1f %9.1f %9.2f %5" PRIu64 " %7" PRIu64 " %9.1f %9.1f %7" PRIu64
                   "\n",
                   r->what, r->hwm / 1024.0, r->rss / 1024.0, r->input_hwm / 1024.0,
                   (double)r->bytes / MIB, r->maps, r->too_big, r->first_s * 1e3, r->rest_s * 1e3,
                   r->mapped);
        }
        printf("(VmHWM: the process's peak; VmRSS at its end; input: VmHWM once the profile is "
               "read; mapped: Locations of the first window. ru_maxrss is not used: Linux carries "
               "it across exec from the forked parent.)\n");
    }
    if (k->instr.done) {
        const struct instr *n = &k->instr;
        double per = (double)(n->mapped - n->nomap);
        printf("instructions (callgrind; a direct mapper: the parsed map and srcmap_lookup, no "
               "cache nor session):\n");
        printf("  conversion: no mapper %.1f M, mapper %.1f M (x%.2f): +%.0f a mapper call (%zu), "
               "+%.0f a distinct frame; of which srcmap_lookup %.0f a call\n",
               (double)n->nomap / 1e6, (double)n->mapped / 1e6,
               (double)n->mapped / (double)n->nomap, per / (double)n->nlookups, n->nlookups,
               per / (double)k->prof.distinct, (double)n->lookups / (double)n->nlookups);
        printf("  srcmap_parse fed whole %.1f M (%.1f a byte of map), in 64 KiB pieces %.1f M "
               "(x%.1f)\n",
               (double)n->parse_whole / 1e6, (double)n->parse_whole / (double)k->map_file,
               (double)n->parse_chunked / 1e6, (double)n->parse_chunked / (double)n->parse_whole);
    }
    isoprof_free(rb);
    isoprof_free(rc);
    isoprof_free(d);
}

static void json_times(FILE *f, const char *key, const double *t, size_t n)
{
    fprintf(f, ",\"%s\":[", key);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s%.6f", i ? "," : "", t[i]);
    fprintf(f, "]");
}

static void json_case(FILE *f, const struct scase *k)
{
    size_t reps = (size_t)k->reps;
    double *d = isoprof_malloc(reps * sizeof(double));
    if (d == NULL)
        die("out of memory");
    for (size_t i = 0; i < reps; i++)
        d[i] = k->tb[i] - k->ta[i];
    double md = median(d, reps);
    fprintf(f,
            "{\"name\":\"%s\",\"script_bytes\":%zu,\"script_lines\":%u,\"map_file_bytes\":%zu,"
            "\"mappings_bytes\":%zu,\"segments\":%zu,\"sources\":%zu,\"names\":%zu,"
            "\"sources_content\":%s,\"srcmap_bytes\":%zu,\"budget_bytes\":%zu,"
            "\"refused_too_big\":%" PRIu64 ","
            "\"parse_s\":%.6f,\"parse_json_s\":%.6f,\"parse_index_s\":%.6f,\"parse_mb_s\":%.1f,"
            "\"parse_json_64k_chunks_s\":%.6f,"
            "\"lookup_ns_random\":%.1f,\"lookup_ns_function_starts\":%.1f,"
            "\"profile\":{\"bytes\":%zu,\"nodes\":%zu,\"script_nodes\":%zu,\"distinct_frames\":%zu,"
            "\"samples\":%zu},\"mapper_calls\":%" PRIu64 ",\"locations_mapped\":%" PRIu64
            ",\"locations_unmapped\":%" PRIu64 ",\"pprof_bytes_a\":%zu,\"pprof_bytes_b\":%zu,"
            "\"reps\":%zu,\"median_s\":{\"a\":%.6f,\"b\":%.6f,\"c\":%.6f},"
            "\"b_minus_a_median_s\":%.6f,\"us_per_call\":%.3f,\"us_per_distinct_frame\":%.3f",
            k->name, k->script_file, k->g.gline, k->map_file, k->g.mappings.len, k->nsegments,
            k->nsources, k->nnames, k->g.with_content ? "true" : "false", k->map_bytes,
            SRCMAP_DEFAULT_BUDGET, k->refused_too_big, k->parse_s, k->parse_json_s,
            k->parse_index_s, (double)k->map_file / 1e6 / k->parse_s, k->parse_chunked_json_s,
            k->ns_random, k->ns_starts, k->prof.len, k->prof.nodes, k->prof.script_nodes,
            k->prof.distinct, k->prof.samples, k->calls, k->mapped_locs, k->unmapped_locs,
            k->pprof_a, k->pprof_b, reps, median(k->ta, reps), median(k->tb, reps),
            median(k->tc, reps), md, md * 1e6 / (double)k->calls,
            md * 1e6 / (double)k->prof.distinct);
    json_times(f, "a_s", k->ta, reps);
    json_times(f, "b_s", k->tb, reps);
    json_times(f, "c_s", k->tc, reps);
    fprintf(f, ",\"rss\":[");
    for (size_t i = 0; i < k->nrss; i++) {
        const struct rss *r = &k->rss[i];
        fprintf(f,
                "%s{\"what\":\"%s\",\"vmhwm_kib\":%ld,\"vmrss_kib\":%ld,"
                "\"input_vmhwm_kib\":%ld,\"cache_bytes\":%" PRIu64 ",\"cache_maps\":%" PRIu64
                ",\"loads\":%" PRIu64 ",\"refused_too_big\":%" PRIu64 ",\"first_window_s\":%.6f,"
                "\"next_windows_median_s\":%.6f,\"locations_mapped_first\":%" PRIu64 "}",
                i ? "," : "", r->what, r->hwm, r->rss, r->input_hwm, r->bytes, r->maps, r->loads,
                r->too_big, r->first_s, r->rest_s, r->mapped);
    }
    fprintf(f, "]");
    if (k->instr.done)
        fprintf(f,
                ",\"instructions\":{\"convert_nomap\":%" PRIu64
                ",\"convert_direct_mapper\":%" PRIu64 ",\"lookups\":%" PRIu64
                ",\"nlookups\":%zu,\"parse_whole\":%" PRIu64 ",\"parse_64k_chunks\":%" PRIu64 "}",
                k->instr.nomap, k->instr.mapped, k->instr.lookups, k->instr.nlookups,
                k->instr.parse_whole, k->instr.parse_chunked);
    fprintf(f, "}");
    isoprof_free(d);
}

/* --- main ----------------------------------------------------------------- */

struct opts {
    double map_mb, tsc_mb;
    long nodes, funcs, reps, lookups, windows;
    long busy_ms, every_ms;
    const char *json, *write_dir;
    bool keep, callgrind;
};

static int usage(void)
{
    fprintf(stderr,
            "usage: bench_srcmap [--map-mb 20] [--tsc-mb 8] [--nodes 20000] [--funcs 5000]\n"
            "                    [--reps 15] [--lookups 1000000] [--windows 5] [--json FILE] "
            "[--keep]\n"
            "                    [--callgrind]\n"
            "       bench_srcmap --write DIR [--map-mb 20] [--busy-ms 3] [--every-ms 10]\n");
    return 2;
}

static bool num(const char *s, double lo, double hi, double *out)
{
    char *end;
    *out = strtod(s, &end);
    return end != s && *end == '\0' && *out >= lo && *out <= hi;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.map_mb = 20,
                       .tsc_mb = 8,
                       .nodes = 20000,
                       .funcs = 5000,
                       .reps = 15,
                       .lookups = 1000000,
                       .windows = 5,
                       .busy_ms = 3,
                       .every_ms = 10};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v;
        if (strcmp(a, "--keep") == 0 || strcmp(a, "--callgrind") == 0) {
            if (a[2] == 'k')
                o->keep = true;
            else
                o->callgrind = true;
            continue;
        }
        if (i + 1 >= argc)
            return -1;
        const char *val = argv[++i];
        if (strcmp(a, "--json") == 0)
            o->json = val;
        else if (strcmp(a, "--write") == 0)
            o->write_dir = val;
        else if (strcmp(a, "--map-mb") == 0 && num(val, 0.1, 500, &v))
            o->map_mb = v;
        else if (strcmp(a, "--tsc-mb") == 0 && num(val, 0.1, 500, &v))
            o->tsc_mb = v;
        else if (strcmp(a, "--nodes") == 0 && num(val, 100, 1e6, &v))
            o->nodes = (long)v;
        else if (strcmp(a, "--funcs") == 0 && num(val, 1, 1e6, &v))
            o->funcs = (long)v;
        else if (strcmp(a, "--reps") == 0 && num(val, 1, 10000, &v))
            o->reps = (long)v;
        else if (strcmp(a, "--lookups") == 0 && num(val, 1000, 1e9, &v))
            o->lookups = (long)v;
        else if (strcmp(a, "--windows") == 0 && num(val, 1, 1000, &v))
            o->windows = (long)v;
        else if (strcmp(a, "--busy-ms") == 0 && num(val, 1, 1000, &v))
            o->busy_ms = (long)v;
        else if (strcmp(a, "--every-ms") == 0 && num(val, 1, 10000, &v))
            o->every_ms = (long)v;
        else
            return -1;
    }
    return 0;
}

/* --write: the bundle and its map for bench_srcmap.js. */
static int write_mode(const struct opts *o)
{
    struct gen g;
    char script[4096];
    generate(&g, false, (size_t)(o->map_mb * 1e6), (unsigned)o->busy_ms, (unsigned)o->every_ms);
    size_t script_bytes;
    size_t map = write_pair(&g, o->write_dir, "bundle.js", script, sizeof(script), &script_bytes);
    const struct fn *hot = NULL;
    for (size_t i = 0; i < g.nfns; i++)
        if (g.fns[i].kind == 'h')
            hot = &g.fns[i];
    size_t nsmall = 0;
    for (size_t i = 0; i < g.nfns; i++)
        nsmall += g.fns[i].kind == 's';
    printf("{\"script\":\"%s\",\"map\":\"%s.map\",\"script_bytes\":%zu,\"map_bytes\":%zu,"
           "\"mappings_bytes\":%zu,\"segments\":%zu,\"sources\":%" PRIu32 ",\"names\":%" PRIu32
           ",\"functions\":%zu,\"hot\":{\"name\":\"HOT\",\"original\":\"checksumHot\",\"line\":"
           "%" PRIu32 ",\"column\":%" PRIu32 "}}\n",
           script, script, script_bytes, map, g.mappings.len, g.nsegs, g.nsources, g.nnames, nsmall,
           hot ? hot->line : 0, hot ? hot->col : 0);
    gen_free(&g);
    return 0;
}

static void rmtree(const char *dir, struct scase *cases, size_t n)
{
    char p[4300];
    for (size_t i = 0; i < n; i++) {
        unlink(cases[i].script);
        snprintf(p, sizeof(p), "%s.map", cases[i].script);
        unlink(p);
        unlink(cases[i].profile_path);
    }
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--rss-child") == 0) {
        if (argc != 7)
            return usage();
        return rss_child(argv + 2);
    }
    if (argc > 1 && strcmp(argv[1], "--instr") == 0) {
        if (argc != 5)
            return usage();
        return instr_child(argv + 2);
    }
    struct opts o;
    if (parse_opts(argc, argv, &o) != 0)
        return usage();
    isoprof_rng_seed(&rng, 0x5eed5eedULL);
    if (o.write_dir)
        return write_mode(&o);

    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (sl <= 0)
        die("/proc/self/exe: %s", strerror(errno));
    self[sl] = '\0';
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/isoprof-srcmap-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL)
        die("mkdtemp %s: %s", dir, strerror(errno));

    static struct scase cases[2];
    cases[0].name = "bundle";
    cases[1].name = "tsc";
    for (int i = 0; i < 2; i++) {
        struct scase *k = &cases[i];
        bool multi = i == 1;
        double mb = multi ? o.tsc_mb : o.map_mb;
        fprintf(stderr, "generating %s (%.0f MB map)\n", k->name, mb);
        generate(&k->g, multi, (size_t)(mb * 1e6), (unsigned)o.busy_ms, (unsigned)o.every_ms);
        const char *base = multi ? "tsc.js" : "bundle.js";
        k->map_file = write_pair(&k->g, dir, base, k->script, sizeof(k->script), &k->script_file);
        snprintf(k->url, sizeof(k->url), "file://%s/%s", dir, base);
        gen_profile(&k->g, k->url, (size_t)o.nodes, (size_t)o.funcs, &k->prof);
        snprintf(k->profile_path, sizeof(k->profile_path), "%s/%s-cpu.json", dir, k->name);
        write_file(k->profile_path, k->prof.json, k->prof.len, NULL, 0);
    }
    for (int i = 0; i < 2; i++) {
        struct scase *k = &cases[i];
        fprintf(stderr, "%s: parse, lookups\n", k->name);
        bench_parse(k, 5);
        bench_lookup(k, (size_t)o.lookups);
        fprintf(stderr, "%s: conversions a/b/c x %ld\n", k->name, o.reps);
        bench_convert(k, (int)o.reps);
        fprintf(stderr, "%s: peak RSS of fresh processes\n", k->name);
        /* none and map interleaved, then smaller budgets: 8 MiB holds the bundle's
         * map (~6 MiB parsed), 4 MiB refuses it */
        const char *modes[] = {"none", "map", "none", "map", "map", "map"};
        const char *whats[] = {"(a) no mapper",     "(c)+(b) map, budget 32 MiB",
                               "(a) no mapper",     "(c)+(b) map, budget 32 MiB",
                               "map, budget 8 MiB", "map, budget 4 MiB"};
        size_t budgets[] = {
            0, SRCMAP_DEFAULT_BUDGET, 0, SRCMAP_DEFAULT_BUDGET, (size_t)8 << 20, (size_t)4 << 20};
        size_t nr = i == 0 ? 6 : 2;
        for (size_t r = 0; r < nr; r++) {
            k->rss[r].what = whats[r];
            rss_run(self, modes[r], budgets[r], k->url, k->profile_path, o.windows, &k->rss[r]);
        }
        k->nrss = nr;
        if (o.callgrind) {
            fprintf(stderr, "%s: instruction counts under callgrind\n", k->name);
            bench_instr(k, self, dir);
        }
    }
    printf("bench_srcmap: %ld nodes over %ld distinct script functions a profile, %ld reps a "
           "variant interleaved (a b c rotated), medians; %ld windows a fresh process\n",
           o.nodes, o.funcs, o.reps, o.windows);
    for (int i = 0; i < 2; i++)
        print_case(&cases[i]);
    if (o.json) {
        FILE *f = fopen(o.json, "w");
        if (f == NULL)
            die("%s: %s", o.json, strerror(errno));
        fprintf(f, "{\"nodes\":%ld,\"funcs\":%ld,\"reps\":%ld,\"windows\":%ld,\"cases\":[", o.nodes,
                o.funcs, o.reps, o.windows);
        for (int i = 0; i < 2; i++) {
            if (i)
                fputc(',', f);
            json_case(f, &cases[i]);
        }
        fprintf(f, "]}\n");
        if (fclose(f) != 0)
            die("%s: %s", o.json, strerror(errno));
    }
    if (o.keep)
        printf("\nfiles kept in %s\n", dir);
    else
        rmtree(dir, cases, 2);
    for (int i = 0; i < 2; i++)
        scase_free(&cases[i]);
    return 0;
}

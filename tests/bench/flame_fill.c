/*
 * flame_fill - a store of realistic CPU windows, for bench_flamegraph.js.
 *
 *   flame_fill DIR N [SEED]
 *
 * Creates a new store at DIR (default options) holding N CPU windows of
 * worker "bench", version "v1", isolate 0, one every 10 s ending now, in
 * transactions of 256. Each window is a synthetic V8 CPU profile (CDP
 * JSON) converted by the converter the daemon uses (interval 1 ms).
 *
 * The profiles come from one fixed random "program", the same for a seed:
 * 2,000 functions in 100 files (node: internals, node_modules, the app),
 * each calling 2 to 6 others picked by a Zipf-like popularity, so a few
 * functions sit on most stacks and a long tail is rare. A walk from one of
 * the event loop's entry points down the call graph, 5 to 40 frames deep,
 * is a code path; the program has PATHS distinct ones, and they too have
 * a Zipf popularity (exponent PATH_ZIPF). A window draws about 1,000
 * samples from them (plus a little (program) and (garbage collector)):
 * a few hundred distinct stacks a window, the hot ones in every window and
 * a tail that makes 1,000 windows together hold tens of thousands.
 *
 * Prints one line of key=value: windows, samples, the distinct stacks in
 * the union and per window (mean), the functions seen, the CDP JSON and
 * pprof bytes made, the store's data.mdb size and the seconds it took.
 * Deterministic for a seed (but for the window times, which end now).
 * Exit status 2 on a usage error, 1 if a call fails.
 */
#include "base.h"
#include "pprof.h"
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BATCH 256
#define SEC 1000000000ull
#define WINDOW_NS (10 * SEC)

#define NFUNC 2000      /* functions of the program */
#define NFILE 100       /* files they live in */
#define NENTRY 12       /* event loop entry points (node: internals) */
#define NINTERNAL 10    /* node: files */
#define NMODULES 30     /* node_modules files; the rest are the app's */
#define MIN_CALLEES 2
#define MAX_CALLEES 6
#define MIN_DEPTH 5
#define MAX_DEPTH 40
#define PATHS 60000     /* distinct code paths of the program */
#define PATH_ZIPF 1.07  /* their popularity: rank^-PATH_ZIPF */
#define FN_ZIPF 0.6     /* functions' popularity as callees */
#define FILE_ZIPF 0.8   /* files' share of the functions */
#define CALLEE_ZIPF 0.8 /* a caller's preference among its callees */
#define SAMPLES 1000    /* per window, +- SAMPLES_JITTER */
#define SAMPLES_JITTER 100
#define FN_PROGRAM NFUNC
#define FN_GC (NFUNC + 1)
#define JSON_MAX ((size_t)64 << 20)

struct file {
    char url[96];
    char script_id[8];
    int next_line;
};

struct fn {
    char name[64];
    uint16_t file;
    int line, col;
    uint16_t ncallee;
    uint16_t callee[MAX_CALLEES];
};

struct path {
    uint32_t off; /* frames[off .. off + depth), root first */
    uint16_t depth;
};

struct program {
    struct file files[NFILE];
    struct fn fns[NFUNC + 2];
    struct path *paths;
    uint16_t *frames;
    size_t nframes;
    double *path_cdf; /* PATHS entries */
};

/* One window's call tree: node 0 is (root); siblings chained. */
struct tnode {
    uint32_t fn, first_child, next_sibling, last_child;
    uint32_t hits;
};

struct window_ctx {
    struct tnode *nodes;
    size_t nnodes, cap;
    uint32_t *path_hits; /* PATHS */
    uint32_t *path_leaf; /* PATHS: the node of a touched path */
    uint32_t *touched;   /* paths drawn in this window */
    uint32_t *draws;     /* per sample: a path, or PATHS + 0/1 for (program)/(gc) */
    uint32_t ntouched;
    struct isoprof_buf json;
};

static const char *const verbs[] = {"get", "set", "parse", "handle", "validate", "render", "load",
                                    "build", "encode", "decode", "resolve", "compute", "fetch",
                                    "update", "create", "format", "read", "write", "check",
                                    "apply"};
static const char *const nouns[] = {"Request", "Response", "User", "Session", "Token", "Header",
                                    "Body", "Query", "Cache", "Route", "Config", "Record",
                                    "Order", "Item", "Price", "Schema", "Buffer", "Stream",
                                    "Event", "Message"};
static const char *const suffixes[] = {"", "Async", "Sync", "Internal", "Impl"};
static const char *const entries[NENTRY] = {
    "processTicksAndRejections", "listOnTimeout", "processTimers", "emit",
    "onStreamRead", "parserOnHeadersComplete", "parserOnIncoming", "addChunk",
    "runMicrotasks", "afterWrite", "onconnection", "processImmediate"};
static const char *const internals[NINTERNAL] = {
    "node:internal/process/task_queues", "node:internal/timers", "node:events",
    "node:internal/stream_base_commons", "node:_http_common", "node:_http_server",
    "node:internal/streams/readable", "node:net", "node:internal/async_hooks", "node:buffer"};
static const char *const packages[] = {"express", "body-parser", "pg", "ioredis", "ajv",
                                       "lodash", "fast-json-stringify", "pino", "jsonwebtoken",
                                       "undici"};
static const char *const app_dirs[] = {"routes", "services", "models", "lib", "middleware",
                                       "views"};

static int fail(const char *what, int rc, const char *why)
{
    fprintf(stderr, "flame_fill: %s: %s\n", what, why ? why : isoprof_strerror(rc));
    return 1;
}

/* A Zipf CDF over n ranks: cdf[i] = sum_{j <= i} (j + 1)^-s. */
static double *zipf_cdf(size_t n, double s)
{
    double *c = isoprof_calloc(n, sizeof(*c));
    if (c == NULL)
        return NULL;
    double acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += 1.0 / pow((double)(i + 1), s);
        c[i] = acc;
    }
    return c;
}

/* The rank a uniform u in [0, 1) falls on in cdf[0..n). */
static size_t zipf_pick(const double *cdf, size_t n, double u)
{
    double x = u * cdf[n - 1];
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static uint32_t rnd_below(struct isoprof_rng *r, uint32_t n)
{
    return (uint32_t)(isoprof_rng_next(r) % n);
}

static void shuffle16(struct isoprof_rng *r, uint16_t *a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = rnd_below(r, (uint32_t)i);
        uint16_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

static void program_files(struct program *p, struct isoprof_rng *r)
{
    for (int i = 0; i < NFILE; i++) {
        struct file *f = &p->files[i];
        if (i < NINTERNAL)
            snprintf(f->url, sizeof(f->url), "%s", internals[i]);
        else if (i < NINTERNAL + NMODULES)
            snprintf(f->url, sizeof(f->url), "file:///srv/app/node_modules/%s/lib/%s%s.js",
                     packages[(i - NINTERNAL) % ISOPROF_ARRAY_SIZE(packages)],
                     verbs[rnd_below(r, ISOPROF_ARRAY_SIZE(verbs))], nouns[(i * 7) % 20]);
        else
            snprintf(f->url, sizeof(f->url), "file:///srv/app/src/%s/%s%d.js",
                     app_dirs[i % ISOPROF_ARRAY_SIZE(app_dirs)], nouns[(i * 3) % 20], i);
        snprintf(f->script_id, sizeof(f->script_id), "%d", 100 + i);
        f->next_line = 1 + (int)rnd_below(r, 20);
    }
}

/* Functions, their files and callees. Entry points live in node: files;
 * every other function is a possible callee, by a popularity rank. */
static int program_functions(struct program *p, struct isoprof_rng *r)
{
    double *file_cdf = zipf_cdf(NFILE - NINTERNAL, FILE_ZIPF);
    double *fn_cdf = zipf_cdf(NFUNC - NENTRY, FN_ZIPF);
    uint16_t *names = isoprof_calloc(NFUNC, sizeof(*names));
    uint16_t *rank = isoprof_calloc(NFUNC - NENTRY, sizeof(*rank));
    int rc = -ENOMEM;
    if (file_cdf == NULL || fn_cdf == NULL || names == NULL || rank == NULL)
        goto out;
    /* Names verb x noun x suffix, each used once, dealt at random. */
    for (uint16_t i = 0; i < NFUNC; i++)
        names[i] = i;
    shuffle16(r, names, NFUNC);
    for (uint16_t i = 0; i < NFUNC - NENTRY; i++)
        rank[i] = (uint16_t)(NENTRY + i);
    shuffle16(r, rank, NFUNC - NENTRY);
    for (int i = 0; i < NFUNC; i++) {
        struct fn *f = &p->fns[i];
        if (i < NENTRY) {
            snprintf(f->name, sizeof(f->name), "%s", entries[i]);
            f->file = (uint16_t)(i % NINTERNAL);
        } else {
            unsigned k = names[i];
            if (rnd_below(r, 100) < 4) /* closures: "(anonymous)" in pprof */
                f->name[0] = '\0';
            else
                snprintf(f->name, sizeof(f->name), "%s%s%s", verbs[k % 20], nouns[(k / 20) % 20],
                         suffixes[k / 400]);
            /* A few calls into node: internals, the rest libraries and app. */
            if (rnd_below(r, 100) < 5)
                f->file = (uint16_t)rnd_below(r, NINTERNAL);
            else
                f->file = (uint16_t)(NINTERNAL + zipf_pick(file_cdf, NFILE - NINTERNAL,
                                                           isoprof_rng_unit(r)));
        }
        struct file *fl = &p->files[f->file];
        f->line = fl->next_line;
        fl->next_line += 3 + (int)rnd_below(r, 60);
        f->col = (int)rnd_below(r, 40);
        f->ncallee = (uint16_t)(MIN_CALLEES + rnd_below(r, MAX_CALLEES - MIN_CALLEES + 1));
        for (int j = 0; j < f->ncallee; j++) {
            uint16_t c;
            do
                c = rank[zipf_pick(fn_cdf, NFUNC - NENTRY, isoprof_rng_unit(r))];
            while (c == i);
            f->callee[j] = c;
        }
    }
    /* The VM's own nodes, children of (root). */
    snprintf(p->fns[FN_PROGRAM].name, sizeof(p->fns[0].name), "(program)");
    snprintf(p->fns[FN_GC].name, sizeof(p->fns[0].name), "(garbage collector)");
    rc = 0;
out:
    isoprof_free(file_cdf);
    isoprof_free(fn_cdf);
    isoprof_free(names);
    isoprof_free(rank);
    return rc;
}

static uint64_t path_hash(const uint16_t *f, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= f[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

/* PATHS distinct walks down the call graph, each from an entry point. */
static int program_paths(struct program *p, struct isoprof_rng *r)
{
    size_t slots = 1;
    while (slots < 2 * PATHS)
        slots <<= 1;
    uint32_t *table = isoprof_calloc(slots, sizeof(*table)); /* path index + 1 */
    double *entry_cdf = zipf_cdf(NENTRY, 1.0);
    double *callee_cdf = zipf_cdf(MAX_CALLEES, CALLEE_ZIPF);
    p->paths = isoprof_calloc(PATHS, sizeof(*p->paths));
    p->frames = isoprof_calloc((size_t)PATHS * MAX_DEPTH, sizeof(*p->frames));
    p->path_cdf = zipf_cdf(PATHS, PATH_ZIPF);
    int rc = -ENOMEM;
    if (table == NULL || entry_cdf == NULL || callee_cdf == NULL || p->paths == NULL ||
        p->frames == NULL || p->path_cdf == NULL)
        goto out;
    size_t made = 0, tries = 0;
    while (made < PATHS) {
        if (++tries > (size_t)PATHS * 20) {
            rc = -EAGAIN; /* the program has too few distinct walks */
            goto out;
        }
        uint16_t *f = p->frames + p->nframes;
        /* Depth: the mean of two uniforms, so mid-depth stacks are common. */
        double u = (isoprof_rng_unit(r) + isoprof_rng_unit(r)) / 2;
        size_t depth = MIN_DEPTH + (size_t)(u * (MAX_DEPTH - MIN_DEPTH + 1));
        f[0] = (uint16_t)zipf_pick(entry_cdf, NENTRY, isoprof_rng_unit(r));
        for (size_t d = 1; d < depth; d++) {
            const struct fn *c = &p->fns[f[d - 1]];
            f[d] = c->callee[zipf_pick(callee_cdf, c->ncallee, isoprof_rng_unit(r))];
        }
        uint64_t h = path_hash(f, depth);
        size_t at = (size_t)h & (slots - 1);
        int dup = 0;
        while (table[at] != 0) {
            const struct path *q = &p->paths[table[at] - 1];
            if (q->depth == depth && memcmp(p->frames + q->off, f, depth * sizeof(*f)) == 0) {
                dup = 1;
                break;
            }
            at = (at + 1) & (slots - 1);
        }
        if (dup)
            continue;
        p->paths[made] = (struct path){(uint32_t)p->nframes, (uint16_t)depth};
        table[at] = (uint32_t)++made;
        p->nframes += depth;
    }
    rc = 0;
out:
    isoprof_free(table);
    isoprof_free(entry_cdf);
    isoprof_free(callee_cdf);
    return rc;
}

static void program_free(struct program *p)
{
    isoprof_free(p->paths);
    isoprof_free(p->frames);
    isoprof_free(p->path_cdf);
}

/* The child of node parent for function fn, made if missing; UINT32_MAX
 * when out of memory. */
static uint32_t tree_child(struct window_ctx *w, uint32_t parent, uint32_t fn)
{
    for (uint32_t c = w->nodes[parent].first_child; c != 0; c = w->nodes[c].next_sibling)
        if (w->nodes[c].fn == fn)
            return c;
    if (w->nnodes == w->cap) {
        size_t cap = w->cap * 2;
        struct tnode *n = isoprof_realloc(w->nodes, cap * sizeof(*n));
        if (n == NULL)
            return UINT32_MAX;
        w->nodes = n;
        w->cap = cap;
    }
    uint32_t k = (uint32_t)w->nnodes++;
    w->nodes[k] = (struct tnode){.fn = fn};
    if (w->nodes[parent].first_child == 0)
        w->nodes[parent].first_child = k;
    else
        w->nodes[w->nodes[parent].last_child].next_sibling = k;
    w->nodes[parent].last_child = k;
    return k;
}

/* One window: nsamples samples drawn with r, as a CDP profile starting at
 * start_ns (its call tree, then samples in the order drawn) in w->json.
 * Leaves w->path_hits all zero again. Returns 0, -ENOMEM or the buffer's
 * ISOPROF_ETOOBIG. */
static int window_json(const struct program *p, struct window_ctx *w, struct isoprof_rng *r,
                       uint64_t start_ns, size_t nsamples)
{
    w->nnodes = 1;
    w->nodes[0] = (struct tnode){.fn = UINT32_MAX};
    w->ntouched = 0;
    for (size_t i = 0; i < nsamples; i++) {
        uint32_t u = rnd_below(r, 1000), d;
        if (u < 10)
            d = PATHS; /* (program) */
        else if (u < 30)
            d = PATHS + 1; /* (garbage collector) */
        else
            d = (uint32_t)zipf_pick(p->path_cdf, PATHS, isoprof_rng_unit(r));
        w->draws[i] = d;
        if (d < PATHS && w->path_hits[d]++ == 0)
            w->touched[w->ntouched++] = d;
    }
    uint32_t special[2] = {0, 0};
    for (size_t i = 0; i < nsamples; i++) {
        uint32_t d = w->draws[i], leaf;
        if (d >= PATHS) {
            if (special[d - PATHS] == 0 &&
                (special[d - PATHS] = tree_child(w, 0, FN_PROGRAM + (d - PATHS))) == UINT32_MAX)
                return -ENOMEM;
            leaf = special[d - PATHS];
        } else if (w->path_hits[d] != 0) {
            const struct path *q = &p->paths[d];
            leaf = 0;
            for (size_t j = 0; j < q->depth; j++)
                if ((leaf = tree_child(w, leaf, p->frames[q->off + j])) == UINT32_MAX)
                    return -ENOMEM;
            w->path_leaf[d] = leaf;
            w->path_hits[d] = 0; /* its leaf is known from now on */
        } else {
            leaf = w->path_leaf[d];
        }
        w->nodes[leaf].hits++;
        w->draws[i] = leaf;
    }

    struct isoprof_buf *b = &w->json;
    isoprof_buf_reset(b);
    isoprof_buf_puts(b, "{\"nodes\":[");
    for (size_t k = 0; k < w->nnodes; k++) {
        const struct tnode *n = &w->nodes[k];
        const char *name = "(root)", *url = "", *sid = "0";
        int line = -1, col = -1;
        if (k > 0) {
            const struct fn *f = &p->fns[n->fn];
            name = f->name;
            if (n->fn < NFUNC) {
                url = p->files[f->file].url;
                sid = p->files[f->file].script_id;
                line = f->line - 1; /* V8's are 0-based */
                col = f->col;
            }
        }
        isoprof_buf_printf(b, "%s{\"id\":%zu,\"callFrame\":{\"functionName\":", k ? "," : "",
                           k + 1);
        isoprof_json_str(b, name);
        isoprof_buf_puts(b, ",\"scriptId\":");
        isoprof_json_str(b, sid);
        isoprof_buf_puts(b, ",\"url\":");
        isoprof_json_str(b, url);
        isoprof_buf_printf(b, ",\"lineNumber\":%d,\"columnNumber\":%d},\"hitCount\":%" PRIu32
                              ",\"children\":[",
                           line, col, n->hits);
        for (uint32_t c = n->first_child; c != 0; c = w->nodes[c].next_sibling)
            isoprof_buf_printf(b, "%s%" PRIu32, c == n->first_child ? "" : ",", c + 1);
        isoprof_buf_puts(b, "]}");
    }
    uint64_t t0 = start_ns / 1000, span = WINDOW_NS / 1000;
    isoprof_buf_printf(b, "],\"startTime\":%" PRIu64 ",\"endTime\":%" PRIu64 ",\"samples\":[", t0,
                       t0 + span);
    for (size_t i = 0; i < nsamples; i++)
        isoprof_buf_printf(b, "%s%" PRIu32, i ? "," : "", w->draws[i] + 1);
    isoprof_buf_puts(b, "],\"timeDeltas\":[");
    uint64_t step = span / (nsamples + 1);
    for (size_t i = 0; i < nsamples; i++)
        isoprof_buf_printf(b, "%s%" PRIu64, i ? "," : "", step);
    isoprof_buf_puts(b, "]}");
    return b->err;
}

static void bufs_free(struct pprof_buf *bufs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        pprof_buf_free(&bufs[i]);
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: flame_fill DIR N [SEED]\n");
        return 2;
    }
    char *end;
    errno = 0;
    unsigned long long n = strtoull(argv[2], &end, 10);
    if (errno || *end || argv[2][0] == '-' || n == 0 || n > 1000000) {
        fprintf(stderr, "flame_fill: N must be 1..1000000, not '%s'\n", argv[2]);
        return 2;
    }
    uint64_t seed = 1;
    if (argc == 4) {
        seed = strtoull(argv[3], &end, 0);
        if (errno || *end || argv[3][0] == '\0') {
            fprintf(stderr, "flame_fill: SEED must be a number, not '%s'\n", argv[3]);
            return 2;
        }
    }
    char mdb[4096];
    struct stat sb;
    snprintf(mdb, sizeof(mdb), "%s/data.mdb", argv[1]);
    if (stat(mdb, &sb) == 0) {
        fprintf(stderr, "flame_fill: %s already holds a store\n", argv[1]);
        return 2;
    }

    uint64_t t_start = isoprof_now_mono_ns();
    static struct program prog;
    struct isoprof_rng r;
    isoprof_rng_seed(&r, seed * 0x9e3779b97f4a7c15ull + 1);
    program_files(&prog, &r);
    int rc = program_functions(&prog, &r);
    if (rc == 0)
        rc = program_paths(&prog, &r);
    if (rc != 0) {
        program_free(&prog);
        return fail("making the program", rc,
                    rc == -EAGAIN ? "the call graph has too few distinct paths" : NULL);
    }

    struct window_ctx w = {.cap = 4096};
    w.nodes = isoprof_calloc(w.cap, sizeof(*w.nodes));
    w.path_hits = isoprof_calloc(PATHS, sizeof(*w.path_hits));
    w.path_leaf = isoprof_calloc(PATHS, sizeof(*w.path_leaf));
    w.touched = isoprof_calloc(SAMPLES + SAMPLES_JITTER, sizeof(*w.touched));
    w.draws = isoprof_calloc(SAMPLES + SAMPLES_JITTER, sizeof(*w.draws));
    uint8_t *seen = isoprof_calloc(PATHS + 2, 1);
    uint8_t *fn_seen = isoprof_calloc(NFUNC, 1);
    isoprof_buf_init(&w.json, JSON_MAX);
    struct store *s = NULL;
    static struct store_record recs[BATCH];
    static struct pprof_buf bufs[BATCH]; /* the pprof of recs[i] */
    size_t nrecs = 0;
    int status = 1;
    if (w.nodes == NULL || w.path_hits == NULL || w.path_leaf == NULL || w.touched == NULL ||
        w.draws == NULL || seen == NULL || fn_seen == NULL) {
        fail("setup", -ENOMEM, NULL);
        goto out;
    }
    char *why = NULL;
    if ((rc = store_open(argv[1], NULL, &s, &why)) != 0) {
        fail("store_open", rc, why);
        isoprof_free(why);
        goto out;
    }

    uint64_t now = isoprof_now_wall_ns();
    uint64_t samples = 0, json_bytes = 0, pprof_bytes = 0, stacks_sum = 0;
    for (uint64_t k = 0; k < n; k++) {
        struct isoprof_rng wr;
        isoprof_rng_seed(&wr, (seed * 0x9e3779b97f4a7c15ull) ^ ((k + 1) * 0xbf58476d1ce4e5b9ull));
        size_t ns = SAMPLES - SAMPLES_JITTER + rnd_below(&wr, 2 * SAMPLES_JITTER + 1);
        uint64_t start_ns = now - (n - k) * WINDOW_NS;
        if ((rc = window_json(&prog, &w, &wr, start_ns, ns)) != 0) {
            fail("making a profile", rc, NULL);
            goto out;
        }
        /* Its distinct stacks, and what they add to the union. */
        uint32_t distinct = w.ntouched;
        for (uint32_t i = 0; i < w.ntouched; i++) {
            const struct path *q = &prog.paths[w.touched[i]];
            seen[w.touched[i]] = 1;
            for (size_t j = 0; j < q->depth; j++)
                fn_seen[prog.frames[q->off + j]] = 1;
        }
        for (uint32_t c = w.nodes[0].first_child; c != 0; c = w.nodes[c].next_sibling) {
            if (w.nodes[c].fn >= FN_PROGRAM) {
                distinct++;
                seen[PATHS + w.nodes[c].fn - FN_PROGRAM] = 1;
            }
        }
        stacks_sum += distinct;

        struct pprof_cpu_opts po = {.interval_ns = 1000000};
        struct pprof_result res;
        why = NULL;
        if ((rc = pprof_from_cpu_json(w.json.data, w.json.len, &po, &res, &why)) != 0) {
            fprintf(stderr, "flame_fill: window %" PRIu64 ": ", k);
            fail("pprof_from_cpu_json", rc, why);
            isoprof_free(why);
            goto out;
        }
        json_bytes += w.json.len;
        pprof_bytes += res.pprof.len;
        samples += res.samples;
        bufs[nrecs] = res.pprof;
        struct store_record *rec = &recs[nrecs++];
        memset(rec, 0, sizeof(*rec));
        rec->w.worker = "bench";
        rec->w.version = "v1";
        rec->w.runtime = "node";
        rec->w.type = STORE_TYPE_CPU;
        rec->w.start_ns = start_ns;
        rec->w.end_ns = start_ns + WINDOW_NS;
        rec->w.samples = res.samples;
        rec->w.interval = 1000000;
        rec->pprof = res.pprof.data;
        rec->len = res.pprof.len;
        if (nrecs == BATCH || k + 1 == n) {
            struct store_put_stats st = {0};
            rc = store_put(s, recs, nrecs, &st);
            bufs_free(bufs, nrecs);
            nrecs = 0;
            if (rc != 0) {
                fail("store_put", rc, NULL);
                goto out;
            }
            if (st.evicted) {
                fprintf(stderr, "flame_fill: the store's budget evicted %" PRIu64 " windows\n",
                        st.evicted);
                goto out;
            }
        }
    }
    uint64_t nfn = 0, union_stacks = 0;
    for (size_t i = 0; i < NFUNC; i++)
        nfn += fn_seen[i];
    for (size_t i = 0; i < PATHS + 2; i++)
        union_stacks += seen[i];
    store_close(s);
    s = NULL;
    uint64_t store_bytes = stat(mdb, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    printf("windows=%llu samples=%" PRIu64 " distinct_stacks=%" PRIu64
           " stacks_per_window=%.1f functions=%" PRIu64 " json_bytes=%" PRIu64
           " pprof_bytes=%" PRIu64 " store_bytes=%" PRIu64 " seconds=%.2f\n",
           n, samples, union_stacks, (double)stacks_sum / (double)n, nfn, json_bytes, pprof_bytes,
           store_bytes, (double)(isoprof_now_mono_ns() - t_start) / 1e9);
    status = 0;
out:
    bufs_free(bufs, nrecs);
    if (s != NULL)
        store_close(s);
    isoprof_buf_free(&w.json);
    isoprof_free(w.nodes);
    isoprof_free(w.path_hits);
    isoprof_free(w.path_leaf);
    isoprof_free(w.touched);
    isoprof_free(w.draws);
    isoprof_free(seen);
    isoprof_free(fn_seen);
    program_free(&prog);
    return status;
}

/*
 * v8conv.c - a parsed V8 profile (v8json.c) to pprof: the CPU tree resolved
 * (parents from children lists, checked so that a broken or hostile
 * profile is an error, not a crash or a loop), walked parent-before-child
 * without recursion, each node's frame through the source map mapper, and
 * fed to the builder (pprof.c); pprof_from_cpu_json and
 * pprof_from_heap_json. See pprof.c for the design.
 */
#include "pprof_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The frame through the mapper: a Location of the original position, or
 * 0 when the mapper did not map it. *unmapped: it said it could have. */
static uint64_t mapped_loc(struct jp *p, const struct vnode *v, bool *unmapped)
{
    struct bld *b = p->b;
    *unmapped = false;
    if (p->mapper == NULL || v->line < 0 || b->err || b->slen[v->url] == 0)
        return 0;
    struct pprof_mapped mo = {0};
    int r = p->mapper->map(p->mapper->arg, (const char *)b->sb.data + b->soff[v->url],
                           b->slen[v->url], v->line, v->col, &mo);
    if (r != 1 || mo.file == NULL) {
        *unmapped = r == 0;
        return 0;
    }
    uint32_t name = v->name;
    if (mo.name != NULL && mo.name[0] != '\0')
        name = bld_str(
            b, p->tmp,
            pprof_utf8_clean((const uint8_t *)mo.name, strlen(mo.name), p->tmp, PPROF_MAX_STRING));
    uint32_t file = bld_str(
        b, p->tmp,
        pprof_utf8_clean((const uint8_t *)mo.file, strlen(mo.file), p->tmp, PPROF_MAX_STRING));
    int64_t line = mo.line > 0 ? mo.line : 0, col = mo.column > 0 ? mo.column : 0;
    struct bline l = {bld_func(b, name, v->name, file, line), line, col};
    return bld_loc(b, &l, 1);
}

static bool fm_eq(const void *ctx, uint32_t idx, const void *key)
{
    const struct fmemo *a = &((const struct jp *)ctx)->fm[idx], *k = key;
    return a->url == k->url && a->name == k->name && a->line == k->line && a->col == k->col;
}

static uint64_t node_loc_uncached(struct jp *p, const struct vnode *v);

static uint64_t node_loc(struct jp *p, const struct vnode *v)
{
    if (p->mapper == NULL)
        return node_loc_uncached(p, v);
    struct fmemo k = {v->url, v->name, v->line, v->col, 0};
    uint32_t h = (uint32_t)hmix(p->b->seed ^ ((uint64_t)v->url << 32 | v->name) ^
                                hmix((uint64_t)(uint32_t)v->line << 32 | (uint32_t)v->col));
    uint32_t i = ht_find(&p->fmh, h, fm_eq, p, &k);
    if (i != NONE)
        return p->fm[i].loc;
    k.loc = node_loc_uncached(p, v);
    if (p->b->err == 0 && (pprof_grow(&p->fm, &p->fmcap, p->nfm + 1, sizeof(*p->fm)) ||
                           ht_add(&p->fmh, h, (uint32_t)p->nfm))) {
        bld_fail(p->b, -ENOMEM);
        return k.loc;
    }
    if (p->b->err == 0)
        p->fm[p->nfm++] = k;
    return k.loc;
}

static uint64_t node_loc_uncached(struct jp *p, const struct vnode *v)
{
    size_t before = p->b->nloc;
    bool unmapped;
    uint64_t id = mapped_loc(p, v, &unmapped);
    if (id != 0) {
        if (p->b->nloc > before)
            p->mapped++;
        return id;
    }
    int64_t line = v->line >= 0 ? (int64_t)v->line + 1 : 0;
    int64_t col = v->col >= 0 ? (int64_t)v->col + 1 : 0;
    struct bline l = {bld_func(p->b, v->name, 0, v->url, line), line, col};
    id = bld_loc(p->b, &l, 1);
    if (unmapped && p->b->nloc > before)
        p->unmapped++;
    return id;
}

/* Feeds the resolved tree to the builder. order: parent before child
 * (NULL: index order, which is pre-order for the heap tree); root is left
 * out of every stack unless it has values of its own. */
static int emit_tree(struct jp *p, const uint32_t *order, uint32_t root, int64_t period)
{
    uint32_t *st = isoprof_calloc(p->nn ? p->nn : 1, sizeof(*st));
    if (st == NULL)
        return -ENOMEM;
    for (size_t k = 0; k < p->nn && !p->b->err; k++) {
        uint32_t i = order ? order[k] : (uint32_t)k;
        struct vnode *v = &p->nd[i];
        uint32_t s;
        if (i == root) {
            st[i] = 0;
            s = v->v0 || v->v1 ? bld_stack(p->b, 0, node_loc(p, v)) : 0;
        } else {
            s = st[i] = bld_stack(p->b, st[v->parent], node_loc(p, v));
        }
        int64_t val[2];
        if (p->heap) {
            val[0] = v->v0;
            val[1] = v->v1;
        } else {
            val[0] = v->v0;
            val[1] = pprof_sat_mul(v->v0, period);
        }
        if (val[0] || val[1])
            bld_add(p->b, s, val);
    }
    isoprof_free(st);
    return p->b->err;
}

static void fill_meta(struct bld *b, struct bmeta *m, bool heap)
{
    m->st_type[0] = bld_cstr(b, heap ? "inuse_objects" : "samples");
    m->st_unit[0] = bld_cstr(b, "count");
    m->st_type[1] = bld_cstr(b, heap ? "inuse_space" : "cpu");
    m->st_unit[1] = bld_cstr(b, heap ? "bytes" : "nanoseconds");
    m->pt_type = bld_cstr(b, heap ? "space" : "cpu");
    m->pt_unit = bld_cstr(b, heap ? "bytes" : "nanoseconds");
}

/* CPU: parents from children lists, the root, and a breadth-first order. */
static int cpu_resolve(struct jp *p, uint32_t **order_out, uint32_t *root_out)
{
    char w[64];
    if (!p->have_nodes || !p->have_start || !p->have_end)
        return v8_fail(p, ISOPROF_EPROFILE,
                       "no CPU profile in the reply (needs nodes, startTime, endTime)");
    if (p->nn == 0)
        return v8_fail(p, ISOPROF_EPROFILE, "profile has no nodes");
    if (p->have_samples != p->have_deltas || p->nsamples != p->ndeltas)
        return v8_fail(p, ISOPROF_EPROFILE, "%" PRIu64 " samples but %" PRIu64 " timeDeltas",
                       p->nsamples, p->ndeltas);
    if (p->end < p->start)
        return v8_fail(p, ISOPROF_EPROFILE, "endTime %lld is before startTime %lld",
                       (long long)p->end, (long long)p->start);
    /* A sample naming no node of the tree is counted and left out, not a
     * reason to lose the window: the totals follow hitCount anyway. */
    for (size_t i = 0; i < p->np; i++)
        if (v8_id_find(p, p->pend[i]) == NONE)
            p->orphans++;
    uint64_t hits = 0;
    for (size_t i = 0; i < p->nn; i++) {
        struct vnode *v = &p->nd[i];
        hits += (uint64_t)v->v0;
        for (uint32_t k = v->kid0; k < v->kid0 + v->nkid; k++) {
            uint32_t j = v8_id_find(p, p->kids[k]);
            if (j == NONE)
                return v8_fail(p, ISOPROF_EPROFILE, "%s: child %u is unknown",
                               v8_where(p, w, sizeof(w), (uint32_t)i), p->kids[k]);
            if (p->nd[j].parent != NONE)
                return v8_fail(p, ISOPROF_EPROFILE, "%s: child %u is also a child of node %u",
                               v8_where(p, w, sizeof(w), (uint32_t)i), p->kids[k],
                               p->nd[p->nd[j].parent].id);
            p->nd[j].parent = (uint32_t)i;
            p->kids[k] = j;
        }
    }
    /* No check of hits against samples.length: Node 20 under setImmediate
     * load reports more hits than samples (974 against 935 seen), so the
     * two are not held to each other; hitCount is what the totals follow. */
    (void)hits;
    uint32_t root = NONE;
    for (size_t i = 0; i < p->nn; i++) {
        if (p->nd[i].parent != NONE)
            continue;
        if (root != NONE)
            return v8_fail(p, ISOPROF_EPROFILE, "several roots (node %u and node %u)",
                           p->nd[root].id, p->nd[i].id);
        root = (uint32_t)i;
    }
    if (root == NONE)
        return v8_fail(p, ISOPROF_EPROFILE, "no root: the children lists form a cycle");
    uint32_t *order = isoprof_malloc(p->nn * sizeof(*order));
    if (order == NULL)
        return v8_nomem(p);
    /* Every node has at most one parent, so from the root each is queued at
     * most once; what the walk misses hangs in a cycle. */
    size_t head = 0, tail = 0;
    order[tail++] = root;
    while (head < tail) {
        const struct vnode *v = &p->nd[order[head++]];
        for (uint32_t k = v->kid0; k < v->kid0 + v->nkid; k++)
            order[tail++] = p->kids[k];
    }
    if (tail != p->nn) {
        isoprof_free(order);
        return v8_fail(p, ISOPROF_EPROFILE,
                       "the children lists form a cycle (%zu nodes unreachable from the root)",
                       p->nn - tail);
    }
    *order_out = order;
    *root_out = root;
    return 1;
}

/* Serializes what b holds, with the metadata m of a CPU or heap profile,
 * into out; the other fields of out from the arguments. Returns bld_finish's
 * error, out untouched then. */
static int conv_output(struct bld *b, struct bmeta *m, bool heap, uint64_t samples,
                       uint64_t start_ns, uint64_t end_ns, struct pprof_result *out)
{
    fill_meta(b, m, heap);
    struct pprof_buf buf = {0};
    int rc = bld_finish(b, m, &buf);
    if (rc == 0) {
        out->pprof = buf;
        out->samples = samples;
        out->truncated = b->truncated;
        out->mapped = 0;
        out->unmapped = 0;
        out->orphans = 0;
        out->start_ns = start_ns;
        out->end_ns = end_ns;
    }
    return rc;
}

/* What a conversion does once the reply is parsed into p: the profile into
 * p->b and out, with the options opts of pprof_from_cpu_json or
 * pprof_from_heap_json. Returns 0 or an error (its message in p->why). */
typedef int (*conv_body_fn)(struct jp *p, const void *opts, struct pprof_result *out);

/*
 * The frame of both conversions: checks the arguments, sets a parser up
 * (heap or CPU, at most max_nodes nodes) over a builder capped for a
 * len-byte reply, parses json, lets body build the profile, hands the
 * message of a failure to *why (when asked for) and frees what it set up.
 */
static int conv_run(const char *json, size_t len, bool heap, size_t max_nodes, conv_body_fn body,
                    const void *opts, struct pprof_result *out, char **why)
{
    struct bld b;
    struct jp *p;
    int rc;
    if ((json == NULL && len) || out == NULL)
        return -EINVAL;
    /* The parser holds two string scratch buffers: on the heap, not on a
     * thread-pool stack. */
    if ((p = isoprof_malloc(sizeof(*p))) == NULL)
        return -ENOMEM;
    if ((rc = v8_jp_init(p, &b, heap, max_nodes)) == 0) {
        p->mapper = heap ? ((const struct pprof_heap_opts *)opts)->mapper
                         : ((const struct pprof_cpu_opts *)opts)->mapper;
        b.limit = pprof_output_cap(len);
        if ((rc = v8_jp_parse(p, json, len)) == 0)
            rc = body(p, opts, out);
        if (rc == 0) {
            out->mapped = p->mapped;
            out->unmapped = p->unmapped;
            out->orphans = p->orphans;
        }
    }
    /* A no-op when the error came from the parse or the checks: jfail
     * keeps the first message. */
    if (rc == ISOPROF_ETOOBIG)
        v8_fail(p, rc, "pprof output past %zu bytes (the cap for a %zu-byte reply)", b.limit, len);
    if (why && p->why) {
        *why = p->why;
        p->why = NULL;
    }
    v8_jp_free(p);
    isoprof_free(p);
    bld_free(&b);
    return rc;
}

static int cpu_convert(struct jp *p, const void *opts, struct pprof_result *out)
{
    const struct pprof_cpu_opts *o = opts;
    uint32_t *order = NULL, root = 0;
    if (!cpu_resolve(p, &order, &root))
        return p->err;
    int64_t wall0, wall1;
    if (__builtin_add_overflow(p->start * 1000, o->wall_minus_mono_ns, &wall0) ||
        __builtin_add_overflow(p->end * 1000, o->wall_minus_mono_ns, &wall1) || wall0 < 0) {
        isoprof_free(order);
        v8_fail(p, ISOPROF_EPROFILE, "startTime/endTime out of range");
        return p->err;
    }
    int64_t duration = (p->end - p->start) * 1000;
    int64_t period = o->interval_ns <= (uint64_t)INT64_MAX ? (int64_t)o->interval_ns : INT64_MAX;
    if (period == 0 && p->nsamples > 0)
        period = duration / (int64_t)p->nsamples;
    int rc = emit_tree(p, order, root, period);
    isoprof_free(order);
    if (rc != 0)
        return rc;
    struct bmeta m = {.period = period, .time = wall0, .duration = duration};
    uint64_t hits = 0;
    for (size_t i = 0; i < p->nn; i++)
        hits += (uint64_t)p->nd[i].v0;
    return conv_output(p->b, &m, false, hits, (uint64_t)wall0, (uint64_t)wall1, out);
}

int pprof_from_cpu_json(const char *json, size_t len, const struct pprof_cpu_opts *o,
                        struct pprof_result *out, char **why)
{
    static const struct pprof_cpu_opts defaults;
    if (o == NULL)
        o = &defaults;
    return conv_run(json, len, false, o->max_nodes, cpu_convert, o, out, why);
}

static int heap_convert(struct jp *p, const void *opts, struct pprof_result *out)
{
    const struct pprof_heap_opts *o = opts;
    if (!p->have_head || p->nn == 0) {
        v8_fail(p, ISOPROF_EPROFILE, "no heap profile in the reply (needs head)");
        return p->err;
    }
    if (!v8_build_index(p))
        return p->err;
    for (size_t i = 0; i + 3 <= p->np; i += 3) {
        /* Node 20's sampling heap profiler, in a worker thread, has named
         * a node its tree did not hold (one sample of a window, seen once
         * in ~8 suite runs): that sample is counted and left out, the rest
         * of the window kept. */
        uint32_t j = v8_id_find(p, p->pend[i]);
        if (j == NONE) {
            p->orphans++;
            continue;
        }
        int64_t size = (int64_t)((uint64_t)p->pend[i + 1] | (uint64_t)p->pend[i + 2] << 32);
        p->nd[j].v0++;
        p->nd[j].v1 = pprof_sat_add(p->nd[j].v1, size);
    }
    if (!p->have_samples)
        for (size_t i = 0; i < p->nn; i++)
            p->nd[i].v1 = p->nd[i].self;
    int rc = emit_tree(p, NULL, 0, 0);
    if (rc != 0)
        return rc;
    int64_t t = o->time_ns <= (uint64_t)INT64_MAX ? (int64_t)o->time_ns : INT64_MAX;
    int64_t period =
        o->interval_bytes <= (uint64_t)INT64_MAX ? (int64_t)o->interval_bytes : INT64_MAX;
    struct bmeta m = {.period = period, .time = t};
    return conv_output(p->b, &m, true, p->nsamples - p->orphans, (uint64_t)t, (uint64_t)t, out);
}

int pprof_from_heap_json(const char *json, size_t len, const struct pprof_heap_opts *o,
                         struct pprof_result *out, char **why)
{
    static const struct pprof_heap_opts defaults;
    if (o == NULL)
        o = &defaults;
    return conv_run(json, len, true, o->max_nodes, heap_convert, o, out, why);
}

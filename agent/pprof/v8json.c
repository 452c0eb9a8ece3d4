/*
 * v8json.c - V8 CPU and heap profiles (CDP JSON) to pprof: one streaming
 * pass with yajl's callback parser, the tree resolved and checked, then fed
 * to the builder (pprof.c). See pprof.c for the design.
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

#include <yajl/yajl_parse.h>

/* --- V8 JSON parser --- */

enum jctx {
    J_TOP,
    J_RESULT,
    J_ERROR,
    J_PROFILE,
    J_NODES,
    J_NODE,
    J_FRAME,
    J_CHILDREN,
    J_SAMPLES,
    J_DELTAS,
    J_HNODE,
    J_HCHILDREN,
    J_HSAMPLES,
    J_HSAMPLE,
};

enum jkey {
    K_NONE,
    K_SKIP,
    K_RESULT,
    K_ERROR,
    K_PROFILE,
    K_MESSAGE,
    K_NODES,
    K_START,
    K_END,
    K_SAMPLES,
    K_DELTAS,
    K_ID,
    K_FRAME,
    K_HIT,
    K_CHILDREN,
    K_FNAME,
    K_URL,
    K_LINE,
    K_COL,
    K_HEAD,
    K_SELF,
    K_SIZE,
    K_NODEID,
};

struct jframe {
    uint8_t ctx, key;
    uint32_t seen; /* keys seen in this object, 1 << K_* */
    uint32_t node;
};

struct vnode {
    uint32_t id, name, url;
    int32_t line, col; /* 0-based, -1 unknown */
    uint32_t parent, kid0, nkid;
    int64_t v0;   /* CPU: hitCount; heap: sampled objects */
    int64_t v1;   /* heap: sampled bytes */
    int64_t self; /* heap: selfSize */
};

struct jp {
    bool heap;
    int err;
    char *why;
    size_t max_nodes;
    struct bld *b;
    uint32_t anon; /* "(anonymous)" */
    struct jframe *fr;
    size_t nfr, frcap;
    size_t skip; /* nesting depth of a value being skipped */
    bool started;
    struct vnode *nd;
    size_t nn, ncap;
    uint32_t *kids; /* CPU child ids, resolved to indices at the end */
    size_t nk, kcap;
    struct htab idx; /* node id -> index */
    bool indexed;
    uint32_t *pend; /* CPU samples seen before the index; heap (nodeId, size lo, size hi) */
    size_t np, pcap;
    uint64_t nsamples, ndeltas;
    bool have_nodes, have_start, have_end, have_samples, have_deltas, have_head;
    int64_t start, end;
    int64_t hs_size; /* heap sample being read */
    uint32_t hs_node;
    char *cdp_msg;
    char tmp[PPROF_MAX_STRING + 4];
    char tmp2[PPROF_MAX_STRING + 4];
    const struct pprof_mapper *mapper;
    uint64_t mapped, unmapped; /* new Locations of each kind */
    /* With a mapper: the Location each distinct frame got, so the mapper
     * is asked once a frame, not once a node (a frame recurs in every
     * stack through it). */
    struct fmemo *fm;
    size_t nfm, fmcap;
    struct htab fmh;
};

struct fmemo {
    uint32_t url, name;
    int32_t line, col;
    uint64_t loc;
};

static int jfail(struct jp *p, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int jfail(struct jp *p, int err, const char *fmt, ...)
{
    if (p->err == 0) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        p->err = err;
        p->why = isoprof_strdup(msg);
    }
    return 0; /* cancels the parse */
}

static int jnomem(struct jp *p)
{
    if (p->err == 0)
        p->err = -ENOMEM;
    return 0;
}

/* Where we are, for messages: "nodes[12] (id 40)". */
static const char *jwhere(struct jp *p, char *buf, size_t n, uint32_t node)
{
    if (node == NONE)
        snprintf(buf, n, "profile");
    else if (p->heap)
        snprintf(buf, n, "heap node #%u (id %u)", node, p->nd[node].id);
    else
        snprintf(buf, n, "nodes[%u] (id %u)", node, p->nd[node].id);
    return buf;
}

static bool id_eq(const void *ctx, uint32_t idx, const void *key)
{
    return ((const struct jp *)ctx)->nd[idx].id == *(const uint32_t *)key;
}

static uint32_t id_hash(const struct jp *p, uint32_t id)
{
    return (uint32_t)hmix(p->b->seed ^ id);
}

static uint32_t id_find(const struct jp *p, uint32_t id)
{
    return ht_find(&p->idx, id_hash(p, id), id_eq, p, &id);
}

static int build_index(struct jp *p)
{
    for (size_t i = 0; i < p->nn; i++) {
        uint32_t id = p->nd[i].id;
        uint32_t j = id_find(p, id);
        if (j != NONE)
            return jfail(p, ISOPROF_EPROFILE, "duplicate node id %u (%s #%u and #%zu)", id,
                         p->heap ? "heap node" : "nodes", j, i);
        if (ht_add(&p->idx, id_hash(p, id), (uint32_t)i))
            return jnomem(p);
    }
    p->indexed = true;
    return 1;
}

/* The keys of the schema, by the object they belong to. */
static const struct {
    uint8_t ctx, key, heap; /* heap: 0 CPU only, 1 heap only, 2 both */
    const char *name;
} keys[] = {
    {J_TOP, K_RESULT, 2, "result"},
    {J_TOP, K_ERROR, 2, "error"},
    {J_RESULT, K_PROFILE, 2, "profile"},
    {J_ERROR, K_MESSAGE, 2, "message"},
    {J_PROFILE, K_NODES, 0, "nodes"},
    {J_PROFILE, K_START, 0, "startTime"},
    {J_PROFILE, K_END, 0, "endTime"},
    {J_PROFILE, K_SAMPLES, 2, "samples"},
    {J_PROFILE, K_DELTAS, 0, "timeDeltas"},
    {J_PROFILE, K_HEAD, 1, "head"},
    {J_NODE, K_ID, 0, "id"},
    {J_NODE, K_FRAME, 0, "callFrame"},
    {J_NODE, K_HIT, 0, "hitCount"},
    {J_NODE, K_CHILDREN, 0, "children"},
    {J_FRAME, K_FNAME, 2, "functionName"},
    {J_FRAME, K_URL, 2, "url"},
    {J_FRAME, K_LINE, 2, "lineNumber"},
    {J_FRAME, K_COL, 2, "columnNumber"},
    {J_HNODE, K_ID, 1, "id"},
    {J_HNODE, K_FRAME, 1, "callFrame"},
    {J_HNODE, K_SELF, 1, "selfSize"},
    {J_HNODE, K_CHILDREN, 1, "children"},
    {J_HSAMPLE, K_SIZE, 1, "size"},
    {J_HSAMPLE, K_NODEID, 1, "nodeId"},
};

/* A key's JSON name, for messages. */
static const char *key_name(enum jkey k)
{
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(keys); i++)
        if (keys[i].key == k)
            return keys[i].name;
    return "";
}

static enum jkey key_lookup(const struct jp *p, enum jctx ctx, const char *s, size_t n)
{
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(keys); i++) {
        /* The top level also takes the profile's keys: a bare profile. */
        bool ctx_ok = keys[i].ctx == ctx || (ctx == J_TOP && keys[i].ctx == J_PROFILE);
        bool mode_ok = keys[i].heap == 2 || keys[i].heap == (p->heap ? 1 : 0);
        if (ctx_ok && mode_ok && strlen(keys[i].name) == n && memcmp(keys[i].name, s, n) == 0)
            return (enum jkey)keys[i].key;
    }
    return K_SKIP;
}

static int push(struct jp *p, enum jctx ctx, uint32_t node)
{
    if (p->nfr >= 2 * (size_t)PPROF_MAX_DEPTH + 8)
        return jfail(p, ISOPROF_EPROFILE, "nesting deeper than %d levels", PPROF_MAX_DEPTH);
    if (pprof_grow(&p->fr, &p->frcap, p->nfr + 1, sizeof(*p->fr)))
        return jnomem(p);
    p->fr[p->nfr++] = (struct jframe){.ctx = (uint8_t)ctx, .key = K_NONE, .node = node};
    return 1;
}

static uint32_t new_node(struct jp *p, uint32_t parent)
{
    if (p->nn >= p->max_nodes) {
        jfail(p, ISOPROF_EPROFILE, "more than %zu nodes", p->max_nodes);
        return NONE;
    }
    if (pprof_grow(&p->nd, &p->ncap, p->nn + 1, sizeof(*p->nd))) {
        jnomem(p);
        return NONE;
    }
    p->nd[p->nn] = (struct vnode){
        .name = p->anon, .line = -1, .col = -1, .parent = parent, .kid0 = (uint32_t)p->nk};
    return (uint32_t)p->nn++;
}

/* A profile-level key may appear once, whether at the top or in result.profile. */
static bool *profile_flag(struct jp *p, enum jkey k)
{
    switch (k) {
    case K_NODES:
        return &p->have_nodes;
    case K_START:
        return &p->have_start;
    case K_END:
        return &p->have_end;
    case K_SAMPLES:
        return &p->have_samples;
    case K_DELTAS:
        return &p->have_deltas;
    case K_HEAD:
        return &p->have_head;
    default:
        return NULL;
    }
}

static int j_map_key(void *ctx, const unsigned char *s, size_t n)
{
    struct jp *p = ctx;
    if (p->skip)
        return 1;
    struct jframe *f = &p->fr[p->nfr - 1];
    enum jkey k = key_lookup(p, (enum jctx)f->ctx, (const char *)s, n);
    if (k != K_SKIP) {
        bool *flag = (f->ctx == J_TOP || f->ctx == J_PROFILE) ? profile_flag(p, k) : NULL;
        bool dup = flag ? *flag : (f->seen >> k) & 1;
        if (dup) {
            char w[64];
            return jfail(p, ISOPROF_EPROFILE, "%s: duplicate key \"%s\"",
                         jwhere(p, w, sizeof(w), f->node), key_name(k));
        }
        if (flag)
            *flag = true;
        f->seen |= 1u << k;
    }
    f->key = (uint8_t)k;
    return 1;
}

enum jtype { T_NULL, T_BOOL, T_NUM, T_STR, T_MAP, T_ARR };
static const char *const type_names[] = {"null",     "a boolean", "a number",
                                         "a string", "an object", "an array"};

/* The key an array frame was opened for, for messages. */
static const char *array_name(const struct jframe *f)
{
    switch ((enum jctx)f->ctx) {
    case J_NODES:
        return "nodes";
    case J_CHILDREN:
    case J_HCHILDREN:
        return "children";
    case J_SAMPLES:
    case J_HSAMPLES:
        return "samples";
    case J_DELTAS:
        return "timeDeltas";
    default:
        return "?";
    }
}

static int wrong_type(struct jp *p, const struct jframe *f, enum jkey k, enum jtype got,
                      const char *want)
{
    char w[64];
    if (k == K_NONE) /* an array element */
        return jfail(p, ISOPROF_EPROFILE, "%s: element of \"%s\" is %s, expected %s",
                     jwhere(p, w, sizeof(w), f->node), array_name(f), type_names[got], want);
    return jfail(p, ISOPROF_EPROFILE, "%s: \"%s\" is %s, expected %s",
                 jwhere(p, w, sizeof(w), f->node), key_name(k), type_names[got], want);
}

static int j_open(struct jp *p, enum jtype t)
{
    if (p->skip) {
        if (++p->skip > PPROF_MAX_DEPTH)
            return jfail(p, ISOPROF_EPROFILE, "nesting deeper than %d levels", PPROF_MAX_DEPTH);
        return 1;
    }
    if (p->nfr == 0) {
        if (t != T_MAP)
            return jfail(p, ISOPROF_EPROFILE, "the reply is %s, expected an object", type_names[t]);
        p->started = true;
        return push(p, J_TOP, NONE);
    }
    struct jframe *f = &p->fr[p->nfr - 1];
    enum jkey k = f->key;
    f->key = K_NONE;
    uint32_t node;
    switch ((enum jctx)f->ctx) {
    case J_TOP:
    case J_RESULT:
    case J_ERROR:
    case J_PROFILE:
    case J_NODE:
    case J_FRAME:
    case J_HNODE:
    case J_HSAMPLE:
        switch (k) {
        case K_SKIP:
        case K_NONE:
            p->skip = 1;
            return 1;
        case K_RESULT:
            return t == T_MAP ? push(p, J_RESULT, NONE) : wrong_type(p, f, k, t, "an object");
        case K_ERROR:
            return t == T_MAP ? push(p, J_ERROR, NONE) : wrong_type(p, f, k, t, "an object");
        case K_PROFILE:
            return t == T_MAP ? push(p, J_PROFILE, NONE) : wrong_type(p, f, k, t, "an object");
        case K_NODES:
            return t == T_ARR ? push(p, J_NODES, NONE) : wrong_type(p, f, k, t, "an array");
        case K_SAMPLES:
            if (t != T_ARR)
                return wrong_type(p, f, k, t, "an array");
            return push(p, p->heap ? J_HSAMPLES : J_SAMPLES, NONE);
        case K_DELTAS:
            return t == T_ARR ? push(p, J_DELTAS, NONE) : wrong_type(p, f, k, t, "an array");
        case K_HEAD:
            if (t != T_MAP)
                return wrong_type(p, f, k, t, "an object");
            if ((node = new_node(p, NONE)) == NONE)
                return 0;
            return push(p, J_HNODE, node);
        case K_FRAME:
            return t == T_MAP ? push(p, J_FRAME, f->node) : wrong_type(p, f, k, t, "an object");
        case K_CHILDREN:
            if (t != T_ARR)
                return wrong_type(p, f, k, t, "an array");
            p->nd[f->node].kid0 = (uint32_t)p->nk;
            return push(p, f->ctx == J_NODE ? J_CHILDREN : J_HCHILDREN, f->node);
        default:
            return wrong_type(
                p, f, k, t, k == K_MESSAGE || k == K_FNAME || k == K_URL ? "a string" : "a number");
        }
    case J_NODES:
        if (t != T_MAP)
            return wrong_type(p, f, K_NONE, t, "an object");
        if ((node = new_node(p, NONE)) == NONE)
            return 0;
        return push(p, J_NODE, node);
    case J_HCHILDREN:
        if (t != T_MAP)
            return wrong_type(p, f, K_NONE, t, "an object");
        if ((node = new_node(p, f->node)) == NONE)
            return 0;
        return push(p, J_HNODE, node);
    case J_HSAMPLES:
        if (t != T_MAP)
            return wrong_type(p, f, K_NONE, t, "an object");
        p->hs_size = 0;
        p->hs_node = 0;
        return push(p, J_HSAMPLE, NONE);
    case J_CHILDREN:
    case J_SAMPLES:
    case J_DELTAS:
        return wrong_type(p, f, K_NONE, t, "an integer");
    }
    return 1;
}

/* Parses a JSON number that must be an integer in [lo, hi]. V8 writes
 * integers; a runtime that writes 12.0 or 1.2e3 is accepted when the value
 * is integral. */
static bool num_int(const char *s, size_t n, int64_t lo, int64_t hi, int64_t *out)
{
    size_t i = 0;
    bool neg = false;
    uint64_t v = 0;
    if (i < n && s[i] == '-')
        neg = true, i++;
    size_t d0 = i;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (i == n && i > d0) {
        if (v > (uint64_t)INT64_MAX)
            return false;
        int64_t x = neg ? -(int64_t)v : (int64_t)v;
        if (x < lo || x > hi)
            return false;
        *out = x;
        return true;
    }
    char buf[64];
    if (n >= sizeof(buf))
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    double d = strtod(buf, &end);
    /* 2^63 is where a double stops fitting an int64_t (the cast would be
     * undefined); (double)INT64_MAX rounds up to it. */
    if (*end != '\0' || !(d >= (double)lo && d < 9223372036854775808.0))
        return false;
    int64_t x = (int64_t)d;
    if ((double)x != d || x < lo || x > hi)
        return false;
    *out = x;
    return true;
}

static int need_int(struct jp *p, const struct jframe *f, enum jkey k, enum jtype t, const char *s,
                    size_t n, int64_t lo, int64_t hi, int64_t *out)
{
    if (t != T_NUM)
        return wrong_type(p, f, k, t, "an integer");
    if (!num_int(s, n, lo, hi, out)) {
        char w[64];
        return jfail(p, ISOPROF_EPROFILE, "%s: \"%s\" is %.*s, expected an integer in [%lld, %lld]",
                     jwhere(p, w, sizeof(w), f->node), k ? key_name(k) : array_name(f),
                     (int)(n > 40 ? 40 : n), s, (long long)lo, (long long)hi);
    }
    return 1;
}

/* A name or url into the pool: file:// urls become paths, bad UTF-8 and NUL
 * become U+FFFD, and the result is cut at PPROF_MAX_STRING bytes. */
static uint32_t intern_frame_string(struct jp *p, enum jkey k, const uint8_t *s, size_t n)
{
    if (k == K_URL && n >= 7 && memcmp(s, "file://", 7) == 0) {
        size_t o = 0;
        for (size_t i = 7; i < n && o < PPROF_MAX_STRING; i++) {
            int hi, lo;
            if (s[i] == '%' && i + 2 < n && (hi = isoprof_hexval(s[i + 1])) >= 0 &&
                (lo = isoprof_hexval(s[i + 2])) >= 0) {
                p->tmp2[o++] = (char)(hi << 4 | lo);
                i += 2;
            } else {
                p->tmp2[o++] = (char)s[i];
            }
        }
        s = (const uint8_t *)p->tmp2;
        n = o;
    }
    size_t len = pprof_utf8_clean(s, n, p->tmp, PPROF_MAX_STRING);
    if (k == K_FNAME && len == 0)
        return p->anon;
    return bld_str(p->b, p->tmp, len);
}

static int j_scalar(struct jp *p, enum jtype t, const char *s, size_t n)
{
    if (p->skip)
        return 1;
    if (p->nfr == 0)
        return jfail(p, ISOPROF_EPROFILE, "the reply is %s, expected an object", type_names[t]);
    struct jframe *f = &p->fr[p->nfr - 1];
    enum jkey k = f->key;
    f->key = K_NONE;
    int64_t v = 0;
    struct vnode *nd = f->node != NONE ? &p->nd[f->node] : NULL;
    switch ((enum jctx)f->ctx) {
    case J_NODES:
    case J_HCHILDREN:
    case J_HSAMPLES:
        return wrong_type(p, f, K_NONE, t, "an object");
    case J_CHILDREN:
        if (!need_int(p, f, K_NONE, t, s, n, 0, UINT32_MAX, &v))
            return 0;
        if (p->nk >= (size_t)UINT32_MAX - 1 || p->nk >= 2 * p->max_nodes)
            return jfail(p, ISOPROF_EPROFILE, "more children than nodes");
        if (pprof_grow(&p->kids, &p->kcap, p->nk + 1, sizeof(*p->kids)))
            return jnomem(p);
        p->kids[p->nk++] = (uint32_t)v;
        return 1;
    case J_SAMPLES:
        if (!need_int(p, f, K_NONE, t, s, n, 0, UINT32_MAX, &v))
            return 0;
        if (p->nsamples >= PPROF_MAX_SAMPLES)
            return jfail(p, ISOPROF_EPROFILE, "more than %zu samples", PPROF_MAX_SAMPLES);
        if (p->indexed) {
            if (id_find(p, (uint32_t)v) == NONE)
                return jfail(p, ISOPROF_EPROFILE, "samples[%" PRIu64 "]: node %u is unknown",
                             p->nsamples, (uint32_t)v);
        } else {
            if (p->np >= PPROF_MAX_KEPT_SAMPLES)
                return jfail(p, ISOPROF_EPROFILE, "more than %zu samples before the nodes",
                             PPROF_MAX_KEPT_SAMPLES);
            if (pprof_grow(&p->pend, &p->pcap, p->np + 1, sizeof(*p->pend)))
                return jnomem(p);
            p->pend[p->np++] = (uint32_t)v;
        }
        p->nsamples++;
        return 1;
    case J_DELTAS:
        if (!need_int(p, f, K_NONE, t, s, n, INT64_MIN, INT64_MAX, &v))
            return 0;
        if (p->ndeltas >= PPROF_MAX_SAMPLES)
            return jfail(p, ISOPROF_EPROFILE, "more than %zu timeDeltas", PPROF_MAX_SAMPLES);
        p->ndeltas++;
        return 1;
    default:
        break;
    }
    /* A value in an object. null stands for an absent optional key. */
    if (k == K_SKIP || k == K_NONE || t == T_NULL) {
        if (t == T_NULL && (k == K_ID || k == K_NODEID || k == K_NODES || k == K_HEAD))
            return wrong_type(p, f, k, t, k == K_NODES ? "an array" : "a value");
        return 1;
    }
    switch (k) {
    case K_MESSAGE:
        if (t == T_STR && p->cdp_msg == NULL) {
            size_t len = pprof_utf8_clean((const uint8_t *)s, n, p->tmp, 200);
            if ((p->cdp_msg = isoprof_strndup(p->tmp, len)) == NULL)
                return jnomem(p);
        }
        return 1;
    case K_START:
    case K_END:
        /* µs; the bound keeps µs * 1000 inside int64 */
        if (!need_int(p, f, k, t, s, n, 0, INT64_MAX / 1000, &v))
            return 0;
        *(k == K_START ? &p->start : &p->end) = v;
        return 1;
    case K_ID:
        if (!need_int(p, f, k, t, s, n, 0, UINT32_MAX, &v))
            return 0;
        nd->id = (uint32_t)v;
        return 1;
    case K_HIT:
        if (!need_int(p, f, k, t, s, n, 0, UINT32_MAX, &v))
            return 0;
        nd->v0 = v;
        return 1;
    case K_SELF:
        if (!need_int(p, f, k, t, s, n, 0, INT64_MAX, &v))
            return 0;
        nd->self = v;
        return 1;
    case K_LINE:
    case K_COL:
        if (!need_int(p, f, k, t, s, n, INT64_MIN, INT64_MAX, &v))
            return 0;
        /* negative = unknown; past INT32_MAX is no real line either */
        if (v < 0 || v >= INT32_MAX)
            v = -1;
        *(k == K_LINE ? &nd->line : &nd->col) = (int32_t)v;
        return 1;
    case K_FNAME:
    case K_URL: {
        if (t != T_STR)
            return wrong_type(p, f, k, t, "a string");
        uint32_t i = intern_frame_string(p, k, (const uint8_t *)s, n);
        if (p->b->err)
            return p->b->err == -ENOMEM ? jnomem(p)
                                        : jfail(p, p->b->err, "string pool past its cap");
        *(k == K_FNAME ? &nd->name : &nd->url) = i;
        return 1;
    }
    case K_SIZE:
        if (!need_int(p, f, k, t, s, n, 0, INT64_MAX, &v))
            return 0;
        p->hs_size = v;
        return 1;
    case K_NODEID:
        if (!need_int(p, f, k, t, s, n, 0, UINT32_MAX, &v))
            return 0;
        p->hs_node = (uint32_t)v;
        return 1;
    default:
        return wrong_type(p, f, k, t,
                          k == K_NODES || k == K_SAMPLES || k == K_DELTAS || k == K_CHILDREN
                              ? "an array"
                              : "an object");
    }
}

static int j_close(struct jp *p)
{
    if (p->skip) {
        p->skip--;
        return 1;
    }
    struct jframe *f = &p->fr[p->nfr - 1];
    char w[64];
    switch ((enum jctx)f->ctx) {
    case J_ERROR:
        return jfail(p, ISOPROF_ECDP, "CDP error reply: %s",
                     p->cdp_msg ? p->cdp_msg : "(no message)");
    case J_NODE:
    case J_HNODE:
        if (!((f->seen >> K_ID) & 1))
            return jfail(p, ISOPROF_EPROFILE, "%s: no \"id\"", jwhere(p, w, sizeof(w), f->node));
        if (!((f->seen >> K_FRAME) & 1))
            return jfail(p, ISOPROF_EPROFILE, "%s: no \"callFrame\"",
                         jwhere(p, w, sizeof(w), f->node));
        break;
    case J_CHILDREN:
        p->nd[f->node].nkid = (uint32_t)(p->nk - p->nd[f->node].kid0);
        break;
    case J_NODES:
        /* From here on samples are checked as they stream past. */
        if (!build_index(p))
            return 0;
        break;
    case J_HSAMPLE:
        if (!((f->seen >> K_NODEID) & 1) || !((f->seen >> K_SIZE) & 1))
            return jfail(p, ISOPROF_EPROFILE, "samples[%" PRIu64 "]: needs \"nodeId\" and \"size\"",
                         p->nsamples);
        if (p->nsamples >= PPROF_MAX_KEPT_SAMPLES)
            return jfail(p, ISOPROF_EPROFILE, "more than %zu samples", PPROF_MAX_KEPT_SAMPLES);
        if (pprof_grow(&p->pend, &p->pcap, p->np + 3, sizeof(*p->pend)))
            return jnomem(p);
        p->pend[p->np++] = p->hs_node;
        p->pend[p->np++] = (uint32_t)p->hs_size;
        p->pend[p->np++] = (uint32_t)((uint64_t)p->hs_size >> 32);
        p->nsamples++;
        break;
    default:
        break;
    }
    p->nfr--;
    return 1;
}

static int j_null(void *c)
{
    return j_scalar(c, T_NULL, NULL, 0);
}
static int j_bool(void *c, int v)
{
    (void)v;
    return j_scalar(c, T_BOOL, NULL, 0);
}
static int j_num(void *c, const char *s, size_t n)
{
    return j_scalar(c, T_NUM, s, n);
}
static int j_str(void *c, const unsigned char *s, size_t n)
{
    return j_scalar(c, T_STR, (const char *)s, n);
}
static int j_start_map(void *c)
{
    return j_open(c, T_MAP);
}
static int j_start_array(void *c)
{
    return j_open(c, T_ARR);
}
static int j_end(void *c)
{
    return j_close(c);
}

static const yajl_callbacks jcb = {
    .yajl_null = j_null,
    .yajl_boolean = j_bool,
    .yajl_number = j_num,
    .yajl_string = j_str,
    .yajl_start_map = j_start_map,
    .yajl_map_key = j_map_key,
    .yajl_end_map = j_end,
    .yajl_start_array = j_start_array,
    .yajl_end_array = j_end,
};

static int jp_init(struct jp *p, struct bld *b, bool heap, size_t max_nodes)
{
    memset(p, 0, sizeof(*p));
    p->heap = heap;
    p->b = b;
    p->max_nodes = max_nodes ? max_nodes : PPROF_DEFAULT_MAX_NODES;
    if (p->max_nodes >= UINT32_MAX)
        p->max_nodes = UINT32_MAX - 1;
    if (bld_init(b, 2))
        return -ENOMEM;
    p->anon = bld_cstr(b, "(anonymous)");
    return b->err;
}

static void jp_free(struct jp *p)
{
    isoprof_free(p->fr);
    isoprof_free(p->nd);
    isoprof_free(p->kids);
    isoprof_free(p->pend);
    isoprof_free(p->cdp_msg);
    isoprof_free(p->why);
    ht_free(&p->idx);
    isoprof_free(p->fm);
    ht_free(&p->fmh);
}

/* Runs yajl over the text. yajl's own allocations use its default
 * allocator, not the project's: yajl 2.1 does not check a failed realloc in
 * its buffers (yajl_buf.c, yajl_bytestack.h), so the failure hook would
 * make it crash instead of fail. It allocates little: its handle, a byte
 * per nesting level, and the unescaped text of one string. */
static int jp_parse(struct jp *p, const char *json, size_t len)
{
    if (len == 0)
        return jfail(p, ISOPROF_EJSON, "empty reply"), p->err;
    yajl_handle h = yajl_alloc(&jcb, NULL, p);
    if (h == NULL)
        return -ENOMEM;
    yajl_status st = yajl_parse(h, (const unsigned char *)json, len);
    if (st == yajl_status_ok)
        st = yajl_complete_parse(h);
    if (st != yajl_status_ok && p->err == 0) {
        unsigned char *msg = yajl_get_error(h, 0, (const unsigned char *)json, len);
        size_t off = yajl_get_bytes_consumed(h);
        p->err = ISOPROF_EJSON;
        if (msg) {
            char *nl = strchr((char *)msg, '\n');
            if (nl)
                *nl = '\0';
        }
        char buf[160];
        snprintf(buf, sizeof(buf), "malformed JSON near byte %zu: %s", off,
                 msg ? (const char *)msg : "parse error");
        p->why = isoprof_strdup(buf);
        if (msg)
            yajl_free_error(h, msg);
    }
    yajl_free(h);
    if (p->err == 0 && !p->started)
        jfail(p, ISOPROF_EJSON, "empty reply");
    return p->err;
}

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
        return jfail(p, ISOPROF_EPROFILE,
                     "no CPU profile in the reply (needs nodes, startTime, endTime)");
    if (p->nn == 0)
        return jfail(p, ISOPROF_EPROFILE, "profile has no nodes");
    if (p->have_samples != p->have_deltas || p->nsamples != p->ndeltas)
        return jfail(p, ISOPROF_EPROFILE, "%" PRIu64 " samples but %" PRIu64 " timeDeltas",
                     p->nsamples, p->ndeltas);
    if (p->end < p->start)
        return jfail(p, ISOPROF_EPROFILE, "endTime %lld is before startTime %lld",
                     (long long)p->end, (long long)p->start);
    for (size_t i = 0; i < p->np; i++)
        if (id_find(p, p->pend[i]) == NONE)
            return jfail(p, ISOPROF_EPROFILE, "samples[%zu]: node %u is unknown", i, p->pend[i]);
    uint64_t hits = 0;
    for (size_t i = 0; i < p->nn; i++) {
        struct vnode *v = &p->nd[i];
        hits += (uint64_t)v->v0;
        for (uint32_t k = v->kid0; k < v->kid0 + v->nkid; k++) {
            uint32_t j = id_find(p, p->kids[k]);
            if (j == NONE)
                return jfail(p, ISOPROF_EPROFILE, "%s: child %u is unknown",
                             jwhere(p, w, sizeof(w), (uint32_t)i), p->kids[k]);
            if (p->nd[j].parent != NONE)
                return jfail(p, ISOPROF_EPROFILE, "%s: child %u is also a child of node %u",
                             jwhere(p, w, sizeof(w), (uint32_t)i), p->kids[k],
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
            return jfail(p, ISOPROF_EPROFILE, "several roots (node %u and node %u)", p->nd[root].id,
                         p->nd[i].id);
        root = (uint32_t)i;
    }
    if (root == NONE)
        return jfail(p, ISOPROF_EPROFILE, "no root: the children lists form a cycle");
    uint32_t *order = isoprof_malloc(p->nn * sizeof(*order));
    if (order == NULL)
        return jnomem(p);
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
        return jfail(p, ISOPROF_EPROFILE,
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
    if ((rc = jp_init(p, &b, heap, max_nodes)) == 0) {
        p->mapper = heap ? ((const struct pprof_heap_opts *)opts)->mapper
                         : ((const struct pprof_cpu_opts *)opts)->mapper;
        b.limit = pprof_output_cap(len);
        if ((rc = jp_parse(p, json, len)) == 0)
            rc = body(p, opts, out);
        if (rc == 0) {
            out->mapped = p->mapped;
            out->unmapped = p->unmapped;
        }
    }
    /* A no-op when the error came from the parse or the checks: jfail
     * keeps the first message. */
    if (rc == ISOPROF_ETOOBIG)
        jfail(p, rc, "pprof output past %zu bytes (the cap for a %zu-byte reply)", b.limit, len);
    if (why && p->why) {
        *why = p->why;
        p->why = NULL;
    }
    jp_free(p);
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
        jfail(p, ISOPROF_EPROFILE, "startTime/endTime out of range");
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
        jfail(p, ISOPROF_EPROFILE, "no heap profile in the reply (needs head)");
        return p->err;
    }
    if (!build_index(p))
        return p->err;
    for (size_t i = 0; i + 3 <= p->np; i += 3) {
        uint32_t j = id_find(p, p->pend[i]);
        if (j == NONE) {
            jfail(p, ISOPROF_EPROFILE, "samples[%zu]: node %u is unknown", i / 3, p->pend[i]);
            return p->err;
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
    return conv_output(p->b, &m, true, p->nsamples, (uint64_t)t, (uint64_t)t, out);
}

int pprof_from_heap_json(const char *json, size_t len, const struct pprof_heap_opts *o,
                         struct pprof_result *out, char **why)
{
    static const struct pprof_heap_opts defaults;
    if (o == NULL)
        o = &defaults;
    return conv_run(json, len, true, o->max_nodes, heap_convert, o, out, why);
}

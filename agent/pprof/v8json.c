/*
 * v8json.c - the V8 profile parser: a CPU or heap profile reply (CDP JSON)
 * read in one streaming pass with yajl's callback parser into compact
 * nodes (struct jp), against a small fixed schema, every count and id
 * checked as it streams by. v8conv.c turns the result into pprof. See
 * pprof.c for the design.
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

int v8_fail(struct jp *p, int err, const char *fmt, ...)
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

int v8_nomem(struct jp *p)
{
    if (p->err == 0)
        p->err = -ENOMEM;
    return 0;
}

/* Where we are, for messages: "nodes[12] (id 40)". */
const char *v8_where(struct jp *p, char *buf, size_t n, uint32_t node)
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

uint32_t v8_id_find(const struct jp *p, uint32_t id)
{
    return ht_find(&p->idx, id_hash(p, id), id_eq, p, &id);
}

int v8_build_index(struct jp *p)
{
    for (size_t i = 0; i < p->nn; i++) {
        uint32_t id = p->nd[i].id;
        uint32_t j = v8_id_find(p, id);
        if (j != NONE)
            return v8_fail(p, ISOPROF_EPROFILE, "duplicate node id %u (%s #%u and #%zu)", id,
                           p->heap ? "heap node" : "nodes", j, i);
        if (ht_add(&p->idx, id_hash(p, id), (uint32_t)i))
            return v8_nomem(p);
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
        return v8_fail(p, ISOPROF_EPROFILE, "nesting deeper than %d levels", PPROF_MAX_DEPTH);
    if (pprof_grow(&p->fr, &p->frcap, p->nfr + 1, sizeof(*p->fr)))
        return v8_nomem(p);
    p->fr[p->nfr++] = (struct jframe){.ctx = (uint8_t)ctx, .key = K_NONE, .node = node};
    return 1;
}

static uint32_t new_node(struct jp *p, uint32_t parent)
{
    if (p->nn >= p->max_nodes) {
        v8_fail(p, ISOPROF_EPROFILE, "more than %zu nodes", p->max_nodes);
        return NONE;
    }
    if (pprof_grow(&p->nd, &p->ncap, p->nn + 1, sizeof(*p->nd))) {
        v8_nomem(p);
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
            return v8_fail(p, ISOPROF_EPROFILE, "%s: duplicate key \"%s\"",
                           v8_where(p, w, sizeof(w), f->node), key_name(k));
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
        return v8_fail(p, ISOPROF_EPROFILE, "%s: element of \"%s\" is %s, expected %s",
                       v8_where(p, w, sizeof(w), f->node), array_name(f), type_names[got], want);
    return v8_fail(p, ISOPROF_EPROFILE, "%s: \"%s\" is %s, expected %s",
                   v8_where(p, w, sizeof(w), f->node), key_name(k), type_names[got], want);
}

static int j_open(struct jp *p, enum jtype t)
{
    if (p->skip) {
        if (++p->skip > PPROF_MAX_DEPTH)
            return v8_fail(p, ISOPROF_EPROFILE, "nesting deeper than %d levels", PPROF_MAX_DEPTH);
        return 1;
    }
    if (p->nfr == 0) {
        if (t != T_MAP)
            return v8_fail(p, ISOPROF_EPROFILE, "the reply is %s, expected an object",
                           type_names[t]);
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
        return v8_fail(p, ISOPROF_EPROFILE,
                       "%s: \"%s\" is %.*s, expected an integer in [%lld, %lld]",
                       v8_where(p, w, sizeof(w), f->node), k ? key_name(k) : array_name(f),
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
        return v8_fail(p, ISOPROF_EPROFILE, "the reply is %s, expected an object", type_names[t]);
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
            return v8_fail(p, ISOPROF_EPROFILE, "more children than nodes");
        if (pprof_grow(&p->kids, &p->kcap, p->nk + 1, sizeof(*p->kids)))
            return v8_nomem(p);
        p->kids[p->nk++] = (uint32_t)v;
        return 1;
    case J_SAMPLES:
        if (!need_int(p, f, K_NONE, t, s, n, 0, UINT32_MAX, &v))
            return 0;
        if (p->nsamples >= PPROF_MAX_SAMPLES)
            return v8_fail(p, ISOPROF_EPROFILE, "more than %zu samples", PPROF_MAX_SAMPLES);
        if (p->indexed) {
            if (v8_id_find(p, (uint32_t)v) == NONE)
                p->orphans++;
        } else {
            if (p->np >= PPROF_MAX_KEPT_SAMPLES)
                return v8_fail(p, ISOPROF_EPROFILE, "more than %zu samples before the nodes",
                               PPROF_MAX_KEPT_SAMPLES);
            if (pprof_grow(&p->pend, &p->pcap, p->np + 1, sizeof(*p->pend)))
                return v8_nomem(p);
            p->pend[p->np++] = (uint32_t)v;
        }
        p->nsamples++;
        return 1;
    case J_DELTAS:
        if (!need_int(p, f, K_NONE, t, s, n, INT64_MIN, INT64_MAX, &v))
            return 0;
        if (p->ndeltas >= PPROF_MAX_SAMPLES)
            return v8_fail(p, ISOPROF_EPROFILE, "more than %zu timeDeltas", PPROF_MAX_SAMPLES);
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
                return v8_nomem(p);
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
            return p->b->err == -ENOMEM ? v8_nomem(p)
                                        : v8_fail(p, p->b->err, "string pool past its cap");
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
        return v8_fail(p, ISOPROF_ECDP, "CDP error reply: %s",
                       p->cdp_msg ? p->cdp_msg : "(no message)");
    case J_NODE:
    case J_HNODE:
        if (!((f->seen >> K_ID) & 1))
            return v8_fail(p, ISOPROF_EPROFILE, "%s: no \"id\"",
                           v8_where(p, w, sizeof(w), f->node));
        if (!((f->seen >> K_FRAME) & 1))
            return v8_fail(p, ISOPROF_EPROFILE, "%s: no \"callFrame\"",
                           v8_where(p, w, sizeof(w), f->node));
        break;
    case J_CHILDREN:
        p->nd[f->node].nkid = (uint32_t)(p->nk - p->nd[f->node].kid0);
        break;
    case J_NODES:
        /* From here on samples are checked as they stream past. */
        if (!v8_build_index(p))
            return 0;
        break;
    case J_HSAMPLE:
        if (!((f->seen >> K_NODEID) & 1) || !((f->seen >> K_SIZE) & 1))
            return v8_fail(p, ISOPROF_EPROFILE,
                           "samples[%" PRIu64 "]: needs \"nodeId\" and \"size\"", p->nsamples);
        if (p->nsamples >= PPROF_MAX_KEPT_SAMPLES)
            return v8_fail(p, ISOPROF_EPROFILE, "more than %zu samples", PPROF_MAX_KEPT_SAMPLES);
        if (pprof_grow(&p->pend, &p->pcap, p->np + 3, sizeof(*p->pend)))
            return v8_nomem(p);
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

int v8_jp_init(struct jp *p, struct bld *b, bool heap, size_t max_nodes)
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

void v8_jp_free(struct jp *p)
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
int v8_jp_parse(struct jp *p, const char *json, size_t len)
{
    if (len == 0)
        return v8_fail(p, ISOPROF_EJSON, "empty reply"), p->err;
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
        v8_fail(p, ISOPROF_EJSON, "empty reply");
    return p->err;
}

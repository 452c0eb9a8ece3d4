/*
 * pprof.c - V8 CPU and heap profiles (CDP JSON) to pprof; pprof merge, top
 * and gzip.
 *
 * Conversion is one streaming pass over the reply text with yajl's callback
 * parser: no DOM is ever built. The callbacks keep a small stack of frames
 * (which object or array of the known schema we are in, and which key is
 * pending); values of unknown keys are skipped by counting nesting. What
 * survives the parse is compact: one struct per profile node (ids, interned
 * string indices, line, column, counts), the child id lists of the CPU
 * nodes in one flat array, and the string pool. For a CPU profile the
 * samples[] entries are checked against the node index as they stream past
 * and then forgotten (V8 sends nodes first); only a profile that sends
 * samples before nodes makes us keep them until the end.
 *
 * After the parse the tree is resolved (parents from children lists, with
 * the checks that make a broken or hostile profile an error instead of a
 * crash or a loop), walked parent-before-child without recursion, and fed
 * to the builder: strings, functions and locations are interned, and each
 * node's stack becomes a node of a stack trie keyed by (parent stack,
 * location), so identical stacks share one Sample and memory stays linear
 * in the number of distinct stacks. The builder is also what pprof_merge
 * feeds from decoded inputs. It keeps a sticky error: after the first
 * failure every call is a no-op and finish reports it.
 *
 * The builder writes the protobuf wire format itself (it is a handful of
 * varints and length prefixes): encoding straight from the trie needs no
 * per-sample location arrays. Decoding, for merge and top, uses protobuf-c
 * with the generated profile.pb-c.h and our allocator.
 */
#include "pprof.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_parse.h>

#include "base.h"
#include "htab.h"
#include "profile.pb-c.h"

#define NONE UINT32_MAX

/* --- small helpers --- */

void pprof_buf_free(struct pprof_buf *b)
{
    if (b == NULL)
        return;
    isoprof_free(b->data);
    b->data = NULL;
    b->len = 0;
}

static void set_why(char **why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_why(char **why, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    if (why == NULL || *why != NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    *why = isoprof_strdup(msg);
}

/* Grows *p (an array of elem-sized items with *cap slots) to hold need. */
static int grow(void *pp, size_t *cap, size_t need, size_t elem)
{
    void **p = pp;
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < need) {
        if (nc > SIZE_MAX / 4 / elem)
            return -ENOMEM;
        nc *= 2;
    }
    void *np = isoprof_realloc(*p, nc * elem);
    if (np == NULL)
        return -ENOMEM;
    *p = np;
    *cap = nc;
    return 0;
}

static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

static int64_t sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
    return r;
}

/* --- hashing --- */

/* --- UTF-8 --- */

/* Copies s[0..n) to out as valid UTF-8, at most max bytes, never cutting a
 * character: each byte that starts no well-formed sequence (a bad byte, an
 * overlong form, a surrogate, past U+10FFFF: isoprof_utf8_seq) and each NUL
 * become U+FFFD. Returns the bytes written. */
static size_t utf8_clean(const uint8_t *s, size_t n, char *out, size_t max)
{
    static const char repl[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t len = s[i] != 0 ? isoprof_utf8_seq(s + i, n - i) : 0;
        const char *src = len ? (const char *)s + i : repl;
        size_t w = len ? len : 3;
        if (o + w > max)
            break;
        memcpy(out + o, src, w);
        o += w;
        i += len ? len : 1;
    }
    return o;
}

/* --- output buffer (protobuf wire format) --- */

static size_t vlen(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static void ob_varint(struct isoprof_buf *o, uint64_t v)
{
    uint8_t b[10];
    size_t n = 0;
    while (v >= 0x80) {
        b[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b[n++] = (uint8_t)v;
    isoprof_buf_append(o, b, n);
}

static void ob_key(struct isoprof_buf *o, unsigned field, unsigned wt)
{
    ob_varint(o, (uint64_t)field << 3 | wt);
}

/* Size of a varint field (key + value); 0 for proto3's omitted default. */
static size_t fint_len(int64_t v)
{
    return v ? 1 + vlen((uint64_t)v) : 0;
}

static void ob_int(struct isoprof_buf *o, unsigned field, int64_t v)
{
    if (v == 0)
        return;
    ob_key(o, field, 0);
    ob_varint(o, (uint64_t)v);
}

static void ob_lenkey(struct isoprof_buf *o, unsigned field, size_t len)
{
    ob_key(o, field, 2);
    ob_varint(o, len);
}

/* --- builder --- */

struct bfunc {
    uint32_t name, sys, file;
    int64_t start;
};

struct bline {
    uint64_t fn;
    int64_t line, col;
};

struct bloc {
    uint32_t first, n; /* into lines */
};

struct bld {
    int err;
    size_t nv; /* values per sample */
    uint64_t seed;
    /* strings: NUL-terminated in one arena */
    struct isoprof_buf sb; /* the interned strings, each NUL-terminated */
    uint32_t *soff, *slen;
    size_t ns, nscap, nscap2;
    struct htab sh;
    struct bfunc *fn;
    size_t nfn, fncap;
    struct htab fh;
    struct bline *ln;
    size_t nln, lncap;
    struct bloc *loc;
    size_t nloc, loccap;
    struct htab lh;
    /* stack trie; entry 0 is the empty stack */
    uint32_t *stp, *stl;
    size_t nst, stcap, stcap2;
    int64_t *stv;
    size_t stvcap;
    struct htab sth;
    uint16_t *std; /* depth of each trie entry, in frames */
    size_t stdcap;
    uint64_t trunc_loc; /* the "(truncated)" frame's location, 0 until needed */
    uint64_t truncated; /* frames past PPROF_MAX_STACK folded into it */
    size_t limit;       /* output cap for b_finish; 0: PPROF_MAX_OUTPUT */
    uint32_t comment[PPROF_MAX_COMMENTS];
    size_t ncomment;
};

#define BMETA_MAX_TYPES 8

struct bmeta {
    uint32_t st_type[BMETA_MAX_TYPES], st_unit[BMETA_MAX_TYPES];
    uint32_t pt_type, pt_unit;
    int64_t period, time, duration;
};

static void b_fail(struct bld *b, int err)
{
    if (b->err == 0)
        b->err = err;
}

struct skey {
    const char *s;
    size_t n;
};

static bool s_eq(const void *ctx, uint32_t idx, const void *key)
{
    const struct bld *b = ctx;
    const struct skey *k = key;
    return b->slen[idx] == k->n && memcmp(b->sb.data + b->soff[idx], k->s, k->n) == 0;
}

/* Interns s[0..n) (which must not contain NUL). Returns its index. */
static uint32_t b_str(struct bld *b, const char *s, size_t n)
{
    if (b->err)
        return 0;
    struct skey k = {s, n};
    uint32_t h = (uint32_t)hbytes(b->seed, s, n);
    uint32_t i = ht_find(&b->sh, h, s_eq, b, &k);
    if (i != NONE)
        return i;
    if (b->ns >= UINT32_MAX - 1) {
        b_fail(b, ISOPROF_ETOOBIG);
        return 0;
    }
    int rc = isoprof_buf_reserve(&b->sb, n + 1); /* ISOPROF_ETOOBIG past PPROF_MAX_OUTPUT */
    if (rc != 0) {
        b_fail(b, rc);
        return 0;
    }
    if (grow(&b->soff, &b->nscap, b->ns + 1, 4) || grow(&b->slen, &b->nscap2, b->ns + 1, 4) ||
        ht_add(&b->sh, h, (uint32_t)b->ns)) {
        b_fail(b, -ENOMEM);
        return 0;
    }
    b->soff[b->ns] = (uint32_t)b->sb.len;
    b->slen[b->ns] = (uint32_t)n;
    /* Reserved above: neither append can fail. */
    isoprof_buf_append(&b->sb, s, n);
    isoprof_buf_putc(&b->sb, '\0');
    return (uint32_t)b->ns++;
}

static uint32_t b_cstr(struct bld *b, const char *s)
{
    return b_str(b, s ? s : "", s ? strlen(s) : 0);
}

static bool f_eq(const void *ctx, uint32_t idx, const void *key)
{
    const struct bfunc *a = &((const struct bld *)ctx)->fn[idx], *k = key;
    return a->name == k->name && a->sys == k->sys && a->file == k->file;
}

/* A function, identified by (name, system_name, filename); the first
 * start_line seen wins. Returns its id (index + 1). */
static uint64_t b_func(struct bld *b, uint32_t name, uint32_t sys, uint32_t file, int64_t start)
{
    if (b->err)
        return 0;
    struct bfunc k = {name, sys, file, start};
    uint32_t h = (uint32_t)hmix(b->seed ^ ((uint64_t)name << 32 | file) ^ hmix(sys));
    uint32_t i = ht_find(&b->fh, h, f_eq, b, &k);
    if (i != NONE)
        return (uint64_t)i + 1;
    if (grow(&b->fn, &b->fncap, b->nfn + 1, sizeof(*b->fn)) ||
        ht_add(&b->fh, h, (uint32_t)b->nfn)) {
        b_fail(b, -ENOMEM);
        return 0;
    }
    b->fn[b->nfn] = k;
    return (uint64_t)++b->nfn;
}

struct lkey {
    const struct bline *l;
    size_t n;
};

static bool l_eq(const void *ctx, uint32_t idx, const void *key)
{
    const struct bld *b = ctx;
    const struct lkey *k = key;
    const struct bloc *lc = &b->loc[idx];
    if (lc->n != k->n)
        return false;
    for (size_t i = 0; i < k->n; i++) {
        const struct bline *x = &b->ln[lc->first + i], *y = &k->l[i];
        if (x->fn != y->fn || x->line != y->line || x->col != y->col)
            return false;
    }
    return true;
}

/* A location with n lines (innermost first). Returns its id (index + 1). */
static uint64_t b_loc(struct bld *b, const struct bline *lines, size_t n)
{
    if (b->err)
        return 0;
    struct lkey k = {lines, n};
    uint64_t hh = b->seed ^ n;
    for (size_t i = 0; i < n; i++)
        hh =
            hmix(hh ^ lines[i].fn ^ hmix((uint64_t)lines[i].line ^ ((uint64_t)lines[i].col << 40)));
    uint32_t h = (uint32_t)hh;
    uint32_t i = ht_find(&b->lh, h, l_eq, b, &k);
    if (i != NONE)
        return (uint64_t)i + 1;
    if (b->nln + n >= UINT32_MAX || grow(&b->ln, &b->lncap, b->nln + n, sizeof(*b->ln)) ||
        grow(&b->loc, &b->loccap, b->nloc + 1, sizeof(*b->loc)) ||
        ht_add(&b->lh, h, (uint32_t)b->nloc)) {
        b_fail(b, -ENOMEM);
        return 0;
    }
    if (n)
        memcpy(&b->ln[b->nln], lines, n * sizeof(*lines));
    b->loc[b->nloc].first = (uint32_t)b->nln;
    b->loc[b->nloc].n = (uint32_t)n;
    b->nln += n;
    return (uint64_t)++b->nloc;
}

struct stkey {
    uint32_t parent, loc;
};

static bool st_eq(const void *ctx, uint32_t idx, const void *key)
{
    const struct bld *b = ctx;
    const struct stkey *k = key;
    return b->stp[idx] == k->parent && b->stl[idx] == k->loc;
}

/* The location of the frame that stands for the frames a stack lost. */
static uint64_t b_trunc_loc(struct bld *b)
{
    if (b->trunc_loc == 0) {
        struct bline l = {b_func(b, b_cstr(b, PPROF_TRUNCATED_FRAME), 0, 0, 0), 0, 0};
        b->trunc_loc = b_loc(b, &l, 1);
    }
    return b->trunc_loc;
}

/*
 * The stack "loc called from the stack parent". Returns its trie index.
 *
 * Stacks are cut after PPROF_MAX_STACK frames, keeping the frames nearest
 * the root: a "(truncated)" frame stands for the frame below the last one
 * kept, and every deeper frame folds into it, so its values are those of
 * everything below. This
 * keeps the trie linear in the input (a deeper frame adds no entry) and
 * the output's location ids at most PPROF_MAX_STACK + 1 per sample, where a
 * hostile chain of n nodes would otherwise write n * n / 2 of them.
 */
static uint32_t b_stack(struct bld *b, uint32_t parent, uint64_t loc)
{
    if (b->err)
        return 0;
    unsigned depth = b->std ? b->std[parent] : 0;
    if (depth > PPROF_MAX_STACK) {
        b->truncated++;
        return parent; /* parent is the (truncated) frame */
    }
    if (depth == PPROF_MAX_STACK && parent != 0) {
        uint64_t tl = b_trunc_loc(b);
        if (b->err)
            return 0;
        if (loc != tl) /* a merged stack that was cut before is not cut again */
            b->truncated++;
        loc = tl;
    }
    struct stkey k = {parent, (uint32_t)loc};
    uint32_t h = (uint32_t)hmix(b->seed ^ ((uint64_t)parent << 32 | (uint32_t)loc));
    uint32_t i = ht_find(&b->sth, h, st_eq, b, &k);
    if (i != NONE)
        return i;
    if (b->nst >= UINT32_MAX - 1 || grow(&b->stp, &b->stcap, b->nst + 1, 4) ||
        grow(&b->stl, &b->stcap2, b->nst + 1, 4) ||
        grow(&b->std, &b->stdcap, b->nst + 1, sizeof(*b->std)) ||
        grow(&b->stv, &b->stvcap, (b->nst + 1) * b->nv, sizeof(int64_t)) ||
        ht_add(&b->sth, h, (uint32_t)b->nst)) {
        b_fail(b, -ENOMEM);
        return 0;
    }
    b->stp[b->nst] = parent;
    b->stl[b->nst] = (uint32_t)loc;
    b->std[b->nst] = (uint16_t)(b->nst == 0 ? 0 : depth + 1);
    memset(&b->stv[b->nst * b->nv], 0, b->nv * sizeof(int64_t));
    return (uint32_t)b->nst++;
}

/* A comment line for the profile (pprof's comment field); duplicates and
 * lines past PPROF_MAX_COMMENTS are dropped. */
static void b_comment(struct bld *b, const char *s)
{
    for (size_t i = 0; i < b->ncomment; i++)
        if (strcmp(b->sb.data + b->soff[b->comment[i]], s) == 0)
            return;
    if (b->ncomment == PPROF_MAX_COMMENTS)
        return; /* not even interned: a dropped line costs no output */
    uint32_t c = b_cstr(b, s);
    if (!b->err)
        b->comment[b->ncomment++] = c;
}

static void b_add(struct bld *b, uint32_t stack, const int64_t *v)
{
    if (b->err)
        return;
    for (size_t i = 0; i < b->nv; i++)
        b->stv[stack * b->nv + i] = sat_add(b->stv[stack * b->nv + i], v[i]);
}

static int b_init(struct bld *b, size_t nv)
{
    memset(b, 0, sizeof(*b));
    b->nv = nv;
    isoprof_buf_init(&b->sb, PPROF_MAX_OUTPUT);
    b->seed = hmix((uint64_t)(uintptr_t)b ^ 0x5bd1e995);
    b_str(b, "", 0);
    b_stack(b, 0, 0); /* the empty stack, index 0 */
    return b->err;
}

static void b_free(struct bld *b)
{
    isoprof_buf_free(&b->sb);
    isoprof_free(b->soff);
    isoprof_free(b->slen);
    ht_free(&b->sh);
    isoprof_free(b->fn);
    ht_free(&b->fh);
    isoprof_free(b->ln);
    isoprof_free(b->loc);
    ht_free(&b->lh);
    isoprof_free(b->stp);
    isoprof_free(b->stl);
    isoprof_free(b->stv);
    isoprof_free(b->std);
    ht_free(&b->sth);
    memset(b, 0, sizeof(*b));
}

static void ob_valuetype(struct isoprof_buf *o, unsigned field, uint32_t type, uint32_t unit)
{
    ob_lenkey(o, field, fint_len(type) + fint_len(unit));
    ob_int(o, 1, type);
    ob_int(o, 2, unit);
}

static bool stack_has_value(const struct bld *b, size_t s)
{
    for (size_t i = 0; i < b->nv; i++)
        if (b->stv[s * b->nv + i] != 0)
            return true;
    return false;
}

/* Serializes everything into out. Samples: every trie node with a
 * non-zero value, its locations leaf first (walking up the trie). */
static int b_finish(struct bld *b, const struct bmeta *m, struct pprof_buf *out)
{
    struct isoprof_buf o;
    isoprof_buf_init(&o, b->limit ? b->limit : PPROF_MAX_OUTPUT);
    if (b->truncated) {
        char c[160];
        snprintf(c, sizeof(c),
                 "isoprof: stacks deeper than %d frames were cut; %" PRIu64
                 " deeper frames are counted in their " PPROF_TRUNCATED_FRAME " frame",
                 PPROF_MAX_STACK, b->truncated);
        b_comment(b, c);
    }
    if (b->err)
        return b->err;
    for (size_t i = 0; i < b->nv; i++)
        ob_valuetype(&o, 1, m->st_type[i], m->st_unit[i]);
    for (size_t s = 0; s < b->nst && !o.err; s++) {
        if (!stack_has_value(b, s))
            continue;
        size_t lb = 0, vb = 0;
        for (uint32_t t = (uint32_t)s; t != 0; t = b->stp[t])
            lb += vlen(b->stl[t]);
        for (size_t i = 0; i < b->nv; i++)
            vb += vlen((uint64_t)b->stv[s * b->nv + i]);
        size_t len = (lb ? 1 + vlen(lb) + lb : 0) + 1 + vlen(vb) + vb;
        ob_lenkey(&o, 2, len);
        if (lb) {
            ob_lenkey(&o, 1, lb);
            for (uint32_t t = (uint32_t)s; t != 0; t = b->stp[t])
                ob_varint(&o, b->stl[t]);
        }
        ob_lenkey(&o, 2, vb);
        for (size_t i = 0; i < b->nv; i++)
            ob_varint(&o, (uint64_t)b->stv[s * b->nv + i]);
    }
    for (size_t l = 0; l < b->nloc && !o.err; l++) {
        const struct bloc *lc = &b->loc[l];
        size_t len = fint_len((int64_t)l + 1);
        for (size_t k = 0; k < lc->n; k++) {
            const struct bline *x = &b->ln[lc->first + k];
            size_t ll = fint_len((int64_t)x->fn) + fint_len(x->line) + fint_len(x->col);
            len += 1 + vlen(ll) + ll;
        }
        ob_lenkey(&o, 4, len);
        ob_int(&o, 1, (int64_t)l + 1);
        for (size_t k = 0; k < lc->n; k++) {
            const struct bline *x = &b->ln[lc->first + k];
            ob_lenkey(&o, 4, fint_len((int64_t)x->fn) + fint_len(x->line) + fint_len(x->col));
            ob_int(&o, 1, (int64_t)x->fn);
            ob_int(&o, 2, x->line);
            ob_int(&o, 3, x->col);
        }
    }
    for (size_t f = 0; f < b->nfn && !o.err; f++) {
        const struct bfunc *x = &b->fn[f];
        ob_lenkey(&o, 5,
                  fint_len((int64_t)f + 1) + fint_len(x->name) + fint_len(x->sys) +
                      fint_len(x->file) + fint_len(x->start));
        ob_int(&o, 1, (int64_t)f + 1);
        ob_int(&o, 2, x->name);
        ob_int(&o, 3, x->sys);
        ob_int(&o, 4, x->file);
        ob_int(&o, 5, x->start);
    }
    for (size_t s = 0; s < b->ns && !o.err; s++) {
        ob_lenkey(&o, 6, b->slen[s]);
        isoprof_buf_append(&o, b->sb.data + b->soff[s], b->slen[s]);
    }
    ob_int(&o, 9, m->time);
    ob_int(&o, 10, m->duration);
    for (size_t i = 0; i < b->ncomment; i++)
        ob_int(&o, 13, b->comment[i]);
    ob_valuetype(&o, 11, m->pt_type, m->pt_unit);
    ob_int(&o, 12, m->period);
    char *data;
    int rc = isoprof_buf_take(&o, &data, &out->len);
    if (rc != 0)
        return rc;
    out->data = (uint8_t *)data;
    return 0;
}

size_t pprof_output_cap(size_t len)
{
    if (len > (PPROF_MAX_CONVERT_OUTPUT - PPROF_OUTPUT_SLACK) / PPROF_OUTPUT_FACTOR)
        return PPROF_MAX_CONVERT_OUTPUT;
    return len * PPROF_OUTPUT_FACTOR + PPROF_OUTPUT_SLACK;
}

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
    if (grow(&p->fr, &p->frcap, p->nfr + 1, sizeof(*p->fr)))
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
    if (grow(&p->nd, &p->ncap, p->nn + 1, sizeof(*p->nd))) {
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
    case K_NODES: return &p->have_nodes;
    case K_START: return &p->have_start;
    case K_END: return &p->have_end;
    case K_SAMPLES: return &p->have_samples;
    case K_DELTAS: return &p->have_deltas;
    case K_HEAD: return &p->have_head;
    default: return NULL;
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
    case J_NODES: return "nodes";
    case J_CHILDREN:
    case J_HCHILDREN: return "children";
    case J_SAMPLES:
    case J_HSAMPLES: return "samples";
    case J_DELTAS: return "timeDeltas";
    default: return "?";
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
        case K_NONE: p->skip = 1; return 1;
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
    case J_DELTAS: return wrong_type(p, f, K_NONE, t, "an integer");
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
    size_t len = utf8_clean(s, n, p->tmp, PPROF_MAX_STRING);
    if (k == K_FNAME && len == 0)
        return p->anon;
    return b_str(p->b, p->tmp, len);
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
    case J_HSAMPLES: return wrong_type(p, f, K_NONE, t, "an object");
    case J_CHILDREN:
        if (!need_int(p, f, K_NONE, t, s, n, 0, UINT32_MAX, &v))
            return 0;
        if (p->nk >= (size_t)UINT32_MAX - 1 || p->nk >= 2 * p->max_nodes)
            return jfail(p, ISOPROF_EPROFILE, "more children than nodes");
        if (grow(&p->kids, &p->kcap, p->nk + 1, sizeof(*p->kids)))
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
            if (grow(&p->pend, &p->pcap, p->np + 1, sizeof(*p->pend)))
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
    default: break;
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
            size_t len = utf8_clean((const uint8_t *)s, n, p->tmp, 200);
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
    case J_CHILDREN: p->nd[f->node].nkid = (uint32_t)(p->nk - p->nd[f->node].kid0); break;
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
        if (grow(&p->pend, &p->pcap, p->np + 3, sizeof(*p->pend)))
            return jnomem(p);
        p->pend[p->np++] = p->hs_node;
        p->pend[p->np++] = (uint32_t)p->hs_size;
        p->pend[p->np++] = (uint32_t)((uint64_t)p->hs_size >> 32);
        p->nsamples++;
        break;
    default: break;
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
    if (b_init(b, 2))
        return -ENOMEM;
    p->anon = b_cstr(b, "(anonymous)");
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
        name = b_str(b, p->tmp, utf8_clean((const uint8_t *)mo.name, strlen(mo.name), p->tmp,
                                           PPROF_MAX_STRING));
    uint32_t file = b_str(
        b, p->tmp, utf8_clean((const uint8_t *)mo.file, strlen(mo.file), p->tmp, PPROF_MAX_STRING));
    int64_t line = mo.line > 0 ? mo.line : 0, col = mo.column > 0 ? mo.column : 0;
    struct bline l = {b_func(b, name, v->name, file, line), line, col};
    return b_loc(b, &l, 1);
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
    if (p->b->err == 0 && (grow(&p->fm, &p->fmcap, p->nfm + 1, sizeof(*p->fm)) ||
                           ht_add(&p->fmh, h, (uint32_t)p->nfm))) {
        b_fail(p->b, -ENOMEM);
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
    struct bline l = {b_func(p->b, v->name, 0, v->url, line), line, col};
    id = b_loc(p->b, &l, 1);
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
            s = v->v0 || v->v1 ? b_stack(p->b, 0, node_loc(p, v)) : 0;
        } else {
            s = st[i] = b_stack(p->b, st[v->parent], node_loc(p, v));
        }
        int64_t val[2];
        if (p->heap) {
            val[0] = v->v0;
            val[1] = v->v1;
        } else {
            val[0] = v->v0;
            val[1] = sat_mul(v->v0, period);
        }
        if (val[0] || val[1])
            b_add(p->b, s, val);
    }
    isoprof_free(st);
    return p->b->err;
}

static void fill_meta(struct bld *b, struct bmeta *m, bool heap)
{
    m->st_type[0] = b_cstr(b, heap ? "inuse_objects" : "samples");
    m->st_unit[0] = b_cstr(b, "count");
    m->st_type[1] = b_cstr(b, heap ? "inuse_space" : "cpu");
    m->st_unit[1] = b_cstr(b, heap ? "bytes" : "nanoseconds");
    m->pt_type = b_cstr(b, heap ? "space" : "cpu");
    m->pt_unit = b_cstr(b, heap ? "bytes" : "nanoseconds");
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
 * into out; the other fields of out from the arguments. Returns b_finish's
 * error, out untouched then. */
static int conv_output(struct bld *b, struct bmeta *m, bool heap, uint64_t samples,
                       uint64_t start_ns, uint64_t end_ns, struct pprof_result *out)
{
    fill_meta(b, m, heap);
    struct pprof_buf buf = {0};
    int rc = b_finish(b, m, &buf);
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
    b_free(&b);
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
        p->nd[j].v1 = sat_add(p->nd[j].v1, size);
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

/* --- decoding (merge, top) --- */

/* protobuf-c returns NULL both for bad bytes and for a failed allocation;
 * the allocator notes the latter so that -ENOMEM is not reported as a
 * corrupt input. One per decode: no shared state between threads. */
struct pb_mem {
    ProtobufCAllocator a;
    bool oom;
};

static void *pb_alloc(void *data, size_t n)
{
    void *p = isoprof_malloc(n ? n : 1);
    if (p == NULL)
        ((struct pb_mem *)data)->oom = true;
    return p;
}

static void pb_free(void *data, void *ptr)
{
    (void)data;
    isoprof_free(ptr);
}

/* A decoded, checked profile: every id and string index it holds resolves. */
struct dec {
    struct pb_mem mem;
    Perftools__Profiles__Profile *p;
    struct htab fidx, lidx; /* function / location id -> index */
};

static bool dfid_eq(const void *ctx, uint32_t idx, const void *key)
{
    return ((const struct dec *)ctx)->p->function[idx]->id == *(const uint64_t *)key;
}

static bool dlid_eq(const void *ctx, uint32_t idx, const void *key)
{
    return ((const struct dec *)ctx)->p->location[idx]->id == *(const uint64_t *)key;
}

static uint32_t dec_func(const struct dec *d, uint64_t id)
{
    return ht_find(&d->fidx, (uint32_t)hmix(id), dfid_eq, d, &id);
}

static uint32_t dec_loc(const struct dec *d, uint64_t id)
{
    return ht_find(&d->lidx, (uint32_t)hmix(id), dlid_eq, d, &id);
}

static void dec_close(struct dec *d)
{
    if (d->p)
        perftools__profiles__profile__free_unpacked(d->p, &d->mem.a);
    ht_free(&d->fidx);
    ht_free(&d->lidx);
    memset(d, 0, sizeof(*d));
}

#define DEC_FAIL(...)                                                                              \
    do {                                                                                           \
        set_why(why, __VA_ARGS__);                                                                 \
        rc = ISOPROF_EPROFILE;                                                                     \
        goto fail;                                                                                 \
    } while (0)

static int dec_open(struct dec *d, const struct pprof_buf *in, size_t k, char **why)
{
    int rc;
    memset(d, 0, sizeof(*d));
    if (in == NULL || (in->data == NULL && in->len))
        return -EINVAL;
    d->mem.a = (ProtobufCAllocator){pb_alloc, pb_free, &d->mem};
    d->p = perftools__profiles__profile__unpack(&d->mem.a, in->len, in->data);
    if (d->p == NULL) {
        if (d->mem.oom)
            return -ENOMEM;
        set_why(why, "profile %zu: not a pprof Profile (%zu bytes)", k, in->len);
        return ISOPROF_EPROTOBUF;
    }
    const Perftools__Profiles__Profile *p = d->p;
    size_t ns = p->n_string_table;
#define SOK(i) ((i) >= 0 && (uint64_t)(i) < ns)
    if (ns == 0 || p->string_table[0][0] != '\0')
        DEC_FAIL("profile %zu: string_table[0] is not \"\"", k);
    if (p->n_sample_type == 0)
        DEC_FAIL("profile %zu: no sample_type", k);
    for (size_t i = 0; i < p->n_sample_type; i++)
        if (!SOK(p->sample_type[i]->type) || !SOK(p->sample_type[i]->unit))
            DEC_FAIL("profile %zu: sample_type[%zu] has a bad string index", k, i);
    if (p->period_type && (!SOK(p->period_type->type) || !SOK(p->period_type->unit)))
        DEC_FAIL("profile %zu: period_type has a bad string index", k);
    for (size_t i = 0; i < p->n_comment; i++)
        if (!SOK(p->comment[i]))
            DEC_FAIL("profile %zu: comment[%zu] has a bad string index", k, i);
    if (p->n_function >= UINT32_MAX || p->n_location >= UINT32_MAX)
        DEC_FAIL("profile %zu: too many functions or locations", k);
    for (size_t i = 0; i < p->n_function; i++) {
        const Perftools__Profiles__Function *f = p->function[i];
        if (f->id == 0 || !SOK(f->name) || !SOK(f->system_name) || !SOK(f->filename))
            DEC_FAIL("profile %zu: function[%zu] has id 0 or a bad string index", k, i);
        if (dec_func(d, f->id) != NONE)
            DEC_FAIL("profile %zu: duplicate function id %" PRIu64, k, f->id);
        if ((rc = ht_add(&d->fidx, (uint32_t)hmix(f->id), (uint32_t)i)) != 0)
            goto fail;
    }
    for (size_t i = 0; i < p->n_location; i++) {
        const Perftools__Profiles__Location *l = p->location[i];
        if (l->id == 0)
            DEC_FAIL("profile %zu: location[%zu] has id 0", k, i);
        if (dec_loc(d, l->id) != NONE)
            DEC_FAIL("profile %zu: duplicate location id %" PRIu64, k, l->id);
        for (size_t j = 0; j < l->n_line; j++)
            if (l->line[j]->function_id != 0 && dec_func(d, l->line[j]->function_id) == NONE)
                DEC_FAIL("profile %zu: location %" PRIu64 " names unknown function %" PRIu64, k,
                         l->id, l->line[j]->function_id);
        if ((rc = ht_add(&d->lidx, (uint32_t)hmix(l->id), (uint32_t)i)) != 0)
            goto fail;
    }
    for (size_t i = 0; i < p->n_sample; i++) {
        const Perftools__Profiles__Sample *s = p->sample[i];
        if (s->n_value != p->n_sample_type)
            DEC_FAIL("profile %zu: sample[%zu] has %zu values for %zu sample types", k, i,
                     s->n_value, p->n_sample_type);
        for (size_t j = 0; j < s->n_location_id; j++)
            if (dec_loc(d, s->location_id[j]) == NONE)
                DEC_FAIL("profile %zu: sample[%zu] names unknown location %" PRIu64, k, i,
                         s->location_id[j]);
    }
#undef SOK
    return 0;
fail:
    dec_close(d);
    return rc;
}

static const char *dstr(const struct dec *d, int64_t i)
{
    return d->p->string_table[i];
}

int pprof_merge(const struct pprof_buf *in, size_t n, struct pprof_buf *out, char **why)
{
    struct bld b;
    struct dec d;
    struct bmeta m;
    uint64_t *fmap = NULL, *lmap = NULL;
    struct bline *lines = NULL;
    size_t lcap = 0;
    int64_t t0 = 0, t1 = 0;
    int rc;
    if (in == NULL || n == 0 || out == NULL)
        return -EINVAL;
    memset(&m, 0, sizeof(m));
    memset(&b, 0, sizeof(b));
    for (size_t k = 0; k < n; k++) {
        if ((rc = dec_open(&d, &in[k], k, why)) != 0)
            goto fail_open;
        const Perftools__Profiles__Profile *p = d.p;
        if (k == 0) {
            if (p->n_sample_type > BMETA_MAX_TYPES) {
                set_why(why, "profile 0: %zu sample types, at most %d supported", p->n_sample_type,
                        BMETA_MAX_TYPES);
                rc = ISOPROF_EPROFILE;
                goto fail;
            }
            if ((rc = b_init(&b, p->n_sample_type)) != 0)
                goto fail;
            for (size_t i = 0; i < p->n_sample_type; i++) {
                m.st_type[i] = b_cstr(&b, dstr(&d, p->sample_type[i]->type));
                m.st_unit[i] = b_cstr(&b, dstr(&d, p->sample_type[i]->unit));
            }
            if (p->period_type) {
                m.pt_type = b_cstr(&b, dstr(&d, p->period_type->type));
                m.pt_unit = b_cstr(&b, dstr(&d, p->period_type->unit));
            }
            m.period = p->period;
        } else {
            bool same = p->n_sample_type == b.nv;
            for (size_t i = 0; same && i < p->n_sample_type; i++)
                same = strcmp(dstr(&d, p->sample_type[i]->type),
                              b.sb.data + b.soff[m.st_type[i]]) == 0 &&
                       strcmp(dstr(&d, p->sample_type[i]->unit),
                              b.sb.data + b.soff[m.st_unit[i]]) == 0;
            if (!same) {
                set_why(why, "profile %zu: sample types differ from profile 0's (%s/%s...)", k,
                        b.sb.data + b.soff[m.st_type[0]], b.sb.data + b.soff[m.st_unit[0]]);
                rc = ISOPROF_EPROFILE;
                goto fail;
            }
        }
        if (p->time_nanos != 0) {
            int64_t end = sat_add(p->time_nanos, p->duration_nanos);
            if (t0 == 0 || p->time_nanos < t0)
                t0 = p->time_nanos;
            if (end > t1)
                t1 = end;
        }
        for (size_t i = 0; i < p->n_comment; i++)
            b_comment(&b, dstr(&d, p->comment[i]));
        fmap = isoprof_calloc(p->n_function + 1, sizeof(*fmap));
        lmap = isoprof_calloc(p->n_location + 1, sizeof(*lmap));
        if (fmap == NULL || lmap == NULL) {
            rc = -ENOMEM;
            goto fail;
        }
        for (size_t i = 0; i < p->n_function; i++) {
            const Perftools__Profiles__Function *f = p->function[i];
            fmap[i] =
                b_func(&b, b_cstr(&b, dstr(&d, f->name)), b_cstr(&b, dstr(&d, f->system_name)),
                       b_cstr(&b, dstr(&d, f->filename)), f->start_line);
        }
        for (size_t i = 0; i < p->n_location; i++) {
            const Perftools__Profiles__Location *l = p->location[i];
            if (grow(&lines, &lcap, l->n_line + 1, sizeof(*lines))) {
                rc = -ENOMEM;
                goto fail;
            }
            for (size_t j = 0; j < l->n_line; j++) {
                uint64_t fid = l->line[j]->function_id;
                lines[j].fn = fid ? fmap[dec_func(&d, fid)] : 0;
                lines[j].line = l->line[j]->line;
                lines[j].col = l->line[j]->column;
            }
            lmap[i] = b_loc(&b, lines, l->n_line);
        }
        for (size_t i = 0; i < p->n_sample && !b.err; i++) {
            const Perftools__Profiles__Sample *s = p->sample[i];
            uint32_t st = 0;
            for (size_t j = s->n_location_id; j-- > 0;)
                st = b_stack(&b, st, lmap[dec_loc(&d, s->location_id[j])]);
            b_add(&b, st, s->value);
        }
        isoprof_free(fmap);
        isoprof_free(lmap);
        fmap = lmap = NULL;
        dec_close(&d);
        if (b.err) {
            rc = b.err;
            goto fail_open;
        }
    }
    m.time = t0;
    m.duration = t1 > t0 ? t1 - t0 : 0;
    rc = b_finish(&b, &m, out);
    goto fail_open;
fail:
    dec_close(&d);
fail_open:
    isoprof_free(fmap);
    isoprof_free(lmap);
    isoprof_free(lines);
    b_free(&b);
    return rc;
}

/* --- top --- */

struct trow {
    const char *name, *file;
    int64_t line, flat, cum;
    size_t mark; /* last sample (index + 1) that counted this row in cum */
};

struct tkey {
    const char *name, *file;
};

struct tctx {
    struct trow *rows;
};

static bool row_eq(const void *ctx, uint32_t idx, const void *key)
{
    const struct trow *r = &((const struct tctx *)ctx)->rows[idx];
    const struct tkey *k = key;
    return strcmp(r->name, k->name) == 0 && strcmp(r->file, k->file) == 0;
}

static int row_cmp(const void *a, const void *b)
{
    const struct pprof_top_row *x = a, *y = b;
    if (x->flat != y->flat)
        return x->flat > y->flat ? -1 : 1;
    if (x->cum != y->cum)
        return x->cum > y->cum ? -1 : 1;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->file, y->file);
}

int pprof_top(const struct pprof_buf *in, int sample_index, struct pprof_top *out)
{
    struct dec d;
    struct htab rh = {0};
    struct tctx tc = {NULL};
    uint32_t *frow = NULL;
    size_t nrows = 0, rcap = 0;
    struct pprof_top t = {0};
    int rc;
    if (out == NULL)
        return -EINVAL;
    if ((rc = dec_open(&d, in, 0, NULL)) != 0)
        return rc;
    const Perftools__Profiles__Profile *p = d.p;
    size_t vi = sample_index < 0 ? p->n_sample_type - 1 : (size_t)sample_index;
    if (vi >= p->n_sample_type) {
        rc = -EINVAL;
        goto out;
    }
    uint64_t seed = hmix((uint64_t)(uintptr_t)&d);
    /* function index -> row */
    if ((frow = isoprof_malloc((p->n_function + 1) * sizeof(*frow))) == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < p->n_function; i++) {
        const Perftools__Profiles__Function *f = p->function[i];
        struct tkey k = {dstr(&d, f->name), dstr(&d, f->filename)};
        uint32_t h = (uint32_t)(hbytes(seed, k.name, strlen(k.name)) ^
                                hmix(hbytes(seed, k.file, strlen(k.file))));
        uint32_t r = ht_find(&rh, h, row_eq, &tc, &k);
        if (r == NONE) {
            if (grow(&tc.rows, &rcap, nrows + 1, sizeof(*tc.rows)) ||
                ht_add(&rh, h, (uint32_t)nrows)) {
                rc = -ENOMEM;
                goto out;
            }
            tc.rows[nrows] = (struct trow){.name = k.name, .file = k.file, .line = f->start_line};
            r = (uint32_t)nrows++;
        } else if (tc.rows[r].line <= 0) {
            tc.rows[r].line = f->start_line;
        }
        frow[i] = r;
    }
    for (size_t i = 0; i < p->n_location; i++)
        for (size_t j = 0; j < p->location[i]->n_line; j++) {
            const Perftools__Profiles__Line *l = p->location[i]->line[j];
            if (l->function_id == 0)
                continue;
            struct trow *r = &tc.rows[frow[dec_func(&d, l->function_id)]];
            if (r->line <= 0)
                r->line = l->line;
        }
    for (size_t i = 0; i < p->n_sample; i++) {
        const Perftools__Profiles__Sample *s = p->sample[i];
        int64_t v = s->value[vi];
        t.total = sat_add(t.total, v);
        for (size_t j = 0; j < s->n_location_id; j++) {
            const Perftools__Profiles__Location *l = p->location[dec_loc(&d, s->location_id[j])];
            for (size_t m = 0; m < l->n_line; m++) {
                uint64_t fid = l->line[m]->function_id;
                if (fid == 0)
                    continue;
                struct trow *r = &tc.rows[frow[dec_func(&d, fid)]];
                /* line[0] of the leaf location is the innermost frame */
                if (j == 0 && m == 0)
                    r->flat = sat_add(r->flat, v);
                if (r->mark != i + 1) {
                    r->mark = i + 1;
                    r->cum = sat_add(r->cum, v);
                }
            }
        }
    }
    size_t nout = 0;
    for (size_t i = 0; i < nrows; i++)
        if (tc.rows[i].flat || tc.rows[i].cum)
            nout++;
    t.rows = isoprof_calloc(nout ? nout : 1, sizeof(*t.rows));
    t.type = isoprof_strdup(dstr(&d, p->sample_type[vi]->type));
    t.unit = isoprof_strdup(dstr(&d, p->sample_type[vi]->unit));
    if (t.rows == NULL || t.type == NULL || t.unit == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < nrows; i++) {
        const struct trow *r = &tc.rows[i];
        if (!r->flat && !r->cum)
            continue;
        struct pprof_top_row *o = &t.rows[t.n];
        o->name = isoprof_strdup(r->name);
        o->file = isoprof_strdup(r->file);
        o->line = r->line > 0 ? r->line : 0;
        o->flat = r->flat;
        o->cum = r->cum;
        t.n++;
        if (o->name == NULL || o->file == NULL) {
            rc = -ENOMEM;
            goto out;
        }
    }
    qsort(t.rows, t.n, sizeof(*t.rows), row_cmp);
    *out = t;
    memset(&t, 0, sizeof(t));
out:
    pprof_top_free(&t);
    isoprof_free(frow);
    isoprof_free(tc.rows);
    ht_free(&rh);
    dec_close(&d);
    return rc;
}

void pprof_top_free(struct pprof_top *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n; i++) {
        isoprof_free(t->rows[i].name);
        isoprof_free(t->rows[i].file);
    }
    isoprof_free(t->rows);
    isoprof_free(t->type);
    isoprof_free(t->unit);
    memset(t, 0, sizeof(*t));
}

/* --- call tree --- */

/* The lookup tables of a pprof_tree, kept between pprof_tree_add calls. */
struct tree_priv {
    uint64_t seed;
    struct htab fh; /* (name, file) -> fns index */
    struct htab nh; /* (parent, fn) -> nodes index */
    size_t fcap, ncap;
};

struct tree_fkey {
    const char *name, *file;
};

static bool tree_fn_eq(const void *ctx, uint32_t idx, const void *key)
{
    const struct pprof_tree_fn *f = &((const struct pprof_tree *)ctx)->fns[idx];
    const struct tree_fkey *k = key;
    return strcmp(f->name, k->name) == 0 && strcmp(f->file, k->file) == 0;
}

struct tree_nkey {
    uint32_t parent, fn;
};

static bool tree_node_eq(const void *ctx, uint32_t idx, const void *key)
{
    const struct pprof_tree_node *n = &((const struct pprof_tree *)ctx)->nodes[idx];
    const struct tree_nkey *k = key;
    return n->parent == k->parent && n->fn == k->fn;
}

/* The tree's function for (name, file), added if new: its index, or NONE
 * out of memory. line: the function's start line, kept if the first
 * profile naming it had none. */
static uint32_t tree_fn(struct pprof_tree *t, const char *name, const char *file, int64_t line)
{
    struct tree_priv *tp = t->priv;
    struct tree_fkey k = {name, file};
    uint32_t h = (uint32_t)(hbytes(tp->seed, name, strlen(name)) ^
                            hmix(hbytes(tp->seed, file, strlen(file))));
    uint32_t i = ht_find(&tp->fh, h, tree_fn_eq, t, &k);
    if (i != NONE) {
        if (t->fns[i].line <= 0 && line > 0)
            t->fns[i].line = line;
        return i;
    }
    if (t->nfns >= NONE - 1 || grow(&t->fns, &tp->fcap, t->nfns + 1, sizeof(*t->fns)))
        return NONE;
    struct pprof_tree_fn *f = &t->fns[t->nfns];
    f->name = isoprof_strdup(name);
    f->file = isoprof_strdup(file);
    f->line = line > 0 ? line : 0;
    if (f->name == NULL || f->file == NULL || ht_add(&tp->fh, h, (uint32_t)t->nfns)) {
        isoprof_free(f->name);
        isoprof_free(f->file);
        return NONE;
    }
    return (uint32_t)t->nfns++;
}

/* The child of parent for function fn, added if new: its index, or NONE
 * with *err set (-ENOMEM; ISOPROF_ETOOBIG past PPROF_TREE_MAX_NODES). */
static uint32_t tree_child(struct pprof_tree *t, uint32_t parent, uint32_t fn, int *err)
{
    struct tree_priv *tp = t->priv;
    struct tree_nkey k = {parent, fn};
    uint32_t h = (uint32_t)hmix(((uint64_t)parent << 32 | fn) ^ tp->seed);
    uint32_t i = ht_find(&tp->nh, h, tree_node_eq, t, &k);
    if (i != NONE)
        return i;
    if (t->nnodes >= PPROF_TREE_MAX_NODES) {
        *err = ISOPROF_ETOOBIG;
        return NONE;
    }
    if (grow(&t->nodes, &tp->ncap, t->nnodes + 1, sizeof(*t->nodes)) ||
        ht_add(&tp->nh, h, (uint32_t)t->nnodes)) {
        *err = -ENOMEM;
        return NONE;
    }
    i = (uint32_t)t->nnodes++;
    t->nodes[i] = (struct pprof_tree_node){
        .fn = fn, .parent = parent, .next = t->nodes[parent].child};
    t->nodes[parent].child = i;
    return i;
}

int pprof_tree_add(struct pprof_tree *t, const struct pprof_buf *in, int set, char **why)
{
    struct dec d;
    uint32_t *fmap = NULL;
    int rc;
    if (t == NULL || in == NULL || (set != 0 && set != 1))
        return -EINVAL;
    if (t->priv == NULL) {
        struct tree_priv *tp = isoprof_calloc(1, sizeof(*tp));
        if (tp == NULL)
            return -ENOMEM;
        tp->seed = hmix((uint64_t)(uintptr_t)tp);
        t->priv = tp;
    }
    if (t->nnodes == 0) {
        if (grow(&t->nodes, &((struct tree_priv *)t->priv)->ncap, 1, sizeof(*t->nodes)))
            return -ENOMEM;
        t->nodes[0] = (struct pprof_tree_node){.fn = PPROF_TREE_ROOT};
        t->nnodes = 1;
    }
    size_t k = t->profiles[0] + t->profiles[1];
    if ((rc = dec_open(&d, in, k, why)) != 0)
        return rc;
    const Perftools__Profiles__Profile *p = d.p;
    size_t vi = p->n_sample_type - 1;
    const char *type = dstr(&d, p->sample_type[vi]->type);
    const char *unit = dstr(&d, p->sample_type[vi]->unit);
    if (t->type == NULL) {
        t->type = isoprof_strdup(type);
        t->unit = isoprof_strdup(unit);
        if (t->type == NULL || t->unit == NULL) {
            rc = -ENOMEM;
            goto out;
        }
        /* a CPU profile's period is in the value's unit: samples = value / period */
        if (p->period_type && p->period > 0 && strcmp(dstr(&d, p->period_type->unit), unit) == 0)
            t->period = p->period;
    } else if (strcmp(t->type, type) != 0 || strcmp(t->unit, unit) != 0) {
        set_why(why, "profile %zu holds %s/%s, the others %s/%s: cpu and heap windows do not mix",
                k, type, unit, t->type, t->unit);
        rc = ISOPROF_EPROFILE;
        goto out;
    }
    if ((fmap = isoprof_malloc((p->n_function + 1) * sizeof(*fmap))) == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < p->n_function; i++) {
        const Perftools__Profiles__Function *f = p->function[i];
        if ((fmap[i] = tree_fn(t, dstr(&d, f->name), dstr(&d, f->filename), f->start_line)) ==
            NONE) {
            rc = -ENOMEM;
            goto out;
        }
    }
    for (size_t i = 0; i < p->n_sample; i++) {
        const Perftools__Profiles__Sample *s = p->sample[i];
        int64_t v = s->value[vi];
        if (v == 0)
            continue;
        /* root first: the last location is the outermost, and within a
         * location the last line is the caller the others were inlined in */
        uint32_t node = 0;
        for (size_t j = s->n_location_id; j-- > 0;) {
            const Perftools__Profiles__Location *l = p->location[dec_loc(&d, s->location_id[j])];
            for (size_t m = l->n_line; m-- > 0;) {
                uint64_t fid = l->line[m]->function_id;
                if (fid == 0)
                    continue;
                uint32_t child = tree_child(t, node, fmap[dec_func(&d, fid)], &rc);
                if (child == NONE)
                    goto out;
                node = child;
                t->nodes[node].total[set] = sat_add(t->nodes[node].total[set], v);
            }
        }
        t->nodes[node].self[set] = sat_add(t->nodes[node].self[set], v);
        t->nodes[0].total[set] = sat_add(t->nodes[0].total[set], v);
    }
    if (p->time_nanos > 0) {
        int64_t end = sat_add(p->time_nanos, p->duration_nanos);
        if (t->time_nanos[set] == 0 || p->time_nanos < t->time_nanos[set])
            t->time_nanos[set] = p->time_nanos;
        if (end > t->end_nanos[set])
            t->end_nanos[set] = end;
    }
    t->profiles[set]++;
    rc = 0;
out:
    isoprof_free(fmap);
    dec_close(&d);
    return rc;
}

void pprof_tree_free(struct pprof_tree *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->nfns; i++) {
        isoprof_free(t->fns[i].name);
        isoprof_free(t->fns[i].file);
    }
    struct tree_priv *tp = t->priv;
    if (tp) {
        ht_free(&tp->fh);
        ht_free(&tp->nh);
        isoprof_free(tp);
    }
    isoprof_free(t->fns);
    isoprof_free(t->nodes);
    isoprof_free(t->type);
    isoprof_free(t->unit);
    memset(t, 0, sizeof(*t));
}

/* --- gzip --- */

int pprof_gzip(const void *in, size_t len, struct pprof_buf *out)
{
    if (out == NULL)
        return -EINVAL;
    return isoprof_gzip(in, len, &out->data, &out->len);
}

int pprof_gunzip(const void *in, size_t len, size_t cap, struct pprof_buf *out)
{
    if (out == NULL)
        return -EINVAL;
    return isoprof_gunzip(in, len, cap, &out->data, &out->len);
}

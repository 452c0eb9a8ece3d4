/*
 * pprof.c - the pprof builder that V8 profiles (v8json.c) and merged
 * profiles (merge.c) are written through, and gzip. The library converts
 * V8 CPU and heap profiles (CDP JSON) to pprof, merges pprof, sums its top
 * functions (merge.c) and its call tree (tree.c); this note is the design
 * of all of it.
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
#include "pprof_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "htab.h"

/* --- small helpers --- */

void pprof_buf_free(struct pprof_buf *b)
{
    if (b == NULL)
        return;
    isoprof_free(b->data);
    b->data = NULL;
    b->len = 0;
}

void pprof_set_why(char **why, const char *fmt, ...)
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
int pprof_grow(void *pp, size_t *cap, size_t need, size_t elem)
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

int64_t pprof_sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

int64_t pprof_sat_mul(int64_t a, int64_t b)
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
size_t pprof_utf8_clean(const uint8_t *s, size_t n, char *out, size_t max)
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

void bld_fail(struct bld *b, int err)
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
uint32_t bld_str(struct bld *b, const char *s, size_t n)
{
    if (b->err)
        return 0;
    struct skey k = {s, n};
    uint32_t h = (uint32_t)hbytes(b->seed, s, n);
    uint32_t i = ht_find(&b->sh, h, s_eq, b, &k);
    if (i != NONE)
        return i;
    if (b->ns >= UINT32_MAX - 1) {
        bld_fail(b, ISOPROF_ETOOBIG);
        return 0;
    }
    int rc = isoprof_buf_reserve(&b->sb, n + 1); /* ISOPROF_ETOOBIG past PPROF_MAX_OUTPUT */
    if (rc != 0) {
        bld_fail(b, rc);
        return 0;
    }
    if (pprof_grow(&b->soff, &b->nscap, b->ns + 1, 4) ||
        pprof_grow(&b->slen, &b->nscap2, b->ns + 1, 4) || ht_add(&b->sh, h, (uint32_t)b->ns)) {
        bld_fail(b, -ENOMEM);
        return 0;
    }
    b->soff[b->ns] = (uint32_t)b->sb.len;
    b->slen[b->ns] = (uint32_t)n;
    /* Reserved above: neither append can fail. */
    isoprof_buf_append(&b->sb, s, n);
    isoprof_buf_putc(&b->sb, '\0');
    return (uint32_t)b->ns++;
}

uint32_t bld_cstr(struct bld *b, const char *s)
{
    return bld_str(b, s ? s : "", s ? strlen(s) : 0);
}

static bool f_eq(const void *ctx, uint32_t idx, const void *key)
{
    const struct bfunc *a = &((const struct bld *)ctx)->fn[idx], *k = key;
    return a->name == k->name && a->sys == k->sys && a->file == k->file;
}

/* A function, identified by (name, system_name, filename); the first
 * start_line seen wins. Returns its id (index + 1). */
uint64_t bld_func(struct bld *b, uint32_t name, uint32_t sys, uint32_t file, int64_t start)
{
    if (b->err)
        return 0;
    struct bfunc k = {name, sys, file, start};
    uint32_t h = (uint32_t)hmix(b->seed ^ ((uint64_t)name << 32 | file) ^ hmix(sys));
    uint32_t i = ht_find(&b->fh, h, f_eq, b, &k);
    if (i != NONE)
        return (uint64_t)i + 1;
    if (pprof_grow(&b->fn, &b->fncap, b->nfn + 1, sizeof(*b->fn)) ||
        ht_add(&b->fh, h, (uint32_t)b->nfn)) {
        bld_fail(b, -ENOMEM);
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
uint64_t bld_loc(struct bld *b, const struct bline *lines, size_t n)
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
    if (b->nln + n >= UINT32_MAX || pprof_grow(&b->ln, &b->lncap, b->nln + n, sizeof(*b->ln)) ||
        pprof_grow(&b->loc, &b->loccap, b->nloc + 1, sizeof(*b->loc)) ||
        ht_add(&b->lh, h, (uint32_t)b->nloc)) {
        bld_fail(b, -ENOMEM);
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
static uint64_t bld_trunc_loc(struct bld *b)
{
    if (b->trunc_loc == 0) {
        struct bline l = {bld_func(b, bld_cstr(b, PPROF_TRUNCATED_FRAME), 0, 0, 0), 0, 0};
        b->trunc_loc = bld_loc(b, &l, 1);
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
uint32_t bld_stack(struct bld *b, uint32_t parent, uint64_t loc)
{
    if (b->err)
        return 0;
    unsigned depth = b->std ? b->std[parent] : 0;
    if (depth > PPROF_MAX_STACK) {
        b->truncated++;
        return parent; /* parent is the (truncated) frame */
    }
    if (depth == PPROF_MAX_STACK && parent != 0) {
        uint64_t tl = bld_trunc_loc(b);
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
    if (b->nst >= UINT32_MAX - 1 || pprof_grow(&b->stp, &b->stcap, b->nst + 1, 4) ||
        pprof_grow(&b->stl, &b->stcap2, b->nst + 1, 4) ||
        pprof_grow(&b->std, &b->stdcap, b->nst + 1, sizeof(*b->std)) ||
        pprof_grow(&b->stv, &b->stvcap, (b->nst + 1) * b->nv, sizeof(int64_t)) ||
        ht_add(&b->sth, h, (uint32_t)b->nst)) {
        bld_fail(b, -ENOMEM);
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
void bld_comment(struct bld *b, const char *s)
{
    for (size_t i = 0; i < b->ncomment; i++)
        if (strcmp(b->sb.data + b->soff[b->comment[i]], s) == 0)
            return;
    if (b->ncomment == PPROF_MAX_COMMENTS)
        return; /* not even interned: a dropped line costs no output */
    uint32_t c = bld_cstr(b, s);
    if (!b->err)
        b->comment[b->ncomment++] = c;
}

void bld_add(struct bld *b, uint32_t stack, const int64_t *v)
{
    if (b->err)
        return;
    for (size_t i = 0; i < b->nv; i++)
        b->stv[stack * b->nv + i] = pprof_sat_add(b->stv[stack * b->nv + i], v[i]);
}

int bld_init(struct bld *b, size_t nv)
{
    memset(b, 0, sizeof(*b));
    b->nv = nv;
    isoprof_buf_init(&b->sb, PPROF_MAX_OUTPUT);
    b->seed = hmix((uint64_t)(uintptr_t)b ^ 0x5bd1e995);
    bld_str(b, "", 0);
    bld_stack(b, 0, 0); /* the empty stack, index 0 */
    return b->err;
}

void bld_free(struct bld *b)
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
int bld_finish(struct bld *b, const struct bmeta *m, struct pprof_buf *out)
{
    struct isoprof_buf o;
    isoprof_buf_init(&o, b->limit ? b->limit : PPROF_MAX_OUTPUT);
    if (b->truncated) {
        char c[160];
        snprintf(c, sizeof(c),
                 "isoprof: stacks deeper than %d frames were cut; %" PRIu64
                 " deeper frames are counted in their " PPROF_TRUNCATED_FRAME " frame",
                 PPROF_MAX_STACK, b->truncated);
        bld_comment(b, c);
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

/*
 * heapsnap_parse.c - the heap snapshot parser: its state and errors, the
 * budget, the strings arena, the loop that reads the integers of nodes[]
 * and edges[] into their columns (and the edge records into the spill
 * file), the hooks of config/jsonlex.h, and the parser's calls
 * (heapsnap_parser_*). What the keys and containers mean is
 * heapsnap_schema.c's. See heapsnap.c for the design.
 */
#include "heapsnap_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "jsonlex.h"

/* --- the parser --- */

static const char *const reasons[HEAPSNAP_NREASONS] = {
    [HEAPSNAP_OK] = "ok",
    [HEAPSNAP_E_JSON] = "json",
    [HEAPSNAP_E_META] = "meta",
    [HEAPSNAP_E_MISSING] = "missing",
    [HEAPSNAP_E_VALUE] = "value",
    [HEAPSNAP_E_COUNT] = "count",
    [HEAPSNAP_E_EDGE] = "edge",
    [HEAPSNAP_E_EDGE_SUM] = "edge_sum",
    [HEAPSNAP_E_STRING] = "string",
    [HEAPSNAP_E_DEPTH] = "depth",
    [HEAPSNAP_E_TOOBIG] = "too_big",
    [HEAPSNAP_E_NOMEM] = "nomem",
    [HEAPSNAP_E_INCOMPLETE] = "incomplete",
    [HEAPSNAP_E_IO] = "io",
};

const char *heapsnap_reason(int reason)
{
    if (reason < 0 || reason >= HEAPSNAP_NREASONS)
        return "unknown";
    return reasons[reason];
}

int hs_pfail(struct heapsnap_parser *p, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jsonlex_fail_setv(&p->fail, err, fmt, ap);
    va_end(ap);
    return 0; /* stop */
}

int hs_nomem(struct heapsnap_parser *p)
{
    return hs_pfail(p, HEAPSNAP_E_NOMEM, "out of memory");
}

/* Charges `more` bytes to the budget: 1, or 0 with p->fail.err set. */
int hs_charge(struct heapsnap_parser *p, uint64_t more, const char *what)
{
    if (p->budget != 0 && (more > p->budget || p->held > p->budget - more))
        return hs_pfail(p, HEAPSNAP_E_TOOBIG,
                        "%s: %" PRIu64 " more bytes pass the budget (%zu bytes, %zu held)", what,
                        more, p->budget, p->held);
    p->held += (size_t)more;
    return 1;
}

/* Room for n more bytes in the strings arena. The budget is charged for
 * the bytes kept (charge), not for this capacity: the arena grows by a
 * quarter at a time, so its slack stays under a quarter of the strings
 * (plus 64 KiB), and finish cuts it off. */
static int arena_reserve(struct heapsnap_parser *p, size_t n)
{
    struct heapsnap *s = p->s;
    size_t need = s->strs_len + n;
    if (need <= s->strs_cap)
        return 1;
    if (need > UINT32_MAX)
        return hs_pfail(p, HEAPSNAP_E_TOOBIG, "the strings pass 4 GiB");
    size_t nc = s->strs_cap + s->strs_cap / 4 + 65536;
    if (nc < need)
        nc = need;
    if (nc > UINT32_MAX)
        nc = UINT32_MAX;
    char *t = isoprof_realloc(s->strs, nc);
    if (t == NULL)
        return hs_nomem(p);
    s->strs = t;
    s->strs_cap = nc;
    return 1;
}

/* Appends the offset of a finished string to the strings index. */
int hs_soff_push(struct heapsnap_parser *p, uint32_t off)
{
    struct heapsnap *s = p->s;
    if (s->nstrs >= HEAPSNAP_MAX_STRINGS)
        return hs_pfail(p, HEAPSNAP_E_TOOBIG, "more than %zu strings", HEAPSNAP_MAX_STRINGS);
    if (!hs_charge(p, sizeof(uint32_t), "strings"))
        return 0;
    if (s->nstrs == s->soff_cap) {
        size_t nc = s->soff_cap ? s->soff_cap * 2 : 4096;
        if (nc > HEAPSNAP_MAX_STRINGS)
            nc = HEAPSNAP_MAX_STRINGS;
        uint32_t *t = isoprof_realloc(s->soff, nc * sizeof(*t));
        if (t == NULL)
            return hs_nomem(p);
        s->soff = t;
        s->soff_cap = nc;
    }
    s->soff[s->nstrs++] = off;
    return 1;
}

/* --- the integers of nodes[] and edges[] --- */

/* Marks strings index i as named (used_names). 1, or 0 with p->fail.err set. */
static int mark_used(struct heapsnap_parser *p, uint32_t i)
{
    if (i >= HEAPSNAP_MAX_STRINGS)
        return 1; /* past any strings[]: refused at finish */
    if (i / 8 >= p->used_cap) {
        size_t nc = p->used_cap ? p->used_cap : 4096;
        while (nc <= i / 8)
            nc *= 2;
        if (!hs_charge(p, nc - p->used_cap, "the names' index"))
            return 0;
        uint8_t *u = isoprof_realloc(p->used, nc);
        if (u == NULL)
            return hs_nomem(p);
        memset(u + p->used_cap, 0, nc - p->used_cap);
        p->aux += nc - p->used_cap;
        p->used = u;
        p->used_cap = nc;
    }
    p->used[i / 8] |= (uint8_t)(1u << (i % 8));
    return 1;
}

static int wbuf_flush(struct heapsnap_parser *p)
{
    if (p->wlen == 0)
        return 1;
    if (isoprof_pwrite_full(p->s->fd, p->wbuf, p->wlen, p->woff) != 0)
        return hs_pfail(p, HEAPSNAP_E_IO,
                        "the spill file could not be written (%" PRIu64 " bytes in)", p->woff);
    p->woff += p->wlen;
    p->wlen = 0;
    return 1;
}

/* Edge i is read: its record to memory or the spill file. */
static int edge_put(struct heapsnap_parser *p, uint32_t i)
{
    struct heapsnap *s = p->s;
    uint8_t *r = s->fd < 0 ? s->erec + (size_t)i * EREC : p->wbuf + p->wlen;
    memcpy(r, &p->pe_to, 4);
    memcpy(r + 4, &p->pe_name, 4);
    r[8] = p->pe_type;
    if (!edge_is_indexed(s, p->pe_type)) {
        if ((uint64_t)p->pe_name + 1 > p->emax1)
            p->emax1 = (uint64_t)p->pe_name + 1;
        if (p->used_names && !mark_used(p, p->pe_name))
            return 0;
    }
    if (s->fd >= 0) {
        p->wlen += EREC;
        if (p->wlen + EREC > WBUF_BYTES)
            return wbuf_flush(p);
    }
    return 1;
}

/* One integer of nodes[] or edges[], into its column. */
static int ints_value(struct heapsnap_parser *p, uint64_t v)
{
    struct heapsnap *s = p->s;
    uint32_t i = p->item;
    if (p->iedges) {
        if (p->icount >= p->edge_count * p->efields)
            return hs_pfail(p, HEAPSNAP_E_COUNT,
                            "edges holds more than edge_count (%" PRIu64 ") x %u values",
                            p->edge_count, p->efields);
        switch (p->erole[p->field]) {
        case R_TYPE:
            if (v >= s->n_etypes)
                return hs_pfail(p, HEAPSNAP_E_VALUE,
                                "edges[%" PRIu64 "] (edge %" PRIu32 "): type %" PRIu64
                                " is past the %u edge types",
                                p->icount, i, v, s->n_etypes);
            p->pe_type = (uint8_t)v;
            break;
        case R_NAME:
            if (v > UINT32_MAX)
                return hs_pfail(p, HEAPSNAP_E_VALUE,
                                "edges[%" PRIu64 "] (edge %" PRIu32 "): name_or_index %" PRIu64
                                " is past 32 bits",
                                p->icount, i, v);
            p->pe_name = (uint32_t)v;
            break;
        case R_TO:
            if (v % p->nfields != 0 || v / p->nfields >= p->node_count)
                return hs_pfail(p, HEAPSNAP_E_EDGE,
                                "edges[%" PRIu64 "] (edge %" PRIu32 "): to_node %" PRIu64 " is %s",
                                p->icount, i, v,
                                v % p->nfields ? "not a multiple of the node field count"
                                               : "past the nodes");
            p->pe_to = (uint32_t)(v / p->nfields);
            break;
        default:
            break;
        }
        p->icount++;
        if (++p->field == p->efields) {
            p->field = 0;
            p->item++;
            return edge_put(p, i);
        }
        return 1;
    }
    if (p->icount >= p->node_count * p->nfields)
        return hs_pfail(p, HEAPSNAP_E_COUNT,
                        "nodes holds more than node_count (%" PRIu64 ") x %u values", p->node_count,
                        p->nfields);
    switch (p->nrole[p->field]) {
    case R_TYPE:
        if (v >= s->n_ntypes)
            return hs_pfail(p, HEAPSNAP_E_VALUE,
                            "nodes[%" PRIu64 "] (node %" PRIu32 "): type %" PRIu64
                            " is past the %u node types",
                            p->icount, i, v, s->n_ntypes);
        s->ntype[i] = (uint8_t)v;
        break;
    case R_NAME:
        if (v > UINT32_MAX)
            return hs_pfail(p, HEAPSNAP_E_VALUE,
                            "nodes[%" PRIu64 "] (node %" PRIu32 "): name %" PRIu64
                            " is past 32 bits",
                            p->icount, i, v);
        s->nname[i] = (uint32_t)v;
        break;
    case R_SELF:
        s->nself[i] = v;
        break;
    case R_ECOUNT:
        /* the running sum: a sum past edge_count is refused at once */
        if (v > p->edge_count - p->ecount_sum)
            return hs_pfail(p, HEAPSNAP_E_EDGE_SUM,
                            "nodes[%" PRIu64 "] (node %" PRIu32
                            "): the edge counts pass edge_count (%" PRIu64 ")",
                            p->icount, i, p->edge_count);
        p->ecount_sum += v;
        s->nfirst[i] = (uint32_t)v;
        break;
    default:
        break;
    }
    p->icount++;
    if (++p->field == p->nfields) {
        p->field = 0;
        p->item++;
        int t = s->ntype[i];
        if (p->used_names &&
            (t == s->nt_object || t == s->nt_closure || t == s->nt_native || t == s->nt_synthetic))
            return mark_used(p, s->nname[i]);
    }
    return 1;
}

/* The ']' of nodes[] or edges[]. */
int hs_ints_close(struct heapsnap_parser *p)
{
    p->ints = false;
    jsonlex_pop(&p->lx);
    p->nfr--;
    uint64_t want = p->iedges ? p->edge_count * p->efields : p->node_count * p->nfields;
    if (p->icount != want)
        return hs_pfail(
            p, HEAPSNAP_E_COUNT,
            "%s holds %" PRIu64 " values, not %s (%" PRIu64 ") x %u = %" PRIu64,
            p->iedges ? "edges" : "nodes", p->icount, p->iedges ? "edge_count" : "node_count",
            p->iedges ? p->edge_count : p->node_count, p->iedges ? p->efields : p->nfields, want);
    if (p->iedges) {
        if (p->s->fd >= 0) {
            if (!wbuf_flush(p))
                return 0;
            isoprof_free(p->wbuf);
            p->wbuf = NULL;
            p->held -= WBUF_BYTES;
            p->aux -= WBUF_BYTES;
            /* the predecessors after the edges, on a page of their own */
            p->s->preds_off = (p->woff + 4095) & ~(uint64_t)4095;
        }
        p->have_edges = true;
    } else {
        p->have_nodes = true;
    }
    return 1;
}

/* Reads nodes[] or edges[] from s; returns where it stopped (the end, the
 * byte after the array's ']', or an error). */
static const unsigned char *ints_feed(struct heapsnap_parser *p, const unsigned char *s,
                                      const unsigned char *end)
{
    const unsigned char *start = s;
    const char *what = p->iedges ? "edges" : "nodes";
    while (s < end) {
        unsigned c = *s;
        if (p->iphase == IP_NUM) {
            if (c - '0' < 10) {
                uint64_t d = c - '0';
                if (p->lead0) {
                    jsonlex_skip(&p->lx, (uint64_t)(s - start));
                    hs_pfail(p, HEAPSNAP_E_JSON,
                             "malformed JSON at byte %" PRIu64 ": a leading zero",
                             jsonlex_at(&p->lx));
                    return s;
                }
                if (p->acc > (UINT64_MAX - d) / 10) {
                    hs_pfail(p, HEAPSNAP_E_VALUE, "%s[%" PRIu64 "] is past 64 bits", what,
                             p->icount);
                    break;
                }
                p->acc = p->acc * 10 + d;
                s++;
                continue;
            }
            if (c == '.' || c == 'e' || c == 'E') {
                hs_pfail(p, HEAPSNAP_E_VALUE, "%s[%" PRIu64 "] is not an integer", what, p->icount);
                break;
            }
            p->iphase = IP_AFTER;
            if (!ints_value(p, p->acc))
                break;
        }
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
            s++;
            continue;
        }
        if (p->iphase == IP_AFTER) {
            if (c == ',') {
                p->iphase = IP_NEXT;
                s++;
                continue;
            }
            if (c == ']') {
                s++;
                hs_ints_close(p);
                break;
            }
            jsonlex_skip(&p->lx, (uint64_t)(s - start));
            hs_pfail(p, HEAPSNAP_E_JSON,
                     "malformed JSON at byte %" PRIu64 ": a ',' or ']' must come",
                     jsonlex_at(&p->lx));
            return s;
        }
        if (c - '0' < 10) {
            p->iphase = IP_NUM;
            p->acc = c - '0';
            p->lead0 = c == '0';
            s++;
            continue;
        }
        if (c == ']' && p->iphase == IP_FIRST) {
            s++;
            hs_ints_close(p);
            break;
        }
        if (c == '-' || c == '"' || c == '{' || c == '[' || c == 't' || c == 'f' || c == 'n') {
            hs_pfail(p, HEAPSNAP_E_VALUE, "%s[%" PRIu64 "] is not a non-negative integer", what,
                     p->icount);
            break;
        }
        jsonlex_skip(&p->lx, (uint64_t)(s - start));
        hs_pfail(p, HEAPSNAP_E_JSON, "malformed JSON at byte %" PRIu64 ": not a JSON value",
                 jsonlex_at(&p->lx));
        return s;
    }
    jsonlex_skip(&p->lx, (uint64_t)(s - start));
    return s;
}

/* --- the lexer's hooks (config/jsonlex.h) --- */

static int lx_on_open(void *c, int kind)
{
    struct heapsnap_parser *p = c;
    /* the lexer stops at the '[' of nodes or edges: ints_feed reads them */
    return hs_on_open(p, kind) && !p->ints;
}

static int lx_on_close(void *c, int kind)
{
    (void)kind;
    return hs_on_close(c);
}

/* A string starts: where the schema wants it. */
static int lx_on_string(void *c, bool key)
{
    struct heapsnap_parser *p = c;
    p->sink = SK_DROP;
    if (!p->started)
        return hs_pfail(p, HEAPSNAP_E_JSON, "the snapshot is not a JSON object");
    if (p->skip)
        return 1;
    if (key) {
        jsonlex_sink(&p->lx, JSONLEX_BUF, 0);
        return 1;
    }
    switch (frame_top(p)->ctx) {
    case X_STRINGS: {
        struct heapsnap *s = p->s;
        if (p->used_names && s->nstrs == 0 && s->strs_len == 0) {
            /* offset 0: the "" of every string nobody names; names are
             * known when nodes and edges came first, as V8 writes them */
            if (!hs_charge(p, 1, "strings") || !arena_reserve(p, 1))
                return 0;
            s->strs[s->strs_len++] = '\0';
            p->keep_all = !p->have_nodes || !p->have_edges;
        }
        size_t k = s->nstrs;
        if (p->used_names && !p->keep_all &&
            (k / 8 >= p->used_cap || !(p->used[k / 8] >> (k % 8) & 1))) {
            p->str_start = 0;
            jsonlex_sink(&p->lx, JSONLEX_DROP, 0);
            return 1;
        }
        if (!hs_charge(p, 1, "strings") || !arena_reserve(p, 1)) /* its NUL */
            return 0;
        p->sink = SK_ARENA;
        p->str_start = p->s->strs_len;
        jsonlex_sink(&p->lx, JSONLEX_PUT, HEAPSNAP_MAX_NAME);
        return 1;
    }
    case X_NFIELDS:
    case X_EFIELDS:
    case X_NTLIST:
    case X_ETLIST:
        p->sink = SK_NAME;
        jsonlex_sink(&p->lx, JSONLEX_BUF, 0);
        return 1;
    default:
        return 1;
    }
}

/* Bytes of a strings[] entry (the lexer stops them at HEAPSNAP_MAX_NAME). */
static int lx_on_put(void *c, const char *b, size_t n)
{
    struct heapsnap_parser *p = c;
    if (!hs_charge(p, n, "strings") || !arena_reserve(p, n + 1)) /* + the NUL that ends it */
        return 0;
    struct heapsnap *s = p->s;
    memcpy(s->strs + s->strs_len, b, n);
    s->strs_len += n;
    return 1;
}

static int lx_on_key(void *c, const char *k, size_t n)
{
    struct heapsnap_parser *p = c;
    if (!p->skip)
        hs_on_key(p, k, n);
    return 1;
}

static int lx_on_value(void *c, int kind, const char *text, size_t n)
{
    struct heapsnap_parser *p = c;
    if (kind == 's' && p->sink == SK_ARENA) {
        struct heapsnap *s = p->s;
        s->strs[s->strs_len++] = '\0'; /* reserved */
    }
    return hs_on_scalar(p, kind, text, n);
}

static void lx_on_fail(void *c, enum jsonlex_err err, const char *what, uint64_t at)
{
    static const struct jsonlex_doc doc = {"the snapshot", HEAPSNAP_E_JSON, HEAPSNAP_E_DEPTH};
    struct heapsnap_parser *p = c;
    jsonlex_fail_lexer(&p->fail, &doc, &p->lx, err, what, at);
}

static const struct jsonlex_hooks lx_hooks = {
    .open = lx_on_open,
    .close = lx_on_close,
    .string = lx_on_string,
    .put = lx_on_put,
    .key = lx_on_key,
    .value = lx_on_value,
    .fail = lx_on_fail,
};

int heapsnap_parser_feed(struct heapsnap_parser *p, const void *buf, size_t len)
{
    if (p->spent && p->fail.err == 0)
        hs_pfail(p, HEAPSNAP_E_INCOMPLETE, "the parser was finished");
    const unsigned char *s = buf, *end = s + len;
    while (p->fail.err == 0 && s < end) {
        if (p->ints)
            s = ints_feed(p, s, end);
        else
            s += jsonlex_feed(&p->lx, s, (size_t)(end - s));
    }
    return p->fail.err;
}

int heapsnap_parser_new_opts(const struct heapsnap_parse_opts *o, struct heapsnap_parser **out)
{
    struct heapsnap_parser *p = isoprof_calloc(1, sizeof(*p));
    if (p == NULL || (p->s = isoprof_calloc(1, sizeof(*p->s))) == NULL) {
        isoprof_free(p);
        if (o->spill_fd >= 0)
            close(o->spill_fd);
        return -ENOMEM;
    }
    p->s->fd = o->spill_fd;
    p->s->pred_chunk = o->pred_chunk ? o->pred_chunk : HEAPSNAP_PRED_CHUNK;
    p->budget = o->budget;
    p->reserve_node = o->reserve_node;
    p->used_names = o->used_names;
    p->held = sizeof(*p->s) + 4; /* + nfirst's last entry */
    if (o->spill_fd >= 0) {
        p->held += WBUF_BYTES;
        p->aux += WBUF_BYTES;
    }
    jsonlex_init(&p->lx, &lx_hooks, p, p->objs, HEAPSNAP_MAX_NESTING,
                 JSONLEX_TOP_CONTAINER | JSONLEX_NO_NUL);
    if (p->budget != 0 && p->held > p->budget)
        hs_pfail(p, HEAPSNAP_E_TOOBIG, "a budget of %zu bytes holds no snapshot", p->budget);
    *out = p;
    return 0;
}

int heapsnap_parser_new(size_t budget, struct heapsnap_parser **out)
{
    struct heapsnap_parse_opts o = {.budget = budget, .spill_fd = -1};
    return heapsnap_parser_new_opts(&o, out);
}

void heapsnap_parser_free(struct heapsnap_parser *p)
{
    if (p == NULL)
        return;
    heapsnap_free(p->s);
    isoprof_free(p->wbuf);
    isoprof_free(p->used);
    jsonlex_fail_free(&p->fail);
    isoprof_free(p);
}

/* The last checks, and the index of each node's first edge. */
static int finish_checks(struct heapsnap_parser *p)
{
    struct heapsnap *s = p->s;
    if (!p->have_snapshot || !p->have_meta || !p->have_node_count || !p->have_edge_count ||
        !p->have_nodes || !p->have_edges || !p->have_strings)
        return hs_pfail(p, HEAPSNAP_E_MISSING, "no %s",
                        !p->have_snapshot     ? "snapshot"
                        : !p->have_meta       ? "snapshot.meta"
                        : !p->have_node_count ? "snapshot.node_count"
                        : !p->have_edge_count ? "snapshot.edge_count"
                        : !p->have_nodes      ? "nodes"
                        : !p->have_edges      ? "edges"
                                              : "strings");
    s->nnodes = (uint32_t)p->node_count;
    s->nedges = (uint32_t)p->edge_count;
    if (p->ecount_sum != p->edge_count)
        return hs_pfail(p, HEAPSNAP_E_EDGE_SUM,
                        "the nodes' edge counts add up to %" PRIu64 ", edge_count is %" PRIu64,
                        p->ecount_sum, p->edge_count);
    for (uint32_t i = 0; i < s->nnodes; i++)
        if (s->nname[i] >= s->nstrs)
            return hs_pfail(p, HEAPSNAP_E_STRING,
                            "node %" PRIu32 ": name %" PRIu32 " is past the %zu strings", i,
                            s->nname[i], s->nstrs);
    if (p->emax1 > s->nstrs) {
        /* the first edge that names past the strings, for the message */
        struct ecache c;
        if (hs_ec_init(&c, s, 1) != 0)
            return hs_nomem(p);
        for (uint32_t e = 0; e < s->nedges && c.err == 0; e++) {
            const uint8_t *r = ec_get(&c, e);
            if (c.err == 0 && !edge_is_indexed(s, rec_type(r)) && rec_name(r) >= s->nstrs) {
                hs_ec_free(&c);
                return hs_pfail(p, HEAPSNAP_E_STRING,
                                "edge %" PRIu32 ": name %" PRIu32 " is past the %zu strings", e,
                                rec_name(r), s->nstrs);
            }
        }
        hs_ec_free(&c);
        return hs_pfail(p, HEAPSNAP_E_IO, "the spill file could not be read back");
    }
    /* the edge counts become the index of each node's first edge */
    uint32_t *nf = isoprof_realloc(s->nfirst, ((size_t)s->nnodes + 1) * sizeof(uint32_t));
    if (nf == NULL)
        return hs_nomem(p);
    s->nfirst = nf;
    uint32_t at = 0;
    for (uint32_t i = 0; i < s->nnodes; i++) {
        uint32_t c = nf[i];
        nf[i] = at;
        at += c;
    }
    nf[s->nnodes] = at;
    /* the strings cut to their length */
    char *t = isoprof_realloc(s->strs, s->strs_len ? s->strs_len : 1);
    if (t == NULL)
        return hs_nomem(p);
    s->strs = t;
    s->strs_cap = s->strs_len ? s->strs_len : 1;
    uint32_t *o = isoprof_realloc(s->soff, (s->nstrs ? s->nstrs : 1) * sizeof(*o));
    if (o == NULL)
        return hs_nomem(p);
    s->soff = o;
    s->soff_cap = s->nstrs ? s->nstrs : 1;
    /* what was charged is what is held */
    ISOPROF_ASSERT(hs_snap_bytes(s) + p->aux == p->held);
    return 1;
}

int heapsnap_parser_finish(struct heapsnap_parser *p, struct heapsnap **out, char **why)
{
    *out = NULL;
    if (why)
        *why = NULL;
    if (p->spent)
        return HEAPSNAP_E_INCOMPLETE;
    p->spent = true;
    if (p->fail.err == 0 && jsonlex_depth(&p->lx) == 0)
        jsonlex_finish(&p->lx); /* a number at the very end: only the top, refused */
    if (p->fail.err == 0 && !p->started)
        hs_pfail(p, HEAPSNAP_E_INCOMPLETE, "no text");
    if (p->fail.err == 0 && !jsonlex_done(&p->lx))
        hs_pfail(p, HEAPSNAP_E_INCOMPLETE,
                 "the text stops inside the snapshot, after %" PRIu64 " bytes", jsonlex_at(&p->lx));
    if (p->fail.err == 0)
        finish_checks(p);
    if (p->fail.err != 0) {
        if (why) {
            *why = jsonlex_fail_take(&p->fail);
        }
        return p->fail.err;
    }
    *out = p->s;
    p->s = NULL;
    return HEAPSNAP_OK;
}

int heapsnap_parse(const void *json, size_t len, size_t budget, struct heapsnap **out, char **why)
{
    struct heapsnap_parser *p;
    *out = NULL;
    if (why)
        *why = NULL;
    if (heapsnap_parser_new(budget, &p) != 0)
        return HEAPSNAP_E_NOMEM;
    heapsnap_parser_feed(p, json, len);
    int rc = heapsnap_parser_finish(p, out, why);
    heapsnap_parser_free(p);
    return rc;
}

/*
 * heapsnap.c - V8 heap snapshots: the streaming parser, the dominator tree
 * and the retained profile (see heapsnap.h).
 *
 * The parser runs on the push lexer of config/jsonlex.h, as
 * agent/srcmap/srcmap.c does: every byte is read once, a string goes to
 * its sink as it streams by (dropped, the lexer's buffer for a key or a
 * short meta name, or the strings arena, cut by the lexer at
 * HEAPSNAP_MAX_NAME bytes on a character boundary), and a value nobody
 * asked for is skipped by counting its nesting. A snapshot is mostly
 * integers in `nodes` and `edges`, so those two arrays have a loop of
 * their own (the lexer stops at their '[' and takes over again after their
 * ']'): digits accumulate across chunk boundaries and
 * each integer lands in its column at once, checked against meta (a type in
 * range, a to_node that is a multiple of the node field count and inside
 * the nodes). V8 writes `snapshot` (meta and the counts) before the arrays,
 * so each array is allocated once, at its final size, after the budget
 * allowed it; only the strings grow (by doubling, under the budget, and
 * cut to their length at finish). Nothing of the text is kept.
 *
 * The dominator tree is Lengauer-Tarjan over a depth-first search whose
 * stack is the DFS tree itself (each node keeps an edge cursor and walks
 * back up through its parent), with path compression that reverses the
 * ancestor pointers on its way up: no recursion and no stack, so a chain
 * of a million nodes costs no thread stack. All arrays are indexed by DFS
 * number and sized once.
 *
 * With a spill file (the daemon's conversion) the edges live in the file,
 * read through a small block cache; the predecessor lists are filled in
 * one scan through per-window buckets in the file; and when the
 * conversion owns the snapshot, each node array waits in the file while
 * no pass reads it. What stays in memory is per node, and a snapshot
 * whose node count would not fit the budget is refused when that count is
 * read.
 *
 * The profile chooses its paths best first: the children (in the
 * dominator tree) of the nodes of a chosen path are grouped by frame, each
 * group is a candidate path worth what its nodes retain together, and the
 * largest candidate is chosen next, until the caps; a trie of chosen paths
 * keyed by (parent path, frame) gives each its sample. Then every node's
 * self size goes to its own path, or to its nearest dominator's that was
 * chosen. A group never retains more than the group it came from, so the
 * chosen paths are the ones that hold the most, and each comes after its
 * prefix. The Profile is built with
 * protobuf-c's generated structs and packed once (a few thousand samples, so there is no need for
 * pprof.c's streaming writer).
 */
#include "heapsnap.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "htab.h"
#include "jsonlex.h"
#include "profile.pb-c.h"

#define NONE HEAPSNAP_NONE
#define TYPE_NAME_MAX 63     /* bytes of a node or edge type name */
#define TYPE_ENTRIES_MAX 256 /* names in all the arrays of node_types (or edge_types) */
#define MAX_CTX 6            /* top, snapshot, meta, node_types, a type list */

/* --- the snapshot --- */

/* An edge's record, in memory or in the spill file: to (4 bytes, the
 * target's ordinal), name_or_index (4), type (1, an index into etypes). */
#define EREC 9

struct heapsnap {
    uint32_t nnodes, nedges;
    uint8_t *ntype;     /* per node: index into ntypes */
    uint32_t *nname;    /* per node: strings index */
    uint64_t *nself;    /* per node: self_size */
    uint32_t *nfirst;   /* nnodes + 1: node i's edges are nfirst[i] .. nfirst[i + 1] - 1 (while
                           it parses: node i's edge_count) */
    uint8_t *erec;      /* EREC bytes an edge; NULL with a spill file */
    int fd;             /* the spill file (the edge records at 0, then the predecessors); -1 */
    uint64_t preds_off; /* where the predecessor lists go in it */
    size_t pred_chunk;  /* predecessor entries in memory at once with it */
    char *strs;         /* the kept strings, each NUL-terminated */
    size_t strs_len, strs_cap;
    uint32_t *soff; /* strings[i] is strs + soff[i] */
    size_t nstrs, soff_cap;
    unsigned n_ntypes, n_etypes;
    char ntypes[HEAPSNAP_MAX_TYPES][TYPE_NAME_MAX + 1];
    char etypes[HEAPSNAP_MAX_TYPES][TYPE_NAME_MAX + 1];
    int et_element, et_hidden, et_weak, et_shortcut, et_internal; /* -1: not among them */
    int nt_object, nt_closure, nt_native, nt_synthetic;
};

/* What the arrays of n nodes and e edges take (the budget's unit). */
static uint64_t arrays_bytes(uint64_t n, uint64_t e, bool spill)
{
    return n * HEAPSNAP_NODE_BYTES + (spill ? 0 : e * HEAPSNAP_EDGE_BYTES);
}

/* What a finished snapshot holds (its arrays are cut to their lengths). */
static size_t snap_bytes(const struct heapsnap *s)
{
    return sizeof(*s) + 4 + (size_t)arrays_bytes(s->nnodes, s->nedges, s->fd >= 0) + s->strs_cap +
           s->soff_cap * sizeof(uint32_t);
}

/* Whether an edge of type t from node `from` retains its target (see
 * heapsnap.h). */
static inline bool retains(const struct heapsnap *s, uint32_t from, int t)
{
    return t != s->et_weak && (t != s->et_shortcut || from == 0);
}

static inline bool edge_is_indexed(const struct heapsnap *s, int t)
{
    return t == s->et_element || t == s->et_hidden;
}

static inline const char *str_at(const struct heapsnap *s, uint32_t i)
{
    return s->strs + s->soff[i];
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}

/* --- the spill file --- */

/* The edge records, in memory or read from the spill file through a
 * direct-mapped cache of EC_BLOCK-record blocks: a node's edges are one
 * run of records, so a depth-first search costs about one read a node it
 * visits, and a scan in node order one read a block. */
#define EC_BLOCK 256u
#define EC_DFS_SLOTS ((uint32_t)(HEAPSNAP_SPILL_CACHE / (EC_BLOCK * EREC)))
#define EC_SEQ_SLOTS 16u

struct ecache {
    const struct heapsnap *s;
    uint8_t *blk;  /* nslots blocks */
    uint32_t *tag; /* per slot: its block + 1; 0 empty */
    uint32_t nslots;
    int err; /* -EIO once a read failed */
};

static size_t ec_bytes(uint32_t nslots)
{
    return (size_t)nslots * (EC_BLOCK * EREC + sizeof(uint32_t));
}

static int ec_init(struct ecache *c, const struct heapsnap *s, uint32_t nslots)
{
    memset(c, 0, sizeof(*c));
    c->s = s;
    if (s->fd < 0)
        return 0;
    c->nslots = nslots;
    c->blk = isoprof_malloc((size_t)nslots * EC_BLOCK * EREC);
    c->tag = isoprof_calloc(nslots, sizeof(uint32_t));
    if (c->blk == NULL || c->tag == NULL) {
        isoprof_free(c->blk);
        isoprof_free(c->tag);
        c->blk = NULL;
        c->tag = NULL;
        return -ENOMEM;
    }
    return 0;
}

static void ec_free(struct ecache *c)
{
    isoprof_free(c->blk);
    isoprof_free(c->tag);
    c->blk = NULL;
    c->tag = NULL;
}

/* Edge e's record. A failed read sets c->err and gives an all-zero record
 * (type 0, to the root), harmless to every loop; each pass checks c->err
 * after it. */
static inline const uint8_t *ec_get(struct ecache *c, uint32_t e)
{
    static const uint8_t zero[EREC];
    const struct heapsnap *s = c->s;
    if (s->erec != NULL)
        return s->erec + (size_t)e * EREC;
    uint32_t b = e / EC_BLOCK, slot = b % c->nslots;
    uint8_t *blk = c->blk + (size_t)slot * EC_BLOCK * EREC;
    if (c->tag[slot] != b + 1) {
        uint32_t first = b * EC_BLOCK,
                 k = s->nedges - first < EC_BLOCK ? s->nedges - first : EC_BLOCK;
        size_t want = (size_t)k * EREC;
        if (isoprof_pread_full(s->fd, blk, want, (off_t)first * EREC) != (ssize_t)want) {
            c->tag[slot] = 0;
            c->err = -EIO;
            return zero;
        }
        c->tag[slot] = b + 1;
    }
    return blk + (size_t)(e % EC_BLOCK) * EREC;
}

static inline uint32_t rec_to(const uint8_t *r)
{
    uint32_t v;
    memcpy(&v, r, 4);
    return v;
}

static inline uint32_t rec_name(const uint8_t *r)
{
    uint32_t v;
    memcpy(&v, r + 4, 4);
    return v;
}

static inline int rec_type(const uint8_t *r)
{
    return r[8];
}

/* --- the parser --- */

/* Where the string being read goes: nowhere, the lexer's buffer (a meta
 * name), or the strings arena. */
enum sink { SK_DROP, SK_NAME, SK_ARENA };
_Static_assert(TYPE_NAME_MAX <= JSONLEX_BUF_MAX, "a type name fits the lexer's buffer");

/* The keys we look for, by the object they are in. */
enum key {
    K_NONE,
    K_SNAPSHOT,
    K_NODES,
    K_EDGES,
    K_STRINGS, /* top */
    K_META,
    K_NODE_COUNT,
    K_EDGE_COUNT, /* snapshot */
    K_NODE_FIELDS,
    K_NODE_TYPES,
    K_EDGE_FIELDS,
    K_EDGE_TYPES, /* meta */
};

/* The containers we are inside of, outermost first. */
enum ctx {
    X_TOP,
    X_SNAPSHOT,
    X_META,
    X_NFIELDS,
    X_EFIELDS,
    X_NTYPES,
    X_ETYPES,
    X_NTLIST, /* an array of names inside node_types */
    X_ETLIST,
    X_NODES,
    X_EDGES,
    X_STRINGS,
};

/* What a column of nodes[] or edges[] holds. */
enum role { R_NONE, R_TYPE, R_NAME, R_SELF, R_ECOUNT, R_TO };

/* Where the integer loop is: after '[', inside a number, after a value,
 * after ','. */
enum iphase { IP_FIRST, IP_NUM, IP_AFTER, IP_NEXT };

struct frame {
    enum ctx ctx;
    uint32_t n; /* values begun in it */
};

struct tentry {
    uint8_t pos; /* the element of node_types (edge_types) it is in */
    char name[TYPE_NAME_MAX + 1];
};

struct heapsnap_parser {
    struct jsonlex lx;
    uint8_t objs[JSONLEX_STACK_BYTES(HEAPSNAP_MAX_NESTING)]; /* the lexer's stack */
    enum sink sink;
    size_t str_start; /* the strings[] entry being read: its offset */
    /* the integers of nodes[] and edges[] */
    bool ints;
    bool iedges;
    enum iphase iphase;
    bool lead0;
    uint64_t acc;
    uint64_t icount; /* integers read */
    uint32_t item;   /* the node or edge they are of */
    unsigned field;  /* ... and its column */
    /* the schema */
    int err;
    char *why;
    bool started, spent;
    struct frame fr[MAX_CTX];
    size_t nfr;
    size_t skip; /* nesting of a value being skipped; 0: none */
    enum key pending;
    bool have_snapshot, have_meta, have_nodes, have_edges, have_strings;
    bool have_node_count, have_edge_count;
    bool have_nfields, have_efields, have_ntypes, have_etypes;
    uint8_t nrole[HEAPSNAP_MAX_FIELDS], erole[HEAPSNAP_MAX_FIELDS];
    unsigned nfields, efields;
    struct tentry nt[TYPE_ENTRIES_MAX], et[TYPE_ENTRIES_MAX];
    unsigned nnt, net;
    uint64_t node_count, edge_count, ecount_sum;
    size_t budget; /* 0: none */
    size_t held;   /* what the snapshot holds or has been granted, and aux */
    size_t aux;    /* ... of which not the snapshot's: the reserve, the write buffer, used */
    size_t reserve_node;
    /* the edge being read, and with a spill file the records not yet written */
    uint32_t pe_to, pe_name;
    uint8_t pe_type;
    uint64_t emax1; /* 1 + the largest strings index an edge names; 0: none */
    uint8_t *wbuf;
    size_t wlen;
    uint64_t woff;
    /* used_names: the strings indexes that something named, a bit each */
    bool used_names, keep_all;
    uint8_t *used;
    size_t used_cap; /* bytes */
    struct heapsnap *s;
};

#define WBUF_BYTES ((size_t)64 << 10)

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

static int pfail(struct heapsnap_parser *p, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int pfail(struct heapsnap_parser *p, int err, const char *fmt, ...)
{
    if (p->err == 0) {
        p->err = err;
        char buf[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        p->why = isoprof_strdup(buf);
    }
    return 0; /* stop */
}

static int nomem(struct heapsnap_parser *p)
{
    return pfail(p, HEAPSNAP_E_NOMEM, "out of memory");
}

/* Charges `more` bytes to the budget: 1, or 0 with p->err set. */
static int charge(struct heapsnap_parser *p, uint64_t more, const char *what)
{
    if (p->budget != 0 && (more > p->budget || p->held > p->budget - more))
        return pfail(p, HEAPSNAP_E_TOOBIG,
                     "%s: %" PRIu64 " more bytes pass the budget (%zu bytes, %zu held)", what, more,
                     p->budget, p->held);
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
        return pfail(p, HEAPSNAP_E_TOOBIG, "the strings pass 4 GiB");
    size_t nc = s->strs_cap + s->strs_cap / 4 + 65536;
    if (nc < need)
        nc = need;
    if (nc > UINT32_MAX)
        nc = UINT32_MAX;
    char *t = isoprof_realloc(s->strs, nc);
    if (t == NULL)
        return nomem(p);
    s->strs = t;
    s->strs_cap = nc;
    return 1;
}

/* Appends the offset of a finished string to the strings index. */
static int soff_push(struct heapsnap_parser *p, uint32_t off)
{
    struct heapsnap *s = p->s;
    if (s->nstrs >= HEAPSNAP_MAX_STRINGS)
        return pfail(p, HEAPSNAP_E_TOOBIG, "more than %zu strings", HEAPSNAP_MAX_STRINGS);
    if (!charge(p, sizeof(uint32_t), "strings"))
        return 0;
    if (s->nstrs == s->soff_cap) {
        size_t nc = s->soff_cap ? s->soff_cap * 2 : 4096;
        if (nc > HEAPSNAP_MAX_STRINGS)
            nc = HEAPSNAP_MAX_STRINGS;
        uint32_t *t = isoprof_realloc(s->soff, nc * sizeof(*t));
        if (t == NULL)
            return nomem(p);
        s->soff = t;
        s->soff_cap = nc;
    }
    s->soff[s->nstrs++] = off;
    return 1;
}

/* --- the schema: what the tokenizer hands over --- */

static const char *ctx_name(enum ctx c)
{
    switch (c) {
    case X_NFIELDS:
        return "node_fields";
    case X_EFIELDS:
        return "edge_fields";
    case X_NTYPES:
    case X_NTLIST:
        return "node_types";
    case X_ETYPES:
    case X_ETLIST:
        return "edge_types";
    case X_NODES:
        return "nodes";
    case X_EDGES:
        return "edges";
    case X_STRINGS:
        return "strings";
    default:
        return "snapshot";
    }
}

static const char *key_name(enum key k)
{
    switch (k) {
    case K_SNAPSHOT:
        return "snapshot";
    case K_NODES:
        return "nodes";
    case K_EDGES:
        return "edges";
    case K_STRINGS:
        return "strings";
    case K_META:
        return "snapshot.meta";
    case K_NODE_COUNT:
        return "snapshot.node_count";
    case K_EDGE_COUNT:
        return "snapshot.edge_count";
    case K_NODE_FIELDS:
        return "meta.node_fields";
    case K_NODE_TYPES:
        return "meta.node_types";
    case K_EDGE_FIELDS:
        return "meta.edge_fields";
    case K_EDGE_TYPES:
        return "meta.edge_types";
    default:
        return "?";
    }
}

static struct frame *top(struct heapsnap_parser *p)
{
    ISOPROF_ASSERT(p->nfr > 0);
    return &p->fr[p->nfr - 1];
}

static int push(struct heapsnap_parser *p, enum ctx c)
{
    ISOPROF_ASSERT(p->nfr < MAX_CTX);
    p->fr[p->nfr].ctx = c;
    p->fr[p->nfr].n = 0;
    p->nfr++;
    return 1;
}

/* A key of an object we read, read whole. */
static void on_key(struct heapsnap_parser *p, const char *k, size_t n)
{
    static const struct {
        enum ctx in;
        const char *name;
        enum key key;
    } keys[] = {
        {X_TOP, "snapshot", K_SNAPSHOT},
        {X_TOP, "nodes", K_NODES},
        {X_TOP, "edges", K_EDGES},
        {X_TOP, "strings", K_STRINGS},
        {X_SNAPSHOT, "meta", K_META},
        {X_SNAPSHOT, "node_count", K_NODE_COUNT},
        {X_SNAPSHOT, "edge_count", K_EDGE_COUNT},
        {X_META, "node_fields", K_NODE_FIELDS},
        {X_META, "node_types", K_NODE_TYPES},
        {X_META, "edge_fields", K_EDGE_FIELDS},
        {X_META, "edge_types", K_EDGE_TYPES},
    };
    enum ctx c = top(p)->ctx;
    p->pending = K_NONE;
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(keys); i++)
        if (keys[i].in == c && strlen(keys[i].name) == n && memcmp(keys[i].name, k, n) == 0)
            p->pending = keys[i].key;
}

static bool *have_flag(struct heapsnap_parser *p, enum key k)
{
    switch (k) {
    case K_SNAPSHOT:
        return &p->have_snapshot;
    case K_NODES:
        return &p->have_nodes;
    case K_EDGES:
        return &p->have_edges;
    case K_STRINGS:
        return &p->have_strings;
    case K_META:
        return &p->have_meta;
    case K_NODE_COUNT:
        return &p->have_node_count;
    case K_EDGE_COUNT:
        return &p->have_edge_count;
    case K_NODE_FIELDS:
        return &p->have_nfields;
    case K_NODE_TYPES:
        return &p->have_ntypes;
    case K_EDGE_FIELDS:
        return &p->have_efields;
    case K_EDGE_TYPES:
        return &p->have_etypes;
    default:
        return NULL;
    }
}

/* The reason a field of the wrong type or written twice is refused for. */
static int key_reason(enum key k)
{
    return k == K_NODES || k == K_EDGES || k == K_STRINGS || k == K_NODE_COUNT || k == K_EDGE_COUNT
               ? HEAPSNAP_E_VALUE
               : HEAPSNAP_E_META;
}

/* The start of nodes[] or edges[]: the counts and meta must be known. */
static int ints_begin(struct heapsnap_parser *p, bool edges)
{
    struct heapsnap *s = p->s;
    const char *what = edges ? "edges" : "nodes";
    if (!p->have_meta)
        return pfail(p, HEAPSNAP_E_MISSING, "%s before snapshot.meta", what);
    /* nodes need edge_count too: their edge counts are summed against it */
    if (!p->have_node_count || !p->have_edge_count)
        return pfail(p, HEAPSNAP_E_MISSING, "%s before snapshot.%s", what,
                     p->have_node_count ? "edge_count" : "node_count");
    if (edges) {
        size_t e = (size_t)p->edge_count;
        if (s->fd < 0) {
            if ((s->erec = isoprof_malloc((e ? e : 1) * EREC)) == NULL)
                return nomem(p);
        } else {
            /* charged since the parser began */
            if ((p->wbuf = isoprof_malloc(WBUF_BYTES)) == NULL)
                return nomem(p);
        }
    } else {
        size_t n = (size_t)p->node_count;
        s->ntype = isoprof_malloc(n);
        s->nname = isoprof_malloc(n * sizeof(uint32_t));
        s->nself = isoprof_malloc(n * sizeof(uint64_t));
        s->nfirst = isoprof_malloc(n * sizeof(uint32_t)); /* the edge counts, for now */
        if (s->ntype == NULL || s->nname == NULL || s->nself == NULL || s->nfirst == NULL)
            return nomem(p);
    }
    p->ints = true;
    p->iedges = edges;
    p->iphase = IP_FIRST;
    p->icount = 0;
    p->item = 0;
    p->field = 0;
    return push(p, edges ? X_EDGES : X_NODES);
}

/* A container opens (kind '{' or '['). Returns 1, or 0 with p->err set. */
static int on_open(struct heapsnap_parser *p, int kind)
{
    if (p->skip) {
        p->skip++;
        return 1;
    }
    if (!p->started) {
        p->started = true;
        if (kind != '{')
            return pfail(p, HEAPSNAP_E_JSON, "the snapshot is not a JSON object");
        return push(p, X_TOP);
    }
    struct frame *f = top(p);
    uint32_t k = f->n++;
    enum key key = p->pending;
    p->pending = K_NONE;
    bool *have = have_flag(p, key);
    switch (f->ctx) {
    case X_TOP:
    case X_SNAPSHOT:
    case X_META:
        if (key == K_NONE) {
            p->skip = 1;
            return 1;
        }
        if (*have && key != K_META)
            return pfail(p, key_reason(key), "%s appears twice", key_name(key));
        if (key == K_SNAPSHOT || key == K_META) {
            if (kind != '{')
                return pfail(p, HEAPSNAP_E_META, "%s is not an object", key_name(key));
            if (key == K_META && (p->have_meta || p->have_nfields || p->have_ntypes))
                return pfail(p, HEAPSNAP_E_META, "snapshot.meta appears twice");
            return push(p, key == K_SNAPSHOT ? X_SNAPSHOT : X_META);
        }
        if (key == K_NODE_COUNT || key == K_EDGE_COUNT)
            return pfail(p, HEAPSNAP_E_VALUE, "%s is not a number", key_name(key));
        if (kind != '[')
            return pfail(p, key_reason(key), "%s is not an array", key_name(key));
        switch (key) {
        case K_NODES:
        case K_EDGES:
            return ints_begin(p, key == K_EDGES);
        case K_STRINGS:
            return push(p, X_STRINGS);
        case K_NODE_FIELDS:
            return push(p, X_NFIELDS);
        case K_EDGE_FIELDS:
            return push(p, X_EFIELDS);
        case K_NODE_TYPES:
            return push(p, X_NTYPES);
        case K_EDGE_TYPES:
            return push(p, X_ETYPES);
        default:
            break;
        }
        return 1;
    case X_NTYPES:
    case X_ETYPES:
        /* the array of names is the element at the "type" column; the
         * others are descriptions such as "string" or "number" */
        if (kind == '[') {
            if (k > UINT8_MAX)
                return pfail(p, HEAPSNAP_E_META, "meta.%s has more than 255 entries",
                             ctx_name(f->ctx));
            return push(p, f->ctx == X_NTYPES ? X_NTLIST : X_ETLIST);
        }
        p->skip = 1;
        return 1;
    case X_STRINGS:
        return pfail(p, HEAPSNAP_E_VALUE, "strings[%" PRIu32 "] is not a string", k);
    default:
        return pfail(p, HEAPSNAP_E_META, "meta.%s[%" PRIu32 "] is not a string", ctx_name(f->ctx),
                     k);
    }
}

static enum role field_role(const char *name, bool edges)
{
    if (strcmp(name, "type") == 0)
        return R_TYPE;
    if (!edges) {
        if (strcmp(name, "name") == 0)
            return R_NAME;
        if (strcmp(name, "self_size") == 0)
            return R_SELF;
        if (strcmp(name, "edge_count") == 0)
            return R_ECOUNT;
    } else {
        if (strcmp(name, "name_or_index") == 0)
            return R_NAME;
        if (strcmp(name, "to_node") == 0)
            return R_TO;
    }
    return R_NONE;
}

/* A count of the snapshot object, as text: checked against the caps and
 * charged to the budget before anything is allocated for it. */
static int on_count(struct heapsnap_parser *p, enum key key, const char *num, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (num[i] < '0' || num[i] > '9')
            return pfail(p, HEAPSNAP_E_VALUE, "%s %.*s is not a non-negative integer",
                         key_name(key), (int)(n > 24 ? 24 : n), num);
        v = v > (UINT64_MAX - 9) / 10 ? UINT64_MAX : v * 10 + (uint64_t)(num[i] - '0');
    }
    bool nodes = key == K_NODE_COUNT;
    size_t cap = nodes ? HEAPSNAP_MAX_NODES : HEAPSNAP_MAX_EDGES;
    if (v > cap)
        return pfail(p, HEAPSNAP_E_TOOBIG, "%s %" PRIu64 " is past the cap of %zu", key_name(key),
                     v, cap);
    if (nodes && v == 0)
        return pfail(p, HEAPSNAP_E_COUNT, "snapshot.node_count is 0: no root");
    bool spill = p->s->fd >= 0;
    uint64_t reserve = nodes ? v * (uint64_t)p->reserve_node : 0;
    if (!charge(p, arrays_bytes(nodes ? v : 0, nodes ? 0 : v, spill) + reserve, key_name(key)))
        return 0;
    p->aux += (size_t)reserve;
    if (nodes) {
        p->node_count = v;
        p->have_node_count = true;
    } else {
        p->edge_count = v;
        p->have_edge_count = true;
    }
    return 1;
}

/* A scalar value: kind 's' string (for SK_NAME: the name text[0..n), n
 * past TYPE_NAME_MAX if it is longer), 'n' number (its text[0..n)), 'b'
 * boolean, 'z' null. */
static int on_scalar(struct heapsnap_parser *p, int kind, const char *text, size_t n)
{
    if (p->skip)
        return 1;
    if (!p->started)
        return pfail(p, HEAPSNAP_E_JSON, "the snapshot is not a JSON object");
    struct frame *f = top(p);
    uint32_t k = f->n++;
    enum key key = p->pending;
    p->pending = K_NONE;
    switch (f->ctx) {
    case X_TOP:
    case X_SNAPSHOT:
    case X_META:
        if (key == K_NONE)
            return 1;
        if (key == K_NODE_COUNT || key == K_EDGE_COUNT) {
            if (*have_flag(p, key))
                return pfail(p, HEAPSNAP_E_META, "%s appears twice", key_name(key));
            if (kind != 'n')
                return pfail(p, HEAPSNAP_E_VALUE, "%s is not a number", key_name(key));
            return on_count(p, key, text, n);
        }
        if (key == K_SNAPSHOT || key == K_META)
            return pfail(p, HEAPSNAP_E_META, "%s is not an object", key_name(key));
        return pfail(p, key_reason(key), "%s is not an array", key_name(key));
    case X_NFIELDS:
    case X_EFIELDS: {
        bool edges = f->ctx == X_EFIELDS;
        if (kind != 's')
            return pfail(p, HEAPSNAP_E_META, "meta.%s[%" PRIu32 "] is not a string",
                         ctx_name(f->ctx), k);
        if (k >= HEAPSNAP_MAX_FIELDS)
            return pfail(p, HEAPSNAP_E_META, "meta.%s has more than %d fields", ctx_name(f->ctx),
                         HEAPSNAP_MAX_FIELDS);
        enum role r = n > TYPE_NAME_MAX ? R_NONE : field_role(text, edges);
        uint8_t *roles = edges ? p->erole : p->nrole;
        for (uint32_t i = 0; r != R_NONE && i < k; i++)
            if (roles[i] == r)
                return pfail(p, HEAPSNAP_E_META, "meta.%s lists \"%s\" twice", ctx_name(f->ctx),
                             text);
        roles[k] = (uint8_t)r;
        return 1;
    }
    case X_NTYPES:
    case X_ETYPES:
        return 1;
    case X_NTLIST:
    case X_ETLIST: {
        bool edges = f->ctx == X_ETLIST;
        if (kind != 's')
            return pfail(p, HEAPSNAP_E_META, "meta.%s: a type name is not a string",
                         ctx_name(f->ctx));
        if (n > TYPE_NAME_MAX)
            return pfail(p, HEAPSNAP_E_META, "meta.%s: a type name longer than %d bytes",
                         ctx_name(f->ctx), TYPE_NAME_MAX);
        unsigned *cnt = edges ? &p->net : &p->nnt;
        if (*cnt >= TYPE_ENTRIES_MAX)
            return pfail(p, HEAPSNAP_E_META, "meta.%s: more than %d type names", ctx_name(f->ctx),
                         TYPE_ENTRIES_MAX);
        struct tentry *t = &(edges ? p->et : p->nt)[(*cnt)++];
        t->pos = (uint8_t)(p->fr[p->nfr - 2].n - 1);
        memcpy(t->name, text, n + 1);
        return 1;
    }
    case X_STRINGS:
        if (kind != 's')
            return pfail(p, HEAPSNAP_E_VALUE, "strings[%" PRIu32 "] is not a string", k);
        return soff_push(p, (uint32_t)p->str_start);
    case X_NODES:
    case X_EDGES:
        break;
    }
    ISOPROF_ASSERT(!"a scalar inside nodes or edges outside the integer loop");
    return 0;
}

/* The type names of the column `type` (its position in the field list)
 * into names[], and the count. */
static int pick_types(struct heapsnap_parser *p, bool edges, char (*names)[TYPE_NAME_MAX + 1],
                      unsigned *count)
{
    const uint8_t *roles = edges ? p->erole : p->nrole;
    unsigned nf = edges ? p->efields : p->nfields;
    const struct tentry *t = edges ? p->et : p->nt;
    unsigned nt = edges ? p->net : p->nnt;
    unsigned pos = 0;
    while (pos < nf && roles[pos] != R_TYPE)
        pos++;
    *count = 0;
    for (unsigned i = 0; i < nt; i++) {
        if (t[i].pos != pos)
            continue;
        if (*count == HEAPSNAP_MAX_TYPES)
            return pfail(p, HEAPSNAP_E_META, "meta.%s_types: more than %d type names",
                         edges ? "edge" : "node", HEAPSNAP_MAX_TYPES);
        memcpy(names[(*count)++], t[i].name, TYPE_NAME_MAX + 1);
    }
    if (*count == 0)
        return pfail(p, HEAPSNAP_E_META, "meta.%s_types[%u]: no type names",
                     edges ? "edge" : "node", pos);
    return 1;
}

static int type_index(char (*names)[TYPE_NAME_MAX + 1], unsigned n, const char *name)
{
    for (unsigned i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return (int)i;
    return -1;
}

/* snapshot.meta closed: every field we need listed, the type names found. */
static int meta_done(struct heapsnap_parser *p)
{
    struct heapsnap *s = p->s;
    static const struct {
        bool edges;
        enum role r;
        const char *name;
    } need[] = {
        {false, R_TYPE, "type"},         {false, R_NAME, "name"}, {false, R_SELF, "self_size"},
        {false, R_ECOUNT, "edge_count"}, {true, R_TYPE, "type"},  {true, R_NAME, "name_or_index"},
        {true, R_TO, "to_node"},
    };
    if (!p->have_nfields || !p->have_efields || !p->have_ntypes || !p->have_etypes)
        return pfail(p, HEAPSNAP_E_META, "snapshot.meta has no %s",
                     !p->have_nfields   ? "node_fields"
                     : !p->have_efields ? "edge_fields"
                     : !p->have_ntypes  ? "node_types"
                                        : "edge_types");
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(need); i++) {
        const uint8_t *roles = need[i].edges ? p->erole : p->nrole;
        unsigned nf = need[i].edges ? p->efields : p->nfields, j = 0;
        while (j < nf && roles[j] != need[i].r)
            j++;
        if (j == nf)
            return pfail(p, HEAPSNAP_E_META, "meta.%s has no \"%s\"",
                         need[i].edges ? "edge_fields" : "node_fields", need[i].name);
    }
    if (!pick_types(p, false, s->ntypes, &s->n_ntypes) ||
        !pick_types(p, true, s->etypes, &s->n_etypes))
        return 0;
    s->et_element = type_index(s->etypes, s->n_etypes, "element");
    s->et_hidden = type_index(s->etypes, s->n_etypes, "hidden");
    s->et_weak = type_index(s->etypes, s->n_etypes, "weak");
    s->et_shortcut = type_index(s->etypes, s->n_etypes, "shortcut");
    s->et_internal = type_index(s->etypes, s->n_etypes, "internal");
    s->nt_object = type_index(s->ntypes, s->n_ntypes, "object");
    s->nt_closure = type_index(s->ntypes, s->n_ntypes, "closure");
    s->nt_native = type_index(s->ntypes, s->n_ntypes, "native");
    s->nt_synthetic = type_index(s->ntypes, s->n_ntypes, "synthetic");
    p->have_meta = true;
    return 1;
}

/* A container closes (not nodes[] or edges[]: ints_close). */
static int on_close(struct heapsnap_parser *p)
{
    if (p->skip) {
        p->skip--;
        return 1;
    }
    struct frame *f = top(p);
    p->nfr--;
    switch (f->ctx) {
    case X_SNAPSHOT:
        p->have_snapshot = true;
        return 1;
    case X_META:
        return meta_done(p);
    case X_NFIELDS:
        p->nfields = f->n;
        p->have_nfields = true;
        return 1;
    case X_EFIELDS:
        p->efields = f->n;
        p->have_efields = true;
        return 1;
    case X_NTYPES:
        p->have_ntypes = true;
        return 1;
    case X_ETYPES:
        p->have_etypes = true;
        return 1;
    case X_STRINGS:
        p->have_strings = true;
        return 1;
    default:
        return 1;
    }
}

/* --- the integers of nodes[] and edges[] --- */

/* Marks strings index i as named (used_names). 1, or 0 with p->err set. */
static int mark_used(struct heapsnap_parser *p, uint32_t i)
{
    if (i >= HEAPSNAP_MAX_STRINGS)
        return 1; /* past any strings[]: refused at finish */
    if (i / 8 >= p->used_cap) {
        size_t nc = p->used_cap ? p->used_cap : 4096;
        while (nc <= i / 8)
            nc *= 2;
        if (!charge(p, nc - p->used_cap, "the names' index"))
            return 0;
        uint8_t *u = isoprof_realloc(p->used, nc);
        if (u == NULL)
            return nomem(p);
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
        return pfail(p, HEAPSNAP_E_IO, "the spill file could not be written (%" PRIu64 " bytes in)",
                     p->woff);
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
            return pfail(p, HEAPSNAP_E_COUNT,
                         "edges holds more than edge_count (%" PRIu64 ") x %u values",
                         p->edge_count, p->efields);
        switch (p->erole[p->field]) {
        case R_TYPE:
            if (v >= s->n_etypes)
                return pfail(p, HEAPSNAP_E_VALUE,
                             "edges[%" PRIu64 "] (edge %" PRIu32 "): type %" PRIu64
                             " is past the %u edge types",
                             p->icount, i, v, s->n_etypes);
            p->pe_type = (uint8_t)v;
            break;
        case R_NAME:
            if (v > UINT32_MAX)
                return pfail(p, HEAPSNAP_E_VALUE,
                             "edges[%" PRIu64 "] (edge %" PRIu32 "): name_or_index %" PRIu64
                             " is past 32 bits",
                             p->icount, i, v);
            p->pe_name = (uint32_t)v;
            break;
        case R_TO:
            if (v % p->nfields != 0 || v / p->nfields >= p->node_count)
                return pfail(p, HEAPSNAP_E_EDGE,
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
        return pfail(p, HEAPSNAP_E_COUNT,
                     "nodes holds more than node_count (%" PRIu64 ") x %u values", p->node_count,
                     p->nfields);
    switch (p->nrole[p->field]) {
    case R_TYPE:
        if (v >= s->n_ntypes)
            return pfail(p, HEAPSNAP_E_VALUE,
                         "nodes[%" PRIu64 "] (node %" PRIu32 "): type %" PRIu64
                         " is past the %u node types",
                         p->icount, i, v, s->n_ntypes);
        s->ntype[i] = (uint8_t)v;
        break;
    case R_NAME:
        if (v > UINT32_MAX)
            return pfail(p, HEAPSNAP_E_VALUE,
                         "nodes[%" PRIu64 "] (node %" PRIu32 "): name %" PRIu64 " is past 32 bits",
                         p->icount, i, v);
        s->nname[i] = (uint32_t)v;
        break;
    case R_SELF:
        s->nself[i] = v;
        break;
    case R_ECOUNT:
        /* the running sum: a sum past edge_count is refused at once */
        if (v > p->edge_count - p->ecount_sum)
            return pfail(p, HEAPSNAP_E_EDGE_SUM,
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
static int ints_close(struct heapsnap_parser *p)
{
    p->ints = false;
    jsonlex_pop(&p->lx);
    p->nfr--;
    uint64_t want = p->iedges ? p->edge_count * p->efields : p->node_count * p->nfields;
    if (p->icount != want)
        return pfail(
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
                    pfail(p, HEAPSNAP_E_JSON, "malformed JSON at byte %" PRIu64 ": a leading zero",
                          jsonlex_at(&p->lx));
                    return s;
                }
                if (p->acc > (UINT64_MAX - d) / 10) {
                    pfail(p, HEAPSNAP_E_VALUE, "%s[%" PRIu64 "] is past 64 bits", what, p->icount);
                    break;
                }
                p->acc = p->acc * 10 + d;
                s++;
                continue;
            }
            if (c == '.' || c == 'e' || c == 'E') {
                pfail(p, HEAPSNAP_E_VALUE, "%s[%" PRIu64 "] is not an integer", what, p->icount);
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
                ints_close(p);
                break;
            }
            jsonlex_skip(&p->lx, (uint64_t)(s - start));
            pfail(p, HEAPSNAP_E_JSON, "malformed JSON at byte %" PRIu64 ": a ',' or ']' must come",
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
            ints_close(p);
            break;
        }
        if (c == '-' || c == '"' || c == '{' || c == '[' || c == 't' || c == 'f' || c == 'n') {
            pfail(p, HEAPSNAP_E_VALUE, "%s[%" PRIu64 "] is not a non-negative integer", what,
                  p->icount);
            break;
        }
        jsonlex_skip(&p->lx, (uint64_t)(s - start));
        pfail(p, HEAPSNAP_E_JSON, "malformed JSON at byte %" PRIu64 ": not a JSON value",
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
    return on_open(p, kind) && !p->ints;
}

static int lx_on_close(void *c, int kind)
{
    (void)kind;
    return on_close(c);
}

/* A string starts: where the schema wants it. */
static int lx_on_string(void *c, bool key)
{
    struct heapsnap_parser *p = c;
    p->sink = SK_DROP;
    if (!p->started)
        return pfail(p, HEAPSNAP_E_JSON, "the snapshot is not a JSON object");
    if (p->skip)
        return 1;
    if (key) {
        jsonlex_sink(&p->lx, JSONLEX_BUF, 0);
        return 1;
    }
    switch (top(p)->ctx) {
    case X_STRINGS: {
        struct heapsnap *s = p->s;
        if (p->used_names && s->nstrs == 0 && s->strs_len == 0) {
            /* offset 0: the "" of every string nobody names; names are
             * known when nodes and edges came first, as V8 writes them */
            if (!charge(p, 1, "strings") || !arena_reserve(p, 1))
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
        if (!charge(p, 1, "strings") || !arena_reserve(p, 1)) /* its NUL */
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
    if (!charge(p, n, "strings") || !arena_reserve(p, n + 1)) /* + the NUL that ends it */
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
        on_key(p, k, n);
    return 1;
}

static int lx_on_value(void *c, int kind, const char *text, size_t n)
{
    struct heapsnap_parser *p = c;
    if (kind == 's' && p->sink == SK_ARENA) {
        struct heapsnap *s = p->s;
        s->strs[s->strs_len++] = '\0'; /* reserved */
    }
    return on_scalar(p, kind, text, n);
}

static void lx_on_fail(void *c, enum jsonlex_err err, const char *what, uint64_t at)
{
    struct heapsnap_parser *p = c;
    switch (err) {
    case JSONLEX_E_DEPTH:
        pfail(p, HEAPSNAP_E_DEPTH, "JSON nesting deeper than %d at byte %" PRIu64,
              HEAPSNAP_MAX_NESTING, at);
        return;
    case JSONLEX_E_TOP:
        pfail(p, HEAPSNAP_E_JSON, "the snapshot is not a JSON object");
        return;
    case JSONLEX_E_AFTER:
        what = "bytes after the snapshot";
        break;
    default:
        break;
    }
    pfail(p, HEAPSNAP_E_JSON, "malformed JSON at byte %" PRIu64 ": %s", at, what);
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
    if (p->spent && p->err == 0)
        pfail(p, HEAPSNAP_E_INCOMPLETE, "the parser was finished");
    const unsigned char *s = buf, *end = s + len;
    while (p->err == 0 && s < end) {
        if (p->ints)
            s = ints_feed(p, s, end);
        else
            s += jsonlex_feed(&p->lx, s, (size_t)(end - s));
    }
    return p->err;
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
        pfail(p, HEAPSNAP_E_TOOBIG, "a budget of %zu bytes holds no snapshot", p->budget);
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
    isoprof_free(p->why);
    isoprof_free(p);
}

/* The last checks, and the index of each node's first edge. */
static int finish_checks(struct heapsnap_parser *p)
{
    struct heapsnap *s = p->s;
    if (!p->have_snapshot || !p->have_meta || !p->have_node_count || !p->have_edge_count ||
        !p->have_nodes || !p->have_edges || !p->have_strings)
        return pfail(p, HEAPSNAP_E_MISSING, "no %s",
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
        return pfail(p, HEAPSNAP_E_EDGE_SUM,
                     "the nodes' edge counts add up to %" PRIu64 ", edge_count is %" PRIu64,
                     p->ecount_sum, p->edge_count);
    for (uint32_t i = 0; i < s->nnodes; i++)
        if (s->nname[i] >= s->nstrs)
            return pfail(p, HEAPSNAP_E_STRING,
                         "node %" PRIu32 ": name %" PRIu32 " is past the %zu strings", i,
                         s->nname[i], s->nstrs);
    if (p->emax1 > s->nstrs) {
        /* the first edge that names past the strings, for the message */
        struct ecache c;
        if (ec_init(&c, s, 1) != 0)
            return nomem(p);
        for (uint32_t e = 0; e < s->nedges && c.err == 0; e++) {
            const uint8_t *r = ec_get(&c, e);
            if (c.err == 0 && !edge_is_indexed(s, rec_type(r)) && rec_name(r) >= s->nstrs) {
                ec_free(&c);
                return pfail(p, HEAPSNAP_E_STRING,
                             "edge %" PRIu32 ": name %" PRIu32 " is past the %zu strings", e,
                             rec_name(r), s->nstrs);
            }
        }
        ec_free(&c);
        return pfail(p, HEAPSNAP_E_IO, "the spill file could not be read back");
    }
    /* the edge counts become the index of each node's first edge */
    uint32_t *nf = isoprof_realloc(s->nfirst, ((size_t)s->nnodes + 1) * sizeof(uint32_t));
    if (nf == NULL)
        return nomem(p);
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
        return nomem(p);
    s->strs = t;
    s->strs_cap = s->strs_len ? s->strs_len : 1;
    uint32_t *o = isoprof_realloc(s->soff, (s->nstrs ? s->nstrs : 1) * sizeof(*o));
    if (o == NULL)
        return nomem(p);
    s->soff = o;
    s->soff_cap = s->nstrs ? s->nstrs : 1;
    /* what was charged is what is held */
    ISOPROF_ASSERT(snap_bytes(s) + p->aux == p->held);
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
    if (p->err == 0 && jsonlex_depth(&p->lx) == 0)
        jsonlex_finish(&p->lx); /* a number at the very end: only the top, refused */
    if (p->err == 0 && !p->started)
        pfail(p, HEAPSNAP_E_INCOMPLETE, "no text");
    if (p->err == 0 && !jsonlex_done(&p->lx))
        pfail(p, HEAPSNAP_E_INCOMPLETE,
              "the text stops inside the snapshot, after %" PRIu64 " bytes", jsonlex_at(&p->lx));
    if (p->err == 0)
        finish_checks(p);
    if (p->err != 0) {
        if (why) {
            *why = p->why;
            p->why = NULL;
        }
        return p->err;
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

void heapsnap_free(struct heapsnap *s)
{
    if (s == NULL)
        return;
    isoprof_free(s->ntype);
    isoprof_free(s->nname);
    isoprof_free(s->nself);
    isoprof_free(s->nfirst);
    isoprof_free(s->erec);
    if (s->fd >= 0)
        close(s->fd);
    isoprof_free(s->strs);
    isoprof_free(s->soff);
    isoprof_free(s);
}

size_t heapsnap_bytes(const struct heapsnap *s)
{
    return s ? snap_bytes(s) : 0;
}

size_t heapsnap_node_count(const struct heapsnap *s)
{
    return s->nnodes;
}

size_t heapsnap_edge_count(const struct heapsnap *s)
{
    return s->nedges;
}

size_t heapsnap_string_count(const struct heapsnap *s)
{
    return s->nstrs;
}

int heapsnap_node(const struct heapsnap *s, uint32_t i, struct heapsnap_node *out)
{
    if (s == NULL || out == NULL || i >= s->nnodes)
        return -EINVAL;
    out->type = s->ntypes[s->ntype[i]];
    out->name = str_at(s, s->nname[i]);
    out->self_size = s->nself[i];
    out->first_edge = s->nfirst[i];
    out->edge_count = s->nfirst[i + 1] - s->nfirst[i];
    return 0;
}

int heapsnap_edge(const struct heapsnap *s, uint32_t e, struct heapsnap_edge *out)
{
    if (s == NULL || out == NULL || e >= s->nedges)
        return -EINVAL;
    /* the last node whose first edge is at or before e */
    uint32_t lo = 0, hi = s->nnodes; /* nfirst[lo] <= e < nfirst[hi] */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->nfirst[mid] <= e)
            lo = mid;
        else
            hi = mid;
    }
    uint8_t rb[EREC];
    const uint8_t *r = rb;
    if (s->erec != NULL)
        r = s->erec + (size_t)e * EREC;
    else if (isoprof_pread_full(s->fd, rb, EREC, (off_t)e * EREC) != EREC)
        return -EIO;
    int t = rec_type(r);
    out->type = s->etypes[t];
    out->name = edge_is_indexed(s, t) ? NULL : str_at(s, rec_name(r));
    out->index = rec_name(r);
    out->from = lo;
    out->to = rec_to(r);
    out->retaining = retains(s, lo, t);
    return 0;
}

/* --- dominators --- */

struct heapsnap_dom {
    uint32_t nnodes;
    uint32_t nreached;
    uint32_t *idom;     /* per node: its immediate dominator (the root's: 0); NONE: not reached */
    uint64_t *retained; /* per node */
    uint32_t *order;    /* the reached nodes in DFS preorder (a dominator first) */
};

/* The bucket buffers of the predecessors' fill, all together. */
#define PAIR_BUF_BYTES ((size_t)4 << 20)

/* What the dominators allocate; when they own s (with a spill file),
 * beyond the snapshot's own 17 bytes a node, which wait in the file while
 * they run: at most 28 bytes a node at once (Lengauer-Tarjan's seven
 * arrays; then the result and the self sizes), so 11 more. */
static size_t dom_need(const struct heapsnap *s, bool own);

size_t heapsnap_dom_need(const struct heapsnap *s)
{
    return dom_need(s, false);
}

static size_t dom_need(const struct heapsnap *s, bool own)
{
    /* While Lengauer-Tarjan runs: dfn, vert, the ancestors (parents
     * first), semi (the DFS's edge cursors first), label, bucket heads,
     * idom (bucket links first) and the predecessor offsets, 4 bytes each
     * a node; the result (16 a node) reuses dfn and vert and comes after
     * most of the rest is freed. The predecessors: 4 bytes a retaining
     * edge in memory; with a spill file, a window of pred_chunk entries
     * (and while they are filled, the buckets' buffers, their counts and
     * a small edge cache), or the search's edge cache before them. */
    size_t nn = s->nnodes, fixed = sizeof(struct heapsnap_dom) + 16;
    if (s->fd < 0)
        return fixed + nn * 32 + (size_t)s->nedges * 4;
    size_t win = s->pred_chunk;
    size_t fill =
        4 * win + PAIR_BUF_BYTES + 16 * ((size_t)s->nedges / win + 1) + ec_bytes(EC_SEQ_SLOTS);
    size_t dfs = ec_bytes(EC_DFS_SLOTS);
    return fixed + nn * (own ? 28 - HEAPSNAP_NODE_BYTES : 32) + (fill > dfs ? fill : dfs);
}

/* Writes the pairs buffered for window k (bcnt[2k] of them, after the
 * bcnt[2k + 1] written before) to its bucket: 0 or -EIO. */
static int pairs_flush(const struct heapsnap *s, const uint32_t *bbuf, size_t *bcnt, size_t bk,
                       size_t win, size_t k)
{
    size_t np = bcnt[2 * k];
    if (np == 0)
        return 0;
    if (isoprof_pwrite_full(s->fd, bbuf + k * bk * 2, np * 8,
                            s->preds_off + (k * win + bcnt[2 * k + 1]) * 8) != 0)
        return -EIO;
    bcnt[2 * k + 1] += np;
    bcnt[2 * k] = 0;
    return 0;
}

/* Whether x is a root of the forest that Lengauer-Tarjan links: the nodes
 * are linked in reverse preorder, so past `lim` every node is linked and
 * up to it none is. That is what lets the forest's ancestor array hold
 * each unlinked node's DFS parent (linking it is then just lim moving
 * past it), instead of a parent array of its own. */
#define LT_ROOT(x, lim) ((x) <= (lim))

/* Path compression (Tarjan's COMPRESS) from the linked node v: on the path
 * up to the node below the root of v's tree, each node from the top down
 * takes the smaller label and skips to the top. Without recursion or a
 * stack: the way up reverses the ancestor pointers, the way down restores
 * them as it compresses. */
static void lt_compress(uint32_t v, uint32_t lim, uint32_t *anc, uint32_t *label,
                        const uint32_t *semi)
{
    uint32_t prev = NONE;
    while (!LT_ROOT(anc[v], lim)) {
        uint32_t a = anc[v];
        anc[v] = prev;
        prev = v;
        v = a;
    }
    uint32_t a = v; /* the top: its ancestor is the root */
    while (prev != NONE) {
        uint32_t y = prev;
        prev = anc[y];
        if (semi[label[a]] < semi[label[y]])
            label[y] = label[a];
        anc[y] = anc[a];
        a = y;
    }
}

static inline uint32_t lt_eval(uint32_t v, uint32_t lim, uint32_t *anc, uint32_t *label,
                               const uint32_t *semi)
{
    if (LT_ROOT(v, lim))
        return v;
    lt_compress(v, lim, anc, label, semi);
    return label[v];
}

/* The predecessor lists, by DFS number: entries poff[w] .. poff[w + 1] - 1
 * are w's. In memory (buf holds all of them) or in the spill file, read
 * back through buf, a window of `cap` entries [lo, hi). */
struct preds {
    const struct heapsnap *s;
    uint32_t *buf;
    size_t cap, lo, hi;
    int err;
};

/* Entry j. The caller goes down from the last entry to the first, so a
 * window that misses ends at j. A failed read sets err and gives 0. */
static inline uint32_t pred_at(struct preds *pr, size_t j)
{
    if (pr->s->fd < 0)
        return pr->buf[j];
    if (j < pr->lo || j >= pr->hi) {
        pr->hi = j + 1;
        pr->lo = pr->hi > pr->cap ? pr->hi - pr->cap : 0;
        size_t want = (pr->hi - pr->lo) * sizeof(uint32_t);
        if (isoprof_pread_full(pr->s->fd, pr->buf, want,
                               (off_t)(pr->s->preds_off + pr->lo * sizeof(uint32_t))) !=
            (ssize_t)want) {
            pr->lo = pr->hi = 0;
            pr->err = -EIO;
            return 0;
        }
    }
    return pr->buf[j - pr->lo];
}

/* Where the node arrays go in the spill file while the dominators run
 * (spill_nodes), after the predecessors. */
static uint64_t nodes_off(const struct heapsnap *s)
{
    return s->preds_off + (((uint64_t)s->nedges * 8 + 4095) & ~(uint64_t)4095);
}

/* The node arrays, for the daemon's conversion, which owns its snapshot:
 * each waits in the spill file while no pass reads it. */
#define SP_TYPE 1u
#define SP_NAME 2u
#define SP_SELF 4u
#define SP_FIRST 8u
enum spill_op {
    SPILL_OUT,  /* written to the file and freed */
    SPILL_DROP, /* freed (the file holds it since a SPILL_OUT) */
    SPILL_IN,   /* read back */
};

/* The arrays of `which` (SP_*) out, dropped or in: 0, or -ENOMEM / -EIO
 * (the arrays then stay as they are: NULL ones are freed with the
 * snapshot, which the caller only frees then). */
static int spill_nodes(struct heapsnap *s, enum spill_op op, unsigned which)
{
    size_t nn = s->nnodes;
    uint64_t at = nodes_off(s);
    struct {
        void **a;
        size_t bytes;
        unsigned bit;
    } arr[] = {
        {(void **)&s->ntype, nn, SP_TYPE},
        {(void **)&s->nname, nn * sizeof(uint32_t), SP_NAME},
        {(void **)&s->nself, nn * sizeof(uint64_t), SP_SELF},
        {(void **)&s->nfirst, (nn + 1) * sizeof(uint32_t), SP_FIRST},
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(arr); i++, at += arr[i - 1].bytes) {
        if (!(which & arr[i].bit))
            continue;
        if (op == SPILL_OUT && isoprof_pwrite_full(s->fd, *arr[i].a, arr[i].bytes, at) != 0)
            return -EIO;
        if (op != SPILL_IN) {
            isoprof_free(*arr[i].a);
            *arr[i].a = NULL;
            continue;
        }
        void *a = isoprof_malloc(arr[i].bytes ? arr[i].bytes : 1);
        if (a == NULL)
            return -ENOMEM;
        if (isoprof_pread_full(s->fd, a, arr[i].bytes, (off_t)at) != (ssize_t)arr[i].bytes) {
            isoprof_free(a);
            return -EIO;
        }
        *arr[i].a = a;
    }
    return 0;
}

/* heapsnap_dominators; own, if not NULL, is s, which the caller gives up
 * to it (with a spill file its node arrays wait there while it runs). */
static int dominators(const struct heapsnap *s, struct heapsnap *own, size_t max_bytes,
                      struct heapsnap_dom **out)
{
    if (s == NULL || out == NULL)
        return -EINVAL;
    if (own != NULL && own->fd < 0)
        own = NULL;
    if (max_bytes != 0 && dom_need(s, own != NULL) > max_bytes)
        return ISOPROF_ETOOBIG;
    size_t nn = s->nnodes;
    int rc = -ENOMEM;
    uint32_t *dfn = NULL, *vert = NULL, *anc = NULL, *semi = NULL, *label = NULL, *idm = NULL,
             *head = NULL, *poff = NULL, *bbuf = NULL;
    size_t *bcnt = NULL;
    uint64_t *ret = NULL;
    struct ecache c;
    struct preds pr = {.s = s};
    memset(&c, 0, sizeof(c));
    struct heapsnap_dom *d = isoprof_calloc(1, sizeof(*d));
    if (d == NULL)
        goto fail;
    if (own != NULL && (rc = spill_nodes(own, SPILL_OUT, SP_TYPE | SP_NAME | SP_SELF)) != 0)
        goto fail;
    rc = -ENOMEM;
    dfn = isoprof_malloc(nn * sizeof(uint32_t));
    vert = isoprof_malloc(nn * sizeof(uint32_t));
    anc = isoprof_malloc(nn * sizeof(uint32_t));  /* the DFS parents first */
    semi = isoprof_malloc(nn * sizeof(uint32_t)); /* the DFS's edge cursors first */
    if (dfn == NULL || vert == NULL || anc == NULL || semi == NULL ||
        ec_init(&c, s, EC_DFS_SLOTS) != 0)
        goto fail;

    /* Depth-first search from the root over the retaining edges. The DFS
     * tree is the stack: x is the node being explored, its cursor the next
     * edge to try, and when they run out the search goes back to its
     * parent. */
    memset(dfn, 0xff, nn * sizeof(uint32_t));
    uint32_t *par = anc, *cur = semi, n = 1, x = 0;
    dfn[0] = 0;
    vert[0] = 0;
    par[0] = NONE;
    cur[0] = s->nfirst[0];
    for (;;) {
        uint32_t u = vert[x];
        if (cur[x] < s->nfirst[u + 1]) {
            const uint8_t *r = ec_get(&c, cur[x]++);
            uint32_t v = rec_to(r);
            if (dfn[v] != NONE || !retains(s, u, rec_type(r)))
                continue;
            dfn[v] = n;
            vert[n] = v;
            par[n] = x;
            cur[n] = s->nfirst[v];
            x = n++;
        } else if (x == 0) {
            break;
        } else {
            x = par[x];
        }
    }
    ec_free(&c);
    if (c.err) {
        rc = c.err;
        goto fail;
    }

    /* The predecessors of each reached node, as DFS numbers: counted (in
     * poff[w + 1]), summed so that w's run starts at poff[w], then filled
     * by one scan of the edges in node order, poff[w] the cursor of w's
     * run. In memory, each goes in place. With a spill file, the entries
     * are in windows of pred_chunk: each (position, value) pair goes to
     * its window's bucket in the file (through a small buffer a bucket),
     * then each window is read back, put in order and written. */
    if ((poff = isoprof_calloc((size_t)n + 1, sizeof(uint32_t))) == NULL ||
        ec_init(&c, s, EC_SEQ_SLOTS) != 0)
        goto fail;
    size_t m = 0;
    for (uint32_t u = 0; u < nn; u++) {
        if (dfn[u] == NONE)
            continue;
        for (uint32_t e = s->nfirst[u]; e < s->nfirst[u + 1]; e++) {
            const uint8_t *r = ec_get(&c, e);
            if (retains(s, u, rec_type(r))) {
                poff[dfn[rec_to(r)] + 1]++;
                m++;
            }
        }
    }
    for (uint32_t w = 0; w < n; w++)
        poff[w + 1] += poff[w];
    size_t win = s->fd < 0 || m < s->pred_chunk ? m : s->pred_chunk;
    size_t nwin = win ? (m + win - 1) / win : 0, bk = 0;
    pr.cap = win ? win : 1;
    if ((pr.buf = isoprof_malloc(pr.cap * sizeof(uint32_t))) == NULL)
        goto fail;
    if (s->fd >= 0 && nwin > 0) {
        bk = PAIR_BUF_BYTES / 8 / nwin;
        bk = bk < 1 ? 1 : bk > win ? win : bk;
        bbuf = isoprof_malloc(nwin * bk * 2 * sizeof(uint32_t));
        bcnt = isoprof_calloc(2 * nwin, sizeof(size_t));
        if (bbuf == NULL || bcnt == NULL)
            goto fail;
    }
    for (uint32_t u = 0; u < nn && c.err == 0; u++) {
        uint32_t du = dfn[u];
        if (du == NONE)
            continue;
        for (uint32_t e = s->nfirst[u]; e < s->nfirst[u + 1]; e++) {
            const uint8_t *r = ec_get(&c, e);
            if (!retains(s, u, rec_type(r)))
                continue;
            uint32_t at = poff[dfn[rec_to(r)]]++;
            if (s->fd < 0) {
                pr.buf[at] = du;
                continue;
            }
            size_t k = at / win;
            uint32_t *q = bbuf + (k * bk + bcnt[2 * k]) * 2;
            q[0] = at;
            q[1] = du;
            if (++bcnt[2 * k] == bk && pairs_flush(s, bbuf, bcnt, bk, win, k) != 0)
                c.err = -EIO;
        }
    }
    for (size_t k = 0; k < nwin && s->fd >= 0 && c.err == 0; k++)
        if (pairs_flush(s, bbuf, bcnt, bk, win, k) != 0)
            c.err = -EIO;
    /* the cursors ended each run where the next begins */
    for (uint32_t w = n - 1; w >= 1; w--)
        poff[w] = poff[w - 1];
    poff[0] = 0;
    /* each window's pairs read back, put in place, and written over the
     * pairs (a window's entries take half the bytes of its pairs, so they
     * cover only pairs already read) */
    for (size_t k = 0; k < nwin && s->fd >= 0 && c.err == 0; k++) {
        size_t a = k * win, b = m - a < win ? m : a + win, cap = nwin * bk;
        for (size_t i = a; i < b && c.err == 0; i += cap) {
            size_t np = b - i < cap ? b - i : cap;
            if (isoprof_pread_full(s->fd, bbuf, np * 8, (off_t)(s->preds_off + i * 8)) !=
                (ssize_t)(np * 8)) {
                c.err = -EIO;
                break;
            }
            for (size_t j = 0; j < np; j++) {
                uint32_t at = bbuf[2 * j];
                if (at < a || at >= b) { /* a damaged spill file */
                    c.err = -EIO;
                    break;
                }
                pr.buf[at - a] = bbuf[2 * j + 1];
            }
        }
        if (c.err == 0 && isoprof_pwrite_full(s->fd, pr.buf, (b - a) * sizeof(uint32_t),
                                              s->preds_off + a * sizeof(uint32_t)) != 0)
            c.err = -EIO;
    }
    ec_free(&c);
    isoprof_free(bbuf);
    isoprof_free(bcnt);
    bbuf = NULL;
    bcnt = NULL;
    if (c.err) {
        rc = c.err;
        goto fail;
    }
    /* Lengauer-Tarjan reads neither the edges nor the DFS numbers by node
     * (dfn is made again as the per-node idoms) */
    if (own != NULL) {
        if ((rc = spill_nodes(own, SPILL_OUT, SP_FIRST)) != 0)
            goto fail;
        isoprof_free(dfn);
        dfn = NULL;
        rc = -ENOMEM;
    }

    /* Lengauer-Tarjan: semidominators in reverse preorder, each node's
     * bucket emptied when its tree edge is linked, then the deferred
     * idoms resolved in preorder. A node's idom entry is its bucket link
     * until it leaves the bucket, when its (deferred) idom is set. */
    label = isoprof_malloc(n * sizeof(uint32_t));
    head = isoprof_malloc(n * sizeof(uint32_t));
    idm = isoprof_malloc(n * sizeof(uint32_t));
    if (label == NULL || head == NULL || idm == NULL)
        goto fail;
    for (uint32_t i = 0; i < n; i++) {
        semi[i] = i;
        label[i] = i;
        head[i] = NONE;
    }
    for (uint32_t w = n - 1; w >= 1; w--) {
        for (size_t j = poff[w + 1]; j-- > poff[w];) {
            uint32_t u = lt_eval(pred_at(&pr, j), w, anc, label, semi);
            if (semi[u] < semi[w])
                semi[w] = semi[u];
        }
        idm[w] = head[semi[w]];
        head[semi[w]] = w;
        uint32_t pw = anc[w]; /* w is not linked: its parent; linked from here on */
        for (uint32_t v = head[pw]; v != NONE;) {
            uint32_t nx = idm[v];
            uint32_t u = lt_eval(v, w - 1, anc, label, semi);
            idm[v] = semi[u] < semi[v] ? u : pw;
            v = nx;
        }
        head[pw] = NONE;
    }
    if (pr.err) {
        rc = pr.err;
        goto fail;
    }
    for (uint32_t w = 1; w < n; w++)
        if (idm[w] != semi[w])
            idm[w] = idm[idm[w]];
    idm[0] = 0;
    isoprof_free(semi);
    isoprof_free(label);
    isoprof_free(anc);
    isoprof_free(head);
    isoprof_free(poff);
    isoprof_free(pr.buf);
    semi = label = anc = head = poff = pr.buf = NULL;

    /* Retained sizes, children before their dominator (reverse preorder:
     * a dominator is a DFS ancestor, so it comes first in preorder). */
    if (own != NULL && (rc = spill_nodes(own, SPILL_IN, SP_SELF)) != 0)
        goto fail;
    rc = -ENOMEM;
    if ((ret = isoprof_calloc(nn, sizeof(uint64_t))) == NULL ||
        (dfn == NULL && (dfn = isoprof_malloc(nn * sizeof(uint32_t))) == NULL))
        goto fail;
    for (uint32_t i = 0; i < n; i++)
        ret[vert[i]] = s->nself[vert[i]];
    for (uint32_t i = n - 1; i >= 1; i--)
        ret[vert[idm[i]]] = sat_add(ret[vert[idm[i]]], ret[vert[i]]);
    /* dfn is not needed any more: it becomes the per-node idom */
    memset(dfn, 0xff, nn * sizeof(uint32_t));
    for (uint32_t i = 0; i < n; i++)
        dfn[vert[i]] = vert[idm[i]];
    isoprof_free(idm);
    idm = NULL;
    if (own != NULL)
        spill_nodes(own, SPILL_DROP, SP_SELF); /* the profile reads them from the file */
    d->nnodes = (uint32_t)nn;
    d->nreached = n;
    d->idom = dfn;
    d->retained = ret;
    d->order = vert;
    *out = d;
    return 0;
fail:
    ec_free(&c);
    isoprof_free(dfn);
    isoprof_free(vert);
    isoprof_free(anc);
    isoprof_free(semi);
    isoprof_free(label);
    isoprof_free(idm);
    isoprof_free(head);
    isoprof_free(poff);
    isoprof_free(bbuf);
    isoprof_free(bcnt);
    isoprof_free(pr.buf);
    isoprof_free(ret);
    isoprof_free(d);
    return rc;
}

int heapsnap_dominators(const struct heapsnap *s, size_t max_bytes, struct heapsnap_dom **out)
{
    return dominators(s, NULL, max_bytes, out);
}

void heapsnap_dom_free(struct heapsnap_dom *d)
{
    if (d == NULL)
        return;
    isoprof_free(d->idom);
    isoprof_free(d->retained);
    isoprof_free(d->order);
    isoprof_free(d);
}

void heapsnap_dom_stats(const struct heapsnap_dom *d, struct heapsnap_dom_stats *out)
{
    out->reachable = d->nreached;
    out->unreachable = d->nnodes - d->nreached;
    out->total = d->retained[0];
    out->bytes = sizeof(*d) + (size_t)d->nnodes * 16;
}

uint32_t heapsnap_dom_idom(const struct heapsnap_dom *d, uint32_t v)
{
    if (v == 0 || v >= d->nnodes)
        return NONE;
    return d->idom[v];
}

bool heapsnap_dom_reached(const struct heapsnap_dom *d, uint32_t v)
{
    return v < d->nnodes && d->idom[v] != NONE;
}

uint64_t heapsnap_dom_retained(const struct heapsnap_dom *d, uint32_t v)
{
    return v < d->nnodes ? d->retained[v] : 0;
}

/* --- the retained profile --- */

/* The frames (interned names) and the trie of paths. */
struct prof {
    const struct heapsnap *s;
    uint64_t seed;
    struct isoprof_buf fb; /* frame names, NUL-terminated */
    uint32_t *foff, *flen;
    size_t nframes, fcap, max_frames;
    struct htab fh;
    uint32_t *tpar, *tframe; /* entry 0: the empty path; 1: the root's own */
    uint16_t *tdepth;
    uint64_t *tcount, *tbytes;
    size_t ntrie, tcap, max_trie;
    struct htab th;
    bool index_frames;
    int err;
};

/* Reallocates *a to ncap entries of elem bytes: 0 or -ENOMEM (*a kept). */
static int grow(void **a, size_t elem, size_t ncap)
{
    void *t = isoprof_realloc(*a, ncap * elem);
    if (t == NULL)
        return -ENOMEM;
    *a = t;
    return 0;
}

/* The frame named b[0..n): its index, or NONE when it would be one frame
 * too many (the caller folds) or an allocation failed (pr->err). */
static uint32_t frame_id(struct prof *pr, const char *b, size_t n, bool reserved)
{
    uint32_t h = (uint32_t)hbytes(pr->seed, b, n);
    if (pr->fh.s) {
        for (size_t i = h & pr->fh.mask;; i = (i + 1) & pr->fh.mask) {
            const struct hslot *sl = &pr->fh.s[i];
            if (sl->idx1 == 0)
                break;
            uint32_t f = sl->idx1 - 1;
            if (sl->hash == h && pr->flen[f] == n && memcmp(pr->fb.data + pr->foff[f], b, n) == 0)
                return f;
        }
    }
    if (!reserved && pr->nframes >= pr->max_frames + 2)
        return NONE;
    if (pr->nframes == pr->fcap) {
        size_t nc = pr->fcap ? pr->fcap * 2 : 256;
        if (grow((void **)&pr->foff, 4, nc) || grow((void **)&pr->flen, 4, nc))
            goto nomem;
        pr->fcap = nc;
    }
    size_t at = pr->fb.len;
    if (isoprof_buf_append(&pr->fb, b, n) || isoprof_buf_putc(&pr->fb, '\0') ||
        ht_add(&pr->fh, h, (uint32_t)pr->nframes))
        goto nomem;
    pr->foff[pr->nframes] = (uint32_t)at;
    pr->flen[pr->nframes] = (uint32_t)n;
    return (uint32_t)pr->nframes++;
nomem:
    pr->err = -ENOMEM;
    return NONE;
}

/* The path `parent` + frame f: its trie entry, or NONE when it would be
 * one path too many or an allocation failed (pr->err). */
static uint32_t trie_child(struct prof *pr, uint32_t parent, uint32_t f)
{
    uint32_t h = (uint32_t)hmix(pr->seed ^ ((uint64_t)parent << 32 | f));
    if (pr->th.s) {
        for (size_t i = h & pr->th.mask;; i = (i + 1) & pr->th.mask) {
            const struct hslot *sl = &pr->th.s[i];
            if (sl->idx1 == 0)
                break;
            uint32_t t = sl->idx1 - 1;
            if (sl->hash == h && pr->tpar[t] == parent && pr->tframe[t] == f)
                return t;
        }
    }
    if (pr->ntrie >= pr->max_trie)
        return NONE;
    if (pr->ntrie == pr->tcap) {
        size_t nc = pr->tcap ? pr->tcap * 2 : 256;
        if (grow((void **)&pr->tpar, 4, nc) || grow((void **)&pr->tframe, 4, nc) ||
            grow((void **)&pr->tdepth, 2, nc) || grow((void **)&pr->tcount, 8, nc) ||
            grow((void **)&pr->tbytes, 8, nc))
            goto nomem;
        pr->tcap = nc;
    }
    size_t t = pr->ntrie;
    if (ht_add(&pr->th, h, (uint32_t)t))
        goto nomem;
    pr->tpar[t] = parent;
    pr->tframe[t] = f;
    pr->tdepth[t] = (uint16_t)(t == 0 ? 0 : pr->tdepth[parent] + 1);
    pr->tcount[t] = 0;
    pr->tbytes[t] = 0;
    pr->ntrie++;
    return (uint32_t)t;
nomem:
    pr->err = -ENOMEM;
    return NONE;
}

/* Appends at most HEAPSNAP_PPROF_NAME bytes of the valid UTF-8 string s,
 * cut at a character. */
static size_t put_cut(char *b, size_t at, const char *s)
{
    size_t n = strnlen(s, HEAPSNAP_PPROF_NAME + 1);
    if (n > HEAPSNAP_PPROF_NAME)
        n = isoprof_utf8_valid_prefix((const uint8_t *)s, HEAPSNAP_PPROF_NAME);
    memcpy(b + at, s, n);
    return at + n;
}

/* Whether an edge's name is a slot number: V8 names the slots of internal
 * arrays (a Map's or a Set's hash table) by their index, as strings. */
static bool index_name(const char *s)
{
    size_t i = 0;
    while (s[i] >= '0' && s[i] <= '9')
        i++;
    return i > 0 && i <= 10 && s[i] == '\0';
}

/* How well an edge of type t and name_or_index name names its target,
 * lower better: a name the program gave (a property, a variable of a
 * closure's context), then V8's own (internal), then an index. */
static int edge_rank(const struct heapsnap *s, int t, uint32_t name)
{
    if (edge_is_indexed(s, t) || index_name(str_at(s, name)))
        return 2;
    return t == s->et_internal ? 1 : 0;
}

#define FRAME_MAX (2 * HEAPSNAP_PPROF_NAME + TYPE_NAME_MAX + 32)
#define LAB_NONE 0xff /* no edge (edge types are fewer than HEAPSNAP_MAX_TYPES) */
_Static_assert(HEAPSNAP_MAX_TYPES < LAB_NONE, "LAB_NONE is no edge type");

/* The frame of reached node v held by an edge of type et and
 * name_or_index ename, "<class> <edge>", into b (FRAME_MAX bytes, not
 * NUL-terminated): its length. */
static size_t frame_str(const struct prof *pr, uint32_t v, int et, uint32_t ename, char *b)
{
    const struct heapsnap *s = pr->s;
    size_t n = 0;
    int t = s->ntype[v];
    const char *name = str_at(s, s->nname[v]);
    if (t == s->nt_closure) {
        memcpy(b, "(closure)", 9);
        n = 9;
        if (name[0]) {
            b[n++] = ' ';
            n = put_cut(b, n, name);
        }
    } else if ((t == s->nt_object || t == s->nt_native || t == s->nt_synthetic) && name[0]) {
        n = put_cut(b, 0, name);
    } else {
        n = (size_t)snprintf(b, FRAME_MAX, "(%s)", s->ntypes[t]);
    }
    b[n++] = ' ';
    const char *en = edge_is_indexed(s, et) ? NULL : str_at(s, ename);
    if (en == NULL && pr->index_frames)
        n += (size_t)snprintf(b + n, FRAME_MAX - n, "[%" PRIu32 "]", ename);
    else if (en != NULL && index_name(en))
        n += (size_t)snprintf(b + n, FRAME_MAX - n, pr->index_frames ? "[%s]" : "[]", en);
    else if (en == NULL)
        n += (size_t)snprintf(b + n, FRAME_MAX - n, "[]");
    else
        n = put_cut(b, n, en);
    return n;
}

static void prof_free(struct prof *pr)
{
    isoprof_buf_free(&pr->fb);
    isoprof_free(pr->foff);
    isoprof_free(pr->flen);
    isoprof_free(pr->fh.s);
    isoprof_free(pr->tpar);
    isoprof_free(pr->tframe);
    isoprof_free(pr->tdepth);
    isoprof_free(pr->tcount);
    isoprof_free(pr->tbytes);
    isoprof_free(pr->th.s);
}

/*
 * The best-first walk. A group is the nodes that would share one path:
 * the children, in the dominator tree, of the nodes of one admitted path
 * that have the same frame. Pending groups wait in a max-heap by what they
 * retain together; the walk admits the largest (its path becomes a trie
 * entry, a sample), then groups its nodes' children. A child group never
 * retains more than the group it comes from, so the paths admitted are the
 * ones that hold the most, each after its prefix; what is never admitted
 * is charged to its nearest admitted dominator (folded).
 */
struct grp {
    uint64_t bytes;  /* what its nodes retain: the cumulative size of its path */
    uint64_t seq;    /* creation order: ties break on it */
    uint64_t hash;   /* of its frame's name (seeded, 64 bits: the names are not kept) */
    uint32_t head;   /* its nodes, linked through walk.next */
    uint32_t parent; /* the trie entry (path) it extends */
    uint32_t rep;    /* one of its nodes, whose frame names it; NONE: (deeper) */
    uint32_t slot;   /* in the table of the expansion that made it */
};

struct walk {
    const struct heapsnap_dom *d;
    uint32_t *koff, *kids; /* dominator-tree children: kids[koff[u] .. koff[u + 1]) */
    uint8_t *ltype;        /* per node: the type of the edge its frame names (LAB_NONE: none) */
    uint32_t *lname;       /* ... and its name_or_index */
    uint32_t *next;        /* per node: the next node of its group */
    struct grp *heap;      /* pending groups, a max-heap */
    size_t nheap, heapcap;
    struct grp *fresh; /* the groups of the expansion under way */
    size_t nfresh, freshcap;
    uint32_t *tab; /* their table: index + 1, 0 empty */
    size_t tabmask;
    uint64_t seq;
    unsigned max_depth;
};

static bool grp_before(const struct grp *a, const struct grp *b)
{
    return a->bytes != b->bytes ? a->bytes > b->bytes : a->seq < b->seq;
}

static int grp_cmp(const void *a, const void *b)
{
    return grp_before(a, b) ? -1 : grp_before(b, a) ? 1 : 0;
}

static void heap_up(struct walk *w, size_t i)
{
    struct grp g = w->heap[i];
    while (i > 0 && grp_before(&g, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = g;
}

static struct grp heap_pop(struct walk *w)
{
    struct grp top = w->heap[0], g = w->heap[--w->nheap];
    size_t i = 0, n = w->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && grp_before(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!grp_before(&w->heap[c], &g))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0)
        w->heap[i] = g;
    return top;
}

/* The fresh group whose frame's name hashes to h: its index, found or
 * made, or NONE when HEAPSNAP_PPROF_FRESH groups are made already. Two names of one hash would
 * share a group (and a name): 64 seeded bits make that a label's risk, never a fault. */
static int fresh_group(struct walk *w, uint32_t parent, uint32_t rep, uint64_t h, uint32_t *out)
{
    if (w->tab == NULL || (w->nfresh + 1) * 2 > w->tabmask + 1) {
        size_t nc = w->tab ? (w->tabmask + 1) * 2 : 1024;
        uint32_t *t = isoprof_calloc(nc, sizeof(*t));
        if (t == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < w->nfresh; i++) {
            size_t j = w->fresh[i].hash & (nc - 1);
            while (t[j] != 0)
                j = (j + 1) & (nc - 1);
            t[j] = (uint32_t)i + 1;
            w->fresh[i].slot = (uint32_t)j;
        }
        isoprof_free(w->tab);
        w->tab = t;
        w->tabmask = nc - 1;
    }
    size_t i = h & w->tabmask;
    for (; w->tab[i] != 0; i = (i + 1) & w->tabmask) {
        if (w->fresh[w->tab[i] - 1].hash == h) {
            *out = w->tab[i] - 1;
            return 0;
        }
    }
    if (w->nfresh >= HEAPSNAP_PPROF_FRESH) {
        *out = NONE; /* one frame too many under this path */
        return 0;
    }
    if (w->nfresh == w->freshcap) {
        size_t nc = w->freshcap ? w->freshcap * 2 : 256;
        if (grow((void **)&w->fresh, sizeof(struct grp), nc))
            return -ENOMEM;
        w->freshcap = nc;
    }
    w->fresh[w->nfresh] = (struct grp){0, w->seq++, h, NONE, parent, rep, (uint32_t)i};
    w->tab[i] = (uint32_t)w->nfresh + 1;
    *out = (uint32_t)w->nfresh++;
    return 0;
}

/* Groups the children of the nodes of path t (its group's list from head)
 * by frame, and queues the groups. Then, if more groups wait than can
 * still be admitted, keeps the largest (a sorted array is a heap). */
static int expand(struct prof *pr, struct walk *w, uint32_t t, uint32_t head)
{
    const struct heapsnap_dom *d = w->d;
    bool deep = pr->tdepth[t] >= w->max_depth;
    char b[FRAME_MAX];
    w->nfresh = 0;
    for (uint32_t u = head; u != NONE; u = w->next[u]) {
        for (uint32_t j = w->koff[u]; j < w->koff[u + 1]; j++) {
            uint32_t v = w->kids[j], gi;
            uint64_t h =
                deep ? 0 : hbytes(pr->seed, b, frame_str(pr, v, w->ltype[v], w->lname[v], b));
            if (fresh_group(w, t, deep ? NONE : v, h, &gi) != 0)
                return -ENOMEM;
            if (gi == NONE)
                continue; /* never a path of its own: folded into t */
            struct grp *g = &w->fresh[gi];
            g->bytes = sat_add(g->bytes, d->retained[v]);
            w->next[v] = g->head;
            g->head = v;
        }
    }
    if (w->nheap + w->nfresh > w->heapcap) {
        size_t nc = w->heapcap ? w->heapcap : 256;
        while (nc < w->nheap + w->nfresh)
            nc *= 2;
        if (grow((void **)&w->heap, sizeof(struct grp), nc))
            return -ENOMEM;
        w->heapcap = nc;
    }
    for (size_t i = 0; i < w->nfresh; i++) {
        w->tab[w->fresh[i].slot] = 0;
        w->heap[w->nheap] = w->fresh[i];
        heap_up(w, w->nheap++);
    }
    size_t left = pr->max_trie - pr->ntrie;
    if (w->nheap > 2 * left + 1024) {
        qsort(w->heap, w->nheap, sizeof(struct grp), grp_cmp);
        w->nheap = left;
    }
    return 0;
}

static void walk_free(struct walk *w)
{
    isoprof_free(w->koff);
    isoprof_free(w->kids);
    isoprof_free(w->ltype);
    isoprof_free(w->lname);
    isoprof_free(w->next);
    isoprof_free(w->heap);
    isoprof_free(w->fresh);
    isoprof_free(w->tab);
    memset(w, 0, sizeof(*w));
}

static int64_t clamp64(uint64_t v)
{
    return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

#define SELF_CHUNK ((size_t)1 << 16) /* self sizes read back at once */

size_t heapsnap_pprof_need(const struct heapsnap *s)
{
    /* per node: lname (then the path's trie entry), next, koff, kids (4
     * bytes each), ltype and a bit (byidom, then admitted); with a spill
     * file, a small edge cache for the one scan of the edges */
    size_t nn = s->nnodes;
    return nn * 17 + nn / 8 + 16 + (s->fd >= 0 ? ec_bytes(EC_SEQ_SLOTS) : 0);
}

#define FIXED_STRINGS 6 /* "", and the sample and period types' names */

/* Serializes the trie's paths as a Profile into out. */
static int prof_encode(struct prof *pr, const struct heapsnap_pprof_opts *o, const char **comments,
                       size_t ncomments, struct pprof_buf *out, uint64_t *nsamples)
{
    typedef Perftools__Profiles__Sample Sample;
    typedef Perftools__Profiles__Location Location;
    typedef Perftools__Profiles__Line Line;
    typedef Perftools__Profiles__Function Function;
    int rc = -ENOMEM;
    size_t ns = 0, nids = 0, nf = pr->nframes, nstr = FIXED_STRINGS + nf + ncomments;
    for (size_t t = 1; t < pr->ntrie; t++)
        if (pr->tcount[t] != 0) {
            ns++;
            nids += pr->tdepth[t];
        }
    Sample *samples = isoprof_calloc(ns ? ns : 1, sizeof(*samples));
    Sample **sp = isoprof_calloc(ns ? ns : 1, sizeof(*sp));
    uint64_t *ids = isoprof_calloc(nids ? nids : 1, sizeof(*ids));
    int64_t *vals = isoprof_calloc(ns ? 2 * ns : 1, sizeof(*vals));
    Location *locs = isoprof_calloc(nf, sizeof(*locs));
    Location **lp = isoprof_calloc(nf, sizeof(*lp));
    Line *lines = isoprof_calloc(nf, sizeof(*lines));
    Line **linep = isoprof_calloc(nf, sizeof(*linep));
    Function *fns = isoprof_calloc(nf, sizeof(*fns));
    Function **fp = isoprof_calloc(nf, sizeof(*fp));
    char **strs = isoprof_calloc(nstr, sizeof(*strs));
    int64_t *cm = isoprof_calloc(ncomments ? ncomments : 1, sizeof(*cm));
    uint8_t *data = NULL;
    if (samples == NULL || sp == NULL || ids == NULL || vals == NULL || locs == NULL ||
        lp == NULL || lines == NULL || linep == NULL || fns == NULL || fp == NULL || strs == NULL ||
        cm == NULL)
        goto done;
    static const char *const fixed[FIXED_STRINGS] = {
        "", "retained_objects", "count", "retained_space", "bytes", "space"};
    for (size_t i = 0; i < FIXED_STRINGS; i++)
        strs[i] = (char *)fixed[i];
    for (size_t f = 0; f < nf; f++) {
        strs[FIXED_STRINGS + f] = pr->fb.data + pr->foff[f];
        Function *fn = &fns[f];
        perftools__profiles__function__init(fn);
        fn->id = f + 1;
        fn->name = (int64_t)(FIXED_STRINGS + f);
        fp[f] = fn;
        perftools__profiles__line__init(&lines[f]);
        lines[f].function_id = f + 1;
        linep[f] = &lines[f];
        perftools__profiles__location__init(&locs[f]);
        locs[f].id = f + 1;
        locs[f].n_line = 1;
        locs[f].line = &linep[f];
        lp[f] = &locs[f];
    }
    for (size_t i = 0; i < ncomments; i++) {
        strs[FIXED_STRINGS + nf + i] = (char *)comments[i];
        cm[i] = (int64_t)(FIXED_STRINGS + nf + i);
    }
    size_t k = 0, at = 0;
    for (size_t t = 1; t < pr->ntrie; t++) {
        if (pr->tcount[t] == 0)
            continue;
        Sample *x = &samples[k];
        perftools__profiles__sample__init(x);
        x->location_id = &ids[at];
        x->n_location_id = pr->tdepth[t];
        for (uint32_t u = (uint32_t)t; u != 0; u = pr->tpar[u]) /* leaf first */
            ids[at++] = (uint64_t)pr->tframe[u] + 1;
        x->value = &vals[2 * k];
        x->n_value = 2;
        vals[2 * k] = clamp64(pr->tcount[t]);
        vals[2 * k + 1] = clamp64(pr->tbytes[t]);
        sp[k++] = x;
    }
    Perftools__Profiles__ValueType st[2], pt;
    Perftools__Profiles__ValueType *stp[2] = {&st[0], &st[1]};
    for (int i = 0; i < 2; i++)
        perftools__profiles__value_type__init(&st[i]);
    perftools__profiles__value_type__init(&pt);
    st[0].type = 1;
    st[0].unit = 2;
    st[1].type = 3;
    st[1].unit = 4;
    pt.type = 5;
    pt.unit = 4;
    Perftools__Profiles__Profile prof;
    perftools__profiles__profile__init(&prof);
    prof.n_sample_type = 2;
    prof.sample_type = stp;
    prof.n_sample = ns;
    prof.sample = sp;
    prof.n_location = nf;
    prof.location = lp;
    prof.n_function = nf;
    prof.function = fp;
    prof.n_string_table = nstr;
    prof.string_table = strs;
    prof.time_nanos = clamp64(o->time_ns);
    prof.period_type = &pt;
    prof.period = 1;
    prof.n_comment = ncomments;
    prof.comment = cm;
    size_t len = perftools__profiles__profile__get_packed_size(&prof);
    if ((data = isoprof_malloc(len ? len : 1)) == NULL)
        goto done;
    perftools__profiles__profile__pack(&prof, data);
    out->data = data;
    out->len = len;
    *nsamples = ns;
    rc = 0;
done:
    isoprof_free(samples);
    isoprof_free(sp);
    isoprof_free(ids);
    isoprof_free(vals);
    isoprof_free(locs);
    isoprof_free(lp);
    isoprof_free(lines);
    isoprof_free(linep);
    isoprof_free(fns);
    isoprof_free(fp);
    isoprof_free(strs);
    isoprof_free(cm);
    return rc;
}

/* heapsnap_pprof; own_s and own_d, if not NULL, are s and d, which the
 * caller gives up to it: what it no longer reads of them is freed as it
 * goes (s's edge index after the scan of the edges, d's idoms once the
 * children lists are made). */
static int pprof_run(const struct heapsnap *s, const struct heapsnap_dom *d, struct heapsnap *own_s,
                     struct heapsnap_dom *own_d, const struct heapsnap_pprof_opts *o,
                     struct heapsnap_pprof_result *out)
{
    static const struct heapsnap_pprof_opts defaults = {0};
    if (o == NULL)
        o = &defaults;
    if (s == NULL || d == NULL || out == NULL || d->nnodes != s->nnodes || o->max_depth > 1000)
        return -EINVAL;
    unsigned max_depth = o->max_depth ? o->max_depth : HEAPSNAP_PPROF_DEPTH;
    size_t max_samples = o->max_samples ? o->max_samples : HEAPSNAP_PPROF_SAMPLES;
    size_t max_frames = o->max_frames ? o->max_frames : HEAPSNAP_PPROF_FRAMES;
    if (max_samples > UINT32_MAX / 2)
        max_samples = UINT32_MAX / 2;
    if (max_frames > UINT32_MAX / 2)
        max_frames = UINT32_MAX / 2;
    size_t nn = s->nnodes;
    uint32_t n = d->nreached;
    int rc = -ENOMEM;
    struct prof pr;
    memset(&pr, 0, sizeof(pr));
    pr.s = s;
    pr.seed = hmix((uint64_t)(uintptr_t)&pr ^ 0x5bd1e995);
    pr.max_frames = max_frames;
    pr.max_trie = max_samples + 1; /* + the empty path */
    pr.index_frames = o->index_frames;
    isoprof_buf_init(&pr.fb, (max_frames + 2) * (FRAME_MAX + 1));
    struct walk w;
    memset(&w, 0, sizeof(w));
    w.d = d;
    w.max_depth = max_depth;
    struct ecache c;
    memset(&c, 0, sizeof(c));
    uint64_t *selfbuf = NULL;
    /* an owned snapshot's node arrays wait in the spill file (dominators):
     * each comes back for the pass that reads it */
    bool spilled = own_s != NULL && own_s->fd >= 0;
    uint8_t *byidom = isoprof_calloc(nn / 8 + 1, 1);
    w.ltype = isoprof_malloc(nn ? nn : 1);
    w.lname = isoprof_malloc(nn * sizeof(uint32_t));
    if (byidom == NULL || w.ltype == NULL || w.lname == NULL || ec_init(&c, s, EC_SEQ_SLOTS) != 0)
        goto done;
    if (spilled && own_s->nfirst == NULL && (rc = spill_nodes(own_s, SPILL_IN, SP_FIRST)) != 0)
        goto done;
    rc = -ENOMEM;

    /* Each node's edge: the first retaining edge from its immediate
     * dominator if there is one, else the best named retaining edge into
     * it (edge_rank; the first of the best in snapshot order): an object
     * held by a global and also by a stack slot or a cache is called by
     * the global's name, whichever holder comes first. One pass over the
     * edges of the reached nodes, in order (a sequential read of the
     * spill file). */
    uint8_t *ltype = w.ltype;
    uint32_t *lname = w.lname;
    memset(ltype, LAB_NONE, nn);
    for (uint32_t u = 0; u < nn; u++) {
        if (d->idom[u] == NONE)
            continue;
        for (uint32_t e = s->nfirst[u]; e < s->nfirst[u + 1]; e++) {
            const uint8_t *r = ec_get(&c, e);
            uint32_t v = rec_to(r);
            int et = rec_type(r);
            if (v == 0 || (byidom[v / 8] >> (v % 8) & 1) || !retains(s, u, et))
                continue;
            if (d->idom[v] == u) {
                byidom[v / 8] |= (uint8_t)(1u << (v % 8));
            } else if (ltype[v] != LAB_NONE &&
                       edge_rank(s, et, rec_name(r)) >= edge_rank(s, ltype[v], lname[v])) {
                continue;
            }
            ltype[v] = (uint8_t)et;
            lname[v] = rec_name(r);
        }
    }
    ec_free(&c);
    if (c.err) {
        rc = c.err;
        goto done;
    }
    if (own_s != NULL)
        spill_nodes(own_s, SPILL_DROP, SP_FIRST);
    if (spilled && (own_s->ntype == NULL || own_s->nname == NULL) &&
        (rc = spill_nodes(own_s, SPILL_IN, SP_TYPE | SP_NAME)) != 0)
        goto done;
    rc = -ENOMEM;

    /* The dominator tree's children lists, each in preorder: counted at
     * their parent, summed to the end of each run, then filled backwards
     * (so each run's offset ends at its start). */
    w.koff = isoprof_calloc(nn + 1, sizeof(uint32_t));
    w.kids = isoprof_malloc((n ? n : 1) * sizeof(uint32_t));
    if (w.koff == NULL || w.kids == NULL)
        goto done;
    for (uint32_t k = 1; k < n; k++)
        w.koff[d->idom[d->order[k]]]++;
    for (size_t u = 1; u <= nn; u++)
        w.koff[u] += w.koff[u - 1];
    for (uint32_t k = n; k-- > 1;) {
        uint32_t v = d->order[k];
        w.kids[--w.koff[d->idom[v]]] = v;
    }
    if (own_d != NULL) {
        isoprof_free(own_d->idom);
        own_d->idom = NULL;
    }
    if ((w.next = isoprof_malloc(nn * sizeof(uint32_t))) == NULL)
        goto done;
    /* From here on a node's lname is its path's trie entry (tof) once its
     * group is admitted (its frame named by then), and byidom says which
     * are admitted. */
    uint32_t *tof = lname;
    uint8_t *adm = byidom;
    memset(adm, 0, nn / 8 + 1);

    /* Frames 0 and 1 and trie entries 0 and 1 are reserved: the root's
     * own frame and path, and the (deeper) frame. */
    uint32_t f_root = frame_id(&pr, HEAPSNAP_ROOT_FRAME, strlen(HEAPSNAP_ROOT_FRAME), true);
    uint32_t f_deeper = frame_id(&pr, HEAPSNAP_DEEPER_FRAME, strlen(HEAPSNAP_DEEPER_FRAME), true);
    uint32_t t_empty = trie_child(&pr, NONE, NONE);
    uint32_t t_root = trie_child(&pr, t_empty, f_root);
    if (pr.err)
        goto done;
    tof[0] = t_empty;
    adm[0] |= 1;
    w.next[0] = NONE;
    if (expand(&pr, &w, t_empty, 0) != 0)
        goto done;
    char b[FRAME_MAX];
    while (pr.ntrie < pr.max_trie && w.nheap > 0) {
        struct grp g = heap_pop(&w);
        uint32_t f = f_deeper;
        if (g.rep != NONE)
            f = frame_id(&pr, b, frame_str(&pr, g.rep, ltype[g.rep], lname[g.rep], b), false);
        if (pr.err)
            goto done;
        if (f == NONE)
            continue; /* one frame too many: its nodes are folded */
        uint32_t t = trie_child(&pr, g.parent, f);
        if (pr.err)
            goto done;
        ISOPROF_ASSERT(t != NONE && t >= 2);
        for (uint32_t v = g.head; v != NONE; v = w.next[v]) {
            tof[v] = t;
            adm[v / 8] |= (uint8_t)(1u << (v % 8));
        }
        if (g.rep != NONE && expand(&pr, &w, t, g.head) != 0)
            goto done;
    }

    /* Every node to its path, or its nearest admitted dominator's: in
     * preorder, a node's path is known when its turn comes, and passes to
     * its children that were not admitted. */
    uint64_t deeper = 0, folded = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t u = d->order[k], t = tof[u];
        for (uint32_t j = w.koff[u]; j < w.koff[u + 1]; j++) {
            uint32_t v = w.kids[j];
            if (!(adm[v / 8] >> (v % 8) & 1)) {
                tof[v] = t;
                adm[v / 8] |= (uint8_t)(1u << (v % 8));
                folded += pr.tframe[t] != f_deeper;
            }
        }
        deeper += pr.tframe[t] == f_deeper;
        t = t == t_empty ? t_root : t;
        pr.tcount[t]++;
        if (!spilled)
            pr.tbytes[t] = sat_add(pr.tbytes[t], s->nself[u]);
    }
    /* spilled, the self sizes come from the file in node order */
    if (spilled && (selfbuf = isoprof_malloc(SELF_CHUNK * sizeof(uint64_t))) == NULL)
        goto done;
    for (size_t u0 = 0; spilled && u0 < nn; u0 += SELF_CHUNK) {
        size_t k = nn - u0 < SELF_CHUNK ? nn - u0 : SELF_CHUNK;
        size_t want = k * sizeof(uint64_t);
        if (isoprof_pread_full(s->fd, selfbuf, want,
                               (off_t)(nodes_off(s) + (uint64_t)nn * 5 + u0 * sizeof(uint64_t))) !=
            (ssize_t)want) {
            rc = -EIO;
            goto done;
        }
        for (size_t j = 0; j < k; j++) {
            size_t u = u0 + j;
            if (!(adm[u / 8] >> (u % 8) & 1))
                continue;
            uint32_t t = tof[u] == t_empty ? t_root : tof[u];
            pr.tbytes[t] = sat_add(pr.tbytes[t], selfbuf[j]);
        }
    }
    isoprof_free(selfbuf);
    selfbuf = NULL;
    walk_free(&w);
    isoprof_free(byidom);
    byidom = NULL;

    char c1[200], c2[200], c3[200];
    const char *comments[3];
    size_t nc = 0;
    size_t unreached = nn - n;
    if (unreached) {
        snprintf(c1, sizeof(c1),
                 "isoprof: %zu nodes the root does not reach through retaining edges are left out",
                 unreached);
        comments[nc++] = c1;
    }
    if (deeper) {
        snprintf(c2, sizeof(c2),
                 "isoprof: %" PRIu64
                 " nodes deeper than %u frames are charged to a " HEAPSNAP_DEEPER_FRAME
                 " frame under their ancestor at that depth",
                 deeper, max_depth);
        comments[nc++] = c2;
    }
    if (folded) {
        snprintf(c3, sizeof(c3),
                 "isoprof: %" PRIu64 " nodes on paths past the cap of %zu paths or %zu frames are "
                 "charged to their nearest dominator's path",
                 folded, max_samples, max_frames);
        comments[nc++] = c3;
    }
    struct heapsnap_pprof_result r;
    memset(&r, 0, sizeof(r));
    if ((rc = prof_encode(&pr, o, comments, nc, &r.pprof, &r.samples)) != 0)
        goto done;
    for (size_t t = 1; t < pr.ntrie; t++) {
        r.objects += pr.tcount[t];
        r.bytes = sat_add(r.bytes, pr.tbytes[t]);
    }
    r.frames = pr.nframes;
    r.deeper = deeper;
    r.folded = folded;
    *out = r;
    rc = 0;
done:
    ec_free(&c);
    isoprof_free(selfbuf);
    isoprof_free(byidom);
    walk_free(&w);
    prof_free(&pr);
    return rc;
}

int heapsnap_pprof(const struct heapsnap *s, const struct heapsnap_dom *d,
                   const struct heapsnap_pprof_opts *o, struct heapsnap_pprof_result *out)
{
    return pprof_run(s, d, NULL, NULL, o, out);
}

/* --- the retained profile within a budget --- */

struct retained_feed {
    struct heapsnap_parser *p;
    int reason;
};

static int retained_feed(void *arg, const void *data, size_t len)
{
    struct retained_feed *f = arg;
    f->reason = heapsnap_parser_feed(f->p, data, len);
    return f->reason != HEAPSNAP_OK;
}

static int retained_why(char **why, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int retained_why(char **why, int rc, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    *why = isoprof_strdup(buf);
    return rc;
}

int heapsnap_retained(const struct heapsnap_retained_opts *o, heapsnap_source_fn src, void *arg,
                      struct heapsnap_pprof_result *out, char **why)
{
    *why = NULL;
    if (o->budget != 0 && o->budget < HEAPSNAP_RETAINED_FIXED) {
        if (o->spill_fd >= 0)
            close(o->spill_fd);
        return retained_why(why, HEAPSNAP_E_TOOBIG, "a budget of %zu bytes holds no snapshot",
                            o->budget);
    }
    /* The fixed part (the caches, the profile's tables) is set aside; the
     * rest pays for the snapshot and, reserved with its nodes, for what
     * each later pass needs a node. */
    struct heapsnap_parse_opts po = {
        .budget = o->budget ? o->budget - HEAPSNAP_RETAINED_FIXED : 0,
        .spill_fd = o->spill_fd,
        .used_names = true,
        .reserve_node = HEAPSNAP_RESERVE_NODE,
    };
    struct retained_feed f = {0};
    if (heapsnap_parser_new_opts(&po, &f.p) != 0)
        return -ENOMEM;
    int rc = src(arg, retained_feed, &f);
    if (rc != 0 && f.reason == HEAPSNAP_OK) {
        heapsnap_parser_free(f.p);
        return retained_why(why, rc < 0 ? rc : -EIO, "the snapshot could not be read back: %s",
                            isoprof_strerror(rc < 0 ? rc : -EIO));
    }
    /* A refusal while feeding comes back from finish, with its why. */
    struct heapsnap *s = NULL;
    char *pwhy = NULL;
    int reason = heapsnap_parser_finish(f.p, &s, &pwhy);
    heapsnap_parser_free(f.p);
    if (reason != HEAPSNAP_OK) {
        rc = reason == HEAPSNAP_E_NOMEM ? -ENOMEM
                                        : retained_why(why, reason, "snapshot refused (%s): %s",
                                                       heapsnap_reason(reason), pwhy ? pwhy : "");
        isoprof_free(pwhy);
        return rc;
    }
    size_t left = 0; /* what the snapshot leaves of the budget; 0: no cap */
    if (o->budget) {
        size_t held = heapsnap_bytes(s);
        left = held < o->budget ? o->budget - held : 1;
    }
    struct heapsnap_dom *d = NULL;
    rc = dominators(s, s, left, &d);
    if (rc != 0) {
        size_t need = dom_need(s, s->fd >= 0);
        heapsnap_free(s);
        if (rc == ISOPROF_ETOOBIG)
            return retained_why(why, rc,
                                "the dominator tree would need %zu bytes, past the %zu the "
                                "snapshot leaves of the budget",
                                need, left);
        if (rc == -EIO)
            return retained_why(why, rc, "the spill file failed in the dominator tree");
        return rc;
    }
    /* the profile's arrays and the dominator tree beside them: what the
     * snapshot leaves is beyond its 17 bytes a node, of which the
     * profile holds at most 5 at once (the types and names; the edge index
     * before them, the self sizes read back in pieces), and it frees d's
     * idoms (4) before it needs its last arrays */
    struct heapsnap_dom_stats st;
    heapsnap_dom_stats(d, &st);
    size_t pneed = heapsnap_pprof_need(s) + st.bytes + (size_t)5 * s->nnodes -
                   (size_t)(HEAPSNAP_NODE_BYTES + 4) * s->nnodes + SELF_CHUNK * sizeof(uint64_t);
    if (left != 0 && pneed > left) {
        heapsnap_dom_free(d);
        heapsnap_free(s);
        return retained_why(why, ISOPROF_ETOOBIG,
                            "the profile would need %zu bytes, past the %zu the snapshot leaves "
                            "of the budget",
                            pneed, left);
    }
    rc = pprof_run(s, d, s, d, &o->pprof, out);
    heapsnap_dom_free(d);
    heapsnap_free(s);
    if (rc == -EIO)
        return retained_why(why, rc, "the spill file failed in the profile");
    return rc;
}

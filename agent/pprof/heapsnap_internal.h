/*
 * heapsnap_internal.h - what the files of the heap snapshot code share:
 * the snapshot and its spill file (heapsnap.c), the parser's state
 * (heapsnap_parse.c, heapsnap_schema.c), the dominators
 * (heapsnap_dom.c) that the retained profile (heapsnap_pprof.c) runs.
 * Not part of heapsnap.h's API. Every function here runs on the thread
 * that owns the snapshot or parser it is given.
 */
#ifndef ISOPROF_HEAPSNAP_INTERNAL_H
#define ISOPROF_HEAPSNAP_INTERNAL_H

#include "heapsnap.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "base.h"
#include "jsonlex.h"

/* --- the snapshot and its spill file (heapsnap.c) --- */

#define NONE HEAPSNAP_NONE
#define TYPE_NAME_MAX 63     /* bytes of a node or edge type name */
#define TYPE_ENTRIES_MAX 256 /* names in all the arrays of node_types (or edge_types) */
#define MAX_CTX 6            /* top, snapshot, meta, node_types, a type list */

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

static inline uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}

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

/* What the arrays of n nodes and e edges take (the budget's unit). */
uint64_t hs_arrays_bytes(uint64_t n, uint64_t e, bool spill);
/* What a finished snapshot holds (its arrays are cut to their lengths). */
size_t hs_snap_bytes(const struct heapsnap *s);
/* The edge cache of nslots blocks: what it takes, and its setup (0 or
 * -ENOMEM; nothing to set up without a spill file) and release. */
size_t hs_ec_bytes(uint32_t nslots);
int hs_ec_init(struct ecache *c, const struct heapsnap *s, uint32_t nslots);
void hs_ec_free(struct ecache *c);

/* --- the parser (heapsnap_parse.c, heapsnap_schema.c) --- */

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
    struct jsonlex_fail fail; /* sticky: the first reason and its message */
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

/* The innermost container the parser is in. */
static inline struct frame *frame_top(struct heapsnap_parser *p)
{
    ISOPROF_ASSERT(p->nfr > 0);
    return &p->fr[p->nfr - 1];
}

/* heapsnap_parse.c. The parser's sticky error: the first err (a
 * HEAPSNAP_E_* reason) and its message are kept; returns 0 (stop). */
int hs_pfail(struct heapsnap_parser *p, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int hs_nomem(struct heapsnap_parser *p);
/* Charges `more` bytes to the budget: 1, or 0 with p->err set. */
int hs_charge(struct heapsnap_parser *p, uint64_t more, const char *what);
/* Appends the offset of a finished string to the strings index: 1, or 0
 * with p->err set. */
int hs_soff_push(struct heapsnap_parser *p, uint32_t off);
/* The ']' of nodes[] or edges[]. Returns 1, or 0 with p->err set. */
int hs_ints_close(struct heapsnap_parser *p);

/* heapsnap_schema.c: the lexer's events against the schema. Each returns
 * 1, or 0 with p->err set. */
/* A key of an object we read, read whole. */
void hs_on_key(struct heapsnap_parser *p, const char *k, size_t n);
/* A container opens (kind '{' or '['). */
int hs_on_open(struct heapsnap_parser *p, int kind);
/* A scalar value: kind 's' string (for SK_NAME: the name text[0..n), n
 * past TYPE_NAME_MAX if it is longer), 'n' number (its text[0..n)), 'b'
 * boolean, 'z' null. */
int hs_on_scalar(struct heapsnap_parser *p, int kind, const char *text, size_t n);
/* A container closes (not nodes[] or edges[]: hs_ints_close). */
int hs_on_close(struct heapsnap_parser *p);

/* --- the dominators (heapsnap_dom.c) --- */

struct heapsnap_dom {
    uint32_t nnodes;
    uint32_t nreached;
    uint32_t *idom;     /* per node: its immediate dominator (the root's: 0); NONE: not reached */
    uint64_t *retained; /* per node */
    uint32_t *order;    /* the reached nodes in DFS preorder (a dominator first) */
};

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

/* What the dominators allocate; when they own s (with a spill file),
 * beyond the snapshot's own 17 bytes a node, which wait in the file while
 * they run: at most 28 bytes a node at once (Lengauer-Tarjan's seven
 * arrays; then the result and the self sizes), so 11 more. */
size_t hs_dom_need(const struct heapsnap *s, bool own);
/* Where the node arrays go in the spill file while the dominators run
 * (hs_spill_nodes), after the predecessors. */
uint64_t hs_nodes_off(const struct heapsnap *s);
/* The arrays of `which` (SP_*) out, dropped or in: 0, or -ENOMEM / -EIO
 * (the arrays then stay as they are: NULL ones are freed with the
 * snapshot, which the caller only frees then). */
int hs_spill_nodes(struct heapsnap *s, enum spill_op op, unsigned which);
/* heapsnap_dominators; own, if not NULL, is s, which the caller gives up
 * to it (with a spill file its node arrays wait there while it runs). */
int hs_dominators(const struct heapsnap *s, struct heapsnap *own, size_t max_bytes,
                  struct heapsnap_dom **out);

#endif

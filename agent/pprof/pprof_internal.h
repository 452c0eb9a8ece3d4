/*
 * pprof_internal.h - what the files of the pprof library share: the
 * builder (pprof.c) that v8json.c and merge.c feed, and the decoded
 * profile (merge.c) that tree.c reads. Not part of pprof.h's API.
 */
#ifndef ISOPROF_PPROF_INTERNAL_H
#define ISOPROF_PPROF_INTERNAL_H

#include "pprof.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base.h"
#include "htab.h"
#include "profile.pb-c.h"

/* No index: a node without a parent, a string not interned. */
#define NONE UINT32_MAX

/* --- small helpers (pprof.c) --- */

/* *why = an allocated message (when why is not NULL). */
void pprof_set_why(char **why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* *pp (an array of elem-sized entries, *cap of them) grown to hold need;
 * 0 or -ENOMEM. */
int pprof_grow(void *pp, size_t *cap, size_t need, size_t elem);
int64_t pprof_sat_add(int64_t a, int64_t b);
int64_t pprof_sat_mul(int64_t a, int64_t b);
/* s[0..n) into out (at most max bytes), invalid UTF-8 replaced; returns
 * the length written. */
size_t pprof_utf8_clean(const uint8_t *s, size_t n, char *out, size_t max);

/* --- the builder (pprof.c): strings, functions, locations and a stack trie
 * interned, written as pprof. Sticky error: after the first failure every
 * call is a no-op and bld_finish reports it. --- */

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

void bld_fail(struct bld *b, int err);
uint32_t bld_str(struct bld *b, const char *s, size_t n);
uint32_t bld_cstr(struct bld *b, const char *s);
uint64_t bld_func(struct bld *b, uint32_t name, uint32_t sys, uint32_t file, int64_t start);
uint64_t bld_loc(struct bld *b, const struct bline *lines, size_t n);
uint32_t bld_stack(struct bld *b, uint32_t parent, uint64_t loc);
void bld_comment(struct bld *b, const char *s);
void bld_add(struct bld *b, uint32_t stack, const int64_t *v);
int bld_init(struct bld *b, size_t nv);
void bld_free(struct bld *b);
int bld_finish(struct bld *b, const struct bmeta *m, struct pprof_buf *out);

/* --- the decoded profile (merge.c) --- */

/* protobuf-c returns NULL both for bad bytes and for a failed allocation;
 * the allocator notes the latter so that -ENOMEM is not reported as a
 * corrupt input. One per decode: no shared state between threads. */
struct pb_mem {
    ProtobufCAllocator a;
    bool oom;
};

/* A decoded, checked profile: every id and string index it holds resolves. */
struct dec {
    struct pb_mem mem;
    Perftools__Profiles__Profile *p;
    struct htab fidx, lidx; /* function / location id -> index */
};

/* in (the k-th input, for messages) decoded and checked into *d; 0,
 * -EINVAL, -ENOMEM or ISOPROF_EPROFILE with *why. dec_close frees it. */
int dec_open(struct dec *d, const struct pprof_buf *in, size_t k, char **why);
void dec_close(struct dec *d);
/* The index of function / location id in d's profile; NONE when absent. */
uint32_t dec_func(const struct dec *d, uint64_t id);
uint32_t dec_loc(const struct dec *d, uint64_t id);
/* String i of d's table ("" when out of range). */
const char *dec_str(const struct dec *d, int64_t i);

/* --- the V8 JSON parser (v8json.c), whose result v8conv.c converts --- */

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
    uint64_t orphans; /* samples naming a node the tree does not hold */
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

/* The parser's sticky error: the first err and its message are kept;
 * returns 0, which cancels the parse. */
int v8_fail(struct jp *p, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int v8_nomem(struct jp *p);
/* Where we are, for messages: "nodes[12] (id 40)". */
const char *v8_where(struct jp *p, char *buf, size_t n, uint32_t node);
/* The index of the node with id, or NONE. */
uint32_t v8_id_find(const struct jp *p, uint32_t id);
/* The node id index built (once the nodes are in): 1, or 0 with p->err
 * set (a duplicate id, out of memory). */
int v8_build_index(struct jp *p);
/* A parser that feeds b: 0 or -ENOMEM; v8_jp_free frees it. */
int v8_jp_init(struct jp *p, struct bld *b, bool heap, size_t max_nodes);
void v8_jp_free(struct jp *p);
/* The reply json[0..len) parsed into p: 0, or p->err. */
int v8_jp_parse(struct jp *p, const char *json, size_t len);

#endif

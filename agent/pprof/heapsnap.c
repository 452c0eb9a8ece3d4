/*
 * heapsnap.c - V8 heap snapshots: the snapshot and its spill file; this
 * note is the design of the streaming parser (heapsnap_parse.c,
 * heapsnap_schema.c), the dominator tree (heapsnap_dom.c) and the
 * retained profile (heapsnap_pprof.c) too (see heapsnap.h).
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
#include "heapsnap_internal.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "jsonlex.h"

/* --- the snapshot --- */

/* What the arrays of n nodes and e edges take (the budget's unit). */
uint64_t hs_arrays_bytes(uint64_t n, uint64_t e, bool spill)
{
    return n * HEAPSNAP_NODE_BYTES + (spill ? 0 : e * HEAPSNAP_EDGE_BYTES);
}

/* What a finished snapshot holds (its arrays are cut to their lengths). */
size_t hs_snap_bytes(const struct heapsnap *s)
{
    return sizeof(*s) + 4 + (size_t)hs_arrays_bytes(s->nnodes, s->nedges, s->fd >= 0) +
           s->strs_cap + s->soff_cap * sizeof(uint32_t);
}

/* --- the spill file --- */

size_t hs_ec_bytes(uint32_t nslots)
{
    return (size_t)nslots * (EC_BLOCK * EREC + sizeof(uint32_t));
}

int hs_ec_init(struct ecache *c, const struct heapsnap *s, uint32_t nslots)
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

void hs_ec_free(struct ecache *c)
{
    isoprof_free(c->blk);
    isoprof_free(c->tag);
    c->blk = NULL;
    c->tag = NULL;
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
    return s ? hs_snap_bytes(s) : 0;
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

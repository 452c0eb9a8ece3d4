/*
 * heapsnap_dom.c - the dominator tree of a heap snapshot and each node's
 * retained size: Lengauer-Tarjan without recursion, the predecessor lists
 * and node arrays through the spill file when there is one. See heapsnap.c
 * for the design.
 */
#include "heapsnap_internal.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "jsonlex.h"

/* --- dominators --- */

/* The bucket buffers of the predecessors' fill, all together. */
#define PAIR_BUF_BYTES ((size_t)4 << 20)

size_t heapsnap_dom_need(const struct heapsnap *s)
{
    return hs_dom_need(s, false);
}

size_t hs_dom_need(const struct heapsnap *s, bool own)
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
        4 * win + PAIR_BUF_BYTES + 16 * ((size_t)s->nedges / win + 1) + hs_ec_bytes(EC_SEQ_SLOTS);
    size_t dfs = hs_ec_bytes(EC_DFS_SLOTS);
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
uint64_t hs_nodes_off(const struct heapsnap *s)
{
    return s->preds_off + (((uint64_t)s->nedges * 8 + 4095) & ~(uint64_t)4095);
}

/* The arrays of `which` (SP_*) out, dropped or in: 0, or -ENOMEM / -EIO
 * (the arrays then stay as they are: NULL ones are freed with the
 * snapshot, which the caller only frees then). */
int hs_spill_nodes(struct heapsnap *s, enum spill_op op, unsigned which)
{
    size_t nn = s->nnodes;
    uint64_t at = hs_nodes_off(s);
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
int hs_dominators(const struct heapsnap *s, struct heapsnap *own, size_t max_bytes,
                  struct heapsnap_dom **out)
{
    if (s == NULL || out == NULL)
        return -EINVAL;
    if (own != NULL && own->fd < 0)
        own = NULL;
    if (max_bytes != 0 && hs_dom_need(s, own != NULL) > max_bytes)
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
    if (own != NULL && (rc = hs_spill_nodes(own, SPILL_OUT, SP_TYPE | SP_NAME | SP_SELF)) != 0)
        goto fail;
    rc = -ENOMEM;
    dfn = isoprof_malloc(nn * sizeof(uint32_t));
    vert = isoprof_malloc(nn * sizeof(uint32_t));
    anc = isoprof_malloc(nn * sizeof(uint32_t));  /* the DFS parents first */
    semi = isoprof_malloc(nn * sizeof(uint32_t)); /* the DFS's edge cursors first */
    if (dfn == NULL || vert == NULL || anc == NULL || semi == NULL ||
        hs_ec_init(&c, s, EC_DFS_SLOTS) != 0)
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
    hs_ec_free(&c);
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
        hs_ec_init(&c, s, EC_SEQ_SLOTS) != 0)
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
    hs_ec_free(&c);
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
        if ((rc = hs_spill_nodes(own, SPILL_OUT, SP_FIRST)) != 0)
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
    if (own != NULL && (rc = hs_spill_nodes(own, SPILL_IN, SP_SELF)) != 0)
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
        hs_spill_nodes(own, SPILL_DROP, SP_SELF); /* the profile reads them from the file */
    d->nnodes = (uint32_t)nn;
    d->nreached = n;
    d->idom = dfn;
    d->retained = ret;
    d->order = vert;
    *out = d;
    return 0;
fail:
    hs_ec_free(&c);
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
    return hs_dominators(s, NULL, max_bytes, out);
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

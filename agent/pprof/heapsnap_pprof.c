/*
 * heapsnap_pprof.c - the retained profile of a heap snapshot as pprof: paths
 * in the dominator tree chosen best first under the caps, each node's self
 * size charged to its path (heapsnap_pprof); and the daemon's conversion
 * of a stored snapshot within a memory budget (heapsnap_retained). See
 * heapsnap.c for the design.
 */
#include "heapsnap_internal.h"

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
    return nn * 17 + nn / 8 + 16 + (s->fd >= 0 ? hs_ec_bytes(EC_SEQ_SLOTS) : 0);
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
    if (byidom == NULL || w.ltype == NULL || w.lname == NULL ||
        hs_ec_init(&c, s, EC_SEQ_SLOTS) != 0)
        goto done;
    if (spilled && own_s->nfirst == NULL && (rc = hs_spill_nodes(own_s, SPILL_IN, SP_FIRST)) != 0)
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
    hs_ec_free(&c);
    if (c.err) {
        rc = c.err;
        goto done;
    }
    if (own_s != NULL)
        hs_spill_nodes(own_s, SPILL_DROP, SP_FIRST);
    if (spilled && (own_s->ntype == NULL || own_s->nname == NULL) &&
        (rc = hs_spill_nodes(own_s, SPILL_IN, SP_TYPE | SP_NAME)) != 0)
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
                               (off_t)(hs_nodes_off(s) + (uint64_t)nn * 5 +
                                       u0 * sizeof(uint64_t))) != (ssize_t)want) {
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
    hs_ec_free(&c);
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
    rc = hs_dominators(s, s, left, &d);
    if (rc != 0) {
        size_t need = hs_dom_need(s, s->fd >= 0);
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

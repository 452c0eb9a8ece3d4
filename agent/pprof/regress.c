/*
 * regress.c - per-version CPU aggregates and their comparison (regress.h).
 *
 * An aggregate is three interned tables in flat arrays: files (strings),
 * functions (name, file index) and caller edges (two function indexes),
 * each found through an open-addressing hash of indexes (slot = index + 1,
 * 0 empty, linear probing, at most half full). A sample counts once per
 * function and once per edge however deep it recurses: each entry keeps the
 * number of the last sample that counted it (stamp). Folding sorts the
 * functions by cumulative count and keeps the top ones; everything is
 * renumbered and the tables rebuilt, which costs O(n log n) once per max_fns
 * / 8 new functions at worst.
 *
 * The defaults (regress.h, REGRESS_*), for the default schedule: 10 s
 * windows a minute at 10 ms, ~1,000 samples a window (idle ones included). "A function that takes
 * 10 % more of the CPU" is read as work added to one function equal to 10 % of the version's CPU:
 * its cumulative share goes from c to (c + 0.1) / 1.1, a rise of 9.1 x (1 - c) points and a factor
 * of (c + 0.1) / (1.1 c).
 * - min_delta 0.02: two points of CPU. +10 % passes it for any function
 *   under 78 % of the CPU; traffic noise of a point is not a deploy's doing.
 * - min_ratio 1.10: +10 % passes it for a function under 47 % of the CPU
 *   (the function's own frame and the callers near it; the loop at 90 %
 *   above everything is not what a person needs named).
 * - alpha 0.0001 (Holm over every function compared): the daemon judges
 *   a new version again after each window, and each look is a new chance
 *   of a false flag. At 0.001, 1 of 600 simulated same-code redeploys
 *   (half with a callee inlined in the new version only) judged after
 *   each of 60 windows was flagged (a tail function's share
 *   at z 4.8 in the 6th window); at 0.0001, none of 600. Holm's m is the
 *   whole profile (hundreds to thousands of functions), so a flag needs
 *   |z| of about 5. It costs +10 % nothing (flagged at min_samples) and
 *   +5 % in a function at 21 % ~10 % more samples (bench_regress).
 * - min_samples 1,000 non-idle samples a side: one busy window; below it
 *   the z-test's normal approximation is poor for the small shares that
 *   decide Holm's first steps. It sets when +10 % is flagged: the test
 *   alone would flag a new function taking +10 % from ~250 samples, +10 %
 *   in a function at 21 % from ~1,250 (bench_regress, min_samples 1).
 * - caller_z 3: a change of inlining passes the caller check about once in
 *   a thousand; added work in a function under a caller at 30 % passes it
 *   from ~1,000 samples.
 * - min_windows 3: the fewest windows from which a side's spread says
 *   anything (2 degrees of freedom); a baseline that ran a while has many
 *   more, and they carry the estimate. A new version reaches it with its
 *   extra windows, as it reaches min_samples.
 */
#include "regress.h"

#include "pprof_internal.h"

#include "base.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ENC_MAX (256u << 20)
static const uint8_t enc_magic[4] = {'I', 'P', 'R', 'G'};

/* --- hashing (htab.h's hashes, unseeded: the tables live in memory only) --- */

static uint64_t fn_hash(const char *name, size_t n, uint32_t file)
{
    return hmix(hbytes(0, name, n) ^ ((uint64_t)file * 0x9e3779b97f4a7c15ull));
}

static uint64_t edge_hash(uint32_t caller, uint32_t callee)
{
    return hmix(((uint64_t)caller << 32 | callee) + 0x9e3779b97f4a7c15ull);
}

/* The length of s cut to REGRESS_NAME_MAX bytes, never inside a UTF-8
 * sequence. */
static size_t cut_len(const char *s)
{
    size_t n = strnlen(s, REGRESS_NAME_MAX + 1);
    if (n > REGRESS_NAME_MAX) {
        n = REGRESS_NAME_MAX;
        while (n > 0 && ((uint8_t)s[n] & 0xc0) == 0x80)
            n--;
    }
    return n;
}

static int same(const char *held, const char *s, size_t n)
{
    return strncmp(held, s, n) == 0 && held[n] == '\0';
}

/* A slot array of at least twice need entries (a power of two). */
static int slots_alloc(uint32_t **slot, uint32_t *mask, uint32_t need)
{
    uint32_t size = 16;
    while (size < 2 * (uint64_t)need)
        size *= 2;
    uint32_t *s = isoprof_calloc(size, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    isoprof_free(*slot);
    *slot = s;
    *mask = size - 1;
    return 0;
}

static void fn_table_build(struct regress_agg *a)
{
    memset(a->fn_slot, 0, ((size_t)a->fn_mask + 1) * sizeof(uint32_t));
    for (uint32_t i = 0; i < a->nfns; i++) {
        const struct regress_fn *f = &a->fns[i];
        uint64_t h = fn_hash(f->name, strlen(f->name), f->file) & a->fn_mask;
        while (a->fn_slot[h] != 0)
            h = (h + 1) & a->fn_mask;
        a->fn_slot[h] = i + 1;
    }
}

static void file_table_build(struct regress_agg *a)
{
    memset(a->file_slot, 0, ((size_t)a->file_mask + 1) * sizeof(uint32_t));
    for (uint32_t i = 0; i < a->nfiles; i++) {
        uint64_t h = hbytes(0, a->files[i], strlen(a->files[i])) & a->file_mask;
        while (a->file_slot[h] != 0)
            h = (h + 1) & a->file_mask;
        a->file_slot[h] = i + 1;
    }
}

static void edge_table_build(struct regress_agg *a)
{
    memset(a->edge_slot, 0, ((size_t)a->edge_mask + 1) * sizeof(uint32_t));
    for (uint32_t i = 0; i < a->nedges; i++) {
        uint64_t h = edge_hash(a->edges[i].caller, a->edges[i].callee) & a->edge_mask;
        while (a->edge_slot[h] != 0)
            h = (h + 1) & a->edge_mask;
        a->edge_slot[h] = i + 1;
    }
}

/* Room for need functions / files / edges in all. */
static int fns_reserve(struct regress_agg *a, uint64_t need)
{
    if (need <= a->capfns)
        return 0;
    if (need > 2ull * REGRESS_MAX_FNS + 2)
        return -ENOMEM;
    uint32_t cap = a->capfns < 16 ? 16 : a->capfns;
    while (cap < need)
        cap *= 2;
    struct regress_fn *f = isoprof_realloc(a->fns, (size_t)cap * sizeof(*f));
    if (f == NULL)
        return -ENOMEM;
    a->fns = f;
    if (slots_alloc(&a->fn_slot, &a->fn_mask, cap) != 0)
        return -ENOMEM; /* the old table is intact: capfns unchanged */
    a->capfns = cap;
    fn_table_build(a);
    return 0;
}

static int files_reserve(struct regress_agg *a, uint64_t need)
{
    if (need <= a->capfiles)
        return 0;
    if (need > 2ull * REGRESS_MAX_FNS + 2)
        return -ENOMEM;
    uint32_t cap = a->capfiles < 16 ? 16 : a->capfiles;
    while (cap < need)
        cap *= 2;
    char **f = isoprof_realloc(a->files, (size_t)cap * sizeof(*f));
    if (f == NULL)
        return -ENOMEM;
    a->files = f;
    if (slots_alloc(&a->file_slot, &a->file_mask, cap) != 0)
        return -ENOMEM;
    a->capfiles = cap;
    file_table_build(a);
    return 0;
}

static int edges_reserve(struct regress_agg *a, uint64_t need)
{
    if (need <= a->capedges)
        return 0;
    if (need > 4ull * REGRESS_MAX_FNS + 4)
        return -ENOMEM;
    uint32_t cap = a->capedges < 16 ? 16 : a->capedges;
    while (cap < need)
        cap *= 2;
    struct regress_edge *e = isoprof_realloc(a->edges, (size_t)cap * sizeof(*e));
    if (e == NULL)
        return -ENOMEM;
    a->edges = e;
    if (slots_alloc(&a->edge_slot, &a->edge_mask, cap) != 0)
        return -ENOMEM;
    a->capedges = cap;
    edge_table_build(a);
    return 0;
}

static long file_find(const struct regress_agg *a, const char *f, size_t n)
{
    if (a->file_slot == NULL)
        return -1;
    uint64_t h = hbytes(0, f, n) & a->file_mask;
    for (; a->file_slot[h] != 0; h = (h + 1) & a->file_mask)
        if (same(a->files[a->file_slot[h] - 1], f, n))
            return a->file_slot[h] - 1;
    return -1;
}

/* The index of file f[0..n), made if absent; -ENOMEM (as a long) when it
 * could not be made. *made (may be NULL) says whether it was. */
static long file_get(struct regress_agg *a, const char *f, size_t n, int *made)
{
    if (made != NULL)
        *made = 0;
    long i = file_find(a, f, n);
    if (i >= 0)
        return i;
    if (files_reserve(a, (uint64_t)a->nfiles + 1) != 0)
        return -ENOMEM;
    char *s = isoprof_strndup(f, n);
    if (s == NULL)
        return -ENOMEM;
    i = a->nfiles++;
    a->files[i] = s;
    uint64_t h = hbytes(0, f, n) & a->file_mask;
    while (a->file_slot[h] != 0)
        h = (h + 1) & a->file_mask;
    a->file_slot[h] = (uint32_t)i + 1;
    if (made != NULL)
        *made = 1;
    return i;
}

static long fn_find(const struct regress_agg *a, const char *name, size_t n, uint32_t file)
{
    if (a->fn_slot == NULL)
        return -1;
    uint64_t h = fn_hash(name, n, file) & a->fn_mask;
    for (; a->fn_slot[h] != 0; h = (h + 1) & a->fn_mask) {
        const struct regress_fn *f = &a->fns[a->fn_slot[h] - 1];
        if (f->file == file && same(f->name, name, n))
            return a->fn_slot[h] - 1;
    }
    return -1;
}

/* Append a new function (not present); its err starts at fold_max (it may
 * have been folded before). Returns its index or -ENOMEM. */
static long fn_make(struct regress_agg *a, const char *name, size_t n, uint32_t file)
{
    if (fns_reserve(a, (uint64_t)a->nfns + 1) != 0)
        return -ENOMEM;
    char *s = isoprof_strndup(name, n);
    if (s == NULL)
        return -ENOMEM;
    uint32_t i = a->nfns++;
    a->fns[i] = (struct regress_fn){.name = s, .file = file, .err = a->fold_max};
    uint64_t h = fn_hash(name, n, file) & a->fn_mask;
    while (a->fn_slot[h] != 0)
        h = (h + 1) & a->fn_mask;
    a->fn_slot[h] = i + 1;
    return i;
}

static long edge_find(const struct regress_agg *a, uint32_t caller, uint32_t callee)
{
    if (a->edge_slot == NULL)
        return -1;
    uint64_t h = edge_hash(caller, callee) & a->edge_mask;
    for (; a->edge_slot[h] != 0; h = (h + 1) & a->edge_mask) {
        const struct regress_edge *e = &a->edges[a->edge_slot[h] - 1];
        if (e->caller == caller && e->callee == callee)
            return a->edge_slot[h] - 1;
    }
    return -1;
}

static long edge_make(struct regress_agg *a, uint32_t caller, uint32_t callee)
{
    if (edges_reserve(a, (uint64_t)a->nedges + 1) != 0)
        return -ENOMEM;
    uint32_t i = a->nedges++;
    a->edges[i] = (struct regress_edge){.caller = caller, .callee = callee};
    uint64_t h = edge_hash(caller, callee) & a->edge_mask;
    while (a->edge_slot[h] != 0)
        h = (h + 1) & a->edge_mask;
    a->edge_slot[h] = i + 1;
    return i;
}

static uint32_t clamp_max(uint32_t max_fns)
{
    if (max_fns == 0)
        return REGRESS_DEFAULT_MAX_FNS;
    if (max_fns < REGRESS_MIN_FNS)
        return REGRESS_MIN_FNS;
    return max_fns > REGRESS_MAX_FNS ? REGRESS_MAX_FNS : max_fns;
}

int regress_agg_new(uint32_t max_fns, struct regress_agg **out)
{
    struct regress_agg *a = isoprof_calloc(1, sizeof(*a));
    *out = a;
    if (a == NULL)
        return -ENOMEM;
    a->max_fns = clamp_max(max_fns);
    return 0;
}

void regress_agg_free(struct regress_agg *a)
{
    if (a == NULL)
        return;
    for (uint32_t i = 0; i < a->nfns; i++)
        isoprof_free(a->fns[i].name);
    for (uint32_t i = 0; i < a->nfiles; i++)
        isoprof_free(a->files[i]);
    isoprof_free(a->fns);
    isoprof_free(a->files);
    isoprof_free(a->edges);
    isoprof_free(a->fn_slot);
    isoprof_free(a->file_slot);
    isoprof_free(a->edge_slot);
    isoprof_free(a);
}

/* --- folding --- */

/* What folding ranks a function by, copied so that qsort needs no context. */
struct rank {
    uint64_t cum, self;
    const char *name, *file;
    uint32_t idx;
};

static int by_weight(const void *x, const void *y)
{
    const struct rank *a = x, *b = y;
    if (a->cum != b->cum)
        return a->cum > b->cum ? -1 : 1;
    if (a->self != b->self)
        return a->self > b->self ? -1 : 1;
    int c = strcmp(a->name, b->name);
    return c != 0 ? c : strcmp(a->file, b->file);
}

static int by_count(const void *x, const void *y)
{
    const struct regress_edge *a = x, *b = y;
    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    if (a->caller != b->caller)
        return a->caller < b->caller ? -1 : 1;
    return a->callee < b->callee ? -1 : a->callee > b->callee;
}

/* Edges over twice the bound: the least-sampled ones dropped. */
static void edges_trim(struct regress_agg *a)
{
    uint32_t keep = 2 * a->max_fns;
    if (a->nedges <= keep)
        return;
    qsort(a->edges, a->nedges, sizeof(*a->edges), by_count);
    for (uint32_t i = keep; i < a->nedges; i++)
        a->edges_dropped += a->edges[i].count;
    a->nedges = keep;
    edge_table_build(a);
}

/* Keep the keep functions of most samples; fold the rest into "(other)". */
static int fold(struct regress_agg *a, uint32_t keep)
{
    if (a->nfns <= keep)
        return 0;
    uint32_t n = a->nfns;
    struct rank *order = isoprof_malloc((size_t)n * sizeof(*order));
    uint32_t *map = isoprof_malloc((size_t)(n > a->nfiles ? n : a->nfiles) * sizeof(*map));
    struct regress_fn *kept = isoprof_malloc((size_t)keep * sizeof(*kept));
    if (order == NULL || map == NULL || kept == NULL) {
        isoprof_free(order);
        isoprof_free(map);
        isoprof_free(kept);
        return a->err = -ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++) {
        const struct regress_fn *f = &a->fns[i];
        order[i] = (struct rank){f->cum, f->self, f->name, a->files[f->file], i};
    }
    qsort(order, n, sizeof(*order), by_weight);
    for (uint32_t r = 0; r < n; r++) {
        struct regress_fn *f = &a->fns[order[r].idx];
        if (r < keep) {
            map[order[r].idx] = r;
            kept[r] = *f;
            continue;
        }
        map[order[r].idx] = UINT32_MAX;
        a->other_self += f->self;
        a->folded++;
        if (f->cum + f->err > a->fold_max)
            a->fold_max = f->cum + f->err;
        isoprof_free(f->name);
    }
    memcpy(a->fns, kept, (size_t)keep * sizeof(*kept));
    a->nfns = keep;
    isoprof_free(kept);
    isoprof_free(order);

    uint32_t ne = 0;
    for (uint32_t i = 0; i < a->nedges; i++) {
        struct regress_edge e = a->edges[i];
        if (map[e.caller] == UINT32_MAX || map[e.callee] == UINT32_MAX)
            continue;
        e.caller = map[e.caller];
        e.callee = map[e.callee];
        a->edges[ne++] = e;
    }
    a->nedges = ne;

    /* Files no kept function names any more go too. */
    for (uint32_t i = 0; i < a->nfiles; i++)
        map[i] = UINT32_MAX;
    for (uint32_t i = 0; i < a->nfns; i++)
        map[a->fns[i].file] = 0;
    uint32_t nf = 0;
    for (uint32_t i = 0; i < a->nfiles; i++) {
        if (map[i] == UINT32_MAX) {
            isoprof_free(a->files[i]);
            continue;
        }
        map[i] = nf;
        a->files[nf++] = a->files[i];
    }
    a->nfiles = nf;
    for (uint32_t i = 0; i < a->nfns; i++)
        a->fns[i].file = map[a->fns[i].file];
    isoprof_free(map);

    fn_table_build(a);
    file_table_build(a);
    edge_table_build(a);
    return 0;
}

static uint32_t fold_keep(const struct regress_agg *a)
{
    return a->max_fns - a->max_fns / 8;
}

/* --- adding samples --- */

static int is(const char *s, const char *lit)
{
    return strcmp(s, lit) == 0;
}

int regress_agg_add(struct regress_agg *a, const struct regress_frame *frames, size_t n,
                    uint64_t count, uint64_t dt_ns)
{
    if (a->err != 0)
        return a->err;
    if (n > 0 && frames == NULL)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (frames[i].name == NULL)
            return -EINVAL;
    if (count == 0)
        return 0;
    a->samples += count;
    a->timed_ns += dt_ns;
    size_t leaf = 0;
    while (leaf < n && is(frames[leaf].name, "(root)"))
        leaf++;
    if (leaf < n && is(frames[leaf].name, "(idle)")) {
        a->idle += count;
        return 0;
    }
    a->cpu_ns += dt_ns;
    if (leaf == n)
        return 0;

    /* Fold before the stack, never inside it, so that each frame of one
     * sample is counted against the same set of functions. */
    if ((uint64_t)a->nfns + (n - leaf) > a->max_fns && fold(a, fold_keep(a)) != 0)
        return a->err;
    uint64_t stamp = ++a->stamp;
    long prev = -1;
    for (size_t i = leaf; i < n; i++) {
        const char *name = frames[i].name;
        if (is(name, "(root)"))
            continue;
        const char *file = frames[i].file != NULL ? frames[i].file : "";
        size_t fl = cut_len(file), nl = cut_len(name);
        long fi = file_find(a, file, fl);
        long idx = fi >= 0 ? fn_find(a, name, nl, (uint32_t)fi) : -1;
        if (idx < 0 && a->nfns >= a->max_fns) {
            /* A stack deeper than the room left: this frame is (other). */
            if (i == leaf)
                a->other_self += count;
            prev = -1;
            continue;
        }
        if (idx < 0) {
            if (fi < 0 && (fi = file_get(a, file, fl, NULL)) < 0)
                return a->err = -ENOMEM;
            if ((idx = fn_make(a, name, nl, (uint32_t)fi)) < 0)
                return a->err = -ENOMEM;
        }
        struct regress_fn *f = &a->fns[idx];
        if (f->stamp != stamp) {
            f->stamp = stamp;
            f->cum += count;
        }
        if (i == leaf)
            f->self += count;
        if (prev >= 0 && prev != idx) {
            long e = edge_find(a, (uint32_t)idx, (uint32_t)prev);
            if (e < 0 && a->nedges >= 2 * a->max_fns) {
                a->edges_dropped += count;
            } else {
                if (e < 0 && (e = edge_make(a, (uint32_t)idx, (uint32_t)prev)) < 0)
                    return a->err = -ENOMEM;
                if (a->edges[e].stamp != stamp) {
                    a->edges[e].stamp = stamp;
                    a->edges[e].count += count;
                }
            }
        }
        prev = idx;
    }
    return 0;
}

long regress_agg_find(const struct regress_agg *a, const char *name, const char *file)
{
    if (file == NULL)
        file = "";
    long fi = file_find(a, file, cut_len(file));
    return fi < 0 ? -1 : fn_find(a, name, cut_len(name), (uint32_t)fi);
}

/* --- a stored CPU window --- */

int regress_agg_add_pprof(struct regress_agg *a, const void *pprof, size_t len, char **why)
{
    if (a == NULL || (pprof == NULL && len > 0))
        return -EINVAL;
    if (a->err != 0)
        return a->err;
    struct pprof_buf in = {(uint8_t *)pprof, len};
    struct dec d;
    int rc = dec_open(&d, &in, 0, why);
    if (rc != 0)
        return rc;
    const Perftools__Profiles__Profile *p = d.p;
    if (p->n_sample_type != 2 || strcmp(dec_str(&d, p->sample_type[0]->type), "samples") != 0 ||
        strcmp(dec_str(&d, p->sample_type[1]->unit), "nanoseconds") != 0) {
        pprof_set_why(why, "not a CPU profile: %zu sample types, the first %s", p->n_sample_type,
                      dec_str(&d, p->sample_type[0]->type));
        dec_close(&d);
        return ISOPROF_EPROFILE;
    }
    struct regress_frame *fr = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < p->n_sample && rc == 0; i++) {
        const Perftools__Profiles__Sample *sm = p->sample[i];
        if (sm->value[0] <= 0)
            continue;
        size_t n = 0;
        /* leaf first: the first location is the leaf, and within a
         * location the first line the innermost of those inlined */
        for (size_t j = 0; j < sm->n_location_id && rc == 0; j++) {
            const Perftools__Profiles__Location *l = p->location[dec_loc(&d, sm->location_id[j])];
            for (size_t m = 0; m < l->n_line; m++) {
                uint64_t fid = l->line[m]->function_id;
                if (fid == 0)
                    continue;
                if (n == cap && pprof_grow(&fr, &cap, n + 1, sizeof(*fr)) != 0) {
                    rc = -ENOMEM;
                    break;
                }
                const Perftools__Profiles__Function *f = p->function[dec_func(&d, fid)];
                fr[n].name = dec_str(&d, f->name);
                fr[n].file = dec_str(&d, f->filename);
                n++;
            }
        }
        if (rc == 0)
            rc = regress_agg_add(a, fr, n, (uint64_t)sm->value[0],
                                 sm->value[1] > 0 ? (uint64_t)sm->value[1] : 0);
    }
    isoprof_free(fr);
    dec_close(&d);
    return rc;
}

/* --- the call tree an aggregate implies --- */

/* Out-edges of every function: callees[first[f] .. first[f + 1]). */
struct adj {
    uint32_t *first, *edge; /* edge: indexes into a->edges */
};

static int adj_build(const struct regress_agg *a, struct adj *g)
{
    g->first = isoprof_calloc((size_t)a->nfns + 2, sizeof(*g->first));
    g->edge = isoprof_calloc(a->nedges ? a->nedges : 1, sizeof(*g->edge));
    if (g->first == NULL || g->edge == NULL)
        return -ENOMEM;
    for (uint32_t e = 0; e < a->nedges; e++)
        g->first[a->edges[e].caller + 2]++;
    for (uint32_t f = 0; f < a->nfns; f++)
        g->first[f + 2] += g->first[f + 1];
    for (uint32_t e = 0; e < a->nedges; e++)
        g->edge[g->first[a->edges[e].caller + 1]++] = e;
    return 0;
}

struct expand {
    const struct regress_agg *a;
    struct adj g;
    struct pprof_tree *t;
    int set;
    double min; /* a share of a path under this is not drawn further */
    uint32_t path[REGRESS_TREE_DEPTH];
    const char *names[REGRESS_TREE_DEPTH], *files[REGRESS_TREE_DEPTH];
};

/* Add what flows through path[0..depth] (its last function f) as mass
 * samples: f's own part, then each callee's, each in proportion to its
 * counts in f's. Recursion is bounded by REGRESS_TREE_DEPTH; a callee
 * already on the path (recursion) is not drawn again. */
static int expand(struct expand *x, size_t depth, double mass)
{
    const struct regress_agg *a = x->a;
    uint32_t f = x->path[depth];
    const struct regress_fn *fn = &a->fns[f];
    x->names[depth] = fn->name;
    x->files[depth] = a->files[fn->file];
    double cum = fn->cum > 0 ? (double)fn->cum : 1.0;
    double own = mass * (double)fn->self / cum;
    int rc = 0;
    for (uint32_t i = x->g.first[f]; i < x->g.first[f + 1] && rc == 0; i++) {
        const struct regress_edge *e = &a->edges[x->g.edge[i]];
        double part = mass * (double)e->count / cum;
        int on_path = 0;
        for (size_t k = 0; k <= depth && !on_path; k++)
            on_path = x->path[k] == e->callee;
        if (on_path || part < x->min || depth + 1 >= REGRESS_TREE_DEPTH) {
            own += part; /* not drawn further: charged here */
            continue;
        }
        x->path[depth + 1] = e->callee;
        rc = expand(x, depth + 1, part);
    }
    if (rc == 0 && own >= 0.5)
        rc = pprof_tree_add_stack(x->t, x->set, x->names, x->files, depth + 1, llround(own));
    return rc;
}

int regress_agg_tree(const struct regress_agg *a, struct pprof_tree *t, int set)
{
    if (a == NULL || t == NULL || (set != 0 && set != 1))
        return -EINVAL;
    if (a->err != 0)
        return a->err;
    struct expand x = {.a = a, .t = t, .set = set};
    int rc = adj_build(a, &x.g);
    uint64_t busy = regress_agg_busy(a);
    x.min = (double)busy * REGRESS_TREE_MIN;
    if (x.min < 1.0)
        x.min = 1.0;
    /* A function's samples at the bottom of a stack: its count less what
     * its callers hold of it (an estimate where it also recurses). */
    uint64_t *in = rc == 0 ? isoprof_calloc((size_t)a->nfns + 1, sizeof(*in)) : NULL;
    if (rc == 0 && in == NULL)
        rc = -ENOMEM;
    for (uint32_t e = 0; rc == 0 && e < a->nedges; e++)
        if (a->edges[e].caller != a->edges[e].callee)
            in[a->edges[e].callee] += a->edges[e].count;
    for (uint32_t f = 0; rc == 0 && f < a->nfns; f++) {
        if (a->fns[f].cum <= in[f])
            continue;
        x.path[0] = f;
        rc = expand(&x, 0, (double)(a->fns[f].cum - in[f]));
    }
    if (rc == 0 && a->other_self > 0) {
        const char *name = "(other)", *file = "";
        rc = pprof_tree_add_stack(t, set, &name, &file, 1, (int64_t)a->other_self);
    }
    if (rc == 0)
        t->profiles[set]++;
    isoprof_free(in);
    isoprof_free(x.g.first);
    isoprof_free(x.g.edge);
    return rc;
}

/* --- merging --- */

int regress_agg_end_window(struct regress_agg *a)
{
    if (a == NULL)
        return -EINVAL;
    if (a->err != 0)
        return a->err;
    if (a->windows != 0 || a->wbusy != 0)
        return -EINVAL;
    uint64_t n = regress_agg_busy(a);
    if (n == 0)
        return 0;
    a->windows = 1;
    a->wbusy = n;
    for (uint32_t i = 0; i < a->nfns; i++) {
        double x = (double)a->fns[i].cum;
        a->fns[i].sq = x * x / (double)n;
    }
    return 0;
}

int regress_agg_merge(struct regress_agg *dst, const struct regress_agg *src)
{
    if (dst->err != 0)
        return dst->err;
    if (src->err != 0)
        return src->err;
    if (dst == src)
        return -EINVAL;
    uint32_t *map = isoprof_malloc(((size_t)src->nfns + 1) * sizeof(*map));
    if (map == NULL || fns_reserve(dst, (uint64_t)dst->nfns + src->nfns) != 0 ||
        files_reserve(dst, (uint64_t)dst->nfiles + src->nfiles) != 0 ||
        edges_reserve(dst, (uint64_t)dst->nedges + src->nedges) != 0) {
        isoprof_free(map);
        return dst->err = -ENOMEM;
    }
    uint64_t mark = ++dst->stamp;
    for (uint32_t i = 0; i < src->nfns; i++) {
        const struct regress_fn *s = &src->fns[i];
        const char *file = src->files[s->file];
        size_t nl = strlen(s->name);
        long fi = file_get(dst, file, strlen(file), NULL);
        long idx = fi < 0 ? fi : fn_find(dst, s->name, nl, (uint32_t)fi);
        if (fi >= 0 && idx < 0)
            idx = fn_make(dst, s->name, nl, (uint32_t)fi);
        if (idx < 0) {
            isoprof_free(map);
            return dst->err = -ENOMEM;
        }
        struct regress_fn *d = &dst->fns[idx];
        d->cum += s->cum;
        d->self += s->self;
        d->err += s->err;
        d->sq += s->sq;
        d->stamp = mark;
        map[i] = (uint32_t)idx;
    }
    /* What src had folded may have held any of dst's functions it lacks. */
    for (uint32_t i = 0; i < dst->nfns; i++)
        if (dst->fns[i].stamp != mark)
            dst->fns[i].err += src->fold_max;
    for (uint32_t i = 0; i < src->nedges; i++) {
        const struct regress_edge *s = &src->edges[i];
        long e = edge_find(dst, map[s->caller], map[s->callee]);
        if (e < 0 && (e = edge_make(dst, map[s->caller], map[s->callee])) < 0) {
            isoprof_free(map);
            return dst->err = -ENOMEM;
        }
        dst->edges[e].count += s->count;
    }
    isoprof_free(map);
    dst->samples += src->samples;
    dst->idle += src->idle;
    dst->timed_ns += src->timed_ns;
    dst->cpu_ns += src->cpu_ns;
    dst->other_self += src->other_self;
    dst->folded += src->folded;
    dst->fold_max += src->fold_max;
    dst->edges_dropped += src->edges_dropped;
    dst->windows += src->windows;
    dst->wbusy += src->wbusy;
    if (dst->nfns > dst->max_fns && fold(dst, fold_keep(dst)) != 0)
        return dst->err;
    edges_trim(dst);
    return 0;
}

/* --- encoding --- */

static void put_varint(struct isoprof_buf *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    do {
        t[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v != 0)
            t[n] |= 0x80;
        n++;
    } while (v != 0);
    isoprof_buf_append(b, t, n);
}

/* sq in 1/1024ths (it is at most the function's cum: no overflow below
 * 2^54 samples). */
#define SQ_ONE 1024.0
static uint64_t sq_fixed(double sq)
{
    return sq > 0 ? (uint64_t)llround(sq * SQ_ONE) : 0;
}

static void put_str(struct isoprof_buf *b, const char *s)
{
    size_t n = strlen(s);
    put_varint(b, n);
    isoprof_buf_append(b, s, n);
}

int regress_agg_encode(const struct regress_agg *a, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (a->err != 0)
        return a->err;
    struct isoprof_buf b;
    isoprof_buf_init(&b, ENC_MAX);
    isoprof_buf_append(&b, enc_magic, sizeof(enc_magic));
    isoprof_buf_putc(&b, REGRESS_VERSION);
    const uint64_t head[] = {a->samples, a->idle,     a->timed_ns,      a->cpu_ns,  a->other_self,
                             a->folded,  a->fold_max, a->edges_dropped, a->windows, a->wbusy};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(head); i++)
        put_varint(&b, head[i]);
    put_varint(&b, a->nfiles);
    for (uint32_t i = 0; i < a->nfiles; i++)
        put_str(&b, a->files[i]);
    put_varint(&b, a->nfns);
    for (uint32_t i = 0; i < a->nfns; i++) {
        const struct regress_fn *f = &a->fns[i];
        put_str(&b, f->name);
        put_varint(&b, f->file);
        put_varint(&b, f->cum);
        put_varint(&b, f->self);
        put_varint(&b, f->err);
        put_varint(&b, sq_fixed(f->sq));
    }
    put_varint(&b, a->nedges);
    for (uint32_t i = 0; i < a->nedges; i++) {
        put_varint(&b, a->edges[i].caller);
        put_varint(&b, a->edges[i].callee);
        put_varint(&b, a->edges[i].count);
    }
    char *data = NULL;
    int rc = isoprof_buf_take(&b, &data, len);
    *out = (uint8_t *)data;
    return rc;
}

/* A reader over the bytes left; bad is set on the first overrun and stays. */
struct rd {
    const uint8_t *p, *end;
    int bad;
};

static uint64_t get_varint(struct rd *r)
{
    uint64_t v = 0;
    for (unsigned shift = 0; !r->bad; shift += 7) {
        if (r->p >= r->end || shift > 63 || (shift == 63 && *r->p > 1)) {
            r->bad = 1;
            break;
        }
        uint8_t c = *r->p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if ((c & 0x80) == 0)
            return v;
    }
    return 0;
}

/* A string of at most REGRESS_NAME_MAX bytes and no NUL, borrowed from the
 * buffer; NULL when bad. */
static const char *get_str(struct rd *r, size_t *n)
{
    uint64_t len = get_varint(r);
    if (r->bad || len > REGRESS_NAME_MAX || len > (uint64_t)(r->end - r->p) ||
        memchr(r->p, '\0', (size_t)len) != NULL) {
        r->bad = 1;
        return NULL;
    }
    const char *s = (const char *)r->p;
    r->p += len;
    *n = (size_t)len;
    return s;
}

static int decode(struct regress_agg *a, struct rd *r, int version)
{
    uint64_t head[10] = {0};
    size_t nhead = version >= 2 ? 10 : 8;
    for (size_t i = 0; i < nhead; i++)
        head[i] = get_varint(r);
    if (r->bad)
        return ISOPROF_ECORRUPT;
    a->windows = head[8];
    a->wbusy = head[9];
    a->samples = head[0];
    a->idle = head[1];
    a->timed_ns = head[2];
    a->cpu_ns = head[3];
    a->other_self = head[4];
    a->folded = head[5];
    a->fold_max = head[6];
    a->edges_dropped = head[7];
    if (a->idle > a->samples || a->cpu_ns > a->timed_ns || a->other_self > a->samples - a->idle ||
        a->wbusy > a->samples - a->idle || a->windows > a->wbusy)
        return ISOPROF_ECORRUPT;
    uint64_t busy = a->samples - a->idle, selfs = a->other_self;

    /* Each entry takes at least one byte a field: a count larger than the
     * bytes left is refused before anything is allocated for it. */
    uint64_t nfiles = get_varint(r);
    if (r->bad || nfiles > (uint64_t)(r->end - r->p) || nfiles > 2ull * REGRESS_MAX_FNS)
        return ISOPROF_ECORRUPT;
    if (files_reserve(a, nfiles) != 0)
        return -ENOMEM;
    for (uint64_t i = 0; i < nfiles; i++) {
        size_t n = 0;
        const char *s = get_str(r, &n);
        int made = 0;
        if (s == NULL)
            return ISOPROF_ECORRUPT;
        long fi = file_get(a, s, n, &made);
        if (fi < 0)
            return (int)fi;
        if (!made)
            return ISOPROF_ECORRUPT; /* a file twice */
    }
    uint64_t nfns = get_varint(r);
    if (r->bad || nfns > (uint64_t)(r->end - r->p) / 5 || nfns > REGRESS_MAX_FNS)
        return ISOPROF_ECORRUPT;
    if (fns_reserve(a, nfns) != 0)
        return -ENOMEM;
    for (uint64_t i = 0; i < nfns; i++) {
        size_t n = 0;
        const char *s = get_str(r, &n);
        uint64_t file = get_varint(r), cum = get_varint(r), self = get_varint(r);
        uint64_t err = get_varint(r);
        uint64_t sq = version >= 2 ? get_varint(r) : 0;
        /* sq <= cum: each window's x^2 / n is at most its x. */
        if (s == NULL || r->bad || file >= a->nfiles || self > cum || cum > busy ||
            self > busy - selfs || sq > sq_fixed((double)cum) + 1)
            return ISOPROF_ECORRUPT;
        selfs += self;
        if (fn_find(a, s, n, (uint32_t)file) >= 0)
            return ISOPROF_ECORRUPT; /* a function twice */
        long idx = fn_make(a, s, n, (uint32_t)file);
        if (idx < 0)
            return (int)idx;
        a->fns[idx].cum = cum;
        a->fns[idx].self = self;
        a->fns[idx].err = err;
        a->fns[idx].sq = (double)sq / SQ_ONE;
    }
    uint64_t nedges = get_varint(r);
    if (r->bad || nedges > (uint64_t)(r->end - r->p) / 3 || nedges > 4ull * REGRESS_MAX_FNS)
        return ISOPROF_ECORRUPT;
    if (edges_reserve(a, nedges) != 0)
        return -ENOMEM;
    for (uint64_t i = 0; i < nedges; i++) {
        uint64_t caller = get_varint(r), callee = get_varint(r), count = get_varint(r);
        if (r->bad || caller >= a->nfns || callee >= a->nfns || caller == callee ||
            count > a->fns[caller].cum || count > a->fns[callee].cum ||
            edge_find(a, (uint32_t)caller, (uint32_t)callee) >= 0)
            return ISOPROF_ECORRUPT;
        long e = edge_make(a, (uint32_t)caller, (uint32_t)callee);
        if (e < 0)
            return (int)e;
        a->edges[e].count = count;
    }
    return r->p == r->end ? 0 : ISOPROF_ECORRUPT;
}

int regress_agg_decode(const void *buf, size_t len, uint32_t max_fns, struct regress_agg **out)
{
    *out = NULL;
    if (buf == NULL && len > 0)
        return -EINVAL;
    const uint8_t *b = buf;
    if (len < sizeof(enc_magic) + 1 || memcmp(b, enc_magic, sizeof(enc_magic)) != 0)
        return ISOPROF_ECORRUPT;
    int version = b[sizeof(enc_magic)];
    if (version != 1 && version != REGRESS_VERSION)
        return ISOPROF_ESCHEMA;
    struct regress_agg *a;
    if (regress_agg_new(REGRESS_MAX_FNS, &a) != 0)
        return -ENOMEM;
    struct rd r = {b + sizeof(enc_magic) + 1, b + len, 0};
    int rc = decode(a, &r, version);
    if (rc == 0) {
        a->max_fns = clamp_max(max_fns);
        if (a->nfns > a->max_fns)
            rc = fold(a, a->max_fns);
    }
    if (rc != 0) {
        regress_agg_free(a);
        return rc;
    }
    edges_trim(a);
    *out = a;
    return 0;
}

/* --- the comparison --- */

void regress_params_default(struct regress_params *p)
{
    p->alpha = REGRESS_ALPHA;
    p->min_delta = REGRESS_MIN_DELTA;
    p->min_ratio = REGRESS_MIN_RATIO;
    p->min_samples = REGRESS_MIN_SAMPLES;
    p->caller_z = REGRESS_CALLER_Z;
    p->min_windows = REGRESS_MIN_WINDOWS;
}

/* The pooled two-proportion z of x2/n2 against x1/n1 (> 0: grew). */
static double z_pooled(double x1, double n1, double x2, double n2)
{
    double p = (x1 + x2) / (n1 + n2);
    double se = sqrt(p * (1 - p) * (1 / n1 + 1 / n2));
    return se > 0 ? (x2 / n2 - x1 / n1) / se : 0;
}

/* --- dispersion --- */

/* Does a account for its windows: every non-idle sample in a closed one? */
static int accounted(const struct regress_agg *a)
{
    return a->windows > 0 && a->wbusy == regress_agg_busy(a);
}

/* One comparison's constants: the sides, their sizes, which account for
 * windows, and the dispersions' degrees of freedom. */
struct cmp_ctx {
    const struct regress_agg *base, *cand;
    double n1, n2;
    int acc1, acc2;
    double df;
};

/* A side's Pearson chi-square of function idx: its windows' counts around
 * its share there, sum((x - n p)^2 / (n p (1 - p))) = (sq - x p) /
 * (p (1 - p)) with x its samples and p its share. 0 where the side keeps
 * no windows, or the function is absent there or in every sample. */
static double chi2_of(const struct regress_agg *a, int acc, long idx)
{
    if (!acc || idx < 0)
        return 0;
    double n = (double)regress_agg_busy(a), x = (double)a->fns[idx].cum;
    double p = x / n;
    if (p <= 0 || p >= 1)
        return 0;
    double c = (a->fns[idx].sq - x * p) / (p * (1 - p));
    return c > 0 ? c : 0;
}

/* The dispersion of a function (ib in base, ic in cand, -1: absent): its
 * chi-square over both sides per degree of freedom, at least 1; 1 when no
 * side keeps windows. */
static double dispersion(const struct cmp_ctx *c, long ib, long ic)
{
    if (c->df <= 0)
        return 1;
    double d = (chi2_of(c->base, c->acc1, ib) + chi2_of(c->cand, c->acc2, ic)) / c->df;
    return d > 1 ? d : 1;
}

/* The share of what else the CPU did that a function took over going from
 * p1 to p2: 1 - (1 - p2) / (1 - p1). Work added under a function moves it
 * by the same amount for the function and every frame above it. */
static double rest_growth(double p1, double p2)
{
    return p1 < 1 ? 1 - (1 - p2) / (1 - p1) : 0;
}

/* A function's count in a, as a bound: its cum plus what folding may have
 * taken when hi, its cum when not (0 when absent, or fold_max when hi). */
static double count_in(const struct regress_agg *a, long idx, int hi)
{
    if (idx < 0)
        return hi ? (double)a->fold_max : 0;
    return (double)a->fns[idx].cum + (hi ? (double)a->fns[idx].err : 0);
}

static long find_in(const struct regress_agg *a, const struct regress_agg *from, long idx)
{
    const struct regress_fn *f = &from->fns[idx];
    return regress_agg_find(a, f->name, from->files[f->file]);
}

/*
 * Did the main caller of function idx of `to` grow with it, going from
 * `from` to `to`? g is the function's rest_growth. *caller and *cz say
 * which caller was checked and its z. 1: yes, or no caller; 0: no.
 */
static int caller_grew(const struct cmp_ctx *c, const struct regress_agg *from,
                       const struct regress_agg *to, long idx, double g, double caller_z,
                       unsigned depth, const char **caller, double *cz)
{
    long best = -1;
    uint64_t most = 0;
    for (uint32_t i = 0; i < to->nedges; i++) {
        const struct regress_edge *e = &to->edges[i];
        if (e->callee == (uint32_t)idx && e->count > most) {
            most = e->count;
            best = e->caller;
        }
    }
    if (best < 0 || to->fns[idx].cum == 0)
        return 1;
    double n1 = (double)regress_agg_busy(from), n2 = (double)regress_agg_busy(to);
    long fb = find_in(from, to, best);
    /* The conservative side of each bound: the caller's growth is
     * measured at its least. */
    double x1 = count_in(from, fb, 1), x2 = (double)to->fns[best].cum;
    if (x1 > n1)
        x1 = n1;
    double p1 = x1 / n1, p2 = x2 / n2;
    double w = (double)most / (double)to->fns[idx].cum;
    /* The dispersion is the same read either way: base and cand by index. */
    double disp = to == c->cand ? dispersion(c, fb, best) : dispersion(c, best, fb);
    double z = z_pooled(x1, n1, x2, n2) / sqrt(disp), gc = rest_growth(p1, p2);
    if (depth == 0) {
        *caller = to->fns[best].name;
        *cz = z;
    }
    if (z < caller_z || gc < 0.5 * w * g)
        return 0;
    /* A caller that itself appeared may have been inlined in turn. */
    if (p1 <= 0.5 * p2 && depth < 16)
        return caller_grew(c, from, to, best, gc, caller_z, depth + 1, caller, cz);
    return 1;
}

/* One function under test. */
struct trial {
    long ib, ic;   /* indexes in base and cand, -1: absent */
    double x1, x2; /* the counts tested (bounds where folded) */
    double z, disp, p, p_adj;
    int grew;   /* the direction tested */
    int bound;  /* a count is a bound */
    int listed; /* passed every criterion */
};

static int by_p(const void *x, const void *y)
{
    const struct trial *a = *(const struct trial *const *)x;
    const struct trial *b = *(const struct trial *const *)y;
    if (a->p != b->p)
        return a->p < b->p ? -1 : 1;
    return 0;
}

static int by_delta(const void *x, const void *y)
{
    const struct regress_change *a = x, *b = y;
    double da = fabs(a->share_after - a->share_before);
    double db = fabs(b->share_after - b->share_before);
    if (da != db)
        return da > db ? -1 : 1;
    int c = strcmp(a->name, b->name);
    return c != 0 ? c : strcmp(a->file, b->file);
}

/* The z-test of one function, each direction at the bound least
 * favourable to it. */
static void trial_test(struct trial *k, const struct cmp_ctx *c)
{
    const struct regress_agg *base = c->base, *cand = c->cand;
    double n1 = c->n1, n2 = c->n2;
    double x1 = count_in(base, k->ib, 0), x2 = count_in(cand, k->ic, 0);
    k->grew = x2 / n2 > x1 / n1;
    if (k->grew) {
        double hi = count_in(base, k->ib, 1);
        k->bound = hi > x1;
        x1 = hi < n1 ? hi : n1;
    } else {
        double hi = count_in(cand, k->ic, 1);
        k->bound = hi > x2;
        x2 = hi < n2 ? hi : n2;
    }
    k->x1 = x1;
    k->x2 = x2;
    k->disp = dispersion(c, k->ib, k->ic);
    k->z = z_pooled(x1, n1, x2, n2) / sqrt(k->disp);
    if ((k->grew && k->z < 0) || (!k->grew && k->z > 0))
        k->z = 0; /* the bound covers the change */
    k->p = erfc(fabs(k->z) / sqrt(2.0));
}

/* Fill ch from k; the caller check decides F_INLINED. */
static void change_fill(struct regress_change *ch, const struct trial *k, const struct cmp_ctx *c,
                        const struct regress_params *prm)
{
    const struct regress_agg *base = c->base, *cand = c->cand;
    double n1 = c->n1, n2 = c->n2;
    const struct regress_agg *at = k->ib >= 0 ? base : cand;
    const struct regress_fn *f = &at->fns[k->ib >= 0 ? k->ib : k->ic];
    double s1 = k->x1 / n1, s2 = k->x2 / n2;
    *ch = (struct regress_change){
        .name = f->name,
        .file = at->files[f->file],
        .kind = k->grew ? REGRESS_GROWN : REGRESS_SHRUNK,
        .flags = k->bound ? REGRESS_F_BOUND : 0,
        .before = (uint64_t)k->x1,
        .after = (uint64_t)k->x2,
        .self_before = k->ib >= 0 ? base->fns[k->ib].self : 0,
        .self_after = k->ic >= 0 ? cand->fns[k->ic].self : 0,
        .share_before = s1,
        .share_after = s2,
        .z = k->z,
        .dispersion = k->disp,
        .p = k->p,
        .p_adj = k->p_adj,
    };
    if (is(ch->name, "(program)") && ch->file[0] == '\0')
        ch->flags |= REGRESS_F_VM;
    int moved;
    if (k->grew) {
        moved = caller_grew(c, base, cand, k->ic, rest_growth(s1, s2), prm->caller_z, 0,
                            &ch->caller, &ch->caller_z);
    } else {
        /* A shrink is a growth read backwards: from cand to base. */
        moved = caller_grew(c, cand, base, k->ib, rest_growth(s2, s1), prm->caller_z, 0,
                            &ch->caller, &ch->caller_z);
        ch->caller_z = -ch->caller_z;
    }
    if (!moved)
        ch->flags |= REGRESS_F_INLINED;
}

int regress_compare(const struct regress_agg *base, const struct regress_agg *cand,
                    const struct regress_params *prm, struct regress_result *out)
{
    memset(out, 0, sizeof(*out));
    if (base == NULL || cand == NULL || base->err != 0 || cand->err != 0)
        return -EINVAL;
    struct regress_params def;
    if (prm == NULL) {
        regress_params_default(&def);
        prm = &def;
    }
    out->busy_before = regress_agg_busy(base);
    out->busy_after = regress_agg_busy(cand);
    out->cpu_before = base->timed_ns ? (double)base->cpu_ns / (double)base->timed_ns : -1;
    out->cpu_after = cand->timed_ns ? (double)cand->cpu_ns / (double)cand->timed_ns : -1;
    uint64_t least = prm->min_samples > 0 ? prm->min_samples : 1;
    if (out->busy_before < least || out->busy_after < least)
        return 0;
    struct cmp_ctx c = {.base = base,
                        .cand = cand,
                        .n1 = (double)out->busy_before,
                        .n2 = (double)out->busy_after,
                        .acc1 = accounted(base),
                        .acc2 = accounted(cand)};
    out->windows_before = c.acc1 ? base->windows : 0;
    out->windows_after = c.acc2 ? cand->windows : 0;
    if ((c.acc1 && base->windows < prm->min_windows) ||
        (c.acc2 && cand->windows < prm->min_windows))
        return 0;
    out->judged = 1;
    c.df = (double)(c.acc1 ? base->windows - 1 : 0) + (double)(c.acc2 ? cand->windows - 1 : 0);
    if (c.df > UINT32_MAX)
        c.df = UINT32_MAX;
    out->df = (uint32_t)c.df;
    double n1 = c.n1, n2 = c.n2;

    size_t cap = (size_t)base->nfns + cand->nfns + 1;
    struct trial *t = isoprof_malloc(cap * sizeof(*t));
    struct trial **byp = isoprof_malloc(cap * sizeof(*byp));
    if (t == NULL || byp == NULL) {
        isoprof_free(t);
        isoprof_free(byp);
        return -ENOMEM;
    }
    size_t m = 0;
    for (uint32_t i = 0; i < base->nfns; i++)
        t[m++] = (struct trial){.ib = i, .ic = find_in(cand, base, i)};
    for (uint32_t i = 0; i < cand->nfns; i++)
        if (find_in(base, cand, i) < 0)
            t[m++] = (struct trial){.ib = -1, .ic = i};
    for (size_t i = 0; i < m; i++) {
        trial_test(&t[i], &c);
        byp[i] = &t[i];
    }
    out->tested = (uint32_t)m;
    /* Holm: the i-th smallest p times (m - i), made monotone. */
    qsort(byp, m, sizeof(*byp), by_p);
    double run = 0;
    for (size_t i = 0; i < m; i++) {
        double adj = byp[i]->p * (double)(m - i);
        if (adj > 1)
            adj = 1;
        if (adj > run)
            run = adj;
        byp[i]->p_adj = run;
    }
    isoprof_free(byp);

    size_t ng = 0, ns = 0;
    for (size_t i = 0; i < m; i++) {
        struct trial *k = &t[i];
        double s1 = k->x1 / n1, s2 = k->x2 / n2;
        double lo = k->grew ? s1 : s2, hi = k->grew ? s2 : s1;
        if (k->z == 0 || k->p_adj > prm->alpha || hi - lo < prm->min_delta ||
            (lo > 0 && hi / lo < prm->min_ratio))
            continue;
        k->listed = 1;
        if (k->grew)
            ng++;
        else
            ns++;
    }
    out->grown = isoprof_calloc(ng + 1, sizeof(*out->grown));
    out->shrunk = isoprof_calloc(ns + 1, sizeof(*out->shrunk));
    if (out->grown == NULL || out->shrunk == NULL) {
        isoprof_free(t);
        regress_result_free(out);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m; i++) {
        struct trial *k = &t[i];
        if (!k->listed)
            continue;
        struct regress_change *ch =
            k->grew ? &out->grown[out->ngrown++] : &out->shrunk[out->nshrunk++];
        change_fill(ch, k, &c, prm);
        if (k->grew && !(ch->flags & (REGRESS_F_INLINED | REGRESS_F_VM)))
            out->regressions++;
    }
    isoprof_free(t);
    qsort(out->grown, out->ngrown, sizeof(*out->grown), by_delta);
    qsort(out->shrunk, out->nshrunk, sizeof(*out->shrunk), by_delta);
    return 0;
}

void regress_result_free(struct regress_result *r)
{
    isoprof_free(r->grown);
    isoprof_free(r->shrunk);
    memset(r, 0, sizeof(*r));
}

/*
 * tree.c - pprof_tree_add: decoded profiles (merge.c) summed into one call
 * tree of functions, for the flame graph and the text formats of the CLI;
 * pprof_tree_add_stack: one stack at a time, for trees made from something
 * other than a pprof (a per-version aggregate, regress.h).
 */
#include "pprof_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

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
    if (t->nfns >= NONE - 1 || pprof_grow(&t->fns, &tp->fcap, t->nfns + 1, sizeof(*t->fns)))
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
    if (pprof_grow(&t->nodes, &tp->ncap, t->nnodes + 1, sizeof(*t->nodes)) ||
        ht_add(&tp->nh, h, (uint32_t)t->nnodes)) {
        *err = -ENOMEM;
        return NONE;
    }
    i = (uint32_t)t->nnodes++;
    t->nodes[i] =
        (struct pprof_tree_node){.fn = fn, .parent = parent, .next = t->nodes[parent].child};
    t->nodes[parent].child = i;
    return i;
}

/* The lookup tables and the root of a tree that starts zeroed. */
static int tree_init(struct pprof_tree *t)
{
    if (t->priv == NULL) {
        struct tree_priv *tp = isoprof_calloc(1, sizeof(*tp));
        if (tp == NULL)
            return -ENOMEM;
        tp->seed = hmix((uint64_t)(uintptr_t)tp);
        t->priv = tp;
    }
    if (t->nnodes == 0) {
        if (pprof_grow(&t->nodes, &((struct tree_priv *)t->priv)->ncap, 1, sizeof(*t->nodes)))
            return -ENOMEM;
        t->nodes[0] = (struct pprof_tree_node){.fn = PPROF_TREE_ROOT};
        t->nnodes = 1;
    }
    return 0;
}

int pprof_tree_add_stack(struct pprof_tree *t, int set, const char *const *names,
                         const char *const *files, size_t n, int64_t value)
{
    int rc;
    if (t == NULL || (set != 0 && set != 1) || (n > 0 && (names == NULL || files == NULL)))
        return -EINVAL;
    if ((rc = tree_init(t)) != 0)
        return rc;
    if (t->type == NULL) {
        t->type = isoprof_strdup("samples");
        t->unit = isoprof_strdup("count");
        if (t->type == NULL || t->unit == NULL)
            return -ENOMEM;
    } else if (strcmp(t->type, "samples") != 0 || strcmp(t->unit, "count") != 0) {
        return -EINVAL;
    }
    if (value <= 0)
        return 0;
    uint32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t fn = tree_fn(t, names[i] ? names[i] : "", files[i] ? files[i] : "", 0);
        if (fn == NONE)
            return -ENOMEM;
        uint32_t child = tree_child(t, node, fn, &rc);
        if (child == NONE)
            return rc;
        node = child;
        t->nodes[node].total[set] = pprof_sat_add(t->nodes[node].total[set], value);
    }
    t->nodes[node].self[set] = pprof_sat_add(t->nodes[node].self[set], value);
    t->nodes[0].total[set] = pprof_sat_add(t->nodes[0].total[set], value);
    return 0;
}

int pprof_tree_add(struct pprof_tree *t, const struct pprof_buf *in, int set, char **why)
{
    struct dec d;
    uint32_t *fmap = NULL;
    int rc;
    if (t == NULL || in == NULL || (set != 0 && set != 1))
        return -EINVAL;
    if ((rc = tree_init(t)) != 0)
        return rc;
    size_t k = t->profiles[0] + t->profiles[1];
    if ((rc = dec_open(&d, in, k, why)) != 0)
        return rc;
    const Perftools__Profiles__Profile *p = d.p;
    size_t vi = p->n_sample_type - 1;
    const char *type = dec_str(&d, p->sample_type[vi]->type);
    const char *unit = dec_str(&d, p->sample_type[vi]->unit);
    if (t->type == NULL) {
        t->type = isoprof_strdup(type);
        t->unit = isoprof_strdup(unit);
        if (t->type == NULL || t->unit == NULL) {
            rc = -ENOMEM;
            goto out;
        }
        /* a CPU profile's period is in the value's unit: samples = value / period */
        if (p->period_type && p->period > 0 && strcmp(dec_str(&d, p->period_type->unit), unit) == 0)
            t->period = p->period;
    } else if (strcmp(t->type, type) != 0 || strcmp(t->unit, unit) != 0) {
        pprof_set_why(why,
                      "profile %zu holds %s/%s, the others %s/%s: cpu and heap windows do not mix",
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
        if ((fmap[i] = tree_fn(t, dec_str(&d, f->name), dec_str(&d, f->filename), f->start_line)) ==
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
                t->nodes[node].total[set] = pprof_sat_add(t->nodes[node].total[set], v);
            }
        }
        t->nodes[node].self[set] = pprof_sat_add(t->nodes[node].self[set], v);
        t->nodes[0].total[set] = pprof_sat_add(t->nodes[0].total[set], v);
    }
    if (p->time_nanos > 0) {
        int64_t end = pprof_sat_add(p->time_nanos, p->duration_nanos);
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

/*
 * merge.c - pprof decoded (protobuf-c, our allocator) and checked: every id
 * and string index resolves; pprof_merge feeds the decoded inputs to the
 * builder (pprof.c), pprof_top sums flat and cumulative values per function.
 */
#include "pprof_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- decoding (merge, top) --- */

static void *pb_alloc(void *data, size_t n)
{
    void *p = isoprof_malloc(n ? n : 1);
    if (p == NULL)
        ((struct pb_mem *)data)->oom = true;
    return p;
}

static void pb_free(void *data, void *ptr)
{
    (void)data;
    isoprof_free(ptr);
}

static bool dfid_eq(const void *ctx, uint32_t idx, const void *key)
{
    return ((const struct dec *)ctx)->p->function[idx]->id == *(const uint64_t *)key;
}

static bool dlid_eq(const void *ctx, uint32_t idx, const void *key)
{
    return ((const struct dec *)ctx)->p->location[idx]->id == *(const uint64_t *)key;
}

uint32_t dec_func(const struct dec *d, uint64_t id)
{
    return ht_find(&d->fidx, (uint32_t)hmix(id), dfid_eq, d, &id);
}

uint32_t dec_loc(const struct dec *d, uint64_t id)
{
    return ht_find(&d->lidx, (uint32_t)hmix(id), dlid_eq, d, &id);
}

void dec_close(struct dec *d)
{
    if (d->p)
        perftools__profiles__profile__free_unpacked(d->p, &d->mem.a);
    ht_free(&d->fidx);
    ht_free(&d->lidx);
    memset(d, 0, sizeof(*d));
}

#define DEC_FAIL(...)                                                                              \
    do {                                                                                           \
        pprof_set_why(why, __VA_ARGS__);                                                           \
        rc = ISOPROF_EPROFILE;                                                                     \
        goto fail;                                                                                 \
    } while (0)

int dec_open(struct dec *d, const struct pprof_buf *in, size_t k, char **why)
{
    int rc;
    memset(d, 0, sizeof(*d));
    if (in == NULL || (in->data == NULL && in->len))
        return -EINVAL;
    d->mem.a = (ProtobufCAllocator){pb_alloc, pb_free, &d->mem};
    d->p = perftools__profiles__profile__unpack(&d->mem.a, in->len, in->data);
    if (d->p == NULL) {
        if (d->mem.oom)
            return -ENOMEM;
        pprof_set_why(why, "profile %zu: not a pprof Profile (%zu bytes)", k, in->len);
        return ISOPROF_EPROTOBUF;
    }
    const Perftools__Profiles__Profile *p = d->p;
    size_t ns = p->n_string_table;
#define SOK(i) ((i) >= 0 && (uint64_t)(i) < ns)
    if (ns == 0 || p->string_table[0][0] != '\0')
        DEC_FAIL("profile %zu: string_table[0] is not \"\"", k);
    if (p->n_sample_type == 0)
        DEC_FAIL("profile %zu: no sample_type", k);
    for (size_t i = 0; i < p->n_sample_type; i++)
        if (!SOK(p->sample_type[i]->type) || !SOK(p->sample_type[i]->unit))
            DEC_FAIL("profile %zu: sample_type[%zu] has a bad string index", k, i);
    if (p->period_type && (!SOK(p->period_type->type) || !SOK(p->period_type->unit)))
        DEC_FAIL("profile %zu: period_type has a bad string index", k);
    for (size_t i = 0; i < p->n_comment; i++)
        if (!SOK(p->comment[i]))
            DEC_FAIL("profile %zu: comment[%zu] has a bad string index", k, i);
    if (p->n_function >= UINT32_MAX || p->n_location >= UINT32_MAX)
        DEC_FAIL("profile %zu: too many functions or locations", k);
    for (size_t i = 0; i < p->n_function; i++) {
        const Perftools__Profiles__Function *f = p->function[i];
        if (f->id == 0 || !SOK(f->name) || !SOK(f->system_name) || !SOK(f->filename))
            DEC_FAIL("profile %zu: function[%zu] has id 0 or a bad string index", k, i);
        if (dec_func(d, f->id) != NONE)
            DEC_FAIL("profile %zu: duplicate function id %" PRIu64, k, f->id);
        if ((rc = ht_add(&d->fidx, (uint32_t)hmix(f->id), (uint32_t)i)) != 0)
            goto fail;
    }
    for (size_t i = 0; i < p->n_location; i++) {
        const Perftools__Profiles__Location *l = p->location[i];
        if (l->id == 0)
            DEC_FAIL("profile %zu: location[%zu] has id 0", k, i);
        if (dec_loc(d, l->id) != NONE)
            DEC_FAIL("profile %zu: duplicate location id %" PRIu64, k, l->id);
        for (size_t j = 0; j < l->n_line; j++)
            if (l->line[j]->function_id != 0 && dec_func(d, l->line[j]->function_id) == NONE)
                DEC_FAIL("profile %zu: location %" PRIu64 " names unknown function %" PRIu64, k,
                         l->id, l->line[j]->function_id);
        if ((rc = ht_add(&d->lidx, (uint32_t)hmix(l->id), (uint32_t)i)) != 0)
            goto fail;
    }
    for (size_t i = 0; i < p->n_sample; i++) {
        const Perftools__Profiles__Sample *s = p->sample[i];
        if (s->n_value != p->n_sample_type)
            DEC_FAIL("profile %zu: sample[%zu] has %zu values for %zu sample types", k, i,
                     s->n_value, p->n_sample_type);
        for (size_t j = 0; j < s->n_location_id; j++)
            if (dec_loc(d, s->location_id[j]) == NONE)
                DEC_FAIL("profile %zu: sample[%zu] names unknown location %" PRIu64, k, i,
                         s->location_id[j]);
    }
#undef SOK
    return 0;
fail:
    dec_close(d);
    return rc;
}

const char *dec_str(const struct dec *d, int64_t i)
{
    return d->p->string_table[i];
}

int pprof_merge(const struct pprof_buf *in, size_t n, struct pprof_buf *out, char **why)
{
    struct bld b;
    struct dec d;
    struct bmeta m;
    uint64_t *fmap = NULL, *lmap = NULL;
    struct bline *lines = NULL;
    size_t lcap = 0;
    int64_t t0 = 0, t1 = 0;
    int rc;
    if (in == NULL || n == 0 || out == NULL)
        return -EINVAL;
    memset(&m, 0, sizeof(m));
    memset(&b, 0, sizeof(b));
    for (size_t k = 0; k < n; k++) {
        if ((rc = dec_open(&d, &in[k], k, why)) != 0)
            goto fail_open;
        const Perftools__Profiles__Profile *p = d.p;
        if (k == 0) {
            if (p->n_sample_type > BMETA_MAX_TYPES) {
                pprof_set_why(why, "profile 0: %zu sample types, at most %d supported",
                              p->n_sample_type, BMETA_MAX_TYPES);
                rc = ISOPROF_EPROFILE;
                goto fail;
            }
            if ((rc = bld_init(&b, p->n_sample_type)) != 0)
                goto fail;
            for (size_t i = 0; i < p->n_sample_type; i++) {
                m.st_type[i] = bld_cstr(&b, dec_str(&d, p->sample_type[i]->type));
                m.st_unit[i] = bld_cstr(&b, dec_str(&d, p->sample_type[i]->unit));
            }
            if (p->period_type) {
                m.pt_type = bld_cstr(&b, dec_str(&d, p->period_type->type));
                m.pt_unit = bld_cstr(&b, dec_str(&d, p->period_type->unit));
            }
            m.period = p->period;
        } else {
            bool same = p->n_sample_type == b.nv;
            for (size_t i = 0; same && i < p->n_sample_type; i++)
                same = strcmp(dec_str(&d, p->sample_type[i]->type),
                              b.sb.data + b.soff[m.st_type[i]]) == 0 &&
                       strcmp(dec_str(&d, p->sample_type[i]->unit),
                              b.sb.data + b.soff[m.st_unit[i]]) == 0;
            if (!same) {
                pprof_set_why(why, "profile %zu: sample types differ from profile 0's (%s/%s...)",
                              k, b.sb.data + b.soff[m.st_type[0]],
                              b.sb.data + b.soff[m.st_unit[0]]);
                rc = ISOPROF_EPROFILE;
                goto fail;
            }
        }
        if (p->time_nanos != 0) {
            int64_t end = pprof_sat_add(p->time_nanos, p->duration_nanos);
            if (t0 == 0 || p->time_nanos < t0)
                t0 = p->time_nanos;
            if (end > t1)
                t1 = end;
        }
        for (size_t i = 0; i < p->n_comment; i++)
            bld_comment(&b, dec_str(&d, p->comment[i]));
        fmap = isoprof_calloc(p->n_function + 1, sizeof(*fmap));
        lmap = isoprof_calloc(p->n_location + 1, sizeof(*lmap));
        if (fmap == NULL || lmap == NULL) {
            rc = -ENOMEM;
            goto fail;
        }
        for (size_t i = 0; i < p->n_function; i++) {
            const Perftools__Profiles__Function *f = p->function[i];
            fmap[i] = bld_func(&b, bld_cstr(&b, dec_str(&d, f->name)),
                               bld_cstr(&b, dec_str(&d, f->system_name)),
                               bld_cstr(&b, dec_str(&d, f->filename)), f->start_line);
        }
        for (size_t i = 0; i < p->n_location; i++) {
            const Perftools__Profiles__Location *l = p->location[i];
            if (pprof_grow(&lines, &lcap, l->n_line + 1, sizeof(*lines))) {
                rc = -ENOMEM;
                goto fail;
            }
            for (size_t j = 0; j < l->n_line; j++) {
                uint64_t fid = l->line[j]->function_id;
                lines[j].fn = fid ? fmap[dec_func(&d, fid)] : 0;
                lines[j].line = l->line[j]->line;
                lines[j].col = l->line[j]->column;
            }
            lmap[i] = bld_loc(&b, lines, l->n_line);
        }
        for (size_t i = 0; i < p->n_sample && !b.err; i++) {
            const Perftools__Profiles__Sample *s = p->sample[i];
            uint32_t st = 0;
            for (size_t j = s->n_location_id; j-- > 0;)
                st = bld_stack(&b, st, lmap[dec_loc(&d, s->location_id[j])]);
            bld_add(&b, st, s->value);
        }
        isoprof_free(fmap);
        isoprof_free(lmap);
        fmap = lmap = NULL;
        dec_close(&d);
        if (b.err) {
            rc = b.err;
            goto fail_open;
        }
    }
    m.time = t0;
    m.duration = t1 > t0 ? t1 - t0 : 0;
    rc = bld_finish(&b, &m, out);
    goto fail_open;
fail:
    dec_close(&d);
fail_open:
    isoprof_free(fmap);
    isoprof_free(lmap);
    isoprof_free(lines);
    bld_free(&b);
    return rc;
}

/* --- top --- */

struct trow {
    const char *name, *file;
    int64_t line, flat, cum;
    size_t mark; /* last sample (index + 1) that counted this row in cum */
};

struct tkey {
    const char *name, *file;
};

struct tctx {
    struct trow *rows;
};

static bool row_eq(const void *ctx, uint32_t idx, const void *key)
{
    const struct trow *r = &((const struct tctx *)ctx)->rows[idx];
    const struct tkey *k = key;
    return strcmp(r->name, k->name) == 0 && strcmp(r->file, k->file) == 0;
}

static int row_cmp(const void *a, const void *b)
{
    const struct pprof_top_row *x = a, *y = b;
    if (x->flat != y->flat)
        return x->flat > y->flat ? -1 : 1;
    if (x->cum != y->cum)
        return x->cum > y->cum ? -1 : 1;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->file, y->file);
}

int pprof_top(const struct pprof_buf *in, int sample_index, struct pprof_top *out)
{
    struct dec d;
    struct htab rh = {0};
    struct tctx tc = {NULL};
    uint32_t *frow = NULL;
    size_t nrows = 0, rcap = 0;
    struct pprof_top t = {0};
    int rc;
    if (out == NULL)
        return -EINVAL;
    if ((rc = dec_open(&d, in, 0, NULL)) != 0)
        return rc;
    const Perftools__Profiles__Profile *p = d.p;
    size_t vi = sample_index < 0 ? p->n_sample_type - 1 : (size_t)sample_index;
    if (vi >= p->n_sample_type) {
        rc = -EINVAL;
        goto out;
    }
    uint64_t seed = hmix((uint64_t)(uintptr_t)&d);
    /* function index -> row */
    if ((frow = isoprof_malloc((p->n_function + 1) * sizeof(*frow))) == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < p->n_function; i++) {
        const Perftools__Profiles__Function *f = p->function[i];
        struct tkey k = {dec_str(&d, f->name), dec_str(&d, f->filename)};
        uint32_t h = (uint32_t)(hbytes(seed, k.name, strlen(k.name)) ^
                                hmix(hbytes(seed, k.file, strlen(k.file))));
        uint32_t r = ht_find(&rh, h, row_eq, &tc, &k);
        if (r == NONE) {
            if (pprof_grow(&tc.rows, &rcap, nrows + 1, sizeof(*tc.rows)) ||
                ht_add(&rh, h, (uint32_t)nrows)) {
                rc = -ENOMEM;
                goto out;
            }
            tc.rows[nrows] = (struct trow){.name = k.name, .file = k.file, .line = f->start_line};
            r = (uint32_t)nrows++;
        } else if (tc.rows[r].line <= 0) {
            tc.rows[r].line = f->start_line;
        }
        frow[i] = r;
    }
    for (size_t i = 0; i < p->n_location; i++)
        for (size_t j = 0; j < p->location[i]->n_line; j++) {
            const Perftools__Profiles__Line *l = p->location[i]->line[j];
            if (l->function_id == 0)
                continue;
            struct trow *r = &tc.rows[frow[dec_func(&d, l->function_id)]];
            if (r->line <= 0)
                r->line = l->line;
        }
    for (size_t i = 0; i < p->n_sample; i++) {
        const Perftools__Profiles__Sample *s = p->sample[i];
        int64_t v = s->value[vi];
        t.total = pprof_sat_add(t.total, v);
        for (size_t j = 0; j < s->n_location_id; j++) {
            const Perftools__Profiles__Location *l = p->location[dec_loc(&d, s->location_id[j])];
            for (size_t m = 0; m < l->n_line; m++) {
                uint64_t fid = l->line[m]->function_id;
                if (fid == 0)
                    continue;
                struct trow *r = &tc.rows[frow[dec_func(&d, fid)]];
                /* line[0] of the leaf location is the innermost frame */
                if (j == 0 && m == 0)
                    r->flat = pprof_sat_add(r->flat, v);
                if (r->mark != i + 1) {
                    r->mark = i + 1;
                    r->cum = pprof_sat_add(r->cum, v);
                }
            }
        }
    }
    size_t nout = 0;
    for (size_t i = 0; i < nrows; i++)
        if (tc.rows[i].flat || tc.rows[i].cum)
            nout++;
    t.rows = isoprof_calloc(nout ? nout : 1, sizeof(*t.rows));
    t.type = isoprof_strdup(dec_str(&d, p->sample_type[vi]->type));
    t.unit = isoprof_strdup(dec_str(&d, p->sample_type[vi]->unit));
    if (t.rows == NULL || t.type == NULL || t.unit == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < nrows; i++) {
        const struct trow *r = &tc.rows[i];
        if (!r->flat && !r->cum)
            continue;
        struct pprof_top_row *o = &t.rows[t.n];
        o->name = isoprof_strdup(r->name);
        o->file = isoprof_strdup(r->file);
        o->line = r->line > 0 ? r->line : 0;
        o->flat = r->flat;
        o->cum = r->cum;
        t.n++;
        if (o->name == NULL || o->file == NULL) {
            rc = -ENOMEM;
            goto out;
        }
    }
    qsort(t.rows, t.n, sizeof(*t.rows), row_cmp);
    *out = t;
    memset(&t, 0, sizeof(t));
out:
    pprof_top_free(&t);
    isoprof_free(frow);
    isoprof_free(tc.rows);
    ht_free(&rh);
    dec_close(&d);
    return rc;
}

void pprof_top_free(struct pprof_top *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n; i++) {
        isoprof_free(t->rows[i].name);
        isoprof_free(t->rows[i].file);
    }
    isoprof_free(t->rows);
    isoprof_free(t->type);
    isoprof_free(t->unit);
    memset(t, 0, sizeof(*t));
}

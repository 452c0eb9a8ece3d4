/*
 * memacc.c - the memory polls that fell inside one window (memacc.h).
 */
#include "memacc.h"

#include <stdlib.h>
#include <string.h>

void memacc_reset(struct memacc *m)
{
    m->n = 0;
    m->step = 1;
    m->skip = 0;
    m->min = m->max = m->last = 0;
}

void memacc_add(struct memacc *m, uint64_t bytes)
{
    if (m->step == 0)
        memacc_reset(m);
    if (m->min == 0 || bytes < m->min)
        m->min = bytes;
    if (bytes > m->max)
        m->max = bytes;
    m->last = bytes;
    if (m->skip > 0) {
        m->skip--;
        return;
    }
    if (m->n == MEMACC_MAX) {
        /* Keep every other value and record half as often from now on. */
        for (uint32_t i = 0; i < MEMACC_MAX / 2; i++)
            m->kib[i] = m->kib[2 * i + 1];
        m->n = MEMACC_MAX / 2;
        m->step *= 2;
    }
    uint64_t kib = (bytes + 1023) / 1024;
    m->kib[m->n++] = kib > UINT32_MAX ? UINT32_MAX : (uint32_t)kib;
    m->skip = m->step - 1;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void memacc_figures(const struct memacc *m, struct store_mem *out)
{
    memset(out, 0, sizeof(*out));
    if (m->step == 0 || m->n == 0)
        return;
    uint32_t v[MEMACC_MAX];
    memcpy(v, m->kib, m->n * sizeof(v[0]));
    qsort(v, m->n, sizeof(v[0]), cmp_u32);
    /* The nearest-rank P999: the smallest value with >= 99.9 % at or below. */
    uint32_t rank = (uint32_t)(((uint64_t)m->n * 999 + 999) / 1000);
    uint64_t p = (uint64_t)v[rank - 1] * 1024;
    out->min = m->min;
    out->max = m->max;
    out->last = m->last;
    out->p999 = p > m->max ? m->max : p < m->min ? m->min : p;
}

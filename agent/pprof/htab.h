/*
 * htab.h - the hash table and hashes the pprof writers intern with
 * (pprof.c's strings, functions, locations and stacks; heapsnap.c's frames
 * and paths). Internal to agent/pprof; static inline, no state.
 *
 * Open addressing, linear probing, at most half full. A slot holds an
 * entry's 32-bit hash and its index + 1 (0: empty); the entries live in
 * the caller's arrays, and the caller compares the entry behind a matching
 * hash (ht_find's eq, or a probe loop of its own over s and mask).
 *
 * Seeds come from an address, so that collisions cannot be precomputed by
 * whoever writes names into a target (ASLR varies them).
 */
#ifndef ISOPROF_PPROF_HTAB_H
#define ISOPROF_PPROF_HTAB_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base.h"

#define HT_NONE UINT32_MAX /* ht_find: no such entry */

/* A 64-bit finalizer (murmur3's fmix64). */
static inline uint64_t hmix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* The bytes p[0..n) under seed, eight at a time. */
static inline uint64_t hbytes(uint64_t seed, const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = hmix(seed ^ (n * 0x9e3779b97f4a7c15ULL));
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = hmix(h ^ w) * 0x9e3779b97f4a7c15ULL;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    return hmix(h ^ w);
}

struct hslot {
    uint32_t hash;
    uint32_t idx1;
};

struct htab {
    struct hslot *s;
    size_t mask; /* capacity - 1; meaningless while s == NULL */
    size_t n;
};

typedef bool (*ht_eq_fn)(const void *ctx, uint32_t idx, const void *key);

/* The index of the entry of hash h that eq says is key, or HT_NONE. */
static inline uint32_t ht_find(const struct htab *t, uint32_t h, ht_eq_fn eq, const void *ctx,
                               const void *key)
{
    if (t->s == NULL)
        return HT_NONE;
    for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
        const struct hslot *sl = &t->s[i];
        if (sl->idx1 == 0)
            return HT_NONE;
        if (sl->hash == h && eq(ctx, sl->idx1 - 1, key))
            return sl->idx1 - 1;
    }
}

/* Adds entry idx of hash h (growing the table first when it would pass
 * half full). 0 or -ENOMEM (the table unchanged). */
static inline int ht_add(struct htab *t, uint32_t h, uint32_t idx)
{
    if (t->s == NULL || (t->n + 1) * 2 > t->mask + 1) {
        size_t ncap = t->s ? (t->mask + 1) * 2 : 64;
        struct hslot *ns = isoprof_calloc(ncap, sizeof(*ns));
        if (ns == NULL)
            return -ENOMEM;
        for (size_t i = 0; t->s && i <= t->mask; i++) {
            if (t->s[i].idx1 == 0)
                continue;
            size_t j = t->s[i].hash & (ncap - 1);
            while (ns[j].idx1 != 0)
                j = (j + 1) & (ncap - 1);
            ns[j] = t->s[i];
        }
        isoprof_free(t->s);
        t->s = ns;
        t->mask = ncap - 1;
    }
    size_t i = h & t->mask;
    while (t->s[i].idx1 != 0)
        i = (i + 1) & t->mask;
    t->s[i].hash = h;
    t->s[i].idx1 = idx + 1;
    t->n++;
    return 0;
}

static inline void ht_free(struct htab *t)
{
    isoprof_free(t->s);
    memset(t, 0, sizeof(*t));
}

#endif

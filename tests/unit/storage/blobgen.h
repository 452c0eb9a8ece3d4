/*
 * blobgen.h - snapshot-like text for the blob tests: a deterministic
 * stream shaped like a V8 heap snapshot's "nodes" array (seven numbers per
 * node: type, name index, an id rising by 2, self size, edge count, trace
 * id, detachedness) with a string now and then, which zstd level 3
 * compresses about as well as a real snapshot (5 to 10 times). The same
 * seed always gives the same bytes, however they are asked for, so a
 * reader can compare what it gets without the whole stream in memory.
 */
#ifndef ISOPROF_TEST_STORAGE_BLOBGEN_H
#define ISOPROF_TEST_STORAGE_BLOBGEN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct snapgen {
    uint64_t x, id;
    unsigned field;
    unsigned shape[7]; /* the node being repeated: objects come in runs of one shape */
    char tok[96];
    size_t tlen, tpos;
};

static const char *const snapgen_names[] = {
    "(closure)", "Array",    "Object",  "system / Context", "(compiled code)", "Map",
    "String",    "Buffer",   "Promise", "Socket",           "(system)",        "WeakMap",
    "Request",   "Response", "Timeout", "HTTPParser"};

__attribute__((unused)) static void snapgen_init(struct snapgen *g, uint64_t seed)
{
    memset(g, 0, sizeof(*g));
    g->x = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    g->id = 1;
}

static uint64_t snapgen_rand(struct snapgen *g)
{
    g->x ^= g->x << 13;
    g->x ^= g->x >> 7;
    g->x ^= g->x << 17;
    return g->x;
}

static void snapgen_token(struct snapgen *g)
{
    uint64_t r = snapgen_rand(g);
    int n;
    if ((r & 127) == 0) {
        n = snprintf(g->tok, sizeof(g->tok), "\"%s %u\",",
                     snapgen_names[(r >> 8) % (sizeof(snapgen_names) / sizeof(snapgen_names[0]))],
                     (unsigned)((r >> 24) % 5000));
    } else {
        unsigned f = g->field++ % 7, v;
        if (f == 0 && (r >> 8) % 4 == 0) {
            /* A new shape: type, name, self size, edge count. */
            uint64_t q = snapgen_rand(g);
            g->shape[0] = q % 3 == 0 ? (unsigned)((q >> 8) % 13) : 3;
            g->shape[1] =
                q % 5 == 0 ? (unsigned)((q >> 16) % 40000) : (unsigned)((q >> 16) % 64) * 7;
            g->shape[3] = q % 40 == 0 ? (unsigned)((q >> 32) % 100000) : 16u * (1 + (q >> 40) % 4);
            g->shape[4] = (unsigned)((q >> 48) % 4);
        }
        v = f == 2 ? (unsigned)(g->id += 2) : g->shape[f];
        n = snprintf(g->tok, sizeof(g->tok), g->field % 7 == 0 ? "%u,\n" : "%u,", v);
    }
    g->tlen = n > 0 ? (size_t)n : 0;
    g->tpos = 0;
}

/* The next n bytes of the stream into buf. */
__attribute__((unused)) static void snapgen_fill(struct snapgen *g, uint8_t *buf, size_t n)
{
    while (n > 0) {
        if (g->tpos == g->tlen)
            snapgen_token(g);
        size_t take = g->tlen - g->tpos < n ? g->tlen - g->tpos : n;
        memcpy(buf, g->tok + g->tpos, take);
        g->tpos += take;
        buf += take;
        n -= take;
    }
}

#endif

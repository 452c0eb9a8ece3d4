/*
 * store_corpus.h - the real windows the storage benchmark works on, read
 * from a store that isoprofd filled while profiling real workloads.
 */
#ifndef ISOPROF_BENCH_STORE_CORPUS_H
#define ISOPROF_BENCH_STORE_CORPUS_H

#include <stddef.h>
#include <stdint.h>

struct corpus_win {
    char worker[64];
    char runtime[32];
    uint8_t type; /* enum store_type */
    uint64_t start_ns, samples, interval;
    uint8_t *pprof; /* owned by the corpus */
    size_t len;
    size_t gzip6; /* bytes of the pprof gzip'd at zlib level 6 */
    unsigned worker_idx;
};

struct corpus {
    struct corpus_win *w; /* in start order within each worker */
    size_t n;
    char (*workers)[64];
    size_t nworkers;
};

/* Load every window of the store in dir (opened read-only), sorted by
 * worker then start time. 0 or a store error; on failure c is empty. */
int corpus_load(const char *dir, struct corpus *c);
void corpus_free(struct corpus *c);
/* Size of buf gzip'd (gzip wrapper, zlib level 6: what Go and Node agents
 * upload); 0 on failure. */
size_t corpus_gzip_size(const uint8_t *buf, size_t len, int level);

#endif

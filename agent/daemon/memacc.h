/*
 * memacc.h - the memory polls that fell inside one window: exact
 * min/max/last, and a bounded sample of the values for the P999 (every
 * step-th poll, the step doubling whenever the sample fills). The target
 * keeps one per window type (target.c resets it as a window starts and
 * reads it as the window is handed to the writer); the memory watch adds
 * each poll (anomaly.c). Pure: no allocation, any thread on its own m.
 */
#ifndef ISOPROF_AGENT_MEMACC_H
#define ISOPROF_AGENT_MEMACC_H

#include "store.h"

#include <stdint.h>

#define MEMACC_MAX 256
struct memacc {
    uint32_t n, step, skip;
    uint64_t min, max, last;
    uint32_t kib[MEMACC_MAX];
};

void memacc_reset(struct memacc *m);
void memacc_add(struct memacc *m, uint64_t bytes);
/* The figures of m (all zero when it saw no poll). */
void memacc_figures(const struct memacc *m, struct store_mem *out);

#endif

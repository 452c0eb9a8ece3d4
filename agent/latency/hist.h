/*
 * hist.h - a log-linear histogram of durations in nanoseconds.
 *
 * HDR-style layout with 128 linear sub-buckets per power of two:
 *   - [0, 1024 ns) is split linearly into 128 buckets 8 ns wide;
 *   - each octave [2^e, 2^(e+1)) for e = 10 .. 41 into 128 buckets
 *     2^(e-7) ns wide.
 * A bucket is therefore never wider than 1/128 of its lower bound from
 * 1024 ns on, and than 8/1000 of any value from 1 us on. A quantile is
 * reported as its bucket's midpoint, clamped to the recorded min and max,
 * so its relative error against the exact quantile is at most 1/256
 * (0.39 %) from 1024 ns and at most 0.4 % from 1 us, up to HIST_MAX_VALUE
 * (2^42 ns, about 73 minutes). Values from HIST_MAX_VALUE on are counted
 * in the top bucket and in hist_clamped(); values under 8 ns share bucket
 * 0, and below 1 us the error is up to 4 ns absolute.
 *
 * Memory: the counts live inside the struct, nothing is allocated.
 * HIST_BUCKETS = 4224 buckets of uint32_t plus 40 bytes of header:
 * sizeof(struct hist) = 16936 bytes, whatever is recorded.
 *
 * Counts: a bucket saturates at UINT32_MAX; what does not fit is counted
 * in hist_lost() and left out of hist_count(), so the count always equals
 * the sum of the buckets and quantiles stay consistent. Reaching it takes
 * 4.29e9 observations in one bucket between two resets.
 *
 * Thread: pure functions on caller-owned memory; any thread, one writer
 * per histogram at a time.
 */
#ifndef ISOPROF_HIST_H
#define ISOPROF_HIST_H

#include <stddef.h>
#include <stdint.h>

#define HIST_SUB_BITS 7 /* 128 sub-buckets per octave */
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_LINEAR_BITS 10                           /* [0, 2^10 ns) is linear */
#define HIST_TOP_BITS 42                              /* values < 2^42 ns are resolved */
#define HIST_MAX_VALUE ((uint64_t)1 << HIST_TOP_BITS) /* 4398 s, ~73 min */
#define HIST_BUCKETS (HIST_SUB * (HIST_TOP_BITS - HIST_LINEAR_BITS + 1))

struct hist {
    uint64_t count;   /* observations counted in counts[] (their sum) */
    uint64_t clamped; /* of those, values >= HIST_MAX_VALUE (in the top bucket) */
    uint64_t lost;    /* observations dropped because their bucket was full */
    uint64_t min;     /* smallest value recorded (exact); valid when count > 0 */
    uint64_t max;     /* largest value recorded (exact, even when clamped) */
    uint32_t counts[HIST_BUCKETS];
};

/* hist_init - an empty histogram (every field zeroed). Never fails. */
void hist_init(struct hist *h);

/* hist_reset - empty h again. Only the buckets between min and max are
 * cleared (they are the only nonzero ones), so resetting a histogram of a
 * narrow distribution is cheap. */
void hist_reset(struct hist *h);

/*
 * hist_record - count `count` observations of value_ns (count > 1 for a
 * sampled source: a 1-in-10 sample is recorded with count 10). count 0 is
 * a no-op. Values >= HIST_MAX_VALUE go into the top bucket and clamped;
 * min and max keep the exact values. Never fails.
 */
void hist_record(struct hist *h, uint64_t value_ns, uint64_t count);

/* hist_count - observations counted (sum of the buckets). */
uint64_t hist_count(const struct hist *h);

/* hist_min / hist_max - the exact smallest / largest value recorded; 0 for
 * an empty histogram. */
uint64_t hist_min(const struct hist *h);
uint64_t hist_max(const struct hist *h);

/* hist_clamped / hist_lost - see struct hist. */
uint64_t hist_clamped(const struct hist *h);
uint64_t hist_lost(const struct hist *h);

/*
 * hist_quantile - the value at quantile q (0 <= q <= 1): the observation
 * of rank r = ceil(q * count) (1-based; q <= 0 or NaN gives rank 1 and
 * q >= 1 rank count) is found. Rank 1 answers the exact min and rank
 * count the exact max; any other rank the midpoint of its bucket, clamped
 * to [hist_min, hist_max], which is within 0.4 % of the exact quantile
 * (same rank definition) for values in [1 us, HIST_MAX_VALUE) and within
 * the top bucket for larger ones. 0 for an empty histogram.
 */
uint64_t hist_quantile(const struct hist *h, double q);

/* hist_value_at_rank - as hist_quantile, for an explicit 1-based rank
 * (clamped to [1, count]). 0 for an empty histogram. */
uint64_t hist_value_at_rank(const struct hist *h, uint64_t rank);

/* hist_merge - add src's observations into dst (bucket by bucket,
 * saturating as hist_record does; clamped, lost, min and max combine).
 * dst and src may not be the same histogram. */
void hist_merge(struct hist *dst, const struct hist *src);

/* hist_bucket_of - the bucket index value_ns is counted in (0 ..
 * HIST_BUCKETS-1). hist_bucket_lo / hist_bucket_width - the bucket's lower
 * bound and width in ns. Exposed for the unit test. */
size_t hist_bucket_of(uint64_t value_ns);
uint64_t hist_bucket_lo(size_t bucket);
uint64_t hist_bucket_width(size_t bucket);

#endif

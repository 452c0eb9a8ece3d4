/*
 * hist.c - the log-linear latency histogram (see hist.h).
 *
 * A value's bucket comes from its highest set bit e and the next 7 bits
 * below it: index = (e - 10) * 128 + (v >> (e - 7)), which runs through
 * 128..4223 for e = 10..41, while values under 1024 ns map linearly with
 * v >> 3 onto 0..127. The two regions meet seamlessly (both 8 ns wide at
 * 1024), so one formula inverts every bucket >= 128 and the linear one
 * the rest. No floating point is involved except in turning q into a rank.
 *
 * min and max are kept exact. They bound the buckets that can be nonzero,
 * so reset, merge and the quantile walk only visit that range; they are
 * the answers for the first and the last rank; and they clamp the
 * reported midpoint of the other ranks, which keeps it on the right side
 * of the extremes (a histogram of one repeated value is exact at every q).
 */
#include "hist.h"

#include <math.h>
#include <string.h>

#define HIST_LINEAR_SHIFT (HIST_LINEAR_BITS - HIST_SUB_BITS) /* 3: 8 ns wide */

size_t hist_bucket_of(uint64_t v)
{
    if (v >= HIST_MAX_VALUE)
        return HIST_BUCKETS - 1;
    if (v < ((uint64_t)1 << HIST_LINEAR_BITS))
        return (size_t)(v >> HIST_LINEAR_SHIFT);
    unsigned e = 63u - (unsigned)__builtin_clzll(v);
    return (size_t)(e - HIST_LINEAR_BITS) * HIST_SUB + (size_t)(v >> (e - HIST_SUB_BITS));
}

uint64_t hist_bucket_lo(size_t b)
{
    if (b >= HIST_BUCKETS)
        b = HIST_BUCKETS - 1;
    if (b < 2 * HIST_SUB)
        return (uint64_t)b << HIST_LINEAR_SHIFT;
    unsigned e = (unsigned)(b / HIST_SUB) + HIST_LINEAR_BITS - 1;
    return (uint64_t)(HIST_SUB + b % HIST_SUB) << (e - HIST_SUB_BITS);
}

uint64_t hist_bucket_width(size_t b)
{
    if (b >= HIST_BUCKETS)
        b = HIST_BUCKETS - 1;
    if (b < 2 * HIST_SUB)
        return (uint64_t)1 << HIST_LINEAR_SHIFT;
    unsigned e = (unsigned)(b / HIST_SUB) + HIST_LINEAR_BITS - 1;
    return (uint64_t)1 << (e - HIST_SUB_BITS);
}

static uint64_t hist_sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Add n to a bucket as far as it has room; returns what was added. */
static uint64_t hist_bucket_add(uint32_t *c, uint64_t n)
{
    uint64_t room = UINT32_MAX - *c;
    uint64_t add = n < room ? n : room;
    *c += (uint32_t)add;
    return add;
}

void hist_init(struct hist *h)
{
    memset(h, 0, sizeof(*h));
}

void hist_reset(struct hist *h)
{
    if (h->count > 0) {
        size_t lo = hist_bucket_of(h->min), hi = hist_bucket_of(h->max);
        memset(&h->counts[lo], 0, (hi - lo + 1) * sizeof(h->counts[0]));
    }
    h->count = h->clamped = h->lost = h->min = h->max = 0;
}

void hist_record(struct hist *h, uint64_t v, uint64_t count)
{
    if (count == 0)
        return;
    uint64_t add = hist_bucket_add(&h->counts[hist_bucket_of(v)], count);
    h->lost = hist_sat_add(h->lost, count - add);
    if (add == 0)
        return;
    if (h->count == 0) {
        h->min = h->max = v;
    } else {
        if (v < h->min)
            h->min = v;
        if (v > h->max)
            h->max = v;
    }
    h->count += add; /* cannot wrap: at most HIST_BUCKETS * UINT32_MAX < 2^45 */
    if (v >= HIST_MAX_VALUE)
        h->clamped += add;
}

uint64_t hist_count(const struct hist *h)
{
    return h->count;
}

uint64_t hist_min(const struct hist *h)
{
    return h->count ? h->min : 0;
}

uint64_t hist_max(const struct hist *h)
{
    return h->count ? h->max : 0;
}

uint64_t hist_clamped(const struct hist *h)
{
    return h->clamped;
}

uint64_t hist_lost(const struct hist *h)
{
    return h->lost;
}

uint64_t hist_value_at_rank(const struct hist *h, uint64_t rank)
{
    if (h->count == 0)
        return 0;
    if (rank < 1)
        rank = 1;
    if (rank >= h->count)
        return h->max; /* the extremes are known exactly */
    if (rank == 1)
        return h->min;
    size_t b = hist_bucket_of(h->min), hi = hist_bucket_of(h->max);
    uint64_t seen = 0;
    for (; b < hi; b++) {
        seen += h->counts[b];
        if (seen >= rank)
            break;
    }
    uint64_t v = hist_bucket_lo(b) + hist_bucket_width(b) / 2;
    if (v < h->min)
        v = h->min;
    if (v > h->max)
        v = h->max;
    return v;
}

uint64_t hist_quantile(const struct hist *h, double q)
{
    if (h->count == 0)
        return 0;
    uint64_t rank;
    if (!(q > 0)) {
        rank = 1;
    } else if (q >= 1) {
        rank = h->count;
    } else {
        double r = ceil(q * (double)h->count);
        rank = r >= (double)h->count ? h->count : (uint64_t)r;
    }
    return hist_value_at_rank(h, rank);
}

void hist_merge(struct hist *dst, const struct hist *src)
{
    if (src->count == 0) {
        dst->lost = hist_sat_add(dst->lost, src->lost);
        return;
    }
    size_t lo = hist_bucket_of(src->min), hi = hist_bucket_of(src->max);
    uint64_t added = 0, dropped = 0;
    for (size_t b = lo; b <= hi; b++) {
        if (src->counts[b] == 0)
            continue;
        uint64_t a = hist_bucket_add(&dst->counts[b], src->counts[b]);
        added += a;
        dropped += src->counts[b] - a;
    }
    dst->lost = hist_sat_add(hist_sat_add(dst->lost, src->lost), dropped);
    if (added == 0)
        return;
    if (dst->count == 0) {
        dst->min = src->min;
        dst->max = src->max;
    } else {
        if (src->min < dst->min)
            dst->min = src->min;
        if (src->max > dst->max)
            dst->max = src->max;
    }
    dst->count += added;
    /* The top bucket holds the clamped values and the last 2^34 ns below
     * the limit; after a saturated merge only so many can be clamped. */
    uint64_t clamped = dst->clamped + src->clamped;
    uint64_t top = dst->counts[HIST_BUCKETS - 1];
    dst->clamped = clamped < top ? clamped : top;
}

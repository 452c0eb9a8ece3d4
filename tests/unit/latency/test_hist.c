/*
 * test_hist.c - the log-linear histogram (agent/latency/hist.c): bucket geometry,
 * quantile error against exact quantiles of random data from several
 * distributions (heavy tails included), edge values, merge, reset and
 * saturation of the counts.
 */
#include "base.h"
#include "hist.h"
#include "rng.h"
#include "test.h"

#include <math.h>
#include <stdint.h>

/* --- helpers --- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The exact quantile with the rank hist_quantile documents. */
static uint64_t exact_quantile(const uint64_t *sorted, size_t n, double q)
{
    uint64_t rank;
    if (!(q > 0))
        rank = 1;
    else if (q >= 1)
        rank = n;
    else {
        double r = ceil(q * (double)n);
        rank = r >= (double)n ? n : (uint64_t)r;
    }
    return sorted[rank - 1];
}

static double rel_err(uint64_t got, uint64_t want)
{
    double d = (double)got - (double)want;
    return fabs(d) / (double)want;
}

enum dist { D_UNIFORM, D_LOGNORMAL, D_EXPONENTIAL, D_PARETO, D_BIMODAL, D_WIDE, D_NDIST };
static const char *dist_name[] = {"uniform", "lognormal", "exponential",
                                  "pareto",  "bimodal",   "wide"};

static uint64_t draw(struct rng *r, enum dist d)
{
    double v = 0;
    switch (d) {
    case D_UNIFORM:
        v = rng_uniform(r, 1e3, 1e9); /* 1 us .. 1 s */
        break;
    case D_LOGNORMAL:
        v = rng_lognormal(r, 5e6, 0.8); /* around 5 ms */
        break;
    case D_EXPONENTIAL:
        v = rng_exponential(r, 2e6);
        break;
    case D_PARETO:
        v = rng_pareto(r, 1e6, 1.1); /* heavy tail from 1 ms */
        break;
    case D_BIMODAL:
        v = rng_unit(r) < 0.97 ? rng_lognormal(r, 2e6, 0.3) : rng_lognormal(r, 400e6, 0.5);
        break;
    case D_WIDE:
        v = exp(rng_uniform(r, log(1e3), log(3.6e12))); /* log-uniform, 1 us .. 1 h */
        break;
    default:
        break;
    }
    if (v < 1e3)
        v = 1e3; /* the documented bound starts at 1 us */
    if (v >= (double)HIST_MAX_VALUE)
        v = (double)(HIST_MAX_VALUE - 1);
    return (uint64_t)v;
}

static struct hist *new_hist(void)
{
    struct hist *h = isoprof_malloc(sizeof(*h));
    if (h == NULL)
        abort();
    hist_init(h);
    return h;
}

/* --- tests --- */

TEST(size)
{
    fprintf(stderr, "     sizeof(struct hist) = %zu bytes, %u buckets\n", sizeof(struct hist),
            (unsigned)HIST_BUCKETS);
    CHECK_EQ_INT(HIST_BUCKETS, 4224);
    CHECK_EQ_INT(sizeof(struct hist), 16936);
}

TEST(bucket_geometry)
{
    /* Every bucket's lower bound maps back to it, bounds are contiguous,
     * and width / lower bound <= 1/128 from 1024 ns on. */
    uint64_t prev_end = 0;
    for (size_t b = 0; b < HIST_BUCKETS; b++) {
        uint64_t lo = hist_bucket_lo(b), w = hist_bucket_width(b);
        CHECK_EQ_INT(hist_bucket_of(lo), b);
        CHECK_EQ_INT(hist_bucket_of(lo + w - 1), b);
        CHECK_EQ_INT(lo, prev_end);
        if (lo >= 1024)
            CHECK(w * 128 <= lo);
        prev_end = lo + w;
        if (test_failed_)
            return;
    }
    CHECK_EQ_INT(prev_end, HIST_MAX_VALUE);
    CHECK_EQ_INT(hist_bucket_of(0), 0);
    CHECK_EQ_INT(hist_bucket_of(7), 0);
    CHECK_EQ_INT(hist_bucket_of(8), 1);
    CHECK_EQ_INT(hist_bucket_of(HIST_MAX_VALUE - 1), HIST_BUCKETS - 1);
    CHECK_EQ_INT(hist_bucket_of(HIST_MAX_VALUE), HIST_BUCKETS - 1);
    CHECK_EQ_INT(hist_bucket_of(UINT64_MAX), HIST_BUCKETS - 1);
    /* From 1 us on the midpoint is within 0.4 % of any value in its bucket. */
    struct rng r;
    rng_seed(&r, 7);
    for (int i = 0; i < 200000; i++) {
        uint64_t v = draw(&r, D_WIDE);
        size_t b = hist_bucket_of(v);
        uint64_t mid = hist_bucket_lo(b) + hist_bucket_width(b) / 2;
        CHECK(rel_err(mid, v) <= 0.004);
        if (test_failed_)
            return;
    }
}

/* n random values of each distribution, several seeds, recorded with
 * count 1 and with random counts; every quantile within 0.4 % (the header
 * promises 1/256 from 1024 ns and 0.4 % from 1 us; the task asks 1 %). */
static void accuracy_run(enum dist d, uint64_t seed, int weighted, double *worst)
{
    enum { N = 100000 };
    static uint64_t vals[N * 4];
    static const double qs[] = {0,    0.001, 0.01,  0.1,   0.25,   0.5,    0.75,    0.9,
                                0.95, 0.99,  0.995, 0.999, 0.9995, 0.9999, 0.99999, 1};
    struct rng r;
    rng_seed(&r, seed);
    struct hist *h = new_hist();
    size_t n = 0;
    for (int i = 0; i < N; i++) {
        uint64_t v = draw(&r, d);
        uint64_t c = weighted ? 1 + rng_u64(&r) % 4 : 1;
        hist_record(h, v, c);
        for (uint64_t k = 0; k < c; k++)
            vals[n++] = v;
    }
    qsort(vals, n, sizeof(vals[0]), cmp_u64);
    CHECK_EQ_INT(hist_count(h), n);
    CHECK_EQ_INT(hist_min(h), vals[0]);
    CHECK_EQ_INT(hist_max(h), vals[n - 1]);
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(qs); i++) {
        uint64_t want = exact_quantile(vals, n, qs[i]);
        uint64_t got = hist_quantile(h, qs[i]);
        double e = rel_err(got, want);
        if (e > *worst)
            *worst = e;
        if (e > 0.004) {
            fprintf(stderr,
                    "     %s seed %" PRIu64 " q=%g: got %" PRIu64 " want %" PRIu64 " (%.4f %%)\n",
                    dist_name[d], seed, qs[i], got, want, e * 100);
            CHECK(e <= 0.004);
        }
    }
    CHECK_EQ_INT(hist_quantile(h, 0), vals[0]);
    CHECK_EQ_INT(hist_quantile(h, 1), vals[n - 1]);
    isoprof_free(h);
}

TEST(quantile_accuracy)
{
    for (int d = 0; d < D_NDIST; d++) {
        double worst = 0;
        for (uint64_t seed = 1; seed <= 4; seed++) {
            accuracy_run((enum dist)d, seed, 0, &worst);
            accuracy_run((enum dist)d, seed + 100, 1, &worst);
        }
        fprintf(stderr, "     %-12s worst relative error %.4f %%\n", dist_name[d], worst * 100);
    }
}

TEST(empty)
{
    struct hist *h = new_hist();
    CHECK_EQ_INT(hist_count(h), 0);
    CHECK_EQ_INT(hist_quantile(h, 0.5), 0);
    CHECK_EQ_INT(hist_quantile(h, 1), 0);
    CHECK_EQ_INT(hist_value_at_rank(h, 1), 0);
    CHECK_EQ_INT(hist_max(h), 0);
    CHECK_EQ_INT(hist_min(h), 0);
    hist_record(h, 12345, 0); /* count 0: nothing */
    CHECK_EQ_INT(hist_count(h), 0);
    CHECK_EQ_INT(hist_max(h), 0);
    isoprof_free(h);
}

TEST(edge_values)
{
    struct hist *h = new_hist();
    hist_record(h, 0, 1);
    CHECK_EQ_INT(hist_count(h), 1);
    CHECK_EQ_INT(hist_quantile(h, 0.5), 0);
    CHECK_EQ_INT(hist_max(h), 0);
    CHECK_EQ_INT(h->counts[0], 1);

    /* one repeated value is exact at every q (midpoint clamped to min/max) */
    hist_reset(h);
    hist_record(h, 123456789, 1000);
    CHECK_EQ_INT(hist_quantile(h, 0.001), 123456789);
    CHECK_EQ_INT(hist_quantile(h, 0.999), 123456789);

    /* huge values clamp into the top bucket, max stays exact */
    hist_reset(h);
    hist_record(h, 5000000, 10);
    hist_record(h, UINT64_MAX, 3);
    hist_record(h, HIST_MAX_VALUE, 1);
    hist_record(h, HIST_MAX_VALUE - 1, 1); /* in the top bucket, not clamped */
    CHECK_EQ_INT(hist_count(h), 15);
    CHECK_EQ_INT(hist_clamped(h), 4);
    CHECK(hist_max(h) == UINT64_MAX);
    CHECK(hist_quantile(h, 1) == UINT64_MAX);
    CHECK_EQ_INT(h->counts[HIST_BUCKETS - 1], 5);
    uint64_t q = hist_quantile(h, 0.8); /* rank 12: in the top bucket */
    CHECK(q >= hist_bucket_lo(HIST_BUCKETS - 1) && q < HIST_MAX_VALUE);
    CHECK(rel_err(hist_quantile(h, 0.5), 5000000) <= 0.004);

    /* one hour is resolved */
    hist_reset(h);
    uint64_t hour = 3600ull * 1000000000ull;
    hist_record(h, hour, 1);
    hist_record(h, 1000, 1);
    CHECK_EQ_INT(hist_clamped(h), 0);
    CHECK(rel_err(hist_value_at_rank(h, 2), hour) <= 0.004);
    CHECK_EQ_INT(hist_value_at_rank(h, 1), 1000);
    CHECK_EQ_INT(hist_value_at_rank(h, 0), 1000);  /* clamped to rank 1 */
    CHECK_EQ_INT(hist_value_at_rank(h, 99), hour); /* clamped to count */

    /* q outside [0, 1] and NaN */
    CHECK_EQ_INT(hist_quantile(h, -1), 1000);
    CHECK_EQ_INT(hist_quantile(h, NAN), 1000);
    CHECK_EQ_INT(hist_quantile(h, 7), hour);
    isoprof_free(h);
}

TEST(reset)
{
    struct hist *h = new_hist();
    struct rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < 10000; i++)
        hist_record(h, draw(&r, D_WIDE), 1 + (uint64_t)i % 3);
    hist_record(h, UINT64_MAX, 1);
    hist_reset(h);
    CHECK_EQ_INT(hist_count(h), 0);
    CHECK_EQ_INT(hist_clamped(h), 0);
    CHECK_EQ_INT(hist_lost(h), 0);
    CHECK_EQ_INT(hist_max(h), 0);
    size_t nonzero = 0;
    for (size_t b = 0; b < HIST_BUCKETS; b++)
        nonzero += h->counts[b] != 0;
    CHECK_EQ_INT(nonzero, 0);
    hist_record(h, 42000, 2);
    CHECK_EQ_INT(hist_count(h), 2);
    CHECK_EQ_INT(hist_min(h), 42000);
    CHECK_EQ_INT(hist_quantile(h, 0.5), 42000);
    isoprof_free(h);
}

TEST(merge)
{
    struct hist *a = new_hist(), *b = new_hist(), *all = new_hist();
    struct rng r;
    rng_seed(&r, 11);
    for (int i = 0; i < 50000; i++) {
        uint64_t v = draw(&r, D_PARETO), c = 1 + rng_u64(&r) % 5;
        hist_record(i % 3 ? a : b, v, c);
        hist_record(all, v, c);
    }
    hist_record(b, UINT64_MAX, 2);
    hist_record(all, UINT64_MAX, 2);
    hist_merge(a, b);
    CHECK_EQ_INT(hist_count(a), hist_count(all));
    CHECK_EQ_INT(hist_min(a), hist_min(all));
    CHECK(hist_max(a) == hist_max(all));
    CHECK_EQ_INT(hist_clamped(a), 2);
    CHECK(memcmp(a->counts, all->counts, sizeof(a->counts)) == 0);
    CHECK_EQ_INT(hist_quantile(a, 0.999), hist_quantile(all, 0.999));

    /* into an empty one, and an empty one into a full one */
    struct hist *e = new_hist();
    hist_merge(e, all);
    CHECK_EQ_INT(hist_count(e), hist_count(all));
    CHECK_EQ_INT(hist_min(e), hist_min(all));
    hist_reset(b);
    uint64_t before = hist_count(e);
    hist_merge(e, b);
    CHECK_EQ_INT(hist_count(e), before);
    isoprof_free(a);
    isoprof_free(b);
    isoprof_free(all);
    isoprof_free(e);
}

TEST(count_saturation)
{
    struct hist *h = new_hist();
    hist_record(h, 5000000, UINT64_MAX);
    CHECK_EQ_INT(hist_count(h), UINT32_MAX);
    CHECK(hist_lost(h) == UINT64_MAX - UINT32_MAX);
    hist_record(h, 5000000, UINT64_MAX);
    CHECK_EQ_INT(hist_count(h), UINT32_MAX);
    CHECK(hist_lost(h) == UINT64_MAX); /* saturates, never wraps */
    hist_record(h, 9000000, 5);        /* another bucket still counts */
    CHECK_EQ_INT(hist_count(h), (uint64_t)UINT32_MAX + 5);
    CHECK_EQ_INT(hist_max(h), 9000000);
    CHECK(rel_err(hist_quantile(h, 0.5), 5000000) <= 0.004);
    CHECK_EQ_INT(hist_quantile(h, 1), 9000000);

    /* merge saturates the same way and keeps count == sum of buckets */
    struct hist *g = new_hist();
    hist_record(g, 5000000, 10);
    hist_record(g, 1000, 1);
    hist_merge(h, g);
    CHECK_EQ_INT(hist_count(h), (uint64_t)UINT32_MAX + 6);
    CHECK(hist_lost(h) == UINT64_MAX);
    CHECK_EQ_INT(hist_min(h), 1000);
    uint64_t sum = 0;
    for (size_t b = 0; b < HIST_BUCKETS; b++)
        sum += h->counts[b];
    CHECK_EQ_INT(sum, hist_count(h));

    /* a histogram with every bucket full cannot wrap its count */
    struct hist *f = new_hist();
    for (size_t b = 0; b < HIST_BUCKETS; b++)
        hist_record(f, hist_bucket_lo(b), UINT64_MAX);
    CHECK(hist_count(f) == (uint64_t)HIST_BUCKETS * UINT32_MAX);
    CHECK(hist_quantile(f, 0.5) > 0);
    isoprof_free(f);
    isoprof_free(g);
    isoprof_free(h);
}

int main(void)
{
    RUN(size);
    RUN(bucket_geometry);
    RUN(quantile_accuracy);
    RUN(empty);
    RUN(edge_values);
    RUN(reset);
    RUN(merge);
    RUN(count_saturation);
    TEST_EXIT();
}

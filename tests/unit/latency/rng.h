/*
 * rng.h - the seeded generator the latency tests draw from (splitmix64)
 * and the distributions built on it; deterministic per seed, so a failure
 * reproduces. Header-only: each test is one translation unit.
 */
#ifndef ISOPROF_TEST_RNG_H
#define ISOPROF_TEST_RNG_H

#include <math.h>
#include <stdint.h>

struct rng {
    uint64_t s;
    int have_spare;
    double spare;
};

static inline uint64_t rng_u64(struct rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The state starts at a hash of the seed: seeds that differ by a few
 * would otherwise give the same stream shifted by a few draws. */
static inline void rng_seed(struct rng *r, uint64_t seed)
{
    r->s = seed;
    r->s = rng_u64(r);
    r->have_spare = 0;
}

/* uniform in (0, 1) */
static inline double rng_unit(struct rng *r)
{
    return ((double)(rng_u64(r) >> 11) + 0.5) / 9007199254740992.0;
}

static inline double rng_uniform(struct rng *r, double lo, double hi)
{
    return lo + (hi - lo) * rng_unit(r);
}

/* standard normal (Box-Muller, the second value kept for the next call) */
static inline double rng_normal(struct rng *r)
{
    if (r->have_spare) {
        r->have_spare = 0;
        return r->spare;
    }
    double u = rng_unit(r), v = rng_unit(r);
    double m = sqrt(-2 * log(u));
    r->spare = m * sin(2 * M_PI * v);
    r->have_spare = 1;
    return m * cos(2 * M_PI * v);
}

/* lognormal with the given median and sigma (of the log) */
static inline double rng_lognormal(struct rng *r, double median, double sigma)
{
    return median * exp(sigma * rng_normal(r));
}

static inline double rng_exponential(struct rng *r, double mean)
{
    return -mean * log(rng_unit(r));
}

/* Pareto with scale xm and shape a (a <= 2: infinite variance) */
static inline double rng_pareto(struct rng *r, double xm, double a)
{
    return xm / pow(rng_unit(r), 1 / a);
}

#endif

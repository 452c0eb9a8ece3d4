/*
 * schedule.c - the duty-cycle planner (schedule.h): period, jitter and the cap,
 * as pure functions of the config, a random draw and the time.
 */
#include "schedule.h"

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* A uniform offset in [-spread, +spread). */
static double offset(struct isoprof_rng *rng, double spread)
{
    return (isoprof_rng_unit(rng) * 2.0 - 1.0) * spread;
}

uint64_t sched_first_due(const struct cfg *c, struct isoprof_rng *rng, uint64_t now)
{
    double spread = c->sampling.cpu.jitter * (double)c->sampling.cpu.period_ns;
    return add_sat(now, (uint64_t)(isoprof_rng_unit(rng) * spread));
}

uint64_t sched_next_due(const struct cfg *c, struct isoprof_rng *rng, uint64_t now, uint64_t base)
{
    double period = (double)c->sampling.cpu.period_ns;
    double due = (double)base + period + offset(rng, c->sampling.cpu.jitter * period);
    if (due <= (double)now)
        return now;
    return due < 1.8e19 ? (uint64_t)due : UINT64_MAX;
}

uint64_t sched_heap_due(const struct cfg *c, struct isoprof_rng *rng, uint64_t now,
                        int episode_open)
{
    if (episode_open)
        return add_sat(now, c->anomaly.memory.heap_period_ns);
    double period = (double)c->sampling.heap.period_ns;
    double p = period + offset(rng, c->sampling.cpu.jitter * period);
    return add_sat(now, p >= 1.0 ? (uint64_t)p : 1);
}

int sched_slot_free(const struct cfg *c, unsigned slots)
{
    return slots < c->sampling.cpu.max_concurrent;
}

int sched_plan_stale(const struct cfg *c, uint64_t now, uint64_t due)
{
    double limit = (double)c->sampling.cpu.period_ns * (1.0 + c->sampling.cpu.jitter);
    return (double)due > (double)now + limit;
}

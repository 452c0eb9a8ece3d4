/*
 * schedule.c - the duty-cycle planner (schedule.h): period, jitter, the cap
 * and the cost budget, as pure functions of the config, the measured costs,
 * a random draw and the time.
 */
#include "schedule.h"

#include <string.h>

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* A uniform offset in [-spread, +spread). */
static double offset(struct isoprof_rng *rng, double spread)
{
    return (isoprof_rng_unit(rng) * 2.0 - 1.0) * spread;
}

/* A time of day in ns as a double, saturated into uint64_t. */
static uint64_t to_ns(double t)
{
    if (t <= 0.0)
        return 0;
    return t < 1.8e19 ? (uint64_t)t : UINT64_MAX;
}

/* No period is stretched past a day (the config's own limit). */
#define SCHED_MAX_PERIOD_NS 86400e9

void sched_plan(const struct cfg *c, const struct sched_cost *k, struct sched_plan *out)
{
    double p = (double)c->sampling.cpu.period_ns, d = (double)c->sampling.cpu.duration_ns;
    double h = (double)c->sampling.heap.period_ns;
    double share = c->sampling.budget.pause_share, maxp = (double)c->sampling.budget.max_pause_ns;
    double start = (double)k->start_ns, heap = (double)k->heap_ns;
    double r = (double)k->stop_ns_s / 1e9; /* stop's stall per ns of window */
    double t = k->stop_fit ? (double)k->stop_ns : 0.0;

    /* a: what does not lengthen with the window, per ns of the config's
     * periods; b: what does (the stop), at the configured duty cycle. */
    double a = (start + t) / p + heap / h, b = r * d / p;
    /* g: how far a window may lengthen. */
    double g_max = (double)c->sampling.budget.max_duration_ns / d;
    if (r > 0.0) {
        double room = (maxp - t) / (r * d); /* the stop stays under max_pause */
        if (!k->stop_fit && t + r * d > maxp) {
            double explore = 2.0 * (double)k->stop_len_ns / d;
            room = explore > 1.0 ? explore : 1.0;
        }
        if (room < g_max)
            g_max = room;
    }
    if (g_max < 1.0)
        g_max = 1.0;

    double f, g;
    if (a + b <= share) {
        f = g = 1.0;
    } else if (b < share && a / (share - b) <= g_max) {
        f = g = a / (share - b);
    } else {
        f = (a + b * g_max) / share;
        g = g_max;
    }
    double f_max = SCHED_MAX_PERIOD_NS / (p > h ? p : h);
    if (f > f_max)
        f = f_max > 1.0 ? f_max : 1.0;
    if (g > f)
        g = f;

    memset(out, 0, sizeof(*out));
    out->factor = f;
    out->period_ns = to_ns(p * f);
    out->duration_ns = to_ns(d * g);
    out->heap_period_ns = to_ns(h * f);
    double window = start + t + r * d * g; /* one CPU window's stall */
    out->share = window / (p * f) + heap / (h * f);
    if (f > 1.0 + 1e-9)
        out->flags |= SCHED_LIMITED;
    if (f > 1.0 + 1e-9 && g < f * (1.0 - 1e-9))
        out->flags |= SCHED_DURATION_CAPPED;
    if (start > maxp)
        out->flags |= SCHED_START_OVER;
    if (heap > maxp)
        out->flags |= SCHED_HEAP_OVER;
    if (t + r * d * g > maxp)
        out->flags |= SCHED_STOP_OVER;
}

uint64_t sched_first_due(const struct cfg *c, const struct sched_plan *p, struct isoprof_rng *rng,
                         uint64_t now)
{
    double spread = c->sampling.cpu.jitter * (double)p->period_ns;
    return add_sat(now, (uint64_t)(isoprof_rng_unit(rng) * spread));
}

uint64_t sched_next_due(const struct cfg *c, const struct sched_plan *p, struct isoprof_rng *rng,
                        uint64_t now, uint64_t base)
{
    double period = (double)p->period_ns;
    double due = (double)base + period + offset(rng, c->sampling.cpu.jitter * period);
    return due <= (double)now ? now : to_ns(due);
}

uint64_t sched_heap_due(const struct cfg *c, const struct sched_plan *p, struct isoprof_rng *rng,
                        uint64_t now, uint64_t base)
{
    double period = (double)p->heap_period_ns;
    double due = (double)base + period + offset(rng, c->sampling.cpu.jitter * period);
    return due <= (double)now ? now : to_ns(due);
}

int sched_plan_stale(const struct cfg *c, const struct sched_plan *p, uint64_t now, uint64_t due)
{
    double limit = (double)p->period_ns * (1.0 + c->sampling.cpu.jitter);
    return (double)due > (double)now + limit;
}

void sched_account_charge(struct sched_account *a, uint64_t now, uint64_t pause_ns)
{
    if (pause_ns == 0)
        return;
    if (now < a->last_ns)
        now = a->last_ns; /* in order: the ring's times never go back */
    if (a->n == SCHED_ACCOUNT_EVENTS) {
        /* Full: the oldest joins the next, at the next one's (later) time. */
        unsigned i = a->first, j = (a->first + 1) % SCHED_ACCOUNT_EVENTS;
        a->ns[j] = a->ns[j] > UINT64_MAX - a->ns[i] ? UINT64_MAX : a->ns[j] + a->ns[i];
        a->first = j;
        a->n--;
    }
    unsigned k = (a->first + a->n) % SCHED_ACCOUNT_EVENTS;
    a->at[k] = now;
    a->ns[k] = pause_ns;
    a->n++;
    a->last_ns = now;
}

void sched_account_admit(struct sched_account *a, const struct cfg *c, uint64_t now, uint64_t cost)
{
    double cap = c->sampling.budget.pause_share * (double)c->sampling.budget.horizon_ns;
    if ((double)cost > cap)
        a->gate_ns = now;
}

/* Stalls ended after t (t == 0: all). */
static uint64_t spent_after(const struct sched_account *a, uint64_t t)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < a->n; i++) {
        unsigned k = (a->first + i) % SCHED_ACCOUNT_EVENTS;
        if (a->at[k] > t)
            sum = sum > UINT64_MAX - a->ns[k] ? UINT64_MAX : sum + a->ns[k];
    }
    return sum;
}

uint64_t sched_account_spent(const struct sched_account *a, const struct cfg *c, uint64_t now)
{
    uint64_t h = c->sampling.budget.horizon_ns;
    return spent_after(a, now > h ? now - h : 0);
}

uint64_t sched_account_ready(const struct sched_account *a, const struct cfg *c, uint64_t now,
                             uint64_t cost)
{
    double share = c->sampling.budget.pause_share;
    uint64_t h = c->sampling.budget.horizon_ns;
    uint64_t cap = to_ns(share * (double)h);
    if (cost > cap) {
        /* Over the cap on its own: alone in the horizon, and once what was
         * spent since the last such window started is share of the time
         * since (that window's own stalls with the rest). */
        uint64_t t = a->last_ns ? add_sat(a->last_ns, h) : 0;
        uint64_t g =
            a->gate_ns ? add_sat(a->gate_ns, to_ns((double)spent_after(a, a->gate_ns) / share)) : 0;
        t = t > g ? t : g;
        return t > now ? t : now;
    }
    uint64_t spent = sched_account_spent(a, c, now);
    if (spent <= cap - cost)
        return now;
    /* Wait for the oldest stalls to leave the horizon until the rest and
     * cost fit: the k-th leaves at its time + horizon. */
    for (unsigned i = 0; i < a->n; i++) {
        unsigned k = (a->first + i) % SCHED_ACCOUNT_EVENTS;
        uint64_t leaves = add_sat(a->at[k], h); /* out of (t - h, t] from t = leaves */
        if (leaves <= now)
            continue; /* already out: not in spent */
        spent = spent > a->ns[k] ? spent - a->ns[k] : 0;
        if (spent <= cap - cost)
            return leaves;
    }
    return add_sat(a->last_ns, h);
}

/*
 * schedule.h - the duty-cycle planner: when an isolate's next window is
 * due. (Not sched.h: the daemon's include directory is public, and that
 * name is libc's.)
 *
 * Pure decisions over (config, random draw, now): no state of their own,
 * no clock, no I/O. windows.c keeps the state and asks these; a unit test
 * can call them with any time and a seeded generator. The cost budget
 * (sampling.budget: how much of an isolate's time its windows may stall it)
 * is here too: the plan that stretches a costly isolate's periods, and the
 * account that holds it to its share.
 *
 * Times are CLOCK_MONOTONIC ns.
 */
#ifndef ISOPROF_AGENT_SCHEDULE_H
#define ISOPROF_AGENT_SCHEDULE_H

#include "base.h"
#include "config.h"

#include <stdint.h>

/* What an isolate's windows cost it, as measured (windows.c keeps the
 * measures): the stall of each call as its CDP round trip, 0 while not
 * measured yet. A stop's stall is stop_ns + stop_ns_s x the window's
 * length in s: mostly fixed on a large app (V8 writes every node of the
 * profile, and which functions a window meets saturates quickly), growing
 * with the length on a small one (the samples). The two parts can be told
 * apart only from windows of different lengths (stop_fit); until then the
 * whole stall is taken as growing with the length, the safe guess for
 * max_pause, and stop_len_ns says what length it was measured at. */
struct sched_cost {
    uint64_t start_ns;    /* Profiler.start */
    uint64_t stop_ns_s;   /* Profiler.stop, ns per second of window */
    uint64_t heap_ns;     /* HeapProfiler.getSamplingProfile */
    uint64_t stop_ns;     /* Profiler.stop, the part that does not grow (stop_fit only) */
    int stop_fit;         /* the two parts come from windows of different lengths */
    uint64_t stop_len_ns; /* the longest window a stop was measured after */
};

enum {
    SCHED_LIMITED = 1u << 0,         /* the budget stretched the periods */
    SCHED_START_OVER = 1u << 1,      /* Profiler.start alone is over max_pause */
    SCHED_HEAP_OVER = 1u << 2,       /* a heap window alone is over max_pause */
    SCHED_DURATION_CAPPED = 1u << 3, /* windows could not lengthen as far as
                                      * the periods stretched */
    SCHED_STOP_OVER = 1u << 4,       /* the planned window's stop is over max_pause */
};

/* The schedule an isolate follows: the config's periods and duration, or,
 * when its windows cost more than sampling.budget allows, longer and rarer
 * windows. */
struct sched_plan {
    uint64_t period_ns, duration_ns, heap_period_ns;
    double factor;          /* both periods x factor (1: the config's) */
    double share;           /* expected share of wall time stalled */
    uint64_t credit_cap_ns; /* the most stall credit an idle isolate saves */
    unsigned flags;         /* SCHED_* */
};

/* The plan for an isolate of cost k under c (k all 0: the config's own).
 * The rule, with S the start's stall, T + r x length the stop's, H a heap
 * window's, p, d, h the configured CPU period, duration and heap period, s
 * the share: every period is multiplied by the least f >= 1 with
 *     (S + T + r x d x g) / (p x f) + H / (h x f) <= s
 * where the duration grows with the period (g = f) to keep the duty cycle,
 * as far as max_duration and max_pause (T + r x d x g <= max_pause) let
 * it. A stop already over max_pause at d whose parts are not known yet may
 * try a window twice as long as the longest measured, so that the next
 * plans can tell a fixed stop (lengthen: it costs nothing more) from one
 * that grows (do not). */
void sched_plan(const struct cfg *c, const struct sched_cost *k, struct sched_plan *out);

/* An isolate just attached (or its plan was dropped by a reload): its first
 * CPU window, at a uniform random point within jitter x period of now, so
 * isolates attached together spread out. */
uint64_t sched_first_due(const struct cfg *c, const struct sched_plan *p, struct isoprof_rng *rng,
                         uint64_t now);
/* The CPU window after one that started at base (or, for one that never
 * started, was due at base): a period later, moved by a uniform offset of
 * +-jitter x period, and never before now. */
uint64_t sched_next_due(const struct cfg *c, const struct sched_plan *p, struct isoprof_rng *rng,
                        uint64_t now, uint64_t base);
/* The next heap window after one taken at base: every heap period
 * +-jitter, never before now, or exactly anomaly.memory.heap_period after
 * now while a memory episode is open. */
uint64_t sched_heap_due(const struct cfg *c, const struct sched_plan *p, struct isoprof_rng *rng,
                        uint64_t now, uint64_t base, int episode_open);
/* A plan made under an old config that a new one would not have made: due
 * further ahead than a period (plus jitter) of the new plan. */
int sched_plan_stale(const struct cfg *c, const struct sched_plan *p, uint64_t now, uint64_t due);

/* The stall credit of one isolate: it grows at pause_share of wall time up
 * to the plan's cap, and every measured stall is taken from it, whatever
 * the window was for. A scheduled window starts only while it is not
 * negative, so over any span T an isolate is stalled by its windows at most
 * pause_share x T + credit_cap + one window's cost. */
struct sched_account {
    int64_t credit_ns;
    uint64_t at_ns; /* when credit_ns was last brought up to date (0: never) */
};

/* Bring a's credit up to now. */
void sched_account_accrue(struct sched_account *a, const struct cfg *c, const struct sched_plan *p,
                          uint64_t now);
/* Take a measured stall. */
void sched_account_charge(struct sched_account *a, uint64_t pause_ns);
/* When a scheduled window may start: now if the credit is not negative,
 * else when it will be back to 0. a must be up to date. */
uint64_t sched_account_ready(const struct sched_account *a, const struct cfg *c, uint64_t now);

#endif

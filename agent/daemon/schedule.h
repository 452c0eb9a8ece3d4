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
 * account that holds it to its share over every span of the horizon.
 *
 * Times are CLOCK_MONOTONIC ns.
 */
#ifndef ISOPROF_AGENT_SCHEDULE_H
#define ISOPROF_AGENT_SCHEDULE_H

#include "base.h"
#include "config.h"

#include <stdint.h>

/* What an isolate's windows cost it, as measured (windows.c keeps the
 * measures): the stall of each call, from the request written to the
 * reply's arrival at the socket, 0 while not
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
    double factor;  /* both periods x factor (1: the config's) */
    double share;   /* expected share of wall time stalled */
    unsigned flags; /* SCHED_* */
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
 * +-jitter, never before now. (A memory episode's heap windows are the
 * memory watch's to time: memwatch.h.) */
uint64_t sched_heap_due(const struct cfg *c, const struct sched_plan *p, struct isoprof_rng *rng,
                        uint64_t now, uint64_t base);
/* A plan made under an old config that a new one would not have made: due
 * further ahead than a period (plus jitter) of the new plan. */
int sched_plan_stale(const struct cfg *c, const struct sched_plan *p, uint64_t now, uint64_t due);

/* What an isolate's windows stalled it, as the app itself would count it:
 * each measured stall at the time it ended, kept for the budget's horizon
 * (sampling.budget.horizon). pause_share is a cap over every span of that
 * length, counted from attach, not an average: a scheduled window starts
 * only when the stalls of the horizon before it, those still to come of
 * the windows open (reserved), and its own (estimated) fit in
 * pause_share x horizon. So any span of one horizon holds at most that,
 * as long as the estimates hold, beside the anomaly and on-demand windows,
 * which never wait but are charged. A window whose own estimate is over
 * the cap starts only once a whole horizon passed without any stall, and
 * once the stalls since the last such window started are pause_share of
 * the time since: it stands alone in every span of one horizon, and its
 * share over longer spans stays pause_share. At most SCHED_ACCOUNT_EVENTS stalls are kept; a
 * stall past that is added to the next oldest, counted later than it
 * happened, which only keeps it in the sums longer. */
#define SCHED_ACCOUNT_EVENTS 32
struct sched_account {
    uint64_t at[SCHED_ACCOUNT_EVENTS]; /* when each stall ended, a ring, oldest first */
    uint64_t ns[SCHED_ACCOUNT_EVENTS];
    unsigned first, n;
    uint64_t last_ns; /* the latest stall's end (0: none yet) */
    uint64_t gate_ns; /* the latest window over the cap let start (sched_account_admit; 0: none) */
};

/* Take a stall of pause_ns that ended at now. */
void sched_account_charge(struct sched_account *a, uint64_t now, uint64_t pause_ns);
/* A scheduled window of cost starts at now (sched_account_ready said it
 * may). */
void sched_account_admit(struct sched_account *a, const struct cfg *c, uint64_t now, uint64_t cost);
/* The stall charged in the horizon up to now: (now - horizon, now]. */
uint64_t sched_account_spent(const struct sched_account *a, const struct cfg *c, uint64_t now);
/* When a scheduled window whose stalls (its own, estimated, and those
 * still to come of the windows open) add up to cost may start: now if
 * they fit the horizon, else the first time they will, as the stalls
 * charged leave it. */
uint64_t sched_account_ready(const struct sched_account *a, const struct cfg *c, uint64_t now,
                             uint64_t cost);

#endif

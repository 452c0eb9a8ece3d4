/*
 * schedule.h - the duty-cycle planner: when an isolate's next window is
 * due. (Not sched.h: the daemon's include directory is public, and that
 * name is libc's.)
 *
 * Pure decisions over (config, random draw, now): no state of their own,
 * no clock, no I/O. windows.c keeps the state and asks these; a unit test
 * can call them with any time and a seeded generator. The cost budget
 * (how much of an isolate's time windows may take) belongs here too.
 *
 * Times are CLOCK_MONOTONIC ns.
 */
#ifndef ISOPROF_AGENT_SCHEDULE_H
#define ISOPROF_AGENT_SCHEDULE_H

#include "base.h"
#include "config.h"

#include <stdint.h>

/* An isolate just attached (or its plan was dropped by a reload): its first
 * CPU window, at a uniform random point within jitter x period of now, so
 * isolates attached together spread out. */
uint64_t sched_first_due(const struct cfg *c, struct isoprof_rng *rng, uint64_t now);
/* The CPU window after one that started at base (or, for one that never
 * started, was due at base): a period later, moved by a uniform offset of
 * +-jitter x period, and never before now. */
uint64_t sched_next_due(const struct cfg *c, struct isoprof_rng *rng, uint64_t now, uint64_t base);
/* The next heap window: every sampling.heap.period +-jitter, or exactly
 * every anomaly.memory.heap_period while a memory episode is open. */
uint64_t sched_heap_due(const struct cfg *c, struct isoprof_rng *rng, uint64_t now,
                        int episode_open);
/* Whether a scheduled window may take a slot now, with slots held. */
int sched_slot_free(const struct cfg *c, unsigned slots);
/* A plan made under an old config that a new one would not have made: due
 * further ahead than a period (plus jitter) of the new config. */
int sched_plan_stale(const struct cfg *c, uint64_t now, uint64_t due);

#endif

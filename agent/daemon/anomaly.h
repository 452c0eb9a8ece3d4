/*
 * anomaly.h - episodes, the memory watch's glue, OOM suspicion, latency (anomaly.c). Declared apart
 * from daemon.h, which holds the structs every module shares, so that a file includes what it
 * calls.
 */
#ifndef ISOPROF_AGENT_ANOMALY_H
#define ISOPROF_AGENT_ANOMALY_H

#include "daemon.h"

/* anomaly.c - episodes, memory watch, OOM suspicion, latency glue */
/* READY target t attached: its memory watch starts afresh (its limit is
 * learned again: the process may have restarted with other flags). */
void anomaly_attached(struct target *t);
/* A Runtime.getHeapUsage result (bytes in use) for READY target t. While
 * t's limit is not known (memory_limit auto), the first poll starts a
 * thread-pool job that reads it (the process's command line and
 * environment in /proc; for a configured endpoint, its process is found by
 * its port first); until it answers, nothing is flagged. */
void anomaly_memory(struct target *t, uint64_t used);
/* A heap window pinned to pin stalled t pause_ns: charged to t's
 * memory_near_limit episode when it is that one. */
void anomaly_heap_cost(struct target *t, const struct episode *pin, uint64_t pause_ns);
/* The episode of kind k open on t, or NULL. */
struct episode *anomaly_memory_episode(const struct target *t, enum memwatch_kind k);
/* t's session ended or t left /json/list; gone_by_itself: not the agent's
 * doing. Flags oom_suspected when its last memory was near the limit, and
 * ends its open episode. */
void anomaly_target_gone(struct target *t, int gone_by_itself);
/* The latency listener and detector, if anomaly.latency.listen is set. A
 * listener that cannot bind is logged and left off: the agent runs on. */
int anomaly_start(struct agent *a); /* -ENOMEM, else 0 */
/* The DogStatsD listener's counts: 1 with *out, 0 when it is off. */
struct statsd_counts;
int anomaly_statsd_counts(const struct agent *a, struct statsd_counts *out);
void anomaly_stop(struct agent *a); /* closes the handles (shutdown) */
void anomaly_free(struct agent *a); /* after the loop ran dry */

#endif

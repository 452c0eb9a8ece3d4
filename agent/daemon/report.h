/*
 * report.h - the bodies of GET /status and GET /metrics (report.c). Declared apart from daemon.h,
 * which holds the structs every module shares, so that a file includes what it calls.
 */
#ifndef ISOPROF_AGENT_REPORT_H
#define ISOPROF_AGENT_REPORT_H

#include "daemon.h"

/* report.c - the bodies of GET /status (JSON) and GET /metrics (Prometheus
 * text format 0.0.4), built on the loop from the agent's state and a cache
 * of the store's figures that a thread-pool job refreshes. Both return an
 * allocation (isoprof_free) of *len bytes, or NULL on ENOMEM. Loop thread;
 * callable before report_start and after report_stop (the store figures
 * are then null / 0 and the loop lag 0). The JSON is one compact object,
 * valid UTF-8 (label bytes that are not are replaced by U+FFFD). */
char *report_status(struct agent *a, size_t *len);
char *report_metrics(struct agent *a, size_t *len);
/* report_start - every 5 s (the first at once) one thread-pool job reads
 * store_stat into the cache; every 1 s a timer measures how late it fired
 * (the loop lag). a->report is set. Errors: -ENOMEM (nothing started). */
int report_start(struct agent *a);
/* report_stop - close both timers; a->report becomes NULL and its memory is
 * freed by the loop once the timers closed and a running job finished (the
 * store must stay open until the loop ran dry). No-op without report_start. */
void report_stop(struct agent *a);
/* "closed", "evicted", "protocol_error", "oversized", "timeout",
 * "connect_failed", "agent"; NULL outside enum agent_drop_reason. */
const char *report_drop_name(unsigned reason);

#endif

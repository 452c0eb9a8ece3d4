/*
 * procs.h - host process discovery (discovery.processes) (procs.c). Declared apart from daemon.h,
 * which holds the structs every module shares, so that a file includes what it calls.
 */
#ifndef ISOPROF_AGENT_PROCS_H
#define ISOPROF_AGENT_PROCS_H

#include "daemon.h"

/* procs.c - host process discovery (discovery.processes): every
 * discovery.interval a thread-pool job scans /proc (procscan.h); the loop
 * then adds the loopback listeners of matching processes as found
 * endpoints (each probed once with /json/version), drops those of
 * processes gone, names the process (pid, container) of configured
 * endpoints, and, with activate, sends SIGUSR1 to Node processes that
 * opted in with --inspect-port and have no inspector open. */
int procs_start(struct agent *a);   /* a->procs set when enabled; -ENOMEM */
void procs_reload(struct agent *a); /* a->cfg was replaced: start, stop or re-read users */
void procs_stop(struct agent *a);   /* the agent stops: the timer closes, a scan running is
                                       let finish (its result dropped), a->procs freed then */
/* ep, found and probed, did not answer as an inspector: not probed again
 * for the life of its process. */
void procs_not_inspector(struct endpoint *ep);
/* The "discovery" object of GET /status (report.c), appended to b. */
struct isoprof_buf;
int procs_status(struct agent *a, struct isoprof_buf *b);

#endif

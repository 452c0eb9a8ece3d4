/*
 * agent.h - the daemon as one call.
 *
 * agent_run() opens the store, starts discovery and the schedule on a
 * fresh libuv loop and runs until SIGINT or SIGTERM. On a signal it stops
 * the windows that are open, stores what they captured, closes the store
 * and returns, all within about 2 s.
 */
#ifndef ISOPROF_AGENT_H
#define ISOPROF_AGENT_H

#include "config.h"

/*
 * Run the daemon with cfg (borrowed for the call). Returns 0 after a clean
 * signal-driven stop; a negative code when start-up failed (the reason is
 * logged). Loop thread: the calling thread.
 */
int agent_run(struct cfg *cfg);

#endif

/*
 * budget.h - the daemon's memory budget, and the input caps derived from
 * it.
 *
 * Whoever answers on an inspector port can send the agent anything, so
 * every input that can grow the daemon is capped, and the caps add up to
 * one figure the daemon stays within, worst case, whatever the peers send:
 * AGENT_MEMORY_BUDGET. The service unit's MemoryMax sits above it
 * (packaging/isoprof.service); README.md, Security, gives the sum and how
 * it was measured.
 *
 *   base      AGENT_BASE_MEMORY: code, libraries, the loop's state, the
 *             windows waiting for the store (store.pending_max, at most
 *             16 MiB, while it fails to write), an upload request in flight, the
 *             control socket's bounded connections, and the sessions
 *             themselves (at most AGENT_MAX_TARGETS_PER_ENDPOINT per
 *             endpoint, each a few KiB with no read buffer while idle).
 *   messages  AGENT_MSG_BUDGET: every inspector message byte held at once,
 *             on every session together: being received, waiting for the
 *             writer, and the one being converted (struct ws_budget). One
 *             message is at most AGENT_MSG_MAX (past it the session is
 *             dropped, reason "oversized"). A message the budget cannot hold
 *             is read and dropped as it comes: the call it answers fails
 *             and the session carries on. A message must be complete
 *             WS_MESSAGE_MS (30 s) after it began, or its session is
 *             dropped, so a peer that stops half way holds nothing for long.
 *   convert   AGENT_CONVERT_MEMORY: the working set of the one conversion
 *             that runs at a time (writer.c), beside its input: profile
 *             nodes (PPROF_DEFAULT_MAX_NODES, ~140 bytes each at most),
 *             kept samples (PPROF_MAX_KEPT_SAMPLES) and the pprof output
 *             (pprof_output_cap, at most PPROF_MAX_CONVERT_OUTPUT); or the
 *             retained profile of a heap snapshot (snapshot.c,
 *             heapsnap_retained), its whole budget: a snapshot whose nodes
 *             would not fit is refused when its node_count is read, and
 *             its edges and the dominators' work go to a spill file.
 */
#ifndef ISOPROF_AGENT_BUDGET_H
#define ISOPROF_AGENT_BUDGET_H

#include <stddef.h>

#define AGENT_MIB ((size_t)1 << 20)

#define AGENT_BASE_MEMORY (32 * AGENT_MIB)
#define AGENT_MSG_BUDGET (64 * AGENT_MIB)
#define AGENT_MSG_MAX (48 * AGENT_MIB)
/* ... of which messages over WS_SMALL_MESSAGE (256 KiB) may not use the
 * last AGENT_MSG_RESERVE: small replies and events get through while big
 * ones fill the rest. */
#define AGENT_MSG_RESERVE (4 * AGENT_MIB)
#define AGENT_CONVERT_MEMORY (96 * AGENT_MIB)
#define AGENT_MEMORY_BUDGET (AGENT_BASE_MEMORY + AGENT_MSG_BUDGET + AGENT_CONVERT_MEMORY)

/* Targets one endpoint's /json/list may name; more are ignored (logged). */
#define AGENT_MAX_TARGETS_PER_ENDPOINT 256

_Static_assert(AGENT_MSG_MAX <= AGENT_MSG_BUDGET, "one message must fit the message budget");

#endif

/*
 * threads.h - the worker threads of a Node or Deno target (threads.c). Declared apart from
 * daemon.h, which holds the structs every module shares, so that a file includes what it calls.
 */
#ifndef ISOPROF_AGENT_THREADS_H
#define ISOPROF_AGENT_THREADS_H

#include "daemon.h"

/* threads.c - the worker threads of a Node (or Deno) target, through the
 * NodeWorker domain of its main thread's session: each attached worker is
 * a target of its own (t->parent set), profiled, watched and flagged like
 * the main thread. A new worker waits for the agent (waitForDebuggerOnStart)
 * only until its heap sampler runs, at most THREADS_HOLD_MS. */
#define THREADS_HOLD_MS 2000
/* How long a main thread's session stays open once no new worker waits,
 * for the attaches of workers that were told to wait before (threads.c). */
#define THREADS_FENCE_MS 500
/* Attaches per main thread: a burst of threads.max, then this many a second. */
#define THREADS_ATTACH_PER_S 100
/* Worker announcements (attachedToWorker) per endpoint, whatever becomes of
 * them: a burst of THREADS_ANNOUNCE_BURST x threads.max (at least
 * THREADS_ANNOUNCE_BURST_MIN), then this many a second. Past it the endpoint's workers go unwatched
 * (NodeWorker.disable) for THREADS_CAPPED_MS, doubled each time it comes back within the hour, to
 * at most THREADS_CAPPED_MAX_MS. */
#define THREADS_ANNOUNCE_PER_S 100
#define THREADS_ANNOUNCE_BURST 4
#define THREADS_ANNOUNCE_BURST_MIN 256
#define THREADS_CAPPED_MS 60000
#define THREADS_CAPPED_MAX_MS 960000
/* Called every memory poll of a main thread: its workers are watched again
 * once its endpoint's cap is over. */
void threads_tick(struct target *t);
/* The main thread t is READY: ask for its workers (targets[].threads.enabled). */
void threads_enable(struct target *t);
/* An event of t's session: NodeWorker.attachedToWorker / detachedFromWorker
 * (others are ignored). session: a worker's own events go to its target. */
void threads_on_event(struct target *t, const char *session, const char *method, yajl_val params);
/* A worker session of t sent what is not CDP: that worker is dropped. */
void threads_worker_error(struct target *t, const char *session, const char *why);
/* t's session ended (or t is removed): every worker of it goes, gone by
 * itself when gone_by_itself (the process died). */
void threads_parent_gone(struct target *t, int gone_by_itself);
/* t's config was reloaded: start watching its workers, or stop (its
 * workers are let go, then a fence, then NodeWorker.disable). */
void threads_reload(struct target *t);
/* The agent stops: every main thread watching workers fences (no new
 * worker waits; one already told to wait is released as it shows up).
 * threads_fencing counts those still fencing; each end calls
 * agent_check_drained. */
void threads_stop(struct agent *a);
unsigned threads_fencing(const struct agent *a);
/* A worker's heap sampler answered (started or not): release it. No-op
 * for a target that is not held. */
void threads_release(struct target *t);
/* Drop worker w (released, detached, its calls forgotten, removed): it
 * misbehaved, or the agent cannot keep it. */
void threads_drop(struct target *w, const char *why);
/* A worker's thread label from its NodeWorker workerInfo (title, url,
 * workerId; each may be NULL): "<name>#<id>", the name being the Worker's
 * name, else its script's file name, else "worker" (threads.c). out holds
 * at least 2 bytes; the label is at most 64 bytes of printable ASCII. */
void threads_label(const char *title, const char *url, const char *id, char *out, size_t cap);

/* Worker w leaves its main thread (target_remove): released if held,
 * NodeWorker.detach sent, its pending calls forgotten, counted. */
void threads_unlink(struct target *w);

#endif

/*
 * snapshot.h - heap snapshots near the limit and on demand, their retained profiles (snapshot.c).
 * Declared apart from daemon.h, which holds the structs every module shares, so that a file
 * includes what it calls.
 */
#ifndef ISOPROF_AGENT_SNAPSHOT_H
#define ISOPROF_AGENT_SNAPSHOT_H

#include "daemon.h"

/* snapshot.c - heap snapshots near the limit and their retained profiles */
struct snap_run;
/* The result label of isoprof_snapshots_total (enum snap_result). */
const char *snapshot_result_name(unsigned r);
/* A memory poll of t (used bytes): the on-demand snapshot waiting, if it
 * can start now; else, when due is an episode owed a snapshot, its
 * snapshot if one can be taken now. 1 when due's was tried (taken, or
 * skipped and said), 0 when it must wait for a later poll. */
int snapshot_poll(struct target *t, uint64_t used, struct episode *due);
/* On demand (ondemand.c): a snapshot of t for od (a reference is taken),
 * now or at the next memory poll that finds nothing of t in flight; its
 * answer is the retained profile. od is answered at once with why when it
 * cannot be taken (the skip rules, one already asked for). 0. */
int snapshot_ondemand(struct target *t, struct od_req *od);
/* t's session ended: an on-demand snapshot waiting to start is answered. */
void snapshot_target_gone(struct target *t);
/* An event of t's session (session: a worker's, or NULL): 1 if it was a
 * snapshot's chunk (consumed), 0 if not. */
int snapshot_on_event(struct target *t, const char *session, const char *method, yajl_val params);

/* A main-session event of t too big to parse on the loop (data[0..len),
 * a ws message): 1 if it was a chunk of t's snapshot (taken: unescaped and
 * stored off the loop), 0 if not (the caller drops it). */
int snapshot_on_big_event(struct target *t, const char *method, char *data, size_t len);
/* Whether t's snapshot is being taken (t is stopped by V8 meanwhile). */
int snapshot_busy(const struct target *t);
/* The host's MemAvailable in bytes ($ISOPROFD_MEMINFO or /proc/meminfo),
 * -1 if unknown. Any thread. */
int64_t snapshot_mem_available(void);
/* The retained profile of snapshot window id as a pprof at time_ns,
 * within the conversion's memory budget (AGENT_CONVERT_MEMORY; the edges
 * and the dominators' work spilled to an unlinked file in dir, the
 * store's directory): 0 with *out filled, or an error with *why
 * (allocated) saying what; a snapshot too big for the budget is refused
 * when its node count is read. Thread pool (the writer's conversion
 * stage). */
struct pprof_result;
int snapshot_retained(struct store *s, const char *dir, uint64_t id, uint64_t time_ns,
                      struct pprof_result *out, char **why);

#endif

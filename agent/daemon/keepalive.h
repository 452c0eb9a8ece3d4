/*
 * keepalive.h - warm windows' driver (the keep-alive console profile) (keepalive.c). Declared apart
 * from daemon.h, which holds the structs every module shares, so that a file includes what it
 * calls.
 */
#ifndef ISOPROF_AGENT_KEEPALIVE_H
#define ISOPROF_AGENT_KEEPALIVE_H

#include "daemon.h"

/* --- keepalive.c: warm windows (warm.h) --- */

/* The choice made again and the keep-alive's action due sent (the memory
 * poll's timer and the attach call it). */
void keepalive_tick(struct target *t);
/* A console-profile event on t's session (session: a worker's, or NULL):
 * 1 if it was one (consumed). */
int keepalive_on_event(struct target *t, const char *session, const char *method, yajl_val params);
/* The same for an event too big to parse (data borrowed): 1 if it was a
 * console profile's end (the caller frees data). */
int keepalive_on_big_event(struct target *t, const char *method, const char *data, size_t len);
/* A CPU window is starting: warm or cold (t->ka.win_warm). */
void keepalive_window_start(struct target *t);
/* The CPU window's stop was answered: the keep-alive's interval if the
 * window was warm (its profiler sampled it), else 0. */
uint64_t keepalive_window_end(struct target *t);
/* A window's start or stop stalled t pause_ns: a cold window's feeds auto. */
void keepalive_window_cost(struct target *t, enum win_call call, uint64_t pause_ns);
/* The session ended: V8 ended the keep-alive with it. */
void keepalive_detached(struct target *t);

#endif

/*
 * ondemand.h - windows a person asked for (POST /profile) (ondemand.c). Declared apart from
 * daemon.h, which holds the structs every module shares, so that a file includes what it calls.
 */
#ifndef ISOPROF_AGENT_ONDEMAND_H
#define ISOPROF_AGENT_ONDEMAND_H

#include "daemon.h"

/* ondemand.c - windows a person asked for (POST /profile). */
struct od_waiter;
/*
 * The answer to one request: err 0 and gz (the gzip'd pprof, merged when
 * several isolates were asked; transferred to the callee, isoprof_free) of
 * len bytes; or err < 0 with why (static or borrowed for the call) saying
 * what went wrong (a target gone, a conversion error, shutdown).
 */
typedef void (*od_done_cb)(int err, const char *why, uint8_t *gz, size_t len, void *arg);
/*
 * ondemand_start - take one window of type (STORE_TYPE_CPU: duration_ns
 * long at interval_ns; STORE_TYPE_HEAP: a getSamplingProfile now;
 * STORE_TYPE_SNAPSHOT, n 1: a heap snapshot, answered with its retained
 * profile, see snapshot_ondemand) on each
 * of the n READY targets t[0..n), store each (flagged
 * STORE_FLAG_ON_DEMAND, uploaded like any other), and call cb once with
 * the result. A CPU window of a target that is already recording waits
 * for that window to end, then starts at once, outside max_concurrent;
 * requests for the same target, type, duration and interval while one is
 * pending share its window. *out (optional) identifies the request for
 * ondemand_cancel until cb runs. Errors (cb not called): -EINVAL, -ENOMEM,
 * -ESHUTDOWN (the agent is stopping), -EAGAIN (a target not READY).
 */
int ondemand_start(struct agent *a, struct target *const *t, size_t n, uint8_t type,
                   uint64_t duration_ns, uint64_t interval_ns, od_done_cb cb, void *arg,
                   struct od_waiter **out);
/* What a person asked for (POST /profile, as the root copies it from the
 * control socket's request). Strings borrowed for the call. */
struct od_ask {
    const char *worker;
    const char *version; /* NULL: any */
    const char *thread;  /* NULL: any (an isolate named by id); else its label */
    int has_thread;      /* the thread was named (for the refusal's words) */
    int has_isolate, all;
    uint32_t isolate;
    uint8_t type;
    uint64_t duration_ns, interval_ns;
};
/* Why it was refused: an HTTP status (400-599) and the words; for a 409
 * because the worker has several isolates, their ids (at most
 * OD_REFUSAL_ISOLATES; why says how many there are). */
#define OD_REFUSAL_ISOLATES 64
#define OD_LABEL_MAX 1024
struct od_refusal {
    int status;
    char why[3 * OD_LABEL_MAX + 200];
    uint32_t isolates[OD_REFUSAL_ISOLATES];
    size_t nisolates;
};
/*
 * ondemand_request - POST /profile's entry point: the READY isolates r
 * names (worker; version, isolate and thread when given), one of them or
 * all (all=1), handed to ondemand_start. 0 as ondemand_start; else ref
 * says how to answer (404: nothing named, 503: none attached or stopping,
 * 409: several and not all=1, or too many queued; 400, 500) and cb is not
 * called.
 */
int ondemand_request(struct agent *a, const struct od_ask *r, od_done_cb cb, void *arg,
                     struct od_waiter **out, struct od_refusal *ref);
/* The requester went away: cb will not be called; the windows are still
 * taken and stored. */
void ondemand_cancel(struct od_waiter *w);
/* Shutdown: every pending request is answered with -ESHUTDOWN. */
void ondemand_stop(struct agent *a);
/* The glue the target, the schedule and the writer use (loop thread). */
struct od_req;
struct pprof_buf;
struct od_req *ondemand_ref(struct od_req *r); /* NULL-safe */
void ondemand_unref(struct od_req *r);         /* NULL-safe */
/* r's window ended: err 0 with the converted pprof (its buffer is taken),
 * or an error and why. Releases the caller's reference to r. NULL-safe. */
void ondemand_window_done(struct od_req *r, int err, struct pprof_buf *pprof, const char *why);
/* The same, as windows.c's request tokens (struct win_ops). */
void ondemand_win_ref(void *od);
void ondemand_win_unref(void *od);
void ondemand_win_fail(void *od, int err, const char *why);

#endif

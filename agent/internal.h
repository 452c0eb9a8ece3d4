/*
 * internal.h - state shared by the daemon's modules (discover, target,
 * sched, writer, daemon). Nothing here is used by the CLI.
 *
 * DESIGN: one libuv loop thread owns every structure below. The thread pool
 * only ever sees a writer job (raw profile text in, pprof + store result
 * out) and hands it back through the after-work callback.
 */
#ifndef ISOPROF_AGENT_INTERNAL_H
#define ISOPROF_AGENT_INTERNAL_H

#include "cdp.h"
#include "config.h"
#include "http.h"
#include "store.h"

#include <stdint.h>
#include <uv.h>

struct agent;

/* Counters the daemon reports (logged at exit; served by later status work). */
struct agent_counters {
    uint64_t windows_started, windows_stored, windows_lost, windows_delayed, windows_skipped;
    uint64_t conversion_errors, store_errors, windows_evicted, windows_dropped;
    uint64_t sessions_attached, sessions_dropped, discovery_errors;
};

/* One configured inspector endpoint, polled for its targets. */
struct endpoint {
    struct agent *a;
    const struct cfg_target *cfg; /* borrowed from a->cfg */
    char *runtime;                /* from /json/version, NULL until known */
    uv_timer_t timer;
    struct http_req *inflight;
    uint64_t backoff_ms;
    int reachable;
    int failures;
    size_t last_skipped; /* unusable /json/list entries at the last poll */
};

enum target_state {
    TARGET_BACKOFF,    /* not connected; timer schedules the next attach */
    TARGET_CONNECTING, /* WebSocket / Profiler.enable in flight */
    TARGET_READY,      /* attached; the schedule runs */
};

enum window_state {
    WINDOW_NONE,
    WINDOW_QUEUED,   /* due, waiting for a free slot under max_concurrent */
    WINDOW_STARTING, /* setSamplingInterval/start in flight */
    WINDOW_RUNNING,
    WINDOW_STOPPING, /* Profiler.stop in flight */
};

/* One isolate on one endpoint. */
struct target {
    struct agent *a;
    struct endpoint *ep;
    char *id;       /* the /json/list id */
    char *ws_path;  /* path of webSocketDebuggerUrl ("/uuid") */
    char *worker;   /* label */
    char *version;  /* label */
    uint32_t isolate;
    enum target_state state;
    struct cdp_session *cdp;
    uv_timer_t timer;      /* next window / window end / reattach */
    int listed;            /* seen in the latest /json/list */
    int removing;          /* vanished; freed once cdp and timer closed */
    int pending_closes;
    uint64_t backoff_ms;
    const char *close_reason; /* static text when the agent itself closed the session */
    uint64_t attached_mono_ns;
    enum window_state win;
    uint64_t win_start_mono_ns;
    uint64_t win_interval_ns;
    uint64_t next_due_mono_ns;
    struct target *next;        /* a->targets */
    struct target *queue_next;  /* a->delay queue */
};

struct writer;

struct agent {
    uv_loop_t *loop;
    struct cfg *cfg;
    struct store *store;
    struct http_client *http;
    struct writer *writer;
    struct endpoint *endpoints;
    size_t nendpoints;
    struct target *targets;
    struct target *queue_head, *queue_tail; /* windows delayed by the cap */
    unsigned running_windows;
    uint32_t isolate_base, isolate_seq;
    uint64_t rng;
    uv_signal_t sigint, sigterm;
    uv_timer_t shutdown_timer;
    int stopping;
    uint64_t stop_mono_ns;
    struct agent_counters n;
};

/* Pseudo-random numbers for jitter (xorshift, seeded from getrandom). */
uint64_t agent_rand(struct agent *a);
double agent_rand_unit(struct agent *a); /* [0, 1) */

/* discover.c */
int discover_start(struct agent *a);
void discover_stop(struct agent *a);

/* target.c */
/* One entry of /json/list, validated; strings borrowed for the call. */
struct discovered {
    const char *id, *path, *title, *url;
};
/* Attach new targets of ep, detach the ones no longer listed. */
void target_sync(struct endpoint *ep, const struct discovered *d, size_t n);
void target_remove(struct target *t);
/* Begin a CPU window at interval_ns on a READY target (called by sched). */
int target_start_window(struct target *t, uint64_t interval_ns);
/* Send Profiler.stop now if a window is running (shutdown, window end). */
int target_stop_window_now(struct target *t);
const char *target_runtime(const struct target *t);

/* sched.c - the duty-cycle planner */
/* t just attached: plan its first window. */
void sched_target_ready(struct target *t);
/* t's session ended or t is being removed: release its slot or queue place. */
void sched_target_gone(struct target *t);
/* t's window ended (stored, lost or skipped): free the slot, admit the next
 * delayed window, plan t's next one. */
void sched_window_done(struct target *t);
/* Shutdown: stop running windows, drop queued ones. */
void sched_stop_all(struct agent *a);
/* Windows currently in a slot (starting, running or stopping). */
unsigned sched_running(const struct agent *a);

/* writer.c */
struct writer_meta {
    const char *worker, *version, *runtime;
    uint32_t isolate;
    uint8_t type;
    uint32_t flags;
    uint64_t interval_ns;
};
int writer_init(struct agent *a, struct writer **out);
/* Queue a raw CDP reply for conversion and storage. raw is transferred. */
int writer_submit(struct writer *w, char *raw, size_t len, const struct writer_meta *m);
/* Nonzero while jobs are queued or in the thread pool. */
int writer_busy(const struct writer *w);
void writer_free(struct writer *w);

/* daemon.c */
void agent_maybe_finish(struct agent *a);

#endif

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
#include "upload.h"

#include <stdint.h>
#include <uv.h>

struct agent;

/* Counters the daemon reports (logged at exit; served by later status work). */
struct agent_counters {
    uint64_t windows_started, windows_stored, windows_lost, windows_delayed, windows_skipped;
    uint64_t conversion_errors, store_errors, windows_evicted, windows_dropped;
    uint64_t sessions_attached, sessions_dropped, discovery_errors;
    uint64_t heap_windows, heap_restarts, memory_polls_failed;
    uint64_t anomalies[STORE_ANOMALY_MAX + 1]; /* flagged, by kind */
    uint64_t anomaly_errors;                   /* anomalies the store could not record */
};

/*
 * One anomaly episode. The windows taken as its evidence hold a reference
 * and are pinned to it when stored. id is written once, by the writer's
 * store stage (thread pool), when the episode is recorded; later store
 * jobs read it there too. The loop thread only reads it after that job's
 * completion callback, which orders the accesses. Refcounted on the loop
 * thread only.
 */
struct episode {
    unsigned refs;
    uint64_t id; /* 0 until recorded (or if recording failed) */
    uint8_t kind;
    char *worker, *version;
    uint32_t isolate;
    uint64_t start_ns, end_ns; /* wall */
    uint64_t value, threshold;
    int open;
};

/* The memory polls that fell inside one window: exact min/max/last, and a
 * bounded sample of the values for the P999 (every step-th poll, the step
 * doubling whenever the sample fills). */
#define MEMACC_MAX 256
struct memacc {
    uint32_t n, step, skip;
    uint64_t min, max, last;
    uint32_t kib[MEMACC_MAX];
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
    char *id;      /* the /json/list id */
    char *ws_path; /* path of webSocketDebuggerUrl ("/uuid") */
    char *worker;  /* label */
    char *version; /* label */
    uint32_t isolate;
    enum target_state state;
    struct cdp_session *cdp;
    uv_timer_t timer; /* next window / window end / reattach */
    int listed;       /* seen in the latest /json/list */
    int removing;     /* vanished; freed once cdp and timer closed */
    int pending_closes;
    uint64_t backoff_ms;
    const char *close_reason;  /* static text when the agent itself closed the session */
    int close_reason_was_ours; /* the session that just ended was closed by the agent */
    uint64_t attached_mono_ns;
    enum window_state win;
    uint64_t win_start_mono_ns;
    uint64_t win_interval_ns;
    uint64_t next_due_mono_ns;
    uint8_t win_anomaly;     /* the running CPU window was taken for an anomaly of this kind */
    struct episode *win_pin; /* ... and is pinned to it (a reference) */
    /* heap sampling and memory */
    uv_timer_t heap_timer, mem_timer;
    int heap_on;       /* our HeapProfiler.startSampling succeeded */
    int heap_inflight; /* getSamplingProfile or startSampling in flight */
    int heap_restart_logged;
    int mem_inflight;
    uint8_t heap_anomaly;     /* the next heap window is for an anomaly of this kind */
    struct episode *heap_pin; /* ... pinned to it */
    uint64_t mem_last;        /* bytes, the latest poll; 0 before the first */
    struct memacc mem_cpu,
        mem_heap;               /* polls in the running CPU window / since the last heap window */
    struct episode *mem_ep;     /* open memory_near_limit episode */
    uint64_t mem_below_mono_ns; /* when memory fell back under the threshold (0: above) */
    uint64_t last_trigger_mono_ns; /* the rate limit of memory triggers */
    struct target *next;           /* a->targets */
    struct target *queue_next;     /* a->delay queue */
};

struct writer;

struct agent {
    uv_loop_t *loop;
    struct cfg *cfg;
    struct store *store;
    struct http_client *http;
    struct writer *writer;
    struct upl *upl;            /* NULL when upload.url is "" */
    struct upl_stats upl_final; /* its totals, taken when it closed */
    int upl_failing;            /* uplink.c: the last request failed */
    long upl_last_code;
    int upl_last_err;
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
    /* latency (anomaly.c) */
    struct statsd *statsd;
    struct latency *latency;
    uv_timer_t latency_timer;
    int latency_timer_on;
    struct lat_open *lat_open; /* open latency_p999_spike episodes */
    uint64_t statsd_garbage_logged, statsd_garbage_log_mono_ns;
};

/* Pseudo-random numbers for jitter (xorshift, seeded from getrandom). */
uint64_t agent_rand(struct agent *a);
double agent_rand_unit(struct agent *a); /* [0, 1) */

/* anomaly.c - episodes, memory watch, OOM suspicion, latency glue */
struct episode *episode_new(struct agent *a, uint8_t kind, const char *worker, const char *version,
                            uint32_t isolate, uint64_t value, uint64_t threshold);
struct episode *episode_ref(struct episode *e);
void episode_unref(struct episode *e);
void memacc_reset(struct memacc *m);
void memacc_add(struct memacc *m, uint64_t bytes);
/* The figures of m (all zero when it saw no poll). */
void memacc_figures(const struct memacc *m, struct store_mem *out);
/* A Runtime.getHeapUsage result (bytes in use) for READY target t. */
void anomaly_memory(struct target *t, uint64_t used);
/* t's session ended or t left /json/list; gone_by_itself: not the agent's
 * doing. Flags oom_suspected when its last memory was near the limit, and
 * ends its open episode. */
void anomaly_target_gone(struct target *t, int gone_by_itself);
/* The latency listener and detector, if anomaly.latency.listen is set. A
 * listener that cannot bind is logged and left off: the agent runs on. */
int anomaly_start(struct agent *a);
void anomaly_stop(struct agent *a); /* closes the handles (shutdown) */
void anomaly_free(struct agent *a); /* after the loop ran dry */

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
/* Take a heap window now (getSamplingProfile), for anomaly kind (0: the
 * schedule) and pinned to ep (may be NULL; a reference is taken). */
void target_heap_window(struct target *t, uint8_t kind, struct episode *ep);
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
/* An anomaly wants a CPU window on t now, at anomaly.cpu_interval, pinned
 * to ep: it starts at once (the cap does not hold it back), or, if a window
 * is already running, that window is pinned instead. */
void sched_anomaly_window(struct target *t, struct episode *ep);

/* writer.c */
struct writer_meta {
    const char *worker, *version, *runtime;
    uint32_t isolate;
    uint8_t type;
    uint32_t flags;
    uint64_t interval_ns; /* cpu: ns; heap: the sampling interval in bytes */
    uint8_t anomaly;      /* enum store_anomaly_kind */
    struct episode *pin;  /* borrowed; the writer takes its own reference */
    struct store_mem mem;
};
int writer_init(struct agent *a, struct writer **out);
/* Queue a raw CDP reply for conversion and storage. raw is transferred. */
int writer_submit(struct writer *w, char *raw, size_t len, const struct writer_meta *m);
/* Record episode e (new: op WRITER_EP_NEW; changed: WRITER_EP_UPDATE; new
 * and pinning the isolate's latest heap and CPU windows: WRITER_EP_OOM) in
 * the store, in order with the windows submitted before. The writer takes
 * a reference and a snapshot of e's fields. */
enum { WRITER_EP_NEW, WRITER_EP_UPDATE, WRITER_EP_OOM };
int writer_episode(struct writer *w, struct episode *e, int op);
/* Nonzero while jobs are queued or in the thread pool. */
int writer_busy(const struct writer *w);
void writer_free(struct writer *w);

/* daemon.c */
void agent_maybe_finish(struct agent *a);

/* uplink.c - the uploader from upload.* (secrets read from
 * their files), its events logged. 0 with a->upl NULL when upload is off;
 * a negative code (logged) when it cannot start. */
int agent_upload_start(struct agent *a);

#endif

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

#include "budget.h"
#include "cdp.h"
#include "config.h"
#include "http.h"
#include "store.h"
#include "upload.h"
#include "ws.h"

#include <stdint.h>
#include <uv.h>

struct agent;
/* A configuration kept alive after a reload replaced it. */
struct cfg_hold {
    struct cfg *cfg;
    struct cfg_hold *next;
};

/* Why an inspector session ended without the agent wanting it to (target.c
 * decides; isoprof_sessions_dropped_total{reason} reports, named by
 * report_drop_name). */
enum agent_drop_reason {
    AGENT_DROP_CLOSED,         /* the target closed it or the connection went away */
    AGENT_DROP_EVICTED,        /* workerd: another client took the isolate's one session */
    AGENT_DROP_PROTOCOL_ERROR, /* invalid JSON or WebSocket framing from the target */
    AGENT_DROP_OVERSIZED,      /* a message over the size cap */
    AGENT_DROP_TIMEOUT,        /* connect and upgrade too slow */
    AGENT_DROP_CONNECT_FAILED, /* refused, or the upgrade answered with an error */
    AGENT_DROP_AGENT,          /* the agent closed it (a call at attach failed) */
    AGENT_DROP_MAX
};

/* Counters the daemon reports: logged at exit, served by GET /status and
 * GET /metrics (report.c names every field: add a field there too). */
struct agent_counters {
    uint64_t windows_started, windows_stored, windows_lost, windows_delayed, windows_skipped;
    uint64_t conversion_errors, store_errors, windows_evicted, windows_dropped;
    uint64_t sessions_attached, sessions_dropped, discovery_errors;
    uint64_t heap_windows, heap_restarts, memory_polls_failed;
    uint64_t anomalies[STORE_ANOMALY_MAX + 1];        /* flagged, by kind */
    uint64_t anomaly_errors;                          /* anomalies the store could not record */
    uint64_t windows_stored_cpu, windows_stored_heap; /* windows_stored by type */
    uint64_t sessions_dropped_by[AGENT_DROP_MAX];     /* sessions_dropped by reason */
    /* control.c */
    uint64_t control_requests, control_errors, control_rejected_connections;
    /* anomaly.c: DogStatsD lines dropped, no room for a new worker/version series */
    uint64_t latency_refused;
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
    size_t last_skipped;   /* unusable /json/list entries at the last poll */
    size_t last_over;      /* usable entries past AGENT_MAX_TARGETS_PER_ENDPOINT, ditto */
    int kept;              /* discover_reload's mark */
    struct endpoint *next; /* a->endpoints, or a->retired_endpoints */
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
    int win_slot;    /* the window holds one of max_concurrent's slots (sched.c) */
    unsigned stalls; /* windows in a row whose start or stop went unanswered */
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
    /* wall start of the last window stored, per type (writer.c); 0: none yet */
    uint64_t last_cpu_ns, last_heap_ns;
    struct target *next;       /* a->targets */
    struct target *queue_next; /* a->delay queue */
    /* on-demand windows (ondemand.c); each pointer holds a reference */
    struct od_req *od_cpu;    /* CPU windows asked for, waiting their turn, first first */
    struct od_req *win_od;    /* the running CPU window is this request's */
    struct od_req *heap_od;   /* the next (or the running) heap window goes to it */
    uint64_t win_duration_ns; /* of the window starting or running */
};

struct writer;

struct agent {
    uv_loop_t *loop;
    struct cfg *cfg;
    struct ws_budget msg_budget; /* every inspector message byte held (budget.h) */
    struct store *store;
    struct http_client *http;
    struct writer *writer;
    struct upl *upl;           /* NULL when upload.url is "" */
    struct upl_stats upl_base; /* totals of uploaders closed (reload, shutdown) */
    int upl_failing;           /* uplink.c: the last request failed */
    int upl_restarting;        /* a reload closes the uploader; the new one starts after */
    long upl_last_code;
    int upl_last_err;
    struct endpoint *endpoints;         /* polled, in config order */
    struct endpoint *retired_endpoints; /* dropped by a reload; freed at exit */
    struct cfg_hold *retired_cfgs;      /* configs replaced by a reload (still referenced) */
    struct cfg *cfg_boot;               /* the config at start: restart-only options */
    uv_signal_t sighup;
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
    uint64_t latency_refused_logged, latency_refused_log_mono_ns; /* the refusal warning */
    /* control.c, report.c, ondemand.c */
    struct control *control;
    struct report *report;
    struct od_waiter *od_waiters; /* pending on-demand requests */
    uint64_t start_mono_ns;       /* for uptime */
    uv_timer_t notify_timer;      /* STATUS= for the service manager, under systemd */
    int notify_on;
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
/* Close the endpoints' timers (shutdown); discover_free after the loop ran
 * dry frees them, the retired ones too. */
void discover_close(struct agent *a);
void discover_free(struct agent *a);
/* a->cfg was replaced by next (SIGHUP): keep the endpoints next still
 * names (their targets and sessions carry on, relabelled if next gives
 * them other labels), retire the others with their targets, start the new
 * ones. */
int discover_reload(struct agent *a, const struct cfg *next);

/* target.c */
/* One entry of /json/list, validated; strings borrowed for the call. */
struct discovered {
    const char *id, *path, *title, *url;
};

/* A parsed /json/list: the usable entries d[0..n) (strings owned by the
 * list, each cut at 1 KiB), how many entries the list had, were unusable,
 * or were usable but past the cap. */
struct discover_list {
    struct discovered *d;
    size_t n, listed, skipped, over;
    char **own; /* the strings d[] points into, four an entry */
};
/*
 * discover_parse_list - parse and validate a /json/list body (len bytes),
 * keeping at most max usable entries. Nesting deeper than a list of flat
 * objects is refused before parsing, which streams (no tree): memory is
 * the kept entries' strings, whatever the body holds. 0, or
 * ISOPROF_EJSON / -ENOMEM with why[0..cap) saying what. On 0 the caller
 * frees l with discover_list_free. Pure: any thread (the fuzz target).
 */
int discover_parse_list(const char *body, size_t len, size_t max, struct discover_list *l,
                        char *why, size_t cap);
void discover_list_free(struct discover_list *l);
/* The runtime a /json/version body names ("node", "deno", "workerd", "v8"),
 * or NULL with why[0..cap) saying what is wrong. Pure, like the above. */
const char *discover_parse_version(const char *body, size_t len, char *why, size_t cap);
/* Attach new targets of ep, detach the ones no longer listed. */
void target_sync(struct endpoint *ep, const struct discovered *d, size_t n);
void target_remove(struct target *t);
/* Begin a CPU window at interval_ns on a READY target (called by sched). */
int target_start_window(struct target *t, uint64_t interval_ns);
/* Take a heap window now (getSamplingProfile), for anomaly kind (0: the
 * schedule) and pinned to ep (may be NULL; a reference is taken). 0 when
 * one is taken or already being taken; -EAGAIN when none can be (not
 * attached, sampler not running, the request not sent). */
int target_heap_window(struct target *t, uint8_t kind, struct episode *ep);
/* Send Profiler.stop now if a window is running (shutdown, window end). */
int target_stop_window_now(struct target *t);
const char *target_runtime(const struct target *t);
/* ep->cfg changed (reload): give t the labels it names. 0, or -EAGAIN when
 * t cannot be relabelled in place (a label the config no longer names is
 * derived at attach) and must be re-attached; -ENOMEM. */
int target_relabel(struct target *t);

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
/* t's Profiler.stop has been waiting SCHED_STOP_GRACE_MS: its slot goes to
 * the next window (the reply, if it comes, is still stored). */
void sched_release_slot(struct target *t);
#define SCHED_STOP_GRACE_MS 2000
/* Windows currently in a slot (starting, running or stopping). */
unsigned sched_running(const struct agent *a);
/* An anomaly wants a CPU window on t now, at anomaly.cpu_interval, pinned
 * to ep: it starts at once (the cap does not hold it back), or, if a window
 * is already running, that window is pinned instead. */
void sched_anomaly_window(struct target *t, struct episode *ep);
/* Start the on-demand window r on t now, outside the cap (t is not
 * recording; a window it had queued for a slot is replaced). 1 if it
 * started; 0 if not (r is then answered with the reason). */
int sched_ondemand_window(struct target *t, struct od_req *r);
/* The config was reloaded: admit delayed windows a higher cap lets in. */
void sched_reconfigure(struct agent *a);

/* writer.c */
struct writer_meta {
    const char *worker, *version, *runtime;
    uint32_t isolate;
    uint8_t type;
    uint32_t flags;
    uint64_t interval_ns; /* cpu: ns; heap: the sampling interval in bytes */
    uint8_t anomaly;      /* enum store_anomaly_kind */
    struct episode *pin;  /* borrowed; the writer takes its own reference */
    struct od_req *od;    /* borrowed; on success the writer takes its own reference
                             and answers it when the window is stored */
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
 * long at interval_ns; STORE_TYPE_HEAP: a getSamplingProfile now) on each
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
uint64_t ondemand_duration_ns(const struct od_req *r);
uint64_t ondemand_interval_ns(const struct od_req *r);
/* r's window ended: err 0 with the converted pprof (its buffer is taken),
 * or an error and why. Releases the caller's reference to r. NULL-safe. */
void ondemand_window_done(struct od_req *r, int err, struct pprof_buf *pprof, const char *why);
/* t's window ended (sched_window_done): start its next on-demand CPU
 * window, if one waits. 1 if one started (do not plan the scheduled one). */
int ondemand_next(struct target *t);
/* t's session ended or t is removed: its pending requests fail. */
void ondemand_target_gone(struct target *t);

/* control.c - the control socket (control.socket) and metrics.listen:
 * HTTP/1.1 on a Unix socket (mode 0600, 0660 with control.group) and, when
 * set, the metrics page on a loopback TCP address. */
int control_start(struct agent *a); /* logs why on failure */
void control_stop(struct agent *a); /* closes listeners and connections */

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

/* uplink.c - the uploader from upload.* (secrets read from
 * their files), its events logged. 0 with a->upl NULL when upload is off;
 * a negative code (logged) when it cannot start. */
int agent_upload_start(struct agent *a);
/* a->cfg replaced old (reload): restart the uploader if its settings
 * changed (upload.url itself needs a restart). */
int agent_upload_reload(struct agent *a, const struct cfg *old);
/* The upload totals since start, across reloads (zero when upload is off). */
void agent_upload_stats(const struct agent *a, struct upl_stats *out);

#endif

/*
 * daemon.h - state shared by the daemon's modules (discover, target,
 * windows, anomaly, writer, ondemand, daemon) and the control socket's
 * routes. Nothing here is used by the CLI.
 *
 * DESIGN: one libuv loop thread owns every structure below. The thread pool
 * only ever sees a writer job (raw profile text in, pprof + store result
 * out; or a store call, such as a heap snapshot's chunk, whose function
 * reads only what the loop no longer writes) and hands it back through
 * the after-work callback; and the /proc scans, store figures and merges
 * of procs.c, report.c and ondemand.c, which own their results until
 * their after-work callback.
 */
#ifndef ISOPROF_AGENT_DAEMON_H
#define ISOPROF_AGENT_DAEMON_H

#include "budget.h"
#include "cdp.h"
#include "config.h"
#include "episode.h"
#include "http.h"
#include "memwatch.h"
#include "procscan.h"
#include "regress.h"
#include "resolve.h"
#include "store.h"
#include "upload.h"
#include "warm.h"
#include "windows.h"
#include "ws.h"

#include <stdint.h>
#include <uv.h>

struct agent;
/* A configuration kept alive after a reload replaced it. */
struct cfg_hold {
    struct cfg *cfg;
    struct cfg_hold *next;
};

#include "counters.h"

/* The memory polls that fell inside one window: exact min/max/last, and a
 * bounded sample of the values for the P999 (every step-th poll, the step
 * doubling whenever the sample fills). */
#define MEMACC_MAX 256
struct memacc {
    uint32_t n, step, skip;
    uint64_t min, max, last;
    uint32_t kib[MEMACC_MAX];
};

/* The label of a main thread. */
#define TARGET_THREAD_MAIN "main"

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
    struct endpoint *next; /* a->endpoints, a->retired_endpoints, a->found_endpoints or
                              a->found_retired */
    /* The process behind it (procs.c): a found endpoint's always; a
     * configured one's when a /proc scan matched its port (else 0, ""). */
    uint32_t pid;
    char container[PROCSCAN_CONTAINER_LEN + 1];
    /* The version found in that process (procs.c, version_from; cleaned
     * as a label) and where from ("env:NAME", "package.json"); "" none. */
    char version[STORE_VERSION_MAX + 1];
    char version_source[136];
    /* An endpoint found on the host (procs.c), not in the config: its
     * settings are own (cfg points there), it is probed with /json/version
     * and dropped if that does not answer as an inspector. */
    int found;
    int ever_reachable; /* answered /json/version once */
    /* No heap snapshot of its isolates before this (monotonic; snapshot.c):
     * one of them streamed past its limit or never answered. */
    uint64_t snap_hold_until_mono_ns;
    int seen;             /* procs.c's mark */
    int closed;           /* a retired found endpoint's timer closed */
    uint64_t start_ticks; /* with pid, the process (procscan.h) */
    struct cfg_target own;
    char own_inspector[24], own_host[16];
    /* Its isolates (main threads, worker threads) share the window slots
     * as one (windows.h): one endpoint's many isolates cannot starve
     * another's. */
    struct win_group wins;
    /* Worker announcements (threads.c): the bucket of the cap, and while
     * over it, no worker of its targets is watched until off_until. */
    uint64_t announce_tokens_ns;
    uint64_t threads_off_until_ns; /* monotonic; 0: not capped */
    uint64_t threads_capped_at_ns; /* when the cap was last hit */
    unsigned threads_caps;         /* caps hit in a row (each an hour or less apart) */
};

enum target_state {
    TARGET_BACKOFF,    /* not connected; timer schedules the next attach */
    TARGET_CONNECTING, /* WebSocket / Profiler.enable in flight */
    TARGET_READY,      /* attached; the schedule runs */
};

/* One isolate on one endpoint: a target of /json/list (the main thread,
 * with a session of its own), or one of its worker threads (threads.c),
 * which rides its parent's session under a NodeWorker session id. */
struct target {
    struct agent *a;
    struct endpoint *ep;
    char *id;      /* the /json/list id; a worker's: the parent's id + "#" + workerId */
    char *ws_path; /* path of webSocketDebuggerUrl ("/uuid") */
    char *worker;  /* label */
    char *version; /* label */
    char *thread;  /* label: "main", or a Worker's: its name, else its script's base name,
                      else "worker", then "#<workerId>" (threads.c) */
    uint32_t isolate;
    uint32_t title_pid; /* a Deno main thread's pid, from its title; 0 unknown */
    char *main_url;     /* a main thread's script as /json/list names it (file://...), or
                           NULL: where its own tree is (resolve.h) */
    /* worker threads (threads.c) */
    struct target *parent;     /* a worker's main thread; NULL for a main thread */
    char *session;             /* a worker's NodeWorker session id */
    int held;                  /* a worker waiting for Runtime.runIfWaitingForDebugger */
    int worker_gone;           /* a worker whose session ended: nothing more is sent for it */
    uv_timer_t hold_timer;     /* a worker: releases it at the latest after THREADS_HOLD_MS;
                                  a main thread: ends its fence after THREADS_FENCE_MS */
    unsigned nworkers;         /* a main thread: its workers attached now */
    int threads_on;            /* a main thread: NodeWorker.enable sent (and not refused) */
    int threads_capped;        /* a main thread: its workers unwatched for its endpoint's cap */
    int fencing;               /* a main thread: no new worker waits; late attaches let go
                                  (then NodeWorker.disable if threads_on is 0: a reload) */
    uint64_t attach_tokens_ns; /* a main thread: the attach rate's bucket (threads.c) */
    unsigned inflight;         /* calls sent and not yet answered (target_call) */
    enum target_state state;
    struct cdp_session *cdp;
    uv_timer_t timer;     /* the next attach */
    uv_timer_t win_timer; /* windows.c's wake-ups (win_ops.arm) */
    struct win_iso w;     /* its windows (windows.c) */
    /* when each measured call was sent (enum win_call): its stall is the
     * round trip to its answer (win_pause) */
    uint64_t call_sent_ns[WIN_NCALLS];
    int listed;   /* seen in the latest /json/list */
    int removing; /* vanished; freed once cdp and timer closed */
    int pending_closes;
    uint64_t backoff_ms;
    const char *close_reason;  /* static text when the agent itself closed the session */
    int close_reason_was_ours; /* the session that just ended was closed by the agent */
    uint64_t attached_mono_ns;
    unsigned stalls; /* windows in a row whose start or stop went unanswered */
    /* heap sampling and memory */
    uv_timer_t mem_timer;
    int heap_restart_logged;
    int mem_inflight;
    struct memacc mem_cpu,
        mem_heap;         /* polls in the running CPU window / since the last heap window */
    struct memwatch mw;   /* its limit, memory episodes and their evidence (anomaly.c drives it) */
    uint64_t limit_probe; /* the limit job asked for it (anomaly.c), 0: none out */
    struct od_req *snap_od; /* an on-demand snapshot waiting to start (a reference) */
    /* wall start of the last window stored, per type (writer.c); 0: none yet */
    uint64_t last_cpu_ns, last_heap_ns;
    /* warm windows (warm.h decides, keepalive.c drives) */
    struct warm warm;
    int win_warm;        /* the open CPU window started warm */
    uint64_t ka_seen;    /* the keep-alive whose consoleProfileStarted came */
    uint64_t ka_sent_ns; /* its call in flight was sent (its stall) */
    int ka_logged_want;  /* the choice last logged */
    enum warm_why ka_logged_why;
    uint32_t proc_pid; /* its process, as the limit job found it (0: unknown) */
    uint64_t ka_probe; /* the sampler probe out (its seq), 0: none */
    uint32_t ka_tid;   /* the sampler thread last read, its CPU and when */
    uint64_t ka_tid_cpu_ns, ka_tid_mono_ns;
    struct target *next; /* a->targets */
};

struct writer;

struct agent {
    uv_loop_t *loop;
    struct cfg *cfg;
    struct ws_budget msg_budget; /* every inspector message byte held (budget.h) */
    struct store *store;
    struct http_client *http;
    struct writer *writer;
    struct srcmap_cache *srcmaps; /* parsed source maps, all targets (writer.c reads) */
    struct upl *upl;              /* NULL when upload.url is "" */
    struct upl_stats upl_base;    /* totals of uploaders closed (reload, shutdown) */
    int upl_failing;              /* uplink.c: the last request failed */
    int upl_restarting;           /* a reload closes the uploader; the new one starts after */
    long upl_last_code;
    int upl_last_err;
    uint64_t upl_expired_run;   /* uplink.c: windows expired since the server last took a batch */
    int upl_skew_logged;        /* uplink.c: the clock skew error was logged */
    struct endpoint *endpoints; /* polled, in config order */
    struct endpoint *retired_endpoints; /* dropped by a reload; freed at exit */
    struct endpoint *found_endpoints;   /* found on the host by procs.c */
    struct endpoint *found_retired;     /* found ones gone; freed once nothing points to them */
    struct procs *procs;                /* host process discovery (procs.c); NULL when off */
    struct cfg_hold *retired_cfgs;      /* configs replaced by a reload (still referenced) */
    struct cfg *cfg_boot;               /* the config at start: restart-only options */
    uv_signal_t sighup;
    struct target *targets;
    struct win_sched wins;  /* every target's windows (windows.c) */
    struct isoprof_rng rng; /* jitter and backoff */
    uv_signal_t sigint, sigterm;
    uv_timer_t shutdown_timer;
    uv_timer_t drained_timer; /* runs agent_drained a loop turn after work went idle */
    int stopping;
    uint64_t stop_mono_ns;
    struct agent_counters n;
    /* latency (anomaly.c) */
    struct statsd *statsd;
    struct latency *latency;
    uv_timer_t latency_timer;
    int latency_timer_on;
    struct lat_open *lat_open; /* open latency_p999_spike episodes */
    struct snap_run *snap;     /* the heap snapshot being taken or written (snapshot.c) */
    uint64_t statsd_garbage_logged, statsd_garbage_log_mono_ns;
    uint64_t latency_refused_logged, latency_refused_log_mono_ns; /* the refusal warning */
    uint64_t threads_warn_mono_ns; /* threads.c: the last "not watched" warning */
    unsigned threads_fences;       /* threads.c: main threads fencing (the stop waits for them) */
    /* control.c, report.c, ondemand.c */
    struct control *control;
    struct report *report;
    struct od_waiter *od_waiters; /* pending on-demand requests */
    uint64_t start_mono_ns;       /* for uptime */
    uv_timer_t notify_timer;      /* STATUS= for the service manager, under systemd */
    int notify_on;
    /* deploy.c: the (worker, version) pairs heard of lately */
    struct deploy_pair *deploy;
    unsigned deploy_pairs;
    uint64_t deploy_tick;
};

/* anomaly.c - episodes, memory watch, OOM suspicion, latency glue */
void memacc_reset(struct memacc *m);
void memacc_add(struct memacc *m, uint64_t bytes);
/* The figures of m (all zero when it saw no poll). */
void memacc_figures(const struct memacc *m, struct store_mem *out);
/* READY target t attached: its memory watch starts afresh (its limit is
 * learned again: the process may have restarted with other flags). */
void anomaly_attached(struct target *t);
/* A Runtime.getHeapUsage result (bytes in use) for READY target t. While
 * t's limit is not known (memory_limit auto), the first poll starts a
 * thread-pool job that reads it (the process's command line and
 * environment in /proc; for a configured endpoint, its process is found by
 * its port first); until it answers, nothing is flagged. */
void anomaly_memory(struct target *t, uint64_t used);
/* A heap window pinned to pin stalled t pause_ns: charged to t's
 * memory_near_limit episode when it is that one. */
void anomaly_heap_cost(struct target *t, const struct episode *pin, uint64_t pause_ns);
/* The episode of kind k open on t, or NULL. */
struct episode *anomaly_memory_episode(const struct target *t, enum memwatch_kind k);
/* t's session ended or t left /json/list; gone_by_itself: not the agent's
 * doing. Flags oom_suspected when its last memory was near the limit, and
 * ends its open episode. */
void anomaly_target_gone(struct target *t, int gone_by_itself);
/* The latency listener and detector, if anomaly.latency.listen is set. A
 * listener that cannot bind is logged and left off: the agent runs on. */
int anomaly_start(struct agent *a);
void anomaly_stop(struct agent *a); /* closes the handles (shutdown) */
void anomaly_free(struct agent *a); /* after the loop ran dry */

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
/* A CPU window is starting: warm or cold (t->win_warm). */
void keepalive_window_start(struct target *t);
/* A window's start or stop stalled t pause_ns: a cold window's feeds auto. */
void keepalive_window_cost(struct target *t, enum win_call call, uint64_t pause_ns);
/* The session ended: V8 ended the keep-alive with it. */
void keepalive_detached(struct target *t);
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

/* An endpoint found on the host (procs.c): 127.0.0.1:port of process p.
 * Probed with /json/version at once; one that does not answer as an
 * inspector is dropped and procs_not_inspector() told. NULL: ENOMEM. */
struct endpoint *discover_found_add(struct agent *a, uint16_t port, const struct procscan_proc *p);
/* Found endpoint ep goes (its process exited, its listener closed, a
 * configured target took its port, or discovery was turned off), logged
 * with why unless NULL: its targets are removed and it is retired, freed
 * by discover_found_sweep once no target points to it. */
void discover_found_drop(struct endpoint *ep, const char *why);
void discover_found_sweep(struct agent *a);

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
const char *target_runtime(const struct target *t);
/* ep->cfg changed (reload): give t the labels it names. 0, or -EAGAIN when
 * t cannot be relabelled in place (a label the config no longer names is
 * derived at attach) and must be re-attached; -ENOMEM. */
int target_relabel(struct target *t);
/* The version ep's main threads are labelled with: the config's, else the
 * one found in the process (ep->version, discovery.processes.version_from),
 * else "unknown". Borrowed from ep. */
const char *target_version_of(const struct endpoint *ep);
/* Where that version comes from: "config", ep->version_source, or NULL. */
const char *target_version_source(const struct endpoint *ep);
/* ep->version changed (procs.c): its targets whose config names no
 * version take the new one (their worker threads too); logged. 0 or
 * -ENOMEM. */
int target_version_changed(struct endpoint *ep);
/* s[0..n) as a label value: cut at 255 bytes, bytes that are not
 * printable ASCII (and '"', '\\') made '_'. Owned by the caller; NULL: ENOMEM. */
char *target_label_dup(const char *s, size_t n);

/* The heap limit t's memory is watched against (bytes; 0 while it is being
 * learned): the target's memory_limit, or threads.memory_limit for a worker
 * thread, or what its runtime gives it when that is auto (memwatch.h). */
uint64_t target_memory_limit(const struct target *t);
/* cdp_call_on t's session (a worker's: its parent's WebSocket under its
 * NodeWorker session id). The reply callback gets t as its arg; t is not
 * freed while a call is out. Errors as cdp_call; -ENOTCONN when t has no
 * session (or is being removed). */
int target_call(struct target *t, const char *method, const char *params, uint64_t timeout_ms,
                unsigned flags, void (*cb)(struct target *t, struct cdp_reply *r));
/* Profiler.enable on t's session; t is READY once it answers
 * (target_attach_start). 0, or a target_call error. */
int target_enable(struct target *t);
void target_attach_start(struct target *t);
/* A target with its timers initialised, not yet linked (target_link):
 * labels copied, thread "main" unless thread is given. NULL: ENOMEM. */
struct target *target_alloc(struct agent *a, struct endpoint *ep, const char *id,
                            const char *ws_path, const char *worker, const char *version,
                            const char *thread);
/* A target made by threads.c joins a->targets; target_remove ends it. */
void target_link(struct target *t);
/* Frees t once it is removing and nothing (a handle, a call) holds it. */
void target_free_if_closed(struct target *t);

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
 * a->threads_fences counts those still fencing; each end calls
 * agent_check_drained. */
void threads_stop(struct agent *a);
/* daemon.c: a piece of work the stop waits for went idle: the stop ends
 * a loop turn later if nothing else is left. */
void agent_check_drained(struct agent *a);
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

/* identity.c - an isolate's number from what it is (pid and start time,
 * else its endpoint and /json/list id; a worker adds its thread id), stable
 * across agent restarts. identity_isolate is pure; identity_target takes a
 * number no other live target has. */
uint32_t identity_isolate(uint32_t pid, uint64_t start_ticks, const char *endpoint,
                          const char *target_id, const char *worker_id);
uint32_t identity_target(const struct target *t);

/* target.c: what windows.c asks of a target (struct win_ops; daemon.c
 * puts the table together). */
int target_win_cpu_start(struct win_iso *w, uint64_t interval_ns);
int target_win_cpu_stop(struct win_iso *w);
int target_win_heap_take(struct win_iso *w);
void target_win_arm(struct win_iso *w, uint64_t due_ns);
void target_win_label(const struct win_iso *w, const char **worker, uint32_t *isolate);

/* deploy.c - deploy regressions (version_regression): each CPU window
 * folded into its (worker, version) aggregate on the writer's store stage,
 * a new version judged against the one before it there, and on the loop
 * the verdict kept, the later windows of a flagged version pinned and
 * labelled, and the extra windows a new version takes to be judged. */

/* What the writer does with one CPU window for it: copied into the job at
 * submit, so the store stage never reads the config (a reload replaces
 * it on the loop). */
struct deploy_job {
    int fold; /* fold the window into its pair's aggregate (and judge the pair) */
    struct regress_params p;
    uint32_t keep;    /* anomaly.regression.max_versions */
    uint32_t max_fns; /* anomaly.regression.max_functions */
};

/* What changed in the store for a pair. */
enum deploy_verdict {
    DEPLOY_NONE,    /* nothing recorded now */
    DEPLOY_FLAGGED, /* a version_regression recorded (or flagged again after a clear) */
    DEPLOY_UPDATED, /* the one standing, updated with the latest comparison */
    DEPLOY_CLEARED, /* the one standing, overturned by more samples */
};

/* What the store stage found for a pair (deploy_store), for the loop. */
struct deploy_result {
    int valid;                         /* a pair was folded */
    int err;                           /* a step failed (what names it) */
    const char *what;                  /* static */
    uint64_t busy, base_busy;          /* non-idle samples of the version and its baseline */
    uint64_t windows;                  /* the version's windows in its aggregate (0: not kept) */
    char base[STORE_VERSION_MAX + 1];  /* the baseline version; "": none (its first) */
    uint64_t agg_bytes;                /* what its aggregate takes in the store */
    uint32_t dropped;                  /* the worker's aggregates the bound dropped */
    int judged;                        /* compared (both had min_samples) */
    size_t regressions, grown, shrunk; /* the comparison's */
    uint64_t compare_ns;               /* how long it took */
    uint64_t anomaly;                  /* the pair's version_regression (0: none) */
    int flagged;                       /* ... standing now (not cleared) */
    enum deploy_verdict verdict;
    size_t pinned; /* windows pinned to it now */
    char top[128]; /* the regression that grew most, for the log */
    double top_before, top_after;
};

/* One pair's windows of a store batch (writer.c groups them). */
struct deploy_fold {
    const char *worker, *version; /* borrowed */
    struct deploy_job job;
    struct regress_agg *agg;    /* the windows' own aggregate, merged; consumed */
    uint64_t first_ns, last_ns; /* the first window's start, the last one's end (wall) */
    uint64_t windows;
    struct deploy_result *out;
};

/* Store stage (thread pool, one at a time): fold f into the pair's
 * aggregate, judge the pair and record its verdict; f->out says what
 * happened. Never fails as a call: an error is in f->out. */
void deploy_store(struct store *s, struct deploy_fold *f);
struct writer_meta;
/* Loop: m (a CPU window of t about to be submitted) gets its deploy job,
 * and, when t's version is flagged, the anomaly label and pin. */
void deploy_meta(struct agent *a, const struct target *t, struct writer_meta *m);
/* Loop: what the store stage found for worker/version (r borrowed). */
void deploy_done(struct agent *a, const char *worker, const char *version,
                 const struct deploy_result *r);
/* After the loop ran dry: the pairs remembered. */
void deploy_free(struct agent *a);

/* writer.c */
struct writer_meta {
    const char *worker, *version, *runtime;
    const char *thread;    /* "main", or a worker thread's label */
    uint32_t pid;          /* the isolate's process, 0: unknown (not a Pyroscope label) */
    const char *container; /* its container id, NULL or "": none */
    /* Where the target's source maps are read: root (NULL: "/") and the
     * source_maps directories (NULL: none); copied. */
    const char *root;
    const struct cfg_strlist *source_maps;
    /* The target's own tree, where its scripts may be read (resolve.h):
     * the root whole when one is configured for it, else the working
     * directory of pid and the directory of main_url (NULL: unknown);
     * copied. owner keys its CPU allowance (its endpoint); copied. */
    int root_is_tree;
    const char *main_url;
    const char *owner;
    uint32_t deno_pid;            /* a Deno isolate's process (resolve.h), 0: none */
    const struct cfg_map *labels; /* the target's labels (NULL: none); copied */
    int raw_nested;               /* the raw reply is a worker session's envelope (cdp.h) */
    uint32_t isolate;
    uint8_t type;
    uint32_t flags;
    uint64_t interval_ns; /* cpu: ns; heap: the sampling interval in bytes */
    uint8_t anomaly;      /* enum store_anomaly_kind */
    struct episode *pin;  /* borrowed; the writer takes its own reference */
    uint64_t time_ns;     /* heap and retained: when it was taken (wall); 0: now */
    struct od_req *od;    /* a reference the writer takes over on success; the
                             daemon answers it when the window ends (writer_hooks) */
    struct store_mem mem;
    struct deploy_job deploy; /* a CPU window: deploy_meta's (zero: not folded) */
};
/* A window job ended: stored (err 0; pprof holds the converted profile,
 * whose buffer the callee may take) or not (err, why). od is the writer's
 * reference to the request the window was for (NULL: none), handed to the
 * callee. */
struct writer_done {
    uint32_t isolate;
    uint8_t type;
    uint64_t start_ns; /* wall, of a stored window */
    int err;
    const char *why;
    struct od_req *od;
    struct pprof_buf *pprof;
};
struct writer_hooks {
    void (*window_done)(struct agent *a, const struct writer_done *d);
    /* Nothing queued or in the thread pool any more. */
    void (*idle)(struct agent *a);
};
int writer_init(struct agent *a, const struct writer_hooks *hooks, struct writer **out);
/* Queue a raw CDP reply for conversion and storage. raw is transferred. */
int writer_submit(struct writer *w, char *raw, size_t len, const struct writer_meta *m);
/* Record episode e (new: op WRITER_EP_NEW; changed: WRITER_EP_UPDATE; new
 * and pinning the isolate's latest heap and CPU windows: WRITER_EP_OOM) in
 * the store, in order with the windows submitted before. The writer takes
 * a reference and a snapshot of e's fields. */
enum { WRITER_EP_NEW, WRITER_EP_UPDATE, WRITER_EP_OOM };
int writer_episode(struct writer *w, struct episode *e, int op);
/*
 * writer_call - run fn(store, arg) on the store stage, in order with the
 * windows and episodes submitted before it (the store's writes are
 * serialised there), then done(a, arg, 0, &raw) on the loop. done is
 * called with cancelled 1 instead, fn never run, when the writer is freed
 * or the agent stops while the store fails. m NULL, or the labels of a
 * retained window: when done returns the id of a snapshot window it
 * committed (and sets *raw to its size), that window's retained profile
 * is converted and stored as a window of m (pinned to m->pin, at
 * m->time_ns). 0 or -ENOMEM.
 */
int writer_call(struct writer *w, const struct writer_meta *m,
                void (*fn)(struct store *s, void *arg),
                uint64_t (*done)(struct agent *a, void *arg, int cancelled, uint64_t *raw_size),
                void *arg);
/* Nonzero while jobs are queued or in the thread pool. */
int writer_busy(const struct writer *w);
/* A target's labels m (NULL: none) copied as the store keeps them, into
 * *out and *n: 0, or -ENOMEM with what was copied in *out and *n (free it
 * with writer_labels_free either way). */
int writer_labels_dup(const struct cfg_map *m, struct store_label **out, size_t *n);
void writer_labels_free(struct store_label *l, size_t n);
/* The agent is stopping: a write waiting out a backoff is tried now, once;
 * if the store fails it again, what is queued is dropped and counted. */
void writer_stopping(struct writer *w);
void writer_free(struct writer *w);

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

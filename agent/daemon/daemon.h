/*
 * daemon.h - the structs the daemon's modules share: an endpoint, a
 * target (an isolate) with the parts each module owns, and the agent.
 * Each module's functions are declared in its own header (target.h,
 * threads.h, anomaly.h, snapshot.h, keepalive.h, discover.h, procs.h,
 * identity.h, deploy.h, writer.h, ondemand.h, report.h, uplink.h); a file
 * includes the ones it calls. Nothing here is used by the CLI or by the
 * control socket (control.h's struct ctl_host is all it sees).
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
#include "memacc.h"
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

/*
 * The parts of a target that one module owns: that module alone writes
 * them (target_alloc initialises them); the others may read them.
 */

/* threads.c: a worker's hold and end, a main thread's workers and fence. */
struct target_thr {
    int held;                  /* a worker waiting for Runtime.runIfWaitingForDebugger */
    int gone;                  /* a worker whose session ended: nothing more is sent for it */
    unsigned nworkers;         /* a main thread: its workers attached now */
    int on;                    /* a main thread: NodeWorker.enable sent (and not refused) */
    int capped;                /* a main thread: its workers unwatched for its endpoint's cap */
    int fencing;               /* a main thread: no new worker waits; late attaches let go
                                  (then NodeWorker.disable if on is 0: a reload) */
    uint64_t attach_tokens_ns; /* a main thread: the attach rate's bucket */
};

/* keepalive.c: warm windows (warm.h decides, keepalive.c drives). */
struct target_ka {
    struct warm warm;
    int win_warm;     /* the open CPU window started warm */
    uint64_t seen;    /* the keep-alive whose consoleProfileStarted came */
    uint64_t sent_ns; /* its call in flight was sent (its stall) */
    int logged_want;  /* the choice last logged */
    enum warm_why logged_why;
    uint64_t probe; /* the sampler probe out (its seq), 0: none */
    uint32_t tid;   /* the sampler thread last read, its CPU and when */
    uint64_t tid_cpu_ns, tid_mono_ns;
};

/* One isolate on one endpoint: a target of /json/list (the main thread,
 * with a session of its own), or one of its worker threads (threads.c),
 * which rides its parent's session under a NodeWorker session id. Every
 * field is written by target.c alone unless its comment names another
 * owner (w: windows.c's; thr, ka and the anomaly's and snapshot's fields:
 * those modules'). Any module of the daemon may read any of them. */
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
    /* worker threads: set by threads.c when it makes a worker, then fixed */
    struct target *parent; /* a worker's main thread; NULL for a main thread */
    char *session;         /* a worker's NodeWorker session id */
    uv_timer_t hold_timer; /* threads.c's (target.c opens and closes it): a worker: releases
                              it at the latest after THREADS_HOLD_MS; a main thread: ends
                              its fence after THREADS_FENCE_MS */
    struct target_thr thr; /* threads.c's state of it */
    unsigned inflight;     /* calls sent and not yet answered (target_call) */
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
    int evicted;               /* waiting out an eviction (workerd: another client took it) */
    const char *close_reason;  /* static text when the agent itself closed the session */
    int close_reason_was_ours; /* the session that just ended was closed by the agent */
    uint64_t attached_mono_ns;
    unsigned stalls; /* windows in a row whose start or stop went unanswered */
    /* heap sampling and memory */
    uv_timer_t mem_timer;
    int heap_restart_logged;
    int mem_inflight;
    struct memacc mem_cpu,
        mem_heap; /* polls in the running CPU window / since the last heap window */
    /* anomaly.c's */
    struct memwatch mw;   /* its limit, memory episodes and their evidence */
    uint64_t limit_probe; /* the limit job asked for it, 0: none out */
    uint32_t proc_pid;    /* its process, as the limit job found it (0: unknown) */
    /* snapshot.c's */
    struct od_req *snap_od; /* an on-demand snapshot waiting to start (a reference) */
    /* wall start of the last window stored, per type (daemon.c, as the
     * writer tells it); 0: none yet */
    uint64_t last_cpu_ns, last_heap_ns;
    struct target_ka ka; /* keepalive.c's: warm windows */
    struct target *next; /* a->targets */
};

struct writer;

struct target_ops;

struct agent {
    uv_loop_t *loop;
    struct cfg *cfg;
    const struct target_ops *tops; /* what targets tell the modules (agent_run's) */
    struct ws_budget msg_budget;   /* every inspector message byte held (budget.h) */
    struct store *store;
    struct http_client *http;
    struct writer *writer;
    struct srcmap_cache *srcmaps;       /* parsed source maps, all targets (writer.c reads) */
    struct uplink *uplink;              /* uplink.c's: the uploader and its totals */
    struct endpoint *endpoints;         /* polled, in config order */
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
    /* anomaly.c's: the latency detector, its listener, the limit job */
    struct anomaly_run *anom;
    struct snap_run *snap;         /* the heap snapshot being taken or written (snapshot.c) */
    uint64_t threads_warn_mono_ns; /* threads.c: the last "not watched" warning */
    /* the control socket (daemon.c starts it), report.c, ondemand.c */
    struct control *control;
    struct report *report;
    struct od_waiter *od_waiters; /* pending on-demand requests */
    uint64_t start_mono_ns;       /* for uptime */
    uv_timer_t notify_timer;      /* STATUS= for the service manager, under systemd */
    int notify_on;
    struct deploy_book *deploy; /* deploy.c's: the (worker, version) pairs heard of lately */
};

/* daemon.c: a piece of work the stop waits for went idle: the stop ends
 * a loop turn later if nothing else is left. */
void agent_check_drained(struct agent *a);

#endif

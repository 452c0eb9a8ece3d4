/*
 * windows.h - the owner of every isolate's profile windows: when a CPU
 * window starts and ends, who holds one of sampling.cpu.max_concurrent's
 * slots, who waits in the queue for one, what a window is pinned to (an
 * anomaly episode) and for whom it is taken (an on-demand request), and
 * when the next heap window is due.
 *
 * The module decides; it does no I/O. It asks its driver (target.c, one
 * isolate's CDP session) to send the calls through struct win_ops, and the
 * driver reports back what happened (started, stopped with a profile,
 * failed, attached, detached). Every entry point takes the time, on the
 * monotonic clock in ns, as an argument, and the module's only sense of
 * time is what it is told: each isolate asks for one wake-up at a time
 * (win_ops.arm) and acts when win_wake is called at or after it. So a
 * test drives it with a simulated clock, and the daemon with libuv timers.
 *
 * The rules (sampling.cpu.* and anomaly.* in config/README.md; the
 * planning decisions themselves are schedule.c's pure functions):
 * - An attached isolate's first CPU window starts at a random point within
 *   jitter x period; each later one a period (the plan's: see the cost
 *   budget below) after the previous start,
 *   moved by a uniform offset of +-jitter x period.
 * - At most max_concurrent windows hold a slot, shared fairly between
 *   groups of isolates (struct win_group: the driver makes one per
 *   endpoint, i.e. per runtime process, whose main thread, worker threads
 *   and isolates are its members). Each group is owed
 *   min(its attached isolates, L) slots, L the largest level at which the
 *   shares add up to max_concurrent; a group takes a slot beyond what it is
 *   owed only when the free slots still cover what every other group is
 *   owed and does not hold. So an endpoint with one isolate keeps its
 *   schedule beside one with 64 worker threads, which shares the rest.
 *   A window due when no slot is free for its group waits in its group's
 *   FIFO (counted windows_delayed, never dropped); when a slot frees, the
 *   groups with windows waiting are served in turn (round robin); its
 *   successor is planned from its actual start.
 * - A slot is held from the start until the stop's answer, or
 *   WIN_STOP_GRACE_NS after the stop was sent, whichever is first.
 * - An anomaly's CPU window starts at once, at anomaly.cpu_interval,
 *   outside the cap; a window already recording is pinned instead. One
 *   that is stopping is left alone: it ended before the anomaly began.
 * - An on-demand CPU window starts at once, outside the cap, unless the
 *   isolate is recording: then it waits for that window to end. Requests
 *   for the same duration and interval share one window.
 * - Heap windows (getSamplingProfile of the sampler started at attach)
 *   come every sampling.heap.period (stretched by the budget, below) with
 *   the same jitter, or every
 *   anomaly.memory.heap_period while a memory episode is open, pinned to
 *   it.
 * - Shutdown: the queue is dropped, running windows are stopped, nothing
 *   new starts; win_ops.idle says when the last open window closed.
 * - The cost budget (sampling.budget): the driver reports how long each
 *   Profiler.start, Profiler.stop and heap window stalled the isolate
 *   (win_pause: from the request written to the reply's arrival at the
 *   socket). From the recent ones the isolate's plan is made (schedule.h,
 *   sched_plan): an isolate that costs more than pause_share gets its
 *   periods stretched, its windows lengthened with them as far as
 *   max_duration and max_pause allow. Every stall is charged to the
 *   isolate's account (sched_account), whatever the window was for; a
 *   scheduled window (CPU or heap) starts only when it fits the horizon
 *   beside the stalls charged in it and those still to come of the windows
 *   open (its own cost: the dearest of the latest five of each call), else
 *   it waits until it does (counted windows_deferred): pause_share is a cap
 *   over every span of sampling.budget.horizon, not an average. Anomaly and
 *   on-demand windows never wait: evidence first, paid for afterwards.
 *
 * DESIGN: loop thread only. A struct win_iso lives inside its driver's
 * object; the driver finds itself with container_of.
 */
#ifndef ISOPROF_AGENT_WINDOWS_H
#define ISOPROF_AGENT_WINDOWS_H

#include "base.h"
#include "config.h"
#include "counters.h"
#include "episode.h"
#include "schedule.h"

#include <stdint.h>

#define WIN_STOP_GRACE_NS (2000ull * 1000000ull)
/* On-demand CPU windows one isolate may have waiting (distinct duration and
 * interval pairs: equal ones share). */
#define WIN_OD_QUEUE_MAX 64

struct win_iso;
struct win_sched;

/* Isolates that share max_concurrent's slots as one (an endpoint: one
 * runtime process). Embedded in its owner, which must outlive its members:
 * win_group_free only once none is left. */
struct win_group {
    struct win_sched *s;
    unsigned members;                /* isolates in it (win_iso_init .. win_iso_free) */
    unsigned ready;                  /* ... of which attached */
    unsigned slots;                  /* slots its windows hold */
    unsigned nq;                     /* its windows waiting for a slot */
    struct win_iso *q_head, *q_tail; /* ... first come first */
    struct win_group *rr_next;       /* s's round robin of groups with windows waiting */
    int in_rr;
    struct win_group *prev, *next; /* s->groups */
};

enum win_state {
    WIN_NONE,
    WIN_QUEUED,   /* due, waiting for a free slot under max_concurrent */
    WIN_STARTING, /* setSamplingInterval / start sent */
    WIN_RUNNING,
    WIN_STOPPING, /* Profiler.stop sent */
};

/* What a window was taken for; handed to the driver with its profile. The
 * references (pin, od) go with it: the caller releases them (od through
 * win_ops.od_unref or by answering it). */
struct win_tags {
    uint8_t anomaly;     /* enum store_anomaly_kind; 0: none */
    struct episode *pin; /* a reference, or NULL */
    void *od;            /* an on-demand request (a reference), or NULL */
    uint64_t interval_ns;
};

struct win_ops {
    /* Send the calls that start a CPU window at interval_ns (ns, at least
     * 100 us). 0: win_cpu_started follows; else nothing was sent. */
    int (*cpu_start)(struct win_iso *w, uint64_t interval_ns);
    /* Send the call that stops the running window. 0: win_cpu_stopped
     * follows; else nothing was sent (the window is lost). */
    int (*cpu_stop)(struct win_iso *w);
    /* Send the call that takes a heap window. 0: win_heap_done follows. */
    int (*heap_take)(struct win_iso *w);
    /* Call win_wake(w, t) once the clock reaches due_ns (absolute); a
     * later arm replaces an earlier one; 0 cancels. */
    void (*arm)(struct win_iso *w, uint64_t due_ns);
    /* Shutdown: the last open window closed. Called from inside the
     * module's call: defer real work to the next loop turn. */
    void (*idle)(struct win_sched *s);
    /* On-demand request tokens: take a reference, drop one, and answer one
     * that got no window (dropping the reference). */
    void (*od_ref)(void *od);
    void (*od_unref)(void *od);
    void (*od_fail)(void *od, int err, const char *why);
    /* The labels of w, for the module's log lines. */
    void (*label)(const struct win_iso *w, const char **worker, uint32_t *isolate);
};

/* The calls whose stall is measured. */
enum win_call {
    WIN_CALL_START,    /* Profiler.start */
    WIN_CALL_STOP,     /* Profiler.stop */
    WIN_CALL_HEAP,     /* HeapProfiler.getSamplingProfile */
    WIN_CALL_SNAPSHOT, /* HeapProfiler.takeHeapSnapshot, its chunks streamed */
    WIN_NCALLS
};

/* Stalls kept per isolate and call (for /status's p50 and max), and how
 * many of the latest make the plan's estimate (their median). */
#define WIN_PAUSE_KEEP 64
#define WIN_PAUSE_EST 5
/* The upper bounds of /metrics' pause histogram, in ms (+Inf after). */
#define WIN_PAUSE_BUCKETS 12
extern const uint32_t win_pause_bounds_ms[WIN_PAUSE_BUCKETS];

struct win_pauses {
    uint32_t us[WIN_PAUSE_KEEP]; /* the latest stalls, a ring */
    uint64_t count;              /* measured in all */
    uint64_t total_ns;
};

struct win_pause_stat {
    uint64_t count, total_ns;
    uint64_t p50_ns, max_ns; /* of the latest WIN_PAUSE_KEEP */
};

struct win_od {
    void *od;
    uint64_t duration_ns, interval_ns;
};

/* One isolate's windows. Zeroed by win_iso_init; owned by its driver. */
struct win_iso {
    struct win_sched *s;
    struct win_group *g; /* the group whose slots it shares */
    int ready;           /* attached: windows are planned */
    /* the CPU window */
    enum win_state cpu;
    int slot;             /* holds one of max_concurrent's slots */
    uint64_t cpu_due_ns;  /* NONE: next window; RUNNING: its end; STOPPING: slot grace */
    uint64_t start_ns;    /* of the running window */
    uint64_t duration_ns; /* of the window starting or running */
    struct win_tags tags; /* of the window starting, running or stopping */
    uint64_t od_duration_ns, od_interval_ns; /* as tags.od asked (sharing) */
    struct win_iso *q_next;                  /* the slot queue */
    /* on-demand CPU windows waiting, first first */
    struct win_od *odq;
    size_t nodq, odq_cap;
    /* heap windows */
    int heap_on;               /* the sampler runs (the driver says so) */
    int heap_inflight;         /* a getSamplingProfile is out */
    uint64_t heap_due_ns;      /* 0: none planned */
    struct win_tags heap_tags; /* of the one in flight (or the next, for od) */
    uint64_t armed_ns;         /* the wake-up asked for (0: none) */
    int held;                  /* win_hold: no scheduled window starts */
    uint64_t extra_interval_ns; /* win_extra_cpu: the planned window is due now, at this */
    /* the cost budget */
    struct win_pauses pause[WIN_NCALLS];
    struct {
        uint64_t len_ns, pause_ns;
    } stops[WIN_PAUSE_EST]; /* the latest scheduled-interval stops and their windows */
    uint64_t nstops;
    uint64_t stop_sent_ns;           /* when the running window's stop was sent */
    struct sched_plan plan;          /* what the schedule follows */
    struct sched_plan logged;        /* the plan last logged */
    struct sched_account acct;       /* the stalls of the horizon */
    uint64_t cpu_base_ns;            /* the last scheduled CPU window's start (0: none yet) */
    uint64_t heap_base_ns;           /* the last heap window's (0: none yet) */
    int cpu_deferred, heap_deferred; /* the planned one waits for room in the horizon */
    uint64_t deferred;               /* windows the budget made wait */
    uint64_t first_ns;               /* first attached (0: never) */
    struct win_iso *prev, *next;     /* s->all */
};

/* The planner of all isolates: the slots, the queue and the config. */
struct win_sched {
    const struct cfg *cfg; /* borrowed; replaced by win_reconfigure */
    const struct win_ops *ops;
    struct isoprof_rng *rng;
    struct agent_counters *n;            /* windows_started, _delayed, _skipped, _lost */
    unsigned slots;                      /* windows holding a slot */
    unsigned open;                       /* windows starting, running or stopping */
    struct win_group *groups;            /* every group */
    struct win_group solo;               /* the isolates given no group of their own */
    struct win_group *rr_head, *rr_tail; /* groups with windows waiting, next to serve first */
    unsigned nqueued;                    /* windows waiting, all groups */
    struct win_iso *all;                 /* every isolate, attached or not */
    /* every isolate's stalls, by call: /metrics' histogram */
    uint64_t pause_hist[WIN_NCALLS][WIN_PAUSE_BUCKETS + 1];
    uint64_t pause_sum_ns[WIN_NCALLS];
    int stopping; /* win_stop_all was called: nothing new starts */
    int draining; /* ... and has stopped what ran: idle is due at open == 0 */
};

void win_sched_init(struct win_sched *s, const struct cfg *cfg, const struct win_ops *ops,
                    struct isoprof_rng *rng, struct agent_counters *n);
/* g (embedded in its owner) joins s: its members will share slots as one. */
void win_group_init(struct win_group *g, struct win_sched *s);
/* g leaves s; it must have no member left. */
void win_group_free(struct win_group *g);
/* w joins s (not attached yet), as a member of g (NULL: s->solo, the
 * group of every isolate given none). */
void win_iso_init(struct win_iso *w, struct win_sched *s, struct win_group *g);
/* w leaves s, detached first if it was not (win_detached). */
void win_iso_free(struct win_iso *w, uint64_t now);

/* --- what the driver reports --- */

/* The session is up: plan the first CPU window. */
void win_attached(struct win_iso *w, uint64_t now);
/* The session ended (or the isolate left): an open window is lost, a
 * queued one dropped, waiting on-demand requests fail, nothing is
 * planned until the next win_attached. Idempotent. */
void win_detached(struct win_iso *w, uint64_t now);
/* The wake-up asked for through win_ops.arm is due. */
void win_wake(struct win_iso *w, uint64_t now);
/* The start calls were answered: ok, or the window is skipped. */
void win_cpu_started(struct win_iso *w, uint64_t now, int ok);
/* Profiler.stop was answered. *out receives the window's tags (the
 * caller owns their references), whether or not ok: the driver stores the
 * profile, or answers tags.od with the failure. The slot frees, the next
 * window is planned. 0, or -EALREADY when w had no window stopping (the
 * answer came after a detach: *out is zeroed). */
int win_cpu_stopped(struct win_iso *w, uint64_t now, int ok, struct win_tags *out);
/* The heap sampler runs: the heap windows are planned, and an on-demand
 * one waiting for the sampler is taken. */
void win_heap_on(struct win_iso *w, uint64_t now);
/* The sampler is not running: found stopped by another client (err 0: the
 * driver restarts it, waiting requests wait), or it could not be started
 * (err < 0: a waiting on-demand request fails with err). */
void win_heap_off(struct win_iso *w, int err);
/* The getSamplingProfile answered (or failed): *out gets its tags (the
 * caller owns their references); zeroed when w was detached meanwhile. */
void win_heap_done(struct win_iso *w, struct win_tags *out);
/* A heap snapshot stops the isolate for seconds (snapshot.c): while on,
 * the scheduled windows (CPU and heap, the episode's heap cadence too)
 * that fall due wait, and start when it is turned off. Stops of running
 * windows, anomaly and on-demand windows are not held. */
void win_hold(struct win_iso *w, uint64_t now, int on);

/* call stalled the isolate pause_ns (measured only when it succeeded),
 * ending now: charged to its account, kept for /status and /metrics,
 * and the plan made again from the latest. A stop's is reported before
 * win_cpu_stopped, a heap window's before win_heap_done. */
void win_pause(struct win_iso *w, uint64_t now, enum win_call call, uint64_t pause_ns);
/* The latest stalls of one call on w. */
void win_pause_stat(const struct win_iso *w, enum win_call call, struct win_pause_stat *out);
/* "start", "stop", "heap", "snapshot". */
const char *win_call_name(enum win_call call);
/* The costs w's plan is made from: the median of the latest measures. */
void win_cost(const struct win_iso *w, struct sched_cost *k);
/* The room left in w's horizon at now (for /status): pause_share x
 * horizon less the stalls charged in it and those still to come of its
 * open windows; negative when an anomaly or on-demand window overdrew it. */
int64_t win_credit(const struct win_iso *w, uint64_t now);

/* --- what others ask for --- */

/* Deploy regressions want more samples of w's version (deploy.c): the
 * planned CPU window is brought forward to now and taken at interval_ns.
 * It stays a scheduled window: it waits for room in the pause budget and
 * for a slot like any other (its stalls are charged as every window's
 * are), and the next one is planned a period after it. A window of
 * another kind that starts first (anomaly, on-demand) takes its place.
 * 0, -EAGAIN (not attached, or stopping) or -EBUSY (a window is waiting,
 * starting, running or stopping, or an on-demand one waits: ask again
 * after it). */
int win_extra_cpu(struct win_iso *w, uint64_t now, uint64_t interval_ns);
/* An anomaly wants evidence now: a CPU window at anomaly.cpu_interval
 * pinned to ep (or the recording one pinned). */
void win_anomaly_cpu(struct win_iso *w, uint64_t now, struct episode *ep);
/* ... and a heap window pinned to ep (or the one in flight pinned). 0, or
 * -EAGAIN when none can be taken. */
int win_anomaly_heap(struct win_iso *w, uint64_t now, struct episode *ep);
/* An on-demand CPU window for od (a reference is taken). 0: started,
 * queued behind the recording window, or joined an equal one waiting;
 * -EBUSY: too many waiting; -EAGAIN: not attached, or it could not start
 * (od is not kept). */
int win_ondemand_cpu(struct win_iso *w, uint64_t now, void *od, uint64_t duration_ns,
                     uint64_t interval_ns);
/* An on-demand heap window for od (a reference is taken): joins the one in
 * flight or takes one now. 0, or -EAGAIN (od is not kept). */
int win_ondemand_heap(struct win_iso *w, uint64_t now, void *od);
/* The request a new one for the same window may share (CPU: one waiting,
 * or the one starting, with equal duration and interval; heap: the one
 * waiting or in flight), or NULL. */
void *win_ondemand_shared(const struct win_iso *w, int heap, uint64_t duration_ns,
                          uint64_t interval_ns);

/* The config was replaced: durations and intervals apply from the next
 * window; a window planned further ahead than the new period allows is
 * planned again; a higher cap admits waiting windows. */
void win_reconfigure(struct win_sched *s, const struct cfg *cfg, uint64_t now);
/* Shutdown: the queue is dropped, running windows are stopped, nothing new
 * starts. win_ops.idle follows once s->open is 0 (at once if it is). */
void win_stop_all(struct win_sched *s, uint64_t now);

/* "none", "queued", "starting", "running", "stopping". */
const char *win_state_name(enum win_state st);
unsigned win_queued(const struct win_sched *s);

#endif

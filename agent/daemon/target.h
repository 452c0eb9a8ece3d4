/*
 * target.h - the CDP driver of one isolate, and what it tells the modules built on it (target.c).
 * Declared apart from daemon.h, which holds the structs every module shares, so that a file
 * includes what it calls.
 */
#ifndef ISOPROF_AGENT_TARGET_H
#define ISOPROF_AGENT_TARGET_H

#include "daemon.h"
#include "discover.h"

/*
 * struct target_ops - what target.c (and threads.c, of a worker thread's
 * end) tell the modules built on a target. agent_run fills it once
 * (daemon.c: agent_target_ops) with anomaly.c's, keepalive.c's,
 * snapshot.c's, threads.c's, the writer's and ondemand.c's entry points.
 * target.c names none of those modules: they call down into it, and it
 * calls up only through this table, so no call cycle runs through the
 * target. Each member is one module function, called where and in the
 * order that module's header says; none may be NULL. Loop thread.
 */
struct od_req;
struct pprof_buf;
struct writer;
struct writer_meta;
struct target_ops {
    struct {
        void (*attached)(struct target *t);
        void (*gone)(struct target *t, int gone_by_itself);
        void (*memory)(struct target *t, uint64_t used);
        void (*heap_cost)(struct target *t, const struct episode *pin, uint64_t pause_ns);
    } anomaly;
    struct {
        void (*tick)(struct target *t);
        int (*on_event)(struct target *t, const char *session, const char *method, yajl_val params);
        int (*on_big_event)(struct target *t, const char *method, const char *data, size_t len);
        void (*window_start)(struct target *t);
        void (*window_cost)(struct target *t, enum win_call call, uint64_t pause_ns);
        uint64_t (*window_end)(struct target *t);
        void (*detached)(struct target *t);
    } keepalive;
    struct {
        int (*busy)(const struct target *t);
        int (*on_event)(struct target *t, const char *session, const char *method, yajl_val params);
        int (*on_big_event)(struct target *t, const char *method, char *data, size_t len);
    } snapshot;
    struct {
        void (*enable)(struct target *t);
        void (*tick)(struct target *t);
        void (*on_event)(struct target *t, const char *session, const char *method,
                         yajl_val params);
        void (*worker_error)(struct target *t, const char *session, const char *why);
        void (*drop)(struct target *w, const char *why);
        void (*release)(struct target *w);
        void (*unlink)(struct target *w);
        void (*parent_gone)(struct target *t, int gone_by_itself);
    } threads;
    int (*submit)(struct writer *w, char *raw, size_t len, const struct writer_meta *m);
    void (*window_done)(struct od_req *r, int err, struct pprof_buf *pprof, const char *why);
    /* a fence of threads.c went down while stopping (agent_check_drained) */
    void (*check_drained)(struct agent *a);
};

/* Attach new targets of ep, detach the ones no longer listed. */
void target_sync(struct endpoint *ep, const struct discovered *d, size_t n);
/* ep's poll failed: detach its targets that have no session up, keep the
 * ones attached (a live session outweighs a listing that did not come: a
 * busy machine makes polls time out, and a target that is gone closes its
 * session by itself) and the ones waiting out an eviction (detached, one
 * would come back at the next poll and evict the other client). Returns
 * how many it kept. */
size_t target_endpoint_down(struct endpoint *ep);
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

/* target.c: what windows.c asks of a target (struct win_ops; daemon.c
 * puts the table together). */
int target_win_cpu_start(struct win_iso *w, uint64_t interval_ns);
int target_win_cpu_stop(struct win_iso *w);
int target_win_heap_take(struct win_iso *w);
void target_win_arm(struct win_iso *w, uint64_t due_ns);
void target_win_label(const struct win_iso *w, const char **worker, uint32_t *isolate);

#endif

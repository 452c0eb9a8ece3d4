/*
 * threads.c - the worker threads of a Node (or Deno) target.
 *
 * Node runs each worker_threads Worker as a V8 isolate of its own, with its
 * own heap limit, and lists none of them in /json/list: they are reached
 * through the main thread's session, NodeWorker domain. Once a main thread
 * is READY, NodeWorker.enable {waitForDebuggerOnStart: true} makes Node
 * announce every worker (attachedToWorker {sessionId, workerInfo,
 * waitingForDebugger}); each becomes a target of its own (t->parent set)
 * whose calls go through target_call under its session id (cdp_call_on),
 * so the same code profiles it: CPU windows under the same schedule and
 * max_concurrent, its heap sampler, its memory polls against
 * threads.memory_limit, its anomalies, its oom_suspected when it ends near
 * the limit.
 *
 * Holding a new worker: with waitForDebuggerOnStart, a worker created
 * after attach waits before its first line until Runtime.runIfWaitingForDebugger
 * is sent to it, so its heap sampler can start first and its start-up
 * allocations show in its heap window. The agent releases it as soon as
 * HeapProfiler.startSampling answered (or failed), and at the latest after
 * THREADS_HOLD_MS. A worker the agent will not keep (over threads.max or
 * the attach rate, a bad session id, dropped) is released before it is
 * detached, and so is every worker when the agent stops.
 *
 * What Node 20 does not do (measured): it releases a waiting worker only on
 * Runtime.runIfWaitingForDebugger, never when its client goes: not on
 * NodeWorker.detach or NodeWorker.disable, not when the WebSocket closes,
 * not when the client is killed. And the next client is told such an
 * orphan is waitingForDebugger: false. Node decides that a worker waits
 * when `new Worker` runs on the main thread, and tells the session only
 * once the worker's thread has started. Hence:
 *  - every worker is released on attach whatever the flag says (the call
 *    is a no-op for a running one), so a restarted isoprofd frees what a
 *    killed one left waiting;
 *  - before a main thread's session closes on purpose (the agent stops, a
 *    reload turns threads off) it fences: NodeWorker.enable
 *    {waitForDebuggerOnStart: false}, so no new worker waits, then
 *    THREADS_FENCE_MS in which a worker told to wait before shows up and
 *    is released;
 *  - if isoprofd dies (killed, crashed) in the moment between a worker's
 *    start and its release, that worker waits until isoprofd, restarted by
 *    its service manager, or another inspector client attaches again.
 *
 * Limits: at most threads.max workers attached per main thread, and
 * attaches at a rate of THREADS_ATTACH_PER_S a second after a burst of
 * threads.max; a pool that churns faster has the rest run unwatched
 * (threads_refused). A worker that sends what is not CDP, or stalls a
 * window, is dropped alone (threads_dropped); the main thread and the
 * other workers carry on.
 *
 * The announcements themselves are capped per endpoint: every
 * attachedToWorker costs the daemon a parse and, refused, two calls (the
 * release and the detach), so an endpoint that announces faster than
 * THREADS_ANNOUNCE_PER_S a second past a burst of THREADS_ANNOUNCE_BURST x
 * threads.max (256 at least) has its workers unwatched for a while (threads_capped): its
 * attached workers are let go, the fence runs (a worker that waits shows up
 * in it and is released, nothing more), then NodeWorker.disable, so a real
 * Node announces nothing more; what a peer still announces after the fence
 * is counted and nothing is sent for it. Measured with the fake inspector:
 * 20,000 announcements on one session cost the daemon 28.5 s of CPU before
 * (each call armed the session's timer by walking every call pending) and
 * 0.14 s since (tests/bench/bench_fairness.js, scenario announce).
 */
#include "threads.h"
#include "daemon.h"
#include "log.h"
#include "target.h"

#include "base.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define THREADS_CALL_TIMEOUT_MS 5000
#define THREADS_NAME_MAX 64
/* Warnings about refused or unknown workers, at most once a minute. */
#define THREADS_WARN_NS (60ull * 1000000000ull)

static int threads_wanted(const struct target *t)
{
    const char *rt = target_runtime(t);
    return t->parent == NULL && t->ep->cfg->threads.enabled &&
           (strcmp(rt, "node") == 0 || strcmp(rt, "deno") == 0);
}

static const char *jstr(yajl_val obj, const char *key)
{
    const char *path[] = {key, NULL};
    yajl_val v = obj ? yajl_tree_get(obj, path, yajl_t_string) : NULL;
    return v ? YAJL_GET_STRING(v) : NULL;
}

static struct target *find_worker(const struct target *t, const char *sid)
{
    for (struct target *k = t->a->targets; k; k = k->next)
        if (k->parent == t && !k->removing && strcmp(k->session, sid) == 0)
            return k;
    return NULL;
}

/* A call whose answer nobody needs (release and detach of a worker that
 * is being let go). */
static void on_ignored(struct cdp_session *s, struct cdp_reply *r, void *arg)
{
    (void)s;
    (void)r;
    (void)arg;
}

/* Let session sid of t's WebSocket go: released (it may wait, whatever
 * attachedToWorker said), then detached. */
static void let_go(struct target *t, const char *sid)
{
    char params[CDP_SESSION_MAX + 32];
    if (t->cdp == NULL)
        return;
    cdp_call_on(t->cdp, sid, "Runtime.runIfWaitingForDebugger", NULL, THREADS_CALL_TIMEOUT_MS, 0,
                on_ignored, NULL);
    snprintf(params, sizeof(params), "{\"sessionId\":\"%s\"}", sid);
    cdp_call(t->cdp, "NodeWorker.detach", params, THREADS_CALL_TIMEOUT_MS, 0, on_ignored, NULL);
}

static void warn_refused(struct agent *a, const struct target *t, const char *why)
{
    uint64_t now = isoprof_now_mono_ns();
    if (a->threads_warn_mono_ns != 0 && now - a->threads_warn_mono_ns < THREADS_WARN_NS)
        return;
    a->threads_warn_mono_ns = now;
    log_warn("worker thread not watched", "worker=%s isolate=%u why=%s refused_total=%U", t->worker,
             t->isolate, why, a->n.threads_refused);
}

/* The attach rate: a GCRA bucket of threads.max attaches, refilled at
 * THREADS_ATTACH_PER_S. 1: this attach may go ahead. */
static int rate_ok(struct target *t, uint64_t now)
{
    const uint64_t step = 1000000000ull / THREADS_ATTACH_PER_S;
    uint64_t burst = (uint64_t)t->ep->cfg->threads.max * step;
    if (t->thr.attach_tokens_ns < now)
        t->thr.attach_tokens_ns = now;
    if (t->thr.attach_tokens_ns - now >= burst)
        return 0;
    t->thr.attach_tokens_ns += step;
    return 1;
}

/*
 * A worker's thread label says what it runs: the Worker's name (Node's
 * title "[worker 3] pool-1"), else its script's file name, then its thread
 * id ("resize.js#7", from workerInfo.url "file:///app/resize.js"), else
 * "worker#7". A Pyroscope series is named by the part before the '#'
 * (store_thread_label), so a job runner that starts a Worker per job makes
 * one series, not one per job, and the id stays in the store. A named
 * Worker keeps its name alone, as filters, logs and status know it
 * ("pool-1"), unless the name itself would read as "<label>#<digits>":
 * then its id goes after it, so that the uploader keeps the whole name.
 * Bytes other than printable ASCII become '_' (the store's rule).
 */
void threads_label(const char *title, const char *url, const char *id, char *out, size_t cap)
{
    const char *name = NULL;
    size_t len = 0;
    int named = 0;
    if (title != NULL && strncmp(title, "[worker ", 8) == 0) {
        const char *end = strchr(title, ']');
        if (end != NULL && end[1] == ' ' && end[2] != '\0') {
            name = end + 2;
            len = strlen(name);
            named = 1;
        }
    }
    if (name == NULL && url != NULL && url[0] != '\0') {
        /* The last path segment, without a query or a fragment. */
        size_t ul = strcspn(url, "?#");
        const char *base = url + ul;
        while (base > url && base[-1] != '/')
            base--;
        if (url + ul > base) {
            name = base;
            len = (size_t)(url + ul - base);
        }
    }
    if (name == NULL) {
        name = "worker";
        len = 6;
    }
    size_t room = cap - 1 < THREADS_NAME_MAX ? cap - 1 : THREADS_NAME_MAX;
    char tid[24] = "";
    if (named) {
        char whole[THREADS_NAME_MAX + 1];
        size_t wl = len < room ? len : room;
        memcpy(whole, name, wl);
        whole[wl] = '\0';
        if (store_thread_label(whole) != wl)
            snprintf(tid, sizeof(tid), "#%.20s", id && *id ? id : "0");
    } else {
        snprintf(tid, sizeof(tid), "#%.20s", id && *id ? id : "0");
    }
    for (char *p = tid + 1; *p; p++)
        if (*p < '0' || *p > '9')
            *p = '0'; /* the suffix must read as a thread id (digits) */
    size_t tl = strlen(tid);
    if (len > room - tl)
        len = room - tl;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        out[i] = c >= 0x20 && c < 0x7f ? (char)c : '_';
    }
    memcpy(out + len, tid, tl + 1);
}

static void thread_label(yajl_val info, char *out, size_t cap)
{
    threads_label(jstr(info, "title"), jstr(info, "url"), jstr(info, "workerId"), out, cap);
}

static void on_threads_enabled(struct target *t, struct cdp_reply *r)
{
    if (r->status == ISOPROF_ECLOSED || t->removing)
        return;
    if (r->status != 0) {
        t->thr.on = 0;
        log_info("worker threads not watched", "worker=%s isolate=%u why=%s", t->worker, t->isolate,
                 r->error_message ? r->error_message : isoprof_strerror(r->status));
        return;
    }
    log_debug("watching worker threads", "worker=%s isolate=%u", t->worker, t->isolate);
}

/* threads_on is set when the call is sent: a worker told to wait may show
 * up before the answer, and a fence must cover it. */
void threads_enable(struct target *t)
{
    if (!threads_wanted(t) || t->thr.on || t->a->stopping)
        return;
    if (t->ep->threads_off_until_ns > isoprof_now_mono_ns()) {
        t->thr.capped = 1; /* threads_tick turns them on at the end of the cap */
        return;
    }
    if (target_call(t, "NodeWorker.enable", "{\"waitForDebuggerOnStart\":true}",
                    THREADS_CALL_TIMEOUT_MS, 0, on_threads_enabled) != 0) {
        log_warn("worker threads not watched", "worker=%s isolate=%u why=%s", t->worker, t->isolate,
                 "NodeWorker.enable not sent");
        return;
    }
    t->thr.on = 1;
}

static void on_fence_reply(struct target *t, struct cdp_reply *r)
{
    (void)t;
    (void)r;
}

/* The fence of t is over; disable: NodeWorker.disable now. */
static void fence_end(struct target *t, int disable)
{
    if (!t->thr.fencing)
        return;
    t->thr.fencing = 0;
    uv_timer_stop(&t->hold_timer);
    if (disable && t->cdp != NULL && !t->removing)
        target_call(t, "NodeWorker.disable", NULL, THREADS_CALL_TIMEOUT_MS, 0, on_fence_reply);
    t->a->tops->check_drained(t->a);
}

/* A reload turned threads off (threads_on 0, and not turned back on
 * since): NodeWorker.disable once the fence is over. The stop's fences
 * leave threads_on set: the session closes anyway. */
static void on_fence_timer(uv_timer_t *timer)
{
    struct target *t = timer->data;
    fence_end(t, !t->thr.on);
}

/* From now on no new worker of t waits; one told to wait before shows up
 * within THREADS_FENCE_MS and is let go (attached refuses it). */
static void fence_start(struct target *t)
{
    if (t->thr.fencing || t->cdp == NULL || t->removing)
        return;
    if (target_call(t, "NodeWorker.enable", "{\"waitForDebuggerOnStart\":false}",
                    THREADS_CALL_TIMEOUT_MS, 0, on_fence_reply) != 0)
        return; /* nothing can be sent on that session */
    t->thr.fencing = 1;
    uv_timer_start(&t->hold_timer, on_fence_timer, THREADS_FENCE_MS, 0);
}

unsigned threads_fencing(const struct agent *a)
{
    unsigned n = 0;
    for (const struct target *t = a->targets; t; t = t->next)
        n += t->thr.fencing != 0;
    return n;
}

void threads_stop(struct agent *a)
{
    for (struct target *t = a->targets; t; t = t->next)
        if (t->parent == NULL && t->thr.on && !t->removing)
            fence_start(t);
}

void threads_reload(struct target *t)
{
    if (t->state != TARGET_READY)
        return; /* threads_enable runs at attach */
    if (threads_wanted(t)) {
        threads_enable(t);
        return;
    }
    if (!t->thr.on)
        return;
    for (struct target *k = t->a->targets; k; k = k->next)
        if (k->parent == t && !k->removing)
            target_remove(k); /* released and detached */
    t->thr.on = 0;
    fence_start(t); /* then NodeWorker.disable */
    log_info("worker threads no longer watched", "worker=%s isolate=%u", t->worker, t->isolate);
}

/* t's workers go unwatched for its endpoint's cap: let go, then the fence
 * and NodeWorker.disable. threads_tick turns them on again. */
static void cap_off(struct target *t)
{
    t->thr.capped = 1;
    if (!t->thr.on)
        return;
    for (struct target *k = t->a->targets; k; k = k->next)
        if (k->parent == t && !k->removing)
            target_remove(k); /* released and detached */
    t->thr.on = 0;
    fence_start(t); /* then NodeWorker.disable */
}

/* Announcements an endpoint may make at once: THREADS_ANNOUNCE_BURST x
 * threads.max, and THREADS_ANNOUNCE_BURST_MIN at least (what they cost
 * the daemon does not depend on how many it keeps). */
static uint64_t announce_burst(const struct endpoint *ep)
{
    uint64_t b = (uint64_t)THREADS_ANNOUNCE_BURST * ep->cfg->threads.max;
    return b > THREADS_ANNOUNCE_BURST_MIN ? b : THREADS_ANNOUNCE_BURST_MIN;
}

/* The endpoint's announcements went over the cap at now. */
static void cap_hit(struct target *t, uint64_t now)
{
    struct endpoint *ep = t->ep;
    struct agent *a = t->a;
    if (ep->threads_capped_at_ns == 0 || now - ep->threads_capped_at_ns > 3600ull * 1000000000ull)
        ep->threads_caps = 0;
    ep->threads_caps++;
    ep->threads_capped_at_ns = now;
    unsigned shift = ep->threads_caps - 1 < 8 ? ep->threads_caps - 1 : 8;
    uint64_t ms = (uint64_t)THREADS_CAPPED_MS << shift;
    if (ms > THREADS_CAPPED_MAX_MS)
        ms = THREADS_CAPPED_MAX_MS;
    ep->threads_off_until_ns = now + ms * 1000000u;
    log_warn("worker announcements over the cap, worker threads not watched",
             "worker=%s inspector=%s pid=%u per_s=%u burst=%U off_ms=%U capped_total=%U", t->worker,
             ep->cfg->inspector, (unsigned)ep->pid, (unsigned)THREADS_ANNOUNCE_PER_S,
             announce_burst(ep), ms, a->n.threads_capped);
    for (struct target *k = a->targets; k; k = k->next)
        if (k->ep == ep && k->parent == NULL && !k->removing && k->state == TARGET_READY)
            cap_off(k);
}

/* The endpoint's bucket of announcements (GCRA): 1 if this one is within
 * the cap; 0 past it, or while its workers are unwatched for it. */
static int announce_ok(struct target *t, uint64_t now)
{
    struct endpoint *ep = t->ep;
    if (ep->threads_off_until_ns > now)
        return 0;
    const uint64_t step = 1000000000ull / THREADS_ANNOUNCE_PER_S;
    uint64_t burst = announce_burst(ep) * step;
    if (ep->announce_tokens_ns < now)
        ep->announce_tokens_ns = now;
    if (ep->announce_tokens_ns - now < burst) {
        ep->announce_tokens_ns += step;
        return 1;
    }
    cap_hit(t, now);
    return 0;
}

void threads_tick(struct target *t)
{
    if (t->parent != NULL || !t->thr.capped || t->removing || t->thr.fencing ||
        t->state != TARGET_READY || t->a->stopping)
        return;
    if (t->ep->threads_off_until_ns > isoprof_now_mono_ns())
        return;
    t->thr.capped = 0;
    log_info("worker threads watched again", "worker=%s isolate=%u inspector=%s", t->worker,
             t->isolate, t->ep->cfg->inspector);
    threads_enable(t);
}

static void on_hold_timeout(uv_timer_t *timer)
{
    struct target *w = timer->data;
    log_warn("worker thread released before its heap sampler answered",
             "worker=%s thread=%s hold_ms=%u", w->worker, w->thread, (unsigned)THREADS_HOLD_MS);
    threads_release(w);
}

static void attached(struct target *t, yajl_val params)
{
    struct agent *a = t->a;
    const char *sid = jstr(params, "sessionId");
    const char *path[] = {"waitingForDebugger", NULL};
    yajl_val wv = params ? yajl_tree_get(params, path, yajl_t_any) : NULL;
    int waiting = wv != NULL && YAJL_IS_TRUE(wv);
    const char *info_path[] = {"workerInfo", NULL};
    yajl_val info = params ? yajl_tree_get(params, info_path, yajl_t_object) : NULL;
    if (sid == NULL || !cdp_valid_session(sid)) {
        a->n.threads_refused++;
        warn_refused(a, t, "attachedToWorker without a usable sessionId");
        return;
    }
    if (find_worker(t, sid) != NULL) {
        a->n.threads_refused++;
        warn_refused(a, t, "attachedToWorker for a session already attached");
        return;
    }
    if (!announce_ok(t, isoprof_now_mono_ns())) {
        a->n.threads_capped++;
        /* In the fence a worker told to wait before may show up: it is
         * released (NodeWorker.disable, next, detaches it). After the
         * fence Node announces nothing: nothing is sent. */
        if (t->thr.fencing && t->cdp != NULL)
            cdp_call_on(t->cdp, sid, "Runtime.runIfWaitingForDebugger", NULL,
                        THREADS_CALL_TIMEOUT_MS, 0, on_ignored, NULL);
        return;
    }
    const char *refuse = a->stopping                        ? "isoprofd is stopping"
                         : !threads_wanted(t) || !t->thr.on ? "worker threads are not watched"
                         : t->thr.nworkers >= t->ep->cfg->threads.max
                             ? "threads.max workers attached"
                         : !rate_ok(t, isoprof_now_mono_ns()) ? "the attach rate was exceeded"
                                                              : NULL;
    if (refuse != NULL) {
        a->n.threads_refused++;
        warn_refused(a, t, refuse);
        let_go(t, sid);
        return;
    }
    char label[THREADS_NAME_MAX + 1], id[1100];
    thread_label(info, label, sizeof(label));
    const char *wid = jstr(info, "workerId");
    snprintf(id, sizeof(id), "%s#%.64s", t->id, wid ? wid : sid);
    struct target *w = target_alloc(a, t->ep, id, t->ws_path, t->worker, t->version, label);
    if (w != NULL && (w->session = isoprof_strdup(sid)) == NULL) {
        target_link(w);
        target_remove(w); /* closes its handles, then frees it */
        w = NULL;
    }
    if (w == NULL) {
        log_error("out of memory adding a worker thread", "worker=%s", t->worker);
        let_go(t, sid);
        return;
    }
    w->parent = t;
    w->thr.held = 1; /* an orphan of a client that went says it does not wait */
    w->state = TARGET_CONNECTING;
    target_link(w);
    t->thr.nworkers++;
    log_debug("worker thread found", "worker=%s thread=%s session=%s waiting=%d", w->worker,
              w->thread, sid, waiting);
    uv_timer_start(&w->hold_timer, on_hold_timeout, THREADS_HOLD_MS, 0);
    if (target_enable(w) != 0)
        threads_drop(w, "Profiler.enable not sent");
}

static void detached(struct target *t, yajl_val params)
{
    struct agent *a = t->a;
    const char *sid = jstr(params, "sessionId");
    struct target *w = sid ? find_worker(t, sid) : NULL;
    if (w == NULL)
        return; /* one the agent let go, or never knew */
    a->n.threads_detached++;
    w->thr.gone = 1;
    w->thr.held = 0;
    log_info("thread detached", "worker=%s thread=%s isolate=%u", w->worker, w->thread, w->isolate);
    if (w->state == TARGET_READY)
        w->a->tops->anomaly.gone(w, 1);
    target_remove(w);
}

void threads_on_event(struct target *t, const char *session, const char *method, yajl_val params)
{
    if (session != NULL || t->parent != NULL || t->removing)
        return; /* a worker's own events: none is asked for */
    if (strcmp(method, "NodeWorker.attachedToWorker") == 0)
        attached(t, params);
    else if (strcmp(method, "NodeWorker.detachedFromWorker") == 0)
        detached(t, params);
}

void threads_worker_error(struct target *t, const char *session, const char *why)
{
    struct target *w = find_worker(t, session);
    if (w != NULL)
        threads_drop(w, why);
}

void threads_drop(struct target *w, const char *why)
{
    if (w->removing || w->parent == NULL)
        return;
    w->a->n.threads_dropped++;
    log_warn("thread dropped", "worker=%s thread=%s isolate=%u why=%s", w->worker, w->thread,
             w->isolate, why);
    target_remove(w);
}

static void on_released(struct target *w, struct cdp_reply *r)
{
    if (r->status != 0 && r->status != ISOPROF_ECLOSED)
        log_warn("worker thread not released", "worker=%s thread=%s err=%e", w->worker, w->thread,
                 r->status);
}

void threads_release(struct target *w)
{
    if (!w->thr.held)
        return;
    w->thr.held = 0;
    uv_timer_stop(&w->hold_timer);
    if (target_call(w, "Runtime.runIfWaitingForDebugger", NULL, THREADS_CALL_TIMEOUT_MS, 0,
                    on_released) != 0)
        log_warn("worker thread not released", "worker=%s thread=%s", w->worker, w->thread);
}

void threads_unlink(struct target *w)
{
    struct target *t = w->parent;
    if (t == NULL)
        return;
    uv_timer_stop(&w->hold_timer);
    if (!w->thr.gone)
        let_go(t, w->session);
    if (t->cdp != NULL)
        cdp_forget(t->cdp, w->session);
    w->thr.held = 0;
    t->thr.nworkers--;
    w->parent = NULL; /* the main thread may go first */
}

void threads_parent_gone(struct target *t, int gone_by_itself)
{
    for (struct target *k = t->a->targets; k; k = k->next) {
        if (k->parent != t || k->removing)
            continue;
        k->thr.gone = t->cdp == NULL; /* with the session gone, nothing can be sent */
        if (k->state == TARGET_READY)
            k->a->tops->anomaly.gone(k, gone_by_itself);
        target_remove(k);
    }
    t->thr.on = 0;
    fence_end(t, 0); /* the session is going: nothing to disable */
}

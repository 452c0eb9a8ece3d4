/*
 * target.c - one isolate: attach, enable the profiler, run the windows the
 * schedule asks for, reattach after a drop.
 *
 * A target is created when its endpoint's /json/list first names it and
 * removed when the list stops naming it. In between it cycles through
 * BACKOFF -> CONNECTING -> READY; a dropped session goes back to BACKOFF
 * with a delay that doubles on every drop and resets once a session has
 * lived long. workerd allows one session per isolate and evicts the older
 * one, so a drop of a workerd session while its target is still listed is
 * taken as an eviction (a person with DevTools, most likely) and backs off
 * for much longer: the agent yields, it does not fight.
 *
 * The target is the CDP driver of its isolate; it decides nothing about
 * windows. windows.c does (when, how long, at which interval, for whom) and
 * asks through win_ops: a CPU window is Profiler.setSamplingInterval and
 * Profiler.start, later Profiler.stop, whose reply (possibly many MB) is
 * taken raw and handed to the writer without being parsed here; a heap
 * window is a HeapProfiler.getSamplingProfile, raw too. The target reports
 * every answer back to windows.c, which owns the window's state and its
 * timer (t->win_timer; t->timer only paces reattaching).
 *
 * At attach the target also starts V8's sampling heap profiler, once, and
 * never stops it. The sampler is shared by every session of the isolate;
 * if another client stopped it, the next heap window finds it "not
 * started", and it is started again (logged once per session).
 * Runtime.getHeapUsage every sampling.memory_poll feeds the memory watch
 * (anomaly.c).
 *
 * A worker thread (threads.c) is driven by the same code: its calls go
 * through target_call on its parent's session, under its NodeWorker
 * session id; it has no connection, backoff or reattach of its own.
 */
#include "target.h"
#include "daemon.h"
#include "deploy.h"
#include "discover.h"
#include "identity.h"
#include "log.h"
#include "writer.h"

#include "base.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define TARGET_CALL_TIMEOUT_MS 5000
#define TARGET_STOP_TIMEOUT_MS 10000
#define TARGET_HEAP_TIMEOUT_MS 30000
/* A target whose start or stop went unanswered reattaches after this,
 * doubled for each stall in a row. */
#define TARGET_STALL_MIN_MS 30000
#define TARGET_STALL_MAX_MS 600000
#define TARGET_BACKOFF_MIN_MS 1000
#define TARGET_BACKOFF_MAX_MS 30000
#define TARGET_EVICTED_MIN_MS 15000
#define TARGET_EVICTED_MAX_MS 300000
#define TARGET_STABLE_NS (60ull * 1000000000ull)
#define TARGET_LABEL_MAX 255

static void target_connect(struct target *t);
static void target_on_mem_timer(uv_timer_t *timer);

const char *target_runtime(const struct target *t)
{
    return t->ep->runtime ? t->ep->runtime : "v8";
}

uint64_t target_memory_limit(const struct target *t)
{
    return t->mw.limit;
}

/* --- calls --- */

struct tcall {
    struct target *t;
    void (*cb)(struct target *t, struct cdp_reply *r);
};

static void target_on_reply(struct cdp_session *s, struct cdp_reply *r, void *arg)
{
    (void)s;
    struct tcall c = *(struct tcall *)arg;
    isoprof_free(arg);
    c.cb(c.t, r); /* t cannot be freed while inflight counts this call */
    c.t->inflight--;
    target_free_if_closed(c.t);
}

int target_call(struct target *t, const char *method, const char *params, uint64_t timeout_ms,
                unsigned flags, void (*cb)(struct target *t, struct cdp_reply *r))
{
    struct cdp_session *s = t->parent ? t->parent->cdp : t->cdp;
    if (s == NULL || t->removing)
        return -ENOTCONN;
    struct tcall *c = isoprof_malloc(sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    *c = (struct tcall){t, cb};
    int rc = cdp_call_on(s, t->session, method, params, timeout_ms, flags, target_on_reply, c);
    if (rc != 0) {
        isoprof_free(c);
        return rc;
    }
    t->inflight++;
    return 0;
}

/* A measured call was answered (r): its stall is the time from the
 * request written to the reply's arrival at the socket (V8 runs the call on
 * the isolate's thread, which does nothing else meanwhile), reported to
 * the budget. The arrival is the kernel's (cdp_reply.arrival_ns), not the
 * time the loop got to read it: a daemon busy elsewhere does not charge
 * its own delay to the isolate. */
static uint64_t target_pause(struct target *t, enum win_call call, const struct cdp_reply *r)
{
    uint64_t now = isoprof_now_mono_ns(), sent = t->call_sent_ns[call];
    uint64_t end = r->arrival_ns != 0 && r->arrival_ns < now ? r->arrival_ns : now;
    uint64_t pause = sent != 0 && end > sent ? end - sent : 0;
    t->call_sent_ns[call] = 0;
    win_pause(&t->w, now, call, pause);
    return pause;
}

/* A label value: valid printable UTF-8-safe ASCII subset, bounded. Bytes
 * outside printable ASCII (and quotes) become '_' so a hostile title can
 * neither break the store key (NUL) nor a log line or a Pyroscope label. */
char *target_label_dup(const char *s, size_t n)
{
    if (n > TARGET_LABEL_MAX)
        n = TARGET_LABEL_MAX;
    char *d = isoprof_malloc(n + 1);
    if (d == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        d[i] = (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') ? '_' : (char)c;
    }
    d[n] = '\0';
    return d;
}

static char *worker_name(const struct endpoint *ep, const struct discovered *d)
{
    if (ep->cfg->worker)
        return target_label_dup(ep->cfg->worker, strlen(ep->cfg->worker));
    if (ep->runtime && strcmp(ep->runtime, "workerd") == 0)
        return target_label_dup(d->id, strlen(d->id));
    const char *url = d->url && *d->url ? d->url : NULL;
    if (url) {
        const char *end = url + strcspn(url, "?#");
        const char *base = end;
        while (base > url && base[-1] != '/')
            base--;
        if (end > base)
            return target_label_dup(base, (size_t)(end - base));
    }
    if (d->title && *d->title)
        return target_label_dup(d->title, strlen(d->title));
    return target_label_dup("unknown", 7);
}

void target_free_if_closed(struct target *t)
{
    if (!t->removing || t->pending_closes > 0 || t->cdp != NULL || t->inflight > 0)
        return;
    struct agent *a = t->a;
    for (struct target **pp = &a->targets; *pp; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    }
    win_iso_free(&t->w, isoprof_now_mono_ns());
    isoprof_free(t->id);
    isoprof_free(t->ws_path);
    isoprof_free(t->worker);
    isoprof_free(t->version);
    isoprof_free(t->thread);
    isoprof_free(t->session);
    isoprof_free(t->main_url);
    isoprof_free(t);
}

static void target_on_timer_close(uv_handle_t *h)
{
    struct target *t = h->data;
    t->pending_closes--;
    target_free_if_closed(t);
}

/* The session is gone: its windows (windows.c: an open one is lost,
 * waiting requests fail), heap sampling and memory polls stop with it. */
static void target_session_ended(struct target *t)
{
    memset(t->call_sent_ns, 0, sizeof(t->call_sent_ns));
    win_detached(&t->w, isoprof_now_mono_ns());
    t->a->tops->keepalive.detached(t);
    uv_timer_stop(&t->mem_timer);
    uv_timer_stop(&t->hold_timer);
    t->mem_inflight = 0;
    t->heap_restart_logged = 0;
}

static void target_on_backoff(uv_timer_t *timer)
{
    struct target *t = timer->data;
    target_connect(t);
}

static void target_backoff(struct target *t, int evicted)
{
    uint64_t lo = evicted ? TARGET_EVICTED_MIN_MS : TARGET_BACKOFF_MIN_MS;
    uint64_t hi = evicted ? TARGET_EVICTED_MAX_MS : TARGET_BACKOFF_MAX_MS;
    if (t->backoff_ms < lo)
        t->backoff_ms = lo;
    uint64_t delay =
        t->backoff_ms / 2 + (uint64_t)(isoprof_rng_unit(&t->a->rng) * (double)(t->backoff_ms / 2));
    t->backoff_ms *= 2;
    if (t->backoff_ms > hi)
        t->backoff_ms = hi;
    if (t->stalls > 0) {
        /* It took a slot and gave nothing back: it waits its turn out. */
        unsigned shift = t->stalls - 1 < 8 ? t->stalls - 1 : 8;
        uint64_t pause = (uint64_t)TARGET_STALL_MIN_MS << shift;
        if (pause > TARGET_STALL_MAX_MS)
            pause = TARGET_STALL_MAX_MS;
        if (delay < pause)
            delay = pause;
    }
    t->state = TARGET_BACKOFF;
    if (!t->removing && !t->a->stopping)
        uv_timer_start(&t->timer, target_on_backoff, delay, 0);
}

/* Why the session that ends with status was dropped, for the metrics: the
 * agent's own close first, then what the status says about the target. */
static enum agent_drop_reason target_drop_reason(const struct target *t, int status, int was_ready)
{
    if (t->close_reason != NULL)
        return AGENT_DROP_AGENT;
    if (status == ISOPROF_ETOOBIG)
        return AGENT_DROP_OVERSIZED;
    if (status == ISOPROF_EJSON || status == ISOPROF_EWS)
        return AGENT_DROP_PROTOCOL_ERROR;
    if (status == ISOPROF_ETIMEDOUT)
        return AGENT_DROP_TIMEOUT;
    if (!was_ready && status != 0 && status != ISOPROF_ECLOSED)
        return AGENT_DROP_CONNECT_FAILED;
    if (was_ready && strcmp(target_runtime(t), "workerd") == 0)
        return AGENT_DROP_EVICTED; /* as target_on_close backs off for it */
    return AGENT_DROP_CLOSED;
}

static void target_on_close(struct cdp_session *s, int status, void *arg)
{
    (void)s;
    struct target *t = arg;
    struct agent *a = t->a;
    int was_ready = t->state == TARGET_READY;
    enum agent_drop_reason reason = target_drop_reason(t, status, was_ready);
    const char *why = cdp_last_error(s);
    if ((why == NULL || *why == '\0') && t->close_reason)
        why = t->close_reason;
    /* A session the agent closed (bad input, a failed call) is not the
     * target going away by itself. */
    t->close_reason_was_ours =
        t->close_reason != NULL || (status != 0 && status != ISOPROF_ECLOSED);
    t->close_reason = NULL;
    t->cdp = NULL;
    uv_timer_stop(&t->timer);
    t->a->tops->threads.parent_gone(t, t->close_reason_was_ours == 0);
    target_session_ended(t);
    if (was_ready)
        t->a->tops->anomaly.gone(t, t->close_reason_was_ours == 0);
    t->close_reason_was_ours = 0;
    if (!t->removing && !a->stopping) {
        a->n.sessions_dropped++;
        a->n.sessions_dropped_by[reason]++;
        log_warn("session dropped", "worker=%s isolate=%u inspector=%s err=%s why=%s", t->worker,
                 t->isolate, t->ep->cfg->inspector,
                 status == 0 ? "closed" : isoprof_strerror(status), why ? why : "");
    }
    int evicted = was_ready && strcmp(target_runtime(t), "workerd") == 0;
    if (was_ready && isoprof_now_mono_ns() - t->attached_mono_ns > TARGET_STABLE_NS)
        t->backoff_ms = 0;
    t->state = TARGET_BACKOFF;
    if (t->removing || a->stopping) {
        target_free_if_closed(t);
        return;
    }
    t->evicted = evicted;
    if (evicted)
        log_info("session evicted, backing off", "worker=%s isolate=%u", t->worker, t->isolate);
    target_backoff(t, evicted);
}

static void target_on_event(struct cdp_session *s, const char *session, const char *method,
                            yajl_val params, void *arg)
{
    (void)s;
    struct target *t = arg;
    log_debug("cdp event", "worker=%s session=%s method=%s", t->worker, session ? session : "main",
              method);
    if (t->a->tops->snapshot.on_event(t, session, method, params))
        return;
    if (t->a->tops->keepalive.on_event(t, session, method, params))
        return;
    t->a->tops->threads.on_event(t, session, method, params);
}

/* An event too big to parse on the loop: a heap snapshot's chunk, or
 * dropped. */
static int target_on_big_event(struct cdp_session *s, const char *method, char *data, size_t len,
                               void *arg)
{
    (void)s;
    struct target *t = arg;
    if (t->a->tops->keepalive.on_big_event(t, method, data, len)) {
        ws_msg_free(data);
        return 1;
    }
    return t->a->tops->snapshot.on_big_event(t, method, data, len);
}

static void target_on_worker_error(struct cdp_session *s, const char *session, const char *why,
                                   void *arg)
{
    (void)s;
    struct target *t = arg;
    t->a->tops->threads.worker_error(t, session, why);
}

/* --- windows taken --- */

/* Hand a window's raw profile (transferred) to the writer with what it was
 * taken for (tags: their references are released here) and the memory
 * polls that fell inside it (mem, reset for the next window). A window the
 * writer cannot queue is dropped, and its requester told why. */
static void target_submit(struct target *t, uint8_t type, char *raw, size_t len, int nested,
                          struct win_tags *tags, struct memacc *mem)
{
    struct agent *a = t->a;
    struct od_req *od = tags->od;
    /* A process found on the host is read through its own root: the files
     * of a runtime in a container are where it sees them. */
    char proc_root[40];
    const char *root = t->ep->cfg ? t->ep->cfg->root : NULL;
    if (t->ep->found && t->ep->pid != 0 && (root == NULL || root[0] == '\0')) {
        snprintf(proc_root, sizeof(proc_root), "/proc/%u/root", (unsigned)t->ep->pid);
        root = proc_root;
    }
    /* Deno keeps the JavaScript it runs in its emit cache, found through
     * the process's environment: its pid, from the host scan or the title. */
    uint32_t deno_pid = 0;
    const struct target *main = t->parent ? t->parent : t;
    if (strcmp(target_runtime(t), "deno") == 0)
        deno_pid = t->ep->pid ? t->ep->pid : main->title_pid;
    struct writer_meta m = {
        .worker = t->worker,
        .version = t->version,
        .runtime = target_runtime(t),
        .thread = t->thread,
        .pid = t->ep->pid,
        .container = t->ep->container,
        .root = root,
        .source_maps = t->ep->cfg ? &t->ep->cfg->source_maps : NULL,
        .root_is_tree =
            root != NULL && root != proc_root && strcmp(root, "") != 0 && strcmp(root, "/") != 0,
        .main_url = main->main_url,
        .owner = t->ep->cfg ? t->ep->cfg->inspector : NULL,
        .deno_pid = deno_pid,
        .labels = t->ep->cfg ? &t->ep->cfg->labels : NULL,
        .raw_nested = nested,
        .isolate = t->isolate,
        .type = type,
        .flags = od ? STORE_FLAG_ON_DEMAND : 0,
        /* heap: the sampling interval in bytes, restart-only */
        .interval_ns =
            type == STORE_TYPE_HEAP ? a->cfg_boot->sampling.heap.interval : tags->interval_ns,
        .anomaly = tags->anomaly,
        .pin = tags->pin,
        .od = od,
    };
    memacc_figures(mem, &m.mem);
    memacc_reset(mem);
    deploy_meta(a, t, &m);
    int rc = a->tops->submit(a->writer, raw, len, &m);
    episode_unref(tags->pin);
    if (rc != 0) {
        a->n.windows_dropped++;
        log_error("window dropped", "worker=%s isolate=%u type=%s err=%e", t->worker, t->isolate,
                  type == STORE_TYPE_HEAP ? "heap" : "cpu", rc);
        t->a->tops->window_done(od, rc, NULL, "the window could not be queued for storage");
    }
    memset(tags, 0, sizeof(*tags));
}

/* --- heap sampling and memory polls --- */

/* A reply on the way to a running heap sampler: 1 if it succeeded; 0 if
 * the session is gone, or it failed (logged). */
static int target_heap_step_ok(const struct target *t, const struct cdp_reply *r)
{
    if (r->status == ISOPROF_ECLOSED || t->state != TARGET_READY)
        return 0;
    if (r->status != 0) {
        log_warn("heap sampling not started", "worker=%s isolate=%u err=%e why=%s", t->worker,
                 t->isolate, r->status, r->error_message ? r->error_message : "");
        return 0;
    }
    return 1;
}

static void target_on_heap_started(struct target *t, struct cdp_reply *r)
{
    t->a->tops->threads.release(t); /* started or not, a waiting worker goes on now */
    if (!target_heap_step_ok(t, r)) {
        if (r->status != ISOPROF_ECLOSED && t->state == TARGET_READY)
            win_heap_off(&t->w, r->status);
        return;
    }
    log_debug("heap sampling started", "worker=%s isolate=%u interval=%U", t->worker, t->isolate,
              t->a->cfg_boot->sampling.heap.interval);
    win_heap_on(&t->w, isoprof_now_mono_ns());
}

static void target_heap_start(struct target *t)
{
    char params[128];
    snprintf(params, sizeof(params),
             "{\"samplingInterval\":%llu,\"includeObjectsCollectedByMajorGC\":false,"
             "\"includeObjectsCollectedByMinorGC\":false}",
             (unsigned long long)t->a->cfg_boot->sampling.heap.interval);
    if (target_call(t, "HeapProfiler.startSampling", params, TARGET_CALL_TIMEOUT_MS, 0,
                    target_on_heap_started) != 0) {
        log_warn("heap sampling not started", "worker=%s isolate=%u why=%s", t->worker, t->isolate,
                 "HeapProfiler.startSampling not sent");
        t->a->tops->threads.release(t);
    }
}

static void target_on_heap_enabled(struct target *t, struct cdp_reply *r)
{
    if (target_heap_step_ok(t, r))
        target_heap_start(t);
    else
        t->a->tops->threads.release(t);
}

static void target_on_heap_profile(struct target *t, struct cdp_reply *r)
{
    struct agent *a = t->a;
    struct win_tags tags;
    uint64_t pause = 0;
    if (r->status == 0 && r->raw != NULL && t->state == TARGET_READY)
        pause = target_pause(t, WIN_CALL_HEAP, r);
    t->call_sent_ns[WIN_CALL_HEAP] = 0;
    win_heap_done(&t->w, &tags);
    if (pause > 0 && tags.pin != NULL)
        t->a->tops->anomaly.heap_cost(t, tags.pin, pause);
    struct od_req *od = tags.od;
    if (r->status == ISOPROF_ECLOSED || t->state != TARGET_READY) {
        episode_unref(tags.pin);
        t->a->tops->window_done(od, -ECONNRESET, NULL, "the target went away");
        return;
    }
    if (r->status != 0 || r->raw == NULL) {
        const char *why = r->error_message ? r->error_message : "";
        if (r->status == ISOPROF_ECDP && strstr(why, "not started") != NULL) {
            /* Another client stopped the shared sampler. */
            win_heap_off(&t->w, 0);
            a->n.heap_restarts++;
            if (!t->heap_restart_logged)
                log_warn("heap sampler was stopped by another client, restarting it",
                         "worker=%s isolate=%u why=%s", t->worker, t->isolate, why);
            t->heap_restart_logged = 1;
            target_heap_start(t);
            t->a->tops->window_done(
                od, -EAGAIN, NULL,
                "another client had stopped the heap sampler; it was restarted, "
                "ask again");
        } else {
            a->n.windows_lost++;
            log_warn("window not taken", "worker=%s isolate=%u step=%s err=%e why=%s", t->worker,
                     t->isolate, "HeapProfiler.getSamplingProfile", r->status, why);
            t->a->tops->window_done(
                od, r->status ? r->status : -EIO, NULL,
                "HeapProfiler.getSamplingProfile failed (see the daemon's log)");
        }
        episode_unref(tags.pin);
        return;
    }
    char *raw = r->raw;
    r->raw = NULL;
    a->n.heap_windows++;
    target_submit(t, STORE_TYPE_HEAP, raw, r->raw_len, r->raw_nested, &tags, &t->mem_heap);
}

int target_win_heap_take(struct win_iso *w)
{
    struct target *t = container_of(w, struct target, w);
    t->call_sent_ns[WIN_CALL_HEAP] = isoprof_now_mono_ns();
    if (target_call(t, "HeapProfiler.getSamplingProfile", NULL, TARGET_HEAP_TIMEOUT_MS, CDP_RAW,
                    target_on_heap_profile) != 0) {
        t->call_sent_ns[WIN_CALL_HEAP] = 0;
        log_error("HeapProfiler.getSamplingProfile not sent", "worker=%s isolate=%u", t->worker,
                  t->isolate);
        return -EAGAIN;
    }
    return 0;
}

/* A JSON number field of obj, 0 when absent or not a number. */
static uint64_t num_field(yajl_val obj, const char *name)
{
    const char *path[] = {name, NULL};
    yajl_val v = obj ? yajl_tree_get(obj, path, yajl_t_number) : NULL;
    if (v == NULL)
        return 0;
    double d = YAJL_GET_DOUBLE(v);
    return d > 0 && d < 1e18 ? (uint64_t)d : 0;
}

static void target_on_heap_usage(struct target *t, struct cdp_reply *r)
{
    if (r->status == ISOPROF_ECLOSED || t->state != TARGET_READY)
        return;
    t->mem_inflight = 0;
    if (r->status != 0 || r->result == NULL) {
        if (t->a->n.memory_polls_failed++ == 0)
            log_warn("Runtime.getHeapUsage failed", "worker=%s isolate=%u err=%e why=%s", t->worker,
                     t->isolate, r->status, r->error_message ? r->error_message : "");
        return;
    }
    /* The JS heap, plus what workerd reports beside it (embedder objects
     * and ArrayBuffer backing stores), which count against its limit. */
    uint64_t used = num_field(r->result, "usedSize") +
                    num_field(r->result, "embedderHeapUsedSize") +
                    num_field(r->result, "backingStorageSize");
    log_debug("memory", "worker=%s isolate=%u used=%U", t->worker, t->isolate, used);
    if (used > 0) {
        memacc_add(&t->mem_cpu, used); /* the windows' figures */
        memacc_add(&t->mem_heap, used);
        t->a->tops->anomaly.memory(t, used);
    }
}

static void target_on_mem_timer(uv_timer_t *timer)
{
    struct target *t = timer->data;
    t->a->tops->threads.tick(t);
    t->a->tops->keepalive.tick(t);
    /* No poll while V8 writes a snapshot: it could only time out. None
     * while a call whose stall is measured is out either: V8 would answer
     * it only after that call, and its reply, arriving next, would move
     * the arrival the kernel reports (ws_message_arrival_ns) past the
     * measured call's own when the loop reads both late. */
    if (t->state != TARGET_READY || t->mem_inflight || t->a->stopping ||
        t->a->tops->snapshot.busy(t) || t->call_sent_ns[WIN_CALL_START] != 0 ||
        t->call_sent_ns[WIN_CALL_STOP] != 0 || t->call_sent_ns[WIN_CALL_HEAP] != 0)
        return;
    t->mem_inflight = 1;
    if (target_call(t, "Runtime.getHeapUsage", NULL, TARGET_CALL_TIMEOUT_MS, 0,
                    target_on_heap_usage) != 0)
        t->mem_inflight = 0;
}

static void target_on_enabled(struct target *t, struct cdp_reply *r)
{
    if (r->status != 0) {
        log_warn("Profiler.enable failed", "worker=%s thread=%s err=%s why=%s", t->worker,
                 t->thread, isoprof_strerror(r->status), r->error_message ? r->error_message : "");
        if (r->status == ISOPROF_ECLOSED || t->removing)
            return;
        if (t->parent) {
            t->a->tops->threads.drop(t, "Profiler.enable failed");
        } else if (t->cdp) {
            t->close_reason = "Profiler.enable failed";
            cdp_close(t->cdp);
        }
        return;
    }
    if (t->removing)
        return;
    target_attach_start(t);
}

void target_attach_start(struct target *t)
{
    struct agent *a = t->a;
    t->state = TARGET_READY;
    t->evicted = 0;
    t->attached_mono_ns = isoprof_now_mono_ns();
    t->isolate = identity_target(t);
    if (t->parent) {
        a->n.threads_attached++;
        log_info("thread attached",
                 "worker=%s version=%s thread=%s isolate=%u main_isolate=%u session=%s", t->worker,
                 t->version, t->thread, t->isolate, t->parent->isolate, t->session);
    } else {
        a->n.sessions_attached++;
        log_info("target attached", "worker=%s version=%s isolate=%u runtime=%s inspector=%s id=%s",
                 t->worker, t->version, t->isolate, target_runtime(t), t->ep->cfg->inspector,
                 t->id);
    }
    memacc_reset(&t->mem_cpu);
    memacc_reset(&t->mem_heap);
    t->a->tops->anomaly.attached(t);
    win_attached(&t->w, isoprof_now_mono_ns());
    t->a->tops->keepalive.tick(t);
    uint64_t poll_ms = a->cfg->sampling.memory_poll_ns / 1000000u;
    uv_timer_start(&t->mem_timer, target_on_mem_timer, poll_ms, poll_ms);
    if (target_call(t, "HeapProfiler.enable", NULL, TARGET_CALL_TIMEOUT_MS, 0,
                    target_on_heap_enabled) != 0) {
        log_warn("heap sampling not started", "worker=%s isolate=%u why=%s", t->worker, t->isolate,
                 "HeapProfiler.enable not sent");
        t->a->tops->threads.release(t);
    }
    if (t->parent == NULL)
        t->a->tops->threads.enable(t);
}

/* Profiler.enable on t's session: t is READY when it answers. */
int target_enable(struct target *t)
{
    return target_call(t, "Profiler.enable", NULL, TARGET_CALL_TIMEOUT_MS, 0, target_on_enabled);
}

static void target_on_open(struct cdp_session *s, int status, void *arg)
{
    struct target *t = arg;
    if (status != 0)
        return; /* target_on_close follows and backs off */
    cdp_set_worker_error_cb(s, target_on_worker_error);
    cdp_set_big_event_cb(s, target_on_big_event);
    if (target_enable(t) != 0) {
        t->close_reason = "Profiler.enable not sent";
        cdp_close(s);
    }
}

static void target_connect(struct target *t)
{
    struct agent *a = t->a;
    if (t->removing || a->stopping)
        return;
    t->state = TARGET_CONNECTING;
    int rc = cdp_open(a->loop, t->ep->cfg->host, t->ep->cfg->port, t->ws_path, AGENT_MSG_MAX,
                      &a->msg_budget, target_on_open, target_on_event, target_on_close, t, &t->cdp);
    if (rc != 0) {
        t->cdp = NULL;
        log_warn("connect failed", "worker=%s inspector=%s err=%e", t->worker,
                 t->ep->cfg->inspector, rc);
        target_backoff(t, 0);
    }
}

/* t's labels become worker and version (copied). */
static int target_set_labels(struct target *t, const char *worker, const char *version)
{
    char *w = isoprof_strdup(worker), *v = isoprof_strdup(version);
    if (w == NULL || v == NULL) {
        isoprof_free(w);
        isoprof_free(v);
        return -ENOMEM;
    }
    isoprof_free(t->worker);
    isoprof_free(t->version);
    t->worker = w;
    t->version = v;
    return 0;
}

const char *target_version_of(const struct endpoint *ep)
{
    if (ep->cfg->version != NULL)
        return ep->cfg->version;
    return ep->version[0] ? ep->version : "unknown";
}

const char *target_version_source(const struct endpoint *ep)
{
    if (ep->cfg->version != NULL)
        return "config";
    return ep->version[0] ? ep->version_source : NULL;
}

int target_version_changed(struct endpoint *ep)
{
    const char *ver = target_version_of(ep);
    char *v = target_label_dup(ver, strlen(ver));
    if (v == NULL)
        return -ENOMEM;
    int rc = 0;
    for (struct target *t = ep->a->targets; t && rc == 0; t = t->next) {
        if (t->ep != ep || t->parent != NULL || t->removing || strcmp(t->version, v) == 0)
            continue;
        log_info("target relabelled", "isolate=%u worker=%s version=%s was_version=%s source=%s",
                 t->isolate, t->worker, v, t->version,
                 target_version_source(ep) ? target_version_source(ep) : "none");
        rc = target_set_labels(t, t->worker, v);
        for (struct target *k = ep->a->targets; k && rc == 0; k = k->next)
            if (k->parent == t)
                rc = target_set_labels(k, k->worker, v);
    }
    isoprof_free(v);
    return rc;
}

int target_relabel(struct target *t)
{
    const struct cfg_target *c = t->ep->cfg;
    if (t->parent != NULL)
        return 0; /* its main thread relabels it */
    if (c->worker == NULL)
        return -EAGAIN; /* derived from the target's title or url at attach */
    const char *ver = target_version_of(t->ep);
    char *w = target_label_dup(c->worker, strlen(c->worker));
    char *v = target_label_dup(ver, strlen(ver));
    if (w == NULL || v == NULL) {
        isoprof_free(w);
        isoprof_free(v);
        return -ENOMEM;
    }
    if (strcmp(w, t->worker) != 0 || strcmp(v, t->version) != 0)
        log_info("target relabelled",
                 "isolate=%u worker=%s version=%s was_worker=%s was_version=%s", t->isolate, w, v,
                 t->worker, t->version);
    isoprof_free(t->worker);
    isoprof_free(t->version);
    t->worker = w;
    t->version = v;
    for (struct target *k = t->a->targets; k; k = k->next)
        if (k->parent == t && target_set_labels(k, w, v) != 0)
            return -ENOMEM;
    return 0;
}

struct target *target_alloc(struct agent *a, struct endpoint *ep, const char *id,
                            const char *ws_path, const char *worker, const char *version,
                            const char *thread)
{
    struct target *t = isoprof_calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->a = a;
    t->ep = ep;
    t->id = isoprof_strdup(id);
    t->ws_path = isoprof_strdup(ws_path);
    t->worker = isoprof_strdup(worker);
    t->version = isoprof_strdup(version);
    t->thread =
        thread ? target_label_dup(thread, strlen(thread)) : isoprof_strdup(TARGET_THREAD_MAIN);
    if (!t->id || !t->ws_path || !t->worker || !t->version || !t->thread) {
        isoprof_free(t->id);
        isoprof_free(t->ws_path);
        isoprof_free(t->worker);
        isoprof_free(t->version);
        isoprof_free(t->thread);
        isoprof_free(t);
        return NULL;
    }
    uv_timer_init(a->loop, &t->timer);
    uv_timer_init(a->loop, &t->win_timer);
    uv_timer_init(a->loop, &t->mem_timer);
    uv_timer_init(a->loop, &t->hold_timer);
    t->timer.data = t->win_timer.data = t->mem_timer.data = t->hold_timer.data = t;
    win_iso_init(&t->w, &a->wins, &ep->wins);
    warm_init(&t->ka.warm);
    memacc_reset(&t->mem_cpu);
    memacc_reset(&t->mem_heap);
    return t;
}

void target_link(struct target *t)
{
    t->next = t->a->targets;
    t->a->targets = t;
}

/* The pid in a Deno target's title ("deno - main [pid: 4242]"), 0 if
 * none: the process whose emit cache holds its transpiled modules. */
static uint32_t title_pid(const char *title)
{
    const char *p = title ? strstr(title, "[pid: ") : NULL;
    if (p == NULL)
        return 0;
    uint64_t v = 0;
    for (p += 6; *p >= '0' && *p <= '9' && v <= UINT32_MAX; p++)
        v = v * 10 + (uint64_t)(*p - '0');
    return *p == ']' && v > 0 && v <= UINT32_MAX ? (uint32_t)v : 0;
}

static struct target *target_new(struct endpoint *ep, const struct discovered *d)
{
    char *worker = worker_name(ep, d);
    const char *ver = target_version_of(ep);
    char *version = target_label_dup(ver, strlen(ver));
    struct target *t =
        worker && version ? target_alloc(ep->a, ep, d->id, d->path, worker, version, NULL) : NULL;
    isoprof_free(worker);
    isoprof_free(version);
    if (t != NULL) {
        t->title_pid = title_pid(d->title);
        /* Where its scripts are: without it (no memory) only its working
         * directory, when known, is its tree. */
        if (d->url != NULL && strncmp(d->url, "file://", 7) == 0)
            t->main_url = isoprof_strdup(d->url);
        target_link(t);
    }
    return t;
}

void target_remove(struct target *t)
{
    if (t->removing)
        return;
    int was_ready = t->state == TARGET_READY;
    if (t->parent == NULL)
        t->a->tops->threads.parent_gone(t, !t->a->stopping); /* its workers first */
    else
        t->a->tops->threads.unlink(t); /* released, detached, its calls forgotten */
    t->removing = 1;
    uv_timer_stop(&t->timer);
    target_session_ended(t);
    if (was_ready && t->parent == NULL)
        t->a->tops->anomaly.gone(t, !t->a->stopping); /* it left /json/list */
    t->pending_closes += 4;
    uv_close((uv_handle_t *)&t->timer, target_on_timer_close);
    uv_close((uv_handle_t *)&t->win_timer, target_on_timer_close);
    uv_close((uv_handle_t *)&t->mem_timer, target_on_timer_close);
    uv_close((uv_handle_t *)&t->hold_timer, target_on_timer_close);
    if (t->cdp)
        cdp_close(t->cdp);
}

/* ep's main-thread targets not marked listed go. */
static void target_detach_unlisted(struct endpoint *ep)
{
    for (struct target *t = ep->a->targets, *next; t; t = next) {
        next = t->next;
        if (t->ep == ep && t->parent == NULL && !t->listed && !t->removing) {
            log_info("target detached", "worker=%s isolate=%u inspector=%s id=%s", t->worker,
                     t->isolate, ep->cfg->inspector, t->id);
            target_remove(t);
        }
    }
}

void target_sync(struct endpoint *ep, const struct discovered *d, size_t n)
{
    struct agent *a = ep->a;
    for (struct target *t = a->targets; t; t = t->next)
        if (t->ep == ep)
            t->listed = 0;
    for (size_t i = 0; i < n; i++) {
        struct target *t;
        for (t = a->targets; t; t = t->next)
            if (t->ep == ep && t->parent == NULL && !t->removing && strcmp(t->id, d[i].id) == 0)
                break;
        if (t != NULL) {
            t->listed = 1;
            continue;
        }
        t = target_new(ep, &d[i]);
        if (t == NULL) {
            log_error("out of memory adding target", "inspector=%s", ep->cfg->inspector);
            continue;
        }
        t->listed = 1;
        log_info("target found", "worker=%s inspector=%s id=%s", t->worker, ep->cfg->inspector,
                 t->id);
        target_connect(t);
    }
    target_detach_unlisted(ep);
}

size_t target_endpoint_down(struct endpoint *ep)
{
    size_t kept = 0;
    for (struct target *t = ep->a->targets; t; t = t->next) {
        if (t->ep != ep || t->parent != NULL || t->removing)
            continue;
        /* An evicted one's process is there: it waits its backoff out. */
        t->listed = t->state == TARGET_READY || t->evicted;
        kept += t->listed != 0;
    }
    target_detach_unlisted(ep);
    return kept;
}

/* --- windows (asked for by windows.c) --- */

void target_win_label(const struct win_iso *w, const char **worker, uint32_t *isolate)
{
    const struct target *t = container_of(w, const struct target, w);
    *worker = t->worker;
    *isolate = t->isolate;
}

static void target_on_win_timer(uv_timer_t *timer)
{
    struct target *t = container_of(timer, struct target, win_timer);
    win_wake(&t->w, isoprof_now_mono_ns());
}

void target_win_arm(struct win_iso *w, uint64_t due_ns)
{
    struct target *t = container_of(w, struct target, w);
    if (due_ns == 0) {
        uv_timer_stop(&t->win_timer);
        return;
    }
    uint64_t now = isoprof_now_mono_ns();
    /* Rounded up: a wake-up a fraction of a ms early would find nothing
     * due and sleep again for 0 ms. */
    uint64_t ms = due_ns > now ? (due_ns - now + 999999u) / 1000000u : 0;
    uv_timer_start(&t->win_timer, target_on_win_timer, ms, 0);
}

static void target_window_failed(struct target *t, const char *step, struct cdp_reply *r)
{
    log_warn("window not taken", "worker=%s isolate=%u step=%s err=%s why=%s", t->worker,
             t->isolate, step, isoprof_strerror(r->status),
             r->error_message ? r->error_message : "");
    if (r->status == ISOPROF_ETIMEDOUT && t->a->tops->snapshot.busy(t)) {
        /* V8 answers once it has written the heap snapshot it is taking:
         * not a stall, the session stays. */
    } else if (r->status == ISOPROF_ETIMEDOUT && t->parent != NULL && !t->removing) {
        /* A worker that holds a window and answers nothing is dropped;
         * the main thread and the other workers carry on. */
        log_warn("thread stalled", "worker=%s thread=%s isolate=%u step=%s", t->worker, t->thread,
                 t->isolate, step);
        t->a->tops->threads.drop(t, "stalled: a window's start or stop went unanswered");
    } else if (r->status == ISOPROF_ETIMEDOUT && t->cdp != NULL) {
        /* The target holds the window and answers nothing: drop the
         * session (which stops its profiler) and keep it away for a while,
         * so the other targets get the slots. */
        t->stalls++;
        t->close_reason = "stalled: a window's start or stop went unanswered";
        log_warn("target stalled", "worker=%s isolate=%u step=%s stalls=%u", t->worker, t->isolate,
                 step, t->stalls);
        cdp_close(t->cdp);
    } else if (r->status != ISOPROF_ETIMEDOUT) {
        t->stalls = 0; /* it answered, if only to say no */
    }
}

static void target_on_stopped(struct target *t, struct cdp_reply *r)
{
    int ok = r->status == 0 && r->raw != NULL;
    struct win_tags tags;
    if (ok && t->w.cpu == WIN_STOPPING)
        t->a->tops->keepalive.window_cost(t, WIN_CALL_STOP, target_pause(t, WIN_CALL_STOP, r));
    t->call_sent_ns[WIN_CALL_STOP] = 0;
    uint64_t warm_iv = t->a->tops->keepalive.window_end(t);
    if (win_cpu_stopped(&t->w, isoprof_now_mono_ns(), ok, &tags) != 0)
        return; /* the session went away first; already accounted */
    if (warm_iv != 0)
        tags.interval_ns = warm_iv; /* the keep-alive's profiler sampled it */
    if (!ok) {
        target_window_failed(t, "Profiler.stop", r);
        return;
    }
    t->stalls = 0;
    char *raw = r->raw;
    r->raw = NULL;
    target_submit(t, STORE_TYPE_CPU, raw, r->raw_len, r->raw_nested, &tags, &t->mem_cpu);
}

int target_win_cpu_stop(struct win_iso *w)
{
    struct target *t = container_of(w, struct target, w);
    t->call_sent_ns[WIN_CALL_STOP] = isoprof_now_mono_ns();
    int rc =
        target_call(t, "Profiler.stop", NULL, TARGET_STOP_TIMEOUT_MS, CDP_RAW, target_on_stopped);
    if (rc != 0) {
        t->call_sent_ns[WIN_CALL_STOP] = 0;
        log_error("Profiler.stop not sent", "worker=%s err=%e", t->worker, rc);
    }
    return rc;
}

static void target_on_started(struct target *t, struct cdp_reply *r)
{
    if (t->w.cpu != WIN_STARTING) {
        t->call_sent_ns[WIN_CALL_START] = 0;
        return;
    }
    if (r->status != 0) {
        t->call_sent_ns[WIN_CALL_START] = 0;
        target_window_failed(t, "Profiler.start", r);
        win_cpu_started(&t->w, isoprof_now_mono_ns(), 0);
        return;
    }
    uint64_t pause = target_pause(t, WIN_CALL_START, r);
    t->a->tops->keepalive.window_cost(t, WIN_CALL_START, pause);
    log_debug("window started", "worker=%s isolate=%u interval_ns=%U start_us=%U warm=%d",
              t->worker, t->isolate,
              t->ka.win_warm ? t->ka.warm.interval_ns : t->w.tags.interval_ns, pause / 1000u,
              t->ka.win_warm);
    win_cpu_started(&t->w, isoprof_now_mono_ns(), 1);
}

static void target_on_interval(struct target *t, struct cdp_reply *r)
{
    if (t->w.cpu != WIN_STARTING)
        return;
    if (r->status != 0) {
        /* "Cannot change sampling interval when profiling.": another client
         * is profiling this isolate. Starting now would share (and our stop
         * would end) its recording, so this window is skipped. */
        target_window_failed(t, "Profiler.setSamplingInterval", r);
        win_cpu_started(&t->w, isoprof_now_mono_ns(), 0);
        return;
    }
    t->call_sent_ns[WIN_CALL_START] = isoprof_now_mono_ns();
    if (target_call(t, "Profiler.start", NULL, TARGET_CALL_TIMEOUT_MS, 0, target_on_started) != 0) {
        t->call_sent_ns[WIN_CALL_START] = 0;
        win_cpu_started(&t->w, isoprof_now_mono_ns(), 0);
    }
}

int target_win_cpu_start(struct win_iso *w, uint64_t interval_ns)
{
    struct target *t = container_of(w, struct target, w);
    char params[64];
    snprintf(params, sizeof(params), "{\"interval\":%llu}",
             (unsigned long long)(interval_ns / 1000u));
    memacc_reset(&t->mem_cpu);
    t->a->tops->keepalive.window_start(t);
    if (t->ka.win_warm) {
        /* The keep-alive's profiler samples at its own interval, which V8
         * will not change while it runs: straight to the start. */
        t->call_sent_ns[WIN_CALL_START] = isoprof_now_mono_ns();
        return target_call(t, "Profiler.start", NULL, TARGET_CALL_TIMEOUT_MS, 0, target_on_started);
    }
    return target_call(t, "Profiler.setSamplingInterval", params, TARGET_CALL_TIMEOUT_MS, 0,
                       target_on_interval);
}

/*
 * ondemand.c - windows a person asked for (POST /profile on the control
 * socket, `isoprof profile`).
 *
 * Two objects. An od_req is one window on one target: windows.c queues it
 * on the target's windows (win_ondemand_cpu, win_ondemand_heap), it is
 * taken like any window, flagged STORE_FLAG_ON_DEMAND, converted and stored
 * by the writer, and the converted pprof comes back here through the
 * daemon (ondemand_window_done). An od_waiter is one
 * request: it holds a reference to the od_req of each target it asked for
 * and is answered once all of them ended; requests for the same target and
 * the same window (type, duration, interval) share one od_req, so two
 * people asking at once cost the target one window.
 *
 * Which window an od_req gets, and when, is windows.c's rule: a CPU one
 * starts at once, outside max_concurrent, unless the target is recording,
 * then it waits for that window to end; a heap one joins the
 * getSamplingProfile in flight, if any, else takes one now.
 *
 * Merging (several isolates, all=1) and gzip run in the thread pool; the
 * loop only moves buffers.
 *
 * DESIGN: loop thread only, except the waiter's merge job, which reads the
 * od_reqs' buffers (they are complete and no longer written) and writes
 * only its own fields.
 */
#include "ondemand.h"
#include "daemon.h"
#include "log.h"
#include "pprof.h"
#include "snapshot.h"

#include "base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

enum od_state { OD_WAITING, OD_DONE };

struct od_req {
    unsigned refs;
    struct agent *a;
    uint8_t type;
    uint64_t duration_ns, interval_ns;
    enum od_state state;
    int err;
    char why[160];
    struct pprof_buf pprof; /* the converted window, once done */
    struct od_waiter **waiters;
    size_t nwaiters;
};

struct od_waiter {
    struct agent *a;
    od_done_cb cb; /* NULL once cancelled */
    void *arg;
    struct od_req **reqs;
    size_t n, left;
    int err;
    char why[200];
    int in_pool;
    uv_work_t work;
    struct pprof_buf merged, gz;
    struct od_waiter *next; /* a->od_waiters */
};

struct od_req *ondemand_ref(struct od_req *r)
{
    if (r != NULL)
        r->refs++;
    return r;
}

void ondemand_unref(struct od_req *r)
{
    if (r == NULL || --r->refs > 0)
        return;
    pprof_buf_free(&r->pprof);
    isoprof_free(r->waiters);
    isoprof_free(r);
}

static void waiter_unlink(struct od_waiter *w)
{
    struct od_waiter **p = &w->a->od_waiters;
    while (*p && *p != w)
        p = &(*p)->next;
    if (*p)
        *p = w->next;
}

static void waiter_free(struct od_waiter *w)
{
    for (size_t i = 0; i < w->n; i++) {
        struct od_req *r = w->reqs[i];
        if (r == NULL)
            continue;
        /* Take w out of r's list (r may live on, shared). */
        for (size_t k = 0; k < r->nwaiters; k++) {
            if (r->waiters[k] == w) {
                r->waiters[k] = r->waiters[--r->nwaiters];
                break;
            }
        }
        ondemand_unref(r);
    }
    isoprof_free(w->reqs);
    pprof_buf_free(&w->merged);
    pprof_buf_free(&w->gz);
    isoprof_free(w);
}

static void waiter_answer(struct od_waiter *w, int err, const char *why)
{
    waiter_unlink(w);
    od_done_cb cb = w->cb;
    w->cb = NULL;
    if (cb != NULL) {
        if (err == 0) {
            uint8_t *gz = w->gz.data;
            size_t len = w->gz.len;
            w->gz.data = NULL;
            w->gz.len = 0;
            cb(0, NULL, gz, len, w->arg);
        } else {
            cb(err, why, NULL, 0, w->arg);
        }
    }
    waiter_free(w);
}

static void merge_on_work(uv_work_t *req)
{
    struct od_waiter *w = container_of(req, struct od_waiter, work);
    const struct pprof_buf *one = &w->reqs[0]->pprof;
    if (w->n > 1) {
        struct pprof_buf *in = isoprof_calloc(w->n, sizeof(*in));
        if (in == NULL) {
            w->err = -ENOMEM;
            return;
        }
        for (size_t i = 0; i < w->n; i++)
            in[i] = w->reqs[i]->pprof;
        char *why = NULL;
        w->err = pprof_merge(in, w->n, &w->merged, &why);
        isoprof_free(in);
        if (why != NULL) {
            snprintf(w->why, sizeof(w->why), "merging the isolates' profiles: %s", why);
            isoprof_free(why);
        }
        if (w->err != 0)
            return;
        one = &w->merged;
    }
    w->err = pprof_gzip(one->data, one->len, &w->gz);
}

static void merge_on_done(uv_work_t *req, int status)
{
    struct od_waiter *w = container_of(req, struct od_waiter, work);
    w->in_pool = 0;
    int err = status != 0 ? status : w->err;
    waiter_answer(w, err, err ? (w->why[0] ? w->why : isoprof_strerror(err)) : NULL);
}

/* Every od_req of w ended: answer (after the merge and gzip, in the pool). */
static void waiter_finish(struct od_waiter *w)
{
    if (w->err != 0 || w->cb == NULL) {
        waiter_answer(w, w->err ? w->err : -ECANCELED, w->why);
        return;
    }
    w->in_pool = 1;
    if (uv_queue_work(w->a->loop, &w->work, merge_on_work, merge_on_done) != 0) {
        w->in_pool = 0;
        waiter_answer(w, -ENOMEM, "cannot queue the merge");
    }
}

/* r ended (err 0: r->pprof holds the window): tell its waiters. */
static void req_finish(struct od_req *r, int err, const char *why)
{
    if (r->state == OD_DONE)
        return;
    r->state = OD_DONE;
    r->err = err;
    if (err && why)
        snprintf(r->why, sizeof(r->why), "%s", why);
    ondemand_ref(r); /* the waiters may drop the last other reference */
    while (r->nwaiters > 0) {
        /* Off r's list, so it is told once; w keeps its reference (its
         * merge reads r->pprof). */
        struct od_waiter *w = r->waiters[--r->nwaiters];
        if (err && w->err == 0) {
            w->err = err;
            snprintf(w->why, sizeof(w->why), "%s", r->why[0] ? r->why : isoprof_strerror(err));
        }
        if (--w->left == 0)
            waiter_finish(w);
    }
    ondemand_unref(r);
}

void ondemand_window_done(struct od_req *r, int err, struct pprof_buf *pprof, const char *why)
{
    if (r == NULL)
        return;
    if (r->state != OD_DONE) {
        if (err == 0 && pprof != NULL) {
            r->pprof = *pprof;
            pprof->data = NULL;
            pprof->len = 0;
        }
        req_finish(r, err == 0 && r->pprof.data == NULL ? -EIO : err, why);
    }
    ondemand_unref(r); /* the writer's (or the target's) reference */
}

void ondemand_win_ref(void *od)
{
    ondemand_ref(od);
}

void ondemand_win_unref(void *od)
{
    ondemand_unref(od);
}

void ondemand_win_fail(void *od, int err, const char *why)
{
    ondemand_window_done(od, err, NULL, why);
}

static int req_add_waiter(struct od_req *r, struct od_waiter *w)
{
    struct od_waiter **nw = isoprof_realloc(r->waiters, (r->nwaiters + 1) * sizeof(*nw));
    if (nw == NULL)
        return -ENOMEM;
    r->waiters = nw;
    r->waiters[r->nwaiters++] = w;
    return 0;
}

/* A new od_req for t, handed to its windows: started, waiting, or already
 * answered (r->state OD_DONE). NULL with *err set when t's windows would
 * not take it. */
static struct od_req *req_new(struct agent *a, struct target *t, uint8_t type, uint64_t duration_ns,
                              uint64_t interval_ns, int *err)
{
    struct od_req *r = isoprof_calloc(1, sizeof(*r));
    if (r == NULL) {
        *err = -ENOMEM;
        return NULL;
    }
    r->refs = 1; /* the caller's (handed to the waiter) */
    r->a = a;
    r->type = type;
    r->duration_ns = duration_ns;
    r->interval_ns = interval_ns;
    r->state = OD_WAITING;
    uint64_t now = isoprof_now_mono_ns();
    int rc = type == STORE_TYPE_SNAPSHOT ? snapshot_ondemand(t, r)
             : type == STORE_TYPE_HEAP   ? win_ondemand_heap(&t->w, now, r)
                                       : win_ondemand_cpu(&t->w, now, r, duration_ns, interval_ns);
    if (rc != 0) {
        ondemand_unref(r);
        *err = rc == -EBUSY || rc == -ENOMEM ? rc : -EAGAIN;
        return NULL;
    }
    return r;
}

int ondemand_start(struct agent *a, struct target *const *t, size_t n, uint8_t type,
                   uint64_t duration_ns, uint64_t interval_ns, od_done_cb cb, void *arg,
                   struct od_waiter **out)
{
    if (a == NULL || t == NULL || n == 0 || cb == NULL ||
        (type != STORE_TYPE_CPU && type != STORE_TYPE_HEAP && type != STORE_TYPE_SNAPSHOT) ||
        (type == STORE_TYPE_SNAPSHOT && n != 1) ||
        (type == STORE_TYPE_CPU && (duration_ns == 0 || interval_ns < CFG_OD_INTERVAL_MIN_NS)))
        return -EINVAL;
    if (a->stopping)
        return -ESHUTDOWN;
    for (size_t i = 0; i < n; i++)
        if (t[i]->state != TARGET_READY || t[i]->removing ||
            (type == STORE_TYPE_HEAP && !t[i]->w.heap_on))
            return -EAGAIN;
    struct od_waiter *w = isoprof_calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    w->reqs = isoprof_calloc(n, sizeof(*w->reqs));
    if (w->reqs == NULL) {
        isoprof_free(w);
        return -ENOMEM;
    }
    w->a = a;
    w->cb = cb;
    w->arg = arg;
    w->n = n;
    w->left = n;
    w->next = a->od_waiters;
    a->od_waiters = w;
    if (type != STORE_TYPE_CPU)
        duration_ns = interval_ns = 0;
    int err = 0;
    for (size_t i = 0; i < n; i++) {
        struct od_req *r =
            type == STORE_TYPE_SNAPSHOT
                ? NULL
                : win_ondemand_shared(&t[i]->w, type == STORE_TYPE_HEAP, duration_ns, interval_ns);
        if (r != NULL)
            ondemand_ref(r);
        else
            r = req_new(a, t[i], type, duration_ns, interval_ns, &err);
        if (r == NULL)
            break;
        if (req_add_waiter(r, w) != 0) {
            ondemand_unref(r);
            err = -ENOMEM;
            break;
        }
        w->reqs[i] = r;
        if (r->state == OD_DONE) { /* failed at once: req_finish had no waiter to tell why */
            w->left--;
            if (w->err == 0) {
                w->err = r->err ? r->err : -EIO;
                snprintf(w->why, sizeof(w->why), "%s",
                         r->why[0] ? r->why : isoprof_strerror(w->err));
            }
        }
    }
    if (err != 0) {
        /* Undo: the windows already asked for are still taken and stored. */
        w->cb = NULL;
        waiter_unlink(w);
        waiter_free(w);
        return err;
    }
    log_info("on-demand window", "worker=%s isolates=%U type=%s duration_ns=%U interval_ns=%U",
             t[0]->worker, (uint64_t)n, store_type_name(type), duration_ns, interval_ns);
    if (out)
        *out = w;
    if (w->left == 0)
        waiter_finish(w);
    return 0;
}

/* t is one of the isolates r names (attached or not). */
static int request_names(const struct od_ask *r, const struct target *t)
{
    if (t->removing || t->worker == NULL || strcmp(t->worker, r->worker) != 0)
        return 0;
    if (r->version != NULL && (t->version == NULL || strcmp(t->version, r->version) != 0))
        return 0;
    if (r->has_isolate && t->isolate != r->isolate)
        return 0;
    return r->thread == NULL || strcmp(t->thread, r->thread) == 0;
}

/* Why no isolate matched r, in ref. */
static void request_unmatched(const struct od_ask *r, size_t nworker, struct od_refusal *ref)
{
    ref->status = 404;
    if (nworker == 0)
        snprintf(ref->why, sizeof(ref->why), "unknown worker %s", r->worker);
    else if (r->has_thread && !r->has_isolate)
        snprintf(ref->why, sizeof(ref->why), "worker %s has no thread %s%s%s", r->worker, r->thread,
                 r->version ? " in version " : "", r->version ? r->version : "");
    else if (r->has_isolate)
        snprintf(ref->why, sizeof(ref->why), "worker %s has no isolate %" PRIu32 "%s%s", r->worker,
                 r->isolate, r->version ? " of version " : "", r->version ? r->version : "");
    else
        snprintf(ref->why, sizeof(ref->why), "worker %s has no version %s", r->worker, r->version);
}

/* ondemand_start's error as the answer to r. */
static void request_refused(const struct od_ask *r, int rc, struct od_refusal *ref)
{
    ref->status = 500;
    if (rc == -ESHUTDOWN) {
        ref->status = 503;
        snprintf(ref->why, sizeof(ref->why), "isoprofd is stopping");
    } else if (rc == -EAGAIN) {
        ref->status = 503;
        snprintf(ref->why, sizeof(ref->why),
                 "target not attached: worker %s is not ready for a %s window", r->worker,
                 store_type_name(r->type));
    } else if (rc == -EBUSY) {
        ref->status = 409;
        snprintf(ref->why, sizeof(ref->why),
                 "worker %s: too many on-demand windows already queued for this isolate; ask "
                 "again when one has ended",
                 r->worker);
    } else if (rc == -EINVAL) {
        ref->status = 400;
        snprintf(ref->why, sizeof(ref->why), "the window asked for is not valid");
    } else {
        snprintf(ref->why, sizeof(ref->why), "%s", isoprof_strerror(rc));
    }
}

int ondemand_request(struct agent *a, const struct od_ask *r, od_done_cb cb, void *arg,
                     struct od_waiter **out, struct od_refusal *ref)
{
    size_t nworker = 0, nmatch = 0, nready = 0;
    for (const struct target *t = a->targets; t; t = t->next) {
        nworker += !t->removing && t->worker != NULL && strcmp(t->worker, r->worker) == 0;
        if (!request_names(r, t))
            continue;
        nmatch++;
        nready += t->state == TARGET_READY;
    }
    if (nmatch == 0) {
        request_unmatched(r, nworker, ref);
        return -ENOENT;
    }
    if (nready == 0) {
        ref->status = 503;
        snprintf(ref->why, sizeof(ref->why),
                 "target not attached: worker %s is connecting or backing off", r->worker);
        return -EAGAIN;
    }
    if (nready > 1 && (!r->all || r->type == STORE_TYPE_SNAPSHOT)) {
        ref->status = 409;
        snprintf(ref->why, sizeof(ref->why),
                 r->type == STORE_TYPE_SNAPSHOT
                     ? "worker %s has %zu attached isolates: a heap snapshot is of one, name it "
                       "with isolate=ID"
                     : "worker %s has %zu attached isolates: name one with isolate=ID, or ask "
                       "for all=1 (one merged profile)",
                 r->worker, nready);
        for (const struct target *t = a->targets; t && ref->nisolates < OD_REFUSAL_ISOLATES;
             t = t->next)
            if (request_names(r, t) && t->state == TARGET_READY)
                ref->isolates[ref->nisolates++] = t->isolate;
        return -EBUSY;
    }
    struct target **ts = isoprof_calloc(nready, sizeof(*ts));
    if (ts == NULL) {
        ref->status = 500;
        snprintf(ref->why, sizeof(ref->why), "out of memory");
        return -ENOMEM;
    }
    size_t n = 0;
    for (struct target *t = a->targets; t && n < nready; t = t->next)
        if (request_names(r, t) && t->state == TARGET_READY)
            ts[n++] = t;
    int rc = ondemand_start(a, (struct target *const *)ts, n, r->type, r->duration_ns,
                            r->interval_ns, cb, arg, out);
    isoprof_free(ts);
    if (rc != 0)
        request_refused(r, rc, ref);
    return rc;
}

void ondemand_cancel(struct od_waiter *w)
{
    if (w != NULL)
        w->cb = NULL;
}

void ondemand_stop(struct agent *a)
{
    /* Answer now; the windows themselves still end and are stored (or
     * not) by the shutdown. A waiter in the merge job is answered by it. */
    struct od_waiter *w = a->od_waiters;
    while (w != NULL) {
        struct od_waiter *next = w->next;
        if (!w->in_pool && w->cb != NULL) {
            od_done_cb cb = w->cb;
            w->cb = NULL;
            cb(-ESHUTDOWN, "isoprofd is stopping", NULL, 0, w->arg);
        }
        w = next;
    }
}

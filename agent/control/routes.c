/*
 * routes.c - what the control socket answers: a complete request is
 * dispatched by its path and method to GET /status, GET /metrics (the
 * bodies are report.c's) or POST /profile, which starts an on-demand
 * window (ondemand.c) and answers when it ends.
 */
#include "control_internal.h"

#include "control.h"
#include "daemon.h"
#include "log.h"

#include "base.h"

#include <errno.h>
#include <http_parser.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static void conn_on_profile(int err, const char *why, uint8_t *gz, size_t len, void *arg)
{
    struct ctl_conn *c = arg;
    c->waiter = NULL;
    c->od_pending = 0;
    if (c->st != C_BUSY) { /* cannot happen: a closed connection cancelled */
        isoprof_free(gz);
        return;
    }
    if (err == 0) {
        ctl_conn_respond(c, 200, CT_PPROF, (char *)gz, len, NULL, 0);
        return;
    }
    int status = 500;
    if (err == -ESHUTDOWN || err == -EAGAIN || err == -ECONNRESET || err == -ENOTCONN ||
        err == ISOPROF_ECLOSED)
        status = 503;
    else if (err == -EBUSY)
        status = 409; /* a heap snapshot refused (skip rules, one already asked for) */
    if (why == NULL || why[0] == '\0')
        why = isoprof_strerror(err);
    log_warn("on-demand profile failed", "err=%e why=%s", err, why);
    ctl_conn_error(c, status, 0, "%s", why);
}

static void route_profile(struct ctl_conn *c, const char *q, size_t qlen)
{
    struct agent *a = c->ctl->a;
    struct ctl_profile_req r;
    char why[CTL_LABEL_MAX + 100];
    unsigned waiting = 0;
    for (const struct ctl_conn *o = c->ctl->conns; o; o = o->next)
        waiting += o->l == c->l && o->waiter != NULL;
    if (waiting >= CTL_WAITING_MAX) {
        ctl_conn_error(c, 503, 0,
                       "%u requests are waiting for on-demand windows already; ask again when one "
                       "is answered",
                       waiting);
        return;
    }
    if (ctl_profile_parse(q, qlen, a->cfg->sampling.cpu.interval_ns, &r, why, sizeof(why)) != 0) {
        ctl_conn_error(c, 400, 0, "%s", why);
        return;
    }
    size_t nworker = 0, nmatch = 0, nready = 0;
    for (struct target *t = a->targets; t; t = t->next) {
        if (t->removing || t->worker == NULL || strcmp(t->worker, r.worker) != 0)
            continue;
        nworker++;
        if (r.has_version && (t->version == NULL || strcmp(t->version, r.version) != 0))
            continue;
        if (r.has_isolate && t->isolate != r.isolate)
            continue;
        /* an isolate named by id needs no thread; else the main thread by default */
        if ((r.has_thread || !r.has_isolate) && strcmp(t->thread, r.thread) != 0)
            continue;
        nmatch++;
        if (t->state == TARGET_READY)
            nready++;
    }
    if (nworker == 0) {
        ctl_conn_error(c, 404, 0, "unknown worker %s", r.worker);
        return;
    }
    if (nmatch == 0) {
        if (r.has_thread && !r.has_isolate)
            ctl_conn_error(c, 404, 0, "worker %s has no thread %s%s%s", r.worker, r.thread,
                           r.has_version ? " in version " : "", r.has_version ? r.version : "");
        else if (r.has_isolate)
            ctl_conn_error(c, 404, 0, "worker %s has no isolate %" PRIu32 "%s%s", r.worker,
                           r.isolate, r.has_version ? " of version " : "",
                           r.has_version ? r.version : "");
        else
            ctl_conn_error(c, 404, 0, "worker %s has no version %s", r.worker, r.version);
        return;
    }
    if (nready == 0) {
        ctl_conn_error(c, 503, 0, "target not attached: worker %s is connecting or backing off",
                       r.worker);
        return;
    }
    struct target **ts = isoprof_calloc(nready, sizeof(*ts));
    if (ts == NULL) {
        ctl_conn_error(c, 500, 0, "out of memory");
        return;
    }
    size_t n = 0;
    for (struct target *t = a->targets; t && n < nready; t = t->next) {
        if (t->removing || t->worker == NULL || strcmp(t->worker, r.worker) != 0 ||
            (r.has_version && (t->version == NULL || strcmp(t->version, r.version) != 0)) ||
            (r.has_isolate && t->isolate != r.isolate) ||
            ((r.has_thread || !r.has_isolate) && strcmp(t->thread, r.thread) != 0) ||
            t->state != TARGET_READY)
            continue;
        ts[n++] = t;
    }
    if (n > 1 && (!r.all || r.type == STORE_TYPE_SNAPSHOT)) {
        char msg[CTL_LABEL_MAX + 200];
        if (r.type == STORE_TYPE_SNAPSHOT)
            snprintf(msg, sizeof(msg),
                     "worker %s has %zu attached isolates: a heap snapshot is of one, name it "
                     "with isolate=ID",
                     r.worker, n);
        else
            snprintf(msg, sizeof(msg),
                     "worker %s has %zu attached isolates: name one with isolate=ID, or ask for "
                     "all=1 (one merged profile)",
                     r.worker, n);
        /* The cap holds the message escaped and n ids of 10 digits and a comma. */
        struct isoprof_buf b;
        isoprof_buf_init(&b, CTL_JSON_STR_MAX(sizeof(msg)) + 32 + 11 * n);
        isoprof_buf_puts(&b, "{\"error\":");
        isoprof_json_str(&b, msg);
        isoprof_buf_puts(&b, ",\"isolates\":[");
        for (size_t i = 0; i < n; i++)
            isoprof_buf_printf(&b, "%s%" PRIu32, i ? "," : "", ts[i]->isolate);
        isoprof_buf_puts(&b, "]}\n");
        isoprof_free(ts);
        char *body;
        size_t blen;
        if (isoprof_buf_take(&b, &body, &blen) != 0) {
            ctl_conn_error(c, 500, 0, "out of memory");
            return;
        }
        ctl_conn_respond(c, 409, CT_JSON, body, blen, NULL, 0);
        return;
    }
    struct od_waiter *w = NULL;
    c->od_pending = 1;
    /* The answer may come before ondemand_start returns (a window that
     * failed at once): od_pending tells. */
    int rc = ondemand_start(a, (struct target *const *)ts, n, r.type, r.seconds * 1000000000ull,
                            r.interval_ns, conn_on_profile, c, &w);
    isoprof_free(ts);
    if (rc != 0) {
        c->od_pending = 0;
        if (rc == -ESHUTDOWN)
            ctl_conn_error(c, 503, 0, "isoprofd is stopping");
        else if (rc == -EAGAIN)
            ctl_conn_error(c, 503, 0, "target not attached: worker %s is not ready for a %s window",
                           r.worker, store_type_name(r.type));
        else if (rc == -EBUSY)
            ctl_conn_error(c, 409, 0,
                           "worker %s: too many on-demand windows already queued for this isolate; "
                           "ask again when one has ended",
                           r.worker);
        else if (rc == -EINVAL)
            ctl_conn_error(c, 400, 0, "the window asked for is not valid");
        else
            ctl_conn_error(c, 500, 0, "%s", isoprof_strerror(rc));
        return;
    }
    if (c->od_pending)
        c->waiter = w; /* answered later, unless the client goes first */
}

/* --- routes --- */

static int path_is(const char *path, size_t len, const char *want)
{
    return strlen(want) == len && memcmp(path, want, len) == 0;
}

static void route_page(struct ctl_conn *c, int status_page)
{
    struct agent *a = c->ctl->a;
    size_t len = 0;
    char *body = status_page ? report_status(a, &len) : report_metrics(a, &len);
    if (body == NULL) {
        ctl_conn_error(c, 500, 1, "out of memory building the page");
        return;
    }
    ctl_conn_respond(c, 200, status_page ? CT_JSON : CT_METRICS, body, len, NULL, 0);
}

/* A complete request: answer it, now or when its window ends. */
void ctl_conn_dispatch(struct ctl_conn *c)
{
    c->st = C_BUSY;
    uv_timer_stop(&c->timer);
    int method = c->req.p.method;
    struct ctl_target t;
    if (ctl_req_target(&c->req, &t) != 0) {
        ctl_conn_error(c, 400, 1, "bad request target");
        return;
    }
    const char *path = t.path, *q = t.query;
    size_t plen = t.path_len, qlen = t.query_len;
    int get = method == HTTP_GET || method == HTTP_HEAD;
    log_debug("control request", "method=%s path=%s listener=%s", http_method_str(method),
              c->req.url, c->l->metrics_only ? "metrics" : "control");
    if (path_is(path, plen, "/metrics")) {
        if (get)
            route_page(c, 0);
        else
            ctl_conn_bad_method(c, "/metrics", 1);
        return;
    }
    if (c->l->metrics_only) {
        ctl_conn_error(c, 404, 0, "not found: this address serves GET /metrics only");
        return;
    }
    if (path_is(path, plen, "/status")) {
        if (get)
            route_page(c, 1);
        else
            ctl_conn_bad_method(c, "/status", 1);
        return;
    }
    if (path_is(path, plen, "/profile")) {
        if (method == HTTP_POST)
            route_profile(c, q, qlen);
        else
            ctl_conn_bad_method(c, "/profile", 0);
        return;
    }
    char shown[128];
    snprintf(shown, sizeof(shown), "%.*s%s", (int)(plen < 100 ? plen : 100), path,
             plen > 100 ? "..." : "");
    ctl_conn_error(c, 404, 0, "no such path %s (GET /status, GET /metrics, POST /profile)", shown);
}

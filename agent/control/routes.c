/*
 * routes.c - what the control socket answers: a complete request is
 * dispatched by its path and method to GET /status, GET /metrics (the
 * daemon's bodies, struct ctl_host) or POST /profile, which asks the
 * daemon for an on-demand window and answers when it ends.
 */
#include "control_internal.h"

#include "control.h"
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

/* A POST /profile the daemon refused: its error body, with the isolates
 * to choose from when it lists them. */
static void refuse(struct ctl_conn *c, const struct ctl_refusal *ref)
{
    int status = ref->status >= 400 && ref->status <= 599 ? ref->status : 500;
    if (ref->nisolates == 0) {
        ctl_conn_error(c, status, 0, "%s", ref->why[0] ? ref->why : "the window was refused");
        return;
    }
    size_t n = ref->nisolates < CTL_REFUSAL_ISOLATES ? ref->nisolates : CTL_REFUSAL_ISOLATES;
    /* The cap holds the message escaped and n ids of 10 digits and a comma. */
    struct isoprof_buf b;
    isoprof_buf_init(&b, CTL_JSON_STR_MAX(sizeof(ref->why)) + 32 + 11 * n);
    isoprof_buf_puts(&b, "{\"error\":");
    isoprof_json_str(&b, ref->why);
    isoprof_buf_puts(&b, ",\"isolates\":[");
    for (size_t i = 0; i < n; i++)
        isoprof_buf_printf(&b, "%s%" PRIu32, i ? "," : "", ref->isolates[i]);
    isoprof_buf_puts(&b, "]}\n");
    char *body;
    size_t blen;
    if (isoprof_buf_take(&b, &body, &blen) != 0) {
        ctl_conn_error(c, 500, 0, "out of memory");
        return;
    }
    ctl_conn_respond(c, status, CT_JSON, body, blen, NULL, 0);
}

static void route_profile(struct ctl_conn *c, const char *q, size_t qlen)
{
    struct control *ctl = c->ctl;
    struct ctl_profile_req r;
    char why[CTL_LABEL_MAX + 100];
    unsigned waiting = 0;
    for (const struct ctl_conn *o = ctl->conns; o; o = o->next)
        waiting += o->l == c->l && o->waiter != NULL;
    if (waiting >= CTL_WAITING_MAX) {
        ctl_conn_error(c, 503, 0,
                       "%u requests are waiting for on-demand windows already; ask again when one "
                       "is answered",
                       waiting);
        return;
    }
    if (ctl_profile_parse(q, qlen, ctl->host.interval_ns(ctl->host.arg), &r, why, sizeof(why)) !=
        0) {
        ctl_conn_error(c, 400, 0, "%s", why);
        return;
    }
    struct ctl_refusal ref = {0};
    void *ticket = NULL;
    c->od_pending = 1;
    /* The answer may come before profile returns (a window that failed at
     * once): od_pending tells. */
    if (ctl->host.profile(ctl->host.arg, &r, conn_on_profile, c, &ticket, &ref) != 0) {
        c->od_pending = 0;
        refuse(c, &ref);
        return;
    }
    if (c->od_pending)
        c->waiter = ticket; /* answered later, unless the client goes first */
}

/* --- routes --- */

static int path_is(const char *path, size_t len, const char *want)
{
    return strlen(want) == len && memcmp(path, want, len) == 0;
}

static void route_page(struct ctl_conn *c, int status_page)
{
    const struct ctl_host *h = &c->ctl->host;
    size_t len = 0;
    char *body = status_page ? h->status(h->arg, &len) : h->metrics(h->arg, &len);
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

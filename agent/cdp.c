/*
 * cdp.c - CDP request/response/event layer (see cdp.h).
 *
 * Pending calls live in a list with their deadlines; one repeating timer
 * per session (250 ms) expires them, which is cheaper and simpler than a
 * timer per call and precise enough for timeouts of seconds. A call's
 * callback is always run from a libuv callback (a message, the tick, the
 * close), never from cdp_call itself.
 *
 * Malformed input from the target: a message that is not JSON or not an
 * object closes the session with the reason in cdp_last_error (the daemon
 * reattaches later); a reply for an id we never sent, or an event without
 * a method, is counted and ignored.
 */
#include "cdp.h"
#include "ws.h"

#include "base.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define CDP_TICK_MS 250
#define CDP_PEEK 64

struct cdp_pending {
    struct cdp_pending *next;
    uint64_t id;
    unsigned flags;
    uint64_t deadline_ns;
    cdp_reply_cb cb;
    void *arg;
};

struct cdp_session {
    struct ws_client *ws;
    uv_timer_t tick;
    uint64_t next_id;
    struct cdp_pending *pending;
    int open, closing;
    int ws_done, tick_closed;
    int close_status;
    cdp_open_cb on_open;
    cdp_event_cb on_event;
    cdp_close_cb on_close;
    void *arg;
    struct cdp_stats st;
    char error[200];
};

static void cdp_set_error(struct cdp_session *s, const char *why)
{
    if (s->error[0] == '\0' && why && *why)
        snprintf(s->error, sizeof(s->error), "%s", why);
}

const char *cdp_last_error(const struct cdp_session *s)
{
    return s->error;
}

void cdp_get_stats(const struct cdp_session *s, struct cdp_stats *st)
{
    *st = s->st;
}

int64_t cdp_peek_id(const char *msg, size_t len)
{
    size_t i = 0, lim = len < CDP_PEEK ? len : CDP_PEEK;
#define SKIP_WS()                                                                                  \
    while (i < lim && (msg[i] == ' ' || msg[i] == '\n' || msg[i] == '\r' || msg[i] == '\t'))       \
    i++
    SKIP_WS();
    if (i >= lim || msg[i++] != '{')
        return -1;
    SKIP_WS();
    if (lim - i < 4 || memcmp(msg + i, "\"id\"", 4) != 0)
        return -1;
    i += 4;
    SKIP_WS();
    if (i >= lim || msg[i++] != ':')
        return -1;
    SKIP_WS();
    int64_t v = 0;
    size_t start = i;
    while (i < lim && isdigit((unsigned char)msg[i]) && i - start < 18)
        v = v * 10 + (msg[i++] - '0');
    if (i == start)
        return -1;
    SKIP_WS();
    if (i >= lim || (msg[i] != ',' && msg[i] != '}'))
        return -1;
    return v;
#undef SKIP_WS
}

static struct cdp_pending *take_pending(struct cdp_session *s, uint64_t id)
{
    for (struct cdp_pending **pp = &s->pending; *pp; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            struct cdp_pending *p = *pp;
            *pp = p->next;
            return p;
        }
    }
    return NULL;
}

static void complete(struct cdp_session *s, struct cdp_pending *p, struct cdp_reply *r)
{
    if (r->status == ISOPROF_ETIMEDOUT)
        s->st.timeouts++;
    else if (r->status != 0)
        s->st.errors++;
    else
        s->st.replies++;
    p->cb(s, r, p->arg);
    isoprof_free(p);
}

static void fail_all(struct cdp_session *s, int status)
{
    while (s->pending) {
        struct cdp_pending *p = s->pending;
        s->pending = p->next;
        struct cdp_reply r = {.status = status};
        complete(s, p, &r);
    }
}

static void cdp_maybe_free(struct cdp_session *s)
{
    if (!s->ws_done || !s->tick_closed)
        return;
    s->on_close(s, s->close_status, s->arg);
    isoprof_free(s);
}

static void tick_on_close(uv_handle_t *h)
{
    struct cdp_session *s = h->data;
    s->tick_closed = 1;
    cdp_maybe_free(s);
}

static void on_ws_close(struct ws_client *ws, int status, void *arg)
{
    struct cdp_session *s = arg;
    cdp_set_error(s, ws_last_error(ws));
    s->ws = NULL;
    s->open = 0;
    s->closing = 1;
    s->close_status = status;
    fail_all(s, ISOPROF_ECLOSED);
    s->ws_done = 1;
    uv_timer_stop(&s->tick);
    uv_close((uv_handle_t *)&s->tick, tick_on_close);
}

static void on_ws_open(struct ws_client *ws, int status, void *arg)
{
    struct cdp_session *s = arg;
    if (status != 0)
        cdp_set_error(s, ws_last_error(ws));
    else
        s->open = 1;
    s->on_open(s, status, s->arg);
}

static void tick_on_timer(uv_timer_t *t)
{
    struct cdp_session *s = t->data;
    uint64_t now = isoprof_now_mono_ns();
    struct cdp_pending **pp = &s->pending;
    while (*pp) {
        struct cdp_pending *p = *pp;
        if (p->deadline_ns > now) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        struct cdp_reply r = {.status = ISOPROF_ETIMEDOUT};
        complete(s, p, &r);
        pp = &s->pending; /* the callback may have changed the list */
    }
    if (s->pending == NULL)
        uv_timer_stop(&s->tick);
}

static void protocol_error(struct cdp_session *s, const char *why)
{
    s->st.bad_messages++;
    cdp_set_error(s, why);
    cdp_close(s);
}

static void on_big_message(struct cdp_session *s, char *data, size_t len)
{
    int64_t id = cdp_peek_id(data, len);
    struct cdp_pending *p = id >= 0 ? take_pending(s, (uint64_t)id) : NULL;
    if (p == NULL) {
        s->st.dropped_big++;
        isoprof_free(data);
        return;
    }
    struct cdp_reply r = {0};
    if (p->flags & CDP_RAW) {
        r.raw = data;
        r.raw_len = len;
    } else {
        s->st.dropped_big++;
        r.status = ISOPROF_ETOOBIG;
        r.error_message = "reply too big to parse on the loop thread";
        isoprof_free(data);
    }
    complete(s, p, &r);
    isoprof_free(r.raw); /* NULL when the callback took it */
}

static void on_ws_message(struct ws_client *ws, char *data, size_t len, void *arg)
{
    (void)ws;
    struct cdp_session *s = arg;
    if (s->closing) {
        isoprof_free(data);
        return;
    }
    if (len > CDP_PARSE_MAX) {
        on_big_message(s, data, len);
        return;
    }
    char err[160];
    yajl_val v = yajl_tree_parse(data, err, sizeof(err));
    if (v == NULL) {
        isoprof_free(data);
        for (char *c = err; *c; c++)
            if (*c == '\n')
                *c = ' ';
        char why[200];
        snprintf(why, sizeof(why), "invalid JSON from the target: %s", err);
        protocol_error(s, why);
        return;
    }
    if (!YAJL_IS_OBJECT(v)) {
        yajl_tree_free(v);
        isoprof_free(data);
        protocol_error(s, "a CDP message that is not a JSON object");
        return;
    }
    const char *idp[] = {"id", NULL};
    yajl_val idv = yajl_tree_get(v, idp, yajl_t_number);
    if (idv != NULL) {
        struct cdp_pending *p =
            YAJL_IS_INTEGER(idv) && YAJL_GET_INTEGER(idv) >= 0
                ? take_pending(s, (uint64_t)YAJL_GET_INTEGER(idv))
                : NULL;
        if (p == NULL) {
            s->st.bad_messages++; /* not ours, or already timed out */
        } else {
            struct cdp_reply r = {0};
            const char *ep[] = {"error", NULL}, *mp[] = {"message", NULL},
                       *rp[] = {"result", NULL};
            yajl_val e = yajl_tree_get(v, ep, yajl_t_object);
            if (e != NULL) {
                yajl_val m = yajl_tree_get(e, mp, yajl_t_string);
                r.status = ISOPROF_ECDP;
                r.error_message = m ? YAJL_GET_STRING(m) : "error reply without a message";
            } else {
                r.result = yajl_tree_get(v, rp, yajl_t_object);
                if (p->flags & CDP_RAW) {
                    r.raw = data;
                    r.raw_len = len;
                    data = NULL;
                }
            }
            complete(s, p, &r);
            isoprof_free(r.raw);
        }
    } else {
        const char *mp[] = {"method", NULL}, *pp[] = {"params", NULL};
        yajl_val m = yajl_tree_get(v, mp, yajl_t_string);
        if (m == NULL) {
            s->st.bad_messages++;
        } else {
            s->st.events++;
            s->on_event(s, YAJL_GET_STRING(m), yajl_tree_get(v, pp, yajl_t_object), s->arg);
        }
    }
    yajl_tree_free(v);
    isoprof_free(data);
}

int cdp_open(uv_loop_t *loop, const char *host, uint16_t port, const char *path,
             size_t max_message, cdp_open_cb on_open, cdp_event_cb on_event,
             cdp_close_cb on_close, void *arg, struct cdp_session **out)
{
    struct cdp_session *s = isoprof_calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->on_open = on_open;
    s->on_event = on_event;
    s->on_close = on_close;
    s->arg = arg;
    s->next_id = 1;
    struct ws_opts o = {.max_message = max_message};
    int rc = ws_connect(loop, host, port, path, &o, on_ws_open, on_ws_message, on_ws_close, s,
                        &s->ws);
    if (rc != 0) {
        isoprof_free(s);
        return rc;
    }
    uv_timer_init(loop, &s->tick);
    s->tick.data = s;
    *out = s;
    return 0;
}

int cdp_call(struct cdp_session *s, const char *method, const char *params_json,
             uint64_t timeout_ms, unsigned flags, cdp_reply_cb cb, void *arg)
{
    if (!s->open || s->closing)
        return -ENOTCONN;
    for (const char *c = method; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '.' && *c != '_')
            return -EINVAL;
    struct cdp_pending *p = isoprof_calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    p->id = s->next_id++;
    p->flags = flags;
    p->cb = cb;
    p->arg = arg;
    p->deadline_ns = isoprof_now_mono_ns() + timeout_ms * 1000000ull;
    char *msg = isoprof_asprintf("{\"id\":%" PRIu64 ",\"method\":\"%s\",\"params\":%s}", p->id,
                                 method, params_json ? params_json : "{}");
    if (msg == NULL) {
        isoprof_free(p);
        return -ENOMEM;
    }
    int rc = ws_send_text(s->ws, msg, strlen(msg));
    isoprof_free(msg);
    if (rc != 0) {
        isoprof_free(p);
        return rc;
    }
    s->st.sent++;
    p->next = s->pending;
    s->pending = p;
    if (!uv_is_active((uv_handle_t *)&s->tick))
        uv_timer_start(&s->tick, tick_on_timer, CDP_TICK_MS, CDP_TICK_MS);
    return 0;
}

void cdp_close(struct cdp_session *s)
{
    if (s->closing)
        return;
    s->closing = 1;
    if (s->ws)
        ws_close(s->ws);
}

/*
 * cdp.c - CDP request/response/event layer over ws.c (see cdp.h).
 *
 * Pending calls live in a short singly linked list (a session has a
 * handful in flight). One uv_timer_t per session is armed for the earliest
 * deadline; when it fires, every expired call completes with
 * ISOPROF_ETIMEDOUT and the timer is re-armed for the next one. A call's
 * callback therefore always runs from a libuv callback (a message, the
 * timer, the socket's close), never from cdp_call.
 *
 * Routing: a message up to CDP_PARSE_MAX bytes and CDP_PARSE_MAX_DEPTH
 * levels of nesting is parsed with yajl_tree_parse and is a reply (it has
 * an "id") or an event. A larger or deeper one is never parsed here:
 * cdp_peek_id reads the id from its first bytes and the message goes,
 * unparsed and uncopied, to the pending CDP_RAW call with that id (the
 * writer's streaming parser takes it, with its own depth cap); anything
 * else of that kind is counted and dropped. The depth is checked first
 * because yajl frees its tree recursively: 256 KiB of "[[[[" would be
 * 131,072 nested frames.
 *
 * Teardown: the ws client reports its end once (on_ws_close); the session
 * then fails what is pending, closes its timer, and in the timer's close
 * callback calls on_close and frees itself.
 */
#include "cdp.h"
#include "ws.h"

#include "base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <yajl/yajl_parse.h>

#define CDP_PEEK 64
#define CDP_MAX_METHOD 128
#define CDP_MAX_TIMEOUT_MS (24ull * 3600 * 1000)

struct cdp_pending {
    struct cdp_pending *next;
    uint64_t id;
    unsigned flags;
    uint64_t deadline; /* uv_now() milliseconds */
    cdp_reply_cb cb;
    void *arg;
};

struct cdp_session {
    uv_loop_t *loop;
    struct ws_client *ws; /* NULL once the ws client has ended */
    uv_timer_t timer;
    uint64_t armed; /* deadline the timer is set for, 0 = none */
    uint64_t next_id;
    struct cdp_pending *pending;
    int open, closing;
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
    if (s->error[0] == '\0' && why != NULL && *why != '\0')
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

static int is_space(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

int64_t cdp_peek_id(const char *msg, size_t len)
{
    size_t i = 0, lim = len < CDP_PEEK ? len : CDP_PEEK;
    while (i < lim && is_space(msg[i]))
        i++;
    if (i >= lim || msg[i++] != '{')
        return -1;
    while (i < lim && is_space(msg[i]))
        i++;
    if (lim - i < 4 || memcmp(msg + i, "\"id\"", 4) != 0)
        return -1;
    i += 4;
    while (i < lim && is_space(msg[i]))
        i++;
    if (i >= lim || msg[i++] != ':')
        return -1;
    while (i < lim && is_space(msg[i]))
        i++;
    int64_t v = 0;
    size_t start = i;
    while (i < lim && msg[i] >= '0' && msg[i] <= '9' && i - start < 18)
        v = v * 10 + (msg[i++] - '0');
    if (i == start || (msg[start] == '0' && i - start > 1))
        return -1;
    while (i < lim && is_space(msg[i]))
        i++;
    if (i >= lim || (msg[i] != ',' && msg[i] != '}'))
        return -1;
    return v;
}

/* --- pending calls and their timer --- */

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
    p->cb(s, r, p->arg);
    isoprof_free(p);
}

static void cdp_on_timer(uv_timer_t *t);

/* Set the timer for the earliest deadline (it only ever moves earlier
 * here; cdp_on_timer recomputes it from scratch). */
static void cdp_arm(struct cdp_session *s)
{
    if (s->ws == NULL)
        return; /* the timer is closing or about to */
    uint64_t first = 0;
    for (struct cdp_pending *p = s->pending; p; p = p->next)
        if (first == 0 || p->deadline < first)
            first = p->deadline;
    if (first == 0) {
        uv_timer_stop(&s->timer);
        s->armed = 0;
        return;
    }
    if (s->armed != 0 && s->armed <= first)
        return;
    uint64_t now = uv_now(s->loop);
    uv_timer_start(&s->timer, cdp_on_timer, first > now ? first - now : 0, 0);
    s->armed = first;
}

static void cdp_on_timer(uv_timer_t *t)
{
    struct cdp_session *s = t->data;
    uint64_t now = uv_now(s->loop);
    s->armed = 0;
    for (;;) {
        /* Rescan after each callback: it may add or end calls. */
        struct cdp_pending *p = s->pending;
        while (p != NULL && p->deadline > now)
            p = p->next;
        if (p == NULL)
            break;
        take_pending(s, p->id);
        struct cdp_reply r = {.status = ISOPROF_ETIMEDOUT};
        complete(s, p, &r);
    }
    cdp_arm(s);
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

/* --- session lifetime --- */

static void cdp_on_timer_close(uv_handle_t *h)
{
    struct cdp_session *s = h->data;
    s->on_close(s, s->close_status, s->arg);
    isoprof_free(s);
}

static void cdp_on_ws_close(struct ws_client *ws, int status, void *arg)
{
    struct cdp_session *s = arg;
    cdp_set_error(s, ws_last_error(ws));
    s->ws = NULL;
    s->open = 0;
    s->closing = 1;
    if (s->close_status == 0)
        s->close_status = status;
    if (status == ISOPROF_ETOOBIG)
        s->st.dropped_big++;
    fail_all(s, ISOPROF_ECLOSED);
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->timer, cdp_on_timer_close);
}

static void cdp_on_ws_open(struct ws_client *ws, int status, void *arg)
{
    struct cdp_session *s = arg;
    if (status != 0)
        cdp_set_error(s, ws_last_error(ws));
    else
        s->open = 1;
    if (s->on_open != NULL)
        s->on_open(s, status, s->arg);
}

/* The target broke the protocol: drop the session (the daemon reattaches). */
static void cdp_protocol_error(struct cdp_session *s, int status, const char *why)
{
    s->st.bad_messages++;
    cdp_set_error(s, why);
    if (s->close_status == 0)
        s->close_status = status;
    cdp_close(s);
}

/* --- receiving --- */

static void cdp_on_big(struct cdp_session *s, char *data, size_t len)
{
    int64_t id = cdp_peek_id(data, len);
    struct cdp_pending *p = id >= 0 ? take_pending(s, (uint64_t)id) : NULL;
    if (p == NULL) {
        s->st.dropped_big++; /* a big or deep event, or an id we are not waiting for */
        ws_msg_free(data);
        return;
    }
    s->st.replies++;
    struct cdp_reply r = {0};
    if (p->flags & CDP_RAW) {
        r.raw = data;
        r.raw_len = len;
    } else {
        s->st.dropped_big++;
        ws_msg_free(data);
        r.status = ISOPROF_ETOOBIG;
        r.error_message = "reply too big or too deeply nested to parse on the loop thread (a call "
                          "without CDP_RAW)";
    }
    complete(s, p, &r);
    ws_msg_free(r.raw); /* NULL if the callback took it */
}

/* A message the budget could not hold was dropped as it came (ws.c): the
 * call it answered, if one waits, fails; the session carries on. */
static void cdp_on_ws_dropped(struct ws_client *ws, const char *head, size_t head_len, uint64_t len,
                              void *arg)
{
    (void)ws;
    (void)len;
    struct cdp_session *s = arg;
    s->st.dropped_big++;
    if (s->closing)
        return;
    int64_t id = cdp_peek_id(head, head_len);
    struct cdp_pending *p = id >= 0 ? take_pending(s, (uint64_t)id) : NULL;
    if (p == NULL)
        return; /* an event, or an id we are not waiting for */
    s->st.replies++;
    struct cdp_reply r = {
        .status = ISOPROF_ETOOBIG,
        .error_message = "reply dropped: the agent's memory budget for messages was in use",
    };
    complete(s, p, &r);
}

/* A parsed reply v for p; data may be handed over (then *data = NULL). */
static void cdp_on_reply(struct cdp_session *s, struct cdp_pending *p, yajl_val v, char **data,
                         size_t len)
{
    static const char *error_path[] = {"error", NULL}, *message_path[] = {"message", NULL},
                      *result_path[] = {"result", NULL};
    struct cdp_reply r = {0};
    s->st.replies++;
    yajl_val e = yajl_tree_get(v, error_path, yajl_t_any);
    if (e != NULL) {
        yajl_val m = YAJL_IS_OBJECT(e) ? yajl_tree_get(e, message_path, yajl_t_string) : NULL;
        r.status = ISOPROF_ECDP;
        r.error_message = m ? YAJL_GET_STRING(m) : "error reply without a message";
    } else {
        r.result = yajl_tree_get(v, result_path, yajl_t_object);
        if (p->flags & CDP_RAW) {
            r.raw = *data;
            r.raw_len = len;
            *data = NULL;
        }
        /* No "result" is still a success: workerd answers Profiler.enable
         * with {"id":N,"method":...} and nothing else. */
    }
    complete(s, p, &r);
    ws_msg_free(r.raw);
}

static void cdp_on_ws_message(struct ws_client *ws, char *data, size_t len, void *arg)
{
    static const char *id_path[] = {"id", NULL}, *method_path[] = {"method", NULL},
                      *params_path[] = {"params", NULL};
    (void)ws;
    struct cdp_session *s = arg;
    if (s->closing) {
        ws_msg_free(data);
        return;
    }
    /* Too big, or too deeply nested, to build a tree of on the loop (a
     * heap profile's nested head is both, and goes to its CDP_RAW call). */
    if (len > CDP_PARSE_MAX ||
        isoprof_json_depth(data, len, CDP_PARSE_MAX_DEPTH) > CDP_PARSE_MAX_DEPTH) {
        cdp_on_big(s, data, len);
        return;
    }
    char err[160];
    err[0] = '\0';
    yajl_val v = yajl_tree_parse(data, err, sizeof(err));
    if (v == NULL) {
        ws_msg_free(data);
        char *nl = strchr(err, '\n');
        if (nl != NULL)
            *nl = '\0';
        char why[200];
        snprintf(why, sizeof(why), "invalid JSON from the target: %s",
                 err[0] ? err : "parse error");
        cdp_protocol_error(s, ISOPROF_EJSON, why);
        return;
    }
    if (!YAJL_IS_OBJECT(v)) {
        s->st.bad_messages++;
    } else {
        yajl_val idv = yajl_tree_get(v, id_path, yajl_t_any);
        if (idv != NULL) {
            struct cdp_pending *p = NULL;
            if (YAJL_IS_INTEGER(idv) && YAJL_GET_INTEGER(idv) >= 0)
                p = take_pending(s, (uint64_t)YAJL_GET_INTEGER(idv));
            if (p == NULL)
                s->st.bad_messages++; /* not ours, or it already timed out */
            else
                cdp_on_reply(s, p, v, &data, len);
        } else {
            yajl_val m = yajl_tree_get(v, method_path, yajl_t_string);
            if (m == NULL) {
                s->st.bad_messages++;
            } else {
                s->st.events++;
                if (s->on_event != NULL)
                    s->on_event(s, YAJL_GET_STRING(m), yajl_tree_get(v, params_path, yajl_t_object),
                                s->arg);
            }
        }
    }
    yajl_tree_free(v);
    ws_msg_free(data);
}

/* --- the API --- */

int cdp_open(uv_loop_t *loop, const char *host, uint16_t port, const char *path, size_t max_message,
             struct ws_budget *budget, cdp_open_cb on_open, cdp_event_cb on_event,
             cdp_close_cb on_close, void *arg, struct cdp_session **out)
{
    if (loop == NULL || on_close == NULL || out == NULL)
        return -EINVAL;
    struct cdp_session *s = isoprof_calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->loop = loop;
    s->on_open = on_open;
    s->on_event = on_event;
    s->on_close = on_close;
    s->arg = arg;
    s->next_id = 1;
    struct ws_opts o = {
        .max_message = max_message, .budget = budget, .on_dropped = cdp_on_ws_dropped};
    int rc = ws_connect(loop, host, port, path, &o, cdp_on_ws_open, cdp_on_ws_message,
                        cdp_on_ws_close, s, &s->ws);
    if (rc != 0) {
        isoprof_free(s);
        return rc;
    }
    /* After ws_connect, so that its failure leaves no handle to close. */
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    *out = s;
    return 0;
}

static int cdp_valid_method(const char *m)
{
    size_t n = 0;
    for (; m[n] != '\0'; n++) {
        char c = m[n];
        if (n >= CDP_MAX_METHOD || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                     (c >= '0' && c <= '9') || c == '.' || c == '_'))
            return 0;
    }
    return n > 0;
}

/* params must be exactly one JSON object: it is pasted into the envelope,
 * so anything else would corrupt (or add keys to) the request. */
static int cdp_check_params(const char *params, size_t len)
{
    size_t i = 0;
    while (i < len && is_space(params[i]))
        i++;
    if (i == len || params[i] != '{')
        return -EINVAL;
    /* yajl's own allocator: yajl 2.1 does not check its allocations, so
     * ours (which tests make fail) cannot be plugged in safely. */
    yajl_handle h = yajl_alloc(NULL, NULL, NULL);
    if (h == NULL)
        return -ENOMEM;
    yajl_status st = yajl_parse(h, (const unsigned char *)params, len);
    if (st == yajl_status_ok)
        st = yajl_complete_parse(h);
    yajl_free(h);
    return st == yajl_status_ok ? 0 : -EINVAL;
}

int cdp_call(struct cdp_session *s, const char *method, const char *params_json,
             uint64_t timeout_ms, unsigned flags, cdp_reply_cb cb, void *arg)
{
    if (method == NULL || cb == NULL || !cdp_valid_method(method) || (flags & ~CDP_RAW) != 0)
        return -EINVAL;
    if (!s->open || s->closing || s->ws == NULL)
        return -ENOTCONN;
    const char *params = params_json ? params_json : "{}";
    size_t plen = strlen(params);
    int rc = params_json ? cdp_check_params(params, plen) : 0;
    if (rc != 0)
        return rc;
    if (timeout_ms == 0)
        timeout_ms = CDP_DEFAULT_TIMEOUT_MS;
    if (timeout_ms > CDP_MAX_TIMEOUT_MS)
        timeout_ms = CDP_MAX_TIMEOUT_MS;
    struct cdp_pending *p = isoprof_calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    p->id = s->next_id;
    p->flags = flags;
    p->cb = cb;
    p->arg = arg;
    p->deadline = uv_now(s->loop) + timeout_ms;
    /* Capped at what it can hold: the id, the method escaped at worst 6
     * bytes a byte, the params checked above, and the punctuation. */
    struct isoprof_buf msg;
    isoprof_buf_init(&msg, plen + 6 * strlen(method) + 64);
    isoprof_buf_printf(&msg, "{\"id\":%" PRIu64 ",\"method\":", p->id);
    isoprof_json_str(&msg, method);
    isoprof_buf_puts(&msg, ",\"params\":");
    isoprof_buf_append(&msg, params, plen);
    rc = isoprof_buf_putc(&msg, '}');
    if (rc != 0) {
        isoprof_buf_free(&msg);
        isoprof_free(p);
        return rc;
    }
    rc = ws_send_text(s->ws, msg.data, msg.len);
    isoprof_buf_free(&msg);
    if (rc != 0) {
        isoprof_free(p);
        return rc;
    }
    s->next_id++;
    s->st.sent++;
    p->next = s->pending;
    s->pending = p;
    cdp_arm(s);
    return 0;
}

void cdp_close(struct cdp_session *s)
{
    if (s->closing)
        return;
    s->closing = 1;
    if (s->ws != NULL)
        ws_close(s->ws);
}

/* --- test hooks --- */

struct cdp_session *cdp_test_new(cdp_event_cb on_event, void *arg)
{
    struct cdp_session *s = isoprof_calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->open = 1;
    s->next_id = 1;
    s->on_event = on_event;
    s->arg = arg;
    return s;
}

int cdp_test_expect(struct cdp_session *s, uint64_t id, unsigned flags, cdp_reply_cb cb, void *arg)
{
    struct cdp_pending *p = isoprof_calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    *p = (struct cdp_pending){
        .next = s->pending, .id = id, .flags = flags, .deadline = UINT64_MAX, .cb = cb, .arg = arg};
    s->pending = p;
    return 0;
}

int cdp_test_feed(struct cdp_session *s, const char *data, size_t len)
{
    char *m = ws_msg_dup(data, len);
    if (m == NULL)
        return -ENOMEM;
    cdp_on_ws_message(NULL, m, len, s);
    return 0;
}

void cdp_test_free(struct cdp_session *s)
{
    fail_all(s, ISOPROF_ECLOSED);
    isoprof_free(s);
}

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
 * Worker sessions share the pending list: an entry carries its session
 * (NULL: the main one), and a reply completes only the entry with its id
 * and its session. The outer NodeWorker.sendMessageToWorker has the inner
 * call's id, so its own reply, which comes first on the main session,
 * finds the entry too: an error fails the call, a success is only noted.
 * cdp_forget marks a session's entries gone and lets the timer complete
 * them (ISOPROF_ECLOSED), so no callback runs inside cdp_forget.
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
#define CDP_PEEK_WORKER 256
#define CDP_MAX_METHOD 128
#define CDP_WORKER_EVENT "NodeWorker.receivedMessageFromWorker"
#define CDP_MAX_TIMEOUT_MS (24ull * 3600 * 1000)

struct cdp_pending {
    struct cdp_pending *next, *prev; /* s->pending, oldest first */
    uint64_t id;
    char *session; /* NULL: the main session */
    int gone;      /* cdp_forget: completes with ISOPROF_ECLOSED at the next tick */
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
    /* Calls in the order they were sent: replies come mostly in that order,
     * so the one a reply answers is found near the head, and a peer that
     * has thousands outstanding costs no walk per call. */
    struct cdp_pending *pending, *pending_tail;
    uint64_t msg_arrival_ns; /* of the message being handled (ws_message_arrival_ns), else 0 */
    int open, closing;
    int close_status;
    cdp_open_cb on_open;
    cdp_event_cb on_event;
    cdp_close_cb on_close;
    cdp_worker_error_cb on_worker_error;
    cdp_big_event_cb on_big_event;
    void *arg;
    struct cdp_stats st;
    char error[200];
    int test;        /* cdp_test_new: sends go to test_sent */
    char *test_sent; /* the last message a test session sent */
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

static int same_session(const char *a, const char *b)
{
    return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

/* The live (not forgotten) call with id on session (NULL: the main one). */
static struct cdp_pending *find_pending(struct cdp_session *s, uint64_t id, const char *session)
{
    for (struct cdp_pending *p = s->pending; p; p = p->next)
        if (p->id == id && !p->gone && same_session(p->session, session))
            return p;
    return NULL;
}

/* The live call with id, whichever its session: what a reply on the main
 * session answers (a worker call's outer message shares its id). */
static struct cdp_pending *find_pending_id(struct cdp_session *s, uint64_t id)
{
    for (struct cdp_pending *p = s->pending; p; p = p->next)
        if (p->id == id && !p->gone)
            return p;
    return NULL;
}

static void unlink_pending(struct cdp_session *s, struct cdp_pending *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        s->pending = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        s->pending_tail = p->prev;
    p->next = p->prev = NULL;
}

static void append_pending(struct cdp_session *s, struct cdp_pending *p)
{
    p->next = NULL;
    p->prev = s->pending_tail;
    if (s->pending_tail)
        s->pending_tail->next = p;
    else
        s->pending = p;
    s->pending_tail = p;
}

static struct cdp_pending *take_pending(struct cdp_session *s, uint64_t id, const char *session)
{
    struct cdp_pending *p = find_pending(s, id, session);
    if (p != NULL)
        unlink_pending(s, p);
    return p;
}

static void pending_free(struct cdp_pending *p)
{
    isoprof_free(p->session);
    isoprof_free(p);
}

static void complete(struct cdp_session *s, struct cdp_pending *p, struct cdp_reply *r)
{
    r->arrival_ns = s->msg_arrival_ns; /* 0 outside a message: a timeout, the end */
    if (r->status == ISOPROF_ETIMEDOUT)
        s->st.timeouts++;
    else if (r->status != 0)
        s->st.errors++;
    p->cb(s, r, p->arg);
    pending_free(p);
}

static void cdp_on_timer(uv_timer_t *t);

/* Set the timer for deadline if it is earlier than the one it is set for
 * (0: none). */
static void cdp_arm_at(struct cdp_session *s, uint64_t deadline)
{
    if (s->ws == NULL || deadline == 0)
        return; /* the timer is closing or about to */
    if (s->armed != 0 && s->armed <= deadline)
        return;
    uint64_t now = uv_now(s->loop);
    uv_timer_start(&s->timer, cdp_on_timer, deadline > now ? deadline - now : 0, 0);
    s->armed = deadline;
}

/* Set the timer for the earliest deadline of all, from scratch (the timer
 * fired, or calls were forgotten); a new call only needs cdp_arm_at. */
static void cdp_arm(struct cdp_session *s)
{
    if (s->ws == NULL)
        return;
    uint64_t first = 0;
    for (struct cdp_pending *p = s->pending; p; p = p->next)
        if (first == 0 || p->deadline < first)
            first = p->deadline;
    if (first == 0) {
        uv_timer_stop(&s->timer);
        s->armed = 0;
        return;
    }
    cdp_arm_at(s, first);
}

/* Complete every call due by now: timed out, or forgotten. */
static void expire(struct cdp_session *s, uint64_t now)
{
    for (;;) {
        /* Rescan after each callback: it may add or end calls. */
        struct cdp_pending *p = s->pending;
        while (p != NULL && p->deadline > now)
            p = p->next;
        if (p == NULL)
            break;
        unlink_pending(s, p);
        struct cdp_reply r = {.status = p->gone ? ISOPROF_ECLOSED : ISOPROF_ETIMEDOUT};
        complete(s, p, &r);
    }
}

static void cdp_on_timer(uv_timer_t *t)
{
    struct cdp_session *s = t->data;
    s->armed = 0;
    expire(s, uv_now(s->loop));
    cdp_arm(s);
}

static void fail_all(struct cdp_session *s, int status)
{
    while (s->pending) {
        struct cdp_pending *p = s->pending;
        unlink_pending(s, p);
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

/* A worker session's message that cannot be read: counted, its owner told. */
static void worker_bad(struct cdp_session *s, const char *session, const char *why)
{
    s->st.bad_messages++;
    if (s->on_worker_error != NULL)
        s->on_worker_error(s, session, why, s->arg);
}

/* A message too big (or deep) to parse here, for the call p (taken off the
 * list): handed over raw with CDP_RAW, else refused. data is the whole
 * message (the envelope, for a worker's: nested). */
static void hand_big(struct cdp_session *s, struct cdp_pending *p, char *data, size_t len,
                     int nested)
{
    s->st.replies++;
    struct cdp_reply r = {0};
    if (p->flags & CDP_RAW) {
        r.raw = data;
        r.raw_len = len;
        r.raw_nested = nested;
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

static void cdp_on_big(struct cdp_session *s, char *data, size_t len)
{
    char sid[CDP_SESSION_MAX + 1];
    int64_t id = cdp_peek_id(data, len);
    struct cdp_pending *p = NULL;
    int nested = 0;
    if (id >= 0) {
        p = take_pending(s, (uint64_t)id, NULL);
    } else if (cdp_peek_worker(data, len, sid, &id) == 0) {
        p = take_pending(s, (uint64_t)id, sid);
        nested = 1;
    }
    char method[CDP_METHOD_MAX + 1];
    if (p == NULL && id < 0 && !nested && s->on_big_event != NULL &&
        cdp_peek_method(data, len, method, sizeof(method)) == 0) {
        if (s->on_big_event(s, method, data, len, s->arg)) {
            s->st.events++;
            return; /* taken */
        }
    }
    if (p == NULL) {
        s->st.dropped_big++; /* a big or deep event, or an id we are not waiting for */
        ws_msg_free(data);
        return;
    }
    hand_big(s, p, data, len, nested);
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
    char sid[CDP_SESSION_MAX + 1];
    int64_t id = cdp_peek_id(head, head_len);
    struct cdp_pending *p = NULL;
    if (id >= 0)
        p = take_pending(s, (uint64_t)id, NULL);
    else if (cdp_peek_worker(head, head_len, sid, &id) == 0)
        p = take_pending(s, (uint64_t)id, sid);
    if (p == NULL)
        return; /* an event, or an id we are not waiting for */
    s->st.replies++;
    struct cdp_reply r = {
        .status = ISOPROF_ETOOBIG,
        .error_message = "reply dropped: the agent's memory budget for messages was in use",
    };
    complete(s, p, &r);
}

/* The message of an error reply v, or NULL when v is no error reply. */
static const char *error_of(yajl_val v)
{
    static const char *error_path[] = {"error", NULL}, *message_path[] = {"message", NULL};
    yajl_val e = yajl_tree_get(v, error_path, yajl_t_any);
    if (e == NULL)
        return NULL;
    yajl_val m = YAJL_IS_OBJECT(e) ? yajl_tree_get(e, message_path, yajl_t_string) : NULL;
    return m ? YAJL_GET_STRING(m) : "error reply without a message";
}

/* A parsed reply v for p (taken off the list); data (the whole message, or
 * for a worker's the envelope: nested) may be handed over (then *data =
 * NULL). */
static void cdp_on_reply(struct cdp_session *s, struct cdp_pending *p, yajl_val v, char **data,
                         size_t len, int nested)
{
    static const char *result_path[] = {"result", NULL};
    struct cdp_reply r = {0};
    s->st.replies++;
    const char *err = error_of(v);
    if (err != NULL) {
        r.status = ISOPROF_ECDP;
        r.error_message = err;
    } else {
        r.result = yajl_tree_get(v, result_path, yajl_t_object);
        if (p->flags & CDP_RAW) {
            r.raw = *data;
            r.raw_len = len;
            r.raw_nested = nested;
            *data = NULL;
        }
        /* No "result" is still a success: workerd answers Profiler.enable
         * with {"id":N,"method":...} and nothing else. */
    }
    complete(s, p, &r);
    ws_msg_free(r.raw);
}

/* A message v (an object) of the main session, or (session non-NULL) the
 * message inside a worker session's envelope data. */
static void dispatch(struct cdp_session *s, const char *session, yajl_val v, char **data,
                     size_t len)
{
    static const char *id_path[] = {"id", NULL}, *method_path[] = {"method", NULL},
                      *params_path[] = {"params", NULL};
    yajl_val idv = yajl_tree_get(v, id_path, yajl_t_any);
    if (idv != NULL) {
        struct cdp_pending *p = NULL;
        int64_t id = YAJL_IS_INTEGER(idv) ? YAJL_GET_INTEGER(idv) : -1;
        if (id >= 0)
            p = session ? find_pending(s, (uint64_t)id, session) : find_pending_id(s, (uint64_t)id);
        if (p == NULL) {
            s->st.bad_messages++; /* not ours, or it already timed out */
            return;
        }
        if (session == NULL && p->session != NULL) {
            /* The reply to a worker call's envelope: only an error ends it. */
            const char *err = error_of(v);
            if (err == NULL)
                return;
            unlink_pending(s, p);
            s->st.replies++;
            struct cdp_reply r = {.status = ISOPROF_ECDP, .error_message = err};
            complete(s, p, &r);
            return;
        }
        unlink_pending(s, p);
        cdp_on_reply(s, p, v, data, len, session != NULL);
        return;
    }
    yajl_val m = yajl_tree_get(v, method_path, yajl_t_string);
    if (m == NULL) {
        if (session != NULL)
            worker_bad(s, session, "a message with neither an id nor a method");
        else
            s->st.bad_messages++;
        return;
    }
    s->st.events++;
    if (s->on_event != NULL)
        s->on_event(s, session, YAJL_GET_STRING(m), yajl_tree_get(v, params_path, yajl_t_object),
                    s->arg);
}

/* NodeWorker.receivedMessageFromWorker (params): the message inside,
 * parsed as one of the main session's (it is no bigger than its envelope,
 * which was small enough to parse). */
static void cdp_on_worker_message(struct cdp_session *s, yajl_val params, char **data, size_t len)
{
    static const char *sid_path[] = {"sessionId", NULL}, *msg_path[] = {"message", NULL};
    yajl_val sv = params ? yajl_tree_get(params, sid_path, yajl_t_string) : NULL;
    yajl_val mv = params ? yajl_tree_get(params, msg_path, yajl_t_string) : NULL;
    const char *sid = sv ? YAJL_GET_STRING(sv) : NULL;
    if (sid == NULL || *sid == '\0' || strlen(sid) > CDP_SESSION_MAX) {
        s->st.bad_messages++; /* no session to blame */
        return;
    }
    if (mv == NULL) {
        worker_bad(s, sid, "receivedMessageFromWorker without a message string");
        return;
    }
    const char *inner = YAJL_GET_STRING(mv);
    size_t ilen = strlen(inner);
    if (isoprof_json_depth(inner, ilen, CDP_PARSE_MAX_DEPTH) > CDP_PARSE_MAX_DEPTH) {
        /* A deep reply (a heap profile's head): routed by its id alone. */
        int64_t id = -1;
        char peek[CDP_SESSION_MAX + 1];
        struct cdp_pending *p = NULL;
        if (cdp_peek_worker(*data, len, peek, &id) == 0 && strcmp(peek, sid) == 0)
            p = take_pending(s, (uint64_t)id, sid);
        if (p == NULL) {
            worker_bad(s, sid, "a message nested too deeply to route");
            return;
        }
        char *d = *data;
        *data = NULL;
        hand_big(s, p, d, len, 1);
        return;
    }
    char err[160];
    err[0] = '\0';
    yajl_val v = yajl_tree_parse(inner, err, sizeof(err));
    if (v == NULL || !YAJL_IS_OBJECT(v)) {
        char why[200];
        char *nl = strchr(err, '\n');
        if (nl != NULL)
            *nl = '\0';
        snprintf(why, sizeof(why), "%s: %s", v == NULL ? "invalid JSON" : "not a JSON object",
                 err[0] ? err : "parse error");
        yajl_tree_free(v);
        worker_bad(s, sid, why);
        return;
    }
    dispatch(s, sid, v, data, len);
    yajl_tree_free(v);
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
    /* The replies this message completes carry when it arrived. */
    s->msg_arrival_ns = ws ? ws_message_arrival_ns(ws) : isoprof_now_mono_ns();
    /* Too big, or too deeply nested, to build a tree of on the loop (a
     * heap profile's nested head is both, and goes to its CDP_RAW call). */
    if (len > CDP_PARSE_MAX ||
        isoprof_json_depth(data, len, CDP_PARSE_MAX_DEPTH) > CDP_PARSE_MAX_DEPTH) {
        cdp_on_big(s, data, len);
        s->msg_arrival_ns = 0;
        return;
    }
    char err[160];
    err[0] = '\0';
    yajl_val v = yajl_tree_parse(data, err, sizeof(err));
    if (v == NULL) {
        ws_msg_free(data);
        s->msg_arrival_ns = 0;
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
        yajl_val m = yajl_tree_get(v, method_path, yajl_t_string);
        const char *method = m ? YAJL_GET_STRING(m) : NULL;
        if (method != NULL && yajl_tree_get(v, id_path, yajl_t_any) == NULL &&
            strcmp(method, CDP_WORKER_EVENT) == 0)
            cdp_on_worker_message(s, yajl_tree_get(v, params_path, yajl_t_object), &data, len);
        else
            dispatch(s, NULL, v, &data, len);
    }
    yajl_tree_free(v);
    ws_msg_free(data);
    s->msg_arrival_ns = 0;
}

/* The message inside a worker session's envelope, read with yajl's
 * callbacks: the value of params.message, at depth 2. */
struct unwrap {
    int depth;     /* containers open, objects and arrays */
    int top_map;   /* the top value is an object */
    int at_params; /* the key at depth 1 is "params" */
    int in_params; /* the container at depth 2 is that key's object */
    int at_key;    /* the key at depth 2 (in params) is the one asked for */
    const char *key;
    char *out;
    size_t out_len;
    int oom;
};

static int uw_start_map(void *ctx)
{
    struct unwrap *u = ctx;
    u->depth++;
    if (u->depth == 1)
        u->top_map = 1;
    else if (u->depth == 2)
        u->in_params = u->top_map && u->at_params;
    return 1;
}

static int uw_start_array(void *ctx)
{
    struct unwrap *u = ctx;
    u->depth++;
    if (u->depth == 2)
        u->in_params = 0;
    return 1;
}

static int uw_end(void *ctx)
{
    struct unwrap *u = ctx;
    if (u->depth == 2)
        u->in_params = 0;
    u->depth--;
    return 1;
}

static int uw_key(void *ctx, const unsigned char *k, size_t n)
{
    struct unwrap *u = ctx;
    if (u->depth == 1)
        u->at_params = n == 6 && memcmp(k, "params", 6) == 0;
    else if (u->depth == 2)
        u->at_key = u->in_params && n == strlen(u->key) && memcmp(k, u->key, n) == 0;
    return 1;
}

static int uw_string(void *ctx, const unsigned char *v, size_t n)
{
    struct unwrap *u = ctx;
    if (u->depth == 2 && u->in_params && u->at_key && u->out == NULL) {
        /* The whole string, NULs (from \u0000) included. */
        if ((u->out = isoprof_malloc(n + 1)) == NULL) {
            u->oom = 1;
            return 0;
        }
        memcpy(u->out, v, n);
        u->out[n] = '\0';
        u->out_len = n;
    }
    return 1;
}

static int uw_other(void *ctx)
{
    (void)ctx;
    return 1;
}
static int uw_bool(void *ctx, int b)
{
    (void)b;
    return uw_other(ctx);
}
static int uw_number(void *ctx, const char *v, size_t n)
{
    (void)v;
    (void)n;
    return uw_other(ctx);
}

int cdp_param_string(const char *raw, size_t len, const char *key, char **out, size_t *out_len)
{
    static const yajl_callbacks cb = {
        .yajl_null = uw_other,
        .yajl_boolean = uw_bool,
        .yajl_number = uw_number,
        .yajl_string = uw_string,
        .yajl_start_map = uw_start_map,
        .yajl_map_key = uw_key,
        .yajl_end_map = uw_end,
        .yajl_start_array = uw_start_array,
        .yajl_end_array = uw_end,
    };
    if (raw == NULL || out == NULL || key == NULL)
        return -EINVAL;
    struct unwrap u = {.key = key};
    yajl_handle h = yajl_alloc(&cb, NULL, &u);
    if (h == NULL)
        return -ENOMEM;
    yajl_status st = yajl_parse(h, (const unsigned char *)raw, len);
    if (st == yajl_status_ok)
        st = yajl_complete_parse(h);
    yajl_free(h);
    if (u.oom) {
        isoprof_free(u.out);
        return -ENOMEM;
    }
    if (st != yajl_status_ok || u.out == NULL) {
        isoprof_free(u.out);
        return ISOPROF_EJSON;
    }
    *out = u.out;
    if (out_len != NULL)
        *out_len = u.out_len;
    return 0;
}

int cdp_unwrap_worker(const char *raw, size_t len, char **out, size_t *out_len)
{
    return cdp_param_string(raw, len, "message", out, out_len);
}

/* Matches the literal lit at msg[*i] (whitespace before it allowed). */
static int peek_lit(const char *msg, size_t lim, size_t *i, const char *lit)
{
    while (*i < lim && is_space(msg[*i]))
        (*i)++;
    size_t n = strlen(lit);
    if (lim - *i < n || memcmp(msg + *i, lit, n) != 0)
        return -1;
    *i += n;
    return 0;
}

int cdp_peek_method(const char *msg, size_t len, char *method, size_t cap)
{
    size_t i = 0, lim = len < CDP_PEEK_WORKER ? len : CDP_PEEK_WORKER;
    if (msg == NULL || cap == 0 || peek_lit(msg, lim, &i, "{") ||
        peek_lit(msg, lim, &i, "\"method\"") || peek_lit(msg, lim, &i, ":") ||
        peek_lit(msg, lim, &i, "\""))
        return -1;
    size_t n = 0;
    while (i < lim && msg[i] != '"') {
        char c = msg[i++];
        if (n + 1 == cap || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                              (c >= '0' && c <= '9') || c == '.' || c == '_'))
            return -1;
        method[n++] = c;
    }
    if (i == lim || n == 0)
        return -1;
    method[n] = '\0';
    return 0;
}

int cdp_peek_worker(const char *msg, size_t len, char sid[CDP_SESSION_MAX + 1], int64_t *id)
{
    size_t i = 0, lim = len < CDP_PEEK_WORKER ? len : CDP_PEEK_WORKER;
    if (msg == NULL || peek_lit(msg, lim, &i, "{") || peek_lit(msg, lim, &i, "\"method\"") ||
        peek_lit(msg, lim, &i, ":") || peek_lit(msg, lim, &i, "\"" CDP_WORKER_EVENT "\"") ||
        peek_lit(msg, lim, &i, ",") || peek_lit(msg, lim, &i, "\"params\"") ||
        peek_lit(msg, lim, &i, ":") || peek_lit(msg, lim, &i, "{") ||
        peek_lit(msg, lim, &i, "\"sessionId\"") || peek_lit(msg, lim, &i, ":") ||
        peek_lit(msg, lim, &i, "\""))
        return -1;
    size_t n = 0;
    while (i < lim && msg[i] != '"') {
        char c = msg[i++];
        if (n == CDP_SESSION_MAX || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return -1;
        sid[n++] = c;
    }
    sid[n] = '\0';
    i++; /* the closing quote */
    if (n == 0 || i > lim || peek_lit(msg, lim, &i, ",") || peek_lit(msg, lim, &i, "\"message\"") ||
        peek_lit(msg, lim, &i, ":") || peek_lit(msg, lim, &i, "\"{\\\"id\\\":"))
        return -1;
    int64_t v = 0;
    size_t start = i;
    while (i < lim && msg[i] >= '0' && msg[i] <= '9' && i - start < 18)
        v = v * 10 + (msg[i++] - '0');
    if (i == start || (msg[start] == '0' && i - start > 1) || i >= lim ||
        (msg[i] != ',' && msg[i] != '}'))
        return -1;
    *id = v;
    return 0;
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

int cdp_valid_session(const char *sid)
{
    size_t n = 0;
    for (; sid[n] != '\0'; n++) {
        char c = sid[n];
        if (n >= CDP_SESSION_MAX || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return n > 0;
}

static int send_text(struct cdp_session *s, const char *data, size_t len)
{
    if (s->test) {
        char *copy = isoprof_strndup(data, len);
        if (copy == NULL)
            return -ENOMEM;
        isoprof_free(s->test_sent);
        s->test_sent = copy;
        return 0;
    }
    return ws_send_text(s->ws, data, len);
}

int cdp_call_on(struct cdp_session *s, const char *session, const char *method,
                const char *params_json, uint64_t timeout_ms, unsigned flags, cdp_reply_cb cb,
                void *arg)
{
    if (method == NULL || cb == NULL || !cdp_valid_method(method) || (flags & ~CDP_RAW) != 0 ||
        (session != NULL && !cdp_valid_session(session)))
        return -EINVAL;
    if (!s->open || s->closing || (s->ws == NULL && !s->test))
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
    if (session != NULL && (p->session = isoprof_strdup(session)) == NULL) {
        isoprof_free(p);
        return -ENOMEM;
    }
    p->id = s->next_id;
    p->flags = flags;
    p->cb = cb;
    p->arg = arg;
    p->deadline = (s->test ? 0 : uv_now(s->loop)) + timeout_ms;
    /* Capped at what it can hold: the id, the method escaped at worst 6
     * bytes a byte, the params checked above, and the punctuation. */
    struct isoprof_buf msg, outer;
    isoprof_buf_init(&msg, plen + 6 * strlen(method) + 64);
    isoprof_buf_printf(&msg, "{\"id\":%" PRIu64 ",\"method\":", p->id);
    isoprof_json_str(&msg, method);
    isoprof_buf_puts(&msg, ",\"params\":");
    isoprof_buf_append(&msg, params, plen);
    rc = isoprof_buf_putc(&msg, '}');
    if (rc == 0 && session != NULL) {
        /* The envelope, with the same id; the call as a JSON string in it. */
        isoprof_buf_init(&outer, 6 * msg.len + strlen(session) + 128);
        isoprof_buf_printf(&outer,
                           "{\"id\":%" PRIu64 ",\"method\":\"NodeWorker.sendMessageToWorker\","
                           "\"params\":{\"sessionId\":",
                           p->id);
        isoprof_json_str(&outer, session);
        isoprof_buf_puts(&outer, ",\"message\":");
        isoprof_json_strn(&outer, msg.data, msg.len);
        rc = isoprof_buf_puts(&outer, "}}");
        isoprof_buf_free(&msg);
        msg = outer;
    }
    if (rc == 0)
        rc = send_text(s, msg.data, msg.len);
    isoprof_buf_free(&msg);
    if (rc != 0) {
        pending_free(p);
        return rc;
    }
    s->next_id++;
    s->st.sent++;
    append_pending(s, p);
    cdp_arm_at(s, p->deadline);
    return 0;
}

int cdp_call(struct cdp_session *s, const char *method, const char *params_json,
             uint64_t timeout_ms, unsigned flags, cdp_reply_cb cb, void *arg)
{
    return cdp_call_on(s, NULL, method, params_json, timeout_ms, flags, cb, arg);
}

void cdp_forget(struct cdp_session *s, const char *session)
{
    if (session == NULL)
        return;
    int any = 0;
    for (struct cdp_pending *p = s->pending; p; p = p->next) {
        if (!p->gone && same_session(p->session, session)) {
            p->gone = 1;
            p->deadline = 1; /* due at the next tick of the timer */
            any = 1;
        }
    }
    if (any) {
        s->armed = 0;
        cdp_arm(s);
    }
}

void cdp_set_big_event_cb(struct cdp_session *s, cdp_big_event_cb cb)
{
    s->on_big_event = cb;
}

void cdp_set_worker_error_cb(struct cdp_session *s, cdp_worker_error_cb cb)
{
    s->on_worker_error = cb;
}

void cdp_pause(struct cdp_session *s, int on)
{
    if (s->ws != NULL && !s->closing)
        ws_pause(s->ws, on);
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
    s->test = 1;
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
        .id = id, .flags = flags, .deadline = UINT64_MAX, .cb = cb, .arg = arg};
    append_pending(s, p);
    if (id >= s->next_id)
        s->next_id = id + 1; /* cdp_call_on's ids come after */
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

const char *cdp_test_last_sent(const struct cdp_session *s)
{
    return s->test_sent;
}

void cdp_test_tick(struct cdp_session *s, uint64_t now_ms)
{
    expire(s, now_ms);
}

void cdp_test_free(struct cdp_session *s)
{
    fail_all(s, ISOPROF_ECLOSED);
    isoprof_free(s->test_sent);
    isoprof_free(s);
}

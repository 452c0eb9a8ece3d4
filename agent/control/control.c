/*
 * control.c - the control socket and the metrics listener.
 *
 * isoprofd answers HTTP/1.1 on a Unix socket (control.socket; `isoprof
 * status|profile|metrics` and `curl --unix-socket` are its clients):
 *
 *   GET  /status    the daemon's status page (ctl_host.status): JSON
 *   GET  /metrics   its metrics (ctl_host.metrics): Prometheus text 0.0.4
 *   POST /profile?worker=W[&version=V][&isolate=I][&thread=T]
 *        &type=cpu|heap|snapshot[&seconds=N][&interval=DUR][&all=1]
 *                   one on-demand window (ondemand.c); the gzip'd pprof is
 *                   the answer, sent when the window ended. seconds and
 *                   interval are for cpu only, all=1 not for a snapshot;
 *                   409 when a snapshot of the isolate is being taken
 *
 * The GET pages take no parameters: a query on them is ignored. A body is
 * read (within CTL_BODY_MAX) and dropped: /profile's parameters are its
 * query.
 *
 * and, when metrics.listen is set, GET /metrics alone on a loopback TCP
 * address for Prometheus. Requests are parsed with http-parser (nodejs's,
 * Debian's libhttp-parser); nothing here reads HTTP by hand. The parsing
 * itself (control.h: the request, its target, the /profile query) works
 * on bytes and structs only, so the fuzz target drives it without a
 * socket.
 *
 * The socket file is made so that no call ever follows a path an attacker
 * could have changed (sock_create): it is bound inside a fresh private
 * directory beside the final path (mkdtemp, 0700), with its final mode
 * from the umask (0600, or 0660 with control.group), its group set through
 * the private directory's descriptor with AT_SYMLINK_NOFOLLOW, and then
 * renamed into place; rename() replaces a symlink at the final path
 * instead of following it. The file a symlink there names is never
 * chmod'ed or chown'ed. What the path may hold before: nothing, a socket
 * nobody listens on (a crashed agent's) or a symlink, all replaced; a
 * socket an agent listens on stops this one from starting, anything else
 * (a file, a directory) too.
 *
 * Bounds, per listener: at most CTL_MAX_CONNS connections; request line
 * and headers at most CTL_HEAD_MAX bytes (431), a body at most
 * CTL_BODY_MAX (413). A connection has CTL_REQUEST_MS from when it starts
 * waiting for a request (accepted, or its last answer written) to deliver
 * the whole request: one that sent nothing is closed, one still sending
 * gets a 408. So neither an idle keep-alive connection nor a slowloris
 * holds a slot for more than a few seconds. At the connection limit a new
 * connection evicts the oldest that has no request in progress (idle, else
 * lingering after its answer, else one still sending its request, else
 * one not reading its answer), so a scraper always gets in however many
 * idle, slow or deaf connections a local user opens; only when every slot
 * holds a request being answered is the new one closed. At most
 * CTL_WAITING_MAX of them wait for on-demand windows (a POST /profile past
 * it gets a 503), so that never lasts longer than building a page. Evicted
 * and refused connections are both counted in
 * control_rejected_connections. One request at a time per connection:
 * bytes that arrive while one is answered (pipelining) wait in a capped
 * buffer and are parsed after the answer is written. Reads go through one
 * shared buffer, so a connection costs its struct and nothing grows with
 * what a client sends.
 *
 * After an answer that ends the connection (an error, Connection: close),
 * the write side is shut down and the rest of what the client sends is
 * read and dropped for up to CTL_LINGER_MS (a lingering close), so a client
 * still sending reads the answer instead of a reset.
 *
 * DESIGN: loop thread only. struct control owns the listeners; each
 * struct ctl_conn owns its stream and timer and is freed when both closed.
 * A connection waiting for an on-demand window holds its od_waiter and
 * cancels it when the client goes away or control_stop runs. struct
 * control is freed in the last close callback of its handles, the
 * connections' included.
 */
#include "control_internal.h"
#include "log.h"

#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <http_parser.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void conn_feed(struct ctl_conn *c, const char *data, size_t n);

/* --- small helpers --- */

/* {"error":"msg"}, msg cut after CTL_ERROR_MAX bytes (at the start of a
 * character, then "..."); isoprof_json_str makes it valid JSON whatever a
 * label in it holds. NULL on ENOMEM. */
static char *json_error(const char *msg, size_t *len)
{
    char cut[CTL_ERROR_MAX + 4];
    size_t n = strlen(msg);
    if (n > CTL_ERROR_MAX) {
        n = CTL_ERROR_MAX;
        /* msg[n] continuing a character: cut before it (a character is at
         * most 4 bytes; a longer run of continuation bytes is no text) */
        for (int k = 0; k < 3 && ((unsigned char)msg[n] & 0xc0) == 0x80; k++)
            n--;
        memcpy(cut, msg, n);
        memcpy(cut + n, "...", 4);
        msg = cut;
    }
    struct isoprof_buf b;
    isoprof_buf_init(&b, CTL_JSON_STR_MAX(sizeof(cut)) + 16);
    isoprof_buf_puts(&b, "{\"error\":");
    isoprof_json_str(&b, msg);
    isoprof_buf_puts(&b, "}\n");
    char *body;
    return isoprof_buf_take(&b, &body, len) == 0 ? body : NULL;
}

/* Answer {"error": ...} with status and the extra header lines (or NULL);
 * close ends the connection after it. */
__attribute__((format(printf, 5, 0))) static void conn_verror(struct ctl_conn *c, int status,
                                                              int close, const char *extra,
                                                              const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t len = 0;
    char *body = json_error(msg, &len);
    ctl_conn_respond(c, status, CT_JSON, body, body ? len : 1, extra, close);
}

__attribute__((format(printf, 4, 5))) void ctl_conn_error(struct ctl_conn *c, int status, int close,
                                                          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    conn_verror(c, status, close, NULL, fmt, ap);
    va_end(ap);
}

__attribute__((format(printf, 3, 4))) static void
conn_error_allow(struct ctl_conn *c, const char *allow, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    conn_verror(c, 405, 0, allow, fmt, ap);
    va_end(ap);
}

/* 405 with the Allow header naming what path takes. */
void ctl_conn_bad_method(struct ctl_conn *c, const char *path, int get)
{
    if (get)
        conn_error_allow(c, "Allow: GET, HEAD\r\n", "%s takes GET", path);
    else
        conn_error_allow(c, "Allow: POST\r\n", "%s takes POST", path);
}

/* --- lifetime --- */

void ctl_maybe_free(struct control *ctl)
{
    if (ctl->closes > 0 || !ctl->stopping)
        return;
    isoprof_free(ctl->path);
    isoprof_free(ctl);
}

void ctl_listener_on_close(uv_handle_t *h)
{
    struct ctl_listener *l = h->data;
    struct control *ctl = l->ctl;
    ctl->closes--;
    ctl_maybe_free(ctl);
}

static void conn_on_close(uv_handle_t *h)
{
    struct ctl_conn *c = h->data;
    if (--c->closes > 0)
        return;
    struct control *ctl = c->ctl;
    isoprof_free(c->pending);
    isoprof_free(c->body);
    isoprof_free(c);
    ctl->closes--;
    ctl_maybe_free(ctl);
}

/* Close c now: nothing more is read or written; a window it waited for
 * is still taken and stored, but not answered. */
void ctl_conn_close(struct ctl_conn *c)
{
    if (c->st == C_CLOSING)
        return;
    c->st = C_CLOSING;
    if (c->waiter != NULL) {
        c->ctl->host.cancel(c->waiter);
        c->waiter = NULL;
    }
    c->od_pending = 0;
    if (c->counted) {
        c->l->nconns--;
        c->counted = 0;
    }
    if (c->prev)
        c->prev->next = c->next;
    else if (c->ctl->conns == c)
        c->ctl->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    uv_close(&c->h.handle, conn_on_close);
    uv_close((uv_handle_t *)&c->timer, conn_on_close);
}

static void conn_on_timer(uv_timer_t *t)
{
    struct ctl_conn *c = t->data;
    switch (c->st) {
    case C_READING:
        /* Slow or stalled: the request was not whole by its deadline. */
        ctl_conn_error(c, 408, 1, "the request was not complete within %d s",
                       CTL_REQUEST_MS / 1000);
        break;
    case C_IDLE:
    case C_WRITING:
    case C_LINGER:
        ctl_conn_close(c);
        break;
    default:
        break;
    }
}

static void conn_timer(struct ctl_conn *c, uint64_t ms)
{
    uv_timer_start(&c->timer, conn_on_timer, ms, 0);
}

/* --- reading --- */

static void conn_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct ctl_conn *c = h->data;
    *buf = uv_buf_init(c->ctl->rbuf, sizeof(c->ctl->rbuf));
}

/* Keep n bytes that came while a request is answered; past the cap, stop
 * reading until they are parsed. */
static void conn_stash(struct ctl_conn *c, const char *data, size_t n)
{
    if (n == 0)
        return;
    size_t room = CTL_PENDING_MAX - c->pending_len;
    size_t take = n < room ? n : room;
    if (take > 0) {
        char *np = isoprof_realloc(c->pending, c->pending_len + take);
        if (np == NULL) {
            ctl_conn_close(c);
            return;
        }
        memcpy(np + c->pending_len, data, take);
        c->pending = np;
        c->pending_len += take;
    }
    if (take < n) {
        /* More than a request's worth pipelined: what did not fit is lost,
         * so this connection ends after the answer. */
        c->close_after = 1;
        uv_read_stop(&c->h.stream);
        c->read_stopped = 1;
    }
}

static void conn_on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct ctl_conn *c = s->data;
    if (n == 0 || c->st == C_CLOSING)
        return;
    if (n < 0) {
        c->eof = 1;
        uv_read_stop(s);
        if (c->st == C_WRITING && n == UV_EOF)
            c->close_after = 1; /* half-closed: the answer still goes out */
        else
            ctl_conn_close(c); /* idle, mid-request, waiting for a window, lingering */
        return;
    }
    switch (c->st) {
    case C_LINGER:
        return; /* dropped */
    case C_BUSY:
    case C_WRITING:
        conn_stash(c, buf->base, (size_t)n);
        return;
    default:
        conn_feed(c, buf->base, (size_t)n);
    }
}

/* Parse n bytes of c's input: at most one request is read; it is
 * dispatched and the bytes after it kept for later. */
static void conn_feed(struct ctl_conn *c, const char *data, size_t n)
{
    if (n == 0 || (c->st != C_IDLE && c->st != C_READING))
        return;
    if (c->st == C_IDLE) {
        /* The deadline set when the connection started waiting stands:
         * a first byte buys no more time. */
        c->st = C_READING;
        ctl_req_init(&c->req);
    }
    size_t used = 0;
    int rc = ctl_req_feed(&c->req, data, n, &used);
    if (rc == 1) {
        conn_stash(c, data + used, n - used);
        if (c->st == C_CLOSING)
            return;
        ctl_conn_dispatch(c);
    } else if (rc < 0) {
        ctl_conn_error(c, c->req.status, 1, "%s", c->req.why);
    }
}

/* --- writing --- */

static void conn_on_shutdown(uv_shutdown_t *req, int status)
{
    struct ctl_conn *c = req->data;
    if (status == UV_ECANCELED)
        return; /* closed meanwhile */
    if (status < 0 && c->st != C_CLOSING)
        ctl_conn_close(c);
}

/* The answer is out and the connection ends: shut the write side, drop
 * what the client still sends for CTL_LINGER_MS, then close. */
static void conn_linger(struct ctl_conn *c)
{
    if (c->eof) {
        ctl_conn_close(c);
        return;
    }
    c->st = C_LINGER;
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, &c->h.stream, conn_on_shutdown) != 0) {
        ctl_conn_close(c);
        return;
    }
    if (c->read_stopped) {
        c->read_stopped = 0;
        uv_read_start(&c->h.stream, conn_on_alloc, conn_on_read);
    }
    conn_timer(c, CTL_LINGER_MS);
}

static void conn_on_write(uv_write_t *req, int status)
{
    struct ctl_conn *c = req->data;
    isoprof_free(c->body);
    c->body = NULL;
    if (c->st == C_CLOSING)
        return;
    if (status < 0) {
        ctl_conn_close(c);
        return;
    }
    if (c->close_after || c->ctl->stopping) {
        conn_linger(c);
        return;
    }
    /* Keep-alive: the next request, maybe already here. */
    c->st = C_IDLE;
    conn_timer(c, CTL_REQUEST_MS);
    char *buf = c->pending;
    size_t len = c->pending_len;
    c->pending = NULL;
    c->pending_len = 0;
    if (c->read_stopped && !c->eof) {
        c->read_stopped = 0;
        uv_read_start(&c->h.stream, conn_on_alloc, conn_on_read);
    }
    if (len > 0)
        conn_feed(c, buf, len);
    isoprof_free(buf);
}

/*
 * Send the answer: status, ctype and body (len bytes, transferred; NULL
 * with len 0 for none, or NULL after an allocation failed, which answers
 * 500 without a body). extra: more header lines ("Allow: GET\r\n") or NULL.
 * close: the connection ends after it (else it does only if the client did
 * not ask for keep-alive).
 */
void ctl_conn_respond(struct ctl_conn *c, int status, const char *ctype, char *body, size_t len,
                      const char *extra, int close)
{
    struct control *ctl = c->ctl;
    if (c->st == C_CLOSING || c->st == C_WRITING || c->st == C_LINGER) {
        isoprof_free(body);
        return;
    }
    if (body == NULL && len > 0) { /* the page could not be built */
        status = 500;
        len = 0;
        close = 1;
    }
    ctl->n.requests++;
    if (status >= 400)
        ctl->n.errors++;
    if (!c->req.keep_alive || c->ctl->stopping)
        close = 1;
    c->close_after = c->close_after || close;
    int head_only = c->req.msg_done && c->req.p.method == HTTP_HEAD;
    int hl = snprintf(c->head, sizeof(c->head),
                      "HTTP/1.1 %d %s\r\n"
                      "Content-Type: %s\r\n"
                      "Content-Length: %zu\r\n"
                      "Cache-Control: no-store\r\n"
                      "%s"
                      "Connection: %s\r\n"
                      "\r\n",
                      status, http_status_str((enum http_status)status), ctype, len,
                      extra ? extra : "", c->close_after ? "close" : "keep-alive");
    if (hl < 0 || (size_t)hl >= sizeof(c->head)) {
        isoprof_free(body);
        ctl_conn_close(c);
        return;
    }
    c->body = body;
    uv_buf_t bufs[2] = {uv_buf_init(c->head, (unsigned)hl),
                        uv_buf_init(body ? body : c->head, (unsigned)(head_only ? 0 : len))};
    c->st = C_WRITING;
    conn_timer(c, CTL_WRITE_MS);
    c->wreq.data = c;
    int rc = uv_write(&c->wreq, &c->h.stream, bufs, bufs[1].len ? 2 : 1, conn_on_write);
    if (rc != 0) {
        isoprof_free(c->body);
        c->body = NULL;
        ctl_conn_close(c);
    }
}

/* --- accepting --- */

/*
 * The connection of l to close for a new one at the limit: the oldest
 * idle one (no request since it was accepted or answered), else the oldest
 * lingering after its answer, else the oldest still sending its request
 * (a slowloris), else the oldest whose answer is not read yet; NULL if
 * every one holds a request being answered. The list is newest first, so
 * the last match is the oldest.
 */
static struct ctl_conn *conn_victim(struct ctl_listener *l)
{
    static const enum conn_state order[] = {C_IDLE, C_LINGER, C_READING, C_WRITING};
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
        struct ctl_conn *victim = NULL;
        for (struct ctl_conn *c = l->ctl->conns; c; c = c->next)
            if (c->l == l && c->counted && c->st == order[i])
                victim = c;
        if (victim != NULL)
            return victim;
    }
    return NULL;
}

void ctl_listener_on_connection(uv_stream_t *server, int status)
{
    struct ctl_listener *l = server->data;
    struct control *ctl = l->ctl;
    if (status < 0) {
        log_warn("control: accept failed", "err=%s", uv_strerror(status));
        return;
    }
    struct ctl_conn *c = isoprof_calloc(1, sizeof(*c));
    if (c == NULL) {
        log_warn("control: out of memory accepting a connection", "");
        return; /* libuv retries once the backlog is read again */
    }
    c->ctl = ctl;
    c->l = l;
    int rc = l->metrics_only ? uv_tcp_init(ctl->host.loop, &c->h.tcp)
                             : uv_pipe_init(ctl->host.loop, &c->h.pipe, 0);
    if (rc != 0) {
        isoprof_free(c);
        return;
    }
    c->h.handle.data = c;
    uv_timer_init(ctl->host.loop, &c->timer);
    c->timer.data = c;
    c->closes = 2;
    ctl->closes++;
    c->st = C_IDLE;
    c->next = ctl->conns;
    if (ctl->conns)
        ctl->conns->prev = c;
    ctl->conns = c;
    if (uv_accept(server, &c->h.stream) != 0) {
        ctl_conn_close(c);
        return;
    }
    if (ctl->stopping) {
        ctl->n.rejected_connections++;
        ctl_conn_close(c);
        return;
    }
    if (l->nconns >= CTL_MAX_CONNS) {
        /* Make room: the newcomer is about to send its request. */
        struct ctl_conn *victim = conn_victim(l);
        ctl->n.rejected_connections++;
        if (victim == NULL) {
            ctl_conn_close(c);
            return;
        }
        log_debug("control: at the connection limit, the oldest idle one closed", "listener=%s",
                  l->metrics_only ? "metrics" : "control");
        ctl_conn_close(victim);
    }
    l->nconns++;
    c->counted = 1;
    conn_timer(c, CTL_REQUEST_MS);
    if (uv_read_start(&c->h.stream, conn_on_alloc, conn_on_read) != 0)
        ctl_conn_close(c);
}

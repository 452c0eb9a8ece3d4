/*
 * control.c - the control socket and the metrics listener.
 *
 * isoprofd answers HTTP/1.1 on a Unix socket (control.socket; `isoprof
 * status|profile|metrics` and `curl --unix-socket` are its clients):
 *
 *   GET  /status    report_status(): JSON
 *   GET  /metrics   report_metrics(): Prometheus text format 0.0.4
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
#include "control.h"
#include "daemon.h"
#include "log.h"

#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <http_parser.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define CTL_MAX_CONNS 64
/* Connections of a listener that may wait for on-demand windows at once.
 * The rest of CTL_MAX_CONNS is kept for requests answered at once (GET
 * /status, /metrics, a refusal), so however many windows are asked for,
 * the daemon still answers those: past it, POST /profile gets a 503. */
#define CTL_WAITING_MAX (CTL_MAX_CONNS - 8)
#define CTL_PENDING_MAX (CTL_HEAD_MAX + CTL_BODY_MAX) /* pipelined bytes kept */
/* From waiting for a request (accepted, last answer written) to the whole
 * request read. Local clients send theirs at once; 5 s leaves a loaded
 * host room and frees a slowloris's or an idle client's slot quickly. */
#define CTL_REQUEST_MS 5000
#define CTL_WRITE_MS 10000 /* an answer the client does not read */
#define CTL_LINGER_MS 2000
#define CTL_READ_BUF 65536
#define CTL_BACKLOG 128
/* The bytes of an error message an error body holds; more are cut, "..." */
#define CTL_ERROR_MAX 600
/* A JSON string of n bytes of text takes at most this many (each byte
 * escaped as \u00XX, and the quotes): the caps of the error bodies. */
#define CTL_JSON_STR_MAX(n) (6 * (size_t)(n) + 2)

#define CT_JSON "application/json"
#define CT_METRICS "text/plain; version=0.0.4; charset=utf-8"
#define CT_PPROF "application/octet-stream"

/* A stream of either kind; every member starts at the same address. */
union ctl_stream {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_pipe_t pipe;
    uv_tcp_t tcp;
};

struct control;

struct ctl_listener {
    struct control *ctl;
    union ctl_stream h;
    int open;         /* h initialised: close it */
    int metrics_only; /* the metrics.listen listener: GET /metrics and nothing else */
    unsigned nconns;  /* connections counted against CTL_MAX_CONNS */
};

enum conn_state {
    C_IDLE,    /* waiting for a request's first byte */
    C_READING, /* a request under way */
    C_BUSY,    /* a request complete, its answer not ready (an on-demand window) */
    C_WRITING, /* the answer being written */
    C_LINGER,  /* answered, write side shut: dropping what still comes */
    C_CLOSING,
};

struct ctl_conn {
    struct control *ctl;
    struct ctl_listener *l;
    union ctl_stream h;
    uv_timer_t timer;
    uv_write_t wreq;
    uv_shutdown_t sreq;
    int closes;  /* handle closes still to come */
    int counted; /* in l->nconns */
    enum conn_state st;
    int eof;            /* the client shut its write side */
    int read_stopped;   /* reading paused: pending is full */
    struct ctl_req req; /* the request being parsed, or answered */
    /* bytes after the request (pipelined), parsed once it is answered */
    char *pending;
    size_t pending_len;
    /* the answer */
    char head[640];
    char *body; /* owned while written */
    int close_after;
    /* an on-demand window being waited for */
    struct od_waiter *waiter;
    int od_pending; /* between ondemand_start and the callback */
    struct ctl_conn *prev, *next;
};

struct control {
    struct agent *a;
    struct ctl_listener sock, metrics;
    struct ctl_conn *conns;
    unsigned closes; /* listener and connection closes still to come */
    int stopping;
    char *path; /* the socket file */
    int made;   /* we created it: unlink it at stop (if still ours) */
    dev_t dev;
    ino_t ino;
    /* One read buffer for every connection: libuv calls read_cb right
     * after alloc_cb, and read_cb consumes or copies the bytes. */
    char rbuf[CTL_READ_BUF];
};

static void conn_close(struct ctl_conn *c);
static void conn_feed(struct ctl_conn *c, const char *data, size_t n);
static void conn_respond(struct ctl_conn *c, int status, const char *ctype, char *body, size_t len,
                         const char *extra, int close);

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
    conn_respond(c, status, CT_JSON, body, body ? len : 1, extra, close);
}

__attribute__((format(printf, 4, 5))) static void conn_error(struct ctl_conn *c, int status,
                                                             int close, const char *fmt, ...)
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
static void conn_bad_method(struct ctl_conn *c, const char *path, int get)
{
    if (get)
        conn_error_allow(c, "Allow: GET, HEAD\r\n", "%s takes GET", path);
    else
        conn_error_allow(c, "Allow: POST\r\n", "%s takes POST", path);
}

/* --- lifetime --- */

static void ctl_maybe_free(struct control *ctl)
{
    if (ctl->closes > 0 || !ctl->stopping)
        return;
    isoprof_free(ctl->path);
    isoprof_free(ctl);
}

static void listener_on_close(uv_handle_t *h)
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
static void conn_close(struct ctl_conn *c)
{
    if (c->st == C_CLOSING)
        return;
    c->st = C_CLOSING;
    if (c->waiter != NULL) {
        ondemand_cancel(c->waiter);
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
        conn_error(c, 408, 1, "the request was not complete within %d s", CTL_REQUEST_MS / 1000);
        break;
    case C_IDLE:
    case C_WRITING:
    case C_LINGER:
        conn_close(c);
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
            conn_close(c);
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
            conn_close(c); /* idle, mid-request, waiting for a window, lingering */
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

/* --- the request: http-parser callbacks (control.h) --- */

static int req_on_url(http_parser *p, const char *at, size_t len)
{
    struct ctl_req *r = p->data;
    if (len >= sizeof(r->url) - r->url_len) {
        r->status = 414;
        return -1;
    }
    memcpy(r->url + r->url_len, at, len);
    r->url_len += len;
    r->url[r->url_len] = '\0';
    return 0;
}

static int req_on_headers_complete(http_parser *p)
{
    struct ctl_req *r = p->data;
    r->headers_done = 1;
    r->keep_alive = http_should_keep_alive(p);
    if ((p->flags & F_CONTENTLENGTH) && p->content_length > CTL_BODY_MAX) {
        r->status = 413;
        return -1;
    }
    return 0;
}

static int req_on_body(http_parser *p, const char *at, size_t len)
{
    (void)at;
    struct ctl_req *r = p->data;
    r->body_bytes += len;
    if (r->body_bytes > CTL_BODY_MAX) {
        r->status = 413;
        return -1;
    }
    return 0;
}

static int req_on_message_complete(http_parser *p)
{
    struct ctl_req *r = p->data;
    r->msg_done = 1;
    r->keep_alive = http_should_keep_alive(p);
    http_parser_pause(p, 1); /* one request at a time: the rest waits */
    return 0;
}

static const http_parser_settings ctl_settings = {
    .on_url = req_on_url,
    .on_headers_complete = req_on_headers_complete,
    .on_body = req_on_body,
    .on_message_complete = req_on_message_complete,
};

void ctl_req_init(struct ctl_req *r)
{
    memset(r, 0, offsetof(struct ctl_req, url));
    r->url[0] = '\0';
    http_parser_init(&r->p, HTTP_REQUEST);
    r->p.data = r;
}

static int req_refuse(struct ctl_req *r, int status, const char *why)
{
    r->status = status;
    snprintf(r->why, sizeof(r->why), "%s", why);
    return -EBADMSG;
}

/*
 * Before the headers end, the parser is fed at most what is left of
 * CTL_HEAD_MAX, so the limit is exact whatever the client sends. A
 * complete request pauses the parser (req_on_message_complete); what
 * follows it is the caller's to keep.
 */
int ctl_req_feed(struct ctl_req *r, const char *data, size_t n, size_t *used)
{
    size_t off = 0;
    *used = 0;
    if (r->status != 0)
        return -EBADMSG;
    if (r->msg_done)
        return 1;
    while (off < n) {
        size_t slice = n - off;
        if (!r->headers_done) {
            size_t room = CTL_HEAD_MAX - r->head_bytes;
            if (room == 0) {
                char why[80];
                snprintf(why, sizeof(why), "the request line and headers exceed %d bytes",
                         CTL_HEAD_MAX);
                return req_refuse(r, 431, why);
            }
            if (slice > room)
                slice = room;
        }
        size_t took = http_parser_execute(&r->p, &ctl_settings, data + off, slice);
        if (!r->headers_done)
            r->head_bytes += took;
        off += took;
        enum http_errno e = HTTP_PARSER_ERRNO(&r->p);
        /* An upgrade (Upgrade: websocket, CONNECT) is refused whether or
         * not the parser stopped at its end: answered as HTTP, what the
         * client sends next would be another protocol's bytes. */
        if (r->p.upgrade && (e == HPE_OK || e == HPE_PAUSED))
            return req_refuse(r, 400, "bad request: protocol upgrades are not supported");
        if (e == HPE_PAUSED && r->msg_done) {
            http_parser_pause(&r->p, 0);
            *used = off;
            return 1;
        }
        if (e != HPE_OK) {
            char why[120];
            int status = r->status;
            if (status == 413)
                snprintf(why, sizeof(why), "the request body exceeds %d bytes", CTL_BODY_MAX);
            else if (status == 414)
                snprintf(why, sizeof(why), "the request target exceeds %d bytes", CTL_URL_MAX - 1);
            else if (e == HPE_INVALID_CONTENT_LENGTH && r->headers_done)
                /* http-parser says content-length for a chunk size too */
                snprintf(why, sizeof(why), "bad request: invalid chunk size");
            else if (e == HPE_INVALID_CONTENT_LENGTH)
                snprintf(why, sizeof(why),
                         "bad request: invalid content-length header (not a decimal number, or "
                         "too large)");
            else
                snprintf(why, sizeof(why), "bad request: %s", http_errno_description(e));
            r->status = 0;
            return req_refuse(r, status ? status : 400, why);
        }
        if (took != slice)
            return req_refuse(r, 400, "bad request: protocol upgrades are not supported");
    }
    *used = n;
    return 0;
}

int ctl_req_target(const struct ctl_req *r, struct ctl_target *t)
{
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (r->url_len == 0 ||
        http_parser_parse_url(r->url, r->url_len, r->p.method == HTTP_CONNECT, &u) != 0 ||
        !(u.field_set & (1u << UF_PATH)))
        return -EINVAL;
    t->path = r->url + u.field_data[UF_PATH].off;
    t->path_len = u.field_data[UF_PATH].len;
    t->query = "";
    t->query_len = 0;
    if (u.field_set & (1u << UF_QUERY)) {
        t->query = r->url + u.field_data[UF_QUERY].off;
        t->query_len = u.field_data[UF_QUERY].len;
    }
    return 0;
}

static void conn_dispatch(struct ctl_conn *c);

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
        conn_dispatch(c);
    } else if (rc < 0) {
        conn_error(c, c->req.status, 1, "%s", c->req.why);
    }
}

/* --- writing --- */

static void conn_on_shutdown(uv_shutdown_t *req, int status)
{
    struct ctl_conn *c = req->data;
    if (status == UV_ECANCELED)
        return; /* closed meanwhile */
    if (status < 0 && c->st != C_CLOSING)
        conn_close(c);
}

/* The answer is out and the connection ends: shut the write side, drop
 * what the client still sends for CTL_LINGER_MS, then close. */
static void conn_linger(struct ctl_conn *c)
{
    if (c->eof) {
        conn_close(c);
        return;
    }
    c->st = C_LINGER;
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, &c->h.stream, conn_on_shutdown) != 0) {
        conn_close(c);
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
        conn_close(c);
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
static void conn_respond(struct ctl_conn *c, int status, const char *ctype, char *body, size_t len,
                         const char *extra, int close)
{
    struct agent *a = c->ctl->a;
    if (c->st == C_CLOSING || c->st == C_WRITING || c->st == C_LINGER) {
        isoprof_free(body);
        return;
    }
    if (body == NULL && len > 0) { /* the page could not be built */
        status = 500;
        len = 0;
        close = 1;
    }
    a->n.control_requests++;
    if (status >= 400)
        a->n.control_errors++;
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
        conn_close(c);
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
        conn_close(c);
    }
}

/* --- POST /profile: the query (control.h) --- */

/* Percent-decode s[0..n) into out (cap bytes, NUL-terminated); '+' is a
 * space. -EINVAL on a bad escape or a NUL byte, -E2BIG if it does not fit. */
static int pct_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '%') {
            if (n - i < 3)
                return -EINVAL;
            int h = isoprof_hexval(s[i + 1]), l = isoprof_hexval(s[i + 2]);
            if (h < 0 || l < 0)
                return -EINVAL;
            ch = h * 16 + l;
            i += 2;
        } else if (ch == '+') {
            ch = ' ';
        }
        if (ch == 0)
            return -EINVAL;
        if (o + 1 >= cap)
            return -E2BIG;
        out[o++] = (char)ch;
    }
    out[o] = '\0';
    return 0;
}

/* A decimal number without sign or spaces, at most max. */
static int parse_uint(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (*s == '\0')
        return -EINVAL;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > max)
            return -ERANGE;
    }
    *out = v;
    return 0;
}

__attribute__((format(printf, 3, 4))) static int query_refuse(char *why, size_t cap,
                                                              const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (cap > 0)
        vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* The interval's message spells its limits out. */
_Static_assert(CFG_OD_INTERVAL_MIN_NS == 100000ull && CFG_OD_INTERVAL_MAX_NS == 1000000000ull,
               "the on-demand interval limits changed: update the message that names them");

int ctl_profile_parse(const char *q, size_t qlen, uint64_t interval_ns, struct ctl_profile_req *r,
                      char *why, size_t cap)
{
    enum { P_WORKER, P_VERSION, P_ISOLATE, P_TYPE, P_SECONDS, P_INTERVAL, P_ALL, P_THREAD, P_N };
    static const char *const names[P_N] = {"worker",  "version",  "isolate", "type",
                                           "seconds", "interval", "all",     "thread"};
    unsigned seen = 0;
    char key[64], val[CTL_LABEL_MAX];
    memset(r, 0, sizeof(*r));
    r->seconds = CTL_SECONDS_DEFAULT;
    r->interval_ns = interval_ns;
    snprintf(r->thread, sizeof(r->thread), "%s", TARGET_THREAD_MAIN);
    if (cap > 0)
        why[0] = '\0';
    const char *p = q, *end = q + qlen;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *pe = amp ? amp : end;
        if (pe == p) { /* "a&&b" */
            p = pe + 1;
            continue;
        }
        const char *eq = memchr(p, '=', (size_t)(pe - p));
        const char *ke = eq ? eq : pe;
        int rc = pct_decode(p, (size_t)(ke - p), key, sizeof(key));
        if (rc != 0)
            return query_refuse(why, cap,
                                "bad query: a parameter name is not valid percent-encoding");
        int k;
        for (k = 0; k < P_N; k++)
            if (strcmp(key, names[k]) == 0)
                break;
        if (k == P_N)
            return query_refuse(why, cap,
                                "unknown parameter '%s' (worker, version, isolate, thread, type, "
                                "seconds, interval, all)",
                                key);
        if (seen & (1u << k))
            return query_refuse(why, cap, "parameter '%s' given twice", key);
        seen |= 1u << k;
        rc = eq ? pct_decode(eq + 1, (size_t)(pe - eq - 1), val, sizeof(val)) : 0;
        if (!eq)
            val[0] = '\0';
        if (rc == -E2BIG)
            return query_refuse(why, cap, "%s is longer than %d bytes", key, CTL_LABEL_MAX - 1);
        if (rc != 0)
            return query_refuse(why, cap, "%s is not valid percent-encoding", key);
        uint64_t v = 0;
        switch (k) {
        case P_THREAD:
            if (val[0] == '\0')
                return query_refuse(why, cap, "%s must not be empty", key);
            memcpy(r->thread, val, strlen(val) + 1);
            r->has_thread = 1;
            break;
        case P_WORKER:
        case P_VERSION:
            if (val[0] == '\0')
                return query_refuse(why, cap, "%s must not be empty", key);
            memcpy(k == P_WORKER ? r->worker : r->version, val, strlen(val) + 1);
            if (k == P_WORKER)
                r->has_worker = 1;
            else
                r->has_version = 1;
            break;
        case P_ISOLATE:
            if (parse_uint(val, UINT32_MAX, &v) != 0)
                return query_refuse(
                    why, cap, "isolate must be an isolate id (a decimal number), not '%s'", val);
            r->isolate = (uint32_t)v;
            r->has_isolate = 1;
            break;
        case P_TYPE:
            if (strcmp(val, "cpu") == 0)
                r->type = STORE_TYPE_CPU;
            else if (strcmp(val, "heap") == 0)
                r->type = STORE_TYPE_HEAP;
            else if (strcmp(val, "snapshot") == 0)
                r->type = STORE_TYPE_SNAPSHOT;
            else
                return query_refuse(why, cap, "type must be cpu, heap or snapshot, not '%s'", val);
            break;
        case P_SECONDS:
            if (parse_uint(val, CFG_OD_SECONDS_MAX, &v) != 0 || v < 1)
                return query_refuse(why, cap,
                                    "seconds must be a whole number from 1 to %u, not '%s'",
                                    CFG_OD_SECONDS_MAX, val);
            r->seconds = v;
            break;
        case P_INTERVAL:
            if (cfg_parse_duration(val, &v) != 0 || v < CFG_OD_INTERVAL_MIN_NS ||
                v > CFG_OD_INTERVAL_MAX_NS)
                return query_refuse(
                    why, cap, "interval must be a duration from 100us to 1s (like 1ms), not '%s'",
                    val);
            r->interval_ns = v;
            break;
        case P_ALL:
            if (strcmp(val, "1") == 0 || strcmp(val, "true") == 0)
                r->all = 1;
            else if (strcmp(val, "0") == 0 || strcmp(val, "false") == 0)
                r->all = 0;
            else
                return query_refuse(why, cap, "all must be 1 or 0, not '%s'", val);
            break;
        }
        p = amp ? amp + 1 : end;
    }
    if (!r->has_worker)
        return query_refuse(why, cap, "worker is required (POST /profile?worker=W&type=cpu)");
    if (r->type == 0)
        return query_refuse(why, cap, "type is required: cpu, heap or snapshot");
    /* What a heap or snapshot window would not use is refused rather than
     * ignored, as isoprof profile refuses it: the caller meant something. */
    if (r->type != STORE_TYPE_CPU && (seen & ((1u << P_SECONDS) | (1u << P_INTERVAL))))
        return query_refuse(why, cap, "seconds and interval are for type=cpu, not %s",
                            store_type_name(r->type));
    if (r->type == STORE_TYPE_SNAPSHOT && r->all)
        return query_refuse(why, cap,
                            "all=1: a heap snapshot is of one isolate (name it with isolate=ID)");
    return 0;
}

/* The window asked for ended (ondemand.c). */
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
        conn_respond(c, 200, CT_PPROF, (char *)gz, len, NULL, 0);
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
    conn_error(c, status, 0, "%s", why);
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
        conn_error(c, 503, 0,
                   "%u requests are waiting for on-demand windows already; ask again when one "
                   "is answered",
                   waiting);
        return;
    }
    if (ctl_profile_parse(q, qlen, a->cfg->sampling.cpu.interval_ns, &r, why, sizeof(why)) != 0) {
        conn_error(c, 400, 0, "%s", why);
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
        conn_error(c, 404, 0, "unknown worker %s", r.worker);
        return;
    }
    if (nmatch == 0) {
        if (r.has_thread && !r.has_isolate)
            conn_error(c, 404, 0, "worker %s has no thread %s%s%s", r.worker, r.thread,
                       r.has_version ? " in version " : "", r.has_version ? r.version : "");
        else if (r.has_isolate)
            conn_error(c, 404, 0, "worker %s has no isolate %" PRIu32 "%s%s", r.worker, r.isolate,
                       r.has_version ? " of version " : "", r.has_version ? r.version : "");
        else
            conn_error(c, 404, 0, "worker %s has no version %s", r.worker, r.version);
        return;
    }
    if (nready == 0) {
        conn_error(c, 503, 0, "target not attached: worker %s is connecting or backing off",
                   r.worker);
        return;
    }
    struct target **ts = isoprof_calloc(nready, sizeof(*ts));
    if (ts == NULL) {
        conn_error(c, 500, 0, "out of memory");
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
            conn_error(c, 500, 0, "out of memory");
            return;
        }
        conn_respond(c, 409, CT_JSON, body, blen, NULL, 0);
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
            conn_error(c, 503, 0, "isoprofd is stopping");
        else if (rc == -EAGAIN)
            conn_error(c, 503, 0, "target not attached: worker %s is not ready for a %s window",
                       r.worker, store_type_name(r.type));
        else if (rc == -EBUSY)
            conn_error(c, 409, 0,
                       "worker %s: too many on-demand windows already queued for this isolate; "
                       "ask again when one has ended",
                       r.worker);
        else if (rc == -EINVAL)
            conn_error(c, 400, 0, "the window asked for is not valid");
        else
            conn_error(c, 500, 0, "%s", isoprof_strerror(rc));
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
        conn_error(c, 500, 1, "out of memory building the page");
        return;
    }
    conn_respond(c, 200, status_page ? CT_JSON : CT_METRICS, body, len, NULL, 0);
}

/* A complete request: answer it, now or when its window ends. */
static void conn_dispatch(struct ctl_conn *c)
{
    c->st = C_BUSY;
    uv_timer_stop(&c->timer);
    int method = c->req.p.method;
    struct ctl_target t;
    if (ctl_req_target(&c->req, &t) != 0) {
        conn_error(c, 400, 1, "bad request target");
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
            conn_bad_method(c, "/metrics", 1);
        return;
    }
    if (c->l->metrics_only) {
        conn_error(c, 404, 0, "not found: this address serves GET /metrics only");
        return;
    }
    if (path_is(path, plen, "/status")) {
        if (get)
            route_page(c, 1);
        else
            conn_bad_method(c, "/status", 1);
        return;
    }
    if (path_is(path, plen, "/profile")) {
        if (method == HTTP_POST)
            route_profile(c, q, qlen);
        else
            conn_bad_method(c, "/profile", 0);
        return;
    }
    char shown[128];
    snprintf(shown, sizeof(shown), "%.*s%s", (int)(plen < 100 ? plen : 100), path,
             plen > 100 ? "..." : "");
    conn_error(c, 404, 0, "no such path %s (GET /status, GET /metrics, POST /profile)", shown);
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

static void listener_on_connection(uv_stream_t *server, int status)
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
    int rc = l->metrics_only ? uv_tcp_init(ctl->a->loop, &c->h.tcp)
                             : uv_pipe_init(ctl->a->loop, &c->h.pipe, 0);
    if (rc != 0) {
        isoprof_free(c);
        return;
    }
    c->h.handle.data = c;
    uv_timer_init(ctl->a->loop, &c->timer);
    c->timer.data = c;
    c->closes = 2;
    ctl->closes++;
    c->st = C_IDLE;
    c->next = ctl->conns;
    if (ctl->conns)
        ctl->conns->prev = c;
    ctl->conns = c;
    if (uv_accept(server, &c->h.stream) != 0) {
        conn_close(c);
        return;
    }
    if (ctl->stopping) {
        ctl->a->n.control_rejected_connections++;
        conn_close(c);
        return;
    }
    if (l->nconns >= CTL_MAX_CONNS) {
        /* Make room: the newcomer is about to send its request. */
        struct ctl_conn *victim = conn_victim(l);
        ctl->a->n.control_rejected_connections++;
        if (victim == NULL) {
            conn_close(c);
            return;
        }
        log_debug("control: at the connection limit, the oldest idle one closed", "listener=%s",
                  l->metrics_only ? "metrics" : "control");
        conn_close(victim);
    }
    l->nconns++;
    c->counted = 1;
    conn_timer(c, CTL_REQUEST_MS);
    if (uv_read_start(&c->h.stream, conn_on_alloc, conn_on_read) != 0)
        conn_close(c);
}

/* --- start and stop --- */

/*
 * What is at path? 0: nothing, a socket nobody listens on (a crashed
 * agent's) or a symlink, which sock_create's rename replaces (a symlink is
 * never followed, whatever it names); -EADDRINUSE: an agent listens there;
 * -EEXIST: something else (a file, a directory); another negative errno
 * if it cannot be told.
 */
static int clear_stale(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -errno;
    if (S_ISLNK(st.st_mode))
        return 0;
    if (!S_ISSOCK(st.st_mode))
        return -EEXIST;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    int e = errno;
    close(fd);
    if (rc == 0 || e == EAGAIN || e == EINPROGRESS)
        return -EADDRINUSE; /* listening (EAGAIN: its backlog is full) */
    if (e != ECONNREFUSED)
        return -e;
    return 0;
}

/*
 * Create path as a listening Unix socket, mode 0600 (0660 and group gid
 * when gid is not -1), so that no step follows a name another user could
 * change (chmod and chown on the path would follow a symlink swapped in
 * after bind, and change the mode and group of whatever it names):
 *
 *   1. mkdtemp "<dir>/.isoprof-ctl.XXXXXX" beside the final path: a 0700
 *      directory of ours, opened with O_NOFOLLOW and checked to be ours
 *      and private. Nobody else can create, swap or reach what is in it,
 *      and each later step names its entry through that descriptor.
 *   2. bind "<private>/s" under the umask that gives the final mode (the
 *      mode of a socket file comes from the umask; fchmod on a socket does
 *      not reach the file). If the private directory's name was swapped
 *      meanwhile, the socket lands elsewhere and step 3 fails: nothing is
 *      changed.
 *   3. fstatat (no follow): a socket is there; fchownat(AT_SYMLINK_NOFOLLOW)
 *      for control.group.
 *   4. listen, then renameat into place. rename() replaces what is at the
 *      final path, a symlink included, without following it, and in one
 *      step: a client finds the old entry or the new socket.
 *   5. remove the private directory (rmdir removes only an empty one).
 *
 * *fd_out: the listening socket; *st_out: the socket file (its inode is the
 * same at the final path). 0, or a negative errno with *step naming what
 * failed; on failure nothing is left behind.
 */
static int sock_create(const char *path, gid_t gid, int *fd_out, struct stat *st_out,
                       const char **step)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dlen = slash == NULL ? 1 : slash == path ? 1 : (int)(slash - path);
    const char *dir = slash == NULL ? "." : path;
    int rc = 0, pfd = -1, tfd = -1, fd = -1, bound = 0;
    char *tmpl = NULL, *tname;
    *step = "path";
    if (*base == '\0')
        return -EINVAL;
    tmpl = isoprof_asprintf("%.*s/.isoprof-ctl.XXXXXX", dlen, dir);
    if (tmpl == NULL)
        return -ENOMEM;
    tname = tmpl + dlen + 1;
    *step = "open the directory";
    tname[-1] = '\0';
    pfd = open(tmpl, O_PATH | O_DIRECTORY | O_CLOEXEC);
    tname[-1] = '/';
    if (pfd < 0) {
        rc = -errno;
        goto out;
    }
    *step = "make a private directory";
    if (mkdtemp(tmpl) == NULL) {
        rc = -errno;
        goto out;
    }
    tfd = openat(pfd, tname, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (tfd < 0 || fstat(tfd, &st) != 0) {
        rc = -errno;
        goto fail_dir;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
        rc = -EPERM; /* not the directory mkdtemp made */
        goto fail_dir;
    }
    *step = "bind";
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/s", tmpl);
    if (n < 0 || (size_t)n >= sizeof(sa.sun_path)) /* long: the same entry, through tfd */
        snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/s", tfd);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        goto fail_dir;
    }
    mode_t old = umask(gid != (gid_t)-1 ? 0117 : 0177);
    int b = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    int e = errno;
    umask(old);
    if (b != 0) {
        rc = -e;
        goto fail_sock;
    }
    bound = 1;
    *step = "check the socket file";
    if (fstatat(tfd, "s", &st, AT_SYMLINK_NOFOLLOW) != 0) {
        rc = -errno;
        goto fail_sock;
    }
    if (!S_ISSOCK(st.st_mode)) {
        rc = -EPERM;
        goto fail_sock;
    }
    if (gid != (gid_t)-1) {
        *step = "give it to control.group";
        if (fchownat(tfd, "s", (uid_t)-1, gid, AT_SYMLINK_NOFOLLOW) != 0) {
            rc = -errno;
            goto fail_sock;
        }
    }
    /* Listening before it is in place, so another agent starting now does
     * not take it for a crashed one's. */
    *step = "listen";
    if (listen(fd, CTL_BACKLOG) != 0) {
        rc = -errno;
        goto fail_sock;
    }
    *step = "move it into place";
    if (renameat(tfd, "s", pfd, base) != 0) {
        rc = -errno;
        goto fail_sock;
    }
    unlinkat(pfd, tname, AT_REMOVEDIR);
    *fd_out = fd;
    *st_out = st;
    goto out;

fail_sock:
    close(fd);
    if (bound)
        unlinkat(tfd, "s", 0);
fail_dir:
    unlinkat(pfd, tname, AT_REMOVEDIR);
out:
    if (tfd >= 0)
        close(tfd);
    if (pfd >= 0)
        close(pfd);
    isoprof_free(tmpl);
    return rc;
}

/* "127.0.0.1:9464", "[::1]:9464", "localhost:9464" -> addr (the config
 * loader checked the form and that it is loopback). */
static int metrics_addr(const char *listen, struct sockaddr_storage *ss)
{
    char host[64];
    const char *h = listen, *he, *ps;
    if (listen[0] == '[') {
        h = listen + 1;
        he = strchr(listen, ']');
        if (he == NULL || he[1] != ':')
            return -EINVAL;
        ps = he + 2;
    } else {
        he = strrchr(listen, ':');
        if (he == NULL)
            return -EINVAL;
        ps = he + 1;
    }
    size_t hl = (size_t)(he - h);
    if (hl >= sizeof(host))
        return -EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    uint64_t port = 0;
    if (parse_uint(ps, 65535, &port) != 0 || port == 0)
        return -EINVAL;
    if (strcmp(host, "localhost") == 0)
        memcpy(host, "127.0.0.1", sizeof("127.0.0.1"));
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss) == 0)
        return 0;
    if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)ss) == 0)
        return 0;
    return -EINVAL;
}

static int listen_metrics(struct control *ctl)
{
    const char *listen = ctl->a->cfg->metrics.listen;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (metrics_addr(listen, &ss) != 0) {
        log_error("cannot serve metrics: bad metrics.listen", "listen=%s", listen);
        return -EINVAL;
    }
    struct ctl_listener *l = &ctl->metrics;
    int rc = uv_tcp_init(ctl->a->loop, &l->h.tcp);
    if (rc != 0)
        return rc;
    l->open = 1;
    l->h.handle.data = l;
    rc = uv_tcp_bind(&l->h.tcp, (const struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen(&l->h.stream, CTL_BACKLOG, listener_on_connection);
    if (rc != 0) {
        log_error("cannot serve metrics", "listen=%s err=%s", listen, uv_strerror(rc));
        return rc;
    }
    log_info("serving metrics", "listen=%s", listen);
    return 0;
}

static void control_close(struct control *ctl)
{
    ctl->stopping = 1;
    while (ctl->conns) {
        struct ctl_conn *c = ctl->conns;
        if (c->st == C_BUSY && c->waiter != NULL) {
            /* Its window may still be merged in the pool after the loop is
             * told to stop: say why now. A short answer goes out at once
             * (uv_write tries the socket first), before the close. */
            ondemand_cancel(c->waiter);
            c->waiter = NULL;
            conn_error(c, 503, 1, "isoprofd is stopping");
        }
        conn_close(c);
    }
    struct ctl_listener *ls[2] = {&ctl->sock, &ctl->metrics};
    for (int i = 0; i < 2; i++) {
        if (ls[i]->open) {
            ls[i]->open = 0;
            ctl->closes++;
            uv_close(&ls[i]->h.handle, listener_on_close);
        }
    }
    if (ctl->made) {
        /* Only the file we made: a newer agent may have taken the path. */
        struct stat st;
        if (lstat(ctl->path, &st) == 0 && st.st_dev == ctl->dev && st.st_ino == ctl->ino)
            unlink(ctl->path);
        ctl->made = 0;
    }
    ctl_maybe_free(ctl);
}

int control_start(struct agent *a)
{
    const struct cfg *cfg = a->cfg;
    struct control *ctl = isoprof_calloc(1, sizeof(*ctl));
    if (ctl == NULL)
        return -ENOMEM;
    ctl->a = a;
    ctl->sock.ctl = ctl->metrics.ctl = ctl;
    ctl->metrics.metrics_only = 1;
    /* control.socket, else the automatic path (the rule isoprof shares) */
    int rc = cfg_control_socket_path(cfg->control.socket, cfg->store.path, 0, &ctl->path);
    if (rc != 0)
        goto fail;
    struct sockaddr_un sun;
    if (strlen(ctl->path) >= sizeof(sun.sun_path)) {
        log_error("control socket path too long (set control.socket to a shorter path)",
                  "path=%s max_bytes=%u", ctl->path, (unsigned)(sizeof(sun.sun_path) - 1));
        rc = -ENAMETOOLONG;
        goto fail;
    }
    gid_t gid = (gid_t)-1;
    const char *group = cfg->control.group;
    if (group != NULL && group[0] != '\0') {
        struct group gr, *found = NULL;
        char buf[4096];
        int e = getgrnam_r(group, &gr, buf, sizeof(buf), &found);
        if (found == NULL) {
            log_error("control.group: no such group", "group=%s err=%e", group, e ? -e : -ENOENT);
            rc = e ? -e : -ENOENT;
            goto fail;
        }
        gid = gr.gr_gid;
    }
    rc = clear_stale(ctl->path);
    if (rc == -EADDRINUSE) {
        log_error("another isoprofd listens on the control socket; stop it or set control.socket",
                  "path=%s", ctl->path);
        goto fail;
    }
    if (rc == -EEXIST) {
        log_error("the control socket path exists and is not a socket; not touching it", "path=%s",
                  ctl->path);
        goto fail;
    }
    if (rc != 0) {
        log_error("cannot check the control socket path", "path=%s err=%e", ctl->path, rc);
        goto fail;
    }

    int fd = -1;
    struct stat st = {0};
    const char *step = "";
    rc = sock_create(ctl->path, gid, &fd, &st, &step);
    if (rc != 0) {
        log_error("cannot create the control socket", "path=%s step=%s err=%e", ctl->path, step,
                  rc);
        goto fail;
    }
    ctl->made = 1;
    ctl->dev = st.st_dev;
    ctl->ino = st.st_ino;
    struct ctl_listener *l = &ctl->sock;
    rc = uv_pipe_init(a->loop, &l->h.pipe, 0);
    if (rc != 0) {
        close(fd);
        goto fail;
    }
    l->open = 1;
    l->h.handle.data = l;
    /* Opened, not bound by libuv: libuv would unlink the name it bound at
     * close, whoever's file is there by then. */
    rc = uv_pipe_open(&l->h.pipe, fd);
    if (rc != 0) {
        close(fd);
        log_error("cannot listen on the control socket", "path=%s err=%s", ctl->path,
                  uv_strerror(rc));
        goto fail;
    }
    rc = uv_listen(&l->h.stream, CTL_BACKLOG, listener_on_connection);
    if (rc != 0) {
        log_error("cannot listen on the control socket", "path=%s err=%s", ctl->path,
                  uv_strerror(rc));
        goto fail;
    }
    if (cfg->metrics.listen != NULL && cfg->metrics.listen[0] != '\0') {
        rc = listen_metrics(ctl);
        if (rc != 0)
            goto fail;
    }
    log_info("control socket listening", "path=%s mode=%s group=%s", ctl->path,
             gid != (gid_t)-1 ? "0660" : "0600", gid != (gid_t)-1 ? group : "");
    a->control = ctl;
    return 0;

fail:
    /* Whatever was opened closes; the loop frees ctl in the last callback. */
    if (rc == 0)
        rc = -EIO;
    control_close(ctl);
    return rc;
}

void control_stop(struct agent *a)
{
    struct control *ctl = a->control;
    if (ctl == NULL)
        return;
    a->control = NULL;
    control_close(ctl);
}

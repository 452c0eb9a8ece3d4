/*
 * loopback.h - a small HTTP/1.1 server on 127.0.0.1 run on the test's own
 * libuv loop, shared by the uploader tests.
 *
 * Each connection reads one request (headers and Content-Length bytes of
 * body) into a growable buffer capped at SERVER_REQ_CAP, then answers it
 * and closes: with the fixed reply (REPLY), never (HANG), with a TCP reset
 * (RESET), or with what s->answer returns for that request (ANSWER; NULL
 * hangs). Every complete request is counted; the first SERVER_LOG_MAX are
 * kept whole in s->log with the loop time they arrived, and s->req is the
 * last one whatever the count.
 *
 * Everything here is static: each test binary includes it once.
 */
#ifndef ISOPROF_TEST_LOOPBACK_H
#define ISOPROF_TEST_LOOPBACK_H

#include "../test.h"

#include "base.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

#define SERVER_LOG_MAX 64
#define SERVER_REQ_CAP (8u << 20) /* a request larger than this is cut off (reset) */

enum mode { REPLY, HANG, RESET, ANSWER };

struct server;

/* The whole answer to one request (copied), or NULL to never answer it.
 * req is the request, NUL-terminated, borrowed for the call. */
typedef const char *(*server_answer_fn)(struct server *s, const char *req, size_t len, void *arg);

struct server_req {
    char *data; /* headers and body, NUL-terminated; isoprof_malloc'd */
    size_t len;
    uint64_t at_ms; /* uv_now when it was complete */
};

struct server {
    uv_tcp_t tcp;
    int port;
    enum mode mode;
    const char *reply; /* REPLY: the whole answer, borrowed */
    size_t reply_len;
    server_answer_fn answer; /* ANSWER */
    void *answer_arg;
    int requests;                          /* complete requests received */
    struct server_req log[SERVER_LOG_MAX]; /* the first SERVER_LOG_MAX of them */
    const char *req;                       /* the last one ("" before any) */
    size_t req_len;
    char *last; /* the last one when past the log; owned */
    int stopped;
};

struct conn {
    uv_tcp_t tcp;
    struct server *s;
    uv_write_t w;
    uv_buf_t out;
    char *answer; /* owned */
    char *buf;    /* the request so far */
    size_t len, cap;
    int answered;
};

static void conn_on_close(uv_handle_t *h)
{
    struct conn *c = h->data;
    isoprof_free(c->answer);
    isoprof_free(c->buf);
    isoprof_free(c);
}

static void conn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)h;
    static char buf[65536];
    b->base = buf;
    b->len = hint < sizeof(buf) ? hint : sizeof(buf);
}

static void conn_on_written(uv_write_t *w, int status)
{
    (void)status;
    struct conn *c = w->data;
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, conn_on_close);
}

/* The body of request req[0..len), and its length. */
static const char *req_body(const char *req, size_t len, size_t *blen)
{
    for (size_t i = 0; i + 4 <= len; i++)
        if (memcmp(req + i, "\r\n\r\n", 4) == 0) {
            *blen = len - i - 4;
            return req + i + 4;
        }
    *blen = 0;
    return NULL;
}

/* The value of header name in req (first occurrence) into out; 0 if found. */
__attribute__((unused)) static int req_header(const char *req, size_t len, const char *name,
                                              char *out, size_t cap)
{
    size_t blen;
    const char *body = req_body(req, len, &blen);
    const char *end = body ? body - 2 : req + len;
    size_t nl = strlen(name);
    for (const char *p = req; p + 2 + nl + 1 < end; p++) {
        if (p[0] != '\r' || p[1] != '\n' || strncasecmp(p + 2, name, nl) != 0 || p[2 + nl] != ':')
            continue;
        const char *v = p + 2 + nl + 1;
        while (v < end && *v == ' ')
            v++;
        const char *e = v;
        while (e < end && *e != '\r')
            e++;
        snprintf(out, cap, "%.*s", (int)(e - v), v);
        return 0;
    }
    return -1;
}

/* A complete request: headers and Content-Length bytes of body. */
static int request_complete(const char *req, size_t len)
{
    size_t blen;
    const char *body = req_body(req, len, &blen);
    if (body == NULL)
        return 0;
    char cl[32];
    size_t clen = 0;
    if (req_header(req, len, "Content-Length", cl, sizeof(cl)) == 0)
        clen = (size_t)strtoul(cl, NULL, 10);
    return blen >= clen;
}

static void server_record(struct server *s, struct conn *c)
{
    struct server_req r = {c->buf, c->len, uv_now(c->tcp.loop)};
    if (s->requests < SERVER_LOG_MAX) {
        s->log[s->requests] = r; /* the log takes the buffer */
    } else {
        isoprof_free(s->last);
        s->last = c->buf;
    }
    s->req = c->buf;
    s->req_len = c->len;
    c->buf = NULL;
    c->len = c->cap = 0;
    s->requests++;
}

static void conn_on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    struct conn *c = st->data;
    struct server *s = c->s;
    if (n < 0 || s->stopped) {
        if (!uv_is_closing((uv_handle_t *)st))
            uv_close((uv_handle_t *)st, conn_on_close);
        return;
    }
    if (c->answered || n == 0)
        return;
    if (c->len + (size_t)n + 1 > c->cap) {
        size_t nc = c->cap ? c->cap : 65536;
        while (nc < c->len + (size_t)n + 1)
            nc *= 2;
        char *nb = nc <= SERVER_REQ_CAP ? isoprof_realloc(c->buf, nc) : NULL;
        if (nb == NULL) {
            fprintf(stderr, "loopback: request over %u bytes, dropped\n", SERVER_REQ_CAP);
            uv_tcp_close_reset(&c->tcp, conn_on_close);
            return;
        }
        c->buf = nb;
        c->cap = nc;
    }
    memcpy(c->buf + c->len, b->base, (size_t)n);
    c->len += (size_t)n;
    c->buf[c->len] = '\0';
    if (!request_complete(c->buf, c->len))
        return;
    c->answered = 1;
    server_record(s, c);
    const char *ans = NULL;
    switch (s->mode) {
    case HANG:
        return;
    case RESET:
        uv_tcp_close_reset(&c->tcp, conn_on_close);
        return;
    case REPLY:
        ans = s->reply;
        break;
    case ANSWER:
        ans = s->answer(s, s->req, s->req_len, s->answer_arg);
        break;
    }
    if (ans == NULL)
        return;
    c->answer = isoprof_strdup(ans);
    if (c->answer == NULL)
        abort();
    c->out = uv_buf_init(c->answer, (unsigned)strlen(c->answer));
    c->w.data = c;
    uv_write(&c->w, st, &c->out, 1, conn_on_written);
}

static void server_on_conn(uv_stream_t *l, int status)
{
    struct server *s = l->data;
    if (status != 0)
        return;
    struct conn *c = isoprof_calloc(1, sizeof(*c));
    REQUIRE(c != NULL);
    c->s = s;
    uv_tcp_init(l->loop, &c->tcp);
    c->tcp.data = c;
    REQUIRE(uv_accept(l, (uv_stream_t *)&c->tcp) == 0);
    uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_on_read);
}

/* Listen on 127.0.0.1, a free port (s->port). reply: the fixed answer of
 * REPLY; answer/arg: the callback of ANSWER. */
static void server_start_with(uv_loop_t *loop, struct server *s, enum mode mode, const char *reply,
                              server_answer_fn answer, void *arg)
{
    memset(s, 0, sizeof(*s));
    s->mode = mode;
    s->reply = reply;
    s->reply_len = reply ? strlen(reply) : 0;
    s->answer = answer;
    s->answer_arg = arg;
    s->req = "";
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    REQUIRE(uv_tcp_init(loop, &s->tcp) == 0);
    s->tcp.data = s;
    REQUIRE(uv_tcp_bind(&s->tcp, (const struct sockaddr *)&a, 0) == 0);
    REQUIRE(uv_listen((uv_stream_t *)&s->tcp, 8, server_on_conn) == 0);
    struct sockaddr_in got;
    int len = sizeof(got);
    uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&got, &len);
    s->port = ntohs(got.sin_port);
}

__attribute__((unused)) static void server_start(uv_loop_t *loop, struct server *s, enum mode mode,
                                                 const char *reply)
{
    server_start_with(loop, s, mode, reply, NULL, NULL);
}

/* Stop listening and free the log; connections still open read nothing
 * more (close them with server_close_walk). */
static void server_stop(struct server *s)
{
    if (!uv_is_closing((uv_handle_t *)&s->tcp))
        uv_close((uv_handle_t *)&s->tcp, NULL);
    s->stopped = 1;
    int n = s->requests < SERVER_LOG_MAX ? s->requests : SERVER_LOG_MAX;
    for (int i = 0; i < n; i++)
        isoprof_free(s->log[i].data);
    memset(s->log, 0, sizeof(s->log));
    isoprof_free(s->last);
    s->last = NULL;
    s->req = "";
    s->req_len = 0;
}

/* uv_walk callback (arg: the server): close what is left, the
 * connections a server kept open (a HANG, or a client that went away). */
static void server_close_walk(uv_handle_t *h, void *arg)
{
    struct server *s = arg;
    if (!uv_is_closing(h) && h->type == UV_TCP && (s == NULL || h != (uv_handle_t *)&s->tcp))
        uv_close(h, conn_on_close);
}

#endif

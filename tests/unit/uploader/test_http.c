/*
 * test_http.c - the libcurl-on-libuv client (uploader/http.c) against a
 * loopback server run on the same loop: a POST arrives with its method,
 * headers, Basic auth and exact body; the answer's code, body and
 * Retry-After come back; a body over its cap fails an http_get but is read
 * and dropped by an http_request, whose status is the answer (a 1 MiB body
 * after a 200 or a 503, an endless one ended by the timeout); a server that
 * never answers, a refused connection and a reset give their errors; a
 * cancelled request calls nothing; closing with requests in flight frees
 * everything.
 */
#include "base.h"
#include "http.h"
#include "test.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "loopback.h"

/* --- the client side --- */

struct result {
    int done;
    struct http_resp r;
    char body[4096];
};

static void on_resp(const struct http_resp *r, void *arg)
{
    struct result *res = arg;
    res->done++;
    res->r = *r;
    snprintf(res->body, sizeof(res->body), "%.*s", (int)r->len, r->body);
    res->r.body = res->body;
    res->r.why = NULL;
}

/* Run the loop until res is done or ms pass (then fail). */
static void run_until(uv_loop_t *loop, struct result *res, uint64_t ms)
{
    uint64_t end = uv_now(loop) + ms;
    while (!res->done && uv_now(loop) < end) {
        uv_run(loop, UV_RUN_ONCE);
        uv_update_time(loop);
    }
    CHECK(res->done == 1);
}

struct fixture {
    uv_loop_t loop;
    struct http_client *c;
    struct server s;
    char url[128];
};

static void fx_init(struct fixture *f, enum mode mode, const char *reply)
{
    REQUIRE(uv_loop_init(&f->loop) == 0);
    REQUIRE(http_client_init(&f->loop, &f->c) == 0);
    server_start(&f->loop, &f->s, mode, reply);
    snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%d/push.v1.PusherService/Push", f->s.port);
}

/* Close the client and whatever connections are left; the loop must then
 * close cleanly (nothing leaked, no handle left open). */
static void teardown(uv_loop_t *loop, struct http_client *c, struct server *s)
{
    http_client_close(c);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_walk(loop, server_close_walk, s);
    uv_run(loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(loop), 0);
}

static void fx_free(struct fixture *f)
{
    server_stop(&f->s);
    teardown(&f->loop, f->c, &f->s);
}

TEST(post_arrives_whole)
{
    struct fixture f;
    fx_init(&f, REPLY, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
    static const char body[] = "\x0a\x05hello\x00binary\xff";
    const char *hdrs[] = {"Content-Type: application/proto", "X-Scope-OrgID: tenant-1"};
    struct http_opts o = {.body = body,
                          .body_len = sizeof(body) - 1,
                          .headers = hdrs,
                          .nheaders = 2,
                          .max_body = 1024,
                          .timeout_ms = 5000,
                          .userpwd = "user:s3cret"};
    struct result res = {0};
    REQUIRE(http_request(f.c, f.url, &o, on_resp, &res, NULL) == 0);
    run_until(&f.loop, &res, 5000);
    CHECK_EQ_INT(res.r.status, 0);
    CHECK_EQ_INT(res.r.code, 200);
    CHECK_STR(res.body, "{}");
    CHECK_EQ_INT(res.r.retry_after_s, -1);
    REQUIRE(f.s.requests == 1);
    CHECK(strncmp(f.s.req, "POST /push.v1.PusherService/Push HTTP/1.1\r\n", 43) == 0);
    CHECK(strstr(f.s.req, "\r\nContent-Type: application/proto\r\n") != NULL);
    CHECK(strstr(f.s.req, "\r\nX-Scope-OrgID: tenant-1\r\n") != NULL);
    /* base64("user:s3cret") */
    CHECK(strstr(f.s.req, "\r\nAuthorization: Basic dXNlcjpzM2NyZXQ=\r\n") != NULL);
    const char *b = strstr(f.s.req, "\r\n\r\n");
    REQUIRE(b != NULL);
    b += 4;
    CHECK_EQ_INT((size_t)(f.s.req + f.s.req_len - b), sizeof(body) - 1);
    CHECK(memcmp(b, body, sizeof(body) - 1) == 0);
    fx_free(&f);
}

TEST(retry_after)
{
    static const struct {
        const char *reply;
        long code, retry_after;
    } cases[] = {
        {"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 4\r\n"
         "Connection: close\r\n\r\nslow",
         429, 7},
        {"HTTP/1.1 503 Service Unavailable\r\nretry-after: 0\r\nContent-Length: 0\r\n"
         "Connection: close\r\n\r\n",
         503, 0},
        {"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", 503,
         -1},
        {"HTTP/1.1 400 Bad Request\r\nContent-Length: 20\r\nConnection: close\r\n\r\n"
         "no profiles received",
         400, -1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct fixture f;
        fx_init(&f, REPLY, cases[i].reply);
        struct http_opts o = {.body = "x", .body_len = 1, .max_body = 1024, .timeout_ms = 5000};
        struct result res = {0};
        REQUIRE(http_request(f.c, f.url, &o, on_resp, &res, NULL) == 0);
        run_until(&f.loop, &res, 5000);
        CHECK_EQ_INT(res.r.status, 0);
        CHECK_EQ_INT(res.r.code, cases[i].code);
        CHECK_EQ_INT(res.r.retry_after_s, cases[i].retry_after);
        if (cases[i].code == 400)
            CHECK_STR(res.body, "no profiles received");
        fx_free(&f);
    }
}

struct get_result {
    int done, status;
    long code;
};

static void on_get(int status, long code, const char *body, size_t len, const char *why, void *arg)
{
    (void)body;
    (void)len;
    (void)why;
    struct get_result *g = arg;
    g->done++;
    g->status = status;
    g->code = code;
}

TEST(body_over_cap)
{
    struct fixture f;
    /* Claims 100 MB, sends 4 bytes and closes. http_get needs its body
     * whole: refused from the header, before any body is read. */
    fx_init(&f, REPLY, "HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\nxxxx");
    struct get_result g = {0};
    REQUIRE(http_get(f.c, f.url, 1000, 5000, on_get, &g, NULL) == 0);
    uint64_t end = uv_now(&f.loop) + 5000;
    while (!g.done && uv_now(&f.loop) < end)
        uv_run(&f.loop, UV_RUN_ONCE);
    CHECK_EQ_INT(g.done, 1);
    CHECK(g.status != 0);
    /* http_request: the 200 is the answer, its body cut short */
    struct http_opts o = {.body = "x", .body_len = 1, .max_body = 1000, .timeout_ms = 5000};
    struct result res = {0};
    REQUIRE(http_request(f.c, f.url, &o, on_resp, &res, NULL) == 0);
    run_until(&f.loop, &res, 5000);
    CHECK_EQ_INT(res.r.status, 0);
    CHECK_EQ_INT(res.r.code, 200);
    CHECK_EQ_INT(res.r.cut, 1);
    CHECK_STR(res.body, "xxxx");
    fx_free(&f);
}

/* "HTTP/1.1 <status>\r\nContent-Length: n\r\n\r\n" and n body bytes, a
 * 16-byte pattern; owned by the caller. */
static char *big_answer(const char *status, size_t n)
{
    char head[160];
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", status, n);
    char *a = isoprof_malloc((size_t)hl + n + 1);
    if (a == NULL)
        abort();
    memcpy(a, head, (size_t)hl);
    for (size_t i = 0; i < n; i++)
        a[(size_t)hl + i] = "0123456789abcdef"[i % 16];
    a[(size_t)hl + n] = '\0';
    return a;
}

TEST(big_body_is_read_and_dropped)
{
    /* 1 MiB after a 200 and after a 503: the status is the answer; the
     * first max_body bytes are kept (an error's reason), the rest is read
     * and dropped, and counted. */
    static const struct {
        const char *status;
        long code;
    } cases[] = {{"200 OK", 200}, {"503 Service Unavailable", 503}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]) && !test_failed_; i++) {
        char *ans = big_answer(cases[i].status, 1u << 20);
        struct fixture f;
        fx_init(&f, REPLY, ans);
        struct http_opts o = {.body = "x", .body_len = 1, .max_body = 1000, .timeout_ms = 5000};
        struct result res = {0};
        REQUIRE(http_request(f.c, f.url, &o, on_resp, &res, NULL) == 0);
        run_until(&f.loop, &res, 5000);
        CHECK_EQ_INT(res.r.status, 0);
        CHECK_EQ_INT(res.r.code, cases[i].code);
        CHECK_EQ_INT(res.r.len, 1000);
        CHECK(strncmp(res.body, "0123456789abcdef0123", 20) == 0);
        CHECK_EQ_INT(res.r.dropped, (1u << 20) - 1000);
        CHECK_EQ_INT(res.r.cut, 0);
        CHECK_EQ_INT(f.s.requests, 1);
        fx_free(&f);
        isoprof_free(ans);
    }
}

/* --- a server whose 200 never ends ---------------------------------- */

/* Answers the first connection with a 200 head and then a 16 KiB chunk
 * every 10 ms, forever (a bounded write queue). */
struct stream_srv {
    uv_tcp_t listen, conn;
    uv_timer_t tick;
    int port, accepted, head_sent;
    size_t sent;
};

static void stream_on_write(uv_write_t *w, int status)
{
    (void)status;
    isoprof_free(w);
}

static void stream_send(struct stream_srv *s, const char *p, size_t n)
{
    uv_write_t *w = isoprof_malloc(sizeof(*w));
    if (w == NULL)
        abort();
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    if (uv_write(w, (uv_stream_t *)&s->conn, &b, 1, stream_on_write) != 0)
        isoprof_free(w);
    else
        s->sent += n;
}

static void stream_on_tick(uv_timer_t *t)
{
    struct stream_srv *s = t->data;
    static char chunk[6 + 16384 + 2];
    if (chunk[0] == '\0') {
        memcpy(chunk, "4000\r\n", 6);
        memset(chunk + 6, 'z', 16384);
        memcpy(chunk + 6 + 16384, "\r\n", 2);
    }
    if (!s->accepted || uv_is_closing((uv_handle_t *)&s->conn))
        return;
    if (!s->head_sent) {
        static const char head[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        stream_send(s, head, sizeof(head) - 1);
        s->head_sent = 1;
    }
    if (uv_stream_get_write_queue_size((uv_stream_t *)&s->conn) < (1u << 20))
        stream_send(s, chunk, sizeof(chunk));
}

static void stream_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)h;
    (void)hint;
    static char buf[4096];
    *b = uv_buf_init(buf, sizeof(buf));
}

static void stream_on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    if (n < 0)
        uv_read_stop(st); /* the client went away: writes fail from now on */
}

static void stream_on_conn(uv_stream_t *l, int status)
{
    struct stream_srv *s = l->data;
    if (status != 0 || s->accepted)
        return;
    uv_tcp_init(l->loop, &s->conn);
    REQUIRE(uv_accept(l, (uv_stream_t *)&s->conn) == 0);
    s->accepted = 1;
    uv_read_start((uv_stream_t *)&s->conn, stream_alloc, stream_on_read);
}

static void stream_start(uv_loop_t *loop, struct stream_srv *s)
{
    memset(s, 0, sizeof(*s));
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    REQUIRE(uv_tcp_init(loop, &s->listen) == 0);
    s->listen.data = s;
    REQUIRE(uv_tcp_bind(&s->listen, (const struct sockaddr *)&a, 0) == 0);
    REQUIRE(uv_listen((uv_stream_t *)&s->listen, 8, stream_on_conn) == 0);
    struct sockaddr_in got;
    int len = sizeof(got);
    uv_tcp_getsockname(&s->listen, (struct sockaddr *)&got, &len);
    s->port = ntohs(got.sin_port);
    uv_timer_init(loop, &s->tick);
    s->tick.data = s;
    uv_timer_start(&s->tick, stream_on_tick, 10, 10);
}

static void stream_stop(struct stream_srv *s)
{
    uv_close((uv_handle_t *)&s->tick, NULL);
    uv_close((uv_handle_t *)&s->listen, NULL);
    if (s->accepted)
        uv_close((uv_handle_t *)&s->conn, NULL);
}

TEST(endless_body_ends_at_the_timeout)
{
    /* A 200 whose body never ends: the transfer still ends at its
     * timeout, and the 200 is the answer (the server took the request). */
    uv_loop_t loop;
    REQUIRE(uv_loop_init(&loop) == 0);
    struct http_client *c;
    REQUIRE(http_client_init(&loop, &c) == 0);
    struct stream_srv s;
    stream_start(&loop, &s);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", s.port);
    struct http_opts o = {.body = "x", .body_len = 1, .max_body = 1000, .timeout_ms = 600};
    struct result res = {0};
    uint64_t t0 = uv_hrtime();
    REQUIRE(http_request(c, url, &o, on_resp, &res, NULL) == 0);
    run_until(&loop, &res, 5000);
    uint64_t ms = (uv_hrtime() - t0) / 1000000;
    CHECK(ms >= 500 && ms < 3000);
    CHECK(s.sent > 16384);
    CHECK_EQ_INT(res.r.status, 0);
    CHECK_EQ_INT(res.r.code, 200);
    CHECK_EQ_INT(res.r.len, 1000);
    CHECK_EQ_INT(res.r.cut, 1);
    CHECK(res.r.dropped > 16384 - 1000);
    stream_stop(&s);
    teardown(&loop, c, NULL);
}

TEST(hang_times_out)
{
    struct fixture f;
    fx_init(&f, HANG, NULL);
    struct http_opts o = {.body = "x", .body_len = 1, .max_body = 1000, .timeout_ms = 300};
    struct result res = {0};
    uint64_t t0 = uv_hrtime();
    REQUIRE(http_request(f.c, f.url, &o, on_resp, &res, NULL) == 0);
    run_until(&f.loop, &res, 5000);
    CHECK_EQ_INT(res.r.status, ISOPROF_ETIMEDOUT);
    CHECK((uv_hrtime() - t0) / 1000000 < 3000);
    fx_free(&f);
}

TEST(reset_and_refused)
{
    struct fixture f;
    fx_init(&f, RESET, NULL);
    struct http_opts o = {.body = "x", .body_len = 1, .max_body = 1000, .timeout_ms = 3000};
    struct result res = {0};
    REQUIRE(http_request(f.c, f.url, &o, on_resp, &res, NULL) == 0);
    run_until(&f.loop, &res, 5000);
    CHECK(res.r.status != 0);
    CHECK_EQ_INT(f.s.requests, 1);

    /* nothing listens on the port any more */
    int port = f.s.port;
    uv_close((uv_handle_t *)&f.s.tcp, NULL);
    uv_run(&f.loop, UV_RUN_NOWAIT);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
    struct result res2 = {0};
    REQUIRE(http_request(f.c, url, &o, on_resp, &res2, NULL) == 0);
    run_until(&f.loop, &res2, 5000);
    CHECK_EQ_INT(res2.r.status, -ECONNREFUSED);
    fx_free(&f);
}

TEST(cancel_and_close_in_flight)
{
    struct fixture f;
    fx_init(&f, HANG, NULL);
    struct http_opts o = {.body = "x", .body_len = 1, .max_body = 1000, .timeout_ms = 10000};
    struct result a = {0}, b = {0};
    struct http_req *ra = NULL;
    REQUIRE(http_request(f.c, f.url, &o, on_resp, &a, &ra) == 0);
    REQUIRE(http_request(f.c, f.url, &o, on_resp, &b, NULL) == 0);
    for (int i = 0; i < 20 && f.s.requests < 2; i++)
        uv_run(&f.loop, UV_RUN_ONCE);
    http_cancel(ra);
    fx_free(&f); /* b still in flight: no callback, nothing leaked (ASan) */
    CHECK_EQ_INT(a.done, 0);
    CHECK_EQ_INT(b.done, 0);
}

TEST(bad_arguments)
{
    uv_loop_t loop;
    REQUIRE(uv_loop_init(&loop) == 0);
    struct http_client *c;
    REQUIRE(http_client_init(&loop, &c) == 0);
    struct result res = {0};
    struct http_opts o = {.method = "post", .max_body = 10, .timeout_ms = 10};
    CHECK_EQ_INT(http_request(c, "http://127.0.0.1:1/", &o, on_resp, &res, NULL), -EINVAL);
    o.method = "POST";
    o.nheaders = 1;
    CHECK_EQ_INT(http_request(c, "http://127.0.0.1:1/", &o, on_resp, &res, NULL), -EINVAL);
    o.nheaders = 0;
    CHECK_EQ_INT(http_request(c, NULL, &o, on_resp, &res, NULL), -EINVAL);
    CHECK_EQ_INT(http_request(c, "http://127.0.0.1:1/", NULL, on_resp, &res, NULL), -EINVAL);
    /* https is refused unless allowed */
    o.timeout_ms = 2000;
    REQUIRE(http_request(c, "https://127.0.0.1:1/", &o, on_resp, &res, NULL) == 0);
    run_until(&loop, &res, 5000);
    CHECK_EQ_INT(res.r.status, ISOPROF_ECURL);
    teardown(&loop, c, NULL);
}

int main(void)
{
    RUN(post_arrives_whole);
    RUN(retry_after);
    RUN(body_over_cap);
    RUN(big_body_is_read_and_dropped);
    RUN(endless_body_ends_at_the_timeout);
    RUN(hang_times_out);
    RUN(reset_and_refused);
    RUN(cancel_and_close_in_flight);
    RUN(bad_arguments);
    TEST_EXIT();
}

/*
 * test_http.c - the libcurl-on-libuv client (uploader/http.c) against a
 * loopback server run on the same loop: a POST arrives with its method,
 * headers, Basic auth and exact body; the answer's code, body and
 * Retry-After come back; a body over its cap, a server that never answers,
 * a refused connection and a reset give their errors; a cancelled request
 * calls nothing; closing with requests in flight frees everything.
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

TEST(body_over_cap)
{
    struct fixture f;
    /* claims 100 MB: refused from the header, before any body is read */
    fx_init(&f, REPLY, "HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\nxxxx");
    struct http_opts o = {.body = "x", .body_len = 1, .max_body = 1000, .timeout_ms = 5000};
    struct result res = {0};
    REQUIRE(http_request(f.c, f.url, &o, on_resp, &res, NULL) == 0);
    run_until(&f.loop, &res, 5000);
    CHECK(res.r.status != 0);
    fx_free(&f);
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
    RUN(hang_times_out);
    RUN(reset_and_refused);
    RUN(cancel_and_close_in_flight);
    RUN(bad_arguments);
    TEST_EXIT();
}

/*
 * http.h - small HTTP client on libcurl multi, driven by the libuv loop.
 *
 * The daemon polls inspector endpoints (/json/version, /json/list) with
 * http_get; the uploader sends its requests with http_request (a method,
 * a body, headers, TLS). libcurl runs in multi-socket mode: its sockets
 * are watched with uv_poll_t and its timeout with one uv_timer_t, so no
 * call here blocks. Responses are collected in a buffer with a hard cap.
 * Proxies from the environment are never used and redirects are never
 * followed. Nothing here logs.
 *
 * An http_request answer is its status: a body larger than max_body is
 * read on and dropped (counted), and a body that stops short after the
 * answer's head arrived (time-out, reset, more than HTTP_DROP_MAX dropped)
 * still gives its code. A server that took a request and then answered
 * with a long or endless body is thus not sent the same request again.
 * http_get needs its body whole (JSON): past max_body it fails.
 *
 * Thread: loop thread only.
 */
#ifndef ISOPROF_HTTP_H
#define ISOPROF_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct http_client;
struct http_req;

/*
 * Completion of one request. status: 0 when an HTTP answer arrived (any
 * code, in http_code), ISOPROF_ETOOBIG when the body passed its cap,
 * ISOPROF_ETIMEDOUT, -ECONNREFUSED, or ISOPROF_ECURL with `why` naming
 * libcurl's reason. body is NUL-terminated and borrowed for the call.
 */
typedef void (*http_done_cb)(int status, long http_code, const char *body, size_t len,
                             const char *why, void *arg);

/* Create a client on loop. *out owned by the caller until http_client_close. */
int http_client_init(uv_loop_t *loop, struct http_client **out);

/*
 * Start a GET of url. max_body caps the response body; timeout_ms bounds
 * the whole transfer. Proxies from the environment are ignored (inspector
 * endpoints are local) and redirects are not followed. *out (optional)
 * identifies the request for http_cancel and is valid until done_cb runs.
 * Errors: -ENOMEM, ISOPROF_ECURL.
 */
int http_get(struct http_client *c, const char *url, size_t max_body, uint64_t timeout_ms,
             http_done_cb done_cb, void *arg, struct http_req **out);

/* Body bytes an http_request reads and drops past max_body before it
 * stops reading (the answer then counts as cut). */
#define HTTP_DROP_MAX (8u << 20)

/*
 * What an http_request answered. status: 0 when the answer's head arrived
 * (any code, in code), even if its body was then cut short; else
 * ISOPROF_ETIMEDOUT, -ECONNREFUSED or ISOPROF_ECURL (why names libcurl's
 * reason). body: its first max_body bytes at most, NUL-terminated, borrowed
 * for the call. dropped: body bytes read past max_body and dropped. cut: 1
 * when the body did not arrive whole (the transfer timed out or failed
 * after the head, or more than HTTP_DROP_MAX bytes were dropped); why then
 * says how. retry_after_s: the answer's Retry-After in seconds (either
 * form, a delay or a date), -1 when it had none.
 */
struct http_resp {
    int status;
    long code;
    const char *body;
    size_t len;
    const char *why;
    long retry_after_s;
    size_t dropped;
    int cut;
};

typedef void (*http_resp_cb)(const struct http_resp *r, void *arg);

/* One request; zero-initialise and set what you need. */
struct http_opts {
    const char *method; /* NULL: GET, or POST when body is set */
    const void *body;   /* borrowed until the callback ran (or http_cancel) */
    size_t body_len;
    const char *const *headers; /* "Name: value" lines, copied; NULL-free array */
    size_t nheaders;
    size_t max_body;     /* response body bytes kept; the rest is read and dropped */
    uint64_t timeout_ms; /* the whole transfer, connection included */
    int allow_https;     /* also accept https:// urls (TLS verification on) */
    const char *ca_file; /* PEM bundle to verify the server with; NULL: system */
    int insecure;        /* https without verifying the peer or its name */
    const char *userpwd; /* "user:password" for HTTP Basic auth; copied by libcurl */
};

/*
 * Start a request of url as o describes (o is read during the call; only
 * o->body is borrowed longer). done_cb receives the answer; *out
 * (optional) as for http_get. Errors: -EINVAL (NULL argument, a method
 * with characters other than A-Z), -ENOMEM, ISOPROF_ECURL.
 */
int http_request(struct http_client *c, const char *url, const struct http_opts *o,
                 http_resp_cb done_cb, void *arg, struct http_req **out);

/* Abort a request in flight; its done_cb is not called. */
void http_cancel(struct http_req *r);

/*
 * Cancel every request (no callbacks), release libcurl and close the
 * libuv handles; the client is freed once the last handle closed. c must
 * not be used after this call.
 */
void http_client_close(struct http_client *c);

#endif

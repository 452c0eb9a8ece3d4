/*
 * http.c - libcurl multi-socket on libuv (see http.h).
 *
 * libcurl tells us through CURLMOPT_SOCKETFUNCTION which sockets to watch
 * for what, and through CURLMOPT_TIMERFUNCTION when to call it back. Each
 * watched socket gets a struct http_sock holding a uv_poll_t; the one
 * uv_timer_t is the multi handle's timeout. After every
 * curl_multi_socket_action we drain curl_multi_info_read for finished
 * transfers and complete them; callbacks therefore never run inside a
 * libcurl callback, and may start new requests.
 *
 * Bodies: http_get keeps its whole body or fails (ISOPROF_ETOOBIG, and
 * CURLOPT_MAXFILESIZE refuses a Content-Length over the cap before any
 * body is read). http_request keeps the first max_body bytes and reads
 * and drops the rest, up to HTTP_DROP_MAX, so that a server that answered
 * 200 with a large body is not taken for one that failed (the uploader
 * would send the batch again, a duplicate each time). Once the head of a
 * final answer (not 1xx) arrived its code is the answer, whatever happens
 * to the body: cut short by the timeout, a reset or the drop limit, the
 * answer is reported with cut set. The timeout bounds the whole transfer,
 * so an endless body still ends.
 *
 * Closing: requests are removed first, then the socket watchers and the
 * timer are closed; the client is freed in the last close callback.
 */
#include "http.h"

#include "base.h"

#include <curl/curl.h>
#include <errno.h>
#include <string.h>
#include <strings.h>

struct http_sock {
    uv_poll_t poll;
    curl_socket_t fd;
    struct http_client *c;
    struct http_sock *next;
};

struct http_req {
    struct http_client *c;
    CURL *easy;
    struct curl_slist *headers;
    struct isoprof_buf body; /* the response body, capped at the request's max_body */
    size_t dropped;          /* body bytes past max, read and dropped (drop_excess) */
    int drop_excess;         /* http_request: past max, drop; http_get: fail */
    int too_big;             /* http_get: the body passed max */
    int cut;                 /* http_request: stopped reading after HTTP_DROP_MAX dropped */
    int head_done;           /* the head of a final (not 1xx) answer arrived */
    int retry_after_seen;    /* the answer had a Retry-After header */
    http_done_cb cb;         /* http_get */
    http_resp_cb resp_cb;    /* http_request */
    void *arg;
    char errbuf[CURL_ERROR_SIZE];
    struct http_req *prev, *next;
};

struct http_client {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    struct http_sock *socks;
    struct http_req *reqs;
    int pending_closes;
    int closing;
};

static int curl_global_done;

static void client_maybe_free(struct http_client *c)
{
    if (c->closing && c->pending_closes == 0)
        isoprof_free(c);
}

static void sock_on_close(uv_handle_t *h)
{
    struct http_sock *s = container_of((uv_poll_t *)h, struct http_sock, poll);
    struct http_client *c = s->c;
    isoprof_free(s);
    c->pending_closes--;
    client_maybe_free(c);
}

static void sock_unlink_close(struct http_client *c, struct http_sock *s)
{
    for (struct http_sock **pp = &c->socks; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    uv_poll_stop(&s->poll);
    c->pending_closes++;
    uv_close((uv_handle_t *)&s->poll, sock_on_close);
}

static void req_unlink(struct http_req *r)
{
    struct http_client *c = r->c;
    if (r->prev)
        r->prev->next = r->next;
    else
        c->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
}

static void req_free(struct http_req *r)
{
    curl_multi_remove_handle(r->c->multi, r->easy);
    curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    isoprof_buf_free(&r->body);
    isoprof_free(r);
}

static void check_done(struct http_client *c)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(c->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE)
            continue;
        struct http_req *r = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        CURLcode rc = m->data.result;
        long code = 0;
        curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &code);
        int status = 0, cut = 0;
        const char *why = NULL;
        if (r->too_big) {
            status = ISOPROF_ETOOBIG;
            why = "response body over its cap";
        } else if (rc != CURLE_OK && r->drop_excess && r->head_done) {
            /* The server answered; only the body stopped short. */
            cut = 1;
            if (r->cut)
                why = "response body over the drop limit, not read to its end";
            else if (rc == CURLE_OPERATION_TIMEDOUT)
                why = "response body not complete within the timeout";
            else
                why = r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc);
        } else if (rc == CURLE_OPERATION_TIMEDOUT) {
            status = ISOPROF_ETIMEDOUT;
            why = "timed out";
        } else if (rc == CURLE_COULDNT_CONNECT) {
            status = -ECONNREFUSED;
            why = r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc);
        } else if (rc != CURLE_OK) {
            status = ISOPROF_ECURL;
            why = r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc);
        }
        curl_off_t ra = -1;
        if (status == 0 && curl_easy_getinfo(m->easy_handle, CURLINFO_RETRY_AFTER, &ra) != CURLE_OK)
            ra = -1;
        /* libcurl answers 0 both for "Retry-After: 0" and for no header;
         * only the header itself tells them apart. */
        if (ra == 0 && !r->retry_after_seen)
            ra = -1;
        req_unlink(r);
        if (r->body.data == NULL)
            isoprof_buf_reserve(&r->body, 0); /* "" rather than NULL, if it can */
        /* The body stays ours until the callback returns. */
        const char *body = r->body.data ? r->body.data : "";
        size_t len = r->body.data ? r->body.len : 0;
        if (r->resp_cb != NULL) {
            struct http_resp resp = {.status = status,
                                     .code = code,
                                     .body = body,
                                     .len = len,
                                     .why = why,
                                     .retry_after_s = ra < 0 ? -1 : (long)ra,
                                     .dropped = r->dropped,
                                     .cut = cut};
            r->resp_cb(&resp, r->arg);
        } else {
            r->cb(status, code, body, len, why, r->arg);
        }
        req_free(r);
    }
}

static void timer_on_fire(uv_timer_t *t)
{
    struct http_client *c = container_of(t, struct http_client, timer);
    int running;
    curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(c);
}

static int multi_on_timer(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    struct http_client *c = userp;
    if (c->closing)
        return 0;
    if (timeout_ms < 0)
        uv_timer_stop(&c->timer);
    else
        uv_timer_start(&c->timer, timer_on_fire, (uint64_t)timeout_ms, 0);
    return 0;
}

static void sock_on_poll(uv_poll_t *p, int status, int events)
{
    struct http_sock *s = container_of(p, struct http_sock, poll);
    struct http_client *c = s->c;
    int flags = 0;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE)
        flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE)
        flags |= CURL_CSELECT_OUT;
    int running;
    curl_multi_socket_action(c->multi, s->fd, flags, &running);
    check_done(c);
}

static int multi_on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    struct http_client *c = userp;
    struct http_sock *s = socketp;
    if (c->closing)
        return 0;
    if (what == CURL_POLL_REMOVE) {
        if (s != NULL) {
            curl_multi_assign(c->multi, fd, NULL);
            sock_unlink_close(c, s);
        }
        return 0;
    }
    if (s == NULL) {
        s = isoprof_calloc(1, sizeof(*s));
        if (s == NULL)
            return -1;
        if (uv_poll_init_socket(c->loop, &s->poll, fd) != 0) {
            isoprof_free(s);
            return -1;
        }
        s->fd = fd;
        s->c = c;
        s->next = c->socks;
        c->socks = s;
        curl_multi_assign(c->multi, fd, s);
    }
    int ev = 0;
    if (what & CURL_POLL_IN)
        ev |= UV_READABLE;
    if (what & CURL_POLL_OUT)
        ev |= UV_WRITABLE;
    uv_poll_start(&s->poll, ev, sock_on_poll);
    return 0;
}

int http_client_init(uv_loop_t *loop, struct http_client **out)
{
    if (!curl_global_done) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
            return ISOPROF_ECURL;
        curl_global_done = 1;
    }
    struct http_client *c = isoprof_calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->loop = loop;
    c->multi = curl_multi_init();
    if (c->multi == NULL)
        goto fail_multi;
    uv_timer_init(loop, &c->timer);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, multi_on_socket);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, multi_on_timer);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    *out = c;
    return 0;

fail_multi:
    isoprof_free(c);
    return -ENOMEM;
}

static size_t req_on_write(char *ptr, size_t size, size_t nmemb, void *userp)
{
    struct http_req *r = userp;
    size_t n = size * nmemb;
    size_t keep = r->body.max - r->body.len; /* len never passes max */
    if (keep > n)
        keep = n;
    if (keep < n && !r->drop_excess) {
        r->too_big = 1;
        return 0; /* makes libcurl abort the transfer */
    }
    if (keep > 0 && isoprof_buf_append(&r->body, ptr, keep) != 0)
        return 0; /* out of memory: abort the transfer */
    if (keep < n) {
        r->dropped += n - keep;
        if (r->dropped > HTTP_DROP_MAX) {
            r->cut = 1;
            return 0; /* enough read: the code is the answer */
        }
    }
    return n;
}

static size_t req_on_header(char *ptr, size_t size, size_t nmemb, void *userp)
{
    struct http_req *r = userp;
    size_t n = size * nmemb;
    static const char name[] = "retry-after:";
    if (n >= sizeof(name) - 1 && strncasecmp(ptr, name, sizeof(name) - 1) == 0) {
        r->retry_after_seen = 1;
    } else if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0) {
        r->retry_after_seen = 0; /* a new answer (after a 100 Continue) */
        r->head_done = 0;
    } else if ((n == 2 && ptr[0] == '\r' && ptr[1] == '\n') || (n == 1 && ptr[0] == '\n')) {
        /* The blank line that ends a head: a final answer's, unless 1xx. */
        long code = 0;
        if (curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code >= 200)
            r->head_done = 1;
    }
    return n;
}

static int method_ok(const char *m)
{
    if (*m == '\0' || strlen(m) > 16)
        return 0;
    for (; *m; m++)
        if (*m < 'A' || *m > 'Z')
            return 0;
    return 1;
}

static int req_start(struct http_client *c, const char *url, const struct http_opts *o,
                     struct http_req *r, struct http_req **out)
{
    r->c = c;
    isoprof_buf_init(&r->body, o->max_body);
    r->easy = curl_easy_init();
    if (r->easy == NULL) {
        isoprof_free(r);
        return -ENOMEM;
    }
    CURL *e = r->easy;
    for (size_t i = 0; i < o->nheaders; i++) {
        struct curl_slist *l = curl_slist_append(r->headers, o->headers[i]);
        if (l == NULL) {
            curl_slist_free_all(r->headers);
            curl_easy_cleanup(e);
            isoprof_free(r);
            return -ENOMEM;
        }
        r->headers = l;
    }
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, req_on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, req_on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)o->timeout_ms);
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, o->allow_https ? "http,https" : "http");
    if (!r->drop_excess)
        curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)o->max_body);
    if (o->body != NULL) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, o->body);
    }
    if (o->method != NULL)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, o->method);
    if (r->headers != NULL)
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    if (o->ca_file != NULL)
        curl_easy_setopt(e, CURLOPT_CAINFO, o->ca_file);
    if (o->insecure) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (o->userpwd != NULL) {
        curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(e, CURLOPT_USERPWD, o->userpwd);
    }
    if (curl_multi_add_handle(c->multi, e) != CURLM_OK) {
        curl_slist_free_all(r->headers);
        curl_easy_cleanup(e);
        isoprof_free(r);
        return ISOPROF_ECURL;
    }
    r->next = c->reqs;
    if (c->reqs)
        c->reqs->prev = r;
    c->reqs = r;
    if (out)
        *out = r;
    return 0;
}

int http_get(struct http_client *c, const char *url, size_t max_body, uint64_t timeout_ms,
             http_done_cb done_cb, void *arg, struct http_req **out)
{
    struct http_req *r = isoprof_calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->cb = done_cb;
    r->arg = arg;
    struct http_opts o = {.max_body = max_body, .timeout_ms = timeout_ms};
    return req_start(c, url, &o, r, out);
}

int http_request(struct http_client *c, const char *url, const struct http_opts *o,
                 http_resp_cb done_cb, void *arg, struct http_req **out)
{
    if (c == NULL || url == NULL || o == NULL || done_cb == NULL ||
        (o->method != NULL && !method_ok(o->method)) || (o->nheaders > 0 && o->headers == NULL))
        return -EINVAL;
    for (size_t i = 0; i < o->nheaders; i++)
        if (o->headers[i] == NULL)
            return -EINVAL;
    struct http_req *r = isoprof_calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->resp_cb = done_cb;
    r->arg = arg;
    r->drop_excess = 1;
    return req_start(c, url, o, r, out);
}

void http_cancel(struct http_req *r)
{
    req_unlink(r);
    req_free(r);
}

static void timer_on_close(uv_handle_t *h)
{
    struct http_client *c = container_of((uv_timer_t *)h, struct http_client, timer);
    c->pending_closes--;
    client_maybe_free(c);
}

void http_client_close(struct http_client *c)
{
    while (c->reqs)
        http_cancel(c->reqs);
    c->closing = 1;
    curl_multi_cleanup(c->multi);
    c->multi = NULL;
    while (c->socks)
        sock_unlink_close(c, c->socks);
    c->pending_closes++;
    uv_close((uv_handle_t *)&c->timer, timer_on_close);
}

/*
 * test_loopback.c - ws.c and cdp.c against a scripted WebSocket server on
 * 127.0.0.1 (port 0), written here on libuv.
 *
 * The server parses every frame the client sends and counts what it saw,
 * so each test can assert that client frames were masked, whole (FIN) and
 * only text, close or pong. Each test builds its own loop, lets the
 * client's on_close shut the server down, and ends with uv_loop_close()
 * == 0, so a leaked handle fails the test. A watchdog timer ends a test
 * that would otherwise hang.
 */
#include "base.h"
#include "cdp.h"
#include "test.h"
#include "ws.h"

#include <errno.h>
#include <yajl/yajl_tree.h>

/* --- the scripted server --- */

struct srv;
struct sconn;
typedef void (*srv_upgrade_fn)(struct sconn *c);
typedef void (*srv_text_fn)(struct sconn *c, const char *msg, size_t len);

struct sconn {
    uv_tcp_t tcp;
    struct srv *sv;
    struct sconn *next;
    int index; /* 0 for the first connection */
    int closing;
    char req[8192];
    size_t req_len;
    int got_request;
    uint8_t *rx;
    size_t rx_len, rx_cap;
};

struct srv {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int started, shut;
    int port;
    struct sconn *conns;
    int nconn;
    char host[128], reqline[256], version[16];
    srv_upgrade_fn on_upgrade; /* NULL: answer with a proper 101 */
    srv_text_fn on_text;
    int answer_close; /* answer a client close with a close and shut down */
    /* what clients sent */
    int frames, unmasked, nonfin, pings, pongs, texts, closes, others;
    uint8_t pong[125];
    size_t pong_len;
    int close_code;
    uint8_t masks[64][4];
    int nmasks;
    int eofs;
    void *user;
};

struct swrite {
    uv_write_t req;
    uv_buf_t buf;
    char data[];
};

static void srv_on_write(uv_write_t *req, int status)
{
    (void)status;
    isoprof_free(container_of(req, struct swrite, req));
}

static void srv_send(struct sconn *c, const void *data, size_t len)
{
    if (c->closing)
        return;
    struct swrite *w = isoprof_malloc(sizeof(*w) + len);
    if (w == NULL)
        abort();
    memcpy(w->data, data, len);
    w->buf = uv_buf_init(w->data, (unsigned)len);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &w->buf, 1, srv_on_write) != 0)
        isoprof_free(w);
}

static void srv_send_str(struct sconn *c, const char *s)
{
    srv_send(c, s, strlen(s));
}

static size_t hdr(uint8_t *out, int fin, int op, uint64_t n)
{
    size_t h = 0;
    out[h++] = (uint8_t)((fin ? 0x80 : 0) | op);
    if (n < 126) {
        out[h++] = (uint8_t)n;
    } else if (n < 65536) {
        out[h++] = 126;
        out[h++] = (uint8_t)(n >> 8);
        out[h++] = (uint8_t)n;
    } else {
        out[h++] = 127;
        for (int i = 7; i >= 0; i--)
            out[h++] = (uint8_t)(n >> (8 * i));
    }
    return h;
}

static void srv_send_frame(struct sconn *c, int fin, int op, const void *p, size_t n)
{
    uint8_t *b = isoprof_malloc(n + 14);
    if (b == NULL)
        abort();
    size_t h = hdr(b, fin, op, n);
    memcpy(b + h, p, n);
    srv_send(c, b, h + n);
    isoprof_free(b);
}

static void sconn_on_close(uv_handle_t *h)
{
    struct sconn *c = h->data;
    struct srv *sv = c->sv;
    for (struct sconn **pp = &sv->conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    isoprof_free(c->rx);
    isoprof_free(c);
}

static void sconn_close(struct sconn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, sconn_on_close);
}

static void sconn_on_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    struct sconn *c = req->data;
    isoprof_free(req);
    sconn_close(c);
}

/* Close after what was written has gone out. */
static void sconn_finish(struct sconn *c)
{
    if (c->closing)
        return;
    uv_shutdown_t *req = isoprof_malloc(sizeof(*req));
    if (req == NULL)
        abort();
    req->data = c;
    if (uv_shutdown(req, (uv_stream_t *)&c->tcp, sconn_on_shutdown) != 0) {
        isoprof_free(req);
        sconn_close(c);
    }
}

static void srv_default_upgrade(struct sconn *c);

static void header_of(const char *req, const char *name, char *out, size_t cap)
{
    out[0] = '\0';
    size_t nl = strlen(name);
    for (const char *p = strstr(req, "\r\n"); p; p = strstr(p + 2, "\r\n")) {
        if (strncasecmp(p + 2, name, nl) == 0 && p[2 + nl] == ':') {
            const char *v = p + 3 + nl;
            while (*v == ' ')
                v++;
            const char *e = strstr(v, "\r\n");
            size_t n = e ? (size_t)(e - v) : strlen(v);
            if (n >= cap)
                n = cap - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return;
        }
    }
}

static void sconn_frames(struct sconn *c)
{
    struct srv *sv = c->sv;
    while (!c->closing && c->rx_len >= 2) {
        uint8_t *b = c->rx;
        int fin = b[0] >> 7, op = b[0] & 15, masked = b[1] >> 7;
        uint64_t len = b[1] & 127;
        size_t h = 2;
        if (len == 126) {
            if (c->rx_len < 4)
                return;
            len = (uint64_t)b[2] << 8 | b[3];
            h = 4;
        } else if (len == 127) {
            if (c->rx_len < 10)
                return;
            len = 0;
            for (int i = 0; i < 8; i++)
                len = len << 8 | b[2 + i];
            h = 10;
        }
        if (masked)
            h += 4;
        if (c->rx_len < h + len)
            return;
        uint8_t *p = b + h;
        if (masked) {
            for (uint64_t i = 0; i < len; i++)
                p[i] ^= b[h - 4 + i % 4];
            if (sv->nmasks < 64)
                memcpy(sv->masks[sv->nmasks++], b + h - 4, 4);
        }
        sv->frames++;
        sv->unmasked += !masked;
        sv->nonfin += !fin;
        switch (op) {
        case 1: {
            sv->texts++;
            char *m = isoprof_malloc((size_t)len + 1);
            if (m == NULL)
                abort();
            memcpy(m, p, (size_t)len);
            m[len] = '\0';
            if (sv->on_text)
                sv->on_text(c, m, (size_t)len);
            isoprof_free(m);
            break;
        }
        case 8:
            sv->closes++;
            sv->close_code = len >= 2 ? (p[0] << 8 | p[1]) : -1;
            if (sv->answer_close) {
                srv_send_frame(c, 1, 8, p, len >= 2 ? 2 : 0);
                sconn_finish(c);
            }
            break;
        case 9:
            sv->pings++;
            break;
        case 10:
            sv->pongs++;
            sv->pong_len = (size_t)len;
            memcpy(sv->pong, p, len < 125 ? (size_t)len : 125);
            break;
        default:
            sv->others++;
        }
        b = c->rx;
        memmove(b, b + h + len, c->rx_len - (h + len));
        c->rx_len -= (size_t)(h + len);
    }
}

static void sconn_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h;
    char *p = isoprof_malloc(suggested);
    *buf = uv_buf_init(p, p ? (unsigned)suggested : 0);
}

static void rx_append(struct sconn *c, const char *d, size_t n)
{
    if (c->rx_len + n + 1 > c->rx_cap) {
        size_t cap = (c->rx_len + n + 1) * 2;
        uint8_t *nb = isoprof_realloc(c->rx, cap);
        if (nb == NULL)
            abort();
        c->rx = nb;
        c->rx_cap = cap;
    }
    memcpy(c->rx + c->rx_len, d, n);
    c->rx_len += n;
}

static void sconn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct sconn *c = s->data;
    struct srv *sv = c->sv;
    if (nread < 0) {
        sv->eofs++;
        sconn_close(c);
    } else if (nread > 0 && !c->got_request) {
        size_t take = (size_t)nread;
        if (take > sizeof(c->req) - 1 - c->req_len)
            take = sizeof(c->req) - 1 - c->req_len;
        memcpy(c->req + c->req_len, buf->base, take);
        c->req_len += take;
        c->req[c->req_len] = '\0';
        char *end = strstr(c->req, "\r\n\r\n");
        if (end != NULL) {
            c->got_request = 1;
            size_t hl = (size_t)(end - c->req) + 4;
            const char *eol = strstr(c->req, "\r\n");
            snprintf(sv->reqline, sizeof(sv->reqline), "%.*s", (int)(eol - c->req), c->req);
            header_of(c->req, "Host", sv->host, sizeof(sv->host));
            header_of(c->req, "Sec-WebSocket-Version", sv->version, sizeof(sv->version));
            size_t before = c->req_len - take;
            if (before + take > hl)
                rx_append(c, buf->base + (hl - before), before + take - hl);
            (sv->on_upgrade ? sv->on_upgrade : srv_default_upgrade)(c);
            sconn_frames(c);
        }
    } else if (nread > 0) {
        rx_append(c, buf->base, (size_t)nread);
        sconn_frames(c);
    }
    isoprof_free(buf->base);
}

static void srv_on_connection(uv_stream_t *l, int status)
{
    struct srv *sv = l->data;
    if (status != 0)
        return;
    struct sconn *c = isoprof_calloc(1, sizeof(*c));
    if (c == NULL)
        abort();
    c->sv = sv;
    c->index = sv->nconn++;
    uv_tcp_init(sv->loop, &c->tcp);
    c->tcp.data = c;
    c->next = sv->conns;
    sv->conns = c;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0) {
        sconn_close(c);
        return;
    }
    uv_read_start((uv_stream_t *)&c->tcp, sconn_on_alloc, sconn_on_read);
}

static void srv_response_101(struct sconn *c, char *out, size_t cap)
{
    char key[64], acc[29];
    header_of(c->req, "Sec-WebSocket-Key", key, sizeof(key));
    ws_accept_key(key, acc);
    snprintf(out, cap,
             "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Accept: %s\r\n\r\n",
             acc);
}

static void srv_default_upgrade(struct sconn *c)
{
    char r[256];
    srv_response_101(c, r, sizeof(r));
    srv_send_str(c, r);
}

static void srv_start(struct srv *sv, uv_loop_t *loop)
{
    sv->loop = loop;
    uv_tcp_init(loop, &sv->listener);
    sv->listener.data = sv;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    int rc = uv_tcp_bind(&sv->listener, (const struct sockaddr *)&a, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&sv->listener, 8, srv_on_connection);
    if (rc != 0) {
        fprintf(stderr, "server: %s\n", uv_strerror(rc));
        abort();
    }
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    uv_tcp_getsockname(&sv->listener, (struct sockaddr *)&ss, &len);
    sv->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    sv->started = 1;
}

/* No client frame may be unmasked, fragmented, or a ping. */
static void check_client_frames(const struct srv *sv)
{
    CHECK_EQ_INT(sv->unmasked, 0);
    CHECK_EQ_INT(sv->nonfin, 0);
    CHECK_EQ_INT(sv->pings, 0);
    CHECK_EQ_INT(sv->others, 0);
    /* masks come from a random source: no two alike */
    for (int i = 0; i < sv->nmasks; i++)
        for (int j = i + 1; j < sv->nmasks; j++)
            CHECK(memcmp(sv->masks[i], sv->masks[j], 4) != 0);
}

/* --- one test's world: a loop, the server, a client, a watchdog --- */

struct tctx {
    uv_loop_t loop;
    struct srv sv;
    uv_timer_t watchdog;
    int fired;
    struct ws_opts opts;
    struct ws_client *ws;
    int opened, open_status, closed, close_status;
    int nmsg;
    char *msg[16];
    size_t len[16];
    char why[200];
    uint64_t t0, t_close;
    void (*on_open_hook)(struct tctx *t);
    void (*on_msg_hook)(struct tctx *t);
    void (*on_close_hook)(struct tctx *t); /* replaces the default: shut down */
    /* cdp */
    struct cdp_session *cdp;
    struct cdp_stats st;
    int calls_done, calls_expected;
    int nevents;
    char last_event[64];
    int order; /* close callback saw every reply first */
    void *user;
};

/* The client is done. The server stops listening; its connections close
 * when they read the client's EOF, so whatever the client sent last is
 * still counted. */
static void t_finish(struct tctx *t)
{
    if (t->sv.started && !t->sv.shut) {
        t->sv.shut = 1;
        uv_close((uv_handle_t *)&t->sv.listener, NULL);
    }
    if (!uv_is_closing((uv_handle_t *)&t->watchdog))
        uv_close((uv_handle_t *)&t->watchdog, NULL);
}

static void t_on_watchdog(uv_timer_t *tm)
{
    struct tctx *t = tm->data;
    t->fired = 1;
    fprintf(stderr, "watchdog fired\n");
    if (t->ws)
        ws_close(t->ws);
    if (t->cdp)
        cdp_close(t->cdp);
    if (!t->ws && !t->cdp)
        t_finish(t);
}

static void t_init(struct tctx *t, int with_server)
{
    memset(t, 0, sizeof(*t));
    uv_loop_init(&t->loop);
    if (with_server)
        srv_start(&t->sv, &t->loop);
    t->sv.user = t;
    uv_timer_init(&t->loop, &t->watchdog);
    t->watchdog.data = t;
    uv_timer_start(&t->watchdog, t_on_watchdog, 10000, 0);
    t->t0 = uv_now(&t->loop);
}

static void t_run(struct tctx *t)
{
    uv_run(&t->loop, UV_RUN_DEFAULT);
    CHECK(!t->fired);
    CHECK_EQ_INT(uv_loop_close(&t->loop), 0);
}

static void t_free(struct tctx *t)
{
    for (int i = 0; i < t->nmsg && i < 16; i++)
        ws_msg_free(t->msg[i]);
    t->nmsg = 0;
}

static void c_on_open(struct ws_client *ws, int status, void *arg)
{
    (void)ws;
    struct tctx *t = arg;
    t->opened++;
    t->open_status = status;
    if (status == 0 && t->on_open_hook)
        t->on_open_hook(t);
}

static void c_on_message(struct ws_client *ws, char *data, size_t len, void *arg)
{
    (void)ws;
    struct tctx *t = arg;
    CHECK_EQ_INT(data[len], 0);
    if (t->nmsg < 16) {
        t->msg[t->nmsg] = data;
        t->len[t->nmsg] = len;
    } else {
        ws_msg_free(data);
    }
    t->nmsg++;
    if (t->on_msg_hook)
        t->on_msg_hook(t);
}

static void c_on_close(struct ws_client *ws, int status, void *arg)
{
    struct tctx *t = arg;
    t->closed++;
    t->close_status = status;
    t->t_close = uv_now(&t->loop);
    snprintf(t->why, sizeof(t->why), "%s", ws_last_error(ws));
    ws_close(ws); /* harmless from inside on_close */
    t->ws = NULL;
    if (t->on_close_hook)
        t->on_close_hook(t);
    else
        t_finish(t);
}

static int t_connect(struct tctx *t, const char *host, const char *path)
{
    return ws_connect(&t->loop, host, (uint16_t)t->sv.port, path, &t->opts, c_on_open, c_on_message,
                      c_on_close, t, &t->ws);
}

/* --- WebSocket-level tests --- */

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 7 + 3);
}

#define BIG_LEN ((size_t)5 << 20)

static void echo_upgrade(struct sconn *c)
{
    /* the 101 and a first message in one write: the client must find the
     * frame right after the head */
    char r[512];
    srv_response_101(c, r, sizeof(r));
    uint8_t b[600];
    size_t n = strlen(r);
    memcpy(b, r, n);
    n += hdr(b + n, 1, 1, 5);
    memcpy(b + n, "first", 5);
    srv_send(c, b, n + 5);
}

static void echo_text(struct sconn *c, const char *msg, size_t len)
{
    CHECK_EQ_INT(len, 5);
    CHECK_STR(msg, "hello");
    srv_send_frame(c, 0, 1, "fr", 2);
    srv_send_frame(c, 1, 9, "pp", 2);
    srv_send_frame(c, 0, 0, "ag", 2);
    srv_send_frame(c, 1, 0, "ment", 4);
    srv_send_frame(c, 1, 1, "", 0);
    uint8_t *big = isoprof_malloc(BIG_LEN);
    REQUIRE(big != NULL);
    for (size_t i = 0; i < BIG_LEN; i++)
        big[i] = pattern(i);
    srv_send_frame(c, 1, 2, big, BIG_LEN);
    isoprof_free(big);
}

static void echo_on_open(struct tctx *t)
{
    CHECK_EQ_INT(ws_send_text(t->ws, "hello", 5), 0);
}

static void echo_on_msg(struct tctx *t)
{
    if (t->nmsg == 4) {
        ws_close(t->ws);
        ws_close(t->ws);
        CHECK_EQ_INT(ws_send_text(t->ws, "late", 4), -ENOTCONN);
    }
}

TEST(ws_echo_fragmented_big)
{
    struct tctx t;
    t_init(&t, 1);
    t.sv.on_upgrade = echo_upgrade;
    t.sv.on_text = echo_text;
    t.sv.answer_close = 1;
    t.on_open_hook = echo_on_open;
    t.on_msg_hook = echo_on_msg;
    REQUIRE(t_connect(&t, "127.0.0.1", "/ws/abc") == 0);
    CHECK_EQ_INT(ws_send_text(t.ws, "x", 1), -ENOTCONN); /* not open yet */
    t_run(&t);
    CHECK_EQ_INT(t.opened, 1);
    CHECK_EQ_INT(t.open_status, 0);
    CHECK_EQ_INT(t.closed, 1);
    CHECK_EQ_INT(t.close_status, 0);
    CHECK_EQ_INT(t.nmsg, 4);
    if (t.nmsg == 4) {
        CHECK_STR(t.msg[0], "first");
        CHECK_STR(t.msg[1], "fragment");
        CHECK_EQ_INT(t.len[2], 0);
        CHECK_EQ_INT(t.len[3], BIG_LEN);
        int same = t.len[3] == BIG_LEN;
        for (size_t i = 0; same && i < BIG_LEN; i++)
            same = (uint8_t)t.msg[3][i] == pattern(i);
        CHECK(same);
    }
    char host[64];
    snprintf(host, sizeof(host), "127.0.0.1:%d", t.sv.port);
    CHECK_STR(t.sv.host, host);
    CHECK_STR(t.sv.reqline, "GET /ws/abc HTTP/1.1");
    CHECK_STR(t.sv.version, "13");
    CHECK_EQ_INT(t.sv.texts, 1);
    CHECK_EQ_INT(t.sv.closes, 1);
    CHECK_EQ_INT(t.sv.close_code, 1000);
    CHECK_EQ_INT(t.sv.pongs, 1); /* the answer to the server's ping */
    CHECK(t.sv.pong_len == 2 && memcmp(t.sv.pong, "pp", 2) == 0);
    check_client_frames(&t.sv);
    t_free(&t);
}

static void server_close_upgrade(struct sconn *c)
{
    srv_default_upgrade(c);
    srv_send_frame(c, 1, 8, "\003\351bye", 5); /* 1001 "bye" */
}

TEST(ws_server_closes)
{
    struct tctx t;
    t_init(&t, 1);
    t.sv.on_upgrade = server_close_upgrade;
    REQUIRE(t_connect(&t, "127.0.0.1", "/x") == 0);
    t_run(&t);
    CHECK_EQ_INT(t.open_status, 0);
    CHECK_EQ_INT(t.close_status, 0);
    CHECK(strstr(t.why, "1001") != NULL);
    CHECK_EQ_INT(t.sv.closes, 1);
    CHECK_EQ_INT(t.sv.close_code, 1001); /* echoed */
    check_client_frames(&t.sv);
}

static void big_upgrade(struct sconn *c)
{
    if (c->index > 0) {
        srv_default_upgrade(c);
        srv_send_frame(c, 1, 1, "ok", 2);
        return;
    }
    srv_default_upgrade(c);
    size_t n = (size_t)2 << 20;
    char *p = isoprof_malloc(n);
    REQUIRE(p != NULL);
    memset(p, 'b', n);
    srv_send_frame(c, 1, 1, p, n);
    isoprof_free(p);
}

static void second_on_msg(struct tctx *t)
{
    ws_close(t->ws);
}

static void over_cap_on_close(struct tctx *t)
{
    /* the first session died of the cap; the process carries on */
    CHECK_EQ_INT(t->close_status, ISOPROF_ETOOBIG);
    CHECK_EQ_INT(t->nmsg, 0);
    CHECK(strstr(t->why, "cap") != NULL);
    t->on_close_hook = NULL;
    t->on_msg_hook = second_on_msg;
    t->opts.max_message = 0;
    CHECK_EQ_INT(t_connect(t, "127.0.0.1", "/x"), 0);
}

TEST(ws_over_cap)
{
    struct tctx t;
    t_init(&t, 1);
    t.sv.on_upgrade = big_upgrade;
    t.sv.answer_close = 1;
    t.opts.max_message = 1u << 20;
    t.on_close_hook = over_cap_on_close;
    REQUIRE(t_connect(&t, "127.0.0.1", "/x") == 0);
    t_run(&t);
    CHECK_EQ_INT(t.closed, 2);
    CHECK_EQ_INT(t.close_status, 0);
    CHECK_EQ_INT(t.nmsg, 1);
    if (t.nmsg == 1)
        CHECK_STR(t.msg[0], "ok");
    CHECK_EQ_INT(t.sv.nconn, 2);
    check_client_frames(&t.sv);
    t_free(&t);
}

static void huge_header_upgrade(struct sconn *c)
{
    srv_default_upgrade(c);
    uint8_t b[200];
    size_t n = hdr(b, 1, 2, 300000000u);
    memset(b + n, 'z', 100);
    srv_send(c, b, n + 100);
    /* and the connection stays open: the client must act on its own */
}

TEST(ws_huge_length_header)
{
    struct tctx t;
    t_init(&t, 1);
    t.sv.on_upgrade = huge_header_upgrade;
    t.opts.max_message = 64u << 20;
    REQUIRE(t_connect(&t, "127.0.0.1", "/x") == 0);
    t_run(&t);
    CHECK_EQ_INT(t.open_status, 0);
    CHECK_EQ_INT(t.close_status, ISOPROF_ETOOBIG);
    CHECK_EQ_INT(t.nmsg, 0);
    CHECK(t.t_close - t.t0 < 2000);
}

static void stalled_message_upgrade(struct sconn *c)
{
    srv_default_upgrade(c);
    uint8_t b[64];
    size_t n = hdr(b, 1, 1, 1u << 20);
    memset(b + n, 's', 32);
    srv_send(c, b, n + 32);
    /* and nothing more: the message never ends, the connection stays */
}

/* A message that stops half way has a deadline: its bytes (and the
 * budget's) are not held for as long as the peer likes. */
TEST(ws_stalled_message)
{
    struct tctx t;
    t_init(&t, 1);
    t.sv.on_upgrade = stalled_message_upgrade;
    t.opts.message_timeout_ms = 300;
    REQUIRE(t_connect(&t, "127.0.0.1", "/x") == 0);
    t_run(&t);
    CHECK_EQ_INT(t.open_status, 0);
    CHECK_EQ_INT(t.close_status, ISOPROF_ETIMEDOUT);
    CHECK_EQ_INT(t.nmsg, 0);
    CHECK(strstr(t.why, "not complete") != NULL);
    CHECK(t.t_close - t.t0 >= 300);
}

static void truncated_upgrade(struct sconn *c)
{
    srv_default_upgrade(c);
    uint8_t b[64];
    size_t n = hdr(b, 1, 1, 1000);
    memset(b + n, 't', 10);
    srv_send(c, b, n + 10);
    sconn_finish(c);
}

TEST(ws_truncated_frame)
{
    struct tctx t;
    t_init(&t, 1);
    t.sv.on_upgrade = truncated_upgrade;
    REQUIRE(t_connect(&t, "127.0.0.1", "/x") == 0);
    t_run(&t);
    CHECK_EQ_INT(t.open_status, 0);
    CHECK_EQ_INT(t.close_status, ISOPROF_ECLOSED);
    CHECK_EQ_INT(t.nmsg, 0);
    CHECK(strstr(t.why, "dropped") != NULL);
}

static const char *bad_answer;
static int bad_answer_close;

static void bad_upgrade(struct sconn *c)
{
    srv_send(c, bad_answer, strlen(bad_answer));
    if (bad_answer_close)
        sconn_finish(c);
}

static void run_bad_answer(const char *answer, int close_after, int want)
{
    struct tctx t;
    t_init(&t, 1);
    bad_answer = answer;
    bad_answer_close = close_after;
    t.sv.on_upgrade = bad_upgrade;
    if (t_connect(&t, "127.0.0.1", "/x") != 0) {
        CHECK(!"connect");
        t_finish(&t);
    }
    t_run(&t);
    CHECK_EQ_INT(t.opened, 1);
    CHECK_EQ_INT(t.open_status, want);
    CHECK_EQ_INT(t.closed, 1);
    CHECK_EQ_INT(t.close_status, want);
    CHECK(t.why[0] != '\0');
    CHECK_EQ_INT(t.nmsg, 0);
}

TEST(ws_bad_upgrade_answers)
{
    run_bad_answer("garbage \x01\xff\xfe bytes\r\n\r\n", 0, ISOPROF_EWS);
    run_bad_answer("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", 0, ISOPROF_EHTTP);
    run_bad_answer("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: "
                   "Upgrade\r\nSec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n\r\n",
                   0, ISOPROF_EWS);
    run_bad_answer("HTTP/1.1 101 Swi", 1, ISOPROF_ECLOSED);
    static char endless[20000];
    memset(endless, 'A', sizeof(endless) - 1);
    run_bad_answer(endless, 0, ISOPROF_EWS);
}

static void silent_upgrade(struct sconn *c)
{
    (void)c;
}

TEST(ws_handshake_timeout)
{
    struct tctx t;
    t_init(&t, 1);
    t.sv.on_upgrade = silent_upgrade;
    t.opts.handshake_timeout_ms = 200;
    REQUIRE(t_connect(&t, "127.0.0.1", "/x") == 0);
    t_run(&t);
    CHECK_EQ_INT(t.open_status, ISOPROF_ETIMEDOUT);
    CHECK_EQ_INT(t.close_status, ISOPROF_ETIMEDOUT);
    CHECK(t.t_close - t.t0 >= 190);
    CHECK(t.t_close - t.t0 < 3000);
}

TEST(ws_connection_refused)
{
    struct tctx t;
    t_init(&t, 0);
    /* a port that was free a moment ago */
    uv_tcp_t l;
    uv_tcp_init(&t.loop, &l);
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    REQUIRE(uv_tcp_bind(&l, (const struct sockaddr *)&a, 0) == 0);
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    uv_tcp_getsockname(&l, (struct sockaddr *)&ss, &len);
    t.sv.port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    uv_close((uv_handle_t *)&l, NULL);
    uv_run(&t.loop, UV_RUN_NOWAIT);
    REQUIRE(t_connect(&t, "127.0.0.1", "/x") == 0);
    t_run(&t);
    CHECK_EQ_INT(t.opened, 1);
    CHECK_EQ_INT(t.open_status, -ECONNREFUSED);
    CHECK_EQ_INT(t.close_status, -ECONNREFUSED);
}

static void limits_on_open(struct tctx *t)
{
    size_t n = WS_MAX_QUEUED + 1;
    char *p = isoprof_calloc(1, n);
    REQUIRE(p != NULL);
    CHECK_EQ_INT(ws_send_text(t->ws, p, n), -ENOBUFS);
    CHECK_EQ_INT(ws_send_text(t->ws, p, 1000), 0); /* the connection is still fine */
    isoprof_free(p);
    ws_close(t->ws);
}

TEST(ws_send_limits_and_localhost)
{
    struct tctx t;
    t_init(&t, 1);
    t.sv.answer_close = 1;
    t.on_open_hook = limits_on_open;
    REQUIRE(t_connect(&t, "localhost", "/x") == 0);
    t_run(&t);
    CHECK_EQ_INT(t.close_status, 0);
    char host[64];
    snprintf(host, sizeof(host), "localhost:%d", t.sv.port);
    CHECK_STR(t.sv.host, host);
    CHECK_EQ_INT(t.sv.texts, 1);
    check_client_frames(&t.sv);
}

TEST(ws_close_before_open)
{
    struct tctx t;
    t_init(&t, 1);
    t.sv.on_upgrade = silent_upgrade;
    REQUIRE(t_connect(&t, "127.0.0.1", "/x") == 0);
    ws_close(t.ws);
    ws_close(t.ws);
    CHECK_EQ_INT(t.closed, 0); /* asynchronous */
    t_run(&t);
    CHECK_EQ_INT(t.opened, 0);
    CHECK_EQ_INT(t.closed, 1);
    CHECK_EQ_INT(t.close_status, ISOPROF_ECLOSED);
}

TEST(ws_bad_arguments)
{
    struct tctx t;
    t_init(&t, 0);
    struct ws_client *ws = NULL;
#define BAD(host, path)                                                                            \
    CHECK_EQ_INT(                                                                                  \
        ws_connect(&t.loop, host, 9229, path, NULL, c_on_open, c_on_message, c_on_close, &t, &ws), \
        -EINVAL)
    BAD("example.com", "/x");
    BAD("127.0.0.1.", "/x");
    BAD("1.2.3", "/x");
    BAD("[127.0.0.1]", "/x");
    BAD("fe80::1%lo", "/x");
    BAD("", "/x");
    BAD("127.0.0.1", "x");
    BAD("127.0.0.1", "/a b");
    BAD("127.0.0.1", "/a\r\nX: y");
    BAD("127.0.0.1", NULL);
    CHECK_EQ_INT(
        ws_connect(&t.loop, "127.0.0.1", 1, "/x", NULL, c_on_open, NULL, c_on_close, &t, &ws),
        -EINVAL);
#undef BAD
    CHECK(ws == NULL);
    /* IPv6 literals are accepted, bracketed or not (abandoned at once) */
    int rc =
        ws_connect(&t.loop, "[::1]", 9, "/x", NULL, c_on_open, c_on_message, c_on_close, &t, &t.ws);
    CHECK(rc != -EINVAL);
    if (rc == 0)
        ws_close(t.ws);
    else
        t_finish(&t); /* no IPv6 here: the quiet close still has to run */
    t_run(&t);
    CHECK_EQ_INT(t.closed, rc == 0 ? 1 : 0);
    CHECK_EQ_INT(t.opened, 0);
}

/* --- CDP-level tests --- */

static yajl_val jget(yajl_val v, const char *k, yajl_type ty)
{
    const char *path[] = {k, NULL};
    return yajl_tree_get(v, path, ty);
}

static void send_big(struct sconn *c, const char *prefix)
{
    size_t n = (size_t)2 << 20;
    char *p = isoprof_malloc(n + 64);
    REQUIRE(p != NULL);
    size_t pl = strlen(prefix);
    memcpy(p, prefix, pl);
    memset(p + pl, 'x', n);
    memcpy(p + pl + n, "\"}}", 3);
    srv_send_frame(c, 1, 1, p, pl + n + 3);
    isoprof_free(p);
}

static int64_t cdp_srv_last_id;

static void cdp_text(struct sconn *c, const char *msg, size_t len)
{
    (void)len;
    char err[128];
    yajl_val v = yajl_tree_parse(msg, err, sizeof(err));
    REQUIRE(v != NULL);
    yajl_val idv = jget(v, "id", yajl_t_number), mv = jget(v, "method", yajl_t_string),
             pv = jget(v, "params", yajl_t_object);
    CHECK(idv != NULL && mv != NULL && pv != NULL);
    if (!idv || !mv || !pv) {
        yajl_tree_free(v);
        return;
    }
    long long id = YAJL_GET_INTEGER(idv);
    CHECK_EQ_INT(id, cdp_srv_last_id + 1); /* ids count up from 1 */
    cdp_srv_last_id = id;
    const char *m = YAJL_GET_STRING(mv);
    char *r = NULL, pre[64];
    if (strcmp(m, "Runtime.getHeapUsage") == 0) {
        r = isoprof_asprintf("{\"method\":\"Runtime.consoleAPICalled\",\"params\":{\"type\":"
                             "\"log\"}}");
        srv_send_frame(c, 1, 1, r, strlen(r));
        isoprof_free(r);
        r = isoprof_asprintf("{\"id\":%lld,\"result\":{\"usedSize\":1234,\"totalSize\":5678}}", id);
    } else if (strcmp(m, "Test.error") == 0 || strcmp(m, "Test.rawError") == 0) {
        r = isoprof_asprintf("{\"id\":%lld,\"error\":{\"code\":-32000,\"message\":\"No "
                             "recording profiles found\"}}",
                             id);
    } else if (strcmp(m, "Test.rawSmall") == 0) {
        r = isoprof_asprintf("{\"id\":%lld,\"result\":{\"x\":1}}", id);
    } else if (strcmp(m, "Test.big") == 0 || strcmp(m, "Test.bigNoRaw") == 0) {
        snprintf(pre, sizeof(pre), "{\"id\":%lld,\"result\":{\"profile\":\"", id);
        send_big(c, pre);
    } else if (strcmp(m, "Test.bigEvent") == 0) {
        send_big(c, "{\"method\":\"Big.event\",\"params\":{\"p\":\"");
        r = isoprof_asprintf("{\"id\":%lld,\"result\":{}}", id);
    } else if (strcmp(m, "Test.unknownId") == 0) {
        r = isoprof_asprintf("{\"id\":9999,\"result\":{}}");
        srv_send_frame(c, 1, 1, r, strlen(r));
        isoprof_free(r);
        r = isoprof_asprintf("{\"id\":%lld,\"result\":{}}", id);
    } else if (strcmp(m, "Test.junk") == 0) {
        static const char *junk[] = {"[1,2]", "{\"params\":{}}", "{\"id\":\"str\",\"result\":{}}",
                                     "42"};
        for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(junk); i++)
            srv_send_frame(c, 1, 1, junk[i], strlen(junk[i]));
        r = isoprof_asprintf("{\"id\":%lld}", id); /* no result */
    } else if (strcmp(m, "Test.params") == 0) {
        yajl_val a = jget(pv, "a", yajl_t_array);
        CHECK(a != NULL && YAJL_GET_ARRAY(a)->len == 3);
        r = isoprof_asprintf("{\"id\":%lld,\"result\":{\"echo\":%zu}}", id,
                             a ? YAJL_GET_ARRAY(a)->len : 0);
    } else if (strcmp(m, "Test.badJson") == 0) {
        r = isoprof_asprintf("{\"id\":%lld,\"result\":{bad json}", id);
    }
    /* anything else (Test.never, ...) gets no answer */
    if (r != NULL) {
        srv_send_frame(c, 1, 1, r, strlen(r));
        isoprof_free(r);
    }
    yajl_tree_free(v);
}

enum {
    K_HEAP,
    K_ERROR,
    K_RAW_SMALL,
    K_RAW_ERROR,
    K_BIG,
    K_BIG_NORAW,
    K_UNKNOWN_ID,
    K_JUNK,
    K_BIG_EVENT,
    K_NEVER,
    K_PARAMS,
    K_COUNT
};

struct kcall {
    struct tctx *t;
    int kind;
    int done;
    int status;
};

static void k_on_close(struct cdp_session *s, int status, void *arg)
{
    struct tctx *t = arg;
    t->closed++;
    t->close_status = status;
    t->order = t->calls_done == t->calls_expected;
    cdp_get_stats(s, &t->st);
    snprintf(t->why, sizeof(t->why), "%s", cdp_last_error(s));
    cdp_close(s); /* harmless */
    t->cdp = NULL;
    t_finish(t);
}

static void k_on_event(struct cdp_session *s, const char *session, const char *method,
                       yajl_val params, void *arg)
{
    (void)session;
    (void)s;
    struct tctx *t = arg;
    t->nevents++;
    snprintf(t->last_event, sizeof(t->last_event), "%s", method);
    yajl_val ty = jget(params, "type", yajl_t_string);
    CHECK(ty != NULL && strcmp(ty->u.string, "log") == 0);
}

static void k_on_reply(struct cdp_session *s, struct cdp_reply *r, void *arg)
{
    struct kcall *k = arg;
    struct tctx *t = k->t;
    CHECK(!k->done);
    k->done = 1;
    k->status = r->status;
    switch (k->kind) {
    case K_HEAP: {
        CHECK_EQ_INT(r->status, 0);
        yajl_val u = jget(r->result, "usedSize", yajl_t_number);
        CHECK(u != NULL && YAJL_GET_INTEGER(u) == 1234);
        CHECK(r->raw == NULL);
        break;
    }
    case K_ERROR:
    case K_RAW_ERROR:
        CHECK_EQ_INT(r->status, ISOPROF_ECDP);
        CHECK_STR(r->error_message, "No recording profiles found");
        CHECK(r->raw == NULL);
        break;
    case K_RAW_SMALL: {
        CHECK_EQ_INT(r->status, 0);
        CHECK(r->result != NULL);
        REQUIRE(r->raw != NULL);
        CHECK_STR(r->raw + r->raw_len - 1, "}");
        CHECK(strncmp(r->raw, "{\"id\":", 6) == 0);
        char *mine = r->raw; /* take it */
        r->raw = NULL;
        ws_msg_free(mine);
        break;
    }
    case K_BIG:
        CHECK_EQ_INT(r->status, 0);
        REQUIRE(r->raw != NULL);
        CHECK(r->raw_len > CDP_PARSE_MAX);
        CHECK_EQ_INT(r->raw[r->raw_len], 0);
        CHECK(strstr(r->raw, "\"profile\"") != NULL);
        break; /* not taken: the session frees it */
    case K_BIG_NORAW:
        CHECK_EQ_INT(r->status, ISOPROF_ETOOBIG);
        CHECK(r->raw == NULL && r->error_message != NULL);
        break;
    case K_JUNK:
        /* No "result" is a success without one (workerd answers so). */
        CHECK_EQ_INT(r->status, 0);
        CHECK(r->result == NULL);
        break;
    case K_NEVER:
        CHECK_EQ_INT(r->status, ISOPROF_ETIMEDOUT);
        break;
    case K_PARAMS: {
        CHECK_EQ_INT(r->status, 0);
        yajl_val e = jget(r->result, "echo", yajl_t_number);
        CHECK(e != NULL && YAJL_GET_INTEGER(e) == 3);
        break;
    }
    default:
        CHECK_EQ_INT(r->status, 0);
    }
    if (++t->calls_done == t->calls_expected)
        cdp_close(s);
}

static struct kcall kcalls[K_COUNT];

static void k_on_open(struct cdp_session *s, int status, void *arg)
{
    struct tctx *t = arg;
    t->opened++;
    t->open_status = status;
    if (status != 0)
        return;
    /* refused up front: the callback is never called for these */
    CHECK_EQ_INT(cdp_call(s, "a b", NULL, 0, 0, k_on_reply, NULL), -EINVAL);
    CHECK_EQ_INT(cdp_call(s, "", NULL, 0, 0, k_on_reply, NULL), -EINVAL);
    CHECK_EQ_INT(cdp_call(s, "A.b\"", NULL, 0, 0, k_on_reply, NULL), -EINVAL);
    CHECK_EQ_INT(cdp_call(s, "A.b", "[1]", 0, 0, k_on_reply, NULL), -EINVAL);
    CHECK_EQ_INT(cdp_call(s, "A.b", "{}, \"id\": 5", 0, 0, k_on_reply, NULL), -EINVAL);
    CHECK_EQ_INT(cdp_call(s, "A.b", "{\"a\":", 0, 0, k_on_reply, NULL), -EINVAL);
    CHECK_EQ_INT(cdp_call(s, "A.b", "", 0, 0, k_on_reply, NULL), -EINVAL);
    CHECK_EQ_INT(cdp_call(s, "A.b", NULL, 0, 0x10, k_on_reply, NULL), -EINVAL);
    static const struct {
        const char *method, *params;
        unsigned flags;
        uint64_t timeout;
    } spec[K_COUNT] = {
        [K_HEAP] = {"Runtime.getHeapUsage", NULL, 0, 5000},
        [K_ERROR] = {"Test.error", "{}", 0, 5000},
        [K_RAW_SMALL] = {"Test.rawSmall", NULL, CDP_RAW, 5000},
        [K_RAW_ERROR] = {"Test.rawError", NULL, CDP_RAW, 5000},
        [K_BIG] = {"Test.big", NULL, CDP_RAW, 5000},
        [K_BIG_NORAW] = {"Test.bigNoRaw", NULL, 0, 5000},
        [K_UNKNOWN_ID] = {"Test.unknownId", NULL, 0, 5000},
        [K_JUNK] = {"Test.junk", NULL, 0, 5000},
        [K_BIG_EVENT] = {"Test.bigEvent", NULL, 0, 0},
        [K_NEVER] = {"Test.never", NULL, 0, 200},
        [K_PARAMS] = {"Test.params", " {\"a\":[1,\"two\",{\"b\":null}]} ", 0, 5000},
    };
    for (int i = 0; i < K_COUNT; i++) {
        kcalls[i] = (struct kcall){.t = t, .kind = i};
        int rc = cdp_call(s, spec[i].method, spec[i].params, spec[i].timeout, spec[i].flags,
                          k_on_reply, &kcalls[i]);
        CHECK_EQ_INT(rc, 0);
        if (rc == 0)
            t->calls_expected++;
    }
    CHECK_EQ_INT(t->calls_done, 0); /* never from inside cdp_call */
}

static int k_open(struct tctx *t, size_t max_message)
{
    cdp_srv_last_id = 0;
    return cdp_open(&t->loop, "127.0.0.1", (uint16_t)t->sv.port, "/devtools/1", max_message, NULL,
                    k_on_open, k_on_event, k_on_close, t, &t->cdp);
}

TEST(cdp_calls)
{
    struct tctx t;
    t_init(&t, 1);
    t.sv.on_text = cdp_text;
    t.sv.answer_close = 1;
    REQUIRE(k_open(&t, 0) == 0);
    t_run(&t);
    CHECK_EQ_INT(t.open_status, 0);
    CHECK_EQ_INT(t.closed, 1);
    CHECK_EQ_INT(t.close_status, 0);
    CHECK(t.order);
    CHECK_EQ_INT(t.calls_done, K_COUNT);
    for (int i = 0; i < K_COUNT; i++)
        CHECK(kcalls[i].done);
    CHECK_EQ_INT(t.nevents, 1);
    CHECK_STR(t.last_event, "Runtime.consoleAPICalled");
    CHECK_EQ_INT(t.st.sent, K_COUNT);
    CHECK_EQ_INT(t.st.replies, K_COUNT - 1);
    CHECK_EQ_INT(t.st.events, 1);
    CHECK_EQ_INT(t.st.errors, 3); /* error, rawError, bigNoRaw */
    CHECK_EQ_INT(t.st.timeouts, 1);
    CHECK_EQ_INT(t.st.bad_messages, 5); /* 9999, [1,2], no method, "str" id, 42 */
    CHECK_EQ_INT(t.st.dropped_big, 2);  /* bigNoRaw, the big event */
    CHECK_EQ_INT(t.sv.texts, K_COUNT);
    CHECK_EQ_INT(t.sv.closes, 1);
    check_client_frames(&t.sv);
}

struct one {
    struct tctx *t;
    const char *method;
    unsigned flags;
    uint64_t timeout;
    int status;
    int done;
    int close_seen_before;
    int close_now; /* cdp_close right after the call */
};

static void one_on_reply(struct cdp_session *s, struct cdp_reply *r, void *arg)
{
    (void)s;
    struct one *o = arg;
    o->done++;
    o->status = r->status;
    o->close_seen_before = o->t->closed;
    cdp_close(s); /* a no-op when the session is already ending */
}

static void one_on_open(struct cdp_session *s, int status, void *arg)
{
    struct tctx *t = arg;
    struct one *o = t->user;
    t->opened++;
    t->open_status = status;
    if (status != 0)
        return;
    CHECK_EQ_INT(cdp_call(s, o->method, NULL, o->timeout, o->flags, one_on_reply, o), 0);
    if (o->close_now) {
        cdp_close(s);
        CHECK_EQ_INT(cdp_call(s, o->method, NULL, 0, 0, one_on_reply, o), -ENOTCONN);
    }
}

static void one_on_close(struct cdp_session *s, int status, void *arg)
{
    struct tctx *t = arg;
    t->closed++;
    t->close_status = status;
    cdp_get_stats(s, &t->st);
    snprintf(t->why, sizeof(t->why), "%s", cdp_last_error(s));
    t->cdp = NULL;
    t_finish(t);
}

static void run_one(struct tctx *t, struct one *o, size_t max_message)
{
    t_init(t, 1);
    t->sv.on_text = cdp_text;
    t->sv.answer_close = 1;
    o->t = t;
    t->user = o;
    cdp_srv_last_id = 0;
    if (cdp_open(&t->loop, "127.0.0.1", (uint16_t)t->sv.port, "/x", max_message, NULL, one_on_open, NULL,
                 one_on_close, t, &t->cdp) != 0) {
        CHECK(!"cdp_open");
        t_finish(t);
    }
    t_run(t);
}

TEST(cdp_invalid_json_closes)
{
    struct tctx t;
    struct one o = {.method = "Test.badJson", .timeout = 5000};
    run_one(&t, &o, 0);
    CHECK_EQ_INT(o.done, 1);
    CHECK_EQ_INT(o.status, ISOPROF_ECLOSED);
    CHECK_EQ_INT(o.close_seen_before, 0); /* pending calls end before on_close */
    CHECK_EQ_INT(t.close_status, ISOPROF_EJSON);
    CHECK(strstr(t.why, "invalid JSON") != NULL);
    CHECK_EQ_INT(t.st.bad_messages, 1);
    check_client_frames(&t.sv);
}

TEST(cdp_timeout)
{
    struct tctx t;
    struct one o = {.method = "Test.never", .timeout = 150};
    run_one(&t, &o, 0);
    CHECK_EQ_INT(o.done, 1);
    CHECK_EQ_INT(o.status, ISOPROF_ETIMEDOUT);
    CHECK_EQ_INT(t.st.timeouts, 1);
}

TEST(cdp_close_with_pending)
{
    struct tctx t;
    struct one o = {.method = "Test.never", .timeout = 5000, .close_now = 1};
    run_one(&t, &o, 0);
    CHECK_EQ_INT(o.done, 1);
    CHECK_EQ_INT(o.status, ISOPROF_ECLOSED);
    CHECK_EQ_INT(o.close_seen_before, 0);
    CHECK_EQ_INT(t.close_status, 0);
    CHECK_EQ_INT(t.sv.closes, 1);
    check_client_frames(&t.sv);
}

TEST(cdp_over_cap)
{
    struct tctx t;
    struct one o = {.method = "Test.big", .flags = CDP_RAW, .timeout = 5000};
    run_one(&t, &o, 1u << 20);
    CHECK_EQ_INT(o.done, 1);
    CHECK_EQ_INT(o.status, ISOPROF_ECLOSED);
    CHECK_EQ_INT(t.close_status, ISOPROF_ETOOBIG);
    CHECK_EQ_INT(t.st.dropped_big, 1);
}

/* cdp_open and cdp_call under allocation failure */
static void walk_on_reply(struct cdp_session *s, struct cdp_reply *r, void *arg)
{
    struct tctx *t = arg;
    CHECK_EQ_INT(r->status, 0);
    t->calls_done++;
    cdp_close(s);
}

static void walk_on_open(struct cdp_session *s, int status, void *arg)
{
    struct tctx *t = arg;
    t->open_status = status;
    if (status != 0)
        return;
    int rc = -ENOMEM;
    for (long n = 0; n < 50 && rc != 0; n++) {
        isoprof_alloc_fail_after(n);
        rc = cdp_call(s, "Runtime.getHeapUsage", "{\"a\":[1,2,3,{\"b\":\"c\"}]}", 5000, 0,
                      walk_on_reply, t);
        isoprof_alloc_fail_after(-1);
        if (rc != 0)
            CHECK_EQ_INT(rc, -ENOMEM);
    }
    CHECK_EQ_INT(rc, 0);
}

TEST(cdp_alloc_fail_walk)
{
    struct tctx t;
    t_init(&t, 1);
    t.sv.on_text = cdp_text;
    t.sv.answer_close = 1;
    cdp_srv_last_id = 0;
    int rc = -ENOMEM;
    for (long n = 0; n < 50 && rc != 0; n++) {
        isoprof_alloc_fail_after(n);
        rc = cdp_open(&t.loop, "127.0.0.1", (uint16_t)t.sv.port, "/x", 0, NULL, walk_on_open, NULL,
                      one_on_close, &t, &t.cdp);
        isoprof_alloc_fail_after(-1);
        if (rc != 0)
            CHECK_EQ_INT(rc, -ENOMEM);
    }
    REQUIRE(rc == 0);
    t_run(&t);
    CHECK_EQ_INT(t.open_status, 0);
    CHECK_EQ_INT(t.calls_done, 1);
    CHECK_EQ_INT(t.close_status, 0);
}

int main(void)
{
    RUN(ws_echo_fragmented_big);
    RUN(ws_server_closes);
    RUN(ws_over_cap);
    RUN(ws_huge_length_header);
    RUN(ws_truncated_frame);
    RUN(ws_stalled_message);
    RUN(ws_bad_upgrade_answers);
    RUN(ws_handshake_timeout);
    RUN(ws_connection_refused);
    RUN(ws_send_limits_and_localhost);
    RUN(ws_close_before_open);
    RUN(ws_bad_arguments);
    RUN(cdp_calls);
    RUN(cdp_invalid_json_closes);
    RUN(cdp_timeout);
    RUN(cdp_close_with_pending);
    RUN(cdp_over_cap);
    RUN(cdp_alloc_fail_walk);
    TEST_EXIT();
}

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
#include <time.h>
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
    void (*on_pong)(struct sconn *c); /* after a pong was counted */
    int answer_close;                 /* answer a client close with a close and shut down */
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
            if (sv->on_pong)
                sv->on_pong(c);
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

/* A reply the loop reads late: ws_message_arrival_ns says when it reached
 * the socket (within the kernel's stamp and a jiffy), not when a busy loop
 * got to read it. The server answers, then holds the loop for 300 ms. */
static uint64_t late_sent_ns, late_read_ns, late_arrival_ns;

static void late_text(struct sconn *c, const char *msg, size_t len)
{
    (void)msg;
    (void)len;
    srv_send_frame(c, 1, 1, "answer", 6);
    late_sent_ns = isoprof_now_mono_ns();
    struct timespec ts = {0, 300 * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void late_on_msg(struct tctx *t)
{
    late_read_ns = isoprof_now_mono_ns();
    late_arrival_ns = ws_message_arrival_ns(t->ws);
    ws_close(t->ws);
}

static void late_on_open(struct tctx *t)
{
    CHECK_EQ_INT(ws_send_text(t->ws, "ask", 3), 0);
}

TEST(ws_arrival_of_a_message_read_late)
{
    struct tctx t;
    t_init(&t, 1);
    t.sv.on_text = late_text;
    t.sv.answer_close = 1;
    t.on_open_hook = late_on_open;
    t.on_msg_hook = late_on_msg;
    REQUIRE(t_connect(&t, "127.0.0.1", "/late") == 0);
    t_run(&t);
    CHECK_EQ_INT(t.nmsg, 1);
    CHECK(late_read_ns >= late_sent_ns + 300 * 1000000ull);
    /* arrived after it was sent, and 10 ms (a jiffy) plus 2 jiffies of the
     * kernel's stamp later at most: not 300 ms */
    CHECK(late_arrival_ns + 1000000ull >= late_sent_ns);
    CHECK(late_arrival_ns <= late_sent_ns + 40 * 1000000ull);
    CHECK(late_arrival_ns <= late_read_ns);
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

/* --- back pressure: ws_pause --- */

/* ws.c reads at most this much at a time (WS_READ_BUF there). A pause
 * stops the socket being read; what the read in progress brought is still
 * parsed, so only messages that lie wholly in the rest of that one read
 * can be delivered after ws_pause returns. */
#define WS_READ_BYTES ((size_t)64 << 10)

struct burst {
    size_t count, size; /* messages the server sends right after the 101, payload bytes each */
    uint64_t pause_ms;
    int close_while_paused; /* ws_close instead of resuming */
    uint8_t *want;
    uv_timer_t timer; /* ends the pause */
    size_t n;         /* messages delivered */
    size_t bad;       /* ... out of order or not intact */
    int paused;
    size_t while_paused; /* delivered after ws_pause returned */
    size_t n_at_resume;
    int open_at_resume;
    uint64_t t_pause, t_resume;
};

/* Message i: its index (big-endian) in the first 4 bytes, a pattern after. */
static void burst_fill(uint8_t *p, size_t size, size_t i)
{
    for (size_t j = 0; j < size; j++)
        p[j] = pattern(i * 131 + j);
    for (size_t k = 0; k < 4 && k < size; k++)
        p[k] = (uint8_t)(i >> (8 * (3 - k)));
}

static void burst_upgrade(struct sconn *c)
{
    struct tctx *t = c->sv->user;
    struct burst *b = t->user;
    srv_default_upgrade(c);
    uint8_t *p = isoprof_malloc(b->size);
    if (p == NULL)
        abort();
    for (size_t i = 0; i < b->count; i++) {
        burst_fill(p, b->size, i);
        srv_send_frame(c, 1, 2, p, b->size);
    }
    isoprof_free(p);
}

static void burst_on_timer(uv_timer_t *tm)
{
    struct tctx *t = tm->data;
    struct burst *b = t->user;
    b->n_at_resume = b->n;
    b->open_at_resume = t->closed == 0 && t->ws != NULL;
    b->t_resume = uv_now(&t->loop);
    b->paused = 0;
    if (t->ws == NULL)
        return;
    if (b->close_while_paused)
        ws_close(t->ws);
    else
        ws_pause(t->ws, 0);
}

static void burst_on_message(struct ws_client *ws, char *data, size_t len, void *arg)
{
    struct tctx *t = arg;
    struct burst *b = t->user;
    CHECK_EQ_INT(data[len], 0);
    burst_fill(b->want, b->size, b->n);
    if (len != b->size || memcmp(data, b->want, len) != 0)
        b->bad++;
    ws_msg_free(data);
    b->n++;
    if (b->paused)
        b->while_paused++;
    if (b->n == 1) {
        ws_pause(ws, 1);
        ws_pause(ws, 1); /* twice: one resume must undo it */
        b->paused = 1;
        b->t_pause = uv_now(&t->loop);
        uv_timer_start(&b->timer, burst_on_timer, b->pause_ms, 0);
    }
    if (b->n == b->count)
        ws_close(ws);
}

static void burst_on_close(struct tctx *t)
{
    struct burst *b = t->user;
    uv_close((uv_handle_t *)&b->timer, NULL);
    t_finish(t);
}

static void run_burst(struct tctx *t, struct burst *b)
{
    t_init(t, 1);
    t->user = b;
    t->sv.on_upgrade = burst_upgrade;
    t->sv.answer_close = 1;
    t->on_close_hook = burst_on_close;
    /* No REQUIRE in code the loop runs: after any earlier failed CHECK it
     * returns at once, and the test would then wait for the watchdog. */
    if ((b->want = isoprof_malloc(b->size)) == NULL)
        abort();
    uv_timer_init(&t->loop, &b->timer);
    b->timer.data = t;
    if (ws_connect(&t->loop, "127.0.0.1", (uint16_t)t->sv.port, "/x", &t->opts, c_on_open,
                   burst_on_message, c_on_close, t, &t->ws) != 0) {
        CHECK(!"ws_connect");
        uv_close((uv_handle_t *)&b->timer, NULL);
        t_finish(t);
    } else {
        ws_pause(t->ws, 1); /* not open yet: ignored */
    }
    t_run(t);
    isoprof_free(b->want);
}

/* The server writes a burst the moment the connection opens; the client
 * pauses at the first message. For pause_ms of loop time nothing more may
 * arrive than what the read in progress held whole, and after the resume
 * every message arrives, in order and intact. */
static void check_burst(size_t count, size_t size)
{
    struct tctx t;
    struct burst b = {.count = count, .size = size, .pause_ms = 300};
    uint8_t h[14];
    size_t frame = hdr(h, 1, 2, size) + size;
    /* the read that held the end of the first message holds at most
     * WS_READ_BYTES - 1 more bytes */
    size_t bound = (WS_READ_BYTES - 1) / frame;
    run_burst(&t, &b);
    CHECK_EQ_INT(t.open_status, 0);
    CHECK_EQ_INT(t.closed, 1);
    CHECK_EQ_INT(t.close_status, 0);
    CHECK_EQ_INT(b.n, count);
    CHECK_EQ_INT(b.bad, 0);
    if (b.while_paused > bound)
        fprintf(stderr, "%zu messages of %zu bytes while paused (at most %zu may)\n",
                b.while_paused, size, bound);
    CHECK(b.while_paused <= bound);
    CHECK_EQ_INT(b.n_at_resume, 1 + b.while_paused);
    CHECK(b.n_at_resume < count); /* the pause held something back */
    CHECK(b.open_at_resume);
    CHECK(b.t_resume - b.t_pause >= b.pause_ms);
    CHECK_EQ_INT(t.sv.closes, 1);
    check_client_frames(&t.sv);
}

TEST(ws_pause_burst)
{
    check_burst(200, (size_t)64 << 10); /* no second message fits in one read */
    check_burst(3000, 1000);            /* up to 65 of them do */
}

/* ws_close while paused: reading resumes for the peer's close frame, so
 * the handshake ends at once rather than after the one-second wait; and
 * nothing is delivered after ws_close. */
TEST(ws_close_while_paused)
{
    struct tctx t;
    struct burst b = {
        .count = 20, .size = (size_t)64 << 10, .pause_ms = 100, .close_while_paused = 1};
    run_burst(&t, &b);
    CHECK_EQ_INT(t.open_status, 0);
    CHECK_EQ_INT(t.closed, 1);
    CHECK_EQ_INT(t.close_status, 0);
    CHECK(b.open_at_resume);
    CHECK_EQ_INT(b.n, b.n_at_resume);
    CHECK(b.n < b.count);
    CHECK_EQ_INT(t.sv.closes, 1);
    CHECK_EQ_INT(t.sv.close_code, 1000);
    if (t.t_close - b.t_resume >= 900)
        fprintf(stderr, "closed %llu ms after ws_close\n",
                (unsigned long long)(t.t_close - b.t_resume));
    CHECK(t.t_close - b.t_resume < 900); /* not the close wait (1000 ms) */
    CHECK_EQ_INT(t.why[0], 0);
    check_client_frames(&t.sv);
}

/* A message cut by a pause has no deadline while paused, and a whole one
 * again on resume. */
enum {
    CUT_MID,   /* paused mid-message from outside the client's callbacks; the rest follows */
    CUT_NEVER, /* the same, and the rest never comes */
    CUT_NEXT,  /* paused in on_message, the next message's start already read */
};

#define CUT_HALF 1000
#define CUT_TIMEOUT_MS 300
#define CUT_PAUSE_MS (3 * CUT_TIMEOUT_MS)
#define CUT_PING_MS 100

struct cut {
    int mode;
    struct sconn *conn;
    uv_timer_t ping, resume;
    int n_at_resume, open_at_resume, resumed;
    uint64_t t_first, t_pause, t_resume;
};

static void cut_send_rest(struct sconn *c)
{
    char rest[CUT_HALF];
    memset(rest, 'b', sizeof(rest));
    struct tctx *t = c->sv->user;
    struct cut *k = t->user;
    if (k->mode == CUT_MID)
        srv_send_frame(c, 1, 0, rest, sizeof(rest)); /* the last fragment */
    else if (k->mode == CUT_NEXT)
        srv_send(c, rest, sizeof(rest)); /* the rest of the frame */
}

static void cut_on_resume(uv_timer_t *tm)
{
    struct tctx *t = tm->data;
    struct cut *k = t->user;
    k->n_at_resume = t->nmsg;
    k->open_at_resume = t->closed == 0 && t->ws != NULL;
    k->t_resume = uv_now(&t->loop);
    if (t->ws != NULL) {
        k->resumed = 1;
        ws_pause(t->ws, 0);
    }
}

static void cut_pause(struct tctx *t)
{
    struct cut *k = t->user;
    ws_pause(t->ws, 1);
    k->t_pause = uv_now(&t->loop);
    cut_send_rest(k->conn); /* it waits in the socket */
    uv_timer_start(&k->resume, cut_on_resume, CUT_PAUSE_MS, 0);
}

/* The client has read the first fragment and the ping after it (in_msg,
 * nothing more in its buffers): pause it now. */
static void cut_on_pong(struct sconn *c)
{
    struct tctx *t = c->sv->user;
    if (t->ws != NULL)
        cut_pause(t);
}

static void cut_on_ping_timer(uv_timer_t *tm)
{
    struct tctx *t = tm->data;
    struct cut *k = t->user;
    srv_send_frame(k->conn, 1, 9, "p", 1);
}

static void cut_upgrade(struct sconn *c)
{
    struct tctx *t = c->sv->user;
    struct cut *k = t->user;
    k->conn = c;
    k->t_first = uv_now(&t->loop);
    char r[256];
    srv_response_101(c, r, sizeof(r));
    uint8_t b[512 + 2 * CUT_HALF];
    size_t n = strlen(r);
    memcpy(b, r, n);
    if (k->mode == CUT_NEXT) {
        /* one write: "go", then the head and first half of the next */
        n += hdr(b + n, 1, 1, 2);
        memcpy(b + n, "go", 2);
        n += 2;
        n += hdr(b + n, 1, 1, 2 * CUT_HALF);
    } else {
        n += hdr(b + n, 0, 1, CUT_HALF); /* a first fragment */
        /* the ping comes later, so that some of the message's deadline
         * has passed when it is paused */
        uv_timer_start(&k->ping, cut_on_ping_timer, CUT_PING_MS, 0);
    }
    memset(b + n, 'a', CUT_HALF);
    srv_send(c, b, n + CUT_HALF);
}

static void cut_on_msg(struct tctx *t)
{
    struct cut *k = t->user;
    if (k->mode == CUT_NEXT && t->nmsg == 1) {
        CHECK_STR(t->msg[0], "go");
        cut_pause(t);
    } else {
        ws_close(t->ws);
    }
}

static void cut_on_close(struct tctx *t)
{
    struct cut *k = t->user;
    uv_close((uv_handle_t *)&k->ping, NULL);
    uv_close((uv_handle_t *)&k->resume, NULL);
    t_finish(t);
}

static void run_cut(struct tctx *t, struct cut *k)
{
    t_init(t, 1);
    t->user = k;
    t->sv.on_upgrade = cut_upgrade;
    t->sv.on_pong = cut_on_pong;
    t->sv.answer_close = 1;
    t->opts.message_timeout_ms = CUT_TIMEOUT_MS;
    t->on_msg_hook = cut_on_msg;
    t->on_close_hook = cut_on_close;
    uv_timer_init(&t->loop, &k->ping);
    uv_timer_init(&t->loop, &k->resume);
    k->ping.data = k->resume.data = t;
    if (t_connect(t, "127.0.0.1", "/x") != 0) {
        CHECK(!"ws_connect");
        cut_on_close(t);
    }
    t_run(t);
}

static void check_cut_message(const struct tctx *t, int i)
{
    REQUIRE(t->nmsg > i);
    CHECK_EQ_INT(t->len[i], 2 * CUT_HALF);
    int same = t->len[i] == 2 * CUT_HALF;
    for (size_t j = 0; same && j < 2 * CUT_HALF; j++)
        same = t->msg[i][j] == (j < CUT_HALF ? 'a' : 'b');
    CHECK(same);
}

TEST(ws_pause_cut_message)
{
    struct tctx t;
    struct cut k = {.mode = CUT_MID};
    run_cut(&t, &k);
    CHECK_EQ_INT(t.open_status, 0);
    if (t.close_status != 0)
        fprintf(stderr, "closed: %s\n", t.why);
    CHECK_EQ_INT(t.close_status, 0);
    CHECK(k.resumed);
    CHECK(k.open_at_resume);
    CHECK_EQ_INT(k.n_at_resume, 0);
    CHECK(k.t_resume - k.t_pause >= CUT_PAUSE_MS);
    CHECK_EQ_INT(t.nmsg, 1);
    check_cut_message(&t, 0);
    CHECK_EQ_INT(t.sv.pongs, 1);
    CHECK_EQ_INT(t.sv.closes, 1);
    check_client_frames(&t.sv);
    t_free(&t);
}

TEST(ws_pause_cut_message_deadline_again)
{
    struct tctx t;
    struct cut k = {.mode = CUT_NEVER};
    run_cut(&t, &k);
    CHECK_EQ_INT(t.open_status, 0);
    CHECK(k.resumed);
    CHECK(k.open_at_resume);
    CHECK_EQ_INT(t.nmsg, 0);
    CHECK_EQ_INT(t.close_status, ISOPROF_ETIMEDOUT);
    CHECK(strstr(t.why, "not complete") != NULL);
    /* a whole deadline from the resume, not what was left of the first */
    CHECK(t.t_close - k.t_resume >= CUT_TIMEOUT_MS);
    CHECK(t.t_close - k.t_resume < CUT_TIMEOUT_MS + 2000);
}

/* The natural place to pause is on_message. The read that brought the
 * message may also hold the start of the next one, which the client then
 * begins after ws_pause returned: that message is cut by the pause too,
 * and must not time out while paused. */
TEST(ws_pause_in_callback_next_message_cut)
{
    struct tctx t;
    struct cut k = {.mode = CUT_NEXT};
    run_cut(&t, &k);
    CHECK_EQ_INT(t.open_status, 0);
    if (t.close_status != 0)
        fprintf(stderr, "closed %llu ms after the pause: %s\n",
                (unsigned long long)(t.t_close - k.t_pause), t.why);
    CHECK_EQ_INT(t.close_status, 0);
    CHECK(k.resumed);
    CHECK(k.open_at_resume);
    CHECK_EQ_INT(k.n_at_resume, 1);
    CHECK_EQ_INT(t.nmsg, 2);
    check_cut_message(&t, 1);
    check_client_frames(&t.sv);
    t_free(&t);
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
    if (p == NULL)
        abort();
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
    if (v == NULL) { /* not REQUIRE: after an earlier failure it would not answer */
        CHECK(!"the client sent invalid JSON");
        return;
    }
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
    if (cdp_open(&t->loop, "127.0.0.1", (uint16_t)t->sv.port, "/x", max_message, NULL, one_on_open,
                 NULL, one_on_close, t, &t->cdp) != 0) {
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

/* --- big events to the big-event callback --- */

enum { BEV_TAKE, BEV_REFUSE, BEV_NONE };

#define BEV_CHUNK ((size_t)1 << 20) /* a recent V8's heap snapshot chunk */
#define BEV_PAUSE_MS 100

struct bev {
    int mode;
    char *event; /* the 1 MiB event as the server sends it */
    size_t event_len;
    char *chunk; /* its params.chunk, unescaped */
    size_t chunk_len;
    int calls, big_ok, deep_ok, unexpected;
    int chunks_done, big_done, raw_ok;
    uv_timer_t resume;
    int paused, resumed;
    int chunks_done_at_resume;
    uint64_t dropped_at_resume;
};

#define BEV_DEEP 80

static void bev_send_padded(struct sconn *c, const char *head, const char *tail, size_t pad)
{
    size_t hl = strlen(head), tl = strlen(tail);
    char *p = isoprof_malloc(hl + pad + tl);
    if (p == NULL)
        abort();
    memcpy(p, head, hl);
    memset(p + hl, 'x', pad);
    memcpy(p + hl + pad, tail, tl);
    srv_send_frame(c, 1, 1, p, hl + pad + tl);
    isoprof_free(p);
}

static void bev_text(struct sconn *c, const char *msg, size_t len)
{
    struct tctx *t = c->sv->user;
    struct bev *b = t->user;
    char err[128];
    yajl_val v = yajl_tree_parse(msg, err, sizeof(err));
    if (v == NULL) {
        CHECK(!"the client sent invalid JSON");
        return;
    }
    yajl_val mv = jget(v, "method", yajl_t_string), idv = jget(v, "id", yajl_t_number);
    const char *m = mv ? YAJL_GET_STRING(mv) : NULL;
    if (m == NULL || idv == NULL || strcmp(m, "Test.chunks") != 0) {
        yajl_tree_free(v);
        cdp_text(c, msg, len); /* Test.big */
        return;
    }
    long long id = YAJL_GET_INTEGER(idv);
    CHECK_EQ_INT(id, 1);
    cdp_srv_last_id = id;
    yajl_tree_free(v);
    /* the big event, a small one nested too deep to parse, a big event
     * whose method does not come first (no method to peek), a big reply
     * nobody waits for, and then the reply */
    srv_send_frame(c, 1, 1, b->event, b->event_len);
    char deep[512];
    int k = snprintf(deep, sizeof(deep), "{\"method\":\"Deep.event\",\"params\":{\"a\":");
    for (int i = 0; i < BEV_DEEP; i++)
        deep[k++] = '[';
    for (int i = 0; i < BEV_DEEP; i++)
        deep[k++] = ']';
    k += snprintf(deep + k, sizeof(deep) - (size_t)k, "}}");
    srv_send_frame(c, 1, 1, deep, (size_t)k);
    bev_send_padded(c, "{\"params\":{\"p\":\"", "\"},\"method\":\"Late.method\"}",
                    CDP_PARSE_MAX + 100);
    bev_send_padded(c, "{\"id\":9999,\"result\":{\"p\":\"", "\"}}", CDP_PARSE_MAX + 100);
    char r[64];
    snprintf(r, sizeof(r), "{\"id\":%lld,\"result\":{}}", id);
    srv_send_frame(c, 1, 1, r, strlen(r));
}

/* The event: {"method":"HeapProfiler.addHeapSnapshotChunk","params":
 * {"chunk":"..."}} with 1 MiB of chunk text, escapes in it. */
static int bev_build(struct bev *b)
{
    static const char head[] = "{\"method\":\"HeapProfiler.addHeapSnapshotChunk\",\"params\":{"
                               "\"chunk\":\"";
    static const char tail[] = "\"}}";
    b->event = isoprof_malloc(sizeof(head) + BEV_CHUNK + sizeof(tail));
    b->chunk = isoprof_malloc(BEV_CHUNK + 1);
    if (b->event == NULL || b->chunk == NULL)
        return -ENOMEM;
    size_t n = sizeof(head) - 1, m = 0;
    memcpy(b->event, head, n);
    for (size_t j = 0; j < BEV_CHUNK;) {
        if (j % 4096 == 100) {
            static const char *const esc[] = {"\\\"", "\\n", "\\\\"};
            static const char unesc[] = {'"', '\n', '\\'};
            size_t e = (j / 4096) % 3;
            memcpy(b->event + n, esc[e], 2);
            n += 2;
            b->chunk[m++] = unesc[e];
            j += 2;
        } else {
            b->event[n++] = (char)('a' + j % 26);
            b->chunk[m++] = (char)('a' + j % 26);
            j++;
        }
    }
    memcpy(b->event + n, tail, sizeof(tail) - 1);
    b->event_len = n + sizeof(tail) - 1;
    b->chunk[m] = '\0';
    b->chunk_len = m;
    return 0;
}

static void bev_on_resume(uv_timer_t *tm)
{
    struct tctx *t = tm->data;
    struct bev *b = t->user;
    if (t->cdp == NULL)
        return;
    struct cdp_stats st;
    cdp_get_stats(t->cdp, &st);
    b->chunks_done_at_resume = b->chunks_done;
    b->dropped_at_resume = st.dropped_big;
    b->resumed = 1;
    cdp_pause(t->cdp, 0);
}

static int bev_on_big_event(struct cdp_session *s, const char *method, char *data, size_t len,
                            void *arg)
{
    struct tctx *t = arg;
    struct bev *b = t->user;
    b->calls++;
    CHECK(b->mode != BEV_NONE);
    CHECK_EQ_INT(data[len], 0);
    if (strcmp(method, "HeapProfiler.addHeapSnapshotChunk") == 0) {
        CHECK_EQ_INT(len, b->event_len);
        CHECK(b->big_ok == 0);
        char *chunk = NULL;
        size_t n = 0;
        if (len == b->event_len && memcmp(data, b->event, len) == 0 &&
            cdp_param_string(data, len, "chunk", &chunk, &n) == 0 && n == b->chunk_len &&
            memcmp(chunk, b->chunk, n) == 0)
            b->big_ok++;
        isoprof_free(chunk);
    } else if (strcmp(method, "Deep.event") == 0) {
        CHECK(len < CDP_PARSE_MAX);
        if (strncmp(data, "{\"method\":\"Deep.event\",\"params\":{\"a\":[[[", 40) == 0)
            b->deep_ok++;
    } else {
        fprintf(stderr, "big event: %s\n", method);
        b->unexpected++;
    }
    if (b->mode != BEV_TAKE)
        return 0;
    if (!b->paused) {
        /* Back pressure from the consumer: nothing more is read until the
         * resume, so what follows in the socket waits. */
        b->paused = 1;
        cdp_pause(s, 1);
        uv_timer_start(&b->resume, bev_on_resume, BEV_PAUSE_MS, 0);
    }
    ws_msg_free(data); /* taken */
    return 1;
}

static void bev_on_big_reply(struct cdp_session *s, struct cdp_reply *r, void *arg)
{
    struct tctx *t = arg;
    struct bev *b = t->user;
    b->big_done++;
    CHECK_EQ_INT(r->status, 0);
    if (r->status == 0 && r->raw != NULL && r->raw_len > CDP_PARSE_MAX &&
        strncmp(r->raw, "{\"id\":2,", 8) == 0)
        b->raw_ok++;
    cdp_close(s);
    cdp_pause(s, 1); /* closing: no-ops */
    cdp_pause(s, 0);
}

static void bev_on_chunks_reply(struct cdp_session *s, struct cdp_reply *r, void *arg)
{
    struct tctx *t = arg;
    struct bev *b = t->user;
    b->chunks_done++;
    CHECK_EQ_INT(r->status, 0);
    /* a big reply still goes to its CDP_RAW call, never to the callback */
    CHECK_EQ_INT(cdp_call(s, "Test.big", NULL, 5000, CDP_RAW, bev_on_big_reply, t), 0);
}

static void bev_on_open(struct cdp_session *s, int status, void *arg)
{
    struct tctx *t = arg;
    t->opened++;
    t->open_status = status;
    if (status == 0)
        CHECK_EQ_INT(cdp_call(s, "Test.chunks", NULL, 5000, 0, bev_on_chunks_reply, t), 0);
}

static void bev_on_close(struct cdp_session *s, int status, void *arg)
{
    struct tctx *t = arg;
    struct bev *b = t->user;
    t->closed++;
    t->close_status = status;
    cdp_get_stats(s, &t->st);
    snprintf(t->why, sizeof(t->why), "%s", cdp_last_error(s));
    t->cdp = NULL;
    uv_close((uv_handle_t *)&b->resume, NULL);
    t_finish(t);
}

static void run_bev(struct tctx *t, struct bev *b)
{
    t_init(t, 1);
    t->user = b;
    t->sv.on_text = bev_text;
    t->sv.answer_close = 1;
    uv_timer_init(&t->loop, &b->resume);
    b->resume.data = t;
    cdp_srv_last_id = 0;
    if (bev_build(b) != 0 || cdp_open(&t->loop, "127.0.0.1", (uint16_t)t->sv.port, "/x", 0, NULL,
                                      bev_on_open, NULL, bev_on_close, t, &t->cdp) != 0) {
        CHECK(!"cdp_open");
        uv_close((uv_handle_t *)&b->resume, NULL);
        t_finish(t);
    } else if (b->mode != BEV_NONE) {
        cdp_set_big_event_cb(t->cdp, bev_on_big_event);
    }
    t_run(t);
    isoprof_free(b->event);
    isoprof_free(b->chunk);
}

/* An event of the main session too big (or deep) to parse goes, unparsed,
 * to the big-event callback with its method: taken, it is not counted in
 * dropped_big; refused, or with no callback, it is. A big event whose
 * method cannot be peeked, a big reply for no pending call, and a big
 * reply to a CDP_RAW call never reach the callback. */
TEST(cdp_big_events)
{
    for (int mode = BEV_TAKE; mode <= BEV_NONE; mode++) {
        struct tctx t;
        struct bev b = {.mode = mode};
        run_bev(&t, &b);
        if (t.close_status != 0)
            fprintf(stderr, "mode %d closed: %s\n", mode, t.why);
        CHECK_EQ_INT(t.open_status, 0);
        CHECK_EQ_INT(t.close_status, 0);
        CHECK_EQ_INT(b.chunks_done, 1);
        CHECK_EQ_INT(b.big_done, 1);
        CHECK_EQ_INT(b.raw_ok, 1);
        CHECK_EQ_INT(b.unexpected, 0);
        CHECK_EQ_INT(t.st.replies, 2);
        CHECK_EQ_INT(t.st.bad_messages, 0);
        switch (mode) {
        case BEV_TAKE:
            CHECK_EQ_INT(b.calls, 2);
            CHECK_EQ_INT(b.big_ok, 1);
            CHECK_EQ_INT(b.deep_ok, 1);
            CHECK_EQ_INT(t.st.events, 2);
            CHECK_EQ_INT(t.st.dropped_big, 2); /* the unpeekable event, the reply for 9999 */
            /* cdp_pause held back the rest: the two big messages after
             * the event, and the reply after them */
            CHECK(b.resumed);
            CHECK_EQ_INT(b.chunks_done_at_resume, 0);
            CHECK_EQ_INT(b.dropped_at_resume, 0);
            break;
        case BEV_REFUSE:
            CHECK_EQ_INT(b.calls, 2);
            CHECK_EQ_INT(b.big_ok, 1);
            CHECK_EQ_INT(b.deep_ok, 1);
            CHECK_EQ_INT(t.st.dropped_big, 4);
            break;
        default:
            CHECK_EQ_INT(b.calls, 0);
            CHECK_EQ_INT(t.st.events, 0);
            CHECK_EQ_INT(t.st.dropped_big, 4);
        }
        CHECK_EQ_INT(t.sv.closes, 1);
        check_client_frames(&t.sv);
    }
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
    RUN(ws_arrival_of_a_message_read_late);
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
    RUN(ws_pause_burst);
    RUN(ws_close_while_paused);
    RUN(ws_pause_cut_message);
    RUN(ws_pause_cut_message_deadline_again);
    RUN(ws_pause_in_callback_next_message_cut);
    RUN(cdp_calls);
    RUN(cdp_invalid_json_closes);
    RUN(cdp_timeout);
    RUN(cdp_close_with_pending);
    RUN(cdp_over_cap);
    RUN(cdp_big_events);
    RUN(cdp_alloc_fail_walk);
    TEST_EXIT();
}

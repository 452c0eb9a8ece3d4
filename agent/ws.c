/*
 * ws.c - WebSocket client on libuv with wslay framing (see ws.h).
 *
 * States: CONNECTING (TCP) -> HANDSHAKE (upgrade sent, reading the 101)
 * -> OPEN -> CLOSING (close frame sent, waiting for the peer's or a short
 * timer) -> CLOSED (handles closing). One uv_timer_t bounds the connect +
 * handshake and the closing wait.
 *
 * Receive path: bytes from uv_read go to ws_input(), which first completes
 * the HTTP upgrade (response headers capped at 16 KiB, Sec-WebSocket-Accept
 * checked) and then runs wslay_frame_recv over them; wslay's recv callback
 * drains the bytes we hold and says WANT_READ when they are used up. Each
 * frame's payload is appended to the message buffer, which grows only as
 * bytes arrive (never to a size a header merely claims) and is checked
 * against max_message from the first chunk of every frame, so a frame
 * announcing 300 MB costs nothing before it is refused.
 *
 * Send path: wslay_frame_send writes header + masked payload through our
 * send callback into one buffer per message, handed to uv_write.
 *
 * Teardown: the object owns a uv_tcp_t and a uv_timer_t; it is freed in
 * the second close callback, after on_close has run, never inside a read
 * or write callback.
 */
#include "ws.h"

#include "base.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <wslay/wslay.h>

#define WS_MAX_HEADER (16u << 10)
#define WS_MAX_QUEUED (16u << 20)
#define WS_DEFAULT_MAX_MESSAGE (512ull << 20)
#define WS_DEFAULT_HANDSHAKE_MS 5000
#define WS_CLOSE_WAIT_MS 1000
#define WS_MIN_GROW (64u << 10)

enum ws_state { WS_CONNECTING, WS_HANDSHAKE, WS_OPEN, WS_CLOSING, WS_CLOSED };

struct ws_write {
    uv_write_t req;
    struct ws_client *ws;
    size_t len;
    char data[];
};

struct ws_client {
    uv_loop_t *loop;
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_timer_t timer;
    enum ws_state state;
    int test_mode;
    int status;
    int handles_open;
    char error[160];
    char key[25];
    char host_header[300];
    char path[1024];
    struct sockaddr_storage addr;

    char *hdr;
    size_t hdr_len;

    wslay_frame_context_ptr wf;
    const uint8_t *in;
    size_t in_len;

    /* the frame being received */
    uint64_t frame_left;
    int in_frame;
    uint8_t frame_op;
    int frame_fin;
    uint8_t ctrl[128];
    size_t ctrl_len;

    /* the message being reassembled */
    char *msg;
    size_t msg_len, msg_cap;
    int in_msg;

    /* the frame being sent */
    char *out;
    size_t out_len, out_cap;
    size_t queued;

    size_t max_message;
    uint64_t handshake_timeout_ms;
    ws_open_cb on_open;
    ws_message_cb on_message;
    ws_close_cb on_close;
    void *arg;
};

/* --- SHA-1 and base64, for Sec-WebSocket-Accept (RFC 3174, RFC 4648) --- */

static uint32_t rol(uint32_t x, int n)
{
    return (x << n) | (x >> (32 - n));
}

static void sha1_block(uint32_t h[5], const uint8_t *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5a827999;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ed9eba1;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8f1bbcdc;
        } else {
            f = b ^ c ^ d;
            k = 0xca62c1d6;
        }
        uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol(b, 30);
        b = a;
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

void ws_sha1(const void *data, size_t len, uint8_t out[20])
{
    uint32_t h[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
    const uint8_t *p = data;
    size_t left = len;
    while (left >= 64) {
        sha1_block(h, p);
        p += 64;
        left -= 64;
    }
    uint8_t tail[128] = {0};
    memcpy(tail, p, left);
    tail[left] = 0x80;
    size_t tl = left + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[tl - 1 - i] = (uint8_t)(bits >> (8 * i));
    sha1_block(h, tail);
    if (tl == 128)
        sha1_block(h, tail + 64);
    for (int i = 0; i < 5; i++) {
        out[4 * i] = (uint8_t)(h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(h[i] >> 8);
        out[4 * i + 3] = (uint8_t)h[i];
    }
}

size_t ws_base64(const uint8_t *in, size_t len, char *out, size_t cap)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t need = (len + 2) / 3 * 4;
    if (cap < need + 1)
        return 0;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? tab[v & 63] : '=';
    }
    out[o] = '\0';
    return o;
}

void ws_accept_key(const char *key, char out[29])
{
    char buf[128];
    int n = snprintf(buf, sizeof(buf), "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
    uint8_t dig[20];
    ws_sha1(buf, (size_t)n, dig);
    ws_base64(dig, sizeof(dig), out, 29);
}

/* --- teardown --- */

static void ws_set_error(struct ws_client *ws, const char *msg)
{
    if (ws->error[0] == '\0')
        snprintf(ws->error, sizeof(ws->error), "%s", msg);
}

const char *ws_last_error(const struct ws_client *ws)
{
    return ws->error;
}

static void ws_free(struct ws_client *ws)
{
    if (ws->wf)
        wslay_frame_context_free(ws->wf);
    isoprof_free(ws->hdr);
    isoprof_free(ws->msg);
    isoprof_free(ws->out);
    isoprof_free(ws);
}

static void ws_on_handle_close(uv_handle_t *h)
{
    struct ws_client *ws = h->data;
    if (--ws->handles_open > 0)
        return;
    ws->on_close(ws, ws->status, ws->arg);
    ws_free(ws);
}

/* End the connection with status; the callbacks run from the close callbacks. */
static void ws_fail(struct ws_client *ws, int status, const char *why)
{
    if (ws->state == WS_CLOSED)
        return;
    enum ws_state was = ws->state;
    ws->state = WS_CLOSED;
    ws->status = status;
    if (why)
        ws_set_error(ws, why);
    if (ws->test_mode)
        return;
    if (was < WS_OPEN && status != 0)
        ws->on_open(ws, status, ws->arg);
    uv_read_stop((uv_stream_t *)&ws->tcp);
    uv_timer_stop(&ws->timer);
    ws->handles_open = 2;
    uv_close((uv_handle_t *)&ws->tcp, ws_on_handle_close);
    uv_close((uv_handle_t *)&ws->timer, ws_on_handle_close);
}

/* --- sending --- */

static ssize_t wf_on_send(const uint8_t *data, size_t len, int flags, void *user)
{
    (void)flags;
    struct ws_client *ws = user;
    if (ws->out_len + len > ws->out_cap)
        return -1; /* sized up front; cannot happen */
    memcpy(ws->out + ws->out_len, data, len);
    ws->out_len += len;
    return (ssize_t)len;
}

static int wf_on_genmask(uint8_t *buf, size_t len, void *user)
{
    (void)user;
    return getrandom(buf, len, 0) == (ssize_t)len ? 0 : -1;
}

static ssize_t wf_on_recv(uint8_t *buf, size_t len, int flags, void *user)
{
    (void)flags;
    struct ws_client *ws = user;
    if (ws->in_len == 0)
        return -1; /* wslay reports WANT_READ */
    size_t n = len < ws->in_len ? len : ws->in_len;
    memcpy(buf, ws->in, n);
    ws->in += n;
    ws->in_len -= n;
    return (ssize_t)n;
}

static void ws_on_write(uv_write_t *req, int status)
{
    struct ws_write *w = container_of(req, struct ws_write, req);
    struct ws_client *ws = w->ws;
    ws->queued -= w->len;
    isoprof_free(w);
    if (status < 0 && status != UV_ECANCELED) {
        char why[96];
        snprintf(why, sizeof(why), "write: %s", uv_strerror(status));
        ws_fail(ws, ISOPROF_ECLOSED, why);
    }
}

static int ws_write_raw(struct ws_client *ws, const char *data, size_t len)
{
    if (ws->test_mode)
        return 0;
    struct ws_write *w = isoprof_malloc(sizeof(*w) + len);
    if (w == NULL)
        return -ENOMEM;
    w->ws = ws;
    w->len = len;
    memcpy(w->data, data, len);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    int rc = uv_write(&w->req, (uv_stream_t *)&ws->tcp, &b, 1, ws_on_write);
    if (rc != 0) {
        isoprof_free(w);
        return rc;
    }
    ws->queued += len;
    return 0;
}

static int ws_send_frame(struct ws_client *ws, uint8_t opcode, const void *data, size_t len)
{
    if (ws->queued + len > WS_MAX_QUEUED)
        return -ENOBUFS;
    size_t need = len + 14;
    if (ws->out_cap < need) {
        char *nb = isoprof_realloc(ws->out, need);
        if (nb == NULL)
            return -ENOMEM;
        ws->out = nb;
        ws->out_cap = need;
    }
    ws->out_len = 0;
    struct wslay_frame_iocb io = {
        .fin = 1,
        .opcode = opcode,
        .mask = 1,
        .payload_length = len,
        .data = data,
        .data_length = len,
    };
    while (1) {
        ssize_t r = wslay_frame_send(ws->wf, &io);
        if (r < 0)
            return ISOPROF_EWS;
        io.data += r;
        io.data_length -= (size_t)r;
        if (io.data_length == 0)
            break;
    }
    int rc = ws_write_raw(ws, ws->out, ws->out_len);
    if (ws->out_cap > (1u << 20)) { /* do not keep a big buffer around */
        isoprof_free(ws->out);
        ws->out = NULL;
        ws->out_cap = 0;
    }
    return rc;
}

int ws_send_text(struct ws_client *ws, const char *data, size_t len)
{
    if (ws->state != WS_OPEN)
        return -ENOTCONN;
    return ws_send_frame(ws, WSLAY_TEXT_FRAME, data, len);
}

static void ws_on_close_wait(uv_timer_t *t)
{
    struct ws_client *ws = t->data;
    ws_fail(ws, 0, NULL);
}

void ws_close(struct ws_client *ws)
{
    if (ws->state == WS_CLOSED || ws->state == WS_CLOSING)
        return;
    if (ws->state != WS_OPEN) {
        ws_fail(ws, ISOPROF_ECLOSED, "closed before the upgrade finished");
        return;
    }
    uint8_t code[2] = {0x03, 0xe8}; /* 1000 normal closure */
    if (ws_send_frame(ws, WSLAY_CONNECTION_CLOSE, code, 2) != 0) {
        ws_fail(ws, 0, NULL);
        return;
    }
    ws->state = WS_CLOSING;
    if (!ws->test_mode)
        uv_timer_start(&ws->timer, ws_on_close_wait, WS_CLOSE_WAIT_MS, 0);
}

/* --- receiving --- */

static int ws_fail_code(struct ws_client *ws, int code, const char *why)
{
    ws_set_error(ws, why);
    return code;
}

static const char *header_value(const char *hdr, const char *name, char *buf, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *p = strstr(hdr, "\r\n"); p && p[2] != '\r'; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            const char *e = strstr(v, "\r\n");
            size_t n = e ? (size_t)(e - v) : strlen(v);
            while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
                n--;
            if (n >= cap)
                n = cap - 1;
            memcpy(buf, v, n);
            buf[n] = '\0';
            return buf;
        }
    }
    return NULL;
}

static int contains_token(const char *v, const char *tok)
{
    size_t tl = strlen(tok);
    for (const char *p = v; *p; p++) {
        if (strncasecmp(p, tok, tl) == 0 && (p == v || p[-1] == ' ' || p[-1] == ',') &&
            (p[tl] == '\0' || p[tl] == ',' || p[tl] == ' '))
            return 1;
    }
    return 0;
}

/* Consume handshake bytes; *used says how many were part of the header. */
static int ws_handshake_input(struct ws_client *ws, const uint8_t *data, size_t len, size_t *used)
{
    size_t room = WS_MAX_HEADER - ws->hdr_len;
    size_t take = len < room ? len : room;
    if (ws->hdr == NULL) {
        ws->hdr = isoprof_malloc(WS_MAX_HEADER + 1);
        if (ws->hdr == NULL)
            return -ENOMEM;
    }
    size_t before = ws->hdr_len;
    memcpy(ws->hdr + ws->hdr_len, data, take);
    ws->hdr_len += take;
    ws->hdr[ws->hdr_len] = '\0';
    char *end = memmem(ws->hdr, ws->hdr_len, "\r\n\r\n", 4);
    if (end == NULL) {
        *used = take;
        if (ws->hdr_len >= WS_MAX_HEADER)
            return ws_fail_code(ws, ISOPROF_EWS, "upgrade response headers over 16 KiB");
        return 0;
    }
    size_t hl = (size_t)(end - ws->hdr) + 4;
    *used = hl - before;
    end[2] = '\0'; /* keep the last header's CRLF for header_value */
    if (memchr(ws->hdr, 0, hl - 2) != NULL)
        return ws_fail_code(ws, ISOPROF_EWS, "NUL byte in upgrade response");
    if (strncmp(ws->hdr, "HTTP/1.1 101", 12) != 0 && strncmp(ws->hdr, "HTTP/1.0 101", 12) != 0) {
        char why[120];
        const char *eol = strstr(ws->hdr, "\r\n");
        int n = eol ? (int)(eol - ws->hdr) : 40;
        snprintf(why, sizeof(why), "upgrade refused: %.*s", n > 60 ? 60 : n, ws->hdr);
        for (char *p = why; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                *p = '?';
        return ws_fail_code(ws, ISOPROF_EWS, why);
    }
    char v[256], expect[29];
    if (!header_value(ws->hdr, "Upgrade", v, sizeof(v)) || strcasecmp(v, "websocket") != 0)
        return ws_fail_code(ws, ISOPROF_EWS, "upgrade response without Upgrade: websocket");
    if (!header_value(ws->hdr, "Connection", v, sizeof(v)) || !contains_token(v, "upgrade"))
        return ws_fail_code(ws, ISOPROF_EWS, "upgrade response without Connection: upgrade");
    ws_accept_key(ws->key, expect);
    if (!header_value(ws->hdr, "Sec-WebSocket-Accept", v, sizeof(v)) || strcmp(v, expect) != 0)
        return ws_fail_code(ws, ISOPROF_EWS, "wrong Sec-WebSocket-Accept");
    isoprof_free(ws->hdr);
    ws->hdr = NULL;
    ws->state = WS_OPEN;
    return 0;
}

static int msg_append(struct ws_client *ws, const uint8_t *data, size_t n)
{
    size_t need = ws->msg_len + n + 1;
    if (need > ws->msg_cap) {
        size_t ncap = ws->msg_cap * 2;
        if (ncap < WS_MIN_GROW)
            ncap = WS_MIN_GROW;
        /* Never beyond what the current frame still brings. */
        size_t bound = ws->msg_len + n + (size_t)ws->frame_left + 1;
        if (ncap > bound)
            ncap = bound;
        if (ncap < need)
            ncap = need;
        char *nb = isoprof_realloc(ws->msg, ncap);
        if (nb == NULL)
            return -ENOMEM;
        ws->msg = nb;
        ws->msg_cap = ncap;
    }
    memcpy(ws->msg + ws->msg_len, data, n);
    ws->msg_len += n;
    return 0;
}

static int ws_frame_done(struct ws_client *ws)
{
    switch (ws->frame_op) {
    case WSLAY_CONNECTION_CLOSE:
        if (ws->state == WS_OPEN) {
            uint8_t code[2] = {0x03, 0xe8};
            ws_send_frame(ws, WSLAY_CONNECTION_CLOSE, code, 2);
        }
        ws_set_error(ws, "peer sent a close frame");
        ws_fail(ws, 0, NULL);
        return 1;
    case WSLAY_PING:
        /* Answering a server's ping is what the protocol asks; the client
         * never pings on its own. */
        if (ws->state == WS_OPEN)
            ws_send_frame(ws, WSLAY_PONG, ws->ctrl, ws->ctrl_len);
        return 0;
    case WSLAY_PONG:
        return 0;
    default:
        break;
    }
    if (!ws->frame_fin)
        return 0;
    char *m = ws->msg;
    size_t len = ws->msg_len;
    if (m == NULL) {
        m = isoprof_malloc(1);
        if (m == NULL)
            return -ENOMEM;
    }
    m[len] = '\0';
    ws->msg = NULL;
    ws->msg_len = ws->msg_cap = 0;
    ws->in_msg = 0;
    if (ws->state == WS_OPEN)
        ws->on_message(ws, m, len, ws->arg);
    else
        isoprof_free(m);
    return 0;
}

static int ws_frames_input(struct ws_client *ws, const uint8_t *data, size_t len)
{
    ws->in = data;
    ws->in_len = len;
    while (ws->state == WS_OPEN || ws->state == WS_CLOSING) {
        struct wslay_frame_iocb io;
        memset(&io, 0, sizeof(io));
        ssize_t r = wslay_frame_recv(ws->wf, &io);
        if (r == WSLAY_ERR_WANT_READ)
            break;
        if (r < 0)
            return ws_fail_code(ws, ISOPROF_EWS, "WebSocket protocol violation in a frame");
        if (!ws->in_frame) {
            ws->in_frame = 1;
            ws->frame_left = io.payload_length;
            ws->frame_op = io.opcode;
            ws->frame_fin = io.fin;
            ws->ctrl_len = 0;
            if (io.mask)
                return ws_fail_code(ws, ISOPROF_EWS, "masked frame from the server");
            if (wslay_is_ctrl_frame(io.opcode)) {
                if (io.payload_length > 125 || !io.fin)
                    return ws_fail_code(ws, ISOPROF_EWS, "bad control frame");
            } else if (io.opcode == WSLAY_CONTINUATION_FRAME) {
                if (!ws->in_msg)
                    return ws_fail_code(ws, ISOPROF_EWS, "continuation without a message");
            } else if (io.opcode == WSLAY_TEXT_FRAME || io.opcode == WSLAY_BINARY_FRAME) {
                if (ws->in_msg)
                    return ws_fail_code(ws, ISOPROF_EWS, "new message inside a fragmented one");
                ws->in_msg = 1;
            } else {
                return ws_fail_code(ws, ISOPROF_EWS, "unknown opcode");
            }
            if (!wslay_is_ctrl_frame(io.opcode) &&
                ws->msg_len + io.payload_length > ws->max_message) {
                char why[128];
                snprintf(why, sizeof(why), "message over the cap of %zu bytes (frame says %llu)",
                         ws->max_message, (unsigned long long)io.payload_length);
                return ws_fail_code(ws, ISOPROF_ETOOBIG, why);
            }
        }
        size_t n = io.data_length;
        if (n > ws->frame_left)
            return ws_fail_code(ws, ISOPROF_EWS, "frame longer than announced");
        ws->frame_left -= n;
        if (wslay_is_ctrl_frame(ws->frame_op)) {
            memcpy(ws->ctrl + ws->ctrl_len, io.data, n);
            ws->ctrl_len += n;
        } else if (n > 0) {
            int rc = msg_append(ws, io.data, n);
            if (rc != 0)
                return ws_fail_code(ws, rc, "out of memory for a message");
        }
        if (ws->frame_left == 0) {
            ws->in_frame = 0;
            int rc = ws_frame_done(ws);
            if (rc < 0)
                return ws_fail_code(ws, rc, "out of memory for a message");
            if (rc > 0)
                break;
        }
    }
    ws->in = NULL;
    ws->in_len = 0;
    return 0;
}

static int ws_input(struct ws_client *ws, const uint8_t *data, size_t len)
{
    if (ws->state == WS_HANDSHAKE) {
        size_t used = 0;
        int rc = ws_handshake_input(ws, data, len, &used);
        if (rc != 0)
            return rc;
        data += used;
        len -= used;
        if (ws->state != WS_OPEN)
            return 0;
        if (!ws->test_mode) {
            uv_timer_stop(&ws->timer);
            ws->on_open(ws, 0, ws->arg);
        }
    }
    if (len == 0 || (ws->state != WS_OPEN && ws->state != WS_CLOSING))
        return 0;
    return ws_frames_input(ws, data, len);
}

static void ws_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    (void)h;
    static char slab[256 << 10]; /* one loop thread; consumed before the next read */
    *buf = uv_buf_init(slab, sizeof(slab));
}

static void ws_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct ws_client *ws = s->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        char why[96];
        snprintf(why, sizeof(why), "%s",
                 nread == UV_EOF ? "connection closed by the target" : uv_strerror((int)nread));
        ws_fail(ws, ws->state == WS_CLOSING ? 0 : ISOPROF_ECLOSED, why);
        return;
    }
    int rc = ws_input(ws, (const uint8_t *)buf->base, (size_t)nread);
    if (rc != 0)
        ws_fail(ws, rc, NULL);
}

static void ws_on_timeout(uv_timer_t *t)
{
    struct ws_client *ws = t->data;
    ws_fail(ws, ISOPROF_ETIMEDOUT, "connect or upgrade timed out");
}

static void ws_on_connect(uv_connect_t *req, int status)
{
    struct ws_client *ws = req->data;
    if (ws->state == WS_CLOSED)
        return;
    if (status < 0) {
        char why[96];
        snprintf(why, sizeof(why), "connect: %s", uv_strerror(status));
        ws_fail(ws, status == UV_ECONNREFUSED ? -ECONNREFUSED : status, why);
        return;
    }
    uint8_t raw[16];
    if (getrandom(raw, sizeof(raw), 0) != sizeof(raw)) {
        ws_fail(ws, -EIO, "no random bytes for the key");
        return;
    }
    ws_base64(raw, sizeof(raw), ws->key, sizeof(ws->key));
    char req_text[1600];
    int n = snprintf(req_text, sizeof(req_text),
                     "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
                     ws->path, ws->host_header, ws->key);
    ws->state = WS_HANDSHAKE;
    int rc = ws_write_raw(ws, req_text, (size_t)n);
    if (rc == 0)
        rc = uv_read_start((uv_stream_t *)&ws->tcp, ws_on_alloc, ws_on_read);
    if (rc != 0)
        ws_fail(ws, rc, "cannot send the upgrade request");
}

static void ws_on_close_quiet(struct ws_client *ws, int status, void *arg)
{
    (void)ws;
    (void)status;
    (void)arg;
}

static struct ws_client *ws_new(size_t max_message)
{
    struct ws_client *ws = isoprof_calloc(1, sizeof(*ws));
    if (ws == NULL)
        return NULL;
    ws->max_message = max_message ? max_message : WS_DEFAULT_MAX_MESSAGE;
    struct wslay_frame_callbacks cb = {wf_on_send, wf_on_recv, wf_on_genmask};
    if (wslay_frame_context_init(&ws->wf, &cb, ws) != 0) {
        isoprof_free(ws);
        return NULL;
    }
    return ws;
}

int ws_connect(uv_loop_t *loop, const char *host, uint16_t port, const char *path,
               const struct ws_opts *o, ws_open_cb on_open, ws_message_cb on_message,
               ws_close_cb on_close, void *arg, struct ws_client **out)
{
    if (path == NULL || path[0] != '/' || strlen(path) >= sizeof(((struct ws_client *)0)->path))
        return -EINVAL;
    for (const char *p = path; *p; p++)
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
            return -EINVAL;
    struct sockaddr_storage addr;
    const char *lit = strcmp(host, "localhost") == 0 ? "127.0.0.1" : host;
    int v6 = 0;
    if (uv_ip4_addr(lit, port, (struct sockaddr_in *)&addr) != 0) {
        if (uv_ip6_addr(lit, port, (struct sockaddr_in6 *)&addr) != 0)
            return -EINVAL;
        v6 = 1;
    }
    struct ws_client *ws = ws_new(o ? o->max_message : 0);
    if (ws == NULL)
        return -ENOMEM;
    ws->loop = loop;
    ws->handshake_timeout_ms =
        o && o->handshake_timeout_ms ? o->handshake_timeout_ms : WS_DEFAULT_HANDSHAKE_MS;
    snprintf(ws->path, sizeof(ws->path), "%s", path);
    snprintf(ws->host_header, sizeof(ws->host_header), "%s%s%s:%u", v6 ? "[" : "", host,
             v6 ? "]" : "", (unsigned)port);
    ws->on_open = on_open;
    ws->on_message = on_message;
    ws->on_close = on_close;
    ws->arg = arg;
    int rc = uv_tcp_init(loop, &ws->tcp);
    if (rc != 0) {
        ws_free(ws);
        return rc;
    }
    uv_timer_init(loop, &ws->timer);
    ws->tcp.data = ws->timer.data = ws->connect_req.data = ws;
    uv_tcp_nodelay(&ws->tcp, 1);
    rc = uv_tcp_connect(&ws->connect_req, &ws->tcp, (const struct sockaddr *)&addr, ws_on_connect);
    if (rc != 0) {
        /* The caller hears only the return code: close the embedded
         * handles quietly and free in the last close callback. */
        ws->on_close = ws_on_close_quiet;
        ws->state = WS_CLOSED;
        ws->handles_open = 2;
        uv_close((uv_handle_t *)&ws->tcp, ws_on_handle_close);
        uv_close((uv_handle_t *)&ws->timer, ws_on_handle_close);
        return rc;
    }
    uv_timer_start(&ws->timer, ws_on_timeout, ws->handshake_timeout_ms, 0);
    *out = ws;
    return 0;
}

/* --- test hooks --- */

struct ws_client *ws_test_new(size_t max_message, const char *key, ws_message_cb on_message,
                              void *arg)
{
    struct ws_client *ws = ws_new(max_message);
    if (ws == NULL)
        return NULL;
    ws->test_mode = 1;
    ws->state = WS_HANDSHAKE;
    snprintf(ws->key, sizeof(ws->key), "%s", key);
    ws->on_message = on_message;
    ws->arg = arg;
    return ws;
}

int ws_test_feed(struct ws_client *ws, const uint8_t *data, size_t len)
{
    if (ws->state == WS_CLOSED)
        return ws->status ? ws->status : ISOPROF_ECLOSED;
    int rc = ws_input(ws, data, len);
    if (rc != 0)
        ws_fail(ws, rc, NULL);
    return rc;
}

void ws_test_free(struct ws_client *ws)
{
    ws_free(ws);
}

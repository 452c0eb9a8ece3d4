/*
 * ws.c - WebSocket client on libuv with wslay framing (see ws.h).
 *
 * States: CONNECTING (TCP connect in flight) -> HANDSHAKE (upgrade request
 * sent, reading the 101) -> OPEN -> CLOSING (a close frame was sent: we
 * wait for the peer's close, its EOF or a one-second timer) -> CLOSED
 * (handles closing; on_close runs from the last close callback, then the
 * object is freed). One uv_timer_t bounds connect + upgrade and then the
 * closing wait.
 *
 * Receive path: uv_read fills a read buffer allocated for that read and
 * freed when its callback returns (an idle session holds none); ws_input()
 * first completes the HTTP upgrade (response headers capped at 16 KiB,
 * status line, Upgrade, Connection and Sec-WebSocket-Accept checked), then
 * runs wslay_frame_recv over the rest. wslay pulls bytes through our recv
 * callback, which hands over what the current read brought and says "no
 * more" when it is used up (wslay then returns WANT_READ and keeps any
 * partial header in its own small buffer). Each chunk of payload is
 * appended to the message buffer, which grows only as bytes arrive (at
 * most doubling, and never past the end of the current frame), is charged
 * to the shared budget as it grows (struct ws_budget), and is
 * checked against max_message on the first chunk of every frame: a frame
 * that announces 300 MB is refused before anything is allocated for it.
 * A finished message is NUL-terminated and handed to on_message as is.
 *
 * Send path: wslay_frame_send writes header and masked payload through our
 * send callback straight into the uv_write request's buffer, sized up
 * front (payload + 14 header bytes), so a message is copied exactly once.
 * Queued bytes are counted and capped.
 *
 * Close: a close frame from the peer is answered with a close frame, and
 * the socket is closed once that answer has been written (the timer bounds
 * the wait). Close callbacks of both handles count down; the last one runs
 * on_close and frees, so nothing is freed inside a read or write callback.
 */
#include "ws.h"

#include "base.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <wslay/wslay.h>

#define WS_MAX_HEADER (16u << 10)
#define WS_MAX_PATH 2048
#define WS_DEFAULT_MAX_MESSAGE ((size_t)512 << 20)
#define WS_DEFAULT_HANDSHAKE_MS 5000
#define WS_CLOSE_WAIT_MS 1000
#define WS_MIN_GROW ((size_t)64 << 10)
#define WS_READ_BUF (64u << 10)

/* In front of every message buffer: what it is charged to, and how much.
 * 16 bytes, so the message itself keeps malloc's alignment. */
struct ws_msg_hdr {
    struct ws_budget *budget;
    size_t charged;
};
#define WS_MSG_HDR sizeof(struct ws_msg_hdr)
#define WS_FRAME_OVERHEAD 14 /* 2 + 8 length + 4 mask */
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

enum ws_state { WS_CONNECTING, WS_HANDSHAKE, WS_OPEN, WS_CLOSING, WS_CLOSED };

struct ws_write {
    uv_write_t req;
    struct ws_client *ws;
    size_t len;
    uint8_t data[];
};

struct ws_client {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect_req;
    enum ws_state state;
    int test_mode;
    int handles_open;
    int user_closed;     /* ws_close was called: no on_open, no on_message */
    int got_close;       /* the peer's close frame arrived: ignore what follows */
    int finish_on_flush; /* close handshake done: close the socket when writes drain */
    int paused;          /* ws_pause: the socket is not read */
    int status;
    char error[160];
    char key[25];
    char host_header[72];
    char *path;
    struct sockaddr_storage addr;

    /* upgrade response being collected */
    char *hdr;
    size_t hdr_len;

    wslay_frame_context_ptr wf;
    const uint8_t *in; /* bytes of the current read not yet given to wslay */
    size_t in_len;

    /* the frame being received */
    int in_frame;
    uint64_t frame_left;
    uint8_t frame_op;
    uint8_t frame_fin;
    uint8_t ctrl[125];
    size_t ctrl_len;

    /* the message being reassembled */
    char *msg;
    size_t msg_len, msg_cap;
    int in_msg;
    uint64_t msg_ns;  /* when its first frame arrived, at the latest (ws_message_arrival_ns) */
    uint64_t read_ns; /* the same for the bytes of the current read; 0: not asked yet */
    /* ... or dropped as it comes, because the budget could not hold it */
    int discarding;
    uint64_t drop_len;
    size_t drop_head_len;
    char drop_head[WS_DROP_HEAD];

    /* the frame being built by wslay_frame_send */
    uint8_t *out;
    size_t out_len, out_cap;
    size_t queued;

    size_t max_message;
    struct ws_budget *budget;
    ws_dropped_cb on_dropped;
    uint64_t handshake_timeout_ms;
    uint64_t message_timeout_ms;
    ws_open_cb on_open;
    ws_message_cb on_message;
    ws_close_cb on_close;
    void *arg;
};

/* --- the budget --- */

/* Takes n bytes for a buffer that will be cap bytes long; a buffer past
 * WS_SMALL_MESSAGE may not use the reserve. */
static int budget_take(struct ws_budget *b, size_t n, size_t cap)
{
    if (b == NULL || n == 0)
        return 0;
    size_t limit = b->limit;
    if (limit && cap > WS_SMALL_MESSAGE)
        limit = b->reserve < limit ? limit - b->reserve : 0;
    size_t cur = atomic_load(&b->used);
    do {
        if (b->limit && (n > limit || cur > limit - n)) {
            atomic_fetch_add(&b->refused, 1);
            return -ENOBUFS;
        }
    } while (!atomic_compare_exchange_weak(&b->used, &cur, cur + n));
    size_t now = cur + n, peak = atomic_load(&b->peak);
    while (now > peak && !atomic_compare_exchange_weak(&b->peak, &peak, now))
        ;
    return 0;
}

static void budget_give(struct ws_budget *b, size_t n)
{
    if (b != NULL && n != 0) {
        size_t was = atomic_fetch_sub(&b->used, n);
        ISOPROF_ASSERT(was >= n); /* a message given back twice */
    }
}

static struct ws_msg_hdr *msg_hdr(char *data)
{
    return (struct ws_msg_hdr *)(void *)(data - WS_MSG_HDR);
}

char *ws_msg_dup(const void *data, size_t len)
{
    if (len > SIZE_MAX - WS_MSG_HDR - 1)
        return NULL;
    char *base = isoprof_calloc(1, WS_MSG_HDR + len + 1);
    if (base == NULL)
        return NULL;
    if (len)
        memcpy(base + WS_MSG_HDR, data, len);
    return base + WS_MSG_HDR;
}

void ws_msg_free(char *data)
{
    if (data == NULL)
        return;
    struct ws_msg_hdr *h = msg_hdr(data);
    budget_give(h->budget, h->charged);
    isoprof_free(h);
}

/* --- SHA-1 (RFC 3174) and base64 (RFC 4648), for Sec-WebSocket-Accept --- */

struct sha1 {
    uint32_t h[5];
    uint64_t total;
    uint8_t buf[64];
    size_t n;
};

static uint32_t rol32(uint32_t x, int n)
{
    return (x << n) | (x >> (32 - n));
}

static void sha1_block(uint32_t h[5], const uint8_t *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5a827999u;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ed9eba1u;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8f1bbcdcu;
        } else {
            f = b ^ c ^ d;
            k = 0xca62c1d6u;
        }
        uint32_t t = rol32(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol32(b, 30);
        b = a;
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

static void sha1_init(struct sha1 *s)
{
    static const uint32_t iv[5] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u, 0xc3d2e1f0u};
    memcpy(s->h, iv, sizeof(iv));
    s->total = 0;
    s->n = 0;
}

static void sha1_update(struct sha1 *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    s->total += len;
    if (s->n > 0) {
        size_t take = 64 - s->n < len ? 64 - s->n : len;
        memcpy(s->buf + s->n, p, take);
        s->n += take;
        p += take;
        len -= take;
        if (s->n < 64)
            return;
        sha1_block(s->h, s->buf);
        s->n = 0;
    }
    for (; len >= 64; p += 64, len -= 64)
        sha1_block(s->h, p);
    memcpy(s->buf, p, len);
    s->n = len;
}

static void sha1_final(struct sha1 *s, uint8_t out[20])
{
    uint64_t bits = s->total * 8;
    s->buf[s->n++] = 0x80;
    if (s->n > 56) {
        memset(s->buf + s->n, 0, 64 - s->n);
        sha1_block(s->h, s->buf);
        s->n = 0;
    }
    memset(s->buf + s->n, 0, 56 - s->n);
    for (int i = 0; i < 8; i++)
        s->buf[63 - i] = (uint8_t)(bits >> (8 * i));
    sha1_block(s->h, s->buf);
    for (int i = 0; i < 5; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

void ws_sha1(const void *data, size_t len, uint8_t out[20])
{
    struct sha1 s;
    sha1_init(&s);
    sha1_update(&s, data, len);
    sha1_final(&s, out);
}

size_t ws_base64(const uint8_t *in, size_t len, char *out, size_t cap)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (len > (SIZE_MAX - 3) / 4 * 3 || cap < (len + 2) / 3 * 4 + 1)
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
    struct sha1 s;
    uint8_t dig[20];
    sha1_init(&s);
    sha1_update(&s, key, strlen(key));
    sha1_update(&s, WS_GUID, sizeof(WS_GUID) - 1);
    sha1_final(&s, dig);
    ws_base64(dig, sizeof(dig), out, 29);
}

/* --- errors and teardown --- */

static void ws_set_error(struct ws_client *ws, const char *msg)
{
    if (ws->error[0] == '\0' && msg != NULL)
        snprintf(ws->error, sizeof(ws->error), "%s", msg);
}

/* Record why and return code, for the receive path's early returns. */
static int ws_err(struct ws_client *ws, int code, const char *why)
{
    ws_set_error(ws, why);
    return code;
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
    ws_msg_free(ws->msg);
    isoprof_free(ws->path);
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

static void ws_close_handles(struct ws_client *ws)
{
    uv_read_stop((uv_stream_t *)&ws->tcp);
    uv_timer_stop(&ws->timer);
    ws->handles_open = 2;
    uv_close((uv_handle_t *)&ws->tcp, ws_on_handle_close);
    uv_close((uv_handle_t *)&ws->timer, ws_on_handle_close);
}

/*
 * End the connection with status. Only ever called from a libuv callback
 * or from ws_close, so on_open (for a connection that never opened) does
 * not run inside the caller's own call into this module.
 */
static void ws_fail(struct ws_client *ws, int status, const char *why)
{
    if (ws->state == WS_CLOSED)
        return;
    enum ws_state was = ws->state;
    ws->state = WS_CLOSED;
    ws->status = status;
    ws_set_error(ws, why);
    if (ws->test_mode)
        return;
    if (was < WS_OPEN && !ws->user_closed && ws->on_open != NULL)
        ws->on_open(ws, status, ws->arg);
    ws_close_handles(ws);
}

/* --- sending --- */

static ssize_t wf_on_send(const uint8_t *data, size_t len, int flags, void *user)
{
    (void)flags;
    struct ws_client *ws = user;
    if (ws->out == NULL || len > ws->out_cap - ws->out_len)
        return -1; /* the buffer is sized for the whole frame: cannot happen */
    memcpy(ws->out + ws->out_len, data, len);
    ws->out_len += len;
    return (ssize_t)len;
}

static int wf_on_genmask(uint8_t *buf, size_t len, void *user)
{
    (void)user;
    size_t got = 0;
    while (got < len) {
        ssize_t r = getrandom(buf + got, len - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

static ssize_t wf_on_recv(uint8_t *buf, size_t len, int flags, void *user)
{
    (void)flags;
    struct ws_client *ws = user;
    if (ws->in_len == 0)
        return -1; /* wslay turns this into WSLAY_ERR_WANT_READ */
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
    if (ws->state == WS_CLOSED)
        return; /* UV_ECANCELED while the handle closes */
    if (status < 0) {
        char why[96];
        snprintf(why, sizeof(why), "write: %s", uv_strerror(status));
        ws_fail(ws, ws->state == WS_CLOSING ? 0 : ISOPROF_ECLOSED, why);
        return;
    }
    if (ws->finish_on_flush && ws->queued == 0)
        ws_fail(ws, 0, NULL);
}

static struct ws_write *ws_write_new(struct ws_client *ws, size_t cap)
{
    struct ws_write *w = isoprof_malloc(sizeof(*w) + cap);
    if (w != NULL) {
        w->ws = ws;
        w->len = 0;
    }
    return w;
}

/* Hand w (w->len bytes) to libuv; w is consumed either way. */
static int ws_write_submit(struct ws_client *ws, struct ws_write *w)
{
    if (ws->test_mode) {
        isoprof_free(w);
        return 0;
    }
    uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)w->len);
    int rc = uv_write(&w->req, (uv_stream_t *)&ws->tcp, &b, 1, ws_on_write);
    if (rc != 0) {
        isoprof_free(w);
        return rc;
    }
    ws->queued += w->len;
    return 0;
}

/* One masked FIN frame. Only text, close and pong are ever sent. */
static int ws_send_frame(struct ws_client *ws, uint8_t opcode, const void *data, size_t len)
{
    if (len > WS_MAX_QUEUED - WS_FRAME_OVERHEAD ||
        ws->queued > WS_MAX_QUEUED - WS_FRAME_OVERHEAD - len)
        return -ENOBUFS;
    struct ws_write *w = ws_write_new(ws, len + WS_FRAME_OVERHEAD);
    if (w == NULL)
        return -ENOMEM;
    ws->out = w->data;
    ws->out_len = 0;
    ws->out_cap = len + WS_FRAME_OVERHEAD;
    struct wslay_frame_iocb io = {
        .fin = 1,
        .opcode = opcode,
        .mask = 1,
        .payload_length = len,
        .data = data,
        .data_length = len,
    };
    int rc = 0;
    do {
        ssize_t r = wslay_frame_send(ws->wf, &io);
        if (r < 0) {
            /* Only the mask callback can fail, and it does so before wslay
             * has changed its state, so the context stays usable. */
            rc = r == WSLAY_ERR_INVALID_CALLBACK ? -EIO : ISOPROF_EWS;
            break;
        }
        io.data += r;
        io.data_length -= (size_t)r;
    } while (io.data_length > 0);
    w->len = ws->out_len;
    ws->out = NULL;
    ws->out_len = ws->out_cap = 0;
    if (rc != 0) {
        isoprof_free(w);
        return rc;
    }
    return ws_write_submit(ws, w);
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

/* The close handshake is over on our side: close once our frames are out. */
static void ws_finish_when_flushed(struct ws_client *ws)
{
    if (ws->queued == 0)
        ws_fail(ws, 0, NULL);
    else
        ws->finish_on_flush = 1;
}

static void ws_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void ws_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void ws_on_message_timeout(uv_timer_t *t);

void ws_close(struct ws_client *ws)
{
    ws->user_closed = 1;
    if (ws->state == WS_CLOSED || ws->state == WS_CLOSING)
        return;
    if (ws->state != WS_OPEN) {
        ws_fail(ws, ISOPROF_ECLOSED, "closed before the upgrade finished");
        return;
    }
    static const uint8_t normal[2] = {0x03, 0xe8}; /* 1000 */
    if (ws_send_frame(ws, WSLAY_CONNECTION_CLOSE, normal, sizeof(normal)) != 0) {
        ws_fail(ws, 0, NULL);
        return;
    }
    ws->state = WS_CLOSING;
    if (!ws->test_mode)
        uv_timer_start(&ws->timer, ws_on_close_wait, WS_CLOSE_WAIT_MS, 0);
    if (ws->paused) {
        /* The peer's close frame must be read. */
        ws->paused = 0;
        int rc =
            ws->test_mode ? 0 : uv_read_start((uv_stream_t *)&ws->tcp, ws_on_alloc, ws_on_read);
        if (rc != 0) {
            char why[96];
            snprintf(why, sizeof(why), "resuming reads for the close: %s", uv_strerror(rc));
            ws_fail(ws, rc, why);
        }
    }
}

void ws_pause(struct ws_client *ws, int on)
{
    on = !!on;
    if (ws->state != WS_OPEN || ws->paused == on)
        return;
    ws->paused = on;
    if (ws->test_mode)
        return;
    if (on) {
        uv_read_stop((uv_stream_t *)&ws->tcp);
        /* A message cut by the pause is the consumer's wait, not the
         * peer's stall: its deadline starts again on resume. */
        if (ws->in_msg)
            uv_timer_stop(&ws->timer);
        return;
    }
    if (ws->in_msg)
        uv_timer_start(&ws->timer, ws_on_message_timeout, ws->message_timeout_ms, 0);
    int rc = uv_read_start((uv_stream_t *)&ws->tcp, ws_on_alloc, ws_on_read);
    if (rc != 0) {
        char why[96];
        snprintf(why, sizeof(why), "resuming reads: %s", uv_strerror(rc));
        ws_fail(ws, rc, why);
    }
}

/* --- the upgrade response --- */

static void trim(const char **p, const char **e)
{
    while (*p < *e && (**p == ' ' || **p == '\t'))
        (*p)++;
    while (*e > *p && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
        (*e)--;
}

static int span_eq(const char *p, const char *e, const char *s)
{
    size_t n = strlen(s);
    return (size_t)(e - p) == n && strncasecmp(p, s, n) == 0;
}

/* Does the comma-separated list [p, e) hold tok (case-insensitive)? */
static int has_token(const char *p, const char *e, const char *tok)
{
    while (p < e) {
        const char *c = memchr(p, ',', (size_t)(e - p));
        const char *te = c ? c : e, *tp = p;
        trim(&tp, &te);
        if (span_eq(tp, te, tok))
            return 1;
        p = c ? c + 1 : e;
    }
    return 0;
}

/* Copy a line for an error message, with anything unprintable replaced. */
static void ws_quote(char *dst, size_t cap, const char *p, size_t n)
{
    if (n > cap - 1)
        n = cap - 1;
    for (size_t i = 0; i < n; i++)
        dst[i] = (unsigned char)p[i] < 0x20 || (unsigned char)p[i] >= 0x7f ? '?' : p[i];
    dst[n] = '\0';
}

/*
 * Check the response head h[0..n): the status line and header lines, each
 * ending in CRLF (the blank line excluded).
 */
static int ws_check_upgrade(struct ws_client *ws, const char *h, size_t n)
{
    char why[140], q[72];
    if (memchr(h, '\0', n) != NULL)
        return ws_err(ws, ISOPROF_EWS, "NUL byte in the upgrade response");
    const char *end = h + n;
    const char *eol = memmem(h, n, "\r\n", 2);
    size_t sl = (size_t)(eol - h);
    /* "HTTP/1.x NNN" then the end of the line or a space */
    if (sl < 12 || memcmp(h, "HTTP/1.", 7) != 0 || h[7] < '0' || h[7] > '9' || h[8] != ' ' ||
        h[9] < '1' || h[9] > '5' || h[10] < '0' || h[10] > '9' || h[11] < '0' || h[11] > '9' ||
        (sl > 12 && h[12] != ' ')) {
        ws_quote(q, sizeof(q), h, sl);
        snprintf(why, sizeof(why), "not an HTTP response to the upgrade: \"%s\"", q);
        return ws_err(ws, ISOPROF_EWS, why);
    }
    if (memcmp(h + 9, "101", 3) != 0) {
        ws_quote(q, sizeof(q), h, sl);
        snprintf(why, sizeof(why), "upgrade refused: \"%s\"", q);
        return ws_err(ws, ISOPROF_EHTTP, why);
    }
    char expect[29];
    ws_accept_key(ws->key, expect);
    int upgrade = 0, connection = 0, accept = 0;
    for (const char *p = eol + 2; p < end;) {
        const char *le = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (le == NULL)
            le = end;
        const char *colon = memchr(p, ':', (size_t)(le - p));
        if (colon == NULL || colon == p)
            return ws_err(ws, ISOPROF_EWS, "malformed header line in the upgrade response");
        const char *np = p, *ne = colon, *vp = colon + 1, *ve = le;
        trim(&np, &ne);
        trim(&vp, &ve);
        if (span_eq(np, ne, "Upgrade"))
            upgrade = span_eq(vp, ve, "websocket");
        else if (span_eq(np, ne, "Connection"))
            connection = has_token(vp, ve, "upgrade");
        else if (span_eq(np, ne, "Sec-WebSocket-Accept"))
            accept = (size_t)(ve - vp) == 28 && memcmp(vp, expect, 28) == 0;
        else if ((span_eq(np, ne, "Sec-WebSocket-Extensions") ||
                  span_eq(np, ne, "Sec-WebSocket-Protocol")) &&
                 ve > vp)
            return ws_err(ws, ISOPROF_EWS,
                          "server chose an extension or subprotocol we never offered");
        p = le + 2;
    }
    if (!upgrade)
        return ws_err(ws, ISOPROF_EWS, "upgrade response without Upgrade: websocket");
    if (!connection)
        return ws_err(ws, ISOPROF_EWS, "upgrade response without Connection: upgrade");
    if (!accept)
        return ws_err(ws, ISOPROF_EWS, "missing or wrong Sec-WebSocket-Accept");
    return 0;
}

/* Collect the response head; *used = how many of data's bytes belong to it. */
static int ws_handshake_input(struct ws_client *ws, const uint8_t *data, size_t len, size_t *used)
{
    if (ws->hdr == NULL) {
        ws->hdr = isoprof_malloc(WS_MAX_HEADER);
        if (ws->hdr == NULL)
            return ws_err(ws, -ENOMEM, "out of memory for the upgrade response");
    }
    size_t before = ws->hdr_len;
    size_t take = len < WS_MAX_HEADER - before ? len : WS_MAX_HEADER - before;
    memcpy(ws->hdr + before, data, take);
    ws->hdr_len += take;
    size_t from = before > 3 ? before - 3 : 0; /* the terminator may straddle reads */
    char *term = memmem(ws->hdr + from, ws->hdr_len - from, "\r\n\r\n", 4);
    if (term == NULL) {
        *used = take;
        if (ws->hdr_len >= WS_MAX_HEADER)
            return ws_err(ws, ISOPROF_EWS, "upgrade response head over 16 KiB");
        return 0;
    }
    size_t head = (size_t)(term - ws->hdr) + 4;
    *used = head - before;
    int rc = ws_check_upgrade(ws, ws->hdr, head - 2);
    isoprof_free(ws->hdr);
    ws->hdr = NULL;
    ws->hdr_len = 0;
    if (rc == 0)
        ws->state = WS_OPEN;
    return rc;
}

/* --- frames --- */

static void ws_on_message_timeout(uv_timer_t *t);

/* The budget cannot hold the message: keep its first bytes, give its
 * buffer back, and drop the rest as it comes (ws_frame_end reports it). */
static void msg_discard(struct ws_client *ws, const uint8_t *data, size_t n)
{
    size_t h = ws->msg_len < WS_DROP_HEAD ? ws->msg_len : WS_DROP_HEAD;
    if (h)
        memcpy(ws->drop_head, ws->msg, h);
    size_t more = n < WS_DROP_HEAD - h ? n : WS_DROP_HEAD - h;
    memcpy(ws->drop_head + h, data, more);
    ws->drop_head_len = h + more;
    ws->drop_len = ws->msg_len + n;
    ws_msg_free(ws->msg);
    ws->msg = NULL;
    ws->msg_len = ws->msg_cap = 0;
    ws->discarding = 1;
}

static int msg_append(struct ws_client *ws, const uint8_t *data, size_t n)
{
    if (ws->discarding) {
        ws->drop_len += n;
        return 0;
    }
    size_t need = ws->msg_len + n + 1; /* <= max_message + 1: checked at the frame's start */
    if (need > ws->msg_cap) {
        size_t ncap = ws->msg_cap < WS_MIN_GROW / 2 ? WS_MIN_GROW : ws->msg_cap * 2;
        /* Never past the end of the message's last frame, so a 300 MB
         * header alone allocates nothing; inside a fragmented message the
         * buffer doubles, so 1-byte frames cost no realloc each (and never
         * past the cap). frame_left still includes these n bytes. */
        size_t bound = ws->msg_len + (size_t)ws->frame_left + 1;
        if (ws->frame_fin && ncap > bound)
            ncap = bound;
        if (ncap > ws->max_message + 1)
            ncap = ws->max_message + 1;
        if (ncap < need)
            ncap = need;
        size_t old = ws->msg ? ws->msg_cap + WS_MSG_HDR : 0;
        if (budget_take(ws->budget, ncap + WS_MSG_HDR - old, ncap) != 0) {
            if (ws->on_dropped != NULL) {
                msg_discard(ws, data, n);
                return 0;
            }
            char why[160];
            snprintf(why, sizeof(why),
                     "message of %zu bytes so far refused: the agent's budget for messages "
                     "(%zu bytes) is in use",
                     ws->msg_len + n, ws->budget->limit);
            return ws_err(ws, ISOPROF_ETOOBIG, why);
        }
        char *base = isoprof_realloc(ws->msg ? (char *)msg_hdr(ws->msg) : NULL, ncap + WS_MSG_HDR);
        if (base == NULL) {
            budget_give(ws->budget, ncap + WS_MSG_HDR - old);
            return ws_err(ws, -ENOMEM, "out of memory for a message");
        }
        struct ws_msg_hdr *h = (struct ws_msg_hdr *)(void *)base;
        h->budget = ws->budget;
        h->charged = ncap + WS_MSG_HDR;
        ws->msg = base + WS_MSG_HDR;
        ws->msg_cap = ncap;
    }
    memcpy(ws->msg + ws->msg_len, data, n);
    ws->msg_len += n;
    return 0;
}

/* The jiffy the kernel stamps a segment's arrival with is at most 10 ms
 * (HZ >= 100). */
#define WS_JIFFY_NS (10ull * 1000000ull)

/* When the bytes of the current read reached the socket, at the latest:
 * now, or, when the loop read them late, the arrival of the last data
 * segment the kernel took for this connection (TCP_INFO's
 * tcpi_last_data_recv, in ms of jiffies) plus a jiffy. Every byte of this
 * read arrived no later than that segment, so this is an upper bound that
 * leaves out the time the bytes waited for a busy loop to read them. */
static uint64_t ws_read_arrival(struct ws_client *ws)
{
    if (ws->read_ns != 0)
        return ws->read_ns;
    uint64_t now = isoprof_now_mono_ns();
    ws->read_ns = now;
    uv_os_fd_t fd;
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    if (ws->test_mode || uv_fileno((const uv_handle_t *)&ws->tcp, &fd) != 0 ||
        getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_last_data_recv) + sizeof(ti.tcpi_last_data_recv))
        return now;
    uint64_t ago = (uint64_t)ti.tcpi_last_data_recv * 1000000ull;
    if (ago > WS_JIFFY_NS && ago - WS_JIFFY_NS < now)
        ws->read_ns = now - (ago - WS_JIFFY_NS);
    return ws->read_ns;
}

uint64_t ws_message_arrival_ns(const struct ws_client *ws)
{
    return ws->msg_ns;
}

static int ws_frame_begin(struct ws_client *ws, const struct wslay_frame_iocb *io)
{
    if (io->rsv != 0)
        return ws_err(ws, ISOPROF_EWS, "frame with reserved bits set (no extension was agreed)");
    if (io->mask)
        return ws_err(ws, ISOPROF_EWS, "masked frame from the server");
    switch (io->opcode) {
    case WSLAY_CONTINUATION_FRAME:
        if (!ws->in_msg)
            return ws_err(ws, ISOPROF_EWS, "continuation frame outside a message");
        break;
    case WSLAY_TEXT_FRAME:
    case WSLAY_BINARY_FRAME:
        if (ws->in_msg)
            return ws_err(ws, ISOPROF_EWS, "new message inside a fragmented one");
        ws->in_msg = 1;
        ws->msg_ns = ws_read_arrival(ws);
        /* A message that stalls half sent holds its bytes (and the
         * budget's): it has WS_MESSAGE_MS to end (from the resume, when it
         * begins in bytes read before a pause). */
        if (ws->state == WS_OPEN && !ws->test_mode && !ws->paused)
            uv_timer_start(&ws->timer, ws_on_message_timeout, ws->message_timeout_ms, 0);
        break;
    case WSLAY_CONNECTION_CLOSE:
    case WSLAY_PING:
    case WSLAY_PONG:
        break; /* wslay has checked FIN and length <= 125 */
    default:
        return ws_err(ws, ISOPROF_EWS, "frame with an unknown opcode");
    }
    size_t so_far = ws->discarding ? (size_t)ws->drop_len : ws->msg_len;
    if (!wslay_is_ctrl_frame(io->opcode) && io->payload_length > ws->max_message - so_far) {
        char why[140];
        snprintf(why, sizeof(why), "message over the cap of %zu bytes (a frame of %llu after %zu)",
                 ws->max_message, (unsigned long long)io->payload_length, so_far);
        return ws_err(ws, ISOPROF_ETOOBIG, why);
    }
    ws->in_frame = 1;
    ws->frame_left = io->payload_length;
    ws->frame_op = io->opcode;
    ws->frame_fin = io->fin;
    ws->ctrl_len = 0;
    return 0;
}

static int ws_frame_data(struct ws_client *ws, const uint8_t *data, size_t n)
{
    if (n > ws->frame_left)
        return ws_err(ws, ISOPROF_EWS, "frame longer than announced");
    if (wslay_is_ctrl_frame(ws->frame_op)) {
        memcpy(ws->ctrl + ws->ctrl_len, data, n); /* frame_left <= 125 - ctrl_len */
        ws->ctrl_len += n;
    } else if (n > 0 && !ws->user_closed) {
        /* After ws_close nothing is delivered, so nothing is kept. */
        int rc = msg_append(ws, data, n);
        if (rc != 0)
            return rc;
    }
    ws->frame_left -= n;
    return 0;
}

static void ws_on_peer_close(struct ws_client *ws)
{
    ws->got_close = 1;
    if (ws->state == WS_OPEN) {
        char why[80];
        if (ws->ctrl_len >= 2)
            snprintf(why, sizeof(why), "the target closed the connection (code %u)",
                     (unsigned)ws->ctrl[0] << 8 | ws->ctrl[1]);
        else
            snprintf(why, sizeof(why), "the target closed the connection");
        ws_set_error(ws, why);
        /* Answer with a close frame, echoing the code as RFC 6455 5.5.1 asks. */
        static const uint8_t normal[2] = {0x03, 0xe8};
        const uint8_t *code = ws->ctrl_len >= 2 ? ws->ctrl : normal;
        ws->state = WS_CLOSING;
        if (ws_send_frame(ws, WSLAY_CONNECTION_CLOSE, code, 2) != 0) {
            ws_fail(ws, 0, NULL);
            return;
        }
        if (!ws->test_mode)
            uv_timer_start(&ws->timer, ws_on_close_wait, WS_CLOSE_WAIT_MS, 0);
    }
    ws_finish_when_flushed(ws);
}

static int ws_frame_end(struct ws_client *ws)
{
    switch (ws->frame_op) {
    case WSLAY_CONNECTION_CLOSE:
        ws_on_peer_close(ws);
        return 0;
    case WSLAY_PING:
        /* We never ping, so a pong cannot be mistaken for unsolicited; a
         * pong that does not fit the write queue is simply skipped. */
        if (ws->state == WS_OPEN)
            (void)ws_send_frame(ws, WSLAY_PONG, ws->ctrl, ws->ctrl_len);
        return 0;
    case WSLAY_PONG:
        return 0;
    default:
        break;
    }
    if (!ws->frame_fin)
        return 0;
    if (ws->state == WS_OPEN && !ws->test_mode)
        uv_timer_stop(&ws->timer); /* the message's deadline */
    if (ws->discarding) {
        ws->discarding = 0;
        ws->in_msg = 0;
        if (ws->state == WS_OPEN && !ws->user_closed)
            ws->on_dropped(ws, ws->drop_head, ws->drop_head_len, ws->drop_len, ws->arg);
        return 0;
    }
    char *m = ws->msg;
    size_t len = ws->msg_len;
    ws->msg = NULL;
    ws->msg_len = ws->msg_cap = 0;
    ws->in_msg = 0;
    if (ws->state != WS_OPEN || ws->user_closed) {
        ws_msg_free(m);
        return 0;
    }
    /* An empty message: a buffer of its own, charged to nothing. */
    if (m == NULL && (m = ws_msg_dup("", 0)) == NULL)
        return ws_err(ws, -ENOMEM, "out of memory for a message");
    m[len] = '\0';
    ws->on_message(ws, m, len, ws->arg);
    return 0;
}

static int ws_frames_input(struct ws_client *ws, const uint8_t *data, size_t len)
{
    int rc = 0;
    ws->in = data;
    ws->in_len = len;
    while ((ws->state == WS_OPEN || ws->state == WS_CLOSING) && !ws->got_close) {
        struct wslay_frame_iocb io;
        memset(&io, 0, sizeof(io));
        ssize_t r = wslay_frame_recv(ws->wf, &io);
        if (r == WSLAY_ERR_WANT_READ)
            break;
        if (r < 0) {
            rc = ws_err(ws, ISOPROF_EWS, "malformed frame header");
            break;
        }
        if (!ws->in_frame && (rc = ws_frame_begin(ws, &io)) != 0)
            break;
        if ((rc = ws_frame_data(ws, io.data, io.data_length)) != 0)
            break;
        if (ws->frame_left == 0) {
            ws->in_frame = 0;
            if ((rc = ws_frame_end(ws)) != 0)
                break;
        }
    }
    ws->in = NULL;
    ws->in_len = 0;
    return rc;
}

static int ws_input(struct ws_client *ws, const uint8_t *data, size_t len)
{
    if (ws->state == WS_HANDSHAKE) {
        size_t used = 0;
        int rc = ws_handshake_input(ws, data, len, &used);
        if (rc != 0 || ws->state != WS_OPEN)
            return rc;
        data += used;
        len -= used;
        if (!ws->test_mode)
            uv_timer_stop(&ws->timer);
        if (ws->on_open != NULL && !ws->user_closed)
            ws->on_open(ws, 0, ws->arg);
    }
    if (len == 0 || (ws->state != WS_OPEN && ws->state != WS_CLOSING))
        return 0;
    return ws_frames_input(ws, data, len);
}

/* --- libuv callbacks --- */

/* The read buffer is allocated when the socket is readable and freed when
 * the read callback returns (ws_input copies or consumes every byte), so
 * an idle session holds none: a thousand sessions cost no 64 MiB. */
static void ws_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    (void)h;
    char *b = isoprof_malloc(WS_READ_BUF);
    *buf = uv_buf_init(b, b ? WS_READ_BUF : 0);
}

static void ws_read(struct ws_client *ws, ssize_t nread, const uv_buf_t *buf)
{
    if (nread == 0 || ws->state == WS_CLOSED)
        return;
    if (nread < 0) {
        char why[96];
        if (nread == UV_EOF)
            snprintf(why, sizeof(why), "the target dropped the connection%s",
                     ws->state == WS_HANDSHAKE ? " during the upgrade" : "");
        else
            snprintf(why, sizeof(why), "read: %s", uv_strerror((int)nread));
        /* After our close frame a plain EOF is the expected end. */
        ws_fail(ws, ws->state == WS_CLOSING ? 0 : ISOPROF_ECLOSED,
                ws->state == WS_CLOSING ? NULL : why);
        return;
    }
    ws->read_ns = 0; /* asked for when a message begins in these bytes */
    int rc = ws_input(ws, (const uint8_t *)buf->base, (size_t)nread);
    if (rc != 0)
        ws_fail(ws, rc, NULL);
}

static void ws_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    ws_read(s->data, nread, buf);
    isoprof_free(buf->base);
}

static void ws_on_message_timeout(uv_timer_t *t)
{
    struct ws_client *ws = t->data;
    char why[96];
    snprintf(why, sizeof(why), "a message was not complete %llu ms after it began",
             (unsigned long long)ws->message_timeout_ms);
    ws_fail(ws, ISOPROF_ETIMEDOUT, why);
}

static void ws_on_timeout(uv_timer_t *t)
{
    struct ws_client *ws = t->data;
    ws_fail(ws, ISOPROF_ETIMEDOUT,
            ws->state == WS_CONNECTING ? "TCP connect timed out" : "WebSocket upgrade timed out");
}

static void ws_on_connect(uv_connect_t *req, int status)
{
    struct ws_client *ws = req->data;
    if (ws->state == WS_CLOSED)
        return; /* UV_ECANCELED: we are closing */
    if (status < 0) {
        char why[96];
        snprintf(why, sizeof(why), "connect to %s: %s", ws->host_header, uv_strerror(status));
        ws_fail(ws, status, why); /* libuv codes are negative errno on Unix */
        return;
    }
    uint8_t raw[16];
    if (wf_on_genmask(raw, sizeof(raw), NULL) != 0) {
        ws_fail(ws, -EIO, "no random bytes for the upgrade key");
        return;
    }
    ws_base64(raw, sizeof(raw), ws->key, sizeof(ws->key));
    static const char fmt[] = "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
                              "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                              "Sec-WebSocket-Version: 13\r\n\r\n";
    size_t cap = sizeof(fmt) + strlen(ws->path) + strlen(ws->host_header) + sizeof(ws->key);
    struct ws_write *w = ws_write_new(ws, cap);
    if (w == NULL) {
        ws_fail(ws, -ENOMEM, "out of memory for the upgrade request");
        return;
    }
    w->len = (size_t)snprintf((char *)w->data, cap, fmt, ws->path, ws->host_header, ws->key);
    ws->state = WS_HANDSHAKE;
    int rc = ws_write_submit(ws, w);
    if (rc == 0)
        rc = uv_read_start((uv_stream_t *)&ws->tcp, ws_on_alloc, ws_on_read);
    if (rc != 0) {
        char why[96];
        snprintf(why, sizeof(why), "sending the upgrade request: %s", uv_strerror(rc));
        ws_fail(ws, rc, why);
    }
}

static void ws_on_close_quiet(struct ws_client *ws, int status, void *arg)
{
    (void)ws;
    (void)status;
    (void)arg;
}

static struct ws_client *ws_new(size_t max_message, struct ws_budget *budget)
{
    struct ws_client *ws = isoprof_calloc(1, sizeof(*ws));
    if (ws == NULL)
        return NULL;
    ws->max_message = max_message ? max_message : WS_DEFAULT_MAX_MESSAGE;
    ws->budget = budget;
    struct wslay_frame_callbacks cb = {wf_on_send, wf_on_recv, wf_on_genmask};
    if (wslay_frame_context_init(&ws->wf, &cb, ws) != 0) {
        isoprof_free(ws);
        return NULL;
    }
    return ws;
}

/* Parse host into addr and the Host header value. */
static int ws_parse_host(struct ws_client *ws, const char *host, uint16_t port)
{
    char lit[48];
    size_t n = strlen(host);
    int bracket = n >= 2 && host[0] == '[' && host[n - 1] == ']';
    if (strcmp(host, "localhost") == 0) {
        snprintf(lit, sizeof(lit), "127.0.0.1");
    } else {
        const char *p = bracket ? host + 1 : host;
        size_t pl = bracket ? n - 2 : n;
        if (pl == 0 || pl >= sizeof(lit))
            return -EINVAL;
        memcpy(lit, p, pl);
        lit[pl] = '\0';
    }
    int v6 = 0;
    if (!bracket && uv_ip4_addr(lit, port, (struct sockaddr_in *)&ws->addr) == 0) {
        /* uv_ip4_addr accepts trailing junk on some versions: insist on a literal */
        unsigned char tmp[16];
        if (uv_inet_pton(AF_INET, lit, tmp) != 0)
            return -EINVAL;
    } else if (strchr(lit, '%') == NULL &&
               uv_ip6_addr(lit, port, (struct sockaddr_in6 *)&ws->addr) == 0) {
        v6 = 1;
    } else {
        return -EINVAL;
    }
    snprintf(ws->host_header, sizeof(ws->host_header), "%s%s%s:%u", v6 ? "[" : "",
             strcmp(host, "localhost") == 0 ? host : lit, v6 ? "]" : "", (unsigned)port);
    return 0;
}

static int ws_valid_path(const char *path)
{
    if (path == NULL || path[0] != '/')
        return 0;
    size_t i = 0;
    for (; path[i] != '\0'; i++)
        if ((unsigned char)path[i] <= ' ' || (unsigned char)path[i] >= 0x7f || i >= WS_MAX_PATH)
            return 0;
    return 1;
}

int ws_connect(uv_loop_t *loop, const char *host, uint16_t port, const char *path,
               const struct ws_opts *o, ws_open_cb on_open, ws_message_cb on_message,
               ws_close_cb on_close, void *arg, struct ws_client **out)
{
    if (loop == NULL || host == NULL || on_message == NULL || on_close == NULL || out == NULL ||
        !ws_valid_path(path))
        return -EINVAL;
    struct ws_client *ws = ws_new(o ? o->max_message : 0, o ? o->budget : NULL);
    if (ws != NULL && o != NULL)
        ws->on_dropped = o->on_dropped;
    if (ws == NULL)
        return -ENOMEM;
    int rc = ws_parse_host(ws, host, port);
    if (rc != 0)
        goto fail_free;
    if ((ws->path = isoprof_strdup(path)) == NULL) {
        rc = -ENOMEM;
        goto fail_free;
    }
    ws->handshake_timeout_ms =
        o && o->handshake_timeout_ms ? o->handshake_timeout_ms : WS_DEFAULT_HANDSHAKE_MS;
    ws->message_timeout_ms = o && o->message_timeout_ms ? o->message_timeout_ms : WS_MESSAGE_MS;
    ws->on_open = on_open;
    ws->on_message = on_message;
    ws->on_close = on_close;
    ws->arg = arg;
    if ((rc = uv_tcp_init(loop, &ws->tcp)) != 0)
        goto fail_free;
    uv_timer_init(loop, &ws->timer); /* cannot fail */
    ws->tcp.data = ws->timer.data = ws->connect_req.data = ws;
    uv_tcp_nodelay(&ws->tcp, 1);
    rc = uv_tcp_connect(&ws->connect_req, &ws->tcp, (const struct sockaddr *)&ws->addr,
                        ws_on_connect);
    if (rc != 0) {
        /* The caller hears only the return code: close the embedded
         * handles quietly and free in the last close callback. */
        ws->on_close = ws_on_close_quiet;
        ws->state = WS_CLOSED;
        ws_close_handles(ws);
        return rc;
    }
    uv_timer_start(&ws->timer, ws_on_timeout, ws->handshake_timeout_ms, 0);
    *out = ws;
    return 0;

fail_free:
    ws_free(ws);
    return rc;
}

/* --- test hooks --- */

struct ws_client *ws_test_new(size_t max_message, const char *key, ws_message_cb on_message,
                              void *arg)
{
    struct ws_client *ws = ws_new(max_message, NULL);
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
    ws->read_ns = 0;
    int rc = ws_input(ws, data, len);
    if (rc != 0)
        ws_fail(ws, rc, NULL);
    return rc;
}

size_t ws_test_msg_cap(const struct ws_client *ws)
{
    return ws->msg_cap;
}

void ws_test_set_budget(struct ws_client *ws, struct ws_budget *b, ws_dropped_cb on_dropped)
{
    ws->budget = b;
    ws->on_dropped = on_dropped;
}

void ws_test_free(struct ws_client *ws)
{
    ws_free(ws);
}

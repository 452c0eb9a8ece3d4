/*
 * ws.h - a WebSocket client on libuv, for inspector sessions.
 *
 * Framing is wslay's (libwslay, frame API); I/O, the HTTP upgrade and
 * message reassembly are ours, so the buffer that collects a message is
 * this module's own, capped, and handed to the caller without a copy (a
 * CPU profile can be 20 MB and more). Client frames are always masked; the
 * client never sends ping or fragmented frames (Node drops the connection
 * on them), only whole text frames and one close frame.
 *
 * Thread: loop thread only. Every callback runs on the loop thread.
 */
#ifndef ISOPROF_WS_H
#define ISOPROF_WS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct ws_client;

struct ws_opts {
    size_t max_message;            /* bytes; 0 = 512 MiB. Past it the session is dropped */
    uint64_t handshake_timeout_ms; /* connect + upgrade; 0 = 5000 */
};

/* The upgrade finished: status 0, or an error, after which on_close follows. */
typedef void (*ws_open_cb)(struct ws_client *ws, int status, void *arg);
/* A whole message, NUL-terminated (data[len] == 0). data is transferred:
 * the callee frees it with isoprof_free. */
typedef void (*ws_message_cb)(struct ws_client *ws, char *data, size_t len, void *arg);
/* Exactly once, last. status 0: closed cleanly by either side; else
 * ISOPROF_ETOOBIG, ISOPROF_EWS, ISOPROF_ECLOSED (peer went away),
 * ISOPROF_ETIMEDOUT, or a negative errno (-ECONNREFUSED ...). The client is
 * freed after this returns; ws must not be used again. */
typedef void (*ws_close_cb)(struct ws_client *ws, int status, void *arg);

/*
 * Connect to host:port (an IPv4 or IPv6 literal, or "localhost") and
 * upgrade at path, sending `Host: host:port` as inspectors require.
 * o may be NULL for defaults. On success *out is valid until on_close has
 * returned. Errors (no callback is then called): -EINVAL (host is not a
 * literal, path not starting with '/'), -ENOMEM, a libuv error.
 */
int ws_connect(uv_loop_t *loop, const char *host, uint16_t port, const char *path,
               const struct ws_opts *o, ws_open_cb on_open, ws_message_cb on_message,
               ws_close_cb on_close, void *arg, struct ws_client **out);

/*
 * Queue one text message (copied, masked, one frame). Errors: -ENOTCONN
 * when not open, -ENOBUFS when more than 16 MiB are already queued,
 * -ENOMEM.
 */
int ws_send_text(struct ws_client *ws, const char *data, size_t len);

/* Begin closing: a close frame if open, then the socket. No message is
 * delivered after this call; on_close follows asynchronously. Idempotent. */
void ws_close(struct ws_client *ws);

/* Why the connection failed or closed, for logs ("" if it did not). */
const char *ws_last_error(const struct ws_client *ws);

/* Exposed for the unit tests. */
void ws_sha1(const void *data, size_t len, uint8_t out[20]);
size_t ws_base64(const uint8_t *in, size_t len, char *out, size_t cap);
void ws_accept_key(const char *key, char out[29]);

/*
 * Feed bytes as if they came from the socket (handshake response and/or
 * frames). For the fuzz target and unit tests; the client must have been
 * made with ws_test_new. Returns 0 or the error that would close it.
 */
struct ws_client *ws_test_new(size_t max_message, const char *key, ws_message_cb on_message,
                              void *arg);
int ws_test_feed(struct ws_client *ws, const uint8_t *data, size_t len);
void ws_test_free(struct ws_client *ws);

#endif

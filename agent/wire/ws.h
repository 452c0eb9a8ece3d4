/*
 * ws.h - a WebSocket client on libuv, for inspector sessions.
 *
 * Framing is wslay's (libwslay, low-level frame API); the TCP I/O, the HTTP
 * upgrade and message reassembly are ours, so the buffer that collects a
 * message is this module's own, capped, and handed to the caller without a
 * copy (a CPU profile can be 20 MB and more).
 *
 * What goes on the wire from us: the upgrade request, whole (FIN) masked
 * text frames, one close frame, and a pong only in answer to a ping from the
 * server. The client never pings on its own and never fragments: Node drops
 * the connection on both. From the server we accept fragmented messages,
 * interleaved control frames, text and binary messages. UTF-8 is not
 * validated here (the JSON parser does it).
 *
 * Thread: every function is for the loop thread only, and every callback
 * runs on the loop thread, never from inside a call into this API (except
 * where a function says so).
 */
#ifndef ISOPROF_WS_H
#define ISOPROF_WS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct ws_client;

/*
 * A byte budget that several clients' message buffers draw from, so that
 * what the peers can make the agent hold adds up to a known bound however
 * many sessions there are. A buffer is charged as it grows and the charge
 * travels with the delivered message until ws_msg_free. Counters are
 * atomic: a message may be freed on another thread (the writer converts
 * off the loop). Zero-initialise, then set limit.
 */
struct ws_budget {
    size_t limit;             /* bytes; 0 = no limit */
    size_t reserve;           /* the last bytes of limit, kept for messages of at most
                                 WS_SMALL_MESSAGE: a few big ones cannot starve the small */
    _Atomic size_t used;      /* bytes charged now */
    _Atomic size_t peak;      /* the most ever charged at once */
    _Atomic uint64_t refused; /* growths refused (each dropped a message) */
};

/* Messages up to this size may use the budget's reserve. */
#define WS_SMALL_MESSAGE ((size_t)256 << 10)
/* A message must be complete this long after its first frame began
 * (ws_opts.message_timeout_ms, 0 = this). */
#define WS_MESSAGE_MS 30000
/* Bytes of a dropped message kept for ws_dropped_cb: enough for the
 * envelope and id of a message from a worker's session (cdp.h). */
#define WS_DROP_HEAD 256

/*
 * A message the budget could not hold: its bytes were read and dropped as
 * they came, and this is called when it ended, with its first head_len
 * (at most WS_DROP_HEAD) bytes, borrowed for the call, and its length. The
 * connection carries on. Not called after ws_close.
 */
typedef void (*ws_dropped_cb)(struct ws_client *ws, const char *head, size_t head_len, uint64_t len,
                              void *arg);

struct ws_opts {
    size_t max_message;            /* bytes; 0 = 512 MiB. Past it the connection is dropped */
    uint64_t handshake_timeout_ms; /* TCP connect + upgrade; 0 = 5000 */
    uint64_t message_timeout_ms;   /* first frame to last of one message; 0 = WS_MESSAGE_MS.
                                      Past it the connection ends (ISOPROF_ETIMEDOUT) */
    struct ws_budget *budget;      /* NULL: none; borrowed, must outlive the client and
                                      every message it delivered */
    ws_dropped_cb on_dropped;      /* NULL: a message the budget cannot hold ends the
                                      connection (ISOPROF_ETOOBIG) */
};

/* Bytes of frames the client may have queued for writing; ws_send_text
 * refuses a message that would exceed it. */
#define WS_MAX_QUEUED ((size_t)16 << 20)

/*
 * The upgrade finished: status 0 (messages may now be sent), or an error,
 * after which on_close follows. Not called at all if ws_close was called
 * before the upgrade finished.
 */
typedef void (*ws_open_cb)(struct ws_client *ws, int status, void *arg);

/*
 * A whole message (text or binary), NUL-terminated (data[len] == 0; the
 * payload itself may contain NUL bytes). Ownership of data is transferred:
 * the callee frees it with ws_msg_free (never isoprof_free: the buffer
 * carries its budget charge). Not called after ws_close.
 */
typedef void (*ws_message_cb)(struct ws_client *ws, char *data, size_t len, void *arg);

/*
 * Exactly once, last. status 0: closed cleanly (a close handshake by either
 * side, or ws_close on an open connection). Else ISOPROF_ETOOBIG (a message
 * over max_message, or one the budget could not hold), ISOPROF_EWS (protocol violation or a bad
 * upgrade answer), ISOPROF_EHTTP (the server answered the upgrade with an HTTP status other than
 * 101, e.g. 404 for a target that went away), ISOPROF_ECLOSED (the peer dropped the TCP connection,
 * or ws_close before the upgrade finished), ISOPROF_ETIMEDOUT (connect + upgrade too slow), or a
 * negative errno (-ECONNREFUSED, -ENOMEM, ...). ws_last_error(ws) says why in words. The client is
 * freed right after this returns: ws must not be used again.
 */
typedef void (*ws_close_cb)(struct ws_client *ws, int status, void *arg);

/*
 * ws_message_arrival_ns - during a ws_message_cb: when the message's first
 * frame reached the socket, at the latest, on the monotonic clock in ns.
 * The time it was read, or earlier when the loop read it late: the kernel's
 * arrival time of the last segment read with it, plus 10 ms for that
 * stamp's granularity (TCP_INFO). So a round trip measured to it leaves out
 * the time the reply waited for a busy loop, and never comes out shorter
 * than the reply took to arrive. Loop thread.
 */
uint64_t ws_message_arrival_ns(const struct ws_client *ws);

/*
 * ws_msg_free - free a message delivered to a ws_message_cb and give its
 * bytes back to the budget it was charged to. NULL is a no-op. Any thread.
 */
void ws_msg_free(char *data);

/*
 * ws_msg_dup - a message buffer as the client delivers them (len bytes of
 * data and a NUL, charged to no budget), for code that feeds messages to a
 * consumer of ws_message_cb without a socket: the CDP layer's test hooks
 * and fuzz target. NULL on ENOMEM. Free with ws_msg_free.
 */
char *ws_msg_dup(const void *data, size_t len);

/*
 * ws_connect - connect to host:port and upgrade at path.
 *
 * host: an IPv4 or IPv6 literal ("127.0.0.1", "::1" or "[::1]"), or
 *   "localhost" (= 127.0.0.1); no name resolution. It is sent as
 *   `Host: host:port`, which is what inspectors require (Node rejects
 *   other names). Borrowed for the call.
 * path: the request target, starting with '/', printable ASCII without
 *   spaces, under 2 KiB. Borrowed for the call (copied).
 * o: options, or NULL for the defaults. Borrowed for the call.
 * on_open may be NULL; on_message and on_close are required.
 * arg: passed to every callback, never dereferenced here.
 *
 * On success *out is valid until on_close has returned. Errors (then no
 * callback is ever called): -EINVAL (bad host, path or callbacks), -ENOMEM,
 * a libuv error from uv_tcp_connect. Even after an error the loop must run
 * once more for the handles to be closed and the memory released.
 */
int ws_connect(uv_loop_t *loop, const char *host, uint16_t port, const char *path,
               const struct ws_opts *o, ws_open_cb on_open, ws_message_cb on_message,
               ws_close_cb on_close, void *arg, struct ws_client **out);

/*
 * ws_send_text - queue one text message: copied, masked, one FIN frame.
 * data is borrowed for the call. Errors: -ENOTCONN (not open, or closing),
 * -ENOBUFS (the message would take the write queue past WS_MAX_QUEUED),
 * -ENOMEM, -EIO (no random bytes for the mask), a libuv write error.
 * A failed send leaves the connection as it was.
 */
int ws_send_text(struct ws_client *ws, const char *data, size_t len);

/*
 * ws_pause - stop reading from the peer (on), or read again (0): back
 * pressure for a consumer that cannot keep up with what the peer sends
 * (the peer's writes then wait in its socket buffers). Messages of the
 * bytes already read are still delivered. While paused, a message cut in
 * the middle has no deadline; it gets a whole WS_MESSAGE_MS again on
 * resume. Only an open connection pauses; ws_close resumes reading (the
 * peer's close frame is awaited). A resume that fails closes the
 * connection (on_close follows).
 */
void ws_pause(struct ws_client *ws, int on);

/*
 * ws_close - begin closing. Open: a close frame (1000) is sent and the
 * socket is closed when the peer answers, drops the connection, or after
 * one second. Before the upgrade finished: the connection is abandoned
 * (on_close gets ISOPROF_ECLOSED, on_open is not called). No message is
 * delivered after this call; on_close follows asynchronously. Idempotent,
 * and harmless from inside any of the callbacks, on_close included.
 */
void ws_close(struct ws_client *ws);

/* Why the connection failed or closed, for logs; "" if nothing went wrong.
 * Borrowed: valid until on_close has returned. */
const char *ws_last_error(const struct ws_client *ws);

/*
 * Pieces exposed for the unit tests. ws_sha1 is SHA-1 (RFC 3174).
 * ws_base64 writes the standard padded encoding of in[0..len) and a NUL to
 * out, returning the length written, or 0 if cap is too small (it needs
 * 4*ceil(len/3)+1). ws_accept_key computes base64(SHA1(key + GUID)), the
 * Sec-WebSocket-Accept the server must answer for key (RFC 6455 4.2.2).
 */
void ws_sha1(const void *data, size_t len, uint8_t out[20]);
size_t ws_base64(const uint8_t *in, size_t len, char *out, size_t cap);
void ws_accept_key(const char *key, char out[29]);

/*
 * A client with no socket, for the fuzz target and the unit tests: it is
 * in the upgrade state as if the request with Sec-WebSocket-Key `key` (24
 * characters) had been sent. ws_test_feed runs bytes through the same
 * receive path as data read from the socket (upgrade response, then
 * frames). Frames it would send are built (and masked) and then dropped.
 * on_message gets messages as from a real client. ws_test_feed returns 0
 * or the error that closes the client; once closed, it returns that status
 * (ISOPROF_ECLOSED after a clean close). ws_test_msg_cap is the capacity
 * of the reassembly buffer (to check that a length header alone allocates
 * nothing). ws_test_free releases everything, including a message not yet
 * complete. NULL from ws_test_new: out of memory.
 */
struct ws_client *ws_test_new(size_t max_message, const char *key, ws_message_cb on_message,
                              void *arg);
int ws_test_feed(struct ws_client *ws, const uint8_t *data, size_t len);
size_t ws_test_msg_cap(const struct ws_client *ws);
/* Charge this client's message buffers to b from now on; on_dropped as in
 * struct ws_opts (may be NULL). */
void ws_test_set_budget(struct ws_client *ws, struct ws_budget *b, ws_dropped_cb on_dropped);
void ws_test_free(struct ws_client *ws);

#endif

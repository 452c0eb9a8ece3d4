/*
 * cdp.h - Chrome DevTools Protocol sessions over ws.h.
 *
 * Requests go out as {"id":N,"method":M,"params":P} with an incrementing
 * id; every request has a timeout (a target that does not know a session
 * id never answers). Replies are matched by id; events (no id) go to one
 * callback.
 *
 * The loop thread never parses a big message. V8 writes "id" first
 * ({"id":N,"result":...}), so a message over CDP_PARSE_MAX is routed by a
 * bounded peek at its prefix and handed unparsed to the pending call, which
 * must have asked for that with CDP_RAW (Profiler.stop,
 * HeapProfiler.getSamplingProfile); the caller parses it on the thread
 * pool. A big message for a call without CDP_RAW completes that call with
 * ISOPROF_ETOOBIG; one with no matching id (or a big event) is counted in
 * dropped_big and dropped.
 *
 * Bad input from the target: a message that is not valid JSON closes the
 * session (status ISOPROF_EJSON, the reason in cdp_last_error; the daemon
 * reattaches later). A JSON value that is not an object, a reply whose id
 * is not pending (unknown, or already timed out), an event without a
 * method: counted in bad_messages and ignored.
 *
 * Thread: every function is for the loop thread only; every callback runs
 * on the loop thread from a libuv callback, never from inside the call into
 * this module that caused it.
 */
#ifndef ISOPROF_CDP_H
#define ISOPROF_CDP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include <yajl/yajl_tree.h>

struct ws_budget;

/* Messages up to this size are parsed on the loop thread; larger ones are
 * only ever handed on raw. */
#define CDP_PARSE_MAX ((size_t)256 << 10)
/* ... and nested at most this deep (deeper ones are routed the same way). */
#define CDP_PARSE_MAX_DEPTH 64
/* cdp_call flag: hand the reply over unparsed (r->raw), whatever its size. */
#define CDP_RAW 0x1u
/* Used when cdp_call is given a timeout of 0. */
#define CDP_DEFAULT_TIMEOUT_MS 30000u

struct cdp_session;

struct cdp_reply {
    /* 0; ISOPROF_ECDP (an error reply, or a reply without a result
     * object); ISOPROF_ETOOBIG (a reply over CDP_PARSE_MAX to a call
     * without CDP_RAW); ISOPROF_ETIMEDOUT; ISOPROF_ECLOSED (the session
     * ended first) */
    int status;
    /* ISOPROF_ECDP/ETOOBIG: why (the target's "message" for an error
     * reply). Borrowed: valid during the callback. NULL otherwise. */
    const char *error_message;
    /* status 0, small reply: the parsed "result" object (non-NULL without
     * CDP_RAW; with CDP_RAW set only if the reply was small). Borrowed:
     * valid during the callback. */
    yajl_val result;
    /* CDP_RAW and status 0: the whole reply message, unparsed,
     * NUL-terminated (raw[raw_len] == 0). Owned by the session; the
     * callback may take it by copying the pointer and setting raw = NULL,
     * and then frees it with ws_msg_free (it carries its charge to the
     * session's budget). NULL otherwise. */
    char *raw;
    size_t raw_len;
};

/* A call finished (exactly once per successful cdp_call). r is borrowed
 * for the callback. */
typedef void (*cdp_reply_cb)(struct cdp_session *s, struct cdp_reply *r, void *arg);
/* The session is open (0), or failed to open (a ws_close_cb status; then
 * on_close follows). Not called if cdp_close came first. */
typedef void (*cdp_open_cb)(struct cdp_session *s, int status, void *arg);
/* An event. method and params (NULL if absent or not an object) are
 * borrowed for the callback. */
typedef void (*cdp_event_cb)(struct cdp_session *s, const char *method, yajl_val params, void *arg);
/* Exactly once, last. Every pending call has been completed with
 * ISOPROF_ECLOSED before. status: 0 (closed cleanly by either side),
 * ISOPROF_EJSON (the target sent invalid JSON), or any ws_close_cb status.
 * s is freed after this returns. */
typedef void (*cdp_close_cb)(struct cdp_session *s, int status, void *arg);

/*
 * cdp_open - open a session to ws://host:port/path (see ws_connect for
 * host and path, both borrowed for the call). max_message caps one message
 * (0 = the ws default, 512 MiB); past it the session is dropped with
 * ISOPROF_ETOOBIG. budget (NULL: none; borrowed, must outlive the session
 * and its messages) is the byte budget its message buffers draw from
 * (struct ws_budget); a message it cannot hold is read and dropped, and
 * the call it answers (found by its id) fails with ISOPROF_ETOOBIG while
 * the session carries on. on_open and on_event may be NULL; on_close is required.
 * arg goes to every session callback. *out is valid until on_close has
 * returned. Errors (no callback is then called): -EINVAL, -ENOMEM, a libuv
 * error (see ws_connect).
 */
int cdp_open(uv_loop_t *loop, const char *host, uint16_t port, const char *path, size_t max_message,
             struct ws_budget *budget, cdp_open_cb on_open, cdp_event_cb on_event,
             cdp_close_cb on_close, void *arg, struct cdp_session **out);

/*
 * cdp_call - send method (a plain name: [A-Za-z0-9._], 1..128 chars) with
 * params_json (the text of one JSON object built by the caller, or NULL for
 * {}; checked, borrowed for the call). timeout_ms: 0 = the default. flags:
 * 0 or CDP_RAW. On success cb is called exactly once with arg, later (a
 * reply, the timeout, or the session's end). Errors (cb is then never
 * called): -EINVAL (bad method or params), -ENOTCONN (not open, or
 * closing), -ENOBUFS (write queue full), -ENOMEM, or another ws_send_text
 * error.
 */
int cdp_call(struct cdp_session *s, const char *method, const char *params_json,
             uint64_t timeout_ms, unsigned flags, cdp_reply_cb cb, void *arg);

/* Close the session; pending calls complete with ISOPROF_ECLOSED, then
 * on_close follows (status 0 if the session was open, ISOPROF_ECLOSED if it
 * was still connecting). Idempotent; harmless from any callback. */
void cdp_close(struct cdp_session *s);

struct cdp_stats {
    uint64_t sent;         /* requests written */
    uint64_t replies;      /* replies that matched a pending call (results and errors) */
    uint64_t events;       /* events delivered */
    uint64_t errors;       /* calls completed with an error other than a timeout */
    uint64_t timeouts;     /* calls that timed out */
    uint64_t bad_messages; /* not JSON, not an object, unknown id, event without method */
    uint64_t dropped_big;  /* over CDP_PARSE_MAX and not for a CDP_RAW call, or over the cap */
};
void cdp_get_stats(const struct cdp_session *s, struct cdp_stats *st);

/* Why the session closed (for logs), "" if no reason is known. Borrowed:
 * valid until on_close has returned. */
const char *cdp_last_error(const struct cdp_session *s);

/* Exposed for tests: the id of a message that starts {"id":N (whitespace
 * allowed, within its first 64 bytes), or -1. */
int64_t cdp_peek_id(const char *msg, size_t len);

/*
 * Test hooks (the unit tests and the fuzz target): a session with no
 * socket, open, whose messages come from cdp_test_feed (data copied; the
 * same dispatch as a message from the target). cdp_test_expect registers
 * a pending call with the given id and flags, as cdp_call would after
 * sending it. After a protocol error the session is closing and ignores
 * what follows. cdp_test_free fails what is pending (ISOPROF_ECLOSED) and
 * frees the session. NULL / -ENOMEM on allocation failure.
 */
struct cdp_session *cdp_test_new(cdp_event_cb on_event, void *arg);
int cdp_test_expect(struct cdp_session *s, uint64_t id, unsigned flags, cdp_reply_cb cb, void *arg);
int cdp_test_feed(struct cdp_session *s, const char *data, size_t len);
void cdp_test_free(struct cdp_session *s);

#endif

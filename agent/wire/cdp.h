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
 * ISOPROF_ETOOBIG; a big event goes unparsed to the big-event callback,
 * if the owner set one (cdp_set_big_event_cb: a heap snapshot's chunks);
 * anything else is counted in dropped_big and dropped.
 *
 * Bad input from the target: a message that is not valid JSON closes the
 * session (status ISOPROF_EJSON, the reason in cdp_last_error; the daemon
 * reattaches later). A JSON value that is not an object, a reply whose id
 * is not pending (unknown, or already timed out), an event without a
 * method: counted in bad_messages and ignored.
 *
 * Worker sessions (Node's NodeWorker domain, one WebSocket for the main
 * thread and every worker thread): cdp_call_on sends a call to the isolate
 * of worker session S as NodeWorker.sendMessageToWorker {sessionId: S,
 * message: "<the call as a JSON string>"}, outer and inner message with
 * the same id. Its answer comes back as the event
 * NodeWorker.receivedMessageFromWorker {sessionId, message}: the inner
 * message is parsed like a message of the main session (a reply completes
 * the call with that id and that session, never another session's; an
 * event goes to on_event with the session), and a big one is routed by a
 * bounded peek at its envelope (cdp_peek_worker). The outer call's own
 * reply only matters when it is an error (the session is unknown to the
 * target): the call then fails with it. Bad input inside a worker's
 * message (not JSON, not an object, nested too deep to route) is counted
 * in bad_messages and reported to on_worker_error with its session; the
 * WebSocket and every other session carry on. A worker that never answers
 * (Node does not answer for an unknown session) times out like any call.
 *
 * Thread: every function is for the loop thread only, except
 * cdp_unwrap_worker and cdp_peek_worker (pure, any thread); every callback
 * runs on the loop thread from a libuv callback, never from inside the
 * call into this module that caused it.
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
/* The longest worker session id accepted (Node's are "1", "2", ...). */
#define CDP_SESSION_MAX 64
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
    /* raw is the envelope of a worker session's message (a
     * NodeWorker.receivedMessageFromWorker event); the reply is the string
     * in it: cdp_unwrap_worker gives its text. 0 for the main session. */
    int raw_nested;
    /* A reply: when its message reached the socket, at the latest
     * (ws_message_arrival_ns: the time a busy loop took to read it is left
     * out), on the monotonic clock in ns. 0 for a timeout or the session's
     * end. */
    uint64_t arrival_ns;
};

/* A call finished (exactly once per successful cdp_call). r is borrowed
 * for the callback. */
typedef void (*cdp_reply_cb)(struct cdp_session *s, struct cdp_reply *r, void *arg);
/* The session is open (0), or failed to open (a ws_close_cb status; then
 * on_close follows). Not called if cdp_close came first. */
typedef void (*cdp_open_cb)(struct cdp_session *s, int status, void *arg);
/* An event. session: NULL for the main session's, else the worker
 * session it came from. method, params (NULL if absent or not an object)
 * and session are borrowed for the callback. */
typedef void (*cdp_event_cb)(struct cdp_session *s, const char *session, const char *method,
                             yajl_val params, void *arg);
/* A worker session sent what is not a CDP message (why says what). The
 * session's own calls are not failed: they time out, unless the owner
 * drops the session (cdp_forget). */
typedef void (*cdp_worker_error_cb)(struct cdp_session *s, const char *session, const char *why,
                                    void *arg);
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

/*
 * cdp_call_on - cdp_call to worker session `session` (NULL: the main
 * session, as cdp_call). session: 1..CDP_SESSION_MAX bytes of
 * [A-Za-z0-9._-], else -EINVAL. The reply's raw, for CDP_RAW, is the
 * envelope (raw_nested set). Errors as cdp_call.
 */
int cdp_call_on(struct cdp_session *s, const char *session, const char *method,
                const char *params_json, uint64_t timeout_ms, unsigned flags, cdp_reply_cb cb,
                void *arg);

/* 1 when sid is a session id cdp_call_on takes: 1..CDP_SESSION_MAX bytes
 * of [A-Za-z0-9._-]. */
int cdp_valid_session(const char *sid);

/* A worker session ended (detachedFromWorker, or its owner dropped it):
 * its pending calls complete with ISOPROF_ECLOSED, later, from a libuv
 * callback; what it sends afterwards is counted and ignored. */
void cdp_forget(struct cdp_session *s, const char *session);

/* Set the worker-error callback (NULL: none); arg is the session's. */
void cdp_set_worker_error_cb(struct cdp_session *s, cdp_worker_error_cb cb);

/* The longest method name cdp_peek_method reads. */
#define CDP_METHOD_MAX 64
/* An event of the main session too big (or deep) to parse on the loop
 * (a worker session's big event is not one: it comes in its
 * NodeWorker.receivedMessageFromWorker envelope, whose method it gets):
 * method (peeked from its first bytes, borrowed) and the whole message
 * data[0..len), unparsed. Return 1 to take data (then free it with
 * ws_msg_free, from any thread: it carries its charge to the session's
 * budget), 0 to let it be counted in dropped_big and dropped. A
 * HeapProfiler.addHeapSnapshotChunk of a recent V8 is 1 MiB. */
typedef int (*cdp_big_event_cb)(struct cdp_session *s, const char *method, char *data, size_t len,
                                void *arg);
/* Set the big-event callback (NULL: big events are dropped); arg is the
 * session's. */
void cdp_set_big_event_cb(struct cdp_session *s, cdp_big_event_cb cb);

/*
 * cdp_unwrap_worker - the text of the message inside the envelope
 * raw[0..len) of a worker session's message: *out (NUL-terminated, *out_len
 * bytes; isoprof_free) holds params.message unescaped. Streams: no tree;
 * memory is the output. 0, ISOPROF_EJSON (not JSON, or no string
 * params.message), -ENOMEM. Any thread.
 */
int cdp_unwrap_worker(const char *raw, size_t len, char **out, size_t *out_len);
/* The same for the string params.<key> of any message (a big event's
 * text, read off the loop): params an object in the top object, key a
 * string member of it (the first, if several); *out holds its bytes, NULs
 * from \u0000 included, and a NUL after them. Any thread. */
int cdp_param_string(const char *raw, size_t len, const char *key, char **out, size_t *out_len);

/*
 * cdp_peek_method - from the first bytes of msg (at most 256 are read),
 * written {"method":"M", as V8 writes an event: M (letters, digits, '.'
 * and '_', at most cap - 1 bytes) into method. 0, or -1. Any thread.
 */
int cdp_peek_method(const char *msg, size_t len, char *method, size_t cap);

/*
 * cdp_peek_worker - from the first bytes of msg (at most 256 are read),
 * written as Node writes them: {"method":"NodeWorker.receivedMessageFromWorker",
 * "params":{"sessionId":"S","message":"{\"id\":N, ...: the session S
 * (into sid, at most CDP_SESSION_MAX bytes + NUL) and the id N. 0, or -1
 * when msg does not start that way. Any thread.
 */
int cdp_peek_worker(const char *msg, size_t len, char sid[CDP_SESSION_MAX + 1], int64_t *id);

/* Stop reading the target's messages (on) or read them again (0), for a
 * consumer that cannot keep up (ws_pause): replies and events wait in the
 * socket meanwhile, and calls may time out. No-op once closing. */
void cdp_pause(struct cdp_session *s, int on);

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
/* cdp_call and cdp_call_on on a test session write here instead of a
 * socket: the last message sent (NUL-terminated, borrowed until the next
 * call), or NULL. */
const char *cdp_test_last_sent(const struct cdp_session *s);
/* Complete what a test session's timer would at now_ms: calls whose
 * timeout passed (ISOPROF_ETIMEDOUT; a test session's clock starts at 0)
 * and forgotten ones (ISOPROF_ECLOSED). */
void cdp_test_tick(struct cdp_session *s, uint64_t now_ms);
void cdp_test_free(struct cdp_session *s);

#endif

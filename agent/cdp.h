/*
 * cdp.h - Chrome DevTools Protocol sessions over ws.h.
 *
 * Requests {"id":N,"method":M,"params":P} with an incrementing id; each has
 * a timeout (a target that does not know a session id never answers).
 * Replies are matched by id; events (no id) go to one callback.
 *
 * The loop thread never parses a big message: V8 writes "id" first, so a
 * message over CDP_PARSE_MAX is routed by a bounded peek at its prefix and
 * handed unparsed to the pending call, which must have asked for it with
 * CDP_RAW (Profiler.stop, HeapProfiler.getSamplingProfile). Anything else
 * that big is counted and dropped.
 *
 * Thread: loop thread only.
 */
#ifndef ISOPROF_CDP_H
#define ISOPROF_CDP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include <yajl/yajl_tree.h>

#define CDP_PARSE_MAX (256u << 10)
#define CDP_RAW 0x1u

struct cdp_session;

struct cdp_reply {
    int status;                /* 0, ISOPROF_ECDP (error reply), ISOPROF_ETIMEDOUT, ISOPROF_ECLOSED,
                                  ISOPROF_ETOOBIG (a big reply to a non-RAW call) */
    const char *error_message; /* ISOPROF_ECDP: the target's message; borrowed for the call */
    yajl_val result;           /* parsed "result" of a small reply; borrowed for the call */
    char *raw;                 /* CDP_RAW: the whole reply text, NUL-terminated; the callback
                                  may take it (set raw = NULL, free with isoprof_free) */
    size_t raw_len;
};

typedef void (*cdp_reply_cb)(struct cdp_session *s, struct cdp_reply *r, void *arg);
/* Session open (0) or failed (then close_cb follows). */
typedef void (*cdp_open_cb)(struct cdp_session *s, int status, void *arg);
/* An event; method and params borrowed for the call (params may be NULL). */
typedef void (*cdp_event_cb)(struct cdp_session *s, const char *method, yajl_val params,
                             void *arg);
/* Exactly once, last: every pending call has been completed with
 * ISOPROF_ECLOSED before. s is freed after it returns. */
typedef void (*cdp_close_cb)(struct cdp_session *s, int status, void *arg);

/*
 * Open a session to ws://host:port/path. max_message caps one message.
 * *out valid until on_close returned. Errors (no callbacks then): see
 * ws_connect.
 */
int cdp_open(uv_loop_t *loop, const char *host, uint16_t port, const char *path,
             size_t max_message, cdp_open_cb on_open, cdp_event_cb on_event,
             cdp_close_cb on_close, void *arg, struct cdp_session **out);

/*
 * Send method with params_json (a JSON object text built by the caller,
 * or NULL for none). cb is called exactly once (reply, error, timeout or
 * close), never from inside cdp_call. Errors (cb not called): -ENOTCONN,
 * -ENOMEM, -ENOBUFS, -EINVAL (method not a plain name).
 */
int cdp_call(struct cdp_session *s, const char *method, const char *params_json,
             uint64_t timeout_ms, unsigned flags, cdp_reply_cb cb, void *arg);

/* Close the session; on_close follows. Idempotent. */
void cdp_close(struct cdp_session *s);

struct cdp_stats {
    uint64_t sent, replies, events, errors, timeouts, bad_messages, dropped_big;
};
void cdp_get_stats(const struct cdp_session *s, struct cdp_stats *st);

/* Why the session closed (for logs), "" if no reason is known. */
const char *cdp_last_error(const struct cdp_session *s);

/* Exposed for tests: the id at the start of a message, or -1. */
int64_t cdp_peek_id(const char *msg, size_t len);

#endif

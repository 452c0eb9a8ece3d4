/*
 * fuzz_cdp - libFuzzer target for CDP message dispatch (agent/wire/cdp.c): what
 * an inspector session sends the agent, routed to the call waiting for it
 * or to the event callback, through the same code as a message read from
 * the socket (cdp_test_feed).
 *
 * Input: messages separated by the byte 0x1e (ASCII record separator, which
 * JSON never needs raw). Before they are fed, calls 1 to 4 are pending on
 * the main session and 5 to 8 on worker session "1" (as a Node worker's,
 * sent through cdp_call_on): odd ones with CDP_RAW (as Profiler.stop and
 * getSamplingProfile), even ones without (as Runtime.getHeapUsage). A
 * message that starts with the byte 0x1d is fed wrapped: the rest of it
 * becomes the message string of a NodeWorker.receivedMessageFromWorker
 * envelope for session "1". Every reply must be well-formed as the header
 * promises: a status among those documented, a raw reply NUL-terminated
 * (and nested exactly when it answers a worker call), an error with a
 * message; each call answered at most once; a worker's reply never
 * completes a main-session call. Events too big or deep to parse go to the
 * big-event callback with a method of the documented characters, taken
 * (and read with cdp_param_string, as the daemon's snapshot does off the
 * loop) or left, in turn. Every message is also given to the pure readers
 * cdp_peek_method and cdp_param_string, whose outputs must be what they
 * promise.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cdp.h"
#include "ws.h"

#define CALLS 8
#define MAIN_CALLS 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int answered[CALLS + 1];

static void on_reply(struct cdp_session *s, struct cdp_reply *r, void *arg)
{
    (void)s;
    uintptr_t id = (uintptr_t)arg;
    if (id < 1 || id > CALLS || answered[id]++)
        abort(); /* answered twice */
    switch (r->status) {
    case 0:
        if (r->raw != NULL && r->raw[r->raw_len] != '\0')
            abort();
        if (r->raw != NULL && id % 2 == 0)
            abort(); /* raw only for CDP_RAW calls */
        if (r->raw != NULL && (r->raw_nested != 0) != (id > MAIN_CALLS))
            abort(); /* a worker's raw reply is its envelope, the main session's is not */
        if (id % 2 == 1 && r->raw != NULL) {
            char *mine = r->raw; /* take it, as the target does */
            r->raw = NULL;
            ws_msg_free(mine);
        }
        break;
    case ISOPROF_ECDP:
    case ISOPROF_ETOOBIG:
        if (r->error_message == NULL)
            abort();
        break;
    case ISOPROF_ECLOSED:
        break;
    default:
        abort();
    }
}

static void on_event(struct cdp_session *s, const char *session, const char *method,
                     yajl_val params, void *arg)
{
    (void)s;
    if (session != NULL && strcmp(session, "1") != 0)
        abort(); /* a session that was never named */
    (void)arg;
    if (method == NULL || (params != NULL && !YAJL_IS_OBJECT(params)))
        abort();
}

static int valid_method(const char *m)
{
    size_t n = strlen(m);
    if (n == 0 || n > CDP_METHOD_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = m[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_'))
            return 0;
    }
    return 1;
}

/* A params.<key> string read back: NUL-terminated at its length. */
static void check_param(const char *msg, size_t len, const char *key)
{
    char *out = NULL;
    size_t n = 0;
    int rc = cdp_param_string(msg, len, key, &out, &n);
    if (rc == 0 && (out == NULL || out[n] != '\0'))
        abort();
    if (rc != 0 && rc != ISOPROF_EJSON && rc != -ENOMEM)
        abort();
    isoprof_free(out);
}

static unsigned big_events;

static int on_big_event(struct cdp_session *s, const char *method, char *msg, size_t len, void *arg)
{
    (void)s, (void)arg;
    if (method == NULL || !valid_method(method))
        abort();
    if (big_events++ % 2)
        return 0; /* left: counted and dropped by the session */
    check_param(msg, len, "chunk");
    ws_msg_free(msg);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char method[CDP_METHOD_MAX + 1];
    if (cdp_peek_method((const char *)data, size, method, sizeof(method)) == 0 &&
        !valid_method(method))
        abort();
    check_param((const char *)data, size, "chunk");
    struct cdp_session *s = cdp_test_new(on_event, NULL);
    if (s == NULL)
        return 0;
    cdp_set_big_event_cb(s, on_big_event);
    memset(answered, 0, sizeof(answered));
    for (uintptr_t id = 1; id <= CALLS; id++)
        if (id <= MAIN_CALLS ? cdp_test_expect(s, id, id % 2 ? CDP_RAW : 0, on_reply, (void *)id)
                             : cdp_call_on(s, "1", "Profiler.stop", NULL, 0, id % 2 ? CDP_RAW : 0,
                                           on_reply, (void *)id))
            goto out;
    const uint8_t *p = data, *end = data + size;
    while (p <= end) {
        const uint8_t *sep = memchr(p, 0x1e, (size_t)(end - p));
        const uint8_t *q = sep ? sep : end;
        if (q > p && *p == 0x1d) {
            /* the rest, as a worker session's message */
            struct isoprof_buf b;
            isoprof_buf_init(&b, 6 * (size_t)(q - p) + 128);
            isoprof_buf_puts(&b, "{\"method\":\"NodeWorker.receivedMessageFromWorker\","
                                 "\"params\":{\"sessionId\":\"1\",\"message\":");
            isoprof_json_strn(&b, (const char *)p + 1, (size_t)(q - p) - 1);
            if (isoprof_buf_puts(&b, "}}") == 0)
                cdp_test_feed(s, b.data, b.len);
            isoprof_buf_free(&b);
        } else {
            cdp_test_feed(s, (const char *)p, (size_t)(q - p));
        }
        p = q + 1;
    }
out:
    cdp_test_free(s);
    for (int id = 1; id <= CALLS; id++)
        if (answered[id] > 1)
            abort();
    return 0;
}

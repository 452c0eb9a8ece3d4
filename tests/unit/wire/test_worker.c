/*
 * test_worker.c - cdp.c's worker sessions (Node's NodeWorker domain) on a
 * test session: the envelope a call goes out in, replies routed by id and
 * session (never to another session's call), the envelope's own reply,
 * events, bad input from one worker, a big or deep reply handed over raw
 * and unwrapped, a forgotten session, the envelope peek.
 */
#include "base.h"
#include "cdp.h"
#include "test.h"
#include "ws.h"

#include <errno.h>

struct got {
    int calls;
    int status;
    char err[200];
    char *raw;
    size_t raw_len;
    int nested;
    double used;
};

static void on_reply(struct cdp_session *s, struct cdp_reply *r, void *arg)
{
    (void)s;
    struct got *g = arg;
    static const char *used_path[] = {"usedSize", NULL};
    g->calls++;
    g->status = r->status;
    snprintf(g->err, sizeof(g->err), "%s", r->error_message ? r->error_message : "");
    yajl_val u = r->result ? yajl_tree_get(r->result, used_path, yajl_t_number) : NULL;
    g->used = u ? YAJL_GET_DOUBLE(u) : -1;
    if (r->raw) {
        g->raw = r->raw; /* taken */
        g->raw_len = r->raw_len;
        g->nested = r->raw_nested;
        r->raw = NULL;
    }
}

struct events {
    int n, errors;
    char session[CDP_SESSION_MAX + 1];
    char method[64];
    char why[200];
};

static struct events ev;

static void on_event(struct cdp_session *s, const char *session, const char *method,
                     yajl_val params, void *arg)
{
    (void)s;
    (void)params;
    (void)arg;
    ev.n++;
    snprintf(ev.session, sizeof(ev.session), "%s", session ? session : "(main)");
    snprintf(ev.method, sizeof(ev.method), "%s", method);
}

static void on_worker_error(struct cdp_session *s, const char *session, const char *why, void *arg)
{
    (void)s;
    (void)arg;
    ev.errors++;
    snprintf(ev.session, sizeof(ev.session), "%s", session);
    snprintf(ev.why, sizeof(ev.why), "%s", why);
}

static struct cdp_session *session(void)
{
    memset(&ev, 0, sizeof(ev));
    struct cdp_session *s = cdp_test_new(on_event, NULL);
    if (s != NULL)
        cdp_set_worker_error_cb(s, on_worker_error);
    return s;
}

/* The envelope Node sends for session sid around inner (a JSON text). */
static void feed_worker(struct cdp_session *s, const char *sid, const char *inner)
{
    struct isoprof_buf b;
    isoprof_buf_init(&b, 6 * strlen(inner) + 256);
    isoprof_buf_puts(&b, "{\"method\":\"NodeWorker.receivedMessageFromWorker\",\"params\":{"
                         "\"sessionId\":");
    isoprof_json_str(&b, sid);
    isoprof_buf_puts(&b, ",\"message\":");
    isoprof_json_str(&b, inner);
    REQUIRE(isoprof_buf_puts(&b, "}}") == 0);
    REQUIRE(cdp_test_feed(s, b.data, b.len) == 0);
    isoprof_buf_free(&b);
}

static void feed(struct cdp_session *s, const char *msg)
{
    REQUIRE(cdp_test_feed(s, msg, strlen(msg)) == 0);
}

static uint64_t bad(struct cdp_session *s)
{
    struct cdp_stats st;
    cdp_get_stats(s, &st);
    return st.bad_messages;
}

TEST(envelope)
{
    struct cdp_session *s = session();
    REQUIRE(s != NULL);
    struct got g = {0};
    REQUIRE(cdp_call_on(s, "1", "Runtime.getHeapUsage", "{\"a\":\"<\\\"x\\\">\"}", 0, 0, on_reply,
                        &g) == 0);
    const char *out = cdp_test_last_sent(s);
    REQUIRE(out != NULL);
    char err[100];
    yajl_val v = yajl_tree_parse(out, err, sizeof(err));
    REQUIRE(v != NULL);
    static const char *id_p[] = {"id", NULL}, *m_p[] = {"method", NULL},
                      *sid_p[] = {"params", "sessionId", NULL},
                      *msg_p[] = {"params", "message", NULL}, *a_p[] = {"params", "a", NULL};
    CHECK_EQ_INT(YAJL_GET_INTEGER(yajl_tree_get(v, id_p, yajl_t_number)), 1);
    CHECK_STR(YAJL_GET_STRING(yajl_tree_get(v, m_p, yajl_t_string)),
              "NodeWorker.sendMessageToWorker");
    CHECK_STR(YAJL_GET_STRING(yajl_tree_get(v, sid_p, yajl_t_string)), "1");
    yajl_val inner =
        yajl_tree_parse(YAJL_GET_STRING(yajl_tree_get(v, msg_p, yajl_t_string)), err, sizeof(err));
    REQUIRE(inner != NULL);
    CHECK_EQ_INT(YAJL_GET_INTEGER(yajl_tree_get(inner, id_p, yajl_t_number)), 1);
    CHECK_STR(YAJL_GET_STRING(yajl_tree_get(inner, m_p, yajl_t_string)), "Runtime.getHeapUsage");
    CHECK_STR(YAJL_GET_STRING(yajl_tree_get(inner, a_p, yajl_t_string)), "<\"x\">");
    yajl_tree_free(inner);
    yajl_tree_free(v);
    /* the main session's next call takes the next id, as it is */
    struct got m = {0};
    REQUIRE(cdp_call(s, "Runtime.getHeapUsage", NULL, 0, 0, on_reply, &m) == 0);
    CHECK(strncmp(cdp_test_last_sent(s), "{\"id\":2,\"method\":\"Runtime.getHeapUsage\"", 39) == 0);
    /* bad session names */
    CHECK_EQ_INT(cdp_call_on(s, "", "Runtime.enable", NULL, 0, 0, on_reply, &g), -EINVAL);
    CHECK_EQ_INT(cdp_call_on(s, "a\"b", "Runtime.enable", NULL, 0, 0, on_reply, &g), -EINVAL);
    char longid[CDP_SESSION_MAX + 2];
    memset(longid, '7', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    CHECK_EQ_INT(cdp_call_on(s, longid, "Runtime.enable", NULL, 0, 0, on_reply, &g), -EINVAL);
    cdp_test_free(s);
    CHECK_EQ_INT(g.calls, 1);
    CHECK_EQ_INT(g.status, ISOPROF_ECLOSED);
}

TEST(replies_by_session)
{
    struct cdp_session *s = session();
    REQUIRE(s != NULL);
    struct got w1 = {0}, w2 = {0}, m = {0};
    REQUIRE(cdp_call_on(s, "1", "Runtime.getHeapUsage", NULL, 0, 0, on_reply, &w1) == 0); /* 1 */
    REQUIRE(cdp_call_on(s, "2", "Runtime.getHeapUsage", NULL, 0, 0, on_reply, &w2) == 0); /* 2 */
    REQUIRE(cdp_call(s, "Runtime.getHeapUsage", NULL, 0, 0, on_reply, &m) == 0);          /* 3 */
    /* the envelopes' own replies: noted, nothing completes */
    feed(s, "{\"id\":1,\"result\":{}}");
    feed(s, "{\"id\":2,\"result\":{}}");
    CHECK(w1.calls == 0 && w2.calls == 0);
    /* session 2 answering id 1, session 1 answering the main call's id 3: neither counts */
    uint64_t b0 = bad(s);
    feed_worker(s, "2", "{\"id\":1,\"result\":{\"usedSize\":666}}");
    feed_worker(s, "1", "{\"id\":3,\"result\":{\"usedSize\":666}}");
    feed_worker(s, "9", "{\"id\":1,\"result\":{\"usedSize\":666}}");
    CHECK(w1.calls == 0 && m.calls == 0);
    CHECK_EQ_INT(bad(s) - b0, 3);
    feed_worker(s, "1", "{\"id\":1,\"result\":{\"usedSize\":1234}}");
    CHECK_EQ_INT(w1.calls, 1);
    CHECK_EQ_INT(w1.status, 0);
    CHECK(w1.used == 1234);
    CHECK(w1.raw == NULL);
    /* an error reply inside, id last as Node writes it */
    feed_worker(s, "2", "{\"error\":{\"code\":-32601,\"message\":\"'X' wasn't found\"},\"id\":2}");
    CHECK_EQ_INT(w2.calls, 1);
    CHECK_EQ_INT(w2.status, ISOPROF_ECDP);
    CHECK_STR(w2.err, "'X' wasn't found");
    feed(s, "{\"id\":3,\"result\":{\"usedSize\":7}}");
    CHECK_EQ_INT(m.calls, 1);
    CHECK(m.used == 7);
    /* answered once: a repeat is counted */
    b0 = bad(s);
    feed_worker(s, "1", "{\"id\":1,\"result\":{}}");
    CHECK_EQ_INT(w1.calls, 1);
    CHECK_EQ_INT(bad(s) - b0, 1);
    cdp_test_free(s);
}

TEST(envelope_error_fails_the_call)
{
    struct cdp_session *s = session();
    REQUIRE(s != NULL);
    struct got g = {0};
    REQUIRE(cdp_call_on(s, "5", "Profiler.enable", NULL, 0, 0, on_reply, &g) == 0);
    feed(s, "{\"id\":1,\"error\":{\"code\":-32000,\"message\":\"No session with given id\"}}");
    CHECK_EQ_INT(g.calls, 1);
    CHECK_EQ_INT(g.status, ISOPROF_ECDP);
    CHECK_STR(g.err, "No session with given id");
    cdp_test_free(s);
    CHECK_EQ_INT(g.calls, 1);
}

TEST(events_and_bad_input)
{
    struct cdp_session *s = session();
    REQUIRE(s != NULL);
    struct got g = {0};
    REQUIRE(cdp_call_on(s, "1", "Runtime.getHeapUsage", NULL, 0, 0, on_reply, &g) == 0);
    feed_worker(s, "1", "{\"method\":\"Runtime.executionContextCreated\",\"params\":{}}");
    CHECK_EQ_INT(ev.n, 1);
    CHECK_STR(ev.session, "1");
    CHECK_STR(ev.method, "Runtime.executionContextCreated");
    feed(s, "{\"method\":\"NodeWorker.attachedToWorker\",\"params\":{\"sessionId\":\"3\"}}");
    CHECK_EQ_INT(ev.n, 2);
    CHECK_STR(ev.session, "(main)");
    /* garbage from a worker: reported with its session, the session lives on */
    static const char *const garbage[] = {"garbage", "[1,2]", "{\"params\":{}}", "{\"id\":"};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(garbage); i++) {
        ev.errors = 0;
        feed_worker(s, "1", garbage[i]);
        CHECK_EQ_INT(ev.errors, 1);
        CHECK_STR(ev.session, "1");
        CHECK(ev.why[0] != '\0');
    }
    /* an envelope without a message string, or without a usable session */
    ev.errors = 0;
    uint64_t b0 = bad(s);
    feed(s, "{\"method\":\"NodeWorker.receivedMessageFromWorker\",\"params\":{\"sessionId\":\"1\","
            "\"message\":7}}");
    CHECK_EQ_INT(ev.errors, 1);
    feed(s,
         "{\"method\":\"NodeWorker.receivedMessageFromWorker\",\"params\":{\"message\":\"{}\"}}");
    feed(s, "{\"method\":\"NodeWorker.receivedMessageFromWorker\"}");
    CHECK_EQ_INT(ev.errors, 1);
    CHECK_EQ_INT(bad(s) - b0, 3);
    /* the call still answers */
    feed_worker(s, "1", "{\"id\":1,\"result\":{\"usedSize\":5}}");
    CHECK_EQ_INT(g.calls, 1);
    CHECK(g.used == 5);
    cdp_test_free(s);
}

/* A reply of n bytes of profile inside an envelope, for session sid. */
static char *big_inner(uint64_t id, size_t n)
{
    char *inner = isoprof_malloc(n + 128);
    if (inner == NULL)
        return NULL;
    int k = snprintf(inner, 128, "{\"id\":%llu,\"result\":{\"profile\":{\"pad\":\"",
                     (unsigned long long)id);
    memset(inner + k, 'x', n);
    strcpy(inner + k + n, "\"}}}");
    return inner;
}

TEST(big_and_deep_replies_raw)
{
    struct cdp_session *s = session();
    REQUIRE(s != NULL);
    struct got big = {0}, deep = {0}, small = {0}, refused = {0};
    REQUIRE(cdp_call_on(s, "1", "Profiler.stop", NULL, 0, CDP_RAW, on_reply, &big) == 0);   /* 1 */
    REQUIRE(cdp_call_on(s, "1", "HeapProfiler.x", NULL, 0, CDP_RAW, on_reply, &deep) == 0); /* 2 */
    REQUIRE(cdp_call_on(s, "1", "Profiler.stop", NULL, 0, CDP_RAW, on_reply, &small) == 0); /* 3 */
    REQUIRE(cdp_call_on(s, "1", "Runtime.x", NULL, 0, 0, on_reply, &refused) == 0);         /* 4 */
    char *inner = big_inner(1, CDP_PARSE_MAX + 1000);
    REQUIRE(inner != NULL);
    feed_worker(s, "1", inner);
    CHECK_EQ_INT(big.calls, 1);
    CHECK_EQ_INT(big.status, 0);
    REQUIRE(big.raw != NULL);
    CHECK_EQ_INT(big.nested, 1);
    char *un = NULL;
    size_t un_len = 0;
    REQUIRE(cdp_unwrap_worker(big.raw, big.raw_len, &un, &un_len) == 0);
    CHECK_EQ_INT(un_len, strlen(inner));
    CHECK(strcmp(un, inner) == 0);
    isoprof_free(un);
    ws_msg_free(big.raw);
    isoprof_free(inner);
    /* deeper than the loop parses, small: routed by the envelope's peek */
    char d[512];
    int k = snprintf(d, sizeof(d), "{\"id\":2,\"result\":{\"profile\":{\"head\":");
    for (int i = 0; i < 80; i++)
        d[k++] = '[';
    for (int i = 0; i < 80; i++)
        d[k++] = ']';
    strcpy(d + k, "}}}");
    feed_worker(s, "1", d);
    CHECK_EQ_INT(deep.calls, 1);
    REQUIRE(deep.raw != NULL);
    CHECK_EQ_INT(deep.nested, 1);
    REQUIRE(cdp_unwrap_worker(deep.raw, deep.raw_len, &un, NULL) == 0);
    CHECK_STR(un, d);
    isoprof_free(un);
    ws_msg_free(deep.raw);
    /* small, with CDP_RAW: the envelope too */
    feed_worker(s, "1", "{\"id\":3,\"result\":{\"profile\":{}}}");
    CHECK_EQ_INT(small.calls, 1);
    REQUIRE(small.raw != NULL);
    CHECK_EQ_INT(small.nested, 1);
    ws_msg_free(small.raw);
    /* big, without CDP_RAW: refused, the session carries on */
    inner = big_inner(4, CDP_PARSE_MAX + 10);
    REQUIRE(inner != NULL);
    feed_worker(s, "1", inner);
    isoprof_free(inner);
    CHECK_EQ_INT(refused.calls, 1);
    CHECK_EQ_INT(refused.status, ISOPROF_ETOOBIG);
    /* a main-session raw reply is not nested */
    struct got m = {0};
    REQUIRE(cdp_call(s, "Profiler.stop", NULL, 0, CDP_RAW, on_reply, &m) == 0);
    feed(s, "{\"id\":5,\"result\":{\"profile\":{}}}");
    REQUIRE(m.raw != NULL);
    CHECK_EQ_INT(m.nested, 0);
    ws_msg_free(m.raw);
    cdp_test_free(s);
}

TEST(forget_and_timeout)
{
    struct cdp_session *s = session();
    REQUIRE(s != NULL);
    struct got a = {0}, b = {0}, other = {0};
    REQUIRE(cdp_call_on(s, "1", "Profiler.stop", NULL, 1000, 0, on_reply, &a) == 0);
    REQUIRE(cdp_call_on(s, "1", "Profiler.stop", NULL, 1000, 0, on_reply, &b) == 0);
    REQUIRE(cdp_call_on(s, "2", "Profiler.stop", NULL, 50000, 0, on_reply, &other) == 0);
    cdp_forget(s, "1");
    CHECK(a.calls == 0 && b.calls == 0); /* never from inside cdp_forget */
    /* a reply after the forget is not delivered */
    uint64_t b0 = bad(s);
    feed_worker(s, "1", "{\"id\":1,\"result\":{}}");
    CHECK_EQ_INT(a.calls, 0);
    CHECK_EQ_INT(bad(s) - b0, 1);
    cdp_test_tick(s, 10);
    CHECK_EQ_INT(a.calls, 1);
    CHECK_EQ_INT(a.status, ISOPROF_ECLOSED);
    CHECK_EQ_INT(b.calls, 1);
    CHECK_EQ_INT(b.status, ISOPROF_ECLOSED);
    CHECK_EQ_INT(other.calls, 0);
    cdp_test_tick(s, 50001);
    CHECK_EQ_INT(other.calls, 1);
    CHECK_EQ_INT(other.status, ISOPROF_ETIMEDOUT);
    cdp_test_free(s);
}

TEST(peek_worker)
{
    char sid[CDP_SESSION_MAX + 1];
    int64_t id = -1;
    const char *ok = "{\"method\":\"NodeWorker.receivedMessageFromWorker\",\"params\":{"
                     "\"sessionId\":\"12\",\"message\":\"{\\\"id\\\":1005,\\\"result\\\":{";
    CHECK_EQ_INT(cdp_peek_worker(ok, strlen(ok), sid, &id), 0);
    CHECK_STR(sid, "12");
    CHECK_EQ_INT(id, 1005);
    const char *spaced = "{ \"method\" : \"NodeWorker.receivedMessageFromWorker\" , \"params\" : { "
                         "\"sessionId\" : \"a-b.c_d\" , \"message\" : \"{\\\"id\\\":7}\"}}";
    CHECK_EQ_INT(cdp_peek_worker(spaced, strlen(spaced), sid, &id), 0);
    CHECK_STR(sid, "a-b.c_d");
    CHECK_EQ_INT(id, 7);
    static const char *const no[] = {
        "{\"id\":1,\"result\":{}}",
        "{\"method\":\"NodeWorker.attachedToWorker\",\"params\":{\"sessionId\":\"1\","
        "\"message\":\"{\\\"id\\\":1}\"}}",
        /* error replies put the id last: not peekable (they are small) */
        "{\"method\":\"NodeWorker.receivedMessageFromWorker\",\"params\":{\"sessionId\":\"1\","
        "\"message\":\"{\\\"error\\\":{},\\\"id\\\":1}\"}}",
        "{\"method\":\"NodeWorker.receivedMessageFromWorker\",\"params\":{\"sessionId\":\"\","
        "\"message\":\"{\\\"id\\\":1}\"}}",
        "{\"method\":\"NodeWorker.receivedMessageFromWorker\",\"params\":{\"sessionId\":\"a\\\"b\","
        "\"message\":\"{\\\"id\\\":1}\"}}",
        "{\"method\":\"NodeWorker.receivedMessageFromWorker\",\"params\":{\"sessionId\":\"1\","
        "\"message\":\"{\\\"id\\\":01}\"}}",
        "{\"method\":\"NodeWorker.receivedMessageFromWorker\",\"params\":{\"sessionId\":\"1\","
        "\"message\":\"{\\\"id\\\":1",
        "{\"method\":\"NodeWorker.receivedMessageFromWorker\",\"params\":{\"sessionId\":\"1",
        "",
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(no); i++) {
        if (cdp_peek_worker(no[i], strlen(no[i]), sid, &id) != -1)
            fprintf(stderr, "peeked: %s\n", no[i]);
        CHECK_EQ_INT(cdp_peek_worker(no[i], strlen(no[i]), sid, &id), -1);
    }
    /* a session id past the cap */
    char lng[512];
    int k = snprintf(lng, sizeof(lng),
                     "{\"method\":\"NodeWorker.receivedMessageFromWorker\",\"params\":{"
                     "\"sessionId\":\"");
    memset(lng + k, '1', CDP_SESSION_MAX + 1);
    snprintf(lng + k + CDP_SESSION_MAX + 1, sizeof(lng) - (size_t)k - CDP_SESSION_MAX - 1,
             "\",\"message\":\"{\\\"id\\\":1,");
    CHECK_EQ_INT(cdp_peek_worker(lng, strlen(lng), sid, &id), -1);
    /* unwrap: what is not an envelope */
    char *out = NULL;
    CHECK_EQ_INT(cdp_unwrap_worker("{\"params\":{}}", 13, &out, NULL), ISOPROF_EJSON);
    CHECK_EQ_INT(cdp_unwrap_worker("{\"params\":{\"message\":", 21, &out, NULL), ISOPROF_EJSON);
    CHECK_EQ_INT(cdp_unwrap_worker("{\"message\":\"x\"}", 15, &out, NULL), ISOPROF_EJSON);
    CHECK(out == NULL);
}

int main(void)
{
    RUN(envelope);
    RUN(replies_by_session);
    RUN(envelope_error_fails_the_call);
    RUN(events_and_bad_input);
    RUN(big_and_deep_replies_raw);
    RUN(forget_and_timeout);
    RUN(peek_worker);
    TEST_EXIT();
}

/* Unit tests for the control socket's request reader and /profile query
 * (control.h): the refusals the hostile integration tests found, each
 * with its status and reason, on bytes alone. */
#include "../test.h"
#include "control.h"
#include "store.h"

#include <errno.h>

/* Feed text whole to a fresh reader: its rc; r keeps the outcome. */
static int feed(struct ctl_req *r, const char *text)
{
    size_t used = 0;
    ctl_req_init(r);
    return ctl_req_feed(r, text, strlen(text), &used);
}

/* Feed text one byte at a time: the same outcome as whole. */
static int feed_bytes(struct ctl_req *r, const char *text)
{
    size_t used = 0, n = strlen(text);
    int rc = 0;
    ctl_req_init(r);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = ctl_req_feed(r, text + i, 1, &used);
    return rc;
}

TEST(upgrade_refused)
{
    static struct ctl_req r;
    static const char *const texts[] = {
        "GET /status HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        /* one text, two requests (parenthesised: not a missing comma) */
        ("GET /status HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"
         "GET /x HTTP/1.1\r\n\r\n"),
        "CONNECT example.com:443 HTTP/1.1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        CHECK_EQ_INT(feed(&r, texts[i]), -EBADMSG);
        CHECK_EQ_INT(r.status, 400);
        CHECK(strstr(r.why, "upgrades are not supported") != NULL);
        CHECK_EQ_INT(feed_bytes(&r, texts[i]), -EBADMSG);
        CHECK_EQ_INT(r.status, 400);
    }
    /* Connection: upgrade without an Upgrade header is no upgrade */
    CHECK_EQ_INT(feed(&r, "GET /status HTTP/1.1\r\nConnection: upgrade\r\n\r\n"), 1);
}

TEST(lengths_and_chunks)
{
    static struct ctl_req r;
    CHECK_EQ_INT(feed(&r, "POST /p HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
                 -EBADMSG);
    CHECK_EQ_INT(r.status, 400);
    CHECK(strstr(r.why, "invalid content-length header") != NULL);
    CHECK_EQ_INT(feed(&r, "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "ffffffffffffffffffff\r\n"),
                 -EBADMSG);
    CHECK_EQ_INT(r.status, 400);
    CHECK_STR(r.why, "bad request: invalid chunk size");
    CHECK_EQ_INT(feed(&r, "POST /p HTTP/1.1\r\nContent-Length: 4097\r\n\r\n"), -EBADMSG);
    CHECK_EQ_INT(r.status, 413);
    CHECK_EQ_INT(feed(&r, "POST /p HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: "
                          "chunked\r\n\r\n0\r\n\r\n"),
                 -EBADMSG);
    CHECK_EQ_INT(r.status, 400);
    CHECK_EQ_INT(
        feed(&r, "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"), 1);
    CHECK_EQ_INT(r.body_bytes, 3);
}

static int parse(const char *q, struct ctl_profile_req *r, char *why, size_t cap)
{
    return ctl_profile_parse(q, strlen(q), 10000000, r, why, cap);
}

TEST(profile_parameters_by_type)
{
    static struct ctl_profile_req r;
    char why[CTL_LABEL_MAX + 100];
    CHECK_EQ_INT(parse("worker=w&type=heap&seconds=3", &r, why, sizeof(why)), -EINVAL);
    CHECK_STR(why, "seconds and interval are for type=cpu, not heap");
    CHECK_EQ_INT(parse("interval=1ms&worker=w&type=snapshot", &r, why, sizeof(why)), -EINVAL);
    CHECK_STR(why, "seconds and interval are for type=cpu, not snapshot");
    CHECK_EQ_INT(parse("worker=w&type=snapshot&all=1", &r, why, sizeof(why)), -EINVAL);
    CHECK(strstr(why, "a heap snapshot is of one isolate") != NULL);
    /* all=0 says nothing: taken */
    CHECK_EQ_INT(parse("worker=w&type=snapshot&all=0&isolate=3", &r, why, sizeof(why)), 0);
    CHECK_EQ_INT(r.type, STORE_TYPE_SNAPSHOT);
    CHECK_EQ_INT(r.isolate, 3);
    CHECK_EQ_INT(parse("worker=w&type=cpu&seconds=2&interval=500us&all=1", &r, why, sizeof(why)),
                 0);
    CHECK_EQ_INT(r.seconds, 2);
    CHECK_EQ_INT(r.interval_ns, 500000);
    CHECK_EQ_INT(r.all, 1);
    CHECK_STR(r.thread, "main");
    CHECK_EQ_INT(parse("worker=w&type=heap&thread=worker-2", &r, why, sizeof(why)), 0);
    CHECK_STR(r.thread, "worker-2");
    CHECK_EQ_INT(r.seconds, CTL_SECONDS_DEFAULT);
}

int main(void)
{
    RUN(upgrade_refused);
    RUN(lengths_and_chunks);
    RUN(profile_parameters_by_type);
    TEST_EXIT();
}

/* Unit tests for the logfmt value encoder: a hostile string can neither
 * forge a field nor a line, and long values are truncated, not allocated. */
#include "log.h"
#include "../test.h"

static const char *enc(const char *s)
{
    static char b[4096];
    size_t len = 0;
    agent_log_value(b, sizeof(b) - 1, &len, s);
    b[len] = '\0';
    return b;
}

TEST(bare)
{
    CHECK_STR(enc("api-v2"), "api-v2");
    CHECK_STR(enc("node.js"), "node.js");
}

TEST(quoted)
{
    CHECK_STR(enc(""), "\"\"");
    CHECK_STR(enc("two words"), "\"two words\"");
    CHECK_STR(enc("a=b"), "\"a=b\"");
    CHECK_STR(enc("say \"hi\""), "\"say \\\"hi\\\"\"");
    CHECK_STR(enc("back\\slash"), "\"back\\\\slash\"");
}

TEST(control_bytes)
{
    CHECK_STR(enc("line\nlevel=error msg=forged"), "\"line\\nlevel=error msg=forged\"");
    CHECK_STR(enc("a\x01z"), "\"a\\x01z\"");
    CHECK_STR(enc("tab\there"), "\"tab\\there\"");
}

TEST(truncation)
{
    char big[3000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    const char *e = enc(big);
    CHECK(strlen(e) < 500);
    CHECK(strstr(e, "...") != NULL);
}

TEST(null_is_empty)
{
    CHECK_STR(enc(NULL), "\"\"");
}

/* The rate limit: a burst passes, the rest of the window is dropped and
 * counted, the next window's first line carries the count, and other
 * messages are not held back by a noisy one. */
TEST(rate_limit)
{
    static struct log_limiter l;
    static const char noisy[] = "connect failed", quiet[] = "endpoint reachable";
    uint64_t dropped = 99, t = 1000;
    int written = 0;
    for (int i = 0; i < 1000; i++)
        written += agent_log_admit(&l, noisy, t + (uint64_t)i, &dropped);
    CHECK_EQ_INT(written, LOG_BURST);
    CHECK(agent_log_admit(&l, quiet, t + 1000, &dropped) == 1);
    CHECK(dropped == 0);
    /* Still inside the window: dropped. */
    CHECK(agent_log_admit(&l, noisy, t + LOG_WINDOW_MS - 1, &dropped) == 0);
    /* The next window: written, with what was dropped. */
    CHECK(agent_log_admit(&l, noisy, t + LOG_WINDOW_MS, &dropped) == 1);
    CHECK(dropped == 1000 - LOG_BURST + 1);
    CHECK(agent_log_admit(&l, noisy, t + LOG_WINDOW_MS + 1, &dropped) == 1);
    CHECK(dropped == 0);
}

/* More distinct messages than slots: the table stays fixed, each message
 * still gets its lines. */
TEST(rate_limit_many_messages)
{
    static struct log_limiter l;
    static char msgs[LOG_LIMIT_SLOTS * 2][8];
    uint64_t dropped;
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < LOG_LIMIT_SLOTS * 2; i++)
            CHECK(agent_log_admit(&l, msgs[i], (uint64_t)(round * 100 + i), &dropped) == 1);
}

int main(void)
{
    RUN(bare);
    RUN(quoted);
    RUN(control_bytes);
    RUN(truncation);
    RUN(null_is_empty);
    RUN(rate_limit);
    RUN(rate_limit_many_messages);
    TEST_EXIT();
}

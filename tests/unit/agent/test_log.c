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

int main(void)
{
    RUN(bare);
    RUN(quoted);
    RUN(control_bytes);
    RUN(truncation);
    RUN(null_is_empty);
    TEST_EXIT();
}

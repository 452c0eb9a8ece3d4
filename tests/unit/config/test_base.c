/*
 * test_base.c - the primitives of config/base.h: the capped buffer and its
 * sticky error, the UTF-8 validator, the JSON string writer, gzip.
 */
#include "../test.h"
#include "base.h"

#include <errno.h>
#include <zlib.h>

/* --- buffer --- */

TEST(buf_append_and_take)
{
    struct isoprof_buf b;
    isoprof_buf_init(&b, 1024);
    CHECK(b.data == NULL);
    CHECK_EQ_INT(isoprof_buf_append(&b, "ab", 2), 0);
    CHECK_EQ_INT(isoprof_buf_putc(&b, 'c'), 0);
    CHECK_EQ_INT(isoprof_buf_puts(&b, "de"), 0);
    CHECK_EQ_INT(isoprof_buf_printf(&b, "-%d-%s", 42, "x"), 0);
    CHECK_EQ_INT(b.len, 10);
    CHECK_STR(b.data, "abcde-42-x");
    char *out = NULL;
    size_t len = 0;
    CHECK_EQ_INT(isoprof_buf_take(&b, &out, &len), 0);
    CHECK_STR(out, "abcde-42-x");
    CHECK_EQ_INT(len, 10);
    CHECK(b.data == NULL && b.len == 0 && b.max == 1024);
    isoprof_free(out);

    /* An empty buffer hands over "" rather than NULL. */
    CHECK_EQ_INT(isoprof_buf_take(&b, &out, &len), 0);
    CHECK(out != NULL && out[0] == '\0' && len == 0);
    isoprof_free(out);
}

TEST(buf_grows_past_first_allocation)
{
    struct isoprof_buf b;
    isoprof_buf_init(&b, 100000);
    for (int i = 0; i < 10000; i++)
        isoprof_buf_putc(&b, 'a' + i % 26);
    CHECK_EQ_INT(b.err, 0);
    CHECK_EQ_INT(b.len, 10000);
    CHECK(b.cap > b.len && b.cap <= b.max + 1);
    CHECK(b.data[9999] == 'a' + 9999 % 26 && b.data[10000] == '\0');
    isoprof_buf_free(&b);
    CHECK(b.data == NULL && b.len == 0 && b.cap == 0);
}

TEST(buf_cap_is_hard)
{
    struct isoprof_buf b;
    isoprof_buf_init(&b, 8);
    CHECK_EQ_INT(isoprof_buf_append(&b, "12345678", 8), 0); /* exactly max fits */
    CHECK(b.cap <= 9);
    CHECK_EQ_INT(isoprof_buf_putc(&b, '9'), ISOPROF_ETOOBIG);
    CHECK_EQ_INT(b.len, 8);
    CHECK_STR(b.data, "12345678");
    isoprof_buf_free(&b);

    /* A failed append keeps nothing of itself. */
    isoprof_buf_init(&b, 8);
    isoprof_buf_puts(&b, "abc");
    CHECK_EQ_INT(isoprof_buf_printf(&b, "%s", "defghi"), ISOPROF_ETOOBIG);
    CHECK_EQ_INT(b.len, 3);
    CHECK_STR(b.data, "abc");
    CHECK_EQ_INT(isoprof_buf_reserve(&b, 1), ISOPROF_ETOOBIG); /* sticky */
    isoprof_buf_free(&b);

    /* Sizes near SIZE_MAX do not wrap around the cap check. */
    isoprof_buf_init(&b, 16);
    isoprof_buf_putc(&b, 'x');
    CHECK_EQ_INT(isoprof_buf_reserve(&b, SIZE_MAX), ISOPROF_ETOOBIG);
    isoprof_buf_free(&b);
}

TEST(buf_error_is_sticky)
{
    struct isoprof_buf b;
    isoprof_buf_init(&b, 4);
    isoprof_buf_puts(&b, "ab");
    CHECK_EQ_INT(isoprof_buf_puts(&b, "cde"), ISOPROF_ETOOBIG);
    /* This one would fit, but the buffer already failed. */
    CHECK_EQ_INT(isoprof_buf_putc(&b, 'c'), ISOPROF_ETOOBIG);
    CHECK_EQ_INT(isoprof_buf_append(&b, "", 0), ISOPROF_ETOOBIG);
    CHECK_EQ_INT(isoprof_buf_printf(&b, "c"), ISOPROF_ETOOBIG);
    CHECK_EQ_INT(isoprof_json_str(&b, ""), ISOPROF_ETOOBIG);
    CHECK_EQ_INT(b.len, 2);
    char *out = (char *)1;
    size_t len = 99;
    CHECK_EQ_INT(isoprof_buf_take(&b, &out, &len), ISOPROF_ETOOBIG);
    CHECK(out == NULL && len == 0);
    CHECK(b.data == NULL && b.err == 0);

    /* reset clears the error and keeps the allocation. */
    isoprof_buf_init(&b, 4);
    isoprof_buf_puts(&b, "abcde");
    isoprof_buf_puts(&b, "ab");
    CHECK(b.err == ISOPROF_ETOOBIG);
    isoprof_buf_reset(&b);
    CHECK(b.err == 0 && b.len == 0);
    CHECK_EQ_INT(isoprof_buf_puts(&b, "wxyz"), 0);
    CHECK_STR(b.data, "wxyz");
    isoprof_buf_free(&b);
}

TEST(buf_enomem_is_sticky)
{
    struct isoprof_buf b;
    isoprof_buf_init(&b, 1 << 20);
    isoprof_alloc_fail_after(0);
    CHECK_EQ_INT(isoprof_buf_puts(&b, "a"), -ENOMEM);
    isoprof_alloc_fail_after(-1);
    CHECK_EQ_INT(isoprof_buf_puts(&b, "a"), -ENOMEM);
    CHECK(b.len == 0);
    char *out;
    CHECK_EQ_INT(isoprof_buf_take(&b, &out, NULL), -ENOMEM);
    CHECK(out == NULL);

    /* A failed growth keeps what the buffer held. */
    isoprof_buf_init(&b, 1 << 20);
    isoprof_buf_puts(&b, "kept");
    char big[4096];
    memset(big, 'z', sizeof(big));
    isoprof_alloc_fail_after(0);
    CHECK_EQ_INT(isoprof_buf_append(&b, big, sizeof(big)), -ENOMEM);
    isoprof_alloc_fail_after(-1);
    CHECK_STR(b.data, "kept");
    isoprof_buf_free(&b);
}

/* --- UTF-8 --- */

static size_t seq(const char *s, size_t n)
{
    return isoprof_utf8_seq((const uint8_t *)s, n);
}

static size_t prefix(const char *s, size_t n)
{
    return isoprof_utf8_valid_prefix((const uint8_t *)s, n);
}

TEST(utf8_well_formed)
{
    CHECK_EQ_INT(seq("a", 1), 1);
    CHECK_EQ_INT(seq("\0", 1), 1);
    CHECK_EQ_INT(seq("\x7f", 1), 1);
    CHECK_EQ_INT(seq("\xc2\x80", 2), 2);         /* U+0080 */
    CHECK_EQ_INT(seq("\xdf\xbf", 2), 2);         /* U+07FF */
    CHECK_EQ_INT(seq("\xe0\xa0\x80", 3), 3);     /* U+0800 */
    CHECK_EQ_INT(seq("\xed\x9f\xbf", 3), 3);     /* U+D7FF */
    CHECK_EQ_INT(seq("\xee\x80\x80", 3), 3);     /* U+E000 */
    CHECK_EQ_INT(seq("\xef\xbf\xbd", 3), 3);     /* U+FFFD */
    CHECK_EQ_INT(seq("\xf0\x90\x80\x80", 4), 4); /* U+10000 */
    CHECK_EQ_INT(seq("\xf4\x8f\xbf\xbf", 4), 4); /* U+10FFFF */
    CHECK_EQ_INT(seq("\xe2\x82\xacx", 4), 3);    /* the sequence, not the text */
    const char *text = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80";
    CHECK_EQ_INT(prefix(text, strlen(text)), strlen(text));
    CHECK_EQ_INT(prefix("", 0), 0);
}

TEST(utf8_overlong)
{
    CHECK_EQ_INT(seq("\xc0\x80", 2), 0);         /* NUL in two bytes */
    CHECK_EQ_INT(seq("\xc1\xbf", 2), 0);         /* U+007F in two bytes */
    CHECK_EQ_INT(seq("\xe0\x80\x80", 3), 0);     /* NUL in three */
    CHECK_EQ_INT(seq("\xe0\x9f\xbf", 3), 0);     /* U+07FF in three */
    CHECK_EQ_INT(seq("\xf0\x80\x80\x80", 4), 0); /* NUL in four */
    CHECK_EQ_INT(seq("\xf0\x8f\xbf\xbf", 4), 0); /* U+FFFF in four */
}

TEST(utf8_surrogates)
{
    CHECK_EQ_INT(seq("\xed\xa0\x80", 3), 0); /* U+D800 */
    CHECK_EQ_INT(seq("\xed\xaf\xbf", 3), 0); /* U+DBFF */
    CHECK_EQ_INT(seq("\xed\xb0\x80", 3), 0); /* U+DC00 */
    CHECK_EQ_INT(seq("\xed\xbf\xbf", 3), 0); /* U+DFFF */
    /* A CESU-8 pair for U+1F600 is two surrogates, not one character. */
    CHECK_EQ_INT(prefix("ok\xed\xa0\xbd\xed\xb8\x80", 8), 2);
}

TEST(utf8_above_max)
{
    CHECK_EQ_INT(seq("\xf4\x90\x80\x80", 4), 0); /* U+110000 */
    CHECK_EQ_INT(seq("\xf5\x80\x80\x80", 4), 0);
    CHECK_EQ_INT(seq("\xf7\xbf\xbf\xbf", 4), 0);
    CHECK_EQ_INT(seq("\xf8\x88\x80\x80\x80", 5), 0); /* old five-byte form */
    CHECK_EQ_INT(seq("\xfe", 1), 0);
    CHECK_EQ_INT(seq("\xff", 1), 0);
}

TEST(utf8_truncated_and_stray)
{
    CHECK_EQ_INT(seq("", 0), 0);
    CHECK_EQ_INT(seq("\xc3", 1), 0);
    CHECK_EQ_INT(seq("\xe2\x82", 2), 0);
    CHECK_EQ_INT(seq("\xf0\x9f\x98", 3), 0);
    /* n bounds the read even when the bytes beyond would complete it. */
    CHECK_EQ_INT(seq("\xe2\x82\xac", 2), 0);
    /* Not a continuation byte (\x61 is 'a': "\xc3a" would be one escape). */
    CHECK_EQ_INT(seq("\xc3\x61", 2), 0);
    CHECK_EQ_INT(seq("\xe2\x82\x61", 3), 0);
    CHECK_EQ_INT(seq("\xe2\x82\0", 3), 0);
    CHECK_EQ_INT(seq("\x80", 1), 0); /* stray continuation */
    CHECK_EQ_INT(seq("\xbf\xbf", 2), 0);
    /* The prefix stops before the bad sequence, never inside it. */
    CHECK_EQ_INT(prefix("ab\xe2\x82\xac\xe2\x82", 7), 5);
    CHECK_EQ_INT(prefix("ab\x80\x63\x64", 5), 2); /* "ab" 80 "cd" */
    CHECK_EQ_INT(prefix("\xff", 1), 0);
}

/* --- JSON strings --- */

/* s (n bytes) written as a JSON string; static storage, for one CHECK. */
static const char *json_of(const char *s, size_t n)
{
    static char out[256];
    struct isoprof_buf b;
    isoprof_buf_init(&b, sizeof(out) - 1);
    if (isoprof_json_strn(&b, s, n) != 0 || b.data == NULL) {
        isoprof_buf_free(&b);
        return "(error)";
    }
    memcpy(out, b.data, b.len + 1);
    isoprof_buf_free(&b);
    return out;
}

TEST(json_escapes)
{
    CHECK_STR(json_of("", 0), "\"\"");
    CHECK_STR(json_of("plain text", 10), "\"plain text\"");
    CHECK_STR(json_of("a\"b\\c/d", 7), "\"a\\\"b\\\\c/d\"");
    CHECK_STR(json_of("\n\r\t\b\f", 5), "\"\\n\\r\\t\\b\\f\"");
    CHECK_STR(json_of("\x01\x1f\x7f", 3), "\"\\u0001\\u001f\\u007f\"");
    CHECK_STR(json_of("a\0b", 3), "\"a\\u0000b\"");
    CHECK_STR(json_of("\x1b[0m", 4), "\"\\u001b[0m\"");
}

TEST(json_utf8)
{
    /* Well-formed UTF-8 passes through unchanged. */
    const char *t = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf";
    char want[64];
    snprintf(want, sizeof(want), "\"%s\"", t);
    CHECK_STR(json_of(t, strlen(t)), want);
    /* Each byte that starts no sequence becomes one U+FFFD. */
    CHECK_STR(json_of("a\xff\x62", 3), "\"a\xef\xbf\xbd\x62\""); /* \x62: 'b' */
    CHECK_STR(json_of("\xc0\x80", 2), "\"\xef\xbf\xbd\xef\xbf\xbd\"");
    CHECK_STR(json_of("\xed\xa0\x80", 3), "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    CHECK_STR(json_of("x\xe2\x82", 3), "\"x\xef\xbf\xbd\xef\xbf\xbd\"");
    CHECK_STR(json_of("\xe2\x82\"", 3), "\"\xef\xbf\xbd\xef\xbf\xbd\\\"\"");
    CHECK_STR(json_of("\xf4\x90\x80\x80", 4),
              "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    /* Latin-1 é */
    CHECK_STR(json_of("caf\xe9", 4), "\"caf\xef\xbf\xbd\"");
}

TEST(json_str_and_null)
{
    struct isoprof_buf b;
    isoprof_buf_init(&b, 64);
    isoprof_buf_putc(&b, '[');
    isoprof_json_str(&b, "a\tb");
    isoprof_buf_putc(&b, ',');
    isoprof_json_str(&b, NULL);
    isoprof_buf_putc(&b, ']');
    CHECK_EQ_INT(b.err, 0);
    CHECK_STR(b.data, "[\"a\\tb\",null]");
    isoprof_buf_free(&b);
}

TEST(json_never_in_part)
{
    struct isoprof_buf b;
    isoprof_buf_init(&b, 10);
    isoprof_buf_puts(&b, "{\"k\":");
    CHECK_EQ_INT(isoprof_json_str(&b, "\n\n\n"), ISOPROF_ETOOBIG); /* 8 bytes written */
    CHECK_EQ_INT(b.len, 5);
    CHECK_STR(b.data, "{\"k\":");
    isoprof_buf_free(&b);

    /* Exactly at the cap fits. */
    isoprof_buf_init(&b, 8);
    CHECK_EQ_INT(isoprof_json_str(&b, "\n\n\n"), 0);
    CHECK_STR(b.data, "\"\\n\\n\\n\"");
    isoprof_buf_free(&b);
}

/* --- gzip --- */

TEST(gzip_round_trip)
{
    size_t n = 200000;
    uint8_t *in = isoprof_malloc(n);
    REQUIRE(in != NULL);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        in[i] = (uint8_t)(i % 3 ? 'a' + (x % 4) : x); /* some redundancy, some noise */
    }
    uint8_t *gz = NULL;
    size_t gzlen = 0;
    CHECK_EQ_INT(isoprof_gzip(in, n, &gz, &gzlen), 0);
    REQUIRE(gz != NULL);
    CHECK(gzlen > 18 && gzlen < n);
    CHECK(gz[0] == 0x1f && gz[1] == 0x8b && gz[2] == 8); /* gzip, deflate */

    /* zlib's own inflate, with a gzip window, gives the bytes back. */
    uint8_t *back = isoprof_malloc(n + 1);
    REQUIRE(back != NULL);
    z_stream z;
    memset(&z, 0, sizeof(z));
    REQUIRE(inflateInit2(&z, 15 + 16) == Z_OK);
    z.next_in = gz;
    z.avail_in = (uInt)gzlen;
    z.next_out = back;
    z.avail_out = (uInt)(n + 1);
    CHECK_EQ_INT(inflate(&z, Z_FINISH), Z_STREAM_END);
    CHECK_EQ_INT(z.total_out, n);
    CHECK_EQ_INT(z.avail_in, 0);
    inflateEnd(&z);
    CHECK(memcmp(back, in, n) == 0);

    /* And so does isoprof_gunzip, within its cap, and not below it. */
    uint8_t *out = NULL;
    size_t outlen = 0;
    CHECK_EQ_INT(isoprof_gunzip(gz, gzlen, n, &out, &outlen), 0);
    CHECK_EQ_INT(outlen, n);
    CHECK(out != NULL && memcmp(out, in, n) == 0);
    isoprof_free(out);
    out = NULL;
    CHECK_EQ_INT(isoprof_gunzip(gz, gzlen, n - 1, &out, &outlen), ISOPROF_ETOOBIG);
    CHECK(out == NULL);
    CHECK_EQ_INT(isoprof_gunzip(gz, gzlen - 1, n, &out, &outlen), ISOPROF_ECORRUPT);
    CHECK_EQ_INT(isoprof_gunzip(in, 100, n, &out, &outlen), ISOPROF_ECORRUPT);

    isoprof_free(back);
    isoprof_free(gz);
    isoprof_free(in);
}

TEST(gzip_empty_and_deterministic)
{
    uint8_t *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    CHECK_EQ_INT(isoprof_gzip(NULL, 0, &a, &alen), 0);
    REQUIRE(a != NULL);
    uint8_t back[8];
    uLongf backlen = sizeof(back);
    /* uncompress() reads zlib streams only; inflate checks the gzip member. */
    CHECK(uncompress(back, &backlen, a, alen) != Z_OK);
    uint8_t *out = NULL;
    size_t outlen = 1;
    CHECK_EQ_INT(isoprof_gunzip(a, alen, 0, &out, &outlen), 0);
    CHECK_EQ_INT(outlen, 0);
    isoprof_free(out);

    const char *t = "the same input gives the same bytes";
    isoprof_free(a);
    CHECK_EQ_INT(isoprof_gzip(t, strlen(t), &a, &alen), 0);
    CHECK_EQ_INT(isoprof_gzip(t, strlen(t), &b, &blen), 0);
    CHECK(a != NULL && b != NULL && alen == blen && memcmp(a, b, alen) == 0);
    isoprof_free(a);
    isoprof_free(b);

    CHECK_EQ_INT(isoprof_gzip(NULL, 1, &a, &alen), -EINVAL);
    CHECK_EQ_INT(isoprof_gunzip(NULL, 0, 10, &out, &outlen), ISOPROF_ECORRUPT);
}

TEST(gzip_oom)
{
    const char *t = "walk every allocation of the compressor";
    for (long i = 0; i < 16; i++) {
        uint8_t *gz = NULL;
        size_t gzlen = 0;
        isoprof_alloc_fail_after(i);
        int rc = isoprof_gzip(t, strlen(t), &gz, &gzlen);
        isoprof_alloc_fail_after(-1);
        CHECK(rc == 0 || rc == -ENOMEM);
        if (rc == 0) {
            uint8_t *out = NULL;
            size_t outlen = 0;
            CHECK_EQ_INT(isoprof_gunzip(gz, gzlen, 100, &out, &outlen), 0);
            CHECK(outlen == strlen(t) && memcmp(out, t, outlen) == 0);
            isoprof_free(out);
            isoprof_free(gz);
        }
    }
}

int main(void)
{
    RUN(buf_append_and_take);
    RUN(buf_grows_past_first_allocation);
    RUN(buf_cap_is_hard);
    RUN(buf_error_is_sticky);
    RUN(buf_enomem_is_sticky);
    RUN(utf8_well_formed);
    RUN(utf8_overlong);
    RUN(utf8_surrogates);
    RUN(utf8_above_max);
    RUN(utf8_truncated_and_stray);
    RUN(json_escapes);
    RUN(json_utf8);
    RUN(json_str_and_null);
    RUN(json_never_in_part);
    RUN(gzip_round_trip);
    RUN(gzip_empty_and_deterministic);
    RUN(gzip_oom);
    TEST_EXIT();
}

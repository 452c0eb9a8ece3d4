/*
 * Unit parsing: durations and sizes (every unit, fractions, the edges of
 * 64 bits, garbage), shares and counts through the loader, log level names.
 */
#include "../test.h"
#include "helpers.h"

#include <errno.h>

static int dur(const char *s, uint64_t want)
{
    uint64_t v = 12345;
    int rc = cfg_parse_duration(s, &v);
    if (rc != 0 || v != want) {
        fprintf(stderr, "duration '%s': rc %d value %llu, want %llu\n", s, rc,
                (unsigned long long)v, (unsigned long long)want);
        return 0;
    }
    return 1;
}

static int size(const char *s, uint64_t want)
{
    uint64_t v = 12345;
    int rc = cfg_parse_size(s, &v);
    if (rc != 0 || v != want) {
        fprintf(stderr, "size '%s': rc %d value %llu, want %llu\n", s, rc, (unsigned long long)v,
                (unsigned long long)want);
        return 0;
    }
    return 1;
}

/* Fails with rc and leaves the output alone. */
static int dur_fails(const char *s, int rc)
{
    uint64_t v = 777;
    int got = cfg_parse_duration(s, &v);
    if (got != rc || v != 777) {
        fprintf(stderr, "duration '%s': rc %d (want %d), value %llu\n", s ? s : "(null)", got, rc,
                (unsigned long long)v);
        return 0;
    }
    return 1;
}

static int size_fails(const char *s, int rc)
{
    uint64_t v = 777;
    int got = cfg_parse_size(s, &v);
    if (got != rc || v != 777) {
        fprintf(stderr, "size '%s': rc %d (want %d)\n", s ? s : "(null)", got, rc);
        return 0;
    }
    return 1;
}

TEST(durations)
{
    CHECK(dur("10s", 10000000000ull));
    CHECK(dur("1.5m", 90000000000ull));
    CHECK(dur("250ms", 250000000ull));
    CHECK(dur("100us", 100000ull));
    CHECK(dur("100\xc2\xb5s", 100000ull)); /* µ, MICRO SIGN */
    CHECK(dur("100\xce\xbcs", 100000ull)); /* μ, GREEK SMALL LETTER MU */
    CHECK(dur("7ns", 7));
    CHECK(dur("2h", 7200000000000ull));
    CHECK(dur("0s", 0));
    CHECK(dur("0.5s", 500000000ull));
    CHECK(dur(".5s", 500000000ull));
    CHECK(dur("5.s", 5000000000ull));
    CHECK(dur("0010ms", 10000000ull));
    CHECK(dur("10 s", 10000000000ull));
    CHECK(dur("0.000000001s", 1));
    CHECK(dur("1.9999999999s", 1999999999ull)); /* digits past the ninth are ignored */
    CHECK(dur("1.5ns", 1));                     /* truncated to whole ns */
    CHECK(dur("0.1h", 360000000000ull));
    CHECK(dur("18446744073709551615ns", UINT64_MAX));
    CHECK(dur("5124095h", 5124095ull * 3600000000000ull));
}

TEST(duration_garbage_and_overflow)
{
    CHECK(dur_fails(NULL, -EINVAL));
    CHECK(dur_fails("", -EINVAL));
    CHECK(dur_fails("10", -EINVAL));
    CHECK(dur_fails("s", -EINVAL));
    CHECK(dur_fails(".s", -EINVAL));
    CHECK(dur_fails("-1s", -EINVAL));
    CHECK(dur_fails("+1s", -EINVAL));
    CHECK(dur_fails(" 1s", -EINVAL));
    CHECK(dur_fails("1s ", -EINVAL));
    CHECK(dur_fails("1e3s", -EINVAL));
    CHECK(dur_fails("0x10s", -EINVAL));
    CHECK(dur_fails("1,5s", -EINVAL));
    CHECK(dur_fails("1..5s", -EINVAL));
    CHECK(dur_fails("10S", -EINVAL));
    CHECK(dur_fails("10sec", -EINVAL));
    CHECK(dur_fails("10 parsecs", -EINVAL));
    CHECK(dur_fails("1s1ms", -EINVAL));
    CHECK(dur_fails("infs", -EINVAL));
    CHECK(dur_fails("nans", -EINVAL));
    CHECK(dur_fails("1d", -EINVAL));
    CHECK(dur_fails("18446744073709551616ns", -ERANGE));
    CHECK(dur_fails("5124096h", -ERANGE));
    CHECK(dur_fails("99999999999h", -ERANGE));
    CHECK(dur_fails("99999999999999999999999999s", -ERANGE));
    /* a bad unit wins over an overflowing number */
    CHECK(dur_fails("99999999999999999999999999xs", -EINVAL));
    /* the fraction of a ns is truncated, so this still fits */
    CHECK(dur("18446744073709551615.9999999999ns", UINT64_MAX));
    CHECK(dur_fails("18446744073709551615.5us", -ERANGE));
}

TEST(sizes)
{
    CHECK(size("4096B", 4096));
    CHECK(size("1KiB", 1024));
    CHECK(size("128MiB", 128ull << 20));
    CHECK(size("1GiB", 1ull << 30));
    CHECK(size("1.5GiB", 3ull << 29));
    CHECK(size("2TiB", 2ull << 40));
    CHECK(size("1KB", 1000));
    CHECK(size("1kB", 1000));
    CHECK(size("10MB", 10000000ull));
    CHECK(size("2GB", 2000000000ull));
    CHECK(size("3TB", 3000000000000ull));
    CHECK(size("0.5KiB", 512));
    CHECK(size("1 GiB", 1ull << 30));
    CHECK(size("18446744073709551615B", UINT64_MAX));
    CHECK(size("16777215TiB", (16777215ull) << 40));
}

TEST(size_garbage_and_overflow)
{
    CHECK(size_fails(NULL, -EINVAL));
    CHECK(size_fails("", -EINVAL));
    CHECK(size_fails("12", -EINVAL));
    CHECK(size_fails("GiB", -EINVAL));
    CHECK(size_fails("1gib", -EINVAL));
    CHECK(size_fails("1Gi", -EINVAL));
    CHECK(size_fails("1G", -EINVAL));
    CHECK(size_fails("1PiB", -EINVAL));
    CHECK(size_fails("-1MiB", -EINVAL));
    CHECK(size_fails("1e3B", -EINVAL));
    CHECK(size_fails("1MiBs", -EINVAL));
    CHECK(size_fails("18446744073709551616B", -ERANGE));
    CHECK(size_fails("16777216TiB", -ERANGE));
    CHECK(size_fails("1e30GiB", -EINVAL));
    CHECK(size_fails("99999999999999999999999GiB", -ERANGE));
}

/* Shares and counts are only reachable through a file. */
static int jitter_of(const char *value, double *out)
{
    char text[128], *why = NULL;
    snprintf(text, sizeof(text), "sampling: {cpu: {jitter: '%s'}}\n", value);
    struct cfg *c = load(text, &why);
    isoprof_free(why);
    if (c == NULL)
        return -1;
    *out = c->sampling.cpu.jitter;
    cfg_free(c);
    return 0;
}

TEST(shares)
{
    double j = -1;
    CHECK(jitter_of("10%", &j) == 0 && j == 0.1);
    CHECK(jitter_of("0.1", &j) == 0 && j == 0.1);
    CHECK(jitter_of("12.5%", &j) == 0 && j == 0.125);
    CHECK(jitter_of("0", &j) == 0 && j == 0.0);
    CHECK(jitter_of("0%", &j) == 0 && j == 0.0);
    CHECK(jitter_of("50%", &j) == 0 && j == 0.5);
    CHECK(jitter_of("50.0001%", &j) != 0);
    CHECK(jitter_of("0.500001", &j) != 0);
    CHECK(jitter_of("0.5000001", &j) == 0 && j == 0.5); /* below one ppm: truncated */
    CHECK(jitter_of("1", &j) != 0);
    CHECK(jitter_of("10 %", &j) == 0 && j == 0.1);
    CHECK(jitter_of("%", &j) != 0);
    CHECK(jitter_of("10%%", &j) != 0);
    CHECK(jitter_of("ten", &j) != 0);
    CHECK(jitter_of("99999999999999999999999%", &j) != 0);
}

static int count_of(const char *value, uint32_t *out)
{
    char text[128], *why = NULL;
    snprintf(text, sizeof(text), "sampling: {cpu: {max_concurrent: %s}}\n", value);
    struct cfg *c = load(text, &why);
    isoprof_free(why);
    if (c == NULL)
        return -1;
    *out = c->sampling.cpu.max_concurrent;
    cfg_free(c);
    return 0;
}

TEST(counts)
{
    uint32_t n = 0;
    CHECK(count_of("1", &n) == 0 && n == 1);
    CHECK(count_of("0016", &n) == 0 && n == 16);
    CHECK(count_of("'32'", &n) == 0 && n == 32);
    CHECK(count_of("1024", &n) == 0 && n == 1024);
    CHECK(count_of("1025", &n) != 0);
    CHECK(count_of("4294967296", &n) != 0);
    CHECK(count_of("-1", &n) != 0);
    CHECK(count_of("+1", &n) != 0);
    CHECK(count_of("1.0", &n) != 0);
    CHECK(count_of("0x10", &n) != 0);
    CHECK(count_of("true", &n) != 0);
}

TEST(log_levels)
{
    CHECK_STR(cfg_log_level_name(CFG_LOG_DEBUG), "debug");
    CHECK_STR(cfg_log_level_name(CFG_LOG_INFO), "info");
    CHECK_STR(cfg_log_level_name(CFG_LOG_WARN), "warn");
    CHECK_STR(cfg_log_level_name(CFG_LOG_ERROR), "error");
    CHECK_STR(cfg_log_level_name((enum cfg_log_level)42), "info");
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int l = CFG_LOG_DEBUG; l <= CFG_LOG_ERROR; l++) {
        char text[64], *why;
        snprintf(text, sizeof(text), "log: {level: %s}\n", names[l]);
        struct cfg *c = load(text, &why);
        REQUIRE(c != NULL);
        CHECK_EQ_INT(c->log.level, l);
        cfg_free(c);
    }
}

int main(void)
{
    RUN(durations);
    RUN(duration_garbage_and_overflow);
    RUN(sizes);
    RUN(size_garbage_and_overflow);
    RUN(shares);
    RUN(counts);
    RUN(log_levels);
    TEST_EXIT();
}

/* Unit tests for the config loader: defaults, a full file, each class of
 * error with its exact position, all errors at once, unit parsing, the
 * example config round trip, and an allocation-failure walk. */
#include "base.h"
#include "config.h"
#include "../test.h"

#include <errno.h>

static struct cfg *load(const char *text, char **why)
{
    struct cfg *c = NULL;
    *why = NULL;
    if (cfg_load_buffer("t.yaml", text, strlen(text), &c, why) != 0)
        return NULL;
    return c;
}

static int has_line(const char *why, const char *line)
{
    return why != NULL && strstr(why, line) != NULL;
}

TEST(defaults)
{
    struct cfg *c;
    REQUIRE(cfg_defaults(&c) == 0);
    CHECK_STR(c->store.path, "./isoprof-data");
    CHECK_EQ_INT(c->store.max_size, 1ull << 30);
    CHECK_EQ_INT(c->ntargets, 1);
    CHECK_STR(c->targets[0].host, "127.0.0.1");
    CHECK_EQ_INT(c->targets[0].port, 9229);
    CHECK_EQ_INT(c->targets[0].memory_limit, 128ull << 20);
    CHECK(c->targets[0].worker == NULL);
    CHECK_EQ_INT(c->discovery.interval_ns, 5000000000ull);
    CHECK_EQ_INT(c->sampling.cpu.duration_ns, 10000000000ull);
    CHECK_EQ_INT(c->sampling.cpu.period_ns, 60000000000ull);
    CHECK_EQ_INT(c->sampling.cpu.interval_ns, 10000000ull);
    CHECK(c->sampling.cpu.jitter > 0.0999 && c->sampling.cpu.jitter < 0.1001);
    CHECK_EQ_INT(c->sampling.cpu.max_concurrent, 4);
    CHECK_EQ_INT(c->log.level, CFG_LOG_INFO);
    cfg_free(c);
}

TEST(full_file)
{
    char *why;
    struct cfg *c = load("store:\n  path: /tmp/s\n  max_size: 2GiB\n"
                         "targets:\n"
                         "  - inspector: 127.0.0.1:9230\n    worker: api\n    version: v42\n"
                         "    memory_limit: 256MiB\n"
                         "  - inspector: \"[::1]:9231\"\n"
                         "discovery: {interval: 500ms}\n"
                         "sampling:\n  cpu:\n    duration: 2s\n    period: 1.5m\n"
                         "    interval: 100us\n    jitter: 0.25\n    max_concurrent: 16\n"
                         "log: {level: debug}\n",
                         &why);
    REQUIRE(c != NULL);
    CHECK_STR(c->store.path, "/tmp/s");
    CHECK_EQ_INT(c->store.max_size, 2ull << 30);
    CHECK_EQ_INT(c->ntargets, 2);
    CHECK_STR(c->targets[0].worker, "api");
    CHECK_STR(c->targets[0].version, "v42");
    CHECK_EQ_INT(c->targets[0].memory_limit, 256ull << 20);
    CHECK_STR(c->targets[1].host, "::1");
    CHECK_EQ_INT(c->targets[1].port, 9231);
    CHECK_EQ_INT(c->targets[1].memory_limit, 128ull << 20);
    CHECK_EQ_INT(c->discovery.interval_ns, 500000000ull);
    CHECK_EQ_INT(c->sampling.cpu.period_ns, 90000000000ull);
    CHECK_EQ_INT(c->sampling.cpu.interval_ns, 100000ull);
    CHECK(c->sampling.cpu.jitter > 0.2499 && c->sampling.cpu.jitter < 0.2501);
    CHECK_EQ_INT(c->sampling.cpu.max_concurrent, 16);
    CHECK_EQ_INT(c->log.level, CFG_LOG_DEBUG);
    cfg_free(c);
}

TEST(empty_targets_and_empty_file)
{
    char *why;
    struct cfg *c = load("targets: []\n", &why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(c->ntargets, 0);
    cfg_free(c);
    c = load("", &why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(c->ntargets, 1);
    cfg_free(c);
}

TEST(errors_with_positions)
{
    char *why;
    struct cfg *c = load("store:\n"
                         "  max_size: 12\n"          /* 2:13 no unit */
                         "  bogus: 1\n"              /* 3:3 unknown */
                         "targets:\n"
                         "  - inspector: 127.0.0.1:99999\n" /* 5:16 bad port */
                         "    worker: [a]\n"         /* 6:13 wrong type */
                         "  - worker: x\n"           /* 7:5 missing inspector */
                         "sampling:\n"
                         "  cpu:\n"
                         "    duration: 20s\n"
                         "    period: 10s\n"         /* 11:13 period < duration */
                         "    interval: 50us\n"      /* 12:15 below 100us */
                         "    jitter: 70%\n"         /* 13:13 out of range */
                         "log: {level: loud}\n"      /* 14:14 bad enum */
                         "log: {level: info}\n",     /* 15:1 duplicate */
                         &why);
    CHECK(c == NULL);
    REQUIRE(why != NULL);
    CHECK(has_line(why, "t.yaml:2:13: store.max_size"));
    CHECK(has_line(why, "t.yaml:3:3: unknown key 'store.bogus'"));
    CHECK(has_line(why, "t.yaml:5:16: targets[0].inspector"));
    CHECK(has_line(why, "t.yaml:6:13: targets[0].worker must be a scalar"));
    CHECK(has_line(why, "t.yaml:7:5: targets[1] has no 'inspector'"));
    CHECK(has_line(why, "t.yaml:11:13: sampling.cpu.period must be >= sampling.cpu.duration (20s)"));
    CHECK(has_line(why, "t.yaml:12:15: sampling.cpu.interval must be between 100us and 1s"));
    CHECK(has_line(why, "t.yaml:13:13: sampling.cpu.jitter"));
    CHECK(has_line(why, "t.yaml:14:14: log.level"));
    CHECK(has_line(why, "t.yaml:15:1: duplicate key 'log'"));
    isoprof_free(why);
}

TEST(wrong_shapes)
{
    char *why;
    CHECK(load("- a\n- b\n", &why) == NULL);
    CHECK(has_line(why, "t.yaml:1:1: the configuration must be a mapping"));
    isoprof_free(why);
    CHECK(load("sampling: 5\n", &why) == NULL);
    CHECK(has_line(why, "t.yaml:1:11: sampling must be a mapping"));
    isoprof_free(why);
    CHECK(load("targets: {inspector: x}\n", &why) == NULL);
    CHECK(has_line(why, "targets must be a list"));
    isoprof_free(why);
    CHECK(load("store: {path: [x]}\n", &why) == NULL);
    CHECK(has_line(why, "store.path must be a scalar"));
    isoprof_free(why);
}

TEST(syntax_error)
{
    char *why;
    CHECK(load("store:\n  path: [unclosed\n", &why) == NULL);
    REQUIRE(why != NULL);
    CHECK(strncmp(why, "t.yaml:", 7) == 0);
    CHECK(strstr(why, "YAML syntax") != NULL);
    isoprof_free(why);
}

TEST(durations_and_sizes)
{
    uint64_t v;
    CHECK(cfg_parse_duration("10s", &v) == 0 && v == 10000000000ull);
    CHECK(cfg_parse_duration("1.5m", &v) == 0 && v == 90000000000ull);
    CHECK(cfg_parse_duration("250ms", &v) == 0 && v == 250000000ull);
    CHECK(cfg_parse_duration("100us", &v) == 0 && v == 100000ull);
    CHECK(cfg_parse_duration("2h", &v) == 0 && v == 7200000000000ull);
    CHECK(cfg_parse_duration("10", &v) == -EINVAL);
    CHECK(cfg_parse_duration("s", &v) == -EINVAL);
    CHECK(cfg_parse_duration("-1s", &v) == -EINVAL);
    CHECK(cfg_parse_duration("10 parsecs", &v) == -EINVAL);
    CHECK(cfg_parse_duration("99999999999h", &v) == -ERANGE);
    CHECK(cfg_parse_size("128MiB", &v) == 0 && v == 128ull << 20);
    CHECK(cfg_parse_size("1GiB", &v) == 0 && v == 1ull << 30);
    CHECK(cfg_parse_size("10MB", &v) == 0 && v == 10000000ull);
    CHECK(cfg_parse_size("4096B", &v) == 0 && v == 4096);
    CHECK(cfg_parse_size("12", &v) == -EINVAL);
    CHECK(cfg_parse_size("1e30GiB", &v) == -ERANGE);
}

TEST(example_round_trip)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    REQUIRE(f != NULL);
    CHECK(cfg_write_example(f) == 0);
    fclose(f);
    char *why;
    struct cfg *c = load(text, &why);
    if (c == NULL)
        fprintf(stderr, "%s\n%s", text, why ? why : "");
    REQUIRE(c != NULL);
    struct cfg *d;
    REQUIRE(cfg_defaults(&d) == 0);
    CHECK_STR(c->store.path, d->store.path);
    CHECK_EQ_INT(c->store.max_size, d->store.max_size);
    CHECK_EQ_INT(c->ntargets, d->ntargets);
    CHECK_EQ_INT(c->targets[0].port, d->targets[0].port);
    CHECK_EQ_INT(c->sampling.cpu.period_ns, d->sampling.cpu.period_ns);
    CHECK_EQ_INT(c->sampling.cpu.interval_ns, d->sampling.cpu.interval_ns);
    CHECK_EQ_INT(c->sampling.cpu.max_concurrent, d->sampling.cpu.max_concurrent);
    cfg_free(c);
    cfg_free(d);
    free(text); /* banned-ok: allocated by open_memstream */
}

TEST(missing_file)
{
    struct cfg *c;
    char *why;
    CHECK(cfg_load_file("/nonexistent/isoprof.yaml", &c, &why) == -ENOENT);
    CHECK(has_line(why, "/nonexistent/isoprof.yaml: No such file"));
    isoprof_free(why);
}

TEST(alloc_failure_walk)
{
    const char *text = "store: {path: /x}\ntargets:\n  - {inspector: 127.0.0.1:1, worker: w}\n"
                       "bogus: 1\n";
    for (long n = 0; n < 200; n++) {
        struct cfg *c = NULL;
        char *why = NULL;
        isoprof_alloc_fail_after(n);
        int rc = cfg_load_buffer("t.yaml", text, strlen(text), &c, &why);
        isoprof_alloc_fail_after(-1);
        CHECK(rc == -ENOMEM || rc == ISOPROF_ECONFIG);
        CHECK(c == NULL);
        isoprof_free(why);
        if (rc == ISOPROF_ECONFIG) /* no allocation failed: walked them all */
            break;
    }
}

int main(void)
{
    RUN(defaults);
    RUN(full_file);
    RUN(empty_targets_and_empty_file);
    RUN(errors_with_positions);
    RUN(wrong_shapes);
    RUN(syntax_error);
    RUN(durations_and_sizes);
    RUN(example_round_trip);
    RUN(missing_file);
    RUN(alloc_failure_walk);
    TEST_EXIT();
}

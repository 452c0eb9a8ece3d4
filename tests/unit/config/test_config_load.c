/*
 * Loader tests: the defaults, a full valid file, every class of error with
 * its exact line:col, many errors reported together and in file order,
 * files on disk, and the reload check.
 */
#include "../test.h"
#include "helpers.h"

#include <errno.h>
#include <math.h>
#include <unistd.h>

TEST(defaults)
{
    struct cfg *c;
    REQUIRE(cfg_defaults(&c) == 0);
    CHECK_STR(c->source, "<defaults>");
    CHECK_STR(c->store.path, "./isoprof-data");
    CHECK_EQ_INT(c->store.max_size, 1ull << 30);
    REQUIRE(c->ntargets == 1);
    CHECK_STR(c->targets[0].inspector, "127.0.0.1:9229");
    CHECK_STR(c->targets[0].host, "127.0.0.1");
    CHECK_EQ_INT(c->targets[0].port, 9229);
    CHECK_EQ_INT(c->targets[0].memory_limit, CFG_SIZE_AUTO);
    CHECK(c->targets[0].worker == NULL);
    CHECK(c->targets[0].version == NULL);
    CHECK_EQ_INT(c->discovery.interval_ns, 5000000000ull);
    CHECK_EQ_INT(c->sampling.cpu.duration_ns, 10000000000ull);
    CHECK_EQ_INT(c->sampling.cpu.period_ns, 60000000000ull);
    CHECK_EQ_INT(c->sampling.cpu.interval_ns, 10000000ull);
    CHECK(c->sampling.cpu.jitter == 0.1);
    CHECK_EQ_INT(c->sampling.cpu.max_concurrent, 4);
    CHECK_EQ_INT(c->sampling.cpu.mode, CFG_CPU_AUTO);
    CHECK_EQ_INT(c->log.level, CFG_LOG_INFO);
    cfg_free(c);
    cfg_free(NULL);
}

TEST(empty_inputs_are_the_defaults)
{
    static const char *texts[] = {"", "# only a comment\n", "~\n", "---\n", "store:\nlog: ~\n",
                                  "sampling:\n  cpu:\n"};
    struct cfg *d;
    REQUIRE(cfg_defaults(&d) == 0);
    CHECK_EQ_INT(valid_texts_failed(texts, ISOPROF_ARRAY_SIZE(texts), d), 0);
    struct cfg *c = NULL;
    CHECK(cfg_load_buffer(NULL, NULL, 0, &c, NULL) == 0);
    REQUIRE(c != NULL);
    CHECK_STR(c->source, "<buffer>");
    CHECK(cfg_same(c, d));
    cfg_free(c);
    cfg_free(d);
}

TEST(full_file)
{
    char *why;
    struct cfg *c = load("# a full config\n"
                         "store:\n  path: /var/lib/isoprof\n  max_size: 2.5GiB\n"
                         "targets:\n"
                         "  - inspector: 127.0.0.1:9230\n    worker: api\n    version: v42\n"
                         "    memory_limit: 256MiB\n"
                         "  - inspector: \"[::1]:9231\"\n    worker: ~\n"
                         "  - {inspector: 'localhost:65535', memory_limit: 100MB}\n"
                         "discovery: {interval: 500ms}\n"
                         "sampling:\n  cpu:\n    duration: 2s\n    period: 1.5m\n"
                         "    interval: 100us\n    jitter: 25%\n    max_concurrent: 16\n    mode: auto\n"
                         "log: {level: debug}\n",
                         &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL);
    CHECK(why == NULL);
    CHECK_STR(c->source, "t.yaml");
    CHECK_STR(c->store.path, "/var/lib/isoprof");
    CHECK_EQ_INT(c->store.max_size, 5ull << 29);
    REQUIRE(c->ntargets == 3);
    CHECK_STR(c->targets[0].inspector, "127.0.0.1:9230");
    CHECK_STR(c->targets[0].host, "127.0.0.1");
    CHECK_EQ_INT(c->targets[0].port, 9230);
    CHECK_STR(c->targets[0].worker, "api");
    CHECK_STR(c->targets[0].version, "v42");
    CHECK_EQ_INT(c->targets[0].memory_limit, 256ull << 20);
    CHECK_STR(c->targets[1].inspector, "[::1]:9231");
    CHECK_STR(c->targets[1].host, "::1");
    CHECK_EQ_INT(c->targets[1].port, 9231);
    CHECK(c->targets[1].worker == NULL);
    CHECK(c->targets[1].version == NULL);
    CHECK_EQ_INT(c->targets[1].memory_limit, CFG_SIZE_AUTO);
    CHECK_STR(c->targets[2].host, "localhost");
    CHECK_EQ_INT(c->targets[2].port, 65535);
    CHECK_EQ_INT(c->targets[2].memory_limit, 100000000ull);
    CHECK_EQ_INT(c->discovery.interval_ns, 500000000ull);
    CHECK_EQ_INT(c->sampling.cpu.duration_ns, 2000000000ull);
    CHECK_EQ_INT(c->sampling.cpu.period_ns, 90000000000ull);
    CHECK_EQ_INT(c->sampling.cpu.interval_ns, 100000ull);
    CHECK(c->sampling.cpu.jitter == 0.25);
    CHECK_EQ_INT(c->sampling.cpu.max_concurrent, 16);
    CHECK_EQ_INT(c->sampling.cpu.mode, CFG_CPU_AUTO);
    CHECK_EQ_INT(c->log.level, CFG_LOG_DEBUG);
    cfg_free(c);
}

TEST(values_at_their_bounds)
{
    char *why;
    struct cfg *c = load("store: {max_size: 1MiB}\n"
                         "discovery: {interval: 1h}\n"
                         "sampling:\n  cpu: {duration: 100ms, period: 100ms, interval: 1s,\n"
                         "        jitter: 0.5, max_concurrent: 1024}\n"
                         "log: {level: error}\n"
                         "targets: [{inspector: '10.0.0.1:1', memory_limit: 1MiB}]\n",
                         &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(c->store.max_size, 1ull << 20);
    CHECK_EQ_INT(c->discovery.interval_ns, 3600000000000ull);
    CHECK_EQ_INT(c->sampling.cpu.period_ns, 100000000ull);
    CHECK(c->sampling.cpu.jitter == 0.5);
    CHECK_EQ_INT(c->sampling.cpu.max_concurrent, 1024);
    CHECK_EQ_INT(c->log.level, CFG_LOG_ERROR);
    CHECK_EQ_INT(c->targets[0].port, 1);
    cfg_free(c);

    c = load("sampling: {cpu: {jitter: 0, period: 24h}}\n", &why);
    REQUIRE(c != NULL);
    CHECK(c->sampling.cpu.jitter == 0.0);
    CHECK_EQ_INT(c->sampling.cpu.period_ns, 86400000000000ull);
    cfg_free(c);
}

/* anomaly.regression: the defaults, a full section, every value reloadable. */
TEST(regression_options)
{
    struct cfg *d;
    REQUIRE(cfg_defaults(&d) == 0);
    CHECK_EQ_INT(d->anomaly.regression.enabled, 1);
    CHECK_EQ_INT(d->anomaly.regression.min_samples, 1000);
    CHECK(fabs(d->anomaly.regression.min_delta - 0.02) < 1e-9);
    CHECK(fabs(d->anomaly.regression.min_ratio - 1.1) < 1e-9);
    CHECK(fabs(d->anomaly.regression.alpha - 0.0001) < 1e-9);
    CHECK_EQ_INT(d->anomaly.regression.max_versions, 8);
    CHECK_EQ_INT(d->anomaly.regression.extra_windows, 6);
    CHECK_EQ_INT(d->anomaly.regression.max_functions, 4096);
    CHECK_EQ_INT(d->anomaly.regression.warmup_ns, 30000000000ull);
    char *why;
    struct cfg *c = load("anomaly:\n  regression:\n    enabled: false\n    min_samples: 2500\n"
                         "    min_delta: 5%\n    min_ratio: 1.25\n    alpha: 0.1%\n"
                         "    max_versions: 3\n    extra_windows: 0\n    max_functions: 16\n"
                         "    warmup: 0s\n",
                         &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(c->anomaly.regression.enabled, 0);
    CHECK_EQ_INT(c->anomaly.regression.min_samples, 2500);
    CHECK(fabs(c->anomaly.regression.min_delta - 0.05) < 1e-9);
    CHECK(fabs(c->anomaly.regression.min_ratio - 1.25) < 1e-9);
    CHECK(fabs(c->anomaly.regression.alpha - 0.001) < 1e-9);
    CHECK_EQ_INT(c->anomaly.regression.max_versions, 3);
    CHECK_EQ_INT(c->anomaly.regression.extra_windows, 0);
    CHECK_EQ_INT(c->anomaly.regression.max_functions, 16);
    CHECK_EQ_INT(c->anomaly.regression.warmup_ns, 0);
    /* A running agent takes all of it without a restart. */
    CHECK_EQ_INT(cfg_check_reload(d, c, NULL), 0);
    cfg_free(c);
    cfg_free(d);
}

TEST(targets_absent_empty_or_null)
{
    char *why;
    struct cfg *c = load("targets: []\n", &why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(c->ntargets, 0);
    CHECK(c->targets == NULL);
    cfg_free(c);
    c = load("targets:\n", &why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(c->ntargets, 0);
    cfg_free(c);
    c = load("log: {level: warn}\n", &why);
    REQUIRE(c != NULL);
    REQUIRE(c->ntargets == 1);
    CHECK_STR(c->targets[0].inspector, CFG_DEFAULT_INSPECTOR);
    CHECK_EQ_INT(c->log.level, CFG_LOG_WARN);
    cfg_free(c);
}

static const struct one_error one_errors[] = {
    /* unknown keys */
    {"bogus: 1\n", "t.yaml:1:1: unknown key 'bogus'"},
    {"store:\n  path: /x\n  bogus: 1\n", "t.yaml:3:3: unknown key 'store.bogus'"},
    {"sampling:\n  cpu:\n    peroid: 5m\n",
     "t.yaml:3:5: unknown key 'sampling.cpu.peroid' (did you mean 'period'?)"},
    {"sampling: {period: 5m}\n",
     "t.yaml:1:12: unknown key 'sampling.period' (did you mean 'sampling.cpu.period'?)"},
    {"target:\n  - inspector: a:1\n", "t.yaml:1:1: unknown key 'target' (did you mean 'targets'?)"},
    {"targets:\n  - inspector: a:1\n    workr: x\n",
     "t.yaml:3:5: unknown key 'targets[0].workr' (did you mean 'worker'?)"},
    {"sampling.cpu.period: 5m\n", "t.yaml:1:1: 'sampling.cpu.period': write nested keys, one "
                                   "name per level, not a dotted name"},
    {"sampling:\n  cpu.period: 5m\n", "t.yaml:2:3: 'sampling.cpu.period': write nested keys, "
                                      "one name per level, not a dotted name"},
    /* wrong shapes */
    {"- a\n- b\n", "t.yaml:1:1: the configuration must be a mapping of sections, not a list"},
    {"just words\n", "t.yaml:1:1: the configuration must be a mapping of sections, not a scalar"},
    {"store: {path: {a: b}}\n", "t.yaml:1:15: store.path must be a string, not a mapping"},
    {"store:\n  max_size:\n    - 1GiB\n", "t.yaml:3:5: store.max_size must be a size, not a list"},
    {"sampling: 5\n", "t.yaml:1:11: sampling must be a mapping of options, not a scalar"},
    {"sampling:\n  cpu: [1, 2]\n",
     "t.yaml:2:8: sampling.cpu must be a mapping of options, not a list"},
    {"targets: {inspector: 'a:1'}\n",
     "t.yaml:1:10: targets must be a list of mappings, not a mapping"},
    {"targets: [a:1]\n", "t.yaml:1:11: targets[0] must be a mapping with at least 'inspector', "
                         "not a scalar"},
    {"targets:\n  - 127.0.0.1:9229\n",
     "t.yaml:2:5: targets[0] must be a mapping with at least 'inspector', not a scalar"},
    {"targets:\n  - inspector: [x]\n",
     "t.yaml:2:16: targets[0].inspector must be host:port, not a list"},
    {"? [a]\n: 1\n", "t.yaml:1:3: the top level: a key must be a name, not a list"},
    {"store:\n  path:\n", "t.yaml:2:8: store.path has no value (the default is ./isoprof-data; "
                          "leave the key out for it)"},
    {"targets:\n  - inspector: ~\n", "t.yaml:2:16: targets[0].inspector has no value"},
    /* bad values */
    {"store: {max_size: 12}\n",
     "t.yaml:1:19: store.max_size '12' needs a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB or TB), "
     "as in '12MiB'"},
    {"store: {max_size: 512KiB}\n", "t.yaml:1:19: store.max_size must be >= 1MiB, not '512KiB'"},
    {"store: {max_size: 1PB}\n", "t.yaml:1:19: store.max_size '1PB' is not a size (a number and "
                                 "a unit: B, KiB, MiB, GiB, ...)"},
    {"store: {max_size: 99999999999TiB}\n",
     "t.yaml:1:19: store.max_size '99999999999TiB' is too large"},
    {"store: {path: ''}\n", "t.yaml:1:15: store.path must not be empty"},
    {"store: {path: \"a\\0b\"}\n", "t.yaml:1:15: store.path must not contain a NUL byte"},
    {"store: {path: \"a\\nb\"}\n",
     "t.yaml:1:15: store.path must not contain control characters ('a\\x0ab')"},
    {"discovery:\n  interval: 5\n",
     "t.yaml:2:13: discovery.interval '5' needs a unit (ns, us, ms, s, m or h), as in '5s'"},
    {"discovery:\n  interval: soon\n", "t.yaml:2:13: discovery.interval 'soon' is not a duration "
                                       "(a number and a unit: ns, us, ms, s, m or h)"},
    {"discovery:\n  interval: 2h\n",
     "t.yaml:2:13: discovery.interval must be between 100ms and 1h, not '2h'"},
    {"sampling:\n  cpu:\n    interval: 50us\n",
     "t.yaml:3:15: sampling.cpu.interval must be between 100us and 1s, not '50us'"},
    {"sampling:\n  cpu:\n    period: 25h\n",
     "t.yaml:3:13: sampling.cpu.period must be between 100ms and 24h, not '25h'"},
    {"sampling: {cpu: {jitter: 70%}}\n",
     "t.yaml:1:26: sampling.cpu.jitter must be between 0% and 50%, not '70%'"},
    {"sampling: {cpu: {jitter: 0.6}}\n",
     "t.yaml:1:26: sampling.cpu.jitter must be between 0% and 50%, not '0.6'"},
    {"sampling: {cpu: {jitter: -0.1}}\n",
     "t.yaml:1:26: sampling.cpu.jitter '-0.1' is not a share (as in 10% or 0.1)"},
    {"sampling: {cpu: {max_concurrent: 0}}\n",
     "t.yaml:1:34: sampling.cpu.max_concurrent must be between 1 and 1024, not '0'"},
    {"sampling: {cpu: {max_concurrent: 99999999999999999999999}}\n",
     "t.yaml:1:34: sampling.cpu.max_concurrent must be between 1 and 1024, not "
     "'99999999999999999999999'"},
    {"sampling: {cpu: {max_concurrent: 4.5}}\n",
     "t.yaml:1:34: sampling.cpu.max_concurrent '4.5' is not a whole number"},
    {"sampling: {cpu: {max_concurrent: 4s}}\n",
     "t.yaml:1:34: sampling.cpu.max_concurrent '4s' is not a whole number"},
    {"log: {level: loud}\n",
     "t.yaml:1:14: log.level must be debug, info, warn or error, not 'loud'"},
    {"log: {level: INFO}\n",
     "t.yaml:1:14: log.level must be debug, info, warn or error, not 'INFO'"},
    {"targets:\n  - {inspector: 'a:1', worker: ''}\n",
     "t.yaml:2:32: targets[0].worker must not be empty"},
    {"targets:\n  - {inspector: 'a:1', memory_limit: 1KiB}\n",
     "t.yaml:2:38: targets[0].memory_limit must be >= 1MiB, not '1KiB'"},
    /* inspector addresses */
    {"targets: [{inspector: localhost}]\n",
     "t.yaml:1:23: targets[0].inspector 'localhost' is not host:port or [v6]:port: no ':port'"},
    {"targets: [{inspector: 'localhost:0'}]\n",
     "t.yaml:1:23: targets[0].inspector 'localhost:0' is not host:port or [v6]:port: the port "
     "must be a number from 1 to 65535"},
    {"targets: [{inspector: '127.0.0.1:65536'}]\n",
     "t.yaml:1:23: targets[0].inspector '127.0.0.1:65536' is not host:port or [v6]:port: the "
     "port must be a number from 1 to 65535"},
    {"targets: [{inspector: '127.0.0.1:http'}]\n",
     "t.yaml:1:23: targets[0].inspector '127.0.0.1:http' is not host:port or [v6]:port: the "
     "port must be a number from 1 to 65535"},
    {"targets: [{inspector: '127.0.0.1:'}]\n",
     "t.yaml:1:23: targets[0].inspector '127.0.0.1:' is not host:port or [v6]:port: the port "
     "must be a number from 1 to 65535"},
    {"targets: [{inspector: ':9229'}]\n",
     "t.yaml:1:23: targets[0].inspector ':9229' is not host:port or [v6]:port: the host is empty"},
    {"targets: [{inspector: '::1:9229'}]\n",
     "t.yaml:1:23: targets[0].inspector '::1:9229' is not host:port or [v6]:port: an IPv6 "
     "address needs brackets, as in [::1]:9229"},
    {"targets: [{inspector: '[::1:9229'}]\n",
     "t.yaml:1:23: targets[0].inspector '[::1:9229' is not host:port or [v6]:port: '[' without "
     "']'"},
    {"targets: [{inspector: '[::1]9229'}]\n",
     "t.yaml:1:23: targets[0].inspector '[::1]9229' is not host:port or [v6]:port: no ':port' "
     "after ']'"},
    {"targets: [{inspector: '[10.0.0.1]:1'}]\n",
     "t.yaml:1:23: targets[0].inspector '[10.0.0.1]:1' is not host:port or [v6]:port: brackets "
     "are only for IPv6 addresses"},
    {"targets: [{inspector: 'a b:1'}]\n",
     "t.yaml:1:23: targets[0].inspector 'a b:1' is not host:port or [v6]:port: the host has a "
     "character that is not allowed"},
    {"targets:\n  - worker: x\n",
     "t.yaml:2:5: targets[0] has no 'inspector' (inspector endpoint, host:port or [v6]:port)"},
    /* the DogStatsD listen address: numeric or localhost, a real port */
    {"anomaly: {latency: {listen: 'statsd.internal:8125'}}\n",
     "t.yaml:1:29: anomaly.latency.listen 'statsd.internal:8125' is not ip:port, localhost:port "
     "or [v6]:port: the host must be an IP address or localhost (nothing is resolved) (\"\" "
     "turns it off)"},
    {"anomaly: {latency: {listen: '127.0.0.1'}}\n",
     "t.yaml:1:29: anomaly.latency.listen '127.0.0.1' is not ip:port, localhost:port or "
     "[v6]:port: no ':port' (\"\" turns it off)"},
    {"anomaly: {latency: {listen: '127.0.0.1:0'}}\n",
     "t.yaml:1:29: anomaly.latency.listen '127.0.0.1:0' is not ip:port, localhost:port or "
     "[v6]:port: the port must be a number from 1 to 65535 (\"\" turns it off)"},
    /* ... and loopback: DogStatsD is unauthenticated UDP, and its tags decide
     * which series the detector tracks */
    {"anomaly: {latency: {listen: '0.0.0.0:8125'}}\n",
     "t.yaml:1:29: anomaly.latency.listen '0.0.0.0:8125' is not a loopback address "
     "(127.0.0.0/8, [::1] or localhost)"},
    {"anomaly:\n  latency:\n    listen: '10.1.2.3:8125'\n",
     "t.yaml:3:13: anomaly.latency.listen '10.1.2.3:8125' is not a loopback address "
     "(127.0.0.0/8, [::1] or localhost)"},
    {"anomaly: {latency: {listen: '[::]:8125'}}\n",
     "t.yaml:1:29: anomaly.latency.listen '[::]:8125' is not a loopback address (127.0.0.0/8, "
     "[::1] or localhost)"},
    /* deploy regressions: bounds that keep the test meaningful */
    {"anomaly: {regression: {min_samples: 10}}\n",
     "t.yaml:1:37: anomaly.regression.min_samples must be between 100 and 100000000, not '10'"},
    {"anomaly: {regression: {min_ratio: 0.9}}\n",
     "t.yaml:1:35: anomaly.regression.min_ratio must be between 100% and 100, not '0.9'"},
    {"anomaly: {regression: {alpha: 50%}}\n",
     "t.yaml:1:31: anomaly.regression.alpha must be between 0.0001% and 10%, not '50%'"},
    {"anomaly: {regression: {max_versions: 1}}\n",
     "t.yaml:1:38: anomaly.regression.max_versions must be between 2 and 1000, not '1'"},
    {"anomaly: {regression: {enabled: yes}}\n",
     "t.yaml:1:33: anomaly.regression.enabled must be true or false, not 'yes'"},
    /* duplicates */
    {"log: {level: info}\nlog: {level: warn}\n", "t.yaml:2:1: duplicate key 'log' (first at 1:1)"},
    {"sampling:\n  cpu:\n    period: 1m\n    period: 2m\n",
     "t.yaml:4:5: duplicate key 'period' (first at 3:5)"},
    {"targets:\n  - {inspector: 'a:1', inspector: 'b:2'}\n",
     "t.yaml:2:24: duplicate key 'inspector' (first at 2:6)"},
    /* rules between options */
    {"sampling:\n  cpu:\n    period: 5s\n",
     "t.yaml:3:13: sampling.cpu.period must be >= sampling.cpu.duration (10s)"},
    {"sampling:\n  cpu:\n    duration: 2m\n",
     "t.yaml:3:15: sampling.cpu.duration must be <= sampling.cpu.period (1m)"},
    /* YAML itself */
    {"store:\n  path: [unclosed\n",
     "t.yaml:3:1: YAML syntax error: did not find expected ',' or ']' (while parsing a flow "
     "sequence that starts at line 2)"},
    {"a: b: c\n", "t.yaml:1:5: YAML syntax error: mapping values are not allowed in this context"},
    {"log:\n  level: *nope\n", "t.yaml:2:10: YAML syntax error: found undefined alias"},
    {"log: {level: info}\nx: \x01\n",
     "t.yaml:2:4: YAML: control characters are not allowed (byte 0x01)"},
    {"log:\n\tlevel: info\n",
     "t.yaml:2:1: YAML syntax error: found character that cannot start any token (while "
     "scanning for the next token that starts at line 2); YAML indents with spaces, not tabs"},
    {"log: [a\xff]\n", "t.yaml:1:8: YAML: invalid leading UTF-8 octet (byte 0xff)"},
    {"log: {level: info}\n---\nlog: {level: warn}\n",
     "t.yaml:3:1: a config file holds one YAML document; this is a second one"},
};

TEST(each_error_class_at_its_position)
{
    CHECK_EQ_INT(one_errors_failed(one_errors, ISOPROF_ARRAY_SIZE(one_errors)), 0);
}

TEST(all_problems_together_in_file_order)
{
    const char *text = "store:\n"
                       "  max_size: 12\n"                   /* 2:13 no unit */
                       "  bogus: 1\n"                       /* 3:3 unknown */
                       "targets:\n"
                       "  - inspector: 127.0.0.1:99999\n"   /* 5:16 bad port */
                       "    worker: [a]\n"                  /* 6:13 wrong type */
                       "  - worker: x\n"                    /* 7:5 missing inspector */
                       "sampling:\n"
                       "  cpu:\n"
                       "    duration: 20s\n"
                       "    period: 10s\n"                  /* 11:13 period < duration */
                       "    interval: 50us\n"               /* 12:15 below 100us */
                       "    jitter: 70%\n"                  /* 13:13 out of range */
                       "log: {level: loud}\n"               /* 14:14 bad enum */
                       "log: {level: info}\n";              /* 15:1 duplicate */
    char *why;
    struct cfg *c = load(text, &why);
    CHECK(c == NULL);
    REQUIRE(why != NULL);
    static const char *want[] = {
        "t.yaml:2:13: store.max_size '12' needs a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB or TB), "
        "as in '12MiB'",
        "t.yaml:3:3: unknown key 'store.bogus'",
        "t.yaml:5:16: targets[0].inspector '127.0.0.1:99999' is not host:port or [v6]:port: the "
        "port must be a number from 1 to 65535",
        "t.yaml:6:13: targets[0].worker must be a string, not a list",
        "t.yaml:7:5: targets[1] has no 'inspector' (inspector endpoint, host:port or [v6]:port)",
        "t.yaml:11:13: sampling.cpu.period must be >= sampling.cpu.duration (20s)",
        "t.yaml:12:15: sampling.cpu.interval must be between 100us and 1s, not '50us'",
        "t.yaml:13:13: sampling.cpu.jitter must be between 0% and 50%, not '70%'",
        "t.yaml:14:14: log.level must be debug, info, warn or error, not 'loud'",
        "t.yaml:15:1: duplicate key 'log' (first at 14:1)",
    };
    CHECK_EQ_INT(count_lines(why), ISOPROF_ARRAY_SIZE(want));
    const char *p = why;
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(want); i++) {
        size_t n = strlen(want[i]);
        if (p == NULL || strncmp(p, want[i], n) != 0 || (p[n] != '\n' && p[n] != '\0')) {
            fprintf(stderr, "line %zu: want\n  %s\ngot\n%s\n", i, want[i], why);
            test_failed_ = 1;
            break;
        }
        p = p[n] == '\n' ? p + n + 1 : NULL;
    }
    CHECK(why[strlen(why) - 1] != '\n');
    isoprof_free(why);
}

TEST(relation_skipped_when_a_side_is_invalid)
{
    /* The bad duration is the only problem; the rule does not fire on it. */
    char *why;
    CHECK(load("sampling: {cpu: {duration: 2h, period: 30s}}\n", &why) == NULL);
    CHECK_EQ_INT(count_lines(why), 1);
    CHECK(has_prefix(why, "t.yaml:1:28: sampling.cpu.duration must be between"));
    isoprof_free(why);
}

TEST(too_many_problems_are_capped)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    REQUIRE(f != NULL);
    for (int i = 0; i < 5000; i++)
        fprintf(f, "k%d: 1\n", i);
    fclose(f);
    char *why;
    struct cfg *c = load(text, &why);
    CHECK(c == NULL);
    CHECK_EQ_INT(count_lines(why), 101);
    CHECK(has_line(why, "t.yaml:1:1: unknown key 'k0'"));
    CHECK(has_line(why, "t.yaml:100:1: unknown key 'k99'"));
    CHECK(has_line(why, "t.yaml: too many problems; only the first 100 are shown"));
    isoprof_free(why);
    free(text); /* banned-ok: allocated by open_memstream */
}

TEST(long_and_odd_keys_and_values_are_echoed_safely)
{
    char text[600];
    char key[300];
    memset(key, 'k', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    snprintf(text, sizeof(text), "%s: 1\nlog: {level: \"a\\nb\"}\n", key);
    char *why;
    CHECK(load(text, &why) == NULL);
    CHECK_EQ_INT(count_lines(why), 2);
    CHECK(has_line(why, "t.yaml:1:1: unknown key "
                        "'kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...'"));
    CHECK(has_line(why,
                   "t.yaml:2:14: log.level must be debug, info, warn or error, not 'a\\x0ab'"));
    isoprof_free(why);
}

/* Inputs that would make libyaml itself slow are refused up front. */
TEST(hostile_shapes_are_refused_quickly)
{
    size_t n = 1u << 20;
    char *text = isoprof_malloc(n + 1);
    REQUIRE(text != NULL);
    memset(text, '[', n);
    text[n] = '\0';
    char *why;
    uint64_t t0 = isoprof_now_mono_ns();
    CHECK(load(text, &why) == NULL);
    CHECK(has_line(why, "t.yaml:1:17: nested more than 16 levels deep"));
    isoprof_free(why);

    /* 64 anchors are fine, the 65th is not */
    size_t o = 0;
    o += (size_t)snprintf(text + o, n - o, "log: {level: info}\nx: [");
    for (int i = 0; i < 65; i++)
        o += (size_t)snprintf(text + o, n - o, "&a%d 1, ", i);
    snprintf(text + o, n - o, "*a0]\n");
    CHECK(load(text, &why) == NULL);
    CHECK_EQ_INT(count_lines(why), 1);
    CHECK(has_prefix(why, "t.yaml:2:") && strstr(why, ": more than 64 YAML anchors") != NULL);
    isoprof_free(why);
    CHECK(isoprof_now_mono_ns() - t0 < 5000000000ull);

    /* anchors and aliases within the limit work */
    struct cfg *c = load("t: &t {inspector: '127.0.0.1:1', worker: w}\n", &why);
    CHECK(c == NULL && has_line(why, "t.yaml:1:1: unknown key 't'"));
    cfg_free(c);
    isoprof_free(why);
    c = load("targets:\n  - &t {inspector: '127.0.0.1:1', worker: w}\n  - *t\n", &why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(c->ntargets, 2);
    CHECK_STR(c->targets[1].worker, "w");
    cfg_free(c);
    isoprof_free(text);
}

TEST(buffer_limits)
{
    struct cfg *c = NULL;
    char *why = NULL;
    size_t big = (1u << 20) + 1;
    char *text = isoprof_calloc(1, big);
    REQUIRE(text != NULL);
    memset(text, '#', big);
    CHECK_EQ_INT(cfg_load_buffer("big.yaml", text, big, &c, &why), -EFBIG);
    CHECK(c == NULL);
    CHECK(has_prefix(why, "big.yaml: larger than"));
    isoprof_free(why);
    isoprof_free(text);
    CHECK_EQ_INT(cfg_load_buffer("x", NULL, 3, &c, NULL), -EINVAL);
}

/* A private directory for file tests, removed at the end. */
static char tmpdir[64];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return;
    fputs(text, f);
    fclose(f);
}

TEST(files)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/isoprof-cfg-XXXXXX");
    REQUIRE(mkdtemp(tmpdir) != NULL);
    char good[128], bad[128], missing[128];
    snprintf(good, sizeof(good), "%s/good.yaml", tmpdir);
    snprintf(bad, sizeof(bad), "%s/bad.yaml", tmpdir);
    snprintf(missing, sizeof(missing), "%s/missing.yaml", tmpdir);
    write_file(good, "log: {level: warn}\ntargets: []\n");
    write_file(bad, "log:\n  level: loud\n");

    struct cfg *c = NULL;
    char *why = (char *)"junk";
    CHECK_EQ_INT(cfg_load_file(good, &c, &why), 0);
    CHECK(why == NULL);
    REQUIRE(c != NULL);
    CHECK_STR(c->source, good);
    CHECK_EQ_INT(c->log.level, CFG_LOG_WARN);
    CHECK_EQ_INT(c->ntargets, 0);
    cfg_free(c);
    c = NULL;

    char want[256];
    CHECK_EQ_INT(cfg_load_file(bad, &c, &why), ISOPROF_ECONFIG);
    CHECK(c == NULL);
    snprintf(want, sizeof(want),
             "%s:2:10: log.level must be debug, info, warn or error, not 'loud'", bad);
    CHECK(has_line(why, want));
    isoprof_free(why);

    CHECK_EQ_INT(cfg_load_file(missing, &c, &why), -ENOENT);
    snprintf(want, sizeof(want), "%s: No such file or directory", missing);
    CHECK_STR(why, want);
    isoprof_free(why);

    CHECK_EQ_INT(cfg_load_file(tmpdir, &c, &why), -EISDIR);
    snprintf(want, sizeof(want), "%s: Is a directory", tmpdir);
    CHECK_STR(why, want);
    isoprof_free(why);

    CHECK_EQ_INT(cfg_load_file(missing, &c, NULL), -ENOENT);
    CHECK(c == NULL);

    unlink(good);
    unlink(bad);
    CHECK(rmdir(tmpdir) == 0);
}

TEST(reload_check)
{
    char *why;
    struct cfg *a = load("store: {path: /a}\nlog: {level: info}\n", &why);
    struct cfg *b = load("store: {path: /a}\nlog: {level: debug}\ntargets: []\n", &why);
    struct cfg *d = load("store: {path: /b, max_size: 2GiB}\n", &why);
    REQUIRE(a != NULL && b != NULL && d != NULL);
    why = (char *)"junk";
    CHECK_EQ_INT(cfg_check_reload(a, b, &why), 0);
    CHECK(why == NULL);
    CHECK_EQ_INT(cfg_check_reload(a, d, &why), ISOPROF_ECONFIG);
    CHECK_EQ_INT(count_lines(why), 2);
    CHECK(has_line(why, "t.yaml: store.path changed (/a -> /b); restart to apply"));
    CHECK(has_line(why, "t.yaml: store.max_size changed (1GiB -> 2GiB); restart to apply"));
    isoprof_free(why);
    CHECK_EQ_INT(cfg_check_reload(a, d, NULL), ISOPROF_ECONFIG);
    cfg_free(a);
    cfg_free(b);
    cfg_free(d);
}

int main(void)
{
    RUN(defaults);
    RUN(empty_inputs_are_the_defaults);
    RUN(full_file);
    RUN(values_at_their_bounds);
    RUN(regression_options);
    RUN(targets_absent_empty_or_null);
    RUN(each_error_class_at_its_position);
    RUN(all_problems_together_in_file_order);
    RUN(relation_skipped_when_a_side_is_invalid);
    RUN(too_many_problems_are_capped);
    RUN(long_and_odd_keys_and_values_are_echoed_safely);
    RUN(hostile_shapes_are_refused_quickly);
    RUN(buffer_limits);
    RUN(files);
    RUN(reload_check);
    TEST_EXIT();
}

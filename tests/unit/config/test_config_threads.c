/*
 * A target's worker-thread options (targets[].threads.{enabled,
 * memory_limit, max}): the defaults, with threads.memory_limit taking the
 * target's memory_limit when unset; explicit values in block and flow
 * style; the empty forms; every error inside the nested `threads:` mapping
 * at its line:col; --help, the example config and the reload check.
 */
#include "../test.h"
#include "helpers.h"

#define MIB (1ull << 20)

TEST(defaults)
{
    struct cfg *c;
    REQUIRE(cfg_defaults(&c) == 0);
    REQUIRE(c->ntargets == 1);
    CHECK_EQ_INT(c->targets[0].threads.enabled, 1);
    CHECK_EQ_INT(c->targets[0].threads.memory_limit, CFG_SIZE_AUTO);
    CHECK_EQ_INT(c->targets[0].threads.memory_limit, c->targets[0].memory_limit);
    CHECK_EQ_INT(c->targets[0].threads.max, 64);
    cfg_free(c);

    /* the same for a target the file names without `threads` */
    char *why;
    c = load("targets: [{inspector: 'a:1'}]\n", &why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(c->targets[0].threads.enabled, 1);
    CHECK_EQ_INT(c->targets[0].threads.memory_limit, CFG_SIZE_AUTO);
    CHECK_EQ_INT(c->targets[0].threads.max, 64);
    cfg_free(c);
}

/* Unset, threads.memory_limit is the target's own memory_limit, whatever
 * order the keys come in; set, it is its own. */
TEST(memory_limit_follows_the_target)
{
    char *why;
    struct cfg *c = load("targets:\n"
                         "  - inspector: a:1\n"
                         "    memory_limit: 256MiB\n"
                         "  - inspector: b:2\n"
                         "    threads: {max: 2}\n"
                         "    memory_limit: 300MiB\n"
                         "  - inspector: c:3\n"
                         "    memory_limit: 256MiB\n"
                         "    threads: {memory_limit: 512MiB}\n"
                         "  - inspector: d:4\n"
                         "    threads: {memory_limit: 32MiB}\n",
                         &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL && c->ntargets == 4);
    CHECK_EQ_INT(c->targets[0].threads.memory_limit, 256 * MIB);
    CHECK_EQ_INT(c->targets[1].threads.memory_limit, 300 * MIB);
    CHECK_EQ_INT(c->targets[1].threads.max, 2);
    CHECK_EQ_INT(c->targets[2].memory_limit, 256 * MIB);
    CHECK_EQ_INT(c->targets[2].threads.memory_limit, 512 * MIB); /* may exceed the target's */
    CHECK_EQ_INT(c->targets[3].memory_limit, CFG_SIZE_AUTO);
    CHECK_EQ_INT(c->targets[3].threads.memory_limit, 32 * MIB);
    cfg_free(c);
}

/* "auto" is a value of both limits: the target's (its runtime's own) and a
 * worker's, which keeps it even when the target names a size; any other
 * word is refused as a size is. */
TEST(memory_limit_auto)
{
    char *why;
    struct cfg *c = load("targets:\n"
                         "  - inspector: a:1\n"
                         "    memory_limit: auto\n"
                         "  - inspector: b:2\n"
                         "    memory_limit: 256MiB\n"
                         "    threads: {memory_limit: auto}\n"
                         "  - inspector: c:3\n"
                         "    memory_limit: auto\n"
                         "    threads: {memory_limit: 64MiB}\n",
                         &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL && c->ntargets == 3);
    CHECK_EQ_INT(c->targets[0].memory_limit, CFG_SIZE_AUTO);
    CHECK_EQ_INT(c->targets[0].threads.memory_limit, CFG_SIZE_AUTO);
    CHECK_EQ_INT(c->targets[1].memory_limit, 256 * MIB);
    CHECK_EQ_INT(c->targets[1].threads.memory_limit, CFG_SIZE_AUTO);
    CHECK_EQ_INT(c->targets[2].memory_limit, CFG_SIZE_AUTO);
    CHECK_EQ_INT(c->targets[2].threads.memory_limit, 64 * MIB);
    cfg_free(c);

    c = load("targets: [{inspector: 'a:1', memory_limit: automatic}]\n", &why);
    CHECK(c == NULL);
    if (c == NULL) {
        CHECK(strstr(why, "targets[0].memory_limit 'automatic' is not a size") != NULL);
        isoprof_free(why);
    }
    cfg_free(c);
    /* a global size option takes no "auto" */
    c = load("store: {max_size: auto}\n", &why);
    CHECK(c == NULL);
    if (c == NULL)
        isoprof_free(why);
    cfg_free(c);
}

TEST(explicit_values_block_and_flow)
{
    static const char *texts[] = {
        "targets:\n"
        "  - inspector: 127.0.0.1:9229\n"
        "    memory_limit: 256MiB\n"
        "    threads:\n"
        "      enabled: false\n"
        "      memory_limit: 64MiB\n"
        "      max: 8\n",
        "targets:\n"
        "  - inspector: 127.0.0.1:9229\n"
        "    memory_limit: 256MiB\n"
        "    threads: {enabled: false, memory_limit: 64MiB, max: 8}\n",
        "targets: [{inspector: '127.0.0.1:9229', memory_limit: 256MiB,\n"
        "           threads: {max: 8, memory_limit: 65536KiB, enabled: false}}]\n",
        "targets:\n"
        "  - threads:\n"
        "      max: 8\n"
        "      enabled: false\n"
        "      memory_limit: 64MiB\n"
        "    inspector: 127.0.0.1:9229\n"
        "    memory_limit: 256MiB\n",
    };
    char *why;
    struct cfg *want = load(texts[0], &why);
    if (want == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(want != NULL && want->ntargets == 1);
    CHECK_EQ_INT(want->targets[0].memory_limit, 256 * MIB);
    CHECK_EQ_INT(want->targets[0].threads.enabled, 0);
    CHECK_EQ_INT(want->targets[0].threads.memory_limit, 64 * MIB);
    CHECK_EQ_INT(want->targets[0].threads.max, 8);
    CHECK_EQ_INT(valid_texts_failed(texts, ISOPROF_ARRAY_SIZE(texts), want), 0);
    cfg_free(want);

    /* the bounds themselves */
    struct cfg *c = load("targets:\n"
                         "  - {inspector: 'a:1', threads: {enabled: true, max: 1,"
                         " memory_limit: 1MiB}}\n"
                         "  - {inspector: 'a:2', threads: {max: 1024, memory_limit: 1TiB}}\n",
                         &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL && c->ntargets == 2);
    CHECK_EQ_INT(c->targets[0].threads.enabled, 1);
    CHECK_EQ_INT(c->targets[0].threads.max, 1);
    CHECK_EQ_INT(c->targets[0].threads.memory_limit, MIB);
    CHECK_EQ_INT(c->targets[1].threads.max, 1024);
    CHECK_EQ_INT(c->targets[1].threads.memory_limit, 1ull << 40);
    cfg_free(c);
}

/* `threads:` empty, null or {} is every default; so is a null memory_limit. */
TEST(empty_forms_are_the_defaults)
{
    static const char *texts[] = {
        "targets:\n  - inspector: a:1\n    memory_limit: 200MiB\n    threads:\n",
        "targets:\n  - inspector: a:1\n    memory_limit: 200MiB\n    threads: ~\n",
        "targets:\n  - inspector: a:1\n    memory_limit: 200MiB\n    threads: null\n",
        "targets:\n  - inspector: a:1\n    memory_limit: 200MiB\n    threads: {}\n",
        "targets:\n  - inspector: a:1\n    memory_limit: 200MiB\n    threads: {memory_limit: ~}\n",
        "targets:\n  - inspector: a:1\n    memory_limit: 200MiB\n    threads:\n"
        "      memory_limit:\n",
        "targets:\n  - inspector: a:1\n    memory_limit: 200MiB\n    threads:\n"
        "      enabled: true\n      max: 64\n",
    };
    char *why;
    struct cfg *want = load("targets:\n  - inspector: a:1\n    memory_limit: 200MiB\n", &why);
    REQUIRE(want != NULL);
    CHECK_EQ_INT(want->targets[0].threads.enabled, 1);
    CHECK_EQ_INT(want->targets[0].threads.memory_limit, 200 * MIB);
    CHECK_EQ_INT(want->targets[0].threads.max, 64);
    CHECK_EQ_INT(valid_texts_failed(texts, ISOPROF_ARRAY_SIZE(texts), want), 0);
    cfg_free(want);
}

static const struct one_error errors[] = {
    /* unknown keys, with a suggestion where one is near */
    {"targets:\n  - inspector: a:1\n    threads:\n      maks: 3\n",
     "t.yaml:4:7: unknown key 'targets[0].threads.maks' (did you mean 'max'?)"},
    {"targets: [{inspector: 'a:1', threads: {enable: false}}]\n",
     "t.yaml:1:40: unknown key 'targets[0].threads.enable' (did you mean 'enabled'?)"},
    {"targets: [{inspector: 'a:1', threads: {memory_limt: 64MiB}}]\n",
     "t.yaml:1:40: unknown key 'targets[0].threads.memory_limt' (did you mean 'memory_limit'?)"},
    {"targets: [{inspector: 'a:1', threads: {bogus: 1}}]\n",
     "t.yaml:1:40: unknown key 'targets[0].threads.bogus'"},
    {"targets:\n  - inspector: a:1\n  - inspector: b:1\n    thread: {max: 2}\n",
     "t.yaml:4:5: unknown key 'targets[1].thread' (did you mean 'threads'?)"},
    /* a threads option written at the entry's level */
    {"targets:\n  - inspector: a:1\n    max: 8\n",
     "t.yaml:3:5: unknown key 'targets[0].max' (did you mean 'threads.max'?)"},
    {"targets:\n  - inspector: a:1\n    enabled: false\n",
     "t.yaml:3:5: unknown key 'targets[0].enabled' (did you mean 'threads.enabled'?)"},
    {"targets:\n  - inspector: a:1\n    threads.max: 8\n",
     "t.yaml:3:5: 'targets[0].threads.max': write nested keys, one name per level, not a "
     "dotted name"},
    {"targets: [{inspector: 'a:1', threads: {threads: {}}}]\n",
     "t.yaml:1:40: unknown key 'targets[0].threads.threads'"},
    /* a scalar or a list where the mapping is needed */
    {"targets:\n  - inspector: a:1\n    threads: true\n",
     "t.yaml:3:14: targets[0].threads must be a mapping of options, not a scalar"},
    {"targets:\n  - inspector: a:1\n    threads: [max, 8]\n",
     "t.yaml:3:14: targets[0].threads must be a mapping of options, not a list"},
    {"targets:\n  - inspector: a:1\n    threads:\n      - max: 8\n",
     "t.yaml:4:7: targets[0].threads must be a mapping of options, not a list"},
    /* wrong types */
    {"targets: [{inspector: 'a:1', threads: {enabled: yes}}]\n",
     "t.yaml:1:49: targets[0].threads.enabled must be true or false, not 'yes'"},
    {"targets: [{inspector: 'a:1', threads: {enabled: [true]}}]\n",
     "t.yaml:1:49: targets[0].threads.enabled must be true or false, not a list"},
    {"targets: [{inspector: 'a:1', threads: {max: 8.5}}]\n",
     "t.yaml:1:45: targets[0].threads.max '8.5' is not a whole number"},
    {"targets: [{inspector: 'a:1', threads: {max: {n: 8}}}]\n",
     "t.yaml:1:45: targets[0].threads.max must be a whole number, not a mapping"},
    {"targets: [{inspector: 'a:1', threads: {memory_limit: 64}}]\n",
     "t.yaml:1:54: targets[0].threads.memory_limit '64' needs a unit (B, KiB, MiB, GiB, TiB, KB, "
     "MB, GB or TB), as in '64MiB'"},
    {"targets: [{inspector: 'a:1', threads: {memory_limit: lots}}]\n",
     "t.yaml:1:54: targets[0].threads.memory_limit 'lots' is not a size (a number and a unit: B, "
     "KiB, MiB, GiB, ...)"},
    /* out of bounds */
    {"targets: [{inspector: 'a:1', threads: {max: 0}}]\n",
     "t.yaml:1:45: targets[0].threads.max must be between 1 and 1024, not '0'"},
    {"targets: [{inspector: 'a:1', threads: {max: 1025}}]\n",
     "t.yaml:1:45: targets[0].threads.max must be between 1 and 1024, not '1025'"},
    {"targets: [{inspector: 'a:1', threads: {memory_limit: 1023KiB}}]\n",
     "t.yaml:1:54: targets[0].threads.memory_limit must be >= 1MiB, not '1023KiB'"},
    {"targets: [{inspector: 'a:1', threads: {memory_limit: 0B}}]\n",
     "t.yaml:1:54: targets[0].threads.memory_limit must be >= 1MiB, not '0B'"},
    /* null where the option has a default */
    {"targets: [{inspector: 'a:1', threads: {enabled: ~}}]\n",
     "t.yaml:1:49: targets[0].threads.enabled has no value (the default is true; leave the key "
     "out for it)"},
    {"targets:\n  - inspector: a:1\n    threads:\n      max:\n",
     "t.yaml:4:11: targets[0].threads.max has no value (the default is 64; leave the key out "
     "for it)"},
    /* keys: duplicates and non-names */
    {"targets:\n  - inspector: a:1\n    threads:\n      max: 2\n      max: 3\n",
     "t.yaml:5:7: duplicate key 'max' (first at 4:7)"},
    {"targets: [{inspector: 'a:1', threads: {enabled: true, enabled: false}}]\n",
     "t.yaml:1:55: duplicate key 'enabled' (first at 1:40)"},
    {"targets:\n  - inspector: a:1\n    threads: {max: 2}\n    threads: {max: 3}\n",
     "t.yaml:4:5: duplicate key 'threads' (first at 3:5)"},
    {"targets: [{inspector: 'a:1', threads: {[max]: 2}}]\n",
     "t.yaml:1:40: targets[0].threads: a key must be a name, not a list"},
    /* the entry still needs its inspector */
    {"targets:\n  - threads: {max: 2}\n",
     "t.yaml:2:5: targets[0] has no 'inspector' (inspector endpoint, host:port or [v6]:port)"},
};

TEST(each_error_at_its_position)
{
    CHECK_EQ_INT(one_errors_failed(errors, ISOPROF_ARRAY_SIZE(errors)), 0);
}

TEST(problems_together_in_file_order)
{
    char *why;
    struct cfg *c = load("targets:\n"
                         "  - inspector: a:1\n"
                         "    threads:\n"
                         "      enabled: maybe\n"     /* 4:16 */
                         "      maks: 3\n"            /* 5:7 */
                         "      memory_limit: 1KiB\n" /* 6:21 */
                         "  - inspector: b:1\n"
                         "    threads: 8\n" /* 8:14 */
                         "  - inspector: c:1\n"
                         "    threads: {max: 0}\n", /* 10:20 */
                         &why);
    CHECK(c == NULL);
    static const char *want[] = {
        "t.yaml:4:16: targets[0].threads.enabled must be true or false, not 'maybe'",
        "t.yaml:5:7: unknown key 'targets[0].threads.maks' (did you mean 'max'?)",
        "t.yaml:6:21: targets[0].threads.memory_limit must be >= 1MiB, not '1KiB'",
        "t.yaml:8:14: targets[1].threads must be a mapping of options, not a scalar",
        "t.yaml:10:20: targets[2].threads.max must be between 1 and 1024, not '0'",
    };
    CHECK_EQ_INT(count_lines(why), ISOPROF_ARRAY_SIZE(want));
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(want); i++) {
        if (!has_line(why, want[i])) {
            fprintf(stderr, "missing: %s\ngot:\n%s\n", want[i], why ? why : "(null)");
            test_failed_ = 1;
        }
    }
    /* in file order: the last wanted line is the last line */
    const char *last = why ? strrchr(why, '\n') : NULL;
    CHECK(last != NULL && strcmp(last + 1, want[ISOPROF_ARRAY_SIZE(want) - 1]) == 0);
    isoprof_free(why);
}

/* All three are applied by SIGHUP: a change to any of them alone passes the
 * reload check, and beside a restart-only change only that one is named. */
TEST(reload_applies_them)
{
    char *why;
    struct cfg *a = load("store: {path: /a}\n"
                         "targets: [{inspector: 'a:1'}]\n",
                         &why);
    struct cfg *b = load("store: {path: /a}\n"
                         "targets: [{inspector: 'a:1',\n"
                         "           threads: {enabled: false, memory_limit: 2MiB, max: 3}}]\n",
                         &why);
    struct cfg *d = load("store: {path: /b}\n"
                         "targets: [{inspector: 'a:1', threads: {max: 5}}]\n",
                         &why);
    REQUIRE(a != NULL && b != NULL && d != NULL);
    CHECK(!cfg_same(a, b)); /* the configs do differ in the threads options */
    why = (char *)"junk";
    CHECK_EQ_INT(cfg_check_reload(a, b, &why), 0);
    CHECK(why == NULL);
    CHECK_EQ_INT(cfg_check_reload(b, a, &why), 0);
    CHECK_EQ_INT(cfg_check_reload(a, d, &why), ISOPROF_ECONFIG);
    CHECK_EQ_INT(count_lines(why), 1);
    CHECK(has_line(why, "t.yaml: store.path changed (/a -> /b); restart to apply"));
    isoprof_free(why);
    for (size_t i = 0; i < cfg_noptions; i++)
        if (strncmp(cfg_options[i].name, "threads.", 8) == 0)
            CHECK(cfg_options[i].reloadable && cfg_options[i].scope == CFG_SCOPE_TARGET);
    cfg_free(a);
    cfg_free(b);
    cfg_free(d);
}

static char *capture(int help)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return NULL;
    int rc = 0;
    if (help)
        cfg_write_help(f);
    else
        rc = cfg_write_example(f);
    fclose(f);
    if (rc != 0) {
        free(text); /* banned-ok: allocated by open_memstream */
        return NULL;
    }
    return text;
}

/* --help names them under targets[] with their defaults and bounds. */
TEST(help_lists_them)
{
    char *text = capture(1);
    REQUIRE(text != NULL);
    static const char *want[][3] = {
        {"\n  targets[].threads.enabled ", " true ", "profile the target's worker threads"},
        {"\n  targets[].threads.memory_limit ", " (memory_limit) ", ">= 1MiB"},
        {"\n  targets[].threads.max ", " 64 ", " 1..1024 "},
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(want); i++) {
        const char *line = strstr(text, want[i][0]);
        CHECK(line != NULL);
        if (line == NULL)
            continue;
        const char *eol = strchr(line + 1, '\n');
        for (int j = 1; j < 3; j++) {
            const char *at = strstr(line, want[i][j]);
            CHECK(at != NULL && at < eol);
        }
        CHECK(strstr(line, "[restart]") == NULL || strstr(line, "[restart]") > eol);
    }
    free(text); /* banned-ok: allocated by open_memstream */
}

/* The example config opens `threads:` inside the target entry, with enabled
 * and max at their defaults and memory_limit commented out; uncommented,
 * it is read as the worker threads' limit. */
TEST(example_nests_them)
{
    char *text = capture(0);
    REQUIRE(text != NULL);
    const char *entry = strstr(text, "\n  - inspector: " CFG_DEFAULT_INSPECTOR "\n");
    const char *sec = strstr(text, "\n    threads:\n");
    REQUIRE(entry != NULL && sec != NULL && entry < sec);
    const char *en = strstr(sec, "\n      enabled: true\n");
    const char *ml = strstr(sec, "\n      # memory_limit:\n");
    const char *mx = strstr(sec, "\n      max: 64\n");
    CHECK(en != NULL && ml != NULL && mx != NULL);
    CHECK(strstr(text, "\ndiscovery:\n") > sec); /* and inside the entry */

    struct cfg *d;
    REQUIRE(cfg_defaults(&d) == 0);
    char *why;
    struct cfg *c = load(text, &why);
    REQUIRE(c != NULL);
    CHECK(cfg_same(c, d));
    cfg_free(c);

    if (ml != NULL) {
        size_t len = strlen(text);
        char *edited = isoprof_malloc(len + 16);
        REQUIRE(edited != NULL);
        size_t at = (size_t)(ml - text) + 1; /* the line's start */
        const char *key = "      memory_limit: 32MiB\n";
        size_t old = strlen("      # memory_limit:\n");
        memcpy(edited, text, at);
        memcpy(edited + at, key, strlen(key));
        memcpy(edited + at + strlen(key), text + at + old, len - at - old + 1);
        c = load(edited, &why);
        if (c == NULL)
            fprintf(stderr, "%s\n", why);
        REQUIRE(c != NULL && c->ntargets == 1);
        CHECK_EQ_INT(c->targets[0].threads.memory_limit, 32 * MIB);
        CHECK_EQ_INT(c->targets[0].memory_limit, CFG_SIZE_AUTO);
        cfg_free(c);
        isoprof_free(edited);
    }
    cfg_free(d);
    free(text); /* banned-ok: allocated by open_memstream */
}

int main(void)
{
    RUN(defaults);
    RUN(memory_limit_follows_the_target);
    RUN(memory_limit_auto);
    RUN(explicit_values_block_and_flow);
    RUN(empty_forms_are_the_defaults);
    RUN(each_error_at_its_position);
    RUN(problems_together_in_file_order);
    RUN(reload_applies_them);
    RUN(help_lists_them);
    RUN(example_nests_them);
    TEST_EXIT();
}

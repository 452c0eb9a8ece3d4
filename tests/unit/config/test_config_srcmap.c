/*
 * The source-map options: a target's root, source_maps (a list) and labels
 * (a mapping), the global source_maps_cache, source_maps_max_file and
 * source_maps_cpu. Their defaults, values as written, every problem with
 * its exact line:col, and reloads: all six change without a restart.
 */
#include "../test.h"
#include "helpers.h"

TEST(defaults)
{
    char *why;
    struct cfg *c = load("targets:\n  - inspector: 127.0.0.1:9229\n", &why);
    REQUIRE(c != NULL);
    CHECK(c->targets[0].root == NULL);
    CHECK_EQ_INT(c->targets[0].source_maps.n, 0);
    CHECK_EQ_INT(c->targets[0].labels.n, 0);
    CHECK_EQ_INT(c->source_maps_cache, 32ull << 20);
    CHECK_EQ_INT(c->source_maps_max_file, 64ull << 20);
    CHECK(c->source_maps_cpu > 0.0199 && c->source_maps_cpu < 0.0201);
    cfg_free(c);
}

TEST(values)
{
    char *why;
    struct cfg *c = load("source_maps_cache: 8MiB\n"
                         "source_maps_max_file: 2MiB\n"
                         "source_maps_cpu: 0.5%\n"
                         "targets:\n"
                         "  - inspector: 127.0.0.1:9229\n"
                         "    root: /proc/1234/root\n"
                         "    source_maps: [/srv/maps, '/opt/app/dist']\n"
                         "    labels:\n"
                         "      service_repository: https://github.com/acme/shop\n"
                         "      service_git_ref: v1.2.3\n"
                         "  - inspector: 127.0.0.1:9230\n"
                         "    source_maps:\n"
                         "      - /a\n",
                         &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(c->source_maps_cache, 8ull << 20);
    CHECK_EQ_INT(c->source_maps_max_file, 2ull << 20);
    CHECK(c->source_maps_cpu > 0.00499 && c->source_maps_cpu < 0.00501);
    const struct cfg_target *t = &c->targets[0];
    CHECK(t->root != NULL && strcmp(t->root, "/proc/1234/root") == 0);
    REQUIRE(t->source_maps.n == 2);
    CHECK(strcmp(t->source_maps.v[0], "/srv/maps") == 0);
    CHECK(strcmp(t->source_maps.v[1], "/opt/app/dist") == 0);
    REQUIRE(t->labels.n == 2);
    CHECK(strcmp(t->labels.items[0].key, "service_repository") == 0);
    CHECK(strcmp(t->labels.items[0].value, "https://github.com/acme/shop") == 0);
    CHECK(strcmp(t->labels.items[1].key, "service_git_ref") == 0);
    CHECK(c->targets[1].root == NULL);
    REQUIRE(c->targets[1].source_maps.n == 1);
    CHECK(strcmp(c->targets[1].source_maps.v[0], "/a") == 0);
    CHECK_EQ_INT(c->targets[1].labels.n, 0);
    cfg_free(c);
}

TEST(problems)
{
    static const struct one_error cases[] = {
        {"targets:\n  - inspector: 127.0.0.1:9229\n    root: proc/1/root\n",
         "t.yaml:3:11: targets[0].root 'proc/1/root' is not an absolute path"},
        {"targets:\n  - inspector: 127.0.0.1:9229\n    source_maps: [/ok, maps]\n",
         "t.yaml:3:24: targets[0].source_maps[1] 'maps' is not an absolute path"},
        {"targets:\n  - inspector: 127.0.0.1:9229\n    source_maps: /srv/maps\n",
         "t.yaml:3:18: targets[0].source_maps: expected a list, not a scalar (write [/srv/maps])"},
        {"targets:\n  - inspector: 127.0.0.1:9229\n    labels: {service_name: x}\n",
         "t.yaml:3:14: targets[0].labels name 'service_name' is set by the agent"},
        {"targets:\n  - inspector: 127.0.0.1:9229\n    labels: {9lives: x}\n",
         "t.yaml:3:14: targets[0].labels name '9lives' must match [A-Za-z_][A-Za-z0-9_]*"},
        {"targets:\n  - inspector: 127.0.0.1:9229\n    labels: [a]\n",
         "t.yaml:3:13: targets[0].labels must be a mapping of names to values, not a list"},
        {"targets:\n  - inspector: 127.0.0.1:9229\n    labels: {service_git_ref: ''}\n",
         "t.yaml:3:31: targets[0].labels.service_git_ref is empty"},
        {"targets:\n  - inspector: 127.0.0.1:9229\n    labels: {l: "
         "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234"
         "5678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
         "01234567890123456789012345}\n",
         "t.yaml:3:17: targets[0].labels.l is longer than 190 bytes"},
        {"source_maps_cache: 512KiB\n",
         "t.yaml:1:20: source_maps_cache must be between 1MiB and 4GiB, not '512KiB'"},
        {"source_maps_max_file: 2GiB\n",
         "t.yaml:1:23: source_maps_max_file must be between 1MiB and 1GiB, not '2GiB'"},
        {"source_maps_cpu: 0.001%\n",
         "t.yaml:1:18: source_maps_cpu must be between 0.01% and 100%, not '0.001%'"},
    };
    int failed = one_errors_failed(cases, ISOPROF_ARRAY_SIZE(cases));
    CHECK_EQ_INT(failed, 0);
}

TEST(too_many_labels)
{
    char text[2048];
    size_t n = (size_t)snprintf(text, sizeof(text),
                                "targets:\n  - inspector: 127.0.0.1:9229\n    labels:\n");
    for (int i = 0; i < 17; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "      l%d: v\n", i);
    char *why;
    struct cfg *c = load(text, &why);
    CHECK(c == NULL);
    CHECK(why != NULL && strstr(why, "targets[0].labels") != NULL);
    isoprof_free(why);
    cfg_free(c);
}

TEST(reloadable)
{
    char *why;
    struct cfg *a = load("targets:\n  - inspector: 127.0.0.1:9229\n", &why);
    struct cfg *b = load("source_maps_cache: 4MiB\nsource_maps_max_file: 1MiB\n"
                         "source_maps_cpu: 10%\n"
                         "targets:\n  - inspector: 127.0.0.1:9229\n    root: /r\n"
                         "    source_maps: [/m]\n    labels: {service_git_ref: main}\n",
                         &why);
    REQUIRE(a != NULL && b != NULL);
    char *restart = NULL;
    CHECK_EQ_INT(cfg_check_reload(a, b, &restart), 0);
    CHECK(restart == NULL);
    isoprof_free(restart);
    cfg_free(a);
    cfg_free(b);
}

int main(void)
{
    RUN(defaults);
    RUN(values);
    RUN(problems);
    RUN(too_many_labels);
    RUN(reloadable);
    TEST_EXIT();
}

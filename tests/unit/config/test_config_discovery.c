/*
 * discovery.processes and the list type behind two of its options: the
 * defaults, flow and block lists, `[]` and an empty value, every problem
 * with its exact line:col (a scalar or a mapping where a list belongs, an
 * entry that is not a string, empty, too long, a path, a bad user, too many
 * entries, an empty list while enabled), the outputs generated from the
 * table, and lists compared by content.
 */
#include "../test.h"
#include "helpers.h"

#include <errno.h>
#include <stdio.h>

/* Is l exactly the n strings of want? */
static int list_is(const struct cfg_strlist *l, const char *const *want, size_t n)
{
    if (l->n != n || (n == 0) != (l->v == NULL)) {
        fprintf(stderr, "list of %zu entries, want %zu\n", l->n, n);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(l->v[i], want[i]) != 0) {
            fprintf(stderr, "entry %zu is '%s', want '%s'\n", i, l->v[i], want[i]);
            return 0;
        }
    }
    return 1;
}

static const char *const node_only[] = {"node"};

TEST(defaults)
{
    struct cfg *c;
    REQUIRE(cfg_defaults(&c) == 0);
    CHECK_EQ_INT(c->discovery.processes.enabled, 0);
    CHECK(list_is(&c->discovery.processes.executables, node_only, 1));
    CHECK_EQ_INT(c->discovery.processes.activate, 0);
    CHECK(list_is(&c->discovery.processes.users, NULL, 0));
    CHECK(list_is(&c->discovery.processes.version_from, NULL, 0));
    CHECK_EQ_INT(c->discovery.interval_ns, 5000000000ull);
    cfg_free(c);

    /* an empty file, and an empty section, are the same */
    static const char *texts[] = {"", "discovery:\n", "discovery: {processes: ~}\n",
                                  "discovery:\n  processes: {}\n"};
    REQUIRE(cfg_defaults(&c) == 0);
    CHECK_EQ_INT(valid_texts_failed(texts, ISOPROF_ARRAY_SIZE(texts), c), 0);
    cfg_free(c);
}

TEST(flow_lists)
{
    char *why;
    struct cfg *c = load("discovery:\n"
                         "  interval: 2s\n"
                         "  processes:\n"
                         "    enabled: true\n"
                         "    executables: [node, nodejs, 'node-18', \"bun\"]\n"
                         "    activate: true\n"
                         "    users: [www-data, 1000, '0', app.user_1, _svc, A-b.c]\n",
                         &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL);
    static const char *const exe[] = {"node", "nodejs", "node-18", "bun"};
    static const char *const users[] = {"www-data", "1000", "0", "app.user_1", "_svc", "A-b.c"};
    CHECK_EQ_INT(c->discovery.interval_ns, 2000000000ull);
    CHECK_EQ_INT(c->discovery.processes.enabled, 1);
    CHECK(list_is(&c->discovery.processes.executables, exe, 4));
    CHECK_EQ_INT(c->discovery.processes.activate, 1);
    CHECK(list_is(&c->discovery.processes.users, users, 6));
    cfg_free(c);
}

TEST(block_lists)
{
    char *why;
    struct cfg *c = load("discovery:\n"
                         "  processes:\n"
                         "    enabled: true\n"
                         "    executables:\n"
                         "      - node\n"
                         "      - deno   # a comment\n"
                         "    users:\n"
                         "    - 4294967294\n"
                         "    - root\n",
                         &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL);
    static const char *const exe[] = {"node", "deno"};
    static const char *const users[] = {"4294967294", "root"};
    CHECK(list_is(&c->discovery.processes.executables, exe, 2));
    CHECK(list_is(&c->discovery.processes.users, users, 2));
    cfg_free(c);

    /* an entry of exactly the row's bound, and exactly 64 entries */
    char text[8192];
    int o = snprintf(text, sizeof(text), "discovery:\n  processes:\n    executables:\n");
    for (int i = 0; i < 64; i++)
        o += snprintf(text + o, sizeof(text) - (size_t)o, "      - n%d\n", i);
    o += snprintf(text + o, sizeof(text) - (size_t)o, "    users: [%.32s]\n",
                  "abcdefghijklmnopqrstuvwxyz0123456789");
    REQUIRE(o > 0 && (size_t)o < sizeof(text));
    c = load(text, &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(c->discovery.processes.executables.n, 64);
    CHECK_STR(c->discovery.processes.executables.v[63], "n63");
    CHECK_EQ_INT(c->discovery.processes.users.n, 1);
    CHECK_EQ_INT(strlen(c->discovery.processes.users.v[0]), 32);
    cfg_free(c);
}

TEST(empty_list_and_empty_value)
{
    char *why;
    /* [] is an empty list (allowed while discovery is off) */
    struct cfg *c = load("discovery:\n"
                         "  processes:\n"
                         "    executables: []\n"
                         "    users: []\n",
                         &why);
    REQUIRE(c != NULL);
    CHECK(list_is(&c->discovery.processes.executables, NULL, 0));
    CHECK(list_is(&c->discovery.processes.users, NULL, 0));
    cfg_free(c);

    /* an empty value, ~ or null is the default, as if the key were left out */
    static const char *texts[] = {
        "discovery:\n  processes:\n    executables:\n    users:\n",
        "discovery:\n  processes:\n    executables: ~\n    users: null\n",
        "discovery: {processes: {enabled: false, executables: , users: ~}}\n",
        "discovery:\n  processes:\n    enabled: true\n    executables:\n",
    };
    struct cfg *d;
    REQUIRE(cfg_defaults(&d) == 0);
    CHECK_EQ_INT(valid_texts_failed(texts, 3, d), 0);
    cfg_free(d);
    c = load(texts[3], &why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(c->discovery.processes.enabled, 1);
    CHECK(list_is(&c->discovery.processes.executables, node_only, 1));
    cfg_free(c);
}

TEST(errors_at_their_position)
{
    static const struct one_error cases[] = {
        /* a scalar, a mapping where a list belongs */
        {"discovery:\n  processes:\n    executables: node\n",
         "t.yaml:3:18: discovery.processes.executables: expected a list, not a scalar "
         "(write [node])"},
        {"discovery:\n  processes:\n    users: 'alice, bob'\n",
         "t.yaml:3:12: discovery.processes.users: expected a list, not a scalar "
         "(write [alice, bob])"},
        {"discovery:\n  processes:\n    users: {alice: 1}\n",
         "t.yaml:3:12: discovery.processes.users: expected a list, not a mapping"},
        /* entries that are not strings */
        {"discovery:\n  processes:\n    executables:\n      - node\n      - {a: b}\n",
         "t.yaml:5:9: discovery.processes.executables[1] must be a string, not a mapping"},
        {"discovery:\n  processes:\n    executables: [node, [bun]]\n",
         "t.yaml:3:25: discovery.processes.executables[1] must be a string, not a list"},
        /* empty entries */
        {"discovery:\n  processes:\n    executables: [node, '']\n",
         "t.yaml:3:25: discovery.processes.executables[1] must not be empty"},
        {"discovery:\n  processes:\n    executables:\n      - node\n      -\n",
         "t.yaml:5:8: discovery.processes.executables[1] must not be empty"},
        {"discovery:\n  processes:\n    users: [~]\n",
         "t.yaml:3:13: discovery.processes.users[0] must not be empty"},
        /* executables: base names */
        {"discovery:\n  processes:\n    executables: [/usr/bin/node]\n",
         "t.yaml:3:19: discovery.processes.executables[0] '/usr/bin/node' is not a base name "
         "(no '/'; as in 'node')"},
        {"discovery:\n  processes:\n    executables: [bin/]\n",
         "t.yaml:3:19: discovery.processes.executables[0] 'bin/' is not a base name (no '/')"},
        {"discovery:\n  processes:\n    executables: [\"a\\tb\"]\n",
         "t.yaml:3:19: discovery.processes.executables[0] must not contain control characters "
         "('a\\x09b')"},
        {"discovery:\n  processes:\n    executables: [\"a\\0b\"]\n",
         "t.yaml:3:19: discovery.processes.executables[0] must not contain a NUL byte"},
        /* users: a uid or a plausible name */
        {"discovery:\n  processes:\n    users: [alice, 'bad user']\n",
         "t.yaml:3:20: discovery.processes.users[1] 'bad user' is not a user name or uid "
         "(letters, digits, '_', '.' and '-' only)"},
        {"discovery:\n  processes:\n    users: [-alice]\n",
         "t.yaml:3:13: discovery.processes.users[0] '-alice' is not a user name (it starts "
         "with '-')"},
        {"discovery:\n  processes:\n    users: [alice$]\n",
         "t.yaml:3:13: discovery.processes.users[0] 'alice$' is not a user name or uid (letters, "
         "digits, '_', '.' and '-' only)"},
        {"discovery:\n  processes:\n    users: [4294967295]\n",
         "t.yaml:3:13: discovery.processes.users[0] '4294967295' is not a uid (0..4294967294)"},
        {"discovery:\n  processes:\n    users: [99999999999999999999999]\n",
         "t.yaml:3:13: discovery.processes.users[0] '99999999999999999999999' is not a uid "
         "(0..4294967294)"},
        {"discovery:\n  processes:\n    users: [abcdefghijklmnopqrstuvwxyz0123456]\n",
         "t.yaml:3:13: discovery.processes.users[0] is longer than 32 bytes"},
        /* enabled needs an executable */
        {"discovery:\n  processes:\n    enabled: true\n    executables: []\n",
         "t.yaml:4:18: discovery.processes.executables is empty "
         "(discovery.processes.enabled needs at least one entry)"},
        {"discovery:\n  processes: {executables: [], users: [], enabled: true}\n",
         "t.yaml:2:28: discovery.processes.executables is empty "
         "(discovery.processes.enabled needs at least one entry)"},
        /* version_from: env:NAME or package.json */
        {"discovery:\n  processes:\n    version_from: [package.json, env:1APP]\n",
         "t.yaml:3:34: discovery.processes.version_from[1] 'env:1APP' does not name an "
         "environment variable (env:NAME, NAME of letters, digits and '_', not starting with a "
         "digit)"},
        {"discovery:\n  processes:\n    version_from: ['env:APP-VERSION']\n",
         "t.yaml:3:20: discovery.processes.version_from[0] 'env:APP-VERSION' does not name an "
         "environment variable (env:NAME, NAME of letters, digits and '_', not starting with a "
         "digit)"},
        {"discovery:\n  processes:\n    version_from: ['env:']\n",
         "t.yaml:3:20: discovery.processes.version_from[0] 'env:' is not a version source "
         "(env:NAME or package.json)"},
        {"discovery:\n  processes:\n    version_from: [package]\n",
         "t.yaml:3:20: discovery.processes.version_from[0] 'package' is not a version source "
         "(env:NAME or package.json)"},
        {"discovery:\n  processes:\n    version_from: env:APP_VERSION\n",
         "t.yaml:3:19: discovery.processes.version_from: expected a list, not a scalar "
         "(write [env:APP_VERSION])"},
        /* the bools */
        {"discovery:\n  processes:\n    activate: yes\n",
         "t.yaml:3:15: discovery.processes.activate must be true or false, not 'yes'"},
        {"discovery:\n  processes:\n    enabled: [true]\n",
         "t.yaml:3:14: discovery.processes.enabled must be true or false, not a list"},
    };
    CHECK_EQ_INT(one_errors_failed(cases, ISOPROF_ARRAY_SIZE(cases)), 0);
}

TEST(too_long_and_too_many)
{
    char text[8192];
    char long_name[257];
    memset(long_name, 'x', 256);
    long_name[256] = '\0';
    snprintf(text, sizeof(text), "discovery:\n  processes:\n    executables: [node, %s]\n",
             long_name);
    struct one_error c1 = {
        text, "t.yaml:3:25: discovery.processes.executables[1] is longer than 255 bytes"};
    CHECK_EQ_INT(one_errors_failed(&c1, 1), 0);

    /* 65 entries: reported at the 65th, line 4 + 64 */
    int o = snprintf(text, sizeof(text), "discovery:\n  processes:\n    executables:\n");
    for (int i = 0; i < 65; i++)
        o += snprintf(text + o, sizeof(text) - (size_t)o, "      - n%d\n", i);
    REQUIRE(o > 0 && (size_t)o < sizeof(text));
    struct one_error c2 = {text,
                           "t.yaml:68:9: discovery.processes.executables has more than 64 entries"};
    CHECK_EQ_INT(one_errors_failed(&c2, 1), 0);

    /* and in flow form, with bad entries before it also reported */
    o = snprintf(text, sizeof(text), "discovery: {processes: {users: [a/b");
    for (int i = 1; i < 70; i++)
        o += snprintf(text + o, sizeof(text) - (size_t)o, ", u%d", i);
    o += snprintf(text + o, sizeof(text) - (size_t)o, "]}}\n");
    REQUIRE(o > 0 && (size_t)o < sizeof(text));
    char *why;
    struct cfg *c = load(text, &why);
    CHECK(c == NULL);
    CHECK_EQ_INT(count_lines(why), 2);
    CHECK(has_line(why, "t.yaml:1:33: discovery.processes.users[0] 'a/b' is not a user name or "
                        "uid (letters, digits, '_', '.' and '-' only)"));
    CHECK(has_prefix(why, "t.yaml:1:"));
    const char *more = strstr(why ? why : "", "discovery.processes.users has more than 64 entries");
    CHECK(more != NULL);
    /* the 65th entry, u64, is where it is reported */
    const char *u64 = strstr(text, " u64,");
    REQUIRE(u64 != NULL);
    char line[160];
    snprintf(line, sizeof(line), "t.yaml:1:%d: discovery.processes.users has more than 64 entries",
             (int)(u64 + 1 - text) + 1);
    CHECK(has_line(why, line));
    cfg_free(c);
    isoprof_free(why);
}

/* All problems of one file at once, and no list is half set. */
TEST(every_problem_reported)
{
    char *why;
    struct cfg *c = load("discovery:\n"
                         "  processes:\n"
                         "    executables: [a/b, '', ok, {x: y}]\n"
                         "    users: [-x, ok]\n"
                         "    enabled: true\n",
                         &why);
    CHECK(c == NULL);
    CHECK_EQ_INT(count_lines(why), 4);
    CHECK(has_prefix(why, "t.yaml:3:19: discovery.processes.executables[0] 'a/b'"));
    CHECK(has_line(why, "t.yaml:3:24: discovery.processes.executables[1] must not be empty"));
    CHECK(has_line(
        why, "t.yaml:3:32: discovery.processes.executables[3] must be a string, not a mapping"));
    CHECK(has_prefix(why, "t.yaml:4:13: discovery.processes.users[0] '-x'"));
    /* a refused list does not also count as empty */
    CHECK(strstr(why ? why : "", "is empty") == NULL);
    isoprof_free(why);
}

TEST(lists_compare_by_content)
{
    char *why;
    struct cfg *a = load("discovery: {processes: {executables: [node, bun], users: [a]}}\n", &why);
    struct cfg *b = load("discovery:\n  processes:\n    executables:\n      - node\n"
                         "      - bun\n    users: ['a']\n",
                         &why);
    struct cfg *d = load("discovery: {processes: {executables: [bun, node], users: [a]}}\n", &why);
    struct cfg *e = load("discovery: {processes: {executables: [node], users: [a]}}\n", &why);
    REQUIRE(a != NULL && b != NULL && d != NULL && e != NULL);
    CHECK(a->discovery.processes.executables.v != b->discovery.processes.executables.v);
    CHECK(cfg_strlist_equal(&a->discovery.processes.executables,
                            &b->discovery.processes.executables));
    CHECK(cfg_same(a, b));
    CHECK(!cfg_strlist_equal(&a->discovery.processes.executables,
                             &d->discovery.processes.executables));
    CHECK(!cfg_strlist_equal(&a->discovery.processes.executables,
                             &e->discovery.processes.executables));
    CHECK(!cfg_same(a, d));
    /* every discovery option is applied on reload */
    CHECK_EQ_INT(cfg_check_reload(a, d, &why), 0);
    CHECK(why == NULL);
    struct cfg *on = load("discovery:\n  processes:\n    enabled: true\n    activate: true\n"
                          "    users: [root]\n",
                          &why);
    REQUIRE(on != NULL);
    CHECK_EQ_INT(cfg_check_reload(a, on, &why), 0);
    CHECK_EQ_INT(cfg_check_reload(on, a, &why), 0);
    cfg_free(on);
    cfg_free(a);
    cfg_free(b);
    cfg_free(d);
    cfg_free(e);
}

static char *captured(int help)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return NULL;
    if (help)
        cfg_write_help(f);
    else
        cfg_write_example(f);
    fclose(f);
    return text;
}

/* version_from: its sources in the file's order, and reloadable. */
TEST(version_from)
{
    char *why;
    struct cfg *c = load("discovery:\n"
                         "  processes:\n"
                         "    enabled: true\n"
                         "    version_from: [env:APP_VERSION, package.json, env:_v2]\n",
                         &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL);
    static const char *const want[] = {"env:APP_VERSION", "package.json", "env:_v2"};
    CHECK(list_is(&c->discovery.processes.version_from, want, 3));
    const struct cfg_option *o = NULL;
    for (size_t i = 0; i < cfg_noptions; i++)
        if (strcmp(cfg_options[i].name, "discovery.processes.version_from") == 0)
            o = &cfg_options[i];
    REQUIRE(o != NULL);
    CHECK(o->reloadable);
    cfg_free(c);
}

TEST(help_and_example_show_lists)
{
    char *help = captured(1);
    REQUIRE(help != NULL);
    const char *l = strstr(help, "\n  discovery.processes.executables ");
    CHECK(l != NULL);
    if (l != NULL) {
        const char *eol = strchr(l + 1, '\n');
        const char *t = strstr(l, " list ");
        const char *d = strstr(l, " [node] ");
        const char *b = strstr(l, "<= 64 of <= 255 bytes");
        CHECK(t != NULL && t < eol && d != NULL && d < eol && b != NULL && b < eol);
    }
    l = strstr(help, "\n  discovery.processes.users ");
    CHECK(l != NULL && strstr(l, " [] ") < strchr(l + 1, '\n'));
    CHECK(strstr(help, "Lists: [a, b]") != NULL);
    free(help); /* banned-ok: allocated by open_memstream */

    char *ex = captured(0);
    REQUIRE(ex != NULL);
    CHECK(strstr(ex, "\ndiscovery:\n") != NULL);
    CHECK(strstr(ex, "\n  processes:\n") != NULL);
    CHECK(strstr(ex, "\n    enabled: false\n") != NULL);
    CHECK(strstr(ex, "\n    executables: [node]\n") != NULL);
    CHECK(strstr(ex, "\n    activate: false\n") != NULL);
    CHECK(strstr(ex, "\n    users: []\n") != NULL);
    /* and it loads back to the defaults, lists included */
    char *why;
    struct cfg *c = load(ex, &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL);
    struct cfg *d;
    REQUIRE(cfg_defaults(&d) == 0);
    CHECK(cfg_same(c, d));
    CHECK(list_is(&c->discovery.processes.executables, node_only, 1));
    cfg_free(c);
    cfg_free(d);
    free(ex); /* banned-ok: allocated by open_memstream */
}

/* Each list default is a flow list that the loader accepts as it is. */
TEST(list_defaults_load)
{
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->type != CFG_T_STRLIST || o->scope != CFG_SCOPE_GLOBAL)
            continue; /* a target's lists: test_config_srcmap.c */
        /* "a.b.c": "a:\n  b:\n    c: <def>\n" */
        char text[512], *why;
        size_t len = 0;
        int depth = 0;
        for (const char *p = o->name;; depth++) {
            const char *dot = strchr(p, '.');
            int n = dot ? (int)(dot - p) : (int)strlen(p);
            len += (size_t)snprintf(text + len, sizeof(text) - len, "%*s%.*s:%s", depth * 2, "", n,
                                    p, dot ? "\n" : " ");
            if (dot == NULL)
                break;
            p = dot + 1;
        }
        snprintf(text + len, sizeof(text) - len, "%s\n", o->def);
        struct cfg *c = load(text, &why);
        if (c == NULL)
            fprintf(stderr, "%s\n", why);
        CHECK(c != NULL);
        cfg_free(c);
        isoprof_free(why);
    }
}

int main(void)
{
    RUN(defaults);
    RUN(flow_lists);
    RUN(block_lists);
    RUN(empty_list_and_empty_value);
    RUN(errors_at_their_position);
    RUN(too_long_and_too_many);
    RUN(every_problem_reported);
    RUN(lists_compare_by_content);
    RUN(version_from);
    RUN(help_and_example_show_lists);
    RUN(list_defaults_load);
    TEST_EXIT();
}

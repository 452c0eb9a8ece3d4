/* Unit tests for what an inspector endpoint answers over HTTP: the nesting
 * guard (isoprof_json_depth), /json/list and /json/version parsing, the
 * per-endpoint cap. A hostile body is an error with a reason, never a tree
 * deep enough to take the stack. */
#include "../test.h"
#include "base.h"
#include "daemon.h"
#include "discover.h"

#include <stdio.h>
#include <stdlib.h>

static char *repeat(const char *unit, size_t n, const char *tail)
{
    size_t u = strlen(unit), t = strlen(tail);
    char *s = isoprof_malloc(u * n + t + 1);
    if (s == NULL)
        abort();
    for (size_t i = 0; i < n; i++)
        memcpy(s + i * u, unit, u);
    memcpy(s + u * n, tail, t + 1);
    return s;
}

TEST(json_depth)
{
    CHECK_EQ_INT(isoprof_json_depth("", 0, 8), 0);
    CHECK_EQ_INT(isoprof_json_depth("1", 1, 8), 0);
    CHECK_EQ_INT(isoprof_json_depth("[]", 2, 8), 1);
    CHECK_EQ_INT(isoprof_json_depth("[{},[[]]]", 9, 8), 3);
    /* brackets inside strings, escaped quotes, unbalanced closers */
    const char *s = "{\"a\":\"[[[[\\\"[[[\",\"b\":[1]}]]]]";
    CHECK_EQ_INT(isoprof_json_depth(s, strlen(s), 8), 2);
    /* too deep: limit + 1, without reading the rest */
    char *deep = repeat("[", 600000, "");
    CHECK_EQ_INT(isoprof_json_depth(deep, 600000, 64), 65);
    isoprof_free(deep);
}

TEST(list_nested_refused)
{
    char *deep = repeat("[", 600000, "");
    struct discover_list l;
    char why[160] = "";
    CHECK_EQ_INT(discover_parse_list(deep, 600000, 256, &l, why, sizeof(why)), ISOPROF_EJSON);
    CHECK(strstr(why, "nested deeper") != NULL);
    why[0] = '\0';
    CHECK(discover_parse_version(deep, 600000, why, sizeof(why)) == NULL);
    CHECK(strstr(why, "nested deeper") != NULL);
    isoprof_free(deep);
}

TEST(list_cap)
{
    size_t n = 10000, cap = n * 80 + 16, len = 0;
    char *body = isoprof_malloc(cap);
    REQUIRE(body != NULL);
    body[len++] = '[';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(body + len, cap - len,
                                "%s{\"id\":\"t%zu\",\"webSocketDebuggerUrl\":\"ws://h:1/t%zu\"}",
                                i ? "," : "", i, i);
    len += (size_t)snprintf(body + len, cap - len, ",{\"id\":\"\"},7]");
    struct discover_list l;
    char why[160] = "";
    CHECK_EQ_INT(discover_parse_list(body, len, 256, &l, why, sizeof(why)), 0);
    CHECK(l.n == 256 && l.listed == n + 2 && l.skipped == 2 && l.over == n - 256);
    CHECK_STR(l.d[0].id, "t0");
    CHECK_STR(l.d[255].path, "/t255");
    discover_list_free(&l);
    isoprof_free(body);
}

/* Four MiB of "0," is two million values: streamed, counted, nothing
 * kept (a tree of it was some 170 MiB). */
TEST(list_flat_values)
{
    size_t n = 2u << 20;
    char *body = repeat(",0", n, "]");
    body[0] = '['; /* "[0,0,...,0]": n values */
    size_t len = strlen(body);
    struct discover_list l;
    char why[160] = "";
    unsigned long before = isoprof_alloc_count();
    CHECK_EQ_INT(discover_parse_list(body, len, 256, &l, why, sizeof(why)), 0);
    CHECK(l.n == 0 && l.listed == n && l.skipped == n);
    CHECK(isoprof_alloc_count() - before < 8); /* the list's arrays, not a value each */
    discover_list_free(&l);
    isoprof_free(body);
}

TEST(list_and_version_errors)
{
    struct discover_list l;
    char why[160];
    const char *bad[] = {"{}", "not json", "[1,2", "", "7", "\"x\"", "[] []", "[]{}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        CHECK_EQ_INT(discover_parse_list(bad[i], strlen(bad[i]), 8, &l, why, sizeof(why)),
                     ISOPROF_EJSON);
        CHECK(why[0] != '\0');
    }
    const char *v = "{\"Browser\":\"node.js/v20.20.2\"}";
    CHECK_STR(discover_parse_version(v, strlen(v), why, sizeof(why)), "node");
    v = "{\"Browser\":\"workerd\"}";
    CHECK_STR(discover_parse_version(v, strlen(v), why, sizeof(why)), "workerd");
    v = "{\"Browser\":7}";
    why[0] = '\0';
    CHECK(discover_parse_version(v, strlen(v), why, sizeof(why)) == NULL);
    CHECK(strstr(why, "Browser") != NULL);
}

int main(void)
{
    RUN(json_depth);
    RUN(list_nested_refused);
    RUN(list_cap);
    RUN(list_flat_values);
    RUN(list_and_version_errors);
    TEST_EXIT();
}

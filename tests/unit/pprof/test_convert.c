/*
 * test_convert.c - pprof_from_cpu_json and pprof_from_heap_json on real
 * replies recorded from Node 20, Deno and workerd (tests/fixtures/cdp), on
 * small hand-written profiles that pin each conversion rule, and on hostile
 * input: every rejection the header promises, and inputs that must not
 * crash or recurse.
 *
 * Expected numbers are computed from the fixtures with yajl's tree parser,
 * independently of the streaming converter.
 */
#include <yajl/yajl_tree.h>

#include "../test.h"
#include "common.h"

#define MS 1000000ULL

/* --- independent reading of the fixtures --- */

static yajl_val tree_profile(const char *json)
{
    char err[256];
    yajl_val root = yajl_tree_parse(json, err, sizeof(err));
    if (root == NULL)
        fprintf(stderr, "yajl_tree_parse: %s\n", err);
    return root;
}

static yajl_val get(yajl_val v, const char *a, const char *b, const char *c)
{
    const char *path[] = {a, b, c, NULL};
    return yajl_tree_get(v, path, yajl_t_any);
}

struct expect_cpu {
    long long hits, samples, start, end, hot_hits;
};

static void expect_cpu(const char *json, const char *hot, struct expect_cpu *e)
{
    memset(e, 0, sizeof(*e));
    yajl_val root = tree_profile(json);
    if (root == NULL)
        return;
    yajl_val prof = get(root, "result", "profile", NULL);
    yajl_val nodes = get(prof, "nodes", NULL, NULL);
    for (size_t i = 0; nodes && i < YAJL_GET_ARRAY(nodes)->len; i++) {
        yajl_val n = YAJL_GET_ARRAY(nodes)->values[i];
        yajl_val hc = get(n, "hitCount", NULL, NULL);
        long long h = hc ? YAJL_GET_INTEGER(hc) : 0;
        e->hits += h;
        const char *name = YAJL_GET_STRING(get(n, "callFrame", "functionName", NULL));
        if (name && strcmp(name, hot) == 0)
            e->hot_hits += h;
    }
    e->samples = (long long)YAJL_GET_ARRAY(get(prof, "samples", NULL, NULL))->len;
    e->start = YAJL_GET_INTEGER(get(prof, "startTime", NULL, NULL));
    e->end = YAJL_GET_INTEGER(get(prof, "endTime", NULL, NULL));
    yajl_tree_free(root);
}

/* --- structural checks every output must pass --- */

static bool same_ids(const Sample *a, const Sample *b)
{
    if (a->n_location_id != b->n_location_id)
        return false;
    for (size_t i = 0; i < a->n_location_id; i++)
        if (a->location_id[i] != b->location_id[i])
            return false;
    return true;
}

static void check_wellformed(const Profile *p)
{
    CHECK(p->n_string_table > 0 && strcmp(p->string_table[0], "") == 0);
    CHECK(p->n_sample_type == 2);
    CHECK(p->period_type != NULL);
    for (size_t i = 0; i < p->n_function; i++) {
        const Function *f = p->function[i];
        CHECK(f->id != 0);
        CHECK(f->name > 0 && (size_t)f->name < p->n_string_table);
        CHECK(f->filename >= 0 && (size_t)f->filename < p->n_string_table);
        CHECK(strncmp(pstr(p, f->filename), "file://", 7) != 0);
        CHECK(strcmp(pstr(p, f->name), "(root)") != 0);
        CHECK(f->start_line >= 0);
        for (size_t j = 0; j < i; j++) {
            CHECK(p->function[j]->id != f->id);
            CHECK(p->function[j]->name != f->name || p->function[j]->filename != f->filename);
        }
    }
    for (size_t i = 0; i < p->n_location; i++) {
        const Location *l = p->location[i];
        CHECK(l->id != 0);
        CHECK(l->n_line == 1);
        if (l->n_line != 1)
            continue;
        CHECK(func_by_id(p, l->line[0]->function_id) != NULL);
        for (size_t j = 0; j < i; j++) {
            const Location *m = p->location[j];
            CHECK(m->id != l->id);
            CHECK(m->line[0]->function_id != l->line[0]->function_id ||
                  m->line[0]->line != l->line[0]->line || m->line[0]->column != l->line[0]->column);
        }
    }
    for (size_t i = 0; i < p->n_sample; i++) {
        const Sample *s = p->sample[i];
        CHECK(s->n_value == p->n_sample_type);
        CHECK(s->n_value == 2 && (s->value[0] > 0 || s->value[1] > 0));
        for (size_t j = 0; j < s->n_location_id; j++)
            CHECK(loc_by_id(p, s->location_id[j]) != NULL);
        for (size_t j = 0; j < i && j < 2000; j++)
            CHECK(!same_ids(s, p->sample[j]));
    }
}

/* --- CPU fixtures --- */

static void check_cpu_fixture(const char *file, const char *script, const char *caller)
{
    size_t len;
    char *json = read_fixture(file, &len);
    REQUIRE(json != NULL);
    struct expect_cpu e;
    expect_cpu(json, "hotLoop", &e);
    REQUIRE(e.hits > 0);
    /* What V8 really does: as many samples as counted hits, or up to a few
     * more (not always exactly one more). */
    CHECK(e.samples >= e.hits && e.samples <= e.hits + 4);

    const int64_t wmm = 1700000000000000000LL;
    struct pprof_cpu_opts o = {.wall_minus_mono_ns = wmm, .interval_ns = MS};
    struct pprof_result r;
    char *why = NULL;
    int rc = pprof_from_cpu_json(json, len, &o, &r, &why);
    if (rc)
        fprintf(stderr, "%s: %s\n", file, why ? why : isoprof_strerror(rc));
    REQUIRE(rc == 0);
    CHECK(why == NULL);
    CHECK_EQ_INT(r.samples, e.hits);
    CHECK_EQ_INT(r.start_ns, e.start * 1000 + wmm);
    CHECK_EQ_INT(r.end_ns, e.end * 1000 + wmm);

    Profile *p = decode(&r.pprof);
    REQUIRE(p != NULL);
    check_wellformed(p);
    CHECK_STR(pstr(p, p->sample_type[0]->type), "samples");
    CHECK_STR(pstr(p, p->sample_type[0]->unit), "count");
    CHECK_STR(pstr(p, p->sample_type[1]->type), "cpu");
    CHECK_STR(pstr(p, p->sample_type[1]->unit), "nanoseconds");
    CHECK_STR(pstr(p, p->period_type->type), "cpu");
    CHECK_STR(pstr(p, p->period_type->unit), "nanoseconds");
    CHECK_EQ_INT(p->period, MS);
    CHECK_EQ_INT(p->time_nanos, e.start * 1000 + wmm);
    CHECK_EQ_INT(p->duration_nanos, (e.end - e.start) * 1000);
    CHECK_EQ_INT(value_sum(p, 0), e.hits);
    CHECK_EQ_INT(value_sum(p, 1), e.hits * (long long)MS);

    const Function *hot = func_by_name(p, "hotLoop");
    const Function *alloc = func_by_name(p, "allocRetained");
    REQUIRE(hot != NULL);
    CHECK(ends_with(pstr(p, hot->filename), script));
    CHECK_EQ_INT(hot->start_line, 3);
    if (alloc) /* sampled in every recording so far, but not guaranteed */
        CHECK_EQ_INT(alloc->start_line, 10);
    CHECK(strcmp(pstr(p, hot->filename), script) == 0 || pstr(p, hot->filename)[0] == '/');
    for (size_t i = 0; i < p->n_location; i++)
        if (p->location[i]->line[0]->function_id == hot->id) {
            CHECK_EQ_INT(p->location[i]->line[0]->line, 3);
            CHECK(p->location[i]->line[0]->column > 0);
        }
    const char *synthetic[] = {"(program)", "(idle)", "(garbage collector)"};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(synthetic); i++) {
        const Function *f = func_by_name(p, synthetic[i]);
        if (f) {
            CHECK_STR(pstr(p, f->filename), "");
            CHECK_EQ_INT(f->start_line, 0);
        }
    }

    /* Stacks are leaf first: hotLoop's samples name it first and its caller next. */
    long long hot_hits = 0;
    bool called_from_caller = false;
    for (size_t i = 0; i < p->n_sample; i++) {
        const Sample *s = p->sample[i];
        REQUIRE(s->n_location_id > 0);
        CHECK(strcmp(frame_name(p, s, s->n_location_id - 1), "hotLoop") != 0);
        if (strcmp(frame_name(p, s, 0), "hotLoop") != 0)
            continue;
        hot_hits += s->value[0];
        REQUIRE(s->n_location_id >= 2);
        if (strcmp(frame_name(p, s, 1), caller) == 0)
            called_from_caller = true;
    }
    CHECK(called_from_caller);
    CHECK_EQ_INT(hot_hits, e.hot_hits);

    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
    isoprof_free(json);
}

TEST(cpu_node20)
{
    check_cpu_fixture("node20-cpu.json", "/workload.js", "tick");
}
TEST(cpu_deno)
{
    check_cpu_fixture("deno-cpu.json", "/workload.js", "tick");
}
TEST(cpu_workerd)
{
    check_cpu_fixture("workerd-cpu.json", "worker.js", "fetch");
}

/* The bare profile object converts to the very same bytes as the reply. */
TEST(cpu_bare_profile)
{
    size_t len;
    char *json = read_fixture("node20-cpu.json", &len);
    REQUIRE(json != NULL);
    char *start = strstr(json, "\"profile\":");
    REQUIRE(start != NULL);
    start += strlen("\"profile\":");
    /* strip the two closing braces of result and the reply */
    char *end = json + len;
    int braces = 0;
    while (end > start && braces < 2)
        if (*--end == '}')
            braces++;
    size_t blen = (size_t)(end - start);
    struct pprof_cpu_opts o = {.interval_ns = MS};
    struct pprof_result a, b;
    REQUIRE(pprof_from_cpu_json(json, len, &o, &a, NULL) == 0);
    REQUIRE(pprof_from_cpu_json(start, blen, &o, &b, NULL) == 0);
    CHECK(a.pprof.len == b.pprof.len && memcmp(a.pprof.data, b.pprof.data, a.pprof.len) == 0);
    CHECK_EQ_INT(a.samples, b.samples);
    pprof_buf_free(&a.pprof);
    pprof_buf_free(&b.pprof);
    isoprof_free(json);
}

/* --- hand-written profiles --- */

static Profile *convert_cpu(const char *json, const struct pprof_cpu_opts *o,
                            struct pprof_result *r)
{
    char *why = NULL;
    int rc = pprof_from_cpu_json(json, strlen(json), o, r, &why);
    if (rc) {
        fprintf(stderr, "conversion failed: %s: %s\n", isoprof_errname(rc), why ? why : "");
        isoprof_free(why);
        return NULL;
    }
    return decode(&r->pprof);
}

#define CF(name, url, line, col)                                                                   \
    "{\"functionName\":\"" name "\",\"scriptId\":\"1\",\"url\":\"" url "\",\"lineNumber\":" #line  \
    ",\"columnNumber\":" #col "}"

/* Ids out of order and far from 1..N; two sibling nodes with the same frame
 * (V8 makes them for deopts) collapse into one Sample; lines and columns
 * become 1-based; file:// urls become decoded paths; a nameless function is
 * (anonymous); samples[] may come before nodes. */
TEST(cpu_rules)
{
    const char *json =
        "{\"startTime\":1000,\"endTime\":3000,\"samples\":[900,70,70,71,5,900,70,71],"
        "\"timeDeltas\":[1,1,1,1,1,1,1,1],\"nodes\":["
        "{\"id\":900,\"callFrame\":" CF(
            "(root)", "", -1,
            -1) ",\"hitCount\":0,\"children\":[5,70,71]},"
                "{\"id\":70,\"callFrame\":" CF(
                    "hot", "file:///srv/my%20app/a.js", 9,
                    4) ",\"hitCount\":3,"
                       "\"deoptReason\":\"x\",\"positionTicks\":[{\"line\":11,\"ticks\":3}]},"
                       "{\"id\":5,\"callFrame\":" CF("", "file:///srv/my%20app/a.js", 0,
                                                     0) ",\"hitCount\":1,"
                                                        "\"children\":[6]},"
                                                        "{\"id\":6,\"callFrame\":" CF(
                                                            "inner", "node:internal/x", 2,
                                                            7) ",\"hitCount\":0},"
                                                               "{\"id\":71,\"callFrame\":" CF(
                                                                   "hot",
                                                                   "file:///srv/my%20app/a.js", 9,
                                                                   4) ",\"hitCount\":2}"
                                                                      "]}";
    struct pprof_cpu_opts o = {.interval_ns = 0, .wall_minus_mono_ns = 5};
    struct pprof_result r;
    Profile *p = convert_cpu(json, &o, &r);
    REQUIRE(p != NULL);
    check_wellformed(p);
    CHECK_EQ_INT(r.samples, 6);
    /* interval 0: estimated from the window and samples.length */
    CHECK_EQ_INT(p->period, 2000 * 1000 / 8);
    CHECK_EQ_INT(p->time_nanos, 1000 * 1000 + 5);
    CHECK_EQ_INT(p->duration_nanos, 2000 * 1000);
    CHECK_EQ_INT(p->n_sample, 2); /* hot (3+2), (anonymous) (1); inner has no hits */
    const Function *hot = func_by_name(p, "hot");
    REQUIRE(hot != NULL);
    CHECK_STR(pstr(p, hot->filename), "/srv/my app/a.js");
    CHECK_EQ_INT(hot->start_line, 10);
    const Function *anon = func_by_name(p, "(anonymous)");
    REQUIRE(anon != NULL);
    CHECK_EQ_INT(anon->start_line, 1);
    CHECK(func_by_name(p, "inner") != NULL);
    for (size_t i = 0; i < p->n_sample; i++) {
        const Sample *s = p->sample[i];
        CHECK_EQ_INT(s->n_location_id, 1);
        if (strcmp(frame_name(p, s, 0), "hot") == 0) {
            CHECK_EQ_INT(s->value[0], 5);
            CHECK_EQ_INT(s->value[1], 5 * p->period);
            const Location *l = loc_by_id(p, s->location_id[0]);
            CHECK_EQ_INT(l->line[0]->line, 10);
            CHECK_EQ_INT(l->line[0]->column, 5);
        } else {
            CHECK_STR(frame_name(p, s, 0), "(anonymous)");
            CHECK_EQ_INT(s->value[0], 1);
        }
    }
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
}

/* A mapper for the tests: the frame of /srv/a.js at line 9 maps to
 * handleRequest in /src/a.ts at 42:7 (1-based); at line 20 to a position
 * without a name; /srv/b.js could have a map but has no mapping; anything
 * else has nothing to map. Counts its calls. */
struct test_mapper {
    int calls;
};

static int test_map(void *arg, const char *url, size_t url_len, int32_t line, int32_t column,
                    struct pprof_mapped *out)
{
    struct test_mapper *m = arg;
    m->calls++;
    (void)column;
    if (url_len == 9 && memcmp(url, "/srv/a.js", 9) == 0 && line == 9) {
        *out = (struct pprof_mapped){"handleRequest", "/src/a.ts", 42, 7};
        return 1;
    }
    if (url_len == 9 && memcmp(url, "/srv/a.js", 9) == 0 && line == 20) {
        *out = (struct pprof_mapped){NULL, "/src/a.ts", 50, 0};
        return 1;
    }
    if (url_len == 9 && memcmp(url, "/srv/b.js", 9) == 0)
        return 0;
    return -1;
}

/* A mapped frame: the original name, file, start line and column, V8's name
 * as system_name; a mapped frame without a name keeps V8's; unmapped and
 * not-mappable frames stay as V8 gave them; distinct Locations counted. */
TEST(cpu_mapper)
{
    const char *json =
        "{\"startTime\":1000,\"endTime\":3000,\"samples\":[1,2,3,4,5],"
        "\"timeDeltas\":[1,1,1,1,1],\"nodes\":["
        "{\"id\":1,\"callFrame\":" CF("(root)", "", -1, -1) ",\"hitCount\":0,"
        "\"children\":[2,3,4,5]},"
        "{\"id\":2,\"callFrame\":" CF("u", "file:///srv/a.js", 9, 120) ",\"hitCount\":2},"
        "{\"id\":3,\"callFrame\":" CF("x", "/srv/a.js", 20, 3) ",\"hitCount\":1},"
        "{\"id\":4,\"callFrame\":" CF("b", "/srv/b.js", 1, 1) ",\"hitCount\":1},"
        "{\"id\":5,\"callFrame\":" CF("inner", "node:internal/x", 2, 7) ",\"hitCount\":1}"
        "]}";
    struct test_mapper tm = {0};
    struct pprof_mapper mapper = {test_map, &tm};
    struct pprof_cpu_opts o = {.interval_ns = MS, .mapper = &mapper};
    struct pprof_result r;
    Profile *p = convert_cpu(json, &o, &r);
    REQUIRE(p != NULL);
    check_wellformed(p);
    CHECK(tm.calls >= 4); /* (root) has no url: not asked */
    CHECK_EQ_INT(r.mapped, 2);
    CHECK_EQ_INT(r.unmapped, 1);
    const Function *f = func_by_name(p, "handleRequest");
    REQUIRE(f != NULL);
    CHECK_STR(pstr(p, f->system_name), "u");
    CHECK_STR(pstr(p, f->filename), "/src/a.ts");
    CHECK_EQ_INT(f->start_line, 42);
    const Function *x = func_by_name(p, "x");
    REQUIRE(x != NULL);
    CHECK_STR(pstr(p, x->system_name), "x");
    CHECK_STR(pstr(p, x->filename), "/src/a.ts");
    CHECK_EQ_INT(x->start_line, 50);
    const Function *b = func_by_name(p, "b");
    REQUIRE(b != NULL);
    CHECK_STR(pstr(p, b->filename), "/srv/b.js");
    CHECK_STR(pstr(p, b->system_name), "");
    CHECK_EQ_INT(b->start_line, 2);
    const Function *in = func_by_name(p, "inner");
    REQUIRE(in != NULL);
    CHECK_STR(pstr(p, in->filename), "node:internal/x");
    for (size_t i = 0; i < p->n_sample; i++) {
        const Location *l = loc_by_id(p, p->sample[i]->location_id[0]);
        if (l->line[0]->function_id == f->id) {
            CHECK_EQ_INT(l->line[0]->line, 42);
            CHECK_EQ_INT(l->line[0]->column, 7);
        } else if (l->line[0]->function_id == x->id) {
            CHECK_EQ_INT(l->line[0]->line, 50);
            CHECK_EQ_INT(l->line[0]->column, 0);
        }
    }
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);

    /* the same reply without a mapper: nothing counted */
    o.mapper = NULL;
    p = convert_cpu(json, &o, &r);
    REQUIRE(p != NULL);
    CHECK_EQ_INT(r.mapped, 0);
    CHECK_EQ_INT(r.unmapped, 0);
    CHECK(func_by_name(p, "handleRequest") == NULL);
    CHECK(func_by_name(p, "u") != NULL);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
}

/* The heap converter maps through the same hook. */
TEST(heap_mapper)
{
    const char *json = "{\"head\":{\"callFrame\":" CF("(root)", "", -1, -1) ",\"selfSize\":0,"
                       "\"id\":1,\"children\":[{\"callFrame\":" CF("u", "/srv/a.js", 9, 4)
                       ",\"selfSize\":0,\"id\":2,\"children\":[]}]},"
                       "\"samples\":[{\"size\":64,\"nodeId\":2,\"ordinal\":1}]}";
    struct test_mapper tm = {0};
    struct pprof_mapper mapper = {test_map, &tm};
    struct pprof_heap_opts o = {.time_ns = 1, .interval_bytes = 512, .mapper = &mapper};
    struct pprof_result r;
    char *why = NULL;
    int rc = pprof_from_heap_json(json, strlen(json), &o, &r, &why);
    if (rc)
        fprintf(stderr, "%s\n", why ? why : "");
    REQUIRE(rc == 0);
    Profile *p = decode(&r.pprof);
    REQUIRE(p != NULL);
    const Function *f = func_by_name(p, "handleRequest");
    REQUIRE(f != NULL);
    CHECK_STR(pstr(p, f->system_name), "u");
    CHECK_EQ_INT(r.mapped, 1);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
}

/* A stack is every frame from the leaf up to, not including, (root). */
TEST(cpu_stack_order)
{
    const char *json =
        "{\"id\":3,\"method\":\"Profiler.stop\",\"result\":{\"profile\":{\"nodes\":["
        "{\"id\":1,\"callFrame\":" CF(
            "(root)", "", -1, -1) ",\"children\":[2]},"
                                  "{\"id\":2,\"callFrame\":" CF(
                                      "a", "x.js", 0,
                                      0) ",\"children\":[3]},"
                                         "{\"id\":3,\"callFrame\":" CF(
                                             "b", "x.js", 5,
                                             0) ",\"children\":[4]},"
                                                "{\"id\":4,\"callFrame\":" CF(
                                                    "a", "x.js", 0,
                                                    0) ",\"children\":[5]},"
                                                       "{\"id\":5,\"callFrame\":" CF(
                                                           "c", "x.js", 9,
                                                           0) ",\"hitCount\":4,\"children\":[]}],"
                                                              "\"startTime\":0,\"endTime\":1.0e1,"
                                                              "\"samples\":[1,5,5,5,5]"
                                                              ",\"timeDeltas\":[0,1,1,1,1]}}}";
    struct pprof_cpu_opts o = {.interval_ns = 1000};
    struct pprof_result r;
    Profile *p = convert_cpu(json, &o, &r);
    REQUIRE(p != NULL);
    REQUIRE(p->n_sample == 1);
    const Sample *s = p->sample[0];
    REQUIRE(s->n_location_id == 4);
    CHECK_STR(frame_name(p, s, 0), "c");
    CHECK_STR(frame_name(p, s, 1), "a");
    CHECK_STR(frame_name(p, s, 2), "b");
    CHECK_STR(frame_name(p, s, 3), "a");
    CHECK(s->location_id[1] == s->location_id[3]); /* one Location per distinct frame */
    CHECK_EQ_INT(p->duration_nanos, 10000);        /* 1.0e1 is an integer too */
    CHECK_EQ_INT(p->n_location, 3);
    CHECK_EQ_INT(s->value[0], 4);
    CHECK_EQ_INT(s->value[1], 4000);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
}

/* Invalid UTF-8 that survives JSON unescaping is replaced, not passed on.
 * yajl itself turns a lone high surrogate into '?'; a lone low surrogate
 * comes out as the three bytes ED B0 80, each of which becomes U+FFFD; so
 * does NUL, which a C string cannot hold. */
#define FFFD "\xEF\xBF\xBD"
TEST(cpu_utf8_replaced)
{
    const char *json =
        "{\"startTime\":0,\"endTime\":1,\"nodes\":["
        "{\"id\":1,\"callFrame\":" CF("(root)", "", -1,
                                      -1) ",\"children\":[2,3,4]},"
                                          "{\"id\":2,\"callFrame\":" CF(
                                              "bad\\udc00x", "a\\u0000b.js", 1,
                                              1) ",\"hitCount\":1},"
                                                 "{\"id\":3,\"callFrame\":" CF(
                                                     "hi\\ud800x", "u.js", 1,
                                                     1) ",\"hitCount\":1},"
                                                        "{\"id\":4,\"callFrame\":" CF(
                                                            "caf\\u00e9 \\ud83d\\ude00", "u.js", 1,
                                                            1) ",\"hitCount\":1}]}";
    struct pprof_result r;
    Profile *p = convert_cpu(json, NULL, &r);
    REQUIRE(p != NULL);
    const Function *f = func_by_name(p, "bad" FFFD FFFD FFFD "x");
    CHECK(f != NULL);
    if (f)
        CHECK_STR(pstr(p, f->filename), "a" FFFD "b.js");
    CHECK(func_by_name(p, "hi?x") != NULL);
    CHECK(func_by_name(p, "caf\xC3\xA9 \xF0\x9F\x98\x80") != NULL);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
}

/* Node 20 under setImmediate load reports more hitCount than samples
 * (974 hits, 935 samples seen): the profile converts and its total follows
 * hitCount. */
TEST(cpu_more_hits_than_samples)
{
    const char *json = "{\"startTime\":0,\"endTime\":10,\"samples\":[2,2],\"timeDeltas\":[1,1],"
                       "\"nodes\":[{\"id\":1,\"callFrame\":{},\"children\":[2]},"
                       "{\"id\":2,\"callFrame\":{\"functionName\":\"hot\"},\"hitCount\":5}]}";
    struct pprof_result r;
    Profile *p = convert_cpu(json, NULL, &r);
    REQUIRE(p != NULL);
    CHECK_EQ_INT(r.samples, 5);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
}

/* A sample naming a node the tree does not hold, after the nodes or
 * before them: counted in orphans, the window kept. */
TEST(cpu_orphan_samples)
{
    static const char *const json[] = {
        "{\"startTime\":0,\"endTime\":10,\"nodes\":[{\"id\":1,\"callFrame\":{},\"children\":[2]},"
        "{\"id\":2,\"callFrame\":{\"functionName\":\"hot\"},\"hitCount\":2}],"
        "\"samples\":[2,9,2],\"timeDeltas\":[1,1,1]}",
        "{\"startTime\":0,\"endTime\":10,\"samples\":[9,2,2],\"timeDeltas\":[1,1,1],"
        "\"nodes\":[{\"id\":1,\"callFrame\":{},\"children\":[2]},"
        "{\"id\":2,\"callFrame\":{\"functionName\":\"hot\"},\"hitCount\":2}]}",
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(json); i++) {
        struct pprof_result r;
        Profile *p = convert_cpu(json[i], NULL, &r);
        REQUIRE(p != NULL);
        CHECK_EQ_INT(r.orphans, 1);
        CHECK_EQ_INT(r.samples, 2);
        REQUIRE(p->n_sample == 1);
        CHECK_EQ_INT(p->sample[0]->value[0], 2);
        perftools__profiles__profile__free_unpacked(p, NULL);
        pprof_buf_free(&r.pprof);
    }
}

TEST(cpu_long_string_cut)
{
    size_t n = 10000;
    char *name = isoprof_malloc(n + 1);
    REQUIRE(name != NULL);
    memset(name, 'x', n);
    name[n] = '\0';
    char *json =
        isoprof_asprintf("{\"startTime\":0,\"endTime\":1,\"nodes\":["
                         "{\"id\":1,\"callFrame\":{},\"children\":[2]},"
                         "{\"id\":2,\"callFrame\":{\"functionName\":\"%s\"},\"hitCount\":1}]}",
                         name);
    REQUIRE(json != NULL);
    struct pprof_result r;
    Profile *p = convert_cpu(json, NULL, &r);
    REQUIRE(p != NULL);
    CHECK(p->n_function == 1);
    if (p->n_function == 1)
        CHECK_EQ_INT(strlen(pstr(p, p->function[0]->name)), PPROF_MAX_STRING);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
    isoprof_free(json);
    isoprof_free(name);
}

/* --- hostile CPU input --- */

struct bad {
    const char *json;
    int err;
    const char *why; /* substring of the message */
};

#define ROOT "{\"id\":1,\"callFrame\":{},\"children\":[2]}"
#define N2 "{\"id\":2,\"callFrame\":{},\"hitCount\":1}"
#define T ",\"startTime\":0,\"endTime\":10"

static const struct bad bad_cpu[] = {
    {"", ISOPROF_EJSON, "empty"},
    {"{\"nodes\":[", ISOPROF_EJSON, "malformed JSON"},
    {"{\"nodes\":[]} trailing", ISOPROF_EJSON, "malformed JSON"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":{\"functionName\":\"\xff\xfe\"}}]" T "}", ISOPROF_EJSON,
     "malformed JSON"},
    {"[1,2]", ISOPROF_EPROFILE, "expected an object"},
    {"{\"id\":1,\"error\":{\"code\":-32000,\"message\":\"No recording profiles found\"}}",
     ISOPROF_ECDP, "No recording profiles found"},
    {"{\"id\":1,\"result\":{}}", ISOPROF_EPROFILE, "no CPU profile"},
    {"{\"startTime\":0,\"endTime\":1}", ISOPROF_EPROFILE, "no CPU profile"},
    {"{\"nodes\":[]" T "}", ISOPROF_EPROFILE, "no nodes"},
    {"{\"nodes\":{}" T "}", ISOPROF_EPROFILE, "\"nodes\" is an object, expected an array"},
    {"{\"nodes\":[1]" T "}", ISOPROF_EPROFILE, "element of \"nodes\" is a number"},
    {"{\"nodes\":[" ROOT "," N2 "],\"nodes\":[]" T "}", ISOPROF_EPROFILE,
     "duplicate key \"nodes\""},
    {"{\"nodes\":[{\"callFrame\":{}}]" T "}", ISOPROF_EPROFILE, "no \"id\""},
    {"{\"nodes\":[{\"id\":1}]" T "}", ISOPROF_EPROFILE, "no \"callFrame\""},
    {"{\"nodes\":[{\"id\":\"1\",\"callFrame\":{}}]" T "}", ISOPROF_EPROFILE, "\"id\" is a string"},
    {"{\"nodes\":[{\"id\":-1,\"callFrame\":{}}]" T "}", ISOPROF_EPROFILE, "\"id\" is -1"},
    {"{\"nodes\":[{\"id\":1099511627776,\"callFrame\":{}}]" T "}", ISOPROF_EPROFILE, "\"id\" is"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":{},\"hitCount\":1.5}]" T "}", ISOPROF_EPROFILE,
     "\"hitCount\" is 1.5"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":{},\"hitCount\":-3}]" T "}", ISOPROF_EPROFILE,
     "\"hitCount\" is -3"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":[]}]" T "}", ISOPROF_EPROFILE,
     "\"callFrame\" is an array"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":{\"functionName\":5}}]" T "}", ISOPROF_EPROFILE,
     "\"functionName\" is a number"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":{\"url\":{}}}]" T "}", ISOPROF_EPROFILE,
     "\"url\" is an object"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":{},\"children\":[\"2\"]}]" T "}", ISOPROF_EPROFILE,
     "element of \"children\" is a string"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":{},\"callFrame\":{}}]" T "}", ISOPROF_EPROFILE,
     "duplicate key \"callFrame\""},
    {"{\"nodes\":[" ROOT ",{\"id\":1,\"callFrame\":{}}]" T "}", ISOPROF_EPROFILE,
     "duplicate node id 1"},
    {"{\"nodes\":[" ROOT "]" T "}", ISOPROF_EPROFILE, "child 2 is unknown"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":{},\"children\":[2,2]}," N2 "]" T "}", ISOPROF_EPROFILE,
     "child 2 is also a child of node 1"},
    {"{\"nodes\":[" ROOT ",{\"id\":3,\"callFrame\":{},\"children\":[2]}," N2 "]" T "}",
     ISOPROF_EPROFILE, "child 2 is also a child of node 1"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":{},\"children\":[1]}]" T "}", ISOPROF_EPROFILE,
     "no root"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":{},\"children\":[2]},{\"id\":2,\"callFrame\":{},"
     "\"children\":[1]}]" T "}",
     ISOPROF_EPROFILE, "no root"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":{}},{\"id\":2,\"callFrame\":{},\"children\":[3]},"
     "{\"id\":3,\"callFrame\":{},\"children\":[2]}]" T "}",
     ISOPROF_EPROFILE, "cycle"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":{}},{\"id\":2,\"callFrame\":{}}]" T "}", ISOPROF_EPROFILE,
     "several roots"},
    {"{\"nodes\":[" ROOT "," N2 "],\"samples\":[1,2],\"timeDeltas\":[1]" T "}", ISOPROF_EPROFILE,
     "2 samples but 1 timeDeltas"},
    {"{\"nodes\":[" ROOT "," N2 "],\"samples\":[1,2]" T "}", ISOPROF_EPROFILE,
     "2 samples but 0 timeDeltas"},
    {"{\"nodes\":[" ROOT "," N2 "],\"samples\":[1,2],\"timeDeltas\":[1,\"x\"]" T "}",
     ISOPROF_EPROFILE, "element of \"timeDeltas\" is a string"},
    {"{\"nodes\":[" ROOT "," N2 "],\"startTime\":10,\"endTime\":5}", ISOPROF_EPROFILE,
     "endTime 5 is before startTime 10"},
    {"{\"nodes\":[" ROOT "," N2 "],\"startTime\":-1,\"endTime\":5}", ISOPROF_EPROFILE,
     "\"startTime\" is -1"},
    {"{\"nodes\":[" ROOT "," N2 "],\"startTime\":99999999999999999,\"endTime\":99999999999999999}",
     ISOPROF_EPROFILE, "\"startTime\" is"},
    {"{\"nodes\":[" ROOT "," N2 "],\"startTime\":\"0\",\"endTime\":5}", ISOPROF_EPROFILE,
     "\"startTime\" is a string"},
    {"{\"nodes\":[" ROOT "," N2 "],\"startTime\":1e400,\"endTime\":5}", ISOPROF_EPROFILE,
     "\"startTime\" is 1e400"},
    {"{\"nodes\":[{\"id\":9.3e18,\"callFrame\":{}}]" T "}", ISOPROF_EPROFILE, "\"id\" is 9.3e18"},
    {"{\"nodes\":[{\"id\":1,\"callFrame\":{\"lineNumber\":9.2233720368547758e18}}]" T "}",
     ISOPROF_EPROFILE, "\"lineNumber\" is 9.2233720368547758e18"},
};

TEST(cpu_hostile)
{
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(bad_cpu); i++) {
        const struct bad *b = &bad_cpu[i];
        struct pprof_result r = {{(uint8_t *)1, 7}, 0, 0, 0, 0, 0, 0, 0};
        char *why = NULL;
        int rc = pprof_from_cpu_json(b->json, strlen(b->json), NULL, &r, &why);
        if (rc != b->err || why == NULL || strstr(why, b->why) == NULL) {
            fprintf(stderr, "case %zu %s: got %s \"%s\", want %s \"%s\"\n", i, b->json,
                    isoprof_errname(rc), why ? why : "(null)", isoprof_errname(b->err), b->why);
            test_failed_ = 1;
        }
        CHECK(r.pprof.data == (uint8_t *)1 && r.pprof.len == 7); /* untouched */
        isoprof_free(why);
    }
}

TEST(cpu_node_cap)
{
    const char *json = "{\"nodes\":[" ROOT "," N2 ",{\"id\":3,\"callFrame\":{}}]" T "}";
    struct pprof_cpu_opts o = {.max_nodes = 2};
    struct pprof_result r;
    char *why = NULL;
    CHECK_EQ_INT(pprof_from_cpu_json(json, strlen(json), &o, &r, &why), ISOPROF_EPROFILE);
    CHECK(why && strstr(why, "more than 2 nodes"));
    isoprof_free(why);
    o.max_nodes = 3;
    CHECK_EQ_INT(pprof_from_cpu_json(json, strlen(json), &o, &r, NULL),
                 ISOPROF_EPROFILE); /* 2 roots */
}

/* Deep nesting under an unknown key costs an error, not the stack. */
TEST(cpu_deep_nesting)
{
    size_t depth = PPROF_MAX_DEPTH + 100;
    char *json = isoprof_malloc(2 * depth + 64);
    REQUIRE(json != NULL);
    size_t n = 0;
    n += (size_t)snprintf(json, 64, "{\"x\":");
    memset(json + n, '[', depth);
    n += depth;
    memset(json + n, ']', depth);
    n += depth;
    json[n++] = '}';
    char *why = NULL;
    struct pprof_result r;
    CHECK_EQ_INT(pprof_from_cpu_json(json, n, NULL, &r, &why), ISOPROF_EPROFILE);
    CHECK(why && strstr(why, "nesting deeper"));
    isoprof_free(why);
    isoprof_free(json);
}

/* A long chain of nodes is walked without recursion, and its one stack is
 * cut at PPROF_MAX_STACK frames: the last is "(truncated)", carrying the
 * hit of the leaf, and the profile says so in a comment. */
TEST(cpu_long_chain)
{
    size_t n = 100000;
    size_t cap = n * 100 + 128, len = 0;
    char *json = isoprof_malloc(cap);
    REQUIRE(json != NULL);
    len += (size_t)snprintf(json + len, cap - len, "{\"startTime\":0,\"endTime\":1,\"nodes\":[");
    for (size_t i = 1; i <= n; i++) {
        len += (size_t)snprintf(json + len, cap - len,
                                "%s{\"id\":%zu,\"callFrame\":{\"functionName\":\"f%zu\"}",
                                i > 1 ? "," : "", i, i % 7);
        if (i < n)
            len += (size_t)snprintf(json + len, cap - len, ",\"children\":[%zu]}", i + 1);
        else
            len += (size_t)snprintf(json + len, cap - len, ",\"hitCount\":1}");
    }
    len += (size_t)snprintf(json + len, cap - len, "]}");
    struct pprof_result r;
    char *why = NULL;
    int rc = pprof_from_cpu_json(json, len, NULL, &r, &why);
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) {
        Profile *p = decode(&r.pprof);
        REQUIRE(p != NULL);
        CHECK_EQ_INT(p->n_sample, 1);
        CHECK_EQ_INT(p->sample[0]->n_location_id, PPROF_MAX_STACK + 1); /* (root) left out */
        CHECK_EQ_INT(p->n_function, 8);                             /* f0..f6, (truncated) */
        CHECK_STR(frame_name(p, p->sample[0], 0), PPROF_TRUNCATED_FRAME);
        CHECK(r.truncated == n - 1 - PPROF_MAX_STACK); /* frames 513 .. n-1 folded */
        CHECK_EQ_INT(p->n_comment, 1);
        if (p->n_comment == 1)
            CHECK(strstr(p->string_table[p->comment[0]], "deeper than 512 frames") != NULL);
        perftools__profiles__profile__free_unpacked(p, NULL);
        pprof_buf_free(&r.pprof);
    }
    isoprof_free(why);
    isoprof_free(json);
}

/* Many distinct stacks, each cut at PPROF_MAX_STACK frames: the output
 * would be about ten times the input, past pprof_output_cap, so the
 * conversion is refused with ISOPROF_ETOOBIG instead of writing it. */
/* A CPU profile: a call chain `chain` deep whose last frame calls `leaves`
 * leaf functions, one hit each. *len is its length; the caller frees it. */
static char *chain_with_leaves(size_t chain, size_t leaves, size_t *len)
{
    size_t cap = (chain + leaves) * 120 + 256, n = 0;
    char *json = isoprof_malloc(cap);
    if (json == NULL)
        return NULL;
    n += (size_t)snprintf(json + n, cap - n, "{\"startTime\":0,\"endTime\":1,\"nodes\":[");
    for (size_t i = 1; i <= chain; i++) {
        n += (size_t)snprintf(
            json + n, cap - n,
            "%s{\"id\":%zu,\"callFrame\":{\"functionName\":\"c%zu\"},\"children\":[",
            i > 1 ? "," : "", i, i);
        if (i < chain)
            n += (size_t)snprintf(json + n, cap - n, "%zu", i + 1);
        else
            for (size_t k = 0; k < leaves; k++)
                n += (size_t)snprintf(json + n, cap - n, "%s%zu", k ? "," : "", chain + 1 + k);
        n += (size_t)snprintf(json + n, cap - n, "]}");
    }
    for (size_t k = 0; k < leaves; k++)
        n += (size_t)snprintf(
            json + n, cap - n,
            ",{\"id\":%zu,\"callFrame\":{\"functionName\":\"l%zu\"},\"hitCount\":1}", chain + 1 + k,
            k);
    n += (size_t)snprintf(json + n, cap - n, "]}");
    *len = n;
    return json;
}

TEST(cpu_output_cap)
{
    size_t leaves = 6000, len = 0;
    struct pprof_result r;
    char *why = NULL;
    /* Leaves below the cut fold into one (truncated) frame: small output,
     * accepted. */
    char *json = chain_with_leaves(600, leaves, &len);
    REQUIRE(json != NULL);
    CHECK_EQ_INT(pprof_from_cpu_json(json, len, NULL, &r, &why), 0);
    CHECK(r.truncated == leaves + 600 - 1 - PPROF_MAX_STACK); /* node 1 is the root */
    pprof_buf_free(&r.pprof);
    isoprof_free(why);
    isoprof_free(json);
    why = NULL;
    /* A chain of 500: every leaf is frame 501, a stack of its own, and
     * each sample writes ~500 ids: past the cap. */
    json = chain_with_leaves(500, leaves, &len);
    REQUIRE(json != NULL);
    CHECK(pprof_output_cap(len) < leaves * 500);
    CHECK_EQ_INT(pprof_from_cpu_json(json, len, NULL, &r, &why), ISOPROF_ETOOBIG);
    CHECK(why && strstr(why, "pprof output past"));
    isoprof_free(why);
    isoprof_free(json);
    /* The cap: proportional, with a floor and a ceiling. */
    CHECK(pprof_output_cap(0) == PPROF_OUTPUT_SLACK);
    CHECK(pprof_output_cap(1000) == 4000 + PPROF_OUTPUT_SLACK);
    CHECK(pprof_output_cap((size_t)1 << 40) == PPROF_MAX_CONVERT_OUTPUT);
}

/* A merge of profiles whose stacks were cut does not cut them again, and
 * keeps their comment. */
TEST(merge_keeps_cut_stacks)
{
    size_t n = 1000, cap = n * 100 + 128, len = 0;
    char *json = isoprof_malloc(cap);
    REQUIRE(json != NULL);
    len += (size_t)snprintf(json + len, cap - len, "{\"startTime\":0,\"endTime\":1,\"nodes\":[");
    for (size_t i = 1; i <= n; i++)
        len += (size_t)snprintf(
            json + len, cap - len,
            "%s{\"id\":%zu,\"callFrame\":{\"functionName\":\"f%zu\"},\"hitCount\":1,"
            "\"children\":[%s%zu]}",
            i > 1 ? "," : "", i, i, i < n ? "" : "", i < n ? i + 1 : 0);
    len += (size_t)snprintf(json + len, cap - len, "]}");
    /* the last node's children list is [0]: make it empty */
    char *z = strstr(json, "\"children\":[0]");
    REQUIRE(z != NULL);
    memcpy(z, "\"children\":[ ]", 14);
    struct pprof_result r;
    char *why = NULL;
    int rc = pprof_from_cpu_json(json, len, NULL, &r, &why);
    if (rc)
        fprintf(stderr, "merge_keeps_cut_stacks: %s\n", why ? why : "");
    REQUIRE(rc == 0);
    struct pprof_buf in[2] = {r.pprof, r.pprof}, out = {0};
    CHECK_EQ_INT(pprof_merge(in, 2, &out, NULL), 0);
    Profile *a = decode(&r.pprof), *b = decode(&out);
    REQUIRE(a != NULL && b != NULL);
    CHECK_EQ_INT(b->n_sample, a->n_sample);
    CHECK_EQ_INT(value_sum(b, 0), 2 * value_sum(a, 0));
    CHECK_EQ_INT(b->n_comment, 1);
    perftools__profiles__profile__free_unpacked(a, NULL);
    perftools__profiles__profile__free_unpacked(b, NULL);
    pprof_buf_free(&out);
    pprof_buf_free(&r.pprof);
    isoprof_free(why);
    isoprof_free(json);
}

/* --- heap --- */

struct expect_heap {
    long long samples, bytes, alloc_objects;
};

static void walk_heap(yajl_val node, long long *ids_alloc, size_t *nalloc)
{
    /* iterative: an explicit stack of nodes */
    yajl_val stack[4096];
    size_t sp = 0;
    stack[sp++] = node;
    while (sp) {
        yajl_val n = stack[--sp];
        const char *name = YAJL_GET_STRING(get(n, "callFrame", "functionName", NULL));
        if (name && strcmp(name, "allocRetained") == 0 && *nalloc < 64)
            ids_alloc[(*nalloc)++] = YAJL_GET_INTEGER(get(n, "id", NULL, NULL));
        yajl_val kids = get(n, "children", NULL, NULL);
        for (size_t i = 0; kids && i < YAJL_GET_ARRAY(kids)->len && sp < 4096; i++)
            stack[sp++] = YAJL_GET_ARRAY(kids)->values[i];
    }
}

static void expect_heap(const char *json, struct expect_heap *e)
{
    memset(e, 0, sizeof(*e));
    yajl_val root = tree_profile(json);
    if (root == NULL)
        return;
    yajl_val prof = get(root, "result", "profile", NULL);
    long long alloc_ids[64];
    size_t nalloc = 0;
    walk_heap(get(prof, "head", NULL, NULL), alloc_ids, &nalloc);
    yajl_val s = get(prof, "samples", NULL, NULL);
    for (size_t i = 0; i < YAJL_GET_ARRAY(s)->len; i++) {
        yajl_val x = YAJL_GET_ARRAY(s)->values[i];
        long long node = YAJL_GET_INTEGER(get(x, "nodeId", NULL, NULL));
        e->samples++;
        e->bytes += YAJL_GET_INTEGER(get(x, "size", NULL, NULL));
        for (size_t k = 0; k < nalloc; k++)
            if (alloc_ids[k] == node)
                e->alloc_objects++;
    }
    yajl_tree_free(root);
}

static void check_heap_fixture(const char *file, const char *script)
{
    size_t len;
    char *json = read_fixture(file, &len);
    REQUIRE(json != NULL);
    struct expect_heap e;
    expect_heap(json, &e);
    REQUIRE(e.samples > 0);
    struct pprof_heap_opts o = {.time_ns = 1700000000123456789ULL, .interval_bytes = 65536};
    struct pprof_result r;
    char *why = NULL;
    int rc = pprof_from_heap_json(json, len, &o, &r, &why);
    if (rc)
        fprintf(stderr, "%s: %s\n", file, why ? why : isoprof_strerror(rc));
    REQUIRE(rc == 0);
    CHECK_EQ_INT(r.samples, e.samples);
    CHECK_EQ_INT(r.start_ns, o.time_ns);
    CHECK_EQ_INT(r.end_ns, o.time_ns);
    Profile *p = decode(&r.pprof);
    REQUIRE(p != NULL);
    check_wellformed(p);
    CHECK_STR(pstr(p, p->sample_type[0]->type), "inuse_objects");
    CHECK_STR(pstr(p, p->sample_type[0]->unit), "count");
    CHECK_STR(pstr(p, p->sample_type[1]->type), "inuse_space");
    CHECK_STR(pstr(p, p->sample_type[1]->unit), "bytes");
    CHECK_STR(pstr(p, p->period_type->type), "space");
    CHECK_STR(pstr(p, p->period_type->unit), "bytes");
    CHECK_EQ_INT(p->period, 65536);
    CHECK_EQ_INT(p->time_nanos, (int64_t)o.time_ns);
    CHECK_EQ_INT(value_sum(p, 0), e.samples);
    CHECK_EQ_INT(value_sum(p, 1), e.bytes);
    const Function *f = func_by_name(p, "allocRetained");
    REQUIRE(f != NULL);
    CHECK(ends_with(pstr(p, f->filename), script));
    CHECK_EQ_INT(f->start_line, 10);
    long long alloc_objects = 0;
    for (size_t i = 0; i < p->n_sample; i++) {
        const Sample *s = p->sample[i];
        REQUIRE(s->n_location_id > 0);
        if (strcmp(frame_name(p, s, 0), "allocRetained") == 0)
            alloc_objects += s->value[0];
    }
    CHECK_EQ_INT(alloc_objects, e.alloc_objects);
    CHECK(alloc_objects > 0);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
    isoprof_free(json);
}

TEST(heap_node20)
{
    check_heap_fixture("node20-heap.json", "/workload.js");
}
TEST(heap_deno)
{
    check_heap_fixture("deno-heap.json", "/workload.js");
}
TEST(heap_workerd)
{
    check_heap_fixture("workerd-heap.json", "worker.js");
}

static char *heap_chain(size_t depth, bool sample_leaf)
{
    size_t cap = depth * 128 + 256, len = 0;
    char *json = isoprof_malloc(cap);
    if (json == NULL)
        return NULL;
    len += (size_t)snprintf(json, cap, "{\"head\":");
    for (size_t i = 1; i <= depth; i++)
        len += (size_t)snprintf(json + len, cap - len,
                                "{\"callFrame\":{\"functionName\":\"f%zu\",\"url\":\"/a.js\"},"
                                "\"selfSize\":0,\"id\":%zu,\"children\":[",
                                i % 5, i);
    for (size_t i = 1; i <= depth; i++)
        len += (size_t)snprintf(json + len, cap - len, "]}");
    /* samples: the root, its child, and the leaf (whose id is depth) */
    if (sample_leaf)
        snprintf(json + len, cap - len,
                 ",\"samples\":[{\"size\":100,\"nodeId\":1},{\"size\":8,\"nodeId\":2},"
                 "{\"size\":40,\"nodeId\":%zu}]}",
                 depth);
    else
        snprintf(json + len, cap - len, ",\"samples\":[]}");
    return json;
}

TEST(heap_deep_ok)
{
    size_t depth = PPROF_MAX_DEPTH - 10;
    char *json = heap_chain(depth, true);
    REQUIRE(json != NULL);
    struct pprof_result r;
    char *why = NULL;
    int rc = pprof_from_heap_json(json, strlen(json), NULL, &r, &why);
    if (rc)
        fprintf(stderr, "heap_deep_ok: %s\n", why ? why : "");
    REQUIRE(rc == 0);
    Profile *p = decode(&r.pprof);
    REQUIRE(p != NULL);
    /* the root's own sample gets its frame; the others leave the root out */
    CHECK_EQ_INT(p->n_sample, 3);
    CHECK_EQ_INT(value_sum(p, 0), 3);
    CHECK_EQ_INT(value_sum(p, 1), 148);
    size_t longest = 0;
    for (size_t i = 0; i < p->n_sample; i++)
        if (p->sample[i]->n_location_id > longest)
            longest = p->sample[i]->n_location_id;
    CHECK_EQ_INT(longest, PPROF_MAX_STACK + 1); /* cut, as CPU stacks are */
    CHECK(r.truncated > 0);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
    isoprof_free(why);
    isoprof_free(json);
}

TEST(heap_too_deep)
{
    char *json = heap_chain(PPROF_MAX_DEPTH + 10, false);
    REQUIRE(json != NULL);
    struct pprof_result r;
    char *why = NULL;
    CHECK_EQ_INT(pprof_from_heap_json(json, strlen(json), NULL, &r, &why), ISOPROF_EPROFILE);
    CHECK(why && strstr(why, "nesting deeper"));
    isoprof_free(why);
    isoprof_free(json);
}

#define HN(id, kids)                                                                               \
    "{\"callFrame\":{\"functionName\":\"f\"},\"selfSize\":0,\"id\":" #id ",\"children\":[" kids "]}"

static const struct bad bad_heap[] = {
    {"{\"samples\":[]}", ISOPROF_EPROFILE, "no heap profile"},
    {"{\"id\":1,\"result\":{\"profile\":{\"head\":[]}}}", ISOPROF_EPROFILE, "\"head\" is an array"},
    {"{\"head\":" HN(1, HN(1, "")) ",\"samples\":[]}", ISOPROF_EPROFILE, "duplicate node id 1"},
    {"{\"head\":" HN(1, "") ",\"samples\":[{\"size\":1}]}", ISOPROF_EPROFILE, "needs \"nodeId\""},
    {"{\"head\":" HN(1, "") ",\"samples\":[{\"size\":-1,\"nodeId\":1}]}", ISOPROF_EPROFILE,
     "\"size\" is -1"},
    {"{\"head\":" HN(1, "1") "}", ISOPROF_EPROFILE, "element of \"children\" is a number"},
    {"{\"head\":{\"id\":1,\"children\":[]}}", ISOPROF_EPROFILE, "no \"callFrame\""},
    {"{\"head\":{\"callFrame\":{},\"children\":[]}}", ISOPROF_EPROFILE, "no \"id\""},
    {"{\"head\":{\"callFrame\":{},\"id\":1,\"selfSize\":\"big\"}}", ISOPROF_EPROFILE,
     "\"selfSize\" is a string"},
    {"{\"head\":" HN(1, "") ",\"samples\":{}}", ISOPROF_EPROFILE, "\"samples\" is an object"},
    {"{\"id\":1,\"error\":{\"code\":-32000,\"message\":\"V8 sampling heap profiler was not "
     "started.\"}}",
     ISOPROF_ECDP, "was not started"},
};

TEST(heap_hostile)
{
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(bad_heap); i++) {
        const struct bad *b = &bad_heap[i];
        struct pprof_result r;
        char *why = NULL;
        int rc = pprof_from_heap_json(b->json, strlen(b->json), NULL, &r, &why);
        if (rc != b->err || why == NULL || strstr(why, b->why) == NULL) {
            fprintf(stderr, "case %zu %s: got %s \"%s\", want %s \"%s\"\n", i, b->json,
                    isoprof_errname(rc), why ? why : "(null)", isoprof_errname(b->err), b->why);
            test_failed_ = 1;
        }
        isoprof_free(why);
    }
    /* node cap */
    const char *json = "{\"head\":" HN(1, HN(2, "") "," HN(3, "")) "}";
    struct pprof_heap_opts o = {.max_nodes = 2};
    struct pprof_result r;
    CHECK_EQ_INT(pprof_from_heap_json(json, strlen(json), &o, &r, NULL), ISOPROF_EPROFILE);
    o.max_nodes = 3;
    CHECK_EQ_INT(pprof_from_heap_json(json, strlen(json), &o, &r, NULL), 0);
    pprof_buf_free(&r.pprof);
}

/* Node 20's sampling heap profiler in a worker thread once named a node
 * its tree did not hold: that sample is left out and counted, the others
 * kept. */
TEST(heap_orphan_samples)
{
    const char *json = "{\"head\":" HN(1, HN(2, "")) ",\"samples\":[{\"size\":100,\"nodeId\":2,"
                       "\"ordinal\":1},{\"size\":7,\"nodeId\":25,\"ordinal\":2},{\"size\":50,"
                       "\"nodeId\":2,\"ordinal\":3}]}";
    struct pprof_result r;
    char *why = NULL;
    REQUIRE(pprof_from_heap_json(json, strlen(json), NULL, &r, &why) == 0);
    CHECK(why == NULL);
    CHECK_EQ_INT(r.orphans, 1);
    CHECK_EQ_INT(r.samples, 2);
    Profile *p = decode(&r.pprof);
    REQUIRE(p != NULL && p->n_sample == 1);
    CHECK_EQ_INT(p->sample[0]->value[0], 2);
    CHECK_EQ_INT(p->sample[0]->value[1], 150);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
}

/* Older V8 sent no samples[]: selfSize is all there is. */
TEST(heap_self_size_only)
{
    const char *json =
        "{\"head\":{\"callFrame\":{\"functionName\":\"(root)\"},\"selfSize\":0,\"id\":1,"
        "\"children\":[{\"callFrame\":{\"functionName\":\"a\",\"url\":\"file:///x.js\","
        "\"lineNumber\":4},\"selfSize\":4096,\"id\":2,\"children\":[]}]}}";
    struct pprof_result r;
    REQUIRE(pprof_from_heap_json(json, strlen(json), NULL, &r, NULL) == 0);
    Profile *p = decode(&r.pprof);
    REQUIRE(p != NULL && p->n_sample == 1);
    CHECK_EQ_INT(p->sample[0]->value[0], 0);
    CHECK_EQ_INT(p->sample[0]->value[1], 4096);
    const Function *f = func_by_name(p, "a");
    REQUIRE(f != NULL);
    CHECK_STR(pstr(p, f->filename), "/x.js");
    CHECK_EQ_INT(f->start_line, 5);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
}

TEST(bad_args)
{
    struct pprof_result r;
    CHECK_EQ_INT(pprof_from_cpu_json(NULL, 5, NULL, &r, NULL), -EINVAL);
    CHECK_EQ_INT(pprof_from_cpu_json("{}", 2, NULL, NULL, NULL), -EINVAL);
    CHECK_EQ_INT(pprof_from_heap_json(NULL, 5, NULL, &r, NULL), -EINVAL);
}

int main(void)
{
    RUN(cpu_node20);
    RUN(cpu_deno);
    RUN(cpu_workerd);
    RUN(cpu_bare_profile);
    RUN(cpu_rules);
    RUN(cpu_stack_order);
    RUN(cpu_utf8_replaced);
    RUN(cpu_more_hits_than_samples);
    RUN(cpu_orphan_samples);
    RUN(cpu_long_string_cut);
    RUN(cpu_hostile);
    RUN(cpu_node_cap);
    RUN(cpu_deep_nesting);
    RUN(cpu_long_chain);
    RUN(cpu_output_cap);
    RUN(merge_keeps_cut_stacks);
    RUN(heap_node20);
    RUN(heap_deno);
    RUN(heap_workerd);
    RUN(heap_deep_ok);
    RUN(heap_too_deep);
    RUN(heap_hostile);
    RUN(heap_orphan_samples);
    RUN(heap_self_size_only);
    RUN(cpu_mapper);
    RUN(heap_mapper);
    RUN(bad_args);
    TEST_EXIT();
}

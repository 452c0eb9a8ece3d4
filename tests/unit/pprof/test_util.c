/*
 * test_util.c - pprof_merge, pprof_top, pprof_gzip/pprof_gunzip.
 */
#include "../test.h"
#include "common.h"

static int cpu(const char *json, int64_t wmm, struct pprof_buf *out)
{
    struct pprof_cpu_opts o = {.wall_minus_mono_ns = wmm, .interval_ns = 1000000};
    struct pprof_result r;
    int rc = pprof_from_cpu_json(json, strlen(json), &o, &r, NULL);
    if (rc == 0)
        *out = r.pprof;
    return rc;
}

static int fixture_cpu(const char *name, int64_t wmm, struct pprof_buf *out)
{
    size_t len;
    char *json = read_fixture(name, &len);
    if (json == NULL)
        return -ENOENT;
    int rc = cpu(json, wmm, out);
    isoprof_free(json);
    return rc;
}

static int fixture_heap(const char *name, struct pprof_buf *out)
{
    size_t len;
    char *json = read_fixture(name, &len);
    if (json == NULL)
        return -ENOENT;
    struct pprof_heap_opts o = {.time_ns = 1, .interval_bytes = 65536};
    struct pprof_result r;
    int rc = pprof_from_heap_json(json, len, &o, &r, NULL);
    if (rc == 0)
        *out = r.pprof;
    isoprof_free(json);
    return rc;
}

/* The value of the sample whose stack is exactly names[] (leaf first). */
static int64_t stack_value(const Profile *p, const char *const *names, size_t n, size_t vi)
{
    for (size_t i = 0; i < p->n_sample; i++) {
        const Sample *s = p->sample[i];
        if (s->n_location_id != n)
            continue;
        size_t j = 0;
        while (j < n && strcmp(frame_name(p, s, j), names[j]) == 0)
            j++;
        if (j == n)
            return s->value[vi];
    }
    return -1;
}

#define CF(name)                                                                                   \
    "{\"functionName\":\"" name "\",\"url\":\"m.js\",\"lineNumber\":1,\"columnNumber\":0}"

/* Two windows with different node ids and string order but shared stacks. */
static const char *win_a =
    "{\"startTime\":1000,\"endTime\":2000,\"nodes\":["
    "{\"id\":1,\"callFrame\":" CF("(root)") ",\"children\":[2]},"
                                            "{\"id\":2,\"callFrame\":" CF(
                                                "main") ",\"hitCount\":1,\"children\":[3,4]},"
                                                        "{\"id\":3,\"callFrame\":" CF(
                                                            "a") ",\"hitCount\":2},"
                                                                 "{\"id\":4,\"callFrame\":" CF(
                                                                     "b") ",\"hitCount\":3}]}";
static const char *win_b =
    "{\"startTime\":5000,\"endTime\":7000,\"nodes\":["
    "{\"id\":10,\"callFrame\":" CF("(root)") ",\"children\":[30]},"
                                             "{\"id\":30,\"callFrame\":" CF(
                                                 "main") ",\"children\":[44,45]},"
                                                         "{\"id\":45,\"callFrame\":" CF(
                                                             "c") ",\"hitCount\":7},"
                                                                  "{\"id\":44,\"callFrame\":" CF(
                                                                      "b") ",\"hitCount\":10}]}";

TEST(merge_sums_identical_stacks)
{
    struct pprof_buf in[2] = {{0}}, out = {0};
    REQUIRE(cpu(win_a, 0, &in[0]) == 0);
    REQUIRE(cpu(win_b, 0, &in[1]) == 0);
    char *why = NULL;
    REQUIRE(pprof_merge(in, 2, &out, &why) == 0);
    Profile *p = decode(&out);
    REQUIRE(p != NULL);
    const char *mb[] = {"b", "main"}, *ma[] = {"a", "main"}, *mc[] = {"c", "main"}, *m[] = {"main"};
    CHECK_EQ_INT(p->n_sample, 4);
    CHECK_EQ_INT(stack_value(p, mb, 2, 0), 13);
    CHECK_EQ_INT(stack_value(p, mb, 2, 1), 13000000);
    CHECK_EQ_INT(stack_value(p, ma, 2, 0), 2);
    CHECK_EQ_INT(stack_value(p, mc, 2, 0), 7);
    CHECK_EQ_INT(stack_value(p, m, 1, 0), 1);
    CHECK_EQ_INT(p->n_function, 4);
    CHECK_EQ_INT(p->time_nanos, 1000 * 1000);
    CHECK_EQ_INT(p->duration_nanos, (7000 - 1000) * 1000);
    CHECK_EQ_INT(p->period, 1000000);
    CHECK_STR(pstr(p, p->sample_type[1]->type), "cpu");
    CHECK_STR(pstr(p, p->period_type->unit), "nanoseconds");
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&out);
    pprof_buf_free(&in[0]);
    pprof_buf_free(&in[1]);
}

TEST(merge_fixture_with_itself)
{
    struct pprof_buf in[2] = {{0}}, out = {0};
    const int64_t sec = 1000000000;
    REQUIRE(fixture_cpu("node20-cpu.json", 100 * sec, &in[0]) == 0);
    REQUIRE(fixture_cpu("node20-cpu.json", 110 * sec, &in[1]) == 0);
    REQUIRE(pprof_merge(in, 2, &out, NULL) == 0);
    Profile *a = decode(&in[0]), *p = decode(&out);
    REQUIRE(a != NULL && p != NULL);
    CHECK_EQ_INT(p->n_sample, a->n_sample);
    CHECK_EQ_INT(value_sum(p, 0), 2 * value_sum(a, 0));
    CHECK_EQ_INT(value_sum(p, 1), 2 * value_sum(a, 1));
    CHECK_EQ_INT(p->time_nanos, a->time_nanos);
    CHECK_EQ_INT(p->duration_nanos, a->duration_nanos + 10 * sec);
    perftools__profiles__profile__free_unpacked(a, NULL);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&out);

    /* one input: the same profile back (strings may be in another order) */
    REQUIRE(pprof_merge(in, 1, &out, NULL) == 0);
    a = decode(&in[0]);
    p = decode(&out);
    REQUIRE(a != NULL && p != NULL);
    CHECK_EQ_INT(p->n_sample, a->n_sample);
    CHECK_EQ_INT(p->n_location, a->n_location);
    CHECK_EQ_INT(p->n_function, a->n_function);
    CHECK_EQ_INT(value_sum(p, 1), value_sum(a, 1));
    CHECK_EQ_INT(p->time_nanos, a->time_nanos);
    CHECK_EQ_INT(p->duration_nanos, a->duration_nanos);
    perftools__profiles__profile__free_unpacked(a, NULL);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&out);
    pprof_buf_free(&in[0]);
    pprof_buf_free(&in[1]);
}

TEST(merge_rejects)
{
    struct pprof_buf in[2] = {{0}}, out = {(uint8_t *)1, 3};
    REQUIRE(fixture_cpu("deno-cpu.json", 0, &in[0]) == 0);
    REQUIRE(fixture_heap("deno-heap.json", &in[1]) == 0);
    char *why = NULL;
    CHECK_EQ_INT(pprof_merge(in, 2, &out, &why), ISOPROF_EPROFILE);
    CHECK(why && strstr(why, "sample types differ"));
    isoprof_free(why);
    why = NULL;
    CHECK(out.data == (uint8_t *)1);
    CHECK_EQ_INT(pprof_merge(in, 0, &out, NULL), -EINVAL);
    CHECK_EQ_INT(pprof_merge(NULL, 1, &out, NULL), -EINVAL);

    uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    struct pprof_buf j = {junk, sizeof(junk)};
    CHECK_EQ_INT(pprof_merge(&j, 1, &out, &why), ISOPROF_EPROTOBUF);
    isoprof_free(why);

    /* a location naming a function that is not there */
    Perftools__Profiles__Profile p = PERFTOOLS__PROFILES__PROFILE__INIT;
    Perftools__Profiles__ValueType vt = PERFTOOLS__PROFILES__VALUE_TYPE__INIT;
    Perftools__Profiles__Location loc = PERFTOOLS__PROFILES__LOCATION__INIT;
    Perftools__Profiles__Line line = PERFTOOLS__PROFILES__LINE__INIT;
    char *strings[] = {"", "samples", "count"};
    Perftools__Profiles__ValueType *vts[] = {&vt};
    Perftools__Profiles__Location *locs[] = {&loc};
    Perftools__Profiles__Line *lines[] = {&line};
    vt.type = 1;
    vt.unit = 2;
    loc.id = 1;
    loc.n_line = 1;
    loc.line = lines;
    line.function_id = 9;
    p.n_sample_type = 1;
    p.sample_type = vts;
    p.n_location = 1;
    p.location = locs;
    p.n_string_table = 3;
    p.string_table = strings;
    uint8_t buf[256];
    size_t n = perftools__profiles__profile__pack(&p, buf);
    struct pprof_buf bad = {buf, n};
    why = NULL;
    CHECK_EQ_INT(pprof_merge(&bad, 1, &out, &why), ISOPROF_EPROFILE);
    CHECK(why && strstr(why, "unknown function 9"));
    isoprof_free(why);
    struct pprof_top t;
    CHECK_EQ_INT(pprof_top(&bad, -1, &t), ISOPROF_EPROFILE);
    /* a bad string index */
    line.function_id = 0;
    vt.unit = 7;
    n = perftools__profiles__profile__pack(&p, buf);
    bad.len = n;
    why = NULL;
    CHECK_EQ_INT(pprof_merge(&bad, 1, &out, &why), ISOPROF_EPROFILE);
    CHECK(why && strstr(why, "bad string index"));
    isoprof_free(why);
    pprof_buf_free(&in[0]);
    pprof_buf_free(&in[1]);
}

static const struct pprof_top_row *row(const struct pprof_top *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->rows[i].name, name) == 0)
            return &t->rows[i];
    return NULL;
}

/* Recursion counts once per sample in cum. */
TEST(top_recursion)
{
    const char *json = "{\"startTime\":0,\"endTime\":10,\"nodes\":["
                       "{\"id\":1,\"callFrame\":" CF(
                           "(root)") ",\"children\":[2]},"
                                     "{\"id\":2,\"callFrame\":" CF(
                                         "a") ",\"hitCount\":1,\"children\":[3]},"
                                              "{\"id\":3,\"callFrame\":" CF(
                                                  "b") ",\"children\":[4]},"
                                                       "{\"id\":4,\"callFrame\":" CF(
                                                           "a") ",\"children\":[5]},"
                                                                "{\"id\":5,\"callFrame\":" CF(
                                                                    "b") ",\"hitCount\":5}]}";
    struct pprof_buf b = {0};
    REQUIRE(cpu(json, 0, &b) == 0);
    struct pprof_top t;
    REQUIRE(pprof_top(&b, 0, &t) == 0);
    CHECK_EQ_INT(t.total, 6);
    CHECK_STR(t.type, "samples");
    CHECK_STR(t.unit, "count");
    REQUIRE(t.n == 2);
    CHECK_STR(t.rows[0].name, "b");
    CHECK_EQ_INT(t.rows[0].flat, 5);
    CHECK_EQ_INT(t.rows[0].cum, 5);
    CHECK_STR(t.rows[1].name, "a");
    CHECK_EQ_INT(t.rows[1].flat, 1);
    CHECK_EQ_INT(t.rows[1].cum, 6);
    CHECK_STR(t.rows[1].file, "m.js");
    CHECK_EQ_INT(t.rows[1].line, 2);
    pprof_top_free(&t);
    REQUIRE(pprof_top(&b, -1, &t) == 0);
    CHECK_STR(t.type, "cpu");
    CHECK_STR(t.unit, "nanoseconds");
    CHECK_EQ_INT(t.total, 6000000);
    pprof_top_free(&t);
    CHECK_EQ_INT(pprof_top(&b, 2, &t), -EINVAL);
    CHECK_EQ_INT(pprof_top(NULL, 0, &t), -EINVAL);
    pprof_buf_free(&b);
}

TEST(top_fixture)
{
    struct pprof_buf b = {0};
    REQUIRE(fixture_cpu("workerd-cpu.json", 0, &b) == 0);
    struct pprof_top t;
    REQUIRE(pprof_top(&b, -1, &t) == 0);
    Profile *p = decode(&b);
    REQUIRE(p != NULL);
    CHECK_EQ_INT(t.total, value_sum(p, 1));
    for (size_t i = 1; i < t.n; i++)
        CHECK(t.rows[i - 1].flat >= t.rows[i].flat);
    int64_t flat = 0;
    for (size_t i = 0; i < t.n; i++) {
        flat += t.rows[i].flat;
        CHECK(t.rows[i].cum >= t.rows[i].flat);
        CHECK(t.rows[i].cum <= t.total);
    }
    CHECK_EQ_INT(flat, t.total);
    const struct pprof_top_row *hot = row(&t, "hotLoop"), *fetch = row(&t, "fetch");
    REQUIRE(hot != NULL && fetch != NULL);
    CHECK_STR(hot->file, "worker.js");
    CHECK_EQ_INT(hot->line, 3);
    CHECK(fetch->cum >= hot->cum);
    CHECK(hot->flat > t.total / 2);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_top_free(&t);
    pprof_buf_free(&b);
    uint8_t junk[] = {0x0a, 0xff};
    struct pprof_buf j = {junk, sizeof(junk)};
    CHECK_EQ_INT(pprof_top(&j, -1, &t), ISOPROF_EPROTOBUF);
}

TEST(gzip_roundtrip)
{
    size_t sizes[] = {0, 1, 1000, 3 << 20};
    for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(sizes); k++) {
        size_t n = sizes[k];
        uint8_t *in = isoprof_malloc(n + 1);
        REQUIRE(in != NULL);
        uint32_t x = 12345;
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245 + 12345;
            in[i] = (uint8_t)(i % 3 ? x >> 24 : 'a'); /* partly compressible */
        }
        struct pprof_buf gz = {0}, back = {0};
        REQUIRE(pprof_gzip(in, n, &gz) == 0);
        CHECK(gz.len >= 18 && gz.data[0] == 0x1f && gz.data[1] == 0x8b);
        CHECK_EQ_INT(pprof_gunzip(gz.data, gz.len, n, &back), 0);
        CHECK(back.len == n && (n == 0 || memcmp(back.data, in, n) == 0));
        pprof_buf_free(&back);
        if (n > 0) {
            CHECK_EQ_INT(pprof_gunzip(gz.data, gz.len, n - 1, &back), ISOPROF_ETOOBIG);
            CHECK_EQ_INT(pprof_gunzip(gz.data, gz.len - 1, n, &back), ISOPROF_ECORRUPT);
            CHECK_EQ_INT(pprof_gunzip(gz.data, gz.len / 2, n, &back), ISOPROF_ECORRUPT);
        }
        /* bytes after the member */
        uint8_t *more = isoprof_malloc(gz.len + 1);
        REQUIRE(more != NULL);
        memcpy(more, gz.data, gz.len);
        more[gz.len] = 0;
        CHECK_EQ_INT(pprof_gunzip(more, gz.len + 1, n + 10, &back), ISOPROF_ECORRUPT);
        /* a flipped bit in the payload or the CRC */
        more[gz.len - 6] ^= 0x40;
        CHECK_EQ_INT(pprof_gunzip(more, gz.len, n + 10, &back), ISOPROF_ECORRUPT);
        isoprof_free(more);
        pprof_buf_free(&gz);
        isoprof_free(in);
    }
    struct pprof_buf out;
    CHECK_EQ_INT(pprof_gunzip("plain text", 10, 100, &out), ISOPROF_ECORRUPT);
    CHECK_EQ_INT(pprof_gunzip("", 0, 100, &out), ISOPROF_ECORRUPT);
    CHECK_EQ_INT(pprof_gzip(NULL, 5, &out), -EINVAL);
    CHECK_EQ_INT(pprof_gunzip(NULL, 5, 10, &out), -EINVAL);
}

/* A pprof we wrote, gzip'd and inflated, decodes to the same profile. */
TEST(gzip_profile)
{
    struct pprof_buf b = {0}, gz = {0}, back = {0};
    REQUIRE(fixture_cpu("node20-cpu.json", 0, &b) == 0);
    REQUIRE(pprof_gzip(b.data, b.len, &gz) == 0);
    CHECK(gz.len < b.len);
    REQUIRE(pprof_gunzip(gz.data, gz.len, 64 << 20, &back) == 0);
    CHECK(back.len == b.len && memcmp(back.data, b.data, b.len) == 0);
    pprof_buf_free(&b);
    pprof_buf_free(&gz);
    pprof_buf_free(&back);
    pprof_buf_free(NULL);
    pprof_top_free(NULL);
}

int main(void)
{
    RUN(merge_sums_identical_stacks);
    RUN(merge_fixture_with_itself);
    RUN(merge_rejects);
    RUN(top_recursion);
    RUN(top_fixture);
    RUN(gzip_roundtrip);
    RUN(gzip_profile);
    TEST_EXIT();
}

/*
 * test_push.c - the Push request body (uploader/push.c): the exact bytes
 * of a small request, worked out by hand from the field numbers of
 * PROTOCOLS.md section 3; a batch read back with the generated decoder;
 * and every label rule that keeps a request the server would refuse from
 * being sent.
 */
#include "base.h"
#include "push.h"
#include "push.pb-c.h"
#include "test.h"
#include "types.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

TEST(exact_bytes)
{
    struct push_label l[] = {{"__name__", "m"}};
    struct push_profile p = {l, 1, "ab", 2, "x"};
    uint8_t *out = NULL;
    size_t len = 0;
    REQUIRE(push_encode(&p, 1, &out, &len, NULL) == 0);
    static const uint8_t want[] = {
        0x0a, 0x18,                                     /* PushRequest.series (1), 24 bytes */
        0x0a, 0x0d,                                     /* RawProfileSeries.labels (1), 13 */
        0x0a, 0x08, '_', '_', 'n', 'a', 'm', 'e', '_', '_', /* LabelPair.name (1) */
        0x12, 0x01, 'm',                                /* LabelPair.value (2) */
        0x12, 0x07,                                     /* RawProfileSeries.samples (2), 7 */
        0x0a, 0x02, 'a', 'b',                           /* RawSample.raw_profile (1) */
        0x12, 0x01, 'x',                                /* RawSample.ID (2) */
    };
    CHECK_EQ_INT(len, sizeof(want));
    CHECK(len == sizeof(want) && memcmp(out, want, len) == 0);
    isoprof_free(out);
}

TEST(batch_round_trip)
{
    struct push_label a[] = {{"__name__", "process_cpu"}, {"service_name", "checkout"},
                             {"version", "v42"},          {"anomaly", "oom_suspected"}};
    struct push_label b[] = {{"__name__", "memory"}, {"service_name", "édition-✓"},
                             {"__delta__", "false"}};
    uint8_t big[70000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 7);
    struct push_profile p[] = {
        {a, 4, big, sizeof(big), "031da905-7c82-88b3-8000-000000000001"},
        {b, 3, "\x1f\x8b", 2, "031da905-7c82-88b3-8000-000000000002"},
    };
    uint8_t *out = NULL;
    size_t len = 0;
    REQUIRE(push_encode(p, 2, &out, &len, NULL) == 0);
    Push__V1__PushRequest *r = push__v1__push_request__unpack(NULL, len, out);
    REQUIRE(r != NULL);
    REQUIRE(r->n_series == 2);
    for (size_t i = 0; i < 2; i++) {
        const Push__V1__RawProfileSeries *s = r->series[i];
        REQUIRE(s->n_labels == p[i].nlabels);
        for (size_t j = 0; j < s->n_labels; j++) {
            CHECK_STR(s->labels[j]->name, p[i].labels[j].name);
            CHECK_STR(s->labels[j]->value, p[i].labels[j].value);
        }
        REQUIRE(s->n_samples == 1);
        CHECK_STR(s->samples[0]->id, p[i].id);
        CHECK_EQ_INT(s->samples[0]->raw_profile.len, p[i].len);
        CHECK(memcmp(s->samples[0]->raw_profile.data, p[i].raw, p[i].len) == 0);
    }
    push__v1__push_request__free_unpacked(r, NULL);
    isoprof_free(out);
}

TEST(label_rules)
{
    char long_name[PUSH_MAX_NAME + 2], long_value[PUSH_MAX_VALUE + 2];
    memset(long_name, 'n', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    memset(long_value, 'v', sizeof(long_value) - 1);
    long_value[sizeof(long_value) - 1] = '\0';
    static const struct {
        const char *k, *v;
        int ok;
    } one[] = {
        {"service_name", "x", 1},
        {"service_name", "", 1},              /* an empty value is a value */
        {"", "x", 0},                         /* an empty name */
        {"__name__", "y", 0},                 /* twice */
        {"s", "\xc0\x80", 0},                 /* overlong NUL */
        {"s", "\xed\xa0\x80", 0},             /* a surrogate */
        {"s", "\xf4\x90\x80\x80", 0},         /* past U+10FFFF */
        {"s", "\xf5\x80\x80\x80", 0},         /* not a lead byte */
        {"s", "\xe2\x9c", 0},                 /* truncated */
        {"s", "\xf0\x9f\x94\xa5 \xe2\x9c\x93", 1}, /* four- and three-byte forms */
    };
    for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
        struct push_label l[] = {{"__name__", "memory"}, {one[i].k, one[i].v}};
        size_t bad = 99;
        int rc = push_label_check(l, 2, &bad);
        if (rc != (one[i].ok ? 0 : -EINVAL))
            fprintf(stderr, "case %zu: rc %d\n", i, rc);
        CHECK_EQ_INT(rc, one[i].ok ? 0 : -EINVAL);
        if (!one[i].ok)
            CHECK_EQ_INT(bad, 1);
    }
    /* lengths: exactly at the limit is fine, one byte over is not */
    struct push_label l[] = {{"__name__", "memory"}, {long_name + 1, long_value + 1}};
    CHECK_EQ_INT(push_label_check(l, 2, NULL), 0);
    /* a character that would end past the limit does not fit */
    char edge[PUSH_MAX_VALUE + 2];
    memset(edge, 'v', PUSH_MAX_VALUE - 1);
    memcpy(edge + PUSH_MAX_VALUE - 1, "\xc3\xa9", 3); /* 2 bytes from MAX-1: one over */
    l[1].value = edge;
    CHECK_EQ_INT(push_label_check(l, 2, NULL), -EINVAL);
    memcpy(edge + PUSH_MAX_VALUE - 2, "\xc3\xa9", 3); /* ends at MAX exactly */
    CHECK_EQ_INT(push_label_check(l, 2, NULL), 0);
    l[1].value = long_value + 1;
    l[1].name = long_name;
    CHECK_EQ_INT(push_label_check(l, 2, NULL), -EINVAL);
    l[1].name = "k";
    l[1].value = long_value;
    CHECK_EQ_INT(push_label_check(l, 2, NULL), -EINVAL);
    /* __name__ required, and not empty */
    struct push_label noname[] = {{"service_name", "x"}};
    size_t bad = 0;
    CHECK_EQ_INT(push_label_check(noname, 1, &bad), -EINVAL);
    CHECK_EQ_INT(bad, 1);
    struct push_label empty[] = {{"__name__", ""}};
    CHECK_EQ_INT(push_label_check(empty, 1, NULL), -EINVAL);
    /* 30 labels, not 31 */
    struct push_label many[PUSH_MAX_LABELS + 1];
    char names[PUSH_MAX_LABELS + 1][8];
    many[0] = (struct push_label){"__name__", "memory"};
    for (size_t i = 1; i <= PUSH_MAX_LABELS; i++) {
        snprintf(names[i], sizeof(names[i]), "l%zu", i);
        many[i] = (struct push_label){names[i], "v"};
    }
    CHECK_EQ_INT(push_label_check(many, PUSH_MAX_LABELS, NULL), 0);
    CHECK_EQ_INT(push_label_check(many, PUSH_MAX_LABELS + 1, NULL), -EINVAL);
}

TEST(encode_refusals)
{
    struct push_label good[] = {{"__name__", "memory"}};
    struct push_label bad[] = {{"service_name", "x"}};
    struct push_profile p[] = {{good, 1, "a", 1, "id-1"}, {bad, 1, "b", 1, "id-2"}};
    uint8_t *out = (uint8_t *)"untouched";
    size_t len = 7, which = 99;
    CHECK_EQ_INT(push_encode(p, 2, &out, &len, &which), -EINVAL);
    CHECK_EQ_INT(which, 1);
    CHECK_EQ_INT(len, 7);
    CHECK_EQ_INT(push_encode(p, 0, &out, &len, NULL), -EINVAL); /* the server says 400 */
    p[1].labels = good;
    p[1].id = NULL;
    CHECK_EQ_INT(push_encode(p, 2, &out, &len, &which), -EINVAL);
    CHECK_EQ_INT(which, 1);
    p[1].id = "id-2";
    p[1].raw = NULL;
    CHECK_EQ_INT(push_encode(p, 2, &out, &len, NULL), -EINVAL);
    p[1].len = 0; /* an empty profile is encodable (the server judges it) */
    REQUIRE(push_encode(p, 2, &out, &len, NULL) == 0);
    isoprof_free(out);
}

int main(void)
{
    RUN(exact_bytes);
    RUN(batch_round_trip);
    RUN(label_rules);
    RUN(encode_refusals);
    TEST_EXIT();
}

/* Unit tests for the source-map parser (srcmap.h): base64 VLQ values,
 * hand-written maps looked up position by position, generated maps of many
 * segments checked at every segment against a decoder of the test's own
 * (this is what tests the checkpoint index), every reason a map is refused,
 * the same maps fed in chunks, sources rebased onto a directory, the
 * memory cap, and every allocation of a parse failing in turn. */
#include "../test.h"
#include "base.h"
#include "srcmap.h"

#include <errno.h>
#include <stdbool.h>

/* --- helpers --- */

/* Parses the C string json with no cap; a refusal fails the test. */
static struct srcmap *parse_(const char *json, int at)
{
    struct srcmap *m = NULL;
    char *why = NULL;
    int rc = srcmap_parse(json, strlen(json), 0, &m, &why);
    if (rc != SRCMAP_OK || m == NULL) {
        fprintf(stderr, "%s:%d: map refused: %s: %s\n", __FILE__, at, srcmap_reason(rc),
                why ? why : "(no why)");
        test_failed_ = 1;
    }
    isoprof_free(why);
    return m;
}
#define PARSE(json) parse_((json), __LINE__)

/* Feeds json[0..n) in chunks of `chunk` bytes (an empty feed between
 * each two), then finishes. */
static int parse_chunked(const char *json, size_t n, size_t chunk, size_t max, struct srcmap **out,
                         char **why)
{
    struct srcmap_parser *p;
    *out = NULL;
    *why = NULL;
    if (srcmap_parser_new(max, &p) != 0)
        return SRCMAP_E_NOMEM;
    for (size_t off = 0; off < n; off += chunk) {
        size_t k = n - off < chunk ? n - off : chunk;
        if (srcmap_parser_feed(p, json + off, k) != SRCMAP_OK)
            break;
        srcmap_parser_feed(p, json + off, 0);
    }
    int rc = srcmap_parser_finish(p, out, why);
    srcmap_parser_free(p);
    return rc;
}

/* The map must be refused for `reason`, whole and fed a byte at a time,
 * with a why that contains needle. */
static void refused_(const char *json, size_t max, int reason, const char *needle, int at)
{
    for (int pass = 0; pass < 2; pass++) {
        struct srcmap *m = NULL;
        char *why = NULL;
        int rc = pass == 0 ? srcmap_parse(json, strlen(json), max, &m, &why)
                           : parse_chunked(json, strlen(json), 1, max, &m, &why);
        if (rc != reason || m != NULL || why == NULL || strstr(why, needle) == NULL) {
            fprintf(stderr, "%s:%d: %s: want %s with \"%s\", got %s (m %s) \"%s\"\n", __FILE__, at,
                    pass ? "fed by bytes" : "whole", srcmap_reason(reason), needle,
                    srcmap_reason(rc), m ? "set" : "NULL", why ? why : "(no why)");
            test_failed_ = 1;
        }
        srcmap_free(m);
        isoprof_free(why);
    }
}
#define REFUSED(json, reason, needle) refused_((json), 0, (reason), (needle), __LINE__)

static void expect_at_(const struct srcmap *m, uint32_t line, uint32_t col, const char *src,
                       uint32_t oline, uint32_t ocol, const char *name, uint32_t gcol, int at)
{
    struct srcmap_pos p;
    memset(&p, 0, sizeof(p));
    if (!srcmap_lookup(m, line, col, &p)) {
        fprintf(stderr, "%s:%d: lookup %u:%u found nothing, want %s:%u:%u\n", __FILE__, at, line,
                col, src, oline, ocol);
        test_failed_ = 1;
        return;
    }
    if (p.source == NULL || strcmp(p.source, src) != 0 || p.line != oline || p.column != ocol ||
        p.gen_column != gcol || (name == NULL) != (p.name == NULL) ||
        (name != NULL && strcmp(name, p.name) != 0)) {
        fprintf(stderr,
                "%s:%d: lookup %u:%u = %s:%u:%u name %s gen %u, want %s:%u:%u name %s gen %u\n",
                __FILE__, at, line, col, p.source ? p.source : "(null)", p.line, p.column,
                p.name ? p.name : "(null)", p.gen_column, src, oline, ocol, name ? name : "(null)",
                gcol);
        test_failed_ = 1;
    }
}
#define EXPECT_AT(m, l, c, src, ol, oc, name, gc)                                                  \
    expect_at_((m), (l), (c), (src), (ol), (oc), (name), (gc), __LINE__)

static void expect_none_(const struct srcmap *m, uint32_t line, uint32_t col, int at)
{
    struct srcmap_pos p;
    if (srcmap_lookup(m, line, col, &p)) {
        fprintf(stderr, "%s:%d: lookup %u:%u found %s:%u:%u, want nothing\n", __FILE__, at, line,
                col, p.source, p.line, p.column);
        test_failed_ = 1;
    }
}
#define EXPECT_NONE(m, l, c) expect_none_((m), (l), (c), __LINE__)

/* The test's own base64 VLQ encoder: appends v to b. */
static void enc_vlq(struct isoprof_buf *b, int32_t v)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint32_t x = v < 0 ? ((uint32_t)(-(int64_t)v) << 1) | 1 : (uint32_t)v << 1;
    do {
        unsigned d = x & 31;
        x >>= 5;
        if (x)
            d |= 32;
        isoprof_buf_putc(b, abc[d]);
    } while (x);
}

/* --- VLQ --- */

TEST(vlq_known)
{
    /* Each value worked out by hand: six bits a digit, bit 5 continues,
     * five bits of data little end first, bit 0 of the whole the sign. */
    static const struct {
        const char *s;
        int32_t v;
    } t[] = {
        {"A", 0},
        {"B", 0} /* "-0" */,
        {"C", 1},
        {"D", -1},
        {"E", 2},
        {"F", -2},
        {"e", 15},
        {"f", -15},
        {"gB", 16},
        {"hB", -16},
        {"2H", 123},
        {"3H", -123},
        {"qxmvrH", 123456789},
        {"ggggggC", 1 << 30},
        {"+/////D", INT32_MAX},
        {"//////D", -INT32_MAX},
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(t); i++) {
        const char *s = t[i].s, *end = s + strlen(s);
        int32_t v = 12345;
        int rc = srcmap_vlq(&s, end, &v);
        if (rc != 0 || v != t[i].v || s != end) {
            fprintf(stderr, "%s:%d: \"%s\": rc %d value %d, want %d\n", __FILE__, __LINE__, t[i].s,
                    rc, v, t[i].v);
            test_failed_ = 1;
        }
    }
    /* one value at a time out of a run: *s moves past each */
    const char *run = "2HAgBD", *s = run, *end = run + strlen(run);
    int32_t v;
    CHECK_EQ_INT(srcmap_vlq(&s, end, &v), 0);
    CHECK_EQ_INT(v, 123);
    CHECK(s == run + 2);
    CHECK_EQ_INT(srcmap_vlq(&s, end, &v), 0);
    CHECK_EQ_INT(v, 0);
    CHECK_EQ_INT(srcmap_vlq(&s, end, &v), 0);
    CHECK_EQ_INT(v, 16);
    CHECK_EQ_INT(srcmap_vlq(&s, end, &v), 0);
    CHECK_EQ_INT(v, -1);
    CHECK(s == end);
    CHECK_EQ_INT(srcmap_vlq(&s, end, &v), SRCMAP_E_VLQ); /* nothing left */
}

TEST(vlq_bad)
{
    static const char *const bad[] = {
        "",         /* nothing */
        "g",        /* a continuation and then the end */
        "2",        /* the same, '2' is 54: continues */
        "gggggg",   /* cut after six digits */
        "!",        /* not base64 */
        "=",        /* base64 padding is not a digit */
        " A",       /* nor is a space */
        "g!",       /* a bad digit after a continuation */
        "\x80",     /* nor a high byte */
        "ggggggE",  /* 2^32: the magnitude needs more than 31 bits */
        "hgggggE",  /* -2^31 */
        "//////H",  /* bits 32..34 set */
        "gggggggA", /* an eighth digit: past 32 bits even if zero */
        "ggggggggggggggggggggggggggggA",
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(bad); i++) {
        const char *s = bad[i], *end = s + strlen(s);
        int32_t v = 7;
        int rc = srcmap_vlq(&s, end, &v);
        if (rc != SRCMAP_E_VLQ || s != bad[i]) {
            fprintf(stderr, "%s:%d: bad[%zu]: rc %d, moved %td\n", __FILE__, __LINE__, i, rc,
                    s - bad[i]);
            test_failed_ = 1;
        }
    }
    /* the end bounds the read: "2H" cut after its first digit */
    const char *s = "2H";
    int32_t v;
    CHECK_EQ_INT(srcmap_vlq(&s, s + 1, &v), SRCMAP_E_VLQ);
}

TEST(vlq_roundtrip)
{
    struct isoprof_rng r;
    isoprof_rng_seed(&r, 42);
    struct isoprof_buf b;
    isoprof_buf_init(&b, 64);
    for (int i = 0; i < 200000; i++) {
        int32_t want;
        uint64_t x = isoprof_rng_next(&r);
        switch (i % 4) {
        case 0:
            want = (int32_t)(x % 64) - 32;
            break;
        case 1:
            want = (int32_t)(x % 100000) - 50000;
            break;
        case 2:
            want = (int32_t)(uint32_t)x;
            break;
        default:
            want = INT32_MAX - (int32_t)(x % 3);
            break;
        }
        if (want == INT32_MIN)
            want = -INT32_MAX;
        if (i % 8 == 7)
            want = -want;
        isoprof_buf_reset(&b);
        enc_vlq(&b, want);
        const char *s = b.data, *end = b.data + b.len;
        int32_t v;
        if (srcmap_vlq(&s, end, &v) != 0 || v != want || s != end) {
            fprintf(stderr, "%s:%d: %d encoded \"%s\" decodes to %d\n", __FILE__, __LINE__, want,
                    b.data, v);
            test_failed_ = 1;
            break;
        }
    }
    isoprof_buf_free(&b);
}

TEST(reason_names)
{
    CHECK_STR(srcmap_reason(SRCMAP_OK), "ok");
    CHECK_STR(srcmap_reason(SRCMAP_E_VLQ), "vlq");
    CHECK_STR(srcmap_reason(SRCMAP_E_SECTIONS), "sections");
    CHECK_STR(srcmap_reason(-1), "unknown");
    CHECK_STR(srcmap_reason(SRCMAP_NREASONS), "unknown");
    for (int i = 0; i < SRCMAP_NREASONS; i++) {
        CHECK(srcmap_reason(i) != NULL && strcmp(srcmap_reason(i), "unknown") != 0);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(srcmap_reason(i), srcmap_reason(j)) != 0);
    }
}

/* --- hand-written maps --- */

/*
 * Line 0: "AAAA" col 0 -> a.ts 0:0; "IAAIA" col 4 -> a.ts 0:4 name foo;
 *         "EAAE" col 6 -> a.ts 0:6.
 * Line 1: empty.
 * Line 2: "ACCN" col 0 -> b.ts 1:0 (the original column, 6 before, is a
 *         delta across lines too: -6); "KACEC" col 5 -> b.ts 2:2 name bar.
 * Line 3: "A" col 0, one field: no source.
 * Line 4: "A" col 0, no source; "CAAA" col 1 -> b.ts 2:2.
 * Line 5: "GAAA" col 3 -> b.ts 2:2.
 */
#define BASIC_MAPPINGS "AAAA,IAAIA,EAAE;;ACCN,KACEC;A;A,CAAA;GAAA"

static void check_basic(const struct srcmap *m, int at)
{
    int before = test_failed_;
    test_failed_ = 0;
    CHECK_EQ_INT(srcmap_nsegments(m), 9);
    CHECK_EQ_INT(srcmap_nsources(m), 2);
    CHECK_EQ_INT(srcmap_nnames(m), 2);
    CHECK_STR(srcmap_source(m, 0), "a.ts");
    CHECK_STR(srcmap_source(m, 1), "b.ts");
    CHECK_STR(srcmap_source(m, 2), "");
    EXPECT_AT(m, 0, 0, "a.ts", 0, 0, NULL, 0);
    EXPECT_AT(m, 0, 3, "a.ts", 0, 0, NULL, 0); /* between two: the earlier */
    EXPECT_AT(m, 0, 4, "a.ts", 0, 4, "foo", 4);
    EXPECT_AT(m, 0, 5, "a.ts", 0, 4, "foo", 4);
    EXPECT_AT(m, 0, 6, "a.ts", 0, 6, NULL, 6); /* a 4-field segment after a named one */
    EXPECT_AT(m, 0, 100000, "a.ts", 0, 6, NULL, 6);
    EXPECT_NONE(m, 1, 0); /* an empty line */
    EXPECT_NONE(m, 1, 50);
    EXPECT_AT(m, 2, 0, "b.ts", 1, 0, NULL, 0);
    EXPECT_AT(m, 2, 4, "b.ts", 1, 0, NULL, 0);
    EXPECT_AT(m, 2, 5, "b.ts", 2, 2, "bar", 5);
    EXPECT_AT(m, 2, UINT32_MAX, "b.ts", 2, 2, "bar", 5);
    EXPECT_NONE(m, 3, 0); /* a 1-field segment */
    EXPECT_NONE(m, 3, 9);
    EXPECT_NONE(m, 4, 0);
    EXPECT_AT(m, 4, 1, "b.ts", 2, 2, NULL, 1);
    EXPECT_NONE(m, 5, 0); /* before the first segment of its line */
    EXPECT_NONE(m, 5, 2);
    EXPECT_AT(m, 5, 3, "b.ts", 2, 2, NULL, 3);
    EXPECT_NONE(m, 6, 0); /* past the last line */
    EXPECT_NONE(m, UINT32_MAX, UINT32_MAX);
    if (test_failed_)
        fprintf(stderr, "%s:%d: (the map checked above)\n", __FILE__, at);
    test_failed_ |= before;
}

TEST(parse_basic)
{
    struct srcmap *m = PARSE("{\"version\":3,\"file\":\"out.js\",\"sourceRoot\":\"\","
                             "\"sources\":[\"a.ts\",\"b.ts\"],\"names\":[\"foo\",\"bar\"],"
                             "\"mappings\":\"" BASIC_MAPPINGS "\"}");
    REQUIRE(m != NULL);
    check_basic(m, __LINE__);
    CHECK_STR(srcmap_file(m), "out.js");
    CHECK(srcmap_bytes(m) > 0 && srcmap_bytes(m) < 4096);
    srcmap_free(m);

    /* whitespace everywhere JSON allows it; no file */
    m = PARSE(" \n{ \"version\" : 3 ,\r\n\t\"sources\" : [ \"a.ts\" , \"b.ts\" ] , \"names\" : "
              "[\"foo\",\"bar\"], \"mappings\" : \"" BASIC_MAPPINGS "\" } \n");
    REQUIRE(m != NULL);
    check_basic(m, __LINE__);
    CHECK_STR(srcmap_file(m), "");
    srcmap_free(m);

    srcmap_free(NULL);
    srcmap_parser_free(NULL);
    CHECK_EQ_INT(srcmap_bytes(NULL), 0);
}

TEST(parse_any_order)
{
    /* mappings before sources and names, version last, and what is not
     * ours (sourcesContent, an ignore list, nested values holding keys
     * that are ours at the top: "sections", "version") skipped */
    struct srcmap *m =
        PARSE("{\"mappings\":\"" BASIC_MAPPINGS "\",\"x_google_ignoreList\":[1],"
              "\"sourcesContent\":[\"let a = \\\"x\\\";\\n\\u00e9\",null],"
              "\"names\":[\"foo\",\"bar\"],"
              "\"x\":{\"sections\":[{\"map\":{}}],\"version\":2,\"a\":[[[{\"b\":[true,false,null,"
              "-1.5e3]}]]]},\"file\":null,\"sources\":[\"a.ts\",\"b.ts\"],\"y\":\"version\","
              "\"version\":3}");
    REQUIRE(m != NULL);
    check_basic(m, __LINE__);
    CHECK_STR(srcmap_file(m), "");
    srcmap_free(m);

    /* a name with a NUL inside reaches C strings as '_'; UTF-8 passes */
    m = PARSE("{\"version\":3,\"sources\":[\"\\u00e9.ts\"],\"names\":[\"a\\u0000b\"],"
              "\"mappings\":\"AAAAA\"}");
    REQUIRE(m != NULL);
    EXPECT_AT(m, 0, 0, "\xc3\xa9.ts", 0, 0, "a_b", 0);
    srcmap_free(m);

    /* no segment at all */
    m = PARSE("{\"version\":3,\"sources\":[],\"names\":[],\"mappings\":\"\"}");
    REQUIRE(m != NULL);
    CHECK_EQ_INT(srcmap_nsegments(m), 0);
    EXPECT_NONE(m, 0, 0);
    srcmap_free(m);
    m = PARSE("{\"version\":3,\"sources\":[],\"mappings\":\";;;,,;\"}");
    REQUIRE(m != NULL);
    CHECK_EQ_INT(srcmap_nsegments(m), 0);
    EXPECT_NONE(m, 2, 0);
    srcmap_free(m);
}

TEST(parse_source_root)
{
    static const char *const maps[] = {
        /* sourceRoot before sources, after them, and with its own '/' */
        "{\"version\":3,\"sourceRoot\":\"src\",\"sources\":[\"a.ts\",\"/abs/b.ts\","
        "\"webpack://app/c.ts\",null,\"\"],\"names\":[],\"mappings\":\"AAAA,CCAA,CCAA,CCAA\"}",
        "{\"version\":3,\"sources\":[\"a.ts\",\"/abs/b.ts\",\"webpack://app/c.ts\",null,\"\"],"
        "\"names\":[],\"mappings\":\"AAAA,CCAA,CCAA,CCAA\",\"sourceRoot\":\"src\"}",
        "{\"version\":3,\"sources\":[\"a.ts\",\"/abs/b.ts\",\"webpack://app/c.ts\",null,\"\"],"
        "\"sourceRoot\":\"src/\",\"mappings\":\"AAAA,CCAA,CCAA,CCAA\"}",
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(maps); i++) {
        struct srcmap *m = PARSE(maps[i]);
        if (m == NULL)
            continue;
        CHECK_EQ_INT(srcmap_nsources(m), 5);
        CHECK_STR(srcmap_source(m, 0), "src/a.ts");
        CHECK_STR(srcmap_source(m, 1), "/abs/b.ts");          /* absolute: kept */
        CHECK_STR(srcmap_source(m, 2), "webpack://app/c.ts"); /* a URL: kept */
        CHECK_STR(srcmap_source(m, 3), "");                   /* null */
        CHECK_STR(srcmap_source(m, 4), "");
        EXPECT_AT(m, 0, 0, "src/a.ts", 0, 0, NULL, 0);
        EXPECT_AT(m, 0, 1, "/abs/b.ts", 0, 0, NULL, 1);
        EXPECT_AT(m, 0, 2, "webpack://app/c.ts", 0, 0, NULL, 2);
        EXPECT_NONE(m, 0, 3); /* a null source names nothing */
        srcmap_free(m);
    }
    /* a null sourceRoot adds nothing */
    struct srcmap *m =
        PARSE("{\"version\":3,\"sourceRoot\":null,\"sources\":[\"a.ts\"],\"mappings\":\"AAAA\"}");
    if (m)
        CHECK_STR(srcmap_source(m, 0), "a.ts");
    srcmap_free(m);
}

TEST(columns_ties_and_order)
{
    /* two segments at one column: the later one counts */
    struct srcmap *m = PARSE("{\"version\":3,\"sources\":[\"a\",\"b\"],\"mappings\":"
                             "\"CAAA,ACAC,EAAA\"}");
    REQUIRE(m != NULL);
    EXPECT_NONE(m, 0, 0);
    EXPECT_AT(m, 0, 1, "b", 0, 1, NULL, 1);
    EXPECT_AT(m, 0, 2, "b", 0, 1, NULL, 1);
    EXPECT_AT(m, 0, 3, "b", 0, 1, NULL, 3);
    srcmap_free(m);
    /* a column may go back on its line (the spec sorts what it decodes):
     * the lookup still finds the greatest column at or before */
    m = PARSE("{\"version\":3,\"sources\":[\"a\",\"b\"],\"names\":[\"x\"],\"mappings\":"
              "\"AAAA;KAAA,HAAC,CAACA,FCAC,A,KAAA,D;UAAA,DAAA,DAAA\"}");
    REQUIRE(m != NULL);
    /* line 1, in text order: col 5 a:0:0; col 2 a:0:1; col 3 a:0:2 x;
     * col 1 b:0:3; col 1 (one field); col 6 b:0:3; col 5 (one field) */
    EXPECT_NONE(m, 1, 0);
    EXPECT_NONE(m, 1, 1); /* the later of two at column 1 has no source */
    EXPECT_AT(m, 1, 2, "a", 0, 1, NULL, 2);
    EXPECT_AT(m, 1, 3, "a", 0, 2, "x", 3);
    EXPECT_AT(m, 1, 4, "a", 0, 2, "x", 3);
    EXPECT_NONE(m, 1, 5); /* the later at 5 is the one-field one */
    EXPECT_AT(m, 1, 6, "b", 0, 3, NULL, 6);
    EXPECT_AT(m, 1, 1000, "b", 0, 3, NULL, 6);
    /* the lines around it are searched as usual */
    EXPECT_AT(m, 0, 7, "a", 0, 0, NULL, 0);
    EXPECT_NONE(m, 2, 7);
    EXPECT_AT(m, 2, 8, "b", 0, 3, NULL, 8);
    EXPECT_AT(m, 2, 9, "b", 0, 3, NULL, 9);
    EXPECT_AT(m, 2, 10, "b", 0, 3, NULL, 10);
    CHECK_EQ_INT(srcmap_nsegments(m), 11);
    srcmap_free(m);
    /* going back to 0 at a new line is what ';' does */
    m = PARSE("{\"version\":3,\"sources\":[\"a\"],\"mappings\":\"KAAA;AAAA\"}");
    CHECK(m != NULL);
    srcmap_free(m);
}

/* --- refusals --- */

#define MAP(rest) "{\"version\":3,\"sources\":[\"a.ts\"],\"names\":[\"n\"]," rest "}"

TEST(refusals)
{
    /* not JSON, or not an object */
    REFUSED("", SRCMAP_E_JSON, "");
    REFUSED("   ", SRCMAP_E_JSON, "");
    REFUSED("hello", SRCMAP_E_JSON, "JSON");
    REFUSED("{\"version\":3,", SRCMAP_E_JSON, "JSON");
    REFUSED(MAP("\"mappings\":\"AAAA\"") " x", SRCMAP_E_JSON, "JSON");
    REFUSED(MAP("\"mappings\":\"AAAA\"") "{}", SRCMAP_E_JSON, "JSON");
    REFUSED("{\"version\":3,\"sources\":[\"\xff\"],\"mappings\":\"\"}", SRCMAP_E_JSON, "JSON");
    REFUSED("[]", SRCMAP_E_JSON, "object");
    REFUSED("[{\"version\":3}]", SRCMAP_E_JSON, "object");
    REFUSED("3", SRCMAP_E_JSON, "object");
    REFUSED("\"x\"", SRCMAP_E_JSON, "object");
    REFUSED("null", SRCMAP_E_JSON, "object");

    /* the version */
    REFUSED("{\"sources\":[],\"mappings\":\"\"}", SRCMAP_E_VERSION, "version");
    REFUSED("{\"version\":2,\"sources\":[],\"mappings\":\"\"}", SRCMAP_E_VERSION, "2");
    REFUSED("{\"version\":\"3\",\"sources\":[],\"mappings\":\"\"}", SRCMAP_E_VERSION, "version");
    REFUSED("{\"version\":3.0,\"sources\":[],\"mappings\":\"\"}", SRCMAP_E_VERSION, "3.0");
    REFUSED("{\"version\":null,\"sources\":[],\"mappings\":\"\"}", SRCMAP_E_VERSION, "version");
    REFUSED("{\"version\":[3],\"sources\":[],\"mappings\":\"\"}", SRCMAP_E_VERSION, "version");

    /* fields of the wrong type, or missing */
    REFUSED("{\"version\":3,\"sources\":[]}", SRCMAP_E_FORMAT, "mappings");
    REFUSED("{\"version\":3,\"mappings\":\"\"}", SRCMAP_E_FORMAT, "sources");
    REFUSED(MAP("\"mappings\":5"), SRCMAP_E_FORMAT, "mappings");
    REFUSED(MAP("\"mappings\":null"), SRCMAP_E_FORMAT, "mappings");
    REFUSED(MAP("\"mappings\":[\"AAAA\"]"), SRCMAP_E_FORMAT, "mappings");
    REFUSED(MAP("\"mappings\":\"AAAA\",\"mappings\":\"AAAA\""), SRCMAP_E_FORMAT, "twice");
    REFUSED("{\"version\":3,\"sources\":\"a.ts\",\"mappings\":\"\"}", SRCMAP_E_FORMAT, "sources");
    REFUSED("{\"version\":3,\"sources\":{},\"mappings\":\"\"}", SRCMAP_E_FORMAT, "sources");
    REFUSED("{\"version\":3,\"sources\":null,\"mappings\":\"\"}", SRCMAP_E_FORMAT, "sources");
    REFUSED("{\"version\":3,\"sources\":[1],\"mappings\":\"\"}", SRCMAP_E_FORMAT, "sources[0]");
    REFUSED("{\"version\":3,\"sources\":[\"a\",[\"b\"]],\"mappings\":\"\"}", SRCMAP_E_FORMAT,
            "sources[1]");
    REFUSED("{\"version\":3,\"sources\":[],\"sources\":[],\"mappings\":\"\"}", SRCMAP_E_FORMAT,
            "twice");
    REFUSED("{\"version\":3,\"sources\":[],\"names\":\"n\",\"mappings\":\"\"}", SRCMAP_E_FORMAT,
            "names");
    REFUSED("{\"version\":3,\"sources\":[],\"names\":[\"a\",5],\"mappings\":\"\"}", SRCMAP_E_FORMAT,
            "names[1]");
    REFUSED("{\"version\":3,\"sources\":[],\"names\":[null],\"mappings\":\"\"}", SRCMAP_E_FORMAT,
            "names[0]");
    REFUSED("{\"version\":3,\"sources\":[],\"names\":[{}],\"mappings\":\"\"}", SRCMAP_E_FORMAT,
            "names[0]");
    REFUSED(MAP("\"file\":1,\"mappings\":\"\""), SRCMAP_E_FORMAT, "file");
    REFUSED(MAP("\"sourceRoot\":[],\"mappings\":\"\""), SRCMAP_E_FORMAT, "sourceRoot");

    /* unknown values nested too deep */
    char deep[300];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof(deep) - k, "{\"x\":");
    for (int i = 0; i < SRCMAP_MAX_NESTING + 2; i++)
        deep[k++] = '[';
    for (int i = 0; i < SRCMAP_MAX_NESTING + 2; i++)
        deep[k++] = ']';
    snprintf(deep + k, sizeof(deep) - k, ",\"version\":3,\"sources\":[],\"mappings\":\"\"}");
    REFUSED(deep, SRCMAP_E_FORMAT, "nesting");

    /* the mappings: bad VLQ */
    REFUSED(MAP("\"mappings\":\"AAAA;AA!A\""), SRCMAP_E_VLQ, "'!' at byte 7 (generated line 2)");
    REFUSED(MAP("\"mappings\":\"AAAA,AAA=\""), SRCMAP_E_VLQ, "'=' at byte 8");
    REFUSED(MAP("\"mappings\":\"AAAA AAAA\""), SRCMAP_E_VLQ, "byte 4");
    REFUSED(MAP("\"mappings\":\"AAAg\""), SRCMAP_E_VLQ, "cut");
    REFUSED(MAP("\"mappings\":\"AAAg,AAAA\""), SRCMAP_E_VLQ, "cut");
    REFUSED(MAP("\"mappings\":\"ggggggEAAA\""), SRCMAP_E_VLQ, "32 bits");
    /* fields per segment: 1, 4 or 5 */
    REFUSED(MAP("\"mappings\":\"AAAA;AA\""), SRCMAP_E_VLQ, "2 fields at byte 5");
    REFUSED(MAP("\"mappings\":\"AAA\""), SRCMAP_E_VLQ, "3 fields at byte 0");
    REFUSED(MAP("\"mappings\":\"AAAA,AAAA;AAAAAA\""), SRCMAP_E_VLQ, "at byte 15");
    REFUSED(MAP("\"mappings\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\""), SRCMAP_E_VLQ, "fields");
    /* negative after the deltas */
    REFUSED(MAP("\"mappings\":\"D\""), SRCMAP_E_VLQ, "negative");
    REFUSED(MAP("\"mappings\":\"AAAA;DAAA\""), SRCMAP_E_VLQ, "negative");
    REFUSED(MAP("\"mappings\":\"ADAA\""), SRCMAP_E_VLQ, "negative");
    REFUSED(MAP("\"mappings\":\"AADA\""), SRCMAP_E_VLQ, "negative");
    REFUSED(MAP("\"mappings\":\"AAAD\""), SRCMAP_E_VLQ, "negative");
    REFUSED(MAP("\"mappings\":\"AAAAD\""), SRCMAP_E_VLQ, "negative");
    REFUSED(MAP("\"mappings\":\"AAEA;AADA;AAFA\""), SRCMAP_E_VLQ, "line 3");
    /* indexes past their array */
    REFUSED(MAP("\"mappings\":\"ACAA\""), SRCMAP_E_INDEX, "source");
    REFUSED(MAP("\"mappings\":\"AAAA;ACAA\""), SRCMAP_E_INDEX, "line 2");
    REFUSED(MAP("\"mappings\":\"AAAAC\""), SRCMAP_E_INDEX, "name");
    REFUSED("{\"version\":3,\"sources\":[\"a\"],\"mappings\":\"AAAAA\"}", SRCMAP_E_INDEX, "name");
    REFUSED("{\"version\":3,\"sources\":[],\"mappings\":\"AAAA\"}", SRCMAP_E_INDEX, "source");
    /* a 1-field segment names no source: fine with none */
    struct srcmap *m = PARSE("{\"version\":3,\"sources\":[],\"mappings\":\"A,C;E\"}");
    CHECK(m != NULL && srcmap_nsegments(m) == 3);
    srcmap_free(m);

    /* an index map */
    REFUSED("{\"version\":3,\"sections\":[{\"offset\":{\"line\":0,\"column\":0},\"map\":{}}]}",
            SRCMAP_E_SECTIONS, "sections");
    REFUSED(MAP("\"mappings\":\"\",\"sections\":[]"), SRCMAP_E_SECTIONS, "sections");

    /* the memory cap */
    refused_(MAP("\"mappings\":\"AAAA\""), 64, SRCMAP_E_TOOBIG, "cap", __LINE__);
    refused_(MAP("\"mappings\":\"AAAA\""), 1, SRCMAP_E_TOOBIG, "cap", __LINE__);
}

TEST(parser_sticky)
{
    struct srcmap_parser *p;
    REQUIRE(srcmap_parser_new(0, &p) == 0);
    const char *a = "{\"version\":2,";
    CHECK_EQ_INT(srcmap_parser_feed(p, a, strlen(a)), SRCMAP_E_VERSION);
    const char *b = "\"sources\":[],\"mappings\":\"\"}";
    CHECK_EQ_INT(srcmap_parser_feed(p, b, strlen(b)), SRCMAP_E_VERSION);
    struct srcmap *m = (struct srcmap *)&m;
    char *why = NULL;
    CHECK_EQ_INT(srcmap_parser_finish(p, &m, &why), SRCMAP_E_VERSION);
    CHECK(m == NULL);
    CHECK(why != NULL && strstr(why, "version 2") != NULL);
    isoprof_free(why);
    srcmap_parser_free(p);

    /* finish without why, after an error: nothing leaks */
    REQUIRE(srcmap_parser_new(0, &p) == 0);
    CHECK_EQ_INT(srcmap_parser_feed(p, "[", 1), SRCMAP_E_JSON);
    CHECK_EQ_INT(srcmap_parser_finish(p, &m, NULL), SRCMAP_E_JSON);
    srcmap_parser_free(p);

    /* a spent parser refuses a second finish */
    REQUIRE(srcmap_parser_new(0, &p) == 0);
    const char *ok = MAP("\"mappings\":\"AAAA\"");
    CHECK_EQ_INT(srcmap_parser_feed(p, ok, strlen(ok)), SRCMAP_OK);
    CHECK_EQ_INT(srcmap_parser_finish(p, &m, NULL), SRCMAP_OK);
    CHECK(m != NULL);
    srcmap_free(m);
    CHECK(srcmap_parser_finish(p, &m, &why) != SRCMAP_OK);
    CHECK(m == NULL);
    isoprof_free(why);
    srcmap_parser_free(p);
}

/* --- generated maps, checked against the test's own decoder --- */

struct seg {
    uint32_t line, col;
    int nf; /* 1, 4 or 5 */
    int32_t src, oline, ocol, name;
};

#define GEN_SOURCES 7
#define GEN_NAMES 300

struct gen {
    struct seg *seg; /* in text order, which is (line, col) order */
    size_t n, cap;
    uint32_t nlines;
    bool sorted;        /* no line goes back */
    size_t *line_start; /* nlines + 1: the segments of line L are [ls[L], ls[L+1]) */
    struct isoprof_buf json;
};

static void gen_push(struct gen *g, struct seg s)
{
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 1024;
        g->seg = isoprof_realloc(g->seg, g->cap * sizeof(*g->seg));
        if (g->seg == NULL)
            abort();
    }
    g->seg[g->n++] = s;
}

/* The test's own decoder: base64 by table lookup, deltas by the spec. */
static int b64(char c)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = c ? strchr(abc, c) : NULL;
    return p ? (int)(p - abc) : -1;
}

static int brute_decode(const char *s, size_t n, struct seg **out, size_t *nout)
{
    struct gen g = {0};
    uint32_t line = 0;
    int64_t col = 0, prev[4] = {0, 0, 0, 0};
    size_t i = 0;
    while (i < n) {
        if (s[i] == ';') {
            line++;
            col = 0;
            i++;
            continue;
        }
        if (s[i] == ',') {
            i++;
            continue;
        }
        int64_t f[5];
        int nf = 0;
        while (i < n && s[i] != ',' && s[i] != ';') {
            int64_t v = 0;
            int shift = 0, d;
            do {
                if (i >= n || (d = b64(s[i++])) < 0 || shift > 30)
                    goto bad;
                v += (int64_t)(d & 31) << shift;
                shift += 5;
            } while (d & 32);
            if (nf == 5)
                goto bad;
            f[nf++] = (v & 1) ? -(v >> 1) : v >> 1;
        }
        if (nf != 1 && nf != 4 && nf != 5)
            goto bad;
        col += f[0];
        struct seg sg = {.line = line, .col = (uint32_t)col, .nf = nf, .name = -1};
        if (nf >= 4) {
            for (int k = 0; k < 3; k++)
                prev[k] += f[k + 1];
            sg.src = (int32_t)prev[0];
            sg.oline = (int32_t)prev[1];
            sg.ocol = (int32_t)prev[2];
        }
        if (nf == 5) {
            prev[3] += f[4];
            sg.name = (int32_t)prev[3];
        }
        gen_push(&g, sg);
    }
    *out = g.seg;
    *nout = g.n;
    return 0;
bad:
    isoprof_free(g.seg);
    return -1;
}

/*
 * A map of nlines lines; line L gets a random number of segments in
 * [0, maxper] (exactly maxper when exact), with runs of up to
 * `gap` empty lines now and then. big: values up to 2^30, so that segments
 * are long and the byte rule of the checkpoints (SRCMAP_CHECK_BYTES) is met
 * between segments too. shuffle: the percentage of lines written with
 * their segments out of column order (negative column deltas).
 */
static void gen_map(struct gen *g, uint64_t seed, uint32_t nlines, uint32_t maxper, bool exact,
                    uint32_t gap, bool big, unsigned shuffle)
{
    struct isoprof_rng r;
    isoprof_rng_seed(&r, seed);
    memset(g, 0, sizeof(*g));
    g->sorted = shuffle == 0;
    struct isoprof_buf mp;
    isoprof_buf_init(&mp, SIZE_MAX / 2);
    struct seg *tmp = isoprof_malloc(((size_t)maxper + 1) * sizeof(*tmp));
    if (tmp == NULL)
        abort();
    int32_t prev_src = 0, prev_ol = 0, prev_oc = 0, prev_name = 0;
    uint32_t range = big ? 1u << 30 : 5000;
    for (uint32_t line = 0; line < nlines; line++) {
        if (line > 0)
            isoprof_buf_putc(&mp, ';');
        uint32_t k = exact ? maxper : (uint32_t)(isoprof_rng_next(&r) % (maxper + 1));
        if (gap && isoprof_rng_next(&r) % 50 == 0) {
            uint32_t skip = (uint32_t)(isoprof_rng_next(&r) % gap);
            if (line + skip >= nlines)
                skip = nlines - line - 1;
            for (uint32_t i = 0; i < skip; i++)
                isoprof_buf_putc(&mp, ';');
            line += skip;
        }
        int32_t col = 0;
        for (uint32_t i = 0; i < k; i++) {
            uint64_t x = isoprof_rng_next(&r);
            /* the first one is often past column 0; some share a column */
            col += (int32_t)(x % 8 == 0 ? 0 : x % (i == 0 ? 40 : big ? 100000 : 30));
            struct seg s = {.line = line, .col = (uint32_t)col, .name = -1};
            uint64_t kind = (x >> 8) % 10;
            s.nf = kind == 0 ? 1 : kind < 5 ? 4 : 5;
            if (s.nf >= 4) {
                s.src = (int32_t)(isoprof_rng_next(&r) % GEN_SOURCES);
                s.oline = (int32_t)(isoprof_rng_next(&r) % range);
                s.ocol = (int32_t)(isoprof_rng_next(&r) % range);
            }
            if (s.nf == 5)
                s.name = (int32_t)(isoprof_rng_next(&r) % GEN_NAMES);
            tmp[i] = s;
        }
        if (shuffle && isoprof_rng_next(&r) % 100 < shuffle) {
            for (uint32_t i = k; i > 1; i--) {
                uint32_t j = (uint32_t)(isoprof_rng_next(&r) % i);
                struct seg t = tmp[i - 1];
                tmp[i - 1] = tmp[j];
                tmp[j] = t;
            }
        }
        int32_t prev_col = 0;
        for (uint32_t i = 0; i < k; i++) {
            const struct seg *s = &tmp[i];
            if (i > 0)
                isoprof_buf_putc(&mp, ',');
            enc_vlq(&mp, (int32_t)s->col - prev_col);
            prev_col = (int32_t)s->col;
            if (s->nf >= 4) {
                enc_vlq(&mp, s->src - prev_src);
                enc_vlq(&mp, s->oline - prev_ol);
                enc_vlq(&mp, s->ocol - prev_oc);
                prev_src = s->src;
                prev_ol = s->oline;
                prev_oc = s->ocol;
            }
            if (s->nf == 5) {
                enc_vlq(&mp, s->name - prev_name);
                prev_name = s->name;
            }
            gen_push(g, *s);
        }
    }
    isoprof_free(tmp);
    if (mp.err != 0)
        abort();
    g->nlines = nlines;

    /* the text must decode, by the test's own decoder, to what was made */
    struct seg *d = NULL;
    size_t nd = 0;
    CHECK(brute_decode(mp.data, mp.len, &d, &nd) == 0);
    CHECK_EQ_INT(nd, g->n);
    if (!test_failed_)
        CHECK(memcmp(d, g->seg, nd * sizeof(*d)) == 0);
    isoprof_free(d);

    g->line_start = isoprof_calloc(nlines + 1, sizeof(size_t));
    if (g->line_start == NULL)
        abort();
    for (size_t i = 0, L = 0; L <= nlines; L++) {
        while (i < g->n && g->seg[i].line < L)
            i++;
        g->line_start[L] = i;
    }

    isoprof_buf_init(&g->json, SIZE_MAX / 2);
    isoprof_buf_puts(&g->json, "{\"version\":3,\"file\":\"gen.js\",\"sources\":[");
    for (int i = 0; i < GEN_SOURCES; i++)
        isoprof_buf_printf(&g->json, "%s\"src/s%d.ts\"", i ? "," : "", i);
    isoprof_buf_puts(&g->json, "],\"sourcesContent\":[\"a \\\"quoted\\\" \\\\ \\u0041\\n\"],"
                               "\"names\":[");
    for (int i = 0; i < GEN_NAMES; i++)
        isoprof_buf_printf(&g->json, "%s\"n%d\"", i ? "," : "", i);
    isoprof_buf_puts(&g->json, "],\"mappings\":\"");
    isoprof_buf_append(&g->json, mp.data, mp.len);
    isoprof_buf_puts(&g->json, "\"}");
    isoprof_buf_free(&mp);
    if (g->json.err != 0)
        abort();
}

static void gen_free(struct gen *g)
{
    isoprof_free(g->seg);
    isoprof_free(g->line_start);
    isoprof_buf_free(&g->json);
}

/* The segment a lookup of (line, col) must find, by a scan of the line:
 * the greatest column at or before col, of two at one column the later in
 * the text. -1 for none. */
static long brute_lookup(const struct gen *g, uint32_t line, uint32_t col)
{
    if (line >= g->nlines)
        return -1;
    long best = -1;
    for (size_t i = g->line_start[line]; i < g->line_start[line + 1]; i++)
        if (g->seg[i].col <= col && (best < 0 || g->seg[i].col >= g->seg[best].col))
            best = (long)i;
    return best;
}

/* Compares the map's answer at (line, col) with segment `want` (-1 none).
 * Returns 0 when they agree. */
static int agree(const struct srcmap *m, const struct gen *g, uint32_t line, uint32_t col,
                 long want)
{
    struct srcmap_pos p;
    int got = srcmap_lookup(m, line, col, &p);
    const struct seg *s = want >= 0 ? &g->seg[want] : NULL;
    if (s == NULL || s->nf == 1) {
        if (got == 0)
            return 0;
        fprintf(stderr, "lookup %u:%u found %s:%u:%u gen %u, want nothing\n", line, col, p.source,
                p.line, p.column, p.gen_column);
        return -1;
    }
    char src[32], name[32];
    snprintf(src, sizeof(src), "src/s%d.ts", s->src);
    snprintf(name, sizeof(name), "n%d", s->name);
    if (got == 1 && strcmp(p.source, src) == 0 && p.line == (uint32_t)s->oline &&
        p.column == (uint32_t)s->ocol && p.gen_column == s->col &&
        (s->nf == 5 ? p.name != NULL && strcmp(p.name, name) == 0 : p.name == NULL))
        return 0;
    fprintf(
        stderr, "lookup %u:%u: got %d %s:%u:%u gen %u name %s, want segment %ld %s:%d:%d gen %u\n",
        line, col, got, got ? p.source : "-", got ? p.line : 0, got ? p.column : 0,
        got ? p.gen_column : 0, got && p.name ? p.name : "-", want, src, s->oline, s->ocol, s->col);
    return -1;
}

/* Every segment's column, the column before it and the end of its line,
 * then nrand random positions, each against the brute-force answer. */
static void check_gen(const struct srcmap *m, const struct gen *g, unsigned nrand, int at)
{
    int bad = 0;
    CHECK_EQ_INT(srcmap_nsegments(m), g->n);
    CHECK_EQ_INT(srcmap_nsources(m), GEN_SOURCES);
    CHECK_EQ_INT(srcmap_nnames(m), GEN_NAMES);
    CHECK_STR(srcmap_file(m), "gen.js");
    for (size_t i = 0; i < g->n && bad < 10; i++) {
        const struct seg *s = &g->seg[i];
        size_t end = g->line_start[s->line + 1], first = g->line_start[s->line];
        if (!g->sorted) {
            /* the brute force on the whole line (keep such lines short) */
            bad += agree(m, g, s->line, s->col, brute_lookup(g, s->line, s->col)) != 0;
            if (s->col > 0)
                bad += agree(m, g, s->line, s->col - 1, brute_lookup(g, s->line, s->col - 1)) != 0;
            if (i + 1 == end)
                bad += agree(m, g, s->line, UINT32_MAX, brute_lookup(g, s->line, UINT32_MAX)) != 0;
            continue;
        }
        size_t j = i; /* the last of the segments at this column */
        while (j + 1 < end && g->seg[j + 1].col == s->col)
            j++;
        bad += agree(m, g, s->line, s->col, (long)j) != 0;
        if (s->col > 0) {
            size_t k = i; /* the first at this column */
            while (k > first && g->seg[k - 1].col == s->col)
                k--;
            bad += agree(m, g, s->line, s->col - 1, k > first ? (long)(k - 1) : -1) != 0;
        }
        if (i + 1 == end)
            bad += agree(m, g, s->line, UINT32_MAX, (long)i) != 0;
    }
    for (uint32_t L = 0; L < g->nlines && bad < 10; L++)
        if (g->line_start[L] == g->line_start[L + 1])
            bad += agree(m, g, L, 0, -1) != 0;
    bad += agree(m, g, g->nlines, 0, -1) != 0;
    bad += agree(m, g, UINT32_MAX, UINT32_MAX, -1) != 0;
    struct isoprof_rng r;
    isoprof_rng_seed(&r, 7);
    uint32_t maxcol = 0;
    for (size_t i = 0; i < g->n; i++)
        if (g->seg[i].col > maxcol)
            maxcol = g->seg[i].col;
    for (unsigned i = 0; i < nrand && bad < 10; i++) {
        uint32_t L = (uint32_t)(isoprof_rng_next(&r) % (g->nlines + 2));
        uint32_t C = (uint32_t)(isoprof_rng_next(&r) % ((uint64_t)maxcol + 50));
        bad += agree(m, g, L, C, brute_lookup(g, L, C)) != 0;
    }
    if (bad) {
        fprintf(stderr, "%s:%d: %d lookups disagree with the brute-force decoder\n", __FILE__, at,
                bad);
        test_failed_ = 1;
    }
}

static struct srcmap *parse_gen(const struct gen *g, size_t max, int at)
{
    struct srcmap *m = NULL;
    char *why = NULL;
    int rc = srcmap_parse(g->json.data, g->json.len, max, &m, &why);
    if (rc != 0) {
        fprintf(stderr, "%s:%d: generated map refused: %s: %s\n", __FILE__, at, srcmap_reason(rc),
                why ? why : "");
        test_failed_ = 1;
    }
    isoprof_free(why);
    return m;
}

TEST(gen_one_long_line)
{
    struct gen g;
    gen_map(&g, 1, 1, 100000, true, 0, false, 0);
    REQUIRE(g.n == 100000);
    struct srcmap *m = parse_gen(&g, 0, __LINE__);
    if (m)
        check_gen(m, &g, 300, __LINE__);
    srcmap_free(m);
    gen_free(&g);
}

TEST(gen_many_short_lines)
{
    struct gen g;
    gen_map(&g, 2, 100000, 1, true, 0, false, 0);
    REQUIRE(g.n == 100000);
    struct srcmap *m = parse_gen(&g, 0, __LINE__);
    if (m)
        check_gen(m, &g, 20000, __LINE__);
    srcmap_free(m);
    gen_free(&g);
}

TEST(gen_mixed_with_gaps)
{
    /* long segments and runs of thousands of empty lines: checkpoints by
     * bytes as well as by count */
    struct gen g;
    gen_map(&g, 3, 30000, 12, false, 6000, true, 0);
    struct srcmap *m = parse_gen(&g, 0, __LINE__);
    if (m)
        check_gen(m, &g, 20000, __LINE__);
    srcmap_free(m);
    gen_free(&g);
    gen_map(&g, 4, 400, 600, false, 0, true, 0);
    m = parse_gen(&g, 0, __LINE__);
    if (m)
        check_gen(m, &g, 5000, __LINE__);
    srcmap_free(m);
    gen_free(&g);
}

TEST(gen_columns_going_back)
{
    /* a third of the lines written out of column order: those are sorted
     * at finish and searched apart from the text */
    struct gen g;
    gen_map(&g, 9, 5000, 60, false, 200, false, 33);
    struct srcmap *m = parse_gen(&g, 0, __LINE__);
    if (m)
        check_gen(m, &g, 20000, __LINE__);
    srcmap_free(m);
    gen_free(&g);
    /* one long line, out of order */
    gen_map(&g, 10, 1, 4000, true, 0, true, 100);
    m = parse_gen(&g, 0, __LINE__);
    if (m)
        check_gen(m, &g, 2000, __LINE__);
    srcmap_free(m);
    gen_free(&g);
}

/* --- streaming --- */

static void same_answers(const struct srcmap *a, const struct srcmap *b, const struct gen *g,
                         int at)
{
    int bad = 0;
    if (srcmap_nsegments(a) != srcmap_nsegments(b) || srcmap_nsources(a) != srcmap_nsources(b) ||
        srcmap_nnames(a) != srcmap_nnames(b) || strcmp(srcmap_file(a), srcmap_file(b)) != 0)
        bad++;
    for (size_t i = 0; i < srcmap_nsources(a); i++)
        bad += strcmp(srcmap_source(a, i), srcmap_source(b, i)) != 0;
    for (size_t i = 0; i < g->n; i++) {
        for (uint32_t d = 0; d < 2; d++) {
            uint32_t col = g->seg[i].col + d;
            struct srcmap_pos p, q;
            int x = srcmap_lookup(a, g->seg[i].line, col, &p);
            int y = srcmap_lookup(b, g->seg[i].line, col, &q);
            if (x != y || (x && (strcmp(p.source, q.source) != 0 || p.line != q.line ||
                                 p.column != q.column || p.gen_column != q.gen_column ||
                                 (p.name == NULL) != (q.name == NULL) ||
                                 (p.name && strcmp(p.name, q.name) != 0))))
                bad++;
        }
    }
    if (bad) {
        fprintf(stderr, "%s:%d: %d answers differ\n", __FILE__, at, bad);
        test_failed_ = 1;
    }
}

TEST(streaming)
{
    struct gen g;
    gen_map(&g, 5, 3000, 8, false, 300, true, 20);
    struct srcmap *whole = parse_gen(&g, 0, __LINE__);
    REQUIRE(whole != NULL);
    check_gen(whole, &g, 2000, __LINE__);
    static const size_t chunks[] = {1, 2, 3, 7, 13, 64, 1000, 4096, 65537};
    for (size_t c = 0; c < ISOPROF_ARRAY_SIZE(chunks); c++) {
        struct srcmap *m;
        char *why;
        int rc = parse_chunked(g.json.data, g.json.len, chunks[c], 0, &m, &why);
        if (rc != 0) {
            fprintf(stderr, "%s:%d: chunks of %zu: %s: %s\n", __FILE__, __LINE__, chunks[c],
                    srcmap_reason(rc), why ? why : "");
            test_failed_ = 1;
        } else {
            same_answers(whole, m, &g, __LINE__);
            CHECK_EQ_INT(srcmap_bytes(m), srcmap_bytes(whole));
        }
        srcmap_free(m);
        isoprof_free(why);
    }
    srcmap_free(whole);
    gen_free(&g);

    /* the hand map, with sourceRoot after the sources, split everywhere */
    const char *text = "{\"sources\":[\"a.ts\",\"b.ts\"],\"sourcesContent\":[\"x\\u00e9\\\"\"],"
                       "\"sourceRoot\":\"\",\"names\":[\"foo\",\"bar\"],\"version\":3,"
                       "\"mappings\":\"" BASIC_MAPPINGS "\"}";
    size_t n = strlen(text);
    for (size_t cut = 0; cut <= n; cut++) {
        struct srcmap_parser *p;
        REQUIRE(srcmap_parser_new(0, &p) == 0);
        CHECK_EQ_INT(srcmap_parser_feed(p, text, cut), 0);
        CHECK_EQ_INT(srcmap_parser_feed(p, text + cut, n - cut), 0);
        struct srcmap *m;
        CHECK_EQ_INT(srcmap_parser_finish(p, &m, NULL), 0);
        srcmap_parser_free(p);
        if (m)
            check_basic(m, __LINE__);
        srcmap_free(m);
        if (test_failed_) {
            fprintf(stderr, "  (cut at byte %zu)\n", cut);
            break;
        }
    }
}

/* --- the memory cap --- */

TEST(sources_content_not_counted)
{
    const char *head = "{\"version\":3,\"sources\":[\"a.ts\",\"b.ts\"],\"names\":[\"foo\",\"bar\"],"
                       "\"mappings\":\"" BASIC_MAPPINGS "\"";
    char *plain = isoprof_asprintf("%s}", head);
    REQUIRE(plain != NULL);
    struct srcmap *m0 = PARSE(plain);
    REQUIRE(m0 != NULL);
    size_t b0 = srcmap_bytes(m0);

    struct isoprof_buf j;
    isoprof_buf_init(&j, SIZE_MAX / 2);
    isoprof_buf_puts(&j, head);
    isoprof_buf_puts(&j, ",\"sourcesContent\":[\"");
    for (int i = 0; i < 200000; i++)
        isoprof_buf_puts(&j, "x = \\\"y\\\";\\n"); /* 2.4 MB of escaped text */
    isoprof_buf_puts(&j, "\",null]}");
    REQUIRE(j.err == 0);
    struct srcmap *m1 = PARSE(j.data);
    REQUIRE(m1 != NULL);
    check_basic(m1, __LINE__);
    CHECK_EQ_INT(srcmap_bytes(m1), b0);
    srcmap_free(m1);
    /* and a cap that the compact form fits in accepts it */
    char *why = NULL;
    CHECK_EQ_INT(srcmap_parse(j.data, j.len, b0, &m1, &why), 0);
    if (m1)
        CHECK(srcmap_bytes(m1) <= b0);
    srcmap_free(m1);
    isoprof_free(why);
    isoprof_buf_free(&j);
    srcmap_free(m0);
    isoprof_free(plain);
}

TEST(cap_is_kept)
{
    /* Whatever the cap, an accepted map holds no more than it: below the
     * map's size the answer is too_big, from its size up it is accepted. */
    struct gen g;
    gen_map(&g, 6, 300, 30, false, 20, false, 30);
    struct srcmap *m = parse_gen(&g, 0, __LINE__);
    REQUIRE(m != NULL);
    size_t full = srcmap_bytes(m);
    srcmap_free(m);
    int bad = 0;
    for (size_t max = 16; max < full * 3 && bad < 5; max += max < full - 300 ? 97 : 1) {
        char *why = NULL;
        int rc = srcmap_parse(g.json.data, g.json.len, max, &m, &why);
        if (rc == 0 && srcmap_bytes(m) > max) {
            fprintf(stderr, "cap %zu: accepted with %zu bytes\n", max, srcmap_bytes(m));
            bad++;
        } else if (rc == 0 && max < full) {
            fprintf(stderr, "cap %zu: accepted, below the map's %zu bytes\n", max, full);
            bad++;
        } else if (rc != 0 && (rc != SRCMAP_E_TOOBIG || max >= full)) {
            fprintf(stderr, "cap %zu (map %zu): %s: %s\n", max, full, srcmap_reason(rc),
                    why ? why : "");
            bad++;
        }
        srcmap_free(m);
        isoprof_free(why);
        if (max > full + 300)
            max += 1000;
    }
    CHECK_EQ_INT(bad, 0);
    gen_free(&g);
}

TEST(keys_written_twice)
{
    /* "file" and "sourceRoot" twice are refused as sources and mappings
     * are: the first value was charged to the cap when it came, and a map
     * must be accepted exactly when its compact form fits (fuzz_srcmap
     * found a map refused with its own size as the cap, for a first "file"
     * longer than the second). */
    REFUSED("{\"version\":3,\"file\":\"a-long-first-name.js\",\"sources\":[],\"file\":\"a.js\","
            "\"mappings\":\"\"}",
            SRCMAP_E_FORMAT, "file appears twice");
    REFUSED("{\"version\":3,\"file\":null,\"sources\":[],\"file\":\"a.js\",\"mappings\":\"\"}",
            SRCMAP_E_FORMAT, "file appears twice");
    REFUSED("{\"version\":3,\"sourceRoot\":\"x\",\"sourceRoot\":\"y\",\"sources\":[\"a.ts\"],"
            "\"mappings\":\"AAAA\"}",
            SRCMAP_E_FORMAT, "sourceRoot appears twice");
    /* an empty names[] may come again (nothing was kept) */
    struct srcmap *m = PARSE("{\"version\":3,\"names\":[],\"sources\":[\"a.ts\"],\"names\":[\"n\"],"
                             "\"mappings\":\"AAAAA\"}");
    if (m)
        EXPECT_AT(m, 0, 0, "a.ts", 0, 0, "n", 0);
    srcmap_free(m);
    REFUSED("{\"version\":3,\"names\":[\"n\"],\"sources\":[],\"names\":[],\"mappings\":\"\"}",
            SRCMAP_E_FORMAT, "names appears twice");

    /* with a sourceRoot (sources rewritten at finish), a cap of the map's
     * own size accepts it and one byte less refuses it */
    const char *j =
        "{\"version\":3,\"file\":\"out.js\",\"sourceRoot\":\"src\","
        "\"sources\":[\"a.ts\",null,\"b.ts\"],\"names\":[\"x\"],\"mappings\":\"AAAAA\"}";
    m = PARSE(j);
    REQUIRE(m != NULL);
    size_t full = srcmap_bytes(m);
    srcmap_free(m);
    char *why = NULL;
    CHECK_EQ_INT(srcmap_parse(j, strlen(j), full, &m, &why), 0);
    if (m) {
        CHECK_EQ_INT(srcmap_bytes(m), full);
        CHECK_STR(srcmap_file(m), "out.js");
        CHECK_STR(srcmap_source(m, 2), "src/b.ts");
    }
    srcmap_free(m);
    isoprof_free(why);
    refused_(j, full - 1, SRCMAP_E_TOOBIG, "cap", __LINE__);
}

TEST(cap_stops_early)
{
    /* the strings count as they come: a map whose names pass the cap is
     * refused there, not after holding all of them */
    struct isoprof_buf j;
    isoprof_buf_init(&j, SIZE_MAX / 2);
    isoprof_buf_puts(&j, "{\"version\":3,\"sources\":[\"a.ts\"],\"names\":[");
    for (int i = 0; i < 1000; i++)
        isoprof_buf_printf(&j, "%s\"a_rather_long_name_%04d\"", i ? "," : "", i);
    isoprof_buf_puts(&j, "],\"mappings\":\"AAAA\"}");
    REQUIRE(j.err == 0);
    struct srcmap *m = NULL;
    char *why = NULL;
    CHECK_EQ_INT(srcmap_parse(j.data, j.len, 8192, &m, &why), SRCMAP_E_TOOBIG);
    CHECK(m == NULL);
    CHECK(why != NULL && (strstr(why, "strings") != NULL || strstr(why, "arrays") != NULL));
    isoprof_free(why);
    isoprof_buf_free(&j);
}

TEST(checkpoint_after_empty_lines)
{
    /* SRCMAP_CHECK_BYTES: past a run of empty lines longer than it, the
     * next segment gets a checkpoint although SRCMAP_CHECK_EVERY segments
     * have not passed, so a lookup after the run does not rescan it. The
     * map with the run differs from the one without by its text, plus
     * that one checkpoint. */
    struct isoprof_buf a, b;
    isoprof_buf_init(&a, SIZE_MAX / 2);
    isoprof_buf_init(&b, SIZE_MAX / 2);
    isoprof_buf_puts(&a, MAP("\"mappings\":\"AAAA,AAAA\""));
    isoprof_buf_puts(&b, "{\"version\":3,\"sources\":[\"a.ts\"],\"names\":[\"n\"],"
                         "\"mappings\":\"AAAA");
    for (int i = 0; i < 3 * SRCMAP_CHECK_BYTES; i++)
        isoprof_buf_putc(&b, ';');
    isoprof_buf_puts(&b, "AAAA\"}");
    REQUIRE(a.err == 0 && b.err == 0);
    struct srcmap *ma = PARSE(a.data), *mb = PARSE(b.data);
    if (ma && mb) {
        size_t text = 3 * SRCMAP_CHECK_BYTES - 1; /* ';' x 3C in place of one ',' */
        size_t extra = srcmap_bytes(mb) - srcmap_bytes(ma) - text;
        CHECK(srcmap_bytes(mb) > srcmap_bytes(ma) + text);
        CHECK(extra >= 16 && extra <= 64); /* one checkpoint */
        EXPECT_AT(mb, 3 * SRCMAP_CHECK_BYTES, 0, "a.ts", 0, 0, NULL, 0);
        EXPECT_NONE(mb, 3 * SRCMAP_CHECK_BYTES - 1, 0);
    }
    srcmap_free(ma);
    srcmap_free(mb);
    isoprof_buf_free(&a);
    isoprof_buf_free(&b);
}

/* --- rebasing sources on a directory --- */

TEST(rebase_sources)
{
    struct srcmap *m = PARSE(
        "{\"version\":3,\"file\":\"out.js\",\"names\":[\"nm\"],\"sources\":["
        "\"../src/a.ts\",\"./a.ts\",\"/x/y.ts\",\"/x/./z/../y2.ts\",\"file:///x/%20y.ts\","
        "\"webpack://app/./src/a.ts\",\"../../../../etc/p.ts\",\"a//b/./c.ts\","
        "\"../..\",null,\"\",\"http://h/a.js\",\"file:///a/../b.ts\","
        "\"file://localhost/srv/%C3%BCber.ts\",\"file:///a%2Fb/c%00.ts\"],"
        "\"mappings\":\"AAAAA,CCAA,CCAA,CCAA,CCAA,CCAA,CCAA,CCAA,CCAA,CCAA,CCAA,CCAA,CCAA,CCAA,"
        "CCAA\"}");
    REQUIRE(m != NULL);
    size_t before = srcmap_bytes(m);
    CHECK_EQ_INT(srcmap_rebase_sources(m, "/app/dist"), 0);
    static const char *const want[] = {
        "/app/src/a.ts",            /* relative: joined and normalized */
        "/app/dist/a.ts",           /* "./" */
        "/x/y.ts",                  /* absolute: as it was */
        "/x/y2.ts",                 /* absolute: normalized */
        "/x/ y.ts",                 /* file://: the scheme goes, escapes decoded */
        "webpack://app/./src/a.ts", /* another scheme: as written */
        "/etc/p.ts",                /* ".." stops at the root */
        "/app/dist/a/b/c.ts",       /* empty and "." parts dropped */
        "/",                        /* "/app/dist/../.." */
        "",                         /* null stays nothing */
        "",                         /* so does "" */
        "http://h/a.js",
        "/b.ts",
        "/srv/\303\274ber.ts", /* file://localhost/ is this host */
        "/a%2Fb/c%00.ts",      /* a '/' or a NUL is never decoded */
    };
    CHECK_EQ_INT(srcmap_nsources(m), ISOPROF_ARRAY_SIZE(want));
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(want); i++)
        CHECK_STR(srcmap_source(m, i), want[i]);
    /* lookups see the new names; the other strings did not move */
    EXPECT_AT(m, 0, 0, "/app/src/a.ts", 0, 0, "nm", 0);
    EXPECT_AT(m, 0, 3, "/x/y2.ts", 0, 0, NULL, 3);
    EXPECT_NONE(m, 0, 9); /* the null source */
    EXPECT_NONE(m, 0, 10);
    EXPECT_AT(m, 0, 11, "http://h/a.js", 0, 0, NULL, 11);
    CHECK_STR(srcmap_file(m), "out.js");
    CHECK_STR(srcmap_source(m, 0), "/app/src/a.ts");
    /* all absolute now: a second rebase changes nothing, not even the size */
    size_t after = srcmap_bytes(m);
    CHECK(after != before);
    CHECK_EQ_INT(srcmap_rebase_sources(m, "/elsewhere"), 0);
    CHECK_EQ_INT(srcmap_bytes(m), after);
    CHECK_STR(srcmap_source(m, 1), "/app/dist/a.ts");
    srcmap_free(m);

    /* ".." past the root from the root itself; a dir ending in '/' */
    m = PARSE("{\"version\":3,\"sources\":[\"../..\",\"../a.ts\",\"a.ts\"],\"mappings\":\"\"}");
    REQUIRE(m != NULL);
    CHECK_EQ_INT(srcmap_rebase_sources(m, "/"), 0);
    CHECK_STR(srcmap_source(m, 0), "/");
    CHECK_STR(srcmap_source(m, 1), "/a.ts");
    CHECK_STR(srcmap_source(m, 2), "/a.ts");
    CHECK_EQ_INT(srcmap_rebase_sources(m, "/ignored"), 0); /* now all absolute */
    CHECK_STR(srcmap_source(m, 2), "/a.ts");
    srcmap_free(m);
    m = PARSE("{\"version\":3,\"sources\":[\"a.ts\"],\"mappings\":\"\"}");
    REQUIRE(m != NULL);
    CHECK_EQ_INT(srcmap_rebase_sources(m, "/srv//app/./dist/"), 0);
    CHECK_STR(srcmap_source(m, 0), "/srv/app/dist/a.ts");
    srcmap_free(m);

    /* sourceRoot first, then the directory */
    m = PARSE("{\"version\":3,\"sourceRoot\":\"../src\",\"sources\":[\"a.ts\",\"/b.ts\"],"
              "\"mappings\":\"\"}");
    REQUIRE(m != NULL);
    CHECK_STR(srcmap_source(m, 0), "../src/a.ts");
    CHECK_EQ_INT(srcmap_rebase_sources(m, "/app/dist"), 0);
    CHECK_STR(srcmap_source(m, 0), "/app/src/a.ts");
    CHECK_STR(srcmap_source(m, 1), "/b.ts");
    srcmap_free(m);

    /* a map at its cap cannot grow: too_big, and nothing changed */
    const char *j = "{\"version\":3,\"sources\":[\"a.ts\"],\"names\":[\"n\"],\"mappings\":"
                    "\"AAAAA\"}";
    m = PARSE(j);
    REQUIRE(m != NULL);
    size_t full = srcmap_bytes(m);
    srcmap_free(m);
    char *why = NULL;
    REQUIRE(srcmap_parse(j, strlen(j), full, &m, &why) == 0);
    CHECK_EQ_INT(srcmap_rebase_sources(m, "/a/very/long/directory/name/for/the/sources/to/grow"),
                 SRCMAP_E_TOOBIG);
    CHECK_STR(srcmap_source(m, 0), "a.ts");
    EXPECT_AT(m, 0, 0, "a.ts", 0, 0, "n", 0);
    CHECK(srcmap_bytes(m) <= full);
    srcmap_free(m);
    isoprof_free(why);
}

/* --- allocation failures --- */

TEST(alloc_failures)
{
    /* sourceRoot (the sources rewritten at finish), arrays past their first
     * allocation, and enough segments for the checkpoint array to grow */
    struct gen g;
    gen_map(&g, 8, 200, 40, false, 10, false, 30);
    struct isoprof_buf j;
    isoprof_buf_init(&j, SIZE_MAX / 2);
    isoprof_buf_append(&j, g.json.data, g.json.len - 1);
    isoprof_buf_puts(&j, ",\"sourceRoot\":\"root\"}");
    REQUIRE(j.err == 0);

    struct srcmap *m = NULL;
    unsigned long before = isoprof_alloc_count();
    REQUIRE(srcmap_parse(j.data, j.len, 0, &m, NULL) == 0);
    unsigned long used = isoprof_alloc_count() - before;
    srcmap_free(m);
    CHECK(used > 10);
    unsigned long fails = 0;
    for (unsigned long k = 0; k <= used + 2; k++) {
        char *why = NULL;
        isoprof_alloc_fail_after((long)k);
        int rc = srcmap_parse(j.data, j.len, 0, &m, &why);
        isoprof_alloc_fail_after(-1);
        if (rc == 0) {
            CHECK(m != NULL);
            CHECK_EQ_INT(srcmap_nsegments(m), g.n);
            CHECK_STR(srcmap_source(m, 0), "root/src/s0.ts");
            CHECK(why == NULL);
        } else {
            fails++;
            if (rc != SRCMAP_E_NOMEM)
                fprintf(stderr, "alloc %lu failing: %s: %s\n", k, srcmap_reason(rc),
                        why ? why : "");
            CHECK_EQ_INT(rc, SRCMAP_E_NOMEM);
            CHECK(m == NULL);
        }
        srcmap_free(m);
        isoprof_free(why);
        if (test_failed_)
            break;
    }
    CHECK_EQ_INT(fails, used); /* each one failed the parse */

    /* the same for the rebase: -ENOMEM leaves the map as it was */
    REQUIRE(srcmap_parse(j.data, j.len, 0, &m, NULL) == 0);
    for (long k = 0; k < 1000; k++) {
        isoprof_alloc_fail_after(k);
        int rc = srcmap_rebase_sources(m, "/srv/app");
        isoprof_alloc_fail_after(-1);
        CHECK(rc == 0 || rc == -ENOMEM);
        CHECK_STR(srcmap_source(m, 1), rc == 0 ? "/srv/app/root/src/s1.ts" : "root/src/s1.ts");
        if (rc == 0)
            break;
    }
    CHECK_STR(srcmap_source(m, 1), "/srv/app/root/src/s1.ts");
    srcmap_free(m);
    isoprof_buf_free(&j);
    gen_free(&g);
}

int main(void)
{
    RUN(vlq_known);
    RUN(vlq_bad);
    RUN(vlq_roundtrip);
    RUN(reason_names);
    RUN(parse_basic);
    RUN(parse_any_order);
    RUN(parse_source_root);
    RUN(columns_ties_and_order);
    RUN(refusals);
    RUN(parser_sticky);
    RUN(gen_one_long_line);
    RUN(gen_many_short_lines);
    RUN(gen_mixed_with_gaps);
    RUN(gen_columns_going_back);
    RUN(streaming);
    RUN(sources_content_not_counted);
    RUN(cap_is_kept);
    RUN(keys_written_twice);
    RUN(cap_stops_early);
    RUN(checkpoint_after_empty_lines);
    RUN(rebase_sources);
    RUN(alloc_failures);
    TEST_EXIT();
}

/*
 * test_statsd.c - the DogStatsD parser, the datagram splitter and the UDP
 * listener (agent/latency/statsd.c).
 *
 * The parser is driven through a table of lines, one or more for every
 * rejection class, and a set of accepted lines whose fields are checked
 * one by one. The listener tests run a real loop on 127.0.0.1 port 0 with
 * a uv_udp_t sender, each under a watchdog timer, and end with
 * uv_loop_close() == 0 so that a leaked handle fails.
 */
#include "base.h"
#include "statsd.h"
#include "test.h"

#include <errno.h>

/* --- the line parser --- */

static int parse(const char *line, struct statsd_obs *o)
{
    return statsd_parse_line(line, strlen(line), NULL, o);
}

static int slice_is(const char *p, size_t n, const char *want)
{
    return n == strlen(want) && memcmp(p, want, n) == 0;
}

#define CHECK_SLICE(p, n, want)                                                                    \
    do {                                                                                           \
        if (!slice_is(p, n, want)) {                                                               \
            fprintf(stderr, "%s:%d: slice \"%.*s\" != \"%s\"\n", __FILE__, __LINE__, (int)(n), p,  \
                    want);                                                                         \
            test_failed_ = 1;                                                                      \
        }                                                                                          \
    } while (0)

TEST(accepted_fields)
{
    struct statsd_obs o;
    REQUIRE(parse("api.request.latency:12.5|ms|#worker:api,version:v42", &o) == 0);
    CHECK_SLICE(o.name, o.name_len, "api.request.latency");
    CHECK_EQ_INT(o.type, STATSD_TIMING);
    CHECK_EQ_INT(o.value_ns, 12500000);
    CHECK_EQ_INT(o.count, 1);
    CHECK_SLICE(o.worker, o.worker_len, "api");
    CHECK_SLICE(o.version, o.version_len, "v42");

    /* tag order, sample rate before the tags, histogram type */
    REQUIRE(parse("x:3|h|@0.1|#version:v1,worker:w", &o) == 0);
    CHECK_EQ_INT(o.type, STATSD_HISTOGRAM);
    CHECK_EQ_INT(o.value_ns, 3000000);
    CHECK_EQ_INT(o.count, 10);
    CHECK_SLICE(o.worker, o.worker_len, "w");
    CHECK_SLICE(o.version, o.version_len, "v1");

    /* no version tag: "unknown" */
    REQUIRE(parse("x:3|d|#worker:w", &o) == 0);
    CHECK_EQ_INT(o.type, STATSD_DISTRIBUTION);
    CHECK_SLICE(o.version, o.version_len, "unknown");
    /* a version tag without a value, or an empty one: "unknown" */
    REQUIRE(parse("x:3|ms|#worker:w,version", &o) == 0);
    CHECK_SLICE(o.version, o.version_len, "unknown");
    REQUIRE(parse("x:3|ms|#version:,worker:w", &o) == 0);
    CHECK_SLICE(o.version, o.version_len, "unknown");

    /* other tags, with and without values, around ours; tag names are
     * matched whole, not as prefixes */
    REQUIRE(parse("x:1|ms|#env:prod,workers:no,flag,worker:w2,version:2.0.1,region:eu", &o) == 0);
    CHECK_SLICE(o.worker, o.worker_len, "w2");
    CHECK_SLICE(o.version, o.version_len, "2.0.1");

    /* a value may contain ':' (only the first one splits the tag) */
    REQUIRE(parse("x:1|ms|#worker:host:8080", &o) == 0);
    CHECK_SLICE(o.worker, o.worker_len, "host:8080");

    /* other tags are not inspected: UTF-8 and quotes there are fine */
    REQUIRE(parse("x:1|ms|#city:Z\xc3\xbcrich,q:\"a\\b\",worker:w", &o) == 0);
    CHECK_SLICE(o.worker, o.worker_len, "w");

    /* printable ASCII with spaces and punctuation is a valid label */
    REQUIRE(parse("x:1|ms|#worker:my worker (eu-1)!", &o) == 0);
    CHECK_SLICE(o.worker, o.worker_len, "my worker (eu-1)!");

    /* tags split over two sections */
    REQUIRE(parse("x:1|ms|#worker:w|#version:v", &o) == 0);
    CHECK_SLICE(o.version, o.version_len, "v");
}

TEST(values)
{
    struct statsd_obs o;
    static const struct {
        const char *line;
        uint64_t ns;
    } ok[] = {
        {"x:0|ms|#worker:w", 0},
        {"x:1|ms|#worker:w", 1000000},
        {"x:0.000001|ms|#worker:w", 1},
        {"x:1.0000004|ms|#worker:w", 1000000}, /* 7th digit rounds down */
        {"x:1.0000005|ms|#worker:w", 1000001}, /* and up */
        {"x:0.9999999|ms|#worker:w", 1000000}, /* carrying into the ms */
        {"x:.5|ms|#worker:w", 500000},
        {"x:5.|ms|#worker:w", 5000000},
        {"x:007.250|ms|#worker:w", 7250000},
        {"x:86400000|ms|#worker:w", 86400000000000ull}, /* the cap itself */
        {"x:86400000.0000004|ms|#worker:w", 86400000000000ull},
        {"x:1.12345678901234567890123|ms|#worker:w", 1123457},
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(ok); i++) {
        int rc = parse(ok[i].line, &o);
        if (rc != 0 || o.value_ns != ok[i].ns) {
            fprintf(stderr, "     %s: rc %d value %" PRIu64 "\n", ok[i].line, rc, o.value_ns);
            CHECK(0);
        }
    }
}

TEST(sample_rates)
{
    struct statsd_obs o;
    static const struct {
        const char *rate;
        uint64_t count;
    } ok[] = {
        {"1", 1},
        {"1.0", 1},
        {"1.000", 1},
        {"0.5", 2},
        {".5", 2},
        {"0.4", 3},
        {"0.3", 3},
        {"0.25", 4},
        {"0.1", 10},
        {"0.01", 100},
        {"0.001", 1000},
        {"0.000001", 1000000},
        {"0.0000001", 1000000},
        {"0.000000000000000000000000001", 1000000},
        {"0.7", 1},
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(ok); i++) {
        char line[128];
        snprintf(line, sizeof(line), "x:1|ms|@%s|#worker:w", ok[i].rate);
        int rc = parse(line, &o);
        if (rc != 0 || o.count != ok[i].count) {
            fprintf(stderr, "     %s: rc %d count %" PRIu64 "\n", line, rc, o.count);
            CHECK(0);
        }
    }
}

TEST(sections)
{
    struct statsd_obs o;
    /* unknown sections (container id, timestamp, external data, empty) are
     * ignored wherever they are */
    CHECK_EQ_INT(parse("x:1|ms|#worker:w|c:83f6a5b1e2|T1700000000", &o), 0);
    CHECK_EQ_INT(parse("x:1|ms|T1700000000|@0.5|c:abc|#worker:w|e:it-123", &o), 0);
    CHECK_EQ_INT(o.count, 2);
    CHECK_EQ_INT(parse("x:1|ms||#worker:w|", &o), 0);
    CHECK_EQ_INT(parse("x:1|ms|#worker:w|", &o), 0);
    CHECK_EQ_INT(parse("x:1|ms|#,,worker:w,", &o), 0);
}

TEST(custom_tag_names)
{
    struct statsd_tags names = {"service", "rev"};
    struct statsd_obs o;
    const char *l = "x:2|ms|#worker:ignored,rev:abc123,service:checkout";
    REQUIRE(statsd_parse_line(l, strlen(l), &names, &o) == 0);
    CHECK_SLICE(o.worker, o.worker_len, "checkout");
    CHECK_SLICE(o.version, o.version_len, "abc123");
    l = "x:2|ms|#worker:w,version:v";
    CHECK_EQ_INT(statsd_parse_line(l, strlen(l), &names, &o), -ENOENT);
    /* one name given, the other default */
    struct statsd_tags half = {"service", NULL};
    l = "x:2|ms|#service:s,version:v";
    REQUIRE(statsd_parse_line(l, strlen(l), &half, &o) == 0);
    CHECK_SLICE(o.version, o.version_len, "v");
}

struct bad {
    const char *line;
    int rc;
};

static const struct bad bad_lines[] = {
    /* valid DogStatsD, not latency: ignored */
    {"x:1|c|#worker:w", -ENOTSUP},
    {"x:1|c", -ENOTSUP},
    {"x:-3|g|#worker:w", -ENOTSUP},
    {"x:+3|g", -ENOTSUP},
    {"users.online:someone|s|#worker:w", -ENOTSUP},
    {"x:1|c|@0.1|#worker:w,version:1", -ENOTSUP},
    {"_e{5,4}:title|text|#worker:w", -ENOTSUP},
    {"_sc|redis.can_connect|0|#worker:w", -ENOTSUP},
    /* cannot be attributed */
    {"x:1|ms", -ENOENT},
    {"x:1|ms|@0.5", -ENOENT},
    {"x:1|ms|#version:v", -ENOENT},
    {"x:1|ms|#worker", -ENOENT},
    {"x:1|ms|#worker:", -ENOENT},
    {"x:1|ms|#workers:w", -ENOENT},
    {"x:1|ms|#worke:w", -ENOENT},
    {"x:1|ms|#Worker:w", -ENOENT},
    {"x:1|ms|worker:w", -ENOENT}, /* not a tag section */
    /* out of range */
    {"x:86400001|ms|#worker:w", -ERANGE},
    {"x:86400000.000001|ms|#worker:w", -ERANGE},
    {"x:86400000.0000005|ms|#worker:w", -ERANGE},
    {"x:99999999999999999999999999|ms|#worker:w", -ERANGE},
    {"x:1|ms|@0|#worker:w", -ERANGE},
    {"x:1|ms|@0.000|#worker:w", -ERANGE},
    {"x:1|ms|@1.5|#worker:w", -ERANGE},
    {"x:1|ms|@2|#worker:w", -ERANGE},
    {"x:1|ms|@10|#worker:w", -ERANGE},
    {"x:1|ms|@1.00000000000000000001|#worker:w", -ERANGE},
    /* bytes that cannot be a label, or a name */
    {"x:1|ms|#worker:a\"b", -EILSEQ},
    {"x:1|ms|#worker:a\\b", -EILSEQ},
    {"x:1|ms|#worker:a\tb", -EILSEQ},
    {"x:1|ms|#worker:a\x7f", -EILSEQ},
    {"x:1|ms|#worker:caf\xc3\xa9", -EILSEQ},
    {"x:1|ms|#worker:w,version:v\x01", -EILSEQ},
    {"x:1|ms|#worker:w,version:\"1\"", -EILSEQ},
    {"my metric:1|ms|#worker:w", -EILSEQ},
    {"m\x01:1|ms|#worker:w", -EILSEQ},
    {"caf\xc3\xa9:1|ms|#worker:w", -EILSEQ},
    /* malformed */
    {"x", -EINVAL},
    {"x:1", -EINVAL},
    {"x:1|", -EINVAL},
    {":1|ms|#worker:w", -EINVAL},
    {"x:|ms|#worker:w", -EINVAL},
    {"x:1|xx|#worker:w", -EINVAL},
    {"x:1|MS|#worker:w", -EINVAL},
    {"x:1|m|#worker:w", -EINVAL},
    {"x:1|mss|#worker:w", -EINVAL},
    {"x:1||ms|#worker:w", -EINVAL},
    {"x:-1|ms|#worker:w", -EINVAL},
    {"x:+1|ms|#worker:w", -EINVAL},
    {"x:1e3|ms|#worker:w", -EINVAL},
    {"x:1E3|ms|#worker:w", -EINVAL},
    {"x:nan|ms|#worker:w", -EINVAL},
    {"x:inf|ms|#worker:w", -EINVAL},
    {"x:0x10|ms|#worker:w", -EINVAL},
    {"x:1.2.3|ms|#worker:w", -EINVAL},
    {"x:.|ms|#worker:w", -EINVAL},
    {"x: 1|ms|#worker:w", -EINVAL},
    {"x:1 |ms|#worker:w", -EINVAL},
    {"x:1,5|ms|#worker:w", -EINVAL},
    {"x:1:2:3|d|#worker:w", -EINVAL}, /* packed values (DogStatsD 1.1): not taken */
    {"x:1|ms|@|#worker:w", -EINVAL},
    {"x:1|ms|@abc|#worker:w", -EINVAL},
    {"x:1|ms|@-0.5|#worker:w", -EINVAL},
    {"x:1|ms|@1e-2|#worker:w", -EINVAL},
    {"x:1|ms|@0.5|@0.5|#worker:w", -EINVAL},
    {"x:1|ms|#worker:a,worker:b", -EINVAL},
    {"x:1|ms|#worker:a|#worker:a", -EINVAL},
    {"x:1|ms|#worker:w,version:1,version:2", -EINVAL},
    {"a|b:1|ms|#worker:w", -EINVAL},
    {"x|ms", -EINVAL},
};

TEST(rejections)
{
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(bad_lines); i++) {
        struct statsd_obs o;
        memset(&o, 0xa5, sizeof(o));
        struct statsd_obs before = o;
        int rc = parse(bad_lines[i].line, &o);
        if (rc != bad_lines[i].rc) {
            fprintf(stderr, "     \"%s\": got %d (%s), want %d (%s)\n", bad_lines[i].line, rc,
                    isoprof_errname(rc), bad_lines[i].rc, isoprof_errname(bad_lines[i].rc));
            CHECK(0);
        }
        CHECK(memcmp(&o, &before, sizeof(o)) == 0); /* out untouched on failure */
    }
    struct statsd_obs o;
    CHECK_EQ_INT(statsd_parse_line("", 0, NULL, &o), -EINVAL);
    /* a NUL byte is just a byte: in the name, the value, a label */
    static const char nul_name[] = "a\0b:1|ms|#worker:w";
    CHECK_EQ_INT(statsd_parse_line(nul_name, sizeof(nul_name) - 1, NULL, &o), -EILSEQ);
    static const char nul_value[] = "a:1\0|ms|#worker:w";
    CHECK_EQ_INT(statsd_parse_line(nul_value, sizeof(nul_value) - 1, NULL, &o), -EINVAL);
    static const char nul_label[] = "a:1|ms|#worker:w\0x";
    CHECK_EQ_INT(statsd_parse_line(nul_label, sizeof(nul_label) - 1, NULL, &o), -EILSEQ);
}

TEST(size_limits)
{
    static char line[4096];
    struct statsd_obs o;
    /* name: 200 bytes accepted, 201 rejected */
    memset(line, 'n', 200);
    memcpy(line + 200, ":1|ms|#worker:w", sizeof(":1|ms|#worker:w"));
    CHECK_EQ_INT(parse(line, &o), 0);
    CHECK_EQ_INT(o.name_len, 200);
    memset(line, 'n', 201);
    memcpy(line + 201, ":1|ms|#worker:w", sizeof(":1|ms|#worker:w"));
    CHECK_EQ_INT(parse(line, &o), ISOPROF_ETOOBIG);

    /* worker and version values: 255 accepted, 256 rejected */
    int n = snprintf(line, sizeof(line), "x:1|ms|#version:v,worker:");
    memset(line + n, 'w', 255);
    line[n + 255] = '\0';
    CHECK_EQ_INT(parse(line, &o), 0);
    CHECK_EQ_INT(o.worker_len, 255);
    line[n + 255] = 'w';
    line[n + 256] = '\0';
    CHECK_EQ_INT(parse(line, &o), ISOPROF_ETOOBIG);
    n = snprintf(line, sizeof(line), "x:1|ms|#worker:w,version:");
    memset(line + n, 'v', 256);
    line[n + 256] = '\0';
    CHECK_EQ_INT(parse(line, &o), ISOPROF_ETOOBIG);
    line[n + 255] = '\0';
    CHECK_EQ_INT(parse(line, &o), 0);
    CHECK_EQ_INT(o.version_len, 255);

    /* the line: 1024 bytes accepted, 1025 rejected before anything else */
    n = snprintf(line, sizeof(line), "x:1|ms|#worker:w,pad:");
    memset(line + n, 'p', 1024 - (size_t)n);
    line[1024] = '\0';
    CHECK_EQ_INT(parse(line, &o), 0);
    line[1024] = 'p';
    line[1025] = '\0';
    CHECK_EQ_INT(parse(line, &o), ISOPROF_ETOOBIG);
    memcpy(line, "x:1|c|", 6); /* even a counter */
    CHECK_EQ_INT(parse(line, &o), ISOPROF_ETOOBIG);
}

/* --- the datagram splitter --- */

struct got {
    int n;
    char names[16][32];
    uint64_t values[16];
    char workers[16][32];
    char versions[16][32];
};

static void got_on_obs(const struct statsd_obs *o, void *arg)
{
    struct got *g = arg;
    if (g->n >= 16)
        return;
    snprintf(g->names[g->n], sizeof(g->names[0]), "%.*s", (int)o->name_len, o->name);
    snprintf(g->workers[g->n], sizeof(g->workers[0]), "%.*s", (int)o->worker_len, o->worker);
    snprintf(g->versions[g->n], sizeof(g->versions[0]), "%.*s", (int)o->version_len, o->version);
    g->values[g->n] = o->value_ns;
    g->n++;
}

TEST(datagram_lines)
{
    static const char dg[] = "a:1|ms|#worker:w\n"
                             "b:2.5|h|#worker:w2,version:v\r\n"
                             "\n"
                             "\r\n"
                             "c:1|c|#worker:w\n"
                             "bad line\n"
                             "d:1|ms\n"
                             "e:7|d|#worker:last"; /* no trailing newline */
    struct got g = {0};
    struct statsd_counts c = {0};
    statsd_parse_datagram(dg, sizeof(dg) - 1, NULL, got_on_obs, &g, &c);
    CHECK_EQ_INT(c.datagrams, 1);
    CHECK_EQ_INT(c.accepted, 3);
    CHECK_EQ_INT(c.ignored, 1);
    CHECK_EQ_INT(c.unattributed, 1);
    CHECK_EQ_INT(c.garbage, 1);
    REQUIRE(g.n == 3);
    CHECK_STR(g.names[0], "a");
    CHECK_STR(g.names[1], "b");
    CHECK_STR(g.versions[1], "v"); /* the '\r' is not part of the line */
    CHECK_EQ_INT(g.values[1], 2500000);
    CHECK_STR(g.workers[2], "last");

    /* counts accumulate; an empty datagram is a datagram without lines */
    statsd_parse_datagram("", 0, NULL, got_on_obs, &g, &c);
    statsd_parse_datagram("\n\n\r\n", 4, NULL, got_on_obs, &g, &c);
    CHECK_EQ_INT(c.datagrams, 3);
    CHECK_EQ_INT(c.accepted + c.ignored + c.unattributed + c.garbage, 6);

    /* counts may be NULL */
    statsd_parse_datagram("z:1|ms|#worker:w", 16, NULL, got_on_obs, &g, NULL);
    CHECK_EQ_INT(g.n, 4);
}

TEST(datagram_oversized_line)
{
    static char dg[4096];
    size_t n = 0;
    n += (size_t)snprintf(dg + n, sizeof(dg) - n, "a:1|ms|#worker:w\n");
    n += (size_t)snprintf(dg + n, sizeof(dg) - n, "b:1|ms|#worker:w,pad:");
    memset(dg + n, 'p', 2000);
    n += 2000;
    dg[n++] = '\n';
    n += (size_t)snprintf(dg + n, sizeof(dg) - n, "c:1|ms|#worker:w\n");
    struct got g = {0};
    struct statsd_counts c = {0};
    statsd_parse_datagram(dg, n, NULL, got_on_obs, &g, &c);
    CHECK_EQ_INT(c.accepted, 2);
    CHECK_EQ_INT(c.garbage, 1);
    CHECK_STR(g.names[1], "c");
}

/* --- the UDP listener --- */

struct lctx {
    uv_loop_t *loop;
    struct statsd *s;
    uv_udp_t sender;
    uv_timer_t watchdog, poll;
    int lines;        /* observations received */
    int want_lines;   /* stop once this many arrived ... */
    uint64_t want_dg; /* ... and this many datagrams were counted */
    int closed;       /* statsd_close's done ran */
    int timed_out;
    int close_in_cb; /* close the listener from inside the first callback */
    int batches;     /* flood: batches still to send */
    uint64_t sent;   /* flood: datagrams sent so far */
    struct sockaddr_in dst;
    unsigned long allocs_before;
    char last_worker[32];
};

static void lctx_on_done(void *arg)
{
    struct lctx *c = arg;
    c->closed++;
}

static void lctx_finish(struct lctx *c)
{
    if (c->s == NULL)
        return;
    statsd_close(c->s, lctx_on_done, c);
    c->s = NULL;
    uv_close((uv_handle_t *)&c->sender, NULL);
    uv_close((uv_handle_t *)&c->watchdog, NULL);
    uv_close((uv_handle_t *)&c->poll, NULL);
}

static void lctx_check_done(struct lctx *c)
{
    if (c->s != NULL && c->lines >= c->want_lines && statsd_counts(c->s).datagrams >= c->want_dg &&
        c->batches == 0)
        lctx_finish(c);
}

static void lctx_on_obs(const struct statsd_obs *o, void *arg)
{
    struct lctx *c = arg;
    c->lines++;
    snprintf(c->last_worker, sizeof(c->last_worker), "%.*s", (int)o->worker_len, o->worker);
    if (c->close_in_cb)
        lctx_finish(c);
}

static void lctx_on_watchdog(uv_timer_t *t)
{
    struct lctx *c = t->data;
    c->timed_out = 1;
    lctx_finish(c);
}

static void lctx_on_poll(uv_timer_t *t)
{
    lctx_check_done(t->data);
}

static void lctx_send(struct lctx *c, const char *data, size_t len)
{
    uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
    int rc = uv_udp_try_send(&c->sender, &b, 1, (const struct sockaddr *)&c->dst);
    if (rc != (int)len) {
        fprintf(stderr, "     uv_udp_try_send: %s\n", uv_strerror(rc));
        abort();
    }
    c->sent++;
}

static int lctx_start(struct lctx *c, uv_loop_t *loop, const struct statsd_tags *names)
{
    memset(c, 0, sizeof(*c));
    c->loop = loop;
    char *why = NULL;
    int rc = statsd_listen(loop, "127.0.0.1:0", names, lctx_on_obs, c, &c->s, &why);
    if (rc != 0) {
        fprintf(stderr, "     statsd_listen: %s\n", why ? why : "?");
        isoprof_free(why);
        return rc;
    }
    uv_udp_init(loop, &c->sender);
    uv_timer_init(loop, &c->watchdog);
    uv_timer_init(loop, &c->poll);
    c->watchdog.data = c->poll.data = c;
    uv_timer_start(&c->watchdog, lctx_on_watchdog, 10000, 0);
    uv_timer_start(&c->poll, lctx_on_poll, 1, 1);
    uv_ip4_addr("127.0.0.1", statsd_port(c->s), &c->dst);
    return 0;
}

TEST(loopback)
{
    uv_loop_t loop;
    REQUIRE(uv_loop_init(&loop) == 0);
    struct lctx c;
    REQUIRE(lctx_start(&c, &loop, NULL) == 0);
    CHECK(statsd_port(c.s) != 0);

    static const char d1[] = "api.latency:12|ms|#worker:api,version:v1\n"
                             "api.latency:15|ms|@0.5|#worker:api,version:v1\n";
    static const char d2[] = "garbage\nreq.count:1|c|#worker:api\nx:1|ms\n";
    static const char d3[] = "db.latency:3.25|d|#worker:db";
    lctx_send(&c, d1, sizeof(d1) - 1);
    lctx_send(&c, d2, sizeof(d2) - 1);
    lctx_send(&c, d3, sizeof(d3) - 1);
    lctx_send(&c, "", 0); /* an empty datagram */
    /* a big datagram: 600 lines, about 24 KiB */
    static char big[65000];
    size_t n = 0;
    for (int i = 0; i < 600; i++)
        n += (size_t)snprintf(big + n, sizeof(big) - n, "bulk.latency:%d.5|ms|#worker:bulk\n", i);
    lctx_send(&c, big, n);
    c.want_lines = 3 + 600;
    c.want_dg = 5;
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(!c.timed_out);
    CHECK_EQ_INT(c.closed, 1);
    CHECK_EQ_INT(c.lines, 603);
    CHECK_STR(c.last_worker, "bulk");
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

/* The counters, read just before closing. */
static struct statsd_counts counts_seen;

static void flood_on_poll(uv_timer_t *t)
{
    struct lctx *c = t->data;
    if (c->s == NULL)
        return;
    /* Send the next batch once the previous one has been counted, so that
     * the socket buffer never overflows and every datagram is seen. */
    if (c->batches > 0 && statsd_counts(c->s).datagrams == c->sent) {
        static char junk[1024];
        for (int i = 0; i < 20; i++) {
            int n = snprintf(junk, sizeof(junk),
                             "\x01\x02 not statsd %d\n%s\nx:1|ms|#worker:a\"b\n:|\n@@@|#\n"
                             "y:1|g|#worker:w\nz:1|ms\n",
                             i, "abc:def|ghi|@jkl|#mno");
            lctx_send(c, junk, (size_t)n);
        }
        if (--c->batches == 0) {
            static const char ok[] = "fine:1|ms|#worker:survivor";
            lctx_send(c, ok, sizeof(ok) - 1);
        }
    }
    if (c->batches == 0 && c->lines >= 1 && statsd_counts(c->s).datagrams == c->sent) {
        counts_seen = statsd_counts(c->s);
        lctx_finish(c);
    }
}

TEST(garbage_flood)
{
    uv_loop_t loop;
    REQUIRE(uv_loop_init(&loop) == 0);
    struct lctx c;
    REQUIRE(lctx_start(&c, &loop, NULL) == 0);
    uv_timer_stop(&c.poll);
    uv_timer_start(&c.poll, flood_on_poll, 1, 1);
    c.batches = 50;
    unsigned long allocs = isoprof_alloc_count();
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(!c.timed_out);
    /* Receiving and rejecting 7000 lines allocated nothing. */
    CHECK_EQ_INT(isoprof_alloc_count(), allocs);
    CHECK_EQ_INT(counts_seen.datagrams, 50 * 20 + 1);
    CHECK_EQ_INT(counts_seen.accepted, 1);
    CHECK_EQ_INT(counts_seen.garbage, 50 * 20 * 5);
    CHECK_EQ_INT(counts_seen.ignored, 50 * 20);
    CHECK_EQ_INT(counts_seen.unattributed, 50 * 20);
    CHECK_EQ_INT(counts_seen.truncated, 0);
    CHECK_STR(c.last_worker, "survivor");
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

TEST(close_inside_callback)
{
    uv_loop_t loop;
    REQUIRE(uv_loop_init(&loop) == 0);
    struct lctx c;
    REQUIRE(lctx_start(&c, &loop, NULL) == 0);
    c.close_in_cb = 1;
    c.want_lines = 1000; /* the poll timer never finishes it: the callback does */
    static const char d[] = "a:1|ms|#worker:one\nb:1|ms|#worker:two\nc:1|ms|#worker:three\n";
    lctx_send(&c, d, sizeof(d) - 1);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(!c.timed_out);
    CHECK_EQ_INT(c.lines, 1); /* nothing after statsd_close */
    CHECK_STR(c.last_worker, "one");
    CHECK_EQ_INT(c.closed, 1);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

TEST(custom_names_listener)
{
    uv_loop_t loop;
    REQUIRE(uv_loop_init(&loop) == 0);
    struct lctx c;
    struct statsd_tags names = {"svc", "rev"};
    REQUIRE(lctx_start(&c, &loop, &names) == 0);
    static const char d[] = "a:1|ms|#worker:no\nb:1|ms|#svc:yes,rev:r1\n";
    lctx_send(&c, d, sizeof(d) - 1);
    c.want_lines = 1;
    c.want_dg = 1;
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(!c.timed_out);
    CHECK_STR(c.last_worker, "yes");
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

static void noop_obs(const struct statsd_obs *o, void *arg)
{
    (void)o;
    (void)arg;
}

static void count_done(void *arg)
{
    (*(int *)arg)++;
}

TEST(address_in_use)
{
    uv_loop_t loop;
    REQUIRE(uv_loop_init(&loop) == 0);
    struct statsd *a = NULL, *b = NULL;
    char *why = NULL;
    REQUIRE(statsd_listen(&loop, "127.0.0.1:0", NULL, noop_obs, NULL, &a, &why) == 0);
    CHECK(why == NULL);
    char addr[64], want[128];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)statsd_port(a));
    int rc = statsd_listen(&loop, addr, NULL, noop_obs, NULL, &b, &why);
    CHECK_EQ_INT(rc, -EADDRINUSE);
    snprintf(want, sizeof(want), "%s: address already in use", addr);
    CHECK_STR(why, want);
    isoprof_free(why);
    /* without a why */
    CHECK_EQ_INT(statsd_listen(&loop, addr, NULL, noop_obs, NULL, &b, NULL), -EADDRINUSE);
    int done = 0;
    statsd_close(a, count_done, &done);
    statsd_close(a, count_done, &done); /* second call before done: no-op */
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(done, 1);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

TEST(bad_addresses)
{
    static const char *bad[] = {
        "",
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:65536",
        "127.0.0.1:99999999",
        "127.0.0.1:80x",
        "127.0.0.1:-1",
        ":8125",
        "::1:8125",
        "[::1:8125",
        "[::1]8125",
        "[]:8125",
        "[127.0.0.1]:8125",
        "example.com:8125",
        "127.0.0.1x:8125",
        "1.2.3:8125",
        "[::1]:",
    };
    uv_loop_t loop;
    REQUIRE(uv_loop_init(&loop) == 0);
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(bad); i++) {
        struct statsd *s = NULL;
        char *why = NULL;
        int rc = statsd_listen(&loop, bad[i], NULL, noop_obs, NULL, &s, &why);
        if (rc != -EINVAL || why == NULL || strstr(why, "expected") == NULL) {
            fprintf(stderr, "     \"%s\": rc %d why %s\n", bad[i], rc, why ? why : "(null)");
            CHECK(0);
        }
        isoprof_free(why);
    }
    struct statsd *s = NULL;
    struct statsd_tags names = {"wor,ker", NULL};
    CHECK_EQ_INT(statsd_listen(&loop, "127.0.0.1:0", &names, noop_obs, NULL, &s, NULL), -EINVAL);
    names.worker = "";
    CHECK_EQ_INT(statsd_listen(&loop, "127.0.0.1:0", &names, noop_obs, NULL, &s, NULL), -EINVAL);
    CHECK_EQ_INT(statsd_listen(&loop, "127.0.0.1:0", NULL, NULL, NULL, &s, NULL), -EINVAL);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

TEST(other_addresses)
{
    uv_loop_t loop;
    REQUIRE(uv_loop_init(&loop) == 0);
    static const char *ok[] = {"localhost:0", "0.0.0.0:0", "[::1]:0", "[::]:0"};
    int done = 0, opened = 0;
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(ok); i++) {
        struct statsd *s = NULL;
        char *why = NULL;
        int rc = statsd_listen(&loop, ok[i], NULL, noop_obs, NULL, &s, &why);
        if (rc == -EADDRNOTAVAIL || rc == -EAFNOSUPPORT) {
            fprintf(stderr, "     %s: %s (no IPv6 here; skipped)\n", ok[i], why);
            isoprof_free(why);
            continue;
        }
        CHECK_EQ_INT(rc, 0);
        if (rc != 0) {
            isoprof_free(why);
            continue;
        }
        CHECK(statsd_port(s) != 0);
        opened++;
        statsd_close(s, count_done, &done);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(done, opened);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

TEST(listen_oom)
{
    /* Every allocation statsd_listen makes fails in turn: it returns
     * -ENOMEM (why NULL if its own allocation failed) and leaves nothing. */
    for (long n = 0; n < 8; n++) {
        uv_loop_t loop;
        REQUIRE(uv_loop_init(&loop) == 0);
        struct statsd *s = NULL;
        char *why = NULL;
        isoprof_alloc_fail_after(n);
        int rc = statsd_listen(&loop, "127.0.0.1:0", NULL, noop_obs, NULL, &s, &why);
        isoprof_alloc_fail_after(-1);
        int done = 0;
        if (rc == 0) {
            statsd_close(s, count_done, &done);
        } else {
            CHECK_EQ_INT(rc, -ENOMEM);
            isoprof_free(why);
        }
        uv_run(&loop, UV_RUN_DEFAULT);
        CHECK_EQ_INT(done, rc == 0);
        CHECK_EQ_INT(uv_loop_close(&loop), 0);
        if (rc == 0)
            break;
    }
}

int main(void)
{
    RUN(accepted_fields);
    RUN(values);
    RUN(sample_rates);
    RUN(sections);
    RUN(custom_tag_names);
    RUN(rejections);
    RUN(size_limits);
    RUN(datagram_lines);
    RUN(datagram_oversized_line);
    RUN(loopback);
    RUN(garbage_flood);
    RUN(close_inside_callback);
    RUN(custom_names_listener);
    RUN(address_in_use);
    RUN(bad_addresses);
    RUN(other_addresses);
    RUN(listen_oom);
    TEST_EXIT();
}

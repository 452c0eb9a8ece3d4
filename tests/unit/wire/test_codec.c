/*
 * test_codec.c - the wire module's pure parts: SHA-1, base64, the
 * Sec-WebSocket-Accept computation, the CDP id and method peeks,
 * cdp_param_string, and the WebSocket receive path driven through
 * ws_test_feed (upgrade response and frames, split at every byte, bad
 * input of every kind, the size cap, and an allocation-failure walk).
 */
#include "base.h"
#include "cdp.h"
#include "test.h"
#include "ws.h"

#include <errno.h>
#include <stdatomic.h>

#define KEY "dGhlIHNhbXBsZSBub25jZQ==" /* RFC 6455 section 1.3 */
#define ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
#define GOOD_101                                                                                   \
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"            \
    "Sec-WebSocket-Accept: " ACCEPT "\r\n\r\n"

static void hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void check_sha1(const void *data, size_t len, const char *want)
{
    uint8_t dig[20];
    char h[41];
    ws_sha1(data, len, dig);
    hex(dig, 20, h);
    CHECK_STR(h, want);
}

TEST(sha1_vectors)
{
    check_sha1("", 0, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    check_sha1("abc", 3, "a9993e364706816aba3e25717850c26c9cd0d89d");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_sha1(m, strlen(m), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    m = "The quick brown fox jumps over the lazy dog";
    check_sha1(m, strlen(m), "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12");
    /* lengths around the padding boundaries */
    static const struct {
        size_t n;
        const char *h;
    } as[] = {
        {55, "c1c8bbdc22796e28c0e15163d20899b65621d65a"},
        {56, "c2db330f6083854c99d4b5bfb6e8f29f201be699"},
        {63, "03f09f5b158a7a8cdad920bddc29b81c18a551f5"},
        {64, "0098ba824b5c16427bd7a1122a5a442a25ec644d"},
        {65, "11655326c708d70319be2610e8a57d9a5b959d3b"},
        {119, "ee971065aaa017e0632a8ca6c77bb3bf8b1dfc56"},
        {120, "f34c1488385346a55709ba056ddd08280dd4c6d6"},
    };
    static char a[1000000];
    memset(a, 'a', sizeof(a));
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(as); i++)
        check_sha1(a, as[i].n, as[i].h);
    check_sha1(a, sizeof(a), "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
}

TEST(base64_vectors)
{
    static const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *out[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    char buf[16];
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(in); i++) {
        size_t n = ws_base64((const uint8_t *)in[i], strlen(in[i]), buf, sizeof(buf));
        CHECK_EQ_INT(n, strlen(out[i]));
        CHECK_STR(buf, out[i]);
    }
    uint8_t bin[3] = {0xfb, 0xff, 0xbf};
    CHECK_EQ_INT(ws_base64(bin, 3, buf, sizeof(buf)), 4);
    CHECK_STR(buf, "+/+/");
    /* exactly enough room, and one byte too little */
    CHECK_EQ_INT(ws_base64((const uint8_t *)"foo", 3, buf, 5), 4);
    CHECK_EQ_INT(ws_base64((const uint8_t *)"foo", 3, buf, 4), 0);
}

TEST(accept_key)
{
    char out[29];
    ws_accept_key(KEY, out);
    CHECK_STR(out, ACCEPT);
    ws_accept_key("x3JJHMbDL1EzLkh9GBhXDw==", out); /* RFC 6455 section 4.2.2 example */
    CHECK_STR(out, "HSmrc0sMlYUkAGmm5OPpG2HaGWk=");
}

TEST(peek_id)
{
#define PEEK(s) cdp_peek_id(s, strlen(s))
    CHECK_EQ_INT(PEEK("{\"id\":42,\"result\":{}}"), 42);
    CHECK_EQ_INT(PEEK(" {\n\"id\" : 7 }"), 7);
    CHECK_EQ_INT(PEEK("{\"id\":0,\"result\":1}"), 0);
    CHECK_EQ_INT(PEEK("{\"id\":123456789012345678,\"r\":1}"), 123456789012345678LL);
    CHECK_EQ_INT(PEEK("{\"id\":1234567890123456789,\"r\":1}"), -1); /* too many digits */
    CHECK_EQ_INT(PEEK("{\"id\":012,\"r\":1}"), -1);
    CHECK_EQ_INT(PEEK("{\"id\":-1,\"r\":1}"), -1);
    CHECK_EQ_INT(PEEK("{\"id\":1.5,\"r\":1}"), -1);
    CHECK_EQ_INT(PEEK("{\"method\":\"x\",\"id\":1}"), -1);
    CHECK_EQ_INT(PEEK("{\"id\":\"1\"}"), -1);
    CHECK_EQ_INT(PEEK("[1]"), -1);
    CHECK_EQ_INT(PEEK(""), -1);
    CHECK_EQ_INT(PEEK("{\"id\":12"), -1); /* cut before the separator */
    char far[200];
    memset(far, ' ', sizeof(far));
    memcpy(far + 100, "{\"id\":1}", 9);
    CHECK_EQ_INT(cdp_peek_id(far, strlen(far)), -1); /* beyond the 64-byte peek */
#undef PEEK
}

/* cdp_peek_method on a heap copy of exactly len bytes, so that a read
 * past len is an ASan error, not a lucky look at the NUL after it. */
static int peek_method_n(const char *msg, size_t len, char *method, size_t cap)
{
    char *c = isoprof_malloc(len ? len : 1);
    if (c == NULL)
        return -2;
    memcpy(c, msg, len);
    int rc = cdp_peek_method(c, len, method, cap);
    isoprof_free(c);
    return rc;
}

TEST(peek_method)
{
    char m[CDP_METHOD_MAX + 1];
#define PM(s) peek_method_n(s, strlen(s), m, sizeof(m))
    CHECK_EQ_INT(PM("{\"method\":\"HeapProfiler.addHeapSnapshotChunk\",\"params\":{\"chunk\":"
                    "\"{\\\"snapshot\\\":\"}}"),
                 0);
    CHECK_STR(m, "HeapProfiler.addHeapSnapshotChunk");
    CHECK_EQ_INT(PM(" \t\r\n{ \n\"method\"\t:\r\n \"Deep_event.v8\" , \"params\":{}}"), 0);
    CHECK_STR(m, "Deep_event.v8");
    CHECK_EQ_INT(PM("{\"method\":\"A.b\""), 0); /* nothing after the closing quote is read */
    CHECK_STR(m, "A.b");

    /* What is not {"method":"<name>" with a name of [A-Za-z0-9._]. */
    static const char *const no[] = {
        "{\"method\":\"\",\"params\":{}}",
        "{\"method\":\"A-b\"}",
        "{\"method\":\"A b\"}",
        "{\"method\":\"A/b\"}",
        "{\"method\":\"A:b\"}",
        "{\"method\":\"A\\tb\"}",
        "{\"method\":\"A\\\"b\"}",
        "{\"method\":\"A\\u002eb\"}",
        "{\"method\":\"caf\xc3\xa9\"}",
        "{\"method\":\"A\tb\"}",
        "{\"id\":1,\"method\":\"A.b\"}",
        "{\"id\":1,\"result\":{\"method\":\"A.b\"}}",
        "{\"params\":{},\"method\":\"A.b\"}",
        "{\"method\":1}",
        "{\"method\":null}",
        "{\"method\":[\"A.b\"]}",
        "{\"Method\":\"A.b\"}",
        "{\"methods\":\"A.b\"}",
        "{method:\"A.b\"}",
        "{\"method\" \"A.b\"}",
        "{\"method\":'A.b'}",
        "[\"method\",\"A.b\"]",
        "\"method\":\"A.b\"",
        "{{\"method\":\"A.b\"}",
        "",
        "   ",
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(no); i++) {
        int rc = PM(no[i]);
        if (rc != -1)
            fprintf(stderr, "peeked a method from: %s\n", no[i]);
        CHECK_EQ_INT(rc, -1);
    }
    CHECK_EQ_INT(cdp_peek_method(NULL, 10, m, sizeof(m)), -1);

    /* A name of cap - 1 bytes fits; one more does not. */
    char name[CDP_METHOD_MAX + 2], msg[300];
    memset(name, 'n', sizeof(name));
    snprintf(msg, sizeof(msg), "{\"method\":\"%.*s\",\"params\":{}}", CDP_METHOD_MAX, name);
    CHECK_EQ_INT(PM(msg), 0);
    CHECK_EQ_INT(strlen(m), CDP_METHOD_MAX);
    snprintf(msg, sizeof(msg), "{\"method\":\"%.*s\",\"params\":{}}", CDP_METHOD_MAX + 1, name);
    CHECK_EQ_INT(PM(msg), -1);
    /* ... whatever the cap, and nothing is written past it */
    char small[8];
    memset(small, 'Z', sizeof(small));
    CHECK_EQ_INT(peek_method_n("{\"method\":\"A.b\"}", 16, small, 4), 0);
    CHECK_STR(small, "A.b");
    CHECK_EQ_INT(small[4], 'Z');
    memset(small, 'Z', sizeof(small));
    CHECK_EQ_INT(peek_method_n("{\"method\":\"A.bc\"}", 17, small, 4), -1);
    for (size_t i = 3; i < sizeof(small); i++)
        CHECK_EQ_INT(small[i], 'Z');
    CHECK_EQ_INT(peek_method_n("{\"method\":\"A\"}", 14, small, 1), -1); /* room for the NUL only */
    CHECK_EQ_INT(peek_method_n("{\"method\":\"A\"}", 14, small, 0), -1);

    /* Cut anywhere before the name's closing quote: no method. len is the
     * bound even when the bytes after it would complete the prefix. */
    const char *full = "{\"method\":\"A.b\",\"params\":{}}";
    size_t need = strlen("{\"method\":\"A.b\"");
    for (size_t cut = 0; cut <= strlen(full); cut++) {
        int want = cut >= need ? 0 : -1;
        CHECK_EQ_INT(peek_method_n(full, cut, m, sizeof(m)), want);
        CHECK_EQ_INT(cdp_peek_method(full, cut, m, sizeof(m)), want);
        if (want == 0)
            CHECK_STR(m, "A.b");
    }

    /* Only the first 256 bytes are read: whitespace can push the prefix
     * out of them. */
    char far[300];
    memset(far, ' ', sizeof(far));
    memcpy(far + 256 - need, full, strlen(full));
    CHECK_EQ_INT(peek_method_n(far, 256 - need + strlen(full), m, sizeof(m)), 0);
    CHECK_STR(m, "A.b");
    memset(far, ' ', sizeof(far));
    memcpy(far + 257 - need, full, strlen(full));
    CHECK_EQ_INT(peek_method_n(far, 257 - need + strlen(full), m, sizeof(m)), -1);
#undef PM
}

/* cdp_param_string on a heap copy of exactly len bytes. */
static int param_n(const char *raw, size_t len, const char *key, char **out, size_t *out_len)
{
    char *c = isoprof_malloc(len ? len : 1);
    if (c == NULL)
        return -ENOMEM;
    memcpy(c, raw, len);
    int rc = cdp_param_string(c, len, key, out, out_len);
    isoprof_free(c);
    return rc;
}

/* params.<key> of raw: its text, or NULL (then *rc says why). */
static char *param_of(const char *raw, const char *key, int *rc)
{
    char *out = NULL;
    size_t n = (size_t)-1;
    *rc = param_n(raw, strlen(raw), key, &out, &n);
    if (*rc == 0 && (out == NULL || n != strlen(out))) {
        fprintf(stderr, "param %s of %s: %zu bytes, \"%s\"\n", key, raw, n, out ? out : "(null)");
        *rc = -1000;
    }
    if (*rc != 0 && out != NULL) {
        fprintf(stderr, "param %s of %s: an error (%d) with output\n", key, raw, *rc);
        *rc = -1001;
    }
    return out;
}

static void check_param(const char *raw, const char *key, const char *want)
{
    int rc;
    char *got = param_of(raw, key, &rc);
    if (want == NULL) {
        if (rc != ISOPROF_EJSON)
            fprintf(stderr, "params.%s of %s: rc %d, \"%s\"\n", key, raw, rc, got ? got : "");
        CHECK_EQ_INT(rc, ISOPROF_EJSON);
    } else {
        if (rc != 0)
            fprintf(stderr, "params.%s of %s: rc %d\n", key, raw, rc);
        CHECK_EQ_INT(rc, 0);
        CHECK_STR(got, want);
    }
    isoprof_free(got);
}

TEST(param_string)
{
    /* Escapes are undone: quote, backslash, solidus, control characters,
     * \u in the BMP and a surrogate pair. */
    static const char raw[] = "{\"method\":\"HeapProfiler.addHeapSnapshotChunk\",\"params\":{"
                              "\"chunk\":\"a\\\"b\\\\c\\/d\\n\\t\\u0041\\u00e9\\u20ac"
                              "\\ud83d\\ude00z\"}}";
    static const char want[] = "a\"b\\c/d\n\tA\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z";
    char *out = NULL;
    size_t n = 0;
    CHECK_EQ_INT(param_n(raw, sizeof(raw) - 1, "chunk", &out, &n), 0);
    REQUIRE(out != NULL);
    CHECK_EQ_INT(n, sizeof(want) - 1);
    CHECK(n == sizeof(want) - 1 && memcmp(out, want, n) == 0);
    CHECK_EQ_INT(out[n], 0);
    isoprof_free(out);
    out = NULL;
    CHECK_EQ_INT(cdp_param_string(raw, sizeof(raw) - 1, "chunk", &out, NULL), 0); /* no length */
    CHECK(out != NULL && memcmp(out, want, 4) == 0);
    isoprof_free(out);

    check_param("{\"params\":{\"chunk\":\"\"}}", "chunk", "");
    check_param(" {\"method\":\"X\" , \"params\" : { \"a\":1, \"chunk\" : \"x\" } } ", "chunk",
                "x");
    /* keys are compared after unescaping, as JSON means them */
    check_param("{\"p\\u0061rams\":{\"ch\\u0075nk\":\"x\"}}", "chunk", "x");
    /* the first match wins */
    check_param("{\"params\":{\"chunk\":\"first\",\"chunk\":\"second\"}}", "chunk", "first");
    /* only params.<key>: neither a top-level key nor one nested deeper,
     * however they are placed around the right one */
    check_param("{\"chunk\":\"top\",\"params\":{\"x\":{\"chunk\":\"deep\"},\"y\":[{\"chunk\":"
                "\"arr\"}],\"z\":[\"s\",[\"t\"]],\"chunk\":\"right\"},\"chunk\":\"after\"}",
                "chunk", "right");
    check_param("{\"params\":{\"chunkx\":\"a\",\"chun\":\"b\",\"Chunk\":\"c\"}}", "chunk", NULL);
    check_param("{\"method\":\"m\",\"params\":{\"message\":\"x\"}}", "chunk", NULL);
    check_param("{\"params\":{}}", "chunk", NULL);
    check_param("{\"method\":\"m\"}", "chunk", NULL);
    check_param("{\"chunk\":\"top\",\"params\":{}}", "chunk", NULL);
    check_param("{\"params\":{},\"chunk\":\"top\"}", "chunk", NULL);
    check_param("{\"params\":{\"x\":{\"chunk\":\"deep\"}}}", "chunk", NULL);
    check_param("{\"params\":{\"x\":{\"params\":{\"chunk\":\"deep\"}}}}", "chunk", NULL);
    check_param("{\"x\":{\"params\":{\"chunk\":\"deep\"}}}", "chunk", NULL);
    check_param("{\"params\":\"chunk\",\"x\":{\"chunk\":\"no\"}}", "chunk", NULL);
    check_param("{\"params\":[{\"chunk\":\"in an array\"}]}", "chunk", NULL);
    check_param("[{\"params\":{\"chunk\":\"in an array\"}}]", "chunk", NULL);
    /* a value that is not a string */
    check_param("{\"params\":{\"chunk\":1}}", "chunk", NULL);
    check_param("{\"params\":{\"chunk\":null}}", "chunk", NULL);
    check_param("{\"params\":{\"chunk\":true}}", "chunk", NULL);
    check_param("{\"params\":{\"chunk\":{\"a\":\"b\"}}}", "chunk", NULL);
    check_param("{\"params\":{\"chunk\":{\"chunk\":\"b\"}}}", "chunk", NULL);
    check_param("{\"params\":{\"chunk\":[\"s\"]}}", "chunk", NULL);
    check_param("{\"params\":{\"chunk\":[1,\"s\"]}}", "chunk", NULL);
    /* not JSON, even when the string was already seen */
    check_param("", "chunk", NULL);
    check_param("not json", "chunk", NULL);
    check_param("{\"params\":{\"chunk\":\"x\"}", "chunk", NULL);
    check_param("{\"params\":{\"chunk\":\"x\"}} {}", "chunk", NULL);
    check_param("{\"params\":{\"chunk\":\"x\"},}", "chunk", NULL);
    check_param("{\"params\":{\"chunk\":\"x\\q\"}}", "chunk", NULL);
    check_param("{\"params\":{\"chunk\":\"x\\u12\"}}", "chunk", NULL);
    check_param("{\"params\":{\"chunk\":\"x\xff\"}}", "chunk", NULL);
    check_param("{\"params\":{\"chunk\":\"x\ny\"}}", "chunk", NULL);

    /* len is the bound: every cut of a good message is no message */
    const char *full = "{\"params\":{\"chunk\":\"abc\"}}";
    for (size_t cut = 0; cut < strlen(full); cut++) {
        out = NULL;
        CHECK_EQ_INT(param_n(full, cut, "chunk", &out, &n), ISOPROF_EJSON);
        CHECK(out == NULL);
        CHECK_EQ_INT(cdp_param_string(full, cut, "chunk", &out, &n), ISOPROF_EJSON);
        CHECK(out == NULL);
    }

    /* cdp_unwrap_worker is params.message */
    const char *env = "{\"method\":\"NodeWorker.receivedMessageFromWorker\",\"params\":{"
                      "\"sessionId\":\"1\",\"message\":\"{\\\"id\\\":3,\\\"result\\\":{}}\"}}";
    char *a = NULL, *b = NULL;
    size_t al = 0, bl = 0;
    CHECK_EQ_INT(cdp_unwrap_worker(env, strlen(env), &a, &al), 0);
    CHECK_EQ_INT(cdp_param_string(env, strlen(env), "message", &b, &bl), 0);
    CHECK(a != NULL && b != NULL && al == bl && strcmp(a, b) == 0);
    CHECK_STR(a, "{\"id\":3,\"result\":{}}");
    isoprof_free(a);
    isoprof_free(b);
    check_param(env, "sessionId", "1");

    out = NULL;
    CHECK_EQ_INT(cdp_param_string(NULL, 1, "chunk", &out, &n), -EINVAL);
    CHECK_EQ_INT(cdp_param_string(full, strlen(full), NULL, &out, &n), -EINVAL);
    CHECK_EQ_INT(cdp_param_string(full, strlen(full), "chunk", NULL, &n), -EINVAL);
    CHECK(out == NULL);

    /* out of memory for the copy: -ENOMEM, nothing leaks */
    int ok = 0;
    for (long f = 0; f < 20 && !ok; f++) {
        out = NULL;
        isoprof_alloc_fail_after(f);
        int rc = cdp_param_string(raw, sizeof(raw) - 1, "chunk", &out, &n);
        isoprof_alloc_fail_after(-1);
        if (rc == 0) {
            ok = 1;
            CHECK(out != NULL && n == sizeof(want) - 1 && memcmp(out, want, n) == 0);
            isoprof_free(out);
        } else {
            CHECK_EQ_INT(rc, -ENOMEM);
            CHECK(out == NULL);
        }
    }
    CHECK(ok);
}

/* \u0000 in the string: *out_len bytes of *out are the text, NUL and all,
 * and out[*out_len] is the terminator. (If the copy stopped at the NUL,
 * reading out[0..out_len) runs past the buffer: under ASan this test then
 * aborts with a heap-buffer-overflow, which is why it runs last.) */
TEST(param_string_nul)
{
    static const char raw[] = "{\"params\":{\"chunk\":\"ab\\u0000cd\"}}";
    char *out = NULL;
    size_t n = 0;
    REQUIRE(param_n(raw, sizeof(raw) - 1, "chunk", &out, &n) == 0);
    CHECK_EQ_INT(n, 5);
    CHECK_EQ_INT(strlen(out), 2);
    if (n == 5) {
        CHECK(memcmp(out, "ab\0cd", 6) == 0);
        CHECK_EQ_INT(out[n], 0);
    }
    isoprof_free(out);
}

/* --- the receive path through ws_test_feed --- */

struct sink {
    int n;
    char *msg[16];
    size_t len[16];
    size_t total;
    void *user;
};

static void sink_on_message(struct ws_client *ws, char *data, size_t len, void *arg)
{
    (void)ws;
    struct sink *k = arg;
    if (data[len] != '\0')
        k->total = (size_t)-1; /* not NUL-terminated: make every check fail */
    if (k->n < 16) {
        k->msg[k->n] = data;
        k->len[k->n] = len;
    } else {
        ws_msg_free(data);
    }
    k->n++;
    k->total += len;
}

static void sink_free(struct sink *k)
{
    for (int i = 0; i < k->n && i < 16; i++)
        ws_msg_free(k->msg[i]);
    memset(k, 0, sizeof(*k));
}

/* A server frame (unmasked unless mask is set) into out; returns its size. */
static size_t frame(uint8_t *out, int fin, int op, const void *p, size_t n)
{
    size_t h = 0;
    out[h++] = (uint8_t)((fin ? 0x80 : 0) | op);
    if (n < 126) {
        out[h++] = (uint8_t)n;
    } else if (n < 65536) {
        out[h++] = 126;
        out[h++] = (uint8_t)(n >> 8);
        out[h++] = (uint8_t)n;
    } else {
        out[h++] = 127;
        for (int i = 7; i >= 0; i--)
            out[h++] = (uint8_t)((uint64_t)n >> (8 * i));
    }
    if (p != NULL)
        memcpy(out + h, p, n);
    return h + n;
}

static struct ws_client *open_client(size_t cap, struct sink *k)
{
    struct ws_client *ws = ws_test_new(cap, KEY, sink_on_message, k);
    if (ws != NULL && ws_test_feed(ws, (const uint8_t *)GOOD_101, strlen(GOOD_101)) != 0) {
        ws_test_free(ws);
        return NULL;
    }
    return ws;
}

/* Clients that share a budget: partial messages are charged as they grow,
 * the one that would take the budget past its limit is refused with
 * ISOPROF_ETOOBIG (its session would be dropped), and delivered messages
 * carry their charge until ws_msg_free. */
TEST(shared_budget)
{
    struct ws_budget b = {.limit = 450u << 10}; /* two 200 KiB buffers, not three */
    struct sink k[3] = {{0}};
    struct ws_client *ws[3];
    static uint8_t part[128u << 10];
    uint8_t hdr[16];
    memset(part, 'a', sizeof(part));
    for (int i = 0; i < 3; i++) {
        ws[i] = open_client(0, &k[i]);
        REQUIRE(ws[i] != NULL);
        ws_test_set_budget(ws[i], &b, NULL);
    }
    /* Each announces 200 KiB and sends 128 KiB of it. */
    size_t h = frame(hdr, 1, 1, NULL, 200u << 10) - (200u << 10);
    CHECK_EQ_INT(ws_test_feed(ws[0], hdr, h), 0);
    CHECK_EQ_INT(ws_test_feed(ws[0], part, sizeof(part)), 0);
    CHECK(atomic_load(&b.used) >= sizeof(part));
    CHECK_EQ_INT(ws_test_feed(ws[1], hdr, h), 0);
    CHECK_EQ_INT(ws_test_feed(ws[1], part, sizeof(part)), 0);
    CHECK_EQ_INT(ws_test_feed(ws[2], hdr, h), 0);
    CHECK_EQ_INT(ws_test_feed(ws[2], part, sizeof(part)), ISOPROF_ETOOBIG);
    CHECK(atomic_load(&b.refused) == 1);
    CHECK(atomic_load(&b.used) <= b.limit);
    /* The first message completes: it is delivered with its charge. */
    static uint8_t rest[72u << 10];
    memset(rest, 'b', sizeof(rest));
    CHECK_EQ_INT(ws_test_feed(ws[0], rest, sizeof(rest)), 0);
    CHECK_EQ_INT(k[0].n, 1);
    size_t held = atomic_load(&b.used);
    CHECK(held >= (200u << 10));
    ws_test_free(ws[1]); /* its partial message is given back */
    ws_test_free(ws[2]);
    CHECK(atomic_load(&b.used) < held);
    sink_free(&k[0]); /* frees the delivered message */
    ws_test_free(ws[0]);
    CHECK(atomic_load(&b.used) == 0);
    CHECK(atomic_load(&b.peak) <= b.limit);
}

struct dropped {
    int n;
    uint64_t len;
    char head[WS_DROP_HEAD + 1];
};

static void on_dropped(struct ws_client *ws, const char *head, size_t head_len, uint64_t len,
                       void *arg)
{
    (void)ws;
    struct dropped *d = ((struct sink *)arg)->user;
    d->n++;
    d->len = len;
    memcpy(d->head, head, head_len);
    d->head[head_len] = '\0';
}

/* With on_dropped, a message the budget cannot hold is read and dropped,
 * reported with its first bytes and length, and the connection carries on;
 * a big message cannot use the reserve that small ones can. */
TEST(budget_drops_message)
{
    struct ws_budget b = {.limit = 600u << 10, .reserve = 300u << 10};
    struct dropped d = {0};
    struct sink k = {0};
    k.user = &d;
    struct ws_client *ws = open_client(0, &k);
    REQUIRE(ws != NULL);
    ws_test_set_budget(ws, &b, on_dropped);
    /* 400 KiB: over WS_SMALL_MESSAGE, so only 300 KiB of the budget is its. */
    static uint8_t big[(400u << 10) + 16];
    size_t n = frame(big, 1, 1, NULL, 400u << 10);
    size_t h = n - (400u << 10);
    memset(big + h, ' ', 400u << 10);
    memcpy(big + h, "{\"id\":7,\"result\":", 18);
    CHECK_EQ_INT(ws_test_feed(ws, big, n), 0);
    CHECK_EQ_INT(d.n, 1);
    CHECK(d.len == (400u << 10));
    CHECK(strncmp(d.head, "{\"id\":7,\"result\":", 18) == 0);
    CHECK(atomic_load(&b.used) == 0);
    /* 200 KiB fits, reserve and all. */
    static uint8_t small[(200u << 10) + 16];
    n = frame(small, 1, 1, NULL, 200u << 10);
    memset(small + n - (200u << 10), 'x', 200u << 10);
    CHECK_EQ_INT(ws_test_feed(ws, small, n), 0);
    CHECK_EQ_INT(k.n, 1);
    CHECK(k.n == 1 && k.len[0] == (200u << 10));
    sink_free(&k);
    ws_test_free(ws);
    CHECK(atomic_load(&b.used) == 0);
}

TEST(handshake_split_everywhere)
{
    uint8_t buf[512];
    size_t n = strlen(GOOD_101);
    memcpy(buf, GOOD_101, n);
    n += frame(buf + n, 1, 1, "hello", 5);
    for (size_t cut = 0; cut <= n; cut++) {
        struct sink k = {0};
        struct ws_client *ws = ws_test_new(0, KEY, sink_on_message, &k);
        REQUIRE(ws != NULL);
        CHECK_EQ_INT(ws_test_feed(ws, buf, cut), 0);
        CHECK_EQ_INT(ws_test_feed(ws, buf + cut, n - cut), 0);
        CHECK_EQ_INT(k.n, 1);
        if (k.n == 1)
            CHECK_STR(k.msg[0], "hello");
        sink_free(&k);
        ws_test_free(ws);
    }
}

static int feed_response(const char *resp)
{
    struct sink k = {0};
    struct ws_client *ws = ws_test_new(0, KEY, sink_on_message, &k);
    if (ws == NULL)
        return -ENOMEM;
    int rc = ws_test_feed(ws, (const uint8_t *)resp, strlen(resp));
    ws_test_free(ws);
    sink_free(&k);
    return rc;
}

TEST(handshake_checks)
{
    CHECK_EQ_INT(feed_response(GOOD_101), 0);
    CHECK_EQ_INT(feed_response("HTTP/1.0 101 OK\r\nupgrade: WebSocket\r\nCONNECTION: keep-alive, "
                               "Upgrade\r\nsec-websocket-accept:   " ACCEPT "  \r\n\r\n"),
                 0);
    CHECK_EQ_INT(feed_response("HTTP/1.1 101\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                               "Sec-WebSocket-Accept: " ACCEPT "\r\n\r\n"),
                 0);
    CHECK_EQ_INT(feed_response("SSH-2.0-OpenSSH_9.2\r\n\r\n"), ISOPROF_EWS);
    CHECK_EQ_INT(feed_response("\r\n\r\n"), ISOPROF_EWS);
    CHECK_EQ_INT(feed_response("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
                 ISOPROF_EHTTP);
    CHECK_EQ_INT(feed_response("HTTP/1.1 200 OK\r\n\r\n"), ISOPROF_EHTTP);
    CHECK_EQ_INT(feed_response("HTTP/1.1 1010 Switching\r\nUpgrade: websocket\r\nConnection: "
                               "Upgrade\r\nSec-WebSocket-Accept: " ACCEPT "\r\n\r\n"),
                 ISOPROF_EWS);
    CHECK_EQ_INT(
        feed_response("HTTP/1.1 101 x\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " ACCEPT
                      "\r\n\r\n"),
        ISOPROF_EWS);
    CHECK_EQ_INT(feed_response("HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: keep-alive\r\n"
                               "Sec-WebSocket-Accept: " ACCEPT "\r\n\r\n"),
                 ISOPROF_EWS);
    CHECK_EQ_INT(feed_response("HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                               "Sec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n\r\n"),
                 ISOPROF_EWS);
    CHECK_EQ_INT(
        feed_response("HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
        ISOPROF_EWS);
    CHECK_EQ_INT(feed_response("HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                               "Sec-WebSocket-Accept: " ACCEPT "\r\nSec-WebSocket-Extensions: "
                               "permessage-deflate\r\n\r\n"),
                 ISOPROF_EWS);
    CHECK_EQ_INT(feed_response("HTTP/1.1 101 x\r\nUpgrade websocket\r\n\r\n"), ISOPROF_EWS);
    /* a NUL inside the head */
    struct sink k = {0};
    struct ws_client *ws = ws_test_new(0, KEY, sink_on_message, &k);
    REQUIRE(ws != NULL);
    static const char nul[] = "HTTP/1.1 101 x\r\nUpgrade: web\0socket\r\n\r\n";
    CHECK_EQ_INT(ws_test_feed(ws, (const uint8_t *)nul, sizeof(nul) - 1), ISOPROF_EWS);
    ws_test_free(ws);
    /* a head that never ends is capped at 16 KiB */
    ws = ws_test_new(0, KEY, sink_on_message, &k);
    REQUIRE(ws != NULL);
    char junk[1024];
    memset(junk, 'A', sizeof(junk));
    int rc = 0, i;
    for (i = 0; i < 40 && rc == 0; i++)
        rc = ws_test_feed(ws, (const uint8_t *)junk, sizeof(junk));
    CHECK_EQ_INT(rc, ISOPROF_EWS);
    CHECK_EQ_INT(i, 16);
    CHECK_EQ_INT(ws_test_feed(ws, (const uint8_t *)junk, 1), ISOPROF_EWS); /* stays closed */
    ws_test_free(ws);
}

TEST(frames_byte_by_byte)
{
    static uint8_t big[70000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 7 + 3);
    static uint8_t buf[80000];
    size_t n = 0;
    n += frame(buf + n, 1, 1, "abc", 3);
    n += frame(buf + n, 0, 1, "he", 2);
    n += frame(buf + n, 1, 9, "pp", 2); /* ping inside a fragmented message */
    n += frame(buf + n, 0, 0, "", 0);   /* empty continuation */
    n += frame(buf + n, 1, 0, "llo", 3);
    n += frame(buf + n, 1, 2, "", 0);   /* empty binary message */
    n += frame(buf + n, 1, 10, "x", 1); /* unsolicited pong: ignored */
    char mid[300];
    memset(mid, 'm', sizeof(mid));
    n += frame(buf + n, 1, 1, mid, sizeof(mid)); /* 16-bit length */
    n += frame(buf + n, 1, 2, big, sizeof(big)); /* 64-bit length */
    for (int step = 1; step <= 4096; step *= 8) {
        struct sink k = {0};
        struct ws_client *ws = open_client(0, &k);
        REQUIRE(ws != NULL);
        for (size_t off = 0; off < n; off += (size_t)step) {
            size_t len = n - off < (size_t)step ? n - off : (size_t)step;
            if (ws_test_feed(ws, buf + off, len) != 0) {
                CHECK(!"feed failed");
                break;
            }
        }
        CHECK_EQ_INT(k.n, 5);
        if (k.n == 5) {
            CHECK_STR(k.msg[0], "abc");
            CHECK_STR(k.msg[1], "hello");
            CHECK_EQ_INT(k.len[2], 0);
            CHECK_EQ_INT(k.msg[2][0], 0);
            CHECK_EQ_INT(k.len[3], sizeof(mid));
            CHECK(memcmp(k.msg[3], mid, sizeof(mid)) == 0);
            CHECK_EQ_INT(k.len[4], sizeof(big));
            CHECK(memcmp(k.msg[4], big, sizeof(big)) == 0);
            /* every message was handed over: nothing is left buffered */
            CHECK_EQ_INT(ws_test_msg_cap(ws), 0);
        }
        sink_free(&k);
        ws_test_free(ws);
    }
}

static int feed_frames(size_t cap, const uint8_t *b, size_t n, struct sink *k)
{
    struct ws_client *ws = open_client(cap, k);
    if (ws == NULL)
        return -ENOMEM;
    int rc = ws_test_feed(ws, b, n);
    ws_test_free(ws);
    return rc;
}

TEST(protocol_violations)
{
    struct sink k = {0};
    uint8_t b[256];
    size_t n;
    /* masked server frame */
    n = frame(b, 1, 1, "abcd", 4);
    b[1] |= 0x80;
    memmove(b + 6, b + 2, 4);
    memset(b + 2, 0, 4);
    CHECK_EQ_INT(feed_frames(0, b, n + 4, &k), ISOPROF_EWS);
    /* reserved bit (no extension agreed) */
    n = frame(b, 1, 1, "a", 1);
    b[0] |= 0x40;
    CHECK_EQ_INT(feed_frames(0, b, n, &k), ISOPROF_EWS);
    /* unknown opcodes */
    n = frame(b, 1, 3, "a", 1);
    CHECK_EQ_INT(feed_frames(0, b, n, &k), ISOPROF_EWS);
    n = frame(b, 1, 0xb, "a", 1);
    CHECK_EQ_INT(feed_frames(0, b, n, &k), ISOPROF_EWS);
    /* continuation without a start */
    n = frame(b, 1, 0, "a", 1);
    CHECK_EQ_INT(feed_frames(0, b, n, &k), ISOPROF_EWS);
    /* a new message inside a fragmented one */
    n = frame(b, 0, 1, "a", 1);
    n += frame(b + n, 1, 1, "b", 1);
    CHECK_EQ_INT(feed_frames(0, b, n, &k), ISOPROF_EWS);
    /* fragmented control frame, oversize control frame */
    n = frame(b, 0, 9, "a", 1);
    CHECK_EQ_INT(feed_frames(0, b, n, &k), ISOPROF_EWS);
    uint8_t ctl[126] = {0};
    n = frame(b, 1, 9, ctl, sizeof(ctl));
    CHECK_EQ_INT(feed_frames(0, b, n, &k), ISOPROF_EWS);
    /* non-minimal length encoding, length with the top bit set */
    uint8_t nm[] = {0x81, 126, 0, 5, 'a', 'b', 'c', 'd', 'e'};
    CHECK_EQ_INT(feed_frames(0, nm, sizeof(nm), &k), ISOPROF_EWS);
    uint8_t top[] = {0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1, 'x'};
    CHECK_EQ_INT(feed_frames(0, top, sizeof(top), &k), ISOPROF_EWS);
    CHECK_EQ_INT(k.n, 0);
    sink_free(&k);
}

TEST(size_cap)
{
    struct sink k = {0};
    static uint8_t b[4096];
    static char p[2000];
    memset(p, 'p', sizeof(p));
    size_t n = frame(b, 1, 1, p, 1000);
    CHECK_EQ_INT(feed_frames(1000, b, n, &k), 0); /* exactly the cap */
    CHECK_EQ_INT(k.n, 1);
    sink_free(&k);
    n = frame(b, 1, 1, p, 1001);
    CHECK_EQ_INT(feed_frames(1000, b, n, &k), ISOPROF_ETOOBIG);
    /* fragments adding up past the cap */
    n = frame(b, 0, 1, p, 600);
    n += frame(b + n, 1, 0, p, 600);
    CHECK_EQ_INT(feed_frames(1000, b, n, &k), ISOPROF_ETOOBIG);
    CHECK_EQ_INT(k.n, 0);
    sink_free(&k);
}

TEST(huge_length_header)
{
    /* 300 MB announced, 100 bytes sent: under the default 512 MiB cap the
     * buffer holds what arrived (rounded to the minimum growth step), not
     * what was announced. */
    uint8_t b[200];
    size_t n = 0;
    b[n++] = 0x82;
    b[n++] = 127;
    uint64_t len = 300000000;
    for (int i = 7; i >= 0; i--)
        b[n++] = (uint8_t)(len >> (8 * i));
    memset(b + n, 'z', 100);
    n += 100;
    struct sink k = {0};
    struct ws_client *ws = open_client(0, &k);
    REQUIRE(ws != NULL);
    CHECK_EQ_INT(ws_test_feed(ws, b, n), 0);
    CHECK(ws_test_msg_cap(ws) <= (64u << 10));
    CHECK(ws_test_msg_cap(ws) >= 100);
    ws_test_free(ws);
    /* under a 64 MiB cap it is refused at the first payload byte */
    CHECK_EQ_INT(feed_frames(64u << 20, b, 11, &k), ISOPROF_ETOOBIG);
    CHECK_EQ_INT(k.n, 0);
}

TEST(close_frame)
{
    struct sink k = {0};
    struct ws_client *ws = open_client(0, &k);
    REQUIRE(ws != NULL);
    uint8_t b[64];
    size_t n = frame(b, 1, 1, "a", 1);
    n += frame(b + n, 1, 8, "\x03\xe9", 2);
    n += frame(b + n, 1, 1, "after", 5); /* ignored: after the close */
    CHECK_EQ_INT(ws_test_feed(ws, b, n), 0);
    CHECK_EQ_INT(k.n, 1);
    CHECK(strstr(ws_last_error(ws), "1001") != NULL);
    CHECK_EQ_INT(ws_test_feed(ws, b, 3), ISOPROF_ECLOSED);
    ws_test_free(ws);
    sink_free(&k);
}

TEST(alloc_fail_walk)
{
    static uint8_t b[200000];
    size_t n = strlen(GOOD_101);
    memcpy(b, GOOD_101, n);
    static char p[150000];
    memset(p, 'q', sizeof(p));
    n += frame(b + n, 0, 1, p, 1000);
    n += frame(b + n, 1, 0, p, sizeof(p));
    n += frame(b + n, 1, 1, "", 0);
    int ok = 0;
    for (long f = 0; f < 200 && !ok; f++) {
        struct sink k = {0};
        isoprof_alloc_fail_after(f);
        struct ws_client *ws = ws_test_new(0, KEY, sink_on_message, &k);
        int rc = ws ? ws_test_feed(ws, b, n) : -ENOMEM;
        isoprof_alloc_fail_after(-1);
        if (rc == 0) {
            ok = 1;
            CHECK_EQ_INT(k.n, 2);
            CHECK_EQ_INT(k.total, 1000 + sizeof(p));
        } else {
            CHECK_EQ_INT(rc, -ENOMEM);
        }
        if (ws)
            ws_test_free(ws);
        sink_free(&k);
    }
    CHECK(ok);
}

int main(void)
{
    RUN(sha1_vectors);
    RUN(base64_vectors);
    RUN(accept_key);
    RUN(peek_id);
    RUN(peek_method);
    RUN(param_string);
    RUN(handshake_split_everywhere);
    RUN(shared_budget);
    RUN(budget_drops_message);
    RUN(handshake_checks);
    RUN(frames_byte_by_byte);
    RUN(protocol_violations);
    RUN(size_cap);
    RUN(huge_length_header);
    RUN(close_frame);
    RUN(alloc_fail_walk);
    RUN(param_string_nul); /* last: see there */
    TEST_EXIT();
}

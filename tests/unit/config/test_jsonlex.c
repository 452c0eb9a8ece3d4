/*
 * test_jsonlex.c - the push JSON lexer of config/jsonlex.h.
 *
 * A recorder writes every hook call into a trace ("{", "k<key>|",
 * "s<string>|", "n<number>|", "!<code>@<byte>:<what>" ...). Each document
 * is lexed whole, one byte at a time and cut in two at every byte: the
 * traces must be the same, with each way a string's contents may go
 * (dropped, the lexer's buffer, the caller's put hook with and without a
 * cap) and with a caller that reads an array of integers itself.
 */
#include "../test.h"
#include "base.h"
#include "jsonlex.h"

#define DEPTH 8

enum policy { P_DROP, P_BUF, P_PUT, P_CAP };

struct rec {
    struct jsonlex lx;
    uint8_t stack[JSONLEX_STACK_BYTES(DEPTH)];
    enum policy policy;
    size_t cap;
    bool raw_ints; /* the array of the key "nodes" is read by the caller */
    bool in_raw;   /* ... and is being read */
    bool nodes;    /* the last key was "nodes" */
    struct isoprof_buf out;
    struct isoprof_buf str; /* the string put (P_PUT, P_CAP) */
    struct isoprof_buf raw; /* the inside of the array read by the caller */
};

static int rec_open(void *c, int kind)
{
    struct rec *r = c;
    isoprof_buf_putc(&r->out, kind);
    if (r->raw_ints && kind == '[' && r->nodes) {
        r->in_raw = true;
        return 0;
    }
    return 1;
}

static int rec_close(void *c, int kind)
{
    struct rec *r = c;
    isoprof_buf_putc(&r->out, kind);
    return 1;
}

static int rec_string(void *c, bool key)
{
    struct rec *r = c;
    if (key) {
        jsonlex_sink(&r->lx, JSONLEX_BUF, 0);
        return 1;
    }
    isoprof_buf_reset(&r->str);
    switch (r->policy) {
    case P_DROP:
        break;
    case P_BUF:
        jsonlex_sink(&r->lx, JSONLEX_BUF, 0);
        break;
    case P_PUT:
        jsonlex_sink(&r->lx, JSONLEX_PUT, SIZE_MAX);
        break;
    case P_CAP:
        jsonlex_sink(&r->lx, JSONLEX_PUT, r->cap);
        break;
    }
    return 1;
}

static int rec_put(void *c, const char *s, size_t n)
{
    struct rec *r = c;
    CHECK(n > 0);
    isoprof_buf_append(&r->str, s, n);
    return 1;
}

static int rec_key(void *c, const char *s, size_t n)
{
    struct rec *r = c;
    r->nodes = strcmp(s, "nodes") == 0;
    if (n > JSONLEX_BUF_MAX)
        isoprof_buf_printf(&r->out, "k#%zu|", strlen(s));
    else
        isoprof_buf_printf(&r->out, "k%s|", s);
    return 1;
}

static int rec_value(void *c, int kind, const char *s, size_t n)
{
    struct rec *r = c;
    isoprof_buf_putc(&r->out, kind);
    if (kind == 's' && (r->policy == P_PUT || r->policy == P_CAP)) {
        isoprof_buf_append(&r->out, r->str.data, r->str.len);
        if (jsonlex_cut(&r->lx))
            isoprof_buf_putc(&r->out, '~');
    } else if (kind == 's' && n > JSONLEX_BUF_MAX) {
        isoprof_buf_puts(&r->out, "#long");
    } else {
        CHECK(strlen(s) <= n); /* NUL-terminated (a NUL inside is from \u0000) */
        isoprof_buf_append(&r->out, s, n);
    }
    isoprof_buf_putc(&r->out, '|');
    return 1;
}

static void rec_fail(void *c, enum jsonlex_err err, const char *what, uint64_t at)
{
    struct rec *r = c;
    isoprof_buf_printf(&r->out, "!%d@%" PRIu64 ":%s", (int)err, at, what);
}

static const struct jsonlex_hooks rec_hooks = {
    .open = rec_open,
    .close = rec_close,
    .string = rec_string,
    .put = rec_put,
    .key = rec_key,
    .value = rec_value,
    .fail = rec_fail,
};

/* Feeds s[0..n) as the caller does: the lexer, or its own loop over an
 * array of integers it took over. */
static void rec_feed(struct rec *r, const char *s, size_t n)
{
    while (n > 0) {
        if (r->in_raw) {
            size_t i = 0;
            while (i < n && s[i] != ']')
                i++;
            bool closed = i < n;
            if (closed)
                i++;
            isoprof_buf_append(&r->raw, s, closed ? i - 1 : i);
            jsonlex_skip(&r->lx, i);
            if (closed) {
                jsonlex_pop(&r->lx);
                r->in_raw = false;
                isoprof_buf_printf(&r->out, "raw:%s|]", r->raw.len ? r->raw.data : "");
                isoprof_buf_reset(&r->raw);
            }
            s += i, n -= i;
            continue;
        }
        size_t used = jsonlex_feed(&r->lx, s, n);
        s += used, n -= used;
        if (n > 0 && !r->in_raw)
            return; /* failed */
    }
}

/* The trace of doc[0..len) fed in pieces cut at cuts[0..ncut) (ascending);
 * ncut SIZE_MAX: one byte at a time. Allocated; the caller frees it. */
static char *trace(const char *doc, size_t len, enum policy pol, size_t cap, unsigned flags,
                   bool raw, const size_t *cuts, size_t ncut)
{
    struct rec r;
    memset(&r, 0, sizeof(r));
    r.policy = pol;
    r.cap = cap;
    r.raw_ints = raw;
    isoprof_buf_init(&r.out, 1 << 20);
    isoprof_buf_init(&r.str, 1 << 20);
    isoprof_buf_init(&r.raw, 1 << 20);
    jsonlex_init(&r.lx, &rec_hooks, &r, r.stack, DEPTH, flags);
    if (ncut == SIZE_MAX) {
        for (size_t i = 0; i < len; i++)
            rec_feed(&r, doc + i, 1);
    } else {
        size_t at = 0;
        for (size_t i = 0; i <= ncut; i++) {
            size_t to = i < ncut ? cuts[i] : len;
            rec_feed(&r, doc + at, to - at);
            at = to;
        }
    }
    if (jsonlex_finish(&r.lx))
        isoprof_buf_puts(&r.out, jsonlex_done(&r.lx) ? "$" : "...");
    char *t;
    if (isoprof_buf_take(&r.out, &t, NULL) != 0)
        t = NULL;
    isoprof_buf_free(&r.str);
    isoprof_buf_free(&r.raw);
    return t;
}

static char *trace_whole(const char *doc, enum policy pol, unsigned flags)
{
    return trace(doc, strlen(doc), pol, SIZE_MAX, flags, false, NULL, 0);
}

#define EXPECT(doc, pol, flags, want)                                                              \
    do {                                                                                           \
        char *t_ = trace_whole((doc), (pol), (flags));                                             \
        CHECK_STR(t_, (want));                                                                     \
        isoprof_free(t_);                                                                          \
    } while (0)

/* Every way of cutting doc gives the trace of the whole. */
static void check_splits(const char *doc, size_t len, enum policy pol, size_t cap, unsigned flags,
                         bool raw, int line)
{
    char *whole = trace(doc, len, pol, cap, flags, raw, NULL, 0);
    char *bytes = trace(doc, len, pol, cap, flags, raw, NULL, SIZE_MAX);
    if (whole == NULL || bytes == NULL || strcmp(whole, bytes) != 0) {
        fprintf(stderr, "line %d: byte by byte:\n  %s\n  %s\n", line, whole, bytes);
        test_failed_ = 1;
    }
    for (size_t i = 0; i <= len; i++) {
        char *t = trace(doc, len, pol, cap, flags, raw, &i, 1);
        if (t == NULL || strcmp(whole, t) != 0) {
            fprintf(stderr, "line %d: cut at %zu:\n  %s\n  %s\n", line, i, whole, t);
            test_failed_ = 1;
        }
        isoprof_free(t);
    }
    isoprof_free(whole);
    isoprof_free(bytes);
}

static const char *const docs[] = {
    "{\"version\":3,\"sources\":[\"a.ts\",null],\"names\":[],\"mappings\":\"AAAA;AACA,CAAC\"}",
    " [ 1 , -2.5e+3 , 0 , true , false , null , \"x\" , { } , [ ] ] ",
    "{\"a\":{\"b\":[{\"c\":\"d\"}]},\"e\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\u20AC\"}",
    ("[\"\\ud83d\\ude00\",\"\\ud83d\",\"\\ud83dx\",\"\\ude00\",\"\\ud800\\ud800\\udc00\","
     "\"\\ud83d\\n\"]"),
    "[\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\",\"\xed\x9f\xbf\xee\x80\x80\xf4\x8f\xbf\xbf\"]",
    "{\"a-key-longer-than-the-buffer-of-the-lexer-which-holds-sixty-three\":\"v\"}",
    "[\"abcdef\",\"ab\xe2\x82\xac\",\"\\u20ac\\u20ac\",\"\xf0\x9f\x98\x80\xf0\x9f\x98\x80\"]",
    "{\"snapshot\":{\"n\":2},\"nodes\":[0,1,20,3],\"s\":[\"x\"]}",
    /* refused */
    "{\"a\" 1}",
    "{\"a\":1,}",
    "[1,]",
    "[1 2]",
    "{\"a\":[1}",
    "{\"a\":1]",
    "{]",
    "{} x",
    "[01]",
    "[1.]",
    "[-]",
    "[tru]",
    "[\"\\q\"]",
    "[\"\\u12g4\"]",
    "[\"\xff\"]",
    "[\"\xc0\x80\"]",
    "[\"\xe0\x80\x80\"]",
    "[\"\xed\xa0\x80\"]",
    "[\"\xf4\x90\x80\x80\"]",
    "[\"\xc3\"]",
    "[\"a\nb\"]",
    "[[[[[[[[[]]]]]]]]]",
    "[[[[[[[[]]]]]]]]",
    "tru",
    "42",
    "",
};

TEST(splits)
{
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(docs); i++) {
        size_t len = strlen(docs[i]);
        for (int pol = P_DROP; pol <= P_CAP; pol++) {
            check_splits(docs[i], len, pol, 3, 0, false, __LINE__);
            check_splits(docs[i], len, pol, 5, JSONLEX_NO_NUL | JSONLEX_TOP_CONTAINER, false,
                         __LINE__);
        }
    }
    /* a caller that reads nodes[] itself, wherever the chunks end */
    const char *d = docs[7];
    check_splits(d, strlen(d), P_PUT, 0, 0, true, __LINE__);
}

TEST(tokens)
{
    EXPECT(docs[0], P_BUF, 0,
           "{kversion|n3|ksources|[sa.ts|znull|]knames|[]kmappings|sAAAA;AACA,CAAC|}$");
    EXPECT(docs[1], P_BUF, 0, "[n1|n-2.5e+3|n0|btrue|bfalse|znull|sx|{}[]]$");
    EXPECT(docs[0], P_DROP, 0, "{kversion|n3|ksources|[s|znull|]knames|[]kmappings|s|}$");
    EXPECT("{\"a\":[],\"b\":{}}", P_DROP, 0, "{ka|[]kb|{}}$");
    /* a key past the buffer: the first JSONLEX_BUF_MAX bytes */
    EXPECT(docs[5], P_PUT, 0, "{k#63|sv|}$");
    /* a number past JSONLEX_NUM_MAX bytes */
    char big[100];
    memset(big, '1', sizeof(big));
    big[0] = '[', big[98] = ']', big[99] = '\0';
    EXPECT(big, P_DROP, 0, "[!1@98:a bad number");
    big[98] = '\0';
    big[1 + JSONLEX_NUM_MAX] = ']', big[2 + JSONLEX_NUM_MAX] = '\0';
    char want[100];
    snprintf(want, sizeof(want), "[n%.*s|]$", JSONLEX_NUM_MAX, big + 1);
    EXPECT(big, P_DROP, 0, want);
}

TEST(escapes)
{
    EXPECT(docs[2], P_PUT, 0, "{ka|{kb|[{kc|sd|}]}ke|s\"\\/\b\f\n\r\tA\xc3\xa9\xe2\x82\xac|}$");
    /* \u0000: a NUL, or U+FFFD for a caller that keeps C strings */
    char *t = trace_whole("[\"a\\u0000b\"]", P_PUT, 0);
    CHECK(t != NULL && memcmp(t, "[sa\0b|]$", 9) == 0);
    isoprof_free(t);
    EXPECT("[\"a\\u0000b\"]", P_PUT, JSONLEX_NO_NUL,
           "[sa\xef\xbf\xbd"
           "b|]$");
    EXPECT("[\"\\x\"]", P_DROP, 0, "[!1@3:a bad escape in a string");
    EXPECT("[\"\\u00G0\"]", P_DROP, 0, "[!1@6:a bad \\u escape in a string");
}

TEST(surrogates)
{
    EXPECT(docs[3], P_PUT, 0,
           "[s\xf0\x9f\x98\x80|s\xef\xbf\xbd|s\xef\xbf\xbdx|s\xef\xbf\xbd|"
           "s\xef\xbf\xbd\xf0\x90\x80\x80|s\xef\xbf\xbd\n|]$");
    /* a high surrogate, then raw UTF-8 */
    EXPECT("[\"\\ud83d\xc3\xa9\"]", P_PUT, 0, "[s\xef\xbf\xbd\xc3\xa9|]$");
}

TEST(utf8)
{
    EXPECT(docs[4], P_PUT, 0,
           "[scaf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80|s\xed\x9f\xbf\xee\x80\x80\xf4\x8f\xbf\xbf|]"
           "$");
    EXPECT("[\"\xff\"]", P_DROP, 0, "[!1@2:invalid UTF-8 in a string");
    EXPECT("[\"\xc0\x80\"]", P_DROP, 0, "[!1@2:invalid UTF-8 in a string");         /* overlong */
    EXPECT("[\"\xe0\x80\x80\"]", P_DROP, 0, "[!1@3:invalid UTF-8 in a string");     /* overlong */
    EXPECT("[\"\xed\xa0\x80\"]", P_DROP, 0, "[!1@3:invalid UTF-8 in a string");     /* surrogate */
    EXPECT("[\"\xf4\x90\x80\x80\"]", P_DROP, 0, "[!1@3:invalid UTF-8 in a string"); /* > max */
    EXPECT("[\"\xc3\"]", P_DROP, 0, "[!1@3:invalid UTF-8 in a string");
    EXPECT("[\"\xc3x\"]", P_DROP, 0, "[!1@3:invalid UTF-8 in a string");
    EXPECT("[\"a\tb\"]", P_DROP, 0, "[!1@3:a control character in a string");
}

TEST(cap)
{
    /* cut at a character boundary: a character is put whole or not at all */
    const char *d = docs[6];
    char *t = trace(d, strlen(d), P_CAP, 4, 0, false, NULL, 0);
    CHECK_STR(t, "[sabcd~|sab~|s\xe2\x82\xac~|s\xf0\x9f\x98\x80~|]$");
    isoprof_free(t);
    t = trace(d, strlen(d), P_CAP, 5, 0, false, NULL, 0);
    CHECK_STR(t, "[sabcde~|sab\xe2\x82\xac|s\xe2\x82\xac~|s\xf0\x9f\x98\x80~|]$");
    isoprof_free(t);
    t = trace(d, strlen(d), P_CAP, 0, 0, false, NULL, 0);
    CHECK_STR(t, "[s~|s~|s~|s~|]$");
    isoprof_free(t);
    /* the rest of a cut string is still checked */
    t = trace("[\"abcdef\xff\"]", 10, P_CAP, 2, 0, false, NULL, 0);
    CHECK_STR(t, "[!1@8:invalid UTF-8 in a string");
    isoprof_free(t);
}

TEST(grammar)
{
    EXPECT("{\"a\" 1}", P_DROP, 0, "{ka|!1@5:a ':' must come");
    EXPECT("{\"a\":1,}", P_DROP, 0, "{ka|n1|!1@7:an object key must come");
    EXPECT("{1:2}", P_DROP, 0, "{!1@1:an object key must come");
    EXPECT("[1,]", P_DROP, 0, "[n1|!1@3:not a JSON value");
    EXPECT("[1 2]", P_DROP, 0, "[n1|!1@3:a ',' or the end of the container must come");
    EXPECT("{\"a\":[1}", P_DROP, 0, "{ka|[n1|!5@7:a '}' closes an array");
    EXPECT("{\"a\":1]", P_DROP, 0, "{ka|n1|!6@6:a ']' closes an object");
    EXPECT("{]", P_DROP, 0, "{!1@1:an object key must come");
    EXPECT("{} x", P_DROP, 0, "{}!3@3:bytes after the top value");
    EXPECT("{}{}", P_DROP, 0, "{}!3@2:bytes after the top value");
    EXPECT("[01]", P_DROP, 0, "[!1@3:a bad number");
    EXPECT("[1.]", P_DROP, 0, "[!1@3:a bad number");
    EXPECT("[1e+]", P_DROP, 0, "[!1@4:a bad number");
    EXPECT("[tru]", P_DROP, 0, "[!1@4:not a JSON value");
    EXPECT("[x]", P_DROP, 0, "[!1@1:not a JSON value");
    /* the end: a number ends with the text, anything else is cut short */
    EXPECT("42", P_DROP, 0, "n42|$");
    EXPECT("-", P_DROP, 0, "!1@1:a bad number");
    EXPECT("tru", P_DROP, 0, "...");
    EXPECT("[1", P_DROP, 0, "[n1|...");
    EXPECT("{\"a\":\"b", P_DROP, 0, "{ka|...");
    EXPECT("", P_DROP, 0, "...");
    EXPECT("  \n\t", P_DROP, 0, "...");
    /* a scalar at the top, for a caller that wants a container */
    EXPECT("42", P_DROP, JSONLEX_TOP_CONTAINER, "!4@2:a scalar at the top");
    EXPECT("-", P_DROP, JSONLEX_TOP_CONTAINER, "!4@1:a scalar at the top");
    EXPECT("true ", P_DROP, JSONLEX_TOP_CONTAINER, "!4@3:a scalar at the top");
    EXPECT("\"x\"", P_DROP, JSONLEX_TOP_CONTAINER, "!4@2:a string at the top");
    EXPECT("[42]", P_DROP, JSONLEX_TOP_CONTAINER, "[n42|]$");
}

TEST(depth)
{
    /* DEPTH (8) open at once is the most */
    EXPECT("[[[[[[[[]]]]]]]]", P_DROP, 0, "[[[[[[[[]]]]]]]]$");
    EXPECT("[[[[[[[[[]]]]]]]]]", P_DROP, 0, "[[[[[[[[!2@8:nesting too deep");
    EXPECT("[{\"a\":[{\"b\":[{\"c\":[{\"d\":{}}]}]}]}]", P_DROP, 0,
           "[{ka|[{kb|[{kc|[{kd|!2@24:nesting too deep");
    /* the stack tells objects from arrays at every level */
    EXPECT("[{\"a\":[{}]},[{\"b\":[]}]]", P_DROP, 0, "[{ka|[{}]}[{kb|[]}]]$");
}

TEST(state)
{
    struct rec r;
    memset(&r, 0, sizeof(r));
    isoprof_buf_init(&r.out, 1 << 16);
    isoprof_buf_init(&r.str, 1 << 16);
    jsonlex_init(&r.lx, &rec_hooks, &r, r.stack, DEPTH, 0);
    CHECK(!jsonlex_busy(&r.lx) && !jsonlex_done(&r.lx));
    CHECK_EQ_INT(jsonlex_feed(&r.lx, "{\"a\":tr", 7), 7);
    CHECK(jsonlex_busy(&r.lx));
    CHECK_EQ_INT(jsonlex_depth(&r.lx), 1);
    CHECK_EQ_INT(jsonlex_at(&r.lx), 7);
    CHECK_EQ_INT(jsonlex_feed(&r.lx, "ue}  ", 5), 5);
    CHECK(!jsonlex_busy(&r.lx) && jsonlex_done(&r.lx));
    CHECK_EQ_INT(jsonlex_depth(&r.lx), 0);
    /* a failure sticks: nothing more is read */
    CHECK_EQ_INT(jsonlex_feed(&r.lx, " x ", 3), 2);
    CHECK_EQ_INT(jsonlex_feed(&r.lx, "  ", 2), 0);
    CHECK(!jsonlex_done(&r.lx));
    CHECK_EQ_INT(jsonlex_finish(&r.lx), 0);
    CHECK_STR(r.out.data, "{ka|btrue|}!3@13:bytes after the top value");
    isoprof_buf_free(&r.out);
    isoprof_buf_free(&r.str);

    /* a hook that stops the lexer: the rest of the chunk is the caller's */
    const char *d = "{\"snapshot\":{\"n\":2},\"nodes\":[0,1,20,3],\"s\":[\"x\"]}";
    char *t = trace(d, strlen(d), P_PUT, 0, 0, true, NULL, 0);
    CHECK_STR(t, "{ksnapshot|{kn|n2|}knodes|[raw:0,1,20,3|]ks|[sx|]}$");
    isoprof_free(t);
}

/* A parser's failure over the lexer: the words every parser uses for each
 * lexer error, the first reason sticks, a long message is cut. */
struct failing {
    struct jsonlex lx;
    uint8_t stack[JSONLEX_STACK_BYTES(DEPTH)];
    struct jsonlex_fail fail;
};

static int fl_go(void *c, int kind)
{
    (void)c;
    (void)kind;
    return 1;
}
static int fl_string(void *c, bool key)
{
    (void)c;
    (void)key;
    return 1;
}
static int fl_put(void *c, const char *s, size_t n)
{
    (void)c;
    (void)s;
    (void)n;
    return 1;
}
static int fl_value(void *c, int kind, const char *s, size_t n)
{
    (void)c;
    (void)kind;
    (void)s;
    (void)n;
    return 1;
}
static void fl_fail(void *c, enum jsonlex_err err, const char *what, uint64_t at)
{
    static const struct jsonlex_doc doc = {"the doc", 7, 9};
    struct failing *f = c;
    jsonlex_fail_lexer(&f->fail, &doc, &f->lx, err, what, at);
}
static const struct jsonlex_hooks fl_hooks = {
    .open = fl_go,
    .close = fl_go,
    .string = fl_string,
    .put = fl_put,
    .key = fl_put,
    .value = fl_value,
    .fail = fl_fail,
};

static void fail_case(const char *text, int want_err, const char *want_why)
{
    struct failing f;
    memset(&f, 0, sizeof(f));
    jsonlex_init(&f.lx, &fl_hooks, &f, f.stack, DEPTH, JSONLEX_TOP_CONTAINER);
    jsonlex_feed(&f.lx, text, strlen(text));
    jsonlex_finish(&f.lx);
    CHECK_EQ_INT(f.fail.err, want_err);
    char *why = jsonlex_fail_take(&f.fail);
    CHECK(f.fail.why == NULL && f.fail.err == want_err);
    CHECK_STR(why, want_why);
    isoprof_free(why);
    jsonlex_fail_free(&f.fail);
}

TEST(fail)
{
    fail_case("[[[[[[[[[]]]]]]]]]", 9, "JSON nesting deeper than 8 at byte 8");
    fail_case("42", 7, "the doc is not a JSON object");
    fail_case("{} x", 7, "malformed JSON at byte 3: bytes after the doc");
    fail_case("[1}", 7, "malformed JSON at byte 2: a '}' closes an array");

    /* the first reason and message stand; the rest are dropped */
    struct jsonlex_fail f = {0};
    CHECK_EQ_INT(jsonlex_fail_set(&f, 3, "first %d", 1), 0);
    CHECK_EQ_INT(jsonlex_fail_set(&f, 4, "second"), 0);
    CHECK_EQ_INT(f.err, 3);
    CHECK_STR(f.why, "first 1");
    jsonlex_fail_free(&f);
    CHECK(f.why == NULL);
    jsonlex_fail_free(&f); /* twice is harmless */

    /* a message past 255 bytes is cut there */
    struct jsonlex_fail g = {0};
    char big[600];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    jsonlex_fail_set(&g, 1, "%s", big);
    CHECK_EQ_INT(strlen(g.why), 255);
    jsonlex_fail_free(&g);
}

int main(void)
{
    RUN(splits);
    RUN(tokens);
    RUN(escapes);
    RUN(surrogates);
    RUN(utf8);
    RUN(cap);
    RUN(grammar);
    RUN(depth);
    RUN(state);
    RUN(fail);
    TEST_EXIT();
}

/*
 * jsonlex.c - the push JSON lexer (see jsonlex.h).
 *
 * A state machine over single bytes: where the grammar is (a value must
 * come, a key, a ':', a ',' or the end of the container, only blanks) and
 * which token is open (a string, a number, a literal). Only strings go
 * faster than a byte at a time: a run of plain ASCII (no quote, backslash
 * or control byte) goes to the sink in one piece, which is what a source
 * map's mappings and a heap snapshot's strings are mostly made of. A
 * string's escape and UTF-8 state lives in the lexer, so a chunk may end
 * anywhere: inside a \u escape, between a surrogate's halves, inside a
 * UTF-8 sequence. The containers' kinds are a bit stack the caller owns,
 * as deep as it allows.
 *
 * A sink with a cap cuts at a character boundary without looking back: a
 * multi-byte character is put only if all of it fits, which the lexer
 * knows from its first byte (the lead byte says the length; the rest is
 * checked as it comes, and the text fails if it is not there).
 */
#include "jsonlex.h"

#include "base.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

enum lx_state {
    LX_VALUE,        /* a value must come (the top, after ':', after ',' in an array) */
    LX_VALUE_OR_END, /* after '[' */
    LX_KEY_OR_END,   /* after '{' */
    LX_KEY,          /* after ',' in an object */
    LX_COLON,        /* after a key */
    LX_COMMA_OR_END, /* after a value inside a container */
    LX_DONE,         /* the top value closed: only blanks may follow */
};
enum lx_tok { TK_NONE, TK_STRING, TK_NUMBER, TK_LITERAL };

void jsonlex_init(struct jsonlex *lx, const struct jsonlex_hooks *h, void *ctx, uint8_t *stack,
                  size_t max_depth, unsigned flags)
{
    memset(lx, 0, sizeof(*lx));
    lx->h = h;
    lx->ctx = ctx;
    lx->stack = stack;
    lx->max_depth = max_depth;
    lx->flags = flags;
    lx->state = LX_VALUE;
    lx->tok = TK_NONE;
}

static int lx_fail(struct jsonlex *lx, enum jsonlex_err err, const char *what)
{
    lx->failed = true;
    lx->h->fail(lx->ctx, err, what, lx->at);
    return 0;
}

static bool lx_in_object(const struct jsonlex *lx)
{
    size_t d = lx->depth - 1;
    return lx->stack[d / 8] >> (d % 8) & 1;
}

/* A value ended: what may come next. */
static void lx_value_done(struct jsonlex *lx)
{
    lx->state = lx->depth == 0 ? LX_DONE : LX_COMMA_OR_END;
}

/* s[0..n) of the string being read, to its sink, up to its cap. unit is 1
 * when they are one-byte characters (an ASCII run, an escape) or the rest
 * of a character whose room was taken at its first byte; else the length
 * of the character they begin, which is put whole or not at all. */
static int lx_put(struct jsonlex *lx, const char *s, size_t n, size_t unit)
{
    if (lx->sink == JSONLEX_DROP || lx->cut)
        return 1;
    size_t room = lx->cap - lx->len;
    if (n > room || unit > room) {
        lx->cut = true;
        n = unit == 1 ? room : 0;
        if (n == 0)
            return 1;
    }
    if (lx->sink == JSONLEX_BUF) {
        memcpy(lx->buf + lx->len, s, n);
        lx->len += n;
        return 1;
    }
    lx->len += n;
    return lx->h->put(lx->ctx, s, n);
}

/* A code point of a \u escape, as UTF-8. */
static int lx_put_cp(struct jsonlex *lx, uint32_t cp)
{
    char b[4];
    size_t n;
    if (cp == 0 && (lx->flags & JSONLEX_NO_NUL))
        cp = 0xfffd;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xc0 | cp >> 6);
        b[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xe0 | cp >> 12);
        b[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (char)(0xf0 | cp >> 18);
        b[1] = (char)(0x80 | (cp >> 12 & 0x3f));
        b[2] = (char)(0x80 | (cp >> 6 & 0x3f));
        b[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return lx_put(lx, b, n, n);
}

/* A high surrogate that no low one followed. */
static int lx_lone_high(struct jsonlex *lx)
{
    lx->hi = 0;
    return lx_put_cp(lx, 0xfffd);
}

/* A string starts (its opening quote read). */
static int lx_string_start(struct jsonlex *lx, bool key)
{
    lx->tok = TK_STRING;
    lx->key = key;
    lx->esc = 0;
    lx->hi = 0;
    lx->utf8_need = 0;
    lx->sink = JSONLEX_DROP;
    lx->len = 0;
    lx->cut = false;
    return lx->h->string(lx->ctx, key);
}

/* The closing quote (never inside a UTF-8 sequence: lx_string_byte checks
 * it as the sequence's next byte, and refuses it). */
static int lx_string_end(struct jsonlex *lx)
{
    if (lx->hi != 0 && !lx_lone_high(lx))
        return 0;
    lx->tok = TK_NONE;
    const char *s = "";
    size_t n = 0;
    if (lx->sink == JSONLEX_BUF) {
        lx->buf[lx->len] = '\0';
        s = lx->buf;
        n = lx->cut ? JSONLEX_BUF_MAX + 1 : lx->len;
    }
    if (lx->key) {
        lx->state = LX_COLON;
        return lx->h->key(lx->ctx, s, n);
    }
    lx_value_done(lx);
    if (lx->state == LX_DONE && (lx->flags & JSONLEX_TOP_CONTAINER))
        return lx_fail(lx, JSONLEX_E_TOP, "a string at the top");
    return lx->h->value(lx->ctx, 's', s, n);
}

/* One byte of a string other than the plain ASCII run jsonlex_feed puts. */
static int lx_string_byte(struct jsonlex *lx, unsigned char c)
{
    if (lx->esc == 1) {
        char e;
        switch (c) {
        case '"':
        case '\\':
        case '/':
            e = (char)c;
            break;
        case 'b':
            e = '\b';
            break;
        case 'f':
            e = '\f';
            break;
        case 'n':
            e = '\n';
            break;
        case 'r':
            e = '\r';
            break;
        case 't':
            e = '\t';
            break;
        case 'u':
            lx->esc = 2;
            lx->u = 0;
            return 1;
        default:
            return lx_fail(lx, JSONLEX_E_SYNTAX, "a bad escape in a string");
        }
        lx->esc = 0;
        if (lx->hi != 0 && !lx_lone_high(lx))
            return 0;
        return lx_put(lx, &e, 1, 1);
    }
    if (lx->esc >= 2) {
        int d = isoprof_hexval(c);
        if (d < 0)
            return lx_fail(lx, JSONLEX_E_SYNTAX, "a bad \\u escape in a string");
        lx->u = lx->u << 4 | (uint32_t)d;
        if (++lx->esc < 6)
            return 1;
        lx->esc = 0;
        uint32_t u = lx->u;
        if (u >= 0xdc00 && u <= 0xdfff && lx->hi != 0) {
            uint32_t cp = 0x10000 + ((lx->hi - 0xd800) << 10) + (u - 0xdc00);
            lx->hi = 0;
            return lx_put_cp(lx, cp);
        }
        if (lx->hi != 0 && !lx_lone_high(lx))
            return 0;
        if (u >= 0xd800 && u <= 0xdbff) {
            lx->hi = u; /* its low half may follow */
            return 1;
        }
        return lx_put_cp(lx, u >= 0xdc00 && u <= 0xdfff ? 0xfffd : u);
    }
    if (lx->utf8_need > 0) {
        if (c < lx->lo8 || c > lx->hi8)
            return lx_fail(lx, JSONLEX_E_SYNTAX, "invalid UTF-8 in a string");
        lx->utf8_need--;
        lx->lo8 = 0x80;
        lx->hi8 = 0xbf;
        return lx_put(lx, (const char *)&c, 1, 1);
    }
    if (lx->hi != 0 && c != '\\' && !lx_lone_high(lx))
        return 0;
    if (c == '"')
        return lx_string_end(lx);
    if (c == '\\') {
        lx->esc = 1;
        return 1;
    }
    if (c < 0x20)
        return lx_fail(lx, JSONLEX_E_SYNTAX, "a control character in a string");
    if (c < 0x80)
        return lx_put(lx, (const char *)&c, 1, 1);
    /* the lead byte of a UTF-8 sequence, and the range its next byte must
     * be in (no overlong forms, no surrogates, nothing past U+10FFFF) */
    lx->lo8 = 0x80;
    lx->hi8 = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
        lx->utf8_need = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
        lx->utf8_need = 2;
        if (c == 0xe0)
            lx->lo8 = 0xa0;
        if (c == 0xed)
            lx->hi8 = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        lx->utf8_need = 3;
        if (c == 0xf0)
            lx->lo8 = 0x90;
        if (c == 0xf4)
            lx->hi8 = 0x8f;
    } else {
        return lx_fail(lx, JSONLEX_E_SYNTAX, "invalid UTF-8 in a string");
    }
    return lx_put(lx, (const char *)&c, 1, 1 + (size_t)lx->utf8_need);
}

/* Is s[0..n) a JSON number? */
static bool json_number(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && s[i] == '-')
        i++;
    if (i < n && s[i] == '0') {
        i++;
    } else if (i < n && s[i] >= '1' && s[i] <= '9') {
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    } else {
        return false;
    }
    if (i < n && s[i] == '.') {
        size_t d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return false;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return false;
    }
    return i == n;
}

/* A number or a literal ended. */
static int lx_token_end(struct jsonlex *lx)
{
    enum lx_tok t = lx->tok;
    lx->tok = TK_NONE;
    lx_value_done(lx);
    if (lx->state == LX_DONE && (lx->flags & JSONLEX_TOP_CONTAINER))
        return lx_fail(lx, JSONLEX_E_TOP, "a scalar at the top");
    if (t == TK_NUMBER) {
        if (lx->numlen > JSONLEX_NUM_MAX || !json_number(lx->num, lx->numlen))
            return lx_fail(lx, JSONLEX_E_SYNTAX, "a bad number");
        lx->num[lx->numlen] = '\0';
        return lx->h->value(lx->ctx, 'n', lx->num, lx->numlen);
    }
    return lx->h->value(lx->ctx, lx->lit[0] == 'n' ? 'z' : 'b', lx->lit, lx->litpos);
}

/* The end of a container (obj: a '}'). The grammar states that lead here
 * all have one open. */
static int lx_close(struct jsonlex *lx, bool obj)
{
    ISOPROF_ASSERT(lx->depth > 0);
    if (lx_in_object(lx) != obj)
        return obj ? lx_fail(lx, JSONLEX_E_CLOSE_OBJ, "a '}' closes an array")
                   : lx_fail(lx, JSONLEX_E_CLOSE_ARR, "a ']' closes an object");
    lx->depth--;
    lx_value_done(lx);
    return lx->h->close(lx->ctx, obj ? '}' : ']');
}

/* The start of a value (its first byte c). */
static int lx_value(struct jsonlex *lx, unsigned char c)
{
    switch (c) {
    case '{':
    case '[': {
        if (lx->depth == lx->max_depth)
            return lx_fail(lx, JSONLEX_E_DEPTH, "nesting too deep");
        size_t d = lx->depth++;
        if (c == '{')
            lx->stack[d / 8] |= (uint8_t)(1u << (d % 8));
        else
            lx->stack[d / 8] &= (uint8_t) ~(1u << (d % 8));
        lx->state = c == '{' ? LX_KEY_OR_END : LX_VALUE_OR_END;
        return lx->h->open(lx->ctx, c);
    }
    case '"':
        return lx_string_start(lx, false);
    case 't':
    case 'f':
    case 'n':
        lx->tok = TK_LITERAL;
        lx->lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
        lx->litpos = 1;
        return 1;
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            lx->tok = TK_NUMBER;
            lx->num[0] = (char)c;
            lx->numlen = 1;
            return 1;
        }
        return lx_fail(lx, JSONLEX_E_SYNTAX, "not a JSON value");
    }
}

/* One byte outside a string. */
static int lx_byte(struct jsonlex *lx, unsigned char c)
{
    if (lx->tok == TK_NUMBER) {
        if ((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
            if (lx->numlen < JSONLEX_NUM_MAX)
                lx->num[lx->numlen] = (char)c;
            lx->numlen++;
            return 1;
        }
        if (!lx_token_end(lx))
            return 0;
    } else if (lx->tok == TK_LITERAL) {
        if (c != (unsigned char)lx->lit[lx->litpos])
            return lx_fail(lx, JSONLEX_E_SYNTAX, "not a JSON value");
        if (lx->lit[++lx->litpos] == '\0')
            return lx_token_end(lx);
        return 1;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
        return 1;
    switch ((enum lx_state)lx->state) {
    case LX_VALUE:
        return lx_value(lx, c);
    case LX_VALUE_OR_END:
        return c == ']' ? lx_close(lx, false) : lx_value(lx, c);
    case LX_KEY_OR_END:
        if (c == '}')
            return lx_close(lx, true);
        /* fall through */
    case LX_KEY:
        return c == '"' ? lx_string_start(lx, true)
                        : lx_fail(lx, JSONLEX_E_SYNTAX, "an object key must come");
    case LX_COLON:
        if (c != ':')
            return lx_fail(lx, JSONLEX_E_SYNTAX, "a ':' must come");
        lx->state = LX_VALUE;
        return 1;
    case LX_COMMA_OR_END:
        if (c == ',') {
            lx->state = lx_in_object(lx) ? LX_KEY : LX_VALUE;
            return 1;
        }
        if (c == '}' || c == ']')
            return lx_close(lx, c == '}');
        return lx_fail(lx, JSONLEX_E_SYNTAX, "a ',' or the end of the container must come");
    case LX_DONE:
        return lx_fail(lx, JSONLEX_E_AFTER, "bytes after the top value");
    }
    return 1;
}

size_t jsonlex_feed(struct jsonlex *lx, const void *buf, size_t len)
{
    const unsigned char *start = buf, *s = start, *end = s + len;
    if (lx->failed)
        return 0;
    while (s < end) {
        if (lx->tok == TK_STRING && lx->esc == 0 && lx->utf8_need == 0 && lx->hi == 0) {
            /* a run of plain ASCII goes to its sink in one piece */
            const unsigned char *q = s;
            while (q < end && *q >= 0x20 && *q < 0x80 && *q != '"' && *q != '\\')
                q++;
            if (q > s) {
                size_t n = (size_t)(q - s);
                int go = lx_put(lx, (const char *)s, n, 1);
                lx->at += n;
                s = q;
                if (!go)
                    break;
                continue;
            }
        }
        unsigned char c = *s++;
        int go = lx->tok == TK_STRING ? lx_string_byte(lx, c) : lx_byte(lx, c);
        lx->at++;
        if (!go)
            break;
    }
    return (size_t)(s - start);
}

int jsonlex_finish(struct jsonlex *lx)
{
    if (lx->failed)
        return 0;
    if (lx->tok == TK_NUMBER)
        return lx_token_end(lx);
    return 1;
}

bool jsonlex_done(const struct jsonlex *lx)
{
    return !lx->failed && lx->state == LX_DONE && lx->tok == TK_NONE;
}

bool jsonlex_busy(const struct jsonlex *lx)
{
    return lx->tok != TK_NONE;
}

uint64_t jsonlex_at(const struct jsonlex *lx)
{
    return lx->at;
}

size_t jsonlex_depth(const struct jsonlex *lx)
{
    return lx->depth;
}

void jsonlex_sink(struct jsonlex *lx, enum jsonlex_sink sink, size_t cap)
{
    ISOPROF_ASSERT(lx->tok == TK_STRING);
    lx->sink = (uint8_t)sink;
    lx->cap = sink == JSONLEX_PUT ? cap : JSONLEX_BUF_MAX;
}

bool jsonlex_cut(const struct jsonlex *lx)
{
    return lx->cut;
}

void jsonlex_skip(struct jsonlex *lx, uint64_t n)
{
    lx->at += n;
}

void jsonlex_pop(struct jsonlex *lx)
{
    ISOPROF_ASSERT(lx->depth > 0 && lx->tok == TK_NONE);
    lx->depth--;
    lx_value_done(lx);
}

int jsonlex_fail_setv(struct jsonlex_fail *f, int err, const char *fmt, va_list ap)
{
    ISOPROF_ASSERT(err != 0);
    if (f->err == 0) {
        char buf[256];
        vsnprintf(buf, sizeof(buf), fmt, ap);
        f->err = err;
        f->why = isoprof_strdup(buf);
    }
    return 0;
}

int jsonlex_fail_set(struct jsonlex_fail *f, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jsonlex_fail_setv(f, err, fmt, ap);
    va_end(ap);
    return 0;
}

void jsonlex_fail_lexer(struct jsonlex_fail *f, const struct jsonlex_doc *d,
                        const struct jsonlex *lx, enum jsonlex_err err, const char *what,
                        uint64_t at)
{
    switch (err) {
    case JSONLEX_E_DEPTH:
        jsonlex_fail_set(f, d->e_depth, "JSON nesting deeper than %zu at byte %" PRIu64,
                         lx->max_depth, at);
        return;
    case JSONLEX_E_TOP:
        jsonlex_fail_set(f, d->e_json, "%s is not a JSON object", d->name);
        return;
    case JSONLEX_E_AFTER:
        jsonlex_fail_set(f, d->e_json, "malformed JSON at byte %" PRIu64 ": bytes after %s", at,
                         d->name);
        return;
    default:
        jsonlex_fail_set(f, d->e_json, "malformed JSON at byte %" PRIu64 ": %s", at, what);
        return;
    }
}

char *jsonlex_fail_take(struct jsonlex_fail *f)
{
    char *why = f->why;
    f->why = NULL;
    return why;
}

void jsonlex_fail_free(struct jsonlex_fail *f)
{
    isoprof_free(f->why);
    f->why = NULL;
}

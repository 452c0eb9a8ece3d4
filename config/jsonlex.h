/*
 * jsonlex.h - a push JSON lexer for texts too large to hold (isoprof_base).
 *
 * The text arrives in chunks of any size (jsonlex_feed); every byte is read
 * once and the result does not depend on where the chunks are cut. The
 * lexer checks the grammar (values, objects, arrays, ':' and ',', nesting
 * up to the caller's limit, one top value and blanks after it) and the
 * strings (escapes, strict UTF-8), and calls the caller's hooks as the
 * structure goes by. It holds nothing of the text but one short string (a
 * key or a short name) and one number at a time: a string's contents go,
 * unescaped, where its start hook sends them (jsonlex_sink): dropped, into
 * that short buffer, or piece by piece to the caller's put hook, cut at a
 * character boundary past a cap. What to keep of a large text is the
 * caller's choice, made string by string.
 *
 * Strings: \uXXXX becomes UTF-8, a surrogate pair one code point, a lone
 * surrogate U+FFFD; a raw byte that is not strict UTF-8 (RFC 3629: no
 * overlong forms, no surrogates, nothing past U+10FFFF) and a control
 * character are refused. What reaches a sink is always valid UTF-8.
 *
 * One thread at a time; the lexer allocates nothing.
 */
#ifndef ISOPROF_JSONLEX_H
#define ISOPROF_JSONLEX_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSONLEX_BUF_MAX 63 /* bytes of the short-string buffer (JSONLEX_BUF) */
#define JSONLEX_NUM_MAX 64 /* bytes of a number; a longer one is refused */

/* The bytes of stack a nesting limit of d levels takes (one bit a level). */
#define JSONLEX_STACK_BYTES(d) (((size_t)(d) + 7) / 8)

/* What the fail hook is told; every one is malformed JSON. */
enum jsonlex_err {
    JSONLEX_E_SYNTAX = 1, /* what says what is wrong */
    JSONLEX_E_DEPTH,      /* an object or array past the nesting limit */
    JSONLEX_E_AFTER,      /* bytes after the top value */
    JSONLEX_E_TOP,        /* a scalar at the top (JSONLEX_TOP_CONTAINER) */
    JSONLEX_E_CLOSE_OBJ,  /* a '}' where an array is open */
    JSONLEX_E_CLOSE_ARR,  /* a ']' where an object is open */
};

/* Where the contents of a string go (jsonlex_sink). */
enum jsonlex_sink {
    JSONLEX_DROP, /* nowhere (the default) */
    JSONLEX_BUF,  /* the lexer's buffer, handed to the key or value hook */
    JSONLEX_PUT,  /* the put hook, up to a cap */
};

/* jsonlex_init's flags. */
#define JSONLEX_TOP_CONTAINER 1u /* a scalar at the top fails (JSONLEX_E_TOP) when it ends */
#define JSONLEX_NO_NUL 2u        /* \u0000 gives U+FFFD: the caller keeps C strings */

/*
 * The caller's hooks. ctx is jsonlex_init's. Each returns 1 to go on, or 0
 * to stop: jsonlex_feed returns at once, having read the byte the hook was
 * called for. A hook returns 0 after recording an error of its own, or to
 * read part of the text itself (jsonlex_skip, jsonlex_pop) and feed the
 * rest later. Hooks may call jsonlex_at and jsonlex_depth; the string hook
 * calls jsonlex_sink. Every hook must be set.
 *
 * open: a '{' or '[' (kind) began a value; it is already counted in the
 *       depth. close: a '}' or ']' (kind) ended one, no longer counted.
 * string: a string began (its '"' read); key says whether it is an
 *       object's key. Its contents go to JSONLEX_DROP unless this hook
 *       chooses otherwise.
 * put: bytes of a string sent to JSONLEX_PUT: s[0..n) (borrowed, valid
 *       during the call), whole characters except that a character's
 *       bytes may come in several calls when the text cuts it.
 * key: a key ended: s[0..n) its contents (NUL-terminated) for a JSONLEX_BUF
 *       sink, or, if they pass JSONLEX_BUF_MAX bytes, n = JSONLEX_BUF_MAX +
 *       1 and s the whole characters of its first JSONLEX_BUF_MAX bytes;
 *       "" and 0 for another sink.
 * value: a scalar ended. kind 's' a string (s and n as for key), 'n' a
 *       number, 'b' true or false, 'z' null; for these three s[0..n) is its
 *       text (NUL-terminated; a number's checked against JSON's grammar).
 * fail: the text is not JSON (see enum jsonlex_err): what is a phrase for
 *       a message ("a ':' must come"), at the offset of the byte at fault
 *       (of the end, for a number the end cuts). The lexer then reads
 *       nothing more.
 */
struct jsonlex_hooks {
    int (*open)(void *ctx, int kind);
    int (*close)(void *ctx, int kind);
    int (*string)(void *ctx, bool key);
    int (*put)(void *ctx, const char *s, size_t n);
    int (*key)(void *ctx, const char *s, size_t n);
    int (*value)(void *ctx, int kind, const char *s, size_t n);
    void (*fail)(void *ctx, enum jsonlex_err err, const char *what, uint64_t at);
};

/* The lexer. Embed it; its fields are private (read them through the
 * functions below). */
struct jsonlex {
    const struct jsonlex_hooks *h;
    void *ctx;
    uint8_t *stack; /* bit d: level d is an object */
    size_t max_depth, depth;
    unsigned flags;
    uint64_t at; /* bytes consumed */
    uint8_t state, tok, sink;
    bool failed;
    /* a string: escape state, \u digits, a pending high surrogate, UTF-8 */
    bool key;               /* the string is a key */
    uint8_t esc;            /* 0 none, 1 after '\\', 2..5 reading \u's hex digits */
    uint8_t utf8_need;      /* continuation bytes still expected */
    unsigned char lo8, hi8; /* the range of the next one */
    uint32_t u, hi;         /* the \u value being read; a high surrogate waiting (0: none) */
    size_t len, cap;        /* bytes put (or in buf), and the most that may be */
    bool cut;               /* the cap was reached: the rest is dropped */
    char buf[JSONLEX_BUF_MAX + 1];
    /* a number or a literal */
    size_t numlen;
    char num[JSONLEX_NUM_MAX + 1];
    const char *lit;
    size_t litpos;
};

/*
 * jsonlex_init - a lexer at the start of a text. h and ctx are borrowed
 * (valid while the lexer is used). stack (borrowed; the caller's, of
 * JSONLEX_STACK_BYTES(max_depth) bytes) holds the kinds of the open
 * containers: an object or array that would be the (max_depth + 1)th open
 * fails with JSONLEX_E_DEPTH. flags: JSONLEX_TOP_CONTAINER, JSONLEX_NO_NUL.
 */
void jsonlex_init(struct jsonlex *lx, const struct jsonlex_hooks *h, void *ctx, uint8_t *stack,
                  size_t max_depth, unsigned flags);

/*
 * jsonlex_feed - reads buf[0..len) (borrowed), calling the hooks. Returns
 * the bytes read: len, or fewer when a hook returned 0 (the rest is
 * unread) or the text failed (then 0 from every later call).
 */
size_t jsonlex_feed(struct jsonlex *lx, const void *buf, size_t len);

/*
 * jsonlex_finish - the text has ended: a number it ends with is ended (its
 * value hook, or fail, runs). Returns 1, or 0 when a hook returned 0 or
 * the number was malformed. The caller then asks jsonlex_done.
 */
int jsonlex_finish(struct jsonlex *lx);

/* jsonlex_done - one whole top value was read, and nothing after it but
 * blanks so far. jsonlex_busy - a string, number or literal is being read. */
bool jsonlex_done(const struct jsonlex *lx);
bool jsonlex_busy(const struct jsonlex *lx);

/* jsonlex_at - the bytes read so far. jsonlex_depth - the containers open. */
uint64_t jsonlex_at(const struct jsonlex *lx);
size_t jsonlex_depth(const struct jsonlex *lx);

/*
 * jsonlex_sink - from the string hook only: where the string's contents go.
 * cap (JSONLEX_PUT only; JSONLEX_BUF's is JSONLEX_BUF_MAX) is the most
 * bytes put: the string is cut at the last character boundary at or
 * before it, the rest of it dropped (still checked), and jsonlex_cut then
 * says so. SIZE_MAX: no cap.
 */
void jsonlex_sink(struct jsonlex *lx, enum jsonlex_sink sink, size_t cap);
bool jsonlex_cut(const struct jsonlex *lx);

/*
 * jsonlex_skip, jsonlex_pop - for a caller that reads the inside of a
 * container itself (its open hook returned 0): jsonlex_skip counts n bytes
 * it read as read; jsonlex_pop closes the innermost container (its closing
 * byte read by the caller; the close hook is not called), after which the
 * caller feeds the lexer again.
 */
void jsonlex_skip(struct jsonlex *lx, uint64_t n);
void jsonlex_pop(struct jsonlex *lx);

/*
 * The failure a push parser built on the lexer keeps (the source-map and
 * heap-snapshot parsers): the first reason recorded (the parser's own
 * enum, never 0) and its message, both sticky. A parser embeds one, sets
 * it from its hooks and checks, and hands the message out when it
 * finishes.
 */
struct jsonlex_fail {
    int err;   /* 0: none yet */
    char *why; /* owned; NULL when the message could not be allocated */
};

/*
 * jsonlex_fail_set - records reason err (not 0) with a printf message
 * (cut at 255 bytes), unless a reason is recorded already: the first one
 * stands. Returns 0, a hook's "stop", so that a hook can end with it.
 */
int jsonlex_fail_set(struct jsonlex_fail *f, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int jsonlex_fail_setv(struct jsonlex_fail *f, int err, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/*
 * What a parser's text is, for the messages of jsonlex_fail_lexer: name
 * ("the map") and the parser's reasons for malformed JSON (e_json) and for
 * nesting past the lexer's limit (e_depth).
 */
struct jsonlex_doc {
    const char *name;
    int e_json, e_depth;
};

/*
 * jsonlex_fail_lexer - records the lexer's failure (the fail hook's
 * arguments; lx the failing lexer) in f in the words every parser uses:
 * "JSON nesting deeper than N at byte B" (e_depth), "<name> is not a JSON
 * object" (a scalar at the top), and "malformed JSON at byte B: <what>"
 * (e_json) for the rest, with "bytes after <name>" for JSONLEX_E_AFTER.
 */
void jsonlex_fail_lexer(struct jsonlex_fail *f, const struct jsonlex_doc *d,
                        const struct jsonlex *lx, enum jsonlex_err err, const char *what,
                        uint64_t at);

/* jsonlex_fail_take - the message, now the caller's (isoprof_free); f keeps
 * its reason. jsonlex_fail_free - frees the message. */
char *jsonlex_fail_take(struct jsonlex_fail *f);
void jsonlex_fail_free(struct jsonlex_fail *f);

#endif

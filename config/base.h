/*
 * base.h - the project's error codes, allocation wrapper and the small
 * primitives every module needs once: a capped growable buffer, a UTF-8
 * validator, a JSON string writer, gzip, a PRNG, clocks, whole reads and
 * writes on a descriptor, the names of fault signals and an assert.
 *
 * Every library in isoprof (config, storage, uploader) and the agent share
 * one table of error codes and one allocator entry point, so that:
 *   - a function that can fail returns 0, a negative errno, or a negative
 *     ISOPROF_E* code, and isoprof_strerror() names any of them;
 *   - tests can make the Nth allocation fail and walk every init and
 *     conversion path with it (isoprof_alloc_fail_after()).
 *
 * This header depends on nothing but libc; the library links zlib for
 * isoprof_gzip/isoprof_gunzip. It lives in config/ because config is the
 * lowest layer of the dependency graph; it is built as its own small
 * library (isoprof_base) so that storage and uploader link it without
 * pulling in the YAML loader.
 */
#ifndef ISOPROF_BASE_H
#define ISOPROF_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Project error codes. Each entry: name, message. The values are negative
 * and start well below any errno value, so a single int carries either.
 */
#define ISOPROF_ERRNO_MAP(XX)                                                   \
    XX(EMAGIC, "not an isoprof store (bad magic)")                              \
    XX(ESCHEMA, "store schema version mismatch")                                \
    XX(ECORRUPT, "corrupt record")                                              \
    XX(EMAPFULL, "store map is full")                                           \
    XX(ENOTFOUND, "not found")                                                  \
    XX(EPROFILE, "invalid V8 profile")                                          \
    XX(EJSON, "malformed JSON")                                                 \
    XX(ECDP, "CDP error reply")                                                 \
    XX(EWS, "WebSocket protocol error")                                         \
    XX(ETOOBIG, "message exceeds its size cap")                                 \
    XX(EHTTP, "unexpected HTTP answer")                                         \
    XX(ETIMEDOUT, "request timed out")                                          \
    XX(ECLOSED, "connection closed")                                            \
    XX(EZSTD, "zstd error")                                                     \
    XX(EPROTOBUF, "protobuf encode/decode error")                               \
    XX(ECURL, "libcurl error")                                                  \
    XX(ECONFIG, "invalid configuration")                                        \
    XX(EDAMAGED, "store file is damaged")

enum {
    ISOPROF__ERR_BASE = -30000,
#define XX(name, msg) ISOPROF_##name,
    ISOPROF_ERRNO_MAP(XX)
#undef XX
    ISOPROF__ERR_END
};

/*
 * isoprof_strerror - a static, human-readable message for err.
 * err: 0, a negative errno, or an ISOPROF_E* code. Never returns NULL.
 * Thread-safe; the result is valid for the life of the process.
 */
const char *isoprof_strerror(int err);

/*
 * isoprof_errname - the symbolic name ("ENOMEM", "ISOPROF_ECORRUPT").
 * Never returns NULL; "UNKNOWN" for codes outside both tables.
 */
const char *isoprof_errname(int err);

/*
 * Allocation wrapper. All project code allocates through these, never
 * through malloc() directly (the failure injector below only sees these).
 * They return NULL on failure like their libc twins; nothing aborts.
 * isoprof_free(NULL) is a no-op. Thread-safe.
 */
void *isoprof_malloc(size_t n);
void *isoprof_calloc(size_t count, size_t size);
void *isoprof_realloc(void *p, size_t n);
void isoprof_free(void *p);
char *isoprof_strdup(const char *s);
char *isoprof_strndup(const char *s, size_t n);
/* printf into a fresh allocation; NULL on failure. Caller frees. */
char *isoprof_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * isoprof_grow - for a reader that has filled its buffer buf of *cap
 * bytes: buf reallocated to twice that, but never past limit bytes (a
 * reader that must tell "exactly max" from "more" passes max + 1). Returns
 * the new allocation, *cap set to its size; or NULL with *err set to
 * ISOPROF_ETOOBIG (*cap is already limit) or -ENOMEM, buf then still
 * valid and owned by the caller, *cap unchanged. Thread-safe.
 */
void *isoprof_grow(void *buf, size_t *cap, size_t limit, int *err);

/*
 * isoprof_alloc_fail_after - test hook: the allocation after the next n
 * succeed fails (n = 0: the very next one), and every later one succeeds
 * again. n < 0 disarms it. isoprof_alloc_count() returns the number of
 * allocation calls made since the process started (to size a walk).
 */
void isoprof_alloc_fail_after(long n);
unsigned long isoprof_alloc_count(void);

/*
 * isoprof_json_depth - how deeply the JSON text s[0..n) nests arrays and
 * objects, counted up to limit: the result is min(depth, limit + 1), so a
 * result over limit means "too deep" without scanning a hostile text to
 * its end. Bytes only: strings are skipped (escapes honoured), nothing is
 * validated, nothing allocated. Use it before any parser that builds a
 * tree or recurses (yajl_tree_parse, whose free is recursive): a body of
 * 600 KB of "[[[[" is then an error, not 300,000 stack frames.
 */
unsigned isoprof_json_depth(const char *s, size_t n, unsigned limit);

/* The value of one hex digit (either case), or -1 if c is not one. */
int isoprof_hexval(int c);

/* Wall clock and CLOCK_MONOTONIC in nanoseconds. */
uint64_t isoprof_now_wall_ns(void);
uint64_t isoprof_now_mono_ns(void);

#ifndef container_of
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
#endif

#define ISOPROF_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/*
 * A seeded pseudo-random generator (xorshift64): jitter and backoff, never
 * secrets. One loop thread owns each. isoprof_rng_seed with a fixed seed
 * gives a repeatable sequence (tests); isoprof_rng_init seeds from
 * getrandom(2), or the monotonic clock when that fails.
 */
struct isoprof_rng {
    uint64_t s;
};
void isoprof_rng_seed(struct isoprof_rng *r, uint64_t seed); /* 0 is replaced by 1 */
void isoprof_rng_init(struct isoprof_rng *r);
uint64_t isoprof_rng_next(struct isoprof_rng *r);
double isoprof_rng_unit(struct isoprof_rng *r); /* uniform in [0, 1) */

/*
 * A growable byte buffer with a hard cap: what a target or
 * the network sends can never grow it past max. The first append that fails
 * (-ENOMEM, or ISOPROF_ETOOBIG past the cap) is remembered in err and every
 * later append is a no-op that returns it, so a writer appends many pieces
 * and checks once. Whenever data is not NULL, data[len] is a
 * NUL, so a text buffer is a C string; the NUL is not counted in len nor
 * against max. Fields are read-only outside these functions. One thread at
 * a time; no locking.
 */
struct isoprof_buf {
    char *data; /* NULL until the first append; owned by the buffer */
    size_t len; /* bytes held */
    size_t cap; /* bytes allocated */
    size_t max; /* len never exceeds this */
    int err;    /* 0, or the first failure (sticky) */
};

/* isoprof_buf_init - an empty buffer that will hold at most max bytes.
 * Allocates nothing, cannot fail. A zeroed struct is an empty buffer with
 * max 0. */
void isoprof_buf_init(struct isoprof_buf *b, size_t max);

/*
 * isoprof_buf_reserve - make room for n more bytes (len + n <= max) without
 * changing len, so that the next appends of n bytes in all cannot fail.
 * Returns 0, or the sticky error: -ENOMEM, ISOPROF_ETOOBIG (len + n > max),
 * or an earlier failure.
 */
int isoprof_buf_reserve(struct isoprof_buf *b, size_t n);

/*
 * isoprof_buf_append - append p[0..n) (p borrowed; may be NULL when n is 0).
 * isoprof_buf_putc - append one byte (c converted to unsigned char).
 * isoprof_buf_puts - append the C string s.
 * isoprof_buf_printf - append printf output.
 * Each returns 0 or the sticky error (-ENOMEM, ISOPROF_ETOOBIG, -EINVAL for
 * a format vsnprintf rejects). A failed append leaves len and data as they
 * were before it: nothing partial is kept.
 */
int isoprof_buf_append(struct isoprof_buf *b, const void *p, size_t n);
int isoprof_buf_putc(struct isoprof_buf *b, int c);
int isoprof_buf_puts(struct isoprof_buf *b, const char *s);
int isoprof_buf_printf(struct isoprof_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* isoprof_buf_reset - len and err back to 0; keeps the allocation and max. */
void isoprof_buf_reset(struct isoprof_buf *b);

/* isoprof_buf_free - frees the allocation; b is then empty (as after init
 * with the same max) and may be reused. */
void isoprof_buf_free(struct isoprof_buf *b);

/*
 * isoprof_buf_take - hand the bytes to the caller: on success *out is a
 * NUL-terminated allocation of *len bytes (plus the NUL) that the caller
 * frees with isoprof_free (an empty buffer gives a fresh "" allocation),
 * and b is left empty. If the buffer holds an error, that error is
 * returned, the bytes are freed, *out is NULL and *len 0; b is left empty
 * with err cleared. len may be NULL. Errors: the sticky error, -ENOMEM.
 */
int isoprof_buf_take(struct isoprof_buf *b, char **out, size_t *len);

/*
 * isoprof_utf8_seq - the length (1 to 4) of the well-formed UTF-8 sequence
 * that starts at s[0], of the n bytes available, or 0 if there is none
 * (n is 0, a stray continuation byte, a byte that never appears in UTF-8,
 * a sequence cut short by n or by a non-continuation byte, an overlong
 * form, a surrogate U+D800..U+DFFF, or a code point past U+10FFFF), as
 * RFC 3629 defines it. Every ASCII byte, NUL included, is a sequence of 1:
 * callers that refuse NUL check for it themselves.
 *
 * isoprof_utf8_valid_prefix - the length of the longest prefix of s[0..n)
 * that is well-formed UTF-8 (so the text is valid iff the result is n); it
 * never ends inside a sequence.
 *
 * Both are pure, allocate nothing, and may be called from any thread.
 */
size_t isoprof_utf8_seq(const uint8_t *s, size_t n);
size_t isoprof_utf8_valid_prefix(const uint8_t *s, size_t n);

/*
 * isoprof_json_str - append s (a C string; borrowed) to b as a JSON string
 * in double quotes; s NULL appends the literal null.
 * isoprof_json_strn - the same for the n bytes s[0..n) (NUL bytes included,
 * written \u0000); s may be NULL when n is 0.
 *
 * One escaping policy for every JSON text isoprof writes: " and \ are
 * backslash-escaped; \b \f \n \r \t take their short forms; every other
 * byte below 0x20, and 0x7f, becomes \u00xx (lowercase hex); well-formed
 * UTF-8 (isoprof_utf8_seq) passes through unchanged; each byte that does not
 * start one becomes U+FFFD (EF BF BD). The result is always valid JSON and
 * valid UTF-8 whatever s holds.
 * Returns 0 or b's sticky error (-ENOMEM, ISOPROF_ETOOBIG); on error the
 * string is not appended in part (len is as before the call).
 */
int isoprof_json_str(struct isoprof_buf *b, const char *s);
int isoprof_json_strn(struct isoprof_buf *b, const char *s, size_t n);

/*
 * isoprof_gzip - gzip-compress in[0..len) (one member, default level, no
 * name, mtime 0: the same input gives the same bytes). On success *out is
 * an allocation of *outlen bytes that the caller frees with isoprof_free.
 * in is borrowed; may be NULL when len is 0. Any thread.
 * Errors: -EINVAL (bad arguments, len > UINT32_MAX), -ENOMEM.
 *
 * isoprof_gunzip - inflate exactly one gzip member in[0..len) into *out
 * (isoprof_free; NUL not appended) of *outlen bytes, at most cap of them.
 * Errors: -EINVAL (bad arguments), ISOPROF_ECORRUPT (not gzip, damaged,
 * cut short, empty, or bytes after the member), ISOPROF_ETOOBIG (would
 * inflate past cap), -ENOMEM. Any thread.
 *
 * These two link zlib; the rest of base needs only libc.
 */
int isoprof_gzip(const void *in, size_t len, uint8_t **out, size_t *outlen);
int isoprof_gunzip(const void *in, size_t len, size_t cap, uint8_t **out, size_t *outlen);

/*
 * Whole reads and writes on a file descriptor (io.c): each retries EINTR
 * and short counts, so that the caller sees one result for the whole
 * buffer. Blocking; any thread.
 *
 * isoprof_pread_full - up to n bytes of fd at offset off into buf.
 * Returns how many were read: n, fewer when the file ends first or an
 * error follows some bytes, or -1 (errno set) when the first read fails.
 *
 * isoprof_pwrite_full, isoprof_write_full - all n bytes of buf to fd, at
 * offset off or at its file position. Return 0, or a negative errno (-EIO
 * when the file takes no byte); how much of buf was written is then
 * unknown.
 */
ssize_t isoprof_pread_full(int fd, void *buf, size_t n, off_t off);
int isoprof_pwrite_full(int fd, const void *buf, size_t n, off_t off);
int isoprof_write_full(int fd, const void *buf, size_t n);

/*
 * isoprof_fault_name - "SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL" or
 * "SIGFPE": the signals that a fault of the code, or of the data it
 * follows (a damaged mapping, a wild pointer, an assertion), ends a
 * process with; NULL for any other signal. A static string; any thread,
 * async-signal-safe.
 */
const char *isoprof_fault_name(int sig);

/*
 * isoprof_fault_child - in a forked child whose fault is its parent's
 * finding (a reader of a file that may be damaged): the fault signals
 * (isoprof_fault_name's, SIGTRAP and SIGSYS) back to their default action
 * and unblocked, so that no handler of the parent's or of a sanitizer's
 * runs, and no core is dumped. System calls only: for the child between
 * fork and its work.
 */
void isoprof_fault_child(void);

/*
 * ISOPROF_ASSERT(cond) - a broken invariant of the program itself: names
 * file:line and the condition on stderr, then aborts. Never for bad input
 * (that is an error code) nor for what the environment may do (that is
 * logged and survived): only for what a correct program cannot reach. Kept
 * in release builds: a daemon that carries on from a broken state loses
 * data silently.
 */
#define ISOPROF_ASSERT(cond)                                                                    \
    ((cond) ? (void)0 : isoprof_assert_fail(#cond, __FILE__, __LINE__))
void isoprof_assert_fail(const char *cond, const char *file, int line)
    __attribute__((noreturn, cold));

#endif

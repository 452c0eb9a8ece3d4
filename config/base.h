/*
 * base.h - the project's error codes and allocation wrapper.
 *
 * Every library in isoprof (config, storage, uploader) and the agent share
 * one table of error codes and one allocator entry point, so that:
 *   - a function that can fail returns 0, a negative errno, or a negative
 *     ISOPROF_E* code, and isoprof_strerror() names any of them;
 *   - tests can make the Nth allocation fail and walk every init and
 *     conversion path with it (isoprof_alloc_fail_after()).
 *
 * This file depends on nothing but libc. It lives in config/ because config
 * is the lowest layer of the dependency graph; it is built as its own small
 * library (isoprof_base) so that storage and uploader link it without
 * pulling in the YAML loader.
 */
#ifndef ISOPROF_BASE_H
#define ISOPROF_BASE_H

#include <stddef.h>
#include <stdint.h>

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
 * through malloc() directly (the banned-function check enforces it).
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

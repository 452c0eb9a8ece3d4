/*
 * base.c - error table and allocation wrapper (see base.h).
 *
 * The failure injector is a single atomic countdown: tests arm it, the
 * allocation that brings it to zero fails, and it disarms itself. It is
 * process-wide because the thread pool allocates too.
 */
#include "base.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static atomic_long fail_countdown = -1;
static atomic_ulong alloc_calls;

static int alloc_should_fail(void)
{
    atomic_fetch_add_explicit(&alloc_calls, 1, memory_order_relaxed);
    long cur = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    while (cur >= 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &cur, cur - 1))
            return cur == 0;
    }
    return 0;
}

void isoprof_alloc_fail_after(long n)
{
    atomic_store(&fail_countdown, n < 0 ? -1 : n);
}

unsigned long isoprof_alloc_count(void)
{
    return atomic_load(&alloc_calls);
}

void *isoprof_malloc(size_t n)
{
    if (alloc_should_fail())
        return NULL;
    return malloc(n == 0 ? 1 : n); /* banned-ok: the wrapper itself */
}

void *isoprof_calloc(size_t count, size_t size)
{
    if (alloc_should_fail())
        return NULL;
    return calloc(count == 0 ? 1 : count, size == 0 ? 1 : size); /* banned-ok */
}

void *isoprof_realloc(void *p, size_t n)
{
    if (alloc_should_fail())
        return NULL;
    return realloc(p, n == 0 ? 1 : n); /* banned-ok */
}

void *isoprof_grow(void *buf, size_t *cap, size_t limit, int *err)
{
    if (*cap >= limit) {
        *err = ISOPROF_ETOOBIG;
        return NULL;
    }
    /* Halving limit rather than doubling *cap cannot overflow. */
    size_t ncap = *cap > limit / 2 ? limit : *cap * 2;
    void *nb = isoprof_realloc(buf, ncap);
    if (nb == NULL) {
        *err = -ENOMEM;
        return NULL;
    }
    *cap = ncap;
    return nb;
}

void isoprof_free(void *p)
{
    free(p); /* banned-ok */
}

char *isoprof_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = isoprof_malloc(len + 1);
    if (d == NULL)
        return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

char *isoprof_strdup(const char *s)
{
    return isoprof_strndup(s, strlen(s));
}

char *isoprof_asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *buf = isoprof_malloc((size_t)n + 1);
    if (buf == NULL)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(buf, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return buf;
}

const char *isoprof_strerror(int err)
{
    if (err == 0)
        return "success";
    switch (err) {
#define XX(name, msg)                                                                              \
    case ISOPROF_##name:                                                                           \
        return msg;
        ISOPROF_ERRNO_MAP(XX)
#undef XX
    default:
        break;
    }
    if (err < 0 && err > -4096)
        return strerror(-err);
    return "unknown error";
}

const char *isoprof_errname(int err)
{
    switch (err) {
    case 0:
        return "OK";
#define XX(name, msg)                                                                              \
    case ISOPROF_##name:                                                                           \
        return "ISOPROF_" #name;
        ISOPROF_ERRNO_MAP(XX)
#undef XX
    case -ENOMEM:
        return "ENOMEM";
    case -EINVAL:
        return "EINVAL";
    case -EIO:
        return "EIO";
    case -ENOENT:
        return "ENOENT";
    case -ENOSPC:
        return "ENOSPC";
    case -EEXIST:
        return "EEXIST";
    case -ERANGE:
        return "ERANGE";
    default:
        return "UNKNOWN";
    }
}

int isoprof_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t isoprof_now_wall_ns(void)
{
    return clock_ns(CLOCK_REALTIME);
}

uint64_t isoprof_now_mono_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

void isoprof_rng_seed(struct isoprof_rng *r, uint64_t seed)
{
    r->s = seed ? seed : 1;
}

void isoprof_rng_init(struct isoprof_rng *r)
{
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed) || seed == 0)
        seed = isoprof_now_mono_ns() | 1;
    isoprof_rng_seed(r, seed);
}

uint64_t isoprof_rng_next(struct isoprof_rng *r)
{
    uint64_t x = r->s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    r->s = x;
    return x;
}

double isoprof_rng_unit(struct isoprof_rng *r)
{
    return (double)(isoprof_rng_next(r) >> 11) / 9007199254740992.0; /* 2^53 */
}

void isoprof_assert_fail(const char *cond, const char *file, int line)
{
    fprintf(stderr, "isoprof: %s:%d: invariant broken: %s\n", file, line, cond);
    fflush(stderr);
    abort();
}

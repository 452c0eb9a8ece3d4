/*
 * buf.c - the capped growable byte buffer (see base.h).
 *
 * The allocation grows by doubling from 64 bytes and is clamped to max + 1
 * (room for the terminating NUL), so a buffer with a small cap never holds
 * much more memory than the cap, and a large one reallocates O(log n)
 * times. The first failure is stored in err; every later call returns it
 * without touching the bytes.
 */
#include "base.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define BUF_MIN_ALLOC 64

void isoprof_buf_init(struct isoprof_buf *b, size_t max)
{
    memset(b, 0, sizeof(*b));
    b->max = max;
}

/* Room for need bytes of content and the NUL after them; need <= max. */
static int buf_grow(struct isoprof_buf *b, size_t need)
{
    if (need < b->cap)
        return 0;
    size_t limit = b->max < SIZE_MAX ? b->max + 1 : SIZE_MAX;
    size_t nc = b->cap ? b->cap : BUF_MIN_ALLOC;
    while (nc <= need && nc <= limit / 2)
        nc *= 2;
    if (nc <= need || nc > limit)
        nc = limit;
    char *p = isoprof_realloc(b->data, nc);
    if (p == NULL)
        return -ENOMEM;
    b->data = p;
    b->cap = nc;
    return 0;
}

int isoprof_buf_reserve(struct isoprof_buf *b, size_t n)
{
    if (b->err)
        return b->err;
    if (n > b->max - b->len)
        return b->err = ISOPROF_ETOOBIG;
    int rc = buf_grow(b, b->len + n);
    if (rc != 0)
        return b->err = rc;
    b->data[b->len] = '\0';
    return 0;
}

int isoprof_buf_append(struct isoprof_buf *b, const void *p, size_t n)
{
    int rc = isoprof_buf_reserve(b, n);
    if (rc != 0)
        return rc;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int isoprof_buf_putc(struct isoprof_buf *b, int c)
{
    char ch = (char)(unsigned char)c;
    return isoprof_buf_append(b, &ch, 1);
}

int isoprof_buf_puts(struct isoprof_buf *b, const char *s)
{
    return isoprof_buf_append(b, s, strlen(s));
}

int isoprof_buf_printf(struct isoprof_buf *b, const char *fmt, ...)
{
    if (b->err)
        return b->err;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return b->err = -EINVAL;
    int rc = isoprof_buf_reserve(b, (size_t)n);
    if (rc != 0)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void isoprof_buf_reset(struct isoprof_buf *b)
{
    b->len = 0;
    b->err = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

void isoprof_buf_free(struct isoprof_buf *b)
{
    isoprof_free(b->data);
    isoprof_buf_init(b, b->max);
}

int isoprof_buf_take(struct isoprof_buf *b, char **out, size_t *len)
{
    int rc = b->err;
    if (rc == 0 && b->data == NULL) {
        b->data = isoprof_malloc(1);
        if (b->data == NULL)
            rc = -ENOMEM;
        else
            b->data[0] = '\0';
    }
    if (rc != 0) {
        isoprof_buf_free(b);
        *out = NULL;
        if (len != NULL)
            *len = 0;
        return rc;
    }
    *out = b->data;
    if (len != NULL)
        *len = b->len;
    isoprof_buf_init(b, b->max);
    return 0;
}

/*
 * log.c - logfmt lines on stderr (see log.h).
 *
 * A line is built in a fixed stack buffer and written with one write(2),
 * so lines from the daemon never interleave and a huge value is truncated
 * (marked with "...") rather than allocated.
 */
#include "log.h"

#include "base.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 2048
#define LOG_VALUE_MAX 400

static enum cfg_log_level log_level = CFG_LOG_INFO;
static struct log_limiter log_limit;

int agent_log_admit(struct log_limiter *l, const char *msg, uint64_t now_ms, uint64_t *dropped)
{
    struct log_limit_slot *s = NULL, *lru = &l->slot[0];
    for (size_t i = 0; i < LOG_LIMIT_SLOTS; i++) {
        if (l->slot[i].msg == msg) {
            s = &l->slot[i];
            break;
        }
        if (l->slot[i].used_ms < lru->used_ms || l->slot[i].msg == NULL)
            lru = &l->slot[i];
    }
    if (s == NULL) {
        s = lru;
        *s = (struct log_limit_slot){.msg = msg, .window_ms = now_ms};
    }
    s->used_ms = now_ms;
    if (now_ms - s->window_ms >= LOG_WINDOW_MS) {
        s->window_ms = now_ms;
        s->lines = 0;
    }
    if (s->lines >= LOG_BURST) {
        s->suppressed++;
        return 0;
    }
    s->lines++;
    *dropped = s->suppressed;
    s->suppressed = 0;
    return 1;
}

void agent_log_set_level(enum cfg_log_level level)
{
    log_level = level;
}

enum cfg_log_level agent_log_get_level(void)
{
    return log_level;
}

static void put_raw(char *b, size_t cap, size_t *len, const char *s, size_t n)
{
    if (*len >= cap)
        return;
    size_t room = cap - *len;
    if (n > room)
        n = room;
    memcpy(b + *len, s, n);
    *len += n;
}

static int needs_quotes(const char *s)
{
    if (*s == '\0')
        return 1;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p >= 0x7f)
            return 1;
    }
    return 0;
}

void agent_log_value(char *b, size_t cap, size_t *len, const char *s)
{
    if (s == NULL)
        s = "";
    if (!needs_quotes(s)) {
        size_t n = strlen(s);
        if (n > LOG_VALUE_MAX) {
            put_raw(b, cap, len, s, LOG_VALUE_MAX);
            put_raw(b, cap, len, "...", 3);
        } else {
            put_raw(b, cap, len, s, n);
        }
        return;
    }
    put_raw(b, cap, len, "\"", 1);
    size_t written = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++, written++) {
        if (written >= LOG_VALUE_MAX) {
            put_raw(b, cap, len, "...", 3);
            break;
        }
        char esc[5];
        switch (*p) {
        case '"':
            put_raw(b, cap, len, "\\\"", 2);
            break;
        case '\\':
            put_raw(b, cap, len, "\\\\", 2);
            break;
        case '\n':
            put_raw(b, cap, len, "\\n", 2);
            break;
        case '\t':
            put_raw(b, cap, len, "\\t", 2);
            break;
        default:
            if (*p < 0x20 || *p == 0x7f) {
                snprintf(esc, sizeof(esc), "\\x%02x", *p);
                put_raw(b, cap, len, esc, 4);
            } else {
                put_raw(b, cap, len, (const char *)p, 1);
            }
        }
    }
    put_raw(b, cap, len, "\"", 1);
}

void agent_log(enum cfg_log_level level, const char *msg, const char *fmt, ...)
{
    if (level < log_level)
        return;
    uint64_t dropped = 0;
    if (level >= CFG_LOG_WARN &&
        !agent_log_admit(&log_limit, msg, isoprof_now_mono_ns() / 1000000u, &dropped))
        return;
    char b[LOG_LINE_MAX];
    size_t len = 0;
    char tmp[64];

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(
        tmp, sizeof(tmp), "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=", tm.tm_year + 1900,
        tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    put_raw(b, sizeof(b) - 1, &len, tmp, (size_t)n);
    const char *lv = cfg_log_level_name(level);
    put_raw(b, sizeof(b) - 1, &len, lv, strlen(lv));
    put_raw(b, sizeof(b) - 1, &len, " msg=", 5);
    agent_log_value(b, sizeof(b) - 1, &len, msg);

    va_list ap;
    va_start(ap, fmt);
    if (fmt != NULL && *fmt != '\0') {
        put_raw(b, sizeof(b) - 1, &len, " ", 1);
        for (const char *p = fmt; *p; p++) {
            if (*p != '%' || p[1] == '\0') {
                put_raw(b, sizeof(b) - 1, &len, p, 1);
                continue;
            }
            p++;
            switch (*p) {
            case 's':
                agent_log_value(b, sizeof(b) - 1, &len, va_arg(ap, const char *));
                continue;
            case 'e':
                agent_log_value(b, sizeof(b) - 1, &len, isoprof_strerror(va_arg(ap, int)));
                continue;
            case 'd':
                n = snprintf(tmp, sizeof(tmp), "%d", va_arg(ap, int));
                break;
            case 'u':
                n = snprintf(tmp, sizeof(tmp), "%u", va_arg(ap, unsigned));
                break;
            case 'U':
                n = snprintf(tmp, sizeof(tmp), "%" PRIu64, va_arg(ap, uint64_t));
                break;
            case 'I':
                n = snprintf(tmp, sizeof(tmp), "%" PRId64, va_arg(ap, int64_t));
                break;
            case 'f':
                n = snprintf(tmp, sizeof(tmp), "%.3f", va_arg(ap, double));
                break;
            default:
                tmp[0] = '%';
                tmp[1] = *p;
                n = 2;
                break;
            }
            put_raw(b, sizeof(b) - 1, &len, tmp, (size_t)n);
        }
    }
    va_end(ap);
    if (dropped) {
        n = snprintf(tmp, sizeof(tmp), " suppressed=%" PRIu64, dropped);
        put_raw(b, sizeof(b) - 1, &len, tmp, (size_t)n);
    }
    b[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, b, len);
    (void)w;
}

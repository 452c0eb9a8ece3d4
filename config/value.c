/*
 * value.c - the loader's problems and values: problems collected as
 * "file:line:col: message" lines and sorted at the end; the scalar parsers
 * (durations, sizes, fractions, counts, the inspector and listen
 * addresses); and one row's value set from its text with its bounds and
 * checks. See config.c for the design.
 */
#include "loader_internal.h"

#include "base.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Problem collection                                                       */

void cfg_errs_push(struct errs *e, size_t line, size_t col, char *text)
{
    if (text == NULL) {
        e->oom = 1;
        return;
    }
    e->ent[e->count].line = line;
    e->ent[e->count].col = col;
    e->ent[e->count].text = text;
    e->count++;
}

__attribute__((format(printf, 4, 5))) void cfg_err_at(struct errs *e, size_t line, size_t col,
                                                      const char *fmt, ...)
{
    if (e->count >= CFG_MAX_ERRORS) {
        e->full = 1;
        return;
    }
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cfg_errs_push(e, line, col, isoprof_asprintf("%s:%zu:%zu: %s", e->name, line, col, msg));
}

void cfg_errs_release(struct errs *e)
{
    for (unsigned i = 0; i < e->count; i++)
        isoprof_free(e->ent[i].text);
    e->count = 0;
}

int cfg_errs_finish(struct errs *e, char **out)
{
    for (unsigned i = 1; i < e->count; i++) {
        for (unsigned j = i; j > 0; j--) {
            if (e->ent[j - 1].line < e->ent[j].line ||
                (e->ent[j - 1].line == e->ent[j].line && e->ent[j - 1].col <= e->ent[j].col))
                break;
            struct err_line tmp = e->ent[j];
            e->ent[j] = e->ent[j - 1];
            e->ent[j - 1] = tmp;
        }
    }
    size_t total = 1;
    for (unsigned i = 0; i < e->count; i++)
        total += strlen(e->ent[i].text) + 1;
    char *buf = out != NULL && !e->oom ? isoprof_malloc(total) : NULL;
    if (buf != NULL) {
        size_t len = 0;
        for (unsigned i = 0; i < e->count; i++) {
            size_t n = strlen(e->ent[i].text);
            if (i)
                buf[len++] = '\n';
            memcpy(buf + len, e->ent[i].text, n);
            len += n;
        }
        buf[len] = '\0';
    }
    int rc = out != NULL && buf == NULL ? -ENOMEM : 0;
    if (out != NULL)
        *out = buf;
    cfg_errs_release(e);
    return rc;
}

const char *cfg_echo(char *buf, size_t cap, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0, limit = len;
    int cut = 0;
    if (limit > 64) {
        limit = 64;
        while (limit > 0 && ((unsigned char)s[limit] & 0xc0) == 0x80)
            limit--;
        cut = 1;
    }
    for (size_t i = 0; i < limit && o + 8 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch == 0x7f) {
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = hex[ch >> 4];
            buf[o++] = hex[ch & 15];
        } else {
            buf[o++] = (char)ch;
        }
    }
    if (cut && o + 4 < cap) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

/* ------------------------------------------------------------------------ */
/* Scalar parsers                                                           */

/*
 * Parse "<digits>[.<digits>]" at *sp into an integer part and the fraction
 * in units of 1e-9 (digits past the ninth are ignored). Advances *sp past
 * the number. Returns -EINVAL if there is no digit, -ERANGE if the integer
 * part does not fit (the caller still checks the rest of the syntax first).
 */
static int parse_decimal(const char **sp, uint64_t *ip, uint64_t *frac9)
{
    const char *p = *sp;
    uint64_t i = 0, f = 0;
    int digits = 0, fdigits = 0, overflow = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        unsigned d = (unsigned)(*p - '0');
        if (i > (UINT64_MAX - d) / 10)
            overflow = 1;
        else
            i = i * 10 + d;
    }
    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9'; p++, digits++) {
            if (fdigits < 9) {
                f = f * 10 + (uint64_t)(*p - '0');
                fdigits++;
            }
        }
    }
    if (digits == 0)
        return -EINVAL;
    for (; fdigits < 9; fdigits++)
        f *= 10;
    *sp = p;
    *ip = i;
    *frac9 = f;
    return overflow ? -ERANGE : 0;
}

/*
 * (ip + frac9 / 1e9) * mul, truncated, or -ERANGE. mul is below 1e13 for
 * every unit we have, so frac9 * (mul / 1e9) cannot overflow, and
 * frac9 * (mul % 1e9) < 1e18.
 */
static int scale(uint64_t ip, uint64_t frac9, uint64_t mul, uint64_t *out)
{
    if (mul != 0 && ip > UINT64_MAX / mul)
        return -ERANGE;
    uint64_t v = ip * mul;
    uint64_t fv = frac9 * (mul / NS_PER_S) + frac9 * (mul % NS_PER_S) / NS_PER_S;
    if (v > UINT64_MAX - fv)
        return -ERANGE;
    *out = v + fv;
    return 0;
}

/* A decimal number, optional spaces, then exactly one of units. */
static int parse_with_unit(const char *s, const struct unit *units, size_t nunits, uint64_t *out)
{
    uint64_t ip, frac9;
    if (s == NULL)
        return -EINVAL;
    const char *p = s;
    int rc = parse_decimal(&p, &ip, &frac9);
    if (rc == -EINVAL)
        return rc;
    while (*p == ' ')
        p++;
    for (size_t i = 0; i < nunits; i++) {
        if (strcmp(p, units[i].name) == 0) {
            if (rc != 0)
                return rc;
            uint64_t v;
            rc = scale(ip, frac9, units[i].mul, &v);
            if (rc == 0)
                *out = v;
            return rc;
        }
    }
    return -EINVAL;
}

static const struct unit duration_units[] = {
    {"ns", 1},
    {"us", 1000ull},
    {"\xc2\xb5s", 1000ull}, /* U+00B5 MICRO SIGN */
    {"\xce\xbcs", 1000ull}, /* U+03BC GREEK SMALL LETTER MU */
    {"ms", 1000000ull},
    {"s", NS_PER_S},
    {"m", 60 * NS_PER_S},
    {"h", 3600 * NS_PER_S},
};

static const struct unit size_units[] = {
    {"B", 1},
    {"KiB", 1ull << 10},
    {"MiB", 1ull << 20},
    {"GiB", 1ull << 30},
    {"TiB", 1ull << 40},
    {"KB", 1000ull},
    {"kB", 1000ull},
    {"MB", 1000000ull},
    {"GB", 1000000000ull},
    {"TB", 1000000000000ull},
};

int cfg_parse_duration(const char *s, uint64_t *ns)
{
    return parse_with_unit(s, duration_units, ISOPROF_ARRAY_SIZE(duration_units), ns);
}

int cfg_parse_size(const char *s, uint64_t *bytes)
{
    return parse_with_unit(s, size_units, ISOPROF_ARRAY_SIZE(size_units), bytes);
}

/* True if s is a plain decimal number with nothing after it: the value that
 * lacks a unit, for a better message. */
static int is_bare_number(const char *s)
{
    uint64_t ip, frac9;
    const char *p = s;
    return parse_decimal(&p, &ip, &frac9) != -EINVAL && *p == '\0';
}

/* A fraction's units, in parts per million: a bare number is a share of 1. */
static const struct unit fraction_units[] = {
    {"%", 10000},
    {"", 1000000},
};

/* "0.1" or "10%" -> parts per million. */
static int parse_fraction(const char *s, uint64_t *ppm)
{
    return parse_with_unit(s, fraction_units, ISOPROF_ARRAY_SIZE(fraction_units), ppm);
}

/* A bare whole number. */
static int parse_count(const char *s, uint64_t *v)
{
    uint64_t ip, frac9;
    const char *p = s;
    if (*p < '0' || *p > '9')
        return -EINVAL;
    int rc = parse_decimal(&p, &ip, &frac9);
    if (*p != '\0' || frac9 != 0 || strchr(s, '.') != NULL)
        return -EINVAL;
    if (rc == 0)
        *v = ip;
    return rc;
}

const char *cfg_log_level_name(enum cfg_log_level l)
{
    return l >= CFG_LOG_DEBUG && l <= CFG_LOG_ERROR ? cfg_log_level_names[l] : "info";
}

int cfg_host_char_ok(char ch, int v6)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
        return 1;
    if (v6)
        return ch == ':' || ch == '.' || ch == '%'; /* v4-mapped tail, zone id */
    return ch == '.' || ch == '-' || ch == '_';
}

/*
 * "host:port" or "[v6]:port". On success *host is a fresh allocation (the
 * host without brackets) and *port is set; otherwise *reason says why.
 */
static int parse_inspector(const char *s, char **host, uint16_t *port, const char **reason)
{
    const char *h, *he, *ps;
    int v6 = 0;
    if (*s == '[') {
        v6 = 1;
        h = s + 1;
        he = strchr(h, ']');
        if (he == NULL) {
            *reason = "'[' without ']'";
            return -EINVAL;
        }
        if (he[1] != ':') {
            *reason = "no ':port' after ']'";
            return -EINVAL;
        }
        ps = he + 2;
    } else {
        h = s;
        he = strrchr(s, ':');
        if (he == NULL) {
            *reason = "no ':port'";
            return -EINVAL;
        }
        if (memchr(s, ':', (size_t)(he - s)) != NULL) {
            *reason = "an IPv6 address needs brackets, as in [::1]:9229";
            return -EINVAL;
        }
        ps = he + 1;
    }
    size_t hl = (size_t)(he - h);
    if (hl == 0) {
        *reason = "the host is empty";
        return -EINVAL;
    }
    if (hl > 253) {
        *reason = "the host is longer than 253 bytes";
        return -EINVAL;
    }
    for (const char *p = h; p < he; p++) {
        if (!cfg_host_char_ok(*p, v6)) {
            *reason = "the host has a character that is not allowed";
            return -EINVAL;
        }
    }
    if (v6 && memchr(h, ':', hl) == NULL) {
        *reason = "brackets are only for IPv6 addresses";
        return -EINVAL;
    }
    unsigned long pv = 0;
    size_t pl = strlen(ps);
    if (pl == 0 || pl > 5 || strspn(ps, "0123456789") != pl) {
        *reason = "the port must be a number from 1 to 65535";
        return -EINVAL;
    }
    for (const char *p = ps; *p; p++)
        pv = pv * 10 + (unsigned long)(*p - '0');
    if (pv < 1 || pv > 65535) {
        *reason = "the port must be a number from 1 to 65535";
        return -EINVAL;
    }
    char *d = isoprof_strndup(h, hl);
    if (d == NULL)
        return -ENOMEM;
    *host = d;
    *port = (uint16_t)pv;
    return 0;
}

/* A bind address: host:port as parse_inspector reads it, with a host that
 * is numeric or localhost (a listener resolves nothing). 0, -EINVAL with
 * *reason set, or -ENOMEM. */
static int parse_listen(const char *s, const char **reason)
{
    char *host = NULL;
    uint16_t port = 0;
    unsigned char buf[sizeof(struct in6_addr)];
    int rc = parse_inspector(s, &host, &port, reason);
    if (rc == 0 && strcmp(host, "localhost") != 0 && inet_pton(AF_INET, host, buf) != 1 &&
        inet_pton(AF_INET6, host, buf) != 1) {
        rc = -EINVAL;
        *reason = "the host must be an IP address or localhost (nothing is resolved)";
    }
    isoprof_free(host);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Setting a value                                                          */

int cfg_set_value(const struct cfg_option *o, void *base, const char *text, size_t len,
                  const char *fullname, struct errs *e, struct pos p)
{
    void *field = cfg_field_of(o, base);
    char shown[320], lo[32], hi[32];
    uint64_t v = 0;
    int rc;
    cfg_echo(shown, sizeof(shown), text, len);
#define BAD(...)                                                                                   \
    do {                                                                                           \
        cfg_err_at(e, p.line, p.col, __VA_ARGS__);                                                 \
        return -EINVAL;                                                                            \
    } while (0)
    if (strlen(text) != len)
        BAD("%s must not contain a NUL byte", fullname);
    switch (o->type) {
    case CFG_T_LISTEN: {
        const char *reason = "";
        if (len > 0 && (rc = parse_listen(text, &reason)) != 0) {
            if (rc == -ENOMEM)
                return rc;
            BAD("%s '%s' is not ip:port, localhost:port or [v6]:port: %s (\"\" turns it off)",
                fullname, shown, reason);
        }
    }
        /* fall through */
    case CFG_T_STRING: {
        if (len == 0 && o->min == 0)
            BAD("%s must not be empty", fullname);
        if (o->max && len > o->max)
            BAD("%s is longer than %llu bytes", fullname, (unsigned long long)o->max);
        char buf[512];
        const char *problem = cfg_row_check(o, text, len, 0, shown, buf, sizeof(buf));
        if (problem != NULL)
            BAD("%s %s", fullname, problem);
        for (size_t i = 0; i < len; i++) {
            unsigned char ch = (unsigned char)text[i];
            if (ch < 0x20 || ch == 0x7f)
                BAD("%s must not contain control characters ('%s')", fullname, shown);
        }
        char *d = isoprof_strndup(text, len);
        if (d == NULL)
            return -ENOMEM;
        isoprof_free(*(char **)field);
        *(char **)field = d;
        return 0;
    }
    case CFG_T_INSPECTOR: {
        struct cfg_target *t = base;
        const char *reason = "";
        char *host = NULL;
        uint16_t port = 0;
        rc = parse_inspector(text, &host, &port, &reason);
        if (rc == -ENOMEM)
            return rc;
        if (rc != 0)
            BAD("%s '%s' is not host:port or [v6]:port: %s", fullname, shown, reason);
        char *d = isoprof_strndup(text, len);
        if (d == NULL) {
            isoprof_free(host);
            return -ENOMEM;
        }
        isoprof_free(t->inspector);
        isoprof_free(t->host);
        t->inspector = d;
        t->host = host;
        t->port = port;
        return 0;
    }
    case CFG_T_ENUM: {
        for (int i = 0; o->choices[i] != NULL; i++) {
            if (strcmp(text, o->choices[i]) == 0) {
                *(int *)field = i; /* int-sized: options.c asserts it */
                return 0;
            }
        }
        char names[128];
        BAD("%s must be %s, not '%s'", fullname,
            cfg_join_choices(o, ", ", " or ", names, sizeof(names)), shown);
    }
    case CFG_T_BOOL:
        if (strcmp(text, "true") != 0 && strcmp(text, "false") != 0)
            BAD("%s must be true or false, not '%s'", fullname, shown);
        *(int *)field = text[0] == 't';
        return 0;
    case CFG_T_MAP:
        /* set by set_map from the YAML node; no text is a mapping */
        BAD("%s must be a mapping of names to values", fullname);
    case CFG_T_STRLIST:
        /* set by set_strlist from the YAML node */
        BAD("%s must be a list of strings", fullname);
    case CFG_T_DURATION:
        rc = cfg_parse_duration(text, &v);
        if (rc == -ERANGE)
            BAD("%s '%s' is too large", fullname, shown);
        if (rc != 0 && is_bare_number(text))
            BAD("%s '%s' needs a unit (ns, us, ms, s, m or h), as in '%ss'", fullname, shown,
                shown);
        if (rc != 0)
            BAD("%s '%s' is not a duration (a number and a unit: ns, us, ms, s, m or h)", fullname,
                shown);
        break;
    case CFG_T_SIZE:
        if (o->auto_ok && strcmp(text, "auto") == 0) {
            *(uint64_t *)field = CFG_SIZE_AUTO;
            return 0;
        }
        rc = cfg_parse_size(text, &v);
        if (rc == -ERANGE)
            BAD("%s '%s' is too large", fullname, shown);
        if (rc != 0 && is_bare_number(text))
            BAD("%s '%s' needs a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB or TB), as in '%sMiB'",
                fullname, shown, shown);
        if (rc != 0)
            BAD("%s '%s' is not a size (a number and a unit: B, KiB, MiB, GiB, ...)", fullname,
                shown);
        break;
    case CFG_T_COUNT:
        rc = parse_count(text, &v);
        if (rc == -ERANGE)
            v = UINT64_MAX; /* reported by the bounds check below */
        else if (rc != 0)
            BAD("%s '%s' is not a whole number", fullname, shown);
        break;
    case CFG_T_FRACTION:
        rc = parse_fraction(text, &v);
        if (rc == -ERANGE)
            v = UINT64_MAX;
        else if (rc != 0)
            BAD("%s '%s' is not a share (as in 10%% or 0.1)", fullname, shown);
        break;
    }
    if (v < o->min || v > cfg_row_max(o)) {
        cfg_fmt_value(o, o->min, lo, sizeof(lo));
        if (o->max == 0 && o->type != CFG_T_COUNT)
            BAD("%s must be >= %s, not '%s'", fullname, lo, shown);
        cfg_fmt_value(o, cfg_row_max(o), hi, sizeof(hi));
        BAD("%s must be between %s and %s, not '%s'", fullname, lo, hi, shown);
    }
    switch (o->type) {
    case CFG_T_COUNT:
        *(uint32_t *)field = (uint32_t)v;
        break;
    case CFG_T_FRACTION:
        *(double *)field = (double)v / 1e6;
        break;
    default:
        *(uint64_t *)field = v;
    }
    return 0;
#undef BAD
}

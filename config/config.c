/*
 * config.c - the YAML loader, driven by the option table in options.c.
 *
 * The text is loaded as a libyaml document, so every node keeps the 1-based
 * line and column where it starts, and then walked. A mapping key either
 * names an option (its value must be a scalar; for a map option, a mapping
 * of names to scalars, walked up to the row's `max` entries; for a list
 * option, a sequence of scalars, up to CFG_STRLIST_MAX), a section
 * that prefixes options (its value must be a mapping), or `targets` (a list
 * of mappings whose keys are the per-target options, walked the same way:
 * a key there names a target option or a target section such as
 * `threads`). Anything else is an error.
 * Problems are collected, not returned at the first one, as lines (at most
 * CFG_MAX_ERRORS) that are sorted by position at the end. The walk stops
 * once there are that many, which also bounds the work a hostile file can
 * cause: the duplicate-key check is quadratic in the keys of one mapping,
 * but only keys already processed are compared, and each of those is
 * either a known option or a counted error. Nesting depth is checked on
 * libyaml's event stream before the document is built (see check_depth).
 * The configuration is handed out only when there was no problem at all.
 *
 * Defaults are applied first by parsing each row's `def` text with the code
 * that parses a file's value (a list's, "[node]", is read by libyaml and
 * walked as a file's list is); a row whose default is another row's value
 * (cfg_option.def_row) is resolved once its target entry has been walked.
 * Numbers are parsed with integer arithmetic (no strtod: no locale, no hex
 * or exponent forms, no rounding surprises). A row may carry its own check
 * (cfg_option.check, e.g. the upload URL's syntax in upload.c), run on a
 * string's value, on each key and value of a map or on each entry of a
 * list. Rules between options come from cfg_relations and are checked after
 * the walk, only between values that were themselves valid.
 *
 * Everything the loader allocates goes through isoprof_malloc and friends,
 * so the unit tests can fail each allocation in turn; libyaml's own
 * allocations do not, and a libyaml memory error maps to -ENOMEM.
 *
 * The file ends with cfg_control_socket_path, the one rule by which the
 * daemon and its clients find the control socket.
 */
#include "config.h"
#include "internal.h"

#include "base.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#define CFG_MAX_ERRORS 100
#define CFG_MAX_FILE (1u << 20)
#define CFG_MAX_TARGETS 4096
#define CFG_MAX_KEY 64 /* longer keys are unknown by definition */
#define CFG_MAX_DEPTH 16
#define CFG_MAX_ANCHORS 64
#define NS_PER_S 1000000000ull

/* ------------------------------------------------------------------------ */
/* Problem collection                                                       */

struct err_line {
    size_t line, col;
    char *text; /* the whole line, "name:line:col: message" */
};

struct errs {
    const char *name;                      /* file name, prefixes every line */
    struct err_line ent[CFG_MAX_ERRORS + 1]; /* + 1: room for the "too many" line */
    unsigned count;            /* problems kept in ent */
    int full;                  /* a problem was dropped: the walk stops */
    int oom;
};

/* Keep one line (ownership of text moves to e), or mark oom if text is NULL. */
static void errs_push(struct errs *e, size_t line, size_t col, char *text)
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

/* Record one problem at a 1-based line:col. */
__attribute__((format(printf, 4, 5))) static void err_at(struct errs *e, size_t line, size_t col,
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
    errs_push(e, line, col, isoprof_asprintf("%s:%zu:%zu: %s", e->name, line, col, msg));
}

static void errs_release(struct errs *e)
{
    for (unsigned i = 0; i < e->count; i++)
        isoprof_free(e->ent[i].text);
    e->count = 0;
}

/*
 * Sort the lines by position (stable, so problems found at one spot keep
 * their order, and rules checked after the walk land where they belong),
 * join them with '\n' into *out (NULL if out is NULL) and release them.
 * Returns 0 or -ENOMEM.
 */
static int errs_finish(struct errs *e, char **out)
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
    errs_release(e);
    return rc;
}

#define ERR_NODE(e, node, ...)                                                                     \
    err_at((e), (node)->start_mark.line + 1, (node)->start_mark.column + 1, __VA_ARGS__)

/*
 * Make a value fit to echo inside one message line: at most 64 bytes
 * (cut on a UTF-8 boundary, "..." appended), control bytes and NULs as \xNN.
 * Returns buf.
 */
static const char *echo(char *buf, size_t cap, const char *s, size_t len)
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

struct unit {
    const char *name;
    uint64_t mul;
};

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
/* Rows: formatting and field access                                        */

/* A value of row o's unit (ns, bytes, ppm, count) as a person writes it. */
static void fmt_value(const struct cfg_option *o, uint64_t v, char *buf, size_t cap)
{
    static const struct unit dur[] = {
        {"h", 3600 * NS_PER_S}, {"m", 60 * NS_PER_S}, {"s", NS_PER_S}, {"ms", 1000000ull},
        {"us", 1000ull},        {"ns", 1}};
    static const struct unit sz[] = {{"TiB", 1ull << 40}, {"GiB", 1ull << 30}, {"MiB", 1ull << 20},
                                     {"KiB", 1ull << 10}, {"B", 1}};
    const struct unit *u = NULL;
    size_t n = 0;
    if (o->type == CFG_T_DURATION) {
        u = dur;
        n = ISOPROF_ARRAY_SIZE(dur);
    } else if (o->type == CFG_T_SIZE) {
        if (o->auto_ok && v == CFG_SIZE_AUTO) {
            snprintf(buf, cap, "auto");
            return;
        }
        u = sz;
        n = ISOPROF_ARRAY_SIZE(sz);
    } else if (o->type == CFG_T_FRACTION) {
        /* A share prints as a percentage, a factor (> 1) as a number. */
        if (v > 1000000)
            snprintf(buf, cap, "%g", (double)v / 1000000.0);
        else
            snprintf(buf, cap, "%g%%", (double)v / 10000.0);
        return;
    } else {
        snprintf(buf, cap, "%llu", (unsigned long long)v);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (v != 0 && v % u[i].mul == 0) {
            snprintf(buf, cap, "%llu%s", (unsigned long long)(v / u[i].mul), u[i].name);
            return;
        }
    }
    snprintf(buf, cap, "0%s", u[n - 1].name);
}

static const char *type_name(enum cfg_type t)
{
    switch (t) {
    case CFG_T_STRING:
        return "string";
    case CFG_T_SIZE:
        return "size";
    case CFG_T_DURATION:
        return "duration";
    case CFG_T_COUNT:
        return "count";
    case CFG_T_FRACTION:
        return "share";
    case CFG_T_ENUM:
        return "enum";
    case CFG_T_BOOL:
        return "bool";
    case CFG_T_INSPECTOR:
        return "host:port";
    case CFG_T_LISTEN:
        return "address";
    case CFG_T_MAP:
        return "map";
    case CFG_T_STRLIST:
        return "list";
    }
    return "?";
}

/* The choices of an enum row joined into buf: "a, b or c" (or "a|b|c" when
 * sep is "|"). Returns buf. */
static const char *join_choices(const struct cfg_option *o, const char *sep, const char *last,
                                char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; o->choices[i] != NULL && len < cap; i++) {
        const char *s = i == 0 ? "" : o->choices[i + 1] == NULL ? last : sep;
        int n = snprintf(buf + len, cap - len, "%s%s", s, o->choices[i]);
        len += n > 0 ? (size_t)n : 0;
    }
    return buf;
}

/* The noun used in "X must be <noun>, not a list"; buf holds an enum's. */
static const char *type_noun(const struct cfg_option *o, char *buf, size_t cap)
{
    switch (o->type) {
    case CFG_T_STRING:
        return "a string";
    case CFG_T_SIZE:
        return "a size";
    case CFG_T_DURATION:
        return "a duration";
    case CFG_T_COUNT:
        return "a whole number";
    case CFG_T_FRACTION:
        return "a share";
    case CFG_T_ENUM:
        return join_choices(o, ", ", " or ", buf, cap);
    case CFG_T_BOOL:
        return "true or false";
    case CFG_T_INSPECTOR:
        return "host:port";
    case CFG_T_LISTEN:
        return "an address (ip:port)";
    case CFG_T_MAP:
        return "a mapping of names to values";
    case CFG_T_STRLIST:
        return "a list of strings";
    }
    return "a scalar";
}

/* The effective upper bound of a numeric row (max 0 = unbounded). */
static uint64_t row_max(const struct cfg_option *o)
{
    if (o->type == CFG_T_COUNT)
        return o->max != 0 && o->max < UINT32_MAX ? o->max : UINT32_MAX;
    return o->max != 0 ? o->max : UINT64_MAX;
}

/* "100ms..1h", ">= 1MiB", "<= 255 bytes" or "-". */
static void bounds_text(const struct cfg_option *o, char *buf, size_t cap)
{
    char lo[32], hi[32];
    switch (o->type) {
    case CFG_T_SIZE:
    case CFG_T_DURATION:
    case CFG_T_COUNT:
    case CFG_T_FRACTION:
        fmt_value(o, o->min, lo, sizeof(lo));
        if (o->max == 0) {
            snprintf(buf, cap, "%s>= %s", o->auto_ok ? "auto or " : "", lo);
        } else {
            fmt_value(o, o->max, hi, sizeof(hi));
            snprintf(buf, cap, "%s..%s", lo, hi);
        }
        break;
    case CFG_T_STRING:
        if (o->max)
            snprintf(buf, cap, "<= %llu bytes", (unsigned long long)o->max);
        else
            snprintf(buf, cap, "-");
        break;
    case CFG_T_INSPECTOR:
        snprintf(buf, cap, "port 1..65535");
        break;
    case CFG_T_LISTEN:
        snprintf(buf, cap, "\"\" or ip:port");
        break;
    case CFG_T_ENUM:
        join_choices(o, "|", "|", buf, cap);
        break;
    case CFG_T_MAP:
        snprintf(buf, cap, "<= %llu entries", (unsigned long long)o->max);
        break;
    case CFG_T_STRLIST:
        snprintf(buf, cap, "<= %d of <= %llu bytes", CFG_STRLIST_MAX, (unsigned long long)o->max);
        break;
    default:
        snprintf(buf, cap, "-");
    }
}

/* Row o's own check of s, if it has one (see cfg_check_fn). */
static const char *row_check(const struct cfg_option *o, const char *s, size_t len, int is_key,
                             const char *shown, char *buf, size_t cap)
{
    return o->check != NULL ? o->check(s, len, is_key, shown, buf, cap) : NULL;
}

/* A row's default as YAML text: the empty string shows as "". */
static const char *def_text(const struct cfg_option *o)
{
    return o->def != NULL && o->def[0] == '\0' ? "\"\"" : o->def;
}

static void *field_of(const struct cfg_option *o, const void *base)
{
    return (char *)base + o->offset;
}

/* The value of a numeric row in its table unit, for relations and diffs. */
static uint64_t row_number(const struct cfg_option *o, const void *base)
{
    const void *f = field_of(o, base);
    switch (o->type) {
    case CFG_T_SIZE:
    case CFG_T_DURATION:
        return *(const uint64_t *)f;
    case CFG_T_COUNT:
        return *(const uint32_t *)f;
    case CFG_T_FRACTION:
        return (uint64_t)(*(const double *)f * 1e6 + 0.5);
    case CFG_T_ENUM:
    case CFG_T_BOOL:
        return (uint64_t)(*(const int *)f);
    default:
        return 0;
    }
}

static int row_is_string(const struct cfg_option *o)
{
    return o->type == CFG_T_STRING || o->type == CFG_T_INSPECTOR || o->type == CFG_T_LISTEN;
}

int cfg_map_equal(const struct cfg_map *a, const struct cfg_map *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++) {
        if (strcmp(a->items[i].key, b->items[i].key) != 0 ||
            strcmp(a->items[i].value, b->items[i].value) != 0)
            return 0;
    }
    return 1;
}

int cfg_strlist_equal(const struct cfg_strlist *a, const struct cfg_strlist *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++) {
        if (strcmp(a->v[i], b->v[i]) != 0)
            return 0;
    }
    return 1;
}

static int row_equal(const struct cfg_option *o, const void *a, const void *b)
{
    if (o->type == CFG_T_MAP)
        return cfg_map_equal(field_of(o, a), field_of(o, b));
    if (o->type == CFG_T_STRLIST)
        return cfg_strlist_equal(field_of(o, a), field_of(o, b));
    if (row_is_string(o)) {
        const char *sa = *(char *const *)field_of(o, a), *sb = *(char *const *)field_of(o, b);
        if (sa == NULL || sb == NULL)
            return sa == sb;
        return strcmp(sa, sb) == 0;
    }
    if (o->type == CFG_T_FRACTION)
        return *(const double *)field_of(o, a) == *(const double *)field_of(o, b);
    return row_number(o, a) == row_number(o, b);
}

/* A list as a flow list, "[a, b]", each entry echoed; "...]" ends one cut
 * short to fit cap. */
static void strlist_text(const struct cfg_strlist *l, char *buf, size_t cap)
{
    char one[320];
    size_t len = 0;
    for (size_t i = 0; i <= l->n && len < cap; i++) {
        const char *sep = i == 0 ? "[" : i == l->n ? "" : ", ";
        const char *part = i == l->n ? "]" : echo(one, sizeof(one), l->v[i], strlen(l->v[i]));
        int n = snprintf(buf + len, cap - len, "%s%s", sep, part);
        len += n > 0 ? (size_t)n : 0;
    }
    if (len >= cap && cap >= 5)
        memcpy(buf + cap - 5, "...]", 5);
}

static void row_text(const struct cfg_option *o, const void *base, char *buf, size_t cap)
{
    if (row_is_string(o)) {
        const char *s = *(char *const *)field_of(o, base);
        if (s == NULL)
            snprintf(buf, cap, "(unset)");
        else if (s[0] == '\0')
            snprintf(buf, cap, "\"\"");
        else
            echo(buf, cap, s, strlen(s));
    } else if (o->type == CFG_T_ENUM) {
        snprintf(buf, cap, "%s", o->choices[row_number(o, base)]);
    } else if (o->type == CFG_T_BOOL) {
        snprintf(buf, cap, "%s", row_number(o, base) ? "true" : "false");
    } else if (o->type == CFG_T_MAP) {
        snprintf(buf, cap, "{...}"); /* a value may be a secret (a header's token) */
    } else if (o->type == CFG_T_STRLIST) {
        strlist_text(field_of(o, base), buf, cap);
    } else {
        fmt_value(o, row_number(o, base), buf, cap);
    }
}

static const struct cfg_option *find_row(const char *name, enum cfg_scope scope, size_t *index)
{
    for (size_t i = 0; i < cfg_noptions; i++) {
        if (cfg_options[i].scope == scope && strcmp(cfg_options[i].name, name) == 0) {
            if (index)
                *index = i;
            return &cfg_options[i];
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Setting a value                                                          */

struct pos {
    size_t line, col; /* 1-based; 0:0 for the embedded defaults */
};

/*
 * Parse text (len bytes, NUL-terminated at len) as row o into base.
 * Returns 0; -EINVAL after reporting the problem at p as `fullname ...`;
 * -ENOMEM.
 */
static int set_value(const struct cfg_option *o, void *base, const char *text, size_t len,
                     const char *fullname, struct errs *e, struct pos p)
{
    void *field = field_of(o, base);
    char shown[320], lo[32], hi[32];
    uint64_t v = 0;
    int rc;
    echo(shown, sizeof(shown), text, len);
#define BAD(...)                                                                                   \
    do {                                                                                           \
        err_at(e, p.line, p.col, __VA_ARGS__);                                                     \
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
        const char *problem = row_check(o, text, len, 0, shown, buf, sizeof(buf));
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
            join_choices(o, ", ", " or ", names, sizeof(names)), shown);
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
            BAD("%s '%s' is not a duration (a number and a unit: ns, us, ms, s, m or h)",
                fullname, shown);
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
    if (v < o->min || v > row_max(o)) {
        fmt_value(o, o->min, lo, sizeof(lo));
        if (o->max == 0 && o->type != CFG_T_COUNT)
            BAD("%s must be >= %s, not '%s'", fullname, lo, shown);
        fmt_value(o, row_max(o), hi, sizeof(hi));
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

/* ------------------------------------------------------------------------ */
/* struct cfg lifetime                                                      */

static void map_free(struct cfg_map *m)
{
    for (size_t i = 0; i < m->n; i++) {
        isoprof_free(m->items[i].key);
        isoprof_free(m->items[i].value);
    }
    isoprof_free(m->items);
    m->items = NULL;
    m->n = 0;
}

static void strlist_free(struct cfg_strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        isoprof_free(l->v[i]);
    isoprof_free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* Free what the rows of scope own in base: strings, maps and lists. */
static void free_rows(void *base, enum cfg_scope scope)
{
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope == scope && row_is_string(o)) {
            char **f = field_of(o, base);
            isoprof_free(*f);
            *f = NULL;
        } else if (o->scope == scope && o->type == CFG_T_MAP) {
            map_free(field_of(o, base));
        } else if (o->scope == scope && o->type == CFG_T_STRLIST) {
            strlist_free(field_of(o, base));
        }
    }
}

void cfg_free(struct cfg *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->ntargets; i++) {
        free_rows(&c->targets[i], CFG_SCOPE_TARGET);
        isoprof_free(c->targets[i].host); /* derived from inspector, not a row */
    }
    isoprof_free(c->targets);
    free_rows(c, CFG_SCOPE_GLOBAL);
    isoprof_free(c->source);
    isoprof_free(c);
}

static int strlist_default(const struct cfg_option *o, void *base);

/* Apply every default of scope to base. -EINVAL means the table itself is
 * broken (a default outside its own bounds); the unit tests rule that out.
 * A map's only default is {}, which the zeroed base already holds. */
static int apply_defaults(void *base, enum cfg_scope scope)
{
    struct errs e = {.name = "<defaults>"};
    int rc = 0;
    for (size_t i = 0; i < cfg_noptions && rc == 0; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope != scope || o->def == NULL || o->type == CFG_T_MAP)
            continue;
        if (o->type == CFG_T_STRLIST)
            rc = strlist_default(o, base);
        else
            rc = set_value(o, base, o->def, strlen(o->def), o->name, &e, (struct pos){0, 0});
    }
    errs_release(&e);
    return rc;
}

/* The width of a numeric row's field. */
static size_t row_size(const struct cfg_option *o)
{
    switch (o->type) {
    case CFG_T_SIZE:
    case CFG_T_DURATION:
        return sizeof(uint64_t);
    case CFG_T_COUNT:
        return sizeof(uint32_t);
    case CFG_T_FRACTION:
        return sizeof(double);
    case CFG_T_ENUM:
    case CFG_T_BOOL:
        return sizeof(int);
    default:
        return 0;
    }
}

/*
 * Give each row of scope that takes its default from another row
 * (cfg_option.def_row) and was left unset (0: such a row's min is above 0,
 * so no valid value is 0) that row's value. Runs once the file's values are
 * in, so that `memory_limit: 256MiB` also moves threads.memory_limit.
 */
static void resolve_def_rows(void *base, enum cfg_scope scope)
{
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope != scope || o->def_row == NULL)
            continue;
        const struct cfg_option *from = find_row(o->def_row, scope, NULL);
        ISOPROF_ASSERT(from != NULL && from->type == o->type && row_size(o) != 0 && o->min > 0);
        if (row_number(o, base) == 0)
            memcpy(field_of(o, base), field_of(from, base), row_size(o));
    }
}

/* Append a target holding the per-target defaults. *cap tracks the array's
 * capacity (struct cfg only keeps the count). */
static int add_target(struct cfg *c, size_t *cap, struct cfg_target **out)
{
    if (c->ntargets == *cap) {
        size_t ncap = *cap ? *cap * 2 : 4;
        struct cfg_target *nt = isoprof_realloc(c->targets, ncap * sizeof(*nt));
        if (nt == NULL)
            return -ENOMEM;
        c->targets = nt;
        *cap = ncap;
    }
    struct cfg_target *t = &c->targets[c->ntargets++];
    memset(t, 0, sizeof(*t));
    *out = t;
    return apply_defaults(t, CFG_SCOPE_TARGET);
}

static int add_default_target(struct cfg *c, size_t *cap)
{
    struct cfg_target *t;
    int rc = add_target(c, cap, &t);
    if (rc != 0)
        return rc;
    struct errs e = {.name = "<defaults>"};
    const struct cfg_option *o = find_row("inspector", CFG_SCOPE_TARGET, NULL);
    rc = set_value(o, t, CFG_DEFAULT_INSPECTOR, strlen(CFG_DEFAULT_INSPECTOR), o->name, &e,
                   (struct pos){0, 0});
    errs_release(&e);
    resolve_def_rows(t, CFG_SCOPE_TARGET);
    return rc;
}

static int cfg_new(const char *source, struct cfg **out)
{
    struct cfg *c = isoprof_calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->source = isoprof_strdup(source);
    int rc = c->source != NULL ? apply_defaults(c, CFG_SCOPE_GLOBAL) : -ENOMEM;
    if (rc != 0) {
        cfg_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int cfg_defaults(struct cfg **out)
{
    struct cfg *c;
    size_t cap = 0;
    int rc = cfg_new("<defaults>", &c);
    if (rc != 0)
        return rc;
    rc = add_default_target(c, &cap);
    if (rc != 0) {
        cfg_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The document walk                                                        */

struct slot {
    const yaml_node_t *node; /* where a GLOBAL option was set, NULL: default */
    int bad;                 /* its value was refused */
};

struct walk {
    yaml_document_t *doc;
    struct cfg *c;
    struct errs *e;
    struct slot *slots; /* one per row of cfg_options */
    size_t targets_cap;
    int targets_seen;
};

static const char *sv(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

static struct pos node_pos(const yaml_node_t *n)
{
    return (struct pos){n->start_mark.line + 1, n->start_mark.column + 1};
}

static const char *node_kind(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_MAPPING_NODE:
        return "a mapping";
    case YAML_SEQUENCE_NODE:
        return "a list";
    default:
        return "a scalar";
    }
}

/* An empty value, `~` or `null`, written plain: YAML's null. */
static int is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    const char *s = sv(n);
    size_t len = n->data.scalar.length;
    return len == 0 || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
           strcmp(s, "NULL") == 0;
}

/*
 * One entry of list row o (of the row's fullname), node item at index i:
 * a scalar that is not empty or null, holds no NUL and no control
 * character, has at most o->max bytes and passes the row's check. If it is
 * fine, append a copy to l, which has room. Returns 0, -EINVAL (reported
 * at the entry) or -ENOMEM.
 */
static int strlist_entry(struct errs *e, const struct cfg_option *o, const yaml_node_t *item,
                         const char *fullname, size_t i, struct cfg_strlist *l)
{
    char name[192], shown[320], buf[512];
    snprintf(name, sizeof(name), "%s[%zu]", fullname, i);
    if (item->type != YAML_SCALAR_NODE) {
        ERR_NODE(e, item, "%s must be a string, not %s", name, node_kind(item));
        return -EINVAL;
    }
    const char *s = sv(item);
    size_t len = item->data.scalar.length;
    echo(shown, sizeof(shown), s, len);
    if (len == 0 || is_null(item)) {
        ERR_NODE(e, item, "%s must not be empty", name);
        return -EINVAL;
    }
    if (strlen(s) != len) {
        ERR_NODE(e, item, "%s must not contain a NUL byte", name);
        return -EINVAL;
    }
    if (len > o->max) {
        ERR_NODE(e, item, "%s is longer than %llu bytes", name, (unsigned long long)o->max);
        return -EINVAL;
    }
    const char *problem = row_check(o, s, len, 0, shown, buf, sizeof(buf));
    if (problem != NULL) {
        ERR_NODE(e, item, "%s %s", name, problem);
        return -EINVAL;
    }
    for (size_t j = 0; j < len; j++) {
        unsigned char ch = (unsigned char)s[j];
        if (ch < 0x20 || ch == 0x7f) {
            ERR_NODE(e, item, "%s must not contain control characters ('%s')", name, shown);
            return -EINVAL;
        }
    }
    char *d = isoprof_strndup(s, len);
    if (d == NULL)
        return -ENOMEM;
    l->v[l->n++] = d;
    return 0;
}

/*
 * Set list row o in base from sequence node v of doc: at most
 * CFG_STRLIST_MAX entries (the first one past it is reported), each as
 * strlist_entry checks it. Every problem is reported; the field changes
 * only when there is none. Returns 0, -EINVAL (reported) or -ENOMEM.
 */
static int set_strlist(yaml_document_t *doc, struct errs *e, const struct cfg_option *o, void *base,
                       const yaml_node_t *v, const char *fullname)
{
    const yaml_node_item_t *start = v->data.sequence.items.start, *top = v->data.sequence.items.top;
    size_t nitems = (size_t)(top - start);
    struct cfg_strlist l = {NULL, 0};
    if (nitems > 0) {
        l.v = isoprof_calloc(nitems < CFG_STRLIST_MAX ? nitems : CFG_STRLIST_MAX, sizeof(*l.v));
        if (l.v == NULL)
            return -ENOMEM;
    }
    int rc = 0, bad = 0;
    for (const yaml_node_item_t *it = start; it < top && rc == 0 && !e->full; it++) {
        size_t i = (size_t)(it - start);
        const yaml_node_t *item = yaml_document_get_node(doc, *it);
        if (item == NULL)
            continue;
        if (i == CFG_STRLIST_MAX) {
            ERR_NODE(e, item, "%s has more than %d entries", fullname, CFG_STRLIST_MAX);
            bad = 1;
            break;
        }
        rc = strlist_entry(e, o, item, fullname, i, &l);
        if (rc == -EINVAL) {
            rc = 0;
            bad = 1;
        }
    }
    if (rc == 0 && !bad && !e->full) {
        strlist_free(field_of(o, base));
        *(struct cfg_strlist *)field_of(o, base) = l;
        return 0;
    }
    strlist_free(&l);
    return rc != 0 ? rc : -EINVAL;
}

/*
 * Set list row o in base from its default, a flow list such as "[node]",
 * read by libyaml and checked as a file's list is. -EINVAL means the table
 * is broken (the unit tests rule that out); -ENOMEM.
 */
static int strlist_default(const struct cfg_option *o, void *base)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return -ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)o->def, strlen(o->def));
    int rc = -EINVAL;
    if (yaml_parser_load(&parser, &doc)) {
        const yaml_node_t *root = yaml_document_get_root_node(&doc);
        struct errs e = {.name = "<defaults>"};
        if (root != NULL && root->type == YAML_SEQUENCE_NODE)
            rc = set_strlist(&doc, &e, o, base, root, o->name);
        if (rc == 0 && e.oom) /* not expected: a default has no problem to report */
            rc = -ENOMEM;
        errs_release(&e);
        yaml_document_delete(&doc);
    } else if (parser.error == YAML_MEMORY_ERROR) {
        rc = -ENOMEM;
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* Is path a section, i.e. a proper prefix of some row's name in scope? */
static int is_section(const char *path, enum cfg_scope scope)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < cfg_noptions; i++) {
        if (cfg_options[i].scope == scope && strncmp(cfg_options[i].name, path, n) == 0 &&
            cfg_options[i].name[n] == '.')
            return 1;
    }
    return 0;
}

/* Edit distance, for "did you mean"; both strings are at most CFG_MAX_KEY. */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
    size_t row[CFG_MAX_KEY + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/*
 * Find what an unknown key under prefix (a section of scope, "" for the
 * root or the target entry itself) probably meant: a sibling within two
 * edits, else an option elsewhere in scope with that exact last component,
 * named from the root or the target entry ("sampling.cpu.period",
 * "threads.max"). Writes " (did you mean 'x'?)" into buf, or "".
 */
static void suggest(const char *prefix, const char *key, enum cfg_scope scope, char *buf,
                    size_t cap)
{
    size_t kl = strlen(key), pl = strlen(prefix), best = 3;
    const char *best_name = NULL;
    size_t best_len = 0;
    buf[0] = '\0';
    if (kl > CFG_MAX_KEY)
        return;
    for (size_t i = 0; i <= cfg_noptions; i++) {
        const char *cand;
        size_t cl;
        if (i == cfg_noptions) {
            if (scope != CFG_SCOPE_GLOBAL || pl != 0)
                break;
            cand = "targets";
            cl = strlen(cand);
        } else {
            const struct cfg_option *o = &cfg_options[i];
            if (o->scope != scope)
                continue;
            cand = o->name;
            if (pl != 0) {
                if (strncmp(cand, prefix, pl) != 0 || cand[pl] != '.')
                    continue;
                cand += pl + 1;
            }
            const char *dot = strchr(cand, '.');
            cl = dot ? (size_t)(dot - cand) : strlen(cand);
        }
        if (cl > CFG_MAX_KEY)
            continue;
        size_t d = edit_distance(key, kl, cand, cl);
        if (d < best && d < kl) {
            best = d;
            best_name = cand;
            best_len = cl;
        }
    }
    if (best_name != NULL) {
        snprintf(buf, cap, " (did you mean '%.*s'?)", (int)best_len, best_name);
        return;
    }
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        const char *last = strrchr(o->name, '.');
        if (o->scope == scope && last != NULL && strcmp(last + 1, key) == 0) {
            snprintf(buf, cap, " (did you mean '%s'?)", o->name);
            return;
        }
    }
}

/* Report a key repeated within one mapping; nonzero if pair's key is one. */
static int is_duplicate(struct walk *w, const yaml_node_t *map, const yaml_node_pair_t *pair)
{
    const yaml_node_t *k = yaml_document_get_node(w->doc, pair->key);
    for (const yaml_node_pair_t *p = map->data.mapping.pairs.start; p < pair; p++) {
        const yaml_node_t *pk = yaml_document_get_node(w->doc, p->key);
        if (pk != NULL && pk->type == YAML_SCALAR_NODE &&
            pk->data.scalar.length == k->data.scalar.length &&
            memcmp(pk->data.scalar.value, k->data.scalar.value, k->data.scalar.length) == 0) {
            char shown[320];
            ERR_NODE(w->e, k, "duplicate key '%s' (first at %zu:%zu)",
                     echo(shown, sizeof(shown), sv(k), k->data.scalar.length),
                     (size_t)pk->start_mark.line + 1, (size_t)pk->start_mark.column + 1);
            return 1;
        }
    }
    return 0;
}

/*
 * The key of a pair, or NULL after reporting why it cannot be one: keys
 * must be scalars and unique in their mapping. (Keys that are too long or
 * hold a NUL, see key_usable, are the caller's to report as unknown.)
 */
static const char *pair_key(struct walk *w, const yaml_node_t *map, const yaml_node_pair_t *p,
                            const char *where, const yaml_node_t **kout, const yaml_node_t **vout)
{
    const yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
    const yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
    if (k == NULL || v == NULL)
        return NULL;
    if (k->type != YAML_SCALAR_NODE) {
        ERR_NODE(w->e, k, "%s: a key must be a name, not %s", where, node_kind(k));
        return NULL;
    }
    if (is_duplicate(w, map, p))
        return NULL;
    *kout = k;
    *vout = v;
    return sv(k);
}

static int key_usable(const yaml_node_t *k)
{
    return k->data.scalar.length <= CFG_MAX_KEY && strlen(sv(k)) == k->data.scalar.length;
}

/*
 * One entry of map row o (of the row's fullname): check key node k and
 * value node v, and if both are fine append copies to m, which has room.
 * Values are never quoted in a message (a header's may be a token).
 * Returns 0, -EINVAL (reported) or -ENOMEM.
 */
static int map_entry(struct walk *w, const struct cfg_option *o, const yaml_node_t *k,
                     const yaml_node_t *v, const char *fullname, struct cfg_map *m)
{
    char shown[320], name[448], buf[512];
    const char *problem;
    size_t klen = k->data.scalar.length, vlen = v->data.scalar.length;
    int bad = 0;
    echo(shown, sizeof(shown), sv(k), klen);
    snprintf(name, sizeof(name), "%s.%s", fullname, shown);
    if (strlen(sv(k)) != klen) {
        ERR_NODE(w->e, k, "%s name '%s' must not contain a NUL byte", fullname, shown);
        bad = 1;
    } else if ((problem = row_check(o, sv(k), klen, 1, shown, buf, sizeof(buf))) != NULL) {
        ERR_NODE(w->e, k, "%s %s", fullname, problem);
        bad = 1;
    }
    if (v->type != YAML_SCALAR_NODE) {
        ERR_NODE(w->e, v, "%s must be a string, not %s", name, node_kind(v));
        return -EINVAL;
    }
    if (is_null(v)) {
        ERR_NODE(w->e, v, "%s has no value (write '' for an empty one)", name);
        return -EINVAL;
    }
    if (strlen(sv(v)) != vlen) {
        ERR_NODE(w->e, v, "%s must not contain a NUL byte", name);
        return -EINVAL;
    }
    if ((problem = row_check(o, sv(v), vlen, 0, NULL, buf, sizeof(buf))) != NULL) {
        ERR_NODE(w->e, v, "%s %s", name, problem);
        return -EINVAL;
    }
    if (bad)
        return -EINVAL;
    struct cfg_kv *kv = &m->items[m->n];
    kv->key = isoprof_strndup(sv(k), klen);
    kv->value = isoprof_strndup(sv(v), vlen);
    if (kv->key == NULL || kv->value == NULL) {
        isoprof_free(kv->key);
        isoprof_free(kv->value);
        return -ENOMEM;
    }
    m->n++;
    return 0;
}

/*
 * Set map row o from mapping node v: keys unique, at most o->max entries,
 * each entry as map_entry checks it. Every problem is reported; the field
 * changes only when there is none. Returns 0, -EINVAL (reported) or
 * -ENOMEM.
 */
static int set_map(struct walk *w, const struct cfg_option *o, void *base, const yaml_node_t *v,
                   const char *fullname)
{
    const yaml_node_pair_t *start = v->data.mapping.pairs.start, *top = v->data.mapping.pairs.top;
    size_t npairs = (size_t)(top - start);
    struct cfg_map m = {NULL, 0};
    if (npairs > 0) {
        m.items = isoprof_calloc(npairs < o->max ? npairs : o->max, sizeof(*m.items));
        if (m.items == NULL)
            return -ENOMEM;
    }
    int rc = 0, bad = 0;
    for (const yaml_node_pair_t *p = start; p < top && rc == 0 && !w->e->full; p++) {
        const yaml_node_t *k, *val;
        if ((size_t)(p - start) == o->max) {
            k = yaml_document_get_node(w->doc, p->key);
            ERR_NODE(w->e, k != NULL ? k : v, "%s has more than %llu entries", fullname,
                     (unsigned long long)o->max);
            bad = 1;
            break;
        }
        if (pair_key(w, v, p, fullname, &k, &val) == NULL) {
            bad = 1;
            continue;
        }
        rc = map_entry(w, o, k, val, fullname, &m);
        if (rc == -EINVAL) {
            rc = 0;
            bad = 1;
        }
    }
    if (rc == 0 && !bad && !w->e->full) {
        map_free(field_of(o, base));
        *(struct cfg_map *)field_of(o, base) = m;
        return 0;
    }
    map_free(&m);
    return rc != 0 ? rc : -EINVAL;
}

/*
 * Set row o from value node v: checks the node's shape, treats a null as
 * "leave at the default" for maps, lists and rows that have no default and
 * are optional.
 * Returns 0, -EINVAL (reported) or -ENOMEM.
 */
static int set_from_node(struct walk *w, const struct cfg_option *o, void *base,
                         const yaml_node_t *v, const char *fullname)
{
    char noun[128], shown[320];
    if ((o->type == CFG_T_MAP || o->type == CFG_T_STRLIST) && is_null(v))
        return 0; /* `headers:` or `users:` with nothing: as if left out */
    if (o->type == CFG_T_STRLIST && v->type == YAML_SEQUENCE_NODE)
        return set_strlist(w->doc, w->e, o, base, v, fullname);
    if (o->type == CFG_T_STRLIST) {
        if (v->type == YAML_SCALAR_NODE)
            ERR_NODE(w->e, v, "%s: expected a list, not a scalar (write [%s])", fullname,
                     echo(shown, sizeof(shown), sv(v), v->data.scalar.length));
        else
            ERR_NODE(w->e, v, "%s: expected a list, not %s", fullname, node_kind(v));
        return -EINVAL;
    }
    if (o->type == CFG_T_MAP && v->type == YAML_MAPPING_NODE)
        return set_map(w, o, base, v, fullname);
    if (v->type != YAML_SCALAR_NODE || o->type == CFG_T_MAP) {
        ERR_NODE(w->e, v, "%s must be %s, not %s", fullname, type_noun(o, noun, sizeof(noun)),
                 node_kind(v));
        return -EINVAL;
    }
    if (is_null(v)) {
        if (o->def == NULL && !o->required)
            return 0;
        if (o->def == NULL)
            ERR_NODE(w->e, v, "%s has no value", fullname);
        else
            ERR_NODE(w->e, v, "%s has no value (the default is %s; leave the key out for it)",
                     fullname, def_text(o));
        return -EINVAL;
    }
    return set_value(o, base, sv(v), v->data.scalar.length, fullname, w->e, node_pos(v));
}

/*
 * Walk mapping node map of one target entry whose keys are under prefix (""
 * for the entry itself, "threads" inside its `threads:`); where names the
 * entry ("targets[2]"). Every problem is reported with the key's full name
 * ("targets[2].threads.max"); the recursion is bounded by the depth of the
 * TARGET rows' names. Returns 0 (problems in w->e) or -ENOMEM.
 */
static int walk_target_map(struct walk *w, const yaml_node_t *map, struct cfg_target *t,
                           const char *where, const char *prefix)
{
    char here[128];
    snprintf(here, sizeof(here), "%s%s%s", where, *prefix ? "." : "", prefix);
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        if (w->e->full)
            return 0;
        const yaml_node_t *k, *v;
        const char *key = pair_key(w, map, p, here, &k, &v);
        if (key == NULL)
            continue;
        char path[64 + CFG_MAX_KEY], full[128 + 64 + CFG_MAX_KEY], shown[320], hint[96];
        if (!key_usable(k)) {
            ERR_NODE(w->e, k, "unknown key '%s.%s'", here,
                     echo(shown, sizeof(shown), key, k->data.scalar.length));
            continue;
        }
        snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", key);
        snprintf(full, sizeof(full), "%s.%s", here, key);
        if (strchr(key, '.') != NULL) {
            /* As for the global options: one way to write each option. */
            ERR_NODE(w->e, k, "'%s': write nested keys, one name per level, not a dotted name",
                     echo(shown, sizeof(shown), full, strlen(full)));
            continue;
        }
        const struct cfg_option *o = find_row(path, CFG_SCOPE_TARGET, NULL);
        if (o != NULL) {
            int rc = set_from_node(w, o, t, v, full);
            if (rc == -ENOMEM)
                return rc;
            continue;
        }
        if (is_section(path, CFG_SCOPE_TARGET)) {
            if (is_null(v))
                continue; /* `threads:` with nothing: all defaults */
            if (v->type != YAML_MAPPING_NODE) {
                ERR_NODE(w->e, v, "%s must be a mapping of options, not %s", full, node_kind(v));
                continue;
            }
            int rc = walk_target_map(w, v, t, where, path);
            if (rc != 0)
                return rc;
            continue;
        }
        suggest(prefix, key, CFG_SCOPE_TARGET, hint, sizeof(hint));
        ERR_NODE(w->e, k, "unknown key '%s'%s", echo(shown, sizeof(shown), full, strlen(full)),
                 hint);
    }
    return 0;
}

static int walk_target(struct walk *w, const yaml_node_t *item, size_t index)
{
    char where[48];
    snprintf(where, sizeof(where), "targets[%zu]", index);
    if (item->type != YAML_MAPPING_NODE) {
        ERR_NODE(w->e, item, "%s must be a mapping with at least 'inspector', not %s", where,
                 node_kind(item));
        return 0;
    }
    struct cfg_target *t;
    int rc = add_target(w->c, &w->targets_cap, &t);
    if (rc == 0)
        rc = walk_target_map(w, item, t, where, "");
    if (rc != 0)
        return rc;
    resolve_def_rows(t, CFG_SCOPE_TARGET);
    /* Required keys: checked by name, so that a present but invalid value
     * is reported once, as invalid, not also as missing. Only keys of the
     * entry itself can be required (a section's are optional with it). */
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope != CFG_SCOPE_TARGET || !o->required)
            continue;
        ISOPROF_ASSERT(strchr(o->name, '.') == NULL);
        int present = 0;
        for (yaml_node_pair_t *p = item->data.mapping.pairs.start;
             p < item->data.mapping.pairs.top && !present; p++) {
            const yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
            present = k != NULL && k->type == YAML_SCALAR_NODE && strcmp(sv(k), o->name) == 0;
        }
        if (!present)
            ERR_NODE(w->e, item, "%s has no '%s' (%s)", where, o->name, o->help);
    }
    return 0;
}

static int walk_targets(struct walk *w, const yaml_node_t *v)
{
    w->targets_seen = 1;
    if (is_null(v))
        return 0; /* `targets:` with nothing: no targets, like [] */
    if (v->type != YAML_SEQUENCE_NODE) {
        ERR_NODE(w->e, v, "targets must be a list of mappings, not %s", node_kind(v));
        return 0;
    }
    size_t i = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++, i++) {
        if (w->e->full)
            return 0;
        if (i == CFG_MAX_TARGETS) {
            ERR_NODE(w->e, v, "targets has more than %d entries", CFG_MAX_TARGETS);
            return 0;
        }
        yaml_node_t *item = yaml_document_get_node(w->doc, *it);
        if (item == NULL)
            continue;
        int rc = walk_target(w, item, i);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Walk a mapping whose keys are under prefix ("" for the root). The
 * recursion is bounded by the depth of the option names. */
static int walk_map(struct walk *w, const yaml_node_t *map, const char *prefix)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        if (w->e->full)
            return 0;
        const yaml_node_t *k, *v;
        const char *key = pair_key(w, map, p, *prefix ? prefix : "the top level", &k, &v);
        if (key == NULL)
            continue;
        char path[128 + CFG_MAX_KEY], shown[320], hint[96];
        if (!key_usable(k)) {
            ERR_NODE(w->e, k, "unknown key '%s%s%s'", prefix, *prefix ? "." : "",
                     echo(shown, sizeof(shown), key, k->data.scalar.length));
            continue;
        }
        snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", key);
        if (strchr(key, '.') != NULL) {
            /* A flat form would let one option be set twice without a
             * duplicate key; there is one way to write each option. */
            ERR_NODE(w->e, k, "'%s': write nested keys, one name per level, not a dotted name",
                     echo(shown, sizeof(shown), path, strlen(path)));
            continue;
        }
        if (*prefix == '\0' && strcmp(key, "targets") == 0) {
            int rc = walk_targets(w, v);
            if (rc != 0)
                return rc;
            continue;
        }
        size_t idx;
        const struct cfg_option *o = find_row(path, CFG_SCOPE_GLOBAL, &idx);
        if (o != NULL) {
            int rc = set_from_node(w, o, w->c, v, path);
            if (rc == -ENOMEM)
                return rc;
            w->slots[idx].node = v;
            w->slots[idx].bad = rc != 0;
            continue;
        }
        if (is_section(path, CFG_SCOPE_GLOBAL)) {
            if (is_null(v))
                continue; /* `log:` with nothing: all defaults */
            if (v->type != YAML_MAPPING_NODE) {
                ERR_NODE(w->e, v, "%s must be a mapping of options, not %s", path, node_kind(v));
                continue;
            }
            int rc = walk_map(w, v, path);
            if (rc != 0)
                return rc;
            continue;
        }
        suggest(prefix, key, CFG_SCOPE_GLOBAL, hint, sizeof(hint));
        ERR_NODE(w->e, k, "unknown key '%s'%s", echo(shown, sizeof(shown), path, strlen(path)),
                 hint);
    }
    return 0;
}

/* Is row o set in base: a string that is not empty, a map or a list with
 * entries, a number that is not 0? */
static int row_is_set(const struct cfg_option *o, const void *base)
{
    if (o->type == CFG_T_MAP)
        return ((const struct cfg_map *)field_of(o, base))->n > 0;
    if (o->type == CFG_T_STRLIST)
        return ((const struct cfg_strlist *)field_of(o, base))->n > 0;
    if (row_is_string(o)) {
        const char *s = *(char *const *)field_of(o, base);
        return s != NULL && s[0] != '\0';
    }
    return row_number(o, base) != 0;
}

/* One side of a relation: the GLOBAL row called name, or every row of the
 * section name. */
struct rel_side {
    const struct cfg_option *row; /* the row (a section: its first), NULL if none */
    const yaml_node_t *node;      /* where the file gives it (a section: a row that is
                                     set, else any), NULL if nowhere */
    int set, bad;                 /* set (see row_is_set); a value was refused */
};

static struct rel_side rel_side(const struct walk *w, const char *name)
{
    struct rel_side r = {NULL, NULL, 0, 0};
    const yaml_node_t *any = NULL;
    size_t n = strlen(name);
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope != CFG_SCOPE_GLOBAL || strncmp(o->name, name, n) != 0 ||
            (o->name[n] != '\0' && o->name[n] != '.'))
            continue;
        if (r.row == NULL)
            r.row = o;
        r.bad |= w->slots[i].bad;
        if (any == NULL)
            any = w->slots[i].node;
        if (row_is_set(o, w->c)) {
            r.set = 1;
            if (r.node == NULL)
                r.node = w->slots[i].node;
        }
    }
    if (r.node == NULL)
        r.node = any;
    return r;
}

/* Report a rule's problem at n, or at 1:1 if the values are the defaults. */
#define ERR_RULE(e, n, ...)                                                                        \
    do {                                                                                           \
        if ((n) != NULL)                                                                           \
            ERR_NODE((e), (n), __VA_ARGS__);                                                       \
        else                                                                                       \
            err_at((e), 1, 1, __VA_ARGS__);                                                        \
    } while (0)

/* Run rel's entry_rule on each value of its map, which the file set at node
 * (valid: every key and value is a scalar). */
static void check_entries(struct walk *w, const struct cfg_relation *rel, const yaml_node_t *node)
{
    if (node == NULL || node->type != YAML_MAPPING_NODE)
        return;
    for (const yaml_node_pair_t *p = node->data.mapping.pairs.start;
         p < node->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
        const char *problem = k != NULL && v != NULL ? rel->entry_rule(w->c, sv(v)) : NULL;
        if (problem != NULL) {
            char shown[320];
            ERR_NODE(w->e, v, "%s.%s %s", rel->name,
                     echo(shown, sizeof(shown), sv(k), k->data.scalar.length), problem);
        }
    }
}

/* The rules of cfg_relations, between values that were valid. */
static void check_relations(struct walk *w)
{
    for (size_t r = 0; r < cfg_nrelations; r++) {
        const struct cfg_relation *rel = &cfg_relations[r];
        struct rel_side a = rel_side(w, rel->name), b = rel_side(w, rel->other);
        if (a.row == NULL || b.row == NULL || a.bad || b.bad)
            continue;
        switch (rel->kind) {
        case CFG_REL_AT_LEAST: {
            uint64_t va = row_number(a.row, w->c), vb = row_number(b.row, w->c);
            if (va >= vb)
                break;
            char ta[32], tb[32];
            fmt_value(a.row, va, ta, sizeof(ta));
            fmt_value(b.row, vb, tb, sizeof(tb));
            if (a.node == NULL && b.node != NULL)
                ERR_NODE(w->e, b.node, "%s must be <= %s (%s)", rel->other, rel->name, ta);
            else
                ERR_RULE(w->e, a.node, "%s must be >= %s (%s)", rel->name, rel->other, tb);
            break;
        }
        case CFG_REL_NEEDS:
            if (a.set && !b.set)
                ERR_RULE(w->e, a.node, "%s needs %s", rel->name, rel->other);
            break;
        case CFG_REL_EXCLUDES:
            if (a.set && b.set)
                ERR_RULE(w->e, a.node, "%s and %s cannot both be set; use one", rel->name,
                         rel->other);
            break;
        case CFG_REL_ENTRIES:
            check_entries(w, rel, a.node);
            break;
        case CFG_REL_NONEMPTY:
            if (b.set && !a.set)
                ERR_RULE(w->e, a.node != NULL ? a.node : b.node,
                         "%s is empty (%s needs at least one entry)", rel->name, rel->other);
            break;
        }
    }
}

/* Report libyaml's error. Reader errors (bad UTF-8, control bytes) carry a
 * byte offset rather than a mark; turn it into line:col. */
static void report_yaml_error(const yaml_parser_t *parser, struct errs *e, const char *text,
                              size_t len)
{
    const char *problem = parser->problem ? parser->problem : "malformed YAML";
    if (parser->error == YAML_READER_ERROR) {
        size_t line = 1, col = 1, end = parser->problem_offset < len ? parser->problem_offset : len;
        for (size_t i = 0; i < end; i++) {
            if (text[i] == '\n') {
                line++;
                col = 1;
            } else if (((unsigned char)text[i] & 0xc0) != 0x80) {
                col++;
            }
        }
        if (parser->problem_value >= 0)
            err_at(e, line, col, "YAML: %s (byte 0x%02x)", problem,
                   (unsigned)(parser->problem_value & 0xff));
        else
            err_at(e, line, col, "YAML: %s", problem);
        return;
    }
    /* The commonest cause by far is a tab in the indentation. */
    size_t at = parser->problem_mark.index;
    const char *tab = at < len && text[at] == '\t' ? "; YAML indents with spaces, not tabs" : "";
    if (parser->context != NULL)
        err_at(e, parser->problem_mark.line + 1, parser->problem_mark.column + 1,
               "YAML syntax error: %s (%s that starts at line %zu)%s", problem, parser->context,
               (size_t)parser->context_mark.line + 1, tab);
    else
        err_at(e, parser->problem_mark.line + 1, parser->problem_mark.column + 1,
               "YAML syntax error: %s%s", problem, tab);
}

/*
 * libyaml's scanner does work proportional to the flow nesting depth for
 * every token, so "[[[[..." takes quadratic time (a 1 MiB file: hours).
 * Walk the events once and refuse deep nesting before building the
 * document; the events stop at the first opening past the limit, a little
 * over a thousand bytes of lookahead later. A config is three levels deep.
 * Likewise libyaml's loader compares every new anchor with all earlier
 * ones, so the number of anchors is capped too.
 * Returns 0 (fine, or a syntax error the document load will report), 1 (too
 * deep, reported in e) or -ENOMEM.
 */
static const yaml_char_t *event_anchor(const yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        return ev->data.scalar.anchor;
    case YAML_SEQUENCE_START_EVENT:
        return ev->data.sequence_start.anchor;
    case YAML_MAPPING_START_EVENT:
        return ev->data.mapping_start.anchor;
    default:
        return NULL;
    }
}

static int check_depth(const char *text, size_t len, struct errs *e)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    if (!yaml_parser_initialize(&parser))
        return -ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int depth = 0, anchors = 0, rc = 0;
    for (;;) {
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = parser.error == YAML_MEMORY_ERROR ? -ENOMEM : 0;
            break;
        }
        yaml_event_type_t type = ev.type;
        if (event_anchor(&ev) != NULL && ++anchors > CFG_MAX_ANCHORS) {
            err_at(e, ev.start_mark.line + 1, ev.start_mark.column + 1,
                   "more than %d YAML anchors", CFG_MAX_ANCHORS);
            rc = 1;
        } else if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
            if (++depth > CFG_MAX_DEPTH) {
                err_at(e, ev.start_mark.line + 1, ev.start_mark.column + 1,
                       "nested more than %d levels deep", CFG_MAX_DEPTH);
                rc = 1;
            }
        } else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
            depth--;
        }
        yaml_event_delete(&ev);
        if (rc != 0 || type == YAML_STREAM_END_EVENT)
            break;
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* Load and walk the document(s); returns 0 (problems in e) or -ENOMEM. */
static int load_document(struct cfg *c, struct errs *e, struct slot *slots, const char *text,
                         size_t len)
{
    int rc = check_depth(text, len, e);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return -ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        if (parser.error == YAML_MEMORY_ERROR)
            rc = -ENOMEM;
        else
            report_yaml_error(&parser, e, text, len);
        yaml_parser_delete(&parser);
        return rc;
    }
    struct walk w = {.doc = &doc, .c = c, .e = e, .slots = slots};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root == NULL || is_null(root)) {
        /* an empty file, or only comments: all defaults */
    } else if (root->type != YAML_MAPPING_NODE) {
        ERR_NODE(e, root, "the configuration must be a mapping of sections, not %s",
                 node_kind(root));
    } else {
        rc = walk_map(&w, root, "");
    }
    if (rc == 0)
        check_relations(&w);
    if (rc == 0 && !w.targets_seen)
        rc = add_default_target(c, &w.targets_cap);
    yaml_document_delete(&doc);

    /* A second document would be silently ignored by a document loader;
     * say so instead. */
    if (rc == 0 && !e->full) {
        yaml_document_t more;
        if (!yaml_parser_load(&parser, &more)) {
            if (parser.error == YAML_MEMORY_ERROR)
                rc = -ENOMEM;
            else
                report_yaml_error(&parser, e, text, len);
        } else {
            yaml_node_t *r2 = yaml_document_get_root_node(&more);
            if (r2 != NULL)
                ERR_NODE(e, r2, "a config file holds one YAML document; this is a second one");
            yaml_document_delete(&more);
        }
    }
    yaml_parser_delete(&parser);
    return rc;
}

int cfg_load_buffer(const char *name, const char *text, size_t len, struct cfg **out, char **why)
{
    if (why)
        *why = NULL;
    if (name == NULL)
        name = "<buffer>";
    if (len > CFG_MAX_FILE) {
        if (why)
            *why = isoprof_asprintf("%s: larger than %u bytes", name, CFG_MAX_FILE);
        return -EFBIG;
    }
    if (text == NULL) {
        if (len != 0)
            return -EINVAL;
        text = "";
    }
    struct cfg *c;
    int rc = cfg_new(name, &c);
    if (rc != 0)
        return rc;
    struct slot *slots = isoprof_calloc(cfg_noptions, sizeof(*slots));
    if (slots == NULL) {
        cfg_free(c);
        return -ENOMEM;
    }
    struct errs e = {.name = name};
    rc = load_document(c, &e, slots, text, len);
    isoprof_free(slots);
    if (rc == 0 && e.full)
        errs_push(&e, SIZE_MAX, 0,
                  isoprof_asprintf("%s: too many problems; only the first %d are shown", name,
                                   CFG_MAX_ERRORS));
    if (rc == 0 && e.oom)
        rc = -ENOMEM;
    if (rc == 0 && e.count > 0)
        rc = ISOPROF_ECONFIG;
    if (rc == ISOPROF_ECONFIG && errs_finish(&e, why) != 0)
        rc = -ENOMEM;
    errs_release(&e);
    if (rc != 0) {
        cfg_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* Read a whole file of at most CFG_MAX_FILE bytes. */
static int read_file(const char *path, char **out, size_t *outlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return -EISDIR;
    }
    size_t cap = 4096, len = 0;
    if (S_ISREG(st.st_mode) && st.st_size > 0 && (uint64_t)st.st_size < CFG_MAX_FILE)
        cap = (size_t)st.st_size + 1;
    char *buf = isoprof_malloc(cap);
    if (buf == NULL) {
        close(fd);
        return -ENOMEM;
    }
    int rc = 0;
    for (;;) {
        if (len == cap) {
            /* One byte beyond the cap tells "exactly the cap" from more. */
            char *nb = isoprof_grow(buf, &cap, (size_t)CFG_MAX_FILE + 1, &rc);
            if (nb == NULL) {
                if (rc == ISOPROF_ETOOBIG)
                    rc = -EFBIG;
                break;
            }
            buf = nb;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    if (rc == 0 && len > CFG_MAX_FILE)
        rc = -EFBIG;
    if (rc != 0) {
        isoprof_free(buf);
        return rc;
    }
    *out = buf;
    *outlen = len;
    return 0;
}

int cfg_load_file(const char *path, struct cfg **out, char **why)
{
    if (why)
        *why = NULL;
    char *buf = NULL;
    size_t len = 0;
    int rc = read_file(path, &buf, &len);
    if (rc != 0) {
        if (why && rc == -EFBIG)
            *why = isoprof_asprintf("%s: larger than %u bytes", path, CFG_MAX_FILE);
        else if (why && rc != -ENOMEM)
            *why = isoprof_asprintf("%s: %s", path, isoprof_strerror(rc));
        return rc;
    }
    rc = cfg_load_buffer(path, buf, len, out, why);
    isoprof_free(buf);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Reload                                                                   */

int cfg_check_reload(const struct cfg *running, const struct cfg *next, char **why)
{
    struct errs e = {.name = next->source};
    if (why)
        *why = NULL;
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->reloadable)
            continue;
        size_t n = o->scope == CFG_SCOPE_GLOBAL ? 1 : running->ntargets;
        if (o->scope == CFG_SCOPE_TARGET && next->ntargets < n)
            n = next->ntargets;
        for (size_t t = 0; t < n; t++) {
            const void *a = o->scope == CFG_SCOPE_GLOBAL ? (const void *)running
                                                         : (const void *)&running->targets[t];
            const void *b = o->scope == CFG_SCOPE_GLOBAL ? (const void *)next
                                                         : (const void *)&next->targets[t];
            if (row_equal(o, a, b))
                continue;
            char was[96], now[96], *line;
            row_text(o, a, was, sizeof(was));
            row_text(o, b, now, sizeof(now));
            if (o->type == CFG_T_MAP) /* not shown: a value may be a secret */
                line = isoprof_asprintf("%s: %s changed; restart to apply", e.name, o->name);
            else if (o->scope == CFG_SCOPE_GLOBAL)
                line = isoprof_asprintf("%s: %s changed (%s -> %s); restart to apply", e.name,
                                        o->name, was, now);
            else
                line = isoprof_asprintf("%s: targets[%zu].%s changed (%s -> %s); restart to apply",
                                        e.name, t, o->name, was, now);
            if (e.count < CFG_MAX_ERRORS)
                errs_push(&e, 0, 0, line);
            else
                isoprof_free(line);
        }
    }
    int rc = e.oom ? -ENOMEM : e.count ? ISOPROF_ECONFIG : 0;
    if (rc == ISOPROF_ECONFIG && errs_finish(&e, why) != 0)
        rc = -ENOMEM;
    errs_release(&e);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Help and the example config                                              */

static void display_name(const struct cfg_option *o, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s", o->scope == CFG_SCOPE_TARGET ? "targets[]." : "", o->name);
}

/* The DEFAULT column: the value, "(required)", "(unset)", or the row whose
 * value an unset row takes, in parentheses ("(memory_limit)"). */
static const char *display_default(const struct cfg_option *o, char *buf, size_t cap)
{
    if (o->def == NULL && o->def_row != NULL) {
        snprintf(buf, cap, "(%s)", o->def_row);
        return buf;
    }
    return o->def ? def_text(o) : o->required ? "(required)" : "(unset)";
}

void cfg_write_help(FILE *f)
{
    int wn = 0, wt = 0, wd = 0, wb = 0;
    char name[96], b[96], def[96];
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        display_name(o, name, sizeof(name));
        bounds_text(o, b, sizeof(b));
        int n = (int)strlen(name), t = (int)strlen(type_name(o->type)),
            d = (int)strlen(display_default(o, def, sizeof(def))), bb = (int)strlen(b);
        wn = n > wn ? n : wn;
        wt = t > wt ? t : wt;
        wd = d > wd ? d : wd;
        wb = bb > wb ? bb : wb;
    }
    fprintf(f, "  %-*s  %-*s  %-*s  %-*s  %s\n", wn, "OPTION", wt, "TYPE", wd, "DEFAULT", wb,
            "BOUNDS", "DESCRIPTION");
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        display_name(o, name, sizeof(name));
        bounds_text(o, b, sizeof(b));
        fprintf(f, "  %-*s  %-*s  %-*s  %-*s  %s%s\n", wn, name, wt, type_name(o->type), wd,
                display_default(o, def, sizeof(def)), wb, b, o->help,
                o->reloadable ? "" : " [restart]");
    }
    fprintf(f,
            "\n  Durations: a number and ns, us, ms, s, m or h (\"250ms\", \"1.5m\"). Sizes: a\n"
            "  number and B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB, powers of 10). Shares:\n"
            "  \"10%%\" or 0.1. Bools: true or false. Maps: `name: value` lines under the\n"
            "  option's key. Lists: [a, b], or `- a` lines under the option's key. Without\n"
            "  `targets` the agent watches %s.\n",
            CFG_DEFAULT_INSPECTOR);
}

/* The j-th dot-separated component of name: pointer in *s, length returned
 * (0 if there is none). */
/* The j-th (from 0) dot-separated component of name: its start in *s and
 * its length. Past the last component, *s is "" and the length 0: *s is
 * set on every path, so no caller reads it unset. */
static size_t component(const char *name, int j, const char **s)
{
    const char *p = name;
    for (int i = 0; i < j; i++) {
        p = strchr(p, '.');
        if (p == NULL) {
            *s = "";
            return 0;
        }
        p++;
    }
    const char *dot = strchr(p, '.');
    *s = p;
    return dot ? (size_t)(dot - p) : strlen(p);
}

static int ncomponents(const char *name)
{
    int n = 1;
    for (const char *p = name; (p = strchr(p, '.')) != NULL; p++)
        n++;
    return n;
}

/* "# help [type, bounds]" at indent. */
static void write_comment(FILE *f, int indent, const struct cfg_option *o)
{
    char b[96];
    bounds_text(o, b, sizeof(b));
    int has_b = strcmp(b, "-") != 0;
    fprintf(f, "%*s# %s [%s%s%s%s]\n", indent, "", o->help, type_name(o->type), has_b ? ", " : "",
            has_b ? b : "", o->reloadable ? "" : "; needs a restart");
}

/*
 * Where the example writer is: the previous row's name (NULL: no section is
 * open), the indent of a name at depth 0, and for a target entry whether
 * its first line is still to come (written after "- ").
 */
struct ex_state {
    const char *prev;
    int indent;
    int item; /* a list item: depth 0 lines are "  - key" first, then "    key" */
    int first;
};

/* The prefix of a line at depth d: spaces, or "  - " for a target entry's
 * first line. */
static void ex_prefix(FILE *f, struct ex_state *st, int d)
{
    if (st->item && d == 0 && st->first) {
        fprintf(f, "%*s- ", st->indent - 2, "");
        st->first = 0;
    } else {
        fprintf(f, "%*s", st->indent + d * 2, "");
    }
}

/* Write row o (its help, then its key at its default, or commented out when
 * it has none), opening the sections of its name that the previous row did
 * not share with it. */
static void write_row_example(FILE *f, struct ex_state *st, const struct cfg_option *o,
                              const char *val)
{
    int nsec = ncomponents(o->name) - 1;
    int psec = st->prev ? ncomponents(st->prev) - 1 : 0;
    int same = 0; /* leading sections shared with prev, already open */
    while (same < nsec && same < psec) {
        const char *a, *b;
        size_t la = component(o->name, same, &a), lb = component(st->prev, same, &b);
        if (la != lb || memcmp(a, b, la) != 0)
            break;
        same++;
    }
    for (int d = same; d < nsec; d++) {
        const char *sec;
        size_t l = component(o->name, d, &sec);
        if (d == 0 && !st->item)
            fputc('\n', f);
        ex_prefix(f, st, d);
        fprintf(f, "%.*s:\n", (int)l, sec);
    }
    const char *leaf;
    size_t ll = component(o->name, nsec, &leaf);
    write_comment(f, st->indent + nsec * 2, o);
    if (val != NULL) {
        ex_prefix(f, st, nsec);
        fprintf(f, "%.*s: %s\n", (int)ll, leaf, val);
    } else {
        fprintf(f, "%*s# %.*s:\n", st->indent + nsec * 2, "", (int)ll, leaf);
    }
    st->prev = o->name;
}

static void write_targets_example(FILE *f)
{
    fprintf(f, "\n# Inspector endpoints to profile; only these are ever contacted. Without a\n"
               "# `targets` key the agent watches %s; `targets: []` watches none.\n"
               "targets:\n",
            CFG_DEFAULT_INSPECTOR);
    struct ex_state st = {.prev = NULL, .indent = 4, .item = 1, .first = 1};
    for (size_t j = 0; j < cfg_noptions; j++) {
        const struct cfg_option *t = &cfg_options[j];
        if (t->scope != CFG_SCOPE_TARGET)
            continue;
        /* The entry's first line is a key with a value, so that "- " opens
         * it: the required inspector comes first in the table. */
        ISOPROF_ASSERT(!st.first || t->type == CFG_T_INSPECTOR);
        write_row_example(f, &st, t,
                          t->type == CFG_T_INSPECTOR ? CFG_DEFAULT_INSPECTOR : def_text(t));
    }
}

int cfg_write_example(FILE *f)
{
    fprintf(f, "# isoprof configuration; every option is shown at its default.\n"
               "# Durations: ns, us, ms, s, m, h. Sizes: B, KiB, MiB, GiB (KB, MB, GB: powers\n"
               "# of 10). Shares: 10%% or 0.1. Bools: true or false. Maps: `name: value`\n"
               "# lines under the option's key. Lists: [a, b], or `- a` lines under the\n"
               "# option's key. `isoprofd --help` lists the options.\n");
    struct ex_state st = {.prev = NULL, .indent = 0, .item = 0, .first = 0};
    int targets_done = 0;
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope == CFG_SCOPE_TARGET) {
            if (!targets_done)
                write_targets_example(f);
            targets_done = 1;
            st.prev = NULL; /* the next global row reopens its sections */
            continue;
        }
        write_row_example(f, &st, o, o->def != NULL ? def_text(o) : NULL);
    }
    return ferror(f) ? -EIO : 0;
}

/* ------------------------------------------------------------------------ */
/* The control socket's path                                                */

int cfg_control_socket_path(const char *path, const char *store_dir, unsigned flags, char **out)
{
    int client = (flags & CFG_SOCKET_CLIENT) != 0;
    if (client && (path == NULL || path[0] == '\0'))
        path = getenv("ISOPROF_SOCKET");
    if (path != NULL && path[0] != '\0') {
        char *p = isoprof_strdup(path);
        if (p == NULL)
            return -ENOMEM;
        *out = p;
        return 0;
    }
    char *cand[3];
    size_t n = 0, pick = 0;
    int rc = 0;
    const char *rt = getenv("RUNTIME_DIRECTORY");
    if (rt != NULL && rt[0] != '\0')
        cand[n++] = isoprof_asprintf("%.*s/isoprof.sock", (int)strcspn(rt, ":"), rt);
    if (store_dir != NULL)
        cand[n++] = isoprof_asprintf("%s/control.sock", store_dir);
    if (client)
        cand[n++] = isoprof_strdup(CFG_CONTROL_SOCKET_RUN);
    for (size_t i = 0; i < n; i++)
        if (cand[i] == NULL)
            rc = -ENOMEM;
    if (n == 0)
        rc = -ENOENT;
    for (size_t i = 0; rc == 0 && client && i < n; i++) {
        struct stat st;
        if (lstat(cand[i], &st) == 0) {
            pick = i;
            break;
        }
    }
    for (size_t i = 0; i < n; i++)
        if (rc != 0 || i != pick)
            isoprof_free(cand[i]);
    if (rc == 0)
        *out = cand[pick];
    return rc;
}

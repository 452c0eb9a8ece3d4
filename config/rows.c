/*
 * rows.c - the option table's rows as the loader, --help and the reload
 * check use them: a row's type, bounds, default and value as text, its
 * field in struct cfg (or struct cfg_target), equality; and struct cfg's
 * lifetime: defaults applied, targets added, freed.
 */
#include "loader_internal.h"

#include "base.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Rows: formatting and field access                                        */

void cfg_fmt_value(const struct cfg_option *o, uint64_t v, char *buf, size_t cap)
{
    static const struct unit dur[] = {{"h", 3600 * NS_PER_S}, {"m", 60 * NS_PER_S}, {"s", NS_PER_S},
                                      {"ms", 1000000ull},     {"us", 1000ull},      {"ns", 1}};
    static const struct unit sz[] = {{"TiB", 1ull << 40},
                                     {"GiB", 1ull << 30},
                                     {"MiB", 1ull << 20},
                                     {"KiB", 1ull << 10},
                                     {"B", 1}};
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

const char *cfg_type_name(enum cfg_type t)
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

const char *cfg_join_choices(const struct cfg_option *o, const char *sep, const char *last,
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

const char *cfg_type_noun(const struct cfg_option *o, char *buf, size_t cap)
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
        return cfg_join_choices(o, ", ", " or ", buf, cap);
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

uint64_t cfg_row_max(const struct cfg_option *o)
{
    if (o->type == CFG_T_COUNT)
        return o->max != 0 && o->max < UINT32_MAX ? o->max : UINT32_MAX;
    return o->max != 0 ? o->max : UINT64_MAX;
}

void cfg_bounds_text(const struct cfg_option *o, char *buf, size_t cap)
{
    char lo[32], hi[32];
    switch (o->type) {
    case CFG_T_SIZE:
    case CFG_T_DURATION:
    case CFG_T_COUNT:
    case CFG_T_FRACTION:
        cfg_fmt_value(o, o->min, lo, sizeof(lo));
        if (o->max == 0) {
            snprintf(buf, cap, "%s>= %s", o->auto_ok ? "auto or " : "", lo);
        } else {
            cfg_fmt_value(o, o->max, hi, sizeof(hi));
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
        cfg_join_choices(o, "|", "|", buf, cap);
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

const char *cfg_row_check(const struct cfg_option *o, const char *s, size_t len, int is_key,
                          const char *shown, char *buf, size_t cap)
{
    return o->check != NULL ? o->check(s, len, is_key, shown, buf, cap) : NULL;
}

const char *cfg_def_text(const struct cfg_option *o)
{
    return o->def != NULL && o->def[0] == '\0' ? "\"\"" : o->def;
}

void *cfg_field_of(const struct cfg_option *o, const void *base)
{
    return (char *)base + o->offset;
}

uint64_t cfg_row_number(const struct cfg_option *o, const void *base)
{
    const void *f = cfg_field_of(o, base);
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

int cfg_row_is_string(const struct cfg_option *o)
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

int cfg_row_equal(const struct cfg_option *o, const void *a, const void *b)
{
    if (o->type == CFG_T_MAP)
        return cfg_map_equal(cfg_field_of(o, a), cfg_field_of(o, b));
    if (o->type == CFG_T_STRLIST)
        return cfg_strlist_equal(cfg_field_of(o, a), cfg_field_of(o, b));
    if (cfg_row_is_string(o)) {
        const char *sa = *(char *const *)cfg_field_of(o, a),
                   *sb = *(char *const *)cfg_field_of(o, b);
        if (sa == NULL || sb == NULL)
            return sa == sb;
        return strcmp(sa, sb) == 0;
    }
    if (o->type == CFG_T_FRACTION)
        return *(const double *)cfg_field_of(o, a) == *(const double *)cfg_field_of(o, b);
    return cfg_row_number(o, a) == cfg_row_number(o, b);
}

/* A list as a flow list, "[a, b]", each entry echoed; "...]" ends one cut
 * short to fit cap. */
static void strlist_text(const struct cfg_strlist *l, char *buf, size_t cap)
{
    char one[320];
    size_t len = 0;
    for (size_t i = 0; i <= l->n && len < cap; i++) {
        const char *sep = i == 0 ? "[" : i == l->n ? "" : ", ";
        const char *part = i == l->n ? "]" : cfg_echo(one, sizeof(one), l->v[i], strlen(l->v[i]));
        int n = snprintf(buf + len, cap - len, "%s%s", sep, part);
        len += n > 0 ? (size_t)n : 0;
    }
    if (len >= cap && cap >= 5)
        memcpy(buf + cap - 5, "...]", 5);
}

void cfg_row_text(const struct cfg_option *o, const void *base, char *buf, size_t cap)
{
    if (cfg_row_is_string(o)) {
        const char *s = *(char *const *)cfg_field_of(o, base);
        if (s == NULL)
            snprintf(buf, cap, "(unset)");
        else if (s[0] == '\0')
            snprintf(buf, cap, "\"\"");
        else
            cfg_echo(buf, cap, s, strlen(s));
    } else if (o->type == CFG_T_ENUM) {
        snprintf(buf, cap, "%s", o->choices[cfg_row_number(o, base)]);
    } else if (o->type == CFG_T_BOOL) {
        snprintf(buf, cap, "%s", cfg_row_number(o, base) ? "true" : "false");
    } else if (o->type == CFG_T_MAP) {
        snprintf(buf, cap, "{...}"); /* a value may be a secret (a header's token) */
    } else if (o->type == CFG_T_STRLIST) {
        strlist_text(cfg_field_of(o, base), buf, cap);
    } else {
        cfg_fmt_value(o, cfg_row_number(o, base), buf, cap);
    }
}

const struct cfg_option *cfg_find_row(const char *name, enum cfg_scope scope, size_t *index)
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
/* struct cfg lifetime                                                      */

void cfg_map_free(struct cfg_map *m)
{
    for (size_t i = 0; i < m->n; i++) {
        isoprof_free(m->items[i].key);
        isoprof_free(m->items[i].value);
    }
    isoprof_free(m->items);
    m->items = NULL;
    m->n = 0;
}

void cfg_strlist_free(struct cfg_strlist *l)
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
        if (o->scope == scope && cfg_row_is_string(o)) {
            char **f = cfg_field_of(o, base);
            isoprof_free(*f);
            *f = NULL;
        } else if (o->scope == scope && o->type == CFG_T_MAP) {
            cfg_map_free(cfg_field_of(o, base));
        } else if (o->scope == scope && o->type == CFG_T_STRLIST) {
            cfg_strlist_free(cfg_field_of(o, base));
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
            rc = cfg_strlist_default(o, base);
        else
            rc = cfg_set_value(o, base, o->def, strlen(o->def), o->name, &e, (struct pos){0, 0});
    }
    cfg_errs_release(&e);
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

void cfg_resolve_def_rows(void *base, enum cfg_scope scope)
{
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope != scope || o->def_row == NULL)
            continue;
        const struct cfg_option *from = cfg_find_row(o->def_row, scope, NULL);
        ISOPROF_ASSERT(from != NULL && from->type == o->type && row_size(o) != 0 && o->min > 0);
        if (cfg_row_number(o, base) == 0)
            memcpy(cfg_field_of(o, base), cfg_field_of(from, base), row_size(o));
    }
}

int cfg_add_target(struct cfg *c, size_t *cap, struct cfg_target **out)
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

int cfg_add_default_target(struct cfg *c, size_t *cap)
{
    struct cfg_target *t;
    int rc = cfg_add_target(c, cap, &t);
    if (rc != 0)
        return rc;
    struct errs e = {.name = "<defaults>"};
    const struct cfg_option *o = cfg_find_row("inspector", CFG_SCOPE_TARGET, NULL);
    rc = cfg_set_value(o, t, CFG_DEFAULT_INSPECTOR, strlen(CFG_DEFAULT_INSPECTOR), o->name, &e,
                       (struct pos){0, 0});
    cfg_errs_release(&e);
    cfg_resolve_def_rows(t, CFG_SCOPE_TARGET);
    return rc;
}

int cfg_new(const char *source, struct cfg **out)
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
    rc = cfg_add_default_target(c, &cap);
    if (rc != 0) {
        cfg_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/*
 * helpers.h - shared by the config unit tests: load a string, look for a
 * line in *why, compare two configs row by row through the option table
 * (so a new option is compared without touching the tests).
 */
#ifndef ISOPROF_TEST_CONFIG_HELPERS_H
#define ISOPROF_TEST_CONFIG_HELPERS_H

#include "base.h"
#include "config.h"
#include "internal.h"

#include <string.h>

/* Load text as "t.yaml"; NULL on any error, *why (caller frees) set. */
static inline struct cfg *load(const char *text, char **why)
{
    struct cfg *c = NULL;
    *why = NULL;
    if (cfg_load_buffer("t.yaml", text, strlen(text), &c, why) != 0)
        return NULL;
    return c;
}

/* Is line one of the lines of why, exactly? */
static inline int has_line(const char *why, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = why; p != NULL && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len == n && memcmp(p, line, n) == 0)
            return 1;
        p = nl ? nl + 1 : NULL;
    }
    return 0;
}

/* Does some line of why start with prefix? */
static inline int has_prefix(const char *why, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = why; p != NULL && *p;) {
        if (strncmp(p, prefix, n) == 0)
            return 1;
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : NULL;
    }
    return 0;
}

static inline size_t count_lines(const char *why)
{
    if (why == NULL || *why == '\0')
        return 0;
    size_t n = 1;
    for (const char *p = why; *p; p++)
        n += *p == '\n';
    return n;
}

/* One problem per text, at an exact position with an exact message. */
struct one_error {
    const char *text;
    const char *line;
};

/* Load each case as "t.yaml": it must fail with exactly its line. Returns
 * how many did not, each named on stderr. */
static inline int one_errors_failed(const struct one_error *cases, size_t n)
{
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        char *why = NULL;
        struct cfg *c = NULL;
        int rc = cfg_load_buffer("t.yaml", cases[i].text, strlen(cases[i].text), &c, &why);
        if (rc != ISOPROF_ECONFIG || c != NULL || !has_line(why, cases[i].line) ||
            count_lines(why) != 1) {
            fprintf(stderr, "case %zu: rc %d, want\n  %s\ngot\n  %s\n", i, rc, cases[i].line,
                    why ? why : "(null)");
            failed++;
        }
        cfg_free(c);
        isoprof_free(why);
    }
    return failed;
}

static inline int row_same(const struct cfg_option *o, const void *a, const void *b)
{
    const char *fa = (const char *)a + o->offset, *fb = (const char *)b + o->offset;
    switch (o->type) {
    case CFG_T_STRING:
    case CFG_T_INSPECTOR:
    case CFG_T_LISTEN: {
        const char *sa = *(char *const *)(const void *)fa, *sb = *(char *const *)(const void *)fb;
        return (sa == NULL && sb == NULL) || (sa && sb && strcmp(sa, sb) == 0);
    }
    case CFG_T_SIZE:
    case CFG_T_DURATION:
        return *(const uint64_t *)(const void *)fa == *(const uint64_t *)(const void *)fb;
    case CFG_T_COUNT:
        return *(const uint32_t *)(const void *)fa == *(const uint32_t *)(const void *)fb;
    case CFG_T_FRACTION:
        return *(const double *)(const void *)fa == *(const double *)(const void *)fb;
    case CFG_T_ENUM:
    case CFG_T_BOOL:
        return *(const int *)(const void *)fa == *(const int *)(const void *)fb;
    case CFG_T_MAP: {
        const struct cfg_map *ma = (const void *)fa, *mb = (const void *)fb;
        return (ma->n == 0) == (ma->items == NULL) && (mb->n == 0) == (mb->items == NULL) &&
               cfg_map_equal(ma, mb);
    }
    case CFG_T_STRLIST: {
        const struct cfg_strlist *la = (const void *)fa, *lb = (const void *)fb;
        return (la->n == 0) == (la->v == NULL) && (lb->n == 0) == (lb->v == NULL) &&
               cfg_strlist_equal(la, lb);
    }
    }
    return 0;
}

/* Every option equal (source aside); names the first difference on stderr. */
static inline int cfg_same(const struct cfg *a, const struct cfg *b)
{
    if (a->ntargets != b->ntargets) {
        fprintf(stderr, "ntargets %zu != %zu\n", a->ntargets, b->ntargets);
        return 0;
    }
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope == CFG_SCOPE_GLOBAL) {
            if (!row_same(o, a, b)) {
                fprintf(stderr, "%s differs\n", o->name);
                return 0;
            }
            continue;
        }
        for (size_t t = 0; t < a->ntargets; t++) {
            if (!row_same(o, &a->targets[t], &b->targets[t])) {
                fprintf(stderr, "targets[%zu].%s differs\n", t, o->name);
                return 0;
            }
        }
    }
    for (size_t t = 0; t < a->ntargets; t++) {
        if (strcmp(a->targets[t].host, b->targets[t].host) != 0 ||
            a->targets[t].port != b->targets[t].port)
            return 0;
    }
    return 1;
}

/* Load each text as "t.yaml": it must be valid and, unless want is NULL,
 * equal want. Returns how many were not, each named on stderr. */
static inline int valid_texts_failed(const char *const *texts, size_t n, const struct cfg *want)
{
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        char *why;
        struct cfg *c = load(texts[i], &why);
        if (c == NULL || (want != NULL && !cfg_same(c, want))) {
            fprintf(stderr, "text %zu: %s\n", i, why ? why : "(loads, but differs)");
            failed++;
        }
        cfg_free(c);
        isoprof_free(why);
    }
    return failed;
}

#endif

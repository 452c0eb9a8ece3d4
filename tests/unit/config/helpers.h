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
    case CFG_T_LOGLEVEL:
        return *(const enum cfg_log_level *)(const void *)fa ==
               *(const enum cfg_log_level *)(const void *)fb;
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

#endif

/*
 * common.h - helpers shared by the pprof unit tests: reading fixtures,
 * decoding a result with protobuf-c, and finding things in it.
 */
#ifndef PPROF_TEST_COMMON_H
#define PPROF_TEST_COMMON_H

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "pprof.h"
#include "profile.pb-c.h"

typedef Perftools__Profiles__Profile Profile;
typedef Perftools__Profiles__Function Function;
typedef Perftools__Profiles__Location Location;
typedef Perftools__Profiles__Sample Sample;

/* The whole file, NUL-terminated, into *len bytes; NULL if unreadable. */
static inline char *read_fixture(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", PPROF_FIXTURES, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "cannot open %s\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = isoprof_malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        isoprof_free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

static inline Profile *decode(const struct pprof_buf *b)
{
    return perftools__profiles__profile__unpack(NULL, b->len, b->data);
}

static inline const char *pstr(const Profile *p, int64_t i)
{
    return i >= 0 && (size_t)i < p->n_string_table ? p->string_table[i] : "<bad string index>";
}

static inline const Function *func_by_id(const Profile *p, uint64_t id)
{
    for (size_t i = 0; i < p->n_function; i++)
        if (p->function[i]->id == id)
            return p->function[i];
    return NULL;
}

static inline const Function *func_by_name(const Profile *p, const char *name)
{
    for (size_t i = 0; i < p->n_function; i++)
        if (strcmp(pstr(p, p->function[i]->name), name) == 0)
            return p->function[i];
    return NULL;
}

static inline const Location *loc_by_id(const Profile *p, uint64_t id)
{
    for (size_t i = 0; i < p->n_location; i++)
        if (p->location[i]->id == id)
            return p->location[i];
    return NULL;
}

/* Name of the function at stack position j of sample s ("" if none). */
static inline const char *frame_name(const Profile *p, const Sample *s, size_t j)
{
    const Location *l = loc_by_id(p, s->location_id[j]);
    if (l == NULL || l->n_line == 0)
        return "";
    const Function *f = func_by_id(p, l->line[0]->function_id);
    return f ? pstr(p, f->name) : "";
}

static inline int64_t value_sum(const Profile *p, size_t vi)
{
    int64_t t = 0;
    for (size_t i = 0; i < p->n_sample; i++)
        t += p->sample[i]->value[vi];
    return t;
}

static inline bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

#endif

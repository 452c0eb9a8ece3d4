/*
 * loader_internal.h - what the YAML loader's files share: config.c (load,
 * relations, reload, the control socket's path), value.c (problems,
 * scalar parsers, setting a value), rows.c (the rows' text and fields,
 * struct cfg's lifetime), walk.c (the document walk) and help.c. Not part
 * of config.h's API; internal.h is the option table's. Any thread, one
 * load at a time per struct cfg.
 */
#ifndef ISOPROF_LOADER_INTERNAL_H
#define ISOPROF_LOADER_INTERNAL_H

#include "config.h"
#include "internal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <yaml.h>

#define CFG_MAX_ERRORS 100
#define CFG_MAX_FILE (1u << 20)
#define CFG_MAX_TARGETS 4096
#define CFG_MAX_KEY 64 /* longer keys are unknown by definition */
#define CFG_MAX_DEPTH 16
#define CFG_MAX_ANCHORS 64
#define NS_PER_S 1000000000ull

/* --- problems (value.c) --- */

struct err_line {
    size_t line, col;
    char *text; /* the whole line, "name:line:col: message" */
};

struct errs {
    const char *name;                        /* file name, prefixes every line */
    struct err_line ent[CFG_MAX_ERRORS + 1]; /* + 1: room for the "too many" line */
    unsigned count;                          /* problems kept in ent */
    int full;                                /* a problem was dropped: the walk stops */
    int oom;
};

#define ERR_NODE(e, node, ...)                                                                     \
    cfg_err_at((e), (node)->start_mark.line + 1, (node)->start_mark.column + 1, __VA_ARGS__)

/* --- values (value.c) --- */

struct unit {
    const char *name;
    uint64_t mul;
};

struct pos {
    size_t line, col; /* 1-based; 0:0 for the embedded defaults */
};

/* --- the walk (walk.c) --- */

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

/* value.c */

/*
 * Make a value fit to echo inside one message line: at most 64 bytes
 * (cut on a UTF-8 boundary, "..." appended), control bytes and NULs as \xNN.
 * Returns buf.
 */
const char *cfg_echo(char *buf, size_t cap, const char *s, size_t len);

/* Record one problem at a 1-based line:col. */
__attribute__((format(printf, 4, 5))) void cfg_err_at(struct errs *e, size_t line, size_t col,
                                                      const char *fmt, ...);

/*
 * Sort the lines by position (stable, so problems found at one spot keep
 * their order, and rules checked after the walk land where they belong),
 * join them with '\n' into *out (NULL if out is NULL) and release them.
 * Returns 0 or -ENOMEM.
 */
int cfg_errs_finish(struct errs *e, char **out);

/* Keep one line (ownership of text moves to e), or mark oom if text is NULL. */
void cfg_errs_push(struct errs *e, size_t line, size_t col, char *text);

void cfg_errs_release(struct errs *e);

/*
 * Parse text (len bytes, NUL-terminated at len) as row o into base.
 * Returns 0; -EINVAL after reporting the problem at p as `fullname ...`;
 * -ENOMEM.
 */
int cfg_set_value(const struct cfg_option *o, void *base, const char *text, size_t len,
                  const char *fullname, struct errs *e, struct pos p);

/* rows.c */

int cfg_add_default_target(struct cfg *c, size_t *cap);

/* Append a target holding the per-target defaults. *cap tracks the array's
 * capacity (struct cfg only keeps the count). */
int cfg_add_target(struct cfg *c, size_t *cap, struct cfg_target **out);

/* "100ms..1h", ">= 1MiB", "<= 255 bytes" or "-". */
void cfg_bounds_text(const struct cfg_option *o, char *buf, size_t cap);

int cfg_new(const char *source, struct cfg **out);

/* A row's default as YAML text: the empty string shows as "". */
const char *cfg_def_text(const struct cfg_option *o);

void *cfg_field_of(const struct cfg_option *o, const void *base);

const struct cfg_option *cfg_find_row(const char *name, enum cfg_scope scope, size_t *index);

/* A value of row o's unit (ns, bytes, ppm, count) as a person writes it. */
void cfg_fmt_value(const struct cfg_option *o, uint64_t v, char *buf, size_t cap);

/* The choices of an enum row joined into buf: "a, b or c" (or "a|b|c" when
 * sep is "|"). Returns buf. */
const char *cfg_join_choices(const struct cfg_option *o, const char *sep, const char *last,
                             char *buf, size_t cap);

void cfg_map_free(struct cfg_map *m);

/*
 * Give each row of scope that takes its default from another row
 * (cfg_option.def_row) and was left unset (0: such a row's min is above 0,
 * so no valid value is 0) that row's value. Runs once the file's values are
 * in, so that `memory_limit: 256MiB` also moves threads.memory_limit.
 */
void cfg_resolve_def_rows(void *base, enum cfg_scope scope);

/* Row o's own check of s, if it has one (see cfg_check_fn). */
const char *cfg_row_check(const struct cfg_option *o, const char *s, size_t len, int is_key,
                          const char *shown, char *buf, size_t cap);

int cfg_row_equal(const struct cfg_option *o, const void *a, const void *b);

int cfg_row_is_string(const struct cfg_option *o);

/* The effective upper bound of a numeric row (max 0 = unbounded). */
uint64_t cfg_row_max(const struct cfg_option *o);

/* The value of a numeric row in its table unit, for relations and diffs. */
uint64_t cfg_row_number(const struct cfg_option *o, const void *base);

void cfg_row_text(const struct cfg_option *o, const void *base, char *buf, size_t cap);

void cfg_strlist_free(struct cfg_strlist *l);

const char *cfg_type_name(enum cfg_type t);

/* The noun used in "X must be <noun>, not a list"; buf holds an enum's. */
const char *cfg_type_noun(const struct cfg_option *o, char *buf, size_t cap);

/* walk.c */

/* An empty value, `~` or `null`, written plain: YAML's null. */
int cfg_is_null(const yaml_node_t *n);

const char *cfg_node_kind(const yaml_node_t *n);

const char *cfg_sv(const yaml_node_t *n);

/*
 * Set list row o in base from its default, a flow list such as "[node]",
 * read by libyaml and checked as a file's list is. -EINVAL means the table
 * is broken (the unit tests rule that out); -ENOMEM.
 */
int cfg_strlist_default(const struct cfg_option *o, void *base);

/* Walk a mapping whose keys are under prefix ("" for the root). The
 * recursion is bounded by the depth of the option names. */
int cfg_walk_map(struct walk *w, const yaml_node_t *map, const char *prefix);

/*
 * Set list row o in base from sequence node v of doc: at most
 * CFG_STRLIST_MAX entries (the first one past it is reported), each as
 * strlist_entry checks it. Every problem is reported; the field changes
 * only when there is none. Returns 0, -EINVAL (reported) or -ENOMEM.
 */
int cfg_set_strlist(yaml_document_t *doc, struct errs *e, const struct cfg_option *o, void *base,
                    const yaml_node_t *v, const char *fullname);

/*
 * Set map row o from mapping node v: keys unique, at most o->max entries,
 * each entry as map_entry checks it. Every problem is reported; the field
 * changes only when there is none. Returns 0, -EINVAL (reported) or
 * -ENOMEM.
 */
int cfg_set_map(struct walk *w, const struct cfg_option *o, void *base, const yaml_node_t *v,
                const char *fullname);

/* PROTOTYPES */

#endif

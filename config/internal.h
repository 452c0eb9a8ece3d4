/*
 * internal.h - the option table shared by the loader (config.c) and its
 * definition (options.c). Nothing outside config/ includes this, except the
 * config unit tests, which walk the table to compare whole configs.
 */
#ifndef ISOPROF_CONFIG_INTERNAL_H
#define ISOPROF_CONFIG_INTERNAL_H

#include "config.h"

#include <stddef.h>
#include <stdint.h>

/* The C type behind each option type is fixed, so that the loader, cfg_free
 * and the comparisons can handle any row through its offset alone. */
enum cfg_type {
    CFG_T_STRING,    /* char *, owned; NULL when unset */
    CFG_T_SIZE,      /* uint64_t bytes; a unit is required */
    CFG_T_DURATION,  /* uint64_t ns; a unit is required */
    CFG_T_COUNT,     /* uint32_t; a bare whole number */
    CFG_T_FRACTION,  /* double; "10%" or 0.1 */
    CFG_T_ENUM,      /* an enum type of int size: the index of the value in `choices` */
    CFG_T_BOOL,      /* int, 0 or 1; YAML true or false */
    CFG_T_INSPECTOR, /* char * as written; also fills host and port (targets only) */
    CFG_T_LISTEN,    /* char *: "" (off), or a local bind address: ipv4:port,
                        localhost:port or [ipv6]:port */
    CFG_T_MAP,       /* struct cfg_map: a YAML mapping of names to scalar values, kept in
                        file order, keys unique; `max` caps the entries, the only default
                        is {} (GLOBAL rows only) */
    CFG_T_STRLIST,   /* struct cfg_strlist: a YAML sequence of scalar strings, at most
                        CFG_STRLIST_MAX, each non-empty and of at most `max` bytes (max is
                        never 0); `def` is a flow list ("[node]", "[]") parsed as a file's
                        value is (GLOBAL rows only) */
};

/*
 * A row's own rule beyond its type and bounds (cfg_option.check; Redis's
 * isValidCallback). s holds len bytes and no NUL: the value of a string row,
 * or of a map row the key (is_key) or the value of one entry. It runs before
 * the string check for control characters, so it sees any byte and can
 * refuse a value without quoting it. For a list row it runs on each entry
 * (is_key 0), once the entry is known to be non-empty and within `max`
 * bytes. Returns NULL if s is fine, else the rest of a message that starts
 * with the name ("upload.url"; for a map the row's name before a key's
 * problem, "upload.headers.<key>" before a value's; for a list the entry's,
 * "discovery.processes.users[2]"), static or written into buf (cap bytes).
 * shown is s made fit to quote in one line; quote it only where s cannot be
 * a secret. It is NULL for a map's values, which are never quoted.
 */
typedef const char *(*cfg_check_fn)(const char *s, size_t len, int is_key, const char *shown,
                                    char *buf, size_t cap);

/* GLOBAL rows live in struct cfg under their dotted name; TARGET rows are the
 * keys of one `targets:` entry and live in struct cfg_target, under a name
 * relative to the entry that may be dotted too ("threads.max": a `threads:`
 * mapping inside the entry). */
enum cfg_scope { CFG_SCOPE_GLOBAL, CFG_SCOPE_TARGET };

struct cfg_option {
    const char *name; /* dotted path ("sampling.cpu.period"); for targets the key */
    enum cfg_type type;
    enum cfg_scope scope;
    /* default, written as in YAML ("" is the empty string, printed as "");
     * NULL: unset (or required), or def_row's value */
    const char *def;
    /* NULL, or the name of another row of the same scope and type whose
     * value this row takes when the file leaves it unset (def is then NULL,
     * and min above 0 so that 0 can mean "unset" during the walk):
     * targets[].threads.memory_limit is the target's memory_limit. */
    const char *def_row;
    /*
     * Bounds in the value's unit: ns, bytes, count, string length in bytes;
     * fractions in parts per million. max 0 means no upper bound (for a
     * count: UINT32_MAX). Strings: min 0 refuses an empty string; min 1
     * accepts a quoted "" (the value then is "", which turns the feature
     * the option names off). Maps: max is the most entries (never 0).
     * Lists: max is the most bytes of one entry (never 0); the most
     * entries is CFG_STRLIST_MAX.
     */
    uint64_t min, max;
    int required;   /* the key must be present (targets: per entry) */
    int reloadable; /* a running agent may apply a change without a restart */
    size_t offset;  /* into struct cfg (GLOBAL) or struct cfg_target (TARGET) */
    const char *help;
    cfg_check_fn check;         /* NULL: the type's checks are all */
    const char *const *choices; /* CFG_T_ENUM: the names, in enum order, NULL-terminated */
    int auto_ok; /* CFG_T_SIZE: the word "auto" is a value too (CFG_SIZE_AUTO) */
};

/*
 * A rule between GLOBAL rows, checked after the walk and only when every
 * value it reads was valid itself. "Set" means a string that is not empty,
 * a map or a list with entries, a number that is not 0; `other` may name a
 * section ("upload.basic_auth"), which is set when any option in it is.
 */
enum cfg_rel_kind {
    CFG_REL_AT_LEAST, /* name >= other (two rows of one numeric type) */
    CFG_REL_NEEDS,    /* name set needs other set (reported at name) */
    CFG_REL_EXCLUDES, /* name and other are not both set (reported at name) */
    CFG_REL_ENTRIES,  /* each value of map `name` passes entry_rule, which may read
                         `other` (reported at the value) */
    CFG_REL_NONEMPTY, /* list `name` has entries when other is set (reported at name,
                         else at other) */
};

struct cfg_relation {
    const char *name;
    const char *other;
    enum cfg_rel_kind kind;
    /* CFG_REL_ENTRIES: NULL if value (one entry of map `name`) is fine given
     * c, else the rest of a message that starts with the entry's name. */
    const char *(*entry_rule)(const struct cfg *c, const char *value);
};

extern const struct cfg_option cfg_options[];
extern const size_t cfg_noptions;
extern const struct cfg_relation cfg_relations[];
extern const size_t cfg_nrelations;

/* The choices of the enum rows (options.c). */
extern const char *const cfg_log_level_names[];
extern const char *const cfg_upload_api_names[];

/* Same entries in the same order (config.c)? */
int cfg_map_equal(const struct cfg_map *a, const struct cfg_map *b);
int cfg_strlist_equal(const struct cfg_strlist *a, const struct cfg_strlist *b);

/* May ch appear in a host name (v6 0) or a bracketed IPv6 address (config.c)? */
int cfg_host_char_ok(char ch, int v6);

/* The upload section's own rules (upload.c); see cfg_check_fn and
 * cfg_relation.entry_rule. */
const char *cfg_upload_check_url(const char *s, size_t len, int is_key, const char *shown,
                                 char *buf, size_t cap);
const char *cfg_upload_check_tenant(const char *s, size_t len, int is_key, const char *shown,
                                    char *buf, size_t cap);
const char *cfg_upload_check_header(const char *s, size_t len, int is_key, const char *shown,
                                    char *buf, size_t cap);
const char *cfg_upload_check_label(const char *s, size_t len, int is_key, const char *shown,
                                   char *buf, size_t cap);
const char *cfg_upload_label_fits_api(const struct cfg *c, const char *value);

/* The control section's rules (options.c): control.group a plausible group
 * name, metrics.listen a loopback address. */
const char *cfg_check_group(const char *s, size_t len, int is_key, const char *shown, char *buf,
                            size_t cap);
const char *cfg_check_loopback(const char *s, size_t len, int is_key, const char *shown, char *buf,
                               size_t cap);

#endif

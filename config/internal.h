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
    CFG_T_LOGLEVEL,  /* enum cfg_log_level */
    CFG_T_INSPECTOR, /* char * as written; also fills host and port (targets only) */
    CFG_T_LISTEN,    /* char *: "" (off), or a local bind address: ipv4:port,
                        localhost:port or [ipv6]:port */
};

/* GLOBAL rows live in struct cfg under their dotted name; TARGET rows are the
 * keys of one `targets:` entry and live in struct cfg_target. */
enum cfg_scope { CFG_SCOPE_GLOBAL, CFG_SCOPE_TARGET };

struct cfg_option {
    const char *name; /* dotted path ("sampling.cpu.period"); for targets the key */
    enum cfg_type type;
    enum cfg_scope scope;
    const char *def; /* default, written as in YAML; NULL: unset (or required) */
    /*
     * Bounds in the value's unit: ns, bytes, count, string length in bytes;
     * fractions in parts per million. max 0 means no upper bound (for a
     * count: UINT32_MAX). Strings: min 0 refuses an empty string; min 1
     * accepts a quoted "" (the value then is "", which turns the feature
     * the option names off).
     */
    uint64_t min, max;
    int required;   /* the key must be present (targets: per entry) */
    int reloadable; /* a running agent may apply a change without a restart */
    size_t offset;  /* into struct cfg (GLOBAL) or struct cfg_target (TARGET) */
    const char *help;
};

/*
 * A rule between two GLOBAL rows of the same numeric type: the value of
 * `name` must be >= the value of `other`.
 */
struct cfg_relation {
    const char *name;
    const char *other;
};

extern const struct cfg_option cfg_options[];
extern const size_t cfg_noptions;
extern const struct cfg_relation cfg_relations[];
extern const size_t cfg_nrelations;

#endif

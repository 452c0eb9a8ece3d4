/*
 * internal.h - the option table shared by the loader (config.c) and its
 * definition (options.c).
 */
#ifndef ISOPROF_CONFIG_INTERNAL_H
#define ISOPROF_CONFIG_INTERNAL_H

#include "config.h"

#include <stddef.h>
#include <stdint.h>

enum cfg_type {
    CFG_T_STRING,
    CFG_T_SIZE,     /* uint64_t bytes */
    CFG_T_DURATION, /* uint64_t ns */
    CFG_T_UINT32,
    CFG_T_FRACTION, /* double; "10%" or 0.1 */
    CFG_T_LOGLEVEL,
    CFG_T_INSPECTOR, /* host:port, fills host and port of a target */
};

enum cfg_scope { CFG_SCOPE_GLOBAL, CFG_SCOPE_TARGET };

struct cfg_option {
    const char *name; /* dotted path; for targets the key inside one entry */
    enum cfg_type type;
    enum cfg_scope scope;
    const char *def;  /* default as written in YAML; NULL = unset/required */
    uint64_t min, max; /* bounds in the value's unit (ns, bytes, count); fraction: per mille */
    int required;
    int reloadable;
    size_t offset; /* into struct cfg or struct cfg_target */
    const char *help;
};

extern const struct cfg_option cfg_options[];
extern const size_t cfg_noptions;

#endif

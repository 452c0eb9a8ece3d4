/*
 * config.h - isoprof's configuration: load, defaults, validation, help.
 *
 * One table of options (options.c) drives everything: the defaults, the
 * parsing and bounds of each value, the `--help` listing and the commented
 * example config. The loader reads YAML with libyaml and reports every
 * problem as `file:line:col: message` (1-based), all of them at once.
 *
 * No logging, no global state. Thread: any, one call at a time per struct.
 */
#ifndef ISOPROF_CONFIG_H
#define ISOPROF_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum cfg_log_level { CFG_LOG_DEBUG, CFG_LOG_INFO, CFG_LOG_WARN, CFG_LOG_ERROR };

/* One inspector endpoint to watch. All strings owned by the struct cfg. */
struct cfg_target {
    char *inspector; /* as written: "host:port" or "[v6]:port" */
    char *host;      /* without brackets */
    uint16_t port;
    char *worker;  /* label override; NULL if unset */
    char *version; /* label; NULL if unset */
    uint64_t memory_limit;
};

struct cfg {
    char *source; /* the file name, or "<defaults>" */
    struct {
        char *path;
        uint64_t max_size;
    } store;
    struct cfg_target *targets;
    size_t ntargets;
    struct {
        uint64_t interval_ns;
    } discovery;
    struct {
        struct {
            uint64_t duration_ns, period_ns, interval_ns;
            double jitter; /* fraction of the period, 0..0.5 */
            uint32_t max_concurrent;
        } cpu;
    } sampling;
    struct {
        enum cfg_log_level level;
    } log;
};

/* The embedded defaults (one target, 127.0.0.1:9229). *out owned by the
 * caller (cfg_free). Errors: -ENOMEM. */
int cfg_defaults(struct cfg **out);

/*
 * Load and validate a YAML file. On success *out is owned by the caller.
 * Errors: a negative errno when the file cannot be read (*why: "path:
 * reason"); ISOPROF_ECONFIG when it is invalid, *why then holding every
 * problem, one `file:line:col: message` per line; -ENOMEM. *why, when set,
 * is allocated and freed by the caller with isoprof_free. why may be NULL.
 */
int cfg_load_file(const char *path, struct cfg **out, char **why);

/* As cfg_load_file, from memory; name is used in messages. text need not
 * be NUL-terminated. */
int cfg_load_buffer(const char *name, const char *text, size_t len, struct cfg **out, char **why);

/* Free c and everything it owns; NULL is a no-op. */
void cfg_free(struct cfg *c);

/* Write a commented example config holding every option at its default;
 * it loads back to the defaults. Returns 0 or -EIO. */
int cfg_write_example(FILE *f);

/* Write an aligned list of options: name, type, default, bounds, help. */
void cfg_write_help(FILE *f);

/* "10s", "1.5m", "250ms", "100us" -> nanoseconds. Units ns, us, µs, ms,
 * s, m, h; a unit is required. -EINVAL on garbage, -ERANGE on overflow. */
int cfg_parse_duration(const char *s, uint64_t *ns);

/* "128MiB", "1GiB", "4096B", "10MB" -> bytes (KiB/MiB/GiB/TiB powers of
 * 1024, KB/MB/GB/TB powers of 1000). A unit is required. -EINVAL, -ERANGE. */
int cfg_parse_size(const char *s, uint64_t *bytes);

/* "debug", "info", "warn", "error". */
const char *cfg_log_level_name(enum cfg_log_level l);

#endif

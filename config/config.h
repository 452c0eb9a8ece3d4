/*
 * config.h - isoprof's configuration: load, defaults, validation, help.
 *
 * One table of options (options.c) drives everything: the defaults, the
 * parsing and bounds of each value, the `--help` listing and the commented
 * example config. The loader reads YAML with libyaml and reports every
 * problem as `file:line:col: message` (1-based), all of them at once.
 *
 * Keys (see `isoprofd --help` for types, defaults and bounds):
 *   store.path, store.max_size, store.on_damage, store.pending_max
 *   targets: a list of {inspector, worker, version, memory_limit,
 *            threads: {enabled, memory_limit, max}}; absent means one target
 *            at CFG_DEFAULT_INSPECTOR, an empty list means none (the agent
 *            idles). threads.memory_limit left unset is the target's
 *            memory_limit.
 *   discovery.interval, discovery.processes.{enabled, executables, activate,
 *   users, version_from}
 *   sampling.cpu.{duration, period, interval, jitter, max_concurrent, mode}
 *   sampling.budget.{pause_share, max_pause, max_duration, horizon}
 *   sampling.heap.{interval, period}, sampling.memory_poll
 *   anomaly.memory.{threshold, heap_period}, anomaly.{cpu_interval,
 *   cooldown, retention}, anomaly.latency.{listen, window, factor, min,
 *   min_count, worker_tag, version_tag}, anomaly.regression.{enabled,
 *   min_samples, min_windows, min_delta, min_ratio, alpha, max_versions,
 *   extra_windows, max_functions, warmup}
 *   upload.{url, api, timeout, max_profile_size, host, tenant_id,
 *   bearer_token_file}, upload.batch.{max_profiles, max_bytes, max_delay},
 *   upload.tls.{ca_file, insecure_skip_verify}, upload.basic_auth.{username,
 *   password_file}, upload.headers and upload.labels (mappings)
 *   control.{socket, group}, metrics.listen
 *   log.level
 *
 * Value syntax: durations are a decimal number and a unit (ns, us, µs, ms,
 * s, m, h: "250ms", "1.5m"); sizes a decimal number and a unit (B, KiB,
 * MiB, GiB, TiB in powers of 1024; KB/kB, MB, GB, TB in powers of 1000);
 * counts a bare whole number; shares "10%" or 0.1; bools true or false. A
 * bare number is refused where a unit is expected. A section or an optional
 * key given an empty value (`log:`, `worker: ~`, `headers:`) is the same as
 * leaving it out (`threads: ~` and `threads: {}` are all defaults). A
 * mapping option (upload.headers, upload.labels) holds `name: value`
 * entries whose values are strings (a null one is refused; write '' for an
 * empty value); a message never quotes a header's value or
 * a URL that holds credentials. A list option (executables and users in
 * discovery.processes) is a YAML sequence of non-empty strings, flow
 * (`[node, nodejs]`) or block (`- node` lines), at most CFG_STRLIST_MAX of
 * them; `[]` is an empty list, and an empty value (`users:`, `users: ~`) is
 * the default, as for any option.
 *
 * No logging, no global state: every function may be called from any
 * thread, concurrently, as long as one struct cfg is not freed while another
 * thread reads it. A loaded struct cfg is never modified by this library.
 */
#ifndef ISOPROF_CONFIG_H
#define ISOPROF_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The inspector watched when the config has no `targets` key. */
#define CFG_DEFAULT_INSPECTOR "127.0.0.1:9229"
/* store.path's default (the CLI looks there too). */
#define CFG_DEFAULT_STORE_PATH "./isoprof-data"

/* The limits of an on-demand window (POST /profile, `isoprof profile`):
 * the CLI, the control socket and the daemon check against these. */
#define CFG_OD_SECONDS_MAX 3600u             /* --seconds 1..3600 */
#define CFG_OD_INTERVAL_MIN_NS 100000ull     /* --interval 100us.. */
#define CFG_OD_INTERVAL_MAX_NS 1000000000ull /* ..1s */

/* Where the packaged service's control socket is (its unit's
 * RuntimeDirectory=isoprof): the last place a client looks. */
#define CFG_CONTROL_SOCKET_RUN "/run/isoprof/isoprof.sock"

/* cfg_control_socket_path's flags. */
#define CFG_SOCKET_CLIENT 1u /* a client looking for the socket, not the daemon making it */

enum cfg_log_level { CFG_LOG_DEBUG, CFG_LOG_INFO, CFG_LOG_WARN, CFG_LOG_ERROR };

/* upload.api: the Connect Push API or the legacy /ingest endpoint. */
enum cfg_upload_api { CFG_UPLOAD_PUSH, CFG_UPLOAD_INGEST };

/* sampling.cpu.mode: how a CPU window starts V8's profiler (agent/daemon/
 * warm.h): cold every window, kept warm between windows, or chosen per
 * isolate from what its windows cost. */
enum cfg_cpu_mode { CFG_CPU_COLD, CFG_CPU_WARM, CFG_CPU_AUTO };
extern const char *const cfg_cpu_mode_names[];

/* store.on_damage: what isoprofd does with a store it finds damaged at start. */
enum cfg_store_on_damage { CFG_STORE_REFUSE, CFG_STORE_MOVE_ASIDE };

/* One entry of a mapping option (upload.labels, upload.headers). */
struct cfg_kv {
    char *key, *value;
};

/* A mapping option: n entries in the order the file gives them, keys
 * unique (compared exactly). */
struct cfg_map {
    struct cfg_kv *items; /* NULL when n is 0 */
    size_t n;
};

/* The most entries a list option (struct cfg_strlist) holds. */
#define CFG_STRLIST_MAX 64

/* A list option: n strings in the order the file gives them, each
 * non-empty, NUL-terminated and without control characters; duplicates are
 * kept as written. */
struct cfg_strlist {
    char **v; /* NULL when n is 0 */
    size_t n; /* 0..CFG_STRLIST_MAX */
};

/* A size option that accepts the word "auto" (memory_limit) holds this
 * for it. */
#define CFG_SIZE_AUTO UINT64_MAX

/* One inspector endpoint to watch. All strings are owned by the struct cfg
 * that holds the target and live as long as it does. */
struct cfg_target {
    char *inspector; /* as written: "host:port" or "[v6]:port" */
    char *host;      /* without brackets: "127.0.0.1", "::1", "localhost" */
    uint16_t port;   /* 1..65535 */
    char *worker;    /* label override; NULL if unset */
    char *version;   /* label; NULL if unset */
    /* Bytes, or CFG_SIZE_AUTO (the default): the limit each isolate's
     * runtime gives it (agent/daemon/memwatch.h). */
    uint64_t memory_limit;
    /* The isolate's worker threads (Node's worker_threads: each Worker is a
     * V8 isolate of its own, reached through this target's inspector
     * session). Every field is resolved: the daemon reads it as is. */
    struct {
        /* 1 (default): attach to the target's worker threads and profile
         * each as an isolate of its own; 0: the main thread only. */
        int enabled;
        /* Bytes, >= 1 MiB, or CFG_SIZE_AUTO: the heap limit each worker
         * thread's memory is watched against (its Worker's
         * resourceLimits). When the file leaves threads.memory_limit
         * unset, this is the target's memory_limit above (so it is never
         * 0). */
        uint64_t memory_limit;
        /* 1..1024 (default 64): worker threads attached at once. */
        uint32_t max;
    } threads;
    /* Source maps: root is prefixed to every path read for this target
     * (NULL: "/"); source_maps lists directories searched for maps
     * (absolute, inside root). Both reloadable. */
    char *root;
    struct cfg_strlist source_maps;
    /* Labels sent with every profile of the target (at most 16; checked as
     * upload.labels are); reloadable, applied to windows taken after. */
    struct cfg_map labels;
};

/* A loaded configuration. Every pointer is owned by the struct and freed by
 * cfg_free; callers must not modify or free any of them. */
struct cfg {
    char *source; /* the file name given to the loader, or "<defaults>" */
    struct {
        char *path;
        uint64_t max_size;                  /* bytes */
        enum cfg_store_on_damage on_damage; /* refuse (default) or move_aside */
        uint64_t pending_max;               /* bytes of windows held while the store fails */
    } store;
    uint64_t source_maps_cache;    /* bytes of parsed source maps, all targets */
    uint64_t source_maps_max_file; /* larger map files are refused */
    double source_maps_cpu;        /* each target's share of a core for its lookups */
    struct cfg_target *targets;    /* ntargets entries; NULL when ntargets is 0 */
    size_t ntargets;
    struct {
        uint64_t interval_ns; /* /json/list polls; also the /proc scan's period */
        /* Host process discovery: scan /proc for runtime processes whose
         * inspector can be profiled. All reloadable. */
        struct {
            int enabled; /* 0 (default): no /proc scan */
            /* Base names of the executables looked at (no '/', <= 255
             * bytes each); default {"node"}; never empty when enabled. */
            struct cfg_strlist executables;
            /* 1: send SIGUSR1 to opted-in Node processes (--inspect-port)
             * so that they open their inspector; default 0. */
            int activate;
            /* Only processes of these users, each a numeric uid ("1000")
             * or a user name (<= 32 bytes of [A-Za-z0-9_.-], not starting
             * with '-') as written: names are not resolved here, the
             * daemon does that. Empty (default): any user. */
            struct cfg_strlist users;
            /* Where a process's version comes from when its target names
             * none, tried in order: "env:NAME" (NAME an environment
             * variable name, [A-Za-z_][A-Za-z0-9_]*, <= 128 bytes) or
             * "package.json"; default empty (the version stays "unknown"). */
            struct cfg_strlist version_from;
        } processes;
    } discovery;
    struct {
        struct {
            uint64_t duration_ns, period_ns, interval_ns; /* period_ns >= duration_ns */
            double jitter;                                /* share of the period, 0..0.5 */
            uint32_t max_concurrent;                      /* 1..1024 */
            enum cfg_cpu_mode mode;
        } cpu;
        struct {
            uint64_t interval; /* bytes */
            uint64_t period_ns;
        } heap;
        /* What scheduled windows may cost an isolate (windows.h). */
        struct {
            double pause_share;       /* of wall time, 1e-6..1 */
            uint64_t max_pause_ns;    /* one planned stall */
            uint64_t max_duration_ns; /* a lengthened CPU window */
            uint64_t horizon_ns;      /* pause_share holds over any span this long */
        } budget;
        uint64_t memory_poll_ns;
    } sampling;
    struct {
        struct {
            double threshold;        /* share of memory_limit, 0.01..1 */
            uint64_t heap_period_ns; /* the first step of an episode's heap windows */
            double max_share;        /* of an episode's time its heap windows may stall */
            struct {
                int enabled;                    /* memory_growth on */
                uint64_t window_ns, horizon_ns; /* the fit's span; how far it looks ahead */
            } growth;
            int snapshot;               /* take a heap snapshot once per episode */
            uint64_t snapshot_max_heap; /* bytes of used heap above which it is skipped */
            uint32_t snapshot_keep;     /* snapshot windows kept per worker/version */
        } memory;
        uint64_t cpu_interval_ns;
        uint64_t cooldown_ns;
        uint32_t retention; /* pinned windows live this many times as long */
        struct {
            char *listen; /* "" = off */
            uint64_t window_ns, min_ns;
            double factor;
            uint32_t min_count;
            char *worker_tag, *version_tag;
        } latency;
        /* Deploy regressions (agent/pprof/regress.h): each worker's
         * per-version CPU aggregate, a new version judged against the one
         * before it. All reloadable; a change applies from the next window. */
        struct {
            int enabled;
            uint32_t min_samples;   /* non-idle samples each side needs */
            uint32_t min_windows;   /* windows each side needs (their spread is judged) */
            double min_delta;       /* least change of a function's share, absolute */
            double min_ratio;       /* least relative change of its share (> 1) */
            double alpha;           /* family-wise error of one comparison */
            uint32_t max_versions;  /* aggregates kept per worker */
            uint32_t extra_windows; /* extra CPU windows a new version may take */
            uint32_t max_functions; /* functions one aggregate keeps */
            uint64_t warmup_ns;     /* windows this soon after an attach are not folded */
        } regression;
    } anomaly;
    struct {
        char *url;               /* "" = upload off; http:// or https://, no credentials */
        enum cfg_upload_api api; /* push (default) or ingest */
        uint64_t timeout_ns;     /* one request, connection included */
        struct {
            uint64_t min_ns, max_ns; /* the retry delay's first cap and its ceiling */
        } backoff;
        struct {
            uint32_t max_profiles; /* profiles a request, 1..1024 */
            uint64_t max_bytes;    /* uncompressed pprof bytes a request */
            uint64_t max_delay_ns; /* a batch that is not full goes this long after
                                      its oldest window was queued */
        } batch;
        uint64_t max_profile_size; /* a larger pprof is rejected without sending */
        uint64_t max_age_ns;       /* older windows are expired, never sent */
        uint64_t max_rate;         /* catch-up bytes a second above production; 0 = no limit */
        int isolate_label;         /* send the per-process isolate label */
        char *host;                /* the host label; "" = gethostname() */
        struct {
            char *ca_file;            /* "" = the system's CAs */
            int insecure_skip_verify; /* verification off (logged at every start) */
        } tls;
        struct {
            char *username;      /* "" = no Basic auth */
            char *password_file; /* required with username; never its content */
        } basic_auth;
        char *bearer_token_file; /* "" = none; exclusive with basic_auth */
        char *tenant_id;         /* X-Scope-OrgID; "" = none */
        struct cfg_map headers;  /* extra request headers */
        struct cfg_map labels;   /* static labels on every profile */
    } upload;
    struct {
        char *socket; /* "" = automatic (cfg_control_socket_path: $RUNTIME_DIRECTORY/isoprof.sock,
                         else <store.path>/control.sock); at most 107 bytes (sun_path) */
        char *group;  /* "" = socket mode 0600; else 0660 and this group (getgrnam at start) */
    } control;
    struct {
        char *listen; /* "" = off; else a loopback ip:port, [::1]:port or localhost:port */
    } metrics;
    struct {
        enum cfg_log_level level;
    } log;
};

/*
 * cfg_defaults - the embedded defaults: every option at its default and one
 * target at CFG_DEFAULT_INSPECTOR. source is "<defaults>".
 * out: receives the config, owned by the caller (cfg_free); untouched on error.
 * Errors: -ENOMEM.
 */
int cfg_defaults(struct cfg **out);

/*
 * cfg_load_file - read and validate the YAML file at path.
 * out: on success receives the config, owned by the caller (cfg_free);
 *      untouched on error.
 * why: may be NULL. Otherwise set to NULL, or on error to an allocated
 *      message the caller frees with isoprof_free():
 *        - the file cannot be read: a negative errno (-ENOENT, -EACCES,
 *          -EISDIR, -EIO, ...) and why "path: No such file or directory";
 *        - the file is larger than 1 MiB: -EFBIG, why "path: ...";
 *        - the file is invalid: ISOPROF_ECONFIG, why holding every problem,
 *          one `path:line:col: message` per line (lines joined by '\n', no
 *          trailing newline, sorted by position; at most 100 problems,
 *          then a final line saying there were more). A YAML syntax error
 *          stops the parse, so it is reported alone; so is YAML nested more
 *          than 16 levels deep or holding more than 64 anchors, which is
 *          refused before libyaml builds the document (both would make it
 *          slow, and no valid config comes close).
 *      On -ENOMEM why stays NULL.
 */
int cfg_load_file(const char *path, struct cfg **out, char **why);

/*
 * cfg_load_buffer - as cfg_load_file, from len bytes at text (need not be
 * NUL-terminated, may contain any bytes; NULL is allowed when len is 0).
 * name: used in messages and copied to source; NULL means "<buffer>".
 * Errors: ISOPROF_ECONFIG (why as above), -EFBIG (len > 1 MiB), -ENOMEM.
 */
int cfg_load_buffer(const char *name, const char *text, size_t len, struct cfg **out, char **why);

/* cfg_free - free c and everything it owns; NULL is a no-op. */
void cfg_free(struct cfg *c);

/*
 * cfg_check_reload - may a running agent switch from running to next
 * without a restart? Compares every option the table marks as not
 * reloadable (store.*, sampling.heap.interval,
 * anomaly.retention, anomaly.latency.* (the detector and the listener are
 * built at start), upload.url (the store queues windows only if it was
 * opened with upload on), control.socket, control.group, metrics.listen).
 * Returns 0 if so; ISOPROF_ECONFIG with why (if non-NULL) listing each
 * such option that changed, one "<next source>: store.path changed (...);
 * restart to apply" per line (a mapping option without the values:
 * "upload.headers changed; restart to apply"), caller frees; -ENOMEM. Both
 * configs are borrowed.
 */
int cfg_check_reload(const struct cfg *running, const struct cfg *next, char **why);

/*
 * cfg_section_equal - do a and b hold the same value for every global
 * option of section, the options whose dotted name is section or starts
 * with it and a dot ("upload": upload.url, upload.batch.max_bytes,
 * upload.headers, ...)? The option table drives it: an option added to the
 * section is compared with no change here. Both configs are borrowed.
 */
int cfg_section_equal(const struct cfg *a, const struct cfg *b, const char *section);

/*
 * cfg_write_example - write a commented YAML config holding every option at
 * its default, with its help, type and bounds; loaded back it equals the
 * defaults. Options without a default (a target's worker, version and
 * threads.memory_limit) appear commented out. Returns 0, or -EIO if the stream reports an error.
 */
int cfg_write_example(FILE *f);

/* cfg_write_help - write one aligned line per option: name, type, default,
 * bounds, help, and "[restart]" when a change needs a restart. */
void cfg_write_help(FILE *f);

/*
 * cfg_parse_duration - "10s", "1.5m", "250ms", "100us" -> nanoseconds.
 * A decimal number (no sign, no exponent; fraction digits beyond the ninth
 * are ignored, the result is truncated to whole ns), optional spaces, and a
 * unit (ns, us, µs, ms, s, m, h), which is required.
 * Errors: -EINVAL on anything else (ns untouched), -ERANGE if the result
 * does not fit in 64 bits.
 */
int cfg_parse_duration(const char *s, uint64_t *ns);

/*
 * cfg_parse_size - "128MiB", "1.5GiB", "4096B", "10MB" -> bytes. Syntax as
 * for durations; units B, KiB, MiB, GiB, TiB (powers of 1024) and KB (or
 * kB), MB, GB, TB (powers of 1000). Errors: -EINVAL, -ERANGE.
 */
int cfg_parse_size(const char *s, uint64_t *bytes);

/*
 * cfg_control_socket_path - the path of isoprofd's control socket, by the one
 * rule the daemon that makes it and the clients that look for it share:
 *   1. path, when it is not NULL and not "" (the daemon passes
 *      control.socket, a client its --socket); a client then takes
 *      $ISOPROF_SOCKET when that is set and not "";
 *   2. else the automatic candidates, in this order:
 *        $RUNTIME_DIRECTORY/isoprof.sock, when the variable is set and not ""
 *        (its first ':'-separated entry: systemd lists one directory per
 *        RuntimeDirectory=);
 *        <store_dir>/control.sock, when store_dir is not NULL (the daemon
 *        passes store.path, a client its --store);
 *        CFG_CONTROL_SOCKET_RUN, for a client only.
 *      The daemon (flags 0) takes the first candidate. A client
 *      (CFG_SOCKET_CLIENT) takes the first that exists (lstat), or the first
 *      when none does, so that its error message names the likeliest one.
 * out: on success an allocation the caller frees with isoprof_free; untouched
 * on error. The length is not checked against sun_path: the caller says
 * what is wrong with a path that is too long.
 * Errors: -ENOMEM; -ENOENT when there is no candidate (the daemon, with
 * neither $RUNTIME_DIRECTORY nor store_dir).
 * Reads the environment, and for a client the file system; any thread
 * (the environment is not changed meanwhile).
 */
int cfg_control_socket_path(const char *path, const char *store_dir, unsigned flags, char **out);

/* cfg_log_level_name - "debug", "info", "warn", "error"; a static string.
 * Out-of-range values give "info". */
const char *cfg_log_level_name(enum cfg_log_level l);

#endif

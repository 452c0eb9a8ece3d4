/*
 * options.c - the one table of configuration options.
 *
 * Adding an option is a row here and a field in struct cfg. The loader
 * validates against the bounds, the defaults come from `def` (parsed by the
 * same code as a file's value), and --help and the example config are
 * printed from the same rows.
 */
#include "internal.h"

#define G(field) offsetof(struct cfg, field)
#define T(field) offsetof(struct cfg_target, field)
#define NS_MS 1000000ull
#define NS_S 1000000000ull
#define MIB (1ull << 20)

const struct cfg_option cfg_options[] = {
    {"store.path", CFG_T_STRING, CFG_SCOPE_GLOBAL, "./isoprof-data", 0, 0, 0, 0, G(store.path),
     "directory of the LMDB store (created if missing)"},
    {"store.max_size", CFG_T_SIZE, CFG_SCOPE_GLOBAL, "1GiB", MIB, 1ull << 40, 0, 0, G(store.max_size),
     "budget of stored data; the oldest windows are evicted before it is reached"},
    {"inspector", CFG_T_INSPECTOR, CFG_SCOPE_TARGET, NULL, 0, 0, 1, 1, T(inspector),
     "inspector endpoint host:port (an IP literal or localhost)"},
    {"worker", CFG_T_STRING, CFG_SCOPE_TARGET, NULL, 0, 255, 0, 1, T(worker),
     "worker label (default: the workerd service, else the script's file name)"},
    {"version", CFG_T_STRING, CFG_SCOPE_TARGET, NULL, 0, 255, 0, 1, T(version),
     "version label (default: unknown)"},
    {"memory_limit", CFG_T_SIZE, CFG_SCOPE_TARGET, "128MiB", MIB, 1ull << 40, 0, 1,
     T(memory_limit), "the isolate's memory limit"},
    {"discovery.interval", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "5s", 100 * NS_MS, 3600 * NS_S, 0, 1,
     G(discovery.interval_ns), "how often each endpoint's /json/list is polled"},
    {"sampling.cpu.duration", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "10s", 100 * NS_MS, 3600 * NS_S, 0,
     1, G(sampling.cpu.duration_ns), "length of one CPU profile window"},
    {"sampling.cpu.period", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "60s", 100 * NS_MS, 86400 * NS_S, 0,
     1, G(sampling.cpu.period_ns), "one window per isolate every period (>= duration)"},
    {"sampling.cpu.interval", CFG_T_DURATION, CFG_SCOPE_GLOBAL, "10ms", 100000ull, NS_S, 0, 1,
     G(sampling.cpu.interval_ns), "V8 sampling interval (>= 100us)"},
    {"sampling.cpu.jitter", CFG_T_FRACTION, CFG_SCOPE_GLOBAL, "10%", 0, 500, 0, 1,
     G(sampling.cpu.jitter), "random shift of each window, as a share of the period (0-50%)"},
    {"sampling.cpu.max_concurrent", CFG_T_UINT32, CFG_SCOPE_GLOBAL, "4", 1, 1024, 0, 1,
     G(sampling.cpu.max_concurrent), "windows at once on this host; more are delayed"},
    {"log.level", CFG_T_LOGLEVEL, CFG_SCOPE_GLOBAL, "info", 0, 0, 0, 1, G(log.level),
     "debug, info, warn or error"},
};

const size_t cfg_noptions = sizeof(cfg_options) / sizeof(cfg_options[0]);

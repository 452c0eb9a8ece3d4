/*
 * memwatch.h - one isolate's memory watch: its heap limit, the
 * memory_near_limit and memory_growth episodes, and the evidence they ask
 * for.
 *
 * A pure state machine. The daemon (anomaly.c) feeds it every
 * Runtime.getHeapUsage poll with the time on the monotonic clock and the
 * parameters drawn from the config; it answers with actions (open, extend,
 * end an episode; take a heap window pinned to one; a snapshot is due) and
 * the daemon carries them out, as windows.c's driver does for windows. It
 * reads no clock, does no I/O and allocates nothing, so a unit test drives
 * hours of polls on a simulated clock in milliseconds.
 *
 * The rules (anomaly.memory.* in config/README.md):
 * - The limit: a memory_limit in the config wins; else workerd's isolates
 *   get 128 MiB, and a Node or Deno isolate V8's heap_size_limit, read from
 *   the process's flags (memwatch_v8_limit) or, when they cannot be read,
 *   V8's default for the host's memory.
 * - memory_near_limit opens when a poll reaches threshold x limit (at most
 *   once a cooldown), takes a heap window at once, and ends once memory has
 *   stayed under the threshold for a cooldown. While it is open its heap
 *   windows back off: heap_first after the first, then twice that, and so
 *   on up to heap_max (the schedule's heap period); and one that falls due
 *   while the episode's heap windows have stalled the isolate for more than
 *   max_share of the episode's time waits until the share is back under it.
 *   The first window is evidence and never waits.
 * - memory_growth: the floor of the used heap (the least poll of each of
 *   MEMWATCH_BUCKETS buckets spanning growth_window, the heap after a GC
 *   rather than its sawtooth) is read through its lower envelope (each
 *   bucket's floor lowered to the least floor after it: the live heap of a
 *   leak only rises, so anything above a later floor was garbage). The
 *   episode opens when the envelope grew by at least MEMWATCH_MIN_GROWTH
 *   over the window, in every quarter of it (each at least a sixteenth of
 *   the whole: a fill that plateaued, a step or a ramp that ended grows in
 *   one or two quarters only), the least floor of each quarter rises above
 *   the one before by as much, that rise no smaller than the floors' own
 *   swing inside a quarter (the envelope's newest end is the least of few
 *   polls, so a heap that only swings would otherwise read as growth), and
 *   its least-squares trend reaches the limit within growth_horizon. It takes a heap window at once; it ends once the
 *   test has failed for half a window.
 * - Either episode owes one heap snapshot when snapshot is on (the daemon
 *   tries it at the next poll that can take it, memwatch_snapshot_done).
 *
 * DESIGN: loop thread only; one struct memwatch per isolate, inside its
 * target. The episode pointers (ep) are the daemon's: the machine keeps
 * them for it and never reads them.
 */
#ifndef ISOPROF_AGENT_MEMWATCH_H
#define ISOPROF_AGENT_MEMWATCH_H

#include "config.h"

#include <stddef.h>
#include <stdint.h>

#define MEMWATCH_MIB (1ull << 20)
/* A workerd isolate's heap limit (Cloudflare Workers' 128 MB). */
#define MEMWATCH_WORKERD_LIMIT (128ull * MEMWATCH_MIB)
/* Buckets of the growth window (a multiple of 4: the quarters). */
#define MEMWATCH_BUCKETS 32
/* The least growth of the floor over a window that can be a leak. */
#define MEMWATCH_MIN_GROWTH (2ull * MEMWATCH_MIB)

/* Where a limit came from. */
enum memwatch_source {
    MEMWATCH_SRC_CONFIG,       /* memory_limit / threads.memory_limit */
    MEMWATCH_SRC_V8_DEFAULT,   /* V8's default for the host's memory */
    MEMWATCH_SRC_FLAG,         /* a V8 heap flag on the command line */
    MEMWATCH_SRC_NODE_OPTIONS, /* ... in NODE_OPTIONS */
    MEMWATCH_SRC_DENO_V8_FLAGS, /* ... in DENO_V8_FLAGS */
    MEMWATCH_SRC_WORKERD,      /* workerd's fixed isolate limit */
    MEMWATCH_SRC_PROCESS,      /* a worker thread: its process's V8 limit */
    MEMWATCH_NSOURCES
};
/* "config", "auto:v8-default", "auto:flag", "auto:NODE_OPTIONS",
 * "auto:DENO_V8_FLAGS", "auto:workerd", "auto:process"; "?" outside. */
const char *memwatch_source_name(unsigned src);
/* The store's enum store_limit_source for src (STORE_LIMIT_NONE outside). */
uint8_t memwatch_source_store(unsigned src);

/* The two kinds of episode, as indexes (their store kinds in
 * memwatch_kind_anomaly). */
enum memwatch_kind { MEMWATCH_NEAR, MEMWATCH_GROWTH, MEMWATCH_NKINDS };
/* STORE_ANOMALY_MEMORY_NEAR_LIMIT or STORE_ANOMALY_MEMORY_GROWTH. */
uint8_t memwatch_kind_anomaly(enum memwatch_kind k);

/*
 * memwatch_v8_limit - V8's heap_size_limit for a process of runtime
 * ("node" or "deno"), from its command line (cmdline[0..len), NUL-separated
 * argv; NULL: unknown) and environment (env[0..elen), NUL-separated
 * NAME=value; NULL: unknown): Node's --max-old-space-size,
 * --max-semi-space-size and --max-heap-size (the command line's options,
 * before the script, over NODE_OPTIONS'), Deno's in --v8-flags= over
 * DENO_V8_FLAGS; V8's default for phys bytes of memory for the rest (old
 * space a quarter of it, at most 4 GiB; young space three semi-spaces, at
 * most 16 MiB each on Node, 32 MiB on Deno, as measured on Node 20 and
 * Deno 2). *src says which set it (the flag that set the old space, or
 * MEMWATCH_SRC_V8_DEFAULT). Returns the limit in bytes. Pure.
 */
uint64_t memwatch_v8_limit(const char *runtime, const char *cmdline, size_t len, const char *env,
                           size_t elen, uint64_t phys, uint8_t *src);

/* What the machine is told of the config (memwatch_params_from_cfg). */
struct memwatch_params {
    double threshold;       /* anomaly.memory.threshold */
    uint64_t cooldown_ns;   /* anomaly.cooldown */
    uint64_t heap_first_ns; /* anomaly.memory.heap_period: the back-off's first step */
    uint64_t heap_max_ns;   /* the schedule's heap period: its last */
    double max_share;       /* anomaly.memory.max_share */
    int snapshot;           /* anomaly.memory.snapshot */
    int growth;             /* anomaly.memory.growth.enabled */
    uint64_t growth_window_ns, growth_horizon_ns;
};
/* p from c, heap_max_ns the isolate's heap period now (its plan's). */
void memwatch_params_from_cfg(const struct cfg *c, uint64_t heap_max_ns,
                              struct memwatch_params *p);

struct memwatch_episode {
    int open;
    uint64_t since_ns;     /* opened (monotonic) */
    uint64_t opened_ns;    /* the last open, for the cooldown (0: never) */
    uint64_t quiet_ns;     /* near: back under the threshold since; growth: the test
                              failing since (0: not) */
    uint64_t value;        /* near: the peak; growth: the floor at the last judgement */
    int snap_due;          /* a snapshot is owed to it */
    void *ep;              /* the daemon's (struct episode *), never read here */
};

/* The growth detector's state and its last judgement. */
struct memwatch_growth {
    uint64_t bucket_ns;                  /* growth_window / MEMWATCH_BUCKETS (0: not set up) */
    uint64_t origin_ns;                  /* the start of bucket index 0 */
    uint64_t cur;                        /* the index of the bucket being filled */
    uint64_t floor[MEMWATCH_BUCKETS];    /* a ring by index; 0: no poll fell in it */
    uint64_t filled;                     /* buckets closed since the start */
    /* the last judgement */
    int judged, steady;
    uint64_t growth;      /* of the envelope over the window, bytes */
    double rate;          /* bytes per second, its trend (0 when not growing) */
    uint64_t eta_ns;      /* till the trend reaches the limit (UINT64_MAX: never) */
    uint64_t envelope_last;
};

struct memwatch {
    uint64_t limit;  /* bytes; 0 until memwatch_set_limit */
    uint8_t source;  /* enum memwatch_source */
    uint64_t last;   /* the latest poll, bytes (0 before the first) */
    struct memwatch_episode k[MEMWATCH_NKINDS];
    /* the near-limit episode's heap windows */
    uint64_t heap_due_ns;  /* the next (0: none) */
    uint64_t heap_step_ns; /* the back-off's current step */
    uint64_t cost_ns;      /* what its heap windows stalled the isolate */
    uint64_t heap_windows; /* taken for it, the first included */
    uint64_t waited;       /* due ones that waited for max_share */
    struct memwatch_growth g;
};

/* The actions of one poll (bits by enum memwatch_kind). */
struct memwatch_actions {
    unsigned open, extend, end;
    int heap;          /* take a heap window pinned to heap_kind's episode */
    uint8_t heap_kind; /* enum memwatch_kind */
    int snapshot;      /* a snapshot is due for snap_kind's episode */
    uint8_t snap_kind;
};

void memwatch_init(struct memwatch *m);
/* The isolate's limit is bytes (> 0), from src. */
void memwatch_set_limit(struct memwatch *m, uint64_t bytes, uint8_t src);
/* The near-limit threshold in bytes under p (0 while the limit is unknown). */
uint64_t memwatch_threshold(const struct memwatch *m, const struct memwatch_params *p);

/*
 * memwatch_poll - a heap usage poll of used bytes at now: the episodes move
 * and *out says what the daemon is to do (cleared first). Nothing opens
 * while the limit is unknown. The daemon sets k[i].ep on an open and
 * clears it on an end; an end comes with no other action of that kind.
 */
void memwatch_poll(struct memwatch *m, const struct memwatch_params *p, uint64_t now,
                   uint64_t used, struct memwatch_actions *out);
/* A heap window taken for the near-limit episode stalled the isolate
 * pause_ns: charged to the episode's cost. */
void memwatch_heap_cost(struct memwatch *m, uint64_t pause_ns);
/* The snapshot owed to kind's episode was tried (taken or skipped). */
void memwatch_snapshot_done(struct memwatch *m, enum memwatch_kind kind);
/* The isolate went away (or was detached): every open episode ends, in
 * out->end; the detector starts over. */
void memwatch_gone(struct memwatch *m, struct memwatch_actions *out);
/* The share of the near-limit episode's time its heap windows stalled the
 * isolate (0 when none is open). */
double memwatch_cost_share(const struct memwatch *m, uint64_t now);

#endif

/*
 * episode.h - one anomaly episode, shared by the windows taken as its
 * evidence.
 *
 * The windows taken for an episode hold a reference and are pinned to it
 * when stored. id is written once, by the writer's store stage (thread
 * pool), when the episode is recorded; later store jobs read it there too.
 * The loop thread only reads it after that job's completion callback,
 * which orders the accesses. Refcounted on the loop thread only.
 */
#ifndef ISOPROF_AGENT_EPISODE_H
#define ISOPROF_AGENT_EPISODE_H

#include <stdint.h>

struct episode {
    unsigned refs;
    uint64_t id;  /* 0 until recorded (or if recording failed) */
    uint8_t kind; /* enum store_anomaly_kind */
    char *worker, *version;
    char *thread; /* "main", or a worker thread's label */
    uint32_t isolate;
    uint64_t start_ns, end_ns; /* wall */
    uint64_t value, threshold;
    /* The memory kinds: the isolate's limit and its enum store_limit_source
     * (0 and STORE_LIMIT_NONE for latency), set by the caller. */
    uint64_t limit;
    uint8_t limit_source;
    int open;
};

/* A new open episode (one reference, the caller's), started now; NULL on
 * ENOMEM. The strings are copied; thread NULL is "main". */
struct episode *episode_new(uint8_t kind, const char *worker, const char *version,
                            const char *thread, uint32_t isolate, uint64_t value,
                            uint64_t threshold);
struct episode *episode_ref(struct episode *e);
void episode_unref(struct episode *e); /* NULL-safe */

#endif

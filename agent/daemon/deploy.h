/*
 * deploy.h - deploy regressions (version_regression) (deploy.c). Declared apart from daemon.h,
 * which holds the structs every module shares, so that a file includes what it calls.
 */
#ifndef ISOPROF_AGENT_DEPLOY_H
#define ISOPROF_AGENT_DEPLOY_H

#include "daemon.h"

/* deploy.c - deploy regressions (version_regression): each CPU window
 * folded into its (worker, version) aggregate on the writer's store stage,
 * a new version judged against the one before it there, and on the loop
 * the verdict kept, the later windows of a flagged version pinned and
 * labelled, and the extra windows a new version takes to be judged. */

/* What the writer does with one CPU window for it: copied into the job at
 * submit, so the store stage never reads the config (a reload replaces
 * it on the loop). */
struct deploy_job {
    int fold; /* fold the window into its pair's aggregate (and judge the pair) */
    struct regress_params p;
    uint32_t keep;    /* anomaly.regression.max_versions */
    uint32_t max_fns; /* anomaly.regression.max_functions */
};

/* What changed in the store for a pair. */
enum deploy_verdict {
    DEPLOY_NONE,    /* nothing recorded now */
    DEPLOY_FLAGGED, /* a version_regression recorded (or flagged again after a clear) */
    DEPLOY_UPDATED, /* the one standing, updated with the latest comparison */
    DEPLOY_CLEARED, /* the one standing, overturned by more samples */
};

/* What the store stage found for a pair (deploy_store), for the loop. */
struct deploy_result {
    int valid;                         /* a pair was folded */
    int err;                           /* a step failed (what names it) */
    const char *what;                  /* static */
    uint64_t busy, base_busy;          /* non-idle samples of the version and its baseline */
    uint64_t windows;                  /* the version's windows in its aggregate (0: not kept) */
    char base[STORE_VERSION_MAX + 1];  /* the baseline version; "": none (its first) */
    uint64_t agg_bytes;                /* what its aggregate takes in the store */
    uint32_t dropped;                  /* the worker's aggregates the bound dropped */
    int judged;                        /* compared (both had min_samples) */
    size_t regressions, grown, shrunk; /* the comparison's */
    uint64_t compare_ns;               /* how long it took */
    uint64_t anomaly;                  /* the pair's version_regression (0: none) */
    int flagged;                       /* ... standing now (not cleared) */
    enum deploy_verdict verdict;
    size_t pinned; /* windows pinned to it now */
    char top[128]; /* the regression that grew most, for the log */
    double top_before, top_after;
};

/* One pair's windows of a store batch (writer.c groups them). */
struct deploy_fold {
    const char *worker, *version; /* borrowed */
    struct deploy_job job;
    struct regress_agg *agg;    /* the windows' own aggregate, merged; consumed */
    uint64_t first_ns, last_ns; /* the first window's start, the last one's end (wall) */
    uint64_t windows;
    struct deploy_result *out;
};

/* Store stage (thread pool, one at a time): fold f into the pair's
 * aggregate, judge the pair and record its verdict; f->out says what
 * happened. Never fails as a call: an error is in f->out. */
void deploy_store(struct store *s, struct deploy_fold *f);
struct writer_meta;
/* Loop: m (a CPU window of t about to be submitted) gets its deploy job,
 * and, when t's version is flagged, the anomaly label and pin. */
void deploy_meta(struct agent *a, const struct target *t, struct writer_meta *m);
/* Loop: what the store stage found for worker/version (r borrowed). */
void deploy_done(struct agent *a, const char *worker, const char *version,
                 const struct deploy_result *r);
/* After the loop ran dry: the pairs remembered. */
void deploy_free(struct agent *a);

#endif

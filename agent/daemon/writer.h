/*
 * writer.h - raw profile to pprof to the store, in order, off the loop (writer.c). Declared apart
 * from daemon.h, which holds the structs every module shares, so that a file includes what it
 * calls.
 */
#ifndef ISOPROF_AGENT_WRITER_H
#define ISOPROF_AGENT_WRITER_H

#include "daemon.h"
#include "deploy.h"

struct pprof_result;
struct od_req;
struct pprof_buf;

/* writer.c */
struct writer_meta {
    const char *worker, *version, *runtime;
    const char *thread;    /* "main", or a worker thread's label */
    uint32_t pid;          /* the isolate's process, 0: unknown (not a Pyroscope label) */
    const char *container; /* its container id, NULL or "": none */
    /* Where the target's source maps are read: root (NULL: "/") and the
     * source_maps directories (NULL: none); copied. */
    const char *root;
    const struct cfg_strlist *source_maps;
    /* The target's own tree, where its scripts may be read (resolve.h):
     * the root whole when one is configured for it, else the working
     * directory of pid and the directory of main_url (NULL: unknown);
     * copied. owner keys its CPU allowance (its endpoint); copied. */
    int root_is_tree;
    const char *main_url;
    const char *owner;
    uint32_t deno_pid;            /* a Deno isolate's process (resolve.h), 0: none */
    const struct cfg_map *labels; /* the target's labels (NULL: none); copied */
    int raw_nested;               /* the raw reply is a worker session's envelope (cdp.h) */
    uint32_t isolate;
    uint8_t type;
    uint32_t flags;
    uint64_t interval_ns; /* cpu: ns; heap: the sampling interval in bytes */
    uint8_t anomaly;      /* enum store_anomaly_kind */
    struct episode *pin;  /* borrowed; the writer takes its own reference */
    uint64_t time_ns;     /* heap and retained: when it was taken (wall); 0: now */
    struct od_req *od;    /* a reference the writer takes over on success; the
                             daemon answers it when the window ends (writer_hooks) */
    struct store_mem mem;
    struct deploy_job deploy; /* a CPU window: deploy_meta's (zero: not folded) */
};
/* A window job ended: stored (err 0; pprof holds the converted profile,
 * whose buffer the callee may take) or not (err, why). od is the writer's
 * reference to the request the window was for (NULL: none), handed to the
 * callee. */
struct writer_done {
    uint32_t isolate;
    uint8_t type;
    uint64_t start_ns; /* wall, of a stored window */
    int err;
    const char *why;
    struct od_req *od;
    struct pprof_buf *pprof;
};
struct writer_hooks {
    void (*window_done)(struct agent *a, const struct writer_done *d);
    /* Nothing queued or in the thread pool any more. */
    void (*idle)(struct agent *a);
    /* A heap snapshot's retained profile, on the thread pool: as
     * snapshot_retained, which agent_run gives here. */
    int (*retained)(struct store *s, const char *dir, uint64_t id, uint64_t time_ns,
                    struct pprof_result *out, char **why);
};
int writer_init(struct agent *a, const struct writer_hooks *hooks, struct writer **out);
/* Queue a raw CDP reply for conversion and storage. raw is transferred. */
int writer_submit(struct writer *w, char *raw, size_t len, const struct writer_meta *m);
/* Record episode e (new: op WRITER_EP_NEW; changed: WRITER_EP_UPDATE; new
 * and pinning the isolate's latest heap and CPU windows: WRITER_EP_OOM) in
 * the store, in order with the windows submitted before. The writer takes
 * a reference and a snapshot of e's fields. */
enum { WRITER_EP_NEW, WRITER_EP_UPDATE, WRITER_EP_OOM };
int writer_episode(struct writer *w, struct episode *e, int op);
/*
 * writer_call - run fn(store, arg) on the store stage, in order with the
 * windows and episodes submitted before it (the store's writes are
 * serialised there), then done(a, arg, 0, &raw) on the loop. done is
 * called with cancelled 1 instead, fn never run, when the writer is freed
 * or the agent stops while the store fails. m NULL, or the labels of a
 * retained window: when done returns the id of a snapshot window it
 * committed (and sets *raw to its size), that window's retained profile
 * is converted and stored as a window of m (pinned to m->pin, at
 * m->time_ns). 0 or -ENOMEM.
 */
int writer_call(struct writer *w, const struct writer_meta *m,
                void (*fn)(struct store *s, void *arg),
                uint64_t (*done)(struct agent *a, void *arg, int cancelled, uint64_t *raw_size),
                void *arg);
/* Nonzero while jobs are queued or in the thread pool. */
int writer_busy(const struct writer *w);
/* A target's labels m (NULL: none) copied as the store keeps them, into
 * *out and *n: 0, or -ENOMEM with what was copied in *out and *n (free it
 * with writer_labels_free either way). */
int writer_labels_dup(const struct cfg_map *m, struct store_label **out, size_t *n);
void writer_labels_free(struct store_label *l, size_t n);
/* The agent is stopping: a write waiting out a backoff is tried now, once;
 * if the store fails it again, what is queued is dropped and counted. */
void writer_stopping(struct writer *w);
void writer_free(struct writer *w);

#endif

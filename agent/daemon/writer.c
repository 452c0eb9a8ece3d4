/*
 * writer.c - raw CDP profile replies in, stored windows out.
 *
 * DESIGN: two stages, each at most one uv_work_t in the thread pool at a
 * time.
 *   convert: one job at a time parses the reply and builds the pprof
 *            (pprof_from_cpu_json); the raw text is freed in the worker as
 *            soon as it is converted, so peak memory is one raw reply plus
 *            its pprof.
 *   store:   every converted job waiting is written in one store_put (one
 *            short LMDB write transaction for the batch).
 * Both stages run off the loop thread; the loop only moves jobs between
 * queues. The bytes waiting for conversion are capped; past the cap a new
 * window is refused (and counted) rather than growing the daemon. A batch
 * the store refuses (disk full) stays queued and is retried with backoff;
 * converted windows are held up to store.pending_max bytes, past which the
 * oldest are dropped (windows_dropped), those pinned to an anomaly last.
 *
 * Episode records (anomalies) travel the same two queues as the windows,
 * skipping the conversion, so that the store sees everything in the order
 * it was submitted: an episode is recorded before the windows taken for it
 * (which are pinned to its id in their insert transaction), and an OOM
 * record that pins an isolate's latest windows comes after the windows
 * submitted before the death. A store job holds either windows or episode
 * records, never both. An episode record the store fails to write for a
 * cause that may pass (a full disk) is retried like windows, ahead of what
 * follows it; one it refuses (its episode's creation failed, a bad field)
 * is logged and dropped (its windows are still stored, unpinned).
 *
 * Store calls (writer_call: a heap snapshot's stream, snapshot.c) travel
 * the same way, one a job: the store's writes are serialised here, so a
 * stream's chunks interleave with the windows' batches but never run at
 * the same time. A call that names a snapshot it committed turns into that
 * snapshot's retained window, converted (heapsnap.h, on the conversion
 * stage) and stored like any other window.
 *
 * The writer answers to the daemon only, through struct writer_hooks: each
 * window's end (stored or not, with the on-demand request it was for) and
 * the moment it has nothing left to do.
 */
#include "writer.h"
#include "daemon.h"
#include "deploy.h"
#include "log.h"
#include "pprof.h"
#include "target.h"
#include "uplink.h"

#include "base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#define WRITER_MAX_BATCH 64
#define WRITER_RETRY_MIN_MS 500
#define WRITER_RETRY_MAX_MS 30000
/* Windows dropped past store.pending_max: said at most this often. */
#define WRITER_DROP_LOG_NS (10ull * 1000000000ull)

/* A job's op beside WRITER_EP_*: a store call (writer_call). */
#define WRITER_CALL 16

struct writer_job {
    struct writer_job *next;
    int op; /* -1: a window; WRITER_EP_* with ep and anomaly set; WRITER_CALL */
    /* WRITER_CALL: the call and its answer */
    void (*call_fn)(struct store *s, void *arg);
    uint64_t (*call_done)(struct agent *a, void *arg, int cancelled, uint64_t *raw_size);
    void *call_arg;
    int call_window;            /* the meta of a retained window came with it */
    uint64_t snap_id, snap_raw; /* a retained window: its snapshot and the snapshot's size */
    struct episode *ep;         /* a reference: the window's pin, or the episode to record */
    struct od_req *od;          /* a reference: the on-demand request to answer */
    struct store_anomaly an;    /* WRITER_EP_*: the snapshot to store (strings: ep's) */
    uint8_t anomaly;
    struct store_mem mem;
    uint64_t time_ns; /* heap and retained: wall clock of the snapshot */
    char *raw;
    size_t raw_len;
    int raw_nested; /* raw is a worker session's envelope (cdp_unwrap_worker) */
    char *worker, *version, *runtime, *thread;
    uint32_t pid;
    char container[PROCSCAN_CONTAINER_LEN + 1];
    /* where its source maps are read (srcmap_where points into these) */
    char *root;
    char **dirs;
    char *main_url, *owner;
    struct srcmap_where where;
    struct srcmap_session *sms; /* the conversion's; freed once its events are logged */
    struct store_label *labels; /* the target's labels, strings owned */
    size_t nlabels;
    uint32_t isolate;
    uint8_t type;
    uint32_t flags;
    uint64_t interval_ns;
    int64_t wall_minus_mono_ns;
    /* filled by the convert stage */
    int err;
    char *why;
    struct pprof_result res;
    /* filled by the store stage */
    uint64_t id;
    uint64_t stored_size;
    uint8_t in_put; /* a converted window: its pprof is counted in put_bytes */
    /* deploy regressions (deploy.c): what to do, the window's own
     * aggregate (conversion stage), what the store stage found */
    struct deploy_job deploy;
    struct regress_agg *agg;
    struct deploy_result dres;
};

/* A FIFO of jobs, linked through next. */
struct job_queue {
    struct writer_job *head, *tail;
};

static void jq_push(struct job_queue *q, struct writer_job *j)
{
    j->next = NULL;
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
}

/* Put the chain first..last (linked) back at the head of q, in order. */
static void jq_push_front(struct job_queue *q, struct writer_job *first, struct writer_job *last)
{
    last->next = q->head;
    if (q->head == NULL)
        q->tail = last;
    q->head = first;
}

/* Take the chain from the head to last (a job of q) off q; NULL-terminated. */
static struct writer_job *jq_cut(struct job_queue *q, struct writer_job *last)
{
    struct writer_job *first = q->head;
    q->head = last->next;
    if (q->head == NULL)
        q->tail = NULL;
    last->next = NULL;
    return first;
}

struct writer {
    struct agent *a;
    const struct writer_hooks *hooks;
    struct job_queue conv; /* waiting for conversion */
    struct job_queue put;  /* converted, waiting for the store */
    uint64_t pending_bytes;
    uint64_t put_bytes; /* pprof bytes of the converted windows not yet stored */
    int converting, storing;
    uv_work_t conv_req;
    struct writer_job *conv_job;
    uv_work_t put_req;
    struct writer_job *put_batch;
    int put_err;
    struct writer_job *put_failed; /* episode records: the first the store failed to write */
    uint64_t drops_unlogged;       /* windows put_trim dropped since it last said so */
    uint64_t drops_logged_ns;      /* when it last said so (monotonic) */
    struct store_put_stats put_stats;
    uv_timer_t retry;
    uint64_t retry_ms;
    int retry_armed;
    size_t solo_left; /* after a permanent error: store this many one by one */
    int orphans_said; /* a window's orphan samples have been warned of once */
};

/* Errors a retry cannot cure: the record itself is unacceptable. */
static int put_error_is_permanent(int err)
{
    return err == -EINVAL || err == -E2BIG || err == -ENAMETOOLONG;
}

/* An episode record's error that a later try may not meet (a full disk). */
static int episode_error_may_pass(int err)
{
    return err != 0 && err != ISOPROF_ENOTFOUND && !put_error_is_permanent(err);
}

static void writer_kick(struct writer *w);
static void writer_maybe_idle(struct writer *w);

/* What a job is for the store stage: 0 a window, 1 an episode record, 2 a
 * store call. A batch holds one kind. */
static int job_kind(const struct writer_job *j)
{
    return j->op < 0 ? 0 : j->op == WRITER_CALL ? 2 : 1;
}

/* A store call that will not run (shutdown, a store failing at exit): its
 * owner is told, so that it lets go of what the call held. */
static void call_cancel(struct writer *w, struct writer_job *j)
{
    uint64_t raw = 0;
    if (j->op == WRITER_CALL && j->call_done) {
        j->call_done(w->a, j->call_arg, 1, &raw);
        j->call_done = NULL;
    }
}

/* A window job ends: tell the daemon (stored: err 0 and the profile). */
static void job_done(struct writer *w, struct writer_job *j, int err, const char *why)
{
    struct writer_done d = {
        .isolate = j->isolate,
        .type = j->type,
        .start_ns = j->res.start_ns,
        .err = err,
        .why = why,
        .od = j->od,
        .pprof = err == 0 ? &j->res.pprof : NULL,
    };
    j->od = NULL;
    w->hooks->window_done(w->a, &d);
}

static void job_free(struct writer *w, struct writer_job *j)
{
    if (j->in_put) {
        ISOPROF_ASSERT(w->put_bytes >= j->res.pprof.len);
        w->put_bytes -= j->res.pprof.len;
    }
    if (j->od) /* not stored: say why */
        job_done(w, j, j->err ? j->err : -EIO,
                 j->why ? j->why : "the window could not be stored (see the daemon's log)");
    if (j->ep)
        episode_unref(j->ep);
    ws_msg_free(j->raw);
    isoprof_free(j->worker);
    isoprof_free(j->version);
    isoprof_free(j->runtime);
    isoprof_free(j->thread);
    isoprof_free(j->root);
    isoprof_free(j->main_url);
    isoprof_free(j->owner);
    writer_labels_free(j->labels, j->nlabels);
    for (size_t i = 0; j->dirs && i < j->where.ndirs; i++)
        isoprof_free(j->dirs[i]);
    isoprof_free(j->dirs);
    srcmap_session_free(j->sms);
    isoprof_free(j->why);
    pprof_buf_free(&j->res.pprof);
    regress_agg_free(j->agg);
    isoprof_free(j);
}

int writer_init(struct agent *a, const struct writer_hooks *hooks, struct writer **out)
{
    struct writer *w = isoprof_calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    w->a = a;
    w->hooks = hooks;
    uv_timer_init(a->loop, &w->retry);
    *out = w;
    return 0;
}

static void retry_on_close(uv_handle_t *h)
{
    struct writer *w = container_of((uv_timer_t *)h, struct writer, retry);
    isoprof_free(w);
}

void writer_free(struct writer *w)
{
    struct writer_job *lists[2] = {w->conv.head, w->put.head};
    for (int i = 0; i < 2; i++) {
        for (struct writer_job *j = lists[i], *n; j; j = n) {
            n = j->next;
            call_cancel(w, j);
            job_free(w, j);
        }
    }
    uv_close((uv_handle_t *)&w->retry, retry_on_close);
}

void writer_stopping(struct writer *w)
{
    if (!w->retry_armed)
        return;
    uv_timer_stop(&w->retry);
    w->retry_armed = 0;
    writer_kick(w);
}

int writer_busy(const struct writer *w)
{
    return w->converting || w->storing || w->conv.head || w->put.head;
}

static void conv_append(struct writer *w, struct writer_job *j)
{
    jq_push(&w->conv, j);
    writer_kick(w);
}

int writer_labels_dup(const struct cfg_map *m, struct store_label **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (m == NULL || m->n == 0)
        return 0;
    if ((*out = isoprof_calloc(m->n, sizeof(**out))) == NULL)
        return -ENOMEM;
    int nomem = 0;
    for (size_t i = 0; i < m->n; i++, (*n)++) {
        (*out)[i].name = isoprof_strdup(m->items[i].key);
        (*out)[i].value = isoprof_strdup(m->items[i].value);
        nomem |= (*out)[i].name == NULL || (*out)[i].value == NULL;
    }
    return nomem ? -ENOMEM : 0;
}

void writer_labels_free(struct store_label *l, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        isoprof_free((char *)l[i].name);
        isoprof_free((char *)l[i].value);
    }
    isoprof_free(l);
}

/* A window job of m's labels (copied), or NULL on ENOMEM. */
static struct writer_job *job_new(struct writer *w, const struct writer_meta *m)
{
    struct writer_job *j = isoprof_calloc(1, sizeof(*j));
    if (j == NULL)
        return NULL;
    j->worker = isoprof_strdup(m->worker);
    j->version = isoprof_strdup(m->version);
    j->runtime = isoprof_strdup(m->runtime);
    j->thread = isoprof_strdup(m->thread ? m->thread : "main");
    j->raw_nested = m->raw_nested;
    j->pid = m->pid;
    snprintf(j->container, sizeof(j->container), "%s", m->container ? m->container : "");
    int nomem = 0;
    if (m->root != NULL && m->root[0] != '\0')
        nomem |= (j->root = isoprof_strdup(m->root)) == NULL;
    if (m->source_maps != NULL && m->source_maps->n > 0) {
        if ((j->dirs = isoprof_calloc(m->source_maps->n, sizeof(char *))) == NULL)
            nomem = 1;
        for (size_t i = 0; j->dirs && i < m->source_maps->n; i++, j->where.ndirs++)
            nomem |= (j->dirs[i] = isoprof_strdup(m->source_maps->v[i])) == NULL;
    }
    if (m->main_url != NULL)
        nomem |= (j->main_url = isoprof_strdup(m->main_url)) == NULL;
    if (m->owner != NULL)
        nomem |= (j->owner = isoprof_strdup(m->owner)) == NULL;
    /* A root configured for the target holds its files only: all of it
     * is its tree. */
    static const char *const whole[] = {"/"};
    if (m->root_is_tree) {
        j->where.trees = whole;
        j->where.ntrees = 1;
    }
    j->where.cwd_pid = m->pid;
    j->where.main_url = j->main_url;
    j->where.owner = j->owner;
    j->where.root = j->root;
    j->where.deno_pid = m->deno_pid;
    nomem |= writer_labels_dup(m->labels, &j->labels, &j->nlabels) != 0;
    j->where.dirs = (const char *const *)j->dirs;
    if (nomem || !j->worker || !j->version || !j->runtime || !j->thread) {
        job_free(w, j);
        return NULL;
    }
    j->op = -1;
    j->isolate = m->isolate;
    j->type = m->type;
    j->flags = m->flags;
    j->interval_ns = m->interval_ns;
    j->anomaly = m->anomaly;
    j->mem = m->mem;
    j->deploy = m->deploy;
    j->ep = m->pin ? episode_ref(m->pin) : NULL;
    j->time_ns = m->time_ns ? m->time_ns : isoprof_now_wall_ns();
    /* Sampled now, on the host whose CLOCK_MONOTONIC V8 used. */
    j->wall_minus_mono_ns = (int64_t)(isoprof_now_wall_ns() - isoprof_now_mono_ns());
    return j;
}

int writer_submit(struct writer *w, char *raw, size_t len, const struct writer_meta *m)
{
    /* Raw replies are charged to the message budget until freed, which
     * bounds the queue too; this cap only keeps the two in step. */
    if (w->pending_bytes + len > AGENT_MSG_BUDGET) {
        ws_msg_free(raw);
        return -ENOBUFS;
    }
    struct writer_job *j = job_new(w, m);
    if (j == NULL) {
        ws_msg_free(raw);
        return -ENOMEM;
    }
    j->raw = raw;
    j->raw_len = len;
    j->od = m->od; /* the caller's reference, now the job's */
    w->pending_bytes += len;
    conv_append(w, j);
    return 0;
}

int writer_call(struct writer *w, const struct writer_meta *m,
                void (*fn)(struct store *s, void *arg),
                uint64_t (*done)(struct agent *a, void *arg, int cancelled, uint64_t *raw_size),
                void *arg)
{
    struct writer_job *j = m ? job_new(w, m) : isoprof_calloc(1, sizeof(*j));
    if (j == NULL)
        return -ENOMEM;
    j->op = WRITER_CALL;
    j->od = m ? m->od : NULL; /* the caller's reference, answered by the retained window */
    j->call_fn = fn;
    j->call_done = done;
    j->call_arg = arg;
    j->call_window = m != NULL;
    conv_append(w, j);
    return 0;
}

int writer_episode(struct writer *w, struct episode *e, int op)
{
    struct writer_job *j = isoprof_calloc(1, sizeof(*j));
    if (j == NULL)
        return -ENOMEM;
    j->op = op;
    j->ep = episode_ref(e);
    j->an = (struct store_anomaly){
        .kind = e->kind,
        .worker = e->worker,
        .version = e->version,
        .thread = e->thread,
        .isolate = e->isolate,
        .start_ns = e->start_ns,
        .end_ns = e->end_ns,
        .value = e->value,
        .threshold = e->threshold,
        .limit = e->limit,
        .limit_source = e->limit_source,
        .flags = e->open ? STORE_ANOMALY_OPEN : 0,
    };
    conv_append(w, j);
    return 0;
}

/* --- convert stage (thread pool) --- */

/* pprof's mapper over the job's source-map session. */
static int conv_map(void *arg, const char *url, size_t url_len, int32_t line, int32_t column,
                    struct pprof_mapped *out)
{
    struct srcmap_pos pos;
    int r = srcmap_session_frame(arg, url, url_len, line, column, &pos);
    if (r != SRCMAP_FRAME_MAPPED)
        return r == SRCMAP_FRAME_UNMAPPED ? 0 : -1;
    out->name = pos.name;
    out->file = pos.source;
    out->line = (int64_t)pos.line + 1;
    out->column = (int64_t)pos.column + 1;
    return 1;
}

/* The window's own aggregate, for its version's (deploy.c): from the
 * pprof as it will be stored (names and files after source maps). A
 * window that cannot be folded is stored all the same, and said. */
static void fold_window(struct writer_job *j)
{
    char *why = NULL;
    int rc = regress_agg_new(j->deploy.max_fns, &j->agg);
    if (rc == 0)
        rc = regress_agg_add_pprof(j->agg, j->res.pprof.data, j->res.pprof.len, &why);
    if (rc == 0)
        rc = regress_agg_end_window(j->agg); /* one window: its share's spread is judged */
    isoprof_free(why);
    if (rc != 0) {
        regress_agg_free(j->agg);
        j->agg = NULL;
        j->dres.valid = 1;
        j->dres.err = rc;
        j->dres.what = "the window could not be folded into its version's aggregate";
    }
}

static void conv_on_work(uv_work_t *req)
{
    struct writer *w = container_of(req, struct writer, conv_req);
    struct writer_job *j = w->conv_job;
    const char *text = j->raw;
    size_t len = j->raw_len;
    char *inner = NULL;
    if (j->raw_nested) {
        /* A worker thread's reply is a string in its envelope: out of it
         * first (the envelope freed at once, so the two are held together
         * only while copying). */
        j->err = cdp_unwrap_worker(j->raw, j->raw_len, &inner, &len);
        ws_msg_free(j->raw);
        j->raw = NULL;
        if (j->err != 0) {
            j->why = isoprof_strdup("a worker thread's reply whose envelope does not parse");
            return;
        }
        text = inner;
    }
    /* Without a session (no memory for one) frames stay as V8 named them. */
    struct pprof_mapper mapper = {conv_map, NULL};
    if (srcmap_session_new(w->a->srcmaps, &j->where, &j->sms) == 0)
        mapper.arg = j->sms;
    const struct pprof_mapper *mp = mapper.arg ? &mapper : NULL;
    if (j->type == STORE_TYPE_RETAINED) {
        j->err = w->hooks->retained(w->a->store, w->a->cfg_boot->store.path, j->snap_id, j->time_ns,
                                    &j->res, &j->why);
    } else if (j->type == STORE_TYPE_HEAP) {
        struct pprof_heap_opts ho = {
            .time_ns = j->time_ns, .interval_bytes = j->interval_ns, .mapper = mp};
        j->err = pprof_from_heap_json(text, len, &ho, &j->res, &j->why);
    } else {
        struct pprof_cpu_opts o = {
            .wall_minus_mono_ns = j->wall_minus_mono_ns,
            .interval_ns = j->interval_ns,
            .mapper = mp,
        };
        j->err = pprof_from_cpu_json(text, len, &o, &j->res, &j->why);
        if (j->err == 0 && j->deploy.fold)
            fold_window(j);
    }
    isoprof_free(inner);
    ws_msg_free(j->raw);
    j->raw = NULL;
}

/* The oldest window of the put queue that the store is not writing, but
 * never its newest; unpinned ones first. Sets *prev to the one before it. */
static struct writer_job *put_oldest(struct writer *w, int pinned_too, struct writer_job **prev)
{
    struct writer_job *p = NULL;
    for (struct writer_job *j = w->put.head; j && j != w->put.tail; p = j, j = j->next) {
        if (j->op < 0 && (pinned_too || j->ep == NULL)) {
            *prev = p;
            return j;
        }
    }
    return NULL;
}

/* Past store.pending_max (the store has been failing): drop the oldest
 * windows, counted, so that a store that cannot write never grows the
 * daemon. */
static void put_trim(struct writer *w)
{
    struct agent *a = w->a;
    while (w->put_bytes > a->cfg_boot->store.pending_max) {
        struct writer_job *prev = NULL, *j = put_oldest(w, 0, &prev);
        if (j == NULL && (j = put_oldest(w, 1, &prev)) == NULL)
            return;
        if (prev != NULL)
            prev->next = j->next;
        else
            w->put.head = j->next;
        if (w->put.tail == j)
            w->put.tail = prev;
        a->n.windows_dropped++;
        w->drops_unlogged++;
        uint64_t now = isoprof_now_mono_ns();
        if (w->drops_logged_ns == 0 || now - w->drops_logged_ns >= WRITER_DROP_LOG_NS) {
            log_warn("windows dropped: the store cannot take them",
                     "count=%U last_worker=%s last_thread=%s pinned=%d held_bytes=%U "
                     "store.pending_max=%U",
                     w->drops_unlogged, j->worker, j->thread, j->ep != NULL, w->put_bytes,
                     a->cfg_boot->store.pending_max);
            w->drops_unlogged = 0;
            w->drops_logged_ns = now;
        }
        j->err = w->put_err != 0 ? w->put_err : -ENOSPC;
        if (j->why == NULL)
            j->why = isoprof_strdup(
                "the store could not take it in time: dropped (see the daemon's log)");
        job_free(w, j);
    }
}

static void conv_on_done(uv_work_t *req, int status)
{
    struct writer *w = container_of(req, struct writer, conv_req);
    struct writer_job *j = w->conv_job;
    struct agent *a = w->a;
    (void)status;
    w->converting = 0;
    w->conv_job = NULL;
    ISOPROF_ASSERT(w->pending_bytes >= j->raw_len);
    w->pending_bytes -= j->raw_len;
    /* Each map refused is said once (the cache remembers it), here on the
     * loop where the log lives; then the session lets its maps go. */
    const struct srcmap_event *ev;
    size_t nev = j->sms ? srcmap_session_events(j->sms, &ev) : 0;
    for (size_t i = 0; i < nev; i++)
        log_warn("source map not used: frames stay as V8 named them",
                 "reason=%s map=%s script=%s worker=%s why=%s", srcmap_reason(ev[i].reason),
                 ev[i].path, ev[i].script, j->worker, ev[i].why);
    srcmap_session_free(j->sms);
    j->sms = NULL;
    if (j->err != 0) {
        a->n.conversion_errors++;
        if (j->type == STORE_TYPE_RETAINED)
            a->n.snapshots[SNAP_RETAINED_FAILED]++;
        log_error("conversion failed", "worker=%s isolate=%u type=%s bytes=%U err=%e why=%s",
                  j->worker, j->isolate, store_type_name(j->type),
                  j->type == STORE_TYPE_RETAINED ? j->snap_raw : (uint64_t)j->raw_len, j->err,
                  j->why ? j->why : "");
        job_free(w, j);
    } else {
        j->in_put = 1;
        w->put_bytes += j->res.pprof.len;
        jq_push(&w->put, j);
        put_trim(w);
    }
    writer_kick(w);
    writer_maybe_idle(w);
}

/* --- store stage (thread pool) --- */

/* The windows of a committed batch into their versions' aggregates
 * (deploy.c), one deploy_store a pair: the first job of each pair takes
 * the others' aggregates and carries the result to the loop. */
static void put_fold(struct store *s, struct writer_job *batch)
{
    for (struct writer_job *j = batch; j; j = j->next) {
        if (j->agg == NULL)
            continue;
        struct deploy_fold f = {.worker = j->worker,
                                .version = j->version,
                                .job = j->deploy,
                                .agg = j->agg,
                                .first_ns = j->res.start_ns,
                                .last_ns = j->res.end_ns,
                                .windows = 1,
                                .out = &j->dres};
        j->agg = NULL;
        int err = 0;
        for (struct writer_job *k = j->next; k; k = k->next) {
            if (k->agg == NULL || strcmp(k->worker, j->worker) != 0 ||
                strcmp(k->version, j->version) != 0)
                continue;
            if (err == 0)
                err = regress_agg_merge(f.agg, k->agg);
            if (k->res.start_ns < f.first_ns)
                f.first_ns = k->res.start_ns;
            if (k->res.end_ns > f.last_ns)
                f.last_ns = k->res.end_ns;
            f.windows++;
            f.job = k->deploy; /* the latest window's parameters */
            regress_agg_free(k->agg);
            k->agg = NULL;
        }
        if (err != 0) {
            regress_agg_free(f.agg);
            j->dres = (struct deploy_result){
                .valid = 1, .err = err, .what = "the batch's windows could not be merged"};
            continue;
        }
        deploy_store(s, &f);
    }
}

static void put_on_work(uv_work_t *req)
{
    struct writer *w = container_of(req, struct writer, put_req);
    w->put_err = 0;
    w->put_failed = NULL;
    if (w->put_batch->op == WRITER_CALL) {
        w->put_batch->call_fn(w->a->store, w->put_batch->call_arg);
        return;
    }
    if (w->put_batch->op >= 0) {
        /* Episode records, one transaction each, in order; the first that
         * fails for a cause that may pass stops the rest (retried later,
         * in order). */
        for (struct writer_job *j = w->put_batch; j; j = j->next) {
            j->an.id = j->op == WRITER_EP_UPDATE ? j->ep->id : 0;
            if (j->op == WRITER_EP_UPDATE && j->an.id == 0) {
                j->err = ISOPROF_ENOTFOUND; /* its creation failed */
                continue;
            }
            unsigned latest = j->op == WRITER_EP_OOM
                                  ? (1u << STORE_TYPE_CPU) | (1u << STORE_TYPE_HEAP) |
                                        (1u << STORE_TYPE_RETAINED) | (1u << STORE_TYPE_SNAPSHOT)
                                  : 0;
            j->err = store_anomaly_put(w->a->store, &j->an, latest);
            if (episode_error_may_pass(j->err)) {
                w->put_err = j->err;
                w->put_failed = j;
                return;
            }
            if (j->err == 0 && j->op != WRITER_EP_UPDATE)
                j->ep->id = j->an.id;
        }
        return;
    }
    struct store_record recs[WRITER_MAX_BATCH];
    size_t n = 0;
    for (struct writer_job *j = w->put_batch; j && n < WRITER_MAX_BATCH; j = j->next, n++) {
        struct store_record *r = &recs[n];
        memset(r, 0, sizeof(*r));
        r->w.worker = j->worker;
        r->w.version = j->version;
        r->w.runtime = j->runtime;
        r->w.thread = j->thread;
        r->w.pid = j->pid;
        r->w.container = j->container;
        r->w.labels = j->labels;
        r->w.nlabels = j->nlabels;
        r->w.frames_mapped = j->res.mapped > UINT32_MAX ? UINT32_MAX : (uint32_t)j->res.mapped;
        r->w.frames_unmapped =
            j->res.unmapped > UINT32_MAX ? UINT32_MAX : (uint32_t)j->res.unmapped;
        r->w.start_ns = j->res.start_ns;
        r->w.end_ns = j->res.end_ns;
        r->w.isolate = j->isolate;
        r->w.type = j->type;
        r->w.flags = j->flags;
        r->w.samples = j->res.samples;
        r->w.interval = j->interval_ns;
        r->w.anomaly = j->anomaly;
        r->w.mem = j->mem;
        r->pin = j->ep ? j->ep->id : 0;
        r->pprof = j->res.pprof.data;
        r->len = j->res.pprof.len;
    }
    memset(&w->put_stats, 0, sizeof(w->put_stats));
    w->put_err = store_put(w->a->store, recs, n, &w->put_stats);
    if (w->put_err == 0) {
        n = 0;
        for (struct writer_job *j = w->put_batch; j; j = j->next, n++) {
            j->id = recs[n].w.id;
            j->stored_size = recs[n].w.stored_size;
        }
        put_fold(w->a->store, w->put_batch);
    }
}

static void retry_on_timer(uv_timer_t *t)
{
    struct writer *w = container_of(t, struct writer, retry);
    w->retry_armed = 0;
    writer_kick(w);
}

/* Nothing queued or in the pool: say so. */
static void writer_maybe_idle(struct writer *w)
{
    if (!writer_busy(w) && w->hooks->idle)
        w->hooks->idle(w->a);
}

/* Bytes an unprivileged writer may still use on the store's filesystem (a
 * full disk shows as EIO as often as ENOSPC: LMDB reports a short write so),
 * or -1 if unknown. */
static int64_t store_fs_free(const struct agent *a)
{
    struct statvfs sv;
    if (statvfs(a->cfg_boot->store.path, &sv) != 0)
        return -1;
    return (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
}

/* The store failed to write first..last (w->put_err): back at the head of
 * the queue, in order, tried again after a backoff (at once, one by one,
 * for a record it refuses); at shutdown, dropped and counted. */
static void put_retry_later(struct writer *w, struct writer_job *first, struct writer_job *last)
{
    struct agent *a = w->a;
    a->n.store_errors++;
    jq_push_front(&w->put, first, last);
    if (put_error_is_permanent(w->put_err)) {
        log_error("store write failed, will retry", "err=%e retry_ms=0", w->put_err);
        writer_kick(w); /* one by one, at once: no backoff for a bad record */
    } else if (a->stopping) {
        /* No retry at shutdown: say what is lost. */
        log_error("store write failed at shutdown", "err=%e fs_free=%I", w->put_err,
                  store_fs_free(a));
        for (struct writer_job *j = w->put.head, *n; j; j = n) {
            n = j->next;
            if (j->op == WRITER_CALL) {
                call_cancel(w, j);
            } else if (j->op < 0) {
                a->n.windows_dropped++;
            } else {
                a->n.anomaly_errors++;
                log_error("anomaly not recorded", "kind=%s worker=%s isolate=%u err=%e",
                          store_anomaly_name(j->an.kind), j->an.worker, j->an.isolate, w->put_err);
            }
            job_free(w, j);
        }
        w->put.head = w->put.tail = NULL;
    } else {
        w->retry_ms = w->retry_ms ? w->retry_ms * 2 : WRITER_RETRY_MIN_MS;
        if (w->retry_ms > WRITER_RETRY_MAX_MS)
            w->retry_ms = WRITER_RETRY_MAX_MS;
        log_error("store write failed, will retry", "err=%e retry_ms=%U fs_free=%I", w->put_err,
                  w->retry_ms, store_fs_free(a));
        w->retry_armed = 1;
        uv_timer_start(&w->retry, retry_on_timer, w->retry_ms, 0);
    }
    writer_maybe_idle(w);
}

/* A write went through: if writes were failing, say that they no longer
 * are, and how many windows were dropped meanwhile. */
static void store_recovered(struct writer *w)
{
    if (w->retry_ms == 0)
        return;
    w->retry_ms = 0;
    log_info("store written again", "windows_dropped=%U", w->drops_unlogged);
    w->drops_unlogged = 0;
    w->drops_logged_ns = 0;
}

static void put_on_done(uv_work_t *req, int status)
{
    struct writer *w = container_of(req, struct writer, put_req);
    struct agent *a = w->a;
    (void)status;
    w->storing = 0;
    struct writer_job *batch = w->put_batch;
    w->put_batch = NULL;
    if (batch->op == WRITER_CALL) {
        uint64_t raw = 0;
        uint64_t id = batch->call_done(a, batch->call_arg, 0, &raw);
        batch->call_done = NULL;
        if (id != 0 && batch->call_window) {
            /* A snapshot committed: its retained profile is made next. */
            batch->op = -1;
            batch->type = STORE_TYPE_RETAINED;
            batch->snap_id = id;
            batch->snap_raw = raw;
            jq_push(&w->conv, batch);
        } else {
            job_free(w, batch);
        }
        writer_kick(w);
        writer_maybe_idle(w);
        return;
    }
    if (batch->op >= 0) {
        for (struct writer_job *j = batch, *n; j; j = n) {
            n = j->next;
            if (j == w->put_failed) {
                /* this one and the rest, unwritten: again, later */
                struct writer_job *last = j;
                while (last->next)
                    last = last->next;
                for (struct writer_job *k = j; k; k = k->next)
                    k->err = 0;
                put_retry_later(w, j, last);
                return;
            }
            if (j->err != 0) {
                a->n.anomaly_errors++;
                log_error("anomaly not recorded", "kind=%s worker=%s isolate=%u err=%e",
                          store_anomaly_name(j->an.kind), j->an.worker, j->an.isolate, j->err);
            } else if (j->op != WRITER_EP_UPDATE) {
                log_info("anomaly recorded", "kind=%s worker=%s version=%s isolate=%u anomaly=%U",
                         store_anomaly_name(j->an.kind), j->an.worker, j->an.version, j->an.isolate,
                         j->an.id);
            }
            job_free(w, j);
        }
        store_recovered(w);
        writer_kick(w);
        writer_maybe_idle(w);
        return;
    }
    size_t nbatch = 0;
    for (struct writer_job *j = batch; j; j = j->next)
        nbatch++;
    if (w->solo_left > 0)
        w->solo_left--;
    if (w->put_err != 0 && put_error_is_permanent(w->put_err) && nbatch == 1) {
        a->n.store_errors++;
        a->n.windows_dropped++;
        log_error("window refused by the store", "worker=%s isolate=%u err=%e", batch->worker,
                  batch->isolate, w->put_err);
        job_free(w, batch);
        writer_kick(w);
        writer_maybe_idle(w);
        return;
    }
    if (w->put_err != 0 && put_error_is_permanent(w->put_err)) {
        /* One of the batch is bad: store them one by one to find it. */
        w->solo_left = nbatch;
        w->retry_armed = 0;
    }
    if (w->put_err != 0) {
        /* Keep the batch, in order, ahead of newer windows. */
        struct writer_job *last = batch;
        while (last->next)
            last = last->next;
        put_retry_later(w, batch, last);
        return;
    }
    store_recovered(w);
    uint64_t queued = 0; /* the uploader's production rate counts these */
    for (struct writer_job *j = batch; j; j = j->next)
        queued += j->res.pprof.len;
    agent_upload_notify(a, queued);
    if (w->put_stats.evicted) {
        a->n.windows_evicted += w->put_stats.evicted;
        log_info("windows evicted", "count=%U bytes=%U reason=store.max_size", w->put_stats.evicted,
                 w->put_stats.evicted_bytes);
    }
    for (struct writer_job *j = batch, *n; j; j = n) {
        n = j->next;
        char id[STORE_ID_LEN + 1];
        store_id_format(a->store, j->id, id);
        a->n.windows_stored++;
        if (j->type == STORE_TYPE_HEAP)
            a->n.windows_stored_heap++;
        else if (j->type == STORE_TYPE_RETAINED)
            a->n.windows_stored_retained++;
        else
            a->n.windows_stored_cpu++;
        log_info("window stored",
                 "worker=%s version=%s isolate=%u runtime=%s type=%s samples=%U bytes=%U id=%s "
                 "anomaly=%s truncated_frames=%U orphan_samples=%U",
                 j->worker, j->version, j->isolate, j->runtime, store_type_name(j->type),
                 j->res.samples, j->stored_size, id, store_anomaly_name(j->anomaly),
                 j->res.truncated, j->res.orphans);
        if (j->res.orphans && !w->orphans_said) {
            /* Once a daemon's life: each window's "window stored" line counts
             * them (orphan_samples=). */
            w->orphans_said = 1;
            log_warn("samples left out: they name no node of the profile's tree",
                     "worker=%s isolate=%u type=%s count=%U id=%s", j->worker, j->isolate,
                     store_type_name(j->type), j->res.orphans, id);
        }
        deploy_done(a, j->worker, j->version, &j->dres);
        job_done(w, j, 0, NULL);
        job_free(w, j);
    }
    writer_kick(w);
    writer_maybe_idle(w);
}

static void writer_kick(struct writer *w)
{
    uv_loop_t *loop = w->a->loop;
    /* Episode records and store calls at the head of the conversion
     * queue need no conversion: they move on at once, behind the windows
     * before them. */
    while (!w->converting && w->conv.head && w->conv.head->op >= 0)
        jq_push(&w->put, jq_cut(&w->conv, w->conv.head));
    if (!w->converting && w->conv.head) {
        struct writer_job *j = jq_cut(&w->conv, w->conv.head);
        w->conv_job = j;
        w->converting = 1;
        if (uv_queue_work(loop, &w->conv_req, conv_on_work, conv_on_done) != 0) {
            w->converting = 0;
            w->conv_job = NULL;
            w->pending_bytes -= j->raw_len;
            w->a->n.windows_dropped++;
            job_free(w, j);
        }
    }
    if (!w->storing && !w->retry_armed && w->put.head) {
        /* One kind per job: consecutive windows (up to the batch size, or
         * one while isolating a bad record), consecutive episodes, or one
         * store call. */
        struct writer_job *batch = w->put.head, *last = batch;
        int kind = job_kind(batch);
        size_t n = 1;
        size_t max = kind == 2 ? 1 : kind == 1 ? SIZE_MAX : w->solo_left > 0 ? 1 : WRITER_MAX_BATCH;
        while (last->next && n < max && job_kind(last->next) == kind) {
            last = last->next;
            n++;
        }
        jq_cut(&w->put, last);
        w->put_batch = batch;
        w->storing = 1;
        if (uv_queue_work(loop, &w->put_req, put_on_work, put_on_done) != 0) {
            w->storing = 0;
            w->put_batch = NULL;
            jq_push_front(&w->put, batch, last);
        }
    }
}

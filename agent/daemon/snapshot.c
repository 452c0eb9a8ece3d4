/*
 * snapshot.c - heap snapshots near the limit (anomaly.memory.snapshot) and
 * the retained profile made from each: what holds the memory.
 *
 * Once per memory_near_limit episode of an isolate, at a memory poll that
 * finds no window of it in flight, HeapProfiler.takeHeapSnapshot. V8 stops
 * the isolate while it builds the snapshot and writes it as
 * HeapProfiler.addHeapSnapshotChunk events (text of about 100 KiB each),
 * then answers the call. The chunks are gathered on the loop into pieces
 * of SNAP_PIECE bytes, each handed to the writer's store stage
 * (writer_call), which streams it through zstd into the store
 * (store_blob_write): the daemon holds at most SNAP_PENDING_MAX bytes of a
 * snapshot, whatever its size. The answer commits the window (type
 * snapshot, pinned to the episode, anomaly.memory.snapshot_keep of them per
 * worker/version); the writer then reads it back on its conversion stage
 * and stores the retained profile (snapshot_retained) as a window of type
 * retained, pinned and uploaded like the others. While the snapshot is
 * taken, the isolate's scheduled windows wait (win_hold); its stall is
 * measured and charged to the pause budget like any call's.
 *
 * One snapshot at a time in the whole daemon (each costs its process 7 to
 * 9 times its used heap in RSS, and the store holds one stream): an
 * isolate whose turn
 * comes while another's is taken tries again at its next memory poll.
 * Skipped (counted and logged once per episode): the used heap over
 * anomaly.memory.snapshot_max_heap, or the host's MemAvailable under what
 * the snapshot will take (SNAP_MEM_FACTOR x the used heap + SNAP_MEM_SLACK). Discarded, with what
 * was streamed deleted (counted, logged): the session ended or the isolate went away, a chunk that
 * was not a string or was dropped for its size, the text past SNAP_RAW_MAX of the used heap (the
 * session is then dropped: an endless stream), the store failing or falling behind. Nothing else
 * the daemon holds is lost.
 */
#include "snapshot.h"
#include "daemon.h"
#include "deploy.h"
#include "heapsnap.h"
#include "log.h"
#include "ondemand.h"
#include "target.h"
#include "threads.h"
#include "writer.h"

#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The text gathered before it goes to the store stage. */
#define SNAP_PIECE ((size_t)1 << 20)
/* Text handed to the store stage and not yet written. V8 writes faster
 * than zstd and LMDB take it on two busy cores (45 MB in 0.8 s, measured):
 * past SNAP_PENDING_PAUSE the target's socket is not read until the store
 * stage is back under SNAP_PENDING_RESUME, so what waits stays in the
 * target's socket buffers, not here. Past SNAP_PENDING_MAX (which the
 * pause should make unreachable) the snapshot is discarded. */
#define SNAP_PENDING_PAUSE ((uint64_t)2 << 20)
#define SNAP_PENDING_RESUME ((uint64_t)512 << 10)
#define SNAP_PENDING_MAX ((uint64_t)32 << 20)
/* The most text a snapshot may be: this many times the used heap at its
 * start, plus SNAP_RAW_SLACK (V8 writes 1.3 to 1.6 bytes of text per byte
 * of live heap, measured at 16 to 128 MiB). */
#define SNAP_RAW_FACTOR 4
#define SNAP_RAW_SLACK ((uint64_t)64 << 20)
/* An endpoint whose snapshot went past that, or never answered, is not
 * asked for another for this long (its isolates would be stopped again
 * at every reattach). */
#define SNAP_HOLD_NS (3600ull * 1000000000ull)
/* The answer's timeout: SNAP_TIMEOUT_MIN_MS, plus a second per
 * SNAP_TIMEOUT_BYTES_PER_S of used heap (V8 writes 64 MiB in about 5 s),
 * at most SNAP_TIMEOUT_MAX_MS. */
#define SNAP_TIMEOUT_MIN_MS 60000u
#define SNAP_TIMEOUT_BYTES_PER_S ((uint64_t)2 << 20)
#define SNAP_TIMEOUT_MAX_MS 900000u
/* What a snapshot costs its process, for the MemAvailable rule: measured
 * (tests/bench/bench_snapshot.js, Node 20) as 7.3, 7.9 and 8.6 times the
 * used heap in extra RSS at 37, 67 and 129 MiB used (V8's snapshot
 * structures, the JSON writer, the inspector's messages), which the
 * process keeps after it (glibc does not give it back). */
#define SNAP_MEM_FACTOR 9
#define SNAP_MEM_SLACK ((uint64_t)64 << 20)

const char *snapshot_result_name(unsigned r)
{
    static const char *const names[SNAP_NRESULTS] = {
        "stored",    "skipped_max_heap", "skipped_mem_available", "skipped_held",
        "discarded", "failed",           "retained_failed"};
    return r < SNAP_NRESULTS ? names[r] : NULL;
}

/* One snapshot being taken, then written. Loop thread, but for blob and
 * the op fields the store stage fills, which the loop reads only in an
 * op's done (after the stage ran it). */
struct snap_run {
    struct agent *a;
    struct target *t;   /* until the answer came; NULL after */
    struct episode *ep; /* the pin (a reference); NULL on demand */
    struct od_req *od;  /* on demand: the request (a reference), until the commit takes it */
    int on_demand;      /* od was set (read by the store stage too) */
    unsigned ops;       /* store calls queued and not done */
    int answered;       /* the takeHeapSnapshot call ended */
    struct store_blob *blob;
    int store_err; /* the first store error (the store stage sets it) */
    /* the window, copied */
    char *worker, *version, *runtime, *thread, *container;
    struct store_label *labels;
    size_t nlabels;
    uint32_t pid, isolate;
    uint64_t used, start_wall_ns, sent_mono_ns, pause_ns;
    uint64_t raw, raw_max, pending; /* raw: bytes received (a big chunk's escaped) */
    uint64_t text;                  /* bytes of snapshot text stored so far */
    uint64_t dropped_big0;
    int paused;      /* the session's reads are paused (cdp_pause) */
    uint64_t pauses; /* how many times */
    char *piece;
    size_t piece_len;
    const char *discard; /* why it is being discarded (static); NULL: not */
};

/* WRITE: text gathered on the loop; WRITE_EVENT: a whole chunk event too
 * big to parse on the loop (a ws message), unescaped on the store stage. */
enum { SNAP_OP_BEGIN, SNAP_OP_WRITE, SNAP_OP_WRITE_EVENT, SNAP_OP_COMMIT, SNAP_OP_ABORT };

/* One store call of a run. */
struct snap_op {
    struct snap_run *run;
    int kind;
    char *data;
    size_t len;
    uint64_t end_ns;
    unsigned keep;
    int err;
    const char *why; /* a refusal that is not the store's (static) */
    uint64_t text;   /* WRITE_EVENT: the bytes of text it held */
    uint64_t id;
    struct store_put_stats st;
};

static void op_data_free(int kind, char *data)
{
    if (kind == SNAP_OP_WRITE_EVENT)
        ws_msg_free(data);
    else
        isoprof_free(data);
}

/* Pause or resume the reads of the session r's isolate is on. */
static void run_pause(struct snap_run *r, int on)
{
    if (r->paused == on || r->t == NULL)
        return;
    struct cdp_session *s = r->t->parent ? r->t->parent->cdp : r->t->cdp;
    if (s == NULL)
        return;
    r->paused = on;
    r->pauses += on;
    cdp_pause(s, on);
}

static void run_free(struct snap_run *r)
{
    ondemand_window_done(r->od, -EIO, NULL,
                         "the heap snapshot was not stored (see the daemon's log)");
    episode_unref(r->ep);
    isoprof_free(r->worker);
    isoprof_free(r->version);
    isoprof_free(r->runtime);
    isoprof_free(r->thread);
    isoprof_free(r->container);
    writer_labels_free(r->labels, r->nlabels);
    isoprof_free(r->piece);
    isoprof_free(r);
}

/* The run is over on the loop's side and its store calls are done: the
 * daemon may take the next snapshot. */
static void run_maybe_end(struct snap_run *r)
{
    if (!r->answered || r->ops > 0)
        return;
    if (r->a->snap == r)
        r->a->snap = NULL;
    run_free(r);
}

/* --- the store stage (thread pool, serialised by the writer) --- */

static void op_work(struct store *s, void *arg)
{
    struct snap_op *o = arg;
    struct snap_run *r = o->run;
    switch (o->kind) {
    case SNAP_OP_BEGIN: {
        struct store_window w = {
            .worker = r->worker,
            .version = r->version,
            .runtime = r->runtime,
            .thread = r->thread,
            .pid = r->pid,
            .container = r->container,
            .labels = r->labels,
            .nlabels = r->nlabels,
            .start_ns = r->start_wall_ns,
            .isolate = r->isolate,
            .type = STORE_TYPE_SNAPSHOT,
            .flags = r->on_demand ? STORE_FLAG_ON_DEMAND : 0,
            .anomaly = r->ep ? r->ep->kind : 0,
            .mem = {.min = r->used, .max = r->used, .last = r->used, .p999 = r->used},
        };
        o->err = store_blob_begin(s, &w, &r->blob);
        break;
    }
    case SNAP_OP_WRITE:
        if (r->blob != NULL && r->store_err == 0)
            o->err = store_blob_write(r->blob, o->data, o->len);
        isoprof_free(o->data);
        o->data = NULL;
        break;
    case SNAP_OP_WRITE_EVENT: {
        char *text = NULL;
        size_t n = 0;
        if (r->blob != NULL && r->store_err == 0) {
            int rc = cdp_param_string(o->data, o->len, "chunk", &text, &n);
            if (rc == ISOPROF_EJSON) {
                o->err = rc;
                o->why = "a chunk event whose params.chunk is not a JSON string";
            } else if (rc != 0) {
                o->err = rc;
            } else {
                o->err = store_blob_write(r->blob, text, n);
                o->text = n;
            }
        }
        isoprof_free(text);
        ws_msg_free(o->data);
        o->data = NULL;
        break;
    }
    case SNAP_OP_COMMIT:
        if (r->blob == NULL) {
            o->err = r->store_err ? r->store_err : -EIO;
            break;
        }
        o->err =
            store_blob_commit(r->blob, o->end_ns, r->ep ? r->ep->id : 0, o->keep, &o->id, &o->st);
        r->blob = NULL;
        break;
    case SNAP_OP_ABORT:
        store_blob_abort(r->blob);
        r->blob = NULL;
        break;
    }
    if (o->err != 0 && r->store_err == 0)
        r->store_err = o->err;
}

/* --- the loop --- */

static void run_discard(struct snap_run *r, const char *why);

static uint64_t op_done(struct agent *a, void *arg, int cancelled, uint64_t *raw_size)
{
    struct snap_op *o = arg;
    struct snap_run *r = o->run;
    uint64_t id = 0;
    op_data_free(o->kind, o->data);
    r->text += o->text;
    r->pending -= o->len;
    r->ops--;
    if (r->paused && r->pending <= SNAP_PENDING_RESUME)
        run_pause(r, 0);
    if (cancelled) {
        /* The store stage will not run it (the agent stops, the store
         * fails): what is open is freed with the store. */
        if (o->kind == SNAP_OP_COMMIT || o->kind == SNAP_OP_ABORT)
            a->n.snapshots[SNAP_DISCARDED]++;
    } else if (o->err != 0 && o->kind != SNAP_OP_COMMIT && !r->answered) {
        /* A write failed: what follows is dropped, the commit aborts. */
        run_discard(r, o->why ? o->why : "the store refused it");
    } else if (o->kind == SNAP_OP_COMMIT && o->err != 0) {
        a->n.snapshots[SNAP_DISCARDED]++;
        a->n.store_errors++;
        log_error("heap snapshot not stored", "worker=%s thread=%s isolate=%u bytes=%U err=%e",
                  r->worker, r->thread, r->isolate, r->text, o->err);
    } else if (o->kind == SNAP_OP_COMMIT) {
        char sid[STORE_ID_LEN + 1];
        store_id_format(a->store, o->id, sid);
        a->n.snapshots[SNAP_STORED]++;
        a->n.windows_stored++;
        a->n.windows_stored_snapshot++;
        log_info("heap snapshot stored",
                 "worker=%s version=%s thread=%s isolate=%u bytes=%U pause_ms=%U reads_paused=%U "
                 "id=%s anomaly=%U",
                 r->worker, r->version, r->thread, r->isolate, r->text, r->pause_ns / 1000000u,
                 r->pauses, sid, r->ep ? r->ep->id : 0);
        if (o->st.evicted) {
            a->n.windows_evicted += o->st.evicted;
            log_info("windows evicted", "count=%U bytes=%U reason=%s", o->st.evicted,
                     o->st.evicted_bytes, "store.max_size or anomaly.memory.snapshot_keep");
        }
        id = o->id;
        *raw_size = r->text;
    } else if (o->kind == SNAP_OP_ABORT) {
        log_debug("heap snapshot stream dropped", "worker=%s isolate=%u", r->worker, r->isolate);
    }
    isoprof_free(o);
    run_maybe_end(r);
    return id;
}

/* Queue a store call of r (data transferred). m: the retained window's
 * labels, with a commit. 0 or -ENOMEM (data freed). */
static int run_op(struct snap_run *r, int kind, char *data, size_t len, const struct writer_meta *m)
{
    struct snap_op *o = isoprof_calloc(1, sizeof(*o));
    if (o == NULL) {
        op_data_free(kind, data);
        return -ENOMEM;
    }
    *o = (struct snap_op){.run = r, .kind = kind, .data = data, .len = len};
    if (kind == SNAP_OP_COMMIT) {
        o->end_ns = isoprof_now_wall_ns();
        o->keep = r->a->cfg->anomaly.memory.snapshot_keep;
    }
    int rc = writer_call(r->a->writer, m, op_work, op_done, o);
    if (rc != 0) {
        op_data_free(kind, data);
        isoprof_free(o);
        return rc;
    }
    r->ops++;
    r->pending += len;
    return 0;
}

static void run_pace(struct snap_run *r);

/* The gathered text to the store stage. */
static void run_flush(struct snap_run *r)
{
    if (r->piece_len == 0 || r->discard)
        return;
    char *p = r->piece;
    size_t n = r->piece_len;
    r->piece = NULL;
    r->piece_len = 0;
    if (run_op(r, SNAP_OP_WRITE, p, n, NULL) != 0) {
        run_discard(r, "out of memory");
        return;
    }
    r->text += n;
    run_pace(r);
}

/* Text queued for the store stage: pause the target's socket past
 * SNAP_PENDING_PAUSE (op_done resumes it). */
static void run_pace(struct snap_run *r)
{
    if (r->pending > SNAP_PENDING_MAX)
        run_discard(r, "the store could not keep up");
    else if (r->pending >= SNAP_PENDING_PAUSE)
        run_pause(r, 1);
}

/* Stop keeping r's text; the answer (or the session's end) aborts it. */
static void run_discard(struct snap_run *r, const char *why)
{
    if (r->discard)
        return;
    r->discard = why;
    run_pause(r, 0); /* what follows is read and dropped */
    isoprof_free(r->piece);
    r->piece = NULL;
    r->piece_len = 0;
}

int snapshot_busy(const struct target *t)
{
    const struct snap_run *r = t->a->snap;
    return r != NULL && r->t == t;
}

/* The session (or worker session) t's events come on. */
static int run_is_of(const struct snap_run *r, const struct target *t, const char *session)
{
    if (r == NULL || r->t == NULL)
        return 0;
    if (session == NULL)
        return r->t == t;
    return r->t->parent == t && r->t->session != NULL && strcmp(r->t->session, session) == 0;
}

/* The session r's isolate is on: dropped, so that an endless stream ends
 * (the answer then comes as ISOPROF_ECLOSED). */
static void run_drop_session(struct snap_run *r, const char *why)
{
    struct target *t = r->t;
    if (t->parent != NULL) {
        threads_drop(t, why);
    } else if (t->cdp != NULL) {
        t->close_reason = why;
        cdp_close(t->cdp);
    }
}

/* len more bytes came: 0, or -1 past the run's limit (discarded, the
 * session dropped: an endless stream ends there). */
static int run_received(struct snap_run *r, size_t len)
{
    r->raw += len;
    if (r->raw <= r->raw_max)
        return 0;
    log_warn("heap snapshot past its limit, session dropped",
             "worker=%s thread=%s isolate=%u bytes=%U limit=%U used=%U next_in_s=%U", r->worker,
             r->thread, r->isolate, r->raw, r->raw_max, r->used,
             (uint64_t)(SNAP_HOLD_NS / 1000000000ull));
    r->t->ep->snap_hold_until_mono_ns = isoprof_now_mono_ns() + SNAP_HOLD_NS;
    run_discard(r, "the text went past its limit (the session was dropped)");
    run_drop_session(r, "a heap snapshot past its limit");
    return -1;
}

int snapshot_on_big_event(struct target *t, const char *method, char *data, size_t len)
{
    if (strcmp(method, "HeapProfiler.addHeapSnapshotChunk") != 0)
        return 0;
    struct snap_run *r = t->a->snap;
    if (!run_is_of(r, t, NULL) || r->answered || r->discard || run_received(r, len) != 0) {
        ws_msg_free(data); /* not asked for, or after its answer: dropped */
        return 1;
    }
    run_flush(r); /* the text gathered before it goes first */
    if (r->discard) {
        ws_msg_free(data);
        return 1;
    }
    if (run_op(r, SNAP_OP_WRITE_EVENT, data, len, NULL) != 0) {
        run_discard(r, "out of memory");
        return 1;
    }
    run_pace(r);
    return 1;
}

int snapshot_on_event(struct target *t, const char *session, const char *method, yajl_val params)
{
    if (strcmp(method, "HeapProfiler.addHeapSnapshotChunk") != 0)
        return 0;
    struct snap_run *r = t->a->snap;
    if (!run_is_of(r, t, session) || r->answered)
        return 1; /* not asked for (or after its answer): ignored */
    if (r->discard)
        return 1;
    const char *path[] = {"chunk", NULL};
    yajl_val v = params ? yajl_tree_get(params, path, yajl_t_string) : NULL;
    const char *chunk = v ? YAJL_GET_STRING(v) : NULL;
    if (chunk == NULL) {
        run_discard(r, "a chunk without its text");
        return 1;
    }
    size_t len = strlen(chunk);
    if (run_received(r, len) != 0)
        return 1;
    while (len > 0) {
        if (r->piece == NULL && (r->piece = isoprof_malloc(SNAP_PIECE)) == NULL) {
            run_discard(r, "out of memory");
            return 1;
        }
        size_t n = SNAP_PIECE - r->piece_len < len ? SNAP_PIECE - r->piece_len : len;
        memcpy(r->piece + r->piece_len, chunk, n);
        r->piece_len += n;
        chunk += n;
        len -= n;
        if (r->piece_len == SNAP_PIECE) {
            run_flush(r);
            if (r->discard)
                return 1;
        }
    }
    return 1;
}

static uint64_t dropped_big(const struct target *t)
{
    const struct cdp_session *s = t->parent ? t->parent->cdp : t->cdp;
    struct cdp_stats st;
    if (s == NULL)
        return 0;
    cdp_get_stats(s, &st);
    return st.dropped_big;
}

static void snap_on_answer(struct target *t, struct cdp_reply *rep)
{
    struct agent *a = t->a;
    struct snap_run *r = a->snap;
    ISOPROF_ASSERT(r != NULL && r->t == t);
    uint64_t now = isoprof_now_mono_ns();
    r->pause_ns = now - r->sent_mono_ns;
    run_pause(r, 0);
    if (rep->status == 0) {
        t->call_sent_ns[WIN_CALL_SNAPSHOT] = r->sent_mono_ns;
        win_pause(&t->w, now, WIN_CALL_SNAPSHOT, r->pause_ns);
        t->call_sent_ns[WIN_CALL_SNAPSHOT] = 0;
    }
    win_hold(&t->w, now, 0);
    if (rep->status == 0 && !r->discard && dropped_big(t) != r->dropped_big0)
        run_discard(r, "a chunk was dropped for its size");
    if (rep->status == 0 && !r->discard && r->raw == 0)
        run_discard(r, "the target sent no chunk");
    int ok = rep->status == 0 && !r->discard;
    if (ok)
        run_flush(r);
    ok = ok && !r->discard;
    struct writer_meta m = {0};
    if (ok) {
        m = (struct writer_meta){
            .worker = r->worker,
            .version = r->version,
            .runtime = r->runtime,
            .thread = r->thread,
            .pid = r->pid,
            .container = r->container,
            .labels = t->ep->cfg ? &t->ep->cfg->labels : NULL,
            .isolate = r->isolate,
            .type = STORE_TYPE_RETAINED,
            .flags = r->on_demand ? STORE_FLAG_ON_DEMAND : 0,
            .anomaly = r->ep ? r->ep->kind : 0,
            .pin = r->ep,
            .od = r->od,
            .time_ns = r->start_wall_ns,
            .mem = {.min = r->used, .max = r->used, .last = r->used, .p999 = r->used},
        };
        if (run_op(r, SNAP_OP_COMMIT, NULL, 0, &m) != 0)
            run_discard(r, "out of memory");
        else
            r->od = NULL; /* the writer answers it with the retained profile */
        ok = !r->discard;
    }
    if (rep->status == ISOPROF_ETIMEDOUT)
        t->ep->snap_hold_until_mono_ns = now + SNAP_HOLD_NS; /* it would stop again */
    r->t = NULL;
    r->answered = 1;
    if (!ok) {
        const char *why = r->discard;
        int failed = 0;
        if (why == NULL && rep->status == ISOPROF_ECLOSED) {
            why =
                a->stopping ? "the agent is stopping" : "the session ended (the isolate went away)";
        } else if (why == NULL) {
            why = rep->error_message ? rep->error_message : isoprof_strerror(rep->status);
            failed = 1;
        }
        a->n.snapshots[failed ? SNAP_FAILED : SNAP_DISCARDED]++;
        log_warn(failed ? "heap snapshot failed" : "heap snapshot discarded",
                 "worker=%s thread=%s isolate=%u bytes=%U err=%s why=%s", r->worker, r->thread,
                 r->isolate, r->raw, rep->status ? isoprof_strerror(rep->status) : "none", why);
        ondemand_window_done(r->od, rep->status ? rep->status : -EIO, NULL, why);
        r->od = NULL;
        isoprof_free(r->piece);
        r->piece = NULL;
        r->piece_len = 0;
        if (run_op(r, SNAP_OP_ABORT, NULL, 0, NULL) != 0) {
            /* No memory for the call: the stream stays open until the
             * store closes (or the next one finds its chunks orphaned). */
            log_error("heap snapshot stream left open", "worker=%s isolate=%u", r->worker,
                      r->isolate);
        }
    }
    run_maybe_end(r);
}

/* The host's MemAvailable in bytes, or -1 if unknown. The file is
 * /proc/meminfo, or $ISOPROFD_MEMINFO (tests). */
int64_t snapshot_mem_available(void)
{
    const char *path = getenv("ISOPROFD_MEMINFO");
    int fd = open(path && path[0] ? path : "/proc/meminfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[8192];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    const char *p = strstr(buf, "MemAvailable:");
    if (p == NULL)
        return -1;
    char *end;
    unsigned long long kib = strtoull(p + strlen("MemAvailable:"), &end, 10);
    if (end == p + strlen("MemAvailable:") || kib > (unsigned long long)(INT64_MAX / 1024))
        return -1;
    return (int64_t)kib * 1024;
}

static char *dup_or_empty(const char *s)
{
    return isoprof_strdup(s ? s : "");
}

static struct snap_run *run_new(struct target *t, uint64_t used, struct od_req *od,
                                struct episode *ep)
{
    struct agent *a = t->a;
    struct snap_run *r = isoprof_calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->a = a;
    r->t = t;
    r->ep = od || ep == NULL ? NULL : episode_ref(ep);
    r->worker = dup_or_empty(t->worker);
    r->version = dup_or_empty(t->version);
    r->runtime = dup_or_empty(target_runtime(t));
    r->thread = dup_or_empty(t->thread);
    r->container = dup_or_empty(t->ep->container);
    int nomem = !r->worker || !r->version || !r->runtime || !r->thread || !r->container;
    nomem |=
        writer_labels_dup(t->ep->cfg ? &t->ep->cfg->labels : NULL, &r->labels, &r->nlabels) != 0;
    if (nomem) {
        run_free(r);
        return NULL;
    }
    r->od = od; /* the caller's reference, now the run's */
    r->on_demand = od != NULL;
    r->pid = t->ep->pid;
    r->isolate = t->isolate;
    r->used = used;
    r->raw_max = SNAP_RAW_FACTOR * used + SNAP_RAW_SLACK;
    r->start_wall_ns = isoprof_now_wall_ns();
    r->dropped_big0 = dropped_big(t);
    return r;
}

/* Take t's snapshot now, for od (a reference, transferred), or else for
 * memory episode ep (NULL: none), pinned to it. */
static void snap_start(struct target *t, uint64_t used, struct od_req *od, struct episode *ep)
{
    struct agent *a = t->a;
    struct snap_run *r = run_new(t, used, od, ep);
    if (r == NULL || run_op(r, SNAP_OP_BEGIN, NULL, 0, NULL) != 0) {
        log_error("out of memory for a heap snapshot", "worker=%s isolate=%u", t->worker,
                  t->isolate);
        if (r != NULL)
            run_free(r); /* answers od */
        else
            ondemand_window_done(od, -ENOMEM, NULL, "out of memory");
        return;
    }
    a->snap = r;
    uint64_t timeout = SNAP_TIMEOUT_MIN_MS + used / SNAP_TIMEOUT_BYTES_PER_S * 1000u;
    if (timeout > SNAP_TIMEOUT_MAX_MS)
        timeout = SNAP_TIMEOUT_MAX_MS;
    r->sent_mono_ns = isoprof_now_mono_ns();
    win_hold(&t->w, r->sent_mono_ns, 1);
    int rc = target_call(t, "HeapProfiler.takeHeapSnapshot", "{\"reportProgress\":false}", timeout,
                         0, snap_on_answer);
    if (rc != 0) {
        win_hold(&t->w, isoprof_now_mono_ns(), 0);
        log_warn("heap snapshot failed", "worker=%s isolate=%u err=%e why=%s", t->worker,
                 t->isolate, rc, "HeapProfiler.takeHeapSnapshot not sent");
        a->n.snapshots[SNAP_FAILED]++;
        ondemand_window_done(r->od, rc, NULL, "HeapProfiler.takeHeapSnapshot could not be sent");
        r->od = NULL;
        r->t = NULL;
        r->answered = 1;
        if (run_op(r, SNAP_OP_ABORT, NULL, 0, NULL) != 0)
            log_error("heap snapshot stream left open", "worker=%s isolate=%u", t->worker,
                      t->isolate);
        run_maybe_end(r);
        return;
    }
    log_info("heap snapshot started",
             "worker=%s version=%s thread=%s isolate=%u used=%U limit=%U anomaly=%U on_demand=%d",
             t->worker, t->version, t->thread, t->isolate, used, target_memory_limit(t),
             r->ep ? r->ep->id : 0, od != NULL);
}

/* Why t's snapshot may not be taken at used bytes of heap (static text),
 * its counter in *result; NULL when it may. */
static const char *snap_refused(const struct target *t, uint64_t used, unsigned *result,
                                int64_t *avail)
{
    const struct cfg *c = t->a->cfg;
    if (t->ep->snap_hold_until_mono_ns > isoprof_now_mono_ns()) {
        *result = SNAP_SKIPPED_HELD;
        return "a snapshot of this endpoint went past its limit or never answered less than an "
               "hour ago";
    }
    if (used > c->anomaly.memory.snapshot_max_heap) {
        *result = SNAP_SKIPPED_HEAP;
        return "the used heap is over anomaly.memory.snapshot_max_heap";
    }
    *avail = snapshot_mem_available();
    if (*avail >= 0 && (uint64_t)*avail < SNAP_MEM_FACTOR * used + SNAP_MEM_SLACK) {
        *result = SNAP_SKIPPED_MEMORY;
        return "the host's MemAvailable is under 9 x the used heap + 64 MiB (what V8 takes "
               "to write a snapshot)";
    }
    return NULL;
}

/* Whether a snapshot of t can start now: not while a window of it is in
 * flight (V8 would answer that call only after the snapshot), nor while
 * another isolate's is taken. */
static int snap_can_start(const struct target *t)
{
    return t->a->snap == NULL && t->state == TARGET_READY && !t->a->stopping &&
           t->w.cpu == WIN_NONE && !t->w.heap_inflight;
}

int snapshot_poll(struct target *t, uint64_t used, struct episode *due)
{
    struct agent *a = t->a;
    const struct cfg *c = a->cfg;
    if (t->snap_od != NULL) {
        if (snap_can_start(t)) {
            struct od_req *od = t->snap_od;
            t->snap_od = NULL;
            snap_start(t, used, od, NULL);
        }
        return 0;
    }
    if (due == NULL || !snap_can_start(t))
        return 0;
    /* One try an episode: taken, or skipped and said once. */
    unsigned result;
    int64_t avail = -1;
    const char *why = snap_refused(t, used, &result, &avail);
    if (why != NULL) {
        a->n.snapshots[result]++;
        log_warn("heap snapshot skipped",
                 "worker=%s thread=%s isolate=%u used=%U why=%s snapshot_max_heap=%U "
                 "mem_available=%I",
                 t->worker, t->thread, t->isolate, used, why, c->anomaly.memory.snapshot_max_heap,
                 avail);
        return 1;
    }
    snap_start(t, used, NULL, due);
    return 1;
}

int snapshot_ondemand(struct target *t, struct od_req *od)
{
    struct agent *a = t->a;
    unsigned result;
    int64_t avail = -1;
    const char *why = NULL;
    char buf[160];
    if (t->snap_od != NULL || snapshot_busy(t)) {
        why = "a heap snapshot of this isolate is already being taken";
    } else if (t->mw.last == 0) {
        why = "its heap has not been measured yet (the first memory poll)";
    } else if ((why = snap_refused(t, t->mw.last, &result, &avail)) != NULL) {
        a->n.snapshots[result]++;
        snprintf(buf, sizeof(buf), "%s (used %" PRIu64 " bytes)", why, t->mw.last);
        why = buf;
    }
    if (why != NULL) {
        log_warn("heap snapshot skipped", "worker=%s thread=%s isolate=%u on_demand=1 why=%s",
                 t->worker, t->thread, t->isolate, why);
        ondemand_window_done(ondemand_ref(od), -EBUSY, NULL, why);
        return 0;
    }
    /* Now if nothing is in flight, else at the next memory poll that finds
     * it so (a window ends, the other snapshot is written). */
    if (snap_can_start(t))
        snap_start(t, t->mw.last, ondemand_ref(od), NULL);
    else
        t->snap_od = ondemand_ref(od);
    return 0;
}

void snapshot_target_gone(struct target *t)
{
    if (t->snap_od == NULL)
        return;
    ondemand_window_done(t->snap_od, -ENOTCONN, NULL,
                         "the isolate went away before its heap snapshot was taken");
    t->snap_od = NULL;
}
/* --- the retained profile (the writer's conversion stage) --- */

struct blob_src {
    struct store *s;
    uint64_t id;
};

static int blob_read(void *arg, heapsnap_feed_fn feed, void *feed_arg)
{
    struct blob_src *b = arg;
    return store_blob_read(b->s, b->id, feed, feed_arg);
}

/* An unlinked file in dir for the conversion's spill: O_TMPFILE, or where
 * the filesystem has none, a named file unlinked at once (nothing of it
 * stays behind either way). -1 with errno set. */
static int spill_open(const char *dir)
{
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
        return fd;
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/.retained-spill-XXXXXX", dir) >= (int)sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0)
        unlink(path);
    return fd;
}

int snapshot_retained(struct store *s, const char *dir, uint64_t id, uint64_t time_ns,
                      struct pprof_result *out, char **why)
{
    /* The one conversion that runs at a time, so its budget
     * (agent/daemon/budget.h): the snapshot's nodes in compact arrays,
     * its edges and the dominators' predecessor lists in an unlinked file
     * beside the store (page cache, which the kernel reclaims, not the
     * daemon's), and a snapshot too big for that refused when its
     * node_count is read, its raw window kept. */
    int64_t avail = snapshot_mem_available();
    if (avail >= 0 && (uint64_t)avail < AGENT_CONVERT_MEMORY) {
        char buf[256];
        snprintf(buf, sizeof(buf),
                 "too little memory: MemAvailable is %" PRId64 " bytes, under the %zu it may take",
                 avail, AGENT_CONVERT_MEMORY);
        *why = isoprof_strdup(buf);
        return ISOPROF_EPROFILE;
    }
    int fd = spill_open(dir);
    if (fd < 0) {
        char buf[512];
        snprintf(buf, sizeof(buf), "no spill file in %s: %s", dir, strerror(errno));
        *why = isoprof_strdup(buf);
        return ISOPROF_EPROFILE;
    }
    struct heapsnap_retained_opts o = {
        .budget = AGENT_CONVERT_MEMORY, .spill_fd = fd, .pprof = {.time_ns = time_ns}};
    struct blob_src src = {s, id};
    struct heapsnap_pprof_result res;
    int rc = heapsnap_retained(&o, blob_read, &src, &res, why);
    if (rc == -ENOMEM)
        return rc;
    if (rc != 0)
        return ISOPROF_EPROFILE;
    memset(out, 0, sizeof(*out));
    out->pprof = res.pprof;
    out->samples = res.objects;
    out->start_ns = out->end_ns = time_ns;
    out->truncated = res.deeper + res.folded;
    return 0;
}

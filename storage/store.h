/*
 * store.h - the isoprof window store (LMDB).
 *
 * A store is a directory holding one LMDB environment. Every profile window
 * (one CPU window or one heap snapshot of one isolate) is one record: a small
 * header (end time, samples, flags, interval, runtime, thread, process id,
 * container, source-map figures, the target's labels, sequence id)
 * followed by the zstd-compressed pprof protobuf.
 * Records are keyed by (worker, version, start_ns, isolate, type) so that
 * the queries people ask ("checkout v42, last Tuesday") are range seeks; a
 * time index serves the listings without a worker and the retention that
 * evicts the oldest windows first; an id index maps the short sequence id
 * to the record.
 *
 * A snapshot window (STORE_TYPE_SNAPSHOT, a raw V8 heap snapshot of up to
 * hundreds of MB) is streamed in instead: store_blob_begin, any number of
 * store_blob_write, then store_blob_commit (or store_blob_abort), in
 * bounded memory; its compressed bytes are stored as chunks beside the
 * window record and read back with store_blob_read.
 *
 * Threads: one store handle is shared by all threads of a process.
 * store_put and the store_blob_* writes may be called from any thread, but
 * from one thread at a time (the caller serialises writers; a stream may
 * be interleaved with other writes). store_windows, store_load,
 * store_blob_read, store_stat, store_check, store_outbox_peek,
 * store_id_format and store_id_parse may be
 * called from any thread, concurrently with each other and with store_put.
 * store_outbox_ack and store_outbox_reject may run on another thread
 * concurrently with store_put (not with each other). store_open and
 * store_close must not race with any other call on the same handle.
 * Several processes may open the same store: one writer (the daemon) and
 * any number of read-only handles (the CLI). Do not open the same store
 * twice in one process (LMDB's file locks are per process).
 *
 * Errors: 0, a negative errno, or an ISOPROF_E* code (config/base.h).
 * Nothing here logs.
 */
#ifndef ISOPROF_STORE_H
#define ISOPROF_STORE_H

#include <stddef.h>
#include <stdint.h>

/* Schema version this build reads and writes (stored in the meta DB). */
#define STORE_SCHEMA_VERSION 12u

/* Window types; values are stored (in keys), never renumber. CPU, HEAP and
 * RETAINED windows hold a pprof and are stored with store_put (and queued
 * for upload); a SNAPSHOT window holds a raw V8 heap snapshot (JSON), is
 * stored only through the blob calls (store_blob_begin ...) and read with
 * store_blob_read, and is never queued. */
enum store_type {
    STORE_TYPE_CPU = 1,
    STORE_TYPE_HEAP = 2,
    STORE_TYPE_RETAINED = 3, /* pprof of a heap snapshot's retained sizes */
    STORE_TYPE_SNAPSHOT = 4, /* the raw heap snapshot */
};
#define STORE_TYPE_MAX 4

/* store_type_name - "cpu", "heap", "retained", "snapshot"; NULL for values
 * out of range. A static string. Thread: any. */
const char *store_type_name(unsigned type);

/* Window flags (struct store_window.flags). */
#define STORE_FLAG_ON_DEMAND 0x1u
/* Output only (ignored on input): store_put put the window in the outbox
 * (the handle was opened with store_options.outbox). */
#define STORE_FLAG_QUEUED 0x2u

/* The bits of an isolate number that name its process: the threads of
 * one process differ only in the others. */
#define STORE_ISOLATE_PROCESS 0xfffff000u

/*
 * store_thread_label - the length of the part of thread (NUL-terminated)
 * that says what the thread runs: up to a last '#' followed by one or more
 * digits only (the thread id), else all of it. Thread: any.
 */
size_t store_thread_label(const char *thread);

/* Where a window is on its way to the upload server (struct
 * store_window.upload). */
enum store_upload {
    STORE_UPLOAD_OFF = 0,  /* never queued: stored while upload was off */
    STORE_UPLOAD_PENDING,  /* in the outbox */
    STORE_UPLOAD_UPLOADED, /* the server acknowledged it */
    STORE_UPLOAD_REJECTED, /* the server (or the uploader) refused it for good */
    STORE_UPLOAD_EXPIRED,  /* older than the server accepts: never sent (store_outbox_expire) */
};
/* The status an expired window is recorded with in place of an HTTP one
 * (never a real status; reject_status of an EXPIRED window). */
#define STORE_REJECT_EXPIRED 1u
/* Longest rejection reason kept (bytes; longer ones are cut). */
#define STORE_REJECT_REASON_MAX 255

/* Why an anomaly was flagged (struct store_window.anomaly, struct
 * store_anomaly.kind). 0 means none; values are stored, never renumber. */
enum store_anomaly_kind {
    STORE_ANOMALY_NONE = 0,
    STORE_ANOMALY_MEMORY_NEAR_LIMIT = 1,
    STORE_ANOMALY_OOM_SUSPECTED = 2,
    STORE_ANOMALY_LATENCY_P999_SPIKE = 3,
    STORE_ANOMALY_MEMORY_GROWTH = 4,
    /* A new version of a worker whose CPU profile grew against the version
     * before it (schema 12): worker/version name the new version, isolate
     * 0; struct store_anomaly.regression says against what and where. */
    STORE_ANOMALY_VERSION_REGRESSION = 5,
};
#define STORE_ANOMALY_MAX 5

/* store_anomaly_name - "memory_near_limit", "oom_suspected",
 * "latency_p999_spike", "memory_growth", "version_regression"; "" for
 * STORE_ANOMALY_NONE and NULL for values out of range. A static string.
 * Thread: any. */
const char *store_anomaly_name(unsigned kind);

/* store_anomaly_parse - the kind named by name (as store_anomaly_name
 * prints it); 0 (NONE) if name names none. Thread: any. */
unsigned store_anomaly_parse(const char *name);

/* The target's memory during a window, from its Runtime.getHeapUsage polls
 * (bytes; all zero when no poll fell inside the window). */
struct store_mem {
    uint64_t min, max, last, p999;
};

/* Limits on the strings of a window (bytes, without the terminating NUL). */
#define STORE_WORKER_MAX 255
#define STORE_VERSION_MAX 255
/* worker and version together: LMDB keys are at most 511 bytes and the
 * time index key is 8 bytes + the window key. */
#define STORE_LABELS_MAX 488
#define STORE_RUNTIME_MAX 31
/* The thread label: 1 to STORE_THREAD_MAX bytes of printable ASCII (0x20 to
 * 0x7e). "main" for a process's main thread, else the Worker's name or
 * "worker-<threadId>" (the daemon chooses; the store only bounds it). */
#define STORE_THREAD_MAX 64
#define STORE_THREAD_MAIN "main"
/* The container label: 0 to STORE_CONTAINER_MAX bytes of [0-9A-Za-z_.-]
 * (the id the daemon reads from a process's cgroup; "" = none). */
#define STORE_CONTAINER_MAX 64
/* A window's labels (struct store_window.labels): the static labels of its
 * target (service_repository, service_git_ref, ...), which the uploader
 * sends with its profile. At most STORE_WINDOW_LABELS_MAX of them; a name
 * is 1 to STORE_WINDOW_LABEL_NAME_MAX bytes of [A-Za-z_][A-Za-z0-9_]*, not
 * starting with "__" (the server's) and none of the names the uploader
 * sets itself (service_name, version, host, isolate, runtime, thread,
 * anomaly), each name once; a value is 1 to STORE_WINDOW_LABEL_VALUE_MAX
 * bytes of valid UTF-8 (Pyroscope's limit, PUSH_MAX_VALUE); the names and
 * values with a NUL after each take at most STORE_WINDOW_LABELS_BYTES. */
#define STORE_WINDOW_LABELS_MAX 16
#define STORE_WINDOW_LABEL_NAME_MAX 64
#define STORE_WINDOW_LABEL_VALUE_MAX 2048
#define STORE_WINDOW_LABELS_BYTES 4096
/* Largest uncompressed pprof accepted by store_put and inflated on load. */
#define STORE_RAW_MAX (256u * 1024 * 1024)
/* Largest raw heap snapshot a snapshot window may hold (a sanity bound of
 * the record decoder; the budget refuses far smaller ones first). */
#define STORE_SNAPSHOT_RAW_MAX (1ull << 36)

struct store;

/* One label of a window: NUL-terminated name and value (see
 * STORE_WINDOW_LABELS_MAX for the rules). */
struct store_label {
    const char *name, *value;
};

/*
 * store_labels_check - 0 if labels[0..n) are what store_put accepts as a
 * window's labels (see STORE_WINDOW_LABELS_MAX), else -EINVAL; *bad
 * (optional) receives the index of the first offending label, or n when
 * there are too many or they take too many bytes together. labels may be
 * NULL when n is 0. Thread: any.
 */
int store_labels_check(const struct store_label *labels, size_t n, size_t *bad);

/* What the caller of store_open learnt of the store from store_verify,
 * run on the same path just before (struct store_options.verified). */
enum store_verified {
    STORE_VERIFY_NONE = 0,   /* nothing: store_open checks the file itself */
    STORE_VERIFY_PASSED,     /* store_verify returned 0 */
    STORE_VERIFY_UNFINISHED, /* it could not finish (-ETIMEDOUT, -ECANCELED, -errno of
                                starting the check): the caller goes on without a verdict */
};

struct store_options {
    /* Pinned windows (evidence of an anomaly) are evicted last: the oldest
     * pinned window goes before the oldest unpinned one only once it is
     * pin_factor times as old. 0 = 4. */
    uint32_t pin_factor;
    /* Budget for stored data in bytes: keys and values of all DBs, counted
     * per window as stored_size (below); 0 = 1 GiB. The file on disk is
     * larger (LMDB pages: typically 1.3-1.6 x, up to about 2 x for values
     * just over a page). The LMDB map (address space, sparse file limit)
     * is 3 x budget + 16 MiB so that this overhead and the copy-on-write
     * pages of a transaction fit. Ignored by read-only handles. */
    uint64_t max_size;
    /* Open read-only (the CLI). Works while another process writes the
     * same store; each query sees the last committed state. */
    int readonly;
    /* Nonzero: every window store_put stores is also queued in the outbox
     * for upload, in the same transaction (the daemon, when upload.url is
     * set). Ignored by read-only handles. */
    int outbox;
    /* enum store_verified (isoprofd at start). PASSED: a file shorter than
     * its last page is not confirmed again by a free list child (the walk
     * read every page in use); the meta pages are still read. UNFINISHED:
     * a free list check of store_open's own that cannot finish either
     * (check_ms passes, the child cannot start or is killed from outside)
     * does not refuse the store; damage found still does. */
    int verified;
    /* The longest store_open's free list check may take, in ms (the
     * caller's start-up bound, less what store_verify took); 0 = 60 s. */
    uint64_t check_ms;
};

struct store_window {
    uint64_t id; /* sequence number, >= 1; assigned by store_put (input ignored) */
    /* Non-NULL, no NUL inside. worker <= STORE_WORKER_MAX bytes, version <=
     * STORE_VERSION_MAX, together <= STORE_LABELS_MAX; runtime <=
     * STORE_RUNTIME_MAX. */
    const char *worker, *version, *runtime;
    /* The isolate's thread: "main", or a Worker's: what it runs and its
     * thread id, "resize.js#7" (older stores: its name or "worker-<id>");
     * at most STORE_THREAD_MAX bytes of printable ASCII. Input to store_put:
     * NULL or "" stores "main" (callers that predate threads keep working).
     * Output of store_windows and store_outbox_peek: never NULL nor empty,
     * borrowed like worker and version; windows stored before schema 5 (no
     * thread in their record) read as "main". */
    const char *thread;
    /* Thread labels of the form "<what it runs>#<threadId>" (the daemon's
     * for a Worker) keep the thread id in the store; the uploader sends
     * the part before the '#' (store_thread_label). */
    /* The process id of the isolate's process; 0 = unknown. Input and
     * output; windows stored before schema 6 read as 0. Local to the store
     * (the uploader does not send it). */
    uint32_t pid;
    /* The container id of that process (from its cgroup): at most
     * STORE_CONTAINER_MAX bytes of [0-9A-Za-z_.-]. Input to store_put: NULL
     * or "" = none. Output of store_windows and store_outbox_peek: never
     * NULL, "" when none, borrowed like worker and version; windows stored
     * before schema 6 read as "". */
    const char *container;
    /* Distinct frames (pprof Locations) of the window mapped through a
     * source map, and those that could have been (a script with a source
     * map URL) but were not. Input and output; windows stored before
     * schema 7 read as 0 and 0. Local to the store (never uploaded). */
    uint32_t frames_mapped, frames_unmapped;
    /* The window's labels (see STORE_WINDOW_LABELS_MAX), which the
     * uploader sends with its profile. Input to store_put: nlabels of
     * them, borrowed for the call (labels may be NULL when nlabels is 0).
     * Output of store_windows and store_outbox_peek: the labels as stored,
     * in their order, the array and its strings borrowed like worker and
     * version (labels NULL when nlabels is 0); windows stored before
     * schema 7 have none. */
    const struct store_label *labels;
    size_t nlabels;
    uint64_t start_ns, end_ns; /* wall clock ns */
    /* The isolate: its number is stable for the life of the process (the
     * agent derives it from the process, not from its own run), and the
     * threads of one process share its high bits (STORE_ISOLATE_PROCESS). */
    uint32_t isolate;
    uint8_t type; /* enum store_type */
    uint32_t flags;
    uint64_t samples;
    uint64_t interval; /* cpu: sampling interval ns; heap: sampling interval bytes */
    uint8_t anomaly;   /* enum store_anomaly_kind: the window was taken because of
                          one */
    struct store_mem mem;
    uint32_t pinned;      /* output: bit (1 << kind) for each kind of anomaly pinning it */
    uint64_t raw_size;    /* output: uncompressed pprof bytes (a snapshot: its JSON bytes) */
    uint64_t stored_size; /* output: bytes the window takes in the store (keys and
                             values of its windows, by_time and ids entries,
                             its outbox entry when queued, and a snapshot's
                             chunks); counts against the budget */
    /* Output of store_windows and store_outbox_peek: enum store_upload, and
     * when REJECTED the HTTP status (0: refused before sending) and the
     * reason (borrowed like the other strings; "" if none). */
    uint8_t upload;
    uint16_t reject_status;
    const char *reject_reason;
};

/* One window to store. pprof: the uncompressed protobuf, borrowed for the
 * duration of store_put; len <= STORE_RAW_MAX (pprof may be NULL if len 0). */
struct store_record {
    struct store_window w;
    const void *pprof;
    size_t len;
    /* Nonzero: pin the window to this anomaly (store_anomaly_put's id) in
     * the same transaction; an id that no longer exists pins nothing. */
    uint64_t pin;
};

struct store_put_stats {
    uint64_t evicted;       /* windows removed by retention during this call */
    uint64_t evicted_bytes; /* their stored_size */
};

/*
 * store_open - open (and create, unless readonly) the store in directory
 * path.
 *
 * path: directory; created with parents (mode 0750) if missing and not
 *   readonly. Borrowed; copied.
 * opt: options, borrowed; NULL = defaults (writable, 1 GiB budget).
 * out: receives the handle on success (owned by the caller, release with
 *   store_close); untouched on failure.
 * why: if non-NULL, receives on failure an allocated message for a person,
 *   prefixed with the path, e.g. "isoprof-data: schema version 9, this
 *   build reads 7" (STORE_SCHEMA_VERSION); the caller frees it with
 *   isoprof_free. Set to NULL on success (and on failure if the message
 *   could not be allocated).
 *
 * A writable open creates the schema in an empty environment and records the
 * budget in it. It upgrades a store of an older schema (1 to 11) in place,
 * in one transaction, without rewriting any window (old windows read as
 * never queued, without a dictionary, of thread "main", pid 0, no
 * container, no source-map figures and no labels). In the same
 * transaction it drops the chunks of snapshots that never committed (a
 * crash while streaming; store_stat's orphan_chunks). A read-only open reads
 * schema 3 to 11 stores as they are and refuses 1 and 2 (ISOPROF_ESCHEMA;
 * why says that isoprofd upgrades them). Data committed before a crash is
 * always there after reopen (LMDB syncs data and meta on each commit; no
 * unsafe flags are used).
 *
 * Before LMDB maps data.mdb, its two meta pages are read and checked
 * against the file (magic, format, page size, roots, and the file's size
 * against the last page in use), so that a file cut short is refused
 * instead of faulting (SIGBUS) on first touch. Pages missing at the end of
 * a healthy file are ones LMDB freed before writing them; when the file is
 * short, a short-lived child process reads the free list to confirm that
 * (for at most opt->check_ms; see store_verify for what a child means for
 * the caller, and opt->verified for when there is none). Damage inside
 * the pages can still fault a process that reads them: store_verify first
 * when a store may be damaged. Files LMDB creates (data.mdb, lock.mdb) get
 * mode 0640 less the umask.
 *
 * Errors: -EINVAL (NULL argument), -ENOENT (readonly and no store there),
 * -ENOMEM, -EACCES and other -errno from the file system, ISOPROF_EMAGIC
 * (an LMDB environment that is not an isoprof store, or data.mdb is not
 * LMDB), ISOPROF_ESCHEMA (another schema version, or an LMDB file format
 * this library cannot read), ISOPROF_EDAMAGED (data.mdb's meta pages are
 * damaged or the file is shorter than they say: why names the sizes),
 * ISOPROF_ECORRUPT (damaged meta DB); the free list check could not be
 * done (unless opt->verified is STORE_VERIFY_UNFINISHED): -ETIMEDOUT,
 * -ECANCELED, -EMFILE, -EAGAIN and other -errno of starting a child, why
 * "path: could not check the store: ...".
 * Thread: any; not concurrently with other calls on the handle (none yet).
 */
int store_open(const char *path, const struct store_options *opt, struct store **out, char **why);

/*
 * store_close - release the handle. s may be NULL. No other call on s may
 * be running or follow. Committed data is already durable. A snapshot
 * stream still open is freed without a write (its committed chunks stay
 * until the next writable store_open drops them, as after a crash).
 */
void store_close(struct store *s);

/*
 * store_put - store n windows in one write transaction, all or nothing.
 *
 * Each pprof is compressed (zstd level 3, with a checksum) before the
 * transaction begins. In the transaction every record gets the next sequence
 * id; then, while the total stored size exceeds the budget, the oldest windows
 * in start-time order are evicted (this may include windows of this batch if
 * they are the oldest). If LMDB reports the map full, the transaction is
 * aborted, a separate transaction evicts further (down to budget - batch -
 * budget/8) and the put is retried once.
 *
 * A record whose key (worker, version, start_ns, isolate, type) already
 * exists replaces the old window (the old id becomes invalid); this is not
 * counted as an eviction (but as evicted before upload in store_stat's
 * outbox_evicted when the old window was still pending).
 *
 * Dictionaries: once a (worker, version) has 8 windows stored without a
 * compression dictionary, the put that stores its next window builds one
 * from the raw pprof of its newest windows (at most 32 KiB) in the same
 * transaction; that window and the later ones of the pair are compressed
 * with it (windows stored before are left as they are). A dictionary lasts
 * as long as a window uses it and counts against the budget once, not in
 * any window's stored_size.
 *
 * With store_options.outbox, each window is also queued for upload in the
 * same transaction (STORE_FLAG_QUEUED in its flags; its stored_size
 * includes the outbox entry).
 *
 * recs: n records, borrowed; on success each recs[i].w.id, .raw_size and
 *   .stored_size are filled in (other fields are not modified).
 * st: may be NULL; filled in with the evictions that were committed, also
 *   when the call fails after an eviction-only transaction.
 * n == 0 is a no-op returning 0.
 *
 * Errors: -EINVAL (bad record: NULL worker, version or runtime, a string
 * too long, a thread that is not printable ASCII, a container longer than
 * STORE_CONTAINER_MAX or with a byte outside [0-9A-Za-z_.-], labels that
 * store_labels_check refuses, type not CPU, HEAP or RETAINED (a SNAPSHOT
 * goes through store_blob_begin), len > STORE_RAW_MAX, pprof
 * NULL with len > 0), -EROFS (read-only handle), -E2BIG (one record's
 * stored size exceeds the budget, or the batch is too large for one
 * transaction), -ENOMEM, ISOPROF_EZSTD, ISOPROF_EMAPFULL (no room even
 * after evicting), -ENOSPC / -EIO (disk;
 * nothing of the batch is committed and the store stays consistent),
 * ISOPROF_ECORRUPT (damaged meta).
 * Thread: any, but one at a time per handle (not reentrant).
 */
int store_put(struct store *s, struct store_record *recs, size_t n, struct store_put_stats *st);

/* Query filter; zero-initialise and set what you need. */
struct store_filter {
    const char *worker, *version; /* NULL = any */
    /* NULL = any; else only windows of that thread ("" = "main", as
     * store_put reads it; windows stored before schema 5 are "main"). Read
     * from each record's header, so it narrows what the callback sees, not
     * what the scan reads: combine it with worker for a range seek. */
    const char *thread;
    /* 0 = any; else only windows of that process id (windows stored
     * before schema 6, pid 0, match none). Read from the header like
     * thread. */
    uint32_t pid;
    uint8_t type;                /* 0 = any */
    uint64_t since_ns, until_ns; /* window start in [since, until); 0 = unbounded */
    uint64_t id;                 /* nonzero: only that window (the other fields still apply) */
    /* Nonzero: only windows pinned by an anomaly of a kind in this mask
     * (bit 1 << kind; STORE_PINNED_ANY for any kind), in start order. */
    uint32_t pinned;
};
#define STORE_PINNED_ANY 0xfffffffeu

/*
 * store_window_cb - called once per matching window. w and all its strings
 * are borrowed for the duration of the call only (they point into the
 * read transaction's snapshot). Return 0 to continue, nonzero to stop;
 * that value is then returned by store_windows. The callback may call
 * store_load, store_id_format and other read calls; it must not call
 * store_put or store_close.
 */
typedef int (*store_window_cb)(const struct store_window *w, void *arg);

/*
 * store_windows - call cb for each window matching f, in one read
 * transaction (a consistent snapshot).
 *
 * Order: start time ascending (then key order) when f->worker is NULL;
 * key order (version, start, isolate, type) within the worker when
 * f->worker is set. With a worker the scan is a range seek on the key
 * prefix (and on the start time when since/version allow), never a full
 * scan. Records whose key or header do not decode are skipped (store_check
 * reports them).
 *
 * f: borrowed; NULL = everything. arg: passed to cb.
 * Returns 0, the callback's nonzero value, -EINVAL (NULL s or cb), or an
 * LMDB error translated (ISOPROF_ECORRUPT, -errno).
 * Thread: any, concurrently with everything but store_close.
 */
int store_windows(struct store *s, const struct store_filter *f, store_window_cb cb, void *arg);

/*
 * store_load - the uncompressed pprof of window id.
 * pprof: receives an allocation the caller frees with isoprof_free.
 * len: receives its size. Both untouched on failure.
 * Errors: ISOPROF_ENOTFOUND (no such id), -EMEDIUMTYPE (a snapshot window:
 * it holds no pprof, read it with store_blob_read), ISOPROF_ECORRUPT
 * (record or zstd frame damaged, size mismatch), -ENOMEM, -EINVAL.
 * Thread: any, concurrently with everything but store_close.
 */
int store_load(struct store *s, uint64_t id, void **pprof, size_t *len);

/* --- snapshots: streamed blobs ---
 *
 * A snapshot window is written as one zstd stream (level 3, with a
 * checksum) cut into chunks of STORE_BLOB_CHUNK compressed bytes, each
 * committed in a short write transaction of its own as soon as it is
 * full, so that memory stays bounded (the compression context and one
 * chunk, about 5 MiB) whatever the snapshot's size. The chunks count
 * against the budget as they are committed (so a stream can evict old
 * windows); nothing is visible to readers until store_blob_commit stores
 * the window. A stream that never commits (a crash) leaves chunks without
 * a window, which the next writable store_open drops.
 */
#define STORE_BLOB_CHUNK (1u << 20)

struct store_blob;

/*
 * store_blob_begin - start streaming snapshot window w into the store.
 *
 * w: borrowed for the call (everything needed is copied): type must be
 *   STORE_TYPE_SNAPSHOT; worker, version, runtime, thread, pid, container,
 *   labels, start_ns, isolate, flags, samples (may be 0), interval,
 *   anomaly and mem as for store_put (end_ns is given at commit; id,
 *   frames_* and the output fields are ignored).
 * out: receives the stream (owned by the caller until store_blob_commit
 *   or store_blob_abort, which free it); untouched on failure.
 * Writes nothing yet. One stream at a time per handle; a stream should
 * end (commit or abort) before store_close, which frees one left open.
 * Errors: -EINVAL (NULL argument, type not SNAPSHOT, or w refused as
 * store_put refuses a record), -EROFS (read-only handle), -EBUSY (another
 * stream of this handle is open), -ENOMEM.
 * Thread: as store_put (a write; may be interleaved with store_put and
 * store_anomaly_put on the same thread or serialised with them).
 */
int store_blob_begin(struct store *s, const struct store_window *w, struct store_blob **out);

/*
 * store_blob_write - append len raw bytes (data borrowed for the call; may
 * be NULL if len is 0) to the stream. Each time STORE_BLOB_CHUNK
 * compressed bytes are ready they are committed as one chunk, in a write
 * transaction that also evicts old windows while the stored bytes exceed
 * the budget (and on a full map evicts further and tries once more).
 *
 * Errors (sticky: every later write and the commit return the same; the
 * caller then calls store_blob_abort): -EINVAL, -ENOMEM, ISOPROF_EZSTD,
 * ISOPROF_ETOOBIG (the snapshot has grown past the whole budget: its
 * chunks are dropped at once), ISOPROF_EMAPFULL, -ENOSPC / -EIO / -EFBIG
 * (disk: the chunk is not stored), ISOPROF_ECORRUPT (damaged meta).
 * Thread: as store_put.
 */
int store_blob_write(struct store_blob *b, const void *data, size_t len);

/*
 * store_blob_commit - end the stream and store the window: the last chunk,
 * the window record (with the raw and compressed sizes and the chunk
 * count), its by_time and ids entries, and a pin to anomaly pin (if
 * nonzero and it still exists) in one transaction, which then applies
 * keep and the budget. A window with the same key (worker, version,
 * start, isolate, type) is replaced, its chunks with it.
 *
 * end_ns: the window's end (wall ns).
 * keep: at most this many snapshot windows of w's worker/version stay
 *   (this one included; 0 = no limit): the others are evicted oldest
 *   first, unpinned ones before pinned ones, never this one.
 * id: if non-NULL receives the window's id (0 on failure).
 * st: may be NULL; receives the windows evicted by this call (keep and
 *   budget, including those evicted by the chunk writes of the stream).
 * b is freed in every case; on failure nothing of the stream is left
 * (its chunks are deleted, or dropped by the next writable open if even
 * that fails).
 * Errors: the sticky error of a write, or those of store_blob_write;
 * -EINVAL (b NULL).
 * Thread: as store_put.
 */
int store_blob_commit(struct store_blob *b, uint64_t end_ns, uint64_t pin, unsigned keep,
                      uint64_t *id, struct store_put_stats *st);

/*
 * store_blob_abort - drop the stream: delete its chunks (one write
 * transaction) and free b. b may be NULL. Cannot fail from the caller's
 * point of view: chunks it could not delete (disk full) are orphans,
 * dropped by the handle's next stream or the next writable store_open.
 * Thread: as store_put.
 */
void store_blob_abort(struct store_blob *b);

/*
 * store_blob_read - stream the raw content of snapshot window id to cb, in
 * pieces of at most 128 KiB (data borrowed for the call), from one read
 * transaction, in bounded memory (the decompression context). The pieces
 * add up to the window's raw_size; their checksum is verified at the end,
 * so a damaged snapshot can fail after some pieces were passed on.
 * cb: returns 0 to go on; a nonzero value stops the read and is returned.
 * cb must not call store_put, the blob writes or store_close.
 * Errors: -EINVAL, ISOPROF_ENOTFOUND (no window id), -EMEDIUMTYPE (window
 * id is not a snapshot), ISOPROF_ECORRUPT (a chunk missing or out of
 * sequence, sizes that do not add up, a zstd stream that does not inflate
 * to the raw size), -ENOMEM, -errno.
 * Thread: any, concurrently with everything but store_close (read-only
 * handles too).
 */
int store_blob_read(struct store *s, uint64_t id,
                    int (*cb)(void *arg, const void *data, size_t len), void *arg);

#define STORE_ID_LEN 36

/*
 * store_id_format - the external form of a window id: a UUID-shaped string
 * (RFC 9562 version 8, variant 10) carrying 60 bits of the store's random
 * instance id and the low 62 bits of the sequence number, so ids from
 * different stores do not collide. out receives 36 lowercase characters
 * and a NUL. Thread: any.
 */
void store_id_format(const struct store *s, uint64_t id, char out[STORE_ID_LEN + 1]);

/*
 * store_id_parse - read a window id: the UUID form of store_id_format
 * (either case) or a plain decimal sequence number (1..2^64-1).
 * id: receives the sequence number. The id is not looked up: a
 * well-formed id of a window that is gone parses fine.
 * Errors: -EINVAL (neither form, or 0), ISOPROF_ENOTFOUND (a version 8 id
 * of another store). Thread: any.
 */
int store_id_parse(const struct store *s, const char *text, uint64_t *id);

/* --- per-version aggregates ---
 *
 * One merged CPU profile per (worker, version), kept apart from the windows
 * it was folded from: window retention never evicts it, so a version
 * replaced hours ago is still a baseline for the next one. The bytes are
 * the caller's (agent/pprof/regress.h encodes them) and opaque here; they
 * are stored zstd-compressed (level 3, with a checksum) beside the figures
 * the caller gives. Each aggregate is charged to the budget (its key and
 * value, store_stat's agg_bytes), so windows make room for it; the count
 * per worker is what bounds them (store_agg_put's keep).
 */

/* Largest aggregate accepted (uncompressed bytes). */
#define STORE_AGG_RAW_MAX (64u * 1024 * 1024)

/* One aggregate's figures. worker and version as for windows. */
struct store_agg {
    const char *worker, *version;
    uint64_t first_ns, last_ns; /* wall ns: the first window folded in started, the last ended */
    uint64_t windows;           /* windows folded in */
    uint64_t samples, busy;     /* samples folded in, and of those the non-idle ones */
    uint64_t raw_size;          /* output: the aggregate's bytes, uncompressed */
    uint64_t stored_size;       /* output: what its entry takes (key and value) */
};

/*
 * store_agg_put - store (or replace) the aggregate of a->worker/a->version:
 * its figures (a, borrowed; raw_size and stored_size are filled in) and
 * bytes[0..len) (borrowed; len 1..STORE_AGG_RAW_MAX), then keep at most
 * keep aggregates of the worker (0: no limit): the others go, the one
 * seen last longest ago (last_ns) first, never this one. One write
 * transaction, which also evicts old windows while the stored bytes pass
 * the budget (and on a full map evicts further and tries once more).
 * st: may be NULL; receives the windows evicted.
 * *dropped (optional) receives how many aggregates keep removed.
 * Errors: -EINVAL (NULL or too long labels, len 0 or over
 * STORE_AGG_RAW_MAX, last_ns before first_ns, busy over samples), -EROFS,
 * -E2BIG (alone larger than the budget), -ENOMEM, ISOPROF_EZSTD,
 * ISOPROF_EMAPFULL, -ENOSPC, -EIO, ISOPROF_ECORRUPT; on failure nothing
 * changed. Thread: as store_put, and never concurrently with it.
 */
int store_agg_put(struct store *s, struct store_agg *a, const void *bytes, size_t len,
                  unsigned keep, size_t *dropped, struct store_put_stats *st);

/*
 * store_agg_get - the aggregate of worker/version: its figures into *out
 * (optional; its strings are worker and version as given) and its bytes
 * into *bytes (optional; an allocation the caller frees with isoprof_free,
 * *len bytes). Errors: -EINVAL, ISOPROF_ENOTFOUND (none; also in a store of
 * schema 11 or older read as it is), ISOPROF_ECORRUPT (the entry or its
 * frame is damaged), -ENOMEM, -errno. Thread: any, concurrently with
 * everything but store_close.
 */
int store_agg_get(struct store *s, const char *worker, const char *version, struct store_agg *out,
                  void **bytes, size_t *len);

/* Called per aggregate; a and its strings borrowed for the call. Nonzero
 * stops the listing and is returned. */
typedef int (*store_agg_cb)(const struct store_agg *a, void *arg);

/*
 * store_aggs - the figures of every aggregate of worker (NULL: of every
 * worker), in key order (worker, then version), from one read
 * transaction; no payload is inflated. An entry that does not decode is
 * skipped (store_check reports it). Errors: -EINVAL, ISOPROF_ECORRUPT,
 * -errno. Thread: any.
 */
int store_aggs(struct store *s, const char *worker, store_agg_cb cb, void *arg);

/* --- anomalies --- */

/* struct store_anomaly.flags */
#define STORE_ANOMALY_OPEN 0x1u /* the episode is still going on */
/* version_regression: more samples overturned the verdict; the record
 * keeps the last comparison (no function counts as a regression any more). */
#define STORE_ANOMALY_CLEARED 0x2u

/* Where a memory anomaly's limit came from (struct store_anomaly.limit_source);
 * values are stored, never renumber. */
enum store_limit_source {
    STORE_LIMIT_NONE = 0,      /* no limit: a latency anomaly, or one recorded before schema 11 */
    STORE_LIMIT_CONFIG,        /* memory_limit / threads.memory_limit in the config */
    STORE_LIMIT_V8_DEFAULT,    /* V8's default for the host's memory */
    STORE_LIMIT_FLAG,          /* a V8 heap flag on the command line */
    STORE_LIMIT_NODE_OPTIONS,  /* ... in NODE_OPTIONS */
    STORE_LIMIT_DENO_V8_FLAGS, /* ... in DENO_V8_FLAGS */
    STORE_LIMIT_WORKERD,       /* workerd's fixed isolate limit */
    STORE_LIMIT_PROCESS,       /* a worker thread: its process's limit */
};
#define STORE_LIMIT_SOURCE_MAX 7u

/* store_limit_source_name - "config", "auto:v8-default", "auto:flag",
 * "auto:NODE_OPTIONS", "auto:DENO_V8_FLAGS", "auto:workerd",
 * "auto:process"; NULL for STORE_LIMIT_NONE and values out of range.
 * Thread: any. */
const char *store_limit_source_name(unsigned src);

/* A version_regression's findings: at most STORE_REGRESSION_FNS_MAX
 * functions, names and files of at most STORE_REGRESSION_NAME_MAX bytes
 * (no NUL; the caller cuts longer ones). */
#define STORE_REGRESSION_FNS_MAX 16u
#define STORE_REGRESSION_NAME_MAX 255u

/* One function that grew. Shares are of the version's non-idle samples. */
struct store_regression_fn {
    const char *name, *file;          /* "" when unknown */
    uint64_t before, after;           /* cumulative samples, baseline and new version */
    double share_before, share_after; /* 0..1 */
    double z;                         /* the two-proportion test's z (> 0: grew) */
    double p_adj;                     /* its p-value, corrected for the functions compared */
};

/* What a version_regression found (struct store_anomaly.regression). */
struct store_regression {
    const char *baseline; /* the version compared against (1..STORE_VERSION_MAX bytes) */
    uint64_t busy_before, busy_after; /* non-idle samples of each side */
    /* CPU per sample period of each side: the share of the sampled time the
     * isolates were not idle (0..1); negative when not known. */
    double cpu_before, cpu_after;
    const struct store_regression_fn *fns; /* nfns, largest growth first */
    size_t nfns;
};

/*
 * One anomaly: an episode of one kind on one isolate (memory kinds) or one
 * worker/version (latency, version_regression: isolate 0). value and
 * threshold are bytes for the memory kinds, nanoseconds for
 * latency_p999_spike, and for version_regression parts per million of the
 * CPU: the largest growth of a function's share and anomaly.regression's
 * min_delta.
 */
struct store_anomaly {
    uint64_t id;                  /* >= 1, assigned by store_anomaly_put */
    uint8_t kind;                 /* enum store_anomaly_kind, not NONE */
    const char *worker, *version; /* limits as for windows */
    /* The thread of the isolate (latency anomalies: the thread whose
     * requests were timed, usually "main"); limits and NULL/"" = "main" as
     * for windows. Output: never NULL, borrowed for the callback; anomalies
     * recorded before schema 5 read as "main". */
    const char *thread;
    uint32_t isolate;
    uint64_t start_ns, end_ns; /* wall ns; end: the last update (the end once closed) */
    uint64_t value;            /* the peak of the measure in the episode */
    uint64_t threshold;        /* what it was compared with */
    /* The memory kinds: the isolate's heap limit in bytes and where it
     * came from (enum store_limit_source); 0 and STORE_LIMIT_NONE for
     * latency and for anomalies recorded before schema 11. */
    uint64_t limit;
    uint8_t limit_source;
    uint32_t flags; /* STORE_ANOMALY_OPEN, STORE_ANOMALY_CLEARED */
    /* version_regression only (NULL for the other kinds, which refuse one):
     * its findings. Input of store_anomaly_put (borrowed for the call; an
     * update given NULL keeps what the record holds); output of
     * store_anomalies, borrowed for the callback. */
    const struct store_regression *regression;
    /* Output of store_anomalies: the ids of the pinned windows, oldest
     * first, borrowed for the callback (ignored by store_anomaly_put). */
    const uint64_t *windows;
    size_t nwindows;
};

/*
 * store_anomaly_put - record a new anomaly (a->id == 0) or update one.
 *
 * New: every field but id and windows is stored (a NULL or "" thread as
 * "main"); a->id receives the new id (a->start_ns moves by a nanosecond or
 * more in the unlikely case that an anomaly of that kind, isolate and
 * start exists). Update (a->id set): end_ns, value, threshold, limit,
 * limit_source, flags and (when given) regression are replaced; kind,
 * labels (thread too), isolate and start are those of the existing
 * anomaly.
 * pin_latest_types: bits (1 << STORE_TYPE_CPU, 1 << STORE_TYPE_HEAP,
 * 1 << STORE_TYPE_RETAINED, 1 << STORE_TYPE_SNAPSHOT; other bits are
 * ignored): also pin the newest stored window of each such type of the anomaly's
 * worker/version/isolate that started by end_ns (oom_suspected: the last
 * profiles before the death).
 * An anomaly keeps at most 1024 windows (the newest); the index keeps at
 * most 100,000 anomalies (the oldest are dropped). One write transaction.
 * Errors: -EINVAL (bad kind or labels, thread too long or not printable
 * ASCII, a regression given to another kind, one with a baseline, a
 * function count or a name out of bounds), -EROFS, ISOPROF_ENOTFOUND (update
 * of an id that is gone), -ENOMEM, ISOPROF_EMAPFULL, -ENOSPC, -EIO,
 * ISOPROF_ECORRUPT. On failure *a is unchanged and nothing is written.
 * Thread: as store_put, and never concurrently with it.
 */
int store_anomaly_put(struct store *s, struct store_anomaly *a, unsigned pin_latest_types);

/*
 * store_anomaly_pin_windows - pin to anomaly id the newest windows of type
 * (enum store_type) of worker/version, of any isolate, that started in
 * [since_ns, until_ns) (0: unbounded), at most max of them (newest first;
 * the anomaly keeps its STORE_ANOMALY_WINDOWS_MAX newest as always). One
 * write transaction; windows already pinned to it are left as they are;
 * each pinned window still waiting for upload moves to the front of the
 * outbox. *pinned (optional) receives how many were newly pinned.
 * Errors: -EINVAL, -EROFS, ISOPROF_ENOTFOUND (no anomaly id), -ENOMEM,
 * ISOPROF_EMAPFULL, -ENOSPC, -EIO, ISOPROF_ECORRUPT. Thread: as
 * store_anomaly_put.
 */
int store_anomaly_pin_windows(struct store *s, uint64_t id, const char *worker, const char *version,
                              uint8_t type, uint64_t since_ns, uint64_t until_ns, size_t max,
                              size_t *pinned);

struct store_anomaly_filter {
    uint8_t kind;                 /* 0 = any */
    const char *worker, *version; /* NULL = any */
    const char *thread;           /* NULL = any; "" = "main" */
    uint64_t since_ns, until_ns;  /* overlapping [since, until); 0 = unbounded */
    uint64_t id;                  /* nonzero: only that anomaly */
};

/* Called per matching anomaly; a and its strings and windows are borrowed
 * for the call. Nonzero stops the scan and is returned. */
typedef int (*store_anomaly_cb)(const struct store_anomaly *a, void *arg);

/*
 * store_anomalies - call cb for each anomaly matching f (NULL: all), in one
 * read transaction. Order: with a kind, start time ascending; without, the
 * order they were flagged (id). Errors: -EINVAL, ISOPROF_ECORRUPT, -errno.
 * Thread: any, concurrently with everything but store_close.
 */
int store_anomalies(struct store *s, const struct store_anomaly_filter *f, store_anomaly_cb cb,
                    void *arg);

/* --- the upload outbox ---
 *
 * With store_options.outbox set, store_put queues each window it stores in
 * the same transaction. An entry leaves the outbox only by
 * store_outbox_ack (the server took it), store_outbox_reject (refused for
 * good; the window stays) or with its window (eviction, replacement).
 * Windows taken for an anomaly, or pinned to one while still pending, are
 * drained first.
 */

/*
 * store_outbox_cb - one pending window. w and its strings are borrowed for
 * the call (as for store_window_cb); queued_ns is the wall time it was
 * queued. Return 0 to continue, nonzero to stop (returned by the peek).
 */
typedef int (*store_outbox_cb)(const struct store_window *w, uint64_t queued_ns, void *arg);

/*
 * store_outbox_peek - call cb for at most max pending windows in drain
 * order: those taken for or pinned to an anomaly first, then the others,
 * each group in the order they were stored. Reads metadata only (one read
 * transaction; no payload is inflated): fetch a payload with store_load.
 * Returns 0, the callback's nonzero value, -EINVAL, ISOPROF_ECORRUPT or
 * -errno. Thread: any, concurrently with everything but store_close.
 */
int store_outbox_peek(struct store *s, size_t max, store_outbox_cb cb, void *arg);

/*
 * store_outbox_ack - the server acknowledged windows ids[0..n): take them
 * out of the outbox (one write transaction). Ids no longer pending (gone,
 * replaced, already acknowledged) are ignored. Errors: -EINVAL, -EROFS,
 * -ENOMEM, ISOPROF_EMAPFULL, -ENOSPC, -EIO, ISOPROF_ECORRUPT; on failure
 * nothing changed. Thread: any; may run concurrently with store_put (LMDB
 * serialises write transactions), not with another ack or reject.
 */
int store_outbox_ack(struct store *s, const uint64_t *ids, size_t n);

/*
 * store_outbox_reject - windows ids[0..n) can never be uploaded: take them
 * out of the outbox and record status (the HTTP status, 0 when refused
 * before sending) and reason (NUL-terminated, cut to
 * STORE_REJECT_REASON_MAX bytes; NULL = ""). The windows stay in the store.
 * Ids not pending are ignored. Errors and thread: as store_outbox_ack.
 */
int store_outbox_reject(struct store *s, const uint64_t *ids, size_t n, unsigned status,
                        const char *reason);

/*
 * store_outbox_peek_late - store_outbox_peek, except that within each
 * group (anomaly evidence, then the rest) the windows that started before
 * late_ns come after the others: after an outage, windows the server will
 * still take for a while go before those about to leave its acceptance
 * window, which may not make it in time. A window that started before
 * expire_ns (<= late_ns) is handed out in the first pass with the young
 * ones, so that the caller can expire it at once (store_outbox_expire)
 * rather than after the backlog. late_ns 0 is store_outbox_peek. The
 * callback decides where to stop (max bounds the windows handed out).
 * Errors and thread: as store_outbox_peek.
 */
int store_outbox_peek_late(struct store *s, uint64_t late_ns, uint64_t expire_ns, size_t max,
                           store_outbox_cb cb, void *arg);

/*
 * store_outbox_expire - windows ids[0..n) are older than the server
 * accepts (upload.max_age): take them out of the outbox and record them as
 * expired (upload state STORE_UPLOAD_EXPIRED, reject_status
 * STORE_REJECT_EXPIRED, reason as for store_outbox_reject). They stay in
 * the store. Errors and thread: as store_outbox_ack.
 */
int store_outbox_expire(struct store *s, const uint64_t *ids, size_t n, const char *reason);

struct store_stat {
    uint32_t schema_version;
    uint64_t windows, windows_cpu, windows_heap;
    uint64_t windows_retained, windows_snapshot;
    uint64_t raw_bytes;            /* sum of uncompressed pprof sizes (and snapshots' JSON bytes) */
    uint64_t stored_bytes;         /* the budget counter: sum of stored_size, plus
                                      the dictionaries (dict_bytes) */
    uint64_t budget;               /* as recorded by the last writable open */
    uint64_t map_size;             /* LMDB map size */
    uint64_t file_size;            /* data.mdb on disk */
    uint64_t evicted_total;        /* windows evicted since the store was created */
    uint64_t oldest_ns, newest_ns; /* start of the oldest / newest window; 0 if none */
    uint64_t anomalies;            /* in the index */
    uint64_t windows_pinned;       /* windows held by at least one anomaly */
    uint64_t outbox_pending;       /* windows waiting for upload */
    uint64_t outbox_oldest_ns;     /* when the oldest pending one was queued; 0 if none */
    uint64_t outbox_rejected;      /* windows refused for good (still stored; expired
                                      ones included) */
    uint64_t outbox_expired;       /* of those, expired: too old to be sent */
    uint64_t outbox_uploaded;      /* acknowledged since the store was created */
    uint64_t outbox_evicted;       /* evicted (or replaced) while still pending */
    uint64_t dicts;                /* compression dictionaries (one per worker/version) */
    uint64_t dict_bytes;           /* what they take (keys and values; in stored_bytes) */
    /* Sums of the windows' frames_mapped and frames_unmapped, and the
     * windows with at least one mapped frame. */
    uint64_t frames_mapped, frames_unmapped, windows_mapped;
    /* Snapshot chunks: all of them (entries, and their key and value bytes,
     * which are in stored_bytes), and those of a snapshot being streamed
     * in (store_blob_write has committed them, store_blob_commit not yet;
     * left by a writer that crashed until the next writable open). */
    uint64_t blob_chunks, blob_bytes;
    uint64_t blob_pending_chunks, blob_pending_bytes;
    /* Chunks of snapshots that never committed (a crash, an abort whose
     * delete failed) that this handle's store_open dropped, and their
     * bytes; always 0 on read-only handles. */
    uint64_t orphan_chunks, orphan_bytes;
    /* Per-version aggregates (store_agg_put) and what they take (keys and
     * values, in stored_bytes). */
    uint64_t aggs, agg_bytes;
};

/*
 * store_stat - counts and sizes, from one read transaction. Reads every
 * record header and chunk key (not the payloads), so it is O(windows +
 * chunks).
 * Errors: -EINVAL, ISOPROF_ECORRUPT, -errno. Thread: any.
 */
int store_stat(struct store *s, struct store_stat *st);

/*
 * store_check - verify every record and index in one read transaction:
 * keys and headers decode (a header's thread label is 1 to
 * STORE_THREAD_MAX bytes of printable ASCII, its window labels are what
 * store_labels_check accepts), each zstd frame inflates to exactly its
 * raw size (and its checksum holds) with the dictionary its
 * header names, every dictionary is intact, named by its (worker, version)
 * and counted exactly by the records naming it, windows <-> by_time <-> ids
 * agree, the anomalies and their pins agree, every outbox and rejected
 * entry names a queued window (once), each snapshot window's chunks are
 * all there, in sequence, add up to the sizes its record gives and
 * inflate to its raw size (one zstd frame, checksum good), every chunk
 * belongs to a snapshot window or to the snapshot being streamed in (else
 * it is an orphan: a finding), and the meta counters (next seq, stored
 * bytes) match the data.
 * why: if non-NULL, receives on ISOPROF_ECORRUPT an allocated text with one
 *   problem per line (each ending in '\n', at most 100 lines plus a count
 *   of the rest); the caller frees it with isoprof_free. Set to NULL when
 *   clean.
 * Returns 0 if clean, ISOPROF_ECORRUPT, or -ENOMEM / -errno if the check
 * itself could not run. Works on read-only handles. Thread: any.
 */
int store_check(struct store *s, char **why);

/* store_verify flags */
#define STORE_VERIFY_RECORDS 0x1u /* also store_check's record checks (inflates every frame) */

/*
 * store_verify - judge the store at path without risking the caller: a
 * damaged file makes this return a report, never fault.
 *
 * First data.mdb's meta pages against the file (as store_open does). Then
 * a forked child opens the environment read-only and walks every database
 * (the free list, the main database and each database it names) with a
 * cursor: each key and value must lie inside the file and is read at both
 * ends, each key must find its own record again, each free list entry must
 * name pages in the file's range, each database must hold as many records
 * as its header counts. With STORE_VERIFY_RECORDS the child then opens the
 * store read-only and runs store_check. A child that faults (SIGSEGV,
 * SIGBUS, SIGILL, SIGFPE, SIGABRT) is a finding: "the walk faulted
 * (SIGBUS) in DB windows after 1234 records". A child that cannot start,
 * or is killed by another signal (SIGKILL from the OOM killer) or the
 * bound, is none: the check could not be done. A store that passes can be
 * opened and read without a fault.
 *
 * path: the store directory, borrowed. timeout_ms: the longest the whole
 *   check may take, the free list child (a file shorter than its last
 *   page) and the walk together (0: no bound for the walk, 60 s for the
 *   free list); then the child is killed.
 * why: if non-NULL, receives on failure an allocated text the caller frees
 *   with isoprof_free: for ISOPROF_EDAMAGED and ISOPROF_ECORRUPT one
 *   problem per line, each ending in '\n' (at most 100 lines from the
 *   walk, and store_check's report), for -ETIMEDOUT where the walk was
 *   (ending in '\n' too); when the check could not be done one line,
 *   "path: could not check the store: the walk was killed (SIGKILL) in DB
 *   windows after 12 records"; for the others store_open's one-line
 *   message. NULL on success.
 *
 * Returns 0 (intact), -ENOENT (no store there yet: no data.mdb, or an
 * empty one), ISOPROF_EDAMAGED (the file or the structure is damaged),
 * ISOPROF_ECORRUPT (STORE_VERIFY_RECORDS: store_check's findings),
 * ISOPROF_EMAGIC, ISOPROF_ESCHEMA (as a read-only store_open; the walk
 * alone reads any LMDB file, so without STORE_VERIFY_RECORDS only when
 * data.mdb is not LMDB or another LMDB format). The check could not be
 * done, which says nothing of the store: -ETIMEDOUT (the bound passed),
 * -ECANCELED (a child was killed by another signal than a fault's, or died
 * without a result), -ENOMEM, -EMFILE, -EAGAIN and other -errno of
 * starting a child (pipe, mapping, fork), of its opening the store
 * (-EACCES: no lock.mdb and no right to create one) or of looking at
 * data.mdb. isoprofd starts without a verdict then; `isoprof store check`
 * says it could not check.
 *
 * The child is forked from the calling thread and allocates and opens
 * LMDB after fork(): call it before starting threads (isoprofd and isoprof
 * do, at start). It takes a reader slot of the environment while it runs;
 * a slot left by a child that faulted is freed by the next writable
 * store_open.
 * Thread: any (see above); blocks for as long as the walk takes.
 */
int store_verify(const char *path, unsigned flags, uint64_t timeout_ms, char **why);

#endif

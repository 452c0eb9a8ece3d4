/*
 * internal.h - what the files of storage/ share: the handle, the on-disk
 * encodings (window key, record header) and the LMDB helpers.
 *
 * On-disk layout, schema version 8 (all integers big-endian):
 *
 *   windows  key   worker \0 version \0 start_ns:u64 isolate:u32 type:u8
 *            (type 1 cpu, 2 heap, 3 retained, 4 snapshot)
 *            value record header (below) + one zstd frame of the pprof
 *            (codec 1), or for a snapshot window (type 4, codec 2) the
 *            blob descriptor: chunks:u32 reserved:u32 (zero)
 *            compressed_bytes:u64 (the sum of its chunks' value sizes)
 *   blobs    key   seq:u64 chunk:u32                     value chunk bytes
 *            the compressed content of snapshot window seq: one zstd frame
 *            (level 3, checksum, no content size) cut into pieces of
 *            STORE_BLOB_CHUNK bytes (the last one shorter), chunk 0 to
 *            chunks - 1 in order; stored by store_blob_write, each chunk
 *            in a transaction of its own before the window exists
 *   by_time  key   start_ns:u64 + window key            value empty
 *   ids      key   seq:u64                               value window key
 *   outbox   key   prio:u8 seq:u64                       value queued_ns:u64
 *            prio 0: taken for or pinned to an anomaly, 1: the others;
 *            at most one entry per seq (see outbox.c)
 *   rejected key   seq:u64                               value status:u16 +
 *            reason (0 to STORE_REJECT_REASON_MAX bytes, no NUL)
 *   meta     "format"       "ISOPROF\0" + schema:u32
 *            "instance"     u64  random id of this store (in window UUIDs)
 *            "next_seq"     u64  the id store_put gives next
 *            "evicted"      u64  windows evicted since creation
 *            "stored_bytes" u64  sum of stored_size of all windows, plus
 *                                the dictionaries' charge
 *            "budget"       u64  max_size of the last writable open
 *            "uploaded"     u64  outbox entries acknowledged since creation
 *            "outbox_evicted" u64  windows evicted or replaced while pending
 *            "next_dict"    u64  the dictionary id store_put gives next
 *            "blob_open"    u64  seq of the snapshot being streamed in (its
 *                                chunks are committed, its window not yet);
 *                                0: none
 *   dicts    key   dict_id:u32 (>= 1)                   value dictionary:
 *            0 magic:u8 = 0xD1   1 version:u8 = 1   2 series_len:u16
 *            4 size:u32   8 created_ns:u64   16 hash:u64 (FNV-1a of the bytes)
 *            24 series (worker \0 version \0)   then size bytes of raw content
 *   dict_by_series key  worker \0 version \0          value dict_id:u32 +
 *            refs:u64 (records naming the dictionary; never 0: at 0 both
 *            entries go)
 *
 *   record header, version 5 (104 bytes + runtime + thread + container +
 *   labels):
 *     0 magic:u8 = 0xA5   1 version:u8 = 5   2 codec:u8 = 1 (zstd frame)
 *     or 2 (blob descriptor; version 5 and window type 4 only)
 *     3 runtime_len:u8 (<= 31)   4 flags:u32   8 end_ns:u64   16 samples:u64
 *     24 interval:u64   32 raw_size:u64   40 seq:u64   48 anomaly:u8
 *     49 thread_len:u8 (1 to STORE_THREAD_MAX)
 *     50 container_len:u8 (0 to STORE_CONTAINER_MAX)   51 reserved (zero)
 *     52 dict_id:u32 (0: none; was reserved before schema 4, so older
 *     records read as 0)   56 mem_min:u64   64 mem_max:u64   72 mem_last:u64
 *     80 mem_p999:u64   88 pid:u32 (0: unknown)   92 frames_mapped:u32
 *     96 frames_unmapped:u32   100 labels_len:u16 (0 to
 *     STORE_WINDOW_LABELS_BYTES)   102 reserved (2 zero bytes)
 *     104 runtime bytes
 *     then thread_len bytes of thread (printable ASCII, 0x20 to 0x7e)
 *     then container_len bytes of container ([0-9A-Za-z_.-])
 *     then labels_len bytes of window labels: name \0 value \0 per label,
 *     in the order store_put was given them (each as store_labels_check
 *     accepts: at most STORE_WINDOW_LABELS_MAX, names unique)
 *     then the zstd frame (codec 1) or the blob descriptor (codec 2)
 *   The label bytes sit inside the record so that its size, the budget's
 *   measure, charges them; their NULs make them C strings in place, so a
 *   listing hands them out without a copy. The fixed part grew at its end
 *   (12 bytes, 2 of them reserved so that it stays a multiple of 4)
 *   rather than into reserved byte 51: every offset of version 4 keeps
 *   its meaning, and version 4's fixed part is version 5's cut at 92.
 *   Version 4 records (schema 6 stores) are the first 92 bytes of version
 *   5 then the runtime, thread and container; they read as no frames
 *   mapped nor unmapped and no labels. Version 3 records (schema 5
 *   stores) are the first 88 bytes of version 4 (byte 50 reserved, zero;
 *   no pid) then the runtime and the thread; they read as pid 0 and
 *   container "" too. Version 2 records (schema 2 to 4 stores) are
 *   version 3 without the thread: byte 49 is reserved (zero) and the
 *   frame follows the runtime; they read as thread "main" too.
 *   Version 1 records (schema 1 stores) are the first 48 bytes of version
 *   2, the runtime at offset 48; they read as anomaly 0 and no memory
 *   figures too. Records are never rewritten to a newer version: a store
 *   holds all five after upgrades. A snapshot record's raw_size (its
 *   JSON bytes) may reach STORE_SNAPSHOT_RAW_MAX, a pprof's
 *   STORE_RAW_MAX.
 *   flags bit STORE_FLAG_QUEUED: the window went into the outbox when it
 *   was stored, so queued + no outbox entry + no rejected entry = uploaded.
 *
 * A window's stored_size is what its entries take: windows key + value
 * (its runtime, thread and container labels and its window labels byte
 * for byte), by_time key, ids key + value, and for a queued window its
 * outbox entry (STORE_OUTBOX_CHARGE, kept after the ack so that the size
 * depends on the record alone; see store_stored_size()). Rejected entries
 * are not charged. A snapshot window is also charged its chunks (key and
 * value each, store_window_size()); they are added to stored_bytes one by
 * one as store_blob_write commits them, so stored_bytes also counts the
 * chunks of a stream not yet committed (meta "blob_open") and of orphans
 * until a writable open drops them.
 *
 * A window's dictionary is charged once, not per window: its dicts entry
 * (key + value) and its dict_by_series entry (key + value), see
 * store_dict_charge(); stored_bytes is the windows' stored_size plus that.
 *
 * Schemas 1 and 2 lack the outbox DBs and counters (and 1 the anomaly DBs),
 * 3 the dictionary DBs, 1 to 7 the blobs DB and "blob_open" (no window
 * of type 3 or 4); 4 differs otherwise only in writing version
 * 2 records and version 1 anomalies (no thread); 5 differs only in writing
 * version 3 records (no pid, no container); 6 only in writing version 4
 * records (no source-map figures, no window labels); 7 only by the blobs.
 * A writable open adds what is missing and sets the version, nothing else
 * changes (old records
 * name dictionary 0 and read as thread "main", pid 0, container "", no
 * frames mapped or unmapped, no labels). A read-only handle reads schema 3
 * (no dictionaries), 4, 5, 6 and 7 as they are (no blobs).
 *
 *   anomalies, anomaly_ids, pins: see anomaly.c.
 *   aggs     worker \0 version \0 -> a per-version aggregate: see agg.c
 *            (schema 12; older stores lack the DB and kind 5 anomalies).
 *   meta     "next_anomaly" u64  the id store_anomaly_put gives next (absent:
 * 1)
 */
#ifndef ISOPROF_STORE_INTERNAL_H
#define ISOPROF_STORE_INTERNAL_H

#include "store.h"

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>

#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_customMem: zstd allocates through                         \
                                    base.h */
#include <zstd.h>
#include <zstd_errors.h>

#define STORE_ZSTD_LEVEL 3
#define STORE_MAXDBS 16
#define STORE_DEFAULT_BUDGET (1ull << 30)
#define STORE_MAP_EXTRA (16ull << 20)
/* The mode of the files LMDB creates (data.mdb, lock.mdb), before the
 * umask. Every mdb_env_open passes it, the verification children's too:
 * LMDB creates a missing lock.mdb even for a read-only open, and with mode
 * 0 the store's owner could no longer open it. */
#define STORE_FILE_MODE 0640

#define STORE_META_MAGIC "ISOPROF\0"
#define STORE_META_MAGIC_LEN 8

#define STORE_REC_MAGIC 0xA5u
#define STORE_REC_VERSION 5u
#define STORE_CODEC_ZSTD 1u
#define STORE_CODEC_BLOB 2u    /* snapshot window: the payload is a blob descriptor */
#define STORE_BLOB_DESC 16u    /* chunks:u32 reserved:u32 compressed_bytes:u64 */
#define STORE_BLOB_KEY_LEN 12u /* seq:u64 chunk:u32 */
#define STORE_REC_FIXED_V1 48u
#define STORE_REC_FIXED_V2 88u /* versions 2 and 3 */
#define STORE_REC_FIXED_V4 92u /* version 4 */
#define STORE_REC_FIXED 104u   /* version 5 */
#define STORE_REC_SEQ_OFF 40u
#define STORE_REC_THREAD_OFF 49u    /* thread_len, versions 3 to 5 */
#define STORE_REC_CONTAINER_OFF 50u /* container_len, versions 4 and 5 */
#define STORE_REC_DICT_OFF 52u
#define STORE_REC_PID_OFF 88u      /* versions 4 and 5 */
#define STORE_REC_MAPPED_OFF 92u   /* frames_mapped, version 5 */
#define STORE_REC_UNMAPPED_OFF 96u /* frames_unmapped, version 5 */
#define STORE_REC_LABELS_OFF 100u  /* labels_len:u16, version 5 */
#define STORE_REC_MAX                                                                              \
    (STORE_REC_FIXED + STORE_RUNTIME_MAX + STORE_THREAD_MAX + STORE_CONTAINER_MAX +                \
     STORE_WINDOW_LABELS_BYTES)

#define STORE_OUTBOX_KEY_LEN 9u /* prio + seq */
#define STORE_OUTBOX_VAL_LEN 8u /* queued_ns */
#define STORE_OUTBOX_CHARGE (STORE_OUTBOX_KEY_LEN + STORE_OUTBOX_VAL_LEN)
#define STORE_OUTBOX_PRIO_ANOMALY 0u
#define STORE_OUTBOX_PRIO_OTHER 1u
#define STORE_REJECT_FIXED 2u /* status */

/* Dictionaries (dict.c): built for a (worker, version) once it has
 * STORE_DICT_AFTER windows without one, from the raw pprof of its newest
 * windows, at most STORE_DICT_MAX bytes; none if that is below
 * STORE_DICT_MIN. STORE_DICT_SCAN bounds the windows read to build one. */
#define STORE_DICT_AFTER 8u
#define STORE_DICT_MAX (32u * 1024)
#define STORE_DICT_MIN 256u
#define STORE_DICT_SCAN 64u
#define STORE_DICT_MAGIC 0xD1u
#define STORE_DICT_VERSION 1u
#define STORE_DICT_HDR 24u
#define STORE_DICT_SERIES_VAL 12u /* dict_id + refs */
#define STORE_CDICT_CACHE 16u     /* compression dictionaries kept by a writer */

#define STORE_KEY_TAIL 13u /* start_ns + isolate + type */
#define STORE_TIME_KEY_MAX 511u
#define STORE_KEY_MAX (STORE_TIME_KEY_MAX - 8u)

/* A writer's prepared compression dictionary. pending: built by the write
 * transaction in progress (dropped if it aborts, the id may come again). */
struct store_cdict {
    uint32_t id;
    int pending;
    uint64_t used; /* LRU tick */
    void *mem;     /* the memory cd lives in */
    const ZSTD_CDict *cd;
};

struct store {
    MDB_env *env;
    MDB_dbi windows, by_time, ids, meta;
    MDB_dbi anomalies, anomaly_ids, pins;
    MDB_dbi outbox, rejected;
    MDB_dbi dicts, dict_by_series;
    MDB_dbi blobs;
    MDB_dbi aggs;
    int dicts_on; /* the dictionary DBs exist (not so in a schema 3 store read as it is) */
    int blobs_on; /* the blobs DB exists (not so in a schema 3 to 7 store read as it is) */
    int aggs_on;  /* the aggs DB exists (not so in a schema 3 to 11 store read as it is) */
    int readonly;
    int outbox_on; /* writer opened with store_options.outbox: store_put queues */
    uint32_t schema;
    uint64_t instance;
    uint64_t budget;     /* writer: from the options; reader: from meta */
    uint32_t pin_factor; /* pinned windows outlive unpinned ones this many times */
    char *path;
    ZSTD_CCtx *cctx; /* writer only; used by store_put, which is not reentrant */
    /* Writer only, store_put's like cctx: no lock. Readers never use it. */
    struct store_cdict cdicts[STORE_CDICT_CACHE];
    uint64_t cdict_tick;
    uint32_t dict_built_min; /* lowest id the write txn in progress built; 0: none */
    /* Writer only, as cctx: the snapshot stream in progress (NULL: none),
     * and whether an abort left chunks it could not delete (the next
     * stream's first transaction drops them). */
    struct store_blob *blob;
    int blob_leftover;
    uint64_t orphan_chunks, orphan_bytes; /* dropped by store_open */
    /* Read-only handles: where LMDB mapped data.mdb (NULL: not known, or
     * a writer, whose write txns hand out dirty pages from the heap). */
    const uint8_t *map_lo, *map_hi;
    /* The decoder of the last snapshot read (NULL: none kept), taken by
     * the next read on any thread (an atomic exchange; a read that finds
     * none makes its own) and freed by store_close. A snapshot's frame
     * declares a 2 MiB window, which a new decoder would map and fault in
     * for every read, however small the snapshot: store_check reads them
     * all. At most one is kept, about 2.2 MiB. */
    ZSTD_DCtx *_Atomic blob_dctx;
};

/*
 * The part of the map that holds data.mdb as it is now: a value or key
 * LMDB hands back must lie inside it before a byte of it is read. LMDB
 * trusts the node sizes and overflow page numbers it finds, so a damaged
 * page can give a pointer past the end of the file (SIGBUS when read) or
 * past the map (SIGSEGV); checked, that is ISOPROF_ECORRUPT instead.
 * lo NULL: not known (a writer, no /proc), nothing is refused.
 */
struct store_bounds {
    const uint8_t *lo, *hi;
};
/* Where fd's file is mapped in this process (at most size bytes of it
 * from the start of the mapping): 0, or -1 if no mapping is found
 * (/proc/self/maps, since lmdb.h does not say where its map is). */
int store_map_find(int fd, uint64_t size, const uint8_t **lo, const uint8_t **hi);
/* s's bounds now (one fstat: the file grows while a writer commits). */
void store_bounds_get(const struct store *s, struct store_bounds *b);
static inline int store_inside(const struct store_bounds *b, const MDB_val *v)
{
    const uint8_t *p = v->mv_data;
    if (b->lo == NULL || v->mv_size == 0)
        return 1;
    return p >= b->lo && p < b->hi && v->mv_size <= (size_t)(b->hi - p);
}

#define STORE_ANOMALY_WINDOWS_MAX 1024u /* windows one anomaly keeps pinned */
#define STORE_PINS_MAX 16u              /* anomalies one window can be pinned by */
#define STORE_ANOMALIES_MAX 100000u     /* anomalies in the index; the oldest go first */
#define STORE_PIN_FACTOR_DEFAULT 4u

/* Is s (len bytes) a thread label: 1 to STORE_THREAD_MAX bytes of printable
 * ASCII? What store_put and store_anomaly_put accept and the decoders
 * require of what is stored. */
static inline int store_thread_ok(const char *s, size_t len)
{
    if (len == 0 || len > STORE_THREAD_MAX)
        return 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

/* Is s (len bytes) a container label: 0 to STORE_CONTAINER_MAX bytes of
 * [0-9A-Za-z_.-]? What store_put accepts and the decoder requires. */
static inline int store_container_ok(const char *s, size_t len)
{
    if (len > STORE_CONTAINER_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* The thread a caller's label stands for: NULL and "" are "main". */
static inline const char *store_thread_of(const char *thread)
{
    return thread == NULL || thread[0] == '\0' ? STORE_THREAD_MAIN : thread;
}

/* A decoded anomalies key; strings NUL-terminated inside the key bytes. */
struct store_anomaly_key {
    uint8_t kind;
    uint64_t start_ns;
    const char *worker, *version;
    uint32_t isolate;
};

/* A decoded window key; the strings point into the key bytes and are
 * NUL-terminated there (the separators). */
struct store_key {
    const char *worker, *version;
    size_t worker_len, version_len;
    uint64_t start_ns;
    uint32_t isolate;
    uint8_t type;
};

/* A decoded record header; payload and the labels point into the record
 * bytes. */
struct store_rec_hdr {
    uint8_t version, codec;
    uint32_t flags;
    uint64_t end_ns, samples, interval, raw_size, seq;
    uint8_t anomaly;
    uint32_t dict; /* dictionary id, 0 = none */
    struct store_mem mem;
    char runtime[STORE_RUNTIME_MAX + 1];
    char thread[STORE_THREAD_MAX + 1];       /* "main" for versions 1 and 2 */
    uint32_t pid;                            /* 0 for versions 1 to 3 */
    char container[STORE_CONTAINER_MAX + 1]; /* "" for versions 1 to 3 */
    uint32_t frames_mapped, frames_unmapped; /* 0 for versions 1 to 4 */
    /* codec STORE_CODEC_BLOB: the descriptor (else 0 and 0). */
    uint32_t chunks;
    uint64_t blob_bytes;
    /* The window labels, pointing into the record bytes (their NULs end
     * them there); none for versions 1 to 4. */
    struct store_label labels[STORE_WINDOW_LABELS_MAX];
    size_t nlabels;
    const uint8_t *payload;
    size_t payload_len;
};

static inline void store_be64_put(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static inline uint64_t store_be64_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static inline void store_be32_put(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static inline uint32_t store_be32_get(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Delete the entry keyed by the u64 id from db; an absent one is fine.
 * Raw LMDB code. */
static inline int store_del_u64(MDB_txn *txn, MDB_dbi db, uint64_t id)
{
    uint8_t ik[8];
    store_be64_put(ik, id);
    MDB_val i = {8, ik};
    int rc = mdb_del(txn, db, &i, NULL);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* An outbox key: prio:u8 seq:u64. */
static inline void store_outbox_key(uint8_t key[STORE_OUTBOX_KEY_LEN], unsigned prio, uint64_t seq)
{
    key[0] = (uint8_t)prio;
    store_be64_put(key + 1, seq);
}

/* store.c */

/* The one place LMDB return codes become project codes (0 stays 0). */
int store_err(int mdb_rc);
/* The end of a read-only walk: txn aborted, MDB_NOTFOUND (the walk ran
 * out) as 0, an LMDB code mapped by store_err, anything else (a callback's
 * own value, a project code) as it is. */
int store_walk_end(MDB_txn *txn, int rc);
/* Begin a read txn; a read-only handle adopts a map the writer grew. */
int store_txn_read(struct store *s, MDB_txn **txn);
int store_meta_get_u64(struct store *s, MDB_txn *txn, const char *name, uint64_t *v);
int store_meta_put_u64(struct store *s, MDB_txn *txn, const char *name, uint64_t v);
/* The bytes a window with a key of klen and a value of vlen takes; flags:
 * its record header's (STORE_FLAG_QUEUED adds the outbox entry), 0 when the
 * header does not decode. Without a snapshot's chunks. */
uint64_t store_stored_size(size_t klen, size_t vlen, uint32_t flags);
/* What a chunk of len bytes takes (key and value). */
static inline uint64_t store_chunk_charge(size_t len)
{
    return STORE_BLOB_KEY_LEN + (uint64_t)len;
}
/* The bytes the window of decoded header h takes: store_stored_size, and
 * a snapshot's chunks as its descriptor gives them. */
uint64_t store_window_size(size_t klen, size_t vlen, const struct store_rec_hdr *h);

/* verify.c */

/* store_verify_file flags. TRUST_SHORT: a file shorter than its last
 * page passes without the free list child (store_verify passed just
 * before: its walk read every page in use). UNFINISHED_OK: a free list
 * check that cannot finish (timeout_ms passes, the child cannot start or
 * is killed by something else than a fault) passes (the caller goes on
 * without a verdict and has said so). */
#define STORE_FILE_TRUST_SHORT 0x1u
#define STORE_FILE_UNFINISHED_OK 0x2u

/* Judge path/data.mdb by its meta pages (pread, nothing mapped): LMDB's
 * magic and format, the page size, the roots within the file, and the
 * file's size against the last page in use (pages missing at its end must
 * be on the free list, which a short-lived child reads, for at most
 * timeout_ms, 0 or above 60 s: 60 s). 0 also when there is no data.mdb or
 * it is empty (LMDB creates or says why not); ISOPROF_EMAGIC (not an LMDB
 * file), ISOPROF_ESCHEMA (another LMDB data format), ISOPROF_EDAMAGED
 * (the meta pages, or the child faulted or found missing pages in use);
 * the check could not be done: -ETIMEDOUT, -ECANCELED (the child was
 * killed by another signal than a fault's, or died without a result),
 * -ENOMEM, -EMFILE, -EAGAIN and other -errno (no pipe, mapping or fork).
 * why (if non-NULL) receives "path: what" on failure, "path: could not
 * check the store: what" when the check could not be done. Allocates
 * nothing else. */
int store_verify_file(const char *path, unsigned flags, uint64_t timeout_ms, char **why);

/* record.c: encodings. No LMDB, no allocation except where noted. */

/* Encode a window key into out (cap bytes). Returns its length, or 0 if it
 * would exceed cap or STORE_KEY_MAX. */
size_t store_key_encode(uint8_t *out, size_t cap, const char *worker, const char *version,
                        uint64_t start_ns, uint32_t isolate, uint8_t type);
/* Decode a window key. 0 or ISOPROF_ECORRUPT. */
int store_key_decode(const void *key, size_t len, struct store_key *k);
/* Decode a record header and locate the payload. 0 or ISOPROF_ECORRUPT. */
int store_record_decode(const void *val, size_t len, struct store_rec_hdr *h);
/* Why store_record_decode refuses val (a static phrase such as "thread
 * label not printable ASCII"), or NULL when it decodes. For store_check. */
const char *store_record_fault(const void *val, size_t len);
/* Inflate and verify a decoded record's payload: the frame's content size
 * and the result must equal raw_size, nothing may follow the frame, the
 * checksum must hold. A record naming a dictionary needs dict (dlen bytes
 * of raw content, borrowed); store_record_inflate passes none, so such a
 * record fails. *out (allocated, caller frees) on success.
 * 0, ISOPROF_ECORRUPT, -ENOMEM. */
int store_record_inflate(const struct store_rec_hdr *h, void **out);
/* Inflate one zstd frame[0..len) (borrowed) that must hold exactly
 * raw_size bytes (its content size says so, nothing follows it, its
 * checksum holds), with raw-content dictionary dict[0..dlen) (NULL: none).
 * *out (allocated, caller frees) on success. 0, ISOPROF_ECORRUPT, -ENOMEM. */
int store_frame_inflate(const void *frame, size_t len, uint64_t raw_size, const void *dict,
                        size_t dlen, void **out);
int store_record_inflate_dict(const struct store_rec_hdr *h, const void *dict, size_t dlen,
                              void **out);
/* Compress r into a new value (header with seq 0 + frame); the header's
 * flags are r's with STORE_FLAG_QUEUED set if queued, cleared if not; its
 * thread is r's (NULL or "" as "main"), which must pass store_thread_ok,
 * its pid r's and its container r's (NULL as ""), which must pass
 * store_container_ok, its frame figures r's and its labels r's, which
 * must pass store_labels_check (store_put checks all three first).
 * With cd (borrowed), the frame is compressed with that dictionary and the
 * header names dict_id. *val is allocated (caller frees).
 * 0, -ENOMEM, ISOPROF_EZSTD. */
int store_record_build(ZSTD_CCtx *cctx, const struct store_record *r, int queued, uint8_t **val,
                       size_t *vlen);
int store_record_build_dict(ZSTD_CCtx *cctx, const ZSTD_CDict *cd, uint32_t dict_id,
                            const struct store_record *r, int queued, uint8_t **val, size_t *vlen);
/* The record of snapshot window w (its checks passed): the header (codec
 * STORE_CODEC_BLOB, end, raw size, seq and flag QUEUED 0) and a zero
 * descriptor; store_record_blob_finish fills them in. *val is allocated
 * (caller frees). 0 or -ENOMEM. */
int store_record_build_blob(const struct store_window *w, uint8_t **val, size_t *vlen);
void store_record_blob_finish(uint8_t *val, size_t vlen, uint64_t end_ns, uint64_t raw_size,
                              uint64_t seq, uint32_t chunks, uint64_t bytes);
/* zstd's allocator hooks into base.h (record.c). */
extern const ZSTD_customMem store_zstd_mem;
/* A compression context whose memory comes from base.h; NULL on ENOMEM. */
ZSTD_CCtx *store_zstd_cctx_new(void);
/* Fill w from a decoded key and header (strings borrowed from them). */
void store_window_fill(struct store_window *w, const struct store_key *k,
                       const struct store_rec_hdr *h, size_t klen, size_t vlen);

/* query.c: reading windows inside a read transaction. */

/* What one read transaction knows up front: which side DBs hold anything,
 * so that a listing looks a window up only in those that do; and room for
 * the decoded header (the runtime, thread and container labels, the
 * window labels' array) and the rejection reason of the window being
 * handed out. */
/*
 * A cursor walk over a damaged tree can come back to keys it has passed (a
 * branch page naming an earlier page) and would then go round for ever.
 * Every walk of a read call feeds each key to store_walk_step, which checks
 * that it lies inside the file and sorts after the one before (LMDB's
 * order: bytes, then length): that also bounds the walk to the keys there
 * are. 0, or ISOPROF_ECORRUPT. Zero the struct and set b to start a walk.
 */
struct store_walk {
    struct store_bounds b;
    uint8_t last[STORE_TIME_KEY_MAX];
    size_t last_len;
    int have_last;
};
int store_walk_step(struct store_walk *w, const MDB_val *k);

struct store_view {
    MDB_txn *txn;
    struct store_bounds b;
    int pins, outbox, rejected;
    struct store_rec_hdr hdr;
    char reason[STORE_REJECT_REASON_MAX + 1];
};
/* Fill v for txn (entry counts of pins, outbox, rejected). Raw LMDB code. */
int store_view_init(struct store *s, MDB_txn *txn, struct store_view *v);
/* The window with id seq: its key (*kv, decoded into *k) and value (*dv),
 * borrowed from the txn. MDB_NOTFOUND when the id, its window or a
 * decodable key is missing; else 0 or a raw LMDB code. */
int store_window_by_seq(struct store *s, MDB_txn *txn, uint64_t seq, MDB_val *kv,
                        struct store_key *k, MDB_val *dv);
/* Decode window value d of key k (klen bytes) into w, with its pins and
 * upload state; w's strings are borrowed from k and v (valid until the
 * next call with v). ISOPROF_ECORRUPT when the header does not decode,
 * else 0 or a raw LMDB code. */
int store_window_read(struct store *s, struct store_view *v, const struct store_key *k, size_t klen,
                      const MDB_val *d, struct store_window *w);

/* put.c: the parts of a write transaction, shared with blob.c. Raw LMDB
 * codes or project codes. */

/* The meta counters a write transaction keeps up to date. */
struct store_counters {
    uint64_t next_seq, stored, evicted_total;
    uint64_t outbox_evicted;         /* windows that went while pending, since creation */
    uint64_t evicted, evicted_bytes; /* this transaction */
};
int store_counters_read(struct store *s, MDB_txn *txn, struct store_counters *c);
int store_counters_write(struct store *s, MDB_txn *txn, const struct store_counters *c);
/* Is w a window store_put or store_blob_begin may store (strings, labels,
 * anomaly; not its type, which each checks itself)? 0 or -EINVAL. */
int store_window_check(const struct store_window *w);
/* Delete the window with key wk (its index entries, pins, outbox entries
 * and a snapshot's chunks), if present. *bytes receives what it took (0
 * if it was not there); c->stored is not changed but for a dictionary
 * that went with it. */
int store_window_delete(struct store *s, MDB_txn *txn, struct store_counters *c, const uint8_t *wk,
                        size_t klen, uint64_t *bytes);
/* Evict the oldest windows (unpinned first, see put.c) while c->stored
 * exceeds target. */
int store_evict_to(struct store *s, MDB_txn *txn, struct store_counters *c, uint64_t target);
/* After MDB_MAP_FULL: a transaction of its own evicting down to target;
 * *out receives its counters. */
int store_evict_txn(struct store *s, uint64_t target, struct store_counters *out);
/* After MDB_MAP_FULL on a write of need bytes: store_evict_txn down to
 * budget - need - budget/8 (room for the retry), what it evicted added to
 * *evicted and *evicted_bytes. */
int store_evict_room(struct store *s, uint64_t need, uint64_t *evicted, uint64_t *evicted_bytes);
/* End write transaction txn: commit it when rc is 0, else abort it; the
 * dictionaries it built are kept or dropped with it (dict.c). Returns rc,
 * or the commit's error. */
int store_txn_end(struct store *s, MDB_txn *txn, int rc);

/* blob.c: snapshot chunks inside the caller's transaction. Raw LMDB codes
 * or project codes. */

/* Delete the chunks of seq; *n and *bytes receive their number and charge. */
int store_blob_drop_txn(struct store *s, MDB_txn *txn, uint64_t seq, uint64_t *n, uint64_t *bytes);
/* Write txn: delete the chunks whose seq has no snapshot window, but those
 * of seq keep (0: none), and clear meta "blob_open" unless it is keep;
 * c->stored loses their charge. *n and *bytes receive what went. */
int store_blob_orphans_txn(struct store *s, MDB_txn *txn, struct store_counters *c, uint64_t keep,
                           uint64_t *n, uint64_t *bytes);
/* The charge of all chunks (a read or write txn). */
int store_blob_charge_txn(struct store *s, MDB_txn *txn, uint64_t *bytes);
/* store_close: free the handle's open stream, if any, without a write. */
void store_blob_forget(struct store *s);
/* store_stat's chunk figures. */
int store_blob_stat_txn(struct store *s, MDB_txn *txn, struct store_stat *st);
/* store_check: the chunks of snapshot window h (kt: the window as the
 * report names it) against its descriptor, and their stream inflated. */
int store_check_blob_window(struct store *s, MDB_txn *txn, const struct store_rec_hdr *h,
                            const char *kt, void (*report)(void *r, const char *line), void *r);
/* store_check's pass over the blobs DB: keys well formed, each chunk's
 * seq a snapshot window's or the stream in progress's (meta "blob_open");
 * *stored receives the charge of all chunks. */
int store_check_blobs(struct store *s, MDB_txn *txn, void (*report)(void *r, const char *line),
                      void *r, uint64_t *stored);

/* agg.c: per-version aggregates. Raw LMDB codes or project codes. */

/* The entries of the aggs DB and their charge (keys and values); 0 and 0
 * without the DB. Read or write txn. */
int store_agg_charge_txn(struct store *s, MDB_txn *txn, uint64_t *n, uint64_t *bytes);
/* store_check's pass over aggs: each key and value decodes and its frame
 * inflates to its raw size; *stored receives their charge. */
int store_check_aggs(struct store *s, MDB_txn *txn, void (*report)(void *r, const char *line),
                     void *r, uint64_t *stored);

/* dict.c: dictionaries. Inside the caller's transaction; raw LMDB codes
 * (MDB_NOTFOUND when absent) or project codes. */

/* The series key of a window key wk (worker \0 version \0): its length. */
size_t store_dict_series_len(const struct store_key *k);
/* Bytes a dictionary of dlen bytes for a series key of slen takes. */
uint64_t store_dict_charge(size_t slen, size_t dlen);
/* The dictionary of series (slen bytes): id and refs. MDB_NOTFOUND if none. */
int store_dict_find(struct store *s, MDB_txn *txn, const void *series, size_t slen, uint32_t *id,
                    uint64_t *refs);
/* Dictionary id's content (borrowed from the txn) and its series key.
 * MDB_NOTFOUND if there is no such dictionary (or no dicts DB),
 * ISOPROF_ECORRUPT if its entry does not decode. */
int store_dict_get(struct store *s, MDB_txn *txn, uint32_t id, const void **bytes, size_t *len,
                   const void **series, size_t *slen);
/* Inflate record h (read in txn) with whatever dictionary it names.
 * 0, ISOPROF_ECORRUPT (also: its dictionary is missing), -ENOMEM, or a
 * raw LMDB code. */
int store_record_load_txn(struct store *s, MDB_txn *txn, const struct store_rec_hdr *h, void **out);
/* The writer's compression dictionary for id (borrowed until the next
 * store_dict_* call), prepared from its bytes in txn on a cache miss.
 * 0, MDB_NOTFOUND, ISOPROF_ECORRUPT, -ENOMEM, ISOPROF_EZSTD. */
int store_dict_cdict(struct store *s, MDB_txn *txn, uint32_t id, const ZSTD_CDict **cd);
/* Was dictionary id built by the write transaction in progress? */
int store_dict_is_new(const struct store *s, uint32_t id);
/* Write txn: if series (of window key k) has no dictionary and at least
 * STORE_DICT_AFTER windows without one, build it from their newest raw
 * content. *id receives it (refs 0: the caller adds its record at once)
 * or 0 when none was built; *charge the bytes it takes. */
int store_dict_build_txn(struct store *s, MDB_txn *txn, const struct store_key *k, uint32_t *id,
                         uint64_t *charge);
/* Write txn: add delta (+1 or -1) to the refs of dict id of series; at 0
 * both entries go and *freed receives their charge (else 0). */
int store_dict_ref_txn(struct store *s, MDB_txn *txn, uint32_t id, const void *series, size_t slen,
                       int delta, uint64_t *freed);
/* After the write txn: commit keeps the dictionaries it built in the cache,
 * abort drops them. */
void store_dict_txn_done(struct store *s, int committed);
/* Free the whole cache (store_close). */
void store_dict_cache_free(struct store *s);
/* store_stat's dictionary figures. Raw LMDB code. */
int store_dict_stat_txn(struct store *s, MDB_txn *txn, uint64_t *n, uint64_t *bytes);
/* store_check's pass over dicts and dict_by_series: refs against the
 * records (counted into a tally while the windows are checked), hashes,
 * both directions; *stored receives the dictionaries' charge. */
struct store_dict_tally;
int store_dict_tally_new(struct store *s, MDB_txn *txn, struct store_dict_tally **t);
/* Count one record naming id; 0 if the dictionary exists, MDB_NOTFOUND if not. */
int store_dict_tally_add(struct store_dict_tally *t, uint32_t id);
int store_check_dicts(struct store *s, MDB_txn *txn, struct store_dict_tally *t,
                      void (*report)(void *r, const char *line), void *r, uint64_t *stored);
void store_dict_tally_free(struct store_dict_tally *t);

/* outbox.c: inside the caller's transaction, raw LMDB codes. */

/* Queue window seq at prio (STORE_OUTBOX_PRIO_*), stamped now. */
int store_outbox_put_txn(struct store *s, MDB_txn *txn, uint64_t seq, unsigned prio);
/* Window seq is going: delete its outbox and rejected entries; *pending
 * receives 1 if it had an outbox entry. */
int store_outbox_drop_txn(struct store *s, MDB_txn *txn, uint64_t seq, int *pending);
/* Window seq was pinned: if it waits at prio 1, move it to prio 0 (same
 * queued time). */
int store_outbox_promote_txn(struct store *s, MDB_txn *txn, uint64_t seq);
/* Is window seq pending? 0 if it is in the outbox (either prio),
 * MDB_NOTFOUND if not, or another raw LMDB code. Read or write txn. */
int store_outbox_find(struct store *s, MDB_txn *txn, uint64_t seq);
/* store_stat's outbox figures. 0 or a project code. */
int store_outbox_stat_txn(struct store *s, MDB_txn *txn, struct store_stat *st);

/* anomaly.c: inside the caller's write transaction, raw LMDB codes. tk is a
 * window's time key (by_time / pins form). */

/* Pin window seq (time key tk) to anomaly id; no-op if the anomaly is gone. */
int store_pin_txn(struct store *s, MDB_txn *txn, uint64_t id, uint64_t seq, const uint8_t *tk,
                  size_t tklen);
/* The window at tk (id seq) is going: drop its pins and take it out of its
 * anomalies' lists. */
int store_unpin_txn(struct store *s, MDB_txn *txn, const uint8_t *tk, size_t tklen, uint64_t seq);
/* Bit (1 << kind) for each anomaly pinning the window at tk. MDB_NOTFOUND
 * when it is not pinned. */
int store_pins_get(struct store *s, MDB_txn *txn, const uint8_t *tk, size_t tklen, uint32_t *kinds);
/* Keep the index within STORE_ANOMALIES_MAX. */
int store_anomaly_sweep_txn(struct store *s, MDB_txn *txn);
int store_anomaly_key_decode(const void *key, size_t len, struct store_anomaly_key *k);
/* store_check's pass over anomalies, anomaly_ids and pins. */
int store_check_anomalies(struct store *s, MDB_txn *txn, void (*report)(void *r, const char *line),
                          void *r);

#endif

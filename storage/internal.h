/*
 * internal.h - what the files of storage/ share: the handle, the on-disk
 * encodings (window key, record header) and the LMDB helpers.
 *
 * On-disk layout, schema version 1 (all integers big-endian):
 *
 *   windows  key   worker \0 version \0 start_ns:u64 isolate:u32 type:u8
 *            value record header (below) + one zstd frame of the pprof
 *   by_time  key   start_ns:u64 + window key            value empty
 *   ids      key   seq:u64                               value window key
 *   meta     "format"       "ISOPROF\0" + schema:u32
 *            "instance"     u64  random id of this store (in window UUIDs)
 *            "next_seq"     u64  the id store_put gives next
 *            "evicted"      u64  windows evicted since creation
 *            "stored_bytes" u64  sum of stored_size of all windows
 *            "budget"       u64  max_size of the last writable open
 *
 *   record header, version 2 (88 bytes + runtime):
 *     0 magic:u8 = 0xA5   1 version:u8 = 2   2 codec:u8 = 1 (zstd)
 *     3 runtime_len:u8 (<= 31)   4 flags:u32   8 end_ns:u64   16 samples:u64
 *     24 interval:u64   32 raw_size:u64   40 seq:u64   48 anomaly:u8
 *     49 reserved (7 zero bytes)   56 mem_min:u64   64 mem_max:u64
 *     72 mem_last:u64   80 mem_p999:u64   88 runtime bytes
 *   Version 1 records (schema 1 stores) are the first 48 bytes of this,
 *   the runtime at offset 48; they read as anomaly 0 and no memory figures.
 *
 * A window's stored_size is what its three entries take: windows key +
 * value, by_time key, ids key + value (store_stored_size()).
 *
 *   anomalies, anomaly_ids, pins: see anomaly.c.
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

#define STORE_META_MAGIC "ISOPROF\0"
#define STORE_META_MAGIC_LEN 8

#define STORE_REC_MAGIC 0xA5u
#define STORE_REC_VERSION 2u
#define STORE_CODEC_ZSTD 1u
#define STORE_REC_FIXED_V1 48u
#define STORE_REC_FIXED 88u
#define STORE_REC_SEQ_OFF 40u
#define STORE_REC_MAX (STORE_REC_FIXED + STORE_RUNTIME_MAX)

#define STORE_KEY_TAIL 13u /* start_ns + isolate + type */
#define STORE_TIME_KEY_MAX 511u
#define STORE_KEY_MAX (STORE_TIME_KEY_MAX - 8u)

struct store {
    MDB_env *env;
    MDB_dbi windows, by_time, ids, meta;
    MDB_dbi anomalies, anomaly_ids, pins;
    int readonly;
    uint32_t schema;
    uint64_t instance;
    uint64_t budget;     /* writer: from the options; reader: from meta */
    uint32_t pin_factor; /* pinned windows outlive unpinned ones this many times */
    char *path;
    ZSTD_CCtx *cctx; /* writer only; used by store_put, which is not reentrant */
};

#define STORE_ANOMALY_WINDOWS_MAX 1024u /* windows one anomaly keeps pinned */
#define STORE_PINS_MAX 16u              /* anomalies one window can be pinned by */
#define STORE_ANOMALIES_MAX 100000u     /* anomalies in the index; the oldest go first */
#define STORE_PIN_FACTOR_DEFAULT 4u

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

/* A decoded record header; payload points into the record bytes. */
struct store_rec_hdr {
    uint8_t version, codec;
    uint32_t flags;
    uint64_t end_ns, samples, interval, raw_size, seq;
    uint8_t anomaly;
    struct store_mem mem;
    char runtime[STORE_RUNTIME_MAX + 1];
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

/* store.c */

/* The one place LMDB return codes become project codes (0 stays 0). */
int store_err(int mdb_rc);
/* Begin a read txn; a read-only handle adopts a map the writer grew. */
int store_txn_read(struct store *s, MDB_txn **txn);
int store_meta_get_u64(struct store *s, MDB_txn *txn, const char *name, uint64_t *v);
int store_meta_put_u64(struct store *s, MDB_txn *txn, const char *name, uint64_t v);
/* The bytes a window with a key of klen and a value of vlen takes. */
uint64_t store_stored_size(size_t klen, size_t vlen);

/* record.c: encodings. No LMDB, no allocation except where noted. */

/* Encode a window key into out (cap bytes). Returns its length, or 0 if it
 * would exceed cap or STORE_KEY_MAX. */
size_t store_key_encode(uint8_t *out, size_t cap, const char *worker, const char *version,
                        uint64_t start_ns, uint32_t isolate, uint8_t type);
/* Decode a window key. 0 or ISOPROF_ECORRUPT. */
int store_key_decode(const void *key, size_t len, struct store_key *k);
/* Decode a record header and locate the payload. 0 or ISOPROF_ECORRUPT. */
int store_record_decode(const void *val, size_t len, struct store_rec_hdr *h);
/* Inflate and verify a decoded record's payload: the frame's content size
 * and the result must equal raw_size, nothing may follow the frame, the
 * checksum must hold. *out (allocated, caller frees) on success.
 * 0, ISOPROF_ECORRUPT, -ENOMEM. */
int store_record_inflate(const struct store_rec_hdr *h, void **out);
/* Compress r into a new value (header with seq 0 + frame); *val is
 * allocated (caller frees). 0, -ENOMEM, ISOPROF_EZSTD. */
int store_record_build(ZSTD_CCtx *cctx, const struct store_record *r, uint8_t **val, size_t *vlen);
/* A compression context whose memory comes from base.h; NULL on ENOMEM. */
ZSTD_CCtx *store_zstd_cctx_new(void);
/* Fill w from a decoded key and header (strings borrowed from them). */
void store_window_fill(struct store_window *w, const struct store_key *k,
                       const struct store_rec_hdr *h, size_t klen, size_t vlen);

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

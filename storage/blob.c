/*
 * blob.c - snapshot windows: raw heap snapshots streamed in and out in
 * bounded memory.
 *
 * A snapshot (5 to 150 MB of JSON, arriving in pieces of about 10 KB over
 * seconds) is never held whole. store_blob_write feeds it to one zstd
 * stream whose output fills a buffer of STORE_BLOB_CHUNK bytes; each full
 * buffer is committed as one entry of the blobs DB, keyed by the window's
 * sequence id and the chunk's index, in a short write transaction of its
 * own that charges it to the budget and evicts old windows as store_put
 * would. The window record (codec STORE_CODEC_BLOB: a descriptor with the
 * chunk count and compressed size instead of a frame) is written by
 * store_blob_commit with the last chunk, so readers see a snapshot whole
 * or not at all. store_blob_read and store_check walk the chunks in key
 * order through a streaming decompressor, again in bounded memory.
 *
 * The sequence id is taken from meta "next_seq" by the stream's first
 * transaction, which also records it in meta "blob_open": chunks of that
 * seq without a window are a stream in progress, any others are orphans
 * (a writer that died while streaming, an abort whose delete failed). A
 * writable store_open drops every chunk without a window; a stream's first
 * transaction drops those an abort of this handle left.
 *
 * DESIGN: the blob writes are store writes: one thread at a time, the
 * caller serialising them with store_put (they may interleave: each chunk
 * is its own transaction and store_put does not see the stream). The
 * stream has its own compression context, since store_put keeps using the
 * handle's between chunks. store_blob_read uses nothing of the handle's
 * but the environment, so any thread may call it.
 */
#include "internal.h"

#include "base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

struct store_blob {
    struct store *s;
    ZSTD_CCtx *cctx;
    uint8_t key[STORE_KEY_MAX]; /* the window key */
    size_t klen;
    uint64_t start_ns;
    uint8_t *rec; /* the window record, finished by the commit */
    size_t rlen;
    uint8_t *buf; /* the chunk being filled, STORE_BLOB_CHUNK bytes */
    size_t len;
    uint64_t seq;        /* 0 until the first transaction takes one */
    uint32_t chunks;     /* committed */
    uint64_t comp_bytes; /* their value bytes */
    uint64_t raw;        /* bytes written */
    uint64_t evicted, evicted_bytes;
    int err;     /* sticky */
    int dropped; /* the chunks are gone already (refused for the budget) */
};

static void blob_key(uint8_t key[STORE_BLOB_KEY_LEN], uint64_t seq, uint32_t chunk)
{
    store_be64_put(key, seq);
    store_be32_put(key + 8, chunk);
}

static int zstd_err(size_t r)
{
    return ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? -ENOMEM : ISOPROF_EZSTD;
}

/* meta "blob_open"; absent (a damaged meta; store_check reports the
 * counters) reads as 0. Raw LMDB code. */
static int open_seq_get(struct store *s, MDB_txn *txn, uint64_t *seq)
{
    MDB_val k = {9, "blob_open"}, d;
    int rc = mdb_get(txn, s->meta, &k, &d);
    *seq = rc == 0 && d.mv_size == 8 ? store_be64_get(d.mv_data) : 0;
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int open_seq_put(struct store *s, MDB_txn *txn, uint64_t seq)
{
    uint8_t v[8];
    store_be64_put(v, seq);
    MDB_val k = {9, "blob_open"}, d = {8, v};
    return mdb_put(txn, s->meta, &k, &d, 0);
}

int store_blob_drop_txn(struct store *s, MDB_txn *txn, uint64_t seq, uint64_t *n, uint64_t *bytes)
{
    *n = *bytes = 0;
    if (!s->blobs_on)
        return 0;
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->blobs, &c);
    if (rc != 0)
        return rc;
    uint8_t seek[8];
    store_be64_put(seek, seq);
    for (;;) {
        /* Seek again after each delete rather than trust the cursor's
         * position across it. */
        MDB_val k = {sizeof(seek), seek}, d;
        rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
        if (rc != 0 || k.mv_size < 8 || memcmp(k.mv_data, seek, 8) != 0)
            break;
        *bytes += (uint64_t)k.mv_size + d.mv_size;
        (*n)++;
        if ((rc = mdb_cursor_del(c, 0)) != 0)
            break;
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Does snapshot window seq exist (its id, a snapshot key, a blob record
 * carrying seq)? *owned receives 1 or 0. Raw LMDB code. */
static int owner_exists(struct store *s, MDB_txn *txn, uint64_t seq, int *owned)
{
    MDB_val kv, dv;
    struct store_key key;
    struct store_rec_hdr h;
    *owned = 0;
    int rc = store_window_by_seq(s, txn, seq, &kv, &key, &dv);
    if (rc != 0)
        return rc == MDB_NOTFOUND ? 0 : rc;
    *owned = key.type == STORE_TYPE_SNAPSHOT &&
             store_record_decode(dv.mv_data, dv.mv_size, &h) == 0 && h.seq == seq &&
             h.codec == STORE_CODEC_BLOB;
    return 0;
}

int store_blob_orphans_txn(struct store *s, MDB_txn *txn, struct store_counters *c, uint64_t keep,
                           uint64_t *n, uint64_t *bytes)
{
    *n = *bytes = 0;
    if (!s->blobs_on)
        return 0;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->blobs, &cur);
    if (rc != 0)
        return rc;
    uint8_t seek[8] = {0};
    MDB_val k = {0, NULL}, d;
    for (rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE)) {
        if (k.mv_size < 8) {
            /* Not a chunk key at all: garbage, gone. */
            *bytes += (uint64_t)k.mv_size + d.mv_size;
            (*n)++;
            if ((rc = mdb_cursor_del(cur, 0)) != 0)
                break;
            k = (MDB_val){sizeof(seek), seek};
            continue;
        }
        uint64_t seq = store_be64_get(k.mv_data);
        int owned = 1;
        if (seq != keep && (rc = owner_exists(s, txn, seq, &owned)) != 0)
            break;
        if (!owned) {
            uint64_t dn, db;
            if ((rc = store_blob_drop_txn(s, txn, seq, &dn, &db)) != 0)
                break;
            *n += dn;
            *bytes += db;
        }
        if (seq == UINT64_MAX) {
            rc = MDB_NOTFOUND;
            break;
        }
        store_be64_put(seek, seq + 1);
        k = (MDB_val){sizeof(seek), seek};
    }
    mdb_cursor_close(cur);
    if (rc != MDB_NOTFOUND)
        return rc;
    c->stored = c->stored > *bytes ? c->stored - *bytes : 0;
    uint64_t open = 0;
    if ((rc = open_seq_get(s, txn, &open)) != 0)
        return rc;
    if (open != 0 && open != keep)
        return open_seq_put(s, txn, 0);
    return 0;
}

int store_blob_charge_txn(struct store *s, MDB_txn *txn, uint64_t *bytes)
{
    *bytes = 0;
    if (!s->blobs_on)
        return 0;
    MDB_cursor *c;
    MDB_val k, d;
    int rc = mdb_cursor_open(txn, s->blobs, &c);
    if (rc != 0)
        return rc;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT))
        *bytes += (uint64_t)k.mv_size + d.mv_size;
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int store_blob_stat_txn(struct store *s, MDB_txn *txn, struct store_stat *st)
{
    if (!s->blobs_on)
        return 0;
    uint64_t open = 0;
    MDB_cursor *c;
    MDB_val k, d;
    int rc = open_seq_get(s, txn, &open);
    if (rc != 0 || (rc = mdb_cursor_open(txn, s->blobs, &c)) != 0)
        return rc;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        uint64_t charge = (uint64_t)k.mv_size + d.mv_size;
        st->blob_chunks++;
        st->blob_bytes += charge;
        if (open != 0 && k.mv_size >= 8 && store_be64_get(k.mv_data) == open) {
            st->blob_pending_chunks++;
            st->blob_pending_bytes += charge;
        }
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* --- reading --- */

/* Inflate the chunks of snapshot record h (read in txn) in order, passing
 * each piece to cb (NULL: only check). 0, the callback's nonzero value,
 * ISOPROF_ECORRUPT (why, cap bytes, says what), -ENOMEM or a raw LMDB
 * code. */
static int blob_stream(struct store *s, MDB_txn *txn, const struct store_rec_hdr *h,
                       int (*cb)(void *arg, const void *data, size_t len), void *arg, char *why,
                       size_t cap)
{
    if (!s->blobs_on) {
        snprintf(why, cap, "no blobs DB");
        return ISOPROF_ECORRUPT;
    }
    size_t osize = ZSTD_DStreamOutSize();
    uint8_t *out = isoprof_malloc(osize);
    ZSTD_DCtx *dctx = atomic_exchange(&s->blob_dctx, NULL);
    if (dctx == NULL)
        dctx = ZSTD_createDCtx_advanced(store_zstd_mem);
    MDB_cursor *c = NULL;
    int rc = -ENOMEM;
    if (out == NULL || dctx == NULL)
        goto done;
    if ((rc = mdb_cursor_open(txn, s->blobs, &c)) != 0)
        goto done;
    uint8_t seek[STORE_BLOB_KEY_LEN];
    blob_key(seek, h->seq, 0);
    MDB_val k = {sizeof(seek), seek}, d;
    uint32_t n = 0;
    uint64_t bytes = 0, raw = 0;
    size_t left = 1; /* ZSTD_decompressStream's hint: 0 once the frame is complete */
    struct store_bounds b;
    store_bounds_get(s, &b);
    for (rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        if (!store_inside(&b, &k) || !store_inside(&b, &d)) {
            rc = ISOPROF_ECORRUPT;
            snprintf(why, cap, "chunk %" PRIu32 " lies outside the file", n);
            goto done;
        }
        if (k.mv_size < 8 || memcmp(k.mv_data, seek, 8) != 0)
            break;
        rc = ISOPROF_ECORRUPT;
        if (k.mv_size != STORE_BLOB_KEY_LEN) {
            snprintf(why, cap, "a chunk key of %zu bytes", k.mv_size);
            goto done;
        }
        uint32_t idx = store_be32_get((const uint8_t *)k.mv_data + 8);
        if (idx != n) {
            snprintf(why, cap, "chunk %" PRIu32 " missing (the next is %" PRIu32 ")", n, idx);
            goto done;
        }
        if (n == h->chunks || d.mv_size == 0 || d.mv_size > STORE_BLOB_CHUNK) {
            snprintf(why, cap, "chunk %" PRIu32 " of %zu bytes, the record says %" PRIu32 " chunks",
                     n, d.mv_size, h->chunks);
            goto done;
        }
        n++;
        bytes += d.mv_size;
        ZSTD_inBuffer in = {d.mv_data, d.mv_size, 0};
        /* Until the chunk is consumed and the decoder holds nothing more
         * (it filled less than the buffer, or the frame is complete). */
        for (;;) {
            if (left == 0 && in.pos < in.size) {
                snprintf(why, cap, "bytes after the end of the zstd frame in chunk %" PRIu32,
                         n - 1);
                goto done;
            }
            ZSTD_outBuffer o = {out, osize, 0};
            left = ZSTD_decompressStream(dctx, &o, &in);
            if (ZSTD_isError(left)) {
                if (ZSTD_getErrorCode(left) == ZSTD_error_memory_allocation) {
                    rc = -ENOMEM;
                } else {
                    snprintf(why, cap, "the zstd stream does not inflate (chunk %" PRIu32 "): %s",
                             n - 1, ZSTD_getErrorName(left));
                }
                goto done;
            }
            raw += o.pos;
            if (raw > h->raw_size) {
                snprintf(why, cap, "inflates to more than its raw size %" PRIu64, h->raw_size);
                goto done;
            }
            if (cb != NULL && o.pos > 0 && (rc = cb(arg, out, o.pos)) != 0)
                goto done;
            rc = ISOPROF_ECORRUPT;
            if (in.pos == in.size && (o.pos < osize || left == 0))
                break;
        }
    }
    if (rc != 0 && rc != MDB_NOTFOUND)
        goto done;
    rc = ISOPROF_ECORRUPT;
    if (n != h->chunks || bytes != h->blob_bytes)
        snprintf(why, cap,
                 "%" PRIu32 " chunks of %" PRIu64 " bytes, the record says %" PRIu32 " of %" PRIu64,
                 n, bytes, h->chunks, h->blob_bytes);
    else if (left != 0)
        snprintf(why, cap, "the zstd frame is cut short");
    else if (raw != h->raw_size)
        snprintf(why, cap, "inflates to %" PRIu64 " bytes, not its raw size %" PRIu64, raw,
                 h->raw_size);
    else
        rc = 0;
done:
    if (c != NULL)
        mdb_cursor_close(c);
    /* Kept for the next read, clean (a frame left half read would
     * otherwise go on), unless another read kept its own first. */
    ZSTD_DCtx *none = NULL;
    if (dctx != NULL && (ZSTD_isError(ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only)) ||
                         !atomic_compare_exchange_strong(&s->blob_dctx, &none, dctx)))
        ZSTD_freeDCtx(dctx);
    isoprof_free(out);
    return rc;
}

int store_blob_read(struct store *s, uint64_t id,
                    int (*cb)(void *arg, const void *data, size_t len), void *arg)
{
    if (s == NULL || cb == NULL || id == 0)
        return -EINVAL;
    MDB_txn *txn;
    int rc = store_txn_read(s, &txn);
    if (rc != 0)
        return rc;
    MDB_val kv, dv;
    struct store_key key;
    struct store_rec_hdr h;
    char why[160];
    struct store_bounds b;
    store_bounds_get(s, &b);
    rc = store_window_by_seq(s, txn, id, &kv, &key, &dv);
    if (rc != 0) {
        rc = store_err(rc);
    } else if (!store_inside(&b, &kv) || !store_inside(&b, &dv)) {
        rc = ISOPROF_ECORRUPT;
    } else if (key.type != STORE_TYPE_SNAPSHOT) {
        rc = -EMEDIUMTYPE;
    } else if (store_record_decode(dv.mv_data, dv.mv_size, &h) != 0 || h.seq != id ||
               h.codec != STORE_CODEC_BLOB) {
        rc = ISOPROF_ECORRUPT;
    } else {
        /* Callback values pass through untouched; only LMDB codes (which
         * callbacks do not produce) are translated. */
        rc = blob_stream(s, txn, &h, cb, arg, why, sizeof(why));
        if (rc >= MDB_KEYEXIST && rc <= MDB_LAST_ERRCODE)
            rc = store_err(rc);
    }
    mdb_txn_abort(txn);
    return rc;
}

int store_check_blob_window(struct store *s, MDB_txn *txn, const struct store_rec_hdr *h,
                            const char *kt, void (*report)(void *r, const char *line), void *r)
{
    char why[160], line[512];
    int rc = blob_stream(s, txn, h, NULL, NULL, why, sizeof(why));
    if (rc == ISOPROF_ECORRUPT) {
        snprintf(line, sizeof(line), "windows: %s (id %" PRIu64 "): snapshot: %s", kt, h->seq, why);
        report(r, line);
        return 0;
    }
    return rc == -ENOMEM ? ENOMEM : rc;
}

int store_check_blobs(struct store *s, MDB_txn *txn, void (*report)(void *r, const char *line),
                      void *r, uint64_t *stored)
{
    *stored = 0;
    if (!s->blobs_on)
        return 0;
    uint64_t open = 0;
    MDB_cursor *c;
    MDB_val k, d;
    char line[256];
    int rc = open_seq_get(s, txn, &open);
    if (rc != 0 || (rc = mdb_cursor_open(txn, s->blobs, &c)) != 0)
        return rc;
    /* The run of chunks of one seq, reported once when it ends. */
    uint64_t seq = 0, n = 0, bytes = 0;
    int orphan = 0;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST);; rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        int next = rc == 0 && k.mv_size >= 8 ? 1 : 0;
        uint64_t kseq = next ? store_be64_get(k.mv_data) : 0;
        if (n > 0 && (!next || kseq != seq)) {
            if (orphan) {
                snprintf(line, sizeof(line),
                         "blobs: %" PRIu64 " chunks (%" PRIu64 " bytes) of %" PRIu64
                         ", which is no snapshot window nor the one being written (orphans: "
                         "the next writable open drops them)",
                         n, bytes, seq);
                report(r, line);
            }
            n = bytes = 0;
        }
        if (rc != 0)
            break;
        *stored += (uint64_t)k.mv_size + d.mv_size;
        if (k.mv_size != STORE_BLOB_KEY_LEN) {
            snprintf(line, sizeof(line), "blobs: a key of %zu bytes", k.mv_size);
            report(r, line);
            if (!next)
                continue;
        }
        if (n == 0) {
            seq = kseq;
            int owned = 1;
            if ((seq == 0 || seq != open) && (rc = owner_exists(s, txn, seq, &owned)) != 0)
                break;
            orphan = !owned;
        }
        n++;
        bytes += (uint64_t)k.mv_size + d.mv_size;
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* --- writing --- */

static void blob_free(struct store_blob *b)
{
    if (b->s->blob == b)
        b->s->blob = NULL;
    ZSTD_freeCCtx(b->cctx);
    isoprof_free(b->buf);
    isoprof_free(b->rec);
    isoprof_free(b);
}

void store_blob_forget(struct store *s)
{
    if (s->blob != NULL)
        blob_free(s->blob);
}

int store_blob_begin(struct store *s, const struct store_window *w, struct store_blob **out)
{
    if (s == NULL || w == NULL || out == NULL)
        return -EINVAL;
    if (s->readonly)
        return -EROFS;
    if (w->type != STORE_TYPE_SNAPSHOT)
        return -EINVAL;
    int rc = store_window_check(w);
    if (rc != 0)
        return rc;
    if (s->blob != NULL)
        return -EBUSY;
    struct store_blob *b = isoprof_calloc(1, sizeof(*b));
    if (b == NULL)
        return -ENOMEM;
    b->s = s;
    b->start_ns = w->start_ns;
    b->klen = store_key_encode(b->key, sizeof(b->key), w->worker, w->version, w->start_ns,
                               w->isolate, STORE_TYPE_SNAPSHOT);
    if (b->klen == 0) {
        rc = -EINVAL; /* unreachable after store_window_check; kept as a guard */
        goto fail_key;
    }
    struct store_window rw = *w;
    rw.frames_mapped = rw.frames_unmapped = 0; /* a snapshot maps no frames */
    if ((rc = store_record_build_blob(&rw, &b->rec, &b->rlen)) != 0)
        goto fail_key;
    rc = -ENOMEM;
    if ((b->buf = isoprof_malloc(STORE_BLOB_CHUNK)) == NULL)
        goto fail_buf;
    if ((b->cctx = ZSTD_createCCtx_advanced(store_zstd_mem)) == NULL)
        goto fail_cctx;
    size_t zr = ZSTD_CCtx_setParameter(b->cctx, ZSTD_c_compressionLevel, STORE_ZSTD_LEVEL);
    if (!ZSTD_isError(zr))
        zr = ZSTD_CCtx_setParameter(b->cctx, ZSTD_c_checksumFlag, 1);
    if (ZSTD_isError(zr)) {
        rc = zstd_err(zr);
        goto fail_param;
    }
    s->blob = b;
    *out = b;
    return 0;

fail_param:
    ZSTD_freeCCtx(b->cctx);
fail_cctx:
    isoprof_free(b->buf);
fail_buf:
    isoprof_free(b->rec);
fail_key:
    isoprof_free(b);
    return rc;
}

/* What the window would take with its committed chunks and pending bytes
 * more: the stream's measure against the budget. */
static uint64_t blob_charge(const struct store_blob *b, size_t pending)
{
    uint64_t n = store_stored_size(b->klen, b->rlen, 0) + b->comp_bytes +
                 (uint64_t)b->chunks * STORE_BLOB_KEY_LEN;
    return pending ? n + store_chunk_charge(pending) : n;
}

/* The stream's seq in txn: taken from c (and recorded as the stream in
 * progress) by its first transaction. Raw LMDB code. */
static int blob_seq_txn(struct store_blob *b, MDB_txn *txn, struct store_counters *c, uint64_t *seq)
{
    struct store *s = b->s;
    int rc;
    *seq = b->seq;
    if (*seq == 0) {
        *seq = c->next_seq++;
        if ((rc = open_seq_put(s, txn, *seq)) != 0)
            return rc;
    }
    if (s->blob_leftover) {
        /* An earlier abort of this handle could not delete its chunks. */
        uint64_t n, bytes;
        if ((rc = store_blob_orphans_txn(s, txn, c, *seq, &n, &bytes)) != 0)
            return rc;
    }
    return 0;
}

/* Commit the full buffer as the stream's next chunk. Raw LMDB code or a
 * project code. */
static int chunk_txn(struct store_blob *b, struct store_counters *out, uint64_t *seq)
{
    struct store *s = b->s;
    MDB_txn *txn;
    struct store_counters c;
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc != 0)
        return rc;
    uint8_t ck[STORE_BLOB_KEY_LEN];
    if ((rc = store_counters_read(s, txn, &c)) != 0 || (rc = blob_seq_txn(b, txn, &c, seq)) != 0)
        goto end;
    blob_key(ck, *seq, b->chunks);
    MDB_val k = {sizeof(ck), ck}, d = {b->len, b->buf};
    if ((rc = mdb_put(txn, s->blobs, &k, &d, 0)) != 0)
        goto end;
    c.stored += store_chunk_charge(b->len);
    if ((rc = store_evict_to(s, txn, &c, s->budget)) == 0)
        rc = store_counters_write(s, txn, &c);
end:
    if ((rc = store_txn_end(s, txn, rc)) == 0)
        *out = c;
    return rc;
}

/* Delete what the stream committed, in a transaction of its own. */
static int drop_txn(struct store_blob *b)
{
    struct store *s = b->s;
    MDB_txn *txn;
    struct store_counters c;
    uint64_t n, bytes, open = 0;
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc != 0)
        return rc;
    if ((rc = store_counters_read(s, txn, &c)) != 0 ||
        (rc = store_blob_drop_txn(s, txn, b->seq, &n, &bytes)) != 0 ||
        (rc = open_seq_get(s, txn, &open)) != 0 ||
        (open == b->seq && (rc = open_seq_put(s, txn, 0)) != 0))
        goto abort;
    c.stored = c.stored > bytes ? c.stored - bytes : 0;
    if ((rc = store_counters_write(s, txn, &c)) != 0)
        goto abort;
    return mdb_txn_commit(txn);
abort:
    mdb_txn_abort(txn);
    return rc;
}

/* Drop the stream's chunks now; if that fails they are orphans for the
 * next stream or open. */
static void blob_drop(struct store_blob *b)
{
    if (b->seq == 0 || b->chunks == 0 || b->dropped)
        return;
    if (drop_txn(b) != 0)
        b->s->blob_leftover = 1;
    b->dropped = 1;
}

/* Fail the stream with rc (sticky); returns it. */
static int blob_fail(struct store_blob *b, int rc)
{
    b->err = rc;
    if (rc == ISOPROF_ETOOBIG)
        blob_drop(b); /* it cannot be stored: give its room back at once */
    return rc;
}

/* Commit the buffer (full) as a chunk: its own transaction, and on a full
 * map one more after evicting further. 0 or a project code. */
static int chunk_commit(struct store_blob *b)
{
    struct store *s = b->s;
    if (blob_charge(b, b->len) > s->budget)
        return ISOPROF_ETOOBIG;
    struct store_counters c;
    uint64_t seq = 0;
    int rc = chunk_txn(b, &c, &seq);
    if (rc == MDB_MAP_FULL &&
        (rc = store_evict_room(s, store_chunk_charge(b->len), &b->evicted, &b->evicted_bytes)) == 0)
        rc = chunk_txn(b, &c, &seq);
    if (rc != 0)
        return store_err(rc);
    if (s->blob_leftover)
        s->blob_leftover = 0;
    b->seq = seq;
    b->chunks++;
    b->comp_bytes += b->len;
    b->len = 0;
    b->evicted += c.evicted;
    b->evicted_bytes += c.evicted_bytes;
    return 0;
}

/* Run the compressor over in (mode ZSTD_e_continue or ZSTD_e_end),
 * committing each chunk it fills. With ZSTD_e_end, returns once the frame
 * is complete (the last piece stays in the buffer for the commit). */
static int blob_feed(struct store_blob *b, ZSTD_inBuffer *in, ZSTD_EndDirective mode)
{
    for (;;) {
        if (b->len == STORE_BLOB_CHUNK) {
            int rc = chunk_commit(b);
            if (rc != 0)
                return rc;
        }
        ZSTD_outBuffer o = {b->buf, STORE_BLOB_CHUNK, b->len};
        size_t left = ZSTD_compressStream2(b->cctx, &o, in, mode);
        if (ZSTD_isError(left))
            return zstd_err(left);
        b->len = o.pos;
        if (mode == ZSTD_e_end ? left == 0 : in->pos == in->size)
            return 0;
    }
}

int store_blob_write(struct store_blob *b, const void *data, size_t len)
{
    if (b == NULL || (data == NULL && len > 0))
        return -EINVAL;
    if (b->err != 0)
        return b->err;
    ZSTD_inBuffer in = {data, len, 0};
    int rc = blob_feed(b, &in, ZSTD_e_continue);
    if (rc == 0 && b->len == STORE_BLOB_CHUNK)
        rc = chunk_commit(b);
    if (rc == 0 && blob_charge(b, b->len) > b->s->budget)
        rc = ISOPROF_ETOOBIG;
    if (rc != 0)
        return blob_fail(b, rc);
    b->raw += len;
    return 0;
}

/* Evict the oldest snapshot windows of the stream's worker/version, but
 * the stream's own (seq), while there are more than keep: unpinned ones
 * first. Raw LMDB code. */
static int keep_txn(struct store_blob *b, MDB_txn *txn, struct store_counters *c, unsigned keep,
                    uint64_t seq)
{
    struct store *s = b->s;
    struct store_key bk;
    if (keep == 0 || store_key_decode(b->key, b->klen, &bk) != 0)
        return 0;
    size_t plen = store_dict_series_len(&bk);
    for (;;) {
        MDB_cursor *cur;
        int rc = mdb_cursor_open(txn, s->windows, &cur);
        if (rc != 0)
            return rc;
        MDB_val k = {plen, b->key}, d;
        uint64_t n = 0;
        uint8_t victim[2][STORE_TIME_KEY_MAX]; /* the oldest unpinned and pinned one */
        size_t vlen[2] = {0, 0};
        for (rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE); rc == 0;
             rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
            struct store_key key;
            struct store_rec_hdr h;
            if (k.mv_size < plen || memcmp(k.mv_data, b->key, plen) != 0)
                break;
            if (store_key_decode(k.mv_data, k.mv_size, &key) != 0 ||
                key.type != STORE_TYPE_SNAPSHOT)
                continue;
            n++;
            if (store_record_decode(d.mv_data, d.mv_size, &h) == 0 && h.seq == seq)
                continue;
            uint8_t tk[STORE_TIME_KEY_MAX];
            uint32_t kinds;
            store_be64_put(tk, key.start_ns);
            memcpy(tk + 8, k.mv_data, k.mv_size);
            int prc = store_pins_get(s, txn, tk, 8 + k.mv_size, &kinds);
            if (prc != 0 && prc != MDB_NOTFOUND) {
                rc = prc;
                break;
            }
            int pinned = prc == 0;
            if (vlen[pinned] == 0) {
                memcpy(victim[pinned], tk, 8 + k.mv_size);
                vlen[pinned] = 8 + k.mv_size;
            }
        }
        mdb_cursor_close(cur);
        if (rc != 0 && rc != MDB_NOTFOUND)
            return rc;
        int pick = vlen[0] ? 0 : 1;
        if (n <= keep || vlen[pick] == 0)
            return 0;
        uint64_t bytes = 0;
        if ((rc = store_window_delete(s, txn, c, victim[pick] + 8, vlen[pick] - 8, &bytes)) != 0)
            return rc;
        c->stored = c->stored > bytes ? c->stored - bytes : 0;
        c->evicted++;
        c->evicted_total++;
        c->evicted_bytes += bytes;
    }
}

/* The last chunk and the window, in one transaction. *seq receives the
 * window's id. Raw LMDB code or a project code. */
static int commit_txn(struct store_blob *b, uint64_t end_ns, uint64_t pin, unsigned keep,
                      struct store_counters *out, uint64_t *seq)
{
    struct store *s = b->s;
    MDB_txn *txn;
    struct store_counters c;
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc != 0)
        return rc;
    uint8_t ck[STORE_BLOB_KEY_LEN], ik[8], tk[STORE_TIME_KEY_MAX];
    if ((rc = store_counters_read(s, txn, &c)) != 0 || (rc = blob_seq_txn(b, txn, &c, seq)) != 0)
        goto end;
    uint32_t chunks = b->chunks;
    if (b->len > 0) {
        blob_key(ck, *seq, chunks++);
        MDB_val k = {sizeof(ck), ck}, d = {b->len, b->buf};
        if ((rc = mdb_put(txn, s->blobs, &k, &d, 0)) != 0)
            goto end;
        c.stored += store_chunk_charge(b->len);
    }
    store_record_blob_finish(b->rec, b->rlen, end_ns, b->raw, *seq, chunks, b->comp_bytes + b->len);
    uint64_t old = 0;
    if ((rc = store_window_delete(s, txn, &c, b->key, b->klen, &old)) != 0)
        goto end;
    c.stored = c.stored > old ? c.stored - old : 0;
    ISOPROF_ASSERT(b->klen > STORE_KEY_TAIL && b->klen <= STORE_KEY_MAX); /* as put.c's */
    ISOPROF_ASSERT(b->rlen >= STORE_REC_FIXED && *seq != 0);
    MDB_val k = {b->klen, b->key}, d = {b->rlen, b->rec};
    if ((rc = mdb_put(txn, s->windows, &k, &d, 0)) != 0)
        goto end;
    store_be64_put(tk, b->start_ns);
    memcpy(tk + 8, b->key, b->klen);
    MDB_val t = {8 + b->klen, tk}, empty = {0, NULL};
    if ((rc = mdb_put(txn, s->by_time, &t, &empty, 0)) != 0)
        goto end;
    store_be64_put(ik, *seq);
    MDB_val ikv = {8, ik};
    if ((rc = mdb_put(txn, s->ids, &ikv, &k, 0)) != 0)
        goto end;
    if (pin && (rc = store_pin_txn(s, txn, pin, *seq, tk, 8 + b->klen)) != 0)
        goto end;
    c.stored += store_stored_size(b->klen, b->rlen, 0);
    if ((rc = open_seq_put(s, txn, 0)) == 0 && (rc = keep_txn(b, txn, &c, keep, *seq)) == 0 &&
        (rc = store_evict_to(s, txn, &c, s->budget)) == 0)
        rc = store_counters_write(s, txn, &c);
end:
    if ((rc = store_txn_end(s, txn, rc)) == 0)
        *out = c;
    return rc;
}

int store_blob_commit(struct store_blob *b, uint64_t end_ns, uint64_t pin, unsigned keep,
                      uint64_t *id, struct store_put_stats *st)
{
    if (id)
        *id = 0;
    if (st)
        memset(st, 0, sizeof(*st));
    if (b == NULL)
        return -EINVAL;
    struct store *s = b->s;
    int rc = b->err;
    if (rc == 0) {
        ZSTD_inBuffer none = {NULL, 0, 0};
        rc = blob_feed(b, &none, ZSTD_e_end);
    }
    if (rc == 0 && blob_charge(b, b->len) > s->budget)
        rc = ISOPROF_ETOOBIG;
    struct store_counters c;
    uint64_t seq = 0;
    if (rc == 0) {
        rc = commit_txn(b, end_ns, pin, keep, &c, &seq);
        if (rc == MDB_MAP_FULL &&
            (rc = store_evict_room(s, blob_charge(b, b->len), &b->evicted, &b->evicted_bytes)) == 0)
            rc = commit_txn(b, end_ns, pin, keep, &c, &seq);
        rc = store_err(rc);
    }
    if (rc == 0) {
        s->blob_leftover = 0;
        b->evicted += c.evicted;
        b->evicted_bytes += c.evicted_bytes;
        if (id)
            *id = seq;
    } else {
        blob_drop(b);
    }
    if (st) {
        st->evicted = b->evicted;
        st->evicted_bytes = b->evicted_bytes;
    }
    blob_free(b);
    return rc;
}

void store_blob_abort(struct store_blob *b)
{
    if (b == NULL)
        return;
    blob_drop(b);
    blob_free(b);
}

/*
 * put.c - store_put: batched inserts and retention.
 *
 * A batch is validated and compressed before any transaction begins, so
 * the write lock is held only for B-tree work. One write transaction then
 * assigns sequence ids, writes the three entries of every window (four
 * with the outbox on: the window is queued for upload in the same commit
 * that stores it), evicts the oldest windows (the head of by_time) until
 * the stored-bytes counter is back under the budget, updates the meta
 * counters and commits. Any failure aborts the whole transaction: a batch
 * is stored entirely or not at all, and the counters always describe the
 * committed data.
 *
 * Eviction inside the insert transaction cannot make room for that same
 * transaction: LMDB reuses freed pages only after the commit that freed
 * them. So on MDB_MAP_FULL the insert is aborted, a separate transaction
 * evicts further and commits, and the insert is tried once more.
 *
 * Dictionaries (dict.c): before the transaction, each record is compressed
 * with the dictionary its (worker, version) has in the last committed
 * state. In the transaction the dictionary is looked up again (and built
 * when the series has earned one); a record whose dictionary differs, or
 * was built by an attempt that aborted, is compressed again there. The
 * record's reference is counted before the window it replaces goes, so
 * that replacing the last window of a dictionary does not drop it.
 *
 * The transaction's parts (counters, window delete, eviction) also serve
 * the snapshot streams of blob.c.
 *
 * DESIGN: store_put is not reentrant (the compression context and the
 * write transaction are per handle); readers never block it (MVCC).
 */
#include "internal.h"

#include "base.h"

#include <errno.h>
#include <string.h>

struct put_item {
    uint8_t key[STORE_KEY_MAX];
    size_t klen;
    uint8_t *val;
    size_t vlen;
    uint32_t dict; /* the dictionary val was compressed with; 0: none */
    int fresh;     /* ... built by the transaction that compressed it */
};

/* The stored size of an item of this handle's batch. */
static uint64_t stored_size(const struct store *s, const struct put_item *it)
{
    return store_stored_size(it->klen, it->vlen, s->outbox_on ? STORE_FLAG_QUEUED : 0);
}

int store_window_check(const struct store_window *w)
{
    if (w->worker == NULL || w->version == NULL || w->runtime == NULL)
        return -EINVAL;
    size_t wl = strnlen(w->worker, STORE_WORKER_MAX + 1);
    size_t vl = strnlen(w->version, STORE_VERSION_MAX + 1);
    size_t rl = strnlen(w->runtime, STORE_RUNTIME_MAX + 1);
    if (wl > STORE_WORKER_MAX || vl > STORE_VERSION_MAX || rl > STORE_RUNTIME_MAX ||
        wl + vl > STORE_LABELS_MAX)
        return -EINVAL;
    /* The decoder refuses what is not a thread label: never write one. */
    const char *thread = store_thread_of(w->thread);
    if (!store_thread_ok(thread, strnlen(thread, STORE_THREAD_MAX + 1)))
        return -EINVAL;
    if (w->container != NULL &&
        !store_container_ok(w->container, strnlen(w->container, STORE_CONTAINER_MAX + 1)))
        return -EINVAL;
    if (store_labels_check(w->labels, w->nlabels, NULL) != 0)
        return -EINVAL;
    if (w->anomaly > STORE_ANOMALY_MAX)
        return -EINVAL;
    return 0;
}

static int check_record(const struct store_record *r)
{
    const struct store_window *w = &r->w;
    int rc = store_window_check(w);
    if (rc != 0)
        return rc;
    /* A snapshot has no pprof: it is streamed in by store_blob_*. */
    if (w->type != STORE_TYPE_CPU && w->type != STORE_TYPE_HEAP && w->type != STORE_TYPE_RETAINED)
        return -EINVAL;
    if (r->len > STORE_RAW_MAX || (r->len > 0 && r->pprof == NULL))
        return -EINVAL;
    return 0;
}

int store_counters_read(struct store *s, MDB_txn *txn, struct store_counters *c)
{
    int rc;
    memset(c, 0, sizeof(*c));
    if ((rc = store_meta_get_u64(s, txn, "next_seq", &c->next_seq)) != 0 ||
        (rc = store_meta_get_u64(s, txn, "stored_bytes", &c->stored)) != 0 ||
        (rc = store_meta_get_u64(s, txn, "evicted", &c->evicted_total)) != 0 ||
        (rc = store_meta_get_u64(s, txn, "outbox_evicted", &c->outbox_evicted)) != 0)
        return rc;
    if (c->next_seq == 0)
        return ISOPROF_ECORRUPT;
    return 0;
}

int store_counters_write(struct store *s, MDB_txn *txn, const struct store_counters *c)
{
    int rc;
    if ((rc = store_meta_put_u64(s, txn, "next_seq", c->next_seq)) != 0 ||
        (rc = store_meta_put_u64(s, txn, "stored_bytes", c->stored)) != 0 ||
        (rc = store_meta_put_u64(s, txn, "evicted", c->evicted_total)) != 0 ||
        (rc = store_meta_put_u64(s, txn, "outbox_evicted", c->outbox_evicted)) != 0)
        return rc;
    return 0;
}

/* A window still pending upload counts in c->outbox_evicted. */
int store_window_delete(struct store *s, MDB_txn *txn, struct store_counters *c, const uint8_t *wk,
                        size_t klen, uint64_t *bytes)
{
    MDB_val k = {klen, (void *)wk}, d;
    *bytes = 0;
    int rc = mdb_get(txn, s->windows, &k, &d);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc != 0)
        return rc;
    struct store_rec_hdr h;
    uint64_t seq = 0;
    uint32_t flags = 0, dict = 0;
    int blob = 0;
    if (store_record_decode(d.mv_data, d.mv_size, &h) == 0) {
        seq = h.seq; /* else the ids entry cannot be found; store_check reports it */
        flags = h.flags;
        dict = h.dict;
        blob = h.codec == STORE_CODEC_BLOB;
    }
    *bytes = store_stored_size(klen, d.mv_size, flags);
    if ((rc = mdb_del(txn, s->windows, &k, NULL)) != 0)
        return rc;
    if (blob) {
        /* A snapshot's chunks go with it, charged as they are (not as its
         * descriptor says), so that the counter follows the data. */
        uint64_t n = 0, chunk_bytes = 0;
        if ((rc = store_blob_drop_txn(s, txn, seq, &n, &chunk_bytes)) != 0)
            return rc;
        *bytes += chunk_bytes;
    }
    struct store_key key;
    if (store_key_decode(wk, klen, &key) == 0) {
        if (dict != 0) {
            /* The last window of a dictionary takes it along. */
            uint64_t freed = 0;
            rc = store_dict_ref_txn(s, txn, dict, wk, store_dict_series_len(&key), -1, &freed);
            if (rc != 0)
                return rc;
            c->stored = c->stored > freed ? c->stored - freed : 0;
        }
        uint8_t tk[STORE_TIME_KEY_MAX];
        store_be64_put(tk, key.start_ns);
        memcpy(tk + 8, wk, klen);
        MDB_val t = {8 + klen, tk};
        rc = mdb_del(txn, s->by_time, &t, NULL);
        if (rc != 0 && rc != MDB_NOTFOUND)
            return rc;
        if ((rc = store_unpin_txn(s, txn, tk, 8 + klen, seq)) != 0)
            return rc;
    }
    if (seq != 0) {
        if ((rc = store_del_u64(txn, s->ids, seq)) != 0)
            return rc;
        int pending = 0;
        if ((rc = store_outbox_drop_txn(s, txn, seq, &pending)) != 0)
            return rc;
        c->outbox_evicted += (uint64_t)pending;
    }
    return 0;
}

/* The first entry at or after seek (seeklen bytes; 0 = the first) of db,
 * copied into out. In by_time, pinned entries are skipped. 1 if found, 0
 * if none, or a negative raw LMDB code. */
static int first_entry(struct store *s, MDB_txn *txn, MDB_dbi db, const uint8_t *seek,
                       size_t seeklen, uint8_t *out, size_t *outlen)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, db, &cur);
    if (rc != 0)
        return rc > 0 ? -rc : rc;
    MDB_val k = {seeklen, (void *)seek}, d;
    int found = 0;
    for (rc = mdb_cursor_get(cur, &k, &d, seeklen ? MDB_SET_RANGE : MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
        if (k.mv_size < 8 || k.mv_size > STORE_TIME_KEY_MAX)
            continue; /* cannot be ours; store_check reports it */
        if (db == s->by_time) {
            MDB_val pv;
            int prc = mdb_get(txn, s->pins, &k, &pv);
            if (prc == 0)
                continue;
            if (prc != MDB_NOTFOUND) {
                rc = prc;
                break;
            }
        }
        memcpy(out, k.mv_data, k.mv_size);
        *outlen = k.mv_size;
        found = 1;
        break;
    }
    mdb_cursor_close(cur);
    if (found)
        return 1;
    if (rc == MDB_NOTFOUND)
        return 0;
    return rc > 0 ? -rc : rc;
}

/* Does the oldest pinned window (time key pk) go before the oldest
 * unpinned one (uk)? Only once it is pin_factor times as old. */
static int pinned_first(const struct store *s, uint64_t now, const uint8_t *pk, const uint8_t *uk)
{
    uint64_t ps = store_be64_get(pk), us = store_be64_get(uk);
    double page = now > ps ? (double)(now - ps) : 0.0;
    double uage = now > us ? (double)(now - us) : 0.0;
    return page > (double)s->pin_factor * uage;
}

/* Evict while the stored bytes exceed target: the oldest unpinned window,
 * unless the oldest pinned one is pin_factor times older than it (or no
 * unpinned window is left). Raw LMDB code (negative: see first_entry). */
int store_evict_to(struct store *s, MDB_txn *txn, struct store_counters *c, uint64_t target)
{
    uint8_t ukey[STORE_TIME_KEY_MAX], pkey[STORE_TIME_KEY_MAX];
    size_t ulen = 0, plen = 0, useek = 0;
    uint64_t now = isoprof_now_wall_ns();
    int rc = 0;
    while (c->stored > target) {
        /* Unpinned entries before the last one evicted are all gone: seek
         * from there, so a run of pinned windows at the head is skipped
         * once per transaction, not once per eviction. */
        int u = first_entry(s, txn, s->by_time, ukey, useek, ukey, &ulen);
        int p = u < 0 ? u : first_entry(s, txn, s->pins, NULL, 0, pkey, &plen);
        if (u < 0 || p < 0) {
            rc = u < 0 ? u : p;
            break;
        }
        if (!u && !p) {
            /* Nothing left to evict: what is left are the chunks of a
             * snapshot being streamed in (or of orphans), which no window
             * owns, and the per-version aggregates, which keep bounds.
             * Anything else the counter says was drift (store_check
             * reports it); trust the data. */
            uint64_t left = 0, naggs = 0, aggs = 0;
            if ((rc = store_blob_charge_txn(s, txn, &left)) == 0 &&
                (rc = store_agg_charge_txn(s, txn, &naggs, &aggs)) == 0)
                c->stored = left + aggs;
            break;
        }
        const uint8_t *tk = ukey;
        size_t tklen = ulen;
        if (p && (!u || pinned_first(s, now, pkey, ukey))) {
            tk = pkey;
            tklen = plen;
        } else {
            useek = ulen;
        }
        MDB_val t = {tklen, (void *)tk};
        rc = mdb_del(txn, s->by_time, &t, NULL);
        if (rc != 0 && rc != MDB_NOTFOUND)
            break;
        uint64_t bytes = 0;
        if (tklen > 8 && (rc = store_window_delete(s, txn, c, tk + 8, tklen - 8, &bytes)) != 0)
            break;
        if (bytes == 0) {
            /* A dangling time or pin entry, now gone. */
            if ((rc = store_unpin_txn(s, txn, tk, tklen, 0)) != 0)
                break;
            continue;
        }
        c->stored = c->stored > bytes ? c->stored - bytes : 0;
        c->evicted++;
        c->evicted_total++;
        c->evicted_bytes += bytes;
    }
    return rc;
}

/* Item it (record r) in the write txn: find (or build) its series'
 * dictionary, compress it again if that is not the one it was compressed
 * with, and count its reference. A damaged dictionary entry means no
 * dictionary (store_check reports it), not a failed put. Raw LMDB code or
 * a project code. */
static int item_dict_txn(struct store *s, MDB_txn *txn, struct store_counters *c,
                         const struct store_record *r, struct put_item *it)
{
    struct store_key key;
    uint32_t id = 0;
    uint64_t refs = 0, charge = 0;
    const ZSTD_CDict *cd = NULL;
    int rc = 0;
    if (s->dicts_on && store_key_decode(it->key, it->klen, &key) == 0) {
        size_t slen = store_dict_series_len(&key);
        rc = store_dict_find(s, txn, it->key, slen, &id, &refs);
        if (rc == MDB_NOTFOUND) {
            if ((rc = store_dict_build_txn(s, txn, &key, &id, &charge)) != 0)
                return rc;
            c->stored += charge;
        } else if (rc == ISOPROF_ECORRUPT) {
            id = 0;
        } else if (rc != 0) {
            return rc;
        }
        if (id != 0) {
            rc = store_dict_cdict(s, txn, id, &cd);
            if (rc == MDB_NOTFOUND || rc == ISOPROF_ECORRUPT || rc == ISOPROF_EZSTD)
                id = 0, cd = NULL;
            else if (rc != 0)
                return rc;
        }
        if (id != 0 && (rc = store_dict_ref_txn(s, txn, id, it->key, slen, 1, &charge)) != 0)
            return rc;
    }
    if (id != it->dict || it->fresh) {
        uint8_t *val;
        size_t vlen;
        if ((rc = store_record_build_dict(s->cctx, cd, id, r, s->outbox_on, &val, &vlen)) != 0)
            return rc;
        isoprof_free(it->val);
        it->val = val;
        it->vlen = vlen;
        it->dict = id;
    }
    it->fresh = id != 0 && store_dict_is_new(s, id);
    return 0;
}

/* Before the write txn: compress item it (record r) with the dictionary
 * its series has in the committed state of rtxn (NULL: none). 0, -ENOMEM
 * or ISOPROF_EZSTD; the write txn settles everything else. */
static int item_build(struct store *s, MDB_txn *rtxn, const struct store_record *r,
                      struct put_item *it)
{
    struct store_key key;
    uint32_t id = 0;
    uint64_t refs;
    const ZSTD_CDict *cd = NULL;
    if (rtxn != NULL && store_key_decode(it->key, it->klen, &key) == 0 &&
        store_dict_find(s, rtxn, it->key, store_dict_series_len(&key), &id, &refs) == 0) {
        int rc = store_dict_cdict(s, rtxn, id, &cd);
        if (rc == -ENOMEM)
            return rc;
        if (rc != 0)
            id = 0, cd = NULL;
    }
    it->dict = id;
    it->fresh = 0;
    return store_record_build_dict(s->cctx, cd, id, r, s->outbox_on, &it->val, &it->vlen);
}

/* One attempt at the whole batch. Returns 0, a raw LMDB code or a project
 * code; store_err maps the first and passes the second through. */
static int put_txn(struct store *s, struct store_record *recs, struct put_item *it, size_t n,
                   struct store_counters *out)
{
    MDB_txn *txn;
    struct store_counters c;
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc != 0)
        return rc;
    if ((rc = store_counters_read(s, txn, &c)) != 0)
        goto end;
    for (size_t i = 0; i < n; i++) {
        uint64_t old = 0;
        if ((rc = item_dict_txn(s, txn, &c, &recs[i], &it[i])) != 0)
            goto end;
        if ((rc = store_window_delete(s, txn, &c, it[i].key, it[i].klen, &old)) != 0)
            goto end;
        c.stored = c.stored > old ? c.stored - old : 0;
        /* store_key_encode kept the key within the time index's (STORE_KEY_MAX)
         * and the record was encoded whole; seq only grows (0 is never an id). */
        ISOPROF_ASSERT(it[i].klen > STORE_KEY_TAIL && it[i].klen <= STORE_KEY_MAX);
        ISOPROF_ASSERT(it[i].vlen >= STORE_REC_FIXED);
        ISOPROF_ASSERT(c.next_seq != 0);
        uint64_t seq = c.next_seq++;
        store_be64_put(it[i].val + STORE_REC_SEQ_OFF, seq);
        MDB_val k = {it[i].klen, it[i].key}, d = {it[i].vlen, it[i].val};
        if ((rc = mdb_put(txn, s->windows, &k, &d, 0)) != 0)
            goto end;
        uint8_t tk[STORE_TIME_KEY_MAX];
        store_be64_put(tk, recs[i].w.start_ns);
        memcpy(tk + 8, it[i].key, it[i].klen);
        MDB_val t = {8 + it[i].klen, tk}, empty = {0, NULL};
        if ((rc = mdb_put(txn, s->by_time, &t, &empty, 0)) != 0)
            goto end;
        uint8_t ik[8];
        store_be64_put(ik, seq);
        MDB_val ikv = {8, ik};
        if ((rc = mdb_put(txn, s->ids, &ikv, &k, 0)) != 0)
            goto end;
        /* Queued before the pin, which moves it to the front if it pins. */
        unsigned prio = recs[i].w.anomaly ? STORE_OUTBOX_PRIO_ANOMALY : STORE_OUTBOX_PRIO_OTHER;
        if (s->outbox_on && (rc = store_outbox_put_txn(s, txn, seq, prio)) != 0)
            goto end;
        if (recs[i].pin && (rc = store_pin_txn(s, txn, recs[i].pin, seq, tk, 8 + it[i].klen)) != 0)
            goto end;
        c.stored += stored_size(s, &it[i]);
    }
    if ((rc = store_evict_to(s, txn, &c, s->budget)) != 0 ||
        (rc = store_anomaly_sweep_txn(s, txn)) != 0)
        goto end;
    rc = store_counters_write(s, txn, &c);
end:
    if ((rc = store_txn_end(s, txn, rc)) == 0) /* nothing is stored on failure */
        *out = c;
    return rc;
}

int store_txn_end(struct store *s, MDB_txn *txn, int rc)
{
    if (rc == 0)
        rc = mdb_txn_commit(txn); /* on failure LMDB has freed the txn */
    else
        mdb_txn_abort(txn);
    store_dict_txn_done(s, rc == 0);
    return rc;
}

int store_evict_txn(struct store *s, uint64_t target, struct store_counters *out)
{
    MDB_txn *txn;
    struct store_counters c;
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc != 0)
        return rc;
    if ((rc = store_counters_read(s, txn, &c)) == 0 &&
        (rc = store_evict_to(s, txn, &c, target)) == 0)
        rc = store_counters_write(s, txn, &c);
    if ((rc = store_txn_end(s, txn, rc)) == 0)
        *out = c;
    return rc;
}

int store_evict_room(struct store *s, uint64_t need, uint64_t *evicted, uint64_t *evicted_bytes)
{
    uint64_t slack = s->budget / 8 + need;
    struct store_counters e;
    int rc = store_evict_txn(s, s->budget > slack ? s->budget - slack : 0, &e);
    if (rc == 0) {
        *evicted += e.evicted;
        *evicted_bytes += e.evicted_bytes;
    }
    return rc;
}

int store_put(struct store *s, struct store_record *recs, size_t n, struct store_put_stats *st)
{
    struct store_counters c = {0};
    uint64_t evicted = 0, evicted_bytes = 0;
    int rc = 0;
    if (st)
        memset(st, 0, sizeof(*st));
    if (s == NULL || (recs == NULL && n > 0))
        return -EINVAL;
    if (s->readonly)
        return -EROFS;
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((rc = check_record(&recs[i])) != 0)
            return rc;
    if (n > SIZE_MAX / sizeof(struct put_item))
        return -E2BIG;
    struct put_item *it = isoprof_calloc(n, sizeof(*it));
    if (it == NULL)
        return -ENOMEM;
    uint64_t batch = 0;
    MDB_txn *rtxn = NULL;
    if (s->dicts_on && (rc = store_txn_read(s, &rtxn)) != 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const struct store_window *w = &recs[i].w;
        it[i].klen = store_key_encode(it[i].key, sizeof(it[i].key), w->worker, w->version,
                                      w->start_ns, w->isolate, w->type);
        if (it[i].klen == 0) {
            rc = -EINVAL; /* unreachable after check_record; kept as a guard */
            goto out;
        }
        if ((rc = item_build(s, rtxn, &recs[i], &it[i])) != 0)
            goto out;
        uint64_t sz = stored_size(s, &it[i]);
        if (sz > s->budget) {
            rc = -E2BIG;
            goto out;
        }
        batch += sz;
    }
    if (rtxn != NULL) {
        mdb_txn_abort(rtxn);
        rtxn = NULL;
    }

    rc = put_txn(s, recs, it, n, &c);
    if ((rc == MDB_MAP_FULL || rc == ISOPROF_EMAPFULL) &&
        (rc = store_evict_room(s, batch, &evicted, &evicted_bytes)) == 0)
        rc = put_txn(s, recs, it, n, &c);
    if (rc != 0) {
        rc = store_err(rc);
        goto out;
    }
    evicted += c.evicted;
    evicted_bytes += c.evicted_bytes;
    for (size_t i = 0; i < n; i++) {
        recs[i].w.id = store_be64_get(it[i].val + STORE_REC_SEQ_OFF);
        recs[i].w.raw_size = recs[i].len;
        recs[i].w.stored_size = stored_size(s, &it[i]);
    }
out:
    if (rtxn != NULL)
        mdb_txn_abort(rtxn);
    if (st) {
        st->evicted = evicted;
        st->evicted_bytes = evicted_bytes;
    }
    for (size_t i = 0; i < n; i++)
        isoprof_free(it[i].val);
    isoprof_free(it);
    return rc;
}

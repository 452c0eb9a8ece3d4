/*
 * query.c - store_windows and store_load.
 *
 * A query is one read transaction, so it sees one committed snapshot and
 * never blocks or is blocked by the writer. Two access paths:
 *
 *   worker given   range seek in `windows` on the key prefix worker\0
 *                  (plus version\0 and the since time when known). Without
 *                  a version, a window outside [since, until) skips the
 *                  cursor to the start of the range within its version, or
 *                  past the version entirely, so a narrow time range over a
 *                  long history costs a few seeks per version, not a scan.
 *   no worker      walk `by_time` from since to until and fetch each window.
 *   pinned         the same walk over `pins`, which holds only the windows
 *                  anomalies keep.
 *
 * The window handed to the callback points into the snapshot (key strings
 * are NUL-terminated by their separators, the window labels by their own
 * NULs), so listing copies nothing but the header's labels (runtime,
 * thread, container) and a rejected window's reason (stored without a
 * NUL). The thread and the pid are not part of
 * the key (the isolate number already tells a process's threads apart),
 * so their filters are applied to each decoded header on whichever path
 * was chosen. Each window is looked up in pins, outbox and rejected only
 * when that DB holds anything and, for the last two, only when its header
 * says it was queued; the outbox peek (outbox.c) reads windows through the
 * same functions.
 */
#include "internal.h"

#include "base.h"

#include <errno.h>
#include <string.h>

struct query {
    struct store *s;
    struct store_view v;
    const struct store_filter *f;
    store_window_cb cb;
    void *arg;
    struct store_walk w; /* the walk's last key */
};

int store_walk_step(struct store_walk *w, const MDB_val *k)
{
    if (!store_inside(&w->b, k) || k->mv_size > sizeof(w->last))
        return ISOPROF_ECORRUPT;
    if (w->have_last) {
        size_t n = k->mv_size < w->last_len ? k->mv_size : w->last_len;
        int c = memcmp(k->mv_data, w->last, n);
        if (c < 0 || (c == 0 && k->mv_size <= w->last_len))
            return ISOPROF_ECORRUPT;
    }
    memcpy(w->last, k->mv_data, k->mv_size);
    w->last_len = k->mv_size;
    w->have_last = 1;
    return 0;
}

int store_view_init(struct store *s, MDB_txn *txn, struct store_view *v)
{
    MDB_stat ps, os, rs;
    int rc;
    if ((rc = mdb_stat(txn, s->pins, &ps)) != 0 || (rc = mdb_stat(txn, s->outbox, &os)) != 0 ||
        (rc = mdb_stat(txn, s->rejected, &rs)) != 0)
        return rc;
    v->txn = txn;
    store_bounds_get(s, &v->b);
    v->pins = ps.ms_entries > 0;
    v->outbox = os.ms_entries > 0;
    v->rejected = rs.ms_entries > 0;
    v->reason[0] = '\0';
    return 0;
}

int store_window_by_seq(struct store *s, MDB_txn *txn, uint64_t seq, MDB_val *kv,
                        struct store_key *k, MDB_val *dv)
{
    uint8_t ik[8];
    store_be64_put(ik, seq);
    MDB_val i = {8, ik};
    int rc = mdb_get(txn, s->ids, &i, kv);
    if (rc != 0)
        return rc;
    if (store_key_decode(kv->mv_data, kv->mv_size, k) != 0)
        return MDB_NOTFOUND;
    return mdb_get(txn, s->windows, kv, dv);
}

/* w's upload state (its header says it was queued). Raw LMDB code. */
static int upload_state(struct store *s, struct store_view *v, struct store_window *w)
{
    int rc = v->outbox ? store_outbox_find(s, v->txn, w->id) : MDB_NOTFOUND;
    if (rc != MDB_NOTFOUND) {
        w->upload = STORE_UPLOAD_PENDING;
        return rc;
    }
    w->upload = STORE_UPLOAD_UPLOADED;
    if (!v->rejected)
        return 0;
    uint8_t ik[8];
    store_be64_put(ik, w->id);
    MDB_val i = {8, ik}, d;
    rc = mdb_get(v->txn, s->rejected, &i, &d);
    if (rc != 0)
        return rc == MDB_NOTFOUND ? 0 : rc;
    if (d.mv_size < STORE_REJECT_FIXED || !store_inside(&v->b, &d))
        return ISOPROF_ECORRUPT;
    const uint8_t *p = d.mv_data;
    size_t rl = d.mv_size - STORE_REJECT_FIXED;
    if (rl > STORE_REJECT_REASON_MAX)
        rl = STORE_REJECT_REASON_MAX;
    memcpy(v->reason, p + STORE_REJECT_FIXED, rl);
    v->reason[rl] = '\0';
    w->reject_status = (uint16_t)(p[0] << 8 | p[1]);
    w->upload =
        w->reject_status == STORE_REJECT_EXPIRED ? STORE_UPLOAD_EXPIRED : STORE_UPLOAD_REJECTED;
    w->reject_reason = v->reason;
    return 0;
}

int store_window_read(struct store *s, struct store_view *v, const struct store_key *k, size_t klen,
                      const MDB_val *d, struct store_window *w)
{
    struct store_rec_hdr *h = &v->hdr; /* w->runtime points into it */
    if (!store_inside(&v->b, d) || store_record_decode(d->mv_data, d->mv_size, h) != 0)
        return ISOPROF_ECORRUPT;
    store_window_fill(w, k, h, klen, d->mv_size);
    if (v->pins) {
        uint8_t tk[STORE_TIME_KEY_MAX];
        store_be64_put(tk, k->start_ns);
        memcpy(tk + 8, k->worker, klen);
        int rc = store_pins_get(s, v->txn, tk, 8 + klen, &w->pinned);
        if (rc != 0 && rc != MDB_NOTFOUND)
            return rc;
    }
    w->reject_reason = "";
    return (h->flags & STORE_FLAG_QUEUED) ? upload_state(s, v, w) : 0;
}

static int str_eq(const char *want, const char *got, size_t got_len)
{
    return strlen(want) == got_len && memcmp(want, got, got_len) == 0;
}

/* Filters that the access path does not already guarantee. */
static int key_matches(const struct store_filter *f, const struct store_key *k)
{
    if (f->worker && !str_eq(f->worker, k->worker, k->worker_len))
        return 0;
    if (f->version && !str_eq(f->version, k->version, k->version_len))
        return 0;
    if (f->type && f->type != k->type)
        return 0;
    if (f->since_ns && k->start_ns < f->since_ns)
        return 0;
    if (f->until_ns && k->start_ns >= f->until_ns)
        return 0;
    return 1;
}

/* Decode the value of window key k (klen bytes) and call back.
 * Returns 0 to go on (also for a record that does not decode: it costs
 * the listing that window, and store_check reports it), the callback's
 * value, ISOPROF_ECORRUPT (a value outside the file: nothing read through
 * this tree can be trusted) or a raw LMDB code. */
static int emit(struct query *q, const struct store_key *k, size_t klen, const MDB_val *d)
{
    struct store_window w;
    if (!store_inside(&q->v.b, d))
        return ISOPROF_ECORRUPT;
    int rc = store_window_read(q->s, &q->v, k, klen, d, &w);
    if (rc == ISOPROF_ECORRUPT)
        return 0;
    if (rc != 0)
        return rc;
    if (q->f->id && w.id != q->f->id)
        return 0;
    if (q->f->pinned && !(w.pinned & q->f->pinned))
        return 0;
    /* The thread and the pid live in the header, not the key: filtered here. */
    if (q->f->thread && strcmp(store_thread_of(q->f->thread), w.thread) != 0)
        return 0;
    if (q->f->pid && q->f->pid != w.pid)
        return 0;
    return q->cb(&w, q->arg);
}

/* The window of one id: none when the id, its key or its window is
 * missing (store_check reports an entry of ids that names no window);
 * ISOPROF_ECORRUPT for a key outside the file. */
static int by_id(struct query *q)
{
    uint8_t ik[8];
    store_be64_put(ik, q->f->id);
    MDB_val i = {8, ik}, k, d;
    struct store_key key;
    int rc = mdb_get(q->v.txn, q->s->ids, &i, &k);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc != 0)
        return rc;
    if (!store_inside(&q->v.b, &k))
        return ISOPROF_ECORRUPT;
    if (store_key_decode(k.mv_data, k.mv_size, &key) != 0)
        return 0;
    rc = mdb_get(q->v.txn, q->s->windows, &k, &d);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc != 0)
        return rc;
    if (!key_matches(q->f, &key))
        return 0;
    return emit(q, &key, k.mv_size, &d);
}

/* Walk a time-keyed DB (by_time, or pins for pinned windows) from since
 * to until and fetch each window. */
static int by_time(struct query *q, MDB_dbi db)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open(q->v.txn, db, &c);
    if (rc != 0)
        return rc;
    uint8_t seek[8];
    store_be64_put(seek, q->f->since_ns);
    MDB_val k = {8, seek}, d;
    for (rc = mdb_cursor_get(c, &k, &d, q->f->since_ns ? MDB_SET_RANGE : MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        /* An entry that is no start + window key, or names no window, is
         * skipped (store_check reports it); one out of order or outside
         * the file ends the walk. */
        if ((rc = store_walk_step(&q->w, &k)) != 0)
            break;
        if (k.mv_size < 8)
            continue;
        if (q->f->until_ns && store_be64_get(k.mv_data) >= q->f->until_ns)
            break;
        struct store_key key;
        MDB_val wk = {k.mv_size - 8, (uint8_t *)k.mv_data + 8}, v;
        if (store_key_decode(wk.mv_data, wk.mv_size, &key) != 0 || !key_matches(q->f, &key))
            continue;
        rc = mdb_get(q->v.txn, q->s->windows, &wk, &v);
        if (rc == MDB_NOTFOUND)
            continue;
        if (rc != 0)
            break;
        if ((rc = emit(q, &key, wk.mv_size, &v)) != 0)
            break;
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int by_key(struct query *q)
{
    const struct store_filter *f = q->f;
    size_t wl = strlen(f->worker);
    size_t vl = f->version ? strlen(f->version) : 0;
    /* A prefix that cannot be a key matches nothing. */
    if (wl > STORE_WORKER_MAX || vl > STORE_VERSION_MAX || wl + vl > STORE_LABELS_MAX)
        return 0;
    uint8_t seek[STORE_KEY_MAX];
    size_t plen = wl + 1; /* the prefix every match carries */
    memcpy(seek, f->worker, wl + 1);
    size_t slen = plen;
    if (f->version) {
        memcpy(seek + plen, f->version, vl + 1);
        plen += vl + 1;
        slen = plen;
        if (f->since_ns) {
            store_be64_put(seek + slen, f->since_ns);
            slen += 8;
        }
    }
    MDB_cursor *c;
    int rc = mdb_cursor_open(q->v.txn, q->s->windows, &c);
    if (rc != 0)
        return rc;
    MDB_val k = {slen, seek}, d;
    rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    while (rc == 0) {
        if ((rc = store_walk_step(&q->w, &k)) != 0)
            break;
        if (k.mv_size < plen || memcmp(k.mv_data, seek, plen) != 0)
            break; /* past the prefix: done */
        struct store_key key;
        if (store_key_decode(k.mv_data, k.mv_size, &key) != 0) {
            rc = mdb_cursor_get(c, &k, &d, MDB_NEXT);
            continue;
        }
        if (f->since_ns && key.start_ns < f->since_ns) {
            /* Jump to since within this version (only without a version
             * filter: with one, the first seek already did). */
            size_t n = wl + 1 + key.version_len + 1;
            memmove(seek + wl + 1, key.version, key.version_len + 1);
            store_be64_put(seek + n, f->since_ns);
            k.mv_size = n + 8;
            k.mv_data = seek;
            rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
            continue;
        }
        if (f->until_ns && key.start_ns >= f->until_ns) {
            if (f->version)
                break;
            /* Skip the rest of this version: the smallest key above every
             * key of it ends its version with \x01 instead of \0. */
            size_t n = wl + 1 + key.version_len;
            memmove(seek + wl + 1, key.version, key.version_len);
            seek[n] = 0x01;
            k.mv_size = n + 1;
            k.mv_data = seek;
            rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
            continue;
        }
        if (key_matches(f, &key) && (rc = emit(q, &key, k.mv_size, &d)) != 0)
            break;
        rc = mdb_cursor_get(c, &k, &d, MDB_NEXT);
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int store_windows(struct store *s, const struct store_filter *f, store_window_cb cb, void *arg)
{
    static const struct store_filter all;
    if (s == NULL || cb == NULL)
        return -EINVAL;
    struct query q = {.s = s, .f = f ? f : &all, .cb = cb, .arg = arg};
    MDB_txn *txn;
    int rc = store_txn_read(s, &txn);
    if (rc != 0)
        return rc;
    if ((rc = store_view_init(s, txn, &q.v)) != 0) {
        mdb_txn_abort(txn);
        return store_err(rc);
    }
    q.w.b = q.v.b;
    /* Callback values pass through untouched; only LMDB codes (which
     * callbacks do not produce) are translated. */
    if (q.f->id)
        rc = by_id(&q);
    else if (q.f->pinned)
        rc = by_time(&q, s->pins);
    else if (q.f->worker)
        rc = by_key(&q);
    else
        rc = by_time(&q, s->by_time);
    mdb_txn_abort(txn);
    if (rc >= MDB_KEYEXIST && rc <= MDB_LAST_ERRCODE)
        rc = store_err(rc);
    return rc;
}

int store_load(struct store *s, uint64_t id, void **pprof, size_t *len)
{
    if (s == NULL || pprof == NULL || len == NULL || id == 0)
        return -EINVAL;
    MDB_txn *txn;
    int rc = store_txn_read(s, &txn);
    if (rc != 0)
        return rc;
    uint8_t ik[8];
    store_be64_put(ik, id);
    MDB_val i = {8, ik}, k, d;
    struct store_key key;
    struct store_rec_hdr h;
    struct store_bounds b;
    store_bounds_get(s, &b);
    if ((rc = mdb_get(txn, s->ids, &i, &k)) != 0) {
        rc = store_err(rc); /* ISOPROF_ENOTFOUND: no such window (evicted) */
        goto out;
    }
    if (!store_inside(&b, &k) || store_key_decode(k.mv_data, k.mv_size, &key) != 0) {
        rc = ISOPROF_ECORRUPT;
        goto out;
    }
    /* ids and windows change together: an id naming no window is damage. */
    if ((rc = mdb_get(txn, s->windows, &k, &d)) != 0) {
        rc = rc == MDB_NOTFOUND ? ISOPROF_ECORRUPT : store_err(rc);
        goto out;
    }
    if (!store_inside(&b, &d)) {
        rc = ISOPROF_ECORRUPT;
        goto out;
    }
    if (key.type == STORE_TYPE_SNAPSHOT) {
        rc = -EMEDIUMTYPE; /* no pprof: store_blob_read streams it */
        goto out;
    }
    if (store_record_decode(d.mv_data, d.mv_size, &h) != 0 || h.seq != id) {
        rc = ISOPROF_ECORRUPT;
        goto out;
    }
    void *out;
    /* The dictionary is read in this txn: the snapshot that holds the
     * record holds its dictionary (it goes only with its last record). */
    if ((rc = store_record_load_txn(s, txn, &h, &out)) != 0) {
        rc = store_err(rc);
        goto out;
    }
    *pprof = out;
    *len = (size_t)h.raw_size;
out:
    mdb_txn_abort(txn);
    return rc;
}

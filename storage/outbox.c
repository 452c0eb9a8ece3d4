/*
 * outbox.c - the upload outbox: which stored windows still wait for the
 * upload server, in the order they should go.
 *
 * With store_options.outbox set, store_put queues every window it stores in
 * the insert transaction itself: the record header gets STORE_FLAG_QUEUED
 * and `outbox` an entry prio:u8 seq:u64 -> queued_ns:u64. Prio 0 holds the
 * windows taken for an anomaly or pinned to one (the evidence goes first),
 * prio 1 the others, so a cursor from the start of the DB is the drain
 * order: prio 0 by seq, then prio 1 by seq. A window has at most one entry;
 * pinning a pending window moves it from prio 1 to prio 0.
 *
 * An entry leaves the outbox in one of three ways, each in one write
 * transaction with what it records:
 *   ack      the server took it: the entry goes, meta "uploaded" counts it;
 *   reject   refused for good: the entry goes, `rejected` keeps seq ->
 *            status:u16 + reason (the window stays in the store);
 *   expire   too old for the server (upload.max_age): a reject whose
 *            status is STORE_REJECT_EXPIRED, which no HTTP answer has;
 *   evicted  the window went (retention, replacement; put.c): the entry and
 *            any rejected entry go, meta "outbox_evicted" counts it.
 * The QUEUED flag stays in the header, so a window reads as uploaded when
 * it is queued and has neither entry, and as never queued without the flag.
 *
 * DESIGN: ack and reject run on the uploader's thread, concurrently with
 * store_put on the writer's. They use no per-handle state (no compression
 * context), and LMDB serialises their write transactions with store_put's,
 * so each sees the other's committed state; an id the put evicted or
 * replaced meanwhile is simply no longer pending and is ignored.
 */
#include "internal.h"

#include "base.h"

#include <errno.h>
#include <string.h>

size_t store_thread_label(const char *thread)
{
    size_t n = strlen(thread);
    const char *hash = strrchr(thread, '#');
    if (hash == NULL || hash == thread || hash[1] == '\0')
        return n;
    for (const char *p = hash + 1; *p; p++)
        if (*p < '0' || *p > '9')
            return n;
    return (size_t)(hash - thread);
}

int store_outbox_put_txn(struct store *s, MDB_txn *txn, uint64_t seq, unsigned prio)
{
    uint8_t key[STORE_OUTBOX_KEY_LEN], val[STORE_OUTBOX_VAL_LEN];
    store_outbox_key(key, prio, seq);
    store_be64_put(val, isoprof_now_wall_ns());
    MDB_val k = {sizeof(key), key}, d = {sizeof(val), val};
    return mdb_put(txn, s->outbox, &k, &d, 0);
}

/* Delete window seq's outbox entries (both prios); *found: 1 if there was
 * one. Raw LMDB code. */
static int outbox_del(struct store *s, MDB_txn *txn, uint64_t seq, int *found)
{
    *found = 0;
    for (unsigned prio = STORE_OUTBOX_PRIO_ANOMALY; prio <= STORE_OUTBOX_PRIO_OTHER; prio++) {
        uint8_t key[STORE_OUTBOX_KEY_LEN];
        store_outbox_key(key, prio, seq);
        MDB_val k = {sizeof(key), key};
        int rc = mdb_del(txn, s->outbox, &k, NULL);
        if (rc == 0)
            *found = 1;
        else if (rc != MDB_NOTFOUND)
            return rc;
    }
    return 0;
}

int store_outbox_drop_txn(struct store *s, MDB_txn *txn, uint64_t seq, int *pending)
{
    int rc = outbox_del(s, txn, seq, pending);
    return rc != 0 ? rc : store_del_u64(txn, s->rejected, seq);
}

int store_outbox_promote_txn(struct store *s, MDB_txn *txn, uint64_t seq)
{
    uint8_t key[STORE_OUTBOX_KEY_LEN], val[STORE_OUTBOX_VAL_LEN];
    store_outbox_key(key, STORE_OUTBOX_PRIO_OTHER, seq);
    MDB_val k = {sizeof(key), key}, d;
    int rc = mdb_get(txn, s->outbox, &k, &d);
    if (rc != 0)
        return rc == MDB_NOTFOUND ? 0 : rc;
    if (d.mv_size != sizeof(val))
        return 0; /* malformed; store_check reports it */
    memcpy(val, d.mv_data, sizeof(val));
    if ((rc = mdb_del(txn, s->outbox, &k, NULL)) != 0)
        return rc;
    key[0] = STORE_OUTBOX_PRIO_ANOMALY;
    d = (MDB_val){sizeof(val), val};
    return mdb_put(txn, s->outbox, &k, &d, 0);
}

int store_outbox_find(struct store *s, MDB_txn *txn, uint64_t seq)
{
    for (unsigned prio = STORE_OUTBOX_PRIO_ANOMALY; prio <= STORE_OUTBOX_PRIO_OTHER; prio++) {
        uint8_t key[STORE_OUTBOX_KEY_LEN];
        store_outbox_key(key, prio, seq);
        MDB_val k = {sizeof(key), key}, d;
        int rc = mdb_get(txn, s->outbox, &k, &d);
        if (rc != MDB_NOTFOUND)
            return rc;
    }
    return MDB_NOTFOUND;
}

/* Which windows a pass of the peek hands out (see store_outbox_peek_late). */
enum peek_pass { PASS_ALL, PASS_YOUNG, PASS_LATE };

static int pass_takes(enum peek_pass pass, uint64_t start, uint64_t late_ns, uint64_t expire_ns)
{
    switch (pass) {
    case PASS_YOUNG:
        return start >= late_ns || start < expire_ns;
    case PASS_LATE:
        return start < late_ns && start >= expire_ns;
    default:
        return 1;
    }
}

struct peek {
    struct store *s;
    MDB_txn *txn;
    struct store_view v;
    uint64_t late_ns, expire_ns;
    size_t max, n;
    store_outbox_cb cb;
    void *arg;
    int cbrc;
};

/* One pass over the entries of prio. Raw LMDB code (or a project code);
 * p->cbrc set when the callback stopped it. */
static int peek_prio(struct peek *p, MDB_cursor *c, unsigned prio, enum peek_pass pass)
{
    uint8_t seek[1] = {(uint8_t)prio};
    MDB_val k = {sizeof(seek), seek}, d;
    int rc;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE); rc == 0 && p->n < p->max;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        if (k.mv_size >= 1 && ((const uint8_t *)k.mv_data)[0] != prio)
            return 0;
        if (k.mv_size != STORE_OUTBOX_KEY_LEN || d.mv_size != STORE_OUTBOX_VAL_LEN)
            continue; /* store_check reports it */
        uint64_t seq = store_be64_get((const uint8_t *)k.mv_data + 1);
        MDB_val wk, wv;
        struct store_key key;
        struct store_window w;
        rc = store_window_by_seq(p->s, p->txn, seq, &wk, &key, &wv);
        if (rc == 0)
            rc = store_window_read(p->s, &p->v, &key, wk.mv_size, &wv, &w);
        if (rc == MDB_NOTFOUND || rc == ISOPROF_ECORRUPT || (rc == 0 && w.id != seq))
            continue; /* the window is missing or damaged; store_check reports it */
        if (rc != 0)
            return rc;
        if (!pass_takes(pass, w.start_ns, p->late_ns, p->expire_ns))
            continue;
        w.upload = STORE_UPLOAD_PENDING;
        w.reject_status = 0;
        w.reject_reason = "";
        p->n++;
        if ((p->cbrc = p->cb(&w, store_be64_get(d.mv_data), p->arg)) != 0)
            return 0;
    }
    return rc;
}

int store_outbox_peek_late(struct store *s, uint64_t late_ns, uint64_t expire_ns, size_t max,
                           store_outbox_cb cb, void *arg)
{
    if (s == NULL || cb == NULL || expire_ns > late_ns)
        return -EINVAL;
    struct peek p = {
        .s = s, .late_ns = late_ns, .expire_ns = expire_ns, .max = max, .cb = cb, .arg = arg};
    int rc = store_txn_read(s, &p.txn);
    if (rc != 0)
        return rc;
    /* The view looks up pins only: every window here is pending by
     * definition, so its upload state is not looked up but set. */
    MDB_cursor *c = NULL;
    if ((rc = store_view_init(s, p.txn, &p.v)) != 0 ||
        (rc = mdb_cursor_open(p.txn, s->outbox, &c)) != 0)
        goto out;
    p.v.outbox = p.v.rejected = 0;
    for (unsigned prio = STORE_OUTBOX_PRIO_ANOMALY; prio <= STORE_OUTBOX_PRIO_OTHER; prio++) {
        enum peek_pass passes[2] = {PASS_ALL, PASS_ALL};
        size_t np = 1;
        if (late_ns != 0) {
            passes[0] = PASS_YOUNG;
            passes[1] = PASS_LATE;
            np = 2;
        }
        for (size_t i = 0; i < np; i++) {
            rc = peek_prio(&p, c, prio, passes[i]);
            if (rc == MDB_NOTFOUND)
                rc = 0;
            if (rc != 0 || p.cbrc != 0 || p.n >= max)
                goto out;
        }
    }
out:
    if (c)
        mdb_cursor_close(c);
    mdb_txn_abort(p.txn);
    if (p.cbrc != 0)
        return p.cbrc; /* the callback's value, untranslated */
    return rc == MDB_NOTFOUND ? 0 : store_err(rc);
}

int store_outbox_peek(struct store *s, size_t max, store_outbox_cb cb, void *arg)
{
    return store_outbox_peek_late(s, 0, 0, max, cb, arg);
}

/* The longest prefix of reason (NUL-terminated, NULL = "") that fits
 * STORE_REJECT_REASON_MAX and does not split a UTF-8 sequence. */
static size_t reason_len(const char *reason)
{
    if (reason == NULL)
        return 0;
    size_t n = strnlen(reason, STORE_REJECT_REASON_MAX + 1);
    if (n <= STORE_REJECT_REASON_MAX)
        return n;
    n = STORE_REJECT_REASON_MAX;
    /* reason[n] is the first byte cut: back off while it continues a
     * sequence that started before it (at most 3 bytes). */
    for (int i = 0; i < 3 && n > 0 && ((unsigned char)reason[n] & 0xc0) == 0x80; i++)
        n--;
    return n;
}

/* Ack (reject == 0) or reject ids (an expiry is a reject of status
 * STORE_REJECT_EXPIRED): one write transaction. */
static int outbox_settle(struct store *s, const uint64_t *ids, size_t n, int reject,
                         unsigned status, const char *reason)
{
    if (s == NULL || (ids == NULL && n > 0) || status > UINT16_MAX)
        return -EINVAL;
    if (s->readonly)
        return -EROFS;
    if (n == 0)
        return 0;
    uint8_t rv[STORE_REJECT_FIXED + STORE_REJECT_REASON_MAX];
    size_t rl = reason_len(reason);
    rv[0] = (uint8_t)(status >> 8);
    rv[1] = (uint8_t)status;
    if (rl)
        memcpy(rv + STORE_REJECT_FIXED, reason, rl);
    MDB_txn *txn;
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc != 0)
        return store_err(rc);
    uint64_t settled = 0;
    for (size_t i = 0; i < n; i++) {
        int found;
        if ((rc = outbox_del(s, txn, ids[i], &found)) != 0)
            goto abort;
        if (!found)
            continue; /* gone, replaced, or settled already */
        settled++;
        if (reject) {
            uint8_t ik[8];
            store_be64_put(ik, ids[i]);
            MDB_val k = {8, ik}, d = {STORE_REJECT_FIXED + rl, rv};
            if ((rc = mdb_put(txn, s->rejected, &k, &d, 0)) != 0)
                goto abort;
        }
    }
    if (settled == 0) {
        mdb_txn_abort(txn); /* nothing changed: no commit, no fsync */
        return 0;
    }
    if (!reject) {
        uint64_t up;
        if ((rc = store_meta_get_u64(s, txn, "uploaded", &up)) != 0 ||
            (rc = store_meta_put_u64(s, txn, "uploaded", up + settled)) != 0)
            goto abort;
    }
    return store_err(mdb_txn_commit(txn));
abort:
    mdb_txn_abort(txn);
    return store_err(rc);
}

int store_outbox_ack(struct store *s, const uint64_t *ids, size_t n)
{
    return outbox_settle(s, ids, n, 0, 0, NULL);
}

int store_outbox_reject(struct store *s, const uint64_t *ids, size_t n, unsigned status,
                        const char *reason)
{
    if (status == STORE_REJECT_EXPIRED)
        return -EINVAL; /* not an HTTP status: it would read as expired */
    return outbox_settle(s, ids, n, 1, status, reason);
}

int store_outbox_expire(struct store *s, const uint64_t *ids, size_t n, const char *reason)
{
    return outbox_settle(s, ids, n, 1, STORE_REJECT_EXPIRED, reason);
}

/* The queued time of the first entry of prio, if any, lowered into *oldest. */
static int first_queued(MDB_cursor *c, unsigned prio, uint64_t *oldest)
{
    uint8_t seek[1] = {(uint8_t)prio};
    MDB_val k = {sizeof(seek), seek}, d;
    int rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc != 0)
        return rc;
    if (k.mv_size == STORE_OUTBOX_KEY_LEN && ((const uint8_t *)k.mv_data)[0] == prio &&
        d.mv_size == STORE_OUTBOX_VAL_LEN) {
        uint64_t q = store_be64_get(d.mv_data);
        if (*oldest == 0 || q < *oldest)
            *oldest = q;
    }
    return 0;
}

/* The rejected entries that are expiries. A walk of the rejected DB (2
 * bytes read an entry): the count is kept nowhere else, so that it cannot
 * drift from the entries. Raw LMDB code. */
static int count_expired(struct store *s, MDB_txn *txn, uint64_t *n)
{
    *n = 0;
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->rejected, &c);
    if (rc != 0)
        return rc;
    MDB_val k, d;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        const uint8_t *p = d.mv_data;
        if (d.mv_size >= STORE_REJECT_FIXED && (p[0] << 8 | p[1]) == STORE_REJECT_EXPIRED)
            (*n)++;
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int store_outbox_stat_txn(struct store *s, MDB_txn *txn, struct store_stat *st)
{
    MDB_stat os, rs;
    int rc;
    if ((rc = mdb_stat(txn, s->outbox, &os)) != 0 || (rc = mdb_stat(txn, s->rejected, &rs)) != 0)
        return store_err(rc);
    st->outbox_pending = os.ms_entries;
    st->outbox_rejected = rs.ms_entries;
    if ((rc = count_expired(s, txn, &st->outbox_expired)) != 0)
        return store_err(rc);
    if ((rc = store_meta_get_u64(s, txn, "uploaded", &st->outbox_uploaded)) != 0 ||
        (rc = store_meta_get_u64(s, txn, "outbox_evicted", &st->outbox_evicted)) != 0)
        return rc;
    /* Within a prio entries are in seq order, which is the order they were
     * queued (up to wall-clock steps): the oldest is first in one of the
     * two groups. */
    MDB_cursor *c;
    if ((rc = mdb_cursor_open(txn, s->outbox, &c)) != 0)
        return store_err(rc);
    st->outbox_oldest_ns = 0;
    if ((rc = first_queued(c, STORE_OUTBOX_PRIO_ANOMALY, &st->outbox_oldest_ns)) == 0)
        rc = first_queued(c, STORE_OUTBOX_PRIO_OTHER, &st->outbox_oldest_ns);
    mdb_cursor_close(c);
    return store_err(rc);
}

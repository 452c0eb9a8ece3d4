/*
 * agg.c - per-version aggregates: one merged CPU profile per (worker,
 * version), kept apart from the windows so that retention, which evicts
 * windows, leaves a replaced version's aggregate as the baseline of the
 * next one. The bytes are the caller's and opaque here.
 *
 * Layout (big-endian):
 *   aggs  key   worker \0 version \0                (the dictionaries' series key)
 *         value 0 magic:u8 = 0xA7  1 version:u8 = 1  2 codec:u8 = 1 (zstd
 *               frame)  3 reserved (zero)  4 reserved:u32 (zero)
 *               8 first_ns:u64  16 last_ns:u64  24 windows:u64
 *               32 samples:u64  40 busy:u64  48 raw_size:u64
 *               56 one zstd frame (level 3, checksum, content size) of
 *               raw_size bytes
 *
 * Each entry is charged to the budget (meta "stored_bytes") as its key
 * and value bytes; nothing else names it. A put replaces the pair's entry
 * and then keeps at most `keep` entries of the worker, those seen last
 * (last_ns) longest ago going first, so the bound is per worker and
 * independent of window eviction; windows are evicted to make room for it
 * as for any write. The DB exists from schema 12: a read-only handle on an
 * older store (s->aggs_on 0) finds none.
 */
#include "internal.h"

#include "base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AGG_MAGIC 0xA7u
#define AGG_VERSION 1u
#define AGG_FIXED 56u
#define AGG_KEY_MAX (STORE_LABELS_MAX + 2u)

struct agg_hdr {
    uint64_t first_ns, last_ns, windows, samples, busy, raw_size;
    const uint8_t *frame;
    size_t frame_len;
};

/* Decode an aggs value; *why says what is wrong on ISOPROF_ECORRUPT. */
static int agg_decode(const void *val, size_t len, struct agg_hdr *h, const char **why)
{
    const uint8_t *p = val;
    *why = "bad magic, version or codec";
    if (len < AGG_FIXED || p[0] != AGG_MAGIC || p[1] != AGG_VERSION || p[2] != STORE_CODEC_ZSTD)
        return ISOPROF_ECORRUPT;
    h->first_ns = store_be64_get(p + 8);
    h->last_ns = store_be64_get(p + 16);
    h->windows = store_be64_get(p + 24);
    h->samples = store_be64_get(p + 32);
    h->busy = store_be64_get(p + 40);
    h->raw_size = store_be64_get(p + 48);
    h->frame = p + AGG_FIXED;
    h->frame_len = len - AGG_FIXED;
    *why = "figures out of order (last before first, busy above samples, no bytes)";
    if (h->last_ns < h->first_ns || h->busy > h->samples || h->raw_size == 0 ||
        h->raw_size > STORE_AGG_RAW_MAX)
        return ISOPROF_ECORRUPT;
    *why = NULL;
    return 0;
}

/* Split key (worker \0 version \0) into its strings, borrowed from it. */
static int agg_key_decode(const void *key, size_t len, const char **worker, const char **version)
{
    const uint8_t *k = key;
    if (len < 2 || len > AGG_KEY_MAX || k[len - 1] != 0)
        return ISOPROF_ECORRUPT;
    const uint8_t *nul = memchr(k, 0, len - 1);
    if (nul == NULL || memchr(nul + 1, 0, (size_t)(k + len - 1 - (nul + 1))) != NULL)
        return ISOPROF_ECORRUPT;
    *worker = (const char *)k;
    *version = (const char *)nul + 1;
    return 0;
}

static size_t agg_key_encode(uint8_t *out, const char *worker, const char *version)
{
    size_t wl = strlen(worker), vl = strlen(version);
    memcpy(out, worker, wl + 1);
    memcpy(out + wl + 1, version, vl + 1);
    return wl + vl + 2;
}

static int labels_ok(const char *worker, const char *version)
{
    if (worker == NULL || version == NULL)
        return 0;
    size_t wl = strnlen(worker, STORE_WORKER_MAX + 1), vl = strnlen(version, STORE_VERSION_MAX + 1);
    return wl <= STORE_WORKER_MAX && vl <= STORE_VERSION_MAX && wl + vl <= STORE_LABELS_MAX;
}

/* Inflate h's frame: exactly raw_size bytes, checksum good. */
static int agg_inflate(const struct agg_hdr *h, void **out)
{
    return store_frame_inflate(h->frame, h->frame_len, h->raw_size, NULL, 0, out);
}

/* One entry of a worker's aggregates, for keep. */
struct agg_entry {
    uint8_t key[AGG_KEY_MAX];
    size_t klen;
    uint64_t last_ns, charge;
};

static int entry_cmp(const void *a, const void *b)
{
    const struct agg_entry *x = a, *y = b;
    return x->last_ns < y->last_ns ? -1 : x->last_ns > y->last_ns;
}

/* Keep at most keep aggregates of worker (key prefix wk, wlen bytes with
 * its NUL), never the one at self. c->stored loses what goes. Raw LMDB
 * code, or ENOMEM. */
static int keep_txn(struct store *s, MDB_txn *txn, struct store_counters *c, const uint8_t *wk,
                    size_t wlen, const uint8_t *self, size_t selflen, unsigned keep,
                    size_t *dropped)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->aggs, &cur);
    if (rc != 0)
        return rc;
    struct agg_entry *e = NULL;
    size_t n = 0, cap = 0;
    MDB_val k = {wlen, (void *)wk}, d;
    for (rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
        if (k.mv_size < wlen || memcmp(k.mv_data, wk, wlen) != 0)
            break;
        if ((k.mv_size == selflen && memcmp(k.mv_data, self, selflen) == 0) ||
            k.mv_size > AGG_KEY_MAX)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct agg_entry *ne = isoprof_realloc(e, ncap * sizeof(*e));
            if (ne == NULL) {
                rc = ENOMEM;
                break;
            }
            e = ne;
            cap = ncap;
        }
        struct agg_hdr h;
        const char *why;
        memcpy(e[n].key, k.mv_data, k.mv_size);
        e[n].klen = k.mv_size;
        /* One that does not decode goes first: it could serve nobody. */
        e[n].last_ns = agg_decode(d.mv_data, d.mv_size, &h, &why) == 0 ? h.last_ns : 0;
        e[n].charge = (uint64_t)k.mv_size + d.mv_size;
        n++;
    }
    mdb_cursor_close(cur);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        isoprof_free(e);
        return rc;
    }
    rc = 0;
    size_t others = keep > 0 ? keep - 1 : n; /* this one is kept */
    if (n > others) {
        qsort(e, n, sizeof(*e), entry_cmp);
        for (size_t i = 0; i < n - others && rc == 0; i++) {
            MDB_val dk = {e[i].klen, e[i].key};
            rc = mdb_del(txn, s->aggs, &dk, NULL);
            c->stored = c->stored > e[i].charge ? c->stored - e[i].charge : 0;
            (*dropped)++;
        }
    }
    isoprof_free(e);
    return rc;
}

/* One attempt: the entry, keep, the budget. Raw LMDB code or project code. */
static int put_txn(struct store *s, const uint8_t *key, size_t klen, size_t wlen,
                   const uint8_t *val, size_t vlen, unsigned keep, size_t *dropped,
                   struct store_counters *out)
{
    MDB_txn *txn;
    struct store_counters c;
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc != 0)
        return rc;
    if ((rc = store_counters_read(s, txn, &c)) != 0)
        goto end;
    MDB_val k = {klen, (void *)key}, d;
    rc = mdb_get(txn, s->aggs, &k, &d);
    if (rc == 0)
        c.stored = c.stored > klen + d.mv_size ? c.stored - (klen + d.mv_size) : 0;
    else if (rc != MDB_NOTFOUND)
        goto end;
    d = (MDB_val){vlen, (void *)val};
    if ((rc = mdb_put(txn, s->aggs, &k, &d, 0)) != 0)
        goto end;
    c.stored += klen + vlen;
    *dropped = 0;
    if ((rc = keep_txn(s, txn, &c, key, wlen, key, klen, keep, dropped)) == 0 &&
        (rc = store_evict_to(s, txn, &c, s->budget)) == 0 &&
        (rc = store_anomaly_sweep_txn(s, txn)) == 0)
        rc = store_counters_write(s, txn, &c);
end:
    if ((rc = store_txn_end(s, txn, rc)) == 0)
        *out = c;
    return rc;
}

int store_agg_put(struct store *s, struct store_agg *a, const void *bytes, size_t len,
                  unsigned keep, size_t *dropped, struct store_put_stats *st)
{
    if (st)
        memset(st, 0, sizeof(*st));
    if (dropped)
        *dropped = 0;
    if (s == NULL || a == NULL || (bytes == NULL && len > 0))
        return -EINVAL;
    if (s->readonly)
        return -EROFS;
    if (!labels_ok(a->worker, a->version) || len == 0 || len > STORE_AGG_RAW_MAX ||
        a->last_ns < a->first_ns || a->busy > a->samples)
        return -EINVAL;
    if (!s->aggs_on)
        return -EROFS; /* unreachable: a writer always has the DB */
    size_t bound = ZSTD_compressBound(len);
    uint8_t *val = isoprof_malloc(AGG_FIXED + bound);
    if (val == NULL)
        return -ENOMEM;
    memset(val, 0, AGG_FIXED);
    val[0] = AGG_MAGIC;
    val[1] = AGG_VERSION;
    val[2] = STORE_CODEC_ZSTD;
    store_be64_put(val + 8, a->first_ns);
    store_be64_put(val + 16, a->last_ns);
    store_be64_put(val + 24, a->windows);
    store_be64_put(val + 32, a->samples);
    store_be64_put(val + 40, a->busy);
    store_be64_put(val + 48, len);
    size_t z = ZSTD_compress2(s->cctx, val + AGG_FIXED, bound, bytes, len);
    if (ZSTD_isError(z)) {
        isoprof_free(val);
        return ZSTD_getErrorCode(z) == ZSTD_error_memory_allocation ? -ENOMEM : ISOPROF_EZSTD;
    }
    size_t vlen = AGG_FIXED + z;
    uint8_t key[AGG_KEY_MAX];
    size_t klen = agg_key_encode(key, a->worker, a->version);
    size_t wlen = strlen(a->worker) + 1;
    /* labels_ok held both within STORE_LABELS_MAX: the key fits, the
     * worker's part is a prefix of it. */
    ISOPROF_ASSERT(klen <= AGG_KEY_MAX && wlen < klen);
    if (klen + vlen > s->budget) {
        isoprof_free(val);
        return -E2BIG;
    }
    struct store_counters c = {0};
    size_t n = 0;
    uint64_t evicted = 0, evicted_bytes = 0;
    int rc = put_txn(s, key, klen, wlen, val, vlen, keep, &n, &c);
    if ((rc == MDB_MAP_FULL || rc == ISOPROF_EMAPFULL) &&
        (rc = store_evict_room(s, klen + vlen, &evicted, &evicted_bytes)) == 0)
        rc = put_txn(s, key, klen, wlen, val, vlen, keep, &n, &c);
    isoprof_free(val);
    if (rc == 0) {
        evicted += c.evicted;
        evicted_bytes += c.evicted_bytes;
        a->raw_size = len;
        a->stored_size = klen + vlen;
        if (dropped)
            *dropped = n;
    }
    if (st) {
        st->evicted = evicted;
        st->evicted_bytes = evicted_bytes;
    }
    return rc == ENOMEM ? -ENOMEM : store_err(rc);
}

static void fill(struct store_agg *out, const char *worker, const char *version,
                 const struct agg_hdr *h, size_t klen, size_t vlen)
{
    out->worker = worker;
    out->version = version;
    out->first_ns = h->first_ns;
    out->last_ns = h->last_ns;
    out->windows = h->windows;
    out->samples = h->samples;
    out->busy = h->busy;
    out->raw_size = h->raw_size;
    out->stored_size = (uint64_t)klen + vlen;
}

int store_agg_get(struct store *s, const char *worker, const char *version, struct store_agg *out,
                  void **bytes, size_t *len)
{
    if (s == NULL || !labels_ok(worker, version) || (bytes != NULL && len == NULL))
        return -EINVAL;
    if (!s->aggs_on)
        return ISOPROF_ENOTFOUND;
    MDB_txn *txn;
    int rc = store_txn_read(s, &txn);
    if (rc != 0)
        return rc;
    uint8_t key[AGG_KEY_MAX];
    MDB_val k = {agg_key_encode(key, worker, version), key}, d;
    struct store_bounds b;
    store_bounds_get(s, &b);
    rc = mdb_get(txn, s->aggs, &k, &d);
    struct agg_hdr h;
    const char *why;
    if (rc == 0 && !store_inside(&b, &d))
        rc = ISOPROF_ECORRUPT;
    else if (rc == 0 && agg_decode(d.mv_data, d.mv_size, &h, &why) != 0)
        rc = ISOPROF_ECORRUPT;
    if (rc == 0 && bytes != NULL) {
        void *raw = NULL;
        if ((rc = agg_inflate(&h, &raw)) == 0) {
            *bytes = raw;
            *len = (size_t)h.raw_size;
        }
    }
    if (rc == 0 && out != NULL)
        fill(out, worker, version, &h, k.mv_size, d.mv_size);
    mdb_txn_abort(txn);
    return store_err(rc);
}

int store_aggs(struct store *s, const char *worker, store_agg_cb cb, void *arg)
{
    if (s == NULL || cb == NULL ||
        (worker != NULL && strnlen(worker, STORE_WORKER_MAX + 1) > STORE_WORKER_MAX))
        return -EINVAL;
    if (!s->aggs_on)
        return 0;
    MDB_txn *txn;
    int rc = store_txn_read(s, &txn);
    if (rc != 0)
        return rc;
    MDB_cursor *c;
    if ((rc = mdb_cursor_open(txn, s->aggs, &c)) != 0) {
        mdb_txn_abort(txn);
        return store_err(rc);
    }
    struct store_walk w = {0};
    store_bounds_get(s, &w.b);
    size_t wlen = worker ? strlen(worker) + 1 : 0;
    MDB_val k = {wlen, (void *)worker}, d;
    for (rc = mdb_cursor_get(c, &k, &d, wlen ? MDB_SET_RANGE : MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        if ((rc = store_walk_step(&w, &k)) != 0)
            break;
        if (wlen && (k.mv_size < wlen || memcmp(k.mv_data, worker, wlen) != 0))
            break;
        if (!store_inside(&w.b, &d)) {
            rc = ISOPROF_ECORRUPT;
            break;
        }
        const char *wk, *vk, *why;
        struct agg_hdr h;
        if (agg_key_decode(k.mv_data, k.mv_size, &wk, &vk) != 0 ||
            agg_decode(d.mv_data, d.mv_size, &h, &why) != 0)
            continue;
        struct store_agg a;
        fill(&a, wk, vk, &h, k.mv_size, d.mv_size);
        if ((rc = cb(&a, arg)) != 0)
            break;
    }
    mdb_cursor_close(c);
    return store_walk_end(txn, rc);
}

int store_agg_charge_txn(struct store *s, MDB_txn *txn, uint64_t *n, uint64_t *bytes)
{
    *n = *bytes = 0;
    if (!s->aggs_on)
        return 0;
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->aggs, &c);
    if (rc != 0)
        return rc;
    MDB_val k, d;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        (*n)++;
        *bytes += (uint64_t)k.mv_size + d.mv_size;
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int store_check_aggs(struct store *s, MDB_txn *txn, void (*report)(void *r, const char *line),
                     void *r, uint64_t *stored)
{
    *stored = 0;
    if (!s->aggs_on)
        return 0;
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->aggs, &c);
    if (rc != 0)
        return rc;
    MDB_val k, d;
    char line[512];
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        *stored += (uint64_t)k.mv_size + d.mv_size;
        const char *wk, *vk, *why = NULL;
        struct agg_hdr h;
        if (agg_key_decode(k.mv_data, k.mv_size, &wk, &vk) != 0) {
            snprintf(line, sizeof(line), "aggs: an entry of %zu bytes with an undecodable key",
                     d.mv_size);
            report(r, line);
            continue;
        }
        char shown[160];
        snprintf(shown, sizeof(shown), "%.64s/%.64s", wk, vk);
        for (char *p = shown; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                *p = '?';
        if (agg_decode(d.mv_data, d.mv_size, &h, &why) != 0) {
            snprintf(line, sizeof(line), "aggs: %s: %s", shown, why);
            report(r, line);
            continue;
        }
        void *raw = NULL;
        int zrc = agg_inflate(&h, &raw);
        isoprof_free(raw);
        if (zrc == -ENOMEM) {
            rc = ENOMEM;
            break;
        }
        if (zrc != 0) {
            snprintf(line, sizeof(line),
                     "aggs: %s: zstd frame does not inflate to raw size %" PRIu64, shown,
                     h.raw_size);
            report(r, line);
        }
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

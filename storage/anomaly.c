/*
 * anomaly.c - the anomalies index and the pins that keep their windows.
 *
 * An anomaly is one episode (memory near the limit, a suspected OOM death,
 * a P999 spike) of one isolate or one worker/version. Its record names the
 * windows taken as evidence; each such window has a `pins` entry naming
 * the anomalies that hold it, so that retention can find the pinned
 * windows (they are evicted last, see put.c) and a window's eviction can
 * take itself out of its anomalies' lists. An anomaly whose last window is
 * evicted, once the episode is over, goes with it; one that never got a
 * window (its capture failed) stays, as the record that it happened, until
 * the count bound below removes it. Both directions are written in the same
 * transaction, and store_check verifies they agree.
 *
 * Layout (big-endian):
 *   anomalies    kind:u8 start_ns:u64 worker \0 version \0 isolate:u32
 *                -> 0 magic 0xA6  1 version 2  2 flags:u16  4 nwin:u32
 *                   8 id:u64  16 end_ns:u64  24 value:u64  32 threshold:u64
 *                   40 limit:u64  48 limit_source:u8 (0 to
 *                   STORE_LIMIT_SOURCE_MAX)
 *                   49 thread_len:u8 (1 to STORE_THREAD_MAX)
 *                   50 thread (printable ASCII)
 *                   then nwin x window seq:u64 (oldest first)
 *                   then (version 4) detail_len:u32 and detail_len bytes
 *                   of findings (0 but for version_regression, below)
 *                   then nwin x window seq:u64 (oldest first)
 *                Version 1 (schemas 2 to 4) has neither the limit nor the
 *                thread, the windows at 40, and reads as thread "main";
 *                version 2 (schemas 5 to 10) has no limit, thread_len at
 *                40. Both read as limit 0, source STORE_LIMIT_NONE.
 *                Version 3 (schema 11) has no detail_len: the windows
 *                follow the thread. An anomaly is written in version 4
 *                whenever it is written (created, updated, a window
 *                pinned or dropped), so an old one becomes version 4 when
 *                it next changes (an update sets its limit); none is
 *                rewritten by the upgrade itself. The thread is not in the
 *                key: the isolate already tells a process's threads apart.
 *                A version_regression's findings (struct store_regression):
 *                baseline_len:u8 (>= 1) baseline, busy_before:u64
 *                busy_after:u64 cpu_before:f64 cpu_after:f64 nfns:u8 (<=
 *                STORE_REGRESSION_FNS_MAX), then per function name_len:u8
 *                name file_len:u8 file before:u64 after:u64
 *                share_before:f64 share_after:f64 z:f64 p_adj:f64 (f64: the
 *                IEEE 754 bits as u64); nothing after the last.
 *   anomaly_ids  id:u64 -> anomalies key
 *   pins         start_ns:u64 + window key (the by_time key)
 *                -> n x (kind:u8 anomaly id:u64)
 *   meta         "next_anomaly" u64 (absent: 1)
 *
 * Bounds: an anomaly keeps its STORE_ANOMALY_WINDOWS_MAX newest windows
 * (an older one is unpinned when a new one comes); a window carries at
 * most STORE_PINS_MAX pins; the index holds at most STORE_ANOMALIES_MAX
 * anomalies (the oldest go first). Every write here is a raw LMDB code
 * inside the caller's transaction, except store_anomaly_put.
 */
#include "internal.h"

#include "base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define ANOM_MAGIC 0xA6u
#define ANOM_VERSION 4u
#define ANOM_FIXED 40u    /* up to the limit (v3, v4), the thread (v2), the windows (v1) */
#define ANOM_FIXED_V3 49u /* up to the thread in v3 and v4 */
/* A regression's findings at their longest. */
#define REG_FIXED (1u + 8u * 4u + 1u)
#define REG_FN_FIXED (2u + 8u * 6u)
#define REG_MAX                                                                                    \
    (REG_FIXED + STORE_VERSION_MAX +                                                               \
     STORE_REGRESSION_FNS_MAX * (REG_FN_FIXED + 2u * STORE_REGRESSION_NAME_MAX))
/* v4, the longest thread and findings */
#define ANOM_HDR_MAX (ANOM_FIXED_V3 + 1u + STORE_THREAD_MAX + 4u + REG_MAX)
#define ANOM_VAL_MAX (ANOM_HDR_MAX + 8u * STORE_ANOMALY_WINDOWS_MAX)
#define PIN_LEN 9u
#define ANOM_KEY_MAX (1u + 8u + STORE_LABELS_MAX + 2u + 4u)
/* How far back store_anomaly_put looks for an isolate's latest window. */
#define LATEST_SCAN_MAX 100000

struct anom_rec {
    uint16_t flags;
    uint32_t nwin;
    uint64_t id, end_ns, value, threshold;
    uint64_t limit;       /* 0 before version 3 */
    uint8_t limit_source; /* STORE_LIMIT_NONE before version 3 */
    const char *thread;   /* thread_len bytes, no NUL; "main" for version 1 */
    size_t thread_len;
    const uint8_t *detail; /* detail_len bytes of findings (0 before version 4) */
    size_t detail_len;
    const uint8_t *wins;
};

/* --- a regression's findings --- */

static uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

static double bits_f64(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof(d));
    return d;
}

/* Can g be stored: bounds as store.h says. */
static int regression_ok(const struct store_regression *g)
{
    if (g->baseline == NULL || g->nfns > STORE_REGRESSION_FNS_MAX ||
        (g->nfns > 0 && g->fns == NULL))
        return 0;
    size_t bl = strnlen(g->baseline, STORE_VERSION_MAX + 1);
    if (bl == 0 || bl > STORE_VERSION_MAX)
        return 0;
    for (size_t i = 0; i < g->nfns; i++) {
        const struct store_regression_fn *f = &g->fns[i];
        if ((f->name &&
             strnlen(f->name, STORE_REGRESSION_NAME_MAX + 1) > STORE_REGRESSION_NAME_MAX) ||
            (f->file &&
             strnlen(f->file, STORE_REGRESSION_NAME_MAX + 1) > STORE_REGRESSION_NAME_MAX))
            return 0;
    }
    return 1;
}

/* g's bytes at p (REG_MAX at most); returns their length. */
static size_t regression_encode(uint8_t *p, const struct store_regression *g)
{
    size_t o = 0, bl = strlen(g->baseline);
    p[o++] = (uint8_t)bl;
    memcpy(p + o, g->baseline, bl);
    o += bl;
    store_be64_put(p + o, g->busy_before);
    store_be64_put(p + o + 8, g->busy_after);
    store_be64_put(p + o + 16, f64_bits(g->cpu_before));
    store_be64_put(p + o + 24, f64_bits(g->cpu_after));
    o += 32;
    p[o++] = (uint8_t)g->nfns;
    for (size_t i = 0; i < g->nfns; i++) {
        const struct store_regression_fn *f = &g->fns[i];
        const char *strs[2] = {f->name ? f->name : "", f->file ? f->file : ""};
        for (int k = 0; k < 2; k++) {
            size_t l = strlen(strs[k]);
            p[o++] = (uint8_t)l;
            memcpy(p + o, strs[k], l);
            o += l;
        }
        const double d[4] = {f->share_before, f->share_after, f->z, f->p_adj};
        store_be64_put(p + o, f->before);
        store_be64_put(p + o + 8, f->after);
        for (int k = 0; k < 4; k++)
            store_be64_put(p + o + 16 + 8u * (unsigned)k, f64_bits(d[k]));
        o += 48;
    }
    return o;
}

/* Room for decoded findings: the functions and their strings with NULs. */
struct regression_buf {
    struct store_regression g;
    struct store_regression_fn fns[STORE_REGRESSION_FNS_MAX];
    char text[STORE_VERSION_MAX + 1 +
              STORE_REGRESSION_FNS_MAX * 2 * (STORE_REGRESSION_NAME_MAX + 1)];
};

/* Decode findings p[0..len) into b (strings copied there, NUL-terminated),
 * or only check them (b NULL). 0 or ISOPROF_ECORRUPT. */
static int regression_decode(const uint8_t *p, size_t len, struct regression_buf *b)
{
    size_t o = 0, t = 0;
    if (len < 1 || p[0] == 0 || len < 1u + p[0] + 33u)
        return ISOPROF_ECORRUPT;
    size_t bl = p[o++];
    if (memchr(p + o, 0, bl) != NULL)
        return ISOPROF_ECORRUPT;
    if (b) {
        memcpy(b->text, p + o, bl);
        b->text[bl] = '\0';
        b->g.baseline = b->text;
        t = bl + 1;
    }
    o += bl;
    if (b) {
        b->g.busy_before = store_be64_get(p + o);
        b->g.busy_after = store_be64_get(p + o + 8);
        b->g.cpu_before = bits_f64(store_be64_get(p + o + 16));
        b->g.cpu_after = bits_f64(store_be64_get(p + o + 24));
    }
    o += 32;
    size_t n = p[o++];
    if (n > STORE_REGRESSION_FNS_MAX)
        return ISOPROF_ECORRUPT;
    for (size_t i = 0; i < n; i++) {
        const char *strs[2];
        for (int k = 0; k < 2; k++) {
            if (o >= len || len - o - 1 < p[o])
                return ISOPROF_ECORRUPT;
            size_t l = p[o++];
            if (memchr(p + o, 0, l) != NULL)
                return ISOPROF_ECORRUPT;
            if (b) {
                memcpy(b->text + t, p + o, l);
                b->text[t + l] = '\0';
                strs[k] = b->text + t;
                t += l + 1;
            }
            o += l;
        }
        if (len - o < 48)
            return ISOPROF_ECORRUPT;
        if (b) {
            struct store_regression_fn *f = &b->fns[i];
            f->name = strs[0];
            f->file = strs[1];
            f->before = store_be64_get(p + o);
            f->after = store_be64_get(p + o + 8);
            f->share_before = bits_f64(store_be64_get(p + o + 16));
            f->share_after = bits_f64(store_be64_get(p + o + 24));
            f->z = bits_f64(store_be64_get(p + o + 32));
            f->p_adj = bits_f64(store_be64_get(p + o + 40));
        }
        o += 48;
    }
    if (o != len)
        return ISOPROF_ECORRUPT;
    if (b) {
        b->g.fns = b->fns;
        b->g.nfns = n;
    }
    return 0;
}

/* Decode an anomalies value; *why says what is wrong on ISOPROF_ECORRUPT.
 * r's pointers are borrowed from v. */
static int anom_decode_why(const MDB_val *v, struct anom_rec *r, const char **why)
{
    const uint8_t *p = v->mv_data;
    *why = "bad magic or version";
    if (v->mv_size < ANOM_FIXED || p[0] != ANOM_MAGIC || p[1] < 1 || p[1] > ANOM_VERSION)
        return ISOPROF_ECORRUPT;
    size_t hl = ANOM_FIXED, at = ANOM_FIXED; /* at: thread_len in v2 to v4 */
    r->thread = STORE_THREAD_MAIN;
    r->thread_len = sizeof(STORE_THREAD_MAIN) - 1;
    r->detail = NULL;
    r->detail_len = 0;
    r->limit = 0;
    r->limit_source = STORE_LIMIT_NONE;
    if (p[1] >= 3) {
        *why = "limit source out of range";
        if (v->mv_size < ANOM_FIXED_V3 || p[48] > STORE_LIMIT_SOURCE_MAX)
            return ISOPROF_ECORRUPT;
        r->limit = store_be64_get(p + 40);
        r->limit_source = p[48];
        at = ANOM_FIXED_V3;
    }
    if (p[1] >= 2) {
        *why = "thread label empty, not printable ASCII or longer than the value";
        if (v->mv_size < at + 1u)
            return ISOPROF_ECORRUPT;
        size_t tl = p[at];
        hl = at + 1u + tl;
        if (v->mv_size < hl || !store_thread_ok((const char *)p + at + 1, tl))
            return ISOPROF_ECORRUPT;
        r->thread = (const char *)p + at + 1;
        r->thread_len = tl;
    }
    if (p[1] >= 4) {
        *why = "findings longer than the value, or that do not decode";
        if (v->mv_size < hl + 4u)
            return ISOPROF_ECORRUPT;
        size_t dl = store_be32_get(p + hl);
        if (dl > REG_MAX || v->mv_size - hl - 4u < dl ||
            (dl > 0 && regression_decode(p + hl + 4, dl, NULL) != 0))
            return ISOPROF_ECORRUPT;
        r->detail = dl ? p + hl + 4 : NULL;
        r->detail_len = dl;
        hl += 4u + dl;
    }
    r->flags = (uint16_t)(p[2] << 8 | p[3]);
    r->nwin = store_be32_get(p + 4);
    *why = "window list of the wrong size";
    if (r->nwin > STORE_ANOMALY_WINDOWS_MAX || v->mv_size != hl + 8ull * r->nwin)
        return ISOPROF_ECORRUPT;
    r->id = store_be64_get(p + 8);
    r->end_ns = store_be64_get(p + 16);
    r->value = store_be64_get(p + 24);
    r->threshold = store_be64_get(p + 32);
    r->wins = p + hl;
    *why = "id 0";
    return r->id == 0 ? ISOPROF_ECORRUPT : 0;
}

static int anom_decode(const MDB_val *v, struct anom_rec *r)
{
    const char *why;
    return anom_decode_why(v, r, &why);
}

/* The header length of r in the current version: where its windows go. */
static size_t anom_hdr_len(const struct anom_rec *r)
{
    return ANOM_FIXED_V3 + 1u + r->thread_len + 4u + r->detail_len;
}

/* Write r's header (current version, with its thread and findings) at p;
 * returns its length. r->thread and r->detail may point into the value
 * being replaced, not into p. */
static size_t anom_encode(uint8_t *p, const struct anom_rec *r)
{
    /* What anom_decode and anomaly_check let through, and the list's bound
     * that store_pin_txn keeps. */
    ISOPROF_ASSERT(store_thread_ok(r->thread, r->thread_len));
    ISOPROF_ASSERT(r->nwin <= STORE_ANOMALY_WINDOWS_MAX && r->id != 0);
    ISOPROF_ASSERT(r->limit_source <= STORE_LIMIT_SOURCE_MAX);
    ISOPROF_ASSERT(r->detail_len <= REG_MAX);
    p[0] = ANOM_MAGIC;
    p[1] = ANOM_VERSION;
    p[2] = (uint8_t)(r->flags >> 8);
    p[3] = (uint8_t)r->flags;
    store_be32_put(p + 4, r->nwin);
    store_be64_put(p + 8, r->id);
    store_be64_put(p + 16, r->end_ns);
    store_be64_put(p + 24, r->value);
    store_be64_put(p + 32, r->threshold);
    store_be64_put(p + 40, r->limit);
    p[48] = r->limit_source;
    p[ANOM_FIXED_V3] = (uint8_t)r->thread_len;
    memcpy(p + ANOM_FIXED_V3 + 1, r->thread, r->thread_len);
    size_t d = ANOM_FIXED_V3 + 1u + r->thread_len;
    store_be32_put(p + d, (uint32_t)r->detail_len);
    if (r->detail_len > 0)
        memmove(p + d + 4, r->detail, r->detail_len);
    return anom_hdr_len(r);
}

int store_anomaly_key_decode(const void *key, size_t len, struct store_anomaly_key *k)
{
    const uint8_t *p = key;
    if (key == NULL || len < 1 + 8 + 2 + 4)
        return ISOPROF_ECORRUPT;
    k->kind = p[0];
    if (k->kind == STORE_ANOMALY_NONE || k->kind > STORE_ANOMALY_MAX)
        return ISOPROF_ECORRUPT;
    k->start_ns = store_be64_get(p + 1);
    const uint8_t *w = p + 9, *end = p + len - 4;
    const uint8_t *nul1 = memchr(w, 0, (size_t)(end - w));
    if (nul1 == NULL)
        return ISOPROF_ECORRUPT;
    const uint8_t *v = nul1 + 1;
    const uint8_t *nul2 = v < end ? memchr(v, 0, (size_t)(end - v)) : NULL;
    if (nul2 == NULL || nul2 + 1 != end)
        return ISOPROF_ECORRUPT;
    k->worker = (const char *)w;
    k->version = (const char *)v;
    k->isolate = store_be32_get(end);
    return 0;
}

static size_t anom_key_encode(uint8_t *out, unsigned kind, uint64_t start_ns, const char *worker,
                              const char *version, uint32_t isolate)
{
    size_t wl = strlen(worker), vl = strlen(version);
    size_t len = 1 + 8 + wl + 1 + vl + 1 + 4;
    if (len > ANOM_KEY_MAX)
        return 0;
    out[0] = (uint8_t)kind;
    store_be64_put(out + 1, start_ns);
    memcpy(out + 9, worker, wl + 1);
    memcpy(out + 9 + wl + 1, version, vl + 1);
    store_be32_put(out + len - 4, isolate);
    return len;
}

/* The anomalies key of anomaly id, copied into key (ANOM_KEY_MAX bytes). */
static int anom_key_of(struct store *s, MDB_txn *txn, uint64_t id, uint8_t *key, size_t *klen)
{
    uint8_t ik[8];
    store_be64_put(ik, id);
    MDB_val i = {8, ik}, k;
    int rc = mdb_get(txn, s->anomaly_ids, &i, &k);
    if (rc != 0)
        return rc;
    struct store_bounds b;
    store_bounds_get(s, &b);
    if (k.mv_size > ANOM_KEY_MAX || !store_inside(&b, &k))
        return MDB_CORRUPTED;
    memcpy(key, k.mv_data, k.mv_size);
    *klen = k.mv_size;
    return 0;
}

/* The time key (by_time / pins) of window seq, copied into tk. */
static int time_key_of(struct store *s, MDB_txn *txn, uint64_t seq, uint8_t *tk, size_t *tklen)
{
    uint8_t ik[8];
    store_be64_put(ik, seq);
    MDB_val i = {8, ik}, k;
    int rc = mdb_get(txn, s->ids, &i, &k);
    if (rc != 0)
        return rc;
    struct store_key key;
    if (store_key_decode(k.mv_data, k.mv_size, &key) != 0)
        return MDB_NOTFOUND; /* damaged; store_check reports it */
    store_be64_put(tk, key.start_ns);
    memcpy(tk + 8, k.mv_data, k.mv_size);
    *tklen = 8 + k.mv_size;
    return 0;
}

/* Remove (kind, id) from the pins entry at tk; the entry goes when empty. */
static int pins_remove(struct store *s, MDB_txn *txn, const uint8_t *tk, size_t tklen, uint64_t id)
{
    MDB_val k = {tklen, (void *)tk}, v;
    int rc = mdb_get(txn, s->pins, &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc != 0)
        return rc;
    uint8_t buf[STORE_PINS_MAX * PIN_LEN];
    size_t n = 0;
    const uint8_t *p = v.mv_data;
    for (size_t o = 0; o + PIN_LEN <= v.mv_size && n + PIN_LEN <= sizeof(buf); o += PIN_LEN)
        if (store_be64_get(p + o + 1) != id) {
            memcpy(buf + n, p + o, PIN_LEN);
            n += PIN_LEN;
        }
    if (n == 0)
        return mdb_del(txn, s->pins, &k, NULL);
    MDB_val nv = {n, buf};
    return mdb_put(txn, s->pins, &k, &nv, 0);
}

/* Delete anomaly id with its key entry, unpinning its windows. */
static int anom_delete(struct store *s, MDB_txn *txn, uint64_t id)
{
    uint8_t key[ANOM_KEY_MAX];
    size_t klen;
    int rc = anom_key_of(s, txn, id, key, &klen);
    if (rc != 0)
        return rc == MDB_NOTFOUND ? 0 : rc;
    MDB_val k = {klen, key}, v;
    rc = mdb_get(txn, s->anomalies, &k, &v);
    struct anom_rec r;
    if (rc == 0 && anom_decode(&v, &r) == 0) {
        uint64_t wins[STORE_ANOMALY_WINDOWS_MAX];
        uint32_t n = r.nwin;
        for (uint32_t i = 0; i < n; i++)
            wins[i] = store_be64_get(r.wins + 8u * i);
        for (uint32_t i = 0; i < n; i++) {
            uint8_t tk[STORE_TIME_KEY_MAX];
            size_t tklen;
            rc = time_key_of(s, txn, wins[i], tk, &tklen);
            if (rc == 0)
                rc = pins_remove(s, txn, tk, tklen, id);
            if (rc != 0 && rc != MDB_NOTFOUND)
                return rc;
        }
    } else if (rc != 0 && rc != MDB_NOTFOUND) {
        return rc;
    }
    rc = mdb_del(txn, s->anomalies, &k, NULL);
    if (rc != 0 && rc != MDB_NOTFOUND)
        return rc;
    return store_del_u64(txn, s->anomaly_ids, id);
}

/* Take window seq out of anomaly id's list; a closed anomaly left with no
 * window is deleted. */
static int anom_forget_window(struct store *s, MDB_txn *txn, uint64_t id, uint64_t seq)
{
    uint8_t key[ANOM_KEY_MAX];
    size_t klen;
    int rc = anom_key_of(s, txn, id, key, &klen);
    if (rc != 0)
        return rc == MDB_NOTFOUND ? 0 : rc;
    MDB_val k = {klen, key}, v;
    if ((rc = mdb_get(txn, s->anomalies, &k, &v)) != 0)
        return rc == MDB_NOTFOUND ? 0 : rc;
    struct anom_rec r;
    if (anom_decode(&v, &r) != 0)
        return 0;
    uint8_t buf[ANOM_VAL_MAX];
    size_t hl = anom_hdr_len(&r);
    uint32_t n = 0;
    for (uint32_t i = 0; i < r.nwin; i++) {
        uint64_t w = store_be64_get(r.wins + 8u * i);
        if (w != seq)
            store_be64_put(buf + hl + 8u * n++, w);
    }
    if (n == r.nwin)
        return 0;
    if (n == 0 && !(r.flags & STORE_ANOMALY_OPEN))
        return anom_delete(s, txn, id);
    r.nwin = n;
    anom_encode(buf, &r);
    MDB_val nv = {hl + 8u * n, buf};
    return mdb_put(txn, s->anomalies, &k, &nv, 0);
}

int store_unpin_txn(struct store *s, MDB_txn *txn, const uint8_t *tk, size_t tklen, uint64_t seq)
{
    MDB_val k = {tklen, (void *)tk}, v;
    int rc = mdb_get(txn, s->pins, &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc != 0)
        return rc;
    uint64_t ids[STORE_PINS_MAX];
    size_t n = 0;
    for (size_t o = 0; o + PIN_LEN <= v.mv_size && n < STORE_PINS_MAX; o += PIN_LEN)
        ids[n++] = store_be64_get((const uint8_t *)v.mv_data + o + 1);
    if ((rc = mdb_del(txn, s->pins, &k, NULL)) != 0)
        return rc;
    for (size_t i = 0; i < n && seq != 0; i++)
        if ((rc = anom_forget_window(s, txn, ids[i], seq)) != 0)
            return rc;
    return 0;
}

int store_pin_txn(struct store *s, MDB_txn *txn, uint64_t id, uint64_t seq, const uint8_t *tk,
                  size_t tklen)
{
    uint8_t key[ANOM_KEY_MAX];
    size_t klen;
    int rc = anom_key_of(s, txn, id, key, &klen);
    if (rc != 0)
        return rc == MDB_NOTFOUND ? 0 : rc; /* the anomaly is gone: nothing to pin to */
    MDB_val k = {klen, key}, v;
    if ((rc = mdb_get(txn, s->anomalies, &k, &v)) != 0)
        return rc == MDB_NOTFOUND ? 0 : rc;
    struct anom_rec r;
    if (anom_decode(&v, &r) != 0)
        return 0;
    for (uint32_t i = 0; i < r.nwin; i++)
        if (store_be64_get(r.wins + 8u * i) == seq)
            return 0; /* pinned already */

    /* The window's pins entry first: if it is full, the window stays as it is. */
    MDB_val pk = {tklen, (void *)tk}, pv;
    uint8_t pins[STORE_PINS_MAX * PIN_LEN];
    size_t plen = 0;
    rc = mdb_get(txn, s->pins, &pk, &pv);
    if (rc == 0) {
        if (pv.mv_size + PIN_LEN > sizeof(pins))
            return 0;
        memcpy(pins, pv.mv_data, pv.mv_size);
        plen = pv.mv_size;
    } else if (rc != MDB_NOTFOUND) {
        return rc;
    }
    pins[plen] = key[0];
    store_be64_put(pins + plen + 1, id);
    MDB_val npv = {plen + PIN_LEN, pins};
    if ((rc = mdb_put(txn, s->pins, &pk, &npv, 0)) != 0)
        return rc;

    /* Then the anomaly's list, dropping its oldest window when full. A
     * value LMDB returned is valid only until the next update (the put
     * above), so r is read again before its thread and windows are. */
    if ((rc = mdb_get(txn, s->anomalies, &k, &v)) != 0)
        return rc;
    if (anom_decode(&v, &r) != 0)
        return MDB_CORRUPTED;
    uint8_t buf[ANOM_VAL_MAX];
    size_t hl = anom_hdr_len(&r);
    uint32_t first = 0;
    uint64_t dropped = 0;
    if (r.nwin == STORE_ANOMALY_WINDOWS_MAX) {
        dropped = store_be64_get(r.wins);
        first = 1;
    }
    uint32_t n = 0;
    for (uint32_t i = first; i < r.nwin; i++)
        store_be64_put(buf + hl + 8u * n++, store_be64_get(r.wins + 8u * i));
    store_be64_put(buf + hl + 8u * n++, seq);
    ISOPROF_ASSERT(n <= STORE_ANOMALY_WINDOWS_MAX);
    r.nwin = n;
    anom_encode(buf, &r);
    MDB_val nv = {hl + 8u * n, buf};
    if ((rc = mdb_put(txn, s->anomalies, &k, &nv, 0)) != 0)
        return rc;
    if (dropped != 0) {
        uint8_t dk[STORE_TIME_KEY_MAX];
        size_t dklen;
        rc = time_key_of(s, txn, dropped, dk, &dklen);
        if (rc == 0)
            rc = pins_remove(s, txn, dk, dklen, id);
        if (rc != 0 && rc != MDB_NOTFOUND)
            return rc;
    }
    /* Evidence goes first: a pinned window still waiting for upload moves
     * to the front of the outbox. */
    return store_outbox_promote_txn(s, txn, seq);
}

int store_pins_get(struct store *s, MDB_txn *txn, const uint8_t *tk, size_t tklen, uint32_t *kinds)
{
    MDB_val k = {tklen, (void *)tk}, v;
    *kinds = 0;
    int rc = mdb_get(txn, s->pins, &k, &v);
    if (rc != 0)
        return rc;
    for (size_t o = 0; o + PIN_LEN <= v.mv_size; o += PIN_LEN) {
        unsigned kind = ((const uint8_t *)v.mv_data)[o];
        if (kind <= STORE_ANOMALY_MAX)
            *kinds |= 1u << kind;
    }
    return 0;
}

int store_anomaly_sweep_txn(struct store *s, MDB_txn *txn)
{
    MDB_stat st;
    int rc = mdb_stat(txn, s->anomaly_ids, &st);
    if (rc != 0)
        return rc;
    size_t excess = st.ms_entries > STORE_ANOMALIES_MAX ? st.ms_entries - STORE_ANOMALIES_MAX : 0;
    while (excess-- > 0) {
        MDB_cursor *c;
        MDB_val k, d;
        if ((rc = mdb_cursor_open(txn, s->anomaly_ids, &c)) != 0)
            return rc;
        rc = mdb_cursor_get(c, &k, &d, MDB_FIRST);
        uint64_t id = rc == 0 && k.mv_size == 8 ? store_be64_get(k.mv_data) : 0;
        mdb_cursor_close(c);
        if (rc != 0)
            return rc == MDB_NOTFOUND ? 0 : rc;
        if (id == 0)
            return MDB_CORRUPTED;
        if ((rc = anom_delete(s, txn, id)) != 0)
            return rc;
    }
    return 0;
}

/* Pin the newest window of each type in types (bit 1 << type) of the
 * anomaly's worker/version/isolate that started at or before until_ns. */
static int pin_latest(struct store *s, MDB_txn *txn, uint64_t id,
                      const struct store_anomaly_key *ak, unsigned types, uint64_t until_ns)
{
    uint8_t seek[STORE_KEY_MAX];
    size_t klen = store_key_encode(seek, sizeof(seek), ak->worker, ak->version,
                                   until_ns ? until_ns : UINT64_MAX, UINT32_MAX, 0xff);
    if (klen == 0)
        return 0;
    size_t plen = strlen(ak->worker) + 1 + strlen(ak->version) + 1;
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->windows, &c);
    if (rc != 0)
        return rc;
    MDB_val k = {klen, seek}, d;
    rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    rc = rc == 0 ? mdb_cursor_get(c, &k, &d, MDB_PREV) : mdb_cursor_get(c, &k, &d, MDB_LAST);
    uint64_t found[STORE_TYPE_MAX + 1] = {0};
    uint8_t tks[STORE_TYPE_MAX + 1][STORE_TIME_KEY_MAX];
    size_t tklens[STORE_TYPE_MAX + 1] = {0};
    unsigned want = types & (((1u << (STORE_TYPE_MAX + 1)) - 1) & ~1u);
    for (int scanned = 0; rc == 0 && want != 0 && scanned < LATEST_SCAN_MAX; scanned++) {
        if (k.mv_size < plen || memcmp(k.mv_data, seek, plen) != 0)
            break;
        struct store_key key;
        struct store_rec_hdr h;
        if (store_key_decode(k.mv_data, k.mv_size, &key) == 0 && key.isolate == ak->isolate &&
            (want & (1u << key.type)) && store_record_decode(d.mv_data, d.mv_size, &h) == 0) {
            found[key.type] = h.seq;
            store_be64_put(tks[key.type], key.start_ns);
            memcpy(tks[key.type] + 8, k.mv_data, k.mv_size);
            tklens[key.type] = 8 + k.mv_size;
            want &= ~(1u << key.type);
        }
        rc = mdb_cursor_get(c, &k, &d, MDB_PREV);
    }
    mdb_cursor_close(c);
    if (rc != 0 && rc != MDB_NOTFOUND)
        return rc;
    for (unsigned t = STORE_TYPE_CPU; t <= STORE_TYPE_MAX; t++)
        if (found[t] && (rc = store_pin_txn(s, txn, id, found[t], tks[t], tklens[t])) != 0)
            return rc;
    return 0;
}

/* store_anomaly_pin_windows inside txn. */
static int pin_windows_txn(struct store *s, MDB_txn *txn, uint64_t id, const char *worker,
                           const char *version, uint8_t type, uint64_t since_ns, uint64_t until_ns,
                           size_t max, size_t *pinned)
{
    uint8_t key[ANOM_KEY_MAX];
    size_t klen;
    int rc = anom_key_of(s, txn, id, key, &klen);
    if (rc != 0)
        return rc;
    uint8_t seek[STORE_KEY_MAX];
    size_t slen = store_key_encode(seek, sizeof(seek), worker, version,
                                   until_ns ? until_ns : UINT64_MAX, 0, 0);
    if (slen == 0)
        return MDB_NOTFOUND;
    size_t plen = strlen(worker) + 1 + strlen(version) + 1;
    if (max > STORE_ANOMALY_WINDOWS_MAX)
        max = STORE_ANOMALY_WINDOWS_MAX;
    uint64_t *seqs = isoprof_calloc(max ? max : 1, sizeof(*seqs));
    uint64_t *starts = isoprof_calloc(max ? max : 1, sizeof(*starts));
    uint8_t *keys = isoprof_malloc((max ? max : 1) * STORE_KEY_MAX);
    size_t *klens = isoprof_calloc(max ? max : 1, sizeof(*klens));
    MDB_cursor *c = NULL;
    size_t n = 0;
    if (seqs == NULL || starts == NULL || keys == NULL || klens == NULL) {
        rc = ENOMEM;
        goto out;
    }
    if ((rc = mdb_cursor_open(txn, s->windows, &c)) != 0)
        goto out;
    /* Backwards from the first key at or after (until, isolate 0, type 0):
     * every window of the pair that started before until. */
    MDB_val k = {slen, seek}, d;
    rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    rc = rc == 0 ? mdb_cursor_get(c, &k, &d, MDB_PREV) : mdb_cursor_get(c, &k, &d, MDB_LAST);
    for (int scanned = 0; rc == 0 && n < max && scanned < LATEST_SCAN_MAX; scanned++) {
        if (k.mv_size < plen || memcmp(k.mv_data, seek, plen) != 0)
            break;
        struct store_key wk;
        struct store_rec_hdr h;
        if (store_key_decode(k.mv_data, k.mv_size, &wk) == 0 && wk.start_ns < since_ns)
            break;
        if (store_key_decode(k.mv_data, k.mv_size, &wk) == 0 && wk.type == type &&
            k.mv_size <= STORE_KEY_MAX && store_record_decode(d.mv_data, d.mv_size, &h) == 0) {
            seqs[n] = h.seq;
            starts[n] = wk.start_ns;
            memcpy(keys + n * STORE_KEY_MAX, k.mv_data, k.mv_size);
            klens[n] = k.mv_size;
            n++;
        }
        rc = mdb_cursor_get(c, &k, &d, MDB_PREV);
    }
    mdb_cursor_close(c);
    if (rc != 0 && rc != MDB_NOTFOUND)
        goto out;
    rc = 0;
    /* Oldest first: the anomaly's list stays in start order. */
    for (size_t i = n; i-- > 0 && rc == 0;) {
        uint8_t tk[STORE_TIME_KEY_MAX];
        store_be64_put(tk, starts[i]);
        memcpy(tk + 8, keys + i * STORE_KEY_MAX, klens[i]);
        rc = store_pin_txn(s, txn, id, seqs[i], tk, 8 + klens[i]);
    }
    if (rc == 0 && pinned)
        *pinned = n;
out:
    isoprof_free(seqs);
    isoprof_free(starts);
    isoprof_free(keys);
    isoprof_free(klens);
    return rc;
}

int store_anomaly_pin_windows(struct store *s, uint64_t id, const char *worker, const char *version,
                              uint8_t type, uint64_t since_ns, uint64_t until_ns, size_t max,
                              size_t *pinned)
{
    if (pinned)
        *pinned = 0;
    if (s == NULL || id == 0 || worker == NULL || version == NULL || type == 0 ||
        type > STORE_TYPE_MAX)
        return -EINVAL;
    if (s->readonly)
        return -EROFS;
    size_t wl = strnlen(worker, STORE_WORKER_MAX + 1), vl = strnlen(version, STORE_VERSION_MAX + 1);
    if (wl > STORE_WORKER_MAX || vl > STORE_VERSION_MAX || wl + vl > STORE_LABELS_MAX)
        return -EINVAL;
    MDB_txn *txn;
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc != 0)
        return store_err(rc);
    size_t n = 0;
    rc = pin_windows_txn(s, txn, id, worker, version, type, since_ns, until_ns, max, &n);
    if (rc != 0) {
        mdb_txn_abort(txn);
        return rc == ENOMEM ? -ENOMEM : store_err(rc);
    }
    if ((rc = mdb_txn_commit(txn)) != 0)
        return store_err(rc);
    if (pinned)
        *pinned = n;
    return 0;
}

static int anomaly_check(const struct store_anomaly *a)
{
    if (a->kind == STORE_ANOMALY_NONE || a->kind > STORE_ANOMALY_MAX)
        return -EINVAL;
    if (a->worker == NULL || a->version == NULL)
        return -EINVAL;
    size_t wl = strnlen(a->worker, STORE_WORKER_MAX + 1);
    size_t vl = strnlen(a->version, STORE_VERSION_MAX + 1);
    if (wl > STORE_WORKER_MAX || vl > STORE_VERSION_MAX || wl + vl > STORE_LABELS_MAX)
        return -EINVAL;
    const char *thread = store_thread_of(a->thread);
    if (!store_thread_ok(thread, strnlen(thread, STORE_THREAD_MAX + 1)))
        return -EINVAL;
    if (a->limit_source > STORE_LIMIT_SOURCE_MAX)
        return -EINVAL;
    if (a->regression != NULL &&
        (a->kind != STORE_ANOMALY_VERSION_REGRESSION || !regression_ok(a->regression)))
        return -EINVAL;
    return 0;
}

static const char *const limit_sources[STORE_LIMIT_SOURCE_MAX + 1] = {
    NULL, "config", "auto:v8-default", "auto:flag", "auto:NODE_OPTIONS", "auto:DENO_V8_FLAGS",
    "auto:workerd", "auto:process"};

const char *store_limit_source_name(unsigned src)
{
    return src <= STORE_LIMIT_SOURCE_MAX ? limit_sources[src] : NULL;
}

static int anomaly_put_txn(struct store *s, MDB_txn *txn, struct store_anomaly *a, unsigned types)
{
    uint8_t key[ANOM_KEY_MAX];
    size_t klen;
    struct anom_rec r;
    int rc;
    uint8_t buf[ANOM_VAL_MAX];
    uint8_t det[REG_MAX];
    size_t dlen = a->regression ? regression_encode(det, a->regression) : 0;
    if (a->id == 0) {
        uint8_t nk[] = "next_anomaly";
        MDB_val mk = {sizeof(nk) - 1, nk}, mv;
        uint64_t id = 1;
        rc = mdb_get(txn, s->meta, &mk, &mv);
        if (rc == 0 && mv.mv_size == 8)
            id = store_be64_get(mv.mv_data);
        else if (rc != 0 && rc != MDB_NOTFOUND)
            return rc;
        if (id == 0)
            return MDB_CORRUPTED;
        /* Two episodes of one isolate and kind cannot start in the same
         * nanosecond, but a clock step could make it look so. */
        uint64_t start = a->start_ns;
        MDB_val k, v;
        for (int tries = 0;; tries++) {
            klen = anom_key_encode(key, a->kind, start, a->worker, a->version, a->isolate);
            k = (MDB_val){klen, key};
            rc = mdb_get(txn, s->anomalies, &k, &v);
            if (rc == MDB_NOTFOUND)
                break;
            if (rc != 0)
                return rc;
            if (tries == 16)
                return MDB_KEYEXIST;
            start++;
        }
        memset(&r, 0, sizeof(r));
        r.id = id;
        r.flags = (uint16_t)(a->flags & (STORE_ANOMALY_OPEN | STORE_ANOMALY_CLEARED));
        r.end_ns = a->end_ns;
        r.value = a->value;
        r.threshold = a->threshold;
        r.limit = a->limit;
        r.limit_source = a->limit_source;
        r.thread = store_thread_of(a->thread);
        r.thread_len = strlen(r.thread); /* anomaly_check bounded it */
        r.detail = dlen ? det : NULL;
        r.detail_len = dlen;
        v = (MDB_val){anom_encode(buf, &r), buf};
        if ((rc = mdb_put(txn, s->anomalies, &k, &v, 0)) != 0)
            return rc;
        uint8_t ik[8];
        store_be64_put(ik, id);
        MDB_val i = {8, ik};
        if ((rc = mdb_put(txn, s->anomaly_ids, &i, &k, 0)) != 0)
            return rc;
        uint8_t nb[8];
        store_be64_put(nb, id + 1);
        mv = (MDB_val){8, nb};
        if ((rc = mdb_put(txn, s->meta, &mk, &mv, 0)) != 0)
            return rc;
        a->id = id;
        a->start_ns = start;
    } else {
        if ((rc = anom_key_of(s, txn, a->id, key, &klen)) != 0)
            return rc;
        MDB_val k = {klen, key}, v;
        if ((rc = mdb_get(txn, s->anomalies, &k, &v)) != 0)
            return rc;
        if (anom_decode(&v, &r) != 0)
            return MDB_CORRUPTED;
        r.flags = (uint16_t)(a->flags & (STORE_ANOMALY_OPEN | STORE_ANOMALY_CLEARED));
        r.end_ns = a->end_ns;
        r.value = a->value;
        r.threshold = a->threshold;
        r.limit = a->limit;
        r.limit_source = a->limit_source;
        if (a->regression != NULL) {
            r.detail = dlen ? det : NULL;
            r.detail_len = dlen;
        }
        /* Re-encoded in the current version (the thread, "main" for an
         * old one, stays, and the findings unless new ones came); r's
         * thread, findings and windows still point into v. */
        size_t hl = anom_encode(buf, &r);
        memcpy(buf + hl, r.wins, 8u * r.nwin);
        v = (MDB_val){hl + 8u * r.nwin, buf};
        if ((rc = mdb_put(txn, s->anomalies, &k, &v, 0)) != 0)
            return rc;
    }
    if (types) {
        struct store_anomaly_key ak;
        if (store_anomaly_key_decode(key, klen, &ak) != 0)
            return MDB_CORRUPTED;
        if ((rc = pin_latest(s, txn, a->id, &ak, types, a->end_ns)) != 0)
            return rc;
    }
    return store_anomaly_sweep_txn(s, txn);
}

int store_anomaly_put(struct store *s, struct store_anomaly *a, unsigned pin_latest_types)
{
    if (s == NULL || a == NULL)
        return -EINVAL;
    if (s->readonly)
        return -EROFS;
    int rc = anomaly_check(a);
    if (rc != 0)
        return rc;
    MDB_txn *txn;
    if ((rc = mdb_txn_begin(s->env, NULL, 0, &txn)) != 0)
        return store_err(rc);
    uint64_t id0 = a->id, start0 = a->start_ns;
    rc = anomaly_put_txn(s, txn, a, pin_latest_types);
    if (rc != 0) {
        mdb_txn_abort(txn);
        a->id = id0;
        a->start_ns = start0;
        return store_err(rc);
    }
    rc = mdb_txn_commit(txn);
    if (rc != 0) {
        a->id = id0;
        a->start_ns = start0;
    }
    return store_err(rc);
}

/* --- queries --- */

/* Decode anomaly k -> v and call back when f matches. 0 to go on (also
 * for a key or value that does not decode: store_check reports it), the
 * callback's value, or ISOPROF_ECORRUPT (v lies outside the file; k, a
 * copy or a key a walk checked, is the caller's to check). */
static int anom_emit(const struct store_bounds *b, const MDB_val *k, const MDB_val *v,
                     const struct store_anomaly_filter *f, store_anomaly_cb cb, void *arg)
{
    struct store_anomaly_key ak;
    struct anom_rec r;
    if (!store_inside(b, v))
        return ISOPROF_ECORRUPT;
    if (store_anomaly_key_decode(k->mv_data, k->mv_size, &ak) != 0 || anom_decode(v, &r) != 0)
        return 0;
    if (f->kind && f->kind != ak.kind)
        return 0;
    if (f->worker && strcmp(f->worker, ak.worker) != 0)
        return 0;
    if (f->version && strcmp(f->version, ak.version) != 0)
        return 0;
    if (f->thread) {
        const char *want = store_thread_of(f->thread);
        if (strlen(want) != r.thread_len || memcmp(want, r.thread, r.thread_len) != 0)
            return 0;
    }
    if (f->id && f->id != r.id)
        return 0;
    /* An episode still open reaches to now and beyond. */
    uint64_t end = (r.flags & STORE_ANOMALY_OPEN) ? UINT64_MAX
                   : r.end_ns > ak.start_ns       ? r.end_ns
                                                  : ak.start_ns;
    if (f->since_ns && end < f->since_ns)
        return 0;
    if (f->until_ns && ak.start_ns >= f->until_ns)
        return 0;
    uint64_t wins[STORE_ANOMALY_WINDOWS_MAX];
    for (uint32_t i = 0; i < r.nwin; i++)
        wins[i] = store_be64_get(r.wins + 8u * i);
    char thread[STORE_THREAD_MAX + 1]; /* stored without a NUL */
    memcpy(thread, r.thread, r.thread_len);
    thread[r.thread_len] = '\0';
    struct regression_buf rb;
    const struct store_regression *reg = NULL;
    if (r.detail_len > 0 && ak.kind == STORE_ANOMALY_VERSION_REGRESSION &&
        regression_decode(r.detail, r.detail_len, &rb) == 0)
        reg = &rb.g;
    struct store_anomaly a = {
        .id = r.id,
        .kind = ak.kind,
        .worker = ak.worker,
        .version = ak.version,
        .thread = thread,
        .isolate = ak.isolate,
        .start_ns = ak.start_ns,
        .end_ns = r.end_ns,
        .value = r.value,
        .threshold = r.threshold,
        .limit = r.limit,
        .limit_source = r.limit_source,
        .flags = r.flags,
        .regression = reg,
        .windows = wins,
        .nwindows = r.nwin,
    };
    return cb(&a, arg);
}

int store_anomalies(struct store *s, const struct store_anomaly_filter *f, store_anomaly_cb cb,
                    void *arg)
{
    static const struct store_anomaly_filter all;
    if (s == NULL || cb == NULL)
        return -EINVAL;
    if (f == NULL)
        f = &all;
    MDB_txn *txn;
    int rc = store_txn_read(s, &txn);
    if (rc != 0)
        return rc;
    MDB_cursor *c = NULL;
    MDB_val k, v;
    struct store_walk w = {0};
    store_bounds_get(s, &w.b);
    if (f->id) {
        uint8_t key[ANOM_KEY_MAX];
        size_t klen;
        rc = anom_key_of(s, txn, f->id, key, &klen);
        if (rc == 0) {
            k = (MDB_val){klen, key};
            rc = mdb_get(txn, s->anomalies, &k, &v);
            if (rc == 0)
                rc = anom_emit(&w.b, &k, &v, f, cb, arg);
        }
    } else if (f->kind) {
        /* One kind: its range of the anomalies DB, in start order. */
        uint8_t seek[9];
        seek[0] = f->kind;
        store_be64_put(seek + 1, 0);
        if ((rc = mdb_cursor_open(txn, s->anomalies, &c)) == 0) {
            k = (MDB_val){sizeof(seek), seek};
            for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == 0;
                 rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
                if ((rc = store_walk_step(&w, &k)) != 0)
                    break;
                if (k.mv_size < 1 || ((const uint8_t *)k.mv_data)[0] != f->kind)
                    break;
                if (f->until_ns && k.mv_size >= 9 &&
                    store_be64_get((const uint8_t *)k.mv_data + 1) >= f->until_ns)
                    break;
                if ((rc = anom_emit(&w.b, &k, &v, f, cb, arg)) != 0)
                    break;
            }
        }
    } else {
        /* Every kind: in id order, which is the order they were flagged. */
        if ((rc = mdb_cursor_open(txn, s->anomaly_ids, &c)) == 0) {
            for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
                 rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
                if ((rc = store_walk_step(&w, &k)) != 0)
                    break;
                MDB_val ak = v, av;
                if (!store_inside(&w.b, &ak)) {
                    rc = ISOPROF_ECORRUPT;
                    break;
                }
                int grc = mdb_get(txn, s->anomalies, &ak, &av);
                if (grc == MDB_NOTFOUND)
                    continue; /* names no anomaly: store_check reports it */
                if (grc != 0) {
                    rc = grc;
                    break;
                }
                if ((rc = anom_emit(&w.b, &ak, &av, f, cb, arg)) != 0)
                    break;
            }
        }
    }
    if (c)
        mdb_cursor_close(c);
    return store_walk_end(txn, rc);
}

struct check_ctx {
    void (*report)(void *r, const char *line);
    void *r;
};

__attribute__((format(printf, 2, 3))) static void problem(struct check_ctx *x, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    x->report(x->r, line);
}

int store_check_anomalies(struct store *s, MDB_txn *txn, void (*report)(void *r, const char *line),
                          void *r)
{
    struct check_ctx x = {report, r};
    MDB_cursor *c;
    MDB_val k, v;
    int rc = mdb_cursor_open(txn, s->anomaly_ids, &c);
    if (rc != 0)
        return rc;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        uint64_t id = k.mv_size == 8 ? store_be64_get(k.mv_data) : 0;
        MDB_val av;
        struct anom_rec ar;
        struct store_anomaly_key ak;
        const char *why = "missing";
        int grc = mdb_get(txn, s->anomalies, &v, &av);
        if (grc == 0 && store_anomaly_key_decode(v.mv_data, v.mv_size, &ak) != 0)
            why = "undecodable key";
        else if (grc == 0 && anom_decode_why(&av, &ar, &why) == 0)
            why = NULL;
        if (grc == MDB_NOTFOUND || (grc == 0 && why != NULL)) {
            problem(&x, "anomaly_ids: anomaly %" PRIu64 " names no decodable anomaly (%s)", id,
                    why);
            continue;
        }
        if (grc != 0) {
            rc = grc;
            break;
        }
        if (ar.id != id)
            problem(&x, "anomaly_ids: anomaly %" PRIu64 " names anomaly %" PRIu64, id, ar.id);
        if (ar.detail_len > 0 && ak.kind != STORE_ANOMALY_VERSION_REGRESSION)
            problem(&x, "anomalies: anomaly %" PRIu64 " of kind %u carries a regression's findings",
                    id, (unsigned)ak.kind);
        for (uint32_t i = 0; i < ar.nwin; i++) {
            uint64_t seq = store_be64_get(ar.wins + 8u * i);
            uint8_t tk[STORE_TIME_KEY_MAX];
            size_t tklen;
            uint32_t kinds;
            int trc = time_key_of(s, txn, seq, tk, &tklen);
            if (trc == 0)
                trc = store_pins_get(s, txn, tk, tklen, &kinds);
            if (trc == MDB_NOTFOUND || (trc == 0 && !(kinds & (1u << ak.kind))))
                problem(&x,
                        "anomalies: anomaly %" PRIu64 " pins window %" PRIu64
                        ", which is not pinned",
                        id, seq);
            else if (trc != 0) {
                rc = trc;
                goto out;
            }
        }
    }
    if (rc != MDB_NOTFOUND)
        goto out;
    mdb_cursor_close(c);
    MDB_stat sa, si;
    if ((rc = mdb_stat(txn, s->anomalies, &sa)) != 0 ||
        (rc = mdb_stat(txn, s->anomaly_ids, &si)) != 0)
        return rc;
    if (sa.ms_entries != si.ms_entries)
        problem(&x, "counts: anomalies %zu, anomaly_ids %zu", sa.ms_entries, si.ms_entries);
    /* Every pin names a window that exists and an anomaly that lists it. */
    if ((rc = mdb_cursor_open(txn, s->pins, &c)) != 0)
        return rc;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        MDB_val wk = {k.mv_size >= 8 ? k.mv_size - 8 : 0, (uint8_t *)k.mv_data + 8}, wv;
        struct store_rec_hdr h;
        uint64_t start = k.mv_size >= 8 ? store_be64_get(k.mv_data) : 0;
        int wrc = wk.mv_size ? mdb_get(txn, s->windows, &wk, &wv) : MDB_NOTFOUND;
        if (wrc == MDB_NOTFOUND || (wrc == 0 && store_record_decode(wv.mv_data, wv.mv_size, &h))) {
            problem(&x, "pins: a pin at start %" PRIu64 " names no window", start);
            continue;
        }
        if (wrc != 0) {
            rc = wrc;
            break;
        }
        if (v.mv_size == 0 || v.mv_size % PIN_LEN != 0) {
            problem(&x, "pins: window %" PRIu64 ": malformed pin list (%zu bytes)", h.seq,
                    v.mv_size);
            continue;
        }
        for (size_t o = 0; o < v.mv_size; o += PIN_LEN) {
            uint64_t id = store_be64_get((const uint8_t *)v.mv_data + o + 1);
            uint8_t key[ANOM_KEY_MAX];
            size_t klen;
            MDB_val ak, av;
            struct anom_rec ar;
            int arc = anom_key_of(s, txn, id, key, &klen);
            int listed = 0;
            if (arc == 0) {
                ak = (MDB_val){klen, key};
                arc = mdb_get(txn, s->anomalies, &ak, &av);
            }
            if (arc == 0 && anom_decode(&av, &ar) == 0)
                for (uint32_t i = 0; i < ar.nwin; i++)
                    listed |= store_be64_get(ar.wins + 8u * i) == h.seq;
            if (arc != 0 && arc != MDB_NOTFOUND) {
                rc = arc;
                goto out;
            }
            if (!listed)
                problem(&x,
                        "pins: window %" PRIu64 " pinned by anomaly %" PRIu64
                        ", which does not list it",
                        h.seq, id);
        }
    }
out:
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

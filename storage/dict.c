/*
 * dict.c - compression dictionaries, one per series (worker, version).
 *
 * The windows of one deploy share their function names, script URLs and
 * most of their string table, which is most of a small pprof. zstd cannot
 * find those repeats inside one window of a few hundred bytes, but it can
 * against the earlier windows of the same deploy. So once a series has
 * STORE_DICT_AFTER windows without a dictionary, the write transaction
 * that stores its next window builds one: the raw pprof of its newest
 * windows, newest content last (zstd reaches recent offsets more cheaply),
 * at most STORE_DICT_MAX bytes, used as raw content (no training, no
 * entropy tables). Windows stored before keep dictionary 0; the later ones
 * of the series name the dictionary in their record header.
 *
 * A dictionary's bytes never change. Its reference count (the records
 * naming it) lives in the small dict_by_series value, so that counting a
 * window in or out rewrites 12 bytes, not a 32 KiB overflow value. When
 * the count reaches 0 both entries go: the dictionary of an evicted deploy
 * leaves with its last window.
 *
 * DESIGN: the writer keeps up to STORE_CDICT_CACHE prepared compression
 * dictionaries (LRU), touched only by store_put, which is not reentrant,
 * so they need no lock. Dictionary ids are never reused once committed, so
 * a cached id always names the same bytes; one built by a transaction that
 * then aborts is dropped from the cache, since its id will be given again.
 * Readers prepare nothing: each inflate loads the bytes by reference from
 * its own read transaction (raw content needs no table building), so
 * concurrent readers share no mutable state.
 */
#include "internal.h"

#include "base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

size_t store_dict_series_len(const struct store_key *k)
{
    return k->worker_len + 1 + k->version_len + 1;
}

uint64_t store_dict_charge(size_t slen, size_t dlen)
{
    /* dicts key + value, dict_by_series key + value */
    return 4 + STORE_DICT_HDR + (uint64_t)slen + dlen + slen + STORE_DICT_SERIES_VAL;
}

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int store_dict_find(struct store *s, MDB_txn *txn, const void *series, size_t slen, uint32_t *id,
                    uint64_t *refs)
{
    if (!s->dicts_on)
        return MDB_NOTFOUND;
    MDB_val k = {slen, (void *)series}, d;
    int rc = mdb_get(txn, s->dict_by_series, &k, &d);
    if (rc != 0)
        return rc;
    if (d.mv_size != STORE_DICT_SERIES_VAL)
        return ISOPROF_ECORRUPT;
    *id = store_be32_get(d.mv_data);
    *refs = store_be64_get((const uint8_t *)d.mv_data + 4);
    return *id == 0 ? ISOPROF_ECORRUPT : 0;
}

/* Decode a dicts value. 0 or ISOPROF_ECORRUPT. */
static int dict_decode(const MDB_val *d, const uint8_t **bytes, size_t *len, const uint8_t **series,
                       size_t *slen, uint64_t *hash)
{
    const uint8_t *p = d->mv_data;
    if (d->mv_size < STORE_DICT_HDR || p[0] != STORE_DICT_MAGIC || p[1] != STORE_DICT_VERSION)
        return ISOPROF_ECORRUPT;
    size_t sl = (size_t)p[2] << 8 | p[3];
    size_t n = store_be32_get(p + 4);
    if (sl < 2 || n == 0 || n > STORE_DICT_MAX || d->mv_size != STORE_DICT_HDR + sl + n)
        return ISOPROF_ECORRUPT;
    *series = p + STORE_DICT_HDR;
    *slen = sl;
    *bytes = p + STORE_DICT_HDR + sl;
    *len = n;
    if (hash)
        *hash = store_be64_get(p + 16);
    return 0;
}

int store_dict_get(struct store *s, MDB_txn *txn, uint32_t id, const void **bytes, size_t *len,
                   const void **series, size_t *slen)
{
    if (!s->dicts_on || id == 0)
        return MDB_NOTFOUND;
    uint8_t key[4];
    store_be32_put(key, id);
    MDB_val k = {4, key}, d;
    int rc = mdb_get(txn, s->dicts, &k, &d);
    if (rc != 0)
        return rc;
    const uint8_t *b, *ser;
    struct store_bounds in;
    store_bounds_get(s, &in);
    if (!store_inside(&in, &d) || dict_decode(&d, &b, len, &ser, slen, NULL) != 0)
        return ISOPROF_ECORRUPT;
    *bytes = b;
    *series = ser;
    return 0;
}

int store_record_load_txn(struct store *s, MDB_txn *txn, const struct store_rec_hdr *h, void **out)
{
    if (h->dict == 0)
        return store_record_inflate(h, out);
    const void *b, *ser;
    size_t n, sl;
    int rc = store_dict_get(s, txn, h->dict, &b, &n, &ser, &sl);
    if (rc == MDB_NOTFOUND)
        return ISOPROF_ECORRUPT;
    if (rc != 0)
        return rc;
    return store_record_inflate_dict(h, b, n, out);
}

static void cdict_drop(struct store_cdict *e)
{
    isoprof_free(e->mem); /* a static CDict lives in it */
    memset(e, 0, sizeof(*e));
}

/* Was id built by the write transaction in progress? */
static int dict_is_new(const struct store *s, uint32_t id)
{
    return s->dict_built_min != 0 && id >= s->dict_built_min;
}

int store_dict_is_new(const struct store *s, uint32_t id)
{
    return dict_is_new(s, id);
}

int store_dict_cdict(struct store *s, MDB_txn *txn, uint32_t id, const ZSTD_CDict **cd)
{
    struct store_cdict *victim = NULL;
    for (size_t i = 0; i < STORE_CDICT_CACHE; i++) {
        struct store_cdict *e = &s->cdicts[i];
        if (e->cd != NULL && e->id == id) {
            e->used = ++s->cdict_tick;
            *cd = e->cd;
            return 0;
        }
        if (victim == NULL || (victim->cd != NULL && (e->cd == NULL || e->used < victim->used)))
            victim = e;
    }
    const void *b, *ser;
    size_t n, sl;
    int rc = store_dict_get(s, txn, id, &b, &n, &ser, &sl);
    if (rc != 0)
        return rc;
    /* In memory of our own: ZSTD_createCDict_advanced (1.5.4) crashes when
     * its allocation fails. */
    ZSTD_compressionParameters cp = ZSTD_getCParams(STORE_ZSTD_LEVEL, 0, n);
    size_t need = ZSTD_estimateCDictSize_advanced(n, cp, ZSTD_dlm_byCopy);
    void *mem = isoprof_malloc(need);
    if (mem == NULL)
        return -ENOMEM;
    const ZSTD_CDict *c =
        ZSTD_initStaticCDict(mem, need, b, n, ZSTD_dlm_byCopy, ZSTD_dct_rawContent, cp);
    if (c == NULL) {
        isoprof_free(mem);
        return ISOPROF_EZSTD;
    }
    cdict_drop(victim);
    victim->mem = mem;
    victim->id = id;
    victim->pending = dict_is_new(s, id);
    victim->used = ++s->cdict_tick;
    victim->cd = c;
    *cd = c;
    return 0;
}

static void cdict_forget(struct store *s, uint32_t id)
{
    for (size_t i = 0; i < STORE_CDICT_CACHE; i++)
        if (s->cdicts[i].cd != NULL && s->cdicts[i].id == id)
            cdict_drop(&s->cdicts[i]);
}

void store_dict_txn_done(struct store *s, int committed)
{
    for (size_t i = 0; i < STORE_CDICT_CACHE; i++) {
        struct store_cdict *e = &s->cdicts[i];
        if (e->cd != NULL && e->pending) {
            if (committed)
                e->pending = 0;
            else
                cdict_drop(e);
        }
    }
    s->dict_built_min = 0;
}

void store_dict_cache_free(struct store *s)
{
    for (size_t i = 0; i < STORE_CDICT_CACHE; i++)
        cdict_drop(&s->cdicts[i]);
}

/* Position c on the newest window of series (slen bytes): the last key
 * with that prefix. 0, MDB_NOTFOUND (none), or a raw LMDB code. */
static int series_last(MDB_cursor *c, const uint8_t *series, size_t slen, MDB_val *k, MDB_val *d)
{
    uint8_t seek[STORE_KEY_MAX];
    if (slen + STORE_KEY_TAIL > sizeof(seek))
        return MDB_NOTFOUND;
    memcpy(seek, series, slen);
    memset(seek + slen, 0xff, STORE_KEY_TAIL); /* above every tail: type is 1 to 4 */
    k->mv_size = slen + STORE_KEY_TAIL;
    k->mv_data = seek;
    int rc = mdb_cursor_get(c, k, d, MDB_SET_RANGE);
    if (rc == MDB_NOTFOUND)
        rc = mdb_cursor_get(c, k, d, MDB_LAST);
    else if (rc == 0)
        rc = mdb_cursor_get(c, k, d, MDB_PREV);
    if (rc != 0)
        return rc;
    if (k->mv_size != slen + STORE_KEY_TAIL || memcmp(k->mv_data, series, slen) != 0)
        return MDB_NOTFOUND;
    return 0;
}

/* Step c to the next older window of series. */
static int series_prev(MDB_cursor *c, const uint8_t *series, size_t slen, MDB_val *k, MDB_val *d)
{
    int rc = mdb_cursor_get(c, k, d, MDB_PREV);
    if (rc != 0)
        return rc;
    if (k->mv_size != slen + STORE_KEY_TAIL || memcmp(k->mv_data, series, slen) != 0)
        return MDB_NOTFOUND;
    return 0;
}

/* Enough windows without a dictionary? *enough 1 if so. Raw LMDB code. */
static int series_count(struct store *s, MDB_txn *txn, const uint8_t *series, size_t slen,
                        int *enough)
{
    MDB_cursor *c;
    MDB_val k, d;
    unsigned plain = 0, seen = 0;
    *enough = 0;
    int rc = mdb_cursor_open(txn, s->windows, &c);
    if (rc != 0)
        return rc;
    for (rc = series_last(c, series, slen, &k, &d); rc == 0 && seen < STORE_DICT_SCAN;
         rc = series_prev(c, series, slen, &k, &d), seen++) {
        struct store_rec_hdr h;
        /* A snapshot is no pprof: it neither earns nor feeds one. */
        if (store_record_decode(d.mv_data, d.mv_size, &h) == 0 && h.dict == 0 &&
            h.codec == STORE_CODEC_ZSTD && ++plain >= STORE_DICT_AFTER) {
            *enough = 1;
            break;
        }
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Fill buf (STORE_DICT_MAX bytes) from its end with the raw content of the
 * series' newest windows, newest last. *len receives the bytes filled (at
 * the end of buf). 0, -ENOMEM or a raw LMDB code. */
static int series_content(struct store *s, MDB_txn *txn, const uint8_t *series, size_t slen,
                          uint8_t *buf, size_t *len)
{
    MDB_cursor *c;
    MDB_val k, d;
    size_t pos = STORE_DICT_MAX;
    unsigned seen = 0;
    int rc = mdb_cursor_open(txn, s->windows, &c);
    if (rc != 0)
        return rc;
    for (rc = series_last(c, series, slen, &k, &d); rc == 0 && seen < STORE_DICT_SCAN && pos > 0;
         rc = series_prev(c, series, slen, &k, &d), seen++) {
        struct store_rec_hdr h;
        if (store_record_decode(d.mv_data, d.mv_size, &h) != 0 || h.raw_size == 0 ||
            h.codec != STORE_CODEC_ZSTD)
            continue;
        void *raw = NULL;
        int zrc = store_record_load_txn(s, txn, &h, &raw);
        if (zrc == -ENOMEM) {
            rc = zrc;
            break;
        }
        if (zrc != 0)
            continue; /* damaged: store_check reports it; build from the others */
        /* A window too long for the room left gives its end: a pprof's
         * string table (the names and URLs) comes last. */
        size_t n = (size_t)h.raw_size, take = n < pos ? n : pos;
        memcpy(buf + pos - take, (uint8_t *)raw + n - take, take);
        pos -= take;
        isoprof_free(raw);
    }
    mdb_cursor_close(c);
    if (rc == MDB_NOTFOUND || rc == 0) {
        *len = STORE_DICT_MAX - pos;
        return 0;
    }
    return rc;
}

int store_dict_build_txn(struct store *s, MDB_txn *txn, const struct store_key *k, uint32_t *id,
                         uint64_t *charge)
{
    *id = 0;
    *charge = 0;
    if (!s->dicts_on)
        return 0;
    const uint8_t *series = (const uint8_t *)k->worker; /* worker \0 version \0 in the key */
    size_t slen = store_dict_series_len(k);
    uint64_t next;
    int enough = 0;
    int rc = store_meta_get_u64(s, txn, "next_dict", &next);
    if (rc != 0)
        return rc;
    if (next == 0 || next > UINT32_MAX)
        return 0; /* ids used up: go on without */
    if ((rc = series_count(s, txn, series, slen, &enough)) != 0 || !enough)
        return rc;
    uint8_t *buf = isoprof_malloc(STORE_DICT_MAX);
    if (buf == NULL)
        return -ENOMEM;
    size_t n = 0;
    uint8_t *val = NULL;
    if ((rc = series_content(s, txn, series, slen, buf, &n)) != 0 || n < STORE_DICT_MIN)
        goto out;
    size_t vlen = STORE_DICT_HDR + slen + n;
    if ((val = isoprof_malloc(vlen)) == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    const uint8_t *content = buf + STORE_DICT_MAX - n;
    val[0] = STORE_DICT_MAGIC;
    val[1] = STORE_DICT_VERSION;
    val[2] = (uint8_t)(slen >> 8);
    val[3] = (uint8_t)slen;
    store_be32_put(val + 4, (uint32_t)n);
    store_be64_put(val + 8, isoprof_now_wall_ns());
    store_be64_put(val + 16, fnv1a(content, n));
    memcpy(val + STORE_DICT_HDR, series, slen);
    memcpy(val + STORE_DICT_HDR + slen, content, n);
    uint8_t key[4], sv[STORE_DICT_SERIES_VAL];
    store_be32_put(key, (uint32_t)next);
    store_be32_put(sv, (uint32_t)next);
    store_be64_put(sv + 4, 0);
    MDB_val dk = {4, key}, dv = {vlen, val}, sk = {slen, (void *)series}, svv = {sizeof(sv), sv};
    if ((rc = mdb_put(txn, s->dicts, &dk, &dv, MDB_NOOVERWRITE)) != 0 ||
        (rc = mdb_put(txn, s->dict_by_series, &sk, &svv, MDB_NOOVERWRITE)) != 0 ||
        (rc = store_meta_put_u64(s, txn, "next_dict", next + 1)) != 0)
        goto out;
    if (s->dict_built_min == 0)
        s->dict_built_min = (uint32_t)next;
    *id = (uint32_t)next;
    *charge = store_dict_charge(slen, n);
out:
    isoprof_free(val);
    isoprof_free(buf);
    return rc;
}

int store_dict_ref_txn(struct store *s, MDB_txn *txn, uint32_t id, const void *series, size_t slen,
                       int delta, uint64_t *freed)
{
    uint32_t cur = 0;
    uint64_t refs = 0;
    *freed = 0;
    int rc = store_dict_find(s, txn, series, slen, &cur, &refs);
    if (rc == MDB_NOTFOUND || (rc == 0 && cur != id))
        /* A record going whose dictionary is not its series' one: nothing
         * to count down (store_check reports it). One coming must find it. */
        return delta > 0 ? ISOPROF_ECORRUPT : 0;
    if (rc != 0)
        return rc;
    MDB_val sk = {slen, (void *)series};
    if (delta < 0 && refs <= 1) {
        uint8_t key[4];
        store_be32_put(key, id);
        MDB_val dk = {4, key}, dv;
        uint64_t charge = slen + STORE_DICT_SERIES_VAL;
        rc = mdb_get(txn, s->dicts, &dk, &dv);
        if (rc == 0) {
            charge += 4 + dv.mv_size;
            rc = mdb_del(txn, s->dicts, &dk, NULL);
        }
        if ((rc != 0 && rc != MDB_NOTFOUND) || (rc = mdb_del(txn, s->dict_by_series, &sk, NULL)))
            return rc;
        cdict_forget(s, id);
        *freed = charge;
        return 0;
    }
    uint8_t sv[STORE_DICT_SERIES_VAL];
    store_be32_put(sv, id);
    store_be64_put(sv + 4, delta > 0 ? refs + 1 : refs - 1);
    MDB_val svv = {sizeof(sv), sv};
    return mdb_put(txn, s->dict_by_series, &sk, &svv, 0);
}

int store_dict_stat_txn(struct store *s, MDB_txn *txn, uint64_t *n, uint64_t *bytes)
{
    *n = 0;
    *bytes = 0;
    if (!s->dicts_on)
        return 0;
    MDB_cursor *c;
    MDB_val k, d;
    int rc = mdb_cursor_open(txn, s->dicts, &c);
    if (rc != 0)
        return rc;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        (*n)++;
        *bytes += k.mv_size + d.mv_size;
    }
    mdb_cursor_close(c);
    if (rc != MDB_NOTFOUND)
        return rc;
    if ((rc = mdb_cursor_open(txn, s->dict_by_series, &c)) != 0)
        return rc;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT))
        *bytes += k.mv_size + d.mv_size;
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* store_check's count of the records naming each dictionary. */
struct store_dict_tally {
    size_t n;
    struct {
        uint32_t id;
        uint64_t seen;
    } e[];
};

int store_dict_tally_new(struct store *s, MDB_txn *txn, struct store_dict_tally **out)
{
    MDB_stat ms = {0};
    int rc = s->dicts_on ? mdb_stat(txn, s->dicts, &ms) : 0;
    if (rc != 0)
        return rc;
    struct store_dict_tally *t =
        isoprof_calloc(1, sizeof(*t) + (ms.ms_entries + 1) * sizeof(t->e[0]));
    if (t == NULL)
        return -ENOMEM;
    if (s->dicts_on) {
        MDB_cursor *c;
        MDB_val k, d;
        if ((rc = mdb_cursor_open(txn, s->dicts, &c)) != 0) {
            isoprof_free(t);
            return rc;
        }
        /* Key order is id order (big-endian): the array comes out sorted. */
        for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0 && t->n < ms.ms_entries;
             rc = mdb_cursor_get(c, &k, &d, MDB_NEXT))
            if (k.mv_size == 4)
                t->e[t->n++].id = store_be32_get(k.mv_data);
        mdb_cursor_close(c);
        if (rc != 0 && rc != MDB_NOTFOUND) {
            isoprof_free(t);
            return rc;
        }
    }
    *out = t;
    return 0;
}

int store_dict_tally_add(struct store_dict_tally *t, uint32_t id)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->e[mid].id == id) {
            t->e[mid].seen++;
            return 0;
        }
        if (t->e[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return MDB_NOTFOUND;
}

static uint64_t tally_seen(const struct store_dict_tally *t, uint32_t id)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->e[i].id == id)
            return t->e[i].seen;
    return 0;
}

void store_dict_tally_free(struct store_dict_tally *t)
{
    isoprof_free(t);
}

/* The printable series name ("worker/version") of a series key. */
static void series_text(const uint8_t *p, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i + 1 < n && o + 1 < cap && i < 130; i++)
        out[o++] = p[i] == 0 ? '/' : (p[i] < 0x20 || p[i] >= 0x7f) ? '?' : (char)p[i];
    out[o] = '\0';
}

int store_check_dicts(struct store *s, MDB_txn *txn, struct store_dict_tally *t,
                      void (*report)(void *r, const char *line), void *r, uint64_t *stored)
{
    char line[512], st[160];
    MDB_cursor *c;
    MDB_val k, d;
    *stored = 0;
    if (!s->dicts_on)
        return 0;
    int rc = mdb_cursor_open(txn, s->dicts, &c);
    if (rc != 0)
        return rc;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        *stored += k.mv_size + d.mv_size;
        if (k.mv_size != 4) {
            snprintf(line, sizeof(line), "dicts: key of %zu bytes", k.mv_size);
            report(r, line);
            continue;
        }
        uint32_t id = store_be32_get(k.mv_data);
        const uint8_t *b, *ser;
        size_t n, sl;
        uint64_t hash;
        if (dict_decode(&d, &b, &n, &ser, &sl, &hash) != 0) {
            snprintf(line, sizeof(line), "dicts: dictionary %" PRIu32 ": undecodable (%zu bytes)",
                     id, d.mv_size);
            report(r, line);
            continue;
        }
        series_text(ser, sl, st, sizeof(st));
        if (fnv1a(b, n) != hash) {
            snprintf(line, sizeof(line),
                     "dicts: dictionary %" PRIu32 " (%s): content damaged (hash mismatch)", id, st);
            report(r, line);
        }
        uint32_t sid = 0;
        uint64_t refs = 0;
        int frc = store_dict_find(s, txn, ser, sl, &sid, &refs);
        uint64_t seen = tally_seen(t, id);
        if (frc == MDB_NOTFOUND || frc == ISOPROF_ECORRUPT) {
            snprintf(line, sizeof(line),
                     "dicts: dictionary %" PRIu32 " (%s): no dict_by_series entry", id, st);
            report(r, line);
        } else if (frc != 0) {
            rc = frc;
            break;
        } else if (sid != id) {
            snprintf(line, sizeof(line),
                     "dicts: dictionary %" PRIu32 " (%s): dict_by_series names dictionary %" PRIu32,
                     id, st, sid);
            report(r, line);
        } else if (refs != seen || refs == 0) {
            snprintf(line, sizeof(line),
                     "dicts: dictionary %" PRIu32 " (%s): refcount %" PRIu64 ", %" PRIu64
                     " records name it",
                     id, st, refs, seen);
            report(r, line);
        }
    }
    mdb_cursor_close(c);
    if (rc != MDB_NOTFOUND)
        return rc;
    if ((rc = mdb_cursor_open(txn, s->dict_by_series, &c)) != 0)
        return rc;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        *stored += k.mv_size + d.mv_size;
        series_text(k.mv_data, k.mv_size, st, sizeof(st));
        if (d.mv_size != STORE_DICT_SERIES_VAL) {
            snprintf(line, sizeof(line), "dict_by_series: %s: value of %zu bytes", st, d.mv_size);
            report(r, line);
            continue;
        }
        uint32_t id = store_be32_get(d.mv_data);
        const void *b, *ser;
        size_t n, sl;
        int grc = store_dict_get(s, txn, id, &b, &n, &ser, &sl);
        if (grc == MDB_NOTFOUND) {
            snprintf(line, sizeof(line), "dict_by_series: %s -> dictionary %" PRIu32 ": missing",
                     st, id);
            report(r, line);
        } else if (grc == 0 && (sl != k.mv_size || memcmp(ser, k.mv_data, sl) != 0)) {
            snprintf(line, sizeof(line),
                     "dict_by_series: %s -> dictionary %" PRIu32 ": made for another series", st,
                     id);
            report(r, line);
        } else if (grc != 0 && grc != ISOPROF_ECORRUPT) {
            rc = grc;
            break;
        }
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

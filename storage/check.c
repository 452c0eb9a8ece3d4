/*
 * check.c - store_check: verify every record and index.
 *
 * One read transaction, eight passes:
 *   1. windows: each key and header decodes, whatever its version (1 to
 *      5; the report says why one does not, such as a thread label that
 *      is not 1 to STORE_THREAD_MAX bytes of printable ASCII, a container
 *      label with a byte outside [0-9A-Za-z_.-], a window label without
 *      its NULs or with a name store_put would refuse, or label lengths
 *      that reach past the record), each zstd frame inflates to its raw size
 *      with a good checksum (with the dictionary its header names, which
 *      must exist), a snapshot's chunks (blob.c) are all there in order,
 *      add up to its descriptor and inflate to its raw size, the time
 *      index has the window's entry, and ids[seq]
 *      names this key; sums the stored bytes, finds the highest seq and
 *      counts the records naming each dictionary.
 *   2. by_time: each entry is start + a window key that exists with that
 *      start.
 *   3. ids: each entry names a window whose header carries that seq.
 *   4. anomalies (anomaly.c): anomaly_ids and anomalies agree, every
 *      window an anomaly lists is pinned by it, every pin names a window
 *      and an anomaly that lists it.
 *   5. outbox and rejected: each entry is well formed and names a window
 *      flagged as queued; a window waits at one prio only and is not both
 *      pending and rejected.
 *   6. dicts and dict_by_series (dict.c): each dictionary decodes, its
 *      hash holds, its series names it back and its refcount equals the
 *      records counted in pass 1; each series entry names a dictionary.
 *   7. blobs (blob.c): every chunk belongs to a snapshot window or to the
 *      stream in progress (meta "blob_open"); sums their bytes.
 *   8. aggs (agg.c): each per-version aggregate's key and figures decode
 *      and its frame inflates to its raw size; sums their bytes.
 * Then the entry counts of the three DBs must agree and the meta counters
 * must match what was summed. Problems are collected one per line into a
 * capped text; the check goes on after a problem so that one run lists
 * them all (up to the cap).
 */
#include "internal.h"

#include "base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define CHECK_MAX_LINES 100
#define CHECK_LINE_MAX 1024 /* bytes of one line, its newline included */
/* The report's cap: every line at its longest, and the "... and N more". */
#define CHECK_REPORT_MAX (CHECK_MAX_LINES * CHECK_LINE_MAX + 64)

struct report {
    struct isoprof_buf text; /* capped at CHECK_REPORT_MAX; err -ENOMEM is the only failure */
    unsigned lines, dropped;
};

__attribute__((format(printf, 2, 3))) static void report(struct report *r, const char *fmt, ...)
{
    if (r->lines >= CHECK_MAX_LINES) {
        r->dropped++;
        return;
    }
    r->lines++;
    char line[CHECK_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t l = (size_t)n < sizeof(line) - 1 ? (size_t)n : sizeof(line) - 2;
    line[l++] = '\n';
    isoprof_buf_append(&r->text, line, l);
}

/* A printable rendering of a window key for the report. */
static void key_text(const void *key, size_t len, char *out, size_t cap)
{
    struct store_key k;
    if (store_key_decode(key, len, &k) == 0) {
        snprintf(out, cap, "%.*s/%.*s start=%" PRIu64 " isolate=%" PRIu32 " type=%u",
                 (int)(k.worker_len > 64 ? 64 : k.worker_len), k.worker,
                 (int)(k.version_len > 64 ? 64 : k.version_len), k.version, k.start_ns, k.isolate,
                 (unsigned)k.type);
        for (char *p = out; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                *p = '?';
        return;
    }
    const uint8_t *b = key;
    size_t o = 0;
    o += (size_t)snprintf(out, cap, "key[%zu]=", len);
    for (size_t i = 0; i < len && i < 24 && o + 3 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%02x", b[i]);
}

static void report_line(void *r, const char *line)
{
    report(r, "%s", line);
}

static int pass_windows(struct store *s, MDB_txn *txn, struct report *r, uint64_t *stored,
                        uint64_t *max_seq, struct store_dict_tally *tally)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->windows, &c);
    if (rc != 0)
        return rc;
    MDB_val k, d;
    char kt[256];
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        key_text(k.mv_data, k.mv_size, kt, sizeof(kt));
        struct store_key key;
        struct store_rec_hdr h;
        int hrc = store_record_decode(d.mv_data, d.mv_size, &h);
        *stored += store_stored_size(k.mv_size, d.mv_size, hrc == 0 ? h.flags : 0);
        if (store_key_decode(k.mv_data, k.mv_size, &key) != 0) {
            report(r, "windows: %s: undecodable key", kt);
            continue;
        }
        uint8_t tk[STORE_TIME_KEY_MAX];
        store_be64_put(tk, key.start_ns);
        memcpy(tk + 8, k.mv_data, k.mv_size);
        MDB_val t = {8 + k.mv_size, tk}, tv;
        int trc = mdb_get(txn, s->by_time, &t, &tv);
        if (trc == MDB_NOTFOUND)
            report(r, "windows: %s: no by_time entry", kt);
        else if (trc != 0) {
            rc = trc;
            break;
        }
        if (hrc != 0) {
            report(r, "windows: %s: undecodable header (%zu bytes): %s", kt, d.mv_size,
                   store_record_fault(d.mv_data, d.mv_size));
            continue;
        }
        if (h.seq > *max_seq)
            *max_seq = h.seq;
        uint8_t ik[8];
        store_be64_put(ik, h.seq);
        MDB_val i = {8, ik}, iv;
        int irc = mdb_get(txn, s->ids, &i, &iv);
        if (irc == MDB_NOTFOUND)
            report(r, "windows: %s: id %" PRIu64 " missing from ids", kt, h.seq);
        else if (irc != 0) {
            rc = irc;
            break;
        } else if (iv.mv_size != k.mv_size || memcmp(iv.mv_data, k.mv_data, k.mv_size) != 0)
            report(r, "windows: %s: ids[%" PRIu64 "] names another window", kt, h.seq);
        int snapshot = key.type == STORE_TYPE_SNAPSHOT;
        if (snapshot != (h.codec == STORE_CODEC_BLOB)) {
            report(r, "windows: %s (id %" PRIu64 "): %s", kt, h.seq,
                   snapshot ? "a snapshot key with a pprof record"
                            : "a snapshot record under a key of another type");
            continue;
        }
        if (snapshot) {
            if ((rc = store_check_blob_window(s, txn, &h, kt, report_line, r)) != 0)
                break;
            continue;
        }
        if (h.dict != 0 && store_dict_tally_add(tally, h.dict) != 0) {
            report(r, "windows: %s (id %" PRIu64 "): dictionary %" PRIu32 " is missing", kt, h.seq,
                   h.dict);
            continue;
        }
        void *raw = NULL;
        int zrc = store_record_load_txn(s, txn, &h, &raw);
        isoprof_free(raw);
        if (zrc == -ENOMEM) {
            rc = ENOMEM;
            break;
        }
        if (zrc != 0 && zrc != ISOPROF_ECORRUPT) {
            rc = zrc;
            break;
        }
        if (zrc != 0 && h.dict != 0)
            report(r,
                   "windows: %s (id %" PRIu64 "): zstd frame does not inflate to raw size %" PRIu64
                   " with dictionary %" PRIu32,
                   kt, h.seq, h.raw_size, h.dict);
        else if (zrc != 0)
            report(r,
                   "windows: %s (id %" PRIu64 "): zstd frame does not inflate to raw size %" PRIu64,
                   kt, h.seq, h.raw_size);
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int pass_by_time(struct store *s, MDB_txn *txn, struct report *r)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->by_time, &c);
    if (rc != 0)
        return rc;
    MDB_val k, d;
    char kt[256];
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        struct store_key key;
        if (k.mv_size < 8 || store_key_decode((uint8_t *)k.mv_data + 8, k.mv_size - 8, &key) != 0) {
            key_text(k.mv_data, k.mv_size, kt, sizeof(kt));
            report(r, "by_time: %s: undecodable entry", kt);
            continue;
        }
        key_text((uint8_t *)k.mv_data + 8, k.mv_size - 8, kt, sizeof(kt));
        if (key.start_ns != store_be64_get(k.mv_data))
            report(r, "by_time: %s: time prefix does not match the window start", kt);
        MDB_val wk = {k.mv_size - 8, (uint8_t *)k.mv_data + 8}, v;
        int wrc = mdb_get(txn, s->windows, &wk, &v);
        if (wrc == MDB_NOTFOUND)
            report(r, "by_time: %s: no such window", kt);
        else if (wrc != 0) {
            rc = wrc;
            break;
        }
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int pass_ids(struct store *s, MDB_txn *txn, struct report *r)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->ids, &c);
    if (rc != 0)
        return rc;
    MDB_val k, d;
    char kt[256];
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        if (k.mv_size != 8) {
            report(r, "ids: key of %zu bytes", k.mv_size);
            continue;
        }
        uint64_t seq = store_be64_get(k.mv_data);
        key_text(d.mv_data, d.mv_size, kt, sizeof(kt));
        struct store_key key;
        if (store_key_decode(d.mv_data, d.mv_size, &key) != 0) {
            report(r, "ids: %" PRIu64 " -> %s: undecodable window key", seq, kt);
            continue;
        }
        MDB_val v;
        int wrc = mdb_get(txn, s->windows, &d, &v);
        struct store_rec_hdr h;
        if (wrc == MDB_NOTFOUND)
            report(r, "ids: %" PRIu64 " -> %s: no such window", seq, kt);
        else if (wrc != 0) {
            rc = wrc;
            break;
        } else if (store_record_decode(v.mv_data, v.mv_size, &h) == 0 && h.seq != seq)
            report(r, "ids: %" PRIu64 " -> %s: the window carries id %" PRIu64, seq, kt, h.seq);
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Does window seq exist, and was it queued? 0 (*queued set), MDB_NOTFOUND
 * (no such window, or it does not decode), or a raw LMDB code. */
static int window_queued(struct store *s, MDB_txn *txn, uint64_t seq, int *queued)
{
    MDB_val k, d;
    struct store_key key;
    struct store_rec_hdr h;
    int rc = store_window_by_seq(s, txn, seq, &k, &key, &d);
    if (rc != 0)
        return rc;
    if (store_record_decode(d.mv_data, d.mv_size, &h) != 0 || h.seq != seq)
        return MDB_NOTFOUND;
    *queued = (h.flags & STORE_FLAG_QUEUED) != 0;
    return 0;
}

/* The window of an outbox or rejected entry (what names it: db) exists and
 * was queued. Raw LMDB code. */
static int check_queued(struct store *s, MDB_txn *txn, struct report *r, const char *db,
                        uint64_t seq)
{
    int queued = 0;
    int rc = window_queued(s, txn, seq, &queued);
    if (rc == MDB_NOTFOUND)
        report(r, "%s: window %" PRIu64 ": no such window", db, seq);
    else if (rc == 0 && !queued)
        report(r, "%s: window %" PRIu64 ": the window is not flagged as queued", db, seq);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int pass_outbox(struct store *s, MDB_txn *txn, struct report *r)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->outbox, &c);
    if (rc != 0)
        return rc;
    MDB_val k, d, v;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        const uint8_t *p = k.mv_data;
        if (k.mv_size != STORE_OUTBOX_KEY_LEN || p[0] > STORE_OUTBOX_PRIO_OTHER) {
            report(r, "outbox: key of %zu bytes, prio %u", k.mv_size, k.mv_size ? p[0] : 0u);
            continue;
        }
        uint64_t seq = store_be64_get(p + 1);
        if (d.mv_size != STORE_OUTBOX_VAL_LEN)
            report(r, "outbox: window %" PRIu64 ": value of %zu bytes", seq, d.mv_size);
        if ((rc = check_queued(s, txn, r, "outbox", seq)) != 0)
            break;
        uint8_t other[STORE_OUTBOX_KEY_LEN], ik[8];
        store_outbox_key(other, STORE_OUTBOX_PRIO_OTHER, seq);
        MDB_val o = {sizeof(other), other};
        if (p[0] == STORE_OUTBOX_PRIO_ANOMALY && (rc = mdb_get(txn, s->outbox, &o, &v)) == 0)
            report(r, "outbox: window %" PRIu64 ": queued at both priorities", seq);
        else if (rc != 0 && rc != MDB_NOTFOUND)
            break;
        store_be64_put(ik, seq);
        MDB_val i = {8, ik};
        if ((rc = mdb_get(txn, s->rejected, &i, &v)) == 0)
            report(r, "outbox: window %" PRIu64 ": both pending and rejected", seq);
        else if (rc != MDB_NOTFOUND)
            break;
        rc = 0;
    }
    mdb_cursor_close(c);
    if (rc != MDB_NOTFOUND)
        return rc;
    if ((rc = mdb_cursor_open(txn, s->rejected, &c)) != 0)
        return rc;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        if (k.mv_size != 8) {
            report(r, "rejected: key of %zu bytes", k.mv_size);
            continue;
        }
        uint64_t seq = store_be64_get(k.mv_data);
        if (d.mv_size < STORE_REJECT_FIXED ||
            d.mv_size > STORE_REJECT_FIXED + STORE_REJECT_REASON_MAX)
            report(r, "rejected: window %" PRIu64 ": value of %zu bytes", seq, d.mv_size);
        if ((rc = check_queued(s, txn, r, "rejected", seq)) != 0)
            break;
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int store_check(struct store *s, char **why)
{
    if (why)
        *why = NULL;
    if (s == NULL)
        return -EINVAL;
    struct report r = {0};
    isoprof_buf_init(&r.text, CHECK_REPORT_MAX);
    MDB_txn *txn;
    int rc = store_txn_read(s, &txn);
    if (rc != 0)
        return rc;
    uint64_t stored = 0, max_seq = 0, next_seq = 0, meta_stored = 0, evicted = 0, instance = 0;
    uint64_t uploaded = 0, outbox_evicted = 0, dict_stored = 0, blob_stored = 0, agg_stored = 0;
    struct store_dict_tally *tally = NULL;
    if ((rc = store_dict_tally_new(s, txn, &tally)) != 0 ||
        (rc = pass_windows(s, txn, &r, &stored, &max_seq, tally)) != 0 ||
        (rc = pass_by_time(s, txn, &r)) != 0 || (rc = pass_ids(s, txn, &r)) != 0 ||
        (rc = store_check_anomalies(s, txn, report_line, &r)) != 0 ||
        (rc = pass_outbox(s, txn, &r)) != 0 ||
        (rc = store_check_dicts(s, txn, tally, report_line, &r, &dict_stored)) != 0 ||
        (rc = store_check_blobs(s, txn, report_line, &r, &blob_stored)) != 0 ||
        (rc = store_check_aggs(s, txn, report_line, &r, &agg_stored)) != 0)
        goto out;
    stored += dict_stored + blob_stored + agg_stored;
    MDB_stat sw, st, si;
    if ((rc = mdb_stat(txn, s->windows, &sw)) != 0 || (rc = mdb_stat(txn, s->by_time, &st)) != 0 ||
        (rc = mdb_stat(txn, s->ids, &si)) != 0)
        goto out;
    if (sw.ms_entries != st.ms_entries || sw.ms_entries != si.ms_entries)
        report(&r, "counts: windows %zu, by_time %zu, ids %zu", sw.ms_entries, st.ms_entries,
               si.ms_entries);
    const char *names[] = {"next_seq", "stored_bytes", "evicted",
                           "instance", "uploaded",     "outbox_evicted"};
    uint64_t *vals[] = {&next_seq, &meta_stored, &evicted, &instance, &uploaded, &outbox_evicted};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(names); i++) {
        int mrc = store_meta_get_u64(s, txn, names[i], vals[i]);
        if (mrc == ISOPROF_ECORRUPT)
            report(&r, "meta: %s missing or malformed", names[i]);
        else if (mrc != 0) {
            rc = mrc;
            goto out;
        }
    }
    if (next_seq <= max_seq)
        report(&r, "meta: next_seq %" PRIu64 " is not above the highest id %" PRIu64, next_seq,
               max_seq);
    if (meta_stored != stored)
        report(&r, "meta: stored_bytes %" PRIu64 ", the windows take %" PRIu64, meta_stored,
               stored);
    if (instance != s->instance)
        report(&r, "meta: instance id changed while open");
out:
    store_dict_tally_free(tally);
    mdb_txn_abort(txn);
    if (rc == 0 && r.text.err)
        rc = r.text.err;
    if (rc == 0 && r.lines > 0) {
        rc = ISOPROF_ECORRUPT;
    }
    if (rc == ISOPROF_ECORRUPT && r.dropped)
        isoprof_buf_printf(&r.text, "... and %u more\n", r.dropped);
    if (rc == ISOPROF_ECORRUPT && why && r.text.len > 0)
        isoprof_buf_take(&r.text, why, NULL); /* *why stays NULL if that failed */
    isoprof_buf_free(&r.text);
    return store_err(rc);
}

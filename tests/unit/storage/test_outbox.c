/*
 * test_outbox.c - the upload outbox: store_put queues in its own
 * transaction (and not with the outbox off), the drain order (anomaly and
 * pinned windows first, then seq order) and max, a later pin moving a
 * window to the front, ack and reject (idempotent; reason cut), eviction
 * and replacement of pending windows, the budget charge, the upgrade of a
 * schema 2 store, store_check on damaged outbox DBs, read-only handles,
 * a reader process peeking while the writer puts and a thread acking
 * while another puts. store_check is clean after every step.
 */
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>

/* What store_outbox_peek handed out, copied. */
struct peeked {
    size_t n;
    struct {
        uint64_t id, queued_ns;
        uint8_t upload, anomaly;
    } w[512];
};

static int on_peek(const struct store_window *w, uint64_t queued_ns, void *arg)
{
    struct peeked *p = arg;
    if (p->n >= ISOPROF_ARRAY_SIZE(p->w))
        return 99;
    p->w[p->n].id = w->id;
    p->w[p->n].queued_ns = queued_ns;
    p->w[p->n].upload = w->upload;
    p->w[p->n].anomaly = w->anomaly;
    p->n++;
    return 0;
}

static struct peeked *peek(struct store *s, size_t max, int *rc)
{
    static struct peeked out;
    memset(&out, 0, sizeof(out));
    *rc = store_outbox_peek(s, max, on_peek, &out);
    return &out;
}

/* The upload state store_windows reports for one window. */
struct state {
    int found;
    uint8_t upload;
    uint16_t status;
    uint32_t flags;
    uint64_t stored;
    char reason[STORE_REJECT_REASON_MAX + 2];
};

static int on_state(const struct store_window *w, void *arg)
{
    struct state *st = arg;
    st->found = 1;
    st->upload = w->upload;
    st->status = w->reject_status;
    st->flags = w->flags;
    st->stored = w->stored_size;
    snprintf(st->reason, sizeof(st->reason), "%s", w->reject_reason ? w->reject_reason : "(null)");
    return 0;
}

static struct state state_of(struct store *s, uint64_t id)
{
    struct state st = {0};
    struct store_filter f = {.id = id};
    if (store_windows(s, &f, on_state, &st) != 0)
        st.found = -1;
    return st;
}

/* Put one window: taken for anomaly kind (0: none), pinned to anomaly pin
 * (0: none). Returns its id, 0 on failure. */
static uint64_t put_w(struct store *s, uint64_t start, uint32_t isolate, uint8_t anomaly,
                      uint64_t pin)
{
    struct test_rec t;
    rec_make(&t, "checkout", "v42", start, isolate, STORE_TYPE_CPU, 2000, start ^ isolate);
    t.r.w.anomaly = anomaly;
    t.r.pin = pin;
    int rc = store_put(s, &t.r, 1, NULL);
    if (rc != 0)
        fprintf(stderr, "store_put: %s\n", isoprof_strerror(rc));
    uint64_t id = rc == 0 ? t.r.w.id : 0;
    rec_free(&t);
    return id;
}

/* Plain windows starting at T0 + i s for i in [from, to), their ids in
 * ids[0..to-from) (ids may be NULL). 0, or -1 if a put failed. */
static int put_range(struct store *s, int from, int to, uint64_t *ids)
{
    for (int i = from; i < to; i++) {
        uint64_t id = put_w(s, T0 + (uint64_t)i * SEC, 1, 0, 0);
        if (id == 0)
            return -1;
        if (ids)
            ids[i - from] = id;
    }
    return 0;
}

/* A new store at path (outbox on or off) with one plain window at T0,
 * closed; its id, 0 on failure. */
static uint64_t store_one(const char *path, int outbox)
{
    struct store_options o = {.outbox = outbox};
    struct store *s = open_with(path, &o);
    uint64_t id = s ? put_w(s, T0, 1, 0, 0) : 0;
    store_close(s);
    return id;
}

static uint64_t new_anomaly(struct store *s, uint32_t isolate, unsigned pin_latest)
{
    struct store_anomaly a = {.kind = STORE_ANOMALY_MEMORY_NEAR_LIMIT,
                              .worker = "checkout",
                              .version = "v42",
                              .isolate = isolate,
                              .start_ns = T0,
                              .end_ns = T0 + 3600 * SEC,
                              .value = 120u << 20,
                              .threshold = 115u << 20,
                              .flags = STORE_ANOMALY_OPEN};
    return store_anomaly_put(s, &a, pin_latest) == 0 ? a.id : 0;
}

static struct store_stat stat_of(struct store *s)
{
    struct store_stat st;
    if (store_stat(s, &st) != 0)
        memset(&st, 0xff, sizeof(st));
    return st;
}

TEST(queued_in_put)
{
    struct store *s = open_outbox(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t before = isoprof_now_wall_ns();
    struct test_rec t[3];
    struct store_record r[3];
    for (int i = 0; i < 3; i++) {
        rec_make(&t[i], "checkout", "v42", T0 + (uint64_t)i * SEC, 1, STORE_TYPE_CPU, 1500,
                 (uint64_t)i);
        /* QUEUED on input is ignored; ON_DEMAND is kept. */
        t[i].r.w.flags = STORE_FLAG_QUEUED | STORE_FLAG_ON_DEMAND;
        r[i] = t[i].r;
    }
    REQUIRE(store_put(s, r, 3, NULL) == 0);
    uint64_t after = isoprof_now_wall_ns();
    int rc;
    struct peeked *p = peek(s, 100, &rc);
    CHECK_EQ_INT(rc, 0);
    REQUIRE(p->n == 3);
    for (int i = 0; i < 3; i++) {
        CHECK(p->w[i].id == r[i].w.id);
        CHECK(p->w[i].upload == STORE_UPLOAD_PENDING);
        CHECK(p->w[i].queued_ns >= before && p->w[i].queued_ns <= after);
        struct state st = state_of(s, r[i].w.id);
        CHECK(st.found == 1 && st.upload == STORE_UPLOAD_PENDING);
        CHECK(st.flags == (STORE_FLAG_QUEUED | STORE_FLAG_ON_DEMAND));
        CHECK_STR(st.reason, "");
        CHECK(st.stored == r[i].w.stored_size);
        rec_free(&t[i]);
    }
    struct store_stat st = stat_of(s);
    CHECK(st.outbox_pending == 3 && st.outbox_rejected == 0 && st.outbox_uploaded == 0 &&
          st.outbox_evicted == 0);
    CHECK(st.outbox_oldest_ns >= before && st.outbox_oldest_ns <= after);
    CHECK_EQ_INT(check_clean(s), 0);
    /* Peeking reads metadata only: no allocation. */
    isoprof_alloc_fail_after(0);
    p = peek(s, 100, &rc);
    isoprof_alloc_fail_after(-1);
    CHECK(rc == 0 && p->n == 3);
    store_close(s);
}

TEST(outbox_off)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    struct test_rec t;
    rec_make(&t, "w", "v", T0, 1, STORE_TYPE_HEAP, 800, 1);
    t.r.w.flags = STORE_FLAG_QUEUED;
    REQUIRE(store_put(s, &t.r, 1, NULL) == 0);
    rec_free(&t);
    int rc;
    struct peeked *p = peek(s, 100, &rc);
    CHECK(rc == 0 && p->n == 0);
    struct state w = state_of(s, t.r.w.id);
    CHECK(w.found == 1 && w.upload == STORE_UPLOAD_OFF && w.flags == 0);
    struct store_stat st = stat_of(s);
    CHECK(st.outbox_pending == 0 && st.outbox_oldest_ns == 0 && st.outbox_rejected == 0);
    /* An ack of a window that was never queued changes nothing. */
    CHECK_EQ_INT(store_outbox_ack(s, &t.r.w.id, 1), 0);
    CHECK(state_of(s, t.r.w.id).upload == STORE_UPLOAD_OFF && stat_of(s).outbox_uploaded == 0);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

TEST(drain_order)
{
    struct store *s = open_outbox(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t a = new_anomaly(s, 1, 0);
    REQUIRE(a != 0);
    uint64_t plain1 = put_w(s, T0 + 1 * SEC, 1, 0, 0);
    uint64_t taken = put_w(s, T0 + 2 * SEC, 1, STORE_ANOMALY_LATENCY_P999_SPIKE, 0);
    uint64_t plain2 = put_w(s, T0 + 3 * SEC, 1, 0, 0);
    uint64_t pinned = put_w(s, T0 + 4 * SEC, 1, 0, a);
    uint64_t plain3 = put_w(s, T0 + 5 * SEC, 1, 0, 0);
    /* A pin to an anomaly that does not exist pins nothing: no priority. */
    uint64_t gone = put_w(s, T0 + 6 * SEC, 1, 0, 999);
    REQUIRE(plain1 && taken && plain2 && pinned && plain3 && gone);
    const uint64_t want[] = {taken, pinned, plain1, plain2, plain3, gone};
    int rc;
    struct peeked *p = peek(s, 100, &rc);
    CHECK_EQ_INT(rc, 0);
    REQUIRE(p->n == 6);
    for (size_t i = 0; i < 6; i++)
        CHECK(p->w[i].id == want[i]);
    CHECK(p->w[0].anomaly == STORE_ANOMALY_LATENCY_P999_SPIKE);
    /* max, and max 0. */
    p = peek(s, 3, &rc);
    CHECK(rc == 0 && p->n == 3 && p->w[2].id == plain1);
    p = peek(s, 0, &rc);
    CHECK(rc == 0 && p->n == 0);
    /* The oldest queued is among the first of each group. */
    struct store_stat st = stat_of(s);
    uint64_t oldest = UINT64_MAX;
    p = peek(s, 100, &rc);
    for (size_t i = 0; i < p->n; i++)
        oldest = p->w[i].queued_ns < oldest ? p->w[i].queued_ns : oldest;
    CHECK(st.outbox_pending == 6 && st.outbox_oldest_ns == oldest);
    CHECK_EQ_INT(check_clean(s), 0);
    CHECK_EQ_INT(store_outbox_peek(s, 1, NULL, NULL), -EINVAL);
    CHECK_EQ_INT(store_outbox_peek(NULL, 1, on_peek, p), -EINVAL);
    store_close(s);
}

static int stop_at_second(const struct store_window *w, uint64_t queued_ns, void *arg)
{
    (void)w;
    (void)queued_ns;
    return ++*(int *)arg == 2 ? 7 : 0;
}

TEST(pin_later_moves_to_front)
{
    struct store *s = open_outbox(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t w1 = put_w(s, T0 + 1 * SEC, 1, 0, 0);
    uint64_t w2 = put_w(s, T0 + 2 * SEC, 2, 0, 0);
    uint64_t w3 = put_w(s, T0 + 3 * SEC, 3, 0, 0);
    REQUIRE(w1 && w2 && w3);
    int rc;
    struct peeked *p = peek(s, 100, &rc);
    REQUIRE(rc == 0 && p->n == 3 && p->w[2].id == w3);
    uint64_t queued3 = p->w[2].queued_ns;
    /* An anomaly on isolate 3 pins its latest CPU window: w3 goes first,
     * with the time it was queued. */
    REQUIRE(new_anomaly(s, 3, 1u << STORE_TYPE_CPU) != 0);
    p = peek(s, 100, &rc);
    REQUIRE(rc == 0 && p->n == 3);
    CHECK(p->w[0].id == w3 && p->w[1].id == w1 && p->w[2].id == w2);
    CHECK(p->w[0].queued_ns == queued3);
    CHECK_EQ_INT(check_clean(s), 0);
    /* A callback's nonzero value stops the peek and is returned. */
    int calls = 0;
    CHECK_EQ_INT(store_outbox_peek(s, 100, stop_at_second, &calls), 7);
    CHECK_EQ_INT(calls, 2);
    /* Pinning a window that was uploaded already queues nothing. */
    CHECK_EQ_INT(store_outbox_ack(s, &w2, 1), 0);
    REQUIRE(new_anomaly(s, 2, 1u << STORE_TYPE_CPU) != 0);
    p = peek(s, 100, &rc);
    CHECK(rc == 0 && p->n == 2 && p->w[0].id == w3 && p->w[1].id == w1);
    CHECK(state_of(s, w2).upload == STORE_UPLOAD_UPLOADED);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

TEST(ack)
{
    struct store *s = open_outbox(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t id[4];
    REQUIRE(put_range(s, 0, 4, id) == 0);
    uint64_t stored0 = stat_of(s).stored_bytes;
    struct state before = state_of(s, id[0]);
    uint64_t two[] = {id[0], id[2]};
    /* Acks allocate nothing. */
    isoprof_alloc_fail_after(0);
    CHECK_EQ_INT(store_outbox_ack(s, two, 2), 0);
    isoprof_alloc_fail_after(-1);
    struct state st = state_of(s, id[0]);
    CHECK(st.upload == STORE_UPLOAD_UPLOADED && st.flags == STORE_FLAG_QUEUED);
    CHECK(state_of(s, id[2]).upload == STORE_UPLOAD_UPLOADED);
    CHECK(state_of(s, id[1]).upload == STORE_UPLOAD_PENDING);
    /* The outbox charge stays with the window after the ack. */
    CHECK(st.stored == before.stored && stat_of(s).stored_bytes == stored0);
    int rc;
    struct peeked *p = peek(s, 100, &rc);
    CHECK(rc == 0 && p->n == 2 && p->w[0].id == id[1] && p->w[1].id == id[3]);
    struct store_stat ss = stat_of(s);
    CHECK(ss.outbox_pending == 2 && ss.outbox_uploaded == 2);
    /* Already acknowledged, unknown, and none at all: no-ops. */
    uint64_t again[] = {id[0], id[2], 999, 0};
    CHECK_EQ_INT(store_outbox_ack(s, again, 4), 0);
    CHECK_EQ_INT(store_outbox_ack(s, NULL, 0), 0);
    CHECK_EQ_INT(store_outbox_ack(s, NULL, 1), -EINVAL);
    CHECK_EQ_INT(store_outbox_ack(NULL, two, 1), -EINVAL);
    ss = stat_of(s);
    CHECK(ss.outbox_pending == 2 && ss.outbox_uploaded == 2);
    /* The rest, with a duplicate in the list: counted once. */
    uint64_t rest[] = {id[1], id[3], id[1]};
    CHECK_EQ_INT(store_outbox_ack(s, rest, 3), 0);
    ss = stat_of(s);
    CHECK(ss.outbox_pending == 0 && ss.outbox_uploaded == 4 && ss.outbox_oldest_ns == 0);
    p = peek(s, 100, &rc);
    CHECK(rc == 0 && p->n == 0);
    CHECK_EQ_INT(check_clean(s), 0);
    /* The window itself is untouched. */
    void *out = NULL;
    size_t len = 0;
    CHECK_EQ_INT(store_load(s, id[1], &out, &len), 0);
    CHECK(len == 2000);
    isoprof_free(out);
    store_close(s);
}

TEST(reject)
{
    struct store *s = open_outbox(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t id[5];
    REQUIRE(put_range(s, 0, 5, id) == 0);
    CHECK_EQ_INT(store_outbox_reject(s, &id[0], 1, 400, "invalid label \"service_name\""), 0);
    struct state st = state_of(s, id[0]);
    CHECK(st.upload == STORE_UPLOAD_REJECTED && st.status == 400);
    CHECK_STR(st.reason, "invalid label \"service_name\"");
    /* The window stays and loads. */
    void *out = NULL;
    size_t len = 0;
    CHECK_EQ_INT(store_load(s, id[0], &out, &len), 0);
    isoprof_free(out);
    /* A long ASCII reason keeps its first 255 bytes. */
    char longr[400];
    for (size_t i = 0; i < sizeof(longr) - 1; i++)
        longr[i] = (char)('a' + i % 26);
    longr[sizeof(longr) - 1] = '\0';
    CHECK_EQ_INT(store_outbox_reject(s, &id[1], 1, 413, longr), 0);
    st = state_of(s, id[1]);
    CHECK(st.upload == STORE_UPLOAD_REJECTED && st.status == 413);
    CHECK(strlen(st.reason) == STORE_REJECT_REASON_MAX &&
          memcmp(st.reason, longr, STORE_REJECT_REASON_MAX) == 0);
    /* A cut never splits a UTF-8 sequence: "é" (2 bytes) at 254-255. */
    char utf[300];
    memset(utf, 'x', 254);
    memcpy(utf + 254, "\xc3\xa9tail", 7);
    CHECK_EQ_INT(store_outbox_reject(s, &id[2], 1, 0, utf), 0);
    st = state_of(s, id[2]);
    CHECK(st.upload == STORE_UPLOAD_REJECTED && st.status == 0 && strlen(st.reason) == 254);
    /* NULL reason: "". */
    CHECK_EQ_INT(store_outbox_reject(s, &id[3], 1, 422, NULL), 0);
    st = state_of(s, id[3]);
    CHECK(st.upload == STORE_UPLOAD_REJECTED && st.status == 422);
    CHECK_STR(st.reason, "");
    /* Rejecting or acknowledging a window that is not pending changes nothing. */
    CHECK_EQ_INT(store_outbox_reject(s, &id[0], 1, 500, "again"), 0);
    CHECK_EQ_INT(store_outbox_ack(s, &id[0], 1), 0);
    st = state_of(s, id[0]);
    CHECK(st.upload == STORE_UPLOAD_REJECTED && st.status == 400);
    CHECK_EQ_INT(store_outbox_reject(s, &id[4], 1, 70000, "x"), -EINVAL);
    struct store_stat ss = stat_of(s);
    CHECK(ss.outbox_pending == 1 && ss.outbox_rejected == 4 && ss.outbox_uploaded == 0);
    int rc;
    struct peeked *p = peek(s, 100, &rc);
    CHECK(rc == 0 && p->n == 1 && p->w[0].id == id[4]);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

static struct peeked *peek_late(struct store *s, uint64_t late, uint64_t expire, size_t max,
                                int *rc)
{
    static struct peeked out;
    memset(&out, 0, sizeof(out));
    *rc = store_outbox_peek_late(s, late, expire, max, on_peek, &out);
    return &out;
}

/* After an outage, on a simulated clock: the server takes windows of the
 * last hour (max_age), the last 5 minutes of it are "late". Windows still
 * inside go first, those about to leave after them, evidence before both;
 * windows already outside come in the first pass (to be expired at once). */
TEST(late_order)
{
    struct store *s = open_outbox(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t a = new_anomaly(s, 1, 0);
    REQUIRE(a != 0);
    const uint64_t now = T0 + 7200 * SEC, hour = 3600 * SEC;
    const uint64_t expire = now - hour, late = expire + hour / 12;
    /* Stored in time order, as a backlog is. */
    uint64_t gone = put_w(s, now - 70 * 60 * SEC, 1, 0, 0);     /* outside */
    uint64_t leaving = put_w(s, now - 58 * 60 * SEC, 1, 0, 0);  /* late */
    uint64_t ev_late = put_w(s, now - 57 * 60 * SEC, 1, 0, a);  /* evidence, late */
    uint64_t leaving2 = put_w(s, now - 56 * 60 * SEC, 1, 0, 0); /* late */
    uint64_t young = put_w(s, now - 30 * 60 * SEC, 1, 0, 0);
    uint64_t ev_young = put_w(s, now - 20 * 60 * SEC, 1, STORE_ANOMALY_OOM_SUSPECTED, 0);
    uint64_t young2 = put_w(s, now - 10 * SEC, 1, 0, 0);
    REQUIRE(gone && leaving && ev_late && leaving2 && young && ev_young && young2);
    const uint64_t want[] = {ev_young, ev_late, gone, young, young2, leaving, leaving2};
    int rc;
    struct peeked *p = peek_late(s, late, expire, 100, &rc);
    CHECK_EQ_INT(rc, 0);
    REQUIRE(p->n == 7);
    for (size_t i = 0; i < 7; i++)
        CHECK(p->w[i].id == want[i]);
    /* max bounds the passes together; late 0 is the plain peek. */
    p = peek_late(s, late, expire, 4, &rc);
    CHECK(rc == 0 && p->n == 4 && p->w[3].id == young);
    p = peek_late(s, 0, 0, 100, &rc);
    CHECK(rc == 0 && p->n == 7 && p->w[0].id == ev_late && p->w[1].id == ev_young &&
          p->w[2].id == gone);
    CHECK_EQ_INT(store_outbox_peek_late(s, expire, late, 1, on_peek, p), -EINVAL);

    /* The one outside expires: out of the outbox, kept, counted apart. */
    CHECK_EQ_INT(store_outbox_expire(s, &gone, 1, "older than upload.max_age (3600 s)"), 0);
    struct state st = state_of(s, gone);
    CHECK(st.found == 1 && st.upload == STORE_UPLOAD_EXPIRED && st.status == STORE_REJECT_EXPIRED);
    CHECK_STR(st.reason, "older than upload.max_age (3600 s)");
    void *out = NULL;
    size_t len = 0;
    CHECK_EQ_INT(store_load(s, gone, &out, &len), 0);
    isoprof_free(out);
    /* A refusal is not an expiry, and no HTTP status can pass for one. */
    CHECK_EQ_INT(store_outbox_reject(s, &leaving, 1, 400, "bad"), 0);
    CHECK_EQ_INT(store_outbox_reject(s, &leaving2, 1, STORE_REJECT_EXPIRED, "x"), -EINVAL);
    struct store_stat ss = stat_of(s);
    CHECK(ss.outbox_pending == 5 && ss.outbox_rejected == 2 && ss.outbox_expired == 1);
    /* Expiring one that is no longer pending changes nothing. */
    CHECK_EQ_INT(store_outbox_expire(s, &leaving, 1, "again"), 0);
    CHECK_EQ_INT(state_of(s, leaving).upload, STORE_UPLOAD_REJECTED);
    p = peek_late(s, late, expire, 100, &rc);
    CHECK(rc == 0 && p->n == 5 && p->w[0].id == ev_young && p->w[4].id == leaving2);
    CHECK_EQ_INT(check_clean(s), 0);
    /* An expired window goes with its window like a rejected one. */
    store_close(s);
}

TEST(thread_label)
{
    CHECK_EQ_INT(store_thread_label("main"), 4);
    CHECK_EQ_INT(store_thread_label("resize.js#7"), 9);
    CHECK_EQ_INT(store_thread_label("worker#123456"), 6);
    CHECK_EQ_INT(store_thread_label("job#1#5"), 5);  /* a name with '#' keeps it */
    CHECK_EQ_INT(store_thread_label("job#a"), 5);    /* not a thread id */
    CHECK_EQ_INT(store_thread_label("job#"), 4);     /* nothing after */
    CHECK_EQ_INT(store_thread_label("#12"), 3);      /* nothing before */
    CHECK_EQ_INT(store_thread_label("worker-3"), 8); /* an older store's */
}

TEST(evict_and_replace)
{
    const uint64_t budget = 64 * 1024;
    struct store *s = open_outbox(tmp_store_path(), budget);
    REQUIRE(s != NULL);
    /* Window 1 uploaded, 2 rejected, the rest pending, then enough windows
     * of 2000 incompressible-ish bytes to evict all of the first ones. */
    uint64_t first[6];
    REQUIRE(put_range(s, 0, 6, first) == 0);
    CHECK_EQ_INT(store_outbox_ack(s, &first[0], 1), 0);
    CHECK_EQ_INT(store_outbox_reject(s, &first[1], 1, 400, "no"), 0);
    uint64_t evicted = 0;
    int i = 6;
    for (; stat_of(s).evicted_total < 6 && i < 200; i++) {
        struct test_rec t;
        rec_make(&t, "checkout", "v42", T0 + (uint64_t)i * SEC, 1, STORE_TYPE_CPU, 8000,
                 (uint64_t)i * 7919);
        struct store_put_stats ps;
        REQUIRE(store_put(s, &t.r, 1, &ps) == 0);
        rec_free(&t);
        evicted += ps.evicted;
        struct store_stat st = stat_of(s);
        CHECK(st.stored_bytes <= budget);
        REQUIRE(check_clean(s) == 0);
    }
    REQUIRE(i < 200);
    struct store_stat st = stat_of(s);
    /* The uploaded and the rejected window went too, but were not pending. */
    CHECK(st.outbox_evicted == evicted - 2);
    CHECK(st.outbox_rejected == 0 && st.outbox_uploaded == 1);
    CHECK(st.outbox_pending == st.windows);
    int rc;
    struct peeked *p = peek(s, 512, &rc);
    CHECK(rc == 0 && p->n == st.windows);
    for (int j = 0; j < 6; j++)
        CHECK(state_of(s, first[j]).found == 0);

    /* Replacement: the same key put again. The pending old id leaves the
     * outbox (counted), the new one is queued; acking the old is a no-op. */
    uint64_t last = p->w[p->n - 1].id;
    uint64_t again = put_w(s, T0 + (uint64_t)(i - 1) * SEC, 1, 0, 0);
    REQUIRE(again != 0 && again != last);
    struct store_stat st2 = stat_of(s);
    CHECK(st2.outbox_evicted == st.outbox_evicted + 1);
    CHECK(st2.outbox_pending == st.outbox_pending && st2.windows == st.windows);
    CHECK_EQ_INT(store_outbox_ack(s, &last, 1), 0);
    CHECK(stat_of(s).outbox_uploaded == 1);
    CHECK(state_of(s, again).upload == STORE_UPLOAD_PENDING);
    /* Replacing an uploaded window is not counted. */
    CHECK_EQ_INT(store_outbox_ack(s, &again, 1), 0);
    REQUIRE(put_w(s, T0 + (uint64_t)(i - 1) * SEC, 1, 0, 0) != 0);
    CHECK(stat_of(s).outbox_evicted == st2.outbox_evicted);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

TEST(budget_charge)
{
    /* The same window in a store with and one without the outbox. */
    struct store *on = open_outbox(tmp_store_path(), 0);
    struct store *off = open_rw(tmp_store_path(), 0);
    REQUIRE(on != NULL && off != NULL);
    struct test_rec t;
    rec_make(&t, "checkout", "v42", T0, 1, STORE_TYPE_CPU, 3000, 5);
    REQUIRE(store_put(on, &t.r, 1, NULL) == 0);
    uint64_t queued = t.r.w.stored_size;
    REQUIRE(store_put(off, &t.r, 1, NULL) == 0);
    uint64_t plain = t.r.w.stored_size;
    rec_free(&t);
    CHECK(queued == plain + STORE_OUTBOX_CHARGE);
    CHECK(stat_of(on).stored_bytes == queued && stat_of(off).stored_bytes == plain);
    CHECK_EQ_INT(check_clean(on), 0);
    CHECK_EQ_INT(check_clean(off), 0);
    store_close(on);
    store_close(off);
}

TEST(readonly)
{
    const char *path = tmp_store_path();
    uint64_t id = store_one(path, 1);
    REQUIRE(id != 0);
    /* outbox is ignored by a read-only handle. */
    struct store_options ro = {.readonly = 1, .outbox = 1};
    struct store *r = open_with(path, &ro);
    REQUIRE(r != NULL);
    CHECK_EQ_INT(store_outbox_ack(r, &id, 1), -EROFS);
    CHECK_EQ_INT(store_outbox_reject(r, &id, 1, 400, "x"), -EROFS);
    int rc;
    struct peeked *p = peek(r, 10, &rc);
    CHECK(rc == 0 && p->n == 1 && p->w[0].id == id);
    CHECK(state_of(r, id).upload == STORE_UPLOAD_PENDING);
    CHECK_EQ_INT(check_clean(r), 0);
    store_close(r);
}

/* The reader of reader_process: 10 pending; then 20 put, the first 5
 * acknowledged and the 16th taken for an anomaly (drained first). */
static int peeker_step(struct store *r, int step, void *arg)
{
    (void)arg;
    int rc;
    struct peeked *p = peek(r, 100, &rc);
    if (step == 0)
        return rc != 0 || p->n != 10 ? 20 : 0;
    if (rc != 0 || p->n != 15 || p->w[0].id != 16 || p->w[1].id != 6)
        return 21;
    return 0;
}

/* A read-only process peeks while the writer puts and acks. */
TEST(reader_process)
{
    const char *path = tmp_store_path();
    struct store *w = open_outbox(path, 0);
    REQUIRE(w != NULL);
    REQUIRE(put_range(w, 0, 10, NULL) == 0);
    struct reader rd;
    REQUIRE(reader_start(&rd, path, peeker_step, NULL) == 0);
    for (int i = 10; i < 20; i++)
        CHECK(put_w(w, T0 + (uint64_t)i * SEC, 1, i == 15 ? STORE_ANOMALY_OOM_SUSPECTED : 0, 0) !=
              0);
    const uint64_t acked[] = {1, 2, 3, 4, 5};
    CHECK_EQ_INT(store_outbox_ack(w, acked, 5), 0);
    CHECK_EQ_INT(reader_finish(&rd), 0);
    store_close(w);
}

/* The uploader's thread peeks and acks while the writer's thread puts. */
static struct store *g_store;
static atomic_int g_done;
static atomic_int g_errors;
static atomic_ulong g_acked;

static void *uploader_main(void *arg)
{
    (void)arg;
    static struct peeked p;
    for (int idle = 0; idle < 3;) {
        int done = atomic_load(&g_done);
        memset(&p, 0, sizeof(p));
        int rc = store_outbox_peek(g_store, 16, on_peek, &p);
        uint64_t ids[16];
        for (size_t i = 0; i < p.n; i++)
            ids[i] = p.w[i].id;
        if (rc == 0 && p.n > 0)
            rc = store_outbox_ack(g_store, ids, p.n);
        if (rc != 0) {
            fprintf(stderr, "uploader: %s\n", isoprof_strerror(rc));
            atomic_fetch_add(&g_errors, 1);
            break;
        }
        atomic_fetch_add(&g_acked, p.n);
        idle = done && p.n == 0 ? idle + 1 : 0;
    }
    return NULL;
}

TEST(ack_while_put)
{
    g_store = open_outbox(tmp_store_path(), 256 * 1024);
    REQUIRE(g_store != NULL);
    pthread_t up;
    REQUIRE(pthread_create(&up, NULL, uploader_main, NULL) == 0);
    enum { N = 120 };
    for (int i = 0; i < N; i += 4) {
        struct test_rec t[4];
        struct store_record r[4];
        for (int j = 0; j < 4; j++) {
            rec_make(&t[j], "w", "v", T0 + (uint64_t)(i + j) * SEC, 1, STORE_TYPE_CPU, 4000,
                     (uint64_t)(i + j));
            r[j] = t[j].r;
        }
        CHECK_EQ_INT(store_put(g_store, r, 4, NULL), 0);
        for (int j = 0; j < 4; j++)
            rec_free(&t[j]);
    }
    atomic_store(&g_done, 1);
    pthread_join(up, NULL);
    CHECK_EQ_INT(atomic_load(&g_errors), 0);
    struct store_stat st = stat_of(g_store);
    /* Every window was either acknowledged or evicted while pending; a
     * window evicted between the peek and the ack is ignored by the ack. */
    CHECK(st.outbox_pending == 0 && st.evicted_total > 0);
    CHECK(st.outbox_uploaded <= atomic_load(&g_acked));
    CHECK(st.outbox_uploaded + st.outbox_evicted == N);
    CHECK_EQ_INT(check_clean(g_store), 0);
    store_close(g_store);
}

/* A schema 2 store (no outbox DBs, no outbox counters): a reader is told
 * the daemon upgrades it, a writer does, and its windows read as never
 * queued. */
TEST(upgrade_from_schema_2)
{
    const char *path = tmp_store_path();
    uint64_t id = store_one(path, 0);
    REQUIRE(id != 0);
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    MDB_txn *txn;
    REQUIRE(mdb_txn_begin(s->env, NULL, 0, &txn) == 0);
    MDB_val uk = {8, "uploaded"}, ek = {14, "outbox_evicted"};
    MDB_val fk = {6, "format"}, fv = {12, "ISOPROF\0\0\0\0\x02"};
    REQUIRE(mdb_drop(txn, s->outbox, 1) == 0);
    REQUIRE(mdb_drop(txn, s->rejected, 1) == 0);
    REQUIRE(mdb_del(txn, s->meta, &uk, NULL) == 0 && mdb_del(txn, s->meta, &ek, NULL) == 0);
    REQUIRE(mdb_put(txn, s->meta, &fk, &fv, 0) == 0);
    REQUIRE(mdb_txn_commit(txn) == 0);
    store_close(s);

    struct store_options ro = {.readonly = 1};
    char *why = NULL;
    s = NULL;
    CHECK_EQ_INT(store_open(path, &ro, &s, &why), ISOPROF_ESCHEMA);
    CHECK(s == NULL);
    CHECK(why != NULL && strstr(why, "schema version 2") && strstr(why, "upgrades"));
    isoprof_free(why);

    s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    struct store_stat st = stat_of(s);
    CHECK(st.schema_version == STORE_SCHEMA_VERSION && st.windows == 1);
    CHECK(st.outbox_pending == 0 && st.outbox_uploaded == 0 && st.outbox_evicted == 0);
    CHECK(state_of(s, id).upload == STORE_UPLOAD_OFF);
    CHECK_EQ_INT(check_clean(s), 0);
    uint64_t id2 = put_w(s, T0 + SEC, 1, 0, 0);
    REQUIRE(id2 == id + 1);
    CHECK_EQ_INT(store_outbox_ack(s, &id2, 1), 0);
    CHECK(state_of(s, id2).upload == STORE_UPLOAD_UPLOADED);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    s = NULL;
    CHECK_EQ_INT(store_open(path, &ro, &s, NULL), 0);
    CHECK(s != NULL && stat_of(s).outbox_uploaded == 1);
    store_close(s);
}

enum damage { DANGLING, BOTH_PRIOS, REJECTED_GONE, NOT_QUEUED, BAD_VALUE, PENDING_REJECTED };

/* Damage the outbox DBs of s behind its back; id names a pending window
 * (at prio 1) and plain one that was never queued. */
static int damage(struct store *s, enum damage d, uint64_t id, uint64_t plain)
{
    MDB_txn *txn;
    if (mdb_txn_begin(s->env, NULL, 0, &txn) != 0)
        return -1;
    uint8_t key[STORE_OUTBOX_KEY_LEN], val[8] = {0}, ik[8];
    MDB_val k = {sizeof(key), key}, v = {sizeof(val), val}, i = {8, ik};
    int rc = 0;
    switch (d) {
    case DANGLING:
        store_outbox_key(key, STORE_OUTBOX_PRIO_OTHER, 999);
        rc = mdb_put(txn, s->outbox, &k, &v, 0);
        break;
    case BOTH_PRIOS:
        store_outbox_key(key, STORE_OUTBOX_PRIO_ANOMALY, id);
        rc = mdb_put(txn, s->outbox, &k, &v, 0);
        break;
    case REJECTED_GONE:
        store_be64_put(ik, 999);
        v.mv_size = 2;
        rc = mdb_put(txn, s->rejected, &i, &v, 0);
        break;
    case NOT_QUEUED:
        store_outbox_key(key, STORE_OUTBOX_PRIO_OTHER, plain);
        rc = mdb_put(txn, s->outbox, &k, &v, 0);
        break;
    case BAD_VALUE:
        store_outbox_key(key, STORE_OUTBOX_PRIO_OTHER, id);
        v.mv_size = 3;
        rc = mdb_put(txn, s->outbox, &k, &v, 0);
        break;
    case PENDING_REJECTED:
        store_be64_put(ik, id);
        v.mv_size = 1;
        rc = mdb_put(txn, s->rejected, &i, &v, 0);
        break;
    }
    if (rc != 0) {
        mdb_txn_abort(txn);
        return rc;
    }
    return mdb_txn_commit(txn);
}

static void expect_problem(enum damage d, const char *needle)
{
    const char *path = tmp_store_path();
    uint64_t plain = store_one(path, 0);
    struct store *s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    uint64_t id = put_w(s, T0 + SEC, 1, 0, 0);
    REQUIRE(plain && id);
    REQUIRE(check_clean(s) == 0);
    REQUIRE(damage(s, d, id, plain) == 0);
    check_corrupt(s, (int)d, needle);
    /* Peeking skips what it cannot hand out and still works. */
    int rc;
    struct peeked *p = peek(s, 100, &rc);
    CHECK_EQ_INT(rc, 0);
    CHECK(p->n <= 2);
    store_close(s);
}

TEST(check_finds_damage)
{
    expect_problem(DANGLING, "outbox: window 999: no such window");
    expect_problem(BOTH_PRIOS, "queued at both priorities");
    expect_problem(REJECTED_GONE, "rejected: window 999: no such window");
    expect_problem(NOT_QUEUED, "outbox: window 1: the window is not flagged as queued");
    expect_problem(BAD_VALUE, "outbox: window 2: value of 3 bytes");
    expect_problem(PENDING_REJECTED, "outbox: window 2: both pending and rejected");
    expect_problem(PENDING_REJECTED, "rejected: window 2: value of 1 bytes");
}

int main(void)
{
    RUN(queued_in_put);
    RUN(outbox_off);
    RUN(drain_order);
    RUN(pin_later_moves_to_front);
    RUN(ack);
    RUN(reject);
    RUN(late_order);
    RUN(thread_label);
    RUN(evict_and_replace);
    RUN(budget_charge);
    RUN(readonly);
    RUN(reader_process);
    RUN(ack_while_put);
    RUN(upgrade_from_schema_2);
    RUN(check_finds_damage);
    TEST_EXIT();
}

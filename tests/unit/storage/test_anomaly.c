/*
 * test_anomaly.c - the anomalies index and pins: create, update, query,
 * pin in the insert transaction, pin an isolate's latest windows, pinned
 * windows evicted last, bounds, and store_check after each.
 */
#include "common.h"

struct anoms {
    size_t n;
    struct {
        uint64_t id, start, end, value, threshold, limit, wins[8];
        size_t nwin;
        uint32_t isolate, flags;
        uint8_t kind, limit_source;
        char worker[64], version[64];
    } a[64];
};

static int on_anomaly(const struct store_anomaly *a, void *arg)
{
    struct anoms *l = arg;
    if (l->n >= ISOPROF_ARRAY_SIZE(l->a))
        return 99;
    l->a[l->n].id = a->id;
    l->a[l->n].kind = a->kind;
    l->a[l->n].start = a->start_ns;
    l->a[l->n].end = a->end_ns;
    l->a[l->n].value = a->value;
    l->a[l->n].threshold = a->threshold;
    l->a[l->n].limit = a->limit;
    l->a[l->n].limit_source = a->limit_source;
    l->a[l->n].isolate = a->isolate;
    l->a[l->n].flags = a->flags;
    l->a[l->n].nwin = a->nwindows;
    for (size_t i = 0; i < a->nwindows && i < 8; i++)
        l->a[l->n].wins[i] = a->windows[i];
    snprintf(l->a[l->n].worker, sizeof(l->a[0].worker), "%s", a->worker);
    snprintf(l->a[l->n].version, sizeof(l->a[0].version), "%s", a->version);
    l->n++;
    return 0;
}

static struct anoms *anoms(struct store *s, const struct store_anomaly_filter *f, int *rc)
{
    static struct anoms out;
    memset(&out, 0, sizeof(out));
    *rc = store_anomalies(s, f, on_anomaly, &out);
    return &out;
}

/* Put one window pinned to anomaly pin (0: none). */
static uint64_t put_pinned(struct store *s, const char *worker, uint64_t start, uint32_t isolate,
                           uint8_t type, size_t len, uint64_t pin)
{
    struct test_rec t;
    rec_make(&t, worker, "v1", start, isolate, type, len, start ^ isolate);
    t.r.pin = pin;
    t.r.w.anomaly = pin ? STORE_ANOMALY_MEMORY_NEAR_LIMIT : 0;
    int rc = store_put(s, &t.r, 1, NULL);
    uint64_t id = rc == 0 ? t.r.w.id : 0;
    rec_free(&t);
    return id;
}

static uint64_t new_anomaly(struct store *s, uint8_t kind, const char *worker, uint32_t isolate,
                            uint64_t start, unsigned pin_latest)
{
    struct store_anomaly a = {.kind = kind,
                              .worker = worker,
                              .version = "v1",
                              .isolate = isolate,
                              .start_ns = start,
                              .end_ns = start,
                              .value = 120u << 20,
                              .threshold = 115u << 20,
                              .flags = STORE_ANOMALY_OPEN};
    if (kind != STORE_ANOMALY_LATENCY_P999_SPIKE) {
        a.limit = 128u << 20;
        a.limit_source = STORE_LIMIT_WORKERD;
    }
    int rc = store_anomaly_put(s, &a, pin_latest);
    if (rc != 0)
        fprintf(stderr, "store_anomaly_put: %s\n", isoprof_strerror(rc));
    return rc == 0 ? a.id : 0;
}

TEST(create_update_query)
{
    struct store *s = open_rw(tmp_dir(), 0);
    REQUIRE(s != NULL);
    uint64_t a1 = new_anomaly(s, STORE_ANOMALY_MEMORY_NEAR_LIMIT, "checkout", 7, T0, 0);
    REQUIRE(a1 == 1);
    uint64_t plain = put_pinned(s, "checkout", T0 - SEC, 7, STORE_TYPE_CPU, 300, 0);
    uint64_t h = put_pinned(s, "checkout", T0 + SEC, 7, STORE_TYPE_HEAP, 300, a1);
    uint64_t c = put_pinned(s, "checkout", T0 + 2 * SEC, 7, STORE_TYPE_CPU, 300, a1);
    REQUIRE(plain && h && c);
    uint64_t a2 = new_anomaly(s, STORE_ANOMALY_LATENCY_P999_SPIKE, "cart", 0, T0 + 5 * SEC, 0);
    REQUIRE(a2 == 2);

    int rc;
    struct anoms *l = anoms(s, NULL, &rc);
    REQUIRE(rc == 0 && l->n == 2);
    CHECK(l->a[0].limit == 128u << 20 && l->a[0].limit_source == STORE_LIMIT_WORKERD);
    CHECK(l->a[1].limit == 0 && l->a[1].limit_source == STORE_LIMIT_NONE);

    /* The episode ends: end, value, limit and flags change, the windows
     * stay. */
    struct store_anomaly up = {.id = a1,
                               .kind = STORE_ANOMALY_MEMORY_NEAR_LIMIT,
                               .worker = "ignored",
                               .version = "ignored",
                               .end_ns = T0 + 60 * SEC,
                               .value = 125u << 20,
                               .threshold = 115u << 20,
                               .limit = 208u << 20,
                               .limit_source = STORE_LIMIT_FLAG};
    REQUIRE(store_anomaly_put(s, &up, 0) == 0);

    l = anoms(s, NULL, &rc);
    REQUIRE(rc == 0 && l->n == 2);
    CHECK(l->a[0].limit == 208u << 20 && l->a[0].limit_source == STORE_LIMIT_FLAG);
    CHECK_STR(store_limit_source_name(l->a[0].limit_source), "auto:flag");
    CHECK(store_limit_source_name(STORE_LIMIT_NONE) == NULL);
    CHECK(store_limit_source_name(STORE_LIMIT_SOURCE_MAX + 1) == NULL);
    CHECK_STR(store_limit_source_name(STORE_LIMIT_PROCESS), "auto:process");
    CHECK(l->a[0].id == a1 && l->a[0].kind == STORE_ANOMALY_MEMORY_NEAR_LIMIT);
    CHECK_STR(l->a[0].worker, "checkout");
    CHECK_STR(l->a[0].version, "v1");
    CHECK(l->a[0].isolate == 7 && l->a[0].start == T0 && l->a[0].end == T0 + 60 * SEC);
    CHECK(l->a[0].value == 125u << 20 && l->a[0].threshold == 115u << 20 && l->a[0].flags == 0);
    CHECK(l->a[0].nwin == 2 && l->a[0].wins[0] == h && l->a[0].wins[1] == c);
    CHECK(l->a[1].id == a2 && l->a[1].flags == STORE_ANOMALY_OPEN && l->a[1].nwin == 0);

    struct store_anomaly_filter f = {.kind = STORE_ANOMALY_LATENCY_P999_SPIKE};
    l = anoms(s, &f, &rc);
    CHECK(rc == 0 && l->n == 1 && l->a[0].id == a2);
    f = (struct store_anomaly_filter){.worker = "checkout"};
    l = anoms(s, &f, &rc);
    CHECK(rc == 0 && l->n == 1 && l->a[0].id == a1);
    f = (struct store_anomaly_filter){.id = a2};
    l = anoms(s, &f, &rc);
    CHECK(rc == 0 && l->n == 1 && l->a[0].id == a2);
    f = (struct store_anomaly_filter){.id = 99};
    l = anoms(s, &f, &rc);
    CHECK(rc == 0 && l->n == 0);
    /* Overlap: a1 spans [T0, T0+60s]; a2 starts at T0+5s. */
    f = (struct store_anomaly_filter){.since_ns = T0 + 30 * SEC};
    l = anoms(s, &f, &rc);
    CHECK(rc == 0 && l->n == 2);
    f = (struct store_anomaly_filter){.until_ns = T0 + 5 * SEC};
    l = anoms(s, &f, &rc);
    CHECK(rc == 0 && l->n == 1 && l->a[0].id == a1);
    f = (struct store_anomaly_filter){.kind = STORE_ANOMALY_MEMORY_NEAR_LIMIT,
                                      .since_ns = T0 + 61 * SEC};
    l = anoms(s, &f, &rc);
    CHECK(rc == 0 && l->n == 0);

    /* Pinned windows: listed by the pins path, marked in every listing. */
    struct store_filter wf = {.pinned = STORE_PINNED_ANY};
    struct seen *w = list(s, &wf, &rc);
    CHECK(rc == 0 && w->n == 2 && w->w[0].id == h && w->w[1].id == c);
    wf.pinned = 1u << STORE_ANOMALY_OOM_SUSPECTED;
    w = list(s, &wf, &rc);
    CHECK(rc == 0 && w->n == 0);
    wf = (struct store_filter){.pinned = 1u << STORE_ANOMALY_MEMORY_NEAR_LIMIT,
                               .type = STORE_TYPE_HEAP};
    w = list(s, &wf, &rc);
    CHECK(rc == 0 && w->n == 1 && w->w[0].id == h);

    struct store_stat st;
    CHECK(store_stat(s, &st) == 0 && st.anomalies == 2 && st.windows_pinned == 2);
    CHECK_EQ_INT(check_clean(s), 0);

    /* Errors leave nothing behind. */
    struct store_anomaly bad = {.kind = 0, .worker = "w", .version = "v"};
    CHECK_EQ_INT(store_anomaly_put(s, &bad, 0), -EINVAL);
    bad.kind = STORE_ANOMALY_MAX + 1;
    CHECK_EQ_INT(store_anomaly_put(s, &bad, 0), -EINVAL);
    bad = (struct store_anomaly){.kind = 1, .worker = "w", .version = "v",
                                 .limit_source = STORE_LIMIT_SOURCE_MAX + 1};
    CHECK_EQ_INT(store_anomaly_put(s, &bad, 0), -EINVAL);
    bad = (struct store_anomaly){.id = 77, .kind = 1, .worker = "w", .version = "v"};
    CHECK_EQ_INT(store_anomaly_put(s, &bad, 0), ISOPROF_ENOTFOUND);
    CHECK(bad.id == 77);
    store_close(s);
}

static int pinned_of(const struct store_window *w, void *arg)
{
    *(uint32_t *)arg = w->pinned;
    return 0;
}

static uint32_t window_pins(struct store *s, uint64_t id)
{
    uint32_t p = 0xdead;
    struct store_filter f = {.id = id};
    if (store_windows(s, &f, pinned_of, &p) != 0)
        return 0xbeef;
    return p;
}

TEST(pin_latest_of_isolate)
{
    struct store *s = open_rw(tmp_dir(), 0);
    REQUIRE(s != NULL);
    uint64_t h1 = put_pinned(s, "api", T0, 7, STORE_TYPE_HEAP, 200, 0);
    uint64_t h2 = put_pinned(s, "api", T0 + 10 * SEC, 7, STORE_TYPE_HEAP, 200, 0);
    uint64_t c1 = put_pinned(s, "api", T0 + 12 * SEC, 7, STORE_TYPE_CPU, 200, 0);
    uint64_t other = put_pinned(s, "api", T0 + 14 * SEC, 8, STORE_TYPE_HEAP, 200, 0);
    uint64_t later = put_pinned(s, "api", T0 + 90 * SEC, 7, STORE_TYPE_HEAP, 200, 0);
    REQUIRE(h1 && h2 && c1 && other && later);
    /* Isolate 7 died at T0+30s: its last heap and CPU windows before that. */
    struct store_anomaly a = {.kind = STORE_ANOMALY_OOM_SUSPECTED,
                              .worker = "api",
                              .version = "v1",
                              .isolate = 7,
                              .start_ns = T0 + 30 * SEC,
                              .end_ns = T0 + 30 * SEC,
                              .value = 126u << 20,
                              .threshold = 115u << 20};
    REQUIRE(store_anomaly_put(s, &a, 1u << STORE_TYPE_CPU | 1u << STORE_TYPE_HEAP) == 0);
    int rc;
    struct store_anomaly_filter f = {.id = a.id};
    struct anoms *l = anoms(s, &f, &rc);
    REQUIRE(rc == 0 && l->n == 1);
    CHECK_EQ_INT(l->a[0].nwin, 2);
    CHECK((l->a[0].wins[0] == c1 && l->a[0].wins[1] == h2) ||
          (l->a[0].wins[0] == h2 && l->a[0].wins[1] == c1));
    CHECK_EQ_INT(window_pins(s, h2), 1u << STORE_ANOMALY_OOM_SUSPECTED);
    CHECK_EQ_INT(window_pins(s, h1), 0);
    CHECK_EQ_INT(window_pins(s, other), 0);
    CHECK_EQ_INT(window_pins(s, later), 0);
    /* Pinned twice (by two anomalies): both kinds show. */
    uint64_t m = new_anomaly(s, STORE_ANOMALY_MEMORY_NEAR_LIMIT, "api", 7, T0 + 29 * SEC,
                             1u << STORE_TYPE_HEAP);
    REQUIRE(m != 0);
    CHECK_EQ_INT(window_pins(s, h2),
                 1u << STORE_ANOMALY_OOM_SUSPECTED | 1u << STORE_ANOMALY_MEMORY_NEAR_LIMIT);
    CHECK_EQ_INT(check_clean(s), 0);

    /* Replacing a pinned window (same key) unpins it and keeps the index
     * consistent. */
    uint64_t h2b = put_pinned(s, "api", T0 + 10 * SEC, 7, STORE_TYPE_HEAP, 300, 0);
    REQUIRE(h2b != 0 && h2b != h2);
    CHECK_EQ_INT(window_pins(s, h2b), 0);
    l = anoms(s, &f, &rc);
    CHECK(rc == 0 && l->n == 1 && l->a[0].nwin == 1 && l->a[0].wins[0] == c1);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

TEST(pinned_evicted_last)
{
    /* 2 MiB budget, 32 KiB incompressible windows: about 60 fit. */
    struct store *s = open_rw(tmp_dir(), 2u << 20);
    REQUIRE(s != NULL);
    uint64_t now = isoprof_now_wall_ns();
    uint64_t base = now - 1000 * SEC;
    uint64_t a = new_anomaly(s, STORE_ANOMALY_MEMORY_NEAR_LIMIT, "w", 1, base, 0);
    REQUIRE(a != 0);
    uint64_t pinned[3];
    for (int i = 0; i < 3; i++)
        pinned[i] = put_pinned(s, "w", base + (uint64_t)i * SEC, 1, STORE_TYPE_HEAP, 32768, a);
    /* 200 more windows, one per second after them: the unpinned head is
     * always younger than 1000 s and older than 250 s, so the pinned
     * ones (1000 s old) stay: 1000 < 4 x the head's age. */
    uint64_t first_unpinned = 0;
    for (int i = 0; i < 200; i++) {
        uint64_t id =
            put_pinned(s, "w", base + 100 * SEC + (uint64_t)i * SEC, 1, STORE_TYPE_CPU, 32768, 0);
        REQUIRE(id != 0);
        if (i == 0)
            first_unpinned = id;
    }
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(window_pins(s, pinned[i]), 1u << STORE_ANOMALY_MEMORY_NEAR_LIMIT);
    CHECK_EQ_INT(window_pins(s, first_unpinned), 0xdead); /* evicted */
    struct store_stat st;
    REQUIRE(store_stat(s, &st) == 0);
    CHECK(st.evicted_total > 100 && st.windows_pinned == 3 && st.stored_bytes <= 2u << 20);
    CHECK_EQ_INT(check_clean(s), 0);

    /* Close the episode; then windows of "now" arrive until the unpinned
     * head is under 250 s old: the pinned ones go, and with the last of
     * them the closed anomaly. */
    struct store_anomaly up = {.id = a, .kind = 1, .worker = "w", .version = "v1", .end_ns = base};
    REQUIRE(store_anomaly_put(s, &up, 0) == 0);
    for (int i = 0; i < 120; i++)
        REQUIRE(put_pinned(s, "w", now - 60 * SEC + (uint64_t)i * SEC / 2, 1, STORE_TYPE_CPU,
                           32768, 0) != 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(window_pins(s, pinned[i]), 0xdead);
    REQUIRE(store_stat(s, &st) == 0);
    CHECK(st.windows_pinned == 0 && st.anomalies == 0);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

TEST(bounds)
{
    struct store *s = open_rw(tmp_dir(), 0);
    REQUIRE(s != NULL);
    uint64_t a = new_anomaly(s, STORE_ANOMALY_MEMORY_NEAR_LIMIT, "w", 1, T0, 0);
    REQUIRE(a != 0);
    /* One anomaly keeps its 1024 newest windows. */
    uint64_t first = 0, last = 0;
    for (int i = 0; i < 1030; i++) {
        last = put_pinned(s, "w", T0 + (uint64_t)i * SEC, 1, STORE_TYPE_HEAP, 64, a);
        REQUIRE(last != 0);
        if (i == 0)
            first = last;
    }
    int rc;
    struct store_anomaly_filter f = {.id = a};
    struct anoms *l = anoms(s, &f, &rc);
    REQUIRE(rc == 0 && l->n == 1);
    CHECK_EQ_INT(l->a[0].nwin, 1024);
    CHECK_EQ_INT(l->a[0].wins[0], first + 6);
    CHECK_EQ_INT(window_pins(s, first), 0);
    CHECK_EQ_INT(window_pins(s, last), 1u << STORE_ANOMALY_MEMORY_NEAR_LIMIT);
    /* Pinning to an anomaly that does not exist pins nothing. */
    uint64_t loose = put_pinned(s, "w", T0 - SEC, 1, STORE_TYPE_CPU, 64, 12345);
    REQUIRE(loose != 0);
    CHECK_EQ_INT(window_pins(s, loose), 0);
    /* Same kind, isolate and start twice: the second moves by a ns. */
    uint64_t d1 = new_anomaly(s, STORE_ANOMALY_OOM_SUSPECTED, "w", 1, T0, 0);
    struct store_anomaly dup = {.kind = STORE_ANOMALY_OOM_SUSPECTED,
                                .worker = "w",
                                .version = "v1",
                                .isolate = 1,
                                .start_ns = T0};
    REQUIRE(d1 != 0 && store_anomaly_put(s, &dup, 0) == 0);
    CHECK(dup.id == d1 + 1 && dup.start_ns == T0 + 1);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

TEST(readonly_reader)
{
    const char *path = tmp_dir();
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    uint64_t a = new_anomaly(s, STORE_ANOMALY_OOM_SUSPECTED, "w", 3, T0, 0);
    REQUIRE(a != 0);
    REQUIRE(put_pinned(s, "w", T0, 3, STORE_TYPE_HEAP, 100, a) != 0);
    struct store_options ro = {.readonly = 1};
    struct store *r = NULL;
    REQUIRE(store_open(path, &ro, &r, NULL) == 0);
    int rc;
    struct anoms *l = anoms(r, NULL, &rc);
    CHECK(rc == 0 && l->n == 1 && l->a[0].nwin == 1);
    struct store_anomaly x = {.kind = 1, .worker = "w", .version = "v"};
    CHECK_EQ_INT(store_anomaly_put(r, &x, 0), -EROFS);
    CHECK_EQ_INT(check_clean(r), 0);
    store_close(r);
    store_close(s);
}

/* memory_growth (kind 4, schema 9): recorded, pinning its windows (which
 * carry the kind), found by its name; names past the table are none. */
TEST(memory_growth_kind)
{
    CHECK_STR(store_anomaly_name(STORE_ANOMALY_MEMORY_GROWTH), "memory_growth");
    CHECK_EQ_INT(store_anomaly_parse("memory_growth"), STORE_ANOMALY_MEMORY_GROWTH);
    CHECK(store_anomaly_name(STORE_ANOMALY_MAX + 1) == NULL);
    struct store *s = open_rw(tmp_dir(), 0);
    REQUIRE(s != NULL);
    uint64_t a = new_anomaly(s, STORE_ANOMALY_MEMORY_GROWTH, "leak", 3, T0, 0);
    REQUIRE(a != 0);
    struct test_rec t;
    rec_make(&t, "leak", "v1", T0 + SEC, 3, STORE_TYPE_HEAP, 200, 77);
    t.r.pin = a;
    t.r.w.anomaly = STORE_ANOMALY_MEMORY_GROWTH;
    REQUIRE(store_put(s, &t.r, 1, NULL) == 0);
    uint64_t h = t.r.w.id;
    rec_free(&t);
    CHECK_EQ_INT(window_pins(s, h), 1u << STORE_ANOMALY_MEMORY_GROWTH);
    int rc;
    struct store_anomaly_filter f = {.kind = STORE_ANOMALY_MEMORY_GROWTH};
    struct anoms *l = anoms(s, &f, &rc);
    REQUIRE(rc == 0 && l->n == 1);
    CHECK(l->a[0].id == a && l->a[0].nwin == 1 && l->a[0].wins[0] == h);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

int main(void)
{
    RUN(create_update_query);
    RUN(pin_latest_of_isolate);
    RUN(pinned_evicted_last);
    RUN(bounds);
    RUN(memory_growth_kind);
    RUN(readonly_reader);
    TEST_EXIT();
}

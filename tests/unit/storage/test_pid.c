/*
 * test_pid.c - the process labels of windows (schema 6): the pid and the
 * container id put and read back (store_windows, store_outbox_peek, a
 * reader), NULL and "" as no container, the pid filter on every access
 * path, what store_put refuses, a window charged its container's bytes, a
 * schema 5 store (version 3 records beside older ones, written here by
 * hand as a schema 5 build left them) read as it is and upgraded in place
 * by a writer, store_check and store_verify clean on the mixed store, and
 * store_check on a damaged container.
 */
#include "common.h"

/* A container id as Docker writes one: 64 hex digits. */
#define CT64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

TEST(round_trip_and_filter)
{
    const char *path = tmp_store_path();
    struct store *s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    uint64_t a = put_labelled(s, "w", "v", T0, 1, STORE_TYPE_CPU, 4242, CT64, NULL, 0, NULL);
    uint64_t b =
        put_labelled(s, "w", "v", T0 + 1 * SEC, 2, STORE_TYPE_CPU, 4242, CT64, "pool-1", 0, NULL);
    uint64_t c =
        put_labelled(s, "w", "v", T0 + 2 * SEC, 3, STORE_TYPE_HEAP, 77, "web_1.x-y", NULL, 0, NULL);
    uint64_t d =
        put_labelled(s, "w", "v2", T0 + 3 * SEC, 1, STORE_TYPE_CPU, 4194304, "", NULL, 0, NULL);
    uint64_t e =
        put_labelled(s, "other", "v", T0 + 4 * SEC, 1, STORE_TYPE_CPU, 0, NULL, NULL, 0, NULL);
    uint64_t f =
        put_labelled(s, "w", "v", T0 + 5 * SEC, 4, STORE_TYPE_CPU, 4242, NULL, NULL, 0, NULL);
    REQUIRE(a && b && c && d && e && f);

    /* What was put comes back; NULL and "" were stored as no container,
     * pid 0 as unknown. */
    CHECK_STR(words_of(s, NULL, WORDS_PID_CT),
              want("%" PRIu64 ":4242:" CT64 " %" PRIu64 ":4242:" CT64 " %" PRIu64
                   ":77:web_1.x-y %" PRIu64 ":4194304: %" PRIu64 ":0: %" PRIu64 ":4242:",
                   a, b, c, d, e, f));
    CHECK_STR(peek_words(s, WORDS_PID_CT), want_buf); /* the outbox is in store order here */
    /* Never NULL on output, "" when none. */
    int rc;
    struct seen *l = list(s, NULL, &rc);
    REQUIRE(rc == 0 && l->n == 6);
    for (size_t i = 0; i < l->n; i++)
        CHECK(strcmp(l->w[i].container, "(null)") != 0);

    /* The filter on each access path: time index (no worker), key range
     * (worker; worker and version), one id, pinned windows; with others. */
    struct store_filter flt = {.pid = 4242};
    CHECK_STR(
        words_of(s, &flt, WORDS_PID_CT),
        want("%" PRIu64 ":4242:" CT64 " %" PRIu64 ":4242:" CT64 " %" PRIu64 ":4242:", a, b, f));
    flt.worker = "w";
    CHECK_STR(words_of(s, &flt, WORDS_PID_CT), want_buf);
    flt.version = "v";
    CHECK_STR(words_of(s, &flt, WORDS_PID_CT), want_buf);
    flt.since_ns = T0 + 1 * SEC;
    flt.until_ns = T0 + 5 * SEC;
    CHECK_STR(words_of(s, &flt, WORDS_PID_CT), want("%" PRIu64 ":4242:" CT64, b));
    flt = (struct store_filter){.pid = 4242, .thread = "main"};
    CHECK_STR(words_of(s, &flt, WORDS_PID_CT),
              want("%" PRIu64 ":4242:" CT64 " %" PRIu64 ":4242:", a, f));
    flt = (struct store_filter){.pid = 4194304, .worker = "w"};
    CHECK_STR(words_of(s, &flt, WORDS_PID_CT), want("%" PRIu64 ":4194304:", d));
    flt = (struct store_filter){.pid = 77, .type = STORE_TYPE_CPU};
    CHECK_EQ_INT(count_of(s, &flt), 0);
    flt.type = STORE_TYPE_HEAP;
    CHECK_EQ_INT(count_of(s, &flt), 1);
    flt = (struct store_filter){.id = c, .pid = 77};
    CHECK_EQ_INT(count_of(s, &flt), 1);
    flt.pid = 4242;
    CHECK_EQ_INT(count_of(s, &flt), 0);
    flt = (struct store_filter){.pid = 1}; /* nobody's */
    CHECK_EQ_INT(count_of(s, &flt), 0);
    flt = (struct store_filter){.pid = 0}; /* any, the unknown too */
    CHECK_EQ_INT(count_of(s, &flt), 6);

    /* A pinned window of one process, told from another's. */
    struct store_anomaly an = {.kind = STORE_ANOMALY_OOM_SUSPECTED,
                               .worker = "w",
                               .version = "v",
                               .isolate = 5,
                               .start_ns = T0 + 6 * SEC,
                               .end_ns = T0 + 6 * SEC};
    REQUIRE(store_anomaly_put(s, &an, 0) == 0);
    uint64_t g =
        put_labelled(s, "w", "v", T0 + 6 * SEC, 5, STORE_TYPE_CPU, 9, "c9", NULL, an.id, NULL);
    uint64_t h =
        put_labelled(s, "w", "v", T0 + 7 * SEC, 6, STORE_TYPE_CPU, 10, NULL, NULL, an.id, NULL);
    REQUIRE(g && h);
    flt = (struct store_filter){.pinned = STORE_PINNED_ANY, .pid = 9};
    CHECK_STR(words_of(s, &flt, WORDS_PID_CT), want("%" PRIu64 ":9:c9", g));
    flt.pid = 10;
    CHECK_STR(words_of(s, &flt, WORDS_PID_CT), want("%" PRIu64 ":10:", h));
    flt.pid = 0;
    CHECK_EQ_INT(count_of(s, &flt), 2);
    /* Pinned windows drain first. */
    CHECK_STR(peek_words(s, WORDS_PID_CT),
              want("%" PRIu64 ":9:c9 %" PRIu64 ":10: %" PRIu64 ":4242:" CT64 " %" PRIu64
                   ":4242:" CT64 " %" PRIu64 ":77:web_1.x-y %" PRIu64 ":4194304: %" PRIu64
                   ":0: %" PRIu64 ":4242:",
                   g, h, a, b, c, d, e, f));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* It is on disk: a reader sees the same. */
    s = open_ro(path);
    REQUIRE(s != NULL);
    flt = (struct store_filter){.pid = 77};
    CHECK_STR(words_of(s, &flt, WORDS_PID_CT), want("%" PRIu64 ":77:web_1.x-y", c));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/* What store_put refuses: a container over STORE_CONTAINER_MAX bytes or
 * with a byte outside [0-9A-Za-z_.-]; nothing of the batch is stored. */
TEST(container_refused)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    char longer[STORE_CONTAINER_MAX + 2];
    memset(longer, 'a', sizeof(longer));
    longer[STORE_CONTAINER_MAX + 1] = '\0'; /* 65 bytes */
    const char *const bad[] = {longer,   "abc/def",     "abc def", "/docker/abc", " ",
                               "tab\tx", "caf\xc3\xa9", "a:b",     "nl\n",        "x\x7f"};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(bad); i++) {
        int rc = 0;
        CHECK(put_labelled(s, "w", "v", T0, 1, STORE_TYPE_CPU, 1, bad[i], NULL, 0, &rc) == 0);
        CHECK_EQ_INT(rc, -EINVAL);
    }
    /* In a batch with a good one: all or nothing. */
    struct test_rec t[2];
    struct store_record r[2];
    for (int i = 0; i < 2; i++) {
        rec_make(&t[i], "w", "v", T0 + (uint64_t)i * SEC, 1, STORE_TYPE_CPU, 1000, 3);
        t[i].r.w.container = i ? "bad/one" : "good";
        r[i] = t[i].r;
    }
    CHECK_EQ_INT(store_put(s, r, 2, NULL), -EINVAL);
    for (int i = 0; i < 2; i++)
        rec_free(&t[i]);
    CHECK_EQ_INT(count_of(s, NULL), 0);

    /* The longest accepted, and every byte of the set. */
    longer[STORE_CONTAINER_MAX] = '\0';
    uint64_t id = put_labelled(s, "w", "v", T0, 1, STORE_TYPE_CPU, 1, longer, NULL, 0, NULL);
    REQUIRE(id != 0);
    uint64_t id2 =
        put_labelled(s, "w", "v", T0 + SEC, 1, STORE_TYPE_CPU, 1, "AZaz09_.-", NULL, 0, NULL);
    REQUIRE(id2 != 0);
    CHECK_STR(words_of(s, NULL, WORDS_PID_CT),
              want("%" PRIu64 ":1:%s %" PRIu64 ":1:AZaz09_.-", id, longer, id2));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/* A window is charged its container's bytes exactly (the pid is in the
 * fixed header), as stored and as read back. */
TEST(budget_container)
{
    struct store *s = open_outbox(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    struct test_rec t[3];
    struct store_record r[3]; /* one batch */
    const char *ct[3] = {NULL, "abc123", CT64};
    for (int i = 0; i < 3; i++) {
        rec_make(&t[i], "w", "v", T0 + (uint64_t)i * SEC, 1, STORE_TYPE_CPU, 3000, 17);
        t[i].r.w.container = ct[i];
        t[i].r.w.pid = (uint32_t)(i * 1000000);
        r[i] = t[i].r;
    }
    REQUIRE(store_put(s, r, 3, NULL) == 0);
    CHECK_EQ_INT(r[1].w.stored_size - r[0].w.stored_size, 6);
    CHECK_EQ_INT(r[2].w.stored_size - r[0].w.stored_size, STORE_CONTAINER_MAX);
    check_stored_sizes(s, r, 3);
    for (int i = 0; i < 3; i++)
        rec_free(&t[i]);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

TEST(schema5_store)
{
    const char *path = tmp_store_path();
    uint64_t ids[4], before;
    struct store_anomaly a;
    /* As a schema 5 build was given them: threads, no pid, no container
     * (the labels given here are dropped by make_old_schema's downgrade). */
    REQUIRE(make_old_store(path, 5, 555, "gone", "pool-1", ids, &a, &before) == 0);

    /* A reader takes schema 5 as it is: every window reads as of pid 0 and
     * no container, the sizes are those of the old records. */
    struct store *s = open_ro(path);
    REQUIRE(s != NULL);
    struct store_stat st = stat_checked(s);
    CHECK_EQ_INT(st.schema_version, 5);
    CHECK_EQ_INT(st.windows, 4);
    /* per window the fixed bytes of versions 4 and 5 and "gone"; "main" of
     * v1 and v2; v1's 40 bytes */
    CHECK_EQ_INT(st.stored_bytes,
                 before - 4 * (STORE_REC_FIXED - STORE_REC_FIXED_V2 + 4) - 2 * 4 - 40);
    CHECK_EQ_INT(rec_version(s, ids[0]), 1);
    CHECK_EQ_INT(rec_version(s, ids[1]), 2);
    CHECK_EQ_INT(rec_version(s, ids[2]), 3);
    CHECK_EQ_INT(rec_version(s, ids[3]), 3);
    CHECK_STR(words_of(s, NULL, WORDS_PID_CT),
              want("%" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64 ":0:", ids[0], ids[1],
                   ids[2], ids[3]));
    struct seen *l;
    int rc;
    l = list(s, NULL, &rc);
    REQUIRE(rc == 0 && l->n == 4);
    CHECK_STR(l->w[2].thread, "pool-1"); /* version 3 keeps its thread */
    CHECK_STR(l->w[0].thread, "main");
    struct store_filter flt = {.pid = 555};
    CHECK_EQ_INT(count_of(s, &flt), 0);
    CHECK_STR(peek_words(s, WORDS_PID_CT),
              want("%" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64 ":0:", ids[3], ids[0],
                   ids[1], ids[2])); /* evidence first */
    check_loads(s, ids, 4, 3000);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    CHECK_EQ_INT(verify_clean(path), 0);

    /* A writer upgrades it in place: schema 8, old records untouched (pid
     * 0, no container), new ones with their labels; the counter exact. */
    s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(stat_checked(s).schema_version, STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(STORE_SCHEMA_VERSION, 12);
    CHECK_EQ_INT(rec_version(s, ids[0]), 1);
    CHECK_EQ_INT(rec_version(s, ids[1]), 2);
    CHECK_EQ_INT(rec_version(s, ids[2]), 3);
    CHECK_EQ_INT(check_clean(s), 0);
    uint64_t n1 = put_labelled(s, "w", "v", T0 + 10 * SEC, 9, STORE_TYPE_CPU, 555, CT64, "pool-1",
                               a.id, NULL);
    uint64_t n2 =
        put_labelled(s, "w", "v", T0 + 11 * SEC, 9, STORE_TYPE_CPU, 0, NULL, NULL, 0, NULL);
    REQUIRE(n1 && n2);
    CHECK_EQ_INT(rec_version(s, n1), STORE_REC_VERSION);
    CHECK_EQ_INT(rec_version(s, n2), 5);
    CHECK_STR(words_of(s, NULL, WORDS_PID_CT),
              want("%" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64
                   ":555:" CT64 " %" PRIu64 ":0:",
                   ids[0], ids[1], ids[2], ids[3], n1, n2));
    flt = (struct store_filter){.pid = 555};
    CHECK_STR(words_of(s, &flt, WORDS_PID_CT), want("%" PRIu64 ":555:" CT64, n1));
    flt.worker = "w";
    CHECK_STR(words_of(s, &flt, WORDS_PID_CT), want_buf);
    flt = (struct store_filter){.pinned = STORE_PINNED_ANY, .pid = 555};
    CHECK_STR(words_of(s, &flt, WORDS_PID_CT), want("%" PRIu64 ":555:" CT64, n1));
    st = stat_checked(s);
    CHECK_EQ_INT(st.stored_bytes, listed_bytes(s) + st.dict_bytes);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* The mixed store (records of versions 1 to 3 and 5) passes the whole
     * check `isoprof store check` runs, and reads as schema 8 for readers
     * too. */
    CHECK_EQ_INT(verify_clean(path), 0);
    s = open_ro(path);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(stat_checked(s).schema_version, STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(count_of(s, NULL), 6);
    flt = (struct store_filter){.pid = 555};
    CHECK_STR(words_of(s, &flt, WORDS_PID_CT), want("%" PRIu64 ":555:" CT64, n1));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

enum ct_damage { CT_SLASH, CT_SPACE, CT_LEN_LONG, CT_LEN_PAST };

/* Damage d of the container of a window's record (a rec_edit). */
static void container_edit(uint8_t *rec, size_t *len, int d)
{
    size_t at = STORE_REC_FIXED + rec[3] + rec[STORE_REC_THREAD_OFF];
    switch ((enum ct_damage)d) {
    case CT_SLASH:
        rec[at + 1] = '/';
        break;
    case CT_SPACE:
        rec[at] = ' ';
        break;
    case CT_LEN_LONG:
        rec[STORE_REC_CONTAINER_OFF] = STORE_CONTAINER_MAX + 1;
        break;
    case CT_LEN_PAST: /* the record is cut inside the container */
        *len = at + 3;
        break;
    }
}

static uint64_t put_damage_ct(struct store *s, int i)
{
    return put_labelled(s, "w", "v", T0 + (uint64_t)i * SEC, (uint32_t)i, STORE_TYPE_CPU, 31337,
                        "abcdef0123", NULL, 0, NULL);
}

static void expect_container_damage(enum ct_damage d, const char *needle)
{
    struct store_filter f = {.pid = 31337};
    expect_record_damage(put_damage_ct, container_edit, (int)d, &f, needle);
}

TEST(check_finds_damaged_container)
{
    expect_container_damage(CT_SLASH, "container label not of [0-9A-Za-z_.-]");
    expect_container_damage(CT_SPACE, "container label not of [0-9A-Za-z_.-]");
    expect_container_damage(CT_LEN_LONG, "container label longer than the record");
    expect_container_damage(CT_LEN_PAST, "container label longer than the record");
}

int main(void)
{
    RUN(round_trip_and_filter);
    RUN(container_refused);
    RUN(budget_container);
    RUN(schema5_store);
    RUN(check_finds_damaged_container);
    TEST_EXIT();
}

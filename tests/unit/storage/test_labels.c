/*
 * test_labels.c - the source-map figures and the window labels (schema 7,
 * record header 5): put and read back (store_windows, store_outbox_peek, a
 * reader), the totals of store_stat, what store_put and store_labels_check
 * refuse, a window charged its label bytes, a schema 6 store (version 4
 * records beside older ones, as a schema 6 build left them) read as it is
 * and upgraded in place by a writer, and store_check on damaged label
 * bytes.
 */
#include "common.h"

static const struct store_label REPO[] = {
    {"service_repository", "https://github.com/acme/shop"},
    {"service_git_ref", "refs/heads/main"},
    {"service_root_path", "/srv/app"},
};

/* Put one window of isolate at start with labels l[0..n) and the frame
 * figures; its id, 0 on failure (*rc receives store_put's code if set). */
static uint64_t put_window(struct store *s, uint64_t start, uint32_t isolate,
                           const struct store_label *l, size_t n, uint32_t mapped,
                           uint32_t unmapped, int *rc)
{
    struct test_rec t;
    rec_make(&t, "w", "v", start, isolate, STORE_TYPE_CPU, 3000, 17);
    t.r.w.labels = l;
    t.r.w.nlabels = n;
    t.r.w.frames_mapped = mapped;
    t.r.w.frames_unmapped = unmapped;
    int r = store_put(s, &t.r, 1, NULL);
    if (rc)
        *rc = r;
    uint64_t id = r == 0 ? t.r.w.id : 0;
    rec_free(&t);
    return id;
}

/* Append window w as "id:mapped/unmapped:name=value,..." ("-" for no
 * labels) to the string out of WORDS_MAX bytes. */
static void labels_word(char *out, const struct store_window *w)
{
    size_t n = strlen(out);
    n += (size_t)snprintf(out + n, WORDS_MAX - n, "%s%" PRIu64 ":%" PRIu32 "/%" PRIu32 ":",
                          n ? " " : "", w->id, w->frames_mapped, w->frames_unmapped);
    if (w->nlabels == 0)
        snprintf(out + n, WORDS_MAX - n, "%s", w->labels == NULL ? "-" : "(not NULL)");
    for (size_t i = 0; i < w->nlabels && n < WORDS_MAX; i++)
        n += (size_t)snprintf(out + n, WORDS_MAX - n, "%s%s=%s", i ? "," : "", w->labels[i].name,
                              w->labels[i].value);
}

static int labels_on_window(const struct store_window *w, void *arg)
{
    labels_word(arg, w);
    return 0;
}

static int labels_on_peek(const struct store_window *w, uint64_t queued, void *arg)
{
    (void)queued;
    labels_word(arg, w);
    return 0;
}

/* The listing of f as labels words. */
static const char *labels_of(struct store *s, const struct store_filter *f)
{
    static char out[WORDS_MAX];
    out[0] = '\0';
    int rc = store_windows(s, f, labels_on_window, out);
    if (rc != 0)
        snprintf(out, sizeof(out), "error %d", rc);
    return out;
}

/* What store_outbox_peek hands out as labels words. */
static const char *labels_peeked(struct store *s)
{
    static char out[WORDS_MAX];
    out[0] = '\0';
    int rc = store_outbox_peek(s, 100, labels_on_peek, out);
    if (rc != 0)
        snprintf(out, sizeof(out), "error %d", rc);
    return out;
}

#define REPO_WORD                                                                                  \
    "service_repository=https://github.com/acme/shop,service_git_ref=refs/heads/main,"             \
    "service_root_path=/srv/app"

TEST(round_trip)
{
    const char *path = tmp_store_path();
    struct store *s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    struct store_label full[STORE_WINDOW_LABELS_MAX];
    char names[STORE_WINDOW_LABELS_MAX][8], values[STORE_WINDOW_LABELS_MAX][8];
    char full_word[1024] = "";
    for (int i = 0; i < STORE_WINDOW_LABELS_MAX; i++) {
        snprintf(names[i], sizeof(names[i]), "k%02d", i);
        snprintf(values[i], sizeof(values[i]), "v%d", 100 - i);
        full[i] = (struct store_label){names[i], values[i]};
        size_t n = strlen(full_word);
        snprintf(full_word + n, sizeof(full_word) - n, "%s%s=%s", i ? "," : "", names[i],
                 values[i]);
    }
    static const struct store_label utf8[] = {{"team", "caf\xc3\xa9 \xe2\x82\xac"}};
    uint64_t a = put_window(s, T0, 1, REPO, 3, 120, 7, NULL);
    uint64_t b = put_window(s, T0 + 1 * SEC, 2, NULL, 0, 0, 0, NULL);
    uint64_t c = put_window(s, T0 + 2 * SEC, 3, full, STORE_WINDOW_LABELS_MAX, 0, 33, NULL);
    uint64_t d = put_window(s, T0 + 3 * SEC, 4, utf8, 1, UINT32_MAX, 1, NULL);
    REQUIRE(a && b && c && d);
    /* As given, in the given order; no labels: NULL and 0. */
    CHECK_STR(labels_of(s, NULL),
              want("%" PRIu64 ":120/7:" REPO_WORD " %" PRIu64 ":0/0:- %" PRIu64 ":0/33:%s %" PRIu64
                   ":4294967295/1:team=caf\xc3\xa9 \xe2\x82\xac",
                   a, b, c, full_word, d));
    CHECK_STR(labels_peeked(s), want_buf);
    struct store_filter f = {.worker = "w", .version = "v"};
    CHECK_STR(labels_of(s, &f), want_buf);
    f = (struct store_filter){.id = c};
    CHECK_STR(labels_of(s, &f), want("%" PRIu64 ":0/33:%s", c, full_word));
    /* The totals: figures summed, windows with a mapped frame counted. */
    struct store_stat st = stat_checked(s);
    CHECK_EQ_INT(st.frames_mapped, 120ull + UINT32_MAX);
    CHECK_EQ_INT(st.frames_unmapped, 7 + 33 + 1);
    CHECK_EQ_INT(st.windows_mapped, 2);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* On disk: a reader sees the same. */
    s = open_ro(path);
    REQUIRE(s != NULL);
    f = (struct store_filter){.id = a};
    CHECK_STR(labels_of(s, &f), want("%" PRIu64 ":120/7:" REPO_WORD, a));
    CHECK_EQ_INT(stat_checked(s).windows_mapped, 2);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    CHECK_EQ_INT(verify_clean(path), 0);
}

/* What store_put (and store_labels_check, which says which label) refuse;
 * nothing of the batch is stored. */
TEST(refused)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    char name65[STORE_WINDOW_LABEL_NAME_MAX + 2], value2049[STORE_WINDOW_LABEL_VALUE_MAX + 2];
    memset(name65, 'n', sizeof(name65) - 1);
    name65[sizeof(name65) - 1] = '\0';
    memset(value2049, 'v', sizeof(value2049) - 1);
    value2049[sizeof(value2049) - 1] = '\0';
    static const char *const bad_names[] = {
        "",         "9lives",    "has-dash", "has space",    "caf\xc3\xa9", "a.b",
        "__name__", "__delta__", "__x",      "service_name", "version",     "host",
        "isolate",  "runtime",   "thread",   "anomaly",      "x\n",
    };
    struct store_label l[2] = {{"ok", "fine"}, {NULL, "v"}};
    size_t bad = 99;
    for (size_t i = 0; i <= ISOPROF_ARRAY_SIZE(bad_names); i++) {
        l[1].name = i < ISOPROF_ARRAY_SIZE(bad_names) ? bad_names[i] : name65;
        int rc = 0;
        CHECK(put_window(s, T0, 1, l, 2, 0, 0, &rc) == 0);
        CHECK_EQ_INT(rc, -EINVAL);
        CHECK_EQ_INT(store_labels_check(l, 2, &bad), -EINVAL);
        if (bad != 1)
            fprintf(stderr, "name '%s': bad %zu\n", l[1].name, bad);
        CHECK_EQ_INT(bad, 1);
    }
    static const char *const bad_values[] = {"", "\xff", "caf\xc3", "\xc0\xaf", "\xed\xa0\x80"};
    l[1].name = "x";
    for (size_t i = 0; i <= ISOPROF_ARRAY_SIZE(bad_values); i++) {
        l[1].value = i < ISOPROF_ARRAY_SIZE(bad_values) ? bad_values[i] : value2049;
        int rc = 0;
        CHECK(put_window(s, T0, 1, l, 2, 0, 0, &rc) == 0);
        CHECK_EQ_INT(rc, -EINVAL);
        CHECK_EQ_INT(store_labels_check(l, 2, &bad), -EINVAL);
        CHECK_EQ_INT(bad, 1);
    }
    /* NULL name or value; a name twice; labels NULL with a count. */
    l[1] = (struct store_label){"x", NULL};
    CHECK_EQ_INT(store_labels_check(l, 2, &bad), -EINVAL);
    CHECK_EQ_INT(bad, 1);
    l[1] = (struct store_label){"ok", "again"};
    CHECK_EQ_INT(store_labels_check(l, 2, &bad), -EINVAL);
    CHECK_EQ_INT(bad, 1);
    CHECK_EQ_INT(store_labels_check(NULL, 1, &bad), -EINVAL);
    CHECK_EQ_INT(store_labels_check(NULL, 0, &bad), 0);
    int rc = 0;
    CHECK(put_window(s, T0, 1, NULL, 1, 0, 0, &rc) == 0);
    CHECK_EQ_INT(rc, -EINVAL);
    /* 17 labels; 4097 bytes together (each label fine): bad is n. */
    struct store_label many[STORE_WINDOW_LABELS_MAX + 1];
    char names[STORE_WINDOW_LABELS_MAX + 1][8];
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(many); i++) {
        snprintf(names[i], sizeof(names[i]), "l%zu", i);
        many[i] = (struct store_label){names[i], "v"};
    }
    CHECK_EQ_INT(store_labels_check(many, STORE_WINDOW_LABELS_MAX + 1, &bad), -EINVAL);
    CHECK_EQ_INT(bad, STORE_WINDOW_LABELS_MAX + 1);
    CHECK(put_window(s, T0, 1, many, STORE_WINDOW_LABELS_MAX + 1, 0, 0, &rc) == 0);
    CHECK_EQ_INT(rc, -EINVAL);
    value2049[STORE_WINDOW_LABEL_VALUE_MAX] = '\0'; /* 2048: the longest */
    char v2[STORE_WINDOW_LABEL_VALUE_MAX];
    memset(v2, 'w', sizeof(v2));
    v2[4096 - 2051 - 3] = '\0'; /* 2051 + "bb" \0 + 2042 + \0: 4097 bytes in all */
    struct store_label two[2] = {{"a", value2049}, {"bb", v2}};
    CHECK_EQ_INT(store_labels_check(two, 2, &bad), -EINVAL);
    CHECK_EQ_INT(bad, 2);
    CHECK(put_window(s, T0, 1, two, 2, 0, 0, &rc) == 0);
    CHECK_EQ_INT(rc, -EINVAL);
    /* In a batch with a good one: all or nothing. */
    struct test_rec t[2];
    struct store_record r[2];
    for (int i = 0; i < 2; i++) {
        rec_make(&t[i], "w", "v", T0 + (uint64_t)i * SEC, 1, STORE_TYPE_CPU, 1000, 3);
        t[i].r.w.labels = i ? two : REPO;
        t[i].r.w.nlabels = i ? 2 : 3;
        r[i] = t[i].r;
    }
    CHECK_EQ_INT(store_put(s, r, 2, NULL), -EINVAL);
    for (int i = 0; i < 2; i++)
        rec_free(&t[i]);
    CHECK_EQ_INT(count_of(s, NULL), 0);

    /* The bounds themselves are accepted: 16 labels, a 64-byte name, a
     * 2048-byte value, 4096 bytes in all; names of every allowed kind. */
    CHECK(put_window(s, T0, 1, many, STORE_WINDOW_LABELS_MAX, 0, 0, NULL) != 0);
    name65[STORE_WINDOW_LABEL_NAME_MAX] = '\0';
    struct store_label edge[] = {{name65, "x"}, {"_", "y"}, {"A_z9", "z"}, {"_x_", "\x7f"}};
    CHECK_EQ_INT(store_labels_check(edge, 4, NULL), 0);
    CHECK(put_window(s, T0 + 1 * SEC, 1, edge, 4, 0, 0, NULL) != 0);
    v2[4096 - 2051 - 4] = '\0'; /* 4096 */
    CHECK_EQ_INT(store_labels_check(two, 2, NULL), 0);
    CHECK(put_window(s, T0 + 2 * SEC, 1, two, 2, 0, 0, NULL) != 0);
    CHECK_EQ_INT(count_of(s, NULL), 3);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/* A window is charged its label bytes exactly (the figures are in the
 * fixed header), as stored and as read back. */
TEST(budget_labels)
{
    struct store *s = open_outbox(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    struct test_rec t[3];
    struct store_record r[3]; /* one batch */
    for (int i = 0; i < 3; i++) {
        rec_make(&t[i], "w", "v", T0 + (uint64_t)i * SEC, 1, STORE_TYPE_CPU, 3000, 17);
        t[i].r.w.labels = REPO;
        t[i].r.w.nlabels = (size_t)i + (i == 2); /* 0, 1, 3 */
        t[i].r.w.frames_mapped = (uint32_t)i * 1000;
        r[i] = t[i].r;
    }
    REQUIRE(store_put(s, r, 3, NULL) == 0);
    size_t one = strlen(REPO[0].name) + strlen(REPO[0].value) + 2;
    size_t all = one + strlen(REPO[1].name) + strlen(REPO[1].value) + 2 + strlen(REPO[2].name) +
                 strlen(REPO[2].value) + 2;
    CHECK_EQ_INT(r[1].w.stored_size - r[0].w.stored_size, one);
    CHECK_EQ_INT(r[2].w.stored_size - r[0].w.stored_size, all);
    check_stored_sizes(s, r, 3);
    for (int i = 0; i < 3; i++)
        rec_free(&t[i]);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

TEST(schema6_store)
{
    const char *path = tmp_store_path();
    uint64_t ids[4], before;
    struct store_anomaly a;
    /* As a schema 6 build was given them: pid and container, no figures,
     * no labels (windows 0 and 1 in versions 1 and 2, as stored before
     * schemas 2 and 5). */
    REQUIRE(make_old_store(path, 6, 555, "c6", "pool-1", ids, &a, &before) == 0);

    /* A reader takes schema 6 as it is: no figures, no labels, the pid
     * and container of the version 4 records as they were. */
    struct store *s = open_ro(path);
    REQUIRE(s != NULL);
    struct store_stat st = stat_checked(s);
    CHECK_EQ_INT(st.schema_version, 6);
    CHECK_EQ_INT(st.windows, 4);
    /* 12 fixed bytes a window; v1 and v2 lost pid, container and "main"
     * too, v1 its 40 fixed bytes */
    CHECK_EQ_INT(st.stored_bytes, before - 4 * (STORE_REC_FIXED - STORE_REC_FIXED_V4) -
                                      2 * (STORE_REC_FIXED_V4 - STORE_REC_FIXED_V2 + 2 + 4) -
                                      (STORE_REC_FIXED_V2 - STORE_REC_FIXED_V1));
    CHECK_EQ_INT(st.frames_mapped + st.frames_unmapped + st.windows_mapped, 0);
    CHECK_EQ_INT(rec_version(s, ids[0]), 1);
    CHECK_EQ_INT(rec_version(s, ids[1]), 2);
    CHECK_EQ_INT(rec_version(s, ids[2]), 4);
    CHECK_EQ_INT(rec_version(s, ids[3]), 4);
    CHECK_STR(labels_of(s, NULL),
              want("%" PRIu64 ":0/0:- %" PRIu64 ":0/0:- %" PRIu64 ":0/0:- %" PRIu64 ":0/0:-",
                   ids[0], ids[1], ids[2], ids[3]));
    CHECK_STR(words_of(s, NULL, WORDS_PID_CT),
              want("%" PRIu64 ":0: %" PRIu64 ":0: %" PRIu64 ":555:c6 %" PRIu64 ":555:c6", ids[0],
                   ids[1], ids[2], ids[3]));
    CHECK_STR(labels_peeked(s),
              want("%" PRIu64 ":0/0:- %" PRIu64 ":0/0:- %" PRIu64 ":0/0:- %" PRIu64 ":0/0:-",
                   ids[3], ids[0], ids[1], ids[2])); /* evidence first */
    check_loads(s, ids, 4, 3000);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    CHECK_EQ_INT(verify_clean(path), 0);

    /* A writer upgrades it in place: schema 8, old records untouched, new
     * ones with their figures and labels; the counter exact. */
    s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(stat_checked(s).schema_version, STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(rec_version(s, ids[2]), 4);
    CHECK_EQ_INT(check_clean(s), 0);
    uint64_t n1 = put_window(s, T0 + 10 * SEC, 9, REPO, 3, 5, 6, NULL);
    REQUIRE(n1 != 0);
    CHECK_EQ_INT(rec_version(s, n1), STORE_REC_VERSION);
    CHECK_EQ_INT(STORE_REC_VERSION, 5);
    CHECK_STR(labels_of(s, NULL), want("%" PRIu64 ":0/0:- %" PRIu64 ":0/0:- %" PRIu64
                                       ":0/0:- %" PRIu64 ":0/0:- %" PRIu64 ":5/6:" REPO_WORD,
                                       ids[0], ids[1], ids[2], ids[3], n1));
    st = stat_checked(s);
    CHECK_EQ_INT(st.stored_bytes, listed_bytes(s) + st.dict_bytes);
    CHECK(st.frames_mapped == 5 && st.frames_unmapped == 6 && st.windows_mapped == 1);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* The mixed store (records of versions 1, 2, 4 and 5) passes the
     * whole check, and reads as schema 8 for readers too. */
    CHECK_EQ_INT(verify_clean(path), 0);
    s = open_ro(path);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(stat_checked(s).schema_version, STORE_SCHEMA_VERSION);
    struct store_filter f = {.id = n1};
    CHECK_STR(labels_of(s, &f), want("%" PRIu64 ":5/6:" REPO_WORD, n1));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

enum label_damage { LB_LEN_OVER, LB_LEN_PAST, LB_NO_NUL, LB_NAME, LB_TWICE, LB_VALUE };

/* Damage d of the labels of a window's record (a rec_edit); the record
 * carries REPO. */
static void labels_edit(uint8_t *rec, size_t *len, int d)
{
    size_t at = STORE_REC_FIXED + rec[3] + rec[STORE_REC_THREAD_OFF] + rec[STORE_REC_CONTAINER_OFF];
    size_t ll = rec_labels_len(rec), set = ll;
    switch ((enum label_damage)d) {
    case LB_LEN_OVER:
        set = STORE_WINDOW_LABELS_BYTES + 1;
        break;
    case LB_LEN_PAST: /* the record is cut inside the labels */
        *len = at + ll / 2;
        break;
    case LB_NO_NUL: /* the last value's NUL */
        rec[at + ll - 1] = '/';
        break;
    case LB_NAME:
        rec[at] = '7';
        break;
    case LB_TWICE: /* service_root_path -> service_git_ref, NUL, a value */
        memcpy(rec + at + ll - 27, "service_git_ref\0x", 17);
        break;
    case LB_VALUE: /* the first value's first byte */
        rec[at + strlen(REPO[0].name) + 1] = 0xfe;
        break;
    }
    rec[STORE_REC_LABELS_OFF] = (uint8_t)(set >> 8);
    rec[STORE_REC_LABELS_OFF + 1] = (uint8_t)set;
}

static uint64_t put_damage_labels(struct store *s, int i)
{
    return put_window(s, T0 + (uint64_t)i * SEC, (uint32_t)i, REPO, 3, 1, 2, NULL);
}

static void expect_labels_damage(enum label_damage d, const char *needle)
{
    expect_record_damage(put_damage_labels, labels_edit, (int)d, NULL, needle);
}

TEST(check_finds_damaged_labels)
{
    /* labels_edit's LB_TWICE overwrites the last label, 27 bytes */
    CHECK_EQ_INT(strlen(REPO[2].name) + 1 + strlen(REPO[2].value) + 1, 27);
    expect_labels_damage(LB_LEN_OVER, "window labels over 4096 bytes");
    expect_labels_damage(LB_LEN_PAST, "window labels longer than the record");
    expect_labels_damage(LB_NO_NUL, "window label without its name's or value's NUL");
    expect_labels_damage(LB_NAME, "window label name not [A-Za-z_][A-Za-z0-9_]*");
    expect_labels_damage(LB_TWICE, "window label name twice");
    expect_labels_damage(LB_VALUE, "window label value empty, over 2048 bytes or not UTF-8");
}

int main(void)
{
    RUN(round_trip);
    RUN(refused);
    RUN(budget_labels);
    RUN(schema6_store);
    RUN(check_finds_damaged_labels);
    TEST_EXIT();
}

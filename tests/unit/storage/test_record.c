/*
 * test_record.c - the byte formats: key order equals tuple order, the
 * record decoder rejects every truncation and damage, window ids.
 */
#include "common.h"

struct tuple {
    const char *worker, *version;
    uint64_t start;
    uint32_t isolate;
    uint8_t type;
    uint8_t key[STORE_KEY_MAX];
    size_t klen;
};

static int bytes_cmp(const char *a, const char *b)
{
    return strcmp(a, b); /* strcmp compares as unsigned char */
}

static int tuple_cmp(const void *pa, const void *pb)
{
    const struct tuple *a = pa, *b = pb;
    int c;
    if ((c = bytes_cmp(a->worker, b->worker)) != 0)
        return c;
    if ((c = bytes_cmp(a->version, b->version)) != 0)
        return c;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    if (a->isolate != b->isolate)
        return a->isolate < b->isolate ? -1 : 1;
    return (int)a->type - (int)b->type;
}

/* LMDB's default key order: memcmp, then the shorter first. */
static int key_cmp(const void *pa, const void *pb)
{
    const struct tuple *a = pa, *b = pb;
    size_t n = a->klen < b->klen ? a->klen : b->klen;
    int c = memcmp(a->key, b->key, n);
    if (c != 0)
        return c;
    return a->klen < b->klen ? -1 : a->klen > b->klen;
}

TEST(key_order)
{
    static const char *workers[] = {"", "a", "a\x01", "ab", "b", "checkout", "\xff"};
    static const char *versions[] = {"", "1", "10", "2", "v\x7f", "v42"};
    static const uint64_t starts[] = {0, 1, 255, 256, 1ull << 32, 1ull << 63, UINT64_MAX};
    static const uint32_t isolates[] = {0, 1, 256, UINT32_MAX};
    size_t n = ISOPROF_ARRAY_SIZE(workers) * ISOPROF_ARRAY_SIZE(versions) *
               ISOPROF_ARRAY_SIZE(starts) * ISOPROF_ARRAY_SIZE(isolates) * 2;
    struct tuple *a = isoprof_calloc(n, sizeof(*a)), *b = isoprof_calloc(n, sizeof(*b));
    REQUIRE(a && b);
    size_t i = 0;
    for (size_t w = 0; w < ISOPROF_ARRAY_SIZE(workers); w++)
        for (size_t v = 0; v < ISOPROF_ARRAY_SIZE(versions); v++)
            for (size_t s = 0; s < ISOPROF_ARRAY_SIZE(starts); s++)
                for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(isolates); k++)
                    for (uint8_t t = 1; t <= 2; t++, i++) {
                        a[i].worker = workers[w];
                        a[i].version = versions[v];
                        a[i].start = starts[s];
                        a[i].isolate = isolates[k];
                        a[i].type = t;
                        a[i].klen = store_key_encode(a[i].key, sizeof(a[i].key), workers[w],
                                                     versions[v], starts[s], isolates[k], t);
                        CHECK(a[i].klen > 0);
                        struct store_key d;
                        CHECK_EQ_INT(store_key_decode(a[i].key, a[i].klen, &d), 0);
                        CHECK(d.start_ns == starts[s] && d.isolate == isolates[k] && d.type == t);
                        CHECK_STR(d.worker, workers[w]);
                        CHECK_STR(d.version, versions[v]);
                    }
    /* Shuffle deterministically, then sort one copy each way. */
    uint64_t x = 12345;
    for (size_t j = n - 1; j > 0; j--) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t r = (size_t)(x >> 33) % (j + 1);
        struct tuple tmp = a[j];
        a[j] = a[r];
        a[r] = tmp;
    }
    memcpy(b, a, n * sizeof(*a));
    qsort(a, n, sizeof(*a), tuple_cmp);
    qsort(b, n, sizeof(*b), key_cmp);
    size_t bad = 0;
    for (size_t j = 0; j < n; j++)
        bad += tuple_cmp(&a[j], &b[j]) != 0;
    CHECK_EQ_INT(bad, 0);
    isoprof_free(a);
    isoprof_free(b);
}

TEST(key_limits)
{
    uint8_t k[STORE_KEY_MAX + 64];
    char w[300], v[300];
    memset(w, 'w', sizeof(w));
    memset(v, 'v', sizeof(v));
    w[244] = v[244] = '\0'; /* 244 + 244 = 488: the largest accepted */
    CHECK(store_key_encode(k, sizeof(k), w, v, 1, 2, 1) == STORE_KEY_MAX);
    w[244] = 'w';
    w[245] = '\0';
    CHECK(store_key_encode(k, sizeof(k), w, v, 1, 2, 1) == 0);
    /* Decoder: every truncation of a valid key fails. */
    size_t len = store_key_encode(k, sizeof(k), "checkout", "v42", 7, 8, 2);
    struct store_key d;
    for (size_t n = 0; n < len; n++)
        CHECK_EQ_INT(store_key_decode(k, n, &d), ISOPROF_ECORRUPT);
    CHECK_EQ_INT(store_key_decode(k, len, &d), 0);
    k[len - 1] = 5; /* bad type */
    CHECK_EQ_INT(store_key_decode(k, len, &d), ISOPROF_ECORRUPT);
    k[len - 1] = 0;
    CHECK_EQ_INT(store_key_decode(k, len, &d), ISOPROF_ECORRUPT);
    k[len - 1] = STORE_TYPE_SNAPSHOT; /* types 3 and 4 since schema 8 */
    CHECK_EQ_INT(store_key_decode(k, len, &d), 0);
    CHECK_EQ_INT(d.type, STORE_TYPE_SNAPSHOT);
    k[len - 1] = 2;
    k[8] = 'x'; /* worker's NUL gone: only one separator */
    CHECK_EQ_INT(store_key_decode(k, len, &d), ISOPROF_ECORRUPT);
    CHECK_EQ_INT(store_key_decode(NULL, 0, &d), ISOPROF_ECORRUPT);
}

TEST(record_codec)
{
    ZSTD_CCtx *c = store_zstd_cctx_new();
    REQUIRE(c != NULL);
    struct test_rec t;
    rec_make(&t, "w", "v", T0, 1, STORE_TYPE_CPU, 5000, 7);
    t.r.w.runtime = "workerd";
    t.r.w.flags = STORE_FLAG_ON_DEMAND;
    t.r.w.anomaly = STORE_ANOMALY_OOM_SUSPECTED;
    t.r.w.mem = (struct store_mem){.min = 1, .max = 1ull << 40, .last = 3, .p999 = 4};
    uint8_t *val = NULL;
    size_t vlen = 0;
    REQUIRE(store_record_build(c, &t.r, 0, &val, &vlen) == 0);
    store_be64_put(val + STORE_REC_SEQ_OFF, 77);
    struct store_rec_hdr h;
    REQUIRE(store_record_decode(val, vlen, &h) == 0);
    CHECK(h.seq == 77 && h.raw_size == 5000 && h.end_ns == T0 + 10 * SEC);
    CHECK(h.flags == STORE_FLAG_ON_DEMAND && h.interval == 10000000 && h.samples == 1007);
    CHECK_STR(h.runtime, "workerd");
    CHECK_STR(h.thread, "main"); /* no thread given: the main thread's */
    CHECK(h.version == STORE_REC_VERSION && val[STORE_REC_THREAD_OFF] == 4);
    CHECK(memcmp(val + STORE_REC_FIXED + 7, "main", 4) == 0);
    CHECK(h.pid == 0 && val[STORE_REC_CONTAINER_OFF] == 0); /* none given */
    CHECK_STR(h.container, "");
    CHECK(h.anomaly == STORE_ANOMALY_OOM_SUSPECTED && h.mem.min == 1 && h.mem.max == 1ull << 40 &&
          h.mem.last == 3 && h.mem.p999 == 4);
    void *raw = NULL;
    REQUIRE(store_record_inflate(&h, &raw) == 0);
    CHECK(memcmp(raw, t.payload, 5000) == 0);
    isoprof_free(raw);

    /* Every truncation is ECORRUPT, by the header decoder or by inflate. */
    for (size_t n = 0; n < vlen; n++) {
        int rc = store_record_decode(val, n, &h);
        if (rc == 0) {
            raw = NULL;
            rc = store_record_inflate(&h, &raw);
            isoprof_free(raw);
        }
        if (rc != ISOPROF_ECORRUPT) {
            fprintf(stderr, "truncated at %zu: %d\n", n, rc);
            CHECK(0);
            break;
        }
    }
    /* Every single-byte change is either rejected or (header fields that
     * carry no invariant) decodes; a changed payload never inflates. */
    size_t hl = STORE_REC_FIXED + 7 + 4; /* runtime "workerd", thread "main" */
    for (size_t i = 0; i < vlen; i++) {
        val[i] ^= 0x5a;
        int rc = store_record_decode(val, vlen, &h);
        if (rc == 0) {
            raw = NULL;
            rc = store_record_inflate(&h, &raw);
            isoprof_free(raw);
        }
        if (i < 4 || (i >= 32 && i < 40) || i >= hl)
            CHECK_EQ_INT(rc, ISOPROF_ECORRUPT);
        val[i] ^= 0x5a;
    }
    /* The same record in the version 1 layout (no anomaly, no memory
     * figures, no thread), in version 2 (no thread), in version 3 (no pid,
     * no container) and in version 4 (no frame figures, no labels) still
     * decodes and inflates; all read as the main thread's, of pid 0, no
     * container, no frames mapped or unmapped and no labels. */
    for (int ver = 1; ver <= 4; ver++) {
        size_t olen = 0;
        uint8_t *old = rec_downgrade(val, vlen, ver, &olen);
        REQUIRE(old != NULL);
        size_t ofixed = ver == 1  ? STORE_REC_FIXED_V1
                        : ver < 4 ? STORE_REC_FIXED_V2
                                  : STORE_REC_FIXED_V4;
        CHECK_EQ_INT(olen, vlen - (STORE_REC_FIXED - ofixed) - (ver < 3 ? 4 : 0));
        REQUIRE(store_record_decode(old, olen, &h) == 0);
        CHECK_EQ_INT(h.version, ver);
        CHECK_STR(h.runtime, "workerd");
        CHECK_STR(h.thread, "main");
        CHECK(h.pid == 0);
        CHECK_STR(h.container, "");
        CHECK(h.frames_mapped == 0 && h.frames_unmapped == 0 && h.nlabels == 0);
        CHECK(h.raw_size == 5000 && h.seq == 77);
        if (ver == 1)
            CHECK(h.anomaly == 0 && h.mem.max == 0);
        else
            CHECK(h.anomaly == STORE_ANOMALY_OOM_SUSPECTED && h.mem.max == 1ull << 40);
        raw = NULL;
        REQUIRE(store_record_inflate(&h, &raw) == 0);
        CHECK(memcmp(raw, t.payload, 5000) == 0);
        isoprof_free(raw);
        /* A version 2 record's byte 49 is reserved: it names no thread;
         * byte 50 of versions 2 and 3 names no container. */
        if (ver == 2) {
            old[STORE_REC_THREAD_OFF] = 9;
            CHECK_EQ_INT(store_record_decode(old, olen, &h), 0);
            CHECK_STR(h.thread, "main");
        }
        if (ver == 2 || ver == 3) {
            old[STORE_REC_CONTAINER_OFF] = 9;
            CHECK_EQ_INT(store_record_decode(old, olen, &h), 0);
            CHECK_STR(h.container, "");
        }
        /* A version past this build's is not read. */
        old[1] = STORE_REC_VERSION + 1;
        CHECK_EQ_INT(store_record_decode(old, olen, &h), ISOPROF_ECORRUPT);
        isoprof_free(old);
    }
    /* An anomaly kind out of range is damage. */
    val[48] = STORE_ANOMALY_MAX + 1;
    CHECK_EQ_INT(store_record_decode(val, vlen, &h), ISOPROF_ECORRUPT);
    val[48] = STORE_ANOMALY_OOM_SUSPECTED;
    /* Garbage. */
    uint8_t junk[256];
    for (int round = 0; round < 2000; round++) {
        fill_payload(junk, sizeof(junk), (uint64_t)round);
        junk[0] = STORE_REC_MAGIC;
        junk[1] = STORE_REC_VERSION;
        junk[2] = STORE_CODEC_ZSTD;
        junk[3] = (uint8_t)(round % 40);
        size_t n = (size_t)round % sizeof(junk);
        if (store_record_decode(junk, n, &h) == 0) {
            raw = NULL;
            if (store_record_inflate(&h, &raw) == 0)
                CHECK(h.raw_size <= STORE_RAW_MAX);
            isoprof_free(raw);
        }
    }
    isoprof_free(val);
    rec_free(&t);
    ZSTD_freeCCtx(c);
}

/* The thread label: stored after the runtime, bounded, printable ASCII,
 * never empty; a damaged one is refused by the decoder with a reason. */
TEST(record_thread)
{
    ZSTD_CCtx *c = store_zstd_cctx_new();
    REQUIRE(c != NULL);
    struct test_rec t;
    rec_make(&t, "w", "v", T0, 1, STORE_TYPE_CPU, 3000, 9);
    char longest[STORE_THREAD_MAX + 1];
    for (int i = 0; i < STORE_THREAD_MAX; i++)
        longest[i] = (char)(0x20 + i % 95); /* every printable byte, space to '~' */
    longest[STORE_THREAD_MAX] = '\0';
    static const char *const threads[] = {"main", "worker-1", "image resizer #2", "x", NULL};
    size_t main_len = 0;
    for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(threads); k++) {
        const char *th = threads[k] ? threads[k] : longest;
        t.r.w.thread = th;
        uint8_t *val = NULL;
        size_t vlen = 0;
        REQUIRE(store_record_build(c, &t.r, 0, &val, &vlen) == 0);
        store_be64_put(val + STORE_REC_SEQ_OFF, 5);
        struct store_rec_hdr h;
        REQUIRE(store_record_decode(val, vlen, &h) == 0);
        CHECK_STR(h.thread, th);
        CHECK_STR(h.runtime, "node-20.11.0");
        CHECK(store_record_fault(val, vlen) == NULL);
        /* The record grows by the thread's bytes, nothing else. */
        if (k == 0)
            main_len = vlen;
        CHECK_EQ_INT(vlen, main_len + strlen(th) - 4);
        void *raw = NULL;
        REQUIRE(store_record_inflate(&h, &raw) == 0);
        CHECK(memcmp(raw, t.payload, 3000) == 0);
        isoprof_free(raw);
        isoprof_free(val);
    }
    /* NULL and "" are the main thread. */
    for (int k = 0; k < 2; k++) {
        t.r.w.thread = k ? "" : NULL;
        uint8_t *val = NULL;
        size_t vlen = 0;
        REQUIRE(store_record_build(c, &t.r, 0, &val, &vlen) == 0);
        store_be64_put(val + STORE_REC_SEQ_OFF, 5);
        struct store_rec_hdr h;
        REQUIRE(store_record_decode(val, vlen, &h) == 0);
        CHECK_STR(h.thread, "main");
        CHECK_EQ_INT(vlen, main_len);
        isoprof_free(val);
    }

    /* Damage: a length of 0, one past the limit, one reaching past the
     * record; a control byte, DEL, a byte over 0x7f and a NUL inside. */
    t.r.w.thread = "worker-1";
    uint8_t *val = NULL;
    size_t vlen = 0;
    REQUIRE(store_record_build(c, &t.r, 0, &val, &vlen) == 0);
    store_be64_put(val + STORE_REC_SEQ_OFF, 5);
    size_t at = STORE_REC_FIXED + strlen("node-20.11.0"); /* the thread's first byte */
    struct store_rec_hdr h;
    static const uint8_t lens[] = {0, STORE_THREAD_MAX + 1, 255};
    for (size_t k = 0; k < sizeof(lens); k++) {
        val[STORE_REC_THREAD_OFF] = lens[k];
        CHECK_EQ_INT(store_record_decode(val, vlen, &h), ISOPROF_ECORRUPT);
        const char *why = store_record_fault(val, vlen);
        CHECK(why != NULL && strstr(why, "thread") != NULL);
    }
    val[STORE_REC_THREAD_OFF] = 8;
    CHECK_EQ_INT(store_record_decode(val, vlen, &h), 0);
    static const uint8_t bad[] = {0x01, 0x1f, 0x7f, 0x80, 0xff, 0x00};
    for (size_t k = 0; k < sizeof(bad); k++) {
        for (size_t pos = 0; pos < 8; pos += 7) { /* first and last byte */
            uint8_t keep = val[at + pos];
            val[at + pos] = bad[k];
            CHECK_EQ_INT(store_record_decode(val, vlen, &h), ISOPROF_ECORRUPT);
            const char *why = store_record_fault(val, vlen);
            CHECK(why != NULL && strstr(why, "not printable") != NULL);
            val[at + pos] = keep;
        }
    }
    CHECK_EQ_INT(store_record_decode(val, vlen, &h), 0);
    CHECK_STR(h.thread, "worker-1");
    /* Cut inside the header, past version 1's: refused before the thread
     * length is read (each cut in a buffer of its exact size, so that the
     * sanitizer build sees a read past it; found by fuzz_store_record). */
    for (size_t cut = STORE_REC_FIXED_V1; cut < STORE_REC_FIXED; cut++) {
        uint8_t *part = isoprof_malloc(cut);
        REQUIRE(part != NULL);
        memcpy(part, val, cut);
        CHECK_EQ_INT(store_record_decode(part, cut, &h), ISOPROF_ECORRUPT);
        const char *why = store_record_fault(part, cut);
        CHECK(why != NULL && strstr(why, "shorter") != NULL);
        isoprof_free(part);
    }
    isoprof_free(val);
    rec_free(&t);
    ZSTD_freeCCtx(c);
}

/* The pid and the container (version 4): the pid at its offset, the
 * container after the thread, bounded, of [0-9A-Za-z_.-] only, possibly
 * empty; a damaged one is refused by the decoder with a reason. */
TEST(record_pid_container)
{
    ZSTD_CCtx *c = store_zstd_cctx_new();
    REQUIRE(c != NULL);
    struct test_rec t;
    rec_make(&t, "w", "v", T0, 1, STORE_TYPE_CPU, 3000, 9);
    t.r.w.thread = "pool-1";
    char longest[STORE_CONTAINER_MAX + 1];
    static const char alphabet[] =
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_.-";
    for (int i = 0; i < STORE_CONTAINER_MAX; i++)
        longest[i] = alphabet[i % (sizeof(alphabet) - 1)];
    longest[STORE_CONTAINER_MAX] = '\0';
    static const char *const containers[] = {"", "3f2a9c0d1e", "my_ctr.v-2", NULL};
    static const uint32_t pids[] = {1, 4194304, 123456, UINT32_MAX};
    size_t none_len = 0;
    for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(containers); k++) {
        const char *ct = containers[k] ? containers[k] : longest;
        t.r.w.container = ct;
        t.r.w.pid = pids[k];
        uint8_t *val = NULL;
        size_t vlen = 0;
        REQUIRE(store_record_build(c, &t.r, 0, &val, &vlen) == 0);
        store_be64_put(val + STORE_REC_SEQ_OFF, 5);
        CHECK_EQ_INT(store_be32_get(val + STORE_REC_PID_OFF), pids[k]);
        CHECK_EQ_INT(val[STORE_REC_CONTAINER_OFF], strlen(ct));
        struct store_rec_hdr h;
        REQUIRE(store_record_decode(val, vlen, &h) == 0);
        CHECK_EQ_INT(h.pid, pids[k]);
        CHECK_STR(h.container, ct);
        CHECK_STR(h.thread, "pool-1");
        CHECK_STR(h.runtime, "node-20.11.0");
        CHECK(store_record_fault(val, vlen) == NULL);
        /* The record grows by the container's bytes, nothing else. */
        if (k == 0)
            none_len = vlen;
        CHECK_EQ_INT(vlen, none_len + strlen(ct));
        void *raw = NULL;
        REQUIRE(store_record_inflate(&h, &raw) == 0);
        CHECK(memcmp(raw, t.payload, 3000) == 0);
        isoprof_free(raw);
        isoprof_free(val);
    }
    /* NULL is none, as "" is. */
    t.r.w.container = NULL;
    uint8_t *val = NULL;
    size_t vlen = 0;
    REQUIRE(store_record_build(c, &t.r, 0, &val, &vlen) == 0);
    CHECK_EQ_INT(vlen, none_len);
    isoprof_free(val);

    /* Damage: a length one past the limit, one reaching past the record; a
     * byte outside the set (first and last position). */
    t.r.w.container = "abcdef012345";
    REQUIRE(store_record_build(c, &t.r, 0, &val, &vlen) == 0);
    store_be64_put(val + STORE_REC_SEQ_OFF, 5);
    size_t at = STORE_REC_FIXED + strlen("node-20.11.0") + strlen("pool-1");
    struct store_rec_hdr h;
    static const uint8_t lens[] = {STORE_CONTAINER_MAX + 1, 255};
    for (size_t k = 0; k < sizeof(lens); k++) {
        val[STORE_REC_CONTAINER_OFF] = lens[k];
        CHECK_EQ_INT(store_record_decode(val, vlen, &h), ISOPROF_ECORRUPT);
        const char *why = store_record_fault(val, vlen);
        CHECK(why != NULL && strstr(why, "container label longer than the record") != NULL);
    }
    val[STORE_REC_CONTAINER_OFF] = 12;
    CHECK_EQ_INT(store_record_decode(val, vlen, &h), 0);
    static const uint8_t bad[] = {'/', ' ', ':', 0x00, 0x7f, 0xc3, '\n'};
    for (size_t k = 0; k < sizeof(bad); k++) {
        for (size_t pos = 0; pos < 12; pos += 11) {
            uint8_t keep = val[at + pos];
            val[at + pos] = bad[k];
            CHECK_EQ_INT(store_record_decode(val, vlen, &h), ISOPROF_ECORRUPT);
            const char *why = store_record_fault(val, vlen);
            CHECK(why != NULL && strstr(why, "container label not of") != NULL);
            val[at + pos] = keep;
        }
    }
    /* A shorter length moves the frame: the frame no longer inflates. */
    val[STORE_REC_CONTAINER_OFF] = 11;
    if (store_record_decode(val, vlen, &h) == 0) {
        void *raw = NULL;
        CHECK_EQ_INT(store_record_inflate(&h, &raw), ISOPROF_ECORRUPT);
        isoprof_free(raw);
    }
    val[STORE_REC_CONTAINER_OFF] = 12;
    CHECK_EQ_INT(store_record_decode(val, vlen, &h), 0);
    CHECK_STR(h.container, "abcdef012345");
    /* Cut inside the header past version 2's fixed part (the pid): refused
     * as shorter than a header. */
    for (size_t cut = STORE_REC_FIXED_V2; cut < STORE_REC_FIXED; cut++) {
        uint8_t *part = isoprof_malloc(cut);
        REQUIRE(part != NULL);
        memcpy(part, val, cut);
        CHECK_EQ_INT(store_record_decode(part, cut, &h), ISOPROF_ECORRUPT);
        const char *why = store_record_fault(part, cut);
        CHECK(why != NULL && strstr(why, "shorter") != NULL);
        isoprof_free(part);
    }
    isoprof_free(val);
    rec_free(&t);
    ZSTD_freeCCtx(c);
}

/* Build r's record (seq 5); *vlen its size. Allocated (isoprof_free). */
static uint8_t *built(ZSTD_CCtx *c, const struct store_record *r, size_t *vlen)
{
    uint8_t *val = NULL;
    if (store_record_build(c, r, 0, &val, vlen) != 0)
        return NULL;
    store_be64_put(val + STORE_REC_SEQ_OFF, 5);
    return val;
}

/* Why the decoder refuses val (vlen bytes) with n bytes at off replaced
 * by bytes, and the labels' length set to ll (SIZE_MAX: as it is); NULL
 * if it decodes (then CHECKed to have failed). */
static const char *fault_with(const uint8_t *val, size_t vlen, size_t off, const char *bytes,
                              size_t n, size_t ll)
{
    uint8_t *copy = isoprof_malloc(vlen);
    if (copy == NULL)
        abort();
    memcpy(copy, val, vlen);
    memcpy(copy + off, bytes, n);
    if (ll != SIZE_MAX) {
        copy[STORE_REC_LABELS_OFF] = (uint8_t)(ll >> 8);
        copy[STORE_REC_LABELS_OFF + 1] = (uint8_t)ll;
    }
    struct store_rec_hdr h;
    CHECK_EQ_INT(store_record_decode(copy, vlen, &h), ISOPROF_ECORRUPT);
    const char *why = store_record_fault(copy, vlen);
    isoprof_free(copy);
    return why ? why : "(decodes)";
}

/* The source-map figures and the window labels (version 5): the figures
 * at their offsets, the labels after the container as name \0 value \0
 * pairs (their length at byte 100), handed out in place, the record
 * longer by their bytes exactly; damaged label bytes are refused by the
 * decoder with a reason. */
TEST(record_frames_labels)
{
    ZSTD_CCtx *c = store_zstd_cctx_new();
    REQUIRE(c != NULL);
    struct test_rec t;
    rec_make(&t, "w", "v", T0, 1, STORE_TYPE_CPU, 3000, 9);
    t.r.w.thread = "pool-1";
    t.r.w.container = "abc";
    t.r.w.frames_mapped = 1234;
    t.r.w.frames_unmapped = UINT32_MAX;
    size_t base = 0, vlen = 0;
    uint8_t *val = built(c, &t.r, &base);
    REQUIRE(val != NULL);
    CHECK_EQ_INT(rec_labels_len(val), 0);
    struct store_rec_hdr h;
    REQUIRE(store_record_decode(val, base, &h) == 0);
    CHECK(h.nlabels == 0 && h.frames_mapped == 1234 && h.frames_unmapped == UINT32_MAX);
    isoprof_free(val);

    static const struct store_label lab[] = {{"service_repository", "https://github.com/acme/shop"},
                                             {"service_git_ref", "0123abcd"},
                                             {"team", "caf\xc3\xa9"},
                                             {"tier", "gold"}};
    size_t ll = 0;
    for (size_t i = 0; i < 4; i++)
        ll += strlen(lab[i].name) + 1 + strlen(lab[i].value) + 1;
    t.r.w.labels = lab;
    t.r.w.nlabels = 4;
    val = built(c, &t.r, &vlen);
    REQUIRE(val != NULL);
    CHECK_EQ_INT(vlen, base + ll);
    CHECK_EQ_INT(rec_labels_len(val), ll);
    CHECK_EQ_INT(store_be32_get(val + STORE_REC_MAPPED_OFF), 1234);
    CHECK_EQ_INT(store_be32_get(val + STORE_REC_UNMAPPED_OFF), UINT32_MAX);
    CHECK(val[STORE_REC_LABELS_OFF + 2] == 0 && val[STORE_REC_LABELS_OFF + 3] == 0);
    size_t at = STORE_REC_FIXED + strlen("node-20.11.0") + strlen("pool-1") + strlen("abc");
    CHECK(memcmp(val + at, "service_repository\0https://github.com/acme/shop\0service_git_ref",
                 64) == 0);
    REQUIRE(store_record_decode(val, vlen, &h) == 0);
    CHECK(store_record_fault(val, vlen) == NULL);
    CHECK_EQ_INT(h.version, 5);
    CHECK(h.frames_mapped == 1234 && h.frames_unmapped == UINT32_MAX);
    CHECK_STR(h.container, "abc");
    CHECK_STR(h.thread, "pool-1");
    REQUIRE(h.nlabels == 4);
    for (size_t i = 0; i < 4; i++) {
        CHECK_STR(h.labels[i].name, lab[i].name);
        CHECK_STR(h.labels[i].value, lab[i].value);
        /* in place: inside the record's label bytes */
        CHECK((const uint8_t *)h.labels[i].name >= val + at &&
              (const uint8_t *)h.labels[i].value < val + at + ll);
    }
    void *raw = NULL;
    REQUIRE(store_record_inflate(&h, &raw) == 0);
    CHECK(memcmp(raw, t.payload, 3000) == 0);
    isoprof_free(raw);

    /* Damage, and what the decoder says of it: n bytes at off (from the
     * first label byte) replaced, the labels' length set to ll. */
    enum { KEEP = -1, TO_END = -2, ONE_SHORT = -3 };
    static const struct {
        size_t off, n;
        const char *bytes;
        long ll;
        const char *why;
    } bad[] = {
        {0, 0, "", 4097, "window labels over 4096 bytes"},
        {0, 0, "", 0xffff, "window labels over 4096 bytes"},
        {0, 0, "", 4096, "window labels longer than the record"},
        {0, 0, "", TO_END, "window labels longer than the record"}, /* no frame byte left */
        {0, 0, "", ONE_SHORT, "without its name's or value's NUL"},
        {93, 1, "x", KEEP, "without its name's or value's NUL"}, /* gold's NUL */
        {0, 1, "9", KEEP, "window label name not"},
        {3, 1, "-", KEEP, "window label name not"},
        {0, 2, "__", KEEP, "window label name not"},
        {0, 7, "thread", KEEP, "window label name not"}, /* one of the uploader's own */
        {0, 1, "", KEEP, "window label name not"},       /* empty */
        {85, 3, "eam", KEEP, "window label name twice"}, /* tier -> team */
        {78, 1, "", KEEP, "window label value empty"},   /* team's value */
        {78, 1, "\xff", KEEP, "window label value empty, over 2048 bytes or not UTF-8"},
        {81, 1, "x", KEEP, "window label value empty, over 2048 bytes or not UTF-8"},
    };
    REQUIRE(ll == 94 && memcmp(val + at + 73, "team\0caf\xc3\xa9\0tier\0gold", 20) == 0);
    for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(bad); k++) {
        size_t set = bad[k].ll == KEEP        ? SIZE_MAX
                     : bad[k].ll == TO_END    ? vlen - at
                     : bad[k].ll == ONE_SHORT ? ll - 1
                                              : (size_t)bad[k].ll;
        const char *why = fault_with(val, vlen, at + bad[k].off, bad[k].bytes, bad[k].n, set);
        if (strstr(why, bad[k].why) == NULL) {
            fprintf(stderr, "damage %zu: wanted '%s', got '%s'\n", k, bad[k].why, why);
            CHECK(0);
        }
    }
    /* Cut inside the header past version 4's fixed part: refused as
     * shorter than a header. */
    for (size_t cut = STORE_REC_FIXED_V4; cut < STORE_REC_FIXED; cut++) {
        uint8_t *part = isoprof_malloc(cut);
        REQUIRE(part != NULL);
        memcpy(part, val, cut);
        CHECK_EQ_INT(store_record_decode(part, cut, &h), ISOPROF_ECORRUPT);
        CHECK(strstr(store_record_fault(part, cut), "shorter") != NULL);
        isoprof_free(part);
    }
    isoprof_free(val);

    /* What store_put would refuse, built anyway: the decoder refuses it
     * too. 17 labels; a name twice. */
    struct store_label many[STORE_WINDOW_LABELS_MAX + 1];
    char names[STORE_WINDOW_LABELS_MAX + 1][8];
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(many); i++) {
        snprintf(names[i], sizeof(names[i]), "l%zu", i);
        many[i] = (struct store_label){names[i], "v"};
    }
    t.r.w.labels = many;
    t.r.w.nlabels = STORE_WINDOW_LABELS_MAX;
    val = built(c, &t.r, &vlen);
    REQUIRE(val != NULL);
    CHECK(store_record_decode(val, vlen, &h) == 0 && h.nlabels == STORE_WINDOW_LABELS_MAX);
    isoprof_free(val);
    t.r.w.nlabels = STORE_WINDOW_LABELS_MAX + 1;
    val = built(c, &t.r, &vlen);
    REQUIRE(val != NULL);
    CHECK_EQ_INT(store_record_decode(val, vlen, &h), ISOPROF_ECORRUPT);
    CHECK_STR(store_record_fault(val, vlen), "more than 16 window labels");
    isoprof_free(val);
    many[1].name = many[0].name;
    t.r.w.nlabels = 2;
    val = built(c, &t.r, &vlen);
    REQUIRE(val != NULL);
    CHECK_STR(store_record_fault(val, vlen), "window label name twice");
    isoprof_free(val);

    /* The bounds: 4096 bytes of labels decode, 4097 do not. */
    char v1[STORE_WINDOW_LABEL_VALUE_MAX + 1], v2[STORE_WINDOW_LABEL_VALUE_MAX + 1];
    memset(v1, 'x', STORE_WINDOW_LABEL_VALUE_MAX);
    v1[STORE_WINDOW_LABEL_VALUE_MAX] = '\0';
    memset(v2, 'y', sizeof(v2) - 1);
    v2[4096 - 2051 - 3] = '\0'; /* a\0 + 2048 + \0 = 2051; b\0 ... \0 the rest */
    struct store_label two[2] = {{"a", v1}, {"b", v2}};
    t.r.w.labels = two;
    t.r.w.nlabels = 2;
    val = built(c, &t.r, &vlen);
    REQUIRE(val != NULL);
    CHECK_EQ_INT(rec_labels_len(val), STORE_WINDOW_LABELS_BYTES);
    CHECK(store_record_decode(val, vlen, &h) == 0 && h.nlabels == 2);
    CHECK_EQ_INT(store_labels_check(two, 2, NULL), 0);
    isoprof_free(val);
    v2[4096 - 2051 - 3] = 'y';
    v2[4096 - 2051 - 2] = '\0';
    val = built(c, &t.r, &vlen);
    REQUIRE(val != NULL);
    CHECK_STR(store_record_fault(val, vlen), "window labels over 4096 bytes");
    CHECK_EQ_INT(store_labels_check(two, 2, NULL), -EINVAL);
    isoprof_free(val);
    rec_free(&t);
    ZSTD_freeCCtx(c);
}

TEST(empty_payload)
{
    ZSTD_CCtx *c = store_zstd_cctx_new();
    REQUIRE(c != NULL);
    struct store_record r = {.w = {.worker = "w", .version = "v", .runtime = "", .type = 1}};
    uint8_t *val;
    size_t vlen;
    REQUIRE(store_record_build(c, &r, 0, &val, &vlen) == 0);
    store_be64_put(val + STORE_REC_SEQ_OFF, 1);
    struct store_rec_hdr h;
    REQUIRE(store_record_decode(val, vlen, &h) == 0);
    CHECK(h.raw_size == 0 && h.runtime[0] == '\0');
    void *raw = NULL;
    CHECK_EQ_INT(store_record_inflate(&h, &raw), 0);
    isoprof_free(raw);
    isoprof_free(val);
    ZSTD_freeCCtx(c);
}

TEST(ids)
{
    struct store a = {.instance = 0x0123456789abcdefull}, b = {.instance = 0xfedcba9876543210ull};
    char id[STORE_ID_LEN + 1];
    store_id_format(&a, 42, id);
    CHECK_EQ_INT(strlen(id), 36);
    CHECK_STR(id, "01234567-89ab-8cde-8000-00000000002a");
    CHECK(id[14] == '8');
    CHECK(strchr("89ab", id[19]) != NULL);
    uint64_t v = 0;
    CHECK_EQ_INT(store_id_parse(&a, id, &v), 0);
    CHECK(v == 42);
    /* Upper case too. */
    char up[STORE_ID_LEN + 1];
    for (int i = 0; i <= STORE_ID_LEN; i++)
        up[i] = (char)(id[i] >= 'a' && id[i] <= 'f' ? id[i] - 32 : id[i]);
    v = 0;
    CHECK_EQ_INT(store_id_parse(&a, up, &v), 0);
    CHECK(v == 42);
    /* Another store's id. */
    CHECK_EQ_INT(store_id_parse(&b, id, &v), ISOPROF_ENOTFOUND);
    char other[STORE_ID_LEN + 1];
    store_id_format(&b, 42, other);
    CHECK(strcmp(other, id) != 0);
    /* Largest seq that fits (62 bits). */
    uint64_t big = (1ull << 62) - 1;
    store_id_format(&a, big, id);
    CHECK_EQ_INT(store_id_parse(&a, id, &v), 0);
    CHECK(v == big);
    /* Distinct seqs, distinct ids. */
    char x1[STORE_ID_LEN + 1], x2[STORE_ID_LEN + 1];
    store_id_format(&a, 1, x1);
    store_id_format(&a, 2, x2);
    CHECK(strcmp(x1, x2) != 0);
    /* Decimal. */
    CHECK_EQ_INT(store_id_parse(&a, "42", &v), 0);
    CHECK(v == 42);
    CHECK_EQ_INT(store_id_parse(&a, "18446744073709551615", &v), 0);
    CHECK(v == UINT64_MAX);
    CHECK_EQ_INT(store_id_parse(&a, "18446744073709551616", &v), -EINVAL);
    CHECK_EQ_INT(store_id_parse(&a, "0", &v), -EINVAL);
    CHECK_EQ_INT(store_id_parse(&a, "", &v), -EINVAL);
    CHECK_EQ_INT(store_id_parse(&a, "-1", &v), -EINVAL);
    CHECK_EQ_INT(store_id_parse(&a, "12a", &v), -EINVAL);
    CHECK_EQ_INT(store_id_parse(&a, " 12", &v), -EINVAL);
    /* Malformed UUIDs. */
    store_id_format(&a, 42, id);
    char bad[STORE_ID_LEN + 1];
    memcpy(bad, id, sizeof(bad));
    bad[8] = 'x';
    CHECK_EQ_INT(store_id_parse(&a, bad, &v), -EINVAL);
    memcpy(bad, id, sizeof(bad));
    bad[14] = '4'; /* version 4 */
    CHECK_EQ_INT(store_id_parse(&a, bad, &v), -EINVAL);
    memcpy(bad, id, sizeof(bad));
    bad[19] = 'c'; /* variant 11 */
    CHECK_EQ_INT(store_id_parse(&a, bad, &v), -EINVAL);
    memcpy(bad, id, sizeof(bad));
    bad[35] = 'g';
    CHECK_EQ_INT(store_id_parse(&a, bad, &v), -EINVAL);
    store_id_format(&a, 0, id);
    CHECK_EQ_INT(store_id_parse(&a, id, &v), -EINVAL);
    CHECK_EQ_INT(store_id_parse(&a, NULL, &v), -EINVAL);
}

/* Two real stores have different instance ids. */
TEST(ids_real_stores)
{
    struct store *a = open_rw(tmp_store_path(), 0), *b = open_rw(tmp_store_path(), 0);
    REQUIRE(a && b);
    char x[STORE_ID_LEN + 1], y[STORE_ID_LEN + 1];
    store_id_format(a, 1, x);
    store_id_format(b, 1, y);
    CHECK(strcmp(x, y) != 0);
    uint64_t v;
    CHECK_EQ_INT(store_id_parse(a, x, &v), 0);
    CHECK_EQ_INT(store_id_parse(a, y, &v), ISOPROF_ENOTFOUND);
    store_close(a);
    store_close(b);
}

int main(void)
{
    RUN(key_order);
    RUN(key_limits);
    RUN(record_codec);
    RUN(record_thread);
    RUN(record_pid_container);
    RUN(record_frames_labels);
    RUN(empty_payload);
    RUN(ids);
    RUN(ids_real_stores);
    TEST_EXIT();
}

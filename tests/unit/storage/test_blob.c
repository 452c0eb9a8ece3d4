/*
 * test_blob.c - snapshot windows streamed in and out (schema 8): a
 * multi-MB stream in random pieces read back byte for byte (also
 * interleaved with store_put, and from a read-only handle), abort, the
 * chunks of a writer that died dropped at the next writable open, keep
 * per worker/version (pinned ones last), the budget (chunks charged as
 * they come, evicted with their window, a snapshot over the whole budget
 * refused), store_check on missing, altered, extra and orphan chunks, a
 * schema 7 store read as it is and upgraded, window types 3 and 4 through
 * the listings, store_stat, store_put, store_load and pinning, and an
 * allocation-failure walk over the stream and the read.
 */
#include "blobgen.h"
#include "common.h"

#define MIB (1024u * 1024)
#define WALK_MAX 10000

/* What a stream carries: snapshot-like text (compresses 5-10 x) or random
 * bytes (does not compress: its compressed size is its size). */
enum content_kind { TEXT, RANDOM };

struct content {
    enum content_kind kind;
    struct snapgen g;
    uint64_t x;
};

static void content_init(struct content *c, enum content_kind kind, uint64_t seed)
{
    c->kind = kind;
    snapgen_init(&c->g, seed);
    c->x = seed * 0xbf58476d1ce4e5b9ull + 1;
}

static void content_fill(struct content *c, uint8_t *buf, size_t n)
{
    if (c->kind == TEXT) {
        snapgen_fill(&c->g, buf, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        c->x ^= c->x << 13;
        c->x ^= c->x >> 7;
        c->x ^= c->x << 17;
        buf[i] = (uint8_t)(c->x >> 24);
    }
}

static struct store_window snap_window(const char *worker, const char *version, uint64_t start,
                                       uint32_t isolate)
{
    struct store_window w;
    memset(&w, 0, sizeof(w));
    w.worker = worker;
    w.version = version;
    w.runtime = "node-22.3.0";
    w.start_ns = start;
    w.isolate = isolate;
    w.type = STORE_TYPE_SNAPSHOT;
    return w;
}

static uint8_t piece[256 * 1024];

/* Stream total bytes of kind/seed into s as window w, in pieces of 1 to
 * maxpiece bytes (random sizes), and commit it (pin, keep). Returns 0 or
 * the first failure (the stream then aborted); *id (may be NULL) the id,
 * *st (may be NULL) the commit's evictions; *written (may be NULL) the
 * bytes the writes took before a failure. */
static int stream_in(struct store *s, const struct store_window *w, enum content_kind kind,
                     uint64_t total, uint64_t seed, size_t maxpiece, uint64_t pin, unsigned keep,
                     uint64_t *id, struct store_put_stats *st, uint64_t *written)
{
    struct store_blob *b = NULL;
    struct content c;
    uint64_t x = seed + 77;
    content_init(&c, kind, seed);
    if (written)
        *written = 0;
    int rc = store_blob_begin(s, w, &b);
    if (rc != 0)
        return rc;
    for (uint64_t done = 0; done < total;) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t n = 1 + (size_t)(x % maxpiece);
        if (n > total - done)
            n = (size_t)(total - done);
        content_fill(&c, piece, n);
        if ((rc = store_blob_write(b, piece, n)) != 0) {
            store_blob_abort(b);
            return rc;
        }
        done += n;
        if (written)
            *written = done;
    }
    return store_blob_commit(b, w->start_ns + 5 * SEC, pin, keep, id, st);
}

/* A reader's comparison of what store_blob_read hands out with the
 * content it should be. */
struct cmp {
    struct content c;
    uint64_t got;
    size_t pieces, largest;
    int bad;
    int stop_after; /* > 0: return 42 after that many pieces */
};

static int cmp_on_piece(void *arg, const void *data, size_t len)
{
    static uint8_t want_bytes[256 * 1024];
    struct cmp *c = arg;
    if (len > sizeof(want_bytes) || len == 0) {
        c->bad = 1;
        return 0;
    }
    content_fill(&c->c, want_bytes, len);
    if (memcmp(want_bytes, data, len) != 0)
        c->bad = 1;
    c->got += len;
    c->pieces++;
    if (len > c->largest)
        c->largest = len;
    if (c->stop_after > 0 && (int)c->pieces == c->stop_after)
        return 42;
    return 0;
}

/* store_blob_read of id gives exactly total bytes of kind/seed. */
static int read_matches(struct store *s, uint64_t id, enum content_kind kind, uint64_t total,
                        uint64_t seed)
{
    struct cmp c;
    memset(&c, 0, sizeof(c));
    content_init(&c.c, kind, seed);
    int rc = store_blob_read(s, id, cmp_on_piece, &c);
    if (rc != 0 || c.bad || c.got != total) {
        fprintf(stderr,
                "read_matches(%" PRIu64 "): rc %d, bad %d, got %" PRIu64 " of %" PRIu64 "\n", id,
                rc, c.bad, c.got, total);
        return 0;
    }
    return 1;
}

/* One window as a listing gives it. */
struct one {
    int n;
    struct store_window w;
};

static int one_on_window(const struct store_window *w, void *arg)
{
    struct one *o = arg;
    if (o->n++ == 0)
        o->w = *w; /* strings not kept */
    return 0;
}

static struct store_window window_of(struct store *s, uint64_t id)
{
    struct store_filter f = {.id = id};
    struct one o;
    memset(&o, 0, sizeof(o));
    CHECK_EQ_INT(store_windows(s, &f, one_on_window, &o), 0);
    CHECK_EQ_INT(o.n, 1);
    return o.w;
}

/* The ids listed for f, as "id id ..." (want() compares). */
static const char *ids_of(struct store *s, const struct store_filter *f)
{
    static char out[WORDS_MAX];
    int rc;
    struct seen *l = list(s, f, &rc);
    out[0] = '\0';
    if (rc != 0)
        snprintf(out, sizeof(out), "error %d", rc);
    for (size_t i = 0; rc == 0 && i < l->n; i++) {
        size_t n = strlen(out);
        snprintf(out + n, sizeof(out) - n, "%s%" PRIu64, n ? " " : "", l->w[i].id);
    }
    return out;
}

/* The store's counter agrees with what its windows and dictionaries take
 * (no chunk without a window). */
static void check_counter(struct store *s)
{
    struct store_stat st = stat_checked(s);
    CHECK_EQ_INT(st.stored_bytes, listed_bytes(s) + st.dict_bytes);
}

TEST(round_trip)
{
    const char *path = tmp_store_path();
    struct store *s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    uint64_t cpu0 = 0;
    REQUIRE(put_one(s, "w", "v", T0, 1, STORE_TYPE_CPU, 3000, &cpu0) == 0);

    /* 6 MB of text in pieces of 1 byte to 64 KiB, interleaved with
     * store_put (the daemon goes on storing windows while a snapshot
     * streams in). */
    enum { TOTAL = 6 * MIB + 12345 };
    struct store_window w = snap_window("w", "v", T0 + 100 * SEC, 1);
    w.samples = 0;
    w.pid = 4242;
    w.thread = "pool-1";
    struct store_blob *b = NULL;
    REQUIRE(store_blob_begin(s, &w, &b) == 0);
    struct store_blob *b2 = NULL;
    CHECK_EQ_INT(store_blob_begin(s, &w, &b2), -EBUSY); /* one stream at a time */
    struct content c;
    content_init(&c, TEXT, 1);
    uint64_t x = 5, done = 0;
    int puts = 0;
    uint64_t others[8];
    while (done < TOTAL) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 1 + (size_t)((x >> 33) % (64 * 1024));
        if (n > TOTAL - done)
            n = TOTAL - done;
        content_fill(&c, piece, n);
        REQUIRE(store_blob_write(b, piece, n) == 0);
        done += n;
        if (done > (uint64_t)(puts + 1) * MIB && puts < 4) {
            REQUIRE(put_one(s, "w", "v", T0 + (uint64_t)(puts + 1) * SEC, 1, STORE_TYPE_CPU, 3000,
                            &others[puts]) == 0);
            puts++;
        }
    }
    CHECK_EQ_INT(puts, 4);
    /* Chunks are committed as they fill, but no window is visible. */
    struct store_stat st = stat_checked(s);
    CHECK(st.blob_chunks >= 1 && st.blob_pending_chunks == st.blob_chunks);
    CHECK_EQ_INT(st.windows, 5);
    CHECK_EQ_INT(check_clean(s), 0); /* a stream in progress is no finding */
    uint64_t id = 0;
    struct store_put_stats ps;
    REQUIRE(store_blob_commit(b, T0 + 105 * SEC, 0, 0, &id, &ps) == 0);
    CHECK(id != 0 && ps.evicted == 0);
    CHECK(read_matches(s, id, TEXT, TOTAL, 1));

    /* The window as listed: raw size the JSON bytes, stored size its
     * record and its chunks, never queued, its labels as given. */
    st = stat_checked(s);
    CHECK_EQ_INT(st.windows, 6);
    CHECK_EQ_INT(st.windows_snapshot, 1);
    CHECK_EQ_INT(st.windows_cpu, 5);
    CHECK_EQ_INT(st.blob_pending_chunks, 0);
    CHECK(st.blob_chunks >= 1 && st.blob_chunks <= 2); /* 6 MB of text: about 1 MB zstd */
    CHECK_EQ_INT(st.outbox_pending, 5);
    struct store_window lw = window_of(s, id);
    CHECK_EQ_INT(lw.type, STORE_TYPE_SNAPSHOT);
    CHECK_EQ_INT(lw.raw_size, TOTAL);
    CHECK_EQ_INT(lw.samples, 0);
    CHECK_EQ_INT(lw.end_ns, T0 + 105 * SEC);
    CHECK_EQ_INT(lw.pid, 4242);
    CHECK_EQ_INT(lw.upload, STORE_UPLOAD_OFF);
    CHECK(!(lw.flags & STORE_FLAG_QUEUED));
    CHECK(lw.stored_size > st.blob_bytes && lw.stored_size < st.blob_bytes + 512);
    check_counter(s);
    printf("round trip: %u bytes of snapshot text in %" PRIu64 " chunks of %" PRIu64
           " bytes (%.1f x)\n",
           (unsigned)TOTAL, st.blob_chunks, st.blob_bytes, (double)TOTAL / (double)st.blob_bytes);
    fflush(stdout);

    /* The read stops where the callback says, in pieces of at most 128 KiB. */
    struct cmp cm;
    memset(&cm, 0, sizeof(cm));
    content_init(&cm.c, TEXT, 1);
    cm.stop_after = 3;
    CHECK_EQ_INT(store_blob_read(s, id, cmp_on_piece, &cm), 42);
    CHECK(cm.pieces == 3 && !cm.bad && cm.largest <= 128 * 1024);
    /* The decoder that read stopped with is kept, reset, for the next
     * read, which starts at the frame's start. */
    CHECK(read_matches(s, id, TEXT, TOTAL, 1));

    /* A snapshot holds no pprof; a pprof window is no snapshot. */
    void *out = NULL;
    size_t len = 0;
    CHECK_EQ_INT(store_load(s, id, &out, &len), -EMEDIUMTYPE);
    CHECK(out == NULL);
    CHECK_EQ_INT(store_blob_read(s, cpu0, cmp_on_piece, &cm), -EMEDIUMTYPE);
    CHECK_EQ_INT(store_blob_read(s, 9999, cmp_on_piece, &cm), ISOPROF_ENOTFOUND);
    CHECK_EQ_INT(store_blob_read(s, id, NULL, &cm), -EINVAL);
    check_loads(s, others, 4, 3000);
    CHECK_EQ_INT(check_clean(s), 0);

    /* A small snapshot is one chunk; an empty one is one frame. */
    uint64_t small = 0, empty = 0;
    w = snap_window("w", "v", T0 + 200 * SEC, 2);
    CHECK_EQ_INT(stream_in(s, &w, TEXT, 1000, 2, 100, 0, 0, &small, NULL, NULL), 0);
    w.start_ns += SEC;
    CHECK_EQ_INT(stream_in(s, &w, TEXT, 0, 3, 100, 0, 0, &empty, NULL, NULL), 0);
    CHECK(read_matches(s, small, TEXT, 1000, 2));
    CHECK(read_matches(s, empty, TEXT, 0, 3));
    /* The same key again replaces the window, its chunks with it. */
    uint64_t again = 0;
    CHECK_EQ_INT(stream_in(s, &w, TEXT, 5000, 4, 700, 0, 0, &again, NULL, NULL), 0);
    CHECK(read_matches(s, again, TEXT, 5000, 4));
    CHECK_EQ_INT(store_blob_read(s, empty, cmp_on_piece, &cm), ISOPROF_ENOTFOUND);
    CHECK_EQ_INT(stat_checked(s).windows_snapshot, 3);
    check_counter(s);
    CHECK_EQ_INT(check_clean(s), 0);

    /* Bad calls. */
    struct store_window bad = snap_window("w", "v", T0, 1);
    bad.type = STORE_TYPE_CPU;
    CHECK_EQ_INT(store_blob_begin(s, &bad, &b), -EINVAL);
    bad = snap_window("w", "v", T0, 1);
    bad.runtime = NULL;
    CHECK_EQ_INT(store_blob_begin(s, &bad, &b), -EINVAL);
    bad = snap_window("w", "v", T0, 1);
    bad.thread = "bad\n";
    CHECK_EQ_INT(store_blob_begin(s, &bad, &b), -EINVAL);
    CHECK_EQ_INT(store_blob_begin(NULL, &w, &b), -EINVAL);
    CHECK_EQ_INT(store_blob_write(NULL, "x", 1), -EINVAL);
    CHECK_EQ_INT(store_blob_commit(NULL, 0, 0, 0, NULL, NULL), -EINVAL);
    store_blob_abort(NULL);
    store_close(s);

    /* A read-only handle (the CLI) reads it too, and so does the check
     * `isoprof store check` runs. */
    CHECK_EQ_INT(verify_clean(path), 0);
    s = open_ro(path);
    REQUIRE(s != NULL);
    CHECK(read_matches(s, id, TEXT, TOTAL, 1));
    CHECK_EQ_INT(store_blob_begin(s, &w, &b), -EROFS);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

TEST(abort)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    REQUIRE(put_one(s, "w", "v", T0, 1, STORE_TYPE_CPU, 3000, NULL) == 0);
    struct store_stat st0 = stat_checked(s);
    /* Aborted after three chunks were committed, and before any. */
    for (int i = 0; i < 2; i++) {
        struct store_window w = snap_window("w", "v", T0 + SEC, 1);
        struct store_blob *b = NULL;
        REQUIRE(store_blob_begin(s, &w, &b) == 0);
        struct content c;
        content_init(&c, RANDOM, 9);
        for (int k = 0; k < (i == 0 ? 3 * 16 + 3 : 5); k++) {
            content_fill(&c, piece, 64 * 1024);
            REQUIRE(store_blob_write(b, piece, 64 * 1024) == 0);
        }
        struct store_stat mid = stat_checked(s);
        CHECK_EQ_INT(mid.blob_chunks, i == 0 ? 3 : 0);
        CHECK_EQ_INT(mid.blob_pending_chunks, mid.blob_chunks);
        CHECK_EQ_INT(mid.stored_bytes, st0.stored_bytes + mid.blob_bytes);
        store_blob_abort(b);
        struct store_stat st = stat_checked(s);
        CHECK_EQ_INT(st.blob_chunks, 0);
        CHECK_EQ_INT(st.blob_bytes, 0);
        CHECK_EQ_INT(st.windows, 1);
        CHECK_EQ_INT(st.stored_bytes, st0.stored_bytes);
        CHECK_EQ_INT(check_clean(s), 0);
    }
    /* The handle streams again after an abort; the ids given to aborted
     * streams are not given again. */
    struct store_window w = snap_window("w", "v", T0 + 2 * SEC, 1);
    uint64_t id = 0;
    CHECK_EQ_INT(stream_in(s, &w, TEXT, 100000, 5, 4096, 0, 0, &id, NULL, NULL), 0);
    CHECK(read_matches(s, id, TEXT, 100000, 5));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

/* Begin a stream and write `chunks` chunks' worth of random bytes into it:
 * the chunks are committed, the window never is. */
static struct store_blob *stream_part(struct store *s, uint64_t start, int chunks)
{
    struct store_window w = snap_window("w", "v", start, 1);
    struct store_blob *b = NULL;
    if (store_blob_begin(s, &w, &b) != 0)
        return NULL;
    struct content c;
    content_init(&c, RANDOM, start);
    for (int k = 0; k < chunks * 16 + 1; k++) {
        content_fill(&c, piece, 64 * 1024);
        if (store_blob_write(b, piece, 64 * 1024) != 0) {
            store_blob_abort(b);
            return NULL;
        }
    }
    return b;
}

TEST(orphans)
{
    const char *path = tmp_store_path();
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    uint64_t keep_id = 0;
    struct store_window w = snap_window("w", "v", T0, 1);
    REQUIRE(stream_in(s, &w, TEXT, 300000, 6, 9000, 0, 0, &keep_id, NULL, NULL) == 0);
    REQUIRE(put_one(s, "w", "v", T0 + SEC, 1, STORE_TYPE_CPU, 3000, NULL) == 0);
    uint64_t before = stat_checked(s).stored_bytes;
    store_close(s);

    /* A writer that dies while streaming (a child killed after its third
     * chunk) leaves chunks without a window. */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        struct store *cs = open_rw(path, 0);
        if (cs == NULL || stream_part(cs, T0 + 2 * SEC, 3) == NULL)
            _exit(1);
        _exit(0); /* no commit, no abort, no close */
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* A reader sees them as the stream in progress (it cannot tell a
     * writer that died from one still writing): no finding. */
    s = open_ro(path);
    REQUIRE(s != NULL);
    struct store_stat st = stat_checked(s);
    CHECK_EQ_INT(st.blob_pending_chunks, 3);
    CHECK_EQ_INT(st.stored_bytes, before + st.blob_pending_bytes);
    CHECK_EQ_INT(st.windows, 2);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* The next writable open drops them, and says so. */
    s = open_rw(path, 0);
    REQUIRE(s != NULL);
    st = stat_checked(s);
    CHECK_EQ_INT(st.orphan_chunks, 3);
    CHECK(st.orphan_bytes > 3 * MIB && st.orphan_bytes < 3 * MIB + 100);
    CHECK_EQ_INT(st.blob_pending_chunks, 0);
    CHECK_EQ_INT(st.stored_bytes, before);
    CHECK(read_matches(s, keep_id, TEXT, 300000, 6));
    check_counter(s);
    CHECK_EQ_INT(check_clean(s), 0);

    /* A handle closed with a stream open leaves its chunks the same way. */
    REQUIRE(stream_part(s, T0 + 3 * SEC, 2) != NULL);
    store_close(s);
    s = open_rw(path, 0);
    REQUIRE(s != NULL);
    st = stat_checked(s);
    CHECK_EQ_INT(st.orphan_chunks, 2);
    CHECK_EQ_INT(st.blob_chunks, 1); /* keep_id's */
    CHECK_EQ_INT(st.stored_bytes, before);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* Nothing to drop: nothing said. */
    s = open_rw(path, 0);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(stat_checked(s).orphan_chunks, 0);
    store_close(s);
    CHECK_EQ_INT(verify_clean(path), 0);
}

/* Commit a small text snapshot of worker/version at start; its id. */
static uint64_t snap(struct store *s, const char *worker, const char *version, uint64_t start,
                     uint64_t pin, unsigned keep, struct store_put_stats *st)
{
    struct store_window w = snap_window(worker, version, start, 1);
    uint64_t id = 0;
    int rc = stream_in(s, &w, TEXT, 20000, start, 3000, pin, keep, &id, st, NULL);
    CHECK_EQ_INT(rc, 0);
    return id;
}

TEST(keep)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t a = snap(s, "w", "v", T0, 0, 3, NULL);
    uint64_t b = snap(s, "w", "v", T0 + SEC, 0, 3, NULL);
    uint64_t c = snap(s, "w", "v", T0 + 2 * SEC, 0, 3, NULL);
    uint64_t other_v = snap(s, "w", "v2", T0 - SEC, 0, 3, NULL);
    uint64_t other_w = snap(s, "x", "v", T0 - SEC, 0, 3, NULL);
    uint64_t cpu = 0;
    REQUIRE(put_one(s, "w", "v", T0 - 5 * SEC, 1, STORE_TYPE_CPU, 3000, &cpu) == 0);
    REQUIRE(a && b && c && other_v && other_w);
    struct store_filter f = {.type = STORE_TYPE_SNAPSHOT, .worker = "w", .version = "v"};
    CHECK_STR(ids_of(s, &f), want("%" PRIu64 " %" PRIu64 " %" PRIu64, a, b, c));
    /* The fourth of w/v with keep 3: the oldest of w/v goes, nothing
     * else (not the older ones of w/v2 and x/v, nor its CPU window). */
    struct store_put_stats ps;
    uint64_t d = snap(s, "w", "v", T0 + 3 * SEC, 0, 3, &ps);
    CHECK_EQ_INT(ps.evicted, 1);
    CHECK(ps.evicted_bytes > 0);
    CHECK_STR(ids_of(s, &f), want("%" PRIu64 " %" PRIu64 " %" PRIu64, b, c, d));
    CHECK_STR(ids_of(s, NULL),
              want("%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, cpu,
                   other_v, other_w, b, c, d));
    struct store_stat st = stat_checked(s);
    CHECK_EQ_INT(st.windows_snapshot, 5);
    CHECK_EQ_INT(st.evicted_total, 1);
    CHECK_EQ_INT(store_blob_read(s, a, cmp_on_piece, NULL), ISOPROF_ENOTFOUND);
    check_counter(s);
    /* keep 0: no limit. */
    uint64_t e = snap(s, "w", "v", T0 + 4 * SEC, 0, 0, &ps);
    CHECK_EQ_INT(ps.evicted, 0);
    CHECK_STR(ids_of(s, &f), want("%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, b, c, d, e));
    /* keep 1 evicts all the others, and never the new one even if it is
     * not the newest. */
    uint64_t old = snap(s, "w", "v", T0 - 100 * SEC, 0, 1, &ps);
    CHECK_EQ_INT(ps.evicted, 4);
    CHECK_STR(ids_of(s, &f), want("%" PRIu64, old));
    CHECK_EQ_INT(stat_checked(s).blob_chunks, 3); /* old, other_v, other_w */
    check_counter(s);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

TEST(keep_pinned)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    struct store_anomaly an = {.kind = STORE_ANOMALY_OOM_SUSPECTED,
                               .worker = "w",
                               .version = "v",
                               .isolate = 1,
                               .start_ns = T0,
                               .end_ns = T0,
                               .value = 1,
                               .threshold = 1};
    REQUIRE(store_anomaly_put(s, &an, 0) == 0);
    uint64_t a = snap(s, "w", "v", T0, an.id, 3, NULL); /* pinned, the oldest */
    uint64_t b = snap(s, "w", "v", T0 + SEC, 0, 3, NULL);
    uint64_t c = snap(s, "w", "v", T0 + 2 * SEC, 0, 3, NULL);
    struct store_filter pf = {.pinned = STORE_PINNED_ANY};
    CHECK_STR(ids_of(s, &pf), want("%" PRIu64, a));
    /* The oldest unpinned one goes first. */
    uint64_t d = snap(s, "w", "v", T0 + 3 * SEC, 0, 3, NULL);
    struct store_filter f = {.type = STORE_TYPE_SNAPSHOT};
    CHECK_STR(ids_of(s, &f), want("%" PRIu64 " %" PRIu64 " %" PRIu64, a, c, d));
    /* keep 1: the unpinned ones, then the pinned one. */
    uint64_t e = snap(s, "w", "v", T0 + 4 * SEC, 0, 1, NULL);
    CHECK_STR(ids_of(s, &f), want("%" PRIu64, e));
    CHECK_STR(ids_of(s, &pf), "");
    CHECK_EQ_INT(stat_checked(s).windows_pinned, 0);
    check_counter(s);
    CHECK_EQ_INT(check_clean(s), 0);
    (void)b;
    store_close(s);
}

TEST(budget)
{
    const uint64_t budget = 6 * MIB;
    struct store *s = open_rw(tmp_store_path(), budget);
    REQUIRE(s != NULL);
    /* About 4 MiB of CPU windows. */
    int ncpu = 0;
    while (stat_checked(s).stored_bytes < 4 * MIB) {
        REQUIRE(put_one(s, "w", "v", T0 + (uint64_t)ncpu * SEC, 1, STORE_TYPE_CPU, 200000, NULL) ==
                0);
        ncpu++;
    }
    CHECK_EQ_INT(stat_checked(s).evicted_total, 0);
    /* 3 MiB of random bytes (3 full chunks and a bit): the chunks push
     * the oldest windows out as they are committed. */
    struct store_window w = snap_window("w", "v", T0 + 1000 * SEC, 1);
    uint64_t first = 0;
    struct store_put_stats ps;
    REQUIRE(stream_in(s, &w, RANDOM, 3 * MIB, 11, 64 * 1024, 0, 0, &first, &ps, NULL) == 0);
    struct store_stat st = stat_checked(s);
    CHECK(ps.evicted > 0 && ps.evicted == st.evicted_total);
    CHECK(st.stored_bytes <= budget);
    CHECK_EQ_INT(st.blob_chunks, 4);
    struct store_window fw = window_of(s, first);
    CHECK(fw.stored_size > st.blob_bytes && fw.stored_size < st.blob_bytes + 512);
    check_counter(s);
    CHECK_EQ_INT(check_clean(s), 0);

    /* A second one does not fit beside the first: the CPU windows left go,
     * then the first snapshot, its chunks with it. */
    w.start_ns += SEC;
    uint64_t second = 0;
    REQUIRE(stream_in(s, &w, RANDOM, 3 * MIB, 12, 64 * 1024, 0, 0, &second, &ps, NULL) == 0);
    st = stat_checked(s);
    CHECK(st.stored_bytes <= budget);
    CHECK_EQ_INT(st.windows, 1);
    CHECK_EQ_INT(st.blob_chunks, 4);
    CHECK_EQ_INT(store_blob_read(s, first, cmp_on_piece, NULL), ISOPROF_ENOTFOUND);
    CHECK(read_matches(s, second, RANDOM, 3 * MIB, 12));
    CHECK_EQ_INT(st.evicted_total, (uint64_t)ncpu + 1);
    check_counter(s);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

TEST(over_budget)
{
    const uint64_t budget = 2 * MIB + MIB / 2;
    struct store *s = open_rw(tmp_store_path(), budget);
    REQUIRE(s != NULL);
    REQUIRE(put_one(s, "w", "v", T0, 1, STORE_TYPE_CPU, 3000, NULL) == 0);
    struct store_window w = snap_window("w", "v", T0 + SEC, 1);
    struct store_blob *b = NULL;
    REQUIRE(store_blob_begin(s, &w, &b) == 0);
    struct content c;
    content_init(&c, RANDOM, 13);
    uint64_t done = 0;
    int rc = 0;
    while (done < 4 * MIB) {
        content_fill(&c, piece, 10000);
        if ((rc = store_blob_write(b, piece, 10000)) != 0)
            break;
        done += 10000;
    }
    /* Refused at the write that took it past the budget (random bytes
     * take about their size compressed), its chunks dropped at once. */
    CHECK_EQ_INT(rc, ISOPROF_ETOOBIG);
    CHECK(done + 10000 >= budget - 4096 && done <= budget + 256 * 1024);
    struct store_stat st = stat_checked(s);
    CHECK_EQ_INT(st.blob_chunks, 0);
    CHECK_EQ_INT(st.blob_pending_chunks, 0);
    check_counter(s);
    /* Sticky until the caller lets go. */
    CHECK_EQ_INT(store_blob_write(b, piece, 10), ISOPROF_ETOOBIG);
    uint64_t id = 99;
    CHECK_EQ_INT(store_blob_commit(b, T0 + 2 * SEC, 0, 0, &id, NULL), ISOPROF_ETOOBIG);
    CHECK_EQ_INT(id, 0);
    st = stat_checked(s);
    CHECK_EQ_INT(st.windows_snapshot, 0);
    CHECK_EQ_INT(st.blob_chunks, 0);
    CHECK_EQ_INT(check_clean(s), 0);
    /* One that fits is stored. */
    CHECK_EQ_INT(stream_in(s, &w, RANDOM, MIB, 14, 64 * 1024, 0, 0, &id, NULL, NULL), 0);
    CHECK(read_matches(s, id, RANDOM, MIB, 14));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

enum chunk_damage { CD_DROP, CD_FLIP, CD_EXTRA, CD_ORPHAN, CD_DESC };

/* Damage the chunks of snapshot seq behind the store's back. */
static int chunk_damage(struct store *s, uint64_t seq, enum chunk_damage d)
{
    MDB_txn *txn;
    if (mdb_txn_begin(s->env, NULL, 0, &txn) != 0)
        return -1;
    uint8_t key[STORE_BLOB_KEY_LEN];
    store_be64_put(key, d == CD_ORPHAN ? seq + 1000 : seq);
    store_be32_put(key + 8, d == CD_EXTRA ? 9 : d == CD_ORPHAN ? 0 : 1);
    MDB_val k = {sizeof(key), key}, v;
    int rc = 0;
    if (d == CD_DROP) {
        rc = mdb_del(txn, s->blobs, &k, NULL);
    } else if (d == CD_FLIP) {
        rc = mdb_get(txn, s->blobs, &k, &v);
        uint8_t *copy = rc == 0 ? isoprof_malloc(v.mv_size) : NULL;
        if (copy != NULL) {
            memcpy(copy, v.mv_data, v.mv_size);
            copy[v.mv_size / 2] ^= 0x10;
            MDB_val nv = {v.mv_size, copy};
            rc = mdb_put(txn, s->blobs, &k, &nv, 0);
            isoprof_free(copy);
        } else {
            rc = -1;
        }
    } else if (d == CD_EXTRA || d == CD_ORPHAN) {
        MDB_val nv = {5, "junk!"};
        rc = mdb_put(txn, s->blobs, &k, &nv, 0);
    }
    if (rc == 0 && d == CD_ORPHAN) {
        /* As a stream leaves one: charged as it was committed. */
        MDB_val sk = {12, "stored_bytes"}, sv;
        uint8_t nb[8];
        rc = mdb_get(txn, s->meta, &sk, &sv);
        if (rc == 0) {
            store_be64_put(nb, store_be64_get(sv.mv_data) + STORE_BLOB_KEY_LEN + 5);
            MDB_val nv = {8, nb};
            rc = mdb_put(txn, s->meta, &sk, &nv, 0);
        }
    }
    if (rc != 0) {
        mdb_txn_abort(txn);
        return -1;
    }
    return mdb_txn_commit(txn) == 0 ? 0 : -1;
}

/* The descriptor's chunk count one up (a rec_edit). */
static void desc_edit(uint8_t *rec, size_t *len, int how)
{
    (void)how;
    uint8_t *desc = rec + *len - STORE_BLOB_DESC;
    store_be32_put(desc, store_be32_get(desc) + 1);
}

TEST(check_damage)
{
    static const struct {
        enum chunk_damage d;
        const char *needle;
    } cases[] = {
        {CD_DROP, "snapshot: chunk 1 missing (the next is 2)"},
        {CD_FLIP, "snapshot: the zstd stream does not inflate"},
        {CD_EXTRA, "snapshot: chunk 3 missing (the next is 9)"},
        {CD_ORPHAN, "which is no snapshot window nor the one being written (orphans"},
        {CD_DESC, "snapshot: 3 chunks of"},
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(cases); i++) {
        const char *path = tmp_store_path();
        struct store *s = open_rw(path, 0);
        REQUIRE(s != NULL);
        struct store_window w = snap_window("w", "v", T0, 1);
        uint64_t id = 0, other = 0;
        REQUIRE(stream_in(s, &w, RANDOM, 2 * MIB + 1000, 15, 64 * 1024, 0, 0, &id, NULL, NULL) ==
                0);
        w.start_ns += SEC;
        REQUIRE(stream_in(s, &w, TEXT, 50000, 16, 4096, 0, 0, &other, NULL, NULL) == 0);
        REQUIRE(check_clean(s) == 0);
        if (cases[i].d == CD_DESC)
            REQUIRE(rec_rewrite(s, id, desc_edit, 0) == 0);
        else
            REQUIRE(chunk_damage(s, id, cases[i].d) == 0);
        check_corrupt(s, (int)i, cases[i].needle);
        if (cases[i].d != CD_ORPHAN)
            CHECK_EQ_INT(store_blob_read(s, id, cmp_on_piece, &(struct cmp){0}), ISOPROF_ECORRUPT);
        CHECK(read_matches(s, other, TEXT, 50000, 16));
        store_close(s);
        char *why = NULL;
        CHECK_EQ_INT(store_verify(path, STORE_VERIFY_RECORDS, 60000, &why), ISOPROF_ECORRUPT);
        CHECK(why != NULL && strstr(why, cases[i].needle) != NULL);
        isoprof_free(why);
        if (cases[i].d == CD_ORPHAN) {
            /* The writer drops an orphan; the counter never had it. */
            s = open_rw(path, 0);
            REQUIRE(s != NULL);
            CHECK_EQ_INT(stat_checked(s).orphan_chunks, 1);
            CHECK_EQ_INT(check_clean(s), 0);
            store_close(s);
        }
    }
}

/* Turn the store at path into a schema 7 one: no blobs DB, no
 * "blob_open", version 7 (as a schema 7 build left it). */
static void make_schema7(const char *path)
{
    downgrade_schema(path, "blobs", "blob_open", 7);
}

TEST(upgrade_from_schema7)
{
    const char *path = tmp_store_path();
    struct store *s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    uint64_t ids[3];
    for (int i = 0; i < 3; i++)
        REQUIRE(put_one(s, "w", "v", T0 + (uint64_t)i * SEC, 1, STORE_TYPE_CPU, 3000, &ids[i]) ==
                0);
    uint64_t before = stat_checked(s).stored_bytes;
    store_close(s);
    make_schema7(path);

    /* A reader takes schema 7 as it is: no blobs, nothing to stream. */
    s = open_ro(path);
    REQUIRE(s != NULL);
    struct store_stat st = stat_checked(s);
    CHECK_EQ_INT(st.schema_version, 7);
    CHECK_EQ_INT(st.windows, 3);
    CHECK_EQ_INT(st.stored_bytes, before);
    CHECK_EQ_INT(st.blob_chunks + st.windows_snapshot, 0);
    CHECK_EQ_INT(store_blob_read(s, ids[0], cmp_on_piece, NULL), -EMEDIUMTYPE);
    CHECK_EQ_INT(store_blob_read(s, 99, cmp_on_piece, NULL), ISOPROF_ENOTFOUND);
    check_loads(s, ids, 3, 3000);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    CHECK_EQ_INT(verify_clean(path), 0);

    /* A writer upgrades it in place: schema 9, the windows untouched, and
     * it streams snapshots. */
    s = open_outbox(path, 0);
    REQUIRE(s != NULL);
    st = stat_checked(s);
    CHECK_EQ_INT(st.schema_version, STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(STORE_SCHEMA_VERSION, 12);
    CHECK_EQ_INT(st.stored_bytes, before);
    CHECK_EQ_INT(check_clean(s), 0);
    struct store_window w = snap_window("w", "v", T0 + 10 * SEC, 1);
    uint64_t id = 0;
    CHECK_EQ_INT(stream_in(s, &w, TEXT, 2 * MIB, 17, 20000, 0, 0, &id, NULL, NULL), 0);
    check_counter(s);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* The current schema for readers too. */
    CHECK_EQ_INT(verify_clean(path), 0);
    s = open_ro(path);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(stat_checked(s).schema_version, STORE_SCHEMA_VERSION);
    CHECK(read_matches(s, id, TEXT, 2 * MIB, 17));
    check_loads(s, ids, 3, 3000);
    store_close(s);
}

TEST(types)
{
    CHECK_STR(store_type_name(STORE_TYPE_CPU), "cpu");
    CHECK_STR(store_type_name(STORE_TYPE_HEAP), "heap");
    CHECK_STR(store_type_name(STORE_TYPE_RETAINED), "retained");
    CHECK_STR(store_type_name(STORE_TYPE_SNAPSHOT), "snapshot");
    CHECK(store_type_name(0) == NULL && store_type_name(5) == NULL);

    struct store *s = open_outbox(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    uint64_t cpu = 0, heap = 0, ret = 0, ret2 = 0;
    REQUIRE(put_one(s, "w", "v", T0, 1, STORE_TYPE_CPU, 3000, &cpu) == 0);
    REQUIRE(put_one(s, "w", "v", T0 + SEC, 1, STORE_TYPE_HEAP, 3000, &heap) == 0);
    REQUIRE(put_one(s, "w", "v", T0 + 2 * SEC, 1, STORE_TYPE_RETAINED, 5000, &ret) == 0);
    REQUIRE(put_one(s, "x", "v", T0 + 2 * SEC, 1, STORE_TYPE_RETAINED, 5000, &ret2) == 0);
    uint64_t sn = snap(s, "w", "v", T0 + 3 * SEC, 0, 0, NULL);
    REQUIRE(sn != 0);
    /* store_put takes retained windows and refuses snapshots. */
    struct test_rec t;
    rec_make(&t, "w", "v", T0 + 4 * SEC, 1, STORE_TYPE_SNAPSHOT, 100, 1);
    CHECK_EQ_INT(store_put(s, &t.r, 1, NULL), -EINVAL);
    rec_free(&t);

    /* The filters, on each access path (time index, key prefix, id,
     * pins). */
    struct store_filter f = {.type = STORE_TYPE_RETAINED};
    CHECK_STR(ids_of(s, &f), want("%" PRIu64 " %" PRIu64, ret, ret2));
    f.worker = "w";
    CHECK_STR(ids_of(s, &f), want("%" PRIu64, ret));
    f = (struct store_filter){.type = STORE_TYPE_SNAPSHOT};
    CHECK_STR(ids_of(s, &f), want("%" PRIu64, sn));
    f.worker = "w";
    f.version = "v";
    CHECK_STR(ids_of(s, &f), want("%" PRIu64, sn));
    f.id = sn;
    CHECK_STR(ids_of(s, &f), want("%" PRIu64, sn));
    f.type = STORE_TYPE_RETAINED;
    CHECK_STR(ids_of(s, &f), "");
    f = (struct store_filter){.type = STORE_TYPE_SNAPSHOT, .since_ns = T0 + 3 * SEC};
    CHECK_STR(ids_of(s, &f), want("%" PRIu64, sn));
    f.since_ns = T0 + 3 * SEC + 1;
    CHECK_STR(ids_of(s, &f), "");

    /* Stat, loads, the outbox (a retained window is queued, a snapshot
     * never). */
    struct store_stat st = stat_checked(s);
    CHECK_EQ_INT(st.windows, 5);
    CHECK(st.windows_cpu == 1 && st.windows_heap == 1 && st.windows_retained == 2 &&
          st.windows_snapshot == 1);
    CHECK_EQ_INT(st.outbox_pending, 4);
    CHECK_EQ_INT(st.raw_bytes, 3000 + 3000 + 5000 + 5000 + 20000);
    uint64_t r1[] = {ret};
    check_loads(s, r1, 1, 5000);
    CHECK_EQ_INT(store_blob_read(s, ret, cmp_on_piece, NULL), -EMEDIUMTYPE);
    CHECK_EQ_INT(window_of(s, ret).upload, STORE_UPLOAD_PENDING);
    CHECK_EQ_INT(window_of(s, sn).upload, STORE_UPLOAD_OFF);

    /* An anomaly pins the newest retained window and snapshot. */
    struct store_anomaly an = {.kind = STORE_ANOMALY_MEMORY_NEAR_LIMIT,
                               .worker = "w",
                               .version = "v",
                               .isolate = 1,
                               .start_ns = T0 + 3 * SEC,
                               .end_ns = T0 + 3 * SEC,
                               .value = 9,
                               .threshold = 8};
    REQUIRE(store_anomaly_put(s, &an, (1u << STORE_TYPE_RETAINED) | (1u << STORE_TYPE_SNAPSHOT)) ==
            0);
    f = (struct store_filter){.pinned = STORE_PINNED_ANY};
    CHECK_STR(ids_of(s, &f), want("%" PRIu64 " %" PRIu64, ret, sn));
    f.type = STORE_TYPE_SNAPSHOT;
    CHECK_STR(ids_of(s, &f), want("%" PRIu64, sn));
    CHECK_EQ_INT(window_of(s, sn).pinned, 1u << STORE_ANOMALY_MEMORY_NEAR_LIMIT);
    /* Dictionaries leave snapshots out: eight retained windows and a
     * snapshot between them earn w/v one, which the snapshot does not
     * name. */
    for (int i = 0; i < 10; i++)
        REQUIRE(put_one(s, "w", "v", T0 + (uint64_t)(10 + i) * SEC, 1, STORE_TYPE_RETAINED, 5000,
                        NULL) == 0);
    st = stat_checked(s);
    CHECK_EQ_INT(st.dicts, 1);
    CHECK_EQ_INT(check_clean(s), 0);
    check_counter(s);
    store_close(s);
}

TEST(oom)
{
    struct store *s = open_rw(tmp_store_path(), 0);
    REQUIRE(s != NULL);
    REQUIRE(put_one(s, "w", "v", T0, 1, STORE_TYPE_CPU, 3000, NULL) == 0);
    struct store_stat st0 = stat_checked(s);
    struct store_window w = snap_window("w", "v", T0 + SEC, 1);
    long n;
    int rc = -1;
    uint64_t id = 0;
    for (n = 0; n < WALK_MAX; n++) {
        isoprof_alloc_fail_after(n);
        rc = stream_in(s, &w, TEXT, 3 * MIB, 18, 50000, 0, 0, &id, NULL, NULL);
        isoprof_alloc_fail_after(-1);
        if (rc == 0)
            break;
        CHECK_EQ_INT(rc, -ENOMEM);
        /* Nothing of the stream is left, and the store is intact. */
        struct store_stat st = stat_checked(s);
        CHECK_EQ_INT(st.windows, st0.windows);
        CHECK_EQ_INT(st.stored_bytes, st0.stored_bytes);
        CHECK_EQ_INT(st.blob_chunks, 0);
        if (rc != -ENOMEM)
            break;
    }
    CHECK_EQ_INT(rc, 0);
    CHECK(n >= 4); /* the stream, its record, its buffer, zstd's context and workspace */
    CHECK_EQ_INT(check_clean(s), 0);
    for (n = 0; n < WALK_MAX; n++) {
        struct cmp c;
        memset(&c, 0, sizeof(c));
        content_init(&c.c, TEXT, 18);
        isoprof_alloc_fail_after(n);
        rc = store_blob_read(s, id, cmp_on_piece, &c);
        isoprof_alloc_fail_after(-1);
        if (rc == 0) {
            CHECK(!c.bad && c.got == 3 * MIB);
            break;
        }
        CHECK_EQ_INT(rc, -ENOMEM);
        if (rc != -ENOMEM)
            break;
    }
    CHECK_EQ_INT(rc, 0);
    /* The output buffer; the decoder is the one check_clean's read kept. */
    CHECK(n >= 1);
    for (n = 0; n < WALK_MAX; n++) {
        char *why = NULL;
        isoprof_alloc_fail_after(n);
        rc = store_check(s, &why);
        isoprof_alloc_fail_after(-1);
        CHECK(why == NULL);
        if (rc == 0)
            break;
        CHECK_EQ_INT(rc, -ENOMEM);
        if (rc != -ENOMEM)
            break;
    }
    CHECK_EQ_INT(rc, 0);
    store_close(s);
}

int main(void)
{
    RUN(round_trip);
    RUN(abort);
    RUN(orphans);
    RUN(keep);
    RUN(keep_pinned);
    RUN(budget);
    RUN(over_budget);
    RUN(check_damage);
    RUN(upgrade_from_schema7);
    RUN(types);
    RUN(oom);
    TEST_EXIT();
}

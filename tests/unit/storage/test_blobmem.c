/*
 * test_blobmem.c - the memory a snapshot stream costs: 150 MB of
 * snapshot-like text streamed into a store in pieces of about 10 KB must
 * not raise the process's peak RSS (VmHWM) by more than 8 MiB over what it
 * was when the stream began (the compression context and one chunk, not
 * the snapshot). A process of its own, so that nothing before the stream
 * set the peak; the peak is also reset (clear_refs 5) where the kernel
 * allows. The figure is printed; its bound is not checked under ASan,
 * whose shadow memory and quarantine change every figure. Then the
 * snapshot is read back and compared byte for byte.
 */
#include "blobgen.h"
#include "common.h"

#include <fcntl.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define TOTAL (150ull * 1000 * 1000)
#define LIMIT_KIB (8 * 1024)

/* A "Vm...:" figure of /proc/self/status in KiB; -1 if not found. */
static long status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* Reset VmHWM to the current RSS (Linux 4.0+); ignored where refused. */
static void hwm_reset(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, "5", 1) != 1) {
            /* an older kernel: the process is young, the peak is near RSS */
        }
        close(fd);
    }
}

static uint8_t piece[32 * 1024], want_bytes[256 * 1024];

struct cmp {
    struct snapgen g;
    uint64_t got;
    int bad;
};

static int cmp_on_piece(void *arg, const void *data, size_t len)
{
    struct cmp *c = arg;
    if (len > sizeof(want_bytes)) {
        c->bad = 1;
        return 1;
    }
    snapgen_fill(&c->g, want_bytes, len);
    if (memcmp(want_bytes, data, len) != 0)
        c->bad = 1;
    c->got += len;
    return 0;
}

TEST(stream_150mb)
{
    const char *path = tmp_store_path();
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    /* A window first, so that the store's own first-write allocations
     * (store_put's compression context) are not counted. */
    REQUIRE(put_one(s, "w", "v", T0, 1, STORE_TYPE_CPU, 3000, NULL) == 0);
    struct store_window w;
    memset(&w, 0, sizeof(w));
    w.worker = "w";
    w.version = "v";
    w.runtime = "node-22.3.0";
    w.start_ns = T0 + SEC;
    w.isolate = 1;
    w.type = STORE_TYPE_SNAPSHOT;
    struct snapgen g;
    snapgen_init(&g, 150);
    uint64_t x = 1;

    hwm_reset();
    long rss0 = status_kib("VmRSS"), hwm0 = status_kib("VmHWM");
    uint64_t t0 = isoprof_now_mono_ns();
    struct store_blob *b = NULL;
    REQUIRE(store_blob_begin(s, &w, &b) == 0);
    for (uint64_t done = 0; done < TOTAL;) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 2000 + (size_t)((x >> 33) % 16000); /* CDP chunks: about 10 KB */
        if (n > TOTAL - done)
            n = (size_t)(TOTAL - done);
        snapgen_fill(&g, piece, n);
        REQUIRE(store_blob_write(b, piece, n) == 0);
        done += n;
    }
    uint64_t id = 0;
    REQUIRE(store_blob_commit(b, T0 + 9 * SEC, 0, 0, &id, NULL) == 0);
    uint64_t t1 = isoprof_now_mono_ns();
    long hwm1 = status_kib("VmHWM");
    REQUIRE(rss0 > 0 && hwm1 > 0);
    long growth = hwm1 - rss0;
    struct store_stat st = stat_checked(s);
    printf("blob stream of %llu bytes: VmHWM %ld -> %ld KiB (RSS at start %ld KiB): growth %ld "
           "KiB%s; %" PRIu64 " chunks, %" PRIu64 " bytes stored (%.1f x), %.2f s\n",
           (unsigned long long)TOTAL, hwm0, hwm1, rss0, growth, UNDER_ASAN ? " (ASan)" : "",
           st.blob_chunks, st.blob_bytes, (double)TOTAL / (double)st.blob_bytes,
           (double)(t1 - t0) / 1e9);
    fflush(stdout);
    if (!UNDER_ASAN)
        CHECK(growth < LIMIT_KIB);
    /* 5 to 10 times smaller, like a real snapshot. */
    CHECK(st.blob_bytes * 5 < TOTAL && st.blob_bytes * 12 > TOTAL);

    /* Read back whole and identical. */
    struct cmp c;
    memset(&c, 0, sizeof(c));
    snapgen_init(&c.g, 150);
    CHECK_EQ_INT(store_blob_read(s, id, cmp_on_piece, &c), 0);
    CHECK(!c.bad && c.got == TOTAL);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
}

int main(void)
{
    RUN(stream_150mb);
    TEST_EXIT();
}

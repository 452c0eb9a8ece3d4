/*
 * bench_store - throughput and latency of the LMDB store.
 *
 *   bench_store [N] [DIR]
 *
 * Fills a store with N windows (default 100000) spread over 30 days for
 * 20 workers x 2 versions x 2 isolates, inserted in time order the way the
 * daemon writes them (batched store_put, one write txn and one sync per
 * batch), then times queries from one thread:
 *   - one worker, 7 days (key-prefix range seek, all versions)
 *   - one worker and version, 7 days
 *   - all workers, 1 hour (time index)
 *   - store_load of one window (inflate)
 * and prints a table. Smaller stores measure insert rate at other batch
 * sizes. Payloads are synthetic pprof-like bytes (a repeated string table
 * and varint-like samples) of about 16 KiB, which compress roughly like
 * real CPU profiles. Nothing is asserted about time; the exit status is
 * non-zero only if a store call fails. DIR (default: a fresh directory
 * under $TMPDIR, removed at exit) must not hold a store.
 */
#include "base.h"
#include "store.h"

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEC 1000000000ull
#define DAY (86400ull * SEC)
#define SPAN_DAYS 30
#define WORKERS 20
#define VERSIONS 2
#define ISOLATES 2
#define SERIES (WORKERS * VERSIONS * ISOLATES)
#define PAYLOADS 64
#define PAYLOAD_LEN 16384
#define BATCH 64
#define QUERIES 200

static char tmp_root[512];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void cleanup(void)
{
    if (tmp_root[0])
        nftw(tmp_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* Bytes that look like a pprof to a compressor: a string table of function
 * and file names, then samples of small varints. */
static void make_payload(uint8_t *b, size_t len)
{
    static const char *parts[] = {"handle", "Request", "render",         "json",
                                  "parse",  "Buffer",  "node:internal/", "src/",
                                  ".js",    "async ",  "Promise",        "run"};
    size_t o = 0;
    while (o < len / 3) {
        const char *p = parts[rnd() % ISOPROF_ARRAY_SIZE(parts)];
        size_t n = strlen(p);
        if (o + n + 2 > len)
            break;
        b[o++] = 0x32;
        b[o++] = (uint8_t)n;
        memcpy(b + o, p, n);
        o += n;
    }
    /* Samples: location ids drawn from a skewed set, values mostly small. */
    while (o + 6 <= len) {
        uint64_t r = rnd();
        b[o++] = 0x12;
        b[o++] = 4;
        b[o++] = (uint8_t)(1 + (r & 0xff) % (1 + (r >> 8 & 0x3f)));
        b[o++] = (uint8_t)(1 + (r >> 16 & 0x7f) % 24);
        b[o++] = 0x18;
        b[o++] = (r >> 24 & 7) ? 1 : (uint8_t)(r >> 32);
    }
    while (o < len)
        b[o++] = 0;
}

static double now_s(void)
{
    return (double)isoprof_now_mono_ns() / 1e9;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void row_lat(const char *name, uint64_t *ns, size_t n, double avg_rows)
{
    qsort(ns, n, sizeof(*ns), cmp_u64);
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += (double)ns[i];
    printf("%-34s %8zu %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f\n", name, n, avg_rows,
           (double)ns[n / 2] / 1e3, (double)ns[n * 9 / 10] / 1e3, (double)ns[n * 99 / 100] / 1e3,
           (double)ns[n - 1] / 1e3, total / (double)n / 1e3);
}

static const char *worker_name(unsigned w)
{
    static char names[WORKERS][16];
    if (names[w][0] == '\0')
        snprintf(names[w], sizeof(names[w]), "worker-%02u", w);
    return names[w];
}

static const char *version_name(unsigned v)
{
    static const char *names[] = {"v41", "v42"};
    return names[v];
}

/* Insert n windows in time order in batches of `batch`; *rate receives
 * windows/s. Returns store_put's first error, or 0. */
static int fill(struct store *s, uint64_t n, size_t batch, uint8_t **payloads, double *rate,
                uint64_t *raw_total, uint64_t t0, uint64_t step)
{
    struct store_record *r = isoprof_calloc(batch, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    double start = now_s();
    uint64_t done = 0;
    int rc = 0;
    while (done < n && rc == 0) {
        size_t k = 0;
        for (; k < batch && done + k < n; k++) {
            uint64_t i = done + k;
            unsigned series = (unsigned)(i % SERIES);
            uint64_t tick = i / SERIES;
            unsigned w = series / (VERSIONS * ISOLATES);
            unsigned v = (series / ISOLATES) % VERSIONS;
            r[k] = (struct store_record){
                .w = {.worker = worker_name(w),
                      .version = version_name(v),
                      .runtime = "node-20",
                      .start_ns = t0 + tick * step + series * SEC,
                      .isolate = series % ISOLATES,
                      .type = (i % 10 == 9) ? STORE_TYPE_HEAP : STORE_TYPE_CPU,
                      .samples = 1000,
                      .interval = 10000000},
                .pprof = payloads[i % PAYLOADS],
                .len = PAYLOAD_LEN - (size_t)(i % 997)};
            r[k].w.end_ns = r[k].w.start_ns + 10 * SEC;
            *raw_total += r[k].len;
        }
        rc = store_put(s, r, k, NULL);
        done += k;
    }
    double el = now_s() - start;
    isoprof_free(r);
    *rate = el > 0 ? (double)done / el : 0;
    return rc;
}

static int count_cb(const struct store_window *w, void *arg)
{
    (void)w;
    (*(uint64_t *)arg)++;
    return 0;
}

static struct store *open_at(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    struct store_options o = {.max_size = 16ull << 30};
    struct store *s = NULL;
    char *why = NULL;
    int rc = store_open(path, &o, &s, &why);
    if (rc != 0) {
        fprintf(stderr, "bench_store: %s\n", why ? why : isoprof_strerror(rc));
        isoprof_free(why);
        return NULL;
    }
    return s;
}

int main(int argc, char **argv)
{
    uint64_t n = 100000;
    if (argc > 1) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(argv[1], &end, 10);
        if (errno || *end || v == 0) {
            fprintf(stderr, "usage: bench_store [N] [DIR]\n");
            return 2;
        }
        n = v;
    }
    const char *dir;
    if (argc > 2) {
        dir = argv[2];
    } else {
        const char *t = getenv("TMPDIR");
        snprintf(tmp_root, sizeof(tmp_root), "%s/bench-store-XXXXXX", t && *t ? t : "/tmp");
        if (mkdtemp(tmp_root) == NULL) {
            perror("mkdtemp");
            return 1;
        }
        atexit(cleanup);
        dir = tmp_root;
    }

    uint8_t *payloads[PAYLOADS];
    for (int i = 0; i < PAYLOADS; i++) {
        payloads[i] = isoprof_malloc(PAYLOAD_LEN);
        if (payloads[i] == NULL)
            return 1;
        make_payload(payloads[i], PAYLOAD_LEN);
    }
    uint64_t t0 = 1764000000ull * SEC;
    uint64_t ticks = (n + SERIES - 1) / SERIES;
    uint64_t step = ticks > 1 ? (SPAN_DAYS * DAY) / ticks : DAY;
    if (step < (uint64_t)SERIES * SEC + SEC)
        step = (uint64_t)SERIES * SEC + SEC; /* keep a series' windows apart */

    printf("bench_store: N=%" PRIu64 " windows, %d series (%d workers x %d versions x %d "
           "isolates), %d days, ~%d KiB pprof, store in %s\n\n",
           n, SERIES, WORKERS, VERSIONS, ISOLATES, SPAN_DAYS, PAYLOAD_LEN / 1024, dir);
    printf("%-34s %8s %10s %12s %12s %10s\n", "insert", "windows", "batch", "windows/s", "MB/s raw",
           "seconds");

    /* Small stores: the batching effect. */
    static const size_t small_batches[] = {1, 16};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(small_batches); i++) {
        char name[32];
        snprintf(name, sizeof(name), "small-%zu", small_batches[i]);
        struct store *s = open_at(dir, name);
        if (s == NULL)
            return 1;
        uint64_t m = small_batches[i] == 1 ? 300 : 2000, raw = 0;
        if (m > n)
            m = n;
        double rate;
        double t = now_s();
        int rc = fill(s, m, small_batches[i], payloads, &rate, &raw, t0, step);
        t = now_s() - t;
        store_close(s);
        if (rc != 0) {
            fprintf(stderr, "bench_store: store_put: %s\n", isoprof_strerror(rc));
            return 1;
        }
        printf("%-34s %8" PRIu64 " %10zu %12.0f %12.1f %10.2f\n", "store_put", m, small_batches[i],
               rate, (double)raw / t / 1e6, t);
    }

    struct store *s = open_at(dir, "main");
    if (s == NULL)
        return 1;
    uint64_t raw = 0;
    double rate, t = now_s();
    int rc = fill(s, n, BATCH, payloads, &rate, &raw, t0, step);
    t = now_s() - t;
    if (rc != 0) {
        fprintf(stderr, "bench_store: store_put: %s\n", isoprof_strerror(rc));
        store_close(s);
        return 1;
    }
    printf("%-34s %8" PRIu64 " %10d %12.0f %12.1f %10.2f\n\n", "store_put", n, BATCH, rate,
           (double)raw / t / 1e6, t);

    struct store_stat st;
    if ((rc = store_stat(s, &st)) != 0) {
        fprintf(stderr, "bench_store: store_stat: %s\n", isoprof_strerror(rc));
        return 1;
    }
    printf("store: %" PRIu64 " windows, pprof %.1f MB, stored %.1f MB (%.1f%%), file %.1f MB, "
           "evicted %" PRIu64 "\n\n",
           st.windows, (double)st.raw_bytes / 1e6, (double)st.stored_bytes / 1e6,
           st.raw_bytes ? 100.0 * (double)st.stored_bytes / (double)st.raw_bytes : 0.0,
           (double)st.file_size / 1e6, st.evicted_total);

    printf("%-34s %8s %10s %10s %10s %10s %10s %10s\n", "query (one thread)", "runs", "rows avg",
           "p50 us", "p90 us", "p99 us", "max us", "mean us");
    uint64_t *lat = isoprof_calloc(QUERIES, sizeof(*lat));
    uint64_t *ids = isoprof_calloc(QUERIES, sizeof(*ids));
    if (lat == NULL || ids == NULL)
        return 1;
    uint64_t span = st.newest_ns > st.oldest_ns ? st.newest_ns - st.oldest_ns : 0;
    uint64_t week = 7 * DAY;
    for (int kind = 0; kind < 3; kind++) {
        uint64_t rows = 0;
        for (int q = 0; q < QUERIES; q++) {
            uint64_t len = kind == 2 ? 3600 * SEC : week;
            uint64_t since = st.oldest_ns + (span > len ? rnd() % (span - len) : 0);
            struct store_filter f = {.since_ns = since, .until_ns = since + len};
            if (kind < 2)
                f.worker = worker_name((unsigned)(rnd() % WORKERS));
            if (kind == 1)
                f.version = version_name((unsigned)(rnd() % VERSIONS));
            uint64_t a = isoprof_now_mono_ns();
            rc = store_windows(s, &f, count_cb, &rows);
            lat[q] = isoprof_now_mono_ns() - a;
            if (rc != 0) {
                fprintf(stderr, "bench_store: store_windows: %s\n", isoprof_strerror(rc));
                return 1;
            }
        }
        static const char *names[] = {"worker, 7 days", "worker + version, 7 days",
                                      "all workers, 1 hour (by_time)"};
        row_lat(names[kind], lat, QUERIES, (double)rows / QUERIES);
    }
    for (int q = 0; q < QUERIES; q++)
        ids[q] = 1 + rnd() % st.windows;
    for (int q = 0; q < QUERIES; q++) {
        void *out = NULL;
        size_t len = 0;
        uint64_t a = isoprof_now_mono_ns();
        rc = store_load(s, ids[q], &out, &len);
        lat[q] = isoprof_now_mono_ns() - a;
        isoprof_free(out);
        if (rc != 0) {
            fprintf(stderr, "bench_store: store_load(%" PRIu64 "): %s\n", ids[q],
                    isoprof_strerror(rc));
            return 1;
        }
    }
    row_lat("store_load (inflate one window)", lat, QUERIES, 1);
    isoprof_free(lat);
    isoprof_free(ids);
    store_close(s);
    for (int i = 0; i < PAYLOADS; i++)
        isoprof_free(payloads[i]);
    return 0;
}

/*
 * bench_convert - measures the path of a V8 CPU profile from CDP JSON to a
 * stored window: pprof_from_cpu_json (JSON -> serialized pprof), then the
 * zstd frame the store writes (its own compression context,
 * store_zstd_cctx_new, reused as storage/record.c does; the 88-byte record
 * header is not counted). The frame is made without store_put, so LMDB's
 * writes stay out of the figure. The gzip a
 * report upload would send (pprof_gzip) is timed separately, as a stage of
 * its own. It measures and asserts nothing about time.
 *
 * The synthetic profile has the shape of a real one: a call tree of a few
 * tens of thousands of nodes with realistic names and file:// urls, ids
 * that are not 1..N, and ~1 ms samples whose count is sum(hitCount)+1. The
 * JSON is written into one buffer allocated once at its final size, so
 * generation does not inflate the peak.
 *
 * Usage:
 *   bench_convert [MB...]
 *       generates a profile of each size (default 1 and 20) in a child
 *       process of its own, so one size's peak does not hide the next one's,
 *       and prints MB/s and peak RSS (getrusage ru_maxrss, which includes
 *       the input text).
 *   bench_convert --write DIR MB...
 *       writes the same profiles to DIR/cpu-<MB>mb.json and prints each path
 *       and size, so that another converter can be fed identical bytes.
 *   bench_convert --file F [--iters N] [--out P]
 *       converts the file F N times (default 5) in this process and prints
 *       one JSON object: input bytes, each iteration's seconds per stage,
 *       output sizes, and ru_maxrss at start, after reading F and at the
 *       end. --out writes the serialized pprof (not compressed) to P.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#include "base.h"
#include "pprof.h"
#include "store_internal.h" /* store_zstd_cctx_new: the frame the store writes */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

struct out {
    char *d;
    size_t len, cap;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->d + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= o->cap - o->len) {
        fprintf(stderr, "bench_convert: generation buffer too small\n");
        exit(2);
    }
    o->len += (size_t)n;
}

static const char *const words[] = {"handle", "request", "parse",  "render",  "query",   "cache",
                                    "encode", "json",    "stream", "route",   "auth",    "session",
                                    "buffer", "hash",    "emit",   "resolve", "compile", "visit"};

/* A profile of about target bytes into a fresh buffer. */
static char *generate(size_t target, size_t *len, size_t *nodes_out, size_t *samples_out)
{
    size_t nodes = target / 700 + 16;
    size_t samples = (target - nodes * 190) / 10;
    struct out o = {NULL, 0, nodes * 400 + samples * 24 + 4096};
    o.d = isoprof_malloc(o.cap);
    uint32_t *parent = isoprof_malloc(nodes * sizeof(*parent));
    uint32_t *depth = isoprof_malloc(nodes * sizeof(*depth));
    uint32_t *nkids = isoprof_calloc(nodes, sizeof(*nkids));
    uint32_t *first = isoprof_malloc((nodes + 1) * sizeof(*first));
    uint32_t *kids = isoprof_malloc(nodes * sizeof(*kids));
    uint32_t *hits = isoprof_calloc(nodes, sizeof(*hits));
    if (!o.d || !parent || !depth || !nkids || !first || !kids || !hits) {
        fprintf(stderr, "bench_convert: out of memory\n");
        exit(2);
    }
    parent[0] = UINT32_MAX;
    depth[0] = 0;
    for (size_t i = 1; i < nodes; i++) {
        /* mostly extend a recent frame, sometimes branch off an old one */
        uint32_t p = rnd(4) ? (uint32_t)(i - 1 - rnd(i < 8 ? (uint32_t)i : 8)) : rnd((uint32_t)i);
        if (depth[p] > 40)
            p = rnd((uint32_t)i);
        parent[i] = p;
        depth[i] = depth[p] + 1;
        nkids[p]++;
    }
    first[0] = 0;
    for (size_t i = 0; i < nodes; i++)
        first[i + 1] = first[i] + nkids[i];
    memset(nkids, 0, nodes * sizeof(*nkids));
    for (size_t i = 1; i < nodes; i++)
        kids[first[parent[i]] + nkids[parent[i]]++] = (uint32_t)i;
    /* The samples are drawn twice from the same generator state, once to
     * count hits and once to write them, so that no array of them adds to
     * the peak RSS being measured. samples[0] is the uncounted stack. */
    uint64_t rng_samples = rng;
    for (size_t s = 1; s < samples; s++)
        hits[1 + rnd((uint32_t)nodes - 1)]++;
    uint64_t rng_after = rng;
#define ID(i) ((unsigned)(i)*3 + 1)
    put(&o, "{\"id\":42,\"result\":{\"profile\":{\"nodes\":[");
    for (size_t i = 0; i < nodes; i++) {
        if (i == 0) {
            put(&o,
                "{\"id\":%u,\"callFrame\":{\"functionName\":\"(root)\",\"scriptId\":\"0\","
                "\"url\":\"\",\"lineNumber\":-1,\"columnNumber\":-1},\"hitCount\":0",
                ID(i));
        } else {
            uint32_t f = (uint32_t)(i * 2654435761u % 3000);
            put(&o,
                ",{\"id\":%u,\"callFrame\":{\"functionName\":\"%s%s%u\",\"scriptId\":\"%u\","
                "\"url\":\"file:///srv/app/node_modules/%s/lib/%s.js\",\"lineNumber\":%u,"
                "\"columnNumber\":%u},\"hitCount\":%u",
                ID(i), words[f % 18], words[(f / 18) % 18], f, 10 + f % 200, words[f % 7],
                words[(f / 7) % 18], f % 900, f % 60, hits[i]);
            if (hits[i])
                put(&o, ",\"positionTicks\":[{\"line\":%u,\"ticks\":%u}]", f % 900 + 1, hits[i]);
        }
        if (first[i + 1] > first[i]) {
            put(&o, ",\"children\":[");
            for (uint32_t k = first[i]; k < first[i + 1]; k++)
                put(&o, "%s%u", k > first[i] ? "," : "", ID(kids[k]));
            put(&o, "]");
        }
        put(&o, "}");
    }
    put(&o, "],\"startTime\":5017309000,\"endTime\":%" PRIu64 ",\"samples\":[",
        (uint64_t)5017309000 + samples * 1000);
    rng = rng_samples;
    put(&o, "%u", ID(0));
    for (size_t s = 1; s < samples; s++)
        put(&o, ",%u", ID(1 + rnd((uint32_t)nodes - 1)));
    rng = rng_after;
    put(&o, "],\"timeDeltas\":[");
    for (size_t s = 0; s < samples; s++)
        put(&o, "%s%u", s ? "," : "", 950 + rnd(100));
    put(&o, "]}}}");
    isoprof_free(parent);
    isoprof_free(depth);
    isoprof_free(nkids);
    isoprof_free(first);
    isoprof_free(kids);
    isoprof_free(hits);
    *len = o.len;
    *nodes_out = nodes;
    *samples_out = samples;
    return o.d;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long maxrss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Compresses in into a fresh buffer of compressBound bytes, as
 * store_record_build does. Returns 0 or -ENOMEM / -EIO. */
static int stored_frame(ZSTD_CCtx *c, const struct pprof_buf *in, struct pprof_buf *out)
{
    size_t bound = ZSTD_compressBound(in->len);
    uint8_t *buf = isoprof_malloc(bound ? bound : 1);
    if (buf == NULL)
        return -ENOMEM;
    size_t got = ZSTD_compress2(c, buf, bound, in->data, in->len);
    if (ZSTD_isError(got)) {
        isoprof_free(buf);
        return -EIO;
    }
    out->data = buf;
    out->len = got;
    return 0;
}

/* What one conversion run measured. The time arrays have iters entries. */
struct conv {
    int iters;
    double *t_pprof, *t_zstd, *t_gzip;
    size_t pprof_len, stored_len, gzip_len;
    uint64_t samples;
    long rss_peak; /* ru_maxrss after the JSON -> stored iterations, KiB */
};

/* Converts json[0..len) iters times: pprof_from_cpu_json then the stored
 * zstd frame, each timed; then gzips the last pprof iters times. The last
 * pprof is left in *last (owned by the caller) when last is not NULL. */
static int convert(const char *json, size_t len, int iters, struct conv *c, struct pprof_buf *last)
{
    struct pprof_result r;
    memset(&r, 0, sizeof(r));
    struct pprof_buf z = {0}, g = {0};
    ZSTD_CCtx *cctx = store_zstd_cctx_new(); /* the store's level and flags */
    c->iters = iters;
    c->t_pprof = isoprof_calloc((size_t)iters, sizeof(double));
    c->t_zstd = isoprof_calloc((size_t)iters, sizeof(double));
    c->t_gzip = isoprof_calloc((size_t)iters, sizeof(double));
    if (cctx == NULL || !c->t_pprof || !c->t_zstd || !c->t_gzip) {
        fprintf(stderr, "bench_convert: out of memory\n");
        ZSTD_freeCCtx(cctx);
        return 1;
    }
    for (int i = 0; i < iters; i++) {
        struct pprof_cpu_opts o = {.interval_ns = 1000000};
        char *why = NULL;
        pprof_buf_free(&r.pprof);
        pprof_buf_free(&z);
        double t0 = now_s();
        int rc = pprof_from_cpu_json(json, len, &o, &r, &why);
        double t1 = now_s();
        if (rc) {
            fprintf(stderr, "bench_convert: %s: %s\n", isoprof_strerror(rc), why ? why : "");
            isoprof_free(why);
            ZSTD_freeCCtx(cctx);
            return 1;
        }
        if (stored_frame(cctx, &r.pprof, &z)) {
            fprintf(stderr, "bench_convert: zstd compression failed\n");
            ZSTD_freeCCtx(cctx);
            pprof_buf_free(&r.pprof);
            return 1;
        }
        c->t_pprof[i] = t1 - t0;
        c->t_zstd[i] = now_s() - t1;
    }
    c->rss_peak = maxrss_kib();
    ZSTD_freeCCtx(cctx);
    for (int i = 0; i < iters; i++) {
        pprof_buf_free(&g);
        double t0 = now_s();
        if (pprof_gzip(r.pprof.data, r.pprof.len, &g)) {
            fprintf(stderr, "bench_convert: gzip failed\n");
            pprof_buf_free(&r.pprof);
            pprof_buf_free(&z);
            return 1;
        }
        c->t_gzip[i] = now_s() - t0;
    }
    c->pprof_len = r.pprof.len;
    c->stored_len = z.len;
    c->gzip_len = g.len;
    c->samples = r.samples;
    pprof_buf_free(&z);
    pprof_buf_free(&g);
    if (last)
        *last = r.pprof;
    else
        pprof_buf_free(&r.pprof);
    return 0;
}

static void conv_free(struct conv *c)
{
    isoprof_free(c->t_pprof);
    isoprof_free(c->t_zstd);
    isoprof_free(c->t_gzip);
}

static double best_of(const double *t, int n)
{
    double b = t[0];
    for (int i = 1; i < n; i++)
        if (t[i] < b)
            b = t[i];
    return b;
}

/* The default mode: one generated size, in a child of its own. */
static int run(double mb)
{
    long rss0 = maxrss_kib();
    size_t len, nodes, samples;
    char *json = generate((size_t)(mb * 1e6), &len, &nodes, &samples);
    long rss_gen = maxrss_kib();
    struct conv c = {0};
    if (convert(json, len, len < 4000000 ? 20 : 3, &c, NULL)) {
        conv_free(&c);
        isoprof_free(json);
        return 1;
    }
    double mbytes = (double)len / 1e6, tp = best_of(c.t_pprof, c.iters);
    double tz = best_of(c.t_zstd, c.iters), tg = best_of(c.t_gzip, c.iters);
    printf("input %.2f MB (%zu nodes, %zu samples), best of %d runs: pprof %.1f MB/s (%.2f MB), "
           "+zstd %.1f MB/s (stored %.2f MB), +gzip %.1f MB/s (%.2f MB); peak RSS %.1f MiB "
           "(%.1f MiB before converting, %.1f MiB at start)\n",
           mbytes, nodes, samples, c.iters, mbytes / tp, (double)c.pprof_len / 1e6,
           mbytes / (tp + tz), (double)c.stored_len / 1e6, mbytes / (tp + tg),
           (double)c.gzip_len / 1e6, c.rss_peak / 1024.0, rss_gen / 1024.0, rss0 / 1024.0);
    fflush(stdout); /* the child leaves with _exit */
    conv_free(&c);
    isoprof_free(json);
    return 0;
}

static int write_all(const char *path, const void *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(d, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "bench_convert: %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* --write: the generated profiles as files, each generated in a child so
 * that the files are the same bytes as the default mode converts. */
static int write_profiles(const char *dir, double mb)
{
    char path[4096];
    size_t len, nodes, samples;
    char *json = generate((size_t)(mb * 1e6), &len, &nodes, &samples);
    snprintf(path, sizeof(path), "%s/cpu-%gmb.json", dir, mb);
    int rc = write_all(path, json, len);
    if (rc == 0)
        printf("%s %zu %zu %zu\n", path, len, nodes, samples);
    fflush(stdout);
    isoprof_free(json);
    return rc;
}

static char *read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "bench_convert: %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char *d = isoprof_malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    size_t got = 0;
    while (d && got < (size_t)st.st_size) {
        ssize_t n = read(fd, d + got, (size_t)st.st_size - got);
        if (n <= 0) {
            fprintf(stderr, "bench_convert: %s: short read\n", path);
            isoprof_free(d);
            d = NULL;
        } else {
            got += (size_t)n;
        }
    }
    close(fd);
    *len = got;
    return d;
}

static void put_times(const char *key, const double *t, int n)
{
    printf(",\"%s\":[", key);
    for (int i = 0; i < n; i++)
        printf("%s%.6f", i ? "," : "", t[i]);
    printf("]");
}

/* --file: one JSON object on stdout for tests/bench/convert.js. */
static int run_file(const char *path, int iters, const char *out)
{
    long rss0 = maxrss_kib();
    size_t len;
    char *json = read_file(path, &len);
    if (json == NULL)
        return 1;
    long rss_input = maxrss_kib();
    struct conv c = {0};
    struct pprof_buf last = {0};
    int rc = convert(json, len, iters, &c, &last);
    if (rc == 0 && out)
        rc = write_all(out, last.data, last.len);
    if (rc == 0) {
        printf("{\"bytes\":%zu,\"iters\":%d", len, iters);
        put_times("pprof_s", c.t_pprof, iters);
        put_times("zstd_s", c.t_zstd, iters);
        put_times("gzip_s", c.t_gzip, iters);
        printf(",\"pprof_bytes\":%zu,\"stored_bytes\":%zu,\"gzip_bytes\":%zu,\"samples\":%" PRIu64
               ",\"zstd_version\":\"%s\",\"rss_start_kib\":%ld,\"rss_input_kib\":%ld,"
               "\"rss_peak_kib\":%ld}\n",
               c.pprof_len, c.stored_len, c.gzip_len, c.samples, ZSTD_versionString(), rss0,
               rss_input, c.rss_peak);
    }
    pprof_buf_free(&last);
    conv_free(&c);
    isoprof_free(json);
    return rc;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_convert [MB...]\n"
                    "       bench_convert --write DIR MB...\n"
                    "       bench_convert --file F [--iters N] [--out P]\n");
    return 2;
}

static int parse_mb(const char *s, double *mb)
{
    char *end;
    *mb = strtod(s, &end);
    return end != s && *end == '\0' && *mb > 0.01 && *mb < 4096;
}

/* Generates each size (default 1 and 20) in a child process of its own and
 * converts it, or writes it into dir when dir is not NULL; 1 if any failed. */
static int each_size(char **sizes, size_t n, const char *dir)
{
    static const char *const def[] = {"1", "20"};
    int bad = 0;
    for (size_t i = 0; i < (n ? n : 2); i++) {
        double mb;
        if (!parse_mb(n ? sizes[i] : def[i], &mb))
            return usage();
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0)
            _exit(dir ? write_profiles(dir, mb) : run(mb));
        int st;
        if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad = 1;
    }
    return bad;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--write") == 0) {
        if (argc < 4)
            return usage();
        return each_size(argv + 3, (size_t)argc - 3, argv[2]);
    }
    if (argc > 1 && strcmp(argv[1], "--file") == 0) {
        const char *file = argc > 2 ? argv[2] : NULL, *out = NULL;
        long iters = 5;
        for (int i = 3; i < argc; i++) {
            if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
                char *end;
                iters = strtol(argv[++i], &end, 10);
                if (*end != '\0' || iters < 1 || iters > 10000)
                    return usage();
            } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
                out = argv[++i];
            } else {
                return usage();
            }
        }
        if (file == NULL)
            return usage();
        return run_file(file, (int)iters, out);
    }
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-')
            return usage();
    return each_size(argv + 1, (size_t)argc - 1, NULL);
}

/*
 * bench_convert - measures pprof_from_cpu_json on synthetic V8 CPU profiles
 * of a given size (default ~1 MB and ~20 MB): MB/s of JSON converted and the
 * process's peak RSS (getrusage ru_maxrss), which includes the input text.
 * It measures and asserts nothing about time.
 *
 * Each size runs in its own child process so one size's peak does not
 * hide the next one's. The profile has the shape of a real one: a call tree
 * of a few tens of thousands of nodes with realistic names and file:// urls,
 * ids that are not 1..N, and ~1 ms samples whose count is sum(hitCount)+1.
 * The JSON is written into one buffer allocated once at its final size, so
 * generation does not inflate the peak.
 *
 * Usage: bench_convert [MB...]
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "pprof.h"

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

static int run(double mb)
{
    long rss0 = maxrss_kib();
    size_t len, nodes, samples;
    char *json = generate((size_t)(mb * 1e6), &len, &nodes, &samples);
    long rss_gen = maxrss_kib();
    int iters = len < 4000000 ? 20 : 3;
    double best = 1e30, sum = 0;
    struct pprof_result r = {{0}, 0, 0, 0};
    for (int i = 0; i < iters; i++) {
        struct pprof_cpu_opts o = {.interval_ns = 1000000};
        char *why = NULL;
        pprof_buf_free(&r.pprof);
        double t0 = now_s();
        int rc = pprof_from_cpu_json(json, len, &o, &r, &why);
        double dt = now_s() - t0;
        if (rc) {
            fprintf(stderr, "bench_convert: %s: %s\n", isoprof_strerror(rc), why ? why : "");
            return 1;
        }
        sum += dt;
        if (dt < best)
            best = dt;
    }
    long rss = maxrss_kib();
    printf("input %.2f MB (%zu nodes, %zu samples): best %.1f MB/s, mean %.1f MB/s over %d runs; "
           "pprof %.2f MB; peak RSS %.1f MiB (%.1f MiB before converting, %.1f MiB at start)\n",
           (double)len / 1e6, nodes, samples, (double)len / 1e6 / best,
           (double)len / 1e6 / (sum / iters), iters, (double)r.pprof.len / 1e6, rss / 1024.0,
           rss_gen / 1024.0, rss0 / 1024.0);
    fflush(stdout); /* the child leaves with _exit */
    pprof_buf_free(&r.pprof);
    isoprof_free(json);
    return 0;
}

int main(int argc, char **argv)
{
    double def[] = {1, 20};
    size_t n = argc > 1 ? (size_t)argc - 1 : 2;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double mb = argc > 1 ? strtod(argv[i + 1], NULL) : def[i];
        if (!(mb > 0.01 && mb < 4096)) {
            fprintf(stderr, "usage: bench_convert [MB...]\n");
            return 2;
        }
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0)
            _exit(run(mb));
        int st;
        if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad = 1;
    }
    return bad;
}

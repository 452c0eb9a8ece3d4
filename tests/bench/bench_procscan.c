/*
 * bench_procscan - the CPU time of host process discovery's /proc scan
 * (agent/daemon/procscan.c) on this host as it is now.
 *
 *   bench_procscan [--scans N] [--root DIR] [--version-from SRC]... [NAME...]
 *
 * Runs N scans (default 50) for executables NAME... (default node) and
 * prints one JSON line: the directory's entries, the processes matched,
 * the listeners read, the versions found (with --version-from, each a
 * discovery.processes.version_from source: every scan then looks for
 * every process's version, as the first scan that sees it does), and the
 * scan's CPU time (the calling thread's) and
 * wall time per scan, as median, mean and max in microseconds. It
 * measures; it asserts nothing. tests/bench/bench_procscan.js sets up the
 * host (hundreds of processes) and runs it.
 */
#include "base.h"
#include "procscan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void stats(const char *name, uint64_t *v, size_t n, int last)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    printf("\"%s\":{\"median_us\":%.1f,\"mean_us\":%.1f,\"max_us\":%.1f}%s", name,
           (double)v[n / 2] / 1e3, (double)sum / (double)n / 1e3, (double)v[n - 1] / 1e3,
           last ? "" : ",");
}

int main(int argc, char **argv)
{
    long scans = 50;
    const char *root = "/proc";
    const char *names[64], *vfrom[8];
    size_t nn = 0, nv = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--scans") == 0 && i + 1 < argc) {
            scans = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--root") == 0 && i + 1 < argc) {
            root = argv[++i];
        } else if (strcmp(argv[i], "--version-from") == 0 && i + 1 < argc &&
                   nv < sizeof(vfrom) / sizeof(vfrom[0])) {
            vfrom[nv++] = argv[++i];
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            puts(
                "usage: bench_procscan [--scans N] [--root DIR] [--version-from SRC]... [NAME...]");
            return 0;
        } else if (argv[i][0] == '-' || nn == sizeof(names) / sizeof(names[0])) {
            fprintf(stderr, "bench_procscan: bad argument %s (see --help)\n", argv[i]);
            return 2;
        } else {
            names[nn++] = argv[i];
        }
    }
    if (nn == 0)
        names[nn++] = "node";
    if (scans < 1 || scans > 100000) {
        fprintf(stderr, "bench_procscan: --scans 1..100000\n");
        return 2;
    }
    struct procscan_filter f = {.exe = names, .nexe = nn, .version_from = vfrom, .nversion = nv};
    uint64_t *cpu = calloc((size_t)scans, sizeof(*cpu)),
             *wall = calloc((size_t)scans, sizeof(*wall));
    if (cpu == NULL || wall == NULL)
        return 1;
    struct procscan_result r = {0};
    size_t entries = 0, matched = 0, listeners = 0, versions = 0;
    for (long i = 0; i < scans; i++) {
        char why[200];
        uint64_t t0 = now_ns();
        int rc = procscan_run(root, &f, &r, why, sizeof(why));
        wall[i] = now_ns() - t0;
        if (rc != 0) {
            fprintf(stderr, "bench_procscan: %s\n", why);
            return 1;
        }
        cpu[i] = r.cpu_ns;
        entries = r.entries;
        matched = r.n;
        listeners = r.listeners;
        versions = 0;
        for (size_t k = 0; k < r.n; k++)
            versions += r.p[k].version.version[0] != '\0';
        procscan_result_free(&r);
    }
    printf("{\"scans\":%ld,\"entries\":%zu,\"matched\":%zu,\"listeners\":%zu,\"versions\":%zu,",
           scans, entries, matched, listeners, versions);
    stats("cpu", cpu, (size_t)scans, 0);
    stats("wall", wall, (size_t)scans, 1);
    printf("}\n");
    free(cpu);
    free(wall);
    return 0;
}

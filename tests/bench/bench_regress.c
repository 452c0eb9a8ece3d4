/*
 * bench_regress - deploy regressions (agent/pprof/regress.c) at the
 * defaults, on synthetic profiles with multinomial sampling noise.
 *
 *   bench_regress [--seeds N] [--pairs N] [--runs N] [--section N]
 *
 * 1. Samples to the flag: a baseline of 30,000 samples (half an hour of
 *    the old version at the default schedule: a 10 s window a minute at
 *    10 ms, ~1,000 samples), the new version's samples added 250 at a time
 *    and judged after each, until the function is flagged; +5, +10, +30
 *    and +100 % of the version's CPU added in one function, which is either
 *    an existing one (formatRow, 21 % of the CPU, under render at 30 %) or
 *    a new one (walkNested, under replacer at 11 %). The median over N
 *    seeds (default 51), and in minutes at the default schedule (1,000
 *    samples a minute, no extra windows: an idle share lowers it); beside
 *    it the same with min_samples 1: what the test alone needs.
 * 2. False positives: P same-code pairs judged once (default 5,000), and
 *    R redeploys (default 300) judged after every window for an hour
 *    (60 looks at 1,000 samples each), with the same code and with
 *    reconcileLedger inlined in the new version only (a process restart).
 * 3. Size and speed at 1,000 and 10,000 functions: a random call tree,
 *    Zipf-weighted leaves, 16 samples a function: the encoded bytes (and
 *    gzipped), and the time of one comparison, one merge, encode and
 *    decode (median of 15).
 * 4. In the store, as the daemon keeps them (agent/daemon/deploy.c): a
 *    version's aggregate after an hour of the synthetic service (60
 *    windows of 1,000 samples) and the 1,000- and 10,000-function ones of
 *    3: bytes per version in the store (store_agg_put's stored size: key,
 *    header and zstd frame), the store stage's work per window folded
 *    (store_agg_get, decode, merge the window, encode; then store_agg_put,
 *    one write transaction, synced, timed apart: the disk's) and per
 *    comparison as the daemon makes it (the baseline read and decoded,
 *    regress_compare), median of 15, in a store in $TMPDIR (default /tmp).
 *
 * 5. Windows against the binomial test, side by side on the same draws:
 *    each window's stack weights moved by up to +-J (0, 30 and 60 %: a
 *    window's traffic and collections), a baseline of 30 windows of 1,000
 *    samples; R same-code redeploys judged after each of 60 windows (false
 *    flags within the hour), and +10 % / +30 % in formatRow and walkNested
 *    (windows to the flag, median of N seeds), each judged twice: with the
 *    windows' spread (as the daemon keeps them) and as merged counts.
 *
 *   bench_regress --section 4     runs one section only (1 to 5)
 *
 * It measures; it asserts nothing.
 */
#include "base.h"
#include "regress.h"
#include "regress_synth.h"
#include "store.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct regress_agg *agg_new(void)
{
    struct regress_agg *a = NULL;
    if (regress_agg_new(0, &a) != 0)
        abort();
    return a;
}

static int flagged(const struct regress_result *res, const char *fn)
{
    for (size_t i = 0; i < res->ngrown; i++)
        if (strcmp(res->grown[i].name, fn) == 0 && res->grown[i].flags == 0)
            return 1;
    return 0;
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static int cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return a < b ? -1 : a > b;
}

/* A median of windows, and how many runs never flagged. */
static void fmt_windows(char *out, size_t cap, int median, unsigned never, unsigned of)
{
    if (median >= 1000)
        snprintf(out, cap, "never (%u/%u)", never, of);
    else if (never)
        snprintf(out, cap, "%d (%u never)", median, never);
    else
        snprintf(out, cap, "%d", median);
}

static int cmp_dbl(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* Candidate samples until fn is flagged (0: not within 200,000). */
static uint64_t to_flag(const struct prog *base, const struct prog *grown, const char *fn,
                        uint64_t seed, const struct regress_params *prm)
{
    struct isoprof_rng r;
    isoprof_rng_seed(&r, seed);
    struct regress_agg *a = agg_new(), *b = agg_new();
    draw(base, &r, 30000, a);
    uint64_t n, hit = 0;
    for (n = 250; n <= 200000 && !hit; n += 250) {
        draw(grown, &r, 250, b);
        struct regress_result res;
        if (regress_compare(a, b, prm, &res) != 0)
            abort();
        if (flagged(&res, fn))
            hit = n;
        regress_result_free(&res);
    }
    regress_agg_free(a);
    regress_agg_free(b);
    return hit;
}

static void section_samples(unsigned seeds)
{
    static const double xs[] = {0.05, 0.10, 0.30, 1.00};
    static const struct {
        const char *stack, *fn;
    } fns[] = {
        {"formatRow;render;handleRequest;processTicks;(root)", "formatRow"},
        {"walkNested;replacer;serialize;handleRequest;processTicks;(root)", "walkNested"},
    };
    static struct prog base, grown;
    prog_service(&base, 0);
    struct regress_params def, raw;
    regress_params_default(&def);
    raw = def;
    raw.min_samples = 1;
    printf("1. samples to the flag (baseline 30,000 samples; median of %u seeds, [min-max]):\n",
           seeds);
    printf("   %-11s %6s %9s %22s %8s %22s\n", "function", "added", "share", "defaults", "minutes",
           "min_samples 1");
    uint64_t *n = calloc(seeds, sizeof(*n)), *m = calloc(seeds, sizeof(*m));
    for (size_t f = 0; f < 2; f++) {
        for (size_t i = 0; i < 4; i++) {
            prog_grown(&grown, fns[f].stack, xs[i]);
            unsigned miss = 0;
            for (unsigned s = 0; s < seeds; s++) {
                n[s] = to_flag(&base, &grown, fns[f].fn, 1000 + s, &def);
                m[s] = to_flag(&base, &grown, fns[f].fn, 1000 + s, &raw);
                miss += n[s] == 0;
            }
            qsort(n, seeds, sizeof(*n), cmp_u64);
            qsort(m, seeds, sizeof(*m), cmp_u64);
            double c = f == 0 ? 150.0 / 700 : 0;
            char d1[40], d2[40];
            snprintf(d1, sizeof(d1), "%" PRIu64 " [%" PRIu64 "-%" PRIu64 "]", n[seeds / 2], n[0],
                     n[seeds - 1]);
            snprintf(d2, sizeof(d2), "%" PRIu64 " [%" PRIu64 "-%" PRIu64 "]", m[seeds / 2], m[0],
                     m[seeds - 1]);
            printf("   %-11s %5.0f%% %3.0f%%->%2.0f%% %22s %8.1f %22s%s\n", fns[f].fn, xs[i] * 100,
                   c * 100, (c + xs[i]) / (1 + xs[i]) * 100, d1, (double)n[seeds / 2] / 1000.0, d2,
                   miss ? "  (some never flagged)" : "");
        }
    }
    free(n);
    free(m);
}

static void section_false(unsigned pairs, unsigned runs)
{
    static struct prog plain, inl;
    prog_service(&plain, 0);
    prog_service(&inl, 1);
    struct isoprof_rng r;
    isoprof_rng_seed(&r, 77);
    static const uint64_t sizes[][2] = {{2000, 1500}, {5000, 3000}, {20000, 10000}, {60000, 60000}};
    unsigned reg = 0, listed = 0;
    for (unsigned i = 0; i < pairs; i++) {
        struct regress_agg *a = agg_new(), *b = agg_new();
        draw(&plain, &r, sizes[i % 4][0], a);
        draw(&plain, &r, sizes[i % 4][1], b);
        struct regress_result res;
        if (regress_compare(a, b, NULL, &res) != 0)
            abort();
        reg += res.regressions > 0;
        listed += res.ngrown + res.nshrunk > 0;
        regress_result_free(&res);
        regress_agg_free(a);
        regress_agg_free(b);
    }
    printf("2. false positives at the defaults:\n");
    printf("   %u same-code pairs judged once (1,500 to 60,000 samples a side): %u flagged, "
           "%u with any change listed\n",
           pairs, reg, listed);
    for (int mode = 0; mode < 2; mode++) {
        unsigned freg = 0, flisted = 0;
        for (unsigned i = 0; i < runs; i++) {
            struct regress_agg *a = agg_new(), *b = agg_new();
            draw(&plain, &r, 30000, a);
            int any_reg = 0, any = 0;
            for (int w = 0; w < 60; w++) {
                draw(mode ? &inl : &plain, &r, 1000, b);
                struct regress_result res;
                if (regress_compare(a, b, NULL, &res) != 0)
                    abort();
                any_reg |= res.regressions > 0;
                any |= res.ngrown + res.nshrunk > 0;
                regress_result_free(&res);
            }
            freg += (unsigned)any_reg;
            flisted += (unsigned)any;
            regress_agg_free(a);
            regress_agg_free(b);
        }
        printf("   %u redeploys judged after each of 60 windows (%s): %u flagged within the hour, "
               "%u with any change listed\n",
               runs, mode ? "reconcileLedger inlined in the new version" : "same code", freg,
               flisted);
    }
}

/* A program of nf functions: a random call tree (each function's parent
 * one of the functions before it, the earlier ones likelier), in 50
 * files, leaves weighted by Zipf. */
static struct regress_agg *big(uint32_t nf, uint64_t seed)
{
    uint32_t *parent = calloc(nf, sizeof(*parent));
    double *cdf = calloc(nf, sizeof(*cdf));
    char(*names)[48] = calloc(nf, sizeof(*names));
    char(*files)[64] = calloc(50, sizeof(*files));
    struct isoprof_rng r;
    isoprof_rng_seed(&r, 4242); /* the same program for every seed */
    for (uint32_t i = 0; i < nf; i++) {
        double u = isoprof_rng_unit(&r);
        parent[i] = i == 0 ? 0 : (uint32_t)(u * u * i);
        snprintf(names[i], sizeof(names[i]), "%s%u", i % 3 ? "handle" : "Module.render",
                 (unsigned)(isoprof_rng_next(&r) % 100000));
    }
    for (int i = 0; i < 50; i++)
        snprintf(files[i], sizeof(files[i]), "file:///srv/app/src/module%02d/index%d.js", i, i % 7);
    double sum = 0;
    uint32_t *perm = calloc(nf, sizeof(*perm));
    for (uint32_t i = 0; i < nf; i++)
        perm[i] = i;
    for (uint32_t i = nf - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(isoprof_rng_next(&r) % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (uint32_t i = 0; i < nf; i++) {
        sum += 1.0 / (1 + perm[i] * 0.05);
        cdf[i] = sum;
    }
    isoprof_rng_seed(&r, seed);
    struct regress_agg *a = NULL;
    if (regress_agg_new(REGRESS_MAX_FNS, &a) != 0)
        abort();
    uint64_t n = 16ull * nf;
    for (uint64_t s = 0; s < n; s++) {
        double u = isoprof_rng_unit(&r) * sum;
        uint32_t lo = 0, hi = nf - 1;
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (cdf[mid] > u)
                hi = mid;
            else
                lo = mid + 1;
        }
        struct regress_frame f[64];
        size_t d = 0;
        for (uint32_t k = lo; d < 64; k = parent[k]) {
            f[d++] = (struct regress_frame){names[k], files[k % 50]};
            if (k == 0)
                break;
        }
        if (regress_agg_add(a, f, d, 1, 10000000) != 0)
            abort();
    }
    free(parent);
    free(cdf);
    free(names);
    free(files);
    free(perm);
    return a;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void section_size(void)
{
    printf("3. size and speed (median of 15):\n");
    printf("   %9s %7s %7s %10s %9s %12s %7s %9s %9s %9s\n", "functions", "edges", "samples",
           "bytes", "gzipped", "compare ms", "listed", "merge ms", "enc ms", "dec ms");
    static const uint32_t sizes[] = {1000, 10000};
    for (size_t s = 0; s < 2; s++) {
        struct regress_agg *a = big(sizes[s], 1), *b = big(sizes[s], 2);
        uint8_t *buf = NULL, *gz = NULL;
        size_t len = 0, gzl = 0;
        if (regress_agg_encode(a, &buf, &len) != 0 || isoprof_gzip(buf, len, &gz, &gzl) != 0)
            abort();
        double t[4][15];
        size_t listed = 0;
        for (int k = 0; k < 15; k++) {
            struct regress_result res;
            double t0 = now_us();
            if (regress_compare(a, b, NULL, &res) != 0)
                abort();
            double t1 = now_us();
            listed = res.ngrown + res.nshrunk;
            regress_result_free(&res);
            struct regress_agg *c = NULL;
            if (regress_agg_new(REGRESS_MAX_FNS, &c) != 0 || regress_agg_merge(c, a) != 0)
                abort();
            double t2 = now_us();
            if (regress_agg_merge(c, b) != 0)
                abort();
            double t3 = now_us();
            uint8_t *eb = NULL;
            size_t el = 0;
            if (regress_agg_encode(c, &eb, &el) != 0)
                abort();
            double t4 = now_us();
            struct regress_agg *d = NULL;
            if (regress_agg_decode(eb, el, REGRESS_MAX_FNS, &d) != 0)
                abort();
            double t5 = now_us();
            t[0][k] = t1 - t0;
            t[1][k] = t3 - t2;
            t[2][k] = t4 - t3;
            t[3][k] = t5 - t4;
            isoprof_free(eb);
            regress_agg_free(c);
            regress_agg_free(d);
        }
        for (int i = 0; i < 4; i++)
            qsort(t[i], 15, sizeof(double), cmp_dbl);
        printf("   %9u %7u %7" PRIu64 " %10zu %9zu %12.2f %7zu %9.2f %9.2f %9.2f\n", a->nfns,
               a->nedges, a->samples, len, gzl, t[0][7] / 1e3, listed, t[1][7] / 1e3, t[2][7] / 1e3,
               t[3][7] / 1e3);
        isoprof_free(buf);
        isoprof_free(gz);
        regress_agg_free(a);
        regress_agg_free(b);
    }
}

/* One version's aggregate of the synthetic service after an hour: 60
 * windows of 1,000 samples. */
static struct regress_agg *service_hour(uint64_t seed)
{
    struct prog p;
    prog_service(&p, 0);
    struct isoprof_rng r;
    isoprof_rng_seed(&r, seed);
    struct regress_agg *a = agg_new();
    draw(&p, &r, 60000, a);
    return a;
}

static int rm_entry(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return unlink(p);
}

static double median15(double *t)
{
    qsort(t, 15, sizeof(double), cmp_dbl);
    return t[7];
}

static void section_store(void)
{
    printf("4. in the store (median of 15): a window folded = read, decode, merge, encode "
           "(fold ms), then one synced write transaction (put ms); a comparison = the baseline "
           "read and decoded, compared\n");
    printf("   %-22s %9s %10s %10s %9s %9s %11s\n", "aggregate", "functions", "raw bytes", "stored",
           "fold ms", "put ms", "compare ms");
    const char *tmp = getenv("TMPDIR");
    char dir[256];
    snprintf(dir, sizeof(dir), "%s/bench-regress-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL)
        abort();
    struct store *s = NULL;
    struct store_options o = {.max_size = 256ull << 20};
    if (store_open(dir, &o, &s, NULL) != 0)
        abort();
    struct {
        const char *name;
        struct regress_agg *base, *cand;
    } cases[3] = {
        {"service, 1 h", service_hour(1), service_hour(2)},
        {"1,000 functions", big(1000, 1), big(1000, 2)},
        {"10,000 functions", big(10000, 1), big(10000, 2)},
    };
    /* A window's own aggregate: 1,000 samples of the service. */
    struct prog p;
    prog_service(&p, 0);
    struct isoprof_rng r;
    isoprof_rng_seed(&r, 9);
    struct regress_agg *win = agg_new();
    draw(&p, &r, 1000, win);
    for (size_t c = 0; c < 3; c++) {
        char worker[32];
        snprintf(worker, sizeof(worker), "w%zu", c);
        uint64_t stored = 0;
        struct regress_agg *sides[2] = {cases[c].base, cases[c].cand};
        static const char *const ver[2] = {"v1", "v2"};
        size_t raw = 0;
        for (int k = 0; k < 2; k++) {
            uint8_t *b = NULL;
            size_t len = 0;
            if (regress_agg_encode(sides[k], &b, &len) != 0)
                abort();
            struct store_agg ag = {.worker = worker,
                                   .version = ver[k],
                                   .first_ns = 1000 + (uint64_t)k,
                                   .last_ns = 2000,
                                   .windows = 60,
                                   .samples = sides[k]->samples,
                                   .busy = regress_agg_busy(sides[k])};
            if (store_agg_put(s, &ag, b, len, 8, NULL, NULL) != 0)
                abort();
            if (k == 1) {
                stored = ag.stored_size;
                raw = len;
            }
            isoprof_free(b);
        }
        double fold[15], put[15], cmp[15];
        for (int k = 0; k < 15; k++) {
            double t0 = now_us();
            void *bytes = NULL;
            size_t len = 0;
            struct store_agg info;
            struct regress_agg *a = NULL;
            uint8_t *enc = NULL;
            size_t el = 0;
            if (store_agg_get(s, worker, "v2", &info, &bytes, &len) != 0 ||
                regress_agg_decode(bytes, len, REGRESS_MAX_FNS, &a) != 0 ||
                regress_agg_merge(a, win) != 0 || regress_agg_encode(a, &enc, &el) != 0)
                abort();
            info.samples = a->samples;
            info.busy = regress_agg_busy(a);
            info.windows++;
            double tp = now_us();
            if (store_agg_put(s, &info, enc, el, 8, NULL, NULL) != 0)
                abort();
            double t1 = now_us();
            isoprof_free(bytes);
            isoprof_free(enc);
            void *bb = NULL;
            size_t bl = 0;
            struct regress_agg *base = NULL;
            struct regress_result res;
            if (store_agg_get(s, worker, "v1", NULL, &bb, &bl) != 0 ||
                regress_agg_decode(bb, bl, REGRESS_MAX_FNS, &base) != 0 ||
                regress_compare(base, a, NULL, &res) != 0)
                abort();
            double t2 = now_us();
            regress_result_free(&res);
            regress_agg_free(base);
            regress_agg_free(a);
            isoprof_free(bb);
            fold[k] = tp - t0;
            put[k] = t1 - tp;
            cmp[k] = t2 - t1;
        }
        printf("   %-22s %9u %10zu %10" PRIu64 " %9.2f %9.2f %11.2f\n", cases[c].name,
               cases[c].cand->nfns, raw, stored, median15(fold) / 1e3, median15(put) / 1e3,
               median15(cmp) / 1e3);
        regress_agg_free(cases[c].base);
        regress_agg_free(cases[c].cand);
    }
    regress_agg_free(win);
    store_close(s);
    rm_entry(dir, "data.mdb");
    rm_entry(dir, "lock.mdb");
    rmdir(dir);
}

/* A baseline of 30 windows and a new version's windows, one at a time
 * to max_w, judged after each from its min_windows-th on, both ways: with
 * the windows (w) and as merged counts (b, the binomial). hit_*: the
 * window that first flagged fn (any regression when fn is NULL); 0: none. */
static void windowed_run(const struct prog *base, const struct prog *cand, double jitter,
                         const char *fn, int max_w, uint64_t seed, int *hit_w, int *hit_b)
{
    struct isoprof_rng r;
    isoprof_rng_seed(&r, seed);
    struct regress_agg *a = agg_new(), *b = agg_new(), *a1 = agg_new(), *b1 = agg_new();
    for (int i = 0; i < 30; i++)
        draw_window(base, &r, 1000, jitter, a);
    if (regress_agg_merge(a1, a) != 0)
        abort();
    a1->wbusy = 0; /* the same counts, no windows */
    *hit_w = *hit_b = 0;
    for (int w = 1; w <= max_w && !(*hit_w && *hit_b); w++) {
        struct regress_agg *one = agg_new();
        draw_window(cand, &r, 1000, jitter, one);
        if (regress_agg_merge(b, one) != 0 || regress_agg_merge(b1, one) != 0)
            abort();
        regress_agg_free(one);
        b1->wbusy = 0;
        struct regress_result res;
        for (int k = 0; k < 2; k++) {
            int *hit = k ? hit_b : hit_w;
            if (*hit)
                continue;
            if (regress_compare(k ? a1 : a, k ? b1 : b, NULL, &res) != 0)
                abort();
            if (res.judged && (fn ? flagged(&res, fn) : res.regressions > 0))
                *hit = w;
            regress_result_free(&res);
        }
    }
    regress_agg_free(a);
    regress_agg_free(b);
    regress_agg_free(a1);
    regress_agg_free(b1);
}

static void section_windows(unsigned seeds, unsigned runs)
{
    static const double js[] = {0, 0.3, 0.6};
    static struct prog plain, grown;
    prog_service(&plain, 0);
    printf("5. windows' spread against the binomial test (baseline 30 windows of 1,000 samples; "
           "each stack's weight moved by up to +-J a window):\n");
    printf("   %-6s %-34s %14s %14s\n", "J", "", "windows", "binomial");
    int *hw = calloc(seeds > runs ? seeds : runs, sizeof(int));
    int *hb = calloc(seeds > runs ? seeds : runs, sizeof(int));
    for (size_t j = 0; j < 3; j++) {
        unsigned fw = 0, fb = 0;
        for (unsigned i = 0; i < runs; i++) {
            windowed_run(&plain, &plain, js[j], NULL, 60, 5000 + i, &hw[i], &hb[i]);
            fw += hw[i] != 0;
            fb += hb[i] != 0;
        }
        char w[32], b[32];
        snprintf(w, sizeof(w), "%u of %u", fw, runs);
        snprintf(b, sizeof(b), "%u of %u", fb, runs);
        printf("   %3.0f%%   %-34s %14s %14s\n", js[j] * 100, "same code flagged within 60 windows",
               w, b);
        static const struct {
            const char *stack, *fn;
            double x;
        } g[] = {
            {"formatRow;render;handleRequest;processTicks;(root)", "formatRow", 0.10},
            {"formatRow;render;handleRequest;processTicks;(root)", "formatRow", 0.30},
            {"walkNested;replacer;serialize;handleRequest;processTicks;(root)", "walkNested", 0.10},
            {"walkNested;replacer;serialize;handleRequest;processTicks;(root)", "walkNested", 0.30},
        };
        for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(g); k++) {
            prog_grown(&grown, g[k].stack, g[k].x);
            unsigned mw = 0, mb = 0;
            for (unsigned s = 0; s < seeds; s++) {
                windowed_run(&plain, &grown, js[j], g[k].fn, 60, 9000 + s, &hw[s], &hb[s]);
                mw += hw[s] == 0;
                mb += hb[s] == 0;
                if (hw[s] == 0)
                    hw[s] = 1000; /* never: sorts last */
                if (hb[s] == 0)
                    hb[s] = 1000;
            }
            qsort(hw, seeds, sizeof(int), cmp_int);
            qsort(hb, seeds, sizeof(int), cmp_int);
            char label[64];
            snprintf(label, sizeof(label), "+%.0f%% %s: windows to the flag", g[k].x * 100,
                     g[k].fn);
            char w2[32], b2[32];
            fmt_windows(w2, sizeof(w2), hw[seeds / 2], mw, seeds);
            fmt_windows(b2, sizeof(b2), hb[seeds / 2], mb, seeds);
            printf("   %3.0f%%   %-34s %14s %14s\n", js[j] * 100, label, w2, b2);
        }
    }
    free(hw);
    free(hb);
}

int main(int argc, char **argv)
{
    unsigned seeds = 51, pairs = 5000, runs = 300, section = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seeds") == 0)
            seeds = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--pairs") == 0)
            pairs = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--runs") == 0)
            runs = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--section") == 0)
            section = (unsigned)strtoul(argv[i + 1], NULL, 10);
    }
    if (seeds == 0)
        seeds = 1;
    printf("defaults: alpha %g (Holm), min_delta %.2f, min_ratio %.2f, min_samples %d non-idle, "
           "caller_z %.1f, min_windows %d\n",
           REGRESS_ALPHA, REGRESS_MIN_DELTA, REGRESS_MIN_RATIO, REGRESS_MIN_SAMPLES,
           REGRESS_CALLER_Z, REGRESS_MIN_WINDOWS);
    if (section == 0 || section == 1)
        section_samples(seeds);
    if (section == 0 || section == 2)
        section_false(pairs, runs);
    if (section == 0 || section == 3)
        section_size();
    if (section == 0 || section == 4)
        section_store();
    if (section == 0 || section == 5)
        section_windows(seeds, runs > 100 ? 100 : runs);
    return 0;
}

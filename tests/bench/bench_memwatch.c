/*
 * bench_memwatch - the memory watch (agent/daemon/memwatch.c) on long
 * simulated runs, polled once a second on a simulated clock.
 *
 *   bench_memwatch [--hours H] [--stall-ms MS] [--window-s S]
 *
 * 1. Leaks at 0.5, 2 and 10 MB/min over an 80 MB service with up to 8 MB
 *    of garbage over its floor, against a 1 GiB old space (1,072 MiB) and
 *    the default 24 h horizon: minutes from the leak's start to the
 *    memory_growth flag, and the heap then.
 * 2. Steady controls (a cache that fills then plateaus, sawtooth garbage,
 *    a load step, GC noise), H hours each (default 24): false positives
 *    per hour.
 * 3. An hour-long near-limit episode, each heap window stalling the
 *    isolate MS (default 48, the p50 measured on a Fastify service):
 *    windows taken and stall share, before (one every 10 s, never
 *    waiting) and after (the back-off to the 300 s heap period, within
 *    1 %).
 *
 * It measures; it asserts nothing.
 */
#include "memwatch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC 1000000000ull
#define MIN (60 * SEC)
#define MIB (1024.0 * 1024.0)

static uint64_t rng = 1;
static double rnd(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / (double)(1ull << 53);
}

static double rate_mb_min;
static double s_leak(double t)
{
    return 80 + rate_mb_min * t / 60 + 8 * rnd();
}
static double s_cache(double t)
{
    return (t < 15 ? 40 + 200 * t / 15 : 240) + 3 * rnd();
}
static double s_saw(double t)
{
    return 60 + 200 * fmod(t, 20) / 20 + 2 * rnd();
}
static double s_step(double t)
{
    return (fmod(t, 7200) < 3600 ? 100 : 220) + 20 * rnd();
}
static double s_noise(double t)
{
    (void)t;
    return 150 + 40 * rnd() * rnd();
}

static void params(struct memwatch_params *p, uint64_t window_ns)
{
    memset(p, 0, sizeof(*p));
    p->threshold = 0.9;
    p->cooldown_ns = 2 * MIN;
    p->heap_first_ns = 10 * SEC;
    p->heap_max_ns = 300 * SEC;
    p->max_share = 0.01;
    p->growth = 1;
    p->growth_window_ns = window_ns;
    p->growth_horizon_ns = 24 * 60 * MIN;
}

/* Poll fn for dur; counts growth opens; *first the first one's time since
 * the start (0: none) and *heap the heap then. */
static unsigned run(double (*fn)(double), const struct memwatch_params *p, uint64_t limit,
                    uint64_t dur, uint64_t *first, double *heap)
{
    struct memwatch m;
    memwatch_init(&m);
    memwatch_set_limit(&m, limit, MEMWATCH_SRC_FLAG);
    unsigned opens = 0;
    *first = 0;
    for (uint64_t now = SEC; now < SEC + dur; now += SEC) {
        double mb = fn((double)(now - SEC) / 1e9);
        struct memwatch_actions a;
        memwatch_poll(&m, p, now, (uint64_t)(mb * MIB), &a);
        if (a.open & (1u << MEMWATCH_GROWTH)) {
            if (opens++ == 0) {
                *first = now - SEC;
                *heap = mb;
            }
            m.k[MEMWATCH_GROWTH].ep = &m;
        }
        if (a.end & (1u << MEMWATCH_GROWTH))
            m.k[MEMWATCH_GROWTH].ep = NULL;
    }
    return opens;
}

int main(int argc, char **argv)
{
    double hours = 24, stall_ms = 48, window_s = 600;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--hours") == 0)
            hours = strtod(argv[i + 1], NULL);
        else if (strcmp(argv[i], "--stall-ms") == 0)
            stall_ms = strtod(argv[i + 1], NULL);
        else if (strcmp(argv[i], "--window-s") == 0)
            window_s = strtod(argv[i + 1], NULL);
        else {
            fprintf(stderr, "usage: %s [--hours H] [--stall-ms MS] [--window-s S]\n", argv[0]);
            return 2;
        }
    }
    struct memwatch_params p;
    params(&p, (uint64_t)(window_s * 1e9));
    uint64_t limit = 1072ull << 20;
    printf("growth window %.0f s, horizon 24 h, limit 1072 MiB\n\n", window_s);
    printf("%-14s %-16s %-14s\n", "leak MB/min", "minutes to flag", "heap at flag MB");
    static const double rates[] = {0.5, 2, 10};
    for (unsigned i = 0; i < 3; i++) {
        rate_mb_min = rates[i];
        rng = 42 + i;
        uint64_t first;
        double heap = 0;
        /* long enough for the slowest to reach the limit */
        run(s_leak, &p, limit, (uint64_t)(1000.0 / rates[i] * 60) * SEC, &first, &heap);
        if (first)
            printf("%-14.1f %-16.1f %-14.0f\n", rates[i], (double)first / 60e9, heap);
        else
            printf("%-14.1f %-16s %-14s\n", rates[i], "never", "-");
    }
    printf("\n%-14s %-8s %-16s\n", "control", "hours", "false pos/hour");
    static const struct {
        const char *name;
        double (*fn)(double);
    } ctl[] = {{"cache fill", s_cache}, {"sawtooth", s_saw}, {"load step", s_step},
               {"gc noise", s_noise}};
    for (unsigned i = 0; i < 4; i++) {
        rng = 7 + i;
        uint64_t first;
        double heap;
        unsigned n = run(ctl[i].fn, &p, 512ull << 20, (uint64_t)(hours * 3600) * SEC, &first, &heap);
        printf("%-14s %-8.0f %-16.3f\n", ctl[i].name, hours, n / hours);
    }
    /* An hour near the limit. Before: a heap window every 10 s. */
    double before_n = 3600 / 10 + 1;
    struct memwatch m;
    memwatch_init(&m);
    memwatch_set_limit(&m, 160ull << 20, MEMWATCH_SRC_FLAG);
    unsigned after_n = 0;
    uint64_t end = SEC + 3600 * SEC;
    for (uint64_t now = SEC; now < end; now += SEC) {
        struct memwatch_actions a;
        memwatch_poll(&m, &p, now, 150ull << 20, &a);
        if (a.heap) {
            after_n++;
            memwatch_heap_cost(&m, (uint64_t)(stall_ms * 1e6));
        }
    }
    printf("\nan hour near the limit, %.0f ms a heap window (a forced full GC)\n", stall_ms);
    printf("%-8s %-14s %-12s %-10s\n", "", "heap windows", "stall s", "share");
    printf("%-8s %-14.0f %-12.2f %.4f%%\n", "before", before_n, before_n * stall_ms / 1000,
           before_n * stall_ms / 1000 / 3600 * 100);
    printf("%-8s %-14u %-12.2f %.4f%%\n", "after", after_n, (double)m.cost_ns / 1e9,
           memwatch_cost_share(&m, end) * 100);
    return 0;
}

/*
 * test_memwatch.c - the memory watch (agent/daemon/memwatch.c) on a
 * simulated clock: the limit rules, the near-limit episode's heap windows
 * (back-off and cost cap), and the growth detector on synthetic series.
 *
 * A series is a function of time giving the isolate's live heap (the
 * floor) plus what garbage it holds at that instant; the simulation polls
 * it once a second, as the daemon does, and records every action. Each
 * heap window stalls the isolate a fixed cost, reported back as the daemon
 * does. Hours run in milliseconds; each test names the rule it breaks.
 */
#include "../test.h"
#include "memwatch.h"
#include "store.h"

#include <math.h>

#define MS 1000000ull
#define SEC 1000000000ull
#define MIN (60 * SEC)
#define MIB (1ull << 20)

/* A reproducible generator for the noise of the series. */
static uint64_t rng_state;
static double rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / (double)(1ull << 53);
}

static void params(struct memwatch_params *p)
{
    memset(p, 0, sizeof(*p));
    p->threshold = 0.9;
    p->cooldown_ns = 2 * MIN;
    p->heap_first_ns = 10 * SEC;
    p->heap_max_ns = 300 * SEC;
    p->max_share = 0.01;
    p->snapshot = 0;
    p->growth = 1;
    p->growth_window_ns = 10 * MIN;
    p->growth_horizon_ns = 24 * 60 * MIN;
}

/* What one run saw. */
struct run {
    unsigned opened[MEMWATCH_NKINDS], ended[MEMWATCH_NKINDS];
    uint64_t first_open_ns[MEMWATCH_NKINDS]; /* since the start; 0: never */
    uint64_t used_at_open[MEMWATCH_NKINDS];
    unsigned heaps[MEMWATCH_NKINDS];
    uint64_t heap_at[256]; /* the near-limit episode's heap windows, since the start */
    unsigned nheap_at;
    unsigned snapshots;
};

/* The heap at t (s since the start): a model of one service. */
typedef double (*series_fn)(double t);

/* Poll fn once a second from start for dur, each heap window costing
 * heap_cost of stall. */
static void run(struct memwatch *m, const struct memwatch_params *p, series_fn fn, uint64_t start,
                uint64_t dur, uint64_t heap_cost, struct run *r)
{
    memset(r, 0, sizeof(*r));
    for (uint64_t now = start; now < start + dur; now += SEC) {
        double mb = fn((double)(now - start) / 1e9);
        uint64_t used = mb <= 0 ? 1 : (uint64_t)(mb * (double)MIB);
        struct memwatch_actions a;
        memwatch_poll(m, p, now, used, &a);
        for (unsigned k = 0; k < MEMWATCH_NKINDS; k++) {
            if (a.open & (1u << k)) {
                r->opened[k]++;
                if (r->first_open_ns[k] == 0) {
                    r->first_open_ns[k] = now - start + 1;
                    r->used_at_open[k] = used;
                }
                m->k[k].ep = (void *)m; /* the daemon's episode: any pointer */
            }
            if (a.end & (1u << k)) {
                r->ended[k]++;
                m->k[k].ep = NULL;
            }
        }
        if (a.heap) {
            r->heaps[a.heap_kind]++;
            if (a.heap_kind == MEMWATCH_NEAR) {
                if (r->nheap_at < 256)
                    r->heap_at[r->nheap_at++] = now - start;
                memwatch_heap_cost(m, heap_cost);
            }
        }
        if (a.snapshot) {
            r->snapshots++;
            memwatch_snapshot_done(m, (enum memwatch_kind)a.snap_kind);
        }
    }
}

/* --- the limit rules --- */

static uint64_t limit_of(const char *runtime, const char *cmd, size_t clen, const char *env,
                         size_t elen, uint8_t *src)
{
    return memwatch_v8_limit(runtime, cmd, clen, env, elen, 24ull << 30, src);
}

#define ARGV(s) s, sizeof(s) /* a NUL-separated literal, its last NUL included */

TEST(limit_rules_node)
{
    uint8_t src;
    /* Measured on Node 20 on a 24 GiB machine: 4,144 MiB by default. */
    CHECK_EQ_INT(limit_of("node", ARGV("node\0app.js"), NULL, 0, &src), 4144 * MIB);
    CHECK_EQ_INT(src, MEMWATCH_SRC_V8_DEFAULT);
    CHECK_STR(memwatch_source_name(src), "auto:v8-default");
    /* Old space + 48 MiB: 160 -> 208, 512 -> 560, 1024 -> 1072. */
    CHECK_EQ_INT(limit_of("node", ARGV("node\0--max-old-space-size=160\0app.js"), NULL, 0, &src),
                 208 * MIB);
    CHECK_EQ_INT(src, MEMWATCH_SRC_FLAG);
    CHECK_EQ_INT(limit_of("node", ARGV("node\0--max_old_space_size=1024\0app.js"), NULL, 0, &src),
                 1072 * MIB);
    /* The semi-space flag: 4,096 + 3 x 64, and 512 + 3 x 4. */
    CHECK_EQ_INT(limit_of("node", ARGV("node\0--max-semi-space-size=64\0app.js"), NULL, 0, &src),
                 4288 * MIB);
    CHECK_EQ_INT(limit_of("node",
                          ARGV("node\0--max-old-space-size=512\0--max-semi-space-size=4\0a.js"),
                          NULL, 0, &src),
                 524 * MIB);
    /* --max-heap-size is the whole heap. */
    CHECK_EQ_INT(limit_of("node", ARGV("node\0--max-heap-size=300\0app.js"), NULL, 0, &src),
                 300 * MIB);
    /* NODE_OPTIONS (measured: 300 -> 348), and the command line over it. */
    CHECK_EQ_INT(limit_of("node", ARGV("node\0app.js"),
                          ARGV("PATH=/bin\0NODE_OPTIONS=--max-old-space-size=300"), &src),
                 348 * MIB);
    CHECK_EQ_INT(src, MEMWATCH_SRC_NODE_OPTIONS);
    CHECK_EQ_INT(limit_of("node", ARGV("node\0--max-old-space-size=160\0app.js"),
                          ARGV("NODE_OPTIONS=--max-old-space-size=300"), &src),
                 208 * MIB);
    CHECK_EQ_INT(src, MEMWATCH_SRC_FLAG);
    /* A flag after the script is the script's; one with a value that is
     * not a number is not V8's; an option taking the next word is skipped. */
    CHECK_EQ_INT(limit_of("node", ARGV("node\0app.js\0--max-old-space-size=160"), NULL, 0, &src),
                 4144 * MIB);
    CHECK_EQ_INT(limit_of("node", ARGV("node\0--max-old-space-size=lots\0app.js"), NULL, 0, &src),
                 4144 * MIB);
    CHECK_EQ_INT(limit_of("node", ARGV("node\0-r\0x\0--max-old-space-size=160\0app.js"), NULL, 0,
                          &src),
                 208 * MIB);
    /* A small machine: the old space a quarter of it, smaller semi-spaces. */
    CHECK_EQ_INT(memwatch_v8_limit("node", ARGV("node\0a.js"), NULL, 0, 2ull << 30, &src),
                 (512 + 3 * 4) * MIB);
    /* Unknown command line: V8's default. */
    CHECK_EQ_INT(limit_of("node", NULL, 0, NULL, 0, &src), 4144 * MIB);
    CHECK_EQ_INT(src, MEMWATCH_SRC_V8_DEFAULT);
}

TEST(limit_rules_deno)
{
    uint8_t src;
    /* Measured on Deno 2: 4,192 MiB by default; 160 -> 256, 300 -> 396. */
    CHECK_EQ_INT(limit_of("deno", ARGV("deno\0run\0a.ts"), NULL, 0, &src), 4192 * MIB);
    CHECK_EQ_INT(src, MEMWATCH_SRC_V8_DEFAULT);
    CHECK_EQ_INT(
        limit_of("deno", ARGV("deno\0run\0--v8-flags=--max-old-space-size=160\0a.ts"), NULL, 0,
                 &src),
        256 * MIB);
    CHECK_EQ_INT(src, MEMWATCH_SRC_FLAG);
    CHECK_EQ_INT(limit_of("deno", ARGV("deno\0run\0a.ts"),
                          ARGV("DENO_V8_FLAGS=--expose-gc,--max-old-space-size=300"), &src),
                 396 * MIB);
    CHECK_EQ_INT(src, MEMWATCH_SRC_DENO_V8_FLAGS);
    CHECK_STR(memwatch_source_name(src), "auto:DENO_V8_FLAGS");
    /* Node's variable means nothing to Deno. */
    CHECK_EQ_INT(limit_of("deno", ARGV("deno\0run\0a.ts"),
                          ARGV("NODE_OPTIONS=--max-old-space-size=300"), &src),
                 4192 * MIB);
    CHECK_STR(memwatch_source_name(MEMWATCH_SRC_WORKERD), "auto:workerd");
    CHECK_EQ_INT(MEMWATCH_WORKERD_LIMIT, 128 * MIB);
    CHECK_STR(memwatch_source_name(MEMWATCH_NSOURCES), "?");
    CHECK_EQ_INT(memwatch_kind_anomaly(MEMWATCH_GROWTH), STORE_ANOMALY_MEMORY_GROWTH);
    CHECK_STR(store_anomaly_name(STORE_ANOMALY_MEMORY_GROWTH), "memory_growth");
}

/* --- memory_near_limit --- */

static double s_150(double t)
{
    (void)t;
    return 150;
}

/* The same 150 MB: under V8's default limit nothing opens; under 208 MiB
 * (threshold 187) neither; under 160 MiB it does, once, with one heap
 * window at once. Nothing opens while the limit is unknown. */
TEST(near_limit_by_the_limit)
{
    struct memwatch_params p;
    params(&p);
    p.growth = 0;
    struct memwatch m;
    struct run r;
    memwatch_init(&m);
    run(&m, &p, s_150, SEC, 5 * MIN, 50 * MS, &r);
    CHECK_EQ_INT(r.opened[MEMWATCH_NEAR], 0); /* limit unknown */
    memwatch_set_limit(&m, 4144 * MIB, MEMWATCH_SRC_V8_DEFAULT);
    run(&m, &p, s_150, 10 * MIN, 5 * MIN, 50 * MS, &r);
    CHECK_EQ_INT(r.opened[MEMWATCH_NEAR], 0);
    memwatch_init(&m);
    memwatch_set_limit(&m, 160 * MIB, MEMWATCH_SRC_CONFIG);
    run(&m, &p, s_150, SEC, 5 * MIN, 50 * MS, &r);
    CHECK_EQ_INT(r.opened[MEMWATCH_NEAR], 1);
    CHECK_EQ_INT(r.first_open_ns[MEMWATCH_NEAR], 1); /* the first poll */
    CHECK(r.nheap_at >= 1 && r.heap_at[0] == 0);
    CHECK(m.k[MEMWATCH_NEAR].open);
    CHECK_EQ_INT(memwatch_threshold(&m, &p), (uint64_t)(0.9 * 160 * MIB));
}

/* The back-off: 10, 20, 40, 80, 160 s, then every 300 s (the heap period);
 * an hour costs 16 windows, not 360. */
TEST(near_limit_heap_windows_back_off)
{
    struct memwatch_params p;
    params(&p);
    p.growth = 0;
    struct memwatch m;
    struct run r;
    memwatch_init(&m);
    memwatch_set_limit(&m, 160 * MIB, MEMWATCH_SRC_CONFIG);
    run(&m, &p, s_150, SEC, 60 * MIN, 50 * MS, &r);
    REQUIRE(r.nheap_at >= 8);
    static const uint64_t gaps[] = {10, 20, 40, 80, 160, 300, 300};
    for (unsigned i = 0; i < 7; i++)
        CHECK_EQ_INT(r.heap_at[i + 1] - r.heap_at[i], gaps[i] * SEC);
    /* 0, 10, 30, 70, 150, 310, then every 300 s to 3600 s: 16. */
    CHECK_EQ_INT(r.nheap_at, 16);
    CHECK_EQ_INT(m.heap_windows, 16);
    CHECK_EQ_INT(m.cost_ns, 16 * 50 * MS);
    CHECK(memwatch_cost_share(&m, SEC + 60 * MIN) < 0.001);
    CHECK_EQ_INT(m.waited, 0);
}

/* The cost cap: windows that stall 2 s each would take 10 % of the time
 * at one every 20 s; past 1 % of the episode's time they wait, so that the
 * share stays at the cap (within one window's cost) however long it lasts. */
TEST(near_limit_cost_cap)
{
    struct memwatch_params p;
    params(&p);
    p.growth = 0;
    p.heap_max_ns = 20 * SEC;
    struct memwatch m;
    struct run r;
    memwatch_init(&m);
    memwatch_set_limit(&m, 160 * MIB, MEMWATCH_SRC_CONFIG);
    uint64_t start = SEC;
    run(&m, &p, s_150, start, 60 * MIN, 2 * SEC, &r);
    uint64_t end = start + 60 * MIN;
    double share = memwatch_cost_share(&m, end);
    CHECK(share <= 0.01 + 2.0 / 3600.0);
    CHECK(share >= 0.008);
    CHECK(m.waited > 0);
    /* without the cap: 180 windows; with it: about 18 */
    CHECK(r.nheap_at >= 15 && r.nheap_at <= 20);
    /* The first one never waits, whatever the cost so far. */
    CHECK_EQ_INT(r.heap_at[0], 0);
}

/* The episode ends after a cooldown under the threshold, its heap windows
 * stop; a new one needs another cooldown after the last open. */
static double s_up_down(double t)
{
    return t < 300 ? 150 : t < 900 ? 50 : 150;
}

TEST(near_limit_ends_and_cools_down)
{
    struct memwatch_params p;
    params(&p);
    p.growth = 0;
    p.snapshot = 1;
    struct memwatch m;
    struct run r;
    memwatch_init(&m);
    memwatch_set_limit(&m, 160 * MIB, MEMWATCH_SRC_CONFIG);
    run(&m, &p, s_up_down, SEC, 20 * MIN, 50 * MS, &r);
    CHECK_EQ_INT(r.opened[MEMWATCH_NEAR], 2);
    CHECK_EQ_INT(r.ended[MEMWATCH_NEAR], 1);
    CHECK_EQ_INT(r.snapshots, 2); /* one per episode */
    for (unsigned i = 0; i < r.nheap_at; i++)
        CHECK(r.heap_at[i] < 300 * SEC + p.cooldown_ns || r.heap_at[i] >= 900 * SEC);
    struct memwatch_actions a;
    memwatch_gone(&m, &a);
    CHECK_EQ_INT(a.end, 1u << MEMWATCH_NEAR);
    CHECK(!m.k[MEMWATCH_NEAR].open);
}

/* --- memory_growth --- */

static double leak_mb_min; /* the leak's rate */
static double noise_mb;    /* garbage over the floor, uniform 0..noise */

static double s_leak(double t)
{
    return 80 + leak_mb_min * t / 60.0 + noise_mb * rnd();
}

/* A leak at several rates against a 1 GiB limit is flagged within a few
 * windows, long before half the limit; its heap window comes at once. */
TEST(growth_flags_a_leak)
{
    static const double rates[] = {2, 10, 30};
    for (unsigned i = 0; i < 3; i++) {
        struct memwatch_params p;
        params(&p);
        struct memwatch m;
        struct run r;
        rng_state = 7 + i;
        leak_mb_min = rates[i];
        noise_mb = 8;
        memwatch_init(&m);
        memwatch_set_limit(&m, 1072 * MIB, MEMWATCH_SRC_FLAG);
        run(&m, &p, s_leak, SEC, 60 * MIN, 50 * MS, &r);
        CHECK_EQ_INT(r.opened[MEMWATCH_GROWTH], 1);
        CHECK(r.first_open_ns[MEMWATCH_GROWTH] <= 12 * MIN);
        CHECK(r.used_at_open[MEMWATCH_GROWTH] < 536 * MIB);
        CHECK(r.heaps[MEMWATCH_GROWTH] == 1);
        CHECK(m.g.rate * 60 / MIB > rates[i] * 0.8 && m.g.rate * 60 / MIB < rates[i] * 1.2);
    }
    /* A slow leak that would take days to reach the limit is not flagged
     * with the default horizon, and is with a longer one. */
    struct memwatch_params p;
    params(&p);
    struct memwatch m;
    struct run r;
    rng_state = 3;
    leak_mb_min = 0.5;
    noise_mb = 0.5;
    memwatch_init(&m);
    memwatch_set_limit(&m, 4144 * MIB, MEMWATCH_SRC_V8_DEFAULT);
    run(&m, &p, s_leak, SEC, 60 * MIN, 50 * MS, &r);
    CHECK_EQ_INT(r.opened[MEMWATCH_GROWTH], 0);
    p.growth_horizon_ns = 30ull * 24 * 60 * MIN;
    memwatch_init(&m);
    memwatch_set_limit(&m, 4144 * MIB, MEMWATCH_SRC_V8_DEFAULT);
    run(&m, &p, s_leak, SEC, 60 * MIN, 50 * MS, &r);
    CHECK_EQ_INT(r.opened[MEMWATCH_GROWTH], 1);
}

/* The episode ends half a window after the growth stopped. */
static double s_leak_then_stop(double t)
{
    double live = t < 1800 ? 80 + 10 * t / 60 : 380;
    return live + 4 * rnd();
}

TEST(growth_ends_when_it_stops)
{
    struct memwatch_params p;
    params(&p);
    struct memwatch m;
    struct run r;
    rng_state = 11;
    memwatch_init(&m);
    memwatch_set_limit(&m, 1072 * MIB, MEMWATCH_SRC_FLAG);
    run(&m, &p, s_leak_then_stop, SEC, 60 * MIN, 50 * MS, &r);
    CHECK_EQ_INT(r.opened[MEMWATCH_GROWTH], 1);
    CHECK_EQ_INT(r.ended[MEMWATCH_GROWTH], 1);
    CHECK(!m.k[MEMWATCH_GROWTH].open);
}

/* The steady ones: no anomaly of any kind over hours. */
static double s_cache_fill(double t) /* fills 15 s, then plateaus */
{
    return (t < 15 ? 40 + 200 * t / 15 : 240) + 3 * rnd();
}
static double s_slow_fill(double t) /* fills over 6 minutes, then plateaus */
{
    return (t < 360 ? 40 + 300 * t / 360 : 340) + 3 * rnd();
}
static double s_sawtooth(double t) /* 60 MB live, 200 MB of garbage a 20 s tooth */
{
    return 60 + 200 * fmod(t, 20) / 20 + 2 * rnd();
}
static double s_slow_sawtooth(double t) /* old-space garbage a major GC clears every 4 min */
{
    return 100 + 80 * fmod(t, 240) / 240 + 2 * rnd();
}
static double s_load_step(double t) /* steps up at 25 min and stays */
{
    return (t < 1500 ? 100 : 220) + 20 * rnd();
}
static double s_ramp(double t) /* a load ramp over 5 minutes, then stays */
{
    return (t < 1500 ? 100 : t < 1800 ? 100 + 150 * (t - 1500) / 300 : 250) + 10 * rnd();
}
static double s_gc_noise(double t) /* flat, the floor jumping 0..40 MB */
{
    (void)t;
    return 150 + 40 * rnd() * rnd();
}

TEST(growth_quiet_on_steady_heaps)
{
    static const struct {
        const char *name;
        series_fn fn;
    } cases[] = {{"cache fill", s_cache_fill}, {"slow fill", s_slow_fill},
                 {"sawtooth", s_sawtooth},     {"slow sawtooth", s_slow_sawtooth},
                 {"load step", s_load_step},   {"ramp", s_ramp},
                 {"gc noise", s_gc_noise}};
    for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct memwatch_params p;
        params(&p);
        struct memwatch m;
        struct run r;
        rng_state = 100 + i;
        memwatch_init(&m);
        /* A limit the trend of any of them would reach within the horizon. */
        memwatch_set_limit(&m, 512 * MIB, MEMWATCH_SRC_CONFIG);
        run(&m, &p, cases[i].fn, SEC, 4 * 60 * MIN, 50 * MS, &r);
        if (r.opened[MEMWATCH_GROWTH] || r.opened[MEMWATCH_NEAR])
            fprintf(stderr, "  %s: flagged (growth %u near %u)\n", cases[i].name,
                    r.opened[MEMWATCH_GROWTH], r.opened[MEMWATCH_NEAR]);
        CHECK_EQ_INT(r.opened[MEMWATCH_GROWTH], 0);
        CHECK_EQ_INT(r.opened[MEMWATCH_NEAR], 0);
        CHECK(m.g.judged);
    }
}

/* A heap that only swings, polled at 1 Hz through the shortest window
 * (60 s: 32 buckets of about two polls, so a bucket's floor is rarely the
 * heap's bottom): measured on a real Node sawtooth (40 MiB live and
 * request garbage), its floors came between 43 and 55 MiB at random. Its
 * lower envelope rises at the newest end by construction; it is not a
 * leak. A leak of 70 MiB/min under the same swing still is. */
static double s_swing(double t)
{
    (void)t;
    return 43 + 12 * rnd();
}

TEST(growth_short_window_swing_not_a_leak)
{
    struct memwatch_params p;
    params(&p);
    p.growth_window_ns = 60 * SEC;
    struct memwatch m;
    struct run r;
    for (unsigned seed = 1; seed <= 20; seed++) {
        rng_state = seed;
        memwatch_init(&m);
        memwatch_set_limit(&m, 4144 * MIB, MEMWATCH_SRC_V8_DEFAULT);
        run(&m, &p, s_swing, SEC, 2 * 60 * MIN, 50 * MS, &r);
        if (r.opened[MEMWATCH_GROWTH])
            fprintf(stderr, "  seed %u: flagged\n", seed);
        CHECK_EQ_INT(r.opened[MEMWATCH_GROWTH], 0);
    }
    rng_state = 5;
    leak_mb_min = 70;
    noise_mb = 12;
    memwatch_init(&m);
    memwatch_set_limit(&m, 1072 * MIB, MEMWATCH_SRC_FLAG);
    run(&m, &p, s_leak, SEC, 5 * MIN, 50 * MS, &r);
    CHECK_EQ_INT(r.opened[MEMWATCH_GROWTH], 1);
    CHECK(r.first_open_ns[MEMWATCH_GROWTH] <= 3 * MIN);
}

/* Gaps (no poll for a while: a snapshot held the isolate) are not growth,
 * and a window of gaps is not judged; a reconfigured window starts over. */
TEST(growth_gaps_and_reconfigure)
{
    struct memwatch_params p;
    params(&p);
    struct memwatch m;
    memwatch_init(&m);
    memwatch_set_limit(&m, 512 * MIB, MEMWATCH_SRC_CONFIG);
    struct memwatch_actions a;
    uint64_t now = SEC;
    for (; now < 11 * MIN; now += SEC)
        memwatch_poll(&m, &p, now, 100 * MIB, &a);
    CHECK(m.g.judged && !m.g.steady);
    /* eight minutes without a poll, then one: most of the window is gaps */
    now += 8 * MIN;
    memwatch_poll(&m, &p, now, 300 * MIB, &a);
    CHECK_EQ_INT(a.open, 0);
    CHECK(!m.g.steady);
    p.growth_window_ns = 2 * MIN;
    memwatch_poll(&m, &p, now + SEC, 100 * MIB, &a);
    CHECK_EQ_INT(m.g.judged, 0);
    CHECK_EQ_INT(m.g.bucket_ns, 2 * MIN / MEMWATCH_BUCKETS);
    /* turned off: nothing is judged to open */
    p.growth = 0;
    for (now += 2 * SEC; now < 40 * MIN; now += SEC) {
        memwatch_poll(&m, &p, now, (uint64_t)(100 * MIB + (now / SEC) * MIB / 2), &a);
        CHECK_EQ_INT(a.open & (1u << MEMWATCH_GROWTH), 0);
    }
}

int main(void)
{
    RUN(limit_rules_node);
    RUN(limit_rules_deno);
    RUN(near_limit_by_the_limit);
    RUN(near_limit_heap_windows_back_off);
    RUN(near_limit_cost_cap);
    RUN(near_limit_ends_and_cools_down);
    RUN(growth_flags_a_leak);
    RUN(growth_ends_when_it_stops);
    RUN(growth_quiet_on_steady_heaps);
    RUN(growth_short_window_swing_not_a_leak);
    RUN(growth_gaps_and_reconfigure);
    TEST_EXIT();
}

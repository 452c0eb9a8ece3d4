/*
 * test_detect.c - the P999 spike detector (agent/latency/latency.c), driven by a
 * simulated clock and seeded random request latencies.
 *
 * The central claim is that a steady stream never flags: 5,000 requests
 * a second for many simulated minutes, drawn from a realistic steady
 * distribution (lognormal around 5 ms with a tail to 40 ms), across
 * several seeds, must give zero START events; so must a stream just above
 * min_count a window, where the P999 is nearly the maximum. Then a slow
 * path (1 request in 500 at 200-400 ms) must START exactly once, in the
 * first window holding it, and END a cooldown after it stops. The rest
 * covers the gates (min_count, min_ns, warmup, cooldown), relearning a
 * level that stays up, the series bound, idle eviction and labels; and a
 * flood of distinct worker tags: it fills the table, but a known worker's
 * new series still gets in and its spike still flags, the refusals are
 * counted, and the junk expires by itself.
 */
#include "base.h"
#include "hist.h"
#include "latency.h"
#include "rng.h"
#include "test.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>

#define MS 1000000ull
#define SEC 1000000000ull
#define MIN (60 * SEC)
/* requests a second of the busy streams: 50,000 a window, 50 above P999 */
#define RATE 5000

/* --- event capture --- */

#define MAX_EVENTS 64
struct evlog {
    int n, starts, ends;
    struct latency_event ev[MAX_EVENTS];
    char worker[MAX_EVENTS][64], version[MAX_EVENTS][64];
};

static void on_event(const struct latency_event *ev, void *arg)
{
    struct evlog *g = arg;
    if (ev->kind == LATENCY_START)
        g->starts++;
    else
        g->ends++;
    if (g->n >= MAX_EVENTS)
        return;
    g->ev[g->n] = *ev;
    snprintf(g->worker[g->n], sizeof(g->worker[0]), "%.*s", (int)ev->worker_len, ev->worker);
    snprintf(g->version[g->n], sizeof(g->version[0]), "%.*s", (int)ev->version_len, ev->version);
    g->ev[g->n].worker = g->worker[g->n];
    g->ev[g->n].version = g->version[g->n];
    g->n++;
}

/* --- the simulation --- */

/* The steady distribution: lognormal around 5 ms, 2 % of requests
 * anywhere from 10 to 40 ms. Its P999 is about 38 ms. */
static uint64_t steady_ns(struct rng *r)
{
    if (rng_unit(r) < 0.02)
        return (uint64_t)rng_uniform(r, 10e6, 40e6);
    return (uint64_t)rng_lognormal(r, 5e6, 0.45);
}

struct sim {
    struct latency *l;
    struct rng r;
    uint64_t now, next_tick, tick_every;
    struct evlog log;
    /* the slow path: requests in [slow_from, slow_until) are slow with
     * probability slow_p, uniform in [slow_lo, slow_hi) */
    uint64_t slow_from, slow_until;
    double slow_p, slow_lo, slow_hi;
    /* the steady part: steady_ns(), or lognormal(median, sigma) */
    double median, sigma;
    /* the test's own view of each window's P999 (one series only) */
    struct hist *mirror;
    uint64_t mirror_end;
    uint64_t p999_lo, p999_hi; /* range over windows with >= min_count */
    uint64_t min_count;
};

static void sim_init(struct sim *s, const struct latency_params *p, uint64_t seed)
{
    memset(s, 0, sizeof(*s));
    REQUIRE(latency_new(p, &s->l) == 0);
    rng_seed(&s->r, seed);
    s->now = 1000 * SEC + 1234567; /* not aligned to a window */
    s->tick_every = SEC;
    s->next_tick = s->now;
    s->p999_lo = UINT64_MAX;
    s->min_count = p ? p->min_count : 500;
}

static void sim_free(struct sim *s)
{
    latency_free(s->l);
    isoprof_free(s->mirror);
    s->l = NULL;
}

static uint64_t sim_draw(struct sim *s)
{
    if (s->now >= s->slow_from && s->now < s->slow_until && rng_unit(&s->r) < s->slow_p)
        return (uint64_t)rng_uniform(&s->r, s->slow_lo, s->slow_hi);
    if (s->median > 0)
        return (uint64_t)rng_lognormal(&s->r, s->median, s->sigma);
    return steady_ns(&s->r);
}

static void sim_mirror(struct sim *s, uint64_t v)
{
    if (s->mirror == NULL) {
        s->mirror = isoprof_malloc(sizeof(*s->mirror));
        if (s->mirror == NULL)
            abort();
        hist_init(s->mirror);
        s->mirror_end = s->now - s->now % (10 * SEC) + 10 * SEC;
    }
    if (s->now >= s->mirror_end) {
        if (hist_count(s->mirror) >= s->min_count) {
            uint64_t p = hist_quantile(s->mirror, 0.999);
            if (p < s->p999_lo)
                s->p999_lo = p;
            if (p > s->p999_hi)
                s->p999_hi = p;
        }
        hist_reset(s->mirror);
        s->mirror_end = s->now - s->now % (10 * SEC) + 10 * SEC;
    }
    hist_record(s->mirror, v, 1);
}

/* From `from` until `until`, a request is slow with probability p,
 * uniform in [lo, hi) ns. */
static void sim_slow(struct sim *s, uint64_t from, uint64_t until, double p, double lo, double hi)
{
    s->slow_from = from;
    s->slow_until = until;
    s->slow_p = p;
    s->slow_lo = lo;
    s->slow_hi = hi;
}

/* Advance the clock by dur at `rate` requests a second for (w, v),
 * ticking every tick_every. mirror: keep the test's own P999 per window. */
static void sim_run(struct sim *s, const char *w, const char *v, uint64_t dur, uint64_t rate,
                    int mirror)
{
    uint64_t step = SEC / rate, end = s->now + dur;
    size_t wl = strlen(w), vl = strlen(v);
    while (s->now < end) {
        if (s->now >= s->next_tick) {
            latency_tick(s->l, s->now, on_event, &s->log);
            s->next_tick += s->tick_every;
        }
        uint64_t x = sim_draw(s);
        if (mirror)
            sim_mirror(s, x);
        int rc = latency_observe(s->l, w, wl, v, vl, x, 1, s->now);
        if (rc != 0) {
            CHECK_EQ_INT(rc, 0);
            return;
        }
        s->now += step;
    }
}

/* The next window boundary at or after now, plus off. */
static uint64_t next_window(const struct sim *s, uint64_t off)
{
    return s->now - s->now % (10 * SEC) + 10 * SEC + off;
}

static void print_events(const struct evlog *g)
{
    for (int i = 0; i < g->n; i++) {
        const struct latency_event *e = &g->ev[i];
        fprintf(stderr,
                "     %s %s/%s window [%" PRIu64 ", %" PRIu64 ") s p999 %.1f ms baseline %.1f "
                "threshold %.1f max %.1f n %" PRIu64 "%s\n",
                e->kind == LATENCY_START ? "START" : "END  ", e->worker, e->version,
                (uint64_t)(e->window_start_ns / SEC), (uint64_t)(e->window_end_ns / SEC),
                (double)e->p999_ns / 1e6, (double)e->baseline_ns / 1e6,
                (double)e->threshold_ns / 1e6, (double)e->max_p999_ns / 1e6, e->count,
                e->relearned ? " relearned" : "");
    }
}

/* --- tests --- */

TEST(params)
{
    struct latency_params d;
    latency_params_default(&d);
    CHECK_EQ_INT(d.window_ns, 10 * SEC);
    CHECK(d.factor == 3.0);
    CHECK_EQ_INT(d.min_ns, 50 * MS);
    CHECK_EQ_INT(d.min_count, 500);
    CHECK_EQ_INT(d.cooldown_ns, 2 * MIN);
    CHECK(d.alpha == 0.3);
    CHECK_EQ_INT(d.max_series, 1024);
    CHECK_EQ_INT(d.warmup, 3);
    CHECK_EQ_INT(d.min_tail, 5);
    CHECK_EQ_INT(d.idle_ns, 10 * MIN);
    CHECK_EQ_INT(d.relearn_ns, 20 * MIN);

    struct latency *l = NULL;
    REQUIRE(latency_new(NULL, &l) == 0);
    latency_free(l);
    latency_free(NULL);

    struct latency_params b;
#define BAD(field, value)                                                                          \
    do {                                                                                           \
        b = d;                                                                                     \
        b.field = value;                                                                           \
        l = NULL;                                                                                  \
        CHECK_EQ_INT(latency_new(&b, &l), -EINVAL);                                                \
        CHECK(l == NULL);                                                                          \
    } while (0)
    BAD(window_ns, 0);
    BAD(window_ns, MS - 1);
    BAD(factor, 0.5);
    BAD(factor, NAN);
    BAD(factor, INFINITY);
    BAD(alpha, 0);
    BAD(alpha, 1.5);
    BAD(alpha, NAN);
    BAD(min_count, 0);
    BAD(max_series, 0);
    BAD(max_series, 65537);
    BAD(warmup, 0);
    BAD(idle_ns, d.cooldown_ns + 2 * d.window_ns - 1);
    BAD(relearn_ns, 0);
    BAD(cooldown_ns, UINT64_MAX);
#undef BAD
    CHECK_EQ_INT(latency_new(&d, NULL), -EINVAL);
}

TEST(observe_args)
{
    struct latency *l = NULL;
    REQUIRE(latency_new(NULL, &l) == 0);
    char big[300];
    memset(big, 'x', sizeof(big));
    CHECK_EQ_INT(latency_observe(l, "w", 0, "v", 1, MS, 1, SEC), -EINVAL);
    CHECK_EQ_INT(latency_observe(l, NULL, 1, "v", 1, MS, 1, SEC), -EINVAL);
    CHECK_EQ_INT(latency_observe(l, big, 256, "v", 1, MS, 1, SEC), -EINVAL);
    CHECK_EQ_INT(latency_observe(l, "w", 1, big, 256, MS, 1, SEC), -EINVAL);
    CHECK_EQ_INT(latency_observe(l, "w", 1, NULL, 1, MS, 1, SEC), -EINVAL);
    CHECK_EQ_INT(latency_observe(l, "w", 1, "v", 1, MS, 0, SEC), 0); /* count 0: nothing */
    CHECK_EQ_INT(latency_stats(l).series, 0);
    CHECK_EQ_INT(latency_observe(l, big, 255, big, 255, MS, 1, SEC), 0);
    CHECK_EQ_INT(latency_observe(l, "w", 1, NULL, 0, MS, 1, SEC), 0); /* empty version */
    CHECK_EQ_INT(latency_observe(l, "w", 1, "", 0, MS, 1, SEC), 0);   /* the same series */
    CHECK_EQ_INT(latency_stats(l).series, 2);
    latency_free(l);
}

/* One steady stream of dur at rate for seed: lognormal(median, sigma), or
 * steady_ns() when median is 0. Nothing may flag. */
static void steady_case(uint64_t seed, double median, double sigma, uint64_t dur, uint64_t rate)
{
    struct sim s;
    sim_init(&s, NULL, seed);
    s.median = median;
    s.sigma = sigma;
    sim_run(&s, "api", "v1", dur, rate, 1);
    fprintf(stderr, "     seed %" PRIu64 " sigma %.2f: window P999 %.1f .. %.1f ms, %d START\n",
            seed, s.sigma, (double)s.p999_lo / 1e6, (double)s.p999_hi / 1e6, s.log.starts);
    CHECK_EQ_INT(s.log.starts, 0);
    CHECK_EQ_INT(s.log.ends, 0);
    CHECK_EQ_INT(latency_stats(s.l).series, 1);
    CHECK_EQ_INT(latency_stats(s.l).episodes, 0);
    print_events(&s.log);
    sim_free(&s);
}

/* (a) a steady stream never flags */
TEST(steady_never_flags)
{
    for (uint64_t seed = 1; seed <= 4; seed++)
        steady_case(seed, 0, 0, 12 * MIN, RATE);
}

/* (a) the same with a heavier tail: lognormal sigma 1 around 5 ms (P999
 * about 110 ms, P9999 about 200 ms) */
TEST(steady_heavy_tail_never_flags)
{
    for (uint64_t seed = 11; seed <= 13; seed++)
        steady_case(seed, 5e6, 1.0, 10 * MIN, RATE);
}

/* (a) just over min_count per window, where P999 is close to the maximum
 * of the window: hours of it, several seeds, no START */
TEST(steady_low_traffic_never_flags)
{
    for (uint64_t seed = 21; seed <= 26; seed++)
        steady_case(seed, 5e6, seed % 2 ? 0.45 : 0.8, 180 * MIN, 60); /* 600 a window */
}

/* (b) a slow path: one START in the first window holding it, no repeat
 * while it lasts, END a cooldown after it stops; then quiet again */
TEST(slow_path_flags_once)
{
    for (uint64_t seed = 31; seed <= 33; seed++) {
        struct sim s;
        sim_init(&s, NULL, seed);
        sim_run(&s, "api", "v42", 5 * MIN, RATE, 0);
        /* the window holds 9 s of it */
        uint64_t from = next_window(&s, SEC);
        sim_slow(&s, from, from + 4 * MIN, 1.0 / 500, 200e6, 400e6);
        sim_run(&s, "api", "v42", 4 * MIN + 20 * SEC, RATE, 0);
        CHECK_EQ_INT(s.log.starts, 1);
        CHECK_EQ_INT(s.log.ends, 0);
        sim_run(&s, "api", "v42", 6 * MIN, RATE, 0);
        print_events(&s.log);
        CHECK_EQ_INT(s.log.starts, 1);
        CHECK_EQ_INT(s.log.ends, 1);
        REQUIRE(s.log.n == 2);
        const struct latency_event *st = &s.log.ev[0], *en = &s.log.ev[1];
        CHECK_EQ_INT(st->kind, LATENCY_START);
        CHECK_STR(st->worker, "api");
        CHECK_STR(st->version, "v42");
        CHECK(st->window_start_ns <= s.slow_from && s.slow_from < st->window_end_ns);
        CHECK_EQ_INT(st->window_end_ns - st->window_start_ns, 10 * SEC);
        CHECK(st->p999_ns >= 200 * MS && st->p999_ns < 400 * MS);
        CHECK(st->baseline_ns >= 20 * MS && st->baseline_ns <= 45 * MS);
        CHECK(st->threshold_ns >= 50 * MS);
        CHECK(fabs((double)st->threshold_ns - 3.0 * (double)st->baseline_ns) <= 2);
        CHECK(st->count >= RATE * 10 * 95 / 100 && st->count <= RATE * 10 * 105 / 100);
        CHECK_EQ_INT(st->max_p999_ns, st->p999_ns);
        CHECK_EQ_INT(st->episode_start_ns, st->window_start_ns);

        CHECK_EQ_INT(en->kind, LATENCY_END);
        CHECK_STR(en->worker, "api");
        CHECK_STR(en->version, "v42");
        CHECK_EQ_INT(en->relearned, 0);
        CHECK(en->max_p999_ns >= st->p999_ns);
        CHECK_EQ_INT(en->episode_start_ns, st->window_start_ns);
        /* the last window above is one of the last of the slow path */
        CHECK(en->last_above_ns <= s.slow_until + 10 * SEC);
        CHECK(en->last_above_ns + 20 * SEC >= s.slow_until);
        /* back under the threshold for a cooldown, and not a window more */
        CHECK(en->window_end_ns - en->last_above_ns >= 2 * MIN);
        CHECK(en->window_end_ns - en->last_above_ns < 2 * MIN + 10 * SEC);
        CHECK(en->p999_ns < en->threshold_ns);
        CHECK_EQ_INT(latency_stats(s.l).in_episode, 0);
        CHECK_EQ_INT(latency_stats(s.l).episodes, 1);
        sim_free(&s);
    }
}

/* A level that stays up past relearn_ns becomes the baseline: END with
 * relearned, no new START at that level, none when it comes back down. */
TEST(long_spike_relearns)
{
    struct sim s;
    sim_init(&s, NULL, 41);
    sim_run(&s, "api", "v1", 3 * MIN, RATE, 0);
    uint64_t from = next_window(&s, 0);
    sim_slow(&s, from, from + 30 * MIN, 1.0 / 200, 200e6, 400e6);
    sim_run(&s, "api", "v1", 30 * MIN + 10 * SEC, RATE, 0);
    sim_run(&s, "api", "v1", 10 * MIN, RATE, 0);
    print_events(&s.log);
    CHECK_EQ_INT(s.log.starts, 1);
    CHECK_EQ_INT(s.log.ends, 1);
    REQUIRE(s.log.n == 2);
    CHECK_EQ_INT(s.log.ev[1].kind, LATENCY_END);
    CHECK_EQ_INT(s.log.ev[1].relearned, 1);
    uint64_t lasted = s.log.ev[1].window_end_ns - s.log.ev[1].episode_start_ns;
    CHECK(lasted >= 20 * MIN && lasted < 20 * MIN + 10 * SEC);
    sim_free(&s);
}

/* No START within cooldown of the previous one. With relearn_ns of one
 * window the first episode ends at once and the spike level becomes the
 * baseline; a far bigger spike right after must wait out the cooldown. */
TEST(start_rate_limited)
{
    struct latency_params p;
    latency_params_default(&p);
    p.relearn_ns = 10 * SEC;
    p.warmup = 1;
    struct sim s;
    sim_init(&s, &p, 51);
    sim_run(&s, "api", "v1", 2 * MIN, RATE, 0);
    sim_slow(&s, next_window(&s, 0), UINT64_MAX, 1.0 / 200, 200e6, 400e6);
    sim_run(&s, "api", "v1", 40 * SEC, RATE, 0);
    CHECK_EQ_INT(s.log.starts, 1);
    CHECK_EQ_INT(s.log.ends, 1); /* relearned */
    s.slow_lo = 3000e6;
    s.slow_hi = 4000e6;
    sim_run(&s, "api", "v1", 3 * MIN, RATE, 0);
    print_events(&s.log);
    CHECK_EQ_INT(s.log.starts, 2);
    REQUIRE(s.log.n >= 3);
    CHECK_EQ_INT(s.log.ev[0].kind, LATENCY_START);
    CHECK_EQ_INT(s.log.ev[1].kind, LATENCY_END);
    CHECK_EQ_INT(s.log.ev[1].relearned, 1);
    CHECK_EQ_INT(s.log.ev[2].kind, LATENCY_START);
    uint64_t gap = s.log.ev[2].window_end_ns - s.log.ev[0].window_end_ns;
    CHECK(gap >= p.cooldown_ns && gap < p.cooldown_ns + 10 * SEC);
    sim_free(&s);
}

/* (c) fewer than min_count observations a window never flag, however slow */
TEST(low_traffic_never_flags)
{
    struct sim s;
    sim_init(&s, NULL, 61);
    s.median = 1000e6; /* 1 s */
    s.sigma = 0.1;
    sim_run(&s, "quiet", "v1", 30 * MIN, 40, 0); /* 400 a window: never a baseline */
    CHECK_EQ_INT(s.log.starts, 0);
    sim_free(&s);

    /* a baseline from busy traffic, then few but very slow requests */
    sim_init(&s, NULL, 62);
    sim_run(&s, "api", "v1", 5 * MIN, RATE, 0);
    s.median = 2000e6;
    s.sigma = 0.1;
    sim_run(&s, "api", "v1", 10 * MIN, 49, 0); /* 490 a window */
    CHECK_EQ_INT(s.log.starts, 0);
    /* and at 600 a window the same requests do flag */
    sim_run(&s, "api", "v1", 1 * MIN, 60, 0);
    CHECK_EQ_INT(s.log.starts, 1);
    sim_free(&s);
}

/* (d) a p999 under min_ns never flags, however many times the baseline */
TEST(below_min_ns_never_flags)
{
    struct sim s;
    sim_init(&s, NULL, 71);
    s.median = 0.5e6; /* 0.5 ms: P999 about 2 ms */
    s.sigma = 0.45;
    sim_run(&s, "fast", "v1", 3 * MIN, RATE, 0);
    /* P999 about 45 ms: 20 x the baseline, under 50 ms */
    uint64_t from = next_window(&s, 0);
    sim_slow(&s, from, from + 5 * MIN, 1.0 / 100, 20e6, 49e6);
    sim_run(&s, "fast", "v1", 10 * MIN, RATE, 0);
    CHECK_EQ_INT(s.log.starts, 0);
    sim_free(&s);

    /* the same series with a spike just over min_ns flags, against the
     * min_ns threshold: the gate is what held the first one back */
    sim_init(&s, NULL, 72);
    s.median = 0.5e6;
    s.sigma = 0.45;
    sim_run(&s, "fast", "v1", 3 * MIN, RATE, 0);
    from = next_window(&s, 0);
    sim_slow(&s, from, from + MIN, 1.0 / 100, 60e6, 80e6);
    sim_run(&s, "fast", "v1", 2 * MIN, RATE, 0);
    CHECK_EQ_INT(s.log.starts, 1);
    REQUIRE(s.log.n >= 1);
    CHECK_EQ_INT(s.log.ev[0].threshold_ns, 50 * MS);
    sim_free(&s);
}

/* A series that is slow from its first window learns that as its
 * baseline; slow warmup windows followed by normal traffic flag nothing
 * either (the inflated baseline decays). */
TEST(no_flag_during_warmup)
{
    struct sim s;
    sim_init(&s, NULL, 75);
    sim_slow(&s, 0, UINT64_MAX, 1.0 / 100, 500e6, 900e6);
    sim_run(&s, "api", "v1", 10 * MIN, RATE, 0);
    CHECK_EQ_INT(s.log.starts, 0);
    sim_free(&s);

    sim_init(&s, NULL, 76);
    /* the partial window and one more */
    sim_slow(&s, 0, next_window(&s, 10 * SEC), 1.0 / 100, 500e6, 900e6);
    sim_run(&s, "api", "v1", 10 * MIN, RATE, 0);
    CHECK_EQ_INT(s.log.starts, 0);
    sim_free(&s);
}

/* (e) the series bound, idle eviction, memory accounting */
TEST(series_bound_and_eviction)
{
    struct latency_params p;
    latency_params_default(&p);
    p.max_series = 100;
    struct latency *l = NULL;
    REQUIRE(latency_new(&p, &l) == 0);
    uint64_t t = 5000 * SEC;
    uint64_t empty_bytes = latency_stats(l).bytes;
    char w[32];
    for (int i = 0; i < 150; i++) {
        snprintf(w, sizeof(w), "worker-%d", i);
        int rc = latency_observe(l, w, strlen(w), "v1", 2, 5 * MS, 7, t);
        if (i < 100)
            CHECK_EQ_INT(rc, 0);
        else
            CHECK_EQ_INT(rc, -ENOSPC);
    }
    struct latency_stats st = latency_stats(l);
    CHECK_EQ_INT(st.series, 100);
    CHECK_EQ_INT(st.refused_series, 50);
    CHECK_EQ_INT(st.refused, 50 * 7);
    uint64_t per_series = (st.bytes - empty_bytes) / 100;
    fprintf(stderr, "     %" PRIu64 " bytes per series, %" PRIu64 " for the table of %u\n",
            per_series, empty_bytes, p.max_series);
    CHECK(per_series > sizeof(struct hist) && per_series < sizeof(struct hist) + 256);
    /* a known pair is still taken */
    CHECK_EQ_INT(latency_observe(l, "worker-5", 8, "v1", 2, 5 * MS, 1, t), 0);

    /* workers 0..9 stay active; the other 90 go idle and are freed after
     * idle_ns, and new pairs fit again */
    struct evlog log = {0};
    for (uint64_t now = t; now < t + p.idle_ns + 30 * SEC; now += SEC) {
        for (int i = 0; i < 10; i++) {
            snprintf(w, sizeof(w), "worker-%d", i);
            CHECK_EQ_INT(latency_observe(l, w, strlen(w), "v1", 2, 5 * MS, 1, now), 0);
        }
        latency_tick(l, now, on_event, &log);
        if (now < t + p.idle_ns)
            CHECK_EQ_INT(latency_stats(l).series, 100);
    }
    st = latency_stats(l);
    CHECK_EQ_INT(st.series, 10);
    CHECK_EQ_INT(st.evicted, 90);
    CHECK_EQ_INT(st.bytes - empty_bytes, 10 * per_series);
    CHECK_EQ_INT(log.n, 0);
    CHECK_EQ_INT(latency_observe(l, "new", 3, "v9", 2, 5 * MS, 1, t + p.idle_ns + 31 * SEC), 0);
    CHECK_EQ_INT(latency_stats(l).series, 11);
    latency_free(l);

    /* the default bound: 1024 series, and what they cost */
    REQUIRE(latency_new(NULL, &l) == 0);
    for (int i = 0; i < 1100; i++) {
        snprintf(w, sizeof(w), "w%d", i);
        latency_observe(l, w, strlen(w), "version-1.2.3", 13, (uint64_t)i * MS, 1, t);
    }
    st = latency_stats(l);
    CHECK_EQ_INT(st.series, 1024);
    CHECK_EQ_INT(st.refused_series, 76);
    fprintf(stderr, "     1024 series: %.1f MiB\n", (double)st.bytes / (1 << 20));
    latency_free(l);
}

/* (f) events carry the worker and version of the series that spiked */
TEST(event_labels)
{
    struct latency *l = NULL;
    REQUIRE(latency_new(NULL, &l) == 0);
    struct rng r;
    rng_seed(&r, 81);
    static const char *pairs[][2] = {
        {"api", "v1"}, {"api", "v2"}, {"db", "v1"}, {"apiv", "2"}, {"edge", ""}};
    struct evlog log = {0};
    uint64_t t0 = 7777 * SEC;
    uint64_t spike_from = t0 + 5 * MIN, spike_until = t0 + 8 * MIN;
    for (uint64_t now = t0; now < t0 + 14 * MIN; now += 250000) { /* 4000/s per series */
        for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(pairs); i++) {
            uint64_t v = steady_ns(&r);
            int slow = (i == 1 || i == 4) && now >= spike_from && now < spike_until;
            if (slow && rng_unit(&r) < 0.01)
                v = (uint64_t)rng_uniform(&r, 300e6, 500e6);
            latency_observe(l, pairs[i][0], strlen(pairs[i][0]), pairs[i][1], strlen(pairs[i][1]),
                            v, 1, now);
        }
        if (now % SEC == 0)
            latency_tick(l, now, on_event, &log);
    }
    print_events(&log);
    CHECK_EQ_INT(log.starts, 2);
    CHECK_EQ_INT(log.ends, 2);
    int api_v2 = 0, edge = 0;
    for (int i = 0; i < log.n; i++) {
        if (strcmp(log.worker[i], "api") == 0 && strcmp(log.version[i], "v2") == 0)
            api_v2++;
        else if (strcmp(log.worker[i], "edge") == 0 && strcmp(log.version[i], "") == 0)
            edge++;
        else
            CHECK(0);
    }
    CHECK_EQ_INT(api_v2, 2);
    CHECK_EQ_INT(edge, 2);
    latency_free(l);
}

/* Ticks that stall close the missed windows as one empty window, which
 * ends an episode but starts none. */
TEST(tick_gap)
{
    struct sim s;
    sim_init(&s, NULL, 91);
    sim_run(&s, "api", "v1", 3 * MIN, RATE, 0);
    sim_slow(&s, next_window(&s, 0), UINT64_MAX, 1.0 / 200, 200e6, 400e6);
    sim_run(&s, "api", "v1", 30 * SEC, RATE, 0);
    CHECK_EQ_INT(s.log.starts, 1);
    /* nothing at all for ten minutes, then one tick */
    uint64_t later = s.now + 10 * MIN;
    latency_tick(s.l, later, on_event, &s.log);
    CHECK_EQ_INT(s.log.ends, 1);
    REQUIRE(s.log.n == 2);
    CHECK_EQ_INT(s.log.ev[1].window_end_ns, later - later % (10 * SEC));
    CHECK_EQ_INT(s.log.ev[1].count, 0);
    /* a tick again within the same window does nothing */
    latency_tick(s.l, later + SEC, on_event, &s.log);
    CHECK_EQ_INT(s.log.n, 2);
    sim_free(&s);
}

/* --- a flood of worker tags --- */

/* The workers the caller watches: a list the test changes as it goes. */
struct known_set {
    const char *w[4];
};

static int known_worker(const char *worker, size_t wlen, void *arg)
{
    const struct known_set *k = arg;
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(k->w); i++)
        if (k->w[i] != NULL && strlen(k->w[i]) == wlen && memcmp(k->w[i], worker, wlen) == 0)
            return 1;
    return 0;
}

/* One line from each of n junk workers at now, as a sender of
 * distinct worker tags would; refusals are expected. */
static void junk_lines(struct latency *l, int n, uint64_t now)
{
    char w[32];
    for (int i = 0; i < n; i++) {
        snprintf(w, sizeof(w), "junk-%d", i);
        (void)latency_observe(l, w, strlen(w), "v1", 2, 5 * MS, 1, now);
    }
}

/* dur of (w, v) at RATE with the n junk workers sending every second. */
static void sim_run_flooded(struct sim *s, const char *w, const char *v, int n, uint64_t dur)
{
    uint64_t end = s->now + dur;
    while (s->now < end && !test_failed_) {
        junk_lines(s->l, n, s->now);
        sim_run(s, w, v, SEC, RATE, 0);
    }
}

/* dur with no observation at all, ticking as the agent does. */
static void sim_quiet(struct sim *s, uint64_t dur)
{
    uint64_t end = s->now + dur;
    while (s->now < end) {
        if (s->now >= s->next_tick) {
            latency_tick(s->l, s->now, on_event, &s->log);
            s->next_tick += s->tick_every;
        }
        s->now += 100 * MS;
    }
}

/* The finding: 1,100 distinct worker tags fill the 1,024-series table and
 * keep sending; a known worker that shows up after them must still be
 * tracked, learn its baseline and flag its spike, while unknown newcomers
 * are refused and counted. */
TEST(flood_does_not_blind_known_worker)
{
    struct sim s;
    sim_init(&s, NULL, 101);
    struct known_set k = {{"api"}};
    latency_set_known(s.l, known_worker, &k);
    junk_lines(s.l, 1100, s.now);
    struct latency_stats st = latency_stats(s.l);
    CHECK_EQ_INT(st.series, 1024);
    CHECK_EQ_INT(st.refused_series, 76);

    sim_run_flooded(&s, "api", "v1", 1100, 3 * MIN);
    st = latency_stats(s.l);
    CHECK_EQ_INT(st.series, 1024); /* the bound holds */
    CHECK_EQ_INT(st.known, 1);
    CHECK_EQ_INT(st.displaced, 1);
    CHECK(st.refused_series > 76 + 180 * 76);
    CHECK_EQ_INT(latency_observe(s.l, "other", 5, "v1", 2, 5 * MS, 1, s.now), -ENOSPC);

    uint64_t from = next_window(&s, SEC);
    sim_slow(&s, from, from + MIN, 1.0 / 500, 200e6, 400e6);
    sim_run_flooded(&s, "api", "v1", 1100, MIN + 20 * SEC);
    print_events(&s.log);
    CHECK_EQ_INT(s.log.starts, 1);
    REQUIRE(s.log.n >= 1);
    CHECK_STR(s.log.worker[0], "api");
    CHECK_STR(s.log.version[0], "v1");
    CHECK(s.log.ev[0].window_start_ns <= from && from < s.log.ev[0].window_end_ns);
    CHECK_EQ_INT(latency_stats(s.l).series, 1024);
    sim_free(&s);
}

/* A burst of junk tags that stops is gone after idle_ns (10 min): before
 * that, new unknown workers are refused; after it, they get in. */
TEST(idle_junk_expires)
{
    struct sim s;
    sim_init(&s, NULL, 102);
    uint64_t t0 = s.now;
    junk_lines(s.l, 1100, t0);
    CHECK_EQ_INT(latency_stats(s.l).series, 1024);
    CHECK_EQ_INT(latency_stats(s.l).refused_series, 76);
    sim_quiet(&s, 10 * MIN - 5 * SEC);
    CHECK_EQ_INT(latency_stats(s.l).series, 1024);
    CHECK_EQ_INT(latency_observe(s.l, "late", 4, "v1", 2, 5 * MS, 1, s.now), -ENOSPC);
    CHECK_EQ_INT(latency_stats(s.l).refused_series, 77);
    sim_quiet(&s, 10 * SEC);
    struct latency_stats st = latency_stats(s.l);
    CHECK_EQ_INT(st.series, 0);
    CHECK_EQ_INT(st.evicted, 1024);
    CHECK_EQ_INT(latency_observe(s.l, "late", 4, "v1", 2, 5 * MS, 1, s.now), 0);
    CHECK_EQ_INT(latency_stats(s.l).series, 1);
    CHECK_EQ_INT(s.log.n, 0);
    sim_free(&s);
}

/* A worker quiet for minutes (under idle_ns) keeps its baseline: its
 * first slow window after the pause flags, which a new series (warming
 * up on the slow traffic) could not. */
TEST(quiet_worker_keeps_baseline)
{
    struct sim s;
    sim_init(&s, NULL, 103);
    sim_run(&s, "api", "v1", 3 * MIN, RATE, 0);
    sim_quiet(&s, 9 * MIN);
    CHECK_EQ_INT(latency_stats(s.l).series, 1);
    uint64_t from = next_window(&s, 0);
    sim_quiet(&s, from - s.now);
    sim_slow(&s, from, UINT64_MAX, 1.0 / 500, 200e6, 400e6);
    sim_run(&s, "api", "v1", 11 * SEC, RATE, 0);
    CHECK_EQ_INT(s.log.starts, 1);
    REQUIRE(s.log.n >= 1);
    CHECK_EQ_INT(s.log.ev[0].window_start_ns, from);
    sim_free(&s);
}

/* Who makes room for whom when the table is full. */
TEST(known_displaces_least_recent_unknown)
{
    struct latency_params p;
    latency_params_default(&p);
    p.max_series = 4;
    struct latency *l = NULL;
    REQUIRE(latency_new(&p, &l) == 0);
    struct known_set k = {{"api"}};
    latency_set_known(l, known_worker, &k);
    uint64_t t = 3000 * SEC;
    static const char *u[] = {"u1", "u2", "u3", "u4"};
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(latency_observe(l, u[i], 2, "v", 1, MS, 1, t + (uint64_t)i * MS), 0);
    CHECK_EQ_INT(latency_observe(l, "u1", 2, "v", 1, MS, 1, t + 4 * MS), 0); /* u2 is oldest */
    CHECK_EQ_INT(latency_observe(l, "u5", 2, "v", 1, MS, 1, t + 5 * MS), -ENOSPC);
    CHECK_EQ_INT(latency_observe(l, "api", 3, "v1", 2, MS, 1, t + 6 * MS), 0);
    struct latency_stats st = latency_stats(l);
    CHECK_EQ_INT(st.series, 4);
    CHECK_EQ_INT(st.known, 1);
    CHECK_EQ_INT(st.displaced, 1);
    CHECK_EQ_INT(latency_observe(l, "u2", 2, "v", 1, MS, 1, t + 7 * MS), -ENOSPC); /* it went */
    CHECK_EQ_INT(latency_observe(l, "u3", 2, "v", 1, MS, 1, t + 8 * MS), 0);
    CHECK_EQ_INT(latency_observe(l, "u4", 2, "v", 1, MS, 1, t + 9 * MS), 0);
    /* u1 is the oldest now; then u3, then u4 */
    CHECK_EQ_INT(latency_observe(l, "api", 3, "v2", 2, MS, 1, t + 10 * MS), 0);
    CHECK_EQ_INT(latency_observe(l, "u1", 2, "v", 1, MS, 1, t + 11 * MS), -ENOSPC);
    CHECK_EQ_INT(latency_observe(l, "api", 3, "v3", 2, MS, 1, t + 12 * MS), 0);
    CHECK_EQ_INT(latency_observe(l, "api", 3, "v4", 2, MS, 1, t + 13 * MS), 0);
    CHECK_EQ_INT(latency_observe(l, "u4", 2, "v", 1, MS, 1, t + 14 * MS), -ENOSPC);
    /* all known: a known newcomer is refused too, never a known series displaced */
    CHECK_EQ_INT(latency_observe(l, "api", 3, "v5", 2, MS, 1, t + 15 * MS), -ENOSPC);
    st = latency_stats(l);
    CHECK_EQ_INT(st.series, 4);
    CHECK_EQ_INT(st.known, 4);
    CHECK_EQ_INT(st.displaced, 4);
    CHECK_EQ_INT(st.refused_series, 5);

    /* The caller stops watching api and starts watching db: the series are
     * ranked anew at the window close, and db takes the oldest api's place. */
    k.w[0] = "db";
    /* until then the api series are still ranked known: no room */
    CHECK_EQ_INT(latency_observe(l, "db", 2, "v1", 2, MS, 1, t + 16 * MS), -ENOSPC);
    CHECK_EQ_INT(latency_stats(l).known, 4);
    latency_tick(l, t + 20 * SEC, NULL, NULL);
    CHECK_EQ_INT(latency_stats(l).known, 0);
    CHECK_EQ_INT(latency_observe(l, "db", 2, "v1", 2, MS, 1, t + 21 * SEC), 0);
    st = latency_stats(l);
    CHECK_EQ_INT(st.known, 1);
    CHECK_EQ_INT(st.displaced, 5);
    CHECK_EQ_INT(latency_observe(l, "api", 3, "v1", 2, MS, 1, t + 22 * SEC), -ENOSPC);
    CHECK_EQ_INT(latency_observe(l, "api", 3, "v2", 2, MS, 1, t + 22 * SEC), 0);
    latency_free(l);
}

/* An unknown series in an episode is never displaced: its END would be
 * lost. */
TEST(episode_not_displaced)
{
    struct latency_params p;
    latency_params_default(&p);
    p.max_series = 2;
    p.warmup = 1;
    p.min_count = 10;
    p.min_tail = 0;
    struct latency *l = NULL;
    REQUIRE(latency_new(&p, &l) == 0);
    struct known_set k = {{"k1", "k2"}};
    latency_set_known(l, known_worker, &k);
    struct evlog log = {0};
    uint64_t t = 4000 * SEC;
    latency_tick(l, t, on_event, &log);
    CHECK_EQ_INT(latency_observe(l, "u", 1, "v", 1, 5 * MS, 10, t + SEC), 0);
    latency_tick(l, t + 10 * SEC, on_event, &log);
    CHECK_EQ_INT(latency_observe(l, "u", 1, "v", 1, 500 * MS, 10, t + 11 * SEC), 0);
    latency_tick(l, t + 20 * SEC, on_event, &log);
    REQUIRE(log.starts == 1);
    CHECK_EQ_INT(latency_observe(l, "w", 1, "v", 1, 5 * MS, 1, t + 21 * SEC), 0);
    /* u is the oldest unknown but in its episode: w goes */
    CHECK_EQ_INT(latency_observe(l, "k1", 2, "v", 1, 5 * MS, 1, t + 22 * SEC), 0);
    CHECK_EQ_INT(latency_observe(l, "w", 1, "v", 1, 5 * MS, 1, t + 23 * SEC), -ENOSPC);
    CHECK_EQ_INT(latency_observe(l, "k2", 2, "v", 1, 5 * MS, 1, t + 24 * SEC), -ENOSPC);
    struct latency_stats st = latency_stats(l);
    CHECK_EQ_INT(st.in_episode, 1);
    CHECK_EQ_INT(st.displaced, 1);
    CHECK_EQ_INT(log.ends, 0);
    latency_free(l);
}

TEST(oom)
{
    for (long n = 0; n < 4; n++) {
        struct latency *l = NULL;
        isoprof_alloc_fail_after(n);
        int rc = latency_new(NULL, &l);
        isoprof_alloc_fail_after(-1);
        if (rc == 0) {
            latency_free(l);
            break;
        }
        CHECK_EQ_INT(rc, -ENOMEM);
        CHECK(l == NULL);
    }
    struct latency *l = NULL;
    REQUIRE(latency_new(NULL, &l) == 0);
    CHECK_EQ_INT(latency_observe(l, "a", 1, "v", 1, MS, 1, SEC), 0);
    isoprof_alloc_fail_after(0);
    CHECK_EQ_INT(latency_observe(l, "b", 1, "v", 1, MS, 3, SEC), -ENOMEM);
    CHECK_EQ_INT(latency_observe(l, "a", 1, "v", 1, MS, 1, SEC), 0); /* no allocation */
    isoprof_alloc_fail_after(-1);
    struct latency_stats st = latency_stats(l);
    CHECK_EQ_INT(st.series, 1);
    CHECK_EQ_INT(st.refused, 3);
    CHECK_EQ_INT(latency_observe(l, "b", 1, "v", 1, MS, 1, SEC), 0);
    latency_free(l);

    /* a known newcomer that cannot be allocated displaces nothing */
    struct latency_params p;
    latency_params_default(&p);
    p.max_series = 1;
    REQUIRE(latency_new(&p, &l) == 0);
    struct known_set k = {{"k"}};
    latency_set_known(l, known_worker, &k);
    CHECK_EQ_INT(latency_observe(l, "u", 1, "v", 1, MS, 1, SEC), 0);
    isoprof_alloc_fail_after(0);
    CHECK_EQ_INT(latency_observe(l, "k", 1, "v", 1, MS, 1, SEC), -ENOMEM);
    isoprof_alloc_fail_after(-1);
    st = latency_stats(l);
    CHECK_EQ_INT(st.series, 1);
    CHECK_EQ_INT(st.displaced, 0);
    CHECK_EQ_INT(latency_observe(l, "u", 1, "v", 1, MS, 1, SEC), 0);
    CHECK_EQ_INT(latency_observe(l, "k", 1, "v", 1, MS, 1, SEC), 0);
    CHECK_EQ_INT(latency_stats(l).displaced, 1);
    latency_free(l);
}

int main(void)
{
    RUN(params);
    RUN(observe_args);
    RUN(steady_never_flags);
    RUN(steady_heavy_tail_never_flags);
    RUN(steady_low_traffic_never_flags);
    RUN(slow_path_flags_once);
    RUN(long_spike_relearns);
    RUN(start_rate_limited);
    RUN(low_traffic_never_flags);
    RUN(below_min_ns_never_flags);
    RUN(no_flag_during_warmup);
    RUN(series_bound_and_eviction);
    RUN(event_labels);
    RUN(tick_gap);
    RUN(flood_does_not_blind_known_worker);
    RUN(idle_junk_expires);
    RUN(quiet_worker_keeps_baseline);
    RUN(known_displaces_least_recent_unknown);
    RUN(episode_not_displaced);
    RUN(oom);
    TEST_EXIT();
}

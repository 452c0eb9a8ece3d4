/*
 * test_warm.c - warm windows' choice and keep-alive (agent/daemon/warm.h)
 * on a simulated clock: cold, warm and auto modes, rotation, a refusal's
 * and a disturbance's back-off, an unanswered call, auto's comparison and
 * its hysteresis, the sampler's cost by interval.
 */
#include "../test.h"
#include "warm.h"

#include <stdint.h>
#include <stdlib.h>

#define S 1000000000ull
#define MS 1000000ull

static struct cfg *conf(enum cfg_cpu_mode mode)
{
    struct cfg *c = NULL;
    if (cfg_defaults(&c) != 0)
        abort();
    c->sampling.cpu.mode = mode; /* defaults: 10 s every 60 s at 10 ms */
    return c;
}

/* Start the keep-alive at now and have it answered. */
static void start_ok(struct warm *k, struct cfg *c, uint64_t now)
{
    CHECK_EQ_INT(warm_next(k, c, now, 0), WARM_ACT_START);
    warm_sent(k, WARM_ACT_START, now, 10 * MS);
    CHECK_EQ_INT(k->st, WARM_STARTING);
    CHECK(warm_is_on(k));
    warm_answered(k, now + 5 * MS, 1, 1);
    CHECK_EQ_INT(k->st, WARM_ON);
}

TEST(cold_never_starts)
{
    struct cfg *c = conf(CFG_CPU_COLD);
    struct warm k;
    warm_init(&k);
    for (uint64_t t = 1; t < 600 * S; t += 10 * S)
        CHECK_EQ_INT(warm_next(&k, c, t, 0), WARM_ACT_NONE);
    CHECK_EQ_INT(k.want, 0);
    CHECK_EQ_INT(k.why, WARM_WHY_CONFIG);
    CHECK(!warm_is_on(&k));
    cfg_free(c);
}

TEST(warm_starts_rotates_and_ends_on_reload)
{
    struct cfg *c = conf(CFG_CPU_WARM);
    struct warm k;
    warm_init(&k);
    /* Not while a window's interval is being set. */
    CHECK_EQ_INT(warm_next(&k, c, 1 * S, 1), WARM_ACT_NONE);
    CHECK_EQ_INT(k.want, 1);
    start_ok(&k, c, 2 * S);
    CHECK_EQ_INT(k.starts, 1);
    CHECK_EQ_INT(k.interval_ns, 10 * MS);
    /* One action at a time, and none due before the rotation. */
    CHECK_EQ_INT(warm_next(&k, c, 30 * S, 0), WARM_ACT_NONE);
    uint64_t rot = 2 * S + 5 * MS + WARM_ROTATE_NS;
    CHECK_EQ_INT(warm_next(&k, c, rot - 1, 0), WARM_ACT_NONE);
    CHECK_EQ_INT(warm_next(&k, c, rot, 0), WARM_ACT_ROTATE);
    uint64_t seq = k.seq;
    warm_sent(&k, WARM_ACT_ROTATE, rot, 0);
    CHECK_EQ_INT(k.seq, seq + 1);
    CHECK(warm_is_on(&k));
    CHECK_EQ_INT(warm_next(&k, c, rot + MS, 0), WARM_ACT_NONE);
    warm_answered(&k, rot + 3 * MS, 1, 1);
    CHECK_EQ_INT(k.rotations, 1);
    CHECK_EQ_INT(k.st, WARM_ON);
    /* A reload to cold ends it. */
    c->sampling.cpu.mode = CFG_CPU_COLD;
    CHECK_EQ_INT(warm_next(&k, c, rot + S, 0), WARM_ACT_END);
    warm_sent(&k, WARM_ACT_END, rot + S, 0);
    CHECK(!warm_is_on(&k));
    warm_answered(&k, rot + S + MS, 1, 0);
    CHECK_EQ_INT(k.st, WARM_OFF);
    CHECK_EQ_INT(warm_next(&k, c, rot + 2 * S, 0), WARM_ACT_NONE);
    cfg_free(c);
}

TEST(refused_backs_off_doubling)
{
    struct cfg *c = conf(CFG_CPU_WARM);
    struct warm k;
    warm_init(&k);
    uint64_t t = S;
    CHECK_EQ_INT(warm_next(&k, c, t, 0), WARM_ACT_START);
    warm_sent(&k, WARM_ACT_START, t, 10 * MS);
    warm_answered(&k, t, 1, 0); /* answered, but no console profile started */
    CHECK_EQ_INT(k.st, WARM_OFF);
    CHECK_EQ_INT(k.refusals, 1);
    CHECK_EQ_INT(warm_next(&k, c, t + WARM_RETRY_NS - 1, 0), WARM_ACT_NONE);
    CHECK_EQ_INT(k.want, 0);
    CHECK_EQ_INT(k.why, WARM_WHY_REFUSED);
    t += WARM_RETRY_NS;
    CHECK_EQ_INT(warm_next(&k, c, t, 0), WARM_ACT_START);
    warm_sent(&k, WARM_ACT_START, t, 10 * MS);
    warm_answered(&k, t, 0, 0); /* an error answer */
    CHECK_EQ_INT(warm_next(&k, c, t + 2 * WARM_RETRY_NS - 1, 0), WARM_ACT_NONE);
    CHECK_EQ_INT(warm_next(&k, c, t + 2 * WARM_RETRY_NS, 0), WARM_ACT_START);
    /* A success resets the doubling. */
    warm_sent(&k, WARM_ACT_START, t + 2 * WARM_RETRY_NS, 10 * MS);
    warm_answered(&k, t + 2 * WARM_RETRY_NS, 1, 1);
    CHECK_EQ_INT(k.failures, 0);
    cfg_free(c);
}

TEST(unanswered_is_refused)
{
    struct cfg *c = conf(CFG_CPU_WARM);
    struct warm k;
    warm_init(&k);
    CHECK_EQ_INT(warm_next(&k, c, S, 0), WARM_ACT_START);
    warm_sent(&k, WARM_ACT_START, S, 10 * MS);
    CHECK_EQ_INT(warm_next(&k, c, S + WARM_ANSWER_NS - 1, 0), WARM_ACT_NONE);
    CHECK_EQ_INT(k.st, WARM_STARTING);
    CHECK_EQ_INT(warm_next(&k, c, S + WARM_ANSWER_NS, 0), WARM_ACT_NONE);
    CHECK_EQ_INT(k.st, WARM_OFF);
    CHECK_EQ_INT(k.refusals, 1);
    CHECK_EQ_INT(k.why, WARM_WHY_REFUSED);
    cfg_free(c);
}

TEST(disturbed_ends_and_retries)
{
    struct cfg *c = conf(CFG_CPU_WARM);
    struct warm k;
    warm_init(&k);
    start_ok(&k, c, S);
    CHECK_EQ_INT(warm_disturbed(&k, 10 * S), 1);
    CHECK_EQ_INT(k.disturbances, 1);
    /* Still running in the target: ended at once. */
    CHECK_EQ_INT(warm_next(&k, c, 10 * S, 0), WARM_ACT_END);
    CHECK_EQ_INT(k.why, WARM_WHY_DISTURBED);
    warm_sent(&k, WARM_ACT_END, 10 * S, 0);
    warm_answered(&k, 10 * S + MS, 1, 0);
    CHECK_EQ_INT(warm_next(&k, c, 10 * S + WARM_RETRY_NS - 1, 0), WARM_ACT_NONE);
    CHECK_EQ_INT(k.why, WARM_WHY_DISTURBED);
    CHECK_EQ_INT(warm_next(&k, c, 10 * S + WARM_RETRY_NS, 0), WARM_ACT_START);
    /* A session that ends: V8 ended the keep-alive, nothing to send. */
    warm_sent(&k, WARM_ACT_START, 10 * S + WARM_RETRY_NS, 10 * MS);
    warm_detached(&k);
    CHECK_EQ_INT(k.st, WARM_OFF);
    CHECK_EQ_INT(k.sent_ns, 0);
    cfg_free(c);
}

TEST(auto_chooses_from_cold_costs)
{
    struct cfg *c = conf(CFG_CPU_AUTO);
    struct warm k;
    warm_init(&k);
    uint64_t cold, sampler;
    /* 6.4 ms/s over the 50 s between windows. */
    warm_costs(&k, c, &cold, &sampler);
    CHECK_EQ_INT(cold, 0);
    CHECK_EQ_INT(sampler, 320 * MS);
    CHECK_EQ_INT(warm_next(&k, c, S, 0), WARM_ACT_NONE);
    CHECK_EQ_INT(k.why, WARM_WHY_UNMEASURED);
    /* One window far over the sampler is enough; one under is not. */
    {
        struct warm b;
        warm_init(&b);
        warm_cold_cost(&b, 0, 100 * MS);
        warm_cold_cost(&b, 1, 40 * MS);
        CHECK_EQ_INT(warm_next(&b, c, S, 0), WARM_ACT_NONE);
        CHECK_EQ_INT(b.why, WARM_WHY_UNMEASURED);
        warm_init(&b);
        warm_cold_cost(&b, 0, 2100 * MS);
        CHECK_EQ_INT(warm_next(&b, c, S, 0), WARM_ACT_NONE); /* no stop yet */
        warm_cold_cost(&b, 1, 500 * MS);
        CHECK_EQ_INT(warm_next(&b, c, S, 0), WARM_ACT_START);
        CHECK_EQ_INT(b.why, WARM_WHY_COSTLY);
    }
    /* A small app: 5 + 2 ms a window. */
    for (int i = 0; i < WARM_EST; i++) {
        warm_cold_cost(&k, 0, 5 * MS);
        warm_cold_cost(&k, 1, 2 * MS);
    }
    CHECK_EQ_INT(warm_next(&k, c, 2 * S, 0), WARM_ACT_NONE);
    CHECK_EQ_INT(k.why, WARM_WHY_CHEAP);
    /* The app grew: 300 + 100 ms (the median of the latest). */
    warm_cold_cost(&k, 0, 300 * MS);
    warm_cold_cost(&k, 1, 100 * MS);
    CHECK_EQ_INT(warm_next(&k, c, 3 * S, 0), WARM_ACT_NONE); /* one of three */
    warm_cold_cost(&k, 0, 280 * MS);
    warm_cold_cost(&k, 1, 90 * MS);
    CHECK_EQ_INT(warm_next(&k, c, 4 * S, 0), WARM_ACT_START);
    CHECK_EQ_INT(k.why, WARM_WHY_COSTLY);
    warm_sent(&k, WARM_ACT_START, 4 * S, 10 * MS);
    warm_answered(&k, 4 * S, 1, 1);
    /* Hysteresis: 200 ms is below 320 but not by half: warm stays. */
    for (int i = 0; i < WARM_EST; i++) {
        warm_cold_cost(&k, 0, 150 * MS);
        warm_cold_cost(&k, 1, 50 * MS);
    }
    CHECK_EQ_INT(warm_next(&k, c, 5 * S, 0), WARM_ACT_NONE);
    CHECK_EQ_INT(k.want, 1);
    for (int i = 0; i < WARM_EST; i++) {
        warm_cold_cost(&k, 0, 100 * MS);
        warm_cold_cost(&k, 1, 40 * MS);
    }
    CHECK_EQ_INT(warm_next(&k, c, 6 * S, 0), WARM_ACT_END);
    CHECK_EQ_INT(k.why, WARM_WHY_CHEAP);
    /* A finer interval makes the sampler dearer: 1 ms, ten times. */
    c->sampling.cpu.interval_ns = MS;
    warm_costs(&k, c, &cold, &sampler);
    CHECK_EQ_INT(sampler, 3200 * MS);
    /* A shorter gap between windows makes it cheaper: 2 s of every 5 s. */
    c->sampling.cpu.interval_ns = 10 * MS;
    c->sampling.cpu.duration_ns = 2 * S;
    c->sampling.cpu.period_ns = 5 * S;
    warm_costs(&k, c, &cold, &sampler);
    CHECK_EQ_INT(sampler, 19200000ull);
    cfg_free(c);
}

TEST(sampler_measured)
{
    struct cfg *c = conf(CFG_CPU_AUTO);
    struct warm k;
    warm_init(&k);
    uint64_t cold, sampler;
    /* Measured 4 ms/s at 10 ms: 4 x 50 s = 200 ms a default period. */
    warm_sampler_measured(&k, 4 * MS, 10 * MS);
    warm_costs(&k, c, &cold, &sampler);
    CHECK_EQ_INT(sampler, 200 * MS);
    /* At 1 ms it would be ten times that. */
    c->sampling.cpu.interval_ns = MS;
    warm_costs(&k, c, &cold, &sampler);
    CHECK_EQ_INT(sampler, 2000 * MS);
    c->sampling.cpu.interval_ns = 10 * MS;
    /* A measure at 1 ms of 80 ms/s is 8 ms/s at 10 ms: averaged in by a
     * quarter, 5 ms/s. */
    warm_sampler_measured(&k, 80 * MS, MS);
    CHECK_EQ_INT(k.sampler_ns_per_s, 5 * MS);
    /* So auto weighs it: cold 300 ms is over 250 ms. */
    for (int i = 0; i < WARM_EST; i++) {
        warm_cold_cost(&k, 0, 200 * MS);
        warm_cold_cost(&k, 1, 100 * MS);
    }
    CHECK_EQ_INT(warm_next(&k, c, S, 0), WARM_ACT_START);
    cfg_free(c);
}

TEST(names)
{
    CHECK_STR(warm_state_name(WARM_ON), "on");
    CHECK_STR(warm_why_name(WARM_WHY_COSTLY), "cold_costlier");
    CHECK_STR(cfg_cpu_mode_names[CFG_CPU_AUTO], "auto");
}

int main(void)
{
    RUN(cold_never_starts);
    RUN(warm_starts_rotates_and_ends_on_reload);
    RUN(refused_backs_off_doubling);
    RUN(unanswered_is_refused);
    RUN(disturbed_ends_and_retries);
    RUN(auto_chooses_from_cold_costs);
    RUN(sampler_measured);
    RUN(names);
    TEST_EXIT();
}

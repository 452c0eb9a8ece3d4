/*
 * test_deploy.c - the store stage of deploy regressions
 * (agent/daemon/deploy.c, deploy_store) on a real store and synthetic
 * profiles (regress_synth.h): windows folded into their version's
 * aggregate, the baseline chosen, a regression recorded once per pair,
 * updated, cleared when more samples overturn it and flagged again, the
 * same code never flagged, the per-worker bound, a damaged aggregate
 * started again.
 */
#include "../scratch.h"
#include "../test.h"
#include "base.h"
#include "daemon.h"
#include "deploy.h"
#include "regress.h"
#include "regress_synth.h"
#include "store.h"
#include "writer.h"

#include <errno.h>
#include <string.h>

#define SEC 1000000000ull
#define T0 (1764000000ull * SEC)

static const char *const walkNestedStack =
    "walkNested;replacer;serialize;handleRequest;processTicks;(root)";

static struct deploy_job job(void)
{
    struct deploy_job j = {.fold = 1, .keep = 8, .max_fns = 0};
    regress_params_default(&j.p);
    return j;
}

/* The verdicts the windows of the last fold() gave, a bit each. */
static unsigned verdicts;

/* Fold n samples of p, as windows of 1,000 (each closed, as the writer
 * does), into worker/version at (minute) t; the last window's result in
 * *r. */
static void fold(struct store *s, const char *worker, const char *version, const struct prog *p,
                 struct isoprof_rng *rng, uint64_t n, uint64_t t, struct deploy_result *r)
{
    verdicts = 0;
    for (uint64_t done = 0; done < n; done += 1000) {
        struct regress_agg *a = NULL;
        REQUIRE(regress_agg_new(0, &a) == 0);
        draw(p, rng, 1000, a);
        REQUIRE(regress_agg_end_window(a) == 0);
        struct deploy_fold f = {.worker = worker,
                                .version = version,
                                .job = job(),
                                .agg = a,
                                .first_ns = T0 + t * 60 * SEC + done * SEC,
                                .last_ns = T0 + t * 60 * SEC + done * SEC + 10 * SEC,
                                .windows = 1,
                                .out = r};
        deploy_store(s, &f);
        REQUIRE(f.agg == NULL); /* consumed */
        verdicts |= 1u << r->verdict;
        if (r->err != 0)
            fprintf(stderr, "deploy_store: %s: %s\n", r->what, isoprof_strerror(r->err));
    }
}

struct found {
    int n;
    uint64_t id;
    uint32_t flags, nfns;
    char baseline[64];
    int walk; /* walkNested among the functions */
};

static int on_anomaly(const struct store_anomaly *a, void *arg)
{
    struct found *f = arg;
    f->n++;
    f->id = a->id;
    f->flags = a->flags;
    if (a->regression) {
        snprintf(f->baseline, sizeof(f->baseline), "%s", a->regression->baseline);
        f->nfns = (uint32_t)a->regression->nfns;
        for (size_t i = 0; i < a->regression->nfns; i++)
            f->walk |= strcmp(a->regression->fns[i].name, "walkNested") == 0;
    }
    return 0;
}

static struct found regressions(struct store *s, const char *worker)
{
    struct found f = {0};
    struct store_anomaly_filter af = {.kind = STORE_ANOMALY_VERSION_REGRESSION, .worker = worker};
    CHECK_EQ_INT(store_anomalies(s, &af, on_anomaly, &f), 0);
    return f;
}

TEST(flag_update_clear_flag_again)
{
    struct store *s = NULL;
    REQUIRE(store_open(tmp_dir(), NULL, &s, NULL) == 0);
    struct prog base, grown;
    prog_service(&base, 0);
    prog_service(&grown, 0);
    prog_grown(&grown, walkNestedStack, 0.3);
    struct isoprof_rng rng;
    isoprof_rng_seed(&rng, 5);
    struct deploy_result r;

    /* v1, the worker's first version: folded, nothing to judge against. */
    fold(s, "ledger", "v1", &base, &rng, 5000, 0, &r);
    CHECK(r.valid && r.err == 0 && !r.judged && r.base[0] == '\0');
    CHECK(r.busy > 3000 && r.busy < 5000 && r.agg_bytes > 0); /* a quarter idle */
    struct store_agg info;
    REQUIRE(store_agg_get(s, "ledger", "v1", &info, NULL, NULL) == 0);
    CHECK_EQ_INT(info.windows, 5);
    CHECK(info.first_ns == T0 && info.last_ns == T0 + 4000 * SEC + 10 * SEC);

    /* v2's first window: short of min_samples; its baseline is v1. */
    fold(s, "ledger", "v2", &grown, &rng, 1000, 10, &r);
    CHECK(r.err == 0 && !r.judged && strcmp(r.base, "v1") == 0);
    CHECK(r.busy < 1000 && r.base_busy > 3000);
    CHECK_EQ_INT(r.windows, 1);
    /* Its second: min_samples, but not min_windows (3). */
    fold(s, "ledger", "v2", &grown, &rng, 1000, 11, &r);
    CHECK(r.err == 0 && !r.judged && r.busy >= 1000 && r.windows == 2);
    /* ... then judged: a regression, recorded once, walkNested first. */
    fold(s, "ledger", "v2", &grown, &rng, 1000, 12, &r);
    CHECK(r.err == 0 && r.judged && r.regressions > 0 && r.flagged);
    CHECK_EQ_INT(r.verdict, DEPLOY_FLAGGED);
    REQUIRE(r.anomaly != 0);
    uint64_t id = r.anomaly;
    struct found f = regressions(s, "ledger");
    CHECK(f.n == 1 && f.id == id && strcmp(f.baseline, "v1") == 0 && f.flags == 0);
    CHECK(f.walk);
    /* More windows: the same record, updated. */
    fold(s, "ledger", "v2", &grown, &rng, 2000, 13, &r);
    CHECK(r.flagged && r.anomaly == id);
    CHECK_EQ_INT(r.verdict, DEPLOY_UPDATED);
    CHECK_EQ_INT(regressions(s, "ledger").n, 1);

    /* Many more samples of the old code in v2 overturn it: cleared, the
     * record kept. */
    fold(s, "ledger", "v2", &base, &rng, 60000, 20, &r);
    CHECK(r.judged && r.regressions == 0 && !r.flagged && r.anomaly == id);
    f = regressions(s, "ledger");
    CHECK(f.n == 1 && (f.flags & STORE_ANOMALY_CLEARED) && f.nfns == 0);
    CHECK_EQ_INT(verdicts & (1u << DEPLOY_CLEARED), 1u << DEPLOY_CLEARED);
    /* ... and flagged again when the growth comes back (once, then
     * updated): still one record. v2's windows now hold two regimes, so
     * its shares spread widely from window to window (dispersion ~20):
     * the growth needs many windows to outweigh that. */
    fold(s, "ledger", "v2", &grown, &rng, 700000, 30, &r);
    CHECK(r.flagged && r.anomaly == id);
    CHECK_EQ_INT(r.verdict, DEPLOY_UPDATED);
    CHECK_EQ_INT(verdicts & (1u << DEPLOY_FLAGGED), 1u << DEPLOY_FLAGGED);
    f = regressions(s, "ledger");
    CHECK(f.n == 1 && !(f.flags & STORE_ANOMALY_CLEARED) && f.walk);
    char *why = NULL;
    CHECK_EQ_INT(store_check(s, &why), 0);
    isoprof_free(why);
    store_close(s);
}

/* The same code under a new label, inlining that differs in the new
 * process: judged again and again, never flagged. */
TEST(same_code_never_flagged)
{
    struct store *s = NULL;
    REQUIRE(store_open(tmp_dir(), NULL, &s, NULL) == 0);
    struct prog a, b;
    prog_service(&a, 0);
    prog_service(&b, 1); /* reconcileLedger inlined in the new process */
    struct isoprof_rng rng;
    isoprof_rng_seed(&rng, 11);
    struct deploy_result r;
    fold(s, "same", "v1", &a, &rng, 20000, 0, &r);
    int judged = 0;
    for (int w = 0; w < 30; w++) {
        fold(s, "same", "v2", &b, &rng, 1000, 100 + (uint64_t)w, &r);
        judged += r.judged;
        CHECK(r.err == 0 && r.regressions == 0 && !r.flagged && r.anomaly == 0);
    }
    CHECK(judged >= 28);
    CHECK_EQ_INT(regressions(s, "same").n, 0);
    store_close(s);
}

/* The baseline is the version first seen last before this one (a canary
 * beside the old one too); max_versions bounds a worker's aggregates. */
TEST(baseline_and_bound)
{
    struct store *s = NULL;
    REQUIRE(store_open(tmp_dir(), NULL, &s, NULL) == 0);
    struct prog p;
    prog_service(&p, 0);
    struct isoprof_rng rng;
    isoprof_rng_seed(&rng, 3);
    struct deploy_result r;
    fold(s, "w", "v1", &p, &rng, 1000, 0, &r);
    fold(s, "w", "v2", &p, &rng, 1000, 10, &r);
    CHECK(strcmp(r.base, "v1") == 0);
    fold(s, "w", "v3", &p, &rng, 1000, 20, &r);
    CHECK(strcmp(r.base, "v2") == 0);
    /* v1 runs on beside (a canary of v2, v3): its baseline stays none. */
    fold(s, "w", "v1", &p, &rng, 1000, 30, &r);
    CHECK(r.base[0] == '\0');
    /* Another worker's versions are not baselines. */
    fold(s, "x", "v9", &p, &rng, 1000, 40, &r);
    CHECK(r.base[0] == '\0');
    /* keep 3: a fourth version drops the one seen last longest ago (v2). */
    struct regress_agg *a = NULL;
    REQUIRE(regress_agg_new(0, &a) == 0);
    draw(&p, &rng, 1000, a);
    struct deploy_fold f = {.worker = "w",
                            .version = "v4",
                            .job = job(),
                            .agg = a,
                            .first_ns = T0 + 50 * 60 * SEC,
                            .last_ns = T0 + 50 * 60 * SEC,
                            .windows = 1,
                            .out = &r};
    f.job.keep = 3;
    deploy_store(s, &f);
    CHECK(r.err == 0 && r.dropped == 1 && strcmp(r.base, "v3") == 0);
    CHECK_EQ_INT(store_agg_get(s, "w", "v2", NULL, NULL, NULL), ISOPROF_ENOTFOUND);
    CHECK_EQ_INT(store_agg_get(s, "w", "v1", NULL, NULL, NULL), 0);
    store_close(s);
}

/* A stored aggregate that does not decode is started again from the
 * window (said in the result), not left unjudged forever. */
TEST(damaged_aggregate_started_again)
{
    struct store *s = NULL;
    REQUIRE(store_open(tmp_dir(), NULL, &s, NULL) == 0);
    static const uint8_t junk[] = "IPRG\x01 not an aggregate";
    struct store_agg g = {.worker = "w", .version = "v1", .samples = 10, .busy = 5};
    REQUIRE(store_agg_put(s, &g, junk, sizeof(junk), 8, NULL, NULL) == 0);
    struct prog p;
    prog_service(&p, 0);
    struct isoprof_rng rng;
    isoprof_rng_seed(&rng, 7);
    struct deploy_result r;
    fold(s, "w", "v1", &p, &rng, 1000, 0, &r);
    CHECK(r.valid && r.err == ISOPROF_ECORRUPT && r.what != NULL);
    CHECK(r.busy > 0 && r.busy <= 1000);
    fold(s, "w", "v1", &p, &rng, 1000, 1, &r);
    CHECK(r.err == 0 && r.busy > 1000);
    store_close(s);
}

int main(void)
{
    RUN(flag_update_clear_flag_again);
    RUN(same_code_never_flagged);
    RUN(baseline_and_bound);
    RUN(damaged_aggregate_started_again);
    TEST_EXIT();
}

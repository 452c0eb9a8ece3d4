/*
 * deploy.c - deploy regressions (version_regression): every CPU window
 * folded into its (worker, version) aggregate in the store, a new version
 * judged against the one before it, and the extra windows that get it
 * judged within minutes.
 *
 * DESIGN. Two halves, one on each side of the writer's store stage.
 *
 * On the store stage (thread pool, writer.c's put job, right after the
 * batch's store_put committed its windows), deploy_store() takes one
 * pair's windows, each already made into an aggregate of its own on the
 * conversion stage (regress_agg_add_pprof: the names and files as stored,
 * after source maps; closed as one window, regress_agg_end_window, so
 * the spread of each share across windows is kept too), and:
 *   1. merges them into the pair's stored aggregate and writes it back
 *      (store_agg_put; at most anomaly.regression.max_versions a worker);
 *   2. finds the baseline: of the worker's other versions, the one first
 *      seen last before this one was (the version a deploy replaced, or
 *      the one a canary runs beside). The oldest version has none;
 *   3. once both have min_samples non-idle samples in min_windows
 *      windows, compares them
 *      (regress_compare) and records, updates or clears the pair's
 *      version_regression: one record per (worker, version, baseline),
 *      found again in the store, so at most one however often it is
 *      judged and across restarts. Flagged, it pins the windows it was
 *      computed from (the new version's newest CPU windows); overturned by
 *      more samples, it is marked cleared; flagged again, it is updated.
 * The store is the state there: the job carries the parameters (the
 * config is the loop's and may be replaced meanwhile), nothing else is
 * shared with the loop.
 *
 * On the loop, deploy_done() hears what a job found: the verdict is
 * logged and counted, the pair's record is remembered (struct deploy_pair)
 * so that its later windows are pinned to it and carry anomaly=
 * version_regression to the uploader (deploy_meta), and a version that has
 * a judged baseline but not yet min_samples (or min_windows) gets extra
 * windows on its isolates: win_extra_cpu, the planned window brought
 * forward at anomaly.cpu_interval, through the pause budget and the slots
 * like any scheduled window, at most anomaly.regression.extra_windows a
 * version.
 *
 * Which windows are folded: scheduled, extra and those of a flagged
 * version; not on-demand windows, nor those taken for another anomaly
 * (memory, latency), whose moment was chosen by something going wrong
 * and would skew the version's shares, nor those that started within
 * anomaly.regression.warmup of the isolate's attach (a new process
 * compiles and collects more while it warms up: measured on the replacer
 * workload, its garbage collector took 6.7 % of the first window's CPU
 * against 2.5 % steady, enough to be flagged against the version before).
 */
#include "deploy.h"
#include "daemon.h"
#include "log.h"
#include "regress.h"
#include "target.h"
#include "writer.h"

#include "base.h"

#include <errno.h>
#include <math.h>
#include <string.h>

/* Pairs remembered on the loop; past it the one touched longest ago goes
 * (a pair forgotten only loses its extra windows' count and, until its
 * next window is judged, the label of its windows). */
#define DEPLOY_PAIRS_MAX 1024
/* The new version's windows pinned when a regression is flagged. */
#define DEPLOY_PIN_NEW 64

/* --- the store stage --- */

struct version_seen {
    char version[STORE_VERSION_MAX + 1];
    uint64_t first_ns, last_ns, busy;
    int found;
};

struct base_pick {
    const char *self;
    uint64_t self_first;
    struct version_seen best;
};

static int base_on_agg(const struct store_agg *g, void *arg)
{
    struct base_pick *b = arg;
    if (strcmp(g->version, b->self) == 0 || g->first_ns >= b->self_first)
        return 0;
    if (b->best.found && (g->first_ns < b->best.first_ns ||
                          (g->first_ns == b->best.first_ns && g->last_ns <= b->best.last_ns)))
        return 0;
    snprintf(b->best.version, sizeof(b->best.version), "%s", g->version);
    b->best.first_ns = g->first_ns;
    b->best.last_ns = g->last_ns;
    b->best.busy = g->busy;
    b->best.found = 1;
    return 0;
}

struct existing {
    const char *baseline;
    uint64_t id, start_ns, end_ns;
    uint32_t flags;
};

static int existing_on_anomaly(const struct store_anomaly *a, void *arg)
{
    struct existing *x = arg;
    if (a->regression == NULL || strcmp(a->regression->baseline, x->baseline) != 0)
        return 0;
    if (x->id == 0 || a->start_ns > x->start_ns) {
        x->id = a->id;
        x->start_ns = a->start_ns;
        x->end_ns = a->end_ns;
        x->flags = a->flags;
    }
    return 0;
}

/* s cut to at most cap - 1 bytes, on a UTF-8 boundary, into out. */
static void cut_copy(char *out, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--;
    }
    memcpy(out, s, n);
    out[n] = '\0';
}

static uint64_t ppm(double share)
{
    return share <= 0 ? 0 : share >= 1 ? 1000000u : (uint64_t)llround(share * 1e6);
}

/* The findings of r as the store keeps them: the regressions (grown, not
 * inlining, not "(program)"), largest first. names: room for theirs. */
struct findings {
    struct store_regression g;
    struct store_regression_fn fns[STORE_REGRESSION_FNS_MAX];
    char names[STORE_REGRESSION_FNS_MAX][2][STORE_REGRESSION_NAME_MAX + 1];
    double top_delta;
};

static void findings_of(const struct regress_result *r, const char *baseline, struct findings *f)
{
    memset(&f->g, 0, sizeof(f->g));
    f->top_delta = 0;
    f->g.baseline = baseline;
    f->g.busy_before = r->busy_before;
    f->g.busy_after = r->busy_after;
    f->g.cpu_before = r->cpu_before;
    f->g.cpu_after = r->cpu_after;
    f->g.fns = f->fns;
    for (size_t i = 0; i < r->ngrown && f->g.nfns < STORE_REGRESSION_FNS_MAX; i++) {
        const struct regress_change *c = &r->grown[i];
        if (c->flags & (REGRESS_F_INLINED | REGRESS_F_VM))
            continue;
        size_t k = f->g.nfns++;
        cut_copy(f->names[k][0], sizeof(f->names[k][0]), c->name);
        cut_copy(f->names[k][1], sizeof(f->names[k][1]), c->file ? c->file : "");
        f->fns[k] = (struct store_regression_fn){.name = f->names[k][0],
                                                 .file = f->names[k][1],
                                                 .before = c->before,
                                                 .after = c->after,
                                                 .share_before = c->share_before,
                                                 .share_after = c->share_after,
                                                 .z = c->z,
                                                 .p_adj = c->p_adj};
        if (c->share_after - c->share_before > f->top_delta)
            f->top_delta = c->share_after - c->share_before;
    }
}

/* The stored aggregate of worker/version with add merged in (add is
 * consumed): *out, and its figures in *info (first seen kept). */
static int merged(struct store *s, struct deploy_fold *f, struct regress_agg **out,
                  struct store_agg *info)
{
    void *bytes = NULL;
    size_t len = 0;
    int rc = store_agg_get(s, f->worker, f->version, info, &bytes, &len);
    struct regress_agg *a = NULL;
    if (rc == 0) {
        rc = regress_agg_decode(bytes, len, f->job.max_fns, &a);
        isoprof_free(bytes);
        if (rc == ISOPROF_ECORRUPT || rc == ISOPROF_ESCHEMA) {
            /* Unreadable (damaged, or another build's encoding): start
             * again from these windows rather than never judge it. */
            f->out->err = rc;
            f->out->what = "its stored aggregate did not decode: started again";
            rc = ISOPROF_ENOTFOUND;
        } else if (rc != 0) {
            return rc;
        }
    }
    if (rc == ISOPROF_ENOTFOUND) {
        memset(info, 0, sizeof(*info));
        info->first_ns = f->first_ns;
        *out = f->agg;
        f->agg = NULL;
        return 0;
    }
    if (rc != 0)
        return rc;
    rc = regress_agg_merge(a, f->agg);
    regress_agg_free(f->agg);
    f->agg = NULL;
    if (rc != 0) {
        regress_agg_free(a);
        return rc;
    }
    *out = a;
    return 0;
}

void deploy_store(struct store *s, struct deploy_fold *f)
{
    struct deploy_result *r = f->out;
    memset(r, 0, sizeof(*r));
    r->valid = 1;
    struct regress_agg *a = NULL, *base = NULL;
    struct regress_result cmp = {0};
    struct findings *fd = NULL;
    uint8_t *enc = NULL;
    size_t enclen = 0;
    struct store_agg info;
    int rc = merged(s, f, &a, &info);
    if (rc != 0) {
        r->what = "the aggregate could not be read";
        goto out;
    }
    if ((rc = regress_agg_encode(a, &enc, &enclen)) != 0) {
        r->what = "the aggregate could not be encoded";
        goto out;
    }
    info.worker = f->worker;
    info.version = f->version;
    if (info.first_ns == 0 || f->first_ns < info.first_ns)
        info.first_ns = f->first_ns;
    if (f->last_ns > info.last_ns)
        info.last_ns = f->last_ns;
    if (info.last_ns < info.first_ns)
        info.last_ns = info.first_ns;
    info.windows += f->windows;
    info.samples = a->samples;
    info.busy = regress_agg_busy(a);
    size_t dropped = 0;
    if ((rc = store_agg_put(s, &info, enc, enclen, f->job.keep, &dropped, NULL)) != 0) {
        r->what = "the aggregate could not be stored";
        goto out;
    }
    r->busy = info.busy;
    r->windows = a->wbusy == info.busy ? a->windows : 0;
    r->dropped = (uint32_t)dropped;
    r->agg_bytes = info.stored_size;

    struct base_pick bp = {.self = f->version, .self_first = info.first_ns};
    if ((rc = store_aggs(s, f->worker, base_on_agg, &bp)) != 0) {
        r->what = "the worker's versions could not be listed";
        goto out;
    }
    if (!bp.best.found)
        goto out; /* its first version: nothing to judge it against */
    snprintf(r->base, sizeof(r->base), "%s", bp.best.version);
    r->base_busy = bp.best.busy;
    if (r->busy < f->job.p.min_samples || r->base_busy < f->job.p.min_samples)
        goto out;
    void *bytes = NULL;
    size_t len = 0;
    if ((rc = store_agg_get(s, f->worker, r->base, NULL, &bytes, &len)) != 0) {
        r->what = "the baseline's aggregate could not be read";
        goto out;
    }
    rc = regress_agg_decode(bytes, len, f->job.max_fns, &base);
    isoprof_free(bytes);
    if (rc != 0) {
        r->what = "the baseline's aggregate did not decode";
        goto out;
    }
    uint64_t t0 = isoprof_now_mono_ns();
    if ((rc = regress_compare(base, a, &f->job.p, &cmp)) != 0) {
        r->what = "the comparison failed";
        goto out;
    }
    r->compare_ns = isoprof_now_mono_ns() - t0;
    r->judged = cmp.judged;
    r->regressions = cmp.regressions;
    r->grown = cmp.ngrown;
    r->shrunk = cmp.nshrunk;
    if (!cmp.judged)
        goto out;

    struct existing x = {.baseline = r->base};
    struct store_anomaly_filter af = {
        .kind = STORE_ANOMALY_VERSION_REGRESSION, .worker = f->worker, .version = f->version};
    if ((rc = store_anomalies(s, &af, existing_on_anomaly, &x)) != 0) {
        r->what = "the anomalies could not be read";
        goto out;
    }
    if ((fd = isoprof_malloc(sizeof(*fd))) == NULL) {
        rc = -ENOMEM;
        r->what = "no memory for the findings";
        goto out;
    }
    findings_of(&cmp, r->base, fd);
    if (fd->g.nfns > 0) {
        cut_copy(r->top, sizeof(r->top), fd->fns[0].name);
        r->top_before = fd->fns[0].share_before;
        r->top_after = fd->fns[0].share_after;
    }
    int was_flagged = x.id != 0 && !(x.flags & STORE_ANOMALY_CLEARED);
    uint64_t now = isoprof_now_wall_ns();
    struct store_anomaly an = {.id = x.id,
                               .kind = STORE_ANOMALY_VERSION_REGRESSION,
                               .worker = f->worker,
                               .version = f->version,
                               .start_ns = now,
                               .end_ns = now,
                               .value = ppm(fd->top_delta),
                               .threshold = ppm(f->job.p.min_delta),
                               .regression = &fd->g};
    if (cmp.regressions > 0) {
        if ((rc = store_anomaly_put(s, &an, 0)) != 0) {
            r->what = "the anomaly could not be recorded";
            goto out;
        }
        r->anomaly = an.id;
        r->flagged = 1;
        r->verdict = was_flagged ? DEPLOY_UPDATED : DEPLOY_FLAGGED;
        if (!was_flagged) {
            /* The evidence: the new version's windows it was computed
             * from, newest first. Not the baseline's: a pin also labels
             * a window for the uploader (anomaly=version_regression),
             * and the old version is not the one that regressed; its
             * aggregate is kept apart anyway. */
            rc = store_anomaly_pin_windows(s, an.id, f->worker, f->version, STORE_TYPE_CPU, 0, 0,
                                           DEPLOY_PIN_NEW, &r->pinned);
            if (rc != 0) {
                r->what = "its windows could not be pinned";
                goto out;
            }
        }
    } else if (was_flagged) {
        an.flags = STORE_ANOMALY_CLEARED;
        an.value = 0;
        if ((rc = store_anomaly_put(s, &an, 0)) != 0) {
            r->what = "the anomaly could not be cleared";
            goto out;
        }
        r->anomaly = an.id;
        r->verdict = DEPLOY_CLEARED;
    } else {
        r->anomaly = x.id; /* cleared before, or never flagged */
    }
out:
    if (rc != 0)
        r->err = rc;
    regress_result_free(&cmp);
    regress_agg_free(a);
    regress_agg_free(base);
    regress_agg_free(f->agg);
    f->agg = NULL;
    isoprof_free(enc);
    isoprof_free(fd);
}

/* --- the loop --- */

struct deploy_pair {
    char *worker, *version;
    unsigned extra;     /* extra windows asked for it */
    struct episode *ep; /* its version_regression while flagged: later windows pin to it */
    uint64_t touched;   /* a tick, for the bound */
    struct deploy_pair *next;
};

/* a->deploy: made at the first CPU window of a pair, freed by deploy_free. */
struct deploy_book {
    struct deploy_pair *pairs; /* most recently added first */
    unsigned n;                /* at most DEPLOY_PAIRS_MAX */
    uint64_t tick;             /* the last touched */
};

static struct deploy_pair *pair_find(const struct deploy_book *b, const char *worker,
                                     const char *version)
{
    if (b == NULL)
        return NULL;
    for (struct deploy_pair *p = b->pairs; p; p = p->next)
        if (strcmp(p->worker, worker) == 0 && strcmp(p->version, version) == 0)
            return p;
    return NULL;
}

static void pair_free(struct deploy_pair *p)
{
    episode_unref(p->ep);
    isoprof_free(p->worker);
    isoprof_free(p->version);
    isoprof_free(p);
}

static struct deploy_pair *pair_get(struct agent *a, const char *worker, const char *version)
{
    if (a->deploy == NULL && (a->deploy = isoprof_calloc(1, sizeof(*a->deploy))) == NULL)
        return NULL;
    struct deploy_book *b = a->deploy;
    struct deploy_pair *p = pair_find(b, worker, version);
    if (p != NULL) {
        p->touched = ++b->tick;
        return p;
    }
    if (b->n >= DEPLOY_PAIRS_MAX) {
        struct deploy_pair **old = &b->pairs;
        for (struct deploy_pair **pp = &b->pairs; *pp; pp = &(*pp)->next)
            if ((*pp)->touched < (*old)->touched)
                old = pp;
        struct deploy_pair *gone = *old;
        *old = gone->next;
        pair_free(gone);
        b->n--;
    }
    ISOPROF_ASSERT(b->n < DEPLOY_PAIRS_MAX);
    if ((p = isoprof_calloc(1, sizeof(*p))) == NULL)
        return NULL;
    p->worker = isoprof_strdup(worker);
    p->version = isoprof_strdup(version);
    if (p->worker == NULL || p->version == NULL) {
        pair_free(p);
        return NULL;
    }
    p->touched = ++b->tick;
    p->next = b->pairs;
    b->pairs = p;
    b->n++;
    return p;
}

void deploy_meta(struct agent *a, const struct target *t, struct writer_meta *m)
{
    const struct cfg *c = a->cfg;
    memset(&m->deploy, 0, sizeof(m->deploy));
    if (!c->anomaly.regression.enabled || m->type != STORE_TYPE_CPU)
        return;
    if ((m->flags & STORE_FLAG_ON_DEMAND) ||
        (m->anomaly != 0 && m->anomaly != STORE_ANOMALY_VERSION_REGRESSION))
        return;
    /* A process warming up (the window started soon after the attach:
     * after a deploy, the new process's start) compiles and collects more
     * than it will: not its code's doing. */
    if (t->w.start_ns < t->attached_mono_ns + c->anomaly.regression.warmup_ns)
        return;
    m->deploy.fold = 1;
    regress_params_default(&m->deploy.p);
    m->deploy.p.min_samples = c->anomaly.regression.min_samples;
    m->deploy.p.min_windows = c->anomaly.regression.min_windows;
    m->deploy.p.min_delta = c->anomaly.regression.min_delta;
    m->deploy.p.min_ratio = c->anomaly.regression.min_ratio;
    m->deploy.p.alpha = c->anomaly.regression.alpha;
    m->deploy.keep = c->anomaly.regression.max_versions;
    m->deploy.max_fns = c->anomaly.regression.max_functions;
    const struct deploy_pair *p = pair_find(a->deploy, t->worker, t->version);
    if (p != NULL && p->ep != NULL && m->anomaly == 0 && m->pin == NULL) {
        /* A flagged version: its windows are evidence, labelled as such. */
        m->anomaly = STORE_ANOMALY_VERSION_REGRESSION;
        m->pin = p->ep;
    }
}

/* The isolates of worker/version that can take a window: extra ones, until
 * the pair has min_samples in min_windows or its allowance is spent. */
static void ask_extra(struct agent *a, struct deploy_pair *p, const struct deploy_result *r)
{
    const struct cfg *c = a->cfg;
    uint64_t now = isoprof_now_mono_ns();
    for (struct target *t = a->targets; t; t = t->next) {
        if (p->extra >= c->anomaly.regression.extra_windows)
            return;
        if (t->state != TARGET_READY || t->removing || strcmp(t->worker, p->worker) != 0 ||
            strcmp(t->version, p->version) != 0)
            continue;
        if (win_extra_cpu(&t->w, now, c->anomaly.cpu_interval_ns) != 0)
            continue; /* recording, or waiting: asked again after its window */
        p->extra++;
        a->n.regression_extra_windows++;
        log_info("extra window for a new version",
                 "worker=%s version=%s thread=%s isolate=%u baseline=%s busy=%U min_samples=%U "
                 "windows=%U min_windows=%u extra=%u of=%u",
                 p->worker, p->version, t->thread, t->isolate, r->base, r->busy,
                 (uint64_t)c->anomaly.regression.min_samples, r->windows,
                 c->anomaly.regression.min_windows, p->extra, c->anomaly.regression.extra_windows);
    }
}

void deploy_done(struct agent *a, const char *worker, const char *version,
                 const struct deploy_result *r)
{
    if (!r->valid)
        return;
    if (r->err != 0) {
        a->n.regression_errors++;
        log_warn("version regression: a step failed", "worker=%s version=%s what=%s err=%e", worker,
                 version, r->what ? r->what : "", r->err);
    }
    if (r->dropped > 0)
        log_info("version aggregates dropped", "worker=%s count=%u reason=%s", worker, r->dropped,
                 "anomaly.regression.max_versions");
    struct deploy_pair *p = pair_get(a, worker, version);
    if (p == NULL)
        return;
    if (r->judged)
        a->n.regression_comparisons++;
    if (r->flagged && r->anomaly != 0 && (p->ep == NULL || p->ep->id != r->anomaly)) {
        episode_unref(p->ep);
        p->ep = episode_new(STORE_ANOMALY_VERSION_REGRESSION, worker, version, NULL, 0, 0, 0);
        if (p->ep != NULL) {
            p->ep->id = r->anomaly;
            p->ep->open = 0;
        }
    } else if (!r->flagged && r->judged) {
        episode_unref(p->ep);
        p->ep = NULL;
    }
    if (r->verdict == DEPLOY_FLAGGED) {
        a->n.anomalies[STORE_ANOMALY_VERSION_REGRESSION]++;
        log_warn("anomaly flagged",
                 "kind=version_regression worker=%s version=%s baseline=%s regressions=%U "
                 "function=%s share_before=%f share_after=%f busy=%U baseline_busy=%U "
                 "pinned=%U anomaly=%U compare_ms=%f",
                 worker, version, r->base, (uint64_t)r->regressions, r->top, r->top_before,
                 r->top_after, r->busy, r->base_busy, (uint64_t)r->pinned, r->anomaly,
                 (double)r->compare_ns / 1e6);
    } else if (r->verdict == DEPLOY_CLEARED) {
        log_info("anomaly cleared",
                 "kind=version_regression worker=%s version=%s baseline=%s busy=%U "
                 "baseline_busy=%U anomaly=%U",
                 worker, version, r->base, r->busy, r->base_busy, r->anomaly);
    }
    log_debug("version aggregate",
              "worker=%s version=%s busy=%U windows=%U bytes=%U baseline=%s baseline_busy=%U "
              "judged=%d regressions=%U grown=%U shrunk=%U flagged=%d compare_ms=%f",
              worker, version, r->busy, r->windows, r->agg_bytes, r->base, r->base_busy, r->judged,
              (uint64_t)r->regressions, (uint64_t)r->grown, (uint64_t)r->shrunk, r->flagged,
              (double)r->compare_ns / 1e6);
    const struct cfg *c = a->cfg;
    /* Not judged for want of samples, or of windows to tell the samples'
     * spread (an old aggregate keeps none: windows 0 then, and samples
     * decide). */
    if (c->anomaly.regression.enabled && !a->stopping && r->base[0] != '\0' &&
        r->base_busy >= c->anomaly.regression.min_samples &&
        (r->busy < c->anomaly.regression.min_samples ||
         (r->windows > 0 && r->windows < c->anomaly.regression.min_windows)))
        ask_extra(a, p, r);
}

void deploy_free(struct agent *a)
{
    if (a->deploy == NULL)
        return;
    for (struct deploy_pair *p = a->deploy->pairs, *n; p; p = n) {
        n = p->next;
        pair_free(p);
    }
    isoprof_free(a->deploy);
    a->deploy = NULL;
}

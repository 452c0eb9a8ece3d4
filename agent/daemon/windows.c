/*
 * windows.c - the window state machine of every isolate (windows.h has the
 * rules).
 *
 * One CPU window per isolate at a time, in one of the states of enum
 * win_state; the deadline that matters in each state is cpu_due_ns (the
 * next window while NONE, the window's end while RUNNING, the slot's grace
 * while STOPPING). Heap windows run beside it on heap_due_ns. The driver
 * is asked for one wake-up per isolate, the earlier of the two.
 *
 * Every path that ends a CPU window goes through window_end(), which frees
 * the slot, answers what the window was taken for if nobody took it,
 * admits waiting windows and plans the next one. Nothing here calls back
 * into itself through the driver: win_ops calls only send messages.
 */
#include "windows.h"
#include "log.h"
#include "schedule.h"
#include "store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WIN_MIN_INTERVAL_US 100 /* below, V8's sampler spins; config refuses it */

static const char *const win_state_names[] = {"none", "queued", "starting", "running", "stopping"};

const char *win_state_name(enum win_state st)
{
    return (unsigned)st < ISOPROF_ARRAY_SIZE(win_state_names) ? win_state_names[st] : "?";
}

static int state_open(enum win_state st)
{
    return st == WIN_STARTING || st == WIN_RUNNING || st == WIN_STOPPING;
}

static void label(const struct win_iso *w, const char **worker, uint32_t *isolate)
{
    *worker = "?";
    *isolate = 0;
    if (w->s->ops->label)
        w->s->ops->label(w, worker, isolate);
}

/* --- wake-ups --- */

static uint64_t earlier(uint64_t a, uint64_t b)
{
    if (a == 0)
        return b;
    if (b == 0)
        return a;
    return a < b ? a : b;
}

/* Ask for the wake-up the state needs now, if it changed. */
static void rearm(struct win_iso *w)
{
    const struct win_sched *s = w->s;
    uint64_t due = 0;
    switch (w->cpu) {
    case WIN_NONE:
        if (w->ready && !s->stopping && !w->held)
            due = w->cpu_due_ns;
        break;
    case WIN_RUNNING:
        due = w->cpu_due_ns;
        break;
    case WIN_STOPPING:
        if (w->slot)
            due = w->cpu_due_ns;
        break;
    case WIN_QUEUED:
    case WIN_STARTING:
        break;
    }
    if (w->ready && !s->stopping && !w->held)
        due = earlier(due, w->heap_due_ns);
    if (due != w->armed_ns) {
        w->armed_ns = due;
        s->ops->arm(w, due);
    }
}

/* --- slots, the queue and the open count --- */

static void slot_take(struct win_iso *w)
{
    ISOPROF_ASSERT(!w->slot);
    w->slot = 1;
    w->s->slots++;
    w->g->slots++;
}

/* Gives w's slot back, if it holds one; 1 if it did. */
static int slot_give(struct win_iso *w)
{
    if (!w->slot)
        return 0;
    ISOPROF_ASSERT(w->s->slots > 0 && w->g->slots > 0);
    w->slot = 0;
    w->s->slots--;
    w->g->slots--;
    return 1;
}

static void set_state(struct win_iso *w, enum win_state st)
{
    struct win_sched *s = w->s;
    int was = state_open(w->cpu), is = state_open(st);
    w->cpu = st;
    if (was == is)
        return;
    if (is) {
        s->open++;
        return;
    }
    ISOPROF_ASSERT(s->open > 0);
    if (--s->open == 0 && s->draining && s->ops->idle)
        s->ops->idle(s);
}

/* --- fair slots: the groups, their queues and the round robin --- */

static unsigned min_u(unsigned a, unsigned b)
{
    return a < b ? a : b;
}

/* The fair level: the largest L such that every group may hold
 * min(its attached isolates, L) slots at once and the shares add up to no
 * more than max_concurrent (max-min fairness over the groups' demands). 0
 * when there are more groups than slots. */
static unsigned fair_level(const struct win_sched *s)
{
    unsigned cap = s->cfg->sampling.cpu.max_concurrent, lo = 0, hi = cap;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo + 1) / 2, sum = 0;
        for (const struct win_group *g = s->groups; g && sum <= cap; g = g->next)
            sum += min_u(g->ready, mid);
        if (sum <= cap)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The slots g is owed: its share at level, less what it holds. */
static unsigned owed(const struct win_group *g, unsigned level)
{
    unsigned share = min_u(g->ready, level);
    return share > g->slots ? share - g->slots : 0;
}

/* Whether a scheduled window of g may take a slot now: one is free, and
 * taking it leaves every other group the slots it is owed, so a group
 * under its share never waits for one over it. */
static int slot_for(const struct win_sched *s, const struct win_group *g, unsigned level,
                    unsigned owed_all)
{
    unsigned cap = s->cfg->sampling.cpu.max_concurrent;
    if (s->slots >= cap)
        return 0;
    return cap - s->slots > owed_all - owed(g, level);
}

static unsigned owed_total(const struct win_sched *s, unsigned level)
{
    unsigned n = 0;
    for (const struct win_group *g = s->groups; g; g = g->next)
        n += owed(g, level);
    return n;
}

static int slot_free_for(const struct win_sched *s, const struct win_group *g)
{
    unsigned level = fair_level(s);
    return slot_for(s, g, level, owed_total(s, level));
}

static void rr_remove(struct win_sched *s, struct win_group *g)
{
    struct win_group *prev = NULL;
    for (struct win_group *h = s->rr_head; h; prev = h, h = h->rr_next) {
        if (h != g)
            continue;
        if (prev)
            prev->rr_next = h->rr_next;
        else
            s->rr_head = h->rr_next;
        if (s->rr_tail == h)
            s->rr_tail = prev;
        h->rr_next = NULL;
        h->in_rr = 0;
        return;
    }
}

static void rr_push(struct win_sched *s, struct win_group *g)
{
    g->rr_next = NULL;
    g->in_rr = 1;
    if (s->rr_tail)
        s->rr_tail->rr_next = g;
    else
        s->rr_head = g;
    s->rr_tail = g;
}

/* w waits for a slot: last in its group's queue; the group joins the
 * round robin if it was not in it. */
static void queue_push(struct win_sched *s, struct win_iso *w)
{
    struct win_group *g = w->g;
    w->q_next = NULL;
    if (g->q_tail)
        g->q_tail->q_next = w;
    else
        g->q_head = w;
    g->q_tail = w;
    g->nq++;
    s->nqueued++;
    if (!g->in_rr)
        rr_push(s, g);
}

static void queue_remove(struct win_sched *s, struct win_iso *w)
{
    struct win_group *g = w->g;
    struct win_iso *prev = NULL;
    for (struct win_iso *q = g->q_head; q; prev = q, q = q->q_next) {
        if (q != w)
            continue;
        if (prev)
            prev->q_next = q->q_next;
        else
            g->q_head = q->q_next;
        if (g->q_tail == q)
            g->q_tail = prev;
        q->q_next = NULL;
        g->nq--;
        s->nqueued--;
        if (g->q_head == NULL)
            rr_remove(s, g);
        return;
    }
}

unsigned win_queued(const struct win_sched *s)
{
    return s->nqueued;
}

/* --- tags --- */

/* Drop what a window that nobody took was for: its pin, and an on-demand
 * request, answered. */
static void tags_release(struct win_sched *s, struct win_tags *t, int err, const char *why)
{
    episode_unref(t->pin);
    if (t->od != NULL)
        s->ops->od_fail(t->od, err, why);
    memset(t, 0, sizeof(*t));
}

static void cpu_tags_release(struct win_iso *w)
{
    tags_release(w->s, &w->tags, -EIO, "the window was not taken (see the daemon's log)");
    w->od_duration_ns = w->od_interval_ns = 0;
}

/* --- planning (the decisions are schedule.c's) --- */

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static const struct sched_plan *plan_now(struct win_iso *w);

static void plan_first(struct win_iso *w, uint64_t now)
{
    w->cpu_due_ns = sched_first_due(w->s->cfg, plan_now(w), w->s->rng, now);
    rearm(w);
}

static void plan_next(struct win_iso *w, uint64_t now, uint64_t base)
{
    w->cpu_base_ns = base;
    w->cpu_due_ns = sched_next_due(w->s->cfg, plan_now(w), w->s->rng, now, base);
    rearm(w);
}

static void plan_heap(struct win_iso *w, uint64_t now)
{
    w->heap_deferred = 0; /* a heap window planned afresh has not waited yet */
    w->heap_due_ns = sched_heap_due(w->s->cfg, plan_now(w), w->s->rng, now, now);
    rearm(w);
}

/* --- the cost budget --- */

const uint32_t win_pause_bounds_ms[WIN_PAUSE_BUCKETS] = {1,   2,   5,   10,   25,   50,
                                                         100, 250, 500, 1000, 2500, 5000};

static const char *const win_call_names[WIN_NCALLS] = {"start", "stop", "heap", "snapshot"};

const char *win_call_name(enum win_call call)
{
    return (unsigned)call < WIN_NCALLS ? win_call_names[call] : "?";
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The median of the latest n (<= WIN_PAUSE_KEEP) of a ring that has had
 * count entries in all, in ns; the largest too. */
static uint64_t ring_median(const uint32_t *ring, uint64_t count, size_t n, uint64_t *max)
{
    uint64_t v[WIN_PAUSE_KEEP];
    if (n > count)
        n = (size_t)count;
    *max = 0;
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        v[i] = (uint64_t)ring[(count - 1 - i) % WIN_PAUSE_KEEP] * 1000u;
        if (v[i] > *max)
            *max = v[i];
    }
    qsort(v, n, sizeof(v[0]), cmp_u64);
    return v[n / 2];
}

static uint64_t estimate(const struct win_iso *w, enum win_call call)
{
    uint64_t max;
    return ring_median(w->pause[call].us, w->pause[call].count, WIN_PAUSE_EST, &max);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_d(double *v, size_t n)
{
    qsort(v, n, sizeof(v[0]), cmp_double);
    return v[n / 2];
}

static uint64_t ns_of(double v)
{
    return v <= 0.0 ? 0 : v < 1.8e19 ? (uint64_t)v : UINT64_MAX;
}

/* The stop's two parts (schedule.h, struct sched_cost) from the latest
 * stops: a robust line through (length, stall), the median of the slopes
 * between windows whose lengths differ by a quarter or more, and the
 * median intercept. With no such pair, the whole stall per second. */
static void stop_cost(const struct win_iso *w, struct sched_cost *k)
{
    size_t n = w->nstops < WIN_PAUSE_EST ? (size_t)w->nstops : WIN_PAUSE_EST;
    double len[WIN_PAUSE_EST], y[WIN_PAUSE_EST], v[WIN_PAUSE_EST * WIN_PAUSE_EST];
    size_t ns = 0;
    double longest = 0.0;
    for (size_t i = 0; i < n; i++) {
        len[i] = (double)w->stops[i].len_ns / 1e9;
        y[i] = (double)w->stops[i].pause_ns;
        if (len[i] > longest)
            longest = len[i];
    }
    if (n == 0 || longest <= 0.0)
        return;
    k->stop_len_ns = ns_of(longest * 1e9);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            double lo = len[i] < len[j] ? len[i] : len[j], hi = len[i] + len[j] - lo;
            if (hi - lo >= 0.25 * hi)
                v[ns++] = (len[i] < len[j] ? y[j] - y[i] : y[i] - y[j]) / (hi - lo);
        }
    if (ns == 0) {
        for (size_t i = 0; i < n; i++)
            v[i] = len[i] > 0.0 ? y[i] / len[i] : 0.0;
        k->stop_ns_s = ns_of(median_d(v, n));
        return;
    }
    double slope = median_d(v, ns);
    if (slope < 0.0)
        slope = 0.0;
    for (size_t i = 0; i < n; i++)
        v[i] = y[i] - slope * len[i];
    double fixed = median_d(v, n);
    k->stop_fit = 1;
    k->stop_ns = ns_of(fixed);
    k->stop_ns_s = ns_of(slope);
}

/* The stalls over max_pause, "start,stop,heap" or part of it, or "none". */
static const char *over_name(unsigned flags, char *buf, size_t cap)
{
    static const struct {
        unsigned flag;
        const char *name;
    } over[] = {{SCHED_START_OVER, "start"}, {SCHED_STOP_OVER, "stop"}, {SCHED_HEAP_OVER, "heap"}};
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(over); i++)
        if (flags & over[i].flag)
            n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? "," : "",
                                  over[i].name);
    return n ? buf : "none";
}

/* Whether a plan differs from the one last logged enough to say so: a
 * rule that applies or stops applying, or periods a quarter longer or
 * shorter. */
static int plan_news(const struct sched_plan *a, const struct sched_plan *b)
{
    if (a->flags != b->flags)
        return 1;
    double r = a->factor / b->factor;
    return r > 1.25 || r < 0.8;
}

void win_cost(const struct win_iso *w, struct sched_cost *k)
{
    memset(k, 0, sizeof(*k));
    k->start_ns = estimate(w, WIN_CALL_START);
    k->heap_ns = estimate(w, WIN_CALL_HEAP);
    stop_cost(w, k);
}

static void plan_make(const struct win_iso *w, struct sched_cost *k, struct sched_plan *out)
{
    win_cost(w, k);
    sched_plan(w->s->cfg, k, out);
}

/* w's plan, made afresh from its measures and the config in force. */
static const struct sched_plan *plan_now(struct win_iso *w)
{
    struct sched_cost k;
    plan_make(w, &k, &w->plan);
    return &w->plan;
}

/* Make w's plan again after a new measure or config, say so when it
 * changed, and move the planned windows to the new periods. */
static void plan_update(struct win_iso *w, uint64_t now)
{
    struct win_sched *s = w->s;
    const struct cfg *c = s->cfg;
    struct sched_cost k;
    struct sched_plan np;
    plan_make(w, &k, &np);
    int moved = np.period_ns != w->plan.period_ns || np.heap_period_ns != w->plan.heap_period_ns;
    w->plan = np;
    if (plan_news(&np, &w->logged)) {
        const char *worker;
        uint32_t isolate;
        char over[24];
        label(w, &worker, &isolate);
        log_info("window plan changed",
                 "worker=%s isolate=%u period_ms=%U duration_ms=%U heap_period_ms=%U factor=%f "
                 "share_pct=%f limited=%d over_max_pause=%s start_ms=%f stop_ms=%f "
                 "stop_ms_per_s=%f heap_ms=%f pause_share_pct=%f max_pause_ms=%U",
                 worker, isolate, np.period_ns / 1000000u, np.duration_ns / 1000000u,
                 np.heap_period_ns / 1000000u, np.factor, np.share * 100.0,
                 (np.flags & SCHED_LIMITED) != 0, over_name(np.flags, over, sizeof(over)),
                 (double)k.start_ns / 1e6, (double)k.stop_ns / 1e6, (double)k.stop_ns_s / 1e6,
                 (double)k.heap_ns / 1e6, c->sampling.budget.pause_share * 100.0,
                 c->sampling.budget.max_pause_ns / 1000000u);
        w->logged = np;
    }
    if (!moved || !w->ready || s->stopping)
        return;
    if (w->cpu == WIN_NONE && w->cpu_due_ns != 0 && w->cpu_base_ns != 0 && !w->cpu_deferred)
        w->cpu_due_ns = sched_next_due(c, &w->plan, s->rng, now, w->cpu_base_ns);
    if (w->heap_due_ns != 0 && w->heap_base_ns != 0 && !w->heap_deferred)
        w->heap_due_ns = sched_heap_due(c, &w->plan, s->rng, now, w->heap_base_ns);
    rearm(w);
}

void win_pause(struct win_iso *w, uint64_t now, enum win_call call, uint64_t pause_ns)
{
    struct win_sched *s = w->s;
    if ((unsigned)call >= WIN_NCALLS)
        return;
    struct win_pauses *p = &w->pause[call];
    uint64_t us = pause_ns / 1000u;
    p->us[p->count % WIN_PAUSE_KEEP] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    p->count++;
    p->total_ns += pause_ns;
    unsigned b = 0;
    while (b < WIN_PAUSE_BUCKETS && pause_ns > (uint64_t)win_pause_bounds_ms[b] * 1000000u)
        b++;
    s->pause_hist[call][b]++;
    s->pause_sum_ns[call] += pause_ns;
    sched_account_charge(&w->acct, now, pause_ns);
    if (call == WIN_CALL_STOP && w->cpu == WIN_STOPPING && w->stop_sent_ns > w->start_ns &&
        w->tags.interval_ns / 1000u == s->cfg->sampling.cpu.interval_ns / 1000u) {
        /* A window at the scheduled interval: what the next scheduled
         * ones will cost to stop. */
        size_t i = (size_t)(w->nstops % WIN_PAUSE_EST);
        w->stops[i].len_ns = w->stop_sent_ns - w->start_ns;
        w->stops[i].pause_ns = pause_ns;
        w->nstops++;
    }
    plan_update(w, now);
}

void win_pause_stat(const struct win_iso *w, enum win_call call, struct win_pause_stat *out)
{
    memset(out, 0, sizeof(*out));
    if ((unsigned)call >= WIN_NCALLS)
        return;
    const struct win_pauses *p = &w->pause[call];
    out->count = p->count;
    out->total_ns = p->total_ns;
    out->p50_ns = ring_median(p->us, p->count, WIN_PAUSE_KEEP, &out->max_ns);
}

/* The latest n of a ring's measures: the largest, in ns. */
static uint64_t ring_max(const struct win_pauses *p, size_t n)
{
    uint64_t max;
    ring_median(p->us, p->count, n, &max);
    return max;
}

/* A scheduled window's stalls, as the horizon's account plans them: the
 * largest of the latest measures of each call (not their median: the cap
 * must hold for the window that costs more than usual), a CPU window's
 * stop at the plan's length by the fitted line when that is more. */
static uint64_t window_cost(const struct win_iso *w, int heap)
{
    if (heap && w->pause[WIN_CALL_HEAP].count == 0) {
        /* Not measured yet: as costly as the isolate's costliest call. */
        uint64_t a = ring_max(&w->pause[WIN_CALL_START], WIN_PAUSE_EST);
        uint64_t b = ring_max(&w->pause[WIN_CALL_STOP], WIN_PAUSE_EST);
        return a > b ? a : b;
    }
    if (heap)
        return ring_max(&w->pause[WIN_CALL_HEAP], WIN_PAUSE_EST);
    struct sched_cost k;
    win_cost(w, &k);
    double fit = (double)k.stop_ns + (double)k.stop_ns_s * (double)w->plan.duration_ns / 1e9;
    uint64_t stop = ring_max(&w->pause[WIN_CALL_STOP], WIN_PAUSE_EST);
    if (fit > (double)stop)
        stop = fit < 1.8e19 ? (uint64_t)fit : UINT64_MAX;
    return ring_max(&w->pause[WIN_CALL_START], WIN_PAUSE_EST) + stop;
}

/* The stalls still to come of w's windows open: what a CPU window that
 * started will cost to stop (and to start, before its start answered), a
 * heap window in flight. Not charged yet, but they fall in the horizon of a
 * window that starts now. */
static uint64_t reserved(const struct win_iso *w)
{
    uint64_t r = 0;
    if (w->cpu == WIN_STARTING)
        r += window_cost(w, 0);
    else if (w->cpu == WIN_RUNNING || w->cpu == WIN_STOPPING)
        r += window_cost(w, 0) - ring_max(&w->pause[WIN_CALL_START], WIN_PAUSE_EST);
    if (w->heap_inflight)
        r += window_cost(w, 1);
    return r;
}

int64_t win_credit(const struct win_iso *w, uint64_t now)
{
    const struct cfg *c = w->s->cfg;
    double cap = c->sampling.budget.pause_share * (double)c->sampling.budget.horizon_ns;
    double left = cap - (double)sched_account_spent(&w->acct, c, now) - (double)reserved(w);
    return left < -9e18 ? INT64_MIN : left > 9e18 ? INT64_MAX : (int64_t)left;
}

/* A scheduled window (heap or CPU) is due: 0 if its stalls fit the
 * horizon's account now; else 1, and it is planned for when they will. */
static int budget_defers(struct win_iso *w, uint64_t now, int heap)
{
    struct win_sched *s = w->s;
    int *flag = heap ? &w->heap_deferred : &w->cpu_deferred;
    plan_now(w);
    uint64_t cost = window_cost(w, heap), held = reserved(w);
    uint64_t all = cost > UINT64_MAX - held ? UINT64_MAX : cost + held;
    uint64_t ready = sched_account_ready(&w->acct, s->cfg, now, all);
    if (ready <= now) {
        *flag = 0;
        sched_account_admit(&w->acct, s->cfg, now, all);
        return 0;
    }
    if (!*flag) {
        *flag = 1;
        w->deferred++;
        s->n->windows_deferred++;
        const char *worker;
        uint32_t isolate;
        label(w, &worker, &isolate);
        log_debug("window deferred by the pause budget",
                  "worker=%s isolate=%u type=%s spent_ms=%U cost_ms=%U wait_ms=%U", worker, isolate,
                  heap ? "heap" : "cpu", sched_account_spent(&w->acct, s->cfg, now) / 1000000u,
                  (cost + held) / 1000000u, (ready - now) / 1000000u);
    }
    if (heap)
        w->heap_due_ns = ready;
    else
        w->cpu_due_ns = ready;
    return 1;
}

/* --- the CPU window --- */

/* Start a window now at interval_ns for duration_ns, taking a slot (the
 * cap was checked by the caller, or does not apply). w->tags already say
 * what it is for. 0, or -1 when the driver could not send the start (the
 * window is skipped and its tags released). */
static int cpu_begin(struct win_iso *w, uint64_t interval_ns, uint64_t duration_ns)
{
    struct win_sched *s = w->s;
    uint64_t us = interval_ns / 1000u;
    if (us < WIN_MIN_INTERVAL_US)
        us = WIN_MIN_INTERVAL_US;
    w->tags.interval_ns = us * 1000u;
    w->duration_ns = duration_ns;
    w->extra_interval_ns = 0; /* this window takes an extra one's place */
    slot_take(w);
    s->n->windows_started++;
    set_state(w, WIN_STARTING);
    w->cpu_due_ns = 0;
    w->cpu_deferred = 0; /* the planned window, deferred or not, is superseded */
    if (s->ops->cpu_start(w, w->tags.interval_ns) == 0) {
        rearm(w);
        return 0;
    }
    slot_give(w);
    s->n->windows_skipped++;
    set_state(w, WIN_NONE);
    cpu_tags_release(w);
    return -1;
}

/* A scheduled window at the configured interval and duration. */
static int cpu_begin_scheduled(struct win_iso *w)
{
    const struct cfg *c = w->s->cfg;
    uint64_t interval = w->extra_interval_ns ? w->extra_interval_ns : c->sampling.cpu.interval_ns;
    return cpu_begin(w, interval, plan_now(w)->duration_ns);
}

/* Start waiting windows while slots are free for them: the groups in
 * turn (round robin: a group served goes to the back), each group's own
 * windows first come, first served, and a group over its share only with
 * slots that no group under its share is owed. */
static void admit(struct win_sched *s, uint64_t now)
{
    while (!s->stopping && s->rr_head) {
        unsigned level = fair_level(s), owed_all = owed_total(s, level);
        struct win_group *g = s->rr_head;
        while (g && !slot_for(s, g, level, owed_all))
            g = g->rr_next;
        if (g == NULL)
            break;
        struct win_iso *w = g->q_head;
        queue_remove(s, w);
        if (g->q_head != NULL) {
            rr_remove(s, g); /* served: its next window waits its turn */
            rr_push(s, g);
        }
        w->cpu = WIN_NONE; /* queued is not open: no count to move */
        if (w->ready && cpu_begin_scheduled(w) != 0)
            plan_next(w, now, now);
    }
}

/* Start the first on-demand window waiting on w, outside the cap. 1 if it
 * started; 0 if none waits or it could not start (then it was answered
 * and the schedule planned again). */
static int next_od(struct win_iso *w, uint64_t now)
{
    struct win_sched *s = w->s;
    if (w->nodq == 0 || !w->ready || s->stopping)
        return 0;
    ISOPROF_ASSERT(w->cpu == WIN_NONE || w->cpu == WIN_QUEUED);
    struct win_od e = w->odq[0];
    memmove(w->odq, w->odq + 1, (w->nodq - 1) * sizeof(*w->odq));
    w->nodq--;
    if (w->cpu == WIN_QUEUED) {
        queue_remove(s, w); /* the on-demand window takes its turn */
        w->cpu = WIN_NONE;
    }
    w->tags.od = e.od; /* the queue's reference moves to the window */
    w->od_duration_ns = e.duration_ns;
    w->od_interval_ns = e.interval_ns;
    if (cpu_begin(w, e.interval_ns, e.duration_ns) == 0)
        return 1;
    plan_first(w, now); /* its due wake-up was dropped: plan the schedule again */
    return 0;
}

/* The window ended (taken, lost or skipped): its slot frees, what it was
 * for is answered unless the caller took the tags, the queue moves, and
 * w's next window is planned: the next on-demand one at once, else a
 * period after this one's start. */
static void window_end(struct win_iso *w, uint64_t now)
{
    struct win_sched *s = w->s;
    int had_start = w->cpu == WIN_RUNNING || w->cpu == WIN_STOPPING;
    uint64_t started = w->start_ns;
    slot_give(w);
    set_state(w, WIN_NONE);
    w->cpu_due_ns = 0;
    cpu_tags_release(w);
    admit(s, now);
    if (s->stopping || !w->ready) {
        rearm(w);
        return;
    }
    if (next_od(w, now))
        return; /* its end plans the next scheduled window */
    if (w->cpu == WIN_NONE && w->cpu_due_ns == 0)
        plan_next(w, now, had_start ? started : now);
}

/* The planned window is due. */
static void cpu_due(struct win_iso *w, uint64_t now)
{
    struct win_sched *s = w->s;
    if (budget_defers(w, now, 0))
        return;
    if (slot_free_for(s, w->g)) {
        if (cpu_begin_scheduled(w) != 0)
            plan_next(w, now, now);
        return;
    }
    w->cpu = WIN_QUEUED;
    s->n->windows_delayed++;
    queue_push(s, w);
    const char *worker;
    uint32_t isolate;
    label(w, &worker, &isolate);
    log_debug("window delayed", "worker=%s isolate=%u running=%u group_running=%u group_waiting=%u",
              worker, isolate, s->slots, w->g->slots, w->g->nq);
}

static void stop_now(struct win_iso *w, uint64_t now)
{
    struct win_sched *s = w->s;
    if (w->cpu != WIN_RUNNING)
        return;
    set_state(w, WIN_STOPPING);
    w->stop_sent_ns = now;
    w->cpu_due_ns = add_sat(now, WIN_STOP_GRACE_NS);
    if (s->ops->cpu_stop(w) != 0) {
        s->n->windows_lost++;
        window_end(w, now);
        return;
    }
    rearm(w);
}

static void release_slot(struct win_iso *w, uint64_t now)
{
    if (!slot_give(w))
        return;
    const char *worker;
    uint32_t isolate;
    label(w, &worker, &isolate);
    log_warn("slow Profiler.stop, slot released", "worker=%s isolate=%u waited_ms=%U", worker,
             isolate, (uint64_t)(WIN_STOP_GRACE_NS / 1000000u));
    admit(w->s, now);
}

/* --- heap windows --- */

/* Take a heap window now, for anomaly kind (0: the schedule or a request)
 * pinned to ep (NULL: none). 0 when one is taken or already being taken
 * (which then carries ep if it carried none); -EAGAIN when none can be. */
static int heap_take(struct win_iso *w, uint64_t now, uint8_t kind, struct episode *ep)
{
    struct win_sched *s = w->s;
    if (!w->ready || s->stopping)
        return -EAGAIN;
    if (w->heap_inflight) {
        if (ep && w->heap_tags.pin == NULL) {
            w->heap_tags.pin = episode_ref(ep);
            w->heap_tags.anomaly = kind;
        }
        return 0;
    }
    if (!w->heap_on)
        return -EAGAIN; /* not started (yet, or the runtime refused it) */
    w->heap_inflight = 1;
    w->heap_tags.anomaly = kind;
    w->heap_tags.pin = ep ? episode_ref(ep) : NULL;
    if (s->ops->heap_take(w) != 0) {
        w->heap_inflight = 0;
        episode_unref(w->heap_tags.pin);
        w->heap_tags.pin = NULL;
        w->heap_tags.anomaly = 0;
        return -EAGAIN;
    }
    w->heap_base_ns = now;
    if (ep)
        plan_heap(w, now); /* the next one a heap_period from now */
    return 0;
}

static void heap_due(struct win_iso *w, uint64_t now)
{
    if (budget_defers(w, now, 1))
        return;
    w->heap_deferred = 0;
    heap_take(w, now, 0, NULL);
    if (w->heap_due_ns == 0)
        plan_heap(w, now);
}

/* --- the interface --- */

void win_sched_init(struct win_sched *s, const struct cfg *cfg, const struct win_ops *ops,
                    struct isoprof_rng *rng, struct agent_counters *n)
{
    memset(s, 0, sizeof(*s));
    s->cfg = cfg;
    s->ops = ops;
    s->rng = rng;
    s->n = n;
    win_group_init(&s->solo, s);
}

void win_group_init(struct win_group *g, struct win_sched *s)
{
    memset(g, 0, sizeof(*g));
    g->s = s;
    g->next = s->groups;
    if (s->groups)
        s->groups->prev = g;
    s->groups = g;
}

void win_group_free(struct win_group *g)
{
    struct win_sched *s = g->s;
    ISOPROF_ASSERT(g->members == 0 && g->nq == 0 && g->slots == 0 && g->ready == 0);
    if (g->prev)
        g->prev->next = g->next;
    else
        s->groups = g->next;
    if (g->next)
        g->next->prev = g->prev;
    g->prev = g->next = NULL;
}

void win_iso_init(struct win_iso *w, struct win_sched *s, struct win_group *g)
{
    static const struct sched_cost unmeasured;
    memset(w, 0, sizeof(*w));
    w->s = s;
    w->g = g ? g : &s->solo;
    ISOPROF_ASSERT(w->g->s == s);
    w->g->members++;
    sched_plan(s->cfg, &unmeasured, &w->plan);
    w->logged = w->plan;
    w->next = s->all;
    if (s->all)
        s->all->prev = w;
    s->all = w;
}

void win_iso_free(struct win_iso *w, uint64_t now)
{
    struct win_sched *s = w->s;
    win_detached(w, now);
    if (w->prev)
        w->prev->next = w->next;
    else
        s->all = w->next;
    if (w->next)
        w->next->prev = w->prev;
    isoprof_free(w->odq);
    w->odq = NULL;
    w->odq_cap = 0;
    w->g->members--;
}

void win_attached(struct win_iso *w, uint64_t now)
{
    ISOPROF_ASSERT(w->cpu == WIN_NONE && w->nodq == 0);
    if (!w->ready)
        w->g->ready++;
    w->ready = 1;
    w->cpu_deferred = w->heap_deferred = 0;
    if (w->first_ns == 0)
        w->first_ns = now ? now : 1;
    if (!w->s->stopping)
        plan_first(w, now);
}

void win_detached(struct win_iso *w, uint64_t now)
{
    struct win_sched *s = w->s;
    if (w->ready)
        w->g->ready--; /* the other groups' shares grow: admit, below */
    w->ready = 0;
    if (w->cpu == WIN_QUEUED) {
        queue_remove(s, w);
        w->cpu = WIN_NONE;
    } else if (w->cpu != WIN_NONE) {
        s->n->windows_lost++;
    }
    slot_give(w);
    set_state(w, WIN_NONE);
    w->cpu_due_ns = 0;
    w->extra_interval_ns = 0;
    cpu_tags_release(w);
    for (size_t i = 0; i < w->nodq; i++)
        s->ops->od_fail(w->odq[i].od, -ECONNRESET, "the target went away");
    w->nodq = 0;
    tags_release(s, &w->heap_tags, -ECONNRESET, "the target went away");
    w->heap_on = 0;
    w->heap_inflight = 0;
    w->heap_due_ns = 0;
    admit(s, now);
    rearm(w);
}

void win_wake(struct win_iso *w, uint64_t now)
{
    w->armed_ns = 0; /* the driver's timer has fired */
    switch (w->cpu) {
    case WIN_NONE:
        if (w->ready && !w->s->stopping && !w->held && w->cpu_due_ns != 0 && now >= w->cpu_due_ns) {
            w->cpu_due_ns = 0;
            cpu_due(w, now);
        }
        break;
    case WIN_RUNNING:
        if (now >= w->cpu_due_ns)
            stop_now(w, now);
        break;
    case WIN_STOPPING:
        if (w->slot && now >= w->cpu_due_ns)
            release_slot(w, now);
        break;
    case WIN_QUEUED:
    case WIN_STARTING:
        break;
    }
    if (w->ready && !w->s->stopping && !w->held && w->heap_due_ns != 0 && now >= w->heap_due_ns) {
        w->heap_due_ns = 0;
        heap_due(w, now);
    }
    rearm(w);
}

void win_hold(struct win_iso *w, uint64_t now, int on)
{
    if (w->held == !!on)
        return;
    w->held = !!on;
    if (on)
        rearm(w);
    else
        win_wake(w, now); /* what fell due meanwhile starts now */
}

void win_cpu_started(struct win_iso *w, uint64_t now, int ok)
{
    struct win_sched *s = w->s;
    if (w->cpu != WIN_STARTING)
        return;
    if (!ok) {
        s->n->windows_skipped++;
        window_end(w, now);
        return;
    }
    set_state(w, WIN_RUNNING);
    w->start_ns = now;
    w->cpu_due_ns = add_sat(now, w->duration_ns);
    if (s->stopping) {
        stop_now(w, now);
        return;
    }
    rearm(w);
}

int win_cpu_stopped(struct win_iso *w, uint64_t now, int ok, struct win_tags *out)
{
    memset(out, 0, sizeof(*out));
    if (w->cpu != WIN_STOPPING)
        return -EALREADY; /* the session went away first; already accounted */
    if (ok) {
        *out = w->tags;
        memset(&w->tags, 0, sizeof(w->tags));
        w->od_duration_ns = w->od_interval_ns = 0;
    } else {
        w->s->n->windows_lost++;
    }
    window_end(w, now);
    return 0;
}

void win_heap_on(struct win_iso *w, uint64_t now)
{
    if (!w->ready)
        return;
    w->heap_on = 1;
    if (w->heap_due_ns == 0)
        plan_heap(w, now);
    /* A request that joined while the sampler was (re)starting gets the
     * heap window it asked for now. */
    if (w->heap_tags.od != NULL && !w->heap_inflight && heap_take(w, now, 0, NULL) != 0) {
        void *od = w->heap_tags.od;
        w->heap_tags.od = NULL;
        w->s->ops->od_fail(od, -EAGAIN, "the heap window could not be taken");
    }
}

void win_heap_off(struct win_iso *w, int err)
{
    w->heap_on = 0;
    if (err < 0 && w->heap_tags.od != NULL && !w->heap_inflight) {
        void *od = w->heap_tags.od;
        w->heap_tags.od = NULL;
        w->s->ops->od_fail(od, err, "the heap sampler could not be started");
    }
}

void win_heap_done(struct win_iso *w, struct win_tags *out)
{
    *out = w->heap_tags;
    memset(&w->heap_tags, 0, sizeof(w->heap_tags));
    w->heap_inflight = 0;
}

int win_extra_cpu(struct win_iso *w, uint64_t now, uint64_t interval_ns)
{
    struct win_sched *s = w->s;
    if (s->stopping || !w->ready)
        return -EAGAIN;
    if (w->cpu != WIN_NONE || w->nodq > 0)
        return -EBUSY;
    w->extra_interval_ns = interval_ns ? interval_ns : s->cfg->sampling.cpu.interval_ns;
    /* Due now: win_wake takes it through the budget and the cap. */
    w->cpu_due_ns = now ? now : 1;
    w->cpu_deferred = 0;
    const char *worker;
    uint32_t isolate;
    label(w, &worker, &isolate);
    log_debug("extra window", "worker=%s isolate=%u interval_ns=%U", worker, isolate,
              w->extra_interval_ns);
    rearm(w);
    return 0;
}

void win_anomaly_cpu(struct win_iso *w, uint64_t now, struct episode *ep)
{
    struct win_sched *s = w->s;
    if (s->stopping || !w->ready)
        return;
    if (w->cpu == WIN_STARTING || w->cpu == WIN_RUNNING) {
        /* Already recording: that window holds the moment; pin it. */
        if (w->tags.pin == NULL) {
            w->tags.pin = episode_ref(ep);
            w->tags.anomaly = ep->kind;
        }
        return;
    }
    if (w->cpu == WIN_STOPPING)
        return; /* it ended before the anomaly began; the next is planned as usual */
    if (w->cpu == WIN_QUEUED) {
        queue_remove(s, w);
        w->cpu = WIN_NONE;
    }
    w->cpu_due_ns = 0;
    /* Anomaly windows are rate-limited at their source and do not wait
     * for a slot: the moment would be gone. */
    w->tags.pin = episode_ref(ep);
    w->tags.anomaly = ep->kind;
    const char *worker;
    uint32_t isolate;
    label(w, &worker, &isolate);
    log_info("anomaly window", "worker=%s isolate=%u kind=%s interval_ns=%U", worker, isolate,
             store_anomaly_name(ep->kind), s->cfg->anomaly.cpu_interval_ns);
    if (cpu_begin(w, s->cfg->anomaly.cpu_interval_ns, s->cfg->sampling.cpu.duration_ns) != 0)
        plan_next(w, now, now);
}

int win_anomaly_heap(struct win_iso *w, uint64_t now, struct episode *ep)
{
    return heap_take(w, now, ep->kind, ep);
}

int win_ondemand_cpu(struct win_iso *w, uint64_t now, void *od, uint64_t duration_ns,
                     uint64_t interval_ns)
{
    struct win_sched *s = w->s;
    if (!w->ready || s->stopping)
        return -EAGAIN;
    if (w->nodq >= WIN_OD_QUEUE_MAX)
        return -EBUSY;
    if (w->nodq == w->odq_cap) {
        size_t cap = w->odq_cap ? w->odq_cap * 2 : 4;
        struct win_od *q = isoprof_realloc(w->odq, cap * sizeof(*q));
        if (q == NULL)
            return -ENOMEM;
        w->odq = q;
        w->odq_cap = cap;
    }
    s->ops->od_ref(od);
    w->odq[w->nodq++] = (struct win_od){od, duration_ns, interval_ns};
    if (w->cpu == WIN_NONE || w->cpu == WIN_QUEUED)
        next_od(w, now); /* not recording: start now (or answered if it cannot) */
    return 0;
}

int win_ondemand_heap(struct win_iso *w, uint64_t now, void *od)
{
    struct win_sched *s = w->s;
    if (!w->ready || s->stopping || !w->heap_on || w->heap_tags.od != NULL)
        return -EAGAIN;
    s->ops->od_ref(od);
    w->heap_tags.od = od; /* taken with the next (or the running) heap window */
    if (heap_take(w, now, 0, NULL) != 0) {
        w->heap_tags.od = NULL;
        s->ops->od_unref(od);
        return -EAGAIN;
    }
    return 0;
}

void *win_ondemand_shared(const struct win_iso *w, int heap, uint64_t duration_ns,
                          uint64_t interval_ns)
{
    if (heap)
        return w->heap_tags.od;
    if (w->tags.od && w->cpu == WIN_STARTING && w->od_duration_ns == duration_ns &&
        w->od_interval_ns == interval_ns)
        return w->tags.od; /* not recording yet: joining loses nothing */
    for (size_t i = 0; i < w->nodq; i++)
        if (w->odq[i].duration_ns == duration_ns && w->odq[i].interval_ns == interval_ns)
            return w->odq[i].od;
    return NULL;
}

void win_reconfigure(struct win_sched *s, const struct cfg *cfg, uint64_t now)
{
    /* Durations and intervals are read when each window starts, periods
     * when the next is planned. A window planned further ahead than the
     * new period allows is planned again, spread over the first period as
     * at attach, so a shorter period applies now; a higher cap admits the
     * delayed windows it now lets in. */
    s->cfg = cfg;
    for (struct win_iso *w = s->all; w; w = w->next) {
        plan_update(w, now); /* the budget or the periods may have changed */
        if (!w->ready || w->cpu != WIN_NONE || w->cpu_due_ns == 0)
            continue;
        if (sched_plan_stale(cfg, &w->plan, now, w->cpu_due_ns))
            plan_first(w, now);
    }
    admit(s, now);
}

void win_stop_all(struct win_sched *s, uint64_t now)
{
    s->stopping = 1;
    while (s->rr_head) {
        struct win_iso *w = s->rr_head->q_head;
        queue_remove(s, w);
        w->cpu = WIN_NONE;
    }
    for (struct win_iso *w = s->all; w; w = w->next) {
        if (w->cpu == WIN_RUNNING)
            stop_now(w, now);
        else
            rearm(w); /* nothing new: planned wake-ups are dropped */
    }
    s->draining = 1; /* from now on, the last window to close says so */
    if (s->open == 0 && s->ops->idle)
        s->ops->idle(s);
}

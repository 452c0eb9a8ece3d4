/*
 * sched.c - the duty-cycle planner: who is profiled when.
 *
 * Each attached isolate gets a CPU window of sampling.cpu.duration every
 * sampling.cpu.period. The first window starts at a random point within
 * the first jitter × period after attach (so the first profile comes soon,
 * and isolates attached together spread out); each later one starts one
 * period after the previous start, moved by a uniform random offset of
 * ±jitter × period, so isolates and hosts drift apart instead of lining up.
 *
 * At most sampling.cpu.max_concurrent windows hold a slot at once. A window
 * that falls due while every slot is taken joins a FIFO and starts as soon
 * as a slot frees; it is counted as delayed, never dropped. Its successor
 * is planned from its actual start.
 *
 * A target that stalls loses its own turn, not everyone's: a slot is held
 * from the start until the stop's reply, or SCHED_STOP_GRACE_MS after the
 * stop was sent, whichever is first (a window whose reply comes later is
 * still stored). A start or stop that goes unanswered for its whole call
 * timeout ends the session, and the target comes back after a pause that
 * doubles with each stall in a row (target.c).
 *
 * An anomaly's CPU window (sched_anomaly_window) starts at once, at the
 * fine interval, outside the cap; the schedule then carries on from it. So
 * does an on-demand window (sched_ondemand_window, ondemand.c), which waits
 * for a window already recording to end instead of breaking it.
 */
#include "internal.h"
#include "log.h"

#include "base.h"

#include <errno.h>

static unsigned slots_used(const struct agent *a)
{
    return a->running_windows;
}

static void slot_take(struct target *t)
{
    t->win_slot = 1;
    t->a->running_windows++;
}

/* Gives t's slot back, if it holds one; 1 if it did. */
static int slot_give(struct target *t)
{
    if (!t->win_slot)
        return 0;
    t->win_slot = 0;
    if (t->a->running_windows > 0)
        t->a->running_windows--;
    return 1;
}

unsigned sched_running(const struct agent *a)
{
    return slots_used(a);
}

static void queue_push(struct agent *a, struct target *t)
{
    t->queue_next = NULL;
    if (a->queue_tail)
        a->queue_tail->queue_next = t;
    else
        a->queue_head = t;
    a->queue_tail = t;
}

static void queue_remove(struct agent *a, struct target *t)
{
    struct target *prev = NULL;
    for (struct target *q = a->queue_head; q; prev = q, q = q->queue_next) {
        if (q != t)
            continue;
        if (prev)
            prev->queue_next = q->queue_next;
        else
            a->queue_head = q->queue_next;
        if (a->queue_tail == q)
            a->queue_tail = prev;
        q->queue_next = NULL;
        return;
    }
}

/* The window's anomaly tag and pin end with it; an on-demand request
 * still holding it gets no window (the target handed a taken window to the
 * writer, which answers the request, and cleared win_od). */
static void sched_unpin(struct target *t)
{
    episode_unref(t->win_pin);
    t->win_pin = NULL;
    t->win_anomaly = 0;
    if (t->win_od != NULL) {
        struct od_req *r = t->win_od;
        t->win_od = NULL;
        ondemand_window_done(r, -EIO, NULL, "the window was not taken (see the daemon's log)");
    }
}

static void sched_start(struct target *t, uint64_t interval_ns)
{
    struct agent *a = t->a;
    t->win_duration_ns =
        t->win_od ? ondemand_duration_ns(t->win_od) : a->cfg->sampling.cpu.duration_ns;
    slot_take(t);
    a->n.windows_started++;
    if (target_start_window(t, interval_ns) != 0) {
        slot_give(t);
        a->n.windows_skipped++;
        t->win = WINDOW_NONE;
        sched_unpin(t);
    }
}

static void sched_on_due(uv_timer_t *timer)
{
    struct target *t = container_of(timer, struct target, timer);
    struct agent *a = t->a;
    if (a->stopping || t->state != TARGET_READY || t->win != WINDOW_NONE)
        return;
    if (slots_used(a) < a->cfg->sampling.cpu.max_concurrent) {
        sched_start(t, a->cfg->sampling.cpu.interval_ns);
        return;
    }
    t->win = WINDOW_QUEUED;
    a->n.windows_delayed++;
    queue_push(a, t);
    log_debug("window delayed", "worker=%s isolate=%u running=%u", t->worker, t->isolate,
              slots_used(a));
}

static void sched_plan(struct target *t, uint64_t delay_ns)
{
    uint64_t now = isoprof_now_mono_ns();
    t->next_due_mono_ns = now + delay_ns;
    uv_timer_start(&t->timer, sched_on_due, delay_ns / 1000000u, 0);
}

void sched_target_ready(struct target *t)
{
    const struct cfg *c = t->a->cfg;
    double spread = c->sampling.cpu.jitter * (double)c->sampling.cpu.period_ns;
    sched_plan(t, (uint64_t)(agent_rand_unit(t->a) * spread));
}

static void sched_admit(struct agent *a)
{
    while (!a->stopping && a->queue_head && slots_used(a) < a->cfg->sampling.cpu.max_concurrent) {
        struct target *t = a->queue_head;
        queue_remove(a, t);
        t->win = WINDOW_NONE;
        if (t->state == TARGET_READY && !t->removing)
            sched_start(t, a->cfg->sampling.cpu.interval_ns);
    }
}

void sched_window_done(struct target *t)
{
    struct agent *a = t->a;
    slot_give(t);
    uint64_t started = t->win_start_mono_ns;
    int had_start = t->win == WINDOW_STOPPING || t->win == WINDOW_RUNNING;
    t->win = WINDOW_NONE;
    sched_unpin(t);
    sched_admit(a);
    if (a->stopping || t->removing || t->state != TARGET_READY)
        return;
    if (ondemand_next(t))
        return; /* its end plans the next scheduled window */
    const struct cfg *c = a->cfg;
    double period = (double)c->sampling.cpu.period_ns;
    double offset = (agent_rand_unit(a) * 2.0 - 1.0) * c->sampling.cpu.jitter * period;
    uint64_t now = isoprof_now_mono_ns();
    uint64_t base = had_start ? started : now;
    double due = (double)base + period + offset;
    uint64_t delay = due > (double)now ? (uint64_t)(due - (double)now) : 0;
    sched_plan(t, delay);
}

void sched_target_gone(struct target *t)
{
    struct agent *a = t->a;
    if (t->win == WINDOW_QUEUED)
        queue_remove(a, t);
    slot_give(t);
    t->win = WINDOW_NONE;
    sched_unpin(t);
    sched_admit(a);
}

void sched_anomaly_window(struct target *t, struct episode *ep)
{
    struct agent *a = t->a;
    if (a->stopping || t->removing || t->state != TARGET_READY)
        return;
    if (t->win == WINDOW_STARTING || t->win == WINDOW_RUNNING) {
        /* Already recording: that window holds the moment; pin it. */
        if (t->win_pin == NULL) {
            t->win_pin = episode_ref(ep);
            t->win_anomaly = ep->kind;
        }
        return;
    }
    if (t->win == WINDOW_STOPPING)
        return; /* it ended before the anomaly began; the next is planned as usual */
    if (t->win == WINDOW_QUEUED)
        queue_remove(a, t);
    t->win = WINDOW_NONE;
    uv_timer_stop(&t->timer);
    /* Anomaly windows are rate-limited at their source and do not wait
     * for a slot: the moment would be gone. */
    t->win_pin = episode_ref(ep);
    t->win_anomaly = ep->kind;
    log_info("anomaly window", "worker=%s isolate=%u kind=%s interval_ns=%U", t->worker, t->isolate,
             store_anomaly_name(ep->kind), a->cfg->anomaly.cpu_interval_ns);
    sched_start(t, a->cfg->anomaly.cpu_interval_ns);
}

void sched_reconfigure(struct agent *a)
{
    /* Durations and intervals are read when each window starts, periods
     * when the next is planned. A window planned further ahead than the
     * new period allows is planned again, spread over the first period as
     * at attach, so a shorter period applies now; a higher cap admits the
     * delayed windows it now lets in. */
    const struct cfg *c = a->cfg;
    uint64_t now = isoprof_now_mono_ns();
    double limit = (double)c->sampling.cpu.period_ns * (1.0 + c->sampling.cpu.jitter);
    for (struct target *t = a->targets; t; t = t->next) {
        if (t->state != TARGET_READY || t->removing || t->win != WINDOW_NONE)
            continue;
        if ((double)t->next_due_mono_ns > (double)now + limit)
            sched_target_ready(t);
    }
    sched_admit(a);
}

int sched_ondemand_window(struct target *t, struct od_req *r)
{
    struct agent *a = t->a;
    if (a->stopping || t->removing || t->state != TARGET_READY || t->win_od != NULL)
        return 0;
    if (t->win == WINDOW_QUEUED)
        queue_remove(a, t); /* the on-demand window takes its turn */
    else if (t->win != WINDOW_NONE)
        return 0;
    t->win = WINDOW_NONE;
    uv_timer_stop(&t->timer);
    t->win_od = ondemand_ref(r);
    sched_start(t, ondemand_interval_ns(r));
    if (t->win != WINDOW_NONE)
        return 1;
    sched_target_ready(t); /* its due timer was stopped: plan the schedule again */
    return 0;
}

void sched_release_slot(struct target *t)
{
    if (t->win != WINDOW_STOPPING || !slot_give(t))
        return;
    log_warn("slow Profiler.stop, slot released", "worker=%s isolate=%u waited_ms=%U", t->worker,
             t->isolate, (uint64_t)SCHED_STOP_GRACE_MS);
    sched_admit(t->a);
}

void sched_stop_all(struct agent *a)
{
    while (a->queue_head) {
        struct target *t = a->queue_head;
        queue_remove(a, t);
        t->win = WINDOW_NONE;
    }
    for (struct target *t = a->targets; t; t = t->next) {
        if (t->win == WINDOW_RUNNING)
            target_stop_window_now(t);
        else if (t->win == WINDOW_NONE && t->state == TARGET_READY)
            uv_timer_stop(&t->timer);
    }
}

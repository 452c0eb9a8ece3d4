/*
 * anomaly.c - the agent's anomaly detection: memory near the limit, the
 * isolate that dies there, and P999 latency spikes.
 *
 * Memory: every Runtime.getHeapUsage poll of a target lands in
 * anomaly_memory(). At or above anomaly.memory.threshold x memory_limit an
 * episode of memory_near_limit starts, unless one started on this isolate
 * less than anomaly.cooldown ago: it is recorded, and at once a heap window
 * and a CPU window at anomaly.cpu_interval are taken, both pinned to it;
 * while memory stays up, a pinned heap window comes every
 * anomaly.memory.heap_period (windows.c). The episode ends once memory has
 * been back under the threshold for the cooldown. A session that ends by
 * itself (the target closed it, or left /json/list) while the last poll
 * was at or above the threshold, or while a memory_near_limit episode was
 * still open, is an oom_suspected: recorded with the
 * isolate's last heap and CPU windows pinned.
 *
 * Latency: DogStatsD timings on the UDP listener (statsd.c) feed the P999
 * detector (latency.c) per worker/version; a spike episode triggers a
 * pinned CPU window at the fine interval on each attached isolate of that
 * worker/version. The detector's table of series is bounded; the workers
 * the agent watches (a configured target's worker label, or a target's
 * label once it is listed) are known to it and keep their place there
 * against any number of other tags. Lines it has no room for are counted
 * (latency_refused) and said in a warning at most once a minute.
 *
 * Episodes are recorded through the writer (writer_episode), so the store
 * sees them in order with the windows.
 */
#include "daemon.h"
#include "latency.h"
#include "log.h"
#include "statsd.h"

#include "base.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void memacc_reset(struct memacc *m)
{
    m->n = 0;
    m->step = 1;
    m->skip = 0;
    m->min = m->max = m->last = 0;
}

void memacc_add(struct memacc *m, uint64_t bytes)
{
    if (m->step == 0)
        memacc_reset(m);
    if (m->min == 0 || bytes < m->min)
        m->min = bytes;
    if (bytes > m->max)
        m->max = bytes;
    m->last = bytes;
    if (m->skip > 0) {
        m->skip--;
        return;
    }
    if (m->n == MEMACC_MAX) {
        /* Keep every other value and record half as often from now on. */
        for (uint32_t i = 0; i < MEMACC_MAX / 2; i++)
            m->kib[i] = m->kib[2 * i + 1];
        m->n = MEMACC_MAX / 2;
        m->step *= 2;
    }
    uint64_t kib = (bytes + 1023) / 1024;
    m->kib[m->n++] = kib > UINT32_MAX ? UINT32_MAX : (uint32_t)kib;
    m->skip = m->step - 1;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void memacc_figures(const struct memacc *m, struct store_mem *out)
{
    memset(out, 0, sizeof(*out));
    if (m->step == 0 || m->n == 0)
        return;
    uint32_t v[MEMACC_MAX];
    memcpy(v, m->kib, m->n * sizeof(v[0]));
    qsort(v, m->n, sizeof(v[0]), cmp_u32);
    /* The nearest-rank P999: the smallest value with >= 99.9 % at or below. */
    uint32_t rank = (uint32_t)(((uint64_t)m->n * 999 + 999) / 1000);
    uint64_t p = (uint64_t)v[rank - 1] * 1024;
    out->min = m->min;
    out->max = m->max;
    out->last = m->last;
    out->p999 = p > m->max ? m->max : p < m->min ? m->min : p;
}

/* --- memory_near_limit and oom_suspected --- */

static uint64_t memory_threshold(const struct target *t)
{
    return (uint64_t)(t->a->cfg->anomaly.memory.threshold * (double)target_memory_limit(t));
}

static void episode_record(struct agent *a, struct episode *e, int op)
{
    int rc = writer_episode(a->writer, e, op);
    if (rc != 0) {
        a->n.anomaly_errors++;
        log_error("anomaly not recorded", "kind=%s worker=%s err=%e", store_anomaly_name(e->kind),
                  e->worker, rc);
    }
}

static void memory_episode_end(struct target *t)
{
    struct episode *e = t->mem_ep;
    struct agent *a = t->a;
    t->mem_ep = NULL;
    t->mem_below_mono_ns = 0;
    win_memory_episode(&t->w, isoprof_now_mono_ns(), NULL);
    e->open = 0;
    episode_record(a, e, WRITER_EP_UPDATE);
    log_info("anomaly ended", "kind=%s worker=%s version=%s isolate=%u peak=%U threshold=%U",
             store_anomaly_name(e->kind), e->worker, e->version, e->isolate, e->value,
             e->threshold);
    episode_unref(e);
}

void anomaly_memory(struct target *t, uint64_t used)
{
    struct agent *a = t->a;
    const struct cfg *c = a->cfg;
    uint64_t now = isoprof_now_mono_ns();
    uint64_t thr = memory_threshold(t);
    t->mem_last = used;
    memacc_add(&t->mem_cpu, used);
    memacc_add(&t->mem_heap, used);
    if (a->stopping)
        return; /* a poll answered after the stop began: nothing new starts */
    if (t->snap_od != NULL)
        snapshot_poll(t, used);
    if (used < thr) {
        if (t->mem_ep == NULL)
            return;
        if (t->mem_below_mono_ns == 0)
            t->mem_below_mono_ns = now;
        else if (now - t->mem_below_mono_ns >= c->anomaly.cooldown_ns)
            memory_episode_end(t);
        return;
    }
    t->mem_below_mono_ns = 0;
    if (t->mem_ep) {
        if (used > t->mem_ep->value)
            t->mem_ep->value = used;
        t->mem_ep->end_ns = isoprof_now_wall_ns();
        snapshot_poll(t, used);
        return;
    }
    if (t->last_trigger_mono_ns && now - t->last_trigger_mono_ns < c->anomaly.cooldown_ns)
        return; /* rate-limited: one trigger per isolate per cooldown */
    struct episode *e = episode_new(STORE_ANOMALY_MEMORY_NEAR_LIMIT, t->worker, t->version,
                                    t->thread, t->isolate, used, thr);
    if (e == NULL) {
        log_error("out of memory flagging an anomaly", "worker=%s isolate=%u", t->worker,
                  t->isolate);
        return;
    }
    t->mem_ep = e;
    t->last_trigger_mono_ns = now;
    win_memory_episode(&t->w, now, e);
    a->n.anomalies[e->kind]++;
    log_warn("anomaly flagged",
             "kind=%s worker=%s version=%s thread=%s isolate=%u used=%U limit=%U threshold=%U",
             store_anomaly_name(e->kind), t->worker, t->version, t->thread, t->isolate, used,
             target_memory_limit(t), thr);
    episode_record(a, e, WRITER_EP_NEW);
    win_anomaly_heap(&t->w, now, e);
    win_anomaly_cpu(&t->w, now, e);
}

void anomaly_target_gone(struct target *t, int gone_by_itself)
{
    struct agent *a = t->a;
    snapshot_target_gone(t);
    uint64_t thr = memory_threshold(t);
    /* Near the limit: the last poll, or an episode still open (the last
     * poll may have caught the heap just after a GC). */
    int near = (t->mem_last > 0 && t->mem_last >= thr) || t->mem_ep != NULL;
    if (gone_by_itself && !a->stopping && near) {
        struct episode *e = episode_new(STORE_ANOMALY_OOM_SUSPECTED, t->worker, t->version,
                                        t->thread, t->isolate, t->mem_last, thr);
        if (e != NULL) {
            e->open = 0;
            a->n.anomalies[e->kind]++;
            log_warn("anomaly flagged",
                     "kind=%s worker=%s version=%s thread=%s isolate=%u last_used=%U limit=%U "
                     "threshold=%U",
                     store_anomaly_name(e->kind), t->worker, t->version, t->thread, t->isolate,
                     t->mem_last, target_memory_limit(t), thr);
            episode_record(a, e, WRITER_EP_OOM);
            episode_unref(e);
        }
    }
    if (t->mem_ep)
        memory_episode_end(t);
    t->mem_last = 0;
    t->mem_below_mono_ns = 0;
}

/* --- latency_p999_spike --- */

/* An open latency episode of one worker/version. */
struct lat_open {
    struct lat_open *next;
    struct episode *e;
};

#define LATENCY_TICK_MAX_MS 250
#define STATSD_GARBAGE_LOG_NS (60ull * 1000000000ull)
#define LATENCY_REFUSED_LOG_NS (60ull * 1000000000ull)

static int label_eq(const char *s, const char *p, size_t n)
{
    return strlen(s) == n && memcmp(s, p, n) == 0;
}

static void latency_on_obs(const struct statsd_obs *o, void *arg)
{
    struct agent *a = arg;
    int rc = latency_observe(a->latency, o->worker, o->worker_len, o->version, o->version_len,
                             o->value_ns, o->count, isoprof_now_mono_ns());
    if (rc == -ENOSPC || rc == -ENOMEM)
        a->n.latency_refused++;
}

/* A worker the agent watches: a configured target's worker label, or the
 * label of a target listed now (attached or on its way). The detector asks
 * for each new series and for every series at each window close. */
static int latency_worker_known(const char *worker, size_t wlen, void *arg)
{
    const struct agent *a = arg;
    for (size_t i = 0; i < a->cfg->ntargets; i++) {
        const char *w = a->cfg->targets[i].worker;
        if (w != NULL && label_eq(w, worker, wlen))
            return 1;
    }
    for (const struct target *t = a->targets; t; t = t->next)
        if (!t->removing && t->worker != NULL && label_eq(t->worker, worker, wlen))
            return 1;
    return 0;
}

/* Lines refused for want of room are counted per line; say so at most once
 * a minute, with how many since the last warning. */
static void latency_refused_log(struct agent *a, uint64_t now)
{
    struct latency_stats ls = latency_stats(a->latency);
    if (ls.refused_series <= a->latency_refused_logged ||
        (a->latency_refused_log_mono_ns != 0 &&
         now - a->latency_refused_log_mono_ns < LATENCY_REFUSED_LOG_NS))
        return;
    log_warn("latency detection refused new series: table full",
             "refused_lines=%U refused_total=%U series=%U known_series=%U displaced=%U "
             "hint=%s",
             ls.refused_series - a->latency_refused_logged, ls.refused_series, ls.series, ls.known,
             ls.displaced,
             "too many distinct worker/version tags; other workers get in again as idle "
             "series expire");
    a->latency_refused_logged = ls.refused_series;
    a->latency_refused_log_mono_ns = now;
}

/* An attached isolate of worker/version. */
static int serves(const struct target *t, const char *worker, const char *version)
{
    return t->state == TARGET_READY && !t->removing && strcmp(t->worker, worker) == 0 &&
           strcmp(t->version, version) == 0;
}

static void latency_on_start(struct agent *a, const struct latency_event *ev)
{
    char worker[LATENCY_LABEL_MAX + 1], version[LATENCY_LABEL_MAX + 1];
    snprintf(worker, sizeof(worker), "%.*s", (int)ev->worker_len, ev->worker);
    snprintf(version, sizeof(version), "%.*s", (int)ev->version_len, ev->version);
    struct lat_open *o = isoprof_calloc(1, sizeof(*o));
    struct episode *e = o ? episode_new(STORE_ANOMALY_LATENCY_P999_SPIKE, worker, version, NULL, 0,
                                        ev->p999_ns, ev->threshold_ns)
                          : NULL;
    if (e == NULL) {
        isoprof_free(o);
        log_error("out of memory flagging an anomaly", "kind=latency_p999_spike worker=%s", worker);
        return;
    }
    o->e = e;
    o->next = a->lat_open;
    a->lat_open = o;
    a->n.anomalies[e->kind]++;
    unsigned windows = 0;
    for (struct target *t = a->targets; t; t = t->next)
        windows += serves(t, worker, version);
    log_warn("anomaly flagged",
             "kind=latency_p999_spike worker=%s version=%s p999_ms=%f baseline_ms=%f "
             "threshold_ms=%f count=%U isolates=%u",
             worker, version, (double)ev->p999_ns / 1e6, (double)ev->baseline_ns / 1e6,
             (double)ev->threshold_ns / 1e6, ev->count, windows);
    episode_record(a, e, WRITER_EP_NEW);
    for (struct target *t = a->targets; t; t = t->next)
        if (serves(t, worker, version))
            win_anomaly_cpu(&t->w, isoprof_now_mono_ns(), e);
}

static void latency_on_end(struct agent *a, const struct latency_event *ev)
{
    for (struct lat_open **pp = &a->lat_open; *pp; pp = &(*pp)->next) {
        struct episode *e = (*pp)->e;
        if (!label_eq(e->worker, ev->worker, ev->worker_len) ||
            !label_eq(e->version, ev->version, ev->version_len))
            continue;
        struct lat_open *o = *pp;
        *pp = o->next;
        e->open = 0;
        e->value = ev->max_p999_ns;
        e->end_ns = isoprof_now_wall_ns();
        episode_record(a, e, WRITER_EP_UPDATE);
        log_info("anomaly ended",
                 "kind=latency_p999_spike worker=%s version=%s peak_ms=%f relearned=%d", e->worker,
                 e->version, (double)ev->max_p999_ns / 1e6, ev->relearned);
        episode_unref(e);
        isoprof_free(o);
        return;
    }
}

static void latency_on_event(const struct latency_event *ev, void *arg)
{
    if (ev->kind == LATENCY_START)
        latency_on_start(arg, ev);
    else
        latency_on_end(arg, ev);
}

static void latency_on_timer(uv_timer_t *timer)
{
    struct agent *a = timer->data;
    latency_tick(a->latency, isoprof_now_mono_ns(), latency_on_event, a);
    /* Garbage is counted, not logged per line; say so once a minute. */
    struct statsd_counts c = statsd_counts(a->statsd);
    uint64_t bad = c.garbage + c.unattributed + c.truncated;
    uint64_t now = isoprof_now_mono_ns();
    latency_refused_log(a, now);
    if (bad > a->statsd_garbage_logged &&
        (a->statsd_garbage_log_mono_ns == 0 ||
         now - a->statsd_garbage_log_mono_ns >= STATSD_GARBAGE_LOG_NS)) {
        log_warn("DogStatsD input ignored",
                 "garbage_lines=%U unattributed_lines=%U truncated_datagrams=%U accepted_lines=%U",
                 c.garbage, c.unattributed, c.truncated, c.accepted);
        a->statsd_garbage_logged = bad;
        a->statsd_garbage_log_mono_ns = now;
    }
}

int anomaly_start(struct agent *a)
{
    const struct cfg *c = a->cfg;
    if (c->anomaly.latency.listen == NULL || *c->anomaly.latency.listen == '\0')
        return 0;
    struct latency_params p;
    latency_params_default(&p);
    p.window_ns = c->anomaly.latency.window_ns;
    p.factor = c->anomaly.latency.factor;
    p.min_ns = c->anomaly.latency.min_ns;
    p.min_count = c->anomaly.latency.min_count;
    p.cooldown_ns = c->anomaly.cooldown_ns;
    if (p.idle_ns < p.cooldown_ns + 2 * p.window_ns)
        p.idle_ns = p.cooldown_ns + 2 * p.window_ns;
    int rc = latency_new(&p, &a->latency);
    if (rc != 0) {
        log_error("latency detection off", "err=%e why=%s", rc, "bad detector parameters");
        return 0;
    }
    latency_set_known(a->latency, latency_worker_known, a);
    struct statsd_tags tags = {c->anomaly.latency.worker_tag, c->anomaly.latency.version_tag};
    char *why = NULL;
    rc = statsd_listen(a->loop, c->anomaly.latency.listen, &tags, latency_on_obs, a, &a->statsd,
                       &why);
    if (rc != 0) {
        /* The profiler is worth more than the latency input: go on without it. */
        log_error("latency detection off: cannot listen for DogStatsD", "listen=%s err=%e why=%s",
                  c->anomaly.latency.listen, rc, why ? why : "");
        isoprof_free(why);
        latency_free(a->latency);
        a->latency = NULL;
        a->statsd = NULL;
        return 0;
    }
    uint64_t tick = p.window_ns / 4000000u;
    if (tick > LATENCY_TICK_MAX_MS)
        tick = LATENCY_TICK_MAX_MS;
    if (tick == 0)
        tick = 1;
    uv_timer_init(a->loop, &a->latency_timer);
    a->latency_timer.data = a;
    a->latency_timer_on = 1;
    uv_timer_start(&a->latency_timer, latency_on_timer, tick, tick);
    log_info("listening for DogStatsD latency", "listen=%s port=%u", c->anomaly.latency.listen,
             (unsigned)statsd_port(a->statsd));
    return 0;
}

void anomaly_stop(struct agent *a)
{
    if (a->statsd) {
        struct statsd_counts c = statsd_counts(a->statsd);
        log_info("DogStatsD counters",
                 "datagrams=%U accepted=%U ignored=%U unattributed=%U garbage=%U truncated=%U",
                 c.datagrams, c.accepted, c.ignored, c.unattributed, c.garbage, c.truncated);
        statsd_close(a->statsd, NULL, NULL);
        a->statsd = NULL;
    }
    if (a->latency_timer_on) {
        uv_close((uv_handle_t *)&a->latency_timer, NULL);
        a->latency_timer_on = 0;
    }
}

/* After the loop has stopped: what anomaly_start allocated. */
void anomaly_free(struct agent *a)
{
    for (struct lat_open *o = a->lat_open, *n; o; o = n) {
        n = o->next;
        episode_unref(o->e);
        isoprof_free(o);
    }
    a->lat_open = NULL;
    latency_free(a->latency);
    a->latency = NULL;
}

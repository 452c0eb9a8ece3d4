/*
 * report.c - what the agent says about itself: the bodies of GET /status
 * (one compact JSON object) and GET /metrics (Prometheus text exposition
 * format 0.0.4). The control socket serves them (agent_run hands them to
 * it as struct ctl_host's status and metrics, with the socket's own
 * counters copied into a->n first); this file only builds them.
 *
 * Both pages are built on the loop thread from the agent's own state
 * (targets, schedule, counters, the uploader's totals), which the loop
 * owns, plus two things measured here:
 *
 *   store figures  store_stat reads every record header (O(windows)), so it
 *                  never runs on the loop: a timer queues one thread-pool
 *                  job every REPORT_STAT_MS (the first at once; never two at
 *                  once) and the after-work callback copies the result into
 *                  a cache stamped with the time it was taken. The pages
 *                  show the cache (store.as_of says how old it is).
 *   loop lag       a one-shot timer re-armed for REPORT_LAG_MS each time it
 *                  fires; how late it fired (uv_now against when it was due)
 *                  is the loop lag. The last value and the largest of the
 *                  last minute are kept.
 *
 * DESIGN: struct report owns both timers and the work request. report_stop
 * closes the timers; the struct is freed by whichever comes last of the two
 * close callbacks and the after-work callback of a job still in the pool.
 *
 * Labels in /status come from targets and config files and may hold any
 * byte: strings are escaped for JSON and bytes that are not UTF-8 become
 * U+FFFD, so the page is always valid JSON in valid UTF-8. Both pages are
 * capped at REPORT_MAX_BODY.
 */
#include "report.h"
#include "anomaly.h"
#include "daemon.h"
#include "log.h"
#include "procs.h"
#include "snapshot.h"
#include "statsd.h"
#include "target.h"
#include "uplink.h"

#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define REPORT_STAT_MS 5000
#define REPORT_LAG_MS 1000
#define REPORT_LAG_WINDOW_MS 60000
#define REPORT_LAG_SLOTS 64 /* > one sample a second over the window */
#define REPORT_MAX_BODY ((size_t)64 << 20)

struct report {
    struct agent *a;
    uv_timer_t stat_timer, lag_timer;
    int stopped;
    int closes; /* close callbacks still to come */
    /* the store_stat job: at most one in the pool */
    uv_work_t work;
    int working;
    struct store *job_store;
    struct store_stat job_st;
    int job_err;
    uint64_t job_ns;
    /* the cache */
    int have_stat;
    struct store_stat st;
    uint64_t st_ns; /* wall time it was read */
    int st_err;     /* the last refresh's error (0: it worked) */
    /* loop lag (ms, loop time) */
    uint64_t lag_due;
    uint64_t lag_last;
    struct {
        uint64_t at, lag;
    } lag_slot[REPORT_LAG_SLOTS];
    unsigned lag_pos;
};

/* --- the store figures --- */

static void report_maybe_free(struct report *r)
{
    if (r->stopped && r->closes == 0 && !r->working)
        isoprof_free(r);
}

static void report_stat_work(uv_work_t *req)
{
    struct report *r = container_of(req, struct report, work);
    memset(&r->job_st, 0, sizeof(r->job_st));
    r->job_err = store_stat(r->job_store, &r->job_st);
    r->job_ns = isoprof_now_wall_ns();
}

static void report_stat_done(uv_work_t *req, int status)
{
    struct report *r = container_of(req, struct report, work);
    r->working = 0;
    if (!r->stopped && status == 0) {
        if (r->job_err == 0) {
            if (r->st_err != 0)
                log_info("store figures read again", "windows=%U", r->job_st.windows);
            r->st = r->job_st;
            r->st_ns = r->job_ns;
            r->have_stat = 1;
        } else if (r->st_err == 0) {
            log_warn("store figures not read", "err=%e", r->job_err);
        }
        r->st_err = r->job_err;
    }
    report_maybe_free(r);
}

static void report_on_stat_timer(uv_timer_t *h)
{
    struct report *r = container_of(h, struct report, stat_timer);
    if (r->working || r->stopped || r->a->store == NULL)
        return;
    r->job_store = r->a->store;
    if (uv_queue_work(r->a->loop, &r->work, report_stat_work, report_stat_done) == 0)
        r->working = 1;
}

/* --- the loop lag --- */

static void report_on_lag_timer(uv_timer_t *h)
{
    struct report *r = container_of(h, struct report, lag_timer);
    uint64_t now = uv_now(h->loop);
    uint64_t lag = now > r->lag_due ? now - r->lag_due : 0;
    r->lag_last = lag;
    r->lag_pos = (r->lag_pos + 1) % REPORT_LAG_SLOTS;
    r->lag_slot[r->lag_pos].at = now;
    r->lag_slot[r->lag_pos].lag = lag;
    r->lag_due = now + REPORT_LAG_MS;
    uv_timer_start(h, report_on_lag_timer, REPORT_LAG_MS, 0);
}

/* The largest lag measured in the last minute, ms. */
static uint64_t report_lag_max(const struct report *r, uint64_t now)
{
    uint64_t max = 0;
    for (unsigned i = 0; i < REPORT_LAG_SLOTS; i++) {
        if (r->lag_slot[i].at == 0 || now - r->lag_slot[i].at > REPORT_LAG_WINDOW_MS)
            continue;
        if (r->lag_slot[i].lag > max)
            max = r->lag_slot[i].lag;
    }
    return max;
}

/* --- start, stop --- */

int report_start(struct agent *a)
{
    struct report *r = isoprof_calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->a = a;
    if (a->start_mono_ns == 0)
        a->start_mono_ns = isoprof_now_mono_ns();
    uv_timer_init(a->loop, &r->stat_timer);
    uv_timer_init(a->loop, &r->lag_timer);
    r->stat_timer.data = r->lag_timer.data = r;
    /* Neither keeps the loop alive: shutdown waits for the work, not them. */
    uv_unref((uv_handle_t *)&r->stat_timer);
    uv_unref((uv_handle_t *)&r->lag_timer);
    uv_timer_start(&r->stat_timer, report_on_stat_timer, 0, REPORT_STAT_MS);
    r->lag_due = uv_now(a->loop) + REPORT_LAG_MS;
    uv_timer_start(&r->lag_timer, report_on_lag_timer, REPORT_LAG_MS, 0);
    a->report = r;
    return 0;
}

static void report_on_close(uv_handle_t *h)
{
    struct report *r = h->data;
    r->closes--;
    report_maybe_free(r);
}

void report_stop(struct agent *a)
{
    struct report *r = a->report;
    if (r == NULL)
        return;
    a->report = NULL;
    r->stopped = 1;
    r->closes = 2;
    uv_close((uv_handle_t *)&r->stat_timer, report_on_close);
    uv_close((uv_handle_t *)&r->lag_timer, report_on_close);
}

/* --- names --- */

const char *report_drop_name(unsigned reason)
{
    static const char *const names[AGENT_DROP_MAX] = {
        [AGENT_DROP_CLOSED] = "closed",
        [AGENT_DROP_EVICTED] = "evicted",
        [AGENT_DROP_PROTOCOL_ERROR] = "protocol_error",
        [AGENT_DROP_OVERSIZED] = "oversized",
        [AGENT_DROP_TIMEOUT] = "timeout",
        [AGENT_DROP_CONNECT_FAILED] = "connect_failed",
        [AGENT_DROP_AGENT] = "agent",
    };
    return reason < AGENT_DROP_MAX ? names[reason] : NULL;
}

static const char *target_state_name(enum target_state s)
{
    switch (s) {
    case TARGET_BACKOFF:
        return "backoff";
    case TARGET_CONNECTING:
        return "connecting";
    case TARGET_READY:
        return "ready";
    }
    return "backoff";
}

/* --- writing the pages --- */

/* The page b holds, as report_status and report_metrics hand it out: NULL
 * (the bytes freed) when an append failed (ENOMEM, or past
 * REPORT_MAX_BODY). */
static char *report_finish(struct isoprof_buf *b, size_t *len)
{
    char *out;
    return isoprof_buf_take(b, &out, len) == 0 ? out : NULL;
}

/* "key": (with a leading comma unless first) */
static void json_key(struct isoprof_buf *b, const char *key, int first)
{
    if (!first)
        isoprof_buf_putc(b, ',');
    isoprof_json_str(b, key);
    isoprof_buf_putc(b, ':');
}

static void json_u64(struct isoprof_buf *b, const char *key, uint64_t v, int first)
{
    json_key(b, key, first);
    isoprof_buf_printf(b, "%" PRIu64, v);
}

static void json_u64_or_null(struct isoprof_buf *b, const char *key, int known, uint64_t v)
{
    json_key(b, key, 0);
    if (known)
        isoprof_buf_printf(b, "%" PRIu64, v);
    else
        isoprof_buf_puts(b, "null");
}

/* Wall ns as RFC 3339 in UTC with milliseconds, or null when 0. */
static void json_time(struct isoprof_buf *b, const char *key, uint64_t ns, int first)
{
    json_key(b, key, first);
    if (ns == 0) {
        isoprof_buf_puts(b, "null");
        return;
    }
    time_t t = (time_t)(ns / 1000000000ull);
    struct tm tm;
    char base[32];
    if (gmtime_r(&t, &tm) == NULL || strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
        isoprof_buf_puts(b, "null");
        return;
    }
    isoprof_buf_printf(b, "\"%s.%03uZ\"", base, (unsigned)((ns / 1000000ull) % 1000));
}

/* --- the figures both pages share --- */

struct report_view {
    const struct store_stat *st; /* NULL: not read yet */
    uint64_t st_ns;
    struct upl_stats up;
    int upload_on;
    unsigned running, queued;
    uint64_t uptime_ns;
    uint64_t lag_last_ms, lag_max_ms;
};

static void report_view(struct agent *a, struct report_view *v)
{
    memset(v, 0, sizeof(*v));
    const struct report *r = a->report;
    if (r != NULL && r->have_stat) {
        v->st = &r->st;
        v->st_ns = r->st_ns;
    }
    /* The totals across reloads and after the uploader closed. */
    agent_upload_stats(a, &v->up);
    v->upload_on = a->cfg_boot->upload.url != NULL && a->cfg_boot->upload.url[0] != '\0';
    v->running = a->wins.slots;
    v->queued = win_queued(&a->wins);
    uint64_t now = isoprof_now_mono_ns();
    v->uptime_ns = a->start_mono_ns && now > a->start_mono_ns ? now - a->start_mono_ns : 0;
    if (r != NULL) {
        v->lag_last_ms = r->lag_last;
        v->lag_max_ms = report_lag_max(r, uv_now(a->loop));
    }
}

/* --- GET /status --- */

/* "source_maps": the cache of parsed maps and what became of frames. */
static void status_srcmaps(struct isoprof_buf *b, struct srcmap_cache *c)
{
    struct srcmap_stats sm;
    srcmap_cache_stats(c, &sm);
    json_key(b, "source_maps", 0);
    isoprof_buf_putc(b, '{');
    json_u64(b, "maps", sm.maps, 1);
    json_u64(b, "bytes", sm.bytes, 0);
    json_u64(b, "budget", sm.budget, 0);
    json_u64(b, "loads", sm.loads, 0);
    json_u64(b, "hits", sm.hits, 0);
    json_u64(b, "evictions", sm.evictions, 0);
    json_u64(b, "frames_mapped", sm.mapped, 0);
    json_u64(b, "frames_unmapped", sm.unmapped, 0);
    json_u64(b, "frames_over_allowance", sm.over_allowance, 0);
    json_u64(b, "cpu_ms", sm.cpu_ns / 1000000u, 0);
    json_key(b, "refused", 0);
    isoprof_buf_putc(b, '{');
    for (int r = 1; r < SRCMAP_NREASONS; r++)
        json_u64(b, srcmap_reason(r), sm.refused[r], r == 1);
    isoprof_buf_append(b, "}}", 2);
}

/* ns as ms with three decimals. */
static void json_ms(struct isoprof_buf *b, const char *key, uint64_t ns, int first)
{
    json_key(b, key, first);
    isoprof_buf_printf(b, "%" PRIu64 ".%03u", ns / 1000000u, (unsigned)(ns / 1000u % 1000u));
}

/* The "cpu_mode" object of a target: cold or warm windows and why
 * (agent/daemon/warm.h), the figures auto compares, the keep-alive's life. */
static void status_cpu_mode(struct isoprof_buf *b, const struct target *t, uint64_t now)
{
    const struct warm *k = &t->ka.warm;
    uint64_t cold, sampler;
    warm_costs(k, t->a->cfg, &cold, &sampler);
    isoprof_buf_putc(b, '{');
    json_key(b, "mode", 1);
    isoprof_json_str(b, k->want ? "warm" : "cold");
    json_key(b, "configured", 0);
    isoprof_json_str(b, cfg_cpu_mode_names[t->a->cfg->sampling.cpu.mode]);
    json_key(b, "why", 0);
    isoprof_json_str(b, warm_why_name(k->why));
    json_key(b, "keepalive", 0);
    isoprof_json_str(b, warm_state_name(k->st));
    json_u64_or_null(b, "cold_cost_ms", cold != 0, cold / 1000000u);
    json_ms(b, "sampler_cost_ms", sampler, 0);
    /* The sampler thread's CPU as measured in /proc, per second at the
     * interval it was measured at (null: not measured, a figure stands in). */
    json_key(b, "sampler_ms_per_s", 0);
    if (k->sampler_ns_per_s != 0)
        isoprof_buf_printf(b, "%.3f", (double)k->sampler_ns_per_s / 1e6);
    else
        isoprof_buf_puts(b, "null");
    json_u64_or_null(b, "sampler_interval_us", k->sampler_ns_per_s != 0,
                     k->sampler_interval_ns / 1000u);
    json_u64_or_null(b, "interval_us", k->interval_ns != 0 && k->st != WARM_OFF,
                     k->interval_ns / 1000u);
    json_u64_or_null(b, "retry_in_s", k->retry_ns > now, (k->retry_ns - now) / 1000000000u);
    json_u64(b, "starts", k->starts, 0);
    json_u64(b, "rotations", k->rotations, 0);
    json_u64(b, "refusals", k->refusals, 0);
    json_u64(b, "disturbances", k->disturbances, 0);
    json_u64(b, "warm_windows", k->warm_windows, 0);
    isoprof_buf_putc(b, '}');
}

/* The "budget" object of a target: what its windows cost it and the plan
 * that follows (windows.h, the cost budget). */
static void status_budget(struct isoprof_buf *b, const struct target *t, uint64_t now)
{
    const struct win_iso *w = &t->w;
    const struct sched_plan *p = &w->plan;
    isoprof_buf_putc(b, '{');
    json_ms(b, "period_ms", p->period_ns, 1);
    json_ms(b, "duration_ms", p->duration_ns, 0);
    json_ms(b, "heap_period_ms", p->heap_period_ns, 0);
    isoprof_buf_printf(b, ",\"factor\":%.3f", p->factor);
    isoprof_buf_printf(b, ",\"limited\":%s", (p->flags & SCHED_LIMITED) ? "true" : "false");
    json_key(b, "over_max_pause", 0);
    isoprof_buf_putc(b, '[');
    int first = 1;
    if (p->flags & SCHED_START_OVER) {
        isoprof_buf_puts(b, "\"start\"");
        first = 0;
    }
    if (p->flags & SCHED_STOP_OVER) {
        isoprof_buf_puts(b, first ? "\"stop\"" : ",\"stop\"");
        first = 0;
    }
    if (p->flags & SCHED_HEAP_OVER)
        isoprof_buf_puts(b, first ? "\"heap\"" : ",\"heap\"");
    isoprof_buf_putc(b, ']');
    isoprof_buf_printf(b, ",\"duration_capped\":%s",
                       (p->flags & SCHED_DURATION_CAPPED) ? "true" : "false");
    isoprof_buf_printf(b, ",\"planned_share\":%.6f", p->share);
    uint64_t total = 0;
    for (int c = 0; c < WIN_NCALLS; c++)
        total += w->pause[c].total_ns;
    uint64_t span = w->first_ns && now > w->first_ns ? now - w->first_ns : 0;
    isoprof_buf_printf(b, ",\"spent_share\":%.6f", span ? (double)total / (double)span : 0.0);
    json_ms(b, "paused_ms", total, 0);
    json_ms(b, "observed_ms", span, 0);
    isoprof_buf_printf(b, ",\"credit_ms\":%.3f", (double)win_credit(w, now) / 1e6);
    json_u64(b, "deferred", w->deferred, 0);
    struct sched_cost k;
    win_cost(w, &k);
    json_key(b, "estimate", 0);
    isoprof_buf_putc(b, '{');
    json_ms(b, "start_ms", k.start_ns, 1);
    json_ms(b, "stop_ms", k.stop_ns, 0);
    json_ms(b, "stop_ms_per_s", k.stop_ns_s, 0);
    isoprof_buf_printf(b, ",\"stop_fit\":%s", k.stop_fit ? "true" : "false");
    json_ms(b, "stop_len_ms", k.stop_len_ns, 0);
    json_ms(b, "heap_ms", k.heap_ns, 0);
    isoprof_buf_putc(b, '}');
    json_key(b, "pauses", 0);
    isoprof_buf_putc(b, '{');
    for (int c = 0; c < WIN_NCALLS; c++) {
        struct win_pause_stat ps;
        win_pause_stat(w, (enum win_call)c, &ps);
        json_key(b, win_call_name((enum win_call)c), c == 0);
        isoprof_buf_putc(b, '{');
        json_u64(b, "count", ps.count, 1);
        json_ms(b, "p50_ms", ps.p50_ns, 0);
        json_ms(b, "max_ms", ps.max_ns, 0);
        isoprof_buf_putc(b, '}');
    }
    isoprof_buf_append(b, "}}", 2);
}

static void status_target(struct isoprof_buf *b, const struct target *t)
{
    isoprof_buf_putc(b, '{');
    json_key(b, "worker", 1);
    isoprof_json_str(b, t->worker);
    json_key(b, "version", 0);
    isoprof_json_str(b, t->version);
    if (target_version_source(t->ep) != NULL) {
        json_key(b, "version_source", 0);
        isoprof_json_str(b, target_version_source(t->ep));
    }
    json_key(b, "thread", 0);
    isoprof_json_str(b, t->thread);
    json_u64(b, "isolate", t->isolate, 0);
    json_key(b, "runtime", 0);
    isoprof_json_str(b, target_runtime(t));
    json_key(b, "endpoint", 0);
    isoprof_json_str(b, t->ep->cfg->inspector);
    if (t->ep->found)
        isoprof_buf_puts(b, ",\"found\":true");
    if (t->ep->pid)
        json_u64(b, "pid", t->ep->pid, 0);
    if (t->ep->container[0]) {
        json_key(b, "container", 0);
        isoprof_json_str(b, t->ep->container);
    }
    json_key(b, "state", 0);
    isoprof_json_str(b, target_state_name(t->state));
    json_key(b, "memory", 0);
    isoprof_buf_putc(b, '{');
    json_key(b, "used", 1);
    if (t->mw.last > 0)
        isoprof_buf_printf(b, "%" PRIu64, t->mw.last);
    else
        isoprof_buf_puts(b, "null");
    json_u64_or_null(b, "limit", t->mw.limit != 0, t->mw.limit);
    json_key(b, "limit_source", 0);
    if (t->mw.limit != 0)
        isoprof_json_str(b, memwatch_source_name(t->mw.source));
    else
        isoprof_buf_puts(b, "null");
    /* The growth detector's last judgement (null before a window's worth
     * of polls). */
    json_key(b, "growth", 0);
    if (t->mw.g.judged) {
        isoprof_buf_printf(
            b,
            "{\"floor\":%" PRIu64 ",\"growth\":%" PRIu64 ",\"rate_mib_per_min\":%.3f,\"steady\":%s",
            t->mw.g.envelope_last, t->mw.g.growth, t->mw.g.rate * 60.0 / (1024.0 * 1024.0),
            t->mw.g.steady ? "true" : "false");
        json_u64_or_null(b, "limit_in_s", t->mw.g.eta_ns != UINT64_MAX,
                         t->mw.g.eta_ns / 1000000000u);
        isoprof_buf_putc(b, '}');
    } else {
        isoprof_buf_puts(b, "null");
    }
    isoprof_buf_putc(b, '}');
    json_key(b, "last_window", 0);
    isoprof_buf_putc(b, '{');
    json_time(b, "cpu", t->last_cpu_ns, 1);
    json_time(b, "heap", t->last_heap_ns, 0);
    isoprof_buf_putc(b, '}');
    json_key(b, "window", 0);
    isoprof_json_str(b, win_state_name(t->w.cpu));
    json_key(b, "budget", 0);
    status_budget(b, t, isoprof_now_mono_ns());
    json_key(b, "cpu_mode", 0);
    status_cpu_mode(b, t, isoprof_now_mono_ns());
    /* The open memory episode (the near-limit one first) and, for that
     * one, what its heap windows cost the isolate. */
    json_key(b, "anomaly", 0);
    const struct episode *ep = anomaly_memory_episode(t, MEMWATCH_NEAR);
    if (ep == NULL)
        ep = anomaly_memory_episode(t, MEMWATCH_GROWTH);
    if (ep != NULL) {
        isoprof_buf_putc(b, '{');
        json_key(b, "kind", 1);
        isoprof_json_str(b, store_anomaly_name(ep->kind));
        json_time(b, "since", ep->start_ns, 0);
        if (ep->kind == STORE_ANOMALY_MEMORY_NEAR_LIMIT) {
            uint64_t now = isoprof_now_mono_ns();
            json_key(b, "cost", 0);
            isoprof_buf_printf(b,
                               "{\"heap_windows\":%" PRIu64 ",\"stall_ms\":%.3f,\"share\":%.6f"
                               ",\"waited\":%" PRIu64,
                               t->mw.heap_windows, (double)t->mw.cost_ns / 1e6,
                               memwatch_cost_share(&t->mw, now), t->mw.waited);
            json_u64_or_null(b, "next_heap_in_ms", t->mw.heap_due_ns != 0,
                             t->mw.heap_due_ns > now ? (t->mw.heap_due_ns - now) / 1000000u : 0);
            isoprof_buf_putc(b, '}');
        }
        isoprof_buf_putc(b, '}');
    } else {
        isoprof_buf_puts(b, "null");
    }
    isoprof_buf_putc(b, '}');
}

/* The "counters" object: every row of counters.h by its key, in the
 * table's order; an array row as an object of its names. */
static void status_counters(struct isoprof_buf *b, const struct agent_counters *n)
{
    int first = 1;
    isoprof_buf_putc(b, '{');
#define STATUS_SCALAR(field, key, metric, labels, help)                                            \
    json_u64(b, key, n->field, first);                                                             \
    first = 0;
    AGENT_COUNTERS(STATUS_SCALAR)
#undef STATUS_SCALAR
#define STATUS_ARRAY(field, size, lo, key, metric, label, name, log_prefix, help)                  \
    json_key(b, key, first);                                                                       \
    first = 0;                                                                                     \
    isoprof_buf_putc(b, '{');                                                                      \
    for (unsigned i = (lo); i < (size); i++)                                                       \
        json_u64(b, name(i), n->field[i], i == (lo));                                              \
    isoprof_buf_putc(b, '}');
    AGENT_COUNTER_ARRAYS(STATUS_ARRAY)
#undef STATUS_ARRAY
    isoprof_buf_putc(b, '}');
}

char *report_status(struct agent *a, size_t *len)
{
    struct isoprof_buf b;
    isoprof_buf_init(&b, REPORT_MAX_BODY);
    struct report_view v;
    report_view(a, &v);
    const struct cfg *c = a->cfg;

    isoprof_buf_putc(&b, '{');
    json_key(&b, "version", 1);
    isoprof_json_str(&b, ISOPROF_VERSION);
    json_u64(&b, "pid", (uint64_t)getpid(), 0);
    json_u64(&b, "uptime_s", v.uptime_ns / 1000000000ull, 0);
    json_key(&b, "config", 0);
    isoprof_json_str(&b, c->source);

    json_key(&b, "discovery", 0);
    procs_status(a, &b);
    status_srcmaps(&b, a->srcmaps);
    json_key(&b, "targets", 0);
    isoprof_buf_putc(&b, '[');
    int first = 1;
    for (const struct target *t = a->targets; t; t = t->next) {
        if (t->removing)
            continue;
        if (!first)
            isoprof_buf_putc(&b, ',');
        first = 0;
        status_target(&b, t);
    }
    isoprof_buf_putc(&b, ']');

    json_key(&b, "schedule", 0);
    isoprof_buf_putc(&b, '{');
    json_u64(&b, "running", v.running, 1);
    json_u64(&b, "delayed", v.queued, 0);
    json_u64(&b, "max_concurrent", c->sampling.cpu.max_concurrent, 0);
    isoprof_buf_putc(&b, '}');

    const struct store_stat *st = v.st;
    json_key(&b, "store", 0);
    isoprof_buf_putc(&b, '{');
    json_key(&b, "path", 1);
    isoprof_json_str(&b, c->store.path);
    json_u64_or_null(&b, "windows", st != NULL, st ? st->windows : 0);
    json_u64_or_null(&b, "bytes", st != NULL, st ? st->stored_bytes : 0);
    json_u64(&b, "budget", st ? st->budget : c->store.max_size, 0);
    json_u64_or_null(&b, "evicted_total", st != NULL, st ? st->evicted_total : 0);
    json_time(&b, "as_of", v.st_ns, 0);
    isoprof_buf_putc(&b, '}');

    json_key(&b, "outbox", 0);
    isoprof_buf_putc(&b, '{');
    json_key(&b, "pending", 1);
    if (st)
        isoprof_buf_printf(&b, "%" PRIu64, st->outbox_pending);
    else
        isoprof_buf_puts(&b, "null");
    uint64_t now = isoprof_now_wall_ns();
    int has_oldest = st != NULL && st->outbox_pending > 0 && st->outbox_oldest_ns != 0;
    json_u64_or_null(&b, "oldest_age_s", has_oldest,
                     has_oldest && now > st->outbox_oldest_ns
                         ? (now - st->outbox_oldest_ns) / 1000000000ull
                         : 0);
    json_u64_or_null(&b, "rejected", st != NULL, st ? st->outbox_rejected : 0);
    json_u64_or_null(&b, "expired", st != NULL, st ? st->outbox_expired : 0);
    json_u64_or_null(&b, "uploaded", st != NULL, st ? st->outbox_uploaded : 0);
    json_u64_or_null(&b, "evicted", st != NULL, st ? st->outbox_evicted : 0);
    isoprof_buf_putc(&b, '}');

    json_key(&b, "upload", 0);
    isoprof_buf_putc(&b, '{');
    json_key(&b, "enabled", 1);
    isoprof_buf_puts(&b, v.upload_on ? "true" : "false");
    json_key(&b, "url", 0);
    isoprof_json_str(&b, a->cfg_boot->upload.url ? a->cfg_boot->upload.url : ""); /* restart-only */
    json_u64(&b, "requests", v.up.requests, 0);
    json_u64(&b, "requests_ok", v.up.requests_ok, 0);
    json_u64(&b, "requests_failed", v.up.requests_failed, 0);
    json_u64(&b, "profiles_sent", v.up.profiles_sent, 0);
    json_u64(&b, "profiles_rejected", v.up.profiles_rejected, 0);
    json_u64(&b, "profiles_expired", v.up.profiles_expired, 0);
    json_u64(&b, "profiles_too_new", v.up.profiles_too_new, 0);
    json_u64(&b, "labels_cut", v.up.labels_cut, 0);
    json_u64(&b, "rate_waits", v.up.rate_waits, 0);
    isoprof_buf_putc(&b, '}');

    json_key(&b, "counters", 0);
    status_counters(&b, &a->n);

    isoprof_buf_append(&b, "}\n", 2);
    return report_finish(&b, len);
}

/* --- GET /metrics --- */

/* A label value: \ " and newline escaped (text format 0.0.4), bytes that
 * are not UTF-8 replaced by U+FFFD. */
static void prom_label_value(struct isoprof_buf *b, const char *s)
{
    const uint8_t *p = (const uint8_t *)s, *end = p + strlen(s);
    while (p < end) {
        unsigned c = *p;
        if (c == '\\') {
            isoprof_buf_append(b, "\\\\", 2);
            p++;
        } else if (c == '"') {
            isoprof_buf_append(b, "\\\"", 2);
            p++;
        } else if (c == '\n') {
            isoprof_buf_append(b, "\\n", 2);
            p++;
        } else {
            size_t n = isoprof_utf8_seq(p, (size_t)(end - p));
            if (n == 0) {
                isoprof_buf_append(b, "\xef\xbf\xbd", 3); /* U+FFFD */
                p++;
            } else {
                isoprof_buf_append(b, p, n);
                p += n;
            }
        }
    }
}

/* # HELP and # TYPE of one family; help is plain text without \ or newline. */
static void prom_family(struct isoprof_buf *b, const char *name, const char *type, const char *help)
{
    isoprof_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_name(struct isoprof_buf *b, const char *name, const char *label, const char *value)
{
    isoprof_buf_puts(b, name);
    if (label != NULL) {
        isoprof_buf_printf(b, "{%s=\"", label);
        prom_label_value(b, value);
        isoprof_buf_append(b, "\"}", 2);
    }
}

/* One sample; label NULL for none. */
static void prom_u64(struct isoprof_buf *b, const char *name, const char *label, const char *value,
                     uint64_t v)
{
    prom_name(b, name, label, value);
    isoprof_buf_printf(b, " %" PRIu64 "\n", v);
}

static void prom_sec(struct isoprof_buf *b, const char *name, uint64_t ms)
{
    isoprof_buf_printf(b, "%s %" PRIu64 ".%03u\n", name, ms / 1000, (unsigned)(ms % 1000));
}

/* A family of one unlabelled counter. */
static void prom_counter(struct isoprof_buf *b, const char *name, const char *help, uint64_t v)
{
    prom_family(b, name, "counter", help);
    prom_u64(b, name, NULL, NULL, v);
}

static void prom_gauge(struct isoprof_buf *b, const char *name, const char *help, uint64_t v)
{
    prom_family(b, name, "gauge", help);
    prom_u64(b, name, NULL, NULL, v);
}

/* One row of counters.h: its sample, after its family's HELP and TYPE if
 * the row before was of another family. metric NULL: not shown. */
static void metrics_counter_row(struct isoprof_buf *b, const char **family, const char *metric,
                                const char *labels, const char *help, uint64_t v)
{
    if (metric == NULL)
        return;
    if (*family == NULL || strcmp(*family, metric) != 0) {
        ISOPROF_ASSERT(help != NULL); /* the first row of a family carries its help */
        prom_family(b, metric, "counter", help);
        *family = metric;
    }
    isoprof_buf_printf(b, "%s%s %" PRIu64 "\n", metric, labels, v);
}

/* Every counter family of counters.h, in the table's order. */
static void metrics_counters(struct isoprof_buf *b, const struct agent_counters *n)
{
    const char *family = NULL;
#define METRICS_SCALAR(field, key, metric, labels, help)                                           \
    metrics_counter_row(b, &family, metric, labels, help, n->field);
    AGENT_COUNTERS(METRICS_SCALAR)
#undef METRICS_SCALAR
#define METRICS_ARRAY(field, size, lo, key, metric, label, name, log_prefix, help)                 \
    prom_family(b, metric, "counter", help);                                                       \
    for (unsigned i = (lo); i < (size); i++)                                                       \
        prom_u64(b, metric, label, name(i), n->field[i]);
    AGENT_COUNTER_ARRAYS(METRICS_ARRAY)
#undef METRICS_ARRAY
}

/* The process's resident set (bytes), 0 when /proc cannot tell. A read of
 * procfs does not block on a disk. */
static uint64_t resident_bytes(void)
{
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[128];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *end;
    (void)strtoull(buf, &end, 10); /* size */
    if (end == buf)
        return 0;
    const char *p = end;
    unsigned long long pages = strtoull(p, &end, 10); /* resident */
    long page = sysconf(_SC_PAGESIZE);
    if (end == p || page <= 0)
        return 0;
    return (uint64_t)pages * (uint64_t)page;
}

/* The stalls of every isolate by call: a histogram in seconds. */
static void metrics_pauses(struct isoprof_buf *b, const struct win_sched *s)
{
    static const char name[] = "isoprof_pause_seconds";
    prom_family(b, name, "histogram",
                "How long each profiler call stalled its isolate (the call's round trip), by "
                "call: start, stop, heap.");
    for (int c = 0; c < WIN_NCALLS; c++) {
        const char *call = win_call_name((enum win_call)c);
        uint64_t n = 0;
        for (int k = 0; k <= WIN_PAUSE_BUCKETS; k++) {
            n += s->pause_hist[c][k];
            if (k < WIN_PAUSE_BUCKETS)
                isoprof_buf_printf(b, "%s_bucket{call=\"%s\",le=\"%g\"} %" PRIu64 "\n", name, call,
                                   win_pause_bounds_ms[k] / 1000.0, n);
            else
                isoprof_buf_printf(b, "%s_bucket{call=\"%s\",le=\"+Inf\"} %" PRIu64 "\n", name,
                                   call, n);
        }
        uint64_t sum = s->pause_sum_ns[c];
        isoprof_buf_printf(b, "%s_sum{call=\"%s\"} %" PRIu64 ".%09u\n", name, call,
                           sum / 1000000000u, (unsigned)(sum % 1000000000u));
        isoprof_buf_printf(b, "%s_count{call=\"%s\"} %" PRIu64 "\n", name, call, n);
    }
}

char *report_metrics(struct agent *a, size_t *len)
{
    struct isoprof_buf b;
    isoprof_buf_init(&b, REPORT_MAX_BODY);
    struct report_view v;
    report_view(a, &v);

    prom_family(&b, "isoprof_build_info", "gauge", "The agent's version, always 1.");
    prom_u64(&b, "isoprof_build_info", "version", ISOPROF_VERSION, 1);
    prom_family(&b, "isoprof_uptime_seconds", "gauge", "Seconds since the agent started.");
    prom_sec(&b, "isoprof_uptime_seconds", v.uptime_ns / 1000000ull);
    prom_gauge(&b, "isoprof_resident_memory_bytes", "Resident set size of the agent.",
               resident_bytes());
    prom_family(&b, "isoprof_loop_lag_seconds", "gauge",
                "How late the event loop ran a 1 s timer, at its last tick.");
    prom_sec(&b, "isoprof_loop_lag_seconds", v.lag_last_ms);
    prom_family(&b, "isoprof_loop_lag_max_seconds", "gauge",
                "The largest event loop lag measured in the last minute.");
    prom_sec(&b, "isoprof_loop_lag_max_seconds", v.lag_max_ms);

    /* targets and the schedule */
    unsigned states[3] = {0};
    for (const struct target *t = a->targets; t; t = t->next)
        if (!t->removing && (unsigned)t->state < 3)
            states[t->state]++;
    prom_family(&b, "isoprof_targets", "gauge", "Isolates known to the agent, by session state.");
    prom_u64(&b, "isoprof_targets", "state", "ready", states[TARGET_READY]);
    prom_u64(&b, "isoprof_targets", "state", "connecting", states[TARGET_CONNECTING]);
    prom_u64(&b, "isoprof_targets", "state", "backoff", states[TARGET_BACKOFF]);
    prom_gauge(&b, "isoprof_windows_running",
               "CPU windows holding a slot now (starting, running or stopping).", v.running);
    prom_gauge(&b, "isoprof_windows_queued",
               "CPU windows due and waiting for a free slot under max_concurrent.", v.queued);

    /* the daemon's counters (counters.h) */
    metrics_counters(&b, &a->n);
    metrics_pauses(&b, &a->wins);

    /* DogStatsD */
    struct statsd_counts sc = {0};
    anomaly_statsd_counts(a, &sc);
    prom_counter(&b, "isoprof_statsd_datagrams_total", "DogStatsD datagrams received.",
                 sc.datagrams);
    prom_family(&b, "isoprof_statsd_lines_total", "counter",
                "DogStatsD lines received, by what became of them.");
    prom_u64(&b, "isoprof_statsd_lines_total", "result", "accepted", sc.accepted);
    prom_u64(&b, "isoprof_statsd_lines_total", "result", "ignored", sc.ignored);
    prom_u64(&b, "isoprof_statsd_lines_total", "result", "unattributed", sc.unattributed);
    prom_u64(&b, "isoprof_statsd_lines_total", "result", "garbage", sc.garbage);

    /* source maps */
    struct srcmap_stats sm;
    srcmap_cache_stats(a->srcmaps, &sm);
    prom_family(&b, "isoprof_source_map_frames_total", "counter",
                "Frames of scripts on disk, mapped through a source map or not (no map, or no "
                "mapping at the function's start).");
    prom_u64(&b, "isoprof_source_map_frames_total", "result", "mapped", sm.mapped);
    prom_u64(&b, "isoprof_source_map_frames_total", "result", "unmapped", sm.unmapped);
    prom_family(&b, "isoprof_source_maps_refused_total", "counter",
                "Source maps not used, by reason; each map file and reason once.");
    for (int r = 1; r < SRCMAP_NREASONS; r++)
        prom_u64(&b, "isoprof_source_maps_refused_total", "reason", srcmap_reason(r),
                 sm.refused[r]);
    prom_counter(&b, "isoprof_source_map_frames_over_allowance_total",
                 "Frames left unmapped because their target's source-map CPU allowance "
                 "(source_maps_cpu) was spent; counted among the unmapped too.",
                 sm.over_allowance);
    prom_family(&b, "isoprof_source_map_cpu_seconds_total", "counter",
                "Thread CPU time the targets' source-map lookups were charged (all targets).");
    prom_sec(&b, "isoprof_source_map_cpu_seconds_total", sm.cpu_ns / 1000000u);
    prom_counter(&b, "isoprof_source_maps_loaded_total", "Source maps read and parsed.", sm.loads);
    prom_counter(&b, "isoprof_source_maps_evicted_total",
                 "Parsed source maps evicted to keep within source_maps_cache.", sm.evictions);
    prom_gauge(&b, "isoprof_source_maps_cached", "Parsed source maps held.", sm.maps);
    prom_gauge(&b, "isoprof_source_maps_cache_bytes", "Bytes the parsed source maps hold.",
               sm.bytes);
    prom_gauge(&b, "isoprof_source_maps_cache_budget_bytes", "source_maps_cache.", sm.budget);

    /* the store (as of the last refresh) */
    const struct store_stat *st = v.st;
    prom_family(&b, "isoprof_store_windows", "gauge", "Windows in the store.");
    if (st)
        prom_u64(&b, "isoprof_store_windows", NULL, NULL, st->windows);
    prom_family(&b, "isoprof_store_bytes", "gauge",
                "Bytes the store's windows take against its budget.");
    if (st)
        prom_u64(&b, "isoprof_store_bytes", NULL, NULL, st->stored_bytes);
    prom_gauge(&b, "isoprof_store_budget_bytes", "The store's size budget.",
               st ? st->budget : a->cfg->store.max_size);
    prom_family(&b, "isoprof_store_stat_age_seconds", "gauge",
                "How old the store and outbox figures on this page are.");
    if (st) {
        uint64_t now = isoprof_now_wall_ns();
        prom_sec(&b, "isoprof_store_stat_age_seconds",
                 now > v.st_ns ? (now - v.st_ns) / 1000000ull : 0);
    }

    /* upload */
    prom_family(&b, "isoprof_outbox_pending", "gauge", "Windows waiting for upload.");
    if (st)
        prom_u64(&b, "isoprof_outbox_pending", NULL, NULL, st->outbox_pending);
    prom_family(&b, "isoprof_outbox_expired", "gauge",
                "Windows in the store that expired unsent (older than upload.max_age).");
    if (st)
        prom_u64(&b, "isoprof_outbox_expired", NULL, NULL, st->outbox_expired);
    prom_family(&b, "isoprof_outbox_oldest_age_seconds", "gauge",
                "Age of the oldest window waiting for upload; 0 when none waits.");
    if (st) {
        uint64_t now = isoprof_now_wall_ns(), age = 0;
        if (st->outbox_pending > 0 && st->outbox_oldest_ns != 0 && now > st->outbox_oldest_ns)
            age = (now - st->outbox_oldest_ns) / 1000000ull;
        prom_sec(&b, "isoprof_outbox_oldest_age_seconds", age);
    }
    prom_gauge(&b, "isoprof_upload_enabled", "1 when upload.url is set.", (uint64_t)v.upload_on);
    prom_family(&b, "isoprof_upload_requests_total", "counter",
                "Upload requests answered, by status class (error: no HTTP answer or another "
                "status).");
    prom_u64(&b, "isoprof_upload_requests_total", "status", "2xx", v.up.requests_2xx);
    prom_u64(&b, "isoprof_upload_requests_total", "status", "4xx", v.up.requests_4xx);
    prom_u64(&b, "isoprof_upload_requests_total", "status", "5xx", v.up.requests_5xx);
    prom_u64(&b, "isoprof_upload_requests_total", "status", "error", v.up.requests_error);
    prom_family(&b, "isoprof_upload_profiles_total", "counter",
                "Profiles acknowledged, refused by the server, or refused unsent.");
    prom_u64(&b, "isoprof_upload_profiles_total", "result", "sent", v.up.profiles_sent);
    prom_u64(&b, "isoprof_upload_profiles_total", "result", "rejected", v.up.profiles_rejected);
    prom_u64(&b, "isoprof_upload_profiles_total", "result", "unsendable", v.up.profiles_unsendable);
    prom_u64(&b, "isoprof_upload_profiles_total", "result", "expired", v.up.profiles_expired);
    prom_counter(&b, "isoprof_upload_too_new_total",
                 "Profiles the server refused as too new: this host's clock is ahead of it.",
                 v.up.profiles_too_new);
    prom_counter(&b, "isoprof_upload_labels_cut_total",
                 "Static labels left out of a series to stay within the server's 30.",
                 v.up.labels_cut);
    prom_counter(&b, "isoprof_upload_rate_waits_total", "Requests that waited for upload.max_rate.",
                 v.up.rate_waits);
    prom_counter(&b, "isoprof_upload_sent_bytes_total", "Request body bytes acknowledged.",
                 v.up.bytes_sent);
    prom_counter(&b, "isoprof_upload_store_errors_total",
                 "Outbox reads or updates of the uploader that failed.", v.up.store_errors);
    return report_finish(&b, len);
}

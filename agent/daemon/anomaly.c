/*
 * anomaly.c - the agent's anomaly detection: the memory watch's glue
 * (memory_near_limit, memory_growth, the isolate that dies near its limit)
 * and P999 latency spikes.
 *
 * Memory: every Runtime.getHeapUsage poll of a target lands in
 * anomaly_memory(), which hands it to the target's memory watch
 * (memwatch.h: the rules, a pure state machine) and carries out what it
 * answers: an episode opened is recorded and gets at once a CPU window at
 * anomaly.cpu_interval and a heap window, both pinned to it; the episode's
 * later heap windows come when the watch says (backing off, within
 * anomaly.memory.max_share), pinned to it; its snapshot is tried
 * (snapshot.c) until one poll can take it or says why not. The stall of
 * each heap window pinned to the near-limit episode is charged to it
 * (anomaly_heap_cost), as every stall is to the isolate's pause budget
 * (windows.c). The limit itself, when memory_limit is auto, is learned off
 * the loop from the process's flags (limit_job). A session that ends by
 * itself (the target closed it, or left /json/list) while the last poll
 * was at or above the threshold, or while a memory_near_limit episode was
 * still open, is an oom_suspected: recorded with the isolate's last heap
 * and CPU windows pinned.
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
#include "anomaly.h"
#include "daemon.h"
#include "latency.h"
#include "log.h"
#include "snapshot.h"
#include "statsd.h"
#include "target.h"
#include "writer.h"

#include "base.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- memory_near_limit, memory_growth and oom_suspected --- */

static void episode_record(struct agent *a, struct episode *e, int op)
{
    int rc = writer_episode(a->writer, e, op);
    if (rc != 0) {
        a->n.anomaly_errors++;
        log_error("anomaly not recorded", "kind=%s worker=%s err=%e", store_anomaly_name(e->kind),
                  e->worker, rc);
    }
}

struct episode *anomaly_memory_episode(const struct target *t, enum memwatch_kind k)
{
    return (unsigned)k < MEMWATCH_NKINDS ? t->mw.k[k].ep : NULL;
}

static void memory_params(const struct target *t, struct memwatch_params *p)
{
    memwatch_params_from_cfg(t->a->cfg, t->w.plan.heap_period_ns, p);
}

/* a->anom: anomaly.c's agent-wide state (anomaly_start makes it). */
struct anomaly_run {
    struct statsd *statsd;   /* NULL: anomaly.latency.listen is off or did not bind */
    struct latency *latency; /* the detector */
    uv_timer_t latency_timer;
    int latency_timer_on;
    struct lat_open *lat_open; /* open latency_p999_spike episodes */
    uint64_t statsd_garbage_logged, statsd_garbage_log_mono_ns;
    uint64_t latency_refused_logged, latency_refused_log_mono_ns; /* the refusal warning */
    int limit_job; /* a limit job is out (one at a time) */
};

/* --- the limit --- */

/* A thread-pool job that learns the V8 limits of Node and Deno isolates
 * from their processes: each found by pid (a found endpoint, a Deno
 * title), else by the configured endpoint's port in a /proc scan, one scan
 * for every isolate of the job. One job at a time: it takes every target
 * that wants its limit then (limit_wanted), so the isolates of many
 * endpoints attaching together cost a scan or two, not one each. The loop
 * finds each target again by seq (t->limit_probe); a target gone or
 * re-attached meanwhile (another isolate number) drops its answer. */
struct limit_ask {
    uint64_t seq;
    uint32_t isolate;
    uint32_t pid; /* in: known (0: find it by port); out: the process read */
    uint16_t port;
    int deno;
    /* out */
    uint64_t limit;
    uint8_t src;
    int read;     /* its command line was read */
    char why[96]; /* why not, when not */
};

struct limit_job {
    uv_work_t req;
    struct agent *a;
    int scanned; /* out: a /proc scan was run */
    uint64_t scan_ns;
    size_t n;
    struct limit_ask ask[]; /* n */
};

static uint64_t limit_seq;

/* Read root/<pid>/<name> (at most PROCSCAN_MAX_FILE bytes) into an
 * allocation; NULL when it cannot be read. */
static char *proc_read(uint32_t pid, const char *name, size_t *len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%u/%s", (unsigned)pid, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = isoprof_malloc(PROCSCAN_MAX_FILE);
    size_t n = buf ? fread(buf, 1, PROCSCAN_MAX_FILE, f) : 0;
    int bad = buf == NULL || ferror(f);
    fclose(f);
    if (bad || n == 0) {
        isoprof_free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static uint64_t phys_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

/* The pid of the process listening on port in scan res (0: none). */
static uint32_t limit_pid_of_port(const struct procscan_result *res, uint16_t port)
{
    for (size_t i = 0; i < res->n; i++)
        for (unsigned k = 0; k < res->p[i].nports; k++)
            if (res->p[i].ports[k] == port)
                return res->p[i].pid;
    return 0;
}

static void limit_ask_read(struct limit_ask *q)
{
    size_t clen = 0, elen = 0;
    char *cmd = q->pid ? proc_read(q->pid, "cmdline", &clen) : NULL;
    char *env = q->pid ? proc_read(q->pid, "environ", &elen) : NULL;
    q->read = cmd != NULL;
    if (q->pid == 0)
        snprintf(q->why, sizeof(q->why), "no process of node, nodejs or deno listens on the port");
    else if (cmd == NULL)
        snprintf(q->why, sizeof(q->why), "its command line could not be read");
    else if (env == NULL)
        snprintf(q->why, sizeof(q->why), "its environment could not be read");
    q->limit =
        memwatch_v8_limit(q->deno ? "deno" : "node", cmd, clen, env, elen, phys_memory(), &q->src);
    isoprof_free(cmd);
    isoprof_free(env);
}

static void limit_job_work(uv_work_t *req)
{
    struct limit_job *j = container_of(req, struct limit_job, req);
    int scan = 0;
    for (size_t i = 0; i < j->n; i++)
        scan |= j->ask[i].pid == 0 && j->ask[i].port != 0;
    if (scan) {
        static const char *const exe[] = {"node", "nodejs", "deno"};
        struct procscan_filter f = {.exe = exe, .nexe = 3, .self_pid = (uint32_t)getpid()};
        struct procscan_result res;
        char why[96];
        j->scanned = 1;
        if (procscan_run("/proc", &f, &res, why, sizeof(why)) == 0) {
            j->scan_ns = res.cpu_ns;
            for (size_t i = 0; i < j->n; i++)
                if (j->ask[i].pid == 0 && j->ask[i].port != 0)
                    j->ask[i].pid = limit_pid_of_port(&res, j->ask[i].port);
            procscan_result_free(&res);
        }
    }
    for (size_t i = 0; i < j->n; i++)
        limit_ask_read(&j->ask[i]);
}

static void limit_set(struct target *t, uint64_t limit, uint8_t src);

static void limit_ask_done(struct agent *a, const struct limit_ask *q, int status)
{
    for (struct target *t = a->targets; t; t = t->next) {
        if (t->limit_probe != q->seq)
            continue;
        t->limit_probe = 0;
        if (status != 0 || t->removing || t->state != TARGET_READY || t->isolate != q->isolate)
            return;
        t->proc_pid = q->pid; /* keepalive.c reads its sampler thread */
        if (!q->read || q->why[0])
            log_warn("heap limit taken from V8's defaults: the process's flags are not all known",
                     "worker=%s isolate=%u pid=%u limit=%U source=%s why=%s", t->worker, t->isolate,
                     (unsigned)q->pid, q->limit, memwatch_source_name(q->src), q->why);
        limit_set(t, q->limit, q->src);
        return;
    }
}

static void limit_job_done(uv_work_t *req, int status)
{
    struct limit_job *j = container_of(req, struct limit_job, req);
    struct agent *a = j->a;
    log_debug("heap limits read", "isolates=%U scanned=%d scan_cpu_ns=%U", (uint64_t)j->n,
              j->scanned, j->scan_ns);
    for (size_t i = 0; i < j->n; i++)
        limit_ask_done(a, &j->ask[i], status);
    a->anom->limit_job = 0;
    isoprof_free(j);
}

/* What the config says of t's limit: a size, or CFG_SIZE_AUTO. */
static uint64_t limit_configured(const struct target *t)
{
    return t->parent ? t->ep->cfg->threads.memory_limit : t->ep->cfg->memory_limit;
}

static void limit_set(struct target *t, uint64_t limit, uint8_t src)
{
    int changed = t->mw.limit != limit || t->mw.source != src;
    memwatch_set_limit(&t->mw, limit, src);
    if (changed)
        log_info("heap limit", "worker=%s thread=%s isolate=%u limit=%U source=%s", t->worker,
                 t->thread, t->isolate, limit, memwatch_source_name(src));
    /* Its worker threads on auto follow their process's limit. */
    if (t->parent == NULL)
        for (struct target *w = t->a->targets; w; w = w->next)
            if (w->parent == t && w->state == TARGET_READY &&
                limit_configured(w) == CFG_SIZE_AUTO && w->mw.limit != limit)
                limit_set(w, limit, MEMWATCH_SRC_PROCESS);
}

/* t's limit is auto, unknown, and only its process tells it. */
static int limit_wanted(const struct target *t)
{
    return t->parent == NULL && !t->removing && t->state == TARGET_READY &&
           limit_configured(t) == CFG_SIZE_AUTO && t->mw.limit == 0 && t->limit_probe == 0 &&
           strcmp(target_runtime(t), "workerd") != 0;
}

/* One job for every target that wants its limit now (none while one is
 * out: the others ask again at their next poll, which comes after it). */
static void limit_probe_start(struct agent *a)
{
    if (a->anom->limit_job)
        return;
    size_t n = 0;
    for (const struct target *t = a->targets; t; t = t->next)
        n += limit_wanted(t);
    if (n == 0)
        return;
    struct limit_job *j = isoprof_calloc(1, sizeof(*j) + n * sizeof(j->ask[0]));
    if (j == NULL)
        return; /* tried again at the next poll */
    j->a = a;
    for (struct target *t = a->targets; t && j->n < n; t = t->next) {
        if (!limit_wanted(t))
            continue;
        struct limit_ask *q = &j->ask[j->n++];
        q->seq = ++limit_seq;
        q->isolate = t->isolate;
        q->pid = t->ep->pid ? t->ep->pid : t->title_pid;
        q->port = t->ep->pid ? 0 : t->ep->cfg->port;
        q->deno = strcmp(target_runtime(t), "deno") == 0;
        t->limit_probe = q->seq;
    }
    if (uv_queue_work(a->loop, &j->req, limit_job_work, limit_job_done) != 0) {
        /* No other job is out: every probe marked is this one's. */
        for (struct target *t = a->targets; t; t = t->next)
            t->limit_probe = 0;
        isoprof_free(j);
        return;
    }
    a->anom->limit_job = 1;
}

/* Keep t's limit up to date with the config (a reload may change it);
 * start learning it when it is auto and not known. */
static void limit_update(struct target *t)
{
    uint64_t cfg = limit_configured(t);
    if (cfg != CFG_SIZE_AUTO) {
        if (t->mw.limit != cfg || t->mw.source != MEMWATCH_SRC_CONFIG)
            limit_set(t, cfg, MEMWATCH_SRC_CONFIG);
        return;
    }
    if (t->mw.limit != 0 && t->mw.source != MEMWATCH_SRC_CONFIG)
        return;
    t->mw.limit = 0; /* auto now, a size before the reload: learn it */
    if (strcmp(target_runtime(t), "workerd") == 0) {
        limit_set(t, MEMWATCH_WORKERD_LIMIT, MEMWATCH_SRC_WORKERD);
        return;
    }
    if (t->parent != NULL) {
        /* A Worker's resourceLimits are not visible from outside it: it
         * gets what one without them gets, its process's limit. */
        if (t->parent->mw.limit != 0)
            limit_set(t, t->parent->mw.limit, MEMWATCH_SRC_PROCESS);
        return; /* else: set when the main thread's is known */
    }
    limit_probe_start(t->a);
}

/* --- the episodes --- */

static void memory_episode_open(struct target *t, enum memwatch_kind k, uint64_t now)
{
    struct agent *a = t->a;
    struct memwatch_params p;
    memory_params(t, &p);
    const struct memwatch_episode *me = &t->mw.k[k];
    uint64_t thr = k == MEMWATCH_NEAR ? memwatch_threshold(&t->mw, &p) : t->mw.limit;
    struct episode *e = episode_new(memwatch_kind_anomaly(k), t->worker, t->version, t->thread,
                                    t->isolate, me->value, thr);
    if (e == NULL) {
        log_error("out of memory flagging an anomaly", "worker=%s isolate=%u", t->worker,
                  t->isolate);
        return;
    }
    e->limit = t->mw.limit;
    e->limit_source = memwatch_source_store(t->mw.source);
    t->mw.k[k].ep = e;
    a->n.anomalies[e->kind]++;
    if (k == MEMWATCH_NEAR)
        log_warn("anomaly flagged",
                 "kind=%s worker=%s version=%s thread=%s isolate=%u used=%U limit=%U "
                 "limit_source=%s threshold=%U",
                 store_anomaly_name(e->kind), t->worker, t->version, t->thread, t->isolate,
                 me->value, t->mw.limit, memwatch_source_name(t->mw.source), thr);
    else
        log_warn("anomaly flagged",
                 "kind=%s worker=%s version=%s thread=%s isolate=%u floor=%U growth=%U "
                 "rate_mib_per_min=%f limit_in_min=%f limit=%U limit_source=%s window_s=%U",
                 store_anomaly_name(e->kind), t->worker, t->version, t->thread, t->isolate,
                 me->value, t->mw.g.growth, t->mw.g.rate * 60.0 / (1024.0 * 1024.0),
                 (double)t->mw.g.eta_ns / 60e9, t->mw.limit, memwatch_source_name(t->mw.source),
                 p.growth_window_ns / 1000000000u);
    episode_record(a, e, WRITER_EP_NEW);
    win_anomaly_cpu(&t->w, now, e);
}

static void memory_episode_end(struct target *t, enum memwatch_kind k)
{
    struct episode *e = t->mw.k[k].ep;
    t->mw.k[k].ep = NULL;
    if (e == NULL)
        return;
    e->open = 0;
    e->value = t->mw.k[k].value;
    e->end_ns = isoprof_now_wall_ns();
    episode_record(t->a, e, WRITER_EP_UPDATE);
    if (k == MEMWATCH_NEAR)
        log_info("anomaly ended",
                 "kind=%s worker=%s version=%s isolate=%u peak=%U threshold=%U heap_windows=%U "
                 "heap_stall_ms=%U heap_waited=%U",
                 store_anomaly_name(e->kind), e->worker, e->version, e->isolate, e->value,
                 e->threshold, t->mw.heap_windows, t->mw.cost_ns / 1000000u, t->mw.waited);
    else
        log_info("anomaly ended", "kind=%s worker=%s version=%s isolate=%u floor=%U limit=%U",
                 store_anomaly_name(e->kind), e->worker, e->version, e->isolate, e->value,
                 e->threshold);
    episode_unref(e);
}

static void memory_act(struct target *t, const struct memwatch_actions *act, uint64_t now,
                       uint64_t used)
{
    for (unsigned k = 0; k < MEMWATCH_NKINDS; k++)
        if (act->end & (1u << k))
            memory_episode_end(t, (enum memwatch_kind)k);
    for (unsigned k = 0; k < MEMWATCH_NKINDS; k++)
        if (act->open & (1u << k))
            memory_episode_open(t, (enum memwatch_kind)k, now);
    for (unsigned k = 0; k < MEMWATCH_NKINDS; k++) {
        struct episode *e = t->mw.k[k].ep;
        if ((act->extend & (1u << k)) && e != NULL) {
            e->value = t->mw.k[k].value;
            e->end_ns = isoprof_now_wall_ns();
        }
    }
    if (act->heap) {
        struct episode *e = t->mw.k[act->heap_kind].ep;
        if (e != NULL && win_anomaly_heap(&t->w, now, e) != 0)
            log_debug("anomaly heap window not taken", "worker=%s isolate=%u kind=%s",
                      t->worker, t->isolate, store_anomaly_name(e->kind));
    }
    struct episode *due = act->snapshot ? t->mw.k[act->snap_kind].ep : NULL;
    if (snapshot_poll(t, used, due) == 1 || (act->snapshot && due == NULL))
        memwatch_snapshot_done(&t->mw, (enum memwatch_kind)act->snap_kind);
}

void anomaly_attached(struct target *t)
{
    struct memwatch_actions act;
    memwatch_gone(&t->mw, &act); /* nothing is open here: anomaly_target_gone ended it */
    for (unsigned k = 0; k < MEMWATCH_NKINDS; k++)
        if (act.end & (1u << k))
            memory_episode_end(t, (enum memwatch_kind)k);
    memwatch_init(&t->mw);
}

void anomaly_memory(struct target *t, uint64_t used)
{
    struct agent *a = t->a;
    uint64_t now = isoprof_now_mono_ns();
    if (a->stopping) {
        t->mw.last = used;
        return; /* a poll answered after the stop began: nothing new starts */
    }
    limit_update(t);
    struct memwatch_params p;
    memory_params(t, &p);
    struct memwatch_actions act;
    memwatch_poll(&t->mw, &p, now, used, &act);
    memory_act(t, &act, now, used);
}

void anomaly_heap_cost(struct target *t, const struct episode *pin, uint64_t pause_ns)
{
    if (pin != NULL && pin == t->mw.k[MEMWATCH_NEAR].ep)
        memwatch_heap_cost(&t->mw, pause_ns);
}

void anomaly_target_gone(struct target *t, int gone_by_itself)
{
    struct agent *a = t->a;
    snapshot_target_gone(t);
    struct memwatch_params p;
    memory_params(t, &p);
    uint64_t thr = memwatch_threshold(&t->mw, &p);
    /* Near the limit: the last poll, or an episode still open (the last
     * poll may have caught the heap just after a GC). */
    int near = (t->mw.last > 0 && thr > 0 && t->mw.last >= thr) ||
               t->mw.k[MEMWATCH_NEAR].ep != NULL;
    if (gone_by_itself && !a->stopping && near) {
        struct episode *e = episode_new(STORE_ANOMALY_OOM_SUSPECTED, t->worker, t->version,
                                        t->thread, t->isolate, t->mw.last, thr);
        if (e != NULL) {
            e->open = 0;
            e->limit = t->mw.limit;
            e->limit_source = memwatch_source_store(t->mw.source);
            a->n.anomalies[e->kind]++;
            log_warn("anomaly flagged",
                     "kind=%s worker=%s version=%s thread=%s isolate=%u last_used=%U limit=%U "
                     "limit_source=%s threshold=%U",
                     store_anomaly_name(e->kind), t->worker, t->version, t->thread, t->isolate,
                     t->mw.last, t->mw.limit, memwatch_source_name(t->mw.source), thr);
            episode_record(a, e, WRITER_EP_OOM);
            episode_unref(e);
        }
    }
    struct memwatch_actions act;
    memwatch_gone(&t->mw, &act);
    for (unsigned k = 0; k < MEMWATCH_NKINDS; k++)
        if (act.end & (1u << k))
            memory_episode_end(t, (enum memwatch_kind)k);
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
    int rc = latency_observe(a->anom->latency, o->worker, o->worker_len, o->version, o->version_len,
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
    struct latency_stats ls = latency_stats(a->anom->latency);
    if (ls.refused_series <= a->anom->latency_refused_logged ||
        (a->anom->latency_refused_log_mono_ns != 0 &&
         now - a->anom->latency_refused_log_mono_ns < LATENCY_REFUSED_LOG_NS))
        return;
    log_warn("latency detection refused new series: table full",
             "refused_lines=%U refused_total=%U series=%U known_series=%U displaced=%U "
             "hint=%s",
             ls.refused_series - a->anom->latency_refused_logged, ls.refused_series, ls.series,
             ls.known, ls.displaced,
             "too many distinct worker/version tags; other workers get in again as idle "
             "series expire");
    a->anom->latency_refused_logged = ls.refused_series;
    a->anom->latency_refused_log_mono_ns = now;
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
    o->next = a->anom->lat_open;
    a->anom->lat_open = o;
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
    for (struct lat_open **pp = &a->anom->lat_open; *pp; pp = &(*pp)->next) {
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
    latency_tick(a->anom->latency, isoprof_now_mono_ns(), latency_on_event, a);
    /* Garbage is counted, not logged per line; say so once a minute. */
    struct statsd_counts c = statsd_counts(a->anom->statsd);
    uint64_t bad = c.garbage + c.unattributed + c.truncated;
    uint64_t now = isoprof_now_mono_ns();
    latency_refused_log(a, now);
    if (bad > a->anom->statsd_garbage_logged &&
        (a->anom->statsd_garbage_log_mono_ns == 0 ||
         now - a->anom->statsd_garbage_log_mono_ns >= STATSD_GARBAGE_LOG_NS)) {
        log_warn("DogStatsD input ignored",
                 "garbage_lines=%U unattributed_lines=%U truncated_datagrams=%U accepted_lines=%U",
                 c.garbage, c.unattributed, c.truncated, c.accepted);
        a->anom->statsd_garbage_logged = bad;
        a->anom->statsd_garbage_log_mono_ns = now;
    }
}

int anomaly_start(struct agent *a)
{
    const struct cfg *c = a->cfg;
    a->anom = isoprof_calloc(1, sizeof(*a->anom));
    if (a->anom == NULL)
        return -ENOMEM;
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
    int rc = latency_new(&p, &a->anom->latency);
    if (rc != 0) {
        log_error("latency detection off", "err=%e why=%s", rc, "bad detector parameters");
        return 0;
    }
    latency_set_known(a->anom->latency, latency_worker_known, a);
    struct statsd_tags tags = {c->anomaly.latency.worker_tag, c->anomaly.latency.version_tag};
    char *why = NULL;
    rc = statsd_listen(a->loop, c->anomaly.latency.listen, &tags, latency_on_obs, a,
                       &a->anom->statsd, &why);
    if (rc != 0) {
        /* The profiler is worth more than the latency input: go on without it. */
        log_error("latency detection off: cannot listen for DogStatsD", "listen=%s err=%e why=%s",
                  c->anomaly.latency.listen, rc, why ? why : "");
        isoprof_free(why);
        latency_free(a->anom->latency);
        a->anom->latency = NULL;
        a->anom->statsd = NULL;
        return 0;
    }
    uint64_t tick = p.window_ns / 4000000u;
    if (tick > LATENCY_TICK_MAX_MS)
        tick = LATENCY_TICK_MAX_MS;
    if (tick == 0)
        tick = 1;
    uv_timer_init(a->loop, &a->anom->latency_timer);
    a->anom->latency_timer.data = a;
    a->anom->latency_timer_on = 1;
    uv_timer_start(&a->anom->latency_timer, latency_on_timer, tick, tick);
    log_info("listening for DogStatsD latency", "listen=%s port=%u", c->anomaly.latency.listen,
             (unsigned)statsd_port(a->anom->statsd));
    return 0;
}

int anomaly_statsd_counts(const struct agent *a, struct statsd_counts *out)
{
    if (a->anom == NULL || a->anom->statsd == NULL)
        return 0;
    *out = statsd_counts(a->anom->statsd);
    return 1;
}

void anomaly_stop(struct agent *a)
{
    if (a->anom == NULL)
        return;
    if (a->anom->statsd) {
        struct statsd_counts c = statsd_counts(a->anom->statsd);
        log_info("DogStatsD counters",
                 "datagrams=%U accepted=%U ignored=%U unattributed=%U garbage=%U truncated=%U",
                 c.datagrams, c.accepted, c.ignored, c.unattributed, c.garbage, c.truncated);
        statsd_close(a->anom->statsd, NULL, NULL);
        a->anom->statsd = NULL;
    }
    if (a->anom->latency_timer_on) {
        uv_close((uv_handle_t *)&a->anom->latency_timer, NULL);
        a->anom->latency_timer_on = 0;
    }
}

/* After the loop has stopped: what anomaly_start allocated. */
void anomaly_free(struct agent *a)
{
    if (a->anom == NULL)
        return;
    for (struct lat_open *o = a->anom->lat_open, *n; o; o = n) {
        n = o->next;
        episode_unref(o->e);
        isoprof_free(o);
    }
    a->anom->lat_open = NULL;
    latency_free(a->anom->latency);
    isoprof_free(a->anom);
    a->anom = NULL;
}

/*
 * keepalive.c - the driver of warm windows (warm.h decides): sends the
 * keep-alive's calls on an isolate's session, reads the console-profile
 * events that say what V8 did, and feeds warm.c the costs of cold windows.
 *
 * The keep-alive is a console profile titled
 * "isoprof-keepalive-<daemon pid>-<isolate>-<n>", started, rotated and ended
 * with Runtime.evaluate of one fixed expression built here from those
 * numbers alone (nothing a target, a config or a person supplies reaches
 * it): console.profile("T"), console.profile("T+1");console.profileEnd("T"),
 * console.profileEnd("T"). V8 answers console.profile in every session with
 * Profiler enabled by Profiler.consoleProfileStarted, before the evaluate's
 * reply; so a reply without our title's event means the runtime did not
 * start it (console.profile replaced by the app, workerd's missing default
 * context): refused, and the isolate stays cold (warm.c's retry).
 *
 * Measured on Node 20 (PROTOCOLS.md): closing the socket stops the
 * session's profiles, the keep-alive included; V8's sampler thread
 * (v8:ProfEvntProc) is gone ~135 ms after. So a daemon that dies, even by
 * kill -9, leaves nothing running, and a shutdown needs no call. A second
 * session's Profiler.start does not keep the first session's profiler warm
 * (each session has its own v8::CpuProfiler): it doubled the cold start.
 *
 * Others on the isolate: our console profile starts in their session too
 * if they have Profiler enabled, and theirs in ours. A console profile we
 * did not start (a person's console.profile, another agent) or our
 * keep-alive ended by someone else's console.profileEnd is a disturbance:
 * ours ends, the isolate goes cold for a while and the log says so.
 *
 * The sampler's own cost (its thread's CPU, read in /proc) is measured
 * while a profile runs, for auto (warm.h).
 *
 * The tick runs with the memory poll (sampling.memory_poll, 1 s by
 * default), so a rotation or a reload's mode change takes effect within
 * one poll.
 */
#include "keepalive.h"
#include "daemon.h"
#include "log.h"
#include "snapshot.h"
#include "target.h"
#include "warm.h"

#include "base.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KA_TIMEOUT_MS 30000
#define KA_PREFIX "isoprof-keepalive-"

static void ka_title(const struct target *t, uint64_t seq, char *out, size_t cap)
{
    snprintf(out, cap, KA_PREFIX "%u-%u-%llu", (unsigned)getpid(), (unsigned)t->isolate,
             (unsigned long long)seq);
}

/* The target of an event's session (NULL: the main thread t). */
static struct target *ka_target(struct target *t, const char *session)
{
    if (session == NULL)
        return t;
    for (struct target *k = t->a->targets; k; k = k->next)
        if (k->parent == t && k->session && strcmp(k->session, session) == 0)
            return k;
    return NULL;
}

static void ka_log_choice(struct target *t)
{
    if (t->ka.warm.want == t->ka.logged_want && t->ka.warm.why == t->ka.logged_why)
        return;
    t->ka.logged_want = t->ka.warm.want;
    t->ka.logged_why = t->ka.warm.why;
    uint64_t cold, sampler;
    warm_costs(&t->ka.warm, t->a->cfg, &cold, &sampler);
    /* Cold by the config is the default: said at debug only. */
    enum cfg_log_level lvl =
        t->a->cfg->sampling.cpu.mode == CFG_CPU_COLD ? CFG_LOG_DEBUG : CFG_LOG_INFO;
    agent_log(lvl, "cpu mode",
              "worker=%s thread=%s isolate=%u mode=%s configured=%s why=%s cold_ms=%f "
              "sampler_ms=%f",
              t->worker, t->thread, t->isolate, t->ka.warm.want ? "warm" : "cold",
              cfg_cpu_mode_names[t->a->cfg->sampling.cpu.mode], warm_why_name(t->ka.warm.why),
              (double)cold / 1e6, (double)sampler / 1e6);
}

/* An answer nothing depends on: the keep-alive's interval (a refusal shows
 * in the evaluate's; a profiler already made by someone's console profile
 * keeps its own), or the end of a keep-alive a failed rotation left. */
static void ka_on_ignored(struct target *t, struct cdp_reply *r)
{
    (void)t;
    (void)r;
}

static void ka_on_reply(struct target *t, struct cdp_reply *r)
{
    if (r->status == ISOPROF_ECLOSED || t->state != TARGET_READY)
        return; /* the session ended: warm_detached already */
    uint64_t now = isoprof_now_mono_ns();
    enum warm_state st = t->ka.warm.st;
    int ok = r->status == 0;
    int started = ok && t->ka.seen == t->ka.warm.seq;
    if (ok && t->ka.sent_ns != 0)
        win_pause(&t->w, now, WIN_CALL_START, now - t->ka.sent_ns);
    t->ka.sent_ns = 0;
    warm_answered(&t->ka.warm, now, ok, started);
    if (st == WARM_ROTATING && !started) {
        /* The previous keep-alive may still run (the new one did not
         * start before its end): end it, so no profile is left to grow. */
        char prev[96], params[192];
        ka_title(t, t->ka.warm.seq - 1, prev, sizeof(prev));
        snprintf(params, sizeof(params),
                 "{\"expression\":\"console.profileEnd(\\\"%s\\\")\",\"silent\":true}", prev);
        (void)target_call(t, "Runtime.evaluate", params, KA_TIMEOUT_MS, 0, ka_on_ignored);
    }
    if (st == WARM_ENDING) {
        log_info("warm windows off", "worker=%s thread=%s isolate=%u why=%s", t->worker, t->thread,
                 t->isolate, warm_why_name(t->ka.warm.why));
    } else if (started) {
        agent_log(st == WARM_STARTING ? CFG_LOG_INFO : CFG_LOG_DEBUG,
                  st == WARM_STARTING ? "warm windows on" : "keep-alive rotated",
                  "worker=%s thread=%s isolate=%u interval_ns=%U", t->worker, t->thread, t->isolate,
                  t->ka.warm.interval_ns);
    } else {
        log_warn("warm windows refused, windows stay cold",
                 "worker=%s thread=%s isolate=%u err=%s "
                 "why=%s retry_s=%U",
                 t->worker, t->thread, t->isolate, ok ? "no console profile started" : "failed",
                 r->error_message ? r->error_message : (ok ? "" : isoprof_strerror(r->status)),
                 (t->ka.warm.retry_ns - now) / 1000000000u);
    }
    ka_log_choice(t);
}

/* --- the sampler's cost, measured ---
 *
 * V8's sampler thread is named v8:ProfEvntProc; it lives while a profile
 * runs. Its CPU (schedstat's first field) read twice a tick apart gives its
 * rate, the continuous sampler's cost auto weighs. Read off the loop; only
 * for a main thread with no worker attached (each isolate of a process has
 * a sampler of the same name) whose process is known. */
struct ka_probe_job {
    uv_work_t req;
    struct agent *a;
    uint64_t seq;
    uint32_t pid;
    uint32_t tid; /* out: 0 if none */
    uint64_t cpu_ns;
};

static uint64_t ka_probe_seq;

static void ka_probe_work(uv_work_t *req)
{
    struct ka_probe_job *j = container_of(req, struct ka_probe_job, req);
    char path[96];
    snprintf(path, sizeof(path), "/proc/%u/task", (unsigned)j->pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    struct dirent *e;
    while (j->tid == 0 && (e = readdir(d)) != NULL) {
        char *end;
        unsigned long tid = strtoul(e->d_name, &end, 10);
        if (*end != '\0' || tid == 0 || tid > UINT32_MAX)
            continue;
        char buf[64];
        snprintf(path, sizeof(path), "/proc/%u/task/%lu/comm", (unsigned)j->pid, tid);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        if (strncmp(buf, "v8:ProfEvntProc", 15) != 0)
            continue;
        snprintf(path, sizeof(path), "/proc/%u/task/%lu/schedstat", (unsigned)j->pid, tid);
        f = fopen(path, "r");
        unsigned long long ns = 0;
        if (f && fscanf(f, "%llu", &ns) == 1) {
            j->tid = (uint32_t)tid;
            j->cpu_ns = ns;
        }
        if (f)
            fclose(f);
    }
    closedir(d);
}

static void ka_probe_done(uv_work_t *req, int status)
{
    struct ka_probe_job *j = container_of(req, struct ka_probe_job, req);
    uint64_t now = isoprof_now_mono_ns();
    for (struct target *t = j->a->targets; t; t = t->next) {
        if (t->ka.probe != j->seq)
            continue;
        t->ka.probe = 0;
        if (status != 0 || t->removing || t->state != TARGET_READY)
            break;
        /* The profiler's interval now: the keep-alive's, or the window's. */
        uint64_t iv = t->ka.warm.st == WARM_ON  ? t->ka.warm.interval_ns
                      : t->w.cpu == WIN_RUNNING ? t->w.tags.interval_ns
                                                : 0;
        if (j->tid != 0 && j->tid == t->ka.tid && iv != 0 && j->cpu_ns >= t->ka.tid_cpu_ns &&
            now - t->ka.tid_mono_ns >= 500000000ull) {
            uint64_t per_s = (uint64_t)((double)(j->cpu_ns - t->ka.tid_cpu_ns) * 1e9 /
                                        (double)(now - t->ka.tid_mono_ns));
            warm_sampler_measured(&t->ka.warm, per_s, iv);
        }
        t->ka.tid = j->tid;
        t->ka.tid_cpu_ns = j->cpu_ns;
        t->ka.tid_mono_ns = now;
        break;
    }
    isoprof_free(j);
}

static void ka_probe(struct target *t)
{
    uint32_t pid = t->ep->pid ? t->ep->pid : t->title_pid ? t->title_pid : t->proc_pid;
    int sampling = t->ka.warm.st == WARM_ON || t->w.cpu == WIN_RUNNING;
    if (t->parent != NULL || t->thr.nworkers > 0 || pid == 0 || t->ka.probe != 0 || !sampling) {
        if (!sampling)
            t->ka.tid = 0; /* the thread ends with the profile */
        return;
    }
    struct ka_probe_job *j = isoprof_calloc(1, sizeof(*j));
    if (j == NULL)
        return;
    j->a = t->a;
    j->seq = ++ka_probe_seq;
    j->pid = pid;
    if (uv_queue_work(t->a->loop, &j->req, ka_probe_work, ka_probe_done) != 0) {
        isoprof_free(j);
        return;
    }
    t->ka.probe = j->seq;
}

void keepalive_tick(struct target *t)
{
    struct agent *a = t->a;
    if (t->state != TARGET_READY || a->stopping || t->removing || snapshot_busy(t))
        return;
    uint64_t now = isoprof_now_mono_ns();
    /* No keep-alive starts while a window's interval is being set, nor
     * joins a window at another interval than the schedule's (an anomaly's
     * finer one would then sample all the time). */
    int open =
        t->w.cpu == WIN_STARTING || t->w.cpu == WIN_STOPPING ||
        (t->w.cpu == WIN_RUNNING && t->w.tags.interval_ns != a->cfg->sampling.cpu.interval_ns);
    if (a->cfg->sampling.cpu.mode != CFG_CPU_COLD)
        ka_probe(t);
    enum warm_act act = warm_next(&t->ka.warm, a->cfg, now, open);
    ka_log_choice(t);
    if (act == WARM_ACT_NONE)
        return;
    char cur[96], next[96], expr[256];
    ka_title(t, t->ka.warm.seq, cur, sizeof(cur));
    ka_title(t, t->ka.warm.seq + 1, next, sizeof(next));
    if (act == WARM_ACT_START)
        snprintf(expr, sizeof(expr), "console.profile(\\\"%s\\\")", next);
    else if (act == WARM_ACT_ROTATE)
        snprintf(expr, sizeof(expr), "console.profile(\\\"%s\\\");console.profileEnd(\\\"%s\\\")",
                 next, cur);
    else
        snprintf(expr, sizeof(expr), "console.profileEnd(\\\"%s\\\")", cur);
    char params[384];
    snprintf(params, sizeof(params), "{\"expression\":\"%s\",\"silent\":true}", expr);
    int rc = 0;
    if (act == WARM_ACT_START) {
        /* The interval is V8's from the profiler's making on: the
         * scheduled one. A window running now made it already (at its own
         * interval), and then the keep-alive only joins it. */
        uint64_t iv =
            t->w.cpu == WIN_RUNNING ? t->w.tags.interval_ns : a->cfg->sampling.cpu.interval_ns;
        if (t->w.cpu != WIN_RUNNING) {
            char ip[64];
            snprintf(ip, sizeof(ip), "{\"interval\":%llu}", (unsigned long long)(iv / 1000u));
            rc =
                target_call(t, "Profiler.setSamplingInterval", ip, KA_TIMEOUT_MS, 0, ka_on_ignored);
        }
        if (rc == 0)
            warm_sent(&t->ka.warm, act, now, iv);
    } else {
        warm_sent(&t->ka.warm, act, now, 0);
    }
    if (rc == 0) {
        t->ka.sent_ns = now;
        rc = target_call(t, "Runtime.evaluate", params, KA_TIMEOUT_MS, 0, ka_on_reply);
    }
    if (rc != 0) {
        log_warn("keep-alive call not sent", "worker=%s isolate=%u err=%e", t->worker, t->isolate,
                 rc);
        t->ka.sent_ns = 0;
        warm_answered(&t->ka.warm, now, 0, 0);
    }
}

/* A console profile we did not ask for: someone else on the isolate. */
static void ka_disturbed(struct target *t, const char *what, const char *title)
{
    uint64_t now = isoprof_now_mono_ns();
    warm_disturbed(&t->ka.warm, now);
    log_warn("warm windows disturbed, windows stay cold",
             "worker=%s thread=%s isolate=%u what=%s title=%s retry_s=%U", t->worker, t->thread,
             t->isolate, what, title, (t->ka.warm.retry_ns - now) / 1000000000u);
    ka_log_choice(t);
    keepalive_tick(t); /* ends ours if it still runs */
}

/* title is a console profile's that started (started 1) or finished. */
static void ka_console_event(struct target *t, int started, const char *title)
{
    char cur[96], mine[96];
    ka_title(t, t->ka.warm.seq, cur, sizeof(cur));
    if (started) {
        if (strcmp(title, cur) == 0) {
            t->ka.seen = t->ka.warm.seq;
            return;
        }
        /* One of ours, an earlier one (a late event), is not another client. */
        snprintf(mine, sizeof(mine), KA_PREFIX "%u-%u-", (unsigned)getpid(), (unsigned)t->isolate);
        /* Cold by the config, nothing of ours can share it. */
        if (strncmp(title, mine, strlen(mine)) != 0 && t->a->cfg->sampling.cpu.mode != CFG_CPU_COLD)
            ka_disturbed(t, "another console profile started", title);
        return;
    }
    /* Ours ended while we did not ask (a rotation or an end ends it). */
    if (strcmp(title, cur) == 0 && t->ka.warm.st == WARM_ON)
        ka_disturbed(t, "the keep-alive was ended by another client", title);
}

int keepalive_on_event(struct target *t, const char *session, const char *method, yajl_val params)
{
    int started = strcmp(method, "Profiler.consoleProfileStarted") == 0;
    if (!started && strcmp(method, "Profiler.consoleProfileFinished") != 0)
        return 0;
    struct target *k = ka_target(t, session);
    const char *path[] = {"title", NULL};
    yajl_val v = params ? yajl_tree_get(params, path, yajl_t_string) : NULL;
    if (k != NULL && k->state == TARGET_READY)
        ka_console_event(k, started, v ? YAJL_GET_STRING(v) : "");
    return 1;
}

int keepalive_on_big_event(struct target *t, const char *method, const char *data, size_t len)
{
    if (strcmp(method, "Profiler.consoleProfileFinished") != 0)
        return 0;
    /* Too big to parse on the loop: only whether it is our keep-alive's
     * end matters, and its title is a string no profile holds otherwise. */
    char title[96], quoted[100];
    ka_title(t, t->ka.warm.seq, title, sizeof(title));
    snprintf(quoted, sizeof(quoted), "\"%s\"", title);
    if (t->state == TARGET_READY && memmem(data, len, quoted, strlen(quoted)) != NULL)
        ka_console_event(t, 0, title);
    return 1;
}

void keepalive_window_start(struct target *t)
{
    t->ka.win_warm = warm_is_on(&t->ka.warm);
    if (t->ka.win_warm)
        t->ka.warm.warm_windows++;
}

void keepalive_window_cost(struct target *t, enum win_call call, uint64_t pause_ns)
{
    /* Only a window cold from its start to its end tells what cold costs:
     * a keep-alive that started meanwhile made its stop warm. */
    if (!t->ka.win_warm && !warm_is_on(&t->ka.warm) && t->ka.warm.st == WARM_OFF)
        warm_cold_cost(&t->ka.warm, call == WIN_CALL_STOP, pause_ns);
}

uint64_t keepalive_window_end(struct target *t)
{
    uint64_t iv = t->ka.win_warm ? t->ka.warm.interval_ns : 0;
    t->ka.win_warm = 0;
    return iv;
}

void keepalive_detached(struct target *t)
{
    warm_detached(&t->ka.warm);
    t->ka.sent_ns = 0;
    t->ka.win_warm = 0;
}

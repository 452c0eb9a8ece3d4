/*
 * daemon.c - start-up, the run loop and shutdown of isoprofd.
 *
 * Start-up order: store (so a bad store fails fast, before any target is
 * touched), HTTP client, writer, discovery, signals. Shutdown on the first
 * SIGINT/SIGTERM: discovery stops, running windows are stopped and their
 * profiles converted and stored, then every handle is closed and the loop
 * runs dry. A deadline timer bounds the wait: windows that have not
 * answered by then are given up (and counted) so the process exits in
 * time. A second signal skips the wait.
 */
#include "agent.h"
#include "internal.h"
#include "log.h"

#include "base.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#define SHUTDOWN_DEADLINE_MS 800

uint64_t agent_rand(struct agent *a)
{
    uint64_t x = a->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    a->rng = x;
    return x;
}

double agent_rand_unit(struct agent *a)
{
    return (double)(agent_rand(a) >> 11) / 9007199254740992.0;
}

static int windows_open(const struct agent *a)
{
    for (const struct target *t = a->targets; t; t = t->next)
        if (t->win == WINDOW_STARTING || t->win == WINDOW_RUNNING || t->win == WINDOW_STOPPING)
            return 1;
    return 0;
}

static void agent_close_all(struct agent *a)
{
    static int closed;
    if (closed)
        return;
    closed = 1;
    ondemand_stop(a); /* before the targets go: their requests are told why */
    for (struct target *t = a->targets, *n; t; t = n) {
        n = t->next;
        target_remove(t);
    }
    discover_close(a);
    anomaly_stop(a);
    control_stop(a);
    report_stop(a);
    if (a->upl != NULL) {
        agent_upload_stats(a, &a->upl_base); /* its totals outlive it, as at a reload */
        upl_close(a->upl);                   /* before the HTTP client it sends through */
        a->upl = NULL;
    }
    if (a->http) {
        http_client_close(a->http);
        a->http = NULL;
    }
    uv_close((uv_handle_t *)&a->sigint, NULL);
    uv_close((uv_handle_t *)&a->sigterm, NULL);
    uv_close((uv_handle_t *)&a->sighup, NULL);
    if (a->notify_on)
        uv_close((uv_handle_t *)&a->notify_timer, NULL);
    uv_close((uv_handle_t *)&a->shutdown_timer, NULL);
}

void agent_maybe_finish(struct agent *a)
{
    if (!a->stopping)
        return;
    if (windows_open(a) || writer_busy(a->writer))
        return;
    agent_close_all(a);
}

static void agent_on_deadline(uv_timer_t *t)
{
    struct agent *a = container_of(t, struct agent, shutdown_timer);
    for (struct target *x = a->targets; x; x = x->next)
        if (x->win != WINDOW_NONE)
            a->n.windows_lost++;
    log_warn("shutdown deadline reached", "open_windows=%d", windows_open(a));
    agent_close_all(a);
}

static void agent_stop(struct agent *a, int signum)
{
    if (a->stopping) {
        /* A supervisor often signals the process and its group at once:
         * a repeat within half a second is the same request. */
        if (isoprof_now_mono_ns() - a->stop_mono_ns < 500000000ull)
            return;
        log_warn("second signal, exiting now", "signal=%d", signum);
        agent_close_all(a);
        return;
    }
    a->stopping = 1;
    a->stop_mono_ns = isoprof_now_mono_ns();
    sd_notify(0, "STOPPING=1\nSTATUS=stopping: storing the open windows");
    log_info("stopping", "signal=%d open_windows=%u", signum, sched_running(a));
    discover_stop(a);
    sched_stop_all(a);
    uv_timer_start(&a->shutdown_timer, agent_on_deadline, SHUTDOWN_DEADLINE_MS, 0);
    agent_maybe_finish(a);
}

static void agent_on_signal(uv_signal_t *s, int signum)
{
    struct agent *a = s->data;
    agent_stop(a, signum);
}

/* One log line per line of a loader or reload message. */
static void log_lines(enum cfg_log_level level, const char *msg, const char *text)
{
    while (text && *text) {
        size_t n = strcspn(text, "\n");
        char line[1024];
        snprintf(line, sizeof(line), "%.*s", (int)(n < sizeof(line) ? n : sizeof(line) - 1), text);
        agent_log(level, msg, "problem=%s", line);
        text += n + (text[n] == '\n');
    }
}

/*
 * SIGHUP: read the config file again. An invalid file changes nothing (its
 * problems are logged). Otherwise targets, schedule, anomaly, upload and
 * log settings take effect now: endpoints still named keep their sessions
 * and windows, the others go; settings marked [restart] in --help are
 * reported and keep their running values (they are read from cfg_boot).
 */
static void agent_reload(struct agent *a)
{
    const char *path = a->cfg_boot->source;
    if (a->stopping)
        return;
    if (strcmp(path, "<defaults>") == 0) {
        log_warn("SIGHUP ignored: running on the embedded defaults, no file to read", "");
        return;
    }
    sd_notify(0, "RELOADING=1\nSTATUS=reloading the config");
    struct cfg *next = NULL;
    char *why = NULL;
    int rc = cfg_load_file(path, &next, &why);
    if (rc != 0) {
        log_error("reload refused, the running config is kept", "path=%s err=%e", path, rc);
        log_lines(CFG_LOG_ERROR, "reload: config problem", why);
        isoprof_free(why);
        sd_notify(0, "READY=1\nSTATUS=running (the last reload was refused: see the log)");
        return;
    }
    char *restart = NULL;
    if (cfg_check_reload(a->cfg_boot, next, &restart) == ISOPROF_ECONFIG)
        log_lines(CFG_LOG_WARN, "reload: not applied until a restart", restart);
    isoprof_free(restart);
    struct cfg_hold *hold = isoprof_calloc(1, sizeof(*hold));
    if (hold == NULL) {
        cfg_free(next);
        log_error("reload refused: out of memory", "path=%s", path);
        sd_notify(0, "READY=1");
        return;
    }
    struct cfg *old = a->cfg;
    a->cfg = next;
    /* The old config stays alive: retired endpoints and targets being
     * closed still point into it. The boot config is the caller's. */
    if (old != a->cfg_boot) {
        hold->cfg = old;
        hold->next = a->retired_cfgs;
        a->retired_cfgs = hold;
    } else {
        isoprof_free(hold);
    }
    agent_log_set_level(next->log.level);
    if (discover_reload(a, next) != 0)
        log_error("reload: out of memory adding endpoints", "");
    sched_reconfigure(a);
    if (agent_upload_reload(a, old) != 0)
        log_error("reload: the uploader did not restart; windows stay queued", "");
    log_info("config reloaded", "path=%s targets=%U", path, (uint64_t)next->ntargets);
    sd_notify(0, "READY=1\nSTATUS=running (config reloaded)");
}

/* What `systemctl status isoprof` shows, every NOTIFY_STATUS_MS. */
#define NOTIFY_STATUS_MS 10000
static void agent_on_notify_timer(uv_timer_t *timer)
{
    struct agent *a = timer->data;
    unsigned ready = 0, total = 0;
    for (const struct target *t = a->targets; t; t = t->next) {
        if (t->removing)
            continue;
        total++;
        ready += t->state == TARGET_READY;
    }
    sd_notifyf(0, "STATUS=running: %u of %u targets attached, %u windows open, %llu stored", ready,
               total, sched_running(a), (unsigned long long)a->n.windows_stored);
}

static void agent_on_sighup(uv_signal_t *s, int signum)
{
    (void)signum;
    agent_reload(s->data);
}

/* The configs reloads replaced, and the current one if it is not the
 * caller's (after the loop ran dry: nothing points into them any more). */
static void agent_free_configs(struct agent *a)
{
    for (struct cfg_hold *h = a->retired_cfgs, *n; h; h = n) {
        n = h->next;
        cfg_free(h->cfg);
        isoprof_free(h);
    }
    a->retired_cfgs = NULL;
    if (a->cfg != a->cfg_boot)
        cfg_free(a->cfg);
    a->cfg = a->cfg_boot;
}

static void log_counters(const struct agent *a)
{
    const struct agent_counters *n = &a->n;
    log_info("counters",
             "windows_started=%U windows_stored=%U windows_lost=%U windows_delayed=%U "
             "windows_skipped=%U windows_evicted=%U windows_dropped=%U conversion_errors=%U "
             "store_errors=%U sessions_attached=%U sessions_dropped=%U discovery_errors=%U "
             "heap_windows=%U heap_restarts=%U memory_polls_failed=%U memory_near_limit=%U "
             "oom_suspected=%U latency_p999_spike=%U anomaly_errors=%U",
             n->windows_started, n->windows_stored, n->windows_lost, n->windows_delayed,
             n->windows_skipped, n->windows_evicted, n->windows_dropped, n->conversion_errors,
             n->store_errors, n->sessions_attached, n->sessions_dropped, n->discovery_errors,
             n->heap_windows, n->heap_restarts, n->memory_polls_failed,
             n->anomalies[STORE_ANOMALY_MEMORY_NEAR_LIMIT],
             n->anomalies[STORE_ANOMALY_OOM_SUSPECTED],
             n->anomalies[STORE_ANOMALY_LATENCY_P999_SPIKE], n->anomaly_errors);
    if (a->cfg_boot->upload.url != NULL && a->cfg_boot->upload.url[0] != '\0') {
        struct upl_stats ust;
        const struct upl_stats *u = &ust;
        agent_upload_stats(a, &ust);
        log_info("upload counters",
                 "requests=%U requests_ok=%U requests_failed=%U profiles_sent=%U "
                 "profiles_rejected=%U profiles_unsendable=%U bytes_sent=%U store_errors=%U",
                 u->requests, u->requests_ok, u->requests_failed, u->profiles_sent,
                 u->profiles_rejected, u->profiles_unsendable, u->bytes_sent, u->store_errors);
    }
}

int agent_run(struct cfg *cfg)
{
    struct agent *a = isoprof_calloc(1, sizeof(*a));
    if (a == NULL)
        return -ENOMEM;
    int rc;
    uv_loop_t loop;
    a->cfg = a->cfg_boot = cfg;
    a->start_mono_ns = isoprof_now_mono_ns();
    a->loop = &loop;
    if (getrandom(&a->rng, sizeof(a->rng), 0) != sizeof(a->rng) || a->rng == 0)
        a->rng = isoprof_now_mono_ns() | 1;
    a->isolate_base = (uint32_t)(agent_rand(a) & 0xfff00000u);
    agent_log_set_level(cfg->log.level);
    signal(SIGPIPE, SIG_IGN);

    rc = uv_loop_init(&loop);
    if (rc != 0)
        goto fail_loop;

    struct store_options so = {.max_size = cfg->store.max_size,
                               .pin_factor = cfg->anomaly.retention,
                               .outbox = cfg->upload.url != NULL && cfg->upload.url[0] != '\0'};
    char *why = NULL;
    rc = store_open(cfg->store.path, &so, &a->store, &why);
    if (rc != 0) {
        log_error("cannot open store", "path=%s err=%e why=%s", cfg->store.path, rc,
                  why ? why : "");
        isoprof_free(why);
        goto fail_store;
    }
    rc = http_client_init(&loop, &a->http);
    if (rc != 0)
        goto fail_http;
    rc = writer_init(a, &a->writer);
    if (rc != 0)
        goto fail_writer;
    rc = agent_upload_start(a);
    if (rc != 0)
        goto fail_upload;
    rc = report_start(a);
    if (rc != 0)
        goto fail_report;
    rc = control_start(a);
    if (rc != 0)
        goto fail_control;
    rc = discover_start(a);
    if (rc != 0)
        goto fail_discover;
    anomaly_start(a);

    uv_signal_init(&loop, &a->sigint);
    uv_signal_init(&loop, &a->sigterm);
    uv_signal_init(&loop, &a->sighup);
    a->sigint.data = a->sigterm.data = a->sighup.data = a;
    uv_signal_start(&a->sigint, agent_on_signal, SIGINT);
    uv_signal_start(&a->sigterm, agent_on_signal, SIGTERM);
    uv_signal_start(&a->sighup, agent_on_sighup, SIGHUP);
    uv_timer_init(&loop, &a->shutdown_timer);

    log_info("isoprofd started", "version=%s store=%s targets=%U config=%s", ISOPROF_VERSION,
             cfg->store.path, (uint64_t)cfg->ntargets, cfg->source);
    /* The store is open and the control socket listens: ready. Without
     * NOTIFY_SOCKET (not under systemd) this does nothing. */
    sd_notifyf(0, "READY=1\nSTATUS=running: %zu endpoints configured\nMAINPID=%lu", cfg->ntargets,
               (unsigned long)getpid());
    if (getenv("NOTIFY_SOCKET") != NULL) {
        uv_timer_init(&loop, &a->notify_timer);
        a->notify_timer.data = a;
        uv_timer_start(&a->notify_timer, agent_on_notify_timer, NOTIFY_STATUS_MS, NOTIFY_STATUS_MS);
        uv_unref((uv_handle_t *)&a->notify_timer);
        a->notify_on = 1;
    }
    uv_run(&loop, UV_RUN_DEFAULT);

    /* Every handle is closed; the writer is idle or gave up at the deadline. */
    writer_free(a->writer);
    uv_run(&loop, UV_RUN_DEFAULT);
    log_counters(a);
    anomaly_free(a);
    store_close(a->store);
    discover_free(a);
    agent_free_configs(a);
    rc = uv_loop_close(&loop);
    if (rc != 0)
        log_warn("loop closed with handles open", "err=%s", uv_strerror(rc));
    log_info("isoprofd stopped", "");
    isoprof_free(a);
    return 0;

fail_discover:
    discover_close(a);
    control_stop(a);
fail_control:
    report_stop(a);
fail_report:
    upl_close(a->upl);
fail_upload:
    writer_free(a->writer);
fail_writer:
    http_client_close(a->http);
fail_http:
    store_close(a->store);
fail_store:
    uv_run(&loop, UV_RUN_DEFAULT);
    discover_free(a);
    uv_loop_close(&loop);
fail_loop:
    isoprof_free(a);
    return rc;
}

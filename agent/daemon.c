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
#include <string.h>
#include <sys/random.h>

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
    for (struct target *t = a->targets, *n; t; t = n) {
        n = t->next;
        target_remove(t);
    }
    for (size_t i = 0; i < a->nendpoints; i++)
        uv_close((uv_handle_t *)&a->endpoints[i].timer, NULL);
    anomaly_stop(a);
    if (a->upl != NULL) {
        upl_stats(a->upl, &a->upl_final);
        upl_close(a->upl); /* before the HTTP client it sends through */
        a->upl = NULL;
    }
    if (a->http) {
        http_client_close(a->http);
        a->http = NULL;
    }
    uv_close((uv_handle_t *)&a->sigint, NULL);
    uv_close((uv_handle_t *)&a->sigterm, NULL);
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
    if (a->cfg->upload.url != NULL && a->cfg->upload.url[0] != '\0') {
        const struct upl_stats *u = &a->upl_final;
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
    a->cfg = cfg;
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
    rc = discover_start(a);
    if (rc != 0)
        goto fail_discover;
    anomaly_start(a);

    uv_signal_init(&loop, &a->sigint);
    uv_signal_init(&loop, &a->sigterm);
    a->sigint.data = a->sigterm.data = a;
    uv_signal_start(&a->sigint, agent_on_signal, SIGINT);
    uv_signal_start(&a->sigterm, agent_on_signal, SIGTERM);
    uv_timer_init(&loop, &a->shutdown_timer);

    log_info("isoprofd started", "version=%s store=%s targets=%U config=%s", ISOPROF_VERSION,
             cfg->store.path, (uint64_t)cfg->ntargets, cfg->source);
    uv_run(&loop, UV_RUN_DEFAULT);

    /* Every handle is closed; the writer is idle or gave up at the deadline. */
    writer_free(a->writer);
    uv_run(&loop, UV_RUN_DEFAULT);
    log_counters(a);
    anomaly_free(a);
    store_close(a->store);
    for (size_t i = 0; i < a->nendpoints; i++)
        isoprof_free(a->endpoints[i].runtime);
    isoprof_free(a->endpoints);
    rc = uv_loop_close(&loop);
    if (rc != 0)
        log_warn("loop closed with handles open", "err=%s", uv_strerror(rc));
    log_info("isoprofd stopped", "");
    isoprof_free(a);
    return 0;

fail_discover:
    upl_close(a->upl);
fail_upload:
    writer_free(a->writer);
fail_writer:
    http_client_close(a->http);
fail_http:
    store_close(a->store);
fail_store:
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
fail_loop:
    isoprof_free(a);
    return rc;
}

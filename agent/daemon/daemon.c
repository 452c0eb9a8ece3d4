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
#include "daemon.h"
#include "agent.h"
#include "anomaly.h"
#include "control.h"
#include "deploy.h"
#include "discover.h"
#include "keepalive.h"
#include "log.h"
#include "ondemand.h"
#include "procs.h"
#include "report.h"
#include "snapshot.h"
#include "target.h"
#include "threads.h"
#include "uplink.h"
#include "writer.h"

#include "base.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#define SHUTDOWN_DEADLINE_MS 800

/* The socket's counters (control_counters) into a->n, where the pages and
 * the exit log read every counter. */
static void agent_control_counters(struct agent *a)
{
    if (a->control == NULL)
        return;
    struct ctl_counters c;
    control_counters(a->control, &c);
    a->n.control_requests = c.requests;
    a->n.control_errors = c.errors;
    a->n.control_rejected_connections = c.rejected_connections;
}

/* Closes every part and handle (after the start-up table, below). */
static void agent_close_all(struct agent *a);

/* Stopping, and the last open window and the last writer job are done:
 * close everything (the loop then runs dry). */
static void agent_on_drained(uv_timer_t *timer)
{
    struct agent *a = container_of(timer, struct agent, drained_timer);
    if (a->stopping && a->wins.open == 0 && !writer_busy(a->writer) && threads_fencing(a) == 0)
        agent_close_all(a);
}

/* A piece of work went idle (windows.c, the writer, a fence of
 * threads.c): check a loop turn later, once the callback that told us has
 * finished its own work (a window's end is told before its profile
 * reaches the writer). */
void agent_check_drained(struct agent *a)
{
    if (a->stopping && !uv_is_closing((uv_handle_t *)&a->drained_timer))
        uv_timer_start(&a->drained_timer, agent_on_drained, 0, 0);
}

static void agent_on_windows_idle(struct win_sched *s)
{
    agent_check_drained(container_of(s, struct agent, wins));
}

static void agent_on_writer_idle(struct agent *a)
{
    agent_check_drained(a);
}

/* A window left the writer: the target learns when its last one was
 * stored, the on-demand request it was for gets its answer. */
static void agent_on_window_written(struct agent *a, const struct writer_done *d)
{
    if (d->err == 0) {
        for (struct target *t = a->targets; t; t = t->next) {
            if (t->isolate != d->isolate)
                continue;
            if (d->type == STORE_TYPE_HEAP)
                t->last_heap_ns = d->start_ns;
            else
                t->last_cpu_ns = d->start_ns;
            break;
        }
    }
    ondemand_window_done(d->od, d->err, d->pprof, d->why);
}

static const struct writer_hooks agent_writer_hooks = {
    .window_done = agent_on_window_written,
    .idle = agent_on_writer_idle,
    .retained = snapshot_retained,
};

static const struct target_ops agent_target_ops = {
    .anomaly =
        {
            .attached = anomaly_attached,
            .gone = anomaly_target_gone,
            .memory = anomaly_memory,
            .heap_cost = anomaly_heap_cost,
        },
    .keepalive =
        {
            .tick = keepalive_tick,
            .on_event = keepalive_on_event,
            .on_big_event = keepalive_on_big_event,
            .window_start = keepalive_window_start,
            .window_cost = keepalive_window_cost,
            .window_end = keepalive_window_end,
            .detached = keepalive_detached,
        },
    .snapshot =
        {
            .busy = snapshot_busy,
            .on_event = snapshot_on_event,
            .on_big_event = snapshot_on_big_event,
        },
    .threads =
        {
            .enable = threads_enable,
            .tick = threads_tick,
            .on_event = threads_on_event,
            .worker_error = threads_worker_error,
            .drop = threads_drop,
            .release = threads_release,
            .unlink = threads_unlink,
            .parent_gone = threads_parent_gone,
        },
    .submit = writer_submit,
    .window_done = ondemand_window_done,
    .check_drained = agent_check_drained,
};

static const struct win_ops agent_win_ops = {
    .cpu_start = target_win_cpu_start,
    .cpu_stop = target_win_cpu_stop,
    .heap_take = target_win_heap_take,
    .arm = target_win_arm,
    .idle = agent_on_windows_idle,
    .od_ref = ondemand_win_ref,
    .od_unref = ondemand_win_unref,
    .od_fail = ondemand_win_fail,
    .label = target_win_label,
};

static void agent_on_deadline(uv_timer_t *t)
{
    struct agent *a = container_of(t, struct agent, shutdown_timer);
    /* The windows still open are counted lost as their targets go. */
    log_warn("shutdown deadline reached", "open_windows=%u", a->wins.open);
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
    log_info("stopping", "signal=%d open_windows=%u", signum, a->wins.slots);
    discover_stop(a);
    procs_stop(a);
    threads_stop(a);
    uv_timer_start(&a->shutdown_timer, agent_on_deadline, SHUTDOWN_DEADLINE_MS, 0);
    writer_stopping(a->writer);
    win_stop_all(&a->wins, isoprof_now_mono_ns()); /* its idle callback says when all closed */
    agent_check_drained(a);                        /* the writer may be idle already */
}

static void agent_on_signal(uv_signal_t *s, int signum)
{
    struct agent *a = s->data;
    agent_stop(a, signum);
}

/* source_maps_cpu (a share of a core) as resolve.h's parts per million. */
static uint32_t cpu_ppm(double share)
{
    double ppm = share * 1e6 + 0.5;
    return ppm < 1 ? 1 : ppm > 1e6 ? 1000000u : (uint32_t)ppm;
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
    procs_reload(a);
    srcmap_cache_limits(a->srcmaps, next->source_maps_cache, next->source_maps_max_file);
    srcmap_cache_allowance(a->srcmaps, cpu_ppm(next->source_maps_cpu), 0);
    win_reconfigure(&a->wins, next, isoprof_now_mono_ns());
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
               total, a->wins.slots, (unsigned long long)a->n.windows_stored);
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
    agent_counters_log(&a->n);
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

/* One descriptor per session: take the hard limit on open files as the
 * soft one (the unit sets both, so under systemd this changes nothing, and
 * its system call filter may refuse it: best effort). */
static void agent_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
        return;
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
}

/* The check of the store at start may take this long in all: store_verify
 * (the free list child and the walk), then store_open's own free list
 * check with what is left. Then it is given up and the daemon starts
 * without a verdict. packaging/isoprof.service's TimeoutStartSec= must stay
 * above it. */
#define STORE_VERIFY_START_MS 30000

/*
 * Move data.mdb and lock.mdb of the store at path into a new directory
 * path/damaged-<UTC time>/ (dest receives its name). The store directory
 * itself stays where it is: under systemd it is the StateDirectory
 * (/var/lib/isoprof, a link to /var/lib/private/isoprof), which the
 * service cannot rename but may write in.
 */
static int store_move_aside(const char *path, char *dest, size_t cap)
{
    char ts[32], from[4200], to[4300];
    struct tm tm;
    time_t now = time(NULL);
    gmtime_r(&now, &tm);
    strftime(ts, sizeof(ts), "%Y%m%dT%H%M%SZ", &tm);
    int made = 0;
    for (int i = 0; i < 100 && !made; i++) {
        int n = i ? snprintf(dest, cap, "%s/damaged-%s-%d", path, ts, i)
                  : snprintf(dest, cap, "%s/damaged-%s", path, ts);
        if (n < 0 || (size_t)n >= cap)
            return -ENAMETOOLONG;
        if (mkdir(dest, 0700) == 0)
            made = 1;
        else if (errno != EEXIST)
            return -errno;
    }
    if (!made)
        return -EEXIST;
    static const char *const files[] = {"data.mdb", "lock.mdb"};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(files); i++) {
        snprintf(from, sizeof(from), "%s/%s", path, files[i]);
        snprintf(to, sizeof(to), "%s/%s", dest, files[i]);
        if (rename(from, to) != 0 && (i == 0 || errno != ENOENT)) {
            int rc = -errno;
            if (i == 0)
                rmdir(dest);
            return rc;
        }
    }
    return 0;
}

/*
 * A damaged store (why: the report, one problem a line): refused
 * (ISOPROF_EDAMAGED: isoprofd exits 3, and the unit does not restart it),
 * or with store.on_damage: move_aside, moved aside so that a new store can
 * start (0).
 */
static int agent_store_damaged(const struct cfg *cfg, const char *why)
{
    const char *path = cfg->store.path;
    char first[512], dest[4200];
    unsigned problems = 0;
    size_t n = why ? strcspn(why, "\n") : 0;
    snprintf(first, sizeof(first), "%.*s", (int)(n < sizeof(first) ? n : sizeof(first) - 1),
             why ? why : "");
    for (const char *p = why; p && *p; p++)
        problems += *p == '\n';
    if (cfg->store.on_damage != CFG_STORE_MOVE_ASIDE) {
        log_error("store is damaged; refusing to start", "path=%s problem=%s problems=%u hint=%s",
                  path, first, problems > 0 ? problems : 1,
                  "'isoprof store check --store <path>' reports it; store.on_damage: move_aside "
                  "keeps the damaged files and starts a new store");
        return ISOPROF_EDAMAGED;
    }
    int rc = store_move_aside(path, dest, sizeof(dest));
    if (rc != 0) {
        log_error("store is damaged and could not be moved aside; refusing to start",
                  "path=%s err=%e problem=%s", path, rc, first);
        return ISOPROF_EDAMAGED;
    }
    log_warn("store was damaged; moved it aside and starting a new store",
             "path=%s moved_to=%s problem=%s problems=%u", path, dest, first,
             problems > 0 ? problems : 1);
    return 0;
}

/*
 * Open the store, after a walk of it in a child process (store_verify): a
 * damaged store is a finding to act on at start (agent_store_damaged), not
 * a fault in the daemon later. A check that could not be done (out of
 * time, no process for it, its child killed) is no finding: the daemon
 * says so and starts. STORE_VERIFY_START_MS bounds all of it. Logs why it
 * fails.
 */
static int agent_store_open(struct agent *a, const struct cfg *cfg)
{
    const char *path = cfg->store.path;
    struct store_options so = {.max_size = cfg->store.max_size,
                               .pin_factor = cfg->anomaly.retention,
                               .outbox = cfg->upload.url != NULL && cfg->upload.url[0] != '\0'};
    char *why = NULL;
    uint64_t t0 = isoprof_now_mono_ns();
    int rc = store_verify(path, 0, STORE_VERIFY_START_MS, &why);
    uint64_t ms = (isoprof_now_mono_ns() - t0) / 1000000;
    if (rc == 0) {
        log_info("store verified", "path=%s ms=%U", path, ms);
        so.verified = STORE_VERIFY_PASSED; /* store_open need not read the free list again */
    } else if (rc == ISOPROF_EDAMAGED) {
        if ((rc = agent_store_damaged(cfg, why)) != 0) {
            isoprof_free(why);
            return rc;
        }
    } else if (rc != -ENOENT && rc != ISOPROF_EMAGIC && rc != ISOPROF_ESCHEMA) {
        /* The check could not be done: store_open's own free list check
         * gets what is left of the bound and, if it cannot finish either,
         * does not keep the store closed. */
        log_warn("store not verified; starting without it", "path=%s ms=%U err=%e why=%s", path, ms,
                 rc, why ? why : "");
        so.verified = STORE_VERIFY_UNFINISHED;
        so.check_ms = ms < STORE_VERIFY_START_MS ? STORE_VERIFY_START_MS - ms : 1;
    }
    /* No store yet, not a store, another schema, no access: store_open's
     * to say. */
    isoprof_free(why);
    why = NULL;
    rc = store_open(path, &so, &a->store, &why);
    if (rc == ISOPROF_EDAMAGED) {
        /* Damaged since the walk (the walk did not finish, or another
         * process wrote): the same decision, once. */
        int drc = agent_store_damaged(cfg, why);
        isoprof_free(why);
        why = NULL;
        if (drc != 0)
            return drc;
        so.verified = STORE_VERIFY_NONE; /* a new store */
        rc = store_open(path, &so, &a->store, &why);
    }
    if (rc != 0)
        log_error("cannot open store", "path=%s err=%e why=%s", path, rc, why ? why : "");
    isoprof_free(why);
    return rc;
}

/* --- the control socket's side of the daemon (struct ctl_host) --- */

static char *host_status(void *arg, size_t *len)
{
    agent_control_counters(arg);
    return report_status(arg, len);
}

static char *host_metrics(void *arg, size_t *len)
{
    agent_control_counters(arg);
    return report_metrics(arg, len);
}

static int host_profile(void *arg, const struct ctl_profile_req *r, ctl_profile_cb cb, void *cbarg,
                        void **ticket, struct ctl_refusal *ref)
{
    const struct od_ask ask = {
        .worker = r->worker,
        .version = r->has_version ? r->version : NULL,
        /* an isolate named by id needs no thread; else the main thread by default */
        .thread = r->has_thread || !r->has_isolate ? r->thread : NULL,
        .has_thread = r->has_thread,
        .has_isolate = r->has_isolate,
        .all = r->all,
        .isolate = r->isolate,
        .type = r->type,
        .duration_ns = r->seconds * 1000000000ull,
        .interval_ns = r->interval_ns,
    };
    struct od_refusal no = {0};
    struct od_waiter *w = NULL;
    int rc = ondemand_request(arg, &ask, cb, cbarg, &w, &no);
    *ticket = w;
    if (rc != 0) {
        ref->status = no.status;
        snprintf(ref->why, sizeof(ref->why), "%s", no.why);
        _Static_assert(OD_REFUSAL_ISOLATES == CTL_REFUSAL_ISOLATES, "the isolates listed");
        ref->nisolates = no.nisolates;
        memcpy(ref->isolates, no.isolates, no.nisolates * sizeof(no.isolates[0]));
    }
    return rc;
}

static void host_cancel(void *ticket)
{
    ondemand_cancel(ticket);
}

static uint64_t host_interval_ns(void *arg)
{
    const struct agent *a = arg;
    return a->cfg->sampling.cpu.interval_ns;
}

/* --- start-up: one table, one pattern ---
 *
 * Every module starts the same way: its part's start, in the order of
 * agent_parts, returns 0 or an error it has logged. When one fails, it and
 * every part before it are undone, in reverse: undo closes what start
 * opened and is a no-op for what it did not (so a part undoes itself after
 * a partial start). Shutdown (agent_close_all) undoes the same parts in
 * the same reverse order, except those marked after_loop (the writer, the
 * source maps and the store), which outlive the loop's last callbacks and
 * are freed once it ran dry. */

struct agent_part {
    int (*start)(struct agent *a);
    void (*undo)(struct agent *a);
    int after_loop; /* shutdown leaves it to agent_run's end */
};

static int part_store(struct agent *a)
{
    return agent_store_open(a, a->cfg);
}

static void part_store_undo(struct agent *a)
{
    store_close(a->store);
    a->store = NULL;
}

static int part_http(struct agent *a)
{
    return http_client_init(a->loop, &a->http);
}

static void part_http_undo(struct agent *a)
{
    if (a->http != NULL)
        http_client_close(a->http);
    a->http = NULL;
}

static int part_srcmaps(struct agent *a)
{
    const struct cfg *cfg = a->cfg;
    int rc = srcmap_cache_new(cfg->source_maps_cache, cfg->source_maps_max_file, &a->srcmaps);
    if (rc == 0)
        srcmap_cache_allowance(a->srcmaps, cpu_ppm(cfg->source_maps_cpu), 0);
    return rc;
}

/* After the writer (undone first): its jobs are gone once the loop ran. */
static void part_srcmaps_undo(struct agent *a)
{
    srcmap_cache_free(a->srcmaps);
    a->srcmaps = NULL;
}

static int part_writer(struct agent *a)
{
    return writer_init(a, &agent_writer_hooks, &a->writer);
}

static void part_writer_undo(struct agent *a)
{
    if (a->writer != NULL)
        writer_free(a->writer);
    a->writer = NULL;
}

static int part_control(struct agent *a)
{
    const struct ctl_host host = {
        .loop = a->loop,
        .arg = a,
        .status = host_status,
        .metrics = host_metrics,
        .profile = host_profile,
        .cancel = host_cancel,
        .interval_ns = host_interval_ns,
    };
    return control_start(&host, a->cfg, &a->control);
}

static void part_control_undo(struct agent *a)
{
    agent_control_counters(a); /* the socket's last figures, for the exit log */
    control_stop(a->control);
    a->control = NULL;
}

/* The start of a part whose pieces come later, made by another part:
 * targets by discovery, on-demand requests by the control socket. */
static int part_made_later(struct agent *a)
{
    (void)a;
    return 0;
}

/* The targets' part removes them after the process scan and before the
 * endpoints. */
static void part_targets_undo(struct agent *a)
{
    for (struct target *t = a->targets, *n; t; t = n) {
        n = t->next;
        target_remove(t);
    }
}

static const struct agent_part agent_parts[] = {
    {part_store, part_store_undo, 1},
    {part_http, part_http_undo, 0},
    {part_srcmaps, part_srcmaps_undo, 1},
    {part_writer, part_writer_undo, 1},
    {agent_upload_start, agent_upload_stop, 0}, /* undone before the HTTP client */
    {report_start, report_stop, 0},
    {part_control, part_control_undo, 0},
    {anomaly_start, anomaly_stop, 0}, /* a listener that cannot bind is logged and left off */
    {discover_start, discover_close, 0},
    {part_made_later, part_targets_undo, 0},
    {procs_start, procs_stop, 0},
    {part_made_later, ondemand_stop, 0}, /* the pending requests answered before the targets go */
};
#define AGENT_NPARTS (sizeof(agent_parts) / sizeof(agent_parts[0]))

/* Undoes the first n parts, in reverse; at_stop: only those that do not
 * outlive the loop. */
static void agent_undo_parts(struct agent *a, size_t n, int at_stop)
{
    for (size_t k = n; k-- > 0;)
        if (!at_stop || !agent_parts[k].after_loop)
            agent_parts[k].undo(a);
}

/* Shutdown undoes the table's parts as a failed start-up does, then
 * closes the agent's own handles. */
static void agent_close_all(struct agent *a)
{
    static int closed;
    if (closed)
        return;
    closed = 1;
    agent_undo_parts(a, AGENT_NPARTS, 1);
    uv_close((uv_handle_t *)&a->sigint, NULL);
    uv_close((uv_handle_t *)&a->sigterm, NULL);
    uv_close((uv_handle_t *)&a->sighup, NULL);
    if (a->notify_on)
        uv_close((uv_handle_t *)&a->notify_timer, NULL);
    uv_close((uv_handle_t *)&a->shutdown_timer, NULL);
    uv_close((uv_handle_t *)&a->drained_timer, NULL);
}

int agent_run(struct cfg *cfg)
{
    struct agent *a = isoprof_calloc(1, sizeof(*a));
    if (a == NULL)
        return -ENOMEM;
    int rc;
    uv_loop_t loop;
    a->cfg = a->cfg_boot = cfg;
    a->tops = &agent_target_ops;
    a->msg_budget.limit = AGENT_MSG_BUDGET;
    a->msg_budget.reserve = AGENT_MSG_RESERVE;
    a->start_mono_ns = isoprof_now_mono_ns();
    a->loop = &loop;
    isoprof_rng_init(&a->rng);
    win_sched_init(&a->wins, cfg, &agent_win_ops, &a->rng, &a->n);
    agent_log_set_level(cfg->log.level);
    signal(SIGPIPE, SIG_IGN);
    agent_raise_nofile();

    rc = uv_loop_init(&loop);
    if (rc != 0)
        goto fail_loop;

    size_t started = 0;
    for (; started < AGENT_NPARTS; started++) {
        rc = agent_parts[started].start(a);
        if (rc != 0)
            break;
    }
    if (rc != 0) {
        /* The one that failed undoes what it started, then the others. */
        agent_undo_parts(a, started + 1, 0);
        uv_run(&loop, UV_RUN_DEFAULT);
        discover_free(a);
        anomaly_free(a);
        agent_upload_free(a);
        uv_loop_close(&loop);
        isoprof_free(a);
        return rc;
    }

    uv_signal_init(&loop, &a->sigint);
    uv_signal_init(&loop, &a->sigterm);
    uv_signal_init(&loop, &a->sighup);
    a->sigint.data = a->sigterm.data = a->sighup.data = a;
    uv_signal_start(&a->sigint, agent_on_signal, SIGINT);
    uv_signal_start(&a->sigterm, agent_on_signal, SIGTERM);
    uv_signal_start(&a->sighup, agent_on_sighup, SIGHUP);
    uv_timer_init(&loop, &a->shutdown_timer);
    uv_timer_init(&loop, &a->drained_timer);

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
    part_writer_undo(a);
    uv_run(&loop, UV_RUN_DEFAULT);
    part_srcmaps_undo(a);
    log_counters(a);
    anomaly_free(a);
    deploy_free(a);
    agent_upload_free(a);
    part_store_undo(a);
    discover_free(a);
    agent_free_configs(a);
    rc = uv_loop_close(&loop);
    if (rc != 0)
        log_warn("loop closed with handles open", "err=%s", uv_strerror(rc));
    log_info("isoprofd stopped", "");
    isoprof_free(a);
    return 0;

fail_loop:
    isoprof_free(a);
    return rc;
}

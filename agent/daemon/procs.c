/*
 * procs.c - host process discovery (discovery.processes; see daemon.h).
 *
 * Every discovery.interval one thread-pool job runs procscan_run over
 * /proc (or $ISOPROFD_PROC, see PROCS_ROOT_ENV); its result comes back
 * to the loop, which owns everything else:
 *   - each loopback listener of a matching process that is neither a
 *     configured target's port (the config wins) nor known not to be an
 *     inspector becomes a found endpoint (discover_found_add), probed with
 *     /json/version: an inspector is then polled and profiled like a
 *     configured one; anything else is remembered as not one for the life
 *     of its process (procs_not_inspector) and never asked again;
 *   - found endpoints whose process or listener is gone are dropped;
 *   - configured endpoints learn the pid and container behind their port;
 *   - with activate, a Node process that opted in (--inspect-port on its
 *     command line or in NODE_OPTIONS, a loopback host), catches SIGUSR1
 *     and has no inspector open gets one SIGUSR1, through a pidfd opened
 *     and checked against the start time the scan saw, so a pid reused in
 *     between is never signalled. A rescan follows shortly, to find the
 *     port the inspector opened.
 *   - with version_from, each process's version (appversion.h) is looked
 *     for by the first scan that sees it and kept for its life (later
 *     scans are told it is settled); its endpoints take it, and their
 *     targets whose config names no version are relabelled with it.
 * A process is known by (pid, start time); what the loop remembers of
 * processes (ports that are not inspectors, the signal sent, what was
 * logged) lives in one array rebuilt from each scan, so it is bounded by
 * PROCSCAN_MAX_PROCS and forgets the processes that exited.
 */
#include "procs.h"
#include "daemon.h"
#include "discover.h"
#include "log.h"
#include "target.h"

#include "base.h"

#include <ctype.h>
#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The kernel's: the start time checked before a SIGUSR1 is always read
 * here, whatever directory the scan reads. */
#define PROCS_ROOT "/proc"
/* A directory scanned instead of /proc ($ISOPROFD_PROC), laid out as
 * /proc: a test makes one that holds only its own processes (symlinks to
 * /proc/PID, and net and self), so a scan never sees the host's. */
#define PROCS_ROOT_ENV "ISOPROFD_PROC"
/* After a SIGUSR1, the next scan comes this soon (Node opens the port in
 * a few ms). */
#define PROCS_RESCAN_MS 300
/* Scans after a SIGUSR1 before "no inspector opened" is said. */
#define PROCS_SIGNAL_GRACE 3

/* What is remembered of one process between scans. */
struct proc_rec {
    uint32_t pid;
    uint64_t start_ticks;
    uint16_t not_insp[PROCSCAN_MAX_PORTS]; /* loopback ports probed: not inspectors */
    unsigned n_not;
    unsigned signalled; /* scans since SIGUSR1 was sent, + 1 (0: never sent) */
    unsigned logged;    /* REC_LOGGED_* said once */
    /* Its version (version_from), looked for once in its life: the code
     * a process runs does not change when its files do. */
    int version_done;
    char version[STORE_VERSION_MAX + 1]; /* cleaned as a label; "" none */
    char version_source[136];
};
enum {
    REC_LOGGED_REFUSED = 1u << 0,
    REC_LOGGED_DENIED = 1u << 1,
    REC_LOGGED_NETNS = 1u << 2,
    REC_LOGGED_NO_INSPECTOR = 1u << 3,
    REC_LOGGED_SIGNAL_FAILED = 1u << 4,
    REC_LOGGED_NO_HANDLER = 1u << 5,
};

struct procs {
    struct agent *a;
    char *root; /* the directory scanned: /proc, or $ISOPROFD_PROC */
    uv_timer_t timer;
    uv_work_t work;
    int working;  /* a scan is in the thread pool */
    int stopping; /* procs_stop ran: free once the timer closed and no scan runs */
    int timer_closed;
    /* The job's input (copied at queue time) and output. */
    const char **exe;
    size_t nexe;
    uint32_t *uids;
    size_t nuids;
    int users_none; /* users listed, none resolved: nothing matches */
    uint32_t self_pid;
    const char **vfrom; /* discovery.processes.version_from's strings */
    size_t nvfrom;
    struct procscan_key *settled; /* processes whose version is settled */
    size_t nsettled;
    uint64_t vfrom_hash; /* of the version_from the recs' versions came from */
    struct procscan_result res;
    int rc;
    char why[200];
    /* Between scans (loop thread). */
    struct proc_rec *recs;
    size_t nrecs;
    /* Figures for /status. */
    uint64_t scans, scans_failed, cpu_ns_total, cpu_ns_last, signalled, refused;
    size_t matched, entries;
    int last_err_logged;
};

static void procs_schedule(struct procs *p, uint64_t ms);

static const struct cfg *cur(const struct procs *p)
{
    return p->a->cfg;
}

/* discovery.processes.users as uids: numbers as they are, names through
 * the password database (at start and at each reload, never per scan). */
static int procs_users(struct procs *p)
{
    const struct cfg_strlist *u = &cur(p)->discovery.processes.users;
    isoprof_free(p->uids);
    p->uids = NULL;
    p->nuids = 0;
    p->users_none = 0;
    if (u->n == 0)
        return 0;
    p->uids = isoprof_calloc(u->n, sizeof(*p->uids));
    if (p->uids == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < u->n; i++) {
        const char *name = u->v[i];
        char *end;
        errno = 0;
        unsigned long v = strtoul(name, &end, 10);
        if (isdigit((unsigned char)name[0]) && *end == '\0' && errno == 0 && v <= UINT32_MAX) {
            p->uids[p->nuids++] = (uint32_t)v;
            continue;
        }
        struct passwd pw, *res = NULL;
        char buf[4096];
        int rc = getpwnam_r(name, &pw, buf, sizeof(buf), &res);
        if (rc != 0 || res == NULL) {
            log_warn("discovery.processes.users: no such user, ignored", "user=%s", name);
            continue;
        }
        p->uids[p->nuids++] = (uint32_t)pw.pw_uid;
    }
    p->users_none = p->nuids == 0;
    if (p->users_none)
        log_warn("discovery.processes.users names no known user: no process is watched", "");
    return 0;
}

static void procs_work(uv_work_t *w)
{
    struct procs *p = container_of(w, struct procs, work);
    struct procscan_filter f = {
        .exe = p->exe,
        .nexe = p->nexe,
        .uids = p->uids,
        .nuids = p->nuids,
        .self_pid = p->self_pid,
        .version_from = p->vfrom,
        .nversion = p->nvfrom,
        .settled = p->settled,
        .nsettled = p->nsettled,
    };
    p->rc = procscan_run(p->root, &f, &p->res, p->why, sizeof(p->why));
}

static struct proc_rec *rec_find(struct proc_rec *r, size_t n, uint32_t pid, uint64_t start)
{
    /* Both arrays ascend by pid: a binary search. */
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r[mid].pid < pid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && r[lo].pid == pid && r[lo].start_ticks == start ? &r[lo] : NULL;
}

static int rec_not_insp(const struct proc_rec *r, uint16_t port)
{
    for (unsigned i = 0; i < r->n_not; i++)
        if (r->not_insp[i] == port)
            return 1;
    return 0;
}

void procs_not_inspector(struct endpoint *ep)
{
    struct procs *p = ep->a->procs;
    if (p == NULL)
        return;
    struct proc_rec *r = rec_find(p->recs, p->nrecs, ep->pid, ep->start_ticks);
    if (r != NULL && r->n_not < PROCSCAN_MAX_PORTS && !rec_not_insp(r, ep->own.port))
        r->not_insp[r->n_not++] = ep->own.port;
}

static int loopback_host(const char *h)
{
    return strncmp(h, "127.", 4) == 0 || strcmp(h, "localhost") == 0 || strcmp(h, "::1") == 0;
}

static struct endpoint *configured_on(struct agent *a, uint16_t port)
{
    for (struct endpoint *ep = a->endpoints; ep; ep = ep->next)
        if (ep->cfg->port == port && loopback_host(ep->cfg->host))
            return ep;
    return NULL;
}

static struct endpoint *found_on(struct agent *a, const struct procscan_proc *pr, uint16_t port)
{
    for (struct endpoint *ep = a->found_endpoints; ep; ep = ep->next)
        if (ep->pid == pr->pid && ep->start_ticks == pr->start_ticks && ep->own.port == port)
            return ep;
    return NULL;
}

/* SIGUSR1 to the process the scan saw as pr, and to no other: a pidfd
 * pins the pid, then the start time proves it is the same process. */
static int procs_signal(const struct procscan_proc *pr)
{
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
    int fd = (int)syscall(SYS_pidfd_open, (pid_t)pr->pid, 0);
    if (fd < 0 && errno != ENOSYS)
        return -errno;
    uint64_t start = 0;
    int rc = procscan_start_ticks(PROCS_ROOT, pr->pid, &start);
    if (rc == 0 && start != pr->start_ticks)
        rc = -ESRCH; /* the pid names another process now */
    if (rc == 0) {
        if (fd >= 0)
            rc = syscall(SYS_pidfd_send_signal, fd, SIGUSR1, NULL, 0) == 0 ? 0 : -errno;
        else
            rc = kill((pid_t)pr->pid, SIGUSR1) == 0 ? 0 : -errno; /* a kernel before 5.3 */
    }
    if (fd >= 0)
        close(fd);
    return rc;
#else
    uint64_t start = 0;
    int rc = procscan_start_ticks(PROCS_ROOT, pr->pid, &start);
    if (rc == 0 && start != pr->start_ticks)
        rc = -ESRCH;
    if (rc == 0)
        rc = kill((pid_t)pr->pid, SIGUSR1) == 0 ? 0 : -errno;
    return rc;
#endif
}

/* Whether to open pr's inspector, and do it. has_inspector: a configured
 * or found endpoint is on one of its ports (or being probed). */
static void procs_activate(struct procs *p, const struct procscan_proc *pr, struct proc_rec *r,
                           int has_inspector)
{
    struct agent *a = p->a;
    if (r->signalled) {
        if (has_inspector)
            return;
        if (++r->signalled > PROCS_SIGNAL_GRACE + 1 && !(r->logged & REC_LOGGED_NO_INSPECTOR)) {
            r->logged |= REC_LOGGED_NO_INSPECTOR;
            log_warn("SIGUSR1 sent but no inspector opened", "pid=%u exe=%s inspect_port=%s",
                     (unsigned)pr->pid, pr->exe, pr->optin);
        }
        return;
    }
    if (!cur(p)->discovery.processes.activate || has_inspector ||
        (pr->flags & (PROCSCAN_INSPECT | PROCSCAN_OTHER_NETNS)))
        return;
    if (pr->flags & PROCSCAN_OPTIN_REFUSED) {
        if (!(r->logged & REC_LOGGED_REFUSED)) {
            r->logged |= REC_LOGGED_REFUSED;
            p->refused++;
            log_warn("not activated: --inspect-port does not name a loopback address",
                     "pid=%u exe=%s inspect_port=%s", (unsigned)pr->pid, pr->exe, pr->optin);
        }
        return;
    }
    if (!(pr->flags & PROCSCAN_OPTIN))
        return; /* no opt-in: never signalled */
    if (!(pr->flags & PROCSCAN_NODE) || !(pr->flags & PROCSCAN_SIGUSR1) ||
        (pr->flags & PROCSCAN_NO_SIGUSR1)) {
        /* SIGUSR1's default action would kill it. */
        if (!(r->logged & REC_LOGGED_NO_HANDLER)) {
            r->logged |= REC_LOGGED_NO_HANDLER;
            p->refused++;
            log_warn("not activated: not a Node binary that handles SIGUSR1",
                     "pid=%u exe=%s why=%s", (unsigned)pr->pid, pr->exe,
                     !(pr->flags & PROCSCAN_NODE)      ? "executable name"
                     : pr->flags & PROCSCAN_NO_SIGUSR1 ? "--disable-sigusr1"
                                                       : "SIGUSR1 not caught");
        }
        return;
    }
    int rc = procs_signal(pr);
    if (rc != 0) {
        if (!(r->logged & REC_LOGGED_SIGNAL_FAILED)) {
            r->logged |= REC_LOGGED_SIGNAL_FAILED;
            log_warn("SIGUSR1 failed", "pid=%u exe=%s err=%e%s", (unsigned)pr->pid, pr->exe, rc,
                     rc == -EPERM ? " (another user's process: the agent needs CAP_KILL)" : "");
        }
        r->signalled = rc == -ESRCH ? 0 : 1;
        return;
    }
    r->signalled = 1;
    p->signalled++;
    a->n.processes_activated++;
    log_info("inspector opened with SIGUSR1", "pid=%u exe=%s inspect_port=%s container=%s",
             (unsigned)pr->pid, pr->exe, pr->optin, pr->container);
    procs_schedule(p, PROCS_RESCAN_MS);
}

/* What the scan's look for pr's version gave: kept in r for the life of
 * the process, and said once. */
static void procs_version_found(struct procs *p, const struct procscan_proc *pr, struct proc_rec *r)
{
    const struct appver *v = &pr->version;
    r->version_done = 1;
    if (v->why[0])
        log_warn("version source failed", "pid=%u exe=%s why=%s", (unsigned)pr->pid, pr->exe,
                 v->why);
    if (v->version[0] == '\0') {
        log_info("no version found: its windows stay version unknown", "pid=%u exe=%s sources=%U",
                 (unsigned)pr->pid, pr->exe, (uint64_t)p->nvfrom);
        return;
    }
    char *clean = target_label_dup(v->version, strlen(v->version));
    if (clean == NULL) {
        r->version_done = 0; /* looked for again at the next scan */
        log_error("out of memory keeping a found version", "pid=%u", (unsigned)pr->pid);
        return;
    }
    snprintf(r->version, sizeof(r->version), "%s", clean);
    snprintf(r->version_source, sizeof(r->version_source), "%s", v->source);
    isoprof_free(clean);
    log_info("version found", "pid=%u exe=%s version=%s source=%s file=%s", (unsigned)pr->pid,
             pr->exe, r->version, r->version_source, v->file[0] ? v->file : "-");
}

/* ep's process is r's (NULL: none): its version, and its targets
 * relabelled when that changed. */
static void procs_version_set(struct endpoint *ep, const struct proc_rec *r)
{
    ep->seen = 1;
    const char *v = r ? r->version : "", *src = r ? r->version_source : "";
    if (strcmp(ep->version, v) == 0 && strcmp(ep->version_source, src) == 0)
        return;
    snprintf(ep->version, sizeof(ep->version), "%s", v);
    snprintf(ep->version_source, sizeof(ep->version_source), "%s", src);
    if (target_version_changed(ep) != 0)
        log_error("out of memory relabelling a target", "inspector=%s", ep->cfg->inspector);
}

static void procs_apply(struct procs *p)
{
    struct agent *a = p->a;
    struct procscan_result *res = &p->res;
    struct proc_rec *recs = res->n ? isoprof_calloc(res->n, sizeof(*recs)) : NULL;
    if (res->n && recs == NULL) {
        log_error("out of memory applying a process scan", "");
        return;
    }
    for (struct endpoint *ep = a->found_endpoints; ep; ep = ep->next)
        ep->seen = 0;
    for (struct endpoint *ep = a->endpoints; ep; ep = ep->next) {
        ep->pid = 0;
        ep->container[0] = '\0';
        ep->seen = 0;
    }
    for (size_t i = 0; i < res->n; i++) {
        const struct procscan_proc *pr = &res->p[i];
        struct proc_rec *old = rec_find(p->recs, p->nrecs, pr->pid, pr->start_ticks);
        struct proc_rec *r = &recs[i];
        if (old)
            *r = *old;
        else
            *r = (struct proc_rec){.pid = pr->pid, .start_ticks = pr->start_ticks};
        if ((pr->flags & PROCSCAN_FD_DENIED) && !(r->logged & REC_LOGGED_DENIED)) {
            r->logged |= REC_LOGGED_DENIED;
            log_warn("cannot read the process's sockets: the agent needs root or CAP_SYS_PTRACE",
                     "pid=%u exe=%s uid=%u", (unsigned)pr->pid, pr->exe, (unsigned)pr->uid);
        }
        if ((pr->flags & PROCSCAN_OTHER_NETNS) && !(r->logged & REC_LOGGED_NETNS)) {
            r->logged |= REC_LOGGED_NETNS;
            log_info("process in another network namespace: its loopback is not the agent's",
                     "pid=%u exe=%s container=%s", (unsigned)pr->pid, pr->exe, pr->container);
        }
        if ((pr->flags & PROCSCAN_VERSION_READ) && !r->version_done)
            procs_version_found(p, pr, r);
        int has_inspector = 0;
        for (unsigned k = 0; k < pr->nports; k++) {
            uint16_t port = pr->ports[k];
            struct endpoint *ep = configured_on(a, port);
            if (ep != NULL) {
                /* The config names this port: it wins; its windows get
                 * the process's pid. */
                ep->pid = pr->pid;
                memcpy(ep->container, pr->container, sizeof(ep->container));
                procs_version_set(ep, r);
                has_inspector = 1;
                continue;
            }
            if ((ep = found_on(a, pr, port)) != NULL) {
                ep->seen = 1;
                procs_version_set(ep, r);
                has_inspector = 1;
                continue;
            }
            if (rec_not_insp(r, port))
                continue;
            if ((ep = discover_found_add(a, port, pr)) == NULL) {
                log_error("out of memory adding a found endpoint", "pid=%u", (unsigned)pr->pid);
                continue;
            }
            procs_version_set(ep, r);
            log_debug("probing a listener", "pid=%u port=%u exe=%s", (unsigned)pr->pid,
                      (unsigned)port, pr->exe);
            has_inspector = 1; /* maybe: not signalled while its probe runs */
        }
        procs_activate(p, pr, r, has_inspector);
    }
    /* A configured endpoint whose process no scan matched now has no
     * version of its own. */
    for (struct endpoint *ep = a->endpoints; ep; ep = ep->next)
        if (!ep->seen)
            procs_version_set(ep, NULL);
    for (struct endpoint *ep = a->found_endpoints, *n; ep; ep = n) {
        n = ep->next;
        if (ep->seen)
            continue;
        const char *why = "listener closed";
        if (configured_on(a, ep->own.port))
            why = "a configured target names its port";
        else if (rec_find(recs, res->n, ep->pid, ep->start_ticks) == NULL)
            why = "process exited";
        discover_found_drop(ep, why);
    }
    isoprof_free(p->recs);
    p->recs = recs;
    p->nrecs = res->n;
    discover_found_sweep(a);
}

static void procs_free(struct procs *p)
{
    procscan_result_free(&p->res);
    isoprof_free(p->root);
    isoprof_free(p->exe);
    isoprof_free(p->vfrom);
    isoprof_free(p->settled);
    isoprof_free(p->uids);
    isoprof_free(p->recs);
    isoprof_free(p);
}

static void procs_after(uv_work_t *w, int status)
{
    struct procs *p = container_of(w, struct procs, work);
    struct agent *a = p->a;
    p->working = 0;
    if (p->stopping) {
        if (p->timer_closed)
            procs_free(p);
        else
            procscan_result_free(&p->res);
        return;
    }
    if (status != 0 || p->rc != 0) {
        p->scans_failed++;
        if (!p->last_err_logged)
            log_error("process scan failed", "err=%e why=%s", status ? status : p->rc, p->why);
        p->last_err_logged = 1;
    } else {
        p->last_err_logged = 0;
        p->scans++;
        a->n.process_scans++;
        p->cpu_ns_last = p->res.cpu_ns;
        p->cpu_ns_total += p->res.cpu_ns;
        p->matched = p->res.n;
        p->entries = p->res.entries;
        if (p->res.over)
            log_warn("more matching processes than one scan keeps", "kept=%U over=%U",
                     (uint64_t)p->res.n, (uint64_t)p->res.over);
        procs_apply(p);
        log_debug("process scan", "entries=%U matched=%U vanished=%U denied=%U cpu_us=%U",
                  (uint64_t)p->res.entries, (uint64_t)p->res.n, (uint64_t)p->res.vanished,
                  (uint64_t)p->res.denied, p->res.cpu_ns / 1000u);
    }
    procscan_result_free(&p->res);
    if (!uv_is_active((uv_handle_t *)&p->timer))
        procs_schedule(p, cur(p)->discovery.interval_ns / 1000000u);
}

static uint64_t vfrom_sum(const struct cfg_strlist *l)
{
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < l->n; i++)
        for (const char *c = l->v[i];; c++) {
            h = (h ^ (unsigned char)*c) * 1099511628211u;
            if (*c == '\0')
                break;
        }
    return h;
}

/* The scan's version input: version_from's strings (they live in a config
 * kept until exit, as the names' do) and the processes whose version is
 * settled. A version_from changed by a reload unsettles every one. */
static int procs_version_input(struct procs *p)
{
    const struct cfg_strlist *vf = &cur(p)->discovery.processes.version_from;
    uint64_t h = vfrom_sum(vf);
    if (h != p->vfrom_hash) {
        p->vfrom_hash = h;
        for (size_t i = 0; i < p->nrecs; i++) {
            p->recs[i].version_done = 0;
            p->recs[i].version[0] = '\0';
            p->recs[i].version_source[0] = '\0';
        }
    }
    p->nvfrom = 0;
    p->nsettled = 0;
    if (vf->n == 0)
        return 0;
    const char **v = isoprof_realloc(p->vfrom, vf->n * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    p->vfrom = v;
    for (size_t i = 0; i < vf->n; i++)
        v[i] = vf->v[i];
    p->nvfrom = vf->n;
    if (p->nrecs == 0)
        return 0;
    struct procscan_key *k = isoprof_realloc(p->settled, p->nrecs * sizeof(*k));
    if (k == NULL)
        return -ENOMEM;
    p->settled = k;
    for (size_t i = 0; i < p->nrecs; i++) /* recs ascend by pid */
        if (p->recs[i].version_done)
            k[p->nsettled++] = (struct procscan_key){p->recs[i].pid, p->recs[i].start_ticks};
    return 0;
}

static void procs_on_timer(uv_timer_t *t)
{
    struct procs *p = t->data;
    if (p->working || p->stopping || p->a->stopping)
        return;
    const struct cfg_strlist *x = &cur(p)->discovery.processes.executables;
    if (p->users_none) {
        procs_schedule(p, cur(p)->discovery.interval_ns / 1000000u);
        return;
    }
    /* The job reads its own copy of the names' pointers: the strings live
     * in a config that a reload keeps alive (retired_cfgs) until exit. */
    const char **exe = isoprof_realloc(p->exe, (x->n ? x->n : 1) * sizeof(*exe));
    if (exe == NULL) {
        log_error("out of memory starting a process scan", "");
        procs_schedule(p, cur(p)->discovery.interval_ns / 1000000u);
        return;
    }
    p->exe = exe;
    for (size_t i = 0; i < x->n; i++)
        exe[i] = x->v[i];
    p->nexe = x->n;
    if (procs_version_input(p) != 0) {
        log_error("out of memory starting a process scan", "");
        procs_schedule(p, cur(p)->discovery.interval_ns / 1000000u);
        return;
    }
    int rc = uv_queue_work(p->a->loop, &p->work, procs_work, procs_after);
    if (rc != 0) {
        log_error("process scan not queued", "err=%s", uv_strerror(rc));
        procs_schedule(p, cur(p)->discovery.interval_ns / 1000000u);
        return;
    }
    p->working = 1;
}

static void procs_schedule(struct procs *p, uint64_t ms)
{
    if (p->stopping || p->a->stopping)
        return;
    uv_timer_start(&p->timer, procs_on_timer, ms, 0);
}

int procs_start(struct agent *a)
{
    if (!a->cfg->discovery.processes.enabled)
        return 0;
    struct procs *p = isoprof_calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    p->a = a;
    p->self_pid = (uint32_t)getpid();
    const char *root = getenv(PROCS_ROOT_ENV);
    p->root = isoprof_strdup(root != NULL && root[0] != '\0' ? root : PROCS_ROOT);
    if (p->root == NULL || procs_users(p) != 0) {
        isoprof_free(p->root);
        isoprof_free(p);
        return -ENOMEM;
    }
    uv_timer_init(a->loop, &p->timer);
    p->timer.data = p;
    a->procs = p;
    log_info("process discovery on", "interval_ms=%U activate=%d users=%U root=%s",
             a->cfg->discovery.interval_ns / 1000000u, a->cfg->discovery.processes.activate,
             (uint64_t)a->cfg->discovery.processes.users.n, p->root);
    procs_schedule(p, 0);
    return 0;
}

static void procs_on_close(uv_handle_t *h)
{
    struct procs *p = h->data;
    p->timer_closed = 1;
    if (!p->working)
        procs_free(p);
}

void procs_stop(struct agent *a)
{
    struct procs *p = a->procs;
    if (p == NULL)
        return;
    a->procs = NULL;
    p->stopping = 1;
    uv_close((uv_handle_t *)&p->timer, procs_on_close);
}

void procs_reload(struct agent *a)
{
    int on = a->cfg->discovery.processes.enabled;
    if (!on && a->procs) {
        log_info("process discovery off", "");
        procs_stop(a);
        while (a->found_endpoints)
            discover_found_drop(a->found_endpoints, "discovery.processes turned off");
        for (struct endpoint *ep = a->endpoints; ep; ep = ep->next) {
            ep->pid = 0;
            ep->container[0] = '\0';
            procs_version_set(ep, NULL);
        }
        return;
    }
    if (on && a->procs == NULL) {
        if (procs_start(a) != 0)
            log_error("reload: out of memory starting process discovery", "");
        return;
    }
    if (on && procs_users(a->procs) != 0)
        log_error("reload: out of memory reading discovery.processes.users", "");
    /* A configured target may now name a found endpoint's port: the next
     * scan drops it. Rescan now rather than an interval later. */
    if (on && !a->procs->working)
        procs_schedule(a->procs, 0);
}

int procs_status(struct agent *a, struct isoprof_buf *b)
{
    const struct procs *p = a->procs;
    size_t found = 0;
    for (const struct endpoint *ep = a->found_endpoints; ep; ep = ep->next)
        found += ep->ever_reachable;
    if (p == NULL)
        return isoprof_buf_printf(b, "{\"enabled\":false,\"found_endpoints\":%zu}", found);
    return isoprof_buf_printf(
        b,
        "{\"enabled\":true,\"activate\":%s,\"scans\":%llu,\"scans_failed\":%llu,"
        "\"processes\":%zu,\"proc_entries\":%zu,\"found_endpoints\":%zu,\"activated\":%llu,"
        "\"refused\":%llu,\"last_scan_cpu_us\":%llu,\"scan_cpu_us_total\":%llu}",
        a->cfg->discovery.processes.activate ? "true" : "false", (unsigned long long)p->scans,
        (unsigned long long)p->scans_failed, p->matched, p->entries, found,
        (unsigned long long)p->signalled, (unsigned long long)p->refused,
        (unsigned long long)(p->cpu_ns_last / 1000u),
        (unsigned long long)(p->cpu_ns_total / 1000u));
}

/*
 * discover.c - polls each configured inspector endpoint for its targets.
 *
 * Per endpoint: GET /json/version once (names the runtime), then
 * GET /json/list every discovery.interval. The list is validated entry by
 * entry and handed to target_sync(), which attaches new targets and
 * detaches vanished ones. An endpoint that refuses, times out or answers
 * garbage is retried with capped exponential backoff, and its targets
 * without a session up are detached; an attached one keeps its session (a
 * poll times out on a busy machine; a target that is gone closes its
 * session, and is detached at the next failed or answered poll), and one
 * waiting out an eviction its backoff (target_endpoint_down). Only the
 * path of webSocketDebuggerUrl is used: the agent always connects to the
 * endpoint the config names, never to a host a target advertises.
 */
#include "discover.h"
#include "daemon.h"
#include "log.h"
#include "procs.h"
#include "target.h"
#include "threads.h"

#include "base.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <yajl/yajl_parse.h>

#define DISCOVER_MAX_BODY (4u << 20)
/* /json/list is an array of flat objects, /json/version one object. */
#define DISCOVER_MAX_NESTING 8
/* Bytes kept of a listed target's id, URL, title and url. */
#define DISCOVER_MAX_TEXT 1024
#define DISCOVER_TIMEOUT_MS 3000
#define DISCOVER_BACKOFF_MIN_MS 500
#define DISCOVER_BACKOFF_MAX_MS 30000
#define DISCOVER_MAX_ID 256
#define DISCOVER_MAX_PATH 512
/* A found endpoint's settings: the option table's defaults of a target. */
#define DISCOVER_FOUND_MEMORY_LIMIT CFG_SIZE_AUTO
#define DISCOVER_FOUND_THREADS_MAX 64

static void ep_poll(struct endpoint *ep);

static void ep_on_timer(uv_timer_t *t)
{
    struct endpoint *ep = container_of(t, struct endpoint, timer);
    ep_poll(ep);
}

static void ep_after(struct endpoint *ep, uint64_t ms)
{
    if (ep->a->stopping)
        return;
    uv_timer_start(&ep->timer, ep_on_timer, ms, 0);
}

static void ep_failed(struct endpoint *ep, const char *what, int err, const char *why)
{
    if (ep->found && !ep->ever_reachable) {
        /* A listener of a found process that is not an inspector (the
         * app's own port, one that is slow to answer). */
        log_debug("listener is not an inspector", "inspector=%s pid=%u step=%s why=%s",
                  ep->cfg->inspector, (unsigned)ep->pid, what, why ? why : isoprof_strerror(err));
        /* It answered, and not as an inspector: never asked again. A
         * connection that failed or timed out is asked again next scan. */
        if (err == ISOPROF_EHTTP || err == ISOPROF_EJSON)
            procs_not_inspector(ep);
        discover_found_drop(ep, NULL);
        return;
    }
    ep->a->n.discovery_errors++;
    ep->failures++;
    if (ep->reachable || ep->failures == 1) {
        log_warn("endpoint unreachable", "inspector=%s step=%s err=%s why=%s", ep->cfg->inspector,
                 what, isoprof_strerror(err), why ? why : "");
    } else {
        log_debug("endpoint still unreachable", "inspector=%s step=%s why=%s failures=%d",
                  ep->cfg->inspector, what, why ? why : "", ep->failures);
    }
    int was_reachable = ep->reachable;
    ep->reachable = 0;
    isoprof_free(ep->runtime);
    ep->runtime = NULL;
    size_t kept = target_endpoint_down(ep);
    if (kept > 0 && was_reachable)
        log_info("targets kept while the endpoint is unreachable", "inspector=%s targets=%U",
                 ep->cfg->inspector, (uint64_t)kept);
    if (ep->backoff_ms == 0)
        ep->backoff_ms = DISCOVER_BACKOFF_MIN_MS;
    uint64_t delay = ep->backoff_ms;
    /* Full jitter on the upper half, so many agents do not retry in step. */
    delay = delay / 2 + (uint64_t)(isoprof_rng_unit(&ep->a->rng) * (double)(delay / 2));
    ep->backoff_ms *= 2;
    if (ep->backoff_ms > DISCOVER_BACKOFF_MAX_MS)
        ep->backoff_ms = DISCOVER_BACKOFF_MAX_MS;
    ep_after(ep, delay);
}

static const char *runtime_from_browser(const char *b)
{
    if (strncmp(b, "node.js", 7) == 0 || strncmp(b, "Node", 4) == 0)
        return "node";
    if (strncmp(b, "Deno", 4) == 0 || strncmp(b, "deno", 4) == 0)
        return "deno";
    if (strncmp(b, "workerd", 7) == 0)
        return "workerd";
    return "v8";
}

/* The poll's answer came: 1 if it is a 200 to parse, else 0 (the failure
 * is handled). */
static int ep_answered(struct endpoint *ep, const char *step, int status, long code,
                       const char *why)
{
    ep->inflight = NULL;
    if (status != 0) {
        ep_failed(ep, step, status, why);
        return 0;
    }
    if (code != 200) {
        ep_failed(ep, step, ISOPROF_EHTTP, "status is not 200");
        return 0;
    }
    return 1;
}

static void ep_on_version(int status, long code, const char *body, size_t len, const char *why,
                          void *arg)
{
    struct endpoint *ep = arg;
    if (!ep_answered(ep, "json/version", status, code, why))
        return;
    char reason[160];
    const char *rt = discover_parse_version(body, len, reason, sizeof(reason));
    if (rt == NULL) {
        ep_failed(ep, "json/version", ISOPROF_EJSON, reason);
        return;
    }
    ep->runtime = isoprof_strdup(rt);
    if (ep->runtime == NULL) {
        ep_failed(ep, "json/version", -ENOMEM, NULL);
        return;
    }
    if (ep->found && !ep->ever_reachable)
        log_info("inspector found on the host", "inspector=%s pid=%u runtime=%s container=%s",
                 ep->cfg->inspector, (unsigned)ep->pid, rt, ep->container);
    ep->ever_reachable = 1;
    ep_poll(ep);
}

/* The path of ws://host:port/path, validated; NULL when unusable. */
static const char *ws_path_of(const char *url)
{
    const char *p;
    if (strncmp(url, "ws://", 5) == 0)
        p = url + 5;
    else
        return NULL;
    p = strchr(p, '/');
    if (p == NULL || strlen(p) > DISCOVER_MAX_PATH)
        return NULL;
    for (const char *q = p; *q; q++) {
        if ((unsigned char)*q <= ' ' || (unsigned char)*q >= 0x7f)
            return NULL;
    }
    return p;
}

/*
 * /json/list and /json/version are parsed as they stream through yajl's
 * callbacks, never into a tree: a body of 4 MiB of "[0,0,0,..." would be
 * two million tree nodes (some 170 MiB), and yajl frees a tree recursively.
 * What is kept is the usable entries' four strings, each cut at
 * DISCOVER_MAX_TEXT, for at most `max` entries.
 */
enum lkey { LK_NONE, LK_ID, LK_WS, LK_TITLE, LK_URL, LK_N };

struct lparse {
    struct discover_list *l;
    size_t max;
    int seen_array, not_array;
    unsigned depth; /* 1: in the list, 2: in an entry, deeper: in an entry's value */
    enum lkey key;  /* the entry's key whose value comes next */
    char *f[LK_N];  /* the entry's strings so far (LK_ID..LK_URL) */
    int nomem;
};

static void lp_clear(struct lparse *p)
{
    for (int k = 0; k < LK_N; k++) {
        isoprof_free(p->f[k]);
        p->f[k] = NULL;
    }
}

/* The entry that just closed: kept if usable and under the cap. */
static void lp_entry(struct lparse *p)
{
    struct discover_list *l = p->l;
    const char *id = p->f[LK_ID], *ws = p->f[LK_WS];
    const char *path = ws ? ws_path_of(ws) : NULL;
    if (id == NULL || path == NULL || *id == '\0' || strlen(id) > DISCOVER_MAX_ID) {
        l->skipped++;
    } else if (l->n == p->max) {
        l->over++; /* usable, but past the cap */
    } else {
        struct discovered *d = &l->d[l->n++];
        d->id = p->f[LK_ID];
        d->path = path; /* inside f[LK_WS], which the list now owns */
        d->title = p->f[LK_TITLE];
        d->url = p->f[LK_URL];
        l->own[4 * (l->n - 1) + 0] = p->f[LK_ID];
        l->own[4 * (l->n - 1) + 1] = p->f[LK_WS];
        l->own[4 * (l->n - 1) + 2] = p->f[LK_TITLE];
        l->own[4 * (l->n - 1) + 3] = p->f[LK_URL];
        memset(p->f, 0, sizeof(p->f));
    }
    lp_clear(p);
}

static int lp_scalar(struct lparse *p)
{
    if (p->depth == 0) {
        p->not_array = 1;
        return 0;
    }
    if (p->depth == 1) {
        p->l->listed++;
        p->l->skipped++; /* an entry that is not an object */
    }
    p->key = LK_NONE;
    return 1;
}

static int lp_null(void *c)
{
    return lp_scalar(c);
}

static int lp_bool(void *c, int v)
{
    (void)v;
    return lp_scalar(c);
}

static int lp_number(void *c, const char *s, size_t n)
{
    (void)s;
    (void)n;
    return lp_scalar(c);
}

static int lp_string(void *c, const unsigned char *s, size_t n)
{
    struct lparse *p = c;
    if (p->depth == 2 && p->key != LK_NONE) {
        /* A string with a NUL in it is no id or path: cut there. */
        size_t keep = strnlen((const char *)s, n < DISCOVER_MAX_TEXT ? n : DISCOVER_MAX_TEXT);
        char *v = isoprof_strndup((const char *)s, keep);
        if (v == NULL) {
            p->nomem = 1;
            return 0;
        }
        isoprof_free(p->f[p->key]);
        p->f[p->key] = v;
    }
    return lp_scalar(p);
}

static int lp_map_key(void *c, const unsigned char *s, size_t n)
{
    static const char *const names[LK_N] = {NULL, "id", "webSocketDebuggerUrl", "title", "url"};
    struct lparse *p = c;
    p->key = LK_NONE;
    if (p->depth != 2)
        return 1;
    for (int k = LK_ID; k < LK_N; k++)
        if (strlen(names[k]) == n && memcmp(names[k], s, n) == 0)
            p->key = (enum lkey)k;
    return 1;
}

static int lp_start(struct lparse *p, int is_map)
{
    if (p->depth == 0) {
        if (is_map || p->seen_array) {
            p->not_array = 1;
            return 0;
        }
        p->seen_array = 1;
    }
    if (p->depth == 1) {
        p->l->listed++;
        if (!is_map)
            p->l->skipped++;
    }
    p->depth++;
    p->key = LK_NONE;
    return 1;
}

static int lp_start_map(void *c)
{
    return lp_start(c, 1);
}

static int lp_start_array(void *c)
{
    return lp_start(c, 0);
}

static int lp_end_map(void *c)
{
    struct lparse *p = c;
    if (--p->depth == 1)
        lp_entry(p);
    p->key = LK_NONE;
    return !p->nomem;
}

static int lp_end_array(void *c)
{
    struct lparse *p = c;
    p->depth--;
    p->key = LK_NONE;
    return 1;
}

static const yajl_callbacks lp_callbacks = {
    .yajl_null = lp_null,
    .yajl_boolean = lp_bool,
    .yajl_number = lp_number,
    .yajl_string = lp_string,
    .yajl_start_map = lp_start_map,
    .yajl_map_key = lp_map_key,
    .yajl_end_map = lp_end_map,
    .yajl_start_array = lp_start_array,
    .yajl_end_array = lp_end_array,
};

/* Runs yajl's callback parser over body with ctx; 0 or the error in why. */
static int stream_json(const yajl_callbacks *cb, void *ctx, const char *body, size_t len,
                       int *nomem, char *why, size_t cap)
{
    if (isoprof_json_depth(body, len, DISCOVER_MAX_NESTING) > DISCOVER_MAX_NESTING) {
        snprintf(why, cap, "nested deeper than %d levels", DISCOVER_MAX_NESTING);
        return ISOPROF_EJSON;
    }
    yajl_handle h = yajl_alloc(cb, NULL, ctx);
    if (h == NULL) {
        snprintf(why, cap, "out of memory");
        return -ENOMEM;
    }
    yajl_status st = yajl_parse(h, (const unsigned char *)body, len);
    if (st == yajl_status_ok)
        st = yajl_complete_parse(h);
    int rc = 0;
    if (*nomem) {
        snprintf(why, cap, "out of memory");
        rc = -ENOMEM;
    } else if (st != yajl_status_ok) {
        unsigned char *m = yajl_get_error(h, 0, (const unsigned char *)body, len);
        const char *text = m ? (const char *)m : "malformed JSON";
        size_t n = strcspn(text, "\n");
        snprintf(why, cap, "%.*s", (int)n, text);
        if (m)
            yajl_free_error(h, m);
        rc = ISOPROF_EJSON;
    }
    yajl_free(h);
    return rc;
}

void discover_list_free(struct discover_list *l)
{
    for (size_t i = 0; l->own && i < 4 * l->n; i++)
        isoprof_free(l->own[i]);
    isoprof_free(l->own);
    isoprof_free(l->d);
    memset(l, 0, sizeof(*l));
}

int discover_parse_list(const char *body, size_t len, size_t max, struct discover_list *l,
                        char *why, size_t cap)
{
    memset(l, 0, sizeof(*l));
    l->d = isoprof_calloc(max ? max : 1, sizeof(*l->d));
    l->own = isoprof_calloc(4 * (max ? max : 1), sizeof(*l->own));
    if (l->d == NULL || l->own == NULL) {
        discover_list_free(l);
        snprintf(why, cap, "out of memory");
        return -ENOMEM;
    }
    struct lparse p = {.l = l, .max = max};
    int rc = stream_json(&lp_callbacks, &p, body, len, &p.nomem, why, cap);
    lp_clear(&p);
    if (rc != -ENOMEM && (p.not_array || (rc == 0 && !p.seen_array))) {
        snprintf(why, cap, "not an array");
        rc = ISOPROF_EJSON;
    }
    if (rc != 0)
        discover_list_free(l);
    return rc;
}

/* /json/version: the Browser string at the top level. */
struct vparse {
    unsigned depth;
    int want;
    char browser[64];
    int found;
};

static int vp_other(void *c)
{
    ((struct vparse *)c)->want = 0;
    return 1;
}

static int vp_bool(void *c, int v)
{
    (void)v;
    return vp_other(c);
}

static int vp_number(void *c, const char *s, size_t n)
{
    (void)s;
    (void)n;
    return vp_other(c);
}

static int vp_string(void *c, const unsigned char *s, size_t n)
{
    struct vparse *p = c;
    if (p->want && p->depth == 1) {
        size_t keep = n < sizeof(p->browser) - 1 ? n : sizeof(p->browser) - 1;
        memcpy(p->browser, s, keep);
        p->browser[keep] = '\0';
        p->found = 1;
    }
    p->want = 0;
    return 1;
}

static int vp_map_key(void *c, const unsigned char *s, size_t n)
{
    struct vparse *p = c;
    p->want = p->depth == 1 && n == 7 && memcmp(s, "Browser", 7) == 0;
    return 1;
}

static int vp_start(void *c)
{
    struct vparse *p = c;
    p->depth++;
    p->want = 0;
    return 1;
}

static int vp_end(void *c)
{
    struct vparse *p = c;
    p->depth--;
    p->want = 0;
    return 1;
}

static const yajl_callbacks vp_callbacks = {
    .yajl_null = vp_other,
    .yajl_boolean = vp_bool,
    .yajl_number = vp_number,
    .yajl_string = vp_string,
    .yajl_start_map = vp_start,
    .yajl_map_key = vp_map_key,
    .yajl_end_map = vp_end,
    .yajl_start_array = vp_start,
    .yajl_end_array = vp_end,
};

const char *discover_parse_version(const char *body, size_t len, char *why, size_t cap)
{
    struct vparse p = {0};
    int nomem = 0;
    if (stream_json(&vp_callbacks, &p, body, len, &nomem, why, cap) != 0)
        return NULL;
    if (!p.found) {
        snprintf(why, cap, "no Browser field");
        return NULL;
    }
    return runtime_from_browser(p.browser);
}

static void ep_on_list(int status, long code, const char *body, size_t len, const char *why,
                       void *arg)
{
    struct endpoint *ep = arg;
    if (!ep_answered(ep, "json/list", status, code, why))
        return;
    struct discover_list l;
    char reason[160];
    int rc =
        discover_parse_list(body, len, AGENT_MAX_TARGETS_PER_ENDPOINT, &l, reason, sizeof(reason));
    if (rc != 0) {
        ep_failed(ep, "json/list", rc, reason);
        return;
    }
    /* Each said when its figure changes, not at every poll. */
    if (l.skipped != ep->last_skipped && l.skipped)
        log_warn("unusable targets in json/list", "inspector=%s skipped=%U", ep->cfg->inspector,
                 (uint64_t)l.skipped);
    ep->last_skipped = l.skipped;
    if (l.over != ep->last_over && l.over)
        log_warn("targets over the cap ignored", "inspector=%s listed=%U cap=%U ignored=%U",
                 ep->cfg->inspector, (uint64_t)l.listed, (uint64_t)AGENT_MAX_TARGETS_PER_ENDPOINT,
                 (uint64_t)l.over);
    ep->last_over = l.over;
    if (!ep->reachable)
        log_info("endpoint reachable", "inspector=%s runtime=%s targets=%U", ep->cfg->inspector,
                 ep->runtime, (uint64_t)l.n);
    ep->reachable = 1;
    ep->failures = 0;
    ep->backoff_ms = 0;
    target_sync(ep, l.d, l.n);
    discover_list_free(&l);
    ep_after(ep, ep->a->cfg->discovery.interval_ns / 1000000u);
}

static void ep_poll(struct endpoint *ep)
{
    if (ep->a->stopping || ep->inflight)
        return;
    const struct cfg_target *t = ep->cfg;
    int v6 = strchr(t->host, ':') != NULL;
    char url[600];
    snprintf(url, sizeof(url), "http://%s%s%s:%u/json/%s", v6 ? "[" : "", t->host, v6 ? "]" : "",
             (unsigned)t->port, ep->runtime ? "list" : "version");
    int rc = http_get(ep->a->http, url, DISCOVER_MAX_BODY, DISCOVER_TIMEOUT_MS,
                      ep->runtime ? ep_on_list : ep_on_version, ep, &ep->inflight);
    if (rc != 0)
        ep_failed(ep, "request", rc, NULL);
}

/* A new endpoint for target cfg tc, polled at once; appended to *tail. */
static struct endpoint *ep_new(struct agent *a, const struct cfg_target *tc)
{
    struct endpoint *ep = isoprof_calloc(1, sizeof(*ep));
    if (ep == NULL)
        return NULL;
    ep->a = a;
    ep->cfg = tc;
    win_group_init(&ep->wins, &a->wins);
    uv_timer_init(a->loop, &ep->timer);
    uv_timer_start(&ep->timer, ep_on_timer, 0, 0);
    return ep;
}

int discover_start(struct agent *a)
{
    struct endpoint **tail = &a->endpoints;
    for (size_t i = 0; i < a->cfg->ntargets; i++) {
        struct endpoint *ep = ep_new(a, &a->cfg->targets[i]);
        if (ep == NULL)
            return -ENOMEM; /* the ones made are closed by discover_close */
        *tail = ep;
        tail = &ep->next;
    }
    return 0;
}

static void ep_stop(struct endpoint *ep)
{
    uv_timer_stop(&ep->timer);
    if (ep->inflight) {
        http_cancel(ep->inflight);
        ep->inflight = NULL;
    }
}

void discover_stop(struct agent *a)
{
    for (struct endpoint *ep = a->endpoints; ep; ep = ep->next)
        ep_stop(ep);
    for (struct endpoint *ep = a->found_endpoints; ep; ep = ep->next)
        ep_stop(ep);
}

static void ep_on_close(uv_handle_t *h)
{
    container_of((uv_timer_t *)h, struct endpoint, timer)->closed = 1;
}

void discover_close(struct agent *a)
{
    struct endpoint *lists[4] = {a->endpoints, a->retired_endpoints, a->found_endpoints,
                                 a->found_retired};
    for (int i = 0; i < 4; i++)
        for (struct endpoint *ep = lists[i]; ep; ep = ep->next)
            if (!uv_is_closing((uv_handle_t *)&ep->timer))
                uv_close((uv_handle_t *)&ep->timer, ep_on_close);
}

static void ep_free(struct endpoint *ep)
{
    win_group_free(&ep->wins);
    isoprof_free(ep->runtime);
    isoprof_free(ep);
}

void discover_free(struct agent *a)
{
    struct endpoint *lists[4] = {a->endpoints, a->retired_endpoints, a->found_endpoints,
                                 a->found_retired};
    for (int i = 0; i < 4; i++) {
        for (struct endpoint *ep = lists[i], *n; ep; ep = n) {
            n = ep->next;
            ep_free(ep);
        }
    }
    a->endpoints = a->retired_endpoints = a->found_endpoints = a->found_retired = NULL;
}

/* --- endpoints found on the host (procs.c) --- */

struct endpoint *discover_found_add(struct agent *a, uint16_t port, const struct procscan_proc *p)
{
    struct endpoint *ep = isoprof_calloc(1, sizeof(*ep));
    if (ep == NULL)
        return NULL;
    ep->a = a;
    ep->found = 1;
    win_group_init(&ep->wins, &a->wins);
    ep->pid = p->pid;
    ep->start_ticks = p->start_ticks;
    memcpy(ep->container, p->container, sizeof(ep->container));
    snprintf(ep->own_host, sizeof(ep->own_host), "127.0.0.1");
    snprintf(ep->own_inspector, sizeof(ep->own_inspector), "127.0.0.1:%u", (unsigned)port);
    /* A found process gets what an entry of targets: with only its
     * inspector would (the option table's defaults). */
    ep->own.inspector = ep->own_inspector;
    ep->own.host = ep->own_host;
    ep->own.port = port;
    ep->own.memory_limit = DISCOVER_FOUND_MEMORY_LIMIT;
    ep->own.threads.enabled = 1;
    ep->own.threads.memory_limit = DISCOVER_FOUND_MEMORY_LIMIT;
    ep->own.threads.max = DISCOVER_FOUND_THREADS_MAX;
    ep->cfg = &ep->own;
    ep->seen = 1;
    uv_timer_init(a->loop, &ep->timer);
    uv_timer_start(&ep->timer, ep_on_timer, 0, 0);
    ep->next = a->found_endpoints;
    a->found_endpoints = ep;
    return ep;
}

void discover_found_drop(struct endpoint *ep, const char *why)
{
    struct agent *a = ep->a;
    if (why)
        log_info("endpoint gone", "inspector=%s pid=%u why=%s", ep->cfg->inspector,
                 (unsigned)ep->pid, why);
    ep_stop(ep);
    for (struct target *t = a->targets, *tn; t; t = tn) {
        tn = t->next;
        if (t->ep == ep && !t->removing)
            target_remove(t);
    }
    for (struct endpoint **pp = &a->found_endpoints; *pp; pp = &(*pp)->next) {
        if (*pp == ep) {
            *pp = ep->next;
            break;
        }
    }
    uv_close((uv_handle_t *)&ep->timer, ep_on_close);
    ep->next = a->found_retired;
    a->found_retired = ep;
}

void discover_found_sweep(struct agent *a)
{
    for (struct endpoint **pp = &a->found_retired, *ep; (ep = *pp) != NULL;) {
        int held = !ep->closed;
        for (const struct target *t = a->targets; t && !held; t = t->next)
            held = t->ep == ep;
        if (held) {
            pp = &ep->next;
            continue;
        }
        *pp = ep->next;
        ep_free(ep);
    }
}

static int same_label(const char *x, const char *y)
{
    return (x == NULL && y == NULL) || (x != NULL && y != NULL && strcmp(x, y) == 0);
}

int discover_reload(struct agent *a, const struct cfg *next)
{
    for (struct endpoint *ep = a->endpoints; ep; ep = ep->next)
        ep->kept = 0;
    struct endpoint *head = NULL, **tail = &head;
    int rc = 0;
    for (size_t i = 0; i < next->ntargets; i++) {
        const struct cfg_target *tc = &next->targets[i];
        struct endpoint **pp = &a->endpoints, *ep;
        while ((ep = *pp) != NULL && (ep->kept || strcmp(ep->cfg->inspector, tc->inspector) != 0))
            pp = &ep->next;
        if (ep != NULL) {
            /* Still named: its sessions carry on. */
            *pp = ep->next;
            ep->kept = 1;
            int relabel = !same_label(ep->cfg->worker, tc->worker) ||
                          !same_label(ep->cfg->version, tc->version);
            ep->cfg = tc;
            for (struct target *t = a->targets; t; t = t->next)
                if (t->ep == ep && t->parent == NULL && !t->removing)
                    threads_reload(t); /* targets[].threads.enabled may have changed */
            for (struct target *t = a->targets; relabel && t; t = t->next) {
                if (t->ep != ep || t->removing)
                    continue;
                if (target_relabel(t) != 0) {
                    log_info("target re-attached for its new labels", "inspector=%s worker=%s",
                             tc->inspector, t->worker);
                    target_remove(t); /* listed again at the next poll */
                }
            }
        } else if ((ep = ep_new(a, tc)) == NULL) {
            rc = -ENOMEM;
            continue;
        } else {
            ep->kept = 1;
            log_info("endpoint added", "inspector=%s", tc->inspector);
        }
        ep->next = NULL;
        *tail = ep;
        tail = &ep->next;
    }
    /* What is left is no longer named: its targets go, the endpoint is
     * retired (its targets hold it until they are freed). */
    for (struct endpoint *ep = a->endpoints, *n; ep; ep = n) {
        n = ep->next;
        log_info("endpoint removed", "inspector=%s", ep->cfg->inspector);
        ep_stop(ep);
        for (struct target *t = a->targets, *tn; t; t = tn) {
            tn = t->next;
            if (t->ep == ep)
                target_remove(t);
        }
        ep->next = a->retired_endpoints;
        a->retired_endpoints = ep;
    }
    a->endpoints = head;
    return rc;
}

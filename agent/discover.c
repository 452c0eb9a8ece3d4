/*
 * discover.c - polls each configured inspector endpoint for its targets.
 *
 * Per endpoint: GET /json/version once (names the runtime), then
 * GET /json/list every discovery.interval. The list is validated entry by
 * entry and handed to target_sync(), which attaches new targets and
 * detaches vanished ones. An endpoint that refuses, times out or answers
 * garbage is retried with capped exponential backoff, and its targets are
 * detached (their sessions would be dead anyway). Only the path of
 * webSocketDebuggerUrl is used: the agent always connects to the endpoint
 * the config names, never to a host a target advertises.
 */
#include "internal.h"
#include "log.h"

#include "base.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <yajl/yajl_tree.h>

#define DISCOVER_MAX_BODY (4u << 20)
/* /json/list is an array of flat objects, /json/version one object. */
#define DISCOVER_MAX_NESTING 8
#define DISCOVER_TIMEOUT_MS 3000
#define DISCOVER_BACKOFF_MIN_MS 500
#define DISCOVER_BACKOFF_MAX_MS 30000
#define DISCOVER_MAX_ID 256
#define DISCOVER_MAX_PATH 512

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
    ep->a->n.discovery_errors++;
    ep->failures++;
    if (ep->reachable || ep->failures == 1) {
        log_warn("endpoint unreachable", "inspector=%s step=%s err=%s why=%s", ep->cfg->inspector,
                 what, isoprof_strerror(err), why ? why : "");
    } else {
        log_debug("endpoint still unreachable", "inspector=%s step=%s why=%s failures=%d",
                  ep->cfg->inspector, what, why ? why : "", ep->failures);
    }
    ep->reachable = 0;
    isoprof_free(ep->runtime);
    ep->runtime = NULL;
    target_sync(ep, NULL, 0);
    if (ep->backoff_ms == 0)
        ep->backoff_ms = DISCOVER_BACKOFF_MIN_MS;
    uint64_t delay = ep->backoff_ms;
    /* Full jitter on the upper half, so many agents do not retry in step. */
    delay = delay / 2 + (uint64_t)(agent_rand_unit(ep->a) * (double)(delay / 2));
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

const char *discover_parse_version(const char *body, size_t len, char *why, size_t cap)
{
    char err[128];
    if (isoprof_json_depth(body, len, DISCOVER_MAX_NESTING) > DISCOVER_MAX_NESTING) {
        snprintf(why, cap, "nested deeper than %d levels", DISCOVER_MAX_NESTING);
        return NULL;
    }
    yajl_val v = yajl_tree_parse(body, err, sizeof(err));
    if (v == NULL) {
        char *nl = strchr(err, '\n');
        if (nl != NULL)
            *nl = '\0';
        snprintf(why, cap, "%s", err[0] ? err : "malformed JSON");
        return NULL;
    }
    const char *path[] = {"Browser", NULL};
    yajl_val b = yajl_tree_get(v, path, yajl_t_string);
    const char *rt = b ? runtime_from_browser(YAJL_GET_STRING(b)) : NULL;
    yajl_tree_free(v);
    if (rt == NULL)
        snprintf(why, cap, "no Browser field");
    return rt;
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

static const char *str_field(yajl_val o, const char *name)
{
    const char *path[] = {name, NULL};
    yajl_val v = yajl_tree_get(o, path, yajl_t_string);
    return v ? YAJL_GET_STRING(v) : NULL;
}

void discover_list_free(struct discover_list *l)
{
    isoprof_free(l->d);
    yajl_tree_free(l->tree);
    memset(l, 0, sizeof(*l));
}

int discover_parse_list(const char *body, size_t len, size_t max, struct discover_list *l,
                        char *why, size_t cap)
{
    char err[128];
    memset(l, 0, sizeof(*l));
    if (isoprof_json_depth(body, len, DISCOVER_MAX_NESTING) > DISCOVER_MAX_NESTING) {
        snprintf(why, cap, "nested deeper than %d levels", DISCOVER_MAX_NESTING);
        return ISOPROF_EJSON;
    }
    yajl_val v = yajl_tree_parse(body, err, sizeof(err));
    if (v == NULL || !YAJL_IS_ARRAY(v)) {
        char *nl = strchr(err, '\n');
        if (nl != NULL)
            *nl = '\0';
        snprintf(why, cap, "%s", v ? "not an array" : err[0] ? err : "malformed JSON");
        yajl_tree_free(v);
        return ISOPROF_EJSON;
    }
    l->tree = v;
    l->listed = YAJL_GET_ARRAY(v)->len;
    l->d = isoprof_calloc(l->listed < max ? (l->listed ? l->listed : 1) : (max ? max : 1),
                          sizeof(*l->d));
    if (l->d == NULL) {
        discover_list_free(l);
        snprintf(why, cap, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < l->listed; i++) {
        yajl_val o = YAJL_GET_ARRAY(v)->values[i];
        const char *id = YAJL_IS_OBJECT(o) ? str_field(o, "id") : NULL;
        const char *ws = YAJL_IS_OBJECT(o) ? str_field(o, "webSocketDebuggerUrl") : NULL;
        const char *path = ws ? ws_path_of(ws) : NULL;
        if (id == NULL || path == NULL || *id == '\0' || strlen(id) > DISCOVER_MAX_ID) {
            l->skipped++;
            continue;
        }
        if (l->n == max) {
            l->over++; /* usable, but past the cap */
            continue;
        }
        struct discovered *d = &l->d[l->n++];
        d->id = id;
        d->path = path;
        d->title = str_field(o, "title");
        d->url = str_field(o, "url");
    }
    return 0;
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
}

void discover_close(struct agent *a)
{
    struct endpoint *lists[2] = {a->endpoints, a->retired_endpoints};
    for (int i = 0; i < 2; i++)
        for (struct endpoint *ep = lists[i]; ep; ep = ep->next)
            if (!uv_is_closing((uv_handle_t *)&ep->timer))
                uv_close((uv_handle_t *)&ep->timer, NULL);
}

void discover_free(struct agent *a)
{
    struct endpoint *lists[2] = {a->endpoints, a->retired_endpoints};
    for (int i = 0; i < 2; i++) {
        for (struct endpoint *ep = lists[i], *n; ep; ep = n) {
            n = ep->next;
            isoprof_free(ep->runtime);
            isoprof_free(ep);
        }
    }
    a->endpoints = a->retired_endpoints = NULL;
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

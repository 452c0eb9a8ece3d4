/*
 * uplink.c - the daemon's side of the upload: builds the uploader from the
 * upload.* options (uploader/settings.h, which reads the credentials from
 * their files too), restarts it when a reload changes them, and logs what
 * the uploader reports.
 *
 * Secrets (the Basic auth password, the bearer token) are read once at
 * start, handed to the uploader and wiped from this side; a buffer a
 * secret was read into is wiped on every path, a read that failed midway
 * or a file refused as too long or malformed included. No log line
 * carries them or the header values that may hold one. A failed request
 * is logged at warn the first time and again whenever the reason changes,
 * otherwise at debug, so an outage of hours writes a few lines, not one a
 * retry; the recovery is logged at info.
 */
#include "uplink.h"
#include "daemon.h"
#include "log.h"
#include "settings.h"

#include "base.h"

#include <errno.h>
#include <string.h>

/* The daemon's side of the upload, behind a->uplink. */
struct uplink {
    struct upl *upl;       /* NULL when upload.url is "", or between a restart's two */
    struct upl_stats base; /* totals of uploaders closed (reload, shutdown) */
    int failing;           /* the last request failed */
    int restarting;        /* a reload closes the uploader; the new one starts after */
    long last_code;
    int last_err;
    uint64_t expired_run; /* windows expired since the server last took a batch */
    int skew_logged;      /* the clock skew error was logged */
};

static const char *api_name(enum cfg_upload_api api)
{
    return api == CFG_UPLOAD_INGEST ? "ingest" : "push";
}

static void uplink_on_event(const struct upl_event *ev, void *arg)
{
    struct agent *a = arg;
    struct uplink *u = a->uplink;
    char id[STORE_ID_LEN + 1] = "";
    if (ev->first_id)
        store_id_format(a->store, ev->first_id, id);
    switch (ev->kind) {
    case UPL_EV_SENT:
        if (u->failing)
            log_info("upload recovered", "profiles=%U status=%d", (uint64_t)ev->profiles,
                     (int)ev->code);
        else
            log_debug("upload batch sent", "profiles=%U bytes=%U status=%d", (uint64_t)ev->profiles,
                      ev->bytes, (int)ev->code);
        if (u->expired_run > 0)
            log_warn("windows expired unsent during the upload outage, kept in the store",
                     "expired=%U max_age_s=%U", u->expired_run,
                     a->cfg->upload.max_age_ns / 1000000000u);
        u->expired_run = 0;
        u->skew_logged = 0;
        u->failing = 0;
        u->last_code = 0;
        u->last_err = 0;
        break;
    case UPL_EV_EXPIRED:
        /* During an outage: logged once, with the count, when the server
         * takes a batch again (the count is known then); each one in
         * debug. Past it (the server took a batch since, then refused one
         * as too old, or the queue's oldest aged out behind it): said as
         * it happens, not as the outage's. */
        if (!u->failing) {
            log_info("windows expired unsent, kept in the store",
                     "profiles=%U status=%d id=%s reason=%s", (uint64_t)ev->profiles, (int)ev->code,
                     id, ev->why);
            break;
        }
        u->expired_run += ev->profiles;
        log_debug("windows expired, never sent", "profiles=%U status=%d id=%s reason=%s",
                  (uint64_t)ev->profiles, (int)ev->code, id, ev->why);
        break;
    case UPL_EV_CLOCK_SKEW:
        if (!u->skew_logged)
            log_error("clock skew: the upload server refuses profiles as too new, this host's "
                      "clock is ahead of it; the windows are kept (isoprof upload --since resends "
                      "them once the clock is right)",
                      "status=%d reason=%s id=%s", (int)ev->code, ev->why, id);
        u->skew_logged = 1;
        break;
    case UPL_EV_RETRY:
        if (ev->delay_ms == 0 && ev->code >= 400) {
            log_warn("upload batch refused, sending its windows one by one",
                     "profiles=%U status=%d reason=%s", (uint64_t)ev->profiles, (int)ev->code,
                     ev->why);
            break;
        }
        if (!u->failing || u->last_code != ev->code || u->last_err != ev->err)
            log_warn("upload failed, will retry",
                     "status=%d err=%e reason=%s profiles=%U "
                     "retry_ms=%U",
                     (int)ev->code, ev->err, ev->why, (uint64_t)ev->profiles, ev->delay_ms);
        else
            log_debug("upload failed, will retry",
                      "status=%d err=%e reason=%s profiles=%U "
                      "retry_ms=%U",
                      (int)ev->code, ev->err, ev->why, (uint64_t)ev->profiles, ev->delay_ms);
        u->failing = 1;
        u->last_code = ev->code;
        u->last_err = ev->err;
        break;
    case UPL_EV_REJECTED:
        log_warn("upload rejected, window kept", "status=%d reason=%s profiles=%U id=%s",
                 (int)ev->code, ev->why, (uint64_t)ev->profiles, id);
        break;
    case UPL_EV_UNSENDABLE:
        log_warn("window not uploadable, kept", "reason=%s profiles=%U id=%s", ev->why,
                 (uint64_t)ev->profiles, id);
        break;
    case UPL_EV_STORE_ERROR:
        log_error("upload: outbox read or update failed, will retry", "err=%e", ev->err);
        break;
    case UPL_EV_DONE: /* a replay's; the daemon drains the outbox */
        break;
    }
}

int agent_upload_start(struct agent *a)
{
    const struct cfg *c = a->cfg;
    if (a->uplink == NULL) {
        a->uplink = isoprof_calloc(1, sizeof(*a->uplink));
        if (a->uplink == NULL)
            return -ENOMEM;
    }
    /* upload.url is restart-only: the store queues windows only when it
     * was opened with upload on. */
    const char *url = a->cfg_boot->upload.url;
    if (url == NULL || url[0] == '\0')
        return 0;
    struct upl_settings set;
    const char *what, *why;
    int rc = upl_settings_load(&set, c, url, &what, &why);
    if (rc != 0) {
        const char *path = strcmp(what, "upload.bearer_token_file") == 0
                               ? c->upload.bearer_token_file
                               : c->upload.basic_auth.password_file;
        if (rc == -ENOMEM)
            log_error("cannot start the uploader", "url=%s err=%e", url, rc);
        else
            log_error("cannot read an upload credential file", "option=%s path=%s why=%s", what,
                      path, why);
        return rc;
    }
    rc = upl_init(a->loop, a->http, a->store, &set.o, uplink_on_event, a, &a->uplink->upl);
    if (rc != 0) {
        upl_settings_free(&set);
        log_error("cannot start the uploader", "url=%s err=%e", url, rc);
        return rc;
    }
    if (c->upload.tls.insecure_skip_verify)
        log_warn("upload TLS verification is off (upload.tls.insecure_skip_verify)", "url=%s", url);
    log_info("upload started",
             "url=%s api=%s host=%s batch_profiles=%u batch_bytes=%U max_age_s=%U max_rate=%U "
             "isolate_label=%d",
             url, api_name(c->upload.api), set.host, c->upload.batch.max_profiles,
             c->upload.batch.max_bytes, c->upload.max_age_ns / 1000000000u, c->upload.max_rate,
             c->upload.isolate_label);
    upl_settings_free(&set);
    return 0;
}

void agent_upload_stats(const struct agent *a, struct upl_stats *out)
{
    /* struct upl_stats is all uint64_t totals: add them up as such. */
    _Static_assert(sizeof(struct upl_stats) % sizeof(uint64_t) == 0, "upl_stats: uint64_t only");
    struct upl_stats cur = {0}, none = {0};
    const struct uplink *u = a->uplink;
    if (u != NULL && u->upl != NULL)
        upl_stats(u->upl, &cur);
    const uint64_t *b = (const uint64_t *)(u ? &u->base : &none), *c = (const uint64_t *)&cur;
    uint64_t *o = (uint64_t *)out;
    for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
        o[i] = b[i] + c[i];
}

/* The old uploader is gone (its last ack committed): start the new one. */
static void uplink_on_old_closed(void *arg)
{
    struct agent *a = arg;
    a->uplink->restarting = 0;
    if (a->stopping)
        return;
    if (agent_upload_start(a) == 0)
        log_info("upload settings applied", "");
    else
        log_error("upload stopped: the new settings did not start (fix them and reload); windows "
                  "stay queued",
                  "");
}

int agent_upload_reload(struct agent *a, const struct cfg *old)
{
    const char *url = a->cfg_boot->upload.url;
    struct uplink *u = a->uplink;
    if (url == NULL || url[0] == '\0' || u == NULL || u->restarting)
        return 0; /* off, or a restart under way (it reads the newest config) */
    if (u->upl == NULL) {
        /* The last reload's settings did not start: try these. */
        uplink_on_old_closed(a);
        return 0;
    }
    /* Credential files are read at start: a reload that names them reads
     * them again (a rotated token applies without a restart). */
    int creds =
        (a->cfg->upload.basic_auth.password_file && a->cfg->upload.basic_auth.password_file[0]) ||
        (a->cfg->upload.bearer_token_file && a->cfg->upload.bearer_token_file[0]);
    if (cfg_section_equal(old, a->cfg, "upload") && !creds)
        return 0;
    /* The request in flight, if any, is cancelled and its batch goes again
     * with the new settings; an ack in the thread pool commits first. */
    agent_upload_stats(a, &u->base);
    u->restarting = 1;
    struct upl *old_upl = u->upl;
    u->upl = NULL;
    upl_close_then(old_upl, uplink_on_old_closed, a);
    return 0;
}

void agent_upload_notify(struct agent *a, uint64_t bytes)
{
    if (a->uplink != NULL && a->uplink->upl != NULL)
        upl_notify(a->uplink->upl, bytes);
}

void agent_upload_stop(struct agent *a)
{
    struct uplink *u = a->uplink;
    if (u == NULL || u->upl == NULL)
        return;
    agent_upload_stats(a, &u->base); /* its totals outlive it, as at a reload */
    upl_close(u->upl);
    u->upl = NULL;
}

void agent_upload_free(struct agent *a)
{
    isoprof_free(a->uplink);
    a->uplink = NULL;
}

/*
 * replay.c - `isoprof upload --since T` (see replay.h).
 *
 * The ids of the matching windows are collected from one pass over the
 * store, then the uploader (uploader/upload.h) runs in replay mode on a
 * loop of its own: the same labels, batching, gzip, backoff, Retry-After
 * and max_rate as the daemon's drain, with the acknowledgements counted
 * instead of written. A network failure or a 5xx is retried as the daemon
 * would, for at most CLI_REPLAY_GIVE_UP_MS without progress; then the
 * command gives up and says how far it got.
 */
#include "replay.h"

#include "base.h"
#include "config.h"
#include "settings.h"
#include "upload.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

/* No progress (an answer that settles windows) for this long: give up. */
#define CLI_REPLAY_GIVE_UP_MS 120000u

struct ids {
    uint64_t *v;
    size_t n, cap;
    int err;
};

static int ids_on_window(const struct store_window *w, void *arg)
{
    struct ids *l = arg;
    if (w->type != STORE_TYPE_CPU && w->type != STORE_TYPE_HEAP && w->type != STORE_TYPE_RETAINED)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        uint64_t *v = isoprof_realloc(l->v, cap * sizeof(*v));
        if (v == NULL) {
            l->err = -ENOMEM;
            return 1;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = w->id;
    return 0;
}

struct run {
    uv_loop_t loop;
    uv_timer_t watchdog;
    struct upl *u;
    int done, gave_up;
    uint64_t last_progress_ms;
    uint64_t refused_first; /* the first refused window */
    long refused_code;
    char refused_why[256];
    char retry_why[256];
};

static void run_on_event(const struct upl_event *ev, void *arg)
{
    struct run *r = arg;
    switch (ev->kind) {
    case UPL_EV_SENT:
    case UPL_EV_UNSENDABLE:
        r->last_progress_ms = uv_now(&r->loop);
        break;
    case UPL_EV_REJECTED:
    case UPL_EV_EXPIRED:
    case UPL_EV_CLOCK_SKEW:
        r->last_progress_ms = uv_now(&r->loop);
        if (r->refused_why[0] == '\0') {
            r->refused_first = ev->first_id;
            r->refused_code = ev->code;
            snprintf(r->refused_why, sizeof(r->refused_why), "%s", ev->why);
        }
        break;
    case UPL_EV_RETRY:
        snprintf(r->retry_why, sizeof(r->retry_why), "%s%s%ld", ev->why[0] ? ev->why : "",
                 ev->why[0] ? ", status " : "status ", ev->code);
        break;
    case UPL_EV_DONE:
        r->done = 1;
        uv_stop(&r->loop);
        break;
    default:
        break;
    }
}

static void watchdog_on_fire(uv_timer_t *t)
{
    struct run *r = container_of(t, struct run, watchdog);
    if (uv_now(&r->loop) - r->last_progress_ms >= CLI_REPLAY_GIVE_UP_MS) {
        r->gave_up = 1;
        uv_stop(&r->loop);
    }
}

static void walk_close(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

int cli_replay(struct store *s, const char *config_path, const struct store_filter *f, int json)
{
    struct cfg *cfg = NULL;
    char *why = NULL;
    int rc = cfg_load_file(config_path, &cfg, &why);
    if (rc != 0) {
        fprintf(stderr, "isoprof: %s: %s\n", config_path, why ? why : isoprof_strerror(rc));
        isoprof_free(why);
        return 2;
    }
    if (cfg->upload.url == NULL || cfg->upload.url[0] == '\0') {
        fprintf(stderr, "isoprof: %s sets no upload.url: nowhere to upload to\n", config_path);
        cfg_free(cfg);
        return 2;
    }
    struct ids l = {0};
    rc = store_windows(s, f, ids_on_window, &l);
    if (rc == 1 && l.err != 0)
        rc = l.err;
    if (rc != 0) {
        fprintf(stderr, "isoprof: reading windows: %s\n", isoprof_strerror(rc));
        isoprof_free(l.v);
        cfg_free(cfg);
        return 1;
    }
    if (l.n == 0) {
        fprintf(stderr, "isoprof: no window matches\n");
        isoprof_free(l.v);
        cfg_free(cfg);
        return 1;
    }
    /* The options as the daemon's: the same secret rules, labels and
     * headers; a replay sends at once and whatever the windows' age (the
     * server's window may have been raised for it). */
    struct upl_settings set;
    const char *what, *swhy;
    rc = upl_settings_load(&set, cfg, cfg->upload.url, &what, &swhy);
    if (rc != 0) {
        if (rc == -ENOMEM)
            fprintf(stderr, "isoprof: out of memory\n");
        else
            fprintf(stderr, "isoprof: cannot read %s: %s\n", what, swhy);
        isoprof_free(l.v);
        cfg_free(cfg);
        return 2;
    }
    set.o.max_delay_ms = 0;
    set.o.max_age_ms = 0;
    set.o.replay = l.v;
    set.o.nreplay = l.n;
    struct run r;
    memset(&r, 0, sizeof(r));
    struct http_client *http = NULL;
    if (uv_loop_init(&r.loop) != 0) {
        fprintf(stderr, "isoprof: out of memory\n");
        upl_settings_free(&set);
        isoprof_free(l.v);
        cfg_free(cfg);
        return 1;
    }
    rc = http_client_init(&r.loop, &http);
    if (rc == 0)
        rc = upl_init(&r.loop, http, s, &set.o, run_on_event, &r, &r.u);
    upl_settings_free(&set);
    if (rc == 0) {
        uv_timer_init(&r.loop, &r.watchdog);
        r.last_progress_ms = uv_now(&r.loop);
        uv_timer_start(&r.watchdog, watchdog_on_fire, 1000, 1000);
        uv_run(&r.loop, UV_RUN_DEFAULT);
    } else {
        fprintf(stderr, "isoprof: cannot start the upload: %s\n", isoprof_strerror(rc));
    }
    struct upl_stats st = {0};
    if (r.u != NULL)
        upl_stats(r.u, &st);
    upl_close(r.u);
    if (http != NULL)
        http_client_close(http);
    uv_walk(&r.loop, walk_close, NULL);
    uv_run(&r.loop, UV_RUN_DEFAULT);
    uv_loop_close(&r.loop);
    if (rc != 0) {
        isoprof_free(l.v);
        cfg_free(cfg);
        return 1;
    }
    uint64_t refused = st.profiles_rejected + st.profiles_expired;
    uint64_t unsent = l.n - st.profiles_sent - refused - st.profiles_unsendable;
    if (r.done)
        unsent = 0;
    if (json) {
        printf("{\"windows\":%zu,\"accepted\":%" PRIu64 ",\"refused\":%" PRIu64
               ",\"unsendable\":%" PRIu64 ",\"not_sent\":%" PRIu64 ",\"requests\":%" PRIu64 "}\n",
               l.n, st.profiles_sent, refused, st.profiles_unsendable, unsent, st.requests);
    } else {
        printf("%zu windows: %" PRIu64 " accepted, %" PRIu64 " refused", l.n, st.profiles_sent,
               refused);
        if (st.profiles_unsendable)
            printf(", %" PRIu64 " not uploadable", st.profiles_unsendable);
        if (unsent)
            printf(", %" PRIu64 " not sent", unsent);
        printf(" (%" PRIu64 " requests)\n", st.requests);
        if (refused) {
            char id[STORE_ID_LEN + 1] = "";
            store_id_format(s, r.refused_first, id);
            printf("first refused: %s, status %ld: %s\n", id, r.refused_code, r.refused_why);
        }
    }
    if (r.gave_up)
        fprintf(stderr, "isoprof: gave up after %u s without progress (%s)\n",
                CLI_REPLAY_GIVE_UP_MS / 1000, r.retry_why[0] ? r.retry_why : "no answer");
    isoprof_free(l.v);
    cfg_free(cfg);
    return st.profiles_sent == l.n ? 0 : 1;
}

/*
 * upload.h - the Grafana Pyroscope uploader: drains the store's outbox.
 *
 * The store queues every window in its outbox in the transaction that
 * stores it (storage/store.h). The uploader takes the pending windows in
 * the outbox's order (anomaly evidence first), sends them in batches to a
 * Pyroscope server, and takes a window out of the outbox only once the
 * server acknowledged the request that carried it. A crash therefore loses
 * nothing: at worst the one batch in flight is sent again.
 *
 * Push API: one POST <url>/push.v1.PusherService/Push a batch, one
 * RawProfileSeries a window (PROTOCOLS.md §3). Legacy /ingest: one
 * multipart POST a window. Answers: 2xx acknowledges; 408, 429, 5xx,
 * 401, 403, 404, 3xx and network errors or time-outs back off and the
 * batch is built again: a server's Retry-After is the wait (capped at the
 * maximum); otherwise full jitter under a cap that starts at the minimum
 * (500 ms) and doubles with each failure up to the maximum (60 s). The
 * first answer from the server after network failures (it is back,
 * whatever it says) starts the doubling again from the minimum. Any other
 * 4xx rejects: a batch of several windows is then sent again one window a
 * request, so that only the window the server refuses is marked rejected
 * (store_outbox_reject; it stays in the store). A window over
 * max_profile_size, or whose labels the server would refuse, is rejected
 * without being sent.
 *
 * The acceptance window: a window that started more than max_age ago is
 * expired, never sent (the server would refuse it). A 4xx whose message
 * says the profile is outside the server's ingestion window is recognised:
 * too old expires the window, too new (this clock is ahead) rejects it
 * and reports UPL_EV_CLOCK_SKEW, so that neither is retried.
 *
 * Labels: the store and the config keep every name and value within the
 * server's bounds (a name <= 1024 bytes, a value <= 2048, UTF-8), so the
 * one limit a series can pass is the count: labels past PUSH_MAX_LABELS
 * are left out, the last static ones first (a server would refuse the
 * series), and each one left out counts in labels_cut.
 *
 * DESIGN: one request in flight at a time. Reading the outbox, loading,
 * gzip and encoding run in the libuv thread pool (one job at a time), as do
 * the acknowledging and rejecting write transactions; the loop thread only
 * starts requests and timers. Memory is bounded by one batch (max_bytes of
 * pprof, or one profile of at most max_profile_size) whatever the backlog.
 *
 * No logging: events go to the caller's callback. Thread: loop thread.
 */
#ifndef ISOPROF_UPLOAD_H
#define ISOPROF_UPLOAD_H

#include "http.h"
#include "push.h"
#include "store.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

enum upl_api { UPL_API_PUSH, UPL_API_INGEST };

#define UPL_BACKOFF_MIN_MS 500u
#define UPL_BACKOFF_MAX_MS 60000u
#define UPL_MAX_RESPONSE                                                                           \
    65536u /* response bytes kept (for the log); the rest is read and dropped */

/* What the uploader does; every string is copied by upl_init. */
struct upl_options {
    enum upl_api api;
    const char *url;  /* base URL, "http://host:port[/prefix]"; a trailing '/' is ignored */
    const char *host; /* the host label */
    uint64_t timeout_ms;
    uint32_t max_profiles;            /* a Push request; ingest sends one */
    uint64_t max_bytes;               /* uncompressed pprof bytes a request */
    uint64_t max_delay_ms;            /* a batch that is not full waits this long at most */
    uint64_t max_profile_size;        /* larger: rejected, not sent */
    const char *ca_file;              /* NULL: the system's CAs */
    int insecure;                     /* https without verification */
    const char *userpwd;              /* "user:password" (Basic auth) or NULL */
    const char *bearer;               /* token (Authorization: Bearer) or NULL */
    const char *tenant_id;            /* X-Scope-OrgID or NULL */
    const struct push_label *headers; /* extra headers: name, value */
    size_t nheaders;
    /* Static labels on every profile: at most 21 (PUSH_MAX_LABELS less the
     * uploader's own 9), none named like one of its own: __name__,
     * service_name, version, host, isolate, runtime, thread, anomaly,
     * __delta__. A window's own labels (struct store_window.labels, its
     * target's) go after the uploader's and before these, and override a
     * static label of the same name; when the window's labels and these
     * together would pass PUSH_MAX_LABELS, the last static labels are left
     * out of that window's series. */
    const struct push_label *labels;
    size_t nlabels;
    uint64_t backoff_min_ms, backoff_max_ms; /* 0: UPL_BACKOFF_MIN_MS / MAX_MS */
    /* The server's acceptance window (Pyroscope's reject-older-than): a
     * window that started longer ago is never sent but expired
     * (store_outbox_expire); those within UPL_LATE_SHARE of it go after the
     * younger ones of their group. 0: no limit. */
    uint64_t max_age_ms;
    /* Uncompressed profile bytes a second, the measure of Pyroscope's
     * ingestion rate limit, that a backlog drains at on top of the host's
     * own production (the bytes upl_notify reports, as measured by struct
     * upl_pacer): a request waits until the bucket, which holds one
     * second's worth of both, has its bytes (a larger request, a full
     * bucket, and leaves it in debt). So the cap never makes the uploader
     * fall behind what the host produces; it bounds only the catch-up.
     * 0: no limit. */
    uint64_t max_rate;
    /* Nonzero: every series carries the isolate label, the process part of
     * the window's isolate number (STORE_ISOLATE_PROCESS), stable for the
     * life of the process. Zero: no per-process label (the store keeps the
     * isolate and the pid). */
    int isolate_label;
    /* Replay (isoprof upload --since): send windows replay[0..nreplay)
     * (store ids, borrowed until the uploader is closed) in that order
     * instead of draining the outbox, e.g. to a server whose acceptance
     * window was raised for a backfill. The store is only read (a
     * read-only handle will do): nothing is acknowledged, rejected or
     * expired in it, max_age does not apply, and UPL_EV_DONE follows the
     * last window. NULL: drain the outbox; nreplay 0 with replay set is
     * -EINVAL. */
    const uint64_t *replay;
    size_t nreplay;
};

/* A window within max_age / UPL_LATE_SHARE of leaving the acceptance
 * window counts as late (5 minutes of the default hour). */
#define UPL_LATE_SHARE 12u

enum upl_event_kind {
    UPL_EV_SENT,        /* a request was acknowledged: profiles, bytes, code */
    UPL_EV_RETRY,       /* a request failed and will be retried after delay_ms */
    UPL_EV_REJECTED,    /* the server refused profiles (code, why) for good */
    UPL_EV_UNSENDABLE,  /* profiles rejected without sending (why; code 0) */
    UPL_EV_STORE_ERROR, /* reading or updating the outbox failed (err); retried */
    UPL_EV_EXPIRED,     /* profiles older than max_age (or refused by the server as too
                           old: code) were expired, never sent */
    UPL_EV_CLOCK_SKEW,  /* the server refused a profile as too new (code, why): this
                           host's clock is ahead of it; the profile is rejected */
    UPL_EV_DONE,        /* replay: every window was sent or refused */
};

/* One event. why is borrowed for the call; it never holds a secret. */
struct upl_event {
    enum upl_event_kind kind;
    int err;         /* 0, or the request's or the store's error code */
    long code;       /* HTTP status, 0 when none arrived */
    size_t profiles; /* windows concerned */
    uint64_t bytes;  /* request body bytes */
    uint64_t delay_ms;
    uint64_t first_id; /* the first window concerned (store sequence id) */
    const char *why;   /* server message, libcurl reason or local reason; "" if none */
};

/* Called on the loop thread while the uploader is in the middle of a step:
 * it may log, count or call upl_stats, but must not call upl_close or
 * upl_notify (close from another callback or a timer instead). */
typedef void (*upl_event_cb)(const struct upl_event *ev, void *arg);

/* Totals since upl_init. */
struct upl_stats {
    uint64_t requests, requests_ok, requests_failed;
    uint64_t profiles_sent, profiles_rejected, profiles_unsendable;
    uint64_t bytes_sent; /* request bodies acknowledged */
    uint64_t store_errors;
    /* requests by what came back: a 2xx, 4xx or 5xx status, or anything
     * else (no answer, a network error, a time-out, another status); they
     * add up to requests. */
    uint64_t requests_2xx, requests_4xx, requests_5xx, requests_error;
    uint64_t profiles_expired; /* older than max_age or refused as too old */
    uint64_t profiles_too_new; /* refused as too new (clock skew); in profiles_rejected */
    uint64_t labels_cut;       /* static labels left out of a series to keep it within
                                  PUSH_MAX_LABELS */
    uint64_t rate_waits;       /* requests that waited for max_rate */
};

struct upl;

/*
 * upl_init - an uploader draining s through c, both borrowed until the
 * uploader is closed (close it before them). It starts idle and reads the
 * outbox at once. *out is owned by the caller until upl_close.
 * Errors: -EINVAL (NULL argument, url empty or not http(s)://, a
 * max of 0, too many static labels or one named like the uploader's own),
 * -ENOMEM.
 */
int upl_init(uv_loop_t *loop, struct http_client *c, struct store *s, const struct upl_options *o,
             upl_event_cb cb, void *arg, struct upl **out);

/* New windows were stored, bytes of uncompressed pprof in all (the
 * measure of max_rate; it counts in the production rate): look at the
 * outbox again (unless backing off). */
void upl_notify(struct upl *u, uint64_t bytes);

/* Totals so far. */
void upl_stats(const struct upl *u, struct upl_stats *st);

/*
 * upl_close - cancel the request in flight (its batch stays in the outbox
 * and goes again at the next start), stop the timer; the uploader frees
 * itself once a thread-pool job still running has finished (an ack or a
 * reject is always let finish). No event is delivered after this call. u
 * may be NULL.
 */
void upl_close(struct upl *u);

/* upl_close, then closed(arg) once the uploader has freed itself (an ack
 * or reject it had in the thread pool committed first): the moment a new
 * uploader on the same store can start without sending a batch twice. */
void upl_close_then(struct upl *u, void (*closed)(void *arg), void *arg);

/*
 * upl_backoff_ms - the delay before retry number attempt (0-based):
 * retry_after_ms when it is not 0 (the server's Retry-After), capped at
 * max; else uniform in [0, min(max, min << attempt)] using r (a random
 * 64-bit number). Exposed for the unit test.
 */
uint64_t upl_backoff_ms(uint64_t min, uint64_t max, unsigned attempt, uint64_t retry_after_ms,
                        uint64_t r);

/*
 * The rate budget (max_rate), pure: every time is a caller's monotonic
 * clock in ms, passed as an argument (the uploader passes uv_now), so the
 * unit tests drive it on a simulated clock.
 *
 * The production rate is the bytes queued (upl_pacer_queued) over the last
 * UPL_PACE_SPAN_MS, kept as UPL_PACE_SLOTS sums of UPL_PACE_SLOT_MS each,
 * divided by the time they cover. Within the first span after init that
 * time ends at the last bytes queued rather than now, and is at least one
 * slot: windows come in bursts (every isolate's at the end of each
 * period), and dividing the first bursts by the time up to now would read
 * the rate low between them and let the first minutes fall behind.
 *
 * The bucket fills at production + max_rate and holds one second of that,
 * so steady production is always sent as fast as it is queued, a backlog
 * drains at max_rate above it, and what a host coming back from an outage
 * sends at once is one second of both (credit does not pile up while
 * nothing is sent). max_rate 0: no limit (every wait is 0).
 */
#define UPL_PACE_SLOT_MS 10000u
#define UPL_PACE_SLOTS 60u
#define UPL_PACE_SPAN_MS ((uint64_t)UPL_PACE_SLOT_MS * UPL_PACE_SLOTS) /* 10 minutes */

struct upl_pacer {
    uint64_t max_rate;
    uint64_t start_ms;              /* upl_pacer_init's now */
    uint64_t last_ms;               /* the last upl_pacer_queued with bytes; 0: none yet */
    uint64_t slot;                  /* the newest slot's number (now / UPL_PACE_SLOT_MS) */
    uint64_t bytes[UPL_PACE_SLOTS]; /* slot n's bytes at bytes[n % UPL_PACE_SLOTS] */
    int64_t tokens;                 /* the bucket at tokens_ms; negative: in debt */
    uint64_t tokens_ms;
};

/* A pacer for max_rate (0: no limit) starting at now_ms with a full
 * bucket of max_rate and no production. */
void upl_pacer_init(struct upl_pacer *p, uint64_t max_rate, uint64_t now_ms);

/* bytes were queued for upload at now_ms (a clock that never goes back). */
void upl_pacer_queued(struct upl_pacer *p, uint64_t now_ms, uint64_t bytes);

/* The production rate at now_ms, bytes a second. */
uint64_t upl_pacer_production(const struct upl_pacer *p, uint64_t now_ms);

/* How long a request of bytes must wait at now_ms: 0 when it may go
 * (the bucket holds min(bytes, its size)). */
uint64_t upl_pacer_wait_ms(struct upl_pacer *p, uint64_t now_ms, uint64_t bytes);

/* A request of bytes went at now_ms: take them from the bucket. */
void upl_pacer_take(struct upl_pacer *p, uint64_t now_ms, uint64_t bytes);

#endif

/*
 * upload.c - the outbox drain (see upload.h).
 *
 * The uploader is a small state machine on the loop thread:
 *
 *   IDLE --notify/timer--> PREPARE (pool job) --batch--> SENDING (libcurl)
 *     ^                       |  nothing pending: IDLE                |
 *     |                       |  not due yet: WAIT (timer)             |
 *     +----- ACK / REJECT (pool job) <---- 2xx / 4xx -----------------+
 *                                    5xx, 429, network: BACKOFF (timer)
 *
 * PREPARE peeks at the head of the outbox (metadata only), picks the batch
 * (at most max_profiles windows and max_bytes of pprof; the first window
 * always fits unless it is over max_profile_size, which is rejected
 * there), and decides whether it is due: a full batch, one holding anomaly
 * evidence, or one whose oldest window waited max_delay goes now; else the
 * uploader waits for that moment or for more windows. Only a due batch is
 * loaded, gzip'd and encoded. The batch is rebuilt from the outbox after a
 * failure rather than kept, so anomaly evidence stored during an outage
 * still goes first and nothing is held in memory across a back-off.
 *
 * A request the server refuses with a non-retryable 4xx is resent one
 * window per request ("solo" mode for that many windows): a batch is then
 * rejected window by window, not as a whole.
 */
#include "upload.h"

#include "base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The labels item_labels sets itself; a static label may not take one of
 * these names (the server refuses a series with a name twice, so every
 * window would be rejected unsent). */
static const char *const upl_own_labels[] = {"__name__", "service_name", "version",
                                             "host",     "isolate",      "runtime",
                                             "thread",   "anomaly",      "__delta__"};
#define UPL_LABELS_OWN ISOPROF_ARRAY_SIZE(upl_own_labels)
#define UPL_REASON_MAX 200
/* A window's own labels always fit beside the uploader's (the static ones
 * give way, see item_labels), and the store's values are the server's. */
_Static_assert(STORE_WINDOW_LABELS_MAX + UPL_LABELS_OWN <= PUSH_MAX_LABELS,
               "a window's labels and the uploader's own fit in a series");
_Static_assert(STORE_WINDOW_LABEL_VALUE_MAX <= PUSH_MAX_VALUE &&
                   STORE_WINDOW_LABEL_NAME_MAX <= PUSH_MAX_NAME,
               "the store's label bounds are within the server's");

enum upl_state { ST_IDLE, ST_PREPARE, ST_SENDING, ST_STORE, ST_WAIT, ST_BACKOFF, ST_RATE };

/* Windows a prepare job expires at most (one write transaction). */
#define UPL_EXPIRE_BATCH 256u

/* One window of a batch, copied out of the peek's read transaction. */
struct upl_item {
    uint64_t id;
    uint8_t type, anomaly;
    uint32_t pinned, isolate;
    uint64_t start_ns, end_ns, raw_size, queued_ns;
    char *worker, *version, *runtime, *thread;
    /* The window's labels: the array and their strings in one allocation
     * (labels; NULL when there are none). */
    struct push_label *labels;
    size_t nlabels;
    int urgent;
    size_t src; /* replay: its index in the replay list */
};

enum job_kind { JOB_PREPARE, JOB_ACK, JOB_REJECT, JOB_EXPIRE };

struct upl_job {
    uv_work_t req;
    struct upl *u;
    enum job_kind kind;
    /* PREPARE input */
    size_t maxp;
    /* PREPARE output: the batch to send (ids, body, url, content type) */
    int err;
    uint64_t wait_until_ns; /* not due: wake at this wall time */
    int more;               /* a window beyond the batch is pending (or was rejected here) */
    uint64_t *ids;
    size_t n;
    uint64_t raw_bytes;
    uint8_t *body;
    size_t body_len;
    char *url;
    char ctype[96];
    /* expired without sending (PREPARE) */
    size_t expired;
    uint64_t expired_first;
    /* static labels left out to fit PUSH_MAX_LABELS (PREPARE) */
    uint64_t labels_cut;
    /* rejected without sending (PREPARE) */
    size_t unsendable;
    uint64_t unsendable_first;
    char unsendable_why[UPL_REASON_MAX];
    /* replay: ids of the list this batch took (sent, refused, or skipped) */
    size_t consumed;
    /* ACK / REJECT input */
    long code;
    char reason[STORE_REJECT_REASON_MAX + 1];
};

struct upl {
    uv_loop_t *loop;
    struct http_client *http;
    struct store *store;
    upl_event_cb cb;
    void *cb_arg;
    /* options, copied */
    enum upl_api api;
    char *url, *host, *ca_file, *userpwd, *push_url;
    uint64_t timeout_ms, max_bytes, max_delay_ms, max_profile_size, bmin, bmax;
    uint64_t max_age_ms;
    int isolate_label;
    uint64_t *replay; /* replay mode: the ids (a copy), the next to send */
    size_t nreplay, replay_next;
    struct upl_pacer pace; /* max_rate's bucket and the production rate (uv_now) */
    uint32_t max_profiles;
    int insecure;
    char **headers; /* "Name: value" lines, including the fixed ones */
    size_t nheaders;
    struct push_label *labels;
    size_t nlabels;
    /* state */
    enum upl_state state;
    uv_timer_t timer;
    struct upl_job *job; /* in the pool, or the batch being sent */
    struct http_req *inflight;
    unsigned attempt;             /* failures since the doubling last started */
    int net_failing;              /* the last request got no answer at all */
    size_t solo;                  /* windows still to send one a request */
    int notified;                 /* windows were stored while a job ran */
    struct upl_job *settle_retry; /* an ack or reject that failed, tried again after a backoff */
    void (*closed_cb)(void *arg); /* upl_close_then */
    void *closed_arg;
    struct isoprof_rng rng; /* backoff jitter */
    int closing;
    struct upl_stats st;
};

static void upl_kick(struct upl *u);

/* --- small helpers --------------------------------------------------- */

uint64_t upl_backoff_ms(uint64_t min, uint64_t max, unsigned attempt, uint64_t retry_after_ms,
                        uint64_t r)
{
    if (retry_after_ms != 0)
        return retry_after_ms < max ? retry_after_ms : max;
    uint64_t cap = min;
    for (unsigned i = 0; i < attempt && cap < max; i++)
        cap = cap > UINT64_MAX / 2 ? UINT64_MAX : cap * 2;
    if (cap > max)
        cap = max;
    return cap == UINT64_MAX ? r : r % (cap + 1);
}

/* A copy of at most cap - 1 bytes of s with every byte that is not
 * printable ASCII as '?': what the server said, safe to log, to store and
 * to print as JSON whatever it sent. */
static void clean_copy(char *dst, size_t cap, const char *s, size_t len)
{
    size_t n = len < cap - 1 ? len : cap - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        dst[i] = c < 0x20 || c >= 0x7f ? '?' : (char)c;
    }
    dst[n] = '\0';
}

static void emit(struct upl *u, enum upl_event_kind kind, int err, long code, size_t profiles,
                 uint64_t bytes, uint64_t delay_ms, uint64_t first_id, const char *why)
{
    if (u->cb == NULL || u->closing)
        return;
    struct upl_event ev = {.kind = kind,
                           .err = err,
                           .code = code,
                           .profiles = profiles,
                           .bytes = bytes,
                           .delay_ms = delay_ms,
                           .first_id = first_id,
                           .why = why ? why : ""};
    u->cb(&ev, u->cb_arg);
}

/* --- labels ---------------------------------------------------------- */

static const char *anomaly_label(const struct upl_item *it)
{
    if (it->anomaly != 0)
        return store_anomaly_name(it->anomaly);
    for (unsigned k = 1; k <= STORE_ANOMALY_MAX; k++)
        if (it->pinned & (1u << k))
            return store_anomaly_name(k);
    return NULL;
}

/*
 * The profile name (__name__) of a window type; NULL for a type that is
 * never uploaded. Pyroscope stores a pprof as one series per sample type,
 * its profile type id __name__:sample_type:unit:period_type:unit, and its
 * UI's type picker groups them by __name__: so a retained window sent as
 * "memory" shows as memory:retained_space:bytes:space:bytes beside the heap
 * windows' memory:inuse_space, where whoever chases memory looks. A
 * snapshot (.heapsnapshot JSON, not pprof) is never queued by the store,
 * and a type this build does not know is not sent either.
 */
static const char *profile_name(uint8_t type)
{
    switch (type) {
    case STORE_TYPE_CPU:
        return "process_cpu";
    case STORE_TYPE_HEAP:
    case STORE_TYPE_RETAINED:
        return "memory";
    default:
        return NULL;
    }
}

/* Has one of l[0..n) this name? */
static int has_label(const struct push_label *l, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(l[i].name, name) == 0)
            return 1;
    return 0;
}

/* The labels of one window into l (room for PUSH_MAX_LABELS); isolate is
 * the buffer for its decimal text. Returns the count: the uploader's own,
 * then the window's (its target's, which the store keeps clear of the
 * uploader's names), then the static upload.labels whose name the window
 * does not have (a target's label overrides the global one). The first
 * two always fit (at most 9 + STORE_WINDOW_LABELS_MAX); static labels
 * that would take the series past PUSH_MAX_LABELS are left out, the last
 * ones first, so that the window is still sent. */
static size_t item_labels(const struct upl *u, const struct upl_item *it, struct push_label *l,
                          char isolate[16], int with_meta, uint64_t *cut)
{
    size_t n = 0;
    snprintf(isolate, 16, "%" PRIu32, it->isolate & STORE_ISOLATE_PROCESS);
    /* prepare_work never gets here with a type profile_name does not name. */
    if (with_meta)
        l[n++] = (struct push_label){"__name__", profile_name(it->type)};
    l[n++] = (struct push_label){"service_name", it->worker};
    l[n++] = (struct push_label){"version", it->version};
    l[n++] = (struct push_label){"host", u->host};
    /* The process, not the thread: a thread's own isolate would make a
     * series per Worker a job runner starts. */
    if (u->isolate_label)
        l[n++] = (struct push_label){"isolate", isolate};
    l[n++] = (struct push_label){"runtime", it->runtime[0] ? it->runtime : "unknown"};
    /* Always, "main" too: a query can then select the main thread alone
     * ({thread="main"}), not only a worker's. */
    l[n++] = (struct push_label){"thread", it->thread};
    const char *an = anomaly_label(it);
    if (an != NULL)
        l[n++] = (struct push_label){"anomaly", an};
    /* Both memory types are the heap at one moment (an in-use snapshot,
     * not a delta over the window), the retained one as the heap one. */
    if (with_meta && (it->type == STORE_TYPE_HEAP || it->type == STORE_TYPE_RETAINED))
        l[n++] = (struct push_label){"__delta__", "false"};
    size_t own = n;
    for (size_t i = 0; i < it->nlabels; i++)
        l[n++] = it->labels[i];
    for (size_t i = 0; i < u->nlabels; i++) {
        if (has_label(l + own, it->nlabels, u->labels[i].name))
            continue;
        if (n < PUSH_MAX_LABELS)
            l[n++] = u->labels[i];
        else if (cut != NULL)
            (*cut)++;
    }
    return n;
}

/* --- the PREPARE job (thread pool) ----------------------------------- */

struct peek_ctx {
    size_t src; /* replay: the index of the window being read */
    struct upl_item *items;
    size_t n, cap;
    uint64_t expire_ns; /* windows that started before are expired */
    uint64_t *expired;  /* their ids (UPL_EXPIRE_BATCH) */
    size_t nexpired;
    int err;
};

static void items_free(struct upl_item *it, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        isoprof_free(it[i].worker);
        isoprof_free(it[i].version);
        isoprof_free(it[i].runtime);
        isoprof_free(it[i].thread);
        isoprof_free(it[i].labels);
    }
    isoprof_free(it);
}

/* A copy of the window's labels in it: the array, then the strings. */
static int item_copy_labels(struct upl_item *it, const struct store_window *w)
{
    size_t bytes = w->nlabels * sizeof(*it->labels);
    for (size_t i = 0; i < w->nlabels; i++)
        bytes += strlen(w->labels[i].name) + 1 + strlen(w->labels[i].value) + 1;
    if (w->nlabels == 0)
        return 0;
    struct push_label *l = isoprof_malloc(bytes);
    if (l == NULL)
        return -ENOMEM;
    char *p = (char *)(l + w->nlabels);
    for (size_t i = 0; i < w->nlabels; i++) {
        size_t kl = strlen(w->labels[i].name) + 1, vl = strlen(w->labels[i].value) + 1;
        memcpy(p, w->labels[i].name, kl);
        memcpy(p + kl, w->labels[i].value, vl);
        l[i] = (struct push_label){p, p + kl};
        p += kl + vl;
    }
    it->labels = l;
    it->nlabels = w->nlabels;
    return 0;
}

static int peek_on_window(const struct store_window *w, uint64_t queued_ns, void *arg)
{
    struct peek_ctx *c = arg;
    if (w->start_ns < c->expire_ns) {
        c->expired[c->nexpired++] = w->id;
        return c->nexpired == UPL_EXPIRE_BATCH;
    }
    struct upl_item *it = &c->items[c->n++];
    memset(it, 0, sizeof(*it));
    it->id = w->id;
    it->type = w->type;
    it->anomaly = w->anomaly;
    it->pinned = w->pinned;
    it->isolate = w->isolate;
    it->start_ns = w->start_ns;
    it->end_ns = w->end_ns;
    it->raw_size = w->raw_size;
    it->queued_ns = queued_ns;
    it->urgent = w->anomaly != 0 || w->pinned != 0;
    it->src = c->src;
    it->worker = isoprof_strdup(w->worker);
    it->version = isoprof_strdup(w->version);
    it->runtime = isoprof_strdup(w->runtime);
    /* The store never hands out a window without a thread. Its id stays
     * in the store: the series is named by what the thread runs. */
    const char *th = w->thread ? w->thread : STORE_THREAD_MAIN;
    it->thread = isoprof_asprintf("%.*s", (int)store_thread_label(th), th);
    if (it->worker == NULL || it->version == NULL || it->runtime == NULL || it->thread == NULL ||
        item_copy_labels(it, w) != 0) {
        c->err = -ENOMEM;
        return 1;
    }
    return c->n == c->cap;
}

static int replay_on_window(const struct store_window *w, void *arg)
{
    struct peek_ctx *c = arg;
    int rc = peek_on_window(w, 0, arg);
    c->items[c->n - 1].urgent = 1; /* asked for now: no batch delay */
    return rc;
}

/* Replay: read the next windows of the list into pc (at most pc->cap);
 * *looked receives the ids read. Returns 0 or an error. */
static int replay_peek(struct upl *u, struct peek_ctx *pc, size_t *looked)
{
    size_t i = u->replay_next;
    for (; i < u->nreplay && pc->n < pc->cap; i++) {
        struct store_filter f = {.id = u->replay[i]};
        pc->src = i;
        int rc = store_windows(u->store, &f, replay_on_window, pc);
        if (pc->err != 0)
            return pc->err;
        if (rc != 0 && rc != 1 && rc != ISOPROF_ENOTFOUND)
            return rc;
    }
    *looked = i - u->replay_next;
    return 0;
}

/* The largest legacy name ingest_name can make: as many labels as
 * item_labels can return, each name and (cut) value at its longest, with
 * its '=' and ','. */
#define UPL_INGEST_NAME_MAX                                                                        \
    ((size_t)(UPL_LABELS_OWN + PUSH_MAX_LABELS) * (PUSH_MAX_NAME + PUSH_MAX_VALUE + 2) + 2)

/* Percent-encode s into the buffer (RFC 3986 unreserved kept). */
static void buf_urlenc(struct isoprof_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~') {
            isoprof_buf_putc(b, *p);
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            isoprof_buf_append(b, e, 3);
        }
    }
}

/* The legacy name "app{k=v,...}": the app name keeps [A-Za-z0-9_.-/], label
 * values lose ',' '}' and control bytes (the endpoint cannot escape them). */
static void ingest_name(struct isoprof_buf *b, const struct push_label *l, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char v[PUSH_MAX_VALUE + 1];
        size_t vl = strlen(l[i].value);
        if (vl > PUSH_MAX_VALUE)
            vl = PUSH_MAX_VALUE;
        for (size_t j = 0; j < vl; j++) {
            unsigned char c = (unsigned char)l[i].value[j];
            int ok = strcmp(l[i].name, "service_name") == 0
                         ? (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                               (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-' ||
                               c == '/'
                         : c >= 0x20 && c != 0x7f && c != ',' && c != '}';
            v[j] = ok ? (char)c : '_';
        }
        v[vl] = '\0';
        if (i == 0) {
            isoprof_buf_puts(b, v[0] ? v : "unknown_service");
            isoprof_buf_putc(b, '{');
            continue;
        }
        if (i > 1)
            isoprof_buf_putc(b, ',');
        isoprof_buf_puts(b, l[i].name);
        isoprof_buf_putc(b, '=');
        isoprof_buf_puts(b, v);
    }
    isoprof_buf_putc(b, '}');
}

/* Build the /ingest request of one window: url and multipart body. Both
 * buffers are capped at what the checked labels and the gzip'd window can
 * make, so the caps only stop a broken invariant, never a real window. */
static int build_ingest(struct upl_job *j, const struct upl_item *it, const uint8_t *gz,
                        size_t gzlen)
{
    struct upl *u = j->u;
    struct push_label l[UPL_LABELS_OWN + PUSH_MAX_LABELS];
    char iso[16];
    size_t n = item_labels(u, it, l, iso, 0, NULL); /* l[0] is service_name */
    struct isoprof_buf name, url, body;
    isoprof_buf_init(&name, UPL_INGEST_NAME_MAX);
    ingest_name(&name, l, n);
    isoprof_buf_init(&url, strlen(u->url) + 3 * UPL_INGEST_NAME_MAX + 128);
    isoprof_buf_puts(&url, u->url);
    isoprof_buf_puts(&url, "/ingest?name=");
    int err = name.err;
    if (!err)
        buf_urlenc(&url, name.data);
    isoprof_buf_free(&name);
    uint64_t from = it->start_ns / 1000000000ull;
    uint64_t until = (it->end_ns + 999999999ull) / 1000000000ull;
    if (until <= from)
        until = from + 1;
    isoprof_buf_printf(&url, "&from=%" PRIu64 "&until=%" PRIu64 "&spyName=isoprof", from, until);

    char boundary[40];
    snprintf(boundary, sizeof(boundary), "isoprof-%016" PRIx64 "%08" PRIx32, it->id, it->isolate);
    /* The multipart frame around the profile is under 512 bytes. */
    isoprof_buf_init(&body, gzlen + 512);
    isoprof_buf_reserve(&body, gzlen + 512);
    isoprof_buf_puts(&body, "--");
    isoprof_buf_puts(&body, boundary);
    isoprof_buf_puts(&body, "\r\nContent-Disposition: form-data; name=\"profile\"; "
                            "filename=\"profile.pprof\"\r\n"
                            "Content-Type: application/octet-stream\r\n\r\n");
    isoprof_buf_append(&body, gz, gzlen);
    isoprof_buf_puts(&body, "\r\n--");
    isoprof_buf_puts(&body, boundary);
    isoprof_buf_puts(&body, "--\r\n");
    char *urls = NULL, *bodys = NULL;
    size_t blen = 0;
    if (!err)
        err = isoprof_buf_take(&url, &urls, NULL);
    if (!err)
        err = isoprof_buf_take(&body, &bodys, &blen);
    if (err) {
        isoprof_free(urls);
        isoprof_buf_free(&url);
        isoprof_buf_free(&body);
        return err;
    }
    snprintf(j->ctype, sizeof(j->ctype), "Content-Type: multipart/form-data; boundary=%s",
             boundary);
    j->url = urls;
    j->body = (uint8_t *)bodys;
    j->body_len = blen;
    return 0;
}

/* Reject window it without sending it; why says what is wrong with it. */
static void unsendable(struct upl_job *j, const struct upl_item *it, const char *why)
{
    int rc = j->u->replay ? 0 : store_outbox_reject(j->u->store, &it->id, 1, 0, why);
    if (rc != 0) {
        if (j->err == 0)
            j->err = rc;
        return;
    }
    if (j->unsendable++ == 0) {
        j->unsendable_first = it->id;
        snprintf(j->unsendable_why, sizeof(j->unsendable_why), "%s", why);
    }
    j->more = 1; /* look again: the window behind it may be due */
}

static void prepare_work(struct upl_job *j)
{
    struct upl *u = j->u;
    struct peek_ctx pc = {.cap = j->maxp + 1};
    pc.items = isoprof_calloc(pc.cap, sizeof(*pc.items));
    pc.expired = isoprof_calloc(UPL_EXPIRE_BATCH, sizeof(*pc.expired));
    if (pc.items == NULL || pc.expired == NULL) {
        isoprof_free(pc.items);
        isoprof_free(pc.expired);
        j->err = -ENOMEM;
        return;
    }
    uint64_t late_ns = 0, now = isoprof_now_wall_ns(), age_ns = u->max_age_ms * 1000000ull;
    size_t looked = 0;
    if (u->replay != NULL) {
        pc.cap = j->maxp;
        int rc = replay_peek(u, &pc, &looked);
        isoprof_free(pc.expired);
        pc.expired = NULL;
        if (rc != 0) {
            j->err = rc;
            items_free(pc.items, pc.n);
            return;
        }
        j->consumed = looked;
        goto pick;
    }
    if (u->max_age_ms != 0 && now > age_ns) {
        pc.expire_ns = now - age_ns;
        late_ns = pc.expire_ns + age_ns / UPL_LATE_SHARE;
    }
    int rc = store_outbox_peek_late(u->store, late_ns, pc.expire_ns, SIZE_MAX, peek_on_window, &pc);
    if (pc.err != 0 || (rc != 0 && rc != 1)) {
        j->err = pc.err ? pc.err : rc;
        items_free(pc.items, pc.n);
        isoprof_free(pc.expired);
        return;
    }
    if (pc.nexpired > 0) {
        /* Never sent: the server would refuse them. They stay stored. */
        char why[UPL_REASON_MAX];
        snprintf(why, sizeof(why), "older than upload.max_age (%" PRIu64 " s) when its turn came",
                 u->max_age_ms / 1000);
        if ((rc = store_outbox_expire(u->store, pc.expired, pc.nexpired, why)) != 0) {
            j->err = rc;
            items_free(pc.items, pc.n);
            isoprof_free(pc.expired);
            return;
        }
        j->expired = pc.nexpired;
        j->expired_first = pc.expired[0];
        j->more = 1;
        if (pc.nexpired == UPL_EXPIRE_BATCH) {
            /* More may follow: expire them before any batch is built. */
            items_free(pc.items, pc.n);
            isoprof_free(pc.expired);
            return;
        }
    }
    isoprof_free(pc.expired);
pick:; /* a label takes a statement before a declaration (C17) */
    /* Pick the batch. */
    size_t *pick = isoprof_calloc(pc.n ? pc.n : 1, sizeof(*pick));
    j->ids = isoprof_calloc(pc.n ? pc.n : 1, sizeof(*j->ids));
    if (pick == NULL || j->ids == NULL) {
        j->err = -ENOMEM;
        goto out;
    }
    size_t np = 0;
    uint64_t bytes = 0;
    int full = 0, urgent = 0;
    uint64_t oldest = 0;
    for (size_t i = 0; i < pc.n; i++) {
        struct upl_item *it = &pc.items[i];
        if (profile_name(it->type) == NULL) {
            /* Never sent: taken out of the outbox so it cannot block it. */
            const char *tn = store_type_name(it->type);
            char why[UPL_REASON_MAX];
            snprintf(why, sizeof(why), "%s windows are not uploaded", tn ? tn : "unknown type");
            unsendable(j, it, why);
            continue;
        }
        if (it->raw_size > u->max_profile_size) {
            char why[UPL_REASON_MAX];
            snprintf(why, sizeof(why),
                     "profile of %" PRIu64 " bytes is over upload.max_profile_size (%" PRIu64 ")",
                     it->raw_size, u->max_profile_size);
            unsendable(j, it, why);
            continue;
        }
        if (np >= j->maxp || (np > 0 && bytes + it->raw_size > u->max_bytes)) {
            full = 1;
            j->more = 1;
            if (u->replay != NULL)
                j->consumed = it->src - u->replay_next; /* it and those after go next time */
            break;
        }
        pick[np++] = i;
        bytes += it->raw_size;
        urgent |= it->urgent;
        if (oldest == 0 || it->queued_ns < oldest)
            oldest = it->queued_ns;
    }
    if (np == j->maxp)
        full = 1;
    if (j->err != 0 || np == 0)
        goto out;
    if (!full && !urgent) {
        uint64_t due = oldest + u->max_delay_ms * 1000000ull;
        if (due > isoprof_now_wall_ns()) {
            j->wait_until_ns = due;
            goto out;
        }
    }
    /* Load, gzip and encode the batch. */
    struct push_profile *pp = isoprof_calloc(np, sizeof(*pp));
    struct push_label *lab = isoprof_calloc(np, sizeof(*lab) * (UPL_LABELS_OWN + PUSH_MAX_LABELS));
    char(*iso)[16] = isoprof_calloc(np, 16);
    char(*uuid)[STORE_ID_LEN + 1] = isoprof_calloc(np, STORE_ID_LEN + 1);
    uint8_t **gz = isoprof_calloc(np, sizeof(*gz));
    size_t n = 0;
    if (pp == NULL || lab == NULL || iso == NULL || uuid == NULL || gz == NULL) {
        j->err = -ENOMEM;
        goto out_batch;
    }
    for (size_t k = 0; k < np; k++) {
        struct upl_item *it = &pc.items[pick[k]];
        struct push_label *l = lab + n * (UPL_LABELS_OWN + PUSH_MAX_LABELS);
        size_t nl = item_labels(u, it, l, iso[n], 1, &j->labels_cut);
        size_t bad = 0;
        if (push_label_check(l, nl, &bad) != 0) {
            char why[UPL_REASON_MAX];
            if (bad < nl)
                snprintf(why, sizeof(why),
                         "label %s is not acceptable to the server (empty, too long or not UTF-8)",
                         l[bad].name);
            else
                snprintf(why, sizeof(why), "%zu labels, the server takes %d", nl, PUSH_MAX_LABELS);
            unsendable(j, it, why);
            continue;
        }
        void *raw = NULL;
        size_t rawlen = 0;
        rc = store_load(u->store, it->id, &raw, &rawlen);
        if (rc == ISOPROF_ENOTFOUND)
            continue; /* evicted since the peek: its outbox entry went with it */
        if (rc == ISOPROF_ECORRUPT) {
            unsendable(j, it, "the stored record is damaged (see isoprof store check)");
            continue;
        }
        if (rc != 0) {
            j->err = rc;
            goto out_batch;
        }
        rc = isoprof_gzip(raw, rawlen, &gz[n], &pp[n].len);
        isoprof_free(raw);
        if (rc != 0) {
            j->err = rc;
            goto out_batch;
        }
        store_id_format(u->store, it->id, uuid[n]);
        pp[n].raw = gz[n];
        pp[n].id = uuid[n];
        pp[n].labels = l;
        pp[n].nlabels = nl;
        j->ids[n] = it->id;
        j->raw_bytes += rawlen;
        if (u->api == UPL_API_INGEST) {
            rc = build_ingest(j, it, gz[n], pp[n].len);
            if (rc != 0) {
                j->err = rc;
                goto out_batch;
            }
        }
        n++;
    }
    j->n = n;
    if (n > 0 && u->api == UPL_API_PUSH) {
        rc = push_encode(pp, n, &j->body, &j->body_len, NULL);
        if (rc != 0)
            j->err = rc;
        snprintf(j->ctype, sizeof(j->ctype), "Content-Type: application/proto");
    }
    if (n == 0)
        j->more = 1;
out_batch:
    for (size_t k = 0; gz != NULL && k < np; k++)
        isoprof_free(gz[k]);
    isoprof_free(gz);
    isoprof_free(uuid);
    isoprof_free(iso);
    isoprof_free(lab);
    isoprof_free(pp);
out:
    /* A job that failed sends nothing. */
    if (j->err != 0)
        j->n = 0;
    isoprof_free(pick);
    items_free(pc.items, pc.n);
}

static void job_work(uv_work_t *req)
{
    struct upl_job *j = container_of(req, struct upl_job, req);
    switch (j->kind) {
    case JOB_PREPARE:
        prepare_work(j);
        break;
    case JOB_ACK:
        if (j->u->replay == NULL)
            j->err = store_outbox_ack(j->u->store, j->ids, j->n);
        break;
    case JOB_REJECT:
        if (j->u->replay == NULL)
            j->err = store_outbox_reject(j->u->store, j->ids, j->n, (unsigned)j->code, j->reason);
        break;
    case JOB_EXPIRE:
        if (j->u->replay == NULL)
            j->err = store_outbox_expire(j->u->store, j->ids, j->n, j->reason);
        break;
    }
}

static void job_free(struct upl_job *j)
{
    if (j == NULL)
        return;
    isoprof_free(j->ids);
    isoprof_free(j->body);
    isoprof_free(j->url);
    isoprof_free(j);
}

/* --- the loop side --------------------------------------------------- */

/* Free s after overwriting it: it may hold a credential. */
static void wipe_free(char *s)
{
    if (s != NULL) {
        explicit_bzero(s, strlen(s));
        isoprof_free(s);
    }
}

static void upl_free(struct upl *u)
{
    void (*closed)(void *) = u->closed_cb;
    void *closed_arg = u->closed_arg;
    job_free(u->settle_retry);
    isoprof_free(u->replay);
    isoprof_free(u->url);
    isoprof_free(u->push_url);
    isoprof_free(u->host);
    isoprof_free(u->ca_file);
    wipe_free(u->userpwd);
    for (size_t i = 0; i < u->nheaders; i++)
        wipe_free(u->headers[i]);
    isoprof_free(u->headers);
    for (size_t i = 0; i < u->nlabels; i++) {
        isoprof_free((char *)u->labels[i].name);
        isoprof_free((char *)u->labels[i].value);
    }
    isoprof_free(u->labels);
    isoprof_free(u);
    if (closed != NULL)
        closed(closed_arg);
}

static void timer_on_close(uv_handle_t *h)
{
    struct upl *u = container_of((uv_timer_t *)h, struct upl, timer);
    u->timer.data = NULL;
    if (u->state != ST_PREPARE && u->state != ST_STORE)
        upl_free(u);
}

static int start_job(struct upl *u, struct upl_job *j);
static void upl_wait(struct upl *u, enum upl_state st, uint64_t ms);

static void send_batch(struct upl *u, struct upl_job *j);

/* --- the rate budget (pure; see upload.h) ---------------------------- */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* n as a bucket amount: the bucket never holds more than INT64_MAX / 2,
 * so that a take after it cannot overflow. */
static int64_t pace_amount(uint64_t n)
{
    return n > (uint64_t)INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)n;
}

void upl_pacer_init(struct upl_pacer *p, uint64_t max_rate, uint64_t now_ms)
{
    memset(p, 0, sizeof(*p));
    p->max_rate = max_rate;
    p->start_ms = now_ms;
    p->slot = now_ms / UPL_PACE_SLOT_MS;
    p->tokens = pace_amount(max_rate);
    p->tokens_ms = now_ms;
}

uint64_t upl_pacer_production(const struct upl_pacer *p, uint64_t now_ms)
{
    if (p->last_ms == 0)
        return 0;
    uint64_t cur = now_ms / UPL_PACE_SLOT_MS;
    if (cur < p->slot)
        cur = p->slot; /* a clock that went back reads as the newest slot */
    uint64_t oldest = cur >= UPL_PACE_SLOTS - 1 ? cur - (UPL_PACE_SLOTS - 1) : 0;
    uint64_t sum = 0;
    /* slots newer than p->slot were never written; those at or before
     * p->slot - UPL_PACE_SLOTS hold another slot's bytes */
    for (uint64_t k = oldest; k <= p->slot; k++)
        if (k + UPL_PACE_SLOTS > p->slot)
            sum = sat_add(sum, p->bytes[k % UPL_PACE_SLOTS]);
    uint64_t from = oldest * UPL_PACE_SLOT_MS;
    if (from < p->start_ms)
        from = p->start_ms;
    /* Within the first span the time ends at the last bytes queued: see
     * upload.h (bursts read low between them otherwise). */
    uint64_t to = now_ms - p->start_ms >= UPL_PACE_SPAN_MS ? now_ms : p->last_ms;
    uint64_t span = to > from ? to - from : 0;
    if (span < UPL_PACE_SLOT_MS)
        span = UPL_PACE_SLOT_MS;
    return sum > UINT64_MAX / 1000 ? sum / span * 1000 : sum * 1000 / span;
}

/* What the bucket fills at now_ms: production + max_rate a second. */
static uint64_t pace_rate(const struct upl_pacer *p, uint64_t now_ms)
{
    return sat_add(upl_pacer_production(p, now_ms), p->max_rate);
}

/* Refill the bucket to now_ms at the rate of now_ms. It holds at most one
 * second's worth, so the burst after an idle spell, and what a fleet
 * coming back from one outage sends at once, is one second of the rate. A
 * batch larger than that goes once the bucket is full and leaves it in
 * debt (negative), so the rate holds over time whatever the batch size. */
static void pace_refill(struct upl_pacer *p, uint64_t now_ms)
{
    uint64_t r = pace_rate(p, now_ms);
    int64_t cap = pace_amount(r);
    if (now_ms > p->tokens_ms) {
        uint64_t dt = now_ms - p->tokens_ms;
        uint64_t add = r != 0 && dt > UINT64_MAX / r ? UINT64_MAX : dt * r / 1000;
        int64_t room = cap - p->tokens; /* > 0 unless full */
        p->tokens = room <= 0 || add >= (uint64_t)room ? cap : p->tokens + (int64_t)add;
        p->tokens_ms = now_ms;
    } else if (p->tokens > cap) {
        p->tokens = cap; /* the production rate fell */
    }
}

void upl_pacer_queued(struct upl_pacer *p, uint64_t now_ms, uint64_t bytes)
{
    if (bytes == 0)
        return;
    /* the time before these bytes filled the bucket at the rate without them */
    pace_refill(p, now_ms);
    uint64_t s = now_ms / UPL_PACE_SLOT_MS;
    if (s > p->slot) {
        uint64_t n = s - p->slot < UPL_PACE_SLOTS ? s - p->slot : UPL_PACE_SLOTS;
        for (uint64_t i = 1; i <= n; i++)
            p->bytes[(p->slot + i) % UPL_PACE_SLOTS] = 0;
        p->slot = s;
    }
    p->bytes[p->slot % UPL_PACE_SLOTS] = sat_add(p->bytes[p->slot % UPL_PACE_SLOTS], bytes);
    if (now_ms > p->last_ms)
        p->last_ms = now_ms;
}

uint64_t upl_pacer_wait_ms(struct upl_pacer *p, uint64_t now_ms, uint64_t bytes)
{
    if (p->max_rate == 0)
        return 0;
    pace_refill(p, now_ms);
    uint64_t r = pace_rate(p, now_ms);
    int64_t need = pace_amount(bytes < r ? bytes : r);
    if (p->tokens >= need)
        return 0;
    uint64_t lack = (uint64_t)(need - p->tokens);
    return lack > UINT64_MAX / 1000 ? lack / r * 1000 : (lack * 1000 + r - 1) / r;
}

void upl_pacer_take(struct upl_pacer *p, uint64_t now_ms, uint64_t bytes)
{
    if (p->max_rate == 0)
        return;
    pace_refill(p, now_ms);
    p->tokens -= pace_amount(bytes);
}

/* How long a request of bytes (uncompressed) must wait for the bucket. */
static uint64_t rate_wait_ms(struct upl *u, uint64_t bytes)
{
    return upl_pacer_wait_ms(&u->pace, uv_now(u->loop), bytes);
}

static void rate_take(struct upl *u, uint64_t bytes)
{
    upl_pacer_take(&u->pace, uv_now(u->loop), bytes);
}

/* The batch held in ST_RATE: send it if the bucket has its bytes now,
 * else wait again (the production rate may have changed the wait). */
static void rate_check(struct upl *u)
{
    struct upl_job *held = u->job;
    uint64_t ms = rate_wait_ms(u, held->raw_bytes);
    if (ms > 0) {
        upl_wait(u, ST_RATE, ms);
        return;
    }
    rate_take(u, held->raw_bytes);
    send_batch(u, held);
}

static void timer_on_fire(uv_timer_t *t)
{
    struct upl *u = container_of(t, struct upl, timer);
    if (u->state == ST_RATE) {
        rate_check(u);
        return;
    }
    u->state = ST_IDLE;
    struct upl_job *j = u->settle_retry;
    if (j != NULL) {
        /* Only the ack (or reject) again: the server has the batch. */
        u->settle_retry = NULL;
        if (start_job(u, j) != 0) {
            u->settle_retry = j;
            upl_wait(u, ST_BACKOFF, u->bmin);
        }
        return;
    }
    upl_kick(u);
}

static void upl_wait(struct upl *u, enum upl_state st, uint64_t ms)
{
    u->state = st;
    uv_timer_start(&u->timer, timer_on_fire, ms, 0);
}

static void retry_later(struct upl *u, int err, long code, long retry_after_s, size_t profiles,
                        uint64_t bytes, uint64_t first_id, const char *why)
{
    /* Retry-After: the server said when; it does not move the doubling. */
    uint64_t ra = retry_after_s > 0 ? (uint64_t)retry_after_s * 1000 : 0;
    uint64_t d = upl_backoff_ms(u->bmin, u->bmax, u->attempt, ra, isoprof_rng_next(&u->rng));
    if (ra == 0 && u->attempt < 64)
        u->attempt++;
    emit(u, UPL_EV_RETRY, err, code, profiles, bytes, d, first_id, why);
    upl_wait(u, ST_BACKOFF, d);
}

static void job_after(uv_work_t *req, int status);

/* Queue j in the thread pool. On failure j is untouched (the caller's). */
static int start_job(struct upl *u, struct upl_job *j)
{
    j->u = u;
    u->job = j;
    u->state = j->kind == JOB_PREPARE ? ST_PREPARE : ST_STORE;
    int rc = uv_queue_work(u->loop, &j->req, job_work, job_after);
    if (rc != 0) {
        u->job = NULL;
        u->state = ST_IDLE;
    }
    return rc;
}

/* Take the sent batch j out of the outbox (ack) or mark it rejected; the
 * job is reused, its body freed. A settle that cannot run now is retried
 * alone after a backoff: resending the batch would duplicate it. */
static void settle(struct upl *u, struct upl_job *j, enum job_kind kind, long code,
                   const char *reason)
{
    isoprof_free(j->body);
    isoprof_free(j->url);
    j->body = NULL;
    j->url = NULL;
    j->body_len = 0;
    j->kind = kind;
    j->code = code;
    j->err = 0;
    j->reason[0] = '\0';
    if (reason)
        snprintf(j->reason, sizeof(j->reason), "%s", reason);
    u->job = NULL;
    if (start_job(u, j) != 0) {
        u->settle_retry = j;
        upl_wait(u, ST_BACKOFF, u->bmin);
    }
}

static int retryable(long code)
{
    /* Only a 4xx says something is wrong with the profiles. 401/403/404
     * say the agent is misconfigured (credentials, URL): keep the profiles
     * and keep trying. A 3xx is a redirect that is never followed (the URL
     * wants fixing), 1xx and other oddities too: keep trying. */
    if (code < 400 || code >= 500)
        return 1;
    return code == 401 || code == 403 || code == 404 || code == 408 || code == 429;
}

/* Where in body[0..len) needle starts, or NULL. */
static const char *find(const char *body, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; body != NULL && n <= len && i <= len - n; i++)
        if (memcmp(body + i, needle, n) == 0)
            return body + i;
    return NULL;
}

/* What a refusal says of the profile's time: 1 older than the server's
 * ingestion window, 2 newer (this clock is ahead of it), 0 neither; *at
 * receives where the telling part starts (for the reason kept). Grafana
 * Pyroscope says "profile with labels '{...}' is outside of ingestion
 * window (profile timestamp: T, the ingestion window starts at S)" when
 * too old, "... ends at E" when too new, after every label of the series:
 * the whole body is searched, not the reason's first bytes. Other servers
 * say "too old" / "too new". */
static int window_verdict(const char *body, size_t len, const char **at)
{
    const char *w = find(body, len, "outside of ingestion window");
    *at = w ? w : body;
    if (find(body, len, "ingestion window starts at") != NULL || find(body, len, "too old") != NULL)
        return 1;
    if (find(body, len, "ingestion window ends at") != NULL || find(body, len, "too new") != NULL ||
        find(body, len, "in the future") != NULL)
        return 2;
    return 0;
}

static void resp_on_done(const struct http_resp *r, void *arg)
{
    struct upl *u = arg;
    struct upl_job *j = u->job;
    u->inflight = NULL;
    u->st.requests++;
    /* The server answers again after an outage: whatever it says, the
     * delays the outage built up are over. */
    if (r->status == 0 && u->net_failing)
        u->attempt = 0;
    u->net_failing = r->status != 0;
    if (r->status != 0)
        u->st.requests_error++;
    else if (r->code >= 200 && r->code < 300)
        u->st.requests_2xx++;
    else if (r->code >= 400 && r->code < 500)
        u->st.requests_4xx++;
    else if (r->code >= 500 && r->code < 600)
        u->st.requests_5xx++;
    else
        u->st.requests_error++;
    uint64_t first = j->n ? j->ids[0] : 0;
    char why[UPL_REASON_MAX];
    clean_copy(why, sizeof(why), r->body ? r->body : "", r->body ? r->len : 0);
    if (r->status == 0 && r->code >= 200 && r->code < 300) {
        u->st.requests_ok++;
        u->st.profiles_sent += j->n;
        u->st.bytes_sent += j->body_len;
        u->attempt = 0;
        emit(u, UPL_EV_SENT, 0, r->code, j->n, j->body_len, 0, first, "");
        if (u->solo > 0)
            u->solo = u->solo > j->n ? u->solo - j->n : 0;
        settle(u, j, JOB_ACK, r->code, NULL);
        return;
    }
    u->st.requests_failed++;
    if (r->status != 0 || retryable(r->code)) {
        const char *w = r->status != 0 ? (r->why ? r->why : isoprof_strerror(r->status)) : why;
        size_t n = j->n;
        uint64_t bytes = j->body_len;
        job_free(j);
        u->job = NULL;
        retry_later(u, r->status, r->status ? 0 : r->code, r->retry_after_s, n, bytes, first, w);
        return;
    }
    if (j->n > 1) {
        /* Refused as a whole: find the window(s) it refuses, one a request. */
        u->solo = j->n;
        size_t n = j->n;
        job_free(j);
        u->job = NULL;
        emit(u, UPL_EV_RETRY, 0, r->code, n, 0, 0, first, why);
        u->state = ST_IDLE;
        upl_kick(u);
        return;
    }
    if (u->solo > 0)
        u->solo--;
    const char *at = NULL;
    int verdict = window_verdict(r->body, r->body ? r->len : 0, &at);
    if (verdict != 0 && at != NULL && at != r->body) /* the part that says why */
        clean_copy(why, sizeof(why), at, r->len - (size_t)(at - r->body));
    if (verdict == 1) {
        /* Left the server's window on the way (or the server's is shorter
         * than max_age): the same as expiring it here. */
        u->st.profiles_expired += j->n;
        emit(u, UPL_EV_EXPIRED, 0, r->code, j->n, j->body_len, 0, first, why);
        settle(u, j, JOB_EXPIRE, r->code, why);
        return;
    }
    u->st.profiles_rejected += j->n;
    if (verdict == 2) {
        u->st.profiles_too_new += j->n;
        emit(u, UPL_EV_CLOCK_SKEW, 0, r->code, j->n, j->body_len, 0, first, why);
    } else {
        emit(u, UPL_EV_REJECTED, 0, r->code, j->n, j->body_len, 0, first, why);
    }
    settle(u, j, JOB_REJECT, r->code, why);
}

static void send_batch(struct upl *u, struct upl_job *j)
{
    const char *hdr[64];
    size_t nh = 0;
    hdr[nh++] = j->ctype;
    for (size_t i = 0; i < u->nheaders && nh < 64; i++)
        hdr[nh++] = u->headers[i];
    struct http_opts o = {.method = "POST",
                          .body = j->body,
                          .body_len = j->body_len,
                          .headers = hdr,
                          .nheaders = nh,
                          .max_body = UPL_MAX_RESPONSE,
                          .timeout_ms = u->timeout_ms,
                          .allow_https = 1,
                          .ca_file = u->ca_file,
                          .insecure = u->insecure,
                          .userpwd = u->userpwd};
    u->job = j;
    u->state = ST_SENDING;
    int rc =
        http_request(u->http, j->url ? j->url : u->push_url, &o, resp_on_done, u, &u->inflight);
    if (rc != 0) {
        size_t n = j->n;
        uint64_t first = j->ids[0];
        job_free(j);
        u->job = NULL;
        u->st.requests_failed++;
        retry_later(u, rc, 0, -1, n, 0, first, isoprof_strerror(rc));
    }
}

static void job_after(uv_work_t *req, int status)
{
    struct upl_job *j = container_of(req, struct upl_job, req);
    struct upl *u = j->u;
    u->job = NULL;
    if (u->closing) {
        job_free(j);
        if (u->timer.data == NULL)
            upl_free(u);
        else
            u->state = ST_IDLE; /* the timer's close callback frees u */
        return;
    }
    int notified = u->notified;
    u->notified = 0;
    if (status != 0 || j->err != 0) {
        int err = status != 0 ? status : j->err;
        u->st.store_errors++;
        emit(u, UPL_EV_STORE_ERROR, err, 0, j->n, 0, 0, 0, isoprof_strerror(err));
        uint64_t d = upl_backoff_ms(u->bmin, u->bmax, u->attempt, 0, isoprof_rng_next(&u->rng));
        if (u->attempt < 64)
            u->attempt++;
        if (j->kind == JOB_PREPARE) {
            job_free(j);
        } else {
            j->err = 0;
            u->settle_retry = j; /* the batch was delivered: settle it, do not resend */
        }
        upl_wait(u, ST_BACKOFF, d);
        return;
    }
    if (j->kind != JOB_PREPARE) {
        /* Replay: the ids this batch took (sent, refused or skipped) are
         * done; a batch refused as a whole was freed before this, so its
         * ids go again, one a request. */
        if (u->replay != NULL)
            u->replay_next += j->consumed;
        job_free(j);
        u->state = ST_IDLE;
        upl_kick(u);
        return;
    }
    u->st.labels_cut += j->labels_cut;
    if (j->expired > 0) {
        u->st.profiles_expired += j->expired;
        emit(u, UPL_EV_EXPIRED, 0, 0, j->expired, 0, 0, j->expired_first, "");
    }
    if (j->unsendable > 0) {
        u->st.profiles_unsendable += j->unsendable;
        emit(u, UPL_EV_UNSENDABLE, 0, 0, j->unsendable, 0, 0, j->unsendable_first,
             j->unsendable_why);
    }
    if (j->n > 0) {
        uint64_t ms = rate_wait_ms(u, j->raw_bytes);
        if (ms > 0) {
            u->st.rate_waits++;
            u->job = j;
            upl_wait(u, ST_RATE, ms);
            return;
        }
        rate_take(u, j->raw_bytes);
        send_batch(u, j);
        return;
    }
    if (u->replay != NULL) {
        /* Nothing to send in what was read (all unsendable or gone). */
        u->replay_next += j->consumed;
        job_free(j);
        u->state = ST_IDLE;
        if (u->replay_next < u->nreplay)
            upl_kick(u);
        else
            emit(u, UPL_EV_DONE, 0, 0, 0, 0, 0, 0, "");
        return;
    }
    uint64_t wait = j->wait_until_ns;
    int more = j->more;
    job_free(j);
    if (wait != 0) {
        uint64_t now = isoprof_now_wall_ns();
        uint64_t ms = wait > now ? (wait - now + 999999) / 1000000 : 0;
        if (notified)
            ms = 0;
        upl_wait(u, ST_WAIT, ms);
        return;
    }
    u->state = ST_IDLE;
    if (more || notified)
        upl_kick(u);
}

/* Start a PREPARE job if idle. */
static void upl_kick(struct upl *u)
{
    if (u->closing || u->state != ST_IDLE)
        return;
    struct upl_job *j = isoprof_calloc(1, sizeof(*j));
    if (j == NULL) {
        upl_wait(u, ST_BACKOFF, u->bmin);
        return;
    }
    j->kind = JOB_PREPARE;
    j->maxp = u->api == UPL_API_INGEST || u->solo > 0 ? 1 : u->max_profiles;
    if (start_job(u, j) != 0) {
        job_free(j);
        upl_wait(u, ST_BACKOFF, u->bmin);
    }
}

void upl_notify(struct upl *u, uint64_t bytes)
{
    if (u == NULL || u->closing)
        return;
    upl_pacer_queued(&u->pace, uv_now(u->loop), bytes);
    switch (u->state) {
    case ST_IDLE:
        upl_kick(u);
        break;
    case ST_WAIT:
        /* The batch may be full now; look again. */
        uv_timer_stop(&u->timer);
        u->state = ST_IDLE;
        upl_kick(u);
        break;
    case ST_PREPARE:
        u->notified = 1;
        break;
    case ST_RATE:
        /* The production rate rose: the batch may go sooner. */
        if (bytes > 0) {
            uv_timer_stop(&u->timer);
            rate_check(u);
        }
        break;
    default: /* sending, storing or backing off: the next look sees them */
        break;
    }
}

void upl_stats(const struct upl *u, struct upl_stats *st)
{
    *st = u->st;
}

static char *header_line(const char *name, const char *value)
{
    return isoprof_asprintf("%s: %s", name, value);
}

int upl_init(uv_loop_t *loop, struct http_client *c, struct store *s, const struct upl_options *o,
             upl_event_cb cb, void *arg, struct upl **out)
{
    if (loop == NULL || c == NULL || s == NULL || o == NULL || out == NULL || o->url == NULL ||
        o->host == NULL || o->max_profiles == 0 || o->max_bytes == 0 || o->max_profile_size == 0 ||
        o->timeout_ms == 0 || (o->nheaders > 0 && o->headers == NULL) ||
        (o->nlabels > 0 && o->labels == NULL) || o->nheaders > 48 ||
        o->nlabels > PUSH_MAX_LABELS - UPL_LABELS_OWN || (o->replay != NULL && o->nreplay == 0))
        return -EINVAL;
    if (strncmp(o->url, "http://", 7) != 0 && strncmp(o->url, "https://", 8) != 0)
        return -EINVAL;
    for (size_t i = 0; i < o->nlabels; i++)
        for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(upl_own_labels); k++)
            if (o->labels[i].name != NULL && strcmp(o->labels[i].name, upl_own_labels[k]) == 0)
                return -EINVAL;
    struct upl *u = isoprof_calloc(1, sizeof(*u));
    if (u == NULL)
        return -ENOMEM;
    u->loop = loop;
    u->http = c;
    u->store = s;
    u->cb = cb;
    u->cb_arg = arg;
    u->api = o->api;
    u->timeout_ms = o->timeout_ms;
    u->max_profiles = o->max_profiles;
    u->max_bytes = o->max_bytes;
    u->max_delay_ms = o->max_delay_ms;
    u->max_profile_size = o->max_profile_size;
    u->bmin = o->backoff_min_ms ? o->backoff_min_ms : UPL_BACKOFF_MIN_MS;
    u->bmax = o->backoff_max_ms ? o->backoff_max_ms : UPL_BACKOFF_MAX_MS;
    if (u->bmin > u->bmax)
        u->bmin = u->bmax;
    u->insecure = o->insecure;
    u->max_age_ms = o->max_age_ms;
    upl_pacer_init(&u->pace, o->max_rate, uv_now(loop));
    u->isolate_label = o->isolate_label;
    if (o->replay != NULL && o->nreplay > 0) {
        u->replay = isoprof_calloc(o->nreplay, sizeof(*u->replay));
        if (u->replay == NULL) {
            isoprof_free(u);
            return -ENOMEM;
        }
        memcpy(u->replay, o->replay, o->nreplay * sizeof(*u->replay));
        u->nreplay = o->nreplay;
    }
    isoprof_rng_init(&u->rng);
    size_t ul = strlen(o->url);
    while (ul > 0 && o->url[ul - 1] == '/')
        ul--;
    u->url = isoprof_asprintf("%.*s", (int)ul, o->url);
    u->push_url = isoprof_asprintf("%.*s/push.v1.PusherService/Push", (int)ul, o->url);
    u->host = isoprof_strdup(o->host);
    u->ca_file = o->ca_file && o->ca_file[0] ? isoprof_strdup(o->ca_file) : NULL;
    u->userpwd = o->userpwd ? isoprof_strdup(o->userpwd) : NULL;
    int oom = u->url == NULL || u->push_url == NULL || u->host == NULL ||
              (o->ca_file && o->ca_file[0] && u->ca_file == NULL) ||
              (o->userpwd && u->userpwd == NULL);
    u->headers = isoprof_calloc(o->nheaders + 4, sizeof(*u->headers));
    oom |= u->headers == NULL;
    if (!oom) {
        /* libcurl would add "Expect: 100-continue" to a large body; a
         * server that does not answer it costs a second per request. */
        u->headers[u->nheaders++] = isoprof_strdup("Expect:");
        if (o->api == UPL_API_PUSH)
            u->headers[u->nheaders++] = isoprof_strdup("Connect-Protocol-Version: 1");
        if (o->tenant_id && o->tenant_id[0])
            u->headers[u->nheaders++] = header_line("X-Scope-OrgID", o->tenant_id);
        if (o->bearer && o->bearer[0])
            u->headers[u->nheaders++] = header_line("Authorization", "Bearer ");
        for (size_t i = 0; i < o->nheaders; i++)
            u->headers[u->nheaders++] = header_line(o->headers[i].name, o->headers[i].value);
        for (size_t i = 0; i < u->nheaders; i++)
            oom |= u->headers[i] == NULL;
    }
    if (!oom && o->bearer && o->bearer[0]) {
        /* Built apart so the token is never in a format string's output
         * that could be logged. */
        for (size_t i = 0; i < u->nheaders; i++) {
            if (strcmp(u->headers[i], "Authorization: Bearer ") == 0) {
                char *h = isoprof_asprintf("Authorization: Bearer %s", o->bearer);
                if (h == NULL) {
                    oom = 1;
                } else {
                    isoprof_free(u->headers[i]);
                    u->headers[i] = h;
                }
            }
        }
    }
    u->labels = isoprof_calloc(o->nlabels ? o->nlabels : 1, sizeof(*u->labels));
    oom |= u->labels == NULL;
    for (size_t i = 0; !oom && i < o->nlabels; i++) {
        u->labels[i].name = isoprof_strdup(o->labels[i].name);
        u->labels[i].value = isoprof_strdup(o->labels[i].value);
        u->nlabels++;
        oom |= u->labels[i].name == NULL || u->labels[i].value == NULL;
    }
    if (oom) {
        upl_free(u);
        return -ENOMEM;
    }
    uv_timer_init(loop, &u->timer);
    u->timer.data = u;
    u->state = ST_IDLE;
    upl_kick(u);
    *out = u;
    return 0;
}

void upl_close(struct upl *u)
{
    upl_close_then(u, NULL, NULL);
}

void upl_close_then(struct upl *u, void (*closed)(void *arg), void *arg)
{
    if (u == NULL || u->closing)
        return;
    u->closing = 1;
    u->closed_cb = closed;
    u->closed_arg = arg;
    if (u->inflight != NULL) {
        http_cancel(u->inflight);
        u->inflight = NULL;
    }
    if (u->state == ST_SENDING || u->state == ST_RATE) {
        job_free(u->job);
        u->job = NULL;
        u->state = ST_IDLE;
    }
    /* A prepare not yet running is dropped; an ack or reject is let run,
     * or the next start would send its batch again. */
    if (u->state == ST_PREPARE)
        uv_cancel((uv_req_t *)&u->job->req); /* may fail: it runs; job_after then frees */
    uv_close((uv_handle_t *)&u->timer, timer_on_close);
}

/*
 * test_upload.c - the outbox drain (uploader/upload.c) end to end: a real
 * store with its outbox in a temporary directory, an uploader on the
 * test's own loop, and the loopback server answering each request as the
 * test scripts it. Outcomes are read back from the store (outbox, upload
 * state, rejection) and from the exact requests the server received
 * (Push bodies decoded with the generated decoder, profiles gunzip'd and
 * compared with the stored bytes; /ingest URLs and multipart bodies).
 */
#include "base.h"
#include "http.h"
#include "push.h"
#include "push.pb-c.h"
#include "store.h"
#include "test.h"
#include "types.pb-c.h"
#include "upload.h"

#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>
#include <zlib.h>

#include "loopback.h"
#include "scratch.h"

#define SEC 1000000000ull
#define T0 (1764000000ull * SEC) /* a fixed wall-clock origin for window starts */

#define OK_ANSWER "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
#define ANSWER_503                                                                                 \
    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy"
#define ANSWER_429                                                                                 \
    "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 4\r\n"                    \
    "Connection: close\r\n\r\nslow"
#define BAD_REASON "invalid profile: sample type mismatch"
#define ANSWER_400                                                                                 \
    "HTTP/1.1 400 Bad Request\r\nContent-Length: 37\r\nConnection: close\r\n\r\n" BAD_REASON

/* --- answers ---------------------------------------------------------- */

/* The answers to requests 0, 1, ...; past n, 200. "HANG" never answers. */
struct script {
    const char *seq[8];
    size_t n;
};

static const char *script_answer(struct server *s, const char *req, size_t len, void *arg)
{
    (void)req;
    (void)len;
    const struct script *sc = arg;
    size_t i = (size_t)s->requests - 1;
    const char *a = sc != NULL && i < sc->n ? sc->seq[i] : OK_ANSWER;
    return strcmp(a, "HANG") == 0 ? NULL : a;
}

/* --- the fixture ----------------------------------------------------- */

struct fx {
    uv_loop_t loop;
    uv_timer_t tick; /* wakes run_until while nothing else happens */
    struct http_client *http;
    struct server srv;
    char *dir;
    struct store *st;
    struct upl *u;
    struct upl_options o;
    char url[64];
    uint64_t next_start;
    int incompressible;               /* put random payloads (gzip does not shrink them) */
    const char *thread;               /* the thread of the windows put (NULL: the store's "main") */
    const struct store_label *labels; /* the labels of the windows put */
    size_t nlabels;
    uint64_t want; /* windows uploaded() waits for */
    /* events */
    int ev[UPL_EV_DONE + 1];
    int ev_after_close;
    int closed;
    long last_code;
    int last_err;
    char last_why[256];
};

static void on_event(const struct upl_event *ev, void *arg)
{
    struct fx *f = arg;
    if (f->closed)
        f->ev_after_close++;
    f->ev[ev->kind]++;
    f->last_code = ev->code;
    f->last_err = ev->err;
    snprintf(f->last_why, sizeof(f->last_why), "%s", ev->why);
}

static void tick_on_fire(uv_timer_t *t)
{
    (void)t;
}

/* Loop, client, server answering with answer(arg) (NULL: script_answer),
 * store with its outbox, and options for fast tests. */
static int fx_init(struct fx *f, server_answer_fn answer, void *arg)
{
    memset(f, 0, sizeof(*f));
    if (uv_loop_init(&f->loop) != 0 || http_client_init(&f->loop, &f->http) != 0)
        return -1;
    uv_timer_init(&f->loop, &f->tick);
    uv_timer_start(&f->tick, tick_on_fire, 5, 5);
    server_start_with(&f->loop, &f->srv, ANSWER, NULL, answer ? answer : script_answer, arg);
    snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%d/", f->srv.port);
    f->dir = tmp_dir();
    char path[300];
    snprintf(path, sizeof(path), "%s/store", f->dir);
    struct store_options so = {.outbox = 1};
    char *why = NULL;
    int rc = store_open(path, &so, &f->st, &why);
    if (rc != 0) {
        fprintf(stderr, "store_open: %s: %s\n", isoprof_strerror(rc), why ? why : "");
        isoprof_free(why);
        return -1;
    }
    f->o = (struct upl_options){.api = UPL_API_PUSH,
                                .url = f->url,
                                .host = "host-1",
                                .timeout_ms = 5000,
                                .max_profiles = 10,
                                .max_bytes = 1u << 20,
                                .max_delay_ms = 0,
                                .max_profile_size = 1u << 20,
                                .backoff_min_ms = 20,
                                .backoff_max_ms = 200};
    f->next_start = T0;
    return 0;
}

static int fx_start(struct fx *f)
{
    return upl_init(&f->loop, f->http, f->st, &f->o, on_event, f, &f->u);
}

static void fx_close_upl(struct fx *f)
{
    if (f->u != NULL)
        upl_close(f->u);
    f->u = NULL;
    f->closed = 1;
}

/* Close everything; the loop must close cleanly and no event may follow
 * upl_close. */
static void fx_done(struct fx *f)
{
    fx_close_upl(f);
    http_client_close(f->http);
    server_stop(&f->srv);
    uv_close((uv_handle_t *)&f->tick, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    uv_walk(&f->loop, server_close_walk, &f->srv);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&f->loop), 0);
    CHECK_EQ_INT(f->ev_after_close, 0);
    store_close(f->st);
    tmp_remove(f->dir);
}

/* REQUIRE for a test holding fixture f: on failure it closes everything
 * (so nothing outlives the test's stack frame) and removes the store. */
#define FX_REQUIRE(f, expr)                                                                        \
    do {                                                                                           \
        CHECK(expr);                                                                               \
        if (test_failed_) {                                                                        \
            fx_done(f);                                                                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* Run the loop until cond(f) holds or ms pass; returns cond's last value. */
static int run_until(struct fx *f, int (*cond)(struct fx *), uint64_t ms)
{
    uv_update_time(&f->loop);
    uint64_t end = uv_now(&f->loop) + ms;
    int ok;
    while (!(ok = cond(f)) && uv_now(&f->loop) < end) {
        uv_run(&f->loop, UV_RUN_ONCE);
        uv_update_time(&f->loop);
    }
    return ok;
}

static int never(struct fx *f)
{
    (void)f;
    return 0;
}

/* Run for ms whatever happens. */
static void run_for(struct fx *f, uint64_t ms)
{
    run_until(f, never, ms);
}

static struct store_stat stat_of(struct fx *f)
{
    struct store_stat st;
    memset(&st, 0, sizeof(st));
    CHECK_EQ_INT(store_stat(f->st, &st), 0);
    return st;
}

static int outbox_empty(struct fx *f)
{
    return stat_of(f).outbox_pending == 0;
}

/* The outbox is empty and f->want windows were acknowledged. */
static int uploaded(struct fx *f)
{
    struct store_stat st = stat_of(f);
    return st.outbox_pending == 0 && st.outbox_uploaded == f->want;
}

static int replay_done(struct fx *f)
{
    return f->ev[UPL_EV_DONE] > 0;
}

static int one_request(struct fx *f)
{
    return f->srv.requests >= 1;
}

/* Store one window of len payload bytes; its id. */
static uint64_t put_full(struct fx *f, const char *worker, const char *version, uint32_t isolate,
                         uint8_t type, size_t len, uint8_t anomaly)
{
    uint8_t *p = isoprof_malloc(len ? len : 1);
    if (p == NULL)
        abort();
    fill_payload(p, len, f->next_start / SEC);
    if (f->incompressible) {
        uint64_t x = f->next_start | 1;
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            p[i] = (uint8_t)(x >> 24);
        }
    }
    struct store_record r;
    memset(&r, 0, sizeof(r));
    r.w.worker = worker;
    r.w.version = version;
    r.w.runtime = "node-20.11.0";
    r.w.thread = f->thread;
    r.w.labels = f->labels;
    r.w.nlabels = f->nlabels;
    r.w.start_ns = f->next_start;
    r.w.end_ns = f->next_start + 10 * SEC - 1;
    r.w.isolate = isolate;
    r.w.type = type;
    r.w.samples = 100;
    r.w.interval = 10000000;
    r.w.anomaly = anomaly;
    r.pprof = p;
    r.len = len;
    f->next_start += 10 * SEC;
    int rc = store_put(f->st, &r, 1, NULL);
    CHECK_EQ_INT(rc, 0);
    isoprof_free(p);
    return r.w.id;
}

static uint64_t put(struct fx *f, size_t len, uint8_t anomaly)
{
    return put_full(f, "checkout", "v42", 3, STORE_TYPE_CPU, len, anomaly);
}

struct wstate {
    int found;
    uint8_t upload;
    uint16_t status;
    char reason[STORE_REJECT_REASON_MAX + 1];
};

static int wstate_on_window(const struct store_window *w, void *arg)
{
    struct wstate *s = arg;
    s->found = 1;
    s->upload = w->upload;
    s->status = w->reject_status;
    snprintf(s->reason, sizeof(s->reason), "%s", w->reject_reason ? w->reject_reason : "");
    return 0;
}

static struct wstate state_of(struct fx *f, uint64_t id)
{
    struct wstate s;
    memset(&s, 0, sizeof(s));
    struct store_filter flt = {.id = id};
    CHECK_EQ_INT(store_windows(f->st, &flt, wstate_on_window, &s), 0);
    CHECK(s.found);
    return s;
}

/* --- reading what the server received -------------------------------- */

static Push__V1__PushRequest *decode(const char *req, size_t len)
{
    size_t blen;
    const char *body = req_body(req, len, &blen);
    if (body == NULL)
        return NULL;
    return push__v1__push_request__unpack(NULL, blen, (const uint8_t *)body);
}

static Push__V1__PushRequest *decode_log(struct fx *f, int i)
{
    if (i >= f->srv.requests || i >= SERVER_LOG_MAX)
        return NULL;
    return decode(f->srv.log[i].data, f->srv.log[i].len);
}

static const char *label_of(const Push__V1__RawProfileSeries *s, const char *name)
{
    for (size_t i = 0; i < s->n_labels; i++)
        if (strcmp(s->labels[i]->name, name) == 0)
            return s->labels[i]->value;
    return NULL;
}

/* 0 if gz[0..len) gunzips to exactly the stored pprof of window id. */
static int gunzips_to_stored(struct fx *f, uint64_t id, const uint8_t *gz, size_t len)
{
    void *raw = NULL;
    size_t rawlen = 0;
    if (store_load(f->st, id, &raw, &rawlen) != 0)
        return -1;
    size_t cap = rawlen + 64;
    uint8_t *out = isoprof_malloc(cap);
    z_stream z;
    memset(&z, 0, sizeof(z));
    int rc = -1;
    if (out != NULL && len >= 2 && gz[0] == 0x1f && gz[1] == 0x8b &&
        inflateInit2(&z, 15 + 16) == Z_OK) {
        z.next_in = (Bytef *)(uintptr_t)gz;
        z.avail_in = (uInt)len;
        z.next_out = out;
        z.avail_out = (uInt)cap;
        int zr = inflate(&z, Z_FINISH);
        size_t got = cap - z.avail_out;
        inflateEnd(&z);
        if (zr == Z_STREAM_END && z.avail_in == 0 && got == rawlen && memcmp(out, raw, got) == 0)
            rc = 0;
    }
    isoprof_free(out);
    isoprof_free(raw);
    return rc;
}

/* The ids of the series of request i, in order, as window sequence ids
 * (0 for an id this store did not make); the count. */
static size_t request_ids(struct fx *f, int i, uint64_t *ids, size_t max)
{
    Push__V1__PushRequest *r = decode_log(f, i);
    if (r == NULL)
        return 0;
    size_t n = 0;
    for (size_t k = 0; k < r->n_series && n < max; k++) {
        uint64_t id = 0;
        if (r->series[k]->n_samples == 1 &&
            store_id_parse(f->st, r->series[k]->samples[0]->id, &id) != 0)
            id = 0;
        ids[n++] = id;
    }
    push__v1__push_request__free_unpacked(r, NULL);
    return n;
}

/* The value of query parameter name of the request line, URL-decoded. */
static int query_param(const char *req, const char *name, char *out, size_t cap)
{
    const char *q = strchr(req, '?');
    const char *eol = strstr(req, " HTTP/1.1\r\n");
    if (q == NULL || eol == NULL || q > eol)
        return -1;
    size_t nl = strlen(name);
    for (const char *p = q + 1; p < eol;) {
        const char *amp = memchr(p, '&', (size_t)(eol - p));
        const char *e = amp ? amp : eol;
        if ((size_t)(e - p) > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
            size_t n = 0;
            for (const char *v = p + nl + 1; v < e && n + 1 < cap; v++) {
                if (*v == '%' && e - v >= 3 && isoprof_hexval(v[1]) >= 0 &&
                    isoprof_hexval(v[2]) >= 0) {
                    out[n++] = (char)(isoprof_hexval(v[1]) << 4 | isoprof_hexval(v[2]));
                    v += 2;
                } else {
                    out[n++] = *v == '+' ? ' ' : *v;
                }
            }
            out[n] = '\0';
            return 0;
        }
        p = e + 1;
    }
    return -1;
}

static void *memmem_(const void *h, size_t hl, const void *n, size_t nl)
{
    for (size_t i = 0; nl <= hl && i <= hl - nl; i++)
        if (memcmp((const char *)h + i, n, nl) == 0)
            return (char *)(uintptr_t)h + i;
    return NULL;
}

/* --- tests ------------------------------------------------------------ */

TEST(healthy_server)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    struct push_label hdr[] = {{"X-Extra", "yes"}};
    struct push_label lab[] = {{"env", "prod"}, {"region", "eu-west-1"}};
    f.o.tenant_id = "tenant-7";
    f.o.bearer = "t0ken";
    f.o.headers = hdr;
    f.o.nheaders = 1;
    f.o.labels = lab;
    f.o.nlabels = 2;
    f.o.isolate_label = 1;
    /* A process 0x3000 (its main thread and a Worker) and another. */
    uint64_t cpu = put_full(&f, "checkout", "v42", 0x3000, STORE_TYPE_CPU, 1000, 0);
    f.thread = "image-resizer#2"; /* a Worker's name, its thread id */
    uint64_t heap = put_full(&f, "checkout", "v42", 0x3002, STORE_TYPE_HEAP, 30000, 0);
    f.thread = "resize.js#31";
    uint64_t oom =
        put_full(&f, "checkout", "v42", 0x5007, STORE_TYPE_CPU, 200, STORE_ANOMALY_OOM_SUSPECTED);
    f.thread = NULL;
    FX_REQUIRE(&f, fx_start(&f) == 0);
    CHECK(run_until(&f, outbox_empty, 5000));
    run_for(&f, 50); /* the acknowledging transaction's job finishes */

    uint64_t ids[] = {cpu, heap, oom};
    for (size_t i = 0; i < 3; i++)
        CHECK_EQ_INT(state_of(&f, ids[i]).upload, STORE_UPLOAD_UPLOADED);
    struct store_stat st = stat_of(&f);
    CHECK_EQ_INT(st.outbox_pending, 0);
    CHECK_EQ_INT(st.outbox_uploaded, 3);
    CHECK_EQ_INT(st.outbox_rejected, 0);
    CHECK_EQ_INT(st.outbox_oldest_ns, 0);

    /* One request: the anomaly window makes the batch due at once. */
    FX_REQUIRE(&f, f.srv.requests == 1);
    const struct server_req *rq = &f.srv.log[0];
    char v[256];
    CHECK(strncmp(rq->data, "POST /push.v1.PusherService/Push HTTP/1.1\r\n", 43) == 0);
    CHECK(req_header(rq->data, rq->len, "Content-Type", v, sizeof(v)) == 0);
    CHECK_STR(v, "application/proto");
    CHECK(req_header(rq->data, rq->len, "Connect-Protocol-Version", v, sizeof(v)) == 0);
    CHECK_STR(v, "1");
    CHECK(req_header(rq->data, rq->len, "X-Scope-OrgID", v, sizeof(v)) == 0);
    CHECK_STR(v, "tenant-7");
    CHECK(req_header(rq->data, rq->len, "Authorization", v, sizeof(v)) == 0);
    CHECK_STR(v, "Bearer t0ken");
    CHECK(req_header(rq->data, rq->len, "X-Extra", v, sizeof(v)) == 0);
    CHECK_STR(v, "yes");
    CHECK(req_header(rq->data, rq->len, "Expect", v, sizeof(v)) != 0);

    Push__V1__PushRequest *r = decode_log(&f, 0);
    FX_REQUIRE(&f, r != NULL);
    CHECK_EQ_INT(r->n_series, 3);
    for (size_t k = 0; k < r->n_series; k++) {
        const Push__V1__RawProfileSeries *s = r->series[k];
        FX_REQUIRE(&f, s->n_samples == 1);
        uint64_t id = 0;
        CHECK_EQ_INT(store_id_parse(f.st, s->samples[0]->id, &id), 0);
        char want_id[STORE_ID_LEN + 1];
        store_id_format(f.st, id, want_id);
        CHECK_STR(s->samples[0]->id, want_id);
        /* evidence first */
        if (k == 0)
            CHECK_EQ_INT(id, oom);
        CHECK_EQ_INT(gunzips_to_stored(&f, id, s->samples[0]->raw_profile.data,
                                       s->samples[0]->raw_profile.len),
                     0);
        size_t want_labels = 7 + 2;
        CHECK_STR(label_of(s, "__name__"), id == heap ? "memory" : "process_cpu");
        CHECK_STR(label_of(s, "service_name"), "checkout");
        CHECK_STR(label_of(s, "version"), "v42");
        CHECK_STR(label_of(s, "host"), "host-1");
        /* The process, not the thread; the thread by what it runs. */
        CHECK_STR(label_of(s, "isolate"), id == oom ? "20480" : "12288");
        CHECK_STR(label_of(s, "runtime"), "node-20.11.0");
        /* Sent for the main thread too, so that it can be selected. */
        CHECK_STR(label_of(s, "thread"), id == cpu    ? "main"
                                         : id == heap ? "image-resizer"
                                                      : "resize.js");
        CHECK_STR(label_of(s, "env"), "prod");
        CHECK_STR(label_of(s, "region"), "eu-west-1");
        if (id == heap) {
            CHECK_STR(label_of(s, "__delta__"), "false");
            want_labels++;
        } else {
            CHECK(label_of(s, "__delta__") == NULL);
        }
        if (id == oom) {
            CHECK_STR(label_of(s, "anomaly"), "oom_suspected");
            want_labels++;
        } else {
            CHECK(label_of(s, "anomaly") == NULL);
        }
        CHECK_EQ_INT(s->n_labels, want_labels);
    }
    push__v1__push_request__free_unpacked(r, NULL);

    CHECK_EQ_INT(f.ev[UPL_EV_SENT], 1);
    CHECK_EQ_INT(f.ev[UPL_EV_RETRY] + f.ev[UPL_EV_REJECTED] + f.ev[UPL_EV_UNSENDABLE] +
                     f.ev[UPL_EV_STORE_ERROR],
                 0);
    struct upl_stats us;
    upl_stats(f.u, &us);
    CHECK_EQ_INT(us.requests, 1);
    CHECK_EQ_INT(us.requests_ok, 1);
    CHECK_EQ_INT(us.profiles_sent, 3);
    size_t blen;
    req_body(rq->data, rq->len, &blen);
    CHECK_EQ_INT(us.bytes_sent, blen);
    fx_done(&f);
}

/* Store one snapshot window of len bytes of JSON-ish text (as the daemon
 * will: streamed, pinned to anomaly pin if nonzero); its id. */
static uint64_t put_snapshot(struct fx *f, uint32_t isolate, size_t len, uint64_t pin)
{
    struct store_window w;
    memset(&w, 0, sizeof(w));
    w.worker = "checkout";
    w.version = "v42";
    w.runtime = "node-20.11.0";
    w.start_ns = f->next_start;
    w.isolate = isolate;
    w.type = STORE_TYPE_SNAPSHOT;
    w.anomaly = pin ? STORE_ANOMALY_MEMORY_NEAR_LIMIT : 0;
    struct store_blob *b = NULL;
    uint64_t id = 0;
    CHECK_EQ_INT(store_blob_begin(f->st, &w, &b), 0);
    static const char piece[] = "{\"snapshot\":{\"meta\":{}},\"nodes\":[0,1,2,3],\"strings\":[]}\n";
    for (size_t done = 0; b != NULL && done < len; done += sizeof(piece) - 1)
        CHECK_EQ_INT(store_blob_write(b, piece, sizeof(piece) - 1), 0);
    if (b != NULL)
        CHECK_EQ_INT(store_blob_commit(b, f->next_start + SEC, pin, 0, &id, NULL), 0);
    f->next_start += 10 * SEC;
    return id;
}

/* A retained window (a heap snapshot's dominator profile) goes up as
 * memory beside the heap windows, __delta__ false like them; the snapshot
 * it came from, pinned to the same anomaly, never enters the outbox: the
 * one request carries the retained window alone, and the snapshot stays
 * "off" (not rejected, not pending). */
TEST(retained_window_and_snapshot)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    struct store_anomaly an = {.kind = STORE_ANOMALY_MEMORY_NEAR_LIMIT,
                               .worker = "checkout",
                               .version = "v42",
                               .isolate = 4,
                               .start_ns = f.next_start,
                               .end_ns = f.next_start + SEC,
                               .value = 900,
                               .threshold = 800,
                               .flags = STORE_ANOMALY_OPEN};
    FX_REQUIRE(&f, store_anomaly_put(f.st, &an, 0) == 0);
    uint64_t snap = put_snapshot(&f, 4, 200000, an.id);
    uint64_t retained = put_full(&f, "checkout", "v42", 4, STORE_TYPE_RETAINED, 5000,
                                 STORE_ANOMALY_MEMORY_NEAR_LIMIT);
    FX_REQUIRE(&f, snap != 0 && retained != 0);
    struct store_stat st = stat_of(&f);
    CHECK_EQ_INT(st.outbox_pending, 1);
    CHECK_EQ_INT(st.windows_snapshot, 1);
    CHECK_EQ_INT(st.windows_retained, 1);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 1;
    CHECK(run_until(&f, uploaded, 5000));
    run_for(&f, 50);
    CHECK_EQ_INT(state_of(&f, retained).upload, STORE_UPLOAD_UPLOADED);
    CHECK_EQ_INT(state_of(&f, snap).upload, STORE_UPLOAD_OFF);
    st = stat_of(&f);
    CHECK_EQ_INT(st.outbox_rejected, 0);
    CHECK_EQ_INT(f.ev[UPL_EV_UNSENDABLE], 0);
    FX_REQUIRE(&f, f.srv.requests == 1);
    Push__V1__PushRequest *r = decode_log(&f, 0);
    FX_REQUIRE(&f, r != NULL && r->n_series == 1 && r->series[0]->n_samples == 1);
    const Push__V1__RawProfileSeries *s = r->series[0];
    uint64_t id = 0;
    CHECK_EQ_INT(store_id_parse(f.st, s->samples[0]->id, &id), 0);
    CHECK_EQ_INT(id, retained);
    CHECK_EQ_INT(
        gunzips_to_stored(&f, id, s->samples[0]->raw_profile.data, s->samples[0]->raw_profile.len),
        0);
    CHECK_STR(label_of(s, "__name__"), "memory");
    CHECK_STR(label_of(s, "__delta__"), "false");
    CHECK_STR(label_of(s, "anomaly"), "memory_near_limit");
    CHECK(label_of(s, "isolate") == NULL); /* upload.isolate_label is off */
    CHECK_EQ_INT(s->n_labels, 8);
    push__v1__push_request__free_unpacked(r, NULL);
    fx_done(&f);
}

TEST(batch_max_profiles)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    f.o.max_profiles = 4;
    uint64_t ids[10];
    for (size_t i = 0; i < 10; i++)
        ids[i] = put(&f, 500 + i, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 10;
    CHECK(run_until(&f, uploaded, 5000));
    FX_REQUIRE(&f, f.srv.requests == 3);
    static const size_t want[] = {4, 4, 2};
    size_t k = 0;
    for (int i = 0; i < 3; i++) {
        uint64_t got[16];
        size_t n = request_ids(&f, i, got, 16);
        CHECK_EQ_INT(n, want[i]);
        for (size_t j = 0; j < n && k < 10; j++, k++)
            CHECK_EQ_INT(got[j], ids[k]); /* stored order */
    }
    CHECK_EQ_INT(k, 10);
    fx_done(&f);
}

TEST(batch_max_bytes)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    f.o.max_bytes = 25000; /* two windows of 10000 fit, three do not */
    for (size_t i = 0; i < 6; i++)
        put(&f, 10000, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 6;
    CHECK(run_until(&f, uploaded, 5000));
    FX_REQUIRE(&f, f.srv.requests == 3);
    for (int i = 0; i < 3; i++) {
        uint64_t got[16];
        CHECK_EQ_INT(request_ids(&f, i, got, 16), 2);
    }
    fx_done(&f);
}

/* A request of several MiB arrives whole and decodes. */
TEST(large_batch)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    f.o.max_bytes = 8u << 20;
    f.o.max_profile_size = 4u << 20;
    f.incompressible = 1;
    uint64_t ids[3];
    for (size_t i = 0; i < 3; i++)
        ids[i] = put(&f, (3u << 20) / 2, i == 2 ? STORE_ANOMALY_OOM_SUSPECTED : 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 3;
    CHECK(run_until(&f, uploaded, 10000));
    FX_REQUIRE(&f, f.srv.requests == 1);
    CHECK(f.srv.log[0].len > (4u << 20));
    Push__V1__PushRequest *r = decode_log(&f, 0);
    FX_REQUIRE(&f, r != NULL);
    CHECK_EQ_INT(r->n_series, 3);
    uint64_t want[] = {ids[2], ids[0], ids[1]};
    for (size_t k = 0; k < r->n_series && k < 3; k++) {
        const Push__V1__RawSample *s = r->series[k]->samples[0];
        char id[STORE_ID_LEN + 1];
        store_id_format(f.st, want[k], id);
        CHECK_STR(s->id, id);
        CHECK_EQ_INT(gunzips_to_stored(&f, want[k], s->raw_profile.data, s->raw_profile.len), 0);
    }
    push__v1__push_request__free_unpacked(r, NULL);
    fx_done(&f);
}

TEST(batch_waits_max_delay)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    f.o.max_delay_ms = 400;
    FX_REQUIRE(&f, fx_start(&f) == 0);
    run_for(&f, 30); /* it looked at the empty outbox and went idle */
    uv_update_time(&f.loop);
    uint64_t t_put = uv_now(&f.loop);
    put(&f, 1000, 0);
    put(&f, 1000, 0);
    upl_notify(f.u, 2000);
    run_for(&f, 100);
    upl_notify(f.u, 0); /* a look while waiting changes nothing */
    CHECK(run_until(&f, one_request, 3000));
    FX_REQUIRE(&f, f.srv.requests == 1);
    uint64_t at = f.srv.log[0].at_ms;
    /* not before max_delay (a few ms for the loop's cached clock against
     * the wall clock of queued_ns), nor much after */
    CHECK(at + 5 >= t_put + 400);
    CHECK(at <= t_put + 400 + 1000);
    uint64_t got[4];
    CHECK_EQ_INT(request_ids(&f, 0, got, 4), 2);
    fx_done(&f);

    /* a batch holding anomaly evidence goes at once */
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    f.o.max_delay_ms = 5000;
    FX_REQUIRE(&f, fx_start(&f) == 0);
    run_for(&f, 30);
    uv_update_time(&f.loop);
    t_put = uv_now(&f.loop);
    uint64_t plain = put(&f, 1000, 0);
    uint64_t ev = put(&f, 1000, STORE_ANOMALY_LATENCY_P999_SPIKE);
    upl_notify(f.u, 2000);
    CHECK(run_until(&f, one_request, 3000));
    FX_REQUIRE(&f, f.srv.requests == 1);
    CHECK(f.srv.log[0].at_ms < t_put + 1000);
    CHECK_EQ_INT(request_ids(&f, 0, got, 4), 2);
    CHECK_EQ_INT(got[0], ev);
    CHECK_EQ_INT(got[1], plain);
    fx_done(&f);
}

TEST(anomaly_first)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    f.o.max_profiles = 1;
    uint64_t p1 = put(&f, 100, 0);
    uint64_t p2 = put_full(&f, "checkout", "v42", 7, STORE_TYPE_CPU, 100, 0);
    uint64_t p3 = put(&f, 100, 0);
    uint64_t a = put(&f, 100, STORE_ANOMALY_OOM_SUSPECTED);
    /* p2 gets pinned to an anomaly while pending: it goes first too, and
     * is labelled with the kind that pins it */
    struct store_anomaly an = {.kind = STORE_ANOMALY_MEMORY_NEAR_LIMIT,
                               .worker = "checkout",
                               .version = "v42",
                               .isolate = 7,
                               .start_ns = T0,
                               .end_ns = T0 + 40 * SEC,
                               .value = 900,
                               .threshold = 800};
    FX_REQUIRE(&f, store_anomaly_put(f.st, &an, 1u << STORE_TYPE_CPU) == 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 4;
    CHECK(run_until(&f, uploaded, 5000));
    FX_REQUIRE(&f, f.srv.requests == 4);
    static const char *const want_anomaly[] = {"memory_near_limit", "oom_suspected", NULL, NULL};
    uint64_t want[] = {p2, a, p1, p3};
    for (int i = 0; i < 4; i++) {
        Push__V1__PushRequest *r = decode_log(&f, i);
        FX_REQUIRE(&f, r != NULL);
        FX_REQUIRE(&f, r->n_series == 1 && r->series[0]->n_samples == 1);
        uint64_t id = 0;
        CHECK_EQ_INT(store_id_parse(f.st, r->series[0]->samples[0]->id, &id), 0);
        CHECK_EQ_INT(id, want[i]);
        const char *l = label_of(r->series[0], "anomaly");
        if (want_anomaly[i])
            CHECK_STR(l, want_anomaly[i]);
        else
            CHECK(l == NULL);
        push__v1__push_request__free_unpacked(r, NULL);
    }
    fx_done(&f);
}

/* upload.max_age: after an "outage" (windows stored long ago, the real
 * clock now), windows older than max_age are expired and never sent,
 * the young go first, those about to leave the window after them. */
TEST(max_age_expires_and_orders)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    f.o.max_age_ms = 3600 * 1000;
    f.o.max_profiles = 1; /* one a request: the order shows */
    uint64_t now = isoprof_now_wall_ns(), min = 60 * SEC;
    uint64_t old[3], late[2], young[2];
    for (int i = 0; i < 3; i++) {
        f.next_start = now - 120 * min + (uint64_t)i * SEC;
        old[i] = put(&f, 1000, 0);
    }
    for (int i = 0; i < 2; i++) {
        f.next_start = now - 58 * min + (uint64_t)i * SEC;
        late[i] = put(&f, 1000, 0);
    }
    for (int i = 0; i < 2; i++) {
        f.next_start = now - 10 * min + (uint64_t)i * SEC;
        young[i] = put(&f, 1000, 0);
    }
    FX_REQUIRE(&f, fx_start(&f) == 0);
    CHECK(run_until(&f, outbox_empty, 10000));
    run_for(&f, 100);
    FX_REQUIRE(&f, f.srv.requests == 4);
    const uint64_t want[] = {young[0], young[1], late[0], late[1]};
    for (size_t i = 0; i < 4; i++) {
        uint64_t got[2];
        CHECK_EQ_INT(request_ids(&f, i, got, 2), 1);
        CHECK_EQ_INT(got[0], want[i]);
    }
    for (int i = 0; i < 3; i++) {
        struct wstate w = state_of(&f, old[i]);
        CHECK_EQ_INT(w.upload, STORE_UPLOAD_EXPIRED);
        CHECK(strstr(w.reason, "upload.max_age") != NULL);
    }
    struct store_stat st = stat_of(&f);
    CHECK(st.outbox_expired == 3 && st.outbox_uploaded == 4 && st.outbox_rejected == 3);
    struct upl_stats us;
    upl_stats(f.u, &us);
    CHECK_EQ_INT(us.profiles_expired, 3);
    CHECK_EQ_INT(us.profiles_sent, 4);
    CHECK(f.ev[UPL_EV_EXPIRED] >= 1);
    CHECK_EQ_INT(f.ev[UPL_EV_REJECTED], 0);
    fx_done(&f);
}

/* The labels come first, all of them: far past the 200 bytes of a reason. */
#define LONG_LABELS                                                                                \
    "{service_name=\"checkout\", "                                                                 \
    "team=\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"                           \
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"  \
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"  \
    "\"}"
#define WINDOW_OLD                                                                                 \
    "profile with labels '" LONG_LABELS "' is outside of ingestion window (profile "               \
    "timestamp: 2026-12-06 10:00:00 +0000 UTC, the ingestion window starts at 2026-12-06 "         \
    "11:00:00 +0000 UTC)"
#define WINDOW_NEW                                                                                 \
    "profile with labels '{service_name=\"checkout\"}' is outside of ingestion window (profile "   \
    "timestamp: 2026-12-06 13:00:00 +0000 UTC, the ingestion window ends at 2026-12-06 "           \
    "12:10:00 +0000 UTC)"
#define HTTP_400(body)                                                                             \
    "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n" body

/* A 4xx that names the server's acceptance window: too old expires the
 * window (as max_age would), too new rejects it as clock skew; neither is
 * retried. */
TEST(window_refusals)
{
    char old_ans[1024], new_ans[512];
    snprintf(old_ans, sizeof(old_ans), HTTP_400(WINDOW_OLD), strlen(WINDOW_OLD));
    snprintf(new_ans, sizeof(new_ans), HTTP_400(WINDOW_NEW), strlen(WINDOW_NEW));
    struct script sc = {{old_ans, new_ans}, 2};
    struct fx f;
    REQUIRE(fx_init(&f, script_answer, &sc) == 0);
    f.o.max_profiles = 1;
    uint64_t a = put(&f, 1000, 0), b = put(&f, 1000, 0), c = put(&f, 1000, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    CHECK(run_until(&f, outbox_empty, 5000));
    run_for(&f, 300);
    CHECK_EQ_INT(f.srv.requests, 3); /* none retried */
    struct wstate w = state_of(&f, a);
    CHECK_EQ_INT(w.upload, STORE_UPLOAD_EXPIRED);
    CHECK(strncmp(w.reason, "outside of ingestion window", 27) == 0); /* the part that says why */
    w = state_of(&f, b);
    CHECK(w.upload == STORE_UPLOAD_REJECTED && w.status == 400);
    CHECK(strstr(w.reason, "ingestion window ends at") != NULL);
    CHECK_EQ_INT(state_of(&f, c).upload, STORE_UPLOAD_UPLOADED);
    CHECK_EQ_INT(f.ev[UPL_EV_EXPIRED], 1);
    CHECK_EQ_INT(f.ev[UPL_EV_CLOCK_SKEW], 1);
    CHECK_EQ_INT(f.ev[UPL_EV_REJECTED], 0);
    struct upl_stats us;
    upl_stats(f.u, &us);
    CHECK(us.profiles_expired == 1 && us.profiles_too_new == 1 && us.profiles_rejected == 1);
    fx_done(&f);
}

/* upload.max_rate: a backlog drains at the rate, after a first bucket. */
TEST(max_rate_paces_a_backlog)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    f.o.max_rate = 40000; /* bytes a second; the bucket holds as much */
    f.o.max_bytes = 20000;
    f.o.max_profiles = 2;
    for (int i = 0; i < 8; i++)
        put(&f, 10000, 0); /* 80000 bytes: 40000 at once, 40000 over a second */
    uv_update_time(&f.loop);
    uint64_t t0 = uv_now(&f.loop);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 8;
    CHECK(run_until(&f, uploaded, 10000));
    uint64_t took = uv_now(&f.loop) - t0;
    CHECK(took >= 900); /* a lower bound holds on a busy machine */
    struct upl_stats us;
    upl_stats(f.u, &us);
    CHECK(us.rate_waits >= 1);
    CHECK_EQ_INT(us.profiles_sent, 8);
    fx_done(&f);
}

/* upl_notify's bytes count as production: a batch waiting in RATE looks
 * at the bucket again, and the drain goes at production + max_rate. */
TEST(max_rate_counts_notified_production)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    f.o.max_rate = 1000;
    f.o.max_bytes = 10000;
    f.o.max_profiles = 1;
    for (int i = 0; i < 4; i++)
        put(&f, 10000, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    /* the first goes with a full bucket and leaves it 9000 in debt; the
     * next waits in RATE: by max_rate alone the rest would take 39 s */
    FX_REQUIRE(&f, run_until(&f, one_request, 5000));
    run_for(&f, 50);
    uv_update_time(&f.loop);
    uint64_t t0 = uv_now(&f.loop);
    upl_notify(f.u, 40000); /* 4000 B/s over the first 10 s, + 1000 */
    f.want = 4;
    CHECK(run_until(&f, uploaded, 30000));
    uint64_t took = uv_now(&f.loop) - t0;
    CHECK(took < 20000); /* ~7 s at 5000 B/s */
    CHECK(took >= 4000); /* still paced: 30000 bytes less a bucket */
    struct upl_stats us;
    upl_stats(f.u, &us);
    CHECK_EQ_INT(us.profiles_sent, 4);
    fx_done(&f);
}

/* --- the rate budget on a simulated clock (struct upl_pacer) ---------- */

/* A host that queues isolates windows of window_bytes at the end of every
 * period, and a sender that sends them in the outbox's order one request
 * at a time, as the uploader does, each request taking latency_ms; in
 * [outage_from, outage_to) nothing goes. Windows older than max_age when a
 * request is built are expired. feed 0 reports no production to the pacer:
 * the rule before, a bucket of max_rate alone. */
struct pace_sim {
    uint64_t max_rate;
    int feed;
    unsigned isolates;
    uint64_t window_bytes, period_ms;
    uint64_t outage_from_ms, outage_to_ms; /* both 0: no outage */
    uint64_t until_ms, max_age_ms;
    uint32_t max_profiles;
    uint64_t max_bytes, latency_ms;
    /* out */
    uint64_t produced, sent, expired, pending_end; /* windows */
    /* the most windows still pending when a period's windows came,
     * outside [outage_from, drained_at) */
    uint64_t worst_pending;
    uint64_t backlog_at_end_of_outage; /* windows */
    uint64_t drained_at_ms;            /* first empty outbox after the outage; 0: never */
};

#define SIM_BASE_MS 1000000u /* the pacer's clock at the simulation's 0 */

static void pace_simulate(struct pace_sim *s)
{
    size_t cap = (size_t)(s->until_ms / s->period_ms + 1) * s->isolates;
    uint64_t *queued = isoprof_calloc(cap, sizeof(*queued));
    if (queued == NULL)
        abort();
    size_t head = 0, tail = 0, inflight = 0;
    struct upl_pacer p;
    upl_pacer_init(&p, s->max_rate, SIM_BASE_MS);
    uint64_t t = 0, next_prod = s->period_ms, inflight_end = 0, retry_at = 0;
    int outage = s->outage_to_ms > s->outage_from_ms;
    for (;;) {
        if (inflight > 0 && t >= inflight_end) {
            head += inflight;
            s->sent += inflight;
            inflight = 0;
            if (outage && t >= s->outage_to_ms && s->drained_at_ms == 0 && head == tail)
                s->drained_at_ms = t;
        }
        if (t == next_prod) {
            /* the backlog of the outage is not steady state */
            int in_outage = outage && t >= s->outage_from_ms && s->drained_at_ms == 0;
            if (!in_outage && tail - head > s->worst_pending)
                s->worst_pending = tail - head;
            for (unsigned i = 0; i < s->isolates; i++)
                queued[tail++] = t;
            s->produced += s->isolates;
            if (s->feed)
                upl_pacer_queued(&p, SIM_BASE_MS + t, (uint64_t)s->isolates * s->window_bytes);
            next_prod += s->period_ms;
        }
        if (outage && t == s->outage_to_ms)
            s->backlog_at_end_of_outage = tail - head;
        int down = outage && t >= s->outage_from_ms && t < s->outage_to_ms;
        if (inflight == 0 && !down && head < tail && t >= retry_at) {
            while (head < tail && s->max_age_ms != 0 && queued[head] + s->max_age_ms < t) {
                head++;
                s->expired++;
            }
            size_t n = tail - head;
            size_t by_bytes = (size_t)(s->max_bytes / s->window_bytes);
            if (n > s->max_profiles)
                n = s->max_profiles;
            if (n > by_bytes)
                n = by_bytes > 0 ? by_bytes : 1;
            if (n > 0) {
                uint64_t bytes = n * s->window_bytes;
                uint64_t w = upl_pacer_wait_ms(&p, SIM_BASE_MS + t, bytes);
                if (w == 0) {
                    upl_pacer_take(&p, SIM_BASE_MS + t, bytes);
                    inflight = n;
                    inflight_end = t + s->latency_ms;
                } else {
                    retry_at = t + w;
                }
            }
        }
        uint64_t next = next_prod;
        if (inflight > 0 && inflight_end < next)
            next = inflight_end;
        else if (inflight == 0 && head < tail) {
            uint64_t go = down ? s->outage_to_ms : retry_at > t ? retry_at : t + 1;
            if (go < next)
                next = go;
        }
        if (outage && s->outage_to_ms > t && s->outage_to_ms < next)
            next = s->outage_to_ms;
        if (next > s->until_ms)
            break;
        t = next;
    }
    s->pending_end = tail - head;
    isoprof_free(queued);
}

#define MIN_MS 60000u
#define HOUR_MS 3600000u

static struct pace_sim sim_defaults(void)
{
    return (struct pace_sim){.max_rate = 4096,
                             .feed = 1,
                             .period_ms = 10000,
                             .until_ms = HOUR_MS,
                             .max_age_ms = HOUR_MS,
                             .max_profiles = 32,
                             .max_bytes = 1u << 20,
                             .latency_ms = 50};
}

/* Steady production above max_rate is sent as fast as it is produced. */
TEST(max_rate_keeps_up_with_production)
{
    /* 10 times max_rate: 100 isolates, 4096 B a window every 10 s */
    struct pace_sim s = sim_defaults();
    s.isolates = 100;
    s.window_bytes = 4096;
    pace_simulate(&s);
    CHECK_EQ_INT(s.expired, 0);
    CHECK_EQ_INT(s.worst_pending, 0); /* each period's windows were all sent before the next */
    CHECK(s.pending_end <= s.isolates);
    CHECK_EQ_INT(s.sent + s.pending_end, s.produced);

    /* 100 isolates of a small service, 450 B a window (45 B/s each) */
    s = sim_defaults();
    s.isolates = 100;
    s.window_bytes = 450;
    pace_simulate(&s);
    CHECK_EQ_INT(s.expired, 0);
    CHECK_EQ_INT(s.worst_pending, 0);
    /* the rule before (max_rate alone) falls behind by 4.5 KB/s - 4 KiB/s */
    struct pace_sim b = s;
    b.feed = 0;
    b.produced = b.sent = b.expired = b.pending_end = b.worst_pending = 0;
    b.until_ms = 4 * HOUR_MS;
    pace_simulate(&b);
    CHECK(b.pending_end > 5 * b.isolates);
    CHECK(b.worst_pending > 5 * b.isolates);
}

/* After an outage the backlog drains at production + max_rate. */
TEST(max_rate_drains_above_production)
{
    /* twice max_rate: 20 isolates, 4096 B a window every 10 s; 10 minutes
     * down: 4.9 MB of backlog, which max_rate drains in 20 minutes */
    struct pace_sim s = sim_defaults();
    s.isolates = 20;
    s.window_bytes = 4096;
    s.outage_from_ms = 20 * MIN_MS;
    s.outage_to_ms = 30 * MIN_MS;
    s.until_ms = 2 * HOUR_MS;
    s.max_age_ms = 2 * HOUR_MS;
    pace_simulate(&s);
    CHECK_EQ_INT(s.expired, 0);
    CHECK(s.backlog_at_end_of_outage >= 60 * s.isolates);
    uint64_t backlog = s.backlog_at_end_of_outage * s.window_bytes;
    uint64_t expect_ms = backlog * 1000 / s.max_rate;
    REQUIRE(s.drained_at_ms != 0);
    uint64_t took = s.drained_at_ms - s.outage_to_ms;
    CHECK(took >= expect_ms * 9 / 10);  /* not faster than max_rate above production */
    CHECK(took <= expect_ms * 11 / 10); /* nor slower */
    CHECK_EQ_INT(s.worst_pending, 0);   /* and steady again afterwards */

    /* the rule before never drains it: production is above max_rate */
    struct pace_sim b = s;
    b.feed = 0;
    b.produced = b.sent = b.expired = b.pending_end = b.worst_pending = 0;
    b.drained_at_ms = 0;
    pace_simulate(&b);
    CHECK_EQ_INT(b.drained_at_ms, 0);
}

/* Production below max_rate: the drain is still bounded by production +
 * max_rate, as the pacing before bounded it by max_rate, and the bucket
 * still holds one second's worth. */
TEST(max_rate_below_the_cap)
{
    /* 1 KB/s of production against 4 KiB/s, 30 minutes down */
    struct pace_sim s = sim_defaults();
    s.isolates = 10;
    s.window_bytes = 1000;
    s.outage_from_ms = 20 * MIN_MS;
    s.outage_to_ms = 50 * MIN_MS;
    s.until_ms = 2 * HOUR_MS;
    s.max_age_ms = 2 * HOUR_MS;
    pace_simulate(&s);
    REQUIRE(s.drained_at_ms != 0);
    uint64_t backlog = s.backlog_at_end_of_outage * s.window_bytes;
    uint64_t took = s.drained_at_ms - s.outage_to_ms;
    uint64_t expect_ms = backlog * 1000 / s.max_rate;
    CHECK(took >= expect_ms * 9 / 10);
    CHECK(took <= expect_ms * 11 / 10);
    CHECK_EQ_INT(s.worst_pending, 0);

    /* no production: exactly the bucket of max_rate alone */
    struct upl_pacer p;
    upl_pacer_init(&p, 40000, SIM_BASE_MS);
    CHECK_EQ_INT(upl_pacer_wait_ms(&p, SIM_BASE_MS, 40000), 0);
    upl_pacer_take(&p, SIM_BASE_MS, 40000);
    CHECK_EQ_INT(upl_pacer_wait_ms(&p, SIM_BASE_MS, 20000), 500);
    CHECK_EQ_INT(upl_pacer_wait_ms(&p, SIM_BASE_MS + 500, 20000), 0);
    upl_pacer_take(&p, SIM_BASE_MS + 500, 100000); /* larger than the bucket: debt */
    CHECK_EQ_INT(upl_pacer_wait_ms(&p, SIM_BASE_MS + 500, 40000), 3000);
    /* an idle hour fills it to one second's worth, no more */
    CHECK_EQ_INT(upl_pacer_wait_ms(&p, SIM_BASE_MS + HOUR_MS, 40000), 0);
    upl_pacer_take(&p, SIM_BASE_MS + HOUR_MS, 40000);
    CHECK(upl_pacer_wait_ms(&p, SIM_BASE_MS + HOUR_MS, 1) > 0);
    /* production is measured over the last ten minutes and forgotten after */
    upl_pacer_queued(&p, SIM_BASE_MS + HOUR_MS, 600000);
    uint64_t prod = upl_pacer_production(&p, SIM_BASE_MS + HOUR_MS + 1000);
    CHECK(prod >= 1000 && prod <= 1020); /* over the 591 s its slots cover */
    CHECK_EQ_INT(upl_pacer_production(&p, SIM_BASE_MS + HOUR_MS + UPL_PACE_SPAN_MS + 10000), 0);
    upl_pacer_init(&p, 0, SIM_BASE_MS);
    upl_pacer_take(&p, SIM_BASE_MS, 1u << 30);
    CHECK_EQ_INT(upl_pacer_wait_ms(&p, SIM_BASE_MS, 1u << 30), 0); /* 0: no limit */
}

/* Replay (isoprof upload --since): stored windows, uploaded or not, sent
 * again in the given order; the store is not written; one refused window
 * is counted; DONE at the end. */
TEST(replay_sends_again_without_writing)
{
    char ans[256];
    snprintf(ans, sizeof(ans), HTTP_400("bad profile"), strlen("bad profile"));
    struct script sc = {
        {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", ans}, 2};
    struct fx f;
    REQUIRE(fx_init(&f, script_answer, &sc) == 0);
    uint64_t ids[5];
    for (int i = 0; i < 5; i++)
        ids[i] = put(&f, 1000, 0);
    /* a store whose outbox is drained already: replay does not look at it */
    REQUIRE(store_outbox_ack(f.st, ids, 5) == 0);
    struct store_stat before = stat_of(&f);
    uint64_t order[] = {ids[4], ids[0], 999999, ids[2]}; /* one id that is not stored */
    f.o.replay = order;
    f.o.nreplay = 4;
    f.o.max_profiles = 2;
    f.o.max_age_ms = 1000; /* does not apply to a replay */
    FX_REQUIRE(&f, fx_start(&f) == 0);
    CHECK(run_until(&f, replay_done, 5000));
    /* [4, 0] refused as a whole? no: the first request is accepted, the
     * second ([2]) refused. */
    CHECK_EQ_INT(f.srv.requests, 2);
    uint64_t got[4];
    CHECK_EQ_INT(request_ids(&f, 0, got, 4), 2);
    CHECK(got[0] == ids[4] && got[1] == ids[0]);
    CHECK_EQ_INT(request_ids(&f, 1, got, 4), 1);
    CHECK_EQ_INT(got[0], ids[2]);
    struct upl_stats us;
    upl_stats(f.u, &us);
    CHECK(us.profiles_sent == 2 && us.profiles_rejected == 1 && us.profiles_expired == 0);
    CHECK_EQ_INT(f.ev[UPL_EV_DONE], 1);
    struct store_stat after = stat_of(&f);
    CHECK(after.outbox_uploaded == before.outbox_uploaded && after.outbox_rejected == 0);
    CHECK_EQ_INT(state_of(&f, ids[2]).upload, STORE_UPLOAD_UPLOADED);
    fx_done(&f);
    /* replay set with nothing in it */
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    f.o.replay = order;
    f.o.nreplay = 0;
    CHECK_EQ_INT(fx_start(&f), -EINVAL);
    fx_done(&f);
}

TEST(retry_503_then_200)
{
    struct script sc = {{ANSWER_503}, 1};
    struct fx f;
    REQUIRE(fx_init(&f, script_answer, &sc) == 0);
    uint64_t id = put(&f, 5000, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 1;
    CHECK(run_until(&f, uploaded, 5000));
    run_for(&f, 300); /* nothing more is sent */
    CHECK_EQ_INT(f.srv.requests, 2);
    CHECK_EQ_INT(f.ev[UPL_EV_RETRY], 1);
    CHECK_EQ_INT(f.ev[UPL_EV_SENT], 1);
    CHECK_EQ_INT(state_of(&f, id).upload, STORE_UPLOAD_UPLOADED);
    uint64_t a[2], b[2];
    CHECK_EQ_INT(request_ids(&f, 0, a, 2), 1);
    CHECK_EQ_INT(request_ids(&f, 1, b, 2), 1);
    CHECK_EQ_INT(a[0], id);
    CHECK_EQ_INT(b[0], id);
    struct upl_stats us;
    upl_stats(f.u, &us);
    CHECK_EQ_INT(us.requests, 2);
    CHECK_EQ_INT(us.requests_failed, 1);
    CHECK_EQ_INT(us.requests_ok, 1);
    CHECK_EQ_INT(us.profiles_sent, 1);
    CHECK_EQ_INT(stat_of(&f).outbox_uploaded, 1);
    fx_done(&f);
}

TEST(retry_after_429)
{
    struct script sc = {{ANSWER_429}, 1};
    struct fx f;
    REQUIRE(fx_init(&f, script_answer, &sc) == 0);
    f.o.backoff_max_ms = 5000; /* Retry-After is capped at the maximum */
    put(&f, 100, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 1;
    CHECK(run_until(&f, uploaded, 5000));
    FX_REQUIRE(&f, f.srv.requests == 2);
    uint64_t gap = f.srv.log[1].at_ms - f.srv.log[0].at_ms;
    CHECK(gap >= 995);
    CHECK(gap < 2000);
    CHECK_EQ_INT(f.ev[UPL_EV_RETRY], 1);
    fx_done(&f);
}

struct bad_one {
    char id[STORE_ID_LEN + 1];
};

/* 400 for any request holding window b->id, 200 for the others. */
static const char *refuse_one(struct server *s, const char *req, size_t len, void *arg)
{
    (void)s;
    const struct bad_one *b = arg;
    Push__V1__PushRequest *r = decode(req, len);
    if (r == NULL)
        return "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: "
               "close\r\n\r\n";
    int bad = 0;
    for (size_t k = 0; k < r->n_series; k++)
        for (size_t j = 0; j < r->series[k]->n_samples; j++)
            bad |= strcmp(r->series[k]->samples[j]->id, b->id) == 0;
    push__v1__push_request__free_unpacked(r, NULL);
    return bad ? ANSWER_400 : OK_ANSWER;
}

static int settled_5(struct fx *f)
{
    struct store_stat st = stat_of(f);
    return st.outbox_pending == 0 && st.outbox_uploaded + st.outbox_rejected == 5;
}

TEST(reject_one_of_a_batch)
{
    struct bad_one b;
    struct fx f;
    REQUIRE(fx_init(&f, refuse_one, &b) == 0);
    uint64_t ids[5];
    for (size_t i = 0; i < 5; i++)
        ids[i] = put(&f, 2000, 0);
    store_id_format(f.st, ids[2], b.id);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    CHECK(run_until(&f, settled_5, 5000));
    run_for(&f, 50);
    /* the batch, then each window alone */
    FX_REQUIRE(&f, f.srv.requests == 6);
    uint64_t got[8];
    CHECK_EQ_INT(request_ids(&f, 0, got, 8), 5);
    for (int i = 1; i < 6; i++) {
        CHECK_EQ_INT(request_ids(&f, i, got, 8), 1);
        CHECK_EQ_INT(got[0], ids[i - 1]);
    }
    for (size_t i = 0; i < 5; i++) {
        struct wstate w = state_of(&f, ids[i]);
        if (i == 2) {
            CHECK_EQ_INT(w.upload, STORE_UPLOAD_REJECTED);
            CHECK_EQ_INT(w.status, 400);
            CHECK_STR(w.reason, BAD_REASON);
        } else {
            CHECK_EQ_INT(w.upload, STORE_UPLOAD_UPLOADED);
            CHECK_EQ_INT(w.status, 0);
        }
    }
    struct store_stat st = stat_of(&f);
    CHECK_EQ_INT(st.outbox_uploaded, 4);
    CHECK_EQ_INT(st.outbox_rejected, 1);
    CHECK_EQ_INT(f.ev[UPL_EV_REJECTED], 1);
    struct upl_stats us;
    upl_stats(f.u, &us);
    CHECK_EQ_INT(us.profiles_rejected, 1);
    CHECK_EQ_INT(us.profiles_sent, 4);

    /* later windows go in batches again */
    uint64_t more[3];
    for (size_t i = 0; i < 3; i++)
        more[i] = put(&f, 100, 0);
    upl_notify(f.u, 300);
    CHECK(run_until(&f, outbox_empty, 5000));
    FX_REQUIRE(&f, f.srv.requests == 7);
    CHECK_EQ_INT(request_ids(&f, 6, got, 8), 3);
    CHECK_EQ_INT(got[0], more[0]);
    fx_done(&f);
}

TEST(over_max_profile_size)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    f.o.max_profile_size = 5000;
    uint64_t a = put(&f, 1000, 0);
    uint64_t big = put(&f, 8000, 0);
    uint64_t c = put(&f, 5000, 0); /* exactly the limit: fine */
    FX_REQUIRE(&f, fx_start(&f) == 0);
    CHECK(run_until(&f, outbox_empty, 5000));
    run_for(&f, 50);
    struct wstate w = state_of(&f, big);
    CHECK_EQ_INT(w.upload, STORE_UPLOAD_REJECTED);
    CHECK_EQ_INT(w.status, 0);
    CHECK(strstr(w.reason, "max_profile_size") != NULL);
    CHECK_EQ_INT(state_of(&f, a).upload, STORE_UPLOAD_UPLOADED);
    CHECK_EQ_INT(state_of(&f, c).upload, STORE_UPLOAD_UPLOADED);
    size_t seen = 0;
    for (int i = 0; i < f.srv.requests; i++) {
        uint64_t got[8];
        size_t n = request_ids(&f, i, got, 8);
        for (size_t k = 0; k < n; k++) {
            CHECK(got[k] != big);
            seen++;
        }
    }
    CHECK_EQ_INT(seen, 2);
    CHECK_EQ_INT(f.ev[UPL_EV_UNSENDABLE], 1);
    struct upl_stats us;
    upl_stats(f.u, &us);
    CHECK_EQ_INT(us.profiles_unsendable, 1);
    struct store_stat st = stat_of(&f);
    CHECK_EQ_INT(st.outbox_rejected, 1);
    CHECK_EQ_INT(st.outbox_uploaded, 2);
    fx_done(&f);
}

TEST(ingest_api)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    struct push_label lab[] = {{"team", "a,b}c"}};
    f.o.api = UPL_API_INGEST;
    f.o.labels = lab;
    f.o.nlabels = 1;
    f.o.tenant_id = "t1";
    uint64_t ids[2];
    ids[0] = put_full(&f, "checkout", "v1,2}", 3, STORE_TYPE_CPU, 3000, 0);
    f.thread = "pool{a,b}"; /* ',' and '}' cannot be escaped in a legacy name */
    ids[1] = put_full(&f, "checkout", "v1,2}", 4, STORE_TYPE_HEAP, 40000,
                      STORE_ANOMALY_MEMORY_NEAR_LIMIT);
    f.thread = NULL;
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 2;
    CHECK(run_until(&f, uploaded, 5000));
    FX_REQUIRE(&f, f.srv.requests == 2);
    /* the anomaly window first */
    static const char *const want_name[] = {
        "checkout{version=v1_2_,host=host-1,runtime=node-20.11.0,thread=pool{a_b_,"
        "anomaly=memory_near_limit,team=a_b_c}",
        "checkout{version=v1_2_,host=host-1,runtime=node-20.11.0,thread=main,"
        "team=a_b_c}"};
    uint64_t want_id[] = {ids[1], ids[0]};
    uint64_t start[] = {T0 + 10 * SEC, T0};
    for (int i = 0; i < 2; i++) {
        const struct server_req *rq = &f.srv.log[i];
        char v[512];
        CHECK(strncmp(rq->data, "POST /ingest?name=", 18) == 0);
        /* the name is URL-encoded: no raw '{' ',' '=' '}' in the request line */
        const char *eol = strstr(rq->data, " HTTP/1.1\r\n");
        FX_REQUIRE(&f, eol != NULL);
        CHECK(memchr(rq->data, '{', (size_t)(eol - rq->data)) == NULL);
        CHECK(memchr(rq->data, ',', (size_t)(eol - rq->data)) == NULL);
        CHECK(query_param(rq->data, "name", v, sizeof(v)) == 0);
        CHECK_STR(v, want_name[i]);
        char num[32];
        snprintf(num, sizeof(num), "%" PRIu64, (uint64_t)(start[i] / SEC));
        CHECK(query_param(rq->data, "from", v, sizeof(v)) == 0);
        CHECK_STR(v, num);
        snprintf(num, sizeof(num), "%" PRIu64, (uint64_t)(start[i] / SEC + 10));
        CHECK(query_param(rq->data, "until", v, sizeof(v)) == 0);
        CHECK_STR(v, num);
        CHECK(query_param(rq->data, "spyName", v, sizeof(v)) == 0);
        CHECK_STR(v, "isoprof");
        CHECK(req_header(rq->data, rq->len, "Connect-Protocol-Version", v, sizeof(v)) != 0);
        CHECK(req_header(rq->data, rq->len, "X-Scope-OrgID", v, sizeof(v)) == 0);
        CHECK_STR(v, "t1");
        CHECK(req_header(rq->data, rq->len, "Content-Type", v, sizeof(v)) == 0);
        FX_REQUIRE(&f, strncmp(v, "multipart/form-data; boundary=", 30) == 0);
        char delim[600];
        snprintf(delim, sizeof(delim), "--%s\r\n", v + 30);
        char close_delim[600];
        snprintf(close_delim, sizeof(close_delim), "\r\n--%s--\r\n", v + 30);
        size_t blen;
        const char *body = req_body(rq->data, rq->len, &blen);
        FX_REQUIRE(&f, body != NULL);
        FX_REQUIRE(&f, blen > strlen(delim) && memcmp(body, delim, strlen(delim)) == 0);
        const char *ph = body + strlen(delim);
        const char *pe = memmem_(ph, blen - strlen(delim), "\r\n\r\n", 4);
        FX_REQUIRE(&f, pe != NULL);
        char part_hdr[256];
        snprintf(part_hdr, sizeof(part_hdr), "%.*s", (int)(pe - ph), ph);
        CHECK(strstr(part_hdr, "Content-Disposition: form-data; name=\"profile\"") != NULL);
        const uint8_t *gz = (const uint8_t *)pe + 4;
        size_t tail = strlen(close_delim);
        FX_REQUIRE(&f, blen >= tail && memcmp(body + blen - tail, close_delim, tail) == 0);
        size_t gzlen = (size_t)(body + blen - tail - (const char *)gz);
        CHECK_EQ_INT(gunzips_to_stored(&f, want_id[i], gz, gzlen), 0);
        CHECK_EQ_INT(state_of(&f, want_id[i]).upload, STORE_UPLOAD_UPLOADED);
    }
    fx_done(&f);
}

/* The names of series s's labels in order, comma-separated, into out. */
static const char *label_names(const Push__V1__RawProfileSeries *s, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < s->n_labels && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? "," : "", s->labels[i]->name);
    return out;
}

/* A window's own labels go with its profile, after the uploader's and
 * before the static ones; one of the same name overrides the static one
 * (for that window only); /ingest carries them in the name too. */
TEST(window_labels)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    struct push_label lab[] = {{"env", "prod"}, {"service_git_ref", "static-ref"}, {"z", "1"}};
    f.o.labels = lab;
    f.o.nlabels = 3;
    static const struct store_label wl[] = {{"service_repository", "https://github.com/acme/shop"},
                                            {"service_git_ref", "0123abcd"}};
    f.labels = wl;
    f.nlabels = 2;
    uint64_t with = put(&f, 1000, 0);
    f.labels = NULL;
    f.nlabels = 0;
    uint64_t without = put(&f, 1000, 0);
    f.o.max_profiles = 2; /* both in one request, at once */
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 2;
    CHECK(run_until(&f, uploaded, 5000));
    FX_REQUIRE(&f, f.srv.requests == 1);
    Push__V1__PushRequest *r = decode_log(&f, 0);
    FX_REQUIRE(&f, r != NULL && r->n_series == 2);
    char names[1024];
    for (size_t k = 0; k < 2; k++) {
        const Push__V1__RawProfileSeries *s = r->series[k];
        uint64_t id = 0;
        CHECK(s->n_samples == 1 && store_id_parse(f.st, s->samples[0]->id, &id) == 0);
        if (id == with) {
            CHECK_STR(label_names(s, names, sizeof(names)),
                      "__name__,service_name,version,host,runtime,thread,"
                      "service_repository,service_git_ref,env,z");
            CHECK_STR(label_of(s, "service_git_ref"), "0123abcd");
            CHECK_STR(label_of(s, "service_repository"), "https://github.com/acme/shop");
        } else {
            CHECK_EQ_INT(id, without);
            CHECK_STR(label_names(s, names, sizeof(names)),
                      "__name__,service_name,version,host,runtime,thread,env,"
                      "service_git_ref,z");
            CHECK_STR(label_of(s, "service_git_ref"), "static-ref");
        }
        CHECK_STR(label_of(s, "env"), "prod");
    }
    push__v1__push_request__free_unpacked(r, NULL);
    CHECK_EQ_INT(f.ev[UPL_EV_UNSENDABLE] + f.ev[UPL_EV_REJECTED], 0);
    fx_close_upl(&f);
    run_for(&f, 50);

    /* /ingest: in the legacy name, in the same order. */
    f.closed = 0;
    f.o.api = UPL_API_INGEST;
    f.labels = wl;
    f.nlabels = 2;
    uint64_t ing = put(&f, 1000, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 3;
    CHECK(run_until(&f, uploaded, 5000));
    FX_REQUIRE(&f, f.srv.requests == 2);
    char v[1024];
    CHECK(query_param(f.srv.log[1].data, "name", v, sizeof(v)) == 0);
    CHECK_STR(v, "checkout{version=v42,host=host-1,runtime=node-20.11.0,thread=main,"
                 "service_repository=https://github.com/acme/shop,service_git_ref=0123abcd,"
                 "env=prod,z=1}");
    CHECK_EQ_INT(state_of(&f, ing).upload, STORE_UPLOAD_UPLOADED);
    fx_done(&f);
}

/* The server takes 30 labels a series: a window's 16 and the uploader's
 * own always fit; the static ones the window does not override follow
 * while there is room, and the last ones are left out. The window is
 * sent, not rejected. The uploader's own names are the store's reserved
 * ones, so a window label never collides with them. */
TEST(window_labels_limit)
{
    static const char *const own[] = {"__name__", "service_name", "version", "host",     "isolate",
                                      "runtime",  "thread",       "anomaly", "__delta__"};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(own); i++) {
        struct store_label l = {own[i], "x"};
        CHECK_EQ_INT(store_labels_check(&l, 1, NULL), -EINVAL);
    }
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    struct push_label stat[PUSH_MAX_LABELS - 9];
    char sn[PUSH_MAX_LABELS - 9][8];
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(stat); i++) {
        snprintf(sn[i], sizeof(sn[i]), "s%02zu", i);
        stat[i] = (struct push_label){sn[i], "static"};
    }
    f.o.labels = stat;
    f.o.nlabels = ISOPROF_ARRAY_SIZE(stat); /* 21, the most upl_init takes */
    f.o.isolate_label = 1;                  /* all 9 of the uploader's own */
    struct store_label wl[STORE_WINDOW_LABELS_MAX];
    char wn[STORE_WINDOW_LABELS_MAX][8];
    for (size_t i = 0; i < STORE_WINDOW_LABELS_MAX; i++) {
        snprintf(wn[i], sizeof(wn[i]), "w%02zu", i);
        wl[i] = (struct store_label){wn[i], "window"};
    }
    wl[15].name = "s03"; /* overrides a static one */
    f.labels = wl;
    f.nlabels = STORE_WINDOW_LABELS_MAX;
    /* own 7 + 16: room for 7 static (s00-s07 but s03); own 9 + 16: 5 */
    uint64_t cpu = put(&f, 1000, 0);
    uint64_t heap =
        put_full(&f, "checkout", "v42", 4, STORE_TYPE_HEAP, 1000, STORE_ANOMALY_MEMORY_NEAR_LIMIT);
    f.labels = NULL;
    f.nlabels = 0;
    uint64_t plain = put_full(&f, "checkout", "v42", 5, STORE_TYPE_HEAP, 1000,
                              STORE_ANOMALY_MEMORY_NEAR_LIMIT); /* 9 + 21 */
    f.o.max_profiles = 3;
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 3;
    CHECK(run_until(&f, uploaded, 5000));
    FX_REQUIRE(&f, f.srv.requests == 1);
    Push__V1__PushRequest *r = decode_log(&f, 0);
    FX_REQUIRE(&f, r != NULL && r->n_series == 3);
    for (size_t k = 0; k < 3; k++) {
        const Push__V1__RawProfileSeries *s = r->series[k];
        uint64_t id = 0;
        CHECK(s->n_samples == 1 && store_id_parse(f.st, s->samples[0]->id, &id) == 0);
        size_t own_n = id == cpu ? 7 : 9;
        CHECK_EQ_INT(s->n_labels, PUSH_MAX_LABELS);
        FX_REQUIRE(&f, s->n_labels == PUSH_MAX_LABELS);
        if (id == plain) {
            for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(stat); i++)
                CHECK_STR(s->labels[own_n + i]->name, sn[i]);
            continue;
        }
        CHECK(id == cpu || id == heap);
        for (size_t i = 0; i < STORE_WINDOW_LABELS_MAX; i++) {
            CHECK_STR(s->labels[own_n + i]->name, wl[i].name);
            CHECK_STR(s->labels[own_n + i]->value, "window");
        }
        /* s00, s01, s02, s04, ...: in order, the overridden one skipped */
        size_t room = PUSH_MAX_LABELS - own_n - STORE_WINDOW_LABELS_MAX;
        for (size_t i = 0, j = 0; i < room; i++, j++) {
            if (j == 3)
                j++;
            CHECK_STR(s->labels[own_n + STORE_WINDOW_LABELS_MAX + i]->name, sn[j]);
            CHECK_STR(s->labels[own_n + STORE_WINDOW_LABELS_MAX + i]->value, "static");
        }
        CHECK(label_of(s, sn[room + 1]) == NULL); /* the first left out */
        CHECK(label_of(s, sn[ISOPROF_ARRAY_SIZE(stat) - 1]) == NULL);
    }
    push__v1__push_request__free_unpacked(r, NULL);
    CHECK_EQ_INT(f.ev[UPL_EV_UNSENDABLE] + f.ev[UPL_EV_REJECTED], 0);
    /* Left out and counted: cpu 21 - 1 overridden - 7 = 13, heap 20 - 5
     * = 15, plain 0. */
    struct upl_stats us;
    upl_stats(f.u, &us);
    CHECK_EQ_INT(us.labels_cut, 13 + 15);
    fx_done(&f);
}

TEST(hanging_server_times_out)
{
    struct script sc = {{"HANG", "HANG"}, 2};
    struct fx f;
    REQUIRE(fx_init(&f, script_answer, &sc) == 0);
    f.o.timeout_ms = 200;
    uint64_t id = put(&f, 1000, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 1;
    CHECK(run_until(&f, uploaded, 5000));
    CHECK_EQ_INT(f.srv.requests, 3);
    CHECK_EQ_INT(f.ev[UPL_EV_RETRY], 2);
    CHECK_EQ_INT(f.ev[UPL_EV_SENT], 1);
    CHECK_EQ_INT(state_of(&f, id).upload, STORE_UPLOAD_UPLOADED);
    fx_done(&f);
}

static int all_pending(struct fx *f, const uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (state_of(f, ids[i]).upload != STORE_UPLOAD_PENDING)
            return 0;
    return stat_of(f).outbox_pending == n;
}

TEST(close_in_flight)
{
    /* a request in flight */
    struct script sc = {{"HANG"}, 1};
    struct fx f;
    REQUIRE(fx_init(&f, script_answer, &sc) == 0);
    f.o.timeout_ms = 10000;
    uint64_t ids[3];
    for (size_t i = 0; i < 3; i++)
        ids[i] = put(&f, 1000, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    CHECK(run_until(&f, one_request, 5000));
    fx_close_upl(&f);
    run_for(&f, 100);
    CHECK(all_pending(&f, ids, 3));
    fx_done(&f);

    /* a job in the thread pool, at once */
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    for (size_t i = 0; i < 3; i++)
        ids[i] = put(&f, 1000, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0); /* queues the first look at the outbox */
    fx_close_upl(&f);
    run_for(&f, 100);
    CHECK_EQ_INT(f.srv.requests, 0);
    CHECK(all_pending(&f, ids, 3));
    fx_done(&f);

    /* a job that runs (loading and gzip'ing 8 MiB) when closed */
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    f.o.max_bytes = 64u << 20;
    f.o.max_profile_size = 64u << 20;
    uint64_t big[4];
    for (size_t i = 0; i < 4; i++)
        big[i] = put(&f, 2u << 20, STORE_ANOMALY_OOM_SUSPECTED);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    usleep(20000);
    fx_close_upl(&f);
    run_for(&f, 50);
    CHECK_EQ_INT(f.srv.requests, 0);
    CHECK(all_pending(&f, big, 4));
    fx_done(&f);

    /* the acknowledging job in the pool: nothing after the close either,
     * and the ack still commits (else the next start would resend it) */
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    uint64_t acked = put(&f, 1000, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    CHECK(run_until(&f, one_request, 5000));
    while (f.ev[UPL_EV_SENT] == 0 && f.srv.requests < 5)
        uv_run(&f.loop, UV_RUN_ONCE);
    fx_close_upl(&f);
    run_for(&f, 200);
    CHECK_EQ_INT(state_of(&f, acked).upload, STORE_UPLOAD_UPLOADED);
    fx_done(&f);
}

/* "HTTP/1.1 <status>\r\nContent-Length: ...\r\n\r\n" and a body of prefix and then
 * n bytes in all (a 16-byte pattern after the prefix); owned by the caller. */
static char *big_answer(const char *status, const char *prefix, size_t n)
{
    char head[160];
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", status, n);
    char *a = isoprof_malloc((size_t)hl + n + 1);
    if (a == NULL)
        abort();
    memcpy(a, head, (size_t)hl);
    size_t pl = strlen(prefix);
    for (size_t i = 0; i < n; i++)
        a[(size_t)hl + i] = i < pl ? prefix[i] : "0123456789abcdef"[i % 16];
    a[(size_t)hl + n] = '\0';
    return a;
}

TEST(big_answer_of_a_success_is_a_success)
{
    /* A 200 with 1 MiB of body, 16 times the response cap: the batch was
     * taken, so it is acknowledged and never sent again. */
    char *big = big_answer("200 OK", "{}", 1u << 20);
    struct script sc = {{big, big, big, big, big, big, big, big}, 8};
    struct fx f;
    REQUIRE(fx_init(&f, script_answer, &sc) == 0);
    uint64_t id = put(&f, 5000, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 1;
    CHECK(run_until(&f, uploaded, 5000));
    run_for(&f, 500); /* nothing more is sent */
    CHECK_EQ_INT(f.srv.requests, 1);
    CHECK_EQ_INT(f.ev[UPL_EV_SENT], 1);
    CHECK_EQ_INT(f.ev[UPL_EV_RETRY], 0);
    CHECK_EQ_INT(state_of(&f, id).upload, STORE_UPLOAD_UPLOADED);
    struct upl_stats us;
    upl_stats(f.u, &us);
    CHECK_EQ_INT(us.requests, 1);
    CHECK_EQ_INT(us.requests_ok, 1);
    CHECK_EQ_INT(us.requests_error, 0);
    fx_done(&f);
    isoprof_free(big);
}

TEST(big_answer_of_a_refusal_keeps_its_reason)
{
    /* A 400 with 1 MiB of body: the window is rejected once, with the
     * start of the body as the reason. */
    char *big = big_answer("400 Bad Request", BAD_REASON, 1u << 20);
    struct script sc = {{big, big, big, big, big, big, big, big}, 8};
    struct fx f;
    REQUIRE(fx_init(&f, script_answer, &sc) == 0);
    uint64_t id = put(&f, 5000, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    CHECK(run_until(&f, outbox_empty, 5000));
    run_for(&f, 500);
    CHECK_EQ_INT(f.srv.requests, 1);
    CHECK_EQ_INT(f.ev[UPL_EV_REJECTED], 1);
    CHECK_EQ_INT(f.ev[UPL_EV_RETRY], 0);
    struct wstate w = state_of(&f, id);
    CHECK_EQ_INT(w.upload, STORE_UPLOAD_REJECTED);
    CHECK_EQ_INT(w.status, 400);
    CHECK(strncmp(w.reason, BAD_REASON, strlen(BAD_REASON)) == 0);
    fx_done(&f);
    isoprof_free(big);
}

TEST(redirect_is_retried_not_rejected)
{
    /* A 3xx is never followed (the URL wants fixing): the windows wait. */
    struct script sc = {
        {"HTTP/1.1 302 Found\r\nLocation: https://elsewhere/\r\nContent-Length: 0\r\n"
         "Connection: close\r\n\r\n"},
        1};
    struct fx f;
    REQUIRE(fx_init(&f, script_answer, &sc) == 0);
    uint64_t id = put(&f, 5000, 0);
    FX_REQUIRE(&f, fx_start(&f) == 0);
    f.want = 1;
    CHECK(run_until(&f, uploaded, 5000));
    CHECK_EQ_INT(f.ev[UPL_EV_RETRY], 1);
    CHECK_EQ_INT(f.ev[UPL_EV_REJECTED], 0);
    CHECK_EQ_INT(state_of(&f, id).upload, STORE_UPLOAD_UPLOADED);
    fx_done(&f);
}

TEST(backoff_bounds)
{
    uint64_t r = 0x2545f4914f6cdd1dull;
    static const struct {
        uint64_t min, max;
    } cfg[] = {{20, 200}, {500, 300000}, {1, 1}, {1000, 1000}, {7, 100000000}};
    for (size_t c = 0; c < ISOPROF_ARRAY_SIZE(cfg); c++) {
        for (unsigned attempt = 0; attempt < 70; attempt++) {
            uint64_t cap = cfg[c].min;
            for (unsigned i = 0; i < attempt && cap < cfg[c].max; i++)
                cap *= 2;
            if (cap > cfg[c].max)
                cap = cfg[c].max;
            uint64_t hi = 0;
            for (int i = 0; i < 2000; i++) {
                r ^= r << 13;
                r ^= r >> 7;
                r ^= r << 17;
                uint64_t d = upl_backoff_ms(cfg[c].min, cfg[c].max, attempt, 0, r);
                CHECK(d <= cap);
                if (d > hi)
                    hi = d;
                /* Retry-After is the wait, capped at the maximum */
                uint64_t ra = cfg[c].max / 2 + 1;
                d = upl_backoff_ms(cfg[c].min, cfg[c].max, attempt, ra, r);
                CHECK_EQ_INT(d, ra);
                d = upl_backoff_ms(cfg[c].min, cfg[c].max, attempt, cfg[c].max * 10, r);
                CHECK_EQ_INT(d, cfg[c].max);
            }
            /* full jitter: the whole range is used */
            CHECK(hi >= cap / 2);
        }
    }
    CHECK_EQ_INT(upl_backoff_ms(20, 200, 3, 0, 0), 0);
    CHECK(upl_backoff_ms(20, 200, 3, 0, UINT64_MAX) <= 160);
    CHECK(upl_backoff_ms(UPL_BACKOFF_MIN_MS, UPL_BACKOFF_MAX_MS, 1000, 0, UINT64_MAX) <=
          UPL_BACKOFF_MAX_MS);
}

static int gunzip_eq(const uint8_t *gz, size_t gzlen, const uint8_t *want, size_t len)
{
    uint8_t *out = isoprof_malloc(len + 64);
    z_stream z;
    memset(&z, 0, sizeof(z));
    int ok = 0;
    if (out != NULL && inflateInit2(&z, 15 + 16) == Z_OK) {
        z.next_in = (Bytef *)(uintptr_t)gz;
        z.avail_in = (uInt)gzlen;
        z.next_out = out;
        z.avail_out = (uInt)(len + 64);
        int zr = inflate(&z, Z_FINISH);
        size_t got = len + 64 - z.avail_out;
        inflateEnd(&z);
        ok = zr == Z_STREAM_END && z.avail_in == 0 && got == len &&
             (len == 0 || memcmp(out, want, len) == 0);
    }
    isoprof_free(out);
    return ok;
}

TEST(gzip)
{
    static const size_t sizes[] = {0, 1, 100, 65536, 1000003};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(sizes); i++) {
        uint8_t *in = isoprof_malloc(sizes[i] + 1);
        REQUIRE(in != NULL);
        fill_payload(in, sizes[i], i + 1);
        uint8_t *gz = NULL;
        size_t gzlen = 0;
        CHECK_EQ_INT(isoprof_gzip(in, sizes[i], &gz, &gzlen), 0);
        CHECK(gzlen >= 18 && gz[0] == 0x1f && gz[1] == 0x8b);
        CHECK(gunzip_eq(gz, gzlen, in, sizes[i]));
        isoprof_free(gz);
        isoprof_free(in);
    }
    uint8_t *gz = NULL;
    size_t gzlen = 0;
    CHECK_EQ_INT(isoprof_gzip(NULL, 0, &gz, &gzlen), 0);
    CHECK(gunzip_eq(gz, gzlen, NULL, 0));
    isoprof_free(gz);
    gz = NULL;
    CHECK_EQ_INT(isoprof_gzip(NULL, 5, &gz, &gzlen), -EINVAL);
    CHECK(gz == NULL);
    CHECK_EQ_INT(isoprof_gzip("abc", 3, NULL, &gzlen), -EINVAL);
    CHECK_EQ_INT(isoprof_gzip("abc", 3, &gz, NULL), -EINVAL);
}

TEST(init_arguments)
{
    struct fx f;
    REQUIRE(fx_init(&f, NULL, NULL) == 0);
    struct push_label one[] = {{"a", "b"}};
    struct push_label many[PUSH_MAX_LABELS];
    for (size_t i = 0; i < PUSH_MAX_LABELS; i++)
        many[i] = (struct push_label){"k", "v"};
    struct upl *u = (struct upl *)(uintptr_t)1;
    const struct upl_options good = f.o;
    CHECK_EQ_INT(upl_init(NULL, f.http, f.st, &good, on_event, &f, &u), -EINVAL);
    CHECK_EQ_INT(upl_init(&f.loop, NULL, f.st, &good, on_event, &f, &u), -EINVAL);
    CHECK_EQ_INT(upl_init(&f.loop, f.http, NULL, &good, on_event, &f, &u), -EINVAL);
    CHECK_EQ_INT(upl_init(&f.loop, f.http, f.st, NULL, on_event, &f, &u), -EINVAL);
    CHECK_EQ_INT(upl_init(&f.loop, f.http, f.st, &good, on_event, &f, NULL), -EINVAL);
    for (int k = 0; k < 13; k++) {
        struct upl_options o = good;
        switch (k) {
        case 0:
            o.url = NULL;
            break;
        case 1:
            o.url = "";
            break;
        case 2:
            o.url = "ftp://127.0.0.1/";
            break;
        case 3:
            o.url = "127.0.0.1:4040";
            break;
        case 4:
            o.host = NULL;
            break;
        case 5:
            o.max_profiles = 0;
            break;
        case 6:
            o.max_bytes = 0;
            break;
        case 7:
            o.max_profile_size = 0;
            break;
        case 8:
            o.timeout_ms = 0;
            break;
        case 9:
            o.nheaders = 1;
            break;
        case 10:
            o.nlabels = 1;
            break;
        case 11:
            o.labels = many;
            o.nlabels = PUSH_MAX_LABELS;
            break;
        case 12:
            o.headers = one;
            o.nheaders = 1000;
            break;
        }
        if (upl_init(&f.loop, f.http, f.st, &o, on_event, &f, &u) != -EINVAL) {
            fprintf(stderr, "case %d\n", k);
            CHECK(0);
        }
    }
    CHECK(u == (struct upl *)(uintptr_t)1); /* untouched on failure */
    /* https and a callback of NULL are fine */
    struct upl_options o = good;
    o.url = "https://127.0.0.1:1";
    CHECK_EQ_INT(upl_init(&f.loop, f.http, f.st, &o, NULL, NULL, &u), 0);
    upl_close(u);
    run_for(&f, 50); /* its first look at the outbox is over */
    /* Nine of a series' labels are the uploader's own (thread among them:
     * a heap window flagged for an anomaly has all nine), so 21 static
     * labels fit the server's 30 and 22 do not. */
    o = good;
    o.labels = many;
    o.nlabels = PUSH_MAX_LABELS - 8;
    CHECK_EQ_INT(upl_init(&f.loop, f.http, f.st, &o, NULL, NULL, &u), -EINVAL);
    o.nlabels = PUSH_MAX_LABELS - 9;
    CHECK_EQ_INT(upl_init(&f.loop, f.http, f.st, &o, NULL, NULL, &u), 0);
    upl_close(u);
    run_for(&f, 50);
    /* A static label named like one of the uploader's own would make
     * every series carry a name twice, which the server refuses. */
    static const char *const own[] = {"__name__", "service_name", "version", "host",     "isolate",
                                      "runtime",  "thread",       "anomaly", "__delta__"};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(own); i++) {
        struct push_label dup[] = {{"team", "sre"}, {own[i], "x"}};
        o = good;
        o.labels = dup;
        o.nlabels = 2;
        if (upl_init(&f.loop, f.http, f.st, &o, NULL, NULL, &u) != -EINVAL) {
            fprintf(stderr, "static label %s\n", own[i]);
            CHECK(0);
        }
    }

    /* every allocation of upl_init failing in turn: -ENOMEM, nothing leaked */
    o = good;
    o.bearer = "tok";
    o.tenant_id = "t";
    o.userpwd = "u:p";
    o.headers = one;
    o.nheaders = 1;
    o.labels = one;
    o.nlabels = 1;
    int ok = 0;
    for (long n = 0; n < 200 && !ok; n++) {
        isoprof_alloc_fail_after(n);
        int rc = upl_init(&f.loop, f.http, f.st, &o, on_event, &f, &u);
        isoprof_alloc_fail_after(-1);
        if (rc == 0) {
            ok = 1;
            f.u = u; /* closed by fx_done */
        } else {
            CHECK_EQ_INT(rc, -ENOMEM);
        }
    }
    CHECK(ok);
    fx_done(&f);
}

int main(void)
{
    RUN(healthy_server);
    RUN(retained_window_and_snapshot);
    RUN(batch_max_profiles);
    RUN(batch_max_bytes);
    RUN(large_batch);
    RUN(batch_waits_max_delay);
    RUN(anomaly_first);
    RUN(retry_503_then_200);
    RUN(redirect_is_retried_not_rejected);
    RUN(big_answer_of_a_success_is_a_success);
    RUN(big_answer_of_a_refusal_keeps_its_reason);
    RUN(retry_after_429);
    RUN(reject_one_of_a_batch);
    RUN(over_max_profile_size);
    RUN(ingest_api);
    RUN(window_labels);
    RUN(window_labels_limit);
    RUN(hanging_server_times_out);
    RUN(close_in_flight);
    RUN(max_age_expires_and_orders);
    RUN(window_refusals);
    RUN(max_rate_paces_a_backlog);
    RUN(max_rate_keeps_up_with_production);
    RUN(max_rate_drains_above_production);
    RUN(max_rate_below_the_cap);
    RUN(max_rate_counts_notified_production);
    RUN(replay_sends_again_without_writing);
    RUN(backoff_bounds);
    RUN(gzip);
    RUN(init_arguments);
    TEST_EXIT();
}

/*
 * libFuzzer target: arbitrary bytes as what a client sends on the control
 * socket (or metrics.listen), through the parsing of agent/control/control.h: the
 * request reader (ctl_req_feed, http-parser under the project's bounds),
 * the split of the request target (ctl_req_target) and the query of
 * POST /profile (ctl_profile_parse). No socket and no daemon: the same
 * calls control.c makes for each connection.
 *
 * The first input byte steers the run: its low 4 bits are the size of the
 * reads the rest arrives in (1 to 15 bytes, 0: all at once), bit 4 also
 * parses the whole rest as a /profile query. The rest is a stream of
 * pipelined requests, read one at a time as a connection reads them.
 * Whatever the input:
 *   - the reader keeps its bounds: head_bytes <= CTL_HEAD_MAX, body_bytes
 *     <= CTL_BODY_MAX, url_len < CTL_URL_MAX with the url NUL-terminated
 *     there; it never takes more than it was given, and a complete request
 *     took at least one byte;
 *   - a refusal carries 400, 413, 414 or 431 and a reason, and ends the
 *     stream (control.c closes the connection);
 *   - read in small pieces the stream gives the same requests and
 *     refusals, in the same order, as read at once;
 *   - a request's path and query are slices of its url;
 *   - the query parser accepts only what it documents (a worker; cpu,
 *     heap or snapshot; seconds in 1..3600 and an interval in 100us..1s,
 *     for cpu only; all=1 not for a snapshot; NUL-free labels shorter
 *     than CTL_LABEL_MAX, the thread "main" unless one is named) and
 *     explains every refusal; what it accepts it reads back the same from
 *     a canonical re-encoding of its fields, and a parameter added twice
 *     to an accepted query is refused.
 *
 * Bit 5 of the first byte also reads the rest as the query of a whole
 * request, "POST /profile?<rest> HTTP/1.1", through the request reader
 * first: what control.c does with it on a connection.
 */
#include "base.h"
#include "control.h"
#include "store.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_OUTCOMES 64

static void check(int ok)
{
    if (!ok)
        abort();
}

/* What one request of the stream came to. */
struct outcome {
    int rc; /* 1: complete, -EBADMSG: refused, 0: cut off by the end of input */
    int status;
    unsigned method;
    int keep_alive;
    size_t head_bytes, body_bytes, url_len;
    uint64_t url_hash;
};

static uint64_t fnv(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static size_t encode_param(char *out, const char *name, const char *v);

static void check_label(const char *s)
{
    size_t n = strnlen(s, CTL_LABEL_MAX);
    check(n >= 1 && n < CTL_LABEL_MAX);
}

/* The /profile query q[0..n): an accepted one is within its documented
 * bounds, a refused one says why. */
static void check_query(const char *q, size_t n)
{
    static struct ctl_profile_req r;
    char why[CTL_LABEL_MAX + 100];
    uint64_t dflt = 10000000; /* 10 ms: outside the override's range, so it shows */
    int rc = ctl_profile_parse(q, n, dflt, &r, why, sizeof(why));
    check(rc == 0 || rc == -EINVAL);
    if (rc != 0) {
        check(why[0] != '\0' && strnlen(why, sizeof(why)) < sizeof(why));
        return;
    }
    check(r.has_worker);
    check_label(r.worker);
    if (r.has_version)
        check_label(r.version);
    check_label(r.thread);
    if (!r.has_thread)
        check(strcmp(r.thread, "main") == 0);
    check(r.type == STORE_TYPE_CPU || r.type == STORE_TYPE_HEAP || r.type == STORE_TYPE_SNAPSHOT);
    check(r.seconds >= 1 && r.seconds <= CFG_OD_SECONDS_MAX);
    check(r.interval_ns == dflt ||
          (r.interval_ns >= CFG_OD_INTERVAL_MIN_NS && r.interval_ns <= CFG_OD_INTERVAL_MAX_NS));
    if (r.type != STORE_TYPE_CPU)
        check(r.seconds == CTL_SECONDS_DEFAULT && r.interval_ns == dflt);
    check(r.all == 0 || r.all == 1);
    check(!(r.all && r.type == STORE_TYPE_SNAPSHOT));
    check(r.has_isolate || r.isolate == 0);
    /* the same query again: the same answer */
    static struct ctl_profile_req again;
    check(ctl_profile_parse(q, n, dflt, &again, why, sizeof(why)) == 0);
    check(memcmp(&r, &again, sizeof(r)) == 0);
    /* its fields written back canonically (every byte of a label
     * percent-encoded): the same request */
    static char canon[16 * CTL_LABEL_MAX];
    size_t o = 0;
    o += encode_param(canon + o, "worker", r.worker);
    if (r.has_version)
        o += encode_param(canon + o, "&version", r.version);
    if (r.has_thread)
        o += encode_param(canon + o, "&thread", r.thread);
    static const char *const types[] = {
        [STORE_TYPE_CPU] = "cpu", [STORE_TYPE_HEAP] = "heap", [STORE_TYPE_SNAPSHOT] = "snapshot"};
    o += (size_t)sprintf(canon + o, "&type=%s", types[r.type]);
    if (r.has_isolate)
        o += (size_t)sprintf(canon + o, "&isolate=%u", (unsigned)r.isolate);
    if (r.type == STORE_TYPE_CPU)
        o += (size_t)sprintf(canon + o, "&seconds=%llu&interval=%lluns",
                             (unsigned long long)r.seconds, (unsigned long long)r.interval_ns);
    if (r.all)
        o += (size_t)sprintf(canon + o, "&all=1");
    check(ctl_profile_parse(canon, o, dflt, &again, why, sizeof(why)) == 0);
    check(memcmp(&r, &again, sizeof(r)) == 0);
    /* a parameter given twice is refused, whichever */
    o += encode_param(canon + o, "&worker", r.worker);
    check(ctl_profile_parse(canon, o, dflt, &again, why, sizeof(why)) == -EINVAL);
    check(strstr(why, "given twice") != NULL);
}

/* "name=" and every byte of v as %XX at out; the bytes written. */
static size_t encode_param(char *out, const char *name, const char *v)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = (size_t)sprintf(out, "%s=", name);
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        out[o++] = '%';
        out[o++] = hex[*p >> 4];
        out[o++] = hex[*p & 15];
    }
    out[o] = '\0';
    return o;
}

static void check_req(const struct ctl_req *r)
{
    check(r->head_bytes <= CTL_HEAD_MAX);
    check(r->body_bytes <= CTL_BODY_MAX);
    check(r->url_len < CTL_URL_MAX && r->url[r->url_len] == '\0');
}

/* Read the stream d[0..n) in pieces of chunk bytes (0: at once), one
 * request at a time; the outcomes into out, their count returned. */
static size_t run(const char *d, size_t n, size_t chunk, struct outcome *out)
{
    static struct ctl_req r;
    size_t nout = 0, off = 0, end = 0;
    ctl_req_init(&r);
    while (nout < MAX_OUTCOMES) {
        if (off == end) {
            if (end == n)
                break;
            end = chunk == 0 || n - end < chunk ? n : end + chunk;
        }
        size_t used = 0;
        int rc = ctl_req_feed(&r, d + off, end - off, &used);
        check_req(&r);
        check(rc == 0 || rc == 1 || rc == -EBADMSG);
        check(used <= end - off);
        struct outcome *o = &out[nout];
        memset(o, 0, sizeof(*o));
        if (rc == 0) {
            check(used == end - off);
            off = end;
            continue;
        }
        o->rc = rc;
        if (rc == -EBADMSG) {
            check(r.status == 400 || r.status == 413 || r.status == 414 || r.status == 431);
            check(r.why[0] != '\0');
            o->status = r.status;
            nout++;
            return nout; /* the connection ends */
        }
        check(used > 0);
        check(r.headers_done && r.msg_done);
        o->method = r.p.method;
        o->keep_alive = r.keep_alive;
        o->head_bytes = r.head_bytes;
        o->body_bytes = r.body_bytes;
        o->url_len = r.url_len;
        o->url_hash = fnv(r.url, r.url_len);
        struct ctl_target t;
        if (ctl_req_target(&r, &t) == 0) {
            check(t.path >= r.url && t.path_len <= r.url_len &&
                  (size_t)(t.path - r.url) <= r.url_len - t.path_len);
            check(t.query_len == 0 || (t.query >= r.url && t.query_len <= r.url_len &&
                                       (size_t)(t.query - r.url) <= r.url_len - t.query_len));
            check_query(t.query, t.query_len);
        }
        nout++;
        off += used;
        ctl_req_init(&r);
    }
    if (nout < MAX_OUTCOMES && (r.head_bytes > 0 || r.url_len > 0)) {
        /* the end of input cut a request short */
        struct outcome *o = &out[nout++];
        memset(o, 0, sizeof(*o));
        o->head_bytes = r.head_bytes;
        o->url_len = r.url_len;
        o->url_hash = fnv(r.url, r.url_len);
    }
    return nout;
}

/* q[0..n) as the query of a whole POST /profile: the reader takes it as
 * one request (or refuses it with its status), and a request whose target
 * is all of it has q as its query; whatever query it read is parsed. */
static void check_request_query(const char *q, size_t n)
{
    static char text[CTL_URL_MAX + 64];
    static struct ctl_req r;
    if (n > CTL_URL_MAX)
        return;
    int len = snprintf(text, sizeof(text), "POST /profile?%.*s HTTP/1.1\r\n\r\n", (int)n, q);
    if (len < 0 || (size_t)len >= sizeof(text) || memchr(q, '\0', n) != NULL)
        return;
    ctl_req_init(&r);
    size_t used = 0;
    int rc = ctl_req_feed(&r, text, (size_t)len, &used);
    check_req(&r);
    if (rc == -EBADMSG) {
        /* bytes a target may not hold (400), too long a target (414), or
         * a query that ends the target early and goes on as headers */
        check(r.status == 400 || r.status == 413 || r.status == 414 || r.status == 431);
        return;
    }
    if (rc != 1)
        return; /* bytes that ended the request line early: waits for more */
    struct ctl_target t;
    if (ctl_req_target(&r, &t) != 0)
        return;
    if (t.path_len == 8 && memcmp(t.path, "/profile", 8) == 0 && t.query_len == n)
        check(memcmp(t.query, q, n) == 0);
    check_query(t.query, t.query_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct outcome whole[MAX_OUTCOMES], pieces[MAX_OUTCOMES];
    if (size < 1)
        return 0;
    uint8_t steer = data[0];
    const char *d = (const char *)data + 1;
    size_t n = size - 1;
    size_t chunk = steer & 15;
    size_t nw = run(d, n, 0, whole);
    if (chunk != 0) {
        size_t np = run(d, n, chunk, pieces);
        check(np == nw);
        for (size_t i = 0; i < nw; i++) {
            /* head_bytes counts what was fed before the headers ended,
             * which depends on where the pieces fall: not compared */
            check(pieces[i].rc == whole[i].rc && pieces[i].status == whole[i].status &&
                  pieces[i].method == whole[i].method &&
                  pieces[i].keep_alive == whole[i].keep_alive &&
                  pieces[i].body_bytes == whole[i].body_bytes &&
                  pieces[i].url_len == whole[i].url_len && pieces[i].url_hash == whole[i].url_hash);
        }
    }
    if (steer & 16)
        check_query(d, n);
    if (steer & 32)
        check_request_query(d, n);
    return 0;
}

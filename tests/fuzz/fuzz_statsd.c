/*
 * libFuzzer target: arbitrary bytes as one DogStatsD datagram, through
 * statsd_parse_datagram (the listener's path) into the latency detector.
 *
 * The first input byte steers the run: bit 0 selects the tag names
 * ("worker"/"version" or "svc"/"rev"), bit 1 also runs statsd_parse_line
 * over the whole remaining input as one line. The rest is the datagram.
 * Whatever the input:
 *   - every accepted observation keeps the documented bounds (name, label
 *     lengths and bytes, value, count) and its slices lie inside the
 *     datagram (the version may be the static "unknown");
 *   - parsing the same line again gives the same observation;
 *   - each non-empty line is counted exactly once;
 *   - the observations go into a histogram and a latency detector, which
 *     then tick through a spike check and an eviction without a leak.
 */
#include "base.h"
#include "hist.h"
#include "latency.h"
#include "statsd.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
    const char *buf;
    size_t len;
    const struct statsd_tags *names;
    struct hist h;
    struct latency *l;
    uint64_t now;
    uint64_t accepted;
};

static void check(int ok)
{
    if (!ok)
        abort();
}

static int inside(const struct run *r, const char *p, size_t n)
{
    return p >= r->buf && n <= r->len && (size_t)(p - r->buf) <= r->len - n;
}

static void check_label(const char *p, size_t n)
{
    check(n >= 1 && n <= STATSD_MAX_TAG_VALUE);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        check(c >= 0x20 && c <= 0x7e && c != '"' && c != '\\');
    }
}

static void on_obs(const struct statsd_obs *o, void *arg)
{
    struct run *r = arg;
    r->accepted++;
    check(o->name_len >= 1 && o->name_len <= STATSD_MAX_NAME);
    check(inside(r, o->name, o->name_len));
    check(inside(r, o->worker, o->worker_len));
    check_label(o->worker, o->worker_len);
    check_label(o->version, o->version_len);
    check(inside(r, o->version, o->version_len) ||
          (o->version_len == 7 && memcmp(o->version, "unknown", 7) == 0));
    check(o->type >= STATSD_TIMING && o->type <= STATSD_DISTRIBUTION);
    check(o->value_ns <= (uint64_t)STATSD_MAX_VALUE_MS * 1000000u);
    check(o->count >= 1 && o->count <= STATSD_MAX_COUNT);

    /* The line starts at the name; parsing it again is deterministic. */
    size_t off = (size_t)(o->name - r->buf);
    check(off == 0 || r->buf[off - 1] == '\n');
    const char *nl = memchr(o->name, '\n', r->len - off);
    size_t n = nl ? (size_t)(nl - o->name) : r->len - off;
    if (n > 0 && o->name[n - 1] == '\r')
        n--;
    struct statsd_obs again;
    check(statsd_parse_line(o->name, n, r->names, &again) == 0);
    check(again.name == o->name && again.name_len == o->name_len && again.type == o->type &&
          again.value_ns == o->value_ns && again.count == o->count && again.worker == o->worker &&
          again.worker_len == o->worker_len && again.version == o->version &&
          again.version_len == o->version_len);

    hist_record(&r->h, o->value_ns, o->count);
    int rc = latency_observe(r->l, o->worker, o->worker_len, o->version, o->version_len,
                             o->value_ns, o->count, r->now);
    check(rc == 0 || rc == -ENOSPC || rc == -ENOMEM);
    r->now += 1000000; /* 1 ms per observation */
}

static void on_event(const struct latency_event *ev, void *arg)
{
    (void)arg;
    check(ev->kind == LATENCY_START || ev->kind == LATENCY_END);
    check(ev->worker_len >= 1 && ev->worker_len <= LATENCY_LABEL_MAX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct statsd_tags custom = {"svc", "rev"};
    if (size < 1)
        return 0;
    uint8_t steer = data[0];
    struct run *r = isoprof_calloc(1, sizeof(*r));
    if (r == NULL)
        return 0;
    struct latency_params p;
    latency_params_default(&p);
    p.min_count = 2;
    p.warmup = 1;
    p.max_series = 8;
    if (latency_new(&p, &r->l) != 0) {
        isoprof_free(r);
        return 0;
    }
    hist_init(&r->h);
    r->buf = (const char *)data + 1;
    r->len = size - 1;
    r->names = (steer & 1) ? &custom : NULL;
    r->now = 1000000000000ull;

    struct statsd_counts c;
    memset(&c, 0, sizeof(c));
    statsd_parse_datagram(r->buf, r->len, r->names, on_obs, r, &c);

    /* Each non-empty line is counted once. */
    uint64_t lines = 0;
    for (size_t i = 0; i < r->len;) {
        const char *nl = memchr(r->buf + i, '\n', r->len - i);
        size_t end = nl ? (size_t)(nl - r->buf) : r->len;
        size_t n = end - i;
        if (n > 0 && r->buf[end - 1] == '\r')
            n--;
        lines += n > 0;
        i = end + 1;
    }
    check(c.datagrams == 1);
    check(c.accepted == r->accepted);
    check(c.accepted + c.ignored + c.unattributed + c.garbage == lines);

    if (steer & 2) {
        struct statsd_obs o;
        int rc = statsd_parse_line(r->buf, r->len, r->names, &o);
        check(rc == 0 || rc == -EINVAL || rc == -ENOTSUP || rc == -ENOENT || rc == -ERANGE ||
              rc == -EILSEQ || rc == ISOPROF_ETOOBIG);
    }

    check(hist_count(&r->h) + hist_lost(&r->h) >= r->accepted);
    if (hist_count(&r->h) > 0) {
        uint64_t q = hist_quantile(&r->h, 0.999);
        check(q >= hist_min(&r->h) && q <= hist_max(&r->h));
    }
    /* Close the window the observations fell in, then idle everything out. */
    latency_tick(r->l, r->now + p.window_ns, on_event, NULL);
    latency_tick(r->l, r->now + p.window_ns + p.idle_ns + p.window_ns, on_event, NULL);
    check(latency_stats(r->l).series == 0);
    latency_free(r->l);
    isoprof_free(r);
    return 0;
}

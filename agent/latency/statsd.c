/*
 * statsd.c - DogStatsD line parser, datagram splitter and UDP listener
 * (see statsd.h).
 *
 * The parser makes one left-to-right pass over a line with memchr and
 * plain byte loops: name up to the first ':', value up to the first '|',
 * the type up to the next '|', then each further '|' section by its first
 * byte. Numbers are converted by hand, never with strtod: strtod follows
 * the locale, accepts signs, exponents, hex, "nan" and "inf", and a
 * timing's milliseconds convert exactly to nanoseconds in integers (six
 * fraction digits, the seventh rounds). Only the worker and version tags
 * are looked at closely; other tags are skipped unread, so an
 * application's other tags (UTF-8 values and all) cannot get its timings
 * rejected.
 *
 * The listener is one uv_udp_t embedded in struct statsd with the 64 KiB
 * receive buffer next to it: the alloc callback hands out that buffer
 * every time, which is safe because libuv (without UV_UDP_RECVMMSG) reads
 * one datagram per alloc and the datagram is parsed before the read
 * callback returns. statsd_close stops receiving and closes the handle;
 * the struct is freed in the close callback, never inside the read
 * callback, and observations still being split out of the current
 * datagram after statsd_close are dropped by statsd_on_obs.
 */
#include "statsd.h"

#include "base.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char statsd_unknown[] = "unknown";

/* --- the line parser --- */

struct statsd_span {
    const char *p;
    size_t n;
};

static int statsd_span_is(struct statsd_span s, const char *lit, size_t litlen)
{
    return s.n == litlen && memcmp(s.p, lit, litlen) == 0;
}

/* digits with at most one '.', at least one digit */
static int statsd_decimal_ok(struct statsd_span s)
{
    size_t digits = 0, dots = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] >= '0' && s.p[i] <= '9')
            digits++;
        else if (s.p[i] == '.' && dots++ == 0)
            continue;
        else
            return 0;
    }
    return digits > 0;
}

/* A checked decimal in ms to ns: exact to the nanosecond, half up. */
static int statsd_ms_to_ns(struct statsd_span s, uint64_t *ns)
{
    size_t i = 0;
    uint64_t ms = 0;
    for (; i < s.n && s.p[i] != '.'; i++) {
        ms = ms * 10 + (uint64_t)(s.p[i] - '0');
        if (ms > STATSD_MAX_VALUE_MS)
            return -ERANGE;
    }
    uint64_t frac = 0;
    unsigned fd = 0;
    int round_up = 0;
    if (i < s.n)
        i++; /* the '.' */
    for (; i < s.n; i++, fd++) {
        if (fd < 6)
            frac = frac * 10 + (uint64_t)(s.p[i] - '0');
        else if (fd == 6)
            round_up = s.p[i] >= '5';
    }
    for (; fd < 6; fd++)
        frac *= 10;
    uint64_t v = ms * 1000000u + frac + (uint64_t)round_up;
    if (v > (uint64_t)STATSD_MAX_VALUE_MS * 1000000u)
        return -ERANGE;
    *ns = v;
    return 0;
}

/* A checked decimal rate in (0, 1] to a count, round(1 / rate). The bounds
 * are decided on the digits, so "1.00000000000000000001" is out of range
 * and "0.000000000000000000001" is a (tiny) rate, whatever a double makes
 * of them. */
static int statsd_rate_to_count(struct statsd_span s, uint64_t *count)
{
    double r = 0, scale = 1;
    uint64_t ipart = 0;
    int in_frac = 0, frac_nonzero = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] == '.') {
            in_frac = 1;
            continue;
        }
        int d = s.p[i] - '0';
        if (!in_frac) {
            ipart = ipart * 10 + (uint64_t)d;
            if (ipart > 1)
                return -ERANGE;
        } else {
            frac_nonzero |= d != 0;
            if (scale > 1e-12) { /* finer digits cannot move a count capped at 1e6 */
                scale /= 10;
                r += d * scale;
            }
        }
    }
    if ((ipart == 1 && frac_nonzero) || (ipart == 0 && !frac_nonzero))
        return -ERANGE;
    r += (double)ipart;
    if (r * STATSD_MAX_COUNT <= 1) {
        *count = STATSD_MAX_COUNT;
        return 0;
    }
    double c = 1 / r + 0.5;
    *count = c >= (double)STATSD_MAX_COUNT ? STATSD_MAX_COUNT : (uint64_t)c;
    return 0;
}

/* A worker or version value: 1..255 bytes of 0x20..0x7e but '"' and '\\'. */
static int statsd_label_check(struct statsd_span v)
{
    if (v.n > STATSD_MAX_TAG_VALUE)
        return ISOPROF_ETOOBIG;
    for (size_t i = 0; i < v.n; i++) {
        unsigned char c = (unsigned char)v.p[i];
        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
            return -EILSEQ;
    }
    return 0;
}

struct statsd_want {
    struct statsd_span key;
    struct statsd_span value;
    int seen;
};

/* One '#' section: tags separated by ','. */
static int statsd_parse_tags(struct statsd_span sec, struct statsd_want *w, size_t nw)
{
    const char *p = sec.p, *end = sec.p + sec.n;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *tend = comma ? comma : end;
        const char *colon = memchr(p, ':', (size_t)(tend - p));
        struct statsd_span key = {p, (size_t)((colon ? colon : tend) - p)};
        for (size_t i = 0; i < nw; i++) {
            if (!statsd_span_is(key, w[i].key.p, w[i].key.n))
                continue;
            if (w[i].seen)
                return -EINVAL;
            w[i].seen = 1;
            if (colon != NULL) {
                w[i].value.p = colon + 1;
                w[i].value.n = (size_t)(tend - colon - 1);
                int rc = statsd_label_check(w[i].value);
                if (rc != 0)
                    return rc;
            }
            break;
        }
        p = tend + 1;
    }
    return 0;
}

int statsd_parse_line(const char *line, size_t len, const struct statsd_tags *names,
                      struct statsd_obs *out)
{
    if (len > STATSD_MAX_LINE)
        return ISOPROF_ETOOBIG;
    if ((len >= 3 && memcmp(line, "_e{", 3) == 0) || (len >= 4 && memcmp(line, "_sc|", 4) == 0))
        return -ENOTSUP;
    const char *end = line + len;

    const char *colon = memchr(line, ':', len);
    if (colon == NULL || colon == line)
        return -EINVAL;
    struct statsd_span name = {line, (size_t)(colon - line)};
    if (name.n > STATSD_MAX_NAME)
        return ISOPROF_ETOOBIG;
    for (size_t i = 0; i < name.n; i++) {
        unsigned char c = (unsigned char)name.p[i];
        if (c == '|')
            return -EINVAL;
        if (c <= 0x20 || c > 0x7e)
            return -EILSEQ;
    }

    const char *bar = memchr(colon + 1, '|', (size_t)(end - colon - 1));
    if (bar == NULL)
        return -EINVAL;
    struct statsd_span value = {colon + 1, (size_t)(bar - colon - 1)};
    const char *tend = memchr(bar + 1, '|', (size_t)(end - bar - 1));
    if (tend == NULL)
        tend = end;
    struct statsd_span type = {bar + 1, (size_t)(tend - bar - 1)};
    enum statsd_type t;
    if (statsd_span_is(type, "ms", 2))
        t = STATSD_TIMING;
    else if (statsd_span_is(type, "h", 1))
        t = STATSD_HISTOGRAM;
    else if (statsd_span_is(type, "d", 1))
        t = STATSD_DISTRIBUTION;
    else if (statsd_span_is(type, "c", 1) || statsd_span_is(type, "g", 1) ||
             statsd_span_is(type, "s", 1))
        return -ENOTSUP;
    else
        return -EINVAL;

    if (!statsd_decimal_ok(value))
        return -EINVAL;
    uint64_t ns;
    int rc = statsd_ms_to_ns(value, &ns);
    if (rc != 0)
        return rc;

    const char *wname = names && names->worker ? names->worker : "worker";
    const char *vname = names && names->version ? names->version : "version";
    struct statsd_want want[2] = {{{wname, strlen(wname)}, {NULL, 0}, 0},
                                  {{vname, strlen(vname)}, {NULL, 0}, 0}};
    uint64_t count = 1;
    int have_rate = 0;
    for (const char *p = tend; p < end;) {
        const char *s = p + 1; /* past the '|' */
        const char *send = memchr(s, '|', (size_t)(end - s));
        if (send == NULL)
            send = end;
        struct statsd_span sec = {s, (size_t)(send - s)};
        if (sec.n > 0 && sec.p[0] == '@') {
            struct statsd_span r = {sec.p + 1, sec.n - 1};
            if (have_rate++ || !statsd_decimal_ok(r))
                return -EINVAL;
            if ((rc = statsd_rate_to_count(r, &count)) != 0)
                return rc;
        } else if (sec.n > 0 && sec.p[0] == '#') {
            struct statsd_span tags = {sec.p + 1, sec.n - 1};
            if ((rc = statsd_parse_tags(tags, want, 2)) != 0)
                return rc;
        }
        p = send;
    }
    if (want[0].value.n == 0)
        return -ENOENT;

    out->name = name.p;
    out->name_len = name.n;
    out->type = t;
    out->value_ns = ns;
    out->count = count;
    out->worker = want[0].value.p;
    out->worker_len = want[0].value.n;
    if (want[1].value.n > 0) {
        out->version = want[1].value.p;
        out->version_len = want[1].value.n;
    } else {
        out->version = statsd_unknown;
        out->version_len = sizeof(statsd_unknown) - 1;
    }
    return 0;
}

/* --- the datagram splitter --- */

void statsd_parse_datagram(const char *buf, size_t len, const struct statsd_tags *names,
                           statsd_obs_cb cb, void *arg, struct statsd_counts *counts)
{
    struct statsd_counts local;
    if (counts == NULL) {
        memset(&local, 0, sizeof(local));
        counts = &local;
    }
    counts->datagrams++;
    const char *p = buf, *end = buf + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *lend = nl ? nl : end;
        size_t n = (size_t)(lend - p);
        if (n > 0 && p[n - 1] == '\r')
            n--;
        if (n > 0) {
            struct statsd_obs obs;
            int rc = statsd_parse_line(p, n, names, &obs);
            if (rc == 0) {
                counts->accepted++;
                cb(&obs, arg);
            } else if (rc == -ENOTSUP) {
                counts->ignored++;
            } else if (rc == -ENOENT) {
                counts->unattributed++;
            } else {
                counts->garbage++;
            }
        }
        p = lend + 1;
    }
}

/* --- the UDP listener --- */

struct statsd {
    uv_udp_t udp;
    struct statsd_tags names; /* pointing at the two arrays below */
    char worker_tag[STATSD_MAX_TAG_NAME + 1];
    char version_tag[STATSD_MAX_TAG_NAME + 1];
    statsd_obs_cb cb;
    void *arg;
    struct statsd_counts counts;
    void (*done)(void *arg);
    void *done_arg;
    int closing;
    uint16_t port;
    char buf[STATSD_DATAGRAM_MAX];
};

static void statsd_on_close(uv_handle_t *h)
{
    struct statsd *s = container_of((uv_udp_t *)h, struct statsd, udp);
    if (s->done != NULL)
        s->done(s->done_arg);
    isoprof_free(s);
}

static void statsd_on_obs(const struct statsd_obs *obs, void *arg)
{
    struct statsd *s = arg;
    if (!s->closing)
        s->cb(obs, s->arg);
}

static void statsd_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct statsd *s = container_of((uv_udp_t *)h, struct statsd, udp);
    (void)suggested;
    buf->base = s->buf;
    buf->len = sizeof(s->buf);
}

static void statsd_on_recv(uv_udp_t *udp, ssize_t nread, const uv_buf_t *buf,
                           const struct sockaddr *addr, unsigned flags)
{
    struct statsd *s = container_of(udp, struct statsd, udp);
    (void)buf;
    if (s->closing)
        return;
    if (nread < 0) {
        s->counts.recv_errors++;
        return;
    }
    if (nread == 0 && addr == NULL)
        return; /* nothing to read after all; libuv returns the buffer */
    if (flags & UV_UDP_PARTIAL) {
        s->counts.datagrams++;
        s->counts.truncated++;
        return;
    }
    statsd_parse_datagram(s->buf, (size_t)nread, &s->names, statsd_on_obs, s, &s->counts);
}

static int statsd_tag_name_ok(const char *n)
{
    size_t len = strlen(n);
    return len >= 1 && len <= STATSD_MAX_TAG_NAME && strpbrk(n, ",|:#") == NULL;
}

/* "a.b.c.d:port", "localhost:port" or "[v6]:port" into addr. */
static int statsd_parse_addr(const char *listen, struct sockaddr_storage *addr)
{
    char host[64];
    const char *port;
    size_t hl;
    if (listen[0] == '[') {
        const char *rb = strchr(listen, ']');
        if (rb == NULL || rb[1] != ':')
            return -EINVAL;
        hl = (size_t)(rb - listen - 1);
        if (hl == 0 || hl >= sizeof(host))
            return -EINVAL;
        memcpy(host, listen + 1, hl);
        port = rb + 2;
    } else {
        const char *c = strrchr(listen, ':');
        if (c == NULL)
            return -EINVAL;
        hl = (size_t)(c - listen);
        if (hl == 0 || hl >= sizeof(host))
            return -EINVAL;
        memcpy(host, listen, hl);
        port = c + 1;
    }
    host[hl] = '\0';
    unsigned long pn = 0;
    size_t i = 0;
    for (; port[i] >= '0' && port[i] <= '9' && i < 6; i++)
        pn = pn * 10 + (unsigned long)(port[i] - '0');
    if (i == 0 || port[i] != '\0' || pn > 65535)
        return -EINVAL;

    unsigned char raw[16];
    memset(addr, 0, sizeof(*addr));
    if (listen[0] == '[') {
        if (uv_inet_pton(AF_INET6, host, raw) != 0 ||
            uv_ip6_addr(host, (int)pn, (struct sockaddr_in6 *)addr) != 0)
            return -EINVAL;
        return 0;
    }
    if (strcmp(host, "localhost") == 0)
        memcpy(host, "127.0.0.1", sizeof("127.0.0.1"));
    /* uv_ip4_addr tolerates trailing junk on some versions: insist on a literal. */
    if (uv_inet_pton(AF_INET, host, raw) != 0 ||
        uv_ip4_addr(host, (int)pn, (struct sockaddr_in *)addr) != 0)
        return -EINVAL;
    return 0;
}

int statsd_listen(uv_loop_t *loop, const char *listen, const struct statsd_tags *names,
                  statsd_obs_cb cb, void *arg, struct statsd **out, char **why)
{
    if (why != NULL)
        *why = NULL;
    if (loop == NULL || listen == NULL || cb == NULL || out == NULL) {
        if (why != NULL)
            *why = isoprof_strdup("statsd_listen: missing argument");
        return -EINVAL;
    }
    const char *wname = names && names->worker ? names->worker : "worker";
    const char *vname = names && names->version ? names->version : "version";
    if (!statsd_tag_name_ok(wname) || !statsd_tag_name_ok(vname)) {
        if (why != NULL)
            *why = isoprof_asprintf("statsd tag names \"%.80s\", \"%.80s\": each must be 1 to %d "
                                    "bytes without , | : or #",
                                    wname, vname, STATSD_MAX_TAG_NAME);
        return -EINVAL;
    }
    struct sockaddr_storage addr;
    int rc = statsd_parse_addr(listen, &addr);
    if (rc != 0) {
        if (why != NULL)
            *why = isoprof_asprintf("statsd listen address \"%.100s\": expected ipv4:port, "
                                    "localhost:port or [ipv6]:port",
                                    listen);
        return rc;
    }
    struct statsd *s = isoprof_calloc(1, sizeof(*s));
    if (s == NULL) {
        if (why != NULL)
            *why = isoprof_asprintf("%.100s: out of memory", listen);
        return -ENOMEM;
    }
    memcpy(s->worker_tag, wname, strlen(wname) + 1);
    memcpy(s->version_tag, vname, strlen(vname) + 1);
    s->names.worker = s->worker_tag;
    s->names.version = s->version_tag;
    s->cb = cb;
    s->arg = arg;
    if ((rc = uv_udp_init(loop, &s->udp)) != 0)
        goto fail_free;
    if ((rc = uv_udp_bind(&s->udp, (const struct sockaddr *)&addr, 0)) != 0)
        goto fail_close;
    struct sockaddr_storage bound;
    int blen = (int)sizeof(bound);
    if ((rc = uv_udp_getsockname(&s->udp, (struct sockaddr *)&bound, &blen)) != 0)
        goto fail_close;
    s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                : ((struct sockaddr_in *)&bound)->sin_port);
    if ((rc = uv_udp_recv_start(&s->udp, statsd_on_alloc, statsd_on_recv)) != 0)
        goto fail_close;
    *out = s;
    return 0;

fail_close:
    if (why != NULL)
        *why = isoprof_asprintf("%.100s: %s", listen, uv_strerror(rc));
    s->closing = 1;
    uv_close((uv_handle_t *)&s->udp, statsd_on_close); /* frees s */
    return rc;
fail_free:
    if (why != NULL)
        *why = isoprof_asprintf("%.100s: %s", listen, uv_strerror(rc));
    isoprof_free(s);
    return rc;
}

struct statsd_counts statsd_counts(const struct statsd *s)
{
    return s->counts;
}

uint16_t statsd_port(const struct statsd *s)
{
    return s->port;
}

void statsd_close(struct statsd *s, void (*done)(void *arg), void *arg)
{
    if (s->closing)
        return;
    s->closing = 1;
    s->done = done;
    s->done_arg = arg;
    uv_udp_recv_stop(&s->udp);
    uv_close((uv_handle_t *)&s->udp, statsd_on_close);
}

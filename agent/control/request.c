/*
 * request.c - the control socket's requests, parsed on bytes and structs
 * only (control.h): the request through http-parser, its target, and the
 * query of POST /profile. No socket and no daemon state, so the fuzz
 * target drives it as it is.
 */
#include "control_internal.h"
#include "store.h"

#include "control.h"

#include "base.h"

#include <errno.h>
#include <http_parser.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* --- the request: http-parser callbacks (control.h) --- */

static int req_on_url(http_parser *p, const char *at, size_t len)
{
    struct ctl_req *r = p->data;
    if (len >= sizeof(r->url) - r->url_len) {
        r->status = 414;
        return -1;
    }
    memcpy(r->url + r->url_len, at, len);
    r->url_len += len;
    r->url[r->url_len] = '\0';
    return 0;
}

static int req_on_headers_complete(http_parser *p)
{
    struct ctl_req *r = p->data;
    r->headers_done = 1;
    r->keep_alive = http_should_keep_alive(p);
    if ((p->flags & F_CONTENTLENGTH) && p->content_length > CTL_BODY_MAX) {
        r->status = 413;
        return -1;
    }
    return 0;
}

static int req_on_body(http_parser *p, const char *at, size_t len)
{
    (void)at;
    struct ctl_req *r = p->data;
    r->body_bytes += len;
    if (r->body_bytes > CTL_BODY_MAX) {
        r->status = 413;
        return -1;
    }
    return 0;
}

static int req_on_message_complete(http_parser *p)
{
    struct ctl_req *r = p->data;
    r->msg_done = 1;
    r->keep_alive = http_should_keep_alive(p);
    http_parser_pause(p, 1); /* one request at a time: the rest waits */
    return 0;
}

static const http_parser_settings ctl_settings = {
    .on_url = req_on_url,
    .on_headers_complete = req_on_headers_complete,
    .on_body = req_on_body,
    .on_message_complete = req_on_message_complete,
};

void ctl_req_init(struct ctl_req *r)
{
    memset(r, 0, offsetof(struct ctl_req, url));
    r->url[0] = '\0';
    http_parser_init(&r->p, HTTP_REQUEST);
    r->p.data = r;
}

static int req_refuse(struct ctl_req *r, int status, const char *why)
{
    r->status = status;
    snprintf(r->why, sizeof(r->why), "%s", why);
    return -EBADMSG;
}

/*
 * Before the headers end, the parser is fed at most what is left of
 * CTL_HEAD_MAX, so the limit is exact whatever the client sends. A
 * complete request pauses the parser (req_on_message_complete); what
 * follows it is the caller's to keep.
 */
int ctl_req_feed(struct ctl_req *r, const char *data, size_t n, size_t *used)
{
    size_t off = 0;
    *used = 0;
    if (r->status != 0)
        return -EBADMSG;
    if (r->msg_done)
        return 1;
    while (off < n) {
        size_t slice = n - off;
        if (!r->headers_done) {
            size_t room = CTL_HEAD_MAX - r->head_bytes;
            if (room == 0) {
                char why[80];
                snprintf(why, sizeof(why), "the request line and headers exceed %d bytes",
                         CTL_HEAD_MAX);
                return req_refuse(r, 431, why);
            }
            if (slice > room)
                slice = room;
        }
        size_t took = http_parser_execute(&r->p, &ctl_settings, data + off, slice);
        if (!r->headers_done)
            r->head_bytes += took;
        off += took;
        enum http_errno e = HTTP_PARSER_ERRNO(&r->p);
        /* An upgrade (Upgrade: websocket, CONNECT) is refused whether or
         * not the parser stopped at its end: answered as HTTP, what the
         * client sends next would be another protocol's bytes. */
        if (r->p.upgrade && (e == HPE_OK || e == HPE_PAUSED))
            return req_refuse(r, 400, "bad request: protocol upgrades are not supported");
        if (e == HPE_PAUSED && r->msg_done) {
            http_parser_pause(&r->p, 0);
            *used = off;
            return 1;
        }
        if (e != HPE_OK) {
            char why[120];
            int status = r->status;
            if (status == 413)
                snprintf(why, sizeof(why), "the request body exceeds %d bytes", CTL_BODY_MAX);
            else if (status == 414)
                snprintf(why, sizeof(why), "the request target exceeds %d bytes", CTL_URL_MAX - 1);
            else if (e == HPE_INVALID_CONTENT_LENGTH && r->headers_done)
                /* http-parser says content-length for a chunk size too */
                snprintf(why, sizeof(why), "bad request: invalid chunk size");
            else if (e == HPE_INVALID_CONTENT_LENGTH)
                snprintf(why, sizeof(why),
                         "bad request: invalid content-length header (not a decimal number, or "
                         "too large)");
            else
                snprintf(why, sizeof(why), "bad request: %s", http_errno_description(e));
            r->status = 0;
            return req_refuse(r, status ? status : 400, why);
        }
        if (took != slice)
            return req_refuse(r, 400, "bad request: protocol upgrades are not supported");
    }
    *used = n;
    return 0;
}

int ctl_req_target(const struct ctl_req *r, struct ctl_target *t)
{
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (r->url_len == 0 ||
        http_parser_parse_url(r->url, r->url_len, r->p.method == HTTP_CONNECT, &u) != 0 ||
        !(u.field_set & (1u << UF_PATH)))
        return -EINVAL;
    t->path = r->url + u.field_data[UF_PATH].off;
    t->path_len = u.field_data[UF_PATH].len;
    t->query = "";
    t->query_len = 0;
    if (u.field_set & (1u << UF_QUERY)) {
        t->query = r->url + u.field_data[UF_QUERY].off;
        t->query_len = u.field_data[UF_QUERY].len;
    }
    return 0;
}

/* --- POST /profile: the query (control.h) --- */

/* Percent-decode s[0..n) into out (cap bytes, NUL-terminated); '+' is a
 * space. -EINVAL on a bad escape or a NUL byte, -E2BIG if it does not fit. */
static int pct_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '%') {
            if (n - i < 3)
                return -EINVAL;
            int h = isoprof_hexval(s[i + 1]), l = isoprof_hexval(s[i + 2]);
            if (h < 0 || l < 0)
                return -EINVAL;
            ch = h * 16 + l;
            i += 2;
        } else if (ch == '+') {
            ch = ' ';
        }
        if (ch == 0)
            return -EINVAL;
        if (o + 1 >= cap)
            return -E2BIG;
        out[o++] = (char)ch;
    }
    out[o] = '\0';
    return 0;
}

/* A decimal number without sign or spaces, at most max. */
int ctl_parse_uint(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (*s == '\0')
        return -EINVAL;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > max)
            return -ERANGE;
    }
    *out = v;
    return 0;
}

__attribute__((format(printf, 3, 4))) static int query_refuse(char *why, size_t cap,
                                                              const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (cap > 0)
        vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* The interval's message spells its limits out. */
_Static_assert(CFG_OD_INTERVAL_MIN_NS == 100000ull && CFG_OD_INTERVAL_MAX_NS == 1000000000ull,
               "the on-demand interval limits changed: update the message that names them");

int ctl_profile_parse(const char *q, size_t qlen, uint64_t interval_ns, struct ctl_profile_req *r,
                      char *why, size_t cap)
{
    enum { P_WORKER, P_VERSION, P_ISOLATE, P_TYPE, P_SECONDS, P_INTERVAL, P_ALL, P_THREAD, P_N };
    static const char *const names[P_N] = {"worker",  "version",  "isolate", "type",
                                           "seconds", "interval", "all",     "thread"};
    unsigned seen = 0;
    char key[64], val[CTL_LABEL_MAX];
    memset(r, 0, sizeof(*r));
    r->seconds = CTL_SECONDS_DEFAULT;
    r->interval_ns = interval_ns;
    snprintf(r->thread, sizeof(r->thread), "%s", STORE_THREAD_MAIN);
    if (cap > 0)
        why[0] = '\0';
    const char *p = q, *end = q + qlen;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *pe = amp ? amp : end;
        if (pe == p) { /* "a&&b" */
            p = pe + 1;
            continue;
        }
        const char *eq = memchr(p, '=', (size_t)(pe - p));
        const char *ke = eq ? eq : pe;
        int rc = pct_decode(p, (size_t)(ke - p), key, sizeof(key));
        if (rc != 0)
            return query_refuse(why, cap,
                                "bad query: a parameter name is not valid percent-encoding");
        int k;
        for (k = 0; k < P_N; k++)
            if (strcmp(key, names[k]) == 0)
                break;
        if (k == P_N)
            return query_refuse(why, cap,
                                "unknown parameter '%s' (worker, version, isolate, thread, type, "
                                "seconds, interval, all)",
                                key);
        if (seen & (1u << k))
            return query_refuse(why, cap, "parameter '%s' given twice", key);
        seen |= 1u << k;
        rc = eq ? pct_decode(eq + 1, (size_t)(pe - eq - 1), val, sizeof(val)) : 0;
        if (!eq)
            val[0] = '\0';
        if (rc == -E2BIG)
            return query_refuse(why, cap, "%s is longer than %d bytes", key, CTL_LABEL_MAX - 1);
        if (rc != 0)
            return query_refuse(why, cap, "%s is not valid percent-encoding", key);
        uint64_t v = 0;
        switch (k) {
        case P_THREAD:
            if (val[0] == '\0')
                return query_refuse(why, cap, "%s must not be empty", key);
            memcpy(r->thread, val, strlen(val) + 1);
            r->has_thread = 1;
            break;
        case P_WORKER:
        case P_VERSION:
            if (val[0] == '\0')
                return query_refuse(why, cap, "%s must not be empty", key);
            memcpy(k == P_WORKER ? r->worker : r->version, val, strlen(val) + 1);
            if (k == P_WORKER)
                r->has_worker = 1;
            else
                r->has_version = 1;
            break;
        case P_ISOLATE:
            if (ctl_parse_uint(val, UINT32_MAX, &v) != 0)
                return query_refuse(
                    why, cap, "isolate must be an isolate id (a decimal number), not '%s'", val);
            r->isolate = (uint32_t)v;
            r->has_isolate = 1;
            break;
        case P_TYPE:
            if (strcmp(val, "cpu") == 0)
                r->type = STORE_TYPE_CPU;
            else if (strcmp(val, "heap") == 0)
                r->type = STORE_TYPE_HEAP;
            else if (strcmp(val, "snapshot") == 0)
                r->type = STORE_TYPE_SNAPSHOT;
            else
                return query_refuse(why, cap, "type must be cpu, heap or snapshot, not '%s'", val);
            break;
        case P_SECONDS:
            if (ctl_parse_uint(val, CFG_OD_SECONDS_MAX, &v) != 0 || v < 1)
                return query_refuse(why, cap,
                                    "seconds must be a whole number from 1 to %u, not '%s'",
                                    CFG_OD_SECONDS_MAX, val);
            r->seconds = v;
            break;
        case P_INTERVAL:
            if (cfg_parse_duration(val, &v) != 0 || v < CFG_OD_INTERVAL_MIN_NS ||
                v > CFG_OD_INTERVAL_MAX_NS)
                return query_refuse(
                    why, cap, "interval must be a duration from 100us to 1s (like 1ms), not '%s'",
                    val);
            r->interval_ns = v;
            break;
        case P_ALL:
            if (strcmp(val, "1") == 0 || strcmp(val, "true") == 0)
                r->all = 1;
            else if (strcmp(val, "0") == 0 || strcmp(val, "false") == 0)
                r->all = 0;
            else
                return query_refuse(why, cap, "all must be 1 or 0, not '%s'", val);
            break;
        }
        p = amp ? amp + 1 : end;
    }
    if (!r->has_worker)
        return query_refuse(why, cap, "worker is required (POST /profile?worker=W&type=cpu)");
    if (r->type == 0)
        return query_refuse(why, cap, "type is required: cpu, heap or snapshot");
    /* What a heap or snapshot window would not use is refused rather than
     * ignored, as isoprof profile refuses it: the caller meant something. */
    if (r->type != STORE_TYPE_CPU && (seen & ((1u << P_SECONDS) | (1u << P_INTERVAL))))
        return query_refuse(why, cap, "seconds and interval are for type=cpu, not %s",
                            store_type_name(r->type));
    if (r->type == STORE_TYPE_SNAPSHOT && r->all)
        return query_refuse(why, cap,
                            "all=1: a heap snapshot is of one isolate (name it with isolate=ID)");
    return 0;
}

/* The window asked for ended (ondemand.c). */

/*
 * control.h - the control socket (isoprof_control), a client of the
 * daemon.
 *
 * Two parts:
 *  - the socket: control_start/control_stop and the counters it keeps.
 *    What it serves comes from the daemon through struct ctl_host, filled
 *    by the composition root (agent_run): the bodies of GET /status and
 *    GET /metrics, and the on-demand entry points of POST /profile.
 *    Control reads nothing else of the daemon's and writes nothing of it;
 *    it links no daemon code (the daemon links it).
 *  - the request parsing, apart from any socket: the HTTP/1.1 request
 *    reader with its bounds, the split of the request target, and the
 *    query of POST /profile. control.c drives them from its connections;
 *    tests/fuzz/fuzz_control.c from bytes. Nothing of this part
 *    allocates, logs or touches the loop: each call reads its arguments
 *    and writes the struct it is given. Any thread may call them on its
 *    own structs.
 */
#ifndef ISOPROF_AGENT_CONTROL_H
#define ISOPROF_AGENT_CONTROL_H

#include "config.h"

#include <http_parser.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define CTL_HEAD_MAX 16384 /* request line + headers: 431 past it */
#define CTL_BODY_MAX 4096  /* request body: 413 past it */
#define CTL_URL_MAX 4096   /* request target, with its NUL: 414 past it */
#define CTL_LABEL_MAX 1024 /* a worker or version, with its NUL */
#define CTL_SECONDS_DEFAULT 10
/* The limits of seconds and interval are config.h's CFG_OD_*, shared with
 * the CLI and the daemon. */

/* One request being read. Zero it (or ctl_req_init) before its first
 * byte; ctl_req_feed fills it. */
struct ctl_req {
    http_parser p;
    size_t head_bytes, body_bytes;
    int headers_done, msg_done;
    int keep_alive; /* the client keeps the connection (valid once headers_done) */
    int status;     /* the error status it was refused with (400, 413, 414, 431), else 0 */
    char why[160];  /* why it was refused, for the error body */
    size_t url_len;
    char url[CTL_URL_MAX]; /* the request target, NUL-terminated */
};

/* Ready r for a new request. */
void ctl_req_init(struct ctl_req *r);

/*
 * Parse the next n bytes of r's request. Returns 0 when all n were taken
 * and the request is not complete yet; 1 when it is complete, with *used
 * the bytes of data it took (the rest is the next request's); -EBADMSG
 * when it is refused, with r->status and r->why saying why (431: the head
 * passed CTL_HEAD_MAX, 414: the target CTL_URL_MAX - 1, 413: the body
 * CTL_BODY_MAX, 400: anything http-parser refuses, and upgrades). After 1
 * or -EBADMSG, call ctl_req_init before feeding it again.
 */
int ctl_req_feed(struct ctl_req *r, const char *data, size_t n, size_t *used);

/* The path and query of a complete request's target, slices of r->url
 * (borrowed while r is). -EINVAL if the target has no path. */
struct ctl_target {
    const char *path, *query;
    size_t path_len, query_len; /* query: "" and 0 when there is none */
};

int ctl_req_target(const struct ctl_req *r, struct ctl_target *t);

/* POST /profile?worker=W[&version=V][&isolate=I]&type=cpu|heap
 *               [&seconds=N][&interval=DUR][&all=1] */
struct ctl_profile_req {
    char worker[CTL_LABEL_MAX], version[CTL_LABEL_MAX];
    char thread[CTL_LABEL_MAX]; /* "main" unless thread= names a worker thread */
    int has_worker, has_version, has_isolate, has_thread, all;
    uint32_t isolate;
    uint8_t type; /* STORE_TYPE_CPU or STORE_TYPE_HEAP */
    uint64_t seconds, interval_ns;
};

/*
 * Parse and check the query q[0..qlen) of POST /profile into r;
 * interval_ns is the default interval (sampling.cpu.interval). 0, or
 * -EINVAL with why (cap bytes, NUL-terminated) naming the parameter and
 * what is wrong with it; a 400's message.
 */
int ctl_profile_parse(const char *q, size_t qlen, uint64_t interval_ns, struct ctl_profile_req *r,
                      char *why, size_t cap);

/* --- the socket --- */

/* How a POST /profile the daemon could not start is answered: status
 * (400-599) and why, the error body's message; for a 409 because the
 * worker has several isolates, their ids (the body's "isolates"). */
#define CTL_REFUSAL_ISOLATES 64
struct ctl_refusal {
    int status;
    char why[3 * CTL_LABEL_MAX + 200]; /* worker, version and thread named; cut when sent */
    uint32_t isolates[CTL_REFUSAL_ISOLATES];
    size_t nisolates; /* of them listed; the why says how many there are */
};

/* An on-demand window ended: err 0 and the gzip'd pprof (gz, len; the
 * callee owns it), or an error (why: a message for the client, or NULL). */
typedef void (*ctl_profile_cb)(int err, const char *why, uint8_t *gz, size_t len, void *arg);

/*
 * What the daemon offers the control socket. Every call is made on the
 * loop thread with arg; none of them calls back into control except
 * through cb.
 *   status, metrics  a page's body (allocated, *len its bytes), or NULL
 *                    when out of memory
 *   profile          start the window r asks for; cb(cbarg) answers it,
 *                    perhaps before profile returns. 0 with *ticket the
 *                    handle to cancel it by while cb has not run; else
 *                    ref says how to refuse it and cb is never called
 *   cancel           the client went: cb is not called for ticket (the
 *                    window itself is still taken and stored)
 *   interval_ns      the default sampling interval of a CPU window
 */
struct ctl_host {
    uv_loop_t *loop;
    void *arg;
    char *(*status)(void *arg, size_t *len);
    char *(*metrics)(void *arg, size_t *len);
    int (*profile)(void *arg, const struct ctl_profile_req *r, ctl_profile_cb cb, void *cbarg,
                   void **ticket, struct ctl_refusal *ref);
    void (*cancel)(void *ticket);
    uint64_t (*interval_ns)(void *arg);
};

/* What the socket counted since it started; only growing. */
struct ctl_counters {
    uint64_t requests;             /* answers sent */
    uint64_t errors;               /* of them with a status of 400 and up */
    uint64_t rejected_connections; /* refused or evicted at the connection limit */
};

struct control;

/*
 * control_start - listen on cfg's control.socket (else the automatic path
 * by the store's; cfg_control_socket_path) and, when metrics.listen is
 * set, on that loopback address. host is copied; cfg is read during the
 * call only. 0 with *out, or an error, logged with why.
 */
int control_start(const struct ctl_host *host, const struct cfg *cfg, struct control **out);
/* Close the listeners and every connection (a client waiting for a window
 * gets a 503 first); ctl is freed once the loop closed its last handle.
 * NULL-safe. */
void control_stop(struct control *ctl);
void control_counters(const struct control *ctl, struct ctl_counters *out);

#endif

/*
 * control_internal.h - what the control socket's files share: the
 * listeners and connections (control.c, the HTTP server), the requests'
 * parser (request.c), the routes (routes.c) and the socket file and
 * start/stop (listen.c). Not part of control.h's API. Loop thread only.
 */
#ifndef ISOPROF_CONTROL_INTERNAL_H
#define ISOPROF_CONTROL_INTERNAL_H

#include "control.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#define CTL_MAX_CONNS 64
/* Connections of a listener that may wait for on-demand windows at once.
 * The rest of CTL_MAX_CONNS is kept for requests answered at once (GET
 * /status, /metrics, a refusal), so however many windows are asked for,
 * the daemon still answers those: past it, POST /profile gets a 503. */
#define CTL_WAITING_MAX (CTL_MAX_CONNS - 8)
#define CTL_PENDING_MAX (CTL_HEAD_MAX + CTL_BODY_MAX) /* pipelined bytes kept */
/* From waiting for a request (accepted, last answer written) to the whole
 * request read. Local clients send theirs at once; 5 s leaves a loaded
 * host room and frees a slowloris's or an idle client's slot quickly. */
#define CTL_REQUEST_MS 5000
#define CTL_WRITE_MS 10000 /* an answer the client does not read */
#define CTL_LINGER_MS 2000
#define CTL_READ_BUF 65536
#define CTL_BACKLOG 128
/* The bytes of an error message an error body holds; more are cut, "..." */
#define CTL_ERROR_MAX 600
/* A JSON string of n bytes of text takes at most this many (each byte
 * escaped as \u00XX, and the quotes): the caps of the error bodies. */
#define CTL_JSON_STR_MAX(n) (6 * (size_t)(n) + 2)

#define CT_JSON "application/json"
#define CT_METRICS "text/plain; version=0.0.4; charset=utf-8"
#define CT_PPROF "application/octet-stream"

/* A stream of either kind; every member starts at the same address. */
union ctl_stream {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_pipe_t pipe;
    uv_tcp_t tcp;
};

struct control;

struct ctl_listener {
    struct control *ctl;
    union ctl_stream h;
    int open;         /* h initialised: close it */
    int metrics_only; /* the metrics.listen listener: GET /metrics and nothing else */
    unsigned nconns;  /* connections counted against CTL_MAX_CONNS */
};

enum conn_state {
    C_IDLE,    /* waiting for a request's first byte */
    C_READING, /* a request under way */
    C_BUSY,    /* a request complete, its answer not ready (an on-demand window) */
    C_WRITING, /* the answer being written */
    C_LINGER,  /* answered, write side shut: dropping what still comes */
    C_CLOSING,
};

struct ctl_conn {
    struct control *ctl;
    struct ctl_listener *l;
    union ctl_stream h;
    uv_timer_t timer;
    uv_write_t wreq;
    uv_shutdown_t sreq;
    int closes;  /* handle closes still to come */
    int counted; /* in l->nconns */
    enum conn_state st;
    int eof;            /* the client shut its write side */
    int read_stopped;   /* reading paused: pending is full */
    struct ctl_req req; /* the request being parsed, or answered */
    /* bytes after the request (pipelined), parsed once it is answered */
    char *pending;
    size_t pending_len;
    /* the answer */
    char head[640];
    char *body; /* owned while written */
    int close_after;
    /* an on-demand window being waited for: the host's ticket */
    void *waiter;
    int od_pending; /* between host.profile and the callback */
    struct ctl_conn *prev, *next;
};

struct control {
    struct ctl_host host; /* the daemon's side */
    struct ctl_counters n;
    struct ctl_listener sock, metrics;
    struct ctl_conn *conns;
    unsigned closes; /* listener and connection closes still to come */
    int stopping;
    char *path; /* the socket file */
    int made;   /* we created it: unlink it at stop (if still ours) */
    dev_t dev;
    ino_t ino;
    /* One read buffer for every connection: libuv calls read_cb right
     * after alloc_cb, and read_cb consumes or copies the bytes. */
    char rbuf[CTL_READ_BUF];
};

/* control.c: the connections */

/* Answer c: status, the content type, body (transferred; NULL with len 1:
 * out of memory, a 500), the extra header lines (or NULL); close ends the
 * connection after it. */
void ctl_conn_respond(struct ctl_conn *c, int status, const char *ctype, char *body, size_t len,
                      const char *extra, int close);
/* Answer {"error": ...} with status; close ends the connection after it. */
__attribute__((format(printf, 4, 5))) void ctl_conn_error(struct ctl_conn *c, int status, int close,
                                                          const char *fmt, ...);
/* 405 with the Allow header naming what path takes (get: GET and HEAD,
 * else POST). */
void ctl_conn_bad_method(struct ctl_conn *c, const char *path, int get);
void ctl_conn_close(struct ctl_conn *c);
/* struct control freed once its last handle closed and it is stopping. */
void ctl_maybe_free(struct control *ctl);
void ctl_listener_on_close(uv_handle_t *h);
void ctl_listener_on_connection(uv_stream_t *server, int status);

/* request.c: a decimal number without sign or spaces, at most max, into
 * *out; 0, -EINVAL or -ERANGE. */
int ctl_parse_uint(const char *s, uint64_t max, uint64_t *out);

/* routes.c: c's complete request (c->req) answered. */
void ctl_conn_dispatch(struct ctl_conn *c);

#endif

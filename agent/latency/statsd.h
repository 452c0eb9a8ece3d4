/*
 * statsd.h - DogStatsD timings in, latency observations out.
 *
 * Applications report request latencies as DogStatsD lines (PROTOCOLS.md
 * section 4), one per line, several per UDP datagram:
 *
 *   name:value|type[|@rate][|#tag[:val],tag[:val]...][|other sections]
 *
 * Only the latency types are taken: ms (timing), h (histogram) and d
 * (distribution). The value is a decimal number of MILLISECONDS for all
 * three (DogStatsD histograms and distributions have no unit; the agent
 * treats them as timings in ms, like the clients' timed() helpers send).
 * Each line must carry the worker tag (by default `worker`) so that the
 * observation can be attributed to a worker; the version tag (`version`)
 * is optional and "unknown" when missing.
 *
 * Three layers: statsd_parse_line (one line, pure), statsd_parse_datagram
 * (split on '\n', count, call back; pure) and statsd_listen (a UDP socket
 * on libuv feeding the splitter). Nothing here logs or allocates per line
 * or per datagram: a flood of garbage costs one pass over its bytes and a
 * counter increment.
 *
 * Errors: 0, a negative errno, or an ISOPROF_E* code (config/base.h).
 */
#ifndef ISOPROF_STATSD_H
#define ISOPROF_STATSD_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define STATSD_MAX_LINE 1024          /* bytes, without the '\n' */
#define STATSD_MAX_NAME 200           /* metric name bytes */
#define STATSD_MAX_TAG_VALUE 255      /* worker / version value bytes */
#define STATSD_MAX_TAG_NAME 64        /* a tag name given in struct statsd_tags */
#define STATSD_MAX_VALUE_MS 86400000u /* one day; larger values are -ERANGE */
#define STATSD_MAX_COUNT 1000000u     /* the count a tiny sample rate gives, at most */
#define STATSD_DATAGRAM_MAX 65536     /* receive buffer: any UDP payload fits */

/* The tag names to attribute an observation by. NULL members (or a NULL
 * struct) mean the defaults "worker" and "version". */
struct statsd_tags {
    const char *worker;
    const char *version;
};

enum statsd_type { STATSD_TIMING = 1, STATSD_HISTOGRAM = 2, STATSD_DISTRIBUTION = 3 };

/*
 * One accepted observation. The slices point into the line that was
 * parsed (not NUL-terminated) and are borrowed: valid as long as that
 * buffer is, which for the datagram splitter and the listener means during
 * the callback only. version is the static "unknown" when the line has no
 * version tag (or one without a value).
 */
struct statsd_obs {
    const char *name;
    size_t name_len; /* 1 .. STATSD_MAX_NAME */
    enum statsd_type type;
    uint64_t value_ns; /* value in ms * 1e6, rounded to the nearest ns */
    uint64_t count;    /* round(1 / rate), 1 .. STATSD_MAX_COUNT; 1 without a rate */
    const char *worker;
    size_t worker_len; /* 1 .. STATSD_MAX_TAG_VALUE */
    const char *version;
    size_t version_len; /* 1 .. STATSD_MAX_TAG_VALUE */
};

/*
 * statsd_parse_line - parse one DogStatsD line (without its '\n').
 *
 * line/len: the bytes, borrowed; NUL bytes are just bytes (rejected where
 * they occur). names: the tag names to look for, or NULL for the defaults;
 * borrowed for the call. out: filled on success only.
 *
 * Accepted: name (1..200 bytes of printable ASCII, no space, no '|') ':'
 * value (digits with at most one '.', at least one digit; no sign,
 * exponent, NaN or inf) '|' ms|h|d, then any '|' sections in any order:
 * '@rate' (a decimal in (0, 1]; count = round(1 / rate), capped at
 * STATSD_MAX_COUNT), '#tags' (comma separated; `key` or `key:value`),
 * and every other section ('c:container', 'T1700000000', 'e:...', or an
 * empty one) ignored. Tags other than the worker and version tags are not
 * inspected. The worker and version values must be 1..255 bytes from
 * 0x20..0x7e except '"' and '\\', so that they can be stored as labels.
 *
 * Returns 0, or by rejection class:
 *   ISOPROF_ETOOBIG  line over STATSD_MAX_LINE, name over STATSD_MAX_NAME,
 *                    worker or version value over STATSD_MAX_TAG_VALUE;
 *   -ENOTSUP         a valid DogStatsD kind that is not a latency: types
 *                    c, g and s, events (`_e{`) and service checks (`_sc|`)
 *                    - to be ignored, not garbage;
 *   -ENOENT          no worker tag, or one without a value (the line cannot
 *                    be attributed);
 *   -EILSEQ          a worker or version value with a byte outside the
 *                    allowed set, or a name byte outside printable ASCII;
 *   -ERANGE          value over STATSD_MAX_VALUE_MS, or a rate outside
 *                    (0, 1];
 *   -EINVAL          anything else malformed (no ':' or '|', empty name or
 *                    value, a bad number, packed values `name:1:2|d`, an
 *                    unknown type, a second rate, the worker or version tag
 *                    given twice).
 * A line with several faults reports the first one met, checking in this
 * order: line length; event or service check; name; type; value; the
 * sections from left to right (rate, worker and version tag values); last,
 * the presence of a worker. So a counter line is -ENOTSUP whatever its
 * value and tags are.
 *
 * Thread: pure; any thread.
 */
int statsd_parse_line(const char *line, size_t len, const struct statsd_tags *names,
                      struct statsd_obs *out);

/* Line and datagram counters, cumulative. */
struct statsd_counts {
    uint64_t datagrams;    /* datagrams seen (truncated ones included) */
    uint64_t truncated;    /* datagrams over the receive buffer: dropped whole */
    uint64_t recv_errors;  /* receive errors reported by the socket */
    uint64_t accepted;     /* lines handed to the callback */
    uint64_t ignored;      /* -ENOTSUP lines: counters, gauges, sets, events */
    uint64_t unattributed; /* -ENOENT lines: latency without a worker tag */
    uint64_t garbage;      /* every other rejected line */
};

/* Called per accepted observation; obs and its slices are borrowed for the
 * call only. */
typedef void (*statsd_obs_cb)(const struct statsd_obs *obs, void *arg);

/*
 * statsd_parse_datagram - split buf[0..len) on '\n' (a trailing '\r' on a
 * line is dropped, empty lines are skipped and not counted), parse each
 * line with statsd_parse_line and call cb(obs, arg) for each accepted one.
 * counts, if not NULL, is added to: datagrams by one, and each non-empty
 * line to exactly one of accepted, ignored, unattributed, garbage.
 * buf is borrowed for the call; names as for statsd_parse_line; cb must
 * not be NULL. Thread: pure; any thread.
 */
void statsd_parse_datagram(const char *buf, size_t len, const struct statsd_tags *names,
                           statsd_obs_cb cb, void *arg, struct statsd_counts *counts);

struct statsd;

/*
 * statsd_listen - receive DogStatsD datagrams on a UDP socket.
 *
 * listen: "host:port" with an IPv4 literal or "localhost" (127.0.0.1), or
 *   "[v6]:port" with an IPv6 literal ("[::1]:8125", "[::]:8125"); port
 *   0..65535, 0 for one the system picks (see statsd_port). Borrowed.
 * names: the tag names, or NULL for the defaults; copied (each must be
 *   1..STATSD_MAX_TAG_NAME bytes without ',', '|', ':' or '#').
 * cb/arg: called on the loop thread for every accepted observation, with
 *   the slices pointing into the receive buffer (borrowed for the call).
 *   Nothing is called after statsd_close.
 * out: receives the listener, valid until statsd_close's done has run.
 * why: if not NULL, on failure receives an allocated message the caller
 *   frees with isoprof_free (e.g. "127.0.0.1:8125: address already in
 *   use"); NULL when even that allocation failed. Untouched on success.
 *
 * Datagrams are read into one 64 KiB buffer inside the listener (no
 * allocation per datagram); one over that size is counted as truncated and
 * dropped. The socket is bound without SO_REUSEADDR, so a port another
 * process holds is an error rather than a shared socket.
 *
 * Errors: -EINVAL (bad address, tag names or arguments), -ENOMEM, or the
 * libuv error of socket/bind/recv (-EADDRINUSE, -EADDRNOTAVAIL, -EACCES,
 * ...). On failure nothing is left for the caller to release, but the loop
 * must run once more for a handle already created to be closed and freed.
 * Thread: loop thread only.
 */
int statsd_listen(uv_loop_t *loop, const char *listen, const struct statsd_tags *names,
                  statsd_obs_cb cb, void *arg, struct statsd **out, char **why);

/* statsd_counts - a copy of the listener's counters. Thread: loop. */
struct statsd_counts statsd_counts(const struct statsd *s);

/* statsd_port - the UDP port the listener is bound to (the one the system
 * picked for port 0). Thread: loop. */
uint16_t statsd_port(const struct statsd *s);

/*
 * statsd_close - stop receiving and close the socket. No observation is
 * delivered after this call, even from the datagram being processed when
 * it is called from inside cb. done(arg), if done is not NULL, runs from
 * the handle's close callback, after which the listener is freed: s must
 * not be used once done has been called. A second call before then is a
 * no-op. Thread: loop thread only (cb included).
 */
void statsd_close(struct statsd *s, void (*done)(void *arg), void *arg);

#endif

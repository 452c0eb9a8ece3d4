/*
 * latency.h - P999 latency spike detection per worker/version.
 *
 * Observations (one request's latency, with a count for sampled sources)
 * are kept per series, one series per (worker, version) pair, in a
 * histogram of the current window (hist.h). Windows are global and
 * aligned: [k * window_ns, (k + 1) * window_ns) on the clock the caller
 * passes in. latency_tick closes the window once its end has passed and
 * judges each series on it:
 *
 *   p999       the window's 99.9th percentile (hist_quantile, <= 0.4 %
 *              error).
 *   qualifying count >= min_count. Only qualifying windows can flag or
 *              teach the baseline; a quieter window does neither, and it
 *              counts as "not above" for ending an episode.
 *   baseline   an EWMA (weight alpha for the newest) of the p999 of
 *              earlier qualifying windows that were not above threshold.
 *              It exists once `warmup` windows have fed it.
 *   threshold  max(factor * baseline, min_ns).
 *   above      qualifying, a baseline exists, p999 > threshold, and at
 *              least min_tail observations lie above threshold. With
 *              fewer than 1000 * min_tail observations the P999 rank falls
 *              among the last min_tail observations (at 500 it is the
 *              maximum), and one stray slow request must not flag: this
 *              is what min_tail prevents. Above 1000 * min_tail it is
 *              implied by p999 > threshold.
 *
 * Episodes: a series not in an episode STARTs one on a window that is
 * above, unless its previous START was less than cooldown_ns before. While
 * in the episode further above windows only raise its peak. It ENDs at the
 * close of the first window that ends cooldown_ns or more after the end of
 * the last above window. Spike windows never feed the baseline, so a spike
 * that lasts cannot pull the baseline up and end itself; but a level that
 * stays up for relearn_ns is the new normal: the episode then ENDs with
 * `relearned` set and the baseline starts over from that window (after
 * `warmup` windows it can flag again).
 *
 * Bounds: at most max_series series; the table never grows. Series of
 * known workers come first (latency_set_known: the caller says which
 * workers it watches, e.g. the agent's configured and attached ones). When
 * the table is full, a new known series takes the place of the least
 * recently seen unknown series that is not in an episode (counted as
 * displaced; that series' baseline is lost, and no episode is cut off
 * without its END). Any other new pair while the table is full is refused:
 * the observation is counted (refused, refused_series) and dropped. So a
 * burst of distinct worker tags can keep unknown workers out, but not a
 * known one (only known series, or unknown ones in episodes, can fill the
 * table against it). A series without observations for idle_ns is freed at a
 * tick, which is how such a burst clears by itself. The default, 10
 * minutes, is 60 default windows: a worker quiet for a minute or a few
 * keeps its baseline (one older than that says little about the traffic
 * that comes back), and junk tags are gone 10 minutes after they stop.
 * idle_ns must cover cooldown + 2 windows, so that an episode ENDs on its
 * empty windows before its series can go. Memory per series: one
 * allocation of 17032 bytes (the window's struct hist, 16936, and 96 bytes
 * of state) plus the two label strings, about 16.7 KiB; 1024 series take
 * about 16.7 MiB. The table of series heads is one pointer per slot (8 KiB
 * for 1024).
 *
 * Time is never read here: every call takes now_ns (monotonic, never
 * decreasing across calls), so behaviour is deterministic under test.
 *
 * Thread: a struct latency is used by one thread at a time (the agent's
 * loop thread); the callback must not call back into the same struct.
 * Errors: 0 or a negative errno.
 */
#ifndef ISOPROF_LATENCY_H
#define ISOPROF_LATENCY_H

#include <stddef.h>
#include <stdint.h>

#define LATENCY_LABEL_MAX 255 /* worker / version bytes */

struct latency_params {
    uint64_t window_ns;   /* default 10 s; >= 1 ms */
    double factor;        /* default 3.0; >= 1 */
    uint64_t min_ns;      /* default 50 ms: a p999 at or under it never flags */
    uint64_t min_count;   /* default 500; >= 1 */
    uint64_t cooldown_ns; /* default 2 min */
    double alpha;         /* default 0.3: the newest window's weight, in (0, 1] */
    uint32_t max_series;  /* default 1024; 1 .. 65536 */
    uint32_t warmup;      /* default 3 qualifying windows before a baseline exists; >= 1 */
    uint32_t min_tail;    /* default 5 observations above threshold; 0 or 1 = no such rule */
    uint64_t idle_ns;     /* default 10 min; >= cooldown + 2 * window */
    uint64_t relearn_ns;  /* default 10 * cooldown; > 0 */
};

/* latency_params_default - fill p with the defaults above. */
void latency_params_default(struct latency_params *p);

enum latency_kind { LATENCY_START = 1, LATENCY_END = 2 };

/*
 * One event. worker and version point into the series (not
 * NUL-terminated) and are borrowed for the callback.
 *   window_start_ns, window_end_ns, p999_ns, count: the window just
 *     closed (START: the spike window; END: the window that ended it).
 *   baseline_ns, threshold_ns: as that window was judged.
 *   max_p999_ns: the peak window p999 of the episode so far.
 *   episode_start_ns: the start of the window that STARTed the episode.
 *   last_above_ns: the end of the episode's last above window.
 *   relearned (END only): the level stayed up for relearn_ns and is now
 *     the baseline; 0 when the latency came back down.
 */
struct latency_event {
    enum latency_kind kind;
    const char *worker;
    size_t worker_len;
    const char *version;
    size_t version_len;
    uint64_t window_start_ns, window_end_ns;
    uint64_t p999_ns;
    uint64_t count;
    uint64_t baseline_ns;
    uint64_t threshold_ns;
    uint64_t max_p999_ns;
    uint64_t episode_start_ns;
    uint64_t last_above_ns;
    int relearned;
};

typedef void (*latency_event_cb)(const struct latency_event *ev, void *arg);

struct latency;

struct latency_stats {
    uint64_t series;         /* series tracked now */
    uint64_t in_episode;     /* of those, in an episode now */
    uint64_t known;          /* of those, series of known workers now */
    uint64_t bytes;          /* memory held: table and series */
    uint64_t episodes;       /* STARTs so far */
    uint64_t evicted;        /* idle series freed so far */
    uint64_t displaced;      /* unknown series freed to make room for a known one */
    uint64_t refused;        /* observations (sum of counts) dropped: no room for a new pair */
    uint64_t refused_series; /* latency_observe calls that found no room for a new pair */
};

/*
 * Is worker (wlen bytes, not NUL-terminated, borrowed for the call) one the
 * caller watches? Nonzero: yes. Called when a series is created and again
 * for every series at each window close, so a worker that becomes known
 * (a target attached) or stops being known (it left) is ranked anew. It
 * must not call into the struct latency that asks.
 */
typedef int (*latency_known_fn)(const char *worker, size_t wlen, void *arg);

/*
 * latency_new - a detector with parameters p (copied; NULL for the
 * defaults). Errors: -EINVAL (a parameter out of the bounds in struct
 * latency_params), -ENOMEM. On success *out is owned by the caller and
 * released with latency_free.
 */
int latency_new(const struct latency_params *p, struct latency **out);

/* latency_free - free l and every series, without events. NULL is a no-op. */
void latency_free(struct latency *l);

/*
 * latency_set_known - rank series with fn(worker, wlen, arg) from now on
 * (see Bounds above); fn NULL, the default, knows no worker, and then every
 * new pair past max_series is refused. Series already tracked are ranked
 * anew at the next window close. arg is borrowed until fn is replaced or l
 * freed.
 */
void latency_set_known(struct latency *l, latency_known_fn fn, void *arg);

/*
 * latency_observe - count `count` requests of value_ns for the series
 * (worker, version), created on first use. worker: 1..LATENCY_LABEL_MAX
 * bytes, version: 0..LATENCY_LABEL_MAX bytes; both borrowed for the call
 * (copied into a new series). The observation goes into the window that
 * is open, i.e. the one the last latency_tick left open; the first call
 * to latency_observe or latency_tick opens the window holding now_ns.
 * count 0 is a no-op.
 * A new pair while max_series are tracked displaces an unknown series if
 * its worker is known and one can go (see Bounds above).
 * Errors: -EINVAL (bad lengths or NULL), -ENOSPC (a new pair while
 * max_series are tracked and none may make room for it), -ENOMEM (no
 * memory for a new series); the last two count the observation as refused
 * in latency_stats.
 */
int latency_observe(struct latency *l, const char *worker, size_t wlen, const char *version,
                    size_t vlen, uint64_t value_ns, uint64_t count, uint64_t now_ns);

/*
 * latency_tick - close the open window if now_ns is at or past its end,
 * judge every series on it and call cb(ev, arg) for each START or END
 * (cb may be NULL to drop them). If now_ns has moved past more than one
 * window since the last tick, the skipped windows are closed as one empty
 * window (it can end episodes, it cannot start one). Then series idle for
 * idle_ns are freed (an episode still open on one is ENDed first). Call it
 * at least every window_ns; calling it more often costs nothing.
 */
void latency_tick(struct latency *l, uint64_t now_ns, latency_event_cb cb, void *arg);

/* latency_stats - current counters. */
struct latency_stats latency_stats(const struct latency *l);

#endif

/*
 * latency.c - the P999 spike detector (see latency.h for the rules).
 *
 * Series live in a chained hash table sized once for max_series (a power
 * of two of heads, at least max_series), keyed by a seeded FNV-1a of the
 * worker and version bytes, which are stored right after the series
 * struct in the same allocation. The seed comes from the table's address:
 * labels arrive from the network, and a fixed hash would let a sender
 * line up all max_series pairs on one chain.
 *
 * Every series is also on one of two recency lists, unknown workers' and
 * known workers', least recently seen first: an observation moves its
 * series to the tail, so the head of the unknown list is the one a known
 * newcomer displaces, and the idle ones are found from the heads without a
 * pass over the table.
 *
 * A tick closes the global window for every series in one pass over the
 * table (judge, maybe emit, reset the histogram, rank it known or not),
 * then frees the idle ones from the heads of the lists. Resetting touches
 * only the buckets between the window's min and max, so a tick over 1024
 * narrow series is cheap.
 *
 * DESIGN: the judgement of one window is a pure function of the series'
 * state and the window's histogram (series_judge); all the time
 * arithmetic is in window boundaries handed in by latency_tick, which is
 * the only place the clock passed in by the caller is compared.
 */
#include "latency.h"

#include "base.h"
#include "hist.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#define NS_PER_MS 1000000ull
#define NS_PER_S 1000000000ull
#define LATENCY_MAX_SERIES 65536u

struct latency_series {
    struct latency_series *next;                /* hash chain */
    struct latency_series *lru_prev, *lru_next; /* recency list, oldest first */
    uint64_t hash;
    double baseline; /* ns; valid once nbase > 0 */
    uint32_t nbase;  /* windows fed into the baseline since it (re)started */
    uint8_t in_episode;
    uint8_t ever_started;
    uint8_t known; /* on lru[1]: the caller knows its worker */
    uint16_t wlen, vlen;
    uint64_t episode_start; /* start of the window that STARTed the episode */
    uint64_t last_start;    /* end of the window of the last START */
    uint64_t last_above;    /* end of the episode's last above window */
    uint64_t max_p999;      /* the episode's peak */
    uint64_t last_seen;     /* now_ns of the last observation */
    struct hist h;
    char key[]; /* worker bytes, then version bytes */
};

struct latency_lru {
    struct latency_series *head, *tail; /* least, most recently seen */
};

struct latency {
    struct latency_params p;
    struct latency_series **table;
    size_t mask;
    uint64_t seed;
    struct latency_lru lru[2]; /* [0] unknown workers, [1] known workers */
    latency_known_fn known;
    void *known_arg;
    int started;
    uint64_t win_start, win_end;
    struct latency_stats st;
};

void latency_params_default(struct latency_params *p)
{
    p->window_ns = 10 * NS_PER_S;
    p->factor = 3.0;
    p->min_ns = 50 * NS_PER_MS;
    p->min_count = 500;
    p->cooldown_ns = 120 * NS_PER_S;
    p->alpha = 0.3;
    p->max_series = 1024;
    p->warmup = 3;
    p->min_tail = 5;
    p->idle_ns = 600 * NS_PER_S;
    p->relearn_ns = 10 * p->cooldown_ns;
}

static int latency_params_ok(const struct latency_params *p)
{
    return p->window_ns >= NS_PER_MS && isfinite(p->factor) && p->factor >= 1 &&
           p->min_count >= 1 && isfinite(p->alpha) && p->alpha > 0 && p->alpha <= 1 &&
           p->max_series >= 1 && p->max_series <= LATENCY_MAX_SERIES && p->warmup >= 1 &&
           p->cooldown_ns <= UINT64_MAX / 4 && p->window_ns <= UINT64_MAX / 4 &&
           p->idle_ns >= p->cooldown_ns + 2 * p->window_ns && p->relearn_ns > 0;
}

int latency_new(const struct latency_params *p, struct latency **out)
{
    struct latency_params def;
    if (p == NULL) {
        latency_params_default(&def);
        p = &def;
    }
    if (out == NULL || !latency_params_ok(p))
        return -EINVAL;
    struct latency *l = isoprof_calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    l->p = *p;
    size_t heads = 16;
    while (heads < p->max_series)
        heads <<= 1;
    l->table = isoprof_calloc(heads, sizeof(l->table[0]));
    if (l->table == NULL)
        goto fail_table;
    l->mask = heads - 1;
    l->seed = ((uint64_t)(uintptr_t)l * 0x9E3779B97F4A7C15ull) ^ 0xcbf29ce484222325ull;
    l->st.bytes = sizeof(*l) + heads * sizeof(l->table[0]);
    *out = l;
    return 0;

fail_table:
    isoprof_free(l);
    return -ENOMEM;
}

void latency_free(struct latency *l)
{
    if (l == NULL)
        return;
    for (size_t i = 0; i <= l->mask; i++) {
        struct latency_series *s = l->table[i];
        while (s != NULL) {
            struct latency_series *next = s->next;
            isoprof_free(s);
            s = next;
        }
    }
    isoprof_free(l->table);
    isoprof_free(l);
}

static uint64_t latency_hash(const struct latency *l, const char *w, size_t wlen, const char *v,
                             size_t vlen)
{
    uint64_t h = l->seed;
    for (size_t i = 0; i < wlen; i++)
        h = (h ^ (unsigned char)w[i]) * 0x100000001b3ull;
    h = (h ^ 0xff) * 0x100000001b3ull; /* no label byte is 0xff from statsd; any is fine */
    for (size_t i = 0; i < vlen; i++)
        h = (h ^ (unsigned char)v[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static void latency_start_windows(struct latency *l, uint64_t now)
{
    l->started = 1;
    l->win_start = now - now % l->p.window_ns;
    l->win_end = l->win_start + l->p.window_ns;
}

static size_t series_bytes(const struct latency_series *s)
{
    return sizeof(*s) + s->wlen + s->vlen;
}

void latency_set_known(struct latency *l, latency_known_fn fn, void *arg)
{
    l->known = fn;
    l->known_arg = arg;
}

static int latency_is_known(const struct latency *l, const char *worker, size_t wlen)
{
    return l->known != NULL && l->known(worker, wlen, l->known_arg) != 0;
}

static void lru_unlink(struct latency_lru *q, struct latency_series *s)
{
    if (s->lru_prev != NULL)
        s->lru_prev->lru_next = s->lru_next;
    else
        q->head = s->lru_next;
    if (s->lru_next != NULL)
        s->lru_next->lru_prev = s->lru_prev;
    else
        q->tail = s->lru_prev;
    s->lru_prev = s->lru_next = NULL;
}

/* Put s on q after `after` (NULL: at the head). */
static void lru_insert_after(struct latency_lru *q, struct latency_series *after,
                             struct latency_series *s)
{
    s->lru_prev = after;
    s->lru_next = after != NULL ? after->lru_next : q->head;
    if (s->lru_next != NULL)
        s->lru_next->lru_prev = s;
    else
        q->tail = s;
    if (after != NULL)
        after->lru_next = s;
    else
        q->head = s;
}

/* Move s to the other list, at its place by last_seen (a move happens
 * when the caller's set of known workers changed: rare). */
static void series_rank(struct latency *l, struct latency_series *s, int known)
{
    lru_unlink(&l->lru[s->known], s);
    s->known = (uint8_t)(known != 0);
    struct latency_lru *q = &l->lru[s->known];
    struct latency_series *after = q->tail;
    while (after != NULL && after->last_seen > s->last_seen)
        after = after->lru_prev;
    lru_insert_after(q, after, s);
    if (s->known)
        l->st.known++;
    else
        l->st.known--;
}

/* Unlink s from its chain and its list and free it. */
static void series_free(struct latency *l, struct latency_series *s)
{
    for (struct latency_series **pp = &l->table[s->hash & l->mask]; *pp != NULL;
         pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    lru_unlink(&l->lru[s->known], s);
    l->st.series--;
    if (s->known)
        l->st.known--;
    l->st.bytes -= series_bytes(s);
    isoprof_free(s);
}

/* The table is full and a new series of a known worker wants in: the
 * least recently seen unknown series that is not in an episode (its END
 * could not be delivered from here), or NULL. */
static struct latency_series *latency_victim(const struct latency *l)
{
    struct latency_series *v = l->lru[0].head;
    while (v != NULL && v->in_episode)
        v = v->lru_next;
    return v;
}

int latency_observe(struct latency *l, const char *worker, size_t wlen, const char *version,
                    size_t vlen, uint64_t value_ns, uint64_t count, uint64_t now_ns)
{
    if (worker == NULL || wlen == 0 || wlen > LATENCY_LABEL_MAX || vlen > LATENCY_LABEL_MAX ||
        (version == NULL && vlen > 0))
        return -EINVAL;
    if (count == 0)
        return 0;
    if (!l->started)
        latency_start_windows(l, now_ns);
    uint64_t h = latency_hash(l, worker, wlen, version, vlen);
    struct latency_series **head = &l->table[h & l->mask];
    struct latency_series *s = *head;
    for (; s != NULL; s = s->next)
        if (s->hash == h && s->wlen == wlen && s->vlen == vlen &&
            memcmp(s->key, worker, wlen) == 0 &&
            (vlen == 0 || memcmp(s->key + wlen, version, vlen) == 0))
            break;
    if (s == NULL) {
        int known = latency_is_known(l, worker, wlen);
        struct latency_series *victim = NULL;
        if (l->st.series >= l->p.max_series && (!known || (victim = latency_victim(l)) == NULL)) {
            l->st.refused += count;
            l->st.refused_series++;
            return -ENOSPC;
        }
        s = isoprof_malloc(sizeof(*s) + wlen + vlen);
        if (s == NULL) {
            l->st.refused += count;
            l->st.refused_series++;
            return -ENOMEM;
        }
        if (victim != NULL) {
            series_free(l, victim);
            l->st.displaced++;
        }
        memset(s, 0, offsetof(struct latency_series, h));
        hist_init(&s->h);
        s->hash = h;
        s->wlen = (uint16_t)wlen;
        s->vlen = (uint16_t)vlen;
        memcpy(s->key, worker, wlen);
        if (vlen > 0)
            memcpy(s->key + wlen, version, vlen);
        s->known = (uint8_t)known;
        s->next = *head;
        *head = s;
        lru_insert_after(&l->lru[s->known], l->lru[s->known].tail, s);
        l->st.series++;
        l->st.known += s->known;
        l->st.bytes += series_bytes(s);
    } else if (s != l->lru[s->known].tail) {
        struct latency_lru *q = &l->lru[s->known];
        lru_unlink(q, s);
        lru_insert_after(q, q->tail, s);
    }
    hist_record(&s->h, value_ns, count);
    s->last_seen = now_ns;
    return 0;
}

static void series_event(const struct latency_series *s, enum latency_kind kind,
                         struct latency_event *ev)
{
    ev->kind = kind;
    ev->worker = s->key;
    ev->worker_len = s->wlen;
    ev->version = s->key + s->wlen;
    ev->version_len = s->vlen;
    ev->max_p999_ns = s->max_p999;
    ev->episode_start_ns = s->episode_start;
    ev->last_above_ns = s->last_above;
    ev->relearned = 0;
}

static void series_feed(const struct latency *l, struct latency_series *s, uint64_t p999)
{
    if (s->nbase == 0)
        s->baseline = (double)p999;
    else
        s->baseline = l->p.alpha * (double)p999 + (1 - l->p.alpha) * s->baseline;
    if (s->nbase < UINT32_MAX)
        s->nbase++;
}

/* Judge one series on the window [ws, we) its histogram holds. */
static void series_judge(struct latency *l, struct latency_series *s, uint64_t ws, uint64_t we,
                         latency_event_cb cb, void *arg)
{
    const struct latency_params *p = &l->p;
    uint64_t n = hist_count(&s->h);
    uint64_t p999 = hist_quantile(&s->h, 0.999);
    int qualifying = n >= p->min_count;
    int has_base = s->nbase >= p->warmup;
    uint64_t threshold = 0;
    if (has_base) {
        double t = p->factor * s->baseline;
        threshold = t >= (double)UINT64_MAX ? UINT64_MAX : (uint64_t)t;
        if (threshold < p->min_ns)
            threshold = p->min_ns;
    }
    int above = qualifying && has_base && p999 > threshold;
    if (above && p->min_tail > 1)
        above = n >= p->min_tail && hist_value_at_rank(&s->h, n - p->min_tail + 1) > threshold;

    struct latency_event ev;
    ev.window_start_ns = ws;
    ev.window_end_ns = we;
    ev.p999_ns = p999;
    ev.count = n;
    ev.baseline_ns = (uint64_t)s->baseline;
    ev.threshold_ns = threshold;

    if (s->in_episode) {
        if (above) {
            s->last_above = we;
            if (p999 > s->max_p999)
                s->max_p999 = p999;
            if (we - s->episode_start >= p->relearn_ns) {
                /* The level has stayed up: it is the new normal. */
                s->in_episode = 0;
                l->st.in_episode--;
                series_event(s, LATENCY_END, &ev);
                ev.relearned = 1;
                if (cb != NULL)
                    cb(&ev, arg);
                s->nbase = 0;
                series_feed(l, s, p999);
            }
            return;
        }
        if (we - s->last_above >= p->cooldown_ns) {
            s->in_episode = 0;
            l->st.in_episode--;
            series_event(s, LATENCY_END, &ev);
            if (cb != NULL)
                cb(&ev, arg);
        }
    } else if (above) {
        if (!s->ever_started || we - s->last_start >= p->cooldown_ns) {
            s->in_episode = 1;
            s->ever_started = 1;
            s->episode_start = ws;
            s->last_start = we;
            s->last_above = we;
            s->max_p999 = p999;
            l->st.in_episode++;
            l->st.episodes++;
            series_event(s, LATENCY_START, &ev);
            if (cb != NULL)
                cb(&ev, arg);
        }
        return; /* a spike window never feeds the baseline */
    }
    if (qualifying)
        series_feed(l, s, p999);
}

static void latency_close_window(struct latency *l, uint64_t ws, uint64_t we, latency_event_cb cb,
                                 void *arg)
{
    for (size_t i = 0; i <= l->mask; i++) {
        for (struct latency_series *s = l->table[i]; s != NULL; s = s->next) {
            series_judge(l, s, ws, we, cb, arg);
            hist_reset(&s->h);
            int known = latency_is_known(l, s->key, s->wlen);
            if (known != s->known)
                series_rank(l, s, known);
        }
    }
}

/* Free the series idle for idle_ns: the heads of both lists. */
static void latency_evict(struct latency *l, uint64_t now, latency_event_cb cb, void *arg)
{
    for (int k = 0; k < 2; k++) {
        struct latency_series *s;
        while ((s = l->lru[k].head) != NULL && now > s->last_seen &&
               now - s->last_seen >= l->p.idle_ns) {
            if (s->in_episode) {
                /* Cannot happen with idle_ns >= cooldown + 2 windows (the
                 * empty windows end the episode first); kept so that an
                 * episode is never left open without its END. */
                struct latency_event ev;
                memset(&ev, 0, sizeof(ev));
                series_event(s, LATENCY_END, &ev);
                ev.window_start_ns = l->win_start;
                ev.window_end_ns = l->win_start;
                ev.baseline_ns = (uint64_t)s->baseline;
                s->in_episode = 0;
                l->st.in_episode--;
                if (cb != NULL)
                    cb(&ev, arg);
            }
            series_free(l, s);
            l->st.evicted++;
        }
    }
}

void latency_tick(struct latency *l, uint64_t now_ns, latency_event_cb cb, void *arg)
{
    if (!l->started) {
        latency_start_windows(l, now_ns);
        return;
    }
    if (now_ns < l->win_end)
        return;
    latency_close_window(l, l->win_start, l->win_end, cb, arg);
    uint64_t next = l->win_end;
    uint64_t aligned = now_ns - now_ns % l->p.window_ns;
    if (aligned > next) {
        /* The ticks stalled: every histogram is empty now, so the windows
         * missed are judged as one empty window. */
        latency_close_window(l, next, aligned, cb, arg);
        next = aligned;
    }
    l->win_start = next;
    l->win_end = next + l->p.window_ns;
    latency_evict(l, now_ns, cb, arg);
}

struct latency_stats latency_stats(const struct latency *l)
{
    return l->st;
}

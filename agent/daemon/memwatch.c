/*
 * memwatch.c - one isolate's memory watch (memwatch.h): the limit rules,
 * the near-limit episode and the back-off of its heap windows, and the
 * growth detector.
 *
 * All time arithmetic is here, on the now each call is given. The growth
 * detector keeps one floor per bucket in a ring indexed by the bucket's
 * number since origin_ns; a poll that lands in a later bucket closes the
 * ones before it (those no poll fell in stay 0: a gap), and each closed
 * bucket is a judgement of the last MEMWATCH_BUCKETS. Its memory is fixed:
 * a struct memwatch is a few hundred bytes per isolate.
 */
#include "memwatch.h"

#include "procscan.h"
#include "store.h"

#include <string.h>

/* The same order as the store's, which keeps them in anomaly records. */
_Static_assert(MEMWATCH_SRC_CONFIG + 1 == STORE_LIMIT_CONFIG &&
                   MEMWATCH_SRC_V8_DEFAULT + 1 == STORE_LIMIT_V8_DEFAULT &&
                   MEMWATCH_SRC_FLAG + 1 == STORE_LIMIT_FLAG &&
                   MEMWATCH_SRC_NODE_OPTIONS + 1 == STORE_LIMIT_NODE_OPTIONS &&
                   MEMWATCH_SRC_DENO_V8_FLAGS + 1 == STORE_LIMIT_DENO_V8_FLAGS &&
                   MEMWATCH_SRC_WORKERD + 1 == STORE_LIMIT_WORKERD &&
                   MEMWATCH_SRC_PROCESS + 1 == STORE_LIMIT_PROCESS &&
                   MEMWATCH_NSOURCES == STORE_LIMIT_SOURCE_MAX,
               "memwatch_source and store_limit_source in step");

uint8_t memwatch_source_store(unsigned src)
{
    return src < MEMWATCH_NSOURCES ? (uint8_t)(src + 1) : STORE_LIMIT_NONE;
}

const char *memwatch_source_name(unsigned src)
{
    return src < MEMWATCH_NSOURCES ? store_limit_source_name(src + 1) : "?";
}

uint8_t memwatch_kind_anomaly(enum memwatch_kind k)
{
    return k == MEMWATCH_GROWTH ? STORE_ANOMALY_MEMORY_GROWTH : STORE_ANOMALY_MEMORY_NEAR_LIMIT;
}

/* --- the limit rules --- */

/* V8's heap limit from its old space and semi-space sizes (MiB): the old
 * space and three semi-spaces (two plus the new large-object space). */
static uint64_t v8_heap(uint64_t old_mb, uint64_t semi_mb)
{
    return (old_mb + 3 * semi_mb) * MEMWATCH_MIB;
}

/* A value of NAME=... in an environ text, or NULL. */
static const char *env_value(const char *env, size_t len, const char *name, size_t *vlen)
{
    size_t nl = strlen(name);
    const char *p = env, *end = env + len;
    while (env != NULL && p < end) {
        const char *e = memchr(p, '\0', (size_t)(end - p));
        if (e == NULL)
            e = end;
        if ((size_t)(e - p) > nl && memcmp(p, name, nl) == 0 && p[nl] == '=') {
            *vlen = (size_t)(e - p) - nl - 1;
            return p + nl + 1;
        }
        p = e + 1;
    }
    return NULL;
}

/* Deno's V8 flags: a comma-separated list (--v8-flags=a,b or
 * DENO_V8_FLAGS). The heap flags found go into h with source src. */
static void deno_flags(const char *v, size_t n, uint8_t src, struct procscan_heap *h)
{
    const char *p = v, *end = v + n;
    while (p < end) {
        const char *c = memchr(p, ',', (size_t)(end - p));
        const char *te = c ? c : end;
        char name[32];
        size_t k = 0;
        while (p + k < te && p[k] != '=' && k < sizeof(name) - 1) {
            name[k] = p[k] == '_' && k > 1 ? '-' : p[k];
            k++;
        }
        name[k] = '\0';
        if (p + k < te && p[k] == '=') {
            const char *val = p + k + 1;
            uint64_t mb = 0;
            int ok = val < te && te - val <= 9;
            for (const char *q = val; ok && q < te; q++) {
                ok = *q >= '0' && *q <= '9';
                mb = mb * 10 + (uint64_t)(*q - '0');
            }
            if (ok && mb > 0) {
                if (strcmp(name, "--max-old-space-size") == 0) {
                    h->old_mb = mb;
                    h->old_src = src;
                } else if (strcmp(name, "--max-semi-space-size") == 0) {
                    h->semi_mb = mb;
                    h->semi_src = src;
                } else if (strcmp(name, "--max-heap-size") == 0) {
                    h->heap_mb = mb;
                    h->heap_src = src;
                }
            }
        }
        p = te + 1;
    }
}

static void deno_heap_flags(const char *cmdline, size_t len, const char *env, size_t elen,
                            struct procscan_heap *h)
{
    static const char arg[] = "--v8-flags=";
    size_t vl = 0;
    const char *v = env_value(env, elen, "DENO_V8_FLAGS", &vl);
    if (v != NULL)
        deno_flags(v, vl, PROCSCAN_HEAP_ENV, h);
    /* Deno's own options come before the script; --v8-flags is one of
     * them, given once (the last wins, as with the others). */
    const char *p = cmdline, *end = cmdline + len;
    while (cmdline != NULL && p < end) {
        const char *e = memchr(p, '\0', (size_t)(end - p));
        if (e == NULL)
            e = end;
        size_t n = (size_t)(e - p);
        if (n == 2 && p[0] == '-' && p[1] == '-')
            break;
        if (n > sizeof(arg) - 1 && memcmp(p, arg, sizeof(arg) - 1) == 0)
            deno_flags(p + sizeof(arg) - 1, n - (sizeof(arg) - 1), PROCSCAN_HEAP_CMDLINE, h);
        p = e + 1;
    }
}

uint64_t memwatch_v8_limit(const char *runtime, const char *cmdline, size_t len, const char *env,
                           size_t elen, uint64_t phys, uint8_t *src)
{
    int deno = runtime != NULL && strcmp(runtime, "deno") == 0;
    struct procscan_heap h;
    memset(&h, 0, sizeof(h));
    if (deno) {
        deno_heap_flags(cmdline, len, env, elen, &h);
    } else {
        size_t nl = 0;
        const char *no = env_value(env, elen, "NODE_OPTIONS", &nl);
        procscan_heap_flags(cmdline, len, no, nl, &h);
    }
    /* V8's defaults for phys bytes: the old space a quarter of the memory,
     * at most 4 GiB; the semi-space old/128 (old/256 up to 256 MiB of old
     * space), between 1 MiB and the build's most. */
    uint64_t max_semi = deno ? 32 : 16;
    uint64_t old = phys / 4 / MEMWATCH_MIB;
    if (old > 4096)
        old = 4096;
    if (old < 16)
        old = 16;
    uint64_t semi = old / (old <= 256 ? 256 : 128);
    if (semi > max_semi)
        semi = max_semi;
    if (semi < 1)
        semi = 1;
    uint8_t from = PROCSCAN_HEAP_NONE;
    if (h.semi_mb) {
        semi = h.semi_mb;
        from = h.semi_src;
    }
    uint64_t limit;
    if (h.old_mb) {
        /* The old space as given; the young space keeps its own size. */
        limit = v8_heap(h.old_mb, semi);
        from = h.old_src;
    } else if (h.heap_mb) {
        /* The whole heap as given; V8 carves the young space out of it. */
        limit = h.heap_mb * MEMWATCH_MIB;
        from = h.heap_src;
    } else {
        limit = v8_heap(old, semi);
    }
    if (src != NULL)
        *src = from == PROCSCAN_HEAP_NONE  ? MEMWATCH_SRC_V8_DEFAULT
               : from == PROCSCAN_HEAP_ENV ? (deno ? MEMWATCH_SRC_DENO_V8_FLAGS
                                                   : MEMWATCH_SRC_NODE_OPTIONS)
                                           : MEMWATCH_SRC_FLAG;
    return limit;
}

void memwatch_params_from_cfg(const struct cfg *c, uint64_t heap_max_ns,
                              struct memwatch_params *p)
{
    memset(p, 0, sizeof(*p));
    p->threshold = c->anomaly.memory.threshold;
    p->cooldown_ns = c->anomaly.cooldown_ns;
    p->heap_first_ns = c->anomaly.memory.heap_period_ns;
    p->heap_max_ns = heap_max_ns > p->heap_first_ns ? heap_max_ns : p->heap_first_ns;
    p->max_share = c->anomaly.memory.max_share;
    p->snapshot = c->anomaly.memory.snapshot;
    p->growth = c->anomaly.memory.growth.enabled;
    p->growth_window_ns = c->anomaly.memory.growth.window_ns;
    p->growth_horizon_ns = c->anomaly.memory.growth.horizon_ns;
}

void memwatch_init(struct memwatch *m)
{
    memset(m, 0, sizeof(*m));
}

void memwatch_set_limit(struct memwatch *m, uint64_t bytes, uint8_t src)
{
    m->limit = bytes;
    m->source = src;
}

uint64_t memwatch_threshold(const struct memwatch *m, const struct memwatch_params *p)
{
    return (uint64_t)(p->threshold * (double)m->limit);
}

/* --- the growth detector --- */

static void growth_reset(struct memwatch_growth *g)
{
    memset(g, 0, sizeof(*g));
    g->eta_ns = UINT64_MAX;
}

/*
 * The envelope alone is biased upward at its newest end: the least floor
 * of the last few buckets is the least of few polls, so a heap that only
 * swings (a sawtooth whose buckets do not all reach its bottom) has an
 * envelope that rises there by construction. So the floors must also rise
 * quarter by quarter: the least floor of each quarter above the one before
 * it by a sixteenth of the rise from the first to the last, and that rise
 * at least MEMWATCH_MIN_GROWTH and no smaller than the floors' own swing
 * inside a quarter (the median of the four quarters' ranges). A leak's
 * quarters step up by a quarter of its growth each while a quarter's range
 * is that quarter plus the noise; a swinging heap's quarters barely differ
 * while its range is the whole swing.
 */
static int quarters_rise(const struct memwatch_growth *g, uint64_t last)
{
    enum { N = MEMWATCH_BUCKETS, Q = MEMWATCH_BUCKETS / 4 };
    uint64_t lo[4], range[4];
    for (int q = 0; q < 4; q++) {
        uint64_t mn = 0, mx = 0;
        for (int i = q * Q; i < (q + 1) * Q; i++) {
            uint64_t f = g->floor[(last - (uint64_t)(N - 1 - i)) % N];
            if (f == 0)
                continue;
            if (mn == 0 || f < mn)
                mn = f;
            if (f > mx)
                mx = f;
        }
        if (mn == 0)
            return 0; /* a quarter of gaps tells nothing */
        lo[q] = mn;
        range[q] = mx - mn;
    }
    if (lo[3] <= lo[0])
        return 0;
    uint64_t rise = lo[3] - lo[0];
    if (rise < MEMWATCH_MIN_GROWTH)
        return 0;
    for (int q = 1; q < 4; q++)
        if (lo[q] <= lo[q - 1] || (lo[q] - lo[q - 1]) * 16 < rise)
            return 0;
    /* The median of four: the mean of the middle two. */
    for (int i = 1; i < 4; i++)
        for (int j = i; j > 0 && range[j] < range[j - 1]; j--) {
            uint64_t x = range[j];
            range[j] = range[j - 1];
            range[j - 1] = x;
        }
    return rise >= (range[1] + range[2]) / 2;
}

/*
 * Judge the last MEMWATCH_BUCKETS closed buckets (the newest is index
 * last): the envelope, its growth per quarter and its trend. Sets g's
 * judgement; steady when it is a leak by the rules of memwatch.h.
 */
static void growth_judge(struct memwatch_growth *g, uint64_t last, uint64_t limit,
                         const struct memwatch_params *p)
{
    enum { N = MEMWATCH_BUCKETS, Q = MEMWATCH_BUCKETS / 4 };
    uint64_t env[N];
    unsigned gaps = 0;
    uint64_t low = 0; /* the least floor seen from the newest back */
    for (int i = N - 1; i >= 0; i--) {
        uint64_t f = g->floor[(last - (uint64_t)(N - 1 - i)) % N];
        if (f == 0) {
            gaps++;
        } else if (low == 0 || f < low) {
            low = f;
        }
        env[i] = low;
    }
    g->judged = 1;
    g->steady = 0;
    g->growth = 0;
    g->rate = 0;
    g->eta_ns = UINT64_MAX;
    /* A window with too many gaps (the isolate stopped answering, a
     * snapshot held it) tells nothing; nor one whose newest buckets are
     * all gaps. */
    if (gaps > Q || low == 0) {
        return;
    }
    /* Gaps at the start take the first floor after them. */
    int first = 0;
    while (first < N && env[first] == 0)
        first++;
    for (int i = 0; i < first; i++)
        env[i] = env[first];
    g->envelope_last = env[N - 1];
    uint64_t total = env[N - 1] - env[0];
    g->growth = total;
    /* The trend: least squares of the envelope over the bucket index. */
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < N; i++) {
        double x = i, y = (double)(env[i] - env[0]);
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    double slope = (N * sxy - sx * sy) / (N * sxx - sx * sx); /* bytes per bucket */
    if (slope <= 0)
        return;
    g->rate = slope * 1e9 / (double)g->bucket_ns;
    double head = limit > env[N - 1] ? (double)(limit - env[N - 1]) : 0;
    double eta_s = head / g->rate;
    g->eta_ns = eta_s * 1e9 >= (double)UINT64_MAX ? UINT64_MAX : (uint64_t)(eta_s * 1e9);
    if (total < MEMWATCH_MIN_GROWTH)
        return;
    /* Steady: every quarter holds at least a sixteenth of the growth. */
    for (int q = 0; q < 4; q++) {
        uint64_t from = q == 0 ? env[0] : env[q * Q - 1];
        uint64_t part = env[(q + 1) * Q - 1] - from;
        if (part * 16 < total)
            return;
    }
    if (!quarters_rise(g, last))
        return;
    g->steady = g->eta_ns <= p->growth_horizon_ns;
}

/* Feed one poll; 1 when a bucket closed and the window was judged. */
static int growth_feed(struct memwatch_growth *g, const struct memwatch_params *p, uint64_t now,
                       uint64_t used, uint64_t limit)
{
    uint64_t bucket_ns = p->growth_window_ns / MEMWATCH_BUCKETS;
    if (bucket_ns == 0)
        bucket_ns = 1;
    if (g->bucket_ns != bucket_ns) {
        /* First poll, or the window was reconfigured: start over. */
        growth_reset(g);
        g->bucket_ns = bucket_ns;
        g->origin_ns = now;
    }
    if (now < g->origin_ns)
        now = g->origin_ns;
    uint64_t idx = (now - g->origin_ns) / bucket_ns;
    int judged = 0;
    if (idx > g->cur) {
        /* The bucket being filled closes, and those the polls skipped
         * (their floors 0: gaps). */
        for (uint64_t b = g->cur + 1; b < idx && b <= g->cur + MEMWATCH_BUCKETS; b++)
            g->floor[b % MEMWATCH_BUCKETS] = 0;
        g->filled += idx - g->cur;
        g->cur = idx;
        if (g->filled >= MEMWATCH_BUCKETS) {
            growth_judge(g, idx - 1, limit, p);
            judged = 1;
        }
        /* The slot of the bucket a window ago: the new one's now. */
        g->floor[idx % MEMWATCH_BUCKETS] = 0;
    }
    uint64_t *f = &g->floor[idx % MEMWATCH_BUCKETS];
    if (used > 0 && (*f == 0 || used < *f))
        *f = used;
    return judged;
}

/* --- the episodes --- */

static int cooled(const struct memwatch_episode *e, const struct memwatch_params *p, uint64_t now)
{
    return e->opened_ns == 0 || now - e->opened_ns >= p->cooldown_ns;
}

static void episode_open(struct memwatch_episode *e, const struct memwatch_params *p,
                         uint64_t now, uint64_t value)
{
    e->open = 1;
    e->since_ns = now;
    e->opened_ns = now;
    e->quiet_ns = 0;
    e->value = value;
    e->snap_due = p->snapshot;
}

static void episode_close(struct memwatch_episode *e)
{
    e->open = 0;
    e->quiet_ns = 0;
    e->snap_due = 0;
}

double memwatch_cost_share(const struct memwatch *m, uint64_t now)
{
    const struct memwatch_episode *e = &m->k[MEMWATCH_NEAR];
    if (!e->open || now <= e->since_ns)
        return 0;
    return (double)m->cost_ns / (double)(now - e->since_ns);
}

static void near_poll(struct memwatch *m, const struct memwatch_params *p, uint64_t now,
                      uint64_t used, struct memwatch_actions *out)
{
    struct memwatch_episode *e = &m->k[MEMWATCH_NEAR];
    uint64_t thr = memwatch_threshold(m, p);
    if (used < thr) {
        if (!e->open)
            return;
        if (e->quiet_ns == 0) {
            e->quiet_ns = now;
        } else if (now - e->quiet_ns >= p->cooldown_ns) {
            episode_close(e);
            m->heap_due_ns = 0;
            out->end |= 1u << MEMWATCH_NEAR;
            return;
        }
    } else if (e->open) {
        e->quiet_ns = 0;
        if (used > e->value)
            e->value = used;
        out->extend |= 1u << MEMWATCH_NEAR;
    } else {
        if (!cooled(e, p, now))
            return; /* rate-limited: one episode per isolate per cooldown */
        episode_open(e, p, now, used);
        out->open |= 1u << MEMWATCH_NEAR;
        /* Evidence first: the first heap window is taken at once, whatever
         * it costs; the back-off and the cap apply to the ones after. */
        out->heap = 1;
        out->heap_kind = MEMWATCH_NEAR;
        m->cost_ns = 0;
        m->heap_windows = 1;
        m->waited = 0;
        m->heap_step_ns = p->heap_first_ns;
        m->heap_due_ns = now + m->heap_step_ns;
        return;
    }
    /* Open (above the threshold or cooling down): its next heap window. */
    if (m->heap_due_ns == 0 || now < m->heap_due_ns)
        return;
    double share = p->max_share;
    uint64_t elapsed = now - e->since_ns;
    if (share > 0 && (double)m->cost_ns > share * (double)elapsed) {
        /* Over the share: wait until the episode's time has grown enough. */
        uint64_t ready = e->since_ns + (uint64_t)((double)m->cost_ns / share);
        m->heap_due_ns = ready > now ? ready : now + 1;
        m->waited++;
        return;
    }
    out->heap = 1;
    out->heap_kind = MEMWATCH_NEAR;
    m->heap_windows++;
    if (m->heap_step_ns < p->heap_max_ns) {
        m->heap_step_ns *= 2;
        if (m->heap_step_ns > p->heap_max_ns)
            m->heap_step_ns = p->heap_max_ns;
    }
    m->heap_due_ns = now + m->heap_step_ns;
}

static void growth_poll(struct memwatch *m, const struct memwatch_params *p, uint64_t now,
                        struct memwatch_actions *out)
{
    struct memwatch_episode *e = &m->k[MEMWATCH_GROWTH];
    const struct memwatch_growth *g = &m->g;
    if (g->steady) {
        e->quiet_ns = 0;
        if (e->open) {
            e->value = g->envelope_last;
            out->extend |= 1u << MEMWATCH_GROWTH;
            return;
        }
        if (!cooled(e, p, now))
            return;
        episode_open(e, p, now, g->envelope_last);
        out->open |= 1u << MEMWATCH_GROWTH;
        /* Its heap window now, while the heap is small; a near-limit
         * episode opened by the same poll has taken one already. */
        if (!out->heap) {
            out->heap = 1;
            out->heap_kind = MEMWATCH_GROWTH;
        }
        return;
    }
    if (!e->open)
        return;
    if (e->quiet_ns == 0) {
        e->quiet_ns = now;
    } else if (now - e->quiet_ns >= p->growth_window_ns / 2) {
        episode_close(e);
        out->end |= 1u << MEMWATCH_GROWTH;
    }
}

void memwatch_poll(struct memwatch *m, const struct memwatch_params *p, uint64_t now,
                   uint64_t used, struct memwatch_actions *out)
{
    memset(out, 0, sizeof(*out));
    m->last = used;
    if (m->limit == 0)
        return;
    int judged = growth_feed(&m->g, p, now, used, m->limit);
    near_poll(m, p, now, used, out);
    if (p->growth && judged) {
        growth_poll(m, p, now, out);
    } else if (!p->growth && m->k[MEMWATCH_GROWTH].open) {
        episode_close(&m->k[MEMWATCH_GROWTH]); /* turned off by a reload */
        out->end |= 1u << MEMWATCH_GROWTH;
    }
    /* One snapshot owed, the near-limit episode's first. */
    for (unsigned k = 0; k < MEMWATCH_NKINDS; k++) {
        if (m->k[k].open && m->k[k].snap_due && !(out->end & (1u << k))) {
            if (!p->snapshot) {
                m->k[k].snap_due = 0;
                continue;
            }
            out->snapshot = 1;
            out->snap_kind = (uint8_t)k;
            break;
        }
    }
}

void memwatch_heap_cost(struct memwatch *m, uint64_t pause_ns)
{
    if (m->k[MEMWATCH_NEAR].open)
        m->cost_ns += pause_ns;
}

void memwatch_snapshot_done(struct memwatch *m, enum memwatch_kind kind)
{
    if ((unsigned)kind < MEMWATCH_NKINDS)
        m->k[kind].snap_due = 0;
}

void memwatch_gone(struct memwatch *m, struct memwatch_actions *out)
{
    memset(out, 0, sizeof(*out));
    for (unsigned k = 0; k < MEMWATCH_NKINDS; k++) {
        if (m->k[k].open) {
            episode_close(&m->k[k]);
            out->end |= 1u << k;
        }
    }
    m->heap_due_ns = 0;
    m->last = 0;
    growth_reset(&m->g);
}

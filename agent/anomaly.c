/*
 * anomaly.c - the agent's anomaly detection: memory near the limit, the
 * isolate that dies there, and P999 latency spikes.
 *
 * Memory: every Runtime.getHeapUsage poll of a target lands in
 * anomaly_memory(). At or above anomaly.memory.threshold x memory_limit an
 * episode of memory_near_limit starts, unless one started on this isolate
 * less than anomaly.cooldown ago: it is recorded, and at once a heap window
 * and a CPU window at anomaly.cpu_interval are taken, both pinned to it;
 * while memory stays up, the heap timer takes a pinned heap window every
 * anomaly.memory.heap_period (target.c). The episode ends once memory has
 * been back under the threshold for the cooldown. A session that ends by
 * itself (the target closed it, or left /json/list) while the last poll
 * was at or above the threshold, or while a memory_near_limit episode was
 * still open, is an oom_suspected: recorded with the
 * isolate's last heap and CPU windows pinned.
 *
 * Latency: DogStatsD timings on the UDP listener (statsd.c) feed the P999
 * detector (latency.c) per worker/version; a spike episode triggers a
 * pinned CPU window at the fine interval on each attached isolate of that
 * worker/version.
 *
 * Episodes are recorded through the writer (writer_episode), so the store
 * sees them in order with the windows.
 */
#include "internal.h"
#include "log.h"

#include "base.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct episode *episode_new(struct agent *a, uint8_t kind, const char *worker, const char *version,
                            uint32_t isolate, uint64_t value, uint64_t threshold)
{
    (void)a;
    struct episode *e = isoprof_calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    e->worker = isoprof_strdup(worker);
    e->version = isoprof_strdup(version);
    if (e->worker == NULL || e->version == NULL) {
        isoprof_free(e->worker);
        isoprof_free(e->version);
        isoprof_free(e);
        return NULL;
    }
    e->refs = 1;
    e->kind = kind;
    e->isolate = isolate;
    e->start_ns = e->end_ns = isoprof_now_wall_ns();
    e->value = value;
    e->threshold = threshold;
    e->open = 1;
    return e;
}

struct episode *episode_ref(struct episode *e)
{
    e->refs++;
    return e;
}

void episode_unref(struct episode *e)
{
    if (e == NULL || --e->refs > 0)
        return;
    isoprof_free(e->worker);
    isoprof_free(e->version);
    isoprof_free(e);
}

/* --- memory figures of a window --- */

void memacc_reset(struct memacc *m)
{
    m->n = 0;
    m->step = 1;
    m->skip = 0;
    m->min = m->max = m->last = 0;
}

void memacc_add(struct memacc *m, uint64_t bytes)
{
    if (m->step == 0)
        memacc_reset(m);
    if (m->min == 0 || bytes < m->min)
        m->min = bytes;
    if (bytes > m->max)
        m->max = bytes;
    m->last = bytes;
    if (m->skip > 0) {
        m->skip--;
        return;
    }
    if (m->n == MEMACC_MAX) {
        /* Keep every other value and record half as often from now on. */
        for (uint32_t i = 0; i < MEMACC_MAX / 2; i++)
            m->kib[i] = m->kib[2 * i + 1];
        m->n = MEMACC_MAX / 2;
        m->step *= 2;
    }
    uint64_t kib = (bytes + 1023) / 1024;
    m->kib[m->n++] = kib > UINT32_MAX ? UINT32_MAX : (uint32_t)kib;
    m->skip = m->step - 1;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void memacc_figures(const struct memacc *m, struct store_mem *out)
{
    memset(out, 0, sizeof(*out));
    if (m->step == 0 || m->n == 0)
        return;
    uint32_t v[MEMACC_MAX];
    memcpy(v, m->kib, m->n * sizeof(v[0]));
    qsort(v, m->n, sizeof(v[0]), cmp_u32);
    /* The nearest-rank P999: the smallest value with >= 99.9 % at or below. */
    uint32_t rank = (uint32_t)(((uint64_t)m->n * 999 + 999) / 1000);
    uint64_t p = (uint64_t)v[rank - 1] * 1024;
    out->min = m->min;
    out->max = m->max;
    out->last = m->last;
    out->p999 = p > m->max ? m->max : p < m->min ? m->min : p;
}

/* --- memory_near_limit and oom_suspected --- */

static uint64_t memory_threshold(const struct target *t)
{
    return (uint64_t)(t->a->cfg->anomaly.memory.threshold * (double)t->ep->cfg->memory_limit);
}

static void episode_record(struct agent *a, struct episode *e, int op)
{
    int rc = writer_episode(a->writer, e, op);
    if (rc != 0) {
        a->n.anomaly_errors++;
        log_error("anomaly not recorded", "kind=%s worker=%s err=%e", store_anomaly_name(e->kind),
                  e->worker, rc);
    }
}

static void memory_episode_end(struct target *t)
{
    struct episode *e = t->mem_ep;
    struct agent *a = t->a;
    t->mem_ep = NULL;
    t->mem_below_mono_ns = 0;
    e->open = 0;
    episode_record(a, e, WRITER_EP_UPDATE);
    log_info("anomaly ended", "kind=%s worker=%s version=%s isolate=%u peak=%U threshold=%U",
             store_anomaly_name(e->kind), e->worker, e->version, e->isolate, e->value,
             e->threshold);
    episode_unref(e);
}

void anomaly_memory(struct target *t, uint64_t used)
{
    struct agent *a = t->a;
    const struct cfg *c = a->cfg;
    uint64_t now = isoprof_now_mono_ns();
    uint64_t thr = memory_threshold(t);
    t->mem_last = used;
    memacc_add(&t->mem_cpu, used);
    memacc_add(&t->mem_heap, used);
    if (used < thr) {
        if (t->mem_ep == NULL)
            return;
        if (t->mem_below_mono_ns == 0)
            t->mem_below_mono_ns = now;
        else if (now - t->mem_below_mono_ns >= c->anomaly.cooldown_ns)
            memory_episode_end(t);
        return;
    }
    t->mem_below_mono_ns = 0;
    if (t->mem_ep) {
        if (used > t->mem_ep->value)
            t->mem_ep->value = used;
        t->mem_ep->end_ns = isoprof_now_wall_ns();
        return;
    }
    if (t->last_trigger_mono_ns && now - t->last_trigger_mono_ns < c->anomaly.cooldown_ns)
        return; /* rate-limited: one trigger per isolate per cooldown */
    struct episode *e = episode_new(a, STORE_ANOMALY_MEMORY_NEAR_LIMIT, t->worker, t->version,
                                    t->isolate, used, thr);
    if (e == NULL) {
        log_error("out of memory flagging an anomaly", "worker=%s isolate=%u", t->worker,
                  t->isolate);
        return;
    }
    t->mem_ep = e;
    t->last_trigger_mono_ns = now;
    a->n.anomalies[e->kind]++;
    log_warn("anomaly flagged",
             "kind=%s worker=%s version=%s isolate=%u used=%U limit=%U threshold=%U",
             store_anomaly_name(e->kind), t->worker, t->version, t->isolate, used,
             t->ep->cfg->memory_limit, thr);
    episode_record(a, e, WRITER_EP_NEW);
    target_heap_window(t, e->kind, e);
    sched_anomaly_window(t, e);
}

void anomaly_target_gone(struct target *t, int gone_by_itself)
{
    struct agent *a = t->a;
    uint64_t thr = memory_threshold(t);
    /* Near the limit: the last poll, or an episode still open (the last
     * poll may have caught the heap just after a GC). */
    int near = (t->mem_last > 0 && t->mem_last >= thr) || t->mem_ep != NULL;
    if (gone_by_itself && !a->stopping && near) {
        struct episode *e = episode_new(a, STORE_ANOMALY_OOM_SUSPECTED, t->worker, t->version,
                                        t->isolate, t->mem_last, thr);
        if (e != NULL) {
            e->open = 0;
            a->n.anomalies[e->kind]++;
            log_warn("anomaly flagged",
                     "kind=%s worker=%s version=%s isolate=%u last_used=%U limit=%U threshold=%U",
                     store_anomaly_name(e->kind), t->worker, t->version, t->isolate, t->mem_last,
                     t->ep->cfg->memory_limit, thr);
            episode_record(a, e, WRITER_EP_OOM);
            episode_unref(e);
        }
    }
    if (t->mem_ep)
        memory_episode_end(t);
    t->mem_last = 0;
    t->mem_below_mono_ns = 0;
}

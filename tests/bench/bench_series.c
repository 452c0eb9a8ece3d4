/*
 * bench_series - the Pyroscope series one host makes in a simulated day,
 * under the label rules before and after issue 35, side by side.
 *
 *   bench_series [--jobs-every-s S]
 *
 * A model computed from the label rules, not a measurement of a server:
 * the day's events are simulated and every window's label set is built
 * the way the uploader builds it, with the daemon's own functions for the
 * new rules (identity_isolate, threads_label, store_thread_label); the old
 * rules are those of the code before (isolate = a random base drawn at
 * each agent start + an attach counter; a Worker without a name labelled
 * "worker-<threadId>"; the isolate label always sent). A series is a
 * distinct label set; each is counted once for the day.
 *
 * The day: 10 services, one Node process each (main thread); 2 deploys
 * (08:00, 16:00: every process restarts with a new version); 1 agent
 * upgrade (12:00: the agent restarts and attaches everything again);
 * service 2 crashes and restarts twice (03:00, 20:00; same version);
 * service 0 runs a pool of 4 unnamed Workers on pool.js, recycled every
 * hour; service 1 is a job runner starting an unnamed Worker on job.js
 * every 2 s (each lives 1 s: a CPU window, never a heap window). Every
 * other isolate gets CPU and heap windows. It prints the series of each
 * rule set, by type, and what a tenant's 5,000-series limit makes of it.
 */
#include "daemon.h"
#include "identity.h"
#include "store.h"
#include "threads.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A set of 64-bit hashes of label sets (open addressing). */
struct set {
    uint64_t *h;
    size_t cap, n;
};

static uint64_t fnv64(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h ? h : 1;
}

static void set_insert(uint64_t *tab, size_t cap, size_t *n, uint64_t h)
{
    size_t j = h % cap;
    while (tab[j] && tab[j] != h)
        j = (j + 1) % cap;
    if (!tab[j]) {
        tab[j] = h;
        (*n)++;
    }
}

/* Add key (NULL: only make room). */
static void set_add(struct set *s, const char *key)
{
    if ((s->n + 1) * 2 >= s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024, n = 0;
        uint64_t *tab = calloc(cap, sizeof(*tab));
        if (tab == NULL)
            abort();
        for (size_t i = 0; i < s->cap; i++)
            if (s->h[i])
                set_insert(tab, cap, &n, s->h[i]);
        free(s->h);
        s->h = tab;
        s->cap = cap;
        s->n = n;
    }
    if (key != NULL)
        set_insert(s->h, s->cap, &s->n, fnv64(key));
}

enum rules { OLD, NEW, NEW_ISOLATE, NRULES };
static const char *const rule_name[] = {"before (isolate per attach, worker-<id>)",
                                        "after (default: no isolate label)",
                                        "after, upload.isolate_label: true"};

struct sim {
    struct set series[NRULES][2]; /* [rules][0 cpu, 1 memory] */
    uint32_t agent_base, agent_seq;
    uint64_t rng;
};

static uint32_t rnd(struct sim *s)
{
    s->rng = s->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(s->rng >> 33);
}

/* A window of one isolate: its series under each rule set. */
static void window(struct sim *s, int type, int svc, int version, uint32_t pid, uint64_t ticks,
                   uint32_t old_isolate, const char *old_thread, const char *title, const char *url,
                   const char *wid)
{
    char key[512], thread[80];
    snprintf(key, sizeof(key), "%d|svc%d|v%d|host-1|%" PRIu32 "|node-20|%s", type, svc, version,
             old_isolate, old_thread);
    set_add(&s->series[OLD][type], key);
    if (wid != NULL)
        threads_label(title, url, wid, thread, sizeof(thread));
    else
        snprintf(thread, sizeof(thread), "main");
    int tl = (int)store_thread_label(thread);
    snprintf(key, sizeof(key), "%d|svc%d|v%d|host-1|node-20|%.*s", type, svc, version, tl, thread);
    set_add(&s->series[NEW][type], key);
    uint32_t iso = identity_isolate(pid, ticks, "127.0.0.1:9229", "", wid) & STORE_ISOLATE_PROCESS;
    snprintf(key, sizeof(key), "%d|svc%d|v%d|host-1|%" PRIu32 "|node-20|%.*s", type, svc, version,
             iso, tl, thread);
    set_add(&s->series[NEW_ISOLATE][type], key);
}

int main(int argc, char **argv)
{
    int jobs_every = 2;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--jobs-every-s") == 0)
            jobs_every = atoi(argv[++i]) > 0 ? atoi(argv[i]) : 2;
    struct sim s;
    memset(&s, 0, sizeof(s));
    s.rng = 35;
    for (int r = 0; r < NRULES; r++)
        for (int t = 0; t < 2; t++)
            set_add(&s.series[r][t], NULL);
    const int nsvc = 10, day = 86400;
    uint32_t pid[10];
    uint64_t ticks[10];
    uint32_t old_iso[10];
    int version = 1;
    uint32_t next_pid = 1000;
    uint32_t pool_wid = 0, job_wid = 0;
    uint32_t pool_old[4] = {0}, pool_id[4] = {0};
    /* Segments of the day between events: [start, end). */
    const int events[] = {0, 3 * 3600, 8 * 3600, 12 * 3600, 16 * 3600, 20 * 3600, day};
    uint64_t threads_started = 0;
    for (int e = 0; e + 1 < (int)(sizeof(events) / sizeof(events[0])); e++) {
        int from = events[e], to = events[e + 1];
        int deploy = from == 8 * 3600 || from == 16 * 3600;
        int agent_start = from == 0 || from == 12 * 3600;
        int crash = from == 3 * 3600 || from == 20 * 3600; /* service 2 restarts alone */
        if (deploy)
            version++;
        if (agent_start) {
            /* the old rule: a new random base, the counter from 0, and
             * every isolate attached again */
            s.agent_base = rnd(&s) & 0xfff00000u;
            s.agent_seq = 0;
        }
        for (int v = 0; v < nsvc; v++) {
            int restarts = from == 0 || deploy || (crash && v == 2);
            if (restarts) {
                pid[v] = next_pid++;
                ticks[v] = (uint64_t)from * 100 + (uint64_t)v;
                if (v == 1)
                    job_wid = 0; /* a new process counts its threads from 1 */
            }
            if (restarts || agent_start)
                old_iso[v] = s.agent_base + ++s.agent_seq;
        }
        for (int k = 0; k < 4; k++) {
            if (from == 0 || deploy) {
                if (k == 0)
                    pool_wid = 0;
                pool_id[k] = ++pool_wid;
            }
            if (from == 0 || deploy || agent_start)
                pool_old[k] = s.agent_base + ++s.agent_seq;
        }
        for (int t = from; t < to; t += 60) {
            /* the pool recycles on the hour: 4 new threads */
            if (t % 3600 == 0 && t != from) {
                for (int k = 0; k < 4; k++) {
                    pool_id[k] = ++pool_wid;
                    pool_old[k] = s.agent_base + ++s.agent_seq;
                    threads_started++;
                }
            }
            for (int v = 0; v < nsvc; v++)
                for (int type = 0; type < 2; type++)
                    window(&s, type, v, version, pid[v], ticks[v], old_iso[v], "main", NULL, NULL,
                           NULL);
            for (int k = 0; k < 4; k++) {
                char wid[16], old_thread[24];
                snprintf(wid, sizeof(wid), "%" PRIu32, pool_id[k]);
                snprintf(old_thread, sizeof(old_thread), "worker-%s", wid);
                for (int type = 0; type < 2; type++)
                    window(&s, type, 0, version, pid[0], ticks[0], pool_old[k], old_thread,
                           "[worker]", "file:///srv/app/pool.js", wid);
            }
            /* the job runner's jobs of this minute: a CPU window each */
            for (int j = 0; j < 60; j += jobs_every) {
                char wid[16], old_thread[24];
                snprintf(wid, sizeof(wid), "%" PRIu32, ++job_wid);
                snprintf(old_thread, sizeof(old_thread), "worker-%s", wid);
                threads_started++;
                window(&s, 0, 1, version, pid[1], ticks[1], s.agent_base + ++s.agent_seq,
                       old_thread, "[worker]", "file:///srv/app/job.js", wid);
            }
        }
    }
    printf("series of one host in a simulated day (model from the label rules)\n");
    printf(
        "10 services, 2 deploys, 1 agent upgrade, 2 crash restarts, a pool of 4 recycled hourly, "
        "a job every %d s "
        "(%" PRIu64 " threads started)\n\n",
        jobs_every, threads_started);
    printf("%-44s %12s %12s %12s %16s\n", "rules", "process_cpu", "memory", "total",
           "hosts per 5,000");
    for (int r = 0; r < NRULES; r++) {
        size_t c = s.series[r][0].n, m = s.series[r][1].n;
        printf("%-44s %12zu %12zu %12zu %16.2f\n", rule_name[r], c, m, c + m,
               5000.0 / (double)(c + m));
    }
    for (int r = 0; r < NRULES; r++)
        for (int t = 0; t < 2; t++)
            free(s.series[r][t].h);
    return 0;
}

/*
 * identity.c - an isolate's number, derived from what the isolate is.
 *
 * The number (struct store_window.isolate, and the uploader's isolate
 * label when upload.isolate_label is on) must stay the same for the life
 * of the process, whatever the agent does: a daemon restart, a crash, an
 * upgrade or a session the agent lost and took again must not make the
 * same process a new series. So it is a hash of the process, never of the
 * agent's run:
 *
 *  - a process the agent found on the host, or a configured endpoint whose
 *    process a /proc scan matched: its pid and its start time (field 22 of
 *    /proc/PID/stat), which together name one process for the life of the
 *    host (a reused pid has another start time);
 *  - otherwise the endpoint and the target's /json/list id: Node's is a
 *    UUID drawn once per inspector (the process's), workerd's the service
 *    name, Deno's a UUID per isolate.
 *
 * The process part is the high 20 bits (STORE_ISOLATE_PROCESS); a worker
 * thread takes its process's and puts its own thread id (NodeWorker's
 * workerId) in the low 12, 0 being the main thread. Two live isolates may
 * still meet on one number (a hash, or a thread id 4095 apart): the second
 * then takes the next free one, which is all the daemon needs (it finds
 * targets by number), and the store's key stays unique with its start
 * time.
 *
 * identity_isolate is a pure function of its inputs (the unit test's).
 */
#include "identity.h"
#include "daemon.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t fnv1a(const char *s, uint32_t h)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 16777619u;
    }
    return h;
}

uint32_t identity_isolate(uint32_t pid, uint64_t start_ticks, const char *endpoint,
                          const char *target_id, const char *worker_id)
{
    char key[96];
    uint32_t h = 2166136261u;
    if (pid != 0 && start_ticks != 0) {
        snprintf(key, sizeof(key), "pid:%" PRIu32 ":%" PRIu64, pid, start_ticks);
        h = fnv1a(key, h);
    } else {
        h = fnv1a(endpoint ? endpoint : "", h);
        h = fnv1a("/", h);
        h = fnv1a(target_id ? target_id : "", h);
    }
    uint32_t proc = h & STORE_ISOLATE_PROCESS;
    if (proc == 0)
        proc = STORE_ISOLATE_PROCESS & ~(STORE_ISOLATE_PROCESS << 1); /* the lowest such bit */
    if (worker_id == NULL)
        return proc;
    /* Node's workerId is the thread id, a counter from 1. */
    char *end;
    unsigned long long n = strtoull(worker_id, &end, 10);
    uint32_t tid =
        end != worker_id && *end == '\0' ? (uint32_t)(n % 4095u) : fnv1a(worker_id, h) % 4095u;
    return proc | (tid + 1);
}

/* Is number taken by a live target other than t? */
static int taken(const struct target *t, uint32_t number)
{
    for (const struct target *o = t->a->targets; o != NULL; o = o->next)
        if (o != t && !o->removing && o->state == TARGET_READY && o->isolate == number)
            return 1;
    return 0;
}

uint32_t identity_target(const struct target *t)
{
    const struct target *main = t->parent ? t->parent : t;
    const struct endpoint *ep = t->ep;
    const char *wid = NULL;
    if (t->parent != NULL) {
        const char *hash = strrchr(t->id, '#');
        wid = hash ? hash + 1 : t->id;
    }
    uint32_t n =
        identity_isolate(ep->pid, ep->pid ? ep->start_ticks : 0, ep->cfg->inspector, main->id, wid);
    for (unsigned i = 0; i < 4096 && taken(t, n); i++) {
        if (t->parent != NULL)
            n = (n & STORE_ISOLATE_PROCESS) | ((n + 1) & ~STORE_ISOLATE_PROCESS);
        else
            n += ~STORE_ISOLATE_PROCESS + 1;
        if (n == 0 || (n & STORE_ISOLATE_PROCESS) == 0)
            n |= 0x1000u;
    }
    return n;
}

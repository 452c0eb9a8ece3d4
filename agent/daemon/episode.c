/*
 * episode.c - anomaly episodes: creation and references (episode.h).
 */
#include "episode.h"

#include "base.h"

struct episode *episode_new(uint8_t kind, const char *worker, const char *version,
                            const char *thread, uint32_t isolate, uint64_t value,
                            uint64_t threshold)
{
    struct episode *e = isoprof_calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    e->worker = isoprof_strdup(worker);
    e->version = isoprof_strdup(version);
    e->thread = isoprof_strdup(thread ? thread : "main");
    if (e->worker == NULL || e->version == NULL || e->thread == NULL) {
        isoprof_free(e->worker);
        isoprof_free(e->version);
        isoprof_free(e->thread);
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
    isoprof_free(e->thread);
    isoprof_free(e);
}

/* --- memory figures of a window --- */

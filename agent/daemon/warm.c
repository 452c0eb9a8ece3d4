/*
 * warm.c - the keep-alive of an isolate's CPU profiler: the mode's choice
 * and the keep-alive's state (warm.h says what and why). Pure: the time,
 * the config and what the driver saw come in; the action due goes out.
 *
 * The state moves OFF -> STARTING -> ON -> (ROTATING -> ON)* -> ENDING ->
 * OFF, with one action in flight at a time. A choice that turns cold while
 * a keep-alive runs ends it; one that turns warm starts it once no window
 * is being started or stopped. A refusal or a disturbance records a retry
 * time, so the choice is cold until then whatever the mode says.
 */
#include "warm.h"

#include <string.h>

#define NS_S 1000000000ull
#define NS_10MS 10000000ull

void warm_init(struct warm *k)
{
    memset(k, 0, sizeof(*k));
    k->why = WARM_WHY_DETACHED;
}

/* The median of the latest n (at most WARM_EST) of ring. */
static uint64_t median(const uint64_t *ring, uint64_t count)
{
    uint64_t v[WARM_EST];
    size_t n = count < WARM_EST ? (size_t)count : WARM_EST;
    for (size_t i = 0; i < n; i++)
        v[i] = ring[i];
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            uint64_t x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
    return n ? v[n / 2] : 0;
}

void warm_costs(const struct warm *k, const struct cfg *cfg, uint64_t *cold_ns,
                uint64_t *sampler_ns)
{
    const uint64_t interval = cfg->sampling.cpu.interval_ns ? cfg->sampling.cpu.interval_ns : 1;
    const uint64_t gap = cfg->sampling.cpu.period_ns - cfg->sampling.cpu.duration_ns;
    /* The sampler's CPU grows as its interval shrinks (one tick each). */
    double per_s =
        k->sampler_ns_per_s ? (double)k->sampler_ns_per_s : (double)WARM_SAMPLER_NS_PER_S;
    double at = k->sampler_ns_per_s ? (double)k->sampler_interval_ns : (double)NS_10MS;
    double rate = per_s / (double)NS_S * (at / (double)interval);
    *sampler_ns = (uint64_t)(rate * (double)gap);
    if (k->ncold_start == 0 || k->ncold_stop == 0) {
        *cold_ns = 0;
        return;
    }
    *cold_ns = median(k->cold_start, k->ncold_start) + median(k->cold_stop, k->ncold_stop);
    /* One window is enough when it cost several times the sampler: a
     * large app waits long for its next cold window under the budget. */
    if ((k->ncold_start < WARM_EST || k->ncold_stop < WARM_EST) &&
        *cold_ns < WARM_CLEAR * *sampler_ns)
        *cold_ns = 0;
}

int warm_choose(const struct warm *k, const struct cfg *cfg, uint64_t now, enum warm_why *why)
{
    if (cfg->sampling.cpu.mode == CFG_CPU_COLD) {
        *why = WARM_WHY_CONFIG;
        return 0;
    }
    if (k->retry_ns > now) {
        *why = k->why == WARM_WHY_DISTURBED ? WARM_WHY_DISTURBED : WARM_WHY_REFUSED;
        return 0;
    }
    if (cfg->sampling.cpu.mode == CFG_CPU_WARM) {
        *why = WARM_WHY_CONFIG;
        return 1;
    }
    uint64_t cold, sampler;
    warm_costs(k, cfg, &cold, &sampler);
    if (cold == 0) {
        *why = WARM_WHY_UNMEASURED;
        return 0;
    }
    /* Hysteresis: once warm (no new cold measures come in), cold again
     * only if cold windows were cheaper by half. */
    int was = k->want && k->why == WARM_WHY_COSTLY;
    int w = was ? cold * 2 > sampler : cold > sampler;
    *why = w ? WARM_WHY_COSTLY : WARM_WHY_CHEAP;
    return w;
}

enum warm_act warm_next(struct warm *k, const struct cfg *cfg, uint64_t now, int window_open)
{
    enum warm_why why;
    int want = warm_choose(k, cfg, now, &why);
    k->want = want;
    k->why = why;
    if (k->sent_ns != 0) {
        /* One action at a time; an unanswered one is a refusal. */
        if (now - k->sent_ns >= WARM_ANSWER_NS)
            warm_answered(k, now, 0, 0);
        return WARM_ACT_NONE;
    }
    switch (k->st) {
    case WARM_OFF:
        return want && !window_open ? WARM_ACT_START : WARM_ACT_NONE;
    case WARM_ON:
        if (!want)
            return WARM_ACT_END;
        return now - k->on_ns >= WARM_ROTATE_NS ? WARM_ACT_ROTATE : WARM_ACT_NONE;
    default:
        return WARM_ACT_NONE;
    }
}

void warm_sent(struct warm *k, enum warm_act act, uint64_t now, uint64_t interval_ns)
{
    k->sent_ns = now ? now : 1;
    switch (act) {
    case WARM_ACT_START:
        k->st = WARM_STARTING;
        k->seq++;
        k->interval_ns = interval_ns;
        break;
    case WARM_ACT_ROTATE:
        k->st = WARM_ROTATING;
        k->seq++;
        break;
    case WARM_ACT_END:
        k->st = WARM_ENDING;
        break;
    case WARM_ACT_NONE:
        k->sent_ns = 0;
        break;
    }
}

/* Cold for a while: retry after WARM_RETRY_NS, doubled in a row. */
static void back_off(struct warm *k, uint64_t now, enum warm_why why)
{
    unsigned shift = k->failures < 5 ? k->failures : 5;
    uint64_t wait = WARM_RETRY_NS << shift;
    if (wait > WARM_RETRY_MAX_NS)
        wait = WARM_RETRY_MAX_NS;
    k->failures++;
    k->retry_ns = now + wait;
    k->why = why;
    k->want = 0;
}

void warm_answered(struct warm *k, uint64_t now, int ok, int started)
{
    enum warm_state st = k->st;
    k->sent_ns = 0;
    switch (st) {
    case WARM_STARTING:
    case WARM_ROTATING:
        if (ok && started) {
            k->st = WARM_ON;
            k->on_ns = now;
            k->failures = 0;
            if (st == WARM_STARTING)
                k->starts++;
            else
                k->rotations++;
            return;
        }
        /* A rotation that started nothing may have ended the old one, or
         * not: either way the session holds no keep-alive it can name, so
         * the isolate is taken as cold (an old one left running ends with
         * the session, and windows stay correct: their own start/stop). */
        k->refusals++;
        k->st = WARM_OFF;
        back_off(k, now, WARM_WHY_REFUSED);
        return;
    case WARM_ENDING:
        k->st = WARM_OFF;
        return;
    default:
        return;
    }
}

int warm_disturbed(struct warm *k, uint64_t now)
{
    int was = k->st != WARM_OFF;
    k->disturbances++;
    back_off(k, now, WARM_WHY_DISTURBED);
    if (k->st == WARM_ON)
        return was; /* still running: warm_next ends it */
    if (k->sent_ns == 0)
        k->st = WARM_OFF;
    return was;
}

void warm_detached(struct warm *k)
{
    k->st = WARM_OFF;
    k->sent_ns = 0;
    k->want = 0;
    if (k->retry_ns == 0)
        k->why = WARM_WHY_DETACHED;
}

void warm_cold_cost(struct warm *k, int call, uint64_t pause_ns)
{
    if (call == 0)
        k->cold_start[k->ncold_start++ % WARM_EST] = pause_ns;
    else
        k->cold_stop[k->ncold_stop++ % WARM_EST] = pause_ns;
}

void warm_sampler_measured(struct warm *k, uint64_t ns_per_s, uint64_t interval_ns)
{
    if (interval_ns == 0)
        return;
    /* Kept at the first measure's interval (a measure at another one is
     * scaled to it), as a moving average that weighs the latest a quarter. */
    if (k->sampler_ns_per_s == 0) {
        k->sampler_ns_per_s = ns_per_s ? ns_per_s : 1;
        k->sampler_interval_ns = interval_ns;
        return;
    }
    double v = (double)ns_per_s * (double)interval_ns / (double)k->sampler_interval_ns;
    double m = 0.75 * (double)k->sampler_ns_per_s + 0.25 * v;
    k->sampler_ns_per_s = m >= 1.0 ? (uint64_t)m : 1;
}

int warm_is_on(const struct warm *k)
{
    return k->st == WARM_ON || k->st == WARM_ROTATING || k->st == WARM_STARTING;
}

const char *warm_state_name(enum warm_state st)
{
    static const char *const names[] = {"off", "starting", "on", "rotating", "ending"};
    return (unsigned)st < sizeof(names) / sizeof(names[0]) ? names[st] : "?";
}

const char *warm_why_name(enum warm_why why)
{
    static const char *const names[] = {"config",  "unmeasured", "cold_cheaper", "cold_costlier",
                                        "refused", "disturbed",  "detached"};
    return (unsigned)why < sizeof(names) / sizeof(names[0]) ? names[why] : "?";
}

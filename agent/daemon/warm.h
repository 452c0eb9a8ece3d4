/*
 * warm.h - warm CPU windows: whether an isolate's V8 CPU profiler is kept
 * alive between its windows, and the keep-alive profile's life.
 *
 * V8's inspector gives each session one v8::CpuProfiler, made when the
 * session's first profile starts and disposed when its last one stops.
 * Making it lists every compiled function on the isolate's thread (a cold
 * Profiler.start: hundreds of ms in a big app); disposing it tears that list
 * down again (the stop). While another profile of the session runs, a
 * window's start only marks a profile and its stop only builds one: ~1 ms.
 * The only other profile a session can hold is a console profile
 * (console.profile, started in every session that has Profiler enabled), so
 * the keep-alive is one, started and rotated with Runtime.evaluate of a
 * fixed expression (keepalive.c sends it; PROTOCOLS.md, CPU profiler).
 *
 * This module decides; it does no I/O. Per isolate it keeps the keep-alive's
 * state, chooses the mode (sampling.cpu.mode) and says which action is due:
 * start the keep-alive, rotate it (its samples stay in the target until it
 * ends), or end it. The driver reports what happened. Every call takes the
 * time (monotonic, ns), so tests/unit/agent/test_warm.c drives it on a
 * simulated clock.
 *
 * The choice, per isolate:
 * - cold: never warm. warm: always, unless refused or disturbed.
 * - auto: warm when a cold window's start + stop (the medians of the latest
 *   cold ones measured) cost more than the continuous sampler would between
 *   two windows: cold (S + T) > sampler rate x (period - duration), the
 *   sampler's rate measured from outside (its thread's CPU in /proc, when
 *   the process is known) or else WARM_SAMPLER_NS_PER_S at a 10 ms
 *   interval, scaled by the measured interval / the configured one. It turns cold again only once
 * cold is cheaper by half (hysteresis). Before WARM_EST cold windows are measured: cold, unless
 * those measured cost WARM_CLEAR times the sampler (a large app under the budget waits long for
 * each cold window).
 * - A keep-alive the runtime refused (no consoleProfileStarted for it: no
 *   console.profile, or Runtime.evaluate failed, as on workerd) or that was
 *   disturbed (ended by someone else, or another client started a console
 *   profile: it would share ours) makes the isolate cold for WARM_RETRY_NS,
 *   doubled each time in a row up to WARM_RETRY_MAX_NS.
 *
 * DESIGN: loop thread only; a struct warm lives inside its target.
 */
#ifndef ISOPROF_AGENT_WARM_H
#define ISOPROF_AGENT_WARM_H

#include "config.h"

#include <stdint.h>

/* The keep-alive is rotated this often, so the samples it holds in the
 * target stay bounded (~35 KiB of profile per 10 s at 10 ms, measured). */
#define WARM_ROTATE_NS (60ull * 1000000000ull)
/* Cold after a refusal or a disturbance, doubled in a row, at most. */
#define WARM_RETRY_NS (120ull * 1000000000ull)
#define WARM_RETRY_MAX_NS (3600ull * 1000000000ull)
/* A keep-alive action unanswered this long counts as refused. */
#define WARM_ANSWER_NS (30ull * 1000000000ull)
/* The sampler thread's CPU at a 10 ms interval, per second of wall time
 * (measured on Node 20: README, the overhead benchmark; PROTOCOLS.md). */
#define WARM_SAMPLER_NS_PER_S 6400000ull
/* Cold windows measured before auto chooses, unless the first ones cost
 * WARM_CLEAR times the sampler or more. */
#define WARM_EST 3
#define WARM_CLEAR 4

enum warm_state {
    WARM_OFF,
    WARM_STARTING, /* console.profile sent */
    WARM_ON,
    WARM_ROTATING, /* console.profile(next); console.profileEnd(current) sent */
    WARM_ENDING,   /* console.profileEnd sent */
};

enum warm_why {
    WARM_WHY_CONFIG,     /* sampling.cpu.mode says so */
    WARM_WHY_UNMEASURED, /* auto: not enough cold windows measured yet */
    WARM_WHY_CHEAP,      /* auto: cold windows cost less than the sampler */
    WARM_WHY_COSTLY,     /* auto: cold windows cost more than the sampler */
    WARM_WHY_REFUSED,    /* the runtime did not start the keep-alive */
    WARM_WHY_DISTURBED,  /* another client ended it or profiles the isolate */
    WARM_WHY_DETACHED,   /* no session */
};

enum warm_act {
    WARM_ACT_NONE,
    WARM_ACT_START,
    WARM_ACT_ROTATE,
    WARM_ACT_END,
};

struct warm {
    enum warm_state st;
    int want;             /* the latest choice: keep the profiler warm */
    enum warm_why why;    /* ... and why */
    uint64_t seq;         /* the keep-alive's number (its title's) */
    uint64_t on_ns;       /* the current keep-alive started */
    uint64_t sent_ns;     /* the action in flight was sent (0: none) */
    uint64_t retry_ns;    /* refused/disturbed: cold until then */
    unsigned failures;    /* refusals and disturbances in a row */
    uint64_t interval_ns; /* the keep-alive's sampling interval (every window's while on) */
    /* auto's input: the latest cold windows' start and stop stalls */
    uint64_t cold_start[WARM_EST], cold_stop[WARM_EST];
    uint64_t ncold_start, ncold_stop;
    /* the sampler thread's CPU measured from outside (keepalive.c reads
     * /proc while a profile runs), ns per second at sampler_interval_ns;
     * 0: not measured, WARM_SAMPLER_NS_PER_S stands in */
    uint64_t sampler_ns_per_s, sampler_interval_ns;
    /* counts, for /status */
    uint64_t starts, rotations, refusals, disturbances;
    uint64_t warm_windows; /* windows that started while the profiler was warm */
};

void warm_init(struct warm *k);

/* The choice for k now under cfg (sampling.cpu.*): 1 to keep the profiler
 * warm, 0 for cold windows; *why says why. Pure. */
int warm_choose(const struct warm *k, const struct cfg *cfg, uint64_t now, enum warm_why *why);

/* The choice made again, and the action due now (or WARM_ACT_NONE).
 * window_open: a CPU window is starting or stopping (no keep-alive starts
 * then: its sampling interval is being set). The caller sends the action's
 * call and reports it with warm_sent, or warm_answered(ok 0) if it could
 * not be sent. */
enum warm_act warm_next(struct warm *k, const struct cfg *cfg, uint64_t now, int window_open);
/* The action's call was sent (interval_ns: the keep-alive's, for START). */
void warm_sent(struct warm *k, enum warm_act act, uint64_t now, uint64_t interval_ns);
/* The action in flight was answered. started: the runtime reported the new
 * keep-alive's consoleProfileStarted (START, ROTATE); for END, ok alone.
 * A START or ROTATE that failed or started nothing is a refusal. */
void warm_answered(struct warm *k, uint64_t now, int ok, int started);
/* The keep-alive ended without being asked (someone's console.profileEnd),
 * or another client started a console profile: cold for a while. Returns 1
 * when k was warm (the caller ends a keep-alive still running: see
 * warm_next). */
int warm_disturbed(struct warm *k, uint64_t now);
/* The session ended: V8 stopped everything it started. */
void warm_detached(struct warm *k);
/* A cold window's start (WIN_CALL_START) or stop stalled the isolate
 * pause_ns: auto's input. call: 0 start, 1 stop. */
void warm_cold_cost(struct warm *k, int call, uint64_t pause_ns);
/* The sampler thread was measured at ns_per_s of CPU per second of wall
 * time while the profiler sampled every interval_ns: auto's sampler cost
 * from then on (smoothed over the latest measures). */
void warm_sampler_measured(struct warm *k, uint64_t ns_per_s, uint64_t interval_ns);
/* The profiler is warm now (a window starting now is a warm one). */
int warm_is_on(const struct warm *k);

/* The figures auto compares, in ns per period: the cold windows' start +
 * stop (median; 0 until enough are measured), and the sampler between two
 * windows. */
void warm_costs(const struct warm *k, const struct cfg *cfg, uint64_t *cold_ns,
                uint64_t *sampler_ns);

const char *warm_state_name(enum warm_state st);
const char *warm_why_name(enum warm_why why);

#endif

/*
 * test_windows.c - the window state machine (agent/daemon/windows.c) on a
 * simulated clock.
 *
 * A small simulated driver stands in for target.c: it answers every start,
 * stop and heap call after a latency (or never, for a stalled isolate),
 * keeps each isolate's one wake-up, and jumps the clock from one event to
 * the next. An hour of schedule for fifty isolates runs in milliseconds, and
 * each test names the rule it breaks.
 */
#include "../test.h"
#include "base.h"
#include "config.h"
#include "store.h"
#include "windows.h"

#include <errno.h>
#include <math.h>

#define MS 1000000ull
#define SEC 1000000000ull
#define MAX_ISO 64
#define MAX_LOG 8192

/* An on-demand request token. */
struct fake_od {
    int refs;
    int failed, err;
    int taken; /* a window was handed over for it */
};

struct sim_iso {
    struct win_iso w;
    int id;
    uint64_t armed;                               /* the wake-up asked for (0: none) */
    uint64_t start_reply, stop_reply, heap_reply; /* when the pending call answers (0: none) */
    int stall_stop;                               /* never answer Profiler.stop */
    int fail_start;                               /* the start call is refused by the target */
    int unsendable;                               /* the start call cannot be sent at all */
    uint64_t interval_ns;                         /* of the last start */
};

/* A window the driver saw from start to end. */
struct started {
    int iso;
    uint64_t at, interval_ns;
};
struct taken {
    int iso;
    int heap;
    uint64_t at;
    uint8_t anomaly;
    struct episode *pin;
    struct fake_od *od;
};

static struct sim {
    uint64_t now, latency;
    struct cfg *cfg;
    struct win_sched s;
    struct isoprof_rng rng;
    struct agent_counters n;
    struct sim_iso iso[MAX_ISO];
    int niso;
    int idle_calls;
    unsigned max_slots; /* the most slots held at once by scheduled windows */
    struct started starts[MAX_LOG];
    int nstarts;
    struct taken taken[MAX_LOG];
    int ntaken;
} sim;

static struct sim_iso *of(struct win_iso *w)
{
    return container_of(w, struct sim_iso, w);
}

static int op_cpu_start(struct win_iso *w, uint64_t interval_ns)
{
    struct sim_iso *x = of(w);
    if (x->unsendable)
        return -ENOTCONN;
    x->interval_ns = interval_ns;
    if (sim.nstarts < MAX_LOG)
        sim.starts[sim.nstarts++] = (struct started){x->id, sim.now, interval_ns};
    x->start_reply = sim.now + sim.latency;
    return 0;
}

static int op_cpu_stop(struct win_iso *w)
{
    struct sim_iso *x = of(w);
    x->stop_reply = x->stall_stop ? 0 : sim.now + sim.latency;
    return 0;
}

static int op_heap_take(struct win_iso *w)
{
    of(w)->heap_reply = sim.now + sim.latency;
    return 0;
}

static void op_arm(struct win_iso *w, uint64_t due)
{
    of(w)->armed = due;
}

static void op_idle(struct win_sched *s)
{
    (void)s;
    sim.idle_calls++;
}

static void op_od_ref(void *od)
{
    ((struct fake_od *)od)->refs++;
}

static void op_od_unref(void *od)
{
    ((struct fake_od *)od)->refs--;
}

static void op_od_fail(void *od, int err, const char *why)
{
    (void)why;
    struct fake_od *o = od;
    o->failed++;
    o->err = err;
    o->refs--;
}

static void op_label(const struct win_iso *w, const char **worker, uint32_t *isolate)
{
    *worker = "sim";
    *isolate = (uint32_t)container_of(w, const struct sim_iso, w)->id;
}

static const struct win_ops sim_ops = {
    .cpu_start = op_cpu_start,
    .cpu_stop = op_cpu_stop,
    .heap_take = op_heap_take,
    .arm = op_arm,
    .idle = op_idle,
    .od_ref = op_od_ref,
    .od_unref = op_od_unref,
    .od_fail = op_od_fail,
    .label = op_label,
};

/* A fresh simulation of niso isolates (not attached), the clock at 1 s. */
static void sim_init(int niso, uint64_t seed)
{
    struct cfg *keep = sim.cfg;
    memset(&sim, 0, sizeof(sim));
    sim.cfg = keep;
    if (sim.cfg == NULL && cfg_defaults(&sim.cfg) != 0)
        abort();
    struct cfg *c = sim.cfg;
    c->sampling.cpu.duration_ns = 10 * SEC;
    c->sampling.cpu.period_ns = 60 * SEC;
    c->sampling.cpu.interval_ns = 10 * MS;
    c->sampling.cpu.jitter = 0.1;
    c->sampling.cpu.max_concurrent = 4;
    c->sampling.heap.period_ns = 300 * SEC;
    c->anomaly.memory.heap_period_ns = 30 * SEC;
    c->anomaly.cpu_interval_ns = 1 * MS;
    sim.now = 1 * SEC;
    sim.latency = 5 * MS;
    isoprof_rng_seed(&sim.rng, seed);
    win_sched_init(&sim.s, c, &sim_ops, &sim.rng, &sim.n);
    sim.niso = niso;
    for (int i = 0; i < niso; i++) {
        sim.iso[i].id = i;
        win_iso_init(&sim.iso[i].w, &sim.s);
    }
}

static void sim_free(void)
{
    for (int i = 0; i < sim.niso; i++)
        win_iso_free(&sim.iso[i].w, sim.now);
    for (int i = 0; i < sim.ntaken; i++)
        episode_unref(sim.taken[i].pin);
}

static void note_taken(struct sim_iso *x, int heap, const struct win_tags *t)
{
    if (sim.ntaken < MAX_LOG) {
        sim.taken[sim.ntaken++] =
            (struct taken){x->id, heap, sim.now, t->anomaly, t->pin, (struct fake_od *)t->od};
    } else {
        episode_unref(t->pin);
    }
    if (t->od) {
        ((struct fake_od *)t->od)->taken++;
        op_od_unref(t->od);
    }
}

/* The number of scheduled (not anomaly, not on-demand) windows holding a
 * slot now: what max_concurrent bounds. */
static unsigned scheduled_slots(void)
{
    unsigned n = 0;
    for (int i = 0; i < sim.niso; i++) {
        const struct win_iso *w = &sim.iso[i].w;
        n += w->slot && w->tags.anomaly == 0 && w->tags.od == NULL;
    }
    return n;
}

/* Run every event up to and including until. */
static void sim_run(uint64_t until)
{
    for (;;) {
        uint64_t next = 0;
        for (int i = 0; i < sim.niso; i++) {
            struct sim_iso *x = &sim.iso[i];
            uint64_t ts[4] = {x->armed, x->start_reply, x->stop_reply, x->heap_reply};
            for (int k = 0; k < 4; k++)
                if (ts[k] != 0 && (next == 0 || ts[k] < next))
                    next = ts[k];
        }
        if (next == 0 || next > until)
            break;
        sim.now = next;
        for (int i = 0; i < sim.niso; i++) {
            struct sim_iso *x = &sim.iso[i];
            if (x->start_reply == next) {
                x->start_reply = 0;
                win_cpu_started(&x->w, sim.now, !x->fail_start);
            }
            if (x->stop_reply == next) {
                x->stop_reply = 0;
                struct win_tags t;
                if (win_cpu_stopped(&x->w, sim.now, 1, &t) == 0)
                    note_taken(x, 0, &t);
            }
            if (x->heap_reply == next) {
                x->heap_reply = 0;
                struct win_tags t;
                win_heap_done(&x->w, &t);
                note_taken(x, 1, &t);
            }
            if (x->armed != 0 && x->armed <= next) {
                x->armed = 0;
                win_wake(&x->w, sim.now);
            }
        }
        unsigned used = scheduled_slots();
        if (used > sim.max_slots)
            sim.max_slots = used;
    }
    sim.now = until;
}

static void attach_all(void)
{
    for (int i = 0; i < sim.niso; i++)
        win_attached(&sim.iso[i].w, sim.now);
}

static int starts_of(int iso)
{
    int n = 0;
    for (int i = 0; i < sim.nstarts; i++)
        n += sim.starts[i].iso == iso;
    return n;
}

/* Two isolates due at once under a cap of 1, a second later: the one that
 * got the slot is recording, the other waits. Returns the recording one. */
static int two_isolates_one_slot(uint64_t seed)
{
    sim_init(2, seed);
    sim.cfg->sampling.cpu.jitter = 0;
    sim.cfg->sampling.cpu.max_concurrent = 1;
    attach_all();
    sim_run(sim.now + 1 * SEC);
    return sim.starts[0].iso;
}

/* --- the rules --- */

/* 50 isolates, a cap of 4: never more than 4 scheduled windows at once;
 * the first windows spread over jitter x period; later starts a period
 * apart, +-jitter, plus what the queue made them wait; nobody starves. */
TEST(jitter_and_cap_over_many_isolates)
{
    sim_init(50, 42);
    sim.cfg->sampling.cpu.duration_ns = 2 * SEC;
    sim.cfg->sampling.cpu.max_concurrent = 4;
    uint64_t t0 = sim.now;
    attach_all();
    sim_run(t0 + 3600 * SEC);
    CHECK(sim.max_slots <= 4);
    CHECK_EQ_INT(sim.max_slots, 4); /* the cap was reached, so it was what held them */
    CHECK(sim.n.windows_delayed > 0);
    /* First starts: within jitter x period of attach, and spread out. */
    double sum = 0, sq = 0;
    int firsts = 0;
    for (int iso = 0; iso < 50; iso++) {
        for (int i = 0; i < sim.nstarts; i++) {
            if (sim.starts[i].iso != iso)
                continue;
            double off = (double)(sim.starts[i].at - t0) / 1e9;
            CHECK(off <= 6.0 + 60.0); /* 6 s spread, plus the queue at worst */
            sum += off;
            sq += off * off;
            firsts++;
            break;
        }
    }
    REQUIRE(firsts == 50);
    double mean = sum / 50, sd = sqrt(sq / 50 - mean * mean);
    CHECK(sd > 1.0); /* not all at once */
    /* Successive starts of one isolate: at least period - jitter apart
     * (the queue only delays), and every isolate kept its cadence. */
    for (int iso = 0; iso < 50; iso++) {
        uint64_t prev = 0;
        for (int i = 0; i < sim.nstarts; i++) {
            if (sim.starts[i].iso != iso)
                continue;
            if (prev)
                CHECK(sim.starts[i].at - prev >= 54 * SEC);
            prev = sim.starts[i].at;
        }
        int n = starts_of(iso);
        CHECK(n >= 50 && n <= 62);
    }
    CHECK_EQ_INT(sim.n.windows_started, sim.nstarts);
    sim_free();
}

/* Without a cap in the way, the first windows of isolates attached
 * together spread over jitter x period instead of starting at once. */
TEST(first_windows_spread_over_jitter)
{
    sim_init(60, 43);
    sim.cfg->sampling.cpu.max_concurrent = 1000;
    uint64_t t0 = sim.now;
    attach_all();
    sim_run(t0 + 7 * SEC);
    REQUIRE(sim.nstarts == 60);
    double sum = 0, sq = 0;
    for (int i = 0; i < 60; i++) {
        double off = (double)(sim.starts[i].at - t0) / 1e9;
        CHECK(off >= 0 && off <= 6.0); /* jitter 0.1 x period 60 s */
        sum += off;
        sq += off * off;
    }
    double mean = sum / 60, sd = sqrt(sq / 60 - mean * mean);
    CHECK(sd > 1.0); /* uniform over 6 s: about 1.7 */
    CHECK(mean > 2.0 && mean < 4.0);
    sim_free();
}

/* An on-demand request on an isolate that is not recording starts at
 * once, whatever the schedule had planned. */
TEST(ondemand_starts_at_once_when_idle)
{
    sim_init(1, 23);
    attach_all();
    sim_run(sim.now + 30 * SEC); /* the first window came and went */
    int before = sim.nstarts;
    REQUIRE(sim.iso[0].w.cpu == WIN_NONE);
    struct fake_od r = {.refs = 1};
    CHECK_EQ_INT(win_ondemand_cpu(&sim.iso[0].w, sim.now, &r, 2 * SEC, 1 * MS), 0);
    CHECK_EQ_INT(sim.nstarts, before + 1);
    CHECK_EQ_INT(sim.starts[before].at, sim.now);
    sim_run(sim.now + 3 * SEC);
    CHECK_EQ_INT(r.taken, 1);
    CHECK_EQ_INT(r.refs, 1);
    sim_free();
}

/* Two isolates due at once under a cap of 1: the second waits and starts
 * the moment the first one's stop is answered. */
TEST(delayed_window_admitted_when_slot_frees)
{
    sim_init(2, 1);
    sim.cfg->sampling.cpu.jitter = 0;
    sim.cfg->sampling.cpu.max_concurrent = 1;
    attach_all();
    sim_run(sim.now + 1 * MS); /* both due now: one starts, one waits */
    CHECK_EQ_INT(sim.nstarts, 1);
    CHECK_EQ_INT(sim.n.windows_delayed, 1);
    CHECK_EQ_INT(win_queued(&sim.s), 1);
    int second = sim.starts[0].iso == 0 ? 1 : 0;
    CHECK_EQ_INT(sim.iso[second].w.cpu, WIN_QUEUED);
    sim_run(sim.now + 11 * SEC);
    REQUIRE(sim.nstarts == 2);
    CHECK_EQ_INT(sim.starts[1].iso, second);
    REQUIRE(sim.ntaken >= 1);
    CHECK_EQ_INT(sim.starts[1].at, sim.taken[0].at); /* the same instant */
    /* Its successor is planned from its actual start, not from when it fell due. */
    sim_run(sim.now + 200 * SEC);
    uint64_t first_of_second = sim.starts[1].at, next = 0;
    for (int i = 2; i < sim.nstarts && !next; i++)
        if (sim.starts[i].iso == second)
            next = sim.starts[i].at;
    CHECK(next >= first_of_second + 60 * SEC);
    sim_free();
}

/* Profiler.stop never answered: the slot goes to the next window after
 * the grace, and the late window's stop is still taken if it comes. */
TEST(stalled_stop_releases_slot_after_grace)
{
    sim_init(2, 3);
    sim.cfg->sampling.cpu.jitter = 0;
    sim.cfg->sampling.cpu.max_concurrent = 1;
    sim.iso[0].stall_stop = sim.iso[1].stall_stop = 1;
    attach_all();
    sim_run(sim.now + 1 * MS);
    int first = sim.starts[0].iso;
    sim_run(sim.now + 10 * SEC + 5 * MS + 1 * MS); /* its end: stop sent, unanswered */
    CHECK_EQ_INT(sim.iso[first].w.cpu, WIN_STOPPING);
    CHECK_EQ_INT(sim.nstarts, 1);
    sim_run(sim.now + WIN_STOP_GRACE_NS + 1 * MS);
    CHECK_EQ_INT(sim.nstarts, 2);
    CHECK(!sim.iso[first].w.slot);
    CHECK_EQ_INT(sim.s.slots, 1);
    /* The late answer still ends the window (and does not free a slot twice). */
    struct win_tags t;
    CHECK_EQ_INT(win_cpu_stopped(&sim.iso[first].w, sim.now, 1, &t), 0);
    CHECK_EQ_INT(sim.s.slots, 1);
    CHECK_EQ_INT(sim.iso[first].w.cpu, WIN_NONE);
    sim_free();
}

/* An on-demand request while the isolate records waits for that window,
 * then starts at once, outside the cap; an equal request shares it. */
TEST(ondemand_joins_after_running_window)
{
    int a = two_isolates_one_slot(5); /* a running, the other queued */
    REQUIRE(sim.iso[a].w.cpu == WIN_RUNNING);
    struct fake_od r1 = {.refs = 1}, r2 = {.refs = 1};
    CHECK_EQ_INT(win_ondemand_cpu(&sim.iso[a].w, sim.now, &r1, 3 * SEC, 1 * MS), 0);
    CHECK_EQ_INT(sim.nstarts, 1); /* it waits: the target never runs two profiles */
    CHECK(win_ondemand_shared(&sim.iso[a].w, 0, 3 * SEC, 1 * MS) == &r1);
    CHECK(win_ondemand_shared(&sim.iso[a].w, 0, 4 * SEC, 1 * MS) == NULL);
    sim_run(sim.now + 9 * SEC + 10 * MS); /* A's window ends: r1 starts at once, B too */
    REQUIRE(sim.nstarts == 3);
    int od_start = sim.starts[1].iso == a ? 1 : 2;
    CHECK_EQ_INT(sim.starts[od_start].interval_ns, 1 * MS);
    CHECK_EQ_INT(sim.s.slots, 2); /* outside the cap of 1 */
    /* While it starts, an equal request joins it; a different one waits. */
    CHECK(win_ondemand_shared(&sim.iso[a].w, 0, 3 * SEC, 1 * MS) == &r1);
    CHECK_EQ_INT(win_ondemand_cpu(&sim.iso[a].w, sim.now, &r2, 5 * SEC, 2 * MS), 0);
    sim_run(sim.now + 4 * SEC);
    CHECK_EQ_INT(r1.taken, 1);
    CHECK_EQ_INT(r1.refs, 1); /* the module gave back every reference it took */
    sim_run(sim.now + 6 * SEC);
    CHECK_EQ_INT(r2.taken, 1);
    CHECK_EQ_INT(r2.failed, 0);
    CHECK_EQ_INT(r2.refs, 1);
    sim_free();
}

/* An anomaly takes a window at once, ahead of the queue and outside the
 * cap; on a recording isolate it pins that window instead. */
TEST(anomaly_window_takes_priority)
{
    int a = two_isolates_one_slot(7), b = 1 - a;
    REQUIRE(sim.iso[b].w.cpu == WIN_QUEUED);
    struct episode *e = episode_new(STORE_ANOMALY_MEMORY_NEAR_LIMIT, "w", "v", NULL, 1, 2, 3);
    REQUIRE(e != NULL);
    win_anomaly_cpu(&sim.iso[b].w, sim.now, e);
    CHECK_EQ_INT(sim.nstarts, 2);
    CHECK_EQ_INT(sim.starts[1].iso, b);
    CHECK_EQ_INT(sim.starts[1].interval_ns, 1 * MS); /* anomaly.cpu_interval */
    CHECK_EQ_INT(win_queued(&sim.s), 0);
    CHECK_EQ_INT(sim.s.slots, 2);
    /* A recording isolate: its window is pinned, nothing new starts. */
    win_anomaly_cpu(&sim.iso[a].w, sim.now, e);
    CHECK_EQ_INT(sim.nstarts, 2);
    CHECK(sim.iso[a].w.tags.pin == e);
    sim_run(sim.now + 11 * SEC);
    int pinned = 0;
    for (int i = 0; i < sim.ntaken; i++)
        pinned += sim.taken[i].pin == e && sim.taken[i].anomaly == STORE_ANOMALY_MEMORY_NEAR_LIMIT;
    CHECK_EQ_INT(pinned, 2);
    episode_unref(e);
    sim_free();
}

/* The target dies mid-window: the window is lost, its slot goes to the
 * next, waiting requests fail, the late stop answer is ignored. */
TEST(target_dies_mid_window)
{
    int a = two_isolates_one_slot(9), b = 1 - a;
    struct fake_od waiting = {.refs = 1};
    CHECK_EQ_INT(win_ondemand_cpu(&sim.iso[a].w, sim.now, &waiting, 2 * SEC, 1 * MS), 0);
    win_detached(&sim.iso[a].w, sim.now);
    CHECK_EQ_INT(sim.n.windows_lost, 1);
    CHECK_EQ_INT(waiting.failed, 1);
    CHECK_EQ_INT(waiting.err, -ECONNRESET);
    CHECK_EQ_INT(waiting.refs, 1);
    CHECK_EQ_INT(sim.nstarts, 2); /* b admitted at once */
    CHECK_EQ_INT(sim.starts[1].iso, b);
    CHECK_EQ_INT(sim.iso[a].armed, 0); /* nothing planned for the dead one */
    struct win_tags t;
    CHECK_EQ_INT(win_cpu_stopped(&sim.iso[a].w, sim.now, 1, &t), -EALREADY);
    /* A dead isolate takes no request; it plans again once reattached. */
    CHECK_EQ_INT(win_ondemand_cpu(&sim.iso[a].w, sim.now, &waiting, 2 * SEC, 1 * MS), -EAGAIN);
    sim.iso[a].start_reply = 0;
    win_attached(&sim.iso[a].w, sim.now);
    CHECK(sim.iso[a].armed != 0);
    sim_free();
}

/* A reload that shortens the period applies now, not after the old one. */
TEST(reload_shortens_period)
{
    sim_init(3, 11);
    sim.cfg->sampling.cpu.period_ns = 3600 * SEC;
    sim.cfg->sampling.cpu.duration_ns = 1 * SEC;
    sim.cfg->sampling.cpu.jitter = 0.5;
    attach_all();
    sim_run(sim.now + 1800 * SEC + 2 * SEC);
    int before = sim.nstarts;
    struct cfg *next = NULL;
    REQUIRE(cfg_defaults(&next) == 0);
    next->sampling.cpu.period_ns = 60 * SEC;
    next->sampling.cpu.duration_ns = 1 * SEC;
    next->sampling.cpu.jitter = 0.1;
    win_reconfigure(&sim.s, next, sim.now);
    sim_run(sim.now + 70 * SEC);
    CHECK(sim.nstarts >= before + 3); /* every isolate within the new period */
    for (int i = 0; i < 3; i++)
        CHECK(sim.iso[i].w.cpu != WIN_NONE || sim.iso[i].w.cpu_due_ns <= sim.now + 66 * SEC);
    win_reconfigure(&sim.s, sim.cfg, sim.now);
    sim_free();
    cfg_free(next);
}

/* Shutdown with windows open: the running ones are stopped, the queue is
 * dropped, idle comes once when the last closes, nothing starts after. */
TEST(shutdown_with_windows_open)
{
    sim_init(3, 13);
    sim.cfg->sampling.cpu.jitter = 0;
    sim.cfg->sampling.cpu.max_concurrent = 2;
    attach_all();
    sim_run(sim.now + 1 * SEC); /* two running, one queued */
    CHECK_EQ_INT(sim.s.open, 2);
    CHECK_EQ_INT(win_queued(&sim.s), 1);
    win_stop_all(&sim.s, sim.now);
    CHECK_EQ_INT(win_queued(&sim.s), 0);
    CHECK_EQ_INT(sim.idle_calls, 0);
    int stopping = 0;
    for (int i = 0; i < 3; i++)
        stopping += sim.iso[i].w.cpu == WIN_STOPPING;
    CHECK_EQ_INT(stopping, 2);
    sim_run(sim.now + 3600 * SEC);
    CHECK_EQ_INT(sim.idle_calls, 1);
    CHECK_EQ_INT(sim.nstarts, 2);
    CHECK_EQ_INT(sim.ntaken, 2); /* both windows were taken */
    CHECK_EQ_INT(sim.s.open, 0);
    sim_free();
}

/* A window still starting at shutdown is stopped as soon as it runs. */
TEST(shutdown_while_starting)
{
    sim_init(1, 15);
    sim.cfg->sampling.cpu.jitter = 0;
    attach_all();
    sim_run(sim.now); /* due now: the start is sent, not yet answered */
    REQUIRE(sim.iso[0].w.cpu == WIN_STARTING);
    win_stop_all(&sim.s, sim.now);
    sim_run(sim.now + 1 * SEC);
    CHECK_EQ_INT(sim.ntaken, 1);
    CHECK_EQ_INT(sim.idle_calls, 1);
    sim_free();
}

/* A start the target refuses skips the window and plans the next. */
TEST(refused_start_skips)
{
    sim_init(1, 17);
    sim.cfg->sampling.cpu.jitter = 0;
    sim.iso[0].fail_start = 1;
    attach_all();
    sim_run(sim.now + 1 * SEC);
    CHECK_EQ_INT(sim.n.windows_skipped, 1);
    CHECK_EQ_INT(sim.s.slots, 0);
    CHECK_EQ_INT(sim.iso[0].w.cpu, WIN_NONE);
    CHECK(sim.iso[0].armed >= sim.now + 58 * SEC);
    /* One that cannot even be sent: skipped too, and the next planned. */
    sim.iso[0].unsendable = 1;
    sim_run(sim.iso[0].armed);
    CHECK_EQ_INT(sim.n.windows_skipped, 2);
    CHECK_EQ_INT(sim.s.slots, 0);
    CHECK(sim.iso[0].armed >= sim.now + 54 * SEC);
    sim_free();
}

/* Heap windows: every sampling.heap.period (+-jitter) once the sampler
 * runs; every anomaly.memory.heap_period, pinned, while an episode is open. */
TEST(heap_cadence_and_memory_episode)
{
    sim_init(1, 19);
    attach_all();
    win_heap_on(&sim.iso[0].w, sim.now);
    uint64_t t0 = sim.now;
    sim_run(t0 + 3000 * SEC);
    int heaps = 0;
    for (int i = 0; i < sim.ntaken; i++)
        heaps += sim.taken[i].heap;
    CHECK(heaps >= 9 && heaps <= 12); /* 3000 s / 300 s, +-jitter */
    struct episode *e = episode_new(STORE_ANOMALY_MEMORY_NEAR_LIMIT, "w", "v", NULL, 1, 2, 3);
    REQUIRE(e != NULL);
    win_memory_episode(&sim.iso[0].w, sim.now, e);
    CHECK_EQ_INT(win_anomaly_heap(&sim.iso[0].w, sim.now, e), 0);
    int before = sim.ntaken;
    sim_run(sim.now + 301 * SEC);
    int pinned = 0;
    for (int i = before; i < sim.ntaken; i++)
        pinned += sim.taken[i].heap && sim.taken[i].pin == e;
    CHECK(pinned >= 10); /* every 30 s, each pinned */
    win_memory_episode(&sim.iso[0].w, sim.now, NULL);
    episode_unref(e);
    sim_free();
}

/* An on-demand heap request joins the one in flight; one that waits for
 * the sampler fails if the sampler cannot start. */
TEST(ondemand_heap)
{
    sim_init(1, 21);
    attach_all();
    struct fake_od r = {.refs = 1}, q = {.refs = 1};
    CHECK_EQ_INT(win_ondemand_heap(&sim.iso[0].w, sim.now, &r), -EAGAIN); /* no sampler yet */
    CHECK_EQ_INT(r.refs, 1);
    win_heap_on(&sim.iso[0].w, sim.now);
    CHECK_EQ_INT(win_ondemand_heap(&sim.iso[0].w, sim.now, &r), 0);
    CHECK(win_ondemand_shared(&sim.iso[0].w, 1, 0, 0) == &r);
    sim_run(sim.now + 1 * SEC);
    CHECK_EQ_INT(r.taken, 1);
    CHECK_EQ_INT(r.refs, 1);
    /* Sampler stopped by another client, then the restart fails. */
    win_heap_off(&sim.iso[0].w, 0);
    CHECK_EQ_INT(win_ondemand_heap(&sim.iso[0].w, sim.now, &q), -EAGAIN);
    win_heap_on(&sim.iso[0].w, sim.now);
    CHECK_EQ_INT(win_ondemand_heap(&sim.iso[0].w, sim.now, &q), 0);
    win_detached(&sim.iso[0].w, sim.now);
    CHECK_EQ_INT(q.failed, 1);
    CHECK_EQ_INT(q.refs, 1);
    sim_free();
}

int main(void)
{
    RUN(jitter_and_cap_over_many_isolates);
    RUN(first_windows_spread_over_jitter);
    RUN(ondemand_starts_at_once_when_idle);
    RUN(delayed_window_admitted_when_slot_frees);
    RUN(stalled_stop_releases_slot_after_grace);
    RUN(ondemand_joins_after_running_window);
    RUN(anomaly_window_takes_priority);
    RUN(target_dies_mid_window);
    RUN(reload_shortens_period);
    RUN(shutdown_with_windows_open);
    RUN(shutdown_while_starting);
    RUN(refused_start_skips);
    RUN(heap_cadence_and_memory_episode);
    RUN(ondemand_heap);
    cfg_free(sim.cfg);
    TEST_EXIT();
}

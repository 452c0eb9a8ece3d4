/*
 * regress_synth.h - synthetic programs and their sampled profiles, for the
 * deploy-regression comparison (agent/pprof/regress.c): its unit test
 * (test_regress.c) and its benchmark (tests/bench/bench_regress.c).
 *
 * A program is a set of stacks (leaf first) with weights: a web service's
 * request path, a timer loop that calls reconcileLedger, recursion, V8's
 * (idle)/(program)/(garbage collector) and a tail of NTAIL rarely sampled
 * functions. draw() takes N samples of it into an aggregate, each sample's
 * stack drawn from the weights (multinomial noise) with the caller's seeded
 * generator, so every run sees the same numbers. "+X % of CPU" in a
 * function (prog_grown) adds a stack under it whose weight is X times the
 * program's non-idle weight. draw_window() takes one window: its own
 * aggregate, closed (regress_agg_end_window) and merged, with each
 * stack's weight moved by up to +-jitter in that window alone (a window's
 * traffic, its garbage collections: what makes real shares spread more
 * than the samples' noise).
 */
#ifndef ISOPROF_TESTS_REGRESS_SYNTH_H
#define ISOPROF_TESTS_REGRESS_SYNTH_H

#include "base.h"
#include "regress.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define APP "file:///srv/app.js"
#define LIB "file:///srv/node_modules/lib/index.js"
#define MAXS 400
#define MAXD 12
#define NTAIL 300

struct stack {
    char name[MAXD][32];
    const char *file[MAXD];
    size_t depth;
    double w;
};

struct prog {
    struct stack s[MAXS];
    double cdf[MAXS];
    size_t n;
};

/* Add the stack "leaf;caller;...;bottom" of weight w. */
static void prog_add(struct prog *p, const char *stack, double w)
{
    struct stack *s = &p->s[p->n++];
    memset(s, 0, sizeof(*s));
    const char *q = stack;
    while (*q != '\0' && s->depth < MAXD) {
        const char *e = strchr(q, ';');
        size_t len = e != NULL ? (size_t)(e - q) : strlen(q);
        snprintf(s->name[s->depth], sizeof(s->name[0]), "%.*s", (int)len, q);
        s->file[s->depth] = s->name[s->depth][0] == '('  ? ""
                            : strncmp(q, "tail", 4) == 0 ? LIB
                                                         : APP;
        s->depth++;
        q += len + (e != NULL);
    }
    s->w = w;
}

static void prog_finish(struct prog *p)
{
    double sum = 0;
    for (size_t i = 0; i < p->n; i++)
        sum += p->s[i].w;
    double run = 0;
    for (size_t i = 0; i < p->n; i++) {
        run += p->s[i].w / sum;
        p->cdf[i] = run;
    }
    p->cdf[p->n - 1] = 1.0;
}

static double prog_busy(const struct prog *p)
{
    double sum = 0;
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->s[i].name[0], "(idle)") != 0)
            sum += p->s[i].w;
    return sum;
}

/* The service; inlined: V8 folded reconcileLedger into loop in this one. */
static void prog_service(struct prog *p, int inlined)
{
    p->n = 0;
    prog_add(p, "(idle);(root)", 300);
    prog_add(p, "(program);(root)", 30);
    prog_add(p, "(garbage collector);(root)", 40);
    prog_add(p, "formatRow;render;handleRequest;processTicks;(root)", 100);
    prog_add(p, "render;handleRequest;processTicks;(root)", 60);
    prog_add(p, "escapeHtml;formatRow;render;handleRequest;processTicks;(root)", 50);
    if (inlined) {
        prog_add(p, "loop;processTimers;(root)", 120);
        prog_add(p, "hashRow;loop;processTimers;(root)", 60);
    } else {
        prog_add(p, "reconcileLedger;loop;processTimers;(root)", 80);
        prog_add(p, "hashRow;reconcileLedger;loop;processTimers;(root)", 60);
        prog_add(p, "loop;processTimers;(root)", 40);
    }
    prog_add(p, "parseJson;handleRequest;processTicks;(root)", 70);
    prog_add(p, "stringify;replacer;serialize;handleRequest;processTicks;(root)", 50);
    prog_add(p, "replacer;serialize;handleRequest;processTicks;(root)", 30);
    prog_add(p, "serialize;handleRequest;processTicks;(root)", 20);
    prog_add(p, "handleRequest;processTicks;(root)", 20);
    prog_add(p, "walk;walk;walk;visit;processTicks;(root)", 20);
    prog_add(p, "walk;visit;processTicks;(root)", 10);
    for (int i = 0; i < NTAIL; i++) {
        char st[64];
        snprintf(st, sizeof(st), "tail%03d;helpers;processTicks;(root)", i);
        prog_add(p, st, 0.1 + 0.4 * (i % 7) / 6.0);
    }
    prog_finish(p);
}

/* The service with +x of its CPU added in stack (re-normalised). */
static void prog_grown(struct prog *p, const char *stack, double x)
{
    prog_service(p, 0);
    prog_add(p, stack, x * prog_busy(p));
    prog_finish(p);
}

/* Draw n samples of p into a (10 ms each). */
static void draw(const struct prog *p, struct isoprof_rng *r, uint64_t n, struct regress_agg *a)
{
    static uint64_t counts[MAXS];
    memset(counts, 0, sizeof(counts));
    for (uint64_t i = 0; i < n; i++) {
        double u = isoprof_rng_unit(r);
        size_t lo = 0, hi = p->n - 1;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (p->cdf[mid] > u)
                hi = mid;
            else
                lo = mid + 1;
        }
        counts[lo]++;
    }
    for (size_t i = 0; i < p->n; i++) {
        if (counts[i] == 0)
            continue;
        struct regress_frame f[MAXD];
        for (size_t d = 0; d < p->s[i].depth; d++)
            f[d] = (struct regress_frame){p->s[i].name[d], p->s[i].file[d]};
        if (regress_agg_add(a, f, p->s[i].depth, counts[i], counts[i] * 10000000ull) != 0)
            abort();
    }
}

/* One window of n samples of p into a: each stack's weight times a factor
 * drawn in [1 - jitter, 1 + jitter] for this window, the samples drawn
 * into an aggregate of their own, closed as a window and merged. */
static inline void draw_window(const struct prog *p, struct isoprof_rng *r, uint64_t n,
                               double jitter, struct regress_agg *a)
{
    static struct prog w;
    w = *p;
    for (size_t i = 0; i < w.n; i++)
        w.s[i].w *= 1 + jitter * (2 * isoprof_rng_unit(r) - 1);
    prog_finish(&w);
    struct regress_agg *win = NULL;
    if (regress_agg_new(a->max_fns, &win) != 0)
        abort();
    draw(&w, r, n, win);
    if (regress_agg_end_window(win) != 0 || regress_agg_merge(a, win) != 0)
        abort();
    regress_agg_free(win);
}

#endif

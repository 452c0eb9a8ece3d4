/*
 * regress.h - deploy regressions: a per-(worker, version) merged CPU
 * profile folded by function, and the comparison of a new version's with
 * the one before it.
 *
 * The aggregate. Samples are folded by (mapped function name, file): per
 * function its cumulative count (samples with the function anywhere in the
 * stack, once per sample however often it recurs) and its self count
 * (samples with it as the leaf), and per (caller, callee) pair the samples
 * in which the callee sits directly under the caller (the comparison needs
 * a function's callers to tell inlining from growth). Beside them: all
 * samples, the idle ones, and the sampled time where known.
 *
 * What is idle. A sample whose leaf is V8's "(idle)" is idle: the thread
 * waited. It counts in samples and idle and nowhere else, so a version
 * that serves fewer requests does not read as one whose code got slower.
 * "(program)" (V8 and the embedder outside JS: compilation, native
 * runtime) and "(garbage collector)" are CPU the isolate spent, so they
 * are non-idle and folded as functions of file "" like any other; the
 * denominator of every share is the non-idle samples. "(root)" frames are
 * skipped: they are in every stack and say nothing. A stack of "(root)"
 * alone is non-idle and charged to no function.
 *
 * The bound. An aggregate keeps at most max_fns functions (and 2 x max_fns
 * caller edges). A new function that does not fit makes it fold its
 * least-sampled functions (by cumulative count) into "(other)" until 7/8
 * of max_fns remain: their self counts go to other_self, the number folded
 * to folded, and the largest count a folded function had (its cum plus its
 * err) bounds fold_max. A function that comes back after being folded
 * starts again with err = fold_max: its true count is in [cum, cum + err].
 * Functions folded again and again raise fold_max (as Space-Saving's
 * least counter rises): at worst a few times the non-idle samples over
 * max_fns; so max_fns is meant to sit well above the distinct functions
 * a version shows, and folding to be rare.
 * The comparison uses these bounds so that folding can hide a change but
 * never invent one. Edges beyond their bound are dropped (they only choose
 * callers).
 *
 * Windows. Samples are not independent draws: a window's share of a
 * function moves with that window's traffic, its garbage collections and
 * what V8 was compiling, by more than the samples' own noise. Measured on
 * real Node (bench_deploy.js), a binomial test of the merged counts
 * flagged 19 of 100 same-code redeploys, 14 of them "(garbage collector)".
 * So an aggregate also keeps what its windows say of that spread: the
 * number of windows closed into it (regress_agg_end_window), their
 * non-idle samples, and per function the sum over its windows of x^2 / n
 * (x its samples in the window, n the window's non-idle samples). From
 * these the comparison takes each function's Pearson chi-square around
 * its share on each side, and from their sum over the two sides'
 * degrees of freedom (windows - 1 each) its dispersion: how many times
 * the binomial variance its share really has, at least 1. The p-value is
 * the normal's still: Student's t with the few degrees of freedom of two
 * young versions would need a z of 100 to pass Holm over hundreds of
 * functions, and a baseline usually has many windows.
 *
 * The comparison (regress_compare). For each function in either
 * aggregate, its cumulative share of non-idle samples before (baseline) and
 * after (candidate) is compared with a pooled two-proportion z-test whose
 * variance is scaled by the function's dispersion (1, the binomial, when
 * neither side accounts for its windows: an aggregate of an older
 * encoding, or samples added outside a window), two-sided, and the
 * p-values of all the functions compared are adjusted
 * with Holm's step-down method: it controls the chance of any false flag in
 * a comparison (what "must not flag the same code redeployed" asks) under
 * any dependence between the tests (a caller's and its callee's shares are
 * strongly dependent), and rejects everything Bonferroni rejects and
 * sometimes more. A change is listed when its adjusted p is at most alpha,
 * its share moved by at least min_delta (absolute) and by a factor of at
 * least min_ratio (after / before for growth, before / after for
 * shrinking; a function absent on one side has an infinite ratio), and
 * both aggregates have at least min_samples non-idle samples and each side
 * that accounts for its windows at least min_windows of them (else
 * nothing is judged).
 *
 * Inlining. V8 may fold a callee into its caller in one process and not
 * in the next: the callee's samples then carry the caller's frame only.
 * The caller's cumulative share is the same either way; the callee's drops
 * to nothing where it was inlined. So a callee inlined in the candidate
 * only reads as shrunk, never grown; one inlined in the baseline only reads
 * as grown, while its caller did not grow. A grown function therefore
 * counts as a regression only if its main caller in the candidate (the one
 * it sits under in the most samples) grew with it: the caller's growth is
 * significant on its own (one-sided z at least caller_z) and its share of
 * the rest of the CPU, 1 - (1 - after) / (1 - before), grew by at least
 * half of the function's (scaled by the part of the function under that
 * caller). Added work grows every frame above it by the same amount of that
 * measure; a change of inlining moves none of them. A caller that itself
 * appeared (at most half its share before) is checked the same way, up the
 * chain (the caller's z scaled by its own dispersion). A growth that fails
 * is listed with REGRESS_F_INLINED and is not a
 * regression; a shrink whose caller did not shrink is marked the same way.
 * A function with no caller (the bottom of its stacks) needs no check.
 * "(program)" is listed but never a regression (REGRESS_F_VM): after a
 * deploy it holds the new processes' compilation. "(garbage collector)"
 * is: more allocation shows nowhere else.
 *
 * DESIGN: pure. No clock, no I/O, no globals; all memory through
 * isoprof_malloc. An aggregate belongs to one thread at a time; two
 * aggregates may be compared on any thread while neither changes.
 */
#ifndef ISOPROF_PPROF_REGRESS_H
#define ISOPROF_PPROF_REGRESS_H

#include <stddef.h>
#include <stdint.h>

/* The encoding's version (regress_agg_encode); decode reads version 1
 * too (no windows: such an aggregate is judged by the binomial test). */
#define REGRESS_VERSION 2
/* A longer function name or file is cut there (on a UTF-8 boundary). */
#define REGRESS_NAME_MAX 1024
/* Bounds on max_fns: an aggregate keeps at least REGRESS_MIN_FNS. */
#define REGRESS_MIN_FNS 16
#define REGRESS_MAX_FNS 1000000
/* The default bound (~1 MiB in memory, ~100 KiB encoded at typical names). */
#define REGRESS_DEFAULT_MAX_FNS 4096

/* One frame of a stack; both strings borrowed for the call. file may be
 * NULL (same as ""). */
struct regress_frame {
    const char *name;
    const char *file;
};

/* A function of an aggregate. Read-only outside regress.c. */
struct regress_fn {
    char *name;     /* owned by the aggregate */
    uint32_t file;  /* index into files */
    uint64_t cum;   /* samples with it in the stack */
    uint64_t self;  /* samples with it as the leaf */
    uint64_t err;   /* samples it may have lost to folding (0: exact) */
    double sq;      /* sum over the windows of (its samples there)^2 / (their non-idle samples) */
    uint64_t stamp; /* the last sample that counted it (internal) */
};

/* A caller -> callee pair: samples in which callee sits directly under
 * caller (once per sample). Read-only outside regress.c. */
struct regress_edge {
    uint32_t caller, callee; /* indexes into fns */
    uint64_t count;
    uint64_t stamp; /* internal */
};

/* An aggregate. Fields are read-only outside regress.c. */
struct regress_agg {
    uint64_t samples;    /* all samples added */
    uint64_t idle;       /* of which idle ("(idle)" leaf) */
    uint64_t timed_ns;   /* the sampled time of the samples whose time was given */
    uint64_t cpu_ns;     /* of which non-idle: cpu_ns / timed_ns is the CPU per period */
    uint64_t other_self; /* self samples of functions folded into "(other)" */
    uint64_t folded;     /* functions folded into "(other)" so far */
    uint64_t fold_max;   /* the most samples a folded function may have had */
    uint64_t windows;    /* windows closed into it (regress_agg_end_window, merged) */
    uint64_t wbusy;      /* their non-idle samples: == busy when every sample is in one */
    uint32_t max_fns;
    struct regress_fn *fns;
    uint32_t nfns, capfns;
    char **files; /* owned; "" is a file like any other */
    uint32_t nfiles, capfiles;
    struct regress_edge *edges;
    uint32_t nedges, capedges;
    uint64_t edges_dropped; /* edge samples not kept (the edge bound) */
    /* internal */
    uint32_t *fn_slot, *file_slot, *edge_slot;
    uint32_t fn_mask, file_mask, edge_mask;
    uint64_t stamp;
    int err; /* sticky: the first -ENOMEM */
};

/*
 * regress_agg_new - an empty aggregate keeping at most max_fns functions
 * (clamped to [REGRESS_MIN_FNS, REGRESS_MAX_FNS]; 0: the default). *out
 * is owned by the caller (regress_agg_free). Errors: -ENOMEM (*out NULL).
 */
int regress_agg_new(uint32_t max_fns, struct regress_agg **out);
/* Frees a and everything it holds. NULL is a no-op. */
void regress_agg_free(struct regress_agg *a);

/*
 * regress_agg_add - count samples of one stack: frames[0..n) leaf first
 * (pprof's order: frames[0] is where the CPU was, frames[n-1] the bottom),
 * count samples of it (0 adds nothing), whose sampled time is dt_ns in all
 * (the sum of their time deltas; 0: unknown). frames are borrowed for the
 * call; a NULL name is refused. Returns 0, -EINVAL (frames NULL with n > 0,
 * a NULL name), or -ENOMEM; -ENOMEM is sticky: the aggregate then refuses
 * every later add, merge and encode, and is to be discarded.
 */
int regress_agg_add(struct regress_agg *a, const struct regress_frame *frames, size_t n,
                    uint64_t count, uint64_t dt_ns);

/*
 * regress_agg_end_window - a, which holds one window's samples and no
 * window yet, becomes one window: windows 1 (0 if none of its samples is
 * non-idle), wbusy its non-idle samples, each function's sq its count
 * squared over them. Errors: -EINVAL (a already holds windows), the
 * sticky error.
 */
int regress_agg_end_window(struct regress_agg *a);

/*
 * regress_agg_merge - add every count of src (borrowed, unchanged) to dst:
 * the aggregate of both sets of samples (windows, wbusy and sq added too:
 * samples src holds outside any window stay outside), then folded to dst's
 * bound (a folded function's sq goes with it).
 * Errors: -ENOMEM (sticky on dst), or dst's or src's sticky error.
 */
int regress_agg_merge(struct regress_agg *dst, const struct regress_agg *src);

/*
 * regress_agg_add_pprof - count every sample of one serialized (not
 * compressed) CPU profile, as pprof_from_cpu_json makes it and the store
 * keeps it (names and files after source maps): sample types [samples,
 * cpu/nanoseconds], each sample counted value[0] times with value[1] as
 * its sampled time, its frames from its locations' lines leaf first
 * (inlined lines too). pprof borrowed. Errors: -EINVAL, ISOPROF_EPROTOBUF
 * and ISOPROF_EPROFILE (with *why: not a profile, dangling ids, not a CPU
 * profile), -ENOMEM (sticky on a). Any thread (one aggregate to a thread).
 */
int regress_agg_add_pprof(struct regress_agg *a, const void *pprof, size_t len, char **why);

/*
 * regress_agg_tree - the call tree a implies, added to set (0 or 1) of t
 * (struct pprof_tree, pprof.h; counted as one profile of that set): an
 * aggregate keeps functions and caller edges, not stacks, so the tree is
 * rebuilt from them. Each function at the bottom of its stacks (its count
 * less what its callers hold of it) is a root; what flows into a function
 * is split between its own samples and its callees in proportion to their
 * counts, down to REGRESS_TREE_MIN of the non-idle samples and
 * REGRESS_TREE_DEPTH frames (what is not drawn further is charged to the
 * frame above); a callee already on the path (recursion) is not drawn
 * again, and "(other)" holds the folded functions' own samples. A
 * function's width summed over the tree is its cumulative count where its
 * calls form a tree (exact then), an estimate where a callee has several
 * callers whose calls differ. Errors: -EINVAL, -ENOMEM, ISOPROF_ETOOBIG.
 * Any thread.
 */
#define REGRESS_TREE_DEPTH 256
#define REGRESS_TREE_MIN 0.0001
struct pprof_tree;
int regress_agg_tree(const struct regress_agg *a, struct pprof_tree *t, int set);

/* The index of the function (name, file) in a (file NULL: ""), or -1. */
long regress_agg_find(const struct regress_agg *a, const char *name, const char *file);
/* a's non-idle samples: the denominator of its shares. */
static inline uint64_t regress_agg_busy(const struct regress_agg *a)
{
    return a->samples - a->idle;
}

/*
 * regress_agg_encode - a as bytes, for the store: "IPRG", the version
 * byte, then LEB128 varints (counts, windows and wbusy, the file table,
 * the functions with sq in 1/1024ths, the edges). *out (*len bytes) is owned by the caller
 * (isoprof_free). Errors: the sticky error, -ENOMEM, ISOPROF_ETOOBIG (over 256 MiB).
 *
 * regress_agg_decode - the aggregate of buf[0..len) (borrowed), folded to
 * max_fns as regress_agg_new clamps it. Every count, length and index is
 * checked against the bytes left and against each other (a function's self
 * at most its cum, its cum at most the non-idle samples, its sq at most its
 * cum; wbusy at most the non-idle samples; an edge's count at most its
 * ends'; no name twice; nothing after the end). Errors:
 * ISOPROF_ECORRUPT (not this encoding, cut short, inconsistent),
 * ISOPROF_ESCHEMA (another version), -EINVAL (buf NULL with len > 0),
 * -ENOMEM. *out is NULL on error.
 */
int regress_agg_encode(const struct regress_agg *a, uint8_t **out, size_t *len);
int regress_agg_decode(const void *buf, size_t len, uint32_t max_fns, struct regress_agg **out);

/* The comparison's parameters (anomaly.regression.*). */
struct regress_params {
    double alpha;         /* family-wise error of one comparison (Holm) */
    double min_delta;     /* least change of cumulative share, absolute (0.02: 2 points) */
    double min_ratio;     /* least relative change of share (1.10: +10 %) */
    uint64_t min_samples; /* least non-idle samples on each side */
    double caller_z;      /* least one-sided z of a grown function's caller's growth */
    uint64_t min_windows; /* least windows on each side that accounts for its windows */
};
/* The defaults (regress.c says why). */
#define REGRESS_ALPHA 0.0001
#define REGRESS_MIN_DELTA 0.02
#define REGRESS_MIN_RATIO 1.10
#define REGRESS_MIN_SAMPLES 1000
#define REGRESS_CALLER_Z 3.0
#define REGRESS_MIN_WINDOWS 3
void regress_params_default(struct regress_params *p);

enum regress_kind { REGRESS_GROWN = 1, REGRESS_SHRUNK = 2 };
/* Flags of a change. */
#define REGRESS_F_INLINED 1u /* its caller did not move with it: inlining, not a regression */
#define REGRESS_F_VM 2u      /* "(program)": listed, never a regression */
#define REGRESS_F_BOUND 4u   /* a side's count is a bound (folding) */

/* One function whose share changed. */
struct regress_change {
    const char *name, *file; /* borrowed from the aggregates: valid while both live unchanged */
    uint8_t kind;            /* enum regress_kind */
    uint8_t flags;           /* REGRESS_F_* */
    uint64_t before, after;  /* cumulative samples (the bound used, with F_BOUND) */
    uint64_t self_before, self_after;
    double share_before, share_after; /* of non-idle samples */
    double z;                         /* pooled two-proportion z, > 0 when the share grew */
    double dispersion;                /* the variance's factor over the binomial (>= 1) */
    double p;                         /* two-sided */
    double p_adj;                     /* Holm-adjusted over tested */
    const char *caller;               /* the main caller checked (borrowed; NULL: none) */
    double caller_z;                  /* its growth's z (0 without a caller) */
};

/* A comparison's outcome. */
struct regress_result {
    int judged; /* 0: a side has fewer than min_samples non-idle samples or min_windows */
    uint64_t busy_before, busy_after;
    uint64_t windows_before, windows_after; /* 0: that side does not account for windows */
    uint32_t df; /* the dispersions' degrees of freedom: windows less one a side (0: binomial) */
    double cpu_before, cpu_after; /* cpu_ns / timed_ns per side (-1: unknown) */
    uint32_t tested;              /* functions compared (Holm's m) */
    struct regress_change *grown; /* by share delta, largest first; owned (regress_result_free) */
    size_t ngrown;
    struct regress_change *shrunk; /* by share delta, largest fall first */
    size_t nshrunk;
    size_t regressions; /* grown changes with neither F_INLINED nor F_VM: the verdict */
};

/*
 * regress_compare - compare cand (the new version) against base (the one
 * before), both borrowed and unchanged, under p (NULL: the defaults), into
 * *out (cleared first; regress_result_free releases it). Errors: -EINVAL
 * (base or cand NULL, or holding a sticky error), -ENOMEM (*out empty).
 */
int regress_compare(const struct regress_agg *base, const struct regress_agg *cand,
                    const struct regress_params *p, struct regress_result *out);
void regress_result_free(struct regress_result *r);

#endif

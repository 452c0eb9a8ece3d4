/*
 * pprof.h - V8 profiles (CDP JSON) to pprof, and the pprof utilities the
 * agent and the CLI need: merge, top, gzip.
 *
 * Every function here is pure: no global state, no logging, no I/O. Each
 * may be called from any thread, concurrently (the agent runs conversions on
 * the libuv thread pool). All memory comes from isoprof_malloc & co.
 *
 * Errors: 0 on success, or
 *   -ENOMEM            an allocation failed (nothing leaks, *out untouched)
 *   -EINVAL            a NULL or out-of-range argument
 *   ISOPROF_EJSON      the text is not JSON (includes invalid UTF-8 bytes)
 *   ISOPROF_EPROFILE   JSON, but not a profile we accept (see each function)
 *   ISOPROF_ECDP       the text is a CDP error reply {"id":N,"error":{...}}
 *   ISOPROF_ETOOBIG    the output would pass its hard cap
 *   ISOPROF_EPROTOBUF  a pprof input does not decode
 *   ISOPROF_ECORRUPT   a gzip input does not inflate
 * Functions taking `char **why` store there, on failure only, an allocated
 * message saying what was wrong and where (e.g. "nodes[12] (id 40): child 7
 * is also a child of node 3"); the caller frees it with isoprof_free. why
 * may be NULL; *why stays NULL when even the message cannot be allocated.
 */
#ifndef ISOPROF_PPROF_H
#define ISOPROF_PPROF_H

#include <stddef.h>
#include <stdint.h>

/* A byte buffer. data is owned by whoever holds the struct; free it with
 * pprof_buf_free. {NULL, 0} is a valid empty buffer. */
struct pprof_buf {
    uint8_t *data;
    size_t len;
};

/* Frees b->data and sets b to {NULL, 0}. b may be NULL. */
void pprof_buf_free(struct pprof_buf *b);

/*
 * Caps on what a conversion accepts and produces. Real input stays far
 * below them (a 22 MB profile of an app with 20,000 functions has 28,587
 * nodes and gives a 1.9 MB pprof); hostile input hits them and costs an
 * error, at a working set the daemon's memory budget allows for
 * (agent/daemon/budget.h: about 130 bytes per node, 4 or 12 per kept sample, and
 * the output).
 */
#define PPROF_DEFAULT_MAX_NODES ((size_t)256 << 10) /* profile nodes */
#define PPROF_MAX_SAMPLES ((size_t)16 << 20)        /* entries of samples[] and timeDeltas */
#define PPROF_MAX_KEPT_SAMPLES ((size_t)1 << 20)    /* CPU samples before the nodes; heap samples */
#define PPROF_MAX_DEPTH 2048                        /* heap tree depth, JSON nesting */
#define PPROF_MAX_STRING 4096                       /* bytes kept of one name or url */
#define PPROF_MAX_STACK 512 /* frames of one sample: deeper stacks are cut (see b_stack) */
#define PPROF_TRUNCATED_FRAME "(truncated)"         /* the frame that ends a cut stack */
#define PPROF_MAX_COMMENTS 8                        /* comment lines kept (merge) */
#define PPROF_MAX_OUTPUT ((size_t)256 << 20)        /* serialized Profile bytes (merge) */
#define PPROF_MAX_CONVERT_OUTPUT ((size_t)32 << 20) /* ... of one conversion */
#define PPROF_OUTPUT_FACTOR 4                       /* ... and relative to its input */
#define PPROF_OUTPUT_SLACK ((size_t)1 << 20)

/*
 * pprof_output_cap - the most bytes a conversion of a len-byte reply may
 * produce: PPROF_OUTPUT_FACTOR * len + PPROF_OUTPUT_SLACK, at most
 * PPROF_MAX_CONVERT_OUTPUT. Real profiles give a pprof of 0.1 to 0.2 times
 * their JSON; only a hostile shape (a deep chain of nodes, each with hits)
 * comes near it.
 */
size_t pprof_output_cap(size_t len);

/*
 * A frame's original position (source maps), asked for by a conversion:
 * the script url (as V8 wrote it, after JSON unescaping: a file:// URL, a
 * path or a module name), V8's 0-based line and column of the function's
 * start (-1: unknown). The callee returns 1 and fills *out when it mapped
 * the frame, 0 when the frame's script could have been mapped but was not
 * (counted as unmapped), -1 when there is nothing to map. out->name NULL
 * keeps V8's name; the strings must stay valid until the conversion
 * returns. It is called on the conversion's thread, once per profile node
 * with a url and a known line.
 */
struct pprof_mapped {
    const char *name; /* the original name, or NULL */
    const char *file; /* the original source file, not NULL */
    int64_t line;     /* 1-based */
    int64_t column;   /* 1-based; 0 unknown */
};
struct pprof_mapper {
    int (*map)(void *arg, const char *url, size_t url_len, int32_t line, int32_t column,
               struct pprof_mapped *out);
    void *arg;
};

struct pprof_cpu_opts {
    /* wall clock minus CLOCK_MONOTONIC, ns, sampled by the caller near the
     * stop: V8's times are monotonic µs, pprof's are wall ns. */
    int64_t wall_minus_mono_ns;
    /* the sampling interval the profile was taken with; 0: estimated as
     * (endTime - startTime) / samples.length. */
    uint64_t interval_ns;
    /* cap on the node count; 0 = PPROF_DEFAULT_MAX_NODES. */
    size_t max_nodes;
    /* NULL: no mapping. Else each frame goes through it: a mapped frame's
     * Function has the original name, file and start line, its V8 name as
     * system_name, and its Line the original line and column. */
    const struct pprof_mapper *mapper;
};

struct pprof_heap_opts {
    uint64_t time_ns;        /* wall clock of the snapshot (time_nanos) */
    uint64_t interval_bytes; /* the sampling interval (period) */
    size_t max_nodes;        /* 0 = PPROF_DEFAULT_MAX_NODES */
    const struct pprof_mapper *mapper; /* as for CPU */
};

struct pprof_result {
    struct pprof_buf pprof; /* serialized Profile, not compressed; owned by the caller */
    uint64_t samples;       /* CPU: sum of hitCount; heap: number of sampled objects */
    uint64_t start_ns;      /* wall clock */
    uint64_t end_ns;        /* wall clock; heap: == start_ns */
    uint64_t truncated;     /* frames folded into a (truncated) frame; 0: no stack was cut */
    uint64_t mapped;        /* Locations the mapper mapped */
    uint64_t unmapped;      /* Locations it could not map (it returned 0) */
    uint64_t orphans;       /* samples naming a node the profile's tree does not hold: left out */
};

/*
 * pprof_from_cpu_json - converts a Profiler.stop reply to a pprof Profile.
 *
 * json/len: the whole reply text {"id":N,"result":{"profile":{...}}}, or a
 * bare profile object {"nodes":[...],"startTime":...}; borrowed, need not
 * be NUL-terminated. Parsed in one streaming pass (yajl callbacks, no DOM):
 * memory is the node table, interned strings and the output, not a tree of
 * the text.
 *
 * Output: sample_type [samples/count, cpu/nanoseconds], period_type
 * cpu/nanoseconds, period = interval; one Sample per distinct stack
 * (location ids leaf first, the tree's (root) node left out), value
 * [hits, hits * period] (a root with hits of its own, which V8 never
 * sends, gets a one-frame stack); one Location per distinct (url, line, column,
 * function), one Function per (url, name) with start_line. Lines and
 * columns become 1-based (V8's -1, "unknown", becomes 0). A "file://" url
 * loses its scheme and is percent-decoded to a path. An empty function
 * name becomes "(anonymous)". time_nanos = startTime * 1000 +
 * wall_minus_mono_ns, duration_nanos = (endTime - startTime) * 1000.
 *
 * Counts come from each node's hitCount, so the total is sum(hitCount).
 * samples[] holds a few more entries than that (V8 records the stack at
 * Profiler.start, and on some other occasions, without counting a hit: 0 to
 * 3 more in the Node 20, Deno and workerd recordings); samples[] and
 * timeDeltas are validated and otherwise unused.
 *
 * Strings: invalid UTF-8 after JSON unescaping (a lone surrogate \ud800) and
 * NUL characters are replaced by U+FFFD; raw invalid bytes in the text are
 * malformed JSON. A name or url longer than PPROF_MAX_STRING is cut there.
 *
 * Rejected with ISOPROF_EPROFILE and *why: a missing nodes/startTime/
 * endTime, a value of the wrong type, a node without id or callFrame, a
 * duplicate node id, a child id that is unknown or referenced twice, no root
 * or several, a cycle, samples and timeDeltas of different lengths, endTime
 * before startTime, times that overflow, more nodes than the cap, more
 * samples than PPROF_MAX_SAMPLES (or PPROF_MAX_KEPT_SAMPLES of them before
 * the nodes), nesting deeper than PPROF_MAX_DEPTH. A CDP error reply gives
 * ISOPROF_ECDP with its message; broken JSON ISOPROF_EJSON; an output larger
 * than pprof_output_cap(len) ISOPROF_ETOOBIG.
 *
 * A stack deeper than PPROF_MAX_STACK frames is cut: it keeps that many
 * frames nearest the root and ends in a PPROF_TRUNCATED_FRAME frame that
 * carries the values of everything deeper; the profile then has a comment saying
 * so, and out->truncated counts the frames folded.
 *
 * A sample naming a node the tree does not hold is left out and counted in
 * out->orphans. The totals follow hitCount; sum(hitCount) and
 * samples.length are not held to each other (Node 20 reports more hits
 * than samples under load).
 *
 * o: borrowed; NULL means all defaults. out: filled on success only; the
 * caller owns out->pprof. why: see the top of this file. Any thread.
 */
int pprof_from_cpu_json(const char *json, size_t len, const struct pprof_cpu_opts *o,
                        struct pprof_result *out, char **why);

/*
 * pprof_from_heap_json - converts a HeapProfiler.getSamplingProfile (or
 * stopSampling) reply to a pprof Profile.
 *
 * json/len: {"id":N,"result":{"profile":{"head":{...},"samples":[...]}}}
 * or the bare {"head":...,"samples":...}; borrowed. The nested head tree is
 * walked with an explicit, capped stack: no recursion, so a hostile depth
 * costs an error, not the thread's stack.
 *
 * Output: sample_type [inuse_objects/count, inuse_space/bytes], period_type
 * space/bytes, period = interval_bytes, time_nanos = time_ns, no duration.
 * A node's values are the number of samples[] naming it and the sum of
 * their sizes: what V8 sampled, not scaled up by the sampling rate. A
 * profile without samples[] (older V8) uses each node's selfSize with an
 * object count of 0. Stacks, locations, functions and strings as for CPU
 * (Deno's heap urls are file:// too).
 *
 * Rejected (ISOPROF_EPROFILE, *why): no head, wrong types, a node without id
 * or callFrame, a duplicate node id, more nodes than the cap, more than
 * PPROF_MAX_KEPT_SAMPLES samples, tree depth past PPROF_MAX_DEPTH; other
 * errors, stacks and output cap as for CPU. A sample naming a node the tree
 * does not hold (Node 20 in a worker thread has sent one) is left out and
 * counted in out->orphans. out->samples = the samples[] kept; start_ns =
 * end_ns = time_ns. Any thread.
 */
int pprof_from_heap_json(const char *json, size_t len, const struct pprof_heap_opts *o,
                         struct pprof_result *out, char **why);

/*
 * pprof_merge - merges n serialized (not compressed) profiles into one.
 *
 * in: n >= 1 borrowed buffers. All must have the same sample types (type
 * and unit, in order), else ISOPROF_EPROFILE with *why. Values of identical
 * stacks (same functions, files, lines, columns) are summed; samples whose
 * values are all zero are dropped. time_nanos = the earliest input's,
 * duration_nanos = latest end - earliest start; period_type and period come
 * from the first input. Mappings, addresses, labels, comments and
 * drop/keep_frames are not carried over (V8 profiles have none); a Function
 * is identified by (name, system_name, filename).
 * An input that does not decode: ISOPROF_EPROTOBUF; one that decodes but
 * refers to missing ids or strings: ISOPROF_EPROFILE. out: filled on
 * success only, owned by the caller. Any thread.
 */
int pprof_merge(const struct pprof_buf *in, size_t n, struct pprof_buf *out, char **why);

/* One function of a top listing. name/file are owned by the pprof_top. */
struct pprof_top_row {
    char *name;
    char *file;
    int64_t
        line; /* the function's start_line (else its first location's line), 1-based; 0 unknown */
    int64_t flat; /* value of samples whose leaf frame is this function */
    int64_t cum;  /* value of samples with this function anywhere in the stack, once per sample */
};

struct pprof_top {
    struct pprof_top_row *rows;
    size_t n;
    int64_t total; /* sum of the chosen value over all samples */
    char *type;    /* sample type name, e.g. "cpu" */
    char *unit;    /* its unit, e.g. "nanoseconds" */
};

/*
 * pprof_top - the per-function flat/cum table of a serialized profile, like
 * `go tool pprof -top` at function granularity.
 *
 * in: borrowed, not compressed. sample_index: which value to read, -1 =
 * the last sample type. Functions are grouped by (name, filename). rows are
 * sorted by flat, descending (then cum descending, then name, so the order
 * is stable). A function that recurses counts once per sample in cum.
 * Errors: -EINVAL (bad argument or sample_index out of range),
 * ISOPROF_EPROTOBUF, ISOPROF_EPROFILE (dangling ids or string indices),
 * -ENOMEM. out: filled on success only; free with pprof_top_free.
 * Any thread.
 */
int pprof_top(const struct pprof_buf *in, int sample_index, struct pprof_top *out);

/* Frees everything a successful pprof_top put in t and zeroes it. t may be NULL. */
void pprof_top_free(struct pprof_top *t);

/*
 * The call tree of one or two sets of profiles: what a flame graph draws,
 * and a diff compares. Stacks are merged root first by function, a
 * function being (name, filename) as in pprof_top, so nodes[k].total is
 * what pprof_top's cum counts along one path and nodes[k].self its flat.
 * Set 0 is the profile shown (the compared one of a diff), set 1 the base.
 * Values are those of the last sample type (cpu/nanoseconds,
 * inuse_space/bytes); samples whose value is 0 add nothing.
 */
#define PPROF_TREE_MAX_NODES ((size_t)2 << 20)
#define PPROF_TREE_ROOT UINT32_MAX /* nodes[0].fn */

struct pprof_tree_fn {
    char *name, *file; /* never NULL; "" when unknown */
    int64_t line;      /* start line, 1-based; 0 unknown */
};

struct pprof_tree_node {
    uint32_t fn;          /* index into fns; PPROF_TREE_ROOT for nodes[0] */
    uint32_t parent;      /* nodes[0]'s is 0 */
    uint32_t child, next; /* first child, next sibling (newest first); 0: none */
    int64_t total[2];     /* value of the samples through this node, per set */
    int64_t self[2];      /* ... of those that end here */
};

struct pprof_tree {
    struct pprof_tree_fn *fns;
    size_t nfns;
    struct pprof_tree_node *nodes; /* nodes[0] is the root */
    size_t nnodes;
    size_t profiles[2];                  /* profiles added, per set */
    char *type, *unit;                   /* of the value, from the first profile */
    int64_t period;                      /* value per sample (cpu: ns), 0 unknown */
    int64_t time_nanos[2], end_nanos[2]; /* earliest start, latest end; 0 unknown */
    void *priv;                          /* lookup tables */
};

/*
 * pprof_tree_add - add the samples of one serialized (not compressed)
 * profile to set (0 or 1) of t, which starts zeroed. Every profile of a
 * tree must have the same last sample type and unit, else
 * ISOPROF_EPROFILE with *why (cpu and heap windows do not mix). Errors as
 * for pprof_merge, and ISOPROF_ETOOBIG past PPROF_TREE_MAX_NODES nodes. After
 * an error, t holds part of the profile: free it. Any thread (one tree to a
 * thread).
 */
int pprof_tree_add(struct pprof_tree *t, const struct pprof_buf *in, int set, char **why);

/*
 * pprof_tree_add_stack - add value samples of one stack to set (0 or 1) of
 * t: names[0..n) and files[0..n) (borrowed; NULL as "") root first. A tree
 * built so counts samples (type "samples", unit "count", period 0); one
 * that holds another type refuses it (-EINVAL). value <= 0 adds nothing.
 * The caller counts its profiles (t->profiles[set]) as it sees fit.
 * Errors: -EINVAL, -ENOMEM, ISOPROF_ETOOBIG (past PPROF_TREE_MAX_NODES).
 * Any thread (one tree to a thread).
 */
int pprof_tree_add_stack(struct pprof_tree *t, int set, const char *const *names,
                         const char *const *files, size_t n, int64_t value);

/* Frees everything t holds and zeroes it. t may be NULL. */
void pprof_tree_free(struct pprof_tree *t);

/*
 * pprof_gzip - gzip-compresses in[0..len) (the on-disk and on-the-wire
 * form of a pprof file) into out, owned by the caller: isoprof_gzip
 * (config/base.h) into a pprof_buf. Errors: -ENOMEM, -EINVAL. Any thread.
 */
int pprof_gzip(const void *in, size_t len, struct pprof_buf *out);

/*
 * pprof_gunzip - inflates one gzip member in[0..len) into out (owned by the
 * caller). cap: the largest output accepted; past it ISOPROF_ETOOBIG.
 * Truncated or corrupt data, or bytes after the member: ISOPROF_ECORRUPT.
 * Errors also -ENOMEM, -EINVAL. Any thread. isoprof_gunzip into a pprof_buf.
 */
int pprof_gunzip(const void *in, size_t len, size_t cap, struct pprof_buf *out);

#endif

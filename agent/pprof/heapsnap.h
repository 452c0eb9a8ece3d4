/*
 * heapsnap.h - V8 heap snapshots (.heapsnapshot, the text of
 * HeapProfiler.addHeapSnapshotChunk events): a streaming parser into a
 * compact graph, its dominator tree and retained sizes, and the retained
 * profile as pprof: what holds the memory, not where it was allocated.
 *
 * No global state, no logging, and no I/O but on the spill file a caller
 * may hand over (struct heapsnap_parse_opts). A parser, a snapshot or a
 * dominator tree belongs to one thread at a time; a finished snapshot and
 * its dominator tree are read-only and may be read by any number of
 * threads at once (with a spill file, one heapsnap_dominators at a time:
 * it writes its predecessor lists there). All memory comes from
 * isoprof_malloc & co.
 *
 * The compact form (per node 17 bytes, per edge 9 bytes, plus the strings):
 *   nodes   type (1 byte, an index into meta's node type names), name (a
 *           strings index), self_size (8 bytes), and the index of its
 *           first edge (its edge_count while it parses); ids,
 *           trace_node_id and detachedness are read and dropped (nothing
 *           here needs them);
 *   edges   the target node's ordinal (to_node / the node field count),
 *           name_or_index and type (1 byte), one packed 9-byte record an
 *           edge: in memory, or with a spill file in that file, written as
 *           they stream by and read back in blocks (the edges are most of
 *           a snapshot: 5 a node in a V8 heap);
 *   strings packed in one buffer, NUL-terminated, with an offset each; of
 *           each, at most HEAPSNAP_MAX_NAME bytes are kept (a string node's
 *           name is the string's contents: a 100 MB string must not cost
 *           100 MB here). Invalid UTF-8 after unescaping (a lone surrogate)
 *           and NUL become U+FFFD, so every kept string is valid UTF-8.
 * Everything else (trace_function_infos, trace_tree, samples, locations
 * and any field of a later format) is skipped byte by byte as it streams
 * by. Field positions come from snapshot.meta, never assumed.
 */
#ifndef ISOPROF_HEAPSNAP_H
#define ISOPROF_HEAPSNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pprof.h"

#define HEAPSNAP_MAX_NODES ((size_t)50000000)   /* snapshot.node_count */
#define HEAPSNAP_MAX_EDGES ((size_t)250000000)  /* snapshot.edge_count */
#define HEAPSNAP_MAX_STRINGS ((size_t)64 << 20) /* entries of strings[] */
#define HEAPSNAP_MAX_NAME 1024                  /* bytes kept of one string (cut at a character) */
#define HEAPSNAP_MAX_NESTING 65536              /* JSON depth (a trace_tree nests per call) */
#define HEAPSNAP_MAX_FIELDS 64                  /* entries of node_fields / edge_fields */
#define HEAPSNAP_MAX_TYPES 64                   /* node or edge type names */
#define HEAPSNAP_NODE_BYTES 17                  /* what a node costs the parse's budget */
#define HEAPSNAP_EDGE_BYTES 9                   /* ... and an edge (0 with a spill file) */
#define HEAPSNAP_NONE UINT32_MAX                /* no node */

/*
 * Why a snapshot was refused. HEAPSNAP_OK is 0; heapsnap_reason() names
 * each (for a counter's label).
 */
enum heapsnap_reason {
    HEAPSNAP_OK = 0,
    HEAPSNAP_E_JSON,       /* not JSON (invalid UTF-8 included), or not an object at the top */
    HEAPSNAP_E_META,       /* snapshot.meta malformed: a field list or type list that is not
                              an array of strings, a node field (type, name, self_size,
                              edge_count) or edge field (type, name_or_index, to_node) missing
                              or listed twice, no type names, a key written twice */
    HEAPSNAP_E_MISSING,    /* snapshot, meta, node_count, edge_count, nodes, edges or strings
                              missing, or nodes/edges before snapshot.meta and the counts */
    HEAPSNAP_E_VALUE,      /* a count, or an entry of nodes/edges, that is not a non-negative
                              integer in range (a node or edge type past its type names, a
                              name or edge_count past 32 bits) */
    HEAPSNAP_E_COUNT,      /* nodes or edges not node_count or edge_count times the field
                              count long, or node_count 0 (no root) */
    HEAPSNAP_E_EDGE,       /* an edge's to_node not a multiple of the node field count, or
                              past the nodes array */
    HEAPSNAP_E_EDGE_SUM,   /* the nodes' edge_count do not add up to edge_count */
    HEAPSNAP_E_STRING,     /* a node name or edge name past the end of strings[] */
    HEAPSNAP_E_DEPTH,      /* JSON nesting deeper than HEAPSNAP_MAX_NESTING */
    HEAPSNAP_E_TOOBIG,     /* a count past its HEAPSNAP_MAX_*, or the snapshot past the budget */
    HEAPSNAP_E_NOMEM,      /* an allocation failed */
    HEAPSNAP_E_INCOMPLETE, /* the text ended before the snapshot did (a cut stream) */
    HEAPSNAP_E_IO,         /* the spill file could not be written */
    HEAPSNAP_NREASONS
};

/* A short lower_case name ("json", "meta", "edge_sum"...); "ok" for 0,
 * "unknown" outside the enum. */
const char *heapsnap_reason(int reason);

struct heapsnap;
struct heapsnap_parser;

/*
 * heapsnap_parser_new - a parser whose snapshot may take at most budget
 * bytes (heapsnap_bytes; 0: no budget, only the HEAPSNAP_MAX_* caps). The
 * text is fed in chunks of any size, split anywhere, and read once;
 * nothing is buffered but what is kept. A node_count or edge_count over
 * its cap, or whose arrays (HEAPSNAP_NODE_BYTES a node, HEAPSNAP_EDGE_BYTES
 * an edge) would not fit the budget with what is already held, is refused
 * (HEAPSNAP_E_TOOBIG) when the count is read, before anything is allocated
 * for it; the strings are charged as they arrive, so a snapshot is
 * accepted iff its final heapsnap_bytes fits. While it parses, the strings
 * arena's growth slack (under a quarter of the strings, plus 64 KiB) and
 * the parser itself (about 40 KiB) come on top. Returns 0 or -ENOMEM; *out
 * owned by the caller (heapsnap_parser_free).
 */
int heapsnap_parser_new(size_t budget, struct heapsnap_parser **out);

/*
 * The parse's options, for a snapshot that must fit a fixed memory budget
 * whatever its size (the daemon's retained profile).
 */
struct heapsnap_parse_opts {
    size_t budget; /* as heapsnap_parser_new's */
    /* -1, or a file open for reading and writing, empty, that the parser
     * takes over (closed by heapsnap_parser_free or, once finished, by
     * heapsnap_free; on every path): the edges go there instead of memory
     * (HEAPSNAP_EDGE_BYTES is then not charged; a 64 KiB write buffer is,
     * while the edges stream), and heapsnap_dominators writes its
     * predecessor lists after them (and heapsnap_retained the node arrays
     * it sets aside): about 17 bytes an edge and 13 a node of file. Reading
     * it back costs I/O, not memory: the dominators read it through a cache
     * of HEAPSNAP_SPILL_CACHE bytes, the profile sequentially. Meant to be
     * unlinked (O_TMPFILE): its pages are page cache, which the kernel
     * reclaims, not the process's. */
    int spill_fd;
    /* With a spill file: the predecessor entries the dominators hold at
     * once (0: HEAPSNAP_PRED_CHUNK); fewer cost more passes over the
     * edges. */
    size_t pred_chunk;
    /* Keep only the strings the retained profile names: node names of the
     * types object, closure, native and synthetic, and the names of edges
     * that are not element or hidden. Every other string (a string node's
     * contents) is kept as "" (heapsnap_node then says "" for its name).
     * Applies when strings[] comes after nodes[] and edges[], as V8 writes
     * it; otherwise every string is kept. */
    bool used_names;
    /* Bytes a node charged to the budget on top of its arrays when
     * node_count is read: what the passes after the parse will need, so
     * that a snapshot that would not fit them is refused before its nodes
     * are read. Not held by the snapshot. */
    size_t reserve_node;
};

/* heapsnap_parser_new with options (o->spill_fd is taken over even when
 * this fails). Returns 0 or -ENOMEM. */
int heapsnap_parser_new_opts(const struct heapsnap_parse_opts *o, struct heapsnap_parser **out);

/*
 * heapsnap_parser_feed - parse the next len bytes (buf borrowed for the
 * call). Returns HEAPSNAP_OK or the reason the snapshot is refused; after
 * a refusal every later call returns it again and reads nothing. Any
 * thread that owns p.
 */
int heapsnap_parser_feed(struct heapsnap_parser *p, const void *buf, size_t len);

/*
 * heapsnap_parser_finish - the end of the text: the last checks (the
 * required fields, the sum of the edge counts, every name's strings index)
 * and the hand-over. Returns HEAPSNAP_OK with *out set (owned by the
 * caller: heapsnap_free), or a reason with *out NULL; HEAPSNAP_E_INCOMPLETE
 * when the text stopped inside the snapshot (or there was none). *why, if
 * why is not NULL, gets on a refusal an allocated message saying what and
 * where ("edges[30] (edge 10): to_node 7 is not a multiple of 7"), freed
 * with isoprof_free (NULL only when that allocation failed too). p is
 * spent either way: free it; a second finish returns HEAPSNAP_E_INCOMPLETE
 * (and no why), as does a feed after a finish.
 */
int heapsnap_parser_finish(struct heapsnap_parser *p, struct heapsnap **out, char **why);

/* Frees p and what it had parsed. p may be NULL. */
void heapsnap_parser_free(struct heapsnap_parser *p);

/* The three calls above on one whole text. */
int heapsnap_parse(const void *json, size_t len, size_t budget, struct heapsnap **out, char **why);

/* Frees s. NULL is fine. */
void heapsnap_free(struct heapsnap *s);

/* Bytes s holds; never more than the budget it was parsed with. */
size_t heapsnap_bytes(const struct heapsnap *s);

/* Node, edge and string counts. Node 0 is the synthetic root. */
size_t heapsnap_node_count(const struct heapsnap *s);
size_t heapsnap_edge_count(const struct heapsnap *s);
size_t heapsnap_string_count(const struct heapsnap *s);

/* One node, as kept. Strings borrowed from s. */
struct heapsnap_node {
    const char *type;    /* its type's name: "object", "closure", "array"... */
    const char *name;    /* strings[name] (its first HEAPSNAP_MAX_NAME bytes) */
    uint64_t self_size;  /* bytes */
    uint32_t first_edge; /* its edges are first_edge .. first_edge + edge_count - 1 */
    uint32_t edge_count;
};

/* heapsnap_node - node i (0-based ordinal) into *out: 0, or -EINVAL when i
 * is past the last node. Any thread. */
int heapsnap_node(const struct heapsnap *s, uint32_t i, struct heapsnap_node *out);

/* One edge, as kept. Strings borrowed from s. */
struct heapsnap_edge {
    const char *type; /* "property", "element", "internal", "weak"... */
    const char *name; /* the property or variable name; NULL for element and hidden edges */
    uint32_t index;   /* element and hidden edges: the index; others: the strings index */
    uint32_t from;    /* the node whose edge it is */
    uint32_t to;      /* the node it points at (ordinal: to_node / node field count) */
    bool retaining;   /* whether it counts for the dominator tree (see below) */
};

/* heapsnap_edge - edge e (0-based) into *out: 0, -EINVAL when e is past
 * the last edge, -EIO when it could not be read from the spill file. Finds
 * the edge's node by binary search. Any thread. */
int heapsnap_edge(const struct heapsnap *s, uint32_t e, struct heapsnap_edge *out);

/*
 * Dominators and retained sizes.
 *
 * The graph is the snapshot's, from node 0 (the synthetic root), over the
 * retaining edges only, as DevTools counts them: a "weak" edge never
 * retains, and a "shortcut" edge retains only from the root (elsewhere it
 * duplicates a path that exists through other edges). A node d dominates v
 * when every path from the root to v passes through d; v's immediate
 * dominator is the dominator nearest to it. Nodes that the root does not
 * reach are left out (counted in `unreachable`). The retained size of a
 * node is its self_size plus the retained sizes of the nodes it
 * immediately dominates: what freeing it would free. The root's is the
 * sum of the reachable nodes' self sizes.
 *
 * Computed with Lengauer and Tarjan's algorithm (the simple version, with
 * path compression: O(E log N)) over a depth-first search on an explicit
 * stack: no recursion anywhere, so a chain of a million nodes costs no
 * thread stack. Memory: while it runs, at most heapsnap_dom_need(s) bytes:
 * 32 bytes a node (a node's DFS parent shares the forest's ancestor array,
 * a bucket's links the idom array, and path compression reverses pointers
 * instead of keeping a stack), and the predecessor lists, 4 bytes a
 * retaining edge. With a spill file those go to the file instead, in
 * windows of HEAPSNAP_PRED_CHUNK entries (pred_chunk), filled in one scan
 * of the edges through a bucket a window and read back in pieces, and the
 * edges come through a cache of HEAPSNAP_SPILL_CACHE bytes. The result
 * keeps 16 bytes a node.
 */
#define HEAPSNAP_PRED_CHUNK ((size_t)1 << 20)  /* predecessor entries in memory at once */
#define HEAPSNAP_SPILL_CACHE ((size_t)9 << 19) /* the dominators' edge cache (4.5 MiB) */
struct heapsnap_dom;

struct heapsnap_dom_stats {
    size_t reachable;   /* nodes the root reaches, the root included */
    size_t unreachable; /* nodes left out */
    uint64_t total;     /* the reachable nodes' self sizes (the root's retained size) */
    size_t bytes;       /* what the result holds */
};

/* The most bytes heapsnap_dominators may allocate for s, the result
 * included. */
size_t heapsnap_dom_need(const struct heapsnap *s);

/*
 * heapsnap_dominators - the dominator tree and retained sizes of s.
 * max_bytes: 0 for no cap, else ISOPROF_ETOOBIG without allocating anything
 * when heapsnap_dom_need(s) passes it. Returns 0 with *out set (owned by
 * the caller: heapsnap_dom_free), -ENOMEM (nothing leaks), ISOPROF_ETOOBIG,
 * -EIO (the spill file failed) or -EINVAL (a NULL argument). s is borrowed
 * for the call only. Any thread.
 */
int heapsnap_dominators(const struct heapsnap *s, size_t max_bytes, struct heapsnap_dom **out);

/* Frees d. NULL is fine. */
void heapsnap_dom_free(struct heapsnap_dom *d);

void heapsnap_dom_stats(const struct heapsnap_dom *d, struct heapsnap_dom_stats *out);

/* The immediate dominator of node v; HEAPSNAP_NONE for the root, for a
 * node the root does not reach and for v past the last node. */
uint32_t heapsnap_dom_idom(const struct heapsnap_dom *d, uint32_t v);

/* Whether the root reaches v (the root does). */
bool heapsnap_dom_reached(const struct heapsnap_dom *d, uint32_t v);

/* The retained size of node v in bytes; 0 for a node not reached. */
uint64_t heapsnap_dom_retained(const struct heapsnap_dom *d, uint32_t v);

/*
 * The retained profile as pprof.
 *
 * sample_type [retained_objects/count, retained_space/bytes], period_type
 * space/bytes, period 1, time_nanos = time_ns. Each reachable node adds a
 * count of 1 and its *self* size to the sample of its path in the dominator
 * tree, so the samples add up to the reachable nodes and their total self
 * size, and a frame's cumulative value (`go tool pprof -top -cum`) is what
 * the nodes under it retain.
 *
 * A sample's stack is that path from the root (the root itself left out;
 * its own count and size, if any, go to a one-frame "(root)" sample),
 * leaf first as pprof wants. Each frame names a node by its class and by
 * the edge that holds it: "<class> <edge>", e.g. "Map registry" is a Map
 * held by a property `registry`, "(array) table" the array behind it.
 *   class: the node's name for types object, native and synthetic ("Map",
 *          "Array", "(GC roots)"), "(closure) <name>" for a closure,
 *          "(<type>)" for every other type and for an empty name:
 *          "(array)", "(string)", "(code)", "(object shape)";
 *   edge:  the property, variable or internal name, or "[]" for an
 *          element or hidden edge and for a name that is a number (V8 names
 *          the slots of internal arrays, such as a Map's hash table, by
 *          their index), so that the entries of one container are one
 *          frame ("Session []": the 60,000 sessions in a Map's table are
 *          one path, with a count of 60,000); "[<index>]" with
 *          index_frames, for a small heap looked at element by element
 *          (each index is then a frame of its own, and a large array uses
 *          up the caps). The edge is the first retaining edge from the
 *          node's immediate dominator to it if there is one, else the
 *          best named retaining edge into it: a property or variable
 *          before an internal name before an index, the first of the best
 *          in the snapshot's order (a Map held by a global and by a stack
 *          slot is "Map <the global's name>", not "Map []").
 * Each part keeps at most HEAPSNAP_PPROF_NAME bytes (cut at a character).
 * One Function and one Location per distinct frame; equal paths are one
 * sample.
 *
 * Bounds, so that any heap gives a profile Pyroscope takes:
 *   max_depth    frames in a stack: the nodes deeper than that are charged
 *                to their ancestor at that depth, under a "(deeper)" frame;
 *   max_samples  distinct paths, and max_frames distinct frames: the
 *                paths are chosen best first, by what all the nodes on
 *                each hold together (a path's cumulative size: 60,000
 *                sessions of 1 KB outrank one 1 MB buffer), each after
 *                its prefix; a node whose path is not chosen is charged,
 *                with what it dominates, to its nearest dominator's path
 *                (folded). So what the caps fold is what holds the least,
 *                and every path's cumulative value stays exact. Among
 *                the children of one path, at most HEAPSNAP_PPROF_FRESH
 *                distinct frames are candidates (in preorder): the
 *                children past them are folded into that path, so that a
 *                hostile snapshot (an object of a million distinct
 *                property names) costs the profile a bounded table.
 * Each bound that acted is said in a comment of the profile and counted in
 * the result.
 */
#define HEAPSNAP_PPROF_DEPTH 32
#define HEAPSNAP_PPROF_SAMPLES 16000 /* Pyroscope's default samples per profile */
#define HEAPSNAP_PPROF_FRAMES 8192
#define HEAPSNAP_PPROF_NAME 128
#define HEAPSNAP_PPROF_FRESH 65536 /* candidate frames among one path's children */
#define HEAPSNAP_DEEPER_FRAME "(deeper)"
#define HEAPSNAP_ROOT_FRAME "(root)"

struct heapsnap_pprof_opts {
    uint64_t time_ns;   /* wall clock of the snapshot (time_nanos) */
    unsigned max_depth; /* 0: HEAPSNAP_PPROF_DEPTH; at most 1000 */
    size_t max_samples; /* 0: HEAPSNAP_PPROF_SAMPLES */
    size_t max_frames;  /* 0: HEAPSNAP_PPROF_FRAMES */
    bool index_frames;  /* element and hidden edges as "[<index>]", not "[]" */
};

struct heapsnap_pprof_result {
    struct pprof_buf pprof; /* serialized Profile, not compressed; owned by the caller */
    uint64_t objects;       /* sum of the counts: the reachable nodes */
    uint64_t bytes;         /* sum of the sizes: their self sizes */
    uint64_t samples;       /* Samples written */
    uint64_t frames;        /* distinct frames (Functions) */
    uint64_t deeper;        /* nodes charged to a "(deeper)" frame */
    uint64_t folded;        /* nodes folded into their dominator's path by a cap */
};

/*
 * heapsnap_pprof - the retained profile of s, from its dominator tree d
 * (heapsnap_dominators of the same s; both borrowed for the call). o may be
 * NULL (all defaults). Memory: heapsnap_pprof_need(s) for its per-node
 * arrays (17 bytes a node, and a small edge cache with a spill file); 48 a
 * candidate path (at most twice max_samples and 1,024 wait between two
 * choices, plus the distinct frames among the children of the path being
 * expanded, at most HEAPSNAP_PPROF_FRESH); the bounded tables and the
 * output (together under 16 MiB with the default caps). Time: linear in the
 * nodes, plus a heap operation per candidate path.
 * Returns 0 with *out filled (out->pprof owned by the caller), -ENOMEM
 * (nothing leaks, *out untouched), -EIO (the spill file failed), -EINVAL
 * (a NULL argument, d not of s's size, max_depth over 1000). Any thread.
 */
size_t heapsnap_pprof_need(const struct heapsnap *s);
int heapsnap_pprof(const struct heapsnap *s, const struct heapsnap_dom *d,
                   const struct heapsnap_pprof_opts *o, struct heapsnap_pprof_result *out);

/*
 * The retained profile of a snapshot read from a source, within a memory
 * budget, as the daemon makes it (agent/daemon/snapshot.c): the parse with
 * a spill file and used_names, its nodes charged HEAPSNAP_RESERVE_NODE more
 * for the passes after it, so that a snapshot too big for the budget is
 * refused when node_count is read (before anything is allocated for its
 * nodes), then the dominators and the profile, each within what the
 * snapshot leaves of the budget. The snapshot is the conversion's: each
 * of its node arrays waits in the spill file while no pass reads it.
 * Peak: about HEAPSNAP_NODE_BYTES + HEAPSNAP_RESERVE_NODE bytes a node (35:
 * 67 MiB for 2 M nodes, the snapshot of a V8 heap of about 120 MiB),
 * plus the kept strings, plus at most HEAPSNAP_RETAINED_FIXED.
 */
/* What the passes after the parse need a node beyond the snapshot's
 * HEAPSNAP_NODE_BYTES, which wait in the spill file while no pass reads
 * them: the dominators hold at most 28 bytes a node at once (11 more), the
 * profile 34 and a bit (its 17, the dominator tree's 12 once its idoms are
 * freed, the snapshot's types and names): 17 and a bit more. */
#define HEAPSNAP_RESERVE_NODE 18
#define HEAPSNAP_RETAINED_FIXED ((size_t)16 << 20) /* the caches, the profile's tables */

/* A source hands the text to feed in pieces, and stops when feed returns
 * non-zero; it returns 0 or a negative errno of its own. */
typedef int (*heapsnap_feed_fn)(void *feed_arg, const void *data, size_t len);
typedef int (*heapsnap_source_fn)(void *arg, heapsnap_feed_fn feed, void *feed_arg);

struct heapsnap_retained_opts {
    size_t budget; /* bytes it may take, at least HEAPSNAP_RETAINED_FIXED; 0: none */
    int spill_fd;  /* taken over, as heapsnap_parse_opts's; -1: everything in memory */
    struct heapsnap_pprof_opts pprof;
};

/*
 * heapsnap_retained - src(arg, ...) parsed and made into its retained
 * profile within o->budget. Returns 0 with *out filled (out->pprof owned by
 * the caller); -ENOMEM (nothing leaks); or, with *why an allocated message
 * (freed with isoprof_free; NULL only when that allocation failed too), a
 * HEAPSNAP_E_* reason (the snapshot refused, HEAPSNAP_E_TOOBIG when it
 * would not fit the budget), ISOPROF_ETOOBIG (the dominators or the
 * profile would pass what the snapshot leaves of it), -EIO (the spill file
 * failed) or the source's own negative error ("could not be read back").
 * Any thread.
 */
int heapsnap_retained(const struct heapsnap_retained_opts *o, heapsnap_source_fn src, void *arg,
                      struct heapsnap_pprof_result *out, char **why);

#endif

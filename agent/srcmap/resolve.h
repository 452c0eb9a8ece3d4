/*
 * resolve.h - a script's source map found on disk, parsed once, kept in a
 * cache under a memory budget, and frames mapped through it.
 *
 * For a frame whose script URL names a file (file:// URL or absolute
 * path), the script is read only when it lies in the target's own tree
 * (struct srcmap_where: its trees, its process's working directory, the
 * directory of its main script, its source_maps directories); any other
 * path is refused unopened (SRCMAP_E_SCRIPT_OUTSIDE). The map is then
 * looked for in this order:
 *   1. the script's `//# sourceMappingURL=` (or `//@`) comment, found in
 *      the last SRCMAP_TAIL_BYTES of the file (see find_comment in
 *      resolve.c for what a comment must satisfy): a data: URL (base64 or
 *      URL-encoded JSON) is the map itself; any other URL is a path
 *      relative to the script;
 *   2. a hidden map beside the script: "<script>.map";
 *   3. the target's source_maps directories: "<dir>/<script base name>.map",
 *      then any "*.map" of the directory whose `file` field is the script's
 *      base name.
 * A script URL that is not a file path (a workerd module "worker.js") has
 * only step 3. Every path is resolved beneath the target's root (a bind
 * mount or /proc/PID/root: RESOLVE_IN_ROOT) and beneath the tree it must
 * lie in (RESOLVE_BENEATH) with O_PATH, so that nothing is opened before it
 * is checked; only a regular file is then opened for reading (O_NONBLOCK),
 * so a FIFO, a socket or a device is refused (SRCMAP_E_NOT_FILE) without
 * blocking or acting. A map named by a script may lie only in the script's
 * own directory tree or in a source_maps directory: "..", an absolute path
 * elsewhere and a symlink out are refused (SRCMAP_E_OUTSIDE).
 *
 * What a script resolved to (a map, none, a refusal) is kept per script
 * path and the script file's identity (dev, inode, size, mtime) until the
 * file changes (or the entry is evicted: at most SRCMAP_MAX_SCRIPTS), so a
 * script is read once, however many windows name it; a reload
 * (srcmap_cache_limits) looks again for the scripts that had none.
 *
 * The CPU the lookups cost (thread CPU time, measured around each frame
 * that needs a file looked at or a map consulted) is charged to the
 * target's allowance (srcmap_where.owner): a token bucket that fills at
 * a share of one core and holds what SRCMAP_ALLOWANCE_SPAN_NS earns. While
 * it is empty (a frame that cost more than it held leaves it in debt, paid
 * back in full), the target's frames are left unmapped without any work
 * (counted: frames_over_allowance), so a target whose maps cost more is
 * served fewer lookups and the other targets do not pay.
 *
 * Parsed maps are shared by all conversions, keyed by their file (or the
 * script, for an inline map) and its size, mtime and inode: a map replaced
 * on disk (a deploy) is read again at its next use. The maps not in use by
 * a conversion are evicted least recently used first to keep the cache's
 * bytes within its budget; a map whose compact form alone passes the
 * budget is refused (SRCMAP_E_TOOBIG). A map that failed is remembered
 * with its reason (and the file's identity) so that it is counted and
 * reported once, not once per window, until the file changes.
 *
 * Threads: the cache is shared; every call may be made from any thread. A
 * session belongs to one thread (one conversion). File reads and parsing
 * happen outside the cache's lock, so srcmap_cache_stats never waits for a
 * parse.
 */
#ifndef ISOPROF_SRCMAP_RESOLVE_H
#define ISOPROF_SRCMAP_RESOLVE_H

#include "srcmap.h"

#include <stddef.h>
#include <stdint.h>

#define SRCMAP_DEFAULT_BUDGET ((size_t)32 << 20)   /* source_maps_cache */
#define SRCMAP_DEFAULT_MAX_FILE ((size_t)64 << 20) /* source_maps_max_file */
/* Read from a script's end (after its trailing blank lines) to find its
 * comment: the prefix and a URL of PATH_MAX bytes fit, with room for the
 * line after it (Deno's "// denoCacheMetadata=..."). */
#define SRCMAP_TAIL_BYTES 8192
#define SRCMAP_MAX_DIR_MAPS 256       /* *.map files of a source_maps dir read for `file` */
#define SRCMAP_MAX_SCRIPTS 4096       /* scripts remembered (found map or failure) */
#define SRCMAP_MAX_OWNERS 1024        /* targets' allowances remembered */
#define SRCMAP_DEFAULT_CPU_PPM 20000u /* source_maps_cpu: 2 % of a core a target */
/* An allowance holds what its share earns in this span: at 2 %, 2 s of CPU,
 * enough for a cold start that parses a few large maps. */
#define SRCMAP_ALLOWANCE_SPAN_NS (100ull * 1000000000ull)

struct srcmap_cache;

/* Totals since the cache was made; a snapshot. */
struct srcmap_stats {
    uint64_t maps;                     /* parsed maps held now */
    uint64_t bytes;                    /* their bytes (srcmap_bytes) */
    uint64_t budget;                   /* the cache's budget now */
    uint64_t loads;                    /* maps read and parsed */
    uint64_t hits;                     /* scripts whose map was found in the cache */
    uint64_t evictions;                /* maps evicted to keep within the budget */
    uint64_t mapped;                   /* frames mapped */
    uint64_t unmapped;                 /* frames of a file script not mapped (no map, no segment,
                                          or over the allowance) */
    uint64_t over_allowance;           /* of those: left unmapped, their target's allowance spent */
    uint64_t cpu_ns;                   /* thread CPU time charged to the allowances */
    uint64_t refused[SRCMAP_NREASONS]; /* maps refused, per reason ([0] unused) */
};

/*
 * srcmap_cache_new - a cache of at most budget bytes of parsed maps (0:
 * SRCMAP_DEFAULT_BUDGET) that refuses map files larger than max_file (0:
 * SRCMAP_DEFAULT_MAX_FILE). Returns 0 or -ENOMEM. *out owned by the caller.
 */
int srcmap_cache_new(size_t budget, size_t max_file, struct srcmap_cache **out);

/* New limits (a reload); maps past the new budget are evicted once unused,
 * and the scripts that had no map are looked at again at their next use. */
void srcmap_cache_limits(struct srcmap_cache *c, size_t budget, size_t max_file);

/*
 * srcmap_cache_allowance - each target's CPU allowance: share_ppm of one
 * core (parts per million; 0: SRCMAP_DEFAULT_CPU_PPM), holding at most
 * burst_ns (0: what the share earns in SRCMAP_ALLOWANCE_SPAN_NS). Applies
 * to the allowances at once (a full one stays full).
 */
void srcmap_cache_allowance(struct srcmap_cache *c, uint32_t share_ppm, uint64_t burst_ns);

/* A snapshot of the totals. */
void srcmap_cache_stats(struct srcmap_cache *c, struct srcmap_stats *st);

/* Frees the cache. No session may be open on it. c may be NULL. */
void srcmap_cache_free(struct srcmap_cache *c);

/* Where one target's files are. Borrowed for the session's life. */
struct srcmap_where {
    const char *root;        /* prefixed to every path: NULL or "" means "/" */
    const char *const *dirs; /* source_maps directories (absolute, inside root) */
    size_t ndirs;
    /* The target's own trees (absolute, inside root): a script is read
     * only beneath one of these, the source_maps directories, the working
     * directory of cwd_pid, or the directory of main_url. "/" is a tree
     * only when named here (a root configured for the target is its tree
     * whole); a working directory or main script directory of "/" is not. */
    const char *const *trees;
    size_t ntrees;
    uint32_t cwd_pid;     /* the target's process on this host (0: unknown) */
    const char *main_url; /* its main script as the runtime names it (file://...), or NULL */
    /* Whose allowance pays (one key a target process: the daemon uses its
     * inspector address); NULL: no allowance, nothing charged. */
    const char *owner;
    /* A Deno process (its pid on this host; 0: not Deno, or unknown). Deno
     * runs the JavaScript it transpiled from a TypeScript module, not the
     * file on disk, and keeps that JavaScript with an inline map in its
     * emit cache: <DENO_DIR>/gen/file/<module path>.js, DENO_DIR being
     * the process's $DENO_DIR (relative to its working directory),
     * $XDG_CACHE_HOME/deno or $HOME/.cache/deno, read from
     * /proc/<pid>/environ ($DENO_EMIT_CACHE_MODE=disable: no cache), when
     * /proc/<pid>/comm says "deno" (a pid of another namespace is not). A
     * module URL ending in .ts, .tsx, .mts, .cts or .jsx (itself in the
     * target's tree) is mapped through that file when it exists (read
     * beneath root and DENO_DIR like any other). */
    uint32_t deno_pid;
};

/* A refusal seen first by this session: what the caller logs, once. */
struct srcmap_event {
    int reason;       /* enum srcmap_reason */
    const char *path; /* the map (or the script, for an inline map), inside root */
    const char *script;
    const char *why; /* details: "version 2, not 3", "refers outside ..." */
};

struct srcmap_session;

/*
 * srcmap_session_new - one conversion's view of the cache for one target.
 * w and the strings in it are borrowed until srcmap_session_free. Returns 0
 * or -ENOMEM.
 */
int srcmap_session_new(struct srcmap_cache *c, const struct srcmap_where *w,
                       struct srcmap_session **out);

enum { SRCMAP_FRAME_NA = -1, SRCMAP_FRAME_UNMAPPED = 0, SRCMAP_FRAME_MAPPED = 1 };

/*
 * srcmap_session_frame - maps a frame: url (url_len bytes, a file:// URL,
 * an absolute path or a module name), V8's 0-based line and column of the
 * function's start (-1: unknown). Returns SRCMAP_FRAME_MAPPED with *out
 * filled (strings valid until srcmap_session_free), SRCMAP_FRAME_UNMAPPED
 * for a script that could have a map but gave no mapping, SRCMAP_FRAME_NA
 * for a frame with nothing to map (no url, node:internal, unknown line).
 * Each script is resolved once per session. A frame that needs work (a
 * script not resolved yet, a lookup in its map) is charged its thread CPU
 * time to the session's owner, and while the owner's allowance is spent
 * it is SRCMAP_FRAME_UNMAPPED without any work. Never fails: an
 * allocation failure leaves the frame unmapped.
 */
int srcmap_session_frame(struct srcmap_session *s, const char *url, size_t url_len, int32_t line,
                         int32_t column, struct srcmap_pos *out);

/* The refusals this session saw first (for the caller to log); borrowed
 * until srcmap_session_free. */
size_t srcmap_session_events(const struct srcmap_session *s, const struct srcmap_event **ev);

/* Frames this session mapped and left unmapped. */
void srcmap_session_counts(const struct srcmap_session *s, uint64_t *mapped, uint64_t *unmapped);

/* Releases the maps the session used and frees it. s may be NULL. */
void srcmap_session_free(struct srcmap_session *s);

#endif

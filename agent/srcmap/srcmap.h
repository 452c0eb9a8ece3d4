/*
 * srcmap.h - source maps (ECMA-426, "version 3"): a streaming parser into a
 * compact, read-only form, and position lookups in it.
 *
 * Pure: no I/O, no global state, no logging. A parser belongs to one thread
 * at a time; a finished struct srcmap is immutable and may be read by any
 * number of threads at once. All memory comes from isoprof_malloc & co.
 *
 * The compact form keeps what a lookup needs and nothing else: the
 * `mappings` text as it came (base64 VLQ: 4 to 8 bytes a segment), a
 * checkpoint of the decoder's state every SRCMAP_CHECK_EVERY segments (or
 * SRCMAP_CHECK_BYTES of text), and the `names` and `sources` strings.
 * `sourcesContent`, usually most of a map, is skipped as it streams by. A
 * lookup binary-searches the checkpoints and decodes at most one stretch
 * between two of them. Every segment is decoded and checked once, when
 * the parser finishes, so a map that is accepted has no bad VLQ and no
 * index out of range anywhere. A line whose generated columns go back (a
 * negative delta, which the spec allows: it sorts what it decodes) is also
 * kept decoded and sorted, 20 bytes a segment, and searched apart.
 */
#ifndef ISOPROF_SRCMAP_H
#define ISOPROF_SRCMAP_H

#include <stddef.h>
#include <stdint.h>

#define SRCMAP_CHECK_EVERY 64          /* segments between two checkpoints */
#define SRCMAP_CHECK_BYTES 4096        /* ... or bytes of mappings text */
#define SRCMAP_MAX_NESTING 64          /* JSON depth of the skipped values */
#define SRCMAP_MAX_ENTRIES (16u << 20) /* entries of names[] or sources[] */

/*
 * Why a map was refused. SRCMAP_OK is 0; the others are what the daemon
 * counts per reason (isoprof_srcmap_*_total{reason=...}); srcmap_reason()
 * names each.
 */
enum srcmap_reason {
    SRCMAP_OK = 0,
    SRCMAP_E_JSON,     /* not JSON, or not an object at the top */
    SRCMAP_E_VERSION,  /* version missing or not 3 */
    SRCMAP_E_FORMAT,   /* a field of the wrong type or written twice, or
                          mappings/sources missing */
    SRCMAP_E_VLQ,      /* a bad base64 digit, a cut VLQ, a value past 32 bits,
                          a segment of 2, 3 or more than 5 fields, a negative
                          column, line or index (after the deltas) */
    SRCMAP_E_INDEX,    /* a source or name index past the end of its array */
    SRCMAP_E_SECTIONS, /* an index map (sections): not supported */
    SRCMAP_E_TOOBIG,   /* the compact form would pass max_bytes */
    SRCMAP_E_NOMEM,    /* an allocation failed */
    /* found on disk (resolve.h) */
    SRCMAP_E_READ,           /* the map could not be read: gone, unreadable, cut short,
                                or it changed while it was read */
    SRCMAP_E_OUTSIDE,        /* its path leaves the script's tree, the target's root
                                and its source_maps dirs: refused */
    SRCMAP_E_FILE_TOOBIG,    /* the file is larger than source_maps_max_file */
    SRCMAP_E_DATA_URL,       /* a data: URL that is not base64 or URL-encoded JSON */
    SRCMAP_E_SCRIPT_OUTSIDE, /* the script lies outside the target's tree: not opened */
    SRCMAP_E_NOT_FILE,       /* the script or the map is not a regular file (a FIFO, a
                                device, a socket, a directory): not opened for reading */
    SRCMAP_E_ALLOWANCE,      /* the target's CPU allowance ran out (counted each time
                                it does; its frames stay unmapped until it refills) */
    SRCMAP_NREASONS
};

/* A short lower_case name ("json", "version", "vlq"...); "ok" for 0. */
const char *srcmap_reason(int reason);

struct srcmap;
struct srcmap_parser;

/*
 * srcmap_parser_new - a parser whose compact result may take at most
 * max_bytes (srcmap_bytes), 0 meaning no cap: a map is accepted iff its
 * compact form fits, and the parse stops at the first string or array that
 * would not. The text is fed in chunks of any size, split anywhere, and
 * read once: nothing is buffered but what is kept (a name or source while
 * it is read; the mappings text grows in place), so the peak is the
 * result, capped, plus the growth slack of its arrays (cut off at finish),
 * whatever the file's size. Every allocation goes through isoprof_malloc.
 * Returns 0 or -ENOMEM. *out owned by the caller (srcmap_parser_free).
 */
int srcmap_parser_new(size_t max_bytes, struct srcmap_parser **out);

/*
 * srcmap_parser_feed - parse the next len bytes. Returns SRCMAP_OK, or the
 * reason the map is refused; after an error every later call returns it
 * again. Any thread that owns p.
 */
int srcmap_parser_feed(struct srcmap_parser *p, const void *buf, size_t len);

/*
 * srcmap_parser_finish - the end of the text: checks the whole map and
 * hands over the result. Returns SRCMAP_OK with *out set (owned by the
 * caller, srcmap_free), or a reason with *out NULL; *why, if why is not
 * NULL, gets an allocated message saying where ("mappings: bad base64
 * digit '!' at byte 1207 (generated line 3)"), freed with isoprof_free
 * (NULL only when that allocation failed too). p is spent either way:
 * free it; a second finish returns SRCMAP_E_FORMAT.
 */
int srcmap_parser_finish(struct srcmap_parser *p, struct srcmap **out, char **why);

/* Frees p (and what it had parsed). p may be NULL. */
void srcmap_parser_free(struct srcmap_parser *p);

/* The three calls above on one whole text. */
int srcmap_parse(const void *json, size_t len, size_t max_bytes, struct srcmap **out, char **why);

/* Frees m. NULL is fine. */
void srcmap_free(struct srcmap *m);

/* Bytes m holds (what a cache charges for it); never more than the
 * max_bytes it was parsed with. */
size_t srcmap_bytes(const struct srcmap *m);

/* The map's `file` field, "" when absent. Borrowed from m. */
const char *srcmap_file(const struct srcmap *m);

/* Number of sources, names and segments. */
size_t srcmap_nsources(const struct srcmap *m);
size_t srcmap_nnames(const struct srcmap *m);
size_t srcmap_nsegments(const struct srcmap *m);

/* Source i as written, joined to sourceRoot; "" if i is out of range or
 * the source is null (or ""), which names no source. Borrowed from m. */
const char *srcmap_source(const struct srcmap *m, size_t i);

/*
 * srcmap_rebase_sources - rewrites every source that is a relative path
 * (no scheme, not starting with '/') as the normalized join of dir and
 * itself ("/app/dist" + "../src/a.ts" = "/app/src/a.ts", ".." stopping at
 * "/"); an absolute path is normalized; a "file://" source loses its
 * scheme, its percent-escapes are decoded (but %00 and %2F, which would
 * change what it names) and it is normalized ("file://localhost/" is this
 * host; another host part stays as a first directory); any other scheme (webpack://, http://)
 * stays as written; a null source stays null. dir: an absolute directory.
 * Returns 0, -ENOMEM or SRCMAP_E_TOOBIG when the map would pass its
 * max_bytes, m unchanged on either error. Not thread-safe: call it before
 * the map is shared.
 */
int srcmap_rebase_sources(struct srcmap *m, const char *dir);

/*
 * srcmap_path_norm - the join of dir and rel ("" for none) as one absolute
 * path into out (cap bytes, NUL-terminated): empty and "." parts dropped,
 * ".." taking one part off and never going above "/". Returns its length,
 * or 0 when it does not fit in cap. Pure string work: nothing is resolved
 * on disk.
 */
size_t srcmap_path_norm(const char *dir, const char *rel, char *out, size_t cap);

/* What a generated position maps to. Strings borrowed from the map. */
struct srcmap_pos {
    const char *source;  /* never NULL */
    const char *name;    /* the segment's names entry, NULL when it has none */
    uint32_t line;       /* original line, 0-based */
    uint32_t column;     /* original column, 0-based */
    uint32_t gen_column; /* the segment's generated column, 0-based */
};

/*
 * srcmap_lookup - the segment of generated line `line` (0-based) with the
 * greatest column <= `column` (0-based); of two at that column, the later
 * in the text. Returns 1 and fills *out when that segment exists and names
 * a source; 0 when the line has no segment at or before the column, or it
 * has no source (a 1-field segment, or a null source). Any thread.
 */
int srcmap_lookup(const struct srcmap *m, uint32_t line, uint32_t column, struct srcmap_pos *out);

/*
 * VLQ: decodes one base64 VLQ value at *s (before end) into *v and moves *s
 * past it. Returns 0, or SRCMAP_E_VLQ for a bad digit, a value cut by end
 * or a value that does not fit in 32 bits (signed). Exposed for the unit
 * test and the fuzz target.
 */
int srcmap_vlq(const char **s, const char *end, int32_t *v);

#endif

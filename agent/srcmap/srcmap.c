/*
 * srcmap.c - the source-map parser and lookups (see srcmap.h).
 *
 * The JSON streams through the push lexer of config/jsonlex.h, which hands
 * over only what its hooks ask for: the top-level fields a lookup needs
 * (version, file, sourceRoot, sources, names and the mappings text); every
 * other value (sourcesContent above all) is skipped by counting its
 * nesting, its strings dropped as they go by. Nothing is buffered whole
 * that is not kept: the mappings text grows in place as its bytes arrive,
 * checked against the cap as it grows, so a map too big for the cap is
 * refused before it takes more than the cap, whatever the size of the file
 * and however it is cut into chunks. (yajl, which the CDP replies go
 * through, buffers a string that spans two chunks whole and scans it again
 * from its start with each chunk: quadratic in the string's length for a
 * 60 MB mappings string.) Strings go into one arena, NUL-terminated, with
 * an offset table per array. The mappings text is kept as written and
 * decoded once at finish: that pass validates every segment and drops a
 * checkpoint (the decoder's running values) every SRCMAP_CHECK_EVERY
 * segments or SRCMAP_CHECK_BYTES bytes, so that a lookup decodes one short
 * stretch, whatever the shape of the map (one 5 MB line of a minified
 * bundle, or a million short lines).
 *
 * That search needs the columns of a line in order. A column may go back
 * (a negative delta is valid: the spec sorts the decoded mappings, and
 * ClojureScript emits such lines), so a line where one does is decoded
 * once more at finish, its segments sorted by column (stably: of two at
 * one column the later one wins, as on a sorted line) and kept beside the
 * text; a lookup on that line binary-searches them. Generators emit sorted
 * lines, so nearly every map pays nothing for this.
 *
 * Memory: every array grows by doubling while the map is parsed and is cut
 * to its length at finish. The cap is checked against the size the map
 * will have once cut, so that srcmap_bytes, which counts what is held,
 * never passes max_bytes, and the slack of the doubling is never charged.
 */
#include "srcmap.h"

#include "base.h"
#include "jsonlex.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The decoder's running values before a segment: the key of the segment
 * (line, col) and the previous values each field is a delta from. */
struct sm_check {
    uint32_t off;                   /* the segment's first byte in the mappings text */
    uint32_t line;                  /* its generated line */
    uint32_t col;                   /* its generated column (absolute) */
    int32_t pcol;                   /* the column of the segment before it on its line, or 0 */
    int32_t src, oline, ocol, name; /* the values before it */
};

/* A segment of a line whose columns go back, decoded. */
struct sm_useg {
    uint32_t col;
    int32_t src; /* -1: a 1-field segment */
    int32_t oline, ocol;
    int32_t name; /* -1: none */
};

/* Such a line: its segments are usegs[first .. first + n), by column. */
struct sm_uline {
    uint32_t line;
    uint32_t first, n;
};

/* A growable array of string offsets into the arena. */
struct sm_strs {
    uint32_t *off;
    size_t n, cap;
};

struct srcmap {
    size_t max_bytes;
    char *strs;                    /* NUL-terminated strings; offset 0 is "" */
    size_t strs_len;               /* bytes of strs */
    struct sm_strs sources, names; /* a source at offset 0 is null: no source */
    uint32_t file;                 /* offset in strs; 0 is "" */
    char *mappings;                /* the text, NUL-terminated */
    size_t mappings_len;
    struct sm_check *checks;
    size_t nchecks, checks_cap;
    struct sm_useg *usegs; /* the segments of the lines below, by column */
    size_t nusegs, usegs_cap;
    struct sm_uline *ulines; /* the lines whose columns go back, by line */
    size_t nulines, ulines_cap;
    size_t nsegments;
};

static int rewrite_sources(struct srcmap *m, const char *root, const char *dir);

enum sm_field { F_NONE, F_VERSION, F_FILE, F_ROOT, F_SOURCES, F_NAMES, F_MAPPINGS, F_SECTIONS };

/* Where the string being read goes: nowhere, the keep buffer (a name, a
 * source, file, sourceRoot), or the mappings text. */
enum sm_sink { SK_DROP, SK_KEEP, SK_MAPPINGS };
#define LX_MAX_DEPTH (SRCMAP_MAX_NESTING + 4)

struct srcmap_parser {
    struct jsonlex lx;
    uint8_t lx_stack[JSONLEX_STACK_BYTES(LX_MAX_DEPTH)];
    enum sm_sink sink;
    struct isoprof_buf keep;  /* a string kept (SK_KEEP) */
    size_t mappings_cap;      /* the mappings text's allocation (SK_MAPPINGS) */
    struct jsonlex_fail fail; /* sticky: the first reason and its message */
    size_t depth;             /* 0 outside the top object, 1 inside */
    enum sm_field field;      /* the top-level key whose value comes next */
    bool in_array;            /* inside sources[] or names[] (depth 2) */
    size_t skip;              /* nesting of a value being skipped */
    bool started, have_version, have_sources, have_mappings, have_file, have_root;
    char *root;               /* sourceRoot */
    struct isoprof_buf arena; /* the strings, until finish moves them to m */
    struct srcmap *m;
};

static const char *const reasons[SRCMAP_NREASONS] = {
    [SRCMAP_OK] = "ok",
    [SRCMAP_E_JSON] = "json",
    [SRCMAP_E_VERSION] = "version",
    [SRCMAP_E_FORMAT] = "format",
    [SRCMAP_E_VLQ] = "vlq",
    [SRCMAP_E_INDEX] = "index",
    [SRCMAP_E_SECTIONS] = "sections",
    [SRCMAP_E_TOOBIG] = "too_big",
    [SRCMAP_E_NOMEM] = "nomem",
    [SRCMAP_E_READ] = "read",
    [SRCMAP_E_OUTSIDE] = "outside",
    [SRCMAP_E_FILE_TOOBIG] = "file_too_big",
    [SRCMAP_E_DATA_URL] = "data_url",
    [SRCMAP_E_SCRIPT_OUTSIDE] = "script_outside",
    [SRCMAP_E_NOT_FILE] = "not_a_file",
    [SRCMAP_E_ALLOWANCE] = "cpu_allowance",
};

const char *srcmap_reason(int reason)
{
    if (reason < 0 || reason >= SRCMAP_NREASONS)
        return "unknown";
    return reasons[reason];
}

static int pfail(struct srcmap_parser *p, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int pfail(struct srcmap_parser *p, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jsonlex_fail_setv(&p->fail, err, fmt, ap);
    va_end(ap);
    return 0; /* stop */
}

/* Bytes the map holds, as srcmap_bytes counts them. */
static size_t map_bytes(const struct srcmap *m)
{
    return sizeof(*m) + m->strs_len + (m->sources.cap + m->names.cap) * sizeof(uint32_t) +
           (m->mappings ? m->mappings_len + 1 : 0) + m->checks_cap * sizeof(struct sm_check) +
           m->usegs_cap * sizeof(struct sm_useg) + m->ulines_cap * sizeof(struct sm_uline);
}

/* Bytes the map will hold once its arrays are cut to their lengths. */
static size_t map_need(const struct srcmap *m)
{
    return sizeof(*m) + m->strs_len + (m->sources.n + m->names.n) * sizeof(uint32_t) +
           (m->mappings ? m->mappings_len + 1 : 0) + m->nchecks * sizeof(struct sm_check) +
           m->nusegs * sizeof(struct sm_useg) + m->nulines * sizeof(struct sm_uline);
}

/* Whether `more` bytes would take the map past its cap. */
static bool over_budget(const struct srcmap_parser *p, size_t more)
{
    const struct srcmap *m = p->m;
    return m->max_bytes != 0 && map_need(m) + p->arena.len + more > m->max_bytes;
}

/* Room for element `len` of an array of elements of size sz (a, *cap of
 * them), charged to the budget. Returns the array, moved if it grew, or
 * NULL with p->fail.err set (a and *cap as they were). */
static void *grow(struct srcmap_parser *p, void *a, size_t *cap, size_t len, size_t sz,
                  const char *what)
{
    if (over_budget(p, sz)) {
        pfail(p, SRCMAP_E_TOOBIG, "the map's %s pass the memory cap (%zu bytes)", what,
              p->m->max_bytes);
        return NULL;
    }
    if (len < *cap)
        return a;
    size_t nc = *cap ? *cap * 2 : 16;
    void *n = isoprof_realloc(a, nc * sz);
    if (n == NULL) {
        pfail(p, SRCMAP_E_NOMEM, "out of memory");
        return NULL;
    }
    *cap = nc;
    return n;
}

/* a cut to len elements of size sz: returns the array (NULL for none),
 * *cap = len; or, if that fails, a as it was with *err = -ENOMEM. */
static void *trim(void *a, size_t *cap, size_t len, size_t sz, int *err)
{
    if (*cap == len)
        return a;
    if (len == 0) {
        isoprof_free(a);
        *cap = 0;
        return NULL;
    }
    void *n = isoprof_realloc(a, len * sz);
    if (n == NULL) {
        *err = -ENOMEM;
        return a;
    }
    *cap = len;
    return n;
}

/* Every array of m cut to its length: 0 or -ENOMEM. */
static int map_trim(struct srcmap *m)
{
    int err = 0;
    m->sources.off = trim(m->sources.off, &m->sources.cap, m->sources.n, sizeof(uint32_t), &err);
    m->names.off = trim(m->names.off, &m->names.cap, m->names.n, sizeof(uint32_t), &err);
    m->checks = trim(m->checks, &m->checks_cap, m->nchecks, sizeof(*m->checks), &err);
    m->usegs = trim(m->usegs, &m->usegs_cap, m->nusegs, sizeof(*m->usegs), &err);
    m->ulines = trim(m->ulines, &m->ulines_cap, m->nulines, sizeof(*m->ulines), &err);
    return err;
}

/* Appends s[0..n) to the arena, NUL-terminated, a NUL inside replaced by
 * '_' (names reach pprof, whose strings are C strings here). Returns its
 * offset, or 0 with p->fail.err set. Offset 0 is the arena's leading "". */
static uint32_t arena_add(struct srcmap_parser *p, const char *s, size_t n)
{
    struct isoprof_buf *a = &p->arena;
    if (over_budget(p, n + 1) || a->len + n + 1 > UINT32_MAX) {
        pfail(p, SRCMAP_E_TOOBIG, "the map's strings pass the memory cap (%zu bytes)",
              p->m->max_bytes);
        return 0;
    }
    size_t at = a->len;
    if (isoprof_buf_reserve(a, n + 1) != 0) {
        pfail(p, SRCMAP_E_NOMEM, "out of memory");
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        isoprof_buf_putc(a, s[i] == '\0' ? '_' : s[i]);
    isoprof_buf_putc(a, '\0');
    return (uint32_t)at;
}

/* The arena handed to the map, cut to its length: 0 or -ENOMEM. */
static int arena_take(struct srcmap_parser *p)
{
    char *s;
    size_t n;
    if (isoprof_buf_take(&p->arena, &s, &n) != 0)
        return -ENOMEM;
    char *t = isoprof_realloc(s, n);
    if (t == NULL) {
        isoprof_free(s);
        return -ENOMEM;
    }
    p->m->strs = t;
    p->m->strs_len = n;
    return 0;
}

/* Appends an offset to sources[] or names[]. Returns 1, or 0 with p->fail.err
 * set (stop). */
static int strs_push(struct srcmap_parser *p, struct sm_strs *a, uint32_t off)
{
    if (a->n >= SRCMAP_MAX_ENTRIES)
        return pfail(p, SRCMAP_E_TOOBIG, "more than %u entries in an array", SRCMAP_MAX_ENTRIES);
    uint32_t *n = grow(p, a->off, &a->cap, a->n, sizeof(*n), "arrays");
    if (n == NULL)
        return 0;
    a->off = n;
    a->off[a->n++] = off;
    return 1;
}

/* --- what the tokenizer hands over --- */

static const char *field_name(enum sm_field f)
{
    switch (f) {
    case F_VERSION:
        return "version";
    case F_FILE:
        return "file";
    case F_ROOT:
        return "sourceRoot";
    case F_SOURCES:
        return "sources";
    case F_NAMES:
        return "names";
    case F_MAPPINGS:
        return "mappings";
    default:
        return "?";
    }
}

/* A scalar or the start of a container, at the current place. kind: 's'
 * string, 'n' number, 'b' bool, 'z' null, '{' or '['. Returns 1 to go on,
 * 0 to stop (p->fail.err set). */
static int value(struct srcmap_parser *p, int kind, const char *s, size_t n)
{
    bool open = kind == '{' || kind == '[';
    if (p->skip) {
        if (open)
            p->skip++;
        return 1;
    }
    if (!p->started) {
        p->started = true;
        if (kind != '{')
            return pfail(p, SRCMAP_E_JSON, "the map is not a JSON object");
        p->depth = 1;
        return 1;
    }
    if (p->in_array) {
        /* an element of sources[] or names[] */
        struct sm_strs *a = p->field == F_SOURCES ? &p->m->sources : &p->m->names;
        /* a null source (or "") names nothing: offset 0 says so */
        if (p->field == F_SOURCES && (kind == 'z' || (kind == 's' && n == 0)))
            return strs_push(p, a, 0);
        if (kind != 's')
            return pfail(p, SRCMAP_E_FORMAT, "%s[%zu] is not a string", field_name(p->field), a->n);
        uint32_t off = arena_add(p, s, n);
        if (p->fail.err)
            return 0;
        return strs_push(p, a, off);
    }
    enum sm_field f = p->field;
    p->field = F_NONE;
    switch (f) {
    case F_NONE:
        if (open)
            p->skip = 1;
        return 1;
    case F_SECTIONS:
        return pfail(p, SRCMAP_E_SECTIONS, "an index map (sections): not supported");
    case F_VERSION: {
        if (kind != 'n')
            return pfail(p, SRCMAP_E_VERSION, "version is not a number");
        if (!(n == 1 && s[0] == '3'))
            return pfail(p, SRCMAP_E_VERSION, "version %.*s, not 3", (int)(n > 20 ? 20 : n), s);
        p->have_version = true;
        return 1;
    }
    case F_FILE:
    case F_ROOT:
        /* Written twice, like sources or mappings, is refused: the first
         * value would have been charged to the cap for nothing. */
        if (f == F_FILE ? p->have_file : p->have_root)
            return pfail(p, SRCMAP_E_FORMAT, "%s appears twice", field_name(f));
        if (f == F_FILE)
            p->have_file = true;
        else
            p->have_root = true;
        if (kind == 'z')
            return 1;
        if (kind != 's')
            return pfail(p, SRCMAP_E_FORMAT, "%s is not a string", field_name(f));
        if (f == F_FILE) {
            p->m->file = arena_add(p, s, n);
        } else {
            if ((p->root = isoprof_malloc(n + 2)) == NULL)
                return pfail(p, SRCMAP_E_NOMEM, "out of memory");
            memcpy(p->root, s, n);
            /* "src" + "a.ts" is "src/a.ts" */
            p->root[n] = '\0';
            if (n > 0 && s[n - 1] != '/')
                p->root[n++] = '/', p->root[n] = '\0';
            for (size_t i = 0; i < n; i++)
                if (p->root[i] == '\0')
                    p->root[i] = '_';
        }
        return p->fail.err ? 0 : 1;
    case F_SOURCES:
    case F_NAMES:
        if (kind != '[')
            return pfail(p, SRCMAP_E_FORMAT, "%s is not an array", field_name(f));
        if (f == F_SOURCES) {
            if (p->have_sources)
                return pfail(p, SRCMAP_E_FORMAT, "sources appears twice");
            p->have_sources = true;
        } else if (p->m->names.n) {
            return pfail(p, SRCMAP_E_FORMAT, "names appears twice");
        }
        p->field = f;
        p->in_array = true;
        p->depth = 2;
        return 1;
    case F_MAPPINGS: {
        if (kind != 's')
            return pfail(p, SRCMAP_E_FORMAT, "mappings is not a string");
        if (p->have_mappings)
            return pfail(p, SRCMAP_E_FORMAT, "mappings appears twice");
        struct srcmap *m = p->m;
        if (n >= UINT32_MAX || over_budget(p, n + 1))
            return pfail(p, SRCMAP_E_TOOBIG, "mappings (%zu bytes) pass the memory cap (%zu bytes)",
                         n, m->max_bytes);
        if ((m->mappings = isoprof_malloc(n + 1)) == NULL)
            return pfail(p, SRCMAP_E_NOMEM, "out of memory");
        memcpy(m->mappings, s, n);
        m->mappings[n] = '\0';
        m->mappings_len = n;
        p->have_mappings = true;
        return 1;
    }
    }
    return 1;
}

/* --- the lexer's hooks (config/jsonlex.h) --- */

static int lx_on_open(void *c, int kind)
{
    struct srcmap_parser *p = c;
    if (p->skip > SRCMAP_MAX_NESTING)
        return pfail(p, SRCMAP_E_FORMAT, "nesting deeper than %d", SRCMAP_MAX_NESTING);
    return value(p, kind, NULL, 0);
}

static int lx_on_key(void *c, const char *s, size_t n)
{
    struct srcmap_parser *p = c;
    if (p->skip || p->depth != 1)
        return 1;
#define KEY(lit, f)                                                                                \
    if (n == sizeof(lit) - 1 && memcmp(s, lit, n) == 0) {                                          \
        p->field = f;                                                                              \
        return 1;                                                                                  \
    }
    KEY("version", F_VERSION)
    KEY("file", F_FILE)
    KEY("sourceRoot", F_ROOT)
    KEY("sources", F_SOURCES)
    KEY("names", F_NAMES)
    KEY("mappings", F_MAPPINGS)
    KEY("sections", F_SECTIONS)
#undef KEY
    p->field = F_NONE;
    return 1;
}

static int lx_on_close(void *c, int kind)
{
    struct srcmap_parser *p = c;
    (void)kind;
    if (p->skip) {
        p->skip--;
        return 1;
    }
    if (p->in_array) {
        p->in_array = false;
        p->field = F_NONE;
        p->depth = 1;
        return 1;
    }
    p->depth = 0; /* the top object closed */
    return 1;
}

/* A string starts: a key goes to the lexer's buffer, a value where the
 * field it is the value of wants it. */
static int lx_on_string(void *c, bool key)
{
    struct srcmap_parser *p = c;
    p->sink = SK_DROP;
    if (key) {
        jsonlex_sink(&p->lx, JSONLEX_BUF, 0);
        return 1;
    }
    if (!p->started)
        return pfail(p, SRCMAP_E_JSON, "the map is not a JSON object");
    if (p->skip || (!p->in_array && p->field == F_NONE)) {
        p->field = F_NONE;
        return 1;
    }
    jsonlex_sink(&p->lx, JSONLEX_PUT, SIZE_MAX); /* the caps are checked as it grows */
    if (!p->in_array && p->field == F_MAPPINGS) {
        if (p->have_mappings)
            return pfail(p, SRCMAP_E_FORMAT, "mappings appears twice");
        p->field = F_NONE;
        p->sink = SK_MAPPINGS;
        p->mappings_cap = 0;
        p->m->mappings_len = 0;
        if (over_budget(p, 1))
            return pfail(p, SRCMAP_E_TOOBIG, "mappings pass the memory cap (%zu bytes)",
                         p->m->max_bytes);
        return 1;
    }
    p->sink = SK_KEEP;
    isoprof_buf_reset(&p->keep);
    return 1;
}

/* Bytes of a string kept, to where they go. */
static int lx_on_put(void *c, const char *s, size_t n)
{
    struct srcmap_parser *p = c;
    if (p->sink == SK_KEEP) {
        if (isoprof_buf_append(&p->keep, s, n) != 0)
            return p->keep.err == -ENOMEM
                       ? pfail(p, SRCMAP_E_NOMEM, "out of memory")
                       : pfail(p, SRCMAP_E_TOOBIG, "a string passes the memory cap (%zu bytes)",
                               p->m->max_bytes);
        return 1;
    }
    struct srcmap *m = p->m;
    if (m->mappings_len + n >= UINT32_MAX || over_budget(p, n))
        return pfail(p, SRCMAP_E_TOOBIG, "mappings pass the memory cap (%zu bytes) after %zu bytes",
                     m->max_bytes, m->mappings_len);
    if (m->mappings_len + n + 1 > p->mappings_cap) {
        /* a quarter more at a time: the slack is never more than that */
        size_t nc = p->mappings_cap + p->mappings_cap / 4 + 65536;
        if (nc < m->mappings_len + n + 1)
            nc = m->mappings_len + n + 1;
        char *t = isoprof_realloc(m->mappings, nc);
        if (t == NULL)
            return pfail(p, SRCMAP_E_NOMEM, "out of memory");
        m->mappings = t;
        p->mappings_cap = nc;
    }
    memcpy(m->mappings + m->mappings_len, s, n);
    m->mappings_len += n;
    return 1;
}

/* A scalar ended (for a string: the one its sink holds). */
static int lx_on_value(void *c, int kind, const char *s, size_t n)
{
    struct srcmap_parser *p = c;
    if (kind != 's')
        return value(p, kind, s, n);
    switch (p->sink) {
    case SK_MAPPINGS: {
        struct srcmap *m = p->m;
        if (m->mappings == NULL && (m->mappings = isoprof_malloc(1)) == NULL)
            return pfail(p, SRCMAP_E_NOMEM, "out of memory");
        m->mappings[m->mappings_len] = '\0';
        p->have_mappings = true;
        return 1;
    }
    case SK_KEEP:
        return value(p, 's', p->keep.len ? (const char *)p->keep.data : "", p->keep.len);
    case SK_DROP:
        return 1;
    }
    return 1;
}

static void lx_on_fail(void *c, enum jsonlex_err err, const char *what, uint64_t at)
{
    static const struct jsonlex_doc doc = {"the map", SRCMAP_E_JSON, SRCMAP_E_FORMAT};
    struct srcmap_parser *p = c;
    jsonlex_fail_lexer(&p->fail, &doc, &p->lx, err, what, at);
}

static const struct jsonlex_hooks lx_hooks = {
    .open = lx_on_open,
    .close = lx_on_close,
    .string = lx_on_string,
    .put = lx_on_put,
    .key = lx_on_key,
    .value = lx_on_value,
    .fail = lx_on_fail,
};

int srcmap_parser_new(size_t max_bytes, struct srcmap_parser **out)
{
    struct srcmap_parser *p = isoprof_calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    if ((p->m = isoprof_calloc(1, sizeof(*p->m))) == NULL)
        goto fail;
    p->m->max_bytes = max_bytes;
    isoprof_buf_init(&p->arena, UINT32_MAX);
    if (isoprof_buf_putc(&p->arena, '\0') != 0) /* offset 0: "" */
        goto fail;
    isoprof_buf_init(&p->keep, max_bytes ? max_bytes : SIZE_MAX);
    jsonlex_init(&p->lx, &lx_hooks, p, p->lx_stack, LX_MAX_DEPTH, 0);
    *out = p;
    return 0;
fail:
    srcmap_parser_free(p);
    return -ENOMEM;
}

void srcmap_parser_free(struct srcmap_parser *p)
{
    if (p == NULL)
        return;
    isoprof_buf_free(&p->keep);
    srcmap_free(p->m);
    isoprof_buf_free(&p->arena);
    isoprof_free(p->root);
    jsonlex_fail_free(&p->fail);
    isoprof_free(p);
}

int srcmap_parser_feed(struct srcmap_parser *p, const void *buf, size_t len)
{
    if (p->fail.err == 0) {
        size_t used = jsonlex_feed(&p->lx, buf, len);
        ISOPROF_ASSERT(used == len || p->fail.err != 0); /* no hook pauses */
    }
    return p->fail.err;
}

/* --- VLQ and the mappings --- */

/* The value of a base64 digit, -1 for any other byte. */
static int b64_digit(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

enum vlq_err { VLQ_OK, VLQ_DIGIT, VLQ_CUT, VLQ_RANGE };

/* srcmap_vlq's decoder, saying what is wrong: a bad digit (*s then points
 * at it), a value cut by end, or one past 32 bits (*s unchanged). */
static enum vlq_err vlq_decode(const char **s, const char *end, int32_t *v)
{
    const char *q = *s;
    uint64_t acc = 0;
    unsigned shift = 0;
    for (;;) {
        if (q >= end)
            return VLQ_CUT;
        int d = b64_digit((unsigned char)*q);
        if (d < 0) {
            *s = q;
            return VLQ_DIGIT;
        }
        q++;
        acc |= (uint64_t)(d & 31) << shift;
        if (acc > 0xffffffffull)
            return VLQ_RANGE;
        if (!(d & 32))
            break;
        shift += 5;
        if (shift > 31)
            return VLQ_RANGE;
    }
    uint32_t mag = (uint32_t)(acc >> 1); /* <= INT32_MAX: acc fits in 32 bits */
    *v = (acc & 1) ? -(int32_t)mag : (int32_t)mag;
    *s = q;
    return VLQ_OK;
}

int srcmap_vlq(const char **s, const char *end, int32_t *v)
{
    const char *q = *s;
    if (vlq_decode(&q, end, v) != VLQ_OK)
        return SRCMAP_E_VLQ;
    *s = q;
    return 0;
}

/* The decoder: its position in the text and its running values. */
struct sm_dec {
    const char *p, *end;
    uint32_t line;
    int32_t col, src, oline, ocol, name;
};

/* One decoded segment. */
struct sm_seg {
    uint32_t line, col;
    int nfields; /* 1, 4 or 5 */
    bool back;   /* its column is before the previous one's on the line */
    int32_t src, oline, ocol, name;
};

/* Where and why the mappings text is refused. */
struct sm_fault {
    int reason; /* SRCMAP_E_VLQ or SRCMAP_E_INDEX */
    size_t at;  /* byte offset in the text */
    char what[96];
};

static int fault(struct sm_fault *f, int reason, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fault(struct sm_fault *f, int reason, size_t at, const char *fmt, ...)
{
    f->reason = reason;
    f->at = at;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->what, sizeof(f->what), fmt, ap);
    va_end(ap);
    return -1;
}

/* Decodes the next segment, skipping ';' (a new line: the column restarts)
 * and ','. Returns 1 with *g, 0 at the end, or -1 with *f. */
/* Moves d past ';' (a new line: the column restarts) and ','. */
static void dec_skip(struct sm_dec *d)
{
    while (d->p < d->end && (*d->p == ';' || *d->p == ',')) {
        if (*d->p == ';') {
            d->line++;
            d->col = 0;
        }
        d->p++;
    }
}

static int dec_next(struct sm_dec *d, const struct srcmap *m, struct sm_seg *g, struct sm_fault *f)
{
    dec_skip(d);
    if (d->p >= d->end)
        return 0;
    const char *start = d->p;
    int32_t v[5];
    int n = 0;
    while (d->p < d->end && *d->p != ',' && *d->p != ';') {
        if (n == 5)
            return fault(f, SRCMAP_E_VLQ, (size_t)(d->p - m->mappings),
                         "a segment of more than 5 fields");
        const char *v0 = d->p;
        enum vlq_err e = vlq_decode(&d->p, d->end, &v[n]);
        if (e == VLQ_DIGIT) {
            unsigned char c = (unsigned char)*d->p;
            if (c == ',' || c == ';') /* after a continuation digit */
                return fault(f, SRCMAP_E_VLQ, (size_t)(v0 - m->mappings), "a VLQ value cut short");
            if (c > ' ' && c < 0x7f)
                return fault(f, SRCMAP_E_VLQ, (size_t)(d->p - m->mappings), "bad base64 digit '%c'",
                             c);
            return fault(f, SRCMAP_E_VLQ, (size_t)(d->p - m->mappings), "bad base64 digit 0x%02x",
                         c);
        }
        if (e != VLQ_OK)
            return fault(f, SRCMAP_E_VLQ, (size_t)(v0 - m->mappings), "%s",
                         e == VLQ_CUT ? "a VLQ value cut short" : "a VLQ value past 32 bits");
        n++;
    }
    size_t at = (size_t)(start - m->mappings);
    if (n != 1 && n != 4 && n != 5)
        return fault(f, SRCMAP_E_VLQ, at, "a segment of %d fields", n);
    int64_t col = (int64_t)d->col + v[0];
    if (col < 0)
        return fault(f, SRCMAP_E_VLQ, at, "a negative generated column");
    if (col > INT32_MAX)
        return fault(f, SRCMAP_E_VLQ, at, "a generated column past 2^31");
    d->col = (int32_t)col;
    g->line = d->line;
    g->col = (uint32_t)col;
    g->nfields = n;
    g->back = v[0] < 0;
    if (n >= 4) {
        int64_t src = (int64_t)d->src + v[1], ol = (int64_t)d->oline + v[2],
                oc = (int64_t)d->ocol + v[3];
        if (src < 0 || ol < 0 || oc < 0)
            return fault(f, SRCMAP_E_VLQ, at, "a negative %s",
                         src < 0  ? "source index"
                         : ol < 0 ? "original line"
                                  : "original column");
        if (src > INT32_MAX || ol > INT32_MAX || oc > INT32_MAX)
            return fault(f, SRCMAP_E_VLQ, at, "a source index or original position past 2^31");
        d->src = (int32_t)src;
        d->oline = (int32_t)ol;
        d->ocol = (int32_t)oc;
        if ((size_t)src >= m->sources.n)
            return fault(f, SRCMAP_E_INDEX, at, "source index %d past the end of sources (%zu)",
                         d->src, m->sources.n);
    }
    if (n == 5) {
        int64_t nm = (int64_t)d->name + v[4];
        if (nm < 0)
            return fault(f, SRCMAP_E_VLQ, at, "a negative name index");
        if (nm > INT32_MAX)
            return fault(f, SRCMAP_E_VLQ, at, "a name index past 2^31");
        d->name = (int32_t)nm;
        if ((size_t)nm >= m->names.n)
            return fault(f, SRCMAP_E_INDEX, at, "name index %d past the end of names (%zu)",
                         d->name, m->names.n);
    }
    g->src = d->src;
    g->oline = d->oline;
    g->ocol = d->ocol;
    g->name = n == 5 ? d->name : -1;
    return 1;
}

/* Sorts a[0..n) by column, keeping the text order of equal columns (merge
 * sort, bottom up). tmp: room for n. */
static void useg_sort(struct sm_useg *a, struct sm_useg *tmp, size_t n)
{
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = a[j].col < a[i].col ? a[j++] : a[i++];
            while (i < mid)
                tmp[k++] = a[i++];
            while (j < hi)
                tmp[k++] = a[j++];
        }
        memcpy(a, tmp, n * sizeof(*a));
    }
}

/* The line whose first segment the decoder state *start is at has a
 * column that goes back: its segments, decoded again, sorted and kept.
 * Returns 0 or p->fail.err. */
static int sort_line(struct srcmap_parser *p, const struct sm_dec *start)
{
    struct srcmap *m = p->m;
    struct sm_dec d = *start;
    size_t first = m->nusegs;
    struct sm_seg g;
    struct sm_fault f;
    while (dec_next(&d, m, &g, &f) == 1 && g.line == start->line) {
        struct sm_useg *u = grow(p, m->usegs, &m->usegs_cap, m->nusegs, sizeof(*u), "lines");
        if (u == NULL)
            return p->fail.err;
        m->usegs = u;
        u[m->nusegs++] = (struct sm_useg){
            .col = g.col,
            .src = g.nfields >= 4 ? g.src : -1,
            .oline = g.oline,
            .ocol = g.ocol,
            .name = g.name,
        };
    }
    size_t n = m->nusegs - first;
    struct sm_useg *tmp = isoprof_malloc(n * sizeof(*tmp));
    if (tmp == NULL)
        return pfail(p, SRCMAP_E_NOMEM, "out of memory"), p->fail.err;
    useg_sort(m->usegs + first, tmp, n);
    isoprof_free(tmp);
    struct sm_uline *ul = grow(p, m->ulines, &m->ulines_cap, m->nulines, sizeof(*ul), "lines");
    if (ul == NULL)
        return p->fail.err;
    m->ulines = ul;
    ul[m->nulines++] =
        (struct sm_uline){.line = start->line, .first = (uint32_t)first, .n = (uint32_t)n};
    return 0;
}

/* Decodes the whole text once: validates it, lays the checkpoints and
 * sorts the lines that need it. */
static int index_mappings(struct srcmap_parser *p)
{
    struct srcmap *m = p->m;
    struct sm_dec d = {.p = m->mappings, .end = m->mappings + m->mappings_len};
    struct sm_dec line_start = d; /* at the first segment of the current line */
    bool line_back = false;
    size_t since = SRCMAP_CHECK_EVERY;
    const char *last_check = m->mappings;
    for (;;) {
        /* separators first, so that the checkpoint points at the segment */
        dec_skip(&d);
        struct sm_dec before = d;
        struct sm_seg g;
        struct sm_fault f;
        int rc = dec_next(&d, m, &g, &f);
        if (rc < 0)
            return pfail(p, f.reason, "mappings: %s at byte %zu (generated line %u)", f.what, f.at,
                         d.line + 1),
                   p->fail.err;
        if (rc == 0 || g.line != line_start.line) {
            if (line_back && sort_line(p, &line_start) != 0)
                return p->fail.err;
            if (rc == 0)
                return 0;
            line_start = before;
            line_back = false;
        }
        line_back |= g.back;
        m->nsegments++;
        if (++since >= SRCMAP_CHECK_EVERY ||
            (size_t)(before.p - last_check) >= SRCMAP_CHECK_BYTES) {
            struct sm_check *c =
                grow(p, m->checks, &m->checks_cap, m->nchecks, sizeof(*c), "index");
            if (c == NULL)
                return p->fail.err;
            m->checks = c;
            c[m->nchecks++] = (struct sm_check){
                .off = (uint32_t)(before.p - m->mappings),
                .line = g.line,
                .col = g.col,
                .pcol = before.col,
                .src = before.src,
                .oline = before.oline,
                .ocol = before.ocol,
                .name = before.name,
            };
            since = 0;
            last_check = before.p;
        }
    }
}

int srcmap_parser_finish(struct srcmap_parser *p, struct srcmap **out, char **why)
{
    *out = NULL;
    if (why)
        *why = NULL;
    if (p->fail.err == 0 && !p->started && !jsonlex_busy(&p->lx))
        pfail(p, SRCMAP_E_JSON, "empty");
    if (p->fail.err == 0)
        jsonlex_finish(&p->lx); /* a number at the very end */
    if (p->fail.err == 0 && !jsonlex_done(&p->lx))
        pfail(p, SRCMAP_E_JSON, "malformed JSON: cut short after byte %" PRIu64,
              jsonlex_at(&p->lx));
    if (p->fail.err == 0 && p->m->mappings != NULL) {
        /* the text grew by doubling: cut to its length */
        char *t = isoprof_realloc(p->m->mappings, p->m->mappings_len + 1);
        if (t != NULL)
            p->m->mappings = t;
        else
            pfail(p, SRCMAP_E_NOMEM, "out of memory");
    }
    if (p->fail.err == 0 && !p->have_version)
        pfail(p, SRCMAP_E_VERSION, "no version");
    if (p->fail.err == 0 && (!p->have_mappings || !p->have_sources))
        pfail(p, SRCMAP_E_FORMAT, "no %s", p->have_mappings ? "sources" : "mappings");
    if (p->fail.err == 0 && arena_take(p) != 0)
        pfail(p, SRCMAP_E_NOMEM, "out of memory");
    if (p->fail.err == 0 && p->root && p->root[0]) {
        int rc = rewrite_sources(p->m, p->root, NULL);
        if (rc != 0)
            pfail(p, rc == -ENOMEM ? SRCMAP_E_NOMEM : SRCMAP_E_TOOBIG,
                  "the sources joined to sourceRoot pass the memory cap");
    }
    if (p->fail.err == 0)
        index_mappings(p);
    if (p->fail.err == 0 && map_trim(p->m) != 0)
        pfail(p, SRCMAP_E_NOMEM, "out of memory");
    if (p->fail.err == 0 && p->m->max_bytes != 0 && map_bytes(p->m) > p->m->max_bytes)
        pfail(p, SRCMAP_E_TOOBIG, "the map passes the memory cap (%zu bytes)", p->m->max_bytes);
    if (p->fail.err != 0) {
        if (why) {
            *why = jsonlex_fail_take(&p->fail);
        }
        return p->fail.err;
    }
    *out = p->m;
    p->m = NULL;
    p->fail.err = SRCMAP_E_FORMAT; /* spent */
    return 0;
}

int srcmap_parse(const void *json, size_t len, size_t max_bytes, struct srcmap **out, char **why)
{
    struct srcmap_parser *p;
    *out = NULL;
    if (why)
        *why = NULL;
    if (srcmap_parser_new(max_bytes, &p) != 0)
        return SRCMAP_E_NOMEM;
    srcmap_parser_feed(p, json, len);
    int rc = srcmap_parser_finish(p, out, why);
    srcmap_parser_free(p);
    return rc;
}

void srcmap_free(struct srcmap *m)
{
    if (m == NULL)
        return;
    isoprof_free(m->strs);
    isoprof_free(m->sources.off);
    isoprof_free(m->names.off);
    isoprof_free(m->mappings);
    isoprof_free(m->checks);
    isoprof_free(m->usegs);
    isoprof_free(m->ulines);
    isoprof_free(m);
}

size_t srcmap_bytes(const struct srcmap *m)
{
    return m ? map_bytes(m) : 0;
}

const char *srcmap_file(const struct srcmap *m)
{
    return m->strs + m->file;
}

size_t srcmap_nsources(const struct srcmap *m)
{
    return m->sources.n;
}

size_t srcmap_nnames(const struct srcmap *m)
{
    return m->names.n;
}

size_t srcmap_nsegments(const struct srcmap *m)
{
    return m->nsegments;
}

const char *srcmap_source(const struct srcmap *m, size_t i)
{
    if (i >= m->sources.n)
        return "";
    return m->strs + m->sources.off[i];
}

size_t srcmap_path_norm(const char *dir, const char *rel, char *out, size_t cap)
{
    size_t o = 0;
    const char *parts[2] = {dir, rel};
    if (cap < 2)
        return 0;
    for (int k = 0; k < 2; k++) {
        const char *s = parts[k];
        while (*s) {
            while (*s == '/')
                s++;
            const char *e = s;
            while (*e && *e != '/')
                e++;
            size_t n = (size_t)(e - s);
            if (n == 0 || (n == 1 && s[0] == '.')) {
                /* nothing */
            } else if (n == 2 && s[0] == '.' && s[1] == '.') {
                while (o > 0 && out[o - 1] != '/')
                    o--;
                if (o > 0)
                    o--;
            } else {
                if (o + 1 + n >= cap)
                    return 0;
                out[o++] = '/';
                memcpy(out + o, s, n);
                o += n;
            }
            s = e;
        }
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    return o;
}

/* Appends the normalized join of dir and rel to b (srcmap_path_norm). */
static void join_norm(struct isoprof_buf *b, const char *dir, const char *rel)
{
    size_t cap = strlen(dir) + strlen(rel) + 3; /* the join is never longer */
    if (isoprof_buf_reserve(b, cap) != 0)
        return; /* b's sticky error says so */
    b->len += srcmap_path_norm(dir, rel, (char *)b->data + b->len, cap);
}

/* Rewrites every source: relative ones prefixed with root (NULL: none)
 * or, when dir is not NULL, joined to dir and normalized. The strings are
 * laid out anew (the file, the names, then the sources), so the old
 * sources leave no garbage behind. Returns 0, -ENOMEM or SRCMAP_E_TOOBIG;
 * m is unchanged on failure. */
static int rewrite_sources(struct srcmap *m, const char *root, const char *dir)
{
    size_t ns = m->sources.n, nn = m->names.n;
    /* the new offsets: names, then sources, then the file */
    uint32_t *off = isoprof_calloc(nn + ns + 1, sizeof(*off));
    if (off == NULL)
        return -ENOMEM;
    struct isoprof_buf a;
    isoprof_buf_init(&a, UINT32_MAX);
    isoprof_buf_putc(&a, '\0');
    if (m->file) {
        off[nn + ns] = (uint32_t)a.len;
        isoprof_buf_append(&a, m->strs + m->file, strlen(m->strs + m->file) + 1);
    }
    for (size_t i = 0; i < nn; i++) {
        const char *s = m->strs + m->names.off[i];
        off[i] = (uint32_t)a.len;
        isoprof_buf_append(&a, s, strlen(s) + 1);
    }
    for (size_t i = 0; i < ns; i++) {
        const char *s = m->strs + m->sources.off[i];
        if (s[0] == '\0')
            continue; /* null: stays at 0, no source whatever the root or dir */
        off[nn + i] = (uint32_t)a.len;
        if (dir != NULL && strncmp(s, "file://", 7) == 0) {
            /* a file URL's path: percent-decoded (but for %00 and %2F,
             * which would change what the path names), "localhost" as
             * the host meaning this one */
            const char *u = s + 7;
            if (strncmp(u, "localhost/", 10) == 0)
                u += 9;
            size_t n = strlen(u);
            char *dec = isoprof_malloc(n + 1);
            if (dec == NULL) {
                a.err = -ENOMEM;
                break;
            }
            size_t o = 0;
            for (size_t k = 0; k < n; k++) {
                int hi, lo;
                if (u[k] == '%' && k + 2 < n &&
                    (hi = isoprof_hexval((unsigned char)u[k + 1])) >= 0 &&
                    (lo = isoprof_hexval((unsigned char)u[k + 2])) >= 0 && (hi << 4 | lo) != 0 &&
                    (hi << 4 | lo) != '/') {
                    dec[o++] = (char)(hi << 4 | lo);
                    k += 2;
                } else {
                    dec[o++] = u[k];
                }
            }
            dec[o] = '\0';
            join_norm(&a, "", dec);
            isoprof_free(dec);
        } else if (s[0] == '/') {
            if (dir != NULL)
                join_norm(&a, "", s);
            else
                isoprof_buf_puts(&a, s);
        } else {
            const char *colon = strchr(s, ':'), *slash = strchr(s, '/');
            if (colon && (slash == NULL || colon < slash)) {
                isoprof_buf_puts(&a, s); /* webpack://..., http://... */
            } else if (dir == NULL) {
                isoprof_buf_puts(&a, root);
                isoprof_buf_puts(&a, s);
            } else {
                join_norm(&a, dir, s);
            }
        }
        isoprof_buf_putc(&a, '\0');
    }
    int err = a.err;
    if (err == 0 && m->max_bytes != 0 && map_need(m) - m->strs_len + a.len > m->max_bytes)
        err = SRCMAP_E_TOOBIG;
    char *strs = NULL, *t = NULL;
    size_t len = 0;
    if (err == 0)
        err = isoprof_buf_take(&a, &strs, &len);
    if (err == 0 && (t = isoprof_realloc(strs, len)) == NULL)
        err = -ENOMEM;
    if (err != 0) {
        isoprof_buf_free(&a);
        isoprof_free(strs);
        isoprof_free(off);
        return err == -ENOMEM ? -ENOMEM : SRCMAP_E_TOOBIG;
    }
    isoprof_free(m->strs);
    m->strs = t;
    m->strs_len = len;
    if (m->file)
        m->file = off[nn + ns];
    if (nn)
        memcpy(m->names.off, off, nn * sizeof(*off));
    if (ns)
        memcpy(m->sources.off, off + nn, ns * sizeof(*off));
    isoprof_free(off);
    return 0;
}

int srcmap_rebase_sources(struct srcmap *m, const char *dir)
{
    return rewrite_sources(m, NULL, dir);
}

/* Fills *out from a segment's values; 0 if its source is null. */
static int pos_fill(const struct srcmap *m, int32_t src, int32_t oline, int32_t ocol, int32_t name,
                    uint32_t gcol, struct srcmap_pos *out)
{
    uint32_t off = m->sources.off[src];
    if (off == 0)
        return 0;
    out->source = m->strs + off;
    out->name = name >= 0 ? m->strs + m->names.off[name] : NULL;
    out->line = (uint32_t)oline;
    out->column = (uint32_t)ocol;
    out->gen_column = gcol;
    return 1;
}

/* A lookup on a line whose columns go back: its sorted segments, or NULL
 * when the line is in order. */
static const struct sm_uline *find_uline(const struct srcmap *m, uint32_t line)
{
    size_t lo = 0, hi = m->nulines;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->ulines[mid].line < line)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->nulines && m->ulines[lo].line == line ? &m->ulines[lo] : NULL;
}

int srcmap_lookup(const struct srcmap *m, uint32_t line, uint32_t column, struct srcmap_pos *out)
{
    const struct sm_uline *u = m->nulines ? find_uline(m, line) : NULL;
    if (u != NULL) {
        /* the first segment past column; the one before it is the answer */
        size_t lo = u->first, hi = (size_t)u->first + u->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (m->usegs[mid].col <= column)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == u->first)
            return 0;
        const struct sm_useg *s = &m->usegs[lo - 1];
        if (s->src < 0)
            return 0;
        return pos_fill(m, s->src, s->oline, s->ocol, s->name, s->col, out);
    }
    /* the last checkpoint at or before (line, column) */
    size_t lo = 0, hi = m->nchecks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct sm_check *c = &m->checks[mid];
        if (c->line < line || (c->line == line && c->col <= column))
            lo = mid + 1;
        else
            hi = mid;
    }
    struct sm_dec d = {.p = m->mappings, .end = m->mappings + m->mappings_len};
    if (lo > 0) {
        const struct sm_check *c = &m->checks[lo - 1];
        d.p = m->mappings + c->off;
        d.line = c->line;
        d.col = c->pcol;
        d.src = c->src;
        d.oline = c->oline;
        d.ocol = c->ocol;
        d.name = c->name;
    }
    struct sm_seg best = {.nfields = 0};
    bool found = false;
    for (;;) {
        struct sm_seg g;
        struct sm_fault f;
        if (dec_next(&d, m, &g, &f) != 1)
            break;
        if (g.line > line || (g.line == line && g.col > column))
            break;
        if (g.line == line) {
            best = g;
            found = true;
        }
    }
    if (!found || best.nfields < 4)
        return 0;
    return pos_fill(m, best.src, best.oline, best.ocol, best.name, best.col, out);
}

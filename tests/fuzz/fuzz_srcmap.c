/*
 * fuzz_srcmap - libFuzzer target for agent/srcmap/srcmap.h: the source-map
 * parser (a map is whatever file a target's tree holds, or a data: URL in
 * its script), the lookups, the rebasing of sources, and the VLQ decoder.
 *
 * The whole input is a map. It is parsed whole, and fed in two chunks cut
 * at a place taken from its first bytes: both must give the same reason,
 * and for an accepted map the same size, segments and lookups. An accepted
 * map must be refused (too_big) with a cap one byte under its size and
 * accepted with its size as the cap. It is looked up at positions taken
 * from the input, each answer checked against the contract (a lookup at
 * the found segment's own column finds it again), then rebased on a
 * directory: every source is then null, absolute and normalized, or a URL
 * left as written. The input is also decoded as a run of VLQ values.
 */
#include "base.h"
#include "srcmap.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        abort();
}

static int parse(const uint8_t *data, size_t size, size_t cut, size_t max, struct srcmap **m)
{
    char *why = NULL;
    int rc;
    if (cut > size) {
        rc = srcmap_parse(data, size, max, m, &why);
    } else {
        struct srcmap_parser *p;
        check(srcmap_parser_new(max, &p) == 0);
        int r1 = srcmap_parser_feed(p, data, cut);
        int r2 = srcmap_parser_feed(p, data + cut, size - cut);
        check(r1 == 0 || r2 == r1); /* an error sticks */
        rc = srcmap_parser_finish(p, m, &why);
        check(r2 == 0 || rc == r2);
        srcmap_parser_free(p);
    }
    check(rc >= SRCMAP_OK && rc <= SRCMAP_E_NOMEM); /* the parser's reasons only */
    check((rc == 0) == (*m != NULL));
    check(rc == 0 ? why == NULL : why != NULL); /* every refusal says why */
    check(strcmp(srcmap_reason(rc), "unknown") != 0);
    isoprof_free(why);
    return rc;
}

static int same_pos(int x, const struct srcmap_pos *a, int y, const struct srcmap_pos *b)
{
    if (x != y)
        return 0;
    return x == 0 || (strcmp(a->source, b->source) == 0 && a->line == b->line &&
                      a->column == b->column && a->gen_column == b->gen_column &&
                      (a->name == NULL) == (b->name == NULL) &&
                      (a->name == NULL || strcmp(a->name, b->name) == 0));
}

/* A lookup, checked against the contract; the answer in *out. */
static int lookup(const struct srcmap *m, uint32_t line, uint32_t col, struct srcmap_pos *out)
{
    memset(out, 0, sizeof(*out));
    int r = srcmap_lookup(m, line, col, out);
    check(r == 0 || r == 1);
    if (r == 1) {
        check(out->source != NULL && out->source[0] != '\0');
        check(out->gen_column <= col);
        /* at the segment's own column, the same segment */
        struct srcmap_pos again;
        check(same_pos(srcmap_lookup(m, line, out->gen_column, &again), &again, 1, out));
    }
    return r;
}

/* A source after srcmap_rebase_sources: null, a URL as written, or an
 * absolute path without empty, "." or ".." parts. */
static void check_rebased(const char *s)
{
    if (s[0] == '\0')
        return;
    if (s[0] != '/') {
        const char *colon = strchr(s, ':'), *slash = strchr(s, '/');
        check(colon != NULL && (slash == NULL || colon < slash));
        return;
    }
    if (s[1] == '\0')
        return; /* "/" */
    for (const char *p = s; *p; p++) {
        if (*p != '/')
            continue;
        const char *e = strchr(p + 1, '/');
        size_t n = e ? (size_t)(e - p - 1) : strlen(p + 1);
        check(n != 0 && !(n == 1 && p[1] == '.') && !(n == 2 && p[1] == '.' && p[2] == '.'));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the VLQ decoder on the raw bytes: each call moves on or refuses */
    const char *s = (const char *)data, *end = s + size;
    while (s < end) {
        const char *before = s;
        int32_t v;
        if (srcmap_vlq(&s, end, &v) == 0) {
            check(s > before && s - before <= 7);
        } else {
            check(s == before);
            s++;
        }
    }

    size_t cut = size >= 2 ? ((size_t)data[0] | (size_t)data[1] << 8) % (size + 1) : 0;
    struct srcmap *m, *c;
    int rc = parse(data, size, SIZE_MAX, 0, &m);
    int rc2 = parse(data, size, cut, 0, &c);
    check(rc == rc2);
    if (rc != 0)
        return 0;

    size_t bytes = srcmap_bytes(m);
    check(bytes == srcmap_bytes(c));
    check(srcmap_nsegments(m) == srcmap_nsegments(c));
    check(srcmap_nsources(m) == srcmap_nsources(c));
    check(srcmap_nnames(m) == srcmap_nnames(c));
    check(strcmp(srcmap_file(m), srcmap_file(c)) == 0);
    for (size_t i = 0; i <= srcmap_nsources(m); i++)
        check(strcmp(srcmap_source(m, i), srcmap_source(c, i)) == 0);

    /* the cap: accepted iff the compact form fits */
    struct srcmap *t;
    check(parse(data, size, SIZE_MAX, bytes, &t) == 0 && srcmap_bytes(t) == bytes);
    srcmap_free(t);
    check(parse(data, size, cut, bytes - 1, &t) == SRCMAP_E_TOOBIG);

    /* lookups at positions from the input, on both maps */
    uint32_t pos[16][2] = {{0, 0}, {0, UINT32_MAX}, {1, 0}, {UINT32_MAX, 0}};
    for (size_t k = 4; k < 16; k++) {
        size_t at = (k * 131) % size;
        uint32_t a = data[at], b = data[(at + 1) % size], d = data[(at + 2) % size];
        pos[k][0] = a % 8;
        pos[k][1] = (b << 8 | d) % 512;
    }
    struct srcmap_pos before[16];
    int found[16];
    for (size_t k = 0; k < 16; k++) {
        struct srcmap_pos q;
        found[k] = lookup(m, pos[k][0], pos[k][1], &before[k]);
        check(same_pos(found[k], &before[k], lookup(c, pos[k][0], pos[k][1], &q), &q));
    }
    srcmap_free(c);

    /* rebased: the same segments, the sources absolute */
    check(srcmap_rebase_sources(m, "/app/dist") == 0);
    check(srcmap_bytes(m) > 0);
    for (size_t i = 0; i < srcmap_nsources(m); i++)
        check_rebased(srcmap_source(m, i));
    for (size_t k = 0; k < 16; k++) {
        struct srcmap_pos q;
        int r = lookup(m, pos[k][0], pos[k][1], &q);
        check(r == found[k]);
        if (r)
            check(q.line == before[k].line && q.column == before[k].column &&
                  q.gen_column == before[k].gen_column);
    }
    srcmap_free(m);
    return 0;
}

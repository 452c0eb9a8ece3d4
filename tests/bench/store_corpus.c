/*
 * store_corpus.c - load the benchmark corpus (every window of a store) into
 * memory, and size a buffer gzip'd the way pprof is uploaded.
 */
#include "store_corpus.h"

#include "base.h"
#include "store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

struct load_ctx {
    struct store *s;
    struct corpus *c;
    size_t cap;
    int rc;
};

static int load_on_window(const struct store_window *w, void *arg)
{
    struct load_ctx *l = arg;
    struct corpus *c = l->c;
    if (c->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        struct corpus_win *nw = isoprof_realloc(c->w, cap * sizeof(*nw));
        if (nw == NULL)
            return l->rc = -ENOMEM;
        c->w = nw;
        l->cap = cap;
    }
    struct corpus_win *cw = &c->w[c->n];
    memset(cw, 0, sizeof(*cw));
    snprintf(cw->worker, sizeof(cw->worker), "%s", w->worker);
    snprintf(cw->runtime, sizeof(cw->runtime), "%s", w->runtime);
    cw->type = w->type;
    cw->start_ns = w->start_ns;
    cw->samples = w->samples;
    cw->interval = w->interval;
    void *p;
    size_t len;
    int rc = store_load(l->s, w->id, &p, &len);
    if (rc != 0)
        return l->rc = rc;
    if (len == 0) { /* an empty window tells nothing about compression */
        isoprof_free(p);
        return 0;
    }
    cw->pprof = p;
    cw->len = len;
    cw->gzip6 = corpus_gzip_size(p, len, 6);
    c->n++;
    return 0;
}

static int cmp_win(const void *a, const void *b)
{
    const struct corpus_win *x = a, *y = b;
    int r = strcmp(x->worker, y->worker);
    if (r != 0)
        return r;
    return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

int corpus_load(const char *dir, struct corpus *c)
{
    memset(c, 0, sizeof(*c));
    struct store_options o = {.readonly = 1};
    struct load_ctx l = {.c = c};
    int rc = store_open(dir, &o, &l.s, NULL);
    if (rc != 0)
        return rc;
    rc = store_windows(l.s, NULL, load_on_window, &l);
    store_close(l.s);
    if (rc != 0 || l.rc != 0) {
        corpus_free(c);
        return l.rc ? l.rc : rc;
    }
    qsort(c->w, c->n, sizeof(*c->w), cmp_win);
    c->workers = isoprof_calloc(c->n ? c->n : 1, sizeof(*c->workers));
    if (c->workers == NULL) {
        corpus_free(c);
        return -ENOMEM;
    }
    for (size_t i = 0; i < c->n; i++) {
        if (c->nworkers == 0 || strcmp(c->workers[c->nworkers - 1], c->w[i].worker) != 0)
            snprintf(c->workers[c->nworkers++], sizeof(c->workers[0]), "%s", c->w[i].worker);
        c->w[i].worker_idx = (unsigned)(c->nworkers - 1);
    }
    return c->n ? 0 : ISOPROF_ENOTFOUND;
}

void corpus_free(struct corpus *c)
{
    for (size_t i = 0; i < c->n; i++)
        isoprof_free(c->w[i].pprof);
    isoprof_free(c->w);
    isoprof_free(c->workers);
    memset(c, 0, sizeof(*c));
}

size_t corpus_gzip_size(const uint8_t *buf, size_t len, int level)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return 0;
    size_t cap = deflateBound(&z, (uLong)len);
    uint8_t *out = isoprof_malloc(cap);
    size_t n = 0;
    if (out != NULL) {
        z.next_in = (Bytef *)buf;
        z.avail_in = (uInt)len;
        z.next_out = out;
        z.avail_out = (uInt)cap;
        if (deflate(&z, Z_FINISH) == Z_STREAM_END)
            n = z.total_out;
        isoprof_free(out);
    }
    deflateEnd(&z);
    return n;
}

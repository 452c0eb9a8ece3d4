/*
 * store_codec - how small each codec makes real profile windows, and what
 * it costs to compress them.
 *
 *   store_codec [--reps R] STORE_DIR
 *
 * Reads every window of the store in STORE_DIR (a corpus isoprofd captured
 * from real workloads) and, per window, compresses its pprof with gzip
 * (zlib level 6, gzip wrapper: what Go and Node agents upload), zstd at
 * levels 1/3/6/9/19 (checksum and content size on, as the store writes
 * frames), zstd 3 in long mode, and zstd 3 with a per-worker dictionary:
 * one trained with ZDICT_trainFromBuffer, and one made of raw window bytes
 * (the worker's most recent training windows, concatenated). Dictionaries
 * are built from the first 60 % of each worker's windows (in start order)
 * and every codec is measured on the rest only, so no codec sees
 * the windows it is scored on. Dictionary frames carry no dictionary id
 * (the store would record which dictionary in the record header).
 *
 * Prints one JSON object: the corpus, and per codec the mean compressed
 * bytes (all, cpu, heap) and the wall time per window (best of R passes;
 * noisy on shared machines). Each codec runs in its own function
 * (codec_*) so that callgrind's inclusive count per function gives a
 * stable instruction count per window: run it with --reps 1 under
 * valgrind --tool=callgrind and divide by eval_windows.
 */
#include "store_corpus.h"

#include "base.h"
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define ZSTD_STATIC_LINKING_ONLY  /* raw-content dictionaries */
#define ZDICT_STATIC_LINKING_ONLY /* fastCover parameters */
#include <zdict.h>
#include <zstd.h>

#define DICT_CAP (16u * 1024)
#define RAW_DICT_CAP (32u * 1024)
#define RECORD_HEADER 88u

struct wdict {
    ZSTD_CDict *trained, *raw;
    ZSTD_DDict *trained_d, *raw_d;
    size_t trained_len, raw_len;
    double train_ms;
};

static ZSTD_CCtx *cctx;
static ZSTD_DCtx *dctx;
static uint8_t *out;
static size_t out_cap;

static size_t zstd_with(int level, int long_mode, const ZSTD_CDict *cd, const uint8_t *p, size_t n)
{
    ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_dictIDFlag, 0);
    if (long_mode)
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_enableLongDistanceMatching, 1);
    if (cd)
        ZSTD_CCtx_refCDict(cctx, cd);
    size_t got = ZSTD_compress2(cctx, out, out_cap, p, n);
    if (ZSTD_isError(got)) {
        fprintf(stderr, "store_codec: zstd: %s\n", ZSTD_getErrorName(got));
        exit(1);
    }
    return got;
}

/* One function per codec, kept out of line so callgrind counts each. */
#define CODEC_FN(name, body)                                                                       \
    __attribute__((noinline)) static size_t name(const uint8_t *p, size_t n,                       \
                                                 const struct wdict *d)                            \
    {                                                                                              \
        (void)d;                                                                                   \
        body;                                                                                      \
    }
CODEC_FN(codec_gzip6, return corpus_gzip_size(p, n, 6))
CODEC_FN(codec_zstd1, return zstd_with(1, 0, NULL, p, n))
CODEC_FN(codec_zstd3, return zstd_with(3, 0, NULL, p, n))
CODEC_FN(codec_zstd6, return zstd_with(6, 0, NULL, p, n))
CODEC_FN(codec_zstd9, return zstd_with(9, 0, NULL, p, n))
CODEC_FN(codec_zstd19, return zstd_with(19, 0, NULL, p, n))
CODEC_FN(codec_zstd3_long, return zstd_with(3, 1, NULL, p, n))
CODEC_FN(codec_zstd3_dict, return d->trained ? zstd_with(3, 0, d->trained, p, n) : 0)
CODEC_FN(codec_zstd3_rawdict, return d->raw ? zstd_with(3, 0, d->raw, p, n) : 0)

struct codec {
    const char *name, *fn;
    size_t (*f)(const uint8_t *, size_t, const struct wdict *);
    int dict; /* 1 trained, 2 raw */
    double sum, sum_cpu, sum_heap, best_s;
    size_t n, n_cpu, n_heap;
    size_t no_dict; /* windows of workers left without a dictionary (sized as zstd 3) */
};

#define CODEC(n, fun, d)                                                                           \
    {                                                                                              \
        .name = n, .fn = #fun, .f = fun, .dict = d                                                 \
    }
static struct codec codecs[] = {
    CODEC("gzip level 6 (zlib)", codec_gzip6, 0),
    CODEC("zstd 1", codec_zstd1, 0),
    CODEC("zstd 3 (the store)", codec_zstd3, 0),
    CODEC("zstd 6", codec_zstd6, 0),
    CODEC("zstd 9", codec_zstd9, 0),
    CODEC("zstd 19", codec_zstd19, 0),
    CODEC("zstd 3 long mode", codec_zstd3_long, 0),
    CODEC("zstd 3 + trained dict (16 KiB/worker)", codec_zstd3_dict, 1),
    CODEC("zstd 3 + raw-window dict (32 KiB/worker)", codec_zstd3_rawdict, 2),
};

/* Windows [lo, end) train a worker's dictionaries, [end, hi) score the
 * codecs: the first TRAIN_SHARE of them in start order. */
#define TRAIN_SHARE 0.6
static size_t train_end(size_t lo, size_t hi)
{
    size_t t = lo + (size_t)((double)(hi - lo) * TRAIN_SHARE);
    return t >= hi && hi > lo ? hi - 1 : t;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* The dictionaries of worker w from its training windows [lo, mid). */
static void build_dicts(const struct corpus *c, size_t lo, size_t mid, struct wdict *d)
{
    memset(d, 0, sizeof(*d));
    size_t total = 0, n = mid - lo;
    for (size_t i = lo; i < mid; i++)
        total += c->w[i].len;
    if (n == 0)
        return;
    uint8_t *samples = isoprof_malloc(total);
    size_t *sizes = isoprof_calloc(n, sizeof(*sizes));
    uint8_t *buf = isoprof_malloc(DICT_CAP);
    if (samples == NULL || sizes == NULL || buf == NULL)
        exit(1);
    size_t o = 0;
    for (size_t i = lo; i < mid; i++) {
        memcpy(samples + o, c->w[i].pprof, c->w[i].len);
        sizes[i - lo] = c->w[i].len;
        o += c->w[i].len;
    }
    double t = (double)isoprof_now_mono_ns();
    /* fastCover with its parameter search, but scored on the training set
     * itself (splitPoint 1): a worker's first minutes give only a handful
     * of windows, and the default split needs more. */
    ZDICT_fastCover_params_t fp;
    memset(&fp, 0, sizeof(fp));
    fp.d = 8;
    fp.steps = 4;
    fp.splitPoint = 1.0;
    fp.zParams.compressionLevel = 3;
    size_t dl =
        ZDICT_optimizeTrainFromBuffer_fastCover(buf, DICT_CAP, samples, sizes, (unsigned)n, &fp);
    d->train_ms = ((double)isoprof_now_mono_ns() - t) / 1e6;
    if (!ZDICT_isError(dl)) {
        d->trained = ZSTD_createCDict(buf, dl, 3);
        d->trained_d = ZSTD_createDDict(buf, dl);
        d->trained_len = dl;
    } else {
        fprintf(stderr, "store_codec: %s: training on %zu windows (%zu bytes): %s\n",
                c->w[lo].worker, n, total, ZDICT_getErrorName(dl));
    }
    /* Raw dictionary: the newest training windows, newest last (closest
     * to the end, where zstd finds matches cheapest). */
    size_t take = total > RAW_DICT_CAP ? RAW_DICT_CAP : total;
    const uint8_t *raw = samples + (total - take);
    d->raw = ZSTD_createCDict_advanced(raw, take, ZSTD_dlm_byCopy, ZSTD_dct_rawContent,
                                       ZSTD_getCParams(3, 0, take), ZSTD_defaultCMem);
    d->raw_d = ZSTD_createDDict_advanced(raw, take, ZSTD_dlm_byCopy, ZSTD_dct_rawContent,
                                         ZSTD_defaultCMem);
    d->raw_len = take;
    isoprof_free(samples);
    isoprof_free(sizes);
    isoprof_free(buf);
}

static void free_dicts(struct wdict *d)
{
    ZSTD_freeCDict(d->trained);
    ZSTD_freeCDict(d->raw);
    ZSTD_freeDDict(d->trained_d);
    ZSTD_freeDDict(d->raw_d);
}

/* Inflate what the dictionary codecs made, so a size is never the size of
 * something unreadable. */
static void verify(const struct codec *k, const struct wdict *d, const struct corpus_win *w,
                   size_t clen)
{
    const ZSTD_DDict *dd = k->dict == 1 ? d->trained_d : k->dict == 2 ? d->raw_d : NULL;
    if (k->dict == 0 || clen == 0)
        return;
    uint8_t *back = isoprof_malloc(w->len);
    if (back == NULL)
        exit(1);
    size_t got = ZSTD_decompress_usingDDict(dctx, back, w->len, out, clen, dd);
    if (ZSTD_isError(got) || got != w->len || memcmp(back, w->pprof, w->len) != 0) {
        fprintf(stderr, "store_codec: %s does not round-trip\n", k->name);
        exit(1);
    }
    isoprof_free(back);
}

int main(int argc, char **argv)
{
    int reps = 3;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = (int)strtol(argv[++i], NULL, 10);
        else
            dir = argv[i];
    }
    if (dir == NULL || reps < 1) {
        fprintf(stderr, "usage: store_codec [--reps R] STORE_DIR\n");
        return 2;
    }
    struct corpus c;
    int rc = corpus_load(dir, &c);
    if (rc != 0) {
        fprintf(stderr, "store_codec: %s: %s\n", dir, isoprof_strerror(rc));
        return 1;
    }
    cctx = ZSTD_createCCtx();
    dctx = ZSTD_createDCtx();
    size_t maxlen = 0;
    for (size_t i = 0; i < c.n; i++)
        if (c.w[i].len > maxlen)
            maxlen = c.w[i].len;
    out_cap = ZSTD_compressBound(maxlen) + 1024;
    out = isoprof_malloc(out_cap);
    struct wdict *dicts = isoprof_calloc(c.nworkers, sizeof(*dicts));
    size_t *lo = isoprof_calloc(c.nworkers + 1, sizeof(*lo));
    size_t *raws = isoprof_calloc(c.n, sizeof(*raws));
    if (cctx == NULL || dctx == NULL || out == NULL || dicts == NULL || lo == NULL || raws == NULL)
        return 1;
    /* Worker w's windows are [lo[w], lo[w+1]); train on the first half. */
    for (size_t i = 0, w = 0; i < c.n; i++)
        if (i == 0 || c.w[i].worker_idx != c.w[i - 1].worker_idx)
            lo[w++] = i;
    lo[c.nworkers] = c.n;
    size_t ncpu = 0, nheap = 0, eval_n = 0;
    double raw_sum = 0, gz_all = 0;
    for (size_t i = 0; i < c.n; i++) {
        raws[i] = c.w[i].len;
        raw_sum += (double)c.w[i].len;
        gz_all += (double)c.w[i].gzip6;
        if (c.w[i].type == STORE_TYPE_CPU)
            ncpu++;
        else
            nheap++;
    }
    for (size_t w = 0; w < c.nworkers; w++) {
        size_t mid = train_end(lo[w], lo[w + 1]);
        build_dicts(&c, lo[w], mid, &dicts[w]);
    }
    for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(codecs); k++)
        codecs[k].best_s = 1e30;
    for (int r = 0; r < reps; r++) {
        for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(codecs); k++) {
            struct codec *cd = &codecs[k];
            double t = (double)isoprof_now_mono_ns();
            size_t n = 0;
            for (size_t w = 0; w < c.nworkers; w++) {
                size_t mid = train_end(lo[w], lo[w + 1]);
                for (size_t i = mid; i < lo[w + 1]; i++) {
                    size_t got = cd->f(c.w[i].pprof, c.w[i].len, &dicts[w]);
                    n++;
                    if (r > 0)
                        continue;
                    verify(cd, &dicts[w], &c.w[i], got);
                    if (got == 0) { /* no dictionary for this worker: count zstd 3 */
                        got = codec_zstd3(c.w[i].pprof, c.w[i].len, NULL);
                        cd->no_dict++;
                    }
                    cd->sum += (double)got;
                    cd->n++;
                    if (c.w[i].type == STORE_TYPE_CPU) {
                        cd->sum_cpu += (double)got;
                        cd->n_cpu++;
                    } else {
                        cd->sum_heap += (double)got;
                        cd->n_heap++;
                    }
                }
            }
            double el = ((double)isoprof_now_mono_ns() - t) / 1e9;
            if (el < cd->best_s)
                cd->best_s = el;
            eval_n = n;
        }
    }
    qsort(raws, c.n, sizeof(*raws), cmp_size);
    double eval_raw = 0;
    for (size_t w = 0; w < c.nworkers; w++)
        for (size_t i = train_end(lo[w], lo[w + 1]); i < lo[w + 1]; i++)
            eval_raw += (double)c.w[i].len;

    printf("{\"windows\": %zu, \"cpu\": %zu, \"heap\": %zu, \"workers\": %zu, "
           "\"eval_windows\": %zu, \"header_bytes\": %u, \"dict_train_share\": %.2f,\n",
           c.n, ncpu, nheap, c.nworkers, eval_n, RECORD_HEADER + 4u /* + "node" */, TRAIN_SHARE);
    printf(" \"summary\": {\"raw_mean\": %.1f, \"raw_median\": %zu, \"raw_max\": %zu, "
           "\"gzip6_mean_all\": %.1f, \"raw_mean_eval\": %.1f, \"gzip6_mean\": %.1f},\n",
           raw_sum / (double)c.n, raws[c.n / 2], raws[c.n - 1], gz_all / (double)c.n,
           eval_raw / (double)eval_n, codecs[0].sum / (double)codecs[0].n);
    printf(" \"per_worker\": [");
    for (size_t w = 0; w < c.nworkers; w++) {
        double r = 0, g = 0;
        for (size_t i = lo[w]; i < lo[w + 1]; i++) {
            r += (double)c.w[i].len;
            g += (double)c.w[i].gzip6;
        }
        size_t nw = lo[w + 1] - lo[w];
        printf("%s{\"worker\": \"%s\", \"windows\": %zu, \"raw_mean\": %.1f, \"gzip6_mean\": %.1f, "
               "\"dict_bytes\": %zu, \"raw_dict_bytes\": %zu, \"train_ms\": %.2f}",
               w ? ", " : "", c.workers[w], nw, r / (double)nw, g / (double)nw,
               dicts[w].trained_len, dicts[w].raw_len, dicts[w].train_ms);
    }
    printf("],\n \"codecs\": [\n");
    for (size_t k = 0; k < ISOPROF_ARRAY_SIZE(codecs); k++) {
        struct codec *cd = &codecs[k];
        printf("  {\"name\": \"%s\", \"fn\": \"%s\", \"dict\": %s, \"mean\": %.1f, "
               "\"mean_cpu\": %.1f, \"mean_heap\": %.1f, \"us_per_window\": %.2f, "
               "\"no_dict\": %zu}%s\n",
               cd->name, cd->fn, cd->dict ? "true" : "false", cd->sum / (double)cd->n,
               cd->n_cpu ? cd->sum_cpu / (double)cd->n_cpu : 0.0,
               cd->n_heap ? cd->sum_heap / (double)cd->n_heap : 0.0,
               cd->best_s * 1e6 / (double)eval_n, cd->no_dict,
               k + 1 < ISOPROF_ARRAY_SIZE(codecs) ? "," : "");
    }
    printf(" ]}\n");
    for (size_t w = 0; w < c.nworkers; w++)
        free_dicts(&dicts[w]);
    isoprof_free(dicts);
    isoprof_free(lo);
    isoprof_free(raws);
    isoprof_free(out);
    ZSTD_freeCCtx(cctx);
    ZSTD_freeDCtx(dctx);
    corpus_free(&c);
    return 0;
}

/*
 * outbox_fill - make an upload backlog for bench_upload.js.
 *
 *   outbox_fill DIR N CPU_PROFILE.json [SPACING_S]
 *
 * Converts the CDP CPU profile once (the converter the daemon uses), or
 * takes a pprof as it is (a file ending in .pb.gz, as the ingest server
 * records them: a real window of the size the daemon uploads), and
 * stores it N times in a new store at DIR with the outbox on, as 10
 * workers x 2 isolates, one window every SPACING_S (10) s each, ending now, in
 * transactions of 256 windows: the state a host is in after an outage
 * during which the agent kept profiling. Prints the pprof size and the
 * time it took. Exit status non-zero if a call fails.
 */
#include "base.h"
#include "pprof.h"
#include "store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 256
#define SEC 1000000000ull

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    size_t r;
    while (b != NULL && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, cap *= 2);
            if (nb == NULL) {
                free(b);
                b = NULL;
            }
            b = nb;
        }
    }
    fclose(f);
    *len = n;
    return b;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: outbox_fill DIR N CPU_PROFILE.json [SPACING_S]\n");
        return 2;
    }
    uint64_t n = strtoull(argv[2], NULL, 10);
    uint64_t spacing = argc == 5 ? strtoull(argv[4], NULL, 10) : 10;
    if (spacing == 0)
        spacing = 10;
    size_t jlen;
    char *json = slurp(argv[3], &jlen);
    if (json == NULL || n == 0) {
        fprintf(stderr, "outbox_fill: cannot read %s (or N is 0)\n", argv[3]);
        return 2;
    }
    struct pprof_cpu_opts po = {.interval_ns = 1000000};
    struct pprof_result res;
    memset(&res, 0, sizeof(res));
    char *why = NULL;
    int rc;
    size_t plen = strlen(argv[3]);
    if (plen > 6 && strcmp(argv[3] + plen - 6, ".pb.gz") == 0) {
        uint8_t *raw = NULL;
        size_t rawlen = 0;
        rc = isoprof_gunzip(json, jlen, 64u << 20, &raw, &rawlen);
        if (rc == 0) {
            res.pprof.data = raw; /* freed by pprof_buf_free: the same allocator */
            res.pprof.len = rawlen;
            res.samples = 1000;
        }
    } else {
        rc = pprof_from_cpu_json(json, jlen, &po, &res, &why);
    }
    free(json);
    if (rc != 0) {
        fprintf(stderr, "outbox_fill: %s: %s\n", argv[3], why ? why : isoprof_strerror(rc));
        return 1;
    }
    struct store *s;
    struct store_options so = {.max_size = 8ull << 30, .outbox = 1};
    if ((rc = store_open(argv[1], &so, &s, &why)) != 0) {
        fprintf(stderr, "outbox_fill: %s\n", why ? why : isoprof_strerror(rc));
        return 1;
    }
    static struct store_record recs[BATCH];
    char workers[10][16];
    for (int i = 0; i < 10; i++)
        snprintf(workers[i], sizeof(workers[i]), "worker-%d", i);
    uint64_t now = isoprof_now_wall_ns();
    uint64_t per_series = (n + 19) / 20;
    uint64_t t0 = isoprof_now_mono_ns();
    for (uint64_t done = 0; done < n;) {
        size_t b = n - done < BATCH ? (size_t)(n - done) : BATCH;
        for (size_t i = 0; i < b; i++) {
            uint64_t k = done + i;
            struct store_record *r = &recs[i];
            memset(r, 0, sizeof(*r));
            r->w.worker = workers[k % 10];
            r->w.version = "v1";
            r->w.runtime = "node";
            r->w.isolate = (uint32_t)(k % 20);
            r->w.type = STORE_TYPE_CPU;
            r->w.start_ns = now - (per_series - k / 20) * spacing * SEC;
            r->w.end_ns = r->w.start_ns + 10 * SEC;
            r->w.samples = res.samples;
            r->w.interval = 1000000;
            r->pprof = res.pprof.data;
            r->len = res.pprof.len;
        }
        if ((rc = store_put(s, recs, b, NULL)) != 0) {
            fprintf(stderr, "outbox_fill: store_put: %s\n", isoprof_strerror(rc));
            store_close(s);
            return 1;
        }
        done += b;
    }
    double secs = (double)(isoprof_now_mono_ns() - t0) / 1e9;
    printf("pprof_bytes=%zu windows=%" PRIu64 " seconds=%.2f\n", res.pprof.len, n, secs);
    pprof_buf_free(&res.pprof);
    store_close(s);
    return 0;
}

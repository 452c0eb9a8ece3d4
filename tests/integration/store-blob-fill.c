/*
 * store-blob-fill - a heap snapshot window and its retained window in a
 * store, as isoprofd keeps them for a memory_near_limit episode, for the
 * CLI's tests (cli.test.js) while the daemon does not take snapshots yet.
 *
 *   store-blob-fill DIR SNAPSHOT
 *
 * Opens (or creates) the store at DIR, records a closed memory_near_limit
 * anomaly of worker "svc", version "v1", thread "main", isolate 1, then
 * reads SNAPSHOT (a V8 .heapsnapshot) once in 64 KiB pieces: each piece is
 * streamed into a snapshot window (store_blob_begin/write/commit) and fed
 * to the snapshot parser, whose retained profile (heapsnap_pprof, the
 * daemon's converter) is then stored as a retained window (store_put).
 * Both windows start 2 s before now and are pinned to the anomaly.
 * Prints one line of key=value: anomaly (its id), snapshot and retained
 * (the windows' ids), bytes (SNAPSHOT's size) and samples (the retained
 * profile's). Exit status 2 on a usage error, 1 if a call fails.
 */
#include "base.h"
#include "heapsnap.h"
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define FILL_PIECE (64u * 1024)
#define FILL_SEC 1000000000ull

static int fail(const char *what, int rc, const char *why)
{
    fprintf(stderr, "store-blob-fill: %s: %s\n", what, why ? why : isoprof_strerror(rc));
    return 1;
}

/* SNAPSHOT into stream b and parser p at once; *bytes its size. */
static int fill_stream(FILE *in, struct store_blob *b, struct heapsnap_parser *p, uint64_t *bytes)
{
    static unsigned char buf[FILL_PIECE];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0) {
        int rc = store_blob_write(b, buf, n);
        if (rc != 0)
            return fail("store_blob_write", rc, NULL);
        if ((rc = heapsnap_parser_feed(p, buf, n)) != HEAPSNAP_OK)
            return fail("parsing the snapshot", 0, heapsnap_reason(rc));
        *bytes += n;
    }
    return ferror(in) ? fail("reading the snapshot", -EIO, NULL) : 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: store-blob-fill DIR SNAPSHOT\n");
        return 2;
    }
    FILE *in = fopen(argv[2], "rb");
    if (in == NULL) {
        fprintf(stderr, "store-blob-fill: %s: %s\n", argv[2], strerror(errno));
        return 2;
    }
    struct store *s = NULL;
    char *why = NULL;
    int rc = store_open(argv[1], NULL, &s, &why);
    if (rc != 0) {
        fail("store_open", rc, why);
        isoprof_free(why);
        fclose(in);
        return 1;
    }
    uint64_t now = isoprof_now_wall_ns(), start = now - 2 * FILL_SEC;
    struct store_anomaly an = {.kind = STORE_ANOMALY_MEMORY_NEAR_LIMIT,
                               .worker = "svc",
                               .version = "v1",
                               .thread = "main",
                               .isolate = 1,
                               .start_ns = start,
                               .end_ns = now,
                               .value = 950u << 20,
                               .threshold = 900u << 20};
    struct store_window w = {.worker = "svc",
                             .version = "v1",
                             .runtime = "node",
                             .thread = "main",
                             .start_ns = start,
                             .end_ns = now - FILL_SEC,
                             .isolate = 1,
                             .type = STORE_TYPE_SNAPSHOT,
                             .anomaly = STORE_ANOMALY_MEMORY_NEAR_LIMIT};
    struct store_blob *b = NULL;
    struct heapsnap_parser *p = NULL;
    struct heapsnap *hs = NULL;
    struct heapsnap_dom *dom = NULL;
    struct heapsnap_pprof_result res = {0};
    uint64_t snap_id = 0, bytes = 0;
    int code = 1;
    if ((rc = store_anomaly_put(s, &an, 0)) != 0) {
        fail("store_anomaly_put", rc, NULL);
        goto out;
    }
    if ((rc = heapsnap_parser_new(0, &p)) != 0 || (rc = store_blob_begin(s, &w, &b)) != 0) {
        fail("starting", rc, NULL);
        goto out;
    }
    if (fill_stream(in, b, p, &bytes) != 0) {
        store_blob_abort(b);
        goto out;
    }
    rc = store_blob_commit(b, w.end_ns, an.id, 0, &snap_id, NULL);
    if (rc != 0) {
        fail("store_blob_commit", rc, NULL);
        goto out;
    }
    rc = heapsnap_parser_finish(p, &hs, &why); /* p is spent: freed at out */
    if (rc != HEAPSNAP_OK) {
        fail("parsing the snapshot", 0, why ? why : heapsnap_reason(rc));
        isoprof_free(why);
        goto out;
    }
    struct heapsnap_pprof_opts o = {.time_ns = w.end_ns};
    if ((rc = heapsnap_dominators(hs, 0, &dom)) != 0 ||
        (rc = heapsnap_pprof(hs, dom, &o, &res)) != 0) {
        fail("the retained profile", rc, NULL);
        goto out;
    }
    struct store_record r = {.w = w, .pprof = res.pprof.data, .len = res.pprof.len, .pin = an.id};
    r.w.type = STORE_TYPE_RETAINED;
    r.w.samples = res.samples;
    if ((rc = store_put(s, &r, 1, NULL)) != 0) {
        fail("store_put", rc, NULL);
        goto out;
    }
    char sid[STORE_ID_LEN + 1], rid[STORE_ID_LEN + 1];
    store_id_format(s, snap_id, sid);
    store_id_format(s, r.w.id, rid);
    printf("anomaly=%" PRIu64 " snapshot=%s retained=%s bytes=%" PRIu64 " samples=%" PRIu64 "\n",
           an.id, sid, rid, bytes, res.samples);
    code = fflush(stdout) == 0 ? 0 : 1;
out:
    pprof_buf_free(&res.pprof);
    heapsnap_dom_free(dom);
    heapsnap_free(hs);
    heapsnap_parser_free(p);
    store_close(s);
    fclose(in);
    return code;
}

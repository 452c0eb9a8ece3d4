/*
 * pprof_tool - small command-line front end to agent/pprof/pprof.h, for the
 * go tool pprof check (gotool.sh) and for looking at a reply by hand.
 *
 *   pprof_tool cpu  REPLY.json OUT.pb.gz [INTERVAL_NS]   CPU reply -> gzip'd pprof
 *   pprof_tool heap REPLY.json OUT.pb.gz [INTERVAL_BYTES]
 *   pprof_tool merge OUT.pb.gz IN.pb.gz...                merge gzip'd profiles
 *   pprof_tool top IN.pb.gz                               flat/cum table
 * Exit status 0 on success, 1 on a conversion error (message on stderr),
 * 2 on bad usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "pprof.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = isoprof_malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        char *nb = isoprof_realloc(buf, cap * 2);
        if (nb == NULL) {
            isoprof_free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    *len = n;
    return buf;
}

static int spit(const char *path, const struct pprof_buf *b)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -errno;
    int bad = fwrite(b->data, 1, b->len, f) != b->len;
    bad |= fclose(f) != 0;
    return bad ? -EIO : 0;
}

static int fail(const char *what, int rc, char *why)
{
    fprintf(stderr, "pprof_tool: %s: %s%s%s\n", what, isoprof_strerror(rc), why ? ": " : "",
            why ? why : "");
    isoprof_free(why);
    return 1;
}

static uint64_t parse_u64(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    return *end ? 0 : (uint64_t)v;
}

static int load_gz(const char *path, struct pprof_buf *out)
{
    size_t len;
    char *gz = slurp(path, &len);
    if (gz == NULL)
        return -errno ? -errno : -ENOMEM;
    int rc = pprof_gunzip(gz, len, PPROF_MAX_OUTPUT, out);
    isoprof_free(gz);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && (strcmp(argv[1], "cpu") == 0 || strcmp(argv[1], "heap") == 0)) {
        size_t len;
        char *json = slurp(argv[2], &len);
        if (json == NULL)
            return fail(argv[2], -errno, NULL);
        struct pprof_result r;
        char *why = NULL;
        int rc;
        if (argv[1][0] == 'c') {
            struct pprof_cpu_opts o = {.wall_minus_mono_ns =
                                           (int64_t)(isoprof_now_wall_ns() - isoprof_now_mono_ns()),
                                       .interval_ns = argc > 4 ? parse_u64(argv[4]) : 1000000};
            rc = pprof_from_cpu_json(json, len, &o, &r, &why);
        } else {
            struct pprof_heap_opts o = {.time_ns = isoprof_now_wall_ns(),
                                        .interval_bytes = argc > 4 ? parse_u64(argv[4]) : 32768};
            rc = pprof_from_heap_json(json, len, &o, &r, &why);
        }
        isoprof_free(json);
        if (rc)
            return fail(argv[2], rc, why);
        struct pprof_buf gz;
        rc = pprof_gzip(r.pprof.data, r.pprof.len, &gz);
        pprof_buf_free(&r.pprof);
        if (rc == 0) {
            rc = spit(argv[3], &gz);
            pprof_buf_free(&gz);
        }
        return rc ? fail(argv[3], rc, NULL) : 0;
    }
    if (argc >= 4 && strcmp(argv[1], "merge") == 0) {
        size_t n = (size_t)argc - 3;
        struct pprof_buf *in = isoprof_calloc(n, sizeof(*in)), out = {0}, gz = {0};
        int rc = in ? 0 : -ENOMEM;
        for (size_t i = 0; i < n && rc == 0; i++)
            if ((rc = load_gz(argv[3 + i], &in[i])) != 0)
                fail(argv[3 + i], rc, NULL);
        char *why = NULL;
        if (rc == 0 && (rc = pprof_merge(in, n, &out, &why)) != 0)
            fail("merge", rc, why);
        if (rc == 0 && (rc = pprof_gzip(out.data, out.len, &gz)) == 0)
            rc = spit(argv[2], &gz);
        for (size_t i = 0; in && i < n; i++)
            pprof_buf_free(&in[i]);
        isoprof_free(in);
        pprof_buf_free(&out);
        pprof_buf_free(&gz);
        return rc ? 1 : 0;
    }
    if (argc == 3 && strcmp(argv[1], "top") == 0) {
        struct pprof_buf raw;
        int rc = load_gz(argv[2], &raw);
        if (rc)
            return fail(argv[2], rc, NULL);
        struct pprof_top t;
        rc = pprof_top(&raw, -1, &t);
        pprof_buf_free(&raw);
        if (rc)
            return fail(argv[2], rc, NULL);
        printf("total %" PRId64 " %s/%s\n", t.total, t.type, t.unit);
        for (size_t i = 0; i < t.n; i++)
            printf("%14" PRId64 " %14" PRId64 "  %s %s:%" PRId64 "\n", t.rows[i].flat,
                   t.rows[i].cum, t.rows[i].name, t.rows[i].file, t.rows[i].line);
        pprof_top_free(&t);
        return 0;
    }
    fprintf(stderr, "usage: pprof_tool cpu|heap REPLY.json OUT.pb.gz [INTERVAL]\n"
                    "       pprof_tool merge OUT.pb.gz IN.pb.gz...\n"
                    "       pprof_tool top IN.pb.gz\n");
    return 2;
}

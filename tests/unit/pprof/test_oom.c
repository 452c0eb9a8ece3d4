/*
 * test_oom.c - allocation-failure walks: the Nth allocation of a conversion
 * (CPU, heap, a rejected profile), a merge, a top and a gzip round trip
 * fails, for every N the call makes. Each must return -ENOMEM (or, for a
 * rejected input, its rejection) and leave nothing behind: run under the
 * ASan build, LeakSanitizer fails the test on a leak.
 */
#include "../test.h"
#include "common.h"

typedef int (*op_fn)(void *ctx);

/* Runs op once to count its allocations, then once per allocation with
 * that one failing. ok_rc: what a run where nothing failed returns. */
static void walk(const char *what, op_fn op, void *ctx, int ok_rc)
{
    unsigned long before = isoprof_alloc_count();
    CHECK_EQ_INT(op(ctx), ok_rc);
    unsigned long n = isoprof_alloc_count() - before;
    CHECK(n > 0);
    for (unsigned long i = 0; i < n; i++) {
        isoprof_alloc_fail_after((long)i);
        int rc = op(ctx);
        isoprof_alloc_fail_after(-1);
        if (rc != -ENOMEM && rc != ok_rc) {
            fprintf(stderr, "%s: allocation %lu of %lu failed, got %s\n", what, i, n,
                    isoprof_errname(rc));
            test_failed_ = 1;
        }
        /* a failure that went unnoticed would have produced a result */
        if (rc == 0 && ok_rc == 0 && i < n - 1) {
            /* possible only where an allocation is optional; none is in
             * the success path of these calls */
            fprintf(stderr, "%s: allocation %lu of %lu failed silently\n", what, i, n);
            test_failed_ = 1;
        }
    }
    fprintf(stderr, "  %s: %lu allocations walked\n", what, n);
}

struct text {
    char *json;
    size_t len;
    struct pprof_buf a, b;
};

static int op_cpu(void *c)
{
    struct text *t = c;
    struct pprof_cpu_opts o = {.interval_ns = 1000000};
    struct pprof_result r;
    char *why = NULL;
    int rc = pprof_from_cpu_json(t->json, t->len, &o, &r, &why);
    if (rc == 0)
        pprof_buf_free(&r.pprof);
    isoprof_free(why);
    return rc;
}

static int op_heap(void *c)
{
    struct text *t = c;
    struct pprof_heap_opts o = {.interval_bytes = 65536};
    struct pprof_result r;
    char *why = NULL;
    int rc = pprof_from_heap_json(t->json, t->len, &o, &r, &why);
    if (rc == 0)
        pprof_buf_free(&r.pprof);
    isoprof_free(why);
    return rc;
}

static int op_merge(void *c)
{
    struct text *t = c;
    struct pprof_buf in[2] = {t->a, t->b}, out;
    char *why = NULL;
    int rc = pprof_merge(in, 2, &out, &why);
    if (rc == 0)
        pprof_buf_free(&out);
    isoprof_free(why);
    return rc;
}

static int op_top(void *c)
{
    struct text *t = c;
    struct pprof_top top;
    int rc = pprof_top(&t->a, -1, &top);
    if (rc == 0)
        pprof_top_free(&top);
    return rc;
}

static int op_gzip(void *c)
{
    struct text *t = c;
    struct pprof_buf gz, back;
    int rc = pprof_gzip(t->a.data, t->a.len, &gz);
    if (rc)
        return rc;
    rc = pprof_gunzip(gz.data, gz.len, t->a.len, &back);
    pprof_buf_free(&gz);
    if (rc == 0)
        pprof_buf_free(&back);
    return rc;
}

TEST(walk_cpu)
{
    struct text t = {0};
    t.json = read_fixture("node20-cpu.json", &t.len);
    REQUIRE(t.json != NULL);
    walk("cpu node20", op_cpu, &t, 0);
    isoprof_free(t.json);
    /* samples before nodes: the pending-samples path */
    t.json = isoprof_strdup(
        "{\"samples\":[1,2,2],\"timeDeltas\":[0,1,1],\"startTime\":0,"
        "\"endTime\":3,\"nodes\":[{\"id\":1,\"callFrame\":{},\"children\":[2]},"
        "{\"id\":2,\"callFrame\":{\"functionName\":\"f\",\"url\":\"file:///a%20b.js\"},"
        "\"hitCount\":2}]}");
    REQUIRE(t.json != NULL);
    t.len = strlen(t.json);
    walk("cpu samples first", op_cpu, &t, 0);
    isoprof_free(t.json);
}

TEST(walk_cpu_rejected)
{
    struct text t = {0};
    t.json = isoprof_strdup("{\"startTime\":0,\"endTime\":3,\"nodes\":[{\"id\":1,\"callFrame\":{},"
                            "\"children\":[2,2]},{\"id\":2,\"callFrame\":{}}]}");
    REQUIRE(t.json != NULL);
    t.len = strlen(t.json);
    walk("cpu rejected", op_cpu, &t, ISOPROF_EPROFILE);
    isoprof_free(t.json);
}

TEST(walk_heap)
{
    struct text t = {0};
    t.json = read_fixture("deno-heap.json", &t.len);
    REQUIRE(t.json != NULL);
    walk("heap deno", op_heap, &t, 0);
    isoprof_free(t.json);
}

TEST(walk_utils)
{
    struct text t = {0};
    size_t len;
    char *json = read_fixture("workerd-cpu.json", &len);
    REQUIRE(json != NULL);
    struct pprof_cpu_opts o = {.interval_ns = 1000000};
    struct pprof_result r1, r2;
    REQUIRE(pprof_from_cpu_json(json, len, &o, &r1, NULL) == 0);
    o.wall_minus_mono_ns = 1000000000;
    REQUIRE(pprof_from_cpu_json(json, len, &o, &r2, NULL) == 0);
    t.a = r1.pprof;
    t.b = r2.pprof;
    walk("merge", op_merge, &t, 0);
    walk("top", op_top, &t, 0);
    walk("gzip", op_gzip, &t, 0);
    pprof_buf_free(&t.a);
    pprof_buf_free(&t.b);
    isoprof_free(json);
}

int main(void)
{
    RUN(walk_cpu);
    RUN(walk_cpu_rejected);
    RUN(walk_heap);
    RUN(walk_utils);
    TEST_EXIT();
}

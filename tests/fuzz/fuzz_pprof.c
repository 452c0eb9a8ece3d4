/*
 * fuzz_pprof - libFuzzer target for agent/pprof/pprof.h: the CDP JSON converters
 * (the agent's widest input surface: whatever a target sends), and the pprof
 * decoder behind merge/top, and gunzip.
 *
 * The first byte picks what the rest is fed to:
 *   'c' CPU reply -> pprof_from_cpu_json     'h' heap reply -> pprof_from_heap_json
 *   'p' raw pprof -> pprof_top, pprof_merge   'g' gzip -> pprof_gunzip
 *   anything else: the whole input, as JSON, to both converters.
 * Every profile a converter accepts must decode again (top, and a merge with
 * itself): the writer's output is checked by our own reader.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "pprof.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_output(const struct pprof_buf *b)
{
    struct pprof_top t;
    if (pprof_top(b, -1, &t) != 0)
        abort(); /* we wrote something we cannot read */
    pprof_top_free(&t);
    struct pprof_buf in[2] = {*b, *b}, out;
    if (pprof_merge(in, 2, &out, NULL) != 0)
        abort();
    pprof_buf_free(&out);
}

static void json(const char *s, size_t n, int which)
{
    struct pprof_result r;
    char *why = NULL;
    int rc;
    if (which & 1) {
        struct pprof_cpu_opts o = {.interval_ns = 1000, .max_nodes = 1 << 16};
        rc = pprof_from_cpu_json(s, n, &o, &r, &why);
        if (rc == 0) {
            check_output(&r.pprof);
            pprof_buf_free(&r.pprof);
        } else if (rc != -ENOMEM && why == NULL) {
            abort(); /* every rejection says why */
        }
        isoprof_free(why);
        why = NULL;
    }
    if (which & 2) {
        struct pprof_heap_opts o = {.interval_bytes = 1024, .max_nodes = 1 << 16};
        rc = pprof_from_heap_json(s, n, &o, &r, &why);
        if (rc == 0) {
            check_output(&r.pprof);
            pprof_buf_free(&r.pprof);
        } else if (rc != -ENOMEM && why == NULL) {
            abort();
        }
        isoprof_free(why);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    switch (data[0]) {
    case 'c': json((const char *)rest, n, 1); break;
    case 'h': json((const char *)rest, n, 2); break;
    case 'p': {
        struct pprof_buf b = {(uint8_t *)(uintptr_t)rest, n}, out;
        struct pprof_top t;
        if (pprof_top(&b, -1, &t) == 0)
            pprof_top_free(&t);
        char *why = NULL;
        if (pprof_merge(&b, 1, &out, &why) == 0)
            pprof_buf_free(&out);
        isoprof_free(why);
        break;
    }
    case 'g': {
        struct pprof_buf out;
        if (pprof_gunzip(rest, n, 1 << 20, &out) == 0)
            pprof_buf_free(&out);
        break;
    }
    default: json((const char *)data, size, 3); break;
    }
    return 0;
}

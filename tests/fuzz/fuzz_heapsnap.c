/*
 * fuzz_heapsnap - libFuzzer target for agent/pprof/heapsnap.h: the
 * streaming heap-snapshot parser (the text comes from a target, in
 * HeapProfiler.addHeapSnapshotChunk events), the dominator tree and the
 * retained pprof.
 *
 * The whole input is a snapshot. It is parsed whole, and fed in two chunks
 * cut at a place taken from its first bytes: both must give the same
 * reason, and an accepted snapshot the same counts and size. Parsing is
 * under a budget (as the daemon parses), so that a claimed count cannot
 * make the target allocate gigabytes; an accepted snapshot must be
 * accepted again with its own size as the budget and refused (too_big) one
 * byte under it. Then its dominator tree is checked against what must
 * hold of any (a node's dominator is reached and retains at least what it
 * does; the root retains the total), and its retained pprof, with the
 * default caps and with tiny ones taken from the input, must decode and
 * add up to the reachable nodes and their self sizes.
 */
#include "base.h"
#include "heapsnap.h"
#include "profile.pb-c.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BUDGET ((size_t)64 << 20)

static void check(int ok)
{
    if (!ok)
        abort();
}

static int parse(const uint8_t *data, size_t size, size_t cut, size_t budget, struct heapsnap **s)
{
    char *why = NULL;
    int rc;
    if (cut > size) {
        rc = heapsnap_parse(data, size, budget, s, &why);
    } else {
        struct heapsnap_parser *p;
        check(heapsnap_parser_new(budget, &p) == 0);
        int r1 = heapsnap_parser_feed(p, data, cut);
        int r2 = heapsnap_parser_feed(p, data + cut, size - cut);
        check(r1 == 0 || r2 == r1); /* an error sticks */
        rc = heapsnap_parser_finish(p, s, &why);
        check(r2 == 0 || rc == r2);
        heapsnap_parser_free(p);
    }
    check(rc >= HEAPSNAP_OK && rc < HEAPSNAP_NREASONS);
    check(rc != HEAPSNAP_E_NOMEM);
    check((rc == 0) == (*s != NULL));
    check(rc == 0 ? why == NULL : why != NULL); /* every refusal says why */
    check(strcmp(heapsnap_reason(rc), "unknown") != 0);
    isoprof_free(why);
    return rc;
}

static void check_profile(const struct heapsnap *s, const struct heapsnap_dom *d,
                          const struct heapsnap_pprof_opts *o)
{
    struct heapsnap_dom_stats st;
    heapsnap_dom_stats(d, &st);
    struct heapsnap_pprof_result r;
    check(heapsnap_pprof(s, d, o, &r) == 0);
    check(r.objects == st.reachable && r.bytes == st.total);
    Perftools__Profiles__Profile *p =
        perftools__profiles__profile__unpack(NULL, r.pprof.len, r.pprof.data);
    check(p != NULL);
    check(p->n_sample == r.samples && p->n_function == r.frames);
    check(p->n_sample_type == 2 && p->n_string_table > 0 && p->string_table[0][0] == '\0');
    unsigned depth = o->max_depth ? o->max_depth : HEAPSNAP_PPROF_DEPTH;
    uint64_t objects = 0, bytes = 0;
    for (size_t i = 0; i < p->n_sample; i++) {
        const Perftools__Profiles__Sample *x = p->sample[i];
        check(x->n_value == 2 && x->value[0] > 0 && x->value[1] >= 0);
        check(x->n_location_id >= 1 && x->n_location_id <= depth + 1);
        for (size_t j = 0; j < x->n_location_id; j++)
            check(x->location_id[j] >= 1 && x->location_id[j] <= p->n_location);
        objects += (uint64_t)x->value[0];
        bytes += (uint64_t)x->value[1];
    }
    check(objects == st.reachable);
    if (st.total < INT64_MAX / 2)
        check(bytes == st.total);
    if (o->max_samples)
        check(p->n_sample <= o->max_samples);
    for (size_t i = 0; i < p->n_string_table; i++) {
        size_t n = strlen(p->string_table[i]);
        check(isoprof_utf8_valid_prefix((const uint8_t *)p->string_table[i], n) == n);
    }
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t cut = size >= 2 ? ((size_t)data[0] | (size_t)data[1] << 8) % (size + 1) : 0;
    struct heapsnap *s, *c;
    int rc = parse(data, size, SIZE_MAX, BUDGET, &s);
    int rc2 = parse(data, size, cut, BUDGET, &c);
    check(rc == rc2);
    if (rc != 0)
        return 0;

    size_t nn = heapsnap_node_count(s), bytes = heapsnap_bytes(s);
    check(nn >= 1 && bytes <= BUDGET);
    check(nn == heapsnap_node_count(c) && heapsnap_edge_count(s) == heapsnap_edge_count(c));
    check(bytes == heapsnap_bytes(c) && heapsnap_string_count(s) == heapsnap_string_count(c));
    heapsnap_free(c);
    /* the budget: accepted iff the result fits */
    check(parse(data, size, cut, bytes, &c) == 0 && heapsnap_bytes(c) == bytes);
    heapsnap_free(c);
    check(parse(data, size, SIZE_MAX, bytes - 1, &c) == HEAPSNAP_E_TOOBIG);

    uint64_t edges = 0;
    for (uint32_t i = 0; i < nn; i++) {
        struct heapsnap_node n;
        check(heapsnap_node(s, i, &n) == 0);
        check(n.first_edge == edges);
        edges += n.edge_count;
    }
    check(edges == heapsnap_edge_count(s));
    for (uint32_t e = 0; e < heapsnap_edge_count(s); e++) {
        struct heapsnap_edge x;
        check(heapsnap_edge(s, e, &x) == 0);
        check(x.from < nn && x.to < nn);
    }

    struct heapsnap_dom *d;
    check(heapsnap_dominators(s, 0, &d) == 0);
    struct heapsnap_dom_stats st;
    heapsnap_dom_stats(d, &st);
    check(st.reachable >= 1 && st.reachable + st.unreachable == nn);
    check(heapsnap_dom_retained(d, 0) == st.total);
    size_t reached = 0;
    for (uint32_t v = 0; v < nn; v++) {
        struct heapsnap_node n;
        heapsnap_node(s, v, &n);
        if (!heapsnap_dom_reached(d, v)) {
            check(heapsnap_dom_idom(d, v) == HEAPSNAP_NONE && heapsnap_dom_retained(d, v) == 0);
            continue;
        }
        reached++;
        check(heapsnap_dom_retained(d, v) >= n.self_size);
        uint32_t i = heapsnap_dom_idom(d, v);
        if (v == 0) {
            check(i == HEAPSNAP_NONE);
            continue;
        }
        check(i != v && heapsnap_dom_reached(d, i));
        check(heapsnap_dom_retained(d, i) >= heapsnap_dom_retained(d, v));
    }
    check(reached == st.reachable);

    struct heapsnap_pprof_opts o = {0};
    check_profile(s, d, &o);
    o.max_depth = 1 + data[size / 2] % 4;
    o.max_samples = 1 + data[size / 3] % 8;
    o.max_frames = 1 + data[size / 4] % 8;
    o.index_frames = data[size - 1] & 1;
    check_profile(s, d, &o);
    heapsnap_dom_free(d);
    heapsnap_free(s);
    return 0;
}

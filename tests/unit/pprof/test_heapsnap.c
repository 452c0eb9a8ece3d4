/*
 * test_heapsnap.c - heap snapshots (agent/pprof/heapsnap.h): hand-written
 * snapshots with known dominators and retained sizes (a Map of arrays, a
 * diamond, weak and shortcut edges, unreachable nodes, a cycle), random
 * graphs checked against a brute-force dominator computation (v's
 * dominators are the nodes whose removal makes v unreachable), every
 * reason a snapshot is refused, the same text fed in chunks of every size,
 * every prefix of a snapshot (incomplete), the budget, the retained pprof
 * decoded back with protobuf-c (its samples add up to the reachable heap),
 * every allocation failing in turn, and a real snapshot written by node
 * (skipped when node is not on PATH).
 */
#include "../scratch.h"
#include "../test.h"
#include "common.h"
#include "heapsnap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

/* --- a graph, written as V8 writes a snapshot --- */

static const char *const node_types[] = {"hidden",
                                         "array",
                                         "string",
                                         "object",
                                         "code",
                                         "closure",
                                         "regexp",
                                         "number",
                                         "native",
                                         "synthetic",
                                         "concatenated string",
                                         "sliced string",
                                         "symbol",
                                         "bigint",
                                         "object shape"};
static const char *const edge_types[] = {"context", "element",  "property", "internal",
                                         "hidden",  "shortcut", "weak"};

struct tnode {
    const char *type;
    char name[48];
    uint64_t self;
};

struct tedge {
    uint32_t from;
    const char *type;
    char name[24];  /* property, context, internal, shortcut, weak */
    uint32_t index; /* element, hidden */
    uint32_t to;
};

struct tgraph {
    struct tnode *n;
    size_t nn, ncap;
    struct tedge *e;
    size_t ne, ecap;
};

static uint32_t g_node(struct tgraph *g, const char *type, const char *name, uint64_t self)
{
    if (g->nn == g->ncap) {
        g->ncap = g->ncap ? g->ncap * 2 : 16;
        g->n = isoprof_realloc(g->n, g->ncap * sizeof(*g->n));
    }
    struct tnode *x = &g->n[g->nn];
    x->type = type;
    snprintf(x->name, sizeof(x->name), "%s", name);
    x->self = self;
    return (uint32_t)g->nn++;
}

static void g_edge(struct tgraph *g, uint32_t from, const char *type, const char *name,
                   uint32_t index, uint32_t to)
{
    if (g->ne == g->ecap) {
        g->ecap = g->ecap ? g->ecap * 2 : 16;
        g->e = isoprof_realloc(g->e, g->ecap * sizeof(*g->e));
    }
    struct tedge *x = &g->e[g->ne++];
    x->from = from;
    x->type = type;
    snprintf(x->name, sizeof(x->name), "%s", name ? name : "");
    x->index = index;
    x->to = to;
}

static void g_free(struct tgraph *g)
{
    isoprof_free(g->n);
    isoprof_free(g->e);
    memset(g, 0, sizeof(*g));
}

static unsigned type_idx(const char *const *types, size_t n, const char *t)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(types[i], t) == 0)
            return (unsigned)i;
    abort();
}

static bool indexed(const char *type)
{
    return strcmp(type, "element") == 0 || strcmp(type, "hidden") == 0;
}

/* The index of s among strs (added if new). */
static uint32_t intern(char ***strs, size_t *n, const char *s)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*strs)[i], s) == 0)
            return (uint32_t)i;
    *strs = isoprof_realloc(*strs, (*n + 1) * sizeof(char *));
    (*strs)[*n] = isoprof_strdup(s);
    return (uint32_t)(*n)++;
}

/* Edge e's position among the edges once grouped by node (stable). */
static int cmp_from(const void *a, const void *b)
{
    const struct tedge *x = *(const struct tedge *const *)a, *y = *(const struct tedge *const *)b;
    if (x->from != y->from)
        return x->from < y->from ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The snapshot text of g into out (NUL-terminated), and in *order the
 * edges in the order they were written (the snapshot's edge indices). */
static void g_write(const struct tgraph *g, struct isoprof_buf *out, const struct tedge ***order)
{
    isoprof_buf_init(out, SIZE_MAX / 2);
    char **strs = NULL;
    size_t ns = 0;
    const struct tedge **eo = isoprof_malloc((g->ne + 1) * sizeof(*eo));
    for (size_t i = 0; i < g->ne; i++)
        eo[i] = &g->e[i];
    qsort(eo, g->ne, sizeof(*eo), cmp_from);
    isoprof_buf_puts(out, "{\"snapshot\":{\"meta\":{\"node_fields\":[\"type\",\"name\",\"id\","
                          "\"self_size\",\"edge_count\",\"trace_node_id\",\"detachedness\"],"
                          "\"node_types\":[[");
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(node_types); i++)
        isoprof_buf_printf(out, "%s\"%s\"", i ? "," : "", node_types[i]);
    isoprof_buf_puts(out, "],\"string\",\"number\",\"number\",\"number\",\"number\",\"number\"],"
                          "\"edge_fields\":[\"type\",\"name_or_index\",\"to_node\"],"
                          "\"edge_types\":[[");
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(edge_types); i++)
        isoprof_buf_printf(out, "%s\"%s\"", i ? "," : "", edge_types[i]);
    isoprof_buf_printf(out,
                       "],\"string_or_number\",\"node\"],\"trace_function_info_fields\":["
                       "\"function_id\",\"name\",\"script_name\",\"script_id\",\"line\","
                       "\"column\"],\"location_fields\":[\"object_index\",\"script_id\","
                       "\"line\",\"column\"]},\"node_count\":%zu,\"edge_count\":%zu,"
                       "\"trace_function_count\":0},\n\"nodes\":[",
                       g->nn, g->ne);
    for (size_t i = 0; i < g->nn; i++) {
        size_t ec = 0;
        for (size_t j = 0; j < g->ne; j++)
            ec += g->e[j].from == i;
        isoprof_buf_printf(out, "%s%u,%u,%zu,%" PRIu64 ",%zu,0,0", i ? "\n," : "",
                           type_idx(node_types, ISOPROF_ARRAY_SIZE(node_types), g->n[i].type),
                           intern(&strs, &ns, g->n[i].name), i * 2 + 1, g->n[i].self, ec);
    }
    isoprof_buf_puts(out, "],\n\"edges\":[");
    for (size_t i = 0; i < g->ne; i++) {
        const struct tedge *x = eo[i];
        uint32_t name = indexed(x->type) ? x->index : intern(&strs, &ns, x->name);
        isoprof_buf_printf(out, "%s%u,%u,%u", i ? "\n," : "",
                           type_idx(edge_types, ISOPROF_ARRAY_SIZE(edge_types), x->type), name,
                           x->to * 7);
    }
    /* what a tracking snapshot adds, to be skipped */
    isoprof_buf_puts(out, "],\n\"trace_function_infos\":[1,2,3,4,5,6],\n\"trace_tree\":"
                          "[1,0,0,0,[2,1,3,4,[3,2,0,0,[]]]],\n\"samples\":[],\n\"locations\":"
                          "[7,1,2,3],\n\"strings\":[");
    for (size_t i = 0; i < ns; i++) {
        isoprof_buf_puts(out, i ? ",\n" : "");
        isoprof_json_str(out, strs[i]);
        isoprof_free(strs[i]);
    }
    isoprof_buf_puts(out, "]}");
    isoprof_free(strs);
    if (out->err)
        abort();
    if (order)
        *order = eo;
    else
        isoprof_free(eo);
}

/* Parses text with budget; a refusal fails the test. */
static struct heapsnap *parse_(const char *text, size_t len, size_t budget, int line)
{
    struct heapsnap *s = NULL;
    char *why = NULL;
    int rc = heapsnap_parse(text, len, budget, &s, &why);
    if (rc != HEAPSNAP_OK || s == NULL) {
        fprintf(stderr, "%s:%d: snapshot refused: %s: %s\n", __FILE__, line, heapsnap_reason(rc),
                why ? why : "(no why)");
        test_failed_ = 1;
    }
    isoprof_free(why);
    return s;
}
#define PARSE(b) parse_((b)->data, (b)->len, 0, __LINE__)

/* Feeds text in chunks of `chunk` bytes (an empty feed between each two). */
static int parse_chunked(const char *text, size_t n, size_t chunk, size_t budget,
                         struct heapsnap **out, char **why)
{
    struct heapsnap_parser *p;
    *out = NULL;
    *why = NULL;
    if (heapsnap_parser_new(budget, &p) != 0)
        return HEAPSNAP_E_NOMEM;
    for (size_t off = 0; off < n; off += chunk) {
        size_t k = n - off < chunk ? n - off : chunk;
        if (heapsnap_parser_feed(p, text + off, k) != HEAPSNAP_OK)
            break;
        heapsnap_parser_feed(p, text + off, 0);
    }
    int rc = heapsnap_parser_finish(p, out, why);
    heapsnap_parser_free(p);
    return rc;
}

static struct heapsnap_dom *dominate(const struct heapsnap *s)
{
    struct heapsnap_dom *d = NULL;
    int rc = heapsnap_dominators(s, 0, &d);
    if (rc != 0) {
        fprintf(stderr, "heapsnap_dominators: %s\n", isoprof_strerror(rc));
        test_failed_ = 1;
    }
    return d;
}

/* The retained pprof of s, decoded. */
static Profile *retained_profile(const struct heapsnap *s, const struct heapsnap_dom *d,
                                 const struct heapsnap_pprof_opts *o,
                                 struct heapsnap_pprof_result *r)
{
    memset(r, 0, sizeof(*r));
    int rc = heapsnap_pprof(s, d, o, r);
    if (rc != 0) {
        fprintf(stderr, "heapsnap_pprof: %s\n", isoprof_strerror(rc));
        test_failed_ = 1;
        return NULL;
    }
    Profile *p = decode(&r->pprof);
    if (p == NULL) {
        fprintf(stderr, "the retained pprof does not decode\n");
        test_failed_ = 1;
    }
    return p;
}

/* --- the spill file and the budgeted conversion against the in-memory form --- */

/* An unlinked spill file in a scratch directory, as the daemon makes one
 * in its store. */
static int spill_fd(void)
{
    static char *dir;
    if (dir == NULL)
        dir = tmp_dir();
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror("O_TMPFILE");
        abort();
    }
    return fd;
}

struct mem_src {
    const char *text;
    size_t len, chunk;
};

static int mem_read(void *arg, heapsnap_feed_fn feed, void *feed_arg)
{
    const struct mem_src *m = arg;
    for (size_t off = 0; off < m->len; off += m->chunk)
        if (feed(feed_arg, m->text + off, m->len - off < m->chunk ? m->len - off : m->chunk))
            break;
    return 0;
}

static bool same_bytes(const struct pprof_buf *a, const struct pprof_buf *b)
{
    return a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
}

/*
 * text parsed with a spill file (edges and, with pred_chunk entries at a
 * time, the predecessors in the file; only the names the profile uses),
 * checked against s and d, its in-memory parse and dominators: the same
 * edges, the same dominator tree and retained sizes, and byte for byte the
 * same profile under each of the caps; then heapsnap_retained (the
 * daemon's conversion, which spills the node arrays too) gives the same
 * default profile, within a budget its own figures allow.
 */
static void check_spill(const char *text, size_t len, const struct heapsnap *s,
                        const struct heapsnap_dom *d, size_t pred_chunk, const char *what)
{
    struct heapsnap_parse_opts po = {
        .spill_fd = spill_fd(), .used_names = true, .pred_chunk = pred_chunk};
    struct heapsnap_parser *p;
    REQUIRE(heapsnap_parser_new_opts(&po, &p) == 0);
    for (size_t off = 0; off < len; off += 7919)
        heapsnap_parser_feed(p, text + off, len - off < 7919 ? len - off : 7919);
    struct heapsnap *s2 = NULL;
    char *why = NULL;
    int rc = heapsnap_parser_finish(p, &s2, &why);
    heapsnap_parser_free(p);
    if (rc != HEAPSNAP_OK)
        fprintf(stderr, "%s: spilled parse refused: %s\n", what, why ? why : "");
    isoprof_free(why);
    REQUIRE(rc == HEAPSNAP_OK);
    size_t nn = heapsnap_node_count(s), ne = heapsnap_edge_count(s);
    CHECK_EQ_INT(heapsnap_node_count(s2), nn);
    CHECK_EQ_INT(heapsnap_edge_count(s2), ne);
    /* no edges held; at most the "" of the unnamed strings more */
    CHECK(heapsnap_bytes(s2) <= heapsnap_bytes(s) - ne * HEAPSNAP_EDGE_BYTES + 1);
    for (uint32_t e = 0; e < ne && !test_failed_; e++) {
        struct heapsnap_edge x, y;
        CHECK(heapsnap_edge(s, e, &x) == 0 && heapsnap_edge(s2, e, &y) == 0);
        CHECK(strcmp(x.type, y.type) == 0 && (x.name == NULL) == (y.name == NULL) &&
              (x.name == NULL || strcmp(x.name, y.name) == 0) && x.index == y.index &&
              x.from == y.from && x.to == y.to && x.retaining == y.retaining);
    }
    struct heapsnap_dom *d2 = NULL;
    REQUIRE(heapsnap_dominators(s2, heapsnap_dom_need(s2), &d2) == 0);
    for (uint32_t v = 0; v < nn && !test_failed_; v++) {
        CHECK_EQ_INT(heapsnap_dom_idom(d2, v), heapsnap_dom_idom(d, v));
        CHECK_EQ_INT(heapsnap_dom_retained(d2, v), heapsnap_dom_retained(d, v));
        if (test_failed_)
            fprintf(stderr, "%s: node %u differs with a spill file\n", what, v);
    }
    struct heapsnap_pprof_opts caps[] = {
        {0}, {.max_depth = 2}, {.max_samples = 5}, {.max_frames = 3}, {.index_frames = true},
    };
    struct heapsnap_pprof_result want = {0};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(caps) && !test_failed_; i++) {
        struct heapsnap_pprof_result a, b;
        REQUIRE(heapsnap_pprof(s, d, &caps[i], &a) == 0);
        REQUIRE(heapsnap_pprof(s2, d2, &caps[i], &b) == 0);
        CHECK(same_bytes(&a.pprof, &b.pprof));
        CHECK(a.objects == b.objects && a.bytes == b.bytes && a.folded == b.folded &&
              a.deeper == b.deeper);
        if (test_failed_)
            fprintf(stderr, "%s: profile %zu differs with a spill file\n", what, i);
        pprof_buf_free(&b.pprof);
        if (i == 0)
            want = a;
        else
            pprof_buf_free(&a.pprof);
    }
    heapsnap_dom_free(d2);

    /* the daemon's conversion: a budget of what it says it needs holds it
     * (the snapshot, its reserve, the fixed part, and while it parses the
     * 64 KiB write buffer and the names' index, a bit a string doubled
     * from 4 KiB) */
    size_t names = 4096;
    while (names * 8 < heapsnap_string_count(s2))
        names *= 2;
    size_t budget =
        HEAPSNAP_RETAINED_FIXED + heapsnap_bytes(s2) + 65536 + names + nn * HEAPSNAP_RESERVE_NODE;
    heapsnap_free(s2);
    struct mem_src src = {text, len, 65536};
    struct heapsnap_retained_opts ro = {.budget = budget, .spill_fd = spill_fd()};
    struct heapsnap_pprof_result r;
    rc = heapsnap_retained(&ro, mem_read, &src, &r, &why);
    if (rc != 0)
        fprintf(stderr, "%s: heapsnap_retained: %d %s\n", what, rc, why ? why : "");
    isoprof_free(why);
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) {
        CHECK(same_bytes(&want.pprof, &r.pprof));
        pprof_buf_free(&r.pprof);
    }
    pprof_buf_free(&want.pprof);
}

/* The sum of value vi over the samples that have a frame named name. */
static int64_t cum_of(const Profile *p, const char *name, size_t vi)
{
    int64_t t = 0;
    for (size_t i = 0; i < p->n_sample; i++)
        for (size_t j = 0; j < p->sample[i]->n_location_id; j++)
            if (strcmp(frame_name(p, p->sample[i], j), name) == 0) {
                t += p->sample[i]->value[vi];
                break;
            }
    return t;
}

/* Whether some sample's stack is exactly names[0..n) (root first). */
static bool has_stack(const Profile *p, const char *const *names, size_t n)
{
    for (size_t i = 0; i < p->n_sample; i++) {
        const Sample *x = p->sample[i];
        if (x->n_location_id != n)
            continue;
        size_t j = 0;
        while (j < n && strcmp(frame_name(p, x, n - 1 - j), names[j]) == 0)
            j++;
        if (j == n)
            return true;
    }
    return false;
}

/* The checks every retained pprof must pass: it decodes, its sample types,
 * samples that add up to the reachable nodes and their self sizes. */
static void check_profile(const Profile *p, const struct heapsnap_dom *d,
                          const struct heapsnap_pprof_result *r)
{
    struct heapsnap_dom_stats st;
    heapsnap_dom_stats(d, &st);
    REQUIRE(p != NULL);
    REQUIRE(p->n_sample_type == 2);
    CHECK_STR(pstr(p, p->sample_type[0]->type), "retained_objects");
    CHECK_STR(pstr(p, p->sample_type[0]->unit), "count");
    CHECK_STR(pstr(p, p->sample_type[1]->type), "retained_space");
    CHECK_STR(pstr(p, p->sample_type[1]->unit), "bytes");
    CHECK_STR(p->string_table[0], "");
    CHECK_EQ_INT(value_sum(p, 0), st.reachable);
    CHECK_EQ_INT(value_sum(p, 1), st.total);
    CHECK_EQ_INT(r->objects, st.reachable);
    CHECK_EQ_INT(r->bytes, st.total);
    CHECK_EQ_INT(r->samples, p->n_sample);
    CHECK_EQ_INT(r->frames, p->n_function);
    for (size_t i = 0; i < p->n_sample; i++) {
        CHECK(p->sample[i]->n_location_id > 0);
        for (size_t j = 0; j < p->sample[i]->n_location_id; j++)
            CHECK(loc_by_id(p, p->sample[i]->location_id[j]) != NULL);
    }
    for (size_t i = 0; i < p->n_string_table; i++)
        CHECK(isoprof_utf8_valid_prefix((const uint8_t *)p->string_table[i],
                                        strlen(p->string_table[i])) == strlen(p->string_table[i]));
}

/* --- hand-written snapshots --- */

/* root -> (GC roots), root =shortcut=> global -registry-> Map -table-> (array)
 * -[0..2]-> Array -elements-> (array) of 8000 bytes; a closure in the Map's
 * table too. */
static void map_of_arrays(struct tgraph *g)
{
    memset(g, 0, sizeof(*g));
    uint32_t root = g_node(g, "synthetic", "", 0);
    uint32_t gc = g_node(g, "synthetic", "(GC roots)", 0);
    uint32_t glob = g_node(g, "object", "global", 40);
    uint32_t map = g_node(g, "object", "Map", 32);
    uint32_t table = g_node(g, "array", "", 100);
    g_edge(g, root, "element", NULL, 1, gc);
    g_edge(g, root, "shortcut", "global", 0, glob);
    g_edge(g, glob, "property", "registry", 0, map);
    g_edge(g, map, "internal", "table", 0, table);
    for (uint32_t i = 0; i < 3; i++) {
        uint32_t arr = g_node(g, "object", "Array", 16);
        uint32_t el = g_node(g, "array", "", 8000);
        g_edge(g, table, "element", NULL, i, arr);
        g_edge(g, arr, "internal", "elements", 0, el);
    }
    uint32_t fn = g_node(g, "closure", "handleRequest", 64);
    g_edge(g, table, "element", NULL, 3, fn);
    uint32_t code = g_node(g, "code", "", 500);
    g_edge(g, fn, "internal", "code", 0, code);
    /* a Map's entries, as V8 links them: internal edges named by slot */
    for (uint32_t i = 0; i < 2; i++) {
        uint32_t x = g_node(g, "object", "Session", 24);
        g_edge(g, table, "internal", i ? "18" : "17", 0, x);
    }
}

TEST(map_of_arrays)
{
    struct tgraph g;
    map_of_arrays(&g);
    struct isoprof_buf t;
    g_write(&g, &t, NULL);
    struct heapsnap *s = PARSE(&t);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(heapsnap_node_count(s), g.nn);
    CHECK_EQ_INT(heapsnap_edge_count(s), g.ne);
    struct heapsnap_node n;
    REQUIRE(heapsnap_node(s, 3, &n) == 0);
    CHECK_STR(n.type, "object");
    CHECK_STR(n.name, "Map");
    CHECK_EQ_INT(n.self_size, 32);
    CHECK_EQ_INT(n.edge_count, 1);
    CHECK(heapsnap_node(s, (uint32_t)g.nn, &n) == -EINVAL);
    struct heapsnap_edge e;
    REQUIRE(heapsnap_edge(s, 2, &e) == 0); /* global -registry-> Map */
    CHECK_STR(e.type, "property");
    CHECK_STR(e.name, "registry");
    CHECK_EQ_INT(e.from, 2);
    CHECK_EQ_INT(e.to, 3);
    CHECK(e.retaining);
    REQUIRE(heapsnap_edge(s, 0, &e) == 0);
    CHECK(e.name == NULL);
    CHECK_EQ_INT(e.index, 1);
    CHECK(heapsnap_edge(s, (uint32_t)g.ne, &e) == -EINVAL);

    struct heapsnap_dom *d = dominate(s);
    REQUIRE(d != NULL);
    CHECK_EQ_INT(heapsnap_dom_idom(d, 0), HEAPSNAP_NONE);
    CHECK_EQ_INT(heapsnap_dom_idom(d, 2), 0);
    CHECK_EQ_INT(heapsnap_dom_idom(d, 3), 2);
    CHECK_EQ_INT(heapsnap_dom_idom(d, 4), 3);
    CHECK_EQ_INT(heapsnap_dom_idom(d, 5), 4);                       /* Array [0] */
    CHECK_EQ_INT(heapsnap_dom_idom(d, 6), 5);                       /* its elements */
    uint64_t arrays = 3 * (16 + 8000), closure = 64 + 500 + 2 * 24; /* + the sessions */
    CHECK_EQ_INT(heapsnap_dom_retained(d, 5), 16 + 8000);
    CHECK_EQ_INT(heapsnap_dom_retained(d, 4), 100 + arrays + closure);
    CHECK_EQ_INT(heapsnap_dom_retained(d, 3), 32 + 100 + arrays + closure);
    CHECK_EQ_INT(heapsnap_dom_retained(d, 2), 40 + 32 + 100 + arrays + closure);
    CHECK_EQ_INT(heapsnap_dom_retained(d, 0), 40 + 32 + 100 + arrays + closure);
    struct heapsnap_dom_stats st;
    heapsnap_dom_stats(d, &st);
    CHECK_EQ_INT(st.reachable, g.nn);
    CHECK_EQ_INT(st.unreachable, 0);
    CHECK_EQ_INT(st.total, 40 + 32 + 100 + arrays + closure);

    struct heapsnap_pprof_result r;
    struct heapsnap_pprof_opts o = {.time_ns = 1700000000000000000ull};
    Profile *p = retained_profile(s, d, &o, &r);
    check_profile(p, d, &r);
    REQUIRE(p != NULL);
    CHECK_EQ_INT(p->time_nanos, 1700000000000000000ll);
    /* the Map held by `registry` retains what it holds */
    CHECK_EQ_INT(cum_of(p, "Map registry", 1), heapsnap_dom_retained(d, 3));
    CHECK_EQ_INT(cum_of(p, "Map registry", 0), 1 + 1 + 6 + 2 + 2);
    CHECK_EQ_INT(cum_of(p, "Session []", 0), 2);
    /* the three arrays are one path: elements are "[]" */
    const char *path[] = {"global global", "Map registry", "(array) table", "Array []",
                          "(array) elements"};
    CHECK(has_stack(p, path, 5));
    CHECK_EQ_INT(cum_of(p, "Array []", 0), 6);
    CHECK_EQ_INT(cum_of(p, "Array []", 1), 3 * (16 + 8000));
    const char *fpath[] = {"global global", "Map registry", "(array) table",
                           "(closure) handleRequest []", "(code) code"};
    CHECK(has_stack(p, fpath, 5));
    const char *gc[] = {"(GC roots) []"};
    CHECK(has_stack(p, gc, 1));
    const char *root[] = {HEAPSNAP_ROOT_FRAME};
    CHECK(has_stack(p, root, 1));
    CHECK_EQ_INT(p->n_comment, 0);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);

    /* element by element */
    o.index_frames = true;
    p = retained_profile(s, d, &o, &r);
    check_profile(p, d, &r);
    REQUIRE(p != NULL);
    const char *ipath[] = {"global global", "Map registry", "(array) table", "Array [1]",
                           "(array) elements"};
    CHECK(has_stack(p, ipath, 5));
    CHECK_EQ_INT(cum_of(p, "Array [1]", 1), 16 + 8000);
    const char *igc[] = {"(GC roots) [1]"};
    CHECK(has_stack(p, igc, 1));
    const char *islot[] = {"global global", "Map registry", "(array) table", "Session [18]"};
    CHECK(has_stack(p, islot, 4));
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
    heapsnap_dom_free(d);
    heapsnap_free(s);
    isoprof_buf_free(&t);
    g_free(&g);
}

/* root -> A, root -> B, A -x-> C, B -y-> C, C -> D: C's dominator is the
 * root, not a parent; its frame names the first edge into it (x). */
TEST(diamond)
{
    struct tgraph g = {0};
    uint32_t root = g_node(&g, "synthetic", "", 0);
    uint32_t a = g_node(&g, "object", "A", 10), b = g_node(&g, "object", "B", 20);
    uint32_t c = g_node(&g, "object", "C", 30), dd = g_node(&g, "string", "hello", 40);
    g_edge(&g, root, "property", "a", 0, a);
    g_edge(&g, root, "property", "b", 0, b);
    g_edge(&g, a, "property", "x", 0, c);
    g_edge(&g, b, "property", "y", 0, c);
    g_edge(&g, c, "property", "s", 0, dd);
    struct isoprof_buf t;
    g_write(&g, &t, NULL);
    struct heapsnap *s = PARSE(&t);
    REQUIRE(s != NULL);
    struct heapsnap_dom *d = dominate(s);
    REQUIRE(d != NULL);
    CHECK_EQ_INT(heapsnap_dom_idom(d, c), root);
    CHECK_EQ_INT(heapsnap_dom_idom(d, dd), c);
    CHECK_EQ_INT(heapsnap_dom_retained(d, a), 10);
    CHECK_EQ_INT(heapsnap_dom_retained(d, b), 20);
    CHECK_EQ_INT(heapsnap_dom_retained(d, c), 70);
    CHECK_EQ_INT(heapsnap_dom_retained(d, root), 100);
    struct heapsnap_pprof_result r;
    Profile *p = retained_profile(s, d, NULL, &r);
    check_profile(p, d, &r);
    REQUIRE(p != NULL);
    const char *cs[] = {"C x", "(string) s"};
    CHECK(has_stack(p, cs, 2));
    const char *as[] = {"A a"};
    CHECK(has_stack(p, as, 1));
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
    heapsnap_dom_free(d);
    heapsnap_free(s);
    isoprof_buf_free(&t);
    g_free(&g);
}

/* A Map held by a global's property, by the global's property cell
 * (internal) and by a stack slot (an element of a root that comes first
 * in the snapshot): its dominator is the root, which holds it by none of
 * these, so its frame takes the program's name for it, then V8's, and an
 * index only when nothing else holds it. */
TEST(named_holder_first)
{
    struct tgraph g = {0};
    uint32_t root = g_node(&g, "synthetic", "", 0);
    uint32_t stack = g_node(&g, "synthetic", "(Stack roots)", 0);
    uint32_t glob = g_node(&g, "object", "global", 8), cell = g_node(&g, "hidden", "cell", 4);
    uint32_t map = g_node(&g, "object", "Map", 16), map2 = g_node(&g, "object", "Map", 32);
    uint32_t map3 = g_node(&g, "object", "Map", 64);
    g_edge(&g, root, "element", NULL, 1, stack);
    g_edge(&g, root, "property", "global", 0, glob);
    g_edge(&g, stack, "element", NULL, 3, map);
    g_edge(&g, stack, "element", NULL, 4, map2);
    g_edge(&g, stack, "element", NULL, 5, map3);
    g_edge(&g, stack, "internal", "7", 0, map3);
    g_edge(&g, glob, "internal", "cell", 0, cell);
    g_edge(&g, cell, "internal", "value", 0, map);
    g_edge(&g, cell, "internal", "value2", 0, map2);
    g_edge(&g, glob, "property", "registry", 0, map);
    struct isoprof_buf t;
    g_write(&g, &t, NULL);
    struct heapsnap *s = PARSE(&t);
    REQUIRE(s != NULL);
    struct heapsnap_dom *d = dominate(s);
    REQUIRE(d != NULL);
    CHECK_EQ_INT(heapsnap_dom_idom(d, map), root);
    CHECK_EQ_INT(heapsnap_dom_idom(d, map2), root);
    struct heapsnap_pprof_result r;
    Profile *p = retained_profile(s, d, NULL, &r);
    check_profile(p, d, &r);
    REQUIRE(p != NULL);
    const char *m1[] = {"Map registry"}, *m2[] = {"Map value2"},
               *m3[] = {"(Stack roots) []", "Map []"};
    CHECK(has_stack(p, m1, 1));
    CHECK(has_stack(p, m2, 1));
    CHECK(has_stack(p, m3, 2));
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
    heapsnap_dom_free(d);
    heapsnap_free(s);
    isoprof_buf_free(&t);
    g_free(&g);
}

/* Weak edges retain nothing; a shortcut retains only from the root; a
 * node held only weakly, or not at all, is left out and said so. */
TEST(weak_shortcut_unreachable)
{
    struct tgraph g = {0};
    uint32_t root = g_node(&g, "synthetic", "", 0);
    uint32_t a = g_node(&g, "object", "A", 1), b = g_node(&g, "object", "B", 2);
    uint32_t c = g_node(&g, "object", "C", 4), w = g_node(&g, "object", "OnlyWeak", 8);
    uint32_t lone = g_node(&g, "object", "Lone", 16), sc = g_node(&g, "object", "Short", 32);
    uint32_t viaw = g_node(&g, "array", "", 64);
    g_edge(&g, root, "property", "a", 0, a);
    g_edge(&g, a, "weak", "w", 0, b); /* not retaining: B is C's */
    g_edge(&g, root, "property", "c", 0, c);
    g_edge(&g, c, "property", "b", 0, b);
    g_edge(&g, a, "weak", "ow", 0, w);
    g_edge(&g, w, "internal", "x", 0, viaw);
    g_edge(&g, lone, "property", "a", 0, a); /* from an unreachable node */
    g_edge(&g, a, "shortcut", "s", 0, sc);   /* not from the root: not retaining */
    struct isoprof_buf t;
    g_write(&g, &t, NULL);
    struct heapsnap *s = PARSE(&t);
    REQUIRE(s != NULL);
    struct heapsnap_edge e;
    REQUIRE(heapsnap_edge(s, 2, &e) == 0); /* A's first edge: weak */
    CHECK_STR(e.type, "weak");
    CHECK(!e.retaining);
    struct heapsnap_dom *d = dominate(s);
    REQUIRE(d != NULL);
    CHECK_EQ_INT(heapsnap_dom_idom(d, b), c);
    CHECK_EQ_INT(heapsnap_dom_retained(d, c), 6);
    CHECK_EQ_INT(heapsnap_dom_retained(d, a), 1);
    CHECK(!heapsnap_dom_reached(d, w));
    CHECK(!heapsnap_dom_reached(d, viaw));
    CHECK(!heapsnap_dom_reached(d, lone));
    CHECK(!heapsnap_dom_reached(d, sc));
    CHECK(heapsnap_dom_reached(d, root));
    CHECK_EQ_INT(heapsnap_dom_idom(d, w), HEAPSNAP_NONE);
    CHECK_EQ_INT(heapsnap_dom_retained(d, w), 0);
    struct heapsnap_dom_stats st;
    heapsnap_dom_stats(d, &st);
    CHECK_EQ_INT(st.reachable, 4);
    CHECK_EQ_INT(st.unreachable, 4);
    CHECK_EQ_INT(st.total, 7);
    struct heapsnap_pprof_result r;
    Profile *p = retained_profile(s, d, NULL, &r);
    check_profile(p, d, &r);
    REQUIRE(p != NULL);
    const char *bs[] = {"C c", "B b"}; /* the edge from its dominator, not A's weak one */
    CHECK(has_stack(p, bs, 2));
    REQUIRE(p->n_comment == 1);
    CHECK(strstr(pstr(p, p->comment[0]), "4 nodes the root does not reach") != NULL);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
    heapsnap_dom_free(d);
    heapsnap_free(s);
    isoprof_buf_free(&t);
    g_free(&g);

    /* the same shortcut from the root retains */
    memset(&g, 0, sizeof(g));
    root = g_node(&g, "synthetic", "", 0);
    sc = g_node(&g, "object", "Global", 5);
    g_edge(&g, root, "shortcut", "global", 0, sc);
    g_write(&g, &t, NULL);
    s = PARSE(&t);
    REQUIRE(s != NULL);
    d = dominate(s);
    REQUIRE(d != NULL);
    CHECK(heapsnap_dom_reached(d, sc));
    CHECK_EQ_INT(heapsnap_dom_retained(d, 0), 5);
    heapsnap_dom_free(d);
    heapsnap_free(s);
    isoprof_buf_free(&t);
    g_free(&g);
}

/* root -> A -> B -> C -> A, and C -> D. */
TEST(cycle)
{
    struct tgraph g = {0};
    uint32_t root = g_node(&g, "synthetic", "", 0);
    uint32_t a = g_node(&g, "object", "A", 1), b = g_node(&g, "object", "B", 2);
    uint32_t c = g_node(&g, "object", "C", 4), dd = g_node(&g, "object", "D", 8);
    g_edge(&g, root, "property", "a", 0, a);
    g_edge(&g, a, "property", "b", 0, b);
    g_edge(&g, b, "property", "c", 0, c);
    g_edge(&g, c, "property", "a", 0, a);
    g_edge(&g, c, "property", "d", 0, dd);
    g_edge(&g, dd, "property", "self", 0, dd);
    struct isoprof_buf t;
    g_write(&g, &t, NULL);
    struct heapsnap *s = PARSE(&t);
    REQUIRE(s != NULL);
    struct heapsnap_dom *d = dominate(s);
    REQUIRE(d != NULL);
    CHECK_EQ_INT(heapsnap_dom_idom(d, a), root);
    CHECK_EQ_INT(heapsnap_dom_idom(d, b), a);
    CHECK_EQ_INT(heapsnap_dom_idom(d, c), b);
    CHECK_EQ_INT(heapsnap_dom_idom(d, dd), c);
    CHECK_EQ_INT(heapsnap_dom_retained(d, a), 15);
    CHECK_EQ_INT(heapsnap_dom_retained(d, b), 14);
    CHECK_EQ_INT(heapsnap_dom_retained(d, c), 12);
    struct heapsnap_pprof_result r;
    Profile *p = retained_profile(s, d, NULL, &r);
    check_profile(p, d, &r);
    REQUIRE(p != NULL);
    const char *ds[] = {"A a", "B b", "C c", "D d"};
    CHECK(has_stack(p, ds, 4));
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
    heapsnap_dom_free(d);
    heapsnap_free(s);
    isoprof_buf_free(&t);
    g_free(&g);
}

/* Under a cap of 4 paths, 1,000 items of 5 bytes in one container (one
 * path: "Item []") outrank 10 objects of 100 bytes that each have a frame
 * of their own: the paths kept are the ones that hold the most together,
 * not the largest single nodes. */
TEST(caps_keep_what_holds_most)
{
    struct tgraph g = {0};
    uint32_t root = g_node(&g, "synthetic", "", 0);
    for (int i = 0; i < 10; i++) {
        char name[16];
        snprintf(name, sizeof(name), "Single%d", i);
        g_edge(&g, root, "property", name, 0, g_node(&g, "object", name, 100 + (uint64_t)i));
    }
    uint32_t list = g_node(&g, "object", "List", 8);
    g_edge(&g, root, "property", "list", 0, list);
    uint32_t backing = g_node(&g, "array", "", 16);
    g_edge(&g, list, "internal", "elements", 0, backing);
    for (uint32_t i = 0; i < 1000; i++)
        g_edge(&g, backing, "element", NULL, i, g_node(&g, "object", "Item", 5));
    struct isoprof_buf t;
    g_write(&g, &t, NULL);
    struct heapsnap *s = PARSE(&t);
    REQUIRE(s != NULL);
    struct heapsnap_dom *d = dominate(s);
    REQUIRE(d != NULL);
    struct heapsnap_pprof_result r;
    struct heapsnap_pprof_opts o = {.max_samples = 4};
    Profile *p = retained_profile(s, d, &o, &r);
    check_profile(p, d, &r);
    REQUIRE(p != NULL);
    CHECK_EQ_INT(p->n_sample, 4); /* (root), List, its elements, the items */
    const char *items[] = {"List list", "(array) elements", "Item []"};
    CHECK(has_stack(p, items, 3));
    CHECK_EQ_INT(cum_of(p, "Item []", 0), 1000);
    CHECK_EQ_INT(cum_of(p, "Item []", 1), 5000);
    CHECK_EQ_INT(cum_of(p, HEAPSNAP_ROOT_FRAME, 1), 10 * 100 + 45); /* the singles, folded */
    CHECK_EQ_INT(r.folded, 10);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);

    /* with room for one more path, the largest single gets it */
    o.max_samples = 5;
    p = retained_profile(s, d, &o, &r);
    check_profile(p, d, &r);
    REQUIRE(p != NULL);
    const char *big[] = {"Single9 Single9"};
    CHECK(has_stack(p, big, 1));
    CHECK_EQ_INT(r.folded, 9);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
    heapsnap_dom_free(d);
    heapsnap_free(s);
    isoprof_buf_free(&t);
    g_free(&g);
}

/* --- random graphs against brute force --- */

static struct isoprof_rng rng;

static uint32_t rnd(uint32_t n)
{
    return (uint32_t)(isoprof_rng_next(&rng) % n);
}

/* A random graph of n nodes, about `deg` edges a node; `local` keeps most
 * edges between nearby nodes (chains and deep trees), else they go
 * anywhere. */
static void random_graph(struct tgraph *g, uint32_t n, uint32_t deg, bool local)
{
    static const char *const types[] = {"object", "array",  "string", "closure",
                                        "code",   "hidden", "native", "object shape"};
    static const char *const names[] = {"Map", "Array", "Object", "Foo", "", "Buffer", "run"};
    static const char *const props[] = {"a", "b", "next", "items", "cache", "map", "x"};
    memset(g, 0, sizeof(*g));
    g_node(g, "synthetic", "", 0);
    for (uint32_t i = 1; i < n; i++)
        g_node(g, types[rnd(ISOPROF_ARRAY_SIZE(types))], names[rnd(ISOPROF_ARRAY_SIZE(names))],
               rnd(1000));
    uint32_t ne = n * deg;
    for (uint32_t k = 0; k < ne; k++) {
        uint32_t from, to;
        if (k < n / 8) {
            from = 0; /* a few roots */
            to = 1 + rnd(n - 1);
        } else if (local) {
            from = rnd(n);
            to = (from + 1 + rnd(6)) % n;
        } else {
            from = rnd(n);
            to = rnd(n);
        }
        uint32_t t = rnd(20);
        if (t < 2)
            g_edge(g, from, "weak", "w", 0, to);
        else if (t < 3)
            g_edge(g, from, "shortcut", "s", 0, to);
        else if (t < 8)
            g_edge(g, from, "element", NULL, rnd(100), to);
        else if (t < 9)
            g_edge(g, from, "hidden", NULL, rnd(10), to);
        else
            g_edge(g, from,
                   t < 12   ? "internal"
                   : t < 14 ? "context"
                            : "property",
                   props[rnd(ISOPROF_ARRAY_SIZE(props))], 0, to);
    }
}

static bool retaining_edge(const struct tedge *e)
{
    return strcmp(e->type, "weak") != 0 && (strcmp(e->type, "shortcut") != 0 || e->from == 0);
}

/* The retaining edges of g as adjacency lists: node u's targets are
 * to[off[u] .. off[u + 1]). */
struct adj {
    uint32_t *off, *to;
};

static void adj_build(const struct tgraph *g, struct adj *a)
{
    a->off = isoprof_calloc(g->nn + 1, sizeof(uint32_t));
    a->to = isoprof_malloc((g->ne + 1) * sizeof(uint32_t));
    for (size_t i = 0; i < g->ne; i++)
        if (retaining_edge(&g->e[i]))
            a->off[g->e[i].from + 1]++;
    for (size_t u = 0; u < g->nn; u++)
        a->off[u + 1] += a->off[u];
    uint32_t *at = isoprof_malloc((g->nn + 1) * sizeof(uint32_t));
    memcpy(at, a->off, (g->nn + 1) * sizeof(uint32_t));
    for (size_t i = 0; i < g->ne; i++)
        if (retaining_edge(&g->e[i]))
            a->to[at[g->e[i].from]++] = g->e[i].to;
    isoprof_free(at);
}

/* Which nodes the root reaches when node `cut` is taken out (cut = n:
 * none), over the retaining edges. */
static void reach_without(size_t n, const struct adj *a, uint32_t cut, bool *seen, uint32_t *q)
{
    memset(seen, 0, n);
    if (cut == 0)
        return;
    size_t h = 0, tl = 0;
    seen[0] = true;
    q[tl++] = 0;
    while (h < tl) {
        uint32_t u = q[h++];
        for (uint32_t j = a->off[u]; j < a->off[u + 1]; j++) {
            uint32_t v = a->to[j];
            if (v == cut || seen[v])
                continue;
            seen[v] = true;
            q[tl++] = v;
        }
    }
}

/* Brute force: dom[d * n + v] when every path to v passes through d. */
static void brute_dominators(const struct tgraph *g, bool *reach, bool *dom)
{
    size_t n = g->nn;
    struct adj a;
    adj_build(g, &a);
    bool *seen = isoprof_malloc(n);
    uint32_t *q = isoprof_malloc(n * sizeof(*q));
    reach_without(n, &a, (uint32_t)n, reach, q);
    for (uint32_t d = 0; d < n; d++) {
        reach_without(n, &a, d, seen, q);
        for (uint32_t v = 0; v < n; v++)
            dom[(size_t)d * n + v] = reach[d] && reach[v] && (d == v || !seen[v]);
    }
    isoprof_free(seen);
    isoprof_free(q);
    isoprof_free(a.off);
    isoprof_free(a.to);
}

static void check_random(uint32_t n, uint32_t deg, bool local)
{
    struct tgraph g;
    random_graph(&g, n, deg, local);
    struct isoprof_buf t;
    g_write(&g, &t, NULL);
    struct heapsnap *s = PARSE(&t);
    REQUIRE(s != NULL);
    struct heapsnap_dom *d = dominate(s);
    REQUIRE(d != NULL);
    bool *reach = isoprof_malloc(n), *dom = isoprof_malloc((size_t)n * n);
    brute_dominators(&g, reach, dom);
    size_t nreach = 0;
    uint64_t total = 0;
    for (uint32_t v = 0; v < n; v++) {
        CHECK_EQ_INT(heapsnap_dom_reached(d, v), reach[v]);
        if (!reach[v]) {
            CHECK_EQ_INT(heapsnap_dom_idom(d, v), HEAPSNAP_NONE);
            CHECK_EQ_INT(heapsnap_dom_retained(d, v), 0);
            continue;
        }
        nreach++;
        total += g.n[v].self;
        /* the idom: the strict dominator that every other one dominates */
        uint32_t want = HEAPSNAP_NONE;
        size_t best = 0;
        for (uint32_t x = 0; x < n; x++) {
            if (x == v || !dom[(size_t)x * n + v])
                continue;
            size_t k = 0;
            for (uint32_t y = 0; y < n; y++)
                k += dom[(size_t)y * n + x];
            if (want == HEAPSNAP_NONE || k > best) {
                want = x;
                best = k;
            }
        }
        CHECK_EQ_INT(heapsnap_dom_idom(d, v), want);
        uint64_t ret = 0;
        for (uint32_t u = 0; u < n; u++)
            if (dom[(size_t)v * n + u])
                ret += g.n[u].self;
        CHECK_EQ_INT(heapsnap_dom_retained(d, v), ret);
        if (test_failed_) {
            fprintf(stderr, "  random graph n=%u deg=%u local=%d, node %u\n", n, deg, local, v);
            break;
        }
    }
    struct heapsnap_dom_stats st;
    heapsnap_dom_stats(d, &st);
    CHECK_EQ_INT(st.reachable, nreach);
    CHECK_EQ_INT(st.unreachable, n - nreach);
    CHECK_EQ_INT(st.total, total);

    /* the profile adds up, whatever its caps */
    struct heapsnap_pprof_opts caps[] = {
        {0},
        {.max_depth = 2},
        {.max_samples = 5},
        {.max_frames = 3},
        {.max_depth = 1, .max_samples = 2, .max_frames = 1},
        {.index_frames = true},
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(caps) && !test_failed_; i++) {
        struct heapsnap_pprof_result r;
        Profile *p = retained_profile(s, d, &caps[i], &r);
        check_profile(p, d, &r);
        if (p == NULL)
            break;
        unsigned depth = caps[i].max_depth ? caps[i].max_depth : HEAPSNAP_PPROF_DEPTH;
        for (size_t k = 0; k < p->n_sample; k++)
            CHECK(p->sample[k]->n_location_id <= depth + 1);
        if (caps[i].max_samples)
            CHECK(p->n_sample <= caps[i].max_samples);
        if (caps[i].max_frames)
            CHECK(p->n_function <= caps[i].max_frames + 2);
        if (r.deeper)
            CHECK(func_by_name(p, HEAPSNAP_DEEPER_FRAME) != NULL);
        if (i == 2 && st.reachable > 20)
            CHECK(r.folded > 0);
        perftools__profiles__profile__free_unpacked(p, NULL);
        pprof_buf_free(&r.pprof);
    }
    /* with a spill file, in windows of 1 to 7 predecessors */
    check_spill(t.data, t.len, s, d, 1 + n % 7, "random graph");
    isoprof_free(reach);
    isoprof_free(dom);
    heapsnap_dom_free(d);
    heapsnap_free(s);
    isoprof_buf_free(&t);
    g_free(&g);
}

TEST(random_against_brute_force)
{
    isoprof_rng_seed(&rng, 42);
    for (int k = 0; k < 24 && !test_failed_; k++) {
        uint32_t n = 2 + rnd(400);
        check_random(n, 1 + rnd(5), k % 3 == 0);
    }
    check_random(300, 1, true); /* sparse: long chains */
    check_random(300, 8, false);
    check_random(1, 0, false); /* the root alone */
}

/* A chain of 1,000,000 nodes: no recursion anywhere (a recursive DFS
 * would take the thread's stack), and the depth cap holds. */
TEST(long_chain)
{
    size_t n = 1000000;
    struct isoprof_buf t;
    isoprof_buf_init(&t, SIZE_MAX / 2);
    isoprof_buf_printf(&t,
                       "{\"snapshot\":{\"meta\":{\"node_fields\":[\"type\",\"name\",\"self_size\","
                       "\"edge_count\"],\"node_types\":[[\"object\",\"synthetic\"]],"
                       "\"edge_fields\":[\"type\",\"name_or_index\",\"to_node\"],"
                       "\"edge_types\":[[\"property\"]]},\"node_count\":%zu,\"edge_count\":%zu},"
                       "\"nodes\":[1,1,0,1",
                       n, n - 1);
    for (size_t i = 1; i < n; i++)
        isoprof_buf_printf(&t, ",0,0,1,%d", i + 1 < n);
    isoprof_buf_puts(&t, "],\"edges\":[");
    for (size_t i = 1; i < n; i++)
        isoprof_buf_printf(&t, "%s0,2,%zu", i > 1 ? "," : "", i * 4);
    isoprof_buf_puts(&t, "],\"strings\":[\"Node\",\"\",\"next\"]}");
    REQUIRE(t.err == 0);
    struct heapsnap *s = PARSE(&t);
    REQUIRE(s != NULL);
    struct heapsnap_dom *d = dominate(s);
    REQUIRE(d != NULL);
    CHECK_EQ_INT(heapsnap_dom_retained(d, 0), n - 1);
    CHECK_EQ_INT(heapsnap_dom_retained(d, 1), n - 1);
    CHECK_EQ_INT(heapsnap_dom_idom(d, (uint32_t)n - 1), n - 2);
    struct heapsnap_pprof_result r;
    Profile *p = retained_profile(s, d, NULL, &r);
    check_profile(p, d, &r);
    REQUIRE(p != NULL);
    CHECK_EQ_INT(p->n_sample, HEAPSNAP_PPROF_DEPTH + 2); /* (root), 32 paths, (deeper) */
    CHECK_EQ_INT(r.deeper, n - 1 - HEAPSNAP_PPROF_DEPTH);
    CHECK_EQ_INT(cum_of(p, HEAPSNAP_DEEPER_FRAME, 1), n - 1 - HEAPSNAP_PPROF_DEPTH);
    CHECK(p->n_comment == 1 && strstr(pstr(p, p->comment[0]), HEAPSNAP_DEEPER_FRAME) != NULL);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
    /* spilled: the search misses the edge cache, the predecessors take 10
     * windows */
    check_spill(t.data, t.len, s, d, 100000, "long chain");
    heapsnap_dom_free(d);
    heapsnap_free(s);
    isoprof_buf_free(&t);
}

/* An object with more distinct property names than HEAPSNAP_PPROF_FRESH:
 * the candidates among one path's children stop there, the rest fold into
 * that path, and everything still adds up (the table of candidates stays
 * bounded whatever a hostile snapshot holds). */
TEST(many_distinct_frames)
{
    size_t k = HEAPSNAP_PPROF_FRESH + 4464, n = k + 2;
    struct isoprof_buf t;
    isoprof_buf_init(&t, SIZE_MAX / 2);
    isoprof_buf_printf(&t,
                       "{\"snapshot\":{\"meta\":{\"node_fields\":[\"type\",\"name\",\"self_size\","
                       "\"edge_count\"],\"node_types\":[[\"object\",\"synthetic\"]],"
                       "\"edge_fields\":[\"type\",\"name_or_index\",\"to_node\"],"
                       "\"edge_types\":[[\"property\"]]},\"node_count\":%zu,\"edge_count\":%zu},"
                       "\"nodes\":[1,0,0,1,0,1,10,%zu",
                       n, k + 1, k);
    for (size_t i = 0; i < k; i++)
        isoprof_buf_puts(&t, ",0,2,1,0");
    isoprof_buf_puts(&t, "],\"edges\":[0,3,4");
    for (size_t i = 0; i < k; i++)
        isoprof_buf_printf(&t, ",0,%zu,%zu", 4 + i, (2 + i) * 4);
    isoprof_buf_puts(&t, "],\"strings\":[\"(root)\",\"Holder\",\"Leaf\",\"h\"");
    for (size_t i = 0; i < k; i++)
        isoprof_buf_printf(&t, ",\"p%zu\"", i);
    isoprof_buf_puts(&t, "]}");
    REQUIRE(t.err == 0);
    struct heapsnap *s = PARSE(&t);
    REQUIRE(s != NULL);
    struct heapsnap_dom *d = dominate(s);
    REQUIRE(d != NULL);
    struct heapsnap_pprof_opts o = {.max_samples = 2 * k, .max_frames = 2 * k};
    struct heapsnap_pprof_result r;
    Profile *p = retained_profile(s, d, &o, &r);
    check_profile(p, d, &r);
    REQUIRE(p != NULL);
    /* (root), Holder h, and one path a candidate leaf */
    CHECK_EQ_INT(p->n_sample, HEAPSNAP_PPROF_FRESH + 2);
    CHECK_EQ_INT(r.folded, k - HEAPSNAP_PPROF_FRESH);
    CHECK_EQ_INT(r.objects, n);
    CHECK_EQ_INT(cum_of(p, "Holder h", 0), (int64_t)k + 1);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
    heapsnap_dom_free(d);
    heapsnap_free(s);
    isoprof_buf_free(&t);
}

/* --- chunks, prefixes, strings --- */

/* Whether two parsed snapshots hold the same graph and strings. */
static bool same_snapshot(const struct heapsnap *a, const struct heapsnap *b)
{
    if (heapsnap_node_count(a) != heapsnap_node_count(b) ||
        heapsnap_edge_count(a) != heapsnap_edge_count(b) ||
        heapsnap_string_count(a) != heapsnap_string_count(b) ||
        heapsnap_bytes(a) != heapsnap_bytes(b))
        return false;
    for (uint32_t i = 0; i < heapsnap_node_count(a); i++) {
        struct heapsnap_node x, y;
        heapsnap_node(a, i, &x);
        heapsnap_node(b, i, &y);
        if (strcmp(x.type, y.type) || strcmp(x.name, y.name) || x.self_size != y.self_size ||
            x.first_edge != y.first_edge || x.edge_count != y.edge_count)
            return false;
    }
    for (uint32_t i = 0; i < heapsnap_edge_count(a); i++) {
        struct heapsnap_edge x, y;
        heapsnap_edge(a, i, &x);
        heapsnap_edge(b, i, &y);
        if (strcmp(x.type, y.type) || (x.name == NULL) != (y.name == NULL) ||
            (x.name && strcmp(x.name, y.name)) || x.index != y.index || x.from != y.from ||
            x.to != y.to || x.retaining != y.retaining)
            return false;
    }
    return true;
}

TEST(chunks_of_every_size)
{
    isoprof_rng_seed(&rng, 7);
    struct tgraph g;
    random_graph(&g, 40, 3, false);
    /* names with escapes and non-ASCII, split anywhere by the chunks */
    snprintf(g.n[3].name, sizeof(g.n[3].name), "caf\xc3\xa9 \xf0\x9f\x98\x80 \"q\"\\");
    snprintf(g.n[4].name, sizeof(g.n[4].name), "tab\there\nnl");
    struct isoprof_buf t;
    g_write(&g, &t, NULL);
    struct heapsnap *whole = PARSE(&t);
    REQUIRE(whole != NULL);
    struct heapsnap_node n;
    heapsnap_node(whole, 3, &n);
    CHECK_STR(n.name, g.n[3].name);
    heapsnap_node(whole, 4, &n);
    CHECK_STR(n.name, g.n[4].name);
    struct heapsnap_dom *dw = dominate(whole);
    REQUIRE(dw != NULL);
    for (size_t chunk = 1; chunk <= t.len + 1 && !test_failed_; chunk++) {
        struct heapsnap *s;
        char *why;
        int rc = parse_chunked(t.data, t.len, chunk, 0, &s, &why);
        if (rc != 0) {
            fprintf(stderr, "chunks of %zu: %s: %s\n", chunk, heapsnap_reason(rc), why);
            test_failed_ = 1;
        } else {
            CHECK(same_snapshot(whole, s));
            struct heapsnap_dom *d = dominate(s);
            for (uint32_t v = 0; d && v < g.nn; v++) {
                CHECK_EQ_INT(heapsnap_dom_idom(d, v), heapsnap_dom_idom(dw, v));
                CHECK_EQ_INT(heapsnap_dom_retained(d, v), heapsnap_dom_retained(dw, v));
            }
            heapsnap_dom_free(d);
        }
        isoprof_free(why);
        heapsnap_free(s);
        if (chunk > 64)
            chunk += chunk / 8; /* every size up to 64, then sparser */
    }
    heapsnap_dom_free(dw);
    heapsnap_free(whole);
    isoprof_buf_free(&t);
    g_free(&g);
}

TEST(every_prefix_is_incomplete)
{
    struct tgraph g;
    map_of_arrays(&g);
    struct isoprof_buf t;
    g_write(&g, &t, NULL);
    for (size_t cut = 0; cut < t.len && !test_failed_; cut++) {
        struct heapsnap *s;
        char *why;
        int rc = parse_chunked(t.data, cut, cut ? cut : 1, 0, &s, &why);
        if (rc != HEAPSNAP_E_INCOMPLETE) {
            fprintf(stderr, "cut at %zu of %zu: %s: %s\n", cut, t.len, heapsnap_reason(rc),
                    why ? why : "");
            test_failed_ = 1;
        }
        CHECK(s == NULL);
        CHECK(why != NULL);
        isoprof_free(why);
    }
    /* a finished parser is spent */
    struct heapsnap_parser *p;
    REQUIRE(heapsnap_parser_new(0, &p) == 0);
    CHECK_EQ_INT(heapsnap_parser_feed(p, t.data, t.len), HEAPSNAP_OK);
    struct heapsnap *s;
    REQUIRE(heapsnap_parser_finish(p, &s, NULL) == HEAPSNAP_OK);
    heapsnap_free(s);
    CHECK_EQ_INT(heapsnap_parser_finish(p, &s, NULL), HEAPSNAP_E_INCOMPLETE);
    CHECK_EQ_INT(heapsnap_parser_feed(p, "{", 1), HEAPSNAP_E_INCOMPLETE);
    heapsnap_parser_free(p);
    isoprof_buf_free(&t);
    g_free(&g);
}

/* A snapshot of two nodes whose strings are `strings` (a JSON array's
 * inside). */
static void two_nodes(struct isoprof_buf *t, const char *strings)
{
    isoprof_buf_init(t, SIZE_MAX / 2);
    isoprof_buf_printf(
        t,
        "{\"snapshot\":{\"meta\":{\"node_fields\":[\"type\",\"name\",\"self_size\",\"edge_count\"],"
        "\"node_types\":[[\"synthetic\",\"object\"]],\"edge_fields\":[\"type\",\"name_or_index\","
        "\"to_node\"],\"edge_types\":[[\"property\"]]},\"node_count\":2,\"edge_count\":1},"
        "\"nodes\":[0,0,0,1,1,1,8,0],\"edges\":[0,0,4],\"strings\":[%s]}",
        strings);
}

TEST(strings)
{
    struct isoprof_buf t;
    /* escapes, a pair, lone halves, NUL */
    two_nodes(&t, "\"\",\"a\\u00e9\\ud83d\\ude00\\ud800x\\udc00\\u0000\\/\"");
    struct heapsnap *s = PARSE(&t);
    REQUIRE(s != NULL);
    struct heapsnap_node n;
    heapsnap_node(s, 1, &n);
    CHECK_STR(n.name, "a\xc3\xa9\xf0\x9f\x98\x80\xef\xbf\xbdx\xef\xbf\xbd\xef\xbf\xbd/");
    heapsnap_free(s);
    isoprof_buf_free(&t);

    /* a long string keeps HEAPSNAP_MAX_NAME bytes, cut at a character */
    struct isoprof_buf big;
    isoprof_buf_init(&big, SIZE_MAX / 2);
    isoprof_buf_puts(&big, "\"\",\"x");
    for (int i = 0; i < 3000; i++)
        isoprof_buf_puts(&big, "\xc3\xa9");
    isoprof_buf_puts(&big, "\"");
    two_nodes(&t, big.data);
    s = PARSE(&t);
    REQUIRE(s != NULL);
    heapsnap_node(s, 1, &n);
    CHECK_EQ_INT(strlen(n.name), HEAPSNAP_MAX_NAME - 1);
    CHECK(isoprof_utf8_valid_prefix((const uint8_t *)n.name, strlen(n.name)) == strlen(n.name));
    /* and fed a byte at a time, the same */
    struct heapsnap *c;
    char *why;
    REQUIRE(parse_chunked(t.data, t.len, 1, 0, &c, &why) == 0);
    CHECK(same_snapshot(s, c));
    heapsnap_free(c);
    heapsnap_free(s);
    isoprof_buf_free(&t);
    isoprof_buf_free(&big);
}

/* --- refusals --- */

/* text must be refused for reason, whole and a byte at a time, with a why
 * that contains needle. */
static void refused_(const char *text, size_t len, size_t budget, int reason, const char *needle,
                     int line)
{
    for (int pass = 0; pass < 2; pass++) {
        struct heapsnap *s = NULL;
        char *why = NULL;
        int rc = pass == 0 ? heapsnap_parse(text, len, budget, &s, &why)
                           : parse_chunked(text, len, 1, budget, &s, &why);
        if (rc != reason || s != NULL || why == NULL || strstr(why, needle) == NULL) {
            fprintf(stderr, "%s:%d: %s: got %s (%s), want %s with \"%s\"\n", __FILE__, line,
                    pass ? "byte by byte" : "whole", heapsnap_reason(rc), why ? why : "no why",
                    heapsnap_reason(reason), needle);
            test_failed_ = 1;
        }
        heapsnap_free(s);
        isoprof_free(why);
    }
}
#define REFUSED(text, reason, needle)                                                              \
    refused_((text), strlen(text), 0, (reason), (needle), __LINE__)

/* A small valid snapshot with one part replaced: meta (M), the counts (C),
 * nodes (N), edges (E), strings (S). */
static char *snap(const char *meta, const char *counts, const char *nodes, const char *edges,
                  const char *strings)
{
    return isoprof_asprintf(
        "{\"snapshot\":{\"meta\":%s,%s},\"nodes\":[%s],\"edges\":[%s],\"strings\":[%s]}",
        meta ? meta
             : "{\"node_fields\":[\"type\",\"name\",\"id\",\"self_size\",\"edge_count\"],"
               "\"node_types\":[[\"synthetic\",\"object\"],\"string\",\"number\",\"number\","
               "\"number\"],\"edge_fields\":[\"type\",\"name_or_index\",\"to_node\"],"
               "\"edge_types\":[[\"property\",\"element\",\"weak\"],\"string_or_number\","
               "\"node\"]}",
        counts ? counts : "\"node_count\":3,\"edge_count\":2",
        nodes ? nodes : "0,0,1,0,2, 1,1,3,10,0, 1,1,5,20,0", edges ? edges : "0,2,5,1,7,10",
        strings ? strings : "\"\",\"Foo\",\"p\"");
}

static void refused_snap(char *text, int reason, const char *needle, int line)
{
    refused_(text, strlen(text), 0, reason, needle, line);
    isoprof_free(text);
}
#define REFUSED_SNAP(args, reason, needle) refused_snap(snap args, (reason), (needle), __LINE__)

TEST(refusals)
{
    /* the base is valid */
    char *ok = snap(NULL, NULL, NULL, NULL, NULL);
    struct heapsnap *s = parse_(ok, strlen(ok), 0, __LINE__);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(heapsnap_node_count(s), 3);
    struct heapsnap_edge e;
    REQUIRE(heapsnap_edge(s, 1, &e) == 0);
    CHECK(e.name == NULL && e.index == 7 && e.to == 2);
    heapsnap_free(s);
    isoprof_free(ok);

    CHECK_EQ_INT(heapsnap_reason(HEAPSNAP_OK)[0], 'o');
    CHECK_STR(heapsnap_reason(HEAPSNAP_E_EDGE_SUM), "edge_sum");
    CHECK_STR(heapsnap_reason(-1), "unknown");
    CHECK_STR(heapsnap_reason(HEAPSNAP_NREASONS), "unknown");
    for (int r = 0; r < HEAPSNAP_NREASONS; r++)
        CHECK(strcmp(heapsnap_reason(r), "unknown") != 0);

    /* not JSON */
    REFUSED("hello", HEAPSNAP_E_JSON, "not a JSON value");
    REFUSED("[1,2]", HEAPSNAP_E_JSON, "not a JSON object");
    REFUSED("42", HEAPSNAP_E_JSON, "not a JSON object");
    REFUSED("\"x\"", HEAPSNAP_E_JSON, "not a JSON object");
    REFUSED("{\"a\":1,}", HEAPSNAP_E_JSON, "key must come");
    REFUSED("{\"a\":[1}", HEAPSNAP_E_JSON, "closes an array");
    REFUSED("{\"a\":01}", HEAPSNAP_E_JSON, "bad number");
    REFUSED("{\"a\":\"\xff\"}", HEAPSNAP_E_JSON, "UTF-8");
    REFUSED("{\"a\":\"\\q\"}", HEAPSNAP_E_JSON, "escape");
    REFUSED("{} x", HEAPSNAP_E_JSON, "bytes after");
    REFUSED_SNAP((NULL, NULL, "0,0,1,0,2, 1,1,3,10,0, 1,1,5,20,0 x", NULL, NULL), HEAPSNAP_E_JSON,
                 "',' or ']'");
    REFUSED_SNAP((NULL, NULL, "0,0,1,0,2,,1", NULL, NULL), HEAPSNAP_E_JSON, "not a JSON value");
    REFUSED_SNAP((NULL, NULL, "0,0,1,0,02", NULL, NULL), HEAPSNAP_E_JSON, "leading zero");

    /* bad meta */
    REFUSED_SNAP(("{\"node_fields\":[\"type\",\"name\",\"id\",\"edge_count\"],\"node_types\":"
                  "[[\"synthetic\"]],\"edge_fields\":[\"type\",\"name_or_index\",\"to_node\"],"
                  "\"edge_types\":[[\"property\"]]}",
                  NULL, NULL, NULL, NULL),
                 HEAPSNAP_E_META, "no \"self_size\"");
    REFUSED_SNAP(("{\"node_fields\":[\"type\",\"name\",\"self_size\",\"edge_count\",\"type\"],"
                  "\"node_types\":[[\"synthetic\"]],\"edge_fields\":[\"type\",\"name_or_index\","
                  "\"to_node\"],\"edge_types\":[[\"property\"]]}",
                  NULL, NULL, NULL, NULL),
                 HEAPSNAP_E_META, "twice");
    REFUSED_SNAP(("{\"node_fields\":[\"type\",1],\"node_types\":[[\"x\"]],\"edge_fields\":[],"
                  "\"edge_types\":[[]]}",
                  NULL, NULL, NULL, NULL),
                 HEAPSNAP_E_META, "node_fields[1] is not a string");
    REFUSED_SNAP(("{\"node_fields\":[\"type\",\"name\",\"self_size\",\"edge_count\"],"
                  "\"node_types\":[\"string\",[\"synthetic\"]],\"edge_fields\":[\"type\","
                  "\"name_or_index\",\"to_node\"],\"edge_types\":[[\"property\"]]}",
                  NULL, NULL, NULL, NULL),
                 HEAPSNAP_E_META, "no type names");
    REFUSED_SNAP(("{\"node_fields\":[\"type\",\"name\",\"self_size\",\"edge_count\"],"
                  "\"edge_fields\":[\"type\",\"name_or_index\",\"to_node\"],\"edge_types\":"
                  "[[\"property\"]]}",
                  NULL, NULL, NULL, NULL),
                 HEAPSNAP_E_META, "no node_types");
    REFUSED_SNAP(("[]", NULL, NULL, NULL, NULL), HEAPSNAP_E_META, "meta is not an object");
    REFUSED("{\"snapshot\":1}", HEAPSNAP_E_META, "snapshot is not an object");

    /* missing */
    REFUSED_SNAP((NULL, "\"node_count\":3", NULL, NULL, NULL), HEAPSNAP_E_MISSING,
                 "nodes before snapshot.edge_count");
    REFUSED("{\"nodes\":[]}", HEAPSNAP_E_MISSING, "nodes before snapshot.meta");
    char *t = snap(NULL, NULL, NULL, NULL, NULL);
    char *cut = strstr(t, ",\"strings\"");
    memcpy(cut, "}", 2);
    refused_(t, strlen(t), 0, HEAPSNAP_E_MISSING, "no strings", __LINE__);
    isoprof_free(t);
    REFUSED("{}", HEAPSNAP_E_MISSING, "no snapshot");

    /* values */
    REFUSED_SNAP((NULL, NULL, "0,0,1,0,2, 1,1,3,-10,0, 1,1,5,20,0", NULL, NULL), HEAPSNAP_E_VALUE,
                 "nodes[8] is not a non-negative integer");
    REFUSED_SNAP((NULL, NULL, "0,0,1,0,2, 1,1,3,1.5,0, 1,1,5,20,0", NULL, NULL), HEAPSNAP_E_VALUE,
                 "not an integer");
    REFUSED_SNAP((NULL, NULL, "0,0,1,0,2, 9,1,3,10,0, 1,1,5,20,0", NULL, NULL), HEAPSNAP_E_VALUE,
                 "type 9 is past the 2 node types");
    REFUSED_SNAP((NULL, NULL, NULL, "0,2,5,7,7,10", NULL), HEAPSNAP_E_VALUE,
                 "type 7 is past the 3 edge types");
    REFUSED_SNAP((NULL, NULL, "0,0,1,0,2, 1,1,3,99999999999999999999999,0", NULL, NULL),
                 HEAPSNAP_E_VALUE, "past 64 bits");
    REFUSED_SNAP((NULL, NULL, NULL, "0,4294967296,5,1,7,10", NULL), HEAPSNAP_E_VALUE,
                 "past 32 bits");
    REFUSED_SNAP((NULL, "\"node_count\":\"3\",\"edge_count\":2", NULL, NULL, NULL),
                 HEAPSNAP_E_VALUE, "node_count is not a number");
    REFUSED_SNAP((NULL, "\"node_count\":3.0,\"edge_count\":2", NULL, NULL, NULL), HEAPSNAP_E_VALUE,
                 "not a non-negative integer");
    REFUSED_SNAP((NULL, NULL, "\"a\"", NULL, NULL), HEAPSNAP_E_VALUE, "nodes[0]");
    REFUSED_SNAP((NULL, NULL, NULL, NULL, "\"\",1"), HEAPSNAP_E_VALUE, "strings[1] is not a");

    /* counts */
    REFUSED_SNAP((NULL, NULL, "0,0,1,0,2, 1,1,3,10,0, 1,1,5,20", NULL, NULL), HEAPSNAP_E_COUNT,
                 "nodes holds 14 values, not node_count (3) x 5 = 15");
    REFUSED_SNAP((NULL, NULL, "0,0,1,0,2, 1,1,3,10,0, 1,1,5,20,0,1", NULL, NULL), HEAPSNAP_E_COUNT,
                 "more than node_count");
    REFUSED_SNAP((NULL, NULL, NULL, "0,2,5,1,7,10,1", NULL), HEAPSNAP_E_COUNT,
                 "more than edge_count");
    REFUSED_SNAP((NULL, NULL, NULL, "0,2,5,1,7", NULL), HEAPSNAP_E_COUNT, "edges holds 5 values");
    REFUSED_SNAP((NULL, "\"node_count\":0,\"edge_count\":0", "", "", NULL), HEAPSNAP_E_COUNT,
                 "no root");

    /* edges */
    REFUSED_SNAP((NULL, NULL, NULL, "0,2,6,1,7,10", NULL), HEAPSNAP_E_EDGE,
                 "edges[2] (edge 0): to_node 6 is not a multiple");
    REFUSED_SNAP((NULL, NULL, NULL, "0,2,5,1,7,15", NULL), HEAPSNAP_E_EDGE,
                 "to_node 15 is past the nodes");
    REFUSED_SNAP((NULL, NULL, "0,0,1,0,1, 1,1,3,10,0, 1,1,5,20,0", NULL, NULL), HEAPSNAP_E_EDGE_SUM,
                 "add up to 1, edge_count is 2");
    REFUSED_SNAP((NULL, NULL, "0,0,1,0,2, 1,1,3,10,1, 1,1,5,20,0", NULL, NULL), HEAPSNAP_E_EDGE_SUM,
                 "pass edge_count");

    /* strings */
    REFUSED_SNAP((NULL, NULL, "0,0,1,0,2, 1,3,3,10,0, 1,1,5,20,0", NULL, NULL), HEAPSNAP_E_STRING,
                 "node 1: name 3 is past the 3 strings");
    REFUSED_SNAP((NULL, NULL, NULL, "0,9,5,1,7,10", NULL), HEAPSNAP_E_STRING,
                 "edge 0: name 9 is past the 3 strings");
    ok = snap(NULL, NULL, NULL, "0,2,5,1,9999,10", NULL); /* an element's index is no string */
    s = parse_(ok, strlen(ok), 0, __LINE__);
    heapsnap_free(s);
    isoprof_free(ok);

    /* nesting */
    struct isoprof_buf deep;
    isoprof_buf_init(&deep, SIZE_MAX / 2);
    isoprof_buf_puts(&deep, "{\"trace_tree\":");
    for (int i = 0; i < HEAPSNAP_MAX_NESTING; i++)
        isoprof_buf_putc(&deep, '[');
    refused_(deep.data, deep.len, 0, HEAPSNAP_E_DEPTH, "nesting deeper than", __LINE__);
    isoprof_buf_free(&deep);

    /* caps */
    REFUSED_SNAP((NULL, "\"node_count\":60000000,\"edge_count\":2", NULL, NULL, NULL),
                 HEAPSNAP_E_TOOBIG, "past the cap");
    REFUSED_SNAP((NULL, "\"node_count\":3,\"edge_count\":250000001", NULL, NULL, NULL),
                 HEAPSNAP_E_TOOBIG, "past the cap");
}

/* A claimed 10 M nodes under a 1 MB budget is refused when the count is
 * read: nothing is allocated for it. */
/* Members the parser does not know are skipped whole, however deep, and
 * a known key inside one (a "nodes" in an object it skips) is not taken
 * for the real one. */
TEST(unknown_members)
{
    char *plain = snap(NULL, NULL, NULL, NULL, NULL);
    char *meta =
        isoprof_asprintf("{\"location_fields\":[\"object_index\",\"script_id\"],\"x\":{\"a\":1,"
                         "\"node_fields\":[\"bogus\"]},\"node_fields\":[\"type\",\"name\",\"id\","
                         "\"self_size\",\"edge_count\"],\"node_types\":[[\"synthetic\",\"object\"],"
                         "\"string\",\"number\",\"number\",\"number\"],\"edge_fields\":[\"type\","
                         "\"name_or_index\",\"to_node\"],\"edge_types\":[[\"property\",\"element\","
                         "\"weak\"],\"string_or_number\",\"node\"]}");
    char *deep = snap(meta,
                      "\"node_count\":3,\"extra\":{\"edge_count\":{\"a\":[1,{}]}},"
                      "\"edge_count\":2",
                      NULL, NULL, NULL);
    /* top-level members before, between and after the known ones */
    struct isoprof_buf t;
    isoprof_buf_init(&t, SIZE_MAX / 2);
    isoprof_buf_printf(&t, "{\"x\":{\"nodes\":[9,9,9],\"y\":{\"strings\":[\"z\"]}},%s", deep + 1);
    t.len--; /* the closing brace, then more */
    isoprof_buf_puts(&t, ",\"samples\":[],\"locations\":[0,1],\"trace_tree\":[[],{\"a\":"
                         "null,\"b\":true,\"c\":-1.5e3}]}");
    struct heapsnap *a = parse_(plain, strlen(plain), 0, __LINE__);
    struct heapsnap *b = PARSE(&t);
    REQUIRE(a != NULL && b != NULL);
    CHECK(same_snapshot(a, b));
    struct heapsnap *c;
    char *why;
    REQUIRE(parse_chunked(t.data, t.len, 1, 0, &c, &why) == 0);
    CHECK(same_snapshot(a, c));
    heapsnap_free(c);
    heapsnap_free(b);
    heapsnap_free(a);
    isoprof_buf_free(&t);
    isoprof_free(deep);
    isoprof_free(meta);
    isoprof_free(plain);
}

TEST(budget)
{
    char *big = snap(NULL, "\"node_count\":10000000,\"edge_count\":2", NULL, NULL, NULL);
    const char *count = strstr(big, "\"node_count\"");
    size_t head = (size_t)(count - big), upto = head + strlen("\"node_count\":10000000,");
    struct heapsnap_parser *p;
    REQUIRE(heapsnap_parser_new(1 << 20, &p) == 0);
    CHECK_EQ_INT(heapsnap_parser_feed(p, big, head), HEAPSNAP_OK);
    unsigned long before = isoprof_alloc_count();
    int rc = heapsnap_parser_feed(p, big + head, upto - head);
    unsigned long allocs = isoprof_alloc_count() - before;
    CHECK_EQ_INT(rc, HEAPSNAP_E_TOOBIG);
    CHECK_EQ_INT(allocs, 1); /* the why */
    struct heapsnap *s;
    char *why;
    CHECK_EQ_INT(heapsnap_parser_finish(p, &s, &why), HEAPSNAP_E_TOOBIG);
    CHECK(why && strstr(why, "node_count") && strstr(why, "budget"));
    isoprof_free(why);
    heapsnap_parser_free(p);
    isoprof_free(big);

    /* accepted iff the result fits: its own size is a budget that works,
     * one byte less does not (whole and byte by byte) */
    isoprof_rng_seed(&rng, 3);
    struct tgraph g;
    random_graph(&g, 60, 3, false);
    struct isoprof_buf t;
    g_write(&g, &t, NULL);
    s = PARSE(&t);
    REQUIRE(s != NULL);
    size_t bytes = heapsnap_bytes(s);
    heapsnap_free(s);
    s = parse_(t.data, t.len, bytes, __LINE__);
    CHECK(s != NULL && heapsnap_bytes(s) == bytes);
    heapsnap_free(s);
    refused_(t.data, t.len, bytes - 1, HEAPSNAP_E_TOOBIG, "budget", __LINE__);
    refused_(t.data, t.len, 100, HEAPSNAP_E_TOOBIG, "holds no snapshot", __LINE__);
    isoprof_buf_free(&t);
    g_free(&g);

    /* the dominators' working set: refused before allocating */
    map_of_arrays(&g);
    g_write(&g, &t, NULL);
    s = PARSE(&t);
    REQUIRE(s != NULL);
    struct heapsnap_dom *d = NULL;
    before = isoprof_alloc_count();
    CHECK_EQ_INT(heapsnap_dominators(s, heapsnap_dom_need(s) - 1, &d), ISOPROF_ETOOBIG);
    CHECK_EQ_INT(isoprof_alloc_count() - before, 0);
    CHECK(d == NULL);
    CHECK_EQ_INT(heapsnap_dominators(s, heapsnap_dom_need(s), &d), 0);
    CHECK(heapsnap_dominators(NULL, 0, &d) == -EINVAL);
    struct heapsnap_pprof_result r;
    struct heapsnap_pprof_opts o = {.max_depth = 1001};
    CHECK(heapsnap_pprof(s, d, &o, &r) == -EINVAL);
    heapsnap_dom_free(d);
    heapsnap_free(s);
    isoprof_buf_free(&t);
    g_free(&g);
}

/* --- allocation failures --- */

typedef int (*op_fn)(void *ctx);

/* Runs op once to count its allocations, then once per allocation with
 * that one failing: each must fail (nomem) and leak nothing (ASan). */
static void walk(const char *what, op_fn op, void *ctx, int nomem_rc)
{
    unsigned long before = isoprof_alloc_count();
    CHECK_EQ_INT(op(ctx), 0);
    unsigned long n = isoprof_alloc_count() - before;
    CHECK(n > 0);
    for (unsigned long i = 0; i < n && !test_failed_; i++) {
        isoprof_alloc_fail_after((long)i);
        int rc = op(ctx);
        isoprof_alloc_fail_after(-1);
        if (rc != nomem_rc) {
            fprintf(stderr, "%s: allocation %lu of %lu failing gave %d\n", what, i, n, rc);
            test_failed_ = 1;
        }
    }
    fprintf(stderr, "  %s: %lu allocations walked\n", what, n);
}

struct oom_ctx {
    struct isoprof_buf t;
    size_t chunk;
    struct heapsnap *s;
    struct heapsnap_dom *d;
};

static int op_parse(void *c)
{
    struct oom_ctx *x = c;
    struct heapsnap *s;
    char *why;
    int rc = parse_chunked(x->t.data, x->t.len, x->chunk, 0, &s, &why);
    if (rc == 0 && heapsnap_node_count(s) != heapsnap_node_count(x->s))
        rc = -1;
    if (rc == HEAPSNAP_E_NOMEM && why != NULL && strcmp(why, "out of memory") != 0)
        rc = -2;
    heapsnap_free(s);
    isoprof_free(why);
    return rc;
}

static int op_dom(void *c)
{
    struct oom_ctx *x = c;
    struct heapsnap_dom *d = NULL;
    int rc = heapsnap_dominators(x->s, 0, &d);
    if (rc == 0 && heapsnap_dom_retained(d, 0) != heapsnap_dom_retained(x->d, 0))
        rc = -1;
    heapsnap_dom_free(d);
    return rc;
}

static int op_pprof(void *c)
{
    struct oom_ctx *x = c;
    struct heapsnap_pprof_result r;
    struct heapsnap_pprof_opts o = {.max_depth = 3, .max_samples = 20};
    int rc = heapsnap_pprof(x->s, x->d, &o, &r);
    if (rc == 0)
        pprof_buf_free(&r.pprof);
    return rc;
}

/* The daemon's conversion, with a spill file: every allocation that
 * fails is -ENOMEM, nothing leaks (no descriptor either: the walk would
 * run out). */
static int op_retained(void *c)
{
    struct oom_ctx *x = c;
    struct mem_src src = {x->t.data, x->t.len, 4093};
    struct heapsnap_retained_opts o = {.spill_fd = spill_fd(), .pprof = {.max_samples = 20}};
    struct heapsnap_pprof_result r;
    char *why = NULL;
    int rc = heapsnap_retained(&o, mem_read, &src, &r, &why);
    if (rc == 0) {
        struct heapsnap_dom_stats st;
        heapsnap_dom_stats(x->d, &st);
        if (r.objects != st.reachable)
            rc = -1;
        pprof_buf_free(&r.pprof);
    }
    if (rc == -ENOMEM && why != NULL)
        rc = -2;
    isoprof_free(why);
    return rc;
}

TEST(alloc_failures)
{
    struct oom_ctx x = {0};
    isoprof_rng_seed(&rng, 11);
    struct tgraph g;
    /* past the first sizes of the strings arena (64 KiB) and of their
     * index (4,096 entries), so that both grow */
    random_graph(&g, 5000, 2, false);
    for (size_t i = 0; i < g.nn; i++)
        snprintf(g.n[i].name, sizeof(g.n[i].name), "AFairlyLongClassName%zu", i);
    g_write(&g, &x.t, NULL);
    x.s = PARSE(&x.t);
    REQUIRE(x.s != NULL);
    x.d = dominate(x.s);
    REQUIRE(x.d != NULL);
    x.chunk = x.t.len;
    walk("parse", op_parse, &x, HEAPSNAP_E_NOMEM);
    x.chunk = 97;
    walk("parse in chunks", op_parse, &x, HEAPSNAP_E_NOMEM);
    walk("dominators", op_dom, &x, -ENOMEM);
    walk("pprof", op_pprof, &x, -ENOMEM);
    walk("retained, spilled", op_retained, &x, -ENOMEM);
    heapsnap_dom_free(x.d);
    heapsnap_free(x.s);
    isoprof_buf_free(&x.t);
    g_free(&g);
}

/* --- a real snapshot --- */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    struct isoprof_buf b;
    isoprof_buf_init(&b, (size_t)1 << 30);
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        isoprof_buf_append(&b, tmp, n);
    fclose(f);
    char *out = NULL;
    if (isoprof_buf_take(&b, &out, len) != 0)
        return NULL;
    return out;
}

TEST(real_node_snapshot)
{
    if (system("command -v node >/dev/null 2>&1") != 0) {
        fprintf(stderr, "  SKIP: node is not on PATH\n");
        return;
    }
    char *dir = tmp_dir();
    char cmd[2048];
    /* a Map of 20 arrays of 1,000 numbers each, held by a global; the
     * script writes the counts its own JSON.parse of the file finds */
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && node -e '"
             "const v8 = require(\"v8\"), fs = require(\"fs\");"
             /* built in a function: nothing of the script's frame holds an array */
             "function build() {"
             "  const m = new Map();"
             "  for (let i = 0; i < 20; i++) m.set(\"k\" + i, new Array(1000).fill(i + 0.5));"
             "  return m;"
             "}"
             "globalThis.registry = build();"
             "const f = v8.writeHeapSnapshot(\"%s/a.heapsnapshot\");"
             "const s = JSON.parse(fs.readFileSync(f, \"utf8\")).snapshot;"
             "fs.writeFileSync(\"%s/counts\", s.node_count + \" \" + s.edge_count);"
             "' >/dev/null 2>&1",
             dir, dir, dir);
    REQUIRE(system(cmd) == 0);
    char path[1024];
    snprintf(path, sizeof(path), "%s/counts", dir);
    size_t len;
    char *counts = read_file(path, &len);
    REQUIRE(counts != NULL);
    unsigned long nodes = 0, edges = 0;
    REQUIRE(sscanf(counts, "%lu %lu", &nodes, &edges) == 2);
    isoprof_free(counts);
    snprintf(path, sizeof(path), "%s/a.heapsnapshot", dir);
    char *text = read_file(path, &len);
    REQUIRE(text != NULL);

    struct heapsnap *s = parse_(text, len, 0, __LINE__);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(heapsnap_node_count(s), nodes);
    CHECK_EQ_INT(heapsnap_edge_count(s), edges);
    size_t chunks[] = {10240, 65536, 4093};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(chunks); i++) {
        struct heapsnap *c;
        char *why;
        int rc = parse_chunked(text, len, chunks[i], 0, &c, &why);
        CHECK_EQ_INT(rc, 0);
        CHECK(rc != 0 || same_snapshot(s, c));
        heapsnap_free(c);
        isoprof_free(why);
    }
    struct heapsnap_dom *d = dominate(s);
    REQUIRE(d != NULL);
    /* the Map: an object named Map held by a property `registry` */
    uint32_t map = HEAPSNAP_NONE;
    for (uint32_t e = 0; e < heapsnap_edge_count(s); e++) {
        struct heapsnap_edge x;
        struct heapsnap_node n;
        heapsnap_edge(s, e, &x);
        heapsnap_node(s, x.to, &n);
        if (x.name && strcmp(x.name, "registry") == 0 && strcmp(n.name, "Map") == 0)
            map = x.to;
    }
    REQUIRE(map != HEAPSNAP_NONE);
    /* the bytes of the arrays it holds: Map -table-> (array) -> Array
     * -elements-> (array) */
    uint64_t arrays = 0;
    size_t narrays = 0;
    struct heapsnap_node mn, tn, an, en;
    heapsnap_node(s, map, &mn);
    for (uint32_t e = mn.first_edge; e < mn.first_edge + mn.edge_count; e++) {
        struct heapsnap_edge x, y, z;
        heapsnap_edge(s, e, &x);
        if (x.name == NULL || strcmp(x.name, "table") != 0)
            continue;
        heapsnap_node(s, x.to, &tn);
        for (uint32_t f = tn.first_edge; f < tn.first_edge + tn.edge_count; f++) {
            heapsnap_edge(s, f, &y);
            heapsnap_node(s, y.to, &an);
            if (strcmp(an.type, "object") != 0 || strcmp(an.name, "Array") != 0)
                continue;
            narrays++;
            arrays += an.self_size;
            for (uint32_t h = an.first_edge; h < an.first_edge + an.edge_count; h++) {
                heapsnap_edge(s, h, &z);
                heapsnap_node(s, z.to, &en);
                if (z.name && strcmp(z.name, "elements") == 0)
                    arrays += en.self_size;
            }
        }
    }
    uint64_t held = heapsnap_dom_retained(d, map);
    fprintf(stderr,
            "  %lu nodes, %lu edges; the Map holds %zu arrays of %" PRIu64
            " bytes and retains %" PRIu64 "\n",
            nodes, edges, narrays, arrays, held);
    CHECK_EQ_INT(narrays, 20);
    CHECK(arrays >= 20 * 1000 * 8); /* 1,000 doubles each */
    CHECK(held >= arrays);
    struct heapsnap_pprof_result r;
    Profile *p = retained_profile(s, d, NULL, &r);
    check_profile(p, d, &r);
    REQUIRE(p != NULL);
    CHECK(cum_of(p, "Map registry", 1) >= (int64_t)arrays);
    perftools__profiles__profile__free_unpacked(p, NULL);
    pprof_buf_free(&r.pprof);
    /* V8's own text with a spill file and only the names the profile uses,
     * the predecessors in windows of 4,096 */
    check_spill(text, len, s, d, 4096, "real snapshot");
    heapsnap_dom_free(d);
    heapsnap_free(s);
    isoprof_free(text);
}

int main(void)
{
    RUN(map_of_arrays);
    RUN(diamond);
    RUN(named_holder_first);
    RUN(weak_shortcut_unreachable);
    RUN(cycle);
    RUN(caps_keep_what_holds_most);
    RUN(random_against_brute_force);
    RUN(long_chain);
    RUN(many_distinct_frames);
    RUN(chunks_of_every_size);
    RUN(every_prefix_is_incomplete);
    RUN(strings);
    RUN(refusals);
    RUN(unknown_members);
    RUN(budget);
    RUN(alloc_failures);
    RUN(real_node_snapshot);
    TEST_EXIT();
}

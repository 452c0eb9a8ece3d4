/*
 * test_tree.c - pprof_tree_add: the call tree a flame graph draws and a
 * diff compares, checked against pprof_top on real recordings.
 */
#include "../test.h"
#include "common.h"

static int cpu(const char *json, size_t len, struct pprof_buf *out)
{
    struct pprof_cpu_opts o = {.interval_ns = 1000000};
    struct pprof_result r;
    int rc = pprof_from_cpu_json(json, len, &o, &r, NULL);
    if (rc == 0)
        *out = r.pprof;
    return rc;
}

static int fixture(const char *name, int heap, struct pprof_buf *out)
{
    size_t len;
    char *json = read_fixture(name, &len);
    if (json == NULL)
        return -ENOENT;
    int rc;
    if (heap) {
        struct pprof_heap_opts o = {.time_ns = 1, .interval_bytes = 65536};
        struct pprof_result r;
        rc = pprof_from_heap_json(json, len, &o, &r, NULL);
        if (rc == 0)
            *out = r.pprof;
    } else {
        rc = cpu(json, len, out);
    }
    isoprof_free(json);
    return rc;
}

/* The function of node k (the root: "all"). */
static const char *name_of(const struct pprof_tree *t, size_t k)
{
    return t->nodes[k].fn == PPROF_TREE_ROOT ? "all" : t->fns[t->nodes[k].fn].name;
}

/* Node k's function appears on the path above it. */
static int recursive(const struct pprof_tree *t, size_t k)
{
    for (uint32_t p = t->nodes[k].parent; p != 0; p = t->nodes[p].parent)
        if (t->nodes[p].fn == t->nodes[k].fn)
            return 1;
    return 0;
}

/* Self and total per function, as the page's table counts them, equal
 * pprof_top's flat and cum: on a Node, a workerd and a Deno recording. */
TEST(tree_agrees_with_top)
{
    static const char *const names[] = {"node20-cpu.json", "workerd-cpu.json", "deno-cpu.json",
                                        "node20-heap.json"};
    for (size_t f = 0; f < sizeof(names) / sizeof(*names); f++) {
        struct pprof_buf b = {0};
        REQUIRE(fixture(names[f], strstr(names[f], "heap") != NULL, &b) == 0);
        struct pprof_tree t = {0};
        REQUIRE(pprof_tree_add(&t, &b, 0, NULL) == 0);
        struct pprof_top top;
        REQUIRE(pprof_top(&b, -1, &top) == 0);
        CHECK_EQ_INT(t.nodes[0].total[0], top.total);
        CHECK_EQ_INT(t.nodes[0].total[1], 0);
        CHECK_STR(t.type, top.type);
        CHECK_STR(t.unit, top.unit);
        CHECK(t.profiles[0] == 1 && t.profiles[1] == 0);
        int64_t sum_self = t.nodes[0].self[0];
        for (size_t k = 1; k < t.nnodes; k++) {
            const struct pprof_tree_node *n = &t.nodes[k];
            CHECK(n->parent < k);
            CHECK(n->self[0] <= n->total[0]);
            sum_self += n->self[0];
            /* a node's total is its self and its children's totals */
            int64_t kids = 0;
            for (uint32_t c = n->child; c != 0; c = t.nodes[c].next)
                kids += t.nodes[c].total[0];
            CHECK_EQ_INT(n->self[0] + kids, n->total[0]);
        }
        CHECK_EQ_INT(sum_self, t.nodes[0].total[0]);
        for (size_t r = 0; r < top.n; r++) {
            int64_t self = 0, total = 0;
            for (size_t k = 1; k < t.nnodes; k++) {
                const struct pprof_tree_fn *fn = &t.fns[t.nodes[k].fn];
                if (strcmp(fn->name, top.rows[r].name) != 0 ||
                    strcmp(fn->file, top.rows[r].file) != 0)
                    continue;
                self += t.nodes[k].self[0];
                if (!recursive(&t, k))
                    total += t.nodes[k].total[0];
            }
            if (self != top.rows[r].flat || total != top.rows[r].cum)
                fprintf(stderr, "%s: %s: self %lld total %lld, top %lld %lld\n", names[f],
                        top.rows[r].name, (long long)self, (long long)total,
                        (long long)top.rows[r].flat, (long long)top.rows[r].cum);
            CHECK_EQ_INT(self, top.rows[r].flat);
            CHECK_EQ_INT(total, top.rows[r].cum);
        }
        pprof_top_free(&top);
        pprof_tree_free(&t);
        pprof_buf_free(&b);
    }
}

#define CF(name)                                                                                   \
    "{\"functionName\":\"" name "\",\"url\":\"file:///srv/m.js\",\"lineNumber\":4,"                \
    "\"columnNumber\":0}"
#define NODE(id, name, hits, kids)                                                                 \
    "{\"id\":" #id ",\"callFrame\":" CF(name) ",\"hitCount\":" #hits ",\"children\":[" kids "]}"

/* root -> main -> a -> b -> a -> b: recursion keeps its own path. */
static const char *rec =
    "{\"startTime\":0,\"endTime\":10,\"nodes\":[" NODE(1, "(root)", 0, "2") "," NODE(
        2, "main", 1, "3") "," NODE(3, "a", 0, "4") "," NODE(4, "b", 0,
                                                             "5") "," NODE(5, "a", 2,
                                                                           "6") "," NODE(6, "b", 5,
                                                                                         "") "]}";
/* root -> main -> {a: 1, c: 3}: another version of the same code. */
static const char *other =
    "{\"startTime\":100,\"endTime\":200,\"nodes\":[" NODE(9, "(root)", 0, "8") "," NODE(
        8, "main", 0, "7,6") "," NODE(7, "a", 1, "") "," NODE(6, "c", 3, "") "]}";

/* The node reached from the root through names[0..n). 0: none. */
static uint32_t path(const struct pprof_tree *t, const char *const *names, size_t n)
{
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = t->nodes[k].child;
        while (c != 0 && strcmp(name_of(t, c), names[i]) != 0)
            c = t->nodes[c].next;
        if (c == 0)
            return 0;
        k = c;
    }
    return k;
}

TEST(tree_paths_and_sets)
{
    struct pprof_buf a = {0}, b = {0};
    REQUIRE(cpu(rec, strlen(rec), &a) == 0);
    REQUIRE(cpu(other, strlen(other), &b) == 0);
    struct pprof_tree t = {0};
    REQUIRE(pprof_tree_add(&t, &a, 0, NULL) == 0);
    REQUIRE(pprof_tree_add(&t, &a, 0, NULL) == 0); /* the same window twice: values double */
    REQUIRE(pprof_tree_add(&t, &b, 1, NULL) == 0);
    CHECK(t.profiles[0] == 2 && t.profiles[1] == 1);
    CHECK_EQ_INT(t.period, 1000000);
    CHECK_EQ_INT(t.nodes[0].total[0], 2 * 8 * 1000000);
    CHECK_EQ_INT(t.nodes[0].total[1], 4 * 1000000);
    static const char *const deep[] = {"main", "a", "b", "a", "b"};
    uint32_t leaf = path(&t, deep, 5), inner = path(&t, deep, 3);
    REQUIRE(leaf != 0 && inner != 0);
    CHECK_EQ_INT(t.nodes[leaf].self[0], 2 * 5 * 1000000);
    CHECK_EQ_INT(t.nodes[inner].total[0], 2 * 7 * 1000000);
    CHECK_EQ_INT(t.nodes[inner].self[0], 0);
    CHECK_STR(t.fns[t.nodes[leaf].fn].file, "/srv/m.js");
    CHECK_EQ_INT(t.fns[t.nodes[leaf].fn].line, 5);
    /* the sets share the nodes they both have */
    static const char *const ma[] = {"main", "a"}, *const mc[] = {"main", "c"};
    uint32_t na = path(&t, ma, 2), nc = path(&t, mc, 2);
    REQUIRE(na != 0 && nc != 0);
    CHECK_EQ_INT(t.nodes[na].total[0], 2 * 7 * 1000000);
    CHECK_EQ_INT(t.nodes[na].total[1], 1000000);
    CHECK_EQ_INT(t.nodes[nc].total[0], 0);
    CHECK_EQ_INT(t.nodes[nc].self[1], 3 * 1000000);
    CHECK(t.time_nanos[1] > t.time_nanos[0]);
    pprof_tree_free(&t);
    pprof_tree_free(&t); /* zeroed: harmless */
    pprof_tree_free(NULL);
    pprof_buf_free(&a);
    pprof_buf_free(&b);
}

TEST(tree_rejects)
{
    struct pprof_buf c = {0}, h = {0};
    REQUIRE(fixture("node20-cpu.json", 0, &c) == 0);
    REQUIRE(fixture("node20-heap.json", 1, &h) == 0);
    struct pprof_tree t = {0};
    char *why = NULL;
    REQUIRE(pprof_tree_add(&t, &c, 0, NULL) == 0);
    size_t nodes = t.nnodes;
    /* cpu and heap do not mix, in either set; nothing is added */
    CHECK_EQ_INT(pprof_tree_add(&t, &h, 1, &why), ISOPROF_EPROFILE);
    REQUIRE(why != NULL);
    CHECK(strstr(why, "do not mix") != NULL);
    isoprof_free(why);
    CHECK(t.nnodes == nodes && t.profiles[1] == 0);
    uint8_t junk[] = {0x0a, 0xff};
    struct pprof_buf j = {junk, sizeof(junk)};
    CHECK_EQ_INT(pprof_tree_add(&t, &j, 0, NULL), ISOPROF_EPROTOBUF);
    CHECK_EQ_INT(pprof_tree_add(&t, &c, 2, NULL), -EINVAL);
    CHECK_EQ_INT(pprof_tree_add(NULL, &c, 0, NULL), -EINVAL);
    pprof_tree_free(&t);
    pprof_buf_free(&c);
    pprof_buf_free(&h);
}

/* Every allocation failing in turn: an error, never a crash or a leak
 * (the ASan build checks the leaks). */
TEST(tree_oom)
{
    struct pprof_buf b = {0};
    REQUIRE(fixture("workerd-cpu.json", 0, &b) == 0);
    int ok = 0;
    for (int n = 0; n < 100000 && !ok; n++) {
        struct pprof_tree t = {0};
        isoprof_alloc_fail_after(n);
        int rc = pprof_tree_add(&t, &b, 0, NULL);
        isoprof_alloc_fail_after(-1);
        CHECK(rc == 0 || rc == -ENOMEM);
        ok = rc == 0;
        pprof_tree_free(&t);
    }
    CHECK(ok);
    pprof_buf_free(&b);
}

int main(void)
{
    RUN(tree_agrees_with_top);
    RUN(tree_paths_and_sets);
    RUN(tree_rejects);
    RUN(tree_oom);
    TEST_EXIT();
}

/*
 * flamegraph.c - the flame graph page, folded stacks and .cpuprofile of a
 * call tree (flamegraph.h).
 */
#include "flamegraph.h"

#include "base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* page.cmake's output: the page's files, NUL-terminated. */
extern const char isoprof_page_html[], isoprof_page_css[], isoprof_page_js[];

/* The largest JSON the page carries (the tree is capped far below). */
#define FG_JSON_MAX ((size_t)1 << 30)

/* --- the tree in display order --- */

/* Each node's children sorted by (name, file): kids[off[k] .. off[k + 1]). */
struct order {
    uint32_t *kids;
    uint32_t *off;
};

struct sort_item {
    uint32_t parent, node;
    const char *name, *file;
};

static int item_cmp(const void *a, const void *b)
{
    const struct sort_item *x = a, *y = b;
    if (x->parent != y->parent)
        return x->parent < y->parent ? -1 : 1;
    int c = strcmp(x->name, y->name);
    if (c == 0)
        c = strcmp(x->file, y->file);
    return c ? c : (x->node < y->node ? -1 : x->node > y->node);
}

static void order_free(struct order *o)
{
    isoprof_free(o->kids);
    isoprof_free(o->off);
}

static int order_build(const struct pprof_tree *t, struct order *o)
{
    size_t n = t->nnodes;
    struct sort_item *it = isoprof_calloc(n ? n : 1, sizeof(*it));
    o->kids = isoprof_calloc(n ? n : 1, sizeof(*o->kids));
    o->off = isoprof_calloc(n + 1, sizeof(*o->off));
    if (it == NULL || o->kids == NULL || o->off == NULL) {
        isoprof_free(it);
        order_free(o);
        return -ENOMEM;
    }
    size_t m = 0;
    for (size_t k = 1; k < n; k++) {
        const struct pprof_tree_fn *f = &t->fns[t->nodes[k].fn];
        it[m++] = (struct sort_item){t->nodes[k].parent, (uint32_t)k, f->name, f->file};
        o->off[t->nodes[k].parent + 1]++;
    }
    qsort(it, m, sizeof(*it), item_cmp);
    for (size_t k = 0; k < n; k++)
        o->off[k + 1] += o->off[k];
    for (size_t i = 0; i < m; i++)
        o->kids[i] = it[i].node;
    isoprof_free(it);
    return 0;
}

/* A depth-first walk's stack: a node and the next of its children to visit. */
struct walk {
    struct {
        uint32_t node, next;
    } * s;
    size_t n, cap;
};

static int walk_push(struct walk *w, uint32_t node, uint32_t first_kid)
{
    if (w->n == w->cap) {
        size_t ncap = w->cap ? w->cap * 2 : 64;
        void *ns = isoprof_realloc(w->s, ncap * sizeof(*w->s));
        if (ns == NULL)
            return -ENOMEM;
        w->s = ns;
        w->cap = ncap;
    }
    w->s[w->n].node = node;
    w->s[w->n].next = first_kid;
    w->n++;
    return 0;
}

static int write_all(FILE *f, const void *p, size_t n)
{
    return n == 0 || fwrite(p, 1, n, f) == n ? 0 : -EIO;
}

/* --- the page --- */

/* t's node k is too narrow to draw at any zoom the page offers by default:
 * folded. A set with a zero total does not hold a node up. */
static int narrow(const struct pprof_tree *t, uint32_t k, const struct fg_info *in)
{
    int sets = in->diff ? 2 : 1;
    for (int s = 0; s < sets; s++) {
        double root = (double)t->nodes[0].total[s];
        if (root > 0 && (double)t->nodes[k].total[s] >= in->fold_share * root)
            return 0;
    }
    return in->fold_share > 0;
}

struct page {
    const struct pprof_tree *t;
    const struct fg_info *in;
    struct isoprof_buf *b;
    uint32_t *frame;       /* fn -> frame index + 1; 0: not yet in "frames" */
    uint32_t nframes;      /* frames written (the root's is 0) */
    uint32_t folded_frame; /* 0: not yet written */
    uint64_t folded_nodes;
    uint32_t *size; /* nodes in each subtree */
};

static void put_pairs(struct isoprof_buf *b, const struct fg_pair *p, size_t n)
{
    isoprof_buf_putc(b, '[');
    for (size_t i = 0; i < n; i++) {
        isoprof_buf_puts(b, i ? ",[" : "[");
        isoprof_json_str(b, p[i].key);
        isoprof_buf_putc(b, ',');
        isoprof_json_str(b, p[i].value);
        isoprof_buf_putc(b, ']');
    }
    isoprof_buf_putc(b, ']');
}

static void put_frame(struct isoprof_buf *b, const char *name, const char *file, int64_t line)
{
    isoprof_buf_puts(b, ",[");
    isoprof_json_str(b, name);
    isoprof_buf_putc(b, ',');
    isoprof_json_str(b, file);
    isoprof_buf_printf(b, ",%" PRId64 "]", line);
}

/* The frame index of node k's function, written to "frames" (the buffer
 * fr) when first seen. */
static uint32_t page_frame(struct page *pg, struct isoprof_buf *fr, uint32_t k)
{
    uint32_t fn = pg->t->nodes[k].fn;
    if (pg->frame[fn] == 0) {
        const struct pprof_tree_fn *f = &pg->t->fns[fn];
        put_frame(fr, f->name, f->file, f->line);
        pg->frame[fn] = ++pg->nframes + 1;
    }
    return pg->frame[fn] - 1;
}

static void page_node(struct page *pg, uint32_t frame, const int64_t total[2],
                      const int64_t self[2], uint32_t nkids)
{
    if (pg->in->diff)
        isoprof_buf_printf(pg->b, "%u,%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%u,", frame,
                           total[0], self[0], total[1], self[1], nkids);
    else
        isoprof_buf_printf(pg->b, "%u,%" PRId64 ",%" PRId64 ",%u,", frame, total[0], self[0],
                           nkids);
}

/* The nodes in pre-order into pg->b, the frames they name into fr. */
static int page_nodes(struct page *pg, const struct order *o, struct isoprof_buf *fr)
{
    const struct pprof_tree *t = pg->t;
    struct walk w = {0};
    int rc = 0;
    /* the root, then each node's record as it is pushed; a node's narrow
     * children become one "(folded)" record after its other children */
    uint32_t nk = 0;
    for (uint32_t i = o->off[0]; i < o->off[1]; i++)
        nk += !narrow(t, o->kids[i], pg->in);
    int has_narrow = nk < o->off[1] - o->off[0];
    page_node(pg, 0, t->nodes[0].total, t->nodes[0].self, nk + has_narrow);
    if ((rc = walk_push(&w, 0, o->off[0])) != 0)
        return rc;
    while (w.n > 0 && pg->b->err == 0 && fr->err == 0) {
        uint32_t k = w.s[w.n - 1].node;
        uint32_t i = w.s[w.n - 1].next;
        while (i < o->off[k + 1] && narrow(t, o->kids[i], pg->in))
            i++;
        if (i < o->off[k + 1]) {
            uint32_t c = o->kids[i];
            w.s[w.n - 1].next = i + 1;
            nk = 0;
            for (uint32_t j = o->off[c]; j < o->off[c + 1]; j++)
                nk += !narrow(t, o->kids[j], pg->in);
            has_narrow = nk < o->off[c + 1] - o->off[c];
            page_node(pg, page_frame(pg, fr, c), t->nodes[c].total, t->nodes[c].self,
                      nk + has_narrow);
            if ((rc = walk_push(&w, c, o->off[c])) != 0)
                break;
            continue;
        }
        /* k's children are done: its narrow ones, folded into one leaf */
        int64_t sum[2] = {0, 0};
        uint32_t folded = 0;
        for (uint32_t j = o->off[k]; j < o->off[k + 1]; j++) {
            uint32_t c = o->kids[j];
            if (!narrow(t, c, pg->in))
                continue;
            sum[0] += t->nodes[c].total[0];
            sum[1] += t->nodes[c].total[1];
            folded += pg->size[c];
        }
        if (folded) {
            if (pg->folded_frame == 0) {
                put_frame(fr, FG_FOLDED_NAME, "", 0);
                pg->folded_frame = ++pg->nframes;
            }
            page_node(pg, pg->folded_frame, sum, sum, 0);
            pg->folded_nodes += folded;
        }
        w.n--;
    }
    isoprof_free(w.s);
    return rc;
}

/* JSON text of the page's data; see the data format in page/flamegraph.js. */
static int page_json(const struct pprof_tree *t, const struct fg_info *in, struct isoprof_buf *b)
{
    struct order o = {0};
    struct isoprof_buf nodes, frames;
    struct page pg = {.t = t, .in = in, .b = &nodes};
    int rc;
    if ((rc = order_build(t, &o)) != 0)
        return rc;
    isoprof_buf_init(&nodes, FG_JSON_MAX);
    isoprof_buf_init(&frames, FG_JSON_MAX);
    pg.frame = isoprof_calloc(t->nfns ? t->nfns : 1, sizeof(*pg.frame));
    pg.size = isoprof_calloc(t->nnodes, sizeof(*pg.size));
    if (pg.frame == NULL || pg.size == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    /* a child's index is above its parent's: one backward pass sums the subtrees */
    for (size_t k = t->nnodes; k-- > 0;) {
        pg.size[k]++;
        if (k > 0)
            pg.size[t->nodes[k].parent] += pg.size[k];
    }
    isoprof_buf_puts(&frames, "[[\"all\",\"\",0]");
    if ((rc = page_nodes(&pg, &o, &frames)) != 0)
        goto out;
    if (nodes.len > 0 && nodes.data[nodes.len - 1] == ',')
        nodes.len--;
    int cpu = strcmp(t->unit, "nanoseconds") == 0;
    isoprof_buf_printf(b, "{\"v\":1,\"kind\":\"%s\",\"type\":\"%s\",\"unit\":",
                       in->diff ? "diff" : "flame", cpu ? "cpu" : "heap");
    isoprof_json_str(b, t->unit);
    isoprof_buf_printf(b, ",\"period\":%" PRId64 ",\"title\":", cpu ? t->period : 0);
    isoprof_json_str(b, in->title);
    isoprof_buf_puts(b, ",\"header\":");
    put_pairs(b, in->header, in->nheader);
    if (in->diff) {
        isoprof_buf_puts(b, ",\"base_header\":");
        put_pairs(b, in->base_header, in->nbase);
        isoprof_buf_printf(b, ",\"base_total\":%" PRId64, t->nodes[0].total[1]);
    }
    isoprof_buf_printf(b,
                       ",\"total\":%" PRId64 ",\"folded\":{\"nodes\":%" PRIu64 ",\"share\":%.6g}",
                       t->nodes[0].total[0], pg.folded_nodes, in->fold_share);
    isoprof_buf_puts(b, ",\"frames\":");
    isoprof_buf_append(b, frames.data, frames.len);
    isoprof_buf_puts(b, "],\"nodes\":[");
    isoprof_buf_append(b, nodes.data, nodes.len);
    isoprof_buf_puts(b, "]}");
    rc = nodes.err ? nodes.err : frames.err ? frames.err : b->err;
out:
    isoprof_free(pg.frame);
    isoprof_free(pg.size);
    isoprof_buf_free(&nodes);
    isoprof_buf_free(&frames);
    order_free(&o);
    return rc;
}

/* s[0..n) with '<', '>', '&', U+2028 and U+2029 as JSON escapes: JSON text
 * that cannot end (or open) an element of the page it sits in. The
 * characters occur only inside strings, where the escapes mean the same. */
static int write_json_for_html(FILE *f, const char *s, size_t n)
{
    size_t from = 0;
    for (size_t i = 0; i < n; i++) {
        const char *esc = NULL;
        size_t skip = 1;
        unsigned char c = (unsigned char)s[i];
        if (c == '<')
            esc = "\\u003c";
        else if (c == '>')
            esc = "\\u003e";
        else if (c == '&')
            esc = "\\u0026";
        else if (c == 0xe2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
                 ((unsigned char)s[i + 2] == 0xa8 || (unsigned char)s[i + 2] == 0xa9)) {
            esc = (unsigned char)s[i + 2] == 0xa8 ? "\\u2028" : "\\u2029";
            skip = 3;
        }
        if (esc == NULL)
            continue;
        if (write_all(f, s + from, i - from) != 0 || write_all(f, esc, 6) != 0)
            return -EIO;
        i += skip - 1;
        from = i + 1;
    }
    return write_all(f, s + from, n - from);
}

int fg_write_html(FILE *f, const struct pprof_tree *t, const struct fg_info *info, const char **why)
{
    static const char *const marks[] = {"<!--isoprof:style-->", "<!--isoprof:data-->",
                                        "<!--isoprof:script-->"};
    if (f == NULL || t == NULL || info == NULL || t->nnodes == 0 || t->unit == NULL ||
        info->fold_share < 0 || info->fold_share >= 1) {
        if (why)
            *why = "no profile to draw";
        return -EINVAL;
    }
    struct isoprof_buf json;
    isoprof_buf_init(&json, FG_JSON_MAX);
    int rc = page_json(t, info, &json);
    if (rc != 0) {
        isoprof_buf_free(&json);
        return rc;
    }
    /* The template with each marker line's place filled: page.cmake made
     * sure each is there once, in this order. */
    const char *p = isoprof_page_html;
    for (size_t m = 0; m < 3 && rc == 0; m++) {
        const char *at = strstr(p, marks[m]);
        ISOPROF_ASSERT(at != NULL);
        rc = write_all(f, p, (size_t)(at - p));
        if (rc != 0)
            break;
        if (m == 0) {
            fputs("<style>\n", f);
            fputs(isoprof_page_css, f);
            rc = fputs("</style>", f) < 0 ? -EIO : 0;
        } else if (m == 1) {
            fputs("<script type=\"application/json\" id=\"isoprof-data\">", f);
            rc = write_json_for_html(f, json.data, json.len);
            if (rc == 0 && fputs("</script>", f) < 0)
                rc = -EIO;
        } else {
            fputs("<script>\n", f);
            fputs(isoprof_page_js, f);
            rc = fputs("</script>", f) < 0 ? -EIO : 0;
        }
        p = at + strlen(marks[m]);
    }
    if (rc == 0 && (fputs(p, f) < 0 || ferror(f)))
        rc = -EIO;
    isoprof_buf_free(&json);
    return rc;
}

/* --- folded stacks --- */

/* s with ';' as ',' and line breaks as spaces. */
static void put_folded_text(FILE *f, const char *s)
{
    for (; *s; s++)
        fputc(*s == ';' ? ',' : (*s == '\n' || *s == '\r') ? ' ' : *s, f);
}

static void put_folded_frame(FILE *f, const struct pprof_tree_fn *fn)
{
    put_folded_text(f, fn->name);
    if (fn->file[0] == '\0')
        return;
    fputs(" (", f);
    put_folded_text(f, fn->file);
    if (fn->line > 0)
        fprintf(f, ":%" PRId64, fn->line);
    fputc(')', f);
}

int fg_write_folded(FILE *f, const struct pprof_tree *t, const char **why)
{
    if (f == NULL || t == NULL || t->nnodes == 0 || t->unit == NULL) {
        if (why)
            *why = "no profile to write";
        return -EINVAL;
    }
    struct order o = {0};
    struct walk w = {0};
    int rc = order_build(t, &o);
    if (rc != 0)
        return rc;
    int64_t per = strcmp(t->unit, "nanoseconds") == 0 && t->period > 0 ? t->period : 1;
    if ((rc = walk_push(&w, 0, o.off[0])) != 0)
        goto out;
    while (w.n > 0) {
        uint32_t k = w.s[w.n - 1].node;
        uint32_t i = w.s[w.n - 1].next;
        if (i < o.off[k + 1]) {
            uint32_t c = o.kids[i];
            w.s[w.n - 1].next = i + 1;
            if (t->nodes[c].total[0] == 0)
                continue;
            if ((rc = walk_push(&w, c, o.off[c])) != 0)
                break;
            int64_t v = (t->nodes[c].self[0] + per / 2) / per;
            if (v <= 0)
                continue;
            /* the path: every node on the stack but the root */
            for (size_t d = 1; d < w.n; d++) {
                if (d > 1)
                    fputc(';', f);
                put_folded_frame(f, &t->fns[t->nodes[w.s[d].node].fn]);
            }
            fprintf(f, " %" PRId64 "\n", v);
            continue;
        }
        w.n--;
    }
    if (rc == 0 && (fflush(f) != 0 || ferror(f)))
        rc = -EIO;
out:
    isoprof_free(w.s);
    order_free(&o);
    return rc;
}

/* --- .cpuprofile --- */

static void put_json_str(FILE *f, const char *s, int *err)
{
    struct isoprof_buf b;
    isoprof_buf_init(&b, 6 * strlen(s) + 2);
    if (isoprof_json_str(&b, s) != 0)
        *err = -ENOMEM;
    else if (write_all(f, b.data, b.len) != 0)
        *err = -EIO;
    isoprof_buf_free(&b);
}

int fg_write_cpuprofile(FILE *f, const struct pprof_tree *t, const char **why)
{
    if (f == NULL || t == NULL || t->nnodes == 0 || t->unit == NULL) {
        if (why)
            *why = "no profile to write";
        return -EINVAL;
    }
    if (strcmp(t->unit, "nanoseconds") != 0 || t->period <= 0) {
        if (why)
            *why = "a .cpuprofile holds CPU windows only";
        return -EINVAL;
    }
    struct order o = {0};
    int rc = order_build(t, &o), err = 0;
    if (rc != 0)
        return rc;
    int64_t per = t->period;
    int64_t delta_us = per / 1000 > 0 ? per / 1000 : 1;
    int64_t start_us = t->time_nanos[0] / 1000, nsamples = 0;
    fputs("{\"nodes\":[", f);
    for (size_t k = 0; k < t->nnodes; k++) {
        const struct pprof_tree_node *n = &t->nodes[k];
        if (k > 0 && n->total[0] == 0)
            continue;
        const struct pprof_tree_fn *fn = k ? &t->fns[n->fn] : NULL;
        int64_t hits = (n->self[0] + per / 2) / per;
        nsamples += hits;
        fprintf(f, "%s{\"id\":%zu,\"callFrame\":{\"functionName\":", k ? "," : "", k + 1);
        put_json_str(f, fn ? fn->name : "(root)", &err);
        fputs(",\"scriptId\":\"0\",\"url\":", f);
        put_json_str(f, fn ? fn->file : "", &err);
        fprintf(f, ",\"lineNumber\":%" PRId64 ",\"columnNumber\":-1},\"hitCount\":%" PRId64,
                fn && fn->line > 0 ? fn->line - 1 : -1, hits);
        fputs(",\"children\":[", f);
        int first = 1;
        for (uint32_t i = o.off[k]; i < o.off[k + 1]; i++) {
            if (t->nodes[o.kids[i]].total[0] == 0)
                continue;
            fprintf(f, "%s%" PRIu32, first ? "" : ",", o.kids[i] + 1);
            first = 0;
        }
        fputs("]}", f);
    }
    fprintf(f, "],\"startTime\":%" PRId64 ",\"endTime\":%" PRId64 ",\"samples\":[", start_us,
            start_us + nsamples * delta_us);
    int first = 1;
    for (size_t k = 0; k < t->nnodes; k++) {
        int64_t hits = (t->nodes[k].self[0] + per / 2) / per;
        if (k > 0 && t->nodes[k].total[0] == 0)
            continue;
        for (int64_t h = 0; h < hits; h++, first = 0)
            fprintf(f, "%s%zu", first ? "" : ",", k + 1);
    }
    fputs("],\"timeDeltas\":[", f);
    for (int64_t s = 0; s < nsamples; s++)
        fprintf(f, "%s%" PRId64, s ? "," : "", delta_us);
    fputs("]}\n", f);
    order_free(&o);
    if (err)
        return err;
    return fflush(f) != 0 || ferror(f) ? -EIO : 0;
}

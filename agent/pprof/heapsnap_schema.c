/*
 * heapsnap_schema.c - what the heap snapshot parser's tokenizer hands over,
 * against the schema of a .heapsnapshot: the containers and keys looked
 * for, the counts, snapshot.meta's fields and types, checked as they
 * arrive; the nodes[] and edges[] arrays are opened here and read by
 * heapsnap_parse.c.
 */
#include "heapsnap_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "jsonlex.h"

/* --- the schema: what the tokenizer hands over --- */

static const char *ctx_name(enum ctx c)
{
    switch (c) {
    case X_NFIELDS:
        return "node_fields";
    case X_EFIELDS:
        return "edge_fields";
    case X_NTYPES:
    case X_NTLIST:
        return "node_types";
    case X_ETYPES:
    case X_ETLIST:
        return "edge_types";
    case X_NODES:
        return "nodes";
    case X_EDGES:
        return "edges";
    case X_STRINGS:
        return "strings";
    default:
        return "snapshot";
    }
}

static const char *key_name(enum key k)
{
    switch (k) {
    case K_SNAPSHOT:
        return "snapshot";
    case K_NODES:
        return "nodes";
    case K_EDGES:
        return "edges";
    case K_STRINGS:
        return "strings";
    case K_META:
        return "snapshot.meta";
    case K_NODE_COUNT:
        return "snapshot.node_count";
    case K_EDGE_COUNT:
        return "snapshot.edge_count";
    case K_NODE_FIELDS:
        return "meta.node_fields";
    case K_NODE_TYPES:
        return "meta.node_types";
    case K_EDGE_FIELDS:
        return "meta.edge_fields";
    case K_EDGE_TYPES:
        return "meta.edge_types";
    default:
        return "?";
    }
}

static int push(struct heapsnap_parser *p, enum ctx c)
{
    ISOPROF_ASSERT(p->nfr < MAX_CTX);
    p->fr[p->nfr].ctx = c;
    p->fr[p->nfr].n = 0;
    p->nfr++;
    return 1;
}

/* A key of an object we read, read whole. */
void hs_on_key(struct heapsnap_parser *p, const char *k, size_t n)
{
    static const struct {
        enum ctx in;
        const char *name;
        enum key key;
    } keys[] = {
        {X_TOP, "snapshot", K_SNAPSHOT},
        {X_TOP, "nodes", K_NODES},
        {X_TOP, "edges", K_EDGES},
        {X_TOP, "strings", K_STRINGS},
        {X_SNAPSHOT, "meta", K_META},
        {X_SNAPSHOT, "node_count", K_NODE_COUNT},
        {X_SNAPSHOT, "edge_count", K_EDGE_COUNT},
        {X_META, "node_fields", K_NODE_FIELDS},
        {X_META, "node_types", K_NODE_TYPES},
        {X_META, "edge_fields", K_EDGE_FIELDS},
        {X_META, "edge_types", K_EDGE_TYPES},
    };
    enum ctx c = frame_top(p)->ctx;
    p->pending = K_NONE;
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(keys); i++)
        if (keys[i].in == c && strlen(keys[i].name) == n && memcmp(keys[i].name, k, n) == 0)
            p->pending = keys[i].key;
}

static bool *have_flag(struct heapsnap_parser *p, enum key k)
{
    switch (k) {
    case K_SNAPSHOT:
        return &p->have_snapshot;
    case K_NODES:
        return &p->have_nodes;
    case K_EDGES:
        return &p->have_edges;
    case K_STRINGS:
        return &p->have_strings;
    case K_META:
        return &p->have_meta;
    case K_NODE_COUNT:
        return &p->have_node_count;
    case K_EDGE_COUNT:
        return &p->have_edge_count;
    case K_NODE_FIELDS:
        return &p->have_nfields;
    case K_NODE_TYPES:
        return &p->have_ntypes;
    case K_EDGE_FIELDS:
        return &p->have_efields;
    case K_EDGE_TYPES:
        return &p->have_etypes;
    default:
        return NULL;
    }
}

/* The reason a field of the wrong type or written twice is refused for. */
static int key_reason(enum key k)
{
    return k == K_NODES || k == K_EDGES || k == K_STRINGS || k == K_NODE_COUNT || k == K_EDGE_COUNT
               ? HEAPSNAP_E_VALUE
               : HEAPSNAP_E_META;
}

/* The start of nodes[] or edges[]: the counts and meta must be known. */
static int ints_begin(struct heapsnap_parser *p, bool edges)
{
    struct heapsnap *s = p->s;
    const char *what = edges ? "edges" : "nodes";
    if (!p->have_meta)
        return hs_pfail(p, HEAPSNAP_E_MISSING, "%s before snapshot.meta", what);
    /* nodes need edge_count too: their edge counts are summed against it */
    if (!p->have_node_count || !p->have_edge_count)
        return hs_pfail(p, HEAPSNAP_E_MISSING, "%s before snapshot.%s", what,
                        p->have_node_count ? "edge_count" : "node_count");
    if (edges) {
        size_t e = (size_t)p->edge_count;
        if (s->fd < 0) {
            if ((s->erec = isoprof_malloc((e ? e : 1) * EREC)) == NULL)
                return hs_nomem(p);
        } else {
            /* charged since the parser began */
            if ((p->wbuf = isoprof_malloc(WBUF_BYTES)) == NULL)
                return hs_nomem(p);
        }
    } else {
        size_t n = (size_t)p->node_count;
        s->ntype = isoprof_malloc(n);
        s->nname = isoprof_malloc(n * sizeof(uint32_t));
        s->nself = isoprof_malloc(n * sizeof(uint64_t));
        s->nfirst = isoprof_malloc(n * sizeof(uint32_t)); /* the edge counts, for now */
        if (s->ntype == NULL || s->nname == NULL || s->nself == NULL || s->nfirst == NULL)
            return hs_nomem(p);
    }
    p->ints = true;
    p->iedges = edges;
    p->iphase = IP_FIRST;
    p->icount = 0;
    p->item = 0;
    p->field = 0;
    return push(p, edges ? X_EDGES : X_NODES);
}

/* A container opens (kind '{' or '['). Returns 1, or 0 with p->fail.err set. */
int hs_on_open(struct heapsnap_parser *p, int kind)
{
    if (p->skip) {
        p->skip++;
        return 1;
    }
    if (!p->started) {
        p->started = true;
        if (kind != '{')
            return hs_pfail(p, HEAPSNAP_E_JSON, "the snapshot is not a JSON object");
        return push(p, X_TOP);
    }
    struct frame *f = frame_top(p);
    uint32_t k = f->n++;
    enum key key = p->pending;
    p->pending = K_NONE;
    bool *have = have_flag(p, key);
    switch (f->ctx) {
    case X_TOP:
    case X_SNAPSHOT:
    case X_META:
        if (key == K_NONE) {
            p->skip = 1;
            return 1;
        }
        if (*have && key != K_META)
            return hs_pfail(p, key_reason(key), "%s appears twice", key_name(key));
        if (key == K_SNAPSHOT || key == K_META) {
            if (kind != '{')
                return hs_pfail(p, HEAPSNAP_E_META, "%s is not an object", key_name(key));
            if (key == K_META && (p->have_meta || p->have_nfields || p->have_ntypes))
                return hs_pfail(p, HEAPSNAP_E_META, "snapshot.meta appears twice");
            return push(p, key == K_SNAPSHOT ? X_SNAPSHOT : X_META);
        }
        if (key == K_NODE_COUNT || key == K_EDGE_COUNT)
            return hs_pfail(p, HEAPSNAP_E_VALUE, "%s is not a number", key_name(key));
        if (kind != '[')
            return hs_pfail(p, key_reason(key), "%s is not an array", key_name(key));
        switch (key) {
        case K_NODES:
        case K_EDGES:
            return ints_begin(p, key == K_EDGES);
        case K_STRINGS:
            return push(p, X_STRINGS);
        case K_NODE_FIELDS:
            return push(p, X_NFIELDS);
        case K_EDGE_FIELDS:
            return push(p, X_EFIELDS);
        case K_NODE_TYPES:
            return push(p, X_NTYPES);
        case K_EDGE_TYPES:
            return push(p, X_ETYPES);
        default:
            break;
        }
        return 1;
    case X_NTYPES:
    case X_ETYPES:
        /* the array of names is the element at the "type" column; the
         * others are descriptions such as "string" or "number" */
        if (kind == '[') {
            if (k > UINT8_MAX)
                return hs_pfail(p, HEAPSNAP_E_META, "meta.%s has more than 255 entries",
                                ctx_name(f->ctx));
            return push(p, f->ctx == X_NTYPES ? X_NTLIST : X_ETLIST);
        }
        p->skip = 1;
        return 1;
    case X_STRINGS:
        return hs_pfail(p, HEAPSNAP_E_VALUE, "strings[%" PRIu32 "] is not a string", k);
    default:
        return hs_pfail(p, HEAPSNAP_E_META, "meta.%s[%" PRIu32 "] is not a string",
                        ctx_name(f->ctx), k);
    }
}

static enum role field_role(const char *name, bool edges)
{
    if (strcmp(name, "type") == 0)
        return R_TYPE;
    if (!edges) {
        if (strcmp(name, "name") == 0)
            return R_NAME;
        if (strcmp(name, "self_size") == 0)
            return R_SELF;
        if (strcmp(name, "edge_count") == 0)
            return R_ECOUNT;
    } else {
        if (strcmp(name, "name_or_index") == 0)
            return R_NAME;
        if (strcmp(name, "to_node") == 0)
            return R_TO;
    }
    return R_NONE;
}

/* A count of the snapshot object, as text: checked against the caps and
 * charged to the budget before anything is allocated for it. */
static int on_count(struct heapsnap_parser *p, enum key key, const char *num, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (num[i] < '0' || num[i] > '9')
            return hs_pfail(p, HEAPSNAP_E_VALUE, "%s %.*s is not a non-negative integer",
                            key_name(key), (int)(n > 24 ? 24 : n), num);
        v = v > (UINT64_MAX - 9) / 10 ? UINT64_MAX : v * 10 + (uint64_t)(num[i] - '0');
    }
    bool nodes = key == K_NODE_COUNT;
    size_t cap = nodes ? HEAPSNAP_MAX_NODES : HEAPSNAP_MAX_EDGES;
    if (v > cap)
        return hs_pfail(p, HEAPSNAP_E_TOOBIG, "%s %" PRIu64 " is past the cap of %zu",
                        key_name(key), v, cap);
    if (nodes && v == 0)
        return hs_pfail(p, HEAPSNAP_E_COUNT, "snapshot.node_count is 0: no root");
    bool spill = p->s->fd >= 0;
    uint64_t reserve = nodes ? v * (uint64_t)p->reserve_node : 0;
    if (!hs_charge(p, hs_arrays_bytes(nodes ? v : 0, nodes ? 0 : v, spill) + reserve,
                   key_name(key)))
        return 0;
    p->aux += (size_t)reserve;
    if (nodes) {
        p->node_count = v;
        p->have_node_count = true;
    } else {
        p->edge_count = v;
        p->have_edge_count = true;
    }
    return 1;
}

/* A scalar value: kind 's' string (for SK_NAME: the name text[0..n), n
 * past TYPE_NAME_MAX if it is longer), 'n' number (its text[0..n)), 'b'
 * boolean, 'z' null. */
int hs_on_scalar(struct heapsnap_parser *p, int kind, const char *text, size_t n)
{
    if (p->skip)
        return 1;
    if (!p->started)
        return hs_pfail(p, HEAPSNAP_E_JSON, "the snapshot is not a JSON object");
    struct frame *f = frame_top(p);
    uint32_t k = f->n++;
    enum key key = p->pending;
    p->pending = K_NONE;
    switch (f->ctx) {
    case X_TOP:
    case X_SNAPSHOT:
    case X_META:
        if (key == K_NONE)
            return 1;
        if (key == K_NODE_COUNT || key == K_EDGE_COUNT) {
            if (*have_flag(p, key))
                return hs_pfail(p, HEAPSNAP_E_META, "%s appears twice", key_name(key));
            if (kind != 'n')
                return hs_pfail(p, HEAPSNAP_E_VALUE, "%s is not a number", key_name(key));
            return on_count(p, key, text, n);
        }
        if (key == K_SNAPSHOT || key == K_META)
            return hs_pfail(p, HEAPSNAP_E_META, "%s is not an object", key_name(key));
        return hs_pfail(p, key_reason(key), "%s is not an array", key_name(key));
    case X_NFIELDS:
    case X_EFIELDS: {
        bool edges = f->ctx == X_EFIELDS;
        if (kind != 's')
            return hs_pfail(p, HEAPSNAP_E_META, "meta.%s[%" PRIu32 "] is not a string",
                            ctx_name(f->ctx), k);
        if (k >= HEAPSNAP_MAX_FIELDS)
            return hs_pfail(p, HEAPSNAP_E_META, "meta.%s has more than %d fields", ctx_name(f->ctx),
                            HEAPSNAP_MAX_FIELDS);
        enum role r = n > TYPE_NAME_MAX ? R_NONE : field_role(text, edges);
        uint8_t *roles = edges ? p->erole : p->nrole;
        for (uint32_t i = 0; r != R_NONE && i < k; i++)
            if (roles[i] == r)
                return hs_pfail(p, HEAPSNAP_E_META, "meta.%s lists \"%s\" twice", ctx_name(f->ctx),
                                text);
        roles[k] = (uint8_t)r;
        return 1;
    }
    case X_NTYPES:
    case X_ETYPES:
        return 1;
    case X_NTLIST:
    case X_ETLIST: {
        bool edges = f->ctx == X_ETLIST;
        if (kind != 's')
            return hs_pfail(p, HEAPSNAP_E_META, "meta.%s: a type name is not a string",
                            ctx_name(f->ctx));
        if (n > TYPE_NAME_MAX)
            return hs_pfail(p, HEAPSNAP_E_META, "meta.%s: a type name longer than %d bytes",
                            ctx_name(f->ctx), TYPE_NAME_MAX);
        unsigned *cnt = edges ? &p->net : &p->nnt;
        if (*cnt >= TYPE_ENTRIES_MAX)
            return hs_pfail(p, HEAPSNAP_E_META, "meta.%s: more than %d type names",
                            ctx_name(f->ctx), TYPE_ENTRIES_MAX);
        struct tentry *t = &(edges ? p->et : p->nt)[(*cnt)++];
        t->pos = (uint8_t)(p->fr[p->nfr - 2].n - 1);
        memcpy(t->name, text, n + 1);
        return 1;
    }
    case X_STRINGS:
        if (kind != 's')
            return hs_pfail(p, HEAPSNAP_E_VALUE, "strings[%" PRIu32 "] is not a string", k);
        return hs_soff_push(p, (uint32_t)p->str_start);
    case X_NODES:
    case X_EDGES:
        break;
    }
    ISOPROF_ASSERT(!"a scalar inside nodes or edges outside the integer loop");
    return 0;
}

/* The type names of the column `type` (its position in the field list)
 * into names[], and the count. */
static int pick_types(struct heapsnap_parser *p, bool edges, char (*names)[TYPE_NAME_MAX + 1],
                      unsigned *count)
{
    const uint8_t *roles = edges ? p->erole : p->nrole;
    unsigned nf = edges ? p->efields : p->nfields;
    const struct tentry *t = edges ? p->et : p->nt;
    unsigned nt = edges ? p->net : p->nnt;
    unsigned pos = 0;
    while (pos < nf && roles[pos] != R_TYPE)
        pos++;
    *count = 0;
    for (unsigned i = 0; i < nt; i++) {
        if (t[i].pos != pos)
            continue;
        if (*count == HEAPSNAP_MAX_TYPES)
            return hs_pfail(p, HEAPSNAP_E_META, "meta.%s_types: more than %d type names",
                            edges ? "edge" : "node", HEAPSNAP_MAX_TYPES);
        memcpy(names[(*count)++], t[i].name, TYPE_NAME_MAX + 1);
    }
    if (*count == 0)
        return hs_pfail(p, HEAPSNAP_E_META, "meta.%s_types[%u]: no type names",
                        edges ? "edge" : "node", pos);
    return 1;
}

static int type_index(char (*names)[TYPE_NAME_MAX + 1], unsigned n, const char *name)
{
    for (unsigned i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return (int)i;
    return -1;
}

/* snapshot.meta closed: every field we need listed, the type names found. */
static int meta_done(struct heapsnap_parser *p)
{
    struct heapsnap *s = p->s;
    static const struct {
        bool edges;
        enum role r;
        const char *name;
    } need[] = {
        {false, R_TYPE, "type"},         {false, R_NAME, "name"}, {false, R_SELF, "self_size"},
        {false, R_ECOUNT, "edge_count"}, {true, R_TYPE, "type"},  {true, R_NAME, "name_or_index"},
        {true, R_TO, "to_node"},
    };
    if (!p->have_nfields || !p->have_efields || !p->have_ntypes || !p->have_etypes)
        return hs_pfail(p, HEAPSNAP_E_META, "snapshot.meta has no %s",
                        !p->have_nfields   ? "node_fields"
                        : !p->have_efields ? "edge_fields"
                        : !p->have_ntypes  ? "node_types"
                                           : "edge_types");
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(need); i++) {
        const uint8_t *roles = need[i].edges ? p->erole : p->nrole;
        unsigned nf = need[i].edges ? p->efields : p->nfields, j = 0;
        while (j < nf && roles[j] != need[i].r)
            j++;
        if (j == nf)
            return hs_pfail(p, HEAPSNAP_E_META, "meta.%s has no \"%s\"",
                            need[i].edges ? "edge_fields" : "node_fields", need[i].name);
    }
    if (!pick_types(p, false, s->ntypes, &s->n_ntypes) ||
        !pick_types(p, true, s->etypes, &s->n_etypes))
        return 0;
    s->et_element = type_index(s->etypes, s->n_etypes, "element");
    s->et_hidden = type_index(s->etypes, s->n_etypes, "hidden");
    s->et_weak = type_index(s->etypes, s->n_etypes, "weak");
    s->et_shortcut = type_index(s->etypes, s->n_etypes, "shortcut");
    s->et_internal = type_index(s->etypes, s->n_etypes, "internal");
    s->nt_object = type_index(s->ntypes, s->n_ntypes, "object");
    s->nt_closure = type_index(s->ntypes, s->n_ntypes, "closure");
    s->nt_native = type_index(s->ntypes, s->n_ntypes, "native");
    s->nt_synthetic = type_index(s->ntypes, s->n_ntypes, "synthetic");
    p->have_meta = true;
    return 1;
}

/* A container closes (not nodes[] or edges[]: ints_close). */
int hs_on_close(struct heapsnap_parser *p)
{
    if (p->skip) {
        p->skip--;
        return 1;
    }
    struct frame *f = frame_top(p);
    p->nfr--;
    switch (f->ctx) {
    case X_SNAPSHOT:
        p->have_snapshot = true;
        return 1;
    case X_META:
        return meta_done(p);
    case X_NFIELDS:
        p->nfields = f->n;
        p->have_nfields = true;
        return 1;
    case X_EFIELDS:
        p->efields = f->n;
        p->have_efields = true;
        return 1;
    case X_NTYPES:
        p->have_ntypes = true;
        return 1;
    case X_ETYPES:
        p->have_etypes = true;
        return 1;
    case X_STRINGS:
        p->have_strings = true;
        return 1;
    default:
        return 1;
    }
}

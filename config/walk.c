/*
 * walk.c - the walk of a loaded YAML document: mapping keys matched to
 * option rows and sections (with a suggestion for an unknown key), each
 * value set from its node, maps and lists walked entry by entry, and the
 * `targets` list walked entry by entry into struct cfg_target. See
 * config.c for the design.
 */
#include "loader_internal.h"

#include "base.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

/* ------------------------------------------------------------------------ */
/* The document walk                                                        */

const char *cfg_sv(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

static struct pos node_pos(const yaml_node_t *n)
{
    return (struct pos){n->start_mark.line + 1, n->start_mark.column + 1};
}

const char *cfg_node_kind(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_MAPPING_NODE:
        return "a mapping";
    case YAML_SEQUENCE_NODE:
        return "a list";
    default:
        return "a scalar";
    }
}

int cfg_is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    const char *s = cfg_sv(n);
    size_t len = n->data.scalar.length;
    return len == 0 || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
           strcmp(s, "NULL") == 0;
}

/*
 * One entry of list row o (of the row's fullname), node item at index i:
 * a scalar that is not empty or null, holds no NUL and no control
 * character, has at most o->max bytes and passes the row's check. If it is
 * fine, append a copy to l, which has room. Returns 0, -EINVAL (reported
 * at the entry) or -ENOMEM.
 */
static int strlist_entry(struct errs *e, const struct cfg_option *o, const yaml_node_t *item,
                         const char *fullname, size_t i, struct cfg_strlist *l)
{
    char name[192], shown[320], buf[512];
    snprintf(name, sizeof(name), "%s[%zu]", fullname, i);
    if (item->type != YAML_SCALAR_NODE) {
        ERR_NODE(e, item, "%s must be a string, not %s", name, cfg_node_kind(item));
        return -EINVAL;
    }
    const char *s = cfg_sv(item);
    size_t len = item->data.scalar.length;
    cfg_echo(shown, sizeof(shown), s, len);
    if (len == 0 || cfg_is_null(item)) {
        ERR_NODE(e, item, "%s must not be empty", name);
        return -EINVAL;
    }
    if (strlen(s) != len) {
        ERR_NODE(e, item, "%s must not contain a NUL byte", name);
        return -EINVAL;
    }
    if (len > o->max) {
        ERR_NODE(e, item, "%s is longer than %llu bytes", name, (unsigned long long)o->max);
        return -EINVAL;
    }
    const char *problem = cfg_row_check(o, s, len, 0, shown, buf, sizeof(buf));
    if (problem != NULL) {
        ERR_NODE(e, item, "%s %s", name, problem);
        return -EINVAL;
    }
    for (size_t j = 0; j < len; j++) {
        unsigned char ch = (unsigned char)s[j];
        if (ch < 0x20 || ch == 0x7f) {
            ERR_NODE(e, item, "%s must not contain control characters ('%s')", name, shown);
            return -EINVAL;
        }
    }
    char *d = isoprof_strndup(s, len);
    if (d == NULL)
        return -ENOMEM;
    l->v[l->n++] = d;
    return 0;
}

int cfg_set_strlist(yaml_document_t *doc, struct errs *e, const struct cfg_option *o, void *base,
                    const yaml_node_t *v, const char *fullname)
{
    const yaml_node_item_t *start = v->data.sequence.items.start, *top = v->data.sequence.items.top;
    size_t nitems = (size_t)(top - start);
    struct cfg_strlist l = {NULL, 0};
    if (nitems > 0) {
        l.v = isoprof_calloc(nitems < CFG_STRLIST_MAX ? nitems : CFG_STRLIST_MAX, sizeof(*l.v));
        if (l.v == NULL)
            return -ENOMEM;
    }
    int rc = 0, bad = 0;
    for (const yaml_node_item_t *it = start; it < top && rc == 0 && !e->full; it++) {
        size_t i = (size_t)(it - start);
        const yaml_node_t *item = yaml_document_get_node(doc, *it);
        if (item == NULL)
            continue;
        if (i == CFG_STRLIST_MAX) {
            ERR_NODE(e, item, "%s has more than %d entries", fullname, CFG_STRLIST_MAX);
            bad = 1;
            break;
        }
        rc = strlist_entry(e, o, item, fullname, i, &l);
        if (rc == -EINVAL) {
            rc = 0;
            bad = 1;
        }
    }
    if (rc == 0 && !bad && !e->full) {
        cfg_strlist_free(cfg_field_of(o, base));
        *(struct cfg_strlist *)cfg_field_of(o, base) = l;
        return 0;
    }
    cfg_strlist_free(&l);
    return rc != 0 ? rc : -EINVAL;
}

int cfg_strlist_default(const struct cfg_option *o, void *base)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return -ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)o->def, strlen(o->def));
    int rc = -EINVAL;
    if (yaml_parser_load(&parser, &doc)) {
        const yaml_node_t *root = yaml_document_get_root_node(&doc);
        struct errs e = {.name = "<defaults>"};
        if (root != NULL && root->type == YAML_SEQUENCE_NODE)
            rc = cfg_set_strlist(&doc, &e, o, base, root, o->name);
        if (rc == 0 && e.oom) /* not expected: a default has no problem to report */
            rc = -ENOMEM;
        cfg_errs_release(&e);
        yaml_document_delete(&doc);
    } else if (parser.error == YAML_MEMORY_ERROR) {
        rc = -ENOMEM;
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* Is path a section, i.e. a proper prefix of some row's name in scope? */
static int is_section(const char *path, enum cfg_scope scope)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < cfg_noptions; i++) {
        if (cfg_options[i].scope == scope && strncmp(cfg_options[i].name, path, n) == 0 &&
            cfg_options[i].name[n] == '.')
            return 1;
    }
    return 0;
}

/* Edit distance, for "did you mean"; both strings are at most CFG_MAX_KEY. */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
    size_t row[CFG_MAX_KEY + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/*
 * Find what an unknown key under prefix (a section of scope, "" for the
 * root or the target entry itself) probably meant: a sibling within two
 * edits, else an option elsewhere in scope with that exact last component,
 * named from the root or the target entry ("sampling.cpu.period",
 * "threads.max"). Writes " (did you mean 'x'?)" into buf, or "".
 */
static void suggest(const char *prefix, const char *key, enum cfg_scope scope, char *buf,
                    size_t cap)
{
    size_t kl = strlen(key), pl = strlen(prefix), best = 3;
    const char *best_name = NULL;
    size_t best_len = 0;
    buf[0] = '\0';
    if (kl > CFG_MAX_KEY)
        return;
    for (size_t i = 0; i <= cfg_noptions; i++) {
        const char *cand;
        size_t cl;
        if (i == cfg_noptions) {
            if (scope != CFG_SCOPE_GLOBAL || pl != 0)
                break;
            cand = "targets";
            cl = strlen(cand);
        } else {
            const struct cfg_option *o = &cfg_options[i];
            if (o->scope != scope)
                continue;
            cand = o->name;
            if (pl != 0) {
                if (strncmp(cand, prefix, pl) != 0 || cand[pl] != '.')
                    continue;
                cand += pl + 1;
            }
            const char *dot = strchr(cand, '.');
            cl = dot ? (size_t)(dot - cand) : strlen(cand);
        }
        if (cl > CFG_MAX_KEY)
            continue;
        size_t d = edit_distance(key, kl, cand, cl);
        if (d < best && d < kl) {
            best = d;
            best_name = cand;
            best_len = cl;
        }
    }
    if (best_name != NULL) {
        snprintf(buf, cap, " (did you mean '%.*s'?)", (int)best_len, best_name);
        return;
    }
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        const char *last = strrchr(o->name, '.');
        if (o->scope == scope && last != NULL && strcmp(last + 1, key) == 0) {
            snprintf(buf, cap, " (did you mean '%s'?)", o->name);
            return;
        }
    }
}

/* Report a key repeated within one mapping; nonzero if pair's key is one. */
static int is_duplicate(struct walk *w, const yaml_node_t *map, const yaml_node_pair_t *pair)
{
    const yaml_node_t *k = yaml_document_get_node(w->doc, pair->key);
    for (const yaml_node_pair_t *p = map->data.mapping.pairs.start; p < pair; p++) {
        const yaml_node_t *pk = yaml_document_get_node(w->doc, p->key);
        if (pk != NULL && pk->type == YAML_SCALAR_NODE &&
            pk->data.scalar.length == k->data.scalar.length &&
            memcmp(pk->data.scalar.value, k->data.scalar.value, k->data.scalar.length) == 0) {
            char shown[320];
            ERR_NODE(w->e, k, "duplicate key '%s' (first at %zu:%zu)",
                     cfg_echo(shown, sizeof(shown), cfg_sv(k), k->data.scalar.length),
                     (size_t)pk->start_mark.line + 1, (size_t)pk->start_mark.column + 1);
            return 1;
        }
    }
    return 0;
}

/*
 * The key of a pair, or NULL after reporting why it cannot be one: keys
 * must be scalars and unique in their mapping. (Keys that are too long or
 * hold a NUL, see key_usable, are the caller's to report as unknown.)
 */
static const char *pair_key(struct walk *w, const yaml_node_t *map, const yaml_node_pair_t *p,
                            const char *where, const yaml_node_t **kout, const yaml_node_t **vout)
{
    const yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
    const yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
    if (k == NULL || v == NULL)
        return NULL;
    if (k->type != YAML_SCALAR_NODE) {
        ERR_NODE(w->e, k, "%s: a key must be a name, not %s", where, cfg_node_kind(k));
        return NULL;
    }
    if (is_duplicate(w, map, p))
        return NULL;
    *kout = k;
    *vout = v;
    return cfg_sv(k);
}

static int key_usable(const yaml_node_t *k)
{
    return k->data.scalar.length <= CFG_MAX_KEY && strlen(cfg_sv(k)) == k->data.scalar.length;
}

/*
 * One entry of map row o (of the row's fullname): check key node k and
 * value node v, and if both are fine append copies to m, which has room.
 * Values are never quoted in a message (a header's may be a token).
 * Returns 0, -EINVAL (reported) or -ENOMEM.
 */
static int map_entry(struct walk *w, const struct cfg_option *o, const yaml_node_t *k,
                     const yaml_node_t *v, const char *fullname, struct cfg_map *m)
{
    char shown[320], name[448], buf[512];
    const char *problem;
    size_t klen = k->data.scalar.length, vlen = v->data.scalar.length;
    int bad = 0;
    cfg_echo(shown, sizeof(shown), cfg_sv(k), klen);
    snprintf(name, sizeof(name), "%s.%s", fullname, shown);
    if (strlen(cfg_sv(k)) != klen) {
        ERR_NODE(w->e, k, "%s name '%s' must not contain a NUL byte", fullname, shown);
        bad = 1;
    } else if ((problem = cfg_row_check(o, cfg_sv(k), klen, 1, shown, buf, sizeof(buf))) != NULL) {
        ERR_NODE(w->e, k, "%s %s", fullname, problem);
        bad = 1;
    }
    if (v->type != YAML_SCALAR_NODE) {
        ERR_NODE(w->e, v, "%s must be a string, not %s", name, cfg_node_kind(v));
        return -EINVAL;
    }
    if (cfg_is_null(v)) {
        ERR_NODE(w->e, v, "%s has no value (write '' for an empty one)", name);
        return -EINVAL;
    }
    if (strlen(cfg_sv(v)) != vlen) {
        ERR_NODE(w->e, v, "%s must not contain a NUL byte", name);
        return -EINVAL;
    }
    if ((problem = cfg_row_check(o, cfg_sv(v), vlen, 0, NULL, buf, sizeof(buf))) != NULL) {
        ERR_NODE(w->e, v, "%s %s", name, problem);
        return -EINVAL;
    }
    if (bad)
        return -EINVAL;
    struct cfg_kv *kv = &m->items[m->n];
    kv->key = isoprof_strndup(cfg_sv(k), klen);
    kv->value = isoprof_strndup(cfg_sv(v), vlen);
    if (kv->key == NULL || kv->value == NULL) {
        isoprof_free(kv->key);
        isoprof_free(kv->value);
        return -ENOMEM;
    }
    m->n++;
    return 0;
}

int cfg_set_map(struct walk *w, const struct cfg_option *o, void *base, const yaml_node_t *v,
                const char *fullname)
{
    const yaml_node_pair_t *start = v->data.mapping.pairs.start, *top = v->data.mapping.pairs.top;
    size_t npairs = (size_t)(top - start);
    struct cfg_map m = {NULL, 0};
    if (npairs > 0) {
        m.items = isoprof_calloc(npairs < o->max ? npairs : o->max, sizeof(*m.items));
        if (m.items == NULL)
            return -ENOMEM;
    }
    int rc = 0, bad = 0;
    for (const yaml_node_pair_t *p = start; p < top && rc == 0 && !w->e->full; p++) {
        const yaml_node_t *k, *val;
        if ((size_t)(p - start) == o->max) {
            k = yaml_document_get_node(w->doc, p->key);
            ERR_NODE(w->e, k != NULL ? k : v, "%s has more than %llu entries", fullname,
                     (unsigned long long)o->max);
            bad = 1;
            break;
        }
        if (pair_key(w, v, p, fullname, &k, &val) == NULL) {
            bad = 1;
            continue;
        }
        rc = map_entry(w, o, k, val, fullname, &m);
        if (rc == -EINVAL) {
            rc = 0;
            bad = 1;
        }
    }
    if (rc == 0 && !bad && !w->e->full) {
        cfg_map_free(cfg_field_of(o, base));
        *(struct cfg_map *)cfg_field_of(o, base) = m;
        return 0;
    }
    cfg_map_free(&m);
    return rc != 0 ? rc : -EINVAL;
}

/*
 * Set row o from value node v: checks the node's shape, treats a null as
 * "leave at the default" for maps, lists and rows that have no default and
 * are optional.
 * Returns 0, -EINVAL (reported) or -ENOMEM.
 */
static int set_from_node(struct walk *w, const struct cfg_option *o, void *base,
                         const yaml_node_t *v, const char *fullname)
{
    char noun[128], shown[320];
    if ((o->type == CFG_T_MAP || o->type == CFG_T_STRLIST) && cfg_is_null(v))
        return 0; /* `headers:` or `users:` with nothing: as if left out */
    if (o->type == CFG_T_STRLIST && v->type == YAML_SEQUENCE_NODE)
        return cfg_set_strlist(w->doc, w->e, o, base, v, fullname);
    if (o->type == CFG_T_STRLIST) {
        if (v->type == YAML_SCALAR_NODE)
            ERR_NODE(w->e, v, "%s: expected a list, not a scalar (write [%s])", fullname,
                     cfg_echo(shown, sizeof(shown), cfg_sv(v), v->data.scalar.length));
        else
            ERR_NODE(w->e, v, "%s: expected a list, not %s", fullname, cfg_node_kind(v));
        return -EINVAL;
    }
    if (o->type == CFG_T_MAP && v->type == YAML_MAPPING_NODE)
        return cfg_set_map(w, o, base, v, fullname);
    if (v->type != YAML_SCALAR_NODE || o->type == CFG_T_MAP) {
        ERR_NODE(w->e, v, "%s must be %s, not %s", fullname, cfg_type_noun(o, noun, sizeof(noun)),
                 cfg_node_kind(v));
        return -EINVAL;
    }
    if (cfg_is_null(v)) {
        if (o->def == NULL && !o->required)
            return 0;
        if (o->def == NULL)
            ERR_NODE(w->e, v, "%s has no value", fullname);
        else
            ERR_NODE(w->e, v, "%s has no value (the default is %s; leave the key out for it)",
                     fullname, cfg_def_text(o));
        return -EINVAL;
    }
    return cfg_set_value(o, base, cfg_sv(v), v->data.scalar.length, fullname, w->e, node_pos(v));
}

/*
 * Walk mapping node map of one target entry whose keys are under prefix (""
 * for the entry itself, "threads" inside its `threads:`); where names the
 * entry ("targets[2]"). Every problem is reported with the key's full name
 * ("targets[2].threads.max"); the recursion is bounded by the depth of the
 * TARGET rows' names. Returns 0 (problems in w->e) or -ENOMEM.
 */
static int walk_target_map(struct walk *w, const yaml_node_t *map, struct cfg_target *t,
                           const char *where, const char *prefix)
{
    char here[128];
    snprintf(here, sizeof(here), "%s%s%s", where, *prefix ? "." : "", prefix);
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        if (w->e->full)
            return 0;
        const yaml_node_t *k, *v;
        const char *key = pair_key(w, map, p, here, &k, &v);
        if (key == NULL)
            continue;
        char path[64 + CFG_MAX_KEY], full[128 + 64 + CFG_MAX_KEY], shown[320], hint[96];
        if (!key_usable(k)) {
            ERR_NODE(w->e, k, "unknown key '%s.%s'", here,
                     cfg_echo(shown, sizeof(shown), key, k->data.scalar.length));
            continue;
        }
        snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", key);
        snprintf(full, sizeof(full), "%s.%s", here, key);
        if (strchr(key, '.') != NULL) {
            /* As for the global options: one way to write each option. */
            ERR_NODE(w->e, k, "'%s': write nested keys, one name per level, not a dotted name",
                     cfg_echo(shown, sizeof(shown), full, strlen(full)));
            continue;
        }
        const struct cfg_option *o = cfg_find_row(path, CFG_SCOPE_TARGET, NULL);
        if (o != NULL) {
            int rc = set_from_node(w, o, t, v, full);
            if (rc == -ENOMEM)
                return rc;
            continue;
        }
        if (is_section(path, CFG_SCOPE_TARGET)) {
            if (cfg_is_null(v))
                continue; /* `threads:` with nothing: all defaults */
            if (v->type != YAML_MAPPING_NODE) {
                ERR_NODE(w->e, v, "%s must be a mapping of options, not %s", full,
                         cfg_node_kind(v));
                continue;
            }
            int rc = walk_target_map(w, v, t, where, path);
            if (rc != 0)
                return rc;
            continue;
        }
        suggest(prefix, key, CFG_SCOPE_TARGET, hint, sizeof(hint));
        ERR_NODE(w->e, k, "unknown key '%s'%s", cfg_echo(shown, sizeof(shown), full, strlen(full)),
                 hint);
    }
    return 0;
}

static int walk_target(struct walk *w, const yaml_node_t *item, size_t index)
{
    char where[48];
    snprintf(where, sizeof(where), "targets[%zu]", index);
    if (item->type != YAML_MAPPING_NODE) {
        ERR_NODE(w->e, item, "%s must be a mapping with at least 'inspector', not %s", where,
                 cfg_node_kind(item));
        return 0;
    }
    struct cfg_target *t;
    int rc = cfg_add_target(w->c, &w->targets_cap, &t);
    if (rc == 0)
        rc = walk_target_map(w, item, t, where, "");
    if (rc != 0)
        return rc;
    cfg_resolve_def_rows(t, CFG_SCOPE_TARGET);
    /* Required keys: checked by name, so that a present but invalid value
     * is reported once, as invalid, not also as missing. Only keys of the
     * entry itself can be required (a section's are optional with it). */
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope != CFG_SCOPE_TARGET || !o->required)
            continue;
        ISOPROF_ASSERT(strchr(o->name, '.') == NULL);
        int present = 0;
        for (yaml_node_pair_t *p = item->data.mapping.pairs.start;
             p < item->data.mapping.pairs.top && !present; p++) {
            const yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
            present = k != NULL && k->type == YAML_SCALAR_NODE && strcmp(cfg_sv(k), o->name) == 0;
        }
        if (!present)
            ERR_NODE(w->e, item, "%s has no '%s' (%s)", where, o->name, o->help);
    }
    return 0;
}

static int walk_targets(struct walk *w, const yaml_node_t *v)
{
    w->targets_seen = 1;
    if (cfg_is_null(v))
        return 0; /* `targets:` with nothing: no targets, like [] */
    if (v->type != YAML_SEQUENCE_NODE) {
        ERR_NODE(w->e, v, "targets must be a list of mappings, not %s", cfg_node_kind(v));
        return 0;
    }
    size_t i = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++, i++) {
        if (w->e->full)
            return 0;
        if (i == CFG_MAX_TARGETS) {
            ERR_NODE(w->e, v, "targets has more than %d entries", CFG_MAX_TARGETS);
            return 0;
        }
        yaml_node_t *item = yaml_document_get_node(w->doc, *it);
        if (item == NULL)
            continue;
        int rc = walk_target(w, item, i);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int cfg_walk_map(struct walk *w, const yaml_node_t *map, const char *prefix)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        if (w->e->full)
            return 0;
        const yaml_node_t *k, *v;
        const char *key = pair_key(w, map, p, *prefix ? prefix : "the top level", &k, &v);
        if (key == NULL)
            continue;
        char path[128 + CFG_MAX_KEY], shown[320], hint[96];
        if (!key_usable(k)) {
            ERR_NODE(w->e, k, "unknown key '%s%s%s'", prefix, *prefix ? "." : "",
                     cfg_echo(shown, sizeof(shown), key, k->data.scalar.length));
            continue;
        }
        snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", key);
        if (strchr(key, '.') != NULL) {
            /* A flat form would let one option be set twice without a
             * duplicate key; there is one way to write each option. */
            ERR_NODE(w->e, k, "'%s': write nested keys, one name per level, not a dotted name",
                     cfg_echo(shown, sizeof(shown), path, strlen(path)));
            continue;
        }
        if (*prefix == '\0' && strcmp(key, "targets") == 0) {
            int rc = walk_targets(w, v);
            if (rc != 0)
                return rc;
            continue;
        }
        size_t idx;
        const struct cfg_option *o = cfg_find_row(path, CFG_SCOPE_GLOBAL, &idx);
        if (o != NULL) {
            int rc = set_from_node(w, o, w->c, v, path);
            if (rc == -ENOMEM)
                return rc;
            w->slots[idx].node = v;
            w->slots[idx].bad = rc != 0;
            continue;
        }
        if (is_section(path, CFG_SCOPE_GLOBAL)) {
            if (cfg_is_null(v))
                continue; /* `log:` with nothing: all defaults */
            if (v->type != YAML_MAPPING_NODE) {
                ERR_NODE(w->e, v, "%s must be a mapping of options, not %s", path,
                         cfg_node_kind(v));
                continue;
            }
            int rc = cfg_walk_map(w, v, path);
            if (rc != 0)
                return rc;
            continue;
        }
        suggest(prefix, key, CFG_SCOPE_GLOBAL, hint, sizeof(hint));
        ERR_NODE(w->e, k, "unknown key '%s'%s", cfg_echo(shown, sizeof(shown), path, strlen(path)),
                 hint);
    }
    return 0;
}

/*
 * config.c - the YAML loader, driven by the option table in options.c.
 *
 * The text is loaded as a libyaml document, so every node keeps the 1-based
 * line and column where it starts, and then walked. A mapping key either
 * names an option (its value must be a scalar; for a map option, a mapping
 * of names to scalars, walked up to the row's `max` entries; for a list
 * option, a sequence of scalars, up to CFG_STRLIST_MAX), a section
 * that prefixes options (its value must be a mapping), or `targets` (a list
 * of mappings whose keys are the per-target options, walked the same way:
 * a key there names a target option or a target section such as
 * `threads`). Anything else is an error.
 * Problems are collected, not returned at the first one, as lines (at most
 * CFG_MAX_ERRORS) that are sorted by position at the end. The walk stops
 * once there are that many, which also bounds the work a hostile file can
 * cause: the duplicate-key check is quadratic in the keys of one mapping,
 * but only keys already processed are compared, and each of those is
 * either a known option or a counted error. Nesting depth is checked on
 * libyaml's event stream before the document is built (see check_depth).
 * The configuration is handed out only when there was no problem at all.
 *
 * Defaults are applied first by parsing each row's `def` text with the code
 * that parses a file's value (a list's, "[node]", is read by libyaml and
 * walked as a file's list is); a row whose default is another row's value
 * (cfg_option.def_row) is resolved once its target entry has been walked.
 * Numbers are parsed with integer arithmetic (no strtod: no locale, no hex
 * or exponent forms, no rounding surprises). A row may carry its own check
 * (cfg_option.check, e.g. the upload URL's syntax in upload.c), run on a
 * string's value, on each key and value of a map or on each entry of a
 * list. Rules between options come from cfg_relations and are checked after
 * the walk, only between values that were themselves valid.
 *
 * Everything the loader allocates goes through isoprof_malloc and friends,
 * so the unit tests can fail each allocation in turn; libyaml's own
 * allocations do not, and a libyaml memory error maps to -ENOMEM.
 *
 * This file holds the load itself (the depth check, the document, the
 * rules between options), the reload check, and cfg_control_socket_path,
 * the one rule by which the daemon and its clients find the control
 * socket. value.c collects the problems and sets one value, rows.c knows
 * the rows and struct cfg's lifetime, walk.c walks the document, help.c
 * prints --help and the example; loader_internal.h is what they share.
 */
#include "loader_internal.h"

#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

/* Is row o set in base: a string that is not empty, a map or a list with
 * entries, a number that is not 0? */
static int row_is_set(const struct cfg_option *o, const void *base)
{
    if (o->type == CFG_T_MAP)
        return ((const struct cfg_map *)cfg_field_of(o, base))->n > 0;
    if (o->type == CFG_T_STRLIST)
        return ((const struct cfg_strlist *)cfg_field_of(o, base))->n > 0;
    if (cfg_row_is_string(o)) {
        const char *s = *(char *const *)cfg_field_of(o, base);
        return s != NULL && s[0] != '\0';
    }
    return cfg_row_number(o, base) != 0;
}

/* One side of a relation: the GLOBAL row called name, or every row of the
 * section name. */
struct rel_side {
    const struct cfg_option *row; /* the row (a section: its first), NULL if none */
    const yaml_node_t *node;      /* where the file gives it (a section: a row that is
                                     set, else any), NULL if nowhere */
    int set, bad;                 /* set (see row_is_set); a value was refused */
};

static struct rel_side rel_side(const struct walk *w, const char *name)
{
    struct rel_side r = {NULL, NULL, 0, 0};
    const yaml_node_t *any = NULL;
    size_t n = strlen(name);
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope != CFG_SCOPE_GLOBAL || strncmp(o->name, name, n) != 0 ||
            (o->name[n] != '\0' && o->name[n] != '.'))
            continue;
        if (r.row == NULL)
            r.row = o;
        r.bad |= w->slots[i].bad;
        if (any == NULL)
            any = w->slots[i].node;
        if (row_is_set(o, w->c)) {
            r.set = 1;
            if (r.node == NULL)
                r.node = w->slots[i].node;
        }
    }
    if (r.node == NULL)
        r.node = any;
    return r;
}

/* Report a rule's problem at n, or at 1:1 if the values are the defaults. */
#define ERR_RULE(e, n, ...)                                                                        \
    do {                                                                                           \
        if ((n) != NULL)                                                                           \
            ERR_NODE((e), (n), __VA_ARGS__);                                                       \
        else                                                                                       \
            cfg_err_at((e), 1, 1, __VA_ARGS__);                                                    \
    } while (0)

/* Run rel's entry_rule on each value of its map, which the file set at node
 * (valid: every key and value is a scalar). */
static void check_entries(struct walk *w, const struct cfg_relation *rel, const yaml_node_t *node)
{
    if (node == NULL || node->type != YAML_MAPPING_NODE)
        return;
    for (const yaml_node_pair_t *p = node->data.mapping.pairs.start;
         p < node->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
        const char *problem = k != NULL && v != NULL ? rel->entry_rule(w->c, cfg_sv(v)) : NULL;
        if (problem != NULL) {
            char shown[320];
            ERR_NODE(w->e, v, "%s.%s %s", rel->name,
                     cfg_echo(shown, sizeof(shown), cfg_sv(k), k->data.scalar.length), problem);
        }
    }
}

/* The rules of cfg_relations, between values that were valid. */
static void check_relations(struct walk *w)
{
    for (size_t r = 0; r < cfg_nrelations; r++) {
        const struct cfg_relation *rel = &cfg_relations[r];
        struct rel_side a = rel_side(w, rel->name), b = rel_side(w, rel->other);
        if (a.row == NULL || b.row == NULL || a.bad || b.bad)
            continue;
        switch (rel->kind) {
        case CFG_REL_AT_LEAST: {
            uint64_t va = cfg_row_number(a.row, w->c), vb = cfg_row_number(b.row, w->c);
            if (va >= vb)
                break;
            char ta[32], tb[32];
            cfg_fmt_value(a.row, va, ta, sizeof(ta));
            cfg_fmt_value(b.row, vb, tb, sizeof(tb));
            if (a.node == NULL && b.node != NULL)
                ERR_NODE(w->e, b.node, "%s must be <= %s (%s)", rel->other, rel->name, ta);
            else
                ERR_RULE(w->e, a.node, "%s must be >= %s (%s)", rel->name, rel->other, tb);
            break;
        }
        case CFG_REL_NEEDS:
            if (a.set && !b.set)
                ERR_RULE(w->e, a.node, "%s needs %s", rel->name, rel->other);
            break;
        case CFG_REL_EXCLUDES:
            if (a.set && b.set)
                ERR_RULE(w->e, a.node, "%s and %s cannot both be set; use one", rel->name,
                         rel->other);
            break;
        case CFG_REL_ENTRIES:
            check_entries(w, rel, a.node);
            break;
        case CFG_REL_NONEMPTY:
            if (b.set && !a.set)
                ERR_RULE(w->e, a.node != NULL ? a.node : b.node,
                         "%s is empty (%s needs at least one entry)", rel->name, rel->other);
            break;
        }
    }
}

/* Report libyaml's error. Reader errors (bad UTF-8, control bytes) carry a
 * byte offset rather than a mark; turn it into line:col. */
static void report_yaml_error(const yaml_parser_t *parser, struct errs *e, const char *text,
                              size_t len)
{
    const char *problem = parser->problem ? parser->problem : "malformed YAML";
    if (parser->error == YAML_READER_ERROR) {
        size_t line = 1, col = 1, end = parser->problem_offset < len ? parser->problem_offset : len;
        for (size_t i = 0; i < end; i++) {
            if (text[i] == '\n') {
                line++;
                col = 1;
            } else if (((unsigned char)text[i] & 0xc0) != 0x80) {
                col++;
            }
        }
        if (parser->problem_value >= 0)
            cfg_err_at(e, line, col, "YAML: %s (byte 0x%02x)", problem,
                       (unsigned)(parser->problem_value & 0xff));
        else
            cfg_err_at(e, line, col, "YAML: %s", problem);
        return;
    }
    /* The commonest cause by far is a tab in the indentation. */
    size_t at = parser->problem_mark.index;
    const char *tab = at < len && text[at] == '\t' ? "; YAML indents with spaces, not tabs" : "";
    if (parser->context != NULL)
        cfg_err_at(e, parser->problem_mark.line + 1, parser->problem_mark.column + 1,
                   "YAML syntax error: %s (%s that starts at line %zu)%s", problem, parser->context,
                   (size_t)parser->context_mark.line + 1, tab);
    else
        cfg_err_at(e, parser->problem_mark.line + 1, parser->problem_mark.column + 1,
                   "YAML syntax error: %s%s", problem, tab);
}

/*
 * libyaml's scanner does work proportional to the flow nesting depth for
 * every token, so "[[[[..." takes quadratic time (a 1 MiB file: hours).
 * Walk the events once and refuse deep nesting before building the
 * document; the events stop at the first opening past the limit, a little
 * over a thousand bytes of lookahead later. A config is three levels deep.
 * Likewise libyaml's loader compares every new anchor with all earlier
 * ones, so the number of anchors is capped too.
 * Returns 0 (fine, or a syntax error the document load will report), 1 (too
 * deep, reported in e) or -ENOMEM.
 */
static const yaml_char_t *event_anchor(const yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        return ev->data.scalar.anchor;
    case YAML_SEQUENCE_START_EVENT:
        return ev->data.sequence_start.anchor;
    case YAML_MAPPING_START_EVENT:
        return ev->data.mapping_start.anchor;
    default:
        return NULL;
    }
}

static int check_depth(const char *text, size_t len, struct errs *e)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    if (!yaml_parser_initialize(&parser))
        return -ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int depth = 0, anchors = 0, rc = 0;
    for (;;) {
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = parser.error == YAML_MEMORY_ERROR ? -ENOMEM : 0;
            break;
        }
        yaml_event_type_t type = ev.type;
        if (event_anchor(&ev) != NULL && ++anchors > CFG_MAX_ANCHORS) {
            cfg_err_at(e, ev.start_mark.line + 1, ev.start_mark.column + 1,
                       "more than %d YAML anchors", CFG_MAX_ANCHORS);
            rc = 1;
        } else if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
            if (++depth > CFG_MAX_DEPTH) {
                cfg_err_at(e, ev.start_mark.line + 1, ev.start_mark.column + 1,
                           "nested more than %d levels deep", CFG_MAX_DEPTH);
                rc = 1;
            }
        } else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
            depth--;
        }
        yaml_event_delete(&ev);
        if (rc != 0 || type == YAML_STREAM_END_EVENT)
            break;
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* Load and walk the document(s); returns 0 (problems in e) or -ENOMEM. */
static int load_document(struct cfg *c, struct errs *e, struct slot *slots, const char *text,
                         size_t len)
{
    int rc = check_depth(text, len, e);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return -ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        if (parser.error == YAML_MEMORY_ERROR)
            rc = -ENOMEM;
        else
            report_yaml_error(&parser, e, text, len);
        yaml_parser_delete(&parser);
        return rc;
    }
    struct walk w = {.doc = &doc, .c = c, .e = e, .slots = slots};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root == NULL || cfg_is_null(root)) {
        /* an empty file, or only comments: all defaults */
    } else if (root->type != YAML_MAPPING_NODE) {
        ERR_NODE(e, root, "the configuration must be a mapping of sections, not %s",
                 cfg_node_kind(root));
    } else {
        rc = cfg_walk_map(&w, root, "");
    }
    if (rc == 0)
        check_relations(&w);
    if (rc == 0 && !w.targets_seen)
        rc = cfg_add_default_target(c, &w.targets_cap);
    yaml_document_delete(&doc);

    /* A second document would be silently ignored by a document loader;
     * say so instead. */
    if (rc == 0 && !e->full) {
        yaml_document_t more;
        if (!yaml_parser_load(&parser, &more)) {
            if (parser.error == YAML_MEMORY_ERROR)
                rc = -ENOMEM;
            else
                report_yaml_error(&parser, e, text, len);
        } else {
            yaml_node_t *r2 = yaml_document_get_root_node(&more);
            if (r2 != NULL)
                ERR_NODE(e, r2, "a config file holds one YAML document; this is a second one");
            yaml_document_delete(&more);
        }
    }
    yaml_parser_delete(&parser);
    return rc;
}

int cfg_load_buffer(const char *name, const char *text, size_t len, struct cfg **out, char **why)
{
    if (why)
        *why = NULL;
    if (name == NULL)
        name = "<buffer>";
    if (len > CFG_MAX_FILE) {
        if (why)
            *why = isoprof_asprintf("%s: larger than %u bytes", name, CFG_MAX_FILE);
        return -EFBIG;
    }
    if (text == NULL) {
        if (len != 0)
            return -EINVAL;
        text = "";
    }
    struct cfg *c;
    int rc = cfg_new(name, &c);
    if (rc != 0)
        return rc;
    struct slot *slots = isoprof_calloc(cfg_noptions, sizeof(*slots));
    if (slots == NULL) {
        cfg_free(c);
        return -ENOMEM;
    }
    struct errs e = {.name = name};
    rc = load_document(c, &e, slots, text, len);
    isoprof_free(slots);
    if (rc == 0 && e.full)
        cfg_errs_push(&e, SIZE_MAX, 0,
                      isoprof_asprintf("%s: too many problems; only the first %d are shown", name,
                                       CFG_MAX_ERRORS));
    if (rc == 0 && e.oom)
        rc = -ENOMEM;
    if (rc == 0 && e.count > 0)
        rc = ISOPROF_ECONFIG;
    if (rc == ISOPROF_ECONFIG && cfg_errs_finish(&e, why) != 0)
        rc = -ENOMEM;
    cfg_errs_release(&e);
    if (rc != 0) {
        cfg_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* Read a whole file of at most CFG_MAX_FILE bytes. */
static int read_file(const char *path, char **out, size_t *outlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return -EISDIR;
    }
    size_t cap = 4096, len = 0;
    if (S_ISREG(st.st_mode) && st.st_size > 0 && (uint64_t)st.st_size < CFG_MAX_FILE)
        cap = (size_t)st.st_size + 1;
    char *buf = isoprof_malloc(cap);
    if (buf == NULL) {
        close(fd);
        return -ENOMEM;
    }
    int rc = 0;
    for (;;) {
        if (len == cap) {
            /* One byte beyond the cap tells "exactly the cap" from more. */
            char *nb = isoprof_grow(buf, &cap, (size_t)CFG_MAX_FILE + 1, &rc);
            if (nb == NULL) {
                if (rc == ISOPROF_ETOOBIG)
                    rc = -EFBIG;
                break;
            }
            buf = nb;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    if (rc == 0 && len > CFG_MAX_FILE)
        rc = -EFBIG;
    if (rc != 0) {
        isoprof_free(buf);
        return rc;
    }
    *out = buf;
    *outlen = len;
    return 0;
}

int cfg_load_file(const char *path, struct cfg **out, char **why)
{
    if (why)
        *why = NULL;
    char *buf = NULL;
    size_t len = 0;
    int rc = read_file(path, &buf, &len);
    if (rc != 0) {
        if (why && rc == -EFBIG)
            *why = isoprof_asprintf("%s: larger than %u bytes", path, CFG_MAX_FILE);
        else if (why && rc != -ENOMEM)
            *why = isoprof_asprintf("%s: %s", path, isoprof_strerror(rc));
        return rc;
    }
    rc = cfg_load_buffer(path, buf, len, out, why);
    isoprof_free(buf);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Reload                                                                   */

int cfg_check_reload(const struct cfg *running, const struct cfg *next, char **why)
{
    struct errs e = {.name = next->source};
    if (why)
        *why = NULL;
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->reloadable)
            continue;
        size_t n = o->scope == CFG_SCOPE_GLOBAL ? 1 : running->ntargets;
        if (o->scope == CFG_SCOPE_TARGET && next->ntargets < n)
            n = next->ntargets;
        for (size_t t = 0; t < n; t++) {
            const void *a = o->scope == CFG_SCOPE_GLOBAL ? (const void *)running
                                                         : (const void *)&running->targets[t];
            const void *b =
                o->scope == CFG_SCOPE_GLOBAL ? (const void *)next : (const void *)&next->targets[t];
            if (cfg_row_equal(o, a, b))
                continue;
            char was[96], now[96], *line;
            cfg_row_text(o, a, was, sizeof(was));
            cfg_row_text(o, b, now, sizeof(now));
            if (o->type == CFG_T_MAP) /* not shown: a value may be a secret */
                line = isoprof_asprintf("%s: %s changed; restart to apply", e.name, o->name);
            else if (o->scope == CFG_SCOPE_GLOBAL)
                line = isoprof_asprintf("%s: %s changed (%s -> %s); restart to apply", e.name,
                                        o->name, was, now);
            else
                line = isoprof_asprintf("%s: targets[%zu].%s changed (%s -> %s); restart to apply",
                                        e.name, t, o->name, was, now);
            if (e.count < CFG_MAX_ERRORS)
                cfg_errs_push(&e, 0, 0, line);
            else
                isoprof_free(line);
        }
    }
    int rc = e.oom ? -ENOMEM : e.count ? ISOPROF_ECONFIG : 0;
    if (rc == ISOPROF_ECONFIG && cfg_errs_finish(&e, why) != 0)
        rc = -ENOMEM;
    cfg_errs_release(&e);
    return rc;
}

int cfg_section_equal(const struct cfg *a, const struct cfg *b, const char *section)
{
    size_t len = strlen(section);
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope != CFG_SCOPE_GLOBAL || strncmp(o->name, section, len) != 0 ||
            (o->name[len] != '\0' && o->name[len] != '.'))
            continue;
        if (!cfg_row_equal(o, a, b))
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* The control socket's path                                                */

int cfg_control_socket_path(const char *path, const char *store_dir, unsigned flags, char **out)
{
    int client = (flags & CFG_SOCKET_CLIENT) != 0;
    if (client && (path == NULL || path[0] == '\0'))
        path = getenv("ISOPROF_SOCKET");
    if (path != NULL && path[0] != '\0') {
        char *p = isoprof_strdup(path);
        if (p == NULL)
            return -ENOMEM;
        *out = p;
        return 0;
    }
    char *cand[3];
    size_t n = 0, pick = 0;
    int rc = 0;
    const char *rt = getenv("RUNTIME_DIRECTORY");
    if (rt != NULL && rt[0] != '\0')
        cand[n++] = isoprof_asprintf("%.*s/isoprof.sock", (int)strcspn(rt, ":"), rt);
    if (store_dir != NULL)
        cand[n++] = isoprof_asprintf("%s/control.sock", store_dir);
    if (client)
        cand[n++] = isoprof_strdup(CFG_CONTROL_SOCKET_RUN);
    for (size_t i = 0; i < n; i++)
        if (cand[i] == NULL)
            rc = -ENOMEM;
    if (n == 0)
        rc = -ENOENT;
    for (size_t i = 0; rc == 0 && client && i < n; i++) {
        struct stat st;
        if (lstat(cand[i], &st) == 0) {
            pick = i;
            break;
        }
    }
    for (size_t i = 0; i < n; i++)
        if (rc != 0 || i != pick)
            isoprof_free(cand[i]);
    if (rc == 0)
        *out = cand[pick];
    return rc;
}

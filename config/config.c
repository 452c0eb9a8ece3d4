/*
 * config.c - the YAML loader, driven by the option table in options.c.
 *
 * The file is loaded as a libyaml document (every node keeps its 1-based
 * line and column once we add one), then walked: a mapping key either names
 * an option (its value must be a scalar), a section that prefixes options
 * (its value must be a mapping), or `targets` (a sequence of mappings whose
 * keys are the per-target options). Everything else is an error. Errors
 * are collected, not returned at the first one, into a capped buffer; the
 * configuration is only handed out when there were none.
 *
 * Defaults are applied first by parsing each row's `def` text with the
 * same code that parses a file's value, so a default can never escape its
 * own bounds unnoticed (the unit test loads the defaults through it).
 */
#include "config.h"
#include "internal.h"

#include "base.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define CFG_MAX_ERRORS 100
#define CFG_MAX_FILE (4u << 20)
#define CFG_MAX_TARGETS 4096

struct errs {
    const char *name;
    char *buf;
    size_t len, cap;
    int count;
    int oom;
};

__attribute__((format(printf, 4, 5))) static void err_at(struct errs *e, size_t line, size_t col,
                                                         const char *fmt, ...)
{
    e->count++;
    if (e->count > CFG_MAX_ERRORS)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    char *line_txt = e->count == CFG_MAX_ERRORS
                         ? isoprof_asprintf("%s:%zu:%zu: %s\n%s: too many errors, stopping\n",
                                            e->name, line, col, msg, e->name)
                         : isoprof_asprintf("%s:%zu:%zu: %s\n", e->name, line, col, msg);
    if (line_txt == NULL) {
        e->oom = 1;
        return;
    }
    size_t n = strlen(line_txt);
    if (e->len + n + 1 > e->cap) {
        size_t ncap = e->cap ? e->cap * 2 : 256;
        while (ncap < e->len + n + 1)
            ncap *= 2;
        char *nb = isoprof_realloc(e->buf, ncap);
        if (nb == NULL) {
            isoprof_free(line_txt);
            e->oom = 1;
            return;
        }
        e->buf = nb;
        e->cap = ncap;
    }
    memcpy(e->buf + e->len, line_txt, n + 1);
    e->len += n;
    isoprof_free(line_txt);
}

#define ERR_NODE(e, node, ...)                                                                     \
    err_at((e), (node)->start_mark.line + 1, (node)->start_mark.column + 1, __VA_ARGS__)

/* --- scalar parsers --- */

static int parse_number(const char *s, double *v, const char **unit)
{
    const char *p = s;
    if (!isdigit((unsigned char)*p) && *p != '.')
        return -EINVAL;
    char *end;
    errno = 0;
    double d = strtod(p, &end);
    if (end == p || errno != 0 || !isfinite(d) || d < 0)
        return -EINVAL;
    while (*end == ' ')
        end++;
    *v = d;
    *unit = end;
    return 0;
}

int cfg_parse_duration(const char *s, uint64_t *ns)
{
    static const struct {
        const char *u;
        double mul;
    } units[] = {{"ns", 1}, {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"ms", 1e6},
                 {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}};
    double v;
    const char *unit;
    if (s == NULL || parse_number(s, &v, &unit) != 0)
        return -EINVAL;
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(units); i++) {
        if (strcmp(unit, units[i].u) == 0) {
            double r = v * units[i].mul;
            if (r >= 1.8e19)
                return -ERANGE;
            *ns = (uint64_t)llround(r);
            return 0;
        }
    }
    return -EINVAL;
}

int cfg_parse_size(const char *s, uint64_t *bytes)
{
    static const struct {
        const char *u;
        double mul;
    } units[] = {{"B", 1},          {"KiB", 1024.0},        {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"KB", 1e3},
                 {"MB", 1e6},       {"GB", 1e9},            {"TB", 1e12}};
    double v;
    const char *unit;
    if (s == NULL || parse_number(s, &v, &unit) != 0)
        return -EINVAL;
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(units); i++) {
        if (strcmp(unit, units[i].u) == 0) {
            double r = v * units[i].mul;
            if (r >= 1.8e19)
                return -ERANGE;
            *bytes = (uint64_t)llround(r);
            return 0;
        }
    }
    return -EINVAL;
}

const char *cfg_log_level_name(enum cfg_log_level l)
{
    switch (l) {
    case CFG_LOG_DEBUG:
        return "debug";
    case CFG_LOG_INFO:
        return "info";
    case CFG_LOG_WARN:
        return "warn";
    case CFG_LOG_ERROR:
        return "error";
    }
    return "info";
}

static int parse_inspector(const char *s, char **host, uint16_t *port)
{
    const char *h, *he, *ps;
    if (*s == '[') {
        h = s + 1;
        he = strchr(h, ']');
        if (he == NULL || he[1] != ':')
            return -EINVAL;
        ps = he + 2;
    } else {
        h = s;
        he = strchr(s, ':');
        if (he == NULL || strchr(he + 1, ':') != NULL)
            return -EINVAL;
        ps = he + 1;
    }
    size_t hl = (size_t)(he - h);
    if (hl == 0 || hl > 253)
        return -EINVAL;
    for (const char *p = h; p < he; p++) {
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != ':')
            return -EINVAL;
    }
    if (*ps == '\0' || strlen(ps) > 5)
        return -EINVAL;
    long pv = 0;
    for (const char *p = ps; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return -EINVAL;
        pv = pv * 10 + (*p - '0');
    }
    if (pv < 1 || pv > 65535)
        return -EINVAL;
    char *d = isoprof_strndup(h, hl);
    if (d == NULL)
        return -ENOMEM;
    isoprof_free(*host);
    *host = d;
    *port = (uint16_t)pv;
    return 0;
}

static void fmt_value(const struct cfg_option *o, uint64_t v, char *buf, size_t cap)
{
    if (o->type == CFG_T_DURATION) {
        if (v % 3600000000000ull == 0 && v)
            snprintf(buf, cap, "%lluh", (unsigned long long)(v / 3600000000000ull));
        else if (v % 60000000000ull == 0 && v)
            snprintf(buf, cap, "%llum", (unsigned long long)(v / 60000000000ull));
        else if (v % 1000000000ull == 0 && v)
            snprintf(buf, cap, "%llus", (unsigned long long)(v / 1000000000ull));
        else if (v % 1000000ull == 0 && v)
            snprintf(buf, cap, "%llums", (unsigned long long)(v / 1000000ull));
        else
            snprintf(buf, cap, "%lluus", (unsigned long long)(v / 1000ull));
    } else if (o->type == CFG_T_SIZE) {
        if (v % (1ull << 40) == 0 && v)
            snprintf(buf, cap, "%lluTiB", (unsigned long long)(v >> 40));
        else if (v % (1ull << 30) == 0 && v)
            snprintf(buf, cap, "%lluGiB", (unsigned long long)(v >> 30));
        else if (v % (1ull << 20) == 0 && v)
            snprintf(buf, cap, "%lluMiB", (unsigned long long)(v >> 20));
        else
            snprintf(buf, cap, "%lluB", (unsigned long long)v);
    } else if (o->type == CFG_T_FRACTION) {
        snprintf(buf, cap, "%llu%%", (unsigned long long)(v / 10));
    } else {
        snprintf(buf, cap, "%llu", (unsigned long long)v);
    }
}

/*
 * Parse text as option o into base + o->offset. On a problem, report it at
 * node (or with line 0 for defaults) and return -EINVAL.
 */
static int set_value(const struct cfg_option *o, void *base, const char *text,
                     const char *fullname, struct errs *e, const yaml_node_t *node)
{
    char *field = (char *)base + o->offset;
    char lo[32], hi[32];
    uint64_t v = 0;
    int rc = 0;
#define BAD(...)                                                                                   \
    do {                                                                                           \
        if (node)                                                                                  \
            ERR_NODE(e, node, __VA_ARGS__);                                                        \
        else                                                                                       \
            err_at(e, 0, 0, __VA_ARGS__);                                                          \
        return -EINVAL;                                                                            \
    } while (0)
    switch (o->type) {
    case CFG_T_STRING: {
        size_t n = strlen(text);
        if (n == 0)
            BAD("%s must not be empty", fullname);
        if (o->max && n > o->max)
            BAD("%s is longer than %llu bytes", fullname, (unsigned long long)o->max);
        char *d = isoprof_strdup(text);
        if (d == NULL) {
            e->oom = 1;
            return -ENOMEM;
        }
        isoprof_free(*(char **)field);
        *(char **)field = d;
        return 0;
    }
    case CFG_T_INSPECTOR: {
        struct cfg_target *t = base;
        rc = parse_inspector(text, &t->host, &t->port);
        if (rc == -ENOMEM) {
            e->oom = 1;
            return rc;
        }
        if (rc != 0)
            BAD("%s: '%s' is not host:port (an IP literal, [v6] or a name, port 1-65535)", fullname,
                text);
        char *d = isoprof_strdup(text);
        if (d == NULL) {
            e->oom = 1;
            return -ENOMEM;
        }
        isoprof_free(t->inspector);
        t->inspector = d;
        return 0;
    }
    case CFG_T_LOGLEVEL:
        for (int l = CFG_LOG_DEBUG; l <= CFG_LOG_ERROR; l++) {
            if (strcmp(text, cfg_log_level_name((enum cfg_log_level)l)) == 0) {
                *(enum cfg_log_level *)field = (enum cfg_log_level)l;
                return 0;
            }
        }
        BAD("%s must be debug, info, warn or error, not '%s'", fullname, text);
    case CFG_T_DURATION:
        rc = cfg_parse_duration(text, &v);
        if (rc != 0)
            BAD("%s: '%s' is not a duration (a number and a unit: us, ms, s, m, h)", fullname,
                text);
        break;
    case CFG_T_SIZE:
        rc = cfg_parse_size(text, &v);
        if (rc != 0)
            BAD("%s: '%s' is not a size (a number and a unit: B, KiB, MiB, GiB)", fullname, text);
        break;
    case CFG_T_UINT32: {
        const char *p = text;
        if (*p == '\0' || strlen(p) > 10)
            BAD("%s: '%s' is not a whole number", fullname, text);
        for (; *p; p++) {
            if (!isdigit((unsigned char)*p))
                BAD("%s: '%s' is not a whole number", fullname, text);
            v = v * 10 + (uint64_t)(*p - '0');
        }
        break;
    }
    case CFG_T_FRACTION: {
        double d;
        const char *unit;
        if (parse_number(text, &d, &unit) != 0 || (*unit != '\0' && strcmp(unit, "%") != 0))
            BAD("%s: '%s' is not a share (0.1 or 10%%)", fullname, text);
        if (*unit == '%')
            d /= 100.0;
        if (d * 1000.0 > (double)o->max + 1e-9)
            BAD("%s must be between 0 and %llu%%, not %s", fullname,
                (unsigned long long)(o->max / 10), text);
        *(double *)field = d;
        return 0;
    }
    }
    if (v < o->min || (o->max && v > o->max)) {
        fmt_value(o, o->min, lo, sizeof(lo));
        fmt_value(o, o->max, hi, sizeof(hi));
        BAD("%s must be between %s and %s, not %s", fullname, lo, hi, text);
    }
    if (o->type == CFG_T_UINT32)
        *(uint32_t *)field = (uint32_t)v;
    else
        *(uint64_t *)field = v;
    return 0;
#undef BAD
}

/* --- cfg lifetime --- */

static void target_clear(struct cfg_target *t)
{
    isoprof_free(t->inspector);
    isoprof_free(t->host);
    isoprof_free(t->worker);
    isoprof_free(t->version);
}

void cfg_free(struct cfg *c)
{
    if (c == NULL)
        return;
    isoprof_free(c->source);
    isoprof_free(c->store.path);
    for (size_t i = 0; i < c->ntargets; i++)
        target_clear(&c->targets[i]);
    isoprof_free(c->targets);
    isoprof_free(c);
}

static int apply_defaults(void *base, enum cfg_scope scope, struct errs *e)
{
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope != scope || o->def == NULL)
            continue;
        int rc = set_value(o, base, o->def, o->name, e, NULL);
        if (rc != 0)
            return rc == -ENOMEM ? rc : -EINVAL;
    }
    return 0;
}

static int add_target(struct cfg *c, struct cfg_target **out, struct errs *e)
{
    struct cfg_target *nt = isoprof_realloc(c->targets, (c->ntargets + 1) * sizeof(*nt));
    if (nt == NULL)
        return -ENOMEM;
    c->targets = nt;
    struct cfg_target *t = &nt[c->ntargets++];
    memset(t, 0, sizeof(*t));
    int rc = apply_defaults(t, CFG_SCOPE_TARGET, e);
    *out = t;
    return rc;
}

static int cfg_new(const char *source, struct cfg **out)
{
    struct cfg *c = isoprof_calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    struct errs e = {.name = "<defaults>"};
    c->source = isoprof_strdup(source);
    int rc = c->source ? apply_defaults(c, CFG_SCOPE_GLOBAL, &e) : -ENOMEM;
    isoprof_free(e.buf);
    if (rc != 0 || e.oom) {
        cfg_free(c);
        return -ENOMEM;
    }
    *out = c;
    return 0;
}

int cfg_defaults(struct cfg **out)
{
    struct cfg *c;
    int rc = cfg_new("<defaults>", &c);
    if (rc != 0)
        return rc;
    struct errs e = {.name = "<defaults>"};
    struct cfg_target *t;
    rc = add_target(c, &t, &e);
    if (rc == 0)
        rc = set_value(&cfg_options[2], t, "127.0.0.1:9229", "inspector", &e, NULL);
    isoprof_free(e.buf);
    if (rc != 0) {
        cfg_free(c);
        return -ENOMEM;
    }
    *out = c;
    return 0;
}

/* --- the document walk --- */

struct walk {
    yaml_document_t *doc;
    struct cfg *c;
    struct errs *e;
    const yaml_node_t *marks[64]; /* where each global option was set */
    int targets_seen;
};

static const struct cfg_option *find_option(const char *name, enum cfg_scope scope, size_t *index)
{
    for (size_t i = 0; i < cfg_noptions; i++) {
        if (cfg_options[i].scope == scope && strcmp(cfg_options[i].name, name) == 0) {
            if (index)
                *index = i;
            return &cfg_options[i];
        }
    }
    return NULL;
}

static int is_section(const char *path)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < cfg_noptions; i++) {
        if (cfg_options[i].scope == CFG_SCOPE_GLOBAL && strncmp(cfg_options[i].name, path, n) == 0 &&
            cfg_options[i].name[n] == '.')
            return 1;
    }
    return 0;
}

static const char *node_kind(const yaml_node_t *n)
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

/* Reports a key repeated within one mapping; returns nonzero if key is a repeat. */
static int is_duplicate(struct walk *w, const yaml_node_t *map, const yaml_node_pair_t *pair)
{
    const yaml_node_t *k = yaml_document_get_node(w->doc, pair->key);
    for (const yaml_node_pair_t *p = map->data.mapping.pairs.start; p < pair; p++) {
        const yaml_node_t *pk = yaml_document_get_node(w->doc, p->key);
        if (pk && pk->type == YAML_SCALAR_NODE &&
            strcmp((const char *)pk->data.scalar.value, (const char *)k->data.scalar.value) == 0) {
            ERR_NODE(w->e, k, "duplicate key '%s' (first at line %zu)", k->data.scalar.value,
                     pk->start_mark.line + 1);
            return 1;
        }
    }
    return 0;
}

static int walk_target(struct walk *w, const yaml_node_t *item, size_t index)
{
    if (item->type != YAML_MAPPING_NODE) {
        ERR_NODE(w->e, item, "targets[%zu] must be a mapping with at least 'inspector', not %s",
                 index, node_kind(item));
        return 0;
    }
    struct cfg_target *t;
    int rc = add_target(w->c, &t, w->e);
    if (rc != 0)
        return rc;
    int has_inspector = 0;
    for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
        if (k == NULL || v == NULL)
            continue;
        if (k->type != YAML_SCALAR_NODE) {
            ERR_NODE(w->e, k, "targets[%zu]: keys must be plain names", index);
            continue;
        }
        if (is_duplicate(w, item, p))
            continue;
        const char *key = (const char *)k->data.scalar.value;
        char full[128];
        snprintf(full, sizeof(full), "targets[%zu].%s", index, key);
        const struct cfg_option *o = find_option(key, CFG_SCOPE_TARGET, NULL);
        if (o == NULL) {
            ERR_NODE(w->e, k, "unknown key '%s' (a target takes inspector, worker, version, memory_limit)",
                     full);
            continue;
        }
        if (v->type != YAML_SCALAR_NODE) {
            ERR_NODE(w->e, v, "%s must be a scalar, not %s", full, node_kind(v));
            continue;
        }
        if (set_value(o, t, (const char *)v->data.scalar.value, full, w->e, v) == -ENOMEM)
            return -ENOMEM;
        if (o->type == CFG_T_INSPECTOR)
            has_inspector = 1;
    }
    if (!has_inspector)
        ERR_NODE(w->e, item, "targets[%zu] has no 'inspector' (host:port)", index);
    return 0;
}

static int walk_targets(struct walk *w, const yaml_node_t *v)
{
    w->targets_seen = 1;
    if (v->type == YAML_SCALAR_NODE && v->data.scalar.length == 0)
        return 0; /* `targets:` with nothing: no targets */
    if (v->type != YAML_SEQUENCE_NODE) {
        ERR_NODE(w->e, v, "targets must be a list of mappings, not %s", node_kind(v));
        return 0;
    }
    size_t i = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++, i++) {
        if (i >= CFG_MAX_TARGETS) {
            ERR_NODE(w->e, v, "targets: more than %d entries", CFG_MAX_TARGETS);
            break;
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

static int walk_map(struct walk *w, const yaml_node_t *map, const char *prefix)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
        if (k == NULL || v == NULL)
            continue;
        if (k->type != YAML_SCALAR_NODE) {
            ERR_NODE(w->e, k, "keys must be plain names, not %s", node_kind(k));
            continue;
        }
        if (is_duplicate(w, map, p))
            continue;
        char path[160];
        int n = snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "",
                         (const char *)k->data.scalar.value);
        if (n < 0 || (size_t)n >= sizeof(path)) {
            ERR_NODE(w->e, k, "key is too long");
            continue;
        }
        if (*prefix == '\0' && strcmp(path, "targets") == 0) {
            int rc = walk_targets(w, v);
            if (rc != 0)
                return rc;
            continue;
        }
        size_t idx;
        const struct cfg_option *o = find_option(path, CFG_SCOPE_GLOBAL, &idx);
        if (o != NULL) {
            if (v->type != YAML_SCALAR_NODE) {
                ERR_NODE(w->e, v, "%s must be a scalar, not %s", path, node_kind(v));
                continue;
            }
            if (set_value(o, w->c, (const char *)v->data.scalar.value, path, w->e, v) == -ENOMEM)
                return -ENOMEM;
            if (idx < ISOPROF_ARRAY_SIZE(w->marks))
                w->marks[idx] = v;
            continue;
        }
        if (is_section(path)) {
            if (v->type != YAML_MAPPING_NODE) {
                ERR_NODE(w->e, v, "%s must be a mapping, not %s", path, node_kind(v));
                continue;
            }
            int rc = walk_map(w, v, path);
            if (rc != 0)
                return rc;
            continue;
        }
        ERR_NODE(w->e, k, "unknown key '%s'", path);
    }
    return 0;
}

/* Rules that span options. */
static void check_relations(struct walk *w)
{
    const struct cfg *c = w->c;
    if (c->sampling.cpu.period_ns < c->sampling.cpu.duration_ns) {
        size_t ip, id;
        find_option("sampling.cpu.period", CFG_SCOPE_GLOBAL, &ip);
        find_option("sampling.cpu.duration", CFG_SCOPE_GLOBAL, &id);
        const yaml_node_t *at = w->marks[ip] ? w->marks[ip] : w->marks[id];
        char d[32];
        fmt_value(&cfg_options[id], c->sampling.cpu.duration_ns, d, sizeof(d));
        if (at)
            ERR_NODE(w->e, at, "sampling.cpu.period must be >= sampling.cpu.duration (%s)", d);
        else
            err_at(w->e, 1, 1, "sampling.cpu.period must be >= sampling.cpu.duration (%s)", d);
    }
}

int cfg_load_buffer(const char *name, const char *text, size_t len, struct cfg **out, char **why)
{
    if (why)
        *why = NULL;
    struct cfg *c;
    int rc = cfg_new(name, &c);
    if (rc != 0)
        return rc;
    struct errs e = {.name = name};
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        cfg_free(c);
        return -ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        if (parser.error == YAML_MEMORY_ERROR) {
            rc = -ENOMEM;
        } else {
            err_at(&e, parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                   "YAML syntax: %s%s%s", parser.problem ? parser.problem : "error",
                   parser.context ? " " : "", parser.context ? parser.context : "");
        }
        yaml_parser_delete(&parser);
        goto done;
    }
    struct walk w = {.doc = &doc, .c = c, .e = &e};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root == NULL || (root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0)) {
        /* an empty file: the defaults */
    } else if (root->type != YAML_MAPPING_NODE) {
        ERR_NODE(&e, root, "the configuration must be a mapping of sections, not %s",
                 node_kind(root));
    } else {
        rc = walk_map(&w, root, "");
    }
    if (rc == 0)
        check_relations(&w);
    if (rc == 0 && !w.targets_seen) {
        struct cfg_target *t;
        rc = add_target(c, &t, &e);
        if (rc == 0)
            rc = set_value(&cfg_options[2], t, "127.0.0.1:9229", "inspector", &e, NULL);
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);

done:
    if (rc == 0 && e.oom)
        rc = -ENOMEM;
    if (rc == 0 && e.count > 0)
        rc = ISOPROF_ECONFIG;
    if (rc != 0) {
        cfg_free(c);
        if (why && rc == ISOPROF_ECONFIG) {
            *why = e.buf;
            e.buf = NULL;
        }
        isoprof_free(e.buf);
        return rc;
    }
    isoprof_free(e.buf);
    *out = c;
    return 0;
}

int cfg_load_file(const char *path, struct cfg **out, char **why)
{
    if (why)
        *why = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        int err = -errno;
        if (why)
            *why = isoprof_asprintf("%s: %s", path, strerror(-err));
        return err;
    }
    char *buf = isoprof_malloc(CFG_MAX_FILE + 1);
    if (buf == NULL) {
        fclose(f);
        return -ENOMEM;
    }
    size_t n = fread(buf, 1, CFG_MAX_FILE + 1, f);
    int rerr = ferror(f);
    fclose(f);
    int rc;
    if (rerr) {
        rc = -EIO;
        if (why)
            *why = isoprof_asprintf("%s: read error", path);
    } else if (n > CFG_MAX_FILE) {
        rc = -EFBIG;
        if (why)
            *why = isoprof_asprintf("%s: larger than %u bytes", path, CFG_MAX_FILE);
    } else {
        rc = cfg_load_buffer(path, buf, n, out, why);
    }
    isoprof_free(buf);
    return rc;
}

/* --- help and example --- */

static const char *type_name(enum cfg_type t)
{
    switch (t) {
    case CFG_T_STRING:
        return "string";
    case CFG_T_SIZE:
        return "size";
    case CFG_T_DURATION:
        return "duration";
    case CFG_T_UINT32:
        return "count";
    case CFG_T_FRACTION:
        return "share";
    case CFG_T_LOGLEVEL:
        return "level";
    case CFG_T_INSPECTOR:
        return "host:port";
    }
    return "?";
}

static void bounds_text(const struct cfg_option *o, char *buf, size_t cap)
{
    char lo[32], hi[32];
    switch (o->type) {
    case CFG_T_SIZE:
    case CFG_T_DURATION:
    case CFG_T_UINT32:
    case CFG_T_FRACTION:
        fmt_value(o, o->min, lo, sizeof(lo));
        fmt_value(o, o->max, hi, sizeof(hi));
        snprintf(buf, cap, "%s..%s", lo, hi);
        break;
    default:
        snprintf(buf, cap, "-");
    }
}

void cfg_write_help(FILE *f)
{
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        char name[64], b[64];
        snprintf(name, sizeof(name), "%s%s", o->scope == CFG_SCOPE_TARGET ? "targets[]." : "",
                 o->name);
        bounds_text(o, b, sizeof(b));
        fprintf(f, "  %-30s %-9s %-16s %-14s %s%s\n", name, type_name(o->type),
                o->def ? o->def : (o->required ? "(required)" : "(unset)"), b, o->help,
                o->reloadable ? "" : " [restart]");
    }
}

int cfg_write_example(FILE *f)
{
    fprintf(f, "# isoprof configuration. Every option is shown at its default.\n"
               "# Durations: us, ms, s, m, h. Sizes: B, KiB, MiB, GiB.\n");
    const char *open[4] = {NULL, NULL, NULL, NULL};
    int depth = 0;
    int targets_done = 0;
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope == CFG_SCOPE_TARGET) {
            if (targets_done)
                continue;
            targets_done = 1;
            depth = 0;
            fprintf(f, "\n# Inspector endpoints to profile (only these are ever contacted).\n"
                       "targets:\n");
            for (size_t j = 0; j < cfg_noptions; j++) {
                const struct cfg_option *t = &cfg_options[j];
                if (t->scope != CFG_SCOPE_TARGET)
                    continue;
                const char *val = t->type == CFG_T_INSPECTOR ? "127.0.0.1:9229" : t->def;
                fprintf(f, "  %s# %s\n", t == o ? "" : "  ", t->help);
                if (val)
                    fprintf(f, "  %s%s: %s\n", t == o ? "- " : "  ", t->name, val);
                else
                    fprintf(f, "  %s# %s: \n", t == o ? "- " : "  ", t->name);
            }
            continue;
        }
        /* Open the sections this option lives in. */
        char parts[4][32];
        int np = 0;
        const char *s = o->name;
        while (np < 4) {
            const char *dot = strchr(s, '.');
            size_t n = dot ? (size_t)(dot - s) : strlen(s);
            snprintf(parts[np], sizeof(parts[np]), "%.*s", (int)n, s);
            np++;
            if (!dot)
                break;
            s = dot + 1;
        }
        int same = 0;
        while (same < depth && same < np - 1 && open[same] &&
               strcmp(open[same], parts[same]) == 0)
            same++;
        static char keep[4][32];
        for (int d = same; d < np - 1; d++) {
            if (d == 0)
                fputc('\n', f);
            fprintf(f, "%*s%s:\n", d * 2, "", parts[d]);
            snprintf(keep[d], sizeof(keep[d]), "%s", parts[d]);
            open[d] = keep[d];
        }
        depth = np - 1;
        fprintf(f, "%*s# %s\n", depth * 2, "", o->help);
        fprintf(f, "%*s%s: %s\n", depth * 2, "", parts[np - 1], o->def ? o->def : "");
    }
    return ferror(f) ? -EIO : 0;
}

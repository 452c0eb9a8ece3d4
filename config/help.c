/*
 * help.c - what the option table prints: `isoprofd --help` and the
 * commented example config (`isoprofd --print-config`).
 */
#include "loader_internal.h"

#include "base.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Help and the example config                                              */

static void display_name(const struct cfg_option *o, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s", o->scope == CFG_SCOPE_TARGET ? "targets[]." : "", o->name);
}

/* The DEFAULT column: the value, "(required)", "(unset)", or the row whose
 * value an unset row takes, in parentheses ("(memory_limit)"). */
static const char *display_default(const struct cfg_option *o, char *buf, size_t cap)
{
    if (o->def == NULL && o->def_row != NULL) {
        snprintf(buf, cap, "(%s)", o->def_row);
        return buf;
    }
    return o->def ? cfg_def_text(o) : o->required ? "(required)" : "(unset)";
}

void cfg_write_help(FILE *f)
{
    int wn = 0, wt = 0, wd = 0, wb = 0;
    char name[96], b[96], def[96];
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        display_name(o, name, sizeof(name));
        cfg_bounds_text(o, b, sizeof(b));
        int n = (int)strlen(name), t = (int)strlen(cfg_type_name(o->type)),
            d = (int)strlen(display_default(o, def, sizeof(def))), bb = (int)strlen(b);
        wn = n > wn ? n : wn;
        wt = t > wt ? t : wt;
        wd = d > wd ? d : wd;
        wb = bb > wb ? bb : wb;
    }
    fprintf(f, "  %-*s  %-*s  %-*s  %-*s  %s\n", wn, "OPTION", wt, "TYPE", wd, "DEFAULT", wb,
            "BOUNDS", "DESCRIPTION");
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        display_name(o, name, sizeof(name));
        cfg_bounds_text(o, b, sizeof(b));
        fprintf(f, "  %-*s  %-*s  %-*s  %-*s  %s%s\n", wn, name, wt, cfg_type_name(o->type), wd,
                display_default(o, def, sizeof(def)), wb, b, o->help,
                o->reloadable ? "" : " [restart]");
    }
    fprintf(f,
            "\n  Durations: a number and ns, us, ms, s, m or h (\"250ms\", \"1.5m\"). Sizes: a\n"
            "  number and B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB, powers of 10). Shares:\n"
            "  \"10%%\" or 0.1. Bools: true or false. Maps: `name: value` lines under the\n"
            "  option's key. Lists: [a, b], or `- a` lines under the option's key. Without\n"
            "  `targets` the agent watches %s.\n",
            CFG_DEFAULT_INSPECTOR);
}

/* The j-th dot-separated component of name: pointer in *s, length returned
 * (0 if there is none). */
/* The j-th (from 0) dot-separated component of name: its start in *s and
 * its length. Past the last component, *s is "" and the length 0: *s is
 * set on every path, so no caller reads it unset. */
static size_t component(const char *name, int j, const char **s)
{
    const char *p = name;
    for (int i = 0; i < j; i++) {
        p = strchr(p, '.');
        if (p == NULL) {
            *s = "";
            return 0;
        }
        p++;
    }
    const char *dot = strchr(p, '.');
    *s = p;
    return dot ? (size_t)(dot - p) : strlen(p);
}

static int ncomponents(const char *name)
{
    int n = 1;
    for (const char *p = name; (p = strchr(p, '.')) != NULL; p++)
        n++;
    return n;
}

/* "# help [type, bounds]" at indent. */
static void write_comment(FILE *f, int indent, const struct cfg_option *o)
{
    char b[96];
    cfg_bounds_text(o, b, sizeof(b));
    int has_b = strcmp(b, "-") != 0;
    fprintf(f, "%*s# %s [%s%s%s%s]\n", indent, "", o->help, cfg_type_name(o->type),
            has_b ? ", " : "", has_b ? b : "", o->reloadable ? "" : "; needs a restart");
}

/*
 * Where the example writer is: the previous row's name (NULL: no section is
 * open), the indent of a name at depth 0, and for a target entry whether
 * its first line is still to come (written after "- ").
 */
struct ex_state {
    const char *prev;
    int indent;
    int item; /* a list item: depth 0 lines are "  - key" first, then "    key" */
    int first;
};

/* The prefix of a line at depth d: spaces, or "  - " for a target entry's
 * first line. */
static void ex_prefix(FILE *f, struct ex_state *st, int d)
{
    if (st->item && d == 0 && st->first) {
        fprintf(f, "%*s- ", st->indent - 2, "");
        st->first = 0;
    } else {
        fprintf(f, "%*s", st->indent + d * 2, "");
    }
}

/* Write row o (its help, then its key at its default, or commented out when
 * it has none), opening the sections of its name that the previous row did
 * not share with it. */
static void write_row_example(FILE *f, struct ex_state *st, const struct cfg_option *o,
                              const char *val)
{
    int nsec = ncomponents(o->name) - 1;
    int psec = st->prev ? ncomponents(st->prev) - 1 : 0;
    int same = 0; /* leading sections shared with prev, already open */
    while (same < nsec && same < psec) {
        const char *a, *b;
        size_t la = component(o->name, same, &a), lb = component(st->prev, same, &b);
        if (la != lb || memcmp(a, b, la) != 0)
            break;
        same++;
    }
    for (int d = same; d < nsec; d++) {
        const char *sec;
        size_t l = component(o->name, d, &sec);
        if (d == 0 && !st->item)
            fputc('\n', f);
        ex_prefix(f, st, d);
        fprintf(f, "%.*s:\n", (int)l, sec);
    }
    const char *leaf;
    size_t ll = component(o->name, nsec, &leaf);
    write_comment(f, st->indent + nsec * 2, o);
    if (val != NULL) {
        ex_prefix(f, st, nsec);
        fprintf(f, "%.*s: %s\n", (int)ll, leaf, val);
    } else {
        fprintf(f, "%*s# %.*s:\n", st->indent + nsec * 2, "", (int)ll, leaf);
    }
    st->prev = o->name;
}

static void write_targets_example(FILE *f)
{
    fprintf(f,
            "\n# Inspector endpoints to profile; only these are ever contacted. Without a\n"
            "# `targets` key the agent watches %s; `targets: []` watches none.\n"
            "targets:\n",
            CFG_DEFAULT_INSPECTOR);
    struct ex_state st = {.prev = NULL, .indent = 4, .item = 1, .first = 1};
    for (size_t j = 0; j < cfg_noptions; j++) {
        const struct cfg_option *t = &cfg_options[j];
        if (t->scope != CFG_SCOPE_TARGET)
            continue;
        /* The entry's first line is a key with a value, so that "- " opens
         * it: the required inspector comes first in the table. */
        ISOPROF_ASSERT(!st.first || t->type == CFG_T_INSPECTOR);
        write_row_example(f, &st, t,
                          t->type == CFG_T_INSPECTOR ? CFG_DEFAULT_INSPECTOR : cfg_def_text(t));
    }
}

int cfg_write_example(FILE *f)
{
    fprintf(f, "# isoprof configuration; every option is shown at its default.\n"
               "# Durations: ns, us, ms, s, m, h. Sizes: B, KiB, MiB, GiB (KB, MB, GB: powers\n"
               "# of 10). Shares: 10%% or 0.1. Bools: true or false. Maps: `name: value`\n"
               "# lines under the option's key. Lists: [a, b], or `- a` lines under the\n"
               "# option's key. `isoprofd --help` lists the options.\n");
    struct ex_state st = {.prev = NULL, .indent = 0, .item = 0, .first = 0};
    int targets_done = 0;
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (o->scope == CFG_SCOPE_TARGET) {
            if (!targets_done)
                write_targets_example(f);
            targets_done = 1;
            st.prev = NULL; /* the next global row reopens its sections */
            continue;
        }
        write_row_example(f, &st, o, o->def != NULL ? cfg_def_text(o) : NULL);
    }
    return ferror(f) ? -EIO : 0;
}

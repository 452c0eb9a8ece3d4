/*
 * flamegraph.h - what the CLI writes from a call tree (struct pprof_tree)
 * besides pprof: the self-contained flame graph page of `isoprof
 * flamegraph`, folded stacks and the .cpuprofile of `isoprof export
 * --format`.
 *
 * The page is agent/cli/page/flamegraph.html with its stylesheet, script
 * and the tree as JSON put in where the template's three marker lines are
 * (the files are embedded at build time: page.cmake). The JSON escapes
 * '<', '>', '&', U+2028 and U+2029, so no name or path from the profiled
 * code can end the script element it sits in; the script only ever sets
 * text, never markup (see its header).
 *
 * Every function writes to f and returns 0, -ENOMEM, -EINVAL (a tree or
 * argument the format cannot hold, *why then says which), or -EIO (the
 * write failed; errno is kept).
 */
#ifndef ISOPROF_CLI_FLAMEGRAPH_H
#define ISOPROF_CLI_FLAMEGRAPH_H

#include "pprof.h"

#include <stddef.h>
#include <stdio.h>

/* Nodes whose total is under this share of the root's (in every set) are
 * folded into one "(folded)" node under their parent, by default. */
#define FG_FOLD_DEFAULT 0.0001
/* The name the page and the folded output give a frame of folded nodes. */
#define FG_FOLDED_NAME "(folded)"

/* One line of the page's header: what was merged. */
struct fg_pair {
    const char *key;
    char value[256];
};

struct fg_info {
    const char *title;
    const struct fg_pair *header; /* the profile shown (set 0) */
    size_t nheader;
    const struct fg_pair *base_header; /* a diff's base (set 1) */
    size_t nbase;
    int diff;          /* a differential flame graph of set 0 against set 1 */
    double fold_share; /* 0 <= share < 1; 0 folds nothing */
};

/* The HTML page of t (set 0, or the diff of set 0 against set 1). */
int fg_write_html(FILE *f, const struct pprof_tree *t, const struct fg_info *info,
                  const char **why);

/*
 * fg_write_folded - one line a stack of set 0 that has a self value:
 * frames root first joined by ';', a space, and the value (samples for a
 * CPU tree whose period is known, else the value in the tree's unit). A
 * frame is "name (file:line)", or "name" when the file is unknown; ';' in
 * a name or file becomes ',' and line breaks become spaces (the format has
 * no escapes). Lines in tree order, children by name.
 */
int fg_write_folded(FILE *f, const struct pprof_tree *t, const char **why);

/*
 * fg_write_cpuprofile - set 0 of a CPU tree (unit nanoseconds, period
 * known) as a Chrome DevTools .cpuprofile: nodes (id, callFrame,
 * hitCount, children), samples and timeDeltas (one period each, in
 * microseconds), startTime and endTime. The samples are the tree's, not
 * the order they were taken in: the timeline is synthetic, the totals
 * exact. -EINVAL for a heap tree.
 */
int fg_write_cpuprofile(FILE *f, const struct pprof_tree *t, const char **why);

#endif

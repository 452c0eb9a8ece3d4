/*
 * discover.h - the endpoints polled, /json/list and /json/version parsed (discover.c). Declared
 * apart from daemon.h, which holds the structs every module shares, so that a file includes what it
 * calls.
 */
#ifndef ISOPROF_AGENT_DISCOVER_H
#define ISOPROF_AGENT_DISCOVER_H

#include "daemon.h"

/* discover.c */
int discover_start(struct agent *a);
void discover_stop(struct agent *a);
/* Close the endpoints' timers (shutdown); discover_free after the loop ran
 * dry frees them, the retired ones too. */
void discover_close(struct agent *a);
void discover_free(struct agent *a);
/* a->cfg was replaced by next (SIGHUP): keep the endpoints next still
 * names (their targets and sessions carry on, relabelled if next gives
 * them other labels), retire the others with their targets, start the new
 * ones. */
int discover_reload(struct agent *a, const struct cfg *next);

/* An endpoint found on the host (procs.c): 127.0.0.1:port of process p.
 * Probed with /json/version at once; one that does not answer as an
 * inspector is dropped and procs_not_inspector() told. NULL: ENOMEM. */
struct endpoint *discover_found_add(struct agent *a, uint16_t port, const struct procscan_proc *p);
/* Found endpoint ep goes (its process exited, its listener closed, a
 * configured target took its port, or discovery was turned off), logged
 * with why unless NULL: its targets are removed and it is retired, freed
 * by discover_found_sweep once no target points to it. */
void discover_found_drop(struct endpoint *ep, const char *why);
void discover_found_sweep(struct agent *a);

/* target.c */
/* One entry of /json/list, validated; strings borrowed for the call. */
struct discovered {
    const char *id, *path, *title, *url;
};

/* A parsed /json/list: the usable entries d[0..n) (strings owned by the
 * list, each cut at 1 KiB), how many entries the list had, were unusable,
 * or were usable but past the cap. */
struct discover_list {
    struct discovered *d;
    size_t n, listed, skipped, over;
    char **own; /* the strings d[] points into, four an entry */
};
/*
 * discover_parse_list - parse and validate a /json/list body (len bytes),
 * keeping at most max usable entries. Nesting deeper than a list of flat
 * objects is refused before parsing, which streams (no tree): memory is
 * the kept entries' strings, whatever the body holds. 0, or
 * ISOPROF_EJSON / -ENOMEM with why[0..cap) saying what. On 0 the caller
 * frees l with discover_list_free. Pure: any thread (the fuzz target).
 */
int discover_parse_list(const char *body, size_t len, size_t max, struct discover_list *l,
                        char *why, size_t cap);
void discover_list_free(struct discover_list *l);
/* The runtime a /json/version body names ("node", "deno", "workerd", "v8"),
 * or NULL with why[0..cap) saying what is wrong. Pure, like the above. */
const char *discover_parse_version(const char *body, size_t len, char *why, size_t cap);

#endif

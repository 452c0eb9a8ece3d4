/*
 * cli_internal.h - what the CLI's files (cli.c, args.c, query.c, export.c,
 * compare.c, ctl.c) share: the parsed command line, exit codes, and the functions one
 * file calls in another. Not a public interface: the CLI is one program.
 *
 * Every function that returns an int returns an exit code (0, EXIT_NOMATCH
 * or EXIT_USAGE) after writing one line on stderr saying why, unless it
 * says otherwise.
 */
#ifndef ISOPROF_CLI_INTERNAL_H
#define ISOPROF_CLI_INTERNAL_H

#include "store.h"

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The agent's JSON answers nest a few levels; deeper is not the agent. */
#define CLI_JSON_MAX_DEPTH 32
#define EXIT_NOMATCH 1
#define EXIT_USAGE 2
#define CLI_MAX_MERGE 100000
/* The window types, as messages name them (store_type_name's). */
#define CLI_TYPES_OR "cpu, heap, retained or snapshot"
_Static_assert(STORE_TYPE_MAX == 4, "a new window type: update CLI_TYPES_OR and cli_usage()");
/* --pid: Linux's largest pid (PID_MAX_LIMIT on 64-bit). */
#define CLI_PID_MAX 4194304u
/* store check: the longest its child may take (reading every page and
 * inflating every window). */
#define CLI_CHECK_TIMEOUT_MS (30ull * 60 * 1000)

struct cli {
    const char *store_path;
    const char *config_path; /* --config: where store.path is read when --store is not given */
    struct store_filter f;
    const char *id;
    const char *out;
    int json;
    long top_n;
    const char *anomaly_id;         /* export --anomaly ID */
    struct store_anomaly_filter af; /* anomalies */
    const char *format;             /* export --format */
    double fold;                    /* flamegraph --fold, a share */
    struct store_filter bf;         /* flamegraph: the base set of a diff */
    int diff;                       /* a --base-* option was given */
    const char *from, *to;          /* compare: the versions */
};

/* Which command cli_parse_args reads for: options valid for it. */
enum {
    ARG_ID = 1,
    ARG_OUT = 2,
    ARG_JSON = 4,
    ARG_N = 8,
    ARG_PINNED = 16,
    ARG_ANOMALY_ID = 32,
    ARG_KIND = 64,
    ARG_FORMAT = 128,
    ARG_FLAME = 256,
    ARG_PID = 512,
    ARG_COMPARE = 1024 /* --from, --to, --html FILE (into out) */
};
/* The installed config (cli_system_config() in args.c), from the build. */
#ifndef ISOPROF_SYSTEM_CONFIG
#error "ISOPROF_SYSTEM_CONFIG (the installed config's path) is set by agent/cli/CMakeLists.txt"
#endif

/* args.c */
/*
 * The system's config, read when there is no --config: $ISOPROF_CONFIG when
 * set and not empty, else the file the install put in place
 * (ISOPROF_SYSTEM_CONFIG, set by the build from the install prefix:
 * /etc/isoprof/isoprof.yaml for /usr). The variable replaces the file and
 * nothing else, so the integration tests point it at a path that does not
 * exist and no host's config reaches them. *from names the path's source,
 * for messages.
 */
const char *cli_system_config(const char **from);

/* cli.c */
/* "isoprof: " fmt on stderr; returns EXIT_USAGE. */
__attribute__((format(printf, 1, 2))) int cli_die(const char *fmt, ...);
void cli_usage(FILE *f);

/* args.c */
/* RFC 3339 or relative to now (-15m) into *ns; -EINVAL when it is neither. */
int cli_parse_time(const char *s, uint64_t *ns);
void cli_format_time(uint64_t ns, char *buf, size_t cap);
void cli_format_age(uint64_t ns, char *buf, size_t cap);
const char *cli_type_name(uint8_t t);
const char *cli_upload_name(uint8_t u);
/* getopt_long for cli_parse_args and the control commands' parser; see
 * args.c. */
int cli_next_option(int argc, char **argv, const char *shortopts, const struct option *opts);
/* argv of one store command into *c; allow: the ARG_* options it takes. */
int cli_parse_args(struct cli *c, int argc, char **argv, unsigned allow);

/* query.c: the store's reads, from cli_open_store on in the guard's child */
int cli_store_fail(const char *what, int rc);
int cli_open_store(const struct cli *c, struct store **s);
/* store_windows, store_load and store_blob_read bracketed for the guard;
 * they return what those return. */
int cli_g_windows(struct store *s, const struct store_filter *f, store_window_cb cb, void *arg);
int cli_g_load(struct store *s, uint64_t id, void **pprof, size_t *len);
int cli_g_blob_read(struct store *s, uint64_t id,
                    int (*cb)(void *arg, const void *data, size_t len), void *arg);
/* export --anomaly ID --type T into c->f.id. */
int cli_resolve_anomaly(struct cli *c, struct store *s);
/* s as a JSON string on f, escaped as every JSON text isoprof writes
 * (isoprof_json_str: valid JSON and UTF-8 whatever a label holds); NULL as
 * "". Out of memory for the copy of one string, the command exits. */
void cli_json_str(FILE *f, const char *s);
/* store_agg_get and store_aggs bracketed for the guard. */
int cli_g_agg_get(struct store *s, const char *worker, const char *version, struct store_agg *out,
                  void **bytes, size_t *len);
int cli_g_aggs(struct store *s, const char *worker, store_agg_cb cb, void *arg);

/* export.c: a command's output. cli_open_out opens -o FILE (or takes
 * stdout; refuse_tty: not to a terminal, what names the output), NULL after
 * saying why. cli_close_out closes it; rc is the writer's result. An exit
 * code: a failed write removes a half-written -o FILE. */
FILE *cli_open_out(const struct cli *c, int refuse_tty, const char *what);
int cli_close_out(const struct cli *c, FILE *f, int rc, const char *why);

/* compare.c: top over a version's aggregate (top --worker W --version V
 * with no other filter): an exit code, EXIT_NOMATCH when the version has
 * no aggregate (the caller then merges its windows). */
int cli_top_aggregate(struct cli *c, struct store *s);

/* The commands: argv[0] is the command's name. */
int cli_cmd_windows(int argc, char **argv);    /* query.c */
int cli_cmd_anomalies(int argc, char **argv);  /* query.c */
int cli_cmd_store(int argc, char **argv);      /* query.c */
int cli_cmd_upload(int argc, char **argv);     /* query.c */
int cli_cmd_export(int argc, char **argv);     /* export.c */
int cli_cmd_top(int argc, char **argv);        /* export.c */
int cli_cmd_flamegraph(int argc, char **argv); /* export.c */
int cli_cmd_compare(int argc, char **argv);    /* compare.c */
int cli_cmd_status(int argc, char **argv);     /* ctl.c */
int cli_cmd_profile(int argc, char **argv);    /* ctl.c */
int cli_cmd_metrics(int argc, char **argv);    /* ctl.c */

#endif

/*
 * isoprof - reads an isoprof store: list windows, export pprof, show the
 * top functions, inspect the store. Read-only transactions only, so it
 * works while isoprofd writes the same store. status, profile and metrics
 * ask a running isoprofd instead, over its control socket (HTTP/1.1 on a
 * Unix socket, libcurl easy: blocking is fine here).
 *
 * This file holds the entry point, the usage text and the dispatch to the
 * commands: args.c parses their options, query.c and export.c are the
 * store commands, ctl.c the control socket's client.
 *
 * Exit codes: 0 ok, 1 nothing matched, 2 usage or store error (one line on
 * stderr saying why).
 */
#include "cli_internal.h"

#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int cli_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "isoprof: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return EXIT_USAGE;
}

/* cli_usage() and parse_ctl_args's --interval message spell the on-demand
 * limits out. */
_Static_assert(CFG_OD_SECONDS_MAX == 3600u && CFG_OD_INTERVAL_MIN_NS == 100000ull &&
                   CFG_OD_INTERVAL_MAX_NS == 1000000000ull,
               "the on-demand limits changed: update cli_usage() and the --interval message");

void cli_usage(FILE *f)
{
    fprintf(
        f,
        "usage: isoprof windows   [--store DIR] [FILTERS] [--anomaly [KIND|ID]] [--json]\n"
        "       isoprof export    [--store DIR] (--id ID | --anomaly ID --type T | FILTERS) [-o "
        "FILE]\n"
        "       isoprof top       [--store DIR] [FILTERS] [-n 20]\n"
        "       isoprof flamegraph [--store DIR] [FILTERS] [BASE] [--fold PCT] [-o FILE.html]\n"
        "       isoprof compare   [--store DIR] --worker W --from V1 --to V2 [--json]\n"
        "                         [--html FILE.html] [--config FILE]\n"
        "       isoprof anomalies [--store DIR] [--kind K] [--worker W] [--version V] [--thread "
        "T]\n"
        "                         [--since T] [--until T] [--json]\n"
        "       isoprof store     stat|check [--store DIR]\n"
        "       isoprof status    [--socket S] [--json]\n"
        "       isoprof profile   --worker W [--version V] [--thread T | --isolate I]\n"
        "                         --type cpu|heap|snapshot\n"
        "                         [--seconds 10] [--interval 1ms] [--all] [-o FILE] [--socket S]\n"
        "       isoprof metrics   [--socket S]\n"
        "       isoprof upload    --since T [FILTERS] [--config FILE] [--store DIR] [--json]\n"
        "\n"
        "The store DIR: --store, else $ISOPROF_STORE, else store.path of --config FILE or of\n"
        "the system's config (when it exists), else ./isoprof-data (isoprofd's default). The\n"
        "system's config: $ISOPROF_CONFIG if set, else " ISOPROF_SYSTEM_CONFIG ".\n"
        "\n"
        "Reads the windows isoprofd stored. FILTERS:\n"
        "  --worker W      only worker W          --version V   only version V\n"
        "  --thread T      only thread T: main, or a worker thread's label (its Worker's\n"
        "                  name option, else its script's file name or worker, then\n"
        "                  #<threadId>: resize.js#7)\n"
        "  --pid N         only the isolates of process N (1..4194304; windows stored\n"
        "                  without a pid never match)\n"
        "  --type T        only windows of type T: cpu, heap, retained (what the objects of\n"
        "                  a heap snapshot retain, as pprof) or snapshot (the heap snapshot)\n"
        "  --since T       windows starting at or after T\n"
        "  --until T       windows starting before T\n"
        "T is RFC 3339 (2026-12-01T10:00:00Z, offsets and fractions allowed) or relative to\n"
        "now (-15m, -2h, -7d).\n"
        "\n"
        "windows    one line per window (an aligned table, or with --json one JSON object per\n"
        "           line: id, worker, version, thread, pid (0: unknown), container (only when\n"
        "           known), labels (the target's, only when it has some), isolate, runtime,\n"
        "           type, start, end, samples, bytes and raw_bytes (stored, and uncompressed:\n"
        "           the pprof, or a snapshot's JSON), frames_mapped and frames_unmapped (the\n"
        "           frames mapped through source maps, and those that could have been but\n"
        "           were not), anomaly, pinned, memory, upload); --anomaly [KIND]: only the\n"
        "           windows anomalies (of that kind) keep as evidence; --anomaly ID: those\n"
        "           anomaly ID keeps\n"
        "export     one window (--id), the window of --type an anomaly pinned last before its\n"
        "           end (--anomaly ID: for oom_suspected the last profile before the death), or\n"
        "           all matching windows of one type merged, to FILE or stdout. --format:\n"
        "             pprof       gzip'd pprof (the default; read it with 'go tool pprof')\n"
        "             folded      one line a stack, 'root;...;leaf COUNT' (flamegraph.pl,\n"
        "                         inferno); a frame is 'name (file:line)'; CPU counts samples,\n"
        "                         heap bytes\n"
        "             cpuprofile  Chrome DevTools / speedscope JSON (CPU windows only; the\n"
        "                         samples' order is synthetic, the totals exact)\n"
        "             raw         a snapshot window as it was taken: the V8 .heapsnapshot\n"
        "                         JSON that Chrome DevTools' Memory panel loads (the only\n"
        "                         format of a snapshot, and its default; one window, never\n"
        "                         merged; streamed, never to a terminal)\n"
        "top        flat and cumulative share per function over the matching windows (a\n"
        "           snapshot window holds no profile: export it, or read its retained window);\n"
        "           with --worker and --version and no other filter, over that version's\n"
        "           aggregate: every CPU window isoprofd folded into it, evicted ones too, in\n"
        "           samples and shares of the non-idle ones (its windows when it has none)\n"
        "flamegraph the matching windows merged (or one: --id, --anomaly ID --type T) as one\n"
        "           self-contained HTML page that opens in any browser, offline: a flame graph\n"
        "           (click to zoom, search, tooltips), a table of functions by self and total,\n"
        "           and what was merged. Frames under PCT %% of the total (--fold, default\n"
        "           0.01; 0 keeps all) are folded into one '(folded)' frame a parent.\n"
        "           BASE makes it a diff against a second set of windows: the FILTERS with\n"
        "           --base-worker W, --base-version V, --base-since T or --base-until T in\n"
        "           place of their own; frames are coloured by the change in their share\n"
        "           (red grew, blue shrank) beside a table of the biggest changes. E.g.\n"
        "             isoprof flamegraph --store DIR --worker api --version v2 \\\n"
        "                 --base-version v1 -o v1-to-v2.html\n"
        "             isoprof flamegraph --store DIR --since -1h --base-since -2h \\\n"
        "                 --base-until -1h -o last-hour.html\n"
        "           Written to FILE, or stdout when it is not a terminal\n"
        "compare    version V2 of worker W against V1, from their aggregates, judged as\n"
        "           isoprofd judges a deploy (anomaly.regression of --config or the system's\n"
        "           config, else the defaults): each version's windows, samples, non-idle\n"
        "           samples and CPU per sample period; the verdict; the functions whose share\n"
        "           of the non-idle CPU grew and shrank, with their shares before and after,\n"
        "           delta in points, ratio, z, the p-value corrected for every function\n"
        "           compared, and flags (regression; inlined: its caller did not grow with\n"
        "           it, V8 inlining, not the code; vm: (program); bound: folded counts).\n"
        "           --json: one object (worker, from, to, verdict, judged, regressions,\n"
        "           tested, params, grown, shrunk); --html FILE: a diff flame graph of the\n"
        "           two (stacks rebuilt from each aggregate's callers). Exit 1 when a version\n"
        "           has no aggregate\n"
        "anomalies  one line per anomaly (with --json one object per line: id, kind, worker,\n"
        "           version, thread, isolate, time, end, open, value, threshold, unit,\n"
        "           limit and limit_source (memory kinds; null otherwise), windows; for\n"
        "           version_regression also cleared, baseline, busy_before, busy_after,\n"
        "           cpu_before, cpu_after and functions: the ones that grew, each with name,\n"
        "           file, before, after, share_before, share_after, z and p_adj);\n"
        "           KIND is memory_near_limit, memory_growth, oom_suspected,\n"
        "           latency_p999_spike or version_regression (VALUE: the largest growth of a\n"
        "           function's share, in points; LIMIT: the baseline and that function)\n"
        "store      stat: counts, sizes, schema, source maps, upload outbox; check: verify\n"
        "           every record and index\n"
        "\n"
        "These ask a running isoprofd over its control socket:\n"
        "status     targets (state, memory, last windows, open anomaly), schedule, store,\n"
        "           outbox and uptime; --json: the raw JSON of GET /status\n"
        "profile    take a window now and write its gzip'd pprof to FILE or stdout (never a\n"
        "           terminal); the window is also stored, marked on_demand. --seconds 1..3600\n"
        "           (cpu), --interval 100us..1s (default: sampling.cpu.interval); the main\n"
        "           thread unless --thread names a worker thread (or --isolate an isolate);\n"
        "           several isolates of the worker: name one with --isolate, or --all for one\n"
        "           merged profile. A progress line goes to stderr when it is a terminal.\n"
        "           --type snapshot: a heap snapshot of one isolate (it stops while V8 writes\n"
        "           it); the answer is its retained profile (what holds the memory), and the\n"
        "           raw snapshot stays in the store (export --type snapshot writes it)\n"
        "metrics    the agent's own Prometheus metrics (GET /metrics)\n"
        "upload     send the matching stored windows (cpu, heap, retained) to the server of\n"
        "           the config's upload section again, whatever their upload state (a\n"
        "           backfill once the server's acceptance window was raised; windows that\n"
        "           expired or were refused); upload.max_age does not apply, the outbox is\n"
        "           not touched. Prints how many were accepted and how many refused; exit\n"
        "           status 0 when all were accepted, 1 otherwise\n"
        "The socket S: --socket, else $ISOPROF_SOCKET, else $RUNTIME_DIRECTORY/isoprof.sock,\n"
        "else DIR/control.sock with --store DIR, else /run/isoprof/isoprof.sock (the first\n"
        "that exists).\n"
        "\n"
        "Exit status: 0 ok, 1 nothing matched, 2 usage or store error; for status, profile\n"
        "and metrics 1 is an unknown worker or several isolates, 2 an agent that cannot be\n"
        "reached or answers an error.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        cli_usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        cli_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
        printf("isoprof %s\n", ISOPROF_VERSION);
        return 0;
    }
    if (strcmp(cmd, "windows") == 0)
        return cli_cmd_windows(argc - 1, argv + 1);
    if (strcmp(cmd, "export") == 0)
        return cli_cmd_export(argc - 1, argv + 1);
    if (strcmp(cmd, "top") == 0)
        return cli_cmd_top(argc - 1, argv + 1);
    if (strcmp(cmd, "flamegraph") == 0)
        return cli_cmd_flamegraph(argc - 1, argv + 1);
    if (strcmp(cmd, "compare") == 0)
        return cli_cmd_compare(argc - 1, argv + 1);
    if (strcmp(cmd, "store") == 0)
        return cli_cmd_store(argc - 1, argv + 1);
    if (strcmp(cmd, "anomalies") == 0)
        return cli_cmd_anomalies(argc - 1, argv + 1);
    if (strcmp(cmd, "status") == 0)
        return cli_cmd_status(argc - 1, argv + 1);
    if (strcmp(cmd, "profile") == 0)
        return cli_cmd_profile(argc - 1, argv + 1);
    if (strcmp(cmd, "metrics") == 0)
        return cli_cmd_metrics(argc - 1, argv + 1);
    if (strcmp(cmd, "upload") == 0)
        return cli_cmd_upload(argc - 1, argv + 1);
    fprintf(stderr, "isoprof: unknown command '%s'; try 'isoprof --help'\n", cmd);
    return EXIT_USAGE;
}

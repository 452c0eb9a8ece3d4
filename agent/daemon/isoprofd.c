/*
 * isoprofd - the isoprof daemon: profiles V8 isolates on a duty cycle
 * through their inspector ports and keeps every window in a local store.
 */
#include "agent.h"
#include "config.h"

#include "base.h"

#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: isoprofd [--config FILE]\n"
            "       isoprofd --check-config FILE\n"
            "       isoprofd --print-config | --version | --help\n"
            "\n"
            "Profiles the V8 isolates (Node.js, workerd, Deno) behind the configured inspector\n"
            "ports on a low duty cycle and stores each profile window in an LMDB store that the\n"
            "isoprof command reads. Runs in the foreground; logs logfmt lines on stderr;\n"
            "SIGINT or SIGTERM stores the open windows and exits.\n"
            "\n"
            "  -c, --config FILE        load FILE (YAML). Without it the embedded defaults are\n"
            "                           used: inspector 127.0.0.1:9229, store ./isoprof-data.\n"
            "      --check-config FILE  validate FILE; exit 0 if valid, 2 with one\n"
            "                           'file:line:col: message' line per problem if not\n"
            "      --print-config       print a commented example config with every default\n"
            "  -V, --version            print the version\n"
            "  -h, --help               this text, followed by every configuration option\n"
            "\n"
            "Environment: NOTIFY_SOCKET and RUNTIME_DIRECTORY (systemd); ISOPROFD_MEMINFO, a\n"
            "file read instead of /proc/meminfo for MemAvailable (heap snapshots; tests);\n"
            "ISOPROFD_PROC, a directory laid out as /proc that process discovery scans\n"
            "instead of /proc (tests: one holding only their own processes).\n"
            "\n"
            "Configuration options:\n");
    cfg_write_help(f);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'}, {"check-config", required_argument, NULL, 'C'},
        {"print-config", no_argument, NULL, 'P'}, {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    const char *config = NULL, *check = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "c:Vh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 'C':
            check = optarg;
            break;
        case 'P':
            return cfg_write_example(stdout) == 0 ? 0 : 2;
        case 'V':
            printf("isoprofd %s\n", ISOPROF_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            fprintf(stderr, "isoprofd: try 'isoprofd --help'\n");
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "isoprofd: unexpected argument '%s'; try 'isoprofd --help'\n",
                argv[optind]);
        return 2;
    }

    struct cfg *cfg = NULL;
    char *why = NULL;
    const char *path = check ? check : config;
    int rc = path ? cfg_load_file(path, &cfg, &why) : cfg_defaults(&cfg);
    if (rc != 0) {
        if (why != NULL)
            fprintf(stderr, "%s%s", why, why[0] && why[strlen(why) - 1] == '\n' ? "" : "\n");
        else
            fprintf(stderr, "isoprofd: %s: %s\n", path ? path : "defaults", isoprof_strerror(rc));
        isoprof_free(why);
        return 2;
    }
    if (check) {
        printf("%s: ok\n", check);
        cfg_free(cfg);
        return 0;
    }
    /* Profile replies and their conversions are big, short-lived buffers
     * made on one thread and freed on another. A fixed mmap threshold keeps
     * every such buffer in its own mapping, returned to the system when
     * freed, instead of letting glibc raise the threshold and keep the
     * memory in its heaps; two arenas bound what the thread pool keeps. */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    mallopt(M_ARENA_MAX, 2);
    rc = agent_run(cfg);
    cfg_free(cfg);
    /* 3: the store is damaged (logged). Its own status, so that a service
     * manager can stop restarting (RestartPreventExitStatus=3). */
    return rc == 0 ? 0 : rc == ISOPROF_EDAMAGED ? 3 : 1;
}

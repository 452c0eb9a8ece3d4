/*
 * libFuzzer target: arbitrary bytes as a config file. Whatever the input,
 * the loader returns a config or an error, frees everything (ASan checks),
 * and a config it accepts keeps every promise config.h makes about values:
 * a violated bound aborts, so the fuzzer reports it.
 */
#include "base.h"
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        abort();
}

static void check_config(const struct cfg *c)
{
    check(c->source != NULL && strcmp(c->source, "fuzz.yaml") == 0);
    check(c->store.path != NULL && c->store.path[0] != '\0');
    check(c->store.max_size >= (1u << 20));
    check((c->ntargets == 0) == (c->targets == NULL));
    for (size_t i = 0; i < c->ntargets; i++) {
        const struct cfg_target *t = &c->targets[i];
        check(t->inspector != NULL && t->host != NULL && t->host[0] != '\0' && t->port != 0);
        check(strchr(t->host, '[') == NULL && strchr(t->host, ']') == NULL);
        check(t->worker == NULL || (t->worker[0] != '\0' && strlen(t->worker) <= 255));
        check(t->version == NULL || (t->version[0] != '\0' && strlen(t->version) <= 255));
        check(t->memory_limit >= (1u << 20));
    }
    check(c->discovery.interval_ns >= 100000000ull && c->discovery.interval_ns <= 3600000000000ull);
    check(c->sampling.cpu.duration_ns >= 100000000ull);
    check(c->sampling.cpu.period_ns >= c->sampling.cpu.duration_ns);
    check(c->sampling.cpu.period_ns <= 86400000000000ull);
    check(c->sampling.cpu.interval_ns >= 100000ull && c->sampling.cpu.interval_ns <= 1000000000ull);
    check(c->sampling.cpu.jitter >= 0.0 && c->sampling.cpu.jitter <= 0.5);
    check(c->sampling.cpu.max_concurrent >= 1 && c->sampling.cpu.max_concurrent <= 1024);
    check(c->log.level >= CFG_LOG_DEBUG && c->log.level <= CFG_LOG_ERROR);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cfg *c = NULL;
    char *why = (char *)"unset";
    int rc = cfg_load_buffer("fuzz.yaml", (const char *)data, size, &c, &why);
    if (rc == 0) {
        check(c != NULL && why == NULL);
        check_config(c);
        char *reload_why = NULL;
        struct cfg *d = NULL;
        if (cfg_defaults(&d) == 0) {
            rc = cfg_check_reload(d, c, &reload_why);
            check(rc == 0 || rc == ISOPROF_ECONFIG || rc == -ENOMEM);
            isoprof_free(reload_why);
            cfg_free(d);
        }
        cfg_free(c);
    } else {
        check(c == NULL);
        /* Problems are one "fuzz.yaml:line:col: ..." per line. */
        if (rc == ISOPROF_ECONFIG) {
            check(why != NULL && strncmp(why, "fuzz.yaml:", 10) == 0);
            check(why[strlen(why) - 1] != '\n');
        }
        isoprof_free(why);
    }
    return 0;
}

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

/* A map keeps config.h's promises: items NULL iff empty, at most max
 * entries, owned strings, keys unique. */
static void check_map(const struct cfg_map *m, size_t max)
{
    check(m->n <= max && (m->n == 0) == (m->items == NULL));
    for (size_t i = 0; i < m->n; i++) {
        check(m->items[i].key != NULL && m->items[i].value != NULL);
        for (size_t j = 0; j < i; j++)
            check(strcmp(m->items[i].key, m->items[j].key) != 0);
    }
}

static void check_upload(const struct cfg *c)
{
    const char *url = c->upload.url;
    check(url != NULL && strlen(url) <= 2048);
    check(url[0] == '\0' || strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0);
    check(strpbrk(url, "?# ") == NULL);
    check(c->upload.api == CFG_UPLOAD_PUSH || c->upload.api == CFG_UPLOAD_INGEST);
    check(c->upload.timeout_ns >= 100000000ull && c->upload.timeout_ns <= 600000000000ull);
    check(c->upload.batch.max_profiles >= 1 && c->upload.batch.max_profiles <= 1024);
    check(c->upload.batch.max_bytes >= 1024 && c->upload.batch.max_bytes <= (64u << 20));
    check(c->upload.batch.max_delay_ns >= 10000000ull &&
          c->upload.batch.max_delay_ns <= 3600000000000ull);
    check(c->upload.max_profile_size >= 1024 && c->upload.max_profile_size <= (256u << 20));
    check(c->upload.tls.insecure_skip_verify == 0 || c->upload.tls.insecure_skip_verify == 1);
    check(c->upload.host != NULL && c->upload.tls.ca_file != NULL && c->upload.tenant_id != NULL);
    const char *user = c->upload.basic_auth.username, *pass = c->upload.basic_auth.password_file;
    check(user != NULL && pass != NULL && c->upload.bearer_token_file != NULL);
    check((user[0] == '\0') == (pass[0] == '\0'));
    check(c->upload.bearer_token_file[0] == '\0' || user[0] == '\0');
    check_map(&c->upload.headers, 32);
    check_map(&c->upload.labels, 20);
    for (size_t i = 0; i < c->upload.labels.n; i++) {
        const char *k = c->upload.labels.items[i].key;
        check(k[0] != '\0' && strncmp(k, "__", 2) != 0);
        if (c->upload.api == CFG_UPLOAD_INGEST)
            check(strpbrk(c->upload.labels.items[i].value, ",}") == NULL);
    }
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
    check_upload(c);
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

/*
 * fuzz_discover - libFuzzer target for what an inspector endpoint answers
 * over HTTP: the /json/list and /json/version bodies (agent/daemon/discover.c's
 * discover_parse_list and discover_parse_version), the first thing a
 * hostile listener on a configured port can send.
 *
 * The first byte picks: 'v' the rest is a /json/version body; anything else
 * a /json/list body, parsed with a small cap so that the cap's path runs.
 * What the parser accepts must hold its promises: at most the cap of
 * entries, every one with a non-empty id and a path that starts with '/',
 * and every listed entry counted once (usable, unusable or over the cap).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "daemon.h"
#include "discover.h"
#include "target.h"

#define CAP 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    /* The HTTP client hands over a NUL-terminated body. */
    char *body = isoprof_malloc(size);
    if (body == NULL)
        return 0;
    memcpy(body, data + 1, size - 1);
    body[size - 1] = '\0';
    char why[160];
    if (data[0] == 'v') {
        why[0] = '\0';
        const char *rt = discover_parse_version(body, size - 1, why, sizeof(why));
        if (rt == NULL && why[0] == '\0')
            abort(); /* a refusal always says why */
        if (rt != NULL && strcmp(rt, "node") != 0 && strcmp(rt, "deno") != 0 &&
            strcmp(rt, "workerd") != 0 && strcmp(rt, "v8") != 0)
            abort();
    } else {
        struct discover_list l;
        why[0] = '\0';
        if (discover_parse_list(body, size - 1, CAP, &l, why, sizeof(why)) == 0) {
            if (l.n > CAP || l.n + l.skipped + l.over != l.listed)
                abort();
            for (size_t i = 0; i < l.n; i++) {
                const struct discovered *d = &l.d[i];
                if (d->id == NULL || d->id[0] == '\0' || d->path == NULL || d->path[0] != '/')
                    abort();
            }
            discover_list_free(&l);
        } else if (why[0] == '\0') {
            abort();
        }
    }
    isoprof_free(body);
    return 0;
}

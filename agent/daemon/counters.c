/*
 * counters.c - the exit log of the counters (counters.h), from the table.
 *
 * The logger takes a format of key=%U pairs, which cannot be written for
 * a table of any length, so the line is built here as text and handed to
 * it as a format without conversions: keys are C identifiers and the
 * names of kinds and reasons static lowercase words, so the text holds no
 * '%' and the logger copies it as it is. Pairs that would not fit in one
 * log line go to the next "counters" line instead of being cut.
 */
#include "counters.h"
#include "daemon.h"
#include "log.h"
#include "report.h"
#include "snapshot.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Under the logger's line (LOG_LINE_MAX, 2048) less its ts, level and msg. */
#define COUNTERS_LINE_MAX 1900

struct counters_line {
    char text[COUNTERS_LINE_MAX];
    size_t len;
};

static void counters_flush(struct counters_line *l)
{
    if (l->len == 0)
        return;
    log_info("counters", l->text);
    l->len = 0;
    l->text[0] = '\0';
}

/* Append " prefix+key=v" to l, flushing l first if the pair does not fit. */
static void counters_put(struct counters_line *l, const char *prefix, const char *key, uint64_t v)
{
    char pair[256];
    int n = snprintf(pair, sizeof(pair), "%s%s%s=%" PRIu64, l->len ? " " : "", prefix, key, v);
    if (n < 0 || (size_t)n >= sizeof(pair))
        return; /* a key of 200 bytes is not one of ours */
    if ((size_t)n >= sizeof(l->text) - l->len) {
        counters_flush(l);
        n = snprintf(pair, sizeof(pair), "%s%s=%" PRIu64, prefix, key, v);
    }
    memcpy(l->text + l->len, pair, (size_t)n + 1);
    l->len += (size_t)n;
}

void agent_counters_log(const struct agent_counters *n)
{
    struct counters_line l = {.len = 0};
#define LOG_SCALAR(field, key, metric, labels, help) counters_put(&l, "", key, n->field);
    AGENT_COUNTERS(LOG_SCALAR)
#undef LOG_SCALAR
#define LOG_ARRAY(field, size, first, key, metric, label, name, log_prefix, help)                  \
    for (unsigned i = (first); i < (size); i++)                                                    \
        counters_put(&l, log_prefix, name(i), n->field[i]);
    AGENT_COUNTER_ARRAYS(LOG_ARRAY)
#undef LOG_ARRAY
    counters_flush(&l);
}

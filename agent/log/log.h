/*
 * log.h - the agent's logfmt logger.
 *
 * One line per event on stderr:
 *   ts=2026-12-02T12:00:00.123Z level=info msg="window stored" worker=api type=cpu
 * Values that need it are quoted and escaped, so a hostile target title
 * cannot forge a field or a line. Only the agent logs; the libraries return
 * codes and the agent decides what to say.
 *
 * The format string takes `key=%s` pairs separated by spaces. Conversions:
 *   %s  a C string (quoted when needed; NULL prints as "")
 *   %d  int           %u  unsigned       %U  uint64_t      %I  int64_t
 *   %f  double (3 decimals)              %e  an error code: its message
 * Nothing else is interpreted; the logger is not printf and is not
 * checked by -Wformat, so keep the calls simple.
 *
 * Thread: loop thread only (the thread pool hands results back first).
 */
#ifndef ISOPROF_LOG_H
#define ISOPROF_LOG_H

#include "config.h"

#include <stdint.h>

void agent_log_set_level(enum cfg_log_level level);
enum cfg_log_level agent_log_get_level(void);
void agent_log(enum cfg_log_level level, const char *msg, const char *fmt, ...);

#define log_debug(msg, ...) agent_log(CFG_LOG_DEBUG, msg, __VA_ARGS__)
#define log_info(msg, ...) agent_log(CFG_LOG_INFO, msg, __VA_ARGS__)
#define log_warn(msg, ...) agent_log(CFG_LOG_WARN, msg, __VA_ARGS__)
#define log_error(msg, ...) agent_log(CFG_LOG_ERROR, msg, __VA_ARGS__)

/*
 * Repeated warnings and errors are rate-limited per message: at most
 * LOG_BURST lines of one msg in LOG_WINDOW_MS; the rest are counted, and the next line of
 * that msg after the window says how many were dropped
 * (`suppressed=N` at its end). A hostile peer that makes the agent fail
 * the same way a thousand times a second costs five lines a second, not a
 * gigabyte of journal. The table keys msg by its address (the messages are
 * literals) and holds LOG_LIMIT_SLOTS of them, the least recently used
 * giving way.
 */
#define LOG_BURST 50
#define LOG_WINDOW_MS 10000
#define LOG_LIMIT_SLOTS 64

struct log_limit_slot {
    const char *msg;
    uint64_t window_ms; /* start of the current window */
    uint64_t used_ms;   /* last line, for LRU */
    uint32_t lines;     /* written in the current window */
    uint64_t suppressed;
};

struct log_limiter {
    struct log_limit_slot slot[LOG_LIMIT_SLOTS];
};

/* The pure decision, exposed for the unit test: 1 if a line of msg at
 * now_ms is written (then *dropped is how many lines of msg were dropped
 * since the last one written, to report with it), 0 if it is dropped. */
int agent_log_admit(struct log_limiter *l, const char *msg, uint64_t now_ms, uint64_t *dropped);

/* Append s to the line buffer b (capacity cap, length *len) as a logfmt
 * value: bare when it is safe, else quoted with \" \\ \n \t and \xNN for
 * other control bytes. Exposed for the unit test. */
void agent_log_value(char *b, size_t cap, size_t *len, const char *s);

#endif

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

void agent_log_set_level(enum cfg_log_level level);
enum cfg_log_level agent_log_get_level(void);
void agent_log(enum cfg_log_level level, const char *msg, const char *fmt, ...);

#define log_debug(msg, ...) agent_log(CFG_LOG_DEBUG, msg, __VA_ARGS__)
#define log_info(msg, ...) agent_log(CFG_LOG_INFO, msg, __VA_ARGS__)
#define log_warn(msg, ...) agent_log(CFG_LOG_WARN, msg, __VA_ARGS__)
#define log_error(msg, ...) agent_log(CFG_LOG_ERROR, msg, __VA_ARGS__)

/* Append s to the line buffer b (capacity cap, length *len) as a logfmt
 * value: bare when it is safe, else quoted with \" \\ \n \t and \xNN for
 * other control bytes. Exposed for the unit test. */
void agent_log_value(char *b, size_t cap, size_t *len, const char *s);

#endif

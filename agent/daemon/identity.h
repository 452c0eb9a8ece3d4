/*
 * identity.h - an isolate's number from what it is (identity.c). Declared apart from daemon.h,
 * which holds the structs every module shares, so that a file includes what it calls.
 */
#ifndef ISOPROF_AGENT_IDENTITY_H
#define ISOPROF_AGENT_IDENTITY_H

#include "daemon.h"

/* identity.c - an isolate's number from what it is (pid and start time,
 * else its endpoint and /json/list id; a worker adds its thread id), stable
 * across agent restarts. identity_isolate is pure; identity_target takes a
 * number no other live target has. */
uint32_t identity_isolate(uint32_t pid, uint64_t start_ticks, const char *endpoint,
                          const char *target_id, const char *worker_id);
uint32_t identity_target(const struct target *t);

#endif

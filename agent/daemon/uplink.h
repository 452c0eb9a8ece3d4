/*
 * uplink.h - the uploader from upload.* (uplink.c). Declared apart from daemon.h, which holds
 * the structs every module shares, so that a file includes what it calls.
 */
#ifndef ISOPROF_AGENT_UPLINK_H
#define ISOPROF_AGENT_UPLINK_H

#include "daemon.h"

/* uplink.c - the uploader from upload.* (secrets read from their files),
 * its events logged; its state behind a->uplink, which only uplink.c
 * reads. 0 (no uploader when upload is off), or a negative code (logged)
 * when it cannot start. */
int agent_upload_start(struct agent *a);
/* a->cfg replaced old (reload): restart the uploader if its settings
 * changed (upload.url itself needs a restart). */
int agent_upload_reload(struct agent *a, const struct cfg *old);
/* The upload totals since start, across reloads (zero when upload is off). */
void agent_upload_stats(const struct agent *a, struct upl_stats *out);
/* The writer queued bytes of windows for upload (the uploader's measure
 * of its production). No-op when upload is off. */
void agent_upload_notify(struct agent *a, uint64_t bytes);
/* Shutdown, or a later module failed to start: the uploader closes (before
 * the HTTP client it sends through); its totals are kept. */
void agent_upload_stop(struct agent *a);
/* After the loop ran dry. */
void agent_upload_free(struct agent *a);

#endif

/*
 * uplink.h - the uploader from upload.* (uplink.c). Declared apart from daemon.h, which holds
 * the structs every module shares, so that a file includes what it calls.
 */
#ifndef ISOPROF_AGENT_UPLINK_H
#define ISOPROF_AGENT_UPLINK_H

#include "daemon.h"

/* uplink.c - the uploader from upload.* (secrets read from
 * their files), its events logged. 0 with a->upl NULL when upload is off;
 * a negative code (logged) when it cannot start. */
int agent_upload_start(struct agent *a);
/* a->cfg replaced old (reload): restart the uploader if its settings
 * changed (upload.url itself needs a restart). */
int agent_upload_reload(struct agent *a, const struct cfg *old);
/* The upload totals since start, across reloads (zero when upload is off). */
void agent_upload_stats(const struct agent *a, struct upl_stats *out);

#endif

/*
 * replay.h - `isoprof upload`: send stored windows to the Pyroscope server
 * again, on demand (a backfill, once the server's acceptance window was
 * raised; windows that expired or were refused during an outage or a
 * clock skew).
 *
 * The windows are those of a store filter (--since is required), in start
 * order, CPU, heap and retained ones (snapshots are never uploaded). The
 * server, credentials, labels, batch and rate come from the config's
 * upload section, as the daemon reads them; upload.max_age does not apply
 * (the point is to send old windows). The store is only read: the outbox
 * is not touched, so the daemon's own upload goes on as it was.
 */
#ifndef ISOPROF_CLI_REPLAY_H
#define ISOPROF_CLI_REPLAY_H

#include "store.h"

/*
 * cli_replay - send the windows of s (borrowed, read-only will do) that f
 * selects to the server of the config at config_path, one batch at a
 * time, and print how many were accepted and how many refused (with the
 * server's first reason). Returns the process's exit status: 0 when every
 * window was accepted, 1 when none matched or some were refused or could
 * not be sent, 2 for a config that names no server or cannot be read.
 */
int cli_replay(struct store *s, const char *config_path, const struct store_filter *f, int json);

#endif

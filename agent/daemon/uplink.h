/*
 * uplink.h - reading the upload credentials (uplink.c): the Basic auth
 * password file and the bearer token file. The daemon's uplink calls
 * these at start and at each reload; tests/unit/agent/test_uplink.c too.
 *
 * A secret never reaches a log line or an error message, and every
 * buffer it was read into is wiped before it is freed or returned with an
 * error. Any thread may call them (they block on the file).
 */
#ifndef ISOPROF_AGENT_UPLINK_H
#define ISOPROF_AGENT_UPLINK_H

#include <stddef.h>

#define UPLINK_SECRET_MAX 4096 /* bytes of a secret, its trailing newline aside */

/*
 * Read the secret on fd, to its end, into buf (the caller's, borrowed):
 * at most UPLINK_SECRET_MAX bytes on one line, a trailing newline (LF or
 * CRLF) dropped, no other control character. On success buf holds it
 * NUL-terminated, *len its length, and every byte of buf past it is zero.
 * On failure all of buf is zero, whatever was read before it failed, and
 * *len is 0. Returns 0, the negative errno of a failed read (-EISDIR for a
 * directory, -EIO), -EFBIG (longer than UPLINK_SECRET_MAX), or -EINVAL
 * (empty, or a control character). *why: static text saying why, never
 * quoting the content.
 */
int uplink_secret_read_fd(int fd, char buf[UPLINK_SECRET_MAX + 1], size_t *len, const char **why);

/*
 * The same from the file at path: *out is allocated (UPLINK_SECRET_MAX + 1
 * bytes, NUL-terminated, zero past the secret), owned by the caller, who
 * wipes and frees it. Also -ENOENT, -EACCES (open), -ENOMEM; on failure
 * nothing is allocated.
 */
int uplink_secret_read(const char *path, char **out, const char **why);

#endif

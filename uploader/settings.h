/*
 * settings.h - the uploader's options from the config's upload section,
 * with the credentials read from their files: one way for the daemon
 * (agent/daemon/uplink.c, at start and at each reload) and for `isoprof
 * upload` (agent/cli/replay.c), so both read a secret file by the same
 * rules and send the same labels and headers.
 *
 * A secret never reaches a log line or an error message, and every
 * buffer it was read into is wiped before it is freed or returned with an
 * error. Any thread may call these (they block on the files).
 */
#ifndef ISOPROF_UPLOADER_SETTINGS_H
#define ISOPROF_UPLOADER_SETTINGS_H

#include "config.h"
#include "upload.h"

#include <stddef.h>

#define UPL_SECRET_MAX 4096 /* bytes of a secret, its trailing newline aside */

/*
 * Read the secret on fd, to its end, into buf (the caller's, borrowed):
 * at most UPL_SECRET_MAX bytes on one line, a trailing newline (LF or
 * CRLF) dropped, no other control character. On success buf holds it
 * NUL-terminated, *len its length, and every byte of buf past it is zero.
 * On failure all of buf is zero, whatever was read before it failed, and
 * *len is 0. Returns 0, the negative errno of a failed read (-EISDIR for a
 * directory, -EIO), -EFBIG (longer than UPL_SECRET_MAX), or -EINVAL
 * (empty, or a control character). *why: static text saying why, never
 * quoting the content.
 */
int upl_secret_read_fd(int fd, char buf[UPL_SECRET_MAX + 1], size_t *len, const char **why);

/*
 * The same from the file at path: *out is allocated (UPL_SECRET_MAX + 1
 * bytes, NUL-terminated, zero past the secret), owned by the caller, who
 * wipes and frees it. Also -ENOENT, -EACCES (open), -ENOMEM; on failure
 * nothing is allocated.
 */
int upl_secret_read(const char *path, char **out, const char **why);

/*
 * What upl_settings_load makes: the options and what they point into,
 * owned here until upl_settings_free.
 */
struct upl_settings {
    struct upl_options o;
    char host[256];         /* upload.host, else the machine's name, else "unknown" */
    struct push_label *hl;  /* upload.headers, then upload.labels */
    char *userpwd, *bearer; /* the credentials, read from their files (wiped when freed) */
};

/*
 * upl_settings_load - s->o from c's upload section, for url (borrowed, as
 * c is, until upl_settings_free): api, host, timeout, back-off, batch,
 * sizes, TLS, tenant, headers, labels, max_age, max_rate, isolate_label,
 * and the Basic auth and bearer credentials read from their files
 * (upl_secret_read). The replay fields are left empty. Returns 0; -ENOMEM;
 * or a secret file's error (as upl_secret_read's), *what then naming the
 * option ("upload.basic_auth.password_file", "upload.bearer_token_file")
 * and *why saying why. On error s holds nothing to free (it is cleared).
 */
int upl_settings_load(struct upl_settings *s, const struct cfg *c, const char *url,
                      const char **what, const char **why);
/* Wipes the credentials and frees what s holds; s is cleared. */
void upl_settings_free(struct upl_settings *s);

#endif

/*
 * settings.c - the uploader's options from the config (settings.h).
 */
#include "settings.h"

#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int upl_secret_read_fd(int fd, char buf[UPL_SECRET_MAX + 1], size_t *len_out, const char **why)
{
    const size_t cap = UPL_SECRET_MAX + 1;
    /* Every exit after the first byte lands in buf wipes what is not the
     * secret: all of buf on failure, the bytes past it on success. */
    size_t len = 0;
    int rc = 0;
    *why = "";
    for (;;) {
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            *why = strerror(errno);
            goto fail;
        }
        if (r == 0)
            break;
        len += (size_t)r;
        if (len == cap)
            break; /* full: a newline may still make it the longest allowed */
    }
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        len--;
    if (len > UPL_SECRET_MAX) {
        *why = "longer than 4096 bytes";
        rc = -EFBIG;
        goto fail;
    }
    if (len == 0) {
        *why = "empty";
        rc = -EINVAL;
        goto fail;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c < 0x20 || c == 0x7f) {
            *why = "holds a control character (only a trailing newline is allowed)";
            rc = -EINVAL;
            goto fail;
        }
    }
    explicit_bzero(buf + len, cap - len);
    *len_out = len;
    return 0;

fail:
    explicit_bzero(buf, cap);
    *len_out = 0;
    return rc;
}

int upl_secret_read(const char *path, char **out, const char **why)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        *why = strerror(errno);
        return -errno;
    }
    char *buf = isoprof_malloc(UPL_SECRET_MAX + 1);
    if (buf == NULL) {
        close(fd);
        *why = "out of memory";
        return -ENOMEM;
    }
    size_t len = 0;
    int rc = upl_secret_read_fd(fd, buf, &len, why);
    close(fd);
    if (rc != 0) {
        isoprof_free(buf); /* wiped */
        return rc;
    }
    *out = buf;
    return 0;
}

static void wipe_free(char *s)
{
    if (s != NULL) {
        explicit_bzero(s, strlen(s));
        isoprof_free(s);
    }
}

void upl_settings_free(struct upl_settings *s)
{
    wipe_free(s->userpwd);
    wipe_free(s->bearer);
    isoprof_free(s->hl);
    memset(s, 0, sizeof(*s));
}

static int set(const char *v)
{
    return v != NULL && v[0] != '\0';
}

/* The credentials: "user:password" and the bearer token, from their files. */
static int credentials(struct upl_settings *s, const struct cfg *c, const char **what,
                       const char **why)
{
    if (set(c->upload.basic_auth.username)) {
        char *password = NULL;
        *what = "upload.basic_auth.password_file";
        int rc = upl_secret_read(c->upload.basic_auth.password_file, &password, why);
        if (rc != 0)
            return rc;
        s->userpwd = isoprof_asprintf("%s:%s", c->upload.basic_auth.username, password);
        wipe_free(password);
        if (s->userpwd == NULL) {
            *why = "out of memory";
            return -ENOMEM;
        }
    }
    if (set(c->upload.bearer_token_file)) {
        *what = "upload.bearer_token_file";
        int rc = upl_secret_read(c->upload.bearer_token_file, &s->bearer, why);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int upl_settings_load(struct upl_settings *s, const struct cfg *c, const char *url,
                      const char **what, const char **why)
{
    memset(s, 0, sizeof(*s));
    *what = "";
    *why = "";
    int rc = credentials(s, c, what, why);
    if (rc != 0) {
        upl_settings_free(s);
        return rc;
    }
    if (set(c->upload.host))
        snprintf(s->host, sizeof(s->host), "%s", c->upload.host);
    else if (gethostname(s->host, sizeof(s->host) - 1) != 0 || s->host[0] == '\0')
        snprintf(s->host, sizeof(s->host), "unknown");
    size_t nh = c->upload.headers.n, nl = c->upload.labels.n;
    s->hl = isoprof_calloc(nh + nl + 1, sizeof(*s->hl));
    if (s->hl == NULL) {
        upl_settings_free(s);
        *what = "upload";
        *why = "out of memory";
        return -ENOMEM;
    }
    for (size_t i = 0; i < nh; i++)
        s->hl[i] =
            (struct push_label){c->upload.headers.items[i].key, c->upload.headers.items[i].value};
    for (size_t i = 0; i < nl; i++)
        s->hl[nh + i] =
            (struct push_label){c->upload.labels.items[i].key, c->upload.labels.items[i].value};
    s->o = (struct upl_options){
        .api = c->upload.api == CFG_UPLOAD_INGEST ? UPL_API_INGEST : UPL_API_PUSH,
        .url = url,
        .host = s->host,
        .timeout_ms = c->upload.timeout_ns / 1000000u,
        .backoff_min_ms = c->upload.backoff.min_ns / 1000000u,
        .backoff_max_ms = c->upload.backoff.max_ns / 1000000u,
        .max_profiles = c->upload.batch.max_profiles,
        .max_bytes = c->upload.batch.max_bytes,
        .max_delay_ms = c->upload.batch.max_delay_ns / 1000000u,
        .max_profile_size = c->upload.max_profile_size,
        .ca_file = c->upload.tls.ca_file,
        .insecure = c->upload.tls.insecure_skip_verify,
        .userpwd = s->userpwd,
        .bearer = s->bearer,
        .tenant_id = c->upload.tenant_id,
        .headers = s->hl,
        .nheaders = nh,
        .labels = s->hl + nh,
        .nlabels = nl,
        .max_age_ms = c->upload.max_age_ns / 1000000u,
        .max_rate = c->upload.max_rate,
        .isolate_label = c->upload.isolate_label,
    };
    return 0;
}

/*
 * upload.c - the upload section's own rules, beyond the types and bounds of
 * its rows: the server URL, the tenant id, the names and values of the
 * extra headers and the static labels (cfg_check_fn, run by the loader on
 * each value), and the label values the legacy /ingest endpoint cannot
 * carry (a cfg_relations rule, run after the walk).
 *
 * The URL, the headers and the password may hold secrets. A URL with
 * credentials, or with a query or fragment (where API keys tend to go), is
 * refused without quoting it; header values are never quoted (the loader
 * does not even pass them to be). Nothing here reads a file: the agent
 * reads password_file and bearer_token_file at start.
 */
#include "internal.h"

#include "base.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define HEADER_NAME_MAX 64
#define HEADER_VALUE_MAX 1024
#define LABEL_NAME_MAX 1024
#define LABEL_VALUE_MAX 2048

/* A name the agent sets itself, and where to set it instead. */
struct reserved {
    const char *name;
    const char *hint; /* "" or "; use ..." */
};

/* Compared case-insensitively, as HTTP does. */
static const struct reserved reserved_headers[] = {
    {"Content-Type", ""},
    {"Content-Length", ""},
    {"Content-Encoding", ""},
    {"Transfer-Encoding", ""},
    {"Host", ""},
    {"Connection", ""},
    {"Expect", ""},
    {"Connect-Protocol-Version", ""},
    {"Authorization", "; use upload.basic_auth or upload.bearer_token_file"},
    {"X-Scope-OrgID", "; use upload.tenant_id"},
};

/* Compared exactly: label names are case-sensitive. */
static const struct reserved reserved_labels[] = {
    {"service_name", ""}, {"version", ""}, {"host", "; use upload.host"},
    {"isolate", ""},      {"runtime", ""}, {"anomaly", ""},
    {"thread", ""},
};

static const struct reserved *find_reserved(const struct reserved *r, size_t n, const char *name,
                                            int nocase)
{
    for (size_t i = 0; i < n; i++) {
        if ((nocase ? strcasecmp(r[i].name, name) : strcmp(r[i].name, name)) == 0)
            return &r[i];
    }
    return NULL;
}

/*
 * Why s (a URL without credentials, query or fragment) is not
 * http[s]://host[:port][/path], or NULL. host: a name, an IPv4 address or a
 * bracketed IPv6 address.
 */
static const char *url_problem(const char *s)
{
    for (const char *p = s; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= 0x20 || ch == 0x7f)
            return "spaces and control characters are not allowed";
        if (ch >= 0x80)
            return "only ASCII is allowed (percent-encode the rest)";
    }
    const char *h;
    if (strncmp(s, "http://", 7) == 0)
        h = s + 7;
    else if (strncmp(s, "https://", 8) == 0)
        h = s + 8;
    else
        return "it must start with http:// or https://";
    const char *he, *rest;
    if (*h == '[') {
        he = strchr(h, ']');
        char v6[64];
        unsigned char addr[sizeof(struct in6_addr)];
        if (he == NULL || (size_t)(he - h - 1) >= sizeof(v6))
            return "'[' starts an IPv6 address that does not end with ']'";
        memcpy(v6, h + 1, (size_t)(he - h - 1));
        v6[he - h - 1] = '\0';
        if (inet_pton(AF_INET6, v6, addr) != 1)
            return "the address in brackets is not an IPv6 address";
        rest = he + 1;
    } else {
        he = h + strcspn(h, ":/");
        size_t hl = (size_t)(he - h);
        if (hl == 0)
            return "the host is empty";
        if (hl > 253)
            return "the host is longer than 253 bytes";
        int numeric = 1;
        for (const char *p = h; p < he; p++) {
            if (!cfg_host_char_ok(*p, 0))
                return "the host has a character that is not allowed";
            numeric &= (*p >= '0' && *p <= '9') || *p == '.';
        }
        char v4[256];
        unsigned char addr[sizeof(struct in_addr)];
        memcpy(v4, h, hl);
        v4[hl] = '\0';
        if (numeric && inet_pton(AF_INET, v4, addr) != 1)
            return "the host is not a valid IPv4 address";
        rest = he;
    }
    if (*rest == ':') {
        const char *ps = rest + 1;
        size_t pl = strspn(ps, "0123456789");
        unsigned long port = 0;
        for (size_t i = 0; i < pl && i < 6; i++)
            port = port * 10 + (unsigned long)(ps[i] - '0');
        if (pl == 0 || pl > 5 || port < 1 || port > 65535)
            return "the port must be a number from 1 to 65535";
        rest = ps + pl;
    }
    if (*rest != '\0' && *rest != '/')
        return "the host must be followed by :port, a path starting with '/', or nothing";
    return NULL;
}

const char *cfg_upload_check_url(const char *s, size_t len, int is_key, const char *shown,
                                 char *buf, size_t cap)
{
    (void)is_key;
    if (len == 0)
        return NULL; /* upload off */
    /* Userinfo sits before the first '/', '?' or '#' after "://"; without
     * "://" the whole text might be an authority, so any '@' counts. This
     * comes first: every later message quotes the URL. */
    const char *auth = strstr(s, "://");
    size_t end = auth != NULL ? (size_t)(auth + 3 - s) + strcspn(auth + 3, "/?#") : len;
    if (memchr(s, '@', end) != NULL)
        return "must not hold credentials; use upload.basic_auth";
    if (strchr(s, '?') != NULL)
        return "must not have a query ('?'); it is a base URL";
    if (strchr(s, '#') != NULL)
        return "must not have a fragment ('#'); it is a base URL";
    const char *why = url_problem(s);
    if (why == NULL)
        return NULL;
    snprintf(buf, cap, "'%s' is not an http:// or https:// URL: %s", shown, why);
    return buf;
}

const char *cfg_upload_check_tenant(const char *s, size_t len, int is_key, const char *shown,
                                    char *buf, size_t cap)
{
    (void)is_key;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 0x20 || ch >= 0x7f) {
            snprintf(buf, cap,
                     "'%s' must be printable ASCII without spaces (it is sent as a header value)",
                     shown);
            return buf;
        }
    }
    return NULL;
}

/* The message for a map key's problem (NULL: none), with r's hint. */
static const char *name_problem(const char *shown, const char *problem, const struct reserved *r,
                                char *buf, size_t cap)
{
    if (problem == NULL)
        return NULL;
    snprintf(buf, cap, "name '%s' %s%s", shown, problem, r != NULL ? r->hint : "");
    return buf;
}

/* RFC 9110 tchar. */
static int is_tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

const char *cfg_upload_check_header(const char *s, size_t len, int is_key, const char *shown,
                                    char *buf, size_t cap)
{
    if (!is_key) {
        /* shown is NULL: a value may be a token and is never quoted */
        if (len > HEADER_VALUE_MAX)
            return "is longer than 1024 bytes";
        for (size_t i = 0; i < len; i++) {
            unsigned char ch = (unsigned char)s[i];
            if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
                return "must not contain control characters (CR, LF, ...) other than tab";
        }
        return NULL;
    }
    const char *problem = NULL;
    const struct reserved *r = NULL;
    size_t ntchar = 0;
    while (ntchar < len && is_tchar((unsigned char)s[ntchar]))
        ntchar++;
    if (len == 0 || len > HEADER_NAME_MAX)
        problem = "must be 1 to 64 bytes long";
    else if (ntchar != len)
        problem = "is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)";
    else if ((r = find_reserved(reserved_headers, ISOPROF_ARRAY_SIZE(reserved_headers), s, 1)))
        problem = "is set by the agent";
    return name_problem(shown, problem, r, buf, cap);
}

const char *cfg_upload_check_label(const char *s, size_t len, int is_key, const char *shown,
                                   char *buf, size_t cap)
{
    if (!is_key) {
        if (len > LABEL_VALUE_MAX)
            return "is longer than 2048 bytes";
        if (isoprof_utf8_valid_prefix((const uint8_t *)s, len) != len)
            return "is not valid UTF-8";
        return NULL;
    }
    const char *problem = NULL;
    const struct reserved *r = NULL;
    if (len > LABEL_NAME_MAX)
        problem = "is longer than 1024 bytes";
    else if (len == 0 || (s[0] >= '0' && s[0] <= '9') ||
             strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != len)
        problem = "must match [A-Za-z_][A-Za-z0-9_]*";
    else if (strncmp(s, "__", 2) == 0)
        problem = "must not start with __ (reserved for the server)";
    else if ((r = find_reserved(reserved_labels, ISOPROF_ARRAY_SIZE(reserved_labels), s, 0)))
        problem = "is set by the agent";
    return name_problem(shown, problem, r, buf, cap);
}

const char *cfg_upload_label_fits_api(const struct cfg *c, const char *value)
{
    if (c->upload.api == CFG_UPLOAD_INGEST && strpbrk(value, ",}") != NULL)
        return "must not contain ',' or '}' when upload.api is ingest (the /ingest endpoint "
               "cannot escape them)";
    return NULL;
}

/*
 * test_secret.c - reading the upload credential files (uploader/settings.c):
 * a good secret with its newline dropped; a read that fails after part of
 * the secret arrived (a Unix socket whose peer went away: the bytes, then
 * ECONNRESET), a secret too long, empty or holding a control character,
 * each refused with every byte of the buffer it was read into zero; and
 * by path, a directory, a missing file and a too long file refused, a good
 * one read.
 */
#include "base.h"
#include "settings.h"

#include "../scratch.h"
#include "../test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static char buf[UPL_SECRET_MAX + 1];

/* buf full of a pattern that is not zero, so a wipe shows. */
static void dirty(void)
{
    memset(buf, 0xa5, sizeof(buf));
}

static int all_zero(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

/* A pipe's read end holding bytes s[0..n), its write end closed. */
static int pipe_of(const char *s, size_t n)
{
    int p[2];
    if (pipe(p) != 0)
        abort();
    if (n > 0 && write(p[1], s, n) != (ssize_t)n)
        abort();
    close(p[1]);
    return p[0];
}

TEST(good_secret)
{
    static const struct {
        const char *in, *want;
    } cases[] = {{"s3cret\n", "s3cret"}, {"s3cret\r\n", "s3cret"}, {"t0k en", "t0k en"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        dirty();
        int fd = pipe_of(cases[i].in, strlen(cases[i].in));
        size_t len = 99;
        const char *why = NULL;
        CHECK_EQ_INT(upl_secret_read_fd(fd, buf, &len, &why), 0);
        close(fd);
        CHECK_STR(buf, cases[i].want);
        CHECK_EQ_INT(len, strlen(cases[i].want));
        CHECK(all_zero(buf + len, sizeof(buf) - len)); /* the newline too */
    }
    /* exactly the limit, with its newline */
    char *max = isoprof_malloc(UPL_SECRET_MAX + 2);
    REQUIRE(max != NULL);
    memset(max, 'k', UPL_SECRET_MAX);
    max[UPL_SECRET_MAX] = '\n';
    dirty();
    int fd = pipe_of(max, UPL_SECRET_MAX + 1);
    size_t len = 0;
    const char *why = NULL;
    CHECK_EQ_INT(upl_secret_read_fd(fd, buf, &len, &why), 0);
    CHECK_EQ_INT(len, UPL_SECRET_MAX);
    CHECK_EQ_INT(buf[UPL_SECRET_MAX], 0);
    close(fd);
    isoprof_free(max);
}

TEST(read_fails_midway_buffer_wiped)
{
    /* A Unix stream socket: the peer sends part of a secret, then closes
     * with bytes of ours unread, so after the part our next read fails
     * with ECONNRESET. */
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    static const char part[] = "half-of-a-secr";
    REQUIRE(write(sv[1], part, sizeof(part) - 1) == (ssize_t)(sizeof(part) - 1));
    REQUIRE(write(sv[0], "x", 1) == 1); /* left unread by the peer */
    close(sv[1]);
    dirty();
    size_t len = 99;
    const char *why = NULL;
    int rc = upl_secret_read_fd(sv[0], buf, &len, &why);
    close(sv[0]);
    CHECK_EQ_INT(rc, -ECONNRESET);
    CHECK(why != NULL && strstr(why, "secr") == NULL);
    CHECK_EQ_INT(len, 0);
    CHECK(all_zero(buf, sizeof(buf))); /* the part that was read is gone */
}

TEST(refused_secret_buffer_wiped)
{
    static char longer[UPL_SECRET_MAX + 100];
    memset(longer, 's', sizeof(longer));
    static const struct {
        const char *in;
        size_t n;
        int rc;
    } cases[] = {
        {longer, sizeof(longer), -EFBIG},
        {longer, UPL_SECRET_MAX + 1, -EFBIG},
        {"", 0, -EINVAL},
        {"\n\n", 2, -EINVAL},
        {"sec\x01ret\n", 8, -EINVAL},
        {"sec\nret\n", 8, -EINVAL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        dirty();
        int fd = pipe_of(cases[i].in, cases[i].n);
        size_t len = 99;
        const char *why = NULL;
        int rc = upl_secret_read_fd(fd, buf, &len, &why);
        close(fd);
        if (rc != cases[i].rc)
            fprintf(stderr, "case %zu: %d\n", i, rc);
        CHECK_EQ_INT(rc, cases[i].rc);
        CHECK_EQ_INT(len, 0);
        CHECK(why != NULL && why[0] != '\0' && strstr(why, "sec") == NULL);
        CHECK(all_zero(buf, sizeof(buf)));
    }
}

TEST(by_path)
{
    char *dir = tmp_dir();
    char path[512];
    char *out = NULL;
    const char *why = NULL;
    /* a directory: open succeeds, the read fails */
    CHECK_EQ_INT(upl_secret_read(dir, &out, &why), -EISDIR);
    CHECK(out == NULL);
    snprintf(path, sizeof(path), "%s/missing", dir);
    CHECK_EQ_INT(upl_secret_read(path, &out, &why), -ENOENT);
    CHECK(out == NULL);
    snprintf(path, sizeof(path), "%s/long", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    for (int i = 0; i < 2 * UPL_SECRET_MAX; i++)
        fputc('z', f);
    fclose(f);
    CHECK_EQ_INT(upl_secret_read(path, &out, &why), -EFBIG);
    CHECK_STR(why, "longer than 4096 bytes");
    CHECK(out == NULL);
    snprintf(path, sizeof(path), "%s/token", dir);
    f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs("tok-5ecret\n", f);
    fclose(f);
    CHECK_EQ_INT(upl_secret_read(path, &out, &why), 0);
    CHECK_STR(out, "tok-5ecret");
    if (out != NULL) {
        explicit_bzero(out, strlen(out));
        isoprof_free(out);
    }
    tmp_remove(dir);
}

/* The options from a config: every upload option where the uploader reads
 * it, the credentials from their files; a bad file named. */
TEST(settings_from_config)
{
    char *dir = tmp_dir();
    char pw[512], tok[512], text[2048];
    snprintf(pw, sizeof(pw), "%s/pw", dir);
    snprintf(tok, sizeof(tok), "%s/tok", dir);
    FILE *f = fopen(pw, "w");
    REQUIRE(f != NULL);
    fputs("s3cret\n", f);
    fclose(f);
    snprintf(text, sizeof(text),
             "upload:\n"
             "  url: http://127.0.0.1:4040\n"
             "  api: ingest\n"
             "  timeout: 7s\n"
             "  backoff: {min: 2s, max: 3m}\n"
             "  batch: {max_profiles: 5, max_bytes: 1MiB, max_delay: 250ms}\n"
             "  max_age: 2h\n"
             "  max_rate: 1KiB\n"
             "  isolate_label: true\n"
             "  host: web-9\n"
             "  tenant_id: team-a\n"
             "  basic_auth: {username: u, password_file: %s}\n"
             "  headers: {X-A: one, X-B: two}\n"
             "  labels: {region: eu, zone: b, env: prod}\n",
             pw);
    struct cfg *c = NULL;
    char *why = NULL;
    REQUIRE(cfg_load_buffer("t.yaml", text, strlen(text), &c, &why) == 0);
    struct upl_settings st;
    const char *what, *swhy;
    CHECK_EQ_INT(upl_settings_load(&st, c, "http://127.0.0.1:4040", &what, &swhy), 0);
    CHECK(st.o.api == UPL_API_INGEST);
    CHECK_STR(st.o.url, "http://127.0.0.1:4040");
    CHECK_STR(st.o.host, "web-9");
    CHECK_EQ_INT(st.o.timeout_ms, 7000);
    CHECK_EQ_INT(st.o.backoff_min_ms, 2000);
    CHECK_EQ_INT(st.o.backoff_max_ms, 180000);
    CHECK_EQ_INT(st.o.max_profiles, 5);
    CHECK_EQ_INT(st.o.max_bytes, 1 << 20);
    CHECK_EQ_INT(st.o.max_delay_ms, 250);
    CHECK_EQ_INT(st.o.max_age_ms, 7200000);
    CHECK_EQ_INT(st.o.max_rate, 1024);
    CHECK_EQ_INT(st.o.isolate_label, 1);
    CHECK_STR(st.o.tenant_id, "team-a");
    CHECK_STR(st.o.userpwd, "u:s3cret");
    CHECK(st.o.bearer == NULL);
    CHECK_EQ_INT(st.o.nheaders, 2);
    CHECK_EQ_INT(st.o.nlabels, 3);
    CHECK_STR(st.o.headers[1].name, "X-B");
    CHECK_STR(st.o.labels[0].name, "region");
    CHECK_STR(st.o.labels[2].value, "prod");
    CHECK(st.o.replay == NULL && st.o.nreplay == 0);
    upl_settings_free(&st);
    CHECK(st.userpwd == NULL && st.hl == NULL);
    cfg_free(c);

    /* a token file that is not there: named, and nothing left to free */
    snprintf(text, sizeof(text), "upload: {url: http://127.0.0.1:4040, bearer_token_file: %s}\n",
             tok);
    REQUIRE(cfg_load_buffer("t.yaml", text, strlen(text), &c, &why) == 0);
    CHECK_EQ_INT(upl_settings_load(&st, c, "http://127.0.0.1:4040", &what, &swhy), -ENOENT);
    CHECK_STR(what, "upload.bearer_token_file");
    CHECK(st.bearer == NULL && st.hl == NULL && st.userpwd == NULL);
    /* an empty one: refused as the daemon refuses it */
    f = fopen(tok, "w");
    REQUIRE(f != NULL);
    fclose(f);
    CHECK_EQ_INT(upl_settings_load(&st, c, "http://127.0.0.1:4040", &what, &swhy), -EINVAL);
    CHECK_STR(swhy, "empty");
    cfg_free(c);
    tmp_remove(dir);
}

int main(void)
{
    RUN(good_secret);
    RUN(read_fails_midway_buffer_wiped);
    RUN(refused_secret_buffer_wiped);
    RUN(by_path);
    RUN(settings_from_config);
    TEST_EXIT();
}

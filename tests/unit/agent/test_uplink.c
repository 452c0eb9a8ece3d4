/*
 * test_uplink.c - reading the upload credential files (agent/daemon/uplink.c):
 * a good secret with its newline dropped; a read that fails after part of
 * the secret arrived (a Unix socket whose peer went away: the bytes, then
 * ECONNRESET), a secret too long, empty or holding a control character,
 * each refused with every byte of the buffer it was read into zero; and
 * by path, a directory, a missing file and a too long file refused, a good
 * one read.
 */
#include "base.h"
#include "uplink.h"

#include "../scratch.h"
#include "../test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static char buf[UPLINK_SECRET_MAX + 1];

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
        CHECK_EQ_INT(uplink_secret_read_fd(fd, buf, &len, &why), 0);
        close(fd);
        CHECK_STR(buf, cases[i].want);
        CHECK_EQ_INT(len, strlen(cases[i].want));
        CHECK(all_zero(buf + len, sizeof(buf) - len)); /* the newline too */
    }
    /* exactly the limit, with its newline */
    char *max = isoprof_malloc(UPLINK_SECRET_MAX + 2);
    REQUIRE(max != NULL);
    memset(max, 'k', UPLINK_SECRET_MAX);
    max[UPLINK_SECRET_MAX] = '\n';
    dirty();
    int fd = pipe_of(max, UPLINK_SECRET_MAX + 1);
    size_t len = 0;
    const char *why = NULL;
    CHECK_EQ_INT(uplink_secret_read_fd(fd, buf, &len, &why), 0);
    CHECK_EQ_INT(len, UPLINK_SECRET_MAX);
    CHECK_EQ_INT(buf[UPLINK_SECRET_MAX], 0);
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
    int rc = uplink_secret_read_fd(sv[0], buf, &len, &why);
    close(sv[0]);
    CHECK_EQ_INT(rc, -ECONNRESET);
    CHECK(why != NULL && strstr(why, "secr") == NULL);
    CHECK_EQ_INT(len, 0);
    CHECK(all_zero(buf, sizeof(buf))); /* the part that was read is gone */
}

TEST(refused_secret_buffer_wiped)
{
    static char longer[UPLINK_SECRET_MAX + 100];
    memset(longer, 's', sizeof(longer));
    static const struct {
        const char *in;
        size_t n;
        int rc;
    } cases[] = {
        {longer, sizeof(longer), -EFBIG},
        {longer, UPLINK_SECRET_MAX + 1, -EFBIG},
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
        int rc = uplink_secret_read_fd(fd, buf, &len, &why);
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
    CHECK_EQ_INT(uplink_secret_read(dir, &out, &why), -EISDIR);
    CHECK(out == NULL);
    snprintf(path, sizeof(path), "%s/missing", dir);
    CHECK_EQ_INT(uplink_secret_read(path, &out, &why), -ENOENT);
    CHECK(out == NULL);
    snprintf(path, sizeof(path), "%s/long", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    for (int i = 0; i < 2 * UPLINK_SECRET_MAX; i++)
        fputc('z', f);
    fclose(f);
    CHECK_EQ_INT(uplink_secret_read(path, &out, &why), -EFBIG);
    CHECK_STR(why, "longer than 4096 bytes");
    CHECK(out == NULL);
    snprintf(path, sizeof(path), "%s/token", dir);
    f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs("tok-5ecret\n", f);
    fclose(f);
    CHECK_EQ_INT(uplink_secret_read(path, &out, &why), 0);
    CHECK_STR(out, "tok-5ecret");
    if (out != NULL) {
        explicit_bzero(out, strlen(out));
        isoprof_free(out);
    }
    tmp_remove(dir);
}

int main(void)
{
    RUN(good_secret);
    RUN(read_fails_midway_buffer_wiped);
    RUN(refused_secret_buffer_wiped);
    RUN(by_path);
    TEST_EXIT();
}

/*
 * test_diskfull.c - a write that cannot reach the disk (here: the file
 * size limit, RLIMIT_FSIZE, which fails writes like a full disk does)
 * makes store_put return an error, commits nothing of the batch and leaves
 * a consistent store that works again once there is room. Runs in a child
 * process so that the limit and the ignored SIGXFSZ stay there.
 */
#include "common.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

static void fill_random(uint8_t *b, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b[i] = (uint8_t)(x >> 24);
    }
}

static long count(struct store *s)
{
    int rc;
    struct seen *l = list(s, NULL, &rc);
    return rc == 0 ? (long)l->n : -1;
}

static int put_batch(struct store *s, uint64_t first, uint8_t *buf)
{
    struct store_record r[8];
    for (int i = 0; i < 8; i++) {
        r[i] = (struct store_record){.w = {.worker = "w",
                                           .version = "v",
                                           .runtime = "node",
                                           .type = 1,
                                           .start_ns = T0 + (first + (uint64_t)i) * SEC},
                                     .pprof = buf + (size_t)i * 32768,
                                     .len = 32768};
    }
    return store_put(s, r, 8, NULL);
}

static void child(const char *path)
{
    signal(SIGXFSZ, SIG_IGN);
    struct store *s = open_rw(path, 64ull << 20);
    REQUIRE(s != NULL);
    uint8_t *buf = isoprof_malloc(8 * 32768);
    REQUIRE(buf != NULL);
    fill_random(buf, 8 * 32768, 1);
    REQUIRE(put_batch(s, 0, buf) == 0);
    char file[400];
    snprintf(file, sizeof(file), "%s/data.mdb", path);
    struct stat sb;
    REQUIRE(stat(file, &sb) == 0);
    struct rlimit old, lim;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = (rlim_t)sb.st_size + 600 * 1024;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);

    int rc = 0;
    uint64_t next = 8;
    long committed = 8;
    for (int i = 0; i < 50 && rc == 0; i++) {
        fill_random(buf, 8 * 32768, next + 7);
        rc = put_batch(s, next, buf);
        if (rc == 0) {
            committed += 8;
            next += 8;
        }
    }
    /* LMDB reports a short write as EIO, a refused one as its errno. */
    if (rc != -EFBIG && rc != -ENOSPC && rc != -EIO)
        fprintf(stderr, "put under the limit: %d %s\n", rc, isoprof_strerror(rc));
    CHECK(rc == -EFBIG || rc == -ENOSPC || rc == -EIO);
    CHECK(committed >= 8);
    CHECK_EQ_INT(count(s), committed);
    CHECK_EQ_INT(check_clean(s), 0);
    /* Still refused while there is no room, still consistent. */
    CHECK(put_batch(s, next, buf) != 0);
    CHECK_EQ_INT(count(s), committed);

    /* Room again: the next put works. */
    REQUIRE(setrlimit(RLIMIT_FSIZE, &old) == 0);
    CHECK_EQ_INT(put_batch(s, next, buf), 0);
    CHECK_EQ_INT(count(s), committed + 8);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    s = open_rw(path, 64ull << 20);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(count(s), committed + 8);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    isoprof_free(buf);
}

TEST(file_size_limit)
{
    const char *path = tmp_store_path();
    fflush(stderr);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        child(path);
        fflush(stderr);
        _exit(test_failed_ ? 1 : 0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ_INT(WEXITSTATUS(status), 0);
}

int main(void)
{
    RUN(file_size_limit);
    TEST_EXIT();
}

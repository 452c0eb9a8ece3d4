/*
 * scratch.h - what several unit tests need around a store: fresh temporary
 * directories (removed at exit, or earlier with tmp_remove) and
 * deterministic payloads that compress roughly like pprof.
 */
#ifndef ISOPROF_TEST_SCRATCH_H
#define ISOPROF_TEST_SCRATCH_H

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define SCRATCH_MAX_DIRS 64

static char tmp_dirs_[SCRATCH_MAX_DIRS][256];
static int tmp_ndirs_;

static int tmp_rm_one_(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

/* Removes what is left (a passing test may remove its own first). */
static void tmp_cleanup_(void)
{
    for (int i = 0; i < tmp_ndirs_; i++)
        if (tmp_dirs_[i][0])
            nftw(tmp_dirs_[i], tmp_rm_one_, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh, empty temporary directory (under $TMPDIR, else /tmp); removed
 * at exit. */
__attribute__((unused)) static char *tmp_dir(void)
{
    if (tmp_ndirs_ == 0)
        atexit(tmp_cleanup_);
    if (tmp_ndirs_ >= SCRATCH_MAX_DIRS)
        abort();
    const char *base = getenv("TMPDIR");
    char *d = tmp_dirs_[tmp_ndirs_];
    snprintf(d, sizeof(tmp_dirs_[0]), "%s/isoprof-unit-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(d) == NULL) {
        perror("mkdtemp");
        abort();
    }
    tmp_ndirs_++;
    return d;
}

/* Remove directory d (from tmp_dir) now. */
__attribute__((unused)) static void tmp_remove(char *d)
{
    nftw(d, tmp_rm_one_, 16, FTW_DEPTH | FTW_PHYS);
    d[0] = '\0';
}

/* Deterministic payload: compressible but not trivially (like pprof). */
__attribute__((unused)) static void fill_payload(uint8_t *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (i % 4 == 0) ? (uint8_t)x : (uint8_t)(i / 64);
    }
}

#endif

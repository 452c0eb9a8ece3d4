/*
 * io.c - whole reads and writes on a file descriptor, and the names of the
 * fault signals (see base.h). The loops that every reader of a spill file,
 * a source map or a store file would otherwise write again: pread, pwrite
 * and write may return early (a signal, a pipe's capacity, a file system's
 * transfer size), and only the caller's whole buffer is a result.
 */
#include "base.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

ssize_t isoprof_pread_full(int fd, void *buf, size_t n, off_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && got == 0)
            return -1;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int isoprof_pwrite_full(int fd, const void *buf, size_t n, off_t off)
{
    size_t put = 0;
    while (put < n) {
        ssize_t r = pwrite(fd, (const char *)buf + put, n - put, off + (off_t)put);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -EIO;
        put += (size_t)r;
    }
    return 0;
}

int isoprof_write_full(int fd, const void *buf, size_t n)
{
    size_t put = 0;
    while (put < n) {
        ssize_t r = write(fd, (const char *)buf + put, n - put);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -EIO;
        put += (size_t)r;
    }
    return 0;
}

const char *isoprof_fault_name(int sig)
{
    switch (sig) {
    case SIGSEGV:
        return "SIGSEGV";
    case SIGBUS:
        return "SIGBUS";
    case SIGABRT:
        return "SIGABRT";
    case SIGILL:
        return "SIGILL";
    case SIGFPE:
        return "SIGFPE";
    default:
        return NULL;
    }
}

/*
 * io.c - whole reads and writes on a file descriptor, and the fault
 * signals: their names, and a forked reader's setup for them (see base.h). The loops that every
 * reader of a spill file, a source map or a store file would otherwise write again: pread, pwrite
 * and write may return early (a signal, a pipe's capacity, a file system's
 * transfer size), and only the caller's whole buffer is a result.
 */
#include "base.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
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

/* n bytes of buf to fd: at offset off (pwrite) when at, else at its file
 * position (write). */
static int write_full(int fd, const void *buf, size_t n, off_t off, int at)
{
    size_t put = 0;
    while (put < n) {
        const char *p = (const char *)buf + put;
        ssize_t r = at ? pwrite(fd, p, n - put, off + (off_t)put) : write(fd, p, n - put);
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

int isoprof_pwrite_full(int fd, const void *buf, size_t n, off_t off)
{
    return write_full(fd, buf, n, off, 1);
}

int isoprof_write_full(int fd, const void *buf, size_t n)
{
    return write_full(fd, buf, n, 0, 0);
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

void isoprof_fault_child(void)
{
    static const int faults[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS};
    struct sigaction sa;
    sigset_t set;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigemptyset(&set);
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(faults); i++) {
        sigaction(faults[i], &sa, NULL);
        sigaddset(&set, faults[i]);
    }
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
}

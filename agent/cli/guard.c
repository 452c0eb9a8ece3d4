/*
 * guard.c - the read commands' store work in a child; see guard.h.
 *
 * The two processes share one anonymous page: the child counts each step
 * into and out of the storage library (ticks) and says whether it is in
 * it now (in_store) and whether it has opened the -o FILE (out_open). The
 * parent learns that the child is gone from a pipe whose only write end
 * the child holds (EOF when it exits, however it exits), so a healthy
 * command costs the parent no polling delay; between reads it wakes a few
 * times a second to look at the page. It never touches the store.
 */
#include "guard.h"

#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* How often the parent looks at the page while the child runs. */
#define GUARD_POLL_MS 200

struct guard_page {
    uint64_t ticks; /* every enter and leave */
    int in_store;   /* between an enter and its leave */
    int out_open;   /* the child opened the -o FILE */
};

/* The child's view of the page; NULL in a process without a guard. */
static struct guard_page *guard;

void cli_guard_enter(void)
{
    if (guard == NULL)
        return;
    __atomic_store_n(&guard->in_store, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&guard->ticks, 1, __ATOMIC_RELEASE);
}

void cli_guard_leave(void)
{
    if (guard == NULL)
        return;
    __atomic_store_n(&guard->in_store, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&guard->ticks, 1, __ATOMIC_RELEASE);
}

void cli_guard_out_opened(void)
{
    if (guard != NULL)
        __atomic_store_n(&guard->out_open, 1, __ATOMIC_RELEASE);
}

/* The signals a damaged mapping or an assertion on it ends a reader with:
 * base.h's faults, and SIGSYS and SIGTRAP. */
static const char *fault_name(int sig)
{
    if (sig == SIGSYS)
        return "SIGSYS";
    if (sig == SIGTRAP)
        return "SIGTRAP";
    return isoprof_fault_name(sig);
}

/* The child: a fault ends it at once (no handler of a sanitizer's runs,
 * no core is dumped: it is the parent's finding, not a crash to collect),
 * and it does not outlive a parent that is killed. */
static void child_prepare(pid_t parent)
{
    isoprof_fault_child();
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != parent)
        _exit(EXIT_FAILURE); /* the parent died before the line above */
}

/* The -o FILE the child opened, if it is a regular file (never a device
 * or a pipe -o named). */
static void remove_out(const struct guard_page *pg, const char *out)
{
    struct stat st;
    if (out != NULL && __atomic_load_n(&pg->out_open, __ATOMIC_ACQUIRE) && stat(out, &st) == 0 &&
        S_ISREG(st.st_mode))
        unlink(out);
}

/* Wait for the child (the pipe's EOF), killing it if it stays in the
 * storage library without a step for stall_ms. Returns 1 if it was killed
 * so, else 0. */
static int parent_wait(int fd, pid_t pid, const struct guard_page *pg, uint64_t stall_ms)
{
    uint64_t seen = UINT64_MAX, since = isoprof_now_mono_ns(), looked = since;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, GUARD_POLL_MS);
        if (n < 0 && errno != EINTR)
            return 0; /* cannot watch: waitpid below still waits */
        if (n > 0) {
            char buf[64];
            ssize_t got = read(fd, buf, sizeof(buf));
            if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
                return 0; /* the child is gone */
        }
        uint64_t ticks = __atomic_load_n(&pg->ticks, __ATOMIC_ACQUIRE);
        int in = __atomic_load_n(&pg->in_store, __ATOMIC_RELAXED);
        uint64_t now = isoprof_now_mono_ns();
        /* A gap far longer than the poll is this process stopped (Ctrl-Z,
         * SIGSTOP: the child was too) or starved: not the child's time. */
        int gap = now - looked > 5ull * GUARD_POLL_MS * 1000000ull;
        looked = now;
        if (ticks != seen || !in || gap) {
            seen = ticks;
            since = now;
        } else if (now - since >= stall_ms * 1000000ull) {
            kill(pid, SIGKILL);
            return 1;
        }
    }
}

int cli_guard_begin(const char *store, const char *out, uint64_t stall_ms)
{
    struct guard_page *pg =
        mmap(NULL, sizeof(*pg), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (pg == MAP_FAILED)
        return -errno;
    memset(pg, 0, sizeof(*pg));
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        int rc = -errno;
        munmap(pg, sizeof(*pg));
        return rc;
    }
    /* Nothing buffered before the fork is written twice; and the child's
     * status is waited for, even if SIGCHLD came ignored (which would
     * have the kernel reap it unseen). */
    fflush(NULL);
    signal(SIGCHLD, SIG_DFL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int rc = -errno;
        close(p[0]);
        close(p[1]);
        munmap(pg, sizeof(*pg));
        return rc;
    }
    if (pid == 0) {
        /* The write end stays open until this process is gone. */
        close(p[0]);
        child_prepare(parent);
        guard = pg;
        return 0;
    }
    close(p[1]);
    int stalled = parent_wait(p[0], pid, pg, stall_ms);
    close(p[0]);
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
        ;
    int werr = errno;
    if (w == pid && !stalled && WIFEXITED(status))
        exit(WEXITSTATUS(status));
    remove_out(pg, out);
    int sig = w == pid && WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    const char *fault = fault_name(sig);
    if (stalled) {
        char span[32];
        if (stall_ms % 1000 == 0)
            snprintf(span, sizeof(span), "%llu s", (unsigned long long)(stall_ms / 1000));
        else
            snprintf(span, sizeof(span), "%llu ms", (unsigned long long)stall_ms);
        fprintf(stderr,
                "isoprof: the store at %s could not be read: no progress for %s inside the "
                "store (a damaged tree, or storage that does not answer); 'isoprof store check "
                "--store %s' reports damage\n",
                store, span, store);
        exit(2);
    }
    if (fault != NULL) {
        fprintf(stderr,
                "isoprof: the store at %s is damaged: reading it faulted (%s); 'isoprof store "
                "check --store %s' reports what is damaged\n",
                store, fault, store);
        exit(2);
    }
    if (sig == 0) {
        /* Neither exited nor killed: waitpid failed; nothing is known. */
        fprintf(stderr, "isoprof: lost the process reading %s: %s\n", store, strerror(werr));
        exit(2);
    }
    /* Another signal (SIGPIPE from a closed reader, SIGINT, SIGKILL from
     * outside): end by it, as one process would have. */
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    exit(2);
}

/*
 * test_guard - the CLI's guard (agent/cli/guard.c): a "command" process
 * forks through cli_guard_begin and its child then exits, faults, stays
 * stuck inside the store or writes slowly outside it. What the command
 * process ends with (status, signal, stderr, the -o FILE) is checked.
 */
#include "guard.h"

#include "../test.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum act { ACT_EXIT3, ACT_SEGV, ACT_BUS_FILE, ACT_STUCK, ACT_SLOW_OUTSIDE, ACT_PIPE, ACT_ABORT };

static char dir[] = "/tmp/isoprof-guard-XXXXXX";
static char out[256], err_path[256];

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The command: its stderr goes to err_path. Returns its wait status. */
static int command(enum act act, uint64_t stall_ms, int open_out)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, STDERR_FILENO);
        close(fd);
        if (cli_guard_begin("/the/store", out, stall_ms) != 0)
            _exit(99);
        if (open_out) {
            int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            cli_guard_out_opened();
            if (write(o, "half", 4) != 4)
                _exit(98);
            close(o);
        }
        switch (act) {
        case ACT_EXIT3:
            cli_guard_enter();
            cli_guard_leave();
            _exit(3);
        case ACT_SEGV:
            cli_guard_enter();
            raise(SIGSEGV);
            _exit(97);
        case ACT_ABORT:
            cli_guard_enter();
            abort();
        case ACT_BUS_FILE:
            cli_guard_enter();
            raise(SIGBUS);
            _exit(97);
        case ACT_STUCK:
            cli_guard_enter();
            for (;;)
                pause();
        case ACT_SLOW_OUTSIDE:
            /* Out of the store for longer than the bound (a slow reader
             * of the output), stepping in now and then: not a hang. */
            for (int i = 0; i < 4; i++) {
                cli_guard_enter();
                cli_guard_leave();
                sleep_ms((long)stall_ms);
            }
            _exit(0);
        case ACT_PIPE:
            raise(SIGPIPE);
            _exit(97);
        }
        _exit(96);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return status;
}

static char *slurp(const char *path)
{
    static char buf[4096];
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

TEST(exit_status_passes_through)
{
    int st = command(ACT_EXIT3, 5000, 1);
    CHECK(WIFEXITED(st));
    CHECK_EQ_INT(WEXITSTATUS(st), 3);
    CHECK_STR(slurp(err_path), "");
    /* A command that ends by itself removes its own output when it must. */
    CHECK(exists(out));
    unlink(out);
}

TEST(fault_is_damage)
{
    int st = command(ACT_SEGV, 5000, 1);
    CHECK(WIFEXITED(st));
    CHECK_EQ_INT(WEXITSTATUS(st), 2);
    CHECK_STR(slurp(err_path),
              "isoprof: the store at /the/store is damaged: reading it faulted (SIGSEGV); "
              "'isoprof store check --store /the/store' reports what is damaged\n");
    CHECK(!exists(out)); /* the half-written -o FILE is gone */

    st = command(ACT_BUS_FILE, 5000, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    CHECK(strstr(slurp(err_path), "reading it faulted (SIGBUS)") != NULL);

    st = command(ACT_ABORT, 5000, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    CHECK(strstr(slurp(err_path), "reading it faulted (SIGABRT)") != NULL);
}

TEST(output_not_opened_is_kept)
{
    /* -o names a file the command never opened: a fault does not remove it. */
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    close(fd);
    int st = command(ACT_SEGV, 5000, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    CHECK(exists(out));
    unlink(out);
}

TEST(stuck_in_store_is_killed)
{
    int st = command(ACT_STUCK, 300, 1);
    CHECK(WIFEXITED(st));
    CHECK_EQ_INT(WEXITSTATUS(st), 2);
    CHECK_STR(slurp(err_path), "isoprof: the store at /the/store could not be read: no progress "
                               "for 300 ms inside the store (a damaged tree, or storage that "
                               "does not answer); 'isoprof store check --store /the/store' "
                               "reports damage\n");
    CHECK(!exists(out));
}

TEST(slow_outside_store_is_not_a_hang)
{
    int st = command(ACT_SLOW_OUTSIDE, 200, 0);
    CHECK(WIFEXITED(st));
    CHECK_EQ_INT(WEXITSTATUS(st), 0);
    CHECK_STR(slurp(err_path), "");
}

TEST(other_signal_ends_the_command_so)
{
    int st = command(ACT_PIPE, 5000, 1);
    CHECK(WIFSIGNALED(st));
    CHECK_EQ_INT(WIFSIGNALED(st) ? WTERMSIG(st) : 0, SIGPIPE);
    CHECK_STR(slurp(err_path), "");
    CHECK(!exists(out));
}

TEST(no_guard_is_a_no_op)
{
    /* In a process without a guard, the calls do nothing. */
    cli_guard_enter();
    cli_guard_leave();
    cli_guard_out_opened();
}

int main(void)
{
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(out, sizeof(out), "%s/out", dir);
    snprintf(err_path, sizeof(err_path), "%s/stderr", dir);
    RUN(exit_status_passes_through);
    RUN(fault_is_damage);
    RUN(output_not_opened_is_kept);
    RUN(stuck_in_store_is_killed);
    RUN(slow_outside_store_is_not_a_hang);
    RUN(other_signal_ends_the_command_so);
    RUN(no_guard_is_a_no_op);
    unlink(out);
    unlink(err_path);
    rmdir(dir);
    return test_total_failed_ ? 1 : 0;
}

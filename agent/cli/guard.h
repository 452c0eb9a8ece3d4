/*
 * guard.h - the CLI's store work in a child process, so that a damaged
 * store ends a command with a message and exit status 2, never a signal.
 *
 * LMDB maps data.mdb and follows the page numbers and offsets it finds in
 * it without checking them: a flipped bit in a branch page sends a cursor
 * anywhere (SIGSEGV), a page the file lacks raises SIGBUS, a damaged node
 * trips one of LMDB's assertions (SIGABRT). The storage library checks
 * everything it decodes (record lengths, index entries, key order, values
 * inside the file), but it cannot check the pages LMDB walks to find
 * them. So a read command forks at the point where it opens the store: the
 * child runs the rest of the command as it always did (its stdout and
 * stderr are the command's), the parent only waits.
 *
 *   - The child exits: the parent exits with the same status.
 *   - The child dies of a fault (SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE,
 *     SIGSYS, SIGTRAP): the parent says the store is damaged, names it and
 *     points at `isoprof store check`, removes a -o FILE the child had
 *     opened, and exits 2.
 *   - The child is inside the storage library and hands back nothing (no
 *     record to a callback, no call returning) for stall_ms: the parent
 *     kills it, says the store could not be read (a damaged tree, or
 *     storage that does not answer), removes the -o FILE, and exits 2.
 *     Time the child spends outside the library (writing its output to a
 *     slow pipe, merging profiles) does not count, nor time both processes
 *     spend stopped (Ctrl-Z).
 *   - The child dies of another signal (SIGPIPE from `| head`, SIGINT,
 *     SIGKILL from the OOM killer): the parent ends by the same signal, as
 *     one process would have.
 *
 * Cost: one fork and one wait per command (about a millisecond), nothing
 * per record but two atomic stores around each store call and callback.
 *
 * State: one page shared between the two processes, held in a static of
 * guard.c (a process runs one command). Thread: the CLI's only thread.
 */
#ifndef ISOPROF_CLI_GUARD_H
#define ISOPROF_CLI_GUARD_H

#include <stdint.h>

/* The child's longest stay inside the storage library without handing
 * back a record: far above any healthy store (a walk of 100k windows
 * takes a fraction of a second), so only a stuck walk meets it. */
#define CLI_GUARD_STALL_MS 60000u

/*
 * cli_guard_begin - fork; return in the child, which does the store work.
 * store: the store's path, for the parent's message (borrowed; must stay
 * valid in the parent, which it does: the parent never returns).
 * out: the -o FILE the command may write, or NULL (borrowed likewise).
 * stall_ms: the bound above (CLI_GUARD_STALL_MS; tests pass less).
 * Returns 0 in the child, or a negative errno in the (single) process when
 * no child could be made (no page, no pipe, no process): the caller then
 * goes on without a guard. The parent does not return: it exits.
 * Called once per process.
 */
int cli_guard_begin(const char *store, const char *out, uint64_t stall_ms);

/* The child is entering (enter) or has left (leave) the storage library;
 * a callback of the library's is "left" while it runs. No-ops without a
 * guard. */
void cli_guard_enter(void);
void cli_guard_leave(void);

/* The child has opened (created or truncated) the -o FILE: the parent
 * removes it if the child dies. No-op without a guard. */
void cli_guard_out_opened(void);

#endif

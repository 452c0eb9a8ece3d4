/*
 * procscan.h - one scan of /proc for runtime processes and their loopback
 * TCP listeners: the facts host discovery (procs.c) decides on.
 *
 * Nothing here touches the daemon's state: a scan reads a directory laid
 * out as /proc (the unit tests give it a fake one) and returns a list the
 * caller owns. The parsers below are pure functions of their input (the
 * fuzz target and the unit tests call them). Any thread; procs.c runs the
 * scan on the thread pool.
 */
#ifndef ISOPROF_AGENT_PROCSCAN_H
#define ISOPROF_AGENT_PROCSCAN_H

#include "appversion.h"

#include <stddef.h>
#include <stdint.h>

/* Matching processes kept by one scan; more are counted in `over`. */
#define PROCSCAN_MAX_PROCS 1024
/* Loopback listeners kept per process; more are counted. */
#define PROCSCAN_MAX_PORTS 8
/* Bytes read of a cmdline, environ, cgroup or status file. */
#define PROCSCAN_MAX_FILE (64u << 10)
/* Listening sockets read from net/tcp and net/tcp6 (a host with more is
 * not one whose inspectors we could tell apart anyway). */
#define PROCSCAN_MAX_LISTENERS 65536
/* A container id: the 64 hex digits Docker, containerd, CRI-O and Podman
 * put in the cgroup path. */
#define PROCSCAN_CONTAINER_LEN 64

/* struct procscan_proc.flags */
enum {
    PROCSCAN_NODE = 1u << 0,          /* the executable's base name is a Node binary's */
    PROCSCAN_SIGUSR1 = 1u << 1,       /* SIGUSR1 is caught (SigCgt), not ignored nor default */
    PROCSCAN_OPTIN = 1u << 2,         /* --inspect-port with a loopback host (or none) */
    PROCSCAN_OPTIN_REFUSED = 1u << 3, /* --inspect-port whose host is not loopback, or unreadable */
    PROCSCAN_INSPECT = 1u << 4,    /* --inspect, --inspect-brk or --inspect-wait: opened at start */
    PROCSCAN_NO_SIGUSR1 = 1u << 5, /* --disable-sigusr1 */
    PROCSCAN_OTHER_NETNS = 1u << 6, /* another network namespace: its loopback is not ours */
    PROCSCAN_FD_DENIED = 1u << 7,   /* its fds could not be read (another user, no ptrace) */
    PROCSCAN_ENV_DENIED = 1u << 8,  /* its environ could not be read (NODE_OPTIONS unknown) */
    PROCSCAN_VERSION_READ = 1u << 9, /* version_from was tried: `version` says what it gave */
};

/* One process whose executable matched. Plain data: copy it freely. */
struct procscan_proc {
    uint32_t pid, uid; /* uid: the real user id */
    /* starttime of /proc/PID/stat (clock ticks after boot): with pid, it
     * names one process, so a pid reused by another is told apart. */
    uint64_t start_ticks;
    unsigned flags;
    char exe[256];                              /* the executable's base name */
    char container[PROCSCAN_CONTAINER_LEN + 1]; /* "" when none */
    char optin[64];                             /* the --inspect-port value, cut */
    uint16_t ports[PROCSCAN_MAX_PORTS];         /* loopback TCP listeners, ascending */
    unsigned nports, ports_over;                /* kept, and past the cap */
    unsigned other_listeners;                   /* TCP listeners not on loopback: never used */
    struct appver version; /* with PROCSCAN_VERSION_READ: what version_from gave */
};

/* A process by pid and start time. */
struct procscan_key {
    uint32_t pid;
    uint64_t start_ticks;
};

struct procscan_filter {
    const char *const *exe; /* base names to look at */
    size_t nexe;
    const uint32_t *uids; /* only processes of these real uids; nuids 0: any */
    size_t nuids;
    uint32_t self_pid; /* never reported (the agent itself) */
    /* Where a version comes from (discovery.processes.version_from, in
     * order; nversion 0: not looked for), and the processes whose
     * version is settled already (ascending pid): not looked for again. */
    const char *const *version_from;
    size_t nversion;
    const struct procscan_key *settled;
    size_t nsettled;
};

struct procscan_result {
    struct procscan_proc *p; /* n entries, ascending pid; owned, procscan_result_free */
    size_t n;
    size_t entries;   /* numeric entries of the directory */
    size_t over;      /* matching processes past PROCSCAN_MAX_PROCS */
    size_t vanished;  /* gone (or unreadable) between readdir and their files */
    size_t denied;    /* executable unreadable (another user's, without ptrace) */
    size_t listeners; /* listening sockets in net/tcp{,6} */
    uint64_t cpu_ns;  /* the scan's CPU time (the calling thread's) */
};

/*
 * procscan_run - scan root (a /proc) for processes whose executable's base
 * name is in f->exe (and whose real uid is in f->uids, when given); for
 * each, read its status, stat, cmdline, environ (NODE_OPTIONS), network
 * namespace, cgroup and fds, and report its loopback TCP listeners; and,
 * with f->version_from, unless f->settled holds it, its version
 * (appver_find: PROCSCAN_VERSION_READ).
 * Listeners come from root/net/tcp and root/net/tcp6: the agent's own
 * network namespace, the only one whose loopback it can reach; a process
 * in another is flagged PROCSCAN_OTHER_NETNS and gets no ports.
 * A process that vanishes mid-scan, or a file that cannot be read, is
 * counted and skipped, never an error. 0, or -ENOMEM, or a negative errno
 * when root itself cannot be read, with why[0..cap) saying what. On 0 the
 * caller frees out with procscan_result_free.
 */
int procscan_run(const char *root, const struct procscan_filter *f, struct procscan_result *out,
                 char *why, size_t cap);
void procscan_result_free(struct procscan_result *r);

/* The start time of process pid under root (its stat's starttime), to
 * check that a pid still names the process a scan saw. 0, or a negative
 * errno (-ENOENT: gone), or -EINVAL for a stat that
 * does not parse. */
int procscan_start_ticks(const char *root, uint32_t pid, uint64_t *out);

/* One listening socket of net/tcp or net/tcp6. */
struct procscan_listener {
    uint64_t inode;
    uint16_t port;
    uint8_t loopback; /* 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104 */
};
/*
 * procscan_parse_tcp - the LISTEN entries of a net/tcp (v6 0) or net/tcp6
 * (v6 1) text of len bytes, appended to l[*n..max); *n advanced. Lines
 * that do not parse are skipped and counted in *bad. Returns the entries
 * past max (not kept).
 */
size_t procscan_parse_tcp(const char *text, size_t len, int v6, struct procscan_listener *l,
                          size_t *n, size_t max, size_t *bad);

/*
 * procscan_options - read Node's options from a cmdline (NUL-separated
 * argv, len bytes; the options are those before the script) and, when
 * node_options is not NULL, from NODE_OPTIONS (nlen bytes, split on
 * spaces with double quotes; the command line wins). Returns the
 * PROCSCAN_OPTIN, _OPTIN_REFUSED, _INSPECT and _NO_SIGUSR1 flags; the
 * --inspect-port value goes to optin[0..cap) (cut, NUL-terminated).
 */
unsigned procscan_options(const char *cmdline, size_t len, const char *node_options, size_t nlen,
                          char *optin, size_t cap);

/* Node's V8 heap flags (procscan_heap_flags), each in MiB (0: not given)
 * with where it was given. */
enum { PROCSCAN_HEAP_NONE, PROCSCAN_HEAP_CMDLINE, PROCSCAN_HEAP_ENV };
struct procscan_heap {
    uint64_t old_mb, semi_mb, heap_mb; /* --max-old-space-size, --max-semi-space-size,
                                          --max-heap-size */
    uint8_t old_src, semi_src, heap_src; /* PROCSCAN_HEAP_* */
};
/*
 * procscan_heap_flags - the heap flags of a Node command line (as
 * procscan_options reads it: the options before the script, '_' as '-')
 * and NODE_OPTIONS (node_options NULL: none), the command line's winning.
 * A flag's value must be attached ("--max-old-space-size=512") and a whole
 * number of MiB, as V8 reads it; others are ignored. cmdline NULL: none.
 */
void procscan_heap_flags(const char *cmdline, size_t len, const char *node_options, size_t nlen,
                         struct procscan_heap *out);

/* NODE_OPTIONS' value in an environ text (NUL-separated, len bytes), or
 * NULL; *vlen its length. */
const char *procscan_node_options(const char *env, size_t len, size_t *vlen);
/* The value of variable name in an environ text, as procscan_node_options. */
const char *procscan_env(const char *env, size_t len, const char *name, size_t *vlen);

/* The script of a Node command line (as procscan_options reads it: the
 * first word after the options, or the word after "--"), not
 * NUL-terminated, *slen its length; NULL when there is none ("-", -e). */
const char *procscan_script(const char *cmdline, size_t len, size_t *slen);

/*
 * procscan_container - the container id of a /proc/PID/cgroup text (len
 * bytes): the last run of exactly 64 hex digits in a cgroup path, copied
 * to out (PROCSCAN_CONTAINER_LEN + 1 bytes). 1 when found, else 0 and out
 * is "".
 */
int procscan_container(const char *cgroup, size_t len, char *out);

/* Nonzero when base is a Node binary's name: node, nodejs, or node
 * followed by a version ("node20", "node-20.1", "node_18"). */
int procscan_is_node(const char *base);

/* The flags of a status text: PROCSCAN_SIGUSR1 from SigCgt/SigIgn, the
 * real uid to *uid (unchanged when absent). */
unsigned procscan_status(const char *status, size_t len, uint32_t *uid);

#endif

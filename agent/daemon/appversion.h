/*
 * appversion.h - a process's version read from the process itself, for a
 * target whose config names none (discovery.processes.version_from).
 *
 * Two sources, tried in the order the config lists them:
 *   - "env:NAME": the value of NAME in the process's environment
 *     (/proc/PID/environ, read by the scan anyway for NODE_OPTIONS);
 *   - "package.json": the "version" of the nearest package.json above the
 *     process's script (the command line's, resolved against its working
 *     directory), read inside the process's root (/proc/PID/root) so that
 *     a container's file is read, not the host's.
 * A found version is raw text: the daemon cleans it as it does every
 * label (target.c) before it names anything.
 *
 * Nothing here touches the daemon's state; every function is a pure
 * function of its input or of the directory laid out as /proc it is
 * given (the unit test's fake one). Any thread: the scan runs them on the
 * thread pool.
 */
#ifndef ISOPROF_AGENT_APPVERSION_H
#define ISOPROF_AGENT_APPVERSION_H

#include <stddef.h>
#include <stdint.h>

/* A version longer than a store label is not one. */
#define APPVER_VERSION_MAX 255
/* Bytes read of a package.json: a larger one is refused, not cut. */
#define APPVER_MAX_FILE (64u << 10)
/* Directories looked in for a package.json: the script's and those above
 * it, this many in all (never above the process's root). */
#define APPVER_LEVELS 5
/* Nesting a package.json may have. */
#define APPVER_MAX_DEPTH 64

/* What a search found. Plain data: copy it freely. */
struct appver {
    char version[APPVER_VERSION_MAX + 1]; /* "" none; NUL-free, not cleaned */
    char source[136];                     /* "env:NAME" or "package.json"; "" none */
    char file[256];                       /* the package.json read, as the process names it */
    char why[400]; /* a source that failed in a way worth saying (a package.json that is
                      malformed, too large, unreadable, without a version); "" none */
};

/*
 * appver_package_json_parse - the top-level "version" of a package.json
 * text (len bytes, borrowed) to out[0..cap) (NUL-terminated). 1 when
 * found; 0 when the text has no usable version, with why[0..wcap) saying
 * why (malformed JSON, a version that is not a string, empty, longer than
 * APPVER_VERSION_MAX, or none); duplicate keys: the last one wins, as in
 * JSON.parse.
 */
int appver_package_json_parse(const char *text, size_t len, char *out, size_t cap, char *why,
                              size_t wcap);

/*
 * appver_find - tries src[0..nsrc) in order for process pid under root (a
 * directory laid out as /proc). package.json is tried only when node is
 * set (the executable is a Node binary's, whose command line names its
 * script: workerd's and Deno's name a subcommand there). cmdline (clen bytes, NUL-separated argv)
 * names the script; env (elen bytes; NULL when unreadable) the
 * environment. scratch is APPVER_MAX_FILE + 1 bytes of the caller's. The
 * first source that gives a version fills out->version and out->source;
 * a package.json that failed fills out->why even when a later source
 * gives the version. Returns 1 when a version was found, else 0.
 *
 * package.json paths are resolved with openat2(RESOLVE_IN_ROOT) under
 * root/PID/root: a symbolic link or ".." resolves inside the process's
 * root and never reaches a file outside it. A directory named
 * node_modules and all below it are skipped (a script run from a
 * dependency's tree is the app's, not the dependency's). Opened with
 * O_NONBLOCK, only a regular file is read.
 */
int appver_find(const char *root, uint32_t pid, int node, const char *cmdline, size_t clen,
                const char *env, size_t elen, const char *const *src, size_t nsrc, char *scratch,
                struct appver *out);

#endif

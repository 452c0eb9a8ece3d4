/*
 * resolve_internal.h - what the files of the source map resolver share:
 * the cache's tables (cache.c), a session (resolve.c), finding and
 * loading a script's map (find.c), and the path and file helpers every
 * one of them uses (resolve.c). Not part of resolve.h's API. A session
 * runs on one thread at a time; the cache's tables are read and written
 * only under its mutex.
 */
#ifndef ISOPROF_RESOLVE_INTERNAL_H
#define ISOPROF_RESOLVE_INTERNAL_H

#include "resolve.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define READ_CHUNK 65536
#define MAX_PATH 4096
#define SCRIPT_BUCKETS 1024

/* A file's identity: a change of any field means "read it again". */
struct fid {
    uint64_t dev, ino, size;
    int64_t mtime_ns;
};

struct cmap {
    struct cmap *prev, *next; /* LRU: head is the most recent */
    char *key;                /* root \0 path, or root \0 script "#inline" */
    size_t keylen;
    struct fid id;
    struct srcmap *m;
    size_t bytes;
    unsigned refs;
};

enum script_state { S_NONE, S_MAP, S_REFUSED };

struct cscript {
    struct cscript *hnext;       /* hash chain */
    struct cscript *prev, *next; /* LRU */
    char *key;                   /* root \0 url */
    size_t keylen;
    uint32_t hash;
    struct fid sid; /* the script file's, zero when it is not a file */
    enum script_state state;
    struct cmap *map; /* S_MAP: a reference */
    char *map_key;    /* S_MAP, S_REFUSED: the map's key (root \0 path) */
    struct fid mid;   /* the map file's identity when resolved */
    bool has_mid;     /* mid is a file's (else the map was refused unopened) */
    int reason;       /* S_REFUSED */
};

/* One target's CPU allowance: a token bucket of thread CPU ns. */
struct owner {
    struct owner *prev, *next; /* LRU */
    char *key;
    int64_t tokens_ns; /* may go below zero: the last frame served overshot */
    uint64_t last_ns;  /* CLOCK_MONOTONIC of the last refill */
    unsigned refs;     /* sessions using it: never evicted while > 0 */
    bool dry;          /* ran out, not full again yet: said once until it refills */
};

struct srcmap_cache {
    pthread_mutex_t mu;
    size_t budget, max_file;
    struct cmap *mhead, *mtail;
    size_t nmaps, bytes;
    struct cscript *buckets[SCRIPT_BUCKETS];
    struct cscript *shead, *stail;
    size_t nscripts;
    struct owner *ohead, *otail;
    size_t nowners;
    uint32_t share_ppm;
    uint64_t burst_ns;
    struct srcmap_stats st;
};

/* A script URL a session has seen, and what it maps with. */
struct memo {
    char *url;
    size_t len;
    uint32_t hash;
    struct cmap *map; /* a reference, or NULL: nothing to map with */
    bool file;        /* the script could have had a map (counts as unmapped) */
    bool resolved;    /* resolve() ran (not while the allowance was spent) */
};

struct srcmap_session {
    struct srcmap_cache *c;
    const struct srcmap_where *w;
    int rootfd;
    char root[MAX_PATH]; /* "" for "/" */
    struct memo *memo;
    size_t nmemo, memocap;
    struct srcmap_event *ev;
    size_t nev, evcap;
    uint64_t mapped, unmapped, over;
    int deno_state; /* 0: DENO_DIR not looked for yet; 1 found; -1 none */
    char deno_dir[MAX_PATH];
    char *scratch; /* 2 * READ_CHUNK bytes: what is read, what it decodes to */
    /* Where scripts may be read (normalized, inside root): the trees of
     * srcmap_where, the process's working directory, the main script's
     * directory, the source_maps dirs (the last ndirs). Found at the first
     * file frame. */
    int trees_state; /* 0: not yet; 1: found; -1: an allocation failed (no refusal then) */
    char **trees;
    size_t ntrees, ndirs;
    struct owner *owner; /* a reference; NULL: nothing charged */
};

/* What a script resolved to, before it is published. */
struct found {
    enum script_state state;
    int reason;
    char map_path[MAX_PATH]; /* inside root */
    struct fid mid;
    bool has_mid;     /* mid was read off the map file (or the script, inline) */
    struct srcmap *m; /* a fresh parse, or NULL when the cache had it */
    bool inline_map;
    char why[320];
};

/* --- small helpers (resolve.c) --- */

uint64_t rs_mono_ns(void);
uint64_t rs_thread_cpu_ns(void);
uint32_t rs_fnv(const char *s, size_t n);
void rs_fid_of(const struct stat *st, struct fid *f);
bool rs_fid_eq(const struct fid *a, const struct fid *b);
/* a \0 b suffix, allocated; *len its length; NULL on ENOMEM. */
char *rs_key2(const char *a, const char *b, const char *suffix, size_t *len);
int rs_path_norm(const char *in, char *out);
bool rs_path_under(const char *path, const char *dir);
void rs_dir_of(const char *path, char *out);
const char *rs_base_of(const char *path);
int rs_pct_decode(const char *s, size_t n, char *out);
long rs_sys_openat2(int dirfd, const char *path, int flags, uint64_t resolve);
int rs_path_fd(int rootfd, const char *path, const char *tree, bool *enoent);
int rs_stat_file(int pfd, struct stat *st);
int rs_open_read(int pfd);
/* What a file that is not regular is, for a refusal's why. */
const char *rs_file_kind(const struct stat *st);
/* An event of the session's (a refusal, a map that failed), copied. */
void rs_add_event(struct srcmap_session *s, int reason, const char *path, const char *script,
                  const char *why);

/* --- the cache (cache.c); rs_map_put, rs_evict and rs_map_find with c->mu
 * held --- */

void rs_map_put(struct srcmap_cache *c, struct cmap *e);
void rs_evict(struct srcmap_cache *c, size_t need);
struct cmap *rs_map_find(struct srcmap_cache *c, const char *key, size_t keylen);
/* What f found for the script (key, its identity sid) put in the cache;
 * returns the map to use (a reference) or NULL. Takes the lock. */
struct cmap *rs_publish(struct srcmap_session *s, const char *key, size_t keylen, uint32_t h,
                        const struct fid *sid, struct found *f, const char *script);
/* The cached answer for a script, if it still holds: the script file and
 * its map file unchanged. Returns true with *map (a reference, or NULL for
 * "none" and refusals) when it holds. Takes the lock. */
bool rs_cached(struct srcmap_session *s, const char *key, size_t keylen, uint32_t h,
               const struct fid *sid, struct cmap **map);

/* --- finding the map of a script (find.c) --- */

void rs_trees_init(struct srcmap_session *s);
const char *rs_pick_tree(const struct srcmap_session *s, const char *path);
/* path beneath the root, accepted when it lies in tree or in one of the
 * session's trees from the first-th on: the fd (O_PATH) or -reason. */
int rs_path_fd_allowed(struct srcmap_session *s, const char *path, const char *tree, size_t first,
                       bool *enoent);
bool rs_try_dirs(struct srcmap_session *s, const char *base, struct found *f);
void rs_find_for_file(struct srcmap_session *s, int sfd, const struct stat *sst, const char *path,
                      struct found *f);

#endif

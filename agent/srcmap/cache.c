/*
 * cache.c - the source map cache: the maps (parsed, reference counted, in
 * LRU order, charged by srcmap_bytes) and the scripts (what each resolved
 * to) under one mutex; a session's result published into it, and a
 * script's cached answer checked against its files. See resolve.c for the
 * design.
 */
#include "resolve_internal.h"

#include "base.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- the cache --- */

int srcmap_cache_new(size_t budget, size_t max_file, struct srcmap_cache **out)
{
    struct srcmap_cache *c = isoprof_calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        isoprof_free(c);
        return -ENOMEM;
    }
    c->budget = budget ? budget : SRCMAP_DEFAULT_BUDGET;
    c->max_file = max_file ? max_file : SRCMAP_DEFAULT_MAX_FILE;
    c->share_ppm = SRCMAP_DEFAULT_CPU_PPM;
    c->burst_ns = SRCMAP_ALLOWANCE_SPAN_NS / 1000000u * c->share_ppm;
    *out = c;
    return 0;
}

static void map_unlink(struct srcmap_cache *c, struct cmap *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->mhead = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->mtail = e->prev;
    e->prev = e->next = NULL;
}

static void map_front(struct srcmap_cache *c, struct cmap *e)
{
    e->next = c->mhead;
    e->prev = NULL;
    if (c->mhead)
        c->mhead->prev = e;
    else
        c->mtail = e;
    c->mhead = e;
}

static void map_destroy(struct cmap *e)
{
    srcmap_free(e->m);
    isoprof_free(e->key);
    isoprof_free(e);
}

/* Under the lock: drops a reference; a map no longer listed goes. */
void rs_map_put(struct srcmap_cache *c, struct cmap *e)
{
    (void)c;
    ISOPROF_ASSERT(e->refs > 0);
    if (--e->refs == 0 && e->key == NULL)
        map_destroy(e);
}

/* Under the lock: evicts unused maps, oldest first, until the cache holds
 * at most budget - need bytes (or nothing unused is left). Maps are
 * referenced by the scripts that resolved to them too: a script's
 * reference is dropped with the map. */
static void script_drop_map(struct srcmap_cache *c, struct cmap *e);
void rs_evict(struct srcmap_cache *c, size_t need)
{
    struct cmap *e = c->mtail;
    while (e && c->bytes + need > c->budget) {
        struct cmap *prev = e->prev;
        script_drop_map(c, e); /* the scripts' references */
        if (e->refs == 0) {
            map_unlink(c, e);
            c->nmaps--;
            c->bytes -= e->bytes;
            c->st.evictions++;
            map_destroy(e);
        }
        e = prev;
    }
}

static void script_unlink_lru(struct srcmap_cache *c, struct cscript *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        c->shead = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        c->stail = s->prev;
    s->prev = s->next = NULL;
}

static void script_front(struct srcmap_cache *c, struct cscript *s)
{
    s->next = c->shead;
    s->prev = NULL;
    if (c->shead)
        c->shead->prev = s;
    else
        c->stail = s;
    c->shead = s;
}

static void script_clear(struct srcmap_cache *c, struct cscript *s)
{
    if (s->map)
        rs_map_put(c, s->map);
    s->map = NULL;
    isoprof_free(s->map_key);
    s->map_key = NULL;
}

static void script_remove(struct srcmap_cache *c, struct cscript *s)
{
    struct cscript **pp = &c->buckets[s->hash % SCRIPT_BUCKETS];
    while (*pp != s)
        pp = &(*pp)->hnext;
    *pp = s->hnext;
    script_unlink_lru(c, s);
    script_clear(c, s);
    isoprof_free(s->key);
    isoprof_free(s);
    c->nscripts--;
}

static void script_drop_map(struct srcmap_cache *c, struct cmap *e)
{
    /* Scripts resolved to e forget it (they find it again by key, or load
     * it again, at their next use). A script holds at most one reference. */
    for (struct cscript *s = c->shead; s && e->refs > 0; s = s->next) {
        if (s->map == e) {
            e->refs--;
            s->map = NULL;
        }
    }
}

static struct cscript *script_find(struct srcmap_cache *c, const char *key, size_t keylen,
                                   uint32_t h)
{
    for (struct cscript *s = c->buckets[h % SCRIPT_BUCKETS]; s; s = s->hnext)
        if (s->hash == h && s->keylen == keylen && memcmp(s->key, key, keylen) == 0)
            return s;
    return NULL;
}

struct cmap *rs_map_find(struct srcmap_cache *c, const char *key, size_t keylen)
{
    for (struct cmap *e = c->mhead; e; e = e->next)
        if (e->keylen == keylen && memcmp(e->key, key, keylen) == 0)
            return e;
    return NULL;
}

void srcmap_cache_limits(struct srcmap_cache *c, size_t budget, size_t max_file)
{
    pthread_mutex_lock(&c->mu);
    budget = budget ? budget : SRCMAP_DEFAULT_BUDGET;
    max_file = max_file ? max_file : SRCMAP_DEFAULT_MAX_FILE;
    bool raised = budget > c->budget || max_file > c->max_file;
    c->budget = budget;
    c->max_file = max_file;
    rs_evict(c, 0);
    /* Maps refused for their size are looked at again under the new
     * limits (counted and said again if still too big); scripts that had
     * no map (or were refused unopened: the tree may be another now) are
     * looked at again too, so a reload finds a map added beside a script
     * that did not change. */
    for (struct cscript *s = c->shead; s; s = s->next)
        if ((raised && s->state == S_REFUSED &&
             (s->reason == SRCMAP_E_TOOBIG || s->reason == SRCMAP_E_FILE_TOOBIG)) ||
            s->state == S_NONE || (s->state == S_REFUSED && !s->has_mid))
            memset(&s->sid, 0xff, sizeof(s->sid));
    pthread_mutex_unlock(&c->mu);
}

void srcmap_cache_stats(struct srcmap_cache *c, struct srcmap_stats *st)
{
    pthread_mutex_lock(&c->mu);
    *st = c->st;
    st->maps = c->nmaps;
    st->bytes = c->bytes;
    st->budget = c->budget;
    pthread_mutex_unlock(&c->mu);
}

void srcmap_cache_free(struct srcmap_cache *c)
{
    if (c == NULL)
        return;
    while (c->shead)
        script_remove(c, c->shead);
    for (struct cmap *e = c->mhead, *n; e; e = n) {
        n = e->next;
        ISOPROF_ASSERT(e->refs == 0);
        map_destroy(e);
    }
    for (struct owner *o = c->ohead, *n; o; o = n) {
        n = o->next;
        ISOPROF_ASSERT(o->refs == 0);
        isoprof_free(o->key);
        isoprof_free(o);
    }
    pthread_mutex_destroy(&c->mu);
    isoprof_free(c);
}

struct cmap *rs_publish(struct srcmap_session *s, const char *key, size_t keylen, uint32_t h,
                        const struct fid *sid, struct found *f, const char *script)
{
    struct srcmap_cache *c = s->c;
    struct cmap *ret = NULL;
    bool first_refusal = false;
    pthread_mutex_lock(&c->mu);
    struct cscript *sc = script_find(c, key, keylen, h);
    if (sc == NULL) {
        while (c->nscripts >= SRCMAP_MAX_SCRIPTS && c->stail)
            script_remove(c, c->stail);
        sc = isoprof_calloc(1, sizeof(*sc));
        if (sc && (sc->key = isoprof_malloc(keylen + 1)) == NULL) {
            isoprof_free(sc);
            sc = NULL;
        }
        if (sc) {
            memcpy(sc->key, key, keylen);
            sc->key[keylen] = '\0';
            sc->keylen = keylen;
            sc->hash = h;
            sc->hnext = c->buckets[h % SCRIPT_BUCKETS];
            c->buckets[h % SCRIPT_BUCKETS] = sc;
            script_front(c, sc);
            c->nscripts++;
        }
    } else {
        script_unlink_lru(c, sc);
        script_front(c, sc);
    }
    if (f->state == S_REFUSED) {
        /* counted and reported once per script, map file and reason */
        first_refusal = sc == NULL || sc->state != S_REFUSED || sc->reason != f->reason ||
                        !rs_fid_eq(&sc->mid, &f->mid) || !rs_fid_eq(&sc->sid, sid);
        if (first_refusal)
            c->st.refused[f->reason < SRCMAP_NREASONS ? f->reason : 0]++;
    }
    if (f->state == S_MAP) {
        size_t kl;
        char *mkey = rs_key2(s->root, f->map_path, f->inline_map ? "#inline" : NULL, &kl);
        struct cmap *e = mkey ? rs_map_find(c, mkey, kl) : NULL;
        if (f->m) {
            if (e && rs_fid_eq(&e->id, &f->mid)) {
                srcmap_free(f->m); /* another session was first */
                f->m = NULL;
            } else if (mkey) {
                if (e) {
                    /* the old version of the file: out of the table, freed
                     * when its last user lets go */
                    script_drop_map(c, e);
                    map_unlink(c, e);
                    c->nmaps--;
                    c->bytes -= e->bytes;
                    isoprof_free(e->key);
                    e->key = NULL;
                    if (e->refs == 0)
                        map_destroy(e);
                }
                size_t bytes = srcmap_bytes(f->m);
                e = NULL;
                if (bytes > c->budget) {
                    f->state = S_REFUSED;
                    f->reason = SRCMAP_E_TOOBIG;
                    first_refusal = true;
                    c->st.refused[SRCMAP_E_TOOBIG]++;
                    snprintf(f->why, sizeof(f->why), "%zu bytes parsed, past source_maps_cache",
                             bytes);
                    srcmap_free(f->m);
                    f->m = NULL;
                } else if ((e = isoprof_calloc(1, sizeof(*e))) != NULL) {
                    rs_evict(c, bytes);
                    e->key = mkey;
                    e->keylen = kl;
                    mkey = NULL;
                    e->id = f->mid;
                    e->m = f->m;
                    f->m = NULL;
                    e->bytes = bytes;
                    map_front(c, e);
                    c->nmaps++;
                    c->bytes += bytes;
                    c->st.loads++;
                } else {
                    srcmap_free(f->m);
                    f->m = NULL;
                }
            }
        } else if (e && rs_fid_eq(&e->id, &f->mid)) {
            c->st.hits++;
            map_unlink(c, e);
            map_front(c, e);
        } else {
            e = NULL; /* evicted meanwhile: the next window loads it */
        }
        isoprof_free(mkey);
        if (e) {
            e->refs++; /* the session's */
            ret = e;
        }
    }
    if (sc) {
        script_clear(c, sc);
        sc->sid = *sid;
        sc->state = f->state;
        sc->reason = f->reason;
        sc->mid = f->mid;
        sc->has_mid = f->has_mid;
        if (ret) {
            ret->refs++;
            sc->map = ret;
        }
        size_t kl;
        sc->map_key = f->state != S_NONE
                          ? rs_key2(s->root, f->map_path, f->inline_map ? "#inline" : NULL, &kl)
                          : NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (first_refusal)
        rs_add_event(s, f->reason, f->map_path, script, f->why);
    return ret;
}

/*
 * The cached answer for a script, if it still holds: the script file and
 * its map file unchanged. Returns true with *map (a reference, or NULL for
 * "none" and refusals) when it holds.
 */
bool rs_cached(struct srcmap_session *s, const char *key, size_t keylen, uint32_t h,
               const struct fid *sid, struct cmap **map)
{
    struct srcmap_cache *c = s->c;
    *map = NULL;
    pthread_mutex_lock(&c->mu);
    struct cscript *sc = script_find(c, key, keylen, h);
    if (sc == NULL || !rs_fid_eq(&sc->sid, sid)) {
        pthread_mutex_unlock(&c->mu);
        return false;
    }
    enum script_state state = sc->state;
    /* An allocation failed: the agent's trouble, not the map's. Looked
     * for again by the next conversion (publish counts it only once). */
    if (state == S_REFUSED && sc->reason == SRCMAP_E_NOMEM) {
        pthread_mutex_unlock(&c->mu);
        return false;
    }
    /* Nothing found, or a refusal decided without a map file (the
     * script lies outside the tree, its comment's path leads out, a data:
     * URL that does not decode): the answer holds until the script
     * changes (or a reload). */
    if (state == S_NONE || (state == S_REFUSED && !sc->has_mid)) {
        pthread_mutex_unlock(&c->mu);
        return true;
    }
    char *mkey = sc->map_key ? isoprof_strdup(sc->map_key) : NULL;
    /* map_key is root \0 path[#inline]: the path is after the NUL */
    char path[MAX_PATH];
    snprintf(path, sizeof(path), "%s", sc->map_key ? sc->map_key + strlen(sc->map_key) + 1 : "");
    struct fid mid = sc->mid;
    size_t pl = strlen(path);
    bool is_inline = pl > 7 && strcmp(path + pl - 7, "#inline") == 0;
    pthread_mutex_unlock(&c->mu);
    isoprof_free(mkey);
    /* an inline map changes with its script, which is unchanged */
    if (!is_inline) {
        bool enoent;
        int fd = rs_path_fd(s->rootfd, path, NULL, &enoent);
        if (fd < 0)
            return false;
        struct stat st;
        struct fid now;
        int rc = fstat(fd, &st);
        close(fd);
        if (rc != 0)
            return false;
        rs_fid_of(&st, &now);
        if (!rs_fid_eq(&now, &mid))
            return false;
    }
    pthread_mutex_lock(&c->mu);
    sc = script_find(c, key, keylen, h);
    bool ok = sc != NULL && rs_fid_eq(&sc->sid, sid) && rs_fid_eq(&sc->mid, &mid);
    if (ok && sc->state == S_MAP) {
        if (sc->map == NULL) {
            ok = false; /* evicted: load it again */
        } else {
            sc->map->refs++;
            *map = sc->map;
            c->st.hits++;
            map_unlink(c, sc->map);
            map_front(c, sc->map);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return ok;
}

/* The value of NAME= in an environ text (NUL-separated), or NULL. */

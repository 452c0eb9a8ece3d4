/*
 * store.c - opening and closing the store, the meta DB, LMDB error
 * translation and store_stat.
 *
 * store_open creates the directory, checks data.mdb's meta pages against
 * the file before LMDB maps it (verify.c), opens the LMDB environment
 * (MDB_NOTLS, so read transactions are not tied to threads and the daemon's
 * thread pool can use them), then validates or creates the schema in one
 * transaction: an empty environment gets the DBs and a meta DB with the
 * magic, the schema version, a random instance id and zeroed counters; an
 * environment with a meta DB must carry our magic and schema version (a
 * writer brings an older one up to date in that transaction); anything
 * else is not ours and is refused rather than written to. The environment
 * keeps LMDB's default durability (data and meta synced at every commit).
 *
 * The map is sized at 3 x budget + 16 MiB. The budget bounds the live data
 * (key and value bytes); the rest absorbs B-tree overhead, overflow-page
 * rounding (a value just over one page takes two) and the pages freed by
 * recent transactions that readers may still see.
 */
#include "internal.h"

#include "base.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

int store_err(int rc)
{
    if (rc == 0)
        return 0;
    if (rc > 0)
        return -rc;
    if (rc > MDB_LAST_ERRCODE || rc < MDB_KEYEXIST)
        return rc < ISOPROF__ERR_BASE ? -EIO : rc; /* already -errno or ISOPROF_E* */
    switch (rc) {
    case MDB_MAP_FULL:
        return ISOPROF_EMAPFULL;
    case MDB_CORRUPTED:
    case MDB_INVALID:
    case MDB_PAGE_NOTFOUND:
    case MDB_BAD_DBI:
        return ISOPROF_ECORRUPT;
    case MDB_VERSION_MISMATCH:
    case MDB_INCOMPATIBLE:
        return ISOPROF_ESCHEMA;
    case MDB_NOTFOUND:
        return ISOPROF_ENOTFOUND;
    case MDB_KEYEXIST:
        return -EEXIST;
    case MDB_READERS_FULL:
    case MDB_MAP_RESIZED:
        return -EAGAIN;
    case MDB_TXN_FULL:
    case MDB_CURSOR_FULL:
    case MDB_PAGE_FULL:
        return -E2BIG;
    case MDB_BAD_VALSIZE:
        return -EINVAL;
    default: /* MDB_PANIC, MDB_DBS_FULL, MDB_TLS_FULL, MDB_BAD_RSLOT, MDB_BAD_TXN
              */
        return -EIO;
    }
}

int store_walk_end(MDB_txn *txn, int rc)
{
    mdb_txn_abort(txn);
    if (rc == MDB_NOTFOUND)
        return 0;
    return rc >= MDB_KEYEXIST && rc <= MDB_LAST_ERRCODE ? store_err(rc) : rc;
}

int store_map_find(int fd, uint64_t size, const uint8_t **lo, const uint8_t **hi)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return -1;
    char line[4352];
    int rc = -1;
    while (rc != 0 && fgets(line, sizeof(line), f) != NULL) {
        unsigned long long start, end, off, ino;
        unsigned maj, mnr;
        if (sscanf(line, "%llx-%llx %*s %llx %x:%x %llu", &start, &end, &off, &maj, &mnr, &ino) !=
                6 ||
            off != 0 || ino != (unsigned long long)st.st_ino || makedev(maj, mnr) != st.st_dev)
            continue;
        *lo = (const uint8_t *)(uintptr_t)start;
        *hi = *lo + (end - start < size ? end - start : size);
        rc = 0;
    }
    fclose(f);
    return rc;
}

/* A read-only handle's map: found again after LMDB moves it (a resize). */
static void map_locate(struct store *s)
{
    mdb_filehandle_t fd;
    s->map_lo = s->map_hi = NULL;
    if (s->readonly && mdb_env_get_fd(s->env, &fd) == 0)
        (void)store_map_find(fd, UINT64_MAX, &s->map_lo, &s->map_hi);
}

void store_bounds_get(const struct store *s, struct store_bounds *b)
{
    mdb_filehandle_t fd;
    struct stat st;
    b->lo = b->hi = NULL;
    if (s->map_lo == NULL || mdb_env_get_fd(s->env, &fd) != 0 || fstat(fd, &st) != 0)
        return;
    size_t len = (size_t)(s->map_hi - s->map_lo);
    b->lo = s->map_lo;
    b->hi = s->map_lo + ((uint64_t)st.st_size < len ? (size_t)st.st_size : len);
}

int store_txn_read(struct store *s, MDB_txn **txn)
{
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, txn);
    if (rc == MDB_MAP_RESIZED && s->readonly) {
        /* The writer reopened with a larger map; adopt it. Only read-only
         * handles get here (the CLI, single-threaded). */
        rc = mdb_env_set_mapsize(s->env, 0);
        if (rc == 0) {
            map_locate(s);
            rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, txn);
        }
    }
    return store_err(rc);
}

int store_meta_get_u64(struct store *s, MDB_txn *txn, const char *name, uint64_t *v)
{
    MDB_val k = {strlen(name), (void *)name}, d;
    int rc = mdb_get(txn, s->meta, &k, &d);
    if (rc == MDB_NOTFOUND)
        return ISOPROF_ECORRUPT; /* every meta key is written at creation */
    if (rc != 0)
        return store_err(rc);
    if (d.mv_size != 8)
        return ISOPROF_ECORRUPT;
    *v = store_be64_get(d.mv_data);
    return 0;
}

int store_meta_put_u64(struct store *s, MDB_txn *txn, const char *name, uint64_t v)
{
    uint8_t b[8];
    store_be64_put(b, v);
    MDB_val k = {strlen(name), (void *)name}, d = {8, b};
    return store_err(mdb_put(txn, s->meta, &k, &d, 0));
}

uint64_t store_stored_size(size_t klen, size_t vlen, uint32_t flags)
{
    /* windows key + value, by_time key (8 + key), ids key (8) + value (key),
     * and the outbox entry of a queued window, pending or not. */
    uint64_t n = (uint64_t)klen + vlen + 8 + klen + 8 + klen;
    return (flags & STORE_FLAG_QUEUED) ? n + STORE_OUTBOX_CHARGE : n;
}

uint64_t store_window_size(size_t klen, size_t vlen, const struct store_rec_hdr *h)
{
    uint64_t n = store_stored_size(klen, vlen, h->flags);
    if (h->codec == STORE_CODEC_BLOB)
        n += h->blob_bytes + (uint64_t)h->chunks * STORE_BLOB_KEY_LEN;
    return n;
}

static void set_why(char **why, const char *path, int rc, const char *detail)
{
    if (why == NULL)
        return;
    isoprof_free(*why);
    if (detail)
        *why = isoprof_asprintf("%s: %s", path, detail);
    else
        *why = isoprof_asprintf("%s: %s", path, isoprof_strerror(rc));
}

/* mkdir -p, mode 0750. */
static int make_dirs(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0750) != 0 && errno != EEXIST)
            return -errno;
        buf[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return -ENOTDIR;
    return 0;
}

static uint64_t random_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) == (ssize_t)sizeof(v) && v != 0)
        return v;
    /* No entropy source: mix the clocks and the pid. Uniqueness, not
     * secrecy, is what the instance id is for. */
    v = isoprof_now_wall_ns() ^ (isoprof_now_mono_ns() << 21) ^ ((uint64_t)getpid() << 40);
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdull;
    v ^= v >> 33;
    return v ? v : 1;
}

/* Open the DBs of the current schema (flags: MDB_CREATE or 0). Raw LMDB code.
 */
static int dbs_open(struct store *s, MDB_txn *txn, unsigned flags)
{
    int rc;
    if ((rc = mdb_dbi_open(txn, "windows", flags, &s->windows)) != 0 ||
        (rc = mdb_dbi_open(txn, "by_time", flags, &s->by_time)) != 0 ||
        (rc = mdb_dbi_open(txn, "ids", flags, &s->ids)) != 0 ||
        (rc = mdb_dbi_open(txn, "anomalies", flags, &s->anomalies)) != 0 ||
        (rc = mdb_dbi_open(txn, "anomaly_ids", flags, &s->anomaly_ids)) != 0 ||
        (rc = mdb_dbi_open(txn, "pins", flags, &s->pins)) != 0 ||
        (rc = mdb_dbi_open(txn, "outbox", flags, &s->outbox)) != 0 ||
        (rc = mdb_dbi_open(txn, "rejected", flags, &s->rejected)) != 0)
        return rc;
    /* A schema 3 store read as it is has no dictionaries yet. */
    if (s->schema == 3 && s->readonly) {
        s->dicts_on = 0;
        return 0;
    }
    if ((rc = mdb_dbi_open(txn, "dicts", flags, &s->dicts)) != 0 ||
        (rc = mdb_dbi_open(txn, "dict_by_series", flags, &s->dict_by_series)) != 0)
        return rc;
    s->dicts_on = 1;
    /* Nor has a schema 3 to 7 store any snapshot. */
    if (s->schema < 8 && s->readonly)
        return 0;
    if ((rc = mdb_dbi_open(txn, "blobs", flags, &s->blobs)) != 0)
        return rc;
    s->blobs_on = 1;
    /* Nor has a schema 3 to 11 store any per-version aggregate. */
    if (s->schema < 12 && s->readonly)
        return 0;
    if ((rc = mdb_dbi_open(txn, "aggs", flags, &s->aggs)) != 0)
        return rc;
    s->aggs_on = 1;
    return 0;
}

/* The counters added after schema 1, written as 0 where absent (creation
 * and upgrade). Raw LMDB code. */
static int counters_init(struct store *s, MDB_txn *txn)
{
    static const struct {
        const char *name;
        uint64_t initial;
    } counters[] = {{"uploaded", 0}, {"outbox_evicted", 0}, {"next_dict", 1}, {"blob_open", 0}};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(counters); i++) {
        uint8_t v[8];
        store_be64_put(v, counters[i].initial);
        MDB_val k = {strlen(counters[i].name), (void *)counters[i].name}, d = {sizeof(v), v};
        int rc = mdb_put(txn, s->meta, &k, &d, MDB_NOOVERWRITE);
        if (rc != 0 && rc != MDB_KEYEXIST)
            return rc;
    }
    return 0;
}

/* Record the magic and this build's schema version. Raw LMDB code. */
static int format_put(struct store *s, MDB_txn *txn)
{
    uint8_t fmt[STORE_META_MAGIC_LEN + 4];
    memcpy(fmt, STORE_META_MAGIC, STORE_META_MAGIC_LEN);
    store_be32_put(fmt + STORE_META_MAGIC_LEN, STORE_SCHEMA_VERSION);
    MDB_val k = {6, "format"}, d = {sizeof(fmt), fmt};
    return mdb_put(txn, s->meta, &k, &d, 0);
}

/* Create the DBs and the meta of a fresh environment. */
static int schema_create(struct store *s, MDB_txn *txn)
{
    int rc;
    if ((rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &s->meta)) != 0 ||
        (rc = dbs_open(s, txn, MDB_CREATE)) != 0 || (rc = format_put(s, txn)) != 0 ||
        (rc = counters_init(s, txn)) != 0)
        return store_err(rc);
    s->instance = random_u64();
    s->schema = STORE_SCHEMA_VERSION;
    if ((rc = store_meta_put_u64(s, txn, "instance", s->instance)) != 0 ||
        (rc = store_meta_put_u64(s, txn, "next_seq", 1)) != 0 ||
        (rc = store_meta_put_u64(s, txn, "evicted", 0)) != 0 ||
        (rc = store_meta_put_u64(s, txn, "stored_bytes", 0)) != 0)
        return rc;
    return 0;
}

/* Check an existing meta DB and open the other DBs. */
static int schema_open(struct store *s, MDB_txn *txn, char **why)
{
    MDB_val k = {6, "format"}, d;
    int rc = mdb_get(txn, s->meta, &k, &d);
    if (rc == MDB_NOTFOUND ||
        (rc == 0 && (d.mv_size != STORE_META_MAGIC_LEN + 4 ||
                     memcmp(d.mv_data, STORE_META_MAGIC, STORE_META_MAGIC_LEN) != 0))) {
        set_why(why, s->path, ISOPROF_EMAGIC, "not an isoprof store (bad magic in meta)");
        return ISOPROF_EMAGIC;
    }
    if (rc != 0)
        return store_err(rc);
    s->schema = store_be32_get((const uint8_t *)d.mv_data + STORE_META_MAGIC_LEN);
    int older = s->schema >= 1 && s->schema < STORE_SCHEMA_VERSION;
    if (older && !s->readonly) {
        /* Schema 2 added the anomaly DBs and a longer record header,
         * schema 3 the outbox DBs and counters, schema 4 the dictionary
         * DBs and their id counter, schema 5 the thread label in records
         * and anomalies (a new version of each, no new DB), schema 6 the
         * pid and container in records, schema 7 the source-map figures
         * and the window labels in records (each a new record version,
         * nothing else). Older records stay readable as they are (they
         * read as never queued, without a dictionary, of thread "main",
         * pid 0, no container, no frames mapped or unmapped, no labels),
         * so the upgrade is the new (empty) DBs, the counters and the
         * version number, in this transaction. Schema 8 added the blobs
         * DB (snapshot chunks) and "blob_open", and window types 3 and 4,
         * which older windows are not. Schema 9 added anomaly kind 4
         * (memory_growth), in windows and anomalies: an older build would
         * take such a record for a damaged one, so it must refuse the
         * store instead; nothing else changed. Schema 10 added the
         * `expired` upload state (a rejected entry of status
         * STORE_REJECT_EXPIRED), which an older build would show as a
         * refusal by the server; nothing else changed. Schema 11 added
         * the memory limit and its source to anomalies (their version 3,
         * which an older build takes for damage); older anomalies read
         * without a limit. Schema 12 added the aggs DB (per-version
         * aggregates), anomaly kind 5 (version_regression) and anomaly
         * version 4 (a regression's findings), all of which an older
         * build would take for damage. dbs_open reads the new version. */
        s->schema = STORE_SCHEMA_VERSION;
        if ((rc = dbs_open(s, txn, MDB_CREATE)) != 0 || (rc = counters_init(s, txn)) != 0 ||
            (rc = format_put(s, txn)) != 0)
            return store_err(rc);
    }
    /* Schemas 3 to 8 differ from 9 only by what they lack (3: no
     * dictionaries; 3 and 4: no record or anomaly with a thread, which this
     * build reads as "main"; 3 to 5: no record with a pid or container,
     * read as 0 and ""; 3 to 6: no record with source-map figures or
     * labels, read as 0 and none; 3 to 7: no snapshot and no blobs DB;
     * 3 to 8: no memory_growth anomaly; 3 to 9: no expired window; 3 to
     * 10: no anomaly with a limit; all: no aggs DB, no version_regression
     * anomaly), so a reader takes them as they are. */
    int as_is = s->readonly && s->schema >= 3 && s->schema <= 11;
    if (s->schema != STORE_SCHEMA_VERSION && !as_is) {
        if (why) {
            isoprof_free(*why);
            if (older)
                *why =
                    isoprof_asprintf("%s: schema version %u, this build reads %u; isoprofd "
                                     "upgrades the store when it next opens it",
                                     s->path, (unsigned)s->schema, (unsigned)STORE_SCHEMA_VERSION);
            else
                *why = isoprof_asprintf("%s: schema version %u, this build reads %u", s->path,
                                        (unsigned)s->schema, (unsigned)STORE_SCHEMA_VERSION);
        }
        return ISOPROF_ESCHEMA;
    }
    if ((rc = dbs_open(s, txn, s->readonly ? 0 : MDB_CREATE)) != 0)
        return rc == MDB_NOTFOUND ? ISOPROF_ECORRUPT : store_err(rc);
    if ((rc = store_meta_get_u64(s, txn, "instance", &s->instance)) != 0)
        return rc;
    if (s->readonly) {
        /* A store created by a writer that crashed before recording a
         * budget still reads fine. */
        if (store_meta_get_u64(s, txn, "budget", &s->budget) != 0)
            s->budget = 0;
    }
    return 0;
}

static int schema_init(struct store *s, char **why)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(s->env, NULL, s->readonly ? MDB_RDONLY : 0, &txn);
    if (rc != 0)
        return store_err(rc);
    rc = mdb_dbi_open(txn, "meta", 0, &s->meta);
    if (rc == MDB_NOTFOUND) {
        /* No meta: a fresh environment (the main DB is empty) becomes a
         * store; one that holds other DBs is someone else's. */
        MDB_stat ms;
        MDB_dbi main_db;
        rc = mdb_dbi_open(txn, NULL, 0, &main_db);
        if (rc == 0)
            rc = mdb_stat(txn, main_db, &ms);
        if (rc == 0 && ms.ms_entries == 0 && !s->readonly) {
            rc = schema_create(s, txn);
        } else if (rc == 0 && ms.ms_entries == 0) {
            set_why(why, s->path, -ENOENT, "store not initialised yet (no meta database)");
            rc = -ENOENT;
        } else if (rc == 0) {
            set_why(why, s->path, ISOPROF_EMAGIC, "not an isoprof store (no meta database)");
            rc = ISOPROF_EMAGIC;
        } else {
            rc = store_err(rc);
        }
    } else if (rc == MDB_INCOMPATIBLE) {
        set_why(why, s->path, ISOPROF_EMAGIC, "not an isoprof store (meta is not a database)");
        rc = ISOPROF_EMAGIC;
    } else if (rc == 0) {
        rc = schema_open(s, txn, why);
    } else {
        rc = store_err(rc);
    }
    if (rc == 0 && !s->readonly)
        rc = store_meta_put_u64(s, txn, "budget", s->budget);
    if (rc == 0 && !s->readonly) {
        /* The chunks of a snapshot that never committed (the writer died
         * while streaming it, or an abort could not delete them) belong
         * to no window: the only writer is this one, and it streams none
         * yet. */
        struct store_counters c;
        if ((rc = store_counters_read(s, txn, &c)) == 0 &&
            (rc = store_blob_orphans_txn(s, txn, &c, 0, &s->orphan_chunks, &s->orphan_bytes)) ==
                0 &&
            s->orphan_chunks > 0)
            rc = store_counters_write(s, txn, &c);
        rc = store_err(rc);
    }
    if (rc != 0) {
        mdb_txn_abort(txn);
        return rc;
    }
    return store_err(mdb_txn_commit(txn));
}

int store_open(const char *path, const struct store_options *opt, struct store **out, char **why)
{
    static const struct store_options defaults;
    int rc;
    if (why)
        *why = NULL;
    if (path == NULL || out == NULL)
        return -EINVAL;
    if (opt == NULL)
        opt = &defaults;
    struct store *s = isoprof_calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->readonly = opt->readonly != 0;
    s->budget = opt->max_size ? opt->max_size : STORE_DEFAULT_BUDGET;
    s->pin_factor = opt->pin_factor ? opt->pin_factor : STORE_PIN_FACTOR_DEFAULT;
    s->outbox_on = !s->readonly && opt->outbox != 0;
    if ((s->path = isoprof_strdup(path)) == NULL) {
        rc = -ENOMEM;
        goto fail_path;
    }
    if (!s->readonly) {
        if ((s->cctx = store_zstd_cctx_new()) == NULL) {
            rc = -ENOMEM;
            goto fail_cctx;
        }
        if ((rc = make_dirs(path)) != 0)
            goto fail_dir;
    }
    /* LMDB maps the file and trusts it: a page past the end of a file cut
     * short would fault on first touch (SIGBUS). Its meta pages say how
     * long it must be; check that before anything maps it. What the caller
     * learnt from store_verify just before spares the free list child (it
     * passed) or lets it fail to finish (it did not finish either). */
    unsigned vflags = opt->verified == STORE_VERIFY_PASSED       ? STORE_FILE_TRUST_SHORT
                      : opt->verified == STORE_VERIFY_UNFINISHED ? STORE_FILE_UNFINISHED_OK
                                                                 : 0;
    if ((rc = store_verify_file(path, vflags, opt->check_ms, why)) != 0)
        goto fail_dir;
    if ((rc = store_err(mdb_env_create(&s->env))) != 0)
        goto fail_dir;
    if ((rc = store_err(mdb_env_set_maxdbs(s->env, STORE_MAXDBS))) != 0)
        goto fail_env;
    if ((size_t)mdb_env_get_maxkeysize(s->env) < STORE_TIME_KEY_MAX) {
        rc = -EINVAL; /* an LMDB built with a smaller key limit than the schema
                         needs */
        goto fail_env;
    }
    if (!s->readonly) {
        uint64_t map = s->budget * 3 + STORE_MAP_EXTRA;
        if (s->budget > UINT64_MAX / 4 || map > (uint64_t)SIZE_MAX) {
            rc = -EINVAL;
            goto fail_env;
        }
        map = (map + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
        if ((rc = store_err(mdb_env_set_mapsize(s->env, (size_t)map))) != 0)
            goto fail_env;
    }
    /* MDB_NOTLS: read txns may move between threads and a thread may hold
     * several. No MDB_NOSYNC/NOMETASYNC/WRITEMAP: a commit is durable. */
    unsigned flags = MDB_NOTLS | (s->readonly ? MDB_RDONLY : 0);
    if ((rc = store_err(mdb_env_open(s->env, path, flags, STORE_FILE_MODE))) != 0)
        goto fail_env;
    if (!s->readonly) {
        /* Free the reader slots of processes that died holding one (a
         * reader that faulted on a damaged store, a killed CLI): they would
         * keep old pages from being reused. */
        int dead = 0;
        mdb_reader_check(s->env, &dead);
    }
    map_locate(s);
    if ((rc = schema_init(s, why)) != 0)
        goto fail_env;
    *out = s;
    return 0;

fail_env:
    mdb_env_close(s->env);
fail_dir:
    ZSTD_freeCCtx(s->cctx);
fail_cctx:
    if (why && *why == NULL)
        set_why(why, path, rc, NULL);
    isoprof_free(s->path);
fail_path:
    isoprof_free(s);
    return rc;
}

void store_close(struct store *s)
{
    if (s == NULL)
        return;
    /* A stream still open is dropped as a crash would drop it: its
     * committed chunks stay until the next writable open. */
    store_blob_forget(s);
    mdb_env_close(s->env);
    store_dict_cache_free(s);
    ZSTD_freeCCtx(s->cctx);
    ZSTD_freeDCtx(atomic_load(&s->blob_dctx));
    isoprof_free(s->path);
    isoprof_free(s);
}

int store_stat(struct store *s, struct store_stat *st)
{
    if (s == NULL || st == NULL)
        return -EINVAL;
    memset(st, 0, sizeof(*st));
    MDB_txn *txn;
    MDB_cursor *c = NULL;
    int rc = store_txn_read(s, &txn);
    if (rc != 0)
        return rc;
    st->schema_version = s->schema;
    st->orphan_chunks = s->orphan_chunks;
    st->orphan_bytes = s->orphan_bytes;
    if ((rc = store_meta_get_u64(s, txn, "stored_bytes", &st->stored_bytes)) != 0 ||
        (rc = store_meta_get_u64(s, txn, "evicted", &st->evicted_total)) != 0)
        goto out;
    st->budget = s->budget;
    if (s->readonly) {
        uint64_t b; /* the writer may have reopened with another budget */
        if (store_meta_get_u64(s, txn, "budget", &b) == 0)
            st->budget = b;
    }
    MDB_envinfo info;
    if ((rc = store_err(mdb_env_info(s->env, &info))) != 0)
        goto out;
    st->map_size = info.me_mapsize;

    MDB_val k, d;
    if ((rc = store_err(mdb_cursor_open(txn, s->windows, &c))) != 0)
        goto out;
    for (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
        struct store_key key;
        struct store_rec_hdr h;
        st->windows++;
        if (store_key_decode(k.mv_data, k.mv_size, &key) == 0) {
            if (key.type == STORE_TYPE_CPU)
                st->windows_cpu++;
            else if (key.type == STORE_TYPE_HEAP)
                st->windows_heap++;
            else if (key.type == STORE_TYPE_RETAINED)
                st->windows_retained++;
            else
                st->windows_snapshot++;
        }
        if (store_record_decode(d.mv_data, d.mv_size, &h) == 0) {
            st->raw_bytes += h.raw_size;
            st->frames_mapped += h.frames_mapped;
            st->frames_unmapped += h.frames_unmapped;
            st->windows_mapped += h.frames_mapped > 0;
        }
    }
    if (rc != MDB_NOTFOUND)
        goto out_err;
    mdb_cursor_close(c);
    if ((rc = store_err(mdb_cursor_open(txn, s->by_time, &c))) != 0)
        goto out;
    if ((rc = mdb_cursor_get(c, &k, &d, MDB_FIRST)) == 0 && k.mv_size >= 8) {
        st->oldest_ns = store_be64_get(k.mv_data);
        if ((rc = mdb_cursor_get(c, &k, &d, MDB_LAST)) == 0 && k.mv_size >= 8)
            st->newest_ns = store_be64_get(k.mv_data);
    }
    if (rc != 0 && rc != MDB_NOTFOUND)
        goto out_err;
    MDB_stat as, ps;
    if ((rc = mdb_stat(txn, s->anomaly_ids, &as)) != 0 || (rc = mdb_stat(txn, s->pins, &ps)) != 0)
        goto out_err;
    st->anomalies = as.ms_entries;
    st->windows_pinned = ps.ms_entries;
    if ((rc = store_dict_stat_txn(s, txn, &st->dicts, &st->dict_bytes)) != 0 ||
        (rc = store_blob_stat_txn(s, txn, st)) != 0 ||
        (rc = store_agg_charge_txn(s, txn, &st->aggs, &st->agg_bytes)) != 0)
        goto out_err;
    if ((rc = store_outbox_stat_txn(s, txn, st)) != 0)
        goto out;
    {
        char file[4200];
        struct stat fs;
        snprintf(file, sizeof(file), "%s/data.mdb", s->path);
        if (stat(file, &fs) == 0)
            st->file_size = (uint64_t)fs.st_size;
    }
    goto out;
out_err:
    rc = store_err(rc);
out:
    if (c)
        mdb_cursor_close(c);
    mdb_txn_abort(txn);
    return rc;
}

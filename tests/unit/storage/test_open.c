/*
 * test_open.c - opening: directory creation, persistence across reopen,
 * read-only handles (missing store, refused writes, seeing what another
 * process commits), and the distinct errors for a foreign environment
 * (bad magic), another schema version and a damaged file.
 */
#include "common.h"

#include <fcntl.h>
#include <sys/stat.h>

TEST(create_and_reopen)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/a/b/store", tmp_dir());
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode));
    uint64_t ids[20];
    for (int i = 0; i < 20; i++)
        REQUIRE(put_one(s, i % 2 ? "a" : "b", "v", T0 + (uint64_t)i * SEC, (uint32_t)i, 1,
                        500 + (size_t)i, &ids[i]) == 0);
    for (int i = 1; i < 20; i++)
        CHECK(ids[i] == ids[i - 1] + 1);
    char uuid[STORE_ID_LEN + 1];
    store_id_format(s, ids[3], uuid);
    struct store_stat st1;
    REQUIRE(store_stat(s, &st1) == 0);
    CHECK(st1.schema_version == STORE_SCHEMA_VERSION && st1.windows == 20);
    CHECK(st1.windows_cpu == 20 && st1.windows_heap == 0);
    CHECK(st1.budget == STORE_DEFAULT_BUDGET);
    CHECK(st1.file_size > 0);
    store_close(s);

    s = open_rw(path, 0);
    REQUIRE(s != NULL);
    struct store_stat st2;
    REQUIRE(store_stat(s, &st2) == 0);
    CHECK(st2.windows == 20 && st2.stored_bytes == st1.stored_bytes &&
          st2.raw_bytes == st1.raw_bytes && st2.oldest_ns == T0 && st2.newest_ns == T0 + 19 * SEC);
    /* Same instance id: the old UUID still names the same window. */
    uint64_t id = 0;
    CHECK_EQ_INT(store_id_parse(s, uuid, &id), 0);
    CHECK(id == ids[3]);
    void *out = NULL;
    size_t len = 0;
    CHECK_EQ_INT(store_load(s, id, &out, &len), 0);
    CHECK(len == 503);
    isoprof_free(out);
    /* Sequence numbers continue, never reused. */
    uint64_t next;
    REQUIRE(put_one(s, "c", "v", T0 + 100 * SEC, 0, 2, 10, &next) == 0);
    CHECK(next == ids[19] + 1);
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);

    /* The path exists as a file: not a directory. */
    char file[600];
    snprintf(file, sizeof(file), "%s/plainfile", tmp_dir());
    int fd = open(file, O_CREAT | O_WRONLY, 0600);
    REQUIRE(fd >= 0);
    close(fd);
    struct store *bad = NULL;
    char *why = NULL;
    CHECK(store_open(file, NULL, &bad, &why) != 0);
    CHECK(bad == NULL);
    CHECK(why != NULL && strstr(why, file) == why);
    isoprof_free(why);
}

TEST(readonly_basics)
{
    const char *path = tmp_store_path();
    struct store_options ro = {.readonly = 1};
    struct store *s = NULL;
    char *why = NULL;
    CHECK_EQ_INT(store_open(path, &ro, &s, &why), -ENOENT);
    CHECK(s == NULL);
    CHECK(why != NULL && strncmp(why, path, strlen(path)) == 0);
    isoprof_free(why);
    struct stat sb;
    CHECK(stat(path, &sb) != 0); /* not created */

    struct store *w = open_rw(path, 4 << 20);
    REQUIRE(w != NULL);
    REQUIRE(put_one(w, "w", "v", T0, 1, 1, 100, NULL) == 0);
    store_close(w);
    REQUIRE(store_open(path, &ro, &s, &why) == 0);
    CHECK(why == NULL);
    uint64_t id;
    CHECK_EQ_INT(put_one(s, "w", "v", T0 + 1, 1, 1, 100, &id), -EROFS);
    struct store_stat st;
    CHECK_EQ_INT(store_stat(s, &st), 0);
    CHECK(st.windows == 1 && st.budget == (4 << 20));
    CHECK_EQ_INT(check_clean(s), 0);
    store_close(s);
    CHECK_EQ_INT(store_open(NULL, &ro, &s, NULL), -EINVAL);
}

/* The reader of readonly_sees_writer: 10 windows, then 20 that load. */
static int sees_writer_step(struct store *r, int step, void *arg)
{
    (void)arg;
    int rc;
    struct seen *l = list(r, NULL, &rc);
    if (rc != 0 || l->n != (step == 0 ? 10u : 20u))
        return 20 + step;
    if (step == 1) {
        void *out = NULL;
        size_t len = 0;
        if (store_load(r, l->w[19].id, &out, &len) != 0 || len != 300)
            return 22;
        isoprof_free(out);
    }
    return 0;
}

/* A read-only handle in another process sees what the writer commits,
 * also commits made after it opened, while the writer keeps its handle. */
TEST(readonly_sees_writer)
{
    const char *path = tmp_store_path();
    struct store *w = open_rw(path, 0);
    REQUIRE(w != NULL);
    for (int i = 0; i < 10; i++)
        REQUIRE(put_one(w, "w", "v", T0 + (uint64_t)i * SEC, 1, 1, 300, NULL) == 0);
    struct reader rd;
    REQUIRE(reader_start(&rd, path, sees_writer_step, NULL) == 0);
    for (int i = 10; i < 20; i++)
        CHECK_EQ_INT(put_one(w, "w", "v", T0 + (uint64_t)i * SEC, 1, 1, 300, NULL), 0);
    CHECK_EQ_INT(reader_finish(&rd), 0);
    store_close(w);
}

/* Write meta/format = value with the raw LMDB API. */
static void raw_put(const char *path, const char *db, const char *key, const void *val, size_t vlen)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    REQUIRE(mdb_env_create(&env) == 0);
    mdb_env_set_maxdbs(env, 16);
    mdb_env_set_mapsize(env, 32 << 20);
    mkdir(path, 0750);
    REQUIRE(mdb_env_open(env, path, 0, 0640) == 0);
    REQUIRE(mdb_txn_begin(env, NULL, 0, &txn) == 0);
    REQUIRE(mdb_dbi_open(txn, db, MDB_CREATE, &dbi) == 0);
    MDB_val k = {strlen(key), (void *)key}, d = {vlen, (void *)val};
    REQUIRE(mdb_put(txn, dbi, &k, &d, 0) == 0);
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
}

TEST(bad_magic)
{
    const char *path = tmp_store_path();
    raw_put(path, "meta", "format", "NOTOURS\0\0\0\0\1", 12);
    struct store *s = NULL;
    char *why = NULL;
    CHECK_EQ_INT(store_open(path, NULL, &s, &why), ISOPROF_EMAGIC);
    CHECK(s == NULL);
    CHECK(why && strstr(why, "bad magic") && strncmp(why, path, strlen(path)) == 0);
    isoprof_free(why);
    struct store_options ro = {.readonly = 1};
    CHECK_EQ_INT(store_open(path, &ro, &s, NULL), ISOPROF_EMAGIC);

    /* An LMDB environment with other DBs and no meta is someone else's:
     * refused, and not written to. */
    const char *other = tmp_store_path();
    raw_put(other, "users", "alice", "1", 1);
    CHECK_EQ_INT(store_open(other, NULL, &s, &why), ISOPROF_EMAGIC);
    CHECK(why && strstr(why, "not an isoprof store"));
    isoprof_free(why);

    /* A data.mdb that is not LMDB at all. */
    char dir[400], file[450];
    snprintf(dir, sizeof(dir), "%s", tmp_store_path());
    mkdir(dir, 0750);
    snprintf(file, sizeof(file), "%s/data.mdb", dir);
    FILE *f = fopen(file, "wb");
    REQUIRE(f != NULL);
    for (int i = 0; i < 16384; i++)
        fputc(i * 31 % 251, f);
    fclose(f);
    int rc = store_open(dir, NULL, &s, &why);
    CHECK(rc == ISOPROF_ECORRUPT || rc == ISOPROF_ESCHEMA || rc == ISOPROF_EMAGIC);
    CHECK(why != NULL);
    isoprof_free(why);
}

TEST(schema_mismatch)
{
    const char *path = tmp_store_path();
    struct store *s = open_rw(path, 0);
    REQUIRE(s != NULL);
    REQUIRE(put_one(s, "w", "v", T0, 1, 1, 100, NULL) == 0);
    store_close(s);
    raw_put(path, "meta", "format", "ISOPROF\0\0\0\0\x0d", 12);
    char *why = NULL;
    s = NULL;
    CHECK_EQ_INT(store_open(path, NULL, &s, &why), ISOPROF_ESCHEMA);
    CHECK(s == NULL);
    char want[600];
    snprintf(want, sizeof(want), "%s: schema version 13, this build reads %u", path,
             STORE_SCHEMA_VERSION);
    CHECK_STR(why, want);
    isoprof_free(why);
    struct store_options ro = {.readonly = 1};
    CHECK_EQ_INT(store_open(path, &ro, &s, NULL), ISOPROF_ESCHEMA);
    /* Schema 1 (before the anomaly DBs): a reader is told to let the
     * daemon upgrade it; a writer upgrades it in place, data intact. */
    raw_put(path, "meta", "format", "ISOPROF\0\0\0\0\x01", 12);
    CHECK_EQ_INT(store_open(path, &ro, &s, &why), ISOPROF_ESCHEMA);
    CHECK(why != NULL && strstr(why, "schema version 1") && strstr(why, "upgrades"));
    isoprof_free(why);
    s = open_rw(path, 0);
    REQUIRE(s != NULL);
    int rc;
    struct seen *l = list(s, NULL, &rc);
    CHECK_EQ_INT(l->n, 1);
    CHECK_EQ_INT(check_clean(s), 0);
    struct store_stat st;
    CHECK(store_stat(s, &st) == 0 && st.schema_version == STORE_SCHEMA_VERSION);
    store_close(s);
    s = NULL;
    CHECK_EQ_INT(store_open(path, &ro, &s, NULL), 0);
    store_close(s);
}

int main(void)
{
    RUN(create_and_reopen);
    RUN(readonly_basics);
    RUN(readonly_sees_writer);
    RUN(bad_magic);
    RUN(schema_mismatch);
    TEST_EXIT();
}

/*
 * test_threads.c - one handle shared by threads: a writer thread puts
 * batches while reader threads list, load and stat concurrently. Every
 * call must succeed, each reader must see a window count that never goes
 * down and every listed window must load. Eviction runs too (small
 * budget), so a listed window may be gone by the time it is loaded:
 * that, and only that, may return ISOPROF_ENOTFOUND.
 */
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>

#define READERS 3
#define BATCHES 150

static struct store *g_store;
static atomic_int g_done;
static atomic_int g_errors;

static void *writer_main(void *arg)
{
    (void)arg;
    uint8_t *buf = isoprof_malloc(4 * 6000);
    if (buf == NULL) {
        atomic_fetch_add(&g_errors, 1);
        return NULL;
    }
    for (int b = 0; b < BATCHES; b++) {
        struct store_record r[4];
        for (int i = 0; i < 4; i++) {
            fill_payload(buf + i * 6000, 6000, (uint64_t)(b * 4 + i));
            r[i] = (struct store_record){.w = {.worker = i % 2 ? "a" : "b",
                                               .version = "v",
                                               .runtime = "node",
                                               .type = (uint8_t)(1 + i % 2),
                                               .start_ns = T0 + (uint64_t)(b * 4 + i) * SEC},
                                         .pprof = buf + i * 6000,
                                         .len = 6000};
        }
        int rc = store_put(g_store, r, 4, NULL);
        if (rc != 0) {
            fprintf(stderr, "writer: %s\n", isoprof_strerror(rc));
            atomic_fetch_add(&g_errors, 1);
        }
    }
    isoprof_free(buf);
    atomic_store(&g_done, 1);
    return NULL;
}

struct ids {
    size_t n;
    uint64_t id[4096];
};

static int collect(const struct store_window *w, void *arg)
{
    struct ids *ids = arg;
    if (ids->n < ISOPROF_ARRAY_SIZE(ids->id))
        ids->id[ids->n++] = w->id;
    return 0;
}

static void *reader_main(void *arg)
{
    (void)arg;
    static _Thread_local struct ids ids;
    uint64_t total_seen = 0;
    int rounds = 0;
    while (!atomic_load(&g_done) || rounds < 3) {
        rounds++;
        ids.n = 0;
        int rc = store_windows(g_store, NULL, collect, &ids);
        struct store_stat st;
        if (rc == 0)
            rc = store_stat(g_store, &st);
        if (rc != 0) {
            fprintf(stderr, "reader: %s\n", isoprof_strerror(rc));
            atomic_fetch_add(&g_errors, 1);
            break;
        }
        /* Ids only grow: the newest id seen never goes down. */
        uint64_t newest = ids.n ? ids.id[ids.n - 1] : 0;
        if (newest < total_seen)
            atomic_fetch_add(&g_errors, 1);
        total_seen = newest;
        for (size_t i = 0; i < ids.n; i += 17) {
            void *out = NULL;
            size_t len;
            rc = store_load(g_store, ids.id[i], &out, &len);
            if (rc == 0 && len != 6000)
                atomic_fetch_add(&g_errors, 1);
            if (rc != 0 && rc != ISOPROF_ENOTFOUND) {
                fprintf(stderr, "load: %s\n", isoprof_strerror(rc));
                atomic_fetch_add(&g_errors, 1);
            }
            isoprof_free(out);
        }
    }
    return NULL;
}

TEST(writer_and_readers)
{
    g_store = open_rw(tmp_store_path(), 512 * 1024);
    REQUIRE(g_store != NULL);
    pthread_t w, r[READERS];
    REQUIRE(pthread_create(&w, NULL, writer_main, NULL) == 0);
    for (int i = 0; i < READERS; i++)
        REQUIRE(pthread_create(&r[i], NULL, reader_main, NULL) == 0);
    pthread_join(w, NULL);
    for (int i = 0; i < READERS; i++)
        pthread_join(r[i], NULL);
    CHECK_EQ_INT(atomic_load(&g_errors), 0);
    struct store_stat st;
    REQUIRE(store_stat(g_store, &st) == 0);
    CHECK(st.stored_bytes <= 512 * 1024 && st.evicted_total > 0);
    CHECK(st.windows + st.evicted_total == BATCHES * 4);
    CHECK_EQ_INT(check_clean(g_store), 0);
    store_close(g_store);
}

int main(void)
{
    RUN(writer_and_readers);
    TEST_EXIT();
}

/*
 * test_identity.c - the label rules of a fleet's series: an isolate's
 * number is a function of the process (stable across agent restarts, the
 * same for a process's threads in its high bits), and a Worker's thread
 * label says what it runs (its name, else its script's file name, else
 * "worker") with its thread id kept after a '#' (the uploader cuts it);
 * a named Worker keeps its name alone.
 */
#include "../test.h"
#include "daemon.h"
#include "identity.h"
#include "store.h"
#include "threads.h"

#include <string.h>

TEST(isolate_from_the_process)
{
    /* The same process, whatever the agent's run: the same number. */
    uint32_t a = identity_isolate(4242, 987654, "127.0.0.1:9229", "uuid-1", NULL);
    CHECK_EQ_INT(a, identity_isolate(4242, 987654, "127.0.0.1:9229", "uuid-1", NULL));
    /* pid and start time name it; the endpoint and id do not then. */
    CHECK_EQ_INT(a, identity_isolate(4242, 987654, "127.0.0.1:9300", "uuid-2", NULL));
    /* A reused pid is another process. */
    CHECK(a != identity_isolate(4242, 987655, "127.0.0.1:9229", "uuid-1", NULL));
    CHECK((a & ~STORE_ISOLATE_PROCESS) == 0 && a != 0);
    /* Without a pid: the endpoint and the target's id. */
    uint32_t b = identity_isolate(0, 0, "127.0.0.1:9229", "checkout", NULL);
    CHECK_EQ_INT(b, identity_isolate(0, 0, "127.0.0.1:9229", "checkout", NULL));
    CHECK(b != identity_isolate(0, 0, "127.0.0.1:9229", "billing", NULL));
    CHECK(b != identity_isolate(0, 0, "127.0.0.1:9230", "checkout", NULL));
    CHECK((b & STORE_ISOLATE_PROCESS) != 0);
    /* A worker: its process's high bits, its thread id in the low ones. */
    uint32_t w1 = identity_isolate(4242, 987654, "127.0.0.1:9229", "uuid-1", "1");
    uint32_t w2 = identity_isolate(4242, 987654, "127.0.0.1:9229", "uuid-1", "2");
    CHECK((w1 & STORE_ISOLATE_PROCESS) == a && (w2 & STORE_ISOLATE_PROCESS) == a);
    CHECK(w1 != w2 && w1 != a && w2 != a);
    CHECK_EQ_INT(w1, identity_isolate(4242, 987654, "x", "y", "1"));
    /* Thread ids 4095 apart meet (the daemon then takes the next free). */
    CHECK_EQ_INT(identity_isolate(1, 2, "", "", "5"), identity_isolate(1, 2, "", "", "4100"));
    uint32_t odd = identity_isolate(1, 2, "", "", "not-a-number");
    CHECK((odd & ~STORE_ISOLATE_PROCESS) != 0);
}

static const char *label(const char *title, const char *url, const char *id)
{
    static char out[80];
    threads_label(title, url, id, out, sizeof(out));
    return out;
}

TEST(thread_labels)
{
    /* A named Worker keeps its name alone (filters and logs know it so). */
    CHECK_STR(label("[worker 3] pool-1", "file:///app/pool.js", "3"), "pool-1");
    CHECK_STR(label("[worker 7]", "file:///app/jobs/resize.js", "7"), "resize.js#7");
    CHECK_STR(label("[worker 7] ", "file:///app/resize.js?v=2#x", "7"), "resize.js#7");
    CHECK_STR(label("[worker 9]", "", "9"), "worker#9");
    CHECK_STR(label(NULL, NULL, NULL), "worker#0");
    CHECK_STR(label("[worker 9]", "file:///app/", "9"), "worker#9"); /* no file name */
    CHECK_STR(label("[worker 2] caf\xc3\xa9\n", NULL, "2"), "caf___");
    CHECK_STR(label("[worker 4] job#1", NULL, "4"), "job#1#4");
    /* The uploader's part: what it runs, however many jobs ran it. */
    for (int i = 1; i < 40; i++) {
        char id[8];
        snprintf(id, sizeof(id), "%d", i);
        const char *l = label("[worker]", "file:///srv/runner/task.js", id);
        CHECK_EQ_INT(store_thread_label(l), strlen("task.js"));
    }
    CHECK_EQ_INT(store_thread_label(label("[worker 4] job#1", NULL, "4")), 5);
    /* A long file name is cut to keep the id within the store's 64 bytes. */
    char longname[200] = "file:///";
    memset(longname + 8, 'n', 150);
    longname[158] = '\0';
    const char *l = label("[worker 1]", longname, "123456");
    CHECK_EQ_INT(strlen(l), STORE_THREAD_MAX);
    CHECK(strcmp(l + STORE_THREAD_MAX - 7, "#123456") == 0);
}

int main(void)
{
    RUN(isolate_from_the_process);
    RUN(thread_labels);
    TEST_EXIT();
}

/*
 * Allocation-failure walks: fail the 1st, 2nd, ... allocation of each entry
 * point until one completes. Every failing run must return -ENOMEM, hand
 * out nothing and leave nothing allocated (run under ASan, LeakSanitizer
 * reports any leak at exit); the final run must give the normal answer.
 */
#include "../test.h"
#include "helpers.h"

#include <errno.h>
#include <unistd.h>

#define WALK_LIMIT 100000

static const char *valid_text = "store: {path: /x, max_size: 2GiB}\n"
                                "targets:\n"
                                "  - {inspector: '127.0.0.1:1', worker: w, version: v}\n"
                                "  - {inspector: '[::1]:2'}\n"
                                "  - {inspector: 'localhost:3', memory_limit: 64MiB,\n"
                                "     threads: {enabled: false, memory_limit: 8MiB, max: 2}}\n"
                                "  - {inspector: '10.0.0.1:4'}\n"
                                "  - {inspector: '10.0.0.2:5'}\n"
                                "sampling: {cpu: {duration: 1s, period: 2s, jitter: 5%}}\n"
                                "log: {level: debug}\n";

/* Maps own two strings an entry and an array; both rule passes run. */
static const char *upload_text = "upload:\n"
                                 "  url: https://example.com/\n"
                                 "  api: ingest\n"
                                 "  tls: {insecure_skip_verify: true}\n"
                                 "  basic_auth: {username: u, password_file: /p}\n"
                                 "  headers: {X-A: a, X-B: '', X-C: c}\n"
                                 "  labels:\n"
                                 "    env: prod\n"
                                 "    region: eu\n";

static const char *invalid_upload_text = "upload:\n"
                                         "  url: 'https://u:p@example.com'\n"
                                         "  api: ingest\n"
                                         "  bearer_token_file: /t\n"
                                         "  basic_auth: {username: u}\n"
                                         "  headers: {Host: a, X-B: \"\\n\", X-B: c, X-D: [d]}\n"
                                         "  labels: {env: 'a,b', ok: x}\n";

/* Lists own an array and a string an entry; the defaults' lists are
 * replaced, left as they are, or emptied. */
static const char *lists_text = "discovery:\n"
                                "  processes:\n"
                                "    enabled: true\n"
                                "    executables: [node, nodejs, bun]\n"
                                "    users:\n"
                                "      - root\n"
                                "      - '1000'\n";

static const char *invalid_lists_text = "discovery:\n"
                                        "  processes:\n"
                                        "    enabled: true\n"
                                        "    executables: [ok, a/b, '', {x: y}, ok2]\n"
                                        "    users: [-x, ok, 'a b']\n"
                                        "    activate: [true]\n";

static const char *invalid_text = "store: {path: '', bogus: 1}\n"
                                  "targets:\n"
                                  "  - {inspector: 'nope', workr: w, threads: {maks: 1}}\n"
                                  "  - {worker: x}\n"
                                  "sampling: {cpu: {duration: 2m, jitter: 90%}}\n"
                                  "log: {level: loud}\nlog: {}\n";

/* Walk cfg_load_buffer over text; want is the rc without failures. */
static void walk_buffer(const char *text, int want)
{
    long n;
    for (n = 0; n < WALK_LIMIT; n++) {
        struct cfg *c = NULL;
        char *why = NULL;
        unsigned long before = isoprof_alloc_count();
        isoprof_alloc_fail_after(n);
        int rc = cfg_load_buffer("t.yaml", text, strlen(text), &c, &why);
        isoprof_alloc_fail_after(-1);
        int exhausted = isoprof_alloc_count() - before <= (unsigned long)n;
        if (exhausted) {
            /* the injected failure was never reached: the normal answer */
            CHECK_EQ_INT(rc, want);
            CHECK((c != NULL) == (want == 0));
            CHECK((why != NULL) == (want == ISOPROF_ECONFIG));
            cfg_free(c);
            isoprof_free(why);
            break;
        }
        if (rc != -ENOMEM) {
            fprintf(stderr, "failing allocation %ld: rc %d\n", n, rc);
            test_failed_ = 1;
        }
        CHECK(c == NULL);
        CHECK(why == NULL);
        cfg_free(c);
        isoprof_free(why);
    }
    fprintf(stderr, "  walked %ld allocations\n", n);
    CHECK(n > 3 && n < WALK_LIMIT);
}

TEST(load_valid)
{
    walk_buffer(valid_text, 0);
}

TEST(load_invalid)
{
    walk_buffer(invalid_text, ISOPROF_ECONFIG);
}

TEST(load_empty)
{
    walk_buffer("", 0);
}

TEST(load_upload)
{
    walk_buffer(upload_text, 0);
}

TEST(load_upload_invalid)
{
    walk_buffer(invalid_upload_text, ISOPROF_ECONFIG);
}

TEST(load_lists)
{
    walk_buffer(lists_text, 0);
    walk_buffer("discovery: {processes: {executables: [], users: ~}}\n", 0);
}

TEST(load_lists_invalid)
{
    walk_buffer(invalid_lists_text, ISOPROF_ECONFIG);
    walk_buffer("discovery: {processes: {enabled: true, executables: []}}\n", ISOPROF_ECONFIG);
}

TEST(defaults)
{
    long n;
    for (n = 0; n < WALK_LIMIT; n++) {
        struct cfg *c = NULL;
        isoprof_alloc_fail_after(n);
        int rc = cfg_defaults(&c);
        isoprof_alloc_fail_after(-1);
        if (rc == 0) {
            CHECK(c != NULL);
            cfg_free(c);
            break;
        }
        CHECK_EQ_INT(rc, -ENOMEM);
        CHECK(c == NULL);
    }
    CHECK(n > 0 && n < WALK_LIMIT);
}

TEST(load_file)
{
    char dir[] = "/tmp/isoprof-cfg-XXXXXX", path[64];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/c.yaml", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs(valid_text, f);
    fclose(f);
    long n;
    for (n = 0; n < WALK_LIMIT; n++) {
        struct cfg *c = NULL;
        char *why = NULL;
        isoprof_alloc_fail_after(n);
        int rc = cfg_load_file(path, &c, &why);
        isoprof_alloc_fail_after(-1);
        isoprof_free(why);
        if (rc == 0) {
            cfg_free(c);
            break;
        }
        CHECK_EQ_INT(rc, -ENOMEM);
        CHECK(c == NULL);
    }
    CHECK(n > 0 && n < WALK_LIMIT);
    unlink(path);
    rmdir(dir);
}

/* Walk cfg_check_reload from config text ta to tb, which differ in a
 * restart-only option; the final answer holds line. */
static void walk_reload(const char *ta, const char *tb, const char *line)
{
    char *why;
    struct cfg *a = load(ta, &why);
    struct cfg *b = load(tb, &why);
    REQUIRE(a != NULL && b != NULL);
    long n;
    for (n = 0; n < WALK_LIMIT; n++) {
        why = NULL;
        isoprof_alloc_fail_after(n);
        int rc = cfg_check_reload(a, b, &why);
        isoprof_alloc_fail_after(-1);
        if (rc == ISOPROF_ECONFIG) {
            CHECK(has_line(why, line));
            isoprof_free(why);
            break;
        }
        CHECK_EQ_INT(rc, -ENOMEM);
        CHECK(why == NULL);
    }
    CHECK(n > 0 && n < WALK_LIMIT);
    cfg_free(a);
    cfg_free(b);
}

TEST(check_reload)
{
    walk_reload("store: {path: /a}\n", "store: {path: /b, max_size: 2GiB}\n",
                "t.yaml: store.path changed (/a -> /b); restart to apply");
}

int main(void)
{
    RUN(load_valid);
    RUN(load_invalid);
    RUN(load_empty);
    RUN(load_upload);
    RUN(load_upload_invalid);
    RUN(load_lists);
    RUN(load_lists_invalid);
    RUN(defaults);
    RUN(load_file);
    RUN(check_reload);
    TEST_EXIT();
}

/*
 * test.h - the unit tests' tiny harness.
 *
 * A test binary defines tests with TEST(name) and lists them in main with
 * RUN(name). A failed CHECK prints file:line and the expression and marks
 * the test failed; the binary exits non-zero if any test failed, so CTest
 * sees it. No test depends on another's state.
 */
#ifndef ISOPROF_TEST_H
#define ISOPROF_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failed_;
static int test_total_failed_;

#define TEST(name) static void test_##name(void)

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        if (!(expr)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #expr);              \
            test_failed_ = 1;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) {                                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", __FILE__, __LINE__,  \
                    #a, #b, a_, b_);                                                               \
            test_failed_ = 1;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {                                     \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (\"%s\" != \"%s\")\n", __FILE__,        \
                    __LINE__, #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                     \
            test_failed_ = 1;                                                                      \
        }                                                                                          \
    } while (0)

/* Stop the current test (after a CHECK that later lines depend on). */
#define REQUIRE(expr)                                                                              \
    do {                                                                                           \
        CHECK(expr);                                                                               \
        if (test_failed_)                                                                          \
            return;                                                                                \
    } while (0)

#define RUN(name)                                                                                  \
    do {                                                                                           \
        test_failed_ = 0;                                                                          \
        test_##name();                                                                             \
        fprintf(stderr, "%s %s\n", test_failed_ ? "FAIL" : "ok  ", #name);                         \
        test_total_failed_ |= test_failed_;                                                        \
    } while (0)

#define TEST_EXIT() return test_total_failed_ ? 1 : 0

#endif

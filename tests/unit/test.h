/*
 * test.h - the unit-test registry and assertions.
 *
 * A test is a function declared with PD_TEST(name) at the start of a line in
 * any tests/unit/ C file; the Makefile collects the names into one list. The
 * runner (runner.c) runs each test in its own process with a timeout.
 * Assertions print file, line and both values, then end the test.
 *
 *     PD_TEST(rng_is_deterministic) {
 *         uint64_t a = 1, b = 1;
 *         CHECK_EQ_INT(pd_rng_next(&a), pd_rng_next(&b));
 *     }
 */
#ifndef PD_TEST_H
#define PD_TEST_H

#include "../../src/core/rng.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PD_TEST(name) void test_##name(void); void test_##name(void)

void pd_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) pd_test_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond); \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                     \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_)                                                          \
            pd_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_); \
    } while (0)

#define CHECK_STR_EQ(a, b)                                                     \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                 \
            pd_test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, \
                         a_ ? a_ : "(null)", b_ ? b_ : "(null)");              \
    } while (0)

#define CHECK_CONTAINS(hay, needle)                                            \
    do {                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                \
        if (!h_ || !strstr(h_, n_))                                            \
            pd_test_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"", \
                         h_ ? h_ : "(null)", n_);                              \
    } while (0)

/* |a - b| <= tol * max(1, |a|, |b|) */
#define CHECK_NEAR(a, b, tol)                                                  \
    do {                                                                       \
        double a_ = (double)(a), b_ = (double)(b), t_ = (tol);                 \
        double s_ = fmax(1.0, fmax(fabs(a_), fabs(b_)));                       \
        if (!(fabs(a_ - b_) <= t_ * s_))                                       \
            pd_test_fail(__FILE__, __LINE__, "%s ~ %s: %.9g vs %.9g (tol %g)", #a, #b, a_, b_, t_); \
    } while (0)

/* End this test as skipped, not passed, saying why (e.g. "no CUDA device:
 * ..."): for tests that need what this machine lacks. */
void pd_test_skip(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* A scratch directory for this test (removed by the runner afterwards). */
const char *pd_test_dir(void);
/* Write text to dir/name; returns the full path (static buffer per call site ok). */
char *pd_test_write(const char *name, const char *text);

#endif

/*
 * A tiny test harness for leased's C tests.
 *
 *   TEST(name) { CHECK(x == 1); CHECK_EQ_U64(a, b); }
 *   ...
 *   CHECK_MAIN(name, other)
 *   CHECK_MAIN_THEN(finish, name, other)  finish() runs after the cases,
 *                                         before main returns; nonzero
 *                                         fails the run
 *
 * `prog` runs every case; `prog CASE` runs one; `prog --list` lists them
 * (meson registers one test per case from that list). A failed CHECK
 * reports file:line and fails the case, which goes on to its end.
 */
#ifndef LEASED_CHECK_H
#define LEASED_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int check_failed_;

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__,         \
                    __LINE__, #cond);                                      \
            check_failed_ = 1;                                             \
        }                                                                  \
    } while (0)

#define CHECK_EQ_I64(a, b)                                                 \
    do {                                                                   \
        long long a_ = (long long)(a), b_ = (long long)(b);                \
        if (a_ != b_) {                                                    \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n",      \
                    __FILE__, __LINE__, #a, #b, a_, b_);                   \
            check_failed_ = 1;                                             \
        }                                                                  \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                 \
    do {                                                                   \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                   \
        if (a_ != b_) {                                                    \
            fprintf(stderr,                                                \
                    "%s:%d: %s == %s failed: %" PRIu64 " != %" PRIu64 "\n", \
                    __FILE__, __LINE__, #a, #b, a_, b_);                   \
            check_failed_ = 1;                                             \
        }                                                                  \
    } while (0)

#define CHECK_STR(a, b)                                                    \
    do {                                                                   \
        const char *a_ = (a), *b_ = (b);                                   \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {             \
            fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n",  \
                    __FILE__, __LINE__, #a, #b, a_ ? a_ : "(null)",        \
                    b_ ? b_ : "(null)");                                   \
            check_failed_ = 1;                                             \
        }                                                                  \
    } while (0)

#define TEST(name) static void name(void)

struct check_case_ {
    const char *name;
    void (*fn)(void);
};

static int check_run_(const struct check_case_ *cases, size_t n, int argc,
                      char **argv, int (*finish)(void))
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    int failed = 0, ran = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc >= 2 && strcmp(argv[1], cases[i].name) != 0)
            continue;
        check_failed_ = 0;
        cases[i].fn();
        ran++;
        printf("%s %s\n", check_failed_ ? "FAIL" : "ok  ", cases[i].name);
        fflush(stdout);
        failed += check_failed_;
    }
    if (ran == 0) {
        fprintf(stderr, "no such case: %s\n", argc >= 2 ? argv[1] : "");
        return 1;
    }
    if (finish != NULL && finish() != 0) {
        fprintf(stderr, "the finish after the cases failed\n");
        failed++;
    }
    return failed != 0;
}

#define CHECK_CASE_(name) {#name, name},
#define CHECK_MAIN(...) CHECK_MAIN_THEN(NULL, __VA_ARGS__)
#define CHECK_MAIN_THEN(finish, ...)                                       \
    int main(int argc, char **argv)                                        \
    {                                                                      \
        static const struct check_case_ cases[] = {                        \
            CHECK_FOREACH_(CHECK_CASE_, __VA_ARGS__)};                     \
        return check_run_(cases, sizeof(cases) / sizeof(cases[0]), argc,   \
                          argv, finish);                                   \
    }

/* Applies m to each of up to 40 arguments. */
#define CHECK_FOREACH_(m, ...)                                             \
    CHECK_FE_N_(__VA_ARGS__, CHECK_FE40_, CHECK_FE39_, CHECK_FE38_,        \
                CHECK_FE37_, CHECK_FE36_, CHECK_FE35_, CHECK_FE34_,        \
                CHECK_FE33_, CHECK_FE32_, CHECK_FE31_, CHECK_FE30_,        \
                CHECK_FE29_, CHECK_FE28_, CHECK_FE27_, CHECK_FE26_,        \
                CHECK_FE25_, CHECK_FE24_, CHECK_FE23_, CHECK_FE22_,        \
                CHECK_FE21_, CHECK_FE20_, CHECK_FE19_, CHECK_FE18_,        \
                CHECK_FE17_, CHECK_FE16_, CHECK_FE15_, CHECK_FE14_,        \
                CHECK_FE13_, CHECK_FE12_, CHECK_FE11_, CHECK_FE10_,        \
                CHECK_FE9_, CHECK_FE8_, CHECK_FE7_, CHECK_FE6_,            \
                CHECK_FE5_, CHECK_FE4_, CHECK_FE3_, CHECK_FE2_,            \
                CHECK_FE1_, ~)(m, __VA_ARGS__)
#define CHECK_FE_N_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, \
                    _14, _15, _16, _17, _18, _19, _20, _21, _22, _23, _24,  \
                    _25, _26, _27, _28, _29, _30, _31, _32, _33, _34, _35,  \
                    _36, _37, _38, _39, _40, N, ...)                        \
    N
#define CHECK_FE1_(m, x) m(x)
#define CHECK_FE2_(m, x, ...) m(x) CHECK_FE1_(m, __VA_ARGS__)
#define CHECK_FE3_(m, x, ...) m(x) CHECK_FE2_(m, __VA_ARGS__)
#define CHECK_FE4_(m, x, ...) m(x) CHECK_FE3_(m, __VA_ARGS__)
#define CHECK_FE5_(m, x, ...) m(x) CHECK_FE4_(m, __VA_ARGS__)
#define CHECK_FE6_(m, x, ...) m(x) CHECK_FE5_(m, __VA_ARGS__)
#define CHECK_FE7_(m, x, ...) m(x) CHECK_FE6_(m, __VA_ARGS__)
#define CHECK_FE8_(m, x, ...) m(x) CHECK_FE7_(m, __VA_ARGS__)
#define CHECK_FE9_(m, x, ...) m(x) CHECK_FE8_(m, __VA_ARGS__)
#define CHECK_FE10_(m, x, ...) m(x) CHECK_FE9_(m, __VA_ARGS__)
#define CHECK_FE11_(m, x, ...) m(x) CHECK_FE10_(m, __VA_ARGS__)
#define CHECK_FE12_(m, x, ...) m(x) CHECK_FE11_(m, __VA_ARGS__)
#define CHECK_FE13_(m, x, ...) m(x) CHECK_FE12_(m, __VA_ARGS__)
#define CHECK_FE14_(m, x, ...) m(x) CHECK_FE13_(m, __VA_ARGS__)
#define CHECK_FE15_(m, x, ...) m(x) CHECK_FE14_(m, __VA_ARGS__)
#define CHECK_FE16_(m, x, ...) m(x) CHECK_FE15_(m, __VA_ARGS__)
#define CHECK_FE17_(m, x, ...) m(x) CHECK_FE16_(m, __VA_ARGS__)
#define CHECK_FE18_(m, x, ...) m(x) CHECK_FE17_(m, __VA_ARGS__)
#define CHECK_FE19_(m, x, ...) m(x) CHECK_FE18_(m, __VA_ARGS__)
#define CHECK_FE20_(m, x, ...) m(x) CHECK_FE19_(m, __VA_ARGS__)
#define CHECK_FE21_(m, x, ...) m(x) CHECK_FE20_(m, __VA_ARGS__)
#define CHECK_FE22_(m, x, ...) m(x) CHECK_FE21_(m, __VA_ARGS__)
#define CHECK_FE23_(m, x, ...) m(x) CHECK_FE22_(m, __VA_ARGS__)
#define CHECK_FE24_(m, x, ...) m(x) CHECK_FE23_(m, __VA_ARGS__)
#define CHECK_FE25_(m, x, ...) m(x) CHECK_FE24_(m, __VA_ARGS__)
#define CHECK_FE26_(m, x, ...) m(x) CHECK_FE25_(m, __VA_ARGS__)
#define CHECK_FE27_(m, x, ...) m(x) CHECK_FE26_(m, __VA_ARGS__)
#define CHECK_FE28_(m, x, ...) m(x) CHECK_FE27_(m, __VA_ARGS__)
#define CHECK_FE29_(m, x, ...) m(x) CHECK_FE28_(m, __VA_ARGS__)
#define CHECK_FE30_(m, x, ...) m(x) CHECK_FE29_(m, __VA_ARGS__)
#define CHECK_FE31_(m, x, ...) m(x) CHECK_FE30_(m, __VA_ARGS__)
#define CHECK_FE32_(m, x, ...) m(x) CHECK_FE31_(m, __VA_ARGS__)
#define CHECK_FE33_(m, x, ...) m(x) CHECK_FE32_(m, __VA_ARGS__)
#define CHECK_FE34_(m, x, ...) m(x) CHECK_FE33_(m, __VA_ARGS__)
#define CHECK_FE35_(m, x, ...) m(x) CHECK_FE34_(m, __VA_ARGS__)
#define CHECK_FE36_(m, x, ...) m(x) CHECK_FE35_(m, __VA_ARGS__)
#define CHECK_FE37_(m, x, ...) m(x) CHECK_FE36_(m, __VA_ARGS__)
#define CHECK_FE38_(m, x, ...) m(x) CHECK_FE37_(m, __VA_ARGS__)
#define CHECK_FE39_(m, x, ...) m(x) CHECK_FE38_(m, __VA_ARGS__)
#define CHECK_FE40_(m, x, ...) m(x) CHECK_FE39_(m, __VA_ARGS__)

#endif

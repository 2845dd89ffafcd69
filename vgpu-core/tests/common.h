/* Minimal test harness shared by the test programs: named checks, a summary, a non-zero exit. */
#ifndef TESSERA_TEST_COMMON_H
#define TESSERA_TEST_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int tc_failed __attribute__((unused)), tc_passed __attribute__((unused));
static const char *tc_case __attribute__((unused)) = "";

#define CASE(name) (tc_case = (name))
#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (cond) {                                                                   \
            tc_passed++;                                                              \
        } else {                                                                      \
            tc_failed++;                                                              \
            fprintf(stderr, "FAIL [%s] %s:%d: %s: ", tc_case, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
        }                                                                             \
    } while (0)

static inline int tc_summary(const char *prog)
{
    fprintf(stderr, "%s: %d checks passed, %d failed\n", prog, tc_passed, tc_failed);
    return tc_failed ? 1 : 0;
}

static inline uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

static inline uint64_t tc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

#define MIB (1ULL << 20)

#endif

/*
 * Evidence that a wall-clock test process stalled, for tests that measure shares of time on a
 * machine shared with other jobs. Two sources: a watchdog thread sleeping 1 ms at a time (its
 * oversleep), and the measuring thread's own run delay (time runnable but not running, from
 * /proc/thread-self/schedstat), looked at every ~2 ms with stall_poll. Only stalls longer than the
 * grace given to stall_start (what the code under test absorbs) are kept, as time intervals, so a
 * stall straddling two windows counts in both.
 */
#ifndef TESSERA_TEST_STALL_H
#define TESSERA_TEST_STALL_H

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define STALL_MAX 1024
enum { STALL_WATCHDOG, STALL_RUNQ, STALL_SOURCES };

static struct {
    pthread_mutex_t mu;
    uint64_t grace;
    struct {
        uint64_t start, end;
        int src;
    } s[STALL_MAX];
    unsigned n;                  /* total noted; the newest STALL_MAX are kept */
    int fd;
    uint64_t look_at, look_delay;
} stall = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static void stall_note(int src, uint64_t start, uint64_t end)
{
    if (end - start <= stall.grace)
        return;
    pthread_mutex_lock(&stall.mu);
    unsigned i = stall.n++ % STALL_MAX;
    stall.s[i].start = start, stall.s[i].end = end, stall.s[i].src = src;
    pthread_mutex_unlock(&stall.mu);
}

static void *stall_watchdog(void *arg)
{
    (void)arg;
    for (;;) {
        uint64_t t = tc_now_ns();
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        uint64_t now = tc_now_ns();
        stall_note(STALL_WATCHDOG, t + 1000000 < now ? t + 1000000 : now, now);
    }
    return NULL;
}

static uint64_t stall_run_delay(void)
{
    char buf[128];
    ssize_t n = stall.fd >= 0 ? pread(stall.fd, buf, sizeof buf - 1, 0) : -1;
    unsigned long long cpu = 0, delay = 0;
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return sscanf(buf, "%llu %llu", &cpu, &delay) == 2 ? delay : 0;
}

/* Starts watching; call from the thread whose run delay matters. */
static void stall_start(uint64_t grace_ns)
{
    stall.grace = grace_ns;
    stall.fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    pthread_t t;
    pthread_create(&t, NULL, stall_watchdog, NULL);
}

/* Looks at the calling thread's run delay when ~2 ms have passed since the last look. */
static void stall_poll(uint64_t now)
{
    if (stall.fd < 0 || now - stall.look_at < 2000000)
        return;
    uint64_t d = stall_run_delay();
    if (stall.look_at && d > stall.look_delay)
        stall_note(STALL_RUNQ, now - (d - stall.look_delay), now); /* waits taken as one, just before the look */
    stall.look_at = now, stall.look_delay = d;
}

/* Stall time beyond the grace inside [t0, t1] (the larger of the two sources), and the longest stall. */
static uint64_t stall_excess(uint64_t t0, uint64_t t1, uint64_t *longest)
{
    uint64_t by[STALL_SOURCES] = {0};
    *longest = 0;
    pthread_mutex_lock(&stall.mu);
    unsigned n = stall.n < STALL_MAX ? stall.n : STALL_MAX;
    for (unsigned i = 0; i < n; i++) {
        uint64_t a = stall.s[i].start + stall.grace, b = stall.s[i].end;
        if (b > t0 && stall.s[i].start < t1 && b - stall.s[i].start > *longest)
            *longest = b - stall.s[i].start;
        a = a > t0 ? a : t0, b = b < t1 ? b : t1;
        if (b > a)
            by[stall.s[i].src] += b - a;
    }
    pthread_mutex_unlock(&stall.mu);
    return by[STALL_WATCHDOG] > by[STALL_RUNQ] ? by[STALL_WATCHDOG] : by[STALL_RUNQ];
}

#endif

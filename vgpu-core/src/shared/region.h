/*
 * The container-wide accounting region: a file mapped by every process of the container. It holds
 * per-card memory usage (per process, so a dead process's share can be reclaimed) under a robust
 * process-shared mutex, and the lock-free per-card launch budget used by the SM limiter.
 */
#ifndef TESSERA_REGION_H
#define TESSERA_REGION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "../common/config.h"

#define REGION_MAGIC 0x5445535345524131ULL /* "TESSERA1" */
/* 2: exec marker in each slot; 3: also the event-timed SM limiter's fields (charged_ns,
 * contended_until_ns per card, sm_active_ns per slot and card). */
#define REGION_VERSION 3
#define REGION_MAX_PROCS 1024

struct region_card {
    uint64_t used_bytes;               /* sum of procs[].used[card]; under the lock */
    /* SM limiter state, shared lock-free by every process of the container. */
    _Atomic uint64_t tat_ns;           /* GCRA theoretical arrival time of the next launch */
    _Atomic uint64_t ns_per_wave;      /* unused since launches are charged their timed GPU time */
    _Atomic uint64_t ctl_last_ns;      /* last diagnostics log: one process logs per period */
    _Atomic uint64_t waits;            /* launches delayed since the last update */
    _Atomic uint32_t capped;           /* 1 when launches are metered (fixed-share or contended burst) */
    _Atomic uint32_t util_pct;         /* share of the card the container was charged lately, for logs */
    /* Added for the event-timed limiter (kept last so the fields above keep their offsets). */
    _Atomic uint64_t charged_ns;       /* GPU time charged to the container's launches, cumulative */
    _Atomic uint64_t contended_until_ns; /* burst-share: capped until then (a neighbour was seen) */
};

struct region_proc {
    int32_t pid;                       /* 0 = free slot */
    uint32_t pad;
    uint64_t start_time;               /* /proc/<pid>/stat starttime: detects pid reuse */
    uint64_t used[TESSERA_MAX_CARDS];
    /* Added in version 2, at the end: the owner's exec marker (see owner.h). */
    int32_t marker_fd;
    uint32_t pad2;
    uint64_t marker_ino;
};

struct region {
    uint64_t magic;
    uint32_t version;
    uint32_t size;
    pthread_mutex_t lock;
    uint64_t reclaimed_bytes;          /* total taken back from dead processes (diagnostics) */
    struct region_card cards[TESSERA_MAX_CARDS];
    struct region_proc procs[REGION_MAX_PROCS];
    /* Per slot and card: when that process last launched there (SM limiter; burst-share counts them). */
    _Atomic uint64_t sm_active_ns[REGION_MAX_PROCS][TESSERA_MAX_CARDS];
};

/*
 * Maps the region at path. With create, the file is created (O_NOFOLLOW) and its pages allocated
 * if needed: the container's own region, on its pod's region volume or in its /dev/shm, or a
 * developer's. Without, it must exist with exactly sizeof(struct region) bytes (the legacy region
 * a node agent created and mounted) and is never resized. NULL on failure with *err set to the errno (EPROTO for a region of another
 * size or layout version); the caller decides how to fail.
 */
struct region *region_open(const char *path, bool create, int *err);
/* A region private to this process (anonymous memory); NULL when even that cannot be mapped. */
struct region *region_private(void);
/* Claims this process's slot (again after fork). Returns the slot index or -1 when full. */
int region_register(struct region *r);
/*
 * Adds bytes to card's usage for this process unless that would exceed limit (0 = no limit).
 * Before refusing, usage of dead processes is reclaimed. Returns true when reserved.
 */
bool region_reserve(struct region *r, int slot, int card, uint64_t bytes, uint64_t limit);
/* Gives bytes back; saturates at zero so accounting can never underflow. */
void region_release(struct region *r, int slot, int card, uint64_t bytes);
/* Container-wide usage of card (after reclaiming dead processes). */
uint64_t region_used(struct region *r, int card);
/* Number of live registered processes. */
int region_live_procs(struct region *r, int32_t *pids, int max);

#endif

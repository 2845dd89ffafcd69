/*
 * The SM limiter's arithmetic, as pure functions (unit-tested in tests/unit_sm.c): the launch
 * budget, the estimate of a launch's own GPU time, and the burst-share contention test.
 */
#ifndef TESSERA_SM_MATH_H
#define TESSERA_SM_MATH_H

#include <stdbool.h>
#include <stdint.h>

/* Budget time a launch of gpu_ns costs a container limited to limit_pct of the card. */
uint64_t sm_cost(uint64_t gpu_ns, unsigned limit_pct);

/*
 * GCRA admission: from the budget's theoretical arrival time tat, a launch costing cost at time
 * now moves it to the returned value; *wait is how long the launch must sleep so that the budget
 * runs at most burst ahead of the clock.
 */
uint64_t sm_gcra(uint64_t tat, uint64_t now, uint64_t cost, uint64_t burst, uint64_t *wait);

/*
 * A launch's own GPU time per unit (wave of blocks, or graph replay), from event timings. A
 * timing also contains any wait behind other contexts' time slices, which only ever adds. So the
 * estimate is the mean of the "clean" timings, those within SM_EST_CLEAN_PCT of the smallest seen
 * in the last one to two buckets: the minimum alone would undercharge by the kernel's own jitter,
 * the plain mean would charge the neighbours' slices. Two buckets let the estimate follow a kernel
 * that really becomes slower within two bucket lengths.
 */
#define SM_EST_BUCKET_NS 500000000ULL
#define SM_EST_CLEAN_PCT 125
struct sm_bucket {
    uint64_t min;                /* ns per unit; 0 = nothing observed */
    uint64_t sum, n;             /* clean observations */
};
struct sm_est {
    struct sm_bucket cur, prev;
    uint64_t bucket_start;
};
void sm_est_observe(struct sm_est *e, uint64_t now, uint64_t ns_per_unit);
/* The estimate at now; 0 when nothing was observed in the last two buckets. */
uint64_t sm_est_get(const struct sm_est *e, uint64_t now);

/* What the controller knows about a card for the burst-share decision. */
struct sm_sample {
    uint32_t pid;                /* as NVML reported it */
    unsigned avg, peak;          /* smUtil over the process's samples of the last second, percent */
};
struct sm_view {
    const struct sm_sample *samples;
    int nsamples;
    const int32_t *ours;         /* pids of the container's live processes, as it sees them */
    int nours;
    int ours_active;             /* container processes that launched on the card in the last second */
    int card_low, card_high;     /* lowest and highest card utilisation read in the last second; -1 = unknown */
    bool capped;                 /* the container is capped now (burst-share saw a neighbour lately) */
};
#define SM_ACTIVE_PCT 5          /* a process sampled at least this busy is using the card */
#define SM_FOREIGN_MARGIN 10     /* card busier than the container's own samples by this much = neighbours */
/*
 * True when another container uses the card. Where NVML shows our pids (same pid namespace),
 * any other busy pid is a neighbour, and so is card utilisation beyond our own samples (drivers
 * that hide other namespaces' processes). To become capped, the card's lowest reading of the last
 * second must exceed our samples' peak: the card counter lags the per-process samples and would
 * otherwise read our own fall in use as somebody else's. To stay capped, its highest reading is
 * enough: a dip (everything on the card stalled for a moment) must not uncap a container whose
 * neighbour is still there. Where NVML shows none of our pids (a driver reporting
 * host pids), busy processes beyond the number of our own active ones are neighbours.
 */
bool sm_contended(const struct sm_view *v);

#endif

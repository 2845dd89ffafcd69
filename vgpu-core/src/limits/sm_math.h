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
 * A launch's own GPU time, estimated as the smallest time per unit (wave of blocks, or graph
 * replay) seen in the last one to two buckets. Event timing includes time spent behind other
 * contexts' time slices; the minimum over many launches does not, and two buckets let the
 * estimate rise within two bucket lengths when a kernel really becomes slower.
 */
#define SM_EST_BUCKET_NS 500000000ULL
struct sm_min_est {
    uint64_t cur, prev;          /* minimum ns per unit in the current and previous bucket; 0 = none */
    uint64_t bucket_start;
};
void sm_est_observe(struct sm_min_est *e, uint64_t now, uint64_t ns_per_unit);
/* The estimate at now; 0 when nothing was observed in the last two buckets. */
uint64_t sm_est_get(const struct sm_min_est *e, uint64_t now);

/* What the controller knows about a card for the burst-share decision. */
struct sm_sample {
    uint32_t pid;                /* as NVML reported it */
    unsigned util;               /* smUtil of the newest sample, percent */
};
struct sm_view {
    const struct sm_sample *samples; /* per process, its samples of the last second averaged */
    int nsamples;
    const int32_t *ours;         /* pids of the container's live processes, as it sees them */
    int nours;
    int ours_active;             /* container processes that launched on the card in the last second */
    int card_util;               /* card utilisation averaged over the last second; -1 = unknown */
};
#define SM_ACTIVE_PCT 5          /* a process sampled at least this busy is using the card */
#define SM_FOREIGN_MARGIN 10     /* card busier than the container's own samples by this much = neighbours */
/*
 * True when another container uses the card. Where NVML shows our pids (same pid namespace),
 * any other busy pid is a neighbour, and so is card utilisation beyond our own samples (drivers
 * that hide other namespaces' processes). Where it shows none of them (a driver reporting host
 * pids), busy processes beyond the number of our own active ones are neighbours.
 */
bool sm_contended(const struct sm_view *v);

#endif

/*
 * Launch timing: how much GPU time the container's own launches take, measured by the library
 * itself with a pair of events around metered launches (every launch of a kernel until its
 * estimate is well established, then one in eight), never read from NVML. Completed pairs
 * are harvested on later launches and feed a per-kernel (per-graph) estimate of its own GPU time,
 * which is what the next launch of that kernel is charged. Per process; thread-safe.
 */
#ifndef TESSERA_SM_TIMING_H
#define TESSERA_SM_TIMING_H

#include <stdint.h>

#include "../process/state.h"

struct sm_ticket {
    int dev;                     /* CUDA device ordinal of the launch */
    int timed;                   /* events were recorded around the launch */
    int guessed;                 /* charged a default: settle against the measurement */
    int sample;                  /* worth timing (set by sm_timing_estimate) */
    int graph;
    const void *key;             /* CUfunction or CUgraphExec */
    uint64_t units;              /* waves of blocks, or 1 for a graph replay */
    uint64_t charged_ns;         /* GPU time charged at admission */
    uint64_t cost_ns;            /* budget time that charge took */
    CUevent start;
    CUcontext ctx;
};

/* GPU time a launch is expected to take; sets t->guessed when no measurement backs it and t->sample
 * when the launch should be timed. */
uint64_t sm_timing_estimate(struct sm_ticket *t, uint64_t now);
/* Records the start event on s (before the launch); leaves t->timed 0 when timing is unavailable. */
void sm_timing_start(struct sm_ticket *t, CUstream s);
/* After the launch: records the end event and queues the pair, or gives the events back on failure. */
void sm_timing_finish(struct sm_ticket *t, CUstream s, CUresult rc);
/*
 * Harvests completed pairs (now: the monotonic clock): updates the estimates, and calls
 * settle(dev, measured - charged) for launches that were charged a guess.
 */
void sm_timing_harvest(uint64_t now, void (*settle)(int dev, int64_t delta_ns));

#endif

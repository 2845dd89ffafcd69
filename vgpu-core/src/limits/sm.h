/*
 * Per-card SM limiter. Every launch on a capped card (kernels and graph replays) is charged the GPU
 * time it is expected to take, scaled by 100/limit, against a GCRA budget shared through the
 * region (one CAS per launch, lock-free across processes). What a launch takes is measured by the
 * library itself, with events around the launch (sm_timing.h), so the container's own use is known
 * on any driver and in any pid namespace; NVML only tells burst-share containers whether a
 * neighbour is using the card (sm_contention.h).
 */
#ifndef TESSERA_SM_H
#define TESSERA_SM_H

#include <stdint.h>

#include "sm_timing.h"

/*
 * Slow path of every launch hook, before the real launch: waits for budget on a capped card.
 * key is the CUfunction (or CUgraphExec when graph), blocks the grid size, s the stream as the
 * driver will see it. Returns 1 when the launch is metered: call tessera_sm_end after it.
 */
int tessera_sm_begin(struct sm_ticket *t, const void *key, uint64_t blocks, int graph, CUstream s);
void tessera_sm_end(struct sm_ticket *t, CUstream s, CUresult rc);
/* Reads SM counts and NVML handles, starts the controller; call after a successful cuInit. */
void tessera_sm_setup(void);

#endif

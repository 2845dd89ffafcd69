/*
 * Per-card SM limiter. Launches on a capped card are metered by a GCRA budget shared through the
 * region (one CAS per launch, lock-free across processes). A controller thread measures the
 * container's utilisation through NVML every period and scales the budget's cost per wave
 * multiplicatively, so the loop converges on any SM count and any kernel shape.
 */
#ifndef TESSERA_SM_H
#define TESSERA_SM_H

#include <stdint.h>

/* Slow path of every launch hook: initialises, then waits for budget on a capped card. */
void tessera_sm_admit(uint64_t blocks);
/* Reads SM counts and NVML handles, starts the controller; call after a successful cuInit. */
void tessera_sm_setup(void);
void tessera_sm_after_fork(void);

#endif

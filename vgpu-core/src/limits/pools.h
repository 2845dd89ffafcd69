/*
 * Stream-ordered pools hold card memory beyond what is allocated from them: they grow in steps and
 * keep freed memory up to their release threshold until a synchronisation or a trim. A pool is
 * therefore charged what it really holds (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), re-read after
 * every allocation and free from it, at every synchronisation, on memory queries and before any
 * allocation is refused.
 */
#ifndef TESSERA_POOLS_H
#define TESSERA_POOLS_H

#include <stdbool.h>
#include <stdint.h>

#include "tessera/cuda_abi.h"

/* Remembers which card a pool's memory lives on (cuMemPoolCreate, cuDeviceGetMemPool). */
void tessera_pool_register(CUmemoryPool pool, int card);
/* The card a registered pool charges, or -1. */
int tessera_pool_card(CUmemoryPool pool);
/*
 * Allocates n bytes from pool (on card) through call, charging the card what the pool grows by.
 * Refuses with CUDA_ERROR_OUT_OF_MEMORY when the growth it needs does not fit.
 */
CUresult tessera_pool_alloc(CUmemoryPool pool, int card, uint64_t n, CUdeviceptr *dptr,
                            CUresult (*call)(void *arg), void *arg);
/* Re-reads one pool (after a free or trim), or all of them; a pool that is gone is uncharged. */
void tessera_pool_settle(CUmemoryPool pool);
void tessera_pools_settle_all(void);
/* settle_all unless the pool table is busy (then false): safe from inside a reservation. */
bool tessera_pools_try_settle(void);
/* Uncharges a destroyed pool. */
void tessera_pool_forget(CUmemoryPool pool);

#endif

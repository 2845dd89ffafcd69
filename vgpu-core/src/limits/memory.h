/*
 * Per-card memory accounting. Every allocation is reserved in the shared region before the driver
 * is called (so concurrent processes can never overshoot the limit together) and recorded per
 * allocation, so a free releases exactly what was charged and a free of an unknown handle is a no-op.
 */
#ifndef TESSERA_MEMORY_H
#define TESSERA_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "tessera/cuda_abi.h"

enum mem_kind {
    MEM_PTR = 1,        /* cuMemAlloc/Managed/Pitch: owned by the context */
    MEM_VMM = 2,        /* cuMemCreate handle */
    MEM_ARRAY = 3,      /* owned by the context */
    MEM_MIPMAP = 4,     /* owned by the context */
    MEM_CTX = 5,        /* a context's own footprint (TESSERA_CONTEXT_RESERVE_MIB); key = owner = context */
    MEM_CTX_LIMIT = 6,  /* a cuCtxSetLimit reservation; key = context + limit, owner = context */
    MEM_GRAPH_NODE = 7, /* a graph memory node; key = its address, aux = its graph */
    MEM_ASYNC = 8       /* a stream-ordered allocation: charged through its pool (aux), 0 bytes here */
};

struct mem_record {
    uint64_t key;
    uint64_t bytes;
    int32_t kind;
    int32_t card;
    uint64_t owner;     /* the context whose destruction frees it, or 0 */
    uint64_t aux;       /* MEM_GRAPH_NODE: graph; MEM_ASYNC: pool */
};

/* The card an allocation on the current context charges, or -1 when no memory limit applies. */
int tessera_mem_card(void);
/* The same for CUDA ordinal dev (a VMM location, a stream's device). */
int tessera_mem_card_of_device(CUdevice dev);
/* True when `card` is memory-limited (or the config is poisoned). */
bool tessera_mem_limited(int card);
/* The limit in bytes reported for card (0 when poisoned). */
uint64_t tessera_mem_limit(int card);
/* CUDA_SUCCESS when bytes fit under the card's limit (and are now charged), else OUT_OF_MEMORY. */
CUresult tessera_mem_reserve(int card, uint64_t bytes);
void tessera_mem_unreserve(int card, uint64_t bytes);
/* Charges bytes whatever the limit: memory the driver already holds (a pool that grew). */
void tessera_mem_force(int card, uint64_t bytes);
/*
 * Names what may give card memory back before a reservation is refused: pools.c registers its
 * settle at load, so that this file, below it, never calls up into it. reclaim must not block (it is
 * called from inside a reservation) and returns whether it looked.
 */
void tessera_mem_set_reclaimer(bool (*reclaim)(void));
void tessera_mem_track(enum mem_kind kind, uint64_t key, int card, uint64_t bytes);
/* As tessera_mem_track with the owner and aux fields given. */
void tessera_mem_track_full(const struct mem_record *rec);
/* Releases and forgets every record owned by ctx (a destroyed context). */
void tessera_mem_release_owner(uint64_t ctx);
/* Releases and forgets every record of kind whose aux is aux (a destroyed graph's nodes). */
void tessera_mem_release_aux(enum mem_kind kind, uint64_t aux);
/* The calling thread's current context as a number, 0 when none. */
uint64_t tessera_current_ctx(void);
/* Removes and returns the record of (kind, key); false when unknown. */
bool tessera_mem_untrack(enum mem_kind kind, uint64_t key, struct mem_record *out);
/* Container-wide usage of card. */
uint64_t tessera_mem_used(int card);

/* Bytes an array of this shape occupies (the same formula the stub driver uses). */
uint64_t tessera_array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d);
uint64_t tessera_mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels);

/*
 * Shared shape of every counted allocation: reserve, call the driver, then track or un-reserve.
 * `call` is an expression producing the CUresult; `handle` is read only after success.
 */
#define TESSERA_COUNTED_ALLOC(card, bytes, kind, call, handle)                        \
    do {                                                                           \
        if ((card) == -1)                                                          \
            return (call);                                                         \
        if (tessera_mem_reserve((card), (bytes)) != CUDA_SUCCESS)                  \
            return CUDA_ERROR_OUT_OF_MEMORY;                                       \
        CUresult rc_ = (call);                                                     \
        if (rc_ == CUDA_SUCCESS)                                                   \
            tessera_mem_track((kind), (uint64_t)(handle), (card), (bytes));           \
        else                                                                       \
            tessera_mem_unreserve((card), (bytes));                                \
        return rc_;                                                                \
    } while (0)

#endif

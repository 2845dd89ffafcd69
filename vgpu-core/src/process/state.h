/* Process-wide state of the hook library and its one-time initialisation. */
#ifndef TESSERA_STATE_H
#define TESSERA_STATE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "../common/config.h"
#include "../common/symbols.h"
#include "../shared/region.h"
#include "cards.h"

struct tessera_state {
    struct tessera_config cfg;
    bool passthrough;     /* no Tessera setting at all: every hook forwards untouched */
    bool any_mem_limit;   /* some card has a memory limit, or the config is poisoned */
    bool any_sm_limit;    /* some card is SM-limited under a QoS that can cap */
    struct region *region;
    /* Limits cannot be enforced: the shared region could not be opened, or the node agent's limits
     * file is unreadable or malformed. cuInit and every counted allocation are refused. */
    bool fail_closed;
    char fail_reason[TESSERA_PATH_LEN + 160];  /* why, naming the path (and errno) */
    bool cuda_loaded;
};

extern struct tessera_state tessera;
extern atomic_int tessera_ready;
/* Non-zero while cuLaunchKernel must take the slow path (before init, or when an SM limit exists). */
extern atomic_int tessera_launch_gate;

void tessera_init(void);
static inline void tessera_ensure_init(void)
{
    if (__builtin_expect(!atomic_load_explicit(&tessera_ready, memory_order_acquire), 0))
        tessera_init();
}

/* This process's slot in the shared region, registered on first use (and again after fork). */
int tessera_slot(void);
/* Loads the real NVML and calls its nvmlInit once; false when unavailable. */
bool tessera_nvml_load(void);

/* Error for a real function that could not be resolved (logged once per name). */
CUresult tessera_cuda_missing(const char *name);
nvmlReturn_t tessera_nvml_missing(const char *name);

/* Fetches the real function or returns the "missing" error from the enclosing hook. */
#define TESSERA_REAL(name)                                                          \
    __typeof__(tessera_cuda.name) real_##name;                                      \
    tessera_ensure_init();                                                          \
    real_##name = tessera_cuda.name;                                                \
    if (__builtin_expect(real_##name == NULL, 0))                                   \
        return tessera_cuda_missing(#name)

#endif

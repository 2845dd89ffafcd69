/*
 * The symbol table behind every interception path: dlsym(handle, "cu...") and cuGetProcAddress
 * return our hooks, so a CUDA 12 runtime (which resolves the driver through cuGetProcAddress) and
 * frameworks that dlopen libcuda themselves cannot step around the limits. One row per exported
 * hook, built from the lists in common/symbols.h.
 */
#ifndef TESSERA_SYMBOL_TABLE_H
#define TESSERA_SYMBOL_TABLE_H

#include "../common/symbols.h"

struct tessera_symbol {
    const char *name;
    void *hook;
    void **real;       /* slot in tessera_cuda / tessera_nvml */
};

/* Looks a hooked symbol up by exact name; NULL when not hooked. */
const struct tessera_symbol *tessera_symbol_find(const char *name);
/* The hook whose real function is `real_fn`; NULL when none. */
void *tessera_symbol_hook_for_real(void *real_fn);
/* Best hook for a cuGetProcAddress request (base name, version, flags); NULL when none. */
void *tessera_symbol_hook_for_request(const char *base, int cuda_version, cuuint64_t flags);

#endif

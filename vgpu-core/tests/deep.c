/*
 * A library that links the driver and allocates through it, as a framework plugin would. t_escape
 * loads it with RTLD_DEEPBIND (which binds it to its own dependencies before the global scope, where
 * the hooks are) and with dlmopen (a new link-map namespace, where the hooks are not loaded).
 */
#include "tessera/cuda_abi.h"

extern CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes);
extern CUresult cuMemFree_v2(CUdeviceptr dptr);

CUresult tessera_deep_alloc(CUdeviceptr *dptr, size_t bytes)
{
    return cuMemAlloc_v2(dptr, bytes);
}

CUresult tessera_deep_free(CUdeviceptr dptr)
{
    return cuMemFree_v2(dptr);
}

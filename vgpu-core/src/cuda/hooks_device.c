/* cuInit and the memory queries that must show the container's view of a card. */
#include "../common/log.h"
#include "../process/state.h"
#include "../limits/memory.h"
#include "../limits/pools.h"
#include "../limits/sm.h"

CUresult cuInit(unsigned int flags)
{
    TESSERA_REAL(cuInit);
    if (tessera.fail_closed) {
        TLOG(TLOG_ERROR, "cuInit refused: %s (limits cannot be enforced)", tessera.fail_reason);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    CUresult rc = real_cuInit(flags);
    if (rc == CUDA_SUCCESS && !tessera.passthrough) {
        tessera_slot();
        tessera_sm_setup();
    }
    return rc;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    TESSERA_REAL(cuMemGetInfo_v2);
    CUresult rc = real_cuMemGetInfo_v2(free_bytes, total_bytes);
    int card = tessera_mem_card();
    if (rc != CUDA_SUCCESS || card == -1)
        return rc;
    tessera_pools_settle_all();
    uint64_t limit = tessera_mem_limit(card), used = tessera_mem_used(card);
    uint64_t room = used < limit ? limit - used : 0;
    if (total_bytes)
        *total_bytes = limit;
    if (free_bytes && *free_bytes > room)
        *free_bytes = room;
    return rc;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    TESSERA_REAL(cuDeviceTotalMem_v2);
    CUresult rc = real_cuDeviceTotalMem_v2(bytes, dev);
    int card;
    if (rc == CUDA_SUCCESS && bytes && (card = tessera_mem_card_of_device(dev)) != -1)
        *bytes = tessera_mem_limit(card);
    return rc;
}

/*
 * Pre-CUDA-3.2 entry points take 32-bit sizes. Nothing built in the last decade calls them, so
 * rather than account a second ABI they are refused while a memory limit applies: they must not
 * become a way around it.
 */
#define LEGACY_GUARD(name)                                                            \
    do {                                                                              \
        if (tessera.any_mem_limit) {                                                  \
            TLOG(TLOG_ERROR, "%s (pre-3.2 ABI) refused under a memory limit", #name); \
            return CUDA_ERROR_NOT_SUPPORTED;                                          \
        }                                                                             \
    } while (0)

CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
    TESSERA_REAL(cuMemAlloc);
    LEGACY_GUARD(cuMemAlloc);
    return real_cuMemAlloc(dptr, bytesize);
}

CUresult cuMemAllocPitch(unsigned int *dptr, unsigned int *pitch, unsigned int w, unsigned int h, unsigned int e)
{
    TESSERA_REAL(cuMemAllocPitch);
    LEGACY_GUARD(cuMemAllocPitch);
    return real_cuMemAllocPitch(dptr, pitch, w, h, e);
}

CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total_bytes)
{
    TESSERA_REAL(cuMemGetInfo);
    LEGACY_GUARD(cuMemGetInfo);
    return real_cuMemGetInfo(free_bytes, total_bytes);
}

CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    TESSERA_REAL(cuDeviceTotalMem);
    LEGACY_GUARD(cuDeviceTotalMem);
    return real_cuDeviceTotalMem(bytes, dev);
}

CUresult cuArrayCreate(CUarray *arr, const void *desc)
{
    TESSERA_REAL(cuArrayCreate);
    LEGACY_GUARD(cuArrayCreate);
    return real_cuArrayCreate(arr, desc);
}

CUresult cuArray3DCreate(CUarray *arr, const void *desc)
{
    TESSERA_REAL(cuArray3DCreate);
    LEGACY_GUARD(cuArray3DCreate);
    return real_cuArray3DCreate(arr, desc);
}

/*
 * Context lifecycle: a context's own footprint (TESSERA_CONTEXT_RESERVE_MIB) and its cuCtxSetLimit
 * reservations are charged to its card, and everything a context owned is given back when the
 * driver frees it: cuCtxDestroy, cuDevicePrimaryCtxReset, and the cuDevicePrimaryCtxRelease that
 * drops the primary context's last reference.
 */
#include "../common/log.h"
#include "../process/state.h"
#include "../limits/memory.h"

/* Charges a new context's footprint on dev's card; false (logged) when it does not fit. */
static bool reserve_context(CUdevice dev, int *card)
{
    *card = tessera_mem_card_of_device(dev);
    if (*card == -1 || tessera.cfg.context_reserve == 0)
        return true;
    if (tessera_mem_reserve(*card, tessera.cfg.context_reserve) == CUDA_SUCCESS)
        return true;
    TLOG(TLOG_ERROR, "refusing a CUDA context on device %d: its %llu MiB (TESSERA_CONTEXT_RESERVE_MIB) do not fit "
         "in the card's memory limit", dev, (unsigned long long)(tessera.cfg.context_reserve >> 20));
    return false;
}

/* After the driver's answer: records the footprint of a created context, or gives it back. */
static void settle_context(CUresult rc, CUcontext ctx, int card)
{
    if (card == -1 || tessera.cfg.context_reserve == 0)
        return;
    if (rc != CUDA_SUCCESS) {
        tessera_mem_unreserve(card, tessera.cfg.context_reserve);
        return;
    }
    uint64_t c = (uint64_t)(uintptr_t)ctx;
    struct mem_record rec = {.key = c, .bytes = tessera.cfg.context_reserve, .kind = MEM_CTX, .card = card,
                             .owner = c};
    tessera_mem_track_full(&rec);
}

#define CREATE_CONTEXT(name, dev, call)                                              \
    do {                                                                             \
        TESSERA_REAL(name);                                                          \
        int card_;                                                                   \
        if (!tessera.any_mem_limit)                                                  \
            return (call);                                                           \
        if (!reserve_context((dev), &card_))                                         \
            return CUDA_ERROR_OUT_OF_MEMORY;                                         \
        CUresult rc_ = (call);                                                       \
        settle_context(rc_, rc_ == CUDA_SUCCESS ? *pctx : NULL, card_);              \
        return rc_;                                                                  \
    } while (0)

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CREATE_CONTEXT(cuCtxCreate_v2, dev, real_cuCtxCreate_v2(pctx, flags, dev));
}

CUresult cuCtxCreate_v3(CUcontext *pctx, void *params, int n, unsigned int flags, CUdevice dev)
{
    CREATE_CONTEXT(cuCtxCreate_v3, dev, real_cuCtxCreate_v3(pctx, params, n, flags, dev));
}

CUresult cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned int flags, CUdevice dev)
{
    CREATE_CONTEXT(cuCtxCreate_v4, dev, real_cuCtxCreate_v4(pctx, params, flags, dev));
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    TESSERA_REAL(cuCtxDestroy_v2);
    CUresult rc = real_cuCtxDestroy_v2(ctx);
    if (rc == CUDA_SUCCESS && tessera.any_mem_limit)
        tessera_mem_release_owner((uint64_t)(uintptr_t)ctx);
    return rc;
}

static bool primary_active(CUdevice dev)
{
    unsigned flags;
    int active = 0;
    return tessera_cuda.cuDevicePrimaryCtxGetState &&
           tessera_cuda.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    TESSERA_REAL(cuDevicePrimaryCtxRetain);
    /* Only the retain that brings the primary context into being puts it on the card. */
    if (!tessera.any_mem_limit || primary_active(dev))
        return real_cuDevicePrimaryCtxRetain(pctx, dev);
    int card;
    if (!reserve_context(dev, &card))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real_cuDevicePrimaryCtxRetain(pctx, dev);
    settle_context(rc, rc == CUDA_SUCCESS ? *pctx : NULL, card);
    return rc;
}

/* The primary context of dev while it exists (a retain/release pair leaves its count as it was). */
static uint64_t primary_handle(CUdevice dev)
{
    CUcontext c = NULL;
    if (!primary_active(dev) || !tessera_cuda.cuDevicePrimaryCtxRetain || !tessera_cuda.cuDevicePrimaryCtxRelease_v2 ||
        tessera_cuda.cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS)
        return 0;
    tessera_cuda.cuDevicePrimaryCtxRelease_v2(dev);
    return (uint64_t)(uintptr_t)c;
}

/* After a release or reset: if the primary context is gone, so is everything it owned. */
static void primary_gone(CUresult rc, CUdevice dev, uint64_t handle)
{
    if (rc == CUDA_SUCCESS && handle && !primary_active(dev))
        tessera_mem_release_owner(handle);
}

#define PRIMARY_END(name, dev)                                                       \
    do {                                                                             \
        TESSERA_REAL(name);                                                          \
        if (!tessera.any_mem_limit)                                                  \
            return real_##name(dev);                                                 \
        uint64_t h_ = primary_handle(dev);                                           \
        CUresult rc_ = real_##name(dev);                                             \
        primary_gone(rc_, (dev), h_);                                                \
        return rc_;                                                                  \
    } while (0)

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    PRIMARY_END(cuDevicePrimaryCtxRelease, dev);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    PRIMARY_END(cuDevicePrimaryCtxRelease_v2, dev);
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    PRIMARY_END(cuDevicePrimaryCtxReset, dev);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    PRIMARY_END(cuDevicePrimaryCtxReset_v2, dev);
}

/* Card memory a limit reserves: the stack size is reserved for every thread the card can hold. */
static uint64_t limit_bytes(CUlimit limit, size_t value, CUdevice dev)
{
    if (limit != CU_LIMIT_STACK_SIZE)
        return value;
    int sms = 0, threads = 0;
    if (!tessera_cuda.cuDeviceGetAttribute ||
        tessera_cuda.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS ||
        tessera_cuda.cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev) !=
            CUDA_SUCCESS)
        sms = 256, threads = 2048; /* unknown: assume a large card rather than under-count */
    uint64_t r;
    return __builtin_mul_overflow((uint64_t)value, (uint64_t)sms * (uint64_t)threads, &r) ? UINT64_MAX : r;
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    TESSERA_REAL(cuCtxSetLimit);
    int dev = tessera_current_device();
    int card = tessera_mem_card_of_device(dev);
    if (card == -1 || (unsigned)limit > CU_LIMIT_MALLOC_HEAP_SIZE)
        return real_cuCtxSetLimit(limit, value);
    uint64_t ctx = tessera_current_ctx(), key = ctx + (uint64_t)limit;
    struct mem_record old = {.key = key, .kind = MEM_CTX_LIMIT, .card = card, .owner = ctx};
    if (!tessera_mem_untrack(MEM_CTX_LIMIT, key, &old))
        old.bytes = 0;
    uint64_t want = limit_bytes(limit, value, dev);
    if (want > old.bytes && tessera_mem_reserve(card, want - old.bytes) != CUDA_SUCCESS) {
        if (old.bytes)
            tessera_mem_track_full(&old);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = real_cuCtxSetLimit(limit, value);
    struct mem_record now = old;
    if (rc == CUDA_SUCCESS) {
        now.bytes = want;
        if (want < old.bytes)
            tessera_mem_unreserve(card, old.bytes - want);
    } else if (want > old.bytes) {
        tessera_mem_unreserve(card, want - old.bytes);
    }
    if (now.bytes)
        tessera_mem_track_full(&now);
    return rc;
}

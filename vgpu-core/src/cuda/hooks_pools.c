/*
 * Stream-ordered allocation: charged through the pool it comes from (pools.h), on the card of the
 * pool — for cuMemAllocAsync the current pool of the stream's device, which is not necessarily the
 * current context's — and refused cleanly (CUDA_ERROR_INVALID_CONTEXT, the driver's own answer)
 * when the stream names no context. Synchronisation points re-read what pools hold.
 */
#include "../common/log.h"
#include "../process/state.h"
#include "../limits/memory.h"
#include "../limits/pools.h"

/* The CUDA ordinal of the context a stream belongs to; CUDA_ERROR_INVALID_CONTEXT without one. */
static CUresult stream_device(CUstream stream, CUdevice *dev)
{
    CUcontext ctx = NULL, popped;
    if (!tessera_cuda.cuStreamGetCtx || !tessera_cuda.cuCtxPushCurrent_v2 || !tessera_cuda.cuCtxPopCurrent_v2)
        return tessera_cuda_missing("cuStreamGetCtx");
    CUresult rc = tessera_cuda.cuStreamGetCtx(stream, &ctx);
    if (rc != CUDA_SUCCESS || !ctx)
        return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_CONTEXT;
    if ((uint64_t)(uintptr_t)ctx == tessera_current_ctx()) {
        *dev = tessera_current_device();
        return *dev >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    }
    if ((rc = tessera_cuda.cuCtxPushCurrent_v2(ctx)) != CUDA_SUCCESS)
        return rc;
    *dev = tessera_current_device();
    tessera_cuda.cuCtxPopCurrent_v2(&popped);
    return *dev >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

struct async_call {
    CUresult (*fn)(CUdeviceptr *, size_t, CUstream);
    CUresult (*pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUdeviceptr *dptr;
    size_t bytes;
    CUmemoryPool pool;
    CUstream stream;
};

static CUresult run_async(void *arg)
{
    struct async_call *c = arg;
    return c->pool_fn ? c->pool_fn(c->dptr, c->bytes, c->pool, c->stream) : c->fn(c->dptr, c->bytes, c->stream);
}

/* cuMemAllocAsync: from the current pool of the stream's device. */
static CUresult alloc_async(struct async_call *c)
{
    if (!tessera.any_mem_limit)
        return run_async(c);
    CUdevice dev;
    CUresult rc = stream_device(c->stream, &dev);
    if (rc != CUDA_SUCCESS) {
        TLOG(TLOG_INFO, "stream-ordered allocation refused: its stream has no context (error %d)", rc);
        return rc;
    }
    int card = tessera_mem_card_of_device(dev);
    if (card == -1)
        return run_async(c);
    CUmemoryPool pool;
    if (!tessera_cuda.cuDeviceGetMemPool || tessera_cuda.cuDeviceGetMemPool(&pool, dev) != CUDA_SUCCESS) {
        TLOG(TLOG_ERROR, "cannot find device %d's memory pool: refusing a stream-ordered allocation", dev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    tessera_pool_register(pool, card);
    return tessera_pool_alloc(pool, card, c->bytes, c->dptr, run_async, c);
}

/* cuMemAllocFromPoolAsync: on the pool's card when known (cuMemPoolCreate), else the stream's. */
static CUresult alloc_from_pool(struct async_call *c)
{
    if (!tessera.any_mem_limit)
        return run_async(c);
    CUdevice dev;
    CUresult rc = stream_device(c->stream, &dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    int card = tessera_pool_card(c->pool);
    if (card == -1)
        card = tessera_mem_card_of_device(dev);
    if (card == -1)
        return run_async(c);
    return tessera_pool_alloc(c->pool, card, c->bytes, c->dptr, run_async, c);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream stream)
{
    TESSERA_REAL(cuMemAllocAsync);
    struct async_call c = {.fn = real_cuMemAllocAsync, .dptr = dptr, .bytes = bytesize, .stream = stream};
    return alloc_async(&c);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream stream)
{
    TESSERA_REAL(cuMemAllocAsync_ptsz);
    struct async_call c = {.fn = real_cuMemAllocAsync_ptsz, .dptr = dptr, .bytes = bytesize, .stream = stream};
    return alloc_async(&c);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream)
{
    TESSERA_REAL(cuMemAllocFromPoolAsync);
    struct async_call c = {.pool_fn = real_cuMemAllocFromPoolAsync, .dptr = dptr, .bytes = bytesize,
                           .pool = pool, .stream = stream};
    return alloc_from_pool(&c);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream)
{
    TESSERA_REAL(cuMemAllocFromPoolAsync_ptsz);
    struct async_call c = {.pool_fn = real_cuMemAllocFromPoolAsync_ptsz, .dptr = dptr, .bytes = bytesize,
                           .pool = pool, .stream = stream};
    return alloc_from_pool(&c);
}

/* The memory goes back to its pool, which keeps it until a synchronisation: settle, do not free. */
static CUresult free_async(CUdeviceptr dptr, CUresult (*call)(CUdeviceptr, CUstream), CUstream stream)
{
    struct mem_record rec;
    if (!tessera.any_mem_limit)
        return call(dptr, stream);
    if (!tessera_mem_untrack(MEM_ASYNC, dptr, &rec)) {
        /* Not from a pool (cuMemFreeAsync of a cuMemAlloc pointer is legal): an ordinary free. */
        if (!tessera_mem_untrack(MEM_PTR, dptr, &rec))
            return call(dptr, stream);
        CUresult rc = call(dptr, stream);
        if (rc == CUDA_SUCCESS)
            tessera_mem_unreserve(rec.card, rec.bytes);
        else
            tessera_mem_track_full(&rec);
        return rc;
    }
    CUresult rc = call(dptr, stream);
    if (rc == CUDA_SUCCESS)
        tessera_pool_settle((CUmemoryPool)(uintptr_t)rec.aux);
    else
        tessera_mem_track_full(&rec);
    return rc;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    TESSERA_REAL(cuMemFreeAsync);
    return free_async(dptr, real_cuMemFreeAsync, stream);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    TESSERA_REAL(cuMemFreeAsync_ptsz);
    return free_async(dptr, real_cuMemFreeAsync_ptsz, stream);
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    TESSERA_REAL(cuMemPoolCreate);
    CUresult rc = real_cuMemPoolCreate(pool, props);
    if (rc == CUDA_SUCCESS && tessera.any_mem_limit && props &&
        props->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        int card = tessera_mem_card_of_device(props->location.id);
        if (card != -1)
            tessera_pool_register(*pool, card);
    }
    return rc;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    TESSERA_REAL(cuMemPoolDestroy);
    CUresult rc = real_cuMemPoolDestroy(pool);
    if (rc == CUDA_SUCCESS && tessera.any_mem_limit)
        tessera_pool_forget(pool);
    return rc;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    TESSERA_REAL(cuMemPoolTrimTo);
    CUresult rc = real_cuMemPoolTrimTo(pool, keep);
    if (rc == CUDA_SUCCESS && tessera.any_mem_limit)
        tessera_pool_settle(pool);
    return rc;
}

/* Synchronisation is where pools give memory back: re-read them afterwards (one flag when none). */
#define SETTLE_AFTER(call)                                                           \
    do {                                                                             \
        CUresult rc_ = (call);                                                       \
        if (rc_ == CUDA_SUCCESS && tessera.any_mem_limit)                            \
            tessera_pools_settle_all();                                              \
        return rc_;                                                                  \
    } while (0)

CUresult cuCtxSynchronize(void)
{
    TESSERA_REAL(cuCtxSynchronize);
    SETTLE_AFTER(real_cuCtxSynchronize());
}

CUresult cuStreamSynchronize(CUstream stream)
{
    TESSERA_REAL(cuStreamSynchronize);
    SETTLE_AFTER(real_cuStreamSynchronize(stream));
}

CUresult cuStreamSynchronize_ptsz(CUstream stream)
{
    TESSERA_REAL(cuStreamSynchronize_ptsz);
    SETTLE_AFTER(real_cuStreamSynchronize_ptsz(stream));
}

CUresult cuEventSynchronize(CUevent event)
{
    TESSERA_REAL(cuEventSynchronize);
    SETTLE_AFTER(real_cuEventSynchronize(event));
}

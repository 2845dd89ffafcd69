/*
 * The stub driver's contexts, streams, stream-ordered pools, VMM mappings and graph memory nodes,
 * modelled on what the real driver does with card memory:
 *   - a context takes TESSERA_STUB_CTX_MIB (default 0) of its card while it exists; destroying it
 *     (cuCtxDestroy, or the last cuDevicePrimaryCtxRelease / a cuDevicePrimaryCtxReset of a primary
 *     context) frees it and every synchronous allocation and array made in it;
 *   - cuCtxSetLimit reserves card memory: the heap and printf FIFO sizes, and the stack size for
 *     every resident thread (SMs x 2048);
 *   - pools grow in 2 MiB steps and hand out memory they hold; stream-ordered frees return memory
 *     to the pool, which gives the card back only what exceeds its release threshold at a
 *     synchronisation point (cuStreamSynchronize, cuCtxSynchronize) or cuMemPoolTrimTo;
 *   - a stream belongs to the context it was created in (streams themselves: stub_exec.c); NULL and
 *     the per-thread/legacy handles mean the current context, and without one the call fails with
 *     CUDA_ERROR_INVALID_CONTEXT;
 *   - cuMemRelease of a mapped VMM handle frees nothing until its last mapping is unmapped;
 *   - a graph memory node reserves an address only: no card memory until the graph runs (graphs
 *     themselves, with their kernel nodes: stub_exec.c).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "stub.h"
#include "stub_card.h"
#include "stub_exec.h"
#include "stub_internal.h"

#define GRANULE (2ULL << 20)
#define MAX_DEV 16
#define MAX_ITEMS 4096

struct pool {
    int dev;
    uint64_t reserved, used, threshold;
};

struct async_alloc {
    uint64_t ptr, size;
    struct pool *pool;
};

struct mapping {
    uint64_t ptr, size, handle;
};

static struct pool default_pool[MAX_DEV];
static struct pool *pools[MAX_ITEMS];
static int npools;
static struct async_alloc asyncs[MAX_ITEMS];
static int nasync;
static struct mapping maps[MAX_ITEMS];
static int nmaps;
static uint64_t released[MAX_ITEMS]; /* VMM handles released while still mapped */
static int nreleased;
static uint64_t next_va = 0x7d0000000000ULL;

static uint64_t round_up(uint64_t v)
{
    return (v + GRANULE - 1) / GRANULE * GRANULE;
}

static uint64_t ctx_footprint(void)
{
    const char *v = getenv("TESSERA_STUB_CTX_MIB");
    return v ? strtoull(v, NULL, 10) << 20 : 0;
}

/* Under the lock. */
static CUresult activate(struct ctx *c)
{
    uint64_t f = ctx_footprint();
    if (f > stub_free_bytes(c->dev))
        return CUDA_ERROR_OUT_OF_MEMORY;
    stub_charge(c->dev, (int64_t)f);
    c->footprint = f;
    c->active = 1;
    return CUDA_SUCCESS;
}

/* Under the lock: the context leaves the card with everything it owned. */
static void deactivate(struct ctx *c)
{
    stub_free_owned(c);
    uint64_t total = c->footprint + c->limit_bytes[0] + c->limit_bytes[1] + c->limit_bytes[2];
    stub_charge(c->dev, -(int64_t)total);
    c->footprint = 0;
    memset(c->limit_bytes, 0, sizeof c->limit_bytes);
    c->active = 0;
    if (stub_current() == c)
        stub_set_current(NULL);
}

API CUresult cuCtxCreate_v2(CUcontext *out, unsigned int flags, CUdevice d)
{
    (void)flags;
    int p = stub_phys(d);
    if (!stub_initialised())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || p < 0)
        return p < 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->dev = p;
    c->ordinal = d;
    stub_lock();
    CUresult rc = activate(c);
    stub_unlock();
    if (rc != CUDA_SUCCESS) {
        free(c);
        return rc;
    }
    tessera_stub_mark_ctx(p);
    sim_join(p);
    stub_set_current(c);
    *out = (CUcontext)c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxDestroy_v2(CUcontext h)
{
    struct ctx *c = (struct ctx *)h;
    if (!c || c->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    stub_lock();
    deactivate(c);
    stub_unlock();
    free(c);
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *out, CUdevice d)
{
    if (!stub_initialised())
        return CUDA_ERROR_NOT_INITIALIZED;
    int p = stub_phys(d);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    struct ctx *c = stub_primary(p);
    stub_lock();
    CUresult rc = c->active ? CUDA_SUCCESS : activate(c);
    if (rc == CUDA_SUCCESS)
        c->refs++;
    stub_unlock();
    if (rc == CUDA_SUCCESS) {
        tessera_stub_mark_ctx(p);
        sim_join(p);
        *out = (CUcontext)c;
    }
    return rc;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    int p = stub_phys(d);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    struct ctx *c = stub_primary(p);
    stub_lock();
    CUresult rc = c->refs > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS && --c->refs == 0)
        deactivate(c);
    stub_unlock();
    return rc;
}

API CUresult cuDevicePrimaryCtxReset_v2(CUdevice d)
{
    int p = stub_phys(d);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    struct ctx *c = stub_primary(p);
    stub_lock();
    if (c->active)
        deactivate(c);
    c->refs = 0;
    stub_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
    return cuDevicePrimaryCtxRelease_v2(d);
}

API CUresult cuDevicePrimaryCtxReset(CUdevice d)
{
    return cuDevicePrimaryCtxReset_v2(d);
}

API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active)
{
    int p = stub_phys(d);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = stub_primary(p)->active;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct ctx *c = stub_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if ((unsigned)limit > CU_LIMIT_MALLOC_HEAP_SIZE)
        return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t bytes = value;
    if (limit == CU_LIMIT_STACK_SIZE)
        bytes = (uint64_t)value * stub_sms(c->dev) * 2048;
    stub_lock();
    int64_t delta = (int64_t)bytes - (int64_t)c->limit_bytes[limit];
    CUresult rc = delta > 0 && (uint64_t)delta > stub_free_bytes(c->dev) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS) {
        stub_charge(c->dev, delta);
        c->limit_bytes[limit] = bytes;
    }
    stub_unlock();
    return rc;
}

/* Under the lock: gives the card what the pool holds beyond max(used, keep). */
static void trim(struct pool *p, uint64_t keep)
{
    if (keep >= p->reserved)
        return;
    uint64_t target = round_up(p->used > keep ? p->used : keep);
    if (p->reserved > target) {
        stub_charge(p->dev, -(int64_t)(p->reserved - target));
        p->reserved = target;
    }
}

void stub_pools_trim(int dev)
{
    if (dev < MAX_DEV)
        trim(&default_pool[dev], default_pool[dev].threshold);
    for (int i = 0; i < npools; i++)
        if (pools[i]->dev == dev)
            trim(pools[i], pools[i]->threshold);
}

static struct pool *device_pool(int phys_dev)
{
    default_pool[phys_dev].dev = phys_dev;
    return &default_pool[phys_dev];
}

API CUresult cuDeviceGetMemPool(CUmemoryPool *out, CUdevice d)
{
    int p = stub_phys(d);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *out = (CUmemoryPool)device_pool(p);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice d)
{
    return cuDeviceGetMemPool(out, d);
}

API CUresult cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)
{
    if (!props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || stub_phys(props->location.id) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct pool *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->dev = stub_phys(props->location.id);
    stub_lock();
    if (npools < MAX_ITEMS)
        pools[npools++] = p;
    stub_unlock();
    *out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolDestroy(CUmemoryPool h)
{
    struct pool *p = (struct pool *)h;
    stub_lock();
    for (int i = 0; i < npools; i++)
        if (pools[i] == p)
            pools[i] = pools[--npools];
    stub_charge(p->dev, -(int64_t)p->reserved);
    stub_unlock();
    free(p);
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolTrimTo(CUmemoryPool h, size_t keep)
{
    stub_lock();
    trim((struct pool *)h, keep);
    stub_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolGetAttribute(CUmemoryPool h, CUmemPool_attribute a, void *value)
{
    struct pool *p = (struct pool *)h;
    cuuint64_t *v = value;
    stub_lock();
    CUresult rc = CUDA_SUCCESS;
    if (a == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
        *v = p->threshold;
    else if (a == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT || a == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
        *v = p->reserved;
    else if (a == CU_MEMPOOL_ATTR_USED_MEM_CURRENT || a == CU_MEMPOOL_ATTR_USED_MEM_HIGH)
        *v = p->used;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    stub_unlock();
    return rc;
}

API CUresult cuMemPoolSetAttribute(CUmemoryPool h, CUmemPool_attribute a, void *value)
{
    if (a != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
        return CUDA_ERROR_INVALID_VALUE;
    ((struct pool *)h)->threshold = *(cuuint64_t *)value;
    return CUDA_SUCCESS;
}

static CUresult pool_alloc(struct pool *p, CUdeviceptr *out, size_t size)
{
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    stub_lock();
    uint64_t want = p->used + size > p->reserved ? round_up(p->used + size) : p->reserved;
    CUresult rc = CUDA_SUCCESS;
    if (want - p->reserved > stub_free_bytes(p->dev) || nasync == MAX_ITEMS) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        stub_charge(p->dev, (int64_t)(want - p->reserved));
        p->reserved = want;
        p->used += size;
        *out = next_va;
        next_va += round_up(size);
        asyncs[nasync++] = (struct async_alloc){*out, size, p};
    }
    stub_unlock();
    return rc;
}

/* The pool a stream-ordered allocation comes from: the current pool of the stream's device. */
static CUresult stream_pool(CUstream s, struct pool **out)
{
    CUcontext c;
    CUresult rc = cuStreamGetCtx(s, &c);
    if (rc == CUDA_SUCCESS)
        *out = device_pool(((struct ctx *)c)->dev);
    return rc;
}

API CUresult cuMemAllocAsync(CUdeviceptr *out, size_t size, CUstream s)
{
    struct pool *p;
    CUresult rc = stream_pool(s, &p);
    return rc == CUDA_SUCCESS ? pool_alloc(p, out, size) : rc;
}

API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *out, size_t size, CUstream s)
{
    return cuMemAllocAsync(out, size, s);
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *out, size_t size, CUmemoryPool pool, CUstream s)
{
    CUcontext c;
    CUresult rc = cuStreamGetCtx(s, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    return pool ? pool_alloc((struct pool *)pool, out, size) : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *out, size_t size, CUmemoryPool pool, CUstream s)
{
    return cuMemAllocFromPoolAsync(out, size, pool, s);
}

/* The memory goes back to its pool in stream order (here: at once); the card gets it at a sync. */
API CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream s)
{
    (void)s;
    stub_lock();
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < nasync; i++)
        if (asyncs[i].ptr == ptr) {
            asyncs[i].pool->used -= asyncs[i].size;
            asyncs[i] = asyncs[--nasync];
            rc = CUDA_SUCCESS;
            break;
        }
    stub_unlock();
    return rc != CUDA_SUCCESS ? cuMemFree_v2(ptr) : rc;
}

API CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream s)
{
    return cuMemFreeAsync(ptr, s);
}

API CUresult cuMemAddressReserve(CUdeviceptr *out, size_t size, size_t align, CUdeviceptr addr,
                                 unsigned long long flags)
{
    (void)align, (void)addr, (void)flags;
    stub_lock();
    *out = next_va;
    next_va += round_up(size);
    stub_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    (void)ptr, (void)size;
    return CUDA_SUCCESS;
}

static int map_count(uint64_t handle)
{
    int n = 0;
    for (int i = 0; i < nmaps; i++)
        n += maps[i].handle == handle;
    return n;
}

API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                      unsigned long long flags)
{
    if (offset || flags || !h)
        return CUDA_ERROR_INVALID_VALUE;
    stub_lock();
    CUresult rc = nmaps < MAX_ITEMS ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS)
        maps[nmaps++] = (struct mapping){ptr, size, h};
    stub_unlock();
    return rc;
}

API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    uint64_t freed[64];
    int nfreed = 0;
    stub_lock();
    for (int i = 0; i < nmaps;) {
        if (maps[i].ptr >= ptr && maps[i].ptr < ptr + size) {
            uint64_t h = maps[i].handle;
            maps[i] = maps[--nmaps];
            for (int k = 0; k < nreleased; k++)
                if (released[k] == h && map_count(h) == 0 && nfreed < 64) {
                    freed[nfreed++] = h;
                    released[k] = released[--nreleased];
                    break;
                }
        } else {
            i++;
        }
    }
    stub_unlock();
    for (int i = 0; i < nfreed; i++)
        stub_release_vmm(freed[i]);
    return CUDA_SUCCESS;
}

/* The physical memory of a mapped handle lives until its last mapping goes. */
API CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    stub_lock();
    int mapped = map_count(h) > 0 && nreleased < MAX_ITEMS;
    if (mapped)
        released[nreleased++] = h;
    stub_unlock();
    return mapped ? CUDA_SUCCESS : stub_release_vmm(h);
}

API CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                    CUDA_MEM_ALLOC_NODE_PARAMS *params)
{
    (void)deps, (void)ndeps;
    if (!g || !params || params->bytesize == 0 || params->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        stub_phys(params->poolProps.location.id) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    stub_lock();
    params->dptr = next_va;
    next_va += round_up(params->bytesize);
    stub_unlock();
    *node = (CUgraphNode)(uintptr_t)params->dptr;
    return CUDA_SUCCESS;
}

/* A short per-thread context stack, enough for push/pop pairs. */
static __thread struct ctx *pushed[16];
static __thread int npushed;

API CUresult cuCtxPushCurrent_v2(CUcontext c)
{
    if (npushed == 16)
        return CUDA_ERROR_INVALID_VALUE;
    pushed[npushed++] = stub_current();
    stub_set_current((struct ctx *)c);
    return CUDA_SUCCESS;
}

API CUresult cuCtxPopCurrent_v2(CUcontext *out)
{
    if (npushed == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (out)
        *out = (CUcontext)stub_current();
    stub_set_current(pushed[--npushed]);
    return CUDA_SUCCESS;
}

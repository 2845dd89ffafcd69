/*
 * A fake libcuda.so.1: simulated cards with finite memory and SMs, and kernels with durations, so
 * the hook library's accounting and throttling can be tested on machines without a GPU.
 * Built with -Bsymbolic so the stub's own references never land in a preloaded interposer.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stub.h"
#include "stub_internal.h"
#include "stub_card.h"
#include "stub_exec.h"
#include "tessera/cuda_abi.h"

#define MAX_DEV 16

struct dev {
    uint64_t total, used;
    unsigned sms;
    int has_ctx;
};

struct alloc {
    uint64_t key, size;
    int kind, dev;
    const void *owner;   /* the context whose destruction frees it (synchronous allocations, arrays) */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ndev, initialised;
static int nvis, vis[MAX_DEV]; /* ordinal -> physical card (CUDA_VISIBLE_DEVICES) */
static struct dev devs[MAX_DEV];
static struct ctx primary[MAX_DEV];
static struct alloc *allocs;
static size_t nallocs, cap_allocs;
static uint64_t next_addr = 0x7f0000000000ULL;
static __thread struct ctx *current;

static CUresult give(uint64_t key, int kind);

struct ctx *stub_current(void)
{
    return current;
}

void stub_set_current(struct ctx *c)
{
    current = c;
}

struct ctx *stub_primary(int phys_dev)
{
    return &primary[phys_dev];
}

void stub_lock(void)
{
    pthread_mutex_lock(&mu);
}

void stub_unlock(void)
{
    pthread_mutex_unlock(&mu);
}

/* Under the lock: adds (or with a negative delta removes) physical memory in use on a card. */
void stub_charge(int dev, int64_t delta)
{
    devs[dev].used = (uint64_t)((int64_t)devs[dev].used + delta);
}

uint64_t stub_free_bytes(int dev)
{
    return devs[dev].total - devs[dev].used;
}

unsigned stub_sms(int dev)
{
    return devs[dev].sms;
}

void tessera_stub_mark_ctx(int dev)
{
    devs[dev].has_ctx = 1;
}

CUresult stub_release_vmm(uint64_t handle)
{
    return give(handle, 2);
}

/* Under the lock: frees everything a destroyed context owned. */
void stub_free_owned(const void *owner)
{
    for (size_t i = 0; i < nallocs;) {
        if (allocs[i].owner == owner) {
            devs[allocs[i].dev].used -= allocs[i].size;
            allocs[i] = allocs[--nallocs];
        } else {
            i++;
        }
    }
}

static uint64_t env_list(const char *name, int i, uint64_t dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    for (int k = 0; k < i && strchr(v, ','); k++)
        v = strchr(v, ',') + 1;
    return strtoull(v, NULL, 10);
}

static void setup(void)
{
    const struct stub_dir_card *dir;
    int ndir = stub_dir_cards(&dir);
    ndev = ndir >= 0 ? ndir : (int)env_list("TESSERA_STUB_DEVICES", 0, 1);
    ndev = ndir >= 0 ? ndev : ndev < 1 ? 1 : ndev > MAX_DEV ? MAX_DEV : ndev;
    for (int i = 0; i < ndev; i++) {
        devs[i].total = (ndir >= 0 ? dir[i].memory_mib : env_list("TESSERA_STUB_MEMORY_MIB", i, 16384)) << 20;
        devs[i].sms = ndir >= 0 ? dir[i].sms : (unsigned)env_list("TESSERA_STUB_SMS", i, 80);
        if (!devs[i].sms)
            devs[i].sms = 1;
        primary[i].dev = i;
        primary[i].primary = 1;
    }
    nvis = stub_visible_cards(ndev, vis);
    for (int o = 0; o < nvis; o++)
        primary[vis[o]].ordinal = o;
}

static int ready(void)
{
    pthread_once(&once, setup);
    return initialised;
}

/* The physical card of an ordinal, or -1. */
static int phys(CUdevice d)
{
    return d >= 0 && d < nvis ? vis[d] : -1;
}

int stub_initialised(void)
{
    return ready();
}

int stub_phys(CUdevice d)
{
    return phys(d);
}

#define NEED_INIT()                          \
    do {                                     \
        if (!ready())                        \
            return CUDA_ERROR_NOT_INITIALIZED; \
    } while (0)

#define NEED_CTX()                           \
    do {                                     \
        NEED_INIT();                         \
        if (!current)                        \
            return CUDA_ERROR_INVALID_CONTEXT; \
    } while (0)

API CUresult cuInit(unsigned int flags)
{
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&once, setup);
    if (nvis == 0)
        return CUDA_ERROR_NO_DEVICE; /* as the driver does when CUDA_VISIBLE_DEVICES hides every card */
    initialised = 1;
    return CUDA_SUCCESS;
}

API CUresult cuDriverGetVersion(int *v)
{
    *v = 12040;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n)
{
    NEED_INIT();
    *n = nvis;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    NEED_INIT();
    if (phys(ordinal) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    NEED_INIT();
    if (phys(d) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (a == CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR) {
        *v = 2048;
        return CUDA_SUCCESS;
    }
    if (a != CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        return CUDA_ERROR_INVALID_VALUE;
    *v = (int)devs[phys(d)].sms;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    NEED_INIT();
    if (phys(d) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    stub_uuid_v1_bytes(phys(d), (unsigned char *)u->bytes);
    return CUDA_SUCCESS;
}

/* _v2 names a MIG device by its own UUID (CUDA 11.4+); v1 by its parent card's. */
API CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d)
{
    NEED_INIT();
    if (phys(d) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    stub_uuid_bytes(phys(d), (unsigned char *)u->bytes);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
    NEED_INIT();
    if (phys(d) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = devs[phys(d)].total;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext c)
{
    NEED_INIT();
    current = (struct ctx *)c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(CUcontext *c)
{
    NEED_INIT();
    *c = (CUcontext)current;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice(CUdevice *d)
{
    NEED_CTX();
    *d = current->ordinal;
    return CUDA_SUCCESS;
}

API CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
    NEED_CTX();
    pthread_mutex_lock(&mu);
    struct dev *v = &devs[current->dev];
    *free_b = v->total - v->used;
    *total = v->total;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

/* Charges size to dev and returns a fresh handle; OUT_OF_MEMORY when the card is full. */
CUresult stub_take(int dev, uint64_t size, int kind, unsigned long long *key, const void *owner)
{
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct dev *v = &devs[dev];
    if (size > v->total - v->used) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (nallocs == cap_allocs) {
        size_t nc = cap_allocs ? cap_allocs * 2 : 256;
        struct alloc *na = realloc(allocs, nc * sizeof *na);
        if (!na) {
            pthread_mutex_unlock(&mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        allocs = na;
        cap_allocs = nc;
    }
    *key = next_addr;
    next_addr += (size + 511) & ~511ULL;
    allocs[nallocs++] = (struct alloc){*key, size, kind, dev, owner};
    v->used += size;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

/* Synchronous allocations and arrays belong to the context that made them. */
static CUresult take(int dev, uint64_t size, int kind, unsigned long long *key)
{
    return stub_take(dev, size, kind, key, current);
}

static CUresult give(uint64_t key, int kind)
{
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nallocs; i++) {
        if (allocs[i].key == key && allocs[i].kind == kind) {
            devs[allocs[i].dev].used -= allocs[i].size;
            allocs[i] = allocs[--nallocs];
            pthread_mutex_unlock(&mu);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
    NEED_CTX();
    return take(current->dev, size, 1, p);
}

API CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned int flags)
{
    (void)flags;
    NEED_CTX();
    return take(current->dev, size, 1, p);
}

API CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int elem)
{
    NEED_CTX();
    if (elem != 4 && elem != 8 && elem != 16)
        return CUDA_ERROR_INVALID_VALUE;
    *pitch = (w + 511) & ~(size_t)511;
    return take(current->dev, (uint64_t)*pitch * h, 1, p);
}

API CUresult cuMemFree_v2(CUdeviceptr p)
{
    NEED_INIT();
    return give(p, 1);
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                         unsigned long long flags)
{
    NEED_INIT();
    if (!prop || flags || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || phys(prop->location.id) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    return take(phys(prop->location.id), size, 2, h);
}

static uint64_t fmt_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    default:
        return 4;
    }
}

static uint64_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch)
{
    return (uint64_t)w * (h ? h : 1) * (d ? d : 1) * fmt_bytes(f) * ch;
}

API CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    NEED_CTX();
    unsigned long long key;
    CUresult rc = take(current->dev, array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels), 3, &key);
    *a = (CUarray)(uintptr_t)key;
    return rc;
}

API CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    NEED_CTX();
    unsigned long long key;
    CUresult rc = take(current->dev, array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels), 3, &key);
    *a = (CUarray)(uintptr_t)key;
    return rc;
}

API CUresult cuArrayDestroy(CUarray a)
{
    NEED_INIT();
    return give((uintptr_t)a, 3);
}

API CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels)
{
    NEED_CTX();
    uint64_t total = 0;
    size_t w = d->Width, h = d->Height, z = d->Depth;
    for (unsigned i = 0; i < levels; i++) {
        total += array_bytes(w, h, z, d->Format, d->NumChannels);
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        z = z > 1 ? z / 2 : z;
    }
    unsigned long long key;
    CUresult rc = take(current->dev, total, 4, &key);
    *a = (CUmipmappedArray)(uintptr_t)key;
    return rc;
}

API CUresult cuMipmappedArrayDestroy(CUmipmappedArray a)
{
    NEED_INIT();
    return give((uintptr_t)a, 4);
}

/* Runs a kernel of `blocks` blocks of block_ns each on the current context's card, or records it into a
 * capture. */
CUresult stub_launch(CUfunction f, uint64_t blocks, uint64_t block_ns, CUstream s)
{
    NEED_CTX();
    if (!f || blocks == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (stub_capture(s, f, blocks, block_ns))
        return CUDA_SUCCESS;
    struct dev *v = &devs[current->dev];
    sim_kernel(current->dev, ((blocks + v->sms - 1) / v->sms) * block_ns);
    return CUDA_SUCCESS;
}

/* A launch from the API: the block duration comes from the function (stub_module.c). */
static CUresult launch_api(CUfunction f, uint64_t blocks, void **params, CUstream s)
{
    return stub_launch(f, blocks, f ? stub_block_ns(f, params) : 0, s);
}

int stub_current_dev(void)
{
    return ready() && current ? current->dev : -1;
}

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    (void)bx, (void)by, (void)bz, (void)shmem, (void)extra;
    return launch_api(f, (uint64_t)gx * gy * gz, params, s);
}

API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    (void)bx, (void)by, (void)bz, (void)shmem, (void)extra;
    return launch_api(f, (uint64_t)gx * gy * gz, params, s ? s : CU_STREAM_PER_THREAD);
}

API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    (void)extra;
    return launch_api(f, (uint64_t)c->gridDimX * c->gridDimY * c->gridDimZ, params, c->hStream);
}

API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    return cuLaunchKernelEx(c, f, params, extra);
}

API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                       unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}

API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                            unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}

API CUresult cuCtxSynchronize(void)
{
    NEED_CTX();
    sim_drain(current->dev);
    pthread_mutex_lock(&mu);
    stub_pools_trim(current->dev); /* a synchronisation point: pools give back memory over their threshold */
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize(CUstream s)
{
    CUcontext c;
    CUresult rc = cuStreamGetCtx(s, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct ctx *saved = current;
    current = (struct ctx *)c;
    rc = cuCtxSynchronize();
    current = saved;
    return rc;
}

/* cuGetProcAddress resolves a base name to the variant the caller's CUDA version expects. */
struct proc {
    const char *name;
    void *fn;
};
#define P(n) {#n, (void *)n},
API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status);
static const struct proc procs[] = {
    P(cuInit) P(cuDriverGetVersion) P(cuDeviceGetCount) P(cuDeviceGet) P(cuDeviceGetAttribute) P(cuDeviceGetUuid)
    P(cuDeviceGetUuid_v2) P(cuDeviceTotalMem_v2) P(cuDevicePrimaryCtxRetain) P(cuCtxCreate_v2) P(cuCtxSetCurrent)
    P(cuCtxGetCurrent) P(cuCtxGetDevice) P(cuMemGetInfo_v2) P(cuMemAlloc_v2) P(cuMemAllocManaged)
    P(cuMemAllocPitch_v2) P(cuMemFree_v2) P(cuMemAllocAsync) P(cuMemAllocAsync_ptsz) P(cuMemAllocFromPoolAsync)
    P(cuMemAllocFromPoolAsync_ptsz) P(cuMemFreeAsync) P(cuMemFreeAsync_ptsz) P(cuMemCreate) P(cuMemRelease)
    P(cuArrayCreate_v2) P(cuArray3DCreate_v2) P(cuArrayDestroy) P(cuMipmappedArrayCreate)
    P(cuMipmappedArrayDestroy) P(cuModuleLoad) P(cuModuleLoadData) P(cuModuleUnload) P(cuModuleGetFunction)
    P(cuLaunchKernel) P(cuLaunchKernel_ptsz)
    P(cuLaunchKernelEx) P(cuLaunchKernelEx_ptsz) P(cuLaunchCooperativeKernel) P(cuLaunchCooperativeKernel_ptsz)
    P(cuCtxSynchronize) P(cuStreamSynchronize) P(cuGetProcAddress) P(cuGetProcAddress_v2)
    STUB_EXEC_PROCS(P)
};

static void *find_proc(const char *name)
{
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++)
        if (strcmp(procs[i].name, name) == 0)
            return procs[i].fn;
    return NULL;
}

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status)
{
    char name[128];
    void *fn = NULL;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
        snprintf(name, sizeof name, "%s_ptsz", symbol);
        fn = find_proc(name);
    }
    if (!fn && version >= 12000 && strcmp(symbol, "cuGetProcAddress") == 0)
        fn = find_proc("cuGetProcAddress_v2");
    if (!fn && version >= 3020) {
        snprintf(name, sizeof name, "%s_v2", symbol);
        fn = find_proc(name);
    }
    if (!fn)
        fn = find_proc(symbol);
    if (status)
        *status = fn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    *pfn = fn;
    return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

/* Test-only extensions (stub.h). */
API uint64_t tessera_stub_busy_ns(int d)
{
    return sim_busy_self(d);
}

API uint64_t tessera_stub_mem_used(int d)
{
    pthread_once(&once, setup);
    return devs[d].used;
}

API uint64_t tessera_stub_mem_total(int d)
{
    pthread_once(&once, setup);
    return devs[d].total;
}

API int tessera_stub_device_count(void)
{
    pthread_once(&once, setup);
    return ndev;
}

API int tessera_stub_has_ctx(int d)
{
    return devs[d].has_ctx;
}

API uint64_t tessera_stub_launches(int d)
{
    return sim_launches_self(d);
}

/* Prototypes of the driver and NVML functions the test programs call directly (linked to the stub). */
#ifndef TESSERA_TEST_CUDA_API_H
#define TESSERA_TEST_CUDA_API_H

#include "tessera/cuda_abi.h"
#include "tessera/nvml_abi.h"

#define DECL(name, type) extern __typeof__(*(type)0) name;
DECL(cuInit, cuInit_fn)
DECL(cuDeviceGet, cuDeviceGet_fn)
DECL(cuDeviceGetCount, cuDeviceGetCount_fn)
DECL(cuDeviceTotalMem_v2, cuDeviceTotalMem_fn)
DECL(cuDeviceGetAttribute, cuDeviceGetAttribute_fn)
DECL(cuDeviceGetUuid, cuDeviceGetUuid_fn)
DECL(cuDeviceGetUuid_v2, cuDeviceGetUuid_fn)
DECL(cuCtxGetDevice, cuCtxGetDevice_fn)
DECL(cuMemGetInfo_v2, cuMemGetInfo_fn)
DECL(cuMemAlloc_v2, cuMemAlloc_fn)
DECL(cuMemAllocPitch_v2, cuMemAllocPitch_fn)
DECL(cuMemAllocManaged, cuMemAllocManaged_fn)
DECL(cuMemFree_v2, cuMemFree_fn)
DECL(cuMemAllocAsync, cuMemAllocAsync_fn)
DECL(cuMemAllocAsync_ptsz, cuMemAllocAsync_fn)
DECL(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_fn)
DECL(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_fn)
DECL(cuMemFreeAsync, cuMemFreeAsync_fn)
DECL(cuMemFreeAsync_ptsz, cuMemFreeAsync_fn)
DECL(cuMemCreate, cuMemCreate_fn)
DECL(cuMemRelease, cuMemRelease_fn)
DECL(cuArrayCreate_v2, cuArrayCreate_fn)
DECL(cuArray3DCreate_v2, cuArray3DCreate_fn)
DECL(cuArrayDestroy, cuArrayDestroy_fn)
DECL(cuMipmappedArrayCreate, cuMipmappedArrayCreate_fn)
DECL(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy_fn)
DECL(cuLaunchKernel, cuLaunchKernel_fn)
DECL(cuLaunchKernel_ptsz, cuLaunchKernel_fn)
DECL(cuLaunchKernelEx, cuLaunchKernelEx_fn)
DECL(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_fn)
DECL(cuGetProcAddress, cuGetProcAddress_v1_fn)
DECL(cuGetProcAddress_v2, cuGetProcAddress_v2_fn)
DECL(nvmlInit_v2, nvmlInit_fn)
DECL(nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetHandleByIndex_fn)
DECL(nvmlDeviceGetHandleByUUID, nvmlDeviceGetHandleByUUID_fn)
DECL(nvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo_fn)
DECL(nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetMemoryInfo_v2_fn)
#undef DECL

CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuModuleLoad(CUmodule *m, const char *path);
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
CUresult cuCtxSynchronize(void);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *ctx);
CUresult cuCtxSetLimit(CUlimit limit, size_t value);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
CUresult cuStreamCreate(CUstream *s, unsigned int flags);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuStreamDestroy_v2(CUstream s);
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev);
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep);
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuGraphCreate(CUgraph *g, unsigned int flags);
CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                CUDA_MEM_ALLOC_NODE_PARAMS *params);
CUresult cuGraphDestroy(CUgraph g);
CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture(CUstream s, CUgraph *g);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec e, CUstream s);
CUresult cuGraphExecDestroy(CUgraphExec e);

/* cuInit + a context on device `dev`; exits the test on failure. */
static inline void tc_context(int dev)
{
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuCtxCreate_v2(&ctx, 0, dev) != CUDA_SUCCESS) {
        fprintf(stderr, "cannot create a context on device %d\n", dev);
        exit(2);
    }
}

static inline CUfunction tc_kernel(const char *name)
{
    CUmodule m;
    CUfunction f;
    if (cuModuleLoad(&m, "stub") != CUDA_SUCCESS || cuModuleGetFunction(&f, m, name) != CUDA_SUCCESS) {
        fprintf(stderr, "cannot load kernel %s\n", name);
        exit(2);
    }
    return f;
}

#endif

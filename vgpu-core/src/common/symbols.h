/*
 * Every driver/NVML entry point vgpu-core hooks or calls, as X-macro lists. One list drives the
 * real-function table, the exported hooks, dlsym interception and cuGetProcAddress rewriting, so
 * adding a hook is one line here plus its body.
 */
#ifndef TESSERA_SYMBOLS_H
#define TESSERA_SYMBOLS_H

#include "tessera/cuda_abi.h"
#include "tessera/nvml_abi.h"

/* Hooked CUDA driver entry points: X(name, function type). */
#define TESSERA_CUDA_HOOKS(X)                                        \
    X(cuInit, cuInit_fn)                                             \
    X(cuGetProcAddress, cuGetProcAddress_v1_fn)                      \
    X(cuGetProcAddress_v2, cuGetProcAddress_v2_fn)                   \
    X(cuMemGetInfo_v2, cuMemGetInfo_fn)                              \
    X(cuDeviceTotalMem_v2, cuDeviceTotalMem_fn)                      \
    X(cuMemAlloc_v2, cuMemAlloc_fn)                                  \
    X(cuMemAllocPitch_v2, cuMemAllocPitch_fn)                        \
    X(cuMemAllocManaged, cuMemAllocManaged_fn)                       \
    X(cuMemFree_v2, cuMemFree_fn)                                    \
    X(cuMemAllocAsync, cuMemAllocAsync_fn)                           \
    X(cuMemAllocAsync_ptsz, cuMemAllocAsync_fn)                      \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_fn)           \
    X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_fn)      \
    X(cuMemFreeAsync, cuMemFreeAsync_fn)                             \
    X(cuMemFreeAsync_ptsz, cuMemFreeAsync_fn)                        \
    X(cuMemCreate, cuMemCreate_fn)                                   \
    X(cuMemRelease, cuMemRelease_fn)                                 \
    X(cuArrayCreate_v2, cuArrayCreate_fn)                            \
    X(cuArray3DCreate_v2, cuArray3DCreate_fn)                        \
    X(cuArrayDestroy, cuArrayDestroy_fn)                             \
    X(cuMipmappedArrayCreate, cuMipmappedArrayCreate_fn)             \
    X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy_fn)           \
    X(cuLaunchKernel, cuLaunchKernel_fn)                             \
    X(cuLaunchKernel_ptsz, cuLaunchKernel_fn)                        \
    X(cuLaunchKernelEx, cuLaunchKernelEx_fn)                         \
    X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx_fn)                    \
    X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_fn)       \
    X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel_fn)  \
    X(cuGraphLaunch, cuGraphLaunch_fn)                               \
    X(cuGraphLaunch_ptsz, cuGraphLaunch_fn)                          \
    X(cuMemAlloc, cuMemAlloc_v1_fn)                                  \
    X(cuMemAllocPitch, cuMemAllocPitch_v1_fn)                        \
    X(cuMemGetInfo, cuMemGetInfo_v1_fn)                              \
    X(cuDeviceTotalMem, cuDeviceTotalMem_v1_fn)                      \
    X(cuArrayCreate, cuArrayCreate_v1_fn)                            \
    X(cuArray3DCreate, cuArray3DCreate_v1_fn)                        \
    X(cuCtxCreate_v2, cuCtxCreate_fn)                                \
    X(cuCtxCreate_v3, cuCtxCreate_v3_fn)                             \
    X(cuCtxCreate_v4, cuCtxCreate_v4_fn)                             \
    X(cuCtxDestroy_v2, cuCtxDestroy_fn)                              \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain_fn)         \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_fn)       \
    X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease_fn)    \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_fn)           \
    X(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset_fn)        \
    X(cuCtxSetLimit, cuCtxSetLimit_fn)                               \
    X(cuCtxSynchronize, cuCtxSynchronize_fn)                         \
    X(cuStreamSynchronize, cuStreamSynchronize_fn)                   \
    X(cuStreamSynchronize_ptsz, cuStreamSynchronize_fn)              \
    X(cuEventSynchronize, cuEventSynchronize_fn)                     \
    X(cuMemPoolCreate, cuMemPoolCreate_fn)                           \
    X(cuMemPoolDestroy, cuMemPoolDestroy_fn)                         \
    X(cuMemPoolTrimTo, cuMemPoolTrimTo_fn)                           \
    X(cuMemMap, cuMemMap_fn)                                         \
    X(cuMemUnmap, cuMemUnmap_fn)                                     \
    X(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode_fn)             \
    X(cuGraphDestroy, cuGraphDestroy_fn)

/* CUDA entry points vgpu-core only calls. */
#define TESSERA_CUDA_CALLS(X)                                        \
    X(cuCtxGetDevice, cuCtxGetDevice_fn)                             \
    X(cuDeviceGetCount, cuDeviceGetCount_fn)                         \
    X(cuDeviceGetAttribute, cuDeviceGetAttribute_fn)                 \
    X(cuDeviceGetUuid, cuDeviceGetUuid_fn)                           \
    X(cuDeviceGetUuid_v2, cuDeviceGetUuid_fn)                        \
    X(cuCtxPushCurrent_v2, cuCtxPushCurrent_fn)                      \
    X(cuCtxPopCurrent_v2, cuCtxPopCurrent_fn)                        \
    X(cuStreamGetCtx, cuStreamGetCtx_fn)                             \
    X(cuDeviceGetMemPool, cuDeviceGetMemPool_fn)                     \
    X(cuMemPoolGetAttribute, cuMemPoolGetAttribute_fn)               \
    X(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState_fn)     \
    TESSERA_CUDA_TIMING_CALLS(X)

/* What the SM limiter times launches and detects stream capture with (it also calls the real
 * cuEventSynchronize, which is hooked above). */
#define TESSERA_CUDA_TIMING_CALLS(X)                                 \
    X(cuCtxGetCurrent, cuCtxGetCurrent_fn)                           \
    X(cuEventCreate, cuEventCreate_fn)                               \
    X(cuEventRecord, cuEventRecord_fn)                               \
    X(cuEventQuery, cuEventQuery_fn)                                 \
    X(cuEventElapsedTime, cuEventElapsedTime_fn)                     \
    X(cuEventDestroy_v2, cuEventDestroy_fn)                          \
    X(cuStreamIsCapturing, cuStreamIsCapturing_fn)

#define TESSERA_NVML_HOOKS(X)                                        \
    X(nvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo_fn)           \
    X(nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetMemoryInfo_v2_fn)

#define TESSERA_NVML_CALLS(X)                                        \
    X(nvmlInit_v2, nvmlInit_fn)                                      \
    X(nvmlDeviceGetHandleByUUID, nvmlDeviceGetHandleByUUID_fn)       \
    X(nvmlDeviceGetUUID, nvmlDeviceGetUUID_fn)                       \
    X(nvmlDeviceGetIndex, nvmlDeviceGetIndex_fn)                     \
    X(nvmlDeviceGetUtilizationRates, nvmlDeviceGetUtilizationRates_fn) \
    X(nvmlDeviceGetProcessUtilization, nvmlDeviceGetProcessUtilization_fn) \
    X(nvmlDeviceGetComputeRunningProcesses_v3, nvmlDeviceGetComputeRunningProcesses_fn)

#define TESSERA_DECLARE_FIELD(name, type) type name;

/* Real driver functions, resolved once; a NULL field means the driver lacks the symbol. */
struct tessera_real_cuda {
    TESSERA_CUDA_HOOKS(TESSERA_DECLARE_FIELD)
    TESSERA_CUDA_CALLS(TESSERA_DECLARE_FIELD)
};
struct tessera_real_nvml {
    TESSERA_NVML_HOOKS(TESSERA_DECLARE_FIELD)
    TESSERA_NVML_CALLS(TESSERA_DECLARE_FIELD)
};

extern struct tessera_real_cuda tessera_cuda;
extern struct tessera_real_nvml tessera_nvml;

/* Every hook is exported (the library is built with hidden visibility) so that direct calls and
 * dlsym(RTLD_DEFAULT) land in it. */
#define TESSERA_EXPORT __attribute__((visibility("default")))
#define TESSERA_DECLARE_HOOK(name, type) TESSERA_EXPORT extern __typeof__(*(type)0) name;
TESSERA_CUDA_HOOKS(TESSERA_DECLARE_HOOK)
TESSERA_NVML_HOOKS(TESSERA_DECLARE_HOOK)

/*
 * dlsym runs before everything else, even inside sanitizer runtimes during their own start-up, so
 * its path is kept free of instrumentation and of intercepted libc string functions.
 */
#define TESSERA_EARLY __attribute__((no_sanitize("address", "undefined")))

/*
 * The loader's real lookup and open functions. The public ones are this library's (intercept/), so
 * these are found without them (see elf_next.h); NULL until tessera_resolve_real_dlsym has run, or
 * when the loader lacks one.
 */
extern void *(*tessera_real_dlsym)(void *, const char *);
extern void *(*tessera_real_dlvsym)(void *, const char *, const char *);
extern void *(*tessera_real_dlopen)(const char *, int);
extern void *(*tessera_real_dlmopen)(long, const char *, int); /* Lmid_t is a long */
void tessera_resolve_real_dlsym(void);

#endif

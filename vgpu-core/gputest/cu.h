/*
 * The CUDA driver API as the kit uses it: libcuda.so.1 opened with dlopen, every entry point looked up
 * with dlsym (so the preloaded hook library, which interposes dlsym, hands out its hooks exactly as it
 * does to the CUDA runtime). Types come from vgpu-core's own ABI header: no CUDA toolkit needed.
 */
#ifndef GPUTEST_CU_H
#define GPUTEST_CU_H

#include <stdint.h>

#include "tessera/cuda_abi.h"

#define GPUTEST_CU_FUNCS(X)                                                                    \
    X(cuInit, CUresult (*)(unsigned))                                                          \
    X(cuDeviceGetCount, CUresult (*)(int *))                                                   \
    X(cuDeviceGetAttribute, CUresult (*)(int *, CUdevice_attribute, CUdevice))                 \
    X(cuDeviceGetUuid, CUresult (*)(CUuuid *, CUdevice))                                       \
    X(cuDeviceTotalMem_v2, CUresult (*)(size_t *, CUdevice))                                   \
    X(cuDevicePrimaryCtxRetain, CUresult (*)(CUcontext *, CUdevice))                           \
    X(cuCtxSetCurrent, CUresult (*)(CUcontext))                                                \
    X(cuCtxSynchronize, CUresult (*)(void))                                                    \
    X(cuMemGetInfo_v2, CUresult (*)(size_t *, size_t *))                                       \
    X(cuMemAlloc_v2, CUresult (*)(CUdeviceptr *, size_t))                                      \
    X(cuMemFree_v2, CUresult (*)(CUdeviceptr))                                                 \
    X(cuModuleLoadData, CUresult (*)(CUmodule *, const void *))                                \
    X(cuModuleGetFunction, CUresult (*)(CUfunction *, CUmodule, const char *))                 \
    X(cuLaunchKernel, cuLaunchKernel_fn)                                                       \
    X(cuStreamCreate, CUresult (*)(CUstream *, unsigned))                                      \
    X(cuStreamBeginCapture_v2, CUresult (*)(CUstream, CUstreamCaptureMode))                    \
    X(cuStreamEndCapture, CUresult (*)(CUstream, CUgraph *))                                   \
    X(cuGraphInstantiateWithFlags, CUresult (*)(CUgraphExec *, CUgraph, unsigned long long))   \
    X(cuGraphLaunch, cuGraphLaunch_fn)

#define GPUTEST_CU_FIELD(name, type) __typeof__(type) name;
struct cu {
    GPUTEST_CU_FUNCS(GPUTEST_CU_FIELD)
    CUresult (*cuGetErrorName)(CUresult, const char **); /* optional */
};
extern struct cu cu;

/* Opens the driver (TESSERA_GPUTEST_CUDA or libcuda.so.1) and resolves every function; 0 on success,
 * else -1 with a message in err. */
int cu_open(char *err, size_t len);
/* The error's name, e.g. "CUDA_ERROR_OUT_OF_MEMORY". */
const char *cu_name(CUresult rc);
/* cuInit and the primary context of device 0 made current; 0 or -1 with a message. */
int cu_context(char *err, size_t len);
/* Loads the kit's PTX and returns its spin kernel; 0 or -1 with a message. */
int cu_spin_kernel(CUfunction *f, char *err, size_t len);
/* Formats a device UUID as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
void cu_uuid_string(const CUuuid *u, char *out, size_t len);

uint64_t gputest_now_ns(void);

#endif

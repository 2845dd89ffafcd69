/* Loading the CUDA driver and the kit's kernel (see cu.h). */
#define _GNU_SOURCE
#include "cu.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels.h"

struct cu cu;

uint64_t gputest_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int cu_open(char *err, size_t len)
{
    const char *path = getenv("TESSERA_GPUTEST_CUDA");
    if (!path || !*path)
        path = "libcuda.so.1";
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        snprintf(err, len, "cannot load the CUDA driver %s: %s", path, dlerror());
        return -1;
    }
#define GPUTEST_CU_RESOLVE(name, type)                                                             \
    if (!(*(void **)&cu.name = dlsym(h, #name))) {                                                 \
        snprintf(err, len, "the CUDA driver %s lacks %s (driver too old?)", path, #name);          \
        return -1;                                                                                 \
    }
    GPUTEST_CU_FUNCS(GPUTEST_CU_RESOLVE)
#undef GPUTEST_CU_RESOLVE
    *(void **)&cu.cuGetErrorName = dlsym(h, "cuGetErrorName");
    return 0;
}

const char *cu_name(CUresult rc)
{
    const char *s = NULL;
    if (cu.cuGetErrorName && cu.cuGetErrorName(rc, &s) == CUDA_SUCCESS && s)
        return s;
    switch (rc) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_OPERATING_SYSTEM: return "CUDA_ERROR_OPERATING_SYSTEM";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    default: return "CUDA error";
    }
}

int cu_context(char *err, size_t len)
{
    CUcontext ctx;
    CUresult rc = cu.cuInit(0);
    if (rc == CUDA_SUCCESS)
        rc = cu.cuDevicePrimaryCtxRetain(&ctx, 0);
    if (rc == CUDA_SUCCESS)
        rc = cu.cuCtxSetCurrent(ctx);
    if (rc != CUDA_SUCCESS) {
        snprintf(err, len, "no context on device 0: %s (%d)", cu_name(rc), (int)rc);
        return -1;
    }
    return 0;
}

int cu_spin_kernel(CUfunction *f, char *err, size_t len)
{
    CUmodule m;
    CUresult rc = cu.cuModuleLoadData(&m, gputest_ptx);
    if (rc != CUDA_SUCCESS) {
        snprintf(err, len, "cuModuleLoadData of the kit's PTX failed: %s (%d)", cu_name(rc), (int)rc);
        return -1;
    }
    rc = cu.cuModuleGetFunction(f, m, GPUTEST_KERNEL);
    if (rc != CUDA_SUCCESS) {
        snprintf(err, len, "cuModuleGetFunction(%s) failed: %s (%d)", GPUTEST_KERNEL, cu_name(rc), (int)rc);
        return -1;
    }
    return 0;
}

void cu_uuid_string(const CUuuid *u, char *out, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

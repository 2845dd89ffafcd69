/*
 * The subset of the CUDA driver API that vgpu-core hooks or calls, declared from the public
 * driver API reference. Names, enum values and struct layouts must match libcuda.so.1 exactly:
 * the library sits between applications compiled against NVIDIA's cuda.h and the real driver.
 * Only 64-bit Linux is supported (CUdeviceptr is 64 bits wide).
 */
#ifndef TESSERA_CUDA_ABI_H
#define TESSERA_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_OPERATING_SYSTEM = 304,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;          /* CUdeviceptr_v2 on 64-bit */
typedef uint64_t cuuint64_t;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;

/* The stream handles that name the current context's default streams. */
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

typedef enum CUevent_flags_enum {
    CU_EVENT_DEFAULT = 0x0,
    CU_EVENT_BLOCKING_SYNC = 0x1,
    CU_EVENT_DISABLE_TIMING = 0x2
} CUevent_flags;

typedef enum CUstreamCaptureStatus_enum {
    CU_STREAM_CAPTURE_STATUS_NONE = 0,
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} CUstreamCaptureStatus;

typedef enum CUstreamCaptureMode_enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED = 2
} CUstreamCaptureMode;

typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

typedef enum CUdevice_attribute_enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39
} CUdevice_attribute;

typedef enum CUlimit_enum {
    CU_LIMIT_STACK_SIZE = 0x00,        /* bytes per thread: reserved for every resident thread */
    CU_LIMIT_PRINTF_FIFO_SIZE = 0x01,
    CU_LIMIT_MALLOC_HEAP_SIZE = 0x02
} CUlimit;

typedef enum CUmemPool_attribute_enum {
    CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,      /* cuuint64_t: bytes a pool keeps at synchronisation */
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,   /* cuuint64_t: physical memory the pool holds */
    CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,       /* cuuint64_t: memory handed out to allocations */
    CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8
} CUmemPool_attribute;

typedef enum CUarray_format_enum {
    CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
    CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
    CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
    CU_AD_FORMAT_SIGNED_INT8 = 0x08,
    CU_AD_FORMAT_SIGNED_INT16 = 0x09,
    CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
    CU_AD_FORMAT_HALF = 0x10,
    CU_AD_FORMAT_FLOAT = 0x20
} CUarray_format;

typedef struct CUDA_ARRAY_DESCRIPTOR_st {          /* CUDA_ARRAY_DESCRIPTOR_v2 */
    size_t Width;
    size_t Height;
    CUarray_format Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {        /* CUDA_ARRAY3D_DESCRIPTOR_v2 */
    size_t Width;
    size_t Height;
    size_t Depth;
    CUarray_format Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

typedef enum CUmemLocationType_enum {
    CU_MEM_LOCATION_TYPE_INVALID = 0,
    CU_MEM_LOCATION_TYPE_DEVICE = 1,
    CU_MEM_LOCATION_TYPE_HOST = 2
} CUmemLocationType;

typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    int type;                       /* CUmemAllocationType: 1 = pinned */
    int requestedHandleTypes;       /* CUmemAllocationHandleType */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemPoolProps_st {          /* CUmemPoolProps_v1 (88 bytes) */
    int allocType;
    int handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

typedef struct CUmemAccessDesc_st CUmemAccessDesc;  /* opaque here: passed through */

typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_st {  /* CUDA_MEM_ALLOC_NODE_PARAMS_v1 */
    CUmemPoolProps poolProps;
    const CUmemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;                        /* out */
} CUDA_MEM_ALLOC_NODE_PARAMS;

typedef struct CUlaunchAttribute_st CUlaunchAttribute;  /* opaque here: passed through */

typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

typedef enum CUdriverProcAddress_flags_enum {
    CU_GET_PROC_ADDRESS_DEFAULT = 0,
    CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1 << 0,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1
} CUdriverProcAddress_flags;

typedef enum CUdriverProcAddressQueryResult_enum {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} CUdriverProcAddressQueryResult;

/* The function types below name every entry point vgpu-core touches. */
typedef CUresult (*cuInit_fn)(unsigned int);
typedef CUresult (*cuDriverGetVersion_fn)(int *);
typedef CUresult (*cuDeviceGet_fn)(CUdevice *, int);
typedef CUresult (*cuDeviceGetCount_fn)(int *);
typedef CUresult (*cuDeviceGetAttribute_fn)(int *, CUdevice_attribute, CUdevice);
typedef CUresult (*cuDeviceGetUuid_fn)(CUuuid *, CUdevice);
typedef CUresult (*cuDeviceTotalMem_fn)(size_t *, CUdevice);
typedef CUresult (*cuCtxGetDevice_fn)(CUdevice *);
typedef CUresult (*cuCtxGetCurrent_fn)(CUcontext *);
typedef CUresult (*cuMemGetInfo_fn)(size_t *, size_t *);
typedef CUresult (*cuMemAlloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*cuMemAllocPitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
typedef CUresult (*cuMemAllocManaged_fn)(CUdeviceptr *, size_t, unsigned int);
typedef CUresult (*cuMemFree_fn)(CUdeviceptr);
typedef CUresult (*cuMemAllocAsync_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*cuMemAllocFromPoolAsync_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*cuMemFreeAsync_fn)(CUdeviceptr, CUstream);
typedef CUresult (*cuMemCreate_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                                   unsigned long long);
typedef CUresult (*cuMemRelease_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*cuArrayCreate_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
typedef CUresult (*cuArray3DCreate_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
typedef CUresult (*cuArrayDestroy_fn)(CUarray);
typedef CUresult (*cuMipmappedArrayCreate_fn)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int);
typedef CUresult (*cuMipmappedArrayDestroy_fn)(CUmipmappedArray);
typedef CUresult (*cuLaunchKernel_fn)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                                      unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
typedef CUresult (*cuLaunchKernelEx_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*cuLaunchCooperativeKernel_fn)(CUfunction, unsigned int, unsigned int, unsigned int,
                                                 unsigned int, unsigned int, unsigned int, unsigned int,
                                                 CUstream, void **);
typedef CUresult (*cuGraphLaunch_fn)(CUgraphExec, CUstream);
typedef CUresult (*cuEventCreate_fn)(CUevent *, unsigned int);
typedef CUresult (*cuEventRecord_fn)(CUevent, CUstream);
typedef CUresult (*cuEventQuery_fn)(CUevent);
typedef CUresult (*cuEventSynchronize_fn)(CUevent);
typedef CUresult (*cuEventElapsedTime_fn)(float *, CUevent, CUevent);
typedef CUresult (*cuEventDestroy_fn)(CUevent);
typedef CUresult (*cuStreamIsCapturing_fn)(CUstream, CUstreamCaptureStatus *);
typedef CUresult (*cuGetProcAddress_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*cuGetProcAddress_v2_fn)(const char *, void **, int, cuuint64_t,
                                           CUdriverProcAddressQueryResult *);

typedef CUresult (*cuCtxCreate_fn)(CUcontext *, unsigned int, CUdevice);
typedef CUresult (*cuCtxCreate_v3_fn)(CUcontext *, void *, int, unsigned int, CUdevice);
typedef CUresult (*cuCtxCreate_v4_fn)(CUcontext *, void *, unsigned int, CUdevice);
typedef CUresult (*cuCtxDestroy_fn)(CUcontext);
typedef CUresult (*cuCtxPushCurrent_fn)(CUcontext);
typedef CUresult (*cuCtxPopCurrent_fn)(CUcontext *);
typedef CUresult (*cuCtxSetLimit_fn)(CUlimit, size_t);
typedef CUresult (*cuCtxGetLimit_fn)(size_t *, CUlimit);
typedef CUresult (*cuCtxSynchronize_fn)(void);
typedef CUresult (*cuDevicePrimaryCtxRetain_fn)(CUcontext *, CUdevice);
typedef CUresult (*cuDevicePrimaryCtxRelease_fn)(CUdevice);
typedef CUresult (*cuDevicePrimaryCtxReset_fn)(CUdevice);
typedef CUresult (*cuDevicePrimaryCtxGetState_fn)(CUdevice, unsigned int *, int *);
typedef CUresult (*cuStreamGetCtx_fn)(CUstream, CUcontext *);
typedef CUresult (*cuStreamSynchronize_fn)(CUstream);
typedef CUresult (*cuDeviceGetMemPool_fn)(CUmemoryPool *, CUdevice);
typedef CUresult (*cuMemPoolCreate_fn)(CUmemoryPool *, const CUmemPoolProps *);
typedef CUresult (*cuMemPoolDestroy_fn)(CUmemoryPool);
typedef CUresult (*cuMemPoolTrimTo_fn)(CUmemoryPool, size_t);
typedef CUresult (*cuMemPoolGetAttribute_fn)(CUmemoryPool, CUmemPool_attribute, void *);
typedef CUresult (*cuMemPoolSetAttribute_fn)(CUmemoryPool, CUmemPool_attribute, void *);
typedef CUresult (*cuMemMap_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*cuMemUnmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*cuGraphAddMemAllocNode_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                              CUDA_MEM_ALLOC_NODE_PARAMS *);
typedef CUresult (*cuGraphDestroy_fn)(CUgraph);

/* Pre-3.2 (32-bit size) entry points still exported by libcuda for old binaries. */
typedef CUresult (*cuMemAlloc_v1_fn)(unsigned int *, unsigned int);
typedef CUresult (*cuMemAllocPitch_v1_fn)(unsigned int *, unsigned int *, unsigned int, unsigned int, unsigned int);
typedef CUresult (*cuMemGetInfo_v1_fn)(unsigned int *, unsigned int *);
typedef CUresult (*cuDeviceTotalMem_v1_fn)(unsigned int *, CUdevice);
typedef CUresult (*cuArrayCreate_v1_fn)(CUarray *, const void *);
typedef CUresult (*cuArray3DCreate_v1_fn)(CUarray *, const void *);

#ifdef __cplusplus
}
#endif
#endif

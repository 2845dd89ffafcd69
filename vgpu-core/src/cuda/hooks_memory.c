/* Allocation and free hooks: every path that takes device memory charges the current card. */
#include "../common/log.h"
#include "../process/state.h"
#include "../limits/memory.h"

/* Releases the charge of a freed handle once the driver confirms the free. */
#define TESSERA_COUNTED_FREE(kind, handle, call)                                        \
    do {                                                                             \
        struct mem_record rec_;                                                      \
        if (!tessera.any_mem_limit || !tessera_mem_untrack((kind), (uint64_t)(handle), &rec_)) \
            return (call);                                                           \
        CUresult rc_ = (call);                                                       \
        if (rc_ == CUDA_SUCCESS)                                                     \
            tessera_mem_unreserve(rec_.card, rec_.bytes);                            \
        else                                                                         \
            tessera_mem_track_full(&rec_);                                           \
        return rc_;                                                                  \
    } while (0)

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    TESSERA_REAL(cuMemAlloc_v2);
    int card = tessera_mem_card();
    TESSERA_COUNTED_ALLOC(card, bytesize, MEM_PTR, real_cuMemAlloc_v2(dptr, bytesize), *dptr);
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    TESSERA_REAL(cuMemAllocManaged);
    int card = tessera_mem_card();
    TESSERA_COUNTED_ALLOC(card, bytesize, MEM_PTR, real_cuMemAllocManaged(dptr, bytesize, flags), *dptr);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem)
{
    TESSERA_REAL(cuMemAllocPitch_v2);
    int card = tessera_mem_card();
    if (card == -1)
        return real_cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
    /* The pitch is only known afterwards: charge an estimate, then settle the difference. */
    uint64_t estimate = (((uint64_t)width + 511) & ~511ULL) * height;
    if (tessera_mem_reserve(card, estimate) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real_cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
    if (rc != CUDA_SUCCESS) {
        tessera_mem_unreserve(card, estimate);
        return rc;
    }
    uint64_t actual = (uint64_t)*pitch * height;
    if (actual > estimate && tessera_mem_reserve(card, actual - estimate) != CUDA_SUCCESS) {
        if (tessera_cuda.cuMemFree_v2)
            tessera_cuda.cuMemFree_v2(*dptr);
        tessera_mem_unreserve(card, estimate);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < estimate)
        tessera_mem_unreserve(card, estimate - actual);
    tessera_mem_track(MEM_PTR, *dptr, card, actual);
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    TESSERA_REAL(cuMemFree_v2);
    TESSERA_COUNTED_FREE(MEM_PTR, dptr, real_cuMemFree_v2(dptr));
}

/* VMM: physical memory is taken by cuMemCreate on prop->location, not by cuMemMap. */
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    TESSERA_REAL(cuMemCreate);
    int card = -1;
    if (prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        card = tessera_mem_card_of_device(prop->location.id);
    TESSERA_COUNTED_ALLOC(card, size, MEM_VMM, real_cuMemCreate(handle, size, prop, flags), *handle);
}

CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    TESSERA_REAL(cuArrayCreate_v2);
    int card = desc ? tessera_mem_card() : -1;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {0};
    if (desc)
        d3 = (CUDA_ARRAY3D_DESCRIPTOR){desc->Width, desc->Height, 0, desc->Format, desc->NumChannels, 0};
    TESSERA_COUNTED_ALLOC(card, tessera_array_bytes(&d3), MEM_ARRAY, real_cuArrayCreate_v2(arr, desc),
                          (uintptr_t)*arr);
}

CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    TESSERA_REAL(cuArray3DCreate_v2);
    int card = desc ? tessera_mem_card() : -1;
    TESSERA_COUNTED_ALLOC(card, tessera_array_bytes(desc), MEM_ARRAY, real_cuArray3DCreate_v2(arr, desc),
                          (uintptr_t)*arr);
}

CUresult cuArrayDestroy(CUarray arr)
{
    TESSERA_REAL(cuArrayDestroy);
    TESSERA_COUNTED_FREE(MEM_ARRAY, (uintptr_t)arr, real_cuArrayDestroy(arr));
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels)
{
    TESSERA_REAL(cuMipmappedArrayCreate);
    int card = desc ? tessera_mem_card() : -1;
    TESSERA_COUNTED_ALLOC(card, tessera_mipmap_bytes(desc, levels), MEM_MIPMAP,
                          real_cuMipmappedArrayCreate(arr, desc, levels), (uintptr_t)*arr);
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr)
{
    TESSERA_REAL(cuMipmappedArrayDestroy);
    TESSERA_COUNTED_FREE(MEM_MIPMAP, (uintptr_t)arr, real_cuMipmappedArrayDestroy(arr));
}

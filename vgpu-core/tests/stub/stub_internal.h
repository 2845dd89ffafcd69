/* Shared between the stub driver's source files; not part of any NVIDIA ABI. */
#ifndef TESSERA_STUB_INTERNAL_H
#define TESSERA_STUB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/cuda_abi.h"

#define API __attribute__((visibility("default")))

struct ctx {
    int dev;          /* physical card */
    int ordinal;      /* what cuCtxGetDevice reports: the card's place in CUDA_VISIBLE_DEVICES */
    int primary;      /* the device's primary context (retained/released/reset, never destroyed) */
    int refs, active; /* primary only: retain count; whether it exists on the card */
    uint64_t footprint;      /* card memory the context itself takes (TESSERA_STUB_CTX_MIB) */
    uint64_t limit_bytes[3]; /* what cuCtxSetLimit reserved, per CUlimit */
};

/* The UUID of physical card phys: the card's own from TESSERA_STUB_DEVICE_DIR, else
 * GPU-7e55e7a0-…-0000000000<phys in hex>. For a MIG device of the directory this is the
 * MIG device's own UUID (cuDeviceGetUuid_v2), and its string starts with MIG-. */
void stub_uuid_bytes(int phys, unsigned char out[16]);
void stub_uuid_string(int phys, char *buf, size_t len);
/* What cuDeviceGetUuid (v1) reports: the parent card's UUID for a MIG device, else the
 * card's own. */
void stub_uuid_v1_bytes(int phys, unsigned char out[16]);

/* The cards of TESSERA_STUB_DEVICE_DIR, in index order (stub_visible.c); -1 when it is unset. */
#define STUB_MAX_DIR_CARDS 16
struct stub_dir_card {
    unsigned char uuid[16];
    uint64_t memory_mib;
    unsigned sms;
    int mig;                   /* a MIG device ("MIG-<uuid> MEMORY_MIB SMS GPU-<parent>") */
    unsigned char parent[16];  /* its parent card's UUID */
};
int stub_dir_cards(const struct stub_dir_card **cards);
/* Fills vis[ordinal] = physical card from CUDA_VISIBLE_DEVICES; returns the number of ordinals. */
int stub_visible_cards(int ndev, int vis[]);

/* stub_cuda.c: the cards, their memory and the calling thread's context. */
int stub_phys(CUdevice ordinal);
int stub_initialised(void);
struct ctx *stub_current(void);
void stub_set_current(struct ctx *c);
struct ctx *stub_primary(int phys_dev);
void stub_lock(void);
void stub_unlock(void);
void stub_charge(int dev, int64_t delta);              /* under the lock */
uint64_t stub_free_bytes(int dev);                     /* under the lock */
unsigned stub_sms(int dev);
void stub_free_owned(const void *owner);               /* under the lock */
CUresult stub_take(int dev, uint64_t size, int kind, unsigned long long *key, const void *owner);
CUresult stub_release_vmm(uint64_t handle);
void tessera_stub_mark_ctx(int dev);
API CUresult cuMemFree_v2(CUdeviceptr p);

/* stub_lifecycle.c: contexts, pools, VMM mappings, graph memory nodes (streams: stub_exec.h). */
void stub_pools_trim(int dev);                         /* under the lock: a synchronisation point */
API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d);
API CUresult cuCtxCreate_v2(CUcontext *c, unsigned int flags, CUdevice d);
API CUresult cuMemAllocAsync(CUdeviceptr *p, size_t size, CUstream s);
API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t size, CUstream s);
API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t size, CUmemoryPool pool, CUstream s);
API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t size, CUmemoryPool pool, CUstream s);
API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s);
API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s);
API CUresult cuMemRelease(CUmemGenericAllocationHandle h);

#endif

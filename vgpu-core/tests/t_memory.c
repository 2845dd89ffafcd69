/*
 * Memory limit behaviour of one process, run with and without LD_PRELOAD. The runner sets
 * EXPECT_LIMIT to the capacity the process should see (the container limit with the library,
 * the stub card's memory without it) and EXPECT_HOOKED to 1 when the library is preloaded.
 * Usage: t_memory edge|apis|report|procaddr|unknown-free|refuse-all|region-fail
 */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "common.h"
#include "cuda_api.h"

static uint64_t limit;
static int hooked, dev;

static uint64_t used_now(void)
{
    size_t free_b = 0, total = 0;
    cuMemGetInfo_v2(&free_b, &total);
    return total - free_b;
}

static void test_edge(void)
{
    CASE("allocations up to the limit pass, one byte more fails, frees give room back");
    CUdeviceptr a, b, c;
    CHECK(cuMemAlloc_v2(&a, limit - 4096) == CUDA_SUCCESS, "limit-4096 bytes");
    CHECK(cuMemAlloc_v2(&b, 4096) == CUDA_SUCCESS, "the last 4096 bytes");
    CHECK(cuMemAlloc_v2(&c, 1) == CUDA_ERROR_OUT_OF_MEMORY, "one byte over the limit");
    CHECK(cuMemFree_v2(b) == CUDA_SUCCESS, "free");
    CHECK(cuMemAlloc_v2(&c, 4097) == CUDA_ERROR_OUT_OF_MEMORY, "room+1");
    CHECK(cuMemAlloc_v2(&c, 4096) == CUDA_SUCCESS, "room exactly");
    CHECK(cuMemFree_v2(c) == CUDA_SUCCESS && cuMemFree_v2(a) == CUDA_SUCCESS, "free all");
    CHECK(used_now() == 0, "used %llu after freeing everything", (unsigned long long)used_now());
    CHECK(cuMemAlloc_v2(&a, limit) == CUDA_SUCCESS, "the whole limit at once after frees");
    CHECK(cuMemFree_v2(a) == CUDA_SUCCESS, "free");
    CHECK(cuMemAlloc_v2(&a, limit + 1) == CUDA_ERROR_OUT_OF_MEMORY, "limit+1 at once");
}

struct api_case {
    const char *name;
    uint64_t bytes;
    CUresult (*alloc)(uint64_t bytes, uint64_t *handle);
    CUresult (*release)(uint64_t handle);
};

static CUresult a_alloc(uint64_t n, uint64_t *h) { return cuMemAlloc_v2((CUdeviceptr *)h, n); }
static CUresult a_managed(uint64_t n, uint64_t *h) { return cuMemAllocManaged((CUdeviceptr *)h, n, 1); }
static CUresult a_async(uint64_t n, uint64_t *h) { return cuMemAllocAsync((CUdeviceptr *)h, n, NULL); }
static CUresult a_async_ptsz(uint64_t n, uint64_t *h) { return cuMemAllocAsync_ptsz((CUdeviceptr *)h, n, NULL); }
static CUmemoryPool dev_pool(void)
{
    CUmemoryPool p = NULL;
    cuDeviceGetMemPool(&p, dev);
    return p;
}
static CUresult a_pool(uint64_t n, uint64_t *h) { return cuMemAllocFromPoolAsync((CUdeviceptr *)h, n, dev_pool(), NULL); }
static CUresult a_pool_ptsz(uint64_t n, uint64_t *h)
{
    return cuMemAllocFromPoolAsync_ptsz((CUdeviceptr *)h, n, dev_pool(), NULL);
}
static CUresult a_pitch(uint64_t n, uint64_t *h)
{
    size_t pitch;
    return cuMemAllocPitch_v2((CUdeviceptr *)h, &pitch, 1000, n / 1024, 4); /* pitch 1024 */
}
static CUresult a_vmm(uint64_t n, uint64_t *h)
{
    CUmemAllocationProp p = {.type = 1, .location = {CU_MEM_LOCATION_TYPE_DEVICE, dev}};
    return cuMemCreate((CUmemGenericAllocationHandle *)h, n, &p, 0);
}
static CUresult a_array(uint64_t n, uint64_t *h)
{
    CUDA_ARRAY_DESCRIPTOR d = {n / 16, 1, CU_AD_FORMAT_FLOAT, 4};
    return cuArrayCreate_v2((CUarray *)h, &d);
}
static CUresult a_array3d(uint64_t n, uint64_t *h)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {1024, n / (1024 * 8 * 2), 8, CU_AD_FORMAT_HALF, 1, 0};
    return cuArray3DCreate_v2((CUarray *)h, &d);
}
static CUresult a_mipmap(uint64_t n, uint64_t *h)
{
    /* Two levels of a 1-D uchar4 array: w*4 + w/2*4 bytes = n when w = n/6. */
    CUDA_ARRAY3D_DESCRIPTOR d = {n / 6, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
    return cuMipmappedArrayCreate((CUmipmappedArray *)h, &d, 2);
}
static CUresult f_free(uint64_t h) { return cuMemFree_v2(h); }
/* A pool gives the card its memory back at a synchronisation point, not at the free. */
static CUresult f_async(uint64_t h)
{
    CUresult rc = cuMemFreeAsync(h, NULL);
    return rc == CUDA_SUCCESS ? cuStreamSynchronize(NULL) : rc;
}
static CUresult f_async_ptsz(uint64_t h)
{
    CUresult rc = cuMemFreeAsync_ptsz(h, NULL);
    return rc == CUDA_SUCCESS ? cuStreamSynchronize(NULL) : rc;
}
static CUresult f_vmm(uint64_t h) { return cuMemRelease(h); }
static CUresult f_array(uint64_t h) { return cuArrayDestroy((CUarray)(uintptr_t)h); }
static CUresult f_mipmap(uint64_t h) { return cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)h); }

static void test_apis(void)
{
    /* Each API takes about 3/4 of the limit: a second allocation must be refused by whoever enforces. */
    uint64_t q = (limit / 4 * 3) & ~(uint64_t)(6 * 1024 * 16 - 1);
    struct api_case cases[] = {
        {"cuMemAlloc_v2", q, a_alloc, f_free},
        {"cuMemAllocManaged", q, a_managed, f_free},
        {"cuMemAllocAsync", q, a_async, f_async},
        {"cuMemAllocAsync_ptsz", q, a_async_ptsz, f_async_ptsz},
        {"cuMemAllocFromPoolAsync", q, a_pool, f_async},
        {"cuMemAllocFromPoolAsync_ptsz", q, a_pool_ptsz, f_async_ptsz},
        {"cuMemAllocPitch_v2", q, a_pitch, f_free},
        {"cuMemCreate", q, a_vmm, f_vmm},
        {"cuArrayCreate_v2", q, a_array, f_array},
        {"cuArray3DCreate_v2", q, a_array3d, f_array},
        {"cuMipmappedArrayCreate", q, a_mipmap, f_mipmap},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct api_case *c = &cases[i];
        CASE(c->name);
        uint64_t h1 = 0, h2 = 0;
        CHECK(c->alloc(c->bytes, &h1) == CUDA_SUCCESS, "first allocation of %llu", (unsigned long long)c->bytes);
        CHECK(used_now() == c->bytes, "used %llu, want %llu", (unsigned long long)used_now(),
              (unsigned long long)c->bytes);
        CUresult rc = c->alloc(c->bytes, &h2);
        CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY, "second allocation over the limit returned %d", rc);
        CHECK(c->release(h1) == CUDA_SUCCESS, "release");
        CHECK(used_now() == 0, "used %llu after release", (unsigned long long)used_now());
        CHECK(c->alloc(c->bytes, &h2) == CUDA_SUCCESS && c->release(h2) == CUDA_SUCCESS, "room given back");
    }
}

static void test_report(void)
{
    CASE("reported totals match the limit");
    size_t free_b, total, dev_total;
    CHECK(cuMemGetInfo_v2(&free_b, &total) == CUDA_SUCCESS && total == limit && free_b == limit,
          "cuMemGetInfo total %zu free %zu", total, free_b);
    CHECK(cuDeviceTotalMem_v2(&dev_total, dev) == CUDA_SUCCESS && dev_total == limit, "cuDeviceTotalMem %zu",
          dev_total);
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, 100 * MIB) == CUDA_SUCCESS, "alloc");
    nvmlDevice_t d;
    nvmlMemory_t m;
    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    /* NVML indices are the node's, not CUDA ordinals (CUDA_VISIBLE_DEVICES): find the card by UUID. On a
     * MIG device _v2 gives the instance's own UUID, which NVML names MIG-, and v1 its parent card's. */
    CUuuid u, v1;
    char uuid[96];
    const unsigned char *b = (const unsigned char *)u.bytes;
    CHECK(cuDeviceGetUuid_v2(&u, dev) == CUDA_SUCCESS && cuDeviceGetUuid(&v1, dev) == CUDA_SUCCESS, "uuid");
    snprintf(uuid, sizeof uuid, "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             memcmp(u.bytes, v1.bytes, sizeof u.bytes) ? "MIG" : "GPU", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
             b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    CHECK(nvmlInit_v2() == NVML_SUCCESS && nvmlDeviceGetHandleByUUID(uuid, &d) == NVML_SUCCESS, "nvml %s", uuid);
    CHECK(nvmlDeviceGetMemoryInfo(d, &m) == NVML_SUCCESS && m.total == limit && m.used == 100 * MIB &&
              m.free == limit - 100 * MIB,
          "nvml total %llu used %llu free %llu", m.total, m.used, m.free);
    CHECK(nvmlDeviceGetMemoryInfo_v2(d, &m2) == NVML_SUCCESS && m2.total == limit && m2.used == 100 * MIB &&
              m2.free == limit - 100 * MIB,
          "nvml v2 total %llu used %llu free %llu", m2.total, m2.used, m2.free);
    CHECK(cuMemGetInfo_v2(&free_b, &total) == CUDA_SUCCESS && free_b == limit - 100 * MIB, "free after alloc %zu",
          free_b);
    cuMemFree_v2(p);
}

static void test_unknown_free(void)
{
    CASE("a free of an unknown or already freed handle changes nothing");
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, 10 * MIB) == CUDA_SUCCESS, "alloc");
    CHECK(cuMemFree_v2(0xdeadbeef000ULL) != CUDA_SUCCESS, "unknown pointer rejected");
    CHECK(cuArrayDestroy((CUarray)(uintptr_t)0x1234) != CUDA_SUCCESS, "unknown array rejected");
    CHECK(used_now() == 10 * MIB, "used %llu", (unsigned long long)used_now());
    CHECK(cuMemFree_v2(p) == CUDA_SUCCESS, "free");
    CHECK(cuMemFree_v2(p) != CUDA_SUCCESS, "double free rejected");
    CHECK(cuMemRelease(p) != CUDA_SUCCESS, "wrong-kind free rejected");
    CHECK(used_now() == 0, "used %llu: no underflow", (unsigned long long)used_now());
    size_t free_b, total;
    cuMemGetInfo_v2(&free_b, &total);
    CHECK(free_b == limit && total == limit, "free %zu total %zu", free_b, total);
}

static int in_hook_library(void *fn, const char *want_name)
{
    Dl_info info;
    if (!fn || !dladdr(fn, &info) || !info.dli_fname)
        return 0;
    int in_lib = strstr(info.dli_fname, "libvgpu") != NULL;
    if (in_lib && want_name && (!info.dli_sname || strcmp(info.dli_sname, want_name) != 0))
        return 0;
    return in_lib;
}

static void test_procaddr(void)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CASE("cuGetProcAddress_v2 (CUDA 12) returns a hooked cuMemAlloc_v2");
    CHECK(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 0, &st) == CUDA_SUCCESS && fn, "lookup");
    CHECK(in_hook_library(fn, "cuMemAlloc_v2") == hooked, "hooked=%d", in_hook_library(fn, NULL));
    cuMemAlloc_fn alloc = (cuMemAlloc_fn)fn;
    CUdeviceptr a, b;
    CHECK(alloc(&a, limit / 4 * 3) == CUDA_SUCCESS, "alloc through fetched pointer");
    CHECK(alloc(&b, limit / 4 * 3) == CUDA_ERROR_OUT_OF_MEMORY, "limit enforced through fetched pointer");
    cuMemFree_v2(a);

    CASE("cuGetProcAddress (CUDA 11.3 ABI) returns hooked functions");
    CHECK(cuGetProcAddress("cuMemGetInfo", &fn, 11030, 0) == CUDA_SUCCESS, "lookup");
    CHECK(in_hook_library(fn, "cuMemGetInfo_v2") == hooked, "cuMemGetInfo");
    CHECK(cuGetProcAddress("cuGetProcAddress", &fn, 12000, 0) == CUDA_SUCCESS, "lookup");
    CHECK(in_hook_library(fn, "cuGetProcAddress_v2") == hooked, "cuGetProcAddress itself");

    CASE("per-thread-stream lookups return the hooked _ptsz variants");
    CHECK(cuGetProcAddress_v2("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st) ==
              CUDA_SUCCESS, "lookup");
    CHECK(in_hook_library(fn, "cuLaunchKernel_ptsz") == hooked, "cuLaunchKernel_ptsz");
    CHECK(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st) ==
              CUDA_SUCCESS, "lookup");
    CHECK(in_hook_library(fn, "cuMemAllocAsync_ptsz") == hooked, "cuMemAllocAsync_ptsz");

    CASE("dlsym on a dlopen()ed driver handle returns hooks, and unhooked names the driver's own");
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(h != NULL, "dlopen");
    fn = dlsym(h, "cuMemAlloc_v2");
    CHECK(in_hook_library(fn, "cuMemAlloc_v2") == hooked, "cuMemAlloc_v2 via dlsym");
    alloc = (cuMemAlloc_fn)fn;
    CHECK(alloc(&a, limit / 4 * 3) == CUDA_SUCCESS && alloc(&b, limit / 4 * 3) == CUDA_ERROR_OUT_OF_MEMORY,
          "limit enforced through dlsym pointer");
    cuMemFree_v2(a);
    fn = dlsym(h, "cuDeviceGetCount");
    CHECK(fn && !in_hook_library(fn, NULL), "unhooked symbol comes from the driver");
    void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    CHECK(in_hook_library(dlsym(nv, "nvmlDeviceGetMemoryInfo"), "nvmlDeviceGetMemoryInfo") == hooked, "nvml");
}

static void test_refuse_all(void)
{
    CASE("malformed limits fail closed: every allocation is refused");
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, 1) == CUDA_ERROR_OUT_OF_MEMORY, "1 byte");
    size_t free_b = 1, total = 1;
    CHECK(cuMemGetInfo_v2(&free_b, &total) == CUDA_SUCCESS && total == 0 && free_b == 0, "reported 0/0");
}

static int test_region_fail(void)
{
    CASE("an unopenable shared region fails closed: cuInit and allocations are refused");
    CUcontext ctx;
    CUdeviceptr p;
    CHECK(cuInit(0) != CUDA_SUCCESS, "cuInit must be refused");
    CHECK(cuCtxCreate_v2(&ctx, 0, 0) != CUDA_SUCCESS, "no context without cuInit");
    CHECK(cuMemAlloc_v2(&p, 1) != CUDA_SUCCESS, "no allocation");
    return tc_summary("region-fail");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s edge|apis|report|procaddr|unknown-free|refuse-all|region-fail\n", argv[0]);
        return 2;
    }
    limit = env_u64("EXPECT_LIMIT", 0);
    hooked = (int)env_u64("EXPECT_HOOKED", 0);
    dev = (int)env_u64("TEST_DEVICE", 0);
    if (!strcmp(argv[1], "region-fail"))
        return test_region_fail();
    tc_context(dev);
    if (!strcmp(argv[1], "edge"))
        test_edge();
    else if (!strcmp(argv[1], "apis"))
        test_apis();
    else if (!strcmp(argv[1], "report"))
        test_report();
    else if (!strcmp(argv[1], "procaddr"))
        test_procaddr();
    else if (!strcmp(argv[1], "unknown-free"))
        test_unknown_free();
    else if (!strcmp(argv[1], "refuse-all"))
        test_refuse_all();
    else
        return 2;
    return tc_summary(argv[1]);
}

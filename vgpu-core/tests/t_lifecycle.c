/*
 * Memory that must be counted however it is taken, and returned however it is given back:
 * contexts that are destroyed or reset, stream-ordered pools that keep memory, allocations on
 * another device's stream or with no current context, cuCtxSetLimit reservations, VMM memory
 * released while mapped, graph memory nodes and the contexts' own footprint.
 * Usage: t_lifecycle <case>   (EXPECT_LIMIT = the limit of card 0, TEST_DEVICE as t_memory)
 */
#include "common.h"
#include "cuda_api.h"

static uint64_t limit;
static int dev;

static uint64_t used_now(void)
{
    size_t free_b = 0, total = 0;
    cuMemGetInfo_v2(&free_b, &total);
    return total - free_b;
}

static int fits(uint64_t bytes)
{
    CUdeviceptr p;
    if (cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS)
        return 0;
    cuMemFree_v2(p);
    return 1;
}

static void ctx_destroy(void)
{
    CASE("cuCtxDestroy returns the context's allocations and arrays");
    CUcontext c;
    CHECK(cuInit(0) == CUDA_SUCCESS && cuCtxCreate_v2(&c, 0, dev) == CUDA_SUCCESS, "context");
    CUdeviceptr p;
    CUarray a;
    CUDA_ARRAY_DESCRIPTOR d = {limit / 64, 1, CU_AD_FORMAT_FLOAT, 4}; /* limit/4 bytes */
    CHECK(cuMemAlloc_v2(&p, limit / 2) == CUDA_SUCCESS && cuArrayCreate_v2(&a, &d) == CUDA_SUCCESS, "allocate");
    CHECK(!fits(limit / 2), "the context's memory is counted");
    CHECK(cuCtxDestroy_v2(c) == CUDA_SUCCESS, "destroy");
    CHECK(cuCtxCreate_v2(&c, 0, dev) == CUDA_SUCCESS, "a new context");
    CHECK(fits(limit), "the whole limit after the destroy (used %llu)", (unsigned long long)used_now());
}

static void primary(int reset)
{
    CASE(reset ? "cuDevicePrimaryCtxReset returns the primary context's memory"
               : "the last cuDevicePrimaryCtxRelease returns the primary context's memory");
    CUcontext c;
    CHECK(cuInit(0) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&c, dev) == CUDA_SUCCESS, "retain");
    CHECK(cuCtxSetCurrent(c) == CUDA_SUCCESS, "current");
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, limit / 4 * 3) == CUDA_SUCCESS, "allocate");
    CHECK(!fits(limit / 2), "counted");
    CHECK((reset ? cuDevicePrimaryCtxReset_v2(dev) : cuDevicePrimaryCtxRelease_v2(dev)) == CUDA_SUCCESS, "go");
    CHECK(cuDevicePrimaryCtxRetain(&c, dev) == CUDA_SUCCESS && cuCtxSetCurrent(c) == CUDA_SUCCESS, "again");
    CHECK(fits(limit), "the whole limit afterwards (used %llu)", (unsigned long long)used_now());
}

static void async_stream_device(void)
{
    CASE("a stream-ordered allocation is charged to the stream's device, not the current one");
    CUcontext c0, c1;
    CUstream s1;
    CHECK(cuInit(0) == CUDA_SUCCESS && cuCtxCreate_v2(&c1, 0, 1) == CUDA_SUCCESS, "context on device 1");
    CHECK(cuStreamCreate(&s1, 0) == CUDA_SUCCESS, "stream on device 1");
    CHECK(cuCtxCreate_v2(&c0, 0, 0) == CUDA_SUCCESS, "context on device 0 is current");
    CUdeviceptr p;
    CHECK(cuMemAllocAsync(&p, 384 * MIB, s1) == CUDA_SUCCESS, "384 MiB fits device 1's 512 MiB");
    CHECK(used_now() == 0, "device 0 is not charged (used %llu)", (unsigned long long)used_now());
    CHECK(cuCtxSetCurrent(c1) == CUDA_SUCCESS && used_now() == 384 * MIB, "device 1 is (used %llu)",
          (unsigned long long)used_now());
    CHECK(cuMemAllocAsync(&p, 256 * MIB, s1) == CUDA_ERROR_OUT_OF_MEMORY, "device 1's limit holds");
    cuStreamDestroy_v2(s1);
}

static void async_no_context(void)
{
    CASE("with no current context, stream-ordered allocations are charged to the stream's device");
    CUcontext c;
    CUstream s;
    CHECK(cuInit(0) == CUDA_SUCCESS && cuCtxCreate_v2(&c, 0, dev) == CUDA_SUCCESS, "context");
    CHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS && cuCtxSetCurrent(NULL) == CUDA_SUCCESS, "no current context");
    CUdeviceptr p;
    CHECK(cuMemAllocAsync(&p, 8 * MIB, NULL) == CUDA_ERROR_INVALID_CONTEXT, "the default stream needs a context");
    CHECK(cuMemAllocAsync(&p, limit / 4 * 3, s) == CUDA_SUCCESS, "first");
    CHECK(cuMemAllocAsync(&p, limit / 4 * 3, s) == CUDA_ERROR_OUT_OF_MEMORY, "second is over the limit");
    cuStreamDestroy_v2(s);
    cuCtxDestroy_v2(c);
}

static void pool_threshold(void)
{
    CASE("memory a pool keeps after frees (release threshold raised) stays counted until trimmed");
    tc_context(dev);
    CUmemoryPool pool;
    cuuint64_t keep = UINT64_MAX;
    CHECK(cuDeviceGetMemPool(&pool, dev) == CUDA_SUCCESS, "pool");
    CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep) == CUDA_SUCCESS, "threshold");
    CUdeviceptr p;
    CHECK(cuMemAllocAsync(&p, limit / 4 * 3, NULL) == CUDA_SUCCESS, "allocate");
    CHECK(cuMemFreeAsync(p, NULL) == CUDA_SUCCESS && cuStreamSynchronize(NULL) == CUDA_SUCCESS, "free, sync");
    CHECK(used_now() == limit / 4 * 3, "the pool still holds it (used %llu)", (unsigned long long)used_now());
    CHECK(!fits(limit / 2), "so other allocations cannot have it");
    CHECK(cuMemAllocAsync(&p, limit / 4 * 3, NULL) == CUDA_SUCCESS, "the pool reuses what it holds");
    CHECK(cuMemFreeAsync(p, NULL) == CUDA_SUCCESS, "free");
    CHECK(cuMemPoolTrimTo(pool, 0) == CUDA_SUCCESS, "trim");
    CHECK(fits(limit), "the whole limit after the trim (used %llu)", (unsigned long long)used_now());

    CASE("a pool of its own is counted on its device and returned when destroyed");
    CUmemoryPool own;
    CUmemPoolProps props = {.allocType = 1, .location = {CU_MEM_LOCATION_TYPE_DEVICE, dev}};
    CHECK(cuMemPoolCreate(&own, &props) == CUDA_SUCCESS, "create");
    CHECK(cuMemPoolSetAttribute(own, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep) == CUDA_SUCCESS, "threshold");
    CHECK(cuMemAllocFromPoolAsync(&p, limit / 2, own, NULL) == CUDA_SUCCESS, "allocate");
    CHECK(cuMemAllocFromPoolAsync(&p, limit / 4 * 3, own, NULL) == CUDA_ERROR_OUT_OF_MEMORY, "over the limit");
    CHECK(cuMemFreeAsync(p, NULL) == CUDA_SUCCESS && cuStreamSynchronize(NULL) == CUDA_SUCCESS, "free, sync");
    CHECK(!fits(limit / 4 * 3), "kept by the pool");
    CHECK(cuMemPoolDestroy(own) == CUDA_SUCCESS, "destroy");
    CHECK(fits(limit), "the whole limit after the destroy (used %llu)", (unsigned long long)used_now());
}

static void set_limit(void)
{
    CASE("cuCtxSetLimit reservations (heap, printf FIFO, stack per resident thread) are counted");
    tc_context(dev);
    CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, limit / 4 * 3) == CUDA_SUCCESS, "heap");
    CHECK(!fits(limit / 2), "the heap is counted (used %llu)", (unsigned long long)used_now());
    CHECK(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, limit / 2) == CUDA_ERROR_OUT_OF_MEMORY, "printf over the limit");
    CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 0) == CUDA_SUCCESS && fits(limit), "heap given back");
    int sms = 0;
    cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    size_t stack = (size_t)(limit / 4 * 3 / ((uint64_t)sms * 2048));
    CHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack) == CUDA_SUCCESS, "stack of %zu bytes per thread", stack);
    CHECK(!fits(limit / 2), "the stack is counted for every resident thread (used %llu)",
          (unsigned long long)used_now());
    CHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack * 2) == CUDA_ERROR_OUT_OF_MEMORY, "a bigger stack is refused");
}

static void vmm_mapped(void)
{
    CASE("VMM memory released while still mapped stays counted until unmapped");
    tc_context(dev);
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp prop = {.type = 1, .location = {CU_MEM_LOCATION_TYPE_DEVICE, dev}};
    CUdeviceptr va;
    uint64_t n = limit / 4 * 3;
    CHECK(cuMemCreate(&h, n, &prop, 0) == CUDA_SUCCESS, "create");
    CHECK(cuMemAddressReserve(&va, n, 0, 0, 0) == CUDA_SUCCESS && cuMemMap(va, n, 0, h, 0) == CUDA_SUCCESS, "map");
    CHECK(cuMemRelease(h) == CUDA_SUCCESS, "release while mapped");
    CHECK(!fits(limit / 2), "still counted (used %llu)", (unsigned long long)used_now());
    CHECK(cuMemUnmap(va, n) == CUDA_SUCCESS, "unmap");
    CHECK(fits(limit), "the whole limit after the unmap (used %llu)", (unsigned long long)used_now());
}

static CUresult add_node(CUgraph g, uint64_t bytes)
{
    CUgraphNode node;
    CUDA_MEM_ALLOC_NODE_PARAMS p = {.poolProps = {.allocType = 1, .location = {CU_MEM_LOCATION_TYPE_DEVICE, dev}},
                                    .bytesize = bytes};
    return cuGraphAddMemAllocNode(&node, g, NULL, 0, &p);
}

static void graph_node(void)
{
    CASE("graph memory nodes are counted from creation until their graph is destroyed");
    tc_context(dev);
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0) == CUDA_SUCCESS, "graph");
    CHECK(add_node(g, limit / 4 * 3) == CUDA_SUCCESS, "a node of 3/4 of the limit");
    CHECK(add_node(g, limit / 2) == CUDA_ERROR_OUT_OF_MEMORY, "a second one is over the limit");
    CHECK(!fits(limit / 2), "other allocations see it");
    CHECK(cuGraphDestroy(g) == CUDA_SUCCESS && fits(limit), "the whole limit after the destroy");
}

static void context_reserve(void)
{
    uint64_t per_ctx = env_u64("EXPECT_CONTEXT_MIB", 0) * MIB;
    CASE("each context's own footprint (TESSERA_CONTEXT_RESERVE_MIB) is counted");
    tc_context(dev);
    CHECK(used_now() == per_ctx, "a context alone uses %llu", (unsigned long long)used_now());
    CHECK(fits(limit - per_ctx) && !fits(limit - per_ctx + 4096), "what is left is the limit less the context");
    CUcontext c2;
    CHECK(cuCtxCreate_v2(&c2, 0, dev) == CUDA_SUCCESS && used_now() == 2 * per_ctx, "a second context, used %llu",
          (unsigned long long)used_now());
    CHECK(cuCtxDestroy_v2(c2) == CUDA_SUCCESS, "destroy");
    CUcontext c3;
    CHECK(cuCtxCreate_v2(&c3, 0, dev) == CUDA_SUCCESS && used_now() == 2 * per_ctx, "destroyed one given back "
          "(used %llu)", (unsigned long long)used_now());
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    limit = env_u64("EXPECT_LIMIT", 0);
    dev = (int)env_u64("TEST_DEVICE", 0);
    static const struct {
        const char *name;
        void (*run)(void);
    } cases[] = {{"ctx-destroy", ctx_destroy}, {"async-device", async_stream_device},
                 {"async-no-context", async_no_context}, {"pool-threshold", pool_threshold},
                 {"set-limit", set_limit}, {"vmm-mapped", vmm_mapped}, {"graph-node", graph_node},
                 {"context-reserve", context_reserve}};
    if (!strcmp(argv[1], "primary-reset") || !strcmp(argv[1], "primary-release")) {
        primary(!strcmp(argv[1], "primary-reset"));
        return tc_summary(argv[1]);
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!strcmp(argv[1], cases[i].name)) {
            cases[i].run();
            return tc_summary(argv[1]);
        }
    return 2;
}

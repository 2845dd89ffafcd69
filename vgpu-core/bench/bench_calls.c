/*
 * Per-call costs against the stub driver. bench/run.sh runs it with and without the library.
 * Usage: bench_calls alloc|launch|init [iterations]
 *   alloc   ns per cuMemAlloc_v2 + cuMemFree_v2 pair (1 MiB)
 *   launch  ns per cuLaunchKernel of a zero-length kernel (after BENCH_WARMUP_MS of launches, so
 *           a configured SM limit has converged and measures its admission cost, not throttling)
 *   init    ns spent in cuInit (the library's one-time start-up happens there)
 */
#include "../tests/common.h"
#include "../tests/cuda_api.h"

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    long n = argc > 2 ? atol(argv[2]) : 1000000;
    if (!strcmp(argv[1], "init")) {
        uint64_t t = tc_now_ns();
        CUresult rc = cuInit(0);
        printf("%llu\n", (unsigned long long)(tc_now_ns() - t));
        return rc != CUDA_SUCCESS;
    }
    tc_context(0);
    uint64_t t0, t1;
    if (!strcmp(argv[1], "alloc")) {
        CUdeviceptr p;
        for (long i = 0; i < 1000; i++) /* warm the allocation table and the region mapping */
            cuMemAlloc_v2(&p, MIB), cuMemFree_v2(p);
        t0 = tc_now_ns();
        for (long i = 0; i < n; i++) {
            if (cuMemAlloc_v2(&p, MIB) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS)
                return 3;
        }
        t1 = tc_now_ns();
    } else {
        CUfunction k = tc_kernel("sleep_0us");
        uint64_t warm = tc_now_ns() + env_u64("BENCH_WARMUP_MS", 0) * 1000000ULL;
        while (tc_now_ns() < warm)
            for (int i = 0; i < 1000; i++)
                cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        t0 = tc_now_ns();
        for (long i = 0; i < n; i++)
            if (cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS)
                return 3;
        t1 = tc_now_ns();
    }
    printf("%.1f\n", (double)(t1 - t0) / (double)n);
    return 0;
}

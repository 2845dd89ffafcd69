// Real-GPU checks of vgpu-core through the CUDA runtime (which resolves the driver via
// cuGetProcAddress): the memory limit and reported totals, and the SM share of a busy kernel.
// Usage: gpu_limits memory <limit MiB> | sm <expected %>
#include <cuda_runtime.h>
#include <nvml.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

__global__ void spin(long long cycles)
{
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

static int failures;
#define CHECK(c, ...) do { if (!(c)) { failures++; fprintf(stderr, "FAIL %s: ", #c); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static int memory(size_t limit)
{
    size_t free_b, total;
    CHECK(cudaMemGetInfo(&free_b, &total) == cudaSuccess && total == limit, "total %zu want %zu", total, limit);
    void *a = nullptr, *b = nullptr;
    CHECK(cudaMalloc(&a, limit / 2) == cudaSuccess, "half the limit");
    CHECK(cudaMalloc(&b, limit / 2 + (64u << 20)) == cudaErrorMemoryAllocation, "over the limit refused");
    cudaGetLastError();
    cudaFree(a);
    CHECK(cudaMalloc(&b, limit / 2 + (64u << 20)) == cudaSuccess, "room back after free");
    cudaFree(b);
    cudaMemPool_t pool;
    cudaDeviceGetDefaultMemPool(&pool, 0);
    CHECK(cudaMallocAsync(&a, limit + 1, 0) != cudaSuccess, "stream-ordered allocation over the limit refused");
    cudaGetLastError();
    nvmlDevice_t d;
    nvmlMemory_t m;
    nvmlInit_v2();
    nvmlDeviceGetHandleByIndex_v2(0, &d);
    CHECK(nvmlDeviceGetMemoryInfo(d, &m) == NVML_SUCCESS && m.total == limit, "nvml total %llu", m.total);
    return failures;
}

static int sm(double expected)
{
    int sms, khz;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
    nvmlDevice_t d;
    nvmlInit_v2();
    nvmlDeviceGetHandleByIndex_v2(0, &d);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(6);
    double sum = 0;
    int samples = 0;
    auto next = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < end) {
        spin<<<sms * 2, 128>>>((long long)khz * 1); // ~1 ms per wave
        if (std::chrono::steady_clock::now() >= next) {
            nvmlUtilization_t u;
            nvmlDeviceGetUtilizationRates(d, &u);
            sum += u.gpu, samples++;
            next += std::chrono::milliseconds(250);
        }
    }
    cudaDeviceSynchronize();
    double util = samples ? sum / samples : 0;
    fprintf(stderr, "gpu_limits sm: %d SMs, want %.0f%%, NVML says %.1f%%\n", sms, expected, util);
    CHECK(util > expected - 5 && util < expected + 5, "utilisation %.1f", util);
    return failures;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    int rc = !strcmp(argv[1], "memory") ? memory((size_t)atol(argv[2]) << 20) : sm(atof(argv[2]));
    fprintf(stderr, "gpu_limits %s: %s\n", argv[1], rc ? "FAILED" : "ok");
    return rc ? 1 : 0;
}

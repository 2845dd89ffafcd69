/*
 * SM limiter accuracy on the stub driver. Launches kernels as fast as the library lets it and
 * measures the card's busy fraction (from the stub's own timeline) after the warm-up.
 * Usage: t_sm <expected%> [seconds] [grid-multiplier]
 *   expected%       the utilisation to hold (the SM limit, or 100 when uncapped)
 *   TOLERANCE       allowed deviation in points (default 5)
 *   TEST_KERNEL     stub kernel name (default sleep_200us)
 * Kernels: 200 µs blocks; grid sizes cycle through 1, 1.5, 2 and 3 waves of the card's SMs, so the
 * controller cannot rely on one kernel shape.
 */
#include <unistd.h>

#include "common.h"
#include "cuda_api.h"
#include "stub.h"

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    double expected = atof(argv[1]);
    double seconds = argc > 2 ? atof(argv[2]) : 3.5;
    double tol = (double)env_u64("TOLERANCE", 5);
    int dev = (int)env_u64("TEST_DEVICE", 0);
    tc_context(dev);
    int sms = 0;
    cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    const char *kname = getenv("TEST_KERNEL");
    CUfunction k = tc_kernel(kname ? kname : "sleep_200us");
    const unsigned grids[] = {(unsigned)sms, (unsigned)sms * 3 / 2, (unsigned)sms * 2, (unsigned)sms * 3};
    uint64_t t0 = tc_now_ns(), warm = t0 + 2000000000ULL, end = t0 + (uint64_t)(seconds * 1e9);
    uint64_t busy_warm = 0, t_warm = 0;
    unsigned i = 0;
    double worst = 0;
    uint64_t next_sample = warm + 500000000ULL, busy_prev = 0, t_prev = 0;
    for (uint64_t now = t0; now < end; now = tc_now_ns(), i++) {
        if (!t_warm && now >= warm) {
            t_warm = t_prev = now;
            busy_warm = busy_prev = tessera_stub_busy_ns(dev);
        }
        if (t_warm && now >= next_sample) {
            /* Each half second after warm-up must hold the share too, not only the average. */
            uint64_t b = tessera_stub_busy_ns(dev);
            double u = 100.0 * (double)(b - busy_prev) / (double)(now - t_prev);
            if (u - expected > worst || expected - u > worst)
                worst = u > expected ? u - expected : expected - u;
            busy_prev = b, t_prev = now, next_sample = now + 500000000ULL;
        }
        CUresult rc;
        unsigned g = grids[i % 4];
        switch (i % 3) {
        case 0:
            rc = cuLaunchKernel(k, g, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
            break;
        case 1: {
            CUlaunchConfig c = {.gridDimX = 1, .gridDimY = g, .gridDimZ = 1, .blockDimX = 128, .blockDimY = 1,
                                .blockDimZ = 1};
            rc = cuLaunchKernelEx(&c, k, NULL, NULL);
            break;
        }
        default:
            rc = cuLaunchKernel_ptsz(k, g, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
        }
        if (rc != CUDA_SUCCESS) {
            fprintf(stderr, "launch failed: %d\n", rc);
            return 2;
        }
    }
    uint64_t t1 = tc_now_ns();
    double util = 100.0 * (double)(tessera_stub_busy_ns(dev) - busy_warm) / (double)(t1 - t_warm);
    char name[96];
    snprintf(name, sizeof name, "%d SMs held at %.0f%%", sms, expected);
    CASE(name);
    fprintf(stderr, "t_sm: %d SMs, want %.0f%%: measured %.1f%% after 2 s (worst 0.5 s window off by %.1f), %u launches\n",
            sms, expected, util, worst, i);
    CHECK(util >= expected - tol && util <= expected + tol, "measured %.1f%%, want %.0f±%.0f", util, expected, tol);
    CHECK(worst <= tol + 2, "a 0.5 s window was off by %.1f points", worst);
    return tc_summary("t_sm");
}

/*
 * Launch hooks: the hot path. With no SM limit the only work is one relaxed load of the gate and
 * the call through the resolved pointer; the gate is also what triggers first-call initialisation.
 */
#include "../common/state.h"
#include "../limits/sm.h"

#define LAUNCH_GATE(blocks)                                                          \
    do {                                                                             \
        if (__builtin_expect(atomic_load_explicit(&tessera_launch_gate, memory_order_relaxed), 0)) \
            tessera_sm_admit(blocks);                                                \
    } while (0)

#define LAUNCH_REAL(name)                                                            \
    __typeof__(tessera_cuda.name) real_ = tessera_cuda.name;                         \
    if (__builtin_expect(real_ == NULL, 0)) {                                        \
        tessera_ensure_init();                                                       \
        if (!(real_ = tessera_cuda.name))                                            \
            return tessera_cuda_missing(#name);                                      \
    }

static inline uint64_t blocks_of(unsigned x, unsigned y, unsigned z)
{
    return (uint64_t)x * y * z;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    LAUNCH_GATE(blocks_of(gx, gy, gz));
    LAUNCH_REAL(cuLaunchKernel);
    return real_(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    LAUNCH_GATE(blocks_of(gx, gy, gz));
    LAUNCH_REAL(cuLaunchKernel_ptsz);
    return real_(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra)
{
    LAUNCH_GATE(cfg ? blocks_of(cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ) : 1);
    LAUNCH_REAL(cuLaunchKernelEx);
    return real_(cfg, f, params, extra);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra)
{
    LAUNCH_GATE(cfg ? blocks_of(cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ) : 1);
    LAUNCH_REAL(cuLaunchKernelEx_ptsz);
    return real_(cfg, f, params, extra);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params)
{
    LAUNCH_GATE(blocks_of(gx, gy, gz));
    LAUNCH_REAL(cuLaunchCooperativeKernel);
    return real_(f, gx, gy, gz, bx, by, bz, shmem, s, params);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                        unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params)
{
    LAUNCH_GATE(blocks_of(gx, gy, gz));
    LAUNCH_REAL(cuLaunchCooperativeKernel_ptsz);
    return real_(f, gx, gy, gz, bx, by, bz, shmem, s, params);
}

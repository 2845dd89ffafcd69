/*
 * Launch hooks: the hot path. With no SM limit the only work is one relaxed load of the gate and
 * the call through the resolved pointer; the gate is also what triggers first-call initialisation.
 * On a capped card the launch is metered: budget first, then the launch between timing events.
 */
#include "../process/state.h"
#include "../limits/sm.h"

#define LAUNCH_REAL(name)                                                            \
    __typeof__(tessera_cuda.name) real_ = tessera_cuda.name;                         \
    if (__builtin_expect(real_ == NULL, 0)) {                                        \
        tessera_ensure_init();                                                       \
        if (!(real_ = tessera_cuda.name))                                            \
            return tessera_cuda_missing(#name);                                      \
    }

/* Runs `call` (which yields a CUresult), metered when the gate is up. */
#define METERED(key, blocks, graph, stream, call)                                    \
    do {                                                                             \
        struct sm_ticket t_;                                                         \
        CUstream s_ = (stream);                                                      \
        int m_ = __builtin_expect(atomic_load_explicit(&tessera_launch_gate, memory_order_relaxed), 0) && \
                 tessera_sm_begin(&t_, (key), (blocks), (graph), s_);                \
        CUresult rc_ = (call);                                                       \
        if (m_)                                                                      \
            tessera_sm_end(&t_, s_, rc_);                                            \
        return rc_;                                                                  \
    } while (0)

static inline uint64_t blocks_of(unsigned x, unsigned y, unsigned z)
{
    return (uint64_t)x * y * z;
}

/* The stream a _ptsz entry point means by the null stream. */
static inline CUstream per_thread(CUstream s)
{
    return s ? s : CU_STREAM_PER_THREAD;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    LAUNCH_REAL(cuLaunchKernel);
    METERED(f, blocks_of(gx, gy, gz), 0, s, real_(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    LAUNCH_REAL(cuLaunchKernel_ptsz);
    METERED(f, blocks_of(gx, gy, gz), 0, per_thread(s), real_(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra)
{
    LAUNCH_REAL(cuLaunchKernelEx);
    METERED(f, cfg ? blocks_of(cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ) : 1, 0, cfg ? cfg->hStream : NULL,
            real_(cfg, f, params, extra));
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra)
{
    LAUNCH_REAL(cuLaunchKernelEx_ptsz);
    METERED(f, cfg ? blocks_of(cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ) : 1, 0,
            per_thread(cfg ? cfg->hStream : NULL), real_(cfg, f, params, extra));
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params)
{
    LAUNCH_REAL(cuLaunchCooperativeKernel);
    METERED(f, blocks_of(gx, gy, gz), 0, s, real_(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                        unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params)
{
    LAUNCH_REAL(cuLaunchCooperativeKernel_ptsz);
    METERED(f, blocks_of(gx, gy, gz), 0, per_thread(s), real_(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

/* A graph replay is charged as one unit: its own GPU time, learnt per executable graph. */
CUresult cuGraphLaunch(CUgraphExec g, CUstream s)
{
    LAUNCH_REAL(cuGraphLaunch);
    METERED(g, 1, 1, s, real_(g, s));
}

CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s)
{
    LAUNCH_REAL(cuGraphLaunch_ptsz);
    METERED(g, 1, 1, per_thread(s), real_(g, s));
}

/*
 * Worker processes: each runs one CUDA workload on device 0, prints one result line on stdout and, for
 * workloads that share the card with others, keeps going until its stdin reaches EOF.
 *   info              -> ok <devices> <SMs> <total MiB> <UUID>
 *   mem BYTES...      -> ok <cuMemGetInfo total bytes> <CUresult of each cuMemAlloc_v2, in order>; holds them
 *   sm NS GRAPH       -> ok <kernels/s: median of the measured windows>, then keeps launching
 *   launch COUNT      -> ok <ns per cuLaunchKernel of an empty kernel: median of batches of 1000>
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cu.h"
#include "gputest.h"

#define THREADS 128
#define GRAPH_KERNELS 4
#define MAX_WINDOWS 64
#define RUN_LIMIT_NS (120 * 1000000000ULL) /* a worker whose parent vanished stops by itself */

static char err[256];

static double env_num(const char *name, double dflt)
{
    const char *v = getenv(name);
    return v && *v ? atof(v) : dflt;
}

/* Whether stdin has reached EOF (the parent is done with us). */
static int told_to_stop(void)
{
    struct pollfd p = {.fd = 0, .events = POLLIN};
    char c;
    return poll(&p, 1, 0) > 0 && read(0, &c, 1) <= 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int do_info(void)
{
    int n = 0, sms = 0;
    size_t total = 0;
    CUuuid u;
    char uuid[64];
    if (cu.cuDeviceGetCount(&n) != CUDA_SUCCESS || n < 1 ||
        cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0) != CUDA_SUCCESS ||
        cu.cuDeviceTotalMem_v2(&total, 0) != CUDA_SUCCESS || cu.cuDeviceGetUuid(&u, 0) != CUDA_SUCCESS) {
        printf("error cannot query device 0\n");
        return 1;
    }
    cu_uuid_string(&u, uuid, sizeof uuid);
    printf("ok %d %d %zu %s\n", n, sms, total >> 20, uuid);
    return 0;
}

static int do_mem(int argc, char **argv)
{
    size_t free_b = 0, total = 0;
    cu.cuMemGetInfo_v2(&free_b, &total);
    printf("ok %zu", total);
    for (int i = 0; i < argc; i++) {
        CUdeviceptr p;
        printf(" %d", (int)cu.cuMemAlloc_v2(&p, strtoull(argv[i], NULL, 10)));
    }
    printf("\n");
    fflush(stdout);
    while (!told_to_stop())
        usleep(10000);
    return 0;
}

struct load {
    CUfunction f;
    unsigned grid;
    uint64_t ns;
    void *args[1];
    CUstream stream;
    CUgraphExec graph;
};

/* Launches one unit of work; returns how many kernels it was, 0 on failure. */
static int launch_unit(struct load *l)
{
    if (l->graph)
        return cu.cuGraphLaunch(l->graph, l->stream) == CUDA_SUCCESS ? GRAPH_KERNELS : 0;
    return cu.cuLaunchKernel(l->f, l->grid, 1, 1, THREADS, 1, 1, 0, l->stream, l->args, NULL) == CUDA_SUCCESS;
}

/* Captures GRAPH_KERNELS launches into a graph replayed by launch_unit. */
static int make_graph(struct load *l)
{
    CUgraph g;
    if (cu.cuStreamCreate(&l->stream, 0) != CUDA_SUCCESS ||
        cu.cuStreamBeginCapture_v2(l->stream, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS)
        return -1;
    for (int i = 0; i < GRAPH_KERNELS; i++)
        launch_unit(l);
    if (cu.cuStreamEndCapture(l->stream, &g) != CUDA_SUCCESS ||
        cu.cuGraphInstantiateWithFlags(&l->graph, g, 0) != CUDA_SUCCESS)
        return -1;
    return 0;
}

/* Kernels per second over one window, from a drained queue to a drained queue. */
static double window_rate(struct load *l, uint64_t window_ns)
{
    cu.cuCtxSynchronize();
    uint64_t t0 = gputest_now_ns(), n = 0;
    while (gputest_now_ns() - t0 < window_ns)
        n += (uint64_t)launch_unit(l);
    cu.cuCtxSynchronize();
    return (double)n * 1e9 / (double)(gputest_now_ns() - t0);
}

static int do_sm(int argc, char **argv, CUfunction f)
{
    int sms = 1;
    cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
    struct load l = {.f = f, .grid = (unsigned)sms * 2, .ns = argc > 0 ? strtoull(argv[0], NULL, 10) : 200000};
    l.args[0] = &l.ns;
    if (argc > 1 && atoi(argv[1]) && make_graph(&l) != 0) {
        printf("error cannot capture and instantiate a graph\n");
        return 1;
    }
    uint64_t start = gputest_now_ns(), warm = (uint64_t)(env_num("TESSERA_GPUTEST_WARM_S", 2) * 1e9);
    uint64_t window = (uint64_t)(env_num("TESSERA_GPUTEST_WINDOW_S", 0.5) * 1e9);
    int nw = (int)env_num("TESSERA_GPUTEST_WINDOWS", 4);
    nw = nw < 1 ? 1 : nw > MAX_WINDOWS ? MAX_WINDOWS : nw;
    while (gputest_now_ns() - start < warm)
        if (!launch_unit(&l)) {
            printf("error launch failed\n");
            return 1;
        }
    double rates[MAX_WINDOWS];
    for (int i = 0; i < nw; i++)
        rates[i] = window_rate(&l, window);
    printf("ok %.1f\n", median(rates, nw));
    fflush(stdout);
    /* Keep the card busy while the other tenants of the case measure. */
    for (uint64_t k = 0; gputest_now_ns() - start < RUN_LIMIT_NS; k++)
        if (k % 64 == 0 && told_to_stop())
            break;
        else
            launch_unit(&l);
    cu.cuCtxSynchronize();
    return 0;
}

static int do_launch(int argc, char **argv, CUfunction f)
{
    int batches = argc > 0 ? atoi(argv[0]) / 1000 : 20;
    batches = batches < 1 ? 1 : batches > MAX_WINDOWS ? MAX_WINDOWS : batches;
    struct load l = {.f = f, .grid = 1, .ns = 0};
    l.args[0] = &l.ns;
    double per[MAX_WINDOWS];
    for (int b = 0; b < batches; b++) {
        cu.cuCtxSynchronize();
        uint64_t t0 = gputest_now_ns();
        for (int i = 0; i < 1000; i++)
            launch_unit(&l);
        per[b] = (double)(gputest_now_ns() - t0) / 1000;
    }
    cu.cuCtxSynchronize();
    printf("ok %.1f\n", median(per, batches));
    return 0;
}

int worker_main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 1) {
        printf("error no worker mode\n");
        return 2;
    }
    if (cu_open(err, sizeof err) != 0 || cu_context(err, sizeof err) != 0) {
        printf("error %s\n", err);
        return 1;
    }
    const char *mode = argv[0];
    if (strcmp(mode, "info") == 0)
        return do_info();
    if (strcmp(mode, "mem") == 0)
        return do_mem(argc - 1, argv + 1);
    CUfunction f;
    if (cu_spin_kernel(&f, err, sizeof err) != 0) {
        printf("error %s\n", err);
        return 1;
    }
    if (strcmp(mode, "sm") == 0)
        return do_sm(argc - 1, argv + 1, f);
    if (strcmp(mode, "launch") == 0)
        return do_launch(argc - 1, argv + 1, f);
    printf("error unknown worker mode %s\n", mode);
    return 2;
}

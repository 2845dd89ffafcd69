/*
 * SM limiter accuracy on the stub driver. Launches kernels as fast as the library lets it and
 * measures this process's share of the card (its busy time on the stub's timeline over wall time;
 * a stub kernel does fixed work, so this is also its throughput relative to running alone
 * uncapped). Usage: t_sm <expected%>
 *   TOLERANCE        allowed deviation of the measured share in points (default 5)
 *   TEST_KERNEL      stub kernel name (default sleep_200us)
 *   TEST_GRAPH=1     replay a captured CUDA graph (cuGraphLaunch, directly and through
 *                    cuGetProcAddress as the CUDA runtime does) instead of plain launches
 *   TEST_MIN_SECONDS keep launching at least this long (tenants sharing a card end together)
 * After a 2 s warm-up the share is measured in 0.5 s windows until 3 undisturbed ones are in: their
 * average must be within the tolerance and each of them within tolerance + 2. A window is disturbed,
 * and left out, only when the process demonstrably stalled in it or in the window before, long enough
 * to have cost more than 1 point: a stall of d can lose at most (d - 20 ms) x share of GPU time,
 * the 20 ms being the limiter's burst allowance that the budget absorbs. Stalls are seen by a
 * watchdog thread sleeping 1 ms at a time (oversleep) and on the launching thread itself (growth of
 * its run delay, time runnable but not running, in /proc/thread-self/schedstat, looked at every
 * ~2 ms); the larger of the two counts. On a shared 2-core machine other jobs cause them. Every window left out
 * is printed with its stall; when fewer than 3 of 14 windows are undisturbed the test fails as
 * inconclusive rather than pass on disturbed data.
 * Grids cycle through 1, 1.5, 2 and 3 waves of the card's SMs, so the limiter cannot rely on one
 * kernel shape.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "common.h"
#include "cuda_api.h"
#include "stub.h"

#define WARM_NS 2000000000ULL
#define WINDOW_NS 500000000ULL
#define WINDOWS 3
#define MAX_WINDOWS 14
#define BURST_NS 20000000ULL         /* the limiter's burst allowance (src/limits/sm.c) */
#define POINT_NS (WINDOW_NS / 100)   /* GPU time worth one point of a window */

/* Per window: the longest stall, and the stall time beyond the burst allowance per source. */
static _Atomic uint64_t worst_stall, excess_watchdog, excess_runq;

static void note_stall(_Atomic uint64_t *excess, uint64_t ns)
{
    uint64_t cur = atomic_load(&worst_stall);
    while (ns > cur && !atomic_compare_exchange_weak(&worst_stall, &cur, ns))
        ;
    if (ns > BURST_NS)
        atomic_fetch_add(excess, ns - BURST_NS);
}

/* Run delay (time runnable but not running) of the launching thread, checked every ~2 ms. */
static struct {
    int fd;
    uint64_t at, delay;
} runq = {.fd = -1};

static uint64_t run_delay(void)
{
    char buf[128];
    ssize_t n = runq.fd >= 0 ? pread(runq.fd, buf, sizeof buf - 1, 0) : -1;
    unsigned long long cpu = 0, delay = 0;
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return sscanf(buf, "%llu %llu", &cpu, &delay) == 2 ? delay : 0;
}

static void check_run_delay(uint64_t now)
{
    if (runq.fd < 0 || now - runq.at < 2000000)
        return;
    uint64_t d = run_delay();
    if (runq.at && d > runq.delay)
        note_stall(&excess_runq, d - runq.delay);
    runq.at = now, runq.delay = d;
}

static void *watchdog(void *arg)
{
    (void)arg;
    for (;;) {
        uint64_t t = tc_now_ns();
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        note_stall(&excess_watchdog, tc_now_ns() - t - 1000000);
    }
    return NULL;
}

struct workload {
    int dev;
    CUfunction k;
    unsigned grids[4];
    unsigned i;
    CUgraphExec graph;
    CUstream stream;
    cuGraphLaunch_fn graph_via_procaddr;
};

/* Launches into a capturing stream only record nodes: the limiter must not make them wait. */
static void check_capture_is_free(struct workload *w)
{
    CUgraph g;
    uint64_t t0 = tc_now_ns();
    cuStreamBeginCapture_v2(w->stream, 0);
    for (int j = 0; j < 60; j++)
        cuLaunchKernel(w->k, w->grids[j % 4], 1, 1, 128, 1, 1, 0, w->stream, NULL, NULL);
    cuStreamEndCapture(w->stream, &g);
    cuGraphDestroy(g);
    double ms = (double)(tc_now_ns() - t0) / 1e6;
    CASE("capturing a graph is not throttled");
    CHECK(ms < 50, "capturing 60 launches took %.0f ms", ms);
}

static void setup_graph(struct workload *w)
{
    CUgraph g;
    if (cuStreamCreate(&w->stream, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "cannot create a stream\n");
        exit(2);
    }
    check_capture_is_free(w);
    if (cuStreamBeginCapture_v2(w->stream, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "cannot capture a graph\n");
        exit(2);
    }
    for (int j = 0; j < 4; j++)
        cuLaunchKernel(w->k, w->grids[j], 1, 1, 128, 1, 1, 0, w->stream, NULL, NULL);
    void *fn = NULL;
    if (cuStreamEndCapture(w->stream, &g) != CUDA_SUCCESS || cuGraphInstantiateWithFlags(&w->graph, g, 0) != CUDA_SUCCESS ||
        cuGetProcAddress("cuGraphLaunch", &fn, 12000, 0) != CUDA_SUCCESS || !fn) {
        fprintf(stderr, "cannot instantiate the graph\n");
        exit(2);
    }
    w->graph_via_procaddr = (cuGraphLaunch_fn)fn;
    cuGraphDestroy(g);
}

static void step(struct workload *w)
{
    CUresult rc;
    unsigned g = w->grids[w->i % 4];
    if (w->graph) {
        rc = w->i % 2 ? w->graph_via_procaddr(w->graph, w->stream) : cuGraphLaunch(w->graph, w->stream);
    } else if (w->i % 3 == 0) {
        rc = cuLaunchKernel(w->k, g, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
    } else if (w->i % 3 == 1) {
        CUlaunchConfig c = {.gridDimX = 1, .gridDimY = g, .gridDimZ = 1, .blockDimX = 128, .blockDimY = 1,
                            .blockDimZ = 1};
        rc = cuLaunchKernelEx(&c, w->k, NULL, NULL);
    } else {
        rc = cuLaunchKernel_ptsz(w->k, g, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
    }
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "launch failed: %d\n", rc);
        exit(2);
    }
    w->i++;
}

struct result {
    double share, worst;         /* over the undisturbed windows */
    int used, tried;
};

/* Runs the workload window by window until WINDOWS undisturbed windows (or MAX_WINDOWS) are in. */
static struct result measure(struct workload *w, double expected)
{
    struct result r = {0};
    uint64_t tp = tc_now_ns(), bp = tessera_stub_busy_ns(w->dev), busy = 0, span = 0;
    double prev_cost = 0;
    atomic_store(&worst_stall, 0), atomic_store(&excess_watchdog, 0), atomic_store(&excess_runq, 0);
    while (r.used < WINDOWS && r.tried < MAX_WINDOWS) {
        step(w);
        uint64_t now = tc_now_ns();
        check_run_delay(now);
        if (now - tp < WINDOW_NS)
            continue;
        uint64_t b = tessera_stub_busy_ns(w->dev), stall = atomic_exchange(&worst_stall, 0);
        uint64_t wd = atomic_exchange(&excess_watchdog, 0), rq = atomic_exchange(&excess_runq, 0);
        /* Points of this window the stalls could have cost at most. */
        double cost = (double)(wd > rq ? wd : rq) * expected / 100.0 / (double)POINT_NS;
        double u = 100.0 * (double)(b - bp) / (double)(now - tp), off = u > expected ? u - expected : expected - u;
        r.tried++;
        if (cost > 1 || prev_cost > 1) {
            fprintf(stderr, "t_sm: window %d left out: %.1f%%; stalls (longest %.0f ms) could have cost %.1f points "
                    "(%.1f in the window before)\n", r.tried, u, (double)stall / 1e6, cost, prev_cost);
        } else {
            busy += b - bp, span += now - tp, r.used++;
            if (off > r.worst)
                r.worst = off;
        }
        prev_cost = cost, tp = now, bp = b;
    }
    r.share = span ? 100.0 * (double)busy / (double)span : 0;
    return r;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    double expected = atof(argv[1]);
    double tol = (double)env_u64("TOLERANCE", 5);
    struct workload w = {.dev = (int)env_u64("TEST_DEVICE", 0)};
    uint64_t t_start = tc_now_ns(), min_end = t_start + env_u64("TEST_MIN_SECONDS", 0) * 1000000000ULL;
    pthread_t wd;
    pthread_create(&wd, NULL, watchdog, NULL);
    runq.fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    tc_context(w.dev);
    int sms = 0;
    cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, w.dev);
    const char *kname = getenv("TEST_KERNEL");
    w.k = tc_kernel(kname ? kname : "sleep_200us");
    unsigned grids[4] = {(unsigned)sms, (unsigned)sms * 3 / 2, (unsigned)sms * 2, (unsigned)sms * 3};
    memcpy(w.grids, grids, sizeof grids);
    if (env_u64("TEST_GRAPH", 0))
        setup_graph(&w);
    while (tc_now_ns() - t_start < WARM_NS)
        step(&w);
    struct result r = measure(&w, expected);
    while (tc_now_ns() < min_end)
        step(&w);
    if (w.graph) {
        cuCtxSynchronize();
        cuGraphExecDestroy(w.graph);
        cuStreamDestroy_v2(w.stream);
    }
    char name[96];
    snprintf(name, sizeof name, "%d SMs held at %.0f%%", sms, expected);
    CASE(name);
    fprintf(stderr, "t_sm: %d SMs%s, want %.0f%%: measured %.1f%% of the card after 2 s (worst 0.5 s window off by %.1f; "
            "%d of %d windows undisturbed), %u %s\n", sms, w.graph ? ", graph replay" : "", expected, r.share, r.worst,
            r.used, r.tried, w.i, w.graph ? "replays" : "launches");
    CHECK(r.used == WINDOWS, "inconclusive: the process stalled in %d of %d windows", r.tried - r.used, r.tried);
    CHECK(r.share >= expected - tol && r.share <= expected + tol, "measured %.1f%%, want %.0f±%.0f", r.share, expected, tol);
    CHECK(r.worst <= tol + 2, "a 0.5 s window was off by %.1f points", r.worst);
    return tc_summary("t_sm");
}

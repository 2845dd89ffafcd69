/*
 * vgpu-core's GPU test kit. Run as is on a machine with one NVIDIA GPU and its driver:
 *     gputest --lib /path/to/libvgpu.so
 * It checks the memory cap, SM shares, graph replay, pid namespaces, ordinal remapping and launch
 * overhead by running worker processes (this same program) with and without the library, and prints
 * one table of measured against expected; it exits 1 when a check misses. No nvcc, no framework: the
 * CUDA driver is opened with dlopen and the kernel is PTX text (kernels.h).
 */
#define _GNU_SOURCE
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kit.h"

static double knob(const char *name, double dflt)
{
    const char *v = getenv(name);
    return v && *v ? atof(v) : dflt;
}

/* Device 0 as the driver shows it, without the library. */
static int probe(struct kit *kit)
{
    struct worker w;
    struct env e = {0};
    char log[512], *args[] = {"info", NULL};
    kit->ncase++;
    env_add(&e, "TESSERA_STUB_CARDS_FILE=%s/cards.%d", kit->tmp, kit->ncase);
    kit_log(kit, 0, log, sizeof log);
    if (worker_start(&w, kit->self, args, e.v, log, 0) != 0 || worker_result(&w, 60) != 0) {
        fprintf(stderr, "gputest: cannot use the GPU: %s (log: %s)\n", w.line, log);
        worker_stop(&w);
        return -1;
    }
    int ndev = 0;
    if (sscanf(w.line, "ok %d %d %u %63s", &ndev, &kit->sms, &kit->total_mib, kit->uuid) != 4) {
        fprintf(stderr, "gputest: unexpected answer from the probe: %s\n", w.line);
        worker_stop(&w);
        return -1;
    }
    worker_stop(&w);
    printf("gputest: device 0 of %d: %s, %d SMs, %u MiB; library %s\n", ndev, kit->uuid, kit->sms, kit->total_mib,
           kit->lib);
    printf("gputest: SM shares are throughput relative to an uncapped run (%.1f s warm-up, median of %d "
           "windows of %.1f s), tolerance %.0f points\n\n",
           kit->k.warm_s, kit->k.windows, kit->k.window_s, kit->k.tol);
    return 0;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int usage(void)
{
    fprintf(stderr, "usage: gputest --lib PATH/libvgpu.so   (see vgpu-core/README.md, GPU test kit)\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "worker") == 0)
        return worker_main(argc - 2, argv + 2);
    static struct kit kit;
    kit.lib = getenv("TESSERA_GPUTEST_LIB");
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--lib") == 0 && i + 1 < argc)
            kit.lib = argv[++i];
        else
            return usage();
    if (!kit.lib || access(kit.lib, R_OK) != 0 || kit.lib[0] != '/')
        return usage();
    ssize_t n = readlink("/proc/self/exe", kit.self, sizeof kit.self - 1);
    if (n <= 0)
        return usage();
    kit.self[n] = '\0';
    kit.k = (struct knobs){.warm_s = knob("TESSERA_GPUTEST_WARM_S", 2),
                           .window_s = knob("TESSERA_GPUTEST_WINDOW_S", 0.5),
                           .windows = (int)knob("TESSERA_GPUTEST_WINDOWS", 4),
                           .spin_ns = (uint64_t)knob("TESSERA_GPUTEST_SPIN_US", 200) * 1000,
                           .mem_mib = (unsigned)knob("TESSERA_GPUTEST_MEM_MIB", 1024),
                           .tol = knob("TESSERA_GPUTEST_TOLERANCE", 5)};
    snprintf(kit.tmp, sizeof kit.tmp, "%s/tessera-gputest.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(kit.tmp)) {
        perror("gputest: mkdtemp");
        return 2;
    }
    if (probe(&kit) != 0)
        return 2;
    report_header();
    cases_memory(&kit);
    cases_remap(&kit);
    cases_sm(&kit);
    cases_overhead(&kit);
    report_summary();
    if (report_misses()) {
        printf("workers' logs kept in %s\n", kit.tmp);
        return 1;
    }
    if (getenv("TESSERA_GPUTEST_KEEP") && *getenv("TESSERA_GPUTEST_KEEP")) {
        printf("workers' logs kept in %s (TESSERA_GPUTEST_KEEP)\n", kit.tmp);
        return 0;
    }
    if (nftw(kit.tmp, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "gputest: could not remove %s\n", kit.tmp);
    return 0;
}

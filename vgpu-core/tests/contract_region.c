/*
 * The writing half of the shared region's cross-language contract test (the reading half is the node
 * agent's Go reader, deviceplugin/usage/contract_test.go). Two modes:
 *
 *   contract_region layout
 *       prints the region's layout as this compiler lays it out, one `name=value` a line
 *       (version, sizes and offsets), so the Go reader's constants are checked against the C structs.
 *
 *   contract_region hold <card>:<MiB>[:<launch ms>] ...
 *       run with LD_PRELOAD=libvgpu.so on the stub driver: allocates MiB on each CUDA ordinal through
 *       the hooked cuMemAlloc_v2 (so the library, not this program, writes the region), launches stub
 *       kernels for <launch ms> on that card (so an SM-limited card reports its share), prints
 *       `ready` and waits until stdin closes, then exits without freeing (a process that dies holding
 *       memory: its slot must then count as dead).
 */
#include <stddef.h>
#include <unistd.h>

#include "common.h"
#include "cuda_api.h"
#include "shared/region.h"

static void print_layout(void)
{
    printf("version=%d\n", REGION_VERSION);
    printf("max_cards=%d\n", TESSERA_MAX_CARDS);
    printf("max_procs=%d\n", REGION_MAX_PROCS);
    printf("size=%zu\n", sizeof(struct region));
    printf("off_version=%zu\n", offsetof(struct region, version));
    printf("off_size=%zu\n", offsetof(struct region, size));
    printf("off_reclaimed=%zu\n", offsetof(struct region, reclaimed_bytes));
    printf("off_cards=%zu\n", offsetof(struct region, cards));
    printf("card_size=%zu\n", sizeof(struct region_card));
    printf("card_used=%zu\n", offsetof(struct region_card, used_bytes));
    printf("card_capped=%zu\n", offsetof(struct region_card, capped));
    printf("card_util_pct=%zu\n", offsetof(struct region_card, util_pct));
    printf("card_charged=%zu\n", offsetof(struct region_card, charged_ns));
    printf("off_procs=%zu\n", offsetof(struct region, procs));
    printf("proc_size=%zu\n", sizeof(struct region_proc));
    printf("proc_pid=%zu\n", offsetof(struct region_proc, pid));
    printf("proc_start=%zu\n", offsetof(struct region_proc, start_time));
    printf("proc_used=%zu\n", offsetof(struct region_proc, used));
    printf("proc_marker_fd=%zu\n", offsetof(struct region_proc, marker_fd));
    printf("proc_marker_ino=%zu\n", offsetof(struct region_proc, marker_ino));
}

static void launch_for(int card, uint64_t ms)
{
    CUfunction k = tc_kernel("sleep_200us");
    uint64_t end = tc_now_ns() + ms * 1000000ULL;
    while (tc_now_ns() < end)
        if (cuLaunchKernel(k, 1, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS) {
            fprintf(stderr, "launch on card %d failed\n", card);
            exit(2);
        }
    cuCtxSynchronize();
}

static int hold(int argc, char **argv)
{
    if (cuInit(0) != CUDA_SUCCESS) {
        fprintf(stderr, "cuInit failed\n");
        return 2;
    }
    for (int i = 0; i < argc; i++) {
        int card;
        unsigned long long mib, ms = 0;
        if (sscanf(argv[i], "%d:%llu:%llu", &card, &mib, &ms) < 2) {
            fprintf(stderr, "bad argument %s: want <card>:<MiB>[:<launch ms>]\n", argv[i]);
            return 2;
        }
        CUcontext ctx;
        CUdeviceptr p;
        if (cuCtxCreate_v2(&ctx, 0, card) != CUDA_SUCCESS || cuMemAlloc_v2(&p, mib * MIB) != CUDA_SUCCESS) {
            fprintf(stderr, "cannot allocate %llu MiB on card %d\n", mib, card);
            return 2;
        }
        if (ms)
            launch_for(card, ms);
    }
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0)
        ;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "layout") == 0) {
        print_layout();
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "hold") == 0)
        return hold(argc - 2, argv + 2);
    fprintf(stderr, "usage: contract_region layout | hold <card>:<MiB>[:<launch ms>] ...\n");
    return 2;
}

/*
 * A SIGKILLed process's memory comes back: a child takes most of the limit and is killed; the
 * parent must then be able to take the whole limit. Usage: t_kill   (EXPECT_LIMIT = limit)
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "cuda_api.h"

int main(void)
{
    uint64_t limit = env_u64("EXPECT_LIMIT", 0);
    int p[2];
    if (pipe(p))
        return 2;
    pid_t pid = fork();
    if (pid == 0) {
        tc_context(0);
        CUdeviceptr d;
        char ok = cuMemAlloc_v2(&d, limit / 4 * 3) == CUDA_SUCCESS;
        if (write(p[1], &ok, 1) != 1)
            _exit(3);
        pause();
        _exit(0);
    }
    char ok = 0;
    CASE("a killed process's memory comes back");
    CHECK(read(p[0], &ok, 1) == 1 && ok, "child allocated");
    tc_context(0);
    CUdeviceptr d;
    CHECK(cuMemAlloc_v2(&d, limit / 2) == CUDA_ERROR_OUT_OF_MEMORY, "live child's memory is counted");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK(cuMemAlloc_v2(&d, limit) == CUDA_SUCCESS, "whole limit available after the kill");
    size_t free_b, total;
    cuMemGetInfo_v2(&free_b, &total);
    CHECK(free_b == 0 && total == limit, "free %zu total %zu", free_b, total);
    return tc_summary("t_kill");
}

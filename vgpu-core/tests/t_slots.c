/*
 * Slots of processes that are gone in all but name are reclaimed: a child that exits but is not
 * reaped (a zombie keeps its pid and start time), and a child that exec()s (same pid and start
 * time, but its CUDA memory died with the old image), with and without the library preloaded in
 * the new image. A child takes 3/4 of the limit; the parent checks the charge is live, lets the
 * child exit or exec, and must then get the whole limit.
 * Usage: t_slots zombie|exec|exec-preloaded   (EXPECT_LIMIT = limit)
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "cuda_api.h"

static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p && p[1] ? p[2] : '?';
}

/* The image a child execs into: optionally touches CUDA (registering again), says so, and waits. */
static int sleeper(int fd, int use_cuda)
{
    if (use_cuda)
        tc_context(0);
    char ok = 1;
    if (write(fd, &ok, 1) != 1)
        return 3;
    pause();
    return 0;
}

static void child(int to_parent, int from_parent, const char *mode, const char *self)
{
    tc_context(0);
    CUdeviceptr d;
    char ok = cuMemAlloc_v2(&d, env_u64("EXPECT_LIMIT", 0) / 4 * 3) == CUDA_SUCCESS;
    char go;
    if (write(to_parent, &ok, 1) != 1 || read(from_parent, &go, 1) != 1)
        _exit(3);
    if (strcmp(mode, "zombie") == 0)
        _exit(0);
    char fd[16];
    snprintf(fd, sizeof fd, "%d", to_parent);
    if (strcmp(mode, "exec") == 0)
        unsetenv("LD_PRELOAD");
    execl(self, self, "sleeper", fd, strcmp(mode, "exec") == 0 ? "0" : "1", (char *)NULL);
    _exit(4);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "sleeper") == 0)
        return sleeper(atoi(argv[2]), atoi(argv[3]));
    if (argc != 2)
        return 2;
    const char *mode = argv[1];
    uint64_t limit = env_u64("EXPECT_LIMIT", 0);
    int up[2], down[2];
    if (pipe(up) || pipe(down))
        return 2;
    pid_t pid = fork();
    if (pid == 0)
        child(up[1], down[0], mode, "/proc/self/exe");
    CASE(mode);
    char ok = 0;
    CHECK(read(up[0], &ok, 1) == 1 && ok, "child allocated");
    tc_context(0);
    CUdeviceptr d;
    CHECK(cuMemAlloc_v2(&d, limit / 2) == CUDA_ERROR_OUT_OF_MEMORY, "the live child's memory is counted");
    CHECK(write(down[1], "g", 1) == 1, "go");
    if (strcmp(mode, "zombie") == 0) {
        for (int i = 0; i < 500 && proc_state(pid) != 'Z'; i++)
            usleep(10000);
        CHECK(proc_state(pid) == 'Z', "child is a zombie (state %c)", proc_state(pid));
    } else {
        CHECK(read(up[0], &ok, 1) == 1 && ok, "child exec'd");
    }
    CHECK(cuMemAlloc_v2(&d, limit) == CUDA_SUCCESS, "whole limit available while the child's pid %s",
          strcmp(mode, "zombie") == 0 ? "is a zombie" : "runs another image");
    CHECK(cuMemFree_v2(d) == CUDA_SUCCESS, "free");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return tc_summary("t_slots");
}

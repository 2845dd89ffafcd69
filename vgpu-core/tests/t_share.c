/*
 * N processes of one container race for one card's limit, many rounds. Each child grabs chunks
 * (halving the size on refusal) until it cannot; the parent checks that what they hold together
 * never exceeds the limit, and that the limit was not left mostly unused. Half of the children exit
 * without freeing, so later rounds also exercise reclaim of dead processes.
 * Usage: t_share <processes> <rounds>   (EXPECT_LIMIT = container limit in bytes)
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "cuda_api.h"

static uint64_t child(uint64_t limit, int rfd, unsigned seed)
{
    tc_context(0);
    char go;
    if (read(rfd, &go, 1) != 1) /* start together */
        _exit(3);
    uint64_t held = 0, chunk = limit / 8;
    srand(seed);
    while (chunk >= MIB) {
        uint64_t n = chunk / 2 + (uint64_t)rand() % (chunk / 2);
        CUdeviceptr p;
        CUresult rc = cuMemAlloc_v2(&p, n);
        if (rc == CUDA_SUCCESS)
            held += n;
        else if (rc == CUDA_ERROR_OUT_OF_MEMORY)
            chunk /= 2;
        else
            _exit(4);
    }
    return held;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    int nproc = atoi(argv[1]), rounds = atoi(argv[2]);
    if (nproc < 1 || nproc > 63)
        return 2;
    uint64_t limit = env_u64("EXPECT_LIMIT", 0);
    CASE("processes sharing one limit never exceed it together");
    for (int r = 0; r < rounds; r++) {
        int go[2], res[2], done[2];
        if (pipe(go) || pipe(res) || pipe(done))
            return 2;
        pid_t pids[64];
        for (int i = 0; i < nproc; i++) {
            pids[i] = fork();
            if (pids[i] == 0) {
                close(done[1]); /* so the parent's close is seen as EOF */
                close(go[1]);
                uint64_t held = child(limit, go[0], (unsigned)(r * 131 + i));
                if (write(res[1], &held, sizeof held) != sizeof held)
                    _exit(5);
                char x;
                if (read(done[0], &x, 1) < 0) /* hold until every child has reported */
                    _exit(6);
                _exit(0);
            }
        }
        char starts[64] = {0};
        if (write(go[1], starts, (size_t)nproc & 63) != nproc)
            return 2;
        uint64_t total = 0;
        for (int i = 0; i < nproc; i++) {
            uint64_t h = 0;
            if (read(res[0], &h, sizeof h) != sizeof h)
                h = UINT64_MAX / 2;
            total += h;
        }
        CHECK(total <= limit, "round %d: %d processes hold %llu > limit %llu", r, nproc,
              (unsigned long long)total, (unsigned long long)limit);
        CHECK(total >= limit / 2, "round %d: only %llu of %llu used: test is vacuous", r,
              (unsigned long long)total, (unsigned long long)limit);
        close(done[1]); /* children see EOF and exit, their memory unfreed */
        for (int i = 0; i < nproc; i++) {
            int st;
            waitpid(pids[i], &st, 0);
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "round %d child %d status %d", r, i, st);
        }
        close(go[0]), close(go[1]), close(res[0]), close(res[1]), close(done[0]);
    }
    return tc_summary("t_share");
}

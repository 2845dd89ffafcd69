/*
 * Unit tests of the shared region: limits, saturation, a dying lock holder, dead-process reclaim,
 * and a region the node agent created (never created or resized here).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "shared/region.h"

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* A file of `size` zero bytes (or none when size < 0), as the agent might leave it. */
static void agent_file(const char *path, long long size)
{
    unlink(path);
    if (size < 0)
        return;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, size) != 0)
        fprintf(stderr, "cannot make %s\n", path);
    close(fd);
}

/* The agent's region: opened without create, it must never be created or resized. */
static void test_agent_region(const char *dir)
{
    char path[512];
    int err = 0;
    long long full = (long long)sizeof(struct region);
    snprintf(path, sizeof path, "%s/unit-region-agent", dir);

    CASE("an agent region that does not exist is not created");
    agent_file(path, -1);
    CHECK(region_open(path, false, &err) == NULL && err == ENOENT, "err %d", err);
    CHECK(file_size(path) == -1, "the file was created");

    CASE("an agent region of the right size is used as it is, not resized");
    agent_file(path, full);
    struct region *r = region_open(path, false, &err);
    CHECK(r != NULL && r->magic == REGION_MAGIC && r->version == REGION_VERSION, "mapped and initialised (err %d)",
          err);
    CHECK(file_size(path) == full, "size %lld, want %lld", file_size(path), full);
    int slot = r ? region_register(r) : -1;
    CHECK(r && region_reserve(r, slot, 0, 1000, 1000), "usable");
    struct region *again = region_open(path, false, &err);
    CHECK(again && again->cards[0].used_bytes == 1000, "a second process sees the same account");

    CASE("an agent region of another size is refused and left alone");
    long long sizes[] = {0, 1, full / 2, full - 1, full + 1, full + 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        long long size = sizes[i];
        agent_file(path, size);
        CHECK(region_open(path, false, &err) == NULL && err == EPROTO, "size %lld: err %d", size, err);
        CHECK(file_size(path) == size, "size %lld became %lld", size, file_size(path));
    }
    unlink(path);
}

static struct region *fresh(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
    int err = 0;
    return region_open(path, true, &err);
}

int main(void)
{
    const char *dir = getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp";
    struct region *r = fresh(dir, "unit-region-1");
    int slot = region_register(r);

    CASE("reservations stop exactly at the limit");
    CHECK(slot >= 0, "slot");
    CHECK(region_reserve(r, slot, 0, 1000, 1000), "reserve the whole limit");
    CHECK(!region_reserve(r, slot, 0, 1, 1000), "one byte more");
    CHECK(region_used(r, 0) == 1000, "used %llu", (unsigned long long)region_used(r, 0));
    CHECK(!region_reserve(r, slot, 1, UINT64_MAX, 1000), "huge request does not wrap");

    CASE("releases saturate at zero");
    region_release(r, slot, 0, 5000);
    CHECK(region_used(r, 0) == 0, "used %llu after over-release", (unsigned long long)region_used(r, 0));
    CHECK(r->procs[slot].used[0] == 0, "slot usage %llu", (unsigned long long)r->procs[slot].used[0]);

    CASE("a lock holder that dies leaves a usable, repaired region");
    CHECK(region_reserve(r, slot, 0, 100, 1000), "reserve");
    pid_t pid = fork();
    if (pid == 0) {
        pthread_mutex_lock(&r->lock);
        r->cards[0].used_bytes += 777; /* a half-done update */
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    CHECK(region_reserve(r, slot, 0, 900, 1000), "reserve after the holder died (totals rebuilt from slots)");
    CHECK(region_used(r, 0) == 1000, "used %llu", (unsigned long long)region_used(r, 0));
    region_release(r, slot, 0, 1000);

    CASE("a dead process's usage is reclaimed when room is needed");
    pid = fork();
    if (pid == 0) {
        int s = region_register(r);
        _exit(region_reserve(r, s, 0, 600, 1000) ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child reserved");
    CHECK(region_reserve(r, slot, 0, 1000, 1000), "whole limit after the child died");
    CHECK(r->reclaimed_bytes == 600, "reclaimed %llu", (unsigned long long)r->reclaimed_bytes);
    region_release(r, slot, 0, 1000);

    CASE("a reused pid with another start time is not mistaken for the owner");
    int fake = slot + 1;
    r->procs[fake].pid = getpid();
    r->procs[fake].start_time = 1; /* our pid, but not our start time */
    r->procs[fake].used[0] = 500;
    r->cards[0].used_bytes += 500;
    CHECK(region_reserve(r, slot, 0, 1000, 1000), "stale slot reclaimed");
    CHECK(r->procs[fake].pid == 0, "stale slot freed");

    CASE("a region of another version is not trusted");
    char path[512];
    snprintf(path, sizeof path, "%s/unit-region-2", dir);
    struct region *r2 = fresh(dir, "unit-region-2");
    r2->version = 99;
    int err = 0;
    struct region *r3 = region_open(path, true, &err);
    CHECK(r3 == NULL && err == EPROTO, "another layout version is refused (err %d)", err);

    CASE("a region that cannot be created is reported with its errno");
    r3 = region_open("/nonexistent-tessera-dir/region", true, &err);
    CHECK(r3 == NULL && err == ENOENT, "err %d", err);

    test_agent_region(dir);
    return tc_summary("unit_region");
}

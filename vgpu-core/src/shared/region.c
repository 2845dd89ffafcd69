#include "region.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/log.h"
#include "owner.h"

static uint64_t sat_sub(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

static bool proc_alive(const struct region_proc *p)
{
    struct owner_id id = {p->pid, p->start_time, p->marker_fd, p->marker_ino};
    return owner_alive(&id);
}

/* Under the lock: gives a slot's usage back and frees it. */
static void release_slot(struct region *r, int i, const char *why)
{
    struct region_proc *p = &r->procs[i];
    for (int c = 0; c < TESSERA_MAX_CARDS; c++) {
        r->reclaimed_bytes += p->used[c];
        r->cards[c].used_bytes = sat_sub(r->cards[c].used_bytes, p->used[c]);
    }
    TLOG(TLOG_INFO, "reclaimed slot %d of pid %d: %s", i, p->pid, why);
    memset(p, 0, sizeof *p);
}

/* Under the lock: frees slots of dead processes and rebuilds card totals from the live slots. */
static void reclaim_dead(struct region *r)
{
    uint64_t totals[TESSERA_MAX_CARDS] = {0};
    for (int i = 0; i < REGION_MAX_PROCS; i++) {
        struct region_proc *p = &r->procs[i];
        if (p->pid == 0)
            continue;
        if (!proc_alive(p)) {
            release_slot(r, i, "process exited, is a zombie, or exec'd");
            continue;
        }
        for (int c = 0; c < TESSERA_MAX_CARDS; c++)
            totals[c] += p->used[c];
    }
    for (int c = 0; c < TESSERA_MAX_CARDS; c++)
        r->cards[c].used_bytes = totals[c];
}

static void region_lock(struct region *r)
{
    int rc = pthread_mutex_lock(&r->lock);
    if (rc == EOWNERDEAD) {
        /* The holder died mid-update: per-slot usage is authoritative, so rebuild totals from it. */
        TLOG(TLOG_WARN, "shared region lock holder died; repairing accounting");
        reclaim_dead(r);
        pthread_mutex_consistent(&r->lock);
    } else if (rc != 0) {
        TLOG(TLOG_ERROR, "shared region lock failed: %s", strerror(rc));
    }
}

static void region_unlock(struct region *r)
{
    pthread_mutex_unlock(&r->lock);
}

static void region_init_fresh(struct region *r, bool pshared)
{
    memset(r, 0, sizeof *r);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    if (pshared)
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&r->lock, &a);
    pthread_mutexattr_destroy(&a);
    r->version = REGION_VERSION;
    r->size = sizeof *r;
    /* Publish the magic last: readers only trust an initialised region. */
    __atomic_store_n(&r->magic, REGION_MAGIC, __ATOMIC_RELEASE);
}

struct region *region_private(void)
{
    void *m = mmap(NULL, sizeof(struct region), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    region_init_fresh(m, false);
    return m;
}

/*
 * Maps the region file at fd, initialising it when new; NULL with errno set on failure. A region
 * this library creates (create) is sized here. One the node agent created is used as it is: it
 * must have exactly this layout's size (the agent creates it so), is never truncated or grown,
 * and its mode is left alone. Another size means another layout, or a file someone in the
 * container truncated: failing closed beats re-initialising what other processes have mapped.
 */
static struct region *region_map(int fd, const char *path, bool create)
{
    struct region *r = NULL;
    /* lseek, not fstat: fstat is a GLIBC_2.33 symbol and the library must load on glibc 2.17. */
    off_t size = lseek(fd, 0, SEEK_END);
    if (size < 0)
        return NULL;
    if (size != (off_t)sizeof *r && !create) {
        TLOG(TLOG_ERROR, "shared region %s has %lld bytes, this library needs %zu: not resizing a region the "
             "node agent created", path, (long long)size, sizeof *r);
        errno = EPROTO;
        return NULL;
    }
    if (size > 0 && size < (off_t)sizeof *r) {
        /*
         * Only an empty file is new (flock above serialises its creation). A shorter one was cut by
         * someone in the container: extending it again would bring back zeros where the other
         * processes' counters were, and let the next process allocate past the container's cap.
         */
        TLOG(TLOG_ERROR, "shared region %s has %lld bytes, this library needs %zu: it was truncated; "
             "refusing it rather than re-creating its counters", path, (long long)size, sizeof *r);
        errno = EPROTO;
        return NULL;
    }
    if (size < (off_t)sizeof *r) {
        /*
         * Allocate every page now: on a tmpfs of bounded size (the pod's region volume, /dev/shm) a
         * sparse region would fault with SIGBUS on the first slot written once the tmpfs is full. A
         * filesystem without fallocate gets a sparse file, as before.
         */
        int rc = posix_fallocate(fd, 0, sizeof *r);
        if (rc == EOPNOTSUPP || rc == EINVAL) {
            if (ftruncate(fd, sizeof *r) != 0)
                return NULL;
        } else if (rc != 0) {
            errno = rc;
            return NULL;
        }
    }
    void *m = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return NULL;
    r = m;
    if (r->magic != REGION_MAGIC) {
        if (create)
            fchmod(fd, 0666); /* processes of one container may run as different users */
        region_init_fresh(r, true);
    } else if (r->version != REGION_VERSION || r->size != sizeof *r) {
        TLOG(TLOG_ERROR, "shared region %s has layout version %u size %u, this library needs %u/%zu", path,
             r->version, r->size, REGION_VERSION, sizeof *r);
        munmap(r, sizeof *r);
        errno = EPROTO;
        return NULL;
    }
    return r;
}

struct region *region_open(const char *path, bool create, int *err)
{
    /* O_NOFOLLOW: a link planted where the region goes is refused, not followed. */
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0666);
    if (fd < 0) {
        *err = errno;
        return NULL;
    }
    /* flock serialises first-time initialisation; the kernel drops it if we die holding it. */
    flock(fd, LOCK_EX);
    struct region *r = region_map(fd, path, create);
    *err = r ? 0 : errno;
    flock(fd, LOCK_UN);
    close(fd);
    return r;
}

int region_register(struct region *r)
{
    struct owner_id me;
    owner_self(&me);
    region_lock(r);
    reclaim_dead(r);
    int slot = -1;
    for (int i = 0; i < REGION_MAX_PROCS; i++) {
        struct region_proc *p = &r->procs[i];
        /* Our pid and start time in a slot: an earlier image of this process, before an exec. */
        if (p->pid == me.pid && p->start_time == me.start_time)
            release_slot(r, i, "an earlier program image of this process (exec)");
        if (p->pid == 0 && slot < 0)
            slot = i;
    }
    if (slot >= 0) {
        struct region_proc *p = &r->procs[slot];
        memset(p, 0, sizeof *p);
        p->pid = me.pid;
        p->start_time = me.start_time;
        p->marker_fd = me.marker_fd;
        p->marker_ino = me.marker_ino;
    }
    region_unlock(r);
    if (slot < 0)
        TLOG(TLOG_ERROR, "shared region full (%d processes): allocations will be refused", REGION_MAX_PROCS);
    return slot;
}

bool region_reserve(struct region *r, int slot, int card, uint64_t bytes, uint64_t limit)
{
    if (slot < 0 || card < 0 || card >= TESSERA_MAX_CARDS)
        return false;
    region_lock(r);
    struct region_card *c = &r->cards[card];
    bool fits = limit == 0 || (bytes <= limit && c->used_bytes <= limit - bytes);
    if (!fits) {
        reclaim_dead(r);
        fits = bytes <= limit && c->used_bytes <= limit - bytes;
    }
    if (fits) {
        c->used_bytes += bytes;
        r->procs[slot].used[card] += bytes;
    }
    region_unlock(r);
    return fits;
}

void region_release(struct region *r, int slot, int card, uint64_t bytes)
{
    if (slot < 0 || card < 0 || card >= TESSERA_MAX_CARDS)
        return;
    region_lock(r);
    r->procs[slot].used[card] = sat_sub(r->procs[slot].used[card], bytes);
    r->cards[card].used_bytes = sat_sub(r->cards[card].used_bytes, bytes);
    region_unlock(r);
}

uint64_t region_used(struct region *r, int card)
{
    if (card < 0 || card >= TESSERA_MAX_CARDS)
        return 0;
    region_lock(r);
    reclaim_dead(r);
    uint64_t used = r->cards[card].used_bytes;
    region_unlock(r);
    return used;
}

int region_live_procs(struct region *r, int32_t *pids, int max)
{
    int n = 0;
    region_lock(r);
    for (int i = 0; i < REGION_MAX_PROCS; i++)
        if (r->procs[i].pid != 0 && proc_alive(&r->procs[i])) {
            if (n < max)
                pids[n] = r->procs[i].pid;
            n++;
        }
    region_unlock(r);
    return n;
}

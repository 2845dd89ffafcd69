/* The shared, time-sliced simulated cards of the stub driver (see stub_card.h). */
#define _GNU_SOURCE
#include "stub_card.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stub.h"

#define SIM_QUEUE 4096
#define SIM_RING 8192
#define SIM_MAGIC 0x5349u
#define ITEM_KERNEL 1u
#define ITEM_EVENT 2u

struct sim_item {
    uint64_t enq, dur;
    uint32_t kind, event;
};

struct sim_ival {
    uint64_t start, end;
};

struct sim_proc {
    int32_t pid, nsid;
    uint64_t qhead, qtail;       /* FIFO positions; index modulo SIM_QUEUE */
    uint64_t queued_ns;          /* kernel time not yet started */
    uint64_t last_end;           /* end of this process's last started kernel */
    uint64_t busy_started;       /* kernel time started so far (its tail may lie in the future) */
    uint64_t launches;
    uint64_t rhead, rcount;      /* ring of this process's busy intervals, newest at rhead-1 */
    struct sim_ival ring[SIM_RING];
    struct sim_item q[SIM_QUEUE];
    uint64_t ev_ts[SIM_EVENTS];  /* completion time of each event; 0 while pending */
};

struct sim_card {
    pthread_mutex_t mu;
    uint32_t magic;
    int32_t cur;                 /* process holding the time slice, -1 none */
    uint64_t free_at, slice_end;
    struct sim_proc p[SIM_PROCS];
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct sim_card *cards;
static int ncards;
static uint64_t queue_ns, slice_ns, jitter_pct;
static int32_t self_nsid;
static pthread_mutex_t local_mu = PTHREAD_MUTEX_INITIALIZER;
static int32_t slot_pid[16];
static int slot_of[16];
static uint8_t ev_used[SIM_EVENTS];
static int32_t my_pid; /* getpid() is a system call; every simulated call needs it */

static void forget_pid(void)
{
    my_pid = 0;
}

static int32_t self_pid(void)
{
    if (!my_pid)
        my_pid = getpid();
    return my_pid;
}

uint64_t sim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ULL), .tv_nsec = (long)(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

static void card_init(struct sim_card *c, int pshared)
{
    memset(c, 0, sizeof *c);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    if (pshared)
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&c->mu, &a);
    pthread_mutexattr_destroy(&a);
    c->cur = -1;
    c->magic = SIM_MAGIC;
}

static void setup(void)
{
    ncards = tessera_stub_device_count();
    queue_ns = env_u64("TESSERA_STUB_QUEUE_MS", 20) * 1000000ULL;
    slice_ns = env_u64("TESSERA_STUB_TIMESLICE_US", 2000) * 1000ULL;
    jitter_pct = env_u64("TESSERA_STUB_JITTER_PCT", 4);
    self_nsid = (int32_t)env_u64("TESSERA_STUB_PIDNS", 0);
    pthread_atfork(NULL, NULL, forget_pid);
    size_t size = sizeof(struct sim_card) * (size_t)ncards;
    const char *path = getenv("TESSERA_STUB_CARDS_FILE");
    int fd = path && *path ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666) : -1;
    if (fd >= 0) {
        flock(fd, LOCK_EX);
        struct stat st;
        if (fstat(fd, &st) == 0 && (st.st_size >= (off_t)size || ftruncate(fd, (off_t)size) == 0)) {
            void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            cards = m == MAP_FAILED ? NULL : m;
        }
        for (int i = 0; cards && i < ncards; i++)
            if (cards[i].magic != SIM_MAGIC)
                card_init(&cards[i], 1);
        flock(fd, LOCK_UN);
        close(fd);
    }
    if (!cards) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            abort();
        cards = m;
        for (int i = 0; i < ncards; i++)
            card_init(&cards[i], 0);
    }
}

static struct sim_card *card(int dev)
{
    pthread_once(&once, setup);
    return dev >= 0 && dev < ncards ? &cards[dev] : NULL;
}

static void lock(struct sim_card *c)
{
    if (pthread_mutex_lock(&c->mu) == EOWNERDEAD)
        pthread_mutex_consistent(&c->mu);
}

static int alive(int32_t pid)
{
    return pid > 0 && !(kill(pid, 0) != 0 && errno == ESRCH);
}

static void ring_push(struct sim_proc *p, uint64_t start, uint64_t end)
{
    if (p->rcount) {
        struct sim_ival *last = &p->ring[(p->rhead + SIM_RING - 1) % SIM_RING];
        if (last->end == start) {
            last->end = end;
            return;
        }
    }
    p->ring[p->rhead] = (struct sim_ival){start, end};
    p->rhead = (p->rhead + 1) % SIM_RING;
    if (p->rcount < SIM_RING)
        p->rcount++;
}

/* Busy time of p after t, from the newest interval backwards. */
static uint64_t busy_after(const struct sim_proc *p, uint64_t t)
{
    uint64_t sum = 0;
    for (uint64_t k = 0; k < p->rcount; k++) {
        const struct sim_ival *iv = &p->ring[(p->rhead + SIM_RING - 1 - k) % SIM_RING];
        if (iv->end <= t)
            break;
        sum += iv->end - (iv->start > t ? iv->start : t);
    }
    return sum;
}

/* Completes the event markers at the head of every queue: they follow their own process's work only. */
static void settle_events(struct sim_card *c)
{
    for (int i = 0; i < SIM_PROCS; i++) {
        struct sim_proc *p = &c->p[i];
        while (p->qhead != p->qtail && p->q[p->qhead % SIM_QUEUE].kind == ITEM_EVENT) {
            struct sim_item *it = &p->q[p->qhead % SIM_QUEUE];
            p->ev_ts[it->event] = it->enq > p->last_end ? it->enq : p->last_end;
            p->qhead++;
        }
    }
}

/* The process the card serves next, and when it can start; -1 when no kernel is queued. */
static int pick(const struct sim_card *c, uint64_t *start)
{
    uint64_t t0 = UINT64_MAX;
    for (int i = 0; i < SIM_PROCS; i++) {
        const struct sim_proc *p = &c->p[i];
        if (p->qhead == p->qtail)
            continue;
        uint64_t enq = p->q[p->qhead % SIM_QUEUE].enq, s = enq > c->free_at ? enq : c->free_at;
        if (s < t0)
            t0 = s;
    }
    if (t0 == UINT64_MAX)
        return -1;
    *start = t0;
    int first = c->cur < 0 ? 0 : c->cur;
    for (int k = 0; k < SIM_PROCS; k++) {
        /* The slice holder keeps the card while its slice lasts; after it, the next in turn goes first. */
        int i = (first + k + (c->cur >= 0 && t0 >= c->slice_end ? 1 : 0)) % SIM_PROCS;
        const struct sim_proc *p = &c->p[i];
        if (p->qhead != p->qtail && p->q[p->qhead % SIM_QUEUE].enq <= t0)
            return i;
    }
    return -1;
}

/* Runs the card's schedule forward to time t. */
static void advance(struct sim_card *c, uint64_t t)
{
    for (;;) {
        settle_events(c);
        uint64_t start;
        int i = pick(c, &start);
        if (i < 0 || start > t)
            return;
        struct sim_proc *p = &c->p[i];
        struct sim_item *it = &p->q[p->qhead % SIM_QUEUE];
        if (i != c->cur || start >= c->slice_end) {
            c->cur = i;
            c->slice_end = start + slice_ns;
        }
        uint64_t end = start + it->dur;
        ring_push(p, start, end);
        p->busy_started += it->dur;
        p->queued_ns -= it->dur;
        p->last_end = end;
        c->free_at = end;
        p->qhead++;
    }
}

int32_t sim_self_nsid(void)
{
    pthread_once(&once, setup);
    return self_nsid;
}

int sim_join(int dev)
{
    struct sim_card *c = card(dev);
    if (!c)
        return -1;
    int32_t me = self_pid();
    pthread_mutex_lock(&local_mu);
    if (slot_pid[dev] == me) {
        pthread_mutex_unlock(&local_mu);
        return slot_of[dev];
    }
    lock(c);
    advance(c, sim_now_ns());
    int slot = -1;
    for (int i = 0; i < SIM_PROCS && slot < 0; i++) {
        struct sim_proc *p = &c->p[i];
        if (p->pid == 0 || !alive(p->pid)) {
            memset(p, 0, offsetof(struct sim_proc, ring));
            p->pid = me;
            p->nsid = self_nsid;
            slot = i;
        }
    }
    pthread_mutex_unlock(&c->mu);
    slot_pid[dev] = me;
    slot_of[dev] = slot;
    pthread_mutex_unlock(&local_mu);
    return slot;
}

static struct sim_proc *self(int dev, struct sim_card **cp)
{
    int slot = sim_join(dev);
    *cp = card(dev);
    return slot < 0 ? NULL : &(*cp)->p[slot];
}

static int enqueue(struct sim_proc *p, struct sim_item it)
{
    if (p->qtail - p->qhead >= SIM_QUEUE)
        return 0;
    p->q[p->qtail % SIM_QUEUE] = it;
    p->qtail++;
    return 1;
}

/* A kernel's run time scatters by up to ±jitter_pct around its nominal time, as clocks and memory do. */
static uint64_t jittered(uint64_t dur)
{
    static __thread uint64_t x = 0x9E3779B97F4A7C15ULL;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    if (!jitter_pct)
        return dur;
    uint64_t span = dur * jitter_pct / 100;
    return dur - span + (span ? x % (2 * span + 1) : 0);
}

void sim_kernel(int dev, uint64_t dur)
{
    struct sim_card *c;
    struct sim_proc *p = self(dev, &c);
    if (!p || dur == 0)
        return;
    dur = jittered(dur);
    for (;;) {
        lock(c);
        uint64_t now = sim_now_ns();
        advance(c, now);
        uint64_t pending = p->queued_ns + (p->last_end > now ? p->last_end - now : 0);
        /* Like a full hardware queue: the launching thread blocks until there is room. */
        if (pending <= queue_ns && enqueue(p, (struct sim_item){now, dur, ITEM_KERNEL, 0})) {
            p->queued_ns += dur;
            p->launches++;
            advance(c, now);
            pthread_mutex_unlock(&c->mu);
            return;
        }
        pthread_mutex_unlock(&c->mu);
        uint64_t over = pending > queue_ns ? pending - queue_ns : 100000;
        sleep_ns(over < 50000 ? 50000 : over > 2000000 ? 2000000 : over);
    }
}

int sim_event_alloc(void)
{
    pthread_mutex_lock(&local_mu);
    int ev = -1;
    for (int i = 1; i < SIM_EVENTS && ev < 0; i++)
        if (!ev_used[i]) {
            ev_used[i] = 1;
            ev = i;
        }
    pthread_mutex_unlock(&local_mu);
    return ev;
}

void sim_event_free(int ev)
{
    pthread_mutex_lock(&local_mu);
    if (ev > 0 && ev < SIM_EVENTS)
        ev_used[ev] = 0;
    pthread_mutex_unlock(&local_mu);
}

void sim_event_record(int dev, int ev)
{
    struct sim_card *c;
    struct sim_proc *p = self(dev, &c);
    if (!p)
        return;
    for (;;) {
        lock(c);
        uint64_t now = sim_now_ns();
        advance(c, now);
        p->ev_ts[ev] = 0;
        int ok = enqueue(p, (struct sim_item){now, 0, ITEM_EVENT, (uint32_t)ev});
        if (ok)
            settle_events(c);
        pthread_mutex_unlock(&c->mu);
        if (ok)
            return;
        sleep_ns(100000);
    }
}

uint64_t sim_event_time(int dev, int ev)
{
    struct sim_card *c;
    struct sim_proc *p = self(dev, &c);
    if (!p)
        return 0;
    lock(c);
    uint64_t now = sim_now_ns();
    advance(c, now);
    uint64_t ts = p->ev_ts[ev];
    pthread_mutex_unlock(&c->mu);
    return ts && ts <= now ? ts : 0;
}

void sim_drain(int dev)
{
    struct sim_card *c;
    struct sim_proc *p = self(dev, &c);
    while (p) {
        lock(c);
        uint64_t now = sim_now_ns();
        advance(c, now);
        uint64_t left = p->queued_ns + (p->last_end > now ? p->last_end - now : 0);
        int empty = p->qhead == p->qtail;
        pthread_mutex_unlock(&c->mu);
        if (empty && left == 0)
            return;
        sleep_ns(left < 50000 ? 50000 : left > 2000000 ? 2000000 : left);
    }
}

uint64_t sim_busy_self(int dev)
{
    struct sim_card *c;
    struct sim_proc *p = self(dev, &c);
    if (!p)
        return 0;
    lock(c);
    uint64_t now = sim_now_ns();
    advance(c, now);
    uint64_t b = p->busy_started - busy_after(p, now);
    pthread_mutex_unlock(&c->mu);
    return b;
}

uint64_t sim_launches_self(int dev)
{
    struct sim_card *c;
    struct sim_proc *p = self(dev, &c);
    return p ? p->launches : 0;
}

int sim_usage(int dev, uint64_t t0, uint64_t t1, struct sim_use *out, int max)
{
    struct sim_card *c = card(dev);
    if (!c)
        return 0;
    int n = 0;
    lock(c);
    advance(c, sim_now_ns());
    for (int i = 0; i < SIM_PROCS && n < max; i++) {
        struct sim_proc *p = &c->p[i];
        if (p->pid == 0 || !alive(p->pid))
            continue;
        out[n++] = (struct sim_use){p->pid, p->nsid, busy_after(p, t0) - busy_after(p, t1)};
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

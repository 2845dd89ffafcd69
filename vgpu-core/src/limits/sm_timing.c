#include "sm_timing.h"

#include <pthread.h>

#include "../common/log.h"
#include "sm_math.h"

#define PENDING 1024                 /* launches timed and not yet harvested, per process */
#define POOL 256                     /* spare events kept for reuse */
#define TABLE 1024                   /* kernels and graphs with an estimate of their own */
#define FIRST_WAVE_NS 100000ULL      /* first guesses, settled against the first measurement */
#define FIRST_GRAPH_NS 1000000ULL
/* A kernel with this many clean timings in its current bucket is timed only one launch in SAMPLE_EVERY:
 * the events cost microseconds per launch on a real driver, and launch-bound work feels it. */
#define WELL_KNOWN 16
#define SAMPLE_EVERY 8

struct pending {
    CUevent start, end;
    CUcontext ctx;
    const void *key;
    uint64_t units, charged;
    int dev, guessed, graph;
};

struct spare {
    CUevent ev;
    CUcontext ctx;
};

struct entry {
    const void *key;
    struct sm_est est;
    unsigned launches;           /* since it became well known: picks the ones to time */
};

static struct {
    pthread_mutex_t mu;
    struct pending ring[PENDING];
    unsigned head, count;
    struct spare pool[POOL];
    unsigned npool;
    struct entry table[TABLE];
    uint64_t last_wave_ns[TESSERA_MAX_CARDS], last_graph_ns[TESSERA_MAX_CARDS]; /* per device */
    void (*settle)(int dev, int64_t delta_ns);
    uint64_t now;                    /* clock at the last harvest */
    int warned;
} tm = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct entry *lookup(const void *key, int insert)
{
    uintptr_t h = ((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ULL;
    for (unsigned k = 0; k < 16; k++) {
        struct entry *e = &tm.table[(h + k) % TABLE];
        if (e->key == key)
            return e;
        if (!e->key) {
            if (!insert)
                return NULL;
            e->key = key;
            return e;
        }
    }
    return NULL; /* crowded: this key lives on the card-wide default */
}

uint64_t sm_timing_estimate(struct sm_ticket *t, uint64_t now)
{
    pthread_mutex_lock(&tm.mu);
    struct entry *e = lookup(t->key, 0);
    uint64_t per = e ? sm_est_get(&e->est, now) : 0;
    t->guessed = per == 0;
    t->sample = t->guessed || !e || e->est.cur.n < WELL_KNOWN || e->launches++ % SAMPLE_EVERY == 0;
    if (!per) {
        per = t->graph ? tm.last_graph_ns[t->dev] : tm.last_wave_ns[t->dev];
        if (!per)
            per = t->graph ? FIRST_GRAPH_NS : FIRST_WAVE_NS;
    }
    pthread_mutex_unlock(&tm.mu);
    return per * t->units;
}

/* An event of the current context, from the spares or new; NULL when timing is unavailable. */
static CUevent take_event(CUcontext ctx)
{
    pthread_mutex_lock(&tm.mu);
    for (unsigned i = tm.npool; i-- > 0;)
        if (tm.pool[i].ctx == ctx) {
            CUevent ev = tm.pool[i].ev;
            tm.pool[i] = tm.pool[--tm.npool];
            pthread_mutex_unlock(&tm.mu);
            return ev;
        }
    pthread_mutex_unlock(&tm.mu);
    CUevent ev = NULL;
    if (!tessera_cuda.cuEventCreate || tessera_cuda.cuEventCreate(&ev, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        ev = NULL;
    return ev;
}

/* Under tm.mu. */
static void give_event(CUevent ev, CUcontext ctx)
{
    if (!ev)
        return;
    if (tm.npool < POOL)
        tm.pool[tm.npool++] = (struct spare){ev, ctx};
    else if (tessera_cuda.cuEventDestroy_v2)
        tessera_cuda.cuEventDestroy_v2(ev);
}

/* An event the driver refused (its context may be gone, and a new one may reuse the address). */
static void drop_event(CUevent ev)
{
    if (ev && tessera_cuda.cuEventDestroy_v2)
        tessera_cuda.cuEventDestroy_v2(ev);
}

static void warn_untimed(const char *why)
{
    if (__atomic_exchange_n(&tm.warned, 1, __ATOMIC_RELAXED))
        return;
    TLOG(TLOG_WARN, "launch timing unavailable (%s): SM limit charges estimates only", why);
}

static CUcontext current_ctx(void)
{
    CUcontext c = NULL;
    if (!tessera_cuda.cuCtxGetCurrent || tessera_cuda.cuCtxGetCurrent(&c) != CUDA_SUCCESS)
        return NULL;
    return c;
}

void sm_timing_start(struct sm_ticket *t, CUstream s)
{
    t->timed = 0;
    if (!t->sample)
        return;
    CUcontext ctx = current_ctx();
    if (!ctx || !tessera_cuda.cuEventRecord || !tessera_cuda.cuEventQuery || !tessera_cuda.cuEventElapsedTime) {
        warn_untimed("no current context or no event API");
        return;
    }
    CUevent ev = take_event(ctx);
    if (!ev) {
        warn_untimed("cuEventCreate failed");
        return;
    }
    if (tessera_cuda.cuEventRecord(ev, s) != CUDA_SUCCESS) {
        drop_event(ev);
        warn_untimed("cuEventRecord failed");
        return;
    }
    t->start = ev;
    t->ctx = ctx;
    t->timed = 1;
}

/* Under tm.mu: folds one completed pair into the estimates; returns 0 while it is still running. */
static int harvest_one(uint64_t now)
{
    struct pending *p = &tm.ring[tm.head];
    CUresult q = tessera_cuda.cuEventQuery(p->end);
    if (q == CUDA_ERROR_NOT_READY)
        return 0;
    float ms = 0;
    if (q != CUDA_SUCCESS) {
        drop_event(p->start);
        drop_event(p->end);
    } else if (tessera_cuda.cuEventElapsedTime(&ms, p->start, p->end) == CUDA_SUCCESS) {
        uint64_t ns = ms > 0 ? (uint64_t)((double)ms * 1e6) : 0, per = ns / (p->units ? p->units : 1);
        struct entry *e = lookup(p->key, 1);
        if (e)
            sm_est_observe(&e->est, now, per);
        if (per)
            *(p->graph ? &tm.last_graph_ns[p->dev] : &tm.last_wave_ns[p->dev]) = per;
        if (p->guessed && tm.settle)
            tm.settle(p->dev, (int64_t)ns - (int64_t)p->charged);
    }
    if (q == CUDA_SUCCESS) {
        give_event(p->start, p->ctx);
        give_event(p->end, p->ctx);
    }
    tm.head = (tm.head + 1) % PENDING;
    tm.count--;
    return 1;
}

void sm_timing_harvest(uint64_t now, void (*settle)(int dev, int64_t delta_ns))
{
    pthread_mutex_lock(&tm.mu);
    tm.settle = settle;
    tm.now = now;
    while (tm.count > 0 && harvest_one(now))
        ;
    pthread_mutex_unlock(&tm.mu);
}

void sm_timing_finish(struct sm_ticket *t, CUstream s, CUresult rc)
{
    if (!t->timed)
        return;
    CUcontext ctx = t->ctx;
    CUevent end = rc == CUDA_SUCCESS ? take_event(ctx) : NULL;
    if (end && tessera_cuda.cuEventRecord(end, s) != CUDA_SUCCESS) {
        drop_event(end);
        end = NULL;
    }
    pthread_mutex_lock(&tm.mu);
    if (!end) {
        give_event(t->start, ctx);
        pthread_mutex_unlock(&tm.mu);
        return;
    }
    while (tm.count == PENDING) {
        /* A thousand launches in flight: wait for the oldest rather than lose its measurement. */
        CUevent oldest = tm.ring[tm.head].end;
        pthread_mutex_unlock(&tm.mu);
        if (tessera_cuda.cuEventSynchronize)
            tessera_cuda.cuEventSynchronize(oldest);
        pthread_mutex_lock(&tm.mu);
        if (tm.count == PENDING && !harvest_one(tm.now))
            break;
    }
    if (tm.count < PENDING) {
        tm.ring[(tm.head + tm.count) % PENDING] =
            (struct pending){t->start, end, ctx, t->key, t->units, t->charged_ns, t->dev, t->guessed, t->graph};
        tm.count++;
    } else {
        give_event(t->start, ctx);
        give_event(end, ctx);
    }
    pthread_mutex_unlock(&tm.mu);
}

/* The parent's events belong to its contexts: a fork child starts with nothing in flight. */
static void forget_all_after_fork(void)
{
    pthread_mutex_init(&tm.mu, NULL);
    tm.head = tm.count = tm.npool = 0;
}

__attribute__((constructor)) static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, forget_all_after_fork);
}

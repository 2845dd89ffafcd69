#include "sm.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../common/log.h"
#include "../process/state.h"
#include "sm_contention.h"
#include "sm_math.h"

#define CTL_PERIOD_NS 100000000ULL   /* NVML polls for burst-share; diagnostics */
/* Launches may run this far ahead of the budget: a launching thread that wakes up to this late loses
 * none of its share (the GPU queue absorbs it); a neighbour may see this much extra delay. */
#define BURST_NS 20000000ULL
#define HOLD_NS 2000000000ULL        /* burst-share stays capped this long after a neighbour was seen */
#define LOG_PERIOD_NS 1000000000ULL

/* Per CUDA device ordinal; card maps it to the container's card (cards.h). */
struct sm_card {
    int card;                        /* the container's card: index into the limits and the region */
    int limited;
    unsigned limit;                  /* percent */
    unsigned sms;
    nvmlDevice_t nvml;
    uint64_t log_charged, log_at;    /* diagnostics: charged GPU time at the last log line */
};

static struct {
    pthread_mutex_t mu;
    atomic_int ready;
    int ncards;
    int thread_running;
    struct sm_card c[TESSERA_MAX_CARDS];
} sm = {.mu = PTHREAD_MUTEX_INITIALIZER};

static uint64_t mono_ns(void)
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

static void format_uuid(const CUuuid *u, char *out, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static struct region_card *region_of(int dev)
{
    return &tessera.region->cards[sm.c[dev].card];
}

/* burst-share: caps the card while a neighbour was seen within the hold time. */
static void steer_burst(int i, uint64_t now)
{
    struct region_card *rc = region_of(i);
    bool was = atomic_load(&rc->capped);
    if (sm.c[i].nvml && sm_contention_poll(sm.c[i].card, sm.c[i].nvml, now, was)) {
        uint64_t until = now + HOLD_NS, cur = atomic_load(&rc->contended_until_ns);
        while (cur < until && !atomic_compare_exchange_weak(&rc->contended_until_ns, &cur, until))
            ;
    }
    uint32_t capped = now < atomic_load(&rc->contended_until_ns);
    if (atomic_exchange(&rc->capped, capped) != capped)
        TLOG(TLOG_INFO, "card %d: burst-share %s", i, capped ? "capped: another container uses the card"
                                                             : "uncapped: the card is ours alone");
}

/* One process per card and second logs the share the container was charged. */
static void log_share(int i, uint64_t now)
{
    struct region_card *rc = region_of(i);
    uint64_t last = atomic_load(&rc->ctl_last_ns);
    if (now - last < LOG_PERIOD_NS || !atomic_compare_exchange_strong(&rc->ctl_last_ns, &last, now))
        return;
    struct sm_card *c = &sm.c[i];
    uint64_t charged = atomic_load(&rc->charged_ns);
    if (c->log_at && now > c->log_at) {
        unsigned pct = (unsigned)((charged - c->log_charged) * 100 / (now - c->log_at));
        atomic_store(&rc->util_pct, pct);
        if (tessera.cfg.qos == QOS_BURST_SHARE && c->nvml) {
            char seen[256];
            sm_contention_describe(c->card, seen, sizeof seen);
            TLOG(TLOG_DEBUG, "card %d: burst-share saw %s", i, seen);
        }
        TLOG(TLOG_DEBUG, "card %d: charged %u%% of the card (limit %u%%, %s), %llu launches waited", i, pct,
             c->limit, atomic_load(&rc->capped) ? "capped" : "uncapped",
             (unsigned long long)atomic_exchange(&rc->waits, 0));
    }
    c->log_charged = charged, c->log_at = now;
}

static void *controller(void *arg)
{
    (void)arg;
    for (;;) {
        sleep_ns(CTL_PERIOD_NS);
        uint64_t now = mono_ns();
        for (int i = 0; i < sm.ncards; i++) {
            if (!sm.c[i].limited)
                continue;
            if (tessera.cfg.qos == QOS_BURST_SHARE)
                steer_burst(i, now);
            log_share(i, now);
        }
    }
    return NULL;
}

static void setup_card(int i, int have_nvml)
{
    struct sm_card *c = &sm.c[i];
    c->card = tessera_card_of_device(i); /* by UUID: limits, region and NVML follow the card, not the ordinal */
    c->limit = c->card >= 0 ? tessera_config_sm_limit(&tessera.cfg, c->card) : 100;
    c->limited = c->limit < 100;
    int sms = 0;
    if (!tessera_cuda.cuDeviceGetAttribute ||
        tessera_cuda.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, i) != CUDA_SUCCESS || sms <= 0)
        sms = 1;
    c->sms = (unsigned)sms;
    if (!c->limited)
        return;
    char uuid[TESSERA_UUID_LEN];
    const char *cfg_uuid = tessera_config_uuid(&tessera.cfg, c->card);
    CUuuid raw;
    if (cfg_uuid)
        snprintf(uuid, sizeof uuid, "%s", cfg_uuid);
    else if (tessera_cuda.cuDeviceGetUuid && tessera_cuda.cuDeviceGetUuid(&raw, i) == CUDA_SUCCESS)
        format_uuid(&raw, uuid, sizeof uuid);
    else
        uuid[0] = '\0';
    c->nvml = NULL;
    if (have_nvml && tessera_nvml.nvmlDeviceGetHandleByUUID &&
        tessera_nvml.nvmlDeviceGetHandleByUUID(uuid, &c->nvml) != NVML_SUCCESS)
        c->nvml = NULL;
    if (!c->nvml && tessera.cfg.qos == QOS_BURST_SHARE)
        TLOG(TLOG_ERROR, "card %d (%s): no NVML handle; burst-share cannot see neighbours and stays uncapped", i,
             uuid);
    if (tessera.cfg.qos == QOS_FIXED_SHARE)
        atomic_store(&region_of(i)->capped, 1);
    TLOG(TLOG_INFO, "card %d: %u SMs, SM limit %u%% (%s)", i, c->sms, c->limit,
         tessera.cfg.qos == QOS_FIXED_SHARE ? "fixed-share" : "burst-share");
}

void tessera_sm_setup(void)
{
    tessera_ensure_init();
    if (!tessera.any_sm_limit || atomic_load(&sm.ready))
        return;
    pthread_mutex_lock(&sm.mu);
    int n = 0;
    if (atomic_load(&sm.ready) || !tessera_cuda.cuDeviceGetCount || tessera_cuda.cuDeviceGetCount(&n) != CUDA_SUCCESS)
        goto out;
    sm.ncards = n < TESSERA_MAX_CARDS ? n : TESSERA_MAX_CARDS;
    int have_nvml = tessera.cfg.qos == QOS_BURST_SHARE && tessera_nvml_load(), any = 0;
    for (int i = 0; i < sm.ncards; i++) {
        setup_card(i, have_nvml);
        any |= sm.c[i].limited;
    }
    if (any && !sm.thread_running) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        sm.thread_running = pthread_create(&t, &a, controller, NULL) == 0;
        pthread_attr_destroy(&a);
    }
    if (!any)
        atomic_store(&tessera_launch_gate, 0); /* every card uncapped: launches take the fast path */
    atomic_store(&sm.ready, 1);
out:
    pthread_mutex_unlock(&sm.mu);
}

/* Moves the budget by the difference between a guessed charge and the launch's measured time. */
static void settle(int dev, int64_t delta_ns)
{
    struct region_card *rc = region_of(dev);
    uint64_t cost = sm_cost((uint64_t)(delta_ns < 0 ? -delta_ns : delta_ns), sm.c[dev].limit);
    if (delta_ns < 0) {
        atomic_fetch_sub(&rc->tat_ns, cost);
        atomic_fetch_sub(&rc->charged_ns, (uint64_t)-delta_ns);
    } else {
        atomic_fetch_add(&rc->tat_ns, cost);
        atomic_fetch_add(&rc->charged_ns, (uint64_t)delta_ns);
    }
}

/* Launches into a capturing stream only record a graph node: the replay is what gets charged. */
static int capturing(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!tessera_cuda.cuStreamIsCapturing)
        return 0;
    return tessera_cuda.cuStreamIsCapturing(s, &st) != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Takes budget for cost, sleeping while the container is more than BURST_NS ahead of its share. */
static void admit(struct region_card *rc, uint64_t now, uint64_t cost)
{
    uint64_t tat = atomic_load(&rc->tat_ns), next, wait;
    do
        next = sm_gcra(tat, now, cost, BURST_NS, &wait);
    while (!atomic_compare_exchange_weak(&rc->tat_ns, &tat, next));
    if (wait) {
        atomic_fetch_add(&rc->waits, 1);
        sleep_ns(wait);
    }
}

int tessera_sm_begin(struct sm_ticket *t, const void *key, uint64_t blocks, int graph, CUstream s)
{
    tessera_ensure_init();
    if (!tessera.any_sm_limit)
        return 0;
    if (__builtin_expect(!atomic_load_explicit(&sm.ready, memory_order_acquire), 0)) {
        tessera_sm_setup();
        if (!atomic_load(&sm.ready))
            return 0;
    }
    int dev = sm.ncards == 1 ? 0 : tessera_current_device();
    if (dev < 0 || dev >= sm.ncards || !sm.c[dev].limited)
        return 0;
    struct sm_card *c = &sm.c[dev];
    struct region_card *rc = region_of(dev);
    int slot = tessera_slot();
    uint64_t now = mono_ns();
    if (slot >= 0)
        atomic_store_explicit(&tessera.region->sm_active_ns[slot][c->card], now, memory_order_relaxed);
    if (!atomic_load_explicit(&rc->capped, memory_order_relaxed) || capturing(s))
        return 0;
    sm_timing_harvest(now, settle);
    *t = (struct sm_ticket){.dev = dev, .key = key, .graph = graph};
    t->units = graph ? 1 : (blocks + c->sms - 1) / c->sms;
    t->units = t->units ? t->units : 1;
    t->charged_ns = sm_timing_estimate(t, now);
    t->cost_ns = sm_cost(t->charged_ns, c->limit);
    atomic_fetch_add(&rc->charged_ns, t->charged_ns);
    admit(rc, now, t->cost_ns);
    sm_timing_start(t, s);
    return 1;
}

void tessera_sm_end(struct sm_ticket *t, CUstream s, CUresult rc)
{
    if (rc != CUDA_SUCCESS) {
        /* Nothing ran: give the budget back. */
        struct region_card *rc = region_of(t->dev);
        atomic_fetch_sub(&rc->tat_ns, t->cost_ns);
        atomic_fetch_sub(&rc->charged_ns, t->charged_ns);
    }
    sm_timing_finish(t, s, rc);
}

/* A fork child has no controller thread: it sets the limiter up again on its first capped launch. */
static void reset_after_fork(void)
{
    pthread_mutex_init(&sm.mu, NULL);
    sm.thread_running = 0;
    atomic_store(&sm.ready, 0);
}

__attribute__((constructor)) static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, reset_after_fork);
}

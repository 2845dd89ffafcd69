#include "sm.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../common/log.h"
#include "../common/state.h"

#define CTL_PERIOD_NS 100000000ULL   /* NVML refreshes utilisation at roughly this rate */
#define BURST_NS 4000000ULL          /* launches may run this far ahead of the budget */
#define NSPW_MIN 10ULL
#define NSPW_MAX 1000000000ULL
#define DEFAULT_WAVE_NS 100000ULL    /* first guess of one wave's duration; the controller corrects it */
#define GAIN 0.6
#define MAX_PIDS 256

struct sm_card {
    int limited;
    int card;                        /* the container's card (cards.h): limits and region slot */
    unsigned limit;                  /* percent */
    unsigned sms;
    nvmlDevice_t nvml;
    int pids_matched;                /* NVML process samples ever matched our pids (same pid namespace) */
    unsigned long long last_seen_us;
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

/* Sets *ours to the container's utilisation of the card and *contended when someone else uses it. */
static int measure(struct sm_card *c, unsigned *ours, int *contended)
{
    nvmlUtilization_t u;
    if (!tessera_nvml.nvmlDeviceGetUtilizationRates ||
        tessera_nvml.nvmlDeviceGetUtilizationRates(c->nvml, &u) != NVML_SUCCESS)
        return 0;
    int32_t pids[MAX_PIDS];
    int np = region_live_procs(tessera.region, pids, MAX_PIDS);
    if (np > MAX_PIDS)
        np = MAX_PIDS;
    nvmlProcessUtilizationSample_t s[128];
    unsigned cnt = 128, sum = 0;
    int matched = 0;
    nvmlReturn_t rc = NVML_ERROR_NOT_SUPPORTED;
    if (tessera_nvml.nvmlDeviceGetProcessUtilization)
        rc = tessera_nvml.nvmlDeviceGetProcessUtilization(c->nvml, s, &cnt, c->last_seen_us);
    if (rc == NVML_SUCCESS) {
        unsigned long long newest = c->last_seen_us;
        for (int p = 0; p < np; p++) {
            int best = -1;
            for (unsigned k = 0; k < cnt; k++)
                if ((int32_t)s[k].pid == pids[p] && (best < 0 || s[k].timeStamp > s[best].timeStamp))
                    best = (int)k;
            if (best >= 0) {
                sum += s[best].smUtil;
                matched = 1;
            }
        }
        for (unsigned k = 0; k < cnt; k++)
            if (s[k].timeStamp > newest)
                newest = s[k].timeStamp;
        c->last_seen_us = newest;
        c->pids_matched |= matched;
    }
    /* Trust per-process samples once they have shown our pids; otherwise (another pid namespace,
     * no samples yet) the card's utilisation is the best available upper bound of ours. */
    if (c->pids_matched && (rc == NVML_SUCCESS || rc == NVML_ERROR_NOT_FOUND))
        *ours = sum > 100 ? 100 : sum;
    else
        *ours = u.gpu;
    nvmlProcessInfo_t infos[64];
    unsigned n = 64;
    unsigned running = 0;
    if (tessera_nvml.nvmlDeviceGetComputeRunningProcesses_v3) {
        nvmlReturn_t prc = tessera_nvml.nvmlDeviceGetComputeRunningProcesses_v3(c->nvml, &n, infos);
        if (prc == NVML_SUCCESS || prc == NVML_ERROR_INSUFFICIENT_SIZE)
            running = n;
    }
    *contended = (int)running > np || u.gpu > *ours + 10;
    return 1;
}

static void control_card(int i)
{
    struct sm_card *c = &sm.c[i];
    struct region_card *rc = &tessera.region->cards[c->card];
    unsigned ours;
    int contended;
    if (!c->nvml || !measure(c, &ours, &contended))
        return;
    int capped = tessera.cfg.qos == QOS_FIXED_SHARE || (tessera.cfg.qos == QOS_BURST_SHARE && contended);
    atomic_store(&rc->capped, (uint32_t)capped);
    atomic_store(&rc->util_pct, ours);
    uint64_t waits = atomic_exchange(&rc->waits, 0);
    if (!capped)
        return;
    double m = ours / 100.0, l = c->limit / 100.0, f = 1.0;
    if (m > l + 0.005)
        f = m / l;
    else if (m < l - 0.005 && waits > 0) /* speed up only when launches actually waited: no wind-up */
        f = (m > l * 0.25 ? m : l * 0.25) / l;
    f = 1.0 + GAIN * (f - 1.0);
    f = f < 0.5 ? 0.5 : f > 2.0 ? 2.0 : f;
    double nspw = (double)atomic_load(&rc->ns_per_wave) * f;
    nspw = nspw < NSPW_MIN ? NSPW_MIN : nspw > NSPW_MAX ? NSPW_MAX : nspw;
    atomic_store(&rc->ns_per_wave, (uint64_t)nspw);
    TLOG(TLOG_DEBUG, "card %d: util %u%% target %u%% waits %llu -> %.0f ns/wave", i, ours, c->limit,
         (unsigned long long)waits, nspw);
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
            struct region_card *rc = &tessera.region->cards[sm.c[i].card];
            uint64_t last = atomic_load(&rc->ctl_last_ns);
            /* One process of the container steers each card per period. */
            if (now - last < CTL_PERIOD_NS * 9 / 10 || !atomic_compare_exchange_strong(&rc->ctl_last_ns, &last, now))
                continue;
            control_card(i);
        }
    }
    return NULL;
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
    int have_nvml = tessera_nvml_load(), any = 0;
    for (int i = 0; i < sm.ncards; i++) {
        struct sm_card *c = &sm.c[i];
        c->card = tessera_card_of_device(i);
        c->limit = c->card >= 0 ? tessera_config_sm_limit(&tessera.cfg, c->card) : 100;
        c->limited = c->limit < 100;
        int sms = 0;
        if (!tessera_cuda.cuDeviceGetAttribute ||
            tessera_cuda.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, i) != CUDA_SUCCESS ||
            sms <= 0)
            sms = 1;
        c->sms = (unsigned)sms;
        if (!c->limited)
            continue;
        any = 1;
        char uuid[TESSERA_UUID_LEN];
        const char *cfg_uuid = tessera_config_uuid(&tessera.cfg, c->card);
        CUuuid raw;
        if (cfg_uuid)
            snprintf(uuid, sizeof uuid, "%s", cfg_uuid);
        else if (tessera_cuda.cuDeviceGetUuid && tessera_cuda.cuDeviceGetUuid(&raw, i) == CUDA_SUCCESS)
            format_uuid(&raw, uuid, sizeof uuid);
        else
            uuid[0] = '\0';
        if (!have_nvml || !tessera_nvml.nvmlDeviceGetHandleByUUID ||
            tessera_nvml.nvmlDeviceGetHandleByUUID(uuid, &c->nvml) != NVML_SUCCESS) {
            c->nvml = NULL;
            TLOG(TLOG_ERROR, "card %d (%s): no NVML handle; SM limit runs open-loop", i, uuid);
        }
        struct region_card *rc = &tessera.region->cards[c->card];
        uint64_t zero = 0;
        atomic_compare_exchange_strong(&rc->ns_per_wave, &zero, DEFAULT_WAVE_NS * 100 / c->limit);
        if (tessera.cfg.qos == QOS_FIXED_SHARE)
            atomic_store(&rc->capped, 1);
        TLOG(TLOG_INFO, "card %d: %u SMs, SM limit %u%%", i, c->sms, c->limit);
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

void tessera_sm_admit(uint64_t blocks)
{
    tessera_ensure_init();
    if (!tessera.any_sm_limit)
        return;
    if (__builtin_expect(!atomic_load_explicit(&sm.ready, memory_order_acquire), 0)) {
        tessera_sm_setup();
        if (!atomic_load(&sm.ready))
            return;
    }
    int card = sm.ncards == 1 ? 0 : tessera_current_device();
    if (card < 0 || card >= sm.ncards || !sm.c[card].limited)
        return;
    struct region_card *rc = &tessera.region->cards[sm.c[card].card];
    if (!atomic_load_explicit(&rc->capped, memory_order_relaxed))
        return;
    uint64_t waves = (blocks + sm.c[card].sms - 1) / sm.c[card].sms;
    uint64_t cost, nspw = atomic_load_explicit(&rc->ns_per_wave, memory_order_relaxed);
    if (__builtin_mul_overflow(waves ? waves : 1, nspw, &cost))
        cost = NSPW_MAX;
    uint64_t now = mono_ns(), tat = atomic_load(&rc->tat_ns), next, wait;
    do {
        uint64_t base = tat > now ? tat : now;
        next = base + cost;
        wait = next > now + BURST_NS ? next - now - BURST_NS : 0;
    } while (!atomic_compare_exchange_weak(&rc->tat_ns, &tat, next));
    if (wait) {
        atomic_fetch_add(&rc->waits, 1);
        sleep_ns(wait);
    }
}

void tessera_sm_after_fork(void)
{
    pthread_mutex_init(&sm.mu, NULL);
    sm.thread_running = 0;
    atomic_store(&sm.ready, 0);
}

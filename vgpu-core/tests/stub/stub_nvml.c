/*
 * A fake libnvidia-ml.so.1 reporting the stub driver's simulated cards: memory, utilisation over a
 * sliding window, per-process utilisation for this process, and simulated foreign processes.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stub.h"
#include "stub_internal.h"
#include "stub_card.h"
#include "tessera/nvml_abi.h"

#define API __attribute__((visibility("default")))
#define MAX_DEV 16

struct nvml_dev {
    int index;
};

static struct nvml_dev handles[MAX_DEV];
static int inited;

static int index_of(nvmlDevice_t d)
{
    struct nvml_dev *h = (struct nvml_dev *)d;
    if (!inited || h < handles || h >= handles + tessera_stub_device_count())
        return -1;
    return h->index;
}

/* The simulated other containers on card i: (processes, utilisation%). */
static void foreign(int i, unsigned *procs, unsigned *util)
{
    *procs = *util = 0;
    const char *path = getenv("TESSERA_STUB_FOREIGN");
    FILE *f = path ? fopen(path, "re") : NULL;
    if (!f)
        return;
    char line[128];
    for (int k = 0; fgets(line, sizeof line, f); k++)
        if (k == i && sscanf(line, "%u %u", procs, util) != 2)
            *procs = *util = 0;
        else if (k == i)
            break;
    fclose(f);
}

API nvmlReturn_t nvmlInit_v2(void)
{
    for (int i = 0; i < MAX_DEV; i++)
        handles[i].index = i;
    inited = 1;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return nvmlInit_v2();
}

API nvmlReturn_t nvmlShutdown(void)
{
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
    if (!inited)
        return NVML_ERROR_UNINITIALIZED;
    *n = (unsigned)tessera_stub_device_count();
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
    if (!inited)
        return NVML_ERROR_UNINITIALIZED;
    if (i >= (unsigned)tessera_stub_device_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = (nvmlDevice_t)&handles[i];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned int len)
{
    int i = index_of(d);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (len < 41)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    stub_uuid_string(i, buf, len);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d)
{
    if (!inited)
        return NVML_ERROR_UNINITIALIZED;
    for (int i = 0; i < tessera_stub_device_count(); i++) {
        char buf[96];
        nvmlDeviceGetUUID((nvmlDevice_t)&handles[i], buf, sizeof buf);
        if (strcmp(buf, uuid) == 0) {
            *d = (nvmlDevice_t)&handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *idx)
{
    int i = index_of(d);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *idx = (unsigned)i;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    int i = index_of(d);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    m->total = tessera_stub_mem_total(i);
    m->used = tessera_stub_mem_used(i);
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    int i = index_of(d);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    m->total = tessera_stub_mem_total(i);
    m->used = tessera_stub_mem_used(i);
    m->reserved = 0;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

/*
 * Utilisation as a real driver reports it (../shared/notes/nvml-on-h100.md): a new per-process
 * sample every period (TESSERA_STUB_NVML_PERIOD_MS, default 200), published 1-100 ms after the
 * period it covers ends; NOT_FOUND between samples; a busy card reads TESSERA_STUB_NVML_SCALE
 * percent (default 90), not 100; the card-wide counter lags a further period. The caller's buffer must
 * hold the driver's whole sample buffer, not just the samples it returns: driver 580.159 on an H200
 * answers INSUFFICIENT_SIZE with count 72 to a 64-entry buffer even with one process on the card
 * (TESSERA_STUB_NVML_BUFFER, default 72).
 */
#define EPOCH_US 1700000000000000ULL
#define HOST_PID_OFFSET 3000000u

static uint64_t period_ns(void)
{
    const char *v = getenv("TESSERA_STUB_NVML_PERIOD_MS");
    unsigned long ms = v ? strtoul(v, NULL, 10) : 200;
    return (ms ? ms : 200) * 1000000ULL;
}

static unsigned scale_pct(void)
{
    const char *v = getenv("TESSERA_STUB_NVML_SCALE");
    return v ? (unsigned)strtoul(v, NULL, 10) : 90;
}

static unsigned sample_buffer(void)
{
    const char *v = getenv("TESSERA_STUB_NVML_BUFFER");
    return v ? (unsigned)strtoul(v, NULL, 10) : 72;
}

static int host_pids(void)
{
    const char *v = getenv("TESSERA_STUB_PID_MODE");
    return v && strcmp(v, "host") == 0;
}

/* Publication delay of sample k: 1-100 ms, scattered. */
static uint64_t lag_ns(uint64_t k)
{
    return (1 + (k * 2654435761ULL >> 7) % 100) * 1000000ULL;
}

/* The newest published sample: its index (the period it covers ends at k * period). */
static uint64_t newest_sample(uint64_t now)
{
    uint64_t p = period_ns(), k = now / p;
    return k * p + lag_ns(k) <= now ? k : k - 1;
}

static unsigned reading(uint64_t busy, uint64_t window)
{
    uint64_t v = (busy * scale_pct() + window / 2) / window;
    return v > 100 ? 100 : (unsigned)v;
}

/* Processes on card i as this caller's driver shows them: pid as reported; 0 = hidden. */
static unsigned shown_pid(const struct sim_use *u)
{
    if (host_pids())
        return (unsigned)u->pid + HOST_PID_OFFSET;
    return u->nsid == sim_self_nsid() ? (unsigned)u->pid : 0;
}

static int usage(int i, uint64_t k, struct sim_use *u, int max)
{
    uint64_t p = period_ns();
    return sim_usage(i, (k - 1) * p, k * p, u, max);
}

API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
    int i = index_of(d);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned fp, fu;
    foreign(i, &fp, &fu);
    struct sim_use use[SIM_PROCS];
    int n = usage(i, newest_sample(sim_now_ns()) - 1, use, SIM_PROCS);
    uint64_t busy = 0;
    for (int k = 0; k < n; k++)
        busy += use[k].busy_ns;
    unsigned own = reading(busy, period_ns());
    u->gpu = own + fu > 100 ? 100 : own + fu;
    u->memory = 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *s,
                                                 unsigned int *count, unsigned long long last_seen)
{
    int i = index_of(d);
    if (i < 0 || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned fp, fu;
    foreign(i, &fp, &fu);
    uint64_t k = newest_sample(sim_now_ns());
    unsigned long long ts = EPOCH_US + k * period_ns() / 1000;
    struct sim_use use[SIM_PROCS];
    int n = usage(i, k, use, SIM_PROCS), shown = 0;
    for (int j = 0; j < n; j++)
        shown += shown_pid(&use[j]) != 0;
    unsigned need = (unsigned)shown + fp, room = sample_buffer() > need ? sample_buffer() : need;
    if (need == 0 || ts <= last_seen)
        return NVML_ERROR_NOT_FOUND; /* no sample since last_seen */
    if (!s || *count < room) {
        *count = room;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned m = 0;
    for (int j = 0; j < n; j++)
        if (shown_pid(&use[j]))
            s[m++] = (nvmlProcessUtilizationSample_t){shown_pid(&use[j]), ts, reading(use[j].busy_ns, period_ns()),
                                                      0, 0, 0};
    for (unsigned k2 = 0; k2 < fp; k2++)
        s[m++] = (nvmlProcessUtilizationSample_t){4000000u + k2, ts, fu / fp, 0, 0, 0};
    *count = m;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                         nvmlProcessInfo_t *infos)
{
    int i = index_of(d);
    if (i < 0 || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned fp, fu;
    foreign(i, &fp, &fu);
    struct sim_use use[SIM_PROCS];
    int n = sim_usage(i, 0, 0, use, SIM_PROCS), shown = 0;
    for (int j = 0; j < n; j++)
        shown += shown_pid(&use[j]) != 0;
    unsigned need = (unsigned)shown + fp;
    if (*count < need || (!infos && need)) {
        *count = need;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned m = 0;
    for (int j = 0; j < n; j++)
        if (shown_pid(&use[j]))
            infos[m++] = (nvmlProcessInfo_t){shown_pid(&use[j]), use[j].pid == getpid() ? tessera_stub_mem_used(i) : 0,
                                             0xffffffffu, 0xffffffffu};
    for (unsigned k = 0; k < fp; k++)
        infos[m++] = (nvmlProcessInfo_t){4000000u + k, 0, 0xffffffffu, 0xffffffffu};
    *count = m;
    return NVML_SUCCESS;
}

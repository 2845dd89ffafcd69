/*
 * A fake libnvidia-ml.so.1 reporting the stub driver's simulated cards: memory, utilisation over a
 * sliding window, per-process utilisation for this process, and simulated foreign processes.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "stub.h"
#include "stub_internal.h"
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

static uint64_t window_ns(void)
{
    const char *v = getenv("TESSERA_STUB_UTIL_MS");
    unsigned long ms = v ? strtoul(v, NULL, 10) : 100;
    return (ms ? ms : 100) * 1000000ULL;
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

API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
    int i = index_of(d);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned fp, fu;
    foreign(i, &fp, &fu);
    unsigned own = tessera_stub_util(i, window_ns());
    u->gpu = own + fu > 100 ? 100 : own + fu;
    u->memory = 0;
    return NVML_SUCCESS;
}

static unsigned long long now_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (unsigned long long)tv.tv_sec * 1000000ULL + (unsigned long long)tv.tv_usec;
}

API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *s,
                                                 unsigned int *count, unsigned long long last_seen)
{
    int i = index_of(d);
    if (i < 0 || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned fp, fu;
    foreign(i, &fp, &fu);
    unsigned need = (tessera_stub_has_ctx(i) ? 1 : 0) + fp;
    if (need == 0)
        return NVML_ERROR_NOT_FOUND;
    if (!s || *count < need) {
        *count = need;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned long long ts = now_us();
    if (ts <= last_seen)
        return NVML_ERROR_NOT_FOUND;
    unsigned n = 0;
    if (tessera_stub_has_ctx(i))
        s[n++] = (nvmlProcessUtilizationSample_t){(unsigned)getpid(), ts, tessera_stub_util(i, window_ns()), 0, 0, 0};
    for (unsigned k = 0; k < fp; k++)
        s[n++] = (nvmlProcessUtilizationSample_t){4000000u + k, ts, fu / fp, 0, 0, 0};
    *count = n;
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
    unsigned need = (tessera_stub_has_ctx(i) ? 1 : 0) + fp;
    if (*count < need || (!infos && need)) {
        *count = need;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned n = 0;
    if (tessera_stub_has_ctx(i))
        infos[n++] = (nvmlProcessInfo_t){(unsigned)getpid(), tessera_stub_mem_used(i), 0xffffffffu, 0xffffffffu};
    for (unsigned k = 0; k < fp; k++)
        infos[n++] = (nvmlProcessInfo_t){4000000u + k, 0, 0xffffffffu, 0xffffffffu};
    *count = n;
    return NVML_SUCCESS;
}

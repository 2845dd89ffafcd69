/* NVML memory queries report the container's view of each of its cards, like cuMemGetInfo. */
#include <string.h>

#include "../common/log.h"
#include "../process/state.h"
#include "../limits/memory.h"

#define NVML_REAL(name)                                                              \
    __typeof__(tessera_nvml.name) real_;                                             \
    tessera_ensure_init();                                                           \
    tessera_nvml_load();                                                             \
    if (!(real_ = tessera_nvml.name))                                                \
        return tessera_nvml_missing(#name)

/* The container's card index of an NVML device: by UUID when the contract lists them, else by index. */
static int card_of(nvmlDevice_t dev)
{
    if (!tessera.any_mem_limit)
        return -1;
    if (tessera.cfg.uuid_count > 0) {
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        if (!tessera_nvml.nvmlDeviceGetUUID || tessera_nvml.nvmlDeviceGetUUID(dev, uuid, sizeof uuid) != NVML_SUCCESS)
            return -1;
        for (int i = 0; i < tessera.cfg.uuid_count; i++)
            if (strcmp(uuid, tessera.cfg.uuids[i]) == 0)
                return tessera_mem_limited(i) ? i : -1;
        return -1;
    }
    unsigned idx;
    if (!tessera_nvml.nvmlDeviceGetIndex || tessera_nvml.nvmlDeviceGetIndex(dev, &idx) != NVML_SUCCESS)
        return -1;
    return tessera_mem_limited((int)idx) ? (int)idx : -1;
}

static void container_view(int card, unsigned long long *total, unsigned long long *free_b,
                           unsigned long long *used)
{
    uint64_t limit = tessera_mem_limit(card), u = tessera_mem_used(card);
    *total = limit;
    *used = u < limit ? u : limit;
    *free_b = limit - *used;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem)
{
    NVML_REAL(nvmlDeviceGetMemoryInfo);
    nvmlReturn_t rc = real_(dev, mem);
    int card;
    if (rc == NVML_SUCCESS && mem && (card = card_of(dev)) >= 0)
        container_view(card, &mem->total, &mem->free, &mem->used);
    return rc;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *mem)
{
    NVML_REAL(nvmlDeviceGetMemoryInfo_v2);
    nvmlReturn_t rc = real_(dev, mem);
    int card;
    if (rc == NVML_SUCCESS && mem && (card = card_of(dev)) >= 0) {
        container_view(card, &mem->total, &mem->free, &mem->used);
        mem->reserved = 0;
    }
    return rc;
}

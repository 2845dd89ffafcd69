/* A one-card NVML for the image test: the entry points the node agent's discovery calls,
 * with NVML's ABI (return codes, struct layouts). Built by the test and put where the
 * NVIDIA container toolkit puts the driver's libnvidia-ml.so.1. Not a driver: optional
 * queries answer NVML_ERROR_NOT_SUPPORTED (3), as on cards that lack them. */
#include <string.h>

typedef int nvmlReturn_t;
typedef struct fake_device *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

enum { OK = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3 };
static struct fake_device { int index; } card0 = {0};

nvmlReturn_t nvmlInit_v2(void) { return OK; }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return OK; }
nvmlReturn_t nvmlShutdown(void) { return OK; }
const char *nvmlErrorString(nvmlReturn_t r) { return r == OK ? "Success" : "Not Supported"; }

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n) {
    if (n < 8) return INVALID_ARGUMENT;
    strcpy(v, "999.99");
    return OK;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { *n = 1; return OK; }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    if (i != 0) return INVALID_ARGUMENT;
    *d = &card0;
    return OK;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *s, unsigned int n) {
    (void)d;
    if (n < 41) return INVALID_ARGUMENT;
    strcpy(s, "GPU-00000000-1111-2222-3333-444444444444");
    return OK;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *s, unsigned int n) {
    (void)d;
    if (n < 16) return INVALID_ARGUMENT;
    strcpy(s, "Image Test GPU");
    return OK;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    (void)d;
    m->total = 16ULL << 30;
    m->free = m->total;
    m->used = 0;
    return OK;
}

#define UNSUPPORTED(name, ...) nvmlReturn_t name(__VA_ARGS__) { return NOT_SUPPORTED; }
UNSUPPORTED(nvmlDeviceGetMinorNumber, nvmlDevice_t d, unsigned int *m)
UNSUPPORTED(nvmlDeviceGetPciInfo_v3, nvmlDevice_t d, void *p)
UNSUPPORTED(nvmlDeviceGetAttributes_v2, nvmlDevice_t d, void *a)
UNSUPPORTED(nvmlDeviceGetMigMode, nvmlDevice_t d, unsigned int *cur, unsigned int *pend)
UNSUPPORTED(nvmlDeviceGetNumaNodeId, nvmlDevice_t d, unsigned int *n)
UNSUPPORTED(nvmlDeviceGetNvLinkState, nvmlDevice_t d, unsigned int l, int *s)
UNSUPPORTED(nvmlDeviceGetNvLinkRemotePciInfo_v2, nvmlDevice_t d, unsigned int l, void *p)
UNSUPPORTED(nvmlDeviceGetTopologyCommonAncestor, nvmlDevice_t a, nvmlDevice_t b, int *level)

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/log.h"
#include "../shared/owner.h"
#include "cards.h"
#include "state.h"

struct tessera_state tessera;
atomic_int tessera_ready;
atomic_int tessera_launch_gate = 1;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int slot_valid;
static int slot = -1;

/* The real library: the development override when the config has one (never from the agent's file), else dflt. */
static void *open_real(const char *override, const char *dflt)
{
    const char *path = override[0] ? override : dflt;
    /* The loader's own dlopen: ours (intercept/) is a layer above, and adds nothing here. */
    void *h = tessera_real_dlopen ? tessera_real_dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h)
        TLOG(TLOG_ERROR, "cannot load real library %s: %s", path, tessera_real_dlopen ? dlerror() : "no dlopen");
    return h;
}

#define RESOLVE_CUDA(name, type) tessera_cuda.name = (type)tessera_real_dlsym(h, #name);
#define RESOLVE_NVML(name, type) tessera_nvml.name = (type)tessera_real_dlsym(h, #name);

/*
 * The child is a new process: it needs its own slot (and exec marker). What the layers above keep
 * per process (allocation records, pools, the SM limiter) is reset by their own fork handlers.
 */
static void child_after_fork(void)
{
    atomic_store(&slot_valid, 0);
    slot = -1;
    owner_after_fork();
    tessera_cards_after_fork();
}

/*
 * The region is what makes the limits container-wide. Without it, processes would each get the
 * whole limit, so the container fails closed (cuInit refused, see tessera.fail_closed) unless the
 * config allows per-process accounting for debugging: TESSERA_DEBUG_PRIVATE_REGION=1 in the
 * environment outside a Tessera container, only a line of the agent's own file inside one.
 */
static void open_region(const struct tessera_config *c)
{
    int err = 0;
    /*
     * Where the agent's file names the region decides who makes it. At the legacy path (a host file
     * the agent created and mounted alone) it is used as it is, never created or resized. Anywhere
     * else it is in the container's own storage, the pod's memory-backed region volume or its
     * /dev/shm, and the first process creates it (as a developer's region outside a container).
     */
    bool create = !c->from_agent || strcmp(c->region_path, TESSERA_AGENT_REGION) != 0;
    tessera.region = region_open(c->region_path, create, &err);
    if (tessera.region)
        return;
    snprintf(tessera.fail_reason, sizeof tessera.fail_reason, "cannot open shared region %s: %s (errno %d)",
             c->region_path, strerror(err), err);
    if (c->debug_private_region) {
        TLOG(TLOG_WARN, "%s: TESSERA_DEBUG_PRIVATE_REGION=1, so limits apply per process only (debugging only)",
             tessera.fail_reason);
    } else {
        tessera.fail_closed = true;
        TLOG(TLOG_ERROR, "%s: failing closed, CUDA initialisation and every allocation are refused; check that "
             "the region's directory exists, is writable and has room (the pod's tessera-region volume, or "
             "/dev/shm; TESSERA_DEBUG_PRIVATE_REGION=1 runs with per-process limits, for debugging only)", tessera.fail_reason);
    }
    /* Either way a mapped region keeps every other path simple; when failed it only backs refusals. */
    tessera.region = region_private();
    if (!tessera.region) {
        tessera.fail_closed = true;
        TLOG(TLOG_ERROR, "cannot map even a private region: failing closed");
    }
}

static void init_once_body(void)
{
    tessera_resolve_real_dlsym();
    tessera_config_load(&tessera.cfg); /* applies TESSERA_LOG_LEVEL first, from wherever it may come */
    struct tessera_config *c = &tessera.cfg;
    tessera.passthrough = !c->any_setting;
    tessera.any_mem_limit = c->poisoned;
    for (int i = 0; i < c->mem_count; i++)
        tessera.any_mem_limit |= c->mem_limit[i] != 0;
    for (int i = 0; i < c->sm_count; i++)
        tessera.any_sm_limit |= c->sm_limit[i] < 100 && c->qos != QOS_BEST_EFFORT;

    void *h = open_real(c->real_cuda_lib, "libcuda.so.1");
    if (h) {
        tessera.cuda_loaded = true;
        TESSERA_CUDA_HOOKS(RESOLVE_CUDA)
        TESSERA_CUDA_CALLS(RESOLVE_CUDA)
    }
    if (c->from_agent && c->poisoned) {
        /* Inside a Tessera container nothing else may stand in for the agent's file. */
        snprintf(tessera.fail_reason, sizeof tessera.fail_reason, "the node agent's limits file %s is unreadable "
                 "or malformed (logged above)", TESSERA_AGENT_LIMITS_FILE);
        tessera.fail_closed = true;
        tessera.region = region_private(); /* backs the refusals and the memory queries, as below */
    } else if (tessera.any_mem_limit || tessera.any_sm_limit) {
        open_region(c);
    }
    pthread_atfork(NULL, NULL, child_after_fork);
    TLOG(TLOG_INFO, "initialised: %s, memory limits %s, SM limits %s",
         tessera.passthrough ? "pass-through" : "limits configured", tessera.any_mem_limit ? "on" : "off",
         tessera.any_sm_limit ? "on" : "off");
    if (!tessera.any_sm_limit)
        atomic_store(&tessera_launch_gate, 0);
    atomic_store_explicit(&tessera_ready, 1, memory_order_release);
}

void tessera_init(void)
{
    pthread_once(&init_once, init_once_body);
}

int tessera_slot(void)
{
    if (__builtin_expect(atomic_load_explicit(&slot_valid, memory_order_acquire), 1))
        return slot;
    pthread_mutex_lock(&slot_mu);
    if (!atomic_load(&slot_valid) && tessera.region) {
        slot = region_register(tessera.region);
        atomic_store_explicit(&slot_valid, 1, memory_order_release);
    }
    pthread_mutex_unlock(&slot_mu);
    return slot;
}

static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;
static bool nvml_ok;

static void nvml_load_body(void)
{
    void *h = open_real(tessera.cfg.real_nvml_lib, "libnvidia-ml.so.1");
    if (!h)
        return;
    TESSERA_NVML_HOOKS(RESOLVE_NVML)
    TESSERA_NVML_CALLS(RESOLVE_NVML)
    nvml_ok = tessera_nvml.nvmlInit_v2 && tessera_nvml.nvmlInit_v2() == NVML_SUCCESS;
    if (!nvml_ok)
        TLOG(TLOG_ERROR, "real NVML unusable: compute limits cannot measure utilisation");
}

bool tessera_nvml_load(void)
{
    pthread_once(&nvml_once, nvml_load_body);
    return nvml_ok;
}

/* Remembers which names were already reported so a missing symbol logs once, not per call. */
static void log_missing_once(const char *name)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static const char *seen[64];
    static int nseen;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nseen; i++)
        if (seen[i] == name) {
            pthread_mutex_unlock(&mu);
            return;
        }
    if (nseen < 64)
        seen[nseen++] = name;
    pthread_mutex_unlock(&mu);
    TLOG(TLOG_ERROR, "real driver has no %s: returning an error instead of calling it", name);
}

CUresult tessera_cuda_missing(const char *name)
{
    log_missing_once(name);
    return tessera.cuda_loaded ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_NOT_INITIALIZED;
}

nvmlReturn_t tessera_nvml_missing(const char *name)
{
    log_missing_once(name);
    return NVML_ERROR_FUNCTION_NOT_FOUND;
}

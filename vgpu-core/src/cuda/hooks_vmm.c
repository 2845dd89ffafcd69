/*
 * VMM and graph memory that outlives the call that looks like its free:
 *   - cuMemRelease of a mapped handle frees nothing until the last mapping is unmapped, so the
 *     charge moves to a "released, still mapped" list and goes when cuMemUnmap takes the last one;
 *   - a graph memory node is charged when it is added (the graph can allocate it at any launch)
 *     and given back when its graph is destroyed.
 */
#include <pthread.h>

#include "../common/log.h"
#include "../process/state.h"
#include "../limits/memory.h"

#define MAX_MAPS 4096

struct mapping {
    CUdeviceptr va;
    size_t size;
    CUmemGenericAllocationHandle handle;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct mapping maps[MAX_MAPS];
static int nmaps;
static struct mem_record released[MAX_MAPS]; /* released handles that are still mapped */
static int nreleased;

static bool mapped_locked(CUmemGenericAllocationHandle h)
{
    for (int i = 0; i < nmaps; i++)
        if (maps[i].handle == h)
            return true;
    return false;
}

CUresult cuMemMap(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                  unsigned long long flags)
{
    TESSERA_REAL(cuMemMap);
    CUresult rc = real_cuMemMap(va, size, offset, h, flags);
    if (rc != CUDA_SUCCESS || !tessera.any_mem_limit)
        return rc;
    pthread_mutex_lock(&mu);
    if (nmaps < MAX_MAPS)
        maps[nmaps++] = (struct mapping){va, size, h};
    else
        TLOG(TLOG_WARN, "more than %d VMM mappings: a handle released while mapped may be uncounted early",
             MAX_MAPS);
    pthread_mutex_unlock(&mu);
    return rc;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    TESSERA_REAL(cuMemRelease);
    struct mem_record rec;
    if (!tessera.any_mem_limit || !tessera_mem_untrack(MEM_VMM, h, &rec))
        return real_cuMemRelease(h);
    CUresult rc = real_cuMemRelease(h);
    if (rc != CUDA_SUCCESS) {
        tessera_mem_track_full(&rec);
        return rc;
    }
    pthread_mutex_lock(&mu);
    bool keep = mapped_locked(h) && nreleased < MAX_MAPS;
    if (keep)
        released[nreleased++] = rec; /* the memory lives while mapped: so does the charge */
    pthread_mutex_unlock(&mu);
    if (!keep)
        tessera_mem_unreserve(rec.card, rec.bytes);
    return rc;
}

CUresult cuMemUnmap(CUdeviceptr va, size_t size)
{
    TESSERA_REAL(cuMemUnmap);
    CUresult rc = real_cuMemUnmap(va, size);
    if (rc != CUDA_SUCCESS || !tessera.any_mem_limit)
        return rc;
    struct mem_record gone[64];
    int ngone = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nmaps;) {
        if (maps[i].va >= va && maps[i].va < va + size)
            maps[i] = maps[--nmaps];
        else
            i++;
    }
    for (int i = 0; i < nreleased && ngone < 64;) {
        if (!mapped_locked(released[i].key)) {
            gone[ngone++] = released[i];
            released[i] = released[--nreleased];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < ngone; i++)
        tessera_mem_unreserve(gone[i].card, gone[i].bytes);
    return rc;
}

CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                CUDA_MEM_ALLOC_NODE_PARAMS *params)
{
    TESSERA_REAL(cuGraphAddMemAllocNode);
    int card = -1;
    if (params && params->poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        card = tessera_mem_card_of_device(params->poolProps.location.id);
    if (card == -1)
        return real_cuGraphAddMemAllocNode(node, graph, deps, ndeps, params);
    if (tessera_mem_reserve(card, params->bytesize) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real_cuGraphAddMemAllocNode(node, graph, deps, ndeps, params);
    if (rc != CUDA_SUCCESS) {
        tessera_mem_unreserve(card, params->bytesize);
        return rc;
    }
    struct mem_record rec = {.key = params->dptr, .bytes = params->bytesize, .kind = MEM_GRAPH_NODE,
                             .card = card, .aux = (uint64_t)(uintptr_t)graph};
    tessera_mem_track_full(&rec);
    return rc;
}

CUresult cuGraphDestroy(CUgraph graph)
{
    TESSERA_REAL(cuGraphDestroy);
    CUresult rc = real_cuGraphDestroy(graph);
    if (rc == CUDA_SUCCESS && tessera.any_mem_limit)
        tessera_mem_release_aux(MEM_GRAPH_NODE, (uint64_t)(uintptr_t)graph);
    return rc;
}

/* A fork child maps nothing of the parent's: it starts with empty tables. */
static void forget_all_after_fork(void)
{
    pthread_mutex_init(&mu, NULL);
    nmaps = nreleased = 0;
}

__attribute__((constructor)) static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, forget_all_after_fork);
}

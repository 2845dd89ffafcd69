#include "pools.h"

#include <pthread.h>
#include <stdatomic.h>

#include "../common/log.h"
#include "../process/state.h"
#include "memory.h"

#define MAX_POOLS 256

struct pool_acct {
    CUmemoryPool pool;
    int card;
    uint64_t charged;    /* what this process has charged the card for the pool */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct pool_acct pools[MAX_POOLS];
static int npools;
static atomic_int any_charged;

static struct pool_acct *find(CUmemoryPool pool)
{
    for (int i = 0; i < npools; i++)
        if (pools[i].pool == pool)
            return &pools[i];
    return NULL;
}

static struct pool_acct *find_or_add(CUmemoryPool pool, int card)
{
    struct pool_acct *p = find(pool);
    if (p || npools == MAX_POOLS)
        return p;
    pools[npools] = (struct pool_acct){pool, card, 0};
    return &pools[npools++];
}

void tessera_pool_register(CUmemoryPool pool, int card)
{
    pthread_mutex_lock(&mu);
    struct pool_acct *p = find_or_add(pool, card);
    if (p)
        p->card = card;
    pthread_mutex_unlock(&mu);
}

int tessera_pool_card(CUmemoryPool pool)
{
    pthread_mutex_lock(&mu);
    struct pool_acct *p = find(pool);
    int card = p ? p->card : -1;
    pthread_mutex_unlock(&mu);
    return card;
}

static int read_attr(CUmemoryPool pool, CUmemPool_attribute a, uint64_t *out)
{
    cuuint64_t v = 0;
    if (!tessera_cuda.cuMemPoolGetAttribute || tessera_cuda.cuMemPoolGetAttribute(pool, a, &v) != CUDA_SUCCESS)
        return 0;
    *out = v;
    return 1;
}

/* Under mu: moves the pool's charge to what it holds now (a pool that cannot be read is gone). */
static void settle_locked(struct pool_acct *p)
{
    uint64_t held = 0;
    if (!read_attr(p->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &held))
        held = 0;
    if (held > p->charged)
        tessera_mem_force(p->card, held - p->charged); /* it holds this, limit or not */
    else if (held < p->charged)
        tessera_mem_unreserve(p->card, p->charged - held);
    p->charged = held;
    if (held)
        atomic_store(&any_charged, 1);
}

void tessera_pool_settle(CUmemoryPool pool)
{
    pthread_mutex_lock(&mu);
    struct pool_acct *p = find(pool);
    if (p)
        settle_locked(p);
    pthread_mutex_unlock(&mu);
}

void tessera_pools_settle_all(void)
{
    if (!atomic_load_explicit(&any_charged, memory_order_relaxed))
        return;
    pthread_mutex_lock(&mu);
    int charged = 0;
    for (int i = 0; i < npools; i++) {
        settle_locked(&pools[i]);
        charged |= pools[i].charged != 0;
    }
    atomic_store(&any_charged, charged);
    pthread_mutex_unlock(&mu);
}

bool tessera_pools_try_settle(void)
{
    /* Called from inside tessera_mem_reserve, possibly under mu (a pool allocation): never wait. */
    if (!atomic_load_explicit(&any_charged, memory_order_relaxed) || pthread_mutex_trylock(&mu) != 0)
        return false;
    for (int i = 0; i < npools; i++)
        settle_locked(&pools[i]);
    pthread_mutex_unlock(&mu);
    return true;
}

void tessera_pool_forget(CUmemoryPool pool)
{
    pthread_mutex_lock(&mu);
    struct pool_acct *p = find(pool);
    if (p) {
        tessera_mem_unreserve(p->card, p->charged);
        *p = pools[--npools];
    }
    pthread_mutex_unlock(&mu);
}

CUresult tessera_pool_alloc(CUmemoryPool pool, int card, uint64_t n, CUdeviceptr *dptr,
                            CUresult (*call)(void *arg), void *arg)
{
    pthread_mutex_lock(&mu);
    struct pool_acct *p = find_or_add(pool, card);
    if (!p) {
        pthread_mutex_unlock(&mu);
        TLOG(TLOG_ERROR, "more than %d memory pools: refusing a stream-ordered allocation", MAX_POOLS);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    settle_locked(p);
    /* Only what the pool does not already hold free needs new card memory. */
    uint64_t used = 0, need = n;
    if (read_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used))
        need = used + n > p->charged ? used + n - p->charged : 0;
    CUresult rc = need ? tessera_mem_reserve(p->card, need) : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS) {
        p->charged += need;
        rc = call(arg);
        settle_locked(p); /* the pool may have grown by more than n (its step), or not at all */
    }
    pthread_mutex_unlock(&mu);
    if (rc == CUDA_SUCCESS) {
        struct mem_record rec = {.key = *dptr, .kind = MEM_ASYNC, .card = card, .aux = (uint64_t)(uintptr_t)pool};
        tessera_mem_track_full(&rec);
    }
    return rc;
}

/* A fork child owns no pool: it starts with an empty table. */
static void forget_all_after_fork(void)
{
    pthread_mutex_init(&mu, NULL);
    npools = 0;
    atomic_store(&any_charged, 0);
}

__attribute__((constructor)) static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, forget_all_after_fork);
    /* Settling pools may give card memory back: memory.c asks before it refuses a reservation. */
    tessera_mem_set_reclaimer(tessera_pools_try_settle);
}

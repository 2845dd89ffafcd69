#include "memory.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../process/state.h"

/* What may give memory back before a reservation is refused (tessera_mem_set_reclaimer). */
static bool (*_Atomic reclaimer)(void);

/* Open-addressing table keyed by (kind, handle), linear probing with backward-shift deletion. */
static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static struct mem_record *table;
static size_t table_cap, table_len;

static size_t slot_of(uint64_t key, int32_t kind, size_t cap)
{
    uint64_t x = key ^ ((uint64_t)kind << 56);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static bool table_grow(void)
{
    size_t cap = table_cap ? table_cap * 2 : 1024;
    struct mem_record *t = calloc(cap, sizeof *t);
    if (!t)
        return false;
    for (size_t i = 0; i < table_cap; i++) {
        if (!table[i].kind)
            continue;
        size_t j = slot_of(table[i].key, table[i].kind, cap);
        while (t[j].kind)
            j = (j + 1) & (cap - 1);
        t[j] = table[i];
    }
    free(table);
    table = t;
    table_cap = cap;
    return true;
}

static size_t table_find(uint64_t key, int32_t kind)
{
    if (!table_cap)
        return SIZE_MAX;
    for (size_t j = slot_of(key, kind, table_cap);; j = (j + 1) & (table_cap - 1)) {
        if (!table[j].kind)
            return SIZE_MAX;
        if (table[j].kind == kind && table[j].key == key)
            return j;
    }
}

static void table_delete(size_t i)
{
    /* Backward shift keeps probe chains intact without tombstones. */
    size_t mask = table_cap - 1;
    for (size_t j = (i + 1) & mask; table[j].kind; j = (j + 1) & mask) {
        size_t home = slot_of(table[j].key, table[j].kind, table_cap);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            table[i] = table[j];
            i = j;
        }
    }
    memset(&table[i], 0, sizeof table[i]);
    table_len--;
}

bool tessera_mem_limited(int card)
{
    if (card == TESSERA_CARD_UNLISTED)
        return true; /* not the container's card: refused, reported as empty */
    if (card < 0)
        return false;
    if (tessera.cfg.poisoned)
        return true;
    return card < TESSERA_MAX_CARDS && tessera_config_mem_limit(&tessera.cfg, card) != 0;
}

uint64_t tessera_mem_limit(int card)
{
    if (tessera.cfg.poisoned || card < 0)
        return 0;
    return tessera_config_mem_limit(&tessera.cfg, card);
}

int tessera_mem_card(void)
{
    if (!tessera.any_mem_limit)
        return -1;
    return tessera_mem_card_of_device(tessera_current_device());
}

int tessera_mem_card_of_device(CUdevice dev)
{
    if (!tessera.any_mem_limit || dev < 0)
        return -1;
    int card = tessera_card_of_device(dev);
    return tessera_mem_limited(card) ? card : -1;
}

CUresult tessera_mem_reserve(int card, uint64_t bytes)
{
    if (tessera.fail_closed) {
        TLOG(TLOG_ERROR, "refusing %llu bytes on card %d: %s", (unsigned long long)bytes, card, tessera.fail_reason);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (card == TESSERA_CARD_UNLISTED) {
        TLOG(TLOG_ERROR, "refusing %llu bytes: the current device is not one of the container's cards",
             (unsigned long long)bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (tessera.cfg.poisoned || card >= TESSERA_MAX_CARDS) {
        TLOG(TLOG_ERROR, "refusing %llu bytes on card %d: malformed limits", (unsigned long long)bytes, card);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t limit = tessera_config_mem_limit(&tessera.cfg, card);
    if (region_reserve(tessera.region, tessera_slot(), card, bytes, limit))
        return CUDA_SUCCESS;
    /* Before refusing: pools may have given memory back since they were last read. */
    bool (*reclaim)(void) = atomic_load_explicit(&reclaimer, memory_order_acquire);
    if (reclaim && reclaim() && region_reserve(tessera.region, tessera_slot(), card, bytes, limit))
        return CUDA_SUCCESS;
    TLOG(TLOG_INFO, "refusing %llu bytes on card %d: limit %llu reached", (unsigned long long)bytes, card,
         (unsigned long long)limit);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

void tessera_mem_set_reclaimer(bool (*reclaim)(void))
{
    atomic_store_explicit(&reclaimer, reclaim, memory_order_release);
}

void tessera_mem_force(int card, uint64_t bytes)
{
    if (card >= 0 && card < TESSERA_MAX_CARDS)
        region_reserve(tessera.region, tessera_slot(), card, bytes, 0);
}

void tessera_mem_unreserve(int card, uint64_t bytes)
{
    region_release(tessera.region, tessera_slot(), card, bytes);
}

uint64_t tessera_current_ctx(void)
{
    CUcontext c = NULL;
    if (!tessera_cuda.cuCtxGetCurrent || tessera_cuda.cuCtxGetCurrent(&c) != CUDA_SUCCESS)
        return 0;
    return (uint64_t)(uintptr_t)c;
}

void tessera_mem_track(enum mem_kind kind, uint64_t key, int card, uint64_t bytes)
{
    /* Synchronous allocations and arrays die with the context they were made in. */
    bool owned = kind == MEM_PTR || kind == MEM_ARRAY || kind == MEM_MIPMAP;
    struct mem_record rec = {.key = key, .bytes = bytes, .kind = kind, .card = card,
                             .owner = owned ? tessera_current_ctx() : 0};
    tessera_mem_track_full(&rec);
}

void tessera_mem_track_full(const struct mem_record *rec)
{
    pthread_mutex_lock(&table_mu);
    size_t i = table_find(rec->key, rec->kind);
    if (i != SIZE_MAX) {
        /* The driver handed out a handle we still hold: its free escaped us. Keep the newer charge. */
        region_release(tessera.region, tessera_slot(), table[i].card, table[i].bytes);
        table_delete(i);
    }
    if ((table_len + 1) * 2 > table_cap && !table_grow()) {
        pthread_mutex_unlock(&table_mu);
        /* Without a record we could never release it: give the charge back now instead of leaking. */
        TLOG(TLOG_ERROR, "out of host memory for the allocation table; allocation left uncounted");
        region_release(tessera.region, tessera_slot(), rec->card, rec->bytes);
        return;
    }
    size_t j = slot_of(rec->key, rec->kind, table_cap);
    while (table[j].kind)
        j = (j + 1) & (table_cap - 1);
    table[j] = *rec;
    table_len++;
    pthread_mutex_unlock(&table_mu);
}

/* Releases every record for which match() holds. */
static void release_matching(bool (*match)(const struct mem_record *, uint64_t, int), uint64_t v, int kind)
{
    uint64_t freed = 0;
    pthread_mutex_lock(&table_mu);
    for (size_t i = 0; i < table_cap;) {
        if (table[i].kind && match(&table[i], v, kind)) {
            region_release(tessera.region, tessera_slot(), table[i].card, table[i].bytes);
            freed += table[i].bytes;
            table_delete(i); /* backward shift may move another record into i: look at i again */
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&table_mu);
    if (freed)
        TLOG(TLOG_DEBUG, "gave back %llu bytes of a destroyed context or graph", (unsigned long long)freed);
}

static bool owned_by(const struct mem_record *r, uint64_t ctx, int kind)
{
    (void)kind;
    return r->owner == ctx;
}

static bool aux_is(const struct mem_record *r, uint64_t aux, int kind)
{
    return r->kind == kind && r->aux == aux;
}

void tessera_mem_release_owner(uint64_t ctx)
{
    if (ctx)
        release_matching(owned_by, ctx, 0);
}

void tessera_mem_release_aux(enum mem_kind kind, uint64_t aux)
{
    release_matching(aux_is, aux, kind);
}

bool tessera_mem_untrack(enum mem_kind kind, uint64_t key, struct mem_record *out)
{
    pthread_mutex_lock(&table_mu);
    size_t i = table_find(key, kind);
    bool found = i != SIZE_MAX;
    if (found) {
        *out = table[i];
        table_delete(i);
    }
    pthread_mutex_unlock(&table_mu);
    return found;
}

uint64_t tessera_mem_used(int card)
{
    return tessera.region ? region_used(tessera.region, card) : 0;
}

/* A fork child owns none of the parent's allocations: it drops every record, leaving the region alone. */
static void forget_all_after_fork(void)
{
    free(table);
    table = NULL;
    table_cap = table_len = 0;
    pthread_mutex_init(&table_mu, NULL);
}

__attribute__((constructor)) static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, forget_all_after_fork);
}

static uint64_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 16; /* newer/block-compressed formats: over-charge rather than under-charge */
    }
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t tessera_array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    uint64_t h = d->Height ? d->Height : 1, depth = d->Depth ? d->Depth : 1;
    return mul_sat(mul_sat(mul_sat(d->Width, h), depth), format_bytes(d->Format) * d->NumChannels);
}

uint64_t tessera_mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    CUDA_ARRAY3D_DESCRIPTOR l = *d;
    uint64_t total = 0;
    for (unsigned i = 0; i < levels && i < 64; i++) {
        uint64_t b = tessera_array_bytes(&l);
        total = total + b < total ? UINT64_MAX : total + b;
        l.Width = l.Width > 1 ? l.Width / 2 : 1;
        l.Height = l.Height > 1 ? l.Height / 2 : l.Height;
        l.Depth = l.Depth > 1 ? l.Depth / 2 : l.Depth;
    }
    return total;
}

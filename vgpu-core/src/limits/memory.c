#include "memory.h"

#include <stdatomic.h>

#include "../common/log.h"
#include "../process/state.h"
#include "mem_table.h"

/* What may give memory back before a reservation is refused (tessera_mem_set_reclaimer). */
static bool (*_Atomic reclaimer)(void);

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

/* Gives back the charge of a record leaving the table. */
static void uncharge(const struct mem_record *r)
{
    region_release(tessera.region, tessera_slot(), r->card, r->bytes);
}

void tessera_mem_track_full(const struct mem_record *rec)
{
    /* A record of the same handle is one whose free escaped us: put uncharges it and keeps the newer charge. */
    if (!tessera_mem_table_put(rec, uncharge)) {
        /* Without a record we could never release it: give the charge back now instead of leaking. */
        TLOG(TLOG_ERROR, "out of host memory for the allocation table; allocation left uncounted");
        uncharge(rec);
    }
}

/* Releases every record for which match() holds. */
static void release_matching(bool (*match)(const struct mem_record *, uint64_t, int), uint64_t v, int kind)
{
    uint64_t freed = tessera_mem_table_take_matching(match, v, kind, uncharge);
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
    return tessera_mem_table_take(kind, key, out);
}

uint64_t tessera_mem_used(int card)
{
    return tessera.region ? region_used(tessera.region, card) : 0;
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

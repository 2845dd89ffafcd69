/*
 * CUDA ordinals are not card indices: CUDA_VISIBLE_DEVICES reorders and subsets them, the driver
 * orders cards fastest-first by default, and a container sees only some cards. Every device is
 * therefore mapped to the container's card (its place in TESSERA_VISIBLE_UUIDS) by its UUID, once
 * per ordinal; limits and the shared region are indexed by that card, so processes that see the
 * cards in different orders still share one account per physical card.
 */
#include "cards.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../common/log.h"
#include "state.h"

#define CACHED_ORDINALS 64
#define UNKNOWN (-3) /* resolve(): the driver could not tell */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int cache[CACHED_ORDINALS];

/* Parses "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (or MIG-) into 16 bytes; false when malformed. */
bool tessera_uuid_parse(const char *s, unsigned char out[16])
{
    if (strncmp(s, "GPU-", 4) != 0 && strncmp(s, "MIG-", 4) != 0)
        return false;
    int n = 0;
    for (s += 4; *s && n < 32; s++) {
        if (*s == '-')
            continue;
        if (!isxdigit((unsigned char)*s))
            return false;
        int v = isdigit((unsigned char)*s) ? *s - '0' : (tolower((unsigned char)*s) - 'a' + 10);
        if (n % 2 == 0)
            out[n / 2] = (unsigned char)(v << 4);
        else
            out[n / 2] |= (unsigned char)v;
        n++;
    }
    return n == 32 && *s == '\0';
}

void tessera_uuid_format(const char *prefix, const unsigned char b[16], char *out, size_t len)
{
    snprintf(out, len, "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", prefix, b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* The listed card whose UUID equals u, or -1. */
static int listed_card(const CUuuid *u)
{
    for (int i = 0; i < tessera.cfg.uuid_count; i++) {
        unsigned char want[16];
        if (tessera_uuid_parse(tessera.cfg.uuids[i], want) && memcmp(want, u->bytes, 16) == 0)
            return i;
    }
    return -1;
}

/* Looks the ordinal's UUID up in the contract: _v2 first (a MIG instance's own UUID), then v1. */
static int resolve(CUdevice dev)
{
    if (tessera.cfg.uuid_count == 0)
        return dev < TESSERA_MAX_CARDS ? dev : TESSERA_CARD_UNLISTED;
    CUuuid u, v1;
    int card = -1;
    bool got = false, got2 = false;
    if (tessera_cuda.cuDeviceGetUuid_v2 && tessera_cuda.cuDeviceGetUuid_v2(&u, dev) == CUDA_SUCCESS) {
        got = got2 = true;
        card = listed_card(&u);
    }
    if (card < 0 && tessera_cuda.cuDeviceGetUuid && tessera_cuda.cuDeviceGetUuid(&v1, dev) == CUDA_SUCCESS) {
        /* A MIG device: _v2 gives the instance's own UUID, v1 its parent card's. */
        bool mig = got2 && memcmp(u.bytes, v1.bytes, sizeof u.bytes) != 0;
        card = listed_card(&v1);
        if (card < 0 && mig) {
            char s[64];
            tessera_uuid_format("MIG", (const unsigned char *)u.bytes, s, sizeof s);
            TLOG(TLOG_ERROR, "CUDA device %d is MIG device %s, which is not in TESSERA_VISIBLE_UUIDS: allocations on "
                 "it are refused (the container was not assigned this MIG device; check NVIDIA_VISIBLE_DEVICES)", dev, s);
            return TESSERA_CARD_UNLISTED;
        }
        got = true;
        u = v1;
    }
    if (!got)
        return UNKNOWN;
    if (card < 0) {
        char s[64];
        tessera_uuid_format("GPU", (const unsigned char *)u.bytes, s, sizeof s);
        TLOG(TLOG_ERROR, "CUDA device %d is %s, which is not in TESSERA_VISIBLE_UUIDS: allocations on it are "
             "refused (the container was not assigned this card; check NVIDIA_VISIBLE_DEVICES)", dev, s);
        return TESSERA_CARD_UNLISTED;
    }
    TLOG(TLOG_INFO, "CUDA device %d is card %d (%s)", dev, card, tessera.cfg.uuids[card]);
    return card;
}

/* Cache entries hold card + 3 (so "unlisted", -2, is 1); 0 means not resolved yet. */
int tessera_card_of_device(CUdevice dev)
{
    if (dev < 0)
        return -1;
    if (dev >= CACHED_ORDINALS) {
        int c = resolve(dev);
        return c == UNKNOWN ? TESSERA_CARD_UNLISTED : c;
    }
    int e = __atomic_load_n(&cache[dev], __ATOMIC_ACQUIRE);
    if (__builtin_expect(e != 0, 1))
        return e - 3;
    pthread_mutex_lock(&mu);
    int c = cache[dev] ? cache[dev] - 3 : resolve(dev);
    if (c == UNKNOWN) /* the driver cannot say yet (not initialised): ask again next time */
        c = TESSERA_CARD_UNLISTED;
    else
        __atomic_store_n(&cache[dev], c + 3, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mu);
    return c;
}

int tessera_current_device(void)
{
    CUdevice d;
    if (!tessera_cuda.cuCtxGetDevice || tessera_cuda.cuCtxGetDevice(&d) != CUDA_SUCCESS)
        return -1;
    return d;
}

int tessera_current_card(void)
{
    return tessera_card_of_device(tessera_current_device());
}

void tessera_cards_after_fork(void)
{
    pthread_mutex_init(&mu, NULL);
}

/*
 * CUDA_VISIBLE_DEVICES as the real driver reads it: a comma list of card indices or card UUIDs
 * ("GPU-…", any unique prefix) that selects and orders the cards a process sees as ordinals
 * 0..n-1. Like the driver, the list ends at the first entry that names no card (or one already
 * listed); unset means every card in index order, an empty or wholly invalid list means none.
 * NVML does not read it: NVML indices stay the physical cards' (tests/stub/stub_nvml.c).
 *
 * TESSERA_STUB_DEVICE_DIR plays what a container runtime with the NVIDIA toolkit does to the real
 * driver: the driver sees only the cards the container was given. Each card is a file of the
 * directory (mounted per card by the end-to-end harness's toolkit spec) holding its UUID and memory;
 * with it set, the stub's cards are those files and nothing else (none when it holds none).
 * A file may hold a MIG device instead: "MIG-<uuid> MEMORY_MIB SMS GPU-<parent uuid>". Like the
 * real driver in a container given one MIG device, the stub then shows one CUDA device with the
 * instance's memory and SMs; cuDeviceGetUuid_v2 reports the MIG device's own UUID and
 * cuDeviceGetUuid (v1) the parent card's, and CUDA_VISIBLE_DEVICES may name it by its MIG UUID.
 */
#include <ctype.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stub_internal.h"

static pthread_once_t dir_once = PTHREAD_ONCE_INIT;
static int dir_n = -1; /* -1: TESSERA_STUB_DEVICE_DIR unset */
static struct stub_dir_card dir_cards[STUB_MAX_DIR_CARDS];

static int numeric(const struct dirent *e)
{
    if (!e->d_name[0])
        return 0;
    for (const char *c = e->d_name; *c; c++)
        if (!isdigit((unsigned char)*c))
            return 0;
    return 1;
}

static int by_index(const struct dirent **a, const struct dirent **b)
{
    long x = strtol((*a)->d_name, NULL, 10), y = strtol((*b)->d_name, NULL, 10);
    return (x > y) - (x < y);
}

/* prefix ("GPU-" or "MIG-") and 32 hex digits (dashes anywhere) into 16 bytes; 0 on success. */
static int parse_uuid(const char *s, const char *prefix, unsigned char out[16])
{
    if (strncmp(s, prefix, 4) != 0)
        return -1;
    int n = 0;
    for (s += 4; *s && n < 32; s++) {
        if (*s == '-')
            continue;
        if (!isxdigit((unsigned char)*s))
            return -1;
        int v = isdigit((unsigned char)*s) ? *s - '0' : tolower((unsigned char)*s) - 'a' + 10;
        out[n / 2] = (unsigned char)(n % 2 ? out[n / 2] | v : v << 4);
        n++;
    }
    return n == 32 && *s == '\0' ? 0 : -1;
}

/* One file per card, named by the card's index on its machine (the order the cards take here):
 * "GPU-<uuid> MEMORY_MIB [SMS]" or "MIG-<uuid> MEMORY_MIB SMS GPU-<parent>". A file that does not
 * parse is left out, with a message. */
static int parse_card(const char *uuid, const char *parent, int got, struct stub_dir_card *c)
{
    if (parse_uuid(uuid, "GPU-", c->uuid) == 0) {
        c->mig = 0;
        return got <= 3 ? 0 : -1;
    }
    c->mig = 1;
    return got == 4 && parse_uuid(uuid, "MIG-", c->uuid) == 0 && parse_uuid(parent, "GPU-", c->parent) == 0 ? 0 : -1;
}

static void read_dir(void)
{
    const char *dir = getenv("TESSERA_STUB_DEVICE_DIR");
    if (!dir || !*dir)
        return;
    dir_n = 0;
    struct dirent **ents;
    int n = scandir(dir, &ents, numeric, by_index);
    if (n < 0) {
        fprintf(stderr, "stub driver: cannot read TESSERA_STUB_DEVICE_DIR %s: no cards\n", dir);
        return;
    }
    for (int i = 0; i < n; i++) {
        char path[4096], uuid[64], parent[64] = "";
        unsigned long long mib = 0;
        unsigned sms = 0;
        snprintf(path, sizeof path, "%s/%s", dir, ents[i]->d_name);
        FILE *f = fopen(path, "re");
        struct stub_dir_card *c = &dir_cards[dir_n];
        int got = f ? fscanf(f, "%63s %llu %u %63s", uuid, &mib, &sms, parent) : 0;
        if (f)
            fclose(f);
        if (dir_n < STUB_MAX_DIR_CARDS && got >= 2 && mib > 0 && parse_card(uuid, parent, got, c) == 0) {
            c->memory_mib = mib;
            c->sms = sms ? sms : 80;
            dir_n++;
        } else {
            fprintf(stderr, "stub driver: %s: want \"GPU-<uuid> MEMORY_MIB [SMS]\" or \"MIG-<uuid> MEMORY_MIB SMS "
                    "GPU-<parent>\" (at most %d cards); left out\n", path, STUB_MAX_DIR_CARDS);
        }
        free(ents[i]);
    }
    free(ents);
}

int stub_dir_cards(const struct stub_dir_card **cards)
{
    pthread_once(&dir_once, read_dir);
    *cards = dir_cards;
    return dir_n;
}

void stub_uuid_bytes(int phys, unsigned char out[16])
{
    const struct stub_dir_card *cards;
    if (stub_dir_cards(&cards) >= 0) {
        memcpy(out, cards[phys].uuid, 16);
        return;
    }
    static const unsigned char prefix[4] = {0x7e, 0x55, 0xe7, 0xa0};
    memset(out, 0, 16);
    memcpy(out, prefix, 4);
    out[15] = (unsigned char)phys;
}

void stub_uuid_v1_bytes(int phys, unsigned char out[16])
{
    const struct stub_dir_card *cards;
    if (stub_dir_cards(&cards) >= 0 && cards[phys].mig) {
        memcpy(out, cards[phys].parent, 16);
        return;
    }
    stub_uuid_bytes(phys, out);
}

void stub_uuid_string(int phys, char *buf, size_t len)
{
    unsigned char b[16];
    const struct stub_dir_card *cards;
    const char *prefix = stub_dir_cards(&cards) >= 0 && cards[phys].mig ? "MIG" : "GPU";
    stub_uuid_bytes(phys, b);
    snprintf(buf, len, "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", prefix, b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* The physical card an entry names, or -1. */
static int entry_card(const char *e, int ndev)
{
    if (isdigit((unsigned char)e[0])) {
        char *end;
        long v = strtol(e, &end, 10);
        return *end == '\0' && v < ndev ? (int)v : -1;
    }
    if ((strncmp(e, "GPU-", 4) != 0 && strncmp(e, "MIG-", 4) != 0) || strlen(e) < 5)
        return -1;
    int found = -1;
    for (int i = 0; i < ndev; i++) {
        char u[64];
        stub_uuid_string(i, u, sizeof u);
        if (strncmp(u, e, strlen(e)) == 0) {
            if (found >= 0)
                return -1; /* ambiguous prefix */
            found = i;
        }
    }
    return found;
}

int stub_visible_cards(int ndev, int vis[])
{
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    if (!env) {
        for (int i = 0; i < ndev; i++)
            vis[i] = i;
        return ndev;
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", env);
    int n = 0;
    for (char *s = buf, *tok; (tok = strsep(&s, ",")) != NULL && n < ndev;) {
        while (isspace((unsigned char)*tok))
            tok++;
        int c = entry_card(tok, ndev);
        for (int k = 0; k < n && c >= 0; k++)
            if (vis[k] == c)
                c = -1;
        if (c < 0)
            break;
        vis[n++] = c;
    }
    return n;
}

/* The name -> hook table and its lookups (see symbol_table.h). */
#include "symbol_table.h"

#include <stddef.h>
#include <string.h>

#define ROW_CUDA(name, type) {#name, (void *)name, (void **)&tessera_cuda.name},
#define ROW_NVML(name, type) {#name, (void *)name, (void **)&tessera_nvml.name},

static const struct tessera_symbol table[] = {
    TESSERA_CUDA_HOOKS(ROW_CUDA)
    TESSERA_NVML_HOOKS(ROW_NVML)
};
#define NSYMS (sizeof table / sizeof table[0])

TESSERA_EARLY static int same(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

TESSERA_EARLY const struct tessera_symbol *tessera_symbol_find(const char *name)
{
    for (size_t i = 0; i < NSYMS; i++)
        if (same(table[i].name, name))
            return &table[i];
    return NULL;
}

void *tessera_symbol_hook_for_real(void *real_fn)
{
    if (!real_fn)
        return NULL;
    for (size_t i = 0; i < NSYMS; i++)
        if (*table[i].real == real_fn)
            return table[i].hook;
    return NULL;
}

/* The cudaVersion from which a suffixed variant is what the driver hands out for a base name. */
static int variant_version(const char *name, size_t base_len)
{
    const char *suffix = name + base_len;
    if (strcmp(name, "cuGetProcAddress_v2") == 0)
        return 12000;
    if (strcmp(suffix, "_v2") == 0)
        return 3020;
    if (strcmp(suffix, "") == 0)
        return 0;
    return -1; /* _ptsz and unknown suffixes are chosen by flags, not version */
}

void *tessera_symbol_hook_for_request(const char *base, int cuda_version, cuuint64_t flags)
{
    size_t len = strlen(base);
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
        char ptsz[128];
        if (len + 6 < sizeof ptsz) {
            memcpy(ptsz, base, len);
            memcpy(ptsz + len, "_ptsz", 6);
            const struct tessera_symbol *s = tessera_symbol_find(ptsz);
            if (s)
                return s->hook;
        }
    }
    void *best = NULL;
    int best_ver = -1;
    for (size_t i = 0; i < NSYMS; i++) {
        if (strncmp(table[i].name, base, len) != 0)
            continue;
        int v = variant_version(table[i].name, len);
        if (v >= 0 && v <= cuda_version && v > best_ver) {
            best = table[i].hook;
            best_ver = v;
        }
    }
    return best;
}

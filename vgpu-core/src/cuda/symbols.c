/*
 * The symbol table behind every interception path: dlsym(handle, "cu...") and cuGetProcAddress
 * return our hooks, so a CUDA 12 runtime (which resolves the driver through cuGetProcAddress) and
 * frameworks that dlopen libcuda themselves cannot step around the limits.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include "../common/log.h"
#include "../common/state.h"

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

/*
 * Called by the dlsym entry point: returns our hook for a hooked name, else NULL (the caller then
 * continues into the real dlsym with the original return address, keeping RTLD_NEXT exact).
 */
TESSERA_EARLY __attribute__((visibility("hidden"))) void *tessera_dlsym_hook(const char *name)
{
    tessera_resolve_real_dlsym();
    if (!name || !((name[0] == 'c' && name[1] == 'u') ||
                   (name[0] == 'n' && name[1] == 'v' && name[2] == 'm' && name[3] == 'l')))
        return NULL;
    const struct tessera_symbol *s = tessera_symbol_find(name);
    return s ? s->hook : NULL;
}

#if defined(__x86_64__)
/*
 * dlsym in assembly so that the real dlsym is entered by a jump from our caller's frame: glibc
 * resolves RTLD_NEXT relative to the return address, which a C wrapper would change to ours.
 */
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "  endbr64\n"
        "  pushq %rdi\n"
        "  pushq %rsi\n"
        "  subq $8, %rsp\n"
        "  movq %rsi, %rdi\n"
        "  call tessera_dlsym_hook\n"
        "  addq $8, %rsp\n"
        "  popq %rsi\n"
        "  popq %rdi\n"
        "  testq %rax, %rax\n"
        "  jne 1f\n"
        "  movq tessera_real_dlsym(%rip), %rax\n"
        "  testq %rax, %rax\n"
        "  je 1f\n"
        "  jmp *%rax\n"
        "1:\n"
        "  ret\n"
        ".size dlsym, .-dlsym\n");
#else
/* Portable fallback: correct for every handle except RTLD_NEXT, which resolves relative to us. */
TESSERA_EXPORT void *dlsym(void *handle, const char *name)
{
    void *hook = tessera_dlsym_hook(name);
    if (hook)
        return hook;
    return tessera_real_dlsym ? tessera_real_dlsym(handle, name) : NULL;
}
#endif

/* Maps what the real cuGetProcAddress returned onto our hook, if the symbol is one we hook. */
static void rewrite_proc(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    void *hook = tessera_symbol_hook_for_real(*pfn);
    if (!hook) {
        /* Not an exported address we know: ask the dynamic linker which symbol it is. */
        Dl_info info;
        if (dladdr(*pfn, &info) && info.dli_saddr == *pfn && info.dli_sname) {
            const struct tessera_symbol *s = tessera_symbol_find(info.dli_sname);
            hook = s ? s->hook : NULL;
        } else {
            hook = tessera_symbol_hook_for_request(symbol, version, flags);
        }
    }
    if (hook) {
        TLOG(TLOG_DEBUG, "cuGetProcAddress(%s, %d, %llu) -> hook", symbol, version, (unsigned long long)flags);
        *pfn = hook;
    }
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    TESSERA_REAL(cuGetProcAddress);
    CUresult rc = real_cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS && pfn && *pfn && symbol)
        rewrite_proc(symbol, pfn, cudaVersion, flags);
    return rc;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    TESSERA_REAL(cuGetProcAddress_v2);
    CUresult rc = real_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, status);
    if (rc == CUDA_SUCCESS && pfn && *pfn && symbol)
        rewrite_proc(symbol, pfn, cudaVersion, flags);
    return rc;
}

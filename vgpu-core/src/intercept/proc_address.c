/*
 * cuGetProcAddress(_v2): CUDA 12 runtimes resolve the whole driver through it, so what the real
 * lookup returns is replaced by our hook whenever the symbol is one we hook.
 */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "../common/log.h"
#include "../process/state.h"
#include "symbol_table.h"

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

/*
 * Where the real functions are: the tables start-up fills from the real driver and NVML, and the
 * real dlsym that fills them (ours is interposed).
 */
#define _GNU_SOURCE
#include "symbols.h"

#include <dlfcn.h>
#include <stddef.h>

struct tessera_real_cuda tessera_cuda;
struct tessera_real_nvml tessera_nvml;
void *(*tessera_real_dlsym)(void *, const char *);

TESSERA_EARLY void tessera_resolve_real_dlsym(void)
{
    if (__atomic_load_n(&tessera_real_dlsym, __ATOMIC_ACQUIRE))
        return;
    /* dlvsym is not interposed, so it reaches libc's dlsym whatever the symbol version. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        void *f = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        if (f) {
            __atomic_store_n(&tessera_real_dlsym, (void *(*)(void *, const char *))f, __ATOMIC_RELEASE);
            return;
        }
    }
}

/*
 * Where the real functions are: the tables start-up fills from the real driver and NVML, and the
 * loader's own functions that this library interposes (dlsym, dlvsym, dlopen, dlmopen).
 */
#define _GNU_SOURCE
#include "symbols.h"

#include <dlfcn.h>
#include <stddef.h>

#include "elf_next.h"

struct tessera_real_cuda tessera_cuda;
struct tessera_real_nvml tessera_nvml;
void *(*tessera_real_dlsym)(void *, const char *);
void *(*tessera_real_dlvsym)(void *, const char *, const char *);
void *(*tessera_real_dlopen)(const char *, int);
void *(*tessera_real_dlmopen)(long, const char *, int);

typedef void *(*dlvsym_fn)(void *, const char *, const char *);
typedef void *(*dlsym_fn)(void *, const char *);

TESSERA_EARLY void tessera_resolve_real_dlsym(void)
{
    if (__atomic_load_n(&tessera_real_dlsym, __ATOMIC_ACQUIRE))
        return;
    /*
     * Every public lookup function is ours, so the first real one (dlvsym) is read from the symbol
     * tables of the objects after this library; called from here, its RTLD_NEXT is relative to us.
     */
    dlvsym_fn vsym = (dlvsym_fn)tessera_elf_next((const void *)tessera_resolve_real_dlsym, "dlvsym");
    if (!vsym)
        return;
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    dlsym_fn sym = NULL;
    for (size_t i = 0; i < sizeof versions / sizeof versions[0] && !sym; i++)
        sym = (dlsym_fn)vsym(RTLD_NEXT, "dlsym", versions[i]);
    if (!sym)
        return;
    __atomic_store_n(&tessera_real_dlopen, (void *(*)(const char *, int))sym(RTLD_NEXT, "dlopen"), __ATOMIC_RELAXED);
    __atomic_store_n(&tessera_real_dlmopen, (void *(*)(long, const char *, int))sym(RTLD_NEXT, "dlmopen"),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&tessera_real_dlvsym, vsym, __ATOMIC_RELAXED);
    /* Last, with release: a non-NULL real dlsym says the others are set too. */
    __atomic_store_n(&tessera_real_dlsym, sym, __ATOMIC_RELEASE);
}

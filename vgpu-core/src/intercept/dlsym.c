/*
 * Our dlsym and dlvsym: a hooked name ("cu...", "nvml...") returns our hook whatever the handle and
 * the version asked for, so frameworks that dlopen libcuda or NVML themselves cannot step around
 * the limits. The loader's own lookup and open functions fetched from a library's handle
 * (dlsym(dlopen("libc.so.6"), "dlsym")) are ours too, or the real ones would be one call away.
 * Every other name goes to the real function, entered from the caller's frame (trampoline.h).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

#include "../common/symbols.h"
#include "symbol_table.h"
#include "trampoline.h"

TESSERA_EARLY static int same(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

/* The loader functions this library exports (dlopen.c has the open ones); NULL for other names. */
TESSERA_EARLY static void *own_loader_function(const char *name)
{
    if (same(name, "dlsym"))
        return (void *)dlsym;
    if (same(name, "dlvsym"))
        return (void *)dlvsym;
    if (same(name, "dlopen"))
        return (void *)dlopen;
    if (same(name, "dlmopen"))
        return (void *)dlmopen;
    return NULL;
}

/*
 * The hook for `name` looked up in `handle`, or NULL to let the real lookup answer. For the loader's
 * functions, RTLD_DEFAULT and RTLD_NEXT are left to the real lookup: it finds ours for a caller
 * loaded before this library, and keeps the chain of interposers loaded after it intact (one that
 * asks RTLD_NEXT for the real dlopen must not get ours back, or its calls would loop).
 */
TESSERA_EARLY static void *hook_for(void *handle, const char *name, int *loader)
{
    *loader = 0;
    if (!name)
        return NULL;
    if ((name[0] == 'c' && name[1] == 'u') ||
        (name[0] == 'n' && name[1] == 'v' && name[2] == 'm' && name[3] == 'l')) {
        const struct tessera_symbol *s = tessera_symbol_find(name);
        return s ? s->hook : NULL;
    }
    if (name[0] != 'd' || name[1] != 'l')
        return NULL;
    void *own = own_loader_function(name);
    *loader = own != NULL;
    return own && handle != RTLD_DEFAULT && handle != RTLD_NEXT ? own : NULL;
}

TESSERA_EARLY __attribute__((visibility("hidden"))) struct tessera_dl_route
tessera_dlsym_route(void *handle, const char *name)
{
    tessera_resolve_real_dlsym();
    int loader;
    void *hook = hook_for(handle, name, &loader);
    if (hook)
        return (struct tessera_dl_route){(uintptr_t)hook, NULL};
    return (struct tessera_dl_route){0, (void *)tessera_real_dlsym};
}

/*
 * A version never turns a hook into the real function: the driver's symbols carry none, and
 * dlvsym(h, "cuMemAlloc_v2", v) must not be a way around the hook. A loader function asked for by
 * version through RTLD_DEFAULT or RTLD_NEXT is looked up without it: ours is unversioned, so the
 * versioned lookup would skip it and hand out libc's (dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5")).
 */
TESSERA_EARLY __attribute__((visibility("hidden"))) struct tessera_dl_route
tessera_dlvsym_route(void *handle, const char *name, const char *version)
{
    (void)version;
    tessera_resolve_real_dlsym();
    int loader;
    void *hook = hook_for(handle, name, &loader);
    if (hook)
        return (struct tessera_dl_route){(uintptr_t)hook, NULL};
    return (struct tessera_dl_route){0, loader ? (void *)tessera_real_dlsym : (void *)tessera_real_dlvsym};
}

#if defined(__x86_64__) || defined(__aarch64__)
TESSERA_TRAMPOLINE(dlsym, tessera_dlsym_route, TESSERA_ARG_NONE);
TESSERA_TRAMPOLINE(dlvsym, tessera_dlvsym_route, TESSERA_ARG_NONE);
#else
/* Portable fallback: correct for every handle except RTLD_NEXT, which resolves relative to us. */
TESSERA_EXPORT void *dlsym(void *handle, const char *name)
{
    struct tessera_dl_route r = tessera_dlsym_route(handle, name);
    return r.jump ? ((void *(*)(void *, const char *))r.jump)(handle, name) : (void *)r.value;
}

TESSERA_EXPORT void *dlvsym(void *handle, const char *name, const char *version)
{
    struct tessera_dl_route r = tessera_dlvsym_route(handle, name, version);
    if (!r.jump)
        return (void *)r.value;
    if (r.jump == (void *)tessera_real_dlsym)
        return tessera_real_dlsym(handle, name);
    return ((void *(*)(void *, const char *, const char *))r.jump)(handle, name, version);
}
#endif

/*
 * Our dlopen and dlmopen: two ways a library could be bound to the real driver instead of the hooks.
 *
 * RTLD_DEEPBIND makes glibc resolve the new library's symbols in its own dependencies first and in
 * the global scope (where this preloaded library sits) only after them: a library that links
 * libcuda would call the real cuMemAlloc_v2. Which libraries need libcuda is only known once their
 * dependencies are loaded and bound, too late, so the flag is dropped for every dlopen (logged once).
 * The library then binds like any other: to the first definition in the global scope. Sanitizer
 * runtimes refuse RTLD_DEEPBIND outright for the same reason (it defeats interposition).
 *
 * dlmopen into any namespace but the base one loads a fresh copy of the library and of everything
 * it links, libcuda included, where nothing is preloaded: no hook can follow it there. It is refused
 * (NULL, with the reason in dlerror()) whenever limits apply; LM_ID_BASE is plain dlopen.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>

#include "../common/log.h"
#include "../process/state.h"
#include "trampoline.h"

/*
 * dlerror() is the loader's, per thread, with no way to set it: a failed no-load open of a path that
 * cannot exist (procfs refuses new files) leaves our reason, as the path, in it.
 */
#define REFUSAL "/proc/tessera: dlmopen into a new link-map namespace refused: CUDA there would bypass the limits"

static int drop_deepbind(const char *file, int flags)
{
    static atomic_int logged;
    if (!(flags & RTLD_DEEPBIND))
        return flags;
    if (!atomic_exchange(&logged, 1))
        TLOG(TLOG_WARN, "dlopen(\"%s\", RTLD_DEEPBIND): flag dropped so the library binds to the hooked CUDA "
             "driver, not a copy of its own (logged once)", file ? file : "NULL");
    return flags & ~RTLD_DEEPBIND;
}

__attribute__((visibility("hidden"))) struct tessera_dl_route tessera_dlopen_route(const char *file, int flags)
{
    tessera_resolve_real_dlsym();
    if (!tessera_real_dlopen)
        return (struct tessera_dl_route){0, NULL};
    return (struct tessera_dl_route){(unsigned)drop_deepbind(file, flags), (void *)tessera_real_dlopen};
}

__attribute__((visibility("hidden"))) struct tessera_dl_route tessera_dlmopen_route(Lmid_t lmid, const char *file,
                                                                                   int flags)
{
    tessera_resolve_real_dlsym();
    if (lmid != LM_ID_BASE) {
        /* Start-up never calls dlmopen, so reading the limits from here cannot recurse. */
        tessera_ensure_init();
        if (!tessera.passthrough) {
            TLOG(TLOG_WARN, "dlmopen(%ld, \"%s\") refused: a new link-map namespace would get its own CUDA "
                 "driver, without the hooks", (long)lmid, file ? file : "NULL");
            if (tessera_real_dlopen)
                tessera_real_dlopen(REFUSAL, RTLD_LAZY | RTLD_NOLOAD);
            return (struct tessera_dl_route){0, NULL};
        }
    }
    if (!tessera_real_dlmopen)
        return (struct tessera_dl_route){0, NULL};
    return (struct tessera_dl_route){(unsigned)drop_deepbind(file, flags), (void *)tessera_real_dlmopen};
}

#if defined(__x86_64__) || defined(__aarch64__)
TESSERA_TRAMPOLINE(dlopen, tessera_dlopen_route, TESSERA_ARG_2);
TESSERA_TRAMPOLINE(dlmopen, tessera_dlmopen_route, TESSERA_ARG_3);
#else
/* Portable fallback: the library is the caller, so the caller's RPATH/RUNPATH are not searched. */
TESSERA_EXPORT void *dlopen(const char *file, int flags)
{
    struct tessera_dl_route r = tessera_dlopen_route(file, flags);
    return r.jump ? ((void *(*)(const char *, int))r.jump)(file, (int)r.value) : NULL;
}

TESSERA_EXPORT void *dlmopen(Lmid_t lmid, const char *file, int flags)
{
    struct tessera_dl_route r = tessera_dlmopen_route(lmid, file, flags);
    return r.jump ? ((void *(*)(Lmid_t, const char *, int))r.jump)(lmid, file, (int)r.value) : NULL;
}
#endif

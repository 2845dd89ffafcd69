/*
 * Interposing the loader's functions must not break their own semantics. Run with
 * LD_PRELOAD="libprobe.so libvgpu.so": RTLD_NEXT from the executable must still find libprobe's
 * symbol (which sits before libvgpu in the search order), and RTLD_DEFAULT / RTLD_NEXT lookups of
 * driver symbols must return the hooks. dlopen from a library must still search that library's
 * RUNPATH (TEST_RUNPATH_LIB), which glibc takes from the caller.
 */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "common.h"

static int in_file(void *fn, const char *part)
{
    Dl_info info;
    return fn && dladdr(fn, &info) && info.dli_fname && strstr(info.dli_fname, part);
}

int main(void)
{
    CASE("RTLD_NEXT resolves relative to the real caller");
    int (*probe)(void) = (int (*)(void))dlsym(RTLD_NEXT, "tessera_probe");
    CHECK(probe && probe() == 42 && in_file((void *)probe, "libprobe"), "tessera_probe not found via RTLD_NEXT");
    CASE("driver symbols fetched through RTLD_NEXT and RTLD_DEFAULT are hooked");
    CHECK(in_file(dlsym(RTLD_NEXT, "cuMemAlloc_v2"), "libvgpu"), "RTLD_NEXT cuMemAlloc_v2");
    CHECK(in_file(dlsym(RTLD_DEFAULT, "cuLaunchKernel"), "libvgpu"), "RTLD_DEFAULT cuLaunchKernel");
    CHECK(dlsym(RTLD_DEFAULT, "no_such_symbol_anywhere") == NULL, "missing symbols stay missing");
    void *pf = dlsym(RTLD_DEFAULT, "printf");
    CHECK(pf && !in_file(pf, "libvgpu"), "ordinary symbols untouched");
    CASE("dlopen from a library searches that library's RUNPATH (the caller stays the caller)");
    const char *lib = getenv("TEST_RUNPATH_LIB"); /* unset: not checked (see tests/run.sh) */
    if (lib) {
        void *h = dlopen(lib, RTLD_NOW);
        void *(*open_leaf)(void) = h ? (void *(*)(void))dlsym(h, "tessera_open_leaf") : NULL;
        CHECK(open_leaf, "TEST_RUNPATH_LIB=%s: %s", lib, dlerror());
        void *leaf = open_leaf ? open_leaf() : NULL;
        CHECK(leaf && dlsym(leaf, "tessera_leaf"), "libleaf.so through the RUNPATH of its caller: %s",
              leaf ? "" : dlerror());
    }
    return tc_summary("t_dlsym_next");
}

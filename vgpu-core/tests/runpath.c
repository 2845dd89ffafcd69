/*
 * For t_dlsym_next: a library whose RUNPATH ($ORIGIN/rp) is the only way to find libleaf.so. glibc
 * searches the RUNPATH of dlopen's caller, so this works only while the interposed dlopen leaves
 * the caller the caller.
 */
#include <dlfcn.h>

void *tessera_open_leaf(void)
{
    void *h = dlopen("libleaf.so", RTLD_NOW);
    __asm__ volatile("" ::: "memory"); /* no tail call: this library must be dlopen's caller */
    return h;
}

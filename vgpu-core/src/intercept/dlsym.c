/*
 * Our dlsym: dlsym(handle, "cu...") and dlsym(handle, "nvml...") return our hooks, so frameworks
 * that dlopen libcuda or NVML themselves cannot step around the limits. Every other name goes to
 * the real dlsym.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

#include "../common/symbols.h"
#include "symbol_table.h"

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

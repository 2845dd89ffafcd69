/*
 * Entry points on the loader's own functions (dlsym, dlvsym, dlopen, dlmopen). glibc makes each of
 * them depend on who called it: RTLD_NEXT is resolved relative to the caller, and dlopen searches
 * the caller's RPATH/RUNPATH and loads into the caller's namespace. A C wrapper would make this
 * library the caller, so on x86-64 and aarch64 each entry point is a few instructions that call a C
 * "route" function with the original arguments, then either return its value or jump to the
 * function it names, from the caller's frame (the return address is still the caller's). When
 * jumping, the route's value may replace one argument (dlopen's and dlmopen's flags).
 */
#ifndef TESSERA_TRAMPOLINE_H
#define TESSERA_TRAMPOLINE_H

#include <stdint.h>

/* What a route decides: jump to `jump` (when non-NULL), else return `value` to the caller. */
struct tessera_dl_route {
    uintptr_t value;
    void *jump;
};

#if defined(__x86_64__)
/* route(rdi, rsi, rdx) returns {value, jump} in rax:rdx; SET_ARG moves eax into an argument register. */
#define TESSERA_TRAMPOLINE(name, route, set_arg)                                                      \
    __asm__(".text\n"                                                                                 \
            ".globl " #name "\n"                                                                      \
            ".type " #name ", @function\n" #name ":\n"                                                \
            "  endbr64\n"                                                                             \
            "  pushq %rdi\n"                                                                          \
            "  pushq %rsi\n"                                                                          \
            "  pushq %rdx\n" /* three pushes after the call's: the stack is 16-byte aligned again */  \
            "  call " #route "\n"                                                                     \
            "  movq %rdx, %r11\n"                                                                     \
            "  popq %rdx\n"                                                                           \
            "  popq %rsi\n"                                                                           \
            "  popq %rdi\n"                                                                           \
            "  testq %r11, %r11\n"                                                                    \
            "  je 1f\n"                                                                               \
            "  " set_arg "\n"                                                                         \
            "  jmp *%r11\n"                                                                           \
            "1:\n"                                                                                    \
            "  ret\n"                                                                                 \
            ".size " #name ", .-" #name "\n")
#define TESSERA_ARG_NONE ""
#define TESSERA_ARG_2 "movl %eax, %esi"
#define TESSERA_ARG_3 "movl %eax, %edx"
#elif defined(__aarch64__)
/* route(x0, x1, x2) returns {value, jump} in x0:x1; x16/x17 are the call-clobbered scratch registers. */
#define TESSERA_TRAMPOLINE(name, route, set_arg)                                                      \
    __asm__(".text\n"                                                                                 \
            ".globl " #name "\n"                                                                      \
            ".type " #name ", %function\n" #name ":\n"                                                \
            "  hint #34\n" /* bti c: a landing pad where branch protection is on, a no-op elsewhere */ \
            "  stp x29, x30, [sp, #-48]!\n"                                                           \
            "  mov x29, sp\n"                                                                         \
            "  stp x0, x1, [sp, #16]\n"                                                               \
            "  str x2, [sp, #32]\n"                                                                   \
            "  bl " #route "\n"                                                                       \
            "  mov x16, x1\n"                                                                         \
            "  mov x17, x0\n"                                                                         \
            "  ldp x0, x1, [sp, #16]\n"                                                               \
            "  ldr x2, [sp, #32]\n"                                                                   \
            "  ldp x29, x30, [sp], #48\n"                                                             \
            "  cbz x16, 1f\n"                                                                         \
            "  " set_arg "\n"                                                                         \
            "  br x16\n"                                                                              \
            "1:\n"                                                                                    \
            "  mov x0, x17\n"                                                                         \
            "  ret\n"                                                                                 \
            ".size " #name ", .-" #name "\n")
#define TESSERA_ARG_NONE ""
#define TESSERA_ARG_2 "mov w1, w17"
#define TESSERA_ARG_3 "mov w2, w17"
#endif

#endif

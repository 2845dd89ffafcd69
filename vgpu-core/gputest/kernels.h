/*
 * The kit's only kernel, as PTX text for cuModuleLoadData: no nvcc needed. The driver compiles it for
 * whatever card it runs on (PTX ISA 6.0, sm_50 and newer).
 *
 *   tessera_spin(u64 ns): every block spins on %globaltimer until ns nanoseconds have passed, then exits.
 *
 * The stub driver of `make test` reads the same contract: each block runs for its first parameter
 * (tests/stub/stub_module.c).
 */
#ifndef GPUTEST_KERNELS_H
#define GPUTEST_KERNELS_H

#define GPUTEST_KERNEL "tessera_spin"

static const char gputest_ptx[] =
    "//\n"
    "// Tessera GPU test kit: a kernel whose blocks each run for a given time.\n"
    "//\n"
    ".version 6.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry tessera_spin(\n"
    "    .param .u64 tessera_spin_ns\n"
    ")\n"
    "{\n"
    "    .reg .pred %p<2>;\n"
    "    .reg .b64 %rd<5>;\n"
    "\n"
    "    ld.param.u64 %rd1, [tessera_spin_ns];\n"
    "    mov.u64 %rd2, %globaltimer;\n"
    "SPIN:\n"
    "    mov.u64 %rd3, %globaltimer;\n"
    "    sub.s64 %rd4, %rd3, %rd2;\n"
    "    setp.lt.u64 %p1, %rd4, %rd1;\n"
    "    @%p1 bra SPIN;\n"
    "    ret;\n"
    "}\n";

#endif

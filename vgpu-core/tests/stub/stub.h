/*
 * Test-only extensions of the stub driver (libcuda.so.1 built from tests/stub/). They let tests
 * and the stub NVML read the simulated cards' state; they are not part of any NVIDIA ABI.
 *
 * Stub configuration (environment, read at first use):
 *   TESSERA_STUB_DEVICES      number of cards (default 1, max 16)
 *   TESSERA_STUB_MEMORY_MIB   comma list or single value, memory per card (default 16384)
 *   TESSERA_STUB_SMS          comma list or single value, SMs per card (default 80)
 *   TESSERA_STUB_DEVICE_DIR   the cards as a container was given them instead of the three above: one
 *                             file per card named by its index, "UUID MEMORY_MIB [SMS]", or a MIG device,
 *                             "MIG-<uuid> MEMORY_MIB SMS GPU-<parent>" (stub_visible.c)
 *   TESSERA_STUB_QUEUE_MS     launches block while more than this much of the process's work is
 *                             queued (default 20)
 *   TESSERA_STUB_CARDS_FILE   file holding the simulated cards: every process mapping it shares them
 *                             (time-sliced, see stub_card.h); unset = each process has its own cards
 *   TESSERA_STUB_TIMESLICE_US time slice between processes sharing a card (default 2000)
 *   TESSERA_STUB_PIDNS        this process's simulated pid namespace (a number, default 0)
 *   TESSERA_STUB_PID_MODE     `ns` (default): NVML shows pids of the caller's namespace and hides
 *                             other namespaces' processes; `host`: NVML shows every process under
 *                             a host pid that differs from the one the process itself sees
 *   TESSERA_STUB_NVML_PERIOD_MS  per-process sample period (default 200; NOT_FOUND in between)
 *   TESSERA_STUB_NVML_SCALE   what NVML reads for a saturated card, percent (default 90)
 *   TESSERA_STUB_JITTER_PCT   each kernel runs its nominal time ± up to this percent (default 4)
 *   CUDA_VISIBLE_DEVICES      read like the real driver (tests/stub/stub_visible.c): indices or UUIDs select
 *                             and order the cards seen as ordinals; NVML keeps physical indices
 *   TESSERA_STUB_FOREIGN      file with one "processes utilisation%" line per card, re-read on every
 *                             NVML query: simulates other containers on the card
 * Kernels: cuModuleGetFunction(&f, mod, "sleep_<N>us") on a cuModuleLoad module makes a kernel whose every
 * block runs N µs on one SM; an `.entry` of PTX text given to cuModuleLoadData runs each block for its first
 * parameter (u64 ns), see stub_module.c; a launch of B blocks on a card of S SMs runs ceil(B/S)*N µs (± the jitter). Kernels run one at a time.
 * Events time a process's own stream (a kernel that waited behind a neighbour looks longer);
 * streams capture launches into graphs that cuGraphLaunch replays (stub_exec.h).
 */
#ifndef TESSERA_STUB_H
#define TESSERA_STUB_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

uint64_t tessera_stub_busy_ns(int dev);              /* this process's kernel time executed up to now */
uint64_t tessera_stub_mem_used(int dev);
uint64_t tessera_stub_mem_total(int dev);
int tessera_stub_device_count(void);
int tessera_stub_has_ctx(int dev);
uint64_t tessera_stub_launches(int dev);

#ifdef __cplusplus
}
#endif
#endif

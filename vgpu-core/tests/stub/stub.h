/*
 * Test-only extensions of the stub driver (libcuda.so.1 built from tests/stub/). They let tests
 * and the stub NVML read the simulated cards' state; they are not part of any NVIDIA ABI.
 *
 * Stub configuration (environment, read at first use):
 *   TESSERA_STUB_DEVICES      number of cards (default 1, max 16)
 *   TESSERA_STUB_MEMORY_MIB   comma list or single value, memory per card (default 16384)
 *   TESSERA_STUB_SMS          comma list or single value, SMs per card (default 80)
 *   TESSERA_STUB_QUEUE_MS     launches block while more than this much work is queued (default 20)
 *   TESSERA_STUB_UTIL_MS      NVML utilisation sample window (default 100)
 *   CUDA_VISIBLE_DEVICES      read like the real driver (tests/stub/stub_visible.c): indices or UUIDs select
 *                             and order the cards seen as ordinals; NVML keeps physical indices
 *   TESSERA_STUB_FOREIGN      file with one "processes utilisation%" line per card, re-read on every
 *                             NVML query: simulates other containers on the card
 * Kernels: cuModuleGetFunction(&f, mod, "sleep_<N>us") makes a kernel whose every block runs N µs on
 * one SM; a launch of B blocks on a card of S SMs runs ceil(B/S)*N µs. Kernels run one at a time.
 */
#ifndef TESSERA_STUB_H
#define TESSERA_STUB_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

uint64_t tessera_stub_busy_ns(int dev);              /* cumulative kernel time executed up to now */
unsigned tessera_stub_util(int dev, uint64_t window_ns); /* percent busy over the last window */
uint64_t tessera_stub_mem_used(int dev);
uint64_t tessera_stub_mem_total(int dev);
int tessera_stub_device_count(void);
int tessera_stub_has_ctx(int dev);
uint64_t tessera_stub_launches(int dev);

#ifdef __cplusplus
}
#endif
#endif

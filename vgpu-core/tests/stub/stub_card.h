/*
 * The stub driver's simulated cards, as the processes of several containers share them. Internal
 * to the stub (libcuda.so.1 from tests/stub/); stub.h has the test-only exports built on it.
 *
 * A card runs one kernel at a time. Every process has its own FIFO of kernels and event markers;
 * when the card falls idle it keeps serving the process whose time slice is running (while it has
 * work and the slice lasts) and otherwise turns to the next process with work, round-robin: the
 * time-slicing of contexts on a real GPU without MPS, at kernel granularity. Events complete when
 * their own process's earlier work has completed, so an event-timed kernel that waited behind a
 * neighbour's time slice looks longer than it ran, as on a real card.
 *
 * The simulation is lazy: every call first advances the card to "now". With
 * TESSERA_STUB_CARDS_FILE set, the cards live in that file and every process mapping it shares
 * them; otherwise each process has cards of its own.
 */
#ifndef TESSERA_STUB_CARD_H
#define TESSERA_STUB_CARD_H

#include <stdint.h>

#define SIM_PROCS 8
#define SIM_EVENTS 4096

/* Joins card dev as this process (idempotent; again after fork). Returns the slot or -1. */
int sim_join(int dev);
/* Queues a kernel of dur_ns; blocks while more than the queue limit of this process's work waits. */
void sim_kernel(int dev, uint64_t dur_ns);
/* Event markers: an index per event of this process, recorded on card dev. */
int sim_event_alloc(void);
void sim_event_free(int ev);
void sim_event_record(int dev, int ev);
/* Completion time of a recorded event, 0 while pending. */
uint64_t sim_event_time(int dev, int ev);
/* Waits until this process's queued work on dev has run. */
void sim_drain(int dev);
/* Busy time of this process on dev completed by now. */
uint64_t sim_busy_self(int dev);
uint64_t sim_launches_self(int dev);

/* Exported (test-only) for the stub NVML. One process's use of a card over a window. */
struct sim_use {
    int32_t pid, nsid;
    uint64_t busy_ns;
};
/* Fills out with every live process on dev and its busy time in [t0, t1]; returns the count. */
__attribute__((visibility("default"))) int sim_usage(int dev, uint64_t t0, uint64_t t1, struct sim_use *out, int max);
__attribute__((visibility("default"))) uint64_t sim_now_ns(void);
__attribute__((visibility("default"))) int32_t sim_self_nsid(void);

#endif

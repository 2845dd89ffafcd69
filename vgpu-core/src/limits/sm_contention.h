/*
 * burst-share: is another container using the card? Read from NVML by every process's controller
 * thread. A poll that finds no new per-process sample (NVML_ERROR_NOT_FOUND) is "no new data" and
 * changes nothing; samples and card utilisation are averaged over the last second, so the ~200 ms
 * sample cadence and its lag do not make the answer flicker.
 */
#ifndef TESSERA_SM_CONTENTION_H
#define TESSERA_SM_CONTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../process/state.h"

/* Polls NVML for card (its handle nvml) at now; returns true when a neighbour uses the card. */
bool sm_contention_poll(int card, nvmlDevice_t nvml, uint64_t now, bool capped);
/* What the last poll of card saw, as one line for the debug log: NVML's last answer, the samples of
 * the last second (pid:average, ours marked *), the card's range and the verdict. */
void sm_contention_describe(int card, char *buf, size_t len);
/* Container processes that launched on card within the last second. */
int sm_active_procs(int card, uint64_t now);

#endif

/* Which of the container's cards a CUDA device is (see cards.c). */
#ifndef TESSERA_CARDS_H
#define TESSERA_CARDS_H

#include <stdbool.h>
#include <stddef.h>

#include "tessera/cuda_abi.h"

/* A device that is not one of the container's cards (its UUID is not in TESSERA_VISIBLE_UUIDS). */
#define TESSERA_CARD_UNLISTED (-2)

/*
 * The container card (index into the contract's lists and the region) of CUDA ordinal dev: by UUID
 * when TESSERA_VISIBLE_UUIDS is set, else the ordinal itself. -1 for dev < 0, TESSERA_CARD_UNLISTED
 * for a device the container was not given.
 */
int tessera_card_of_device(CUdevice dev);
/* The CUDA ordinal of the calling thread's current context, or -1. */
int tessera_current_device(void);
/* tessera_card_of_device(tessera_current_device()). */
int tessera_current_card(void);
void tessera_cards_after_fork(void);

bool tessera_uuid_parse(const char *s, unsigned char out[16]);
void tessera_uuid_format(const char *prefix, const unsigned char b[16], char *out, size_t len);

#endif

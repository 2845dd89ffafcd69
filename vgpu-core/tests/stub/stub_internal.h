/* Shared between the stub driver's source files; not part of any NVIDIA ABI. */
#ifndef TESSERA_STUB_INTERNAL_H
#define TESSERA_STUB_INTERNAL_H

#include <stddef.h>

/* The UUID string of physical card phys ("GPU-7e55e7a0-…-0000000000<phys in hex>"). */
void stub_uuid_string(int phys, char *buf, size_t len);
/* Fills vis[ordinal] = physical card from CUDA_VISIBLE_DEVICES; returns the number of ordinals. */
int stub_visible_cards(int ndev, int vis[]);

#endif

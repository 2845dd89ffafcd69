/*
 * The process's allocation records (memory.c's bookkeeping): an open-addressing table keyed by
 * (kind, key), linear probing with backward-shift deletion, behind one lock that every function
 * takes itself. A fork child starts with an empty table: it owns none of the parent's allocations.
 */
#ifndef TESSERA_MEM_TABLE_H
#define TESSERA_MEM_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "memory.h"

/*
 * Stores rec. A record of the same (kind, key) is removed first and handed to gone (under the
 * table's lock): the driver handed the handle out again, so its free escaped us. False when the
 * table cannot grow (rec is not stored).
 */
bool tessera_mem_table_put(const struct mem_record *rec, void (*gone)(const struct mem_record *));
/* Removes the record of (kind, key) into out; false when unknown. */
bool tessera_mem_table_take(int32_t kind, uint64_t key, struct mem_record *out);
/*
 * Removes every record for which match(rec, v, kind) holds, handing each to gone (under the
 * table's lock); returns the bytes they held.
 */
uint64_t tessera_mem_table_take_matching(bool (*match)(const struct mem_record *, uint64_t, int), uint64_t v, int kind,
                                         void (*gone)(const struct mem_record *));

#endif

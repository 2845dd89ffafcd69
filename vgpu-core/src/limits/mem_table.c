#include "mem_table.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* table_mu guards table, table_cap and table_len. */
static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static struct mem_record *table;
static size_t table_cap, table_len;

static size_t slot_of(uint64_t key, int32_t kind, size_t cap)
{
    uint64_t x = key ^ ((uint64_t)kind << 56);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static bool table_grow(void)
{
    size_t cap = table_cap ? table_cap * 2 : 1024;
    struct mem_record *t = calloc(cap, sizeof *t);
    if (!t)
        return false;
    for (size_t i = 0; i < table_cap; i++) {
        if (!table[i].kind)
            continue;
        size_t j = slot_of(table[i].key, table[i].kind, cap);
        while (t[j].kind)
            j = (j + 1) & (cap - 1);
        t[j] = table[i];
    }
    free(table);
    table = t;
    table_cap = cap;
    return true;
}

static size_t table_find(uint64_t key, int32_t kind)
{
    if (!table_cap)
        return SIZE_MAX;
    for (size_t j = slot_of(key, kind, table_cap);; j = (j + 1) & (table_cap - 1)) {
        if (!table[j].kind)
            return SIZE_MAX;
        if (table[j].kind == kind && table[j].key == key)
            return j;
    }
}

static void table_delete(size_t i)
{
    /* Backward shift keeps probe chains intact without tombstones. */
    size_t mask = table_cap - 1;
    for (size_t j = (i + 1) & mask; table[j].kind; j = (j + 1) & mask) {
        size_t home = slot_of(table[j].key, table[j].kind, table_cap);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            table[i] = table[j];
            i = j;
        }
    }
    memset(&table[i], 0, sizeof table[i]);
    table_len--;
}

bool tessera_mem_table_put(const struct mem_record *rec, void (*gone)(const struct mem_record *))
{
    pthread_mutex_lock(&table_mu);
    size_t i = table_find(rec->key, rec->kind);
    if (i != SIZE_MAX) {
        gone(&table[i]);
        table_delete(i);
    }
    if ((table_len + 1) * 2 > table_cap && !table_grow()) {
        pthread_mutex_unlock(&table_mu);
        return false;
    }
    size_t j = slot_of(rec->key, rec->kind, table_cap);
    while (table[j].kind)
        j = (j + 1) & (table_cap - 1);
    table[j] = *rec;
    table_len++;
    pthread_mutex_unlock(&table_mu);
    return true;
}

bool tessera_mem_table_take(int32_t kind, uint64_t key, struct mem_record *out)
{
    pthread_mutex_lock(&table_mu);
    size_t i = table_find(key, kind);
    bool found = i != SIZE_MAX;
    if (found) {
        *out = table[i];
        table_delete(i);
    }
    pthread_mutex_unlock(&table_mu);
    return found;
}

uint64_t tessera_mem_table_take_matching(bool (*match)(const struct mem_record *, uint64_t, int), uint64_t v, int kind,
                                         void (*gone)(const struct mem_record *))
{
    uint64_t bytes = 0;
    pthread_mutex_lock(&table_mu);
    for (size_t i = 0; i < table_cap;) {
        if (table[i].kind && match(&table[i], v, kind)) {
            gone(&table[i]);
            bytes += table[i].bytes;
            table_delete(i); /* backward shift may move another record into i: look at i again */
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&table_mu);
    return bytes;
}

/* A fork child owns none of the parent's allocations: it drops every record, leaving the region alone. */
static void forget_all_after_fork(void)
{
    free(table);
    table = NULL;
    table_cap = table_len = 0;
    pthread_mutex_init(&table_mu, NULL);
}

__attribute__((constructor)) static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, forget_all_after_fork);
}

/*
 * The container's limits as the device plugin hands them over: environment variables, optionally
 * overridden by a versioned KEY=VALUE limits file. See README.md for the contract table.
 */
#ifndef TESSERA_CONFIG_H
#define TESSERA_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#define TESSERA_MAX_CARDS 16
#define TESSERA_UUID_LEN 96
#define TESSERA_PATH_LEN 512

enum tessera_qos { QOS_BEST_EFFORT = 0, QOS_FIXED_SHARE = 1, QOS_BURST_SHARE = 2 };

struct tessera_config {
    /* Per list, the number of entries given; a single entry applies to every card. */
    int uuid_count, mem_count, sm_count;
    char uuids[TESSERA_MAX_CARDS][TESSERA_UUID_LEN];
    uint64_t mem_limit[TESSERA_MAX_CARDS];   /* bytes; 0 = no limit */
    unsigned sm_limit[TESSERA_MAX_CARDS];    /* percent 1..100; 100 = uncapped */
    enum tessera_qos qos;
    uint64_t context_reserve;                /* bytes counted per CUDA context on a limited card */
    char region_path[TESSERA_PATH_LEN];
    bool any_setting;  /* at least one Tessera variable or a limits file was present */
    bool poisoned;     /* a value was malformed: fail closed (see README "Malformed values") */
};

/* Reads the environment and the limits file. Never fails: problems are logged and poison the config. */
void tessera_config_load(struct tessera_config *cfg);

/* Parses one KEY=VALUE setting; returns false (after logging) when the key or value is malformed. */
bool tessera_config_apply(struct tessera_config *cfg, const char *key, const char *value);

/* Limits for CUDA device ordinal `card` after list broadcasting. */
uint64_t tessera_config_mem_limit(const struct tessera_config *cfg, int card);
unsigned tessera_config_sm_limit(const struct tessera_config *cfg, int card);
const char *tessera_config_uuid(const struct tessera_config *cfg, int card);

#endif

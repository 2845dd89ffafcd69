/*
 * The container's limits. In a Tessera container they come only from the node agent's limits file,
 * mounted read-only at a compiled-in path: everything else in the container (its environment
 * included) belongs to the tenant. Elsewhere (development, the test suite) they come from the
 * environment, optionally overridden by a versioned KEY=VALUE limits file. See README.md for the
 * contract table.
 */
#ifndef TESSERA_CONFIG_H
#define TESSERA_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TESSERA_MAX_CARDS 16
#define TESSERA_UUID_LEN 96
#define TESSERA_PATH_LEN 512

/*
 * Where the node agent bind-mounts the container's files. Fixed at compile time on purpose: a path
 * the environment could move would be the tenant's to choose.
 */
#define TESSERA_AGENT_LIMITS_FILE "/var/run/tessera/limits.env"
#define TESSERA_AGENT_REGION "/var/run/tessera/region"

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
    bool debug_private_region;  /* a failed region may fall back to per-process accounting */
    char real_cuda_lib[TESSERA_PATH_LEN];    /* "" = libcuda.so.1 (development only) */
    char real_nvml_lib[TESSERA_PATH_LEN];    /* "" = libnvidia-ml.so.1 (development only) */
    bool from_agent;   /* read from the agent's file at TESSERA_AGENT_LIMITS_FILE; the environment ignored */
    bool any_setting;  /* at least one Tessera variable or a limits file was present */
    bool poisoned;     /* a value was malformed: fail closed (see README "Malformed values") */
};

/*
 * Reads the limits: the agent's file when it exists (then nothing else; environment variables that
 * would have changed something are named in one warning), else the environment and the file named
 * by TESSERA_LIMITS_FILE. Never fails: problems are logged and poison the config.
 */
void tessera_config_load(struct tessera_config *cfg);

/*
 * The agent's limits file as text (len bytes, need not be NUL-terminated), on top of the defaults:
 * what tessera_config_load does with the file at the fixed path, without the environment. A file
 * that lacks a memory limit, an SM limit or the card list, or says anything twice, is malformed.
 * Returns false when the config is poisoned.
 */
bool tessera_config_from_agent_text(struct tessera_config *cfg, const char *text, size_t len);

/* Parses one KEY=VALUE setting; returns false (after logging) when the key or value is malformed. */
bool tessera_config_apply(struct tessera_config *cfg, const char *key, const char *value);

/* Limits for CUDA device ordinal `card` after list broadcasting. */
uint64_t tessera_config_mem_limit(const struct tessera_config *cfg, int card);
unsigned tessera_config_sm_limit(const struct tessera_config *cfg, int card);
const char *tessera_config_uuid(const struct tessera_config *cfg, int card);

#endif

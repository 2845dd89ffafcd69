/* One setting at a time: the values of the limits contract, and the per-card lookups. */
#include "config.h"
#include "num.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define MAX_MIB (1ULL << 30) /* 1 PiB: anything larger is a typo, not a card */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* Splits a comma list into at most TESSERA_MAX_CARDS trimmed items; returns -1 on overflow/empty item. */
static int split_list(char *buf, char *items[TESSERA_MAX_CARDS])
{
    int n = 0;
    for (char *tok; (tok = strsep(&buf, ",")) != NULL;) {
        if (n == TESSERA_MAX_CARDS)
            return -1;
        items[n] = trim(tok);
        if (items[n][0] == '\0')
            return -1;
        n++;
    }
    return n;
}

static bool parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v;
    const char *end = tessera_parse_u64(s, &v);
    if (!end || *end || v > max)
        return false;
    *out = v;
    return true;
}

static bool apply_list(struct tessera_config *cfg, const char *key, const char *value)
{
    char buf[TESSERA_MAX_CARDS * TESSERA_UUID_LEN];
    char *items[TESSERA_MAX_CARDS];
    if (strlen(value) >= sizeof buf)
        return false;
    strcpy(buf, value);
    int n = split_list(buf, items);
    if (n <= 0)
        return false;
    for (int i = 0; i < n; i++) {
        uint64_t v;
        if (strcmp(key, "TESSERA_VISIBLE_UUIDS") == 0) {
            if (strlen(items[i]) >= TESSERA_UUID_LEN)
                return false;
            strcpy(cfg->uuids[i], items[i]);
        } else if (strcmp(key, "TESSERA_MEMORY_LIMIT_MIB") == 0) {
            if (!parse_u64(items[i], MAX_MIB, &v))
                return false;
            cfg->mem_limit[i] = v << 20;
        } else {
            if (!parse_u64(items[i], 100, &v))
                return false;
            cfg->sm_limit[i] = v == 0 ? 100 : (unsigned)v;
        }
    }
    if (strcmp(key, "TESSERA_VISIBLE_UUIDS") == 0)
        cfg->uuid_count = n;
    else if (strcmp(key, "TESSERA_MEMORY_LIMIT_MIB") == 0)
        cfg->mem_count = n;
    else
        cfg->sm_count = n;
    return true;
}

bool tessera_config_apply(struct tessera_config *cfg, const char *key, const char *value)
{
    bool ok = true;
    if (strcmp(key, "TESSERA_VISIBLE_UUIDS") == 0 || strcmp(key, "TESSERA_MEMORY_LIMIT_MIB") == 0 ||
        strcmp(key, "TESSERA_SM_LIMIT") == 0) {
        ok = apply_list(cfg, key, value);
    } else if (strcmp(key, "TESSERA_QOS") == 0) {
        if (strcmp(value, "best-effort") == 0)
            cfg->qos = QOS_BEST_EFFORT;
        else if (strcmp(value, "fixed-share") == 0)
            cfg->qos = QOS_FIXED_SHARE;
        else if (strcmp(value, "burst-share") == 0)
            cfg->qos = QOS_BURST_SHARE;
        else
            ok = false;
    } else if (strcmp(key, "TESSERA_CONTEXT_RESERVE_MIB") == 0) {
        uint64_t v;
        ok = parse_u64(value, MAX_MIB, &v);
        if (ok)
            cfg->context_reserve = v << 20;
    } else if (strcmp(key, "TESSERA_SHARED_REGION") == 0) {
        ok = value[0] == '/' && strlen(value) < TESSERA_PATH_LEN;
        if (ok)
            strcpy(cfg->region_path, value);
    } else if (strcmp(key, "TESSERA_DEBUG_PRIVATE_REGION") == 0) {
        /* Only the agent's file (or a developer) may say this; see tessera_config_load. */
        ok = strcmp(value, "0") == 0 || strcmp(value, "1") == 0;
        if (ok)
            cfg->debug_private_region = value[0] == '1';
    } else if (strcmp(key, "TESSERA_LOG_LEVEL") == 0) {
        int lvl = tessera_log_parse_level(value);
        ok = lvl >= 0;
        if (ok)
            tessera_log_level = lvl;
    } else {
        TLOG(TLOG_ERROR, "unknown setting %s=%s", key, value);
        cfg->poisoned = true;
        return false;
    }
    if (!ok) {
        TLOG(TLOG_ERROR, "malformed %s=\"%s\": failing closed (allocations refused)", key, value);
        cfg->poisoned = true;
    }
    cfg->any_setting = true;
    return ok;
}

static int pick(int count, int card)
{
    if (count == 1)
        return 0;
    return card < count ? card : -1;
}

uint64_t tessera_config_mem_limit(const struct tessera_config *cfg, int card)
{
    int i = pick(cfg->mem_count, card);
    return i < 0 ? 0 : cfg->mem_limit[i];
}

unsigned tessera_config_sm_limit(const struct tessera_config *cfg, int card)
{
    int i = pick(cfg->sm_count, card);
    return i < 0 ? 100 : cfg->sm_limit[i];
}

const char *tessera_config_uuid(const struct tessera_config *cfg, int card)
{
    return card < cfg->uuid_count ? cfg->uuids[card] : NULL;
}

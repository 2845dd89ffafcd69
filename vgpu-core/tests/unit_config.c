/*
 * Table-driven tests of the limits contract: environment, limits file, broadcasting, malformed
 * values; then the node agent's file as the library reads it at the fixed path (its text, since the
 * fixed path itself is exercised by tests/fixed_ns.sh in run.sh).
 */
#include <unistd.h>

#include "common.h"
#include "common/config.h"

struct config_case {
    const char *name;
    const char *env[6];    /* KEY=VALUE */
    const char *file;      /* limits file contents, or NULL */
    int poisoned;
    uint64_t mem0, mem1;   /* bytes for card 0 and 1 */
    unsigned sm0, sm1;
    int qos;
};

static const struct config_case cases[] = {
    {"no settings means no limits", {0}, NULL, 0, 0, 0, 100, 100, QOS_FIXED_SHARE},
    {"a single value applies to every card", {"TESSERA_MEMORY_LIMIT_MIB=1024", "TESSERA_SM_LIMIT=30"}, NULL, 0,
     1024 * MIB, 1024 * MIB, 30, 30, QOS_FIXED_SHARE},
    {"lists apply per card and 0 means unlimited",
     {"TESSERA_MEMORY_LIMIT_MIB=0,2048", "TESSERA_SM_LIMIT=0,50", "TESSERA_QOS=burst-share"}, NULL, 0, 0,
     2048 * MIB, 100, 50, QOS_BURST_SHARE},
    {"a malformed memory value poisons the config", {"TESSERA_MEMORY_LIMIT_MIB=10x"}, NULL, 1, 0, 0, 100, 100,
     QOS_FIXED_SHARE},
    {"an SM limit over 100 is malformed", {"TESSERA_SM_LIMIT=101"}, NULL, 1, 0, 0, 100, 100, QOS_FIXED_SHARE},
    {"an unknown QoS is malformed", {"TESSERA_QOS=turbo"}, NULL, 1, 0, 0, 100, 100, QOS_FIXED_SHARE},
    {"an empty list item is malformed", {"TESSERA_MEMORY_LIMIT_MIB=1024,,1024"}, NULL, 1, 0, 0, 100, 100,
     QOS_FIXED_SHARE},
    {"lists naming different card counts are malformed",
     {"TESSERA_MEMORY_LIMIT_MIB=1,2", "TESSERA_SM_LIMIT=10,20,30"}, NULL, 1, 1 * MIB, 2 * MIB, 10, 20,
     QOS_FIXED_SHARE},
    {"the limits file overrides the environment", {"TESSERA_MEMORY_LIMIT_MIB=1024"},
     "version=1\nTESSERA_MEMORY_LIMIT_MIB=512,256\n# comment\nTESSERA_QOS=best-effort\n", 0, 512 * MIB, 256 * MIB,
     100, 100, QOS_BEST_EFFORT},
    {"a limits file without version=1 first is malformed", {0}, "TESSERA_MEMORY_LIMIT_MIB=512\n", 1, 0, 0, 100, 100,
     QOS_FIXED_SHARE},
    {"a limits file of another version is malformed", {0}, "version=2\nTESSERA_MEMORY_LIMIT_MIB=512\n", 1, 0, 0,
     100, 100, QOS_FIXED_SHARE},
    {"an unknown key in the limits file is malformed", {0}, "version=1\nTESSERA_MEMORY=512\n", 1, 0, 0, 100, 100,
     QOS_FIXED_SHARE},
    {"a malformed context reservation is malformed", {"TESSERA_CONTEXT_RESERVE_MIB=-1"}, NULL, 1, 0, 0, 100, 100,
     QOS_FIXED_SHARE},
    {"a named limits file that is missing is malformed", {"TESSERA_LIMITS_FILE=/nonexistent/limits.env"}, NULL, 1,
     0, 0, 100, 100, QOS_FIXED_SHARE},
    {"comments may precede version=1, a setting may not", {0}, "# x\nTESSERA_MEMORY_LIMIT_MIB=512\nversion=1\n", 1, 0,
     0, 100, 100, QOS_FIXED_SHARE},
    {"comments and blank lines before version=1 are fine", {0}, "# agent\n\nversion=1\nTESSERA_SM_LIMIT=40\n", 0, 0,
     0, 40, 40, QOS_FIXED_SHARE},
    {"a key given twice in a limits file is malformed", {0},
     "version=1\nTESSERA_MEMORY_LIMIT_MIB=512\nTESSERA_MEMORY_LIMIT_MIB=0\n", 1, 0, 0, 100, 100, QOS_FIXED_SHARE},
    {"a limits file cannot name another limits file", {0}, "version=1\nTESSERA_LIMITS_FILE=/dev/null\n", 1, 0, 0, 100,
     100, QOS_FIXED_SHARE},
    {"TESSERA_DEBUG_PRIVATE_REGION in a limits file is 0 or 1", {0}, "version=1\nTESSERA_DEBUG_PRIVATE_REGION=yes\n", 1,
     0, 0, 100, 100, QOS_FIXED_SHARE},
};

/* The agent's file, as text (so a NUL byte can be in it), read as at the fixed path. */
struct agent_case {
    const char *name;
    const char *text;
    size_t len;          /* 0: strlen(text) */
    int poisoned;
    uint64_t mem0;
    unsigned sm0;
    int debug;
};

#define AGENT_OK "version=1\nTESSERA_VISIBLE_UUIDS=GPU-a\nTESSERA_MEMORY_LIMIT_MIB=1024\nTESSERA_SM_LIMIT=30\n"
#define WITH_NUL "version=1\nTESSERA_VISIBLE_UUIDS=GPU-a\nTESSERA_MEMORY_LIMIT_MIB=1024\0 0\nTESSERA_SM_LIMIT=30\n"
static const struct agent_case agent_cases[] = {
    {"the agent's usual file", AGENT_OK "TESSERA_QOS=fixed-share\nTESSERA_SHARED_REGION=/var/run/tessera/region\n"
     "TESSERA_LOG_LEVEL=warn\n", 0, 0, 1024 * MIB, 30, 0},
    {"a file without the memory limit fails closed",
     "version=1\nTESSERA_VISIBLE_UUIDS=GPU-a\nTESSERA_SM_LIMIT=30\n", 0, 1, 0, 100, 0},
    {"a file without the SM limit fails closed",
     "version=1\nTESSERA_VISIBLE_UUIDS=GPU-a\nTESSERA_MEMORY_LIMIT_MIB=1024\n", 0, 1, 0, 100, 0},
    {"a file without the card list fails closed", "version=1\nTESSERA_MEMORY_LIMIT_MIB=1024\nTESSERA_SM_LIMIT=30\n",
     0, 1, 0, 100, 0},
    {"an empty file fails closed", "", 0, 1, 0, 100, 0},
    {"a NUL byte fails closed (it would cut a line short)", WITH_NUL, sizeof WITH_NUL - 1, 1, 0, 100, 0},
    {"a line of 2048 bytes or more fails closed", NULL, 0, 1, 0, 100, 0},
    {"the agent may allow the private region", AGENT_OK "TESSERA_DEBUG_PRIVATE_REGION=1\n", 0, 0, 1024 * MIB, 30, 1},
    {"the last line needs no newline", "version=1\nTESSERA_VISIBLE_UUIDS=GPU-a\nTESSERA_SM_LIMIT=30\n"
     "TESSERA_MEMORY_LIMIT_MIB=2048", 0, 0, 2048 * MIB, 30, 0},
};

static void test_agent_file(void)
{
    static char longline[4096];
    snprintf(longline, sizeof longline, "%s", AGENT_OK "TESSERA_SHARED_REGION=/");
    size_t n = strlen(longline);
    memset(longline + n, 'a', 2100);
    longline[n + 2100] = '\n';
    for (size_t i = 0; i < sizeof agent_cases / sizeof agent_cases[0]; i++) {
        const struct agent_case *c = &agent_cases[i];
        const char *text = c->text ? c->text : longline;
        CASE(c->name);
        struct tessera_config cfg;
        bool ok = tessera_config_from_agent_text(&cfg, text, c->len ? c->len : strlen(text));
        CHECK(cfg.from_agent && cfg.any_setting, "from the agent");
        CHECK(ok == !c->poisoned && cfg.poisoned == c->poisoned, "poisoned=%d", cfg.poisoned);
        if (c->poisoned)
            continue;
        CHECK(tessera_config_mem_limit(&cfg, 0) == c->mem0, "memory %llu",
              (unsigned long long)tessera_config_mem_limit(&cfg, 0));
        CHECK(tessera_config_sm_limit(&cfg, 0) == c->sm0, "SM %u", tessera_config_sm_limit(&cfg, 0));
        CHECK(cfg.debug_private_region == c->debug, "debug %d", cfg.debug_private_region);
        CHECK(strcmp(cfg.region_path, TESSERA_AGENT_REGION) == 0, "region %s", cfg.region_path);
    }
}

static const char *const keys[] = {"TESSERA_VISIBLE_UUIDS", "TESSERA_MEMORY_LIMIT_MIB", "TESSERA_SM_LIMIT",
                                   "TESSERA_QOS", "TESSERA_SHARED_REGION", "TESSERA_LIMITS_FILE",
                                   "TESSERA_CONTEXT_RESERVE_MIB", "TESSERA_DEBUG_PRIVATE_REGION"};

int main(void)
{
    const char *dir = getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp";
    char file[512];
    snprintf(file, sizeof file, "%s/unit-config-limits.env", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct config_case *c = &cases[i];
        CASE(c->name);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            unsetenv(keys[k]);
        for (int k = 0; k < 6 && c->env[k]; k++)
            putenv((char *)c->env[k]);
        if (c->file) {
            FILE *f = fopen(file, "w");
            fputs(c->file, f);
            fclose(f);
            setenv("TESSERA_LIMITS_FILE", file, 1);
        }
        struct tessera_config cfg;
        tessera_config_load(&cfg);
        CHECK(cfg.poisoned == c->poisoned, "poisoned=%d", cfg.poisoned);
        if (c->poisoned)
            continue;
        CHECK(tessera_config_mem_limit(&cfg, 0) == c->mem0, "card 0 memory %llu",
              (unsigned long long)tessera_config_mem_limit(&cfg, 0));
        CHECK(tessera_config_mem_limit(&cfg, 1) == c->mem1, "card 1 memory %llu",
              (unsigned long long)tessera_config_mem_limit(&cfg, 1));
        CHECK(tessera_config_sm_limit(&cfg, 0) == c->sm0, "card 0 SM %u", tessera_config_sm_limit(&cfg, 0));
        CHECK(tessera_config_sm_limit(&cfg, 1) == c->sm1, "card 1 SM %u", tessera_config_sm_limit(&cfg, 1));
        CHECK((int)cfg.qos == c->qos, "qos %d", cfg.qos);
        CHECK(cfg.any_setting == (c->env[0] != NULL || c->file != NULL), "any_setting %d", cfg.any_setting);
        CHECK(!cfg.from_agent, "no agent file here");
    }
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        unsetenv(keys[k]);
    test_agent_file();
    return tc_summary("unit_config");
}

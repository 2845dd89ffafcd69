/* The kit's helpers the cases share: a worker's environment and log paths (kit.h). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "kit.h"

void env_add(struct env *e, const char *fmt, ...)
{
    if (e->n == ENV_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->buf[e->n], sizeof e->buf[e->n], fmt, ap);
    va_end(ap);
    e->v[e->n] = e->buf[e->n];
    e->v[++e->n] = NULL;
}

void env_container(struct kit *kit, struct env *e, int tenant)
{
    env_add(e, "LD_PRELOAD=%s", kit->lib);
    env_add(e, "TESSERA_SHARED_REGION=%s/region.%d.%d", kit->tmp, kit->ncase, tenant);
    env_add(e, "TESSERA_VISIBLE_UUIDS=%s", kit->uuid);
    /* Read by the stub driver of `make test` only: the case's processes share one simulated card, each
     * container in its own pid namespace. A real driver ignores them. */
    env_add(e, "TESSERA_STUB_CARDS_FILE=%s/cards.%d", kit->tmp, kit->ncase);
    env_add(e, "TESSERA_STUB_PIDNS=%d", tenant + 1);
    /* The library's own log level for the workers (their logs are kept in the kit's directory). */
    const char *lvl = getenv("TESSERA_GPUTEST_LOG_LEVEL");
    if (lvl && *lvl)
        env_add(e, "TESSERA_LOG_LEVEL=%s", lvl);
}

void kit_log(const struct kit *kit, int i, char *out, size_t len)
{
    snprintf(out, len, "%s/case%d.worker%d.log", kit->tmp, kit->ncase, i);
}

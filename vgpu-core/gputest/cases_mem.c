/* The kit's memory, ordinal-remapping and launch-overhead cases (see kit.h). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "kit.h"

#define FAKE_UUID "GPU-00000000-0000-0000-0000-0000000000ff"

/* The i-th CUresult of a "mem" worker's line ("ok TOTAL RC1 RC2 ..."); -1 when absent. */
static int mem_rc(const char *line, int i)
{
    const char *p = line;
    for (int k = 0; k < i + 2 && p; k++)
        if ((p = strchr(p, ' ')))
            p++;
    return p ? atoi(p) : -1;
}

static unsigned long long mem_total(const char *line)
{
    unsigned long long t = 0;
    return sscanf(line, "ok %llu", &t) == 1 ? t : 0;
}

/* Starts a "mem" worker of the current case with the given allocation sizes and waits for its line. */
static int mem_worker(struct kit *kit, struct worker *w, int i, struct env *e, char *sizes[])
{
    char log[512], *args[8] = {"mem"};
    for (int k = 0; sizes[k] && k < 6; k++)
        args[k + 1] = sizes[k];
    kit_log(kit, i, log, sizeof log);
    if (worker_start(w, kit->self, args, e->v, log, 0) != 0) {
        snprintf(w->line, sizeof w->line, "error cannot start a worker");
        return -1;
    }
    return worker_result(w, 60);
}

/* 4 processes of one container fill its cap exactly; a fifth byte is refused. */
void cases_memory(struct kit *kit)
{
    unsigned long long cap = (unsigned long long)kit->k.mem_mib << 20, quarter = cap / 4;
    char q[32], q1[32], one[] = "1", what[128], got[64], want[64];
    snprintf(q, sizeof q, "%llu", quarter);
    snprintf(q1, sizeof q1, "%llu", cap - 3 * quarter - 1);
    struct worker w[4];
    struct env e = {0};
    kit->ncase++;
    env_container(kit, &e, 0);
    env_add(&e, "TESSERA_MEMORY_LIMIT_MIB=%u", kit->k.mem_mib);
    int started = 0, ok = 1;
    for (int i = 0; i < 3 && ok; i++, started++) {
        char *sizes[] = {q, NULL};
        ok = mem_worker(kit, &w[i], i, &e, sizes) == 0 && mem_rc(w[i].line, 0) == CUDA_SUCCESS;
    }
    char *last[] = {q1, one, one, NULL};
    int last_ok = ok && mem_worker(kit, &w[started++], 3, &e, last) == 0;
    int filled = last_ok && mem_rc(w[3].line, 0) == CUDA_SUCCESS && mem_rc(w[3].line, 1) == CUDA_SUCCESS;
    int over = last_ok ? mem_rc(w[3].line, 2) : -1;
    snprintf(what, sizeof what, "memory: 4 processes fill one %u MiB cap to the byte", kit->k.mem_mib);
    if (filled)
        snprintf(got, sizeof got, "%u MiB held", kit->k.mem_mib);
    else
        snprintf(got, sizeof got, "refused in process %d", started);
    snprintf(want, sizeof want, "%u MiB", kit->k.mem_mib);
    report_row(what, got, want, filled);
    report_row("memory: one byte over the shared cap", over < 0 ? "no answer" : cu_name((CUresult)over),
               "CUDA_ERROR_OUT_OF_MEMORY", over == CUDA_ERROR_OUT_OF_MEMORY);
    unsigned long long total = last_ok ? mem_total(w[3].line) : 0;
    snprintf(got, sizeof got, "%llu MiB", total >> 20);
    report_row("memory: cuMemGetInfo total inside the container", got, want, total == cap);
    for (int i = 0; i < started; i++)
        worker_stop(&w[i]);
}

/* Device 0 is the container's second card (by UUID, with CUDA_VISIBLE_DEVICES naming it), or not its card. */
void cases_remap(struct kit *kit)
{
    struct worker w;
    struct env e = {0};
    char got[64], over_s[32], two[32], one[] = "1";
    unsigned mib = kit->k.mem_mib / 2;
    kit->ncase++;
    env_container(kit, &e, 0);
    env_add(&e, "TESSERA_VISIBLE_UUIDS=%s,%s", FAKE_UUID, kit->uuid); /* replaces env_container's (putenv) */
    env_add(&e, "TESSERA_MEMORY_LIMIT_MIB=%u,%u", mib / 2, mib);
    env_add(&e, "CUDA_VISIBLE_DEVICES=%s", kit->uuid);
    snprintf(two, sizeof two, "%llu", (unsigned long long)mib << 20);
    char *sizes[] = {two, one, NULL};
    int ok = mem_worker(kit, &w, 0, &e, sizes) == 0;
    unsigned long long total = ok ? mem_total(w.line) : 0;
    int good = ok && total == (unsigned long long)mib << 20 && mem_rc(w.line, 0) == CUDA_SUCCESS &&
               mem_rc(w.line, 1) == CUDA_ERROR_OUT_OF_MEMORY;
    snprintf(got, sizeof got, "%llu MiB, +1 B %s", total >> 20,
             mem_rc(w.line, 1) == CUDA_ERROR_OUT_OF_MEMORY ? "refused" : "allowed");
    snprintf(over_s, sizeof over_s, "%u MiB, +1 B refused", mib);
    report_row("remap: CUDA_VISIBLE_DEVICES=<uuid>, card listed 2nd gets its cap", ok ? got : w.line, over_s, good);
    worker_stop(&w);

    struct env e2 = {0};
    kit->ncase++;
    env_container(kit, &e2, 0);
    env_add(&e2, "TESSERA_VISIBLE_UUIDS=%s", FAKE_UUID); /* replaces env_container's */
    env_add(&e2, "TESSERA_MEMORY_LIMIT_MIB=%u", mib);
    char mb[] = "1048576";
    char *small[] = {mb, NULL};
    ok = mem_worker(kit, &w, 0, &e2, small) == 0;
    int rc = ok ? mem_rc(w.line, 0) : -1;
    report_row("remap: a card not in TESSERA_VISIBLE_UUIDS is refused", rc < 0 ? w.line : cu_name((CUresult)rc),
               "CUDA_ERROR_OUT_OF_MEMORY", rc == CUDA_ERROR_OUT_OF_MEMORY);
    worker_stop(&w);
}

/* ns per launch of an empty kernel in a process of the given environment; < 0 on failure. */
static double launch_ns(struct kit *kit, struct env *e, char *line, size_t len)
{
    struct worker w;
    char log[512], *args[] = {"launch", "20000", NULL};
    kit_log(kit, 0, log, sizeof log);
    double v = -1;
    if (worker_start(&w, kit->self, args, e->v, log, 0) == 0 && worker_result(&w, 120) == 0)
        v = atof(w.line + 3);
    snprintf(line, len, "%s", w.line);
    worker_stop(&w);
    return v;
}

void cases_overhead(struct kit *kit)
{
    char line[512], got[64];
    struct env bare = {0}, plain = {0}, capped = {0};
    kit->ncase++;
    env_add(&bare, "TESSERA_STUB_CARDS_FILE=%s/cards.%d", kit->tmp, kit->ncase);
    double base = launch_ns(kit, &bare, line, sizeof line);
    snprintf(got, sizeof got, base < 0 ? "error" : "%.2f us", base / 1000);
    report_row("launch: cuLaunchKernel of an empty kernel, no library", got, "(reference)",
               base >= 0 ? REPORT_REFERENCE : 0);
    if (base < 0)
        return;
    kit->ncase++;
    env_add(&plain, "LD_PRELOAD=%s", kit->lib);
    env_add(&plain, "TESSERA_STUB_CARDS_FILE=%s/cards.%d", kit->tmp, kit->ncase);
    double p = launch_ns(kit, &plain, line, sizeof line);
    snprintf(got, sizeof got, p < 0 ? "error" : "%+.2f us", (p - base) / 1000);
    report_row("launch: overhead, library loaded without limits", got, "<= +1 us", p >= 0 && p - base <= 1000);
    kit->ncase++;
    env_container(kit, &capped, 0);
    env_add(&capped, "TESSERA_MEMORY_LIMIT_MIB=%u", kit->k.mem_mib);
    env_add(&capped, "TESSERA_SM_LIMIT=50");
    double c = launch_ns(kit, &capped, line, sizeof line);
    snprintf(got, sizeof got, c < 0 ? "error" : "%+.2f us", (c - base) / 1000);
    report_row("launch: overhead, 50% SM cap (includes waiting for budget)", got, "<= +10 us",
               c >= 0 && c - base <= 10000);
}

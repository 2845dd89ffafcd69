/*
 * The kit's SM cases: each tenant is one container (its own region, and with pidns its own pid namespace)
 * running the spin kernel flat out on device 0; its share is its throughput relative to the same workload
 * run alone without the library.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kit.h"

#define MAX_TENANTS 2

enum judge { REFERENCE, WITHIN_TOL, AT_LEAST };

struct tenant {
    const char *name;
    const char *limit;    /* TESSERA_SM_LIMIT, NULL = no library */
    const char *qos;      /* TESSERA_QOS, NULL = the default (fixed-share) */
    double want;          /* percent of the uncapped throughput */
    enum judge judge;
};

/* Runs the tenants together; rates[i] = kernels/s, < 0 on failure (line[i] says why). */
static void run_case(struct kit *kit, const struct tenant *t, int n, int graph, int pidns, double *rates,
                     char line[][512])
{
    struct worker w[MAX_TENANTS];
    char ns[32], log[512], *args[] = {"sm", ns, graph ? "1" : "0", NULL};
    snprintf(ns, sizeof ns, "%llu", (unsigned long long)kit->k.spin_ns);
    kit->ncase++;
    for (int i = 0; i < n; i++) {
        struct env e = {0};
        if (t[i].limit) {
            env_container(kit, &e, i);
            env_add(&e, "TESSERA_SM_LIMIT=%s", t[i].limit);
            if (t[i].qos)
                env_add(&e, "TESSERA_QOS=%s", t[i].qos);
        } else { /* no library: only the stub's shared card and namespace */
            env_add(&e, "TESSERA_STUB_CARDS_FILE=%s/cards.%d", kit->tmp, kit->ncase);
            env_add(&e, "TESSERA_STUB_PIDNS=%d", i + 1);
        }
        kit_log(kit, i, log, sizeof log);
        if (worker_start(&w[i], kit->self, args, e.v, log, pidns) != 0)
            w[i].pid = -1;
    }
    double timeout = kit->k.warm_s + kit->k.windows * kit->k.window_s * 4 + 60;
    for (int i = 0; i < n; i++) {
        rates[i] = w[i].pid > 0 && worker_result(&w[i], timeout) == 0 ? atof(w[i].line + 3) : -1;
        snprintf(line[i], 512, "%s", w[i].pid > 0 ? w[i].line : "error cannot start a worker");
    }
    for (int i = 0; i < n; i++)
        worker_stop(&w[i]);
}

static void judge_rows(struct kit *kit, const struct tenant *t, int n, const double *rates, char line[][512],
                       double base)
{
    for (int i = 0; i < n; i++) {
        char got[64], want[64];
        double pct = base > 0 && rates[i] >= 0 ? rates[i] * 100 / base : -1;
        int ok;
        if (pct < 0) {
            snprintf(got, sizeof got, "%.25s", line[i]);
            ok = 0;
        } else {
            snprintf(got, sizeof got, "%.1f%%", pct);
            ok = t[i].judge == AT_LEAST ? pct >= t[i].want - kit->k.tol
                                        : pct >= t[i].want - kit->k.tol && pct <= t[i].want + kit->k.tol;
        }
        if (t[i].judge == AT_LEAST)
            snprintf(want, sizeof want, ">= %.0f%% (the rest)", t[i].want - kit->k.tol);
        else
            snprintf(want, sizeof want, "%.0f%% +-%.0f", t[i].want, kit->k.tol);
        report_row(t[i].name, got, want, ok);
    }
}

/* The uncapped reference: kernels/s of the workload alone, no library. */
static double reference(struct kit *kit, int graph)
{
    struct tenant t = {graph ? "sm: uncapped graph replay, no library" : "sm: uncapped, no library", NULL, NULL, 0,
                       REFERENCE};
    double rate;
    char line[1][512], got[64];
    run_case(kit, &t, 1, graph, 0, &rate, line);
    if (rate > 0)
        snprintf(got, sizeof got, "%.0f kernels/s", rate);
    else
        snprintf(got, sizeof got, "%.25s", line[0]);
    report_row(t.name, got, "(reference)", rate > 0 ? REPORT_REFERENCE : 0);
    return rate;
}

static void scenario(struct kit *kit, const struct tenant *t, int n, int graph, int pidns, double base)
{
    double rates[MAX_TENANTS];
    char line[MAX_TENANTS][512];
    run_case(kit, t, n, graph, pidns, rates, line);
    judge_rows(kit, t, n, rates, line, base);
}

void cases_sm(struct kit *kit)
{
    double base = reference(kit, 0);
    const struct tenant fixed50[] = {{"sm: fixed-share 50%, alone", "50", NULL, 50, WITHIN_TOL}};
    scenario(kit, fixed50, 1, 0, 0, base);
    const struct tenant pair[] = {{"sm: fixed-share 30% beside a 70% tenant", "30", NULL, 30, WITHIN_TOL},
                                  {"sm: fixed-share 70% beside a 30% tenant", "70", NULL, 70, WITHIN_TOL}};
    scenario(kit, pair, 2, 0, 0, base);
    const struct tenant burst_alone[] = {{"sm: burst-share 30%, alone (not capped)", "30", "burst-share", 100,
                                          WITHIN_TOL}};
    scenario(kit, burst_alone, 1, 0, 0, base);
    const struct tenant burst_busy[] = {
        {"sm: burst-share 30% beside a busy uncapped tenant", "30", "burst-share", 30, WITHIN_TOL},
        {"sm: the uncapped tenant beside it (no library)", NULL, NULL, 70, AT_LEAST}};
    scenario(kit, burst_busy, 2, 0, 0, base);
    double gbase = reference(kit, 1);
    const struct tenant graph30[] = {{"sm: graph replay (cuGraphLaunch) under a 30% cap", "30", NULL, 30, WITHIN_TOL}};
    scenario(kit, graph30, 1, 1, 0, gbase);
    const struct tenant ns_pair[] = {{"sm: 30% in its own pid namespace beside a 70% one", "30", NULL, 30, WITHIN_TOL},
                                     {"sm: 70% in its own pid namespace beside a 30% one", "70", NULL, 70, WITHIN_TOL}};
    if (geteuid() != 0 || system("unshare --pid --fork --mount-proc true >/dev/null 2>&1") != 0) {
        const char *why = geteuid() != 0 ? "not root: unshare -p needs it" : "unshare --pid --fork fails here";
        for (int i = 0; i < 2; i++) {
            char want[32];
            snprintf(want, sizeof want, "%.0f%% +-%.0f", ns_pair[i].want, kit->k.tol);
            report_row(ns_pair[i].name, why, want, -1);
        }
        return;
    }
    scenario(kit, ns_pair, 2, 0, 1, base);
}

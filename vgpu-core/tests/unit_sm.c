/*
 * Unit tests of the SM limiter's arithmetic (src/limits/sm_math.c): the budget, the own-time
 * estimate under contention and lag, and the burst-share contention test on either kind of driver.
 */
#include "common.h"
#include "limits/sm_math.h"

#define MS 1000000ULL
#define S 1000000000ULL

/* Simulates a container charging kernels of true time d ns at limit l% for `secs` seconds of
 * launch attempts, returning the share of time its admitted work takes. */
static double simulated_share(uint64_t d, unsigned l, double secs)
{
    uint64_t now = 1 * S, tat = 0, end = now + (uint64_t)(secs * 1e9), work = 0, start = now;
    while (now < end) {
        uint64_t wait;
        tat = sm_gcra(tat, now, sm_cost(d, l), 10 * MS, &wait);
        now += wait;
        work += d;
    }
    return 100.0 * (double)work / (double)(now - start);
}

static void budget(void)
{
    CASE("a launch costs its GPU time scaled by 100/limit");
    CHECK(sm_cost(300, 30) == 1000, "cost %llu", (unsigned long long)sm_cost(300, 30));
    CHECK(sm_cost(500, 100) == 500 && sm_cost(500, 0) == 500, "uncapped costs the time itself");
    CHECK(sm_cost(UINT64_MAX / 2, 10) >= UINT64_MAX / 8, "a huge charge saturates instead of wrapping");

    CASE("GCRA admits within the burst and makes the rest wait exactly");
    uint64_t wait, tat = sm_gcra(0, 100 * MS, 4 * MS, 10 * MS, &wait);
    CHECK(tat == 104 * MS && wait == 0, "tat %llu wait %llu", (unsigned long long)tat, (unsigned long long)wait);
    tat = sm_gcra(115 * MS, 100 * MS, 4 * MS, 10 * MS, &wait);
    CHECK(tat == 119 * MS && wait == 9 * MS, "tat %llu wait %llu", (unsigned long long)tat, (unsigned long long)wait);

    CASE("an idle container banks no credit beyond the burst");
    tat = sm_gcra(10 * MS, 500 * MS, 4 * MS, 10 * MS, &wait);
    CHECK(tat == 504 * MS && wait == 0, "tat %llu", (unsigned long long)tat);

    CASE("a saturating container holds its share at 10/30/50/70/90%");
    const unsigned limits[] = {10, 30, 50, 70, 90};
    for (unsigned i = 0; i < 5; i++) {
        double share = simulated_share(200000, limits[i], 2.0);
        CHECK(share > limits[i] - 0.5 && share < limits[i] + 0.5, "limit %u: share %.2f", limits[i], share);
    }
}

static void estimate(void)
{
    struct sm_est e = {0};
    CASE("no observation: no estimate");
    CHECK(sm_est_get(&e, 5 * S) == 0, "empty");

    CASE("time spent behind a neighbour's slice is not charged, the kernel's own jitter is");
    const uint64_t timings[] = {900, 190, 450, 210, 1300, 200, 700, 205, 195};
    for (unsigned i = 0; i < 9; i++)
        sm_est_observe(&e, 5 * S + i * MS, timings[i]);
    uint64_t got = sm_est_get(&e, 5 * S + 10 * MS);
    CHECK(got == 200, "estimate %llu, want the mean of the clean timings 200", (unsigned long long)got);

    CASE("a kernel that really became slower is followed within two buckets");
    uint64_t t = 5 * S + SM_EST_BUCKET_NS;
    for (unsigned i = 0; i < 3; i++, t += SM_EST_BUCKET_NS / 2)
        sm_est_observe(&e, t, 400);
    got = sm_est_get(&e, t);
    CHECK(got == 400, "after two buckets of 400: %llu", (unsigned long long)got);

    CASE("a kernel that became faster is followed at once");
    sm_est_observe(&e, t + MS, 100);
    sm_est_observe(&e, t + 2 * MS, 104);
    got = sm_est_get(&e, t + 3 * MS);
    CHECK(got >= 100 && got <= 104, "after a faster run: %llu", (unsigned long long)got);

    CASE("an estimate not refreshed for two buckets expires");
    CHECK(sm_est_get(&e, t + 3 * SM_EST_BUCKET_NS) == 0, "stale estimate kept");
}

static bool contended(const struct sm_sample *s, int n, const int32_t *ours, int nours, int active, int card)
{
    struct sm_view v = {s, n, ours, nours, active, card, card, false};
    return sm_contended(&v);
}

static bool still_contended(const struct sm_sample *s, int n, const int32_t *ours, int card_low, int card_high)
{
    struct sm_view v = {s, n, ours, 2, 1, card_low, card_high, true};
    return sm_contended(&v);
}

static void contention(void)
{
    const int32_t ours[] = {1, 57};
    CASE("namespace pids: alone on the card (NVML reads 90% for a saturated card) is not contention");
    struct sm_sample alone[] = {{1, 88, 90}, {57, 2, 3}};
    CHECK(!contended(alone, 2, ours, 2, 1, 89), "alone");

    CASE("namespace pids: another busy pid is a neighbour");
    struct sm_sample other[] = {{1, 27, 28}, {4242, 60, 63}};
    CHECK(contended(other, 2, ours, 2, 1, 88), "visible neighbour");

    CASE("namespace pids, neighbours hidden by the driver: card utilisation beyond ours");
    struct sm_sample hidden[] = {{1, 27, 28}};
    CHECK(contended(hidden, 1, ours, 2, 1, 88), "hidden neighbour");
    CHECK(!contended(hidden, 1, ours, 2, 1, 33), "within the margin");

    CASE("namespace pids: our own drop in use, seen late by the card counter, is not a neighbour");
    struct sm_sample falling[] = {{1, 45, 88}};
    CHECK(!contended(falling, 1, ours, 2, 1, 70), "lagging card counter");

    CASE("namespace pids, hidden neighbour: a stall that dips the card counter does not uncap");
    struct sm_sample capped_own[] = {{1, 27, 30}};
    CHECK(still_contended(capped_own, 1, ours, 25, 88), "dip while capped");
    struct sm_view start = {capped_own, 1, ours, 2, 1, 25, 88, false};
    CHECK(!sm_contended(&start), "the same dip is not enough to become capped");
    CHECK(!still_contended(capped_own, 1, ours, 24, 33), "neighbour gone: uncapped");

    CASE("host pids: more busy processes than the container has active");
    struct sm_sample host[] = {{3000001, 27, 28}, {3000777, 60, 62}};
    CHECK(contended(host, 2, ours, 2, 1, 88), "host-pid neighbour");
    CHECK(!contended(host, 2, ours, 2, 2, 88), "both are ours");
    struct sm_sample idle_neighbour[] = {{3000001, 88, 90}, {3000777, 0, 1}};
    CHECK(!contended(idle_neighbour, 2, ours, 2, 1, 88), "an idle neighbour with a context is no contention");

    CASE("no samples at all (NOT_FOUND every poll) is no evidence of a neighbour");
    CHECK(!contended(NULL, 0, ours, 2, 1, -1), "no data");
}

int main(void)
{
    budget();
    estimate();
    contention();
    return tc_summary("unit_sm");
}

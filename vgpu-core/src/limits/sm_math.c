#include "sm_math.h"

uint64_t sm_cost(uint64_t gpu_ns, unsigned limit_pct)
{
    if (limit_pct == 0 || limit_pct >= 100)
        return gpu_ns;
    uint64_t cost;
    if (__builtin_mul_overflow(gpu_ns, 100, &cost))
        return UINT64_MAX / 4;
    return cost / limit_pct;
}

uint64_t sm_gcra(uint64_t tat, uint64_t now, uint64_t cost, uint64_t burst, uint64_t *wait)
{
    uint64_t base = tat > now ? tat : now, next = base + cost;
    *wait = next > now + burst ? next - now - burst : 0;
    return next;
}

static void rotate(struct sm_est *e, uint64_t now)
{
    if (now - e->bucket_start < SM_EST_BUCKET_NS)
        return;
    e->prev = now - e->bucket_start < 2 * SM_EST_BUCKET_NS ? e->cur : (struct sm_bucket){0};
    e->cur = (struct sm_bucket){0};
    e->bucket_start = now;
}

static uint64_t min_nonzero(uint64_t a, uint64_t b)
{
    return !a ? b : !b ? a : a < b ? a : b;
}

static bool clean(uint64_t v, uint64_t floor)
{
    return v * 100 <= floor * SM_EST_CLEAN_PCT;
}

void sm_est_observe(struct sm_est *e, uint64_t now, uint64_t ns_per_unit)
{
    if (ns_per_unit == 0)
        ns_per_unit = 1;
    if (e->bucket_start == 0)
        e->bucket_start = now;
    rotate(e, now);
    /* A much faster run shows the bucket's earlier "clean" timings were not: start the mean again. */
    if (e->cur.min && !clean(e->cur.min, ns_per_unit))
        e->cur.sum = e->cur.n = 0;
    e->cur.min = min_nonzero(e->cur.min, ns_per_unit);
    if (clean(ns_per_unit, min_nonzero(e->cur.min, e->prev.min))) {
        e->cur.sum += ns_per_unit;
        e->cur.n++;
    }
}

uint64_t sm_est_get(const struct sm_est *e, uint64_t now)
{
    if (e->bucket_start == 0 || now - e->bucket_start >= 2 * SM_EST_BUCKET_NS)
        return 0;
    /* Past its bucket's length, the current bucket is what the next rotation keeps as "previous". */
    bool aged = now - e->bucket_start >= SM_EST_BUCKET_NS;
    struct sm_bucket prev = aged ? e->cur : e->prev, cur = aged ? (struct sm_bucket){0} : e->cur;
    uint64_t floor = min_nonzero(cur.min, prev.min), sum = 0, n = 0;
    if (!floor)
        return 0;
    /* Clean sums gathered before a lower minimum arrived may hold values it no longer calls clean. */
    if (cur.n && clean(cur.sum / cur.n, floor))
        sum += cur.sum, n += cur.n;
    if (prev.n && clean(prev.sum / prev.n, floor))
        sum += prev.sum, n += prev.n;
    return n ? sum / n : floor;
}

static bool is_ours(const struct sm_view *v, uint32_t pid)
{
    for (int i = 0; i < v->nours; i++)
        if (v->ours[i] > 0 && (uint32_t)v->ours[i] == pid)
            return true;
    return false;
}

bool sm_contended(const struct sm_view *v)
{
    int matched = 0, busy = 0, busy_foreign = 0;
    unsigned own_peak = 0;
    for (int i = 0; i < v->nsamples; i++) {
        const struct sm_sample *s = &v->samples[i];
        bool ours = is_ours(v, s->pid);
        matched += ours;
        if (ours)
            own_peak += s->peak;
        if (s->avg >= SM_ACTIVE_PCT) {
            busy++;
            busy_foreign += !ours;
        }
    }
    if (matched > 0)
        return busy_foreign > 0 ||
               (v->card_low >= 0 && (v->capped ? v->card_high : v->card_low) > (int)own_peak + SM_FOREIGN_MARGIN);
    return busy > v->ours_active;
}

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

static void rotate(struct sm_min_est *e, uint64_t now)
{
    if (now - e->bucket_start < SM_EST_BUCKET_NS)
        return;
    e->prev = now - e->bucket_start < 2 * SM_EST_BUCKET_NS ? e->cur : 0;
    e->cur = 0;
    e->bucket_start = now;
}

void sm_est_observe(struct sm_min_est *e, uint64_t now, uint64_t ns_per_unit)
{
    if (ns_per_unit == 0)
        ns_per_unit = 1;
    if (e->bucket_start == 0)
        e->bucket_start = now;
    rotate(e, now);
    if (e->cur == 0 || ns_per_unit < e->cur)
        e->cur = ns_per_unit;
}

uint64_t sm_est_get(const struct sm_min_est *e, uint64_t now)
{
    if (e->bucket_start == 0 || now - e->bucket_start >= 2 * SM_EST_BUCKET_NS)
        return 0;
    uint64_t prev = now - e->bucket_start < SM_EST_BUCKET_NS ? e->prev : e->cur;
    uint64_t cur = now - e->bucket_start < SM_EST_BUCKET_NS ? e->cur : 0;
    if (cur == 0)
        return prev;
    return prev && prev < cur ? prev : cur;
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
    unsigned own_util = 0;
    for (int i = 0; i < v->nsamples; i++) {
        const struct sm_sample *s = &v->samples[i];
        bool ours = is_ours(v, s->pid);
        matched += ours;
        if (ours)
            own_util += s->util;
        if (s->util >= SM_ACTIVE_PCT) {
            busy++;
            busy_foreign += !ours;
        }
    }
    if (matched > 0)
        return busy_foreign > 0 || (v->card_util >= 0 && v->card_util > (int)own_util + SM_FOREIGN_MARGIN);
    return busy > v->ours_active;
}

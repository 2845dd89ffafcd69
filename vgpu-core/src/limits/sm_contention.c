#include "sm_contention.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_math.h"

#define WINDOW_NS 1000000000ULL
#define MAX_PIDS 64
/* The most sample slots the driver may ask room for (it asks for its whole buffer: 72 on driver 580). */
#define MAX_ROOM 4096
#define PER_PID 16
#define CARD_READINGS 16
#define MAX_OURS 256

struct pid_hist {
    uint32_t pid;
    unsigned n, next;
    uint64_t at[PER_PID];
    unsigned util[PER_PID];
};

struct card_hist {
    unsigned long long last_seen_us;
    nvmlReturn_t last_ret;   /* of the last GetProcessUtilization, for the debug log */
    unsigned last_cnt;
    nvmlProcessUtilizationSample_t *buf; /* grown to the room the driver asks for; never freed */
    unsigned room;
    struct sm_view last_view;
    struct sm_sample last_samples[4];
    bool last_ours[4], last_verdict;
    struct pid_hist pids[MAX_PIDS];
    unsigned ncard, card_next;
    uint64_t card_at[CARD_READINGS];
    unsigned card_util[CARD_READINGS];
};

/* Only this process's controller thread touches it. */
static struct card_hist hist[TESSERA_MAX_CARDS];

static void add_sample(struct card_hist *h, uint32_t pid, unsigned util, uint64_t now)
{
    struct pid_hist *slot = NULL, *oldest = &h->pids[0];
    for (int i = 0; i < MAX_PIDS && !slot; i++) {
        if (h->pids[i].n && h->pids[i].pid == pid)
            slot = &h->pids[i];
        else if (!h->pids[i].n || h->pids[i].at[(h->pids[i].next + PER_PID - 1) % PER_PID] <
                                      oldest->at[(oldest->next + PER_PID - 1) % PER_PID])
            oldest = &h->pids[i];
    }
    if (!slot) {
        slot = oldest;
        memset(slot, 0, sizeof *slot);
        slot->pid = pid;
    }
    slot->at[slot->next] = now;
    slot->util[slot->next] = util;
    slot->next = (slot->next + 1) % PER_PID;
    if (slot->n < PER_PID)
        slot->n++;
}

/*
 * New per-process samples since the last poll; NOT_FOUND means none arrived, not "idle". The driver wants
 * room for its whole sample buffer, not for the samples it returns (580.159 answers INSUFFICIENT_SIZE with
 * count 72 to a 64-entry buffer with one process on the card), so the buffer grows to what it asks.
 */
static void read_samples(struct card_hist *h, nvmlDevice_t nvml, uint64_t now)
{
    if (!tessera_nvml.nvmlDeviceGetProcessUtilization) {
        h->last_ret = NVML_ERROR_FUNCTION_NOT_FOUND;
        return;
    }
    unsigned cnt = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        cnt = h->room;
        h->last_ret = tessera_nvml.nvmlDeviceGetProcessUtilization(nvml, h->buf, &cnt, h->last_seen_us);
        if (h->last_ret != NVML_ERROR_INSUFFICIENT_SIZE || cnt <= h->room || cnt > MAX_ROOM)
            break;
        nvmlProcessUtilizationSample_t *grown = realloc(h->buf, cnt * sizeof *grown);
        if (!grown)
            break;
        h->buf = grown;
        h->room = cnt;
    }
    h->last_cnt = cnt;
    if (h->last_ret != NVML_SUCCESS)
        return;
    for (unsigned k = 0; k < cnt && k < h->room; k++) {
        add_sample(h, h->buf[k].pid, h->buf[k].smUtil, now);
        if (h->buf[k].timeStamp > h->last_seen_us)
            h->last_seen_us = h->buf[k].timeStamp;
    }
}

static void read_card(struct card_hist *h, nvmlDevice_t nvml, uint64_t now)
{
    nvmlUtilization_t u;
    if (!tessera_nvml.nvmlDeviceGetUtilizationRates ||
        tessera_nvml.nvmlDeviceGetUtilizationRates(nvml, &u) != NVML_SUCCESS)
        return;
    h->card_at[h->card_next] = now;
    h->card_util[h->card_next] = u.gpu;
    h->card_next = (h->card_next + 1) % CARD_READINGS;
    if (h->ncard < CARD_READINGS)
        h->ncard++;
}

/* Average, lowest and highest of the readings taken within the last window; 0 when there are none. */
static int recent(const uint64_t *at, const unsigned *v, unsigned n, uint64_t now, unsigned *avg, unsigned *lo,
                  unsigned *hi)
{
    unsigned sum = 0, k = 0;
    *lo = 100, *hi = 0;
    for (unsigned i = 0; i < n; i++)
        if (now - at[i] <= WINDOW_NS) {
            sum += v[i], k++;
            *lo = v[i] < *lo ? v[i] : *lo;
            *hi = v[i] > *hi ? v[i] : *hi;
        }
    *avg = k ? (sum + k / 2) / k : 0;
    return k > 0;
}

int sm_active_procs(int card, uint64_t now)
{
    struct region *r = tessera.region;
    int n = 0;
    for (int i = 0; i < REGION_MAX_PROCS; i++) {
        uint64_t t = atomic_load_explicit(&r->sm_active_ns[i][card], memory_order_relaxed);
        n += r->procs[i].pid != 0 && t && now - t <= WINDOW_NS;
    }
    return n;
}

bool sm_contention_poll(int card, nvmlDevice_t nvml, uint64_t now, bool capped)
{
    struct card_hist *h = &hist[card];
    read_samples(h, nvml, now);
    read_card(h, nvml, now);
    struct sm_sample samples[MAX_PIDS];
    int ns = 0;
    unsigned avg, lo, hi;
    for (int i = 0; i < MAX_PIDS; i++)
        if (recent(h->pids[i].at, h->pids[i].util, h->pids[i].n, now, &avg, &lo, &hi))
            samples[ns++] = (struct sm_sample){h->pids[i].pid, avg, hi};
    bool have_card = recent(h->card_at, h->card_util, h->ncard, now, &avg, &lo, &hi);
    int32_t ours[MAX_OURS];
    int nours = region_live_procs(tessera.region, ours, MAX_OURS);
    struct sm_view v = {
        .samples = samples,
        .nsamples = ns,
        .ours = ours,
        .nours = nours < MAX_OURS ? nours : MAX_OURS,
        .ours_active = sm_active_procs(card, now),
        .card_low = have_card ? (int)lo : -1,
        .card_high = have_card ? (int)hi : -1,
        .capped = capped,
    };
    h->last_verdict = sm_contended(&v);
    h->last_view = v;
    h->last_view.samples = NULL, h->last_view.ours = NULL;
    for (int i = 0; i < ns && i < 4; i++) {
        h->last_samples[i] = samples[i];
        h->last_ours[i] = false;
        for (int j = 0; j < v.nours; j++)
            h->last_ours[i] |= ours[j] > 0 && (uint32_t)ours[j] == samples[i].pid;
    }
    return h->last_verdict;
}

void sm_contention_describe(int card, char *buf, size_t len)
{
    const struct card_hist *h = &hist[card];
    const struct sm_view *v = &h->last_view;
    int n = snprintf(buf, len, "nvml ret %d count %u; %d sample(s) in 1 s:", (int)h->last_ret, h->last_cnt, v->nsamples);
    for (int i = 0; i < v->nsamples && i < 4 && n > 0 && (size_t)n < len; i++)
        n += snprintf(buf + n, len - (size_t)n, " %u%s:%u", h->last_samples[i].pid, h->last_ours[i] ? "*" : "",
                      h->last_samples[i].avg);
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "; ours %d (%d launching); card %d..%d; neighbour %s", v->nours,
                 v->ours_active, v->card_low, v->card_high, h->last_verdict ? "yes" : "no");
}

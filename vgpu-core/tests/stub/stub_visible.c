/*
 * CUDA_VISIBLE_DEVICES as the real driver reads it: a comma list of card indices or card UUIDs
 * ("GPU-…", any unique prefix) that selects and orders the cards a process sees as ordinals
 * 0..n-1. Like the driver, the list ends at the first entry that names no card (or one already
 * listed); unset means every card in index order, an empty or wholly invalid list means none.
 * NVML does not read it: NVML indices stay the physical cards' (tests/stub/stub_nvml.c).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stub_internal.h"

void stub_uuid_string(int phys, char *buf, size_t len)
{
    snprintf(buf, len, "GPU-7e55e7a0-0000-0000-0000-0000000000%02x", phys);
}

/* The physical card an entry names, or -1. */
static int entry_card(const char *e, int ndev)
{
    if (isdigit((unsigned char)e[0])) {
        char *end;
        long v = strtol(e, &end, 10);
        return *end == '\0' && v < ndev ? (int)v : -1;
    }
    if (strncmp(e, "GPU-", 4) != 0 || strlen(e) < 5)
        return -1;
    int found = -1;
    for (int i = 0; i < ndev; i++) {
        char u[64];
        stub_uuid_string(i, u, sizeof u);
        if (strncmp(u, e, strlen(e)) == 0) {
            if (found >= 0)
                return -1; /* ambiguous prefix */
            found = i;
        }
    }
    return found;
}

int stub_visible_cards(int ndev, int vis[])
{
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    if (!env) {
        for (int i = 0; i < ndev; i++)
            vis[i] = i;
        return ndev;
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", env);
    int n = 0;
    for (char *s = buf, *tok; (tok = strsep(&s, ",")) != NULL && n < ndev;) {
        while (isspace((unsigned char)*tok))
            tok++;
        int c = entry_card(tok, ndev);
        for (int k = 0; k < n && c >= 0; k++)
            if (vis[k] == c)
                c = -1;
        if (c < 0)
            break;
        vis[n++] = c;
    }
    return n;
}

/* What the kit's parent knows while it runs its cases (main.c, cases_mem.c, cases_sm.c); kit.c holds the helpers they share. */
#ifndef GPUTEST_KIT_H
#define GPUTEST_KIT_H

#include "gputest.h"

#define ENV_MAX 24

struct kit {
    char self[4096];      /* this program, re-run as workers */
    const char *lib;      /* the hook library under test */
    char tmp[256];        /* scratch: regions, logs */
    char uuid[64];        /* device 0 */
    int sms;
    unsigned total_mib;
    struct knobs k;
    int ncase;            /* cases started: names regions, card files and logs */
};

/* A worker's environment: "KEY=VALUE" strings. */
struct env {
    char *v[ENV_MAX + 1];
    char buf[ENV_MAX][768];
    int n;
};
void env_add(struct env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The environment of a process of container `tenant` of the current case: the library preloaded,
 * the case's shared region for that container, device 0's UUID as its only card. */
void env_container(struct kit *kit, struct env *e, int tenant);
/* Path of the log of the current case's worker `i`. */
void kit_log(const struct kit *kit, int i, char *out, size_t len);

void cases_memory(struct kit *kit);
void cases_remap(struct kit *kit);
void cases_sm(struct kit *kit);
void cases_overhead(struct kit *kit);

#endif

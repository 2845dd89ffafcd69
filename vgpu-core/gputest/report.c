/* The kit's one table: measured against expected, one row per check (see gputest.h). */
#include <stdio.h>

#include "gputest.h"

static int n_ok, n_miss, n_skip;

void report_header(void)
{
    printf("%-66s %-26s %-26s %s\n", "check", "measured", "expected", "result");
    printf("%-66s %-26s %-26s %s\n", "-----", "--------", "--------", "------");
    fflush(stdout);
}

void report_row(const char *what, const char *measured, const char *expected, int ok)
{
    const char *verdict = ok == REPORT_REFERENCE ? "ref" : ok > 0 ? "ok" : ok == 0 ? "MISS" : "skipped";
    printf("%-66s %-26s %-26s %s\n", what, measured, expected, verdict);
    fflush(stdout);
    if (ok > 0)
        n_ok++;
    else if (ok == 0)
        n_miss++;
    else
        n_skip++;
}

int report_misses(void)
{
    return n_miss;
}

void report_summary(void)
{
    printf("%d checks: %d ok, %d missed, %d skipped\n", n_ok + n_miss + n_skip, n_ok, n_miss, n_skip);
}

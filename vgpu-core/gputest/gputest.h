/* The GPU test kit: a parent that runs cases (cases.c, spawn.c, report.c) and workers (worker.c). */
#ifndef GPUTEST_H
#define GPUTEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* worker.c: `gputest worker MODE ARGS...`; prints one result line ("ok ..." or "error ..."). */
int worker_main(int argc, char **argv);

/* Knobs, from TESSERA_GPUTEST_* (see README). */
struct knobs {
    double warm_s, window_s;
    int windows;
    uint64_t spin_ns;     /* duration of each block of the measured kernel */
    unsigned mem_mib;     /* the memory cap shared by 4 processes */
    double tol;           /* points */
};

/* spawn.c: one worker process with its own environment, stdin and stdout on pipes. */
struct worker {
    pid_t pid;
    int in, out;          /* its stdin (ours to write/close), its stdout (ours to read) */
    char line[512];       /* its result line, once read */
};
/* Starts `self worker ARGS...` (through `unshare` when pidns). env: "KEY=VALUE" strings, NULL-ended, set
 * after every TESSERA_* and LD_PRELOAD variable of ours is removed; log: file for its stderr. */
int worker_start(struct worker *w, const char *self, char *const args[], char *const env[], const char *log,
                 int pidns);
/* Reads its result line (waits up to timeout_s); 0, or -1 with line set to "error ...". */
int worker_result(struct worker *w, double timeout_s);
/* Closes its stdin (workers stop at EOF) and reaps it. */
void worker_stop(struct worker *w);

/* report.c: the table. */
void report_header(void);
/* A row: ok = 1, miss = 0, skipped = -1 (the reason is the measured text), or a reference measurement
 * that other rows are judged against (counted as ok). */
#define REPORT_REFERENCE 2
void report_row(const char *what, const char *measured, const char *expected, int ok);
int report_misses(void);
void report_summary(void);

#endif

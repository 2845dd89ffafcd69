/* Worker processes of the kit's parent (see gputest.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cu.h"
#include "gputest.h"

extern char **environ;

#define MAX_ARGS 32

/* Child side: our environment minus TESSERA_* and LD_PRELOAD, plus env. */
static void child_env(char *const env[])
{
    for (int again = 1; again;) {
        again = 0;
        for (char **e = environ; *e; e++)
            if (strncmp(*e, "TESSERA_", 8) == 0 || strncmp(*e, "LD_PRELOAD=", 11) == 0) {
                char name[128];
                size_t n = strcspn(*e, "=");
                snprintf(name, sizeof name, "%.*s", (int)n, *e);
                if (strncmp(name, "TESSERA_GPUTEST_", 16) == 0 || strncmp(name, "TESSERA_STUB_", 13) == 0)
                    continue; /* the kit's knobs and the stub driver's configuration pass through */
                unsetenv(name);
                again = 1;
                break;
            }
    }
    for (int i = 0; env && env[i]; i++)
        putenv(env[i]);
}

static void child(int in, int out, const char *log, const char *self, char *const args[], char *const env[],
                  int pidns)
{
    int err = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || (err >= 0 && dup2(err, 2) < 0))
        _exit(127);
    child_env(env);
    char *argv[MAX_ARGS + 8];
    int n = 0;
    if (pidns) {
        argv[n++] = "unshare";
        argv[n++] = "--pid";
        argv[n++] = "--fork";
        argv[n++] = "--mount-proc";
    }
    argv[n++] = (char *)self;
    argv[n++] = "worker";
    for (int i = 0; args[i] && i < MAX_ARGS; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    execvp(argv[0], argv);
    printf("error cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

int worker_start(struct worker *w, const char *self, char *const args[], char *const env[], const char *log,
                 int pidns)
{
    int in[2], out[2];
    memset(w, 0, sizeof *w);
    w->pid = -1;
    if (pipe2(in, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]), close(in[1]);
        return -1;
    }
    fflush(stdout);
    w->pid = fork();
    if (w->pid == 0)
        child(in[0], out[1], log, self, args, env, pidns);
    close(in[0]), close(out[1]);
    w->in = in[1], w->out = out[0];
    if (w->pid < 0) {
        close(w->in), close(w->out);
        return -1;
    }
    return 0;
}

int worker_result(struct worker *w, double timeout_s)
{
    size_t n = 0;
    uint64_t end = gputest_now_ns() + (uint64_t)(timeout_s * 1e9);
    while (n + 1 < sizeof w->line) {
        uint64_t now = gputest_now_ns();
        struct pollfd p = {.fd = w->out, .events = POLLIN};
        if (now >= end || poll(&p, 1, (int)((end - now) / 1000000) + 1) <= 0) {
            snprintf(w->line, sizeof w->line, "error no result within %.0f s", timeout_s);
            return -1;
        }
        char c;
        if (read(w->out, &c, 1) != 1) {
            snprintf(w->line, sizeof w->line, "error the worker exited without a result");
            return -1;
        }
        if (c == '\n')
            break;
        w->line[n++] = c;
    }
    w->line[n] = '\0';
    return strncmp(w->line, "ok", 2) == 0 ? 0 : -1;
}

void worker_stop(struct worker *w)
{
    if (w->pid <= 0)
        return;
    close(w->in);
    close(w->out);
    for (int i = 0; i < 500; i++) { /* up to 5 s, then it is killed */
        if (waitpid(w->pid, NULL, WNOHANG) == w->pid) {
            w->pid = -1;
            return;
        }
        usleep(10000);
    }
    kill(w->pid, SIGKILL);
    waitpid(w->pid, NULL, 0);
    w->pid = -1;
}

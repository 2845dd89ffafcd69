/*
 * The first half of `kubelet-ns --join=PID -- KUBELET ...` (see join.go): runs before the Go
 * runtime, while the process has one thread. It enters the mount and PID namespaces of PID (a
 * real-runtime node's init), then forks: the child, the first process of this program inside the
 * node's PID namespace, returns and runs the Go program, which executes the kubelet; the parent
 * stays outside, passes SIGTERM, SIGINT, SIGHUP and SIGQUIT on to the child and ends as the child
 * ends (exit status, or the same signal), so the harness can treat it as the kubelet. The child
 * dies with the parent (PR_SET_PDEATHSIG), as the kubelet dies with the harness.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t child;

static void forward(int sig)
{
    if (child > 0)
        kill(child, sig);
}

static int open_ns(const char *pid, const char *ns)
{
    char path[128];
    snprintf(path, sizeof path, "/proc/%s/ns/%s", pid, ns);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "kubelet-ns: --join: open %s: %s\n", path, strerror(errno));
        _exit(1);
    }
    return fd;
}

__attribute__((constructor)) static void kubelet_ns_join(int argc, char **argv)
{
    if (argc < 2 || strncmp(argv[1], "--join=", 7) != 0)
        return;
    const char *pid = argv[1] + 7;
    /* Both before either setns: once in the node's mount namespace, /proc is its own. */
    int mnt = open_ns(pid, "mnt"), pidns = open_ns(pid, "pid");
    if (setns(pidns, CLONE_NEWPID) != 0 || setns(mnt, CLONE_NEWNS) != 0) {
        fprintf(stderr, "kubelet-ns: --join=%s: setns: %s\n", pid, strerror(errno));
        _exit(1);
    }
    close(mnt);
    close(pidns);
    child = fork();
    if (child < 0) {
        fprintf(stderr, "kubelet-ns: --join: fork: %s\n", strerror(errno));
        _exit(1);
    }
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* The parent is in an ancestor namespace, where getppid() shows 0; the node's init
         * (1) has adopted this process when the parent is gone already. */
        if (getppid() != 0)
            _exit(1);
        return;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    int st;
    while (waitpid(child, &st, 0) < 0)
        if (errno != EINTR)
            _exit(1);
    if (WIFSIGNALED(st)) {
        signal(WTERMSIG(st), SIG_DFL);
        kill(getpid(), WTERMSIG(st));
    }
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
}

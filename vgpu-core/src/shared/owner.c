#define _GNU_SOURCE
#include "owner.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/num.h"

/* The marker is process-local state: one pipe read end per program image. */
static int marker_fd = -1;
static uint64_t marker_ino;

struct proc_stat {
    char state;            /* field 3: R, S, D, Z, X, ... */
    uint64_t start_time;   /* field 22 */
};

/* Reads /proc/<pid>/stat; false when it cannot be read. */
static bool read_stat(int pid, struct proc_stat *out)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    /* The command name may contain spaces and parentheses: fields count from the last ')'. */
    char *s = strrchr(buf, ')');
    if (!s || s[1] != ' ' || !s[2])
        return false;
    out->state = s[2];
    int field = 3;
    for (s += 2; *s && field < 22; s++)
        if (*s == ' ')
            field++;
    uint64_t v;
    if (!tessera_parse_u64(s, &v))
        return false;
    out->start_time = v;
    return true;
}

/* The inode of the pipe that /proc/<pid>/fd/<fd> names; 0 when it is not a pipe, -1 on ENOENT. */
static int64_t fd_pipe_ino(int pid, int fd, int *err)
{
    char path[64], link[64];
    if (pid == 0)
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    else
        snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n < 0) {
        *err = errno;
        return -1;
    }
    link[n] = '\0';
    uint64_t ino;
    *err = 0;
    const char *end = strncmp(link, "pipe:[", 6) == 0 ? tessera_parse_u64(link + 6, &ino) : 0;
    return end && *end == ']' && ino <= INT64_MAX ? (int64_t)ino : 0;
}

static void make_marker(void)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return;
    close(p[1]);
    /* A high descriptor number keeps it out of the way of programs that expect low ones. */
    int fd = fcntl(p[0], F_DUPFD_CLOEXEC, 512);
    if (fd >= 0) {
        close(p[0]);
    } else {
        fd = p[0];
    }
    int err;
    int64_t ino = fd_pipe_ino(0, fd, &err);
    if (ino <= 0) {
        close(fd);
        return;
    }
    marker_fd = fd;
    marker_ino = (uint64_t)ino;
}

void owner_self(struct owner_id *out)
{
    if (marker_fd < 0)
        make_marker();
    struct proc_stat st = {0};
    out->pid = getpid();
    out->start_time = read_stat(out->pid, &st) ? st.start_time : 0;
    out->marker_fd = marker_fd;
    out->marker_ino = marker_fd >= 0 ? marker_ino : 0;
}

void owner_after_fork(void)
{
    if (marker_fd >= 0)
        close(marker_fd);
    marker_fd = -1;
    marker_ino = 0;
}

bool owner_alive(const struct owner_id *id)
{
    if (id->pid <= 0)
        return false;
    if (kill(id->pid, 0) != 0 && errno == ESRCH)
        return false;
    struct proc_stat st;
    if (!read_stat(id->pid, &st))
        return true; /* unreadable /proc (hidepid): never reclaim memory of a process that may live */
    if (st.state == 'Z' || st.state == 'X' || st.start_time != id->start_time)
        return false;
    if (id->marker_ino == 0)
        return true;
    int err;
    int64_t ino = fd_pipe_ino(id->pid, id->marker_fd, &err);
    if (ino < 0)
        return err != ENOENT; /* ENOENT: the marker was closed by exec; EACCES: another user, keep */
    return (uint64_t)ino == id->marker_ino;
}

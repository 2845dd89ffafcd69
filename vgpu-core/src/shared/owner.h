/*
 * Is the program image that registered a region slot still running? A pid alone is not enough:
 * pids are reused (checked with the start time), an exited but unreaped process (zombie) still has
 * its pid and start time, and a process that exec()s keeps both while its CUDA memory is gone.
 * Each registration therefore leaves an exec marker: a close-on-exec pipe whose inode is recorded
 * in the slot. exec closes it, so another process that no longer finds it knows the image is gone.
 */
#ifndef TESSERA_OWNER_H
#define TESSERA_OWNER_H

#include <stdbool.h>
#include <stdint.h>

struct owner_id {
    int32_t pid;
    uint64_t start_time;      /* /proc/<pid>/stat field 22; 0 when unreadable */
    int32_t marker_fd;        /* -1 when no marker could be made */
    uint64_t marker_ino;      /* pipe inode of the marker; 0 when none */
};

/* This process's identity; creates the exec marker on first use (again after owner_after_fork). */
void owner_self(struct owner_id *out);
/* Drops the parent's marker in a fork child (the child makes its own). */
void owner_after_fork(void);
/*
 * False only when the owner is certainly gone: no such pid, a zombie, another start time, or its
 * exec marker closed. Whatever cannot be read (hidepid, another user) counts as alive.
 */
bool owner_alive(const struct owner_id *id);

#endif

#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int tessera_log_level = TLOG_WARN;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int tessera_log_parse_level(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

void tessera_log_write(int level, const char *fmt, ...)
{
    /* One write(2) per line so lines from concurrent processes do not interleave. */
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "[tessera %d] %s: ", (int)getpid(), level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    size_t len = (size_t)n + ((size_t)m < sizeof buf - (size_t)n - 1 ? (size_t)m : sizeof buf - (size_t)n - 2);
    buf[len++] = '\n';
    ssize_t w = write(2, buf, len);
    (void)w;
}

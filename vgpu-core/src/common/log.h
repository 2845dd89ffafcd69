/* Levelled logging to stderr. The level check is an inline load so disabled levels cost nothing. */
#ifndef TESSERA_LOG_H
#define TESSERA_LOG_H

enum tessera_log_level { TLOG_ERROR = 0, TLOG_WARN = 1, TLOG_INFO = 2, TLOG_DEBUG = 3 };

extern int tessera_log_level;

void tessera_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parses error|warn|info|debug; returns -1 for anything else. */
int tessera_log_parse_level(const char *s);

#define TLOG(level, ...)                                                   \
    do {                                                                   \
        if (__builtin_expect((level) <= tessera_log_level, 0))             \
            tessera_log_write((level), __VA_ARGS__);                       \
    } while (0)

#endif

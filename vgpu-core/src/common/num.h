#ifndef TESSERA_COMMON_NUM_H
#define TESSERA_COMMON_NUM_H

#include <stdint.h>

/*
 * The decimal digits at s as an unsigned 64-bit number: returns the first character after them, or NULL
 * when s does not start with a digit or the number does not fit. Written out rather than strtoull or
 * sscanf: glibc 2.38's headers turn those into __isoc23_* symbols under _GNU_SOURCE, and the library must
 * load on glibc 2.17 whatever machine built it (tests/check_glibc.sh).
 */
static inline const char *tessera_parse_u64(const char *s, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return 0;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *out = v;
    return s;
}

#endif

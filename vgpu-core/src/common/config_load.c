/*
 * Where the limits come from. In a Tessera container the node agent bind-mounts the limits file
 * read-only at TESSERA_AGENT_LIMITS_FILE, and that file is the whole truth: the container's
 * environment is the tenant's (the kubelet puts the pod's variables after the device plugin's), so
 * no variable may raise a limit, move the region, name another file or allow per-process
 * accounting there. Only where that file does not exist (a process outside a Tessera container,
 * development, the test suite) do the environment and TESSERA_LIMITS_FILE apply.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

#define MAX_FILE (64 * 1024)  /* the agent's file is a few hundred bytes; more is not a limits file */
#define MAX_LINE 2048         /* a 16-card UUID list is ~1.6 KB */

/* The contract's keys, in the order the environment is read (the log level first, so it applies). */
static const char *const keys[] = {"TESSERA_LOG_LEVEL", "TESSERA_VISIBLE_UUIDS", "TESSERA_MEMORY_LIMIT_MIB",
                                   "TESSERA_SM_LIMIT", "TESSERA_QOS", "TESSERA_SHARED_REGION",
                                   "TESSERA_CONTEXT_RESERVE_MIB", "TESSERA_DEBUG_PRIVATE_REGION"};
enum { K_UUIDS = 1, K_MEM = 2, K_SM = 3, K_DEBUG = 7, NKEYS = 8 };
/* Read from the environment in development; ignored (and named if set) when the agent's file exists. */
static const char *const dev_only[] = {"TESSERA_LIMITS_FILE", "TESSERA_REAL_CUDA_LIB", "TESSERA_REAL_NVML_LIB"};

/* What one file said, per key: its value (for naming environment overrides) and whether it was given. */
struct file_values {
    bool set[NKEYS];
    char value[NKEYS][MAX_LINE];
};

/* ~80 KB, used once per process (under start-up's pthread_once): static, off the caller's stack. */
static char file_buf[MAX_FILE];
static struct file_values file_seen;

static void defaults(struct tessera_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->qos = QOS_FIXED_SHARE;
    for (int i = 0; i < TESSERA_MAX_CARDS; i++)
        cfg->sm_limit[i] = 100;
}

static int key_index(const char *key)
{
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(key, keys[i]) == 0)
            return i;
    return -1;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Trims a line (the parser's own copy) in place. */
static char *trim_copy(char *s)
{
    while (is_space(*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && is_space(e[-1]))
        *--e = '\0';
    return s;
}

static void poison(struct tessera_config *cfg)
{
    cfg->poisoned = true;
}

/*
 * One line of a limits file: returns false to stop reading (the file cannot be trusted further).
 * *versioned says whether version=1 has been seen; it must come before any setting.
 */
static bool parse_line(struct tessera_config *cfg, const char *origin, int lineno, char *line, bool *versioned,
                       struct file_values *seen)
{
    char *s = trim_copy(line);
    if (s[0] == '\0' || s[0] == '#')
        return true;
    char *eq = strchr(s, '=');
    if (!eq) {
        TLOG(TLOG_ERROR, "limits file %s line %d: not KEY=VALUE: \"%s\"", origin, lineno, s);
        poison(cfg);
        return true;
    }
    *eq = '\0';
    char *key = trim_copy(s), *val = trim_copy(eq + 1);
    if (strcmp(key, "version") == 0) {
        if (*versioned || strcmp(val, "1") != 0) {
            TLOG(TLOG_ERROR, "limits file %s line %d: %s version=\"%s\"", origin, lineno,
                 *versioned ? "a second" : "unsupported", val);
            poison(cfg);
            return false;
        }
        *versioned = true;
        return true;
    }
    if (!*versioned) {
        TLOG(TLOG_ERROR, "limits file %s line %d: expected version=1 first, got %s", origin, lineno, key);
        poison(cfg);
        return false;
    }
    int k = key_index(key);
    if (k >= 0 && seen->set[k]) {
        /* Two values for one key: which one the writer meant is unknowable, so neither is used. */
        TLOG(TLOG_ERROR, "limits file %s line %d: %s given twice: failing closed", origin, lineno, key);
        poison(cfg);
        return true;
    }
    if (k >= 0) {
        seen->set[k] = true;
        strcpy(seen->value[k], val); /* shorter than the line it came from */
    }
    tessera_config_apply(cfg, key, val); /* logs and poisons an unknown key or a malformed value */
    return true;
}

/* A limits file's text. Lines are split on '\n' only; a NUL byte or an overlong line poisons it. */
static void parse_text(struct tessera_config *cfg, const char *origin, const char *text, size_t len,
                       struct file_values *seen)
{
    cfg->any_setting = true;
    if (memchr(text, '\0', len)) {
        TLOG(TLOG_ERROR, "limits file %s contains a NUL byte: failing closed", origin);
        poison(cfg);
        return;
    }
    bool versioned = false;
    int lineno = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t n = (nl ? (size_t)(nl - text) : len) - pos;
        char line[MAX_LINE];
        lineno++;
        if (n >= sizeof line) {
            TLOG(TLOG_ERROR, "limits file %s line %d: longer than %d bytes: failing closed", origin, lineno,
                 MAX_LINE - 1);
            poison(cfg);
            return;
        }
        memcpy(line, text + pos, n);
        line[n] = '\0';
        pos += n + 1;
        if (!parse_line(cfg, origin, lineno, line, &versioned, seen))
            return;
    }
    if (!versioned) {
        TLOG(TLOG_ERROR, "limits file %s: no version=1 line", origin);
        poison(cfg);
    }
}

/* Region default and the cross-list check, once every source has been read. */
static void finish(struct tessera_config *cfg)
{
    if (cfg->region_path[0] == '\0')
        strcpy(cfg->region_path, TESSERA_AGENT_REGION);
    int counts[] = {cfg->uuid_count, cfg->mem_count, cfg->sm_count};
    int cards = 0;
    for (int i = 0; i < 3; i++) {
        if (counts[i] > 1 && cards > 1 && counts[i] != cards) {
            TLOG(TLOG_ERROR, "malformed limits: lists name %d and %d cards", cards, counts[i]);
            poison(cfg);
        }
        if (counts[i] > cards)
            cards = counts[i];
    }
}

/* The agent always writes these; a file without one was cut short or is not the agent's. */
static void require_agent_keys(struct tessera_config *cfg, const struct file_values *seen)
{
    static const int required[] = {K_UUIDS, K_MEM, K_SM};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!seen->set[required[i]]) {
            TLOG(TLOG_ERROR, "the node agent's limits file lacks %s: failing closed", keys[required[i]]);
            poison(cfg);
        }
}

/*
 * Reads a whole file (at most MAX_FILE bytes) into buf. Returns its length, or -1 with errno set
 * (EFBIG when larger). open/read only: no stdio, no fstat (GLIBC_2.33).
 */
static ssize_t read_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len == cap) {
            close(fd);
            errno = EFBIG;
            return -1;
        }
    }
    close(fd);
    return (ssize_t)len;
}

/* Names, in one warning, the variables that would have changed something had the file not existed. */
static void warn_ignored_env(const struct file_values *seen)
{
    char names[512] = "";
    size_t used = 0;
    for (size_t i = 0; i < NKEYS + sizeof dev_only / sizeof dev_only[0]; i++) {
        const char *name = i < NKEYS ? keys[i] : dev_only[i - NKEYS];
        const char *v = getenv(name);
        if (!v)
            continue;
        /* The device plugin also hands the same values over as variables: those are not overrides. */
        if (i < NKEYS && seen->set[i] && strcmp(v, seen->value[i]) == 0)
            continue;
        if (i == NKEYS && strcmp(v, TESSERA_AGENT_LIMITS_FILE) == 0)
            continue;
        size_t n = strlen(name);
        if (used + n + 2 >= sizeof names)
            break;
        if (used)
            names[used++] = ' ';
        memcpy(names + used, name, n + 1);
        used += n;
    }
    if (used)
        TLOG(TLOG_WARN, "limits from %s (the node agent's); ignored environment overrides: %s",
             TESSERA_AGENT_LIMITS_FILE, names);
}

/* The agent's file as read (len >= 0), or the errno that kept it from being read (len < 0). */
static void load_agent(struct tessera_config *cfg, const char *text, ssize_t len, int read_errno,
                       struct file_values *seen)
{
    defaults(cfg);
    memset(seen, 0, sizeof *seen);
    cfg->from_agent = cfg->any_setting = true;
    if (len < 0) {
        /* It exists but cannot be read: the environment is no fallback, it is the tenant's. */
        TLOG(TLOG_ERROR, "cannot read the node agent's limits file %s: %s: failing closed", TESSERA_AGENT_LIMITS_FILE,
             strerror(read_errno));
        poison(cfg);
    } else {
        parse_text(cfg, TESSERA_AGENT_LIMITS_FILE, text, (size_t)len, seen);
        if (!cfg->poisoned)
            require_agent_keys(cfg, seen);
    }
    finish(cfg);
}

bool tessera_config_from_agent_text(struct tessera_config *cfg, const char *text, size_t len)
{
    load_agent(cfg, text, (ssize_t)len, 0, &file_seen);
    return !cfg->poisoned;
}

/* Outside a Tessera container: the environment, then the file TESSERA_LIMITS_FILE names. */
static void load_dev(struct tessera_config *cfg)
{
    defaults(cfg);
    for (int i = 0; i < NKEYS; i++) {
        const char *v = getenv(keys[i]);
        if (!v)
            continue;
        if (i == K_DEBUG) { /* as before: "1" turns it on, anything else leaves it off; not a limit */
            cfg->debug_private_region = strcmp(v, "1") == 0;
            continue;
        }
        tessera_config_apply(cfg, keys[i], v);
    }
    const char *cuda = getenv("TESSERA_REAL_CUDA_LIB"), *nvml = getenv("TESSERA_REAL_NVML_LIB");
    if (cuda && strlen(cuda) < TESSERA_PATH_LEN)
        strcpy(cfg->real_cuda_lib, cuda);
    if (nvml && strlen(nvml) < TESSERA_PATH_LEN)
        strcpy(cfg->real_nvml_lib, nvml);
    const char *file = getenv("TESSERA_LIMITS_FILE");
    if (!file)
        return;
    ssize_t len = read_file(file, file_buf, sizeof file_buf);
    if (len < 0) {
        TLOG(TLOG_ERROR, "malformed TESSERA_LIMITS_FILE=\"%s\": cannot read: %s", file, strerror(errno));
        cfg->poisoned = cfg->any_setting = true;
        return;
    }
    memset(&file_seen, 0, sizeof file_seen);
    parse_text(cfg, file, file_buf, (size_t)len, &file_seen);
}

void tessera_config_load(struct tessera_config *cfg)
{
    ssize_t len = read_file(TESSERA_AGENT_LIMITS_FILE, file_buf, sizeof file_buf);
    int e = errno;
    /* Any answer but "no such file" means the agent put something there: it is not our call to ignore it. */
    if (len >= 0 || (e != ENOENT && e != ENOTDIR)) {
        load_agent(cfg, file_buf, len, e, &file_seen);
        warn_ignored_env(&file_seen);
        return;
    }
    load_dev(cfg);
    finish(cfg);
}

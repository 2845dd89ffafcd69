/*
 * Randomised test of the limits-file parser (src/common/config_load.c) against an independent model
 * of the contract. Valid agent files are mutated (bytes changed, inserted, deleted; lines deleted,
 * duplicated, swapped, inserted from a dictionary; truncation; NUL bytes; overlong lines) with a
 * fixed list of seeds, so a failure reproduces. For every input the parser must not crash (the
 * sanitizer pass runs this too) and must agree with the model exactly: the same inputs poisoned,
 * and for the others the same limits on every card. A limit the file states can therefore never be
 * dropped silently: either it applies, or the whole file fails closed. Every value of the contract
 * is also fed to tessera_config_apply directly (the environment's path) and checked the same way.
 */
#include <ctype.h>
#include <fcntl.h>
#include <unistd.h>

#include "common.h"
#include "common/config.h"
#include "common/log.h"

#define NKEYS 8
static const char *const keys[NKEYS] = {"TESSERA_LOG_LEVEL", "TESSERA_VISIBLE_UUIDS", "TESSERA_MEMORY_LIMIT_MIB",
                                        "TESSERA_SM_LIMIT", "TESSERA_QOS", "TESSERA_SHARED_REGION",
                                        "TESSERA_CONTEXT_RESERVE_MIB", "TESSERA_DEBUG_PRIVATE_REGION"};
enum { K_LOG, K_UUIDS, K_MEM, K_SM, K_QOS, K_REGION, K_CTX, K_DEBUG };

/* ---- the model: what the contract (vgpu-core/README.md) says a file means ---- */

struct model {
    bool poisoned;
    int uuid_count, mem_count, sm_count;
    char uuids[TESSERA_MAX_CARDS][TESSERA_UUID_LEN];
    uint64_t mem[TESSERA_MAX_CARDS];
    unsigned sm[TESSERA_MAX_CARDS];
    int qos;
    char region[TESSERA_PATH_LEN];
    uint64_t ctx;
    bool debug;
};

static bool space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '\n';
}

/* Copies [s, s+n) trimmed into out (cap bytes); false when it does not fit. */
static bool trimmed(const char *s, size_t n, char *out, size_t cap)
{
    while (n && space(*s))
        s++, n--;
    while (n && space(s[n - 1]))
        n--;
    if (n >= cap)
        return false;
    memcpy(out, s, n);
    out[n] = '\0';
    return true;
}

/* Decimal digits only, at most max. */
static bool number(const char *s, uint64_t max, uint64_t *out)
{
    if (!*s)
        return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (v > max)
        return false;
    *out = v;
    return true;
}

/* A comma list of the key's items; false when malformed. */
static bool model_list(struct model *m, int key, const char *value)
{
    if (strlen(value) >= TESSERA_MAX_CARDS * TESSERA_UUID_LEN)
        return false;
    char items[TESSERA_MAX_CARDS][TESSERA_MAX_CARDS * TESSERA_UUID_LEN];
    int n = 0;
    for (const char *p = value;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (n == TESSERA_MAX_CARDS || !trimmed(p, len, items[n], sizeof items[n]) || !items[n][0])
            return false;
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    for (int i = 0; i < n; i++) {
        uint64_t v;
        if (key == K_UUIDS) {
            if (strlen(items[i]) >= TESSERA_UUID_LEN)
                return false;
            strcpy(m->uuids[i], items[i]);
        } else if (key == K_MEM) {
            if (!number(items[i], 1ULL << 30, &v))
                return false;
            m->mem[i] = v << 20;
        } else {
            if (!number(items[i], 100, &v))
                return false;
            m->sm[i] = v == 0 ? 100 : (unsigned)v;
        }
    }
    *(key == K_UUIDS ? &m->uuid_count : key == K_MEM ? &m->mem_count : &m->sm_count) = n;
    return true;
}

static bool model_value(struct model *m, int key, const char *v)
{
    uint64_t n;
    switch (key) {
    case K_UUIDS:
    case K_MEM:
    case K_SM:
        return model_list(m, key, v);
    case K_QOS:
        if (!strcmp(v, "best-effort"))
            m->qos = QOS_BEST_EFFORT;
        else if (!strcmp(v, "fixed-share"))
            m->qos = QOS_FIXED_SHARE;
        else if (!strcmp(v, "burst-share"))
            m->qos = QOS_BURST_SHARE;
        else
            return false;
        return true;
    case K_REGION:
        if (v[0] != '/' || strlen(v) >= TESSERA_PATH_LEN)
            return false;
        strcpy(m->region, v);
        return true;
    case K_CTX:
        if (!number(v, 1ULL << 30, &n))
            return false;
        m->ctx = n << 20;
        return true;
    case K_DEBUG:
        if (strcmp(v, "0") && strcmp(v, "1"))
            return false;
        m->debug = v[0] == '1';
        return true;
    default:
        return !strcmp(v, "error") || !strcmp(v, "warn") || !strcmp(v, "info") || !strcmp(v, "debug");
    }
}

static void model_defaults(struct model *m)
{
    memset(m, 0, sizeof *m);
    m->qos = QOS_FIXED_SHARE;
    for (int i = 0; i < TESSERA_MAX_CARDS; i++)
        m->sm[i] = 100;
}

/* The agent's file: version=1 first, KEY=VALUE lines, each key once, the card list and both limits given. */
static void model_file(struct model *m, const char *text, size_t len)
{
    model_defaults(m);
    m->poisoned = true;
    if (memchr(text, '\0', len))
        return;
    bool versioned = false, seen[NKEYS] = {0}, bad = false;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t n = (nl ? (size_t)(nl - text) : len) - pos;
        const char *line = text + pos;
        pos += n + 1;
        if (n >= 2048) /* the contract's longest line is a 16-card UUID list */
            return;
        char s[2048], key[2048], val[2048];
        trimmed(line, n, s, sizeof s);
        if (!s[0] || s[0] == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            bad = true;
            continue;
        }
        trimmed(s, (size_t)(eq - s), key, sizeof key);
        trimmed(eq + 1, strlen(eq + 1), val, sizeof val);
        if (!strcmp(key, "version")) {
            if (versioned || strcmp(val, "1"))
                return;
            versioned = true;
            continue;
        }
        if (!versioned)
            return;
        int k = -1;
        for (int i = 0; i < NKEYS; i++)
            if (!strcmp(key, keys[i]))
                k = i;
        if (k < 0 || seen[k]) {
            bad = true;
            continue;
        }
        seen[k] = true;
        if (!model_value(m, k, val))
            bad = true;
    }
    if (bad || !versioned || !seen[K_UUIDS] || !seen[K_MEM] || !seen[K_SM])
        return;
    int counts[] = {m->uuid_count, m->mem_count, m->sm_count}, cards = 0;
    for (int i = 0; i < 3; i++)
        if (counts[i] > 1) {
            if (cards > 1 && counts[i] != cards)
                return;
            cards = counts[i];
        }
    if (!m->region[0])
        strcpy(m->region, TESSERA_AGENT_REGION);
    m->poisoned = false;
}

/* ---- comparing the parser with the model ---- */

static int mismatches;
static FILE *out; /* the real stderr: the parser's own logs go to /dev/null while fuzzing */

static void report(const char *what, const char *text, size_t len, const char *why)
{
    if (++mismatches > 5)
        return;
    fprintf(out, "FAIL %s: %s; input (%zu bytes): \"", what, why, len);
    for (size_t i = 0; i < len && i < 400; i++)
        fprintf(out, isprint((unsigned char)text[i]) ? "%c" : "\\x%02x", (unsigned char)text[i]);
    fprintf(out, "\"\n");
    fflush(out);
}

static bool same_limits(const struct tessera_config *c, const struct model *m, char *why, size_t cap)
{
    for (int card = 0; card < TESSERA_MAX_CARDS + 2; card++) {
        uint64_t want_mem = m->mem_count == 1 ? m->mem[0] : card < m->mem_count ? m->mem[card] : 0;
        unsigned want_sm = m->sm_count == 1 ? m->sm[0] : card < m->sm_count ? m->sm[card] : 100;
        const char *want_uuid = card < m->uuid_count ? m->uuids[card] : NULL, *uuid = tessera_config_uuid(c, card);
        if (tessera_config_mem_limit(c, card) != want_mem || tessera_config_sm_limit(c, card) != want_sm ||
            (want_uuid == NULL) != (uuid == NULL) || (uuid && strcmp(uuid, want_uuid))) {
            snprintf(why, cap, "card %d: memory %llu/%llu, SM %u/%u, uuid %s/%s", card,
                     (unsigned long long)tessera_config_mem_limit(c, card), (unsigned long long)want_mem,
                     tessera_config_sm_limit(c, card), want_sm, uuid ? uuid : "-", want_uuid ? want_uuid : "-");
            return false;
        }
    }
    if ((int)c->qos != m->qos || c->context_reserve != m->ctx || c->debug_private_region != m->debug ||
        strcmp(c->region_path, m->region)) {
        snprintf(why, cap, "qos %d/%d, context reserve %llu/%llu, debug %d/%d, region %s/%s", c->qos, m->qos,
                 (unsigned long long)c->context_reserve, (unsigned long long)m->ctx, c->debug_private_region,
                 m->debug, c->region_path, m->region);
        return false;
    }
    return true;
}

static int files_checked, files_poisoned;

static void check_file(const char *text, size_t len)
{
    struct tessera_config cfg;
    struct model m;
    char why[1200];
    tessera_log_level = -1; /* a file may set it: only this parse's logs are silenced */
    bool ok = tessera_config_from_agent_text(&cfg, text, len);
    model_file(&m, text, len);
    files_checked++;
    files_poisoned += !ok;
    if (ok != !cfg.poisoned)
        report("file", text, len, "return value disagrees with the poisoned flag");
    else if (cfg.poisoned != m.poisoned)
        report("file", text, len, cfg.poisoned ? "parser refused what the contract accepts"
                                               : "parser accepted what the contract refuses (a limit may be lost)");
    else if (!cfg.poisoned && (cfg.mem_count < 1 || cfg.sm_count < 1 || cfg.uuid_count < 1))
        report("file", text, len, "accepted without the card list or a limit");
    else if (!cfg.poisoned && !same_limits(&cfg, &m, why, sizeof why))
        report("file", text, len, why);
}

/* ---- inputs ---- */

static uint64_t rng;

static uint64_t next(void) /* xorshift64*: reproducible from the seed */
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ULL;
}

static size_t below(size_t n)
{
    return n ? (size_t)(next() % n) : 0;
}

static const char *const seeds[] = {
    "version=1\nTESSERA_VISIBLE_UUIDS=GPU-7e55e7a0-0000-0000-0000-000000000000\nTESSERA_MEMORY_LIMIT_MIB=1024\n"
    "TESSERA_SM_LIMIT=30\nTESSERA_QOS=fixed-share\nTESSERA_SHARED_REGION=/var/run/tessera/region\n"
    "TESSERA_LOG_LEVEL=warn\n",
    "version=1\nTESSERA_VISIBLE_UUIDS=GPU-a,GPU-b\nTESSERA_MEMORY_LIMIT_MIB=256,512\nTESSERA_SM_LIMIT=0,50\n"
    "TESSERA_QOS=burst-share\nTESSERA_SHARED_REGION=/var/run/tessera/region\nTESSERA_LOG_LEVEL=info\n",
    "# written by the node agent\r\n\r\nversion = 1\r\nTESSERA_VISIBLE_UUIDS = MIG-1 \r\n"
    "TESSERA_MEMORY_LIMIT_MIB= 0\r\nTESSERA_SM_LIMIT =100\r\nTESSERA_QOS=best-effort\r\n"
    "TESSERA_DEBUG_PRIVATE_REGION=0\r\nTESSERA_CONTEXT_RESERVE_MIB=518",
    "version=1\nTESSERA_VISIBLE_UUIDS=G0,G1,G2,G3,G4,G5,G6,G7,G8,G9,G10,G11,G12,G13,G14,G15\n"
    "TESSERA_MEMORY_LIMIT_MIB=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16\nTESSERA_SM_LIMIT=5\n"
    "TESSERA_DEBUG_PRIVATE_REGION=1\n",
};

static const char *const dictionary[] = {
    "version=1", "version=2", "TESSERA_MEMORY_LIMIT_MIB=0", "TESSERA_MEMORY_LIMIT_MIB=1073741824",
    "TESSERA_MEMORY_LIMIT_MIB=1073741825", "TESSERA_SM_LIMIT=100", "TESSERA_SM_LIMIT=101", "TESSERA_QOS=best-effort",
    "TESSERA_DEBUG_PRIVATE_REGION=1", "TESSERA_LIMITS_FILE=/dev/null", "TESSERA_SHARED_REGION=/tmp/own",
    "TESSERA_SHARED_REGION=relative", "TESSERA_VISIBLE_UUIDS=GPU-x,GPU-y,GPU-z", "TESSERA_CONTEXT_RESERVE_MIB=0",
    "TESSERA_LOG_LEVEL=debug", "=", "#", "# TESSERA_MEMORY_LIMIT_MIB=0", "KEY", "TESSERA_MEMORY_LIMIT_MIB",
    "TESSERA_MEMORY_LIMIT_MIB=18446744073709551617", "TESSERA_SM_LIMIT=+5", "TESSERA_SM_LIMIT=-0",
    "TESSERA_MEMORY_LIMIT_MIB=1024 512", "TESSERA_VISIBLE_UUIDS=,", "tessera_sm_limit=10",
};

static const char alphabet[] = {'\0', '\n', '\r', '\t', ' ', '=', ',', '#', '0', '1', '5', '9', 'a', '-', '+',
                                '/', 'x', (char)0xff, 'T', '_'};

#define CAP 16384
#define LINE_W 2304 /* room for an overlong line (the parser takes < 2048) */

/* Byte edits and line edits, 1 to 4 of them; returns the new length. */
static size_t mutate(char *buf, size_t len)
{
    for (int edits = 1 + (int)below(4); edits > 0; edits--) {
        size_t at = below(len + 1);
        switch (below(9)) {
        case 0: /* replace a byte */
            if (len)
                buf[below(len)] = alphabet[below(sizeof alphabet)];
            break;
        case 1: /* insert a byte */
            if (len + 1 < CAP) {
                memmove(buf + at + 1, buf + at, len - at);
                buf[at] = alphabet[below(sizeof alphabet)];
                len++;
            }
            break;
        case 2: { /* delete a run of bytes */
            size_t n = 1 + below(8);
            if (at + n > len)
                n = len - at;
            memmove(buf + at, buf + at + n, len - at - n);
            len -= n;
            break;
        }
        case 3: /* truncate */
            len = at;
            break;
        default: { /* line edits: split into lines, edit, join */
            char lines[64][LINE_W];
            int count = 0;
            for (size_t pos = 0; pos < len && count < 64;) {
                const char *nl = memchr(buf + pos, '\n', len - pos);
                size_t n = (nl ? (size_t)(nl - buf) : len) - pos;
                if (n >= sizeof lines[0])
                    n = sizeof lines[0] - 1;
                memcpy(lines[count], buf + pos, n);
                lines[count++][n] = '\0';
                pos = nl ? (size_t)(nl - buf) + 1 : len;
            }
            int i = (int)below((size_t)count + 1), j = (int)below((size_t)count + 1);
            size_t kind = below(5);
            if (kind == 0 && count > 0 && i < count) { /* delete */
                memmove(lines[i], lines[i + 1], (size_t)(count - i - 1) * sizeof lines[0]);
                count--;
            } else if (kind == 1 && count > 0 && count < 64 && i < count) { /* duplicate */
                memmove(lines[i + 1], lines[i], (size_t)(count - i) * sizeof lines[0]);
                count++;
            } else if (kind == 2 && i < count && j < count && i != j) { /* swap */
                char t[LINE_W];
                memcpy(t, lines[i], LINE_W);
                memmove(lines[i], lines[j], LINE_W);
                memcpy(lines[j], t, LINE_W);
            } else if (kind == 3 && count < 64) { /* insert from the dictionary */
                memmove(lines[i + 1], lines[i], (size_t)(count - i) * sizeof lines[0]);
                strcpy(lines[i], dictionary[below(sizeof dictionary / sizeof dictionary[0])]);
                count++;
            } else if (kind == 4 && count < 64) { /* an overlong line */
                memmove(lines[i + 1], lines[i], (size_t)(count - i) * sizeof lines[0]);
                size_t n = 2040 + below(16) < sizeof lines[0] ? 2040 + below(16) : sizeof lines[0] - 1;
                memset(lines[i], 'a', n);
                memcpy(lines[i], "TESSERA_VISIBLE_UUIDS=", 22);
                lines[i][n] = '\0';
                count++;
            }
            len = 0;
            for (int k = 0; k < count; k++) {
                size_t n = strlen(lines[k]);
                if (len + n + 1 >= CAP)
                    break;
                memcpy(buf + len, lines[k], n);
                len += n;
                buf[len++] = '\n';
            }
        }
        }
    }
    return len;
}

/* Every value of the contract, valid or not, straight into tessera_config_apply (the environment's path). */
static void check_values(void)
{
    static const char *const values[] = {"", " ", "0", "1", "100", "101", "1024", "01024", " 7 ", "1,2", "1,,2",
                                         ",", "1, 2 ,3", "1 2", "+1", "-1", "0x10", "1073741824", "1073741825",
                                         "18446744073709551616", "best-effort", "fixed-share", "burst-share",
                                         "Fixed-share", "/var/run/tessera/region", "relative", "warn", "debug",
                                         "GPU-a,GPU-b", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16",
                                         "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "\t50\t", "5\v"};
    for (int k = 0; k < NKEYS; k++)
        for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
            struct tessera_config cfg;
            struct model m;
            char line[256], why[1200];
            memset(&cfg, 0, sizeof cfg);
            cfg.qos = QOS_FIXED_SHARE;
            for (int i = 0; i < TESSERA_MAX_CARDS; i++)
                cfg.sm_limit[i] = 100;
            model_defaults(&m);
            tessera_log_level = -1;
            bool ok = tessera_config_apply(&cfg, keys[k], values[v]);
            bool want = model_value(&m, k, values[v]);
            snprintf(line, sizeof line, "%s=%s", keys[k], values[v]);
            if (ok != want)
                report("value", line, strlen(line), ok ? "accepted a malformed value" : "refused a valid value");
            else if (ok && k != K_LOG && !same_limits(&cfg, &m, why, sizeof why))
                report("value", line, strlen(line), why);
        }
}

int main(void)
{
    static const uint64_t rng_seeds[] = {1, 2, 3, 42, 0x5eed, 0xdecafbad, 0x7e55e7a0, 20240601};
    const int rounds = 2500; /* per seed and seed file: 8 x 4 x 2,500 = 80,000 mutated files */
    int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
    out = fdopen(saved, "w");
    dup2(devnull, 2); /* the parser logs every malformed line it meets */
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++)
        check_file(seeds[s], strlen(seeds[s])); /* the seeds themselves parse */
    int seeds_poisoned = files_poisoned;
    for (size_t r = 0; r < sizeof rng_seeds / sizeof rng_seeds[0]; r++) {
        rng = rng_seeds[r];
        for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++)
            for (int i = 0; i < rounds; i++) {
                static char buf[CAP];
                size_t len = strlen(seeds[s]);
                memcpy(buf, seeds[s], len);
                len = mutate(buf, len);
                check_file(buf, len);
            }
    }
    check_values();
    fflush(out);
    dup2(saved, 2);
    CASE("randomised limits files and values against the contract's model");
    CHECK(seeds_poisoned == 0, "%d of the valid seed files were refused", seeds_poisoned);
    CHECK(mismatches == 0, "%d inputs where parser and model disagree (first 5 above)", mismatches);
    CHECK(files_poisoned > files_checked / 20 && files_poisoned < files_checked - files_checked / 20,
          "the mutations exercise both outcomes: %d of %d files refused", files_poisoned, files_checked);
    fprintf(stderr, "unit_config_fuzz: %d files (%d refused), every value of every key\n", files_checked,
            files_poisoned);
    return tc_summary("unit_config_fuzz");
}

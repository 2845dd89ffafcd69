/*
 * Modules and functions of the stub driver, with the duration model of its kernels:
 *   - cuModuleLoad(path): a module of "sleep_<N>us" functions, whose every block runs N µs;
 *   - cuModuleLoadData(PTX text): a module of the text's `.entry` functions; each block of such a kernel runs
 *     for its first parameter, read as a u64 count of nanoseconds (the contract of the GPU test kit's
 *     spin kernel, vgpu-core/gputest/kernels.h). Text without an `.entry` is refused as a real driver
 *     refuses an image it cannot parse.
 * Functions live as long as their module; modules loaded from a path live as long as the process.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stub_exec.h"
#include "stub_internal.h"

#define MAX_FUNCS 64

struct func {
    uint64_t block_ns;
    int param_timed;   /* a PTX kernel: its first parameter is each block's duration in ns */
};

struct module {
    char *ptx;         /* NULL: the sleep_<N>us module of cuModuleLoad */
    unsigned nfuncs;
    struct func funcs[MAX_FUNCS];
};

static struct module file_module;
static pthread_mutex_t mod_mu = PTHREAD_MUTEX_INITIALIZER;

static CUresult need_ctx(void)
{
    if (!stub_initialised())
        return CUDA_ERROR_NOT_INITIALIZED;
    return stub_current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

API CUresult cuModuleLoad(CUmodule *m, const char *path)
{
    (void)path;
    CUresult rc = need_ctx();
    if (rc == CUDA_SUCCESS)
        *m = (CUmodule)&file_module;
    return rc;
}

API CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
    CUresult rc = need_ctx();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!m || !image)
        return CUDA_ERROR_INVALID_VALUE;
    if (!strstr(image, ".entry"))
        return CUDA_ERROR_INVALID_IMAGE;
    struct module *mod = calloc(1, sizeof *mod);
    if (!mod || !(mod->ptx = strdup(image))) {
        free(mod);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *m = (CUmodule)mod;
    return CUDA_SUCCESS;
}

API CUresult cuModuleUnload(CUmodule m)
{
    struct module *mod = (struct module *)m;
    if (!mod)
        return CUDA_ERROR_INVALID_HANDLE;
    if (mod != &file_module) {
        free(mod->ptx);
        free(mod);
    }
    return CUDA_SUCCESS;
}

/* Whether the PTX text declares `.entry name` (followed by its parameter list). */
static int has_entry(const char *ptx, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(ptx, ".entry"); p; p = strstr(p + 1, ".entry")) {
        const char *q = p + 6;
        while (isspace((unsigned char)*q))
            q++;
        if (strncmp(q, name, n) == 0 && (q[n] == '(' || isspace((unsigned char)q[n])))
            return 1;
    }
    return 0;
}

/* A sleep_<N>us name: N µs per block. */
static int sleep_name(const char *name, uint64_t *block_ns)
{
    unsigned long us;
    char tail[8];
    if (sscanf(name, "sleep_%lu%7s", &us, tail) != 2 || strcmp(tail, "us") != 0)
        return 0;
    *block_ns = us * 1000ULL;
    return 1;
}

API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    struct module *mod = (struct module *)m;
    CUresult rc = need_ctx();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!mod || !f || !name)
        return CUDA_ERROR_INVALID_VALUE;
    struct func fn = {0};
    if (mod->ptx ? !has_entry(mod->ptx, name) : !sleep_name(name, &fn.block_ns))
        return CUDA_ERROR_NOT_FOUND;
    fn.param_timed = mod->ptx != NULL;
    pthread_mutex_lock(&mod_mu);
    struct func *slot = mod->nfuncs < MAX_FUNCS ? &mod->funcs[mod->nfuncs++] : NULL;
    if (slot)
        *slot = fn;
    pthread_mutex_unlock(&mod_mu);
    if (!slot)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *f = (CUfunction)slot;
    return CUDA_SUCCESS;
}

uint64_t stub_block_ns(CUfunction f, void **params)
{
    const struct func *fn = (const struct func *)f;
    if (!fn->param_timed)
        return fn->block_ns;
    return params && params[0] ? *(const uint64_t *)params[0] : 0;
}

/* Streams, capture, graphs and events of the stub driver (see stub_exec.h). */
#define _GNU_SOURCE
#include "stub_exec.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stub_card.h"
#include "stub_internal.h"

#define MAX_NODES 64

struct node {
    CUfunction f;
    uint64_t blocks, block_ns;
};

struct graph {
    unsigned n;
    struct node nodes[MAX_NODES];
};

/* A stream belongs to the context it was created in; while capturing, launches go into g. */
struct stream {
    struct ctx *ctx;
    int capturing;
    struct graph *g;
};

struct event {
    int dev, idx, recorded, timing;
};

/* The special handles (NULL, legacy, per-thread) are never created here and never capture. */
static struct stream *stream_of(CUstream s)
{
    return (uintptr_t)s > (uintptr_t)CU_STREAM_PER_THREAD ? (struct stream *)s : NULL;
}

int stub_capture(CUstream s, CUfunction f, uint64_t blocks, uint64_t block_ns)
{
    struct stream *st = stream_of(s);
    if (!st || !st->capturing)
        return 0;
    if (st->g->n < MAX_NODES)
        st->g->nodes[st->g->n++] = (struct node){f, blocks, block_ns};
    return 1;
}

CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
    (void)flags;
    if (!stub_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    struct stream *st = calloc(1, sizeof *st);
    if (!st)
        return CUDA_ERROR_OUT_OF_MEMORY;
    st->ctx = stub_current();
    *s = (CUstream)st;
    return CUDA_SUCCESS;
}

/* NULL and the per-thread/legacy handles mean the current context. */
CUresult cuStreamGetCtx(CUstream s, CUcontext *out)
{
    struct stream *st = stream_of(s);
    struct ctx *c = st ? st->ctx : stub_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream s)
{
    struct stream *st = stream_of(s);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    free(st->g);
    free(st);
    return CUDA_SUCCESS;
}

CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    (void)mode;
    struct stream *st = stream_of(s);
    if (!st || st->capturing)
        return CUDA_ERROR_INVALID_VALUE;
    st->g = calloc(1, sizeof *st->g);
    if (!st->g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    st->capturing = 1;
    return CUDA_SUCCESS;
}

CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    struct stream *st = stream_of(s);
    if (!st || !st->capturing)
        return CUDA_ERROR_INVALID_VALUE;
    st->capturing = 0;
    *g = (CUgraph)st->g;
    st->g = NULL;
    return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    struct stream *st = stream_of(s);
    *status = st && st->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
    (void)flags;
    struct graph *x = malloc(sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(x, g, sizeof *x);
    *e = (CUgraphExec)x;
    return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec e, CUstream s)
{
    const struct graph *x = (const struct graph *)e;
    if (!x)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < x->n; i++) {
        CUresult rc = stub_launch(x->nodes[i].f, x->nodes[i].blocks, x->nodes[i].block_ns, s);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return CUDA_SUCCESS;
}

CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s)
{
    return cuGraphLaunch(e, s ? s : CU_STREAM_PER_THREAD);
}

CUresult cuGraphExecDestroy(CUgraphExec e)
{
    free(e);
    return CUDA_SUCCESS;
}

CUresult cuGraphCreate(CUgraph *g, unsigned int flags)
{
    (void)flags;
    struct graph *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *g = (CUgraph)x;
    return CUDA_SUCCESS;
}

/* Memory-node charges are the hook library's business; the stub frees the graph's nodes. */
CUresult cuGraphDestroy(CUgraph g)
{
    free(g);
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *e, unsigned int flags)
{
    int dev = stub_current_dev();
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct event *ev = calloc(1, sizeof *ev);
    if (!ev)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ev->idx = sim_event_alloc();
    if (ev->idx < 0) {
        free(ev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ev->dev = dev;
    ev->timing = !(flags & CU_EVENT_DISABLE_TIMING);
    *e = (CUevent)ev;
    return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent e, CUstream s)
{
    struct event *ev = (struct event *)e;
    struct stream *st = stream_of(s);
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    if (st && st->capturing)
        return CUDA_ERROR_NOT_SUPPORTED; /* the library must never record into a capture */
    sim_event_record(ev->dev, ev->idx);
    ev->recorded = 1;
    return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent e)
{
    struct event *ev = (struct event *)e;
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    return !ev->recorded || sim_event_time(ev->dev, ev->idx) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent e)
{
    while (cuEventQuery(e) == CUDA_ERROR_NOT_READY) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    struct event *x = (struct event *)a, *y = (struct event *)b;
    if (!x || !y || !x->recorded || !y->recorded || !x->timing || !y->timing || x->dev != y->dev)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t ta = sim_event_time(x->dev, x->idx), tb = sim_event_time(y->dev, y->idx);
    if (!ta || !tb)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)(((double)tb - (double)ta) / 1e6);
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent e)
{
    struct event *ev = (struct event *)e;
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    sim_event_free(ev->idx);
    free(ev);
    return CUDA_SUCCESS;
}

/*
 * Streams (each in the context that made it), stream capture, graphs and events of the stub
 * driver: enough of the real API for the
 * hook library's launch timing and for tests that replay CUDA graphs. Internal to the stub.
 */
#ifndef TESSERA_STUB_EXEC_H
#define TESSERA_STUB_EXEC_H

#include <stdint.h>

#include "tessera/cuda_abi.h"

#define STUB_API __attribute__((visibility("default")))

/* From stub_cuda.c: runs (or captures) a launch of blocks x block_ns; the current context's card. */
CUresult stub_launch(CUfunction f, uint64_t blocks, uint64_t block_ns, CUstream s);
int stub_current_dev(void);
/* Records the launch into s when s is capturing; returns 1 when it did. */
int stub_capture(CUstream s, CUfunction f, uint64_t blocks, uint64_t block_ns);
/* From stub_module.c: how long each block of a launch of f with these parameters runs. */
uint64_t stub_block_ns(CUfunction f, void **params);

STUB_API CUresult cuModuleLoad(CUmodule *m, const char *path);
STUB_API CUresult cuModuleLoadData(CUmodule *m, const void *image);
STUB_API CUresult cuModuleUnload(CUmodule m);
STUB_API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);

STUB_API CUresult cuStreamCreate(CUstream *s, unsigned int flags);
STUB_API CUresult cuStreamDestroy_v2(CUstream s);
STUB_API CUresult cuStreamGetCtx(CUstream s, CUcontext *c);
STUB_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode);
STUB_API CUresult cuStreamEndCapture(CUstream s, CUgraph *g);
STUB_API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st);
STUB_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags);
STUB_API CUresult cuGraphLaunch(CUgraphExec e, CUstream s);
STUB_API CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s);
STUB_API CUresult cuGraphExecDestroy(CUgraphExec e);
STUB_API CUresult cuGraphCreate(CUgraph *g, unsigned int flags);
STUB_API CUresult cuGraphDestroy(CUgraph g);
STUB_API CUresult cuEventCreate(CUevent *e, unsigned int flags);
STUB_API CUresult cuEventRecord(CUevent e, CUstream s);
STUB_API CUresult cuEventQuery(CUevent e);
STUB_API CUresult cuEventSynchronize(CUevent e);
STUB_API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b);
STUB_API CUresult cuEventDestroy_v2(CUevent e);

#define STUB_EXEC_PROCS(P)                                                                      \
    P(cuStreamCreate) P(cuStreamDestroy_v2) P(cuStreamBeginCapture_v2) P(cuStreamEndCapture)    \
    P(cuStreamIsCapturing) P(cuGraphInstantiateWithFlags) P(cuGraphLaunch) P(cuGraphLaunch_ptsz) \
    P(cuGraphExecDestroy) P(cuGraphCreate) P(cuGraphDestroy) P(cuStreamGetCtx) P(cuEventCreate) P(cuEventRecord) P(cuEventQuery)   \
    P(cuEventSynchronize) P(cuEventElapsedTime) P(cuEventDestroy_v2)

#endif

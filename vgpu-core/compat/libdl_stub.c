/*
 * Link-time stand-in for libdl.so.2, never loaded (see libpthread_stub.c for why): the dl
 * functions vgpu-core calls, recorded as libdl.so.2's at the oldest version glibc gave them.
 * dlopen, dlmopen, dlsym and dlvsym are not here: vgpu-core defines its own (src/intercept/) and
 * finds the real ones itself (src/common/elf_next.c).
 */
void dlerror(void);
void dladdr(void);

void dlerror(void) {}
void dladdr(void) {}

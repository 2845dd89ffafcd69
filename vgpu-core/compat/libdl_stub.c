/*
 * Link-time stand-in for libdl.so.2, never loaded (see libpthread_stub.c for why): the dl
 * functions vgpu-core calls, recorded as libdl.so.2's at the oldest version glibc gave them.
 */
void dlopen(void);
void dlerror(void);
void dlvsym(void);
void dladdr(void);

void dlopen(void) {}
void dlerror(void) {}
void dlvsym(void) {}
void dladdr(void) {}

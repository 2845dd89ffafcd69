/*
 * Link-time stand-in for libpthread.so.0, never loaded: linking against it records these symbols
 * as libpthread.so.0's (GLIBC_2.2.5 / 2.12 on x86-64, 2.17 on aarch64), which is where glibc
 * before 2.34 defines them. glibc 2.34+ keeps libpthread.so.0 with those versions and finds the
 * functions in libc.so.6, as it does for every program linked before 2.34. Linking against the
 * system's libc instead would record GLIBC_2.34 versions that older glibc cannot satisfy.
 * The bodies are never run; the signatures do not matter to the linker.
 */
void pthread_create(void);
void pthread_once(void);
void pthread_mutex_trylock(void);
void pthread_mutexattr_init(void);
void pthread_mutexattr_destroy(void);
void pthread_mutexattr_setpshared(void);
void pthread_mutexattr_setrobust(void);
void pthread_mutex_consistent(void);

void pthread_create(void) {}
void pthread_once(void) {}
void pthread_mutex_trylock(void) {}
void pthread_mutexattr_init(void) {}
void pthread_mutexattr_destroy(void) {}
void pthread_mutexattr_setpshared(void) {}
void pthread_mutexattr_setrobust(void) {}
void pthread_mutex_consistent(void) {}

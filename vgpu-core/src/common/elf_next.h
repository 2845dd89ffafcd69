/* Symbol lookup without dlsym, for the functions this library interposes on the loader itself. */
#ifndef TESSERA_ELF_NEXT_H
#define TESSERA_ELF_NEXT_H

/*
 * The default-version definition of function `name` in the first object loaded after the one that
 * contains `self` (what dlsym(RTLD_NEXT, name) would find from there), else in any other object;
 * NULL when there is none.
 */
void *tessera_elf_next(const void *self, const char *name);

#endif

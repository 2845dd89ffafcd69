/* For t_dlsym_next: found only through librunpath.so's RUNPATH (see runpath.c). */
int tessera_leaf(void)
{
    return 7;
}

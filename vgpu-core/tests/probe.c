/* Preloaded ahead of libvgpu.so by t_dlsym_next: a symbol only reachable with exact RTLD_NEXT. */
int tessera_probe(void)
{
    return 42;
}

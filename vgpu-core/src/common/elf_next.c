/*
 * Finds a function the way RTLD_NEXT would from this library, without calling dlsym or dlvsym:
 * this library interposes both (tenants could otherwise fetch the real driver through them), so
 * the first real dlvsym has to be read from the dynamic symbol tables of the objects loaded after
 * this one. It runs before anything else, even inside a sanitizer runtime's own start-up, so it is
 * uninstrumented and calls no libc function a sanitizer intercepts (dl_iterate_phdr is not).
 */
#define _GNU_SOURCE
#include "elf_next.h"

#include <elf.h>
#include <link.h>
#include <stdint.h>

#include "symbols.h"

struct search {
    const void *self;    /* an address inside this library */
    const char *name;
    int after_self;      /* 1 once this library was passed in load order */
    int skip_order;      /* second pass: any object but this library */
    void *found;
};

TESSERA_EARLY static int same(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

TESSERA_EARLY static uint32_t gnu_hash(const char *s)
{
    uint32_t h = 5381;
    for (; *s; s++)
        h = h * 33 + (unsigned char)*s;
    return h;
}

TESSERA_EARLY static int contains(const struct dl_phdr_info *info, const void *addr)
{
    uintptr_t a = (uintptr_t)addr;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && a >= lo && a < lo + ph->p_memsz)
            return 1;
    }
    return 0;
}

/* The loader relocates these entries in place on most targets, not on all: accept both. */
TESSERA_EARLY static uintptr_t dyn_addr(const struct dl_phdr_info *info, uintptr_t p)
{
    return p < info->dlpi_addr ? p + info->dlpi_addr : p;
}

/* Accepts a defined function, and of several versions of one name only the default one. */
TESSERA_EARLY static void *accept(const struct dl_phdr_info *info, const ElfW(Sym) *sym, const char *strtab,
                                  const ElfW(Half) *versym, uint32_t idx, const char *name)
{
    if (sym->st_shndx == SHN_UNDEF || (sym->st_info & 0xf) != STT_FUNC || sym->st_value == 0)
        return 0;
    if (versym && (versym[idx] & 0x8000))
        return 0;
    return same(strtab + sym->st_name, name) ? (void *)(info->dlpi_addr + sym->st_value) : 0;
}

TESSERA_EARLY static void *lookup(const struct dl_phdr_info *info, const char *name)
{
    const ElfW(Dyn) *dyn = 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn)
        return 0;
    const ElfW(Sym) *symtab = 0;
    const char *strtab = 0;
    const uint32_t *gnu = 0, *sysv = 0;
    const ElfW(Half) *versym = 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        uintptr_t p = dyn_addr(info, dyn->d_un.d_ptr);
        if (dyn->d_tag == DT_SYMTAB)
            symtab = (const ElfW(Sym) *)p;
        else if (dyn->d_tag == DT_STRTAB)
            strtab = (const char *)p;
        else if (dyn->d_tag == DT_GNU_HASH)
            gnu = (const uint32_t *)p;
        else if (dyn->d_tag == DT_HASH)
            sysv = (const uint32_t *)p;
        else if (dyn->d_tag == DT_VERSYM)
            versym = (const ElfW(Half) *)p;
    }
    if (!symtab || !strtab)
        return 0;
    if (gnu) {
        uint32_t nbuckets = gnu[0], symoffset = gnu[1], bloom_size = gnu[2];
        if (nbuckets == 0)
            return 0;
        const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(gnu + 4) + bloom_size);
        const uint32_t *chain = buckets + nbuckets;
        uint32_t h = gnu_hash(name);
        uint32_t idx = buckets[h % nbuckets];
        if (idx < symoffset)
            return 0;
        for (;; idx++) {
            uint32_t h2 = chain[idx - symoffset];
            if ((h | 1) == (h2 | 1)) {
                void *f = accept(info, &symtab[idx], strtab, versym, idx, name);
                if (f)
                    return f;
            }
            if (h2 & 1)
                return 0;
        }
    }
    if (sysv) /* nchain = number of symbols */
        for (uint32_t idx = 0; idx < sysv[1]; idx++) {
            void *f = accept(info, &symtab[idx], strtab, versym, idx, name);
            if (f)
                return f;
        }
    return 0;
}

TESSERA_EARLY static int visit(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct search *s = arg;
    if (contains(info, s->self)) {
        s->after_self = 1;
        return 0;
    }
    if (!s->after_self && !s->skip_order)
        return 0;
    s->found = lookup(info, s->name);
    return s->found != 0;
}

TESSERA_EARLY void *tessera_elf_next(const void *self, const char *name)
{
    struct search s = {self, name, 0, 0, 0};
    dl_iterate_phdr(visit, &s);
    if (!s.found) { /* not after us (an unusual load order): anywhere but here */
        s.skip_order = 1;
        dl_iterate_phdr(visit, &s);
    }
    return s.found;
}

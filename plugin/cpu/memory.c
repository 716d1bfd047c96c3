/* The CPU backend's allocator, at the bottom of its files (docs/architecture.md):
 * float32 scratch buffers that grow and are never shrunk, and the mapped
 * memory of the plan's half tensors and of oneDNN's workspaces (given back
 * to the system whole, so a layer's peak does not stay in the heap). */
#define _DEFAULT_SOURCE 1 /* MAP_ANONYMOUS (POSIX from 2024 only) */
#include "cpu.h"

#include <stdlib.h>
#include <sys/mman.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

/* glibc raises its mmap threshold to the size of every mapped block freed
 * (up to 32 MiB), so freeing darknet's float32 arrays for the plan (up to
 * 16 MiB each on the embedded detector at batch 16) sends every later
 * allocation below that size, the data loader's batches and the per-pass
 * buffers among them, to the heap and the threads' arenas, where they
 * fragment and stay: on the embedded detector at the AVX2 path the peak was
 * 144 MiB with it and 108 pinned, against FP32's 120. So the threshold is
 * pinned at its default, 128 KiB, once per process, unless the user chose
 * one (MALLOC_MMAP_THRESHOLD_, or the glibc.malloc tunables). */
void amp_cpu_pin_mmap_threshold(void)
{
#ifdef __GLIBC__
    static int done;
    if (done) return;
    done = 1;
    if (getenv("MALLOC_MMAP_THRESHOLD_") || getenv("GLIBC_TUNABLES")) return;
    (void)mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
}

float *amp_cpu_reserve(amp_buffer *b, size_t n)
{
    if (b->n < n) {
        float *p = realloc(b->data, n * sizeof(float));
        if (!p) abort();
        b->data = p;
        b->n = n;
    }
    return b->data;
}

void *amp_cpu_map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void amp_cpu_unmap(void *p, size_t bytes)
{
    if (p) munmap(p, bytes);
}

int amp_cpu_grow_mapped(void **p, size_t *bytes, size_t need)
{
    if (*bytes >= need) return 0;
    void *q = amp_cpu_map(need);
    if (!q) return 1;
    amp_cpu_unmap(*p, *bytes);
    *p = q;
    *bytes = need;
    return 0;
}

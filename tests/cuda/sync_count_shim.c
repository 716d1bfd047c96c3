/* LD_PRELOAD shim for the host-synchronisation test: counts the CUDA runtime
 * calls that block the host (device/stream/event synchronisation, cudaMemcpy,
 * cudaFree) and forwards each to the real runtime. At exit it writes
 * "name count" lines to $SYNC_COUNT_OUT; sync_count_total() gives the total so
 * far to a program that asks (train_driver --time). It also counts
 * cudaMallocHost on two "#" lines, outside the total: every request, and
 * those of 1 KiB or more (the yolo staging's are; the backend's few-byte
 * scaler mirror is not); and cudaHostAlloc's requests of 1 KiB or more (a
 * network's input and truth, patch 0026). With SYNC_SHIM_REFUSE_PINNED set
 * it refuses every request of 1 KiB or more as a host short of page-locked
 * memory would, and grants the small ones as such a host still would
 * (gpu_train.sh pinned). */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned long n_device, n_stream, n_event, n_memcpy, n_free;

#define FORWARD(name, ...)                                                  \
    static __typeof__(&name) real_;                                         \
    if (!real_) real_ = (__typeof__(&name))dlsym(RTLD_NEXT, #name);         \
    return real_(__VA_ARGS__)

cudaError_t cudaDeviceSynchronize(void)
{
    n_device++;
    FORWARD(cudaDeviceSynchronize);
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    n_stream++;
    FORWARD(cudaStreamSynchronize, s);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    n_event++;
    FORWARD(cudaEventSynchronize, e);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    n_memcpy++;
    FORWARD(cudaMemcpy, dst, src, count, kind);
}

cudaError_t cudaFree(void *p)
{
    n_free++;
    FORWARD(cudaFree, p);
}

static unsigned long n_hostalloc, n_hostalloc_large;

cudaError_t cudaMallocHost(void **p, size_t size)
{
    n_hostalloc++;
    if (size >= 1024) {
        n_hostalloc_large++;
        if (getenv("SYNC_SHIM_REFUSE_PINNED")) {
            *p = NULL;
            return cudaErrorMemoryAllocation;
        }
    }
    FORWARD(cudaMallocHost, p, size);
}

static unsigned long n_hostalloc2_large;

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
    if (size >= 1024) {
        n_hostalloc2_large++;
        if (getenv("SYNC_SHIM_REFUSE_PINNED")) {
            *p = NULL;
            return cudaErrorMemoryAllocation;
        }
    }
    FORWARD(cudaHostAlloc, p, size, flags);
}

/* The total so far, for programs that look for it (train_driver --time). */
__attribute__((visibility("default"))) long sync_count_total(void)
{
    return (long)(n_device + n_stream + n_event + n_memcpy + n_free);
}

__attribute__((destructor)) static void report(void)
{
    const char *path = getenv("SYNC_COUNT_OUT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) return;
    fprintf(f, "cudaDeviceSynchronize %lu\ncudaStreamSynchronize %lu\ncudaEventSynchronize %lu\n"
               "cudaMemcpy %lu\ncudaFree %lu\n#cudaMallocHost %lu\n#cudaMallocHost-1KiB %lu\n"
               "#cudaHostAlloc-1KiB %lu\n",
            n_device, n_stream, n_event, n_memcpy, n_free, n_hostalloc, n_hostalloc_large,
            n_hostalloc2_large);
    fclose(f);
}

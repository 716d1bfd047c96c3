/* LD_PRELOAD shim: a CUDA device made of host memory, so that a CUDA build of
 * darknet can build and train networks for the CPU (gpu_index -1) on a
 * machine without a GPU.
 *
 * Why it is enough, and honest: a CUDA build of darknet allocates device
 * arrays for every layer it builds, a CPU network's included, and frees and
 * re-allocates them on resize; a CPU network never reads them, never launches
 * a kernel on them for its results and never copies them back. So device
 * memory here is calloc'ed host memory, host-to-device copies are memmove,
 * kernel launches (cuda_make_array's zero fill) do nothing, and selecting a
 * device fails for a negative index as the real runtime does, so that darknet
 * code calling cudaSetDevice(-1) fails here too.
 *
 * Anything that would compute on the device is refused loudly rather than
 * faked: a device-to-host copy (a CPU network never pulls) aborts with a
 * message, and cuDNN and cuBLAS handles are the real libraries', whose
 * creation fails without a GPU. The CPU-network tests of a CUDA build run
 * under it where no GPU is present (tests/run_darknet.sh); tests of the GPU
 * path are skipped instead.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void announce(void)
{
    static int said;
    if (said++) return;
    fprintf(stderr, "fake device: no GPU here; device memory is host memory and kernels do "
                    "not run (CPU networks of a CUDA build only)\n");
}

cudaError_t cudaMalloc(void **p, size_t n)
{
    announce();
    *p = calloc(1, n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDefault) {
        fprintf(stderr, "fake device: a copy from the device (kind %d): this program computes on "
                        "the GPU, which the fake device cannot do\n", (int)kind);
        abort();
    }
    memmove(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int n)
{
    return n < 0 ? cudaErrorInvalidDevice : cudaSuccess;
}

cudaError_t cudaGetDevice(int *n)
{
    *n = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 0; /* programs that look for a GPU find none */
    return cudaErrorNoDevice;
}

cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}

cudaError_t cudaPeekAtLastError(void)
{
    return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shared,
                             cudaStream_t stream)
{
    (void)f, (void)grid, (void)block, (void)args, (void)shared, (void)stream;
    return cudaSuccess;
}

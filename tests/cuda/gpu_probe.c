/* Exit 0 when a CUDA device is usable, 77 (CTest's skip code) when not, with
 * the reason on stdout. A darknet built with GPU allocates device memory while
 * it builds layers, even with gpu_index = -1, so it cannot run without one. */
#include <cuda_runtime_api.h>
#include <stdio.h>

int main(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        printf("SKIP: no usable CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    printf("CUDA devices: %d\n", n);
    return 0;
}

/* A half layer's forward overflow, looked for on the device once a loss came
 * out non-finite (backend.h's nonfinite_output; a healthy step never runs
 * this): the number of inf/NaN elements of a float32 array and the largest
 * finite magnitude among the others. Each element goes through grad_math.h's
 * amp_overflow_add, the host's own arithmetic (unit.grad_math); threads merge
 * with amp_overflow_merge in shared memory, blocks with atomics (a count, and
 * the magnitude's bits: for non-negative floats their order is the bits').
 */
#include "amp_cuda.h"
#include "cuda_check.h"
#include "math/grad_math.h"

#define SCAN_THREADS 256

static __global__ void overflow_scan_kernel(const float *x, size_t n, amp_overflow_scan *out)
{
    __shared__ amp_overflow_scan part[SCAN_THREADS];
    amp_overflow_scan s = {0, 0.0f};
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        amp_overflow_add(&s, x[i]);
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned int half = SCAN_THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) amp_overflow_merge(&part[threadIdx.x], &part[threadIdx.x + half]);
        __syncthreads();
    }
    if (threadIdx.x == 0 && (part[0].nonfinite || part[0].max_finite > 0.0f)) {
        atomicAdd(&out->nonfinite, part[0].nonfinite);
        atomicMax((unsigned int *)&out->max_finite, __float_as_uint(part[0].max_finite));
    }
}

extern "C" amp_status amp_cuda_overflow_scan(const float *x, size_t n, amp_overflow_scan *out,
                                             cudaStream_t stream, char *err, size_t errlen)
{
    if (!n) return AMP_OK;
    size_t blocks = (n + SCAN_THREADS - 1) / SCAN_THREADS;
    if (blocks > 1024) blocks = 1024;
    overflow_scan_kernel<<<(unsigned int)blocks, SCAN_THREADS, 0, stream>>>(x, n, out);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

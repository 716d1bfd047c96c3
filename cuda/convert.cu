/* float32 <-> float16/bfloat16 arrays on the device, with half_format.h's bit-exact
 * functions (the host's, tested against F16C and AVX512-BF16), not the CUDA
 * intrinsics: host emulation and GPU then agree bit for bit, NaN payloads
 * included. Grid-stride loops; the dtype is a kernel argument (data, not
 * #ifdefs).
 */
#include "amp_cuda.h"
#include "cuda_check.h"
#include "math/half_format.h"

static __global__ void to_half_kernel(const float *x, uint16_t *h, size_t n, int bf16)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        h[i] = bf16 ? amp_f32_to_bf16(x[i]) : amp_f32_to_f16(x[i]);
}

static __global__ void from_half_kernel(const uint16_t *h, float *x, size_t n, int bf16, int add,
                                        float factor)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = bf16 ? amp_bf16_to_f32(h[i]) : amp_f16_to_f32(h[i]);
        if (factor != 1.0f) v = __fmul_rn(v, factor); /* else NaN payloads kept */
        x[i] = add ? __fadd_rn(x[i], v) : v;
    }
}

/* x rounded to the half dtype and back, in place (add = 0), or added to y
 * (add = 1): the rounding point of a half GEMM's result written in float32
 * first, so that cuBLAS reduces in float32 whatever its split-K does. */
static __global__ void round_kernel(const float *x, float *y, size_t n, int bf16, int add)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = bf16 ? amp_bf16_to_f32(amp_f32_to_bf16(x[i]))
                       : amp_f16_to_f32(amp_f32_to_f16(x[i]));
        y[i] = add ? __fadd_rn(y[i], v) : v;
    }
}

static unsigned int blocks_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned int)(b > 65535 ? 65535 : b);
}

extern "C" amp_status amp_cuda_to_half(const float *x, uint16_t *h, size_t n, amp_dtype dtype,
                                       cudaStream_t stream, char *err, size_t errlen)
{
    if (!n) return AMP_OK;
    to_half_kernel<<<blocks_for(n), 256, 0, stream>>>(x, h, n, dtype == AMP_DTYPE_BFLOAT16);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

extern "C" amp_status amp_cuda_from_half(const uint16_t *h, float *x, size_t n, amp_dtype dtype,
                                         cudaStream_t stream, char *err, size_t errlen)
{
    if (!n) return AMP_OK;
    from_half_kernel<<<blocks_for(n), 256, 0, stream>>>(h, x, n, dtype == AMP_DTYPE_BFLOAT16, 0,
                                                        1.0f);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

extern "C" amp_status amp_cuda_add_half(const uint16_t *h, float *y, size_t n, amp_dtype dtype,
                                        cudaStream_t stream, char *err, size_t errlen)
{
    if (!n) return AMP_OK;
    from_half_kernel<<<blocks_for(n), 256, 0, stream>>>(h, y, n, dtype == AMP_DTYPE_BFLOAT16, 1,
                                                        1.0f);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

extern "C" amp_status amp_cuda_add_half_scaled(const uint16_t *h, float *y, size_t n,
                                               float factor, amp_dtype dtype,
                                               cudaStream_t stream, char *err, size_t errlen)
{
    if (!n) return AMP_OK;
    from_half_kernel<<<blocks_for(n), 256, 0, stream>>>(h, y, n, dtype == AMP_DTYPE_BFLOAT16, 1,
                                                        factor);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

extern "C" amp_status amp_cuda_round(float *x, size_t n, amp_dtype dtype, cudaStream_t stream,
                                     char *err, size_t errlen)
{
    if (!n) return AMP_OK;
    round_kernel<<<blocks_for(n), 256, 0, stream>>>(x, x, n, dtype == AMP_DTYPE_BFLOAT16, 0);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

extern "C" amp_status amp_cuda_add_rounded(const float *x, float *y, size_t n, amp_dtype dtype,
                                           cudaStream_t stream, char *err, size_t errlen)
{
    if (!n) return AMP_OK;
    round_kernel<<<blocks_for(n), 256, 0, stream>>>(x, y, n, dtype == AMP_DTYPE_BFLOAT16, 1);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

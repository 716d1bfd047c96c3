/* A half convolution's weight-gradient operands (half_conv.c): its input
 * as im2col columns and its incoming gradient by channel, so that the sum
 * over a chunk of images and output positions is one GEMM's K dimension.
 * The layout is wgrad_index.h's (host-tested). Both kernels move 16-bit
 * values and never convert them: float16 and bfloat16 alike, and padding is
 * +0 in both.
 */
#include "amp_cuda.h"
#include "cuda_check.h"

static unsigned int blocks_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned int)(b > 65535 ? 65535 : b);
}

static __global__ void im2col_kernel(const uint16_t *x, amp_im2col_dims d, uint16_t *col)
{
    const size_t n = amp_im2col_elems(d);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const long long s = amp_im2col_src(d, i);
        col[i] = s < 0 ? (uint16_t)0 : x[s];
    }
}

static __global__ void to_cnhw_kernel(const uint16_t *x, int nb, int k, size_t hw, uint16_t *y)
{
    const size_t n = (size_t)nb * k * hw;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = x[amp_cnhw_src(nb, k, hw, i)];
}

extern "C" amp_status amp_cuda_im2col_half(const uint16_t *x, amp_im2col_dims d, uint16_t *col,
                                           cudaStream_t stream, char *err, size_t errlen)
{
    const size_t n = amp_im2col_elems(d);
    if (!n) return AMP_OK;
    im2col_kernel<<<blocks_for(n), 256, 0, stream>>>(x, d, col);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

extern "C" amp_status amp_cuda_to_cnhw_half(const uint16_t *x, int nb, int k, size_t hw,
                                            uint16_t *y, cudaStream_t stream, char *err,
                                            size_t errlen)
{
    const size_t n = (size_t)nb * k * hw;
    if (!n) return AMP_OK;
    to_cnhw_kernel<<<blocks_for(n), 256, 0, stream>>>(x, nb, k, hw, y);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

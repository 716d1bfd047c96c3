/* A half convolution's weight-gradient operands (half_conv.c): its input
 * as im2col columns and its incoming gradient by channel, so that the sum
 * over a chunk of images and output positions is one GEMM's K dimension.
 * The layout is wgrad_index.h's (host-tested). Both kernels move 16-bit
 * values and never convert them: float16 and bfloat16 alike, and padding is
 * +0 in both.
 */
#include "amp_cuda.h"
#include "cuda_check.h"

/* A 2-d grid: x over a row's columns (an int, amp_wgrad_chunk's), y over
 * rows, both grid-stride. */
static dim3 grid_for(int cols, int rows)
{
    const int bx = (cols + 255) / 256;
    return dim3((unsigned)(bx < 4096 ? bx : 4096), (unsigned)(rows < 65535 ? rows : 65535));
}

static __global__ void im2col_kernel(const uint16_t *x, amp_im2col_dims d, int rows, int cols,
                                     uint16_t *col)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y)
        for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < cols; q += gridDim.x * blockDim.x) {
            const long long s = amp_im2col_src2(d, r, q);
            col[(size_t)r * cols + q] = s < 0 ? (uint16_t)0 : x[s];
        }
}

static __global__ void im2col_nhwc_kernel(const uint16_t *x, amp_im2col_dims d, int cs, int rows,
                                          int cols, uint16_t *col)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y)
        for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < cols; q += gridDim.x * blockDim.x) {
            const long long s = amp_im2col_src2_nhwc(d, cs, r, q);
            col[(size_t)r * cols + q] = s < 0 ? (uint16_t)0 : x[s];
        }
}

static __global__ void to_cnhw_kernel(const uint16_t *x, int k, int hw, int cols, uint16_t *y)
{
    for (int r = blockIdx.y; r < k; r += gridDim.y)
        for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < cols; q += gridDim.x * blockDim.x)
            y[(size_t)r * cols + q] = x[amp_cnhw_src2(k, hw, r, q)];
}

extern "C" amp_status amp_cuda_im2col_half(const uint16_t *x, amp_im2col_dims d, uint16_t *col,
                                           cudaStream_t stream, char *err, size_t errlen)
{
    const int rows = d.c * d.size * d.size, cols = d.nb * d.out_h * d.out_w;
    if (rows <= 0 || cols <= 0) return AMP_OK;
    im2col_kernel<<<grid_for(cols, rows), 256, 0, stream>>>(x, d, rows, cols, col);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

extern "C" amp_status amp_cuda_im2col_half_nhwc(const uint16_t *x, amp_im2col_dims d,
                                                int c_stored, uint16_t *col, cudaStream_t stream,
                                                char *err, size_t errlen)
{
    const int rows = d.c * d.size * d.size, cols = d.nb * d.out_h * d.out_w;
    if (rows <= 0 || cols <= 0) return AMP_OK;
    im2col_nhwc_kernel<<<grid_for(cols, rows), 256, 0, stream>>>(x, d, c_stored, rows, cols, col);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

extern "C" amp_status amp_cuda_to_cnhw_half(const uint16_t *x, int nb, int k, size_t hw,
                                            uint16_t *y, cudaStream_t stream, char *err,
                                            size_t errlen)
{
    const int cols = nb * (int)hw;
    if (k <= 0 || cols <= 0) return AMP_OK;
    to_cnhw_kernel<<<grid_for(cols, k), 256, 0, stream>>>(x, k, (int)hw, cols, y);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

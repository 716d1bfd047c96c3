/* A half convolution's weight-gradient operands (half_conv.c): its input
 * as im2col columns and its incoming gradient by channel, so that the sum
 * over a chunk of images and output positions is one GEMM's K dimension.
 * The layout is wgrad_index.h's (host-tested). Both kernels move 16-bit
 * values and never convert them: float16 and bfloat16 alike, and padding is
 * +0 in both.
 */
#include "amp_cuda.h"
#include "cuda_check.h"

#include <stdio.h>

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

/* From NHWC: a block of 256 threads moves a tile of CT channels by 1024 / CT
 * columns (positions) of one window position (blockIdx.z = ky size + kx)
 * through shared memory, reading each position's CT channels side by side
 * and writing each channel's row of columns side by side, both coalesced
 * (a thread per column would read 2 bytes every cs values). CT is the
 * smallest of 4, 8, 16 and 32 that holds the layer's channels, so that a
 * first convolution's 3 channels fill most of the tile rather than 3 rows
 * of 32: a tile of 32 there left 29 of 32 threads idle over 4 times as many
 * blocks. A row of the tile is CT + 2 values, an odd number of 4-byte words,
 * so that the column-wise reads hit 32 different banks. */
#define IM2COL_THREADS 256
#define IM2COL_ELEMS 1024
template <int CT>
static __global__ void __launch_bounds__(IM2COL_THREADS)
    im2col_nhwc_kernel(const uint16_t *x, amp_im2col_dims d, amp_im2col_divs v, int cs, int cols,
                       uint16_t *col)
{
    constexpr int QT = IM2COL_ELEMS / CT, PITCH = CT + 2;
    __shared__ uint16_t tile[QT * PITCH];
    const int kk = d.size * d.size, tap = blockIdx.z, ky = tap / d.size, kx = tap - ky * d.size;
    const int c0 = blockIdx.y * CT, q0 = blockIdx.x * QT;
    for (int e = threadIdx.x; e < IM2COL_ELEMS; e += IM2COL_THREADS) { /* position-major */
        const int qq = e / CT, cc = e % CT, q = q0 + qq, ch = c0 + cc;
        uint16_t val = 0;
        if (q < cols && ch < d.c) {
            const long long s = amp_im2col_nhwc_tap(d, v, cs, ch, ky, kx, q);
            if (s >= 0) val = x[s];
        }
        tile[qq * PITCH + cc] = val;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < IM2COL_ELEMS; e += IM2COL_THREADS) { /* channel-major */
        const int cc = e / QT, qq = e % QT, q = q0 + qq, ch = c0 + cc;
        if (ch < d.c && q < cols) col[((size_t)ch * kk + tap) * cols + q] = tile[qq * PITCH + cc];
    }
}

template <int CT>
static void launch_im2col_nhwc(dim3 grid, cudaStream_t stream, const uint16_t *x,
                               amp_im2col_dims d, amp_im2col_divs v, int cs, int cols,
                               uint16_t *col)
{
    im2col_nhwc_kernel<CT><<<grid, IM2COL_THREADS, 0, stream>>>(x, d, v, cs, cols, col);
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
    const int cols = d.nb * d.out_h * d.out_w, taps = d.size * d.size;
    if (d.c <= 0 || taps <= 0 || cols <= 0) return AMP_OK;
    const int ct = amp_channel_tile(d.c), ctiles = (d.c + ct - 1) / ct;
    if (ctiles > 65535 || taps > 65535) {
        snprintf(err, errlen, "wgrad.cu: a %dx%d window over %d channels: more than 65535 tiles",
                 d.size, d.size, d.c);
        return AMP_ERR_INVALID;
    }
    const int qt = IM2COL_ELEMS / ct;
    const dim3 grid((unsigned)((cols + qt - 1) / qt), (unsigned)ctiles, (unsigned)taps);
    const amp_im2col_divs v = amp_im2col_divs_of(d);
    switch (ct) {
    case 4: launch_im2col_nhwc<4>(grid, stream, x, d, v, c_stored, cols, col); break;
    case 8: launch_im2col_nhwc<8>(grid, stream, x, d, v, c_stored, cols, col); break;
    case 16: launch_im2col_nhwc<16>(grid, stream, x, d, v, c_stored, cols, col); break;
    default: launch_im2col_nhwc<32>(grid, stream, x, d, v, c_stored, cols, col);
    }
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

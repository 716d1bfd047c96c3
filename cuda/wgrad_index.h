/* The index math of a half convolution's weight-gradient operands (wgrad.cu),
 * compiled for host and device alike so that the host tests
 * (tests/cuda/gpu_plan_test.c) check the layout the kernels write.
 *
 *   col[(ci * size + ky) * size + kx][b * out_hw + oy * out_w + ox]
 *       = x[b][ci][oy * stride - pad + ky][ox * stride - pad + kx]  (0 outside)
 *   dyc[k][b * hw + p] = dy[b][k][p]
 *
 * darknet's im2col order (channel, then window row, then column): the rows
 * of one group's channels are contiguous, and the weight gradient comes out
 * in darknet's [filter][channel][ky][kx].
 */
#ifndef AMP_WGRAD_INDEX_H
#define AMP_WGRAD_INDEX_H

#include "math/hd.h"

#include <stddef.h>

typedef struct amp_im2col_dims {
    int nb, c, h, w, size, stride, pad, out_h, out_w;
} amp_im2col_dims;

/* col's elements: c * size * size rows of nb * out_h * out_w. */
static AMP_HD inline size_t amp_im2col_elems(amp_im2col_dims d)
{
    return (size_t)d.c * d.size * d.size * d.nb * d.out_h * d.out_w;
}

/* The element of x that col[i] holds, or -1 for a padding position (0). */
static AMP_HD inline long long amp_im2col_src(amp_im2col_dims d, size_t i)
{
    const size_t ohw = (size_t)d.out_h * d.out_w, kk = (size_t)d.size * d.size;
    const size_t cols = (size_t)d.nb * ohw, row = i / cols, q = i % cols;
    const size_t b = q / ohw, p = q % ohw;
    const int ci = (int)(row / kk), ky = (int)(row % kk) / d.size, kx = (int)(row % kk) % d.size;
    const int oy = (int)(p / d.out_w), ox = (int)(p % d.out_w);
    const int iy = oy * d.stride - d.pad + ky, ix = ox * d.stride - d.pad + kx;
    if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) return -1;
    return (long long)(((b * d.c + ci) * d.h + iy) * (size_t)d.w + ix);
}

/* The element of dy (nb images of k x hw) that dyc[i] holds. */
static AMP_HD inline size_t amp_cnhw_src(int nb, int k, size_t hw, size_t i)
{
    const size_t cols = (size_t)nb * hw, kc = i / cols, q = i % cols;
    return (q / hw * k + kc) * hw + q % hw;
}

#endif

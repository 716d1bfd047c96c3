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
 * in darknet's [filter][channel][ky][kx]. The activation plan's input is
 * NHWC (x[b][iy][ix][ci]): the same col from it (amp_im2col_src2_nhwc), so
 * that the weight gradient keeps darknet's layout; its dy, NHWC too, is
 * dyc's transpose as it stands (dy[b * hw + p][k]), which a GEMM reads
 * transposed.
 */
#ifndef AMP_WGRAD_INDEX_H
#define AMP_WGRAD_INDEX_H

#include "math/fastdiv.h"
#include "math/hd.h"
#include "math/nhwc.h"

#include <stddef.h>

typedef struct amp_im2col_dims {
    int nb, c, h, w, size, stride, pad, out_h, out_w;
} amp_im2col_dims;

/* col's elements: c * size * size rows of nb * out_h * out_w. */
static AMP_HD inline size_t amp_im2col_elems(amp_im2col_dims d)
{
    return (size_t)d.c * d.size * d.size * d.nb * d.out_h * d.out_w;
}

/* Where col[row][q] (q < nb * out_h * out_w, an int: amp_wgrad_chunk keeps
 * it one) reads: image b, channel ci, input row iy and column ix; 0 for a
 * padding position (col holds 0). 32-bit divisions only: a GPU's 64-bit
 * ones are many instructions each. */
static AMP_HD inline int amp_im2col_at(amp_im2col_dims d, int row, int q, int *b, int *ci,
                                       int *iy, int *ix)
{
    const int ohw = d.out_h * d.out_w, kk = d.size * d.size;
    *b = q / ohw;
    const int p = q - *b * ohw;
    *ci = row / kk;
    const int kr = row - *ci * kk, ky = kr / d.size, kx = kr - ky * d.size;
    const int oy = p / d.out_w, ox = p - oy * d.out_w;
    *iy = oy * d.stride - d.pad + ky, *ix = ox * d.stride - d.pad + kx;
    return *iy >= 0 && *iy < d.h && *ix >= 0 && *ix < d.w;
}

/* The element of x (NCHW) that col[row][q] holds, or -1 for padding. */
static AMP_HD inline long long amp_im2col_src2(amp_im2col_dims d, int row, int q)
{
    int b, ci, iy, ix;
    if (!amp_im2col_at(d, row, q, &b, &ci, &iy, &ix)) return -1;
    return (((long long)b * d.c + ci) * d.h + iy) * d.w + ix;
}

/* A 1x1 convolution of stride 1 without padding reads each position's
 * channels as they stand: its columns are the NHWC input itself, transposed
 * (col[ch][q] = x[q][ch]), so that the weight gradient's GEMM reads x in
 * place, rows of cs stored channels, and gathers nothing. */
static AMP_HD inline int amp_wgrad_direct(amp_im2col_dims d)
{
    return d.size == 1 && d.stride == 1 && d.pad == 0;
}

/* The divisors of a column index (math/fastdiv.h), made once per launch:
 * the kernel that gathers from NHWC splits every column index with them. */
typedef struct amp_im2col_divs {
    amp_divider ohw, ow;
} amp_im2col_divs;

static AMP_HD inline amp_im2col_divs amp_im2col_divs_of(amp_im2col_dims d)
{
    amp_im2col_divs v = {amp_divider_of((uint32_t)(d.out_h * d.out_w)),
                         amp_divider_of((uint32_t)d.out_w)};
    return v;
}

/* From an NHWC input of cs >= d.c stored channels (the first convolution's
 * image is padded): the element of x[b][iy][ix][ch] that col[ch * size *
 * size + ky * size + kx][q] holds, or -1 for padding. wgrad.cu's kernel
 * reads a tile of channels of one window position (ky, kx) this way. */
static AMP_HD inline long long amp_im2col_nhwc_tap(amp_im2col_dims d, amp_im2col_divs v, int cs,
                                                   int ch, int ky, int kx, int q)
{
    uint32_t p, ox;
    const uint32_t b = amp_divmod(v.ohw, (uint32_t)q, &p), oy = amp_divmod(v.ow, p, &ox);
    const int iy = (int)oy * d.stride - d.pad + ky, ix = (int)ox * d.stride - d.pad + kx;
    if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) return -1;
    return amp_nhwc_at(b, ch, (long)iy * d.w + ix, cs, (long)d.h * d.w);
}

/* The same for col[row][q] (host tests: every element of col). */
static AMP_HD inline long long amp_im2col_src2_nhwc(amp_im2col_dims d, int cs, int row, int q)
{
    const int kk = d.size * d.size, ch = row / kk, tap = row - ch * kk;
    return amp_im2col_nhwc_tap(d, amp_im2col_divs_of(d), cs, ch, tap / d.size, tap % d.size, q);
}

/* The same for col's element i (row-major: rows of nb * out_h * out_w). */
static AMP_HD inline long long amp_im2col_src(amp_im2col_dims d, size_t i)
{
    const size_t cols = (size_t)d.nb * d.out_h * d.out_w;
    return amp_im2col_src2(d, (int)(i / cols), (int)(i % cols));
}

/* The element of dy (nb images of k x hw) that dyc[kc][q] holds (q < nb * hw,
 * an int). */
static AMP_HD inline long long amp_cnhw_src2(int k, int hw, int kc, int q)
{
    const int b = q / hw;
    return ((long long)b * k + kc) * hw + (q - b * hw);
}

/* The same for dyc's element i. */
static AMP_HD inline size_t amp_cnhw_src(int nb, int k, size_t hw, size_t i)
{
    const size_t cols = (size_t)nb * hw;
    return (size_t)amp_cnhw_src2(k, (int)hw, (int)(i / cols), (int)(i % cols));
}

#endif

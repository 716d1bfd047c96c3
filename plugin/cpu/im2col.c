/* A convolution as one matrix product, for onednn.c's matmul form: the
 * input's windows unrolled into rows (im2col) and the rows' gradient folded
 * back (its adjoint, col2im), over NHWC tensors.
 *
 * One row per output position p = (image, out row, out column), P rows in
 * all; one column per (kernel row, kernel column, input channel), K = size *
 * size * c columns, the channel innermost. In NHWC each window position is c
 * contiguous values, so a row is size * size copies of c elements; outside
 * the image (padding) they are zeros. The columns' order is darknet's weights
 * re-laid as OHWI (oneDNN's "ohwi"), so that y[P, n] = col[P, K] W^T.
 *
 * Padding and output size are darknet's (im2col_cpu): input row oh * stride
 * - pad + kh, the same padding on all sides, the last window possibly ending
 * before the input does.
 *
 * col2im gathers rather than scatters: each input position sums, in a fixed
 * order (kernel row, kernel column), the rows of the windows that cover it.
 * No two threads write the same output, and the result does not depend on
 * the thread count.
 */
#include "cpu.h"

#include <string.h>

void amp_im2col_nhwc(const void *x, void *col, size_t elt, const amp_conv_shape *s)
{
    const size_t c = (size_t)s->c * elt, k = (size_t)s->size * s->size * c;
    const long rows = (long)s->batch * s->out_h * s->out_w;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < rows; ++p) {
        const int ow = (int)(p % s->out_w), oh = (int)(p / s->out_w % s->out_h);
        const long b = p / ((long)s->out_w * s->out_h);
        char *dst = (char *)col + (size_t)p * k;
        for (int kh = 0; kh < s->size; ++kh) {
            const int ih = oh * s->stride - s->pad + kh;
            for (int kw = 0; kw < s->size; ++kw, dst += c) {
                const int iw = ow * s->stride - s->pad + kw;
                if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) memset(dst, 0, c);
                else memcpy(dst, (const char *)x + (((size_t)b * s->h + ih) * s->w + iw) * c, c);
            }
        }
    }
}

/* out[0..n) += in[0..n) */
AMP_SIMD_CLONES static void add_row(float *restrict out, const float *restrict in, int n)
{
#pragma omp simd
    for (int i = 0; i < n; ++i) out[i] += in[i];
}

void amp_col2im_nhwc(const float *dcol, float *dx, const amp_conv_shape *s)
{
    const size_t k = (size_t)s->size * s->size * s->c;
    const long rows = (long)s->batch * s->h;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; ++r) {
        const long b = r / s->h;
        const int ih = (int)(r % s->h);
        for (int iw = 0; iw < s->w; ++iw) {
            float *out = dx + ((size_t)r * s->w + iw) * s->c;
            memset(out, 0, (size_t)s->c * sizeof *out);
            for (int kh = 0; kh < s->size; ++kh) {
                const int th = ih + s->pad - kh, oh = th / s->stride;
                if (th < 0 || th % s->stride || oh >= s->out_h) continue;
                for (int kw = 0; kw < s->size; ++kw) {
                    const int tw = iw + s->pad - kw, ow = tw / s->stride;
                    if (tw < 0 || tw % s->stride || ow >= s->out_w) continue;
                    const size_t p = ((size_t)b * s->out_h + oh) * s->out_w + ow;
                    add_row(out, dcol + p * k + (size_t)(kh * s->size + kw) * s->c, s->c);
                }
            }
        }
    }
}

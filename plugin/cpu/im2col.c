/* A convolution as one matrix product, for the matmul form (onednn_matmul.c, onednn_pass.c): the
 * input's windows unrolled into rows (im2col) and the rows' gradient folded
 * back (its adjoint, col2im), from and to NHWC tensors.
 *
 * One row per output position p = (image, out row, out column), P rows in
 * all; one column per (input channel, kernel row, kernel column), K = c *
 * size * size columns: darknet's own weights order (OIHW), so that y[P, n] =
 * col[P, K] W^T with darknet's weights as they are, and the weight gradient
 * dy^T col comes out in darknet's order too. The weights are the large
 * operand on the small maps where this form pays (4.7 M in yolov3-tiny's 5x5
 * layer, against 0.2 M input values): they are converted and their gradient
 * added without a transposition, and the window transposes here instead, in
 * cache: a window's size^2 positions are c contiguous values each in NHWC,
 * written channel by channel.
 *
 * Padding and output size are darknet's (im2col_cpu): input row oh * stride
 * - pad + kh, the same padding on all sides, the last window possibly ending
 * before the input does.
 *
 * col2im gathers rather than scatters: each input position sums, in a fixed
 * order (kernel row, kernel column), the columns of the windows that cover
 * it. No two threads write the same output, and the result does not depend
 * on the thread count.
 */
#include "cpu.h"

#include <stdint.h>
#include <string.h>

/* The size^2 sources of output position p's window: an input position's c
 * values, or NULL (the padding). */
static void window(const char *x, size_t c, const amp_conv_shape *s, long p, const char **src)
{
    const int ow = (int)(p % s->out_w), oh = (int)(p / s->out_w % s->out_h);
    const long b = p / ((long)s->out_w * s->out_h);
    for (int kh = 0; kh < s->size; ++kh) {
        const int ih = oh * s->stride - s->pad + kh;
        for (int kw = 0; kw < s->size; ++kw) {
            const int iw = ow * s->stride - s->pad + kw;
            const int in = ih >= 0 && ih < s->h && iw >= 0 && iw < s->w;
            src[kh * s->size + kw] = in ? x + (((size_t)b * s->h + ih) * s->w + iw) * c : NULL;
        }
    }
}

#define IM2COL(T)                                                                       \
    static void im2col_##T(const void *x, T *col, const amp_conv_shape *s)              \
    {                                                                                   \
        const int ss = s->size * s->size;                                               \
        const size_t c = (size_t)s->c, k = c * ss;                                      \
        const long rows = (long)s->batch * s->out_h * s->out_w;                         \
        _Pragma("omp parallel for schedule(static)")                                    \
        for (long p = 0; p < rows; ++p) {                                               \
            const char *src[AMP_IM2COL_MAX_WINDOW];                                     \
            window(x, c * sizeof(T), s, p, src);                                        \
            T *dst = col + (size_t)p * k;                                               \
            for (int q = 0; q < ss; ++q) {                                              \
                const T *in = (const T *)src[q];                                        \
                if (in)                                                                 \
                    for (size_t ch = 0; ch < c; ++ch) dst[ch * ss + q] = in[ch];        \
                else                                                                    \
                    for (size_t ch = 0; ch < c; ++ch) dst[ch * ss + q] = 0;             \
            }                                                                           \
        }                                                                               \
    }
IM2COL(uint16_t)
IM2COL(uint32_t)

void amp_im2col_nhwc(const void *x, void *col, size_t elt, const amp_conv_shape *s)
{
    if (elt == 2) im2col_uint16_t(x, col, s);
    else im2col_uint32_t(x, col, s);
}

void amp_col2im_nhwc(const float *dcol, float *dx, const amp_conv_shape *s)
{
    const int ss = s->size * s->size;
    const size_t k = (size_t)s->c * ss;
    const long rows = (long)s->batch * s->h;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; ++r) {
        const long b = r / s->h;
        const int ih = (int)(r % s->h);
        for (int iw = 0; iw < s->w; ++iw) {
            const float *src[AMP_IM2COL_MAX_WINDOW]; /* the window columns that read (ih, iw) */
            int n = 0;
            for (int kh = 0; kh < s->size; ++kh) {
                const int th = ih + s->pad - kh, oh = th / s->stride;
                if (th < 0 || th % s->stride || oh >= s->out_h) continue;
                for (int kw = 0; kw < s->size; ++kw) {
                    const int tw = iw + s->pad - kw, ow = tw / s->stride;
                    if (tw < 0 || tw % s->stride || ow >= s->out_w) continue;
                    const size_t p = ((size_t)b * s->out_h + oh) * s->out_w + ow;
                    src[n++] = dcol + p * k + (size_t)kh * s->size + kw;
                }
            }
            float *out = dx + ((size_t)r * s->w + iw) * s->c;
            for (int ch = 0; ch < s->c; ++ch) {
                float sum = 0;
                for (int i = 0; i < n; ++i) sum += src[i][(size_t)ch * ss];
                out[ch] = sum;
            }
        }
    }
}

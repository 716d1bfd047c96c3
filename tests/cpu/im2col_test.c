/* The matmul form's im2col and col2im (plugin/cpu/im2col.c, NHWC) against
 * darknet's im2col_cpu and col2im_cpu (CHW, one image at a time), on shapes
 * with padding, strides, 1x1 and 5x5 kernels, and a last window that ends
 * before the input does.
 *
 * im2col copies values: it must equal darknet's bit for bit, element by
 * element (each (position, channel, kernel row, kernel column) mapped to
 * darknet's (channel, kernel row, kernel column, position)), in float32 and
 * as the 2-byte elements of bfloat16.
 *
 * col2im sums the window rows that cover an input position, in another order
 * than darknet's, in float32. With at most n = size^2 terms, each sum is
 * within (n - 1) eps_32 of the sum of the terms' magnitudes from the exact
 * value, and so within twice that of darknet's: the bound is
 * 2 n eps_32 sum|terms| (eps_32 = 2^-24), sum|terms| computed by darknet's
 * col2im of the magnitudes.
 */
#include "cpu.h"
#include "check.h"

#include "col2im.h"
#include "im2col.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float frand(void) { return (float)rand() / RAND_MAX * 2.0f - 1.0f; }

static uint16_t high16(float f) /* a bfloat16 by truncation: any 2-byte pattern will do */
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

static void one_shape(int batch, int h, int w, int c, int size, int stride, int pad)
{
    const int oh = (h + 2 * pad - size) / stride + 1, ow = (w + 2 * pad - size) / stride + 1;
    const amp_conv_shape s = {batch, h, w, c, oh, ow, size, stride, pad};
    const size_t nx = (size_t)batch * h * w * c, k = (size_t)size * size * c;
    const size_t p1 = (size_t)oh * ow, ncol = (size_t)batch * p1 * k;
    float *x = malloc(nx * sizeof *x), *xchw = malloc(nx * sizeof *x);
    float *col = malloc(ncol * sizeof *col), *dn = malloc(k * p1 * sizeof *dn);
    float *dx = malloc(nx * sizeof *dx), *ref = calloc(nx, sizeof *ref);
    float *mag = calloc(nx, sizeof *mag), *dcol = malloc(ncol * sizeof *dcol);
    float *dcol_chw = malloc(k * p1 * sizeof *dcol), *abs_chw = malloc(k * p1 * sizeof *dcol);
    uint16_t *x16 = malloc(nx * sizeof *x16), *col16 = malloc(ncol * sizeof *col16);
    for (size_t i = 0; i < nx; ++i) x[i] = frand();
    for (size_t i = 0; i < ncol; ++i) dcol[i] = frand();
    for (size_t i = 0; i < nx; ++i) x16[i] = high16(x[i]);
    /* x is NHWC; darknet's image b is CHW */
    for (int b = 0; b < batch; ++b)
        for (int y = 0; y < h; ++y)
            for (int xx = 0; xx < w; ++xx)
                for (int ch = 0; ch < c; ++ch)
                    xchw[(((size_t)b * c + ch) * h + y) * w + xx] =
                        x[(((size_t)b * h + y) * w + xx) * c + ch];

    amp_im2col_nhwc(x, col, sizeof(float), &s);
    amp_im2col_nhwc(x16, col16, sizeof(uint16_t), &s);
    amp_col2im_nhwc(dcol, dx, &s);
    size_t differ = 0, differ16 = 0;
    for (int b = 0; b < batch; ++b) {
        im2col_cpu(xchw + (size_t)b * c * h * w, c, h, w, size, stride, pad, dn);
        for (size_t p = 0; p < p1; ++p)
            for (int kh = 0; kh < size; ++kh)
                for (int kw = 0; kw < size; ++kw)
                    for (int ch = 0; ch < c; ++ch) {
                        const size_t row = ((size_t)ch * size + kh) * size + kw;
                        const size_t at = ((size_t)b * p1 + p) * k + row; /* OIHW order */
                        differ += memcmp(&col[at], &dn[row * p1 + p], sizeof(float)) != 0;
                        differ16 += col16[at] != high16(dn[row * p1 + p]);
                        dcol_chw[row * p1 + p] = dcol[at];
                        abs_chw[row * p1 + p] = fabsf(dcol[at]);
                    }
        col2im_cpu(dcol_chw, c, h, w, size, stride, pad, ref + (size_t)b * c * h * w);
        col2im_cpu(abs_chw, c, h, w, size, stride, pad, mag + (size_t)b * c * h * w);
    }
    CHECK(differ == 0,
          "im2col %dx%dx%d x%d, %dx%d kernel, stride %d, pad %d: %zu of %zu elements differ "
          "from darknet's im2col_cpu (bit for bit)",
          h, w, c, batch, size, size, stride, pad, differ, ncol);
    CHECK(differ16 == 0,
          "im2col of 2-byte elements %dx%dx%d x%d, %dx%d kernel, stride %d, pad %d: %zu of %zu "
          "differ from darknet's (its values' upper halves)",
          h, w, c, batch, size, size, stride, pad, differ16, ncol);
    const double bound = 2.0 * size * size * ldexp(1, -24);
    size_t over = 0;
    double worst = 0;
    for (int b = 0; b < batch; ++b)
        for (int y = 0; y < h; ++y)
            for (int xx = 0; xx < w; ++xx)
                for (int ch = 0; ch < c; ++ch) {
                    const size_t i = (((size_t)b * c + ch) * h + y) * w + xx;
                    const double d = fabs((double)dx[(((size_t)b * h + y) * w + xx) * c + ch] -
                                          ref[i]);
                    const double r = mag[i] > 0 ? d / mag[i] : (d > 0 ? INFINITY : 0);
                    worst = r > worst ? r : worst;
                    over += d > bound * mag[i];
                }
    CHECK(over == 0,
          "col2im %dx%dx%d x%d, %dx%d kernel, stride %d, pad %d: %zu of %zu elements further "
          "from darknet's col2im_cpu than 2 n eps sum|terms| (largest %.2g sum|terms|, bound "
          "%.2g)",
          h, w, c, batch, size, size, stride, pad, over, nx, worst, bound);
    free(x), free(xchw), free(col), free(dn), free(dx), free(ref), free(mag), free(dcol);
    free(dcol_chw), free(abs_chw), free(x16), free(col16);
}

int main(void)
{
    srand(7);
    one_shape(2, 5, 5, 7, 3, 1, 1);   /* yolov3-tiny's 5x5 maps, padded */
    one_shape(3, 7, 6, 5, 3, 2, 1);   /* strided, uneven */
    one_shape(2, 9, 8, 4, 2, 2, 0);   /* the last window ends a row and a column early */
    one_shape(2, 6, 6, 16, 1, 1, 0);  /* 1x1 */
    one_shape(1, 4, 5, 3, 5, 1, 2);   /* a kernel larger than the map */
    one_shape(4, 13, 11, 33, 3, 1, 1); /* enough rows for several threads, odd channels */
    return check_report();
}

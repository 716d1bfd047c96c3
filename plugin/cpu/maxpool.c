/* darknet's max-pooling on the CPU, split between OpenMP threads by channel
 * plane. darknet runs it single-threaded; once the convolutions run in
 * bfloat16 through oneDNN it takes a tenth of a yolov3-tiny training step.
 *
 * Same results bit for bit: the same window, the same first-maximum rule (a
 * strict >, from -FLT_MAX), and in the backward pass each input element gets
 * its gradients added in darknet's order (overlapping windows, as in the
 * stride-1 pool of yolov3-tiny, can send several to one element; they all
 * lie in one plane, which one thread handles in order).
 */
#include "cpu.h"

#include <float.h>

/* One output: the first maximum of its window (strict >, from -FLT_MAX);
 * positions outside the input count as -FLT_MAX, as in darknet. */
static inline void pool_one(const float *in, int base, const layer *l, int y0, int x0, float *out,
                            int *idx)
{
    float max = -FLT_MAX;
    int max_i = -1;
    if (y0 >= 0 && x0 >= 0 && y0 + l->size <= l->h && x0 + l->size <= l->w) {
        for (int n = 0; n < l->size; ++n)
            for (int m = 0; m < l->size; ++m) {
                const int at = (y0 + n) * l->w + x0 + m;
                const float v = in[at];
                const int gt = v > max;
                max_i = gt ? base + at : max_i;
                max = gt ? v : max;
            }
    } else {
        for (int n = 0; n < l->size; ++n)
            for (int m = 0; m < l->size; ++m) {
                const int y = y0 + n, x = x0 + m;
                const int valid = y >= 0 && y < l->h && x >= 0 && x < l->w;
                const float v = valid ? in[y * l->w + x] : -FLT_MAX;
                const int gt = v > max;
                max_i = gt ? base + y * l->w + x : max_i;
                max = gt ? v : max;
            }
    }
    *out = max;
    *idx = max_i;
}

/* The common 2x2 stride-2 window, whole inside the input, for a row of
 * outputs: the same four comparisons in the same order as pool_one, written
 * so that the compiler vectorises across outputs. */
static inline void pool_row_2x2(const float *r0, const float *r1, int at0, int w, int n,
                                float *out, int *idx)
{
#pragma omp simd
    for (int j = 0; j < n; ++j) {
        const float v[4] = {r0[2 * j], r0[2 * j + 1], r1[2 * j], r1[2 * j + 1]};
        const int at[4] = {at0 + 2 * j, at0 + 2 * j + 1, at0 + w + 2 * j, at0 + w + 2 * j + 1};
        float max = -FLT_MAX;
        int max_i = -1;
        for (int k = 0; k < 4; ++k) {
            const int gt = v[k] > max;
            max_i = gt ? at[k] : max_i;
            max = gt ? v[k] : max;
        }
        out[j] = max;
        idx[j] = max_i;
    }
}

void amp_maxpool_forward(layer l, network net)
{
    const int off = -l.pad / 2, planes = l.batch * l.c;
    const int fast = l.size == 2 && l.stride == 2 && off == 0;
#pragma omp parallel for schedule(static) if ((long)planes * l.out_h * l.out_w > 16384)
    for (int p = 0; p < planes; ++p) {
        const int base = p * l.h * l.w, obase = p * l.out_h * l.out_w;
        for (int i = 0; i < l.out_h; ++i) {
            int j = 0;
            if (fast && 2 * i + 1 < l.h) { /* every window of the row whole inside */
                const int n = l.w / 2, at0 = base + 2 * i * l.w;
                pool_row_2x2(net.input + at0, net.input + at0 + l.w, at0, l.w, n,
                             l.output + obase + i * l.out_w, l.indexes + obase + i * l.out_w);
                j = n;
            }
            for (; j < l.out_w; ++j)
                pool_one(net.input + base, base, &l, off + i * l.stride, off + j * l.stride,
                         l.output + obase + i * l.out_w + j, l.indexes + obase + i * l.out_w + j);
        }
    }
}

void amp_maxpool_backward(layer l, network net)
{
    const int planes = l.batch * l.c, per = l.out_h * l.out_w;
#pragma omp parallel for schedule(static) if ((long)planes * per > 16384)
    for (int p = 0; p < planes; ++p)
        for (int i = p * per; i < (p + 1) * per; ++i) net.delta[l.indexes[i]] += l.delta[i];
}

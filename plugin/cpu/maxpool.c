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
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

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

/* One plane p (image and channel) of the pooling: in, out and idx point at
 * the plane's own values; the indexes are the input's, as darknet's. */
static inline void pool_plane(const layer *l, int p, const float *in, float *out, int *idx)
{
    const int off = -l->pad / 2, base = p * l->h * l->w;
    const int fast = l->size == 2 && l->stride == 2 && off == 0;
    for (int i = 0; i < l->out_h; ++i) {
        int j = 0;
        if (fast && 2 * i + 1 < l->h) { /* every window of the row whole inside */
            const int n = l->w / 2, at0 = 2 * i * l->w;
            pool_row_2x2(in + at0, in + at0 + l->w, base + at0, l->w, n, out + i * l->out_w,
                         idx + i * l->out_w);
            j = n;
        }
        for (; j < l->out_w; ++j)
            pool_one(in, base, l, off + i * l->stride, off + j * l->stride, out + i * l->out_w + j,
                     idx + i * l->out_w + j);
    }
}

void amp_maxpool_forward(layer l, network net)
{
    const int planes = l.batch * l.c, hw = l.h * l.w, ohw = l.out_h * l.out_w;
#pragma omp parallel for schedule(static) if ((long)planes * ohw > 16384)
    for (int p = 0; p < planes; ++p)
        pool_plane(&l, p, net.input + (size_t)p * hw, l.output + (size_t)p * ohw,
                   l.indexes + (size_t)p * ohw);
}

void amp_maxpool_backward(layer l, network net)
{
    const int planes = l.batch * l.c, per = l.out_h * l.out_w;
#pragma omp parallel for schedule(static) if ((long)planes * per > 16384)
    for (int p = 0; p < planes; ++p)
        for (int i = p * per; i < (p + 1) * per; ++i) net.delta[l.indexes[i]] += l.delta[i];
}

/* ---- On the activation plan's half storage (storage.c) ----
 * Per plane: the input widened to float32 in a buffer of the thread's, the
 * same windows and first-maximum rule, the maxima stored in half (exact:
 * each is one of the half inputs). The backward adds the plane's gradients
 * onto the input's half delta in float32, in darknet's order, and rounds
 * the plane once. */

/* Per-thread float32 planes: n floats each. */
static float *thread_planes(size_t n, int *threads)
{
    *threads = 1;
#ifdef _OPENMP
    *threads = omp_get_max_threads();
#endif
    float *p = malloc((size_t)*threads * n * sizeof(float));
    if (!p) abort(); /* as darknet's allocations inside a step */
    return p;
}

static int thread_index(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

void amp_maxpool_forward_half(layer l, network net)
{
    const amp_layer *al = l.hook_data;
    const amp_dtype dt = al->owner->scaler->opt.dtype;
    const int planes = l.batch * l.c, hw = l.h * l.w, ohw = l.out_h * l.out_w;
    const uint16_t *in = (const uint16_t *)net.input;
    uint16_t *out = (uint16_t *)l.output;
    int threads;
    float *bufs = thread_planes((size_t)hw + ohw, &threads);
#pragma omp parallel for schedule(static) if ((long)planes * ohw > 16384)
    for (int p = 0; p < planes; ++p) {
        float *x = bufs + (size_t)thread_index() * (hw + ohw), *y = x + hw;
        amp_cpu_from_half(dt, in + (size_t)p * hw, x, (size_t)hw);
        pool_plane(&l, p, x, y, l.indexes + (size_t)p * ohw);
        amp_cpu_to_half(dt, y, out + (size_t)p * ohw, (size_t)ohw);
    }
    free(bufs);
}

void amp_maxpool_backward_half(layer l, network net)
{
    (void)net;
    const amp_layer *al = l.hook_data;
    const amp_dtype dt = al->owner->scaler->opt.dtype;
    amp_cpu_deltas_begin(al->owner, al->index);
    uint16_t *dst = amp_cpu_half_delta(al->owner, al->index - 1);
    if (!dst) return;
    const int planes = l.batch * l.c, hw = l.h * l.w, ohw = l.out_h * l.out_w;
    const uint16_t *d = cpu_layer_of(al)->delta_h;
    int threads;
    float *bufs = thread_planes((size_t)hw + ohw, &threads);
#pragma omp parallel for schedule(static) if ((long)planes * ohw > 16384)
    for (int p = 0; p < planes; ++p) {
        float *dx = bufs + (size_t)thread_index() * (hw + ohw), *dy = dx + hw;
        amp_cpu_from_half(dt, dst + (size_t)p * hw, dx, (size_t)hw);
        amp_cpu_from_half(dt, d + (size_t)p * ohw, dy, (size_t)ohw);
        for (int i = 0; i < ohw; ++i) dx[l.indexes[(size_t)p * ohw + i] - p * hw] += dy[i];
        amp_cpu_to_half(dt, dx, dst + (size_t)p * hw, (size_t)hw);
    }
    free(bufs);
}

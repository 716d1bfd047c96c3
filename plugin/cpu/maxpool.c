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

#include "half_rows.h"

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
        for (int i = p * per; i < (p + 1) * per; ++i) /* a window of NaNs has no maximum */
            if (l.indexes[i] >= 0) net.delta[l.indexes[i]] += l.delta[i];
}

/* ---- On the activation plan's half storage (activations.c) ----
 * NHWC: an output position's channels side by side, compared a position of
 * the window at a time, over all channels at once. The same windows and
 * first-maximum rule (strict >, from -FLT_MAX, window rows then columns);
 * the maxima stored in half (exact: each is one of the half inputs) with
 * their inputs' NHWC indexes in l.indexes. The backward adds each output's
 * gradient onto the input's half delta in float32 and rounds once per
 * element: directly where windows do not overlap (an input gets at most one
 * gradient), else over a float32 copy of the image's delta, in darknet's
 * order (outputs in row-major order per channel). */

/* Per-thread float32 buffers: n floats each. */
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

static inline float half_value(const uint16_t *h, long i, const int bf16)
{
    return bf16 ? amp_bf16_to_f32(h[i]) : amp_f16_to_f32(h[i]);
}

/* Output row i of image b, c channels; max and best: c floats and ints of
 * the thread's. The window position of each channel's first maximum is
 * kept (best), its input index made once at the end. Indexes are int, as
 * darknet's l.indexes. */
AMP_HALF_ROWS_INLINE void pool_row_nhwc(const layer *l, const uint16_t *restrict in,
                                 uint16_t *restrict out, int *restrict idx, int b, int i,
                                 float *restrict max, int *restrict best, const int fmt)
{
    const int c_n = l->c, off = -l->pad / 2, s = l->size;
    const int y0 = off + i * l->stride;
    for (int j = 0; j < l->out_w; ++j) {
        const int o = ((b * l->out_h + i) * l->out_w + j) * c_n;
        const int x0 = off + j * l->stride;
        if (s == 2 && y0 >= 0 && x0 >= 0 && y0 + 1 < l->h && x0 + 1 < l->w) {
            /* the common 2 x 2 window, whole inside: the same four comparisons */
            const int a0 = ((b * l->h + y0) * l->w + x0) * c_n, a1 = a0 + c_n;
            const int a2 = a0 + l->w * c_n, a3 = a2 + c_n;
            float v0[AMP_HALF_BLOCK], v1[AMP_HALF_BLOCK], v2[AMP_HALF_BLOCK], v3[AMP_HALF_BLOCK];
            for (int c0 = 0; c0 < c_n; c0 += AMP_HALF_BLOCK) {
                const int n = c_n - c0 < AMP_HALF_BLOCK ? c_n - c0 : AMP_HALF_BLOCK;
                amp_half_row_load(in + a0 + c0, v0, n, fmt);
                amp_half_row_load(in + a1 + c0, v1, n, fmt);
                amp_half_row_load(in + a2 + c0, v2, n, fmt);
                amp_half_row_load(in + a3 + c0, v3, n, fmt);
                int *at_c = idx + o + c0;
#pragma omp simd
                for (int c = 0; c < n; ++c) {
                    float m = -FLT_MAX;
                    int at = -1;
                    at = v0[c] > m ? a0 + c0 + c : at, m = v0[c] > m ? v0[c] : m;
                    at = v1[c] > m ? a1 + c0 + c : at, m = v1[c] > m ? v1[c] : m;
                    at = v2[c] > m ? a2 + c0 + c : at, m = v2[c] > m ? v2[c] : m;
                    at = v3[c] > m ? a3 + c0 + c : at, m = v3[c] > m ? v3[c] : m;
                    v0[c] = m;
                    at_c[c] = at;
                }
                amp_half_row_store(v0, out + o + c0, n, fmt);
            }
            continue;
        }
        for (int c = 0; c < c_n; ++c) max[c] = -FLT_MAX, best[c] = -1;
        for (int k = 0; k < s * s; ++k) {
            const int y = y0 + k / s, x = x0 + k % s;
            if (y < 0 || y >= l->h || x < 0 || x >= l->w) continue; /* -FLT_MAX: never > */
            const int at = ((b * l->h + y) * l->w + x) * c_n;
            for (int c0 = 0; c0 < c_n; c0 += AMP_HALF_BLOCK) {
                const int n = c_n - c0 < AMP_HALF_BLOCK ? c_n - c0 : AMP_HALF_BLOCK;
                float v[AMP_HALF_BLOCK];
                amp_half_row_load(in + at + c0, v, n, fmt);
                float *mx = max + c0;
                int *bs = best + c0;
#pragma omp simd
                for (int c = 0; c < n; ++c) {
                    const int gt = v[c] > mx[c];
                    bs[c] = gt ? k : bs[c];
                    mx[c] = gt ? v[c] : mx[c];
                }
            }
        }
        amp_half_row_store(max, out + o, c_n, fmt);
        for (int c = 0; c < c_n; ++c) {
            const int k = best[c];
            idx[o + c] = k < 0 ? -1 : ((b * l->h + y0 + k / s) * l->w + x0 + k % s) * c_n + c;
        }
    }
}

/* The row function compiled per instruction set (isa.c chooses), the dtype
 * a constant in each. */
typedef void (*pool_row_fn)(const layer *l, const uint16_t *in, uint16_t *out, int *idx, int b,
                            int i, float *max, int *best, int bf16);
#define POOL_VARIANT(attr, isa, f16)                                                              \
    attr static void pool_row_##isa(const layer *l, const uint16_t *in, uint16_t *out, int *idx,  \
                                    int b, int i, float *max, int *best, int bf16)                \
    {                                                                                             \
        if (bf16) pool_row_nhwc(l, in, out, idx, b, i, max, best, AMP_HALF_BF16);                 \
        else pool_row_nhwc(l, in, out, idx, b, i, max, best, f16);                                \
    }
POOL_VARIANT(, sse2, AMP_HALF_F16)
#ifdef AMP_HALF_ROWS_X86
POOL_VARIANT(__attribute__((target("avx2,fma,f16c"))), avx2, AMP_HALF_F16C)
POOL_VARIANT(__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))), avx512, AMP_HALF_F16C)
#define POOL_X86 1
#endif

static pool_row_fn pool_row(void)
{
#ifdef POOL_X86
    switch (amp_cpu_isa_used()) {
    case AMP_ISA_AVX512: return pool_row_avx512;
    case AMP_ISA_AVX2: return pool_row_avx2;
    default: break;
    }
#endif
    return pool_row_sse2;
}

void amp_maxpool_nhwc_forward(const layer *l, amp_dtype dt, const uint16_t *in, uint16_t *out,
                              int *idx)
{
    const int bf16 = dt == AMP_DTYPE_BFLOAT16, rows = l->batch * l->out_h;
    const pool_row_fn row = pool_row();
    int threads;
    float *bufs = thread_planes(2 * (size_t)l->c, &threads);
#pragma omp parallel for schedule(static) if ((long)l->outputs * l->batch > 16384)
    for (int r = 0; r < rows; ++r) {
        float *max = bufs + (size_t)thread_index() * 2 * l->c;
        row(l, in, out, idx, r / l->out_h, r % l->out_h, max, (int *)(max + l->c), bf16);
    }
    free(bufs);
}

/* Windows that do not overlap: each input gets at most one gradient, the
 * one of the window whose maximum it is; output row i of image b, every
 * input position of its windows visited in turn, all channels at once:
 * dst = half(dst + d) where the index is that input's. */
AMP_HALF_ROWS_INLINE void unpool_row_nhwc(const layer *l, const uint16_t *restrict d,
                                   const int *restrict idx, uint16_t *restrict dst, int b, int i,
                                   const int fmt)
{
    const int c_n = l->c, off = -l->pad / 2, s = l->size;
    for (int j = 0; j < l->out_w; ++j) {
        const int o = ((b * l->out_h + i) * l->out_w + j) * c_n;
        for (int k = 0; k < s * s; ++k) {
            const int y = off + i * l->stride + k / s, x = off + j * l->stride + k % s;
            if (y < 0 || y >= l->h || x < 0 || x >= l->w) continue;
            const int at = ((b * l->h + y) * l->w + x) * c_n;
            for (int c0 = 0; c0 < c_n; c0 += AMP_HALF_BLOCK) {
                const int n = c_n - c0 < AMP_HALF_BLOCK ? c_n - c0 : AMP_HALF_BLOCK;
                float v[AMP_HALF_BLOCK], g[AMP_HALF_BLOCK];
                uint16_t h[AMP_HALF_BLOCK];
                amp_half_row_load(dst + at + c0, v, n, fmt);
                amp_half_row_load(d + o + c0, g, n, fmt);
#pragma omp simd
                for (int c = 0; c < n; ++c) v[c] += g[c];
                amp_half_row_store(v, h, n, fmt);
                const int *ix = idx + o + c0;
                uint16_t *dc = dst + at + c0;
#pragma omp simd
                for (int c = 0; c < n; ++c) dc[c] = ix[c] == at + c0 + c ? h[c] : dc[c];
            }
        }
    }
}

typedef void (*unpool_row_fn)(const layer *l, const uint16_t *d, const int *idx, uint16_t *dst,
                              int b, int i, int bf16);
#define UNPOOL_VARIANT(attr, isa, f16)                                                            \
    attr static void unpool_row_##isa(const layer *l, const uint16_t *d, const int *idx,          \
                                      uint16_t *dst, int b, int i, int bf16)                      \
    {                                                                                             \
        if (bf16) unpool_row_nhwc(l, d, idx, dst, b, i, AMP_HALF_BF16);                           \
        else unpool_row_nhwc(l, d, idx, dst, b, i, f16);                                          \
    }
UNPOOL_VARIANT(, sse2, AMP_HALF_F16)
#ifdef POOL_X86
UNPOOL_VARIANT(__attribute__((target("avx2,fma,f16c"))), avx2, AMP_HALF_F16C)
UNPOOL_VARIANT(__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))), avx512, AMP_HALF_F16C)
#endif

static unpool_row_fn unpool_row(void)
{
#ifdef POOL_X86
    switch (amp_cpu_isa_used()) {
    case AMP_ISA_AVX512: return unpool_row_avx512;
    case AMP_ISA_AVX2: return unpool_row_avx2;
    default: break;
    }
#endif
    return unpool_row_sse2;
}

void amp_maxpool_nhwc_backward(const layer *l, amp_dtype dt, const uint16_t *d, const int *idx,
                               uint16_t *dst)
{
    const int bf16 = dt == AMP_DTYPE_BFLOAT16;
    const long per_in = (long)l->h * l->w * l->c, per_out = (long)l->outputs;
    if (l->stride >= l->size) { /* no two windows share an input */
        const unpool_row_fn row = unpool_row();
        const int rows = l->batch * l->out_h;
#pragma omp parallel for schedule(static) if (per_out * l->batch > 16384)
        for (int r = 0; r < rows; ++r) row(l, d, idx, dst, r / l->out_h, r % l->out_h, bf16);
        return;
    }
    int threads;
    float *bufs = thread_planes((size_t)per_in, &threads);
#pragma omp parallel for schedule(static) if (per_out * l->batch > 16384)
    for (int b = 0; b < l->batch; ++b) {
        float *dx = bufs + (size_t)thread_index() * per_in;
        uint16_t *db = dst + (size_t)b * per_in;
        amp_cpu_from_half(dt, db, dx, (size_t)per_in);
        const long base = b * per_in;
        for (long k = b * per_out; k < (b + 1) * per_out; ++k)
            if (idx[k] >= 0) dx[idx[k] - base] += half_value(d, k, bf16); /* -1: all NaN */
        amp_cpu_to_half(dt, dx, db, (size_t)per_in);
    }
    free(bufs);
}

void amp_maxpool_forward_half(layer l, network net)
{
    const amp_layer *al = l.hook_data;
    amp_maxpool_nhwc_forward(&l, al->owner->scaler->opt.dtype, (const uint16_t *)net.input,
                             (uint16_t *)l.output, l.indexes);
}

void amp_maxpool_backward_half(layer l, network net)
{
    (void)net;
    const amp_layer *al = l.hook_data;
    amp_cpu_deltas_begin(al->owner, al->index);
    uint16_t *dst = amp_cpu_half_delta(al->owner, al->index - 1);
    if (dst)
        amp_maxpool_nhwc_backward(&l, al->owner->scaler->opt.dtype, cpu_layer_of(al)->delta_h,
                                  l.indexes, dst);
}

/* darknet's float32 forms of a layer, as this backend runs them: its own,
 * but max-pooling threaded (same results). */
void amp_cpu_float32_forms(amp_layer *al, const layer *l)
{
    al->forward = al->orig_forward;
    al->backward = al->orig_backward;
    if (l->type == MAXPOOL && l->forward && l->backward) { /* same results, threaded */
        al->forward = amp_maxpool_forward;
        al->backward = amp_maxpool_backward;
    }
}

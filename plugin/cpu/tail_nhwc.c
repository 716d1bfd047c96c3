/* A half layer's tail on the activation plan's half storage: batch-norm (or
 * bias), the activation, and their gradients, reading and writing the
 * layer's NHWC half tensors (activations.c) with float32 arithmetic, as a GPU's
 * AMP runs cuDNN's batch-norm on half input into half output.
 *
 * Channels last, a position's channels are contiguous: every loop runs over
 * the channels of one position at a time (vectorised), per-channel sums in a
 * row of accumulators. No gathering of a channel's strided values into a
 * float32 buffer and no scattering back, which the NCHW tail (tail.c) needs
 * on half storage. The values are read from half storage at each pass
 * instead of being kept in float32: three passes over 2-byte values cost
 * less than one over a float32 copy.
 *
 * Sums over a channel (the statistics, the bias, scale, mean and variance
 * gradients) are made per chunk of positions, in order, then the chunks' sums
 * added in chunk order. The chunks depend on the tensor's shape only, so the
 * results are the same on any number of threads (the NCHW tail's are too:
 * one thread per channel), though not in darknet's order of additions: the
 * half numerics' bounds tests hold them against darknet's float32.
 *
 * The formulas are darknet's forward_batchnorm_layer/backward_batchnorm_layer
 * (or cuDNN's forward, amp_bn_formula), add_bias/backward_bias,
 * activate_array/gradient_array: the same as tail.c's, with x_norm made again
 * from the kept batch-norm input in the backward. mish, swish and hard_mish
 * take their gradient from the values before the activation: made again the
 * same way (x_norm scale + bias), or without batch-norm kept in x (the
 * half-rounded convolution, before the bias; plan.c).
 */
#include "cpu.h"

#include "half_rows.h"

#include "activations.h"
#include "math/act_math.h"
#include "math/tail_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define NHWC_INLINE static inline __attribute__((always_inline))
#else
#define NHWC_INLINE static inline
#endif

/* A chunk holds at least this many values, in whole positions, ... */
#define NHWC_CHUNK_VALUES 4096
/* ... and a tensor at most this many chunks (their per-channel sums are kept). */
#define NHWC_MAX_CHUNKS 128
/* Parallel only when there is enough work to pay for waking the threads. */
#define NHWC_MIN_PARALLEL 16384

/* Everything a pass reads: the tensor's shape, its storage and the
 * per-channel values the pass needs. */
typedef struct nhwc_job {
    long positions; /* batch x out_h x out_w */
    int c;          /* channels: the stride between positions */
    long chunk;     /* positions per chunk */
    int nchunks;
    int bf16;
    ACTIVATION act;
    const uint16_t *x; /* the batch-norm input (without batch-norm: the output) */
    uint16_t *y;       /* the output */
    uint16_t *dh;      /* the gradient: read, and overwritten with the tail's */
    /* per channel: forward mean, the forward's denominator, scale, bias; the
     * backward's inverse deviation and its two correction terms */
    const float *mean, *den, *scale, *bias, *inv, *kv, *km;
} nhwc_job;

/* act and act' as darknet's: the half tails' own (math/act_math.h, the
 * device's too) where they have it, LINEAR and LEAKY, the common ones, inline
 * so that the loops vectorise (the callers pass them as constants); others
 * through darknet's activate/gradient. */
_Static_assert(AMP_ACT_LOGISTIC == (int)LOGISTIC && AMP_ACT_RELU == (int)RELU &&
                   AMP_ACT_LINEAR == (int)LINEAR && AMP_ACT_LEAKY == (int)LEAKY &&
                   AMP_ACT_MISH == (int)MISH && AMP_ACT_SWISH == (int)SWISH &&
                   AMP_ACT_HARD_MISH == (int)HARD_MISH,
               "math/act_math.h's amp_act follows darknet's ACTIVATION");

NHWC_INLINE float act_f(float v, const ACTIVATION a)
{
    return amp_act_known(a) ? amp_act(v, a) : activate(v, a);
}

/* act' from the output y, or from the input v where it needs that; inline so
 * that the test folds away for the activations passed as constants */
NHWC_INLINE int needs_input(const ACTIVATION a)
{
    return amp_act_needs_input(a);
}

NHWC_INLINE float act_gv(float y, float v, const ACTIVATION a)
{
    return amp_act_known(a) ? amp_act_grad(y, v, a) : gradient(y, a);
}

/* ---- the passes over one chunk of positions [p0, p1) ----
 *
 * Each position's values a block at a time (half_rows.h): the half rows read
 * into float32 rows (xf, yf, df), the arithmetic on those, the results
 * rounded into the half storage. fmt: the storage format and its conversion
 * (AMP_HALF_*), a constant in each variant. */

#define NHWC_BLOCK AMP_HALF_BLOCK
/* The blocks of one position: [c0, c0 + m) */
#define FOR_BLOCKS(c0, m, c_n)                                                                \
    for (int c0 = 0, m = (c_n) < NHWC_BLOCK ? (c_n) : NHWC_BLOCK; c0 < (c_n);                \
         c0 += NHWC_BLOCK, m = (c_n)-c0 < NHWC_BLOCK ? (c_n)-c0 : NHWC_BLOCK)

/* acc[c] += x */
NHWC_INLINE void chunk_sum(const nhwc_job *j, long p0, long p1, float *acc, const int fmt)
{
    const int c_n = j->c;
    float xf[NHWC_BLOCK];
    for (long p = p0; p < p1; ++p)
        FOR_BLOCKS(c0, m, c_n) {
            amp_half_row_load(j->x + p * c_n + c0, xf, m, fmt);
            float *a = acc + c0;
#pragma omp simd
            for (int i = 0; i < m; ++i) a[i] += xf[i];
        }
}

/* acc[c] += (x - mean)^2 */
NHWC_INLINE void chunk_sqdev(const nhwc_job *j, long p0, long p1, float *acc, const int fmt)
{
    const int c_n = j->c;
    float xf[NHWC_BLOCK];
    for (long p = p0; p < p1; ++p)
        FOR_BLOCKS(c0, m, c_n) {
            amp_half_row_load(j->x + p * c_n + c0, xf, m, fmt);
            const float *mean = j->mean + c0;
            float *a = acc + c0;
#pragma omp simd
            for (int i = 0; i < m; ++i) {
                const float d = xf[i] - mean[i];
                a[i] += d * d;
            }
        }
}

/* y = act((x - mean) / den * scale + bias) */
NHWC_INLINE void chunk_norm(const nhwc_job *j, long p0, long p1, const int fmt,
                            const ACTIVATION a)
{
    const int c_n = j->c;
    float xf[NHWC_BLOCK];
    for (long p = p0; p < p1; ++p)
        FOR_BLOCKS(c0, m, c_n) {
            amp_half_row_load(j->x + p * c_n + c0, xf, m, fmt);
            const float *mean = j->mean + c0, *den = j->den + c0, *sc = j->scale + c0,
                        *bi = j->bias + c0;
#pragma omp simd
            for (int i = 0; i < m; ++i)
                xf[i] = act_f(amp_bn_pre(xf[i] - mean[i], den[i], sc[i], bi[i]), a);
            amp_half_row_store(xf, j->y + p * c_n + c0, m, fmt);
        }
}

/* y = act(x + bias) (x may be y itself) */
NHWC_INLINE void chunk_bias(const nhwc_job *j, long p0, long p1, const int fmt,
                            const ACTIVATION a)
{
    const int c_n = j->c;
    float xf[NHWC_BLOCK];
    for (long p = p0; p < p1; ++p)
        FOR_BLOCKS(c0, m, c_n) {
            amp_half_row_load(j->x + p * c_n + c0, xf, m, fmt);
            const float *bi = j->bias + c0;
#pragma omp simd
            for (int i = 0; i < m; ++i) xf[i] = act_f(xf[i] + bi[i], a);
            amp_half_row_store(xf, j->y + p * c_n + c0, m, fmt);
        }
}

/* A backward block's three rows from [at, at + m): the batch-norm input x,
 * the output y and the incoming gradient dh. */
NHWC_INLINE void load_backward(const nhwc_job *j, long at, int m, const int fmt, float *xf,
                               float *yf, float *df)
{
    amp_half_row_load(j->x + at, xf, m, fmt);
    amp_half_row_load(j->y + at, yf, m, fmt);
    amp_half_row_load(j->dh + at, df, m, fmt);
}

/* The backward's sums, d = dh act'(y): s = sum d, ss = sum d x_norm (x_norm
 * made again: (x - mean) / den), md = sum d scale, vd = sum d scale (x - mean);
 * acc holds the four rows one after another. */
NHWC_INLINE void chunk_bwd_sums(const nhwc_job *j, long p0, long p1, float *acc, const int fmt,
                                const ACTIVATION a)
{
    const int c_n = j->c;
    float xf[NHWC_BLOCK], yf[NHWC_BLOCK], df[NHWC_BLOCK];
    for (long p = p0; p < p1; ++p)
        FOR_BLOCKS(c0, m, c_n) {
            const long at = p * c_n + c0;
            load_backward(j, at, m, fmt, xf, yf, df);
            const float *mean = j->mean + c0, *den = j->den + c0, *sc = j->scale + c0,
                        *bi = j->bias + c0;
            float *s = acc + c0, *ss = acc + c_n + c0, *md = acc + 2 * c_n + c0,
                  *vd = acc + 3 * c_n + c0;
#pragma omp simd
            for (int i = 0; i < m; ++i) {
                const float xm = xf[i] - mean[i], xn = xm / den[i];
                const float d = df[i] * act_gv(yf[i], amp_bn_pre(xm, den[i], sc[i], bi[i]), a);
                const float dd = d * sc[i];
                s[i] += d;
                ss[i] += d * xn;
                md[i] += dd;
                vd[i] += dd * xm;
            }
        }
}

/* Counts, of the m values v rounded into h, those not zero (nz) and of them
 * those that rounded to zero (fl). */
NHWC_INLINE void count_flushes(const float *v, const uint16_t *h, int m, unsigned long long *nz,
                               unsigned long long *fl)
{
    unsigned n1 = 0, f1 = 0; /* 32-bit lanes in the loop */
    /* v != 0 from the bits (NaN included), which vectorises (amp_leaky_slope) */
#pragma omp simd reduction(+ : n1, f1)
    for (int i = 0; i < m; ++i) {
        const unsigned nonzero = (amp_f32_bits(v[i]) & 0x7fffffffu) != 0;
        n1 += nonzero;
        f1 += nonzero & ((h[i] & 0x7fffu) == 0);
    }
    *nz += n1;
    *fl += f1;
}

/* dh = half(d scale inv + kv (x - mean) + km), counting the rounding's flushes. */
NHWC_INLINE void chunk_bwd_dx(const nhwc_job *j, long p0, long p1, unsigned long long *nz,
                              unsigned long long *fl, const int fmt, const ACTIVATION a)
{
    const int c_n = j->c;
    float xf[NHWC_BLOCK], yf[NHWC_BLOCK], df[NHWC_BLOCK];
    unsigned long long n0 = 0, f0 = 0;
    for (long p = p0; p < p1; ++p)
        FOR_BLOCKS(c0, m, c_n) {
            const long at = p * c_n + c0;
            load_backward(j, at, m, fmt, xf, yf, df);
            const float *mean = j->mean + c0, *sc = j->scale + c0, *inv = j->inv + c0,
                        *kv = j->kv + c0, *km = j->km + c0, *den = j->den + c0,
                        *bi = j->bias + c0;
#pragma omp simd
            for (int i = 0; i < m; ++i) {
                const float xm = xf[i] - mean[i];
                const float pre = needs_input(a) ? amp_bn_pre(xm, den[i], sc[i], bi[i]) : 0.f;
                const float d = df[i] * act_gv(yf[i], pre, a) * sc[i];
                df[i] = amp_bn_dx(d, inv[i], kv[i], xm, km[i]);
            }
            amp_half_row_store(df, j->dh + at, m, fmt);
            count_flushes(df, j->dh + at, m, &n0, &f0);
        }
    *nz += n0;
    *fl += f0;
}

/* Without batch-norm: dh = half(dh act'(y)), acc[c] += it (the bias gradient). */
NHWC_INLINE void chunk_bwd_bias(const nhwc_job *j, long p0, long p1, float *acc,
                                unsigned long long *nz, unsigned long long *fl, const int fmt,
                                const ACTIVATION a)
{
    const int c_n = j->c;
    float xf[NHWC_BLOCK], yf[NHWC_BLOCK], df[NHWC_BLOCK];
    unsigned long long n0 = 0, f0 = 0;
    for (long p = p0; p < p1; ++p)
        FOR_BLOCKS(c0, m, c_n) {
            const long at = p * c_n + c0;
            if (needs_input(a)) amp_half_row_load(j->x + at, xf, m, fmt);
            amp_half_row_load(j->y + at, yf, m, fmt);
            amp_half_row_load(j->dh + at, df, m, fmt);
            const float *bi = j->bias + c0;
            float *s = acc + c0;
#pragma omp simd
            for (int i = 0; i < m; ++i) {
                const float pre = needs_input(a) ? xf[i] + bi[i] : 0.f;
                df[i] = df[i] * act_gv(yf[i], pre, a);
                s[i] += df[i];
            }
            amp_half_row_store(df, j->dh + at, m, fmt);
            count_flushes(df, j->dh + at, m, &n0, &f0);
        }
    *nz += n0;
    *fl += f0;
}

/* ---- one function per pass and instruction set, with the dtype and the
 * common activations as constants ---- */

typedef enum nhwc_pass {
    PASS_SUM,
    PASS_SQDEV,
    PASS_NORM,
    PASS_BIAS,
    PASS_BWD_SUMS,
    PASS_BWD_DX,
    PASS_BWD_BIAS
} nhwc_pass;

NHWC_INLINE void run_chunk(const nhwc_job *j, nhwc_pass pass, long p0, long p1, float *acc,
                           unsigned long long *nz, unsigned long long *fl, const int fmt,
                           const ACTIVATION a)
{
    switch (pass) {
    case PASS_SUM: chunk_sum(j, p0, p1, acc, fmt); break;
    case PASS_SQDEV: chunk_sqdev(j, p0, p1, acc, fmt); break;
    case PASS_NORM: chunk_norm(j, p0, p1, fmt, a); break;
    case PASS_BIAS: chunk_bias(j, p0, p1, fmt, a); break;
    case PASS_BWD_SUMS: chunk_bwd_sums(j, p0, p1, acc, fmt, a); break;
    case PASS_BWD_DX: chunk_bwd_dx(j, p0, p1, nz, fl, fmt, a); break;
    case PASS_BWD_BIAS: chunk_bwd_bias(j, p0, p1, acc, nz, fl, fmt, a); break;
    }
}

/* f16: the float16 format of the variant (AMP_HALF_F16C where it has F16C) */
NHWC_INLINE void chunk_any(const nhwc_job *j, nhwc_pass pass, long p0, long p1, float *acc,
                           unsigned long long *nz, unsigned long long *fl, const int f16)
{
    const ACTIVATION a = j->act;
    if (j->bf16) {
        if (a == LEAKY) run_chunk(j, pass, p0, p1, acc, nz, fl, AMP_HALF_BF16, LEAKY);
        else if (a == LINEAR) run_chunk(j, pass, p0, p1, acc, nz, fl, AMP_HALF_BF16, LINEAR);
        else if (a == MISH) run_chunk(j, pass, p0, p1, acc, nz, fl, AMP_HALF_BF16, MISH);
        else run_chunk(j, pass, p0, p1, acc, nz, fl, AMP_HALF_BF16, a);
    } else {
        if (a == LEAKY) run_chunk(j, pass, p0, p1, acc, nz, fl, f16, LEAKY);
        else if (a == LINEAR) run_chunk(j, pass, p0, p1, acc, nz, fl, f16, LINEAR);
        else if (a == MISH) run_chunk(j, pass, p0, p1, acc, nz, fl, f16, MISH);
        else run_chunk(j, pass, p0, p1, acc, nz, fl, f16, a);
    }
}

typedef void (*chunk_fn)(const nhwc_job *j, nhwc_pass pass, long p0, long p1, float *acc,
                         unsigned long long *nz, unsigned long long *fl);

#define NHWC_VARIANT(attr, isa, f16)                                                              \
    attr static void chunk_##isa(const nhwc_job *j, nhwc_pass pass, long p0, long p1, float *acc, \
                                 unsigned long long *nz, unsigned long long *fl)                  \
    {                                                                                             \
        chunk_any(j, pass, p0, p1, acc, nz, fl, f16);                                             \
    }

NHWC_VARIANT(, sse2, AMP_HALF_F16)
#ifdef AMP_HALF_ROWS_X86
NHWC_VARIANT(__attribute__((target("avx2,fma,f16c"))), avx2, AMP_HALF_F16C)
NHWC_VARIANT(__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))), avx512, AMP_HALF_F16C)
#define NHWC_X86 1
#endif

static chunk_fn chunk_kernel(void)
{
#ifdef NHWC_X86
    switch (amp_cpu_isa_used()) {
    case AMP_ISA_AVX512: return chunk_avx512;
    case AMP_ISA_AVX2: return chunk_avx2;
    default: break;
    }
#endif
    return chunk_sse2;
}

/* The tensor's layout for the passes: rows of w values, each k whole
 * positions (w = k c). Few channels (the first layers': 8, 16) make rows too
 * short to vectorise well, so k positions are taken as one row (w at least
 * NHWC_MIN_ROW), the per-channel values repeated k times; the rem positions
 * after the last whole row are a row of their own. */
#define NHWC_MIN_ROW 64

typedef struct nhwc_shape {
    int c, k, w;
    long rows, rem;
} nhwc_shape;

static nhwc_shape shape_of(long positions, int c)
{
    nhwc_shape sh;
    sh.c = c;
    sh.k = c >= NHWC_MIN_ROW ? 1 : (NHWC_MIN_ROW + c - 1) / c;
    sh.w = sh.k * c;
    sh.rows = positions / sh.k;
    sh.rem = positions % sh.k;
    return sh;
}

/* v (c values) repeated k times into dst (w values). */
static const float *repeated(const nhwc_shape *sh, const float *v, float *dst)
{
    for (int t = 0; t < sh->k; ++t) memcpy(dst + (size_t)t * sh->c, v, sh->c * sizeof(float));
    return dst;
}

/* A pass over every chunk of rows and the remaining positions; with sums > 0,
 * each chunk's sums in sums rows of w accumulators, added in chunk order
 * (the k copies of a channel in turn) into out (sums x c, zeroed here). */
static void run_pass(const nhwc_job *j, const nhwc_shape *sh, nhwc_pass pass, int sums,
                     float *out, unsigned long long *nz, unsigned long long *fl)
{
    const chunk_fn k = chunk_kernel();
    const size_t row = (size_t)sums * sh->w;
    float *part = sums ? calloc((size_t)(j->nchunks + 1) * row, sizeof(float)) : NULL;
    if (sums && !part) abort(); /* as darknet's allocations inside a step */
    unsigned long long n0 = 0, f0 = 0;
    const int parallel = j->positions * j->c > NHWC_MIN_PARALLEL;
#pragma omp parallel for schedule(static) reduction(+ : n0, f0) if (parallel)
    for (int q = 0; q < j->nchunks; ++q) {
        const long p0 = q * j->chunk, p1 = p0 + j->chunk < j->positions ? p0 + j->chunk
                                                                        : j->positions;
        k(j, pass, p0, p1, part ? part + (size_t)q * row : NULL, &n0, &f0);
    }
    float *last = part ? part + (size_t)j->nchunks * row : NULL;
    if (sh->rem) { /* the positions after the last whole row: rows of c */
        nhwc_job r = *j;
        const long at = sh->rows * sh->w;
        r.c = sh->c;
        r.positions = sh->rem;
        r.x = j->x ? j->x + at : NULL;
        r.y = j->y ? j->y + at : NULL;
        r.dh = j->dh ? j->dh + at : NULL;
        k(&r, pass, 0, sh->rem, last, &n0, &f0); /* sums: rows of c in last */
    }
    if (nz) *nz += n0, *fl += f0;
    if (!sums) return;
    memset(out, 0, (size_t)sums * sh->c * sizeof(float));
    for (int q = 0; q < j->nchunks; ++q)
        for (int s = 0; s < sums; ++s)
            for (int t = 0; t < sh->k; ++t) {
                const float *pq = part + (size_t)q * row + (size_t)s * sh->w + (size_t)t * sh->c;
                for (int c = 0; c < sh->c; ++c) out[s * sh->c + c] += pq[c];
            }
    if (sh->rem)
        for (int i = 0; i < sums * sh->c; ++i) out[i] += last[i];
    free(part);
}

/* The job for l's NHWC tensors (shape sh). */
static nhwc_job job_for(const layer *l, const amp_tail_half *th, const nhwc_shape *sh)
{
    nhwc_job j = {0};
    j.positions = sh->rows;
    j.c = sh->w;
    long chunk = (NHWC_CHUNK_VALUES + sh->w - 1) / sh->w;
    const long least = (j.positions + NHWC_MAX_CHUNKS - 1) / NHWC_MAX_CHUNKS;
    j.chunk = chunk > least ? chunk : least;
    if (j.chunk < 1) j.chunk = 1;
    j.nchunks = (int)((j.positions + j.chunk - 1) / j.chunk);
    j.bf16 = th->bf16;
    j.act = l->activation;
    j.y = th->y;
    j.x = th->x ? th->x : th->y; /* without batch-norm, x only for mish and the like */
    j.dh = th->dh;
    return j;
}

/* Per-channel work arrays: k rows of n floats. */
static float *rows_of(int k, int n)
{
    float *p = calloc((size_t)k * n, sizeof(float));
    if (!p) abort();
    return p;
}

void amp_tail_forward_nhwc(layer l, network net, int nbias, int bias_size, amp_bn_formula bn,
                           const amp_tail_half *th)
{
    const nhwc_shape sh = shape_of((long)l.batch * bias_size, nbias);
    nhwc_job j = job_for(&l, th, &sh);
    const int n = nbias, w = sh.w;
    float *wide = rows_of(4, w); /* mean, denominator, scale, bias, each repeated */
    if (!l.batch_normalize) {
        j.bias = repeated(&sh, l.biases, wide + 3 * w);
        run_pass(&j, &sh, PASS_BIAS, 0, NULL, NULL, NULL);
        free(wide);
        return;
    }
    const int cudnn = bn == AMP_BN_CUDNN;
    float *c2 = rows_of(2, n), *mean = c2, *den = c2 + n;
    if (net.train) {
        const long count = (long)l.batch * bias_size;
        run_pass(&j, &sh, PASS_SUM, 1, mean, NULL, NULL);
        for (int f = 0; f < n; ++f) mean[f] = amp_bn_mean(mean[f], count);
        j.mean = repeated(&sh, mean, wide);
        run_pass(&j, &sh, PASS_SQDEV, 1, den, NULL, NULL);
        for (int f = 0; f < n; ++f) {
            l.mean[f] = mean[f];
            amp_bn_variance(den[f], count, cudnn, mean[f], &l.variance[f], &l.rolling_mean[f],
                            &l.rolling_variance[f]);
        }
    } else {
        memcpy(mean, l.rolling_mean, n * sizeof(float));
    }
    const float *var = net.train ? l.variance : l.rolling_variance;
    for (int f = 0; f < n; ++f) den[f] = amp_bn_den(var[f], cudnn);
    j.mean = repeated(&sh, mean, wide);
    j.den = repeated(&sh, den, wide + w);
    j.scale = repeated(&sh, l.scales, wide + 2 * w);
    j.bias = repeated(&sh, l.biases, wide + 3 * w);
    run_pass(&j, &sh, PASS_NORM, 0, NULL, NULL, NULL);
    free(c2);
    free(wide);
}

void amp_tail_backward_nhwc(layer l, network net, int nbias, int bias_size,
                            const amp_tail_half *th)
{
    const nhwc_shape sh = shape_of((long)l.batch * bias_size, nbias);
    nhwc_job j = job_for(&l, th, &sh);
    const int n = nbias, w = sh.w;
    unsigned long long nz = 0, fl = 0;
    if (!l.batch_normalize) {
        float *s = rows_of(1, n), *wide = rows_of(1, w);
        j.bias = repeated(&sh, l.biases, wide);
        run_pass(&j, &sh, PASS_BWD_BIAS, 1, s, &nz, &fl);
        for (int f = 0; f < n; ++f) l.bias_updates[f] += s[f];
        free(wide);
        free(s);
    } else {
        const float *mean = net.train ? l.mean : l.rolling_mean;
        const float *variance = net.train ? l.variance : l.rolling_variance;
        /* per channel: the four sums, the denominator, the inverse deviation,
         * the two correction terms; and seven of them repeated */
        float *c8 = rows_of(8, n), *sums = c8, *den = c8 + 4 * n, *inv = c8 + 5 * n;
        float *kv = c8 + 6 * n, *km = c8 + 7 * n;
        float *wide = rows_of(7, w);
        for (int f = 0; f < n; ++f) /* the forward's normalisation, to make x_norm again */
            den[f] = amp_bn_den(variance[f], th->cudnn);
        j.mean = repeated(&sh, mean, wide);
        j.den = repeated(&sh, den, wide + w);
        j.scale = repeated(&sh, l.scales, wide + 2 * w);
        j.bias = repeated(&sh, l.biases, wide + 6 * w);
        run_pass(&j, &sh, PASS_BWD_SUMS, 4, sums, NULL, NULL);
        const float count = (float)((long)l.batch * bias_size);
        for (int f = 0; f < n; ++f) {
            const amp_bn_terms t =
                amp_bn_backward_terms(sums[2 * n + f], sums[3 * n + f], variance[f], count);
            l.bias_updates[f] += sums[f];
            l.scale_updates[f] += sums[n + f];
            l.mean_delta[f] = t.mean_delta;
            l.variance_delta[f] = t.variance_delta;
            inv[f] = t.inv, kv[f] = t.kv, km[f] = t.km;
        }
        j.inv = repeated(&sh, inv, wide + 3 * w);
        j.kv = repeated(&sh, kv, wide + 4 * w);
        j.km = repeated(&sh, km, wide + 5 * w);
        run_pass(&j, &sh, PASS_BWD_DX, 0, NULL, &nz, &fl);
        free(wide);
        free(c8);
    }
    if (th->nonzero) *th->nonzero += nz, *th->flushed += fl;
}

/* A half layer's tail on the activation plan's NHWC half storage, on the
 * device: batch-norm (or bias), the activation, and their gradients, with
 * float32 arithmetic between a half read and a half write, as the CPU's
 * tail_nhwc.c computes them. Both take their element and channel math from
 * plugin/math/tail_math.h and act_math.h, so that the host's tests cover
 * this file's arithmetic; gpu.kernels compares the two on the device.
 *
 * Sums over a channel are made per chunk of positions, each chunk in order,
 * then the chunks' sums added in chunk order by one thread per channel: the
 * chunks depend on the tensor's shape only, so a step's statistics are the
 * same from run to run (no atomics on floats). A block is 32 channels by 8
 * chunks: a warp reads 32 neighbouring channels of one position.
 *
 * The forward with batch-norm while training: sums -> mean -> sums of
 * squared deviations -> variance, rolling statistics -> normalise, scale,
 * bias, activate and round, in one pass. The backward: the forward's
 * denominator -> the four sums (d, d x_norm, d scale, d scale xm) -> the
 * parameter gradients and the data gradient's terms -> the data gradient,
 * rounded into dh and its flushes counted, in one pass. */
#include "amp_cuda.h"
#include "cuda_check.h"
#include "math/half_format.h"
#include "math/tail_math.h"

#include <stdio.h>

#define TAIL_CH 32    /* channels of a block */
#define TAIL_CHUNKS 8 /* chunks of a block */
#define TAIL_MAX_CHUNKS 512
#define TAIL_SUMS 4 /* the most sums a pass makes per channel */

/* The chunks of a tensor: positions per chunk and their count. */
static __host__ __device__ long tail_chunk(long positions)
{
    const long c = (positions + TAIL_MAX_CHUNKS - 1) / TAIL_MAX_CHUNKS;
    return c > 0 ? c : 1;
}

static __host__ __device__ int tail_nchunks(long positions)
{
    const long c = tail_chunk(positions);
    return (int)((positions + c - 1) / c);
}

extern "C" size_t amp_cuda_tail_work_floats(long positions, int c)
{
    /* the chunks' sums, then per channel: den, inv, kv, km */
    return ((size_t)tail_nchunks(positions) * TAIL_SUMS + 4) * (size_t)c;
}

static __device__ __forceinline__ float ld(const uint16_t *p, long i, int bf16)
{
    return bf16 ? amp_bf16_to_f32(p[i]) : amp_f16_to_f32(p[i]);
}

static __device__ __forceinline__ uint16_t rn(float v, int bf16)
{
    return bf16 ? amp_f32_to_bf16(v) : amp_f32_to_f16(v);
}

/* What the element passes and the sums read. */
typedef struct tail_args {
    long positions;
    int c, bf16, act;
    const uint16_t *x, *y, *dh;
    const float *mean, *den, *scale, *bias, *inv, *kv, *km;
} tail_args;

enum { SUM_X, SUM_SQDEV, SUM_BWD, SUM_BWD_BIAS };

static __device__ __forceinline__ void bwd_values(const tail_args &a, long i, int ch, float *xm,
                                                  float *xn, float *d)
{
    *xm = ld(a.x, i, a.bf16) - a.mean[ch];
    *xn = *xm / a.den[ch];
    const float pre = amp_bn_pre(*xm, a.den[ch], a.scale[ch], a.bias[ch]);
    *d = ld(a.dh, i, a.bf16) * amp_act_grad(ld(a.y, i, a.bf16), pre, a.act);
}

/* Each thread: one channel's sums over one chunk, in position order, into
 * part[(q * TAIL_SUMS + s) * c + ch]. */
static __global__ void sums_kernel(tail_args a, int which, float *part)
{
    const int ch = blockIdx.y * TAIL_CH + threadIdx.x;
    const int q = blockIdx.x * TAIL_CHUNKS + threadIdx.y;
    const long chunk = tail_chunk(a.positions);
    const long p0 = (long)q * chunk;
    if (ch >= a.c || p0 >= a.positions) return;
    const long p1 = p0 + chunk < a.positions ? p0 + chunk : a.positions;
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    for (long p = p0; p < p1; ++p) {
        const long i = p * a.c + ch;
        if (which == SUM_X) {
            s0 += ld(a.x, i, a.bf16);
        } else if (which == SUM_SQDEV) {
            const float dv = ld(a.x, i, a.bf16) - a.mean[ch];
            s0 += dv * dv;
        } else { /* SUM_BWD */
            float xm, xn, d;
            bwd_values(a, i, ch, &xm, &xn, &d);
            const float dd = d * a.scale[ch];
            s0 += d;
            s1 += d * xn;
            s2 += dd;
            s3 += dd * xm;
        }
    }
    float *out = part + (size_t)q * TAIL_SUMS * a.c + ch;
    out[0] = s0;
    if (which == SUM_BWD) out[a.c] = s1, out[2 * a.c] = s2, out[3 * a.c] = s3;
}

/* The chunks' sums s of channel ch, added in chunk order. */
static __device__ float chunk_total(const float *part, int nchunks, int c, int s, int ch)
{
    float t = 0.f;
    for (int q = 0; q < nchunks; ++q) t += part[((size_t)q * TAIL_SUMS + s) * c + ch];
    return t;
}

static __global__ void mean_kernel(const float *part, int nchunks, int c, long count, float *mean)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c) mean[ch] = amp_bn_mean(chunk_total(part, nchunks, c, 0, ch), count);
}

static __global__ void variance_kernel(const float *part, int nchunks, int c, long count,
                                       int cudnn, const float *mean, float *variance,
                                       float *rolling_mean, float *rolling_variance)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c)
        amp_bn_variance(chunk_total(part, nchunks, c, 0, ch), count, cudnn, mean[ch],
                        &variance[ch], &rolling_mean[ch], &rolling_variance[ch]);
}

static __global__ void den_kernel(const float *variance, int c, int cudnn, float *den)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c) den[ch] = amp_bn_den(variance[ch], cudnn);
}

/* The backward's parameter gradients (added) and the data gradient's terms. */
static __global__ void terms_kernel(const float *part, int nchunks, int c, float count,
                                    const float *variance, float *bias_updates,
                                    float *scale_updates, float *mean_delta,
                                    float *variance_delta, float *inv, float *kv, float *km)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    const amp_bn_terms t = amp_bn_backward_terms(chunk_total(part, nchunks, c, 2, ch),
                                                 chunk_total(part, nchunks, c, 3, ch),
                                                 variance[ch], count);
    bias_updates[ch] += chunk_total(part, nchunks, c, 0, ch);
    scale_updates[ch] += chunk_total(part, nchunks, c, 1, ch);
    mean_delta[ch] = t.mean_delta;
    variance_delta[ch] = t.variance_delta;
    inv[ch] = t.inv, kv[ch] = t.kv, km[ch] = t.km;
}

/* y = act((x - mean) / den scale + bias), or without batch-norm (mean NULL)
 * y = act(x + bias); x may be y. */
static __global__ void norm_kernel(tail_args a, uint16_t *y)
{
    const long n = a.positions * a.c;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        const int ch = (int)(i % a.c);
        const float v = ld(a.x, i, a.bf16);
        const float pre = a.mean ? amp_bn_pre(v - a.mean[ch], a.den[ch], a.scale[ch], a.bias[ch])
                                 : v + a.bias[ch];
        y[i] = rn(amp_act(pre, a.act), a.bf16);
    }
}

/* Of a warp's values rounded into half: those not zero (NaN included) and,
 * of them, those that rounded to zero, added into counts[0] and counts[1]. */
static __device__ __forceinline__ void count_flush(float v, uint16_t h, int active,
                                                   unsigned long long *counts)
{
    const unsigned nz = active && (amp_f32_bits(v) & 0x7fffffffu) != 0;
    const unsigned fl = nz && (h & 0x7fffu) == 0;
    const unsigned nzb = __ballot_sync(0xffffffffu, nz), flb = __ballot_sync(0xffffffffu, fl);
    if ((threadIdx.x & 31) == 0 && nzb) {
        atomicAdd(&counts[0], (unsigned long long)__popc(nzb));
        if (flb) atomicAdd(&counts[1], (unsigned long long)__popc(flb));
    }
}

/* With batch-norm: dh = half(d scale inv + kv xm + km). Without (mean NULL):
 * dh = half(dh act'), and the bias gradient's chunk sums are made apart
 * (bias_sums_kernel) from the same float values. */
static __global__ void dx_kernel(tail_args a, uint16_t *dh, unsigned long long *counts)
{
    const long n = a.positions * a.c;
    const long stride = (long)gridDim.x * blockDim.x;
    /* every thread of a warp runs the same number of rounds (the ballots) */
    const long rounds = (n + stride - 1) / stride;
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    for (long r = 0; r < rounds; ++r, i += stride) {
        const int active = i < n;
        float v = 0.f;
        uint16_t h = 0;
        if (active) {
            const int ch = (int)(i % a.c);
            if (a.mean) {
                float xm, xn, d;
                bwd_values(a, i, ch, &xm, &xn, &d);
                v = amp_bn_dx(d * a.scale[ch], a.inv[ch], a.kv[ch], xm, a.km[ch]);
            } else {
                const float pre =
                    amp_act_needs_input(a.act) ? ld(a.x, i, a.bf16) + a.bias[ch] : 0.f;
                v = ld(a.dh, i, a.bf16) * amp_act_grad(ld(a.y, i, a.bf16), pre, a.act);
            }
            h = rn(v, a.bf16);
            dh[i] = h;
        }
        if (counts) count_flush(v, h, active, counts);
    }
}

/* Without batch-norm: each chunk's sum of d = dh act' (before dh is
 * overwritten), one channel by one thread, in position order. */
static __global__ void bias_sums_kernel(tail_args a, float *part)
{
    const int ch = blockIdx.y * TAIL_CH + threadIdx.x;
    const int q = blockIdx.x * TAIL_CHUNKS + threadIdx.y;
    const long chunk = tail_chunk(a.positions);
    const long p0 = (long)q * chunk;
    if (ch >= a.c || p0 >= a.positions) return;
    const long p1 = p0 + chunk < a.positions ? p0 + chunk : a.positions;
    float s = 0.f;
    for (long p = p0; p < p1; ++p) {
        const long i = p * a.c + ch;
        const float pre = amp_act_needs_input(a.act) ? ld(a.x, i, a.bf16) + a.bias[ch] : 0.f;
        s += ld(a.dh, i, a.bf16) * amp_act_grad(ld(a.y, i, a.bf16), pre, a.act);
    }
    part[(size_t)q * TAIL_SUMS * a.c + ch] = s;
}

static __global__ void add_total_kernel(const float *part, int nchunks, int c, float *into)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c) into[ch] += chunk_total(part, nchunks, c, 0, ch);
}

static unsigned int blocks_for(long n, int threads)
{
    const long b = (n + threads - 1) / threads;
    return (unsigned int)(b > 65535 ? 65535 : b < 1 ? 1 : b);
}

static dim3 sums_grid(long positions, int c)
{
    return dim3((unsigned)((tail_nchunks(positions) + TAIL_CHUNKS - 1) / TAIL_CHUNKS),
                (unsigned)((c + TAIL_CH - 1) / TAIL_CH));
}

static tail_args args_of(const amp_cuda_tail *t)
{
    tail_args a = {};
    a.positions = t->positions;
    a.c = t->c;
    a.bf16 = t->bf16;
    a.act = t->act;
    a.x = t->x ? t->x : t->y;
    a.y = t->y;
    a.dh = t->dh;
    a.scale = t->scales;
    a.bias = t->biases;
    return a;
}

extern "C" int amp_cuda_tail_supports(int act)
{
    return amp_act_known(act);
}

#define LAUNCHED()                                                                         \
    do {                                                                                   \
        const amp_status st_ = AMP_CUDA_LAUNCHED(err, errlen);                             \
        if (st_ != AMP_OK) return st_;                                                     \
    } while (0)

extern "C" amp_status amp_cuda_tail_forward(const amp_cuda_tail *t, cudaStream_t stream, char *err,
                                            size_t errlen)
{
    if (t->positions <= 0 || t->c <= 0) return AMP_OK;
    if (!amp_act_known(t->act)) {
        snprintf(err, errlen, "amp_cuda_tail_forward: activation %d has no half tail", t->act);
        return AMP_ERR_INVALID;
    }
    tail_args a = args_of(t);
    const long n = t->positions * t->c;
    const int ct = (t->c + 255) / 256;
    if (!t->batch_normalize) {
        norm_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(a, t->y);
        LAUNCHED();
        return AMP_OK;
    }
    const int nchunks = tail_nchunks(t->positions);
    float *part = t->work, *den = t->work + (size_t)nchunks * TAIL_SUMS * t->c;
    const dim3 block(TAIL_CH, TAIL_CHUNKS), grid = sums_grid(t->positions, t->c);
    if (t->train) {
        sums_kernel<<<grid, block, 0, stream>>>(a, SUM_X, part);
        LAUNCHED();
        mean_kernel<<<ct, 256, 0, stream>>>(part, nchunks, t->c, t->positions, t->mean);
        LAUNCHED();
        a.mean = t->mean;
        sums_kernel<<<grid, block, 0, stream>>>(a, SUM_SQDEV, part);
        LAUNCHED();
        variance_kernel<<<ct, 256, 0, stream>>>(part, nchunks, t->c, t->positions, t->cudnn,
                                                t->mean, t->variance, t->rolling_mean,
                                                t->rolling_variance);
        LAUNCHED();
    }
    a.mean = t->train ? t->mean : t->rolling_mean;
    den_kernel<<<ct, 256, 0, stream>>>(t->train ? t->variance : t->rolling_variance, t->c,
                                       t->cudnn, den);
    LAUNCHED();
    a.den = den;
    norm_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(a, t->y);
    LAUNCHED();
    return AMP_OK;
}

extern "C" amp_status amp_cuda_tail_backward(const amp_cuda_tail *t, cudaStream_t stream,
                                             char *err, size_t errlen)
{
    if (t->positions <= 0 || t->c <= 0) return AMP_OK;
    if (!amp_act_known(t->act)) {
        snprintf(err, errlen, "amp_cuda_tail_backward: activation %d has no half tail", t->act);
        return AMP_ERR_INVALID;
    }
    tail_args a = args_of(t);
    const long n = t->positions * t->c;
    const int ct = (t->c + 255) / 256;
    const int nchunks = tail_nchunks(t->positions);
    float *part = t->work, *per = t->work + (size_t)nchunks * TAIL_SUMS * t->c;
    float *den = per, *inv = per + t->c, *kv = per + 2 * t->c, *km = per + 3 * t->c;
    const dim3 block(TAIL_CH, TAIL_CHUNKS), grid = sums_grid(t->positions, t->c);
    /* the kernel writes dh in place while others read it: one pass reads it,
     * the sums before */
    const int blocks = (int)blocks_for(n, 256);
    if (!t->batch_normalize) {
        bias_sums_kernel<<<grid, block, 0, stream>>>(a, part);
        LAUNCHED();
        add_total_kernel<<<ct, 256, 0, stream>>>(part, nchunks, t->c, t->bias_updates);
        LAUNCHED();
        dx_kernel<<<blocks, 256, 0, stream>>>(a, t->dh, t->counts);
        LAUNCHED();
        return AMP_OK;
    }
    const float *variance = t->train ? t->variance : t->rolling_variance;
    den_kernel<<<ct, 256, 0, stream>>>(variance, t->c, t->cudnn, den);
    LAUNCHED();
    a.mean = t->train ? t->mean : t->rolling_mean;
    a.den = den;
    sums_kernel<<<grid, block, 0, stream>>>(a, SUM_BWD, part);
    LAUNCHED();
    terms_kernel<<<ct, 256, 0, stream>>>(part, nchunks, t->c, (float)t->positions, variance,
                                         t->bias_updates, t->scale_updates, t->mean_delta,
                                         t->variance_delta, inv, kv, km);
    LAUNCHED();
    a.inv = inv, a.kv = kv, a.km = km;
    dx_kernel<<<blocks, 256, 0, stream>>>(a, t->dh, t->counts);
    LAUNCHED();
    return AMP_OK;
}

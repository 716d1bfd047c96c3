/* A half layer's tail on the activation plan's NHWC half storage, on the
 * device: batch-norm (or bias), the activation, and their gradients, with
 * float32 arithmetic between a half read and a half write, as the CPU's
 * tail_nhwc.c computes them. Both take their element and channel math from
 * plugin/math/tail_math.h and act_math.h, so that the host's tests cover
 * this file's arithmetic; gpu.plan_kernels compares the two on the device.
 *
 * Sums over a channel are made per chunk of positions (at most 1024
 * chunks), a block per chunk and tile of up to 32 channels, its rows of
 * threads taking every rows-th position in order, the rows then added in
 * order; the chunks' sums are added by rows of chunks, then the rows in
 * order. The order depends on the tensor's shape only, so a step's
 * statistics are the same from run to run (no atomics on floats). Where
 * the channels come in eights every pass takes 8 values (16 bytes) per
 * thread, and a warp reads 512 contiguous bytes (a position's channels, or
 * neighbouring positions' where there are fewer than 256); else one value
 * per thread, a warp 32 channels.
 *
 * Compiled without contracting a product and a sum into one fused
 * multiply-add (-fmad=false, cuda/CMakeLists.txt), as the host computes
 * tail_math.h; the device's expf, exp and powf are its own.
 *
 * The forward with batch-norm while training: sums -> mean -> sums of
 * squared deviations -> variance, rolling statistics -> normalise, scale,
 * bias, activate and round, in one pass. The backward: the forward's
 * denominator -> the four sums (d, d x_norm, d scale, d scale xm) -> the
 * parameter gradients and the data gradient's terms -> the data gradient,
 * rounded into dh and its flushes counted, in one pass. */
#include "amp_cuda.h"
#include "cuda_check.h"
#include "half_vec.cuh"
#include "math/fastdiv.h"
#include "math/half_format.h"
#include "math/tail_math.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>

#define TAIL_THREADS 256
#define TAIL_MAX_CHUNKS 1024
#define TAIL_MIN_CHUNK 8 /* positions */
#define TAIL_SUMS 4      /* the most sums a pass makes per channel */
#define TAIL_VEC AMP_HALF_VEC /* values per thread in the element passes (16 bytes) */

/* The chunks of a tensor: positions per chunk and their count. */
static __host__ __device__ long tail_chunk(long positions)
{
    const long c = (positions + TAIL_MAX_CHUNKS - 1) / TAIL_MAX_CHUNKS;
    return c > TAIL_MIN_CHUNK ? c : TAIL_MIN_CHUNK;
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

/* Conversions through the hardware's instructions: bit for bit
 * half_format.h's on every non-NaN value (gpu.kernels checks the claim over
 * every pattern); a NaN stays a NaN, its payload the hardware's. */
static __device__ __forceinline__ float cvt(uint16_t h, int bf16)
{
    return bf16 ? __bfloat162float(__ushort_as_bfloat16(h)) : __half2float(__ushort_as_half(h));
}

static __device__ __forceinline__ uint16_t rn(float v, int bf16)
{
    return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
}

/* What the element passes and the sums read. */
typedef struct tail_args {
    long positions;
    int c, bf16, act;
    amp_divider cdiv; /* of c: an element's channel (chan_of) */
    const uint16_t *x, *y, *dh;
    const float *mean, *den, *scale, *bias, *inv, *kv, *km;
} tail_args;

enum { SUM_X, SUM_SQDEV, SUM_BWD, SUM_BWD_BIAS };

/* Element i's channel: a multiply-high and a shift below 2^31 (fastdiv.h),
 * a 64-bit remainder beyond. */
static __device__ __forceinline__ int chan_of(const tail_args &a, long i)
{
    if (i >= (long)AMP_FASTDIV_MAX) return (int)(i % a.c);
    uint32_t r;
    amp_divmod(a.cdiv, (uint32_t)i, &r);
    return (int)r;
}

/* The backward's values of one element: xm = x - mean, x_norm, and d = dh
 * act'(y, the value before act). */
static __device__ __forceinline__ void bwd_values(const tail_args &a, float x, float y, float dh,
                                                  int ch, float *xm, float *xn, float *d)
{
    *xm = x - a.mean[ch];
    *xn = *xm / a.den[ch];
    const float pre = amp_bn_pre(*xm, a.den[ch], a.scale[ch], a.bias[ch]);
    *d = dh * amp_act_grad(y, pre, a.act);
}

/* Without batch-norm: d = dh act'(y, x + bias). */
static __device__ __forceinline__ float bias_d(const tail_args &a, float x, float y, float dh, int ch)
{
    const float pre = amp_act_needs_input(a.act) ? x + a.bias[ch] : 0.f;
    return dh * amp_act_grad(y, pre, a.act);
}

/* (amp_load_v / amp_store_v, half_vec.cuh: V = TAIL_VEC values from index
 * i in one 16-byte access, i a multiple of 8 and c too, so that they are
 * channels ch .. ch + 7 of one position.) */

/* The sums' block shape: lanes threads across a position (each V channels;
 * at most 32 lanes, a tile of lanes V channels) by rows of positions. */
static __host__ __device__ __forceinline__ int sums_lanes(int c, int v)
{
    const int l = c / v;
    return l < 32 ? l : 32;
}

/* The channel sums of one chunk of positions (blockIdx.x) for a tile of
 * channels (blockIdx.y): the block's threads are lanes across the tile (V
 * channels each) by rows = TAIL_THREADS / lanes, a row taking every
 * rows-th position of the chunk in order; then the rows' sums added in row
 * order. One value per chunk, sum and channel into part[(q * TAIL_SUMS + s)
 * * c + ch]: the same order every run. */
template <int V>
static __global__ void __launch_bounds__(TAIL_THREADS) sums_kernel(tail_args a, int which, float *part)
{
    __shared__ float sm[TAIL_SUMS][TAIL_THREADS * V];
    const int lanes = sums_lanes(a.c, V), rows = TAIL_THREADS / lanes, tile = lanes * V;
    const int t = threadIdx.x, lane = t % lanes, row = t / lanes;
    const int ch0 = blockIdx.y * tile + lane * V, q = blockIdx.x;
    const long chunk = tail_chunk(a.positions), p0 = (long)q * chunk;
    const long p1 = p0 + chunk < a.positions ? p0 + chunk : a.positions;
    const int nsums = which == SUM_BWD ? 4 : 1;
    float s0[V], s1[V], s2[V], s3[V];
    for (int k = 0; k < V; ++k) s0[k] = s1[k] = s2[k] = s3[k] = 0.f;
    if (row < rows && ch0 < a.c)
        for (long p = p0 + row; p < p1; p += rows) {
            const long i = p * a.c + ch0;
            uint16_t hx[V], hy[V], hd[V];
            if (which != SUM_BWD_BIAS || amp_act_needs_input(a.act)) amp_load_v<V>(a.x, i, hx);
            if (which >= SUM_BWD) amp_load_v<V>(a.y, i, hy), amp_load_v<V>(a.dh, i, hd);
            for (int k = 0; k < V; ++k) {
                const int ch = ch0 + k;
                if (which == SUM_X) {
                    s0[k] += cvt(hx[k], a.bf16);
                } else if (which == SUM_SQDEV) {
                    const float dv = cvt(hx[k], a.bf16) - a.mean[ch];
                    s0[k] += dv * dv;
                } else if (which == SUM_BWD) {
                    float xm, xn, d;
                    bwd_values(a, cvt(hx[k], a.bf16), cvt(hy[k], a.bf16), cvt(hd[k], a.bf16), ch,
                               &xm, &xn, &d);
                    const float dd = d * a.scale[ch];
                    s0[k] += d;
                    s1[k] += d * xn;
                    s2[k] += dd;
                    s3[k] += dd * xm;
                } else { /* SUM_BWD_BIAS */
                    const float x = amp_act_needs_input(a.act) ? cvt(hx[k], a.bf16) : 0.f;
                    s0[k] += bias_d(a, x, cvt(hy[k], a.bf16), cvt(hd[k], a.bf16), ch);
                }
            }
        }
    for (int k = 0; k < V; ++k) {
        const int at = row * tile + lane * V + k; /* row-major [rows][tile] */
        if (row < rows) sm[0][at] = s0[k], sm[1][at] = s1[k], sm[2][at] = s2[k], sm[3][at] = s3[k];
    }
    __syncthreads();
    /* the first tile threads: one channel each, its rows in order */
    const int ch = blockIdx.y * tile + t;
    if (t >= tile || ch >= a.c) return;
    for (int k = 0; k < nsums; ++k) {
        float tot = 0.f;
        for (int r = 0; r < rows; ++r) tot += sm[k][r * tile + t];
        part[((size_t)q * TAIL_SUMS + k) * a.c + ch] = tot;
    }
}

/* What the chunks' totals make, per channel. */
enum { FIN_MEAN, FIN_VARIANCE, FIN_TERMS, FIN_BIAS };

typedef struct fin_args {
    int c, nchunks, nsums, mode, cudnn;
    long count;
    float *mean, *variance, *rolling_mean, *rolling_variance, *den;
    float *bias_updates, *scale_updates, *mean_delta, *variance_delta, *inv, *kv, *km;
    const float *fwd_variance; /* FIN_TERMS: the forward's variance */
} fin_args;

/* The chunks' sums of 32 channels (blockIdx.x), 8 rows of threads each
 * adding every 8th chunk in order, then the rows in order; then the
 * channel's values from the totals (tail_math.h). */
static __global__ void __launch_bounds__(256) fin_kernel(const float *part, fin_args f)
{
    __shared__ float sm[TAIL_SUMS][8][32];
    const int lane = threadIdx.x, row = threadIdx.y, ch = blockIdx.x * 32 + lane;
    for (int k = 0; k < f.nsums; ++k) {
        float s = 0.f;
        if (ch < f.c)
            for (int q = row; q < f.nchunks; q += 8) s += part[((size_t)q * TAIL_SUMS + k) * f.c + ch];
        sm[k][row][lane] = s;
    }
    __syncthreads();
    if (row != 0 || ch >= f.c) return;
    float tot[TAIL_SUMS] = {0.f, 0.f, 0.f, 0.f};
    for (int k = 0; k < f.nsums; ++k)
        for (int r = 0; r < 8; ++r) tot[k] += sm[k][r][lane];
    if (f.mode == FIN_MEAN) {
        f.mean[ch] = amp_bn_mean(tot[0], f.count);
    } else if (f.mode == FIN_VARIANCE) {
        amp_bn_variance(tot[0], f.count, f.cudnn, f.mean[ch], &f.variance[ch], &f.rolling_mean[ch],
                        &f.rolling_variance[ch]);
        f.den[ch] = amp_bn_den(f.variance[ch], f.cudnn);
    } else if (f.mode == FIN_TERMS) {
        const amp_bn_terms t = amp_bn_backward_terms(tot[2], tot[3], f.fwd_variance[ch], (float)f.count);
        f.bias_updates[ch] += tot[0];
        f.scale_updates[ch] += tot[1];
        f.mean_delta[ch] = t.mean_delta;
        f.variance_delta[ch] = t.variance_delta;
        f.inv[ch] = t.inv, f.kv[ch] = t.kv, f.km[ch] = t.km;
    } else { /* FIN_BIAS */
        f.bias_updates[ch] += tot[0];
    }
}

static __global__ void den_kernel(const float *variance, int c, int cudnn, float *den)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c) den[ch] = amp_bn_den(variance[ch], cudnn);
}

/* y = act((x - mean) / den scale + bias), or without batch-norm (mean NULL)
 * y = act(x + bias); x may be y. V values per thread. */
template <int V> static __global__ void norm_kernel(tail_args a, uint16_t *y)
{
    const long n = a.positions * a.c / V;
    for (long v = blockIdx.x * (long)blockDim.x + threadIdx.x; v < n;
         v += (long)gridDim.x * blockDim.x) {
        const long i = v * V;
        const int ch0 = chan_of(a, i);
        uint16_t hx[V], hy[V];
        amp_load_v<V>(a.x, i, hx);
        for (int k = 0; k < V; ++k) {
            const int ch = ch0 + k;
            const float x = cvt(hx[k], a.bf16);
            const float pre = a.mean ? amp_bn_pre(x - a.mean[ch], a.den[ch], a.scale[ch], a.bias[ch])
                                     : x + a.bias[ch];
            hy[k] = rn(amp_act(pre, a.act), a.bf16);
        }
        amp_store_v<V>(y, i, hy);
    }
}

/* Of a warp's values rounded into half: those not zero (NaN included) and,
 * of them, those that rounded to zero, added into counts[0] and counts[1]. */
static __device__ __forceinline__ void count_flush(unsigned nz, unsigned fl,
                                                   unsigned long long *counts)
{
    for (int o = 16; o > 0; o >>= 1) {
        nz += __shfl_down_sync(0xffffffffu, nz, o);
        fl += __shfl_down_sync(0xffffffffu, fl, o);
    }
    if ((threadIdx.x & 31) == 0 && nz) {
        atomicAdd(&counts[0], (unsigned long long)nz);
        if (fl) atomicAdd(&counts[1], (unsigned long long)fl);
    }
}

/* With batch-norm: dh = half(d scale inv + kv xm + km). Without (mean NULL):
 * dh = half(dh act'). V values per thread; every thread of a warp runs the
 * same rounds (the shuffles of the flush count). */
template <int V> static __global__ void dx_kernel(tail_args a, uint16_t *dh, unsigned long long *counts)
{
    const long n = a.positions * a.c / V;
    const long stride = (long)gridDim.x * blockDim.x;
    const long rounds = (n + stride - 1) / stride;
    long v = blockIdx.x * (long)blockDim.x + threadIdx.x;
    for (long r = 0; r < rounds; ++r, v += stride) {
        unsigned nz = 0, fl = 0;
        if (v < n) {
            const long i = v * V;
            const int ch0 = chan_of(a, i);
            uint16_t hx[V], hy[V], hd[V];
            const int with_x = a.mean || amp_act_needs_input(a.act);
            if (with_x) amp_load_v<V>(a.x, i, hx);
            amp_load_v<V>(a.y, i, hy);
            amp_load_v<V>(a.dh, i, hd);
            for (int k = 0; k < V; ++k) {
                const int ch = ch0 + k;
                const float x = with_x ? cvt(hx[k], a.bf16) : 0.f;
                const float y = cvt(hy[k], a.bf16), g = cvt(hd[k], a.bf16);
                float val;
                if (a.mean) {
                    float xm, xn, d;
                    bwd_values(a, x, y, g, ch, &xm, &xn, &d);
                    val = amp_bn_dx(d * a.scale[ch], a.inv[ch], a.kv[ch], xm, a.km[ch]);
                } else {
                    val = bias_d(a, x, y, g, ch);
                }
                hd[k] = rn(val, a.bf16);
                const unsigned z = (amp_f32_bits(val) & 0x7fffffffu) != 0;
                nz += z;
                fl += z && (hd[k] & 0x7fffu) == 0;
            }
            amp_store_v<V>(dh, i, hd);
        }
        if (counts) count_flush(nz, fl, counts);
    }
}

static unsigned int blocks_for(long n, int threads)
{
    const long b = (n + threads - 1) / threads;
    return (unsigned int)(b > 65535 ? 65535 : b < 1 ? 1 : b);
}

static dim3 sums_grid(long positions, int c, int vec)
{
    const int tile = sums_lanes(c, vec ? TAIL_VEC : 1) * (vec ? TAIL_VEC : 1);
    return dim3((unsigned)tail_nchunks(positions), (unsigned)((c + tile - 1) / tile));
}

static void launch_sums(const tail_args &a, int which, float *part, int vec, cudaStream_t stream)
{
    const dim3 grid = sums_grid(a.positions, a.c, vec);
    if (vec) sums_kernel<TAIL_VEC><<<grid, TAIL_THREADS, 0, stream>>>(a, which, part);
    else sums_kernel<1><<<grid, TAIL_THREADS, 0, stream>>>(a, which, part);
}

/* The passes take 8 values at a time where every 8 share a position: c a
 * multiple of 8. The choice depends on c alone, so that the order of the
 * channel sums does too; the tensors must then start 16-byte aligned
 * (cudaMalloc's, and the plan's offsets: multiples of whole tensors of c
 * channels). */
static int vec_of(int c)
{
    return c % TAIL_VEC == 0;
}

static int misaligned(const void *p)
{
    return !amp_aligned16(p);
}

static void launch_norm(const tail_args &a, uint16_t *y, int vec, cudaStream_t stream)
{
    const long n = a.positions * a.c;
    if (vec) norm_kernel<TAIL_VEC><<<blocks_for(n / TAIL_VEC, 256), 256, 0, stream>>>(a, y);
    else norm_kernel<1><<<blocks_for(n, 256), 256, 0, stream>>>(a, y);
}

static void launch_dx(const tail_args &a, uint16_t *dh, unsigned long long *counts, int vec,
                      cudaStream_t stream)
{
    const long n = a.positions * a.c;
    if (vec) dx_kernel<TAIL_VEC><<<blocks_for(n / TAIL_VEC, 256), 256, 0, stream>>>(a, dh, counts);
    else dx_kernel<1><<<blocks_for(n, 256), 256, 0, stream>>>(a, dh, counts);
}

static tail_args args_of(const amp_cuda_tail *t)
{
    tail_args a = {};
    a.positions = t->positions;
    a.c = t->c;
    a.cdiv = amp_divider_of(t->c > 0 ? (uint32_t)t->c : 1u);
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

/* What both passes refuse: an activation without a half tail, and (the
 * vector passes' 16-byte accesses) a misaligned x, y or (backward) dh. */
static amp_status tail_check(const amp_cuda_tail *t, const char *who, const uint16_t *dh,
                             char *err, size_t errlen)
{
    if (!amp_act_known(t->act)) {
        snprintf(err, errlen, "%s: activation %d has no half tail", who, t->act);
        return AMP_ERR_INVALID;
    }
    if (vec_of(t->c) && (misaligned(t->x) || misaligned(t->y) || misaligned(dh))) {
        snprintf(err, errlen, "%s: %d channels, a tensor not 16-byte aligned", who, t->c);
        return AMP_ERR_INVALID;
    }
    return AMP_OK;
}

extern "C" amp_status amp_cuda_tail_forward(const amp_cuda_tail *t, cudaStream_t stream, char *err,
                                            size_t errlen)
{
    if (t->positions <= 0 || t->c <= 0) return AMP_OK;
    const amp_status st = tail_check(t, "amp_cuda_tail_forward", NULL, err, errlen);
    if (st != AMP_OK) return st;
    tail_args a = args_of(t);
    const int vec = vec_of(t->c);
    if (!t->batch_normalize) {
        launch_norm(a, t->y, vec, stream);
        LAUNCHED();
        return AMP_OK;
    }
    const int nchunks = tail_nchunks(t->positions), cb = (t->c + 31) / 32;
    float *part = t->work, *den = t->work + (size_t)nchunks * TAIL_SUMS * t->c;
    const dim3 fin_block(32, 8);
    if (t->train) {
        fin_args f = {};
        f.c = t->c, f.nchunks = nchunks, f.nsums = 1, f.cudnn = t->cudnn, f.count = t->positions;
        f.mean = t->mean, f.variance = t->variance, f.rolling_mean = t->rolling_mean;
        f.rolling_variance = t->rolling_variance, f.den = den;
        launch_sums(a, SUM_X, part, vec, stream);
        LAUNCHED();
        f.mode = FIN_MEAN;
        fin_kernel<<<cb, fin_block, 0, stream>>>(part, f);
        LAUNCHED();
        a.mean = t->mean;
        launch_sums(a, SUM_SQDEV, part, vec, stream);
        LAUNCHED();
        f.mode = FIN_VARIANCE; /* and the denominator */
        fin_kernel<<<cb, fin_block, 0, stream>>>(part, f);
        LAUNCHED();
    } else {
        den_kernel<<<(t->c + 255) / 256, 256, 0, stream>>>(t->rolling_variance, t->c, t->cudnn, den);
        LAUNCHED();
    }
    a.mean = t->train ? t->mean : t->rolling_mean;
    a.den = den;
    launch_norm(a, t->y, vec, stream);
    LAUNCHED();
    return AMP_OK;
}

extern "C" amp_status amp_cuda_tail_backward(const amp_cuda_tail *t, cudaStream_t stream,
                                             char *err, size_t errlen)
{
    if (t->positions <= 0 || t->c <= 0) return AMP_OK;
    const amp_status st = tail_check(t, "amp_cuda_tail_backward", t->dh, err, errlen);
    if (st != AMP_OK) return st;
    tail_args a = args_of(t);
    const int vec = vec_of(t->c);
    const int nchunks = tail_nchunks(t->positions), cb = (t->c + 31) / 32;
    float *part = t->work, *per = t->work + (size_t)nchunks * TAIL_SUMS * t->c;
    float *den = per, *inv = per + t->c, *kv = per + 2 * t->c, *km = per + 3 * t->c;
    const dim3 fin_block(32, 8);
    fin_args f = {};
    f.c = t->c, f.nchunks = nchunks, f.count = t->positions, f.bias_updates = t->bias_updates;
    /* the sums read dh before the data gradient's pass writes it */
    if (!t->batch_normalize) {
        launch_sums(a, SUM_BWD_BIAS, part, vec, stream);
        LAUNCHED();
        f.nsums = 1, f.mode = FIN_BIAS;
        fin_kernel<<<cb, fin_block, 0, stream>>>(part, f);
        LAUNCHED();
        launch_dx(a, t->dh, t->counts, vec, stream);
        LAUNCHED();
        return AMP_OK;
    }
    const float *variance = t->train ? t->variance : t->rolling_variance;
    den_kernel<<<(t->c + 255) / 256, 256, 0, stream>>>(variance, t->c, t->cudnn, den);
    LAUNCHED();
    a.mean = t->train ? t->mean : t->rolling_mean;
    a.den = den;
    launch_sums(a, SUM_BWD, part, vec, stream);
    LAUNCHED();
    f.nsums = 4, f.mode = FIN_TERMS, f.fwd_variance = variance;
    f.scale_updates = t->scale_updates, f.mean_delta = t->mean_delta;
    f.variance_delta = t->variance_delta, f.inv = inv, f.kv = kv, f.km = km;
    fin_kernel<<<cb, fin_block, 0, stream>>>(part, f);
    LAUNCHED();
    a.inv = inv, a.kv = kv, a.km = km;
    launch_dx(a, t->dh, t->counts, vec, stream);
    LAUNCHED();
    return AMP_OK;
}

/* The data-movement layers on the activation plan's NHWC half tensors, on
 * the device, with the CPU plan's semantics (plugin/cpu/movement.c,
 * maxpool.c): values moved as 16-bit patterns, gradients added onto a half
 * delta in float32 and rounded once, in the CPU's order of additions, so
 * that the two agree bit for bit (gpu.plan_kernels); a leaky shortcut within
 * a half ulp (its leaky is .1f x, darknet's multiplies by .1 in double).
 *
 * Each kernel is a grid-stride loop over its output elements; a backward
 * that adds several gradients into one element gathers them in the order
 * the CPU adds them (max-pooling's windows and upsampling's blocks, row by
 * row), rather than scattering with atomics. */
#include "amp_cuda.h"
#include "cuda_check.h"
#include "math/act_math.h"
#include "math/half_format.h"

#include <float.h>
#include <stdio.h>

static __device__ __forceinline__ float hv(const uint16_t *p, long i, int bf16)
{
    return bf16 ? amp_bf16_to_f32(p[i]) : amp_f16_to_f32(p[i]);
}

static __device__ __forceinline__ uint16_t hr(float v, int bf16)
{
    return bf16 ? amp_f32_to_bf16(v) : amp_f32_to_f16(v);
}

#define GRID_LOOP(i, n)                                                                         \
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (n);                         \
         i += (long)gridDim.x * blockDim.x)

static unsigned int blocks_for(long n)
{
    const long b = (n + 255) / 256;
    return (unsigned int)(b > 65535 ? 65535 : b < 1 ? 1 : b);
}

#define LAUNCHED()                                                                              \
    do {                                                                                        \
        const amp_status st_ = AMP_CUDA_LAUNCHED(err, errlen);                                  \
        if (st_ != AMP_OK) return st_;                                                          \
    } while (0)

/* ---- max-pooling: darknet's windows (offset -pad/2), the first maximum ---- */

static __global__ void maxpool_forward_kernel(amp_cuda_pool p, const uint16_t *in, uint16_t *out,
                                              int *idx, int bf16)
{
    const long n = (long)p.batch * p.out_h * p.out_w * p.c;
    const int off = -p.pad / 2;
    GRID_LOOP(o, n) {
        const int ch = (int)(o % p.c);
        const long pos = o / p.c;
        const int j = (int)(pos % p.out_w), i = (int)(pos / p.out_w % p.out_h);
        const int b = (int)(pos / ((long)p.out_w * p.out_h));
        float m = -FLT_MAX;
        int best = -1;
        for (int k = 0; k < p.size * p.size; ++k) {
            const int y = off + i * p.stride + k / p.size, x = off + j * p.stride + k % p.size;
            if (y < 0 || y >= p.h || x < 0 || x >= p.w) continue;
            const int at = ((b * p.h + y) * p.w + x) * p.c + ch;
            const float v = hv(in, at, bf16);
            if (v > m) m = v, best = at;
        }
        out[o] = hr(m, bf16);
        idx[o] = best;
    }
}

/* Each input element: the gradients of the windows whose maximum it is,
 * window by window in output order, added onto what it holds, rounded once. */
static __global__ void maxpool_backward_kernel(amp_cuda_pool p, const uint16_t *d, const int *idx,
                                               uint16_t *dst, int bf16)
{
    const long n = (long)p.batch * p.h * p.w * p.c;
    const int off = -p.pad / 2;
    GRID_LOOP(e, n) {
        const int ch = (int)(e % p.c);
        const long pos = e / p.c;
        const int x = (int)(pos % p.w), y = (int)(pos / p.w % p.h);
        const int b = (int)(pos / ((long)p.w * p.h));
        /* windows i with off + i stride <= y < off + i stride + size */
        int i0 = y - off - p.size + 1, i1 = y - off, j0 = x - off - p.size + 1, j1 = x - off;
        i0 = i0 <= 0 ? 0 : (i0 + p.stride - 1) / p.stride, i1 = i1 < 0 ? -1 : i1 / p.stride;
        j0 = j0 <= 0 ? 0 : (j0 + p.stride - 1) / p.stride, j1 = j1 < 0 ? -1 : j1 / p.stride;
        if (i1 >= p.out_h) i1 = p.out_h - 1;
        if (j1 >= p.out_w) j1 = p.out_w - 1;
        float acc = 0.f;
        int found = 0;
        for (int i = i0; i <= i1; ++i)
            for (int j = j0; j <= j1; ++j) {
                const long k = ((long)(b * p.out_h + i) * p.out_w + j) * p.c + ch;
                if (idx[k] != (int)e) continue;
                if (!found) acc = hv(dst, e, bf16), found = 1;
                acc += hv(d, k, bf16);
            }
        if (found) dst[e] = hr(acc, bf16);
    }
}

/* darknet's indexes are int: the input must have fewer than 2^31 values */
static amp_status pool_fits(const amp_cuda_pool *p, char *err, size_t errlen)
{
    if ((long)p->batch * p->h * p->w * p->c <= 2147483647L) return AMP_OK;
    snprintf(err, errlen, "maxpool: %d images of %dx%dx%d: more than 2^31 values (darknet's int "
                          "indexes)", p->batch, p->h, p->w, p->c);
    return AMP_ERR_INVALID;
}

extern "C" amp_status amp_cuda_maxpool_nhwc_forward(const amp_cuda_pool *p, const uint16_t *in,
                                                    uint16_t *out, int *idx, amp_dtype dtype,
                                                    cudaStream_t stream, char *err, size_t errlen)
{
    const long n = (long)p->batch * p->out_h * p->out_w * p->c;
    if (n <= 0) return AMP_OK;
    const amp_status st = pool_fits(p, err, errlen);
    if (st != AMP_OK) return st;
    maxpool_forward_kernel<<<blocks_for(n), 256, 0, stream>>>(*p, in, out, idx,
                                                              dtype == AMP_DTYPE_BFLOAT16);
    LAUNCHED();
    return AMP_OK;
}

extern "C" amp_status amp_cuda_maxpool_nhwc_backward(const amp_cuda_pool *p, const uint16_t *d,
                                                     const int *idx, uint16_t *dst, amp_dtype dtype,
                                                     cudaStream_t stream, char *err, size_t errlen)
{
    const long n = (long)p->batch * p->h * p->w * p->c;
    if (n <= 0) return AMP_OK;
    const amp_status st = pool_fits(p, err, errlen);
    if (st != AMP_OK) return st;
    maxpool_backward_kernel<<<blocks_for(n), 256, 0, stream>>>(*p, d, idx, dst,
                                                               dtype == AMP_DTYPE_BFLOAT16);
    LAUNCHED();
    return AMP_OK;
}

/* ---- upsample (stride s): each value copied to an s x s block ---- */

static __global__ void upsample_forward_kernel(const uint16_t *in, uint16_t *out, int batch, int h,
                                               int w, int c, int s)
{
    const int oh = h * s, ow = w * s;
    const long n = (long)batch * oh * ow * c;
    GRID_LOOP(o, n) {
        const int ch = (int)(o % c);
        const long pos = o / c;
        const int X = (int)(pos % ow), Y = (int)(pos / ow % oh), b = (int)(pos / ((long)ow * oh));
        out[o] = in[(((long)b * h + Y / s) * w + X / s) * c + ch];
    }
}

/* Each input's gradient: its block of output gradients, rows then columns,
 * added onto what it holds, rounded once. */
static __global__ void upsample_backward_kernel(const uint16_t *d, uint16_t *dst, int batch, int h,
                                                int w, int c, int s, int bf16)
{
    const int oh = h * s, ow = w * s;
    const long n = (long)batch * h * w * c;
    GRID_LOOP(e, n) {
        const int ch = (int)(e % c);
        const long pos = e / c;
        const int x = (int)(pos % w), y = (int)(pos / w % h), b = (int)(pos / ((long)w * h));
        float acc = hv(dst, e, bf16);
        for (int j = 0; j < s; ++j)
            for (int i = 0; i < s; ++i)
                acc += hv(d, (((long)b * oh + y * s + j) * ow + x * s + i) * c + ch, bf16);
        dst[e] = hr(acc, bf16);
    }
}

extern "C" amp_status amp_cuda_upsample_nhwc_forward(const uint16_t *in, uint16_t *out, int batch,
                                                     int h, int w, int c, int stride,
                                                     cudaStream_t stream, char *err, size_t errlen)
{
    const long n = (long)batch * h * stride * w * stride * c;
    if (n <= 0) return AMP_OK;
    upsample_forward_kernel<<<blocks_for(n), 256, 0, stream>>>(in, out, batch, h, w, c, stride);
    LAUNCHED();
    return AMP_OK;
}

extern "C" amp_status amp_cuda_upsample_nhwc_backward(const uint16_t *d, uint16_t *dst, int batch,
                                                      int h, int w, int c, int stride,
                                                      amp_dtype dtype, cudaStream_t stream,
                                                      char *err, size_t errlen)
{
    const long n = (long)batch * h * w * c;
    if (n <= 0) return AMP_OK;
    upsample_backward_kernel<<<blocks_for(n), 256, 0, stream>>>(d, dst, batch, h, w, c, stride,
                                                                dtype == AMP_DTYPE_BFLOAT16);
    LAUNCHED();
    return AMP_OK;
}

/* ---- route: channel slices side by side; rows of a strided copy ---- */

/* dst[p ds + c] = src[p ss + c] (add: half(dst + src)) for positions x cols. */
static __global__ void rows_kernel(uint16_t *dst, long ds, const uint16_t *src, long ss,
                                   long positions, int cols, int add, int bf16)
{
    const long n = positions * cols;
    GRID_LOOP(e, n) {
        const long p = e / cols;
        const int c = (int)(e % cols);
        uint16_t *t = dst + p * ds + c;
        const uint16_t v = src[p * ss + c];
        *t = add ? hr(hv(t, 0, bf16) + hv(&v, 0, bf16), bf16) : v;
    }
}

extern "C" amp_status amp_cuda_rows_nhwc(uint16_t *dst, long dst_stride, const uint16_t *src,
                                         long src_stride, long positions, int cols, int add,
                                         amp_dtype dtype, cudaStream_t stream, char *err,
                                         size_t errlen)
{
    const long n = positions * cols;
    if (n <= 0) return AMP_OK;
    rows_kernel<<<blocks_for(n), 256, 0, stream>>>(dst, dst_stride, src, src_stride, positions,
                                                   cols, add, dtype == AMP_DTYPE_BFLOAT16);
    LAUNCHED();
    return AMP_OK;
}

/* ---- shortcut (same shapes): half(act(a + b)); its gradient into both ---- */

static __global__ void shortcut_forward_kernel(const uint16_t *a, const uint16_t *b, uint16_t *out,
                                               long n, int act, int bf16)
{
    GRID_LOOP(i, n) out[i] = hr(amp_act(hv(a, i, bf16) + hv(b, i, bf16), act), bf16);
}

static __global__ void shortcut_backward_kernel(const uint16_t *delta, const uint16_t *y,
                                                uint16_t *prev, uint16_t *other, long n, int act,
                                                int bf16)
{
    GRID_LOOP(i, n) {
        float d = hv(delta, i, bf16);
        if (act != AMP_ACT_LINEAR) d *= amp_act_grad(hv(y, i, bf16), 0.f, act);
        if (prev) prev[i] = hr(hv(prev, i, bf16) + d, bf16);
        if (other) other[i] = hr(hv(other, i, bf16) + d, bf16);
    }
}

/* linear and leaky, the shortcuts darknet's cfgs use (and that
 * gpu.plan_kernels compares with darknet's form) */
static int shortcut_act_ok(int act)
{
    return act == AMP_ACT_LINEAR || act == AMP_ACT_LEAKY;
}

extern "C" int amp_cuda_shortcut_supports(int act)
{
    return shortcut_act_ok(act);
}

extern "C" amp_status amp_cuda_shortcut_nhwc_forward(const uint16_t *a, const uint16_t *b,
                                                     uint16_t *out, long n, int act,
                                                     amp_dtype dtype, cudaStream_t stream,
                                                     char *err, size_t errlen)
{
    if (!shortcut_act_ok(act)) {
        snprintf(err, errlen, "shortcut: activation %d has no half form", act);
        return AMP_ERR_INVALID;
    }
    if (n <= 0) return AMP_OK;
    shortcut_forward_kernel<<<blocks_for(n), 256, 0, stream>>>(a, b, out, n, act,
                                                               dtype == AMP_DTYPE_BFLOAT16);
    LAUNCHED();
    return AMP_OK;
}

extern "C" amp_status amp_cuda_shortcut_nhwc_backward(const uint16_t *delta, const uint16_t *y,
                                                      uint16_t *prev, uint16_t *other, long n,
                                                      int act, amp_dtype dtype,
                                                      cudaStream_t stream, char *err,
                                                      size_t errlen)
{
    if (!shortcut_act_ok(act)) {
        snprintf(err, errlen, "shortcut: activation %d has no half form", act);
        return AMP_ERR_INVALID;
    }
    if (n <= 0) return AMP_OK;
    shortcut_backward_kernel<<<blocks_for(n), 256, 0, stream>>>(delta, y, prev, other, n, act,
                                                                dtype == AMP_DTYPE_BFLOAT16);
    LAUNCHED();
    return AMP_OK;
}

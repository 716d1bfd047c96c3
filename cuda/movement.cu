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
#include "half_vec.cuh"
#include "math/act_math.h"
#include "math/fastdiv.h"
#include "math/half_format.h"
#include "math/nhwc.h"

#include <float.h>
#include <stdio.h>

static __device__ __forceinline__ float hb(uint16_t x, int bf16)
{
    return bf16 ? amp_bf16_to_f32(x) : amp_f16_to_f32(x);
}

static __device__ __forceinline__ float hv(const uint16_t *p, long i, int bf16)
{
    return hb(p[i], bf16);
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

/* Index math in 32 bits with math/fastdiv.h's dividers (a flat index split
 * into image, row, column and channel costs a GPU several 64-bit divisions
 * otherwise, more than moving the value): a launch covers fewer than 2^31
 * elements, more images or positions go in several launches. */
#define UGRID_LOOP(i, n)                                                                        \
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

/* How many of the units of per elements each one launch takes (at least
 * 1); 0 where one unit alone is 2^31 elements or more. */
static long per_launch(long per)
{
    return per >= (long)AMP_FASTDIV_MAX ? 0 : ((long)AMP_FASTDIV_MAX - 1) / (per > 0 ? per : 1);
}

/* ---- max-pooling: darknet's windows (offset -pad/2), the first maximum ---- */

static __global__ void maxpool_forward_kernel(amp_cuda_pool p, amp_nhwc_divs v, const uint16_t *in,
                                              uint16_t *out, int *idx, int bf16)
{
    const uint32_t n = (uint32_t)p.batch * p.out_h * p.out_w * p.c;
    const int off = -p.pad / 2;
    UGRID_LOOP(o, n) {
        uint32_t b, i, j, ch;
        amp_nhwc_split(v, o, &b, &i, &j, &ch);
        float m = -FLT_MAX;
        int best = -1;
        for (int ky = 0; ky < p.size; ++ky) {
            const int y = off + (int)i * p.stride + ky;
            for (int kx = 0; kx < p.size; ++kx) {
                const int x = off + (int)j * p.stride + kx;
                if (y < 0 || y >= p.h || x < 0 || x >= p.w) continue;
                const int at = (((int)b * p.h + y) * p.w + x) * p.c + (int)ch;
                const float val = hv(in, at, bf16);
                if (val > m) m = val, best = at;
            }
        }
        out[o] = hr(m, bf16);
        idx[o] = best;
    }
}

/* Each input element: the gradients of the windows whose maximum it is,
 * window by window in output order, added onto what it holds, rounded once. */
static __global__ void maxpool_backward_kernel(amp_cuda_pool p, amp_nhwc_divs v, const uint16_t *d,
                                               const int *idx, uint16_t *dst, int bf16)
{
    const uint32_t n = (uint32_t)p.batch * p.h * p.w * p.c;
    const int off = -p.pad / 2;
    UGRID_LOOP(e, n) {
        uint32_t b, uy, ux, ch;
        amp_nhwc_split(v, e, &b, &uy, &ux, &ch);
        const int y = (int)uy, x = (int)ux;
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
                const int k = (((int)b * p.out_h + i) * p.out_w + j) * p.c + (int)ch;
                if (idx[k] != (int)e) continue;
                if (!found) acc = hv(dst, e, bf16), found = 1;
                acc += hv(d, k, bf16);
            }
        if (found) dst[e] = hr(acc, bf16);
    }
}

/* Windows that do not overlap (stride >= size: darknet's 2x2/2): an input
 * element is the maximum of one window at most, so a thread per window adds
 * its gradient onto the element its index names, the same float32 sum
 * rounded once as the gather's. A quarter of the gather's threads on 2x2/2,
 * and no dependent search: each thread's loads of d and idx go out together. */
static __global__ void maxpool_backward_disjoint_kernel(uint32_t n, const uint16_t *d,
                                                        const int *idx, uint16_t *dst, int bf16)
{
    UGRID_LOOP(k, n) {
        const int t = idx[k];
        const float g = hv(d, k, bf16);
        if (t >= 0) dst[t] = hr(hv(dst, t, bf16) + g, bf16);
    }
}

/* darknet's indexes are int: the input and the output must have fewer than
 * 2^31 values (then so do both kernels' flat indexes) */
static amp_status pool_fits(const amp_cuda_pool *p, char *err, size_t errlen)
{
    if ((long)p->batch * p->h * p->w * p->c < (long)AMP_FASTDIV_MAX &&
        (long)p->batch * p->out_h * p->out_w * p->c < (long)AMP_FASTDIV_MAX)
        return AMP_OK;
    snprintf(err, errlen, "maxpool: %d images of %dx%dx%d into %dx%dx%d: 2^31 values or more "
                          "(darknet's int indexes)", p->batch, p->h, p->w, p->c, p->out_h,
             p->out_w, p->c);
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
    maxpool_forward_kernel<<<blocks_for(n), 256, 0, stream>>>(
        *p, amp_nhwc_divs_of(p->c, p->out_w, p->out_h), in, out, idx, dtype == AMP_DTYPE_BFLOAT16);
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
    if (p->stride >= p->size) {
        const long no = (long)p->batch * p->out_h * p->out_w * p->c;
        maxpool_backward_disjoint_kernel<<<blocks_for(no), 256, 0, stream>>>(
            (uint32_t)no, d, idx, dst, dtype == AMP_DTYPE_BFLOAT16);
        LAUNCHED();
        return AMP_OK;
    }
    maxpool_backward_kernel<<<blocks_for(n), 256, 0, stream>>>(
        *p, amp_nhwc_divs_of(p->c, p->w, p->h), d, idx, dst, dtype == AMP_DTYPE_BFLOAT16);
    LAUNCHED();
    return AMP_OK;
}

/* ---- upsample (stride s): each value copied to an s x s block ---- */

/* nb images (a launch's), their output's flat index split by v (oh = h s,
 * ow = w s). */
static __global__ void upsample_forward_kernel(const uint16_t *in, uint16_t *out, int nb, int h,
                                               int w, int c, int s, amp_nhwc_divs v, amp_divider ds)
{
    const uint32_t n = (uint32_t)nb * h * s * w * s * c;
    UGRID_LOOP(o, n) {
        uint32_t b, Y, X, ch;
        amp_nhwc_split(v, o, &b, &Y, &X, &ch);
        out[o] = in[(((int)b * h + (int)amp_div(ds, Y)) * w + (int)amp_div(ds, X)) * c + (int)ch];
    }
}

/* Each input's gradient: its block of output gradients, rows then columns,
 * added onto what it holds, rounded once. */
static __global__ void upsample_backward_kernel(const uint16_t *d, uint16_t *dst, int nb, int h,
                                                int w, int c, int s, amp_nhwc_divs v, int bf16)
{
    const int oh = h * s, ow = w * s;
    const uint32_t n = (uint32_t)nb * h * w * c;
    UGRID_LOOP(e, n) {
        uint32_t b, y, x, ch;
        amp_nhwc_split(v, e, &b, &y, &x, &ch);
        float acc = hv(dst, e, bf16);
        for (int j = 0; j < s; ++j)
            for (int i = 0; i < s; ++i)
                acc += hv(d, ((long)((int)b * oh + (int)y * s + j) * ow + (int)x * s + i) * c + ch,
                          bf16);
        dst[e] = hr(acc, bf16);
    }
}

/* The images a launch takes, per_image values each on the larger side. */
static int upsample_images(int batch, long per_image, char *err, size_t errlen)
{
    const long k = per_launch(per_image);
    if (k <= 0) snprintf(err, errlen, "upsample: one image of %ld values: 2^31 or more", per_image);
    return k <= 0 ? 0 : k < batch ? (int)k : batch;
}

extern "C" amp_status amp_cuda_upsample_nhwc_forward(const uint16_t *in, uint16_t *out, int batch,
                                                     int h, int w, int c, int stride,
                                                     cudaStream_t stream, char *err, size_t errlen)
{
    const long per_in = (long)h * w * c, per_out = per_in * stride * stride;
    if (batch <= 0 || per_out <= 0) return AMP_OK;
    const int k = upsample_images(batch, per_out, err, errlen);
    if (!k) return AMP_ERR_INVALID;
    const amp_nhwc_divs v = amp_nhwc_divs_of(c, w * stride, h * stride);
    const amp_divider ds = amp_divider_of((uint32_t)stride);
    for (int b0 = 0; b0 < batch; b0 += k) {
        const int nb = batch - b0 < k ? batch - b0 : k;
        upsample_forward_kernel<<<blocks_for(nb * per_out), 256, 0, stream>>>(
            in + b0 * per_in, out + b0 * per_out, nb, h, w, c, stride, v, ds);
        LAUNCHED();
    }
    return AMP_OK;
}

extern "C" amp_status amp_cuda_upsample_nhwc_backward(const uint16_t *d, uint16_t *dst, int batch,
                                                      int h, int w, int c, int stride,
                                                      amp_dtype dtype, cudaStream_t stream,
                                                      char *err, size_t errlen)
{
    const long per_in = (long)h * w * c, per_out = per_in * stride * stride;
    if (batch <= 0 || per_out <= 0) return AMP_OK;
    const int k = upsample_images(batch, per_out, err, errlen);
    if (!k) return AMP_ERR_INVALID;
    const amp_nhwc_divs v = amp_nhwc_divs_of(c, w, h);
    for (int b0 = 0; b0 < batch; b0 += k) {
        const int nb = batch - b0 < k ? batch - b0 : k;
        upsample_backward_kernel<<<blocks_for(nb * per_in), 256, 0, stream>>>(
            d + b0 * per_out, dst + b0 * per_in, nb, h, w, c, stride, v,
            dtype == AMP_DTYPE_BFLOAT16);
        LAUNCHED();
    }
    return AMP_OK;
}

/* ---- route: channel slices side by side; rows of a strided copy ---- */

/* dst[p ds + c] = src[p ss + c] (add: half(dst + src)) for positions x cols
 * (fewer than 2^31 values: a launch's). */
static __global__ void rows_kernel(uint16_t *dst, long ds, const uint16_t *src, long ss,
                                   uint32_t n, amp_divider vc, int add, int bf16)
{
    UGRID_LOOP(e, n) {
        uint32_t c;
        const uint32_t p = amp_divmod(vc, e, &c);
        uint16_t *t = dst + p * ds + c;
        const uint16_t v = src[p * ss + c];
        *t = add ? hr(hv(t, 0, bf16) + hv(&v, 0, bf16), bf16) : v;
    }
}

/* The element passes below take V values per thread: 8 (one 16-byte access
 * per array) where the length is a multiple of 8 and every array starts
 * 16-byte aligned, else 1; the same arithmetic on each value either way. */
static int vec_ok(long n, const void *a, const void *b, const void *c, const void *d)
{
    return n % AMP_HALF_VEC == 0 && (!a || amp_aligned16(a)) && (!b || amp_aligned16(b)) &&
           (!c || amp_aligned16(c)) && (!d || amp_aligned16(d));
}

/* The same where both are contiguous (ds = ss = cols): a flat copy or sum. */
template <int V>
static __global__ void flat_kernel(uint16_t *dst, const uint16_t *src, long nv, int add, int bf16)
{
    GRID_LOOP(v, nv) {
        const long e = v * V;
        uint16_t s[V], d[V];
        amp_load_v<V>(src, e, s);
        if (add) {
            amp_load_v<V>(dst, e, d);
            for (int k = 0; k < V; ++k) d[k] = hr(hb(d[k], bf16) + hb(s[k], bf16), bf16);
        } else {
            for (int k = 0; k < V; ++k) d[k] = s[k];
        }
        amp_store_v<V>(dst, e, d);
    }
}

extern "C" amp_status amp_cuda_rows_nhwc(uint16_t *dst, long dst_stride, const uint16_t *src,
                                         long src_stride, long positions, int cols, int add,
                                         amp_dtype dtype, cudaStream_t stream, char *err,
                                         size_t errlen)
{
    const long n = positions * cols;
    if (n <= 0) return AMP_OK;
    const int bf16 = dtype == AMP_DTYPE_BFLOAT16;
    if (dst_stride == cols && src_stride == cols) {
        if (vec_ok(n, dst, src, NULL, NULL))
            flat_kernel<AMP_HALF_VEC><<<blocks_for(n / AMP_HALF_VEC), 256, 0, stream>>>(
                dst, src, n / AMP_HALF_VEC, add, bf16);
        else
            flat_kernel<1><<<blocks_for(n), 256, 0, stream>>>(dst, src, n, add, bf16);
        LAUNCHED();
        return AMP_OK;
    }
    const long k = per_launch(cols);
    if (k <= 0) {
        snprintf(err, errlen, "route: rows of %d values: 2^31 or more", cols);
        return AMP_ERR_INVALID;
    }
    const amp_divider vc = amp_divider_of((uint32_t)cols);
    for (long p0 = 0; p0 < positions; p0 += k) {
        const long np = positions - p0 < k ? positions - p0 : k;
        rows_kernel<<<blocks_for(np * cols), 256, 0, stream>>>(
            dst + p0 * dst_stride, dst_stride, src + p0 * src_stride, src_stride,
            (uint32_t)(np * cols), vc, add, bf16);
        LAUNCHED();
    }
    return AMP_OK;
}

/* ---- shortcut (same shapes): half(act(a + b)); its gradient into both ---- */

template <int V>
static __global__ void shortcut_forward_kernel(const uint16_t *a, const uint16_t *b, uint16_t *out,
                                               long nv, int act, int bf16)
{
    GRID_LOOP(v, nv) {
        const long i = v * V;
        uint16_t ha[V], hb_[V], ho[V];
        amp_load_v<V>(a, i, ha);
        amp_load_v<V>(b, i, hb_);
        for (int k = 0; k < V; ++k)
            ho[k] = hr(amp_act(hb(ha[k], bf16) + hb(hb_[k], bf16), act), bf16);
        amp_store_v<V>(out, i, ho);
    }
}

/* to[i .. i + V) = half(to + d), in float32, rounded once each. */
template <int V>
static __device__ __forceinline__ void add_into(uint16_t *to, long i, const float *d, int bf16)
{
    uint16_t h[V];
    amp_load_v<V>(to, i, h);
    for (int k = 0; k < V; ++k) h[k] = hr(hb(h[k], bf16) + d[k], bf16);
    amp_store_v<V>(to, i, h);
}

template <int V>
static __global__ void shortcut_backward_kernel(const uint16_t *delta, const uint16_t *y,
                                                uint16_t *prev, uint16_t *other, long nv, int act,
                                                int bf16)
{
    GRID_LOOP(v, nv) {
        const long i = v * V;
        uint16_t hd[V], hy[V];
        float d[V];
        amp_load_v<V>(delta, i, hd);
        if (act != AMP_ACT_LINEAR) amp_load_v<V>(y, i, hy);
        for (int k = 0; k < V; ++k) {
            d[k] = hb(hd[k], bf16);
            if (act != AMP_ACT_LINEAR) d[k] *= amp_act_grad(hb(hy[k], bf16), 0.f, act);
        }
        if (prev) add_into<V>(prev, i, d, bf16);
        if (other) add_into<V>(other, i, d, bf16); /* after prev's: prev may be other */
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
    const int bf16 = dtype == AMP_DTYPE_BFLOAT16;
    if (vec_ok(n, a, b, out, NULL))
        shortcut_forward_kernel<AMP_HALF_VEC><<<blocks_for(n / AMP_HALF_VEC), 256, 0, stream>>>(
            a, b, out, n / AMP_HALF_VEC, act, bf16);
    else
        shortcut_forward_kernel<1><<<blocks_for(n), 256, 0, stream>>>(a, b, out, n, act, bf16);
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
    const int bf16 = dtype == AMP_DTYPE_BFLOAT16;
    if (vec_ok(n, delta, y, prev, other))
        shortcut_backward_kernel<AMP_HALF_VEC><<<blocks_for(n / AMP_HALF_VEC), 256, 0, stream>>>(
            delta, y, prev, other, n / AMP_HALF_VEC, act, bf16);
    else
        shortcut_backward_kernel<1><<<blocks_for(n), 256, 0, stream>>>(delta, y, prev, other, n,
                                                                        act, bf16);
    LAUNCHED();
    return AMP_OK;
}

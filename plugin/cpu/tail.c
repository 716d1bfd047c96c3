/* The float32 parts of a half layer on the CPU: batch-norm (or bias), the
 * activation, and their gradients. Same formulas as darknet's
 * forward_batchnorm_layer/backward_batchnorm_layer, add_bias/backward_bias,
 * activate_array/gradient_array, but one pass over memory per phase instead of
 * up to eight, and split by channel between OpenMP threads. darknet runs these
 * single-threaded; once the convolution runs in bfloat16 through oneDNN they
 * would be most of a layer's time.
 *
 * Sums over a channel run in darknet's order (batch, then position) in float,
 * as darknet's do; the square roots and powers are taken in float rather than
 * darknet's double, so results can differ from darknet's by an ulp or two
 * (integration.onednn_conv compares them, element by element, through the
 * oneDNN path in float32).
 *
 * Batch-norm's forward has a second formula, cuDNN's as darknet's GPU layers
 * call it (amp_bn_formula): biased variance and sqrt(var + 1e-5), the
 * rolling variance fed the unbiased one. The tests of the GPU half layers
 * give it to their CPU reference (unit.bn_formula checks it). The backward
 * needs none: darknet's CPU backward already uses var + 1e-5, and with the
 * biased variance it is the exact gradient of cuDNN's forward.
 *
 * On the activation plan's half storage a layer's output, its delta and its
 * batch-norm input are NHWC half tensors: tail_nhwc.c runs the tail there.
 * This file runs it on darknet's float32 NCHW arrays (a layer whose output
 * stays float32, keeping its batch-norm input in half NCHW where the plan
 * says x_half), and hands the rest over.
 *
 * mish, swish and hard_mish take their gradient from the values before the
 * activation (none can be inverted from its output): here darknet's
 * l.activation_input keeps them, as darknet's convolutional layer does.
 *
 * The per-channel work is compiled for AVX-512, AVX2 and baseline x86-64, one
 * chosen per process (isa.c: the CPU's widest, or DARKNET_AMP_MAX_CPU_ISA's
 * cap): the library is built for any x86-64, which alone would give these
 * loops 4-wide SSE2. The reductions' lanes, and so the order of their float
 * sums, follow the vector width.
 */
#include "cpu.h"

#include "math/half_format.h"

#include "activations.h"
#include "math/act_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Parallel only when there is enough work to pay for waking the threads. */
#define AMP_TAIL_MIN_PARALLEL 16384

/* The per-channel functions below are inlined into one wrapper per
 * instruction set (TAIL_VARIANTS), each compiled for its target. */
#if defined(__GNUC__)
#define TAIL_INLINE static inline __attribute__((always_inline))
#else
#define TAIL_INLINE static inline
#endif

/* p = act(p * scale + bias) over one channel of one image; a loop per common
 * activation, so the compiler can vectorise it. keep (or NULL) gets the
 * values before the activation, for those whose gradient needs them. */
TAIL_INLINE void activate_slice(float *p, int size, float scale, float bias, ACTIVATION a,
                                float *keep)
{
    switch (a) {
    case LINEAR:
#pragma omp simd
        for (int i = 0; i < size; ++i) p[i] = p[i] * scale + bias;
        break;
    case LEAKY:
#pragma omp simd
        for (int i = 0; i < size; ++i) {
            p[i] = amp_leaky(p[i] * scale + bias);
        }
        break;
    case MISH:
    case SWISH:
    case HARD_MISH: /* the gradient needs the values before the activation */
#pragma omp simd
        for (int i = 0; i < size; ++i) {
            const float v = p[i] * scale + bias;
            if (keep) keep[i] = v;
            p[i] = a == MISH ? amp_mish(v) : a == SWISH ? amp_swish(v) : amp_hard_mish(v);
        }
        break;
    default:
        for (int i = 0; i < size; ++i) p[i] = activate(p[i] * scale + bias, a);
    }
}

/* d *= act'(y) over one slice; y is the activation's input for those whose
 * gradient needs it (grad_source). */
TAIL_INLINE void gradient_slice(float *d, const float *y, int size, ACTIVATION a)
{
    switch (a) {
    case LINEAR: break;
    case LEAKY:
#pragma omp simd
        for (int i = 0; i < size; ++i) d[i] *= amp_leaky_slope(y[i]);
        break;
    case MISH:
#pragma omp simd
        for (int i = 0; i < size; ++i) d[i] *= amp_mish_grad(y[i]);
        break;
    case SWISH:
#pragma omp simd
        for (int i = 0; i < size; ++i) d[i] *= amp_swish_grad(y[i]);
        break;
    case HARD_MISH:
#pragma omp simd
        for (int i = 0; i < size; ++i) d[i] *= amp_hard_mish_grad(y[i]);
        break;
    default:
        for (int i = 0; i < size; ++i) d[i] *= gradient(y[i], a);
    }
}

/* What act' reads at offset o: the output, or darknet's kept input. */
static inline const float *grad_source(const layer *l, long o)
{
    return activation_needs_input(l->activation) && l->activation_input
               ? l->activation_input + o
               : l->output + o;
}

static inline float *keep_of(const layer *l, long o)
{
    return l->activation_input ? l->activation_input + o : NULL;
}

/* Half storage (the activation plan): one slice stored, or read back. */
TAIL_INLINE void store_half(uint16_t *h, const float *p, int size, int bf16)
{
    if (bf16) {
#pragma omp simd
        for (int i = 0; i < size; ++i) h[i] = amp_f32_to_bf16(p[i]);
    } else {
#pragma omp simd
        for (int i = 0; i < size; ++i) h[i] = amp_f32_to_f16(p[i]);
    }
}

TAIL_INLINE const float *load_half(float *buf, const uint16_t *h, int size, int bf16)
{
    if (bf16) {
#pragma omp simd
        for (int i = 0; i < size; ++i) buf[i] = amp_bf16_to_f32(h[i]);
    } else {
#pragma omp simd
        for (int i = 0; i < size; ++i) buf[i] = amp_f16_to_f32(h[i]);
    }
    return buf;
}

/* One channel f of a tail's values, image b's slice at y + b * bs: darknet's
 * l.output (bs = n * size). Storage offsets (the half batch-norm input,
 * darknet's x and x_norm) are o0 + b * ns: f * size and n * size. */
typedef struct tail_chan {
    float *y;
    long bs, o0, ns;
} tail_chan;

static inline long slice(const tail_chan *c, int b)
{
    return c->o0 + (long)b * c->ns;
}

/* Channel f without batch-norm: bias and activation. */
TAIL_INLINE void forward_bias(const layer *l, int f, const tail_chan *c, int size)
{
    for (int b = 0; b < l->batch; ++b)
        activate_slice(c->y + b * c->bs, size, 1, l->biases[f], l->activation,
                       keep_of(l, slice(c, b)));
}

/* Channel f with batch-norm: statistics (training), normalisation, scale,
 * bias and activation. x, the values normalised: darknet's l->x (and x_norm),
 * or half storage (th->x, written here). */
TAIL_INLINE void forward_norm(const layer *l, const amp_tail_half *th, int train, int f,
                              const tail_chan *c, int size, int cudnn)
{
    const int batch = l->batch, count = batch * size;
    float mean, var;
    if (train) {
        const float mscale = 1.f / count, vscale = 1.f / (cudnn ? count : count - 1);
        /* cuDNN's running variance takes the unbiased estimate */
        const float unbias = cudnn && count > 1 ? (float)count / (count - 1) : 1.f;
        float s = 0;
        for (int b = 0; b < batch; ++b) {
            const float *p = c->y + b * c->bs;
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < size; ++i) s += p[i];
        }
        mean = s * mscale;
        float v = 0;
        for (int b = 0; b < batch; ++b) {
            const float *p = c->y + b * c->bs;
#pragma omp simd reduction(+ : v)
            for (int i = 0; i < size; ++i) v += (p[i] - mean) * (p[i] - mean);
        }
        var = v * vscale;
        l->mean[f] = mean;
        l->variance[f] = var;
        l->rolling_mean[f] = .99f * l->rolling_mean[f] + .01f * mean;
        l->rolling_variance[f] = .99f * l->rolling_variance[f] + .01f * (var * unbias);
    } else {
        mean = l->rolling_mean[f];
        var = l->rolling_variance[f];
    }
    const float den = cudnn ? sqrtf(var + .00001f) : sqrtf(var) + .000001f;
    const float sc = l->scales[f], bi = l->biases[f];
    for (int b = 0; b < batch; ++b) {
        const long o = slice(c, b);
        float *p = c->y + b * c->bs;
        if (th->x) { /* the input kept in half (exact: it is the half-rounded convolution);
                        the backward makes the normalised values again */
            store_half(th->x + o, p, size, th->bf16);
#pragma omp simd
            for (int i = 0; i < size; ++i) p[i] = (p[i] - mean) / den;
        } else if (train) { /* one pass: the input kept, normalised, normalised kept */
            float *x = l->x + o, *xn = l->x_norm + o;
#pragma omp simd
            for (int i = 0; i < size; ++i) {
                const float v = p[i];
                x[i] = v;
                xn[i] = p[i] = (v - mean) / den;
            }
        } else {
            memcpy(l->x + o, p, size * sizeof(float));
#pragma omp simd
            for (int i = 0; i < size; ++i) p[i] = (p[i] - mean) / den;
        }
        activate_slice(p, size, sc, bi, l->activation, keep_of(l, o));
    }
}

/* One channel's incoming gradient d (image b's slice at d + b * bs: darknet's
 * l.delta) and where the slices of the batch-norm input x are read from (half
 * storage into buf). */
typedef struct tail_grad {
    float *d;
    long bs, o0, ns;
    float *buf; /* size floats */
} tail_grad;

static inline long gslice(const tail_grad *g, int b)
{
    return g->o0 + (long)b * g->ns;
}

TAIL_INLINE const float *input_of(const layer *l, const amp_tail_half *th, const tail_grad *g,
                                  int b, int size)
{
    const long o = gslice(g, b);
    return th->x ? load_half(g->buf, th->x + o, size, th->bf16) : l->x + o;
}

/* Channel f without batch-norm: the activation's gradient and the bias's. */
TAIL_INLINE void backward_bias(const layer *l, int f, const tail_grad *g, int size)
{
    for (int b = 0; b < l->batch; ++b) { /* added per image, as darknet does */
        float *d = g->d + b * g->bs;
        gradient_slice(d, grad_source(l, gslice(g, b)), size, l->activation);
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int i = 0; i < size; ++i) s += d[i];
        l->bias_updates[f] += s;
    }
}

/* Channel f with batch-norm. */
TAIL_INLINE void backward_norm(const layer *l, const amp_tail_half *th, const float *mean,
                               const float *variance, int f, const tail_grad *g, int size,
                               int cudnn)
{
    const int batch = l->batch;
    const float count = (float)size * batch;
    /* the forward's normalisation, to make x_norm again from x in half (th->x) */
    const float fm = mean[f], fden = cudnn ? sqrtf(variance[f] + .00001f)
                                           : sqrtf(variance[f]) + .000001f;
    /* the activation's gradient, and the bias and scale gradients */
    float ss = 0;
    for (int b = 0; b < batch; ++b) {
        float *d = g->d + b * g->bs;
        gradient_slice(d, grad_source(l, gslice(g, b)), size, l->activation);
        float s = 0;
        if (th->x) {
            const float *x = input_of(l, th, g, b, size);
#pragma omp simd reduction(+ : s, ss)
            for (int i = 0; i < size; ++i) {
                s += d[i];
                ss += d[i] * ((x[i] - fm) / fden);
            }
        } else {
            const float *xn = l->x_norm + gslice(g, b);
#pragma omp simd reduction(+ : s, ss)
            for (int i = 0; i < size; ++i) {
                s += d[i];
                ss += d[i] * xn[i];
            }
        }
        l->bias_updates[f] += s;
    }
    l->scale_updates[f] += ss;
    /* through the scale and the normalisation */
    const float sc = l->scales[f], m = mean[f], ve = variance[f] + .00001f;
    const float inv = 1.f / sqrtf(ve);
    float md = 0, vd = 0;
    for (int b = 0; b < batch; ++b) {
        float *dd = g->d + b * g->bs;
        const float *x = input_of(l, th, g, b, size);
#pragma omp simd reduction(+ : md, vd)
        for (int i = 0; i < size; ++i) {
            dd[i] *= sc;
            md += dd[i];
            vd += dd[i] * (x[i] - m);
        }
    }
    md *= -inv;
    vd *= -.5f * powf(ve, -1.5f);
    l->mean_delta[f] = md;
    l->variance_delta[f] = vd;
    const float kv = vd * 2.f / count, km = md / count;
    for (int b = 0; b < batch; ++b) {
        float *dd = g->d + b * g->bs;
        const float *x = input_of(l, th, g, b, size);
#pragma omp simd
        for (int i = 0; i < size; ++i) dd[i] = dd[i] * inv + kv * (x[i] - m) + km;
    }
}

/* The four per-channel functions for one instruction set. */
typedef struct tail_kernels {
    void (*forward_bias)(const layer *l, int f, const tail_chan *c, int size);
    void (*forward_norm)(const layer *l, const amp_tail_half *th, int train, int f,
                         const tail_chan *c, int size, int cudnn);
    void (*backward_bias)(const layer *l, int f, const tail_grad *g, int size);
    void (*backward_norm)(const layer *l, const amp_tail_half *th, const float *mean,
                          const float *variance, int f, const tail_grad *g, int size, int cudnn);
} tail_kernels;

#define TAIL_VARIANTS(attr, isa)                                                                  \
    attr static void forward_bias_##isa(const layer *l, int f, const tail_chan *c, int size)      \
    {                                                                                             \
        forward_bias(l, f, c, size);                                                              \
    }                                                                                             \
    attr static void forward_norm_##isa(const layer *l, const amp_tail_half *th, int train,       \
                                        int f, const tail_chan *c, int size, int cudnn)           \
    {                                                                                             \
        forward_norm(l, th, train, f, c, size, cudnn);                                            \
    }                                                                                             \
    attr static void backward_bias_##isa(const layer *l, int f, const tail_grad *g, int size)     \
    {                                                                                             \
        backward_bias(l, f, g, size);                                                             \
    }                                                                                             \
    attr static void backward_norm_##isa(const layer *l, const amp_tail_half *th,                 \
                                         const float *mean, const float *variance, int f,         \
                                         const tail_grad *g, int size, int cudnn)                 \
    {                                                                                             \
        backward_norm(l, th, mean, variance, f, g, size, cudnn);                                  \
    }                                                                                             \
    static const tail_kernels tail_##isa = {forward_bias_##isa, forward_norm_##isa,               \
                                            backward_bias_##isa, backward_norm_##isa};

TAIL_VARIANTS(, sse2)
#if defined(__x86_64__) && defined(__GNUC__)
TAIL_VARIANTS(__attribute__((target("avx2"))), avx2)
TAIL_VARIANTS(__attribute__((target("avx512f"))), avx512)
#define TAIL_X86 1
#endif

/* The variant isa.c chose for this process. */
static const tail_kernels *kernels(void)
{
#ifdef TAIL_X86
    switch (amp_cpu_isa_used()) {
    case AMP_ISA_AVX512: return &tail_avx512;
    case AMP_ISA_AVX2: return &tail_avx2;
    default: break; /* AVX without AVX2 too: no variant of its own */
    }
#endif
    return &tail_sse2;
}

static const amp_tail_half no_half; /* every tensor in darknet's float32 arrays */

/* Per-thread float32 buffers of n floats each (NULL when n is 0). */
static float *thread_buffers(size_t n)
{
    if (!n) return NULL;
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    float *p = malloc((size_t)threads * n * sizeof(float));
    if (!p) abort(); /* as darknet's allocations inside a step */
    return p;
}

static float *thread_buffer(float *bufs, size_t n)
{
    int t = 0;
#ifdef _OPENMP
    t = omp_get_thread_num();
#endif
    return bufs ? bufs + (size_t)t * n : NULL;
}

void amp_tail_forward(layer l, network net, int nbias, int bias_size, amp_bn_formula bn,
                      const amp_tail_half *th)
{
    if (!th) th = &no_half;
    if (th->y) { /* the output in half storage: NHWC */
        if (!th->from_half) /* the half-rounded result in l.output (exact in half) */
            amp_cpu_to_half_nhwc(th->bf16 ? AMP_DTYPE_BFLOAT16 : AMP_DTYPE_FLOAT16, l.output,
                                 th->x ? th->x : th->y, l.batch, nbias, bias_size);
        amp_tail_forward_nhwc(l, net, nbias, bias_size, bn, th);
        return;
    }
    const int n = nbias, size = bias_size, train = net.train, cudnn = bn == AMP_BN_CUDNN;
    const long total = (long)l.batch * n * size, ns = (long)n * size;
    const tail_kernels *k = kernels();
#pragma omp parallel for schedule(static) if (total > AMP_TAIL_MIN_PARALLEL)
    for (int f = 0; f < n; ++f) {
        tail_chan c = {l.output + (long)f * size, ns, (long)f * size, ns};
        if (l.batch_normalize) k->forward_norm(&l, th, train, f, &c, size, cudnn);
        else k->forward_bias(&l, f, &c, size);
    }
}

void amp_tail_backward(layer l, network net, int nbias, int bias_size, const amp_tail_half *th)
{
    if (!th) th = &no_half;
    if (th->done) return; /* ran already, on half storage (activations.c) */
    if (th->dh) {
        amp_tail_backward_nhwc(l, net, nbias, bias_size, th);
        return;
    }
    const tail_kernels *k = kernels();
    const int n = nbias, size = bias_size;
    const long total = (long)l.batch * n * size, ns = (long)n * size;
    const float *mean = net.train ? l.mean : l.rolling_mean;
    const float *variance = net.train ? l.variance : l.rolling_variance;
    /* per thread: a slice of the batch-norm input read from half storage */
    const size_t per = th->x ? (size_t)size : 0;
    float *bufs = thread_buffers(per);
#pragma omp parallel for schedule(static) if (total > AMP_TAIL_MIN_PARALLEL)
    for (int f = 0; f < n; ++f) {
        tail_grad g = {l.delta + (long)f * size, ns, (long)f * size, ns,
                       thread_buffer(bufs, per)};
        if (l.batch_normalize) k->backward_norm(&l, th, mean, variance, f, &g, size, th->cudnn);
        else k->backward_bias(&l, f, &g, size);
    }
    free(bufs);
}

/* The half layers' tail on NHWC half storage (plugin/cpu/tail_nhwc.c:
 * amp_tail_forward_nhwc, amp_tail_backward_nhwc) against darknet's own
 * float32 code on NCHW, as forward_convolutional_layer and
 * backward_convolutional_layer run it around their GEMMs:
 * forward_batchnorm_layer or add_bias, then activate_array; gradient_array,
 * then backward_batchnorm_layer or backward_bias.
 *
 * Cases: channels 3, 8, 16 and 100 by 1, 35 and 169 positions, batch 2 or 3,
 * with and without batch-norm, each with LEAKY, LINEAR, LOGISTIC (darknet's
 * generic activate()), MISH, SWISH or HARD_MISH (whose gradient takes the
 * values before the activation: darknet's from l.activation_input, ours made
 * again from the batch-norm input, or without batch-norm kept in x), in
 * float16 and bfloat16. With fewer than 64 channels
 * the implementation takes k = ceil(64 / c) positions as one row, and the
 * positions left after the last whole row as a row of their own: most cases
 * have such a remainder, and with 1 position nothing else. Above the threaded
 * path's 16384 values: 100 channels by 169 positions, batch 3, both ways,
 * and 8 channels by 2209 positions (many chunks of rows and a remainder).
 *
 * The raw convolution output x and the incoming gradient are half values, so
 * that both sides start from the same numbers. The gradient has a
 * per-channel offset and a part proportional to x, so that batch-norm's mean
 * and variance terms are large (a dropped term shows); zeros, and values of
 * the dtype's smallest magnitude (flushed by LEAKY's 0.1 and LOGISTIC's
 * y (1 - y)). Darknet's float32 arrays are not given to ours (NULL): it may
 * use the half tensors and the parameters only.
 *
 * What is compared, each bound argued where it is checked:
 * - the batch statistics and the rolling ones, against darknet's training
 *   forward: relative max(1e-5, count eps_32) (darknet's own sums drift
 *   with count);
 * - the outputs, against darknet's normalisation on ours' statistics (so
 *   that its drift does not count twice): rounded to half, within 1 half ulp
 *   (or float32 noise where a sum cancels near zero), in at most 1% of the
 *   elements rounded the other way;
 * - the gradient, against darknet's backward on ours' output and statistics:
 *   relative 2-norm of the difference 2 u_half, each element within 1 half
 *   ulp + 1e-5 max|gradient|;
 * - bias_updates, scale_updates: 1e-4 of the sum of the terms' magnitudes;
 * - the rounding counts th->nonzero and th->flushed, exactly;
 * - ours on 1 and 3 threads against the default: bit for bit (the sums go
 *   per fixed chunk of positions, in order);
 * - the forward in inference (net.train = 0, rolling statistics), which
 *   must leave every statistic alone.
 *
 *   tail_nhwc_test
 */
#include "cpu.h"
#include "math/half_format.h"
#include "check.h"

#include "activations.h"
#include "batchnorm_layer.h"
#include "blas.h"
#include "convolutional_layer.h" /* add_bias, backward_bias */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- the half dtype ---- */

static uint16_t to_half(amp_dtype dt, float x)
{
    return dt == AMP_DTYPE_BFLOAT16 ? amp_f32_to_bf16(x) : amp_f32_to_f16(x);
}

static float from_half(amp_dtype dt, uint16_t h)
{
    return dt == AMP_DTYPE_BFLOAT16 ? amp_bf16_to_f32(h) : amp_f16_to_f32(h);
}

static float round_half(amp_dtype dt, float x)
{
    return from_half(dt, to_half(dt, x));
}

/* The spacing of the half values at |v| (subnormals: the smallest one). */
static double half_ulp(amp_dtype dt, float v)
{
    const int bf = dt == AMP_DTYPE_BFLOAT16, bits = bf ? 7 : 10, emin = bf ? -126 : -14;
    int e = 0;
    if (v != 0) frexp(fabs(v), &e);
    const int f = v != 0 && e - 1 > emin ? e - 1 : emin;
    return ldexp(1.0, f - bits);
}

/* The smallest positive half value. */
static float half_tiny(amp_dtype dt)
{
    return from_half(dt, 1);
}

/* Half patterns as integers in value order: their difference counts ulps. */
static long ordered(uint16_t h)
{
    return h & 0x8000u ? -(long)(h & 0x7fffu) : (long)h;
}

/* NCHW float32 <-> NHWC half: (b, c, p) <-> (b, p, c). */
static void to_nhwc(amp_dtype dt, const float *x, uint16_t *h, int batch, int c, int hw)
{
    for (int b = 0; b < batch; ++b)
        for (int ch = 0; ch < c; ++ch)
            for (int p = 0; p < hw; ++p)
                h[((size_t)b * hw + p) * c + ch] = to_half(dt, x[((size_t)b * c + ch) * hw + p]);
}

static void from_nhwc(amp_dtype dt, const uint16_t *h, float *x, int batch, int c, int hw)
{
    for (int b = 0; b < batch; ++b)
        for (int ch = 0; ch < c; ++ch)
            for (int p = 0; p < hw; ++p)
                x[((size_t)b * c + ch) * hw + p] = from_half(dt, h[((size_t)b * hw + p) * c + ch]);
}

/* ---- the inputs ---- */

static uint32_t next24(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static float uniform(uint32_t *s, float lo, float hi)
{
    return lo + (hi - lo) * ((float)next24(s) / 16777216.f);
}

/* sign x 2^e x [1, 2), e in [lo, hi] */
static float spread(uint32_t *s, int lo, int hi)
{
    const int e = lo + (int)(next24(s) % (unsigned)(hi - lo + 1));
    const float m = ldexpf(uniform(s, 1.f, 2.f), e);
    return next24(s) & 1 ? -m : m;
}

typedef struct tcase {
    int c, hw, h, w, batch, bn;
    ACTIVATION act;
} tcase;

/* Everything a run starts from, the same for darknet's and ours. */
typedef struct inputs {
    size_t n;
    float *x, *g;       /* NCHW, half values: the convolution's output, the incoming gradient */
    uint16_t *xh, *gh;  /* the same, NHWC half */
    /* per channel: parameters, the rolling statistics and the updates as they start, and
     * the rolling statistics the inference runs on */
    float *scales, *biases, *rmean, *rvar, *bupd, *supd, *imean, *ivar;
} inputs;

/* The NHWC index of NCHW element i. */
static size_t nhwc_of(const tcase *t, size_t i)
{
    const size_t per = (size_t)t->c * t->hw, b = i / per, f = i % per / t->hw, p = i % t->hw;
    return (b * t->hw + p) * t->c + f;
}

static const char *act_name(ACTIVATION a)
{
    return a == LEAKY      ? "leaky"
           : a == LINEAR   ? "linear"
           : a == LOGISTIC ? "logistic"
           : a == MISH     ? "mish"
           : a == SWISH    ? "swish"
           : a == HARD_MISH ? "hard_mish"
                            : "?";
}

static void inputs_make(inputs *in, const tcase *t, amp_dtype dt, uint32_t seed)
{
    const int c = t->c, hw = t->hw;
    const size_t n = (size_t)t->batch * c * hw;
    in->n = n;
    in->x = malloc(n * sizeof(float)), in->g = malloc(n * sizeof(float));
    in->xh = malloc(n * sizeof(uint16_t)), in->gh = malloc(n * sizeof(uint16_t));
    float *pc = malloc(8 * (size_t)c * sizeof(float)), *off = malloc(4 * (size_t)c * sizeof(float));
    if (!in->x || !in->g || !in->xh || !in->gh || !pc || !off) abort();
    in->scales = pc, in->biases = pc + c, in->rmean = pc + 2 * c, in->rvar = pc + 3 * c;
    in->bupd = pc + 4 * c, in->supd = pc + 5 * c, in->imean = pc + 6 * c, in->ivar = pc + 7 * c;
    float *xo = off, *xs = off + c, *go = off + 2 * c, *gs = off + 3 * c;
    uint32_t s = seed;
    const float count = (float)t->batch * hw;
    for (int f = 0; f < c; ++f) {
        xo[f] = uniform(&s, -2.f, 2.f), xs[f] = uniform(&s, .25f, 2.f);
        go[f] = uniform(&s, -1.f, 1.f), gs[f] = uniform(&s, -.5f, .5f);
        in->scales[f] = uniform(&s, .5f, 2.f) * (next24(&s) & 1 ? -1.f : 1.f);
        in->biases[f] = uniform(&s, -1.f, 1.f);
        in->rmean[f] = uniform(&s, -1.f, 1.f), in->rvar[f] = uniform(&s, .5f, 2.f);
        /* updates start non-zero, of the size of the sums: ours must add to them */
        in->bupd[f] = uniform(&s, -1.f, 1.f) * count / 4;
        in->supd[f] = uniform(&s, -1.f, 1.f) * count / 4;
        in->imean[f] = xo[f] + uniform(&s, -.5f, .5f);
        in->ivar[f] = xs[f] * xs[f] * uniform(&s, .5f, 4.f);
    }
    for (int b = 0; b < t->batch; ++b)
        for (int f = 0; f < c; ++f)
            for (int p = 0; p < hw; ++p) {
                const size_t i = ((size_t)b * c + f) * hw + p;
                const float v = spread(&s, -10, 2);
                in->x[i] = round_half(dt, i % 53 == 7 ? ldexpf(v, -10) : xo[f] + xs[f] * v);
                float gv = go[f] + gs[f] * v + spread(&s, -10, -1);
                if (i % 61 == 5) gv = (next24(&s) & 1 ? -1.f : 1.f) * half_tiny(dt);
                if (i % 67 == 11) gv = i % 2 ? -0.f : 0.f; /* not counted as non-zero */
                in->g[i] = round_half(dt, gv);
            }
    to_nhwc(dt, in->x, in->xh, t->batch, c, hw);
    to_nhwc(dt, in->g, in->gh, t->batch, c, hw);
    free(off);
}

static void inputs_free(inputs *in)
{
    free(in->x), free(in->g), free(in->xh), free(in->gh), free(in->scales);
}

/* ---- darknet's side: its layer, its code ---- */

/* l's per-channel parameters and state as the inputs start them. */
static void layer_reset(layer *l, const inputs *in, int c)
{
    const size_t bytes = (size_t)c * sizeof(float);
    memcpy(l->biases, in->biases, bytes);
    memcpy(l->bias_updates, in->bupd, bytes);
    if (!l->batch_normalize) return;
    memcpy(l->scales, in->scales, bytes);
    memcpy(l->scale_updates, in->supd, bytes);
    memcpy(l->rolling_mean, in->rmean, bytes);
    memcpy(l->rolling_variance, in->rvar, bytes);
}

/* ---- ours: a copy of the layer with parameter arrays of its own ---- */

static float *dup_floats(const float *a, int n)
{
    float *p = malloc((size_t)n * sizeof(float));
    if (!p) abort();
    memcpy(p, a, (size_t)n * sizeof(float));
    return p;
}

/* A 1x1 convolutional layer of c filters on h x w, as make_convolutional_layer
 * makes its arrays for the tail (its weights are not needed here); built by
 * hand, since a CUDA build's make_convolutional_layer sets up cuDNN, which
 * needs a GPU. */
static layer conv_layer(int batch, int h, int w, int c, ACTIVATION act, int bn)
{
    layer l;
    memset(&l, 0, sizeof l);
    l.type = CONVOLUTIONAL;
    l.batch = batch, l.h = l.out_h = h, l.w = l.out_w = w, l.c = 1, l.n = l.out_c = c;
    l.size = l.stride = 1;
    l.outputs = h * w * c, l.inputs = h * w;
    l.batch_normalize = bn, l.activation = act;
    const size_t n = (size_t)batch * l.outputs;
    l.output = calloc(n, sizeof(float)), l.delta = calloc(n, sizeof(float));
    l.biases = calloc((size_t)c, sizeof(float)), l.bias_updates = calloc((size_t)c, sizeof(float));
    if (bn) {
        l.scales = calloc((size_t)c, sizeof(float));
        l.scale_updates = calloc((size_t)c, sizeof(float));
        l.mean = calloc((size_t)c, sizeof(float)), l.variance = calloc((size_t)c, sizeof(float));
        l.mean_delta = calloc((size_t)c, sizeof(float));
        l.variance_delta = calloc((size_t)c, sizeof(float));
        l.rolling_mean = calloc((size_t)c, sizeof(float));
        l.rolling_variance = calloc((size_t)c, sizeof(float));
        l.x = calloc(n, sizeof(float)), l.x_norm = calloc(n, sizeof(float));
    }
    if (activation_needs_input(act)) l.activation_input = calloc(n, sizeof(float));
    return l;
}

static layer layer_copy(const layer *l)
{
    layer o = *l;
    const int c = l->out_c;
    o.output = o.delta = o.x = o.x_norm = NULL; /* ours works on the half tensors only */
    o.activation_input = NULL;
    o.biases = dup_floats(l->biases, c), o.bias_updates = dup_floats(l->bias_updates, c);
    if (l->batch_normalize) {
        o.scales = dup_floats(l->scales, c), o.scale_updates = dup_floats(l->scale_updates, c);
        o.mean = dup_floats(l->mean, c), o.variance = dup_floats(l->variance, c);
        o.rolling_mean = dup_floats(l->rolling_mean, c);
        o.rolling_variance = dup_floats(l->rolling_variance, c);
        o.mean_delta = dup_floats(l->mean_delta, c);
        o.variance_delta = dup_floats(l->variance_delta, c);
    }
    return o;
}

static void layer_copy_free(layer *o)
{
    free(o->biases), free(o->bias_updates);
    if (o->batch_normalize) {
        free(o->scales), free(o->scale_updates), free(o->mean), free(o->variance);
        free(o->rolling_mean), free(o->rolling_variance);
        free(o->mean_delta), free(o->variance_delta);
    }
}

/* What one training step of ours leaves: the output and the gradient (NHWC
 * half), the per-channel state (mean, variance, rolling mean and variance,
 * bias and scale updates) and the rounding counts. */
typedef struct result {
    uint16_t *y, *dh;
    float *state;
    unsigned long long nonzero, flushed;
} result;

enum { STATE_MEAN, STATE_VAR, STATE_RMEAN, STATE_RVAR, STATE_BUPD, STATE_SUPD, STATE_ROWS };

static void result_alloc(result *r, size_t n, int c)
{
    r->y = malloc(n * sizeof(uint16_t)), r->dh = malloc(n * sizeof(uint16_t));
    r->state = calloc((size_t)STATE_ROWS * c, sizeof(float));
    if (!r->y || !r->dh || !r->state) abort();
}

static void result_free(result *r)
{
    free(r->y), free(r->dh), free(r->state);
}

static void ours_train(layer *l2, const tcase *t, amp_dtype dt, const inputs *in, uint16_t *xh,
                       result *r)
{
    const int c = t->c;
    const size_t bytes = (size_t)c * sizeof(float);
    layer_reset(l2, in, c);
    network net;
    memset(&net, 0, sizeof net);
    net.train = 1;
    amp_tail_half th;
    memset(&th, 0, sizeof th);
    th.bf16 = dt == AMP_DTYPE_BFLOAT16;
    th.from_half = 1;
    th.y = r->y;
    /* batch-norm reads x, writes y; so does mish and the like without (x
     * kept for their gradient); else y holds x and is overwritten */
    if (t->bn || activation_needs_input(t->act)) {
        memcpy(xh, in->xh, in->n * sizeof(uint16_t));
        th.x = xh;
    } else {
        memcpy(r->y, in->xh, in->n * sizeof(uint16_t));
    }
    amp_tail_forward_nhwc(*l2, net, c, t->hw, AMP_BN_DARKNET_CPU, &th);
    memcpy(r->dh, in->gh, in->n * sizeof(uint16_t));
    th.dh = r->dh;
    r->nonzero = r->flushed = 0;
    th.nonzero = &r->nonzero, th.flushed = &r->flushed;
    amp_tail_backward_nhwc(*l2, net, c, t->hw, &th);
    memcpy(r->state + STATE_BUPD * c, l2->bias_updates, bytes);
    if (t->bn) {
        memcpy(r->state + STATE_MEAN * c, l2->mean, bytes);
        memcpy(r->state + STATE_VAR * c, l2->variance, bytes);
        memcpy(r->state + STATE_RMEAN * c, l2->rolling_mean, bytes);
        memcpy(r->state + STATE_RVAR * c, l2->rolling_variance, bytes);
        memcpy(r->state + STATE_SUPD * c, l2->scale_updates, bytes);
    }
}

/* ---- comparisons ---- */

#define U32 5.9604644775390625e-08 /* 2^-24, float32's unit roundoff */

/* Ours (NHWC half) against darknet's float32 (NCHW) rounded to half. An
 * element passes within 1 half ulp, or within 1 half ulp of darknet's
 * float32 value plus allow[i] (NULL: 0). */
typedef struct out_cmp {
    size_t differ, beyond, bad, at; /* rounded differently; more than 1 ulp apart; failing */
    long worst;                     /* half ulps, at NCHW element at */
} out_cmp;

static out_cmp compare_outputs(amp_dtype dt, const float *ref, const uint16_t *got,
                               const tcase *t, const float *allow)
{
    out_cmp o = {0, 0, 0, 0, 0};
    for (size_t i = 0; i < (size_t)t->batch * t->c * t->hw; ++i) {
        const uint16_t g = got[nhwc_of(t, i)];
        const long d = labs(ordered(g) - ordered(to_half(dt, ref[i])));
        o.differ += d != 0;
        o.beyond += d > 1;
        o.bad += d > 1 && !(fabs((double)from_half(dt, g) - ref[i]) <=
                            half_ulp(dt, ref[i]) + (allow ? allow[i] : 0));
        if (d > o.worst) o.worst = d, o.at = i;
    }
    return o;
}

/* max |got - ref| / max(|ref|, floor) over n values (floor may be NULL: 0) */
static double worst_rel(const float *got, const float *ref, const float *floor, int n, int *at)
{
    double w = 0;
    *at = 0;
    for (int i = 0; i < n; ++i) {
        double den = fabs(ref[i]);
        if (floor && floor[i] > den) den = floor[i];
        const double e = den > 0 ? fabs((double)got[i] - ref[i]) / den : got[i] != ref[i];
        if (e > w || e != e) w = e, *at = i;
    }
    return w;
}

/* One case's arrays: darknet's layer l and ours (its parameter copy l2),
 * the inputs, ours' first result, scratch. */
typedef struct run {
    const tcase *t;
    amp_dtype dt;
    char name[128];
    size_t n;
    layer l, l2;
    inputs in;
    result r;
    uint16_t *xh;
    float *allow, *d, *got;
} run;

/* The forward outputs (training or inference) against darknet's in l.output. */
static void check_outputs(run *u, const char *what, const uint16_t *y, const float *ref)
{
    const tcase *t = u->t;
    /* allow: float32 rounding of the last multiply-add (ours may fuse it,
     * darknet rounds the product): where it cancels to near zero, the half
     * ulp there is below it */
    for (int b = 0; b < t->batch; ++b)
        for (int f = 0; f < t->c; ++f)
            for (int p = 0; p < t->hw; ++p) {
                const size_t i = ((size_t)b * t->c + f) * t->hw + p;
                const double v = t->bn ? u->l.x_norm[i] * u->l.scales[f] : u->in.x[i];
                u->allow[i] = (float)(4 * U32 * (fabs(v) + fabs(u->l.biases[f])));
            }
    const out_cmp o = compare_outputs(u->dt, ref, y, t, u->allow);
    /* Rounded the other way only where darknet's float32 value lies within
     * a few float32 ulps of a half rounding boundary: at most 2e-4 of the
     * elements measured; a bias of a fraction of an ulp shows in far more */
    const size_t most = 1 + u->n / 100;
    CHECK(o.bad == 0 && o.differ <= most,
          "%s: %s: %zu of %zu elements differ from darknet's rounded to half (bound %zu), the "
          "worst by %ld half ulps (NCHW %zu: darknet %.9g, ours %.9g); %zu more than 1 apart, "
          "%zu of them beyond 4 eps_32 (|x_norm scale| + |bias|) of darknet's float32 (bound 0)",
          u->name, what, o.differ, u->n, most, o.worst, o.at, ref[o.at],
          from_half(u->dt, y[nhwc_of(t, o.at)]), o.beyond, o.bad);
}

/* The batch statistics and the rolling ones against darknet's training
 * forward (l holds them). */
static void check_statistics(run *u)
{
    const tcase *t = u->t;
    const int c = t->c;
    const long count = (long)t->batch * t->hw;
    /* The mean is a float32 sum of count values, in another order than
     * darknet's: its error scales with the sum of their magnitudes, so
     * relative to max(|mean|, mean |x|) of the channel, the rolling mean
     * likewise with .99 |its start| added; the variance, a sum of squares,
     * relative to itself. darknet's sums run one value after another, whose
     * error grows with count: at most (count - 1) eps_32 (Higham); measured
     * 1.3e-5 of the variance at count 6627, against 1e-7 for ours (both
     * against double). Bound max(1e-5, count eps_32): 1e-5 up to count 167,
     * 3e-5 at 507, 4e-4 at 6627; a wrong term, channel or divisor (count
     * for count - 1: 1/count) misses by more, except the divisor at 6627. */
    float *fmean = malloc(2 * (size_t)c * sizeof(float)), *frmean = fmean + c;
    if (!fmean) abort();
    for (int f = 0; f < c; ++f) {
        double s = 0;
        for (int b = 0; b < t->batch; ++b)
            for (int p = 0; p < t->hw; ++p) s += fabs(u->in.x[((size_t)b * c + f) * t->hw + p]);
        fmean[f] = (float)(s / count);
        frmean[f] = .99f * fabsf(u->in.rmean[f]) + .01f * fmean[f];
    }
    const double bound = fmax(1e-5, count * U32);
    const float *st = u->r.state;
    int a1, a2, a3, a4;
    const double e_mean = worst_rel(st + STATE_MEAN * c, u->l.mean, fmean, c, &a1);
    const double e_var = worst_rel(st + STATE_VAR * c, u->l.variance, NULL, c, &a2);
    const double e_rmean = worst_rel(st + STATE_RMEAN * c, u->l.rolling_mean, frmean, c, &a3);
    const double e_rvar = worst_rel(st + STATE_RVAR * c, u->l.rolling_variance, NULL, c, &a4);
    CHECK(e_mean <= bound && e_var <= bound && e_rmean <= bound && e_rvar <= bound,
          "%s: statistics against darknet's, worst relative difference (bound %.2g): mean %.2g "
          "(channel %d), variance %.2g (%d), rolling mean %.2g (%d), rolling variance %.2g (%d)",
          u->name, bound, e_mean, a1, e_var, a2, e_rmean, a3, e_rvar, a4);
    free(fmean);
}

/* The gradient, the rounding counts, the updates: ours (u->r) against
 * darknet's backward (l.delta, l.bias_updates, l.scale_updates); u->d holds
 * darknet's d = g act'(y), the terms of the sums. */
static void check_backward(run *u)
{
    const tcase *t = u->t;
    const amp_dtype dt = u->dt;
    const size_t n = u->n;
    const int c = t->c, hw = t->hw;
    const float *ref = u->l.delta, *got = u->got;
    from_nhwc(dt, u->r.dh, u->got, t->batch, c, hw);

    /* The gradient. Ours rounds a float32 value once, to nearest: within
     * 1/2 half ulp of it, which is within float32 noise of darknet's (sums
     * in another order, x_norm made again in float32: ~1e-7 relative to the
     * terms; batch-norm's subtractions can leave an element far smaller than
     * its terms, hence an absolute part). Per element: |ours - darknet's|
     * <= 1 half ulp of darknet's + 1e-5 max|darknet's| (twice the rounding;
     * ~100 eps_32 of the largest). Over the tensor: the relative 2-norm of
     * the difference <= 2^-10 (float16) or 2^-7 (bfloat16), twice the unit
     * roundoff, where rounding to nearest gives 0.2 to 0.75 of it. A dropped
     * mean or variance term moves the gradient by about its own size (the
     * incoming gradient has large per-channel and x-proportional parts). */
    double maxabs = 0, s2 = 0, e2 = 0;
    for (size_t i = 0; i < n; ++i) maxabs = fmax(maxabs, fabs(ref[i]));
    double wratio = 0, wulps = 0, wallow = 0;
    size_t wat = 0;
    for (size_t i = 0; i < n; ++i) {
        const double e = fabs((double)got[i] - ref[i]), ulp = half_ulp(dt, ref[i]);
        s2 += (double)ref[i] * ref[i], e2 += e * e;
        const double allow = ulp + 1e-5 * maxabs;
        if (e / allow > wratio || e != e)
            wratio = e / allow, wulps = e / ulp, wallow = allow / ulp, wat = i;
    }
    const double rel2 = s2 > 0 ? sqrt(e2 / s2) : sqrt(e2);
    const double rel2_bound = dt == AMP_DTYPE_BFLOAT16 ? 1.0 / 128 : 1.0 / 1024;
    CHECK(rel2 <= rel2_bound && wratio <= 1,
          "%s: gradient against darknet's: relative 2-norm of the difference %.3g (bound %.3g); "
          "worst element %.3g half ulps of darknet's, %.2f of its bound (%.3g ulps: 1 + 1e-5 "
          "max|darknet's|; NCHW %zu: darknet %.9g, ours %.9g)",
          u->name, rel2, rel2_bound, wulps, wratio, wallow, wat, ref[wat], got[wat]);

    /* The rounding counts: nonzero - flushed is exactly the non-zero half
     * values ours wrote; without batch-norm the values rounded are darknet's
     * d (the same float32 product), so both counts are known. */
    size_t nz_out = 0, nz_ref = 0, fl_ref = 0;
    for (size_t i = 0; i < n; ++i) {
        nz_out += (u->r.dh[i] & 0x7fffu) != 0;
        nz_ref += u->d[i] != 0;
        fl_ref += u->d[i] != 0 && (to_half(dt, u->d[i]) & 0x7fffu) == 0;
    }
    const unsigned long long nz = u->r.nonzero, fl = u->r.flushed;
    const int same_as_d = nz == nz_ref && fl == fl_ref;
    CHECK(fl <= nz && nz - fl == nz_out && (t->bn || same_as_d),
          "%s: gradient rounding counts: nonzero %llu - flushed %llu against %zu non-zero half "
          "values written%s",
          u->name, nz, fl, nz_out,
          t->bn        ? ""
          : same_as_d ? "; darknet's d: the same counts"
                      : "; darknet's d: NOT the same counts");

    /* bias_updates += sum d, scale_updates += sum d x_norm: float32 sums of
     * batch x hw terms in another order than darknet's. A sum's rounding
     * error scales with the sum of the terms' magnitudes: (n - 1) eps_32 of
     * it at worst, ~sqrt(n) eps_32 typically (n = 6627 at most here: 4e-4,
     * 5e-6). The bound, 1e-4 of sum|terms| + |the starting value|, sits 20x
     * above the typical; a lost term, a lost starting value (as large as the
     * sums) or a wrong channel misses it by far. */
    float *fb = malloc(2 * (size_t)c * sizeof(float)), *fs = fb + c;
    if (!fb) abort();
    for (int f = 0; f < c; ++f) {
        double sb = 0, ss = 0;
        for (int b = 0; b < t->batch; ++b)
            for (int p = 0; p < hw; ++p) {
                const size_t i = ((size_t)b * c + f) * hw + p;
                sb += fabs(u->d[i]);
                if (t->bn) ss += fabs(u->d[i] * u->l.x_norm[i]);
            }
        fb[f] = (float)(sb + fabs(u->in.bupd[f]));
        fs[f] = (float)(ss + fabs(u->in.supd[f]));
    }
    int ab, as = 0;
    const double e_b = worst_rel(u->r.state + STATE_BUPD * c, u->l.bias_updates, fb, c, &ab);
    const double e_s =
        t->bn ? worst_rel(u->r.state + STATE_SUPD * c, u->l.scale_updates, fs, c, &as) : 0;
    CHECK(e_b <= 1e-4 && e_s <= 1e-4,
          "%s: bias_updates, scale_updates against darknet's: worst difference %.2g (channel %d), "
          "%.2g (channel %d) of sum|terms| + |start| (bound 1e-4)%s",
          u->name, e_b, ab, e_s, as, t->bn ? "" : " (no scales without batch-norm)");
    free(fb);
}

/* Ours again on 1 and 3 threads: bit for bit the first run (default threads). */
static void check_threads(run *u)
{
#ifdef _OPENMP
    static const int threads[] = {1, 3};
    const int threads0 = omp_get_max_threads(), c = u->t->c;
    char what[96] = "";
    for (int k = 0; k < 2; ++k) {
        result r2;
        result_alloc(&r2, u->n, c);
        omp_set_num_threads(threads[k]);
        ours_train(&u->l2, u->t, u->dt, &u->in, u->xh, &r2);
        omp_set_num_threads(threads0);
        const char *diff = memcmp(r2.y, u->r.y, u->n * sizeof(uint16_t)) ? "outputs"
                           : memcmp(r2.dh, u->r.dh, u->n * sizeof(uint16_t)) ? "gradients"
                           : memcmp(r2.state, u->r.state, (size_t)STATE_ROWS * c * sizeof(float))
                               ? "statistics or updates"
                           : r2.nonzero != u->r.nonzero || r2.flushed != u->r.flushed ? "counts"
                                                                                         : NULL;
        if (diff && !*what)
            snprintf(what, sizeof what, ": on %d threads the %s differ", threads[k], diff);
        result_free(&r2);
    }
    CHECK(!*what, "%s: on 1 and 3 threads against %d: outputs, gradients, statistics, updates "
                  "and counts bit for bit the same%s",
          u->name, threads0, what);
#else
    printf("skip: %s: no OpenMP, one thread only\n", u->name);
#endif
}

/* Inference: darknet's forward and ours on the same rolling statistics,
 * which ours must leave alone (and the batch statistics). */
static void check_inference(run *u)
{
    const tcase *t = u->t;
    const int c = t->c;
    const size_t bytes = (size_t)c * sizeof(float);
    network net;
    memset(&net, 0, sizeof net);
    memcpy(u->l.rolling_mean, u->in.imean, bytes);
    memcpy(u->l.rolling_variance, u->in.ivar, bytes);
    memcpy(u->l2.rolling_mean, u->in.imean, bytes);
    memcpy(u->l2.rolling_variance, u->in.ivar, bytes);
    memcpy(u->l.output, u->in.x, u->n * sizeof(float));
    forward_batchnorm_layer(u->l, net);
    activate_array_keep(u->l.output, (int)u->n, t->act, u->l.activation_input);
    /* x_norm for check_outputs' allowance: darknet's normalize_cpu on the rolling statistics */
    memcpy(u->l.x_norm, u->in.x, u->n * sizeof(float));
    normalize_cpu(u->l.x_norm, u->l.rolling_mean, u->l.rolling_variance, t->batch, c, t->hw);

    float *before = malloc(4 * bytes);
    if (!before) abort();
    memcpy(before, u->l2.mean, bytes);
    memcpy(before + c, u->l2.variance, bytes);
    memcpy(before + 2 * c, u->l2.rolling_mean, bytes);
    memcpy(before + 3 * c, u->l2.rolling_variance, bytes);
    amp_tail_half th;
    memset(&th, 0, sizeof th);
    th.bf16 = u->dt == AMP_DTYPE_BFLOAT16, th.from_half = 1;
    memcpy(u->xh, u->in.xh, u->n * sizeof(uint16_t));
    th.x = u->xh, th.y = u->r.y;
    amp_tail_forward_nhwc(u->l2, net, c, t->hw, AMP_BN_DARKNET_CPU, &th);
    const int kept = !memcmp(before, u->l2.mean, bytes) &&
                     !memcmp(before + c, u->l2.variance, bytes) &&
                     !memcmp(before + 2 * c, u->l2.rolling_mean, bytes) &&
                     !memcmp(before + 3 * c, u->l2.rolling_variance, bytes);
    CHECK(kept, "%s: inference: statistics and rolling statistics %s", u->name,
          kept ? "untouched" : "CHANGED");
    check_outputs(u, "inference output", u->r.y, u->l.output);
    free(before);
}

/* ---- one case ---- */

static void run_case(const tcase *t, amp_dtype dt, uint32_t seed)
{
    run u;
    memset(&u, 0, sizeof u);
    u.t = t, u.dt = dt;
    const int c = t->c, hw = t->hw, batch = t->batch;
    snprintf(u.name, sizeof u.name, "%s %s%s, batch %d x %d channels x %d positions",
             amp_dtype_name(dt), t->bn ? "batch-norm + " : "bias + ", act_name(t->act), batch, c,
             hw);
    u.l = conv_layer(batch, t->h, t->w, c, t->act, t->bn);
    layer *l = &u.l;
    if (l->out_c != c || l->out_h * l->out_w != hw) {
        CHECK(0, "%s: darknet's layer is %d x %d x %d", u.name, l->out_c, l->out_h, l->out_w);
        free_layer(*l);
        return;
    }
    inputs_make(&u.in, t, dt, seed);
    const size_t n = u.n = u.in.n;
    layer_reset(l, &u.in, c);
    u.l2 = layer_copy(l);
    result_alloc(&u.r, n, c);
    u.xh = malloc(n * sizeof(uint16_t));
    u.allow = malloc(n * sizeof(float)), u.d = malloc(n * sizeof(float));
    u.got = malloc(n * sizeof(float));
    if (!u.xh || !u.allow || !u.d || !u.got) abort();
    network net;
    memset(&net, 0, sizeof net);
    net.train = 1;

    ours_train(&u.l2, t, dt, &u.in, u.xh, &u.r);

    /* darknet's forward, as forward_convolutional_layer after its GEMM */
    memcpy(l->output, u.in.x, n * sizeof(float));
    if (t->bn) {
        forward_batchnorm_layer(*l, net);
        check_statistics(&u);
        /* The rest on ours' batch statistics, through forward_batchnorm_layer's
         * own steps after them: the outputs and the gradient then hold to
         * half-rounding bounds, not to darknet's drift in its statistics
         * (which check_statistics bounds; at count 6627 it moves outputs
         * near zero by up to 16 half ulps) */
        memcpy(l->mean, u.r.state + STATE_MEAN * c, (size_t)c * sizeof(float));
        memcpy(l->variance, u.r.state + STATE_VAR * c, (size_t)c * sizeof(float));
        memcpy(l->x_norm, u.in.x, n * sizeof(float));
        normalize_cpu(l->x_norm, l->mean, l->variance, batch, c, hw);
        memcpy(l->output, l->x_norm, n * sizeof(float));
        scale_bias(l->output, l->scales, batch, c, hw);
    }
    add_bias(l->output, l->biases, batch, c, hw);
    activate_array_keep(l->output, (int)n, t->act, l->activation_input);
    check_outputs(&u, "forward output", u.r.y, l->output);

    /* darknet's backward on our output (act' of the same values), as
     * backward_convolutional_layer before its GEMMs */
    from_nhwc(dt, u.r.y, l->output, batch, c, hw);
    memcpy(l->delta, u.in.g, n * sizeof(float));
    gradient_array(activation_needs_input(t->act) ? l->activation_input : l->output, (int)n,
                   t->act, l->delta);
    memcpy(u.d, l->delta, n * sizeof(float));
    if (t->bn) backward_batchnorm_layer(*l, net);
    else backward_bias(l->bias_updates, l->delta, batch, c, hw);
    check_backward(&u);

    check_threads(&u);
    if (t->bn) check_inference(&u);

    free(u.xh), free(u.allow), free(u.d), free(u.got);
    result_free(&u.r);
    layer_copy_free(&u.l2);
    inputs_free(&u.in);
    free_layer(u.l);
}

int main(void)
{
    static const int cs[] = {3, 8, 16, 100};
    static const int hws[][2] = {{1, 1}, {5, 7}, {13, 13}}; /* h x w: 1, 35, 169 positions */
    static const ACTIVATION acts[] = {LEAKY, LINEAR, LOGISTIC, MISH, SWISH, HARD_MISH};
    tcase cases[2 * 4 * 3 + 1];
    int nc = 0;
    for (int ci = 0; ci < 4; ++ci)
        for (int hi = 0; hi < 3; ++hi)
            for (int bn = 0; bn < 2; ++bn) {
                tcase t = {cs[ci], hws[hi][0] * hws[hi][1], hws[hi][0], hws[hi][1],
                           (ci + hi) % 2 ? 3 : 2, bn, acts[(ci + 2 * hi + bn) % 6]};
                cases[nc++] = t;
            }
    /* 8 channels (rows of 8 positions), 6627 positions (a remainder of 3),
     * 53016 values: many chunks on the threads */
    const tcase big = {8, 47 * 47, 47, 47, 3, 1, LEAKY};
    cases[nc++] = big;
    printf("tail variant: %s\n", amp_cpu_isa_name(amp_cpu_isa_used()));
    static const amp_dtype dts[] = {AMP_DTYPE_FLOAT16, AMP_DTYPE_BFLOAT16};
    for (int d = 0; d < 2; ++d)
        for (int i = 0; i < nc; ++i)
            run_case(&cases[i], dts[d], 1000u + 77u * (unsigned)i + (unsigned)d);
    return check_report();
}

/* Half-precision convolutional, deconvolutional, connected and locally
 * connected layers (and the sub-layers of recurrent ones) on the CPU, emulated with
 * the numerics of a GPU's half GEMM/convolution: inputs and weights rounded to
 * the half type, products and sums in float32 (a float16 or bfloat16 product
 * is exact in float32), and half storage of what the GPU would store in half:
 * the GEMM's output before batch-norm/bias/activation, the gradient entering
 * the layer's GEMMs, and the data gradient they produce (then added, in
 * float32, into net.delta; never overwriting what route/shortcut layers
 * accumulated there). The weight gradient never passes through half: summed
 * in float32 and added, in float32, into darknet's weight_updates (which hold
 * the momentum history), as a GPU's GEMM with a float32 output adds it.
 * darknet's loss is a sum over the batch, so weight gradients grow with the
 * batch and would overflow float16's 65504 at small loss scales. Batch-norm,
 * bias, activation and their gradients stay float32 (the autocast policy).
 *
 * So underflow and overflow happen where they would on a GPU, and dynamic
 * loss scaling means on a CPU what it means there. This is the reference
 * path: it runs darknet's own float32 GEMM on rounded values, so it is no
 * faster than float32.
 */
#include "cpu.h"
#include "math/half_format.h"

#include "activations.h"
#include "batchnorm_layer.h"
#include "blas.h"
#include "col2im.h"
#include "convolutional_layer.h"
#include "gemm.h"
#include "im2col.h"
#include "network.h" /* get_layer_string */

#include <stdlib.h>
#include <string.h>

static void round_half(amp_dtype dtype, float *x, size_t n)
{
    if (dtype == AMP_DTYPE_FLOAT16) amp_round_f16_array(x, n);
    else if (dtype == AMP_DTYPE_BFLOAT16) amp_round_bf16_array(x, n);
}

static float *zeroed(amp_buffer *b, size_t n)
{
    float *p = amp_cpu_reserve(b, n);
    memset(p, 0, n * sizeof(float));
    return p;
}

/* The half copy of the weights, refreshed after every step and load. */
static const float *half_weights(amp_layer *al, const layer *l, size_t n, amp_dtype dtype)
{
    cpu_layer *c = cpu_layer_of(al);
    float *w = amp_cpu_reserve(&c->wq, n);
    if (c->wq_version != al->owner->weights_version) {
        memcpy(w, l->weights, n * sizeof(float));
        round_half(dtype, w, n);
        c->wq_version = al->owner->weights_version;
    }
    return w;
}

/* A half-rounded copy of src in b. */
static float *half_copy(amp_buffer *b, const float *src, size_t n, amp_dtype dtype)
{
    float *p = amp_cpu_reserve(b, n);
    memcpy(p, src, n * sizeof(float));
    round_half(dtype, p, n);
    return p;
}

/* The network's shared buffers (cpu_net): one layer runs at a time. */
static cpu_net *shared(const amp_layer *al)
{
    return cpu_net_of(al->owner);
}

/* The layer's input rounded to half, for its backward: rounded again, as
 * the forward rounded it (the buffer is shared by every layer; for a
 * recurrent layer's sub-layer, called once per time step, each with its own
 * input, this step's). */
static const float *rounded_input(amp_layer *al, network net, size_t n, amp_dtype dtype)
{
    return half_copy(&shared(al)->xq, net.input, n, dtype);
}

/* The float32 tail of a half layer's forward: its GEMM output stored in
 * half, then batch-norm or bias, then the activation. */
static void finish_forward(layer l, network net, amp_dtype dtype, int nbias, int bias_size)
{
    size_t nout = (size_t)l.outputs * l.batch;
    round_half(dtype, l.output, nout);
    const amp_layer *al = l.hook_data;
    amp_tail_forward(l, net, nbias, bias_size, cpu_net_of(al->owner)->bn_formula,
                     cpu_tail_half(al));
}

/* DARKNET_AMP_PROFILE: one call's times and work (2 flops per multiply-add). */
static void profile_add(amp_layer *al, int backward, double t0, double gemm_s, double macs)
{
    double t = amp_clock() - t0;
    if (backward) al->prof.bwd_s += t;
    else al->prof.fwd_s += t;
    al->prof.gemm_s += gemm_s;
    al->prof.gflop += 2e-9 * macs;
    al->prof.calls++;
}

/* Diagnostics: of the nonzero gradient elements entering a half layer, how
 * many rounding to half flushed to zero (per batch, amp_network_flushed). */
static void count_flushed(amp_net *an, const float *before, const float *after, size_t n)
{
    size_t nonzero = 0, flushed = 0;
    for (size_t i = 0; i < n; ++i) {
        nonzero += before[i] != 0.0f;
        flushed += before[i] != 0.0f && after[i] == 0.0f;
    }
    cpu_net_of(an)->grad_nonzero += nonzero;
    cpu_net_of(an)->grad_flushed += flushed;
}

/* Rounds a float32 data gradient to half and adds it into dst. */
static void add_half(amp_dtype dtype, float *g, size_t n, float *dst)
{
    round_half(dtype, g, n);
    axpy_cpu((int)n, 1, g, 1, dst, 1);
}

/* What a half layer's backward GEMMs use: the incoming gradient rounded to
 * half (its flushes counted), the half weights, the half input, and a zeroed
 * float32 buffer for the weight gradient (nw elements): the layer's whole
 * gradient summed there, then added to the history once, as a GPU's GEMM
 * (beta 1) adds its result. */
typedef struct half_operands {
    float *dy, *dw;
    const float *w, *x;
} half_operands;

static half_operands backward_operands(amp_layer *al, const layer *l, network net, size_t nw,
                                       amp_dtype dtype)
{
    const size_t nout = (size_t)l->outputs * l->batch;
    half_operands o;
    cpu_net *c = shared(al);
    o.dy = half_copy(&c->dq, l->delta, nout, dtype);
    /* (a tail on the plan's half storage rounded it, and counted there) */
    if (!cpu_layer_of(al)->tail.done) count_flushed(al->owner, l->delta, o.dy, nout);
    o.w = half_weights(al, l, nw, dtype);
    o.x = rounded_input(al, net, (size_t)l->inputs * l->batch, dtype);
    o.dw = zeroed(&c->tmp, nw);
    return o;
}

void amp_emulated_conv_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_dtype dtype = al->owner->scaler->opt.dtype;
    double t0 = al->owner->env.profile ? amp_clock() : 0;
    size_t nout = (size_t)l.outputs * l.batch;
    float *x = half_copy(&shared(al)->xq, net.input, (size_t)l.inputs * l.batch, dtype);
    const float *w = half_weights(al, &l, l.nweights, dtype);

    int m = l.n / l.groups, k = l.size * l.size * l.c / l.groups, n = l.out_w * l.out_h;
    fill_cpu((int)nout, 0, l.output, 1);
    for (int i = 0; i < l.batch; ++i) {
        for (int j = 0; j < l.groups; ++j) {
            float *a = (float *)w + j * l.nweights / l.groups;
            float *b = net.workspace;
            float *c = l.output + (i * l.groups + j) * n * m;
            float *im = x + (i * l.groups + j) * l.c / l.groups * l.h * l.w;
            if (l.size == 1) b = im;
            else im2col_cpu(im, l.c / l.groups, l.h, l.w, l.size, l.stride, l.pad, b);
            gemm(0, 0, m, n, k, 1, a, k, b, n, 1, c, n);
        }
    }
    double t1 = al->owner->env.profile ? amp_clock() : 0;
    finish_forward(l, net, dtype, l.n, l.out_h * l.out_w);
    if (al->owner->env.profile)
        profile_add(al, 0, t0, t1 - t0, (double)l.batch * l.groups * m * n * k);
}

void amp_emulated_conv_backward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_dtype dtype = al->owner->scaler->opt.dtype;
    int m = l.n / l.groups, n = l.size * l.size * l.c / l.groups, k = l.out_w * l.out_h;
    size_t chw = (size_t)l.c / l.groups * l.h * l.w;
    double t0 = al->owner->env.profile ? amp_clock() : 0;

    amp_tail_backward(l, net, l.n, k, cpu_tail_half(al));
    double t1 = al->owner->env.profile ? amp_clock() : 0;

    const half_operands o = backward_operands(al, &l, net, l.nweights, dtype);
    float *dy = o.dy, *dw = o.dw;
    const float *w = o.w, *x = o.x;

    for (int i = 0; i < l.batch; ++i) {
        for (int j = 0; j < l.groups; ++j) {
            float *a = dy + (i * l.groups + j) * m * k;
            float *b = net.workspace;
            float *im = (float *)x + (i * l.groups + j) * chw;
            if (l.size == 1) b = im;
            else im2col_cpu(im, l.c / l.groups, l.h, l.w, l.size, l.stride, l.pad, b);
            gemm(0, 1, m, n, k, 1, a, k, b, k, 1, dw + j * l.nweights / l.groups, n);

            if (!net.delta) continue;
            float *imd = net.delta + (i * l.groups + j) * chw;
            float *col = net.workspace;
            gemm(1, 0, n, k, m, 1, (float *)w + j * l.nweights / l.groups, n, a, k, 0, col, k);
            if (l.size == 1) {
                add_half(dtype, col, chw, imd);
            } else {
                float *dx = zeroed(&shared(al)->gx, chw);
                col2im_cpu(col, l.c / l.groups, l.h, l.w, l.size, l.stride, l.pad, dx);
                add_half(dtype, dx, chw, imd);
            }
        }
    }
    axpy_cpu(l.nweights, 1, dw, 1, l.weight_updates, 1);
    if (al->owner->env.profile)
        profile_add(al, 1, t0, amp_clock() - t1,
                    (double)l.batch * l.groups * m * n * k * (net.delta ? 2 : 1));
}

/* A deconvolution (transposed convolution), darknet's way: per image, the
 * GEMM of the transposed weights with the input gives columns that col2im
 * scatters and sums into the output, all in float32; the output is stored in
 * half once, after the scatter, as a GPU's half deconvolution (float32
 * accumulation, half output) stores it. */
void amp_emulated_deconv_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_dtype dtype = al->owner->scaler->opt.dtype;
    double t0 = al->owner->env.profile ? amp_clock() : 0;
    const int m = l.size * l.size * l.n, n = l.h * l.w, k = l.c;
    float *x = half_copy(&shared(al)->xq, net.input, (size_t)l.inputs * l.batch, dtype);
    const float *w = half_weights(al, &l, l.nweights, dtype);
    fill_cpu(l.outputs * l.batch, 0, l.output, 1);
    for (int i = 0; i < l.batch; ++i) {
        gemm(1, 0, m, n, k, 1, (float *)w, m, x + (size_t)i * k * n, n, 0, net.workspace, n);
        col2im_cpu(net.workspace, l.out_c, l.out_h, l.out_w, l.size, l.stride, l.pad,
                   l.output + (size_t)i * l.outputs);
    }
    double t1 = al->owner->env.profile ? amp_clock() : 0;
    finish_forward(l, net, dtype, l.n, l.out_h * l.out_w);
    if (al->owner->env.profile) profile_add(al, 0, t0, t1 - t0, (double)l.batch * m * n * k);
}

/* Its gradients: the incoming gradient rounded to half and laid out as
 * columns (im2col of half values is exact), then the weight gradient summed
 * over the batch in float32 and added unrounded (darknet's weight_updates),
 * and the data gradient per image in float32, stored in half and added
 * (net.delta). */
void amp_emulated_deconv_backward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_dtype dtype = al->owner->scaler->opt.dtype;
    const int c = l.c, hw = l.h * l.w, kk = l.size * l.size * l.n;
    const size_t chw = (size_t)c * hw;
    double t0 = al->owner->env.profile ? amp_clock() : 0;

    amp_tail_backward(l, net, l.n, l.out_h * l.out_w, cpu_tail_half(al));
    double t1 = al->owner->env.profile ? amp_clock() : 0;

    const half_operands o = backward_operands(al, &l, net, l.nweights, dtype);
    float *dy = o.dy, *dw = o.dw;
    const float *w = o.w, *x = o.x;
    /* zeroed: darknet's gemm scales C by beta = 0, and 0 * NaN of stale memory is NaN */
    float *dx = net.delta ? zeroed(&shared(al)->gx, chw) : NULL;
    for (int i = 0; i < l.batch; ++i) {
        float *col = net.workspace;
        im2col_cpu(dy + (size_t)i * l.outputs, l.out_c, l.out_h, l.out_w, l.size, l.stride, l.pad,
                   col);
        gemm(0, 1, c, kk, hw, 1, (float *)x + (size_t)i * chw, hw, col, hw, 1, dw, kk);
        if (!dx) continue;
        gemm(0, 0, c, hw, kk, 1, (float *)w, kk, col, hw, 0, dx, hw);
        add_half(dtype, dx, chw, net.delta + (size_t)i * chw);
    }
    axpy_cpu(l.nweights, 1, dw, 1, l.weight_updates, 1);
    if (al->owner->env.profile)
        profile_add(al, 1, t0, amp_clock() - t1, (double)l.batch * c * hw * kk * (dx ? 2 : 1));
}

void amp_emulated_connected_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_dtype dtype = al->owner->scaler->opt.dtype;
    double t0 = al->owner->env.profile ? amp_clock() : 0;
    size_t nout = (size_t)l.outputs * l.batch;
    float *x = half_copy(&shared(al)->xq, net.input, (size_t)l.inputs * l.batch, dtype);
    const float *w = half_weights(al, &l, (size_t)l.inputs * l.outputs, dtype);

    fill_cpu((int)nout, 0, l.output, 1);
    gemm(0, 1, l.batch, l.outputs, l.inputs, 1, x, l.inputs, (float *)w, l.inputs, 1, l.output,
         l.outputs);
    double t1 = al->owner->env.profile ? amp_clock() : 0;
    finish_forward(l, net, dtype, l.outputs, 1);
    if (al->owner->env.profile)
        profile_add(al, 0, t0, t1 - t0, (double)l.batch * l.inputs * l.outputs);
}

void amp_emulated_connected_backward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_dtype dtype = al->owner->scaler->opt.dtype;
    size_t nw = (size_t)l.inputs * l.outputs;
    double t0 = al->owner->env.profile ? amp_clock() : 0;

    amp_tail_backward(l, net, l.outputs, 1, cpu_tail_half(al));
    double t1 = al->owner->env.profile ? amp_clock() : 0;

    const half_operands o = backward_operands(al, &l, net, nw, dtype);
    float *dy = o.dy, *dw = o.dw;
    const float *w = o.w, *x = o.x;
    gemm(1, 0, l.outputs, l.inputs, l.batch, 1, dy, l.outputs, (float *)x, l.inputs, 1, dw,
         l.inputs);
    axpy_cpu((int)nw, 1, dw, 1, l.weight_updates, 1);
    if (net.delta) {
        size_t nin = (size_t)l.inputs * l.batch;
        float *dx = zeroed(&shared(al)->gx, nin);
        gemm(0, 0, l.batch, l.inputs, l.outputs, 1, dy, l.outputs, (float *)w, l.inputs, 1, dx,
             l.inputs);
        add_half(dtype, dx, nin, net.delta);
    }
    if (al->owner->env.profile)
        profile_add(al, 1, t0, amp_clock() - t1,
                    (double)l.batch * l.inputs * l.outputs * (net.delta ? 2 : 1));
}

/* A locally connected layer: one GEMM per output position, its own weights
 * at each. darknet starts the output at the biases and lets the GEMM add into
 * it; here the GEMM's result is stored in half first, then the biases are
 * added in float32, as a GPU's half GEMM with a float32 epilogue would. */
static void local_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_dtype dtype = al->owner->scaler->opt.dtype;
    const int locations = l.out_w * l.out_h, k = l.size * l.size * l.c;
    float *x = half_copy(&shared(al)->xq, net.input, (size_t)l.inputs * l.batch, dtype);
    const float *w = half_weights(al, &l, (size_t)locations * k * l.n, dtype);
    fill_cpu(l.outputs * l.batch, 0, l.output, 1);
    for (int i = 0; i < l.batch; ++i) {
        im2col_cpu(x + (size_t)i * l.inputs, l.c, l.h, l.w, l.size, l.stride, l.pad,
                   net.workspace);
        float *out = l.output + (size_t)i * l.outputs;
        for (int j = 0; j < locations; ++j)
            gemm(0, 0, l.n, 1, k, 1, (float *)w + (size_t)j * k * l.n, k, net.workspace + j,
                 locations, 1, out + j, locations);
    }
    round_half(dtype, l.output, (size_t)l.outputs * l.batch);
    for (int i = 0; i < l.batch; ++i)
        axpy_cpu(l.outputs, 1, l.biases, 1, l.output + (size_t)i * l.outputs, 1);
    activate_array(l.output, l.outputs * l.batch, l.activation);
}

static void local_backward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_dtype dtype = al->owner->scaler->opt.dtype;
    const int locations = l.out_w * l.out_h, k = l.size * l.size * l.c;
    const size_t nout = (size_t)l.outputs * l.batch, nw = (size_t)locations * k * l.n;
    const size_t chw = (size_t)l.c * l.h * l.w;

    gradient_array(l.output, (int)nout, l.activation, l.delta);
    for (int i = 0; i < l.batch; ++i)
        axpy_cpu(l.outputs, 1, l.delta + (size_t)i * l.outputs, 1, l.bias_updates, 1);

    const half_operands o = backward_operands(al, &l, net, nw, dtype);
    float *dy = o.dy, *dw = o.dw;
    const float *w = o.w, *x = o.x;
    for (int i = 0; i < l.batch; ++i) {
        im2col_cpu((float *)x + (size_t)i * l.inputs, l.c, l.h, l.w, l.size, l.stride, l.pad,
                   net.workspace);
        const float *d = dy + (size_t)i * l.outputs;
        for (int j = 0; j < locations; ++j)
            gemm(0, 1, l.n, k, 1, 1, (float *)d + j, locations, net.workspace + j, locations, 1,
                 dw + (size_t)j * k * l.n, k);
        if (!net.delta) continue;
        for (int j = 0; j < locations; ++j)
            gemm(1, 0, k, 1, l.n, 1, (float *)w + (size_t)j * k * l.n, k, (float *)d + j,
                 locations, 0, net.workspace + j, locations);
        float *dx = zeroed(&shared(al)->gx, chw);
        col2im_cpu(net.workspace, l.c, l.h, l.w, l.size, l.stride, l.pad, dx);
        add_half(dtype, dx, chw, net.delta + (size_t)i * chw);
    }
    axpy_cpu((int)nw, 1, dw, 1, l.weight_updates, 1);
}

/* The emulation's forms, one row a GEMM kind (kinds.c). */
static const amp_cpu_form forms[] = {
    {CONVOLUTIONAL, amp_emulated_conv_forward, amp_emulated_conv_backward},
    {DECONVOLUTIONAL, amp_emulated_deconv_forward, amp_emulated_deconv_backward},
    {CONNECTED, amp_emulated_connected_forward, amp_emulated_connected_backward},
    {LOCAL, local_forward, local_backward},
};

#define NFORMS (sizeof forms / sizeof forms[0])

int amp_emulation_has(LAYER_TYPE type)
{
    return amp_cpu_form_of(forms, NFORMS, type) != NULL;
}

amp_status amp_emulation_install(amp_layer *al, layer *l, char *why, size_t whylen)
{
    const amp_cpu_form *f = amp_cpu_form_of(forms, NFORMS, l->type);
    AMP_RETURN_ERROR_IF(!f, AMP_ERR_INVALID, why, whylen, "no half path for [%s]",
                        get_layer_string(l->type));
    al->forward = f->forward;
    al->backward = f->backward;
    cpu_layer_of(al)->runner = AMP_CPU_RUNS_EMULATED;
    al->label = "emulated";
    return AMP_OK;
}

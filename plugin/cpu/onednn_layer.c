/* Half-precision convolutions on the CPU through oneDNN: forward,
 * backward-data and backward-weights as oneDNN primitives with bfloat16
 * tensors and float32 accumulation (AVX512-BF16 or AMX kernels where the CPU
 * has them), or the same primitives in float32 (amp_dtype=float32 with
 * DARKNET_AMP_CPU=onednn, so a benchmark can tell the gain of the precision
 * from the gain of the library).
 *
 * Numerics are those of the emulation (emulated.c) and of a GPU: inputs,
 * weights, the convolution's output, the incoming gradient and the data
 * gradient are stored in bfloat16 (round to nearest even, by oneDNN's
 * conversions); products are summed in float32, in oneDNN's order. The
 * weight gradient is oneDNN's float32 output (bfloat16 operands), never
 * rounded. It is added into darknet's weight_updates and the data gradient
 * into net.delta by a reorder with a sum post-op, in float32: what
 * route/shortcut layers accumulated there is kept.
 *
 * Layout: darknet's tensors are NCHW float32. Each primitive is created with
 * format "any", so oneDNN picks its blocked layouts; reorders convert and
 * re-lay in one pass. Weights are converted once per weights version (every
 * update and load), not per call. Primitives are made for the layer's shape
 * and remade when darknet resizes the network (random=1) or changes the
 * batch.
 *
 * This file: a layer's forward and backward as darknet calls them, with the
 * float32 tails, the fall-backs to the emulation, the label, install and
 * free. The passes are in onednn_pass.c, the primitives in
 * onednn_direct.c and onednn_matmul.c, the choice of form in onednn_form.c.
 */
#include "onednn.h"

#include <stdlib.h>
#include <string.h>

/* l's emulation (emulated.c): where oneDNN cannot run a shape or a primitive failed. */
static void emulated_forward(layer l, network net)
{
    if (l.type == CONNECTED) amp_emulated_connected_forward(l, net);
    else if (l.type == DECONVOLUTIONAL) amp_emulated_deconv_forward(l, net);
    else amp_emulated_conv_forward(l, net);
}

static void emulated_backward(layer l, network net)
{
    if (l.type == CONNECTED) amp_emulated_connected_backward(l, net);
    else if (l.type == DECONVOLUTIONAL) amp_emulated_deconv_backward(l, net);
    else amp_emulated_conv_backward(l, net);
}

/* The layer's label for what was built: the form ("im2col + matmul") and,
 * for half numerics on float32 kernels, so. A convolution may change form
 * with its shape (random=1), and its label with it. */
static void relabel(amp_layer *al, amp_dnnl_conv *d, const layer *l)
{
    const char *form = d->matmul                        ? "im2col + matmul"
                       : l->type == CONVOLUTIONAL       ? "oneDNN convolution"
                       : l->type == DECONVOLUTIONAL     ? "oneDNN deconvolution"
                                                        : "oneDNN inner product";
    snprintf(d->label, sizeof d->label, "%s%s", form,
             d->rounded != AMP_DTYPE_FLOAT32 ? " on float32 kernels" : "");
    al->label = d->label;
}

static amp_status ensure_shape(amp_layer *al, const layer *l)
{
    amp_dnnl_conv *d = cpu_layer_of(al)->dnnl;
    if (d->batch == l->batch && d->h == l->h && d->w == l->w) return AMP_OK;
    char why[AMP_MSG_LEN];
    amp_dnnl_release(d);
    amp_status st = amp_dnnl_layer_build(al, d, l, why, sizeof why);
    if (st == AMP_OK) relabel(al, d, l);
    if (st != AMP_OK)
        fprintf(stderr, "amp: layer %d: oneDNN cannot run %dx%dx%d: %s; emulated\n", al->index,
                l->w, l->h, l->c, why);
    return st;
}

/* The convolution or GEMM, then the float32 tail: AMP_OK, or a status with
 * nothing of the layer's changed (the caller runs the emulation). */
static amp_status run_forward(amp_layer *al, amp_dnnl_conv *d, layer l, network net)
{
    const int profile = al->owner->env.profile;
    double t0 = profile ? amp_clock() : 0;
    d->onednn_forward = 0;
    if (ensure_shape(al, &l) != AMP_OK) return AMP_ERR_INVALID; /* said why */
    const amp_status st = amp_dnnl_forward_core(al, d, &l, net.input);
    if (st != AMP_OK) {
        if (!d->warned++)
            fprintf(stderr, "amp: layer %d: a oneDNN primitive failed in forward; emulated\n",
                    al->index);
        return st;
    }
    d->onednn_forward = 1;
    double t1 = profile ? amp_clock() : 0;
    /* the half-rounded convolution or GEMM (in l.output, or in the plan's half
     * storage); out_c biases (filters, or a connected layer's outputs) over
     * out_h * out_w positions */
    amp_tail_forward(l, net, l.out_c, l.out_h * l.out_w, cpu_net_of(al->owner)->bn_formula,
                     cpu_tail_half(al));
    if (profile) {
        al->prof.fwd_s += amp_clock() - t0;
        al->prof.gemm_s += t1 - t0;
        al->prof.gflop += 2e-9 * amp_kind_macs(&l);
        al->prof.calls++;
    }
    return AMP_OK;
}

/* A layer's forward: the input and (once per weights version) the weights
 * to oneDNN's layouts, the primitive, the output back into l.output, then the
 * float32 tail; the emulation where oneDNN cannot. */
static void layer_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    if (run_forward(al, cpu_layer_of(al)->dnnl, l, net) != AMP_OK) emulated_forward(l, net);
}

/* The float32 tail's gradient, then the weight and data gradients. */
static amp_status run_backward(amp_layer *al, amp_dnnl_conv *d, layer l, network net)
{
    const int profile = al->owner->env.profile;
    double t0 = profile ? amp_clock() : 0;
    amp_tail_backward(l, net, l.out_c, l.out_h * l.out_w, cpu_tail_half(al));
    double t1 = profile ? amp_clock() : 0;
    const amp_status st = amp_dnnl_gradients(al, d, l, net);
    if (profile) {
        double t2 = amp_clock();
        al->prof.bwd_s += t2 - t0;
        al->prof.gemm_s += t2 - t1;
        al->prof.gflop += 2e-9 * amp_kind_macs(&l) * (net.delta ? 2 : 1);
        al->prof.calls++;
    }
    return st;
}

static void layer_backward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_dnnl_conv *d = cpu_layer_of(al)->dnnl;
    if (!d->onednn_forward) { /* the forward fell back: its buffers are the emulation's */
        emulated_backward(l, net);
        return;
    }
    /* A failure mid-way leaves the gradients incomplete: the network's error
     * stops training before the step is used. */
    if (run_backward(al, d, l, net) != AMP_OK)
        amp_net_fail(al->owner, AMP_ERR_DEVICE,
                     "amp: layer %d: a oneDNN primitive failed in backward; its gradients are "
                     "incomplete", al->index);
}

/* ---- the activation plan's half storage (activations.c) ---- */

int amp_onednn_plan_io(cpu_layer *c, amp_dtype in, amp_dtype out)
{
    amp_dnnl_conv *d = c ? c->dnnl : NULL;
    if (!d) return 0;
    const dnnl_data_type_t ti = in == AMP_DTYPE_BFLOAT16  ? dnnl_bf16
                                : in == AMP_DTYPE_FLOAT16 ? dnnl_f16
                                                          : dnnl_f32;
    const dnnl_data_type_t to = out == AMP_DTYPE_BFLOAT16  ? dnnl_bf16
                                : out == AMP_DTYPE_FLOAT16 ? dnnl_f16
                                                           : dnnl_f32;
    if (amp_dnnl_user_type(d, 0) != ti || amp_dnnl_user_type(d, 1) != to) {
        d->user_in = ti;
        d->user_out = to;
        amp_dnnl_release(d); /* made again for these types at the next forward */
    }
    return 1;
}

amp_status amp_onednn_plan_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    return run_forward(al, cpu_layer_of(al)->dnnl, l, net);
}

int amp_onednn_plan_ran(const cpu_layer *c)
{
    return c && c->dnnl && c->dnnl->onednn_forward;
}

int amp_onednn_rounds_input_in_place(const cpu_layer *c)
{
    const amp_dnnl_conv *d = c ? c->dnnl : NULL;
    /* input_for rounds d->x, which is darknet's float32 array itself where
     * no reorder (whole or image by image) stands between them */
    return d && d->onednn_forward && d->rounded != AMP_DTYPE_FLOAT32 &&
           amp_dnnl_user_type(d, 0) == dnnl_f32 && !d->r_x && !d->image[AMP_T_X].r;
}

amp_status amp_onednn_plan_backward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    return run_backward(al, cpu_layer_of(al)->dnnl, l, net);
}

amp_status amp_onednn_install(amp_layer *al, layer *l, amp_dtype dtype, char *why,
                              size_t whylen)
{
    const int conv = l->type == CONVOLUTIONAL;
    AMP_RETURN_ERROR_IF(!conv && l->type != DECONVOLUTIONAL && l->type != CONNECTED,
                        AMP_ERR_INVALID, why, whylen,
                        "not a convolutional, deconvolutional or connected layer");
    cpu_net *cn = cpu_net_of(al->owner);
    struct amp_dnnl_ctx *ctx; /* layer_build finds it in cn */
    AMP_FORWARD_IF_ERROR(amp_dnnl_ctx_of(cn, &ctx, why, whylen));
    (void)ctx;
    amp_dnnl_conv *d = calloc(1, sizeof *d);
    AMP_RETURN_ERROR_IF(!d, AMP_ERR_NOMEM, why, whylen, "out of memory");
    /* float16 (oneDNN 2.6 has no float16 convolution on CPUs), and bfloat16
     * where the CPU has no bfloat16 instructions (oneDNN's bfloat16 kernels
     * are then its reference ones, slower than darknet's GEMM): the product
     * of two half values is exact in float32, so float32 kernels on operands
     * rounded to half, results rounded where a GPU stores half, keep every
     * rounding point of the emulation; only the order of the sums changes. */
    int native_bf16 = 0;
    (void)amp_onednn_isa(&native_bf16);
    d->dt = dtype == AMP_DTYPE_BFLOAT16 && native_bf16 ? dnnl_bf16 : dnnl_f32;
    d->rounded = d->dt == dnnl_f32 ? dtype : AMP_DTYPE_FLOAT32;
    amp_status st = amp_dnnl_layer_build(al, d, l, why, whylen);
    if (st == AMP_OK && cn->path == AMP_CPU_AUTO && amp_dnnl_has_reference(d)) {
        amp_errorf(why, whylen, "oneDNN has only reference kernels here (%s, %s, %s)", d->impl[0],
                   d->impl[1], d->impl[2]);
        amp_dnnl_release(d);
        st = AMP_ERR_INVALID;
    }
    if (st != AMP_OK) {
        free(d);
        return st;
    }
    cpu_layer_of(al)->dnnl = d;
    al->forward = layer_forward;
    al->backward = layer_backward;
    cpu_layer_of(al)->runner = AMP_CPU_RUNS_ONEDNN;
    relabel(al, d, l);
    return AMP_OK;
}

int amp_onednn_fallbacks(const cpu_layer *c)
{
    if (!c || !c->dnnl) return 0;
    return c->dnnl->warned + (c->dnnl->batch == 0); /* failed primitives; a shape it cannot run */
}

int amp_onednn_form(const cpu_layer *c, double *t_direct, double *t_matmul)
{
    *t_direct = *t_matmul = -1;
    const amp_dnnl_conv *d = c ? c->dnnl : NULL;
    if (!d || !d->batch || !d->bwd_weights) return -1;
    for (int i = 0; i < d->choice.n; ++i)
        if (d->choice.shape[i].batch == d->batch && d->choice.shape[i].h == d->h &&
            d->choice.shape[i].w == d->w) {
            *t_direct = d->choice.shape[i].t_direct;
            *t_matmul = d->choice.shape[i].t_matmul;
        }
    return d->matmul;
}

void amp_onednn_free(cpu_layer *c)
{
    if (!c || !c->dnnl) return;
    amp_dnnl_release(c->dnnl);
    free(c->dnnl);
    c->dnnl = NULL;
}

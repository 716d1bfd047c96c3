/* The activation plan on the GPU (plan.c decides it, the same way on every
 * device; this carries it out; DARKNET_AMP_GPU_PLAN=float32 turns it off): the tensors
 * the plan keeps in half are NHWC arrays of 16-bit patterns of the half
 * dtype on the device, the layout cuDNN's half convolutions run fastest in
 * (docs/gpu.md has the measurement), and darknet's float32 arrays for them
 * are freed.
 *
 * - A layer's output in half is darknet's own output_gpu pointer, a device
 *   allocation of 2 bytes an element: forward_network_gpu hands it to the
 *   next layer as net.input_gpu, and every layer that reads it runs a half
 *   form that knows. darknet's resize_network frees it with cuda_free and
 *   makes it again in float32, so each is an allocation of its own (never a
 *   part of a larger one, which cudaFree would refuse); the network_resized
 *   hook then calls amp_cuda_activations again (the plan given back and
 *   made again first where the new shapes change it: step.c's
 *   amp_net_resized).
 * - Its delta in half lives in the network's pool (amp_plan_delta_pool_aligned,
 *   each delta at a multiple of AMP_GPU_DELTA_ALIGN values: 16 bytes, as
 *   tail.cu's vector passes need), and darknet's delta_gpu is NULL:
 *   forward_network_gpu then does not zero it, backward_network_gpu hands
 *   NULL to the layer after it, and the half forms find it through the plan
 *   (amp_cuda_half_delta). Its last reader's backward zeroes it before
 *   adding (amp_cuda_deltas_begin), as on the CPU.
 * - A half convolution with a half output keeps its batch-norm input (or,
 *   without batch-norm, the values before an activation whose gradient needs
 *   them) in half (amp_gpu_half.x_h), and darknet's x_gpu, x_norm_gpu and
 *   activation_input_gpu are freed: tail.cu makes the normalised values and
 *   the activation's input again from it. A convolution whose output stays
 *   float32 keeps darknet's float32 arrays and darknet's tail.
 *
 * The convolutions' planned form is half_conv.c's; the data-movement
 * layers' half forms (maxpool, route, upsample, shortcut) are below, on
 * movement.cu's kernels. Every call runs on darknet's stream; allocation
 * happens here only, at attach, after a resize and after a fallback.
 */
#include "half_gpu.h"
#include "cuda_check.h"
#include "gpu_plan.h" /* AMP_GPU_DELTA_ALIGN */

#include "activations.h" /* activation_needs_input */

#include <stdio.h>
#include <stdlib.h>

static amp_dtype dtype_of(const amp_net *an)
{
    return an->scaler->opt.dtype;
}

int amp_cuda_input_half(const amp_layer *al)
{
    return al->index > 0 && al->owner->layers[al->index - 1].out_half;
}

int amp_cuda_movement_has_half(const layer *l)
{
    switch (l->type) {
    case MAXPOOL:
    case ROUTE:
    case UPSAMPLE: return amp_kind_half_shape(l);
    case SHORTCUT: return amp_kind_half_shape(l) && amp_cuda_shortcut_supports(l->activation);
    default: return 0; /* reorg, avgpool, dropout, activation: float32 on the GPU */
    }
}

amp_io amp_cuda_io_of(const layer *l, int cudnn_half)
{
    /* a half convolution on cuDNN whose tail tail.cu has (smooth: darknet's
     * float32 gradient smoothing, which reads float32 outputs) */
    if (l->type == CONVOLUTIONAL && cudnn_half && amp_cuda_tail_supports(l->activation) &&
        !l->smooth && !l->binary && !l->xnor)
        return AMP_IO_CONVERTS;
    if (amp_cuda_movement_has_half(l) && l->forward_gpu && l->backward_gpu) return AMP_IO_HALF;
    return AMP_IO_FLOAT32;
}

amp_io amp_cuda_layer_io(const amp_layer *al, const layer *l, const amp_gpu_half_ctx *ctx)
{
    if (!ctx->plan || al->owner->scaler->opt.dtype == AMP_DTYPE_FLOAT32) return AMP_IO_FLOAT32;
    const amp_gpu_half *h = amp_gpu_half_of(al);
    return amp_cuda_io_of(l, al->precision == AMP_PRECISION_HALF && h && h->conv);
}

amp_gpu_storage amp_cuda_storage(const amp_layer *al, const layer *l)
{
    const amp_gpu_half *h = amp_gpu_half_of(al);
    const int in_half = amp_cuda_input_half(al);
    const amp_gpu_layer_plan p = {
        /* a half convolution through cuDNN (AMP_IO_CONVERTS is only ever one) */
        .converts = al->io == AMP_IO_CONVERTS || (h && h->conv),
        .out_half = al->out_half,
        .x_half = al->x_half,
        .in_half = in_half,
        .in_first = in_half && al->owner->layers[al->index - 1].delta_from == al->index,
        .batch_normalize = l->batch_normalize,
        .needs_input = activation_needs_input(l->activation)};
    return amp_gpu_storage_of(&p);
}

uint16_t *amp_cuda_half_delta(const amp_net *an, int i)
{
    if (i < 0 || !an->layers[i].out_half || !an->layers[i].bk) return NULL;
    return amp_gpu_half_of(&an->layers[i])->delta_h;
}

amp_status amp_cuda_deltas_begin(const amp_net *an, int j, int overwritten, char *err,
                                 size_t errlen)
{
    int src[32];
    const int n = amp_plan_inputs(an->net, j, src, 32);
    for (int k = -1; k < n; ++k) {
        const int i = k < 0 ? j : src[k]; /* its own: a tensor nobody reads */
        uint16_t *d = amp_cuda_half_delta(an, i);
        if (!d || an->layers[i].delta_from != j || i == overwritten) continue;
        const layer *l = &an->net->layers[i];
        AMP_FORWARD_IF_ERROR(AMP_CUDA_CHECK(
            cudaMemsetAsync(d, 0, (size_t)l->outputs * l->batch * sizeof(uint16_t), 0), err,
            errlen));
    }
    return AMP_OK;
}

/* ---- the data-movement layers' half forms ---- */

static amp_status maxpool_forward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    const amp_cuda_pool p = {l.batch, l.h, l.w, l.c, l.out_h, l.out_w, l.size, l.stride, l.pad};
    return amp_cuda_maxpool_nhwc_forward(&p, (const uint16_t *)net.input_gpu,
                                         (uint16_t *)l.output_gpu, l.indexes_gpu,
                                         dtype_of(al->owner), 0, err, errlen);
}

static amp_status maxpool_backward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    (void)net;
    AMP_FORWARD_IF_ERROR(amp_cuda_deltas_begin(al->owner, al->index, -1, err, errlen));
    uint16_t *dst = amp_cuda_half_delta(al->owner, al->index - 1);
    if (!dst) return AMP_OK;
    const amp_cuda_pool p = {l.batch, l.h, l.w, l.c, l.out_h, l.out_w, l.size, l.stride, l.pad};
    return amp_cuda_maxpool_nhwc_backward(&p, amp_gpu_half_of(al)->delta_h, l.indexes_gpu, dst,
                                          dtype_of(al->owner), 0, err, errlen);
}

static amp_status route_forward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    const long positions = (long)l.batch * l.out_h * l.out_w;
    int off = 0;
    for (int i = 0; i < l.n; ++i) {
        const uint16_t *in = (const uint16_t *)net.layers[l.input_layers[i]].output_gpu +
                             amp_route_first_channel(&l, i);
        const int c = amp_route_channels(&l, i);
        AMP_FORWARD_IF_ERROR(amp_cuda_rows_nhwc((uint16_t *)l.output_gpu + off, l.out_c, in,
                                                amp_route_input_channels(&l, i), positions, c, 0,
                                                dtype_of(al->owner), 0, err, errlen));
        off += c;
    }
    return AMP_OK;
}

static amp_status route_backward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    (void)net;
    AMP_FORWARD_IF_ERROR(amp_cuda_deltas_begin(al->owner, al->index, -1, err, errlen));
    const long positions = (long)l.batch * l.out_h * l.out_w;
    const uint16_t *d = amp_gpu_half_of(al)->delta_h;
    int off = 0;
    for (int i = 0; i < l.n; ++i) {
        uint16_t *dst = amp_cuda_half_delta(al->owner, l.input_layers[i]);
        const int c = amp_route_channels(&l, i);
        if (dst)
            AMP_FORWARD_IF_ERROR(amp_cuda_rows_nhwc(dst + amp_route_first_channel(&l, i),
                                                    amp_route_input_channels(&l, i), d + off, l.out_c,
                                                    positions, c, 1, dtype_of(al->owner), 0, err,
                                                    errlen));
        off += c;
    }
    return AMP_OK;
}

static amp_status upsample_forward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    (void)al;
    return amp_cuda_upsample_nhwc_forward((const uint16_t *)net.input_gpu,
                                          (uint16_t *)l.output_gpu, l.batch, l.h, l.w, l.c,
                                          l.stride, 0, err, errlen);
}

static amp_status upsample_backward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    (void)net;
    AMP_FORWARD_IF_ERROR(amp_cuda_deltas_begin(al->owner, al->index, -1, err, errlen));
    uint16_t *dst = amp_cuda_half_delta(al->owner, al->index - 1);
    if (!dst) return AMP_OK;
    return amp_cuda_upsample_nhwc_backward(amp_gpu_half_of(al)->delta_h, dst, l.batch, l.h, l.w,
                                           l.c, l.stride, dtype_of(al->owner), 0, err, errlen);
}

static amp_status shortcut_forward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    return amp_cuda_shortcut_nhwc_forward((const uint16_t *)net.input_gpu,
                                          (const uint16_t *)net.layers[l.index].output_gpu,
                                          (uint16_t *)l.output_gpu, (long)l.outputs * l.batch,
                                          l.activation, dtype_of(al->owner), 0, err, errlen);
}

static amp_status shortcut_backward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    (void)net;
    AMP_FORWARD_IF_ERROR(amp_cuda_deltas_begin(al->owner, al->index, -1, err, errlen));
    return amp_cuda_shortcut_nhwc_backward(
        amp_gpu_half_of(al)->delta_h, (const uint16_t *)l.output_gpu,
        amp_cuda_half_delta(al->owner, al->index - 1), amp_cuda_half_delta(al->owner, l.index),
        (long)l.outputs * l.batch, l.activation, dtype_of(al->owner), 0, err, errlen);
}

AMP_GPU_LAYER_CALLBACK(maxpool_forward_half, maxpool_forward)
AMP_GPU_LAYER_CALLBACK(maxpool_backward_half, maxpool_backward)
AMP_GPU_LAYER_CALLBACK(route_forward_half, route_forward)
AMP_GPU_LAYER_CALLBACK(route_backward_half, route_backward)
AMP_GPU_LAYER_CALLBACK(upsample_forward_half, upsample_forward)
AMP_GPU_LAYER_CALLBACK(upsample_backward_half, upsample_backward)
AMP_GPU_LAYER_CALLBACK(shortcut_forward_half, shortcut_forward)
AMP_GPU_LAYER_CALLBACK(shortcut_backward_half, shortcut_backward)

static void movement_install(amp_layer *al, const layer *l)
{
    switch (l->type) {
    case MAXPOOL: al->forward = maxpool_forward_half, al->backward = maxpool_backward_half; break;
    case ROUTE: al->forward = route_forward_half, al->backward = route_backward_half; break;
    case UPSAMPLE: al->forward = upsample_forward_half, al->backward = upsample_backward_half; break;
    case SHORTCUT: al->forward = shortcut_forward_half, al->backward = shortcut_backward_half; break;
    default: break;
    }
}

/* ---- the plan's storage ---- */

/* *p freed and made again for n values of size bytes (zeroed); the status. */
static amp_status remake(void *pp, size_t n, size_t size, char *err, size_t errlen)
{
    void **p = pp;
    if (*p) cudaFree(*p);
    *p = NULL;
    if (!n) return AMP_OK;
    AMP_FORWARD_IF_ERROR(AMP_CUDA_CHECK(cudaMalloc(p, n * size), err, errlen));
    return AMP_CUDA_CHECK(cudaMemset(*p, 0, n * size), err, errlen);
}

static void drop(void *pp)
{
    void **p = pp;
    if (*p) cudaFree(*p);
    *p = NULL;
}

/* The half deltas' pool, each delta at a multiple of AMP_GPU_DELTA_ALIGN values. */
static amp_status place_deltas(amp_net *an, char *err, size_t errlen)
{
    network *net = an->net;
    amp_gpu_net *g = gpu_of(an);
    size_t *offset = calloc((size_t)net->n, sizeof *offset);
    AMP_RETURN_ERROR_IF(!offset, AMP_ERR_NOMEM, err, errlen,
                        "amp: out of memory placing the half deltas");
    size_t total = 0;
    if (g->half->own_deltas) {
        for (int i = 0; i < net->n; ++i)
            if (an->layers[i].out_half) {
                offset[i] = total;
                total += ((size_t)net->layers[i].outputs * net->layers[i].batch +
                          AMP_GPU_DELTA_ALIGN - 1) / AMP_GPU_DELTA_ALIGN * AMP_GPU_DELTA_ALIGN;
            }
    } else {
        total = amp_plan_delta_pool_aligned(an, offset, AMP_GPU_DELTA_ALIGN);
    }
    amp_status st = AMP_OK;
    if (total > g->deltas_n) {
        g->deltas_n = 0;
        st = remake(&g->deltas, total, sizeof(uint16_t), err, errlen);
        if (st == AMP_OK) g->deltas_n = total;
    }
    for (int i = 0; i < net->n; ++i)
        if (an->layers[i].out_half)
            amp_gpu_half_of(&an->layers[i])->delta_h = st == AMP_OK ? g->deltas + offset[i] : NULL;
    free(offset);
    return st;
}

amp_status amp_cuda_activations(amp_net *an, char *err, size_t errlen)
{
    network *net = an->net;
    amp_gpu_net *g = gpu_of(an);
    size_t tail_work = 0;
    for (int i = 0; i < net->n; ++i) {
        amp_layer *al = &an->layers[i];
        layer *l = &net->layers[i];
        const amp_gpu_storage st = amp_cuda_storage(al, l);
        if (!st.output_half && !al->region && !st.planned) continue;
        char why[AMP_MSG_LEN];
        if (!al->bk) /* a data-movement layer's record */
            AMP_RETURN_ERROR_IF(amp_gpu_half_new(al, g->half, 0, why, sizeof why) != AMP_OK,
                                AMP_ERR_NOMEM, err, errlen, "amp: layer %d: %s", i, why);
        amp_gpu_half *h = amp_gpu_half_of(al);
        const size_t n = (size_t)l->outputs * l->batch;
        if (st.output_half) {
            AMP_FORWARD_IF_ERROR(remake(&l->output_gpu, n, sizeof(uint16_t), err, errlen));
            drop(&l->delta_gpu);
        }
        if (st.drop_activation_input) drop(&l->activation_input_gpu); /* the tail makes it */
        if (st.x_h) {
            AMP_FORWARD_IF_ERROR(remake(&h->x_h, n, sizeof(uint16_t), err, errlen));
            h->x_n = n;
        }
        if (st.drop_x) {
            drop(&l->x_gpu);
            drop(&l->x_norm_gpu);
        }
        h->planned = st.planned; /* NHWC descriptors and filters at the next call */
        if (st.planned && st.output_half) {
            const size_t w =
                amp_cuda_tail_work_floats((long)l->batch * l->out_h * l->out_w, l->out_c);
            if (w > tail_work) tail_work = w;
        }
        if (al->region) movement_install(al, l);
    }
    if (tail_work)
        AMP_FORWARD_IF_ERROR(amp_gpu_reserve(&g->half->tw, tail_work * sizeof(float), err, errlen));
    return place_deltas(an, err, errlen);
}

void amp_cuda_activations_release(amp_net *an)
{
    network *net = an->net;
    char err[AMP_MSG_LEN];
    amp_status st = AMP_OK;
    /* Decided from the plan's records alone, not the layers' (net_free calls
     * this after every layer_free): a half output was stored (out_half); a
     * half convolution's batch-norm input with it (x_half and out_half:
     * amp_gpu_storage_of's x_h, darknet's x_gpu and x_norm_gpu freed). */
    for (int i = 0; i < net->n; ++i) {
        amp_layer *al = &an->layers[i];
        layer *l = &net->layers[i];
        amp_gpu_half *h = amp_gpu_half_of(al);
        const size_t n = (size_t)l->outputs * l->batch;
        /* darknet's float32 arrays again, zeroed as darknet makes them */
        if (al->out_half) {
            if (st == AMP_OK) st = remake(&l->output_gpu, n, sizeof(float), err, sizeof err);
            if (st == AMP_OK) st = remake(&l->delta_gpu, n, sizeof(float), err, sizeof err);
            if (st == AMP_OK && l->type == CONVOLUTIONAL && activation_needs_input(l->activation))
                st = remake(&l->activation_input_gpu, n, sizeof(float), err, sizeof err);
        }
        if (al->out_half && al->x_half && l->batch_normalize) {
            if (st == AMP_OK) st = remake(&l->x_gpu, n, sizeof(float), err, sizeof err);
            if (st == AMP_OK) st = remake(&l->x_norm_gpu, n, sizeof(float), err, sizeof err);
        }
        if (h) {
            drop(&h->x_h);
            h->x_n = 0;
            h->planned = 0;
            h->delta_h = NULL;
        }
        if (al->region) {
            al->forward = al->orig_forward;
            al->backward = al->orig_backward;
        }
        al->out_half = al->x_half = al->region = 0;
    }
    amp_gpu_net *g = gpu_of(an);
    if (g) {
        drop(&g->deltas);
        g->deltas_n = 0;
    }
    if (st != AMP_OK) amp_net_fail(an, st, "amp: GPU: giving back darknet's float32 arrays: %s", err);
}

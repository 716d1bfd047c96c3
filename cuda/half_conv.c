/* Convolutional layers in float16 or bfloat16 on the GPU: half tensors and
 * filters, float32 sums, tensor-op math; the CPU emulation's rounding points
 * (plugin/cpu/emulated.c), with the device's float32 sums in their own order.
 *
 * Forward: input -> half (convert kernel); half weights (per weights
 * version); cuDNN forward into a half y, converted into l.output_gpu, so the
 * output is half-rounded; then darknet's float32 tail: batch-norm or bias,
 * activation.
 * Backward: darknet's float32 tail gradients (activation, batch-norm or
 * bias) first; the input and the incoming gradient -> half. The weight
 * gradient never passes through half: darknet's loss is a sum over the
 * batch, so a weight gradient grows with the batch and a half one overflows
 * float16 at small loss scales (cuDNN's legacy backward-filter writes the
 * filter's own type). It is one cuBLAS GEMM per chunk of images and per
 * group, half operands, float32 output with beta 1 straight into
 * weight_updates_gpu (the momentum history, scaled at the batch start): the
 * input as im2col columns and the gradient by channel (wgrad.cu,
 * wgrad_index.h), so the sum over images and positions is the GEMM's K;
 * chunks keep those operands within AMP_GPU_WGRAD_LIMIT. cuDNN
 * backward-data writes a half dX, ADDED into net.delta_gpu (route and
 * shortcut layers may have accumulated there).
 *
 * Algorithms: cudnnGet*Algorithm_v7 for the half descriptors, the first
 * candidate cuDNN supports whose workspace fits AMP_GPU_WORKSPACE_LIMIT
 * (gpu_plan.c), run with the math type the query reported for it (one
 * descriptor serves both passes, so it is set before each); chosen again
 * when darknet resizes the network or changes the batch; named in the
 * layer's details (DARKNET_AMP_PROFILE's table). The half input is
 * converted again in backward (same bits as in forward, from the same
 * net.input_gpu darknet's own backward reads) rather than kept per layer:
 * one conversion instead of half an activation map of memory per layer.
 */
#include "half_gpu.h"
#include "gpu_plan.h"
#include "lib_check.h"

#include "activations.h"
#include "batchnorm_layer.h"
#include "blas.h"
#include "cuda.h" /* darknet's: cudnn_handle() */

#include <stdio.h>
#include <stdlib.h>

/* convolutional_kernels.cu, not in a header */
void smooth_layer(layer l, int size, float rate);

/* The planned form's algorithms for one shape, as cudnnFind measured them:
 * kept per layer, so that darknet's resizes (random=1: a new size every 10
 * batches, among ten) search each shape once. */
#define AMP_CONV_FOUND 16
typedef struct amp_conv_found {
    int batch, h, w; /* 0: empty */
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnMathType_t fwd_math, bwd_data_math;
    size_t ws_bytes;
} amp_conv_found;

struct amp_cudnn_conv {
    int batch, h, w; /* the shape set up for; batch 0: none yet */
    int planned;     /* and the layout: the activation plan's NHWC, else NCHW */
    amp_conv_found found[AMP_CONV_FOUND];
    int next_found;  /* the slot the next search fills (round robin) */
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    /* The math type cuDNN's query reported with each algorithm: set on the
     * convolution descriptor before that pass (and its workspace query). */
    cudnnMathType_t fwd_math, bwd_data_math;
    size_t ws_bytes;
    int wgrad_images; /* images per weight-gradient GEMM (amp_wgrad_chunk) */
    /* DARKNET_AMP_GPU_WGRAD=cudnn (a measurement, docs/gpu.md): cuDNN's
     * backward-filter into a half dW at alpha 2^-wgrad_shift, added times
     * 2^wgrad_shift (exact): the weight gradient rounded to half. */
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    cudnnMathType_t bwd_filter_math;
    int wgrad_shift;
    char detail[256]; /* the layer's details: what runs each pass */
};

void amp_cudnn_conv_free(amp_gpu_half *h)
{
    struct amp_cudnn_conv *c = h ? h->conv : NULL;
    if (!c) return;
    if (c->x) cudnnDestroyTensorDescriptor(c->x);
    if (c->y) cudnnDestroyTensorDescriptor(c->y);
    if (c->wd) cudnnDestroyFilterDescriptor(c->wd);
    if (c->conv) cudnnDestroyConvolutionDescriptor(c->conv);
    free(c);
    h->conv = NULL;
}

#define CHECK(call) AMP_FORWARD_IF_ERROR(AMP_CUDNN_CHECK(call, why, whylen))

/* The first of cuDNN's ranked candidates that fits (gpu_plan.c), or why
 * none; measured (find): the first deterministic one that fits, where one
 * does (the planned form's, so that a step repeats run to run, as its
 * tails' sums do). */
#define PICK(perf, n, out, math, what, find)                                                      \
    do {                                                                                          \
        amp_algo_candidate cand[16];                                                              \
        for (int k_ = 0; k_ < (n); ++k_)                                                          \
            cand[k_] = (amp_algo_candidate){(int)(perf)[k_].algo,                                 \
                                            (perf)[k_].status == CUDNN_STATUS_SUCCESS,            \
                                            (perf)[k_].memory,                                    \
                                            (perf)[k_].determinism == CUDNN_DETERMINISTIC};       \
        const int i_ = (find) ? amp_algo_pick_deterministic(cand, (n), AMP_GPU_WORKSPACE_LIMIT)   \
                              : amp_algo_pick(cand, (n), AMP_GPU_WORKSPACE_LIMIT);                \
        AMP_RETURN_ERROR_IF(i_ < 0, AMP_ERR_DEVICE, why, whylen,                                  \
                            "cuDNN offers no " what " algorithm for these half tensors");         \
        (out) = (perf)[i_].algo;                                                                  \
        (math) = (perf)[i_].mathType;                                                             \
    } while (0)

/* The two algorithms for the descriptors as set, with their math types
 * and the workspace they need, or why not: cuDNN's heuristics, or (find)
 * its measurement of each candidate on this shape (cudnnFind*: the
 * planned form, once per shape; the heuristics pick algorithms up to 3x
 * slower on some 1x1 convolutions of 13x13 maps, docs/gpu.md). */
static amp_status choose_algorithms(struct amp_cudnn_conv *c, cudnnHandle_t handle, int filter,
                                    int find, char *why, size_t whylen)
{
    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t fperf[16];
    if (find)
        CHECK(cudnnFindConvolutionForwardAlgorithm(handle, c->x, c->wd, c->conv, c->y, 16, &n,
                                                   fperf));
    else
        CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, c->x, c->wd, c->conv, c->y, 16, &n,
                                                     fperf));
    PICK(fperf, n, c->fwd, c->fwd_math, "forward", find);
    cudnnConvolutionBwdDataAlgoPerf_t dperf[16];
    if (find)
        CHECK(cudnnFindConvolutionBackwardDataAlgorithm(handle, c->wd, c->y, c->conv, c->x, 16,
                                                        &n, dperf));
    else
        CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, c->wd, c->y, c->conv, c->x, 16,
                                                          &n, dperf));
    PICK(dperf, n, c->bwd_data, c->bwd_data_math, "backward-data", find);
    size_t a = 0, b = 0;
    CHECK(cudnnSetConvolutionMathType(c->conv, c->fwd_math));
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle, c->x, c->wd, c->conv, c->y, c->fwd, &a));
    CHECK(cudnnSetConvolutionMathType(c->conv, c->bwd_data_math));
    CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle, c->wd, c->y, c->conv, c->x,
                                                       c->bwd_data, &b));
    c->ws_bytes = a > b ? a : b;
    if (!filter) return AMP_OK;
    cudnnConvolutionBwdFilterAlgoPerf_t wperf[16];
    CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, c->x, c->y, c->conv, c->wd, 16,
                                                        &n, wperf));
    PICK(wperf, n, c->bwd_filter, c->bwd_filter_math, "backward-filter", 0);
    size_t f = 0;
    CHECK(cudnnSetConvolutionMathType(c->conv, c->bwd_filter_math));
    CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, c->x, c->y, c->conv, c->wd,
                                                         c->bwd_filter, &f));
    if (f > c->ws_bytes) c->ws_bytes = f;
    return AMP_OK;
}

#undef PICK

/* cuDNN's algorithm and math-type names, for the layer's label. */
static const char *amp_cudnn_fwd_name(cudnnConvolutionFwdAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "?";
    }
}

static const char *amp_cudnn_bwd_data_name(cudnnConvolutionBwdDataAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return "ALGO_0";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return "ALGO_1";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "?";
    }
}

static const char *amp_cudnn_math_name(cudnnMathType_t m)
{
    switch (m) {
    case CUDNN_TENSOR_OP_MATH: return " (tensor ops)";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return " (tensor ops, converting)";
    case CUDNN_FMA_MATH: return " (FMA)";
    default: return "";
    }
}

/* Bytes darknet's own workspace (net.workspace) surely holds: its layers'
 * largest float32 need up to the first avgpool. parse_network_cfg sizes it
 * over every layer, resize_network over the layers up to that one (it
 * resizes no further), so this is within both. */
static size_t darknet_workspace(const network *net)
{
    size_t most = 0;
    for (int i = 0; i < net->n; ++i) {
        if (net->layers[i].workspace_size > most) most = net->layers[i].workspace_size;
        if (net->layers[i].type == AVGPOOL) break;
    }
    return most;
}

/* The cuDNN workspace of c's calls: darknet's own where it is large enough
 * (darknet runs one layer at a time on one stream, so the network needs one
 * workspace), else the backend's. */
static void *workspace_of(const amp_layer *al, const struct amp_cudnn_conv *c,
                          const network *net)
{
    return c->ws_bytes <= darknet_workspace(al->owner->net) ? (void *)net->workspace
                                                             : amp_gpu_half_of(al)->ctx->ws.p;
}

/* l's whole batch as wgrad_index.h's dimensions. */
static amp_im2col_dims dims_of(const layer *l)
{
    const amp_im2col_dims d = {l->batch, l->c,    l->h,     l->w,    l->size,
                               l->stride, l->pad, l->out_h, l->out_w};
    return d;
}

/* The shared scratch l's calls need for the shape and plan as set up: the
 * workspace, the operands at a region's edges (gpu_plan.c's
 * amp_gpu_storage_of), the weight gradient's. Reserved on every call, since
 * a plan made again (a fallback) changes what a layer needs at a fixed
 * shape; amp_gpu_reserve does nothing where the buffer fits. */
static amp_status reserve_scratch(amp_layer *al, const layer *l, const struct amp_cudnn_conv *c,
                                  char *why, size_t whylen)
{
    amp_gpu_half *h = amp_gpu_half_of(al);
    amp_gpu_half_ctx *x = h->ctx;
    const size_t nin = (size_t)l->inputs * l->batch, nout = (size_t)l->outputs * l->batch;
    const amp_gpu_storage st = amp_cuda_storage(al, l);
    if (c->ws_bytes > darknet_workspace(al->owner->net)) /* else darknet's (workspace_of) */
        AMP_FORWARD_IF_ERROR(amp_gpu_reserve(&x->ws, c->ws_bytes, why, whylen));
    if (st.in_scratch)
        AMP_FORWARD_IF_ERROR(amp_gpu_reserve(&x->x, nin * sizeof(uint16_t), why, whylen));
    if (st.dx_scratch)
        AMP_FORWARD_IF_ERROR(amp_gpu_reserve(&x->dx, nin * sizeof(uint16_t), why, whylen));
    if (st.out_scratch)
        AMP_FORWARD_IF_ERROR(amp_gpu_reserve(&x->y, nout * sizeof(uint16_t), why, whylen));
    if (st.dx32_scratch)
        AMP_FORWARD_IF_ERROR(amp_gpu_reserve(&x->t, nin * sizeof(float), why, whylen));
    if (x->wgrad_cudnn && !h->planned)
        return amp_gpu_reserve(&x->dw, h->nw * sizeof(uint16_t), why, whylen);
    /* the weight gradient's operands for a chunk of images: im2col columns,
     * and (NCHW) the gradient by channel */
    const size_t ohw = (size_t)l->out_h * l->out_w, nb = (size_t)c->wgrad_images;
    const size_t cols = (size_t)l->c * l->size * l->size;
    if (!(h->planned && amp_wgrad_direct(dims_of(l))))
        AMP_FORWARD_IF_ERROR(
            amp_gpu_reserve(&x->col, cols * ohw * nb * sizeof(uint16_t), why, whylen));
    if (st.dyc_scratch)
        AMP_FORWARD_IF_ERROR(
            amp_gpu_reserve(&x->dyc, (size_t)l->n * ohw * nb * sizeof(uint16_t), why, whylen));
    return AMP_OK;
}

/* The planned form's algorithms for c's shape: found before (the layer's
 * table), else measured by cudnnFind and kept. */
static amp_status find_algorithms(struct amp_cudnn_conv *c, const layer *l, char *why,
                                  size_t whylen)
{
    for (int k = 0; k < AMP_CONV_FOUND; ++k) {
        const amp_conv_found *f = &c->found[k];
        if (f->batch != l->batch || f->h != l->h || f->w != l->w) continue;
        c->fwd = f->fwd, c->fwd_math = f->fwd_math;
        c->bwd_data = f->bwd_data, c->bwd_data_math = f->bwd_data_math;
        c->ws_bytes = f->ws_bytes;
        return AMP_OK;
    }
    AMP_FORWARD_IF_ERROR(choose_algorithms(c, cudnn_handle(), 0, 1, why, whylen));
    c->found[c->next_found] = (amp_conv_found){l->batch,   l->h,          l->w,
                                               c->fwd,     c->bwd_data,   c->fwd_math,
                                               c->bwd_data_math, c->ws_bytes};
    c->next_found = (c->next_found + 1) % AMP_CONV_FOUND;
    return AMP_OK;
}

/* Descriptors, algorithms and workspace for l's current shape and layout
 * (the activation plan's NHWC, else NCHW), or why not; the shape's scratch. */
static amp_status ensure_shape(amp_layer *al, const layer *l, char *why, size_t whylen)
{
    amp_gpu_half *h = amp_gpu_half_of(al);
    struct amp_cudnn_conv *c = h->conv;
    if (c->batch == l->batch && c->h == l->h && c->w == l->w && c->planned == h->planned)
        return reserve_scratch(al, l, c, why, whylen);
    amp_conv_dims d;
    AMP_FORWARD_IF_ERROR(amp_conv_dims_make(l->batch, l->c, l->h, l->w, l->n, l->size, l->stride,
                                            l->pad, l->groups, l->out_h, l->out_w, &d, why,
                                            whylen));
    cudnnDataType_t dt = h->dtype == AMP_DTYPE_BFLOAT16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    /* the activation plan's tensors and filters are NHWC (activations.c) */
    const cudnnTensorFormat_t f = h->planned ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    c->batch = 0; /* until all of it is set */
    CHECK(cudnnSetTensor4dDescriptor(c->x, f, dt, d.n, d.c, d.h, d.w));
    CHECK(cudnnSetTensor4dDescriptor(c->y, f, dt, d.n, d.k, d.out_h, d.out_w));
    CHECK(cudnnSetFilter4dDescriptor(c->wd, dt, f, d.k, d.cg, d.size, d.size));
    /* float32 compute type: products and sums in float32 (cuDNN's
     * PSEUDO_HALF / PSEUDO_BFLOAT16 configurations), as on the CPU. */
    CHECK(cudnnSetConvolution2dDescriptor(c->conv, d.pad, d.pad, d.stride, d.stride, 1, 1,
                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CHECK(cudnnSetConvolutionGroupCount(c->conv, d.groups));
    CHECK(cudnnSetConvolutionMathType(c->conv, CUDNN_TENSOR_OP_MATH));
    int on, oc, oh, ow;
    CHECK(cudnnGetConvolution2dForwardOutputDim(c->conv, c->x, c->wd, &on, &oc, &oh, &ow));
    AMP_RETURN_ERROR_IF(on != d.n || oc != d.k || oh != d.out_h || ow != d.out_w,
                        AMP_ERR_DEVICE, why, whylen,
                        "cuDNN's output %dx%dx%dx%d is not darknet's %dx%dx%dx%d", on, oc, oh, ow,
                        d.n, d.k, d.out_h, d.out_w);
    amp_gpu_half_ctx *x = h->ctx;
    const int wgrad_cudnn = x->wgrad_cudnn && !h->planned;
    if (h->planned)
        AMP_FORWARD_IF_ERROR(find_algorithms(c, l, why, whylen));
    else
        AMP_FORWARD_IF_ERROR(choose_algorithms(c, cudnn_handle(), wgrad_cudnn, 0, why, whylen));
    const size_t ohw = (size_t)d.out_h * d.out_w;
    if (wgrad_cudnn) {
        /* dW / 2^k within float16's range: darknet's loss sums the batch */
        c->wgrad_shift = 0;
        while ((1 << c->wgrad_shift) < d.n && c->wgrad_shift < 24) ++c->wgrad_shift;
        snprintf(c->detail, sizeof c->detail,
                 "cuDNN forward %s%s, backward-data %s%s, weight gradient cuDNN %d%s in half "
                 "at 2^-%d; workspace %.1f MiB",
                 amp_cudnn_fwd_name(c->fwd), amp_cudnn_math_name(c->fwd_math),
                 amp_cudnn_bwd_data_name(c->bwd_data), amp_cudnn_math_name(c->bwd_data_math),
                 (int)c->bwd_filter, amp_cudnn_math_name(c->bwd_filter_math), c->wgrad_shift,
                 (double)c->ws_bytes / 1048576.0);
    } else {
        /* the weight gradient's operands per image: im2col columns, and
         * (NCHW) the gradient by channel */
        /* (planned, a 1x1 convolution reads its input in place: none) */
        const int direct = h->planned && amp_wgrad_direct(dims_of(l));
        const size_t per_image =
            ((direct ? 0 : (size_t)d.c * d.size * d.size) + (h->planned ? 0 : (size_t)d.k)) *
            ohw * sizeof(uint16_t);
        c->wgrad_images = amp_wgrad_chunk(d.n, per_image, ohw, AMP_GPU_WGRAD_LIMIT);
        snprintf(c->detail, sizeof c->detail,
                 "cuDNN forward %s%s, backward-data %s%s, weight gradient cuBLAS float32 "
                 "(%d images per GEMM%s); %sworkspace %.1f MiB",
                 amp_cudnn_fwd_name(c->fwd), amp_cudnn_math_name(c->fwd_math),
                 amp_cudnn_bwd_data_name(c->bwd_data), amp_cudnn_math_name(c->bwd_data_math),
                 c->wgrad_images, direct ? ", its input read in place" : "",
                 h->planned ? "NHWC half tensors, algorithms measured (deterministic); " : "",
                 (double)c->ws_bytes / 1048576.0);
    }
    AMP_FORWARD_IF_ERROR(reserve_scratch(al, l, c, why, whylen));
    c->batch = l->batch, c->h = l->h, c->w = l->w, c->planned = h->planned;
    return AMP_OK;
}

amp_status amp_cudnn_conv_setup(amp_layer *al, const layer *l, char *why, size_t whylen)
{
    amp_gpu_half *h = amp_gpu_half_of(al);
    h->w_k = l->n;
    h->w_c = l->c / (l->groups > 0 ? l->groups : 1);
    h->w_hw = l->size * l->size;
    struct amp_cudnn_conv *c = calloc(1, sizeof *c);
    AMP_RETURN_ERROR_IF(!c, AMP_ERR_NOMEM, why, whylen, "out of memory");
    h->conv = c;
    al->detail = c->detail;
    CHECK(cudnnCreateTensorDescriptor(&c->x));
    CHECK(cudnnCreateTensorDescriptor(&c->y));
    CHECK(cudnnCreateFilterDescriptor(&c->wd));
    CHECK(cudnnCreateConvolutionDescriptor(&c->conv));
    return ensure_shape(al, l, why, whylen);
}

#undef CHECK

/* darknet's float32 tail on a float32 output, as in
 * forward_convolutional_layer_gpu: batch-norm or the bias, the activation
 * (keeping its input where its gradient needs it)... */
static void darknet_tail_forward(layer l, network net)
{
    if (l.batch_normalize) forward_batchnorm_layer_gpu(l, net);
    else add_bias_gpu(l.output_gpu, l.biases_gpu, l.batch, l.n, l.out_w * l.out_h);
    activate_array_keep_gpu(l.output_gpu, l.outputs * l.batch, l.activation,
                            l.activation_input_gpu);
}

/* ...and its gradients, as in backward_convolutional_layer_gpu. */
static void darknet_tail_backward(layer l, network net)
{
    gradient_array_gpu(activation_needs_input(l.activation) ? l.activation_input_gpu
                                                            : l.output_gpu,
                       l.outputs * l.batch, l.activation, l.delta_gpu);
    if (l.batch_normalize) backward_batchnorm_layer_gpu(l, net);
    else backward_bias_gpu(l.bias_updates_gpu, l.delta_gpu, l.batch, l.n, l.out_w * l.out_h);
}

/* The weight gradient, summed in float32 into weight_updates_gpu, from the
 * half input in and the half incoming gradient dy: per chunk of images the
 * input as im2col columns, then per group one GEMM (darknet's row-major
 * terms: dW[filters/groups][cols] += dy[filters/groups][K] col[cols][K]^T).
 * NCHW (the layer outside the plan): dy laid out by channel first
 * (wgrad_index.h). NHWC (planned): the columns gathered from NHWC, dy read
 * in place, transposed (its rows are positions, the group's filters
 * columns). */
static amp_status weight_gradient(amp_layer *al, const struct amp_cudnn_conv *c, const layer *l,
                                  const uint16_t *in, const uint16_t *dy, int nhwc,
                                  amp_gpu_half_ctx *x, amp_dtype dtype, char *err, size_t errlen)
{
    const int g = l->groups > 0 ? l->groups : 1, cg = l->c / g, ng = l->n / g;
    const int cols = cg * l->size * l->size;
    const size_t ohw = (size_t)l->out_h * l->out_w, chw = (size_t)l->c * l->h * l->w;
    for (int b0 = 0; b0 < l->batch; b0 += c->wgrad_images) {
        const int nb = l->batch - b0 < c->wgrad_images ? l->batch - b0 : c->wgrad_images;
        const int k = nb * (int)ohw; /* amp_wgrad_chunk keeps it an int */
        const amp_im2col_dims d = {nb, l->c, l->h, l->w, l->size, l->stride, l->pad,
                                   l->out_h, l->out_w};
        const uint16_t *xb = in + (size_t)b0 * chw, *yb = dy + (size_t)b0 * l->n * ohw;
        uint16_t *col = x->col.p, *dyc = x->dyc.p;
        const int direct = nhwc && amp_wgrad_direct(d);
        if (direct) {
            /* (the input read in place below) */
        } else if (nhwc) {
            AMP_GPU_RUN(al, AMP_PROF_CONVERT,
                        amp_cuda_im2col_half_nhwc(xb, d, l->c, col, 0, err, errlen));
        } else {
            AMP_GPU_RUN(al, AMP_PROF_CONVERT, amp_cuda_im2col_half(xb, d, col, 0, err, errlen));
            AMP_GPU_RUN(al, AMP_PROF_CONVERT,
                        amp_cuda_to_cnhw_half(yb, nb, l->n, ohw, dyc, 0, err, errlen));
        }
        for (int j = 0; j < g; ++j) {
            /* the group's gradient: NHWC columns j ng.. of rows of n, else rows of k */
            const uint16_t *a = nhwc ? yb + (size_t)j * ng : dyc + (size_t)j * ng * k;
            /* its columns: rows j cols.. of col, or (direct) columns j cg.. of the
             * input's rows of c, not transposed */
            const uint16_t *b = direct ? xb + (size_t)j * cg : col + (size_t)j * cols * k;
            AMP_GPU_RUN(al, AMP_PROF_KERNEL,
                        amp_gpu_gemm_half(dtype, nhwc, !direct, ng, cols, k, a, nhwc ? l->n : k,
                                          b, direct ? l->c : k, 1,
                                          l->weight_updates_gpu + (size_t)j * ng * cols, cols,
                                          err, errlen));
        }
    }
    return AMP_OK;
}

/* ---- the planned form: NHWC half tensors (activations.c) ---- */

/* The tail's arguments for l on the plan's storage (tail.cu). */
static amp_cuda_tail planned_tail(const amp_gpu_half *h, const layer *l, const network *net)
{
    amp_cuda_tail t = {0};
    t.positions = (long)l->batch * l->out_h * l->out_w;
    t.c = l->out_c;
    t.bf16 = h->dtype == AMP_DTYPE_BFLOAT16;
    t.act = (int)l->activation;
    t.batch_normalize = l->batch_normalize;
    t.cudnn = 1; /* darknet's GPU layers normalise with cuDNN's formula */
    t.train = net->train;
    t.x = h->x_h;
    t.y = (uint16_t *)l->output_gpu;
    t.dh = h->delta_h;
    t.scales = l->scales_gpu, t.biases = l->biases_gpu;
    t.mean = l->mean_gpu, t.variance = l->variance_gpu;
    t.rolling_mean = l->rolling_mean_gpu, t.rolling_variance = l->rolling_variance_gpu;
    t.bias_updates = l->bias_updates_gpu, t.scale_updates = l->scale_updates_gpu;
    t.mean_delta = l->mean_delta_gpu, t.variance_delta = l->variance_delta_gpu;
    t.work = h->ctx->tw.p;
    return t;
}

/* The layer's input as an NHWC half tensor: the previous layer's half
 * output in place, or net.input_gpu (float32 NCHW) converted into scratch. */
static amp_status planned_input(amp_layer *al, const layer *l, const network *net,
                                const uint16_t **in, char *err, size_t errlen)
{
    amp_gpu_half *h = amp_gpu_half_of(al);
    if (amp_cuda_input_half(al)) {
        *in = (const uint16_t *)net->input_gpu;
        return AMP_OK;
    }
    AMP_GPU_RUN(al, AMP_PROF_CONVERT,
                amp_cuda_to_half_nhwc(net->input_gpu, h->ctx->x.p, l->batch, l->c, l->c,
                                      (long)l->h * l->w, h->dtype, 0, err, errlen));
    *in = h->ctx->x.p;
    return AMP_OK;
}

/* Forward: the convolution into the half batch-norm input (x_h), or the
 * half output itself; then tail.cu's tail in one pass into the output. A
 * float32 output (read by a layer outside the plan): the convolution into
 * scratch, widened into output_gpu, and darknet's float32 tail. */
static amp_status planned_forward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    amp_gpu_half *h = amp_gpu_half_of(al);
    struct amp_cudnn_conv *c = h->conv;
    amp_gpu_half_ctx *x = h->ctx;
    void *const ws = workspace_of(al, c, &net);
    const float one = 1, zero = 0;
    const uint16_t *w = NULL, *in = NULL;
    AMP_GPU_RUN(al, AMP_PROF_CONVERT, amp_gpu_half_weights(al, l.weights_gpu, &w, err, errlen));
    AMP_FORWARD_IF_ERROR(planned_input(al, &l, &net, &in, err, errlen));
    void *out = h->x_h ? (void *)h->x_h : al->out_half ? (void *)l.output_gpu : x->y.p;
    AMP_FORWARD_IF_ERROR(
        AMP_CUDNN_CHECK(cudnnSetConvolutionMathType(c->conv, c->fwd_math), err, errlen));
    AMP_GPU_RUN(al, AMP_PROF_KERNEL,
                AMP_CUDNN_CHECK(cudnnConvolutionForward(cudnn_handle(), &one, c->x, in, c->wd, w,
                                                        c->conv, c->fwd, ws, c->ws_bytes,
                                                        &zero, c->y, out),
                                err, errlen));
    if (al->out_half) {
        const amp_cuda_tail t = planned_tail(h, &l, &net);
        AMP_GPU_RUN(al, AMP_PROF_KERNEL, amp_cuda_tail_forward(&t, 0, err, errlen));
        return AMP_OK;
    }
    AMP_GPU_RUN(al, AMP_PROF_CONVERT,
                amp_cuda_from_half_nhwc(x->y.p, l.output_gpu, l.batch, l.out_c, l.out_c,
                                        (long)l.out_h * l.out_w, h->dtype, 0, err, errlen));
    darknet_tail_forward(l, net);
    return AMP_OK;
}

/* Backward: the deltas this layer last reads zeroed; the tail's gradient
 * (tail.cu, into the half delta; or darknet's float32 tail, then rounded
 * into scratch); the weight gradient in float32; the data gradient, rounded
 * to half by cuDNN, added into the previous layer's delta. */
static amp_status planned_backward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    amp_gpu_half *h = amp_gpu_half_of(al);
    struct amp_cudnn_conv *c = h->conv;
    amp_gpu_half_ctx *x = h->ctx;
    void *const ws = workspace_of(al, c, &net);
    uint16_t *prev = amp_cuda_half_delta(al->owner, al->index - 1);
    /* a zero half delta this layer is the first to add into is written whole
     * by its data gradient (cuDNN, beta 0): not zeroed first */
    const int first = prev && al->owner->layers[al->index - 1].delta_from == al->index;
    AMP_FORWARD_IF_ERROR(
        amp_cuda_deltas_begin(al->owner, al->index, first ? al->index - 1 : -1, err, errlen));
    const uint16_t *dy = h->delta_h;
    if (al->out_half) {
        const amp_cuda_tail t = planned_tail(h, &l, &net);
        AMP_GPU_RUN(al, AMP_PROF_KERNEL, amp_cuda_tail_backward(&t, 0, err, errlen));
    } else {
        darknet_tail_backward(l, net);
        AMP_GPU_RUN(al, AMP_PROF_CONVERT,
                    amp_cuda_to_half_nhwc(l.delta_gpu, x->y.p, l.batch, l.out_c, l.out_c,
                                          (long)l.out_h * l.out_w, h->dtype, 0, err, errlen));
        dy = x->y.p;
    }
    const float one = 1, zero = 0;
    const uint16_t *w = NULL, *in = NULL;
    AMP_GPU_RUN(al, AMP_PROF_CONVERT, amp_gpu_half_weights(al, l.weights_gpu, &w, err, errlen));
    AMP_FORWARD_IF_ERROR(planned_input(al, &l, &net, &in, err, errlen));
    AMP_FORWARD_IF_ERROR(weight_gradient(al, c, &l, in, dy, 1, x, h->dtype, err, errlen));
    if (!prev && !net.delta_gpu) return AMP_OK;
    /* The data gradient as the CPU plan adds it: half(dx) straight into a
     * half delta this layer is the first to add into (it is zero), else
     * half(delta + half(dx)) (movement.cu's rows, added); into a float32
     * delta widened and added. */
    void *dx = first ? (void *)prev : x->dx.p;
    AMP_FORWARD_IF_ERROR(
        AMP_CUDNN_CHECK(cudnnSetConvolutionMathType(c->conv, c->bwd_data_math), err, errlen));
    AMP_GPU_RUN(al, AMP_PROF_KERNEL,
                AMP_CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn_handle(), &one, c->wd, w, c->y,
                                                             dy, c->conv, c->bwd_data, ws,
                                                             c->ws_bytes, &zero, c->x, dx),
                                err, errlen));
    if (first) return AMP_OK;
    const long positions = (long)l.batch * l.h * l.w;
    if (prev) {
        AMP_GPU_RUN(al, AMP_PROF_CONVERT,
                    amp_cuda_rows_nhwc(prev, l.c, x->dx.p, l.c, positions, l.c, 1, h->dtype, 0,
                                       err, errlen));
        return AMP_OK;
    }
    AMP_GPU_RUN(al, AMP_PROF_CONVERT,
                amp_cuda_from_half_nhwc(x->dx.p, x->t.p, l.batch, l.c, l.c, (long)l.h * l.w,
                                        h->dtype, 0, err, errlen));
    axpy_gpu(l.inputs * l.batch, 1, x->t.p, 1, net.delta_gpu, 1);
    return AMP_OK;
}

static amp_status forward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    amp_gpu_half *h = amp_gpu_half_of(al);
    struct amp_cudnn_conv *c = h->conv;
    amp_gpu_half_ctx *x = h->ctx;
    AMP_FORWARD_IF_ERROR(ensure_shape(al, &l, err, errlen));
    void *const ws = workspace_of(al, c, &net);
    if (h->planned) return planned_forward(al, l, net, err, errlen);
    size_t nin = (size_t)l.inputs * l.batch, nout = (size_t)l.outputs * l.batch;
    const float one = 1, zero = 0;
    const uint16_t *w = NULL;
    AMP_GPU_RUN(al, AMP_PROF_CONVERT, amp_gpu_half_weights(al, l.weights_gpu, &w, err, errlen));
    AMP_GPU_RUN(al, AMP_PROF_CONVERT, amp_cuda_to_half(net.input_gpu, x->x.p, nin, h->dtype, 0, err, errlen));
    AMP_FORWARD_IF_ERROR(
        AMP_CUDNN_CHECK(cudnnSetConvolutionMathType(c->conv, c->fwd_math), err, errlen));
    AMP_GPU_RUN(al, AMP_PROF_KERNEL,
                AMP_CUDNN_CHECK(cudnnConvolutionForward(cudnn_handle(), &one, c->x, x->x.p, c->wd,
                                                        w, c->conv, c->fwd, ws, c->ws_bytes,
                                                        &zero, c->y, x->y.p),
                                err, errlen));
    AMP_GPU_RUN(al, AMP_PROF_CONVERT, amp_cuda_from_half(x->y.p, l.output_gpu, nout, h->dtype, 0, err, errlen));
    darknet_tail_forward(l, net);
    return AMP_OK;
}

static amp_status backward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    amp_gpu_half *h = amp_gpu_half_of(al);
    struct amp_cudnn_conv *c = h->conv;
    amp_gpu_half_ctx *x = h->ctx;
    AMP_FORWARD_IF_ERROR(ensure_shape(al, &l, err, errlen));
    void *const ws = workspace_of(al, c, &net);
    if (h->planned) return planned_backward(al, l, net, err, errlen);
    size_t nin = (size_t)l.inputs * l.batch, nout = (size_t)l.outputs * l.batch;
    if (l.smooth) smooth_layer(l, 5, l.smooth);
    darknet_tail_backward(l, net);

    const float one = 1, zero = 0;
    const uint16_t *w = NULL;
    AMP_GPU_RUN(al, AMP_PROF_CONVERT, amp_gpu_half_weights(al, l.weights_gpu, &w, err, errlen));
    AMP_GPU_RUN(al, AMP_PROF_CONVERT, amp_cuda_to_half(net.input_gpu, x->x.p, nin, h->dtype, 0, err, errlen));
    AMP_GPU_RUN(al, AMP_PROF_CONVERT, amp_cuda_to_half(l.delta_gpu, x->y.p, nout, h->dtype, 0, err, errlen));
    if (x->wgrad_cudnn) {
        const float alpha = 1.0f / (float)(1 << c->wgrad_shift);
        AMP_FORWARD_IF_ERROR(AMP_CUDNN_CHECK(
            cudnnSetConvolutionMathType(c->conv, c->bwd_filter_math), err, errlen));
        AMP_GPU_RUN(al, AMP_PROF_KERNEL,
                    AMP_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
                                        cudnn_handle(), &alpha, c->x, x->x.p, c->y, x->y.p,
                                        c->conv, c->bwd_filter, ws, c->ws_bytes, &zero,
                                        c->wd, x->dw.p),
                                    err, errlen));
        AMP_GPU_RUN(al, AMP_PROF_CONVERT,
                    amp_cuda_add_half_scaled(x->dw.p, l.weight_updates_gpu, h->nw,
                                             (float)(1 << c->wgrad_shift), h->dtype, 0, err,
                                             errlen));
    } else {
        AMP_FORWARD_IF_ERROR(weight_gradient(al, c, &l, x->x.p, x->y.p, 0, x, h->dtype, err,
                                             errlen));
    }
    if (!net.delta_gpu) return AMP_OK;
    AMP_FORWARD_IF_ERROR(
        AMP_CUDNN_CHECK(cudnnSetConvolutionMathType(c->conv, c->bwd_data_math), err, errlen));
    AMP_GPU_RUN(al, AMP_PROF_KERNEL,
                AMP_CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn_handle(), &one, c->wd, w, c->y,
                                                             x->y.p, c->conv, c->bwd_data, ws,
                                                             c->ws_bytes, &zero, c->x, x->dx.p),
                                err, errlen));
    AMP_GPU_RUN(al, AMP_PROF_CONVERT,
                amp_cuda_add_half(x->dx.p, net.delta_gpu, nin, h->dtype, 0, err, errlen));
    return AMP_OK;
}

AMP_GPU_LAYER_CALLBACK(amp_cudnn_conv_forward, forward)
AMP_GPU_LAYER_CALLBACK(amp_cudnn_conv_backward, backward)

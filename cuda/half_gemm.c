/* Connected and deconvolutional layers (and the connected sub-layers of
 * rnn, gru and lstm) in float16 or bfloat16 through cublasGemmEx: half A and
 * B, float32 C, CUBLAS_COMPUTE_32F, tensor-op algorithms; the CPU
 * emulation's rounding points (plugin/cpu/emulated.c connected_forward/backward,
 * deconv_forward/backward).
 *
 * Each GEMM writes float32 (beta = 0, or 1 where a deconvolution's weight
 * gradient is summed over the batch) and a kernel rounds the result to the
 * half dtype: with a half C, cuBLAS may do split-K reductions in the output
 * type (unless CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION is set on
 * the handle, which is darknet's and shared), adding rounding points the
 * CPU path does not have. The forward result is rounded in place in
 * l.output_gpu; the data gradient is rounded as it is added into
 * net.delta_gpu; the weight gradient is added into weight_updates_gpu (the
 * momentum history) in float32, never rounded to half: darknet's loss is a
 * sum over the batch, so a weight gradient grows with the batch and would
 * overflow float16 at a small loss scale.
 *
 * The float32 tails are darknet's GPU ones (forward_connected_layer_gpu,
 * backward_connected_layer_gpu), including its gradient clip, which
 * darknet's CPU backward does not have: the half layer replaces the GPU
 * layer, so it keeps the GPU layer's semantics. darknet clips the incoming
 * delta to [-1, 1]; under a loss scale S that delta is S times the true one,
 * so the clip acts at S (grad_math.h's amp_clip_scaled, S read on the
 * device): the same clip in true units. amp_connected_backward_f32 is
 * darknet's float32 backward with that clip, for the connected layers (and
 * sub-layers) that stay float32 in an AMP network on the GPU.
 */
#include "half_gpu.h"
#include "gpu_plan.h"
#include "lib_check.h"

#include "activations.h"
#include "batchnorm_layer.h"
#include "blas.h"
#include "col2im.h"
#include "cuda.h" /* darknet's: blas_handle() */
#include "gemm.h"
#include "im2col.h"

amp_status amp_gpu_gemm_half(amp_dtype dtype, int ta, int tb, int m, int n, int k, const void *a,
                            int lda, const void *b, int ldb, float beta, float *c, int ldc,
                            char *err, size_t errlen)
{
    amp_gemm_call g = amp_gemm_colmajor(ta, tb, m, n, k, lda, ldb, ldc);
    cudaDataType_t t = dtype == AMP_DTYPE_BFLOAT16 ? CUDA_R_16BF : CUDA_R_16F;
    const float one = 1;
    return AMP_CUBLAS_CHECK(cublasGemmEx(blas_handle(), g.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         g.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n, g.k,
                                         &one, b, t, g.ld_first, a, t, g.ld_second, &beta, c,
                                         CUDA_R_32F, g.ldc, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT_TENSOR_OP),
                            err, errlen);
}

/* Scratch for a batch of l's shape: half input and gradient, float32 weight
 * and data gradients. */
static amp_status reserve_all(amp_gpu_half *h, const layer *l, char *err, size_t errlen)
{
    size_t nin = (size_t)l->inputs * l->batch, nout = (size_t)l->outputs * l->batch;
    amp_gpu_half_ctx *x = h->ctx;
    AMP_FORWARD_IF_ERROR(amp_gpu_reserve(&x->x, nin * sizeof(uint16_t), err, errlen));
    AMP_FORWARD_IF_ERROR(amp_gpu_reserve(&x->y, nout * sizeof(uint16_t), err, errlen));
    AMP_FORWARD_IF_ERROR(amp_gpu_reserve(&x->dw, h->nw * sizeof(float), err, errlen));
    return amp_gpu_reserve(&x->dx, nin * sizeof(float), err, errlen);
}

amp_status amp_cublas_connected_setup(amp_layer *al, const layer *l, char *why, size_t whylen)
{
    return reserve_all(amp_gpu_half_of(al), l, why, whylen);
}

static amp_status connected_forward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    amp_gpu_half *h = amp_gpu_half_of(al);
    amp_gpu_half_ctx *x = h->ctx;
    AMP_FORWARD_IF_ERROR(reserve_all(h, &l, err, errlen)); /* a no-op unless the batch grew */
    size_t nin = (size_t)l.inputs * l.batch, nout = (size_t)l.outputs * l.batch;
    const uint16_t *w = NULL;
    AMP_FORWARD_IF_ERROR(amp_gpu_half_weights(al, l.weights_gpu, &w, err, errlen));
    AMP_FORWARD_IF_ERROR(amp_cuda_to_half(net.input_gpu, x->x.p, nin, h->dtype, 0, err, errlen));
    AMP_FORWARD_IF_ERROR(amp_gpu_gemm_half(h->dtype, 0, 1, l.batch, l.outputs, l.inputs, x->x.p, l.inputs,
                                   w, l.inputs, 0, l.output_gpu, l.outputs, err, errlen));
    AMP_FORWARD_IF_ERROR(amp_cuda_round(l.output_gpu, nout, h->dtype, 0, err, errlen));
    if (l.batch_normalize) forward_batchnorm_layer_gpu(l, net);
    else add_bias_gpu(l.output_gpu, l.biases_gpu, l.batch, l.outputs, 1);
    activate_array_gpu(l.output_gpu, l.outputs * l.batch, l.activation);
    return AMP_OK;
}

static amp_status connected_backward(amp_layer *al, layer l, network net, char *err,
                                     size_t errlen)
{
    amp_gpu_half *h = amp_gpu_half_of(al);
    amp_gpu_half_ctx *x = h->ctx;
    AMP_FORWARD_IF_ERROR(reserve_all(h, &l, err, errlen));
    size_t nin = (size_t)l.inputs * l.batch, nout = (size_t)l.outputs * l.batch;
    AMP_FORWARD_IF_ERROR(amp_cuda_clip_delta(l.delta_gpu, nout, x->dev, 0, err, errlen));
    gradient_array_gpu(l.output_gpu, l.outputs * l.batch, l.activation, l.delta_gpu);
    if (l.batch_normalize) backward_batchnorm_layer_gpu(l, net);
    else backward_bias_gpu(l.bias_updates_gpu, l.delta_gpu, l.batch, l.outputs, 1);

    const uint16_t *w = NULL;
    AMP_FORWARD_IF_ERROR(amp_gpu_half_weights(al, l.weights_gpu, &w, err, errlen));
    AMP_FORWARD_IF_ERROR(amp_cuda_to_half(net.input_gpu, x->x.p, nin, h->dtype, 0, err, errlen));
    AMP_FORWARD_IF_ERROR(amp_cuda_to_half(l.delta_gpu, x->y.p, nout, h->dtype, 0, err, errlen));
    AMP_FORWARD_IF_ERROR(amp_gpu_gemm_half(h->dtype, 1, 0, l.outputs, l.inputs, l.batch, x->y.p,
                                   l.outputs, x->x.p, l.inputs, 0, x->dw.p, l.inputs, err,
                                   errlen));
    axpy_gpu((int)h->nw, 1, x->dw.p, 1, l.weight_updates_gpu, 1); /* float32: never half */
    if (!net.delta_gpu) return AMP_OK;
    AMP_FORWARD_IF_ERROR(amp_gpu_gemm_half(h->dtype, 0, 0, l.batch, l.inputs, l.outputs, x->y.p,
                                   l.outputs, w, l.inputs, 0, x->dx.p, l.inputs, err, errlen));
    return amp_cuda_add_rounded(x->dx.p, net.delta_gpu, nin, h->dtype, 0, err, errlen);
}

AMP_GPU_LAYER_CALLBACK(amp_cublas_connected_forward, connected_forward)
AMP_GPU_LAYER_CALLBACK(amp_cublas_connected_backward, connected_backward)

static amp_status connected_backward_f32(amp_layer *al, layer l, network net, char *err,
                                         size_t errlen)
{
    /* backward_connected_layer_gpu, call for call, but the clip */
    AMP_FORWARD_IF_ERROR(amp_cuda_clip_delta(l.delta_gpu, (size_t)l.outputs * l.batch,
                                             amp_gpu_half_of(al)->ctx->dev, 0, err, errlen));
    gradient_array_gpu(l.output_gpu, l.outputs * l.batch, l.activation, l.delta_gpu);
    if (l.batch_normalize) backward_batchnorm_layer_gpu(l, net);
    else backward_bias_gpu(l.bias_updates_gpu, l.delta_gpu, l.batch, l.outputs, 1);
    gemm_gpu(1, 0, l.outputs, l.inputs, l.batch, 1, l.delta_gpu, l.outputs, net.input_gpu,
             l.inputs, 1, l.weight_updates_gpu, l.inputs);
    if (net.delta_gpu)
        gemm_gpu(0, 0, l.batch, l.inputs, l.outputs, 1, l.delta_gpu, l.outputs, l.weights_gpu,
                 l.inputs, 1, net.delta_gpu, l.inputs);
    return AMP_OK;
}

AMP_GPU_LAYER_CALLBACK(amp_connected_backward_f32, connected_backward_f32)

/* Deconvolutions, darknet's way (deconvolutional_kernels.cu): per image, a
 * GEMM of the transposed half weights with the half input writes float32
 * columns into darknet's workspace, col2im scatters and sums them into
 * l.output_gpu in float32, and the whole output is rounded to half once. In
 * backward, the incoming gradient is rounded to half (a float32 copy of
 * half values: im2col is darknet's float32 kernel), laid out as columns and
 * converted to half; the weight gradient is summed over the batch in float32
 * (beta 1) and added into weight_updates_gpu in float32, the data
 * gradient rounded as it is added into net.delta_gpu, per image. */

static amp_status deconv_reserve(amp_gpu_half *h, const layer *l, char *err, size_t errlen)
{
    const size_t hw = (size_t)l->h * l->w, cols = hw * l->size * l->size * l->n;
    amp_gpu_half_ctx *x = h->ctx;
    AMP_FORWARD_IF_ERROR(
        amp_gpu_reserve(&x->x, (size_t)l->inputs * l->batch * sizeof(uint16_t), err, errlen));
    AMP_FORWARD_IF_ERROR(amp_gpu_reserve(&x->y, cols * sizeof(uint16_t), err, errlen));
    AMP_FORWARD_IF_ERROR(amp_gpu_reserve(&x->dw, h->nw * sizeof(float), err, errlen));
    AMP_FORWARD_IF_ERROR(amp_gpu_reserve(&x->dx, (size_t)l->c * hw * sizeof(float), err, errlen));
    return amp_gpu_reserve(&x->t, (size_t)l->outputs * l->batch * sizeof(float), err, errlen);
}

amp_status amp_cublas_deconv_setup(amp_layer *al, const layer *l, char *why, size_t whylen)
{
    return deconv_reserve(amp_gpu_half_of(al), l, why, whylen);
}

static amp_status deconv_forward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    amp_gpu_half *h = amp_gpu_half_of(al);
    amp_gpu_half_ctx *x = h->ctx;
    AMP_FORWARD_IF_ERROR(deconv_reserve(h, &l, err, errlen));
    const int m = l.size * l.size * l.n, n = l.h * l.w, k = l.c;
    const size_t nout = (size_t)l.outputs * l.batch;
    const uint16_t *w = NULL;
    AMP_FORWARD_IF_ERROR(amp_gpu_half_weights(al, l.weights_gpu, &w, err, errlen));
    AMP_FORWARD_IF_ERROR(amp_cuda_to_half(net.input_gpu, x->x.p, (size_t)l.inputs * l.batch,
                                          h->dtype, 0, err, errlen));
    fill_gpu((int)nout, 0, l.output_gpu, 1);
    for (int i = 0; i < l.batch; ++i) {
        AMP_FORWARD_IF_ERROR(amp_gpu_gemm_half(h->dtype, 1, 0, m, n, k, w, m,
                                       (const uint16_t *)x->x.p + (size_t)i * k * n, n, 0,
                                       net.workspace, n, err, errlen));
        col2im_gpu(net.workspace, l.out_c, l.out_h, l.out_w, l.size, l.stride, l.pad,
                   l.output_gpu + (size_t)i * l.outputs);
    }
    AMP_FORWARD_IF_ERROR(amp_cuda_round(l.output_gpu, nout, h->dtype, 0, err, errlen));
    if (l.batch_normalize) forward_batchnorm_layer_gpu(l, net);
    else add_bias_gpu(l.output_gpu, l.biases_gpu, l.batch, l.n, l.out_w * l.out_h);
    activate_array_gpu(l.output_gpu, (int)nout, l.activation);
    return AMP_OK;
}

static amp_status deconv_backward(amp_layer *al, layer l, network net, char *err, size_t errlen)
{
    amp_gpu_half *h = amp_gpu_half_of(al);
    amp_gpu_half_ctx *x = h->ctx;
    AMP_FORWARD_IF_ERROR(deconv_reserve(h, &l, err, errlen));
    const int c = l.c, hw = l.h * l.w, kk = l.size * l.size * l.n;
    const size_t nout = (size_t)l.outputs * l.batch, chw = (size_t)c * hw;
    gradient_array_gpu(l.output_gpu, (int)nout, l.activation, l.delta_gpu);
    if (l.batch_normalize) backward_batchnorm_layer_gpu(l, net);
    else backward_bias_gpu(l.bias_updates_gpu, l.delta_gpu, l.batch, l.n, l.out_w * l.out_h);

    const uint16_t *w = NULL;
    AMP_FORWARD_IF_ERROR(amp_gpu_half_weights(al, l.weights_gpu, &w, err, errlen));
    float *dy = x->t.p;
    copy_gpu((int)nout, l.delta_gpu, 1, dy, 1);
    AMP_FORWARD_IF_ERROR(amp_cuda_round(dy, nout, h->dtype, 0, err, errlen));
    AMP_FORWARD_IF_ERROR(amp_cuda_to_half(net.input_gpu, x->x.p, (size_t)l.inputs * l.batch,
                                          h->dtype, 0, err, errlen));
    for (int i = 0; i < l.batch; ++i) {
        im2col_gpu(dy + (size_t)i * l.outputs, l.out_c, l.out_h, l.out_w, l.size, l.stride, l.pad,
                   net.workspace);
        AMP_FORWARD_IF_ERROR(
            amp_cuda_to_half(net.workspace, x->y.p, (size_t)kk * hw, h->dtype, 0, err, errlen));
        AMP_FORWARD_IF_ERROR(amp_gpu_gemm_half(h->dtype, 0, 1, c, kk, hw,
                                       (const uint16_t *)x->x.p + (size_t)i * chw, hw, x->y.p, hw,
                                       i ? 1.f : 0.f, x->dw.p, kk, err, errlen));
        if (!net.delta_gpu) continue;
        AMP_FORWARD_IF_ERROR(amp_gpu_gemm_half(h->dtype, 0, 0, c, hw, kk, w, kk, x->y.p, hw, 0, x->dx.p,
                                       hw, err, errlen));
        AMP_FORWARD_IF_ERROR(amp_cuda_add_rounded(x->dx.p, net.delta_gpu + (size_t)i * chw, chw,
                                                  h->dtype, 0, err, errlen));
    }
    axpy_gpu((int)h->nw, 1, x->dw.p, 1, l.weight_updates_gpu, 1); /* float32: never half */
    return AMP_OK;
}

AMP_GPU_LAYER_CALLBACK(amp_cublas_deconv_forward, deconv_forward)
AMP_GPU_LAYER_CALLBACK(amp_cublas_deconv_backward, deconv_backward)

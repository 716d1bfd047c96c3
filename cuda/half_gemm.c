/* Connected layers in float16 or bfloat16 through cublasGemmEx: half A and
 * B, float32 C, CUBLAS_COMPUTE_32F, tensor-op algorithms; the CPU
 * emulation's rounding points (plugin/cpu_half.c connected_forward/backward).
 *
 * Each GEMM writes float32 (beta = 0) and a kernel rounds the result to the
 * half dtype: with a half C, cuBLAS may do split-K reductions in the output
 * type (unless CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION is set on
 * the handle, which is darknet's and shared), adding rounding points the
 * CPU path does not have. The forward result is rounded in place in
 * l.output_gpu; the weight and data gradients are rounded as they are added
 * into weight_updates_gpu (the momentum history) and net.delta_gpu.
 *
 * The float32 tails are darknet's GPU ones (forward_connected_layer_gpu,
 * backward_connected_layer_gpu), including its constrain_gpu(delta, 1),
 * which darknet's CPU backward does not have: the half layer replaces the
 * GPU layer, so it keeps the GPU layer's semantics.
 */
#include "half_gpu.h"
#include "amp_cuda.h"
#include "gpu_plan.h"
#include "lib_check.h"

#include "activations.h"
#include "batchnorm_layer.h"
#include "blas.h"
#include "cuda.h" /* darknet's: blas_handle() */

/* darknet's row-major gemm_gpu arguments, half A and B, float32 C, beta 0. */
static int gemm_half(amp_dtype dtype, int ta, int tb, int m, int n, int k, const void *a, int lda,
                     const void *b, int ldb, float *c, int ldc, char *err, size_t errlen)
{
    amp_gemm_call g = amp_gemm_colmajor(ta, tb, m, n, k, lda, ldb, ldc);
    cudaDataType_t t = dtype == AMP_DTYPE_BFLOAT16 ? CUDA_R_16BF : CUDA_R_16F;
    const float one = 1, zero = 0;
    return AMP_CUBLAS_MSG(cublasGemmEx(blas_handle(), g.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N,
                                       g.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n, g.k,
                                       &one, b, t, g.ld_first, a, t, g.ld_second, &zero, c,
                                       CUDA_R_32F, g.ldc, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT_TENSOR_OP),
                          err, errlen);
}

/* Scratch for a batch of l's shape: half input and gradient, float32 weight
 * and data gradients. */
static int reserve_all(amp_gpu_half *h, const layer *l, char *err, size_t errlen)
{
    size_t nin = (size_t)l->inputs * l->batch, nout = (size_t)l->outputs * l->batch;
    amp_gpu_half_ctx *x = h->ctx;
    return amp_gpu_reserve(&x->x, nin * sizeof(uint16_t), err, errlen) &&
           amp_gpu_reserve(&x->y, nout * sizeof(uint16_t), err, errlen) &&
           amp_gpu_reserve(&x->dw, h->nw * sizeof(float), err, errlen) &&
           amp_gpu_reserve(&x->dx, nin * sizeof(float), err, errlen);
}

int amp_cublas_connected_setup(amp_layer *al, const layer *l, char *why, size_t whylen)
{
    return reserve_all(al->gpu_half, l, why, whylen);
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if (x) {                                                                                   \
            amp_gpu_fail(an, err);                                                                 \
            return;                                                                                \
        }                                                                                          \
    } while (0)

void amp_cublas_connected_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_net *an = al->owner;
    amp_gpu_half *h = al->gpu_half;
    amp_gpu_half_ctx *x = h->ctx;
    char err[384];
    if (an->error[0]) return;
    TRY(!reserve_all(h, &l, err, sizeof err)); /* a no-op unless the batch grew */
    size_t nin = (size_t)l.inputs * l.batch, nout = (size_t)l.outputs * l.batch;
    const uint16_t *w = amp_gpu_half_weights(al, l.weights_gpu, err, sizeof err);
    TRY(!w);
    TRY(amp_cuda_to_half(net.input_gpu, x->x.p, nin, h->dtype, 0, err, sizeof err));
    TRY(gemm_half(h->dtype, 0, 1, l.batch, l.outputs, l.inputs, x->x.p, l.inputs, w, l.inputs,
                  l.output_gpu, l.outputs, err, sizeof err));
    TRY(amp_cuda_round(l.output_gpu, nout, h->dtype, 0, err, sizeof err));
    if (l.batch_normalize) forward_batchnorm_layer_gpu(l, net);
    else add_bias_gpu(l.output_gpu, l.biases_gpu, l.batch, l.outputs, 1);
    activate_array_gpu(l.output_gpu, l.outputs * l.batch, l.activation);
}

void amp_cublas_connected_backward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_net *an = al->owner;
    amp_gpu_half *h = al->gpu_half;
    amp_gpu_half_ctx *x = h->ctx;
    char err[384];
    if (an->error[0]) return;
    TRY(!reserve_all(h, &l, err, sizeof err));
    size_t nin = (size_t)l.inputs * l.batch, nout = (size_t)l.outputs * l.batch;
    constrain_gpu(l.outputs * l.batch, 1, l.delta_gpu, 1);
    gradient_array_gpu(l.output_gpu, l.outputs * l.batch, l.activation, l.delta_gpu);
    if (l.batch_normalize) backward_batchnorm_layer_gpu(l, net);
    else backward_bias_gpu(l.bias_updates_gpu, l.delta_gpu, l.batch, l.outputs, 1);

    const uint16_t *w = amp_gpu_half_weights(al, l.weights_gpu, err, sizeof err);
    TRY(!w);
    TRY(amp_cuda_to_half(net.input_gpu, x->x.p, nin, h->dtype, 0, err, sizeof err));
    TRY(amp_cuda_to_half(l.delta_gpu, x->y.p, nout, h->dtype, 0, err, sizeof err));
    TRY(gemm_half(h->dtype, 1, 0, l.outputs, l.inputs, l.batch, x->y.p, l.outputs, x->x.p,
                  l.inputs, x->dw.p, l.inputs, err, sizeof err));
    TRY(amp_cuda_add_rounded(x->dw.p, l.weight_updates_gpu, h->nw, h->dtype, 0, err, sizeof err));
    if (!net.delta_gpu) return;
    TRY(gemm_half(h->dtype, 0, 0, l.batch, l.inputs, l.outputs, x->y.p, l.outputs, w, l.inputs,
                  x->dx.p, l.inputs, err, sizeof err));
    TRY(amp_cuda_add_rounded(x->dx.p, net.delta_gpu, nin, h->dtype, 0, err, sizeof err));
}

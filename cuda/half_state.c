/* The GPU layers' device state (half_gpu.h): shared scratch, layer records
 * and their half weight copies. */
#include "half_gpu.h"
#include "cuda_check.h"

#include <stdio.h>
#include <stdlib.h>

amp_gpu_half_ctx *amp_gpu_half_ctx_new(void)
{
    return calloc(1, sizeof(amp_gpu_half_ctx));
}

static void scratch_free(amp_gpu_scratch *s)
{
    if (s->p) cudaFree(s->p);
    s->p = NULL;
    s->bytes = 0;
}

void amp_gpu_half_ctx_free(amp_gpu_half_ctx *ctx)
{
    if (!ctx) return;
    scratch_free(&ctx->x);
    scratch_free(&ctx->y);
    scratch_free(&ctx->dw);
    scratch_free(&ctx->dx);
    scratch_free(&ctx->ws);
    scratch_free(&ctx->t);
    scratch_free(&ctx->col);
    scratch_free(&ctx->dyc);
    scratch_free(&ctx->tw);
    free(ctx);
}

amp_status amp_gpu_reserve(amp_gpu_scratch *s, size_t bytes, char *err, size_t errlen)
{
    if (s->bytes >= bytes && s->p) return AMP_OK;
    scratch_free(s);
    /* 256-byte multiples: tensor-op kernels like aligned rows, and small
     * growths (a resize by 32 px) then often fit what is there. */
    size_t want = (bytes + 255) & ~(size_t)255;
    if (!want) want = 256;
    amp_status st = AMP_CUDA_CHECK(cudaMalloc(&s->p, want), err, errlen);
    if (st != AMP_OK) {
        s->p = NULL;
        return st;
    }
    s->bytes = want;
    return AMP_OK;
}

amp_status amp_gpu_half_weights(amp_layer *al, const float *w_gpu, const uint16_t **w, char *err,
                                size_t errlen)
{
    amp_gpu_half *h = amp_gpu_half_of(al);
    /* a planned convolution's filters in KRSC order (cuDNN's NHWC filters):
     * darknet's KCRS as k images of c channels by size x size positions */
    const int nhwc = h->planned;
    if (h->w_version != al->owner->weights_version || h->w_nhwc != nhwc) {
        AMP_FORWARD_IF_ERROR(
            nhwc ? amp_cuda_to_half_nhwc(w_gpu, h->w, h->w_k, h->w_c, h->w_c, h->w_hw, h->dtype,
                                         0, err, errlen)
                 : amp_cuda_to_half(w_gpu, h->w, h->nw, h->dtype, 0, err, errlen));
        h->w_version = al->owner->weights_version;
        h->w_nhwc = nhwc;
    }
    *w = h->w;
    return AMP_OK;
}

amp_status amp_gpu_half_new(amp_layer *al, amp_gpu_half_ctx *ctx, size_t nw, char *why,
                            size_t whylen)
{
    amp_gpu_half *h = calloc(1, sizeof *h);
    AMP_RETURN_ERROR_IF(!h, AMP_ERR_NOMEM, why, whylen, "out of memory");
    h->ctx = ctx;
    h->dtype = al->owner->scaler->opt.dtype;
    h->nw = nw;
    al->bk = h;
    if (!nw) return AMP_OK;
    return AMP_CUDA_CHECK(cudaMalloc((void **)&h->w, nw * sizeof(uint16_t)), why, whylen);
}

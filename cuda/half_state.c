/* The half layers' device state (half_gpu.h): shared scratch, half weight
 * copies, and installing the path of a layer's type. */
#include "half_gpu.h"
#include "amp_cuda.h"
#include "cuda_check.h"
#include "network.h" /* get_layer_string */

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
    free(ctx);
}

void *amp_gpu_reserve(amp_gpu_scratch *s, size_t bytes, char *err, size_t errlen)
{
    if (s->bytes >= bytes && s->p) return s->p;
    scratch_free(s);
    /* 256-byte multiples: tensor-op kernels like aligned rows, and small
     * growths (a resize by 32 px) then often fit what is there. */
    size_t want = (bytes + 255) & ~(size_t)255;
    if (!want) want = 256;
    if (AMP_CUDA_MSG(cudaMalloc(&s->p, want), err, errlen)) {
        s->p = NULL;
        return NULL;
    }
    s->bytes = want;
    return s->p;
}

const uint16_t *amp_gpu_half_weights(amp_layer *al, const float *w_gpu, char *err,
                                     size_t errlen)
{
    amp_gpu_half *h = al->gpu_half;
    if (h->w_version == al->owner->weights_version) return h->w;
    if (amp_cuda_to_half(w_gpu, h->w, h->nw, h->dtype, 0, err, errlen)) return NULL;
    h->w_version = al->owner->weights_version;
    return h->w;
}

/* A recurrent layer's sub-layer: installed like a layer, on its _gpu pointers. */
static int install_sub(amp_layer *sa, layer *sub, void *ctx, char *why, size_t whylen)
{
    void (*fwd)(struct layer, struct network) = NULL, (*bwd)(struct layer, struct network) = NULL;
    if (!amp_gpu_half_install(sa, sub, ctx, &fwd, &bwd, why, whylen)) return 0;
    sa->forward = fwd;
    sa->backward = bwd;
    return 1;
}

/* A connected sub-layer of rnn, gru or lstm that stays float32. */
static int install_sub_clip(amp_layer *sa, layer *sub, void *ctx, char *why, size_t whylen)
{
    (void)ctx;
    if (sub->type != CONNECTED) {
        snprintf(why, whylen, "a [%s] sub-layer", get_layer_string(sub->type));
        return 0;
    }
    sa->backward = amp_connected_backward_f32;
    return 1;
}

int amp_gpu_clip_install(amp_layer *al, layer *l, void (**bwd)(struct layer, struct network),
                         char *why, size_t whylen)
{
    if (l->type == CONNECTED) {
        *bwd = amp_connected_backward_f32;
        return 1;
    }
    return amp_subs_install(al, l, 1, install_sub_clip, amp_gpu_half_free, NULL, why, whylen);
}

int amp_gpu_half_install(amp_layer *al, layer *l, amp_gpu_half_ctx *ctx,
                         void (**fwd)(struct layer, struct network),
                         void (**bwd)(struct layer, struct network), char *why, size_t whylen)
{
    if (l->type == RNN || l->type == GRU || l->type == LSTM || l->type == CRNN)
        /* the parent's own pointers stay darknet's: it calls its sub-layers' */
        return amp_subs_install(al, l, 1, install_sub, amp_gpu_half_free, ctx, why, whylen);
    if (l->type != CONVOLUTIONAL && l->type != CONNECTED && l->type != DECONVOLUTIONAL) {
        snprintf(why, whylen, "no GPU half path for [%s]", get_layer_string(l->type));
        return 0;
    }
    amp_gpu_half *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(why, whylen, "out of memory");
        return 0;
    }
    h->ctx = ctx;
    h->dtype = al->owner->scaler->opt.dtype;
    h->nw = l->type == CONNECTED ? (size_t)l->inputs * l->outputs : (size_t)l->nweights;
    al->gpu_half = h;
    if (AMP_CUDA_MSG(cudaMalloc((void **)&h->w, (h->nw ? h->nw : 1) * sizeof(uint16_t)), why,
                     whylen))
        goto fail;
    int ok = l->type == CONVOLUTIONAL   ? amp_cudnn_conv_setup(al, l, why, whylen)
             : l->type == CONNECTED     ? amp_cublas_connected_setup(al, l, why, whylen)
                                        : amp_cublas_deconv_setup(al, l, why, whylen);
    if (!ok) goto fail;
    if (l->type == CONVOLUTIONAL) {
        *fwd = amp_cudnn_conv_forward;
        *bwd = amp_cudnn_conv_backward;
        al->backend = AMP_BACKEND_CUDNN;
    } else if (l->type == CONNECTED) {
        *fwd = amp_cublas_connected_forward;
        *bwd = amp_cublas_connected_backward;
        al->backend = AMP_BACKEND_CUBLAS;
    } else {
        *fwd = amp_cublas_deconv_forward;
        *bwd = amp_cublas_deconv_backward;
        al->backend = AMP_BACKEND_CUBLAS;
    }
    return 1;
fail:
    amp_gpu_half_free(al);
    return 0;
}

void amp_gpu_half_free(amp_layer *al)
{
    if (al && al->subs) amp_subs_free(al, 1, amp_gpu_half_free);
    amp_gpu_half *h = al ? al->gpu_half : NULL;
    if (!h) return;
    amp_cudnn_conv_free(h);
    if (h->w) cudaFree(h->w);
    free(h);
    al->gpu_half = NULL;
}

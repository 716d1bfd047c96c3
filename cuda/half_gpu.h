/* Half-precision execution of convolutional (cuDNN), connected and
 * deconvolutional (cuBLAS) layers on the GPU, and of the sub-layers of
 * recurrent ones: the CPU emulation's rounding points (plugin/cpu_half.c)
 * with the device's kernels. Private to cuda/.
 *
 * State: per layer, the half copy of its weights (refreshed when the
 * network's weights_version moves: every step, taken or skipped, since the
 * host does not know which; every weights load) and, for convolutions, the
 * cuDNN descriptors and algorithms for the shape last seen. Per network, the
 * scratch that a layer needs only during one forward or backward call (half
 * input, half output or incoming gradient, weight and data gradients, cuDNN
 * workspace): darknet runs layers one at a time on one stream, so they share
 * it. Every buffer only grows; growing frees the old one (cudaFree waits for
 * the device), which happens at attach and when darknet resizes the network,
 * never in a step at a fixed shape.
 */
#ifndef AMP_HALF_GPU_H
#define AMP_HALF_GPU_H

#include "amp_internal.h"

#include <stddef.h>
#include <stdint.h>

typedef struct amp_gpu_scratch {
    void *p;
    size_t bytes;
} amp_gpu_scratch;

/* One network's shared scratch. */
typedef struct amp_gpu_half_ctx {
    amp_gpu_scratch x;   /* half input */
    amp_gpu_scratch y;   /* half output (forward) or incoming gradient (backward) */
    amp_gpu_scratch dw;  /* weight gradient: half (cuDNN) or float32 (cuBLAS) */
    amp_gpu_scratch dx;  /* data gradient: half (cuDNN) or float32 (cuBLAS) */
    amp_gpu_scratch ws;  /* cuDNN workspace */
    amp_gpu_scratch t;   /* float32: a deconvolution's incoming gradient, rounded to half */
} amp_gpu_half_ctx;

struct amp_cudnn_conv; /* half_conv.c */

typedef struct amp_gpu_half {
    amp_gpu_half_ctx *ctx;
    amp_dtype dtype;
    uint16_t *w;          /* half copy of the weights */
    size_t nw;
    unsigned long w_version;
    struct amp_cudnn_conv *conv;
} amp_gpu_half;

/* half_state.c */
amp_gpu_half_ctx *amp_gpu_half_ctx_new(void);
void amp_gpu_half_ctx_free(amp_gpu_half_ctx *ctx);
/* At least bytes in s (grown, never shrunk); NULL with a message on failure. */
void *amp_gpu_reserve(amp_gpu_scratch *s, size_t bytes, char *err, size_t errlen);
/* The half weights of al, converted from w_gpu when stale; NULL on failure. */
const uint16_t *amp_gpu_half_weights(amp_layer *al, const float *w_gpu, char *err,
                                     size_t errlen);
/* Installs the half path of l's type into *fwd and *bwd and sets
 * al->backend (1), or says why not (0). */
int amp_gpu_half_install(amp_layer *al, layer *l, amp_gpu_half_ctx *ctx,
                         void (**fwd)(struct layer, struct network),
                         void (**bwd)(struct layer, struct network), char *why, size_t whylen);
void amp_gpu_half_free(amp_layer *al);
/* A float32 layer whose GPU backward clips its incoming gradient (connected,
 * and the connected sub-layers of rnn, gru and lstm): installs darknet's
 * backward with the clip at the batch's loss scale instead of at 1, into *bwd
 * or on the sub-layers (1), or says why not (0). */
int amp_gpu_clip_install(amp_layer *al, layer *l, void (**bwd)(struct layer, struct network),
                         char *why, size_t whylen);
/* amp_gpu.c: a failure inside a layer callback, kept as the network's fatal
 * error (the training loop stops on it). */
void amp_gpu_fail(amp_net *an, const char *msg);
/* amp_gpu.c: the network's device state, where the batch's loss scale is. */
struct amp_gpu_state;
const struct amp_gpu_state *amp_gpu_dev_state(const amp_net *an);

/* half_conv.c */
int amp_cudnn_conv_setup(amp_layer *al, const layer *l, char *why, size_t whylen);
void amp_cudnn_conv_free(amp_gpu_half *h);
void amp_cudnn_conv_forward(struct layer l, struct network net);
void amp_cudnn_conv_backward(struct layer l, struct network net);

/* half_gemm.c */
int amp_cublas_connected_setup(amp_layer *al, const layer *l, char *why, size_t whylen);
void amp_cublas_connected_forward(struct layer l, struct network net);
void amp_cublas_connected_backward(struct layer l, struct network net);
/* darknet's float32 backward_connected_layer_gpu with the clip at the scale */
void amp_connected_backward_f32(struct layer l, struct network net);
int amp_cublas_deconv_setup(amp_layer *al, const layer *l, char *why, size_t whylen);
void amp_cublas_deconv_forward(struct layer l, struct network net);
void amp_cublas_deconv_backward(struct layer l, struct network net);

#endif

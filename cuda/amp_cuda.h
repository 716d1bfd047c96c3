/* The GPU backend's kernels, as C-callable launchers. Every launcher takes the
 * stream to run on and returns AMP_OK, or AMP_ERR_DEVICE with "call failed at
 * file:line: why" in err (cuda_check.h). Element math lives in plugin/math/half_format.h
 * (conversions), plugin/math/grad_math.h (unscale and check) and plugin/math/scale_rule.h (the
 * scale update), compiled for host and device alike, so the host tests exercise the GPU's
 * arithmetic.
 *
 * Multi-tensor operations work on a table of spans (pointer pairs and a
 * length, in device memory) cut into chunks of AMP_MT_CHUNK elements: one
 * launch covers every parameter tensor of a network, each block one chunk.
 */
#ifndef AMP_CUDA_H
#define AMP_CUDA_H

#include "darknet_amp.h" /* amp_dtype */
#include "math/grad_math.h" /* amp_overflow_scan */
#include "math/scale_rule.h"
#include "wgrad_index.h" /* amp_im2col_dims */

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AMP_MT_CHUNK 16384

/* x: the tensor operated on; y: its partner (a saved copy), NULL where unused. */
typedef struct amp_span {
    float *x;
    float *y;
    size_t n;
} amp_span;

typedef struct amp_chunk {
    unsigned int span;
    unsigned int start; /* element offset into the span, a multiple of AMP_MT_CHUNK */
} amp_chunk;

/* A table in device memory (spans, chunks) with its host-side counts. */
typedef struct amp_mt_table {
    amp_span *spans;
    amp_chunk *chunks;
    unsigned int nspans, nchunks;
} amp_mt_table;

/* The per-network device state. The scale fields are the scaler's (the
 * network owns its scaler on the GPU); found/skipped are this network's. */
typedef struct amp_gpu_state {
    amp_scale_state st;
    float batch_scale;        /* fixed at the batch start, used until its step */
    float inv_scale;          /* amp_inv_scale(batch_scale) */
    unsigned int found;       /* 0, or 1 + the highest span index with a non-finite element */
    unsigned int loss;        /* this batch: 0, or 1 + the first cost layer whose delta was not
                                 finite before scaling (the decision adds the host's) */
    unsigned int skipped;     /* the last step was skipped (found or loss at its decision) */
    unsigned long long seq;   /* steps decided */
} amp_gpu_state;

/* Builds a table in device memory from host spans (one synchronous upload,
 * at attach). */
amp_status amp_mt_table_create(amp_mt_table *t, const amp_span *spans, unsigned int nspans,
                               char *err, size_t errlen);
void amp_mt_table_free(amp_mt_table *t);

/* convert.cu: element-wise with half_format.h's functions (bit for bit the host's). */
amp_status amp_cuda_to_half(const float *x, uint16_t *h, size_t n, amp_dtype dtype,
                            cudaStream_t stream, char *err, size_t errlen);
amp_status amp_cuda_from_half(const uint16_t *h, float *x, size_t n, amp_dtype dtype,
                              cudaStream_t stream, char *err, size_t errlen);
/* y += float(h) (beta = 1 in float32 after a half GEMM/convolution). */
amp_status amp_cuda_add_half(const uint16_t *h, float *y, size_t n, amp_dtype dtype,
                             cudaStream_t stream, char *err, size_t errlen);

/* y += float(h) * factor, factor a power of two (exact). */
amp_status amp_cuda_add_half_scaled(const uint16_t *h, float *y, size_t n, float factor,
                                    amp_dtype dtype, cudaStream_t stream, char *err,
                                    size_t errlen);

/* x = float(half(x)) in place; y += float(half(x)). */
amp_status amp_cuda_round(float *x, size_t n, amp_dtype dtype, cudaStream_t stream, char *err,
                          size_t errlen);
amp_status amp_cuda_add_rounded(const float *x, float *y, size_t n, amp_dtype dtype,
                                cudaStream_t stream, char *err, size_t errlen);

/* wgrad.cu: a half convolution's weight-gradient operands (half_conv.c),
 * 16-bit values moved, never converted. im2col: x (nb NCHW images of c x h x w)
 * into col, c * size * size rows of nb * out_h * out_w columns (image-major);
 * to_cnhw: x (nb images of k x hw) into y, k rows of nb * hw. */
amp_status amp_cuda_im2col_half(const uint16_t *x, amp_im2col_dims d, uint16_t *col,
                                cudaStream_t stream, char *err, size_t errlen);
/* The same col from an NHWC input of c_stored >= d.c channels (the
 * activation plan's; the first convolution's image is padded). */
amp_status amp_cuda_im2col_half_nhwc(const uint16_t *x, amp_im2col_dims d, int c_stored,
                                     uint16_t *col, cudaStream_t stream, char *err, size_t errlen);
amp_status amp_cuda_to_cnhw_half(const uint16_t *x, int nb, int k, size_t hw, uint16_t *y,
                                 cudaStream_t stream, char *err, size_t errlen);

/* unscale.cu: x *= *factor over every span, one launch; with found != NULL,
 * atomicMax(found, 1 + span) for every span holding a non-finite result
 * (0 stays 0 when all are finite; never cleared by the kernel). */
amp_status amp_cuda_unscale_check(const amp_mt_table *t, const float *factor, unsigned int *found,
                                  cudaStream_t stream, char *err, size_t errlen);

/* history.cu: the batch start (y = x, then x *= scale, for every span; the
 * state's batch_scale and inv_scale are fixed from its scale), and the cost
 * layer's delta *= batch_scale. */
/* dist.cu, data-parallel: y = x, x = 0 (and the batch's scale fixed) at the
 * batch start; x = amp_dist_restack(y, batch scale, x) once x holds the sum. */
amp_status amp_cuda_set_aside(const amp_mt_table *t, amp_gpu_state *state, cudaStream_t stream,
                              char *err, size_t errlen);
amp_status amp_cuda_restack(const amp_mt_table *t, const amp_gpu_state *state,
                            cudaStream_t stream, char *err, size_t errlen);
/* x = y * factor for every span: the batch-norm statistics' mean put back
 * from the packed buffer (y) their sum was made in. */
amp_status amp_cuda_unpack_scaled(const amp_mt_table *t, float factor, cudaStream_t stream,
                                  char *err, size_t errlen);
amp_status amp_cuda_begin_batch(const amp_mt_table *t, amp_gpu_state *state, cudaStream_t stream,
                                char *err, size_t errlen);
/* delta *= batch_scale; an element not finite before it sets state->loss to
 * tag (1 + the layer's index) if it is still 0. */
amp_status amp_cuda_scale_delta(float *delta, size_t n, amp_gpu_state *state, unsigned int tag,
                                cudaStream_t stream, char *err, size_t errlen);
/* A connected layer's incoming gradient clipped to [-batch_scale, batch_scale]
 * (darknet's constrain_gpu(delta, 1) in true units; inf and NaN kept). */
amp_status amp_cuda_clip_delta(float *delta, size_t n, const amp_gpu_state *state,
                               cudaStream_t stream, char *err, size_t errlen);

/* gate.cu: y = x for every span, only when *flag != 0 (a skipped step's
 * save and restore, decided on the device), always when flag is NULL. to_y:
 * copy x into y, else y into x. */
amp_status amp_cuda_gated_copy(const amp_mt_table *t, const unsigned int *flag, int to_y,
                               cudaStream_t stream, char *err, size_t errlen);

/* scale_update.cu: the step's decision (one thread): loss = the device's
 * flag, else host_loss (1 + a cost layer whose loss the host saw not
 * finite); seq += 1; scale_rule.h's amp_step_decide (skipped, and with
 * update_scale the scale's update, which a non-finite loss leaves alone). */
amp_status amp_cuda_decide(amp_gpu_state *state, amp_scale_params params, int update_scale,
                           unsigned int host_loss, cudaStream_t stream, char *err, size_t errlen);

/* overflow.cu: out->nonfinite += the inf/NaN elements of x[0..n), out->max_finite
 * = max(itself, their largest finite magnitude): grad_math.h's
 * amp_overflow_add per element. *out must be zeroed first. */
amp_status amp_cuda_overflow_scan(const float *x, size_t n, amp_overflow_scan *out,
                                  cudaStream_t stream, char *err, size_t errlen);

/* tail.cu: a half layer's tail on NHWC half storage (x, y, dh: positions x c
 * 16-bit values, a position's channels contiguous), with tail_nhwc.c's
 * arithmetic (math/tail_math.h). The float arrays are device arrays of c
 * values (darknet's *_gpu): the forward writes mean, variance and the
 * rolling statistics while training (batch_normalize), and y; the backward
 * adds into bias_updates and scale_updates, writes mean_delta and
 * variance_delta, and overwrites dh with the tail's gradient, its rounding's
 * non-zero and flushed values added into counts[0] and counts[1] (counts
 * may be NULL). x: the batch-norm input (without batch-norm: the values
 * before the bias where the activation's gradient needs them, else NULL: y
 * itself). work: amp_cuda_tail_work_floats(positions, c) floats. The sums
 * over a channel are deterministic (a fixed order, no float atomics). */
typedef struct amp_cuda_tail {
    long positions; /* batch x out_h x out_w */
    int c;
    int bf16;            /* bfloat16 patterns, else float16 */
    int act;             /* darknet's ACTIVATION: amp_cuda_tail_supports */
    int batch_normalize; /* else the bias */
    int cudnn;           /* cuDNN's batch-norm formula, else darknet's */
    int train;           /* batch statistics (else the rolling ones) */
    const uint16_t *x;
    uint16_t *y, *dh;
    const float *scales, *biases;
    float *mean, *variance, *rolling_mean, *rolling_variance;
    float *bias_updates, *scale_updates, *mean_delta, *variance_delta;
    float *work;
    unsigned long long *counts;
} amp_cuda_tail;

size_t amp_cuda_tail_work_floats(long positions, int c);
/* Whether the tail has a half form for the activation (math/act_math.h's). */
int amp_cuda_tail_supports(int act);
amp_status amp_cuda_tail_forward(const amp_cuda_tail *t, cudaStream_t stream, char *err,
                                 size_t errlen);
amp_status amp_cuda_tail_backward(const amp_cuda_tail *t, cudaStream_t stream, char *err,
                                  size_t errlen);

/* nhwc.cu: darknet's NCHW float32 arrays (batch images of c channels by hw
 * positions) against NHWC half tensors of c_stored >= c channels, bit for
 * bit as round.c's amp_cpu_*_half_nhwc: to_half writes every stored
 * channel (those from c on zero: the input image's padding); from_half
 * reads the first c; add_into_half rounds h + x into h (the first c). */
amp_status amp_cuda_to_half_nhwc(const float *x, uint16_t *h, int batch, int c, int c_stored,
                                 long hw, amp_dtype dtype, cudaStream_t stream, char *err,
                                 size_t errlen);
amp_status amp_cuda_from_half_nhwc(const uint16_t *h, float *x, int batch, int c, int c_stored,
                                   long hw, amp_dtype dtype, cudaStream_t stream, char *err,
                                   size_t errlen);
amp_status amp_cuda_add_into_half_nhwc(uint16_t *h, const float *x, int batch, int c,
                                       int c_stored, long hw, amp_dtype dtype,
                                       cudaStream_t stream, char *err, size_t errlen);

/* movement.cu: the data-movement layers on NHWC half tensors, as the CPU
 * plan's (movement.c, maxpool.c), bit for bit: values moved as patterns,
 * gradients added onto half deltas in float32 in the CPU's order, rounded
 * once (a leaky shortcut within a half ulp: .1f x against darknet's .1 in
 * double). */
typedef struct amp_cuda_pool {
    int batch, h, w, c, out_h, out_w, size, stride, pad; /* darknet's maxpool layer */
} amp_cuda_pool;
/* out and idx (darknet's int indexes into the input, NHWC; -1: none) per
 * output element: the first maximum of its window. */
amp_status amp_cuda_maxpool_nhwc_forward(const amp_cuda_pool *p, const uint16_t *in, uint16_t *out,
                                         int *idx, amp_dtype dtype, cudaStream_t stream, char *err,
                                         size_t errlen);
/* dst (the input's delta) += the gradients d of the windows whose maximum
 * each element is. */
amp_status amp_cuda_maxpool_nhwc_backward(const amp_cuda_pool *p, const uint16_t *d,
                                          const int *idx, uint16_t *dst, amp_dtype dtype,
                                          cudaStream_t stream, char *err, size_t errlen);
amp_status amp_cuda_upsample_nhwc_forward(const uint16_t *in, uint16_t *out, int batch, int h,
                                          int w, int c, int stride, cudaStream_t stream, char *err,
                                          size_t errlen);
amp_status amp_cuda_upsample_nhwc_backward(const uint16_t *d, uint16_t *dst, int batch, int h,
                                           int w, int c, int stride, amp_dtype dtype,
                                           cudaStream_t stream, char *err, size_t errlen);
/* dst[p dst_stride + c] = src[p src_stride + c] for positions x cols (add:
 * half(dst + src)): a route's channel slices, forward and backward. */
amp_status amp_cuda_rows_nhwc(uint16_t *dst, long dst_stride, const uint16_t *src, long src_stride,
                              long positions, int cols, int add, amp_dtype dtype,
                              cudaStream_t stream, char *err, size_t errlen);
/* out = half(act(a + b)); backward: d = delta act'(y), prev and other (each
 * may be NULL) += d. act: linear or leaky (amp_cuda_shortcut_supports). */
int amp_cuda_shortcut_supports(int act);
amp_status amp_cuda_shortcut_nhwc_forward(const uint16_t *a, const uint16_t *b, uint16_t *out,
                                          long n, int act, amp_dtype dtype, cudaStream_t stream,
                                          char *err, size_t errlen);
amp_status amp_cuda_shortcut_nhwc_backward(const uint16_t *delta, const uint16_t *y,
                                           uint16_t *prev, uint16_t *other, long n, int act,
                                           amp_dtype dtype, cudaStream_t stream, char *err,
                                           size_t errlen);

/* The channels a transposing tile covers for c channels (nhwc.cu's
 * conversions, wgrad.cu's im2col from NHWC): the smallest of 4, 8, 16 and 32
 * that holds them, so that an image's 3 channels fill most of a tile. */
static inline int amp_channel_tile(int c)
{
    return c <= 4 ? 4 : c <= 8 ? 8 : c <= 16 ? 16 : 32;
}

#ifdef __cplusplus
}
#endif

#endif

/* gpu.plan_kernels' host references from the CPU backend (host_ref.c, plain C:
 * darknet's and the CPU backend's headers stay out of the CUDA test): the
 * activation plan's NHWC tail (tail_nhwc.c) and conversions (round.c) on
 * host arrays. */
#ifndef HOST_REF_H
#define HOST_REF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One layer's tail: batch images of c channels by hw positions, NHWC half
 * x, y, dh; per-channel float arrays of c values, as darknet's layer has them. */
typedef struct host_tail {
    int batch, c, hw;
    int bf16, act, batch_normalize, cudnn, train;
    uint16_t *x, *y, *dh; /* x NULL: the CPU's tail reads y (without batch-norm) */
    float *scales, *biases, *mean, *variance, *rolling_mean, *rolling_variance;
    float *bias_updates, *scale_updates, *mean_delta, *variance_delta;
    unsigned long long nonzero, flushed;
} host_tail;

void host_tail_forward(host_tail *t);
void host_tail_backward(host_tail *t);

/* round.c's conversions (c stored channels, no padding) */
void host_to_half_nhwc(int bf16, const float *x, uint16_t *h, int batch, int c, int hw);
void host_from_half_nhwc(int bf16, const uint16_t *h, float *x, int batch, int c, int hw);
void host_add_half_nhwc(int bf16, uint16_t *h, const float *x, int batch, int c, int hw);

/* maxpool.c's NHWC max-pooling on a layer of these dimensions (darknet's
 * maxpool layer's fields) */
typedef struct host_pool {
    int batch, h, w, c, out_h, out_w, size, stride, pad;
} host_pool;
void host_maxpool_forward(const host_pool *p, int bf16, const uint16_t *in, uint16_t *out, int *idx);
void host_maxpool_backward(const host_pool *p, int bf16, const uint16_t *d, const int *idx,
                           uint16_t *dst);

#ifdef __cplusplus
}
#endif

#endif

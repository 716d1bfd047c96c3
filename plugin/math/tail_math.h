/* A half layer's tail on NHWC half storage, element by element and channel
 * by channel, for the host and (AMP_HD) the device: the CPU's tail
 * (plugin/cpu/tail_nhwc.c) and the GPU's (cuda/tail.cu) compute with these
 * functions, so that the host's tests cover the device's arithmetic and the
 * two put their roundings at the same points (float32 arithmetic between a
 * half read and a half write).
 *
 * The formulas are darknet's forward_batchnorm_layer/backward_batchnorm_layer
 * (or cuDNN's forward: cudnn != 0), add_bias/backward_bias,
 * activate_array/gradient_array, with x_norm made again in the backward from
 * the kept batch-norm input x: xm = x - mean, x_norm = xm / den.
 *
 * Per element (a: darknet's ACTIVATION, one of amp_act_known's):
 *   forward with batch-norm   y = act(x_norm scale + bias)
 *   forward, bias only        y = act(x + bias)
 *   backward                  d = dh act'(y or the value before act)
 *   backward's data gradient  dx = d scale inv + kv xm + km
 * Per channel, from the sums of the forward (sum x, sum xm^2) and of the
 * backward (sum d, sum d x_norm, sum d scale, sum d scale xm): below. */
#ifndef AMP_MATH_TAIL_MATH_H
#define AMP_MATH_TAIL_MATH_H

#include "act_math.h" /* amp_act, AMP_HD */

#include <math.h>

/* The value before the activation: x_norm scale + bias, x_norm = xm / den. */
AMP_HD static inline float amp_bn_pre(float xm, float den, float scale, float bias)
{
    return xm / den * scale + bias;
}

/* The data gradient through batch-norm: d scale inv + kv xm + km, where d
 * scale is the activation's gradient times the scale. */
AMP_HD static inline float amp_bn_dx(float d_scale, float inv, float kv, float xm, float km)
{
    return d_scale * inv + kv * xm + km;
}

/* The forward's denominator from the variance: darknet's sqrt(var) + 1e-6,
 * or cuDNN's sqrt(var + 1e-5). */
AMP_HD static inline float amp_bn_den(float var, int cudnn)
{
    return cudnn ? sqrtf(var + .00001f) : sqrtf(var) + .000001f;
}

/* The forward's per-channel statistics of count values from sum x and sum
 * (x - mean)^2 (the mean first: the second sum needs it). darknet divides
 * the sum of squares by count - 1, cuDNN by count; cuDNN's running variance
 * takes the unbiased estimate. The rolling values move by .01. */
AMP_HD static inline float amp_bn_mean(float sum, long count)
{
    return sum * (1.f / count);
}

AMP_HD static inline void amp_bn_variance(float sqdev, long count, int cudnn, float mean,
                                          float *variance, float *rolling_mean,
                                          float *rolling_variance)
{
    const float vscale = 1.f / (cudnn ? count : count - 1);
    const float unbias = cudnn && count > 1 ? (float)count / (count - 1) : 1.f;
    const float var = sqdev * vscale;
    *variance = var;
    *rolling_mean = .99f * *rolling_mean + .01f * mean;
    *rolling_variance = .99f * *rolling_variance + .01f * (var * unbias);
}

/* The backward's per-channel terms from the sums md = sum d scale and vd =
 * sum d scale xm (count values, variance the forward's): inv = 1/sqrt(var +
 * 1e-5), darknet's mean_delta and variance_delta, and the data gradient's
 * kv and km. */
typedef struct amp_bn_terms {
    float inv, mean_delta, variance_delta, kv, km;
} amp_bn_terms;

AMP_HD static inline amp_bn_terms amp_bn_backward_terms(float md_sum, float vd_sum,
                                                        float variance, float count)
{
    amp_bn_terms t;
    const float ve = variance + .00001f;
    t.inv = 1.f / sqrtf(ve);
    t.mean_delta = md_sum * -t.inv;
    t.variance_delta = vd_sum * -.5f * powf(ve, -1.5f);
    t.kv = t.variance_delta * 2.f / count;
    t.km = t.mean_delta / count;
    return t;
}

#endif

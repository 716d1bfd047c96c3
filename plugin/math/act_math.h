/* The activations of the half tails, for the host and (AMP_HD) the device:
 * the CPU tails (tail.c, tail_nhwc.c) and the GPU's (cuda/tail.cu) compute
 * them with these functions, so that the host's tests cover the device's
 * arithmetic. leaky, mish, swish and hard_mish are the functions darknet's
 * activations.h defines (patch 0019), written so that a loop of them
 * vectorises: one expf each and rational functions of it, no log1pf or
 * tanhf, no branches beyond selects. amp_act and amp_act_grad choose among
 * them and darknet's linear, relu and logistic, which they compute as
 * darknet's activations.h does (bit for bit on the host: unit.activations).
 *
 * mish: with n = e^x, tanh(softplus(x)) = ((1+n)^2 - 1)/((1+n)^2 + 1) =
 * (n^2 + 2n)/(n^2 + 2n + 2), and its derivative's sech^2(softplus(x)) =
 * 1 - t^2 = 4 (n^2 + 2n + 1)/(n^2 + 2n + 2)^2, taken as that quotient rather
 * than as 1 - t^2, which cancels for large x. x is capped at 20 inside the
 * exponential, as darknet's softplus is (t is 1 in float there), so that n^4
 * stays finite. The results agree with darknet's to a few ulps (unit.act_math
 * compares them).
 */
#ifndef AMP_MATH_ACT_MATH_H
#define AMP_MATH_ACT_MATH_H

#include "half_format.h" /* AMP_HD, amp_f32_bits */

#include <math.h>
#include <stdint.h>

/* darknet's leaky slope, y > 0 ? 1 : .1 (NaN: .1), from y's bits: with
 * floating-point exceptions kept (GCC's default -ftrapping-math) a float
 * comparison or a select between float values stays a branch, and its loop
 * scalar; this one vectorises. y > 0 holds for the bit patterns 1 to
 * 0x7f800000 (the positive numbers up to inf). */
AMP_HD static inline float amp_leaky_slope(float y)
{
    const uint32_t pos = 0u - (uint32_t)(amp_f32_bits(y) - 1u < 0x7f800000u);
    return amp_f32_from_bits(0x3dcccccdu ^ (pos & (0x3f800000u ^ 0x3dcccccdu))); /* .1f or 1.f */
}

/* darknet's leaky, v > 0 ? v : .1f v, to the bit: v x 1 is v (NaN: x .1
 * gives the same quiet NaN), and +0 x .1 is +0. */
AMP_HD static inline float amp_leaky(float v)
{
    return v * amp_leaky_slope(v);
}

AMP_HD static inline float amp_mish(float x)
{
    const float n = expf(x < 20.f ? x : 20.f), s2 = n * n + 2.f * n;
    return x * (s2 / (s2 + 2.f));
}

AMP_HD static inline float amp_mish_grad(float x)
{
    const float n = expf(x < 20.f ? x : 20.f), s2 = n * n + 2.f * n, den = s2 + 2.f;
    const float sech2 = 4.f * (s2 + 1.f) / (den * den), sig = n / (1.f + n);
    return s2 / den + x * sech2 * sig;
}

AMP_HD static inline float amp_swish(float x)
{
    return x / (1.f + expf(-x));
}

AMP_HD static inline float amp_swish_grad(float x)
{
    const float s = 1.f / (1.f + expf(-x));
    return s + x * s * (1.f - s);
}

AMP_HD static inline float amp_hard_mish(float x)
{
    return x > 0.f ? x : x > -2.f ? x * x * .5f + x : 0.f;
}

AMP_HD static inline float amp_hard_mish_grad(float x)
{
    return x > 0.f ? 1.f : x > -2.f ? x + 1.f : 0.f;
}

/* darknet's ACTIVATION, in its order (darknet.h with patch 0019; the C files
 * that see both check that they agree): the math headers do not include
 * darknet. */
typedef enum amp_activation {
    AMP_ACT_LOGISTIC,
    AMP_ACT_RELU,
    AMP_ACT_RELIE,
    AMP_ACT_LINEAR,
    AMP_ACT_RAMP,
    AMP_ACT_TANH,
    AMP_ACT_PLSE,
    AMP_ACT_LEAKY,
    AMP_ACT_ELU,
    AMP_ACT_LOGGY,
    AMP_ACT_STAIR,
    AMP_ACT_HARDTAN,
    AMP_ACT_LHTAN,
    AMP_ACT_SELU,
    AMP_ACT_MISH,
    AMP_ACT_SWISH,
    AMP_ACT_HARD_MISH
} amp_activation;

/* The activations amp_act computes: those darknet's detection cfgs use. A
 * tail with another one runs darknet's activate() (the CPU) or stays in
 * float32 (the GPU). */
AMP_HD static inline int amp_act_known(int a)
{
    return a == AMP_ACT_LINEAR || a == AMP_ACT_LEAKY || a == AMP_ACT_RELU ||
           a == AMP_ACT_LOGISTIC || a == AMP_ACT_MISH || a == AMP_ACT_SWISH ||
           a == AMP_ACT_HARD_MISH;
}

/* Whether a's gradient is taken from the input (else from the output). */
AMP_HD static inline int amp_act_needs_input(int a)
{
    return a == AMP_ACT_MISH || a == AMP_ACT_SWISH || a == AMP_ACT_HARD_MISH;
}

/* darknet's logistic, 1/(1 + e^-x) in double */
AMP_HD static inline float amp_logistic(float x)
{
    return (float)(1. / (1. + exp(-(double)x)));
}

/* relu as darknet's x (x > 0) computes it, compiled -Ofast as upstream's
 * Makefile does (0 > x ? 0 : x: +0 for every negative x, -0 and NaN kept),
 * from the bits so that a loop of it vectorises: x is set to +0 where its
 * pattern is 0x80000001 to 0xff800000 (the negative numbers, -inf included). */
AMP_HD static inline float amp_relu(float x)
{
    const uint32_t u = amp_f32_bits(x);
    const uint32_t neg = 0u - (uint32_t)(u - 0x80000001u < 0x7f800000u);
    return amp_f32_from_bits(u & ~neg);
}

/* act(v), a one of amp_act_known's (others: v) */
AMP_HD static inline float amp_act(float v, int a)
{
    return a == AMP_ACT_LINEAR      ? v
           : a == AMP_ACT_LEAKY     ? amp_leaky(v)
           : a == AMP_ACT_MISH      ? amp_mish(v)
           : a == AMP_ACT_SWISH     ? amp_swish(v)
           : a == AMP_ACT_HARD_MISH ? amp_hard_mish(v)
           : a == AMP_ACT_RELU      ? amp_relu(v)
           : a == AMP_ACT_LOGISTIC  ? amp_logistic(v)
                                    : v;
}

/* act' from the output y, or from the input v for amp_act_needs_input's:
 * darknet's gradient(y, a) (relu (y > 0), logistic (1 - y) y) */
AMP_HD static inline float amp_act_grad(float y, float v, int a)
{
    return a == AMP_ACT_LINEAR      ? 1.f
           : a == AMP_ACT_LEAKY     ? amp_leaky_slope(y)
           : a == AMP_ACT_MISH      ? amp_mish_grad(v)
           : a == AMP_ACT_SWISH     ? amp_swish_grad(v)
           : a == AMP_ACT_HARD_MISH ? amp_hard_mish_grad(v)
           : a == AMP_ACT_RELU      ? (float)(y > 0)
           : a == AMP_ACT_LOGISTIC  ? (1.f - y) * y
                                    : 1.f;
}

#endif

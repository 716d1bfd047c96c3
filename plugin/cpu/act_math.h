/* leaky, mish, swish and hard_mish for the CPU tails (tail.c, tail_nhwc.c): the
 * functions darknet's activations.h defines (patch 0019), written so that a
 * loop of them vectorises: one expf each and rational functions of it, no
 * log1pf or tanhf, no branches beyond selects.
 *
 * mish: with n = e^x, tanh(softplus(x)) = ((1+n)^2 - 1)/((1+n)^2 + 1) =
 * (n^2 + 2n)/(n^2 + 2n + 2), and its derivative's sech^2(softplus(x)) =
 * 1 - t^2 = 4 (n^2 + 2n + 1)/(n^2 + 2n + 2)^2, taken as that quotient rather
 * than as 1 - t^2, which cancels for large x. x is capped at 20 inside the
 * exponential, as darknet's softplus is (t is 1 in float there), so that n^4
 * stays finite. The results agree with darknet's to a few ulps (unit.act_math
 * compares them).
 */
#ifndef AMP_CPU_ACT_MATH_H
#define AMP_CPU_ACT_MATH_H

#include "math/half_format.h" /* amp_f32_bits */

#include <math.h>
#include <stdint.h>

/* darknet's leaky slope, y > 0 ? 1 : .1 (NaN: .1), from y's bits: with
 * floating-point exceptions kept (GCC's default -ftrapping-math) a float
 * comparison or a select between float values stays a branch, and its loop
 * scalar; this one vectorises. y > 0 holds for the bit patterns 1 to
 * 0x7f800000 (the positive numbers up to inf). */
static inline float amp_leaky_slope(float y)
{
    const uint32_t pos = 0u - (uint32_t)(amp_f32_bits(y) - 1u < 0x7f800000u);
    return amp_f32_from_bits(0x3dcccccdu ^ (pos & (0x3f800000u ^ 0x3dcccccdu))); /* .1f or 1.f */
}

/* darknet's leaky, v > 0 ? v : .1f v, to the bit: v x 1 is v (NaN: x .1
 * gives the same quiet NaN), and +0 x .1 is +0. */
static inline float amp_leaky(float v)
{
    return v * amp_leaky_slope(v);
}

static inline float amp_mish(float x)
{
    const float n = expf(x < 20.f ? x : 20.f), s2 = n * n + 2.f * n;
    return x * (s2 / (s2 + 2.f));
}

static inline float amp_mish_grad(float x)
{
    const float n = expf(x < 20.f ? x : 20.f), s2 = n * n + 2.f * n, den = s2 + 2.f;
    const float sech2 = 4.f * (s2 + 1.f) / (den * den), sig = n / (1.f + n);
    return s2 / den + x * sech2 * sig;
}

static inline float amp_swish(float x)
{
    return x / (1.f + expf(-x));
}

static inline float amp_swish_grad(float x)
{
    const float s = 1.f / (1.f + expf(-x));
    return s + x * s * (1.f - s);
}

static inline float amp_hard_mish(float x)
{
    return x > 0.f ? x : x > -2.f ? x * x * .5f + x : 0.f;
}

static inline float amp_hard_mish_grad(float x)
{
    return x > 0.f ? 1.f : x > -2.f ? x + 1.f : 0.f;
}

#endif

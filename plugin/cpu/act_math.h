/* mish, swish and hard_mish for the CPU tails (tail.c, tail_nhwc.c): the
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

#include <math.h>

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

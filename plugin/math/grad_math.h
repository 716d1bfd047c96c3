/* The per-element arithmetic of loss scaling, shared by the CPU backend
 * (plugin/cpu/backend.c) and the CUDA kernels in cuda/: plain C on floats and bit
 * patterns, every function static inline and marked AMP_HD so that nvcc
 * compiles the same expressions for host and device, and the host tests
 * (tests/math/grad_math_test.c) exercise the GPU's arithmetic.
 *
 * Numerics (docs/design.md, "Gradients and momentum"):
 * - the unscale factor is 1/S computed in double and rounded to float once,
 *   as PyTorch's GradScaler does; for a power-of-two S it is exact;
 * - a gradient is unscaled by one float multiplication, rounded to nearest
 *   even (on the device __fmul_rn, so that no contraction or fast-math flag
 *   can change it), and the result is checked: an overflow of the scaled
 *   value is inf already, and with S < 1 a finite value may overflow only now;
 * - "non-finite" is decided on the exponent bits (all ones: inf or NaN), an
 *   integer test that vectorises on the host, which a float compare reduction
 *   would not without -fassociative-math, and that flush-to-zero settings
 *   cannot change (subnormals have exponent bits 0).
 */
#ifndef AMP_GRAD_MATH_H
#define AMP_GRAD_MATH_H

#include "half_format.h" /* AMP_HD, amp_f32_bits */

#include <stdint.h>

/* 1 when x is inf or NaN, else 0. */
AMP_HD static inline uint32_t amp_nonfinite_bits(float x)
{
    return (~amp_f32_bits(x) & 0x7f800000u) == 0;
}

/* x * k rounded to nearest even: one IEEE multiplication on both sides. */
AMP_HD static inline float amp_mul_rn(float x, float k)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(x, k);
#else
    return x * k;
#endif
}

/* Data-parallel (docs/distributed.md): the batch-start history h, times the
 * batch's scale s, under the batch's gradients summed over the processes:
 * what one process's accumulation s h + g1 + g2 + ... holds, but for the
 * order of the sum. The CPU's reduce and the CUDA restack kernel both. */
AMP_HD static inline float amp_dist_restack(float h, float s, float sum)
{
    return amp_mul_rn(h, s) + sum;
}

/* The factor that undoes a scale s: 1/s in double, rounded to float once. */
AMP_HD static inline float amp_inv_scale(float s)
{
    return (float)(1.0 / (double)s);
}

/* Unscales one gradient element in place; returns 1 if the result is inf or
 * NaN. The CPU's loop ORs these over an array, the CUDA kernel over a thread's
 * elements before one atomic per block. */
AMP_HD static inline uint32_t amp_unscale_check(float *g, float inv)
{
    float u = amp_mul_rn(*g, inv);
    *g = u;
    return amp_nonfinite_bits(u);
}

/* darknet's GPU connected layer clips its incoming gradient to [-1, 1]
 * (constrain_gpu(delta, 1), the connected sub-layers of rnn, gru and lstm at
 * every time step). Under a loss scale S the delta is S times the true one,
 * so the clip must act at S to keep its meaning in true units: this clips x
 * to [-s, s]. For finite x it is darknet's fminf(s, fmaxf(-s, x)); with s a
 * power of two, clip(S*d, S) == S*clip(d, 1) exactly, so amp_dtype=float32
 * trains bit for bit like FP32. An inf or NaN passes through unclipped
 * (darknet's turns NaN into -s and inf into s): it is an overflow, which the
 * step's check must see and skip, not a large gradient. */
AMP_HD static inline float amp_clip_scaled(float x, float s)
{
    if (amp_nonfinite_bits(x)) return x;
    return x > s ? s : x < -s ? -s : x; /* fminf(s, fmaxf(-s, x)) for finite x */
}

/* A layer's output scanned for a half overflow (the activation fallback,
 * docs/design.md): how many elements are inf or NaN, and the largest
 * magnitude among the finite ones, accumulated element by element, on the
 * host (plugin/cpu/activations.c) and in the CUDA kernel (cuda/overflow.cu), and
 * merged per thread or block. */
typedef struct amp_overflow_scan {
    unsigned long long nonfinite;
    float max_finite;
} amp_overflow_scan;

AMP_HD static inline void amp_overflow_add(amp_overflow_scan *s, float x)
{
    const uint32_t bad = amp_nonfinite_bits(x);
    const float mag = amp_f32_from_bits(amp_f32_bits(x) & 0x7fffffffu);
    s->nonfinite += bad;
    if (!bad && mag > s->max_finite) s->max_finite = mag;
}

AMP_HD static inline void amp_overflow_merge(amp_overflow_scan *a, const amp_overflow_scan *b)
{
    a->nonfinite += b->nonfinite;
    if (b->max_finite > a->max_finite) a->max_finite = b->max_finite;
}

#endif

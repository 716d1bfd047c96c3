/* Element-wise conversions between float and the two 16-bit storage formats,
 * IEEE binary16 ("f16") and bfloat16 ("bf16"), shared by the CPU paths and the
 * CUDA kernels: plain C on bit patterns, no libc calls, every function
 * static inline and marked AMP_HD so that nvcc compiles it for both.
 *
 * Numerics (docs/design.md), each held exhaustively against the x86
 * instructions by tests/math/half_format_test.c:
 * - float -> f16 rounds to nearest even, produces subnormals and overflows to
 *   inf from 65520 up: bit for bit F16C vcvtps2ph (imm 0). That is IEEE
 *   rounding, so also CUDA __float2half_rn for every non-NaN input (by
 *   specification; not yet checked on a GPU). A NaN stays NaN with its sign
 *   and top 10 payload bits and the quiet bit set, as F16C does; CUDA returns
 *   a canonical NaN instead (0x7fff in cuda_fp16.hpp's host code), so only
 *   NaN payloads can differ from the GPU, never NaN-ness.
 * - float -> bf16 rounds to nearest even and keeps fp32 subnormal inputs,
 *   rounding them like any other value, as CUDA __float2bfloat16_rn does.
 *   AVX512-BF16 vcvtneps2bf16 flushes those inputs to a signed zero instead;
 *   that difference is deliberate, and the only one (the test counts it). A
 *   NaN stays NaN with its sign and top 7 payload bits and the quiet bit set,
 *   as vcvtneps2bf16 does (CUDA: canonical 0x7fff).
 * - f16 -> float and bf16 -> float are exact. A signalling f16 NaN comes back
 *   quiet (as F16C vcvtph2ps); a bf16 pattern is just the top half of a float,
 *   returned as is.
 * Integer arithmetic on bit patterns, except for two float operations on
 * subnormals (commented where they are) whose results FTZ/DAZ (-ffast-math,
 * nvcc --use_fast_math) cannot change. Branch-free, so that the array loops
 * below can be vectorised.
 */
#ifndef AMP_HALF_FORMAT_H
#define AMP_HALF_FORMAT_H

#include "hd.h"

#include <stddef.h>
#include <stdint.h>

/* Reinterpret bits. Device code has intrinsics for it; for host C a union is
 * the C99 way, and the C++ compilers of nvcc's host pass document the same. */
AMP_HD static inline uint32_t amp_f32_bits(float x)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    union { float f; uint32_t u; } v;
    v.f = x;
    return v.u;
#endif
}

AMP_HD static inline float amp_f32_from_bits(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    union { float f; uint32_t u; } v;
    v.u = u;
    return v.f;
#endif
}

/* c ? a : b for c in {0, 1}, with masks: written as ?: gcc turns these
 * selects into branches, which mispredict on mixed data (f32 -> f16 measured
 * 5.6 instead of 1.0 ns a value on random bit patterns) and keep the array
 * loops from vectorising. */
AMP_HD static inline uint32_t amp_half_select(uint32_t c, uint32_t a, uint32_t b)
{
    uint32_t m = 0u - c;
    return (a & m) | (b & ~m);
}

AMP_HD static inline uint16_t amp_f32_to_f16(float x)
{
    uint32_t u = amp_f32_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;

    /* Normal result: rebias the exponent (127 -> 15) and round the 13 bits
     * dropped from the significand to nearest even; a carry out of the
     * significand correctly bumps the exponent. Wrong from 65520 up, where
     * the selects below take over. */
    uint32_t normal = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;

    /* Subnormal (or zero) result, |x| < 2^-14: adding 0.5 leaves a float
     * whose last place is worth 2^-24, the f16 subnormal unit, so the adder
     * rounds |x| to a whole number of those units, to nearest even, and that
     * number is the low bits of the sum; a round-up to 2^-14 gives 0x400, the
     * smallest normal, as it should. Four instructions where doing the same
     * with variable shifts measured 4x slower and does not vectorise on SSE2.
     * Exact in the default rounding mode (which C assumes unless FENV_ACCESS
     * is on; darknet never changes it), and FTZ/DAZ cannot change it: the sum
     * is >= 0.5, and the inputs DAZ would flush (< 2^-126) round to 0 anyway.
     * The other inputs are replaced by 0 first, so that a NaN never reaches
     * the adder (no invalid-operation exception for code that traps them). */
    uint32_t is_sub = a < 0x38800000u;
    float small = amp_f32_from_bits(amp_half_select(is_sub, a, 0u));
#ifdef __CUDA_ARCH__
    uint32_t sub = amp_f32_bits(__fadd_rn(small, 0.5f)) - 0x3f000000u;
#else
    uint32_t sub = amp_f32_bits(small + 0.5f) - 0x3f000000u;
#endif

    /* NaN: quiet bit set, top payload bits kept (F16C's rule). */
    uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);

    uint32_t h = amp_half_select(is_sub, sub, normal);
    h = amp_half_select(a >= 0x477ff000u, 0x7c00u, h); /* 65520 = 65504 + half an ulp: to inf */
    h = amp_half_select(a > 0x7f800000u, nan, h);
    return (uint16_t)(sign | h);
}

AMP_HD static inline float amp_f16_to_f32(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t a = (uint32_t)h & 0x7fffu;
    uint32_t exp = a >> 10;

    uint32_t normal = (a << 13) + 0x38000000u;          /* rebias 15 -> 127 */
    uint32_t special = 0x7f800000u | ((a & 0x3ffu) << 13); /* inf, NaN */
    special |= (a > 0x7c00u) << 22;                     /* quiet a signalling NaN */
    /* Subnormal or zero: a * 2^-24, exact in float (a < 2^10) and a normal
     * float, so no FTZ/DAZ setting touches it. */
    uint32_t sub = amp_f32_bits((float)(int32_t)a * 5.9604644775390625e-8f);

    uint32_t bits = amp_half_select(exp == 0u, sub, normal);
    bits = amp_half_select(exp == 0x1fu, special, bits);
    return amp_f32_from_bits(sign | bits);
}

AMP_HD static inline uint16_t amp_f32_to_bf16(float x)
{
    uint32_t u = amp_f32_bits(x);
    /* Round the low 16 bits to nearest even. Works across the whole range:
     * subnormals round like normals, a carry moves into the exponent, the
     * largest values round to inf. Cannot wrap: only NaNs lie above inf. */
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x0040u;
    return (uint16_t)amp_half_select((u & 0x7fffffffu) > 0x7f800000u, nan, r);
}

AMP_HD static inline float amp_bf16_to_f32(uint16_t b)
{
    return amp_f32_from_bits((uint32_t)b << 16);
}

/* The value as it would be stored in f16 / bf16, back as a float. */
AMP_HD static inline float amp_round_f16(float x)
{
    return amp_f16_to_f32(amp_f32_to_f16(x));
}

AMP_HD static inline float amp_round_bf16(float x)
{
    return amp_bf16_to_f32(amp_f32_to_bf16(x));
}

/* Array versions, host only. In place for the rounding ones; the converting
 * ones read and write different types, which the compiler knows cannot alias. */
static inline void amp_round_f16_array(float *x, size_t n)
{
    for (size_t i = 0; i < n; ++i) x[i] = amp_round_f16(x[i]);
}

static inline void amp_round_bf16_array(float *x, size_t n)
{
    for (size_t i = 0; i < n; ++i) x[i] = amp_round_bf16(x[i]);
}

static inline void amp_f32_to_f16_array(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; ++i) dst[i] = amp_f32_to_f16(src[i]);
}

static inline void amp_f16_to_f32_array(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; ++i) dst[i] = amp_f16_to_f32(src[i]);
}

static inline void amp_f32_to_bf16_array(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; ++i) dst[i] = amp_f32_to_bf16(src[i]);
}

static inline void amp_bf16_to_f32_array(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; ++i) dst[i] = amp_bf16_to_f32(src[i]);
}

#endif

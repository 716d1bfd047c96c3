/* Half values read into float32 rows and written back from them, for the
 * loops over the activation plan's NHWC half tensors (tail_nhwc.c,
 * maxpool.c) compiled once per instruction set.
 *
 * GCC does not turn a scalar float16 conversion into F16C's vector
 * instructions, and half_format.h's portable conversion, which it does
 * vectorise, costs ten times F16C's (round.c's figures). So the loops take a
 * block of a position's values at a time through float32 rows: float16 with
 * F16C's vcvtph2ps / vcvtps2ph eight at a time in the variants that have it
 * (AMP_HALF_F16C), bfloat16 and the portable float16 with half_format.h's
 * conversions in a loop the compiler vectorises. The values are
 * half_format.h's bit for bit in every format (round.c's comment: F16C's
 * conversions are those functions by construction, and unit.half_format
 * holds them together over every input).
 */
#ifndef AMP_CPU_HALF_ROWS_H
#define AMP_CPU_HALF_ROWS_H

#include "math/half_format.h"

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define AMP_HALF_ROWS_X86 1
#endif

#if defined(__GNUC__)
#define AMP_HALF_ROWS_INLINE static inline __attribute__((always_inline))
#else
#define AMP_HALF_ROWS_INLINE static inline
#endif

/* The storage format and how it converts: a constant in each compiled
 * variant of a loop, so that the choice folds away. */
enum {
    AMP_HALF_F16,  /* float16, half_format.h's conversions */
    AMP_HALF_BF16, /* bfloat16 */
    AMP_HALF_F16C  /* float16, F16C's instructions (x86 variants with F16C only) */
};

/* Values per block: a block's rows stay in the first-level cache. */
#define AMP_HALF_BLOCK 256

#ifdef AMP_HALF_ROWS_X86
/* Not always_inline: these inline into the variants compiled with F16C and
 * are plain calls (never made) in the others. */
__attribute__((target("avx,f16c"))) static inline void amp_f16c_to_f32(const uint16_t *h,
                                                                        float *f, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; ++i) f[i] = amp_f16_to_f32(h[i]);
}

__attribute__((target("avx,f16c"))) static inline void amp_f32_to_f16c(const float *f,
                                                                        uint16_t *h, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(f + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) h[i] = amp_f32_to_f16(f[i]);
}
#endif

/* f[0, n) = the values of h[0, n) */
AMP_HALF_ROWS_INLINE void amp_half_row_load(const uint16_t *restrict h, float *restrict f, int n,
                                            const int fmt)
{
#ifdef AMP_HALF_ROWS_X86
    if (fmt == AMP_HALF_F16C) {
        amp_f16c_to_f32(h, f, n);
        return;
    }
#endif
#pragma omp simd
    for (int i = 0; i < n; ++i)
        f[i] = fmt == AMP_HALF_BF16 ? amp_bf16_to_f32(h[i]) : amp_f16_to_f32(h[i]);
}

/* h[0, n) = f[0, n) rounded to the format */
AMP_HALF_ROWS_INLINE void amp_half_row_store(const float *restrict f, uint16_t *restrict h, int n,
                                             const int fmt)
{
#ifdef AMP_HALF_ROWS_X86
    if (fmt == AMP_HALF_F16C) {
        amp_f32_to_f16c(f, h, n);
        return;
    }
#endif
#pragma omp simd
    for (int i = 0; i < n; ++i)
        h[i] = fmt == AMP_HALF_BF16 ? amp_f32_to_bf16(f[i]) : amp_f32_to_f16(f[i]);
}

#endif

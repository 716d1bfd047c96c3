/* Rounding float32 arrays in place to the values a float16 or bfloat16 store
 * and load would leave (half_format.h's amp_round_f16 and amp_round_bf16, bit for
 * bit), fast: eight at a time where the CPU has F16C (float16) or AVX2
 * (bfloat16) (isa.c), split between OpenMP threads for large arrays.
 *
 * float16 uses F16C's conversions (vcvtps2ph, round to nearest even, then
 * vcvtph2ps); half_format.h's amp_round_f16 is vcvtps2ph by construction, and
 * unit.half_format holds the two together over all 2^32 inputs. bfloat16 is
 * integer arithmetic on the bit patterns, half_format.h's amp_f32_to_bf16 eight
 * lanes wide (no x86 instruction before AVX512-BF16 converts to bfloat16, and
 * that one flushes float32 subnormals, which the emulation keeps).
 * unit.round_variants holds every variant against half_format.h over 2^26 patterns.
 *
 * The oneDNN half paths on float32 kernels (onednn_pass.c) round every operand
 * and result through here. Per element, one thread, counting flushes (an
 * AMD EPYC with AVX2; unit.round_variants prints its own figures): float16 10 ns in
 * portable code, 0.45 with F16C; bfloat16 3.0 portable, 0.43 with AVX2.
 */
#include "cpu.h"
#include "math/half_format.h"

#ifdef __x86_64__
#if defined(__GNUC__)
#include <immintrin.h>
#define AMP_ROUND_X86 1
#endif
#endif

/* Below this many elements one thread does it all. */
#define ROUND_PARALLEL_MIN (1 << 16)

typedef struct round_counts {
    unsigned long long nonzero, flushed;
} round_counts;

/* The scalar rounding and counting of one element (the vector loops' tails). */
static inline void round_one(amp_dtype dtype, float *x, round_counts *c)
{
    const float v = *x;
    *x = dtype == AMP_DTYPE_BFLOAT16 ? amp_round_bf16(v) : amp_round_f16(v);
    c->nonzero += v != 0.0f;
    c->flushed += v != 0.0f && *x == 0.0f;
}

#ifdef AMP_ROUND_X86
/* Adds to c the lanes of v that were not zero (NaN included), and of them
 * those that r, their rounding, made zero. */
__attribute__((target("avx"))) static inline void count8(__m256 v, __m256 r, round_counts *c)
{
    const __m256 zero = _mm256_setzero_ps();
    const int was = _mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_NEQ_UQ));
    const int now = _mm256_movemask_ps(_mm256_cmp_ps(r, zero, _CMP_EQ_OQ));
    c->nonzero += (unsigned)__builtin_popcount((unsigned)was);
    c->flushed += (unsigned)__builtin_popcount((unsigned)(was & now));
}

__attribute__((target("avx,f16c"))) static void round_f16_f16c(float *x, size_t n,
                                                               round_counts *c)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        _mm256_storeu_ps(x + i, r);
        if (c) count8(v, r, c);
    }
    round_counts none = {0, 0};
    for (; i < n; ++i) round_one(AMP_DTYPE_FLOAT16, x + i, c ? c : &none);
}

/* half_format.h's amp_f32_to_bf16, then back to float32 (the low 16 bits zero):
 * u + 0x7fff + (bit 16 of u), truncated, for every number (a carry into the
 * exponent is right, the largest round to inf); a NaN keeps its top bits
 * with the quiet bit (bit 22) set. */
__attribute__((target("avx2"))) static void round_bf16_avx2(float *x, size_t n, round_counts *c)
{
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i top = _mm256_set1_epi32((int)0xffff0000u), quiet = _mm256_set1_epi32(0x00400000);
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_loadu_si256((const __m256i *)(x + i));
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        const __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, bias), lsb), top);
        const __m256i nan = _mm256_and_si256(_mm256_or_si256(u, quiet), top);
        const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        const __m256i out = _mm256_blendv_epi8(r, nan, is_nan);
        _mm256_storeu_si256((__m256i *)(x + i), out);
        if (c) count8(_mm256_castsi256_ps(u), _mm256_castsi256_ps(out), c);
    }
    round_counts none = {0, 0};
    for (; i < n; ++i) round_one(AMP_DTYPE_BFLOAT16, x + i, c ? c : &none);
}
#endif

/* half_format.h's functions one element at a time (the compiler may vectorise them
 * for SSE2; the selects are branch-free for that). */
static void round_portable(amp_dtype dtype, float *x, size_t n, round_counts *c)
{
    if (!c) { /* no counts: loops the compiler vectorises */
        if (dtype == AMP_DTYPE_BFLOAT16) amp_round_bf16_array(x, n);
        else amp_round_f16_array(x, n);
        return;
    }
    round_counts k = {0, 0};
    if (dtype == AMP_DTYPE_BFLOAT16)
        for (size_t i = 0; i < n; ++i) round_one(AMP_DTYPE_BFLOAT16, x + i, &k);
    else
        for (size_t i = 0; i < n; ++i) round_one(AMP_DTYPE_FLOAT16, x + i, &k);
    c->nonzero += k.nonzero, c->flushed += k.flushed;
}

/* The variant that rounds dtype at isa: AMP_ISA_AVX (F16C, float16),
 * AMP_ISA_AVX2 (bfloat16) or AMP_ISA_SSE2 (portable). */
static amp_cpu_isa path(amp_cpu_isa isa, amp_dtype dtype)
{
#ifdef AMP_ROUND_X86
    if (dtype == AMP_DTYPE_BFLOAT16) return isa >= AMP_ISA_AVX2 ? AMP_ISA_AVX2 : AMP_ISA_SSE2;
    return isa >= AMP_ISA_AVX ? AMP_ISA_AVX : AMP_ISA_SSE2;
#else
    (void)isa, (void)dtype;
    return AMP_ISA_SSE2;
#endif
}

static void round_part(amp_cpu_isa isa, amp_dtype dtype, float *x, size_t n, round_counts *c)
{
    switch (path(isa, dtype)) {
#ifdef AMP_ROUND_X86
    case AMP_ISA_AVX2: round_bf16_avx2(x, n, c); return;
    case AMP_ISA_AVX: round_f16_f16c(x, n, c); return;
#endif
    default: round_portable(dtype, x, n, c);
    }
}

amp_cpu_isa amp_cpu_round_half_at(amp_cpu_isa isa, amp_dtype dtype, float *x, size_t n,
                                  unsigned long long *nonzero, unsigned long long *flushed)
{
    if (isa > amp_cpu_isa_detected()) isa = amp_cpu_isa_detected();
    if (dtype != AMP_DTYPE_FLOAT16 && dtype != AMP_DTYPE_BFLOAT16) return path(isa, dtype);
    round_counts total = {0, 0};
    if (n < ROUND_PARALLEL_MIN) {
        round_part(isa, dtype, x, n, nonzero ? &total : NULL);
    } else {
        unsigned long long nz = 0, fl = 0;
        const long chunks = (long)((n + ROUND_PARALLEL_MIN - 1) / ROUND_PARALLEL_MIN);
#pragma omp parallel for reduction(+ : nz, fl) schedule(static)
        for (long k = 0; k < chunks; ++k) {
            const size_t start = (size_t)k * ROUND_PARALLEL_MIN;
            const size_t len = n - start < ROUND_PARALLEL_MIN ? n - start : ROUND_PARALLEL_MIN;
            round_counts c = {0, 0};
            round_part(isa, dtype, x + start, len, nonzero ? &c : NULL);
            nz += c.nonzero;
            fl += c.flushed;
        }
        total.nonzero = nz;
        total.flushed = fl;
    }
    if (nonzero) *nonzero += total.nonzero, *flushed += total.flushed;
    return path(isa, dtype);
}

void amp_cpu_round_half(amp_dtype dtype, float *x, size_t n, unsigned long long *nonzero,
                        unsigned long long *flushed)
{
    (void)amp_cpu_round_half_at(amp_cpu_isa_used(), dtype, x, n, nonzero, flushed);
}

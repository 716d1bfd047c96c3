/* Rounding float32 arrays to float16 in place, fast: the values a float16
 * store and load would leave (half.h's amp_round_f16, bit for bit), with
 * F16C's conversions (vcvtps2ph, round to nearest even, then vcvtph2ps) eight
 * at a time where the CPU has them, split between OpenMP threads for large
 * arrays. half.h's amp_round_f16 is F16C's vcvtps2ph by construction, and
 * unit.convert holds the two together over all 2^32 inputs; unit.round holds
 * this file against amp_round_f16.
 *
 * The oneDNN float16 path (onednn.c) rounds every operand and result through
 * here: 3.3 ns per element for half.h's portable code here, F16C about 0.2.
 */
#include "cpu.h"
#include "half.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define AMP_ROUND_F16C 1
#endif

/* Below this many elements one thread does it all. */
#define ROUND_PARALLEL_MIN (1 << 16)

#ifdef AMP_ROUND_F16C
__attribute__((target("avx,f16c"))) static void round_f16c(float *x, size_t n,
                                                           unsigned long long *nonzero,
                                                           unsigned long long *flushed)
{
    size_t i = 0;
    unsigned long long nz = 0, fl = 0;
    const __m256 zero = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        _mm256_storeu_ps(x + i, r);
        if (nonzero) {
            const int was = _mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_NEQ_UQ)); /* NaN too */
            const int now = _mm256_movemask_ps(_mm256_cmp_ps(r, zero, _CMP_EQ_OQ));
            nz += (unsigned)__builtin_popcount((unsigned)was);
            fl += (unsigned)__builtin_popcount((unsigned)(was & now));
        }
    }
    for (; i < n; ++i) {
        const float v = x[i];
        x[i] = amp_round_f16(v);
        nz += v != 0.0f;
        fl += v != 0.0f && x[i] == 0.0f;
    }
    if (nonzero) *nonzero += nz, *flushed += fl;
}
#endif

static void round_portable(float *x, size_t n, unsigned long long *nonzero,
                           unsigned long long *flushed)
{
    unsigned long long nz = 0, fl = 0;
    for (size_t i = 0; i < n; ++i) {
        const float v = x[i];
        x[i] = amp_round_f16(v);
        nz += v != 0.0f;
        fl += v != 0.0f && x[i] == 0.0f;
    }
    if (nonzero) *nonzero += nz, *flushed += fl;
}

/* F16C and AVX, with the operating system saving the YMM registers (CPUID
 * leaf 1, XGETBV): what gcc's and clang's builtins would say, in a form both
 * compile (clang 14 knows no "f16c" for __builtin_cpu_supports). */
static int detect_f16c(void)
{
#ifdef AMP_ROUND_F16C
    unsigned a, b, c, d, lo, hi;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned need = 1u << 27 | 1u << 28 | 1u << 29; /* OSXSAVE, AVX, F16C */
    if ((c & need) != need) return 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return (lo & 6u) == 6u; /* XMM and YMM state */
#else
    return 0;
#endif
}

static int have_f16c(void)
{
    static int known = -1; /* the same value from any thread that sets it */
    if (known < 0) known = detect_f16c();
    return known;
}

static void round_part(float *x, size_t n, unsigned long long *nonzero, unsigned long long *flushed)
{
#ifdef AMP_ROUND_F16C
    if (have_f16c()) {
        round_f16c(x, n, nonzero, flushed);
        return;
    }
#endif
    round_portable(x, n, nonzero, flushed);
}

void amp_cpu_round_f16(float *x, size_t n, unsigned long long *nonzero, unsigned long long *flushed)
{
    (void)have_f16c(); /* decided before the threads start */
    if (n < ROUND_PARALLEL_MIN) {
        round_part(x, n, nonzero, flushed);
        return;
    }
    unsigned long long nz = 0, fl = 0;
    const long chunks = (long)((n + ROUND_PARALLEL_MIN - 1) / ROUND_PARALLEL_MIN);
#pragma omp parallel for reduction(+ : nz, fl) schedule(static)
    for (long c = 0; c < chunks; ++c) {
        const size_t start = (size_t)c * ROUND_PARALLEL_MIN;
        const size_t len = n - start < ROUND_PARALLEL_MIN ? n - start : ROUND_PARALLEL_MIN;
        unsigned long long cnz = 0, cfl = 0;
        round_part(x + start, len, nonzero ? &cnz : NULL, &cfl);
        nz += cnz;
        fl += cfl;
    }
    if (nonzero) *nonzero += nz, *flushed += fl;
}

int amp_cpu_round_f16_native(void)
{
    return have_f16c();
}

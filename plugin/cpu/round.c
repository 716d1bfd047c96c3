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
#include "math/nhwc.h"

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

/* ---- Converting between float32 and half storage (the activation plan) ----
 *
 * The half tensors of the activation plan (activations.c) are arrays of 16-bit
 * patterns: float16, or bfloat16 (a float32's top half, rounded to nearest
 * even). half_format.h's conversions, eight at a time with F16C (float16) or
 * AVX2 (bfloat16), bit for bit the same (unit.half_storage). */

typedef enum convert_op { TO_HALF, FROM_HALF, ADD_INTO_HALF } convert_op;

static void convert_portable(convert_op op, amp_dtype dtype, const float *f, float *fout,
                             uint16_t *h, size_t n)
{
    const int bf = dtype == AMP_DTYPE_BFLOAT16;
    for (size_t i = 0; i < n; ++i) {
        switch (op) {
        case TO_HALF: h[i] = bf ? amp_f32_to_bf16(f[i]) : amp_f32_to_f16(f[i]); break;
        case FROM_HALF: fout[i] = bf ? amp_bf16_to_f32(h[i]) : amp_f16_to_f32(h[i]); break;
        case ADD_INTO_HALF: {
            const float v = (bf ? amp_bf16_to_f32(h[i]) : amp_f16_to_f32(h[i])) + f[i];
            h[i] = bf ? amp_f32_to_bf16(v) : amp_f32_to_f16(v);
        }
        }
    }
}

#ifdef AMP_ROUND_X86
__attribute__((target("avx,f16c"))) static void convert_f16c(convert_op op, const float *f,
                                                             float *fout, uint16_t *h, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v;
        if (op == TO_HALF) {
            v = _mm256_loadu_ps(f + i);
        } else {
            v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i)));
            if (op == FROM_HALF) {
                _mm256_storeu_ps(fout + i, v);
                continue;
            }
            v = _mm256_add_ps(v, _mm256_loadu_ps(f + i));
        }
        _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    convert_portable(op, AMP_DTYPE_FLOAT16, f ? f + i : NULL, fout ? fout + i : NULL, h + i,
                     n - i);
}

/* Eight float32 lanes to bfloat16 patterns, as round_bf16_avx2 rounds them. */
__attribute__((target("avx2"))) static inline __m128i bf16_pack8(__m256i u)
{
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i quiet = _mm256_set1_epi32(0x00400000);
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, bias), lsb), 16);
    const __m256i nan = _mm256_srli_epi32(_mm256_or_si256(u, quiet), 16);
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
    const __m256i out = _mm256_blendv_epi8(r, nan, is_nan); /* < 2^16 per lane */
    const __m256i packed = _mm256_packus_epi32(out, out);   /* per 128-bit lane */
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

__attribute__((target("avx2"))) static void convert_bf16_avx2(convert_op op, const float *f,
                                                              float *fout, uint16_t *h, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u;
        if (op == TO_HALF) {
            u = _mm256_loadu_si256((const __m256i *)(f + i));
        } else {
            const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + i)));
            const __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
            if (op == FROM_HALF) {
                _mm256_storeu_ps(fout + i, v);
                continue;
            }
            u = _mm256_castps_si256(_mm256_add_ps(v, _mm256_loadu_ps(f + i)));
        }
        _mm_storeu_si128((__m128i *)(h + i), bf16_pack8(u));
    }
    convert_portable(op, AMP_DTYPE_BFLOAT16, f ? f + i : NULL, fout ? fout + i : NULL, h + i,
                     n - i);
}
#endif

static void convert_part(amp_cpu_isa isa, convert_op op, amp_dtype dtype, const float *f,
                         float *fout, uint16_t *h, size_t n)
{
    switch (path(isa, dtype)) {
#ifdef AMP_ROUND_X86
    case AMP_ISA_AVX2: convert_bf16_avx2(op, f, fout, h, n); return;
    case AMP_ISA_AVX: convert_f16c(op, f, fout, h, n); return;
#endif
    default: convert_portable(op, dtype, f, fout, h, n);
    }
}

static amp_cpu_isa convert(amp_cpu_isa isa, convert_op op, amp_dtype dtype, const float *f,
                           float *fout, uint16_t *h, size_t n)
{
    if (isa > amp_cpu_isa_detected()) isa = amp_cpu_isa_detected();
    if (n < ROUND_PARALLEL_MIN) {
        convert_part(isa, op, dtype, f, fout, h, n);
        return path(isa, dtype);
    }
    const long chunks = (long)((n + ROUND_PARALLEL_MIN - 1) / ROUND_PARALLEL_MIN);
#pragma omp parallel for schedule(static)
    for (long k = 0; k < chunks; ++k) {
        const size_t s = (size_t)k * ROUND_PARALLEL_MIN;
        const size_t len = n - s < ROUND_PARALLEL_MIN ? n - s : ROUND_PARALLEL_MIN;
        convert_part(isa, op, dtype, f ? f + s : NULL, fout ? fout + s : NULL, h + s, len);
    }
    return path(isa, dtype);
}

amp_cpu_isa amp_cpu_convert_at(amp_cpu_isa isa, int op, amp_dtype dtype, float *f, uint16_t *h,
                               size_t n)
{
    const convert_op c = (convert_op)op;
    return convert(isa, c, dtype, c == FROM_HALF ? NULL : f, c == FROM_HALF ? f : NULL, h, n);
}

void amp_cpu_to_half(amp_dtype dtype, const float *src, uint16_t *dst, size_t n)
{
    (void)convert(amp_cpu_isa_used(), TO_HALF, dtype, src, NULL, dst, n);
}

void amp_cpu_from_half(amp_dtype dtype, const uint16_t *src, float *dst, size_t n)
{
    (void)convert(amp_cpu_isa_used(), FROM_HALF, dtype, NULL, dst, (uint16_t *)src, n);
}

void amp_cpu_add_half(amp_dtype dtype, uint16_t *h, const float *add, size_t n)
{
    (void)convert(amp_cpu_isa_used(), ADD_INTO_HALF, dtype, add, NULL, h, n);
}

/* ---- The same between darknet's NCHW float32 and the plan's NHWC storage ----
 *
 * A half tensor of the plan is stored channels last (activations.c): image b,
 * position p, channel c at (b * hw + p) * c_n + c. The emulation and the
 * layers that run darknet's own float32 code read and write NCHW; these
 * convert and transpose in one pass, a tile of positions at a time so that
 * both sides stay in cache. Same values, bit for bit, as the untransposed
 * conversions above (half_format.h's). */

#define NHWC_TILE 16

static inline float half_to_f32(int bf, uint16_t h)
{
    return bf ? amp_bf16_to_f32(h) : amp_f16_to_f32(h);
}

static inline uint16_t f32_to_half(int bf, float x)
{
    return bf ? amp_f32_to_bf16(x) : amp_f32_to_f16(x);
}

/* One tile: positions [p0, p1) of image b, every channel. */
static inline void nhwc_tile(convert_op op, int bf, const float *f, float *fout, uint16_t *h,
                             int b, int c_n, int hw, int p0, int p1)
{
    for (int c = 0; c < c_n; ++c) {
        const size_t nchw = (size_t)amp_nchw_at(b, c, 0, c_n, hw);
        for (int p = p0; p < p1; ++p) {
            uint16_t *hp = h + amp_nhwc_at(b, c, p, c_n, hw);
            switch (op) {
            case TO_HALF: *hp = f32_to_half(bf, f[nchw + p]); break;
            case FROM_HALF: fout[nchw + p] = half_to_f32(bf, *hp); break;
            case ADD_INTO_HALF: *hp = f32_to_half(bf, half_to_f32(bf, *hp) + f[nchw + p]); break;
            }
        }
    }
}

static void convert_nhwc(convert_op op, amp_dtype dtype, const float *f, float *fout, uint16_t *h,
                         int batch, int c_n, int hw)
{
    const int bf = dtype == AMP_DTYPE_BFLOAT16, tiles = (hw + NHWC_TILE - 1) / NHWC_TILE;
    const long n = (long)batch * tiles;
#pragma omp parallel for schedule(static) if ((size_t)batch * c_n * hw >= ROUND_PARALLEL_MIN)
    for (long k = 0; k < n; ++k) {
        const int b = (int)(k / tiles), p0 = (int)(k % tiles) * NHWC_TILE;
        const int p1 = p0 + NHWC_TILE < hw ? p0 + NHWC_TILE : hw;
        if (bf) nhwc_tile(op, 1, f, fout, h, b, c_n, hw, p0, p1);
        else nhwc_tile(op, 0, f, fout, h, b, c_n, hw, p0, p1);
    }
}

void amp_cpu_to_half_nhwc(amp_dtype dtype, const float *src, uint16_t *dst, int batch, int c,
                          int hw)
{
    convert_nhwc(TO_HALF, dtype, src, NULL, dst, batch, c, hw);
}

void amp_cpu_from_half_nhwc(amp_dtype dtype, const uint16_t *src, float *dst, int batch, int c,
                            int hw)
{
    convert_nhwc(FROM_HALF, dtype, NULL, dst, (uint16_t *)src, batch, c, hw);
}

void amp_cpu_add_half_nhwc(amp_dtype dtype, uint16_t *h, const float *add, int batch, int c,
                           int hw)
{
    convert_nhwc(ADD_INTO_HALF, dtype, add, NULL, h, batch, c, hw);
}

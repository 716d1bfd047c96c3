/* half_format.h against the hardware: every one of the 2^32 float bit patterns
 * through amp_f32_to_f16 (vs x86 F16C vcvtps2ph, round to nearest even) and
 * amp_f32_to_bf16 (vs AVX512-BF16 vcvtneps2bf16), every 2^16 f16 pattern back
 * (vs F16C vcvtph2ps) and every bf16 pattern back (vs the definition, the top
 * half of a float). The array helpers are what runs, so they are covered too.
 * Exact comparison of bit patterns throughout: a conversion has one right
 * answer, NaN payloads included. f32->f16 also runs again with FTZ/DAZ set
 * (inputs below 2^-14) and with invalid-operation traps on (inf/NaN inputs),
 * the two ways its one float addition could go wrong.
 *
 * One deliberate difference: vcvtneps2bf16 flushes fp32 subnormal inputs to
 * zero, half_format.h rounds them (as CUDA's __float2bfloat16_rn). For exactly those
 * inputs the test checks ours against an independent rounding in double
 * arithmetic and the instruction's against a signed zero, and counts them.
 *
 * CPU-independent spot checks (the edges: overflow threshold, subnormals,
 * ties, signed zero, NaN) run everywhere. A part whose instruction the CPU
 * lacks prints SKIP; with no reference instruction at all the exit status is
 * 77 (CTest's skip code), else 0 (pass) or 1.
 */
#include "math/half_format.h"
#include "../check.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#define CT_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

#define MAX_EXAMPLES 5

#define from_bits amp_f32_from_bits
#define to_bits amp_f32_bits

static int f16_is_nan(uint16_t h)
{
    return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}

static int bf16_is_nan(uint16_t b)
{
    return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
}

/* ---- spot checks: no hardware needed ---- */

typedef struct { uint32_t in; uint16_t want; const char *what; } to16_case;
typedef struct { uint16_t in; uint32_t want; const char *what; } from16_case;

static void spot_checks(void)
{
    static const to16_case f16[] = {
        {0x3f800000u, 0x3c00u, "1"},
        {0x3f801000u, 0x3c00u, "1 + 2^-11 (tie, to even: down)"},
        {0x3f803000u, 0x3c02u, "1 + 3*2^-11 (tie, to even: up)"},
        {0x3f801001u, 0x3c01u, "just above 1 + 2^-11"},
        {0x477fe000u, 0x7bffu, "65504 (largest f16)"},
        {0x477fefffu, 0x7bffu, "65519.996 (largest float below 65520)"},
        {0x477ff000u, 0x7c00u, "65520 (tie at the top: to inf)"},
        {0xc77ff000u, 0xfc00u, "-65520"},
        {0x7f7fffffu, 0x7c00u, "FLT_MAX"},
        {0x7f800000u, 0x7c00u, "inf"},
        {0xff800000u, 0xfc00u, "-inf"},
        {0x38800000u, 0x0400u, "2^-14 (smallest normal)"},
        {0x387fc000u, 0x03ffu, "2^-14 - 2^-24 (largest subnormal)"},
        {0x387fe000u, 0x0400u, "2^-14 - 2^-25 (tie, to even: up to the smallest normal)"},
        {0x387fdfffu, 0x03ffu, "just below 2^-14 - 2^-25"},
        {0x33800000u, 0x0001u, "2^-24 (smallest subnormal)"},
        {0x33000000u, 0x0000u, "2^-25 (tie, to even: 0)"},
        {0x33000001u, 0x0001u, "just above 2^-25"},
        {0x33400000u, 0x0001u, "3*2^-26"},
        {0x33c00000u, 0x0002u, "3*2^-25 (tie, to even: 2)"},
        {0x34200000u, 0x0002u, "5*2^-25 (tie, to even: 2)"},
        {0x00000001u, 0x0000u, "smallest fp32 subnormal"},
        {0x80000000u, 0x8000u, "-0"},
        {0xb2800000u, 0x8000u, "-2^-26"},
        {0x7fc00000u, 0x7e00u, "quiet NaN"},
        {0xffc00000u, 0xfe00u, "negative quiet NaN"},
        {0x7f800001u, 0x7e00u, "signalling NaN, payload only in the low bits"},
        {0x7fa00000u, 0x7f00u, "signalling NaN, payload kept"},
    };
    static const from16_case f16_back[] = {
        {0x0001u, 0x33800000u, "smallest subnormal"},
        {0x03ffu, 0x387fc000u, "largest subnormal"},
        {0x0400u, 0x38800000u, "smallest normal"},
        {0x3c00u, 0x3f800000u, "1"},
        {0x7bffu, 0x477fe000u, "65504"},
        {0x7c00u, 0x7f800000u, "inf"},
        {0xfc00u, 0xff800000u, "-inf"},
        {0x8000u, 0x80000000u, "-0"},
        {0x8001u, 0xb3800000u, "-2^-24"},
        {0x7e00u, 0x7fc00000u, "quiet NaN"},
        {0x7d00u, 0x7fe00000u, "signalling NaN: quieted"},
    };
    static const to16_case bf16[] = {
        {0x3f800000u, 0x3f80u, "1"},
        {0x3f808000u, 0x3f80u, "1 + 2^-8 (tie, to even: down)"},
        {0x3f818000u, 0x3f82u, "1 + 3*2^-8 (tie, to even: up)"},
        {0x3f808001u, 0x3f81u, "just above 1 + 2^-8"},
        {0x3f80ffffu, 0x3f81u, "just below 1 + 2^-7"},
        {0x7f7f7fffu, 0x7f7fu, "below the top tie"},
        {0x7f7f8000u, 0x7f80u, "the top tie (odd): to inf"},
        {0x7f7fffffu, 0x7f80u, "FLT_MAX"},
        {0x7f800000u, 0x7f80u, "inf"},
        {0xff800000u, 0xff80u, "-inf"},
        {0x80000000u, 0x8000u, "-0"},
        {0x00008000u, 0x0000u, "fp32 subnormal 2^-134 (tie, to even: 0)"},
        {0x00008001u, 0x0001u, "fp32 subnormal just above 2^-134: kept, not flushed"},
        {0x00018000u, 0x0002u, "fp32 subnormal 3*2^-134 (tie, to even: 2)"},
        {0x807fffffu, 0x8080u, "largest negative fp32 subnormal: up to -FLT_MIN"},
        {0x7fc00000u, 0x7fc0u, "quiet NaN"},
        {0xffc00000u, 0xffc0u, "negative quiet NaN"},
        {0x7f800001u, 0x7fc0u, "signalling NaN, payload only in the low bits"},
        {0x7f810000u, 0x7fc1u, "signalling NaN, payload kept"},
        {0x7fffffffu, 0x7fffu, "NaN with every payload bit"},
    };
    for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; ++i) {
        uint16_t got = amp_f32_to_f16(from_bits(f16[i].in));
        CHECK(got == f16[i].want, "f32->f16 %s (0x%08x): 0x%04x, expected 0x%04x", f16[i].what,
              (unsigned)f16[i].in, got, f16[i].want);
    }
    CHECK(amp_f32_to_f16(65519.99f) == 0x7bffu && amp_f32_to_f16(65520.0f) == 0x7c00u &&
              amp_f32_to_f16(0x1p-24f) == 0x0001u && amp_f32_to_f16(0x1p-25f) == 0 &&
              amp_f32_to_f16(3 * 0x1p-26f) == 0x0001u,
          "f32->f16 from float literals: 65519.99, 65520, 2^-24, 2^-25, 3*2^-26");
    for (size_t i = 0; i < sizeof f16_back / sizeof f16_back[0]; ++i) {
        uint32_t got = to_bits(amp_f16_to_f32(f16_back[i].in));
        CHECK(got == f16_back[i].want, "f16->f32 %s (0x%04x): 0x%08x, expected 0x%08x",
              f16_back[i].what, f16_back[i].in, (unsigned)got, (unsigned)f16_back[i].want);
    }
    for (size_t i = 0; i < sizeof bf16 / sizeof bf16[0]; ++i) {
        uint16_t got = amp_f32_to_bf16(from_bits(bf16[i].in));
        CHECK(got == bf16[i].want, "f32->bf16 %s (0x%08x): 0x%04x, expected 0x%04x", bf16[i].what,
              (unsigned)bf16[i].in, got, bf16[i].want);
    }
    CHECK(to_bits(amp_bf16_to_f32(0xbf80u)) == 0xbf800000u, "bf16->f32 0xbf80 = -1");

    /* Round-trip helpers and the array loops, including a length that no
     * vector width divides. */
    float x[7] = {1.0f + 0x1p-11f, 65520.0f, 0x1p-25f, 3 * 0x1p-26f, -0.0f, 1.0f + 0x1p-8f, 1e-40f};
    const uint32_t want_f16[7] = {0x3f800000u, 0x7f800000u, 0, 0x33800000u, 0x80000000u,
                                  0x3f808000u, 0};
    const uint32_t want_bf16[7] = {0x3f800000u, 0x47800000u, 0x33000000u, 0x33400000u,
                                   0x80000000u, 0x3f800000u, 0x00010000u};
    float y[7];
    int bad_scalar = 0, bad_f16 = 0, bad_bf16 = 0;
    memcpy(y, x, sizeof x);
    amp_round_f16_array(y, 7);
    for (int i = 0; i < 7; ++i) {
        bad_f16 += to_bits(y[i]) != want_f16[i];
        bad_scalar += to_bits(amp_round_f16(x[i])) != want_f16[i];
    }
    memcpy(y, x, sizeof x);
    amp_round_bf16_array(y, 7);
    for (int i = 0; i < 7; ++i) {
        bad_bf16 += to_bits(y[i]) != want_bf16[i];
        bad_scalar += to_bits(amp_round_bf16(x[i])) != want_bf16[i];
    }
    CHECK(bad_scalar == 0, "amp_round_f16/amp_round_bf16 on 7 edge values: %d wrong", bad_scalar);
    CHECK(bad_f16 == 0, "amp_round_f16_array on 7 edge values: %d wrong", bad_f16);
    CHECK(bad_bf16 == 0, "amp_round_bf16_array on 7 edge values: %d wrong", bad_bf16);

    /* Every f16 back to float and to f16 again is the identity (a NaN comes
     * back quiet, so only NaN-ness is asked of it). Needs no hardware. */
    long bad_trip = 0;
    for (uint32_t h = 0; h <= 0xffffu; ++h) {
        uint16_t back = amp_f32_to_f16(amp_f16_to_f32((uint16_t)h));
        bad_trip += f16_is_nan((uint16_t)h) ? !f16_is_nan(back) : back != h;
    }
    CHECK(bad_trip == 0, "all 2^16 f16 -> f32 -> f16 round trips: %ld mismatches", bad_trip);
}

/* ---- the hardware references ---- */

#ifdef CT_X86
#define BLOCK (1u << 18)

static union { uint32_t u[BLOCK]; float f[BLOCK]; } in;
static uint16_t ours16[BLOCK], ref16[BLOCK], daz16[BLOCK];
static union { uint32_t u[BLOCK]; float f[BLOCK]; } ours32, ref32;

__attribute__((target("avx,f16c"))) static void f16c_f32_to_f16(const float *x, uint16_t *h,
                                                                 size_t n)
{
    for (size_t i = 0; i < n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
}

__attribute__((target("avx,f16c"))) static void f16c_f16_to_f32(const uint16_t *h, float *x,
                                                                 size_t n)
{
    for (size_t i = 0; i < n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
}

__attribute__((target("avx512bf16,avx512f"))) static void avx512_f32_to_bf16(const float *x,
                                                                             uint16_t *b, size_t n)
{
    for (size_t i = 0; i < n; i += 16)
        _mm256_storeu_si256((__m256i *)(b + i),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
}

/* Ours with MXCSR changed: FTZ and DAZ set (as -ffast-math does at
 * start-up) for the inputs below 2^-14, whose f16 result half_format.h computes with
 * a float addition; the invalid-operation exception unmasked for the NaN
 * inputs, which must never reach that addition (a trap would kill the test).
 * Out of line so that the mode switches bracket the loop. Returns whether
 * DAZ was on (a subnormal times 2 came out 0). */
__attribute__((noinline)) static int ours_f16_mxcsr(const float *x, uint16_t *h, size_t n,
                                                     unsigned set, unsigned clear)
{
    unsigned csr = _mm_getcsr();
    _mm_setcsr((csr | set) & ~clear);
    volatile float tiny = from_bits(1), two = 2.0f;
    int daz_on = to_bits(tiny * two) == 0;
    amp_f32_to_f16_array(x, h, n);
    _mm_setcsr(csr);
    return daz_on;
}

#define MXCSR_FTZ_DAZ 0x8040u   /* bits 15 and 6 */
#define MXCSR_INVALID_MASK 0x80u /* bit 7: clear to trap on invalid */

/* CPUID by hand rather than __builtin_cpu_supports, whose feature names
 * differ between compilers (clang 14 knows neither "f16c" nor "avx512bf16").
 * An instruction set is usable when the CPU has it and the OS saves the
 * registers it uses (XCR0, read with XGETBV once CPUID says OSXSAVE). */
static uint64_t xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static int cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    return osxsave && avx && f16c && (xcr0() & 0x6u) == 0x6u; /* SSE and AVX state */
}

static int cpu_has_avx512bf16(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return 0; /* OSXSAVE */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || a < 1) return 0;   /* subleaf 1 exists */
    int avx512f = (b >> 16) & 1;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
    int bf16 = (a >> 5) & 1;
    /* SSE, AVX, opmask, upper halves of zmm0-15, zmm16-31 */
    return avx512f && bf16 && (xcr0() & 0xe6u) == 0xe6u;
}

/* fp32 subnormal (bits u, exponent field 0) to bf16, rounded to nearest even
 * in double arithmetic rather than on bits as half_format.h does: the value counted
 * in bf16's subnormal unit 2^-133 is mantissa / 2^16, exact in a double, and
 * adding and taking away 2^52 rounds it to an integer (default rounding mode). */
static uint16_t bf16_of_subnormal(uint32_t u)
{
    volatile double q = (double)(u & 0x7fffffu) / 65536.0;
    volatile double r = q + 0x1p52;
    r -= 0x1p52;
    return (uint16_t)(((u >> 16) & 0x8000u) | (uint32_t)r);
}

static double seconds(clock_t t) { return (double)t / CLOCKS_PER_SEC; }

static void fill_block(uint64_t base)
{
    for (uint32_t i = 0; i < BLOCK; ++i) in.u[i] = (uint32_t)(base + i);
}

static void f16_exhaustive(void)
{
    clock_t t_ours = 0, t_ref = 0, t0 = clock();
    unsigned long long bad = 0, bad_round = 0, nan_in = 0, bad_daz = 0, daz_in = 0;
    unsigned long long bad_nan_trap = 0, nan_trap_in = 0;
    int daz_on = 1;
    for (uint64_t base = 0; base < (1ull << 32); base += BLOCK) {
        fill_block(base);
        clock_t a = clock();
        amp_f32_to_f16_array(in.f, ours16, BLOCK);
        clock_t b = clock();
        f16c_f32_to_f16(in.f, ref16, BLOCK);
        clock_t c = clock();
        t_ours += b - a;
        t_ref += c - b;
        for (uint32_t i = 0; i < BLOCK; ++i) {
            nan_in += (in.u[i] & 0x7fffffffu) > 0x7f800000u;
            if (ours16[i] != ref16[i] && bad++ < MAX_EXAMPLES)
                printf("  mismatch: x=0x%08x ours=0x%04x vcvtps2ph=0x%04x\n", (unsigned)in.u[i],
                       ours16[i], ref16[i]);
        }
        /* A block shares its exponent field: below 2^-14, again with FTZ/DAZ;
         * inf and NaN, again trapping invalid operations. */
        if (((base >> 23) & 0xffu) == 0xffu) {
            ours_f16_mxcsr(in.f, daz16, BLOCK, 0, MXCSR_INVALID_MASK);
            nan_trap_in += BLOCK;
            for (uint32_t i = 0; i < BLOCK; ++i) bad_nan_trap += daz16[i] != ref16[i];
        }
        if (((base >> 23) & 0xffu) < 113u) {
            daz_on &= ours_f16_mxcsr(in.f, daz16, BLOCK, MXCSR_FTZ_DAZ, 0);
            daz_in += BLOCK;
            for (uint32_t i = 0; i < BLOCK; ++i)
                if (daz16[i] != ref16[i] && bad_daz++ < MAX_EXAMPLES)
                    printf("  mismatch: x=0x%08x ours with FTZ/DAZ=0x%04x vcvtps2ph=0x%04x\n",
                           (unsigned)in.u[i], daz16[i], ref16[i]);
        }
        /* The round-trip helper against vcvtps2ph then vcvtph2ps. */
        memcpy(ours32.f, in.f, sizeof in.f);
        amp_round_f16_array(ours32.f, BLOCK);
        f16c_f16_to_f32(ref16, ref32.f, BLOCK);
        for (uint32_t i = 0; i < BLOCK; ++i)
            if (ours32.u[i] != ref32.u[i] && bad_round++ < MAX_EXAMPLES)
                printf("  mismatch: x=0x%08x amp_round_f16=0x%08x vcvtps2ph+vcvtph2ps=0x%08x\n",
                       (unsigned)in.u[i], (unsigned)ours32.u[i], (unsigned)ref32.u[i]);
    }
    double total = seconds(clock() - t0);
    CHECK(bad == 0,
          "f32->f16, all 2^32 inputs (%llu NaNs among them) vs F16C vcvtps2ph imm 0: %llu "
          "mismatches",
          nan_in, bad);
    CHECK(daz_on && bad_daz == 0,
          "f32->f16 with FTZ+DAZ set (%s), all %llu inputs below 2^-14 vs vcvtps2ph without: %llu "
          "mismatches",
          daz_on ? "DAZ seen on" : "DAZ did NOT take effect", daz_in, bad_daz);
    CHECK(bad_nan_trap == 0,
          "f32->f16 with invalid-operation traps on, all %llu inf/NaN inputs: no trap, %llu "
          "mismatches",
          nan_trap_in, bad_nan_trap);
    CHECK(bad_round == 0, "amp_round_f16, all 2^32 inputs vs vcvtps2ph+vcvtph2ps: %llu mismatches",
          bad_round);
    printf("  time: %.1f s for the pass; amp_f32_to_f16_array %.2f ns/element, vcvtps2ph %.2f "
           "ns/element\n",
           total, seconds(t_ours) * 1e9 / 4294967296.0, seconds(t_ref) * 1e9 / 4294967296.0);

    static uint16_t h[1u << 16];
    static union { uint32_t u[1u << 16]; float f[1u << 16]; } o, r;
    for (uint32_t i = 0; i < (1u << 16); ++i) h[i] = (uint16_t)i;
    amp_f16_to_f32_array(h, o.f, 1u << 16);
    f16c_f16_to_f32(h, r.f, 1u << 16);
    unsigned long bad_back = 0;
    for (uint32_t i = 0; i < (1u << 16); ++i)
        if (o.u[i] != r.u[i] && bad_back++ < MAX_EXAMPLES)
            printf("  mismatch: h=0x%04x ours=0x%08x vcvtph2ps=0x%08x\n", (unsigned)i,
                   (unsigned)o.u[i], (unsigned)r.u[i]);
    CHECK(bad_back == 0, "f16->f32, all 2^16 inputs vs F16C vcvtph2ps: %lu mismatches", bad_back);
}

static void bf16_exhaustive(void)
{
    clock_t t_ours = 0, t_ref = 0, t0 = clock();
    unsigned long long bad = 0, flushed = 0, same_subnormal = 0, bad_subnormal = 0;
    for (uint64_t base = 0; base < (1ull << 32); base += BLOCK) {
        fill_block(base);
        clock_t a = clock();
        amp_f32_to_bf16_array(in.f, ours16, BLOCK);
        clock_t b = clock();
        avx512_f32_to_bf16(in.f, ref16, BLOCK);
        clock_t c = clock();
        t_ours += b - a;
        t_ref += c - b;
        /* The exponent field is the same for a whole block (2^18 patterns
         * share the top 14 bits), so only the subnormal blocks take the
         * slow path. */
        int subnormal_block = (base & 0x7f800000u) == 0;
        for (uint32_t i = 0; i < BLOCK; ++i) {
            uint32_t u = in.u[i];
            if (subnormal_block && (u & 0x7fffffu) != 0) {
                /* Ours must be the correctly rounded value whatever the
                 * instruction says; where they differ, the instruction's
                 * must be the flushed signed zero. */
                uint16_t want = bf16_of_subnormal(u), zero = (uint16_t)((u >> 16) & 0x8000u);
                if (ours16[i] != want && bad_subnormal++ < MAX_EXAMPLES)
                    printf("  wrong rounding: x=0x%08x ours=0x%04x expected 0x%04x\n",
                           (unsigned)u, ours16[i], want);
                if (ours16[i] == ref16[i])
                    same_subnormal++;
                else if (ref16[i] == zero)
                    flushed++;
                else if (bad++ < MAX_EXAMPLES)
                    printf("  mismatch: x=0x%08x ours=0x%04x vcvtneps2bf16=0x%04x\n", (unsigned)u,
                           ours16[i], ref16[i]);
            } else if (ours16[i] != ref16[i] && bad++ < MAX_EXAMPLES) {
                printf("  mismatch: x=0x%08x ours=0x%04x vcvtneps2bf16=0x%04x\n", (unsigned)u,
                       ours16[i], ref16[i]);
            }
        }
    }
    double total = seconds(clock() - t0);
    CHECK(bad_subnormal == 0,
          "f32->bf16, all 2^24 - 2 fp32 subnormal inputs vs rounding in double arithmetic: %llu "
          "mismatches",
          bad_subnormal);
    CHECK(bad == 0,
          "f32->bf16, all 2^32 inputs vs AVX512-BF16 vcvtneps2bf16: %llu mismatches besides the "
          "deliberate difference below",
          bad);
    /* Every subnormal whose correct rounding is not zero: |x| > 2^-134, that
     * is mantissa 0x8001..0x7fffff, both signs. */
    CHECK(flushed == 2ull * (0x7fffffu - 0x8000u),
          "deliberate difference: %llu fp32 subnormal inputs that vcvtneps2bf16 flushes to a "
          "signed zero and half_format.h rounds to a nonzero bf16 (expected 2*(0x7fffff-0x8000) = "
          "%llu); "
          "%llu subnormal inputs round to zero in both",
          flushed, 2ull * (0x7fffffu - 0x8000u), same_subnormal);
    printf("  time: %.1f s for the pass; amp_f32_to_bf16_array %.2f ns/element, vcvtneps2bf16 %.2f "
           "ns/element\n",
           total, seconds(t_ours) * 1e9 / 4294967296.0, seconds(t_ref) * 1e9 / 4294967296.0);
}
#endif /* CT_X86 */

static void bf16_back_exhaustive(void)
{
    static uint16_t b[1u << 16];
    static float o[1u << 16];
    for (uint32_t i = 0; i < (1u << 16); ++i) b[i] = (uint16_t)i;
    amp_bf16_to_f32_array(b, o, 1u << 16);
    unsigned long bad = 0;
    for (uint32_t i = 0; i < (1u << 16); ++i)
        if (to_bits(o[i]) != i << 16 && bad++ < MAX_EXAMPLES)
            printf("  mismatch: b=0x%04x ours=0x%08x expected 0x%08x\n", (unsigned)i,
                   (unsigned)to_bits(o[i]), (unsigned)(i << 16));
    CHECK(bad == 0, "bf16->f32, all 2^16 inputs vs the definition (bits << 16): %lu mismatches",
          bad);
    /* NaN-ness survives bf16 -> f32 -> bf16 (payloads too: quiet ones are
     * unchanged, signalling ones come back quiet). */
    unsigned long bad_nan = 0;
    for (uint32_t i = 0; i < (1u << 16); ++i)
        if (bf16_is_nan((uint16_t)i))
            bad_nan += amp_f32_to_bf16(amp_bf16_to_f32((uint16_t)i)) != (uint16_t)(i | 0x40u);
    CHECK(bad_nan == 0, "all bf16 NaNs -> f32 -> bf16 come back as the quieted pattern: %lu wrong",
          bad_nan);
}

int main(void)
{
    int references = 0;
#ifdef CT_X86
    /* Default MXCSR (no FTZ/DAZ): a build with -ffast-math would set them at
     * start-up, and vcvtps2ph and the double arithmetic above honour DAZ. */
    _mm_setcsr(0x1f80);
#endif
    setvbuf(stdout, NULL, _IOLBF, 0);
    spot_checks();
    bf16_back_exhaustive();
#ifdef CT_X86
    if (cpu_has_f16c()) {
        references++;
        printf("f32->f16 over all 2^32 inputs; invalid-operation traps are on for the inf/NaN "
               "ones, so a SIGFPE means a NaN reached half_format.h's float addition\n");
        f16_exhaustive();
    } else {
        printf("SKIP: no F16C (or no OS support for AVX state): f16 not compared with hardware\n");
    }
    if (cpu_has_avx512bf16()) {
        references++;
        bf16_exhaustive();
    } else {
        printf("SKIP: no AVX512-BF16 (or no OS support for AVX-512 state): bf16 not compared with "
               "hardware\n");
    }
#else
    printf("SKIP: not x86: no F16C or AVX512-BF16 to compare with\n");
#endif
    int status = check_report();
    if (status == 0 && references == 0) {
        printf("SKIP: no reference instruction on this CPU; only the spot checks ran\n");
        return 77;
    }
    return status;
}

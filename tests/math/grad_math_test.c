/* plugin/math/grad_math.h, the element math of the unscale + non-finite check and
 * of the connected layers' scaled gradient clip that the CPU core and the
 * CUDA kernels share, on hand-derived cases (inf, NaN with
 * payloads, subnormals, the float16/bfloat16 edge values) and against the
 * plain expressions the CPU core used before it was shared (x * k, isfinite)
 * over every float exponent and random significands. Exact comparisons
 * throughout: the multiplication is one IEEE rounding on both sides. */
#include "check.h"
#include "math/grad_math.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static float from_bits(uint32_t u)
{
    return amp_f32_from_bits(u);
}

/* unscale_check(x, k) against "u = x * k; flag = !isfinite(u)". */
static int agrees(float x, float k)
{
    float g = x;
    uint32_t flag = amp_unscale_check(&g, k);
    float ref = x * k;
    return amp_f32_bits(g) == amp_f32_bits(ref) && flag == (uint32_t)!isfinite(ref);
}

int main(void)
{
    const float inf = INFINITY;
    /* Hand-derived classification. */
    struct { uint32_t bits; uint32_t nonfinite; const char *what; } cls[] = {
        {0x00000000u, 0, "+0"}, {0x80000000u, 0, "-0"}, {0x00000001u, 0, "smallest subnormal"},
        {0x007fffffu, 0, "largest subnormal"}, {0x00800000u, 0, "smallest normal"},
        {0x7f7fffffu, 0, "FLT_MAX"}, {0xff7fffffu, 0, "-FLT_MAX"}, {0x7f800000u, 1, "+inf"},
        {0xff800000u, 1, "-inf"}, {0x7fc00000u, 1, "quiet NaN"}, {0x7f800001u, 1, "signalling NaN"},
        {0xffffffffu, 1, "negative NaN, all payload bits"}, {0x477fe000u, 0, "65504 (f16 max)"},
        {0x7f7f0000u, 0, "bf16 max"}, {0x33800000u, 0, "2^-24 (f16 smallest subnormal)"},
    };
    for (size_t i = 0; i < sizeof cls / sizeof cls[0]; ++i)
        CHECK(amp_nonfinite_bits(from_bits(cls[i].bits)) == cls[i].nonfinite,
              "%s (0x%08x): non-finite %u", cls[i].what, cls[i].bits, cls[i].nonfinite);

    /* The unscale factor: 1/S in double, rounded once. */
    CHECK(amp_inv_scale(65536.0f) == 0x1p-16f, "1/65536 is exactly 2^-16");
    CHECK(amp_inv_scale(0x1p-20f) == 0x1p20f, "1/2^-20 is exactly 2^20 (a scale below 1)");
    CHECK(amp_inv_scale(3.0f) == (float)(1.0 / 3.0), "1/3 rounded once from double");
    CHECK(amp_inv_scale(0x1p-149f) == inf, "1/2^-149 overflows float: inf");

    /* Hand-derived unscale cases. */
    struct { float x, k, want; uint32_t flag; const char *what; } un[] = {
        {65504.0f * 65536.0f, 0x1p-16f, 65504.0f, 0, "f16 max scaled by 2^16, unscaled exactly"},
        {inf, 0x1p-16f, inf, 1, "an overflowed (inf) gradient stays inf"},
        {-inf, 0x1p-16f, -inf, 1, "-inf stays -inf"},
        {FLT_MAX, 2.0f, inf, 1, "S = 1/2: FLT_MAX overflows only at the unscale"},
        {0x1p-126f, 0x1p-16f, 0x1p-142f, 0, "normal to subnormal: kept, not flushed"},
        {0x1p-149f, 0.5f, 0.0f, 0, "smallest subnormal halves to 0 (ties to even)"},
        {0x1p-148f, 0.75f, 0x1p-148f, 0, "2^-148 * 0.75 = 1.5 units: ties to even, 2 units"},
        {from_bits(0x7f7f0000u), 2.0f, inf, 1, "bf16 max times 2 overflows"},
        {0x1p-24f * 65536.0f, 0x1p-16f, 0x1p-24f, 0, "f16 smallest subnormal, scaled and back"},
    };
    for (size_t i = 0; i < sizeof un / sizeof un[0]; ++i) {
        float g = un[i].x;
        uint32_t flag = amp_unscale_check(&g, un[i].k);
        CHECK(amp_f32_bits(g) == amp_f32_bits(un[i].want) && flag == un[i].flag,
              "%s: %a * %a = %a (want %a), flag %u (want %u)", un[i].what, un[i].x, un[i].k, g,
              un[i].want, flag, un[i].flag);
    }
    {
        float g = from_bits(0x7fc12345u);
        uint32_t flag = amp_unscale_check(&g, 0x1p-16f);
        CHECK(isnan(g) && flag == 1, "a NaN with payload stays NaN and is flagged");
    }

    /* Against the plain expressions: every exponent (incl. subnormal, inf/NaN),
     * random significands and signs, times power-of-two and other factors. */
    const float factors[] = {0x1p-16f, 0x1p-24f, 1.0f, 2.0f, 0x1p16f, 0x1p-1f, (float)(1.0 / 3.0),
                             0x1p100f, 0x1p-100f};
    srand(7);
    unsigned long cases = 0, bad = 0;
    for (uint32_t e = 0; e < 256; ++e)
        for (int r = 0; r < 2000; ++r) {
            uint32_t m = ((uint32_t)rand() << 8 ^ (uint32_t)rand()) & 0x7fffffu;
            uint32_t bits = (uint32_t)(r & 1) << 31 | e << 23 | m;
            for (size_t f = 0; f < sizeof factors / sizeof factors[0]; ++f, ++cases)
                bad += !agrees(from_bits(bits), factors[f]);
        }
    CHECK(bad == 0, "unscale_check == (x * k, !isfinite) on %lu cases: %lu differ", cases, bad);

    /* The connected layers' gradient clip in scaled units: at a power-of-two
     * S, clip(S*d, S) is S times darknet's clip(d, 1), bit for bit, on every
     * exponent; S = 1 is darknet's own clip; inf and NaN pass through. */
    const float scales[] = {1.0f, 2.0f, 0x1p8f, 0x1p16f, 0x1p24f, 0x1p-4f};
    unsigned long ccases = 0, cbad = 0, dbad = 0;
    for (uint32_t e = 0; e < 255; ++e) /* finite exponents */
        for (int r = 0; r < 400; ++r) {
            uint32_t m = ((uint32_t)rand() << 8 ^ (uint32_t)rand()) & 0x7fffffu;
            float d = from_bits((uint32_t)(r & 1) << 31 | e << 23 | m);
            float darknet = fminf(1.0f, fmaxf(-1.0f, d)); /* constrain_gpu(delta, 1) */
            dbad += amp_f32_bits(amp_clip_scaled(d, 1.0f)) != amp_f32_bits(darknet);
            for (size_t k = 0; k < sizeof scales / sizeof scales[0]; ++k) {
                float sd = d * scales[k];
                if (!isfinite(sd) || (sd != 0 && fabsf(sd) < FLT_MIN)) continue; /* S*d inexact */
                ++ccases;
                cbad += amp_f32_bits(amp_clip_scaled(sd, scales[k])) !=
                        amp_f32_bits(darknet * scales[k]);
            }
        }
    CHECK(dbad == 0, "clip at S = 1 is darknet's constrain_gpu(delta, 1): %lu of %d differ", dbad,
          255 * 400);
    CHECK(cbad == 0, "clip(S*d, S) == S*clip(d, 1) bit for bit on %lu cases (S = 2^0 .. 2^24, "
                     "2^-4): %lu differ", ccases, cbad);
    struct { float x, s, want; const char *what; } clip[] = {
        {3.0f * 65536, 65536, 65536, "3 in true units at S = 2^16: clipped to 1 in true units"},
        {-0.25f * 65536, 65536, -0.25f * 65536, "-0.25 in true units: unchanged"},
        {2.0f, 65536, 2.0f, "2/S (tiny true gradient) untouched, not clipped at 1"},
        {inf, 65536, inf, "inf passes through (an overflow for the step's check)"},
        {-inf, 1, -inf, "-inf passes through at S = 1 too"},
    };
    for (size_t i = 0; i < sizeof clip / sizeof clip[0]; ++i) {
        float got = amp_clip_scaled(clip[i].x, clip[i].s);
        CHECK(amp_f32_bits(got) == amp_f32_bits(clip[i].want), "%s: clip(%g, %g) = %g (want %g)",
              clip[i].what, clip[i].x, clip[i].s, got, clip[i].want);
    }
    CHECK(isnan(amp_clip_scaled(from_bits(0x7fc12345u), 65536)),
          "NaN passes through (darknet's clip turns it into -1)");

    /* The overflow scan (a half layer's forward overflow, host and device):
     * the inf/NaN count and the largest finite magnitude, against isfinite
     * and fabsf over random arrays with planted infs and NaNs, also when the
     * array is split in parts scanned apart and merged (the kernel's threads
     * and blocks), in any order. */
    const float edge[] = {0.0f, -0.0f, 65504.0f, -65520.0f, FLT_MAX, -FLT_MAX, 0x1p-149f,
                          inf, -inf, from_bits(0x7fc00000u), from_bits(0xff800001u)};
    amp_overflow_scan es = {0, 0.0f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; ++i) amp_overflow_add(&es, edge[i]);
    CHECK(es.nonfinite == 4 && es.max_finite == FLT_MAX,
          "edge values: %llu non-finite (want 4: inf, -inf, 2 NaNs), largest finite %g (want "
          "FLT_MAX, from -FLT_MAX too)", es.nonfinite, es.max_finite);
    amp_overflow_scan zs = {0, 0.0f};
    amp_overflow_add(&zs, -0.0f);
    CHECK(zs.nonfinite == 0 && amp_f32_bits(zs.max_finite) == 0,
          "-0 alone: largest finite magnitude +0 (bits 0x%08x)", amp_f32_bits(zs.max_finite));
    unsigned long sbad = 0, mbad = 0;
    for (int r = 0; r < 200; ++r) {
        float x[1000];
        unsigned long long want_n = 0;
        float want_m = 0.0f;
        const int n = 1 + rand() % 1000;
        for (int i = 0; i < n; ++i) {
            const uint32_t bits = (uint32_t)rand() << 16 ^ (uint32_t)rand();
            x[i] = rand() % 50 == 0 ? (rand() & 1 ? inf : from_bits(0x7fc00000u | (bits & 0xffu)))
                                    : from_bits(bits & 0xff7fffffu); /* finite */
            if (!isfinite(x[i])) want_n++;
            else if (fabsf(x[i]) > want_m) want_m = fabsf(x[i]);
        }
        amp_overflow_scan whole = {0, 0.0f}, a = {0, 0.0f}, b = {0, 0.0f};
        const int cut = rand() % (n + 1);
        for (int i = 0; i < n; ++i) amp_overflow_add(&whole, x[i]);
        for (int i = 0; i < cut; ++i) amp_overflow_add(&a, x[i]);
        for (int i = cut; i < n; ++i) amp_overflow_add(&b, x[i]);
        amp_overflow_merge(&b, &a); /* the later part first: order does not matter */
        sbad += whole.nonfinite != want_n || amp_f32_bits(whole.max_finite) != amp_f32_bits(want_m);
        mbad += b.nonfinite != want_n || amp_f32_bits(b.max_finite) != amp_f32_bits(want_m);
    }
    CHECK(sbad == 0, "overflow scan of 200 random arrays against isfinite/fabsf: %lu differ", sbad);
    CHECK(mbad == 0, "the same split in two, scanned apart and merged: %lu differ", mbad);
    return check_report();
}

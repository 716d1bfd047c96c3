/* The activation plan's conversions (plugin/cpu/round.c: amp_cpu_to_half,
 * amp_cpu_from_half, amp_cpu_add_half; F16C, AVX2 and the portable loops;
 * threaded) against half_format.h's scalar functions, bit for bit: 2^22
 * float32 bit patterns spread over every exponent (NaNs, infinities,
 * subnormals, the float16 overflow and underflow boundaries, bfloat16's
 * ties), every 16-bit pattern for the widening, and sums of the two, in
 * arrays whose lengths are not multiples of 8 and large enough for the
 * threaded path; both dtypes, every variant this CPU runs (the widest
 * capped by DARKNET_AMP_MAX_CPU_ISA, then each narrower one).
 *
 * And the same three between darknet's NCHW float32 arrays and the plan's
 * NHWC half storage (amp_cpu_to_half_nhwc, amp_cpu_from_half_nhwc,
 * amp_cpu_add_half_nhwc): each element against half_format.h's at the
 * transposed index (NCHW (b, c, p) <-> NHWC (b, p, c)), bit for bit, both
 * dtypes, on shapes whose channels and positions are not multiples of the
 * 16-position tiles and one above the threaded path's 65536 elements; the
 * element after the array is left alone.
 *
 *   half_storage_test
 */
#include "cpu.h"
#include "math/half_format.h"
#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define N ((size_t)1 << 22)
#define PART ((size_t)100003) /* odd: tails of 1..7; above the threaded path's 65536 */

static uint16_t to_half(amp_dtype dt, float x)
{
    return dt == AMP_DTYPE_BFLOAT16 ? amp_f32_to_bf16(x) : amp_f32_to_f16(x);
}

static float from_half(amp_dtype dt, uint16_t h)
{
    return dt == AMP_DTYPE_BFLOAT16 ? amp_bf16_to_f32(h) : amp_f16_to_f32(h);
}

/* Patterns a half value's widening is compared by: NaNs by being NaN. */
static int same_f32(float a, float b)
{
    return (a != a && b != b) || !memcmp(&a, &b, sizeof a);
}

static int same_half(uint16_t a, uint16_t b, amp_dtype dt)
{
    return a == b || (from_half(dt, a) != from_half(dt, a) && from_half(dt, b) != from_half(dt, b));
}

static const char *const op_name[] = {"to half", "from half", "add into half"};

static void check_variant(amp_cpu_isa isa, amp_dtype dt, const float *src, const uint16_t *hsrc,
                          float *f, uint16_t *h)
{
    for (int op = 0; op < 3; ++op) {
        if (op == 1) memset(f, 0, N * sizeof(float));
        else memcpy(f, src, N * sizeof(float));
        memcpy(h, hsrc, N * sizeof(uint16_t));
        amp_cpu_isa ran = AMP_ISA_SSE2;
        for (size_t at = 0; at < N; at += PART)
            ran = amp_cpu_convert_at(isa, op, dt, f + at, h + at, N - at < PART ? N - at : PART);
        size_t differ = 0, first = N;
        for (size_t i = 0; i < N; ++i) {
            int ok;
            if (op == 0) ok = same_half(h[i], to_half(dt, src[i]), dt);
            else if (op == 1) ok = same_f32(f[i], from_half(dt, hsrc[i]));
            else ok = same_half(h[i], to_half(dt, from_half(dt, hsrc[i]) + src[i]), dt);
            if (!ok && first == N) first = i;
            differ += !ok;
        }
        CHECK(differ == 0, "%s %s, %s variant: %zu of %zu elements differ from half_format.h's "
                           "(first at %zu)",
              amp_dtype_name(dt), op_name[op], amp_cpu_isa_name(ran), differ, N, first);
    }
}

/* The NHWC forms on a batch x c x hw tensor: src (NCHW float32 patterns) and
 * hsrc (16-bit patterns, read as NHWC) as in check_variant, f and h scratch
 * of n + 1 elements, the last a sentinel that must survive. */
static void check_nhwc(amp_dtype dt, int batch, int c, int hw, const float *src,
                       const uint16_t *hsrc, float *f, uint16_t *h)
{
    const size_t n = (size_t)batch * c * hw;
    const uint16_t hguard = 0x5a5a;
    const float fguard = 1234.5f;
    for (int op = 0; op < 3; ++op) {
        for (size_t i = 0; i < n; ++i) f[i] = op == 1 ? 0.f : src[i];
        memcpy(h, hsrc, n * sizeof(uint16_t));
        h[n] = hguard, f[n] = fguard;
        if (op == 0) amp_cpu_to_half_nhwc(dt, f, h, batch, c, hw);
        else if (op == 1) amp_cpu_from_half_nhwc(dt, h, f, batch, c, hw);
        else amp_cpu_add_half_nhwc(dt, h, f, batch, c, hw);
        size_t differ = 0, first = n;
        for (int b = 0; b < batch; ++b)
            for (int ch = 0; ch < c; ++ch)
                for (int p = 0; p < hw; ++p) {
                    const size_t nchw = ((size_t)b * c + ch) * hw + p;
                    const size_t nhwc = ((size_t)b * hw + p) * c + ch;
                    int ok;
                    if (op == 0) ok = same_half(h[nhwc], to_half(dt, src[nchw]), dt);
                    else if (op == 1) ok = same_f32(f[nchw], from_half(dt, hsrc[nhwc]));
                    else ok = same_half(h[nhwc],
                                        to_half(dt, from_half(dt, hsrc[nhwc]) + src[nchw]), dt);
                    if (!ok && first == n) first = nchw;
                    differ += !ok;
                }
        const int guard_ok = h[n] == hguard && same_f32(f[n], fguard);
        char where[48] = "";
        if (differ) snprintf(where, sizeof where, " (first at NCHW %zu)", first);
        CHECK(differ == 0 && guard_ok,
              "%s %s NHWC, batch %d x %d channels x %d positions: %zu of %zu elements differ "
              "from half_format.h's at the transposed index%s; the element after the array %s",
              amp_dtype_name(dt), op_name[op], batch, c, hw, differ, n, where,
              guard_ok ? "untouched" : "overwritten");
    }
}

int main(void)
{
    float *src = malloc(N * sizeof(float)), *f = malloc(N * sizeof(float));
    uint16_t *hsrc = malloc(N * sizeof(uint16_t)), *h = malloc(N * sizeof(uint16_t));
    if (!src || !f || !hsrc || !h) {
        printf("FAIL: out of memory\n");
        return 1;
    }
    /* float32 patterns: every exponent, random significands, with the
     * boundaries' neighbours; 16-bit patterns: each of the 65536 in turn */
    uint32_t state = 12345;
    static const float edges[] = {65504.f, 65519.99f, 65520.f, 6.1035156e-05f, 5.9604645e-08f,
                                  2.9802322e-08f, 0.f, -0.f, 1.f, 1.00390625f, 1.0078125f};
    for (size_t i = 0; i < N; ++i) {
        state = state * 1664525u + 1013904223u;
        uint32_t u = state;
        if (i % 97 == 0) {
            float e = edges[(i / 97) % (sizeof edges / sizeof edges[0])];
            memcpy(&u, &e, sizeof u);
            u += (uint32_t)(i % 3) - 1u; /* and its neighbours */
        }
        memcpy(&src[i], &u, sizeof u);
        hsrc[i] = (uint16_t)i;
    }
    const amp_dtype dts[] = {AMP_DTYPE_FLOAT16, AMP_DTYPE_BFLOAT16};
    for (int t = 0; t < 2; ++t)
        for (int isa = (int)amp_cpu_isa_used(); isa >= (int)AMP_ISA_SSE2; --isa)
            check_variant((amp_cpu_isa)isa, dts[t], src, hsrc, f, h);
    /* NHWC: 16-position tiles with a tail (7, 169, 50), channel counts off
     * any vector width (3, 100), 262144 elements for the threads. The 16-bit
     * patterns spread (x 40503, odd: a permutation of the 65536) so that the
     * small shapes see more than the first few. */
    static const int shapes[][3] = {{2, 3, 7}, {3, 16, 169}, {2, 100, 50}, {4, 64, 1024}};
    uint16_t *hspread = malloc(N * sizeof(uint16_t));
    if (!hspread) {
        printf("FAIL: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < N; ++i) hspread[i] = (uint16_t)(i * 40503u + 12345u);
    for (int t = 0; t < 2; ++t)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
            check_nhwc(dts[t], shapes[s][0], shapes[s][1], shapes[s][2], src, hspread, f, h);
    free(hspread);
    free(src), free(f), free(hsrc), free(h);
    return check_report();
}

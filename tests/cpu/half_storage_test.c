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
    free(src), free(f), free(hsrc), free(h);
    return check_report();
}

/* plugin/cpu/round.c (F16C, AVX2 and the portable loops; threaded)
 * against half_format.h's amp_round_f16 and amp_round_bf16, bit for bit, and its
 * flush counts against a plain count: 2^26 float32 bit patterns spread over
 * every exponent (NaNs, infinities, subnormals, the float16 overflow and
 * underflow boundaries and bfloat16's ties included), in arrays whose
 * lengths are not multiples of 8 and large enough for the threaded path;
 * for both dtypes, with every variant this CPU runs (the widest capped by
 * DARKNET_AMP_MAX_CPU_ISA, then each narrower one). Prints each variant's
 * time per element (one thread's share; not checked).
 *
 *   round_variants_test
 */
#include "core.h" /* amp_clock */
#include "cpu.h"
#include "math/half_format.h"
#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define N ((size_t)1 << 26)
#define PART ((size_t)1000003) /* odd: tails of 1..7 */

/* Rounds a copy of src at isa in PART-sized calls; checks it against ref. */
static void check_variant(amp_cpu_isa isa, amp_dtype dt, const float *src, const float *ref,
                          unsigned long long nz_ref, unsigned long long fl_ref, float *x)
{
    memcpy(x, src, N * sizeof(float));
    unsigned long long nz = 0, fl = 0;
    amp_cpu_isa ran = AMP_ISA_SSE2;
    const double t0 = amp_clock();
    for (size_t at = 0; at < N; at += PART)
        ran = amp_cpu_round_half_at(isa, dt, x + at, N - at < PART ? N - at : PART, &nz, &fl);
    const double dt_s = amp_clock() - t0;
    size_t differ = 0, first = N;
    for (size_t i = 0; i < N; ++i)
        if (memcmp(&x[i], &ref[i], sizeof(float))) {
            if (first == N) first = i;
            ++differ;
        }
    const char *name = amp_dtype_name(dt);
    const char *code = ran == AMP_ISA_AVX2 ? "AVX2" : ran == AMP_ISA_AVX ? "F16C" : "portable";
    CHECK(differ == 0, "%s, %s code (asked %s): %zu float32 patterns rounded in place, %zu "
          "differ from half_format.h in their bits", name, code, amp_cpu_isa_name(isa), N, differ);
    if (differ) {
        uint32_t a, b, s;
        memcpy(&a, &x[first], 4), memcpy(&b, &ref[first], 4), memcpy(&s, &src[first], 4);
        printf("  first at %zu: 0x%08x gave 0x%08x, half_format.h 0x%08x\n", first, s, a, b);
    }
    CHECK(nz == nz_ref && fl == fl_ref,
          "%s, %s code: flush counts %llu nonzero (expected %llu), %llu flushed to zero "
          "(expected %llu)", name, code, nz, nz_ref, fl, fl_ref);
    printf("  %s, %s code: %.2f ns per element (%zu elements in %.3f s, counting, threaded)\n",
           name, code, 1e9 * dt_s / N, N, dt_s);
}

int main(void)
{
    float *src = malloc(N * sizeof(float)), *ref = malloc(N * sizeof(float));
    float *x = malloc(N * sizeof(float));
    if (!src || !ref || !x) return 1;
    for (size_t i = 0; i < N; ++i) {
        /* every 64th pattern, jittered; every 8th a tie or a neighbour of
         * one for bfloat16 (low 16 bits 0x7fff, 0x8000, 0x8001) */
        uint32_t bits = (uint32_t)(i * 64u + (i * 2654435761u >> 26));
        if (i % 8 == 3) bits = (bits & 0xffff0000u) | (0x7fffu + (uint32_t)(i / 8 % 3));
        memcpy(&src[i], &bits, sizeof bits);
    }
    printf("this CPU runs the plugin's %s variants; in use: %s (DARKNET_AMP_MAX_CPU_ISA)\n",
           amp_cpu_isa_name(amp_cpu_isa_detected()), amp_cpu_isa_name(amp_cpu_isa_used()));
    const amp_dtype dts[2] = {AMP_DTYPE_FLOAT16, AMP_DTYPE_BFLOAT16};
    for (int k = 0; k < 2; ++k) {
        unsigned long long nz_ref = 0, fl_ref = 0;
        for (size_t i = 0; i < N; ++i) {
            ref[i] = dts[k] == AMP_DTYPE_BFLOAT16 ? amp_round_bf16(src[i]) : amp_round_f16(src[i]);
            nz_ref += src[i] != 0.0f;
            fl_ref += src[i] != 0.0f && ref[i] == 0.0f;
        }
        for (int isa = (int)amp_cpu_isa_used(); isa >= 0; --isa) {
            /* each variant once: the widest one asked for, then the narrower ones */
            const amp_cpu_isa ran =
                amp_cpu_round_half_at((amp_cpu_isa)isa, dts[k], NULL, 0, NULL, NULL);
            if (isa < (int)amp_cpu_isa_used() &&
                amp_cpu_round_half_at((amp_cpu_isa)isa + 1, dts[k], NULL, 0, NULL, NULL) == ran)
                continue;
            check_variant((amp_cpu_isa)isa, dts[k], src, ref, nz_ref, fl_ref, x);
        }
    }
    free(src);
    free(ref);
    free(x);
    return check_report();
}

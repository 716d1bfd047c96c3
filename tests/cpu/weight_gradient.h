/* What the tests of the half paths check of a weight gradient
 * (rounding_points_test.c, onednn_f16_conv_test.c; wg_half_values also
 * tests/parity/backend_parity.c, on every backend). A half layer's weight
 * gradient never passes through half: it is summed in float32 over the
 * half-rounded operands and added to weight_updates (the momentum history)
 * unrounded. Two measures, each of which a weight gradient rounded to half
 * fails (the tests plant one to show it):
 * - wg_half_values: of its nonzero elements, how many are half values. A
 *   float32 sum is one only where its 13 (float16) or 16 (bfloat16) low
 *   fraction bits happen to be zero; measured at most 0.26% of a tensor in
 *   the rounding-point tests and 3.1% (1 of 32 elements) in
 *   integration.half_bounds*, against 100% for a rounded gradient: the bound,
 *   WG_MAX_HALF_VALUES, is 25%.
 * - wg_rel_l2: |got - ref| / |ref| (2-norms) against the emulation. Both sum
 *   the same exact products (a product of two half values is exact in
 *   float32) in other orders, so they differ by float32 summation noise:
 *   measured at most 3.1e-7 (linear*.cfg, 2 threads, AVX512-BF16 and
 *   capped at AVX2). Rounding to half moves each element by up to half a
 *   half ulp: measured 2.0e-4 to 2.3e-4 (float16), 1.7e-3 to 1.9e-3
 *   (bfloat16). WG_MAX_REL_L2 = 2^-16 (1.5e-5) sits 49 times above the
 *   noise and 13 times below a float16 rounding.
 */
#ifndef AMP_TESTS_CPU_WEIGHT_GRADIENT_H
#define AMP_TESTS_CPU_WEIGHT_GRADIENT_H

#include "core.h"
#include "math/half_format.h"

#include <math.h>
#include <stddef.h>

#define WG_MAX_HALF_VALUES 0.25
#define WG_MAX_REL_L2 0x1p-16

/* The nonzero elements of x (in *nonzero), and how many of them are values
 * of dtype. */
static inline size_t wg_half_values(amp_dtype dtype, const float *x, size_t n, size_t *nonzero)
{
    size_t half = 0;
    *nonzero = 0;
    for (size_t i = 0; i < n; ++i) {
        if (x[i] == 0.0f) continue;
        ++*nonzero;
        const float r = dtype == AMP_DTYPE_BFLOAT16 ? amp_round_bf16(x[i]) : amp_round_f16(x[i]);
        half += r == x[i];
    }
    return half;
}

/* |got - ref| / |ref| in 2-norms (0 where both are 0; NaN stays NaN). */
static inline double wg_rel_l2(const float *ref, const float *got, size_t n)
{
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < n; ++i) {
        const double d = (double)got[i] - ref[i];
        d2 += d * d;
        r2 += (double)ref[i] * ref[i];
    }
    return d2 == 0 ? 0 : sqrt(d2 / (r2 > 0 ? r2 : 1e-300));
}

/* Rounds x to dtype in place: a weight gradient as a path that rounded it
 * would leave it (planted, to show the measures catch it). */
static inline void wg_round(amp_dtype dtype, float *x, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        x[i] = dtype == AMP_DTYPE_BFLOAT16 ? amp_round_bf16(x[i]) : amp_round_f16(x[i]);
}

#endif

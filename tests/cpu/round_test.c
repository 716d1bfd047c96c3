/* plugin/cpu/round.c (F16C, threaded) against half.h's amp_round_f16, bit for
 * bit, and its flush counts against a plain count: 2^26 float32 bit patterns
 * spread over every exponent (NaNs, infinities, subnormals and the float16
 * overflow and underflow boundaries included), in arrays whose lengths are
 * not multiples of 8 and large enough for the threaded path.
 *
 *   round_test
 */
#include "cpu.h"
#include "half.h"
#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    const size_t n = (size_t)1 << 26, part = 1000003; /* odd: tails of 1..7 */
    float *x = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
    if (!x || !ref) return 1;
    for (size_t i = 0; i < n; ++i) {
        const uint32_t bits = (uint32_t)(i * 64u + (i * 2654435761u >> 26)); /* every 64th, jittered */
        memcpy(&x[i], &bits, sizeof bits);
    }
    unsigned long long nz_ref = 0, fl_ref = 0, nz = 0, fl = 0;
    for (size_t i = 0; i < n; ++i) {
        ref[i] = amp_round_f16(x[i]);
        nz_ref += x[i] != 0.0f;
        fl_ref += x[i] != 0.0f && ref[i] == 0.0f;
    }
    for (size_t at = 0; at < n; at += part)
        amp_cpu_round_f16(x + at, n - at < part ? n - at : part, &nz, &fl);
    size_t differ = 0, first = n;
    for (size_t i = 0; i < n; ++i)
        if (memcmp(&x[i], &ref[i], sizeof(float))) {
            if (first == n) first = i;
            ++differ;
        }
    CHECK(differ == 0, "%zu float32 patterns rounded in place (%s): %zu differ from "
          "amp_round_f16 in their bits%s", n,
          amp_cpu_round_f16_native() ? "F16C" : "portable code, no F16C here", differ,
          differ ? " (the first shown by its index)" : "");
    if (differ) printf("  first at %zu\n", first);
    CHECK(nz == nz_ref && fl == fl_ref,
          "flush counts: %llu nonzero (expected %llu), %llu flushed to zero (expected %llu)", nz,
          nz_ref, fl, fl_ref);
    free(x);
    free(ref);
    return check_report();
}

/* Division by a divisor fixed for a whole kernel launch, as a multiply-high
 * and a shift, for the index math of the CUDA kernels on the activation
 * plan's NHWC tensors (cuda/movement.cu, cuda/wgrad.cu). A GPU has no
 * integer divider: a 32-bit division is a sequence of about twenty
 * instructions, a 64-bit one a call of several dozen, and a kernel that
 * splits each flat index into image, row, column and channel spends more on
 * that than on moving its two bytes. The divider is made once on the host
 * and passed by value; the kernels and the host tests (unit.fastdiv) run the
 * same code.
 *
 * The method is Granlund and Montgomery's ("Division by invariant integers
 * using multiplication", 1994) in its round-up form: for d >= 1 let
 * s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d) + 1, which is below
 * 2^32; then for every n < 2^31
 *     n / d = (mulhi(n, m) + n) >> s,
 * where mulhi is the high 32 bits of the 64-bit product. mulhi(n, m) <= n,
 * so the sum stays below 2^32. Numerators must be below 2^31: the kernels
 * check their tensors' sizes against AMP_FASTDIV_MAX before taking this
 * path (darknet's int indexes have the same bound).
 */
#ifndef AMP_MATH_FASTDIV_H
#define AMP_MATH_FASTDIV_H

#include "hd.h"

#include <stdint.h>

/* Numerators must be below this. */
#define AMP_FASTDIV_MAX 2147483648u

typedef struct amp_divider {
    uint32_t d, m, s;
} amp_divider;

/* The divider for d (1 <= d < 2^31). */
AMP_HD static inline amp_divider amp_divider_of(uint32_t d)
{
    uint32_t s = 0;
    while (s < 32 && (1ull << s) < d) ++s;
    const uint64_t m = ((1ull << 32) * ((1ull << s) - d)) / d + 1;
    amp_divider v = {d, (uint32_t)m, s};
    return v;
}

AMP_HD static inline uint32_t amp_mulhi(uint32_t a, uint32_t b)
{
#ifdef __CUDA_ARCH__
    return __umulhi(a, b);
#else
    return (uint32_t)(((uint64_t)a * b) >> 32);
#endif
}

/* n / v.d for n < AMP_FASTDIV_MAX. */
AMP_HD static inline uint32_t amp_div(amp_divider v, uint32_t n)
{
    return (amp_mulhi(n, v.m) + n) >> v.s;
}

/* n / v.d, and n % v.d into *r. */
AMP_HD static inline uint32_t amp_divmod(amp_divider v, uint32_t n, uint32_t *r)
{
    const uint32_t q = amp_div(v, n);
    *r = n - q * v.d;
    return q;
}

#endif

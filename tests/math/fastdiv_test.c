/* plugin/math/fastdiv.h, the division by a launch's fixed divisor that the
 * CUDA kernels' index math uses, against C's / and %: every numerator below
 * 2^31 for divisors of the three kinds whose rounding error is largest or
 * which the kernels use most (7, 2^16 + 1, 416 x 416); every divisor up to
 * 2^17 and every power of two and its neighbours up to 2^30, at the
 * numerators where a quotient steps (k d - 1, k d, k d + 1) near 0 and near
 * 2^31, and at random ones; random divisors up to 2^31 - 1 the same way.
 * And math/nhwc.h's split of a flat NHWC index into image, row, column and
 * channel with them, on every index of tensors of odd shapes and at the
 * largest flat indexes below 2^31. Exact comparisons: a quotient is right
 * or it is not. */
#include "check.h"
#include "math/fastdiv.h"
#include "math/nhwc.h"

#include <stdint.h>
#include <stdio.h>

static uint64_t state = 0x9e3779b97f4a7c15ull;

static uint32_t next(void) /* xorshift64* */
{
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    return (uint32_t)((state * 0x2545f4914f6cdd1dull) >> 32);
}

/* Wrong quotients or remainders of d at n, counted; the first one said. */
static unsigned long wrong, compared;
static void one(amp_divider v, uint32_t n)
{
    if (n >= AMP_FASTDIV_MAX) return;
    uint32_t r;
    const uint32_t q = amp_divmod(v, n, &r);
    ++compared;
    if (q == n / v.d && r == n % v.d) return;
    if (!wrong++)
        printf("first wrong: %u / %u: %u rem %u, C says %u rem %u\n", n, v.d, q, r, n / v.d,
               n % v.d);
}

/* Where the quotient steps, near 0 and near 2^31, and random numerators. */
static void around(uint32_t d, int randoms)
{
    const amp_divider v = amp_divider_of(d);
    const uint32_t top = (AMP_FASTDIV_MAX - 1) / d;
    for (uint32_t k = 0; k < 4; ++k) {
        const uint32_t lo = k * d, hi = (top - k) * d; /* top - k >= 0 whenever k <= top */
        for (int e = -1; e <= 1; ++e) {
            one(v, lo + (uint32_t)e);
            if (k <= top) one(v, hi + (uint32_t)e);
        }
    }
    one(v, AMP_FASTDIV_MAX - 1);
    for (int i = 0; i < randoms; ++i) one(v, next() >> 1);
}

int main(void)
{
    const uint32_t whole[] = {7, 65537, 416 * 416};
    for (int i = 0; i < 3; ++i) {
        const amp_divider v = amp_divider_of(whole[i]);
        const unsigned long before = wrong;
        for (uint32_t n = 0; n < AMP_FASTDIV_MAX; ++n) {
            uint32_t r;
            const uint32_t q = amp_divmod(v, n, &r);
            if (q != n / whole[i] || r != n % whole[i]) ++wrong;
        }
        CHECK(wrong == before, "every numerator below 2^31 by %u: %lu wrong", whole[i],
              wrong - before);
    }
    for (uint32_t d = 1; d <= 1u << 17; ++d) around(d, 16);
    for (int s = 1; s <= 30; ++s)
        for (int e = -1; e <= 1; ++e) around((1u << s) + (uint32_t)e, 256);
    for (int i = 0; i < 100000; ++i) {
        const uint32_t d = next() >> 1;
        if (d) around(d, 16);
    }
    CHECK(wrong == 0, "%lu divisions at quotient steps and random numerators: %lu wrong", compared,
          wrong);
    /* (b, y, x, ch) of a flat NHWC index, against / and % */
    const int shapes[][4] = {{3, 5, 7, 3},     {2, 13, 13, 255}, {1, 1, 1, 1},
                             {4, 26, 26, 129}, {5, 9, 31, 17},   {64, 416, 416, 1}};
    for (int k = 0; k < 6; ++k) {
        const int nb = shapes[k][0], h = shapes[k][1], w = shapes[k][2], c = shapes[k][3];
        const amp_nhwc_divs v = amp_nhwc_divs_of(c, w, h);
        unsigned long bad = 0;
        const uint32_t n = (uint32_t)nb * h * w * c;
        for (uint32_t i = 0; i < n; ++i) {
            uint32_t b, y, x, ch;
            amp_nhwc_split(v, i, &b, &y, &x, &ch);
            bad += b != i / ((uint32_t)c * w * h) || y != i / ((uint32_t)c * w) % h ||
                   x != i / (uint32_t)c % w || ch != i % c ||
                   (long)amp_nhwc_at(b, ch, (long)y * w + x, c, (long)h * w) != (long)i;
        }
        CHECK(bad == 0, "every flat index of %d images of %dx%dx%d split: %lu wrong", nb, h, w, c,
              bad);
    }
    {
        /* the largest: 2^31 - 1 values of 1024 channels by 7 x 7 positions */
        const amp_nhwc_divs v = amp_nhwc_divs_of(1024, 7, 7);
        unsigned long bad = 0;
        for (uint32_t i = AMP_FASTDIV_MAX - 100000; i < AMP_FASTDIV_MAX; ++i) {
            uint32_t b, y, x, ch;
            amp_nhwc_split(v, i, &b, &y, &x, &ch);
            bad += b != i / (1024u * 49) || y != i / (1024u * 7) % 7 || x != i / 1024 % 7 ||
                   ch != i % 1024;
        }
        CHECK(bad == 0, "the last 100000 flat indexes below 2^31 of 1024 x 7 x 7 images split: "
              "%lu wrong", bad);
    }
    const amp_divider one_ = amp_divider_of(1), big = amp_divider_of(AMP_FASTDIV_MAX - 1);
    CHECK(amp_div(one_, AMP_FASTDIV_MAX - 1) == AMP_FASTDIV_MAX - 1 &&
              amp_div(big, AMP_FASTDIV_MAX - 1) == 1 && amp_div(big, AMP_FASTDIV_MAX - 2) == 0,
          "the extremes: (2^31 - 1) / 1, (2^31 - 1) / (2^31 - 1), (2^31 - 2) / (2^31 - 1)");
    return check_report();
}

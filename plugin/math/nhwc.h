/* The activation plan's NHWC half tensors against darknet's NCHW float32
 * arrays: where an element lives in each, for the host and (AMP_HD) the
 * device. A tensor is batch images of c channels by hw positions (out_h x
 * out_w); the CPU's conversions and data movement (round.c, movement.c) and
 * the GPU's (cuda/nhwc.cu) index with these. */
#ifndef AMP_MATH_NHWC_H
#define AMP_MATH_NHWC_H

#include "fastdiv.h"
#include "hd.h"

/* Image b, channel ch, position p: NHWC, a position's channels contiguous. */
AMP_HD static inline long amp_nhwc_at(long b, long ch, long p, long c, long hw)
{
    return (b * hw + p) * c + ch;
}

/* The same element in darknet's NCHW: a channel's positions contiguous. */
AMP_HD static inline long amp_nchw_at(long b, long ch, long p, long c, long hw)
{
    return (b * c + ch) * hw + p;
}

/* darknet's flat NCHW index f as the NHWC index of the same element. */
AMP_HD static inline long amp_nhwc_of_nchw(long f, long c, long hw)
{
    const long per = c * hw, b = f / per, r = f % per;
    return amp_nhwc_at(b, r / hw, r % hw, c, hw);
}

/* The dividers (fastdiv.h) that split a flat NHWC index of a tensor of c
 * channels, w columns and h rows, made once per kernel launch... */
typedef struct amp_nhwc_divs {
    amp_divider c, w, h;
} amp_nhwc_divs;

AMP_HD static inline amp_nhwc_divs amp_nhwc_divs_of(int c, int w, int h)
{
    amp_nhwc_divs v = {amp_divider_of((uint32_t)c), amp_divider_of((uint32_t)w),
                       amp_divider_of((uint32_t)h)};
    return v;
}

/* ...into image b, row y, column x and channel ch (i < 2^31). */
AMP_HD static inline void amp_nhwc_split(amp_nhwc_divs v, uint32_t i, uint32_t *b, uint32_t *y,
                                         uint32_t *x, uint32_t *ch)
{
    const uint32_t pos = amp_divmod(v.c, i, ch), row = amp_divmod(v.w, pos, x);
    *b = amp_divmod(v.h, row, y);
}

#endif

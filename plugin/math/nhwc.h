/* The activation plan's NHWC half tensors against darknet's NCHW float32
 * arrays: where an element lives in each, for the host and (AMP_HD) the
 * device. A tensor is batch images of c channels by hw positions (out_h x
 * out_w); the CPU's conversions and data movement (round.c, movement.c) and
 * the GPU's (cuda/nhwc.cu) index with these. */
#ifndef AMP_MATH_NHWC_H
#define AMP_MATH_NHWC_H

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

#endif

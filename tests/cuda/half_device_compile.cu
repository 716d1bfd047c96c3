/* Compile-only check that half_format.h builds as CUDA device code: every
 * conversion called from a kernel, with scale_rule.h included too (both
 * headers define AMP_HD, each guarded). The host side of the same functions
 * is what tests/math/half_format_test.c checks against the CPU's instructions. */
#include "math/scale_rule.h"
#include "math/half_format.h"

__global__ void amp_half_device_compile(const float *x, uint16_t *h, uint16_t *b, float *y,
                                        int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    h[i] = amp_f32_to_f16(x[i]);
    b[i] = amp_f32_to_bf16(x[i]);
    y[i] = amp_f16_to_f32(h[i]) + amp_bf16_to_f32(b[i]) + amp_round_f16(x[i]) +
           amp_round_bf16(x[i]);
}

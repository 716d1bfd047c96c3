/* The fused multi-tensor unscale + non-finite check: one launch over every
 * parameter gradient of a network, each element multiplied by the factor
 * (grad_math.h, the CPU core's own expression) and tested; a block that saw
 * inf or NaN raises the network's device flag with atomicMax(1 + span), so the
 * flag also names the last tensor in table order that overflowed, which is
 * the one the CPU core reports (it scans from the output layer back). The
 * flag is never cleared here: the caller zeroes it before the step.
 */
#include "amp_cuda.h"
#include "cuda_check.h"
#include "math/grad_math.h"

static __global__ void unscale_check_kernel(const amp_span *spans, const amp_chunk *chunks,
                                            const float *factor, unsigned int *found)
{
    const amp_chunk c = chunks[blockIdx.x];
    const amp_span s = spans[c.span];
    const float k = *factor;
    size_t end = s.n - c.start < AMP_MT_CHUNK ? s.n : (size_t)c.start + AMP_MT_CHUNK;
    uint32_t bad = 0;
    for (size_t i = c.start + threadIdx.x; i < end; i += blockDim.x)
        bad |= amp_unscale_check(&s.x[i], k);
    if (found) { /* uniform across the block */
        if (__syncthreads_or((int)bad) && threadIdx.x == 0) atomicMax(found, c.span + 1u);
    }
}

extern "C" amp_status amp_cuda_unscale_check(const amp_mt_table *t, const float *factor,
                                             unsigned int *found, cudaStream_t stream, char *err,
                                             size_t errlen)
{
    if (!t->nchunks) return AMP_OK;
    unscale_check_kernel<<<t->nchunks, 256, 0, stream>>>(t->spans, t->chunks, factor, found);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

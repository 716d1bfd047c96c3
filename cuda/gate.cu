/* Gating a step on the device flag, with no host round trip: darknet's own
 * update kernels run unchanged (so a finite step is bit for bit darknet's),
 * and a skipped step is undone around them: before the update the parameters
 * and Adam moments are copied aside, after it they and the momentum
 * histories are copied back, both only when the flag is set. On a finite
 * step each launch reads one word and returns. Without a flag (NULL) the copy
 * always happens: the forward states' at every batch start, which the
 * forward pass changes before any decision is made.
 */
#include "amp_cuda.h"
#include "cuda_check.h"

static __global__ void gated_copy_kernel(const amp_span *spans, const amp_chunk *chunks,
                                         const unsigned int *flag, int to_y)
{
    if (flag && !*flag) return;
    const amp_chunk c = chunks[blockIdx.x];
    const amp_span s = spans[c.span];
    size_t end = s.n - c.start < AMP_MT_CHUNK ? s.n : (size_t)c.start + AMP_MT_CHUNK;
    for (size_t i = c.start + threadIdx.x; i < end; i += blockDim.x) {
        if (to_y) s.y[i] = s.x[i];
        else s.x[i] = s.y[i];
    }
}

extern "C" amp_status amp_cuda_gated_copy(const amp_mt_table *t, const unsigned int *flag, int to_y,
                                          cudaStream_t stream, char *err, size_t errlen)
{
    if (!t->nchunks) return AMP_OK;
    gated_copy_kernel<<<t->nchunks, 256, 0, stream>>>(t->spans, t->chunks, flag, to_y);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

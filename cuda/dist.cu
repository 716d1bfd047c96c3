/* Data-parallel training on the device (docs/distributed.md): the batch
 * start that sets each history aside instead of scaling it, and, after
 * NCCL has summed the batch's gradients over the processes, the restack
 * that puts the scaled history back under them: grad_math.h's
 * amp_dist_restack, which the CPU backend's reduce runs too (so the CPU
 * tests cover the arithmetic). Over the history table: x the *_updates_gpu
 * arrays, y their batch-start copies. And the batch-norm statistics' mean
 * put back from the packed buffer NCCL summed them in (over the statistics
 * table: x the rolling arrays, y their places in the buffer).
 */
#include "amp_cuda.h"
#include "cuda_check.h"
#include "math/grad_math.h"

static __global__ void set_aside_kernel(const amp_span *spans, const amp_chunk *chunks,
                                        amp_gpu_state *state)
{
    const amp_chunk c = chunks[blockIdx.x];
    const amp_span s = spans[c.span];
    if (blockIdx.x == 0 && threadIdx.x == 0) { /* the batch's scale, as begin_batch fixes it */
        state->batch_scale = state->st.scale;
        state->inv_scale = amp_inv_scale(state->st.scale);
    }
    size_t end = s.n - c.start < AMP_MT_CHUNK ? s.n : (size_t)c.start + AMP_MT_CHUNK;
    for (size_t i = c.start + threadIdx.x; i < end; i += blockDim.x) {
        s.y[i] = s.x[i];
        s.x[i] = 0.0f;
    }
}

static __global__ void fix_scale_kernel(amp_gpu_state *state)
{
    state->batch_scale = state->st.scale;
    state->inv_scale = amp_inv_scale(state->st.scale);
}

static __global__ void restack_kernel(const amp_span *spans, const amp_chunk *chunks,
                                      const amp_gpu_state *state)
{
    const amp_chunk c = chunks[blockIdx.x];
    const amp_span s = spans[c.span];
    const float k = state->batch_scale;
    size_t end = s.n - c.start < AMP_MT_CHUNK ? s.n : (size_t)c.start + AMP_MT_CHUNK;
    for (size_t i = c.start + threadIdx.x; i < end; i += blockDim.x)
        s.x[i] = amp_dist_restack(s.y[i], k, s.x[i]);
}

extern "C" amp_status amp_cuda_set_aside(const amp_mt_table *t, amp_gpu_state *state,
                                         cudaStream_t stream, char *err, size_t errlen)
{
    if (!t->nchunks) fix_scale_kernel<<<1, 1, 0, stream>>>(state);
    else set_aside_kernel<<<t->nchunks, 256, 0, stream>>>(t->spans, t->chunks, state);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

extern "C" amp_status amp_cuda_restack(const amp_mt_table *t, const amp_gpu_state *state,
                                       cudaStream_t stream, char *err, size_t errlen)
{
    if (!t->nchunks) return AMP_OK;
    restack_kernel<<<t->nchunks, 256, 0, stream>>>(t->spans, t->chunks, state);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

static __global__ void unpack_kernel(const amp_span *spans, const amp_chunk *chunks, float factor)
{
    const amp_chunk c = chunks[blockIdx.x];
    const amp_span s = spans[c.span];
    size_t end = s.n - c.start < AMP_MT_CHUNK ? s.n : (size_t)c.start + AMP_MT_CHUNK;
    for (size_t i = c.start + threadIdx.x; i < end; i += blockDim.x)
        s.x[i] = __fmul_rn(s.y[i], factor);
}

extern "C" amp_status amp_cuda_unpack_scaled(const amp_mt_table *t, float factor,
                                             cudaStream_t stream, char *err, size_t errlen)
{
    if (!t->nchunks) return AMP_OK;
    unpack_kernel<<<t->nchunks, 256, 0, stream>>>(t->spans, t->chunks, factor);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

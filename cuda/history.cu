/* The batch start on the device: every momentum history (the *_updates
 * arrays darknet accumulates gradients into) is copied aside and multiplied
 * by the loss scale S, read from the device state, so the host needs no copy
 * of S (docs/design.md, "Gradients and momentum"). And the loss layers'
 * delta *= S after their forward. Both multiplications are grad_math.h's
 * amp_mul_rn, the CPU core's, exact for a power of two. Also the connected
 * layers' gradient clip at S (grad_math.h's amp_clip_scaled), which reads
 * the batch's S from the same state.
 */
#include "amp_cuda.h"
#include "cuda_check.h"
#include "math/grad_math.h"

static __global__ void begin_batch_kernel(const amp_span *spans, const amp_chunk *chunks,
                                          amp_gpu_state *state)
{
    const amp_chunk c = chunks[blockIdx.x];
    const amp_span s = spans[c.span];
    /* Every block reads the scaler's scale; one thread fixes the batch's. Nothing
     * else writes st.scale while this kernel runs (same stream). */
    const float k = state->st.scale;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        state->batch_scale = k;
        state->inv_scale = amp_inv_scale(k);
    }
    size_t end = s.n - c.start < AMP_MT_CHUNK ? s.n : (size_t)c.start + AMP_MT_CHUNK;
    for (size_t i = c.start + threadIdx.x; i < end; i += blockDim.x) {
        float g = s.x[i];
        s.y[i] = g;
        s.x[i] = amp_mul_rn(g, k);
    }
}

/* A network with no parameters still fixes its batch scale. */
static __global__ void fix_batch_scale_kernel(amp_gpu_state *state)
{
    state->batch_scale = state->st.scale;
    state->inv_scale = amp_inv_scale(state->st.scale);
}

static __global__ void scale_delta_kernel(float *x, size_t n, amp_gpu_state *state,
                                          unsigned int tag)
{
    const float k = state->batch_scale;
    int finite = 1;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float d = x[i];
        finite &= amp_finite(d);
        x[i] = amp_mul_rn(d, k);
    }
    if (!finite) atomicCAS(&state->loss, 0u, tag); /* the first cost layer to see it */
}

static __global__ void clip_delta_kernel(float *x, size_t n, const amp_gpu_state *state)
{
    const float k = state->batch_scale;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = amp_clip_scaled(x[i], k);
}

static unsigned int grid_for(size_t n)
{
    size_t blocks = (n + 255) / 256;
    return (unsigned int)(blocks > 65535 ? 65535 : blocks);
}

extern "C" amp_status amp_cuda_begin_batch(const amp_mt_table *t, amp_gpu_state *state,
                                           cudaStream_t stream, char *err, size_t errlen)
{
    if (!t->nchunks) fix_batch_scale_kernel<<<1, 1, 0, stream>>>(state);
    else begin_batch_kernel<<<t->nchunks, 256, 0, stream>>>(t->spans, t->chunks, state);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

extern "C" amp_status amp_cuda_scale_delta(float *delta, size_t n, amp_gpu_state *state,
                                           unsigned int tag, cudaStream_t stream, char *err,
                                           size_t errlen)
{
    if (!n) return AMP_OK;
    scale_delta_kernel<<<grid_for(n), 256, 0, stream>>>(delta, n, state, tag);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

extern "C" amp_status amp_cuda_clip_delta(float *delta, size_t n, const amp_gpu_state *state,
                                          cudaStream_t stream, char *err, size_t errlen)
{
    if (!n) return AMP_OK;
    clip_delta_kernel<<<grid_for(n), 256, 0, stream>>>(delta, n, state);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

/* The step's decision and the scale update on the device (one thread):
 * scale_rule.h's amp_scale_update, the function the CPU scaler calls, so the
 * trace is the host's (tests/cuda/gpu_kernels_test.cu compares them). The
 * host reads the result asynchronously, for logging only.
 */
#include "amp_cuda.h"
#include "cuda_check.h"

static __global__ void decide_kernel(amp_gpu_state *state, amp_scale_params params,
                                     int update_scale)
{
    unsigned int found = state->found;
    state->skipped = found != 0;
    state->seq += 1;
    if (update_scale) amp_scale_update(&state->st, &params, found != 0);
}

extern "C" amp_status amp_cuda_decide(amp_gpu_state *state, amp_scale_params params,
                                      int update_scale, cudaStream_t stream, char *err,
                                      size_t errlen)
{
    decide_kernel<<<1, 1, 0, stream>>>(state, params, update_scale);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

/* The step's decision and the scale update on the device (one thread):
 * scale_rule.h's amp_scale_update, the function the CPU scaler calls, so the
 * trace is the host's (tests/cuda/gpu_kernels_test.cu compares them). The
 * host reads the result asynchronously, for logging only.
 */
#include "amp_cuda.h"
#include "cuda_check.h"

static __global__ void decide_kernel(amp_gpu_state *state, amp_scale_params params,
                                     int update_scale, unsigned int host_loss)
{
    if (!state->loss) state->loss = host_loss;
    state->skipped = amp_step_decide(&state->st, &params, state->found, state->loss, update_scale);
    state->seq += 1;
}

extern "C" amp_status amp_cuda_decide(amp_gpu_state *state, amp_scale_params params,
                                      int update_scale, unsigned int host_loss,
                                      cudaStream_t stream, char *err, size_t errlen)
{
    decide_kernel<<<1, 1, 0, stream>>>(state, params, update_scale, host_loss);
    return AMP_CUDA_LAUNCHED(err, errlen);
}

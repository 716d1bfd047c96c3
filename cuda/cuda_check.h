/* One family of checks for CUDA runtime, cuBLAS and cuDNN calls: on failure
 * they write "CALL failed at FILE:LINE: error string" into the caller's
 * message buffer and return AMP_ERR_DEVICE from the enclosing function
 * (library code never exits). The *_MSG forms only fill the message and
 * evaluate to 1, for the void callbacks darknet gives us (layer forward,
 * backward, update), which record it as the network's fatal error.
 */
#ifndef AMP_CUDA_CHECK_H
#define AMP_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <stdio.h>

#define AMP_CUDA_MSG(call, err, errlen)                                                   \
    amp_cuda_failed((call), #call, __FILE__, __LINE__, (err), (errlen))

/* Returns AMP_ERR_DEVICE from the enclosing function on failure. */
#define AMP_CUDA_TRY(call, err, errlen)                                                   \
    do {                                                                                  \
        if (AMP_CUDA_MSG(call, err, errlen)) return AMP_ERR_DEVICE;                       \
    } while (0)

/* After a kernel launch: the launch's own error (bad configuration, no
 * kernel image for this GPU). */
#define AMP_CUDA_LAUNCHED(err, errlen) AMP_CUDA_MSG(cudaGetLastError(), err, errlen)

static inline int amp_cuda_failed(cudaError_t e, const char *call, const char *file, int line,
                                  char *err, size_t errlen)
{
    if (e == cudaSuccess) return 0;
    if (err && errlen)
        snprintf(err, errlen, "%s failed at %s:%d: %s (%s)", call, file, line,
                 cudaGetErrorString(e), cudaGetErrorName(e));
    return 1;
}

#endif

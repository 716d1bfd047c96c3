/* One family of checks for CUDA runtime, cuBLAS and cuDNN calls, in the
 * plugin's error convention (plugin/error.h): each evaluates to AMP_OK, or to
 * AMP_ERR_DEVICE with "CALL failed at FILE:LINE: error string" in the
 * caller's message buffer, and is used as
 *   AMP_FORWARD_IF_ERROR(AMP_CUDA_CHECK(call, err, errlen));
 * in functions that return a status, and through AMP_NET_RETURN_IF_ERROR in
 * darknet's void layer callbacks. Library code never exits.
 */
#ifndef AMP_CUDA_CHECK_H
#define AMP_CUDA_CHECK_H

#include "darknet_amp.h" /* amp_status */

#include <cuda_runtime_api.h>
#include <stdio.h>

#define AMP_CUDA_CHECK(call, err, errlen)                                                 \
    amp_cuda_check((call), #call, __FILE__, __LINE__, (err), (errlen))

/* After a kernel launch: the launch's own error (bad configuration, no
 * kernel image for this GPU). */
#define AMP_CUDA_LAUNCHED(err, errlen) AMP_CUDA_CHECK(cudaGetLastError(), err, errlen)

static inline amp_status amp_cuda_check(cudaError_t e, const char *call, const char *file,
                                        int line, char *err, size_t errlen)
{
    if (e == cudaSuccess) return AMP_OK;
    if (err && errlen)
        snprintf(err, errlen, "%s failed at %s:%d: %s (%s)", call, file, line,
                 cudaGetErrorString(e), cudaGetErrorName(e));
    return AMP_ERR_DEVICE;
}

#endif

/* cuda_check.h's family for cuDNN and cuBLAS status codes: on failure,
 * "CALL failed at FILE:LINE: error string" in the caller's message buffer
 * and 1 (the *_MSG forms), for the half layers' host code. Kept apart from
 * cuda_check.h so that the kernel files need neither library's headers. */
#ifndef AMP_LIB_CHECK_H
#define AMP_LIB_CHECK_H

#include "cuda_check.h"

#include <cublas_api.h>
#include <cudnn.h>
#include <stdio.h>

#define AMP_CUDNN_MSG(call, err, errlen)                                                   \
    amp_cudnn_failed((call), #call, __FILE__, __LINE__, (err), (errlen))
#define AMP_CUBLAS_MSG(call, err, errlen)                                                  \
    amp_cublas_failed((call), #call, __FILE__, __LINE__, (err), (errlen))

static inline int amp_cudnn_failed(cudnnStatus_t s, const char *call, const char *file, int line,
                                   char *err, size_t errlen)
{
    if (s == CUDNN_STATUS_SUCCESS) return 0;
    if (err && errlen)
        snprintf(err, errlen, "%s failed at %s:%d: %s", call, file, line, cudnnGetErrorString(s));
    return 1;
}

static inline int amp_cublas_failed(cublasStatus_t s, const char *call, const char *file,
                                    int line, char *err, size_t errlen)
{
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    if (err && errlen)
        snprintf(err, errlen, "%s failed at %s:%d: %s (%s)", call, file, line,
                 cublasGetStatusString(s), cublasGetStatusName(s));
    return 1;
}

#endif

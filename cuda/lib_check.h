/* cuda_check.h's family for cuDNN and cuBLAS status codes: AMP_OK, or
 * AMP_ERR_DEVICE with "CALL failed at FILE:LINE: error string" in the
 * caller's message buffer. Kept apart from cuda_check.h so that the kernel
 * files need neither library's headers. */
#ifndef AMP_LIB_CHECK_H
#define AMP_LIB_CHECK_H

#include "cuda_check.h"

#include <cublas_api.h>
#include <cudnn.h>
#include <stdio.h>

#define AMP_CUDNN_CHECK(call, err, errlen)                                                 \
    amp_cudnn_check((call), #call, __FILE__, __LINE__, (err), (errlen))
#define AMP_CUBLAS_CHECK(call, err, errlen)                                                \
    amp_cublas_check((call), #call, __FILE__, __LINE__, (err), (errlen))

static inline amp_status amp_cudnn_check(cudnnStatus_t s, const char *call, const char *file,
                                         int line, char *err, size_t errlen)
{
    if (s == CUDNN_STATUS_SUCCESS) return AMP_OK;
    if (err && errlen)
        snprintf(err, errlen, "%s failed at %s:%d: %s", call, file, line, cudnnGetErrorString(s));
    return AMP_ERR_DEVICE;
}

static inline amp_status amp_cublas_check(cublasStatus_t s, const char *call, const char *file,
                                          int line, char *err, size_t errlen)
{
    if (s == CUBLAS_STATUS_SUCCESS) return AMP_OK;
    if (err && errlen)
        snprintf(err, errlen, "%s failed at %s:%d: %s (%s)", call, file, line,
                 cublasGetStatusString(s), cublasGetStatusName(s));
    return AMP_ERR_DEVICE;
}

#endif

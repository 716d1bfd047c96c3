/* The device tests' checks (gpu_kernels_test.cu, plan_kernels_test.cu): a
 * CHECK line per comparison ("ok: " or "FAIL: " and what was compared), the
 * failures counted; a CUDA runtime call or a launcher (its status and
 * message) that fails ends the test. */
#ifndef DEVICE_CHECK_H
#define DEVICE_CHECK_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

static int failures;
#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        int ok_ = (cond);                                                                     \
        printf(ok_ ? "ok: " : "FAIL: ");                                                      \
        printf(__VA_ARGS__);                                                                  \
        printf("\n");                                                                         \
        failures += !ok_;                                                                     \
    } while (0)
#define CUDA(call)                                                                            \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            printf("FAIL: %s at %s:%d: %s\n", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)
/* a launcher's call with ERR as its last two arguments */
#define LAUNCH(call)                                                                          \
    do {                                                                                      \
        char err_[256] = "";                                                                  \
        if (call) {                                                                           \
            printf("FAIL: %s: %s\n", #call, err_);                                            \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)
#define ERR err_, sizeof err_

/* 1 where a CUDA device is usable; else 0, SKIP said (the test exits 77). */
static int device_present(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev >= 1) return 1;
    printf("SKIP: no usable CUDA device\n");
    return 0;
}

/* The last line and the exit status: the failed checks counted. */
static int device_report(void)
{
    printf("%s: %d failed checks\n", failures ? "FAIL" : "PASS", failures);
    return failures != 0;
}

#endif

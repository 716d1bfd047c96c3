/* The small things every file of the plugin shares, at the bottom of the
 * core (docs/architecture.md): the names of versions, statuses and dtypes,
 * and the clock. Nothing here calls another file of the project. */
#include "core.h"

#include <time.h>

#define AMP_STR2(x) #x
#define AMP_STR(x) AMP_STR2(x)

const char *amp_version(void)
{
    return AMP_STR(DARKNET_AMP_VERSION_MAJOR) "." AMP_STR(DARKNET_AMP_VERSION_MINOR) "." AMP_STR(
        DARKNET_AMP_VERSION_PATCH);
}

const char *amp_status_name(amp_status status)
{
    switch (status) {
    case AMP_OK: return "ok";
    case AMP_ERR_INVALID: return "invalid argument or value";
    case AMP_ERR_STATE: return "call out of order";
    case AMP_ERR_IO: return "input/output error";
    case AMP_ERR_FORMAT: return "corrupt or incompatible state file";
    case AMP_ERR_NONFINITE: return "too many consecutive non-finite steps";
    case AMP_ERR_NOMEM: return "out of memory";
    case AMP_ERR_DEVICE: return "GPU error";
    }
    return "unknown status";
}

const char *amp_dtype_name(amp_dtype dtype)
{
    switch (dtype) {
    case AMP_DTYPE_FLOAT32: return "float32";
    case AMP_DTYPE_FLOAT16: return "float16";
    case AMP_DTYPE_BFLOAT16: return "bfloat16";
    }
    return "unknown";
}

double amp_clock(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The one place that knows which backends exist: a network built for a GPU
 * (gpu_index >= 0) in a CUDA build runs on the CUDA backend, every other on
 * the CPU's. */
#include "backend.h"

extern const amp_backend_ops amp_cpu_backend;
#ifdef GPU
extern const amp_backend_ops amp_cuda_backend;
#endif

const amp_backend_ops *amp_backend_for(const network *net)
{
#ifdef GPU
    if (net->gpu_index >= 0) return &amp_cuda_backend;
#else
    (void)net;
#endif
    return &amp_cpu_backend;
}

int amp_backends(const amp_backend_ops **out, int max)
{
    const amp_backend_ops *const all[] = {
        &amp_cpu_backend,
#ifdef GPU
        &amp_cuda_backend,
#endif
    };
    int n = 0;
    for (; n < (int)(sizeof all / sizeof all[0]) && n < max; ++n) out[n] = all[n];
    return n;
}

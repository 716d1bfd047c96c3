/* Eight half values (16 bytes, one uint4) moved between a device array and
 * registers in one access, as bit patterns: the element passes of tail.cu
 * and movement.cu take 8 values per thread where a tensor allows it (its
 * start 16-byte aligned, its length or channel count a multiple of 8). */
#ifndef AMP_CUDA_HALF_VEC_CUH
#define AMP_CUDA_HALF_VEC_CUH

#include <stdint.h>

#define AMP_HALF_VEC 8

/* p[i .. i + 7] into h (p + i 16-byte aligned). */
static __device__ __forceinline__ void amp_load8(const uint16_t *p, long i, uint16_t *h)
{
    const uint4 u = *reinterpret_cast<const uint4 *>(p + i);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    for (int k = 0; k < 4; ++k)
        h[2 * k] = (uint16_t)(w[k] & 0xffffu), h[2 * k + 1] = (uint16_t)(w[k] >> 16);
}

/* h into p[i .. i + 7]. */
static __device__ __forceinline__ void amp_store8(uint16_t *p, long i, const uint16_t *h)
{
    uint4 u;
    u.x = h[0] | (uint32_t)h[1] << 16, u.y = h[2] | (uint32_t)h[3] << 16;
    u.z = h[4] | (uint32_t)h[5] << 16, u.w = h[6] | (uint32_t)h[7] << 16;
    *reinterpret_cast<uint4 *>(p + i) = u;
}

/* V values from p[i] (V = AMP_HALF_VEC: one access, p + i 16-byte aligned;
 * V = 1: one value). */
template <int V>
static __device__ __forceinline__ void amp_load_v(const uint16_t *p, long i, uint16_t *h)
{
    if (V == AMP_HALF_VEC) amp_load8(p, i, h);
    else for (int k = 0; k < V; ++k) h[k] = p[i + k];
}

template <int V>
static __device__ __forceinline__ void amp_store_v(uint16_t *p, long i, const uint16_t *h)
{
    if (V == AMP_HALF_VEC) amp_store8(p, i, h);
    else for (int k = 0; k < V; ++k) p[i + k] = h[k];
}

/* Whether p starts 16-byte aligned. */
static inline int amp_aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

#endif

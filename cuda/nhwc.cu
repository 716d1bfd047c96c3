/* darknet's NCHW float32 arrays against the activation plan's NHWC half
 * tensors, on the device, at a half region's edges: the input image into
 * half (its channels padded with zeros to what the first convolution
 * wants), a half tensor into float32 for a float32 reader (the loss
 * layers), a float32 layer's gradient added into a half delta. The CPU's
 * conversions (round.c's amp_cpu_*_half_nhwc) do the same with the same
 * functions (math/half_format.h, math/nhwc.h): bit for bit alike, which
 * gpu.plan_kernels checks.
 *
 * A transpose through shared memory: a block of 256 threads moves a tile of
 * CT channels by 1024 / CT positions of one image, reading rows of positions
 * of the NCHW array and rows of CT channels of the NHWC one, both coalesced.
 * CT is the smallest of 4, 8, 16 and 32 that holds the channels: the
 * image's 3 fill most of a tile rather than 3 rows of 32 (a tile of 32 left
 * 29 of 32 threads idle over 8 times as many blocks). */
#include "amp_cuda.h"
#include "cuda_check.h"
#include "math/half_format.h"
#include "math/nhwc.h"

#define NHWC_THREADS 256
#define NHWC_ELEMS 1024

enum { TO_HALF, FROM_HALF, ADD_INTO_HALF };

/* f: the NCHW float32 array (c channels); h: the NHWC half tensor (cs
 * channels, cs >= c: those from c on are padding, zero in TO_HALF). A tile
 * row is CT + 1 floats, so that the position-wise pass hits 32 banks. */
template <int CT>
static __global__ void __launch_bounds__(NHWC_THREADS)
    nhwc_kernel(int op, int bf16, const float *f_in, float *f_out, uint16_t *h, int c, int cs,
                long hw)
{
    constexpr int PT = NHWC_ELEMS / CT, PITCH = CT + 1;
    __shared__ float tile[PT * PITCH];
    const long b = blockIdx.z, p0 = (long)blockIdx.x * PT;
    const int c0 = blockIdx.y * CT;
    if (op == FROM_HALF) {
        /* read each position's channels side by side from the half tensor,
         * write each channel's positions side by side */
        for (int e = threadIdx.x; e < NHWC_ELEMS; e += NHWC_THREADS) {
            const int pp = e / CT, cc = e % CT, ch = c0 + cc;
            const long p = p0 + pp;
            float v = 0.f;
            if (p < hw && ch < c) {
                const uint16_t x = h[amp_nhwc_at(b, ch, p, cs, hw)];
                v = bf16 ? amp_bf16_to_f32(x) : amp_f16_to_f32(x);
            }
            tile[pp * PITCH + cc] = v;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < NHWC_ELEMS; e += NHWC_THREADS) {
            const int cc = e / PT, pp = e % PT, ch = c0 + cc;
            const long p = p0 + pp;
            if (p < hw && ch < c) f_out[amp_nchw_at(b, ch, p, c, hw)] = tile[pp * PITCH + cc];
        }
        return;
    }
    /* TO_HALF, ADD_INTO_HALF: read each channel's positions side by side from
     * the float32 array, write each position's channels side by side */
    for (int e = threadIdx.x; e < NHWC_ELEMS; e += NHWC_THREADS) {
        const int cc = e / PT, pp = e % PT, ch = c0 + cc;
        const long p = p0 + pp;
        tile[pp * PITCH + cc] = p < hw && ch < c ? f_in[amp_nchw_at(b, ch, p, c, hw)] : 0.f;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < NHWC_ELEMS; e += NHWC_THREADS) {
        const int pp = e / CT, cc = e % CT, ch = c0 + cc;
        const long p = p0 + pp;
        if (p >= hw || ch >= cs) continue;
        uint16_t *at = h + amp_nhwc_at(b, ch, p, cs, hw);
        float v = tile[pp * PITCH + cc];
        if (op == ADD_INTO_HALF) {
            if (ch >= c) continue; /* padding stays as it is */
            v = (bf16 ? amp_bf16_to_f32(*at) : amp_f16_to_f32(*at)) + v;
        }
        *at = bf16 ? amp_f32_to_bf16(v) : amp_f32_to_f16(v);
    }
}

template <int CT>
static void launch_nhwc(dim3 grid, cudaStream_t stream, int op, int bf16, const float *f_in,
                        float *f_out, uint16_t *h, int c, int cs, long hw)
{
    nhwc_kernel<CT><<<grid, NHWC_THREADS, 0, stream>>>(op, bf16, f_in, f_out, h, c, cs, hw);
}

static amp_status launch(int op, amp_dtype dtype, const float *f_in, float *f_out, uint16_t *h,
                         int batch, int c, int cs, long hw, cudaStream_t stream, char *err,
                         size_t errlen)
{
    if (batch <= 0 || c <= 0 || hw <= 0) return AMP_OK;
    const int moved = op == TO_HALF ? cs : c; /* the channels a tile covers */
    const int ct = amp_channel_tile(moved);
    const long ptiles = (hw + NHWC_ELEMS / ct - 1) / (NHWC_ELEMS / ct);
    if (cs < c || batch > 65535 || (moved + ct - 1) / ct > 65535 || ptiles > 0x7fffffffL) {
        snprintf(err, errlen, "nhwc.cu: %d images of %d channels (stored %d) by %ld positions: "
                              "not a shape the conversion takes", batch, c, cs, hw);
        return AMP_ERR_INVALID;
    }
    const dim3 grid((unsigned)ptiles, (unsigned)((moved + ct - 1) / ct), (unsigned)batch);
    const int bf16 = dtype == AMP_DTYPE_BFLOAT16;
    switch (ct) {
    case 4: launch_nhwc<4>(grid, stream, op, bf16, f_in, f_out, h, c, cs, hw); break;
    case 8: launch_nhwc<8>(grid, stream, op, bf16, f_in, f_out, h, c, cs, hw); break;
    case 16: launch_nhwc<16>(grid, stream, op, bf16, f_in, f_out, h, c, cs, hw); break;
    default: launch_nhwc<32>(grid, stream, op, bf16, f_in, f_out, h, c, cs, hw);
    }
    return AMP_CUDA_LAUNCHED(err, errlen);
}

extern "C" amp_status amp_cuda_to_half_nhwc(const float *x, uint16_t *h, int batch, int c,
                                            int c_stored, long hw, amp_dtype dtype,
                                            cudaStream_t stream, char *err, size_t errlen)
{
    return launch(TO_HALF, dtype, x, NULL, h, batch, c, c_stored, hw, stream, err, errlen);
}

extern "C" amp_status amp_cuda_from_half_nhwc(const uint16_t *h, float *x, int batch, int c,
                                              int c_stored, long hw, amp_dtype dtype,
                                              cudaStream_t stream, char *err, size_t errlen)
{
    return launch(FROM_HALF, dtype, NULL, x, (uint16_t *)h, batch, c, c_stored, hw, stream, err,
                  errlen);
}

extern "C" amp_status amp_cuda_add_into_half_nhwc(uint16_t *h, const float *x, int batch, int c,
                                                  int c_stored, long hw, amp_dtype dtype,
                                                  cudaStream_t stream, char *err, size_t errlen)
{
    return launch(ADD_INTO_HALF, dtype, x, NULL, h, batch, c, c_stored, hw, stream, err, errlen);
}

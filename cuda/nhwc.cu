/* darknet's NCHW float32 arrays against the activation plan's NHWC half
 * tensors, on the device, at a half region's edges: the input image into
 * half (its channels padded with zeros to what the first convolution
 * wants), a half tensor into float32 for a float32 reader (the loss
 * layers), a float32 layer's gradient added into a half delta. The CPU's
 * conversions (round.c's amp_cpu_*_half_nhwc) do the same with the same
 * functions (math/half_format.h, math/nhwc.h): bit for bit alike, which
 * gpu.plan_kernels checks.
 *
 * A transpose through shared memory: a block moves a tile of 32 channels by
 * 32 positions of one image, reading rows of 32 positions of the NCHW array
 * and writing rows of 32 channels of the NHWC one, both coalesced. */
#include "amp_cuda.h"
#include "cuda_check.h"
#include "math/half_format.h"
#include "math/nhwc.h"

#define NHWC_TILE 32
#define NHWC_ROWS 8

enum { TO_HALF, FROM_HALF, ADD_INTO_HALF };

/* f: the NCHW float32 array (c channels); h: the NHWC half tensor (cs
 * channels, cs >= c: those from c on are padding, zero in TO_HALF). */
static __global__ void nhwc_kernel(int op, int bf16, const float *f_in, float *f_out,
                                   uint16_t *h, int c, int cs, long hw)
{
    __shared__ float tile[NHWC_TILE][NHWC_TILE + 1];
    const long b = blockIdx.z;
    const int c0 = blockIdx.y * NHWC_TILE;
    const long p0 = (long)blockIdx.x * NHWC_TILE;
    const int tx = threadIdx.x, ty = threadIdx.y;
    if (op == FROM_HALF) {
        /* read channels along x from the half tensor, write positions along x */
        for (int k = ty; k < NHWC_TILE; k += NHWC_ROWS) {
            const long p = p0 + k;
            const int ch = c0 + tx;
            float v = 0.f;
            if (p < hw && ch < c) {
                const uint16_t x = h[amp_nhwc_at(b, ch, p, cs, hw)];
                v = bf16 ? amp_bf16_to_f32(x) : amp_f16_to_f32(x);
            }
            tile[k][tx] = v;
        }
        __syncthreads();
        for (int k = ty; k < NHWC_TILE; k += NHWC_ROWS) {
            const int ch = c0 + k;
            const long p = p0 + tx;
            if (p < hw && ch < c) f_out[amp_nchw_at(b, ch, p, c, hw)] = tile[tx][k];
        }
        return;
    }
    /* TO_HALF, ADD_INTO_HALF: read positions along x from the float32
     * array, write channels along x */
    for (int k = ty; k < NHWC_TILE; k += NHWC_ROWS) {
        const int ch = c0 + k;
        const long p = p0 + tx;
        tile[k][tx] = p < hw && ch < c ? f_in[amp_nchw_at(b, ch, p, c, hw)] : 0.f;
    }
    __syncthreads();
    for (int k = ty; k < NHWC_TILE; k += NHWC_ROWS) {
        const long p = p0 + k;
        const int ch = c0 + tx;
        if (p >= hw || ch >= cs) continue;
        uint16_t *at = h + amp_nhwc_at(b, ch, p, cs, hw);
        float v = tile[tx][k];
        if (op == ADD_INTO_HALF) {
            if (ch >= c) continue; /* padding stays as it is */
            v = (bf16 ? amp_bf16_to_f32(*at) : amp_f16_to_f32(*at)) + v;
        }
        *at = bf16 ? amp_f32_to_bf16(v) : amp_f32_to_f16(v);
    }
}

static amp_status launch(int op, amp_dtype dtype, const float *f_in, float *f_out, uint16_t *h,
                         int batch, int c, int cs, long hw, cudaStream_t stream, char *err,
                         size_t errlen)
{
    if (batch <= 0 || c <= 0 || hw <= 0) return AMP_OK;
    if (cs < c || batch > 65535 || (cs + NHWC_TILE - 1) / NHWC_TILE > 65535) {
        snprintf(err, errlen, "nhwc.cu: %d images of %d channels (stored %d) by %ld positions: "
                              "not a shape the conversion takes", batch, c, cs, hw);
        return AMP_ERR_INVALID;
    }
    const dim3 block(NHWC_TILE, NHWC_ROWS);
    const dim3 grid((unsigned)((hw + NHWC_TILE - 1) / NHWC_TILE),
                    (unsigned)(((op == TO_HALF ? cs : c) + NHWC_TILE - 1) / NHWC_TILE),
                    (unsigned)batch);
    nhwc_kernel<<<grid, block, 0, stream>>>(op, dtype == AMP_DTYPE_BFLOAT16, f_in, f_out, h, c,
                                            cs, hw);
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

/* The GPU backend's kernels against the host code they share their element
 * math with (half_format.h, grad_math.h, scale_rule.h): conversions bit for bit over
 * every 16-bit pattern and 2^24 float patterns (and the CUDA intrinsics'
 * conversions for every non-NaN input, the claim half_format.h makes), the fused
 * unscale + check with inf and NaN injected into chosen tensors (the flag
 * names the last one), the batch start, the gated copies, and a scale update
 * trace against amp_scale_update on the host, the connected layers' gradient
 * clip at the scale, a half convolution's weight-gradient operands
 * (wgrad_index.h's layout) and its float32 GEMM into the history. Exit 77
 * without a device. */
#include "amp_cuda.h"
#include "device_check.h"
#include "math/grad_math.h"
#include "math/half_format.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>


static __global__ void intrinsic_f16(const float *x, uint16_t *h, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) h[i] = __half_as_ushort(__float2half_rn(x[i]));
}

static __global__ void intrinsic_bf16(const float *x, uint16_t *h, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) h[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

template <typename T> static T *dev(size_t n)
{
    T *p;
    CUDA(cudaMalloc((void **)&p, n * sizeof(T)));
    return p;
}

static void conversions(void)
{
    const size_t n16 = 65536;
    std::vector<uint16_t> h(n16);
    std::vector<float> got(n16);
    for (size_t i = 0; i < n16; ++i) h[i] = (uint16_t)i;
    uint16_t *dh = dev<uint16_t>(n16);
    float *dx = dev<float>(n16);
    CUDA(cudaMemcpy(dh, h.data(), n16 * 2, cudaMemcpyHostToDevice));
    for (int bf = 0; bf < 2; ++bf) {
        amp_dtype dt = bf ? AMP_DTYPE_BFLOAT16 : AMP_DTYPE_FLOAT16;
        LAUNCH(amp_cuda_from_half(dh, dx, n16, dt, 0, ERR));
        CUDA(cudaMemcpy(got.data(), dx, n16 * 4, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t i = 0; i < n16; ++i) {
            float want = bf ? amp_bf16_to_f32(h[i]) : amp_f16_to_f32(h[i]);
            bad += amp_f32_bits(got[i]) != amp_f32_bits(want);
        }
        CHECK(bad == 0,
              "%s -> float32 on the device, all 65536 patterns: %zu differ from half_format.h",
              bf ? "bfloat16" : "float16", bad);
    }
    cudaFree(dh);
    cudaFree(dx);

    /* 2^24 float patterns: every 256th, plus the low byte varied by i. */
    const size_t n = (size_t)1 << 24;
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = amp_f32_from_bits((uint32_t)(i << 8 | (i * 37u & 0xffu)));
    float *dxx = dev<float>(n);
    uint16_t *dout = dev<uint16_t>(n);
    std::vector<uint16_t> out(n);
    CUDA(cudaMemcpy(dxx, x.data(), n * 4, cudaMemcpyHostToDevice));
    for (int bf = 0; bf < 2; ++bf) {
        amp_dtype dt = bf ? AMP_DTYPE_BFLOAT16 : AMP_DTYPE_FLOAT16;
        LAUNCH(amp_cuda_to_half(dxx, dout, n, dt, 0, ERR));
        CUDA(cudaMemcpy(out.data(), dout, n * 2, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i)
            bad += out[i] != (bf ? amp_f32_to_bf16(x[i]) : amp_f32_to_f16(x[i]));
        CHECK(bad == 0, "float32 -> %s on the device, %zu patterns: %zu differ from half_format.h",
              bf ? "bfloat16" : "float16", n, bad);
        /* The CUDA intrinsics agree for every non-NaN input (NaN payloads differ
         * by design: CUDA returns a canonical NaN). */
        if (bf) intrinsic_bf16<<<(unsigned)((n + 255) / 256), 256>>>(dxx, dout, n);
        else intrinsic_f16<<<(unsigned)((n + 255) / 256), 256>>>(dxx, dout, n);
        CUDA(cudaGetLastError());
        CUDA(cudaMemcpy(out.data(), dout, n * 2, cudaMemcpyDeviceToHost));
        bad = 0;
        size_t nan_ok = 0, nan_in = 0;
        for (size_t i = 0; i < n; ++i) {
            uint16_t want = bf ? amp_f32_to_bf16(x[i]) : amp_f32_to_f16(x[i]);
            if (isnan(x[i])) {
                float back = bf ? amp_bf16_to_f32(out[i]) : amp_f16_to_f32(out[i]);
                nan_ok += isnan(back) != 0;
                nan_in += 1;
                continue;
            }
            bad += out[i] != want;
        }
        CHECK(bad == 0, "%s intrinsic vs half_format.h, non-NaN inputs: %zu differ",
              bf ? "__float2bfloat16_rn" : "__float2half_rn", bad);
        CHECK(nan_ok == nan_in, "%s intrinsic: every NaN input gives a NaN (%zu of %zu)",
              bf ? "__float2bfloat16_rn" : "__float2half_rn", nan_ok, nan_in);
    }
    cudaFree(dxx);
    cudaFree(dout);
}

/* Tensors of awkward sizes around the chunk length; inf/NaN injected. */
static void unscale_check(void)
{
    const size_t sizes[] = {1, 1000, AMP_MT_CHUNK, AMP_MT_CHUNK + 1, 100000};
    const int nt = 5;
    std::vector<std::vector<float>> host(nt);
    std::vector<amp_span> spans(nt);
    srand(3);
    const float S = 65536.0f;
    for (int k = 0; k < nt; ++k) {
        host[k].resize(sizes[k]);
        for (size_t i = 0; i < sizes[k]; ++i)
            host[k][i] = ((float)rand() / RAND_MAX - 0.5f) * S * (i % 7 == 0 ? 1e-30f : 1.0f);
        spans[k].x = dev<float>(sizes[k]);
        spans[k].y = dev<float>(sizes[k]);
        spans[k].n = sizes[k];
    }
    amp_mt_table t;
    char err[256];
    if (amp_mt_table_create(&t, spans.data(), nt, err, sizeof err)) {
        printf("FAIL: table: %s\n", err);
        exit(1);
    }
    float *factor = dev<float>(1);
    unsigned int *found = dev<unsigned int>(1);
    float inv = amp_inv_scale(S);
    CUDA(cudaMemcpy(factor, &inv, 4, cudaMemcpyHostToDevice));
    /* case A: inf in tensor 1, NaN in tensor 3 (last element: the chunk tail) */
    for (int c = 0; c < 3; ++c) {
        std::vector<std::vector<float>> in = host;
        const char *what = "all finite";
        unsigned int want = 0;
        if (c == 1) {
            in[1][500] = INFINITY;
            in[3][sizes[3] - 1] = NAN;
            want = 4;
            what = "inf in tensor 1, NaN in tensor 3's last element";
        } else if (c == 2) {
            in[0][0] = -INFINITY;
            want = 1;
            what = "-inf in tensor 0 only";
        }
        for (int k = 0; k < nt; ++k)
            CUDA(cudaMemcpy(spans[k].x, in[k].data(), sizes[k] * 4, cudaMemcpyHostToDevice));
        CUDA(cudaMemset(found, 0, 4));
        LAUNCH(amp_cuda_unscale_check(&t, factor, found, 0, ERR));
        unsigned int flag;
        CUDA(cudaMemcpy(&flag, found, 4, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (int k = 0; k < nt; ++k) {
            std::vector<float> got(sizes[k]);
            CUDA(cudaMemcpy(got.data(), spans[k].x, sizes[k] * 4, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < sizes[k]; ++i) {
                float ref = in[k][i];
                amp_unscale_check(&ref, inv);
                bad += amp_f32_bits(got[i]) != amp_f32_bits(ref) && !(isnan(ref) && isnan(got[i]));
            }
        }
        CHECK(flag == want && bad == 0, "unscale+check, %s: flag %u (want %u), %zu elements differ "
              "from the host's amp_unscale_check", what, flag, want, bad);
    }

    /* Batch start: y = x, x *= scale; batch_scale and inv_scale fixed. */
    amp_gpu_state st;
    memset(&st, 0, sizeof st);
    st.st.scale = 1024.0f;
    amp_gpu_state *dst = dev<amp_gpu_state>(1);
    CUDA(cudaMemcpy(dst, &st, sizeof st, cudaMemcpyHostToDevice));
    for (int k = 0; k < nt; ++k)
        CUDA(cudaMemcpy(spans[k].x, host[k].data(), sizes[k] * 4, cudaMemcpyHostToDevice));
    LAUNCH(amp_cuda_begin_batch(&t, dst, 0, ERR));
    CUDA(cudaMemcpy(&st, dst, sizeof st, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (int k = 0; k < nt; ++k) {
        std::vector<float> gx(sizes[k]), gy(sizes[k]);
        CUDA(cudaMemcpy(gx.data(), spans[k].x, sizes[k] * 4, cudaMemcpyDeviceToHost));
        CUDA(cudaMemcpy(gy.data(), spans[k].y, sizes[k] * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < sizes[k]; ++i)
            bad += amp_f32_bits(gy[i]) != amp_f32_bits(host[k][i]) ||
                   amp_f32_bits(gx[i]) != amp_f32_bits(host[k][i] * 1024.0f);
    }
    CHECK(bad == 0 && st.batch_scale == 1024.0f && st.inv_scale == 0x1p-10f,
          "batch start: copy and x1024 exact (%zu differ), batch_scale %g, inv_scale %a", bad,
          st.batch_scale, st.inv_scale);

    /* The elements of every span's x whose bits differ from host's (every
     * one when the copy back fails). */
    auto differ_from_host = [&]() {
        size_t d = 0;
        for (int k = 0; k < nt; ++k) {
            std::vector<float> gx(sizes[k]);
            if (cudaMemcpy(gx.data(), spans[k].x, sizes[k] * 4, cudaMemcpyDeviceToHost) !=
                cudaSuccess)
                return (size_t)-1;
            for (size_t i = 0; i < sizes[k]; ++i)
                d += amp_f32_bits(gx[i]) != amp_f32_bits(host[k][i]);
        }
        return d;
    };

    /* Gated copies: flag 0 leaves x alone, flag 1 restores it from y. */
    unsigned int zero = 0, one = 1;
    CUDA(cudaMemcpy(found, &zero, 4, cudaMemcpyHostToDevice));
    LAUNCH(amp_cuda_gated_copy(&t, found, 0, 0, ERR));
    std::vector<float> g0(sizes[4]);
    CUDA(cudaMemcpy(g0.data(), spans[4].x, sizes[4] * 4, cudaMemcpyDeviceToHost));
    int untouched = amp_f32_bits(g0[9]) == amp_f32_bits(host[4][9] * 1024.0f);
    CUDA(cudaMemcpy(found, &one, 4, cudaMemcpyHostToDevice));
    LAUNCH(amp_cuda_gated_copy(&t, found, 0, 0, ERR));
    bad = differ_from_host();
    CHECK(untouched && bad == 0, "gated copy: flag 0 changes nothing (%s), flag 1 restores every "
          "tensor (%zu differ)", untouched ? "yes" : "no", bad);

    /* The forward states' copy (backend.c): saved with no flag at the batch
     * start, whatever the forward pass writes then (NaN, as an overflowing
     * pass leaves rolling statistics), restored only by a skipped step. */
    LAUNCH(amp_cuda_gated_copy(&t, NULL, 1, 0, ERR));
    for (int k = 0; k < nt; ++k) CUDA(cudaMemset(spans[k].x, 0xff, sizes[k] * 4)); /* NaN */
    CUDA(cudaMemcpy(found, &zero, 4, cudaMemcpyHostToDevice));
    LAUNCH(amp_cuda_gated_copy(&t, found, 0, 0, ERR));
    CUDA(cudaMemcpy(g0.data(), spans[4].x, sizes[4] * 4, cudaMemcpyDeviceToHost));
    const int kept = isnan(g0[9]);
    CUDA(cudaMemcpy(found, &one, 4, cudaMemcpyHostToDevice));
    LAUNCH(amp_cuda_gated_copy(&t, found, 0, 0, ERR));
    bad = differ_from_host();
    CHECK(kept && bad == 0, "ungated save, then NaN written: a taken step keeps what the pass "
          "wrote (%s), a skipped one restores every array bit for bit (%zu differ)",
          kept ? "yes" : "no", bad);
    amp_mt_table_free(&t);
    cudaFree(dst);
}

/* The device's decisions against the host's rule (amp_step_decide, which
 * calls amp_scale_update): x an overflow, L a non-finite loss the host saw, D
 * one the device saw (its flag set before the decision), B both with an
 * overflow; a non-finite loss skips and leaves the scale alone. */
static void scale_trace(void)
{
    amp_scale_params p = {2.0f, 0.5f, 1.0f, 65536.0f, 3, 2, 1};
    const char *flags = "..x.xx...L...xxxxxx..D.....B.x.xxL..";
    amp_gpu_state st;
    memset(&st, 0, sizeof st);
    amp_scale_state host;
    amp_scale_state_init(&host, &p, 1024.0f);
    st.st = host;
    amp_gpu_state *d = dev<amp_gpu_state>(1);
    CUDA(cudaMemcpy(d, &st, sizeof st, cudaMemcpyHostToDevice));
    size_t bad = 0, n = strlen(flags);
    printf("scale trace (growth every 3, hysteresis 2, within [1, 65536]), steps %s:\n ", flags);
    for (size_t i = 0; i < n; ++i) {
        const char c = flags[i];
        unsigned int f = c == 'x' || c == 'B' ? 7u : 0u;
        unsigned int dl = c == 'D' || c == 'B' ? 5u : 0u, hl = c == 'L' ? 3u : 0u;
        CUDA(cudaMemcpy(&d->found, &f, 4, cudaMemcpyHostToDevice));
        CUDA(cudaMemcpy(&d->loss, &dl, 4, cudaMemcpyHostToDevice));
        LAUNCH(amp_cuda_decide(d, p, 1, hl, 0, ERR));
        CUDA(cudaMemcpy(&st, d, sizeof st, cudaMemcpyDeviceToHost));
        const int skip = amp_step_decide(&host, &p, f, dl ? dl : hl, 1);
        printf(" %g", st.st.scale);
        bad += st.st.scale != host.scale || st.st.growth_tracker != host.growth_tracker ||
               st.st.hysteresis_left != host.hysteresis_left ||
               st.st.consecutive_skips != host.consecutive_skips || st.st.steps != host.steps ||
               st.st.skips != host.skips || st.skipped != (unsigned)skip || st.seq != i + 1 ||
               st.loss != (dl ? dl : hl);
    }
    printf("\n");
    CHECK(bad == 0, "device decisions equal the host rule at every one of %zu steps (%zu differ); "
          "final scale %g, %llu skipped", n, bad, st.st.scale, st.st.skips);
    cudaFree(d);
}

/* The rounding kernels of the half GEMMs (amp_cuda_round, amp_cuda_add_rounded)
 * against half_format.h on the host, with values around every rounding case: exact,
 * ties, subnormal, overflow, NaN. */
static void rounding(void)
{
    const size_t n = 1 << 20;
    std::vector<float> x(n), y(n), got(n);
    srand(5);
    for (size_t i = 0; i < n; ++i) {
        uint32_t u = ((uint32_t)rand() << 16) ^ (uint32_t)rand();
        x[i] = amp_f32_from_bits(u);          /* any pattern, NaNs included */
        y[i] = (float)(rand() % 2001 - 1000) / 64;
    }
    float *dx = dev<float>(n), *dy = dev<float>(n);
    for (int bf = 0; bf < 2; ++bf) {
        amp_dtype dt = bf ? AMP_DTYPE_BFLOAT16 : AMP_DTYPE_FLOAT16;
        for (int add = 0; add < 2; ++add) {
            CUDA(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
            CUDA(cudaMemcpy(dy, y.data(), n * 4, cudaMemcpyHostToDevice));
            if (add) LAUNCH(amp_cuda_add_rounded(dx, dy, n, dt, 0, ERR));
            else LAUNCH(amp_cuda_round(dx, n, dt, 0, ERR));
            CUDA(cudaMemcpy(got.data(), add ? dy : dx, n * 4, cudaMemcpyDeviceToHost));
            size_t bad = 0;
            for (size_t i = 0; i < n; ++i) {
                float r = bf ? amp_bf16_to_f32(amp_f32_to_bf16(x[i]))
                             : amp_f16_to_f32(amp_f32_to_f16(x[i]));
                float want = add ? y[i] + r : r;
                int same = amp_f32_bits(got[i]) == amp_f32_bits(want) ||
                           (want != want && got[i] != got[i]);
                bad += !same;
            }
            CHECK(bad == 0, "%s on the device, %s, %zu patterns: %zu differ from half_format.h",
                  add ? "y += round(x)" : "x = round(x)", bf ? "bfloat16" : "float16", n, bad);
        }
    }
    cudaFree(dx);
    cudaFree(dy);
}

/* The connected layers' gradient clip at the batch's scale (amp_cuda_clip_delta)
 * against grad_math.h's amp_clip_scaled on the host: any pattern, the scale
 * read from the device state. */
static void clip(void)
{
    const size_t n = 1 << 20;
    std::vector<float> x(n), got(n);
    srand(9);
    for (size_t i = 0; i < n; ++i) {
        uint32_t u = ((uint32_t)rand() << 16) ^ (uint32_t)rand();
        x[i] = i % 4 ? amp_f32_from_bits(u) : (float)(rand() % 4001 - 2000) * 64; /* near S */
    }
    float *dx = dev<float>(n);
    amp_gpu_state st;
    memset(&st, 0, sizeof st);
    amp_gpu_state *dst = dev<amp_gpu_state>(1);
    const float scales[] = {1.0f, 65536.0f};
    for (int k = 0; k < 2; ++k) {
        st.batch_scale = scales[k];
        CUDA(cudaMemcpy(dst, &st, sizeof st, cudaMemcpyHostToDevice));
        CUDA(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
        LAUNCH(amp_cuda_clip_delta(dx, n, dst, 0, ERR));
        CUDA(cudaMemcpy(got.data(), dx, n * 4, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
            float want = amp_clip_scaled(x[i], scales[k]);
            bad +=
                !(amp_f32_bits(got[i]) == amp_f32_bits(want) || (want != want && got[i] != got[i]));
        }
        CHECK(bad == 0, "gradient clip at S = %g on the device, %zu patterns: %zu differ from "
              "grad_math.h", scales[k], n, bad);
    }
    cudaFree(dx);
    cudaFree(dst);
}

/* A half convolution's weight gradient as half_conv.c computes it: the
 * operand kernels against wgrad_index.h on the host (every element), then
 * the GEMM into a float32 history, against the exact sum: integers 0 to 8,
 * K = 13 x 13 x 32 per GEMM, sums (about 16 K) past float16's 65504 and
 * exact in float32 (below 64 K < 2^24). */
extern "C" amp_status amp_gpu_gemm_half(amp_dtype dtype, int ta, int tb, int m, int n, int k,
                                        const void *a, int lda, const void *b, int ldb,
                                        float beta, float *c, int ldc, char *err, size_t errlen);

static void weight_gradient(void)
{
    const amp_im2col_dims d = {32, 6, 26, 26, 3, 2, 1, 13, 13};
    const int n = 8, cols = d.c * d.size * d.size, k = d.nb * d.out_h * d.out_w;
    const size_t nx = (size_t)d.nb * d.c * d.h * d.w, ny = (size_t)d.nb * n * d.out_h * d.out_w;
    const size_t ncol = amp_im2col_elems(d), ohw = (size_t)d.out_h * d.out_w;
    for (int bf = 0; bf < 2; ++bf) {
        amp_dtype dt = bf ? AMP_DTYPE_BFLOAT16 : AMP_DTYPE_FLOAT16;
        std::vector<uint16_t> x(nx), dy(ny), col(ncol), dyc(ny);
        std::vector<float> xf(nx), dyf(ny), hist((size_t)n * cols), got((size_t)n * cols);
        srand(11 + bf);
        for (size_t i = 0; i < nx; ++i) xf[i] = (float)(rand() % 9);
        for (size_t i = 0; i < ny; ++i) dyf[i] = (float)(rand() % 9);
        for (size_t i = 0; i < hist.size(); ++i) hist[i] = 0.5f * (float)(rand() % 9 - 4);
        for (size_t i = 0; i < nx; ++i) x[i] = bf ? amp_f32_to_bf16(xf[i]) : amp_f32_to_f16(xf[i]);
        for (size_t i = 0; i < ny; ++i) dy[i] = bf ? amp_f32_to_bf16(dyf[i]) : amp_f32_to_f16(dyf[i]);
        uint16_t *dxh = dev<uint16_t>(nx), *ddy = dev<uint16_t>(ny), *dcol = dev<uint16_t>(ncol),
                 *ddyc = dev<uint16_t>(ny);
        float *dh = dev<float>(hist.size());
        CUDA(cudaMemcpy(dxh, x.data(), nx * 2, cudaMemcpyHostToDevice));
        CUDA(cudaMemcpy(ddy, dy.data(), ny * 2, cudaMemcpyHostToDevice));
        CUDA(cudaMemcpy(dh, hist.data(), hist.size() * 4, cudaMemcpyHostToDevice));
        LAUNCH(amp_cuda_im2col_half(dxh, d, dcol, 0, ERR));
        LAUNCH(amp_cuda_to_cnhw_half(ddy, d.nb, n, ohw, ddyc, 0, ERR));
        CUDA(cudaMemcpy(col.data(), dcol, ncol * 2, cudaMemcpyDeviceToHost));
        CUDA(cudaMemcpy(dyc.data(), ddyc, ny * 2, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t i = 0; i < ncol; ++i) {
            const long long src = amp_im2col_src(d, i);
            bad += col[i] != (src < 0 ? 0 : x[(size_t)src]);
        }
        CHECK(bad == 0, "im2col of half values, %s, %zu elements: %zu differ from wgrad_index.h",
              bf ? "bfloat16" : "float16", ncol, bad);
        bad = 0;
        for (size_t i = 0; i < ny; ++i) bad += dyc[i] != dy[amp_cnhw_src(d.nb, n, ohw, i)];
        CHECK(bad == 0, "gradient by channel, %s, %zu elements: %zu differ", bf ? "bfloat16" : "float16",
              ny, bad);
        LAUNCH(amp_gpu_gemm_half(dt, 0, 1, n, cols, k, ddyc, k, dcol, k, 1, dh, cols, ERR));
        CUDA(cudaMemcpy(got.data(), dh, got.size() * 4, cudaMemcpyDeviceToHost));
        bad = 0;
        double largest = 0;
        for (int f = 0; f < n; ++f)
            for (int r = 0; r < cols; ++r) {
                double sum = hist[(size_t)f * cols + r];
                for (int q = 0; q < k; ++q) {
                    const long long src = amp_im2col_src(d, (size_t)r * k + q);
                    if (src >= 0) sum += (double)dyf[(size_t)(q / ohw * n + f) * ohw + q % ohw] * xf[src];
                }
                largest = fabs(sum) > largest ? fabs(sum) : largest;
                bad += got[(size_t)f * cols + r] != (float)sum;
            }
        /* the measurement switch's add (DARKNET_AMP_GPU_WGRAD=cudnn): y += float(h) * 2^6 */
        std::vector<float> y0(got), y1(got.size());
        float *dy2 = dev<float>(got.size());
        CUDA(cudaMemcpy(dy2, y0.data(), y0.size() * 4, cudaMemcpyHostToDevice));
        LAUNCH(amp_cuda_add_half_scaled(ddy, dy2, got.size(), 64.0f, dt, 0, ERR));
        CUDA(cudaMemcpy(y1.data(), dy2, y1.size() * 4, cudaMemcpyDeviceToHost));
        size_t bad2 = 0;
        for (size_t i = 0; i < y1.size(); ++i) bad2 += y1[i] != y0[i] + dyf[i] * 64.0f;
        CHECK(bad2 == 0, "y += float(h) * 64, %s, %zu elements: %zu differ", bf ? "bfloat16" : "float16",
              y1.size(), bad2);
        cudaFree(dy2);
        CHECK(bad == 0 && largest > 65504,
              "weight gradient GEMM into the float32 history, %s, K %d: %zu of %zu differ from the "
              "exact sum; largest %.0f (beyond float16's 65504: never rounded to half)",
              bf ? "bfloat16" : "float16", k, bad, got.size(), largest);
        cudaFree(dxh), cudaFree(ddy), cudaFree(dcol), cudaFree(ddyc), cudaFree(dh);
    }
}

int main(void)
{
    if (!device_present()) return 77;
    conversions();
    rounding();
    unscale_check();
    scale_trace();
    clip();
    weight_gradient();
    return device_report();
}

/* The GPU half path's device-free decisions (cuda/gpu_plan.c), on the host:
 * - darknet's row-major GEMM written as cuBLAS's column-major call: the
 *   three GEMMs of a connected layer (forward, weight and data gradients),
 *   run through a plain column-major reference GEMM with the mapped
 *   arguments, against a plain row-major one with darknet's (exact: small
 *   integers, every sum exact in float32);
 * - the choice among cuDNN's ranked algorithms (first supported one within
 *   the workspace limit, -1 when none);
 * - convolution dimensions: darknet's output size, groups, refusals;
 * - a half convolution's weight gradient as the GPU computes it (half_conv.c):
 *   the operands laid out by wgrad_index.h's index math (the kernels' own),
 *   the batch cut into chunks (amp_wgrad_chunk), one mapped GEMM per chunk
 *   and group accumulated with beta 1, against a direct sum over images,
 *   positions and window (exact: small integers);
 *   and the same from the activation plan's NHWC input and gradient (col
 *   gathered from NHWC, dy read transposed in place);
 * - the NHWC index functions (math/nhwc.h) against darknet's NCHW order;
 * - the activation plan's storage on the device (amp_gpu_storage_of): for
 *   every case the plan makes, each pass has what it reads and nothing
 *   darknet's float32 tail reads is freed;
 * - the chunk sizes: within the byte limit, K within an int, at least 1.
 */
#include "check.h"
#include "gpu_plan.h"
#include "wgrad_index.h"

#include <stdlib.h>
#include <string.h>

/* Row-major C (M x N) = op(A) op(B), darknet's gemm_cpu semantics, beta 0. */
static void gemm_rowmajor(int ta, int tb, int m, int n, int k, const float *a, int lda,
                          const float *b, int ldb, float *c, int ldc)
{
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            float s = 0;
            for (int p = 0; p < k; ++p)
                s += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            c[i * ldc + j] = s;
        }
}

/* Column-major C (m x n) = op(A) op(B), BLAS semantics, beta 0. */
static void gemm_colmajor(int ta, int tb, int m, int n, int k, const float *a, int lda,
                          const float *b, int ldb, float *c, int ldc)
{
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            float s = 0;
            for (int p = 0; p < k; ++p)
                s += (ta ? a[i * lda + p] : a[p * lda + i]) * (tb ? b[p * ldb + j] : b[j * ldb + p]);
            c[j * ldc + i] = s;
        }
}

static void fill(float *x, size_t n, int seed)
{
    srand((unsigned)seed);
    for (size_t i = 0; i < n; ++i) x[i] = (float)(rand() % 7 - 3);
}

/* One darknet call, both ways; returns the number of differing elements. */
static int gemm_case(const char *what, int ta, int tb, int m, int n, int k, int lda, int ldb,
                     int ldc)
{
    float *a = malloc(sizeof(float) * (size_t)m * k), *b = malloc(sizeof(float) * (size_t)k * n);
    float *c1 = malloc(sizeof(float) * (size_t)m * n), *c2 = malloc(sizeof(float) * (size_t)m * n);
    fill(a, (size_t)m * k, 1);
    fill(b, (size_t)k * n, 2);
    gemm_rowmajor(ta, tb, m, n, k, a, lda, b, ldb, c1, ldc);
    memset(c2, 0xff, sizeof(float) * (size_t)m * n); /* NaN until written */
    amp_gemm_call g = amp_gemm_colmajor(ta, tb, m, n, k, lda, ldb, ldc);
    gemm_colmajor(g.trans_first, g.trans_second, g.m, g.n, g.k, b, g.ld_first, a, g.ld_second, c2,
                  g.ldc);
    int diff = 0;
    for (int i = 0; i < m * n; ++i) diff += c1[i] != c2[i];
    CHECK(diff == 0 && g.first_is_b,
          "%s: gemm(TA=%d, TB=%d, M=%d, N=%d, K=%d) as cuBLAS(op %c, op %c, %d, %d, %d, ld %d, %d, "
          "%d): %d of %d elements differ",
          what, ta, tb, m, n, k, g.trans_first ? 'T' : 'N', g.trans_second ? 'T' : 'N', g.m, g.n,
          g.k, g.ld_first, g.ld_second, g.ldc, diff, m * n);
    free(a), free(b), free(c1), free(c2);
    return diff;
}

/* A convolution's weight gradient both ways (see the header); returns the
 * number of differing elements. */
static int wgrad_case(int batch, int c, int h, int w, int n, int size, int stride, int pad,
                      int groups, int chunk)
{
    const int oh = (h + 2 * pad - size) / stride + 1, ow = (w + 2 * pad - size) / stride + 1;
    const int cg = c / groups, ng = n / groups, cols = cg * size * size;
    const size_t ohw = (size_t)oh * ow, nx = (size_t)batch * c * h * w, ny = batch * n * ohw;
    const size_t nw = (size_t)n * cols;
    float *x = malloc(sizeof(float) * nx), *dy = malloc(sizeof(float) * ny);
    float *ref = calloc(nw, sizeof(float)), *got = calloc(nw, sizeof(float));
    float *col = malloc(sizeof(float) * (size_t)c * size * size * chunk * ohw);
    float *dyc = malloc(sizeof(float) * (size_t)n * chunk * ohw);
    float *part = malloc(sizeof(float) * nw);
    fill(x, nx, 3);
    fill(dy, ny, 4);
    for (int b = 0; b < batch; ++b)
        for (int f = 0; f < n; ++f)
            for (int ci = 0; ci < cg; ++ci)
                for (int ky = 0; ky < size; ++ky)
                    for (int kx = 0; kx < size; ++kx)
                        for (int oy = 0; oy < oh; ++oy)
                            for (int ox = 0; ox < ow; ++ox) {
                                const int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                                const int cin = f / ng * cg + ci;
                                ref[((size_t)f * cg + ci) * size * size + ky * size + kx] +=
                                    dy[((size_t)b * n + f) * ohw + oy * ow + ox] *
                                    x[(((size_t)b * c + cin) * h + iy) * w + ix];
                            }
    for (int b0 = 0; b0 < batch; b0 += chunk) {
        const int nb = batch - b0 < chunk ? batch - b0 : chunk, k = nb * (int)ohw;
        const amp_im2col_dims d = {nb, c, h, w, size, stride, pad, oh, ow};
        for (size_t i = 0; i < amp_im2col_elems(d); ++i) {
            const long long src = amp_im2col_src(d, i);
            col[i] = src < 0 ? 0 : x[(size_t)b0 * c * h * w + (size_t)src];
        }
        for (size_t i = 0; i < (size_t)n * k; ++i)
            dyc[i] = dy[(size_t)b0 * n * ohw + amp_cnhw_src(nb, n, ohw, i)];
        for (int j = 0; j < groups; ++j) {
            /* half_conv.c's call: gemm(0, 1, ng, cols, k, dyc_j, k, col_j, k, 1, dW_j, cols) */
            amp_gemm_call g = amp_gemm_colmajor(0, 1, ng, cols, k, k, k, cols);
            gemm_colmajor(g.trans_first, g.trans_second, g.m, g.n, g.k,
                          col + (size_t)j * cols * k, g.ld_first, dyc + (size_t)j * ng * k,
                          g.ld_second, part, g.ldc);
            for (size_t e = 0; e < (size_t)ng * cols; ++e) got[(size_t)j * ng * cols + e] += part[e];
        }
    }
    int diff = 0;
    for (size_t i = 0; i < nw; ++i) diff += ref[i] != got[i];
    CHECK(diff == 0,
          "weight gradient of a %dx%d conv, %d->%d channels, stride %d, pad %d, %d groups, batch "
          "%d in chunks of %d: %d of %zu elements differ from the direct sum",
          size, size, c, n, stride, pad, groups, batch, chunk, diff, nw);
    /* The activation plan's NHWC tensors (math/nhwc.h): col from the NHWC
     * input (amp_im2col_src2_nhwc), stored with 3 channels of padding that
     * must not be read (a padded image's), dy read in place, transposed
     * (the group's filters are columns j ng .. of dy[b * ohw + p][n]). */
    const int cs = c + 3;
    const size_t nxs = (size_t)batch * cs * h * w;
    float *xh = malloc(sizeof(float) * nxs), *dyh = malloc(sizeof(float) * ny);
    for (size_t i = 0; i < nxs; ++i) xh[i] = 1000.f; /* the padding: never read */
    for (int b = 0; b < batch; ++b)
        for (int ci = 0; ci < c; ++ci)
            for (long p = 0; p < (long)h * w; ++p)
                xh[amp_nhwc_at(b, ci, p, cs, (long)h * w)] = x[amp_nchw_at(b, ci, p, c, (long)h * w)];
    for (size_t i = 0; i < ny; ++i) dyh[amp_nhwc_of_nchw((long)i, n, (long)ohw)] = dy[i];
    memset(got, 0, nw * sizeof(float));
    for (int b0 = 0; b0 < batch; b0 += chunk) {
        const int nb = batch - b0 < chunk ? batch - b0 : chunk, k = nb * (int)ohw;
        const amp_im2col_dims d = {nb, c, h, w, size, stride, pad, oh, ow};
        const size_t ccols = (size_t)nb * ohw;
        for (size_t i = 0; i < amp_im2col_elems(d); ++i) {
            const long long src = amp_im2col_src2_nhwc(d, cs, (int)(i / ccols), (int)(i % ccols));
            col[i] = src < 0 ? 0 : xh[(size_t)b0 * cs * h * w + (size_t)src];
        }
        for (int j = 0; j < groups; ++j) {
            /* gemm(1, 1, ng, cols, k, dy_j, n, col_j, k, 1, dW_j, cols) */
            amp_gemm_call g = amp_gemm_colmajor(1, 1, ng, cols, k, n, k, cols);
            gemm_colmajor(g.trans_first, g.trans_second, g.m, g.n, g.k,
                          col + (size_t)j * cols * k, g.ld_first,
                          dyh + (size_t)b0 * n * ohw + (size_t)j * ng, g.ld_second, part, g.ldc);
            for (size_t e = 0; e < (size_t)ng * cols; ++e) got[(size_t)j * ng * cols + e] += part[e];
        }
    }
    int diff2 = 0;
    for (size_t i = 0; i < nw; ++i) diff2 += ref[i] != got[i];
    CHECK(diff2 == 0,
          "the same from NHWC input (%d channels stored as %d) and gradient (the activation "
          "plan's): %d of %zu elements differ from the direct sum", c, cs, diff2, nw);
    /* A 1x1 convolution of stride 1 without padding (amp_wgrad_direct): no
     * columns gathered, the NHWC input read in place, not transposed, rows
     * of cs stored channels (the padding never read) */
    int diff3 = 0;
    const amp_im2col_dims all = {batch, c, h, w, size, stride, pad, oh, ow};
    if (amp_wgrad_direct(all)) {
        memset(got, 0, nw * sizeof(float));
        for (int b0 = 0; b0 < batch; b0 += chunk) {
            const int nb = batch - b0 < chunk ? batch - b0 : chunk, k = nb * (int)ohw;
            for (int j = 0; j < groups; ++j) {
                /* half_conv.c's call: gemm(1, 0, ng, cols, k, dy_j, n, x_j, cs, 1, dW_j, cols) */
                amp_gemm_call g = amp_gemm_colmajor(1, 0, ng, cols, k, n, cs, cols);
                gemm_colmajor(g.trans_first, g.trans_second, g.m, g.n, g.k,
                              xh + (size_t)b0 * cs * h * w + (size_t)j * cg, g.ld_first,
                              dyh + (size_t)b0 * n * ohw + (size_t)j * ng, g.ld_second, part,
                              g.ldc);
                for (size_t e = 0; e < (size_t)ng * cols; ++e)
                    got[(size_t)j * ng * cols + e] += part[e];
            }
        }
        for (size_t i = 0; i < nw; ++i) diff3 += ref[i] != got[i];
        CHECK(diff3 == 0, "the same read in place (a 1x1 convolution, %d channels stored as %d, "
              "%d groups): %d of %zu elements differ from the direct sum", c, cs, groups, diff3,
              nw);
    }
    free(xh), free(dyh);
    free(x), free(dy), free(ref), free(got), free(col), free(dyc), free(part);
    return diff + diff2 + diff3;
}

/* DARKNET_AMP_GPU_PLAN: the activation plan unless float32; other values
 * refused, named. */
static void plan_setting(void)
{
    const struct {
        const char *value;
        amp_status st;
        int plan;
    } cases[] = {{NULL, AMP_OK, 1},     {"", AMP_OK, 1},          {"half", AMP_OK, 1},
                 {"float32", AMP_OK, 0}, {"fp32", AMP_ERR_INVALID, -1},
                 {"Half", AMP_ERR_INVALID, -1}, {"half ", AMP_ERR_INVALID, -1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
        char err[256] = "";
        int plan = -1;
        const amp_status st = amp_gpu_plan_setting(cases[k].value, &plan, err, sizeof err);
        const int named = st == AMP_OK || (cases[k].value && strstr(err, cases[k].value) &&
                                           strstr(err, "DARKNET_AMP_GPU_PLAN"));
        CHECK(st == cases[k].st && plan == cases[k].plan && named,
              "DARKNET_AMP_GPU_PLAN=%s: status %d, plan %d (expected %d, %d); message '%s'",
              cases[k].value ? cases[k].value : "(unset)", (int)st, plan, (int)cases[k].st,
              cases[k].plan, err);
    }
}

int main(void)
{
    plan_setting();
    /* The weight gradient's layout: 3x3 pad 1, strided, grouped, 1x1, chunks
     * that divide the batch and one that does not. */
    wgrad_case(3, 4, 6, 5, 6, 3, 1, 1, 1, 3);
    wgrad_case(3, 4, 7, 6, 6, 3, 2, 1, 1, 2);
    wgrad_case(4, 6, 5, 5, 4, 3, 1, 1, 2, 3);
    wgrad_case(5, 8, 4, 4, 8, 3, 1, 1, 8, 2); /* depthwise */
    wgrad_case(3, 5, 4, 6, 7, 1, 1, 0, 1, 1);
    wgrad_case(4, 6, 3, 5, 4, 1, 1, 0, 2, 3); /* 1x1, grouped, read in place */
    wgrad_case(2, 3, 6, 6, 4, 2, 2, 0, 1, 2); /* darknet's 2x2 stride 2, rounded down */

    /* A yolo layer's activation in three operations (amp_yolo_kept_of):
     * every output element either activated by darknet's loop over images
     * and anchors or in the block copied back from the input, never both */
    {
        const int shapes[][5] = {{13, 13, 3, 80, 2}, {5, 4, 3, 4, 3}, {1, 1, 1, 1, 1},
                                 {26, 26, 3, 80, 1}, {7, 9, 5, 0, 2}};
        for (int t = 0; t < 5; ++t) {
            const int w = shapes[t][0], h = shapes[t][1], n = shapes[t][2];
            const int classes = shapes[t][3], batch = shapes[t][4];
            const int outputs = n * w * h * (4 + 1 + classes);
            const size_t total = (size_t)outputs * batch;
            unsigned char *mark = calloc(total, 1);
            for (int b = 0; b < batch; ++b)
                for (int k = 0; k < n; ++k) { /* darknet's forward_yolo_layer_gpu */
                    const int at = b * outputs + k * w * h * (4 + classes + 1);
                    for (int i = 0; i < 2 * w * h; ++i) mark[at + i] |= 1;
                    for (int i = 0; i < (1 + classes) * w * h; ++i) mark[at + 4 * w * h + i] |= 1;
                }
            const amp_yolo_kept kp = amp_yolo_kept_of(w, h, n, classes, batch);
            size_t outside = 0;
            for (size_t r = 0; r < kp.rows; ++r)
                for (size_t i = 0; i < kp.width; ++i) {
                    const size_t at = kp.first + r * kp.pitch + i;
                    if (at < total) mark[at] |= 2;
                    else ++outside;
                }
            size_t bad = 0;
            for (size_t i = 0; i < total; ++i) bad += mark[i] != 1 && mark[i] != 2;
            CHECK(bad == 0 && outside == 0 && kp.rows * kp.pitch == total,
                  "yolo %dx%d, %d anchors, %d classes, batch %d: the copy back (%zu rows of %zu "
                  "at %zu, pitch %zu) and darknet's activated entries: %zu elements in neither "
                  "or both, %zu outside", w, h, n, classes, batch, kp.rows, kp.width, kp.first,
                  kp.pitch, bad, outside);
            free(mark);
        }
    }

    /* The NHWC index functions: a bijection onto [0, n), the flat NCHW
     * index's element */
    {
        const int nb = 3, c = 5;
        const long hw = 7 * 6, n = nb * c * hw;
        char *seen = calloc((size_t)n, 1);
        long bad = 0;
        for (int b = 0; b < nb; ++b)
            for (int ci = 0; ci < c; ++ci)
                for (long p = 0; p < hw; ++p) {
                    const long f = amp_nchw_at(b, ci, p, c, hw), t = amp_nhwc_at(b, ci, p, c, hw);
                    bad += f != (b * c + ci) * hw + p || t < 0 || t >= n || seen[t]++ ||
                           amp_nhwc_of_nchw(f, c, hw) != t || t != (b * hw + p) * c + ci;
                }
        CHECK(bad == 0, "NHWC indexes of %ld elements: each once, the NCHW element's (%ld wrong)",
              n, bad);
        free(seen);
    }

    /* The activation plan's storage on the device (amp_gpu_storage_of), for
     * every combination the plan makes: a half convolution (converts) or
     * not, its output and its input half or not (its backward the first to
     * add into that delta or not), batch-norm, an activation whose gradient
     * needs its input; x_half as plan.c sets it. What the
     * planned forward and backward read and write must exist, and nothing
     * darknet's float32 tail still reads may be freed. */
    {
        int combos = 0, bad = 0;
        for (int m = 0; m < 64; ++m) {
            amp_gpu_layer_plan p = {.converts = m & 1, .out_half = m >> 1 & 1,
                                    .in_half = m >> 2 & 1, .batch_normalize = m >> 3 & 1,
                                    .needs_input = m >> 4 & 1, .in_first = m >> 5 & 1};
            if (p.in_first && !p.in_half) continue; /* no half delta to be first into */
            p.x_half = p.converts && (p.batch_normalize || (p.out_half && p.needs_input));
            const amp_gpu_storage t = amp_gpu_storage_of(&p);
            int why = 0;
            /* the output stored as the plan says, its delta in the pool */
            why |= (t.output_half != p.out_half) << 0;
            if (p.converts) {
                const int in_place = t.planned && p.in_half; /* the previous half output */
                /* forward: an input to read, somewhere to write the convolution */
                why |= !(in_place || t.in_scratch) << 1;
                why |= !(t.x_h || (t.planned && p.out_half) || t.out_scratch) << 2;
                /* backward: the data gradient straight into a zero half delta, or
                 * through half scratch (added: half(delta + half(dx)), as the CPU
                 * plan adds), or widened into a float32 delta */
                why |= !((in_place && p.in_first) || (t.dx_scratch && (in_place || !t.planned ||
                                                                      t.dx32_scratch)))
                       << 3;
                /* nothing darknet's float32 tail reads freed */
                why |= (t.darknet_tail && (t.drop_x || t.drop_activation_input)) << 4;
                /* what is freed made again by the half tail, from x in half */
                why |= (t.drop_x && !t.x_h) << 5;
                why |= (t.drop_activation_input && !(t.x_h && t.planned && p.out_half)) << 6;
                /* a half output's tail needs its batch-norm input in half */
                why |= (t.planned && p.out_half && p.batch_normalize && !t.x_h) << 7;
                /* no scratch where the plan's tensors serve */
                why |= (in_place && (t.in_scratch || t.dx32_scratch)) << 8;
                why |= (in_place && p.in_first && t.dx_scratch) << 13;
                why |= (t.planned && p.out_half && t.out_scratch) << 9;
                why |= (t.planned && t.dyc_scratch) << 10;
                /* no half neighbour: the layer as without the plan (a half
                 * batch-norm input alone changes nothing on the device) */
                why |= (!p.out_half && !p.in_half &&
                        (t.planned || !t.in_scratch || !t.dx_scratch || !t.out_scratch ||
                         !t.dyc_scratch || t.x_h || t.drop_x)) << 11;
            } else {
                why |= (t.planned || t.x_h || t.drop_x || t.drop_activation_input || t.in_scratch ||
                        t.dx_scratch || t.out_scratch || t.dx32_scratch || t.dyc_scratch) << 12;
            }
            if (why) {
                ++bad;
                printf("  storage of converts %d, out_half %d, in_half %d (first %d), batch-norm "
                       "%d, needs input %d: rules 0x%x broken\n", p.converts, p.out_half,
                       p.in_half, p.in_first, p.batch_normalize, p.needs_input, why);
            }
            ++combos;
        }
        CHECK(bad == 0, "the plan's device storage: %d of %d layer cases give every pass what it "
                        "reads and free nothing darknet's tail reads", combos - bad, combos);
    }

    /* Chunk sizes. */
    CHECK(amp_wgrad_chunk(64, 1000, 100, 1 << 20) == 64, "all 64 images fit 1 MiB: %d",
          amp_wgrad_chunk(64, 1000, 100, 1 << 20));
    CHECK(amp_wgrad_chunk(64, 100000, 100, 1 << 20) == 10, "1 MiB holds 10 images of 100 kB: %d",
          amp_wgrad_chunk(64, 100000, 100, 1 << 20));
    CHECK(amp_wgrad_chunk(64, (size_t)1 << 30, 100, 1 << 20) == 1,
          "an image larger than the limit still gets a chunk of 1: %d",
          amp_wgrad_chunk(64, (size_t)1 << 30, 100, 1 << 20));
    CHECK(amp_wgrad_chunk(64, 1, (size_t)1 << 26, (size_t)1 << 40) == 31,
          "K = images x 2^26 positions within an int: %d images (expected 31)",
          amp_wgrad_chunk(64, 1, (size_t)1 << 26, (size_t)1 << 40));

    /* A connected layer, batch 3, 5 inputs, 4 outputs (half_gemm.c's calls). */
    const int batch = 3, in = 5, out = 4;
    gemm_case("forward", 0, 1, batch, out, in, in, in, out);
    gemm_case("weight gradient", 1, 0, out, in, batch, out, in, in);
    gemm_case("data gradient", 0, 0, batch, in, out, out, in, in);

    /* Algorithm choice. */
    amp_algo_candidate c[] = {{6, 0, 0, 1}, {1, 1, 5000, 0}, {0, 1, 100, 1}, {2, 1, 0, 0}};
    CHECK(amp_algo_pick(c, 4, 10000) == 1, "the fastest supported candidate within the limit: "
                                           "index %d (expected 1)", amp_algo_pick(c, 4, 10000));
    CHECK(amp_algo_pick(c, 4, 1000) == 2, "a candidate over the limit is passed over: index %d "
                                          "(expected 2)", amp_algo_pick(c, 4, 1000));
    CHECK(amp_algo_pick(c, 1, 1000) == -1, "no supported candidate: %d (expected -1)",
          amp_algo_pick(c, 1, 1000));
    CHECK(amp_algo_pick(c, 0, 1000) == -1, "no candidate at all: %d (expected -1)",
          amp_algo_pick(c, 0, 1000));
    /* the planned form's: the first deterministic one that fits, else any */
    amp_algo_candidate dc[] = {{0, 1, 100, 0}, {1, 1, 5000, 1}, {2, 1, 200, 1}, {3, 0, 0, 1}};
    CHECK(amp_algo_pick_deterministic(dc, 4, 10000) == 1,
          "the fastest deterministic candidate within the limit: index %d (expected 1)",
          amp_algo_pick_deterministic(dc, 4, 10000));
    CHECK(amp_algo_pick_deterministic(dc, 4, 1000) == 2,
          "a deterministic one over the limit passed over: index %d (expected 2)",
          amp_algo_pick_deterministic(dc, 4, 1000));
    CHECK(amp_algo_pick_deterministic(dc, 1, 1000) == 0,
          "none deterministic: the fastest that fits, index %d (expected 0)",
          amp_algo_pick_deterministic(dc, 1, 1000));

    /* Convolution dimensions: darknet's out_h = (h + 2 pad - size) / stride + 1. */
    char why[256] = "";
    amp_conv_dims d;
    int r = amp_conv_dims_make(2, 32, 9, 10, 32, 3, 1, 1, 4, 9, 10, &d, why, sizeof why);
    CHECK(r == 0 && d.cg == 8 && d.k == 32 && d.groups == 4 && d.out_h == 9 && d.out_w == 10,
          "grouped 3x3: %s; 8 channels per group (got %d), output 10x9 (got %dx%d)",
          r ? why : "accepted", d.cg, d.out_w, d.out_h);
    r = amp_conv_dims_make(2, 32, 9, 10, 24, 2, 2, 0, 1, 4, 5, &d, why, sizeof why);
    CHECK(r == 0 && d.out_h == 4 && d.out_w == 5,
          "2x2 stride 2 on 10x9, rounded down as darknet does: %s, %dx%d", r ? why : "accepted",
          d.out_w, d.out_h);
    r = amp_conv_dims_make(2, 30, 9, 10, 32, 3, 1, 1, 4, 9, 10, &d, why, sizeof why);
    CHECK(r == 1, "groups not dividing the channels refused: %s", r ? why : "accepted");
    why[0] = 0;
    r = amp_conv_dims_make(2, 32, 9, 10, 32, 3, 1, 1, 1, 8, 10, &d, why, sizeof why);
    CHECK(r == 1 && strstr(why, "10x8"), "an output size cuDNN would not compute refused: %s",
          r ? why : "accepted");
    r = amp_conv_dims_make(4096, 1024, 1024, 1024, 16, 3, 1, 1, 1, 1024, 1024, &d, why,
                           sizeof why);
    CHECK(r == 1, "a 2^32-element input refused (cuDNN's 4-d descriptors take int): %s",
          r ? why : "accepted");
    return check_report();
}

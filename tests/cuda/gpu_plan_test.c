/* The GPU half path's device-free decisions (cuda/gpu_plan.c), on the host:
 * - darknet's row-major GEMM written as cuBLAS's column-major call: the
 *   three GEMMs of a connected layer (forward, weight and data gradients),
 *   run through a plain column-major reference GEMM with the mapped
 *   arguments, against a plain row-major one with darknet's (exact: small
 *   integers, every sum exact in float32);
 * - the choice among cuDNN's ranked algorithms (first supported one within
 *   the workspace limit, -1 when none);
 * - convolution dimensions: darknet's output size, groups, refusals.
 */
#include "check.h"
#include "gpu_plan.h"

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

int main(void)
{
    /* A connected layer, batch 3, 5 inputs, 4 outputs (half_gemm.c's calls). */
    const int batch = 3, in = 5, out = 4;
    gemm_case("forward", 0, 1, batch, out, in, in, in, out);
    gemm_case("weight gradient", 1, 0, out, in, batch, out, in, in);
    gemm_case("data gradient", 0, 0, batch, in, out, out, in, in);

    /* Algorithm choice. */
    amp_algo_candidate c[] = {{6, 0, 0}, {1, 1, 5000}, {0, 1, 100}, {2, 1, 0}};
    CHECK(amp_algo_pick(c, 4, 10000) == 1, "the fastest supported candidate within the limit: "
                                           "index %d (expected 1)", amp_algo_pick(c, 4, 10000));
    CHECK(amp_algo_pick(c, 4, 1000) == 2, "a candidate over the limit is passed over: index %d "
                                          "(expected 2)", amp_algo_pick(c, 4, 1000));
    CHECK(amp_algo_pick(c, 1, 1000) == -1, "no supported candidate: %d (expected -1)",
          amp_algo_pick(c, 1, 1000));
    CHECK(amp_algo_pick(c, 0, 1000) == -1, "no candidate at all: %d (expected -1)",
          amp_algo_pick(c, 0, 1000));

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

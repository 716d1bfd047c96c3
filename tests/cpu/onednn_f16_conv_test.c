/* The CPU's float16 path through oneDNN (float32 kernels on float16-rounded
 * operands, plugin/cpu/onednn_*.c) keeps every rounding point of the exact
 * emulation (plugin/cpu/emulated.c), the numerics reference. On linear.cfg
 * (convolutions with neither batch-norm nor a nonlinearity, so every value a
 * layer stores is what the next one reads), same weights, layer by layer:
 * each layer of both networks gets the same input (the emulation's) in the
 * forward and the same incoming gradient (the emulation's) in the backward,
 * so that no difference is carried from one layer to the next:
 * - rounding points that store a tensor: every layer's output (y) and data
 *   gradient (dx, added into the zeroed delta of the layer before) must be
 *   float16 values;
 * - rounding points of operands (x, W, dy): each pairs with the emulation,
 *   which sums the same exact products in another order, so a tensor may
 *   differ from it only where a float32 sum lands on the other side of a
 *   float16 rounding boundary: at most 1 float16 ulp per element, in at most
 *   MAX_DIFFER of the elements. An operand left unrounded shifts every sum by
 *   up to 2^-12 of its terms and changes far more (measured in the note of
 *   the commit that added this test; see docs/design.md);
 * - the weight gradient (dW, added into zeroed weight_updates) is no rounding
 *   point: float32 in both, not float16 values, and oneDNN's within float32
 *   summation noise of the emulation's (weight_gradient.h); the same check on
 *   oneDNN's rounded to float16 (planted) must fail.
 *
 *   onednn_f16_conv_test CFG        skipped (77) without oneDNN
 */
#include "core.h"
#include "cpu.h"
#include "check.h"
#include "math/half_format.h"
#include "nets.h"
#include "onednn_fallbacks.h"
#include "weight_gradient.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIFFER 0.02

/* Elements that are not float16 values. */
static size_t not_f16(const float *x, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += amp_round_f16(x[i]) != x[i];
    return bad;
}

/* Elements that differ, and whether any differs by more than one float16 ulp
 * of the larger of the two. */
static size_t differ(const float *a, const float *b, size_t n, int *over_ulp)
{
    size_t d = 0;
    *over_ulp = 0;
    for (size_t i = 0; i < n; ++i) {
        if (a[i] == b[i]) continue;
        ++d;
        const float m = fmaxf(fabsf(a[i]), fabsf(b[i]));
        int e;
        frexpf(m, &e);
        const float ulp = ldexpf(1.0f, (e - 1 < -14 ? -14 : e - 1) - 10);
        if (fabsf(a[i] - b[i]) > ulp * 1.0001f) *over_ulp = 1;
    }
    return d;
}

static void tensor(const char *what, int i, const float *emu, const float *dnn, size_t n)
{
    int over = 0;
    const size_t bad = not_f16(dnn, n), d = differ(emu, dnn, n, &over);
    CHECK(bad == 0, "layer %d %s: all %zu elements float16 values (%zu are not)", i, what, n, bad);
    CHECK(!over && d <= MAX_DIFFER * n,
          "layer %d %s: %zu of %zu elements (%.2f%%) differ from the emulation, by at most one "
          "float16 ulp%s (bound %.0f%%)",
          i, what, d, n, 100.0 * d / n, over ? ": NO, by more" : "", 100 * MAX_DIFFER);
}

/* The weight gradient: float32 sums in both, oneDNN's within float32
 * summation noise of the emulation's; and rounded to float16 (planted), not. */
static void weight_gradient(int i, const float *emu, const float *dnn, size_t n)
{
    size_t nz_emu = 0, nz_dnn = 0;
    const size_t h_emu = wg_half_values(AMP_DTYPE_FLOAT16, emu, n, &nz_emu);
    const size_t h_dnn = wg_half_values(AMP_DTYPE_FLOAT16, dnn, n, &nz_dnn);
    CHECK(nz_emu > 0 && h_emu <= WG_MAX_HALF_VALUES * nz_emu &&
              h_dnn <= WG_MAX_HALF_VALUES * nz_dnn,
          "layer %d weight gradient (dW): float32 sums, not rounded: %zu of %zu nonzero elements "
          "float16 values here, %zu of %zu in the emulation (bound %.0f%%)",
          i, h_dnn, nz_dnn, h_emu, nz_emu, 100 * WG_MAX_HALF_VALUES);
    const double l2 = wg_rel_l2(emu, dnn, n);
    CHECK(l2 <= WG_MAX_REL_L2,
          "layer %d weight gradient (dW): |diff|/|emulation's| %.2e (bound %.1e: float32 "
          "summation noise)", i, l2, WG_MAX_REL_L2);
    float *r = malloc(n * sizeof *r);
    if (!r) return;
    memcpy(r, dnn, n * sizeof *r);
    wg_round(AMP_DTYPE_FLOAT16, r, n);
    size_t nz = 0;
    const size_t h = wg_half_values(AMP_DTYPE_FLOAT16, r, n, &nz);
    const double rl2 = wg_rel_l2(emu, r, n);
    CHECK(h > WG_MAX_HALF_VALUES * nz && rl2 > WG_MAX_REL_L2,
          "layer %d weight gradient rounded to float16 (planted) caught: %zu of %zu float16 "
          "values, |diff|/|emulation's| %.2e", i, h, nz, rl2);
    free(r);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: onednn_f16_conv_test CFG\n");
        return 2;
    }
#ifndef AMP_HAVE_ONEDNN
    printf("SKIP: built without oneDNN\n");
    return 77;
#endif
    network *emu = test_half_static(argv[1], AMP_DTYPE_FLOAT16, "emulate");
    network *dnn = test_half_static(argv[1], AMP_DTYPE_FLOAT16, "auto");
    int through = 0;
    for (int i = 0; i < dnn->n; ++i)
        through += amp_cpu_layer_runner(&amp_net_of(dnn)->layers[i]) == AMP_CPU_RUNS_ONEDNN;
    if (!through) {
        printf("SKIP: no layer runs float16 through oneDNN here\n");
        return 77;
    }
    CHECK(through == dnn->n, "%d of %d convolutions run float16 through oneDNN", through, dnn->n);
    CHECK(onednn_conv_form_mismatches(dnn) == 0,
          "every convolution in the form DARKNET_AMP_CONV asks for");
    test_inputs(emu, 3, 0);
    for (int i = 0; i < dnn->n; ++i) {
        float *x = i ? emu->layers[i - 1].output : emu->input;
        test_forward_layer(emu, i, x);
        test_forward_layer(dnn, i, x);
        const layer *a = &emu->layers[i], *b = &dnn->layers[i];
        tensor("output (y)", i, a->output, b->output, (size_t)a->outputs * a->batch);
    }
    layer *last = &emu->layers[emu->n - 1];
    srand(5);
    for (int i = 0; i < last->outputs * last->batch; ++i)
        last->delta[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int i = dnn->n - 1; i >= 0; --i) {
        const layer *a = &emu->layers[i], *b = &dnn->layers[i];
        memcpy(b->delta, a->delta, (size_t)a->outputs * a->batch * sizeof(float)); /* same dy */
        float *x = i ? emu->layers[i - 1].output : emu->input;
        test_backward_layer(emu, i, x);
        test_backward_layer(dnn, i, x);
        weight_gradient(i, a->weight_updates, b->weight_updates, (size_t)a->nweights);
        if (i > 0)
            tensor("data gradient (dx, the delta before it)", i, emu->layers[i - 1].delta,
                   dnn->layers[i - 1].delta, (size_t)a->inputs * a->batch);
    }
    free_network(emu);
    free_network(dnn);
    return check_report();
}

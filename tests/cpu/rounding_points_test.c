/* The CPU's half paths through oneDNN (plugin/cpu/onednn_*.c: convolutions,
 * deconvolutions, inner products for connected layers and the connected
 * sub-layers of rnn, gru and lstm) keep every rounding point of the exact
 * emulation (plugin/cpu/emulated.c), the numerics reference: in float16
 * (float32 kernels on float16-rounded operands, each rounding a call of its
 * own) and in bfloat16 (oneDNN's bfloat16 tensors).
 *
 * On a cfg of such layers with neither batch-norm nor a nonlinearity (and
 * biases 0, as darknet initialises them), every value a layer stores is what
 * the next one reads. Same weights, layer by layer: each layer of both
 * networks gets the same input (the emulation's) in the forward and the same
 * incoming gradient (the emulation's) in the backward, so that no difference
 * is carried from one layer to the next:
 * - rounding points that store a tensor: every layer's output (y) and data
 *   gradient (dx, added into the zeroed delta of the layer before) must be
 *   half values;
 * - rounding points of operands (x, W, dy): each pairs with the emulation,
 *   which sums the same exact products in another order, so a tensor may
 *   differ from it only where a float32 sum lands on the other side of a
 *   half rounding boundary: at most 1 half ulp per element (plus float32
 *   summation noise where a sum cancels: differ()), in at most MAX_DIFFER of
 *   the elements. An operand left unrounded shifts every sum by
 *   up to half an ulp of its terms and changes far more (measured by planting
 *   each drop: docs/testing.md);
 * - the weight gradient (dW, added into zeroed weight_updates) is no rounding
 *   point: float32 in both, so neither may be half values, and oneDNN's
 *   within float32 summation noise of the emulation's (weight_gradient.h).
 *   --drop-each also plants a weight gradient rounded to half, which must be
 *   caught.
 * A recurrent layer's sub-layers are called as darknet calls them (patch
 * 0008): once per time step, each step with its own input and its arrays
 * offset to that step, forward over the steps, then backward from the last
 * step to the first; a sub-layer's backward must round that step's input
 * again (its forward last rounded the last step's). The parent layers
 * themselves do not run (darknet's CPU rnn and lstm cannot), so the cfg's
 * recurrent layers are tested through their sub-layers alone.
 *
 *   rounding_points_test [--bfloat16] CFG     float16 by default; skipped (77)
 *                                           without oneDNN or where no layer
 *                                           goes through it
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

static amp_dtype dtype = AMP_DTYPE_FLOAT16;

static float round_half(float x)
{
    return dtype == AMP_DTYPE_BFLOAT16 ? amp_round_bf16(x) : amp_round_f16(x);
}

/* Elements that are not half values. */
static size_t not_half(const float *x, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += round_half(x[i]) != x[i];
    return bad;
}

/* Elements that differ; of them, how many by more than one half ulp of the
 * larger of the two (float16: 10 fraction bits, normal from 2^-14; bfloat16:
 * 7, float32's range), and whether any by more than that plus NOISE times
 * the tensor's largest value. The emulation and oneDNN add the same exact
 * products in other orders; where a sum cancels to a value whose half ulp is
 * below the float32 rounding of its partial sums (float16's subnormals and
 * smallest normals: its ulp there is 2^-24, float32's at 1), the two can
 * differ by that rounding too: measured 2 float16 ulps (1.2e-7) at
 * -2.04e-5 in an rnn sub-layer's output whose largest value is ~2. */
#define NOISE 0x1p-20
static size_t differ(const float *a, const float *b, size_t n, size_t *beyond_ulp, int *over)
{
    const int bits = dtype == AMP_DTYPE_BFLOAT16 ? 7 : 10;
    const int emin = dtype == AMP_DTYPE_BFLOAT16 ? -126 : -14;
    float max = 0;
    for (size_t i = 0; i < n; ++i) max = fmaxf(max, fabsf(a[i]));
    size_t d = 0;
    *beyond_ulp = 0;
    *over = 0;
    for (size_t i = 0; i < n; ++i) {
        if (a[i] == b[i]) continue;
        ++d;
        const float m = fmaxf(fabsf(a[i]), fabsf(b[i]));
        int e;
        frexpf(m, &e);
        const float ulp = ldexpf(1.0f, (e - 1 < emin ? emin : e - 1) - bits);
        const float diff = fabsf(a[i] - b[i]);
        *beyond_ulp += diff > ulp * 1.0001f;
        if (diff > ulp * 1.0001f + (float)NOISE * max) *over = 1;
    }
    return d;
}

static size_t nweights(const layer *l)
{
    return l->type == CONNECTED ? (size_t)l->inputs * l->outputs : (size_t)l->nweights;
}

/* --drop-each: a rounding point left out of the oneDNN path (planted); the
 * tensors are then checked without a line each, and counted when outside
 * the bounds. */
static int quiet, caught;
static char first_caught[256];

static void tensor(const char *what, const float *emu, const float *dnn, size_t n)
{
    int over = 0;
    size_t beyond = 0;
    const size_t bad = not_half(dnn, n), d = differ(emu, dnn, n, &beyond, &over);
    const char *type = amp_dtype_name(dtype);
    if (quiet) {
        if ((bad || over || d > MAX_DIFFER * n) && !caught++)
            snprintf(first_caught, sizeof first_caught,
                     "%s: %zu of %zu elements not %s values, %zu differ from the emulation, %zu "
                     "by more than one ulp", what, bad, n, type, d, beyond);
        return;
    }
    CHECK(bad == 0, "%s: all %zu elements %s values (%zu are not)", what, n, type, bad);
    CHECK(!over && d <= MAX_DIFFER * n,
          "%s: %zu of %zu elements (%.2f%%) differ from the emulation (bound %.0f%%), %zu of "
          "them by more than one %s ulp, %s",
          what, d, n, 100.0 * d / n, 100 * MAX_DIFFER, beyond, type,
          over ? "NOT within float32 summation noise" : "within float32 summation noise");
}

/* --drop-each: the oneDNN path's weight gradient rounded to half before it is
 * checked (planted, as a path that rounded it would leave it). */
static int round_dw;

/* A weight gradient: float32 in both (not half values), oneDNN's within
 * float32 summation noise of the emulation's (weight_gradient.h). */
static void weight_gradient(const char *what, const float *emu, float *dnn, size_t n)
{
    if (round_dw) wg_round(dtype, dnn, n);
    size_t nz_emu = 0, nz_dnn = 0;
    const size_t h_emu = wg_half_values(dtype, emu, n, &nz_emu);
    const size_t h_dnn = wg_half_values(dtype, dnn, n, &nz_dnn);
    const double l2 = wg_rel_l2(emu, dnn, n);
    const int halves = h_emu > WG_MAX_HALF_VALUES * nz_emu || h_dnn > WG_MAX_HALF_VALUES * nz_dnn;
    const char *type = amp_dtype_name(dtype);
    if (quiet) {
        if ((halves || !(l2 <= WG_MAX_REL_L2)) && !caught++)
            snprintf(first_caught, sizeof first_caught,
                     "%s: %zu of %zu nonzero elements %s values, |diff|/|emulation's| %.2e",
                     what, h_dnn, nz_dnn, type, l2);
        return;
    }
    CHECK(nz_emu > 0 && !halves,
          "%s: float32 sums, not rounded: %zu of %zu nonzero elements %s values here, %zu of %zu "
          "in the emulation (bound %.0f%%)",
          what, h_dnn, nz_dnn, type, h_emu, nz_emu, 100 * WG_MAX_HALF_VALUES);
    CHECK(l2 <= WG_MAX_REL_L2,
          "%s: |diff|/|emulation's| %.2e (bound %.1e: float32 summation noise)", what, l2,
          WG_MAX_REL_L2);
}

static void random_fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; ++i) x[i] = ((float)rand() / RAND_MAX * 2 - 1) * scale;
}

/* An incoming gradient: random, and every 16th element below half of
 * float16's smallest subnormal (2^-25), so that rounding it to float16
 * flushes it to zero (amp_network_flushed counts it). */
static void random_gradient(float *dy, size_t n)
{
    random_fill(dy, n, 0.5f);
    for (size_t i = 0; i < n; i += 16) dy[i] *= 0x1p-26f;
}

/* A sub-layer's arrays at time step t, as darknet's increment_layer leaves them. */
static layer at_step(const layer *s, int t)
{
    layer c = *s;
    const size_t off = (size_t)s->outputs * s->batch * t;
    c.output += off;
    c.delta += off;
    if (c.x) c.x += off;
    if (c.x_norm) c.x_norm += off;
    return c;
}

/* Recurrent layer i's sub-layers, each over the layer's time steps. */
static void sublayers(network *emu, network *dnn, int i)
{
    layer *se[AMP_MAX_SUBLAYERS], *sd[AMP_MAX_SUBLAYERS];
    const char *names[AMP_MAX_SUBLAYERS];
    const int ns = amp_sublayers(&emu->layers[i], se, names), steps = emu->layers[i].steps;
    amp_sublayers(&dnn->layers[i], sd, names);
    char what[128];
    for (int k = 0; k < ns; ++k) {
        const layer *a = se[k], *b = sd[k];
        const size_t nin = (size_t)a->inputs * a->batch, nout = (size_t)a->outputs * a->batch;
        float *x = malloc(nin * steps * sizeof(float));
        float *dxa = malloc(nin * sizeof(float)), *dxb = malloc(nin * sizeof(float));
        random_fill(x, nin * steps, 1);
        for (int t = 0; t < steps; ++t) {
            network n = *emu;
            n.index = i;
            n.train = 1;
            n.input = x + nin * t;
            layer la = at_step(a, t), lb = at_step(b, t);
            la.forward(la, n);
            lb.forward(lb, n);
            snprintf(what, sizeof what, "layer %d %s step %d output (y)", i, names[k], t);
            tensor(what, la.output, lb.output, nout);
        }
        for (int t = steps - 1; t >= 0; --t) {
            network n = *emu;
            n.index = i;
            n.train = 1;
            n.input = x + nin * t;
            layer la = at_step(a, t), lb = at_step(b, t);
            random_gradient(la.delta, nout);
            memcpy(lb.delta, la.delta, nout * sizeof(float)); /* same dy */
            memset(a->weight_updates, 0, nweights(a) * sizeof(float));
            memset(b->weight_updates, 0, nweights(b) * sizeof(float));
            memset(dxa, 0, nin * sizeof(float));
            memset(dxb, 0, nin * sizeof(float));
            n.delta = dxa;
            la.backward(la, n);
            n.delta = dxb;
            lb.backward(lb, n);
            snprintf(what, sizeof what, "layer %d %s step %d weight gradient (dW)", i, names[k],
                     t);
            weight_gradient(what, a->weight_updates, b->weight_updates, nweights(a));
            snprintf(what, sizeof what, "layer %d %s step %d data gradient (dx)", i, names[k], t);
            tensor(what, dxa, dxb, nin);
        }
        free(x);
        free(dxa);
        free(dxb);
    }
}


/* The layers through oneDNN on float32 kernels with half-rounded operands
 * (their label says so), of those through oneDNN. */
static int on_float32_kernels(const network *net, int *through)
{
    int n = 0;
    *through = 0;
    for (int i = 0; i < net->n; ++i) {
        const amp_layer *al = &amp_net_of(net)->layers[i];
        if (amp_cpu_layer_runner(al) != AMP_CPU_RUNS_ONEDNN) continue;
        ++*through;
        n += al->label && strstr(al->label, "float32 kernels") != NULL;
    }
    return n;
}

/* Every layer of cfg through oneDNN against the emulation, with the rounding
 * points in unrounded left out of the oneDNN path; 77 where none runs there. */
static int compare(const char *cfg, unsigned unrounded)
{
    network *emu = test_half_static(cfg, dtype, "emulate");
    network *dnn = test_half_static(cfg, dtype, "auto");
    cpu_net_of(amp_net_of(dnn))->unrounded = unrounded;
    int through = 0;
    const int f32k = on_float32_kernels(dnn, &through);
    if (!through) {
        printf("SKIP: no layer runs %s through oneDNN here\n", amp_dtype_name(dtype));
        free_network(emu);
        free_network(dnn);
        return 77;
    }
    if (!quiet) {
        CHECK(through == dnn->n, "%d of %d layers run %s through oneDNN (%d of them on float32 "
              "kernels, %s operands)", through, dnn->n, amp_dtype_name(dtype), f32k,
              amp_dtype_name(dtype));
    } else {
        CHECK(f32k == dnn->n, "%d of %d layers on oneDNN's float32 kernels, %s operands, whose "
              "rounding points can be left out", f32k, dnn->n, amp_dtype_name(dtype));
    }
    char what[128];
    int recurrent = 0;
    for (int i = 0; i < emu->n; ++i) recurrent |= amp_net_of(emu)->layers[i].nsubs > 0;
    test_inputs(emu, 3, 0);
    if (recurrent) { /* a cfg of recurrent layers: their sub-layers on their own */
        for (int i = 0; i < emu->n; ++i)
            if (amp_net_of(emu)->layers[i].nsubs) sublayers(emu, dnn, i);
        goto done;
    }
    for (int i = 0; i < dnn->n; ++i) {
        float *x = i ? emu->layers[i - 1].output : emu->input;
        test_forward_layer(emu, i, x);
        test_forward_layer(dnn, i, x);
        const layer *a = &emu->layers[i], *b = &dnn->layers[i];
        snprintf(what, sizeof what, "layer %d output (y)", i);
        tensor(what, a->output, b->output, (size_t)a->outputs * a->batch);
    }
    layer *last = &emu->layers[emu->n - 1];
    srand(5);
    random_gradient(last->delta, (size_t)last->outputs * last->batch);
    for (int i = dnn->n - 1; i >= 0; --i) {
        const layer *a = &emu->layers[i], *b = &dnn->layers[i];
        memcpy(b->delta, a->delta, (size_t)a->outputs * a->batch * sizeof(float)); /* same dy */
        float *x = i ? emu->layers[i - 1].output : emu->input;
        test_backward_layer(emu, i, x);
        test_backward_layer(dnn, i, x);
        snprintf(what, sizeof what, "layer %d weight gradient (dW)", i);
        weight_gradient(what, a->weight_updates, b->weight_updates, nweights(a));
        snprintf(what, sizeof what, "layer %d data gradient (dx, the delta before it)", i);
        if (i > 0)
            tensor(what, emu->layers[i - 1].delta, dnn->layers[i - 1].delta,
                   (size_t)a->inputs * a->batch);
    }
done:
    if (!quiet) {
        CHECK(onednn_fallbacks(dnn) == 0, "no oneDNN layer ran in the emulation instead (%d did)",
              onednn_fallbacks(dnn));
        CHECK(onednn_conv_form_mismatches(dnn) == 0,
              "every convolution in the form DARKNET_AMP_CONV asks for");
        /* the incoming gradients' flushes, as amp_network_flushed reports
         * them: counted where the plugin rounds them (float32 kernels, and
         * the emulation); float16 flushes some, bfloat16 keeps float32's range */
        const cpu_net *ae = cpu_net_of(amp_net_of(emu)), *ad = cpu_net_of(amp_net_of(dnn));
        if (f32k == dnn->n)
            CHECK(ae->grad_nonzero == ad->grad_nonzero && ae->grad_flushed == ad->grad_flushed &&
                      (dtype != AMP_DTYPE_FLOAT16 || ad->grad_flushed > 0),
                  "incoming gradients: %llu of %llu nonzero elements flushed to zero (emulation: "
                  "%llu of %llu)",
                  ad->grad_flushed, ad->grad_nonzero, ae->grad_flushed, ae->grad_nonzero);
    }
    free_network(emu);
    free_network(dnn);
    return 0;
}

int main(int argc, char **argv)
{
    int drop_each = 0, a = 1;
    for (; a < argc - 1; ++a) {
        if (!strcmp(argv[a], "--bfloat16")) dtype = AMP_DTYPE_BFLOAT16;
        else if (!strcmp(argv[a], "--drop-each")) drop_each = 1;
        else break;
    }
    if (a != argc - 1) {
        fprintf(stderr, "usage: rounding_points_test [--bfloat16] [--drop-each] CFG\n");
        return 2;
    }
    const char *cfg = argv[a];
#ifndef AMP_HAVE_ONEDNN
    printf("SKIP: built without oneDNN\n");
    return 77;
#endif
    if (!drop_each) {
        if (compare(cfg, 0) == 77) return 77;
        return check_report();
    }
    /* Each rounding point left out in turn must put some tensor outside the
     * bounds that the full path keeps: the test can fail. And a weight
     * gradient rounded to half (which it must never be) must be caught too. */
    static const char *const names[AMP_ROUND_POINTS] = {
        "input (x)", "weights (W)", "output (y)", "incoming gradient (dy)", "data gradient (dx)"};
    for (int p = 0; p <= AMP_ROUND_POINTS; ++p) {
        quiet = 1;
        caught = 0;
        first_caught[0] = 0;
        round_dw = p == AMP_ROUND_POINTS;
        if (compare(cfg, round_dw ? 0 : 1u << p) == 77) return 77;
        quiet = 0;
        round_dw = 0;
        if (p == AMP_ROUND_POINTS)
            CHECK(caught > 0, "the weight gradient rounded to %s (planted): %d tensors outside the "
                  "bounds%s%s", amp_dtype_name(dtype), caught, caught ? ", the first " : "",
                  first_caught);
        else
            CHECK(caught > 0, "the %s rounding left out (planted): %d tensors outside the "
                  "bounds%s%s", names[p], caught, caught ? ", the first " : "", first_caught);
    }
    return check_report();
}

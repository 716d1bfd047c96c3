/* The oneDNN convolution path against the code it replaces.
 *
 *   onednn_test CFG
 *
 * Two pairs of networks from CFG, same seed (same initial weights), same
 * input, same gradient arriving at the last layer:
 *   float32:  darknet's own FP32 layers  vs  amp_dtype=float32 through oneDNN
 *             (DARKNET_AMP_CPU=onednn): the layouts, padding, groups, the
 *             batch-norm/activation tails and the adding of data gradients
 *             into net.delta, with nothing rounded;
 *   bfloat16: the emulation (DARKNET_AMP_CPU=emulate)  vs  oneDNN (auto):
 *             the same rounding points, only the order of the float32 sums
 *             differs.
 * For each pair it compares every layer's output, then after one backward
 * pass every layer's delta and weight/bias/scale gradients; again after the
 * weights change (the cached half weights must follow) and after
 * resize_network (the primitives must be remade). Skipped (77) when built
 * without oneDNN.
 *
 * Tolerance per element: |got - ref| <= tol * (max|ref| over the tensor) +
 * rel * |ref|, with tol and rel per dtype below; bfloat16 gradients are held
 * to a bound on the relative 2-norm of the difference instead (why: below).
 * Every tensor's worst element and relative difference are printed.
 */
#include "amp_internal.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    amp_dtype dtype;
    const char *ref_path, *got_path; /* DARKNET_AMP_CPU; NULL: darknet without AMP */
    /* Bounds, measured on tests/plugin/cfg/convs.cfg (2 threads, AVX512-BF16):
     * float32, per element: the worst |diff| was 0.045 of a 1e-4 bound
     * (summation order over up to 576 products, then batch-norm sums over up
     * to 1456 positions), so 2e-5 of the tensor's max plus 2e-5 relative.
     * bfloat16 outputs, per element: a value can land on the other side of a
     * rounding boundary (one ulp, 2^-8 relative) and later layers carry it;
     * 4 ulps of the tensor's max plus 4 ulps relative. bfloat16 gradients, as
     * a whole: an output near zero that flips sign flips leaky's slope (1 vs
     * 0.1) for its gradient element, so single elements can differ by their
     * own size; the relative 2-norm of the difference was at most 3.4e-2, the
     * bound is 0.1 (a wrong layout, a gradient written over instead of added,
     * or stale weights give differences of order 1). */
    double tol, rel;
    double grad_l2; /* gradients: bound on |got - ref| / |ref| (2-norms); 0: per element */
} pair;

static const pair pairs[] = {
    {"float32", AMP_DTYPE_FLOAT32, NULL, "onednn", 2e-5, 2e-5, 0},
    {"bfloat16", AMP_DTYPE_BFLOAT16, "emulate", "auto", 4.0 / 256, 4.0 / 256, 0.1},
};

static network *build(const char *cfg, const pair *p, const char *path)
{
    srand(11);
    network *net = parse_network_cfg((char *)cfg);
    if (!path) return net;
    char err[512] = "";
    setenv("DARKNET_AMP_CPU", path, 1);
    amp_options o;
    amp_options_init(&o, p->dtype);
    o.dynamic = 0;
    o.init_scale = 1;
    amp_scaler *s = NULL;
    if (amp_scaler_create(&o, &s, err, sizeof err) != AMP_OK ||
        amp_attach(net, s, err, sizeof err) != AMP_OK) {
        printf("FAIL: attach (%s): %s\n", path, err);
        exit(1);
    }
    return net;
}

/* Compares one tensor; returns the worst ratio of |diff| to its bound. */
static double compare(const char *what, const float *ref, const float *got, size_t n,
                      const pair *p, int gradient)
{
    double max = 0;
    for (size_t i = 0; i < n; ++i) max = fmax(max, fabs(ref[i]));
    double worst = 0, d2 = 0, r2 = 0;
    size_t at = 0, equal = 0;
    for (size_t i = 0; i < n; ++i) {
        double d = fabs((double)got[i] - ref[i]);
        d2 += d * d;
        r2 += (double)ref[i] * ref[i];
        double r = d / (p->tol * max + p->rel * fabs(ref[i]) + 1e-30);
        if (!(r <= worst)) worst = r, at = i; /* NaN counts as worst */
        equal += got[i] == ref[i];
    }
    double l2 = sqrt(d2 / (r2 > 0 ? r2 : 1e-30));
    if (gradient && p->grad_l2 > 0)
        CHECK(l2 <= p->grad_l2, "%-8s %-28s %7zu elements, |diff|/|ref| %.2e (bound %.0e), worst "
                                "element %zu: %.7g vs %.7g, max|ref| %.3g",
              p->name, what, n, l2, p->grad_l2, at, n ? got[at] : 0, n ? ref[at] : 0, max);
    else
        CHECK(worst <= 1, "%-8s %-28s %7zu elements, %5.1f%% equal, worst |diff|/bound %.3f "
                          "(element %zu: %.7g vs %.7g, max|ref| %.3g), |diff|/|ref| %.2e",
              p->name, what, n, 100.0 * equal / (n ? n : 1), worst, at, n ? got[at] : 0,
              n ? ref[at] : 0, max, l2);
    return worst;
}

static void compare_outputs(network *a, network *b, const pair *p, const char *when)
{
    char what[96];
    for (int i = 0; i < a->n; ++i) {
        layer *la = &a->layers[i], *lb = &b->layers[i];
        snprintf(what, sizeof what, "%s layer %d output", when, i);
        compare(what, la->output, lb->output, (size_t)la->outputs * la->batch, p, 0);
    }
}

static void compare_gradients(network *a, network *b, const pair *p, const char *when)
{
    char what[96];
    for (int i = 0; i < a->n; ++i) {
        layer *la = &a->layers[i], *lb = &b->layers[i];
        if (la->delta) {
            snprintf(what, sizeof what, "%s layer %d delta", when, i);
            compare(what, la->delta, lb->delta, (size_t)la->outputs * la->batch, p, 1);
        }
        if (la->type != CONVOLUTIONAL && la->type != CONNECTED) continue;
        size_t nw = la->type == CONVOLUTIONAL ? (size_t)la->nweights
                                              : (size_t)la->inputs * la->outputs;
        snprintf(what, sizeof what, "%s layer %d weight grad", when, i);
        compare(what, la->weight_updates, lb->weight_updates, nw, p, 1);
        snprintf(what, sizeof what, "%s layer %d bias grad", when, i);
        compare(what, la->bias_updates, lb->bias_updates,
                (size_t)(la->type == CONVOLUTIONAL ? la->n : la->outputs), p, 1);
        if (la->batch_normalize) {
            snprintf(what, sizeof what, "%s layer %d scale grad", when, i);
            compare(what, la->scale_updates, lb->scale_updates, (size_t)la->out_c, p, 1);
        }
    }
}

/* Forward on the same input, the same gradient into the last layer, backward. */
static void pass(network *a, network *b, const pair *p, const char *when, unsigned seed)
{
    network *nets[2] = {a, b};
    for (int k = 0; k < 2; ++k) {
        network *net = nets[k];
        srand(seed);
        for (int i = 0; i < net->inputs * net->batch; ++i)
            net->input[i] = (float)rand() / RAND_MAX * 2 - 1;
        net->train = 1;
        net->delta = NULL;
        forward_network(net);
        for (int i = 0; i < net->n; ++i) {
            layer *l = &net->layers[i];
            if (l->weight_updates) /* gradients of this pass only */
                memset(l->weight_updates, 0,
                       (l->type == CONVOLUTIONAL ? (size_t)l->nweights
                                                 : (size_t)l->inputs * l->outputs) *
                           sizeof(float));
            if (l->bias_updates)
                memset(l->bias_updates, 0,
                       (size_t)(l->type == CONVOLUTIONAL ? l->n : l->outputs) * sizeof(float));
            if (l->scale_updates) memset(l->scale_updates, 0, (size_t)l->out_c * sizeof(float));
        }
        layer *last = &net->layers[net->n - 1];
        for (int i = 0; i < last->outputs * last->batch; ++i)
            last->delta[i] = ((float)rand() / RAND_MAX * 2 - 1) * .1f;
        backward_network(net);
    }
    compare_outputs(a, b, p, when);
    compare_gradients(a, b, p, when);
}

static int count_backend(network *net, amp_backend b)
{
    amp_net *an = amp_net_of(net);
    int n = 0;
    for (int i = 0; an && i < net->n; ++i) n += an->layers[i].backend == b;
    return n;
}

/* New weights in both networks (as an update would leave them). */
static void change_weights(network *net)
{
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        if (l->type != CONVOLUTIONAL) continue;
        for (int k = 0; k < l->nweights; ++k) l->weights[k] = l->weights[k] * 1.5f + .01f;
    }
    amp_net *an = amp_net_of(net);
    if (an) an->weights_version++;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: onednn_test CFG\n");
        return 2;
    }
#ifndef AMP_HAVE_ONEDNN
    printf("SKIP: built without oneDNN (DARKNET_AMP_ONEDNN=OFF or libdnnl-dev missing)\n");
    return 77;
#else
    gpu_index = -1;
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; ++k) {
        const pair *p = &pairs[k];
        network *a = build(argv[1], p, p->ref_path);
        network *b = build(argv[1], p, p->got_path);
        int dnnl = count_backend(b, AMP_BACKEND_ONEDNN);
        CHECK(dnnl == 6, "%s: %d convolutions run through oneDNN (of 7; the 2x2 window that "
                         "ends early cannot)", p->name, dnnl);
        if (p->ref_path)
            CHECK(count_backend(a, AMP_BACKEND_ONEDNN) == 0,
                  "%s: the reference runs none through oneDNN", p->name);
        pass(a, b, p, "first pass", 3);
        change_weights(a);
        change_weights(b);
        pass(a, b, p, "new weights", 4);
        resize_network(a, 28, 26);
        resize_network(b, 28, 26);
        pass(a, b, p, "resized 28x26", 5);
        amp_detach(a);
        amp_detach(b);
        free_network(a);
        free_network(b);
    }
    return check_report();
#endif
}

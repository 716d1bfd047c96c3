/* One harness for every backend's layers: each implementation of the half
 * layers against the code it replaces and against the exact emulation, the
 * numerics reference (plugin/cpu/emulated.c), layer by layer.
 *
 *   backend_parity --emulation CFG [resize]   the CPU emulation against
 *                                             darknet's CPU float32, float16
 *                                             and bfloat16 (any build, no GPU)
 *   backend_parity --cpu CFG [resize]         the same with the CPU's own choice
 *                                             (oneDNN for bfloat16 where the
 *                                             CPU runs it, else the emulation)
 *   backend_parity --onednn N CFG [resize]    oneDNN: in float32 against
 *                                             darknet's float32 layers (N of
 *                                             them through oneDNN), in
 *                                             bfloat16 against the emulation;
 *                                             skipped (77) without oneDNN
 *   backend_parity CFG [resize]               GPU 0 (skipped, 77, without
 *                                             one): the GPU half layers
 *                                             (cuDNN, cuBLAS) against
 *                                             darknet's float32 GPU layers and
 *                                             against the CPU emulation
 *   backend_parity --no-cpu-reference CFG     GPU only, against darknet's
 *                                             float32 GPU layers (for layers
 *                                             darknet cannot run on the CPU)
 *   backend_parity --kinds BACKEND CFGDIR OUT every layer kind of the table
 *                                             (plugin/kinds.c) the backend
 *                                             (cpu, cuda) supports, in
 *                                             float16 and bfloat16, on a
 *                                             small network of its own
 *                                             (ggml's test-backend-ops loop:
 *                                             kinds x dtypes), against
 *                                             darknet's float32 and the
 *                                             emulation; a kind with no
 *                                             network here fails
 *   backend_parity --aligned CFG              align_decisions on decisions
 *                                             planted into one of two
 *                                             emulations under the plan
 *   --plan                                    the CPU modes with the activation
 *                                             plan on (amp_activations=half):
 *                                             tensors between half layers in
 *                                             half, compared widened to float32
 *
 * Networks from CFG, same seed (same initial weights), same input, same
 * gradient arriving at the last layer. Each pair: every layer's output (a
 * recurrent layer's sub-layers' over every time step too), then after one
 * backward pass every layer's delta and weight/bias/scale gradients; again
 * after new weights (as an update or a load leaves them: the half weight
 * copies must follow), and with "resize" after resize_network (the cuDNN
 * descriptors and the oneDNN primitives must be remade).
 *
 * Against the emulation on the GPU, the emulation's batch-norm uses cuDNN's
 * formula (biased variance, sqrt(var + 1e-5)), which darknet's GPU layers
 * run, not darknet's CPU one (unbiased variance, sqrt(var) + 1e-6): at batch
 * 4 those differ by 15% (unit.bn_formula). Like with like.
 *
 * Bounds, tol + |ref| * eps(dtype) in the llm.c manner, eps = 2^-11 for
 * float16 and 2^-8 for bfloat16 (half an ulp at 1):
 * - outputs, per element: |got - ref| <= k * eps * (max|ref| of the tensor +
 *   |ref|). Against float32, k = 8: input, weights and output are each
 *   rounded (3 half-ulps per layer), later layers carry earlier layers'
 *   errors, batch-norm divides by a standard deviation that can be small;
 *   the CPU emulation against CPU float32 (--emulation, same rounding
 *   points as the GPU) reached at most 0.33 of that bound (mixed.cfg;
 *   convs 0.27, deconv 0.23, crnn 0.21, gru 0.19: its forward only, as
 *   darknet's CPU gru has an empty backward). Against the
 *   emulation, k = 4 (the --onednn bound for the same rounding points):
 *   an element can land on the other side of a rounding boundary, one ulp,
 *   and be carried.
 * - gradients, as a whole: relative 2-norm |got - ref| / |ref|. Single
 *   elements can differ by their own size (an output near zero flips sign
 *   and leaky's slope with it), so no per-element bound. Against float32:
 *   0.3 float16, 0.6 bfloat16: --emulation measured at most 0.11 and 0.27
 *   on convs.cfg (16-element bias and scale gradients of the first layer,
 *   at the end of the longest backward chain), 0.13 and 0.24 on crnn.cfg
 *   (the convolution before the crnn, at the end of two time steps of
 *   backward), 0.07 and 0.18 on deconv.cfg, 0.04 on mixed.cfg; --cpu at
 *   most 0.14 and 0.27 (wide.cfg's weight gradients, convs.cfg's). These
 *   are the errors the operands' and deltas' roundings carry down the
 *   backward chain: the weight gradient itself is float32 (summed over
 *   half operands, added unrounded), and its own half rounding, when it
 *   had one, moved them by less than 1e-3 (gru.cfg's connected layer:
 *   2.9e-4 to 1.9e-4 float16, 2.5e-3 to 1.7e-3 bfloat16). So every half
 *   network's weight gradients are also checked to be float32 sums
 *   (float32_sums): a gradient rounded to half on the way, which these
 *   relative bounds cannot tell apart, has every element a half value.
 *   Against
 *   the emulation: 0.05 float16, 0.1 bfloat16 (--onednn measured
 *   3.4e-2 for bfloat16 with the same rounding points and another sum
 *   order). A wrong layout, a gradient written over instead of added, or
 *   stale half weights (the new weights are the old ones times -1.25) give
 *   differences of order 1. A pair of the same rounding points compares its
 *   gradients after its reference has taken the other network's discrete
 *   decisions (leaky and relu slopes, window maxima), where at most 1% of a
 *   layer's differ (align_decisions): a single output on the other side of
 *   0 moved convs.cfg's gradients by 7% on a GPU. The GPU pairs' bounds are set from these CPU
 *   measurements; they have not been run on a GPU yet (docs/gpu.md).
 * oneDNN's pairs (--onednn), measured on tests/cfg/convs.cfg (2 threads,
 * AVX512-BF16):
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
 * or stale weights give differences of order 1).
 */
#include "core.h"
#include "cpu.h"   /* amp_bn_formula */
#include "check.h"
#include "nets.h"
#include "onednn_fallbacks.h"
#include "cpu/weight_gradient.h" /* wg_half_values */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef GPU
#include <cuda_runtime_api.h>

#include "half_gpu.h" /* the GPU plan's deltas, each its own (own_deltas) */
#endif

/* |got - ref| <= tol * max|ref| + rel * |ref| per element; gradients as a
 * whole within a relative 2-norm of grad_l2 instead, when it is > 0. align:
 * a pair of the same rounding points, whose reference (a CPU network) takes
 * the other network's discrete decisions before the backward
 * (align_decisions). */
typedef struct {
    const char *name;
    double tol, rel, grad_l2;
    int align;
} bounds;

/* How one network of a pair is built. */
typedef struct {
    int gpu;                /* GPU 0, else the CPU */
    int amp;                /* 0: darknet without AMP */
    amp_dtype dtype;
    const char *cpu_path;   /* DARKNET_AMP_CPU for a CPU network with AMP */
    amp_bn_formula bn;      /* a CPU network's half batch-norm */
} net_spec;

/* --plan: the activation plan on (amp_activations=half): the tensors between
 * half layers stored in half, read here through tensor(). */
static int plan_on;

static double eps_of(amp_dtype t)
{
    return t == AMP_DTYPE_BFLOAT16 ? 1.0 / 256 : 1.0 / 2048;
}

static network *build(const char *cfg, const net_spec *sp)
{
#ifdef GPU
    gpu_index = sp->gpu ? 0 : -1;
#endif
    srand(11);
    network *net = parse_network_cfg((char *)cfg);
    if (!sp->amp) return net;
    char err[AMP_MSG_LEN] = "";
    if (sp->cpu_path) setenv("DARKNET_AMP_CPU", sp->cpu_path, 1);
    amp_options o;
    amp_options_init(&o, sp->dtype);
    o.dynamic = 0;
    o.init_scale = 1;
    o.half_activations = plan_on; /* off: every layer's arrays are darknet's float32 */
    if (test_attach_options(net, &o, err, sizeof err) != AMP_OK) {
        printf("FAIL: attach (%s, %s): %s\n", amp_dtype_name(sp->dtype), sp->gpu ? "GPU" : "CPU",
               err);
        exit(1);
    }
    amp_net *an = amp_net_of(net);
    if (!sp->gpu) cpu_net_of(an)->bn_formula = sp->bn;
    if (!sp->gpu && an->plan_on) { /* every delta kept, to be compared after the backward */
        cpu_net_of(an)->own_deltas = 1;
        if (amp_cpu_activations(an, err, sizeof err) != AMP_OK) {
            printf("FAIL: %s\n", err);
            exit(1);
        }
    }
#ifdef GPU
    if (sp->gpu && an->plan_on) { /* the same on the device */
        gpu_of(an)->half->own_deltas = 1;
        if (amp_cuda_activations(an, err, sizeof err) != AMP_OK) {
            printf("FAIL: %s\n", err);
            exit(1);
        }
    }
#endif
    amp_policy_print(an, stdout);
    amp_plan_print(an, stdout);
    return net;
}

/* --plan: the tensors the plan stores in half (none without the plan). */
static int half_tensors(network *net)
{
    const amp_net *an = amp_net_of(net);
    int n = 0;
    for (int i = 0; an && i < net->n; ++i) n += an->layers[i].out_half;
    return n;
}

static size_t nweights(const layer *l)
{
    return l->type == CONNECTED ? (size_t)l->inputs * l->outputs : (size_t)l->nweights;
}

static size_t nbias(const layer *l)
{
    return (size_t)(l->type == CONNECTED ? l->outputs : l->n);
}

/* The layers whose parameters a layer's gradients belong to: itself, or a
 * recurrent layer's sub-layers (with their names). */
static int parts(layer *l, layer **out, const char **names)
{
    int n = amp_sublayers(l, out, names);
    if (n) return n;
    if ((l->type == CONVOLUTIONAL || l->type == DECONVOLUTIONAL || l->type == CONNECTED) &&
        l->weight_updates) {
        out[0] = l;
        names[0] = "";
        return 1;
    }
    return 0;
}

/* How many time steps a layer's arrays hold (a recurrent layer's sub-layers
 * keep every step's output). */
static int steps_of(const layer *l)
{
    return amp_sublayers(l, (layer *[AMP_MAX_SUBLAYERS]){0},
                         (const char *[AMP_MAX_SUBLAYERS]){0}) ? l->steps : 1;
}

/* Compares one tensor and prints what it compared and how far apart. */
static void compare(const char *what, const float *ref, const float *got, size_t n,
                    const bounds *b, int gradient)
{
    double max = 0;
    for (size_t i = 0; i < n; ++i) max = fmax(max, fabs(ref[i]));
    double worst = 0, d2 = 0, r2 = 0;
    size_t at = 0, equal = 0;
    for (size_t i = 0; i < n; ++i) {
        double d = fabs((double)got[i] - ref[i]);
        d2 += d * d;
        r2 += (double)ref[i] * ref[i];
        double r = d / (b->tol * max + b->rel * fabs(ref[i]) + 1e-30);
        if (!(r <= worst)) worst = r, at = i; /* NaN counts as worst */
        equal += got[i] == ref[i];
    }
    double l2 = sqrt(d2 / (r2 > 0 ? r2 : 1e-30));
    if (!(d2 == d2)) l2 = NAN;
    if (gradient && b->grad_l2 > 0)
        CHECK(l2 <= b->grad_l2, "%-12s %-30s %7zu elements, |diff|/|ref| %.2e (bound %.0e), "
                                "worst element %zu: %.7g vs %.7g, max|ref| %.3g",
              b->name, what, n, l2, b->grad_l2, at, n ? got[at] : 0, n ? ref[at] : 0, max);
    else
        CHECK(worst <= 1, "%-12s %-30s %7zu elements, %5.1f%% equal, worst |diff|/bound %.3f "
                          "(element %zu: %.7g vs %.7g, max|ref| %.3g), |diff|/|ref| %.2e",
              b->name, what, n, 100.0 * equal / (n ? n : 1), worst, at, n ? got[at] : 0,
              n ? ref[at] : 0, max, l2);
}

/* A half network's weight gradient never passes through half: summed in
 * float32 and added to the history unrounded, so few of its nonzero elements
 * are half values (cpu/weight_gradient.h); a gradient rounded to half on the
 * way would be all of them. */
static void float32_sums(network *net, const char *what, const float *g, size_t n)
{
    const amp_net *an = amp_net_of(net);
    if (!an || an->scaler->opt.dtype == AMP_DTYPE_FLOAT32) return;
    const amp_dtype dt = an->scaler->opt.dtype;
    size_t nonzero = 0;
    const size_t half = wg_half_values(dt, g, n, &nonzero);
    CHECK(half <= WG_MAX_HALF_VALUES * nonzero,
          "%-12s %-30s float32 sums: %zu of %zu nonzero elements %s values (bound %.0f%%)",
          amp_dtype_name(dt), what, half, nonzero, amp_dtype_name(dt), 100 * WG_MAX_HALF_VALUES);
}

#ifdef GPU
static void pull(float *gpu, float *host, size_t n)
{
    if (gpu && host && n) cuda_pull_array(gpu, host, n);
}

/* n half values on the device (the plan's NHWC storage of layer i's output
 * or delta) widened into host (darknet's NCHW order). */
static void pull_half(network *net, int i, const uint16_t *gpu, float *host, size_t n)
{
    uint16_t *h = malloc(n * sizeof *h);
    CHECK(h && gpu, "layer %d: %zu half values on the device, and memory to read them", i, n);
    if (!h || !gpu) {
        free(h);
        return;
    }
    CHECK(cudaMemcpy(h, gpu, n * sizeof *h, cudaMemcpyDeviceToHost) == cudaSuccess,
          "layer %d: its half storage read back", i);
    int c, hw;
    amp_cpu_tensor_shape(net, i, &c, &hw);
    amp_cpu_from_half_nhwc(amp_net_of(net)->scaler->opt.dtype, h, host, net->layers[i].batch, c,
                           hw);
    free(h);
}
#endif

#ifdef GPU
/* Layer i's output (or delta) of a GPU network into its host array: the
 * plan's half storage widened, or darknet's float32 array. */
static void pull_tensor(network *net, int i, int delta)
{
    layer *l = &net->layers[i];
    const amp_net *an = amp_net_of(net);
    const size_t n = (size_t)l->outputs * l->batch;
    if (an && an->layers[i].out_half)
        pull_half(net, i, delta ? amp_cuda_half_delta(an, i) : (const uint16_t *)l->output_gpu,
                  delta ? l->delta : l->output, n);
    else
        pull(delta ? l->delta_gpu : l->output_gpu, delta ? l->delta : l->output, n);
}

/* A GPU network's max-pooling indexes into its host array (darknet's int
 * indexes: NHWC positions on the plan's half form, NCHW on darknet's). */
static void pull_indexes(layer *l)
{
    const size_t n = (size_t)l->outputs * l->batch;
    if (l->type == MAXPOOL && l->indexes && l->indexes_gpu)
        CHECK(cudaMemcpy(l->indexes, l->indexes_gpu, n * sizeof(int), cudaMemcpyDeviceToHost) ==
                  cudaSuccess, "max-pooling indexes read back (%zu)", n);
}
#endif

/* Forward on a fixed input, then a fixed gradient into the last layer and
 * every gradient of this pass zeroed; a GPU network's outputs (and
 * max-pooling indexes) end up in its host arrays. */
static void run_forward(network *net, unsigned seed)
{
    srand(seed);
    for (int i = 0; i < net->inputs * net->batch; ++i)
        net->input[i] = (float)rand() / RAND_MAX * 2 - 1;
    net->train = 1;
    net->delta = NULL;
    forward_network(net);
    layer *last = &net->layers[net->n - 1];
    for (int i = 0; i < last->outputs * last->batch; ++i)
        last->delta[i] = ((float)rand() / RAND_MAX * 2 - 1) * .1f;
    for (int i = 0; i < net->n; ++i) {
        layer *ps[AMP_MAX_SUBLAYERS];
        const char *names[AMP_MAX_SUBLAYERS];
        int np = parts(&net->layers[i], ps, names);
        for (int k = 0; k < np; ++k) { /* gradients of this pass only */
            layer *l = ps[k];
            memset(l->weight_updates, 0, nweights(l) * sizeof(float));
            memset(l->bias_updates, 0, nbias(l) * sizeof(float));
            if (l->scale_updates) memset(l->scale_updates, 0, nbias(l) * sizeof(float));
#ifdef GPU
            if (net->gpu_index >= 0) {
                fill_gpu((int)nweights(l), 0, l->weight_updates_gpu, 1);
                fill_gpu((int)nbias(l), 0, l->bias_updates_gpu, 1);
                if (l->scale_updates_gpu) fill_gpu((int)nbias(l), 0, l->scale_updates_gpu, 1);
            }
#endif
        }
    }
#ifdef GPU
    if (net->gpu_index < 0) return;
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        pull_tensor(net, i, 0);
        pull_indexes(l);
        layer *ps[AMP_MAX_SUBLAYERS];
        const char *names[AMP_MAX_SUBLAYERS];
        int np = parts(l, ps, names);
        for (int k = 0; k < np; ++k)
            if (ps[k] != l)
                pull(ps[k]->output_gpu, ps[k]->output, (size_t)ps[k]->outputs * ps[k]->batch * l->steps);
    }
#endif
}

/* The backward from the gradient run_forward put into the last layer; a GPU
 * network's deltas and gradients end up in its host arrays. */
static void run_backward(network *net)
{
    layer *last = &net->layers[net->n - 1];
#ifdef GPU
    if (net->gpu_index >= 0)
        cuda_push_array(last->delta_gpu, last->delta, (size_t)last->outputs * last->batch);
#endif
    (void)last;
    backward_network(net);
#ifdef GPU
    if (net->gpu_index < 0) return;
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        pull_tensor(net, i, 1);
        layer *ps[AMP_MAX_SUBLAYERS];
        const char *names[AMP_MAX_SUBLAYERS];
        int np = parts(l, ps, names);
        for (int k = 0; k < np; ++k) {
            layer *p = ps[k];
            pull(p->weight_updates_gpu, p->weight_updates, nweights(p));
            pull(p->bias_updates_gpu, p->bias_updates, nbias(p));
            if (p->scale_updates_gpu) pull(p->scale_updates_gpu, p->scale_updates, nbias(p));
        }
    }
#endif
}

/* A network built for GPU 0 (a CPU build's gpu_index is darknet's 0). */
static int on_gpu(const network *net)
{
#ifdef GPU
    return net->gpu_index >= 0;
#else
    (void)net;
    return 0;
#endif
}

/* Layer i's output (or its delta) as float32: darknet's array, or the
 * activation plan's half storage (NHWC) widened into buf in darknet's NCHW
 * order (outputs x batch floats); NULL where the layer has none. */
static const float *tensor(network *net, int i, int delta, float *buf)
{
    layer *l = &net->layers[i];
    const amp_net *an = amp_net_of(net);
    /* (a GPU network's were widened into its host arrays by run) */
    if (an && an->layers[i].out_half && !on_gpu(net)) {
        const uint16_t *h = delta ? cpu_layer_of(&an->layers[i])->delta_h
                                  : (const uint16_t *)l->output;
        int c, hw;
        amp_cpu_tensor_shape(net, i, &c, &hw);
        amp_cpu_from_half_nhwc(an->scaler->opt.dtype, h, buf, l->batch, c, hw);
        return buf;
    }
    return delta ? l->delta : l->output;
}

/* A buffer for the largest tensor of net (outputs x batch floats). */
static float *tensor_buffer(const network *net)
{
    size_t most = 1;
    for (int i = 0; i < net->n; ++i)
        if ((size_t)net->layers[i].outputs * net->layers[i].batch > most)
            most = (size_t)net->layers[i].outputs * net->layers[i].batch;
    float *b = malloc(most * sizeof(float));
    if (!b) {
        printf("FAIL: no memory for %zu floats\n", most);
        exit(1);
    }
    return b;
}

/* Every layer's output, a recurrent layer's sub-layers' over every time step. */
static void compare_outputs(network *a, network *b, const bounds *bd, const char *when)
{
    char what[96];
    float *ba = tensor_buffer(a), *bb = tensor_buffer(b);
    for (int i = 0; i < a->n; ++i) {
        layer *la = &a->layers[i], *lb = &b->layers[i];
        snprintf(what, sizeof what, "%s layer %d output", when, i);
        compare(what, tensor(a, i, 0, ba), tensor(b, i, 0, bb), (size_t)la->outputs * la->batch,
                bd, 0);
        layer *pa[AMP_MAX_SUBLAYERS], *pb[AMP_MAX_SUBLAYERS];
        const char *names[AMP_MAX_SUBLAYERS];
        int np = parts(la, pa, names);
        parts(lb, pb, names);
        for (int k = 0; k < np && pa[k] != la; ++k) { /* sub-layers: every time step */
            snprintf(what, sizeof what, "%s layer %d %s output", when, i, names[k]);
            compare(what, pa[k]->output, pb[k]->output,
                    (size_t)pa[k]->outputs * pa[k]->batch * steps_of(la), bd, 0);
        }
    }
    free(ba);
    free(bb);
}

/* Every layer's delta and its weight, bias and scale gradients. */
static void compare_gradients(network *a, network *b, const bounds *bd, const char *when)
{
    char what[96];
    float *ba = tensor_buffer(a), *bb = tensor_buffer(b);
    for (int i = 0; i < a->n; ++i) {
        layer *la = &a->layers[i], *lb = &b->layers[i];
        const float *da = tensor(a, i, 1, ba), *db = tensor(b, i, 1, bb);
        /* darknet's dropout layer has no delta of its own (its input's, which
         * the input's layer has made its own gradient of since) */
        if (da && db && la->type != DROPOUT) {
            snprintf(what, sizeof what, "%s layer %d delta", when, i);
            compare(what, da, db, (size_t)la->outputs * la->batch, bd, 1);
        }
        layer *pa[AMP_MAX_SUBLAYERS], *pb[AMP_MAX_SUBLAYERS];
        const char *names[AMP_MAX_SUBLAYERS];
        int np = parts(la, pa, names);
        parts(lb, pb, names);
        for (int k = 0; k < np; ++k) {
            const char *sep = *names[k] ? " " : "";
            snprintf(what, sizeof what, "%s layer %d%s%s weight grad", when, i, sep, names[k]);
            compare(what, pa[k]->weight_updates, pb[k]->weight_updates, nweights(pa[k]), bd, 1);
            float32_sums(a, what, pa[k]->weight_updates, nweights(pa[k]));
            float32_sums(b, what, pb[k]->weight_updates, nweights(pb[k]));
            snprintf(what, sizeof what, "%s layer %d%s%s bias grad", when, i, sep, names[k]);
            compare(what, pa[k]->bias_updates, pb[k]->bias_updates, nbias(pa[k]), bd, 1);
            if (pa[k]->batch_normalize) {
                snprintf(what, sizeof what, "%s layer %d%s%s scale grad", when, i, sep, names[k]);
                compare(what, pa[k]->scale_updates, pb[k]->scale_updates, nbias(pa[k]), bd, 1);
            }
        }
    }
    free(ba);
    free(bb);
}

/* ---- Discrete decisions ----
 * A backward takes two kinds of decision from what the forward stored:
 * leaky's and relu's slope from the sign of the output (gradient_array), and
 * max-pooling's window maximum from its index. Two networks of the same
 * rounding points add the same products in other orders, so an output a
 * rounding apart can land on the other side of 0, or two maxima a rounding
 * apart trade places: the outputs still agree within their bound, but that
 * element's gradient differs by its own size (leaky: 1 against .1), and the
 * backward carries it down the chain. On a small network one such element
 * moves the gradients' relative 2-norm by several percent (convs.cfg's
 * layer 7, 960 values: an output of -9.0e-5 in one network and 8.2e-5 in the
 * other, with the cuDNN batch-norm formula, moved every gradient below it by
 * 7%), which is no rounding point of either.
 * So a pair of the same rounding points (bounds.align) compares outputs
 * first; then its reference (a CPU network) takes the other network's
 * decision where the two differ, its stored output set to the other's value
 * (a sign within the output bound) or its index to the other's, and only
 * then do both run the backward. At most MAX_ALIGNED of a layer's values may
 * need it: a wrong layout, a wrong window or a wrong activation differs in
 * far more. Each aligned layer is named with its count and its first
 * element. */
#define MAX_ALIGNED 0.01

/* Whether l's backward takes its activation's slope from the sign of its
 * output, with a kink at 0. */
static int kinked(const layer *l)
{
    const int uses = l->type == CONVOLUTIONAL || l->type == DECONVOLUTIONAL ||
                     l->type == CONNECTED || l->type == SHORTCUT || l->type == ACTIVE ||
                     l->type == LOCAL;
    return uses && (l->activation == LEAKY || l->activation == RELU);
}

/* Writes buf (outputs x batch floats, NCHW) back as layer i's output of CPU
 * network net (its half storage, or darknet's array). */
static void set_output(network *net, int i, const float *buf)
{
    layer *l = &net->layers[i];
    const amp_net *an = amp_net_of(net);
    const size_t n = (size_t)l->outputs * l->batch;
    if (an && an->layers[i].out_half) {
        int c, hw;
        amp_cpu_tensor_shape(net, i, &c, &hw);
        amp_cpu_to_half_nhwc(an->scaler->opt.dtype, buf, (uint16_t *)l->output, l->batch, c, hw);
    } else if (buf != l->output) {
        memcpy(l->output, buf, n * sizeof(float));
    }
}

/* Layer i's max-pooling indexes are comparable: both networks run the same
 * form of it (the plan's half form, NHWC, or darknet's, NCHW). */
static int same_pool_form(network *ref, network *got, int i)
{
    const amp_net *ar = amp_net_of(ref), *ag = amp_net_of(got);
    const int hr = ar && ar->layers[i].region, hg = ag && ag->layers[i].region;
    return hr == hg;
}

/* ref (a CPU network) takes got's decisions where they differ (above).
 * Returns how many it took, or -1 where a layer needed more than
 * MAX_ALIGNED of its values (nothing taken there). */
static long align_decisions(network *ref, network *got, const char *name, const char *when)
{
    long total = 0;
    int over = 0;
    float *br = tensor_buffer(ref), *bg = tensor_buffer(got);
    for (int i = 0; i < ref->n; ++i) {
        layer *lr = &ref->layers[i], *lg = &got->layers[i];
        const size_t n = (size_t)lr->outputs * lr->batch;
        size_t differ = 0, first = 0;
        float vr = 0, vg = 0;
        const char *what = NULL;
        if (kinked(lr)) {
            float *r = (float *)tensor(ref, i, 0, br);
            const float *g = tensor(got, i, 0, bg);
            for (size_t j = 0; j < n; ++j)
                if ((r[j] > 0) != (g[j] > 0)) {
                    if (!differ++) first = j, vr = r[j], vg = g[j];
                }
            what = lr->activation == LEAKY ? "leaky slopes" : "relu slopes";
            if (differ && differ <= MAX_ALIGNED * n) {
                for (size_t j = 0; j < n; ++j)
                    if ((r[j] > 0) != (g[j] > 0)) r[j] = g[j];
                set_output(ref, i, r);
            }
        } else if (lr->type == MAXPOOL && lr->indexes && lg->indexes &&
                   same_pool_form(ref, got, i)) {
            for (size_t j = 0; j < n; ++j)
                if (lr->indexes[j] != lg->indexes[j]) {
                    if (!differ++) first = j, vr = (float)lr->indexes[j], vg = (float)lg->indexes[j];
                }
            what = "window maxima";
            if (differ && differ <= MAX_ALIGNED * n)
                for (size_t j = 0; j < n; ++j) lr->indexes[j] = lg->indexes[j];
        }
        if (!differ) continue;
        const int ok = differ <= MAX_ALIGNED * n;
        printf("note: %-12s %s layer %d: %zu of %zu %s differ (first, element %zu: %.7g in the "
               "reference, %.7g), %s\n", name, when, i, differ, n, what,
               first, vr, vg, ok ? "the reference takes the other's for the backward"
                                 : "more than the 1% a rounding explains");
        if (ok) total += (long)differ;
        else over = 1;
    }
    free(br);
    free(bg);
    return over ? -1 : total;
}

/* New weights (as an update or a load would leave them), on the device too. */
static void change_weights(network *net)
{
    for (int i = 0; i < net->n; ++i) {
        layer *ps[AMP_MAX_SUBLAYERS];
        const char *names[AMP_MAX_SUBLAYERS];
        int np = parts(&net->layers[i], ps, names);
        for (int k = 0; k < np; ++k) {
            layer *l = ps[k];
            for (size_t j = 0; j < nweights(l); ++j) l->weights[j] *= -1.25f; /* stale: order 1 */
#ifdef GPU
            if (net->gpu_index >= 0) cuda_push_array(l->weights_gpu, l->weights, nweights(l));
#endif
        }
    }
    amp_net *an = amp_net_of(net);
    if (an) an->weights_version++; /* as the weights_loaded hook does */
}

/* Half layers the CPU backend runs with r. */
static int count_runner(network *net, amp_cpu_runner r)
{
    amp_net *an = amp_net_of(net);
    int n = 0;
    for (int i = 0; an && i < net->n; ++i)
        n += an->layers[i].precision == AMP_PRECISION_HALF &&
             amp_cpu_layer_runner(&an->layers[i]) == r;
    return n;
}

#ifdef GPU
/* Half layers whose backend says label runs them ("cuDNN"). */
static int count_label(network *net, const char *label)
{
    amp_net *an = amp_net_of(net);
    int n = 0;
    for (int i = 0; an && i < net->n; ++i)
        n += an->layers[i].precision == AMP_PRECISION_HALF && an->layers[i].label &&
             !strcmp(an->layers[i].label, label);
    return n;
}
#endif

/* Layers of the given types. */
static int count_types(network *net, const LAYER_TYPE *types, int ntypes)
{
    int n = 0;
    for (int i = 0; i < net->n; ++i)
        for (int t = 0; t < ntypes; ++t) n += net->layers[i].type == types[t];
    return n;
}

/* The three passes on the pairs (nets[ref[k]], nets[got[k]]): first, new
 * weights, resized. */
static void passes(network **nets, int count, const int *ref, const int *got, const bounds *bd,
                   int npairs, int resize)
{
    static const char *const when[] = {"first pass", "new weights", "resized 28x26"};
    for (int pass = 0; pass < (resize ? 3 : 2); ++pass) {
        for (int k = 0; k < count; ++k) {
            if (pass == 1) change_weights(nets[k]);
            if (pass == 2) {
#ifdef GPU
                gpu_index = nets[k]->gpu_index; /* its layers' workspace sizes are the device's */
#endif
                resize_network(nets[k], 28, 26);
            }
            run_forward(nets[k], 3 + pass);
        }
        for (int p = 0; p < npairs; ++p)
            compare_outputs(nets[ref[p]], nets[got[p]], &bd[p], when[pass]);
        for (int p = 0; p < npairs; ++p)
            if (bd[p].align) {
                CHECK(!on_gpu(nets[ref[p]]), "%s: the reference whose decisions are aligned "
                      "is a CPU network", bd[p].name);
                CHECK(align_decisions(nets[ref[p]], nets[got[p]], bd[p].name, when[pass]) >= 0,
                      "%-12s %s: at most %.0f%% of any layer's decisions differ", bd[p].name,
                      when[pass], 100 * MAX_ALIGNED);
            }
        for (int k = 0; k < count; ++k) run_backward(nets[k]);
        for (int p = 0; p < npairs; ++p)
            compare_gradients(nets[ref[p]], nets[got[p]], &bd[p], when[pass]);
    }
}

static void free_nets(network **nets, int count)
{
    for (int k = 0; k < count; ++k) {
        amp_detach(nets[k]);
        free_network(nets[k]);
    }
}

/* ---- --aligned: align_decisions on planted decisions ---- */

/* The last layer of net whose backward takes a slope from its output's sign
 * and whose output is at least 100 values; -1 where none. */
static int last_kinked(const network *net)
{
    for (int i = net->n - 1; i >= 0; --i)
        if (kinked(&net->layers[i]) && net->layers[i].outputs * net->layers[i].batch >= 100)
            return i;
    return -1;
}

/* Plants count sign decisions into layer i of CPU network net: its outputs
 * nearest 0 above it made their negatives (exact in half), as a rounding
 * apart would flip them. Returns how many it planted. */
static size_t plant_signs(network *net, int i, size_t count)
{
    layer *l = &net->layers[i];
    const size_t n = (size_t)l->outputs * l->batch;
    float *buf = tensor_buffer(net);
    float *v = (float *)tensor(net, i, 0, buf);
    size_t planted = 0;
    for (; planted < count; ++planted) {
        size_t at = n;
        for (size_t j = 0; j < n; ++j)
            if (v[j] > 0 && (at == n || v[j] < v[at])) at = j;
        if (at == n) break;
        v[at] = -v[at];
    }
    set_output(net, i, v);
    free(buf);
    return planted;
}

/* Plants one window decision into net's first max-pooling layer in its half
 * form (NHWC indexes): an output's index moved to another position of its
 * window. Returns the layer, or -1 where there is none. */
static int plant_window(network *net)
{
    const amp_net *an = amp_net_of(net);
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        if (l->type != MAXPOOL || !an->layers[i].region || l->size < 2) continue;
        const int off = -l->pad / 2;
        for (long o = 0; o < (long)l->outputs * l->batch; ++o) {
            const int ch = (int)(o % l->c);
            const long pos = o / l->c;
            const int j = (int)(pos % l->out_w), r = (int)(pos / l->out_w % l->out_h);
            const int b = (int)(pos / ((long)l->out_w * l->out_h));
            for (int k = 0; k < l->size * l->size; ++k) {
                const int y = off + r * l->stride + k / l->size, x = off + j * l->stride + k % l->size;
                const int at = ((b * l->h + y) * l->w + x) * l->c + ch;
                if (y < 0 || y >= l->h || x < 0 || x >= l->w || at == l->indexes[o]) continue;
                l->indexes[o] = at;
                return i;
            }
        }
    }
    return -1;
}

/* Two emulations under the plan, bit for bit alike, and a third: decisions
 * planted into one (got) are found and taken by the reference, whose
 * gradients then equal got's bit for bit, while the third, not aligned,
 * differs; more than MAX_ALIGNED of a layer's decisions planted are refused. */
static void aligned(const char *cfg)
{
    plan_on = 1;
    const net_spec sp = {0, 1, AMP_DTYPE_FLOAT16, "emulate", AMP_BN_DARKNET_CPU};
    network *nets[3] = {build(cfg, &sp), build(cfg, &sp), build(cfg, &sp)};
    network *ref = nets[0], *got = nets[1], *plain = nets[2];
    const bounds exact = {"bit for bit", 0, 0, 0, 0};
    for (int k = 0; k < 3; ++k) run_forward(nets[k], 3);
    compare_outputs(ref, got, &exact, "before planting");
    const int i = last_kinked(got);
    CHECK(i >= 0, "%s: a layer of leaky or relu slopes with 100 values or more", cfg);
    if (i < 0) exit(1);
    const size_t signs = plant_signs(got, i, 1);
    const int pool = plant_window(got);
    const long want = (long)signs + (pool >= 0);
    printf("note: planted %zu sign in layer %d, %s\n", signs, i,
           pool >= 0 ? "1 window maximum in the max pool" : "no max pool in its half form");
    const long took = align_decisions(ref, got, "planted", "first pass");
    CHECK(took == want, "planted: the reference took %ld decisions (planted %ld)", took, want);
    for (int k = 0; k < 3; ++k) run_backward(nets[k]);
    compare_gradients(ref, got, &exact, "aligned");
    /* the one not aligned: its gradients moved by the planted decisions */
    float *ba = tensor_buffer(plain), *bb = tensor_buffer(got);
    double worst = 0;
    int at = -1;
    for (int j = 0; j < plain->n; ++j) {
        const float *a = tensor(plain, j, 1, ba), *b = tensor(got, j, 1, bb);
        double d2 = 0, r2 = 0;
        for (long e = 0; a && b && e < (long)plain->layers[j].outputs * plain->layers[j].batch; ++e)
            d2 += ((double)a[e] - b[e]) * ((double)a[e] - b[e]), r2 += (double)a[e] * a[e];
        if (r2 > 0 && sqrt(d2 / r2) > worst) worst = sqrt(d2 / r2), at = j;
    }
    CHECK(worst > 0, "not aligned: the planted decisions move the deltas (at most |diff|/|ref| "
          "%.2e, layer %d)", worst, at);
    free(ba);
    free(bb);
    /* too many: 2% of the layer's signs */
    for (int k = 0; k < 2; ++k) run_forward(nets[k], 4);
    const layer *l = &got->layers[i];
    plant_signs(got, i, (size_t)(2 * MAX_ALIGNED * l->outputs * l->batch) + 1);
    CHECK(align_decisions(ref, got, "planted", "second pass") < 0,
          "planted: %.0f%% of layer %d's signs are more than alignment takes", 200 * MAX_ALIGNED,
          i);
    free_nets(nets, 3);
}

/* --emulation and --cpu: the CPU's half layers against darknet's float32. */
static void cpu_half(const char *cfg, const char *path, int resize)
{
    const amp_dtype dtypes[] = {AMP_DTYPE_FLOAT16, AMP_DTYPE_BFLOAT16};
    for (int t = 0; t < 2; ++t) {
        const amp_dtype dt = dtypes[t];
        char name[48];
        snprintf(name, sizeof name, "%s vs float32", amp_dtype_name(dt));
        const bounds bd = {name, 8 * eps_of(dt), 8 * eps_of(dt),
                           dt == AMP_DTYPE_BFLOAT16 ? 0.6 : 0.3, 0};
        const net_spec ref = {0, 0, dt, NULL, AMP_BN_DARKNET_CPU};
        const net_spec got = {0, 1, dt, path, AMP_BN_DARKNET_CPU};
        network *nets[2] = {build(cfg, &ref), build(cfg, &got)};
        const LAYER_TYPE half[] = {CONVOLUTIONAL, DECONVOLUTIONAL, CONNECTED,
                                   RNN,           GRU,             LSTM, CRNN};
        int want = count_types(nets[1], half, 7);
        int have = count_runner(nets[1], AMP_CPU_RUNS_EMULATED) +
                   count_runner(nets[1], AMP_CPU_RUNS_ONEDNN);
        CHECK(have == want,
              "%s: %d of %d convolutional, deconvolutional, connected and recurrent layers in "
              "half on the CPU (%d through oneDNN)", amp_dtype_name(dt), have, want,
              count_runner(nets[1], AMP_CPU_RUNS_ONEDNN));
        if (plan_on)
            CHECK(half_tensors(nets[1]) > 0, "%s: the plan stores %d layers' outputs in half",
                  amp_dtype_name(dt), half_tensors(nets[1]));
        passes(nets, 2, (int[]){0}, (int[]){1}, &bd, 1, resize);
        free_nets(nets, 2);
    }
}

/* --onednn: oneDNN in float32 against darknet, in bfloat16 against the emulation. */
static int onednn(const char *cfg, int expect, int resize)
{
#ifndef AMP_HAVE_ONEDNN
    (void)cfg, (void)expect, (void)resize;
    printf("SKIP: built without oneDNN (DARKNET_AMP_ONEDNN=OFF or libdnnl-dev missing)\n");
    return 77;
#else
    const struct {
        bounds bd;
        net_spec ref, got;
    } pairs[] = {
        {{"float32", 2e-5, 2e-5, 0, 0},
         {0, 0, AMP_DTYPE_FLOAT32, NULL, AMP_BN_DARKNET_CPU},
         {0, 1, AMP_DTYPE_FLOAT32, "onednn", AMP_BN_DARKNET_CPU}},
        {{"bfloat16", 4.0 / 256, 4.0 / 256, 0.1, 1},
         {0, 1, AMP_DTYPE_BFLOAT16, "emulate", AMP_BN_DARKNET_CPU},
         {0, 1, AMP_DTYPE_BFLOAT16, "auto", AMP_BN_DARKNET_CPU}},
        {{"float16", 4.0 / 2048, 4.0 / 2048, 0.05, 1},
         {0, 1, AMP_DTYPE_FLOAT16, "emulate", AMP_BN_DARKNET_CPU},
         {0, 1, AMP_DTYPE_FLOAT16, "auto", AMP_BN_DARKNET_CPU}},
    };
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; ++k) {
        network *nets[2] = {build(cfg, &pairs[k].ref), build(cfg, &pairs[k].got)};
        int dnnl = count_runner(nets[1], AMP_CPU_RUNS_ONEDNN);
        CHECK(dnnl == expect, "%s: %d layers run through oneDNN (expected %d)",
              pairs[k].bd.name, dnnl, expect);
        if (pairs[k].ref.amp)
            CHECK(count_runner(nets[0], AMP_CPU_RUNS_ONEDNN) == 0, "%s: the reference runs none "
                  "through oneDNN", pairs[k].bd.name);
        if (plan_on && pairs[k].ref.amp) /* float32 has no plan */
            CHECK(half_tensors(nets[0]) > 0 && half_tensors(nets[0]) == half_tensors(nets[1]),
                  "%s: the plan stores %d layers' outputs in half, in both", pairs[k].bd.name,
                  half_tensors(nets[1]));
        passes(nets, 2, (int[]){0}, (int[]){1}, &pairs[k].bd, 1, resize);
        CHECK(onednn_fallbacks(nets[1]) == 0, "%s: no oneDNN layer ran in the emulation instead "
              "(%d did)", pairs[k].bd.name, onednn_fallbacks(nets[1]));
        CHECK(onednn_conv_form_mismatches(nets[1]) == 0,
              "%s: every convolution in the form DARKNET_AMP_CONV asks for", pairs[k].bd.name);
        free_nets(nets, 2);
    }
    return 0;
#endif
}

/* The GPU half layers against darknet's float32 GPU layers and (cpu_reference)
 * against the CPU emulation with cuDNN's batch-norm formula. */
static int gpu(const char *cfg, int cpu_reference, int resize)
{
    if (!test_gpu_available()) return 77;
#ifndef GPU
    (void)cfg, (void)cpu_reference, (void)resize;
    return 77;
#else
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        printf("SKIP: cannot query GPU 0\n");
        return 77;
    }
    const amp_dtype dtypes[] = {AMP_DTYPE_FLOAT16, AMP_DTYPE_BFLOAT16};
    for (int t = 0; t < 2; ++t) {
        const amp_dtype dt = dtypes[t];
        if (dt == AMP_DTYPE_BFLOAT16 && p.major < 8) {
            printf("ok: bfloat16 not tested: GPU 0 (%s) is compute capability %d.%d\n", p.name,
                   p.major, p.minor);
            continue;
        }
        const double eps = eps_of(dt);
        char name[2][48];
        snprintf(name[0], sizeof name[0], "%s vs float32", amp_dtype_name(dt));
        snprintf(name[1], sizeof name[1], "%s vs emulation", amp_dtype_name(dt));
        const bounds bd[2] = {{name[0], 8 * eps, 8 * eps, dt == AMP_DTYPE_BFLOAT16 ? 0.6 : 0.3, 0},
                              {name[1], 4 * eps, 4 * eps, dt == AMP_DTYPE_BFLOAT16 ? 0.1 : 0.05, 1}};
        const net_spec f32 = {1, 0, dt, NULL, AMP_BN_DARKNET_CPU};
        const net_spec half = {1, 1, dt, NULL, AMP_BN_DARKNET_CPU};
        const net_spec emul = {0, 1, dt, "emulate", AMP_BN_CUDNN};
        /* --plan: the GPU's activation plan (DARKNET_AMP_GPU_PLAN=half) against
         * the emulation under the CPU's */
        if (plan_on) setenv("DARKNET_AMP_GPU_PLAN", "half", 1);
        /* --no-cpu-reference: a cfg whose layers darknet cannot run on the CPU
         * (rnn, lstm: upstream's CPU code writes out of bounds or crashes) is
         * compared with darknet's float32 GPU layers only */
        const int count = cpu_reference ? 3 : 2;
        network *nets[3] = {build(cfg, &f32), build(cfg, &half),
                            cpu_reference ? build(cfg, &emul) : NULL};
        /* convolutions (crnn's sub-layers too) through cuDNN; GEMMs (connected,
         * deconvolutional, the sub-layers of rnn, gru and lstm) through cuBLAS */
        const LAYER_TYPE cudnn[] = {CONVOLUTIONAL, CRNN};
        const LAYER_TYPE cublas[] = {CONNECTED, DECONVOLUTIONAL, RNN, GRU, LSTM};
        int convs = count_types(nets[1], cudnn, 2), gemms = count_types(nets[1], cublas, 5);
        CHECK(count_label(nets[1], "cuDNN") == convs,
              "%s: %d of %d convolutional layers through cuDNN", amp_dtype_name(dt),
              count_label(nets[1], "cuDNN"), convs);
        CHECK(count_label(nets[1], "cuBLAS") == gemms,
              "%s: %d of %d connected, deconvolutional and recurrent layers through cuBLAS",
              amp_dtype_name(dt), count_label(nets[1], "cuBLAS"), gemms);
        if (plan_on)
            CHECK(half_tensors(nets[1]) > 0, "%s: the GPU's plan stores %d layers' outputs in "
                  "half (the emulation's %d)", amp_dtype_name(dt), half_tensors(nets[1]),
                  cpu_reference ? half_tensors(nets[2]) : 0);
        passes(nets, count, (int[]){0, 2}, (int[]){1, 1}, bd, count - 1, resize);
        amp_net *an = amp_net_of(nets[1]);
        CHECK(an && !an->error[0], "%s: no device error (%s)", amp_dtype_name(dt),
              an ? an->error : "not attached");
        /* not freed without a CPU reference: upstream's free_layer frees an
         * rnn layer's output twice */
        if (cpu_reference) free_nets(nets, count);
    }
    return 0;
#endif
}

/* ---- --kinds: every kind x dtype a backend supports ---- */

/* A kind's network: [net] and a convolution, the kind's body (or a cfg of
 * tests/cfg), then a convolution, an average pool, a 1x1 convolution and
 * softmax, which owns the cost. cpu_skip: why darknet's CPU cannot be the
 * reference (the kind is compared on a GPU only); gpu_emul_skip: why the CPU
 * emulation cannot be the GPU's second reference (the GPU is compared with
 * darknet's float32 GPU layers only, as gpu.half_layers.gru is). One of darknet's own CPU
 * faults shapes a body: the backward of a 1x1 convolution writes its data
 * gradient over the input's delta instead of adding, so the route's second
 * reader is a 3x3 convolution (with a 1x1, darknet's float32 loses the
 * route's share of layer 0's gradient, which the half forms keep). The local
 * layer's workspace is the network's largest here, which overran it before
 * patch 0024 (its size in floats where the network allocates bytes). The
 * average pool is the one the tail has. */
typedef struct {
    LAYER_TYPE type;
    const char *body, *cfg, *cpu_skip, *gpu_emul_skip;
} kind_net;

#define KN_CONV(f, sz, st) \
    "[convolutional]\nbatch_normalize=1\nfilters=" #f "\nsize=" #sz "\nstride=" #st "\npad=1\n" \
    "activation=leaky\n\n"

static const kind_net kind_nets[] = {
    {CONVOLUTIONAL, KN_CONV(16, 3, 2), NULL, NULL, NULL},
    {DECONVOLUTIONAL, "[deconvolutional]\nbatch_normalize=1\nfilters=8\nsize=4\nstride=2\n"
                      "padding=1\nactivation=leaky\n\n", NULL, NULL, NULL},
    {CONNECTED, "[connected]\noutput=24\nactivation=leaky\n\n", NULL, NULL, NULL},
    {LOCAL, "[local]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n\n", NULL, NULL, NULL},
    {CRNN, NULL, "crnn.cfg", NULL, NULL},
    {GRU, NULL, "gru.cfg", NULL,
     "darknet's CPU gru has an empty backward: the emulation's gradients are not the GPU's"},
    {RNN, NULL, "recurrent.cfg", "darknet's CPU rnn forward writes past a buffer", NULL},
    {LSTM, NULL, "recurrent.cfg", "darknet's CPU lstm crashes", NULL},
    {MAXPOOL, "[maxpool]\nsize=2\nstride=1\n\n", NULL, NULL, NULL},
    {AVGPOOL, "", NULL, NULL, NULL},
    {ROUTE, KN_CONV(8, 3, 1) "[route]\nlayers=-1,-2\n\n", NULL, NULL, NULL},
    {SHORTCUT, KN_CONV(8, 3, 1) "[shortcut]\nfrom=-2\nactivation=linear\n\n", NULL, NULL, NULL},
    {UPSAMPLE, "[upsample]\nstride=2\n\n", NULL, NULL, NULL},
    {REORG, "[reorg]\nstride=2\n\n", NULL, NULL, NULL},
    {DROPOUT, "[dropout]\nprobability=.25\n\n", NULL, NULL, NULL},
    {ACTIVE, "[activation]\nactivation=logistic\n\n", NULL, NULL, NULL},
};

/* The kind's network as a cfg file under out (or tests/cfg's): its path. */
static const char *kind_cfg(const kind_net *kn, const char *name, const char *cfgdir,
                            const char *out, char *path, size_t n)
{
    if (kn->cfg) {
        snprintf(path, n, "%s/%s", cfgdir, kn->cfg);
        return path;
    }
    snprintf(path, n, "%s/%s.cfg", out, name);
    mkdir(out, 0777); /* there already, or fopen says why not */
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fprintf(f, "[net]\nbatch=2\nsubdivisions=1\nheight=16\nwidth=16\nchannels=3\n"
               "momentum=0.9\ndecay=0.0005\nlearning_rate=0.05\nmax_batches=100\n\n"
               KN_CONV(8, 3, 1) "%s" KN_CONV(8, 3, 1)
               "[avgpool]\n\n[convolutional]\nfilters=5\nsize=1\nstride=1\npad=1\n"
               "activation=linear\n\n[softmax]\n",
            kn->body);
    return fclose(f) == 0 ? path : NULL;
}

/* The first layer of the kind's type (after the leading convolution). */
static int kind_layer(const network *net, LAYER_TYPE type)
{
    for (int i = 1; i < net->n; ++i)
        if (net->layers[i].type == type) return i;
    return net->layers[0].type == type ? 0 : -1;
}

/* One kind in one dtype on a backend (gpu: CUDA), against darknet's float32
 * (its own device) and the emulation on the CPU. */
static void kind_pairs(const char *cfg, const amp_layer_kind *k, const kind_net *kn,
                       amp_dtype dt, int gpu)
{
    const double eps = eps_of(dt);
    char name[2][64];
    snprintf(name[0], sizeof name[0], "[%s] %s vs float32", k->name, amp_dtype_name(dt));
    snprintf(name[1], sizeof name[1], "[%s] %s vs emulation", k->name, amp_dtype_name(dt));
    const bounds bd[2] = {{name[0], 8 * eps, 8 * eps, dt == AMP_DTYPE_BFLOAT16 ? 0.6 : 0.3, 0},
                          {name[1], 4 * eps, 4 * eps, dt == AMP_DTYPE_BFLOAT16 ? 0.1 : 0.05, 1}};
    const int cpu_ref = !kn->cpu_skip && !(gpu && kn->gpu_emul_skip);
    if (gpu && kn->gpu_emul_skip)
        printf("note: [%s] %s: compared with darknet's float32 on the GPU only (%s)\n", k->name,
               amp_dtype_name(dt), kn->gpu_emul_skip);
    plan_on = !gpu; /* the CPU's half tensors between layers: the movement kinds' forms run */
    const net_spec f32 = {gpu, 0, dt, NULL, AMP_BN_DARKNET_CPU};
    const net_spec half = {gpu, 1, dt, gpu ? NULL : "auto", AMP_BN_DARKNET_CPU};
    const net_spec emul = {0, 1, dt, "emulate", gpu ? AMP_BN_CUDNN : AMP_BN_DARKNET_CPU};
    const int count = cpu_ref ? 3 : 2;
    network *nets[3] = {build(cfg, &f32), build(cfg, &half), cpu_ref ? build(cfg, &emul) : NULL};
    const int i = kind_layer(nets[1], k->type);
    const amp_net *an = amp_net_of(nets[1]);
    if (k->role == AMP_ROLE_MOVES)
        CHECK(i >= 0 && an->layers[i].region && an->layers[i].out_half,
              "%s %s: layer %d [%s] carries half tensors (its half form)", gpu ? "CUDA" : "CPU",
              amp_dtype_name(dt), i, k->name);
    else
        CHECK(i >= 0 && an->layers[i].precision == AMP_PRECISION_HALF,
              "%s %s: layer %d [%s] in half (%s)", gpu ? "CUDA" : "CPU", amp_dtype_name(dt), i,
              k->name, i >= 0 && an->layers[i].label ? an->layers[i].label : "no label");
    passes(nets, count, (int[]){0, 2}, (int[]){1, 1}, bd, count - 1, 0);
    if (cpu_ref) free_nets(nets, count); /* upstream's free_layer frees an rnn's output twice */
}

static int kinds(const char *backend, const char *cfgdir, const char *out)
{
    const int gpu = !strcmp(backend, "cuda");
    if (gpu && !test_gpu_available()) return 77;
    const amp_backend_ops *ops = amp_backend_for(&(network){.gpu_index = gpu ? 0 : -1});
    const amp_dtype dtypes[] = {AMP_DTYPE_FLOAT16, AMP_DTYPE_BFLOAT16};
    int compared = 0;
    for (int j = 0; j < amp_kind_count(); ++j) {
        const amp_layer_kind *k = amp_kind_at(j);
        if (k->role == AMP_ROLE_NORMALISES) continue; /* float32 everywhere */
        const kind_net *kn = NULL;
        for (size_t m = 0; m < sizeof kind_nets / sizeof kind_nets[0]; ++m)
            if (kind_nets[m].type == k->type) kn = &kind_nets[m];
        CHECK(kn != NULL, "[%s]: a network to test the kind with (kind_nets)", k->name);
        if (!kn) continue;
        char path[1024];
        const char *cfg = kind_cfg(kn, k->name, cfgdir, out, path, sizeof path);
        CHECK(cfg != NULL, "[%s]: its network written to %s", k->name, path);
        for (int t = 0; cfg && t < 2; ++t) {
            if (!ops->supports(k, dtypes[t])) {
                printf("ok: %s has no half form for [%s] in %s: not compared\n", ops->name,
                       k->name, amp_dtype_name(dtypes[t]));
                continue;
            }
            if (!gpu && kn->cpu_skip) {
                printf("ok: [%s] not compared on the CPU: %s (the GPU's kinds compare it)\n",
                       k->name, kn->cpu_skip);
                continue;
            }
            kind_pairs(cfg, k, kn, dtypes[t], gpu);
            compared += 1;
        }
    }
    CHECK(compared > 0, "%s: %d kind x dtype pairs compared", ops->name, compared);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--kinds")) {
        const int skip = kinds(argv[2], argv[3], argv[4]);
        return skip ? skip : check_report();
    }
    const char *mode = "gpu", *cfg = NULL;
    int resize = 0, expect = 0, bad = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--emulation")) mode = "emulation";
        else if (!strcmp(argv[i], "--cpu")) mode = "cpu";
        else if (!strcmp(argv[i], "--no-cpu-reference")) mode = "gpu-only";
        else if (!strcmp(argv[i], "--onednn") && i + 1 < argc)
            mode = "onednn", expect = atoi(argv[++i]);
        else if (!strcmp(argv[i], "resize")) resize = 1;
        else if (!strcmp(argv[i], "--plan")) plan_on = 1;
        else if (!strcmp(argv[i], "--aligned")) mode = "aligned";
        else if (!cfg) cfg = argv[i];
        else bad = 1;
    }
    if (!cfg || bad) {
        fprintf(stderr, "usage: backend_parity [--emulation | --cpu | --onednn N | "
                        "--no-cpu-reference | --aligned] [--plan] CFG [resize]\n");
        return 2;
    }
    int skip = 0;
    if (!strcmp(mode, "emulation")) cpu_half(cfg, "emulate", resize);
    else if (!strcmp(mode, "cpu")) cpu_half(cfg, "auto", resize);
    else if (!strcmp(mode, "onednn")) skip = onednn(cfg, expect, resize);
    else if (!strcmp(mode, "aligned")) aligned(cfg);
    else skip = gpu(cfg, strcmp(mode, "gpu-only") != 0, resize);
    return skip ? skip : check_report();
}

/* The GPU half layers (cuda/half_conv.c, cuda/half_gemm.c) against the code
 * they replace and against the CPU emulation of the same dtype.
 *
 *   gpu_half_test CFG [resize]            GPU 0; skipped (77) without one
 *   gpu_half_test --emulation CFG [resize] the CPU emulation against darknet's
 *                                         CPU float32, with the first pair's
 *                                         bounds (any build, no GPU)
 *   gpu_half_test --cpu CFG [resize]      the same with the CPU's own choice
 *                                         (oneDNN for bfloat16 where the CPU
 *                                         runs it, else the emulation)
 *   gpu_half_test --no-cpu-reference CFG  GPU only: the GPU half layers
 *                                         against darknet's float32 GPU
 *                                         layers, no CPU network (for layers
 *                                         darknet cannot run on the CPU)
 *
 * Networks from CFG, same seed (same initial weights), same input, same
 * gradient arriving at the last layer, for float16 and (compute capability
 * 8.0 and up) bfloat16:
 *   vs float32:   darknet's own float32 GPU layers (cuDNN, FMA math)  vs  AMP
 *                 with the half layers on the GPU (cuDNN, cuBLAS);
 *   vs emulation: the CPU emulation (DARKNET_AMP_CPU=emulate) of the dtype
 *                 vs  the GPU half layers: the same rounding points, only the
 *                 order of the float32 sums (and cuDNN's algorithms) differ.
 *                 The emulation's batch-norm uses cuDNN's formula here
 *                 (biased variance, sqrt(var + 1e-5)), which darknet's GPU
 *                 layers run, not darknet's CPU one (unbiased variance,
 *                 sqrt(var) + 1e-6): at batch 4 those differ by 15%
 *                 (unit.bn_formula).
 * Each pair: every layer's output, then after one backward pass every
 * layer's delta and weight/bias/scale gradients; again after new weights
 * (pushed to the device, weights_version bumped as a load does: the half
 * weight copies must follow), and with "resize" after resize_network (the
 * cuDNN descriptors and algorithms must be remade).
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
 *   emulation, k = 4 (onednn_test.c's bound for the same rounding points):
 *   an element can land on the other side of a rounding boundary, one ulp,
 *   and be carried.
 * - gradients, as a whole: relative 2-norm |got - ref| / |ref|. Single
 *   elements can differ by their own size (an output near zero flips sign
 *   and leaky's slope with it), so no per-element bound. Against float32:
 *   0.3 float16, 0.6 bfloat16: --emulation measured at most 0.12 and 0.27
 *   on convs.cfg (16-element bias and scale gradients of the first layer,
 *   at the end of the longest backward chain), 0.13 and 0.24 on crnn.cfg
 *   (the convolution before the crnn, at the end of two time steps of
 *   backward), 0.07 and 0.18 on deconv.cfg, 0.04 on mixed.cfg. Against
 *   the emulation: 0.05 float16, 0.1 bfloat16 (onednn_test.c measured
 *   3.4e-2 for bfloat16 with the same rounding points and another sum
 *   order). A wrong layout, a gradient written over instead of added, or
 *   stale half weights (the new weights are the old ones times -1.25) give
 *   differences of order 1. The GPU pairs' bounds are set from these CPU
 *   measurements; they have not been run on a GPU yet (docs/gpu.md).
 */
#include "amp_internal.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef GPU
#include <cuda_runtime_api.h>
#endif

typedef struct {
    const char *name;
    double k_out;   /* outputs: k * eps * (max|ref| + |ref|) */
    double grad_l2; /* gradients: |got - ref| / |ref| */
} bounds;

static double eps_of(amp_dtype t)
{
    return t == AMP_DTYPE_BFLOAT16 ? 1.0 / 256 : 1.0 / 2048;
}

/* dev: 1 GPU 0, 0 CPU; dtype FLOAT32 with amp 0: darknet without AMP. */
/* DARKNET_AMP_CPU for the CPU half networks: "emulate" (--emulation, and the
 * GPU pairs' reference), or "auto" (--cpu). */
static const char *cpu_path = "emulate";
/* The batch-norm formula of the CPU half networks: darknet's CPU one against
 * CPU float32 (--emulation, --cpu), cuDNN's as the reference of the GPU half
 * layers, whose batch-norm is darknet's GPU one (cuDNN): like with like. */
static amp_bn_formula cpu_bn = AMP_BN_DARKNET_CPU;

static network *build(const char *cfg, int dev, int amp, amp_dtype dtype)
{
#ifdef GPU
    gpu_index = dev ? 0 : -1;
#else
    (void)dev;
#endif
    srand(11);
    network *net = parse_network_cfg((char *)cfg);
    if (!amp) return net;
    char err[512] = "";
    setenv("DARKNET_AMP_CPU", cpu_path, 1);
    amp_options o;
    amp_options_init(&o, dtype);
    o.dynamic = 0;
    o.init_scale = 1;
    amp_scaler *s = NULL;
    if (amp_scaler_create(&o, &s, err, sizeof err) != AMP_OK ||
        amp_attach(net, s, err, sizeof err) != AMP_OK) {
        printf("FAIL: attach (%s, %s): %s\n", amp_dtype_name(dtype), dev ? "GPU" : "CPU", err);
        exit(1);
    }
    if (!dev) amp_net_of(net)->bn_formula = cpu_bn;
    amp_policy_print(amp_net_of(net), stdout);
    return net;
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

static void compare(const char *what, const float *ref, const float *got, size_t n, double eps,
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
        double r = d / (b->k_out * eps * (max + fabs(ref[i])) + 1e-30);
        if (!(r <= worst)) worst = r, at = i; /* NaN counts as worst */
        equal += got[i] == ref[i];
    }
    double l2 = sqrt(d2 / (r2 > 0 ? r2 : 1e-30));
    if (!(d2 == d2)) l2 = NAN;
    if (gradient)
        CHECK(l2 <= b->grad_l2, "%-12s %-30s %7zu elements, |diff|/|ref| %.2e (bound %.0e), "
                                "worst element %zu: %.7g vs %.7g, max|ref| %.3g",
              b->name, what, n, l2, b->grad_l2, at, n ? got[at] : 0, n ? ref[at] : 0, max);
    else
        CHECK(worst <= 1, "%-12s %-30s %7zu elements, %5.1f%% equal, worst |diff|/bound %.3f "
                          "(element %zu: %.7g vs %.7g, max|ref| %.3g), |diff|/|ref| %.2e",
              b->name, what, n, 100.0 * equal / (n ? n : 1), worst, at, n ? got[at] : 0,
              n ? ref[at] : 0, max, l2);
}

#ifdef GPU
static void pull(float *gpu, float *host, size_t n)
{
    if (gpu && host && n) cuda_pull_array(gpu, host, n);
}
#endif

/* Forward on a fixed input, a fixed gradient into the last layer, backward;
 * a GPU network's arrays end up in its host arrays. */
static void run(network *net, unsigned seed)
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
    if (net->gpu_index >= 0)
        cuda_push_array(last->delta_gpu, last->delta, (size_t)last->outputs * last->batch);
#endif
    backward_network(net);
#ifdef GPU
    if (net->gpu_index < 0) return;
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        size_t n = (size_t)l->outputs * l->batch;
        pull(l->output_gpu, l->output, n);
        pull(l->delta_gpu, l->delta, n);
        layer *ps[AMP_MAX_SUBLAYERS];
        const char *names[AMP_MAX_SUBLAYERS];
        int np = parts(l, ps, names);
        for (int k = 0; k < np; ++k) {
            layer *p = ps[k];
            if (p != l) pull(p->output_gpu, p->output, (size_t)p->outputs * p->batch * l->steps);
            pull(p->weight_updates_gpu, p->weight_updates, nweights(p));
            pull(p->bias_updates_gpu, p->bias_updates, nbias(p));
            if (p->scale_updates_gpu) pull(p->scale_updates_gpu, p->scale_updates, nbias(p));
        }
    }
#endif
}

static void compare_nets(network *a, network *b, double eps, const bounds *bd, const char *when)
{
    char what[96];
    for (int i = 0; i < a->n; ++i) {
        layer *la = &a->layers[i], *lb = &b->layers[i];
        snprintf(what, sizeof what, "%s layer %d output", when, i);
        compare(what, la->output, lb->output, (size_t)la->outputs * la->batch, eps, bd, 0);
        layer *pa[AMP_MAX_SUBLAYERS], *pb[AMP_MAX_SUBLAYERS];
        const char *names[AMP_MAX_SUBLAYERS];
        int np = parts(la, pa, names);
        parts(lb, pb, names);
        for (int k = 0; k < np && pa[k] != la; ++k) { /* sub-layers: every time step */
            snprintf(what, sizeof what, "%s layer %d %s output", when, i, names[k]);
            compare(what, pa[k]->output, pb[k]->output,
                    (size_t)pa[k]->outputs * pa[k]->batch * steps_of(la), eps, bd, 0);
        }
    }
    for (int i = 0; i < a->n; ++i) {
        layer *la = &a->layers[i], *lb = &b->layers[i];
        if (la->delta) {
            snprintf(what, sizeof what, "%s layer %d delta", when, i);
            compare(what, la->delta, lb->delta, (size_t)la->outputs * la->batch, eps, bd, 1);
        }
        layer *pa[AMP_MAX_SUBLAYERS], *pb[AMP_MAX_SUBLAYERS];
        const char *names[AMP_MAX_SUBLAYERS];
        int np = parts(la, pa, names);
        parts(lb, pb, names);
        for (int k = 0; k < np; ++k) {
            const char *sep = *names[k] ? " " : "";
            snprintf(what, sizeof what, "%s layer %d%s%s weight grad", when, i, sep, names[k]);
            compare(what, pa[k]->weight_updates, pb[k]->weight_updates, nweights(pa[k]), eps, bd,
                    1);
            snprintf(what, sizeof what, "%s layer %d%s%s bias grad", when, i, sep, names[k]);
            compare(what, pa[k]->bias_updates, pb[k]->bias_updates, nbias(pa[k]), eps, bd, 1);
            if (pa[k]->batch_normalize) {
                snprintf(what, sizeof what, "%s layer %d%s%s scale grad", when, i, sep, names[k]);
                compare(what, pa[k]->scale_updates, pb[k]->scale_updates, nbias(pa[k]), eps, bd,
                        1);
            }
        }
    }
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

static int count_backend(network *net, amp_backend b)
{
    amp_net *an = amp_net_of(net);
    int n = 0;
    for (int i = 0; an && i < net->n; ++i)
        n += an->layers[i].precision == AMP_PRECISION_HALF && an->layers[i].backend == b;
    return n;
}

/* Layers of the given types. */
static int count_types(network *net, const LAYER_TYPE *types, int ntypes)
{
    int n = 0;
    for (int i = 0; i < net->n; ++i)
        for (int t = 0; t < ntypes; ++t) n += net->layers[i].type == types[t];
    return n;
}

/* The three passes on (ref, got): first, new weights, resized. */
static void passes(network **nets, int count, double eps, const bounds *bd, int resize)
{
    for (int k = 0; k < count; ++k) run(nets[k], 3);
    compare_nets(nets[0], nets[1], eps, &bd[0], "first pass");
    if (count == 3) compare_nets(nets[2], nets[1], eps, &bd[1], "first pass");
    for (int k = 0; k < count; ++k) {
        change_weights(nets[k]);
        run(nets[k], 4);
    }
    compare_nets(nets[0], nets[1], eps, &bd[0], "new weights");
    if (count == 3) compare_nets(nets[2], nets[1], eps, &bd[1], "new weights");
    if (!resize) return;
    for (int k = 0; k < count; ++k) {
        resize_network(nets[k], 28, 26);
        run(nets[k], 5);
    }
    compare_nets(nets[0], nets[1], eps, &bd[0], "resized 28x26");
    if (count == 3) compare_nets(nets[2], nets[1], eps, &bd[1], "resized 28x26");
}

int main(int argc, char **argv)
{
    int emulation = 0, resize = 0, cpu_reference = 1;
    const char *cfg = NULL;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--emulation")) emulation = 1;
        else if (!strcmp(argv[i], "--cpu")) emulation = 1, cpu_path = "auto";
        else if (!strcmp(argv[i], "--no-cpu-reference")) cpu_reference = 0;
        else if (!strcmp(argv[i], "resize")) resize = 1;
        else if (!cfg) cfg = argv[i];
        else cfg = NULL, i = argc;
    }
    if (!cfg) {
        fprintf(stderr, "usage: gpu_half_test [--emulation | --cpu | --no-cpu-reference] CFG "
                        "[resize]\n");
        return 2;
    }
    const amp_dtype dtypes[] = {AMP_DTYPE_FLOAT16, AMP_DTYPE_BFLOAT16};
    for (int t = 0; t < 2; ++t) {
        const amp_dtype dt = dtypes[t];
        const double eps = eps_of(dt);
        bounds bd[2] = {{"vs float32", 8, dt == AMP_DTYPE_BFLOAT16 ? 0.6 : 0.3},
                        {"vs emulation", 4, dt == AMP_DTYPE_BFLOAT16 ? 0.1 : 0.05}};
        char name[2][48];
        for (int k = 0; k < 2; ++k) {
            snprintf(name[k], sizeof name[k], "%s %s", amp_dtype_name(dt), bd[k].name);
            bd[k].name = name[k];
        }
        if (emulation) {
            network *nets[2] = {build(cfg, 0, 0, dt), build(cfg, 0, 1, dt)};
            const LAYER_TYPE half[] = {CONVOLUTIONAL, DECONVOLUTIONAL, CONNECTED,
                                       RNN,           GRU,             LSTM, CRNN};
            int want = count_types(nets[1], half, 7);
            int got = count_backend(nets[1], AMP_BACKEND_EMULATED) +
                      count_backend(nets[1], AMP_BACKEND_ONEDNN);
            CHECK(got == want,
                  "%s: %d of %d convolutional, deconvolutional, connected and recurrent layers "
                  "in half on the CPU (%d through oneDNN)", amp_dtype_name(dt), got, want,
                  count_backend(nets[1], AMP_BACKEND_ONEDNN));
            passes(nets, 2, eps, bd, resize);
            for (int k = 0; k < 2; ++k) free_network(nets[k]);
            continue;
        }
#ifndef GPU
        (void)cpu_reference;
        printf("SKIP: a CPU build (no GPU half layers)\n");
        return 77;
#else
        int ndev = 0;
        if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
            printf("SKIP: no CUDA device\n");
            return 77;
        }
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
            printf("SKIP: cannot query GPU 0\n");
            return 77;
        }
        if (dt == AMP_DTYPE_BFLOAT16 && p.major < 8) {
            printf("ok: bfloat16 not tested: GPU 0 (%s) is compute capability %d.%d\n", p.name,
                   p.major, p.minor);
            continue;
        }
        cuda_set_device(0);
        cpu_bn = AMP_BN_CUDNN;
        /* --no-cpu-reference: a cfg whose layers darknet cannot run on the CPU
         * (rnn, lstm: upstream's CPU code writes out of bounds or crashes) is
         * compared with darknet's float32 GPU layers only */
        const int count = cpu_reference ? 3 : 2;
        network *nets[3] = {build(cfg, 1, 0, dt), build(cfg, 1, 1, dt),
                            cpu_reference ? build(cfg, 0, 1, dt) : NULL};
        /* convolutions (crnn's sub-layers too) through cuDNN; GEMMs (connected,
         * deconvolutional, the sub-layers of rnn, gru and lstm) through cuBLAS */
        const LAYER_TYPE cudnn[] = {CONVOLUTIONAL, CRNN};
        const LAYER_TYPE cublas[] = {CONNECTED, DECONVOLUTIONAL, RNN, GRU, LSTM};
        int convs = count_types(nets[1], cudnn, 2), gemms = count_types(nets[1], cublas, 5);
        CHECK(count_backend(nets[1], AMP_BACKEND_CUDNN) == convs,
              "%s: %d of %d convolutional layers through cuDNN", amp_dtype_name(dt),
              count_backend(nets[1], AMP_BACKEND_CUDNN), convs);
        CHECK(count_backend(nets[1], AMP_BACKEND_CUBLAS) == gemms,
              "%s: %d of %d connected, deconvolutional and recurrent layers through cuBLAS",
              amp_dtype_name(dt), count_backend(nets[1], AMP_BACKEND_CUBLAS), gemms);
        passes(nets, count, eps, bd, resize);
        amp_net *an = amp_net_of(nets[1]);
        CHECK(an && !an->error[0], "%s: no device error (%s)", amp_dtype_name(dt),
              an ? an->error : "not attached");
        /* not freed without a CPU reference: upstream's free_layer frees an
         * rnn layer's output twice */
        for (int k = 0; cpu_reference && k < count; ++k) free_network(nets[k]);
#endif
    }
    return check_report();
}

/* Networks built for the CPU keep working through darknet's batch and size
 * changes, with and without AMP, in every build: in a CUDA build (where this
 * runs on a GPU, or on the fake device without one) a CPU network's
 * set_batch_network() and resize_network() used to stop the program (patch
 * 0009).
 *
 *   cpu_network_test CFG train|batch|resize
 *
 * For darknet's float32 layers, AMP float16 (emulated) and AMP bfloat16 (the
 * CPU's own path), on a network built with gpu_index -1 from CFG:
 * 1. inference on a batch of random images;
 * 2. (batch, resize) set_batch_network(net, 1), inference on the first image alone: it must
 *    give the first row of step 1 (darknet and the half layers compute image
 *    by image; oneDNN may pick another kernel for one image, so the half
 *    dtypes get 4 ulps of the tensor's largest value, float32 none);
 * 3. set_batch_network back; (resize) resize_network() to 28x26, a
 *    finite output of the new size, then back to the cfg's size, where the
 *    output must be step 1's again (bit for bit: same weights, same shapes);
 * 4. (all) a training step (forward, backward, update): a finite loss, and a
 *    finite output afterwards.
 */
#include "cpu.h"
#include "check.h"
#include "nets.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MODE_TRAIN, MODE_BATCH, MODE_RESIZE };

static network *build(const char *cfg, int amp, amp_dtype dtype)
{
    network *net = test_net(cfg, 0); /* a CPU network, also in a CUDA build */
    if (!amp) return net;
    amp_options o;
    amp_options_init(&o, dtype);
    return test_attach(net, &o, dtype == AMP_DTYPE_FLOAT16 ? "emulate" : "auto");
}

static int finite_all(const float *x, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static double largest(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; ++i) m = fmax(m, fabs(x[i]));
    return m;
}

/* Largest |got - ref| in units of the tensor's largest |ref|. */
static double rel_max_diff(const float *ref, const float *got, size_t n)
{
    double max = 0, d = 0;
    for (size_t i = 0; i < n; ++i) max = fmax(max, fabs(ref[i]));
    for (size_t i = 0; i < n; ++i) d = fmax(d, fabs((double)got[i] - ref[i]));
    return max > 0 ? d / max : d;
}

static void one(const char *cfg, int mode, int amp, amp_dtype dtype)
{
    const char *name = amp ? amp_dtype_name(dtype) : "darknet float32";
    const double bound = !amp ? 0 : dtype == AMP_DTYPE_BFLOAT16 ? 4.0 / 256 : 4.0 / 2048;
    network *net = build(cfg, amp, dtype);
    const int batch = net->batch, w = net->w, h = net->h;
    const size_t nout = (size_t)net->outputs;
    /* A trained network's statistics: darknet starts rolling variances at 0,
     * and inference would divide by 1e-6. */
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].batch_normalize && net->layers[i].rolling_variance)
            for (int k = 0; k < net->layers[i].out_c; ++k) net->layers[i].rolling_variance[k] = 1;
    net->train = 0;
    test_inputs(net, 3, 0);
    float *ref = malloc(nout * batch * sizeof(float));
    memcpy(ref, network_predict(net, net->input), nout * batch * sizeof(float));
    CHECK(finite_all(ref, nout * batch), "%s: batch %d inference finite (largest |output| %g)", name,
          batch, largest(ref, nout * batch));

    float *first = malloc((size_t)net->inputs * sizeof(float));
    memcpy(first, net->input, (size_t)net->inputs * sizeof(float));
    double d = 0;
    if (mode >= MODE_BATCH) {
        set_batch_network(net, 1);
        float *one_out = network_predict(net, first);
        d = rel_max_diff(ref, one_out, nout);
        CHECK(d <= bound, "%s: set_batch_network(1): the first image alone gives batch %d's "
                          "first row (largest difference %.3g of the largest value, bound %.3g)",
              name, batch, d, bound);
        set_batch_network(net, batch);
    }

    if (mode == MODE_RESIZE) {
        resize_network(net, 28, 26);
        test_inputs(net, 4, 0);
        float *out = network_predict(net, net->input);
        CHECK(net->w == 28 && net->h == 26 && finite_all(out, (size_t)net->outputs * batch),
              "%s: resize_network to 28x26: %d outputs per image, finite", name, net->outputs);
        resize_network(net, w, h);
        test_inputs(net, 3, 0);
        out = network_predict(net, net->input);
        d = rel_max_diff(ref, out, nout * batch);
        CHECK(net->outputs == (int)nout && d == 0,
              "%s: resized back to %dx%d: the first inference's output again (largest "
              "difference %.3g)", name, w, h, d);
    }

    net->train = 1;
    test_inputs(net, 5, 1);
    layer *last = &net->layers[net->n - 1];
    int cost = 0;
    for (int i = 0; i < net->n; ++i) cost |= net->layers[i].cost != NULL;
    float loss = train_network_datum(net);
    CHECK((!cost || isfinite(loss)) && finite_all(last->output, (size_t)last->outputs * batch),
          "%s: a training step: %s %g, output finite", name, cost ? "loss" : "no cost layer, loss",
          loss);
    free(ref);
    free(first);
    free_network(net);
}

int main(int argc, char **argv)
{
    const char *modes[] = {"train", "batch", "resize"};
    int mode = -1;
    for (int m = 0; argc == 3 && m < 3; ++m)
        if (!strcmp(argv[2], modes[m])) mode = m;
    if (mode < 0) {
        fprintf(stderr, "usage: cpu_network_test CFG train|batch|resize\n");
        return 2;
    }
    one(argv[1], mode, 0, AMP_DTYPE_FLOAT32);
    one(argv[1], mode, 1, AMP_DTYPE_FLOAT16);
    one(argv[1], mode, 1, AMP_DTYPE_BFLOAT16);
    return check_report();
}

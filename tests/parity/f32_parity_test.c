/* AMP with amp_dtype=float32 and a loss scale of 2^16 trains bit for bit like
 * darknet without AMP, on the layers the embedded detector lacks: connected
 * layers with and without batch-norm (mixed.cfg) and the connected sub-layers
 * of a gru (gru.cfg).
 *
 *   f32_parity_test [--gpu] CFG
 *
 * Two networks from CFG with the same seed train 6 steps on the same random
 * inputs and one-hot labels; every weight, bias and batch-norm scale, and
 * every loss, must be equal bit for bit. On the GPU (--gpu; skipped, 77,
 * without one) this holds only if the connected layers' gradient clip acts at
 * the scale: darknet's GPU connected layer clips its incoming delta to
 * [-1, 1], and a scaled delta clipped at 1 is a true gradient clipped at 2^-16
 * (docs/gpu.md). On the CPU, darknet has no such clip.
 */
#include "core.h"
#include "check.h"
#include "nets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef GPU
#include "connected_layer.h" /* pull_connected_layer */
#endif

static network *build(const char *cfg, int gpu, int amp)
{
    network *net = test_net(cfg, gpu);
    if (!amp) return net;
    amp_options o;
    amp_options_init(&o, AMP_DTYPE_FLOAT32);
    o.dynamic = 0;
    o.init_scale = 65536; /* a power of two: scaling and unscaling are exact */
    return test_attach(net, &o, NULL);
}

/* Elements of the parameters of a and b (pulled from the device) that differ. */
static size_t differing(network *a, network *b, size_t *total)
{
    size_t bad = 0;
    *total = 0;
    for (int i = 0; i < a->n; ++i) {
        layer *pa[AMP_MAX_SUBLAYERS], *pb[AMP_MAX_SUBLAYERS];
        const char *names[AMP_MAX_SUBLAYERS];
        int np = amp_sublayers(&a->layers[i], pa, names);
        amp_sublayers(&b->layers[i], pb, names);
        if (!np && a->layers[i].type == CONNECTED) {
            pa[0] = &a->layers[i], pb[0] = &b->layers[i];
            np = 1;
        }
        for (int k = 0; k < np; ++k) {
            layer *x = pa[k], *y = pb[k];
#ifdef GPU
            if (a->gpu_index >= 0) {
                pull_connected_layer(*x);
                pull_connected_layer(*y);
            }
#endif
            const size_t nw = (size_t)x->inputs * x->outputs, nb = (size_t)x->outputs;
            bad += test_ndiff(x->weights, y->weights, nw) + test_ndiff(x->biases, y->biases, nb);
            *total += nw + nb;
            if (x->batch_normalize) {
                bad += test_ndiff(x->scales, y->scales, nb);
                *total += nb;
            }
        }
    }
    return bad;
}

int main(int argc, char **argv)
{
    int gpu = argc == 3 && !strcmp(argv[1], "--gpu");
    const char *cfg = argv[argc - 1];
    if (argc < 2 || (argc == 3 && !gpu)) {
        fprintf(stderr, "usage: f32_parity_test [--gpu] CFG\n");
        return 2;
    }
    if (gpu && !test_gpu_available()) return 77;
    network *ref = build(cfg, gpu, 0), *amp = build(cfg, gpu, 1);
    int same_loss = 0;
    const int steps = 6;
    for (int step = 1; step <= steps; ++step) {
        test_inputs(ref, 100 + step, 1);
        test_inputs(amp, 100 + step, 1);
        float lr = train_network_datum(ref), la = train_network_datum(amp);
        same_loss += memcmp(&lr, &la, sizeof lr) == 0;
        printf("step %d: loss %.9g (darknet) %.9g (AMP float32, scale 65536)\n", step, lr, la);
    }
    size_t total = 0, bad = differing(ref, amp, &total);
    CHECK(same_loss == steps, "%s, %s: losses bit for bit equal in %d of %d steps", cfg,
          gpu ? "GPU" : "CPU", same_loss, steps);
    CHECK(bad == 0 && total > 0,
          "%s, %s: connected parameters after %d steps: %zu of %zu elements differ", cfg,
          gpu ? "GPU" : "CPU", steps, bad, total);
    return check_report();
}

/* An update with no scaled batch pending moves the weights, and the half
 * layers must compute with the moved weights afterwards.
 *
 *   idle_update_test CFG
 *
 * A program may fill a layer's *_updates itself and call update_network()
 * with no training pass before it (darknet's lsd.c GAN loops do). For
 * float32, float16 (emulated) and bfloat16 (the CPU's own path): train one
 * step, write updates into every parameter layer, update_network(), predict;
 * then save the weights, load them into a fresh network of the same cfg and
 * dtype, and predict the same input. The two predictions must be equal bit
 * for bit: a half layer still computing with its half copy of the weights
 * from before the update differs by percents.
 */
#include "core.h"
#include "check.h"
#include "nets.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static network *build(const char *cfg, amp_dtype dtype)
{
    amp_options o;
    amp_options_init(&o, dtype);
    return test_attach(test_net(cfg, 0), &o, dtype == AMP_DTYPE_FLOAT16 ? "emulate" : "auto");
}

static size_t nweights(const layer *l)
{
    return l->type == CONNECTED ? (size_t)l->inputs * l->outputs : (size_t)l->nweights;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: idle_update_test CFG\n");
        return 2;
    }
    const amp_dtype dtypes[] = {AMP_DTYPE_FLOAT32, AMP_DTYPE_FLOAT16, AMP_DTYPE_BFLOAT16};
    char path[] = "/tmp/idle_update_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    for (int t = 0; t < 3; ++t) {
        const char *name = amp_dtype_name(dtypes[t]);
        network *net = build(argv[1], dtypes[t]);
        /* one training step with AMP */
        test_inputs(net, 3, 1);
        train_network_datum(net);
        /* an update with no training pass before it */
        srand(5);
        for (int i = 0; i < net->n; ++i) {
            layer *l = &net->layers[i];
            if (!l->update || !l->weight_updates) continue;
            for (size_t k = 0; k < nweights(l); ++k)
                l->weight_updates[k] = ((float)rand() / RAND_MAX * 2 - 1) * 40;
        }
        update_network(net);
        test_inputs(net, 7, 0);
        net->train = 0;
        const size_t n = (size_t)net->outputs * net->batch;
        float *after = malloc(n * sizeof(float));
        memcpy(after, network_predict(net, net->input), n * sizeof(float));
        save_weights(net, path);

        network *fresh = build(argv[1], dtypes[t]);
        load_weights(fresh, path);
        test_inputs(fresh, 7, 0);
        fresh->train = 0;
        const float *ref = network_predict(fresh, fresh->input);
        double worst = 0, max = 0;
        const size_t differ = test_ndiff(after, ref, n);
        for (size_t i = 0; i < n; ++i) {
            worst = fmax(worst, fabs((double)after[i] - ref[i]));
            max = fmax(max, fabs((double)ref[i]));
        }
        CHECK(differ == 0, "%s: prediction after an update with no training pass equals a "
                           "network loaded from the saved weights: %zu of %zu outputs differ, "
                           "largest difference %.3g (%.2f%% of the largest output)",
              name, differ, n, worst, max > 0 ? 100 * worst / max : 0);
        free(after);
        amp_detach(net);
        amp_detach(fresh);
        free_network(net);
        free_network(fresh);
    }
    close(fd);
    unlink(path);
    char sidecar[sizeof path + 4];
    snprintf(sidecar, sizeof sidecar, "%s.amp", path);
    unlink(sidecar);
    return check_report();
}

/* Writes the weights of a cfg's network, freshly initialised from a seed as
 * darknet initialises them, with one layer's weights multiplied by a factor:
 * weights that make that layer's output overflow float16 or underflow into
 * its subnormals (tests/core/fallback.sh, probe.sh) while float32 trains
 * from them. Always a CPU network: in a CUDA build, save_weights would
 * otherwise save the device's copy of the weights, made before the scaling.
 *
 *   scale_weights CFG SEED LAYER FACTOR OUT [rolling_mean]
 *
 * rolling_mean: that layer's batch-norm rolling mean instead (FACTOR nan: a
 * NaN in each, which training keeps, 0.99 NaN + 0.01 x being NaN, and
 * saves: tests/core/nonfinite_save.sh).
 */
#include "darknet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    const int rolling = argc == 7 && !strcmp(argv[6], "rolling_mean");
    if (argc != 6 && !rolling) {
        fprintf(stderr, "usage: scale_weights CFG SEED LAYER FACTOR OUT [rolling_mean]\n");
        return 2;
    }
#ifdef GPU
    gpu_index = -1;
#endif
    srand((unsigned)strtoul(argv[2], NULL, 10));
    network *net = parse_network_cfg(argv[1]);
    const int k = atoi(argv[3]);
    const float f = strtof(argv[4], NULL);
    if (k < 0 || k >= net->n || !net->layers[k].weights || net->layers[k].nweights <= 0) {
        fprintf(stderr, "scale_weights: layer %d of %s has no weights\n", k, argv[1]);
        return 1;
    }
    layer *l = &net->layers[k];
    if (rolling && (!l->batch_normalize || !l->rolling_mean)) {
        fprintf(stderr, "scale_weights: layer %d of %s has no batch-norm statistics\n", k, argv[1]);
        return 1;
    }
    float *a = rolling ? l->rolling_mean : l->weights;
    const int n = rolling ? l->n : l->nweights;
    for (int i = 0; i < n; ++i) a[i] *= f;
    save_weights(net, argv[5]);
    printf("scale_weights: layer %d's %d %s times %g into %s\n", k, n,
           rolling ? "rolling means" : "weights", f, argv[5]);
    free_network(net);
    return 0;
}

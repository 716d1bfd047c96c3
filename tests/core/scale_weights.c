/* Writes the weights of a cfg's network, freshly initialised from a seed as
 * darknet initialises them, with one layer's weights multiplied by a factor:
 * weights that make that layer's output overflow float16 or underflow into
 * its subnormals (tests/core/fallback.sh, probe.sh) while float32 trains
 * from them. Always a CPU network: in a CUDA build, save_weights would
 * otherwise save the device's copy of the weights, made before the scaling.
 *
 *   scale_weights CFG SEED LAYER FACTOR OUT
 */
#include "darknet.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: scale_weights CFG SEED LAYER FACTOR OUT\n");
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
    for (int i = 0; i < l->nweights; ++i) l->weights[i] *= f;
    save_weights(net, argv[5]);
    printf("scale_weights: layer %d's %d weights times %g into %s\n", k, l->nweights, f, argv[5]);
    free_network(net);
    return 0;
}

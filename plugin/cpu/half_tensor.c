/* The plan's half tensors as the CPU backend's layer forms reach them
 * (activations.c places them): a layer's output shape as channels and
 * positions, the half delta a layer adds into, and the deltas a backward
 * zeroes before the first layer adds into them. */
#include "cpu.h"

#include <string.h>

void amp_cpu_tensor_shape(const network *net, int i, int *c, int *hw)
{
    const layer *l = &net->layers[i];
    *c = l->out_c;
    *hw = l->out_h * l->out_w;
    if (*c <= 0 || *hw <= 0 || (long)*c * *hw != l->outputs) { /* no spatial shape */
        *c = l->outputs;
        *hw = 1;
    }
}

uint16_t *amp_cpu_half_delta(const amp_net *an, int i)
{
    if (i < 0 || !an->layers[i].out_half || !an->layers[i].bk) return NULL;
    return cpu_layer_of(&an->layers[i])->delta_h;
}

void amp_cpu_deltas_begin(const amp_net *an, int j)
{
    int src[32];
    const int n = amp_plan_inputs(an->net, j, src, 32);
    for (int k = -1; k < n; ++k) {
        const int i = k < 0 ? j : src[k]; /* its own: a tensor nobody reads */
        if (i < 0 || !an->layers[i].out_half || an->layers[i].delta_from != j) continue;
        const layer *l = &an->net->layers[i];
        memset(cpu_layer_of(&an->layers[i])->delta_h, 0,
               (size_t)l->outputs * l->batch * sizeof(uint16_t));
    }
}

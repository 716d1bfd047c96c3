/* The activation plan as the CUDA backend makes it, on real networks, on the
 * host (no device touched): darknet's layers parsed for the CPU, each given
 * the io the CUDA backend offers (amp_cuda_io_of: its cuDNN half
 * convolutions whose tail tail.cu has, its half maxpool, route, upsample and
 * shortcut), the core's plan made (plan.c), and what the device then
 * stores per layer (amp_cuda_storage, as activations.c and half_conv.c use
 * it).
 *
 * Checks, per network:
 * - the plan keeps some outputs in half, and only the GPU's kinds carry
 *   them (a data-movement layer in the region is one the GPU has a half
 *   form for; every layer reading or writing a half tensor is a planned
 *   half convolution or such a layer);
 * - every delta in the pool (amp_plan_delta_pool_aligned with
 *   AMP_GPU_DELTA_ALIGN) starts at a 16-byte boundary;
 * - the device bytes of the tensors between layers (outputs, deltas,
 *   batch-norm inputs and normalised values, values kept before an
 *   activation) under the plan against darknet's float32: printed, and below
 *   the bound given (yolov3-tiny, yolov4-tiny: 0.75, as integration.plan
 *   requires of the CPU's plan).
 *
 *   gpu_activations_test CFG BOUND [CFG BOUND ...]
 */
#include "core.h"
#include "half_gpu.h" /* amp_cuda_io_of, amp_cuda_storage */

#include "activations.h" /* activation_needs_input */
#include "check.h"
#include "parser.h"

#include <stdio.h>
#include <stdlib.h>

static int gpu_kind(LAYER_TYPE t)
{
    return t == MAXPOOL || t == ROUTE || t == UPSAMPLE || t == SHORTCUT;
}

static void plan_network(const char *cfg, double bound)
{
    srand(1);
    network *net = parse_network_cfg((char *)cfg);
    amp_net an = {0};
    an.net = net;
    an.plan_on = 1;
    an.layers = calloc((size_t)net->n, sizeof *an.layers);
    CHECK(an.layers != NULL, "%s: memory for %d layer records", cfg, net->n);
    if (!an.layers) return;
    for (int i = 0; i < net->n; ++i) {
        amp_layer *al = &an.layers[i];
        const layer *l = &net->layers[i];
        amp_conv_dims d;
        char why[AMP_MSG_LEN];
        al->owner = &an;
        al->index = i;
        al->half_allowed = 1; /* no amp=0 in these cfgs, as amp_net_new starts */
        al->precision = amp_policy(l, AMP_DTYPE_FLOAT16, al->half_allowed);
        /* a convolution the CUDA backend runs in half: the policy's, and one
         * cuDNN can express (half_conv.c's setup) */
        const int cudnn_half =
            l->type == CONVOLUTIONAL && al->precision == AMP_PRECISION_HALF &&
            amp_conv_dims_make(l->batch, l->c, l->h, l->w, l->n, l->size, l->stride, l->pad,
                               l->groups, l->out_h, l->out_w, &d, why, sizeof why) == AMP_OK;
        al->io = amp_cuda_io_of(l, cudnn_half);
    }
    amp_plan_make(&an);

    int nhalf = 0, wrong_kind = 0, wrong_reader = 0, kept = 0, planned_convs = 0;
    double fp32 = 0, planned = 0;
    for (int i = 0; i < net->n; ++i) {
        const amp_layer *al = &an.layers[i];
        const layer *l = &net->layers[i];
        nhalf += al->out_half;
        wrong_kind += al->region && !gpu_kind(l->type);
        wrong_kind += al->io == AMP_IO_CONVERTS && l->type != CONVOLUTIONAL;
        int src[32];
        const int ns = amp_plan_inputs(net, i, src, 32);
        for (int k = 0; k < ns; ++k)
            if (src[k] >= 0 && an.layers[src[k]].out_half &&
                !(al->region || al->io == AMP_IO_CONVERTS))
                ++wrong_reader;
        /* the tensors' device bytes: darknet's float32 arrays, and the plan's */
        const double n = (double)l->outputs * l->batch;
        const int conv = l->type == CONVOLUTIONAL;
        const double x = conv && l->batch_normalize ? 2 * n : 0; /* x_gpu, x_norm_gpu */
        const double ai = conv && activation_needs_input(l->activation) ? n : 0;
        const double delta = l->delta || al->out_half ? n : 0;
        fp32 += 4 * (n + delta + x + ai);
        const amp_gpu_storage st = amp_cuda_storage(al, l);
        planned_convs += st.planned;
        /* a planned convolution with a half output keeps none of darknet's
         * float32 arrays its half tail makes again */
        if (st.planned && al->out_half)
            kept += (l->batch_normalize && !st.drop_x) ||
                    (activation_needs_input(l->activation) && !st.drop_activation_input) ||
                    ((l->batch_normalize || activation_needs_input(l->activation)) && !st.x_h);
        planned += st.output_half ? 2 * n : 4 * (n + delta); /* a half delta: in the pool */
        planned += st.drop_x ? 0 : 4 * x;
        planned += st.x_h ? 2 * n : 0;
        planned += st.drop_activation_input ? 0 : 4 * ai;
    }
    size_t *off = calloc((size_t)net->n, sizeof *off);
    const size_t pool = off ? amp_plan_delta_pool_aligned(&an, off, AMP_GPU_DELTA_ALIGN) : 0;
    int misaligned = 0;
    for (int i = 0; off && i < net->n; ++i)
        misaligned += an.layers[i].out_half && (off[i] * sizeof(uint16_t)) % 16;
    planned += 2.0 * (double)pool;
    free(off);

    CHECK(nhalf > 0, "%s: the GPU's plan stores %d of %d layers' outputs in half", cfg, nhalf,
          net->n);
    CHECK(wrong_kind == 0 && wrong_reader == 0,
          "%s: half tensors carried only by the GPU's planned convolutions and its maxpool, "
          "route, upsample and shortcut (%d layers of another kind, %d readers without a half form)",
          cfg, wrong_kind, wrong_reader);
    CHECK(planned_convs > 0 && kept == 0,
          "%s: %d planned convolutions, %d keeping a float32 array their half tail makes again",
          cfg, planned_convs, kept);
    CHECK(misaligned == 0, "%s: every half delta 16-byte aligned in the pool of %zu values (%d not)",
          cfg, pool, misaligned);
    const double ratio = planned / fp32;
    CHECK(ratio <= bound, "%s: tensors between layers %.1f MiB on the device under the plan, "
          "%.1f MiB in float32 at batch %d: %.3f (bound %.2f)", cfg, planned / 1048576.0,
          fp32 / 1048576.0, net->batch, ratio, bound);
    free(an.layers);
    free_network(net);
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc % 2 == 0) {
        fprintf(stderr, "usage: gpu_activations_test CFG BOUND [CFG BOUND ...]\n");
        return 2;
    }
    gpu_index = -1; /* darknet's CPU layers; their GPU functions are what the plan reads */
    for (int i = 1; i + 1 < argc; i += 2) plan_network(argv[i], atof(argv[i + 1]));
    return check_report();
}

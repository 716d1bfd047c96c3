/* The activation plan: how each tensor between layers is stored, decided once
 * at attach, the same way on every device (docs/design.md, "Activations").
 *
 * A tensor is a layer's output with its delta (the gradient darknet sums into
 * it). It is stored in the half dtype when the layer that writes it and every
 * layer that reads it can run that way (amp_layer.io, which the backend sets):
 * half layers (AMP_IO_CONVERTS) read and write either storage, converting at
 * their edges; data-movement layers (AMP_IO_HALF: maxpool, route, upsample,
 * shortcut where the backend has their half forms) run their half form only
 * when every tensor they read and the one they write are half. Every other
 * tensor stays darknet's float32 NCHW: the input image, what loss layers,
 * amp=0 layers and layers with no half form read, and the network's output.
 * So a conversion happens once at each edge of a half region.
 *
 * A half layer with batch-norm also keeps its batch-norm input (x) in half:
 * it is the half-rounded convolution, exact in half, and the normalised
 * values (x_norm) are made again from it in the backward, bit for bit.
 * An activation whose gradient needs its input (mish, swish, hard_mish) gets
 * that input made again the same way; without batch-norm, the layer's x in
 * half keeps it (the half-rounded convolution, before the bias).
 *
 * A half delta lives only in the backward pass: from the backward of its
 * last reader, which zeroes it before adding (darknet zeroes every delta in
 * the forward pass), to the backward of the layer that wrote the tensor.
 * Deltas that do not live at the same time share storage
 * (amp_plan_delta_pool); in a chain of layers two or three are alive at once.
 */
#include "backend.h" /* the backend's name */
#include "kinds.h"   /* amp_kind_half_shape */

#include "activations.h" /* activation_needs_input */

#include <stdlib.h>

int amp_plan_inputs(const network *net, int i, int *src, int max)
{
    const layer *l = &net->layers[i];
    int n = 0;
    if (l->type == ROUTE) {
        for (int k = 0; k < l->n && n < max; ++k) src[n++] = l->input_layers[k];
        return n;
    }
    src[n++] = i - 1; /* net.input: the previous layer's output, or the image */
    if (l->type == SHORTCUT && n < max) src[n++] = l->index;
    return n;
}

#define PLAN_MAX_INPUTS 32

/* Every layer that reads tensor i is in cand. */
static int readers_can(const network *net, const int *cand, int i)
{
    for (int j = i + 1; j < net->n; ++j) {
        int src[PLAN_MAX_INPUTS];
        const int n = amp_plan_inputs(net, j, src, PLAN_MAX_INPUTS);
        for (int k = 0; k < n; ++k)
            if (src[k] == i && !cand[j]) return 0;
    }
    return 1;
}

void amp_plan_make(amp_net *an)
{
    const network *net = an->net;
    int *cand = calloc((size_t)net->n, sizeof *cand);
    for (int i = 0; i < net->n; ++i) {
        amp_layer *al = &an->layers[i];
        al->out_half = al->region = al->x_half = 0;
        /* amp=0 in its section keeps a data-movement layer's form float32
         * too (a half layer's is float32 by the policy); and a half form
         * runs only on a shape it takes, which darknet's resize can change
         * (a route whose inputs no longer match) */
        if (cand)
            cand[i] = an->plan_on && al->io != AMP_IO_FLOAT32 && al->half_allowed &&
                      (al->io != AMP_IO_HALF || amp_kind_half_shape(&net->layers[i]));
    }
    if (!cand) return; /* out of memory: everything float32, as darknet has it */
    /* A data-movement layer leaves the region when a tensor it reads or
     * writes cannot be half; that may push others out: until nothing moves. */
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < net->n; ++i)
            an->layers[i].out_half = cand[i] && i != net->n - 1 && readers_can(net, cand, i);
        for (int i = 0; i < net->n; ++i) {
            if (!cand[i] || an->layers[i].io != AMP_IO_HALF) continue;
            int src[PLAN_MAX_INPUTS], ok = an->layers[i].out_half;
            const int n = amp_plan_inputs(net, i, src, PLAN_MAX_INPUTS);
            for (int k = 0; k < n && ok; ++k) ok = src[k] >= 0 && an->layers[src[k]].out_half;
            if (!ok) cand[i] = 0, changed = 1;
        }
    }
    for (int i = 0; i < net->n; ++i) {
        amp_layer *al = &an->layers[i];
        al->region = al->io == AMP_IO_HALF && cand[i];
        /* the batch-norm input, or without batch-norm the values before an
         * activation whose gradient needs them (mish, swish, hard_mish) */
        al->x_half = al->io == AMP_IO_CONVERTS && cand[i] &&
                     (net->layers[i].batch_normalize ||
                      (al->out_half && activation_needs_input(net->layers[i].activation)));
        al->delta_from = i; /* no reader: its own backward zeroes it */
        for (int j = i + 1; al->out_half && j < net->n; ++j) {
            int src[PLAN_MAX_INPUTS];
            const int n = amp_plan_inputs(net, j, src, PLAN_MAX_INPUTS);
            for (int k = 0; k < n; ++k)
                if (src[k] == i) al->delta_from = j;
        }
    }
    free(cand);
}

int amp_plan_changes(amp_net *an)
{
    const int n = an->net->n;
    int *was = malloc((size_t)n * 4 * sizeof *was);
    if (!was) return 1; /* made again: the safe answer */
    for (int i = 0; i < n; ++i) {
        const amp_layer *al = &an->layers[i];
        int *w = was + 4 * i;
        w[0] = al->out_half, w[1] = al->region, w[2] = al->x_half, w[3] = al->delta_from;
    }
    amp_plan_make(an);
    int changed = 0;
    for (int i = 0; i < n; ++i) {
        amp_layer *al = &an->layers[i];
        int *w = was + 4 * i;
        changed |= w[0] != al->out_half || w[1] != al->region || w[2] != al->x_half ||
                   (al->out_half && w[3] != al->delta_from);
        al->out_half = w[0], al->region = w[1], al->x_half = w[2], al->delta_from = w[3];
    }
    free(was);
    return changed;
}

/* n rounded up to a multiple of align */
static size_t rounded_up(size_t n, size_t align)
{
    return (n + align - 1) / align * align;
}

size_t amp_plan_delta_pool(const amp_net *an, size_t *offset)
{
    return amp_plan_delta_pool_aligned(an, offset, 1);
}

size_t amp_plan_delta_pool_aligned(const amp_net *an, size_t *offset, size_t align)
{
    const network *net = an->net;
    size_t total = 0;
    if (align < 1) align = 1;
    /* first fit, in the order the deltas come alive (backward: from the last
     * layer): each at the lowest offset where no delta placed before it that
     * is alive at the same time lies */
    for (int from = net->n - 1; from >= 0; --from)
        for (int i = 0; i < net->n; ++i) {
            const amp_layer *al = &an->layers[i];
            if (!al->out_half || al->delta_from != from) continue;
            const size_t n = rounded_up((size_t)net->layers[i].outputs * net->layers[i].batch, align);
            size_t at = 0;
            for (int moved = 1; moved;) {
                moved = 0;
                for (int k = 0; k < net->n; ++k) {
                    const amp_layer *o = &an->layers[k];
                    if (k == i || !o->out_half || o->delta_from < from ||
                        (o->delta_from == from && k >= i) || /* placed before */
                        k > from || o->delta_from < i) /* alive at the same time? */
                        continue;
                    const size_t on =
                        rounded_up((size_t)net->layers[k].outputs * net->layers[k].batch, align);
                    if (offset[k] < at + n && at < offset[k] + on) {
                        at = offset[k] + on;
                        moved = 1;
                    }
                }
            }
            offset[i] = at;
            if (at + n > total) total = at + n;
        }
    return total;
}

void amp_plan_bytes(const amp_net *an, double *fp32, double *planned)
{
    *fp32 = *planned = 0;
    double half_deltas = 0;
    for (int i = 0; i < an->net->n; ++i) {
        const layer *l = &an->net->layers[i];
        const amp_layer *al = &an->layers[i];
        const double n = (double)l->outputs * l->batch;
        const double x = al->io == AMP_IO_CONVERTS && l->batch_normalize ? 2 * n : 0;
        /* darknet's values before mish, swish, hard_mish (on the plan's half
         * storage the tail makes them again, or keeps them in x_half) */
        const double ai =
            l->type == CONVOLUTIONAL && activation_needs_input(l->activation) ? n : 0;
        /* darknet's dropout layer shares its input's arrays (in half, its delta
         * is its own: counted in the pool below) */
        const int shares = l->type == DROPOUT;
        const double out = l->output && !shares ? n : 0;
        const double delta = !shares && (l->delta || al->out_half) ? n : 0;
        *fp32 += 4 * (out + delta + x + ai);
        *planned += al->out_half ? 2 * out : 4 * (out + delta + ai);
        *planned += al->x_half ? 2 * n : 4 * x;
        if (al->out_half) half_deltas += 2 * n;
    }
    /* the half deltas share their storage */
    size_t *offset = calloc((size_t)an->net->n, sizeof *offset);
    if (offset) half_deltas = 2.0 * (double)amp_plan_delta_pool(an, offset);
    free(offset);
    *planned += half_deltas;
}

/* "0-14,17" into buf: the layers whose flag is set. */
static void list_layers(const amp_net *an, int which, char *buf, size_t size)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < an->net->n && k < size; ++i) {
        const amp_layer *al = &an->layers[i];
        const int on = which ? al->region : al->out_half;
        if (!on || (i > 0 && (which ? an->layers[i - 1].region : an->layers[i - 1].out_half)))
            continue;
        int j = i;
        while (j + 1 < an->net->n &&
               (which ? an->layers[j + 1].region : an->layers[j + 1].out_half))
            ++j;
        k += (size_t)snprintf(buf + k, size - k, j > i ? "%s%d-%d" : "%s%d", k ? "," : "", i, j);
    }
}

void amp_plan_print(const amp_net *an, FILE *out)
{
    if (!an->plan_on) {
        if (an->scaler->opt.dtype != AMP_DTYPE_FLOAT32)
            fprintf(out, "amp:   activations: float32 (amp_activations=float32)\n");
        return;
    }
    int nhalf = 0, nregion = 0;
    for (int i = 0; i < an->net->n; ++i) {
        nhalf += an->layers[i].out_half;
        nregion += an->layers[i].region;
    }
    double fp32, planned;
    amp_plan_bytes(an, &fp32, &planned);
    const char *dt = amp_dtype_name(an->scaler->opt.dtype);
    if (!nhalf) {
        if (an->plan_off)
            fprintf(out, "amp:   activations: float32 (%s)\n", an->plan_off);
        else
            fprintf(out, "amp:   activations: float32 (no tensor between two layers that %s runs "
                         "in half)\n", an->ops->name);
        return;
    }
    char layers[AMP_MSG_LEN];
    list_layers(an, 0, layers, sizeof layers);
    fprintf(out, "amp:   activations: %d of %d layers' outputs and deltas in %s (%s); "
                 "%.1f MiB at batch %d, against %.1f MiB in float32\n",
            nhalf, an->net->n, dt, layers, planned / 1048576.0, an->net->batch, fp32 / 1048576.0);
    if (nregion) {
        list_layers(an, 1, layers, sizeof layers);
        fprintf(out, "amp:   data movement in %s: %d layers (%s)\n", dt, nregion, layers);
    }
}

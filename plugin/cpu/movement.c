/* The half forms of the data-movement layers darknet cfgs put between
 * convolutions, on the activation plan's half storage (storage.c): route
 * (channel concatenation), upsample and shortcut (maxpool's is in
 * maxpool.c). Each reads and writes 16-bit patterns; what it computes
 * (shortcut's sum, its activation, every sum of gradients) is float32
 * arithmetic rounded once into half storage, as a GPU's half kernels do.
 *
 * Gradients: darknet adds each consumer's gradient into the delta of the
 * tensor it read. Here the same sums are made in float32, in darknet's
 * order, and the half delta receives them rounded once per layer's
 * backward (amp_cpu_add_half). A tensor read by several layers (a route's
 * input, a shortcut's) is rounded once per reader, as its delta is stored
 * between their backward passes.
 */
#include "cpu.h"

#include "activations.h"

#include <string.h>

static amp_dtype dtype_of(const amp_layer *al)
{
    return al->owner->scaler->opt.dtype;
}

static uint16_t *out_half(const layer *l)
{
    return (uint16_t *)l->output;
}

/* ---- route: the inputs' channels one after another ---- */

static void route_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    (void)al;
    size_t offset = 0;
    for (int i = 0; i < l.n; ++i) {
        const uint16_t *in = (const uint16_t *)net.layers[l.input_layers[i]].output;
        const size_t size = (size_t)l.input_sizes[i];
        for (int b = 0; b < l.batch; ++b)
            memcpy(out_half(&l) + offset + (size_t)b * l.outputs, in + (size_t)b * size,
                   size * sizeof(uint16_t));
        offset += size;
    }
}

static void route_backward(layer l, network net)
{
    (void)net;
    amp_layer *al = l.hook_data;
    amp_cpu_deltas_begin(al->owner, al->index);
    const amp_dtype dt = dtype_of(al);
    const size_t n = (size_t)l.outputs * l.batch;
    float *d = amp_cpu_reserve(&cpu_net_of(al->owner)->out32, n);
    amp_cpu_from_half(dt, cpu_layer_of(al)->delta_h, d, n);
    size_t offset = 0;
    for (int i = 0; i < l.n; ++i) {
        uint16_t *dst = amp_cpu_half_delta(al->owner, l.input_layers[i]);
        const size_t size = (size_t)l.input_sizes[i];
        for (int b = 0; dst && b < l.batch; ++b)
            amp_cpu_add_half(dt, dst + (size_t)b * size, d + offset + (size_t)b * l.outputs,
                             size);
        offset += size;
    }
}

/* ---- upsample (stride s, scale 1): each value copied to an s x s block ---- */

static void upsample_forward(layer l, network net)
{
    const uint16_t *in = (const uint16_t *)net.input;
    uint16_t *out = out_half(&l);
    const int s = l.stride, planes = l.batch * l.c, ow = l.w * s;
#pragma omp parallel for schedule(static) if ((long)l.outputs * l.batch > 65536)
    for (int p = 0; p < planes; ++p)
        for (int j = 0; j < l.h * s; ++j) {
            const uint16_t *row = in + ((size_t)p * l.h + j / s) * l.w;
            uint16_t *o = out + ((size_t)p * l.h * s + j) * ow;
            for (int i = 0; i < ow; ++i) o[i] = row[i / s];
        }
}

/* Each input's gradient: its s x s block of output gradients summed in
 * darknet's order (rows, then columns) onto what it holds, rounded once. */
static void upsample_backward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_cpu_deltas_begin(al->owner, al->index);
    uint16_t *dst = amp_cpu_half_delta(al->owner, al->index - 1);
    if (!dst) return;
    const amp_dtype dt = dtype_of(al);
    const size_t nin = (size_t)l.inputs * l.batch, nout = (size_t)l.outputs * l.batch;
    cpu_net *cn = cpu_net_of(al->owner);
    float *d = amp_cpu_reserve(&cn->out32, nout), *sum = amp_cpu_reserve(&cn->dx32, nin);
    amp_cpu_from_half(dt, cpu_layer_of(al)->delta_h, d, nout);
    amp_cpu_from_half(dt, dst, sum, nin);
    const int s = l.stride, planes = l.batch * l.c, ow = l.w * s;
#pragma omp parallel for schedule(static) if ((long)l.outputs * l.batch > 65536)
    for (int p = 0; p < planes; ++p)
        for (int j = 0; j < l.h * s; ++j) {
            float *row = sum + ((size_t)p * l.h + j / s) * l.w;
            const float *o = d + ((size_t)p * l.h * s + j) * ow;
            for (int i = 0; i < ow; ++i) row[i / s] += o[i];
        }
    amp_cpu_to_half(dt, sum, dst, nin);
    (void)net;
}

/* ---- shortcut (same shape, alpha = beta = 1): act(input + layer index) ---- */

static void shortcut_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    const amp_dtype dt = dtype_of(al);
    const size_t n = (size_t)l.outputs * l.batch;
    cpu_net *cn = cpu_net_of(al->owner);
    float *a = amp_cpu_reserve(&cn->out32, n), *b = amp_cpu_reserve(&cn->dx32, n);
    amp_cpu_from_half(dt, (const uint16_t *)net.input, a, n);
    amp_cpu_from_half(dt, (const uint16_t *)net.layers[l.index].output, b, n);
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; ++i) a[i] = a[i] + b[i];
    if (l.activation != LINEAR) activate_array(a, (int)n, l.activation);
    amp_cpu_to_half(dt, a, out_half(&l), n);
}

/* The gradient through the activation, added to both inputs' deltas. */
static void shortcut_backward(layer l, network net)
{
    (void)net;
    amp_layer *al = l.hook_data;
    amp_cpu_deltas_begin(al->owner, al->index);
    const amp_dtype dt = dtype_of(al);
    const size_t n = (size_t)l.outputs * l.batch;
    cpu_net *cn = cpu_net_of(al->owner);
    float *d = amp_cpu_reserve(&cn->out32, n);
    amp_cpu_from_half(dt, cpu_layer_of(al)->delta_h, d, n);
    if (l.activation != LINEAR) {
        float *y = amp_cpu_reserve(&cn->dx32, n);
        amp_cpu_from_half(dt, out_half(&l), y, n);
        gradient_array(y, (int)n, l.activation, d);
    }
    uint16_t *prev = amp_cpu_half_delta(al->owner, al->index - 1);
    uint16_t *other = amp_cpu_half_delta(al->owner, l.index);
    if (prev) amp_cpu_add_half(dt, prev, d, n);
    if (other) amp_cpu_add_half(dt, other, d, n);
}

int amp_movement_has_half(const layer *l)
{
    switch (l->type) {
    case MAXPOOL:
    case ROUTE: return 1;
    case UPSAMPLE: return !l->reverse && l->scale == 1.0f;
    case SHORTCUT:
        return l->alpha == 1.0f && l->beta == 1.0f && l->w == l->out_w && l->h == l->out_h &&
               l->c == l->out_c;
    default: return 0;
    }
}

void amp_movement_install(amp_layer *al, layer *l)
{
    switch (l->type) {
    case MAXPOOL:
        al->forward = amp_maxpool_forward_half;
        al->backward = amp_maxpool_backward_half;
        break;
    case ROUTE:
        al->forward = route_forward;
        al->backward = route_backward;
        break;
    case UPSAMPLE:
        al->forward = upsample_forward;
        al->backward = upsample_backward;
        break;
    case SHORTCUT:
        al->forward = shortcut_forward;
        al->backward = shortcut_backward;
        break;
    default: break;
    }
}

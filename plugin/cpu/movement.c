/* The half forms of the data-movement layers darknet cfgs put between
 * convolutions, on the activation plan's NHWC half storage (activations.c):
 * route (channel concatenation), upsample, shortcut, reorg, avgpool and
 * dropout (maxpool's is in maxpool.c). Each reads and writes 16-bit patterns; what it computes
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

#include "math/half_format.h"
#include "math/nhwc.h"

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

static inline float value(const uint16_t *h, long i, const int bf16)
{
    return bf16 ? amp_bf16_to_f32(h[i]) : amp_f16_to_f32(h[i]);
}

static inline uint16_t rounded(float v, const int bf16)
{
    return bf16 ? amp_f32_to_bf16(v) : amp_f32_to_f16(v);
}

/* dst[r * ds + c] = half(dst + src[r * ss + c]) for rows x cols values: a
 * half gradient added onto a half delta, in float32, rounded once. */
static inline void add_rows(uint16_t *dst, long ds, const uint16_t *src, long ss, long rows,
                            int cols, const int bf16)
{
    for (long r = 0; r < rows; ++r) {
        uint16_t *d = dst + r * ds;
        const uint16_t *a = src + r * ss;
#pragma omp simd
        for (int c = 0; c < cols; ++c) d[c] = rounded(value(d, c, bf16) + value(a, c, bf16), bf16);
    }
}

static void add_rows_any(amp_dtype dt, uint16_t *dst, long ds, const uint16_t *src, long ss,
                         long rows, int cols)
{
    const long n = rows * cols, per = 4096 / (cols > 0 ? cols : 1) + 1;
    const long chunks = (rows + per - 1) / per;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (long q = 0; q < chunks; ++q) {
        const long r0 = q * per, r1 = r0 + per < rows ? r0 + per : rows;
        if (dt == AMP_DTYPE_BFLOAT16)
            add_rows(dst + r0 * ds, ds, src + r0 * ss, ss, r1 - r0, cols, 1);
        else add_rows(dst + r0 * ds, ds, src + r0 * ss, ss, r1 - r0, cols, 0);
    }
}

/* ---- route: the inputs' channels side by side at each position ---- */

/* The channels the route takes from input i (its tensor's, at the route's
 * positions): all of them, or with groups G the group_id-th of G slices. */
static void route_forward(layer l, network net)
{
    const long positions = (long)l.batch * l.out_h * l.out_w;
    uint16_t *out = out_half(&l);
    int off = 0;
    for (int i = 0; i < l.n; ++i) {
        const uint16_t *in = (const uint16_t *)net.layers[l.input_layers[i]].output +
                             amp_route_first_channel(&l, i);
        const int c = amp_route_channels(&l, i), ci = amp_route_input_channels(&l, i);
#pragma omp parallel for schedule(static) if ((long)l.outputs * l.batch > 65536)
        for (long p = 0; p < positions; ++p)
            memcpy(out + p * l.out_c + off, in + p * ci, (size_t)c * sizeof(uint16_t));
        off += c;
    }
}

static void route_backward(layer l, network net)
{
    (void)net;
    amp_layer *al = l.hook_data;
    amp_cpu_deltas_begin(al->owner, al->index);
    const long positions = (long)l.batch * l.out_h * l.out_w;
    const uint16_t *d = cpu_layer_of(al)->delta_h;
    int off = 0;
    for (int i = 0; i < l.n; ++i) {
        uint16_t *dst = amp_cpu_half_delta(al->owner, l.input_layers[i]);
        const int c = amp_route_channels(&l, i), ci = amp_route_input_channels(&l, i);
        if (dst)
            add_rows_any(dtype_of(al), dst + amp_route_first_channel(&l, i), ci, d + off, l.out_c,
                         positions, c);
        off += c;
    }
}

/* ---- upsample (stride s, scale 1): each value copied to an s x s block ---- */

static void upsample_forward(layer l, network net)
{
    const uint16_t *in = (const uint16_t *)net.input;
    uint16_t *out = out_half(&l);
    const int s = l.stride, rows = l.batch * l.out_h, c_n = l.c;
#pragma omp parallel for schedule(static) if ((long)l.outputs * l.batch > 65536)
    for (int r = 0; r < rows; ++r) {
        const int b = r / l.out_h, y = r % l.out_h;
        const uint16_t *row = in + ((size_t)b * l.h + y / s) * l.w * c_n;
        uint16_t *o = out + (size_t)r * l.out_w * c_n;
        for (int x = 0; x < l.out_w; ++x)
            memcpy(o + (size_t)x * c_n, row + (size_t)(x / s) * c_n, (size_t)c_n * sizeof(uint16_t));
    }
}

/* Each input's gradient: its s x s block of output gradients summed in
 * darknet's order (rows, then columns) onto what it holds, in float32,
 * rounded once. */
static inline void upsample_sum_row(const layer *l, uint16_t *dst, const uint16_t *d, int b, int y,
                                    float *acc, const int bf16)
{
    const int s = l->stride, c_n = l->c;
    for (int x = 0; x < l->w; ++x) {
        uint16_t *t = dst + (((size_t)b * l->h + y) * l->w + x) * c_n;
#pragma omp simd
        for (int c = 0; c < c_n; ++c) acc[c] = value(t, c, bf16);
        for (int j = 0; j < s; ++j)
            for (int i = 0; i < s; ++i) {
                const uint16_t *o =
                    d + (((size_t)b * l->out_h + y * s + j) * l->out_w + x * s + i) * c_n;
#pragma omp simd
                for (int c = 0; c < c_n; ++c) acc[c] += value(o, c, bf16);
            }
#pragma omp simd
        for (int c = 0; c < c_n; ++c) t[c] = rounded(acc[c], bf16);
    }
}

static void upsample_backward(layer l, network net)
{
    (void)net;
    amp_layer *al = l.hook_data;
    amp_cpu_deltas_begin(al->owner, al->index);
    uint16_t *dst = amp_cpu_half_delta(al->owner, al->index - 1);
    if (!dst) return;
    const int bf16 = dtype_of(al) == AMP_DTYPE_BFLOAT16, rows = l.batch * l.h;
    const uint16_t *d = cpu_layer_of(al)->delta_h;
    float *acc = amp_cpu_reserve(&cpu_net_of(al->owner)->out32, (size_t)l.c * rows);
#pragma omp parallel for schedule(static) if ((long)l.outputs * l.batch > 65536)
    for (int r = 0; r < rows; ++r) {
        float *a = acc + (size_t)r * l.c;
        if (bf16) upsample_sum_row(&l, dst, d, r / l.h, r % l.h, a, 1);
        else upsample_sum_row(&l, dst, d, r / l.h, r % l.h, a, 0);
    }
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

/* ---- reorg (stride s, not flatten, not extra): darknet's permutation ---- */

/* darknet's flat NCHW index f of a tensor of c channels by hw positions, as
 * the plan's NHWC index. */
static inline long nhwc_of(long f, int c, long hw)
{
    return amp_nhwc_of_nchw(f, c, hw);
}

/* darknet's reorg_cpu pairs an output element with an input element (its
 * loops read a tensor of l's input size with the dimensions it was given,
 * whatever the layer's real output shape); the pairs, as NHWC indexes, with
 * the value moved forward (or its gradient written back, as darknet writes
 * it: not added). */
static void reorg_move(const layer *l, const uint16_t *src, uint16_t *dst, int backward)
{
    const int w = l->w, h = l->h, c = l->c, s = l->stride, out_c = c / (s * s);
    const long in_hw = (long)l->h * l->w, out_hw = (long)l->out_h * l->out_w;
    const int planes = l->batch * c;
#pragma omp parallel for schedule(static) if ((long)l->outputs * l->batch > 65536)
    for (int q = 0; q < planes; ++q) {
        const int b = q / c, k = q % c, c2 = k % out_c, offset = k / out_c;
        for (int j = 0; j < h; ++j)
            for (int i = 0; i < w; ++i) {
                const long a = i + (long)w * (j + (long)h * (k + (long)c * b));
                const long w2 = (long)i * s + offset % s, h2 = (long)j * s + offset / s;
                const long bb = w2 + (long)w * s * (h2 + (long)h * s * (c2 + (long)out_c * b));
                /* the output's element and the input's it takes */
                const long o = nhwc_of(l->reverse ? bb : a, l->out_c, out_hw);
                const long x = nhwc_of(l->reverse ? a : bb, l->c, in_hw);
                if (backward) dst[x] = src[o];
                else dst[o] = src[x];
            }
    }
}

static void reorg_forward(layer l, network net)
{
    reorg_move(&l, (const uint16_t *)net.input, out_half(&l), 0);
}

static void reorg_backward(layer l, network net)
{
    (void)net;
    amp_layer *al = l.hook_data;
    amp_cpu_deltas_begin(al->owner, al->index);
    uint16_t *dst = amp_cpu_half_delta(al->owner, al->index - 1);
    if (dst) reorg_move(&l, cpu_layer_of(al)->delta_h, dst, 1);
}

/* ---- avgpool (darknet's: global, to 1 x 1) ---- */

/* Image b: each channel's mean over the positions, summed in darknet's order. */
static inline void avg_image(const layer *l, const uint16_t *in, uint16_t *out, float *acc, int b,
                             const int bf16)
{
    const int c_n = l->c, hw = l->h * l->w;
    for (int c = 0; c < c_n; ++c) acc[c] = 0;
    for (int p = 0; p < hw; ++p) {
        const uint16_t *x = in + ((size_t)b * hw + p) * c_n;
#pragma omp simd
        for (int c = 0; c < c_n; ++c) acc[c] += value(x, c, bf16);
    }
#pragma omp simd
    for (int c = 0; c < c_n; ++c) out[(size_t)b * c_n + c] = rounded(acc[c] / hw, bf16);
}

/* Image b: every position's gradient += the channel's gradient / positions. */
static inline void avg_image_back(const layer *l, const uint16_t *d, uint16_t *dst, int b,
                                  const int bf16)
{
    const int c_n = l->c, hw = l->h * l->w;
    for (int p = 0; p < hw; ++p) {
        uint16_t *t = dst + ((size_t)b * hw + p) * c_n;
        const uint16_t *g = d + (size_t)b * c_n;
#pragma omp simd
        for (int c = 0; c < c_n; ++c) t[c] = rounded(value(t, c, bf16) + value(g, c, bf16) / hw, bf16);
    }
}

static void avgpool_forward(layer l, network net)
{
    const amp_layer *al = l.hook_data;
    const int bf16 = dtype_of(al) == AMP_DTYPE_BFLOAT16;
    float *acc = amp_cpu_reserve(&cpu_net_of(al->owner)->out32, (size_t)l.batch * l.c);
#pragma omp parallel for schedule(static) if ((long)l.inputs * l.batch > 65536)
    for (int b = 0; b < l.batch; ++b) {
        if (bf16) avg_image(&l, (const uint16_t *)net.input, out_half(&l), acc + (size_t)b * l.c, b, 1);
        else avg_image(&l, (const uint16_t *)net.input, out_half(&l), acc + (size_t)b * l.c, b, 0);
    }
}

static void avgpool_backward(layer l, network net)
{
    (void)net;
    amp_layer *al = l.hook_data;
    amp_cpu_deltas_begin(al->owner, al->index);
    uint16_t *dst = amp_cpu_half_delta(al->owner, al->index - 1);
    if (!dst) return;
    const int bf16 = dtype_of(al) == AMP_DTYPE_BFLOAT16;
    const uint16_t *d = cpu_layer_of(al)->delta_h;
#pragma omp parallel for schedule(static) if ((long)l.inputs * l.batch > 65536)
    for (int b = 0; b < l.batch; ++b) {
        if (bf16) avg_image_back(&l, d, dst, b, 1);
        else avg_image_back(&l, d, dst, b, 0);
    }
}

/* ---- dropout: in place on its input, as darknet's ----
 * darknet's dropout layer shares its input's arrays; here its output is its
 * input's half tensor (activations.c), scaled or zeroed in place, and its delta a
 * half tensor of its own, scaled or zeroed into the input's. The random
 * numbers are drawn in darknet's order (its NCHW elements) into l.rand. */

static void dropout_forward(layer l, network net)
{
    if (!net.train) return;
    const amp_layer *al = l.hook_data;
    const int bf16 = dtype_of(al) == AMP_DTYPE_BFLOAT16;
    int c, hw;
    amp_cpu_tensor_shape(al->owner->net, al->index, &c, &hw);
    uint16_t *x = (uint16_t *)net.input;
    for (long i = 0; i < (long)l.batch * l.inputs; ++i) {
        const float r = rand_uniform(0, 1);
        l.rand[i] = r;
        const long k = nhwc_of(i, c, hw);
        x[k] = r < l.probability ? rounded(0, bf16) : rounded(value(x, k, bf16) * l.scale, bf16);
    }
}

static void dropout_backward(layer l, network net)
{
    (void)net;
    amp_layer *al = l.hook_data;
    amp_cpu_deltas_begin(al->owner, al->index);
    uint16_t *dst = amp_cpu_half_delta(al->owner, al->index - 1);
    if (!dst) return;
    const int bf16 = dtype_of(al) == AMP_DTYPE_BFLOAT16;
    int c, hw;
    amp_cpu_tensor_shape(al->owner->net, al->index, &c, &hw);
    const uint16_t *d = cpu_layer_of(al)->delta_h;
#pragma omp parallel for schedule(static) if ((long)l.inputs * l.batch > 65536)
    for (long i = 0; i < (long)l.batch * l.inputs; ++i) {
        const long k = nhwc_of(i, c, hw);
        const float g = l.rand[i] < l.probability ? 0 : value(d, k, bf16) * l.scale;
        dst[k] = rounded(value(dst, k, bf16) + g, bf16);
    }
}

/* ---- activation (darknet's [activation] layer): out = act(in), element by element ---- */

/* The elementwise layers need no layout: NHWC in, NHWC out, index for index. */
static void active_forward(layer l, network net)
{
    const amp_layer *al = l.hook_data;
    const amp_dtype dt = dtype_of(al);
    const size_t n = (size_t)l.outputs * l.batch;
    float *a = amp_cpu_reserve(&cpu_net_of(al->owner)->out32, n);
    amp_cpu_from_half(dt, (const uint16_t *)net.input, a, n);
    activate_array(a, (int)n, l.activation);
    amp_cpu_to_half(dt, a, out_half(&l), n);
}

/* The gradient through the activation, from the output, into the layer's
 * delta (as darknet's backward leaves it) and written over the input's
 * delta, not added, as darknet's backward copies it. */
static void active_backward(layer l, network net)
{
    (void)net;
    amp_layer *al = l.hook_data;
    amp_cpu_deltas_begin(al->owner, al->index);
    uint16_t *dst = amp_cpu_half_delta(al->owner, al->index - 1);
    const amp_dtype dt = dtype_of(al);
    const size_t n = (size_t)l.outputs * l.batch;
    cpu_net *cn = cpu_net_of(al->owner);
    float *d = amp_cpu_reserve(&cn->out32, n), *y = amp_cpu_reserve(&cn->dx32, n);
    amp_cpu_from_half(dt, cpu_layer_of(al)->delta_h, d, n);
    amp_cpu_from_half(dt, out_half(&l), y, n);
    gradient_array(y, (int)n, l.activation, d);
    amp_cpu_to_half(dt, d, cpu_layer_of(al)->delta_h, n);
    if (dst) memcpy(dst, cpu_layer_of(al)->delta_h, n * sizeof *dst);
}

int amp_movement_has_half(const layer *l)
{
    return amp_kind_half_shape(l); /* every kind the core's rule covers has a form here */
}

/* The half forms of the data-movement kinds, one row a kind (kinds.c). */
static const amp_cpu_form forms[] = {
    {MAXPOOL, amp_maxpool_forward_half, amp_maxpool_backward_half},
    {ROUTE, route_forward, route_backward},
    {UPSAMPLE, upsample_forward, upsample_backward},
    {SHORTCUT, shortcut_forward, shortcut_backward},
    {REORG, reorg_forward, reorg_backward},
    {AVGPOOL, avgpool_forward, avgpool_backward},
    {DROPOUT, dropout_forward, dropout_backward},
    {ACTIVE, active_forward, active_backward},
};

#define NFORMS (sizeof forms / sizeof forms[0])

int amp_movement_has_kind(LAYER_TYPE type)
{
    return amp_cpu_form_of(forms, NFORMS, type) != NULL;
}

void amp_movement_install(amp_layer *al, layer *l)
{
    const amp_cpu_form *f = amp_cpu_form_of(forms, NFORMS, l->type);
    if (!f) return;
    al->forward = f->forward;
    al->backward = f->backward;
}

/* The activation plan on the CPU (plan.c decides it; this carries it out):
 * the tensors the plan keeps in half are arrays of 16-bit patterns of the
 * half dtype, channels last (NHWC: image, row, column, channel), and
 * darknet's float32 arrays for them are freed.
 *
 * Channels last because it is the layout oneDNN's half convolutions work in
 * (bfloat16 with AVX512-BF16 or AMX: its src and dst are NHWC for every
 * shape of yolov3-tiny), so that a convolution reads its input and writes
 * its output in place, with no reorder, and the tails, pooling and routes
 * run over a position's contiguous channels (docs/design.md has the
 * measurement against darknet's NCHW order).
 *
 * - A layer's output in half is darknet's own l.output pointer, shrunk to 2
 *   bytes an element: forward_network hands it to the next layer as
 *   net.input, and every layer that reads it runs a half form that knows.
 * - Its delta in half is cpu_layer.delta_h, and darknet's l.delta is NULL:
 *   forward_network then does not zero it (the layer's half form does), and
 *   the layers that add into it find it through the plan.
 * - A half layer's batch-norm input (x_half) is cpu_layer.x_h; darknet's x
 *   and x_norm are freed (tail.c keeps x in half and makes x_norm again).
 *
 * A half layer (convolutional, deconvolutional, connected) on oneDNN reads
 * and writes the half tensors itself. Otherwise (the emulation, or a shape
 * oneDNN cannot run) it runs its own float32 forward and backward inside the
 * plan's: a half input is widened to float32 NCHW into a buffer the network
 * shares, its float32 result goes through the tail into half storage, and
 * its data gradient is added into the half delta of the layer before it, the
 * sum in float32, rounded once. The data-movement layers' half forms are in
 * movement.c and maxpool.c.
 *
 * darknet's resize_network (random=1) makes every array again in float32;
 * the hook of patch 0015 calls amp_cpu_activations again, which shrinks them
 * (after giving back and making the plan again where the new shapes change
 * it: step.c's amp_net_resized).
 */
#include "cpu.h"

#include "math/half_format.h"

#include "activations.h" /* activation_needs_input */

#include <stdlib.h>
#include <string.h>

static amp_dtype dtype_of(const amp_layer *al)
{
    return al->owner->scaler->opt.dtype;
}

/* A buffer of at least n floats (grown, never shrunk); aborts when out of
 * memory, as darknet's own allocations do inside a training step. */
/* The half layer's input is the previous layer's half output. */
static int input_half(const amp_layer *al)
{
    return al->index > 0 && al->owner->layers[al->index - 1].out_half;
}

static amp_tail_half tail_base(const amp_layer *al, cpu_layer *c)
{
    return (amp_tail_half){.x = al->x_half ? c->x_h : NULL,
                           .bf16 = dtype_of(al) == AMP_DTYPE_BFLOAT16,
                           .cudnn = cpu_net_of(al->owner)->bn_formula == AMP_BN_CUDNN};
}

/* A layer on oneDNN reads and writes the plan's storage itself: its
 * reorders convert and re-lay in one pass (onednn_layer.c); the tail reads
 * the half-rounded convolution from half storage and writes the output
 * there. AMP_OK, or the forward did not run (the emulation's turn). */
static amp_status native_forward(amp_layer *al, cpu_layer *c, layer l, network net)
{
    layer t = l;
    c->tail = tail_base(al, c);
    if (al->out_half) {
        c->tail.y = (uint16_t *)l.output;
        c->tail.from_half = 1;
        /* the convolution into the batch-norm input (exact in half), else the output */
        if (al->x_half) t.output = (float *)c->x_h;
    }
    const amp_status st = amp_onednn_plan_forward(t, net);
    c->tail = (amp_tail_half){0};
    return st;
}

/* A backward's start, whichever runs it: the deltas this layer is the last
 * to read zeroed, and the tail's half storage (with a half output: y, the
 * half delta it rounds its gradient into, the flush counters). */
static void backward_begin(amp_layer *al, cpu_layer *c, const layer *l)
{
    cpu_net *cn = cpu_net_of(al->owner);
    amp_cpu_deltas_begin(al->owner, al->index);
    c->tail = tail_base(al, c);
    if (al->out_half) {
        c->tail.y = (uint16_t *)l->output;
        c->tail.dh = c->delta_h;
        c->tail.nonzero = &cn->grad_nonzero;
        c->tail.flushed = &cn->grad_flushed;
    }
}

static void native_backward(amp_layer *al, cpu_layer *c, layer l, network net)
{
    backward_begin(al, c, &l);
    if (al->out_half) l.delta = (float *)c->delta_h; /* the gradient the tail leaves there, in half */
    if (input_half(al)) net.delta = (float *)amp_cpu_half_delta(al->owner, al->index - 1);
    if (amp_onednn_plan_backward(l, net) != AMP_OK)
        amp_net_fail(al->owner, AMP_ERR_DEVICE,
                     "amp: layer %d: a oneDNN primitive failed in backward; its gradients are "
                     "incomplete", al->index);
    c->tail = (amp_tail_half){0};
}

/* Otherwise (the emulation, or a layer oneDNN could not run this time): the
 * layer's own float32 code between conversions, its output and delta staged
 * in buffers the network shares. */

/* The half input (the previous layer's NHWC output) in float32 NCHW. */
static float *input_f32(const amp_layer *al, const layer *l, const float *input)
{
    int c, hw;
    amp_cpu_tensor_shape(al->owner->net, al->index - 1, &c, &hw);
    float *in = amp_cpu_reserve(&cpu_net_of(al->owner)->in32, (size_t)l->inputs * l->batch);
    amp_cpu_from_half_nhwc(dtype_of(al), (const uint16_t *)input, in, l->batch, c, hw);
    return in;
}

static void converts_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    cpu_layer *c = cpu_layer_of(al);
    if (c->runner == AMP_CPU_RUNS_ONEDNN && native_forward(al, c, l, net) == AMP_OK) return;
    cpu_net *cn = cpu_net_of(al->owner);
    const size_t nout = (size_t)l.outputs * l.batch;
    if (input_half(al)) net.input = input_f32(al, &l, net.input);
    c->tail = tail_base(al, c);
    if (al->out_half) {
        c->tail.y = (uint16_t *)l.output;
        l.output = amp_cpu_reserve(&cn->out32, nout);
    }
    c->inner_forward(l, net);
    c->tail = (amp_tail_half){0};
}

static void converts_backward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    cpu_layer *c = cpu_layer_of(al);
    if (c->runner == AMP_CPU_RUNS_ONEDNN && amp_onednn_plan_ran(c)) {
        native_backward(al, c, l, net);
        return;
    }
    cpu_net *cn = cpu_net_of(al->owner);
    const amp_dtype dt = dtype_of(al);
    const size_t nin = (size_t)l.inputs * l.batch, nout = (size_t)l.outputs * l.batch;
    backward_begin(al, c, &l);
    if (al->out_half) {
        /* the tail on half storage first, as on oneDNN: the delta then holds the
         * gradient it made (rounded to half: the value the layer's GEMMs use), and
         * the layer's own backward skips its tail */
        amp_tail_backward_nhwc(l, net, l.out_c, l.out_h * l.out_w, &c->tail);
        c->tail.done = 1;
        l.delta = amp_cpu_reserve(&cn->out32, nout);
        amp_cpu_from_half_nhwc(dt, c->delta_h, l.delta, l.batch, l.out_c, l.out_h * l.out_w);
    }
    uint16_t *prev_delta = NULL;
    int pc = 0, phw = 0;
    if (input_half(al)) {
        net.input = input_f32(al, &l, net.input);
        amp_cpu_tensor_shape(al->owner->net, al->index - 1, &pc, &phw);
        prev_delta = amp_cpu_half_delta(al->owner, al->index - 1);
        net.delta = NULL;
        if (prev_delta) {
            net.delta = amp_cpu_reserve(&cn->dx32, nin);
            memset(net.delta, 0, nin * sizeof(float));
        }
    }
    c->inner_backward(l, net);
    if (prev_delta) amp_cpu_add_half_nhwc(dt, prev_delta, net.delta, l.batch, pc, phw);
    c->tail = (amp_tail_half){0};
}

/* The emulation of l's type, forward or backward. */
static amp_layer_fn emulated(const layer *l, int backward)
{
    if (l->type == CONNECTED)
        return backward ? amp_emulated_connected_backward : amp_emulated_connected_forward;
    if (l->type == DECONVOLUTIONAL)
        return backward ? amp_emulated_deconv_backward : amp_emulated_deconv_forward;
    return backward ? amp_emulated_conv_backward : amp_emulated_conv_forward;
}

/* n 16-bit elements at *p (a darknet array or the plan's); 0 on failure.
 * n may be 0 (a resize that leaves a layer no positions): one element, as
 * realloc's NULL for 0 bytes is no failure. */
static int resize_half(void *pp, size_t n)
{
    void **p = pp;
    void *q = realloc(*p, (n ? n : 1) * sizeof(uint16_t));
    if (!q) return 0;
    *p = q;
    return 1;
}

/* The half deltas' storage: one pool (amp_plan_delta_pool), or each its own
 * part of it (own_deltas). */
static amp_status place_deltas(amp_net *an, char *err, size_t errlen)
{
    network *net = an->net;
    cpu_net *cn = cpu_net_of(an);
    size_t *offset = calloc((size_t)net->n, sizeof *offset), total = 0;
    AMP_RETURN_ERROR_IF(!offset, AMP_ERR_NOMEM, err, errlen,
                        "amp: out of memory placing the half deltas");
    if (cn->own_deltas) {
        for (int i = 0; i < net->n; ++i)
            if (an->layers[i].out_half) {
                offset[i] = total;
                total += (size_t)net->layers[i].outputs * net->layers[i].batch;
            }
    } else {
        total = amp_plan_delta_pool(an, offset);
    }
    if (total > cn->deltas_n) {
        uint16_t *p = realloc(cn->deltas, total * sizeof *p);
        if (!p) free(offset);
        AMP_RETURN_ERROR_IF(!p, AMP_ERR_NOMEM, err, errlen,
                            "amp: out of memory for %zu half deltas", total);
        cn->deltas = p;
        cn->deltas_n = total;
    }
    for (int i = 0; i < net->n; ++i)
        if (an->layers[i].out_half) cpu_layer_of(&an->layers[i])->delta_h = cn->deltas + offset[i];
    free(offset);
    return AMP_OK;
}

amp_status amp_cpu_activations(amp_net *an, char *err, size_t errlen)
{
    network *net = an->net;
    amp_cpu_pin_mmap_threshold(); /* before darknet's arrays are freed */
    for (int i = 0; i < net->n; ++i) {
        amp_layer *al = &an->layers[i];
        layer *l = &net->layers[i];
        const int converts = al->io == AMP_IO_CONVERTS &&
                             (al->out_half || al->x_half || input_half(al));
        if (!al->out_half && !al->region && !converts) continue;
        if (!al->bk) { /* a data-movement layer */
            al->bk = calloc(1, sizeof(cpu_layer));
            AMP_RETURN_ERROR_IF(!al->bk, AMP_ERR_NOMEM, err, errlen,
                                "amp: out of memory storing layer %d's activations", i);
        }
        cpu_layer *c = cpu_layer_of(al);
        const size_t n = (size_t)l->outputs * l->batch;
        int ok = 1;
        if (al->out_half && l->type == DROPOUT) { /* darknet's shares its input's arrays */
            l->output = net->layers[i - 1].output;
            l->delta = NULL;
        } else if (al->out_half) {
            ok = resize_half(&l->output, n);
            free(l->delta);
            l->delta = NULL;
        }
        if (ok && al->x_half) {
            ok = resize_half(&c->x_h, n);
            free(l->x);
            free(l->x_norm);
            l->x = l->x_norm = NULL;
        }
        if (ok && al->out_half) { /* the half tail makes the activation's input again */
            free(l->activation_input);
            l->activation_input = NULL;
        }
        AMP_RETURN_ERROR_IF(!ok, AMP_ERR_NOMEM, err, errlen,
                            "amp: out of memory storing layer %d's activations in half", i);
        c->plan_n = n;
        if (converts && al->forward != converts_forward) {
            /* staged: the emulation (a layer on oneDNN falls back to it) */
            c->inner_forward = c->runner == AMP_CPU_RUNS_ONEDNN ? emulated(l, 0) : al->forward;
            c->inner_backward = c->runner == AMP_CPU_RUNS_ONEDNN ? emulated(l, 1) : al->backward;
            al->forward = converts_forward;
            al->backward = converts_backward;
        }
        if (converts && c->runner == AMP_CPU_RUNS_ONEDNN)
            amp_onednn_plan_io(c, input_half(al) ? dtype_of(al) : AMP_DTYPE_FLOAT32,
                               al->out_half ? dtype_of(al) : AMP_DTYPE_FLOAT32);
        if (al->region) amp_movement_install(al, l);
    }
    return place_deltas(an, err, errlen);
}

/* ---- the origin of a non-finite loss (backend.h's nonfinite_output) ---- */

static void scan_half(amp_dtype dt, const uint16_t *h, size_t n, amp_overflow_scan *s)
{
    for (size_t i = 0; i < n; ++i)
        amp_overflow_add(s, dt == AMP_DTYPE_BFLOAT16 ? amp_bf16_to_f32(h[i]) : amp_f16_to_f32(h[i]));
}

static void scan_f32(const float *x, size_t n, amp_overflow_scan *s)
{
    for (size_t i = 0; i < n; ++i) amp_overflow_add(s, x[i]);
}

static int params_finite(const layer *l)
{
    amp_overflow_scan s = {0, 0};
    size_t nw, nb, ns;
    amp_param_sizes(l, &nw, &nb, &ns);
    if (l->weights) scan_f32(l->weights, nw, &s);
    if (l->biases) scan_f32(l->biases, nb, &s);
    if (l->scales) scan_f32(l->scales, ns, &s);
    return s.nonfinite == 0;
}

/* Layer i's tensors as the plan keeps them, scanned: the convolution's
 * output before batch-norm first, where it is kept (the half overflow shows
 * there as inf, batch-norm makes NaN of it), then the output. 1 when the
 * non-finite values were in the output itself. */
static int scan_layer(const amp_net *an, int i, amp_overflow_scan *s)
{
    const layer *l = &an->net->layers[i];
    const amp_layer *al = &an->layers[i];
    const cpu_layer *c = al->bk ? cpu_layer_of(al) : NULL;
    const amp_dtype dt = an->scaler->opt.dtype;
    const size_t n = (size_t)l->outputs * l->batch;
    *s = (amp_overflow_scan){0, 0};
    if (al->x_half && c && c->x_h) scan_half(dt, c->x_h, n, s);
    else if (l->batch_normalize && l->x) scan_f32(l->x, n, s);
    if (s->nonfinite) return 0;
    if (al->out_half) scan_half(dt, (const uint16_t *)l->output, n, s);
    else if (l->output) scan_f32(l->output, n, s);
    return 1;
}

int amp_cpu_nonfinite_output(amp_net *an, int last, amp_overflow_scan *scan, int *finite_params)
{
    const network *net = an->net;
    for (int i = 0; i <= last && i < net->n; ++i) {
        amp_overflow_scan s;
        const int in_output = scan_layer(an, i, &s);
        if (!s.nonfinite) continue;
        /* A half layer reading a float32 tensor rounds it to the half type
         * in place where oneDNN takes darknet's array as it is (half
         * numerics on float32 kernels): a value beyond the half type's range
         * became inf there, in the next layer's input conversion. That is
         * the reader's overflow, as on a device, which converts into its own
         * copy; so the reader is named, with its own tensors' scan. Not when
         * layer i is itself a half layer: its output was rounded to the half
         * type already, so an inf in it is its own. */
        const int j = i + 1;
        const amp_layer *aj = j < net->n ? &an->layers[j] : NULL;
        if (in_output && aj && j <= last && !an->layers[i].out_half &&
            an->layers[i].precision != AMP_PRECISION_HALF && aj->precision == AMP_PRECISION_HALF &&
            aj->bk && amp_onednn_rounds_input_in_place(cpu_layer_of(aj)) &&
            params_finite(&net->layers[i])) {
            amp_overflow_scan r;
            (void)scan_layer(an, j, &r);
            if (r.nonfinite) i = j, s = r;
        }
        *scan = s;
        *finite_params = params_finite(&net->layers[i]);
        return i;
    }
    return -1;
}

void amp_cpu_activations_release(amp_net *an)
{
    network *net = an->net;
    for (int i = 0; i < net->n; ++i) {
        amp_layer *al = &an->layers[i];
        layer *l = &net->layers[i];
        const size_t n = (size_t)l->outputs * l->batch;
        if (al->out_half && l->type == DROPOUT) { /* its input's, given back before it */
            l->output = net->layers[i - 1].output;
            l->delta = net->layers[i - 1].delta;
        } else if (al->out_half) { /* darknet's float32 arrays again, zeroed as darknet made them */
            free(l->output);
            free(l->delta); /* NULL under the plan; after a resize darknet's new one */
            l->output = calloc(n, sizeof(float));
            l->delta = calloc(n, sizeof(float));
        }
        if (al->x_half && l->batch_normalize) {
            free(l->x);
            free(l->x_norm);
            l->x = calloc(n, sizeof(float));
            l->x_norm = calloc(n, sizeof(float));
        }
        if (al->out_half && l->type == CONVOLUTIONAL && activation_needs_input(l->activation)) {
            free(l->activation_input);
            l->activation_input = calloc(n, sizeof(float));
        }
        if (al->region) amp_cpu_float32_forms(al, l); /* its half form undone */
        if (al->bk) amp_onednn_plan_io(cpu_layer_of(al), AMP_DTYPE_FLOAT32, AMP_DTYPE_FLOAT32);
        al->out_half = al->x_half = al->region = 0;
    }
}

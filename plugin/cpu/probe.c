/* amp_probe on the CPU (backend.h's probe_forward): a half layer's output on
 * the first batch against darknet's float32 forward of the same layer on the
 * same input. The input is what the half layer reads (its plan's half
 * storage widened to float32 NCHW, or darknet's float32 array), so the
 * difference is the layer's own: its operands and output rounded to the half
 * type, not an earlier layer's. darknet's forward writes into scratch: the
 * layer's output, batch-norm input, statistics and rolling averages stay as
 * the half forward leaves them.
 */
#include "cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* darknet's im2col workspace for the layer, in floats (get_workspace_size of
 * convolutional_layer.c and deconvolutional_layer.c). */
static size_t workspace_floats(const layer *l)
{
    size_t n = l->workspace_size / sizeof(float) + 1;
    size_t need = 0;
    if (l->type == CONVOLUTIONAL)
        need = (size_t)l->out_h * l->out_w * l->size * l->size * (l->c / (l->groups ? l->groups : 1));
    else if (l->type == DECONVOLUTIONAL)
        need = (size_t)l->h * l->w * l->size * l->size * l->n;
    return need > n ? need : n;
}

/* The layer's input (or output) as float32 NCHW into dst: from half NHWC
 * storage (c channels by hw positions) or darknet's float32 array. */
static void as_f32(amp_dtype dt, const float *src, int half, float *dst, int batch, int c, int hw)
{
    if (half)
        amp_cpu_from_half_nhwc(dt, (const uint16_t *)(const void *)src, dst, batch, c, hw);
    else
        memcpy(dst, src, sizeof(float) * (size_t)batch * c * hw);
}

int amp_cpu_probe_forward(amp_layer *al, layer l, network net, double *rel)
{
    const amp_net *an = al->owner;
    const int k = al->index;
    if (al->nsubs ||
        (l.type != CONVOLUTIONAL && l.type != CONNECTED && l.type != DECONVOLUTIONAL)) {
        al->forward(l, net);
        return -1;
    }
    const amp_dtype dt = an->scaler->opt.dtype;
    const size_t nin = (size_t)l.inputs * l.batch, nout = (size_t)l.outputs * l.batch;
    const int stats = l.type == CONNECTED ? l.outputs : l.out_c; /* batch-norm channels */
    float *in = malloc(sizeof(float) * nin), *ref = calloc(nout, sizeof(float));
    float *got = malloc(sizeof(float) * nout);
    float *ws = calloc(workspace_floats(&l), sizeof(float));
    float *bn = l.batch_normalize ? calloc(2 * nout + 4 * (size_t)stats, sizeof(float)) : NULL;
    if (!in || !ref || !got || !ws || (l.batch_normalize && !bn)) {
        free(in), free(ref), free(got), free(ws), free(bn);
        al->forward(l, net);
        return -1;
    }
    /* the input as the half layer reads it: the previous layer's output */
    const layer *p = k > 0 ? &an->net->layers[k - 1] : NULL;
    if (p && an->layers[k - 1].out_half)
        as_f32(dt, net.input, 1, in, l.batch, p->out_c, p->out_h * p->out_w);
    else
        memcpy(in, net.input, sizeof(float) * nin);

    layer r = l;
    network rn = net;
    r.output = ref;
    if (l.batch_normalize) {
        r.x = bn;
        r.x_norm = bn + nout;
        r.mean = bn + 2 * nout;
        r.variance = r.mean + stats;
        r.rolling_mean = r.variance + stats;
        r.rolling_variance = r.rolling_mean + stats;
        memcpy(r.rolling_mean, l.rolling_mean, sizeof(float) * (size_t)stats);
        memcpy(r.rolling_variance, l.rolling_variance, sizeof(float) * (size_t)stats);
    }
    rn.input = in;
    rn.workspace = ws;
    al->orig_forward(r, rn);

    al->forward(l, net);
    as_f32(dt, l.output, al->out_half, got, l.batch, l.out_c, l.out_h * l.out_w);

    double num = 0, den = 0;
    int got_bad = 0, ref_bad = 0;
    for (size_t i = 0; i < nout; ++i) {
        if (!isfinite(ref[i])) {
            ref_bad = 1;
        } else if (!isfinite(got[i])) {
            got_bad = 1;
        } else {
            const double d = (double)got[i] - ref[i];
            num += d * d;
            den += (double)ref[i] * ref[i];
        }
    }
    *rel = ref_bad ? NAN : got_bad ? INFINITY : den > 0 ? sqrt(num / den) : num > 0 ? INFINITY : 0;
    free(in), free(ref), free(got), free(ws), free(bn);
    return 0;
}

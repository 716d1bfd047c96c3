/* Non-finite values in what darknet saves (docs/design.md, "A weights file
 * with non-finite values"): which arrays darknet's save_weights writes, in
 * the file's order, and the warning when a file it just saved holds an inf
 * or a NaN. Such weights predict nothing (a NaN rolling mean makes every
 * output of its layer NaN at inference), so a run must not let one pass in
 * silence, and -map must not keep one as the best (cli.c). */
#include "core.h"
#include "network.h"    /* get_layer_string */
#include "state_file.h" /* amp_weights_id, amp_weights_identify */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int add(amp_saved_array *out, int k, int max, const char *sub, const char *name,
               const float *values, size_t n)
{
    if (k >= max || !n) return k;
    out[k].data = values;
    out[k].n = n;
    snprintf(out[k].name, sizeof out[k].name, "%s%s%s", sub, *sub ? "." : "", name);
    return k + 1;
}

/* parser.c's save_convolutional_weights */
static int conv(const layer *l, const char *sub, amp_saved_array *out, int k, int max)
{
    const size_t n = (size_t)l->n;
    k = add(out, k, max, sub, "biases", l->biases, n);
    if (l->batch_normalize) {
        k = add(out, k, max, sub, "scales", l->scales, n);
        k = add(out, k, max, sub, "rolling_mean", l->rolling_mean, n);
        k = add(out, k, max, sub, "rolling_variance", l->rolling_variance, n);
    }
    return add(out, k, max, sub, "weights", l->weights, (size_t)l->nweights);
}

/* parser.c's save_connected_weights */
static int connected(const layer *l, const char *sub, amp_saved_array *out, int k, int max)
{
    const size_t n = (size_t)l->outputs;
    k = add(out, k, max, sub, "biases", l->biases, n);
    k = add(out, k, max, sub, "weights", l->weights, n * (size_t)l->inputs);
    if (l->batch_normalize) {
        k = add(out, k, max, sub, "scales", l->scales, n);
        k = add(out, k, max, sub, "rolling_mean", l->rolling_mean, n);
        k = add(out, k, max, sub, "rolling_variance", l->rolling_variance, n);
    }
    return k;
}

int amp_saved_arrays(const layer *l, amp_saved_array *out, int max)
{
    if (l->dontsave) return 0;
    switch (l->type) {
    case CONVOLUTIONAL:
    case DECONVOLUTIONAL:
        return conv(l, "", out, 0, max);
    case CONNECTED:
        return connected(l, "", out, 0, max);
    case BATCHNORM: {
        const size_t n = (size_t)l->c;
        int k = add(out, 0, max, "", "scales", l->scales, n);
        k = add(out, k, max, "", "rolling_mean", l->rolling_mean, n);
        return add(out, k, max, "", "rolling_variance", l->rolling_variance, n);
    }
    case LOCAL: {
        const size_t w = (size_t)l->size * l->size * l->c * l->n * l->out_w * l->out_h;
        const int k = add(out, 0, max, "", "biases", l->biases, (size_t)l->outputs);
        return add(out, k, max, "", "weights", l->weights, w);
    }
    default:
        break;
    }
    /* recurrent layers: their sub-layers, in save_weights' order (not
     * amp_sublayers' order, which follows the update) */
    static const char *const rnn[] = {"input", "self", "output"};
    static const char *const lstm[] = {"wi", "wf", "wo", "wg", "ui", "uf", "uo", "ug"};
    static const char *const gru[] = {"wz", "wr", "wh", "uz", "ur", "uh"};
    const layer *subs[8];
    const char *const *names = NULL;
    int nsub = 0;
    if (l->type == RNN || l->type == CRNN) {
        subs[0] = l->input_layer, subs[1] = l->self_layer, subs[2] = l->output_layer;
        names = rnn, nsub = 3;
    } else if (l->type == LSTM) {
        subs[0] = l->wi, subs[1] = l->wf, subs[2] = l->wo, subs[3] = l->wg;
        subs[4] = l->ui, subs[5] = l->uf, subs[6] = l->uo, subs[7] = l->ug;
        names = lstm, nsub = 8;
    } else if (l->type == GRU) {
        subs[0] = l->wz, subs[1] = l->wr, subs[2] = l->wh;
        subs[3] = l->uz, subs[4] = l->ur, subs[5] = l->uh;
        names = gru, nsub = 6;
    }
    int k = 0;
    for (int i = 0; i < nsub; ++i) {
        if (!subs[i]) continue;
        k = l->type == CRNN ? conv(subs[i], names[i], out, k, max)
                            : connected(subs[i], names[i], out, k, max);
    }
    return k;
}

static unsigned long long count_nonfinite(const float *x, size_t n)
{
    unsigned long long bad = 0;
    for (size_t i = 0; i < n; ++i) bad += amp_nonfinite_bits(x[i]); /* grad_math.h */
    return bad;
}

/* Appends to out at *at, as snprintf would (never past size). */
static void append(char *out, size_t size, size_t *at, const char *fmt, ...) AMP_PRINTF(4, 5);
static void append(char *out, size_t size, size_t *at, const char *fmt, ...)
{
    if (*at >= size) return;
    va_list ap;
    va_start(ap, fmt);
    const int w = vsnprintf(out + *at, size - *at, fmt, ap);
    va_end(ap);
    if (w > 0) *at += (size_t)w < size - *at ? (size_t)w : size - *at - 1;
}

static unsigned long long nonfinite_arrays(const network *net, unsigned long long nvalues,
                                           char *out, size_t size)
{
    enum { NAMED = 6 }; /* arrays named; the rest counted */
    unsigned long long bad = 0, seen = 0;
    int named = 0, more = 0, last_layer = -1;
    size_t at = 0;
    if (size) out[0] = 0;
    for (int i = 0; i < net->n && seen < nvalues; ++i) {
        amp_saved_array a[AMP_MAX_SAVED_ARRAYS];
        const int n = amp_saved_arrays(&net->layers[i], a, AMP_MAX_SAVED_ARRAYS);
        for (int k = 0; k < n && seen < nvalues; ++k) {
            const size_t len = nvalues - seen < a[k].n ? (size_t)(nvalues - seen) : a[k].n;
            seen += len;
            const unsigned long long b = a[k].data ? count_nonfinite(a[k].data, len) : 0;
            if (!b) continue;
            bad += b;
            if (named == NAMED) {
                ++more;
                continue;
            }
            if (last_layer != i)
                append(out, size, &at, "%slayer %d [%s] ", named ? "; " : "", i,
                       get_layer_string(net->layers[i].type));
            else
                append(out, size, &at, ", ");
            append(out, size, &at, "%s (%llu of %zu)", a[k].name, b, len);
            last_layer = i;
            ++named;
        }
    }
    if (more) append(out, size, &at, "; and %d more array%s", more, more == 1 ? "" : "s");
    return bad;
}

void amp_nonfinite_where(const network *net, const amp_weights_values *v, char *out,
                         size_t size)
{
    /* the file and the network's arrays disagree: said by position */
    if (!nonfinite_arrays(net, v->values, out, size))
        snprintf(out, size, "the first is value %llu after the header", v->first_nonfinite);
}

amp_status amp_check_saved(amp_net *an, const network *net, const char *filename,
                           amp_weights_id *id)
{
    char err[AMP_MSG_LEN];
    amp_weights_values v;
    if (amp_weights_read(filename, id, &v, err, sizeof err) != AMP_OK) {
        fprintf(stderr, "amp: warning: %s (the weights themselves were saved)\n", err);
        return AMP_ERR_IO;
    }
    if (!id->bound || !v.nonfinite) return AMP_OK;
    char where[AMP_MSG_LEN];
    amp_nonfinite_where(net, &v, where, sizeof where);
    fprintf(stderr,
            "amp: warning: %s holds %llu non-finite values (of %llu): %s; these weights "
            "cannot predict (an inf or NaN spreads through every later layer)%s\n",
            filename, v.nonfinite, v.values, where,
            an ? "; counted in the run's summary, and -map never keeps such weights as the best"
               : "");
    if (!an) return AMP_OK;
    an->nonfinite_saves += 1;
    snprintf(an->nonfinite_last, sizeof an->nonfinite_last, "%.200s, %llu values: %.280s",
             filename, v.nonfinite, where);
    return AMP_OK;
}

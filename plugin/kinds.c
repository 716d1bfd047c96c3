/* The darknet layer types AMP knows, one row each (docs/architecture.md,
 * "Layer kinds"): what the policy does with the type, its parameter arrays
 * as darknet's update consumes them, the batch-norm statistics its training
 * forward keeps, its sub-layers, and the work of its forward pass. The
 * policy (policy.c), the gradients and forward states collected (tensors.c)
 * and the profile's work read it here; a backend says which of these kinds
 * it has half forms for (backend.h's supports). A type without a row runs
 * as darknet runs it, in float32, and holds no parameters AMP knows of.
 */
#include "core.h"

#include "activations.h" /* activation_needs_input */

/* ---- parameters ---- */

static void conv_params(const layer *l, size_t *w, size_t *b, size_t *s)
{
    *w = (size_t)l->nweights, *b = (size_t)l->n, *s = l->batch_normalize ? (size_t)l->n : 0;
}

static void connected_params(const layer *l, size_t *w, size_t *b, size_t *s)
{
    /* darknet's connected layer leaves nweights 0 */
    *w = (size_t)l->inputs * l->outputs, *b = (size_t)l->outputs;
    *s = l->batch_normalize ? (size_t)l->outputs : 0;
}

static void local_params(const layer *l, size_t *w, size_t *b, size_t *s)
{
    *w = (size_t)l->c * l->n * l->size * l->size * l->out_w * l->out_h, *b = (size_t)l->outputs;
    *s = 0;
}

/* ---- batch-norm statistics: the channels save_weights writes them with ---- */

static size_t filters(const layer *l)
{
    return l->batch_normalize ? (size_t)l->n : 0;
}

static size_t outputs(const layer *l)
{
    return l->batch_normalize ? (size_t)l->outputs : 0;
}

static size_t channels(const layer *l)
{
    return (size_t)l->c;
}

/* ---- sub-layers, in the order darknet's update runs them ---- */

static int rnn_subs(const layer *l, layer **subs, const char **names)
{
    static const char *const n[] = {"input", "self", "output"};
    layer *const s[] = {l->input_layer, l->self_layer, l->output_layer};
    for (int k = 0; k < 3; ++k) subs[k] = s[k], names[k] = n[k];
    return 3;
}

static int gru_subs(const layer *l, layer **subs, const char **names)
{
    static const char *const n[] = {"uz", "wz", "ur", "wr", "uh", "wh"};
    layer *const s[] = {l->uz, l->wz, l->ur, l->wr, l->uh, l->wh};
    for (int k = 0; k < 6; ++k) subs[k] = s[k], names[k] = n[k];
    return 6;
}

static int lstm_subs(const layer *l, layer **subs, const char **names)
{
    static const char *const n[] = {"wf", "wi", "wg", "wo", "uf", "ui", "ug", "uo"};
    layer *const s[] = {l->wf, l->wi, l->wg, l->wo, l->uf, l->ui, l->ug, l->uo};
    for (int k = 0; k < 8; ++k) subs[k] = s[k], names[k] = n[k];
    return 8;
}

/* ---- multiply-adds of one forward pass ---- */

static double conv_macs(const layer *l)
{
    return (double)l->batch * l->out_h * l->out_w * l->n * (l->c / l->groups) * l->size * l->size;
}

static double deconv_macs(const layer *l)
{
    return (double)l->batch * l->h * l->w * l->c * l->n * l->size * l->size;
}

static double connected_macs(const layer *l)
{
    return (double)l->batch * l->inputs * l->outputs;
}

static double local_macs(const layer *l)
{
    return (double)l->batch * l->out_h * l->out_w * l->n * l->c * l->size * l->size;
}

/* The table. Types not listed run unchanged in float32: the losses (yolo,
 * region, detection, softmax, cost, logistic, iseg), l2norm, normalization,
 * activation, crop and the other layers with neither parameters nor a half
 * form. */
static const amp_layer_kind kinds[] = {
    {CONVOLUTIONAL, "convolutional", AMP_ROLE_GEMM, conv_params, filters, NULL, conv_macs},
    {DECONVOLUTIONAL, "deconvolutional", AMP_ROLE_GEMM, conv_params, filters, NULL, deconv_macs},
    {CONNECTED, "connected", AMP_ROLE_GEMM, connected_params, outputs, NULL, connected_macs},
    {LOCAL, "local", AMP_ROLE_GEMM, local_params, NULL, NULL, local_macs},
    /* the GEMMs of their sub-layers (connected; convolutional in crnn) */
    {RNN, "rnn", AMP_ROLE_RECURRENT, NULL, NULL, rnn_subs, NULL},
    {CRNN, "crnn", AMP_ROLE_RECURRENT, NULL, NULL, rnn_subs, NULL},
    {GRU, "gru", AMP_ROLE_RECURRENT, NULL, NULL, gru_subs, NULL},
    {LSTM, "lstm", AMP_ROLE_RECURRENT, NULL, NULL, lstm_subs, NULL},
    /* its scales and rolling statistics (darknet's update leaves its scales) */
    {BATCHNORM, "batchnorm", AMP_ROLE_NORMALISES, NULL, channels, NULL, NULL},
    /* data movement: a backend's half form carries half tensors through */
    {MAXPOOL, "maxpool", AMP_ROLE_MOVES, NULL, NULL, NULL, NULL},
    {AVGPOOL, "avgpool", AMP_ROLE_MOVES, NULL, NULL, NULL, NULL},
    {ROUTE, "route", AMP_ROLE_MOVES, NULL, NULL, NULL, NULL},
    {SHORTCUT, "shortcut", AMP_ROLE_MOVES, NULL, NULL, NULL, NULL},
    {UPSAMPLE, "upsample", AMP_ROLE_MOVES, NULL, NULL, NULL, NULL},
    {REORG, "reorg", AMP_ROLE_MOVES, NULL, NULL, NULL, NULL},
    {DROPOUT, "dropout", AMP_ROLE_MOVES, NULL, NULL, NULL, NULL},
    {ACTIVE, "activation", AMP_ROLE_MOVES, NULL, NULL, NULL, NULL},
};

int amp_kind_count(void)
{
    return (int)(sizeof kinds / sizeof kinds[0]);
}

const amp_layer_kind *amp_kind_at(int i)
{
    return i >= 0 && i < amp_kind_count() ? &kinds[i] : NULL;
}

const amp_layer_kind *amp_kind_of(LAYER_TYPE type)
{
    for (int i = 0; i < amp_kind_count(); ++i)
        if (kinds[i].type == type) return &kinds[i];
    return NULL;
}

double amp_kind_macs(const layer *l)
{
    const amp_layer_kind *k = amp_kind_of(l->type);
    return k && k->macs ? k->macs(l) : 0;
}

/* ---- the shapes a half NHWC form carries (kinds.h) ---- */

int amp_kind_half_shape(const layer *l)
{
    switch (l->type) {
    case MAXPOOL: return 1;
    case ROUTE: /* inputs of one spatial shape (darknet concatenates others flat) */
        if (l->out_c <= 0 || (long)l->out_c * l->out_h * l->out_w != l->outputs) return 0;
        for (int i = 0; i < l->n; ++i)
            if (l->input_sizes[i] % (l->out_h * l->out_w)) return 0;
        return 1;
    case UPSAMPLE: return !l->reverse && l->scale == 1.0f;
    case SHORTCUT:
        return l->alpha == 1.0f && l->beta == 1.0f && l->w == l->out_w && l->h == l->out_h &&
               l->c == l->out_c;
    case REORG: /* darknet's permutation; flatten and extra are other layers */
        return !l->flatten && !l->extra && l->stride > 0 && l->c % (l->stride * l->stride) == 0 &&
               (long)l->out_c * l->out_h * l->out_w == l->outputs && l->outputs == l->inputs;
    case AVGPOOL: return l->out_w == 1 && l->out_h == 1 && l->out_c == l->c;
    case DROPOUT: return l->rand && l->outputs == l->inputs;
    case ACTIVE: /* an activation whose gradient is a function of its output */
        return !activation_needs_input(l->activation) && l->outputs == l->inputs;
    default: return 0;
    }
}

/* ---- a route's inputs as channel slices (kinds.h) ---- */

int amp_route_channels(const layer *l, int i)
{
    return l->input_sizes[i] / (l->out_h * l->out_w);
}

int amp_route_input_channels(const layer *l, int i)
{
    return l->groups > 1 ? amp_route_channels(l, i) * l->groups : amp_route_channels(l, i);
}

int amp_route_first_channel(const layer *l, int i)
{
    return l->groups > 1 ? amp_route_channels(l, i) * l->group_id : 0;
}

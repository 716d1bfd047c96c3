/* darknet knowledge: which arrays of a layer are parameter gradients (and of
 * what), the sub-layers of recurrent layers, and installing a backend's
 * execution on them through their function-pointer slots. */
#include "core.h"
#include "network.h" /* get_layer_string */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

amp_net *amp_net_of(const network *net)
{
    amp_net *an = net ? net->hook_data : NULL;
    return an && an->scaler ? an : NULL;
}

amp_net *amp_net_new(network *net)
{
    amp_net *an = calloc(1, sizeof *an);
    if (!an) return NULL;
    an->net = net;
    an->layers = calloc(net->n ? net->n : 1, sizeof *an->layers);
    if (!an->layers) {
        free(an);
        return NULL;
    }
    for (int i = 0; i < net->n; ++i) an->layers[i].half_allowed = 1;
    an->bad_tensor = -1;
    an->origin_layer = an->step_origin = -1;
    an->grad_suspect = -1;
    return an;
}

static const char *const kind_names[] = {"weights", "biases", "scales"};

static amp_status add_tensor(amp_net *an, int index, layer *src, const char *sub,
                             amp_tensor_kind kind, float *param, float *grad, size_t n)
{
    if (!grad || !n) return AMP_OK;
    amp_tensor *t = realloc(an->tensors, (an->ntensors + 1) * sizeof *t);
    if (!t) return AMP_ERR_NOMEM;
    an->tensors = t;
    t += an->ntensors++;
    t->src = src;
    t->kind = kind;
    t->param = param;
    t->grad = grad;
    t->n = n;
    t->offset = an->nparams;
    t->layer = index;
    t->sub = sub;
    snprintf(t->name, sizeof t->name, "%s%s%s", sub, *sub ? "." : "", kind_names[kind]);
    an->nparams += n;
    return AMP_OK;
}

int amp_param_sizes(const layer *l, size_t *weights, size_t *biases, size_t *scales)
{
    const amp_layer_kind *k = amp_kind_of(l->type);
    *weights = *biases = *scales = 0;
    if (k && k->params) k->params(l, weights, biases, scales);
    return *weights + *biases + *scales > 0;
}

/* The gradients of one layer that darknet's update consumes, by type. */
static amp_status add_layer_tensors(amp_net *an, int index, const char *sub, layer *l)
{
    size_t w, b, s;
    if (!amp_param_sizes(l, &w, &b, &s)) return AMP_OK;
    AMP_FORWARD_IF_ERROR(add_tensor(an, index, l, sub, AMP_TENSOR_WEIGHTS, l->weights,
                                    l->weight_updates, w));
    AMP_FORWARD_IF_ERROR(add_tensor(an, index, l, sub, AMP_TENSOR_BIASES, l->biases,
                                    l->bias_updates, b));
    return add_tensor(an, index, l, sub, AMP_TENSOR_SCALES, l->scales, l->scale_updates, s);
}

int amp_sublayers(const layer *l, layer **subs, const char **names)
{
    const amp_layer_kind *k = amp_kind_of(l->type);
    return k && k->subs ? k->subs(l, subs, names) : 0;
}

amp_status amp_collect_tensors(amp_net *an, char *err, size_t errlen)
{
    network *net = an->net;
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        if (!l->update) continue; /* no step consumes its gradients */
        layer *subs[AMP_MAX_SUBLAYERS];
        const char *names[AMP_MAX_SUBLAYERS];
        int nsub = amp_sublayers(l, subs, names);
        amp_status st = nsub ? AMP_OK : add_layer_tensors(an, i, "", l);
        for (int k = 0; k < nsub && st == AMP_OK; ++k)
            if (subs[k]) st = add_layer_tensors(an, i, names[k], subs[k]);
        AMP_RETURN_ERROR_IF(st != AMP_OK, st, err, errlen,
                            "amp: out of memory listing the gradients of %s", an->cfgfile);
    }
    return AMP_OK;
}

static const char *const state_names[] = {"rolling_mean", "rolling_variance", "state", "cell"};

static amp_status add_state(amp_net *an, int index, layer *src, const char *sub,
                            amp_state_kind kind, float *host, size_t n)
{
    if (!host || !n) return AMP_OK;
    amp_fwd_state *s = realloc(an->states, (an->nstates + 1) * sizeof *s);
    if (!s) return AMP_ERR_NOMEM;
    an->states = s;
    s += an->nstates++;
    s->src = src;
    s->kind = kind;
    s->host = host;
    s->n = n;
    s->offset = an->nstate_elems;
    s->layer = index;
    snprintf(s->name, sizeof s->name, "%s%s%s", sub, *sub ? "." : "", state_names[kind]);
    an->nstate_elems += n;
    return AMP_OK;
}

/* The rolling statistics of one layer or sub-layer: every type that
 * normalises a batch updates them in its training forward pass, by the
 * channel count its save_weights writes them with. */
static amp_status add_statistics(amp_net *an, int index, const char *sub, layer *l)
{
    const amp_layer_kind *k = amp_kind_of(l->type);
    const size_t n = k && k->statistics ? k->statistics(l) : 0;
    if (!n) return AMP_OK;
    AMP_FORWARD_IF_ERROR(add_state(an, index, l, sub, AMP_STATE_ROLLING_MEAN, l->rolling_mean, n));
    return add_state(an, index, l, sub, AMP_STATE_ROLLING_VARIANCE, l->rolling_variance, n);
}

amp_status amp_collect_states(amp_net *an, char *err, size_t errlen)
{
    network *net = an->net;
    amp_status st = AMP_OK;
    for (int i = 0; i < net->n && st == AMP_OK; ++i) {
        layer *l = &net->layers[i];
        layer *subs[AMP_MAX_SUBLAYERS];
        const char *names[AMP_MAX_SUBLAYERS];
        const int nsub = amp_sublayers(l, subs, names);
        st = add_statistics(an, i, "", l);
        for (int k = 0; k < nsub && st == AMP_OK; ++k)
            if (subs[k]) st = add_statistics(an, i, names[k], subs[k]);
        /* The hidden states a training forward starts from, as the last
         * batch's left them (rnn and crnn start each training batch from
         * zero: nothing carried). */
        const size_t n = (size_t)l->outputs * l->batch;
        if (st == AMP_OK && l->type == GRU) st = add_state(an, i, l, "", AMP_STATE_HIDDEN, l->state, n);
        if (st == AMP_OK && l->type == LSTM) {
            st = add_state(an, i, l, "", AMP_STATE_HIDDEN, l->h_cpu, n);
            if (st == AMP_OK) st = add_state(an, i, l, "", AMP_STATE_CELL, l->c_cpu, n);
        }
    }
    AMP_RETURN_ERROR_IF(st != AMP_OK, st, err, errlen,
                        "amp: out of memory listing the batch-norm statistics of %s", an->cfgfile);
    return AMP_OK;
}

void amp_describe_tensor(const amp_net *an, int k, char *out, size_t size)
{
    if (k < 0 || k >= an->ntensors) {
        snprintf(out, size, "an unknown tensor");
        return;
    }
    const amp_tensor *t = &an->tensors[k];
    snprintf(out, size, "layer %d [%s] %s", t->layer,
             get_layer_string(an->net->layers[t->layer].type), t->name);
}

/* Half execution of a recurrent layer is half execution of its sub-layers:
 * a record per sub-layer (amp_layer.subs), each installed by install() as a
 * layer of its own would be, and the sub-layer's slots pointed at what the
 * record runs. All or none: one sub-layer that cannot run leaves the whole
 * layer as it was, with why. */
amp_status amp_subs_install(amp_layer *al, layer *l, amp_slots (*slots)(layer *),
                            amp_sub_install_fn install, void (*free_one)(amp_layer *), void *ctx,
                            char *why, size_t whylen)
{
    layer *subs[AMP_MAX_SUBLAYERS];
    const char *names[AMP_MAX_SUBLAYERS];
    int n = amp_sublayers(l, subs, names);
    AMP_RETURN_ERROR_IF(!n, AMP_ERR_INVALID, why, whylen, "no sub-layers");
    al->subs = calloc((size_t)n, sizeof *al->subs);
    AMP_RETURN_ERROR_IF(!al->subs, AMP_ERR_NOMEM, why, whylen, "out of memory");
    al->nsubs = n;
    for (int k = 0; k < n; ++k) {
        amp_layer *sa = &al->subs[k];
        layer *sub = subs[k];
        if (!sub) {
            amp_errorf(why, whylen, "sub-layer %s missing", names[k]);
            amp_subs_free(al, slots, free_one);
            return AMP_ERR_INVALID;
        }
        sa->owner = al->owner;
        sa->index = al->index;
        sa->half_allowed = 1;
        sa->precision = al->precision;
        sa->sub = sub;
        sa->sub_name = names[k];
        amp_slots s = slots(sub);
        sa->orig_forward = sa->forward = *s.forward;
        sa->orig_backward = sa->backward = *s.backward;
        char sub_why[AMP_MSG_LEN] = "";
        amp_status st = install(sa, sub, ctx, sub_why, sizeof sub_why);
        if (st != AMP_OK) {
            amp_errorf(why, whylen, "sub-layer %s: %s", names[k], sub_why);
            amp_subs_free(al, slots, free_one);
            return st;
        }
    }
    for (int k = 0; k < n; ++k) {
        amp_layer *sa = &al->subs[k];
        amp_slots s = slots(sa->sub);
        *s.forward = sa->forward;
        *s.backward = sa->backward;
        sa->sub->hook_data = sa;
        sa->wrapped = 1;
    }
    al->label = al->subs[0].label;
    return AMP_OK;
}

void amp_subs_free(amp_layer *al, amp_slots (*slots)(layer *), void (*free_one)(amp_layer *))
{
    for (int k = 0; k < al->nsubs; ++k) {
        amp_layer *sa = &al->subs[k];
        if (free_one) free_one(sa);
        if (!sa->wrapped) continue; /* never installed */
        amp_slots s = slots(sa->sub);
        *s.forward = sa->orig_forward;
        *s.backward = sa->orig_backward;
        sa->sub->hook_data = NULL;
    }
    free(al->subs);
    al->subs = NULL;
    al->nsubs = 0;
}

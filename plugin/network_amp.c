/* AMP on a darknet network: loss scaling, momentum-safe unscaling, and the
 * inf/NaN-gated optimizer step, through darknet's per-layer function pointers.
 *
 * darknet accumulates gradients into the *_updates arrays, which also hold the
 * momentum history (U = m*U_prev + g1 + g2 + ..., summed in a fixed order).
 * Scaling must leave no trace in that history, and darknet's summation order
 * must not change (docs/design.md). So, before the batch's first backward,
 * each history is saved and multiplied by the scale S; darknet then
 * accumulates the S-scaled gradients onto it in its own order; at the step
 * every element is checked and multiplied by 1/S. With S a power of two both
 * multiplications are exact, and an overflow-free step is bit-for-bit
 * darknet's own. A step with a non-finite element restores every history from
 * the saved copy and skips every layer's update (and darknet's t), so weights
 * and momentum are exactly as before the batch.
 *
 * Wrapped pointers: forward of layers that own a cost (l.cost != NULL:
 * cost, detection, iseg, logistic, region, softmax, yolo) scales their delta
 * by S; backward of layers with parameters or a cost starts the batch; update
 * of layers with parameters takes the step. Recurrent layers' sub-layers are
 * called by their parent, whose pointers are wrapped, and their gradients are
 * part of the parent's.
 */
#include "amp_internal.h"
#include "network.h" /* get_layer_string */
#include "grad_math.h" /* amp_unscale_check, amp_inv_scale: shared with cuda/ */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

amp_net *amp_net_of(const network *net)
{
    amp_net *an = net ? net->hook_data : NULL;
    return an && an->scaler ? an : NULL;
}

/* ---- parameter gradients ---- */

static int add_tensor(amp_net *an, int index, const char *sub, const char *what, float *param,
                      float *grad, size_t n)
{
    if (!grad || !n) return 0;
    amp_tensor *t = realloc(an->tensors, (an->ntensors + 1) * sizeof *t);
    if (!t) return -1;
    an->tensors = t;
    t += an->ntensors++;
    t->param = param;
    t->grad = grad;
    t->n = n;
    t->offset = an->nparams;
    t->layer = index;
    snprintf(t->name, sizeof t->name, "%s%s%s", sub, *sub ? "." : "", what);
    an->nparams += n;
    return 0;
}

/* The gradients of one layer that darknet's update consumes, by type. */
static int add_layer_tensors(amp_net *an, int index, const char *sub, const layer *l)
{
    size_t w = 0, b = 0, s = 0;
    switch (l->type) {
    case CONVOLUTIONAL:
    case DECONVOLUTIONAL:
        w = l->nweights, b = l->n, s = l->batch_normalize ? l->n : 0;
        break;
    case CONNECTED:
        w = (size_t)l->inputs * l->outputs, b = l->outputs;
        s = l->batch_normalize ? l->outputs : 0;
        break;
    case LOCAL:
        w = (size_t)l->c * l->n * l->size * l->size * l->out_w * l->out_h, b = l->outputs;
        break;
    default:
        return 0;
    }
    if (add_tensor(an, index, sub, "weights", l->weights, l->weight_updates, w) ||
        add_tensor(an, index, sub, "biases", l->biases, l->bias_updates, b) ||
        add_tensor(an, index, sub, "scales", l->scales, l->scale_updates, s))
        return -1;
    return 0;
}

int amp_sublayers(const layer *l, layer **subs, const char **names)
{
    static const char *const rnn[] = {"input", "self", "output"};
    static const char *const gru[] = {"uz", "wz", "ur", "wr", "uh", "wh"};
    static const char *const lstm[] = {"wf", "wi", "wg", "wo", "uf", "ui", "ug", "uo"};
    const char *const *n = NULL;
    int count = 0;
    switch (l->type) {
    case RNN:
    case CRNN:
        subs[0] = l->input_layer, subs[1] = l->self_layer, subs[2] = l->output_layer;
        n = rnn, count = 3;
        break;
    case GRU:
        subs[0] = l->uz, subs[1] = l->wz, subs[2] = l->ur, subs[3] = l->wr, subs[4] = l->uh;
        subs[5] = l->wh;
        n = gru, count = 6;
        break;
    case LSTM:
        subs[0] = l->wf, subs[1] = l->wi, subs[2] = l->wg, subs[3] = l->wo, subs[4] = l->uf;
        subs[5] = l->ui, subs[6] = l->ug, subs[7] = l->uo;
        n = lstm, count = 8;
        break;
    default:
        return 0;
    }
    for (int k = 0; k < count; ++k) names[k] = n[k];
    return count;
}

/* Points a sub-layer's CPU pointers, or (gpu) its _gpu ones, at fwd and bwd. */
static void set_sub_pointers(layer *sub, int gpu, void (*fwd)(struct layer, struct network),
                             void (*bwd)(struct layer, struct network))
{
    if (!gpu) {
        sub->forward = fwd;
        sub->backward = bwd;
    }
#ifdef GPU
    else {
        sub->forward_gpu = fwd;
        sub->backward_gpu = bwd;
    }
#endif
}

/* Half execution of a recurrent layer is half execution of its sub-layers:
 * a record per sub-layer (amp_layer.subs), each installed by install() as a
 * layer of its own would be, and the sub-layer's pointers (the CPU or the
 * _gpu ones) pointed at what the record runs. All or none: one sub-layer
 * that cannot run in half leaves the whole layer in float32, with why. */
int amp_subs_install(amp_layer *al, layer *l, int gpu, amp_sub_install_fn install,
                     void (*free_one)(amp_layer *), void *ctx, char *why, size_t whylen)
{
    layer *subs[AMP_MAX_SUBLAYERS];
    const char *names[AMP_MAX_SUBLAYERS];
    int n = amp_sublayers(l, subs, names);
    if (!n) {
        snprintf(why, whylen, "no sub-layers");
        return 0;
    }
    al->subs = calloc((size_t)n, sizeof *al->subs);
    if (!al->subs) {
        snprintf(why, whylen, "out of memory");
        return 0;
    }
    al->nsubs = n;
    for (int k = 0; k < n; ++k) {
        amp_layer *sa = &al->subs[k];
        layer *sub = subs[k];
        if (!sub) {
            snprintf(why, whylen, "sub-layer %s missing", names[k]);
            amp_subs_free(al, gpu, free_one);
            return 0;
        }
        sa->owner = al->owner;
        sa->index = al->index;
        sa->half_allowed = 1;
        sa->precision = AMP_PRECISION_HALF;
        sa->sub = sub;
        sa->sub_name = names[k];
        if (!gpu) {
            sa->orig_forward = sa->forward = sub->forward;
            sa->orig_backward = sa->backward = sub->backward;
        }
#ifdef GPU
        else {
            sa->orig_forward = sa->forward = sub->forward_gpu;
            sa->orig_backward = sa->backward = sub->backward_gpu;
        }
#endif
        char sub_why[256] = "";
        if (!install(sa, sub, ctx, sub_why, sizeof sub_why)) {
            snprintf(why, whylen, "sub-layer %s: %s", names[k], sub_why);
            amp_subs_free(al, gpu, free_one);
            return 0;
        }
    }
    for (int k = 0; k < n; ++k) {
        amp_layer *sa = &al->subs[k];
        set_sub_pointers(sa->sub, gpu, sa->forward, sa->backward);
        sa->sub->hook_data = sa;
    }
    al->backend = al->subs[0].backend;
    return 1;
}

void amp_subs_free(amp_layer *al, int gpu, void (*free_one)(amp_layer *))
{
    for (int k = 0; k < al->nsubs; ++k) {
        amp_layer *sa = &al->subs[k];
        if (free_one) free_one(sa);
        if (!sa->sub || sa->sub->hook_data != sa) continue; /* never installed */
        set_sub_pointers(sa->sub, gpu, sa->orig_forward, sa->orig_backward);
        sa->sub->hook_data = NULL;
    }
    free(al->subs);
    al->subs = NULL;
    al->nsubs = 0;
}

static int collect_tensors(amp_net *an)
{
    network *net = an->net;
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        if (!l->update) continue; /* no step consumes its gradients */
        layer *subs[AMP_MAX_SUBLAYERS];
        const char *names[AMP_MAX_SUBLAYERS];
        int nsub = amp_sublayers(l, subs, names);
        if (!nsub && add_layer_tensors(an, i, "", l)) return -1;
        for (int k = 0; k < nsub; ++k)
            if (subs[k] && add_layer_tensors(an, i, names[k], subs[k])) return -1;
    }
    return 0;
}

static void describe_tensor(const amp_net *an, const amp_tensor *t, char *out, size_t size)
{
    const layer *l = &an->net->layers[t->layer];
    snprintf(out, size, "layer %d [%s] %s", t->layer, get_layer_string(l->type), t->name);
}

/* ---- the batch: scale, check, unscale, step ---- */

/* Multiplies every element by k; returns 1 if any result is inf or NaN. The
 * test is on the exponent bits, so the loop vectorizes (a float reduction
 * would not without -fassociative-math). Element by element, so splitting it
 * between threads changes no result. */
static int scale_checked(float *g, size_t n, float k)
{
    uint32_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n > 65536)
    for (size_t i = 0; i < n; ++i) {
        bad |= amp_unscale_check(&g[i], k); /* grad_math.h, shared with cuda/ */
    }
    return bad != 0;
}

/* The batch's scale is fixed here, at its first training forward or backward,
 * and used for its deltas and histories alike until the step. */
static void begin_batch(amp_net *an)
{
    double t0 = an->profile ? amp_clock() : 0;
    float s = an->scaler->state.scale;
    an->batch_scale = s;
    an->grad_nonzero = an->grad_flushed = 0;
    for (int k = 0; k < an->ntensors; ++k) {
        amp_tensor *t = &an->tensors[k];
        memcpy(an->saved + t->offset, t->grad, t->n * sizeof(float));
        if (s != 1.0f)
            for (size_t i = 0; i < t->n; ++i) t->grad[i] *= s;
    }
    an->phase = AMP_PHASE_ACCUMULATING;
    if (an->profile) an->prof_scaling_s += amp_clock() - t0;
}

/* A backward after amp_unscale, before the step: the histories are whole
 * (unscaled); scale them again, exactly, and keep the batch-start copy. */
static void rescale(amp_net *an)
{
    for (int k = 0; k < an->ntensors; ++k)
        scale_checked(an->tensors[k].grad, an->tensors[k].n, an->batch_scale);
    an->phase = AMP_PHASE_ACCUMULATING;
}

static void inject(amp_net *an)
{
    unsigned long step = an->step_index + 1;
    for (int j = 0; j < an->ninject; ++j) {
        const amp_injection *in = &an->inject[j];
        for (int k = 0; k < in->nsteps; ++k) {
            if (in->steps[k] != step) continue;
            for (int t = 0; t < an->ntensors; ++t)
                if (an->tensors[t].layer == in->layer && !strcmp(an->tensors[t].name, in->tensor))
                    an->tensors[t].grad[an->tensors[t].n / 2] = in->value;
        }
    }
}

/* Multiplies every element by 1/S and checks the result: an overflow of the
 * scaled gradient is inf already, and with S < 1 a finite gradient may only
 * overflow now. Every tensor is unscaled, so that amp_unscale leaves true
 * gradients to look at even on an overflow; tensors are visited from the
 * output layer back, so the first non-finite one is where backpropagation
 * first overflowed. */
static void unscale(amp_net *an)
{
    double t0 = an->profile ? amp_clock() : 0;
    float inv = amp_inv_scale(an->batch_scale);
    inject(an);
    an->found_inf = 0;
    an->bad[0] = 0;
    for (int k = an->ntensors - 1; k >= 0; --k) {
        amp_tensor *t = &an->tensors[k];
        if (scale_checked(t->grad, t->n, inv) && !an->found_inf) {
            an->found_inf = 1;
            describe_tensor(an, t, an->bad, sizeof an->bad);
        }
    }
    an->phase = AMP_PHASE_UNSCALED;
    if (an->profile) an->prof_scaling_s += amp_clock() - t0;
}

static void restore(amp_net *an)
{
    for (int k = 0; k < an->ntensors; ++k) {
        amp_tensor *t = &an->tensors[k];
        memcpy(t->grad, an->saved + t->offset, t->n * sizeof(float));
    }
}

/* Decides the step. Runs inside update_network, after it incremented t. */
static void decide(amp_net *an, int inside_update)
{
    amp_scaler *s = an->scaler;
    an->step_index += 1;
    an->skipped = an->found_inf;
    an->error[0] = 0;
    if (!an->skipped) an->weights_version += 1; /* the update below changes them */
    if (an->skipped) {
        restore(an);
        if (inside_update) *an->net->t -= 1;
        if (!s->pending_inf) snprintf(s->first_bad, sizeof s->first_bad, "%s", an->bad);
        fprintf(stderr, "amp: step %lu skipped: non-finite gradient, first in %s (loss scale %g)\n",
                an->step_index, an->bad, an->batch_scale);
    }
    s->pending += 1;
    s->pending_inf |= an->found_inf;
    an->phase = AMP_PHASE_STEPPED;
    if (an->owns_scaler) {
        float before = s->state.scale;
        if (amp_scaler_apply(s, an->error, sizeof an->error) != AMP_OK)
            fprintf(stderr, "%s\n", an->error);
        if (s->state.scale != before)
            fprintf(stderr, "amp: loss scale %g -> %g\n", before, s->state.scale);
    }
}

/* ---- the wrappers ---- */

static void wrap_forward(layer l, network net)
{
    const amp_layer *al = l.hook_data;
    amp_net *an = al->owner;
    if (net.train && an->phase != AMP_PHASE_ACCUMULATING) {
        if (an->phase == AMP_PHASE_UNSCALED) rescale(an);
        else begin_batch(an);
    }
    al->forward(l, net);
    float s = an->batch_scale;
    if (net.train && l.delta && s != 1.0f) {
        size_t n = (size_t)l.outputs * l.batch;
        for (size_t i = 0; i < n; ++i) l.delta[i] *= s;
    }
}

static void wrap_backward(layer l, network net)
{
    const amp_layer *al = l.hook_data;
    amp_net *an = al->owner;
    if (an->phase == AMP_PHASE_UNSCALED) rescale(an);
    else if (an->phase != AMP_PHASE_ACCUMULATING) begin_batch(an);
    al->backward(l, net);
}

static void wrap_update(layer l, update_args a)
{
    const amp_layer *al = l.hook_data;
    amp_net *an = al->owner;
    /* The first layer darknet updates, with no scaled batch pending: an update
     * with no backward since the last step (nothing was scaled), which runs
     * as darknet's own and must not inherit the last step's skip. */
    if (al->index == an->first_update && an->phase != AMP_PHASE_ACCUMULATING &&
        an->phase != AMP_PHASE_UNSCALED) {
        an->phase = AMP_PHASE_IDLE;
        an->skipped = 0;
        an->weights_version += 1; /* darknet's update below moves the weights all the same */
    }
    if (an->phase == AMP_PHASE_ACCUMULATING) unscale(an);
    if (an->phase == AMP_PHASE_UNSCALED) decide(an, 1);
    if (an->phase == AMP_PHASE_STEPPED && an->skipped) return;
    al->update(l, a);
}

/* ---- attach / detach ---- */

amp_status amp_net_attach(amp_net *an, amp_scaler *s, char *err, size_t errlen)
{
    network *net = an->net;
    an->scaler = s;
    amp_status pst = amp_cpu_path_parse(getenv("DARKNET_AMP_CPU"), &an->cpu_path, err, errlen);
    if (pst != AMP_OK) return pst;
    const char *prof = getenv("DARKNET_AMP_PROFILE");
    an->profile = prof && *prof && strcmp(prof, "0") != 0;
    if (collect_tensors(an)) goto nomem;
    const char *spec = getenv("DARKNET_AMP_INJECT");
    if (spec) {
        amp_status st = amp_parse_injection(an, spec, err, errlen);
        if (st != AMP_OK) return st;
    }
    an->phase = AMP_PHASE_IDLE;
    an->first_update = -1;
    an->weights_version = 1;
#ifdef GPU
    if (net->gpu_index >= 0) return amp_gpu_attach(an, err, errlen); /* cuda/amp_gpu.c */
#endif
    /* The batch-start copy of every history: on the host for a CPU network
     * only (a GPU network keeps its copy on the device). */
    an->saved = malloc((an->nparams ? an->nparams : 1) * sizeof(float));
    if (!an->saved) goto nomem;
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        amp_layer *al = &an->layers[i];
        al->owner = an;
        al->index = i;
        al->orig_forward = al->forward = l->forward;
        al->orig_backward = al->backward = l->backward;
        al->orig_update = al->update = l->update;
        al->precision = amp_policy(l, s->opt.dtype, al->half_allowed);
        /* amp_dtype=float32 with DARKNET_AMP_CPU=onednn: the half layers run
         * oneDNN's float32 primitives (benchmarks: the library's gain alone). */
        if (s->opt.dtype == AMP_DTYPE_FLOAT32 && an->cpu_path == AMP_CPU_ONEDNN &&
            amp_policy(l, AMP_DTYPE_BFLOAT16, al->half_allowed) == AMP_PRECISION_HALF &&
            amp_half_install(al, l))
            al->precision = AMP_PRECISION_HALF;
        else if (al->precision == AMP_PRECISION_HALF && !amp_half_install(al, l))
            al->precision = AMP_PRECISION_FALLBACK;
        if (l->type == MAXPOOL && l->forward && l->backward) { /* same results, threaded */
            al->forward = amp_maxpool_forward;
            al->backward = amp_maxpool_backward;
        }
        int params = l->update != NULL;
        if (l->cost && l->forward) l->forward = wrap_forward;
        else if (al->forward != al->orig_forward) l->forward = al->forward; /* half, maxpool */
        if ((params || l->cost) && l->backward) l->backward = wrap_backward;
        else if (al->backward != al->orig_backward) l->backward = al->backward;
        if (params) l->update = wrap_update;
        if (params && an->first_update < 0) an->first_update = i;
        al->wrapped = l->forward != al->orig_forward || l->backward != al->orig_backward ||
                      l->update != al->orig_update;
        if (al->wrapped) l->hook_data = al;
    }
    if (an->profile) amp_profile_install(an);
    net->hook_data = an;
    return AMP_OK;
nomem:
    amp_errorf(err, errlen, "amp: out of memory attaching to %s", an->cfgfile);
    return AMP_ERR_NOMEM;
}

void amp_net_free(amp_net *an)
{
    if (!an) return;
    /* not yet printed; before the half layers' records (sub-layers') go */
    if (an->profile == 1 && an->scaler && an->net) amp_profile_print(an, stderr);
#ifdef GPU
    amp_gpu_detach(an); /* a GPU network: unscaled, unwrapped and freed there */
#endif
    network *net = an->net;
    /* Detached mid-batch: hand darknet its histories unscaled (exact for a
     * power-of-two scale), with this batch's gradients kept. */
    if (an->scaler && an->phase == AMP_PHASE_ACCUMULATING && an->batch_scale != 1.0f)
        for (int k = 0; k < an->ntensors; ++k)
            scale_checked(an->tensors[k].grad, an->tensors[k].n,
                          (float)(1.0 / (double)an->batch_scale));
    if (an->scaler && net) {
        for (int i = 0; i < net->n; ++i) {
            amp_layer *al = &an->layers[i];
            amp_half_free(al);
            if (!al->wrapped) continue;
            net->layers[i].forward = al->orig_forward;
            net->layers[i].backward = al->orig_backward;
            net->layers[i].update = al->orig_update;
            net->layers[i].hook_data = NULL;
        }
    }
    amp_onednn_ctx_free(an);
    if (net && net->hook_data == an) net->hook_data = NULL;
    if (an->owns_scaler) amp_scaler_free(an->scaler);
    amp_scaler_free(an->parsed); /* a parse that never finished */
    free(an->layers);
    free(an->tensors);
    free(an->saved);
    free(an);
}

/* ---- the public API on networks ---- */

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
    return an;
}

amp_status amp_attach(network *net, amp_scaler *s, char *err, size_t errlen)
{
    if (!net) {
        amp_errorf(err, errlen, "amp_attach: NULL network");
        return AMP_ERR_INVALID;
    }
    if (net->hook_data) {
        amp_errorf(err, errlen, "amp_attach: the network already has AMP attached");
        return AMP_ERR_STATE;
    }
    /* The hooks free the attachment with the network and keep the sidecar. */
    if (!darknet_get_hooks() && amp_register() != AMP_OK) {
        amp_errorf(err, errlen, "amp_attach: cannot register darknet's hooks");
        return AMP_ERR_STATE;
    }
    amp_net *an = amp_net_new(net);
    if (!an) {
        amp_errorf(err, errlen, "amp_attach: out of memory");
        return AMP_ERR_NOMEM;
    }
    an->enabled = 1;
    if (!s) {
        amp_options o;
        amp_options_init(&o, AMP_DTYPE_FLOAT32);
        amp_status st = amp_scaler_create(&o, &s, err, errlen);
        if (st != AMP_OK) {
            amp_net_free(an);
            return st;
        }
        an->owns_scaler = 1;
    }
    amp_status st = amp_net_attach(an, s, err, errlen);
    if (st != AMP_OK) {
        an->scaler = an->owns_scaler ? s : NULL; /* an owned scaler goes with it */
        amp_net_free(an);
    }
    return st;
}

void amp_detach(network *net)
{
    amp_net *an = net ? net->hook_data : NULL;
    amp_net_free(an);
}

amp_scaler *amp_network_scaler(const network *net)
{
    amp_net *an = amp_net_of(net);
    return an ? an->scaler : NULL;
}

static amp_net *checked(amp_scaler *s, const network *net, const char *fn, char *err,
                        size_t errlen)
{
    amp_net *an = amp_net_of(net);
    if (!an)
        amp_errorf(err, errlen, "%s: AMP is not attached to this network", fn);
    else if (s && an->scaler != s)
        amp_errorf(err, errlen, "%s: the network uses another scaler", fn);
    else
        return an;
    return NULL;
}

amp_status amp_unscale(amp_scaler *s, network *net, char *err, size_t errlen)
{
    amp_net *an = checked(s, net, "amp_unscale", err, errlen);
    if (!an) return AMP_ERR_INVALID;
    if (an->phase == AMP_PHASE_UNSCALED) {
        amp_errorf(err, errlen, "amp_unscale: already unscaled since the last step "
                                "(a second unscale would divide the gradients twice)");
        return AMP_ERR_STATE;
    }
    if (an->phase != AMP_PHASE_ACCUMULATING) {
        amp_errorf(err, errlen, "amp_unscale: no backward pass since the last step");
        return AMP_ERR_STATE;
    }
#ifdef GPU
    if (an->gpu) return amp_gpu_unscale(an, err, errlen);
#endif
    unscale(an);
    return AMP_OK;
}

amp_status amp_step(amp_scaler *s, network *net, char *err, size_t errlen)
{
    amp_net *an = checked(s, net, "amp_step", err, errlen);
    if (!an) return AMP_ERR_INVALID;
#ifdef GPU
    if (an->gpu) return amp_gpu_step(an, err, errlen);
#endif
    if (an->phase == AMP_PHASE_ACCUMULATING) unscale(an);
    if (an->phase != AMP_PHASE_UNSCALED) {
        amp_errorf(err, errlen, "amp_step: no backward pass since the last step");
        return AMP_ERR_STATE;
    }
    update_network(net);
    if (an->phase == AMP_PHASE_UNSCALED) decide(an, 0); /* no layer has parameters */
    if (an->error[0]) {
        amp_errorf(err, errlen, "%s", an->error);
        return AMP_ERR_NONFINITE;
    }
    return AMP_OK;
}

double amp_network_flushed(const network *net)
{
    amp_net *an = amp_net_of(net);
    if (!an) return -1;
    return an->grad_nonzero ? (double)an->grad_flushed / (double)an->grad_nonzero : 0.0;
}

int amp_step_skipped(const amp_scaler *s, const network *net)
{
    amp_net *an = amp_net_of(net);
    if (!an || (s && an->scaler != s)) return -1;
#ifdef GPU
    amp_gpu_poll(an, 1); /* the device decided; this API call may wait for it */
#endif
    return an->step_index > 0 && an->skipped;
}

/* ---- test aid: DARKNET_AMP_INJECT ---- */

static int parse_value(const char *v, float *out)
{
    char *end;
    *out = strtof(v, &end); /* takes nan, inf, -inf too */
    return *v && !*end ? 0 : -1;
}

/* "LAYER:TENSOR:VALUE:STEP[,STEP...]" items separated by ';', e.g.
 * "3:weights:nan:2,5;7:uz.biases:-inf:4". STEP counts this network's steps
 * from 1. The value replaces the middle element of that gradient just before
 * the step's check. */
amp_status amp_parse_injection(amp_net *an, const char *spec, char *err, size_t errlen)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
        amp_injection *in = &an->inject[an->ninject];
        char *f[4], *s2 = NULL;
        int nf = 0;
        for (char *p = strtok_r(item, ":", &s2); p && nf < 4; p = strtok_r(NULL, ":", &s2))
            f[nf++] = p;
        char *end;
        long li = nf == 4 ? strtol(f[0], &end, 10) : -1;
        if (an->ninject == 8 || nf != 4 || *end || li < 0 || li >= an->net->n ||
            parse_value(f[2], &in->value) || strlen(f[1]) >= sizeof in->tensor) {
            amp_errorf(err, errlen, "DARKNET_AMP_INJECT=%s: expected LAYER:TENSOR:VALUE:STEPS "
                                    "with LAYER in [0, %d), e.g. 3:weights:nan:2,5", spec,
                       an->net->n);
            return AMP_ERR_INVALID;
        }
        in->layer = (int)li;
        strcpy(in->tensor, f[1]);
        int known = 0;
        for (int t = 0; t < an->ntensors; ++t)
            known |= an->tensors[t].layer == in->layer && !strcmp(an->tensors[t].name, in->tensor);
        if (!known) {
            amp_errorf(err, errlen, "DARKNET_AMP_INJECT=%s: layer %ld [%s] has no gradient '%s' "
                                    "(weights, biases, scales; sub-layers as uz.weights)",
                       spec, li, get_layer_string(an->net->layers[li].type), f[1]);
            return AMP_ERR_INVALID;
        }
        in->nsteps = 0;
        char *s3 = NULL;
        for (char *p = strtok_r(f[3], ",", &s3); p; p = strtok_r(NULL, ",", &s3)) {
            unsigned long step = strtoul(p, &end, 10);
            if (*end || !step || in->nsteps == 16) {
                amp_errorf(err, errlen, "DARKNET_AMP_INJECT=%s: bad step list '%s'", spec, f[3]);
                return AMP_ERR_INVALID;
            }
            in->steps[in->nsteps++] = step;
        }
        an->ninject++;
    }
    return AMP_OK;
}

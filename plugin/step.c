/* The training step, once for every backend: loss scaling, momentum-safe
 * unscaling and the inf/NaN-gated optimizer step, through darknet's
 * per-layer function pointers (docs/design.md, docs/architecture.md).
 *
 * darknet accumulates gradients into the *_updates arrays, which also hold
 * the momentum history (U = m*U_prev + g1 + g2 + ..., summed in a fixed
 * order). Scaling must leave no trace in that history, and darknet's
 * summation order must not change. So, before the batch's first backward,
 * each history is saved and multiplied by the scale S; darknet then
 * accumulates the S-scaled gradients onto it in its own order; at the step
 * every element is checked and multiplied by 1/S. With S a power of two both
 * multiplications are exact, and an overflow-free step is bit-for-bit
 * darknet's own. A step with a non-finite element leaves weights, momentum,
 * Adam moments, darknet's t and what the forward passes changed besides
 * (rolling statistics, recurrent hidden states: amp_collect_states) exactly
 * as before the batch.
 *
 * The phases (amp_phase):
 *
 *   IDLE --first training forward (of the first layer, or a loss layer), or
 *          backward--> ACCUMULATING
 *   ACCUMULATING --amp_unscale, or the first update--> UNSCALED
 *   UNSCALED --backward (a new micro-batch)--> ACCUMULATING (histories rescaled)
 *   UNSCALED --the first update: the decision--> STEPPED
 *   STEPPED --forward/backward--> ACCUMULATING;  --update, nothing pending--> IDLE
 *
 * Wrapped pointers (the backend's slots: darknet's CPU or GPU ones): forward
 * of the first layer starts the batch (histories saved and scaled, and what
 * the forward pass changes besides, rolling statistics above all, saved for
 * a skip to restore); forward of layers that own a cost (l.cost != NULL:
 * cost, detection, iseg, logistic, region, softmax, yolo) scales their delta
 * by S; backward of
 * layers with parameters or a cost starts the batch; update of layers with
 * parameters takes the step. Recurrent layers' sub-layers are called by their
 * parent, whose pointers are wrapped; their gradients are part of the
 * parent's. The backend does the arithmetic (backend.h).
 */
#include "backend.h"
#include "step.h"
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void amp_net_sync(amp_net *an, int wait)
{
    amp_step_outcome o;
    if (an && an->ops && an->ops->sync && an->ops->sync(an, wait, &o)) amp_step_settled(an, &o);
}

amp_status amp_net_restructure(amp_net *an, char *err, size_t errlen)
{
    const amp_status st = amp_fallback_apply(an, err, errlen);
    amp_point_slots(an);
    return st;
}

amp_status amp_net_resized(amp_net *an, char *err, size_t errlen)
{
    if (!an->plan_on) return AMP_OK;
    if (!amp_plan_changes(an) || !an->ops->activations_release)
        return an->ops->activations(an, err, errlen);
    /* a data-movement layer's half form no longer takes its shape, or takes
     * it again: darknet's float32 arrays (just made) and forms back, the
     * plan made again at this shape */
    an->ops->activations_release(an);
    amp_plan_make(an);
    const amp_status st = an->ops->activations(an, err, errlen);
    amp_point_slots(an);
    return st;
}

/* ---- the batch ---- */

/* The batch's scale is fixed here, at its first training forward (the first
 * layer's) or backward, and used for its deltas and histories alike until the
 * step; the backend keeps what a skip restores. */
static void begin_batch(amp_net *an)
{
    const amp_prof_mark m = an->env.profile ? amp_prof_start(an, NULL, AMP_PROF_SCALING)
                                            : (amp_prof_mark){0, -1};
    an->loss_bad = 0;
    an->loss_element = -1;
    an->loss_where[0] = 0;
    an->loss_cause[0] = 0;
    an->origin_layer = -1;
    an->origin_overflow = 0;
    an->ops->begin_batch(an);
    an->phase = AMP_PHASE_ACCUMULATING;
    if (an->env.profile) amp_prof_stop(an, NULL, AMP_PROF_SCALING, m);
}

/* A backward after amp_unscale, before the step: the histories are whole
 * (unscaled); scale them again, exactly, and keep the batch-start copy. */
static void rescale(amp_net *an)
{
    an->ops->rescale(an);
    an->phase = AMP_PHASE_ACCUMULATING;
}

/* Every gradient unscaled and checked; the first non-finite one (from the
 * output layer back, where backpropagation first overflowed) is remembered
 * by a host-decided backend, flagged on the device by the others. */
static void unscale(amp_net *an)
{
    const amp_prof_mark m = an->env.profile ? amp_prof_start(an, NULL, AMP_PROF_SCALING)
                                            : (amp_prof_mark){0, -1};
    if (!an->comm) amp_inject(an); /* data-parallel: before the sum (begin_step) */
    an->found_inf = 0;
    an->bad_tensor = -1;
    an->ops->unscale(an);
    an->phase = AMP_PHASE_UNSCALED;
    if (an->env.profile) amp_prof_stop(an, NULL, AMP_PROF_SCALING, m);
}

/* The decision, before the first layer's update. inside_update: darknet's
 * update_network has counted the step in *net->t already. */
static void begin_step(amp_net *an, int inside_update)
{
    amp_net_sync(an, 1); /* a device's last step settled: in darknet's loop long done */
    an->step_iteration = (int)get_current_batch(an->net); /* until this step is settled */
    if (an->phase == AMP_PHASE_ACCUMULATING) {
        if (an->comm) { /* every process then decides alike */
            amp_inject(an); /* where a process's own backward overflows: before the sum */
            amp_dist_reduce(an);
        }
        unscale(an);
    }
    /* what the step is decided on, kept until it is settled (amp_dist_reduce
     * may have added another process's) */
    memcpy(an->step_where, an->loss_where, sizeof an->step_where);
    memcpy(an->step_cause, an->loss_cause, sizeof an->step_cause);
    an->step_origin = an->origin_layer;
    an->step_origin_scan = an->origin_scan;
    an->step_origin_overflow = an->origin_overflow;
    an->step_index += 1;
    an->phase = AMP_PHASE_STEPPED;
    if (an->ops->decide) {
        /* On the device: darknet's updates all run and a skipped step is
         * undone there (step_end). The host does not know which: the half
         * weight copies are refreshed after every step (also after multi-GPU
         * averaging, which darknet does right after a step). */
        an->ops->decide(an);
        an->weights_version += 1;
        an->skip_updates = 0;
        an->step_open = 1;
        return;
    }
    /* the device's rule, with the scale's update left to amp_step_settled
     * (a shared scaler updates once for all of its networks) */
    an->skip_updates = amp_step_decide(&an->scaler->state, &an->scaler->params,
                                       (unsigned)an->found_inf, (unsigned)an->loss_bad, 0);
    if (an->skip_updates) an->ops->restore(an);
    else an->weights_version += 1; /* the updates below change them */
    const amp_step_outcome o = {.skipped = an->skip_updates,
                                .bad_tensor = an->bad_tensor,
                                .batch_scale = an->batch_scale,
                                .seq = an->step_index,
                                .take_back_t = inside_update,
                                .loss_layer = an->loss_bad - 1};
    amp_step_settled(an, &o);
}

/* After the last layer's update: the step's end, the one boundary where the
 * network's structure changes (the same on every backend): the fallbacks
 * that the settled outcomes and the first batch's probe made due are
 * applied there, and the slots pointed again. Every process of a
 * data-parallel launch gets here alike, with the same outcomes. */
static void end_step(amp_net *an)
{
    if (an->comm) amp_dist_after_step(an);
    const int probed = an->probe_on;
    if (probed) amp_probe_end(an); /* its report, and the layers due */
    if (an->step_open) {
        an->step_open = 0;
        an->ops->step_end(an);
    }
    if (!probed && !an->fallbacks_due) return;
    char err[AMP_MSG_LEN];
    const amp_status st = amp_net_restructure(an, err, sizeof err);
    if (st != AMP_OK) amp_net_fail(an, st, "%s", err);
}

/* ---- the wrappers ---- */

/* Where darknet knows the batch's image paths (patch 0013): the image whose
 * delta was not finite, or the batch's first few, for the skip message. */
static void describe_loss_batch(amp_net *an, const layer *l)
{
    char **paths = an->net->paths;
    const int n = l->batch;
    an->loss_where[0] = 0;
    if (!paths || n < 1) return;
    const long b = an->loss_element >= 0 && l->outputs > 0 ? an->loss_element / l->outputs : -1;
    if (b >= 0 && b < n) {
        snprintf(an->loss_where, sizeof an->loss_where, "image %s", paths[b]);
        return;
    }
    size_t k = (size_t)snprintf(an->loss_where, sizeof an->loss_where, "batch of %d images: %s", n,
                                paths[0]);
    for (int i = 1; i < n && i < 3 && k < sizeof an->loss_where; ++i)
        k += (size_t)snprintf(an->loss_where + k, sizeof an->loss_where - k, ", %s", paths[i]);
    if (n > 3 && k < sizeof an->loss_where)
        snprintf(an->loss_where + k, sizeof an->loss_where - k, " and %d more", n - 3);
}

/* A loss came out non-finite: where the first non-finite value was made. A
 * half layer, or a data-movement layer running its half form (a shortcut's
 * sum), whose output holds an inf or NaN while everything before it is
 * finite, its own parameters too, has overflowed its half type (the forward
 * pass is not scaled: no loss scale changes that); any other layer's is a
 * data or model problem, as a loss that is not finite with every output
 * finite is. */
static void find_origin(amp_net *an, int last)
{
    an->origin_layer = -1;
    an->origin_overflow = 0;
    if (!an->ops->nonfinite_output) return;
    amp_overflow_scan s = {0, 0};
    int params_finite = 1;
    const int i = an->ops->nonfinite_output(an, last, &s, &params_finite);
    if (i < 0) return;
    an->origin_layer = i;
    an->origin_scan = s;
    an->origin_overflow = params_finite && amp_layer_stores_half(&an->layers[i]);
}

/* What a forward slot runs: the backend's form, or on the first batch a
 * half layer's probe (amp_probe, probe.c). */
static void run_forward(amp_layer *al, layer l, network net)
{
    if (al->owner->probe_on && net.train && al->precision == AMP_PRECISION_HALF)
        amp_probe_forward(al->owner, al, l, net);
    else
        al->forward(l, net);
}

/* The first layer's forward (the batch starts there: before any layer's
 * training forward changes its rolling statistics) and every cost layer's. */
static void wrap_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_net *an = al->owner;
    if (net.train && an->phase != AMP_PHASE_ACCUMULATING) {
        if (an->phase == AMP_PHASE_UNSCALED) rescale(an);
        else begin_batch(an);
    }
    run_forward(al, l, net);
    if (!net.train || !l.cost) return;
    /* A cost layer's loss is on the host on every backend. Not finite: a data
     * or model problem (the scale has not touched it yet), not an overflow. */
    const int was_bad = an->loss_bad;
    amp_inject_delta(an, al->index, &l);
    an->ops->scale_loss(an, &l, al->index);
    if (!an->loss_bad && l.cost && !amp_finite(*l.cost)) an->loss_bad = al->index + 1;
    if (!was_bad && an->loss_bad) {
        describe_loss_batch(an, &l);
        find_origin(an, al->index);
        if (an->origin_layer < 0) amp_loss_cause(&l, &net, an->loss_cause, sizeof an->loss_cause);
    }
}

/* amp_probe: a half layer's forward on the first batch, compared with
 * float32's (probe.c); its slot holds this only until that step ends. */
static void wrap_probe(layer l, network net)
{
    run_forward(l.hook_data, l, net);
}

static void wrap_backward(layer l, network net)
{
    const amp_layer *al = l.hook_data;
    amp_net *an = al->owner;
    amp_net_sync(an, 0); /* the last step's outcome, before this batch's update */
    if (an->phase == AMP_PHASE_UNSCALED) rescale(an);
    else if (an->phase != AMP_PHASE_ACCUMULATING) begin_batch(an);
    al->backward(l, net);
}

static void wrap_update(layer l, update_args a)
{
    const amp_layer *al = l.hook_data;
    amp_net *an = al->owner;
    if (an->phase == AMP_PHASE_ACCUMULATING || an->phase == AMP_PHASE_UNSCALED) {
        begin_step(an, 1);
    } else if (al->index == an->first_update) {
        /* An update with no scaled batch pending (a program that fills the
         * *_updates itself, as darknet's lsd.c does): darknet's own, which must
         * not inherit the last step's skip, and moves the weights all the same. */
        an->phase = AMP_PHASE_IDLE;
        an->skipped = 0;
        an->skip_updates = 0;
        an->step_open = 0;
        an->weights_version += 1;
    }
    /* Data-parallel: darknet divides by its batch, which is this process's
     * share; the summed gradients are the whole batch's. */
    if (an->comm) a.batch *= an->comm->size;
    if (!an->skip_updates) al->update(l, a);
    if (al->index == an->last_update) end_step(an);
}

/* ---- attach / detach ---- */

amp_status amp_net_attach(amp_net *an, amp_scaler *s, const amp_backend_ops *ops, char *err,
                          size_t errlen)
{
    network *net = an->net;
    AMP_FORWARD_IF_ERROR(amp_backend_check(ops, err, errlen));
    an->scaler = s;
    an->ops = ops;
    AMP_RETURN_ERROR_IF(an->comm && !ops->reduce, AMP_ERR_INVALID, err, errlen,
                        "%s: a data-parallel launch of a %s network: this backend cannot sum "
                        "gradients over processes yet (docs/distributed.md)",
                        an->cfgfile, ops->name);
    amp_env_read(&an->env);
    if (an->comm) {
        AMP_FORWARD_IF_ERROR(amp_dist_same_cfg(an, err, errlen));
        AMP_FORWARD_IF_ERROR(
            amp_dist_check_parse(an->env.dist_check, &an->dist_check_every, err, errlen));
    }
    AMP_FORWARD_IF_ERROR(amp_collect_tensors(an, err, errlen));
    AMP_FORWARD_IF_ERROR(amp_collect_states(an, err, errlen));
    if (an->env.inject) AMP_FORWARD_IF_ERROR(amp_parse_injection(an, an->env.inject, err, errlen));
    an->phase = AMP_PHASE_IDLE;
    an->first_update = an->last_update = -1;
    an->weights_version = 1;
    AMP_FORWARD_IF_ERROR(ops->net_init(an, err, errlen));
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        amp_layer *al = &an->layers[i];
        const amp_slots sl = ops->slots(l);
        al->owner = an;
        al->index = i;
        al->orig_forward = al->forward = *sl.forward;
        al->orig_backward = al->backward = *sl.backward;
        al->orig_update = al->update = *sl.update;
        al->precision = amp_policy(l, s->opt.dtype, al->half_allowed);
        if (al->precision == AMP_PRECISION_HALF && !ops->supports(amp_kind_of(l->type), s->opt.dtype))
            al->precision = AMP_PRECISION_FALLBACK; /* no half form for the kind here */
        AMP_FORWARD_IF_ERROR(ops->layer_install(al, l, err, errlen));
    }
    /* the activation plan, carried out by the backend before any layer runs */
    an->plan_on = s->opt.half_activations && s->opt.dtype != AMP_DTYPE_FLOAT32 &&
                  ops->activations;
    amp_plan_make(an);
    if (an->plan_on) AMP_FORWARD_IF_ERROR(ops->activations(an, err, errlen));
    an->probe_on = s->opt.probe && ops->probe_forward && s->opt.dtype != AMP_DTYPE_FLOAT32;
    amp_point_slots(an);
    if (an->env.profile && (ops->host_timing || ops->prof_begin)) amp_profile_install(an);
    if (s->opt.probe && !an->probe_on)
        fprintf(stderr, "amp: amp_probe=1: %s\n",
                s->opt.dtype == AMP_DTYPE_FLOAT32
                    ? "nothing to compare with amp_dtype=float32"
                    : "the half layers of this backend cannot be probed yet (the CPU's can)");
    net->hook_data = an;
    return AMP_OK;
}

void amp_point_slots(amp_net *an)
{
    network *net = an->net;
    /* DARKNET_AMP_PROFILE's timers hold the slots: what they call changes.
     * (Not told by net->hook_data: the cfg hooks set it before the first
     * call, which then left darknet's own functions in the slots for the
     * timers to wrap, float32 layers on half storage.) */
    const int timed = an->prof_installed;
    an->first_update = an->last_update = -1;
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        amp_layer *al = &an->layers[i];
        const amp_slots sl = an->ops->slots(l);
        const int params = al->orig_update != NULL;
        /* the wrappers, else what the backend installed (al->forward is
         * darknet's own where it installed nothing) */
        const amp_layer_fn f = i == 0 || l->cost                                  ? wrap_forward
                               : an->probe_on && al->precision == AMP_PRECISION_HALF ? wrap_probe
                                                                                     : al->forward;
        const amp_layer_fn b = params || l->cost ? wrap_backward : al->backward;
        const amp_update_fn u = params ? wrap_update : al->update;
        if (params) {
            if (an->first_update < 0) an->first_update = i;
            an->last_update = i;
        }
        if (timed) {
            if (al->prof.next_forward) al->prof.next_forward = f;
            if (al->prof.next_backward) al->prof.next_backward = b;
            if (al->prof.next_update) al->prof.next_update = u;
            continue;
        }
        if (*sl.forward) *sl.forward = f;
        if (*sl.backward) *sl.backward = b;
        if (*sl.update) *sl.update = u;
        al->wrapped = *sl.forward != al->orig_forward || *sl.backward != al->orig_backward ||
                      *sl.update != al->orig_update;
        if (al->wrapped) l->hook_data = al;
    }
}

void amp_net_free(amp_net *an)
{
    if (!an) return;
    /* not yet printed; before the layers' records (sub-layers') go */
    if (an->env.profile == 1 && an->scaler && an->net) amp_profile_print(an, stderr);
    network *net = an->net;
    const amp_backend_ops *ops = an->ops;
    if (ops && net) {
        /* Detached mid-batch: hand darknet its histories unscaled (exact for
         * a power-of-two scale), with this batch's gradients kept. */
        if (an->phase == AMP_PHASE_ACCUMULATING) ops->end_mid_batch(an);
        an->phase = AMP_PHASE_IDLE;
        for (int i = 0; i < net->n; ++i) {
            amp_layer *al = &an->layers[i];
            ops->layer_free(al);
            if (!al->wrapped) continue;
            const amp_slots sl = ops->slots(&net->layers[i]);
            *sl.forward = al->orig_forward;
            *sl.backward = al->orig_backward;
            *sl.update = al->orig_update;
            net->layers[i].hook_data = NULL;
        }
        ops->net_free(an);
    }
    if (net && net->hook_data == an) net->hook_data = NULL;
    if (an->owns_scaler) amp_scaler_free(an->scaler);
    amp_scaler_free(an->parsed); /* a parse that never finished */
    free(an->layers);
    free(an->tensors);
    free(an->states);
    free(an->dist_pack);
    free(an);
}

/* ---- the public API on networks ---- */

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

/* The network's stored error as the call's result. */
static amp_status stored_error(const amp_net *an, char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(an->error[0], an->error_status, err, errlen, "%s", an->error);
    return AMP_OK;
}

amp_status amp_unscale(amp_scaler *s, network *net, char *err, size_t errlen)
{
    amp_net *an = checked(s, net, "amp_unscale", err, errlen);
    if (!an) return AMP_ERR_INVALID;
    AMP_RETURN_ERROR_IF(an->phase == AMP_PHASE_UNSCALED, AMP_ERR_STATE, err, errlen,
                        "amp_unscale: already unscaled since the last step (a second unscale "
                        "would divide the gradients twice)");
    AMP_RETURN_ERROR_IF(an->phase != AMP_PHASE_ACCUMULATING, AMP_ERR_STATE, err, errlen,
                        "amp_unscale: no backward pass since the last step");
    unscale(an);
    return stored_error(an, err, errlen);
}

amp_status amp_step(amp_scaler *s, network *net, char *err, size_t errlen)
{
    amp_net *an = checked(s, net, "amp_step", err, errlen);
    if (!an) return AMP_ERR_INVALID;
    AMP_RETURN_ERROR_IF(an->phase != AMP_PHASE_ACCUMULATING && an->phase != AMP_PHASE_UNSCALED,
                        AMP_ERR_STATE, err, errlen,
                        "amp_step: no backward pass since the last step");
    if (an->phase == AMP_PHASE_ACCUMULATING) unscale(an);
    update_network(net);
    if (an->phase == AMP_PHASE_UNSCALED) { /* no layer has parameters */
        begin_step(an, 0);
        end_step(an);
    }
    return stored_error(an, err, errlen);
}

double amp_network_flushed(const network *net)
{
    amp_net *an = amp_net_of(net);
    if (!an) return -1;
    return an->ops && an->ops->flushed ? an->ops->flushed(an) : 0.0;
}

int amp_step_skipped(const amp_scaler *s, const network *net)
{
    amp_net *an = amp_net_of(net);
    if (!an || (s && an->scaler != s)) return -1;
    amp_net_sync(an, 1); /* a device decided; this API call may wait for it */
    return an->step_index > 0 && an->skipped;
}

/* What a step's outcome means for a network, decided in one place for every
 * backend: the step's skip message (a gradient overflow, a half layer's
 * forward overflow, a non-finite loss and its cause), the scaler's update
 * (here, or as the device made it) and its message, amp_max_skips as the
 * network's error, and the fallbacks the outcome makes due (fallback.c's
 * rules). It changes no structure: step.c applies the fallbacks due at the
 * step's end, the same boundary on every backend. A host-decided step is
 * settled in step.c's begin_step, a device-decided one when the backend's
 * sync returns its outcome (amp_net_sync).
 */
#include "core.h"
#include "step.h"
#include "network.h" /* get_layer_string */

#include <stdio.h>

/* The largest finite value of a half dtype. */
static double dtype_max(amp_dtype dt)
{
    return dt == AMP_DTYPE_FLOAT16 ? 65504.0 : dt == AMP_DTYPE_BFLOAT16 ? 3.3895313892515355e38
                                                                        : 3.4028234663852886e38;
}

/* "layer 3 [convolutional] overflowed float16 in its forward pass (...)" */
static void describe_forward_overflow(const amp_net *an, char *out, size_t size)
{
    const int k = an->step_origin;
    const amp_dtype dt = an->scaler->opt.dtype;
    snprintf(out, size,
             "layer %d [%s] overflowed %s in its forward pass (%llu values inf or NaN from finite "
             "inputs and parameters; its largest finite magnitude %.6g, %s's largest %.6g)",
             k, get_layer_string(an->net->layers[k].type), amp_dtype_name(dt),
             an->step_origin_scan.nonfinite, (double)an->step_origin_scan.max_finite,
             amp_dtype_name(dt), dtype_max(dt));
}

/* A step skipped for a non-finite loss, the scale left as it is: either a
 * half layer's forward overflow (the forward pass is not scaled, so no loss
 * scale helps) or a data or model problem. amp_max_skips of them in a row
 * stop the run. */
static void loss_skipped(amp_net *an, const amp_step_outcome *o)
{
    amp_scaler *s = an->scaler;
    const layer *l = &an->net->layers[o->loss_layer];
    const int overflow = an->step_origin >= 0 && an->step_origin_overflow;
    if (overflow) an->forward_skips += 1;
    else an->loss_skips += 1;
    an->loss_skips_in_row += 1;
    if (o->take_back_t) *an->net->t -= 1;
    const char *sep = an->step_where[0] ? ", " : "";
    char origin[AMP_MSG_LEN] = "";
    if (overflow) {
        describe_forward_overflow(an, origin, sizeof origin);
        snprintf(an->bad, sizeof an->bad, "%.500s", origin);
        fprintf(stderr,
                "amp: step %llu skipped: %s at iteration %d%s%s; the loss of layer %d [%s] is not "
                "finite as a result (an overflow of the half type, not a data problem: the loss "
                "scale, %g, cannot help, the forward pass is not scaled)\n",
                o->seq, origin, an->step_iteration, sep, an->step_where, o->loss_layer,
                get_layer_string(l->type), o->batch_scale);
    } else {
        /* what the skip was for, as for an overflow (the tensor) */
        snprintf(an->bad, sizeof an->bad, "the loss of layer %d [%s]%s%.400s", o->loss_layer,
                 get_layer_string(l->type), sep, an->step_where);
        if (an->step_origin >= 0)
            snprintf(origin, sizeof origin, "; the first output not finite: layer %d [%s]%s",
                     an->step_origin, get_layer_string(an->net->layers[an->step_origin].type),
                     amp_layer_stores_half(&an->layers[an->step_origin])
                         ? ", whose parameters are not finite"
                         : "");
        fprintf(stderr,
                "amp: step %llu skipped: non-finite loss in layer %d [%s] at iteration %d%s%s (%s, "
                "not an overflow: the loss scale stays %g%s)\n",
                o->seq, o->loss_layer, get_layer_string(l->type), an->step_iteration, sep,
                an->step_where, an->step_cause[0] ? an->step_cause : "a data or model problem",
                o->batch_scale, origin);
    }
    if (o->device_state) {
        s->state = o->state; /* the device left it as it was */
    } else {
        s->pending += 1;
        s->pending_loss += 1;
        if (an->owns_scaler) amp_scaler_apply(s, NULL, 0);
    }
    /* the layer runs in float32 from the next step on (step.c applies it
     * when this step has ended) */
    if (overflow && amp_fallback_due_forward(an, an->step_origin)) return;
    /* A device's outcome arrives a step late: the steps that ran before the
     * layer's fallback took effect overflow alike, and are not skips a
     * fallback has not answered yet. */
    if (overflow && (an->layers[an->step_origin].fell_back || an->layers[an->step_origin].due))
        return;
    if (s->opt.max_skips <= 0 || an->loss_skips_in_row < s->opt.max_skips) return;
    if (overflow)
        amp_net_fail(an, AMP_ERR_NONFINITE,
                     "amp: %ld consecutive steps skipped (amp_max_skips=%ld): %s, last at "
                     "iteration %d; run that layer in float32 (amp=0 in its section of the cfg), "
                     "or train with amp_dtype=bfloat16 (float32's range)",
                     an->loss_skips_in_row, s->opt.max_skips, origin, an->step_iteration);
    else
        amp_net_fail(an, AMP_ERR_NONFINITE,
                     "amp: %ld consecutive steps skipped (amp_max_skips=%ld): the loss of layer "
                     "%d [%s] is not finite, last at iteration %d%s%s; %s: the loss scale (%g) is "
                     "not the cause",
                     an->loss_skips_in_row, s->opt.max_skips, o->loss_layer,
                     get_layer_string(l->type), an->step_iteration, sep, an->step_where,
                     an->step_cause[0] ? an->step_cause
                                       : "check the training data (labels) and the cost layer",
                     s->state.scale);
}

void amp_step_settled(amp_net *an, const amp_step_outcome *o)
{
    amp_scaler *s = an->scaler;
    an->skipped = o->skipped;
    an->bad[0] = 0;
    if (an->error_status == AMP_ERR_NONFINITE) { /* decided again below */
        an->error[0] = 0;
        an->error_status = AMP_OK;
    }
    if (o->loss_layer >= 0) {
        loss_skipped(an, o);
        return;
    }
    an->loss_skips_in_row = 0;
    amp_fallback_due_gradient(an, o->skipped, o->bad_tensor, o->batch_scale);
    if (o->skipped) {
        amp_describe_tensor(an, o->bad_tensor, an->bad, sizeof an->bad);
        if (o->take_back_t) *an->net->t -= 1;
        if (!s->pending_inf) snprintf(s->first_bad, sizeof s->first_bad, "%s", an->bad);
        fprintf(stderr,
                "amp: step %llu skipped: non-finite gradient, first in %s (loss scale %g)\n",
                o->seq, an->bad, o->batch_scale);
    }
    const float before = s->state.scale;
    char err[AMP_MSG_LEN];
    amp_status st = AMP_OK;
    if (o->device_state) { /* the device updated the scale */
        s->state = o->state;
        if (o->skipped) st = amp_scaler_check_skips(s, err, sizeof err);
    } else {
        s->pending += 1;
        s->pending_inf |= o->skipped;
        if (an->owns_scaler) st = amp_scaler_apply(s, err, sizeof err);
    }
    if (st != AMP_OK) amp_net_fail(an, st, "%s", err);
    if (s->state.scale != before)
        fprintf(stderr, "amp: loss scale %g -> %g\n", before, s->state.scale);
}

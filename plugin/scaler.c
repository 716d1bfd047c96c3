/* The loss scaler: one scale shared by the networks that use it, updated once
 * per iteration from the OR of their overflow flags (scale_rule.h, on the
 * host or, for a device-decided step, on the device).
 *
 * The one place for the scaler's invariants (amp_options_invalid: the cfg
 * keys, amp_scaler_create; amp_scale_state_invalid: the state file;
 * amp_scale_state_fit: a state resumed under other options) and for what a
 * step's outcome means (amp_step_settled: the skip message, the scale's
 * update and its message, amp_max_skips).
 */
#include "core.h"
#include "math/half_format.h" /* amp_f32_bits */
#include "network.h" /* get_layer_string */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AMP_STR2(x) #x
#define AMP_STR(x) AMP_STR2(x)

const char *amp_version(void)
{
    return AMP_STR(DARKNET_AMP_VERSION_MAJOR) "." AMP_STR(DARKNET_AMP_VERSION_MINOR) "." AMP_STR(
        DARKNET_AMP_VERSION_PATCH);
}

const char *amp_status_name(amp_status status)
{
    switch (status) {
    case AMP_OK: return "ok";
    case AMP_ERR_INVALID: return "invalid argument or value";
    case AMP_ERR_STATE: return "call out of order";
    case AMP_ERR_IO: return "input/output error";
    case AMP_ERR_FORMAT: return "corrupt or incompatible state file";
    case AMP_ERR_NONFINITE: return "too many consecutive non-finite steps";
    case AMP_ERR_NOMEM: return "out of memory";
    case AMP_ERR_DEVICE: return "GPU error";
    }
    return "unknown status";
}

/* ---- invariants ---- */

const char *amp_options_invalid(const amp_options *o, amp_option_field *field)
{
    amp_option_field f;
    const char *why = NULL;
    if (o->dtype != AMP_DTYPE_FLOAT32 && o->dtype != AMP_DTYPE_FLOAT16 &&
        o->dtype != AMP_DTYPE_BFLOAT16)
        f = AMP_FIELD_DTYPE, why = "unknown dtype";
    else if (!(o->init_scale > 0) || !amp_finite(o->init_scale))
        f = AMP_FIELD_INIT_SCALE, why = "init_scale must be a finite number > 0";
    else if (!(o->growth_factor > 1) || !amp_finite(o->growth_factor))
        f = AMP_FIELD_GROWTH_FACTOR, why = "growth_factor must be a finite number > 1";
    else if (!(o->backoff_factor > 0 && o->backoff_factor < 1))
        f = AMP_FIELD_BACKOFF_FACTOR, why = "backoff_factor must lie in (0, 1)";
    else if (o->growth_interval < 1)
        f = AMP_FIELD_GROWTH_INTERVAL, why = "growth_interval must be >= 1";
    else if (o->hysteresis < 1)
        f = AMP_FIELD_HYSTERESIS, why = "hysteresis must be >= 1";
    else if (!(o->min_scale > 0) || !(o->max_scale >= o->min_scale) || !amp_finite(o->max_scale))
        f = AMP_FIELD_SCALE_BOUNDS, why = "need 0 < min_scale <= max_scale < inf";
    else if (o->dynamic && (o->init_scale < o->min_scale || o->init_scale > o->max_scale))
        f = AMP_FIELD_INIT_IN_BOUNDS, why = "init_scale must lie in [min_scale, max_scale]";
    else if (o->max_skips < 0)
        f = AMP_FIELD_MAX_SKIPS, why = "max_skips must be >= 0";
    else
        return NULL;
    if (field) *field = f;
    return why;
}

const char *amp_scale_state_invalid(const amp_scale_state *st, char *buf, size_t size)
{
    if (!amp_finite(st->scale) || !(st->scale > 0.0f))
        snprintf(buf, size, "scale %g (bits 0x%08x) is not a finite number > 0", (double)st->scale,
                 (unsigned)amp_f32_bits(st->scale));
    else if (st->growth_tracker < 0)
        snprintf(buf, size, "negative growth_tracker %ld", st->growth_tracker);
    else if (st->hysteresis_left < 0)
        snprintf(buf, size, "negative hysteresis_left %d", st->hysteresis_left);
    else if (st->consecutive_skips < 0)
        snprintf(buf, size, "negative consecutive_skips %ld", st->consecutive_skips);
    else if (st->skips > st->steps)
        snprintf(buf, size, "skips %llu > steps %llu", st->skips, st->steps);
    else
        return NULL;
    return buf;
}

void amp_scale_state_fit(amp_scale_state *st, const amp_options *o)
{
    /* A static scale is the cfg's; only the counters come from the file. A
     * dynamic one is kept within this cfg's bounds, which may have changed. */
    if (!o->dynamic) st->scale = o->init_scale;
    if (st->scale < o->min_scale) st->scale = o->min_scale;
    if (st->scale > o->max_scale && o->dynamic) st->scale = o->max_scale;
    if (st->hysteresis_left > o->hysteresis || st->hysteresis_left < 1)
        st->hysteresis_left = o->hysteresis;
}

/* ---- the scaler ---- */

void amp_scaler_setup(amp_scaler *s, const amp_options *o)
{
    memset(s, 0, sizeof *s);
    s->opt = *o;
    s->params.growth_factor = o->growth_factor;
    s->params.backoff_factor = o->backoff_factor;
    s->params.min_scale = o->min_scale;
    s->params.max_scale = o->max_scale;
    s->params.growth_interval = o->growth_interval;
    s->params.hysteresis = o->hysteresis;
    s->params.dynamic = o->dynamic;
    amp_scale_state_init(&s->state, &s->params, o->init_scale);
}

amp_status amp_scaler_create(const amp_options *o, amp_scaler **out, char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(!o || !out, AMP_ERR_INVALID, err, errlen,
                        "amp_scaler_create: NULL argument");
    *out = NULL;
    const char *why = amp_options_invalid(o, NULL);
    AMP_RETURN_ERROR_IF(why, AMP_ERR_INVALID, err, errlen, "amp_scaler_create: %s", why);
    amp_scaler *s = malloc(sizeof *s);
    AMP_RETURN_ERROR_IF(!s, AMP_ERR_NOMEM, err, errlen, "amp_scaler_create: out of memory");
    amp_scaler_setup(s, o);
    *out = s;
    return AMP_OK;
}

void amp_scaler_free(amp_scaler *s)
{
    free(s);
}

float amp_scaler_get_scale(const amp_scaler *s)
{
    return s ? s->state.scale : 0.0f;
}

unsigned long long amp_scaler_steps(const amp_scaler *s)
{
    return s ? s->state.steps : 0;
}

unsigned long long amp_scaler_skips(const amp_scaler *s)
{
    return s ? s->state.skips : 0;
}

/* amp_max_skips consecutive skipped steps: AMP_ERR_NONFINITE with why. */
static amp_status check_max_skips(const amp_scaler *s, char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(s->opt.max_skips > 0 && s->state.consecutive_skips >= s->opt.max_skips,
                        AMP_ERR_NONFINITE, err, errlen,
                        "amp: %ld consecutive steps skipped (amp_max_skips=%ld): gradients are "
                        "not finite, first in %s, at loss scale %g (amp_min_scale %g)",
                        s->state.consecutive_skips, s->opt.max_skips,
                        s->first_bad[0] ? s->first_bad : "an unknown layer", s->state.scale,
                        s->opt.min_scale);
    return AMP_OK;
}

amp_status amp_scaler_apply(amp_scaler *s, char *err, size_t errlen)
{
    int found_inf = s->pending_inf;
    const int only_loss = s->pending_loss == s->pending;
    s->pending = 0;
    s->pending_inf = 0;
    s->pending_loss = 0;
    /* the rule the device runs: every step skipped for its loss leaves the
     * scale as it is (loss_skipped checks amp_max_skips for those) */
    const int skipped = amp_step_decide(&s->state, &s->params, (unsigned)found_inf,
                                        (unsigned)only_loss, 1);
    return skipped && !only_loss ? check_max_skips(s, err, errlen) : AMP_OK;
}

amp_status amp_update(amp_scaler *s, char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(!s, AMP_ERR_INVALID, err, errlen, "amp_update: NULL scaler");
    AMP_RETURN_ERROR_IF(!s->pending, AMP_ERR_STATE, err, errlen,
                        "amp_update: no network was stepped since the last update (call "
                        "amp_step first)");
    return amp_scaler_apply(s, err, errlen);
}

/* ---- a step's outcome ---- */

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
                     an->layers[an->step_origin].precision == AMP_PRECISION_HALF
                         ? ", whose parameters are not finite"
                         : "");
        fprintf(stderr,
                "amp: step %llu skipped: non-finite loss in layer %d [%s] at iteration %d%s%s (%s, "
                "not an overflow: the loss scale stays %g%s)\n",
                o->seq, o->loss_layer, get_layer_string(l->type), an->step_iteration, sep,
                an->step_where, an->step_cause[0] ? an->step_cause : "a data or model problem",
                o->batch_scale, origin);
    }
    if (o->state) {
        s->state = *o->state; /* the device left it as it was */
    } else {
        s->pending += 1;
        s->pending_loss += 1;
        if (an->owns_scaler) amp_scaler_apply(s, NULL, 0);
    }
    /* the layer runs in float32 from the next step on */
    if (overflow && amp_fallback_forward(an, an->step_origin)) return;
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
    amp_fallback_gradient(an, o->skipped, o->bad_tensor, o->batch_scale);
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
    if (o->state) { /* the device updated the scale */
        s->state = *o->state;
        if (o->skipped) st = check_max_skips(s, err, sizeof err);
    } else {
        s->pending += 1;
        s->pending_inf |= o->skipped;
        if (an->owns_scaler) st = amp_scaler_apply(s, err, sizeof err);
    }
    if (st != AMP_OK) amp_net_fail(an, st, "%s", err);
    if (s->state.scale != before)
        fprintf(stderr, "amp: loss scale %g -> %g\n", before, s->state.scale);
}

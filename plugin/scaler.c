/* The loss scaler as arithmetic: one scale shared by the networks that use
 * it, updated once per iteration from the OR of their overflow flags by the
 * update rule (scale_rule.h, the same on the host and on a device), and the
 * scaler's invariants (amp_options_invalid: the cfg keys, amp_scaler_create;
 * amp_scale_state_invalid: the state file; amp_scale_state_fit: a state
 * resumed under other options). Like PyTorch's GradScaler.update(), it
 * touches only its scale and counters: no network, no darknet, no output.
 * What a step's outcome means for a network (its messages, fallbacks and
 * errors) is settle.c's.
 */
#include "core.h"
#include "math/half_format.h" /* amp_f32_bits */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

amp_status amp_scaler_create_options(const amp_options *o, amp_scaler **out, char *err,
                                     size_t errlen)
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

amp_status amp_scaler_check_skips(const amp_scaler *s, char *err, size_t errlen)
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
    return skipped && !only_loss ? amp_scaler_check_skips(s, err, errlen) : AMP_OK;
}

amp_status amp_update(amp_scaler *s, char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(!s, AMP_ERR_INVALID, err, errlen, "amp_update: NULL scaler");
    AMP_RETURN_ERROR_IF(!s->pending, AMP_ERR_STATE, err, errlen,
                        "amp_update: no network was stepped since the last update (call "
                        "amp_step first)");
    return amp_scaler_apply(s, err, errlen);
}

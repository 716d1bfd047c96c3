/* The loss scaler: one scale shared by the networks that use it, updated once
 * per iteration from the OR of their overflow flags (scale_rule.h). */
#include "amp_internal.h"

#include <stdarg.h>
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

int amp_errorf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen) return 0;
    va_start(ap, fmt);
    int n = vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return n;
}

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

static int valid_options(const amp_options *o, char *err, size_t errlen)
{
    const char *why = NULL;
    if (o->dtype != AMP_DTYPE_FLOAT32 && o->dtype != AMP_DTYPE_FLOAT16 &&
        o->dtype != AMP_DTYPE_BFLOAT16)
        why = "unknown dtype";
    else if (!(o->init_scale > 0) || !amp_finite(o->init_scale))
        why = "init_scale must be a finite number > 0";
    else if (!(o->growth_factor > 1) || !amp_finite(o->growth_factor))
        why = "growth_factor must be a finite number > 1";
    else if (!(o->backoff_factor > 0 && o->backoff_factor < 1))
        why = "backoff_factor must lie in (0, 1)";
    else if (o->growth_interval < 1)
        why = "growth_interval must be >= 1";
    else if (o->hysteresis < 1)
        why = "hysteresis must be >= 1";
    else if (!(o->min_scale > 0) || !(o->max_scale >= o->min_scale) || !amp_finite(o->max_scale))
        why = "need 0 < min_scale <= max_scale < inf";
    else if (o->dynamic && (o->init_scale < o->min_scale || o->init_scale > o->max_scale))
        why = "init_scale must lie in [min_scale, max_scale]";
    else if (o->max_skips < 0)
        why = "max_skips must be >= 0";
    if (why) amp_errorf(err, errlen, "amp_scaler_create: %s", why);
    return why == NULL;
}

amp_status amp_scaler_create(const amp_options *o, amp_scaler **out, char *err, size_t errlen)
{
    if (!o || !out) {
        amp_errorf(err, errlen, "amp_scaler_create: NULL argument");
        return AMP_ERR_INVALID;
    }
    *out = NULL;
    if (!valid_options(o, err, errlen)) return AMP_ERR_INVALID;
    amp_scaler *s = malloc(sizeof *s);
    if (!s) {
        amp_errorf(err, errlen, "amp_scaler_create: out of memory");
        return AMP_ERR_NOMEM;
    }
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

amp_status amp_scaler_apply(amp_scaler *s, char *err, size_t errlen)
{
    int found_inf = s->pending_inf;
    s->pending = 0;
    s->pending_inf = 0;
    amp_scale_update(&s->state, &s->params, found_inf);
    if (found_inf && s->opt.max_skips > 0 && s->state.consecutive_skips >= s->opt.max_skips) {
        amp_errorf(err, errlen,
                   "amp: %ld consecutive steps skipped (amp_max_skips=%ld): gradients are not "
                   "finite, first in %s, at loss scale %g (amp_min_scale %g)",
                   s->state.consecutive_skips, s->opt.max_skips,
                   s->first_bad[0] ? s->first_bad : "an unknown layer", s->state.scale,
                   s->opt.min_scale);
        return AMP_ERR_NONFINITE;
    }
    return AMP_OK;
}

amp_status amp_update(amp_scaler *s, char *err, size_t errlen)
{
    if (!s) {
        amp_errorf(err, errlen, "amp_update: NULL scaler");
        return AMP_ERR_INVALID;
    }
    if (!s->pending) {
        amp_errorf(err, errlen, "amp_update: no network was stepped since the last update "
                                "(call amp_step first)");
        return AMP_ERR_STATE;
    }
    return amp_scaler_apply(s, err, errlen);
}

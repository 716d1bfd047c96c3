/* The loss-scale update rule and the step's skip decision, shared by the
 * host's scaler (plugin/scaler.c, plugin/step.c) and the CUDA kernel that
 * decides on the device (cuda/scale_update.cu): plain C, no libc calls beyond
 * what CUDA device code also has, every function static inline and marked
 * AMP_HD so that nvcc compiles it for both.
 *
 * PyTorch GradScaler's rule (torch/amp/grad_scaler.py, _amp_update_scale_):
 * on an overflow the scale backs off and the good-step tracker resets; after
 * growth_interval good steps in a row it grows, if the grown value is finite
 * (the tracker resets either way). Added here: hysteresis (back off only after
 * `hysteresis` overflows in a row, as DeepSpeed's delayed shift with
 * consecutive_hysteresis), a floor for backoff (clamped to min_scale) and a
 * ceiling for growth (a growth that would exceed max_scale is refused).
 */
#ifndef AMP_SCALE_RULE_H
#define AMP_SCALE_RULE_H

#include "hd.h"

typedef struct amp_scale_params {
    float growth_factor, backoff_factor, min_scale, max_scale;
    long growth_interval;
    int hysteresis;
    int dynamic;
} amp_scale_params;

typedef struct amp_scale_state {
    float scale;
    long growth_tracker;         /* good steps in a row since the last change */
    int hysteresis_left;         /* overflows still tolerated before a backoff */
    long consecutive_skips;
    unsigned long long steps, skips;
} amp_scale_state;

/* Every field of a and b equal. Not memcmp: the struct has padding (after
 * scale and after hysteresis_left) that assignment and amp_scale_state_init
 * leave undefined. */
AMP_HD static inline int amp_scale_state_same(const amp_scale_state *a, const amp_scale_state *b)
{
    return a->scale == b->scale && a->growth_tracker == b->growth_tracker &&
           a->hysteresis_left == b->hysteresis_left &&
           a->consecutive_skips == b->consecutive_skips && a->steps == b->steps &&
           a->skips == b->skips;
}

/* x is finite: not inf, not NaN (inf - inf and NaN - NaN are NaN). Needs no
 * math.h, so host and device compile the same expression; like isfinite() it
 * must not be built with -ffinite-math-only (the plugin never is). */
AMP_HD static inline int amp_finite(float x)
{
    return x - x == 0.0f;
}

AMP_HD static inline void amp_scale_state_init(amp_scale_state *s, const amp_scale_params *p,
                                               float init_scale)
{
    s->scale = init_scale;
    s->growth_tracker = 0;
    s->hysteresis_left = p->hysteresis;
    s->consecutive_skips = 0;
    s->steps = 0;
    s->skips = 0;
}

/* One iteration's update from found_inf (any network overflowed). Returns 1
 * when the scale changed. */
AMP_HD static inline int amp_scale_update(amp_scale_state *s, const amp_scale_params *p,
                                          int found_inf)
{
    float old = s->scale;
    s->steps += 1;
    if (found_inf) {
        s->skips += 1;
        s->consecutive_skips += 1;
        s->growth_tracker = 0;
        if (p->dynamic) {
            s->hysteresis_left -= 1;
            if (s->hysteresis_left <= 0) {
                float backed = s->scale * p->backoff_factor;
                s->scale = backed > p->min_scale ? backed : p->min_scale;
                s->hysteresis_left = p->hysteresis;
            }
        }
    } else {
        s->consecutive_skips = 0;
        s->hysteresis_left = p->hysteresis;
        if (p->dynamic) {
            s->growth_tracker += 1;
            if (s->growth_tracker >= p->growth_interval) {
                float grown = s->scale * p->growth_factor;
                if (amp_finite(grown) && grown <= p->max_scale) s->scale = grown;
                s->growth_tracker = 0;
            }
        }
    }
    return s->scale != old;
}

/* One step's decision from its flags: found (a gradient not finite after
 * unscaling) and loss (a cost layer's loss or delta not finite before
 * scaling). A non-finite loss is a data or model problem: the step is skipped
 * and the scaler left exactly as it is, whatever found says. Otherwise the
 * step is skipped on an overflow and, with update_scale, the scale updated.
 * Returns 1 when the step is skipped. */
AMP_HD static inline int amp_step_decide(amp_scale_state *s, const amp_scale_params *p,
                                         unsigned int found, unsigned int loss, int update_scale)
{
    if (loss) return 1;
    if (update_scale) amp_scale_update(s, p, found != 0);
    return found != 0;
}

#endif

/* amp_fallback: a half layer that overflows its dtype where no loss scale
 * helps runs in float32 from the next step on (docs/design.md, "Automatic
 * fallback"):
 * - its forward pass overflowed: a non-finite loss whose first non-finite
 *   output is a half layer's, from finite inputs and parameters (step.c finds
 *   it, scaler.c settles the step); the forward pass is not scaled, so a
 *   lower scale cannot help;
 * - or its gradients were the first not finite in amp_fallback_after steps in
 *   a row skipped at the minimum loss scale: the scale cannot go lower.
 * The backend puts the layer on darknet's float32 code (layer_fallback), the
 * activation plan is made again around it (the tensors it reads and writes
 * are float32 now), and darknet's slots are pointed again. The state file
 * keeps the set, so a resume starts with it (hooks.c).
 */
#include "backend.h"
#include "network.h" /* get_layer_string */
#include "state_file.h"

#include <stdio.h>

static const char *layer_name(const amp_net *an, int k)
{
    return get_layer_string(an->net->layers[k].type);
}

static amp_status fall_back(amp_net *an, int k, amp_fallback_why why, int earlier, char *err,
                            size_t errlen)
{
    amp_layer *al = &an->layers[k];
    layer *l = &an->net->layers[k];
    if (al->precision != AMP_PRECISION_HALF) return AMP_OK;
    AMP_RETURN_ERROR_IF(!an->ops->layer_fallback, AMP_ERR_INVALID, err, errlen,
                        "amp: layer %d [%s]: the %s backend cannot run a half layer in float32 "
                        "during training (amp_fallback); give it amp=0 in the cfg",
                        k, layer_name(an, k), an->ops->name);
    const int replan = an->plan_on && an->ops->activations_release;
    if (replan) an->ops->activations_release(an);
    AMP_FORWARD_IF_ERROR(an->ops->layer_fallback(al, l, err, errlen));
    al->precision = AMP_PRECISION_FELL_BACK;
    al->fell_back = why;
    al->fell_back_earlier = earlier;
    an->fallbacks += !earlier;
    amp_plan_make(an);
    if (replan) AMP_FORWARD_IF_ERROR(an->ops->activations(an, err, errlen));
    amp_point_slots(an);
    return AMP_OK;
}

amp_status amp_fall_back(amp_net *an, int k, amp_fallback_why why, char *err, size_t errlen)
{
    return fall_back(an, k, why, 0, err, errlen);
}

static int fall_back_or_fail(amp_net *an, int k, amp_fallback_why why, const char *because)
{
    char err[AMP_MSG_LEN];
    const amp_status st = amp_fall_back(an, k, why, err, sizeof err);
    if (st != AMP_OK) {
        amp_net_fail(an, st, "%s", err);
        return 0;
    }
    fprintf(stderr, "amp: layer %d [%s] runs in float32 from the next step on: %s "
                    "(amp_fallback; amp_fallback=0 keeps it in %s)\n",
            k, layer_name(an, k), because, amp_dtype_name(an->scaler->opt.dtype));
    return 1;
}

/* The rules apply where the backend can run a half layer in float32 (not
 * yet the CUDA backend: its steps go on as before, amp_max_skips applies). */
static int can_fall_back(const amp_net *an, int k)
{
    return an->scaler->opt.fallback && an->ops->layer_fallback && k >= 0 &&
           an->layers[k].precision == AMP_PRECISION_HALF;
}

int amp_fallback_forward(amp_net *an, int k)
{
    if (!can_fall_back(an, k)) return 0;
    char because[AMP_MSG_LEN];
    snprintf(because, sizeof because, "its forward pass overflowed %s, which no loss scale "
                                      "changes (the forward pass is not scaled)",
             amp_dtype_name(an->scaler->opt.dtype));
    return fall_back_or_fail(an, k, AMP_FELL_FORWARD, because);
}

void amp_fallback_gradient(amp_net *an, int skipped, int bad_tensor, float batch_scale)
{
    const amp_options *o = &an->scaler->opt;
    const int k = skipped && bad_tensor >= 0 ? an->tensors[bad_tensor].layer : -1;
    if (!can_fall_back(an, k) || batch_scale > o->min_scale) {
        an->grad_suspect = -1;
        an->grad_suspect_steps = 0;
        return;
    }
    an->grad_suspect_steps = k == an->grad_suspect ? an->grad_suspect_steps + 1 : 1;
    an->grad_suspect = k;
    if (an->grad_suspect_steps < o->fallback_after) return;
    char because[AMP_MSG_LEN];
    snprintf(because, sizeof because, "its gradients were the first not finite in %ld steps in a "
                                      "row skipped at the minimum loss scale, %g",
             an->grad_suspect_steps, batch_scale);
    an->grad_suspect = -1;
    an->grad_suspect_steps = 0;
    (void)fall_back_or_fail(an, k, AMP_FELL_GRADIENT, because);
}

void amp_fallback_report(const amp_net *an, FILE *out)
{
    int earlier = 0;
    for (int k = 0; k < an->net->n; ++k)
        earlier += an->layers[k].precision == AMP_PRECISION_FELL_BACK &&
                   an->layers[k].fell_back_earlier;
    if (!an->fallbacks && !earlier) return;
    fprintf(out, "amp: %d layer%s fell back to float32 in this run", an->fallbacks,
            an->fallbacks == 1 ? "" : "s");
    if (earlier) fprintf(out, ", %d in an earlier run", earlier);
    fprintf(out, "; layer precision at the end:\n");
    amp_policy_print(an, out);
}

void amp_fallback_save(const amp_net *an, amp_state_extra *x)
{
    x->forward_skips = an->forward_skips;
    x->loss_skips = an->loss_skips;
    x->nfallback = 0;
    for (int k = 0; k < an->net->n && x->nfallback < AMP_STATE_MAX_FALLBACK; ++k) {
        if (an->layers[k].precision != AMP_PRECISION_FELL_BACK) continue;
        x->fallback[x->nfallback].layer = k;
        x->fallback[x->nfallback].why = an->layers[k].fell_back;
        x->nfallback += 1;
    }
}

amp_status amp_fallback_resume(amp_net *an, const amp_state_extra *x, const char *from, char *err,
                               size_t errlen)
{
    an->forward_skips = x->forward_skips;
    an->loss_skips = x->loss_skips;
    if (!x->nfallback) return AMP_OK;
    if (!an->scaler->opt.fallback) {
        fprintf(stderr, "amp: %s lists %d layer%s put back to float32 in an earlier run; "
                        "amp_fallback=0: %s in %s again\n",
                from, x->nfallback, x->nfallback == 1 ? "" : "s",
                x->nfallback == 1 ? "it runs" : "they run", amp_dtype_name(an->scaler->opt.dtype));
        return AMP_OK;
    }
    int kept = 0;
    for (int i = 0; i < x->nfallback; ++i) {
        const int k = x->fallback[i].layer;
        if (k >= an->net->n) {
            fprintf(stderr, "amp: %s: layer %d fell back to float32 in an earlier run, but %s has "
                            "%d layers: ignored\n",
                    from, k, an->cfgfile, an->net->n);
            continue;
        }
        if (an->layers[k].precision != AMP_PRECISION_HALF) continue; /* float32 anyway */
        AMP_FORWARD_IF_ERROR(
            fall_back(an, k, (amp_fallback_why)x->fallback[i].why, 1, err, errlen));
        kept += 1;
    }
    if (kept)
        fprintf(stderr, "amp: %d layer%s run%s in float32 as in the run that saved %s "
                        "(amp_fallback)\n",
                kept, kept == 1 ? "" : "s", kept == 1 ? "s" : "", from);
    return AMP_OK;
}

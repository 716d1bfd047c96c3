/* amp_fallback: a half layer that overflows its dtype where no loss scale
 * helps runs in float32 from the next step on (docs/design.md, "Automatic
 * fallback"):
 * - its forward pass overflowed: a non-finite loss whose first non-finite
 *   output is a half layer's, from finite inputs and parameters (step.c finds
 *   it, scaler.c settles the step); the forward pass is not scaled, so a
 *   lower scale cannot help;
 * - or its gradients were the first not finite in amp_fallback_after steps in
 *   a row skipped at the minimum loss scale: the scale cannot go lower;
 * - or amp_probe found its output beyond the dtype's bound (probe.c).
 * A data-movement layer running its half form (plan.c's region) whose
 * output overflows (a shortcut's sum: two finite halves, an infinite one)
 * falls back by the first rule too: it leaves the region, and runs
 * darknet's float32 layer on float32 tensors.
 * A rule makes the layer due and says so (settle.c and probe.c call the
 * rules as a step is settled); amp_fallback_apply carries out what is due,
 * when step.c chooses (after the step's end): the backend puts the layer on
 * darknet's float32 code (layer_fallback), and the activation plan is made
 * again around it (the tensors it reads and writes are float32 now); step.c
 * then points darknet's slots again. The state file keeps the set, so a
 * resume starts with it (hooks.c).
 */
#include "backend.h"
#include "step.h"
#include "network.h" /* get_layer_string */
#include "state_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *layer_name(const amp_net *an, int k)
{
    return get_layer_string(an->net->layers[k].type);
}

/* Layer k due to fall back for why, with its line said (earlier: a layer
 * that fell back in the run a state file was saved by, said by the caller). */
static void mark(amp_net *an, int k, amp_fallback_why why, int earlier, const char *because)
{
    amp_layer *al = &an->layers[k];
    if (!al->due) an->fallbacks_due += 1;
    al->due = why;
    al->due_earlier = earlier;
    if (because)
        fprintf(stderr, "amp: layer %d [%s] runs in float32 from the next step on: %s "
                        "(amp_fallback; amp_fallback=0 keeps it in %s)\n",
                k, layer_name(an, k), because, amp_dtype_name(an->scaler->opt.dtype));
}

amp_status amp_fallback_apply(amp_net *an, char *err, size_t errlen)
{
    if (!an->fallbacks_due) return AMP_OK;
    an->fallbacks_due = 0;
    const int replan = an->plan_on && an->ops->activations_release;
    if (replan) an->ops->activations_release(an);
    for (int k = 0; k < an->net->n; ++k) {
        amp_layer *al = &an->layers[k];
        const amp_fallback_why why = al->due;
        al->due = AMP_FELL_NONE;
        if (!why) continue;
        if (al->precision != AMP_PRECISION_HALF) { /* a half form: out of the region */
            if (al->io != AMP_IO_HALF || !an->ops->activations_release) continue;
            al->io = AMP_IO_FLOAT32;
            al->fell_back = why;
            al->fell_back_earlier = al->due_earlier;
            an->fallbacks += !al->due_earlier;
            continue;
        }
        AMP_RETURN_ERROR_IF(!an->ops->layer_fallback, AMP_ERR_INVALID, err, errlen,
                            "amp: layer %d [%s]: the %s backend cannot run a half layer in "
                            "float32 during training (amp_fallback); give it amp=0 in the cfg",
                            k, layer_name(an, k), an->ops->name);
        AMP_FORWARD_IF_ERROR(an->ops->layer_fallback(al, &an->net->layers[k], err, errlen));
        al->precision = AMP_PRECISION_FELL_BACK;
        al->fell_back = why;
        al->fell_back_earlier = al->due_earlier;
        an->fallbacks += !al->due_earlier;
    }
    amp_plan_make(an);
    if (replan) AMP_FORWARD_IF_ERROR(an->ops->activations(an, err, errlen));
    return AMP_OK;
}

int amp_layer_stores_half(const amp_layer *al)
{
    return al->precision == AMP_PRECISION_HALF || al->region;
}

int amp_fallback_possible(const amp_net *an, int k)
{
    if (!an->scaler->opt.fallback || k < 0) return 0;
    const amp_layer *al = &an->layers[k];
    if (al->precision == AMP_PRECISION_HALF) return an->ops->layer_fallback != NULL;
    /* a half form: the plan made again without it */
    return al->region && an->ops->activations_release != NULL;
}

int amp_fallback_due(amp_net *an, int k, amp_fallback_why why, const char *because)
{
    if (!amp_fallback_possible(an, k)) return 0;
    mark(an, k, why, 0, because);
    return 1;
}

int amp_fallback_due_forward(amp_net *an, int k)
{
    if (!amp_fallback_possible(an, k)) return 0;
    char because[AMP_MSG_LEN];
    snprintf(because, sizeof because, "its forward pass overflowed %s, which no loss scale "
                                      "changes (the forward pass is not scaled)",
             amp_dtype_name(an->scaler->opt.dtype));
    mark(an, k, AMP_FELL_FORWARD, 0, because);
    return 1;
}

void amp_fallback_due_gradient(amp_net *an, int skipped, int bad_tensor, float batch_scale)
{
    const amp_options *o = &an->scaler->opt;
    const int k = skipped && bad_tensor >= 0 ? an->tensors[bad_tensor].layer : -1;
    if (!amp_fallback_possible(an, k) || batch_scale > o->min_scale) {
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
    mark(an, k, AMP_FELL_GRADIENT, 0, because);
}

void amp_fallback_report(const amp_net *an, FILE *out)
{
    int earlier = 0;
    for (int k = 0; k < an->net->n; ++k)
        earlier += an->layers[k].fell_back && an->layers[k].fell_back_earlier;
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
        if (!an->layers[k].fell_back) continue;
        x->fallback[x->nfallback].layer = k;
        x->fallback[x->nfallback].why = an->layers[k].fell_back;
        x->nfallback += 1;
    }
}

int amp_fallback_resume(amp_net *an, const amp_state_extra *x, const char *from)
{
    an->forward_skips = x->forward_skips;
    an->loss_skips = x->loss_skips;
    if (!x->nfallback) return 0;
    if (!an->scaler->opt.fallback) {
        fprintf(stderr, "amp: %s lists %d layer%s put back to float32 in an earlier run; "
                        "amp_fallback=0: %s in %s again\n",
                from, x->nfallback, x->nfallback == 1 ? "" : "s",
                x->nfallback == 1 ? "it runs" : "they run", amp_dtype_name(an->scaler->opt.dtype));
        return 0;
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
        /* a half layer, or a half form (in the region or not: the plan may
         * be off in this run, and on in a later one) */
        if (an->layers[k].precision != AMP_PRECISION_HALF && an->layers[k].io != AMP_IO_HALF)
            continue; /* float32 anyway */
        mark(an, k, (amp_fallback_why)x->fallback[i].why, 1, NULL);
        kept += 1;
    }
    return kept;
}

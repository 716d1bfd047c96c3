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
#include "dist.h"
#include "state_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- amp_probe ---- */

/* 32 units of the dtype's rounding (2^-11 float16, 2^-8 bfloat16): a half
 * layer rounds its input, weights and output once each, and sums in float32,
 * so its output's relative 2-norm difference from float32's is a few units
 * (the embedded detector: at most 1.7 float16, 1.5 bfloat16); 32 leaves room
 * for cancellation, and a layer past it has lost more than its rounding to
 * the half type: values out of its range (overflow, or underflow into its
 * subnormals). */
double amp_probe_bound(amp_dtype dtype)
{
    return 32.0 * (dtype == AMP_DTYPE_BFLOAT16 ? 0x1p-8 : 0x1p-11);
}

static int beyond(const amp_layer *al, double bound)
{
    return al->probed && (isinf(al->probe_rel) || al->probe_rel > bound);
}

void amp_probe_forward(amp_net *an, amp_layer *al, layer l, network net)
{
    double rel = 0;
    al->probed = an->ops->probe_forward(al, l, net, &rel) == 0;
    al->probe_rel = rel;
}

static int worse(const void *a, const void *b)
{
    const amp_layer *x = *(amp_layer *const *)a, *y = *(amp_layer *const *)b;
    const double u = isnan(x->probe_rel) ? -1 : x->probe_rel, v = isnan(y->probe_rel) ? -1 : y->probe_rel;
    return u < v ? 1 : u > v ? -1 : x->index - y->index;
}

static void probe_report(amp_net *an)
{
    const amp_dtype dt = an->scaler->opt.dtype;
    const double bound = amp_probe_bound(dt);
    amp_layer **v = malloc(sizeof *v * (size_t)an->net->n);
    if (!v) return;
    int n = 0, over = 0;
    for (int k = 0; k < an->net->n; ++k)
        if (an->layers[k].probed) {
            v[n++] = &an->layers[k];
            over += beyond(&an->layers[k], bound);
        }
    qsort(v, (size_t)n, sizeof *v, worse);
    fprintf(stderr, "amp: probe (amp_probe=1): %d half layers' outputs on the first batch against "
                    "float32 on the same input, relative 2-norm difference, bound %.3g for %s; "
                    "the worst:\n",
            n, bound, amp_dtype_name(dt));
    for (int i = 0; i < n && (i < 5 || beyond(v[i], bound)); ++i) {
        const amp_layer *al = v[i];
        fprintf(stderr, "amp:   layer %d [%s] %.3g%s\n", al->index, layer_name(an, al->index),
                al->probe_rel,
                isnan(al->probe_rel)   ? " (float32's output is not finite either)"
                : isinf(al->probe_rel) ? " (not finite: the half type overflowed)"
                : al->probe_rel > bound ? " (beyond the bound)"
                                        : "");
    }
    if (over)
        fprintf(stderr, "amp: probe: %d layer%s beyond the bound: %s\n", over, over == 1 ? "" : "s",
                an->scaler->opt.fallback ? "float32 from the next step on (amp_fallback)"
                                         : "kept in half (amp_fallback=0)");
    free(v);
}

static void probe_apply(amp_net *an)
{
    const double bound = amp_probe_bound(an->scaler->opt.dtype);
    const int n = an->net->n;
    unsigned long long *flag = calloc((size_t)n * 3, sizeof *flag);
    if (!flag) return;
    for (int k = 0; k < n; ++k) flag[k] = (unsigned long long)beyond(&an->layers[k], bound);
    /* a data-parallel launch: a layer beyond the bound on any process */
    if (an->comm && an->comm->minmax_u64(flag, flag + n, flag + 2 * n, n) == 0)
        memcpy(flag, flag + 2 * n, sizeof *flag * (size_t)n);
    for (int k = 0; k < n && an->scaler->opt.fallback; ++k) {
        if (!flag[k] || !can_fall_back(an, k)) continue;
        char because[AMP_MSG_LEN];
        if (an->layers[k].probed)
            snprintf(because, sizeof because, "amp_probe found its output %.3g from float32's on "
                                              "the first batch (bound %.3g)",
                     an->layers[k].probe_rel, bound);
        else
            snprintf(because, sizeof because, "amp_probe found it beyond the bound on another "
                                              "process");
        if (!fall_back_or_fail(an, k, AMP_FELL_PROBE, because)) break;
    }
    free(flag);
}

void amp_probe_end(amp_net *an)
{
    an->probe_on = 0;
    probe_report(an);
    probe_apply(an);
    amp_point_slots(an); /* the probe's wrappers off */
}

/* amp_probe=1: on the first batch, every half layer's forward is run beside
 * darknet's float32 forward of the same input (the backend's probe_forward),
 * and their outputs' relative 2-norm difference is kept; when that step has
 * ended, the worst layers are said against the dtype's bound, and those
 * beyond it are made due to fall back (fallback.c), which step.c applies.
 */
#include "backend.h"
#include "step.h"
#include "dist.h" /* amp_comm */
#include "network.h" /* get_layer_string */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *layer_name(const amp_net *an, int k)
{
    return get_layer_string(an->net->layers[k].type);
}

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
        if (!flag[k] || !amp_fallback_possible(an, k)) continue;
        char because[AMP_MSG_LEN];
        if (an->layers[k].probed)
            snprintf(because, sizeof because, "amp_probe found its output %.3g from float32's on "
                                              "the first batch (bound %.3g)",
                     an->layers[k].probe_rel, bound);
        else
            snprintf(because, sizeof because, "amp_probe found it beyond the bound on another "
                                              "process");
        amp_fallback_due(an, k, AMP_FELL_PROBE, because);
    }
    free(flag);
}

void amp_probe_end(amp_net *an)
{
    an->probe_on = 0;
    probe_report(an);
    probe_apply(an); /* step.c applies them, and takes the probe's wrappers off */
}

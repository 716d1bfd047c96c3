/* Which form a convolution takes through oneDNN: its own convolution (the
 * direct form) or im2col + matmul, as DARKNET_AMP_CONV asks: timed, both
 * timed once per shape on scratch arrays, the faster kept, with a margin
 * and the rule for close calls; rule, by the layer's shape alone, so that a
 * seeded run repeats (auto: rule in a seeded run, timed otherwise).
 */
#include "onednn.h"

#include <stdlib.h>
#include <string.h>

/* oneDNN's reference kernels ("ref:any") are slower than darknet's own GEMM:
 * in auto mode a layer only goes to oneDNN with optimised ones. */
static int is_reference(const char *impl) { return strncmp(impl, "ref", 3) == 0; }

int amp_dnnl_has_reference(const amp_dnnl_conv *d)
{
    return is_reference(d->impl[0]) || is_reference(d->impl[1]) || is_reference(d->impl[2]);
}

/* Maps of at most this many positions per image are timed both ways in auto
 * mode; on larger ones oneDNN's convolution runs near the GEMM peak (400-680
 * GFLOP/s from 10 x 10 up in yolov3-tiny at 160 px, against 120-250 on 5 x 5;
 * docs/benchmarks.md), and im2col's buffer would be size^2 times the input. */
#define AMP_MATMUL_MAX_POSITIONS 1024

/* Seconds of one forward and backward of d (the weights converted, as in a
 * training step) on zero-filled scratch arrays: darknet's own arrays and
 * statistics are not touched. < 0 when a primitive failed. */
static double time_once(amp_layer *al, amp_dnnl_conv *d, const layer *l, float *scratch)
{
    const size_t nx = (size_t)l->batch * l->inputs, ny = (size_t)l->batch * l->outputs;
    layer t = *l;
    network n = {0};
    n.input = scratch;
    n.delta = scratch + nx;
    t.output = n.delta + nx;
    t.delta = t.output + ny;
    t.weights = t.delta + ny;
    t.weight_updates = t.weights + l->nweights;
    d->w_fwd_version = d->w_bwd_version = al->owner->weights_version + 1;
    const double t0 = amp_clock();
    const int ok = amp_dnnl_forward_core(al, d, &t, n.input) == AMP_OK &&
                   amp_dnnl_gradients(al, d, t, n) == AMP_OK;
    const double dt = amp_clock() - t0;
    d->w_fwd_version = d->w_bwd_version = 0;
    return ok ? dt : -1;
}

/* The best of three timings of each of a and b, after a warm-up, taken in
 * turn (a, b, a, b, ...) so that a change in the machine's load falls on both. */
static void time_both(amp_layer *al, amp_dnnl_conv *a, amp_dnnl_conv *b, const layer *l,
                      double *ta, double *tb)
{
    *ta = *tb = -1;
    const size_t n = 2 * ((size_t)l->batch * (l->inputs + l->outputs) + l->nweights);
    float *scratch = calloc(n, sizeof *scratch);
    if (!scratch) return;
    double best[2] = {-1, -1};
    int failed[2] = {0, 0};
    amp_dnnl_conv *form[2] = {a, b};
    for (int i = 0; i < 4; ++i) /* 0: the warm-up */
        for (int k = 0; k < 2; ++k) {
            if (failed[k]) continue;
            const double t = time_once(al, form[k], l, scratch);
            failed[k] = t < 0;
            if (failed[k]) best[k] = -1;
            else if (i && (best[k] < 0 || t < best[k])) best[k] = t;
        }
    free(scratch);
    *ta = best[0];
    *tb = best[1];
}

/* The rule: im2col + matmul for a kernel larger than 1 x 1 on a map of at
 * most AMP_MATMUL_SURE_POSITIONS positions per image, oneDNN's convolution
 * otherwise. What the timings chose on every CPU measured (docs/cfg.md):
 * on a small map oneDNN's convolution leaves most of its vector lanes or
 * threads idle, while im2col's matrix is small; a 1 x 1 kernel needs no
 * im2col, and oneDNN's convolution of it ran 1.5-2x faster than a matmul
 * with its reorders. It decides DARKNET_AMP_CONV=rule, auto in a seeded run,
 * and the timings' close calls. */
#define AMP_MATMUL_SURE_POSITIONS 32

static int rule_matmul(const layer *l)
{
    return l->size > 1 && l->out_h * l->out_w <= AMP_MATMUL_SURE_POSITIONS;
}

/* A form wins on timing only when it is faster by this factor; closer
 * calls go by the rule, so that the choice, and with it the order of
 * float32 sums and the training trajectory, flips less with the machine's
 * load (it still can: a seeded run takes the rule throughout). */
#define AMP_FORM_MARGIN 1.25

/* DARKNET_AMP_CONV=timed (auto unseeded): both forms built and timed, the
 * faster kept in d (the direct one already there, with status st); =rule
 * (timed 0): the rule's form kept without timing. The choice recorded. */
static amp_status choose(amp_layer *al, amp_dnnl_conv *d, const layer *l, amp_status st,
                         int timed, char *why, size_t whylen)
{
    const cpu_net *cn = cpu_net_of(al->owner);
    amp_dnnl_conv *m = calloc(1, sizeof *m);
    AMP_RETURN_ERROR_IF(!m, AMP_ERR_NOMEM, why, whylen, "out of memory");
    m->dt = d->dt;
    m->rounded = d->rounded;
    m->user_in = d->user_in;
    m->user_out = d->user_out;
    char whym[AMP_MSG_LEN];
    /* the rule's direct form, which runs: no matmul to build */
    const int direct_by_rule = !timed && st == AMP_OK && !rule_matmul(l);
    amp_status sm = direct_by_rule ? AMP_ERR_INVALID
                                   : amp_dnnl_mm_build(m, cn->dnnl->engine, l, whym, sizeof whym);
    if (sm == AMP_OK && cn->path == AMP_CPU_AUTO && amp_dnnl_has_reference(m)) {
        amp_dnnl_release(m);
        sm = AMP_ERR_INVALID;
    }
    double td = -1, tm = -1;
    if (timed && st == AMP_OK && sm == AMP_OK) {
        time_both(al, d, m, l, &td, &tm);
        /* the arena grew for both forms (the losing one's windows can be the
         * largest buffers of all): given back, it grows again to what the
         * forms that run need */
        cpu_net *cnw = cpu_net_of(al->owner);
        amp_cpu_unmap(cnw->arena, cnw->arena_bytes);
        cnw->arena = NULL;
        cnw->arena_bytes = 0;
    }
    int use_mm = sm == AMP_OK && (st != AMP_OK || (tm >= 0 && td < 0));
    if (sm == AMP_OK && st == AMP_OK && (!timed || (tm >= 0 && td >= 0)))
        use_mm = !timed                      ? rule_matmul(l)
                 : tm * AMP_FORM_MARGIN < td ? 1
                 : td * AMP_FORM_MARGIN < tm ? 0
                                             : rule_matmul(l);
    amp_dnnl_choice keep = d->choice;
    if (use_mm) {
        amp_dnnl_release(d);
        *d = *m;
        st = AMP_OK;
    } else {
        amp_dnnl_release(m);
    }
    free(m);
    d->choice = keep;
    if (st == AMP_OK && keep.n < AMP_DNNL_CHOICES) {
        d->choice.shape[keep.n].batch = l->batch;
        d->choice.shape[keep.n].h = l->h;
        d->choice.shape[keep.n].w = l->w;
        d->choice.shape[keep.n].matmul = use_mm;
        d->choice.shape[keep.n].t_direct = td;
        d->choice.shape[keep.n].t_matmul = tm;
        d->choice.n++;
    }
    return st;
}

/* The primitives of l's kind for its current shape; a convolution in the
 * form DARKNET_AMP_CONV asks for, or chose before for this shape. */
amp_status amp_dnnl_layer_build(amp_layer *al, amp_dnnl_conv *d, const layer *l, char *why,
                                size_t whylen)
{
    const cpu_net *cn = cpu_net_of(al->owner);
    const dnnl_engine_t e = cn->dnnl->engine;
    if (l->type != CONVOLUTIONAL) return amp_dnnl_gemm_layer_build(d, e, l, why, whylen);
    if (cn->conv_form == AMP_CONV_MATMUL && l->groups == 1)
        return amp_dnnl_mm_build(d, e, l, why, whylen);
    if (cn->conv_form == AMP_CONV_TIMED || cn->conv_form == AMP_CONV_RULE)
        for (int i = 0; i < d->choice.n; ++i)
            if (d->choice.shape[i].batch == l->batch && d->choice.shape[i].h == l->h &&
                d->choice.shape[i].w == l->w)
                return d->choice.shape[i].matmul ? amp_dnnl_mm_build(d, e, l, why, whylen)
                                                 : amp_dnnl_conv_build(d, e, l, why, whylen);
    amp_status st = amp_dnnl_conv_build(d, e, l, why, whylen);
    if (cn->conv_form == AMP_CONV_DIRECT || l->groups != 1) return st;
    /* timed or rule: a small map, or a shape oneDNN's convolution cannot run */
    if (st == AMP_OK && (l->out_h * l->out_w > AMP_MATMUL_MAX_POSITIONS ||
                         (cn->path == AMP_CPU_AUTO && amp_dnnl_has_reference(d))))
        return st;
    return choose(al, d, l, st, cn->conv_form == AMP_CONV_TIMED, why, whylen);
}

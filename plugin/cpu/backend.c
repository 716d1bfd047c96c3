/* The CPU backend (backend.h): the batch's arithmetic on darknet's host
 * arrays, decided on the host, and which half path each layer gets: oneDNN
 * for convolutional, deconvolutional and connected layers (and recurrent
 * layers' connected and convolutional sub-layers) where the CPU runs them,
 * else the exact emulation (docs/design.md, docs/cfg.md "DARKNET_AMP_CPU").
 */
#include "cpu.h"
#include "yolo_layer.h" /* forward_yolo_layer */
#include "math/grad_math.h" /* amp_unscale_check, amp_inv_scale: shared with cuda/ */
#include "dist.h"      /* amp_comm: data-parallel reduce */
#include "network.h"   /* get_layer_string */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

amp_cpu_runner amp_cpu_layer_runner(const amp_layer *al)
{
    if (!al || !al->owner || al->owner->ops != &amp_cpu_backend) return AMP_CPU_RUNS_DARKNET;
    if (al->nsubs) return amp_cpu_layer_runner(&al->subs[0]);
    return al->bk ? cpu_layer_of(al)->runner : AMP_CPU_RUNS_DARKNET;
}

static amp_slots slots(layer *l)
{
    return (amp_slots){&l->forward, &l->backward, &l->update};
}

static amp_status net_init(amp_net *an, char *err, size_t errlen)
{
    cpu_net *cn = calloc(1, sizeof *cn);
    AMP_RETURN_ERROR_IF(!cn, AMP_ERR_NOMEM, err, errlen, "amp: out of memory attaching to %s",
                        an->cfgfile);
    an->bk = cn;
    AMP_FORWARD_IF_ERROR(amp_cpu_settings(cn, err, errlen));
    cn->saved = malloc((an->nparams ? an->nparams : 1) * sizeof(float));
    cn->states_saved = malloc((an->nstate_elems ? an->nstate_elems : 1) * sizeof(float));
    AMP_RETURN_ERROR_IF(!cn->saved || !cn->states_saved, AMP_ERR_NOMEM, err, errlen,
                        "amp: out of memory attaching to %s", an->cfgfile);
    return AMP_OK;
}

static void net_free(amp_net *an)
{
    cpu_net *cn = cpu_net_of(an);
    if (!cn) return;
    amp_cpu_activations_release(an);
    amp_onednn_ctx_free(cn);
    amp_cpu_unmap(cn->arena, cn->arena_bytes);
    amp_cpu_unmap(cn->scratchpad, cn->scratchpad_bytes);
    free(cn->deltas);
    amp_buffer *b[] = {&cn->xq, &cn->dq, &cn->tmp, &cn->gx, &cn->in32, &cn->out32, &cn->dx32, &cn->img32};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; ++i) free(b[i]->data);
    free(cn->saved);
    free(cn->states_saved);
    free(cn);
    an->bk = NULL;
}

/* ---- layers ---- */

/* A layer's (or sub-layer's) state: the half buffers and oneDNN's primitives. */
static void cpu_layer_free(amp_layer *al)
{
    cpu_layer *c = al ? cpu_layer_of(al) : NULL;
    if (!c) return;
    amp_onednn_free(c);
    free(c->wq.data);
    free(c->x_h);
    free(c);
    al->bk = NULL;
}

static void layer_free(amp_layer *al)
{
    if (al->subs) amp_subs_free(al, slots, cpu_layer_free);
    cpu_layer_free(al);
}

/* The half path of one layer (or sub-layer): oneDNN where it runs the
 * convolution, deconvolution or inner product and DARKNET_AMP_CPU allows
 * (bfloat16 in bfloat16, float16 as float32 kernels on float16-rounded
 * operands), else the emulation (locally connected layers always). */
static amp_status half_path(amp_layer *al, layer *l, char *why, size_t whylen)
{
    const cpu_net *cn = cpu_net_of(al->owner);
    const amp_dtype dtype = al->owner->scaler->opt.dtype;
    if (!al->bk) {
        al->bk = calloc(1, sizeof(cpu_layer));
        AMP_RETURN_ERROR_IF(!al->bk, AMP_ERR_NOMEM, why, whylen, "out of memory");
    }
    const int onednn_type =
        l->type == CONVOLUTIONAL || l->type == DECONVOLUTIONAL || l->type == CONNECTED;
    if (onednn_type && cn->path != AMP_CPU_EMULATE &&
        (dtype != AMP_DTYPE_FLOAT32 || cn->path == AMP_CPU_ONEDNN)) {
        char whynot[AMP_MSG_LEN];
        if (amp_onednn_install(al, l, dtype, whynot, sizeof whynot) == AMP_OK) return AMP_OK;
        if (cn->path == AMP_CPU_ONEDNN)
            fprintf(stderr, "amp: layer %d: not through oneDNN: %s; emulated\n", al->index, whynot);
    }
    AMP_RETURN_ERROR_IF(dtype == AMP_DTYPE_FLOAT32, AMP_ERR_INVALID, why, whylen,
                        "nothing to emulate in float32");
    return amp_emulation_install(al, l, why, whylen);
}

static amp_status install_sub(amp_layer *sa, layer *sub, void *ctx, char *why, size_t whylen)
{
    (void)ctx;
    return half_path(sa, sub, why, whylen);
}

/* A layer's half execution: recurrent layers through their sub-layers. */
static amp_status install_half(amp_layer *al, layer *l)
{
    char why[AMP_MSG_LEN] = "";
    amp_status st;
    if (l->type == RNN || l->type == GRU || l->type == LSTM || l->type == CRNN) {
        st = amp_subs_install(al, l, slots, install_sub, cpu_layer_free, NULL, why,
                              sizeof why);
        if (st != AMP_OK)
            fprintf(stderr, "amp: layer %d [%s]: float32: %s\n", al->index,
                    get_layer_string(l->type), why);
        return st;
    }
    st = half_path(al, l, why, sizeof why);
    if (st != AMP_OK) cpu_layer_free(al);
    return st;
}

/* backend.h's layer_fallback: darknet's own float32 layer again. */
static amp_status layer_fallback(amp_layer *al, layer *l, char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(al->nsubs, AMP_ERR_INVALID, err, errlen,
                        "amp: layer %d: a recurrent layer's half sub-layers do not fall back",
                        al->index);
    cpu_layer_free(al);
    amp_cpu_float32_forms(al, l);
    al->io = AMP_IO_FLOAT32;
    al->label = NULL;
    return AMP_OK;
}

/* darknet's yolo loss with the images in parallel, bit for bit (yolo.c). */
static void yolo_forward(layer l, network net)
{
    amp_yolo_forward(l, net, 1);
}

static amp_status layer_install(amp_layer *al, layer *l, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    const amp_net *an = al->owner;
    /* amp_dtype=float32 with DARKNET_AMP_CPU=onednn: the half layers run
     * oneDNN's float32 primitives (benchmarks: the library's gain alone). */
    if (an->scaler->opt.dtype == AMP_DTYPE_FLOAT32 && cpu_net_of(an)->path == AMP_CPU_ONEDNN &&
        amp_policy(l, AMP_DTYPE_BFLOAT16, al->half_allowed) == AMP_PRECISION_HALF &&
        install_half(al, l) == AMP_OK)
        al->precision = AMP_PRECISION_HALF;
    else if (al->precision == AMP_PRECISION_HALF && install_half(al, l) != AMP_OK)
        al->precision = AMP_PRECISION_FALLBACK;
    if (l->type == MAXPOOL) amp_cpu_float32_forms(al, l);
    /* what the activation plan may store in half around it (activations.c) */
    if (al->precision == AMP_PRECISION_HALF && !al->nsubs && l->type != LOCAL &&
        an->scaler->opt.dtype != AMP_DTYPE_FLOAT32)
        al->io = AMP_IO_CONVERTS;
    else if (amp_movement_has_half(l) && l->forward && l->backward)
        al->io = AMP_IO_HALF;
    if (amp_update_conv_replaces(l)) al->update = amp_update_conv; /* bit for bit, threaded */
    if (l->type == YOLO && al->forward == forward_yolo_layer) al->forward = yolo_forward;
    return AMP_OK;
}

/* ---- the batch ---- */

/* Multiplies every element by k; returns 1 if any result is inf or NaN. The
 * test is on the exponent bits, so the loop vectorizes (a float reduction
 * would not without -fassociative-math). Element by element, so splitting it
 * between threads changes no result. */
static int scale_checked(float *g, size_t n, float k)
{
    uint32_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n > 65536)
    for (size_t i = 0; i < n; ++i) {
        bad |= amp_unscale_check(&g[i], k); /* grad_math.h, shared with cuda/ */
    }
    return bad != 0;
}

/* 1 when an element of g[0..n) is not finite. Reads only: unscaling by 1 is
 * the identity on every finite value, and a step with a non-finite one is
 * skipped and its histories restored from the batch-start copy. */
static int nonfinite(const float *g, size_t n)
{
    uint32_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n > 65536)
    for (size_t i = 0; i < n; ++i) bad |= amp_nonfinite_bits(g[i]);
    return bad != 0;
}

/* saved = g, then g *= s: one pass, split between threads. */
static void save_scaled(float *saved, float *g, size_t n, float s)
{
    if (s == 1.0f) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; ++i) saved[i] = g[i];
        return;
    }
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; ++i) {
        saved[i] = g[i];
        g[i] *= s;
    }
}

static void begin_batch(amp_net *an)
{
    cpu_net *cn = cpu_net_of(an);
    cn->grad_nonzero = cn->grad_flushed = 0;
    const float s = an->scaler->state.scale;
    an->batch_scale = s;
    for (int k = 0; k < an->ntensors; ++k) {
        amp_tensor *t = &an->tensors[k];
        if (an->comm) { /* data-parallel: the batch's own gradients apart (reduce) */
            memcpy(cn->saved + t->offset, t->grad, t->n * sizeof(float));
            memset(t->grad, 0, t->n * sizeof(float));
        } else {
            save_scaled(cn->saved + t->offset, t->grad, t->n, s);
        }
    }
    for (int k = 0; k < an->nstates; ++k) {
        const amp_fwd_state *f = &an->states[k];
        memcpy(cn->states_saved + f->offset, f->host, f->n * sizeof(float));
    }
}

/* Data-parallel: the batch's gradients (alone in the histories since
 * begin_batch) summed over the processes, then the scaled history added
 * back: S h + sum, where one process alone has S h + its own. */
static int reduce(amp_net *an)
{
    const cpu_net *cn = cpu_net_of(an);
    const float s = an->batch_scale;
    for (int k = 0; k < an->ntensors; ++k) {
        amp_tensor *t = &an->tensors[k];
        if (an->comm->sum_f32(t->grad, t->n) != 0) return 1;
        const float *h = cn->saved + t->offset;
#pragma omp parallel for simd schedule(static) if (t->n > 65536)
        for (size_t i = 0; i < t->n; ++i) t->grad[i] = amp_dist_restack(h[i], s, t->grad[i]);
    }
    return 0;
}

/* Checked before scaling: a non-finite delta here comes from the data or the
 * cost layer, not from the scale. */
static void scale_loss(amp_net *an, const layer *l, int index)
{
    const float s = an->batch_scale;
    if (!l->delta) return;
    const size_t n = (size_t)l->outputs * l->batch;
    int finite = 1;
    for (size_t i = 0; i < n; ++i) finite &= amp_finite(l->delta[i]);
    if (!finite && !an->loss_bad) {
        an->loss_bad = index + 1;
        size_t i = 0;
        while (amp_finite(l->delta[i])) ++i;
        an->loss_element = (long)i; /* names the image */
    }
    if (s != 1.0f)
        for (size_t i = 0; i < n; ++i) l->delta[i] *= s;
}

static void rescale(amp_net *an)
{
    for (int k = 0; k < an->ntensors; ++k)
        scale_checked(an->tensors[k].grad, an->tensors[k].n, an->batch_scale);
}

/* Multiplies every element by 1/S and checks the result: an overflow of the
 * scaled gradient is inf already, and with S < 1 a finite gradient may only
 * overflow now. Every tensor is unscaled, so that amp_unscale leaves true
 * gradients to look at even on an overflow; tensors are visited from the
 * output layer back, so the first non-finite one is where backpropagation
 * first overflowed. */
static void unscale(amp_net *an)
{
    const float inv = amp_inv_scale(an->batch_scale);
    for (int k = an->ntensors - 1; k >= 0; --k) {
        amp_tensor *t = &an->tensors[k];
        /* a scale of 1 (bfloat16's default): a check, no write */
        const int bad = inv == 1.0f ? nonfinite(t->grad, t->n) : scale_checked(t->grad, t->n, inv);
        if (bad && !an->found_inf) {
            an->found_inf = 1;
            an->bad_tensor = k;
        }
    }
}

static void restore(amp_net *an)
{
    const cpu_net *cn = cpu_net_of(an);
    for (int k = 0; k < an->ntensors; ++k) {
        amp_tensor *t = &an->tensors[k];
        memcpy(t->grad, cn->saved + t->offset, t->n * sizeof(float));
    }
    for (int k = 0; k < an->nstates; ++k) {
        const amp_fwd_state *f = &an->states[k];
        memcpy(f->host, cn->states_saved + f->offset, f->n * sizeof(float));
    }
}

static void end_mid_batch(amp_net *an)
{
    if (an->batch_scale == 1.0f) return;
    for (int k = 0; k < an->ntensors; ++k)
        scale_checked(an->tensors[k].grad, an->tensors[k].n,
                      (float)(1.0 / (double)an->batch_scale));
}

static void poke(amp_net *an, int k, size_t i, float value)
{
    an->tensors[k].grad[i] = value;
}

static void poke_delta(amp_net *an, const layer *l, size_t i, float value)
{
    (void)an;
    if (l->delta) l->delta[i] = value;
}

static double flushed(const amp_net *an)
{
    const cpu_net *cn = cpu_net_of(an);
    return cn->grad_nonzero ? (double)cn->grad_flushed / (double)cn->grad_nonzero : 0.0;
}

static void memory(const amp_net *an, double *copies, double *workspaces)
{
    const cpu_net *cn = cpu_net_of(an);
    /* the batch-start histories and forward states */
    *copies = (double)(an->nparams + an->nstate_elems) * sizeof(float);
    for (int i = 0; i < an->net->n; ++i) {
        const amp_layer *al = &an->layers[i];
        for (int k = -1; k < al->nsubs; ++k) {
            const amp_layer *r = k < 0 ? al : &al->subs[k];
            if (!r->bk) continue;
            /* the emulation's half weights (oneDNN's are made in the arena per pass) */
            *copies += (double)cpu_layer_of(r)->wq.n * sizeof(float);
        }
    }
    const amp_buffer *b[] = {&cn->xq,   &cn->dq,    &cn->tmp,  &cn->gx,
                             &cn->in32, &cn->out32, &cn->dx32, &cn->img32};
    *workspaces = (double)cn->arena_bytes + (double)cn->scratchpad_bytes;
    (void)cn->deltas_n; /* the activations' (amp_plan_bytes) */
    for (size_t i = 0; i < sizeof b / sizeof b[0]; ++i) *workspaces += (double)b[i]->n * sizeof(float);
}

static void describe(const amp_net *an, FILE *out)
{
    int native = 0;
    const char *isa = amp_onednn_isa(&native);
    const amp_dtype dtype = an->scaler->opt.dtype;
    int onednn = 0, emulated = 0;
    for (int i = 0; i < an->net->n; ++i)
        if (an->layers[i].precision == AMP_PRECISION_HALF) {
            const amp_cpu_runner r = amp_cpu_layer_runner(&an->layers[i]);
            onednn += r == AMP_CPU_RUNS_ONEDNN;
            emulated += r == AMP_CPU_RUNS_EMULATED;
        }
    if (dtype == AMP_DTYPE_BFLOAT16 && !native && onednn)
        fprintf(out, "amp: note: this CPU has neither AVX512-BF16 nor AMX (oneDNN sees %s): "
                     "bfloat16 layers run on oneDNN's float32 kernels, on operands rounded to "
                     "bfloat16 (the same numerics); their speed-up over amp=0 comes from oneDNN, "
                     "not from the precision\n", isa);
#ifdef AMP_HAVE_ONEDNN
    const char *no_onednn = "no optimised oneDNN kernels for them here";
#else
    const char *no_onednn = "built without oneDNN";
#endif
    if (dtype != AMP_DTYPE_FLOAT32 && emulated && !onednn)
        fprintf(out, "amp: warning: the half layers are emulated in software (%s): expect "
                     "darknet's float32 speed or less\n",
                cpu_net_of(an)->path == AMP_CPU_EMULATE ? "DARKNET_AMP_CPU=emulate" : no_onednn);
    fprintf(out, "amp:   CPU: oneDNN %s; the plugin's loops %s%s\n", isa,
            amp_cpu_isa_name(amp_cpu_isa_used()),
            amp_cpu_isa_used() < amp_cpu_isa_detected() ? " (DARKNET_AMP_MAX_CPU_ISA)" : "");
    static const char *const how[] = {
        [AMP_CONV_TIMED] = "the faster of the two, timed once per shape; DARKNET_SEED or "
                           "DARKNET_AMP_CONV=rule chooses by shape, so that a run repeats",
        [AMP_CONV_DIRECT] = "oneDNN's convolution (DARKNET_AMP_CONV=direct)",
        [AMP_CONV_MATMUL] = "im2col + matmul (DARKNET_AMP_CONV=matmul)",
        [AMP_CONV_RULE] = "by shape, so that a run repeats (DARKNET_AMP_CONV=timed times them)"};
    if (onednn)
        fprintf(out, "amp:   convolution forms: %s\n", how[cpu_net_of(an)->conv_form]);
    /* the convolutions' form: im2col + matmul or oneDNN's, and the timings
     * that chose it */
    for (int i = 0; i < an->net->n; ++i) {
        const amp_layer *al = &an->layers[i];
        double td, tm;
        if (al->precision != AMP_PRECISION_HALF ||
            amp_cpu_layer_runner(al) != AMP_CPU_RUNS_ONEDNN ||
            an->net->layers[i].type != CONVOLUTIONAL)
            continue;
        const int mm = amp_onednn_form(cpu_layer_of(al), &td, &tm);
        if (mm < 0 || (!mm && td < 0)) continue; /* oneDNN's convolution, nothing timed */
        fprintf(out, "amp:   layer %3d: %s", i, mm ? "im2col + matmul" : "oneDNN convolution");
        if (td >= 0 && tm >= 0)
            fprintf(out, " (timed: im2col + matmul %.2f ms, oneDNN convolution %.2f ms, "
                         "a forward and a backward)", 1e3 * tm, 1e3 * td);
        fprintf(out, "\n");
    }
}

/* backend.h's supports: every GEMM kind (oneDNN for convolutions,
 * deconvolutions and inner products, the emulation for all four), recurrent
 * layers through their sub-layers, the data-movement kinds movement.c and
 * maxpool.c have half forms for. */
static int supports(const amp_layer_kind *k, amp_dtype dtype)
{
    if (!k || dtype == AMP_DTYPE_FLOAT32) return 0;
    switch (k->role) {
    case AMP_ROLE_GEMM: return amp_emulation_has(k->type);
    case AMP_ROLE_RECURRENT: return 1;
    case AMP_ROLE_MOVES: return amp_movement_has_kind(k->type);
    default: return 0;
    }
}

const amp_backend_ops amp_cpu_backend = {
    .version = AMP_BACKEND_VERSION,
    .name = "CPU",
    .default_dtype = AMP_DTYPE_BFLOAT16,
    .host_timing = 1,
    .slots = slots,
    .supports = supports,
    .net_init = net_init,
    .net_free = net_free,
    .layer_install = layer_install,
    .layer_free = layer_free,
    .activations = amp_cpu_activations,
    .activations_release = amp_cpu_activations_release,
    .layer_fallback = layer_fallback,
    .begin_batch = begin_batch,
    .scale_loss = scale_loss,
    .rescale = rescale,
    .unscale = unscale,
    .reduce = reduce,
    .restore = restore,
    .end_mid_batch = end_mid_batch,
    .poke = poke,
    .poke_delta = poke_delta,
    .flushed = flushed,
    .memory = memory,
    .nonfinite_output = amp_cpu_nonfinite_output,
    .probe_forward = amp_cpu_probe_forward,
    .describe = describe,
};

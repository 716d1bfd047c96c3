/* AMP on a network that trains on a GPU (gpu_index >= 0): the CPU core's
 * semantics (network_amp.c, docs/design.md) on darknet's *_gpu arrays, with
 * every decision on the device so that a training step costs no host
 * synchronisation beyond darknet's own.
 *
 * Per batch, on darknet's stream (the legacy default stream, where all of
 * darknet's kernels, cuBLAS and cuDNN calls run):
 * - batch start (first training forward of a loss layer, or first wrapped
 *   backward): one kernel copies every momentum history (*_updates_gpu) into
 *   a device copy and multiplies it by the scale S read from device memory;
 * - loss layers' delta_gpu *= S after their forward;
 * - the step (first wrapped update_gpu): the device flag is zeroed, one fused
 *   kernel unscales and checks every gradient, one thread decides the step
 *   and updates the scale (scale_rule.h), and the parameters and Adam moments
 *   are copied aside only if the flag is set; darknet's update kernels then
 *   run unchanged; after the last layer's update, parameters, moments and
 *   histories are copied back only if the flag is set. The scaler state is
 *   copied into pinned host memory with cudaMemcpyAsync and an event recorded.
 * - the host reads that copy when the event has completed (cudaEventQuery;
 *   in darknet's loop it always has by the next backward, because
 *   forward_network_gpu ends with a blocking copy of the output), for the
 *   progress line, the skip message, the sidecar, amp_max_skips and to put
 *   back darknet's t after a skipped step (before the next update).
 */
#include "amp_internal.h"
#include "amp_cuda.h"
#include "cuda_check.h"
#include "grad_math.h" /* amp_inv_scale */
#include "half_gpu.h"
#include "network.h"   /* get_layer_string */

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct amp_gpu_layer {
    /* darknet's own, put back by detach */
    void (*forward_gpu)(struct layer, struct network);
    void (*backward_gpu)(struct layer, struct network);
    void (*update_gpu)(struct layer, update_args);
    /* what runs: darknet's, or the half path (half_gpu.h) */
    void (*run_forward)(struct layer, struct network);
    void (*run_backward)(struct layer, struct network);
    int wrapped;
} amp_gpu_layer;

struct amp_gpu_net {
    amp_gpu_state *dev;     /* device */
    amp_gpu_state *mirror;  /* pinned host copy, written by the last step */
    cudaEvent_t copied;     /* recorded after that copy */
    int in_flight;          /* a copy not yet read */
    amp_mt_table hist;      /* x: *_updates_gpu, y: its copy from the batch start */
    amp_mt_table params;    /* x: parameters and Adam moments, y: copy for a skipped step */
    float *saved, *param_saved;
    float **grads;          /* per an->tensors entry: its device gradient */
    amp_gpu_layer *layers;
    amp_gpu_half_ctx *half;  /* scratch shared by the half layers */
    int last_update;        /* the highest index of a layer with update_gpu */
    int managed;            /* the step under way was scaled and decided */
};

static cudaStream_t stream_of(const amp_net *an)
{
    (void)an;
    return 0; /* darknet's stream */
}

/* A failure inside darknet's void callbacks: kept as the network's fatal
 * error, which the training loop reports and stops on. */
static void fail(amp_net *an, const char *msg)
{
    if (an->error[0]) return;
    snprintf(an->error, sizeof an->error, "amp: GPU: %s", msg);
    fprintf(stderr, "%s\n", an->error);
}

void amp_gpu_fail(amp_net *an, const char *msg)
{
    fail(an, msg);
}

const struct amp_gpu_state *amp_gpu_dev_state(const amp_net *an)
{
    return an->gpu->dev;
}

static void describe(const amp_net *an, int k, char *out, size_t size)
{
    if (k < 0 || k >= an->ntensors) {
        snprintf(out, size, "an unknown tensor");
        return;
    }
    const amp_tensor *t = &an->tensors[k];
    snprintf(out, size, "layer %d [%s] %s", t->layer,
             get_layer_string(an->net->layers[t->layer].type), t->name);
}

/* ---- the host's view, read asynchronously ---- */

void amp_gpu_poll(amp_net *an, int wait)
{
    struct amp_gpu_net *g = an ? an->gpu : NULL;
    if (!g || !g->in_flight) return;
    cudaError_t e = cudaEventQuery(g->copied);
    if (e == cudaErrorNotReady && wait) e = cudaEventSynchronize(g->copied);
    if (e == cudaErrorNotReady) return;
    g->in_flight = 0;
    char err[256];
    if (AMP_CUDA_MSG(e, err, sizeof err)) {
        fail(an, err);
        return;
    }
    const amp_gpu_state m = *g->mirror;
    amp_scaler *s = an->scaler;
    float before = s->state.scale;
    s->state = m.st;
    an->skipped = (int)m.skipped;
    an->found_inf = (int)m.skipped;
    an->bad[0] = 0;
    if (m.skipped) {
        /* update_network_gpu counted the step; put it back, as the CPU core
         * does, before the next update reads it. */
        *an->net->t -= 1;
        describe(an, (int)m.found - 1, an->bad, sizeof an->bad);
        snprintf(s->first_bad, sizeof s->first_bad, "%s", an->bad);
        fprintf(stderr, "amp: step %llu skipped: non-finite gradient, first in %s (loss scale %g)\n",
                m.seq, an->bad, m.batch_scale);
        if (s->opt.max_skips > 0 && m.st.consecutive_skips >= s->opt.max_skips)
            snprintf(an->error, sizeof an->error,
                     "amp: %ld consecutive steps skipped (amp_max_skips=%ld): gradients are not "
                     "finite, first in %s, at loss scale %g (amp_min_scale %g)",
                     m.st.consecutive_skips, s->opt.max_skips, an->bad, m.st.scale,
                     s->opt.min_scale);
    }
    if (m.st.scale != before) fprintf(stderr, "amp: loss scale %g -> %g\n", before, m.st.scale);
}

void amp_gpu_push_state(amp_net *an)
{
    struct amp_gpu_net *g = an ? an->gpu : NULL;
    if (!g) return;
    char err[256];
    /* The caller polled before it replaced an->scaler->state (amp_load_state):
     * polling here would overwrite that state with the last step's. */
    if (AMP_CUDA_MSG(cudaMemcpy(&g->dev->st, &an->scaler->state, sizeof an->scaler->state,
                                cudaMemcpyHostToDevice), err, sizeof err))
        fail(an, err);
}

/* ---- the batch ---- */

static void begin_batch(amp_net *an)
{
    char err[256];
    an->batch_scale = an->scaler->state.scale; /* the host's view, for messages */
    if (amp_cuda_begin_batch(&an->gpu->hist, an->gpu->dev, stream_of(an), err, sizeof err))
        fail(an, err);
    an->phase = AMP_PHASE_ACCUMULATING;
}

/* A backward after amp_unscale, before the step: scale the histories again. */
static void rescale(amp_net *an)
{
    char err[256];
    if (amp_cuda_unscale_check(&an->gpu->hist, &an->gpu->dev->batch_scale, NULL, stream_of(an),
                               err, sizeof err))
        fail(an, err);
    an->phase = AMP_PHASE_ACCUMULATING;
}

/* DARKNET_AMP_INJECT on the device (a test aid: one small blocking copy). */
static void inject(amp_net *an)
{
    unsigned long step = an->step_index + 1;
    for (int j = 0; j < an->ninject; ++j) {
        const amp_injection *in = &an->inject[j];
        for (int k = 0; k < in->nsteps; ++k) {
            if (in->steps[k] != step) continue;
            for (int t = 0; t < an->ntensors; ++t)
                if (an->tensors[t].layer == in->layer && !strcmp(an->tensors[t].name, in->tensor))
                    cudaMemcpy(an->gpu->grads[t] + an->tensors[t].n / 2, &in->value,
                               sizeof(float), cudaMemcpyHostToDevice);
        }
    }
}

static int unscale(amp_net *an, char *err, size_t errlen)
{
    struct amp_gpu_net *g = an->gpu;
    inject(an);
    AMP_CUDA_TRY(cudaMemsetAsync(&g->dev->found, 0, sizeof g->dev->found, stream_of(an)), err,
                 errlen);
    if (amp_cuda_unscale_check(&g->hist, &g->dev->inv_scale, &g->dev->found, stream_of(an), err,
                               errlen))
        return AMP_ERR_DEVICE;
    an->phase = AMP_PHASE_UNSCALED;
    return AMP_OK;
}

/* Before the first layer's update: decide on the device, keep what a skipped
 * step must put back. */
static void step_begin(amp_net *an)
{
    struct amp_gpu_net *g = an->gpu;
    char err[256];
    amp_gpu_poll(an, 1); /* in darknet's loop: long done, no wait */
    if (an->phase == AMP_PHASE_ACCUMULATING && unscale(an, err, sizeof err) != AMP_OK) {
        fail(an, err);
        return;
    }
    if (amp_cuda_decide(g->dev, an->scaler->params, an->owns_scaler, stream_of(an), err,
                        sizeof err) ||
        amp_cuda_gated_copy(&g->params, &g->dev->found, 1, stream_of(an), err, sizeof err))
        fail(an, err);
    an->step_index += 1;
    /* The host does not know whether the step is taken: half weight copies
     * are refreshed after every step (also after multi-GPU averaging, which
     * darknet does right after a step). */
    an->weights_version += 1;
    an->phase = AMP_PHASE_STEPPED;
    g->managed = 1;
}

/* After the last layer's update: undo a skipped step, publish the state. */
static void step_end(amp_net *an)
{
    struct amp_gpu_net *g = an->gpu;
    char err[256];
    g->managed = 0;
    if (amp_cuda_gated_copy(&g->params, &g->dev->found, 0, stream_of(an), err, sizeof err) ||
        amp_cuda_gated_copy(&g->hist, &g->dev->found, 0, stream_of(an), err, sizeof err) ||
        AMP_CUDA_MSG(cudaMemcpyAsync(g->mirror, g->dev, sizeof *g->mirror,
                                     cudaMemcpyDeviceToHost, stream_of(an)), err, sizeof err) ||
        AMP_CUDA_MSG(cudaEventRecord(g->copied, stream_of(an)), err, sizeof err)) {
        fail(an, err);
        return;
    }
    g->in_flight = 1;
}

/* ---- the wrappers ---- */

static void wrap_forward_gpu(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_net *an = al->owner;
    struct amp_gpu_net *g = an->gpu;
    if (net.train && an->phase != AMP_PHASE_ACCUMULATING) {
        if (an->phase == AMP_PHASE_UNSCALED) rescale(an);
        else begin_batch(an);
    }
    g->layers[al->index].run_forward(l, net);
    char err[256];
    if (net.train && l.delta_gpu &&
        amp_cuda_scale_delta(l.delta_gpu, (size_t)l.outputs * l.batch, g->dev, stream_of(an), err,
                             sizeof err))
        fail(an, err);
}

static void wrap_backward_gpu(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_net *an = al->owner;
    amp_gpu_poll(an, 0); /* the last step's state, before this batch's update */
    if (an->phase == AMP_PHASE_UNSCALED) rescale(an);
    else if (an->phase != AMP_PHASE_ACCUMULATING) begin_batch(an);
    an->gpu->layers[al->index].run_backward(l, net);
}

static void wrap_update_gpu(layer l, update_args a)
{
    amp_layer *al = l.hook_data;
    amp_net *an = al->owner;
    struct amp_gpu_net *g = an->gpu;
    if (al->index == an->first_update) {
        if (an->phase == AMP_PHASE_ACCUMULATING || an->phase == AMP_PHASE_UNSCALED) {
            step_begin(an);
        } else { /* no scaled batch pending: darknet's own update */
            an->phase = AMP_PHASE_IDLE;
            g->managed = 0;
            an->weights_version += 1; /* it moves the weights all the same */
        }
    }
    g->layers[al->index].update_gpu(l, a);
    if (al->index == g->last_update && g->managed) step_end(an);
}

/* ---- the explicit API ---- */

amp_status amp_gpu_unscale(amp_net *an, char *err, size_t errlen)
{
    return (amp_status)unscale(an, err, errlen);
}

amp_status amp_gpu_step(amp_net *an, char *err, size_t errlen)
{
    if (an->phase != AMP_PHASE_ACCUMULATING && an->phase != AMP_PHASE_UNSCALED) {
        amp_errorf(err, errlen, "amp_step: no backward pass since the last step");
        return AMP_ERR_STATE;
    }
    update_network(an->net);
    if (an->phase != AMP_PHASE_STEPPED) { /* no layer has parameters */
        step_begin(an);
        step_end(an);
    }
    if (an->error[0]) {
        amp_errorf(err, errlen, "%s", an->error);
        return AMP_ERR_DEVICE;
    }
    return AMP_OK;
}

/* ---- attach / detach ---- */

static layer *sub_layer(layer *l, const char *name, size_t len)
{
    static const struct { const char *name; size_t offset; } subs[] = {
        {"input", offsetof(layer, input_layer)}, {"self", offsetof(layer, self_layer)},
        {"output", offsetof(layer, output_layer)}, {"uz", offsetof(layer, uz)},
        {"wz", offsetof(layer, wz)}, {"ur", offsetof(layer, ur)}, {"wr", offsetof(layer, wr)},
        {"uh", offsetof(layer, uh)}, {"wh", offsetof(layer, wh)}, {"wf", offsetof(layer, wf)},
        {"wi", offsetof(layer, wi)}, {"wg", offsetof(layer, wg)}, {"wo", offsetof(layer, wo)},
        {"uf", offsetof(layer, uf)}, {"ui", offsetof(layer, ui)}, {"ug", offsetof(layer, ug)},
        {"uo", offsetof(layer, uo)},
    };
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; ++i)
        if (strlen(subs[i].name) == len && !strncmp(subs[i].name, name, len))
            return *(layer **)((char *)l + subs[i].offset);
    return NULL;
}

/* The device arrays behind one of the core's tensors ("weights", "uz.biases"). */
static int device_arrays(layer *l, const char *name, float **grad, float **param, float **m,
                         float **v)
{
    const char *dot = strchr(name, '.');
    if (dot) {
        l = sub_layer(l, name, (size_t)(dot - name));
        name = dot + 1;
    }
    if (!l) return -1;
    if (!strcmp(name, "weights"))
        *grad = l->weight_updates_gpu, *param = l->weights_gpu, *m = l->m_gpu, *v = l->v_gpu;
    else if (!strcmp(name, "biases"))
        *grad = l->bias_updates_gpu, *param = l->biases_gpu, *m = l->bias_m_gpu,
        *v = l->bias_v_gpu;
    else if (!strcmp(name, "scales"))
        *grad = l->scale_updates_gpu, *param = l->scales_gpu, *m = l->scale_m_gpu,
        *v = l->scale_v_gpu;
    else
        return -1;
    return *grad && *param ? 0 : -1;
}

/* Warns or refuses by compute capability (DESIGN.md, "Say so when AMP cannot
 * help"). */
static amp_status check_device(amp_net *an, char *err, size_t errlen)
{
    struct cudaDeviceProp p;
    int dev = an->net->gpu_index;
    AMP_CUDA_TRY(cudaGetDeviceProperties(&p, dev), err, errlen);
    amp_dtype dtype = an->scaler->opt.dtype;
    const char *cfg = an->cfgfile[0] ? an->cfgfile : "network";
    if (dtype == AMP_DTYPE_BFLOAT16 && p.major < 8) {
        amp_errorf(err, errlen,
                   "%s: amp_dtype=bfloat16 needs a GPU of compute capability 8.0 or newer; GPU %d "
                   "(%s) is %d.%d: use amp_dtype=float16 (tensor cores from 7.0) or amp=0",
                   cfg, dev, p.name, p.major, p.minor);
        return AMP_ERR_DEVICE;
    }
    if (dtype == AMP_DTYPE_FLOAT16 && p.major < 7)
        fprintf(stderr, "amp: warning: GPU %d (%s) is compute capability %d.%d, without tensor "
                        "cores: float16 will not be faster than float32 here (amp=0)\n",
                dev, p.name, p.major, p.minor);
    return AMP_OK;
}

static amp_status build_tables(amp_net *an, char *err, size_t errlen)
{
    struct amp_gpu_net *g = an->gpu;
    size_t n = an->nparams ? an->nparams : 1;
    int adam = an->net->adam;
    amp_span *hist = calloc(an->ntensors ? an->ntensors : 1, sizeof *hist);
    amp_span *par = calloc(an->ntensors ? 3 * an->ntensors : 1, sizeof *par);
    g->grads = calloc(an->ntensors ? an->ntensors : 1, sizeof *g->grads);
    amp_status st = AMP_OK;
    if (!hist || !par || !g->grads) {
        amp_errorf(err, errlen, "amp: out of memory attaching to %s", an->cfgfile);
        st = AMP_ERR_NOMEM;
        goto out;
    }
    if (AMP_CUDA_MSG(cudaMalloc((void **)&g->saved, n * sizeof(float)), err, errlen) ||
        AMP_CUDA_MSG(cudaMalloc((void **)&g->param_saved, (adam ? 3 : 1) * n * sizeof(float)),
                     err, errlen)) {
        st = AMP_ERR_DEVICE;
        goto out;
    }
    unsigned int np = 0;
    for (int k = 0; k < an->ntensors; ++k) {
        amp_tensor *t = &an->tensors[k];
        float *grad = NULL, *param = NULL, *m = NULL, *v = NULL;
        if (device_arrays(&an->net->layers[t->layer], t->name, &grad, &param, &m, &v)) {
            amp_errorf(err, errlen, "amp: layer %d has no device array for its %s gradient",
                       t->layer, t->name);
            st = AMP_ERR_DEVICE;
            goto out;
        }
        g->grads[k] = grad;
        hist[k] = (amp_span){grad, g->saved + t->offset, t->n};
        par[np++] = (amp_span){param, g->param_saved + t->offset, t->n};
        if (adam && m && v) {
            par[np++] = (amp_span){m, g->param_saved + n + t->offset, t->n};
            par[np++] = (amp_span){v, g->param_saved + 2 * n + t->offset, t->n};
        }
    }
    if (amp_mt_table_create(&g->hist, hist, (unsigned int)an->ntensors, err, errlen) ||
        amp_mt_table_create(&g->params, par, np, err, errlen))
        st = AMP_ERR_DEVICE;
out:
    free(hist);
    free(par);
    return st;
}

amp_status amp_gpu_attach(amp_net *an, char *err, size_t errlen)
{
    network *net = an->net;
    amp_scaler *s = an->scaler;
    if (!an->owns_scaler) {
        amp_errorf(err, errlen, "amp_attach: a scaler shared by several networks is not supported "
                                "on the GPU (docs/gpu.md); give each network its own");
        return AMP_ERR_INVALID;
    }
    amp_status st = check_device(an, err, errlen);
    if (st != AMP_OK) return st;
    struct amp_gpu_net *g = calloc(1, sizeof *g);
    if (!g || !(g->layers = calloc(net->n ? net->n : 1, sizeof *g->layers))) {
        free(g);
        amp_errorf(err, errlen, "amp: out of memory attaching to %s", an->cfgfile);
        return AMP_ERR_NOMEM;
    }
    an->gpu = g;
    st = build_tables(an, err, errlen);
    if (st != AMP_OK) goto fail;
    amp_gpu_state init;
    memset(&init, 0, sizeof init);
    init.st = s->state;
    init.batch_scale = s->state.scale;
    init.inv_scale = amp_inv_scale(s->state.scale);
    if (AMP_CUDA_MSG(cudaMalloc((void **)&g->dev, sizeof *g->dev), err, errlen) ||
        AMP_CUDA_MSG(cudaMemcpy(g->dev, &init, sizeof init, cudaMemcpyHostToDevice), err,
                     errlen) ||
        AMP_CUDA_MSG(cudaMallocHost((void **)&g->mirror, sizeof *g->mirror), err, errlen) ||
        AMP_CUDA_MSG(cudaEventCreateWithFlags(&g->copied, cudaEventDisableTiming), err, errlen)) {
        st = AMP_ERR_DEVICE;
        goto fail;
    }
    g->last_update = -1;
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        amp_layer *al = &an->layers[i];
        amp_gpu_layer *gl = &g->layers[i];
        al->owner = an;
        al->index = i;
        al->orig_forward = al->forward = l->forward;
        al->orig_backward = al->backward = l->backward;
        al->orig_update = al->update = l->update;
        al->wrapped = 0; /* the CPU pointers stay darknet's */
        gl->run_forward = gl->forward_gpu = l->forward_gpu;
        gl->run_backward = gl->backward_gpu = l->backward_gpu;
        gl->update_gpu = l->update_gpu;
        al->precision = amp_policy(l, s->opt.dtype, al->half_allowed);
        if (al->precision == AMP_PRECISION_HALF && l->forward_gpu && l->backward_gpu) {
            char why[384];
            if (!g->half && !(g->half = amp_gpu_half_ctx_new())) {
                amp_errorf(err, errlen, "amp: out of memory attaching to %s", an->cfgfile);
                st = AMP_ERR_NOMEM;
                goto fail;
            }
            if (!amp_gpu_half_install(al, l, g->half, &gl->run_forward, &gl->run_backward, why,
                                      sizeof why)) {
                al->precision = AMP_PRECISION_FALLBACK;
                if (l->type != LOCAL) /* the types with a GPU half path */
                    fprintf(stderr, "amp: layer %d [%s]: float32 on the GPU: %s\n", i,
                            get_layer_string(l->type), why);
            }
        } else if (al->precision == AMP_PRECISION_HALF) {
            al->precision = AMP_PRECISION_FALLBACK;
        }
        /* A float32 layer that clips its gradient clips it at the scale. */
        if (gl->run_backward == gl->backward_gpu && !al->subs && l->backward_gpu &&
            (l->type == CONNECTED || l->type == RNN || l->type == GRU || l->type == LSTM)) {
            char why[256];
            if (!amp_gpu_clip_install(al, l, &gl->run_backward, why, sizeof why)) {
                amp_errorf(err, errlen, "amp: layer %d [%s]: %s", i, get_layer_string(l->type),
                           why);
                st = AMP_ERR_NOMEM;
                goto fail;
            }
        }
        int params = l->update_gpu != NULL;
        if (l->cost && l->forward_gpu) l->forward_gpu = wrap_forward_gpu;
        else if (gl->run_forward != gl->forward_gpu) l->forward_gpu = gl->run_forward;
        if ((params || l->cost) && l->backward_gpu) l->backward_gpu = wrap_backward_gpu;
        else if (gl->run_backward != gl->backward_gpu) l->backward_gpu = gl->run_backward;
        if (params) l->update_gpu = wrap_update_gpu;
        if (params && an->first_update < 0) an->first_update = i;
        if (params) g->last_update = i;
        gl->wrapped = l->forward_gpu != gl->forward_gpu || l->backward_gpu != gl->backward_gpu ||
                      l->update_gpu != gl->update_gpu;
        if (gl->wrapped) l->hook_data = al;
    }
    net->hook_data = an;
    return AMP_OK;
fail:
    amp_gpu_detach(an);
    return st;
}

void amp_gpu_detach(amp_net *an)
{
    struct amp_gpu_net *g = an ? an->gpu : NULL;
    if (!g) return;
    network *net = an->net;
    /* Detached mid-batch: hand darknet its histories unscaled (exact for a
     * power-of-two scale), with this batch's gradients kept. */
    char err[256];
    if (an->phase == AMP_PHASE_ACCUMULATING && g->dev &&
        amp_cuda_unscale_check(&g->hist, &g->dev->inv_scale, NULL, stream_of(an), err, sizeof err))
        fprintf(stderr, "amp: GPU: %s\n", err);
    an->phase = AMP_PHASE_IDLE; /* the CPU part of amp_net_free has nothing to undo */
    if (net && g->layers)
        for (int i = 0; i < net->n; ++i) {
            amp_gpu_layer *gl = &g->layers[i];
            amp_gpu_half_free(&an->layers[i]);
            if (!gl->wrapped) continue;
            net->layers[i].forward_gpu = gl->forward_gpu;
            net->layers[i].backward_gpu = gl->backward_gpu;
            net->layers[i].update_gpu = gl->update_gpu;
            net->layers[i].hook_data = NULL;
        }
    cudaDeviceSynchronize(); /* nothing of ours in flight when freed */
    amp_gpu_half_ctx_free(g->half);
    amp_mt_table_free(&g->hist);
    amp_mt_table_free(&g->params);
    cudaFree(g->saved);
    cudaFree(g->param_saved);
    cudaFree(g->dev);
    if (g->mirror) cudaFreeHost(g->mirror);
    if (g->copied) cudaEventDestroy(g->copied);
    free(g->grads);
    free(g->layers);
    free(g);
    an->gpu = NULL;
}

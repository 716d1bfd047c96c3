/* The CUDA backend (plugin/backend.h): the core's training step on darknet's
 * *_gpu arrays, every decision on the device, so that a training step costs
 * no host synchronisation beyond darknet's own (docs/gpu.md).
 *
 * Per batch, on darknet's stream (the legacy default stream, where all of
 * darknet's kernels, cuBLAS and cuDNN calls run):
 * - batch start (before the first layer's forward): one kernel copies every
 *   momentum history (*_updates_gpu) into a device copy and multiplies it by
 *   the scale S read from device memory, one more copies the forward states
 *   (rolling_mean_gpu, rolling_variance_gpu, recurrent hidden states: the
 *   core's an->states) aside; loss layers' delta_gpu *= S after their forward;
 * - decide (before the first layer's update): the device flag is zeroed and
 *   one fused kernel unscales and checks every gradient (unscale), one thread
 *   decides the step and updates the scale (scale_rule.h), and the
 *   parameters and Adam moments are copied aside only if the flag is set;
 *   darknet's update kernels then run unchanged;
 * - step_end (after the last layer's update): parameters, moments,
 *   histories and forward states are copied back only if the flag is set, and the device state
 *   is copied into pinned host memory with cudaMemcpyAsync and an event;
 * - sync: the host reads that copy when the event has completed
 *   (cudaEventQuery; in darknet's loop it always has by the next backward,
 *   because forward_network_gpu ends with a blocking copy of the output) and
 *   returns the outcome to the core, which settles it (amp_net_sync).
 *
 * Data-parallel (docs/distributed.md; built with NCCL): the batch start sets
 * each history aside instead of scaling it, the batch's gradients are summed
 * over the processes by NCCL on the device (ncclAllReduce on every
 * *_updates_gpu array, in place, on darknet's stream) and one kernel puts
 * the scaled history back under them, before the fused unscale and check:
 * no host copy of a gradient, the decision still on the device. After each
 * step the batch-norm statistics are copied side by side into one buffer,
 * summed by one ncclAllReduce and put back as their mean by one kernel
 * (average_statistics): no blocking call. The core's consistency check
 * (every DARKNET_AMP_DIST_CHECK steps) and the start-up broadcast read and
 * write darknet's host arrays (pull, push). Built, not yet run on a GPU.
 */
#include "half_gpu.h"
#include "cuda_check.h"
#include "dist.h"      /* amp_comm */
#include "math/grad_math.h" /* amp_inv_scale */
#include "network.h"   /* get_layer_string */

#ifdef AMP_HAVE_NCCL
#include <nccl.h>
#endif

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cudaStream_t stream_of(const amp_net *an)
{
    (void)an;
    return 0; /* darknet's stream */
}

/* A failure inside a training step: the network's error, which stops training. */
static void fail(amp_net *an, const char *msg)
{
    amp_net_fail(an, AMP_ERR_DEVICE, "amp: GPU: %s", msg);
}

/* ---- the host's view, read asynchronously ---- */

static int sync_state(amp_net *an, int wait, amp_step_outcome *out)
{
    amp_gpu_net *g = gpu_of(an);
    if (!g || !g->in_flight) return 0;
    cudaError_t e = cudaEventQuery(g->copied);
    if (e == cudaErrorNotReady && wait) e = cudaEventSynchronize(g->copied);
    if (e == cudaErrorNotReady) return 0;
    g->in_flight = 0;
    char err[AMP_MSG_LEN];
    if (AMP_CUDA_CHECK(e, err, sizeof err) != AMP_OK) {
        fail(an, err);
        return 0;
    }
    const amp_gpu_state m = *g->mirror;
    /* update_network_gpu counted the step in t: a skip takes it back, as on
     * the CPU, before the next update reads it. */
    *out = (amp_step_outcome){.skipped = (int)m.skipped,
                              .bad_tensor = (int)m.found - 1,
                              .batch_scale = m.batch_scale,
                              .seq = m.seq,
                              .device_state = 1,
                              .state = m.st,
                              .take_back_t = 1,
                              .loss_layer = (int)m.loss - 1};
    return 1;
}

static void push_state(amp_net *an)
{
    char err[AMP_MSG_LEN];
    /* The core settled the device's last step before it replaced the state
     * (amp_load_state): nothing is in flight to overwrite it. */
    if (AMP_CUDA_CHECK(cudaMemcpy(&gpu_of(an)->dev->st, &an->scaler->state,
                                  sizeof an->scaler->state, cudaMemcpyHostToDevice),
                       err, sizeof err) != AMP_OK)
        fail(an, err);
}

/* ---- the batch ---- */

static void begin_batch(amp_net *an)
{
    char err[AMP_MSG_LEN];
    amp_gpu_net *g = gpu_of(an);
    an->batch_scale = an->scaler->state.scale; /* the host's view, for messages */
    if (AMP_CUDA_CHECK(cudaMemsetAsync(&g->dev->loss, 0, sizeof g->dev->loss, stream_of(an)), err,
                       sizeof err) != AMP_OK ||
        (an->comm ? amp_cuda_set_aside(&g->hist, g->dev, stream_of(an), err, sizeof err)
                  : amp_cuda_begin_batch(&g->hist, g->dev, stream_of(an), err, sizeof err)) !=
            AMP_OK ||
        amp_cuda_gated_copy(&g->states, NULL, 1, stream_of(an), err, sizeof err) != AMP_OK)
        fail(an, err);
}

#ifdef AMP_HAVE_NCCL
/* backend.h's average_statistics: pack, one sum, the mean put back; all on
 * darknet's stream. */
static int average_statistics(amp_net *an)
{
    amp_gpu_net *g = gpu_of(an);
    char err[AMP_MSG_LEN];
    if (!g->npacked) return 0;
    if (amp_cuda_gated_copy(&g->stats, NULL, 1, stream_of(an), err, sizeof err) != AMP_OK ||
        ncclAllReduce(g->packed, g->packed, g->npacked, ncclFloat, ncclSum, g->nccl,
                      stream_of(an)) != ncclSuccess ||
        amp_cuda_unpack_scaled(&g->stats, 1.0f / (float)an->comm->size, stream_of(an), err,
                               sizeof err) != AMP_OK)
        return -1;
    return 0;
}

/* Every gradient summed over the processes, in place on the device, then
 * the scaled history back under it. */
static int reduce(amp_net *an)
{
    amp_gpu_net *g = gpu_of(an);
    char err[AMP_MSG_LEN];
    int bad = ncclGroupStart() != ncclSuccess;
    for (int k = 0; !bad && k < an->ntensors; ++k)
        bad = ncclAllReduce(g->grads[k], g->grads[k], an->tensors[k].n, ncclFloat, ncclSum,
                            g->nccl, stream_of(an)) != ncclSuccess;
    bad |= ncclGroupEnd() != ncclSuccess;
    return bad || amp_cuda_restack(&g->hist, g->dev, stream_of(an), err, sizeof err) != AMP_OK;
}
#endif

/* One device array to its host array (to_host) or back; 0 on success. */
static int copy_array(float *dev, float *host, size_t n, int to_host)
{
    if (!dev || !host || !n) return 0;
    return (to_host ? cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost)
                    : cudaMemcpy(dev, host, n * sizeof(float), cudaMemcpyHostToDevice)) !=
           cudaSuccess;
}

/* Parameters, histories and batch-norm statistics of every layer between
 * the device and darknet's host arrays (stats_only: the statistics). */
static int transfer(amp_net *an, int stats_only, int to_host)
{
    int bad = 0;
    for (int k = 0; k < an->nstates && !bad; ++k) {
        const amp_fwd_state *f = &an->states[k];
        if (amp_state_is_statistic(f))
            bad |= copy_array(amp_cuda_state_array(f), f->host, f->n, to_host);
    }
    for (int i = 0; i < an->net->n && !bad; ++i) {
        layer *l = &an->net->layers[i];
        if (stats_only) continue;
        bad |= copy_array(l->weights_gpu, l->weights, (size_t)l->nweights, to_host) |
               copy_array(l->weight_updates_gpu, l->weight_updates, (size_t)l->nweights,
                          to_host) |
               copy_array(l->biases_gpu, l->biases, (size_t)l->nbiases, to_host) |
               copy_array(l->bias_updates_gpu, l->bias_updates, (size_t)l->nbiases, to_host);
        if (l->batch_normalize)
            bad |= copy_array(l->scales_gpu, l->scales, (size_t)l->out_c, to_host) |
                   copy_array(l->scale_updates_gpu, l->scale_updates, (size_t)l->out_c, to_host);
    }
    return bad;
}

static int pull(amp_net *an, int stats_only) { return transfer(an, stats_only, 1); }
static int push(amp_net *an, int stats_only) { return transfer(an, stats_only, 0); }

/* The delta is checked on the device (its flag joins the decision); the
 * host has checked the loss itself (step.c). */
static void scale_loss(amp_net *an, const layer *l, int index)
{
    char err[AMP_MSG_LEN];
    if (l->delta_gpu && amp_cuda_scale_delta(l->delta_gpu, (size_t)l->outputs * l->batch,
                                             gpu_of(an)->dev, (unsigned int)index + 1u,
                                             stream_of(an), err, sizeof err) != AMP_OK)
        fail(an, err);
}

static void rescale(amp_net *an)
{
    char err[AMP_MSG_LEN];
    if (amp_cuda_unscale_check(&gpu_of(an)->hist, &gpu_of(an)->dev->batch_scale, NULL,
                               stream_of(an), err, sizeof err) != AMP_OK)
        fail(an, err);
}

static void unscale(amp_net *an)
{
    amp_gpu_net *g = gpu_of(an);
    char err[AMP_MSG_LEN];
    if (AMP_CUDA_CHECK(cudaMemsetAsync(&g->dev->found, 0, sizeof g->dev->found, stream_of(an)),
                       err, sizeof err) != AMP_OK ||
        amp_cuda_unscale_check(&g->hist, &g->dev->inv_scale, &g->dev->found, stream_of(an), err,
                               sizeof err) != AMP_OK)
        fail(an, err);
}

/* Before the first layer's update: decide on the device, keep what a skipped
 * step must put back. */
static void decide(amp_net *an)
{
    amp_gpu_net *g = gpu_of(an);
    char err[AMP_MSG_LEN];
    /* The gate is the decision (an overflow or a non-finite loss). */
    if (amp_cuda_decide(g->dev, an->scaler->params, an->owns_scaler, (unsigned int)an->loss_bad,
                        stream_of(an), err, sizeof err) != AMP_OK ||
        amp_cuda_gated_copy(&g->params, &g->dev->skipped, 1, stream_of(an), err, sizeof err) !=
            AMP_OK)
        fail(an, err);
}

/* After the last layer's update: undo a skipped step, publish the outcome. */
static void step_end(amp_net *an)
{
    amp_gpu_net *g = gpu_of(an);
    char err[AMP_MSG_LEN];
    amp_status st = amp_cuda_gated_copy(&g->params, &g->dev->skipped, 0, stream_of(an), err,
                                        sizeof err);
    if (st == AMP_OK)
        st = amp_cuda_gated_copy(&g->hist, &g->dev->skipped, 0, stream_of(an), err, sizeof err);
    if (st == AMP_OK)
        st = amp_cuda_gated_copy(&g->states, &g->dev->skipped, 0, stream_of(an), err, sizeof err);
    if (st == AMP_OK)
        st = AMP_CUDA_CHECK(cudaMemcpyAsync(g->mirror, g->dev, sizeof *g->mirror,
                                            cudaMemcpyDeviceToHost, stream_of(an)),
                            err, sizeof err);
    if (st == AMP_OK)
        st = AMP_CUDA_CHECK(cudaEventRecord(g->copied, stream_of(an)), err, sizeof err);
    if (st != AMP_OK) {
        fail(an, err);
        return;
    }
    g->in_flight = 1;
}

static void end_mid_batch(amp_net *an)
{
    amp_gpu_net *g = gpu_of(an);
    char err[AMP_MSG_LEN];
    if (g && g->dev &&
        amp_cuda_unscale_check(&g->hist, &g->dev->inv_scale, NULL, stream_of(an), err,
                               sizeof err) != AMP_OK)
        fprintf(stderr, "amp: GPU: %s\n", err);
}

/* DARKNET_AMP_INJECT on the device (a test aid: one small blocking copy). */
static void poke(amp_net *an, int k, size_t i, float value)
{
    cudaMemcpy(gpu_of(an)->grads[k] + i, &value, sizeof(float), cudaMemcpyHostToDevice);
}

static void poke_delta(amp_net *an, const layer *l, size_t i, float value)
{
    (void)an;
    if (l->delta_gpu) cudaMemcpy(l->delta_gpu + i, &value, sizeof(float), cudaMemcpyHostToDevice);
}

/* ---- layers (layers.c) ---- */

static amp_status layer_install(amp_layer *al, layer *l, char *err, size_t errlen)
{
    amp_gpu_half_ctx *ctx = gpu_of(al->owner)->half;
    AMP_FORWARD_IF_ERROR(amp_cuda_layer_install(al, l, ctx, err, errlen));
    al->io = amp_cuda_layer_io(al, l, ctx); /* what the activation plan may store around it */
    return AMP_OK;
}

static amp_status layer_fallback(amp_layer *al, layer *l, char *err, size_t errlen)
{
    al->io = AMP_IO_FLOAT32;
    return amp_cuda_layer_fallback(al, l, gpu_of(al->owner)->half, err, errlen);
}

/* ---- DARKNET_AMP_PROFILE (profile.c) ---- */

static int prof_begin(amp_net *an, amp_layer *al, amp_prof_what what)
{
    return gpu_of(an) ? amp_gpu_prof_begin(gpu_of(an)->prof, al, what) : -1;
}

static void prof_end(amp_net *an, int handle)
{
    if (gpu_of(an)) amp_gpu_prof_end(gpu_of(an)->prof, handle);
}

static void prof_collect(amp_net *an)
{
    if (gpu_of(an)) amp_gpu_prof_collect(gpu_of(an)->prof, an);
}

/* ---- the network ---- */

/* Warns or refuses by compute capability (docs/gpu.md: bfloat16 needs 8.0). */
static amp_status check_device(amp_net *an, char *err, size_t errlen)
{
    struct cudaDeviceProp p;
    int dev = an->net->gpu_index;
    AMP_FORWARD_IF_ERROR(AMP_CUDA_CHECK(cudaGetDeviceProperties(&p, dev), err, errlen));
    amp_dtype dtype = an->scaler->opt.dtype;
    const char *cfg = an->cfgfile[0] ? an->cfgfile : "network";
    AMP_RETURN_ERROR_IF(dtype == AMP_DTYPE_BFLOAT16 && p.major < 8, AMP_ERR_DEVICE, err, errlen,
                        "%s: amp_dtype=bfloat16 needs a GPU of compute capability 8.0 or newer; "
                        "GPU %d (%s) is %d.%d: use amp_dtype=float16 (tensor cores from 7.0) or "
                        "amp=0",
                        cfg, dev, p.name, p.major, p.minor);
    if (dtype == AMP_DTYPE_FLOAT16 && p.major < 7)
        fprintf(stderr, "amp: warning: GPU %d (%s) is compute capability %d.%d, without tensor "
                        "cores: float16 will not be faster than float32 here (amp=0)\n",
                dev, p.name, p.major, p.minor);
    return AMP_OK;
}

static amp_status net_init(amp_net *an, char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(!an->owns_scaler, AMP_ERR_INVALID, err, errlen,
                        "amp_attach: an explicit scaler (amp_scaler_create) is not supported on "
                        "the GPU, where the scale is kept on the device (docs/gpu.md); attach "
                        "with amp_attach_config or amp=1 in the cfg");
    AMP_FORWARD_IF_ERROR(check_device(an, err, errlen));
    amp_gpu_net *g = calloc(1, sizeof *g);
    AMP_RETURN_ERROR_IF(!g, AMP_ERR_NOMEM, err, errlen, "amp: out of memory attaching to %s",
                        an->cfgfile);
    an->bk = g;
    AMP_FORWARD_IF_ERROR(amp_cuda_build_tables(an, err, errlen));
    amp_gpu_state init;
    memset(&init, 0, sizeof init);
    init.st = an->scaler->state;
    init.batch_scale = an->scaler->state.scale;
    init.inv_scale = amp_inv_scale(an->scaler->state.scale);
    AMP_FORWARD_IF_ERROR(AMP_CUDA_CHECK(cudaMalloc((void **)&g->dev, sizeof *g->dev), err, errlen));
    AMP_FORWARD_IF_ERROR(AMP_CUDA_CHECK(
        cudaMemcpy(g->dev, &init, sizeof init, cudaMemcpyHostToDevice), err, errlen));
    AMP_FORWARD_IF_ERROR(
        AMP_CUDA_CHECK(cudaMallocHost((void **)&g->mirror, sizeof *g->mirror), err, errlen));
    AMP_FORWARD_IF_ERROR(AMP_CUDA_CHECK(
        cudaEventCreateWithFlags(&g->copied, cudaEventDisableTiming), err, errlen));
    g->half = amp_gpu_half_ctx_new();
    AMP_RETURN_ERROR_IF(!g->half, AMP_ERR_NOMEM, err, errlen,
                        "amp: out of memory attaching to %s", an->cfgfile);
    g->half->dev = g->dev;
    /* DARKNET_AMP_GPU_WGRAD=cudnn: the half weight gradient, to measure it
     * against the default (docs/gpu.md); anything but cublas or cudnn refused */
    const char *wg = getenv("DARKNET_AMP_GPU_WGRAD");
    AMP_RETURN_ERROR_IF(wg && *wg && strcmp(wg, "cudnn") && strcmp(wg, "cublas"), AMP_ERR_INVALID,
                        err, errlen,
                        "amp: DARKNET_AMP_GPU_WGRAD=%.32s: expected cublas (the default: the "
                        "weight gradient in float32) or cudnn (cuDNN's, in half)",
                        wg);
    g->half->wgrad_cudnn = wg && !strcmp(wg, "cudnn");
    /* The activation plan on the device (activations.c), unless
     * DARKNET_AMP_GPU_PLAN=float32 keeps every tensor between layers in
     * darknet's float32 arrays (the GPU path before the plan) */
    AMP_FORWARD_IF_ERROR(
        amp_gpu_plan_setting(getenv("DARKNET_AMP_GPU_PLAN"), &g->half->plan, err, errlen));
    if (!g->half->plan) an->plan_off = "DARKNET_AMP_GPU_PLAN=float32";
    if (an->env.profile) g->prof = amp_gpu_prof_new(); /* NULL: not timed */
    if (an->comm) { /* data-parallel: NCCL's communicator, its id from rank 0 over MPI */
#ifdef AMP_HAVE_NCCL
        ncclUniqueId id;
        memset(&id, 0, sizeof id);
        const int made = an->comm->rank != 0 || ncclGetUniqueId(&id) == ncclSuccess;
        AMP_RETURN_ERROR_IF(an->comm->bcast(&id, sizeof id, 0) != 0 || !made, AMP_ERR_DEVICE, err,
                            errlen, "amp: %s: rank %d: no NCCL id (ncclGetUniqueId or its "
                            "broadcast failed)", an->cfgfile, an->comm->rank);
        ncclResult_t r = ncclCommInitRank(&g->nccl, an->comm->size, id, an->comm->rank);
        AMP_RETURN_ERROR_IF(r != ncclSuccess, AMP_ERR_DEVICE, err, errlen,
                            "amp: %s: rank %d: ncclCommInitRank failed: %s", an->cfgfile,
                            an->comm->rank, ncclGetErrorString(r));
#else
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "amp: %s: a data-parallel launch of a GPU network needs NCCL, and this "
                         "darknet-amp was built without it (docs/distributed.md)",
                         an->cfgfile);
#endif
    }
    return AMP_OK;
}

static void net_free(amp_net *an)
{
    amp_gpu_net *g = gpu_of(an);
    if (!g) return;
    cudaDeviceSynchronize(); /* nothing of ours in flight when freed */
    /* darknet's float32 arrays back where the plan stored half ones: its own
     * layers run again after a detach, and free them */
    if (an->layers) amp_cuda_activations_release(an);
    amp_gpu_half_ctx_free(g->half);
    amp_gpu_prof_free(g->prof);
    amp_mt_table_free(&g->hist);
    amp_mt_table_free(&g->params);
    amp_mt_table_free(&g->states);
    amp_mt_table_free(&g->stats);
    cudaFree(g->packed);
    cudaFree(g->saved);
    cudaFree(g->param_saved);
    cudaFree(g->states_saved);
    cudaFree(g->dev);
    if (g->mirror) cudaFreeHost(g->mirror);
    if (g->yolo_in) cudaFreeHost(g->yolo_in);
    if (g->yolo_delta) cudaFreeHost(g->yolo_delta);
    if (g->copied) cudaEventDestroy(g->copied);
    free(g->grads);
#ifdef AMP_HAVE_NCCL
    if (g->nccl) ncclCommDestroy(g->nccl);
#endif
    free(g);
    an->bk = NULL;
}

/* backend.h's memory, on the device: the batch-start histories, the
 * parameters (and Adam's moments) set aside for a skipped step, the forward
 * states, the half weight copies; the shared scratch and cuDNN workspace. */
static void memory(const amp_net *an, double *copies, double *workspaces)
{
    const amp_gpu_net *g = gpu_of(an);
    const double n = (double)an->nparams;
    *copies = (n + (an->net->adam ? 3 : 1) * n + (double)an->nstate_elems) * sizeof(float);
    for (int i = 0; i < an->net->n; ++i) {
        const amp_layer *al = &an->layers[i];
        for (int k = -1; k < al->nsubs; ++k) {
            const amp_layer *r = k < 0 ? al : &al->subs[k];
            if (r->bk && amp_gpu_half_of(r)->w) *copies += (double)amp_gpu_half_of(r)->nw * 2;
        }
    }
    *workspaces = 0;
    if (!g || !g->half) return;
    const amp_gpu_half_ctx *x = g->half;
    const amp_gpu_scratch *s[] = {&x->x, &x->y, &x->dw, &x->dx, &x->ws, &x->t, &x->col, &x->dyc,
                                  &x->tw};
    for (size_t k = 0; k < sizeof s / sizeof s[0]; ++k) *workspaces += (double)s[k]->bytes;
}

/* backend.h's supports: convolutions and deconvolutions through cuDNN,
 * connected layers through cuBLAS, and the recurrent layers whose
 * sub-layers are connected (rnn, gru, lstm; not crnn's convolutions). No
 * half form for locally connected layers. The data-movement kinds' half
 * forms (maxpool, route, upsample, shortcut) run only under the activation
 * plan (activations.c; the default, DARKNET_AMP_GPU_PLAN=float32 turns it off): here they
 * are not offered, so the kinds' table tests them in float32. */
static int supports(const amp_layer_kind *k, amp_dtype dtype)
{
    if (!k || dtype == AMP_DTYPE_FLOAT32) return 0;
    switch (k->type) {
    case CONVOLUTIONAL:
    case DECONVOLUTIONAL:
    case CONNECTED:
    case RNN:
    case GRU:
    case LSTM: return 1;
    default: return 0;
    }
}

const amp_backend_ops amp_cuda_backend = {
    .version = AMP_BACKEND_VERSION,
    .name = "CUDA",
    .default_dtype = AMP_DTYPE_FLOAT16,
    .host_timing = 0,
    .slots = amp_cuda_slots,
    .supports = supports,
    .net_init = net_init,
    .net_free = net_free,
    .layer_install = layer_install,
    .layer_free = amp_cuda_layer_free,
    .begin_batch = begin_batch,
    .scale_loss = scale_loss,
    .rescale = rescale,
    .unscale = unscale,
    .decide = decide,
    .step_end = step_end,
    .sync = sync_state,
    .push_state = push_state,
    .end_mid_batch = end_mid_batch,
    .poke = poke,
    .poke_delta = poke_delta,
#ifdef AMP_HAVE_NCCL
    .reduce = reduce,
    .average_statistics = average_statistics,
#endif
    .pull = pull,
    .push = push,
    .layer_fallback = layer_fallback,
    .activations = amp_cuda_activations,
    .memory = memory,
    .activations_release = amp_cuda_activations_release,
    .nonfinite_output = amp_cuda_nonfinite_output,
    .prof_begin = prof_begin,
    .prof_end = prof_end,
    .prof_collect = prof_collect,
};

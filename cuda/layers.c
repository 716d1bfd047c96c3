/* The CUDA backend's layers (backend.h's layer members): a half layer's
 * path through cuDNN or cuBLAS, the recurrent layers' sub-layers, the float32
 * connected layers' gradient clip at the scale, the fallback to darknet's
 * own GPU layer, and the search for the layer whose output overflowed. */
#include "half_gpu.h"
#include "cuda_check.h"
#include "network.h" /* get_layer_string */
#include "activations.h" /* activate_array_gpu */
#include "blas.h"        /* copy_gpu */
#include "yolo_layer.h"  /* forward_yolo_layer_gpu */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

amp_slots amp_cuda_slots(layer *l)
{
    return (amp_slots){&l->forward_gpu, &l->backward_gpu, &l->update_gpu};
}

void amp_cuda_layer_free(amp_layer *al)
{
    if (al->subs) amp_subs_free(al, amp_cuda_slots, amp_cuda_layer_free);
    amp_gpu_half *h = amp_gpu_half_of(al);
    if (!h) return;
    al->detail = NULL; /* it lives in the convolution's record */
    amp_cudnn_conv_free(h);
    if (h->w) cudaFree(h->w);
    if (h->x_h) cudaFree(h->x_h);
    free(h);
    al->bk = NULL;
}

/* The half path of a convolutional, connected or deconvolutional layer. */
static amp_status half_path(amp_layer *al, layer *l, amp_gpu_half_ctx *ctx, char *why,
                            size_t whylen)
{
    AMP_RETURN_ERROR_IF(l->type != CONVOLUTIONAL && l->type != CONNECTED &&
                            l->type != DECONVOLUTIONAL,
                        AMP_ERR_INVALID, why, whylen, "no GPU half path for [%s]",
                        get_layer_string(l->type));
    const size_t nw = l->type == CONNECTED ? (size_t)l->inputs * l->outputs : (size_t)l->nweights;
    amp_status st = amp_gpu_half_new(al, ctx, nw ? nw : 1, why, whylen);
    if (st == AMP_OK)
        st = l->type == CONVOLUTIONAL ? amp_cudnn_conv_setup(al, l, why, whylen)
             : l->type == CONNECTED   ? amp_cublas_connected_setup(al, l, why, whylen)
                                      : amp_cublas_deconv_setup(al, l, why, whylen);
    if (st != AMP_OK) {
        amp_cuda_layer_free(al);
        return st;
    }
    if (l->type == CONVOLUTIONAL) {
        al->forward = amp_cudnn_conv_forward;
        al->backward = amp_cudnn_conv_backward;
        al->label = "cuDNN"; /* its setup wrote the details (al->detail) */
    } else if (l->type == CONNECTED) {
        al->forward = amp_cublas_connected_forward;
        al->backward = amp_cublas_connected_backward;
        al->label = "cuBLAS";
    } else {
        al->forward = amp_cublas_deconv_forward;
        al->backward = amp_cublas_deconv_backward;
        al->label = "cuBLAS";
    }
    return AMP_OK;
}

static amp_status install_sub_half(amp_layer *sa, layer *sub, void *ctx, char *why, size_t whylen)
{
    return half_path(sa, sub, ctx, why, whylen);
}

/* A connected sub-layer of rnn, gru or lstm that stays float32: darknet's
 * backward with the gradient clip at the scale. */
static amp_status install_sub_clip(amp_layer *sa, layer *sub, void *ctx, char *why, size_t whylen)
{
    AMP_RETURN_ERROR_IF(sub->type != CONNECTED, AMP_ERR_INVALID, why, whylen, "a [%s] sub-layer",
                        get_layer_string(sub->type));
    AMP_FORWARD_IF_ERROR(amp_gpu_half_new(sa, ctx, 0, why, whylen));
    sa->backward = amp_connected_backward_f32;
    return AMP_OK;
}

static int recurrent(const layer *l)
{
    const amp_layer_kind *k = amp_kind_of(l->type);
    return k && k->role == AMP_ROLE_RECURRENT;
}

/* Pinned host staging of n floats for a yolo layer's copies (the network's
 * two buffers, grown as needed); 0 where page-locked memory is refused,
 * said once, and not asked for again (each try costs a blocking call). */
static int yolo_staging(amp_gpu_net *g, size_t n)
{
    if (n <= g->yolo_n) return 1;
    if (g->yolo_refused) return 0;
    if (g->yolo_in) cudaFreeHost(g->yolo_in);
    if (g->yolo_delta) cudaFreeHost(g->yolo_delta);
    g->yolo_in = g->yolo_delta = NULL;
    g->yolo_n = 0;
    if (cudaMallocHost((void **)&g->yolo_in, n * sizeof(float)) != cudaSuccess ||
        cudaMallocHost((void **)&g->yolo_delta, n * sizeof(float)) != cudaSuccess) {
        if (g->yolo_in) cudaFreeHost(g->yolo_in);
        g->yolo_in = NULL;
        (void)cudaGetLastError();
        g->yolo_refused = 1;
        fprintf(stderr, "amp: %zu MB of page-locked host memory refused: the yolo loss's copies "
                        "go through darknet's pageable arrays\n",
                2 * n * sizeof(float) >> 20);
        return 0;
    }
    g->yolo_n = n;
    return 1;
}

/* darknet's forward_yolo_layer_gpu, its host loss with the batch's images in
 * parallel (plugin/yolo.c, bit for bit darknet's): the logistic on the
 * device, the activated output to the host, the deltas back. The copies go
 * through pinned memory (darknet's go through its pageable arrays: the
 * layer before's host output, which darknet uses as the staging, and the
 * layer's host delta), two copies of batch x outputs floats a layer and a
 * step (yolov3 at batch 64: 232 MB each way over its three yolo layers);
 * the same number of blocking copies as darknet's. The loss works on the
 * staging in place (no host copy of the output; darknet copies it into the
 * layer's host output). In training on a GPU nothing reads the host delta
 * or output: the loss's deltas live on the device. */
static void yolo_forward(layer l, network net)
{
    if (!net.train || l.onlyforward) {
        forward_yolo_layer_gpu(l, net);
        return;
    }
    const amp_layer *al = l.hook_data;
    amp_gpu_net *g = al ? gpu_of(al->owner) : NULL;
    const size_t n = (size_t)l.batch * l.outputs;
    /* darknet's activation in three operations: its logistic kernel over
     * the whole output, the box sizes copied back (amp_yolo_kept_of); with
     * new_coords none (the convolution before applied the logistic) */
    copy_gpu(l.batch * l.inputs, net.input_gpu, 1, l.output_gpu, 1);
    cudaError_t e = cudaSuccess;
    if (!l.new_coords) {
        activate_array_gpu(l.output_gpu, l.batch * l.outputs, LOGISTIC);
        const amp_yolo_kept kept = amp_yolo_kept_of(l.w, l.h, l.n, l.classes, l.batch);
        e = cudaMemcpy2DAsync(l.output_gpu + kept.first, kept.pitch * sizeof(float),
                              net.input_gpu + kept.first, kept.pitch * sizeof(float),
                              kept.width * sizeof(float), kept.rows, cudaMemcpyDeviceToDevice,
                              0);
    }
    if (e != cudaSuccess) { /* the step's failure, which stops training */
        (void)cudaGetLastError(); /* not darknet's next check_error's to exit on */
        if (al)
            amp_net_fail(al->owner, AMP_ERR_DEVICE, "amp: GPU: yolo layer %d: its box sizes "
                         "copied back: %s", al->index, cudaGetErrorString(e));
        else
            fprintf(stderr, "amp: GPU: yolo layer: its box sizes copied back: %s\n",
                    cudaGetErrorString(e));
        return;
    }
    if (!g || !yolo_staging(g, n)) { /* darknet's pageable staging */
        cuda_pull_array(l.output_gpu, net.input, l.batch * l.inputs);
        amp_yolo_forward(l, net, 0);
        cuda_push_array(l.delta_gpu, l.delta, n);
        return;
    }
    cuda_pull_array(l.output_gpu, g->yolo_in, n);
    network staged = net;
    staged.input = g->yolo_in;
    layer into = l; /* the loss made in the staging, in place */
    into.output = g->yolo_in;
    into.delta = g->yolo_delta;
    amp_yolo_forward(into, staged, 0);
    cuda_push_array(l.delta_gpu, g->yolo_delta, n);
    /* darknet's host output, which nothing reads in training but the cause
     * of a non-finite loss (loss_cause.c): only then */
    if (!isfinite(*l.cost)) memcpy(l.output, g->yolo_in, n * sizeof(float));
}

amp_status amp_cuda_layer_install(amp_layer *al, layer *l, amp_gpu_half_ctx *ctx, char *err,
                                  size_t errlen)
{
    if (l->type == YOLO && al->forward == forward_yolo_layer_gpu) al->forward = yolo_forward;
    char why[AMP_MSG_LEN];
    if (al->precision == AMP_PRECISION_HALF) {
        amp_status st = AMP_ERR_INVALID;
        if (l->forward_gpu && l->backward_gpu) {
            /* a recurrent layer's own pointers stay darknet's: it calls its sub-layers' */
            st = recurrent(l) ? amp_subs_install(al, l, amp_cuda_slots, install_sub_half, amp_cuda_layer_free, ctx,
                                                 why, sizeof why)
                              : half_path(al, l, ctx, why, sizeof why);
            if (st != AMP_OK && l->type != LOCAL) /* the types with a GPU half path */
                fprintf(stderr, "amp: layer %d [%s]: float32 on the GPU: %s\n", al->index,
                        get_layer_string(l->type), why);
        }
        if (st != AMP_OK) al->precision = AMP_PRECISION_FALLBACK;
    }
    /* A float32 layer whose GPU backward clips its gradient clips at the scale. */
    if (al->backward == al->orig_backward && !al->subs && l->backward_gpu) {
        amp_status st = AMP_OK;
        if (l->type == CONNECTED) {
            st = amp_gpu_half_new(al, ctx, 0, why, sizeof why);
            al->backward = amp_connected_backward_f32;
        } else if (l->type == RNN || l->type == GRU || l->type == LSTM) {
            st = amp_subs_install(al, l, amp_cuda_slots, install_sub_clip, amp_cuda_layer_free, ctx, why,
                                  sizeof why);
        }
        AMP_RETURN_ERROR_IF(st != AMP_OK, st, err, errlen, "amp: layer %d [%s]: %s", al->index,
                            get_layer_string(l->type), why);
    }
    return AMP_OK;
}

/* backend.h's layer_fallback: darknet's own float32 GPU layer again (a
 * connected layer keeps its gradient clip at the scale, as one that was
 * float32 from the start). */
amp_status amp_cuda_layer_fallback(amp_layer *al, layer *l, amp_gpu_half_ctx *ctx, char *err,
                                   size_t errlen)
{
    AMP_RETURN_ERROR_IF(al->subs, AMP_ERR_INVALID, err, errlen,
                        "amp: layer %d: a recurrent layer's half sub-layers do not fall back",
                        al->index);
    amp_cuda_layer_free(al);
    al->forward = al->orig_forward;
    al->backward = al->orig_backward;
    al->label = NULL;
    al->detail = NULL;
    if (l->type == CONNECTED) {
        char why[AMP_MSG_LEN];
        const amp_status st = amp_gpu_half_new(al, ctx, 0, why, sizeof why);
        AMP_RETURN_ERROR_IF(st != AMP_OK, st, err, errlen, "amp: layer %d [%s]: %s", al->index,
                            get_layer_string(l->type), why);
        al->backward = amp_connected_backward_f32;
    }
    return AMP_OK;
}

/* Scans n floats of device memory into *s; 0, or -1 (said) when CUDA fails. */
static int scan_device(amp_overflow_scan *dev, const float *x, size_t n, amp_overflow_scan *s)
{
    char err[AMP_MSG_LEN];
    cudaStream_t st = 0; /* darknet's stream */
    if (AMP_CUDA_CHECK(cudaMemsetAsync(dev, 0, sizeof *dev, st), err, sizeof err) != AMP_OK ||
        amp_cuda_overflow_scan(x, n, dev, st, err, sizeof err) != AMP_OK ||
        AMP_CUDA_CHECK(cudaMemcpyAsync(s, dev, sizeof *s, cudaMemcpyDeviceToHost, st), err,
                       sizeof err) != AMP_OK ||
        AMP_CUDA_CHECK(cudaStreamSynchronize(st), err, sizeof err) != AMP_OK) {
        fprintf(stderr, "amp: GPU: looking for the layer that overflowed: %s\n", err);
        return -1;
    }
    return 0;
}

/* The same for n half values, widened into a buffer of their own. */
static int scan_half(amp_overflow_scan *dev, const uint16_t *h, size_t n, amp_dtype dt,
                     amp_overflow_scan *s)
{
    char err[AMP_MSG_LEN];
    float *x = NULL;
    if (AMP_CUDA_CHECK(cudaMalloc((void **)&x, n * sizeof(float)), err, sizeof err) != AMP_OK ||
        amp_cuda_from_half(h, x, n, dt, 0, err, sizeof err) != AMP_OK) {
        fprintf(stderr, "amp: GPU: looking for the layer that overflowed: %s\n", err);
        if (x) cudaFree(x);
        return -1;
    }
    const int r = scan_device(dev, x, n, s);
    cudaFree(x);
    return r;
}

/* backend.h's nonfinite_output, after a non-finite loss only: the first
 * layer up to last whose output (a batch-normalised layer's: its input to
 * batch-norm first, where a half overflow shows as inf) holds an inf or NaN,
 * scanned on the device, one layer and one wait at a time (such a step is
 * already lost; a healthy step never gets here). */
int amp_cuda_nonfinite_output(amp_net *an, int last, amp_overflow_scan *scan, int *params_finite)
{
    network *net = an->net;
    amp_overflow_scan *dev = NULL;
    int found = -1;
    if (cudaMalloc((void **)&dev, sizeof *dev) != cudaSuccess) return -1;
    for (int i = 0; i <= last && i < net->n && found < 0; ++i) {
        const layer *l = &net->layers[i];
        const size_t n = (size_t)l->outputs * l->batch;
        const amp_layer *al = &an->layers[i];
        const amp_gpu_half *h = al->bk ? amp_gpu_half_of(al) : NULL;
        const amp_dtype dt = an->scaler->opt.dtype;
        amp_overflow_scan s = {0, 0.0f};
        /* the activation plan's half tensors widened first (activations.c) */
        if (h && h->x_h ? scan_half(dev, h->x_h, n, dt, &s) != 0
                        : l->batch_normalize && l->x_gpu && scan_device(dev, l->x_gpu, n, &s) != 0)
            break;
        if (!s.nonfinite && (al->out_half ? scan_half(dev, (const uint16_t *)l->output_gpu, n, dt, &s) != 0
                                          : l->output_gpu && scan_device(dev, l->output_gpu, n, &s) != 0))
            break;
        if (!s.nonfinite) continue;
        amp_overflow_scan p = {0, 0.0f}, q;
        size_t sizes[3];
        amp_param_sizes(l, &sizes[0], &sizes[1], &sizes[2]);
        const float *arrays[3] = {l->weights_gpu, l->biases_gpu, l->scales_gpu};
        for (int k = 0; k < 3; ++k) {
            q = (amp_overflow_scan){0, 0.0f};
            if (arrays[k] && sizes[k] && scan_device(dev, arrays[k], sizes[k], &q) == 0)
                amp_overflow_merge(&p, &q);
        }
        *scan = s;
        *params_finite = p.nonfinite == 0;
        found = i;
    }
    cudaFree(dev);
    return found;
}

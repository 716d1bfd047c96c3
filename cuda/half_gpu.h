/* The CUDA backend's private header: its layers. Half-precision execution of
 * convolutional (cuDNN), connected and deconvolutional (cuBLAS) layers on the
 * GPU, and of the sub-layers of recurrent ones: the CPU emulation's rounding
 * points (plugin/cpu/emulated.c) with the device's kernels; and the float32
 * connected layers whose gradient clip must act at the loss scale.
 *
 * State: per layer (amp_layer.bk), the half copy of its weights (refreshed
 * when the network's weights_version moves: every step, taken or skipped,
 * since the host does not know which; every weights load) and, for
 * convolutions, the cuDNN descriptors and algorithms for the shape last seen.
 * Per network, the scratch that a layer needs only during one forward or
 * backward call (half input, half output or incoming gradient, weight and
 * data gradients, cuDNN workspace): darknet runs layers one at a time on one
 * stream, so they share it. Every buffer only grows; growing frees the old one
 * (cudaFree waits for the device), which happens at attach and when darknet
 * resizes the network, never in a step at a fixed shape.
 *
 *   backend.c    the backend table (plugin/backend.h), which path a layer gets
 *   half_state.c scratch and half weight copies
 *   half_conv.c  convolutions through cuDNN
 *   half_gemm.c  connected and deconvolutional layers through cuBLAS
 *   gpu_plan.c   their device-free decisions (host-tested)
 */
#ifndef AMP_HALF_GPU_H
#define AMP_HALF_GPU_H

#include "backend.h"
#include "amp_cuda.h" /* amp_gpu_state */
#include "gpu_plan.h" /* amp_gpu_storage */

#include <stddef.h>
#include <stdint.h>

typedef struct amp_gpu_scratch {
    void *p;
    size_t bytes;
} amp_gpu_scratch;

/* One network's shared scratch, and where its loss scale lives. */
typedef struct amp_gpu_half_ctx {
    const amp_gpu_state *dev; /* the device state: the batch's scale for the clip */
    amp_gpu_scratch x;   /* half input */
    amp_gpu_scratch y;   /* half output (forward) or incoming gradient (backward) */
    amp_gpu_scratch dw;  /* weight gradient: float32 (cuBLAS layers), half (wgrad_cudnn) */
    amp_gpu_scratch dx;  /* data gradient: half (cuDNN) or float32 (cuBLAS) */
    amp_gpu_scratch ws;  /* cuDNN workspace */
    amp_gpu_scratch t;   /* float32: a deconvolution's incoming gradient, rounded to half */
    amp_gpu_scratch col; /* half: a convolution's im2col columns for its weight gradient */
    amp_gpu_scratch dyc; /* half: its incoming gradient by channel (wgrad_index.h) */
    int wgrad_cudnn;     /* DARKNET_AMP_GPU_WGRAD=cudnn: cuDNN's half backward-filter, scaled
                            (a measurement of the alternative; half_conv.c) */
    int plan;            /* the activation plan on the device (DARKNET_AMP_GPU_PLAN unset or half)
                            (activations.c) */
    amp_gpu_scratch tw;  /* float32: the half tail's channel sums (tail.cu) */
    int own_deltas;      /* each half delta its own storage, not the shared pool (the
                            tests: every delta read after a backward) */
} amp_gpu_half_ctx;

struct amp_cudnn_conv; /* half_conv.c */

/* A layer's record (amp_layer.bk). */
typedef struct amp_gpu_half {
    amp_gpu_half_ctx *ctx;
    amp_dtype dtype;
    uint16_t *w;          /* half copy of the weights; NULL for a float32 layer */
    size_t nw;
    unsigned long w_version;
    int w_k, w_c, w_hw;   /* with w_nhwc: the filters, channels per group, window */
    int w_nhwc;           /* the copy in KRSC order (cuDNN's NHWC filters), else darknet's KCRS */
    struct amp_cudnn_conv *conv;
    /* The activation plan (activations.c): */
    int planned;          /* a convolution on NHWC half tensors (half_conv.c's planned form;
                             its descriptors set up again when this changes) */
    uint16_t *x_h;        /* its half batch-norm input (x_half with a half output), x_n values */
    size_t x_n;
    uint16_t *delta_h;    /* its half output's delta, in the network's pool */
} amp_gpu_half;

static inline amp_gpu_half *amp_gpu_half_of(const amp_layer *al)
{
    return (amp_gpu_half *)al->bk;
}

/* half_state.c */
amp_gpu_half_ctx *amp_gpu_half_ctx_new(void);
void amp_gpu_half_ctx_free(amp_gpu_half_ctx *ctx);
/* At least bytes in s (grown, never shrunk), or the status and why. */
amp_status amp_gpu_reserve(amp_gpu_scratch *s, size_t bytes, char *err, size_t errlen);
/* The half weights of al, converted from w_gpu when stale (*w), or the status. */
amp_status amp_gpu_half_weights(amp_layer *al, const float *w_gpu, const uint16_t **w, char *err,
                                size_t errlen);
/* A record for al: dtype, the half weight copy for nw weights (0: none). */
amp_status amp_gpu_half_new(amp_layer *al, amp_gpu_half_ctx *ctx, size_t nw, char *why,
                            size_t whylen);

/* A layer callback (darknet's void forward/backward) NAME that runs BODY, a
 * static amp_status BODY(amp_layer *, layer, network, char *err, size_t): a
 * failure becomes the network's error, which stops training; after one, the
 * layers do nothing. */
#define AMP_GPU_LAYER_CALLBACK(name, body)                                                        \
    void name(layer l, network net)                                                               \
    {                                                                                             \
        amp_layer *al = l.hook_data;                                                              \
        char err[AMP_MSG_LEN];                                                                    \
        if (al->owner->error[0]) return;                                                          \
        AMP_NET_RETURN_IF_ERROR(al->owner, body(al, l, net, err, sizeof err), err);               \
    }

/* half_conv.c */
amp_status amp_cudnn_conv_setup(amp_layer *al, const layer *l, char *why, size_t whylen);
void amp_cudnn_conv_free(amp_gpu_half *h);
void amp_cudnn_conv_forward(struct layer l, struct network net);
void amp_cudnn_conv_backward(struct layer l, struct network net);

/* half_gemm.c */
/* darknet's row-major gemm_gpu arguments, half A and B, float32 C; beta 0
 * (C written) or 1 (C accumulated in float32: a sum over the batch, or a
 * weight gradient added into its history). */
amp_status amp_gpu_gemm_half(amp_dtype dtype, int ta, int tb, int m, int n, int k, const void *a,
                             int lda, const void *b, int ldb, float beta, float *c, int ldc,
                             char *err, size_t errlen);
amp_status amp_cublas_connected_setup(amp_layer *al, const layer *l, char *why, size_t whylen);
void amp_cublas_connected_forward(struct layer l, struct network net);
void amp_cublas_connected_backward(struct layer l, struct network net);
amp_status amp_cublas_deconv_setup(amp_layer *al, const layer *l, char *why, size_t whylen);
void amp_cublas_deconv_forward(struct layer l, struct network net);
void amp_cublas_deconv_backward(struct layer l, struct network net);
/* darknet's float32 backward_connected_layer_gpu with the clip at the scale */
void amp_connected_backward_f32(struct layer l, struct network net);

/* profile.c: DARKNET_AMP_PROFILE's intervals on the device (backend.h's
 * prof_begin, prof_end, prof_collect; a network's, made only with the profile). */
typedef struct amp_gpu_prof amp_gpu_prof;
amp_gpu_prof *amp_gpu_prof_new(void);
void amp_gpu_prof_free(amp_gpu_prof *p);
int amp_gpu_prof_begin(amp_gpu_prof *p, amp_layer *al, amp_prof_what what);
void amp_gpu_prof_end(amp_gpu_prof *p, int handle);
void amp_gpu_prof_collect(amp_gpu_prof *p, amp_net *an);

/* Runs call (an amp_status expression), returning its failure; under
 * DARKNET_AMP_PROFILE timed as what (AMP_PROF_CONVERT, AMP_PROF_KERNEL) in
 * half layer al's record. */
#define AMP_GPU_RUN(al, what, call)                                                               \
    do {                                                                                          \
        amp_net *an_ = (al)->owner;                                                               \
        amp_prof_mark m_ = {0, -1};                                                               \
        if (an_->env.profile) m_ = amp_prof_start(an_, (al), (what));                             \
        const amp_status st_ = (call);                                                            \
        if (an_->env.profile) amp_prof_stop(an_, (al), (what), m_);                               \
        AMP_FORWARD_IF_ERROR(st_);                                                                \
    } while (0)

/* The backend's per-network state (amp_net.bk), its tables built by
 * tables.c, its steps run by backend.c. */
typedef struct amp_gpu_net {
    amp_gpu_state *dev;     /* device */
    amp_gpu_state *mirror;  /* pinned host copy, written by the last step */
    cudaEvent_t copied;     /* recorded after that copy */
    int in_flight;          /* a copy not yet read */
    amp_mt_table hist;      /* x: *_updates_gpu, y: its copy from the batch start */
    amp_mt_table params;    /* x: parameters and Adam moments, y: copy for a skipped step */
    amp_mt_table states;    /* x: forward states (an->states), y: copy from the batch start */
    amp_mt_table stats;     /* data-parallel: x: batch-norm statistics, y: their place in packed */
    float *packed;          /* the statistics side by side, for one NCCL sum a step */
    size_t npacked;
    float *saved, *param_saved, *states_saved;
    float **grads;          /* per an->tensors entry: its device gradient */
    amp_gpu_half_ctx *half; /* scratch shared by the layers */
    amp_gpu_prof *prof;     /* DARKNET_AMP_PROFILE's device intervals, or NULL */
    uint16_t *deltas;       /* the activation plan's pool of half deltas (deltas_n values) */
    size_t deltas_n;
    float *yolo_in, *yolo_delta; /* pinned host staging of a yolo layer's loss (layers.c):
                                    its activated output and its deltas, yolo_n floats each */
    size_t yolo_n;
    int yolo_refused;            /* page-locked memory refused once: not asked for again */
    struct ncclComm *nccl;  /* data-parallel (NCCL builds): the processes' communicator
                               (an ncclComm_t), or NULL; in every build, so that the
                               record has one layout in every file */
} amp_gpu_net;

/* A CUDA network's state (backend.c's net_init). */
static inline amp_gpu_net *gpu_of(const amp_net *an)
{
    return (amp_gpu_net *)an->bk;
}

/* tables.c: the tables above, at attach (their memory freed by backend.c). */
amp_status amp_cuda_build_tables(amp_net *an, char *err, size_t errlen);

/* layers.c: the backend's layer members (backend.h): the slots of a layer on
 * the GPU, installing and freeing a layer's half path (ctx: the network's
 * shared scratch), a half layer put back to darknet's float32 GPU layer, and
 * nonfinite_output. */
amp_slots amp_cuda_slots(layer *l);
amp_status amp_cuda_layer_install(amp_layer *al, layer *l, amp_gpu_half_ctx *ctx, char *err,
                                  size_t errlen);
void amp_cuda_layer_free(amp_layer *al);
amp_status amp_cuda_layer_fallback(amp_layer *al, layer *l, amp_gpu_half_ctx *ctx, char *err,
                                   size_t errlen);
int amp_cuda_nonfinite_output(amp_net *an, int last, amp_overflow_scan *scan, int *params_finite);

/* activations.c: the activation plan on the device (backend.h's activations
 * and activations_release; off with DARKNET_AMP_GPU_PLAN=float32): the io a layer offers
 * the plan, the half delta of layer i's output (NULL: float32, or none),
 * the deltas whose last reader is layer i zeroed (its backward's start),
 * but for layer overwritten's (-1: none), which i writes whole. */
amp_io amp_cuda_layer_io(const amp_layer *al, const layer *l, const amp_gpu_half_ctx *ctx);
/* The same rule for a layer alone: cudnn_half, a convolution the backend
 * runs in half through cuDNN (the plan's host tests use it). */
amp_io amp_cuda_io_of(const layer *l, int cudnn_half);
/* gpu_plan.c's storage for al under the plan as made (amp_gpu_storage_of). */
amp_gpu_storage amp_cuda_storage(const amp_layer *al, const layer *l);
int amp_cuda_movement_has_half(const layer *l);
amp_status amp_cuda_activations(amp_net *an, char *err, size_t errlen);
void amp_cuda_activations_release(amp_net *an);
uint16_t *amp_cuda_half_delta(const amp_net *an, int i);
amp_status amp_cuda_deltas_begin(const amp_net *an, int i, int overwritten, char *err,
                                 size_t errlen);
/* Whether half layer al reads the previous layer's half output. */
int amp_cuda_input_half(const amp_layer *al);

/* tables.c: the device array behind one of the core's forward states (an
 * amp_fwd_state), its layer's by kind: rolling_mean_gpu, rolling_variance_gpu,
 * a gru's state_gpu, an lstm's h_gpu and c_gpu; NULL where the layer has none.
 * What the batch start copies aside and a skipped step restores
 * (tests/cuda/state_arrays_test.c checks it on the host). */
float *amp_cuda_state_array(const amp_fwd_state *f);

#endif

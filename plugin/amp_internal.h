/* Internal structures of the AMP plugin, shared by its files and its tests. */
#ifndef AMP_INTERNAL_H
#define AMP_INTERNAL_H

#include "darknet.h"
#include "darknet_amp.h"
#include "scale_rule.h"

#include <stddef.h>
#include <stdio.h>

struct amp_scaler {
    amp_options opt;
    amp_scale_params params;
    amp_scale_state state;
    int pending;         /* networks stepped since the last update */
    int pending_inf;     /* OR of their overflow flags */
    char first_bad[192]; /* where the current iteration first overflowed */
};

/* One parameter gradient: a *_updates array, which darknet also uses as the
 * momentum history. */
typedef struct amp_tensor {
    float *param;       /* the parameters it is the gradient of */
    float *grad;
    size_t n;
    size_t offset;      /* into amp_net.saved */
    int layer;          /* index in the network */
    char name[64];      /* e.g. "weights", "uz.biases" */
} amp_tensor;

typedef struct amp_net amp_net;

/* Where a layer's GEMM/convolution runs (policy.c). */
typedef enum amp_precision {
    AMP_PRECISION_HALF,     /* the half dtype */
    AMP_PRECISION_FP32,     /* float32 by the policy (or amp_dtype=float32) */
    AMP_PRECISION_OFF,      /* float32 by the cfg's amp=0 */
    AMP_PRECISION_FALLBACK, /* half by the policy, no half path for it here: float32 */
    AMP_PRECISION_COUNT
} amp_precision;

/* What runs a half layer's GEMM/convolution. */
typedef enum amp_backend {
    AMP_BACKEND_DARKNET,  /* darknet's own float32 code */
    AMP_BACKEND_EMULATED, /* cpu_half.c: darknet's GEMM on half-rounded values */
    AMP_BACKEND_ONEDNN,   /* cpu_onednn.c: oneDNN primitives in the half dtype */
    AMP_BACKEND_CUDNN,    /* cuda/half_conv.c: cuDNN with half tensors */
    AMP_BACKEND_CUBLAS,   /* cuda/half_gemm.c: cublasGemmEx with half inputs */
    AMP_BACKEND_COUNT
} amp_backend;

/* The formula a half layer's float32 batch-norm uses on the CPU (cpu_tail.c).
 * darknet's CPU batch-norm and its GPU one (cuDNN) differ: unbiased variance
 * and sqrt(var) + 1e-6, against biased variance and sqrt(var + 1e-5); with 4
 * values per channel the normalised values differ by 15%. The CPU runs
 * darknet's; the GPU half layers' tests set AMP_BN_CUDNN on their CPU
 * reference, to compare like with like. */
typedef enum amp_bn_formula {
    AMP_BN_DARKNET_CPU, /* darknet's forward_batchnorm_layer */
    AMP_BN_CUDNN        /* cudnnBatchNormalizationForwardTraining, as darknet calls it */
} amp_bn_formula;

/* DARKNET_AMP_CPU: which backend half layers get (docs/cfg.md). */
typedef enum amp_cpu_path {
    AMP_CPU_AUTO,    /* oneDNN for bfloat16 where it has an optimised kernel */
    AMP_CPU_ONEDNN,  /* oneDNN whatever the kernel (and for amp_dtype=float32) */
    AMP_CPU_EMULATE  /* the emulation everywhere */
} amp_cpu_path;

struct amp_dnnl_conv;
struct amp_dnnl_ctx;
struct amp_gpu_half;

/* DARKNET_AMP_PROFILE=1: time spent in one half layer (profile.c). */
typedef struct amp_layer_profile {
    /* every layer (profile.c wraps its pointers) */
    void (*next_forward)(struct layer, struct network);
    void (*next_backward)(struct layer, struct network);
    void (*next_update)(struct layer, update_args);
    double all_fwd_s, all_bwd_s, all_upd_s;
    /* half layers */
    double fwd_s, bwd_s;    /* in the layer's forward and backward */
    double gemm_s;          /* of which in the GEMM/convolution and conversions */
    double gflop;           /* GEMM/convolution work done, 1e9 multiply-adds x 2 */
    unsigned long calls;    /* forward + backward calls */
} amp_layer_profile;

typedef struct amp_buffer {
    float *data;
    size_t n;
} amp_buffer;

typedef struct amp_layer {
    amp_net *owner;
    int index;
    int half_allowed;   /* 0 when the cfg section says amp=0 */
    amp_precision precision;
    int wrapped;
    /* darknet's own pointers, put back by detach */
    void (*orig_forward)(struct layer, struct network);
    void (*orig_backward)(struct layer, struct network);
    void (*orig_update)(struct layer, update_args);
    /* what the wrappers run: darknet's, or the half implementation */
    void (*forward)(struct layer, struct network);
    void (*backward)(struct layer, struct network);
    void (*update)(struct layer, update_args);
    /* half execution (cpu_half.c): weights copy and scratch */
    amp_buffer wq, xq, dq, tmp, gx;
    unsigned long wq_version;
    amp_backend backend;
    struct amp_dnnl_conv *dnnl; /* oneDNN primitives and buffers (cpu_onednn.c) */
    struct amp_gpu_half *gpu_half; /* half execution on the GPU (cuda/half_gpu.h) */
    amp_layer_profile prof;
    /* A recurrent layer (rnn, gru, lstm, crnn) runs its GEMMs in its
     * sub-layers, which darknet calls through their own pointers (patch
     * 0008): one record per sub-layer, installed on it as on a layer. */
    struct amp_layer *subs;
    int nsubs;
    /* In a sub-layer's record: the sub-layer, and its name ("uz"). Its
     * orig_forward/orig_backward are the sub-layer's pointers it replaced
     * (the _gpu ones on a GPU network). A sub-layer runs once per time step
     * with a new input, so its backward rounds its input again instead of
     * keeping the forward's. */
    layer *sub;
    const char *sub_name;
} amp_layer;

typedef enum amp_phase {
    AMP_PHASE_IDLE,         /* no backward since attach */
    AMP_PHASE_ACCUMULATING, /* histories scaled, gradients accumulating */
    AMP_PHASE_UNSCALED,     /* checked and unscaled, step not taken yet */
    AMP_PHASE_STEPPED       /* step taken or skipped */
} amp_phase;

typedef struct amp_injection {
    int layer;
    char tensor[64];    /* as amp_tensor.name */
    float value;
    unsigned long steps[16];
    int nsteps;
} amp_injection;

struct amp_net {
    network *net;
    amp_scaler *scaler;      /* set once attached */
    amp_scaler *parsed;      /* the cfg's scaler, from [net] until attach */
    int owns_scaler;
    int enabled;        /* [net] amp=1 (a parse record may hold amp=0) */
    amp_layer *layers;  /* net->n */
    amp_tensor *tensors;
    int ntensors;
    size_t nparams;
    float *saved;       /* every history as it was before the batch */
    amp_phase phase;
    int first_update;   /* the lowest index of a layer with parameters */
    unsigned long weights_version; /* bumped by every step taken and every load */
    unsigned long long grad_nonzero, grad_flushed; /* this batch, half layers' input gradients */
    double prof_scaling_s;   /* DARKNET_AMP_PROFILE: saving, scaling, unscaling, checking */
    float batch_scale;  /* the scale the current batch was scaled with */
    int found_inf;
    int skipped;        /* the last step */
    unsigned long step_index; /* steps taken or skipped by this network */
    char bad[192];      /* the tensor that overflowed first in the last step */
    char error[512];    /* a fatal condition for the training loop */
    char cfgfile[256];
    amp_cpu_path cpu_path;
    amp_bn_formula bn_formula; /* of the half layers' batch-norm (tests of the GPU set cuDNN's) */
    struct amp_dnnl_ctx *dnnl;  /* oneDNN engine and stream, NULL until needed */
    struct amp_gpu_net *gpu;    /* cuda/amp_gpu.c: the network trains on a GPU; else NULL */
    int profile;        /* DARKNET_AMP_PROFILE: 1 on, 2 on and printed */
    amp_injection inject[8];
    int ninject;
};

/* scaler.c */
void amp_scaler_setup(amp_scaler *s, const amp_options *o);
/* Applies the update rule to the pending steps; AMP_ERR_NONFINITE with a
 * message when amp_max_skips is reached. */
amp_status amp_scaler_apply(amp_scaler *s, char *err, size_t errlen);
int amp_errorf(char *err, size_t errlen, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* network_amp.c */
amp_net *amp_net_of(const network *net);
/* A record for net with every layer allowed half precision; not attached. */
amp_net *amp_net_new(network *net);
amp_status amp_net_attach(amp_net *an, amp_scaler *s, char *err, size_t errlen);
void amp_net_free(amp_net *an);
/* The sub-layers of a recurrent layer, with their names ("uz", "input"):
 * their count, 0 for other types. */
#define AMP_MAX_SUBLAYERS 8
int amp_sublayers(const layer *l, layer **subs, const char **names);
/* Installs half execution on every sub-layer of the recurrent layer l
 * (amp_layer.subs) with install(), on the CPU pointers or (gpu) the _gpu
 * ones; 1, or 0 with why and nothing changed. amp_subs_free puts the
 * sub-layers' pointers back and frees the records, each with free_one. */
typedef int (*amp_sub_install_fn)(amp_layer *sa, layer *sub, void *ctx, char *why, size_t whylen);
int amp_subs_install(amp_layer *al, layer *l, int gpu, amp_sub_install_fn install,
                     void (*free_one)(amp_layer *), void *ctx, char *why, size_t whylen);
void amp_subs_free(amp_layer *al, int gpu, void (*free_one)(amp_layer *));
/* policy.c */
amp_precision amp_policy(const layer *l, amp_dtype dtype, int half_allowed);
void amp_policy_print(const amp_net *an, FILE *out);

/* cpu_half.c: sets al->forward/backward to the half path of l's type and
 * al->backend; 0 when it has none. */
int amp_half_install(amp_layer *al, layer *l);
void amp_half_free(amp_layer *al);
/* The emulated convolution, also the oneDNN path's fallback. */
void amp_emulated_conv_forward(layer l, network net);
void amp_emulated_conv_backward(layer l, network net);
/* The float32 parts of a half layer (cpu_tail.c): batch-norm or bias, then the
 * activation, and their gradients; multi-threaded, same results as darknet's. */
void amp_tail_forward(layer l, network net, int nbias, int bias_size, amp_bn_formula bn);
void amp_tail_backward(layer l, network net, int nbias, int bias_size);

/* cpu_maxpool.c: darknet's max-pooling, multi-threaded, same results. */
void amp_maxpool_forward(layer l, network net);
void amp_maxpool_backward(layer l, network net);

/* cpu_onednn.c. Installs the oneDNN convolution for l (1) or says why not
 * (0, why filled); dtype float32 runs the same primitives in float32. */
int amp_onednn_conv_install(amp_layer *al, layer *l, amp_dtype dtype, char *why, size_t whylen);
void amp_onednn_conv_free(amp_layer *al);
void amp_onednn_ctx_free(amp_net *an);
/* The CPU's instruction set as oneDNN sees it ("avx512_core_bf16"), and
 * whether it runs bfloat16 natively (AVX512-BF16 or AMX). */
const char *amp_onednn_isa(int *native_bf16);
/* Parses DARKNET_AMP_CPU; AMP_ERR_INVALID with a message on a bad value. */
amp_status amp_cpu_path_parse(const char *value, amp_cpu_path *out, char *err, size_t errlen);

/* cuda/amp_gpu.c, CUDA builds only (docs/gpu.md): AMP on a network with
 * gpu_index >= 0. Each is a no-op on a network without an->gpu. */
#ifdef GPU
amp_status amp_gpu_attach(amp_net *an, char *err, size_t errlen);
void amp_gpu_detach(amp_net *an);
/* Reads the device's scaler state into an->scaler->state when the last step's
 * asynchronous copy has landed (wait: block until it has). */
void amp_gpu_poll(amp_net *an, int wait);
/* Pushes an->scaler->state to the device (after a sidecar was loaded). */
void amp_gpu_push_state(amp_net *an);
amp_status amp_gpu_unscale(amp_net *an, char *err, size_t errlen);
amp_status amp_gpu_step(amp_net *an, char *err, size_t errlen);
#endif

/* profile.c */
double amp_clock(void);
/* Puts a timer around every layer's forward, backward and update. */
void amp_profile_install(amp_net *an);
void amp_profile_print(const amp_net *an, FILE *out);

/* Parses DARKNET_AMP_INJECT (docs/testing.md) into an. */
amp_status amp_parse_injection(amp_net *an, const char *spec, char *err, size_t errlen);

#endif

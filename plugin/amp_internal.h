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
    AMP_PRECISION_FALLBACK, /* half by the policy, no half path yet: float32 */
    AMP_PRECISION_COUNT
} amp_precision;

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
    float batch_scale;  /* the scale the current batch was scaled with */
    int found_inf;
    int skipped;        /* the last step */
    unsigned long step_index; /* steps taken or skipped by this network */
    char bad[192];      /* the tensor that overflowed first in the last step */
    char error[512];    /* a fatal condition for the training loop */
    char cfgfile[256];
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
/* policy.c */
amp_precision amp_policy(const layer *l, amp_dtype dtype, int half_allowed);
void amp_policy_print(const amp_net *an, FILE *out);

/* cpu_half.c: sets al->forward/backward to the half path of l's type; 0 when
 * it has none. */
int amp_half_install(amp_layer *al, layer *l);
void amp_half_free(amp_layer *al);

/* Parses DARKNET_AMP_INJECT (docs/testing.md) into an. */
amp_status amp_parse_injection(amp_net *an, const char *spec, char *err, size_t errlen);

#endif

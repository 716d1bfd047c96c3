/* The AMP core's records, shared by its files (the .c files of plugin/), the backends
 * (plugin/cpu/, cuda/, through backend.h) and the tests. No backend's library
 * or name here: a backend keeps its own state behind the void pointers
 * amp_net.bk and amp_layer.bk, and names itself in amp_layer.label.
 *
 * Map of the core, by tier from the bottom up (docs/architecture.md,
 * "Layers"; build.layering holds the code to it):
 *   leaf        common.c (names, the clock), error.c, kinds.c (the table of
 *               layer kinds), contract.c (a backend's table checked)
 *   scaler      scaler.c: the scaler as arithmetic and its invariants
 *   state       options.c (cfg keys, DARKNET_AMP_*), tensors.c (darknet
 *               knowledge: gradients, forward states, sub-layers, slots),
 *               loss_cause.c, policy.c, plan.c, state_file.c,
 *               weights_check.c, profile.c, inject.c, dist.c, net_error.c
 *   rules       fallback.c (amp_fallback's rules, applied at the step's
 *               end), probe.c (amp_probe)
 *   backends    plugin/cpu/, cuda/ (through backend.h; never each other)
 *   step        settle.c (what a step's outcome means), step.c (phases,
 *               wrappers, attach/detach, the structure's changes)
 *   registry    backends.c, the one place that knows which backends exist
 *   hooks       hooks.c: darknet's hook table, amp_attach, the program's
 *               part through amp_program
 *   math/       half_format.h, grad_math.h, scale_rule.h: element math
 *               shared with cuda/
 */
#ifndef AMP_CORE_H
#define AMP_CORE_H

#include "darknet.h"
#include "darknet_amp.h"
#include "error.h"
#include "kinds.h"
#include "math/grad_math.h" /* amp_overflow_scan */
#include "math/scale_rule.h"

#include <stddef.h>
#include <stdio.h>

/* The scaler's settings, resolved: the [net] cfg keys of docs/cfg.md map onto
 * them (options.c). Internal: programs set them by key (amp_config). */
typedef struct amp_options {
    amp_dtype dtype;
    int dynamic;           /* 1: the scale adapts; 0: static, always init_scale */
    float init_scale;      /* amp_init_scale, or loss_scale when static */
    float growth_factor;   /* > 1 */
    float backoff_factor;  /* in (0, 1) */
    long growth_interval;  /* good steps before a growth, >= 1 */
    int hysteresis;        /* overflows tolerated in a row before a backoff, >= 1 */
    float min_scale;       /* backoff never goes below */
    float max_scale;       /* growth never goes above */
    long max_skips;        /* error after this many skipped steps in a row; 0 = never */
    int half_activations;  /* amp_activations: 1 (half, the default) stores the tensors
                              between half layers in the half dtype where the backend can;
                              0 (float32) keeps every tensor darknet's float32 */
    int fallback;          /* amp_fallback: 1 (the default) runs a half layer that overflows
                              its dtype where no loss scale helps in float32 from the next
                              step on; 0 leaves it in half (amp_max_skips applies) */
    long fallback_after;   /* amp_fallback_after: that many steps in a row skipped at
                              amp_min_scale, each first non-finite in the same half layer's
                              gradients, make it fall back too; >= 1 */
    int probe;             /* amp_probe: 1 compares every half layer's output with float32's
                              on the first batch (same input) and puts those beyond the
                              dtype's bound back to float32 (with amp_fallback); 0 (the
                              default) does not */
} amp_options;

/* Defaults: PyTorch GradScaler's (65536, x2, x0.5, 2000), hysteresis 1, scale in
 * [1, 2^24], no skip limit; bfloat16 defaults to a static scale of 1. */
void amp_options_init(amp_options *o, amp_dtype dtype);
/* amp_scaler_create and amp_attach_config on resolved settings. */
amp_status amp_scaler_create_options(const amp_options *o, amp_scaler **out, char *err,
                                     size_t errlen);
amp_status amp_attach_options(network *net, const amp_options *o, char *err, size_t errlen);
/* The settings an amp_config resolved to (config.c). */
const amp_options *amp_config_options(const amp_config *c);

struct amp_scaler {
    amp_options opt;
    amp_scale_params params;
    amp_scale_state state;
    int pending;                   /* networks stepped since the last update */
    int pending_inf;               /* OR of their overflow flags */
    int pending_loss;              /* of them, skipped for a non-finite loss */
    char first_bad[AMP_MSG_LEN];   /* where the current iteration first overflowed */
};

/* What a parameter gradient is the gradient of. */
typedef enum amp_tensor_kind {
    AMP_TENSOR_WEIGHTS,
    AMP_TENSOR_BIASES,
    AMP_TENSOR_SCALES
} amp_tensor_kind;

/* One parameter gradient: a *_updates array, which darknet also uses as the
 * momentum history. src is the layer (or sub-layer) whose arrays these are:
 * a backend finds its own copies there by kind (weight_updates_gpu, ...). */
typedef struct amp_tensor {
    layer *src;
    amp_tensor_kind kind;
    float *param;       /* the parameters it is the gradient of */
    float *grad;
    size_t n;
    size_t offset;      /* of its elements among all of the network's */
    int layer;          /* index in the network */
    const char *sub;    /* the sub-layer's name ("uz"), "" for the layer itself */
    char name[32];      /* for messages and DARKNET_AMP_INJECT: "weights", "uz.biases" */
} amp_tensor;

/* What a training forward pass leaves behind for the next batch, beside the
 * parameters: a skipped step puts it back as it was at the batch start
 * (docs/design.md, "What a skipped step restores"). */
typedef enum amp_state_kind {
    AMP_STATE_ROLLING_MEAN,     /* batch-norm's running mean ... */
    AMP_STATE_ROLLING_VARIANCE, /* ... and variance (inference normalises with them) */
    AMP_STATE_HIDDEN,           /* a recurrent layer's hidden state, carried from one batch
                                   into the next (gru: state, lstm: h) */
    AMP_STATE_CELL              /* an lstm's cell state, carried likewise */
} amp_state_kind;

/* One such array. src is the layer (or sub-layer) that owns it: a backend
 * finds its own copy there by kind (rolling_mean_gpu, state_gpu, ...). */
typedef struct amp_fwd_state {
    layer *src;
    amp_state_kind kind;
    float *host;        /* darknet's host array */
    size_t n;
    size_t offset;      /* of its elements among all of the network's */
    int layer;          /* index in the network */
    char name[32];      /* for messages: "rolling_mean", "wz.rolling_variance", "state" */
} amp_fwd_state;

/* An array darknet's save_weights writes, in the file's order (weights_check.c). */
typedef struct amp_saved_array {
    const float *data;
    size_t n;
    char name[32];      /* "biases", "rolling_mean", "uz.weights" */
} amp_saved_array;

typedef struct amp_net amp_net;

/* Where a layer's GEMM/convolution runs (policy.c). */
typedef enum amp_precision {
    AMP_PRECISION_HALF,     /* the half dtype */
    AMP_PRECISION_FP32,     /* float32 by the policy (or amp_dtype=float32) */
    AMP_PRECISION_OFF,      /* float32 by the cfg's amp=0 */
    AMP_PRECISION_FALLBACK, /* half by the policy, no half path for it here: float32 */
    AMP_PRECISION_FELL_BACK, /* a half layer put back to float32 in training (fallback.c) */
    AMP_PRECISION_COUNT
} amp_precision;

/* Why a half layer fell back to float32 (fallback.c, amp_fallback). */
typedef enum amp_fallback_why {
    AMP_FELL_NONE,
    AMP_FELL_FORWARD,  /* its forward pass overflowed the half type */
    AMP_FELL_GRADIENT, /* its gradients, first not finite, in amp_fallback_after skipped
                          steps in a row at the minimum loss scale */
    AMP_FELL_PROBE     /* amp_probe: its output on the first batch beyond the dtype's bound
                          from float32's */
} amp_fallback_why;

/* How a layer's backend can store the tensors it reads and writes (its
 * inputs and its output, with their deltas): the activation plan's input
 * (plan.c). */
typedef enum amp_io {
    AMP_IO_FLOAT32, /* darknet's float32 arrays only */
    AMP_IO_CONVERTS, /* a half layer: each input and its output in either storage,
                        converted at its edges */
    AMP_IO_HALF     /* a data-movement layer's half form: every input and its output in
                       half, or (darknet's own form) none */
} amp_io;

typedef void (*amp_layer_fn)(struct layer, struct network);
typedef void (*amp_update_fn)(struct layer, update_args);

/* A layer's three function-pointer slots that a backend runs: darknet's CPU
 * ones (forward, backward, update) or its GPU ones (forward_gpu, ...). */
typedef struct amp_slots {
    amp_layer_fn *forward, *backward;
    amp_update_fn *update;
} amp_slots;

/* DARKNET_AMP_PROFILE=1: time spent in one layer (profile.c). */
typedef struct amp_layer_profile {
    /* every layer (profile.c wraps its pointers) */
    amp_layer_fn next_forward, next_backward;
    amp_update_fn next_update;
    double all_fwd_s, all_bwd_s, all_upd_s;
    /* half layers */
    double fwd_s, bwd_s;    /* in the layer's forward and backward */
    double gemm_s;          /* of which in the GEMM/convolution and conversions */
    double gflop;           /* GEMM/convolution work done, 1e9 multiply-adds x 2 */
    unsigned long calls;    /* forward + backward calls */
    /* a device backend's half layers (prof_begin): of their passes' time,
     * AMP's conversions, and the library kernels (cuDNN, cuBLAS) */
    double convert_s, kernel_s;
} amp_layer_profile;

/* What a DARKNET_AMP_PROFILE interval times (profile.c, backend.h's prof_begin). */
typedef enum amp_prof_what {
    AMP_PROF_FORWARD,
    AMP_PROF_BACKWARD,
    AMP_PROF_UPDATE,
    AMP_PROF_CONVERT, /* a half layer's conversions to and from half */
    AMP_PROF_KERNEL,  /* a half layer's library kernels (convolution, GEMM) */
    AMP_PROF_SCALING  /* the network's: save, scale, unscale and check */
} amp_prof_what;

/* An interval begun: the host's clock, or a device backend's handle. */
typedef struct amp_prof_mark {
    double t0;
    int handle;
} amp_prof_mark;

typedef struct amp_layer {
    amp_net *owner;
    int index;
    int half_allowed;   /* 0 when the cfg section says amp=0 */
    amp_precision precision;
    const char *label;  /* a half layer: what runs it, in its backend's words
                           (plugin/cpu/onednn_layer.c, cuda/backend.c), which the
                           start-up table and DARKNET_AMP_PROFILE print; the
                           backend may change it when a layer changes shape */
    const char *detail; /* optional, a half layer's: the backend's details of what runs
                           it (algorithms, workspace), which DARKNET_AMP_PROFILE prints */
    int wrapped;        /* its slots were changed: detach puts them back */
    /* darknet's own pointers (from the backend's slots), put back by detach */
    amp_layer_fn orig_forward, orig_backward;
    amp_update_fn orig_update;
    /* what the wrappers run: darknet's, or the backend's (a half path) */
    amp_layer_fn forward, backward;
    amp_update_fn update;
    amp_layer_profile prof;
    /* A recurrent layer (rnn, gru, lstm, crnn) runs its GEMMs in its
     * sub-layers, which darknet calls through their own pointers (patch
     * 0008): one record per sub-layer, installed on it as on a layer. */
    struct amp_layer *subs;
    int nsubs;
    /* In a sub-layer's record: the sub-layer, and its name ("uz"). A
     * sub-layer runs once per time step with a new input. */
    layer *sub;
    const char *sub_name;
    void *bk;           /* the backend's per-layer state */
    /* The activation plan (plan.c): what the backend can run the layer with
     * (layer_install sets io), and the plan's decisions. */
    amp_io io;
    int out_half;       /* its output and its delta are stored in the half dtype */
    int region;         /* an AMP_IO_HALF layer that runs its half form */
    int x_half;         /* an AMP_IO_CONVERTS layer's batch-norm input stored in half (its
                           normalised values made again from it in the backward) */
    amp_fallback_why fell_back; /* put back to float32 in training, and why: a half layer
                                   (precision AMP_PRECISION_FELL_BACK), or a half form out of
                                   the region (io AMP_IO_FLOAT32), fallback.c */
    int fell_back_earlier;      /* ... in the run that saved the state file resumed from */
    double probe_rel;           /* amp_probe: its output's relative 2-norm difference from
                                   float32's on the first batch (inf: not finite where float32's
                                   is; NaN: float32's not finite either) */
    int probed;                 /* ... when probe_rel was measured */
    amp_fallback_why due;       /* a half layer or form due to fall back at the step's end (a rule of
                                   fallback.c), or AMP_FELL_NONE ... */
    int due_earlier;            /* ... as the state file of an earlier run says */
    int delta_from;     /* out_half: the layer whose backward is the first to add into
                           the delta (its last reader), which zeroes it first; the delta
                           lives from there to this layer's backward, in storage it
                           shares with deltas that do not live at the same time */
} amp_layer;

typedef enum amp_phase {
    AMP_PHASE_IDLE,         /* no backward since the last step (or attach) */
    AMP_PHASE_ACCUMULATING, /* histories scaled, gradients accumulating */
    AMP_PHASE_UNSCALED,     /* checked and unscaled, step not taken yet */
    AMP_PHASE_STEPPED       /* step taken or skipped */
} amp_phase;

typedef struct amp_injection {
    int layer;
    char tensor[32];    /* as amp_tensor.name */
    float value;
    unsigned long steps[16];
    int nsteps;
} amp_injection;

/* DARKNET_AMP_*: the environment, read once per attach (options.c). */
typedef struct amp_env {
    const char *dist_check; /* DARKNET_AMP_DIST_CHECK: steps between consistency checks
                               (dist.c parses it) */
    int profile;            /* DARKNET_AMP_PROFILE: 1 on (2: printed already) */
    const char *inject;     /* DARKNET_AMP_INJECT, or NULL */
} amp_env;

typedef struct amp_backend_ops amp_backend_ops;

struct amp_net {
    network *net;
    const amp_backend_ops *ops;  /* the backend that runs it */
    void *bk;                    /* the backend's per-network state */
    amp_scaler *scaler;          /* set once attached */
    amp_scaler *parsed;          /* the cfg's scaler, from [net] until attach */
    int owns_scaler;
    int enabled;                 /* [net] amp=1 (a parse record may hold amp=0) */
    amp_layer *layers;           /* net->n */
    amp_tensor *tensors;
    int ntensors;
    size_t nparams;
    amp_fwd_state *states;       /* what a forward pass changes besides (amp_collect_states) */
    int nstates;
    size_t nstate_elems;
    amp_phase phase;
    int first_update, last_update; /* lowest and highest index of a layer with parameters */
    unsigned long weights_version; /* moved by every update and every load */
    double prof_scaling_s;       /* DARKNET_AMP_PROFILE: saving, scaling, unscaling, checking */
    unsigned long prof_steps;    /* on a device backend: the batches its intervals cover */
    int prof_installed;          /* DARKNET_AMP_PROFILE's timers hold the layers' slots */
    float batch_scale;           /* the scale the current batch was scaled with */
    int found_inf;               /* host-decided steps: a gradient was not finite */
    int bad_tensor;              /* host-decided steps: the first non-finite one, or -1 */
    int loss_bad;                /* this batch: 1 + the first cost layer whose loss or delta
                                    (before scaling) was not finite, else 0 */
    long loss_element;           /* the first non-finite delta element found, or -1 */
    char loss_where[AMP_MSG_LEN]; /* the images of that batch, where darknet knows them */
    char loss_cause[AMP_MSG_LEN]; /* its labels or its loss layer (amp_loss_cause), or "" */
    int step_iteration;          /* darknet's iteration of the step being decided ... */
    char step_where[AMP_MSG_LEN]; /* ... and its loss_where and loss_cause: a device's */
    char step_cause[AMP_MSG_LEN]; /* outcome is settled after the next batch has begun */
    /* Steps skipped with the scale left alone (the scaler's state counts the
     * scale's updates: steps taken and skipped for a gradient overflow): for
     * a half layer's forward overflow, and for a non-finite loss that no half
     * layer started (a data or model problem); from the state file's totals
     * on a resume */
    unsigned long long forward_skips, loss_skips;
    long loss_skips_in_row;        /* steps in a row skipped for either */
    /* this batch, once a loss came out non-finite: the first layer (forward
     * order) whose output held an inf or NaN (backend's nonfinite_output), or
     * -1; that output's scan; whether it is a half layer's own overflow (its
     * inputs and parameters finite) ... */
    int origin_layer;
    amp_overflow_scan origin_scan;
    int origin_overflow;
    /* ... and the step being decided's (as step_where) */
    int step_origin;
    amp_overflow_scan step_origin_scan;
    int step_origin_overflow;
    int skipped;                 /* the last settled step was skipped */
    int skip_updates;            /* the step under way: layer updates are skipped */
    int step_open;               /* a device-decided step awaits its end */
    unsigned long step_index;    /* steps taken or skipped by this network */
    char bad[AMP_MSG_LEN];       /* what the last skipped step was for: the tensor that
                                    overflowed first, or the cost layer and its images */
    amp_status error_status;     /* a fatal condition for the training loop ... */
    char error[AMP_MSG_LEN];     /* ... and its message */
    char cfgfile[AMP_MSG_LEN];
    amp_env env;
    amp_injection inject[8];
    int ninject;
    const struct amp_comm *comm; /* the process group of a data-parallel launch (dist.h), or
                                    NULL: this network trains alone */
    unsigned long dist_checked;  /* the step_index of the last consistency check */
    long dist_check_every;       /* DARKNET_AMP_DIST_CHECK, parsed at attach (0: never) */
    double dist_reduce_s;        /* time spent summing gradients over the processes */
    float *dist_pack;            /* the batch-norm statistics packed for one exchange (host) */
    int plan_on;                 /* amp_activations=half with a half dtype: the plan may store
                                    tensors in half */
    const char *plan_off;        /* why the backend offers the plan no half tensor although
                                    plan_on (the start-up table says it); NULL otherwise */
    /* amp_fallback's gradient rule: the half layer whose gradients were the
     * first not finite in the last skipped steps at the minimum scale, and
     * how many in a row (fallback.c) */
    int grad_suspect;
    long grad_suspect_steps;
    int fallbacks;               /* layers that fell back in this run */
    int fallbacks_due;           /* layers marked due (amp_layer.due) and not yet applied */
    int probe_on;                /* amp_probe: the first step's half forwards are probed */
    /* weights files saved with non-finite values in this run (weights_check.c),
     * the last one's name and what in it */
    unsigned long nonfinite_saves;
    char nonfinite_last[AMP_MSG_LEN];
};

/* ---- tensors.c: darknet knowledge ---- */
amp_net *amp_net_of(const network *net);
/* A record for net with every layer allowed half precision; not attached. */
amp_net *amp_net_new(network *net);
/* The element counts of layer l's weights, biases and batch-norm scales as
 * darknet's update uses them (its connected layer leaves nweights 0); 0 for
 * a type without parameters. */
int amp_param_sizes(const layer *l, size_t *weights, size_t *biases, size_t *scales);
/* The parameter gradients of every layer darknet updates, sub-layers' too. */
amp_status amp_collect_tensors(amp_net *an, char *err, size_t errlen);
void amp_describe_tensor(const amp_net *an, int k, char *out, size_t size);
/* Why the loss of l (a yolo or region layer, its forward just run) is not
 * finite when no layer before it made the first inf or NaN: a label of the
 * batch that is not a box (a data problem), or valid labels and a finite
 * input (the loss itself: FP32 training has it too). "" for other layer
 * types (loss_cause.c). */
void amp_loss_cause(const layer *l, const network *net, char *out, size_t size);
/* What a training forward pass changes besides the parameters, of every
 * layer and sub-layer (amp_fwd_state): the batch-norm layers' rolling
 * statistics (a [batchnorm] layer's too) and the hidden states that gru and
 * lstm layers carry from one batch into the next. */
amp_status amp_collect_states(amp_net *an, char *err, size_t errlen);
/* The rolling statistics of the state list, as data-parallel processes
 * average them (not the hidden states: each process's own images'). */
static inline int amp_state_is_statistic(const amp_fwd_state *s)
{
    return s->kind == AMP_STATE_ROLLING_MEAN || s->kind == AMP_STATE_ROLLING_VARIANCE;
}
/* The sub-layers of a recurrent layer, with their names ("uz", "input"):
 * their count, 0 for other types. */
#define AMP_MAX_SUBLAYERS 8
int amp_sublayers(const layer *l, layer **subs, const char **names);
/* Installs a backend's execution on every sub-layer of the recurrent layer l
 * (amp_layer.subs): a record per sub-layer, its slots as the backend's
 * slots() gives them, install() filling the record (forward, backward, bk).
 * All or none: AMP_OK with every sub-layer's slots pointed at its record,
 * or the status and why (free_one has freed what install made). */
typedef amp_status (*amp_sub_install_fn)(amp_layer *sa, layer *sub, void *ctx, char *why,
                                         size_t whylen);
amp_status amp_subs_install(amp_layer *al, layer *l, amp_slots (*slots)(layer *),
                            amp_sub_install_fn install, void (*free_one)(amp_layer *), void *ctx,
                            char *why, size_t whylen);
/* Puts the sub-layers' pointers back and frees the records, each with free_one. */
void amp_subs_free(amp_layer *al, amp_slots (*slots)(layer *), void (*free_one)(amp_layer *));

/* ---- weights_check.c: non-finite values in what darknet saves ---- */
struct amp_weights_id;     /* state_file.h */
struct amp_weights_values;
/* The arrays darknet's save_weights writes for layer l (its sub-layers'
 * for rnn, gru, lstm, crnn), in the file's order, at most max; their count. */
#define AMP_MAX_SAVED_ARRAYS 48
int amp_saved_arrays(const layer *l, amp_saved_array *out, int max);
/* Where the non-finite values v counted in a weights file of net lie, by
 * darknet's layout over the network's host arrays (which the save wrote):
 * "layer 2 [convolutional] rolling_mean (16 of 16), rolling_variance (16 of
 * 16); layer 3 ...", a few arrays named and the rest counted; by position
 * where the arrays hold none of them. */
void amp_nonfinite_where(const network *net, const struct amp_weights_values *v, char *out,
                         size_t size);
/* A weights file darknet just saved for net (weights_saved): its identity
 * (one read of the file) and, when it holds a value that is not finite, a
 * warning naming the layers and arrays, counted for the run's summary (an:
 * NULL without AMP). A file that cannot be read: said, AMP_ERR_IO. */
amp_status amp_check_saved(amp_net *an, const network *net, const char *filename,
                           struct amp_weights_id *id);

/* ---- scaler.c: the scaler's arithmetic and invariants ---- */
void amp_scaler_setup(amp_scaler *s, const amp_options *o);
/* Every invariant of the options: NULL, or why the first broken one is broken
 * (*field: the option it is about, as the amp_option_field below). */
typedef enum amp_option_field {
    AMP_FIELD_DTYPE, AMP_FIELD_INIT_SCALE, AMP_FIELD_GROWTH_FACTOR, AMP_FIELD_BACKOFF_FACTOR,
    AMP_FIELD_GROWTH_INTERVAL, AMP_FIELD_HYSTERESIS, AMP_FIELD_SCALE_BOUNDS,
    AMP_FIELD_INIT_IN_BOUNDS, AMP_FIELD_MAX_SKIPS
} amp_option_field;
const char *amp_options_invalid(const amp_options *o, amp_option_field *field);
/* Every invariant of a scaler state (as a state file holds it): NULL or why
 * (into buf). */
const char *amp_scale_state_invalid(const amp_scale_state *st, char *buf, size_t size);
/* A state loaded for these options: a static scale is the options' own, a
 * dynamic one kept within their bounds, the hysteresis counter within them. */
void amp_scale_state_fit(amp_scale_state *st, const amp_options *o);
/* Applies the update rule to the pending steps; AMP_ERR_NONFINITE with a
 * message when amp_max_skips is reached. */
amp_status amp_scaler_apply(amp_scaler *s, char *err, size_t errlen);
/* amp_max_skips consecutive skipped steps: AMP_ERR_NONFINITE with why. */
amp_status amp_scaler_check_skips(const amp_scaler *s, char *err, size_t errlen);

/* ---- a step's outcome (settle.c settles it, a device backend's sync returns it) ---- */
/* The outcome of one network's step, settled on the host: right away for a
 * host-decided step, when the device's copy arrived for a device-decided one
 * (the backend's sync returns it). */
typedef struct amp_step_outcome {
    int skipped;
    int bad_tensor;                /* the first non-finite gradient, or -1 */
    float batch_scale;             /* the scale the batch was scaled with */
    unsigned long long seq;        /* the step's number, from 1 */
    int device_state;              /* 1: state is the scaler as the device updated it;
                                      0: the update is made here */
    amp_scale_state state;
    int take_back_t;               /* darknet counted the step in *net->t: a skip undoes it */
    int loss_layer;                /* skipped for a non-finite loss in this cost layer, or -1 */
} amp_step_outcome;
/* ---- hooks.c ---- */
/* The start-up lines: settings, precision table, the backend's warnings. */
void amp_describe(const amp_net *an, FILE *out);
/* What a program beside the library adds to darknet's hooks (the darknet-amp
 * program, plugin/program/: its options, start-up line, commands, training
 * record): handed to the library once, before darknet runs. A library
 * user's process has none; any member may be NULL. */
struct amp_net_override;
struct darknet_train_progress;
typedef struct amp_program {
    /* the program's -amp, or NULL (options.h's amp_net_override) */
    const struct amp_net_override *(*net_override)(void);
    /* [net] was read: whether AMP is on for cfgfile, at dtype, and which cfg
     * values the override changed (conflict, "" when none) */
    void (*net_read)(const network *net, const char *cfgfile, int enabled, amp_dtype dtype,
                     int data_parallel, const char *conflict);
    /* patch 0021's command hook: 1 when it ran the command (*status its exit
     * status), 0 when darknet runs it; it may take its options out of argv */
    int (*command)(int *argc, char **argv, int *status);
    /* darknet's training progress, once an iteration */
    void (*progress)(network *net, const struct darknet_train_progress *p);
} amp_program;
void amp_program_set(const amp_program *p);

/* ---- options.c ---- */
void amp_env_read(amp_env *env);
/* DARKNET_AMP_TEST_CRASH_IN_SAVE=1 (docs/state-file.md). */
int amp_env_crash_in_save(void);

/* ---- policy.c ---- */
amp_precision amp_policy(const layer *l, amp_dtype dtype, int half_allowed);
void amp_policy_print(const amp_net *an, FILE *out);

/* ---- yolo.c: darknet's yolo loss, the images in parallel ---- */
/* forward_yolo_layer's result, bit for bit (its deltas, cost and printed
 * line), with the batch's images on OpenMP's threads; activate: the logistic
 * of darknet's CPU form (its GPU form activated the input on the device).
 * l.output may be net.input itself: the output is then made in place. */
void amp_yolo_forward(layer l, network net, int activate);

/* ---- plan.c: the activation plan (docs/design.md) ---- */
/* Decides out_half, region and x_half for every layer from the layers' io
 * (and their present shapes: a data-movement layer's half form only where
 * amp_kind_half_shape takes it). */
void amp_plan_make(amp_net *an);
/* Whether amp_plan_make would decide differently now (after darknet's
 * resize changed a layer's shape); the plan is left as it was. */
int amp_plan_changes(amp_net *an);
/* The bytes of the layers' outputs, deltas and batch-norm inputs (x, x_norm)
 * at the network's current size: as darknet stores them in float32, and
 * under the plan. */
void amp_plan_bytes(const amp_net *an, double *fp32, double *planned);
/* Offsets (in elements, outputs x batch each) of the half deltas in one
 * shared pool, no two that live at the same time overlapping (amp_layer.
 * delta_from); offset[i] for every out_half layer. Returns the pool's size
 * in elements. */
size_t amp_plan_delta_pool(const amp_net *an, size_t *offset);
/* The same with every delta's place rounded up to a multiple of align
 * elements, so that each starts at a multiple of align (a device's vector
 * accesses: 8 elements, 16 bytes). */
size_t amp_plan_delta_pool_aligned(const amp_net *an, size_t *offset, size_t align);
/* The layer that wrote the tensor layer i reads as its k-th input (-1: the
 * network's input); the number of inputs. */
int amp_plan_inputs(const network *net, int i, int *src, int max);
void amp_plan_print(const amp_net *an, FILE *out);

/* ---- common.c: names (darknet_amp.h) and the clock ---- */
double amp_clock(void);

/* ---- profile.c ---- */
/* Puts a timer around every layer's forward, backward and update slots. */
void amp_profile_install(amp_net *an);
void amp_profile_print(amp_net *an, FILE *out);
/* An interval of kind what for layer al (NULL: the network's), on the
 * host's clock or the backend's device clock (backend.h's prof_begin); stop
 * adds it to the record, at once or when the backend collects. */
amp_prof_mark amp_prof_start(amp_net *an, amp_layer *al, amp_prof_what what);
void amp_prof_stop(amp_net *an, amp_layer *al, amp_prof_what what, amp_prof_mark m);
/* seconds into al's record (NULL: the network's) for what. */
void amp_prof_add(amp_net *an, amp_layer *al, amp_prof_what what, double seconds);

/* ---- inject.c: DARKNET_AMP_INJECT (docs/testing.md) ---- */
amp_status amp_parse_injection(amp_net *an, const char *spec, char *err, size_t errlen);
/* Writes this step's injected values into the gradients, through the backend. */
void amp_inject(amp_net *an);
/* DARKNET_AMP_INJECT's LAYER:delta and LAYER:loss items for this step, on
 * cost layer index l (l: darknet's copy the wrapper holds) after its forward. */
void amp_inject_delta(amp_net *an, int index, layer *l);

/* ---- backends.c ---- */
/* The backend for a network: the CUDA one for a network built for a GPU in a
 * CUDA build, the CPU one otherwise. */
const amp_backend_ops *amp_backend_for(const network *net);
/* This build's backends (at most max into out): their count. */
int amp_backends(const amp_backend_ops **out, int max);

#endif

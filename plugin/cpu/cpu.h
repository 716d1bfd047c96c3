/* The CPU backend's private header: its per-network and per-layer state and
 * the parts it is made of.
 *
 *   backend.c    the backend table (backend.h): the batch's host arithmetic,
 *                which half path a layer gets
 *   settings.c   its environment (DARKNET_AMP_CPU, DARKNET_AMP_CONV)
 *   emulated.c   the exact half emulation: darknet's GEMM on half-rounded
 *                values, with a GPU's rounding points (the numerics reference)
 *   onednn_*.c   bfloat16, float16 (float32 kernels on half-rounded operands)
 *                and float32 convolutions, deconvolutions and inner products
 *                (connected layers) through oneDNN; a convolution either as
 *                oneDNN's or as im2col + matmul, whichever a timing at
 *                start-up finds faster (onednn.h says which file does what)
 *   im2col.c     im2col and col2im over NHWC tensors, for that matmul form
 *   round.c      float32 arrays rounded to float16 or bfloat16 in place, fast
 *                (AVX2, F16C)
 *   isa.c        which SIMD variants of the tails and the rounding run here
 *                (DARKNET_AMP_MAX_CPU_ISA)
 *   tail.c       batch-norm, bias and activation of a half layer, threaded
 *   maxpool.c    darknet's max-pooling, threaded (also on half storage)
 *   memory.c     the allocator: scratch buffers, mapped memory
 *   half_tensor.c the plan's half tensors as the layer forms reach them
 *   activations.c the activation plan carried out: half tensors placed, half
 *                layers converting at the plan's edges
 *   movement.c   route, upsample and shortcut on half storage
 *   update.c     darknet's convolutional SGD update in one threaded pass
 */
#ifndef AMP_CPU_H
#define AMP_CPU_H

#include "backend.h"

#include <stddef.h>
#include <stdint.h>

/* The instruction sets the plugin's own SIMD variants are built for (isa.c):
 * the tails' loops (tail.c: AVX-512, AVX2, baseline) and the rounding
 * (round.c: float16 with F16C from AVX up, bfloat16 with AVX2, baseline). */
typedef enum amp_cpu_isa {
    AMP_ISA_SSE2,   /* baseline x86-64 (and any other CPU) */
    AMP_ISA_AVX,    /* AVX and F16C, no AVX2 (Ivy Bridge, AMD Piledriver) */
    AMP_ISA_AVX2,   /* AVX2 and F16C */
    AMP_ISA_AVX512, /* AVX-512 F */
    AMP_ISA_COUNT
} amp_cpu_isa;

/* DARKNET_AMP_CPU: which path half layers get (docs/cfg.md). */
typedef enum amp_cpu_path {
    AMP_CPU_AUTO,    /* oneDNN for bfloat16 where it has an optimised kernel */
    AMP_CPU_ONEDNN,  /* oneDNN whatever the kernel (and for amp_dtype=float32) */
    AMP_CPU_EMULATE  /* the emulation everywhere */
} amp_cpu_path;

/* The formula a half layer's float32 batch-norm uses (tail.c). darknet's
 * CPU batch-norm and its GPU one (cuDNN) differ: unbiased variance and
 * sqrt(var) + 1e-6, against biased variance and sqrt(var + 1e-5); with 4
 * values per channel the normalised values differ by 15%. The CPU runs
 * darknet's; the GPU half layers' tests set AMP_BN_CUDNN on their CPU
 * reference, to compare like with like. */
/* DARKNET_AMP_CONV: how a convolution goes through oneDNN (docs/cfg.md). */
typedef enum amp_conv_form {
    AMP_CONV_TIMED,  /* both timed once per shape, the faster kept (small maps only) */
    AMP_CONV_DIRECT, /* oneDNN's convolution primitives */
    AMP_CONV_MATMUL, /* im2col + oneDNN matmul wherever it applies (groups 1) */
    AMP_CONV_RULE    /* by the layer's shape alone (onednn_form.c): a run repeats */
} amp_conv_form;

typedef enum amp_bn_formula {
    AMP_BN_DARKNET_CPU, /* darknet's forward_batchnorm_layer */
    AMP_BN_CUDNN        /* cudnnBatchNormalizationForwardTraining, as darknet calls it */
} amp_bn_formula;

typedef struct amp_buffer {
    float *data;
    size_t n;
} amp_buffer;

struct amp_dnnl_ctx;
struct amp_dnnl_conv;

/* The rounding points of the half paths on float32 kernels (onednn_pass.c): the
 * input, the weights, the output, the incoming gradient and the data
 * gradient. The weight gradient has none: it is summed and added to
 * weight_updates in float32. */
typedef enum amp_round_point {
    AMP_ROUND_X,
    AMP_ROUND_W,
    AMP_ROUND_Y,
    AMP_ROUND_DY,
    AMP_ROUND_DX,
    AMP_ROUND_POINTS
} amp_round_point;

typedef struct cpu_net {
    float *saved;              /* every history as it was at the batch start */
    float *states_saved;       /* every forward state (an->states) as it was then */
    amp_cpu_path path;
    amp_bn_formula bn_formula; /* of the half layers' batch-norm */
    amp_conv_form conv_form;
    struct amp_dnnl_ctx *dnnl; /* oneDNN engine and stream, NULL until needed */
    unsigned long long grad_nonzero, grad_flushed; /* this batch, half layers' incoming
                                                      gradients: amp_network_flushed */
    unsigned unrounded;        /* the tests only: rounding points left out (bits
                                  1 << amp_round_point), to show they are caught */
    /* Buffers as large as the largest layer's pass needs, shared by every
     * layer (one runs at a time): what a pass computes and uses up, never
     * what a layer keeps from its forward to its backward (the backward
     * makes its half input again). */
    void *arena;               /* the oneDNN path's (onednn_mem.c, amp_dnnl_bind) */
    size_t arena_bytes;
    void *scratchpad;          /* oneDNN's primitives' scratchpads, one at a time */
    size_t scratchpad_bytes;
    amp_buffer xq, dq, tmp, gx; /* the emulation's: half input, half gradient, weight and
                                   data gradients */
    amp_buffer in32, out32, dx32; /* the activation plan's (activations.c): a half input, a
                                     half layer's output or delta, a data gradient, in
                                     float32 */
    amp_buffer img32;             /* one image in float32 (onednn_pass.c's transfers) */
    uint16_t *deltas;             /* the plan's half deltas (amp_plan_delta_pool) */
    size_t deltas_n;
    int own_deltas;               /* the tests only: each half delta in storage of its own,
                                     to be read after the backward */
} cpu_net;

/* What runs a layer's GEMM/convolution here (the tests and describe() ask). */
typedef enum amp_cpu_runner {
    AMP_CPU_RUNS_DARKNET,  /* darknet's own float32 code */
    AMP_CPU_RUNS_EMULATED, /* emulated.c: darknet's GEMM on half-rounded values */
    AMP_CPU_RUNS_ONEDNN    /* onednn_*.c: oneDNN primitives, half or float32 kernels */
} amp_cpu_runner;

/* A half layer's tail on the activation plan's half storage (activations.c sets
 * it around a call): x, the batch-norm input, y, the output, and dh, the
 * delta, as 16-bit patterns of the half dtype; NULL: darknet's float32
 * arrays (l.x and l.x_norm, l.output, l.delta). With y (the output in half),
 * x, y and dh are NHWC tensors (tail_nhwc.c); x alone (the output float32)
 * is NCHW, as darknet's l.x. */
typedef struct amp_tail_half {
    uint16_t *x, *y, *dh;
    int bf16;      /* bfloat16 patterns, else float16 */
    int cudnn;     /* the batch-norm formula, for the backward to make x_norm again as
                      the forward made it */
    int from_half; /* the forward's values are in half storage already (x, or y without
                      batch-norm), put there by the convolution; else in l.output */
    int done;      /* the backward's tail ran already, on dh (activations.c): the layer's
                      own call does nothing */
    unsigned long long *nonzero, *flushed; /* dh: the gradient's rounding counted here */
} amp_tail_half;

typedef struct cpu_layer {
    amp_cpu_runner runner;
    amp_buffer wq;                  /* the emulation's half weights */
    unsigned long wq_version;       /* the weights_version wq was made from */
    struct amp_dnnl_conv *dnnl;     /* oneDNN primitives and buffers (any of the three kinds) */
    /* the activation plan (activations.c): the output is darknet's l.output, as
     * 16-bit patterns, when al->out_half */
    size_t plan_n;                  /* the elements (outputs x batch) the storage is for */
    uint16_t *delta_h, *x_h;        /* the delta (out_half; in cpu_net.deltas) and the
                                       batch-norm input (x_half) */
    amp_layer_fn inner_forward, inner_backward; /* a half layer's own, inside the plan's */
    amp_tail_half tail;             /* set during a call */
} cpu_layer;

static inline cpu_net *cpu_net_of(const amp_net *an)
{
    return (cpu_net *)an->bk;
}

static inline cpu_layer *cpu_layer_of(const amp_layer *al)
{
    return (cpu_layer *)al->bk;
}

/* A layer kind's half form on this backend: a row of a forms table
 * (emulated.c's GEMM kinds, movement.c's data-movement kinds). */
typedef struct amp_cpu_form {
    LAYER_TYPE type;
    amp_layer_fn forward, backward;
} amp_cpu_form;

/* The row of forms[0..n) for type, or NULL. */
static inline const amp_cpu_form *amp_cpu_form_of(const amp_cpu_form *forms, size_t n,
                                                  LAYER_TYPE type)
{
    for (size_t i = 0; i < n; ++i)
        if (forms[i].type == type) return &forms[i];
    return NULL;
}

/* The half storage the plan gave half layer al's tail, or NULL (tail.c). */
static inline const amp_tail_half *cpu_tail_half(const amp_layer *al)
{
    return al && al->bk ? &cpu_layer_of(al)->tail : NULL;
}

/* backend.c */
extern const amp_backend_ops amp_cpu_backend;
/* What runs al's GEMM/convolution: a recurrent layer's, its first
 * sub-layer's; AMP_CPU_RUNS_DARKNET for a layer of another backend. */
amp_cpu_runner amp_cpu_layer_runner(const amp_layer *al);

/* settings.c: the backend's environment, as set (NULL: unset), ... */
typedef struct amp_cpu_env {
    const char *cpu;  /* DARKNET_AMP_CPU: auto, onednn or emulate */
    const char *conv; /* DARKNET_AMP_CONV: auto, timed, direct, matmul or rule */
    int seeded;       /* DARKNET_SEED is set (not empty) */
} amp_cpu_env;
void amp_cpu_env_read(amp_cpu_env *env);
/* ... parsed: DARKNET_AMP_CPU, and DARKNET_AMP_CONV the same way;
 * AMP_ERR_INVALID with a message naming the variable on a bad value ... */
amp_status amp_cpu_path_parse(const char *value, amp_cpu_path *out, char *err, size_t errlen);
/* DARKNET_AMP_CONV's value: auto (the default) is timed, or the rule when
 * seeded is nonzero (DARKNET_SEED is set: timing would make two runs of one
 * seed take different forms). */
amp_status amp_conv_form_parse(const char *value, int seeded, amp_conv_form *out, char *err,
                               size_t errlen);
/* ... and read, checked and set in cn at attach (DARKNET_AMP_MAX_CPU_ISA too). */
amp_status amp_cpu_settings(cpu_net *cn, char *err, size_t errlen);

/* emulated.c: the emulation of l's type into al (forward, backward, runner, label), or
 * AMP_ERR_INVALID with why when it has none. */
amp_status amp_emulation_install(amp_layer *al, layer *l, char *why, size_t whylen);
/* Whether the emulation has forms for layers of this type (a GEMM kind). */
int amp_emulation_has(LAYER_TYPE type);
/* The emulated layers, also the oneDNN paths' fallbacks. */
void amp_emulated_conv_forward(layer l, network net);
void amp_emulated_conv_backward(layer l, network net);
void amp_emulated_deconv_forward(layer l, network net);
void amp_emulated_deconv_backward(layer l, network net);
void amp_emulated_connected_forward(layer l, network net);
void amp_emulated_connected_backward(layer l, network net);

/* tail.c: the float32 parts of a half layer: batch-norm or bias, then the
 * activation, and their gradients; multi-threaded, same results as darknet's.
 * th: the half storage the plan gave the layer's tail (cpu_tail_half), or
 * NULL: darknet's float32 arrays. */
void amp_tail_forward(layer l, network net, int nbias, int bias_size, amp_bn_formula bn,
                      const amp_tail_half *th);
void amp_tail_backward(layer l, network net, int nbias, int bias_size, const amp_tail_half *th);
/* tail_nhwc.c: the same on the plan's NHWC half tensors (th: y and dh set,
 * x with batch-norm), with float32 arithmetic; the backward overwrites th->dh
 * with the tail's gradient, counting its rounding's flushes in th->nonzero
 * and th->flushed. */
void amp_tail_forward_nhwc(layer l, network net, int nbias, int bias_size, amp_bn_formula bn,
                           const amp_tail_half *th);
void amp_tail_backward_nhwc(layer l, network net, int nbias, int bias_size,
                            const amp_tail_half *th);

/* maxpool.c: darknet's max-pooling, multi-threaded, same results. */
void amp_maxpool_forward(layer l, network net);
void amp_maxpool_backward(layer l, network net);

/* maxpool.c, movement.c: the data-movement layers' half forms (activations.c's
 * plan): whether l has one, and pointing al's forward and backward at it. */
void amp_maxpool_forward_half(layer l, network net);
void amp_maxpool_backward_half(layer l, network net);
/* The half form's work on NHWC half tensors of dtype dt (maxpool.c): l's
 * windows over in into out, each maximum's NHWC input index in idx; and the
 * gradient d added onto dst (the input's delta) through idx, in float32,
 * rounded once per element. */
void amp_maxpool_nhwc_forward(const layer *l, amp_dtype dt, const uint16_t *in, uint16_t *out,
                              int *idx);
void amp_maxpool_nhwc_backward(const layer *l, amp_dtype dt, const uint16_t *d, const int *idx,
                               uint16_t *dst);
int amp_movement_has_half(const layer *l);
/* Whether movement.c (or maxpool.c) has a half form for the type at all. */
int amp_movement_has_kind(LAYER_TYPE type);
void amp_movement_install(amp_layer *al, layer *l);

/* memory.c: glibc's mmap threshold pinned at its default before darknet's
 * arrays are freed (memory.c says why); nothing elsewhere. */
void amp_cpu_pin_mmap_threshold(void);
/* memory.c: a buffer of at least n floats (grown, never shrunk; aborts when
 * out of memory, as darknet does in a step) ... */
float *amp_cpu_reserve(amp_buffer *b, size_t n);
/* ... and large buffers straight from the operating system (mmap), given
 * back to it when freed: the arena and scratchpad grow layer by layer in the
 * first step, and freed through malloc they would stay in the process's heap. */
void *amp_cpu_map(size_t bytes);
void amp_cpu_unmap(void *p, size_t bytes);
/* *p (of *bytes) replaced by a mapping of need bytes if it is smaller (its
 * contents not kept); nonzero when out of memory, *p unchanged. */
int amp_cpu_grow_mapped(void **p, size_t *bytes, size_t need);

/* half_tensor.c: layer i's output as the plan stores it in half, NHWC: c
 * channels by hw positions per image (out_c by out_h x out_w; outputs by 1
 * for a layer without a spatial shape) ... */
void amp_cpu_tensor_shape(const network *net, int i, int *c, int *hw);
/* ... the half delta of layer i (NULL: not half) ... */
uint16_t *amp_cpu_half_delta(const amp_net *an, int i);
/* ... and at the start of layer j's backward, the half deltas whose life
 * starts there (amp_layer.delta_from) zeroed. */
void amp_cpu_deltas_begin(const amp_net *an, int j);

/* maxpool.c: darknet's float32 forms of l into al (its own; max-pooling
 * threaded): at install, and where a layer leaves the plan's half region. */
void amp_cpu_float32_forms(amp_layer *al, const layer *l);

/* activations.c: the backend's activations() (backend.h), and darknet's
 * float32 arrays given back at detach or before a fallback; backend.h's
 * nonfinite_output over the layers' outputs as the plan keeps them. */
amp_status amp_cpu_activations(amp_net *an, char *err, size_t errlen);
void amp_cpu_activations_release(amp_net *an);
int amp_cpu_nonfinite_output(amp_net *an, int last, amp_overflow_scan *scan, int *finite_params);

/* probe.c: backend.h's probe_forward (amp_probe). */
int amp_cpu_probe_forward(amp_layer *al, layer l, network net, double *rel);

/* update.c: darknet's update_convolutional_layer in one threaded pass, bit
 * for bit; amp_update_conv_replaces says whether l's update is darknet's. */
void amp_update_conv(layer l, update_args a);
int amp_update_conv_replaces(const layer *l);

/* im2col.c: a convolution's shape (darknet's padding and output size). */
typedef struct amp_conv_shape {
    int batch, h, w, c, out_h, out_w, size, stride, pad;
} amp_conv_shape;
/* The largest size^2 im2col and col2im take (darknet's kernels are far
 * smaller; onednn_matmul.c builds no matmul form above it). */
#define AMP_IM2COL_MAX_WINDOW 1024
/* col[P][K] (P = batch * out_h * out_w, K = c * size * size, darknet's OIHW
 * weights order: channel outermost) from x, NHWC; elements of elt (2 or 4)
 * bytes, zeros for the padding. */
void amp_im2col_nhwc(const void *x, void *col, size_t elt, const amp_conv_shape *s);
/* dx (NHWC, float32) = the adjoint of im2col applied to dcol[P][K]: every
 * input position the sum of the window columns that read it. */
void amp_col2im_nhwc(const float *dcol, float *dx, const amp_conv_shape *s);

/* onednn_layer.c (onednn_none.c without oneDNN): l (a convolutional, deconvolutional or connected
 * layer, or a recurrent layer's connected sub-layer) through oneDNN into al, or why not (dtype
 * float32 runs the same primitives in float32). */
amp_status amp_onednn_install(amp_layer *al, layer *l, amp_dtype dtype, char *why,
                              size_t whylen);
void amp_onednn_free(cpu_layer *c);
/* How often a layer installed on oneDNN ran in the emulation instead (a
 * primitive that failed; 1 more while its current shape cannot be built):
 * for the tests, which must not compare the emulation with itself. */
int amp_onednn_fallbacks(const cpu_layer *c);
void amp_onednn_ctx_free(cpu_net *cn);
/* The activation plan on a layer on oneDNN (activations.c): its input's and
 * output's storage (float32, or the half dtype: the reorders read and write
 * the half arrays directly); 0 for a layer not on oneDNN. A forward and a
 * backward on them, AMP_OK or a status (a forward that failed changed
 * nothing; amp_onednn_plan_ran says whether the last forward ran here). */
int amp_onednn_plan_io(cpu_layer *c, amp_dtype in, amp_dtype out);
amp_status amp_onednn_plan_forward(layer l, network net);
amp_status amp_onednn_plan_backward(layer l, network net);
int amp_onednn_plan_ran(const cpu_layer *c);
/* Whether the layer's last forward rounded its float32 input to the half
 * type in darknet's own array (half numerics on float32 kernels, no reorder
 * between: input_for), so that a value beyond the half type's range became
 * inf there; 0 for a layer not on oneDNN. */
int amp_onednn_rounds_input_in_place(const cpu_layer *c);
/* A layer on oneDNN: 1 when it runs as im2col + matmul, else 0; -1 when not
 * on oneDNN. The timings (seconds for a forward and a backward) of the
 * choice made for its current shape in *t_direct and *t_matmul, -1 where
 * there was none (DARKNET_AMP_CONV=direct or matmul, a large map, one form
 * only). */
int amp_onednn_form(const cpu_layer *c, double *t_direct, double *t_matmul);
/* The CPU's instruction set as oneDNN sees it ("avx512_core_bf16"), and
 * whether it runs bfloat16 natively (AVX512-BF16 or AMX). */
const char *amp_onednn_isa(int *native_bf16);

/* round.c: x[i] = amp_round_f16(x[i]) (dtype float16) or amp_round_bf16(x[i])
 * (bfloat16) for n elements, bit for bit, eight at a time on AVX2, threaded
 * for large n; any other dtype: nothing. nonzero (may be NULL, then flushed
 * is ignored): += the elements that were not zero, flushed += those of them
 * that rounded to zero (amp_network_flushed's counts). */
void amp_cpu_round_half(amp_dtype dtype, float *x, size_t n, unsigned long long *nonzero,
                        unsigned long long *flushed);
/* The same with the variants of isa (at most the CPU's), for the tests;
 * returns the variant that ran (AMP_ISA_AVX2, AMP_ISA_AVX: F16C, or
 * AMP_ISA_SSE2: portable code). */
amp_cpu_isa amp_cpu_round_half_at(amp_cpu_isa isa, amp_dtype dtype, float *x, size_t n,
                                  unsigned long long *nonzero, unsigned long long *flushed);

/* round.c: float32 to and from the activation plan's half storage (16-bit
 * patterns of dtype), bit for bit half_format.h's conversions, eight at a
 * time with F16C or AVX2, threaded for large n; add: h = half(float(h) +
 * add), the sum in float32 ... */
void amp_cpu_to_half(amp_dtype dtype, const float *src, uint16_t *dst, size_t n);
void amp_cpu_from_half(amp_dtype dtype, const uint16_t *src, float *dst, size_t n);
void amp_cpu_add_half(amp_dtype dtype, uint16_t *h, const float *add, size_t n);
/* ... and with the variants of isa, for the tests: op 0 to half (reads f),
 * 1 from half (writes f), 2 add (reads f); returns the variant that ran. */
amp_cpu_isa amp_cpu_convert_at(amp_cpu_isa isa, int op, amp_dtype dtype, float *f, uint16_t *h,
                               size_t n);
/* round.c: the same between darknet's NCHW float32 arrays and the plan's
 * NHWC half storage (batch images of c channels by hw positions), converted
 * and transposed in one pass, bit for bit the conversions above. */
void amp_cpu_to_half_nhwc(amp_dtype dtype, const float *src, uint16_t *dst, int batch, int c,
                          int hw);
void amp_cpu_from_half_nhwc(amp_dtype dtype, const uint16_t *src, float *dst, int batch, int c,
                            int hw);
void amp_cpu_add_half_nhwc(amp_dtype dtype, uint16_t *h, const float *add, int batch, int c,
                           int hw);

/* isa.c: the widest variant the CPU and the operating system run; that,
 * capped by DARKNET_AMP_MAX_CPU_ISA (read once), the one in use; the value's
 * meaning (unset or "": no cap; AMP_ERR_INVALID with a message otherwise);
 * a variant's name ("avx2"). */
amp_cpu_isa amp_cpu_isa_detected(void);
amp_cpu_isa amp_cpu_isa_used(void);
amp_status amp_cpu_isa_parse(const char *value, amp_cpu_isa *out, char *err, size_t errlen);
const char *amp_cpu_isa_name(amp_cpu_isa isa);

#endif

/* The decisions of the GPU half path that need no device, as plain C (no
 * CUDA types), so that the host tests exercise them (tests/cuda/
 * gpu_plan_test.c): a convolution's dimensions as cuDNN is given them, the
 * choice among cuDNN's ranked algorithms, darknet's row-major GEMM written
 * as the column-major call cuBLAS takes, and where the activation plan's
 * half tensors go on the device.
 */
#ifndef AMP_GPU_PLAN_H
#define AMP_GPU_PLAN_H

#include "darknet_amp.h" /* amp_status */

#include <stddef.h>

/* The largest workspace one half convolution may ask for: darknet's own
 * per-layer cap for its float32 algorithms (patch 0001), so the half path
 * never needs more than darknet already allows itself. */
#define AMP_GPU_WORKSPACE_LIMIT ((size_t)2000000000)

/* The most bytes a half convolution's weight-gradient operands (its
 * im2col columns and its gradient laid out by channel) may take at once:
 * the batch is cut into chunks that fit, one GEMM each. */
#define AMP_GPU_WGRAD_LIMIT ((size_t)256 << 20)

/* NCHW input, KCRS filter (C = channels per group), NCHW output. */
typedef struct amp_conv_dims {
    int n, c, h, w;       /* input */
    int k, cg, size;      /* filters, channels per group, window */
    int stride, pad, groups;
    int out_h, out_w;
} amp_conv_dims;

/* Fills d from darknet's convolutional layer fields and checks that cuDNN
 * can express the layer as darknet computes it: groups divide channels and
 * filters, the output size is cuDNN's ((h + 2 pad - size) / stride + 1,
 * which is darknet's), every tensor's element count fits an int (cuDNN's 4-d
 * descriptors). AMP_OK, or AMP_ERR_INVALID with the reason in why. */
amp_status amp_conv_dims_make(int batch, int c, int h, int w, int filters, int size, int stride, int pad,
                       int groups, int out_h, int out_w, amp_conv_dims *d, char *why,
                       size_t whylen);

/* Images per weight-gradient GEMM (amp_wgrad_chunk): as many of batch as
 * keep per_image bytes each within limit and the GEMM's K (images x
 * out_hw) within an int; at least 1. */
int amp_wgrad_chunk(int batch, size_t per_image, size_t out_hw, size_t limit);

/* A yolo layer's output on the device in three operations instead of two
 * kernel launches per image and anchor (darknet's forward_yolo_layer_gpu):
 * the input copied, the logistic over all of it (darknet's kernel), and the
 * box sizes that darknet leaves unactivated copied back from the input as
 * one 2-d copy of rows floats wide at offset first, pitch floats apart,
 * rows times (a row per image and anchor). For w x h cells, n anchors,
 * classes classes and batch images. */
typedef struct amp_yolo_kept {
    size_t first, width, pitch, rows;
} amp_yolo_kept;

amp_yolo_kept amp_yolo_kept_of(int w, int h, int n, int classes, int batch);

/* One of cuDNN's ranked candidates (cudnnGet*Algorithm_v7 results). */
typedef struct amp_algo_candidate {
    int algo;
    int ok;         /* status == CUDNN_STATUS_SUCCESS */
    size_t memory;  /* workspace bytes */
    int deterministic; /* determinism == CUDNN_DETERMINISTIC */
} amp_algo_candidate;

/* The index of the first candidate (they come fastest first) that cuDNN
 * supports and whose workspace is at most limit; -1 if none. */
int amp_algo_pick(const amp_algo_candidate *c, int n, size_t limit);
/* The first that also gives the same result on every run (no atomic float
 * additions), where one fits; else amp_algo_pick's. */
int amp_algo_pick_deterministic(const amp_algo_candidate *c, int n, size_t limit);

/* darknet's gemm_gpu(TA, TB, M, N, K, A, lda, B, ldb, C, ldc) is row-major:
 * C (M x N) = op(A) op(B). cuBLAS is column-major, where the same memory
 * holds C^T = op(B)^T op(A)^T: the call takes B first. */
typedef struct amp_gemm_call {
    int trans_first, trans_second; /* cuBLAS opA, opB: transposed or not */
    int m, n, k;
    int first_is_b;                /* always 1: the first operand is darknet's B */
    int ld_first, ld_second, ldc;
} amp_gemm_call;

amp_gemm_call amp_gemm_colmajor(int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc);

/* What the activation plan stores for one layer on the device, and the
 * shared scratch its convolution needs (activations.c, half_conv.c), from
 * the plan's decisions for it. Every half tensor is an allocation of its
 * own (darknet's resize_network frees output_gpu with cudaFree, which only
 * takes a whole allocation); the half deltas share one pool
 * (amp_plan_delta_pool_aligned, each delta at a multiple of
 * AMP_GPU_DELTA_ALIGN elements: 16 bytes, as tail.cu's vector passes need). */
#define AMP_GPU_DELTA_ALIGN ((size_t)8)
typedef struct amp_gpu_layer_plan {
    int converts;        /* a half convolution through cuDNN (the plan may store around it
                            where its io is AMP_IO_CONVERTS) */
    int out_half, x_half; /* the plan's decisions for its output and batch-norm input */
    int in_half;         /* the layer before it stores its output in half */
    int in_first;        /* its backward is the first to add into that half delta (the
                            plan's delta_from: the delta is zero before it) */
    int batch_normalize;
    int needs_input;     /* its activation's gradient needs the values before it */
} amp_gpu_layer_plan;
typedef struct amp_gpu_storage {
    int planned;       /* the convolution runs on NHWC half tensors (a half input or output) */
    int output_half;   /* output_gpu 2 bytes an element, delta_gpu NULL (its delta in the pool) */
    int x_h;           /* its own half batch-norm input (or the values before the activation) */
    int drop_x;        /* darknet's x_gpu and x_norm_gpu freed */
    int drop_activation_input; /* darknet's activation_input_gpu freed */
    int darknet_tail;  /* darknet's float32 tail on a float32 output (x_gpu, x_norm_gpu kept) */
    /* shared scratch (a convolution's): */
    int in_scratch;    /* half input (a float32 input) */
    int dx_scratch;    /* half data gradient (a float32 input; or a half delta others
                          added into first: half(delta + half(dx)), as the CPU plan adds) */
    int out_scratch;   /* half output and incoming gradient (a float32 output) */
    int dx32_scratch;  /* float32 data gradient (a planned convolution with a float32 input) */
    int dyc_scratch;   /* the gradient by channel (NCHW weight gradient; the plan reads NHWC) */
} amp_gpu_storage;
amp_gpu_storage amp_gpu_storage_of(const amp_gpu_layer_plan *p);

/* DARKNET_AMP_GPU_PLAN's value (NULL: unset): *plan 1 for the activation
 * plan on the device (unset, empty or "half": the default), 0 for "float32"
 * (every tensor between layers in darknet's float32 arrays). AMP_OK, or
 * AMP_ERR_INVALID naming the value for anything else. */
amp_status amp_gpu_plan_setting(const char *value, int *plan, char *err, size_t errlen);

#endif

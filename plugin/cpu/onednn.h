/* The oneDNN half path's private header (plugin/cpu/onednn*.c, built only
 * with oneDNN; onednn_none.c stands in without it): a layer's primitives and
 * buffers, and the functions its files share.
 *
 * From the top down (each file calls only those below it):
 *   onednn_layer.c   a half layer as darknet calls it: forward, backward,
 *                    fall-backs, label, install (cpu.h's amp_onednn_*)
 *   onednn_form.c    which of the two forms a convolution takes (timed)
 *   onednn_pass.c    the passes on built primitives, with the rounding points
 *   onednn_direct.c  oneDNN's own convolution, deconvolution and inner product
 *   onednn_matmul.c  a convolution as im2col + matmul
 *   onednn_mem.c     the engine, memories, reorders, running a primitive
 */
#ifndef AMP_CPU_ONEDNN_H
#define AMP_CPU_ONEDNN_H

#include "cpu.h"

#include <oneapi/dnnl/dnnl.h>

struct amp_dnnl_ctx {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
};

/* A memory object: oneDNN-owned (allocated) or a view of a darknet array
 * (handle set before each use). */
typedef struct dmem {
    dnnl_memory_desc_t md;
    dnnl_memory_t m;
} dmem;

/* A memory whose storage is the network's arena (cpu_net.arena): the
 * activation-sized buffers of a pass (the input and output in oneDNN's
 * layouts, the gradients, the matmul form's windows). One layer runs at a
 * time, so every layer's buffers share one arena as large as the largest
 * layer's, instead of each layer keeping its own between its forward and its
 * backward (the backward redoes the input's reorder). A view on such a
 * memory (owner set) follows its owner. The memories are named by their
 * place in amp_dnnl_conv, which is copied whole (onednn_form.c). */
typedef struct amp_dnnl_slot {
    size_t mem;   /* offsetof the dmem in amp_dnnl_conv */
    long owner;   /* the owner's, or -1: at offset in its group's part of the arena */
    int group;    /* AMP_DNNL_BOTH, _FORWARD, _BACKWARD: the passes it lives in */
    size_t offset;
} amp_dnnl_slot;
/* A forward's memories and a backward's share the arena's space after the
 * ones both use (the input, the matmul form's windows); the data gradient's
 * come after the backward's, and only when the layer has one to give (not
 * the first layer of a network, usually). A memory in the layout of
 * darknet's side of it (the plan's NHWC half tensors, where oneDNN's
 * convolution works in NHWC too) takes no arena space: it is darknet's
 * storage itself, given before each pass (amp_dnnl_bind_user), and needs no
 * reorder. */
enum {
    AMP_DNNL_BOTH,
    AMP_DNNL_FORWARD,
    AMP_DNNL_BACKWARD,
    AMP_DNNL_DATA_GRAD,
    AMP_DNNL_GROUPS,
    AMP_DNNL_USER = AMP_DNNL_GROUPS /* darknet's side's storage, not the arena's */
};
#define AMP_DNNL_SLOTS 16

/* The matmul form's buffers (im2col + matmul): owned ones, and views of
 * another's storage with the matmul's 2-D (or the reorders' 4-D) shape. */
typedef struct amp_dnnl_mm {
    amp_conv_shape shape;
    dmem col;            /* the input's windows, P x K, the half dtype */
    dmem dcol;           /* their gradient, P x K, float32 */
    dmem dxa, dxh;       /* the data gradient, NHWC: float32 sums, rounded to bfloat16 */
    dmem w_t, w_nk;      /* the weights (OIHW, darknet's order) as K x N (transposed) and N x K */
    dmem y4;             /* the P x N output as NHWC */
    dmem dy_t, dy_pn;    /* the NHWC incoming gradient as N x P (transposed) and P x N */
    dmem dw4;            /* the N x K weight gradient as OIHW, float32 */
    dnnl_primitive_t r_dxh;
} amp_dnnl_mm;

/* The transfers between darknet's side (its arrays, or the plan's half
 * storage) and oneDNN's layouts: the input, the output, the incoming
 * gradient (for backward-weights and backward-data), the data gradient. */
typedef enum amp_dnnl_transfer {
    AMP_T_X,
    AMP_T_Y,
    AMP_T_DY_BW,
    AMP_T_DY_BD,
    AMP_T_DX,
    AMP_T_COUNT
} amp_dnnl_transfer;

/* float32 kernels (float16; bfloat16 without bfloat16 instructions) on the
 * plan's half storage: oneDNN's reorders between a half array and a
 * float32 layout are its generic ones, ten times slower than its own
 * float32 reorders. So a transfer goes a few images at a time (up to 2 MiB
 * of float32) through a float32 buffer that round.c converts, with a
 * reorder of that many images. */
typedef struct amp_dnnl_image {
    dnnl_primitive_t r; /* the float32 images <-> as many of the oneDNN layout's */
    dmem img, part;     /* views: the float32 images (cpu_net.img32), the layout's */
    int images;         /* how many at a time (they divide the batch) */
    size_t part_bytes;  /* that many images of the layout, padding included */
    size_t elems;       /* their elements on darknet's side */
} amp_dnnl_image;

/* Which form a convolution took, per shape it ran in (DARKNET_AMP_CONV=auto
 * times them once per shape, as cuDNN's Find does; random=1 revisits
 * shapes), with the timings (seconds for a forward and a backward). */
#define AMP_DNNL_CHOICES 16
typedef struct amp_dnnl_choice {
    struct {
        int batch, h, w, matmul;
        double t_direct, t_matmul; /* < 0: not timed (one form only) */
    } shape[AMP_DNNL_CHOICES];
    int n;
} amp_dnnl_choice;

typedef struct amp_dnnl_conv {
    /* the shape the primitives were made for */
    int batch, h, w;
    dnnl_data_type_t dt;
    dnnl_primitive_t fwd, bwd_data, bwd_weights;
    /* darknet's float32 arrays */
    dmem x_user, y_user, w_user, dy_user, dw_user, dx_user;
    /* oneDNN's layouts; an alias (m == another's) where two agree */
    dmem x, y, w_fwd, w_bwd, dy_bw, dy_bd, x_bw, dw, dx;
    /* reorders: in, out, and the two that add (sum post-op) */
    dnnl_primitive_t r_x, r_y, r_w_fwd, r_w_bwd, r_dy_bw, r_dy_bd, r_x_bw, r_dw, r_dx;
    /* the memories in the arena, and the bytes they take there */
    amp_dnnl_slot slot[AMP_DNNL_SLOTS];
    int nslots;
    size_t group_bytes[AMP_DNNL_GROUPS];
    unsigned long w_fwd_version, w_bwd_version;
    amp_dtype rounded;  /* float16, or bfloat16 where the CPU has no bfloat16
                           instructions: float32 primitives, every operand and
                           result rounded to it where the emulation rounds it;
                           float32: nothing rounded here (oneDNN's own types) */
    int matmul;         /* a convolution as im2col + matmul (mm), not oneDNN's */
    /* darknet's side of the input and its gradient (user_in), of the output
     * and its gradient (user_out): float32 arrays, or the activation plan's
     * half storage (dnnl_bf16, dnnl_f16; activations.c), which the reorders
     * read and write directly */
    dnnl_data_type_t user_in, user_out;
    amp_dnnl_image image[AMP_T_COUNT]; /* r set: the transfer goes image by image */
    amp_dnnl_mm mm;
    amp_dnnl_choice choice;
    int onednn_forward; /* the last forward ran here, not in the fallback */
    int warned;         /* a forward fell back after a failed primitive: said once */
    char impl[3][48];   /* fwd, bwd-data, bwd-weights implementation names */
    char label[64];     /* amp_layer.label: the form, and float32 kernels where rounded */
} amp_dnnl_conv;

/* A oneDNN call's status as the plugin's (error.h): AMP_ERR_DEVICE with the
 * call and oneDNN's status in why. */
#define AMP_DNNL_CHECK(call) amp_dnnl_check((call), #call, why, whylen)
amp_status amp_dnnl_check(dnnl_status_t st, const char *call, char *why, size_t whylen);

/* ---- onednn_mem.c ---- */
/* The attributes every primitive is made with: its scratchpad given at each
 * run (amp_dnnl_run) from one buffer the network's layers share, rather than
 * each primitive's own (Debian's oneDNN is built for concurrent execution:
 * every primitive would hold one). */
const_dnnl_primitive_attr_t amp_dnnl_attr(void);
/* The network's engine and stream, made on first use. */
amp_status amp_dnnl_ctx_of(cpu_net *cn, struct amp_dnnl_ctx **out, char *why, size_t whylen);
/* Every primitive and memory of d released; d's shape forgotten. */
void amp_dnnl_release(amp_dnnl_conv *d);
/* m: a view of a darknet array (no storage), oneDNN-owned storage, or src's
 * storage where the layouts agree. */
amp_status amp_dnnl_mem_view(dmem *m, const dnnl_memory_desc_t *md, dnnl_engine_t e, char *why,
                             size_t whylen);
/* Storage of its own (arena NULL: oneDNN-owned, for what a layer keeps, its
 * weights) or a slot in arena's share of the network's arena (amp_dnnl_bind
 * gives it its address before each pass). */
amp_status amp_dnnl_mem_own(dmem *m, const dnnl_memory_desc_t *md, amp_dnnl_conv *arena,
                            dnnl_engine_t e, char *why, size_t whylen);
amp_status amp_dnnl_mem_alias_or_own(dmem *dst, const dmem *src, const dnnl_memory_desc_t *md,
                                     amp_dnnl_conv *arena, dnnl_engine_t e, char *why,
                                     size_t whylen);
/* m of layout md on darknet's side's storage (no reorder to or from it:
 * amp_dnnl_is_user); the same where md is user's layout, else a memory in
 * d's arena. */
amp_status amp_dnnl_mem_user(amp_dnnl_conv *d, dmem *m, const dnnl_memory_desc_t *md,
                             dnnl_engine_t e, char *why, size_t whylen);
amp_status amp_dnnl_mem_user_or_own(amp_dnnl_conv *d, dmem *m, const dnnl_memory_desc_t *md,
                                    const dmem *user, dnnl_engine_t e, char *why, size_t whylen);
int amp_dnnl_is_user(const amp_dnnl_conv *d, const dmem *m);
/* m, a memory on darknet's side's storage, and the views on it, at p. */
amp_status amp_dnnl_bind_user(amp_dnnl_conv *d, dmem *m, void *p);
/* Storage of dims and tag, as amp_dnnl_mem_own; owner's storage seen as md,
 * or as a rows x cols matrix (transposed: the owner's cols x rows read by
 * columns), following the owner into the arena (d). */
amp_status amp_dnnl_mem_tag(dmem *m, int nd, const dnnl_dims_t dims, dnnl_data_type_t dt,
                            dnnl_format_tag_t tag, amp_dnnl_conv *arena, dnnl_engine_t e,
                            char *why, size_t whylen);
amp_status amp_dnnl_mem_view_on(amp_dnnl_conv *d, dmem *m, const dnnl_memory_desc_t *md,
                                const dmem *owner, dnnl_engine_t e, char *why, size_t whylen);
amp_status amp_dnnl_mem_matrix_on(amp_dnnl_conv *d, dmem *m, dnnl_dim_t rows, dnnl_dim_t cols,
                                  int transposed, const dmem *owner, dnnl_engine_t e, char *why,
                                  size_t whylen);
/* d's arena memories at their addresses in the network's arena (grown to
 * d's share if needed), before a pass on d's primitives; data_grad: a
 * backward that makes the data gradient. */
amp_status amp_dnnl_bind(amp_layer *al, amp_dnnl_conv *d, int data_grad);
void *amp_dnnl_data_of(const dmem *m);
void amp_dnnl_set(dmem *m, void *p);
void amp_dnnl_md_any(dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims,
                     dnnl_data_type_t dt);
/* A reorder from src to dst, adding into dst (sum post-op) when add. */
amp_status amp_dnnl_reorder(dnnl_primitive_t *out, const dmem *src, const dmem *dst, int add,
                            dnnl_engine_t e, char *why, size_t whylen);
const char *amp_dnnl_impl_name(const_dnnl_primitive_desc_t pd);
/* Runs a primitive, a reorder, on the network's stream, and waits. */
amp_status amp_dnnl_run(amp_layer *al, dnnl_primitive_t p, int nargs,
                        const dnnl_exec_arg_t *args);
amp_status amp_dnnl_run_reorder(amp_layer *al, dnnl_primitive_t p, const dmem *src,
                                const dmem *dst);

/* ---- onednn_direct.c: every primitive and buffer for l's current shape, or
 * why oneDNN cannot: a convolution as oneDNN's; a deconvolutional or
 * connected layer ---- */
amp_status amp_dnnl_conv_build(amp_dnnl_conv *d, dnnl_engine_t e, const layer *l, char *why,
                               size_t whylen);
amp_status amp_dnnl_gemm_layer_build(amp_dnnl_conv *d, dnnl_engine_t e, const layer *l,
                                     char *why, size_t whylen);

/* ---- onednn_matmul.c ---- */
/* The matmul form for l's current shape, or why not (everything released). */
amp_status amp_dnnl_mm_build(amp_dnnl_conv *d, dnnl_engine_t e, const layer *l, char *why,
                             size_t whylen);

/* The data type of darknet's side of the input (out: the output), float32
 * unless the plan stores it in half; and its layout: NHWC in half (the
 * plan's), darknet's NCHW in float32. */
dnnl_data_type_t amp_dnnl_user_type(const amp_dnnl_conv *d, int out);
dnnl_format_tag_t amp_dnnl_user_tag(const amp_dnnl_conv *d, int out);

/* The image-by-image transfers of d (amp_dnnl_image) where d's kernels are
 * float32 and darknet's side is half, for the memories they connect (NULL:
 * none); ux, uy: darknet's side of the input and output. */
amp_status amp_dnnl_images_build(amp_dnnl_conv *d, dnnl_engine_t e, const dnnl_memory_desc_t *ux,
                                 const dnnl_memory_desc_t *uy, const dmem *const internal[AMP_T_COUNT],
                                 char *why, size_t whylen);

/* ---- onednn_pass.c ---- */
/* A forward's convolution or GEMM into l->output, half-rounded, no tail; a
 * backward's weight and data gradients added into darknet's arrays. */
amp_status amp_dnnl_forward_core(amp_layer *al, amp_dnnl_conv *d, const layer *l,
                                 const float *input);
amp_status amp_dnnl_gradients(amp_layer *al, amp_dnnl_conv *d, layer l, network net);

/* ---- onednn_form.c ---- */
/* Some primitive of d is oneDNN's reference kernel. */
int amp_dnnl_has_reference(const amp_dnnl_conv *d);
/* The primitives of l's kind for its current shape; a convolution in the
 * form DARKNET_AMP_CONV asks for, or chose before for this shape. */
amp_status amp_dnnl_layer_build(amp_layer *al, amp_dnnl_conv *d, const layer *l, char *why,
                                size_t whylen);

#endif

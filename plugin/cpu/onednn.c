/* Half-precision convolutions on the CPU through oneDNN: forward,
 * backward-data and backward-weights as oneDNN primitives with bfloat16
 * tensors and float32 accumulation (AVX512-BF16 or AMX kernels where the CPU
 * has them), or the same primitives in float32 (amp_dtype=float32 with
 * DARKNET_AMP_CPU=onednn, so a benchmark can tell the gain of the precision
 * from the gain of the library).
 *
 * Numerics are those of the emulation (emulated.c) and of a GPU: inputs,
 * weights, the convolution's output, the incoming gradient and the weight
 * and data gradients are stored in bfloat16 (round to nearest even, by
 * oneDNN's conversions); products are summed in float32, in oneDNN's order.
 * The weight gradient is added into darknet's weight_updates and the data
 * gradient into net.delta by a reorder with a sum post-op, in float32: what
 * route/shortcut layers accumulated there is kept.
 *
 * Layout: darknet's tensors are NCHW float32. Each primitive is created with
 * format "any", so oneDNN picks its blocked layouts; reorders convert and
 * re-lay in one pass. Weights are converted once per weights version (every
 * update and load), not per call. Primitives are made for the layer's shape
 * and remade when darknet resizes the network (random=1) or changes the
 * batch.
 */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

#ifndef AMP_HAVE_ONEDNN

amp_status amp_onednn_install(amp_layer *al, layer *l, amp_dtype dtype, char *why,
                              size_t whylen)
{
    (void)al, (void)l, (void)dtype;
    AMP_RETURN_ERROR(AMP_ERR_INVALID, why, whylen, "built without oneDNN");
}
void amp_onednn_free(cpu_layer *c) { (void)c; }
int amp_onednn_fallbacks(const cpu_layer *c)
{
    (void)c;
    return 0;
}
void amp_onednn_ctx_free(cpu_net *cn) { (void)cn; }
int amp_onednn_form(const cpu_layer *c, double *t_direct, double *t_matmul)
{
    (void)c;
    *t_direct = *t_matmul = -1;
    return -1;
}
const char *amp_onednn_isa(int *native_bf16)
{
    *native_bf16 = 0;
    return "none";
}

#else

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
    dmem dw4;            /* the N x K weight gradient as OIHW */
    dnnl_primitive_t r_dxh;
} amp_dnnl_mm;

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
    unsigned long w_fwd_version, w_bwd_version;
    amp_dtype rounded;  /* float16, or bfloat16 where the CPU has no bfloat16
                           instructions: float32 primitives, every operand and
                           result rounded to it where the emulation rounds it;
                           float32: nothing rounded here (oneDNN's own types) */
    int matmul;         /* a convolution as im2col + matmul (mm), not oneDNN's */
    amp_dnnl_mm mm;
    amp_dnnl_choice choice;
    int onednn_forward; /* the last forward ran here, not in the fallback */
    int warned;         /* a forward fell back after a failed primitive: said once */
    char impl[3][48];   /* fwd, bwd-data, bwd-weights implementation names */
    char label[64];     /* amp_layer.label: the form, and float32 kernels where rounded */
} amp_dnnl_conv;

/* A oneDNN call's status as the plugin's (error.h): AMP_ERR_DEVICE with the
 * call and oneDNN's status in why. */
#define DNNL_CHECK(call) dnnl_check((call), #call, why, whylen)
static amp_status dnnl_check(dnnl_status_t st, const char *call, char *why, size_t whylen)
{
    AMP_RETURN_ERROR_IF(st != dnnl_success, AMP_ERR_DEVICE, why, whylen,
                        "%s failed (oneDNN status %d)", call, (int)st);
    return AMP_OK;
}

static amp_status ctx_of(cpu_net *cn, struct amp_dnnl_ctx **out, char *why, size_t whylen)
{
    if (!cn->dnnl) {
        struct amp_dnnl_ctx *c = calloc(1, sizeof *c);
        AMP_RETURN_ERROR_IF(!c, AMP_ERR_NOMEM, why, whylen, "out of memory");
        if (dnnl_engine_create(&c->engine, dnnl_cpu, 0) != dnnl_success ||
            dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags) != dnnl_success) {
            if (c->engine) dnnl_engine_destroy(c->engine);
            free(c);
            AMP_RETURN_ERROR(AMP_ERR_DEVICE, why, whylen, "no oneDNN CPU engine");
        }
        cn->dnnl = c;
    }
    *out = cn->dnnl;
    return AMP_OK;
}

void amp_onednn_ctx_free(cpu_net *cn)
{
    if (!cn || !cn->dnnl) return;
    dnnl_stream_destroy(cn->dnnl->stream);
    dnnl_engine_destroy(cn->dnnl->engine);
    free(cn->dnnl);
    cn->dnnl = NULL;
}

const char *amp_onednn_isa(int *native_bf16)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    *native_bf16 = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
    switch (isa) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_sse41: return "sse41";
    default: return "other";
    }
}

static void prim_free(dnnl_primitive_t *p)
{
    if (*p) dnnl_primitive_destroy(*p);
    *p = NULL;
}

static void mem_free(dmem *m, const dmem *const *aliases, int naliases)
{
    if (!m->m) return;
    for (int i = 0; i < naliases; ++i)
        if (aliases[i] != m && aliases[i]->m == m->m) { /* not the owner */
            m->m = NULL;
            return;
        }
    dnnl_memory_destroy(m->m);
    m->m = NULL;
}

static void conv_release(amp_dnnl_conv *d)
{
    dnnl_primitive_t *prims[] = {&d->fwd, &d->bwd_data, &d->bwd_weights, &d->r_x, &d->r_y,
                                 &d->r_w_fwd, &d->r_w_bwd, &d->r_dy_bw, &d->r_dy_bd, &d->r_x_bw,
                                 &d->r_dw, &d->r_dx, &d->mm.r_dxh};
    for (size_t i = 0; i < sizeof prims / sizeof prims[0]; ++i) prim_free(prims[i]);
    /* aliases point at an owner earlier in this list: free from the end (the
     * matmul form's views are memories of their own, without storage) */
    dmem *mems[] = {&d->x_user, &d->y_user, &d->w_user, &d->dy_user, &d->dw_user, &d->dx_user,
                    &d->x, &d->y, &d->w_fwd, &d->dy_bw, &d->dw, &d->dx,
                    &d->w_bwd, &d->dy_bd, &d->x_bw,
                    &d->mm.col, &d->mm.dcol, &d->mm.dxa, &d->mm.dxh, &d->mm.w_t, &d->mm.w_nk,
                    &d->mm.y4, &d->mm.dy_t, &d->mm.dy_pn, &d->mm.dw4};
    const int n = (int)(sizeof mems / sizeof mems[0]);
    for (int i = n - 1; i >= 0; --i) mem_free(mems[i], (const dmem *const *)mems, i);
    d->batch = 0;
    d->matmul = 0;
}

/* A view of a darknet array (no storage), or oneDNN-owned storage. */
static amp_status mem_view(dmem *m, const dnnl_memory_desc_t *md, dnnl_engine_t e, char *why,
                           size_t whylen)
{
    m->md = *md;
    return DNNL_CHECK(dnnl_memory_create(&m->m, md, e, DNNL_MEMORY_NONE));
}

static amp_status mem_own(dmem *m, const dnnl_memory_desc_t *md, dnnl_engine_t e, char *why,
                          size_t whylen)
{
    m->md = *md;
    return DNNL_CHECK(dnnl_memory_create(&m->m, md, e, DNNL_MEMORY_ALLOCATE));
}

/* dst takes src's storage when their layouts agree (no reorder needed), or
 * storage of its own. */
static amp_status mem_alias_or_own(dmem *dst, const dmem *src, const dnnl_memory_desc_t *md,
                                   dnnl_engine_t e, char *why, size_t whylen)
{
    if (dnnl_memory_desc_equal(&src->md, md)) {
        dst->md = *md;
        dst->m = src->m;
        return AMP_OK;
    }
    return mem_own(dst, md, e, why, whylen);
}

/* A reorder from src to dst, adding into dst (sum post-op) when add. */
static amp_status reorder(dnnl_primitive_t *out, const dmem *src, const dmem *dst, int add,
                          dnnl_engine_t e, char *why, size_t whylen)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (add) {
        AMP_FORWARD_IF_ERROR(DNNL_CHECK(dnnl_primitive_attr_create(&attr)));
        amp_status st = DNNL_CHECK(dnnl_post_ops_create(&ops));
        if (st == AMP_OK) st = DNNL_CHECK(dnnl_post_ops_append_sum(ops, 1.0f));
        if (st == AMP_OK) st = DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, ops));
        if (ops) dnnl_post_ops_destroy(ops);
        if (st != AMP_OK) {
            dnnl_primitive_attr_destroy(attr);
            return st;
        }
    }
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, &src->md, e, &dst->md, e, attr);
    if (attr) dnnl_primitive_attr_destroy(attr);
    AMP_RETURN_ERROR_IF(st != dnnl_success, AMP_ERR_DEVICE, why, whylen,
                        "no oneDNN reorder%s (status %d)", add ? " with sum" : "", (int)st);
    st = dnnl_primitive_create(out, pd);
    dnnl_primitive_desc_destroy(pd);
    AMP_RETURN_ERROR_IF(st != dnnl_success, AMP_ERR_DEVICE, why, whylen,
                        "oneDNN reorder creation failed (status %d)", (int)st);
    return AMP_OK;
}

static const char *impl_name(const_dnnl_primitive_desc_t pd)
{
    const char *s = "?";
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success) s = "?";
    return s;
}

static void md_any(dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims, dnnl_data_type_t dt)
{
    dnnl_memory_desc_init_by_tag(md, ndims, dims, dt, dnnl_format_tag_any);
}

/* The memories and reorders of the primitive descriptors fpd, dpd and wpd. */
static amp_status conv_memories(amp_dnnl_conv *d, dnnl_engine_t e, const dnnl_memory_desc_t *ux,
                                const dnnl_memory_desc_t *uy, const dnnl_memory_desc_t *uw,
                                const_dnnl_primitive_desc_t fpd, const_dnnl_primitive_desc_t dpd,
                                const_dnnl_primitive_desc_t wpd, char *why, size_t whylen)
{
#define MD(pd, q) dnnl_primitive_desc_query_md(pd, q, 0)
    AMP_FORWARD_IF_ERROR(mem_view(&d->x_user, ux, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_view(&d->y_user, uy, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_view(&d->w_user, uw, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_view(&d->dy_user, uy, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_view(&d->dw_user, uw, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_view(&d->dx_user, ux, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_own(&d->x, MD(fpd, dnnl_query_src_md), e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_own(&d->y, MD(fpd, dnnl_query_dst_md), e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_own(&d->w_fwd, MD(fpd, dnnl_query_weights_md), e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_own(&d->dy_bw, MD(wpd, dnnl_query_diff_dst_md), e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_own(&d->dw, MD(wpd, dnnl_query_diff_weights_md), e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_own(&d->dx, MD(dpd, dnnl_query_diff_src_md), e, why, whylen));
    AMP_FORWARD_IF_ERROR(
        mem_alias_or_own(&d->w_bwd, &d->w_fwd, MD(dpd, dnnl_query_weights_md), e, why, whylen));
    AMP_FORWARD_IF_ERROR(
        mem_alias_or_own(&d->dy_bd, &d->dy_bw, MD(dpd, dnnl_query_diff_dst_md), e, why, whylen));
    AMP_FORWARD_IF_ERROR(
        mem_alias_or_own(&d->x_bw, &d->x, MD(wpd, dnnl_query_src_md), e, why, whylen));
#undef MD
    AMP_FORWARD_IF_ERROR(reorder(&d->r_x, &d->x_user, &d->x, 0, e, why, whylen));
    AMP_FORWARD_IF_ERROR(reorder(&d->r_y, &d->y, &d->y_user, 0, e, why, whylen));
    AMP_FORWARD_IF_ERROR(reorder(&d->r_w_fwd, &d->w_user, &d->w_fwd, 0, e, why, whylen));
    AMP_FORWARD_IF_ERROR(reorder(&d->r_dy_bw, &d->dy_user, &d->dy_bw, 0, e, why, whylen));
    AMP_FORWARD_IF_ERROR(reorder(&d->r_dw, &d->dw, &d->dw_user, 1, e, why, whylen));
    AMP_FORWARD_IF_ERROR(reorder(&d->r_dx, &d->dx, &d->dx_user, 1, e, why, whylen));
    if (d->w_bwd.m != d->w_fwd.m)
        AMP_FORWARD_IF_ERROR(reorder(&d->r_w_bwd, &d->w_user, &d->w_bwd, 0, e, why, whylen));
    if (d->dy_bd.m != d->dy_bw.m)
        AMP_FORWARD_IF_ERROR(reorder(&d->r_dy_bd, &d->dy_user, &d->dy_bd, 0, e, why, whylen));
    if (d->x_bw.m != d->x.m)
        AMP_FORWARD_IF_ERROR(reorder(&d->r_x_bw, &d->x, &d->x_bw, 0, e, why, whylen));
    return AMP_OK;
}

/* The three convolution primitives for the descriptors; their descriptors
 * in *fpd, *dpd, *wpd for the caller to destroy. */
static amp_status conv_primitives(amp_dnnl_conv *d, dnnl_engine_t e, const layer *l,
                                  const dnnl_memory_desc_t *ax, const dnnl_memory_desc_t *aw,
                                  const dnnl_memory_desc_t *ay, const dnnl_memory_desc_t *adw,
                                  dnnl_primitive_desc_t *fpd, dnnl_primitive_desc_t *dpd,
                                  dnnl_primitive_desc_t *wpd, char *why, size_t whylen)
{
    const dnnl_dims_t strides = {l->stride, l->stride}, pad_l = {l->pad, l->pad};
    /* darknet's output size rounds down: the right/bottom padding is what the
     * last window needs, possibly less than the left. */
    const dnnl_dims_t pad_r = {(l->out_h - 1) * l->stride + l->size - l->h - l->pad,
                               (l->out_w - 1) * l->stride + l->size - l->w - l->pad};
    AMP_RETURN_ERROR_IF(pad_r[0] < 0 || pad_r[1] < 0, AMP_ERR_INVALID, why, whylen,
                        "the last window ends before the input (size %d, stride %d)", l->size,
                        l->stride);
    const char *type = d->dt == dnnl_bf16 ? "bfloat16" : "float32";
    dnnl_convolution_desc_t cd, dd, wd;
    AMP_FORWARD_IF_ERROR(DNNL_CHECK(dnnl_convolution_forward_desc_init(
        &cd, dnnl_forward_training, dnnl_convolution_direct, ax, aw, NULL, ay, strides, pad_l,
        pad_r)));
    AMP_FORWARD_IF_ERROR(DNNL_CHECK(dnnl_primitive_desc_create(fpd, &cd, NULL, e, NULL)));
    AMP_RETURN_ERROR_IF(dnnl_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, ax,
                                                                 aw, ay, strides, pad_l,
                                                                 pad_r) != dnnl_success ||
                            dnnl_primitive_desc_create(dpd, &dd, NULL, e, *fpd) != dnnl_success,
                        AMP_ERR_INVALID, why, whylen, "no oneDNN %s backward-data convolution",
                        type);
    AMP_RETURN_ERROR_IF(dnnl_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct,
                                                                    ax, adw, NULL, ay, strides,
                                                                    pad_l, pad_r) != dnnl_success ||
                            dnnl_primitive_desc_create(wpd, &wd, NULL, e, *fpd) != dnnl_success,
                        AMP_ERR_INVALID, why, whylen, "no oneDNN %s backward-weights convolution",
                        type);
    snprintf(d->impl[0], sizeof d->impl[0], "%s", impl_name(*fpd));
    snprintf(d->impl[1], sizeof d->impl[1], "%s", impl_name(*dpd));
    snprintf(d->impl[2], sizeof d->impl[2], "%s", impl_name(*wpd));
    AMP_RETURN_ERROR_IF(dnnl_primitive_create(&d->fwd, *fpd) != dnnl_success ||
                            dnnl_primitive_create(&d->bwd_data, *dpd) != dnnl_success ||
                            dnnl_primitive_create(&d->bwd_weights, *wpd) != dnnl_success,
                        AMP_ERR_DEVICE, why, whylen,
                        "oneDNN convolution primitive creation failed");
    return AMP_OK;
}

/* The end of a build: given the primitives' status st, the memories and
 * reorders for darknet's arrays ux, uy, uw; the descriptors destroyed; on
 * failure everything released, else the shape recorded. */
static amp_status build_end(amp_dnnl_conv *d, dnnl_engine_t e, const layer *l, amp_status st,
                            const dnnl_memory_desc_t *ux, const dnnl_memory_desc_t *uy,
                            const dnnl_memory_desc_t *uw, dnnl_primitive_desc_t fpd,
                            dnnl_primitive_desc_t dpd, dnnl_primitive_desc_t wpd, char *why,
                            size_t whylen)
{
    if (st == AMP_OK) st = conv_memories(d, e, ux, uy, uw, fpd, dpd, wpd, why, whylen);
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (dpd) dnnl_primitive_desc_destroy(dpd);
    if (wpd) dnnl_primitive_desc_destroy(wpd);
    if (st != AMP_OK) {
        conv_release(d);
        return st;
    }
    d->batch = l->batch;
    d->h = l->h;
    d->w = l->w;
    d->w_fwd_version = d->w_bwd_version = 0;
    return AMP_OK;
}

/* Makes every primitive and buffer for l's current shape, or says why oneDNN
 * cannot (the caller falls back to the emulation). */
static amp_status conv_build(amp_dnnl_conv *d, dnnl_engine_t e, const layer *l, char *why,
                             size_t whylen)
{
    const dnnl_data_type_t dt = d->dt, f32 = dnnl_f32;
    const int g = l->groups;
    dnnl_dims_t xd = {l->batch, l->c, l->h, l->w}, yd = {l->batch, l->n, l->out_h, l->out_w};
    dnnl_dims_t wd = {l->n, l->c, l->size, l->size};
    dnnl_dims_t wgd = {g, l->n / g, l->c / g, l->size, l->size};
    const int wnd = g > 1 ? 5 : 4;
    dnnl_memory_desc_t ux, uy, uw, ax, ay, aw, adw;
    AMP_FORWARD_IF_ERROR(DNNL_CHECK(dnnl_memory_desc_init_by_tag(&ux, 4, xd, f32, dnnl_nchw)));
    AMP_FORWARD_IF_ERROR(DNNL_CHECK(dnnl_memory_desc_init_by_tag(&uy, 4, yd, f32, dnnl_nchw)));
    AMP_FORWARD_IF_ERROR(DNNL_CHECK(dnnl_memory_desc_init_by_tag(
        &uw, wnd, g > 1 ? wgd : wd, f32, g > 1 ? dnnl_goihw : dnnl_oihw)));
    md_any(&ax, 4, xd, dt);
    md_any(&ay, 4, yd, dt);
    md_any(&aw, wnd, g > 1 ? wgd : wd, dt);
    md_any(&adw, wnd, g > 1 ? wgd : wd, dt); /* the weight gradient in the half dtype, as a GPU */
    dnnl_primitive_desc_t fpd = NULL, dpd = NULL, wpd = NULL;
    amp_status st = conv_primitives(d, e, l, &ax, &aw, &ay, &adw, &fpd, &dpd, &wpd, why, whylen);
    return build_end(d, e, l, st, &ux, &uy, &uw, fpd, dpd, wpd, why, whylen);
}

/* Deconvolutional and connected layers: the same three primitives and the
 * same buffers, reorders and rounding points as a convolution's.
 *
 * A deconvolution is oneDNN's (a convolution's backward-data as a forward):
 * darknet's weights are c x n x size x size, the input's channels outermost,
 * which is oneDNN's IOHW for its {n, c, size, size} weights; no flip, both
 * compute out(oc) = sum over ic of in(ic) * W[ic][oc] scattered by the
 * window. darknet's output size, (h - 1) * stride + size - 2 * pad, is
 * oneDNN's with the same padding on both sides; groups are 1 (patch 0012).
 *
 * A connected layer is an inner product: y = x W^T with x {batch, inputs}
 * and W {outputs, inputs} in darknet's row-major layout (oneDNN's "oi"), so
 * darknet's arrays are the user memories as they are, and oneDNN's forward,
 * backward-data (dx = dy W) and backward-weights (dW = dy^T x) are darknet's
 * three GEMMs. A recurrent layer's connected sub-layers are these too. */
static amp_status gemm_layer_build(amp_dnnl_conv *d, dnnl_engine_t e, const layer *l, char *why,
                                   size_t whylen)
{
    const dnnl_data_type_t dt = d->dt, f32 = dnnl_f32;
    const int ip = l->type == CONNECTED, nd = ip ? 2 : 4;
    dnnl_dims_t xd = {l->batch, l->inputs}, yd = {l->batch, l->outputs};
    dnnl_dims_t wd = {l->outputs, l->inputs};
    if (!ip) {
        const dnnl_dims_t x4 = {l->batch, l->c, l->h, l->w};
        const dnnl_dims_t y4 = {l->batch, l->n, l->out_h, l->out_w};
        const dnnl_dims_t w4 = {l->n, l->c, l->size, l->size};
        memcpy(xd, x4, sizeof xd);
        memcpy(yd, y4, sizeof yd);
        memcpy(wd, w4, sizeof wd);
    }
    dnnl_memory_desc_t ux, uy, uw, ax, ay, aw, adw;
    AMP_FORWARD_IF_ERROR(DNNL_CHECK(
        dnnl_memory_desc_init_by_tag(&ux, nd, xd, f32, ip ? dnnl_nc : dnnl_nchw)));
    AMP_FORWARD_IF_ERROR(DNNL_CHECK(
        dnnl_memory_desc_init_by_tag(&uy, nd, yd, f32, ip ? dnnl_nc : dnnl_nchw)));
    AMP_FORWARD_IF_ERROR(DNNL_CHECK(
        dnnl_memory_desc_init_by_tag(&uw, nd, wd, f32, ip ? dnnl_oi : dnnl_iohw)));
    md_any(&ax, nd, xd, dt);
    md_any(&ay, nd, yd, dt);
    md_any(&aw, nd, wd, dt);
    md_any(&adw, nd, wd, dt); /* the weight gradient in the half dtype, as a GPU */

    const char *what = ip ? "inner product" : "deconvolution";
    const char *type = dt == dnnl_bf16 ? "bfloat16" : "float32";
    const dnnl_dims_t strides = {l->stride, l->stride}, pad = {l->pad, l->pad};
    /* either kind's three operation descriptors */
    union {
        dnnl_inner_product_desc_t ip;
        dnnl_deconvolution_desc_t dc;
    } fd, dd, wdd;
    dnnl_status_t s1, s2, s3;
    if (ip) {
        s1 = dnnl_inner_product_forward_desc_init(&fd.ip, dnnl_forward_training, &ax, &aw, NULL,
                                                  &ay);
        s2 = dnnl_inner_product_backward_data_desc_init(&dd.ip, &ax, &aw, &ay);
        s3 = dnnl_inner_product_backward_weights_desc_init(&wdd.ip, &ax, &adw, NULL, &ay);
    } else {
        s1 = dnnl_deconvolution_forward_desc_init(&fd.dc, dnnl_forward_training,
                                                  dnnl_deconvolution_direct, &ax, &aw, NULL, &ay,
                                                  strides, pad, pad);
        s2 = dnnl_deconvolution_backward_data_desc_init(&dd.dc, dnnl_deconvolution_direct, &ax,
                                                        &aw, &ay, strides, pad, pad);
        s3 = dnnl_deconvolution_backward_weights_desc_init(&wdd.dc, dnnl_deconvolution_direct,
                                                           &ax, &adw, NULL, &ay, strides, pad,
                                                           pad);
    }
    AMP_RETURN_ERROR_IF(s1 != dnnl_success || s2 != dnnl_success || s3 != dnnl_success,
                        AMP_ERR_INVALID, why, whylen, "no oneDNN %s %s (status %d, %d, %d)", type,
                        what, (int)s1, (int)s2, (int)s3);
    dnnl_primitive_desc_t fpd = NULL, dpd = NULL, wpd = NULL;
    amp_status st = AMP_OK;
    if (dnnl_primitive_desc_create(&fpd, &fd, NULL, e, NULL) != dnnl_success ||
        dnnl_primitive_desc_create(&dpd, &dd, NULL, e, fpd) != dnnl_success ||
        dnnl_primitive_desc_create(&wpd, &wdd, NULL, e, fpd) != dnnl_success) {
        amp_errorf(why, whylen, "no oneDNN %s %s for this shape", type, what);
        st = AMP_ERR_INVALID;
    }
    if (st == AMP_OK) {
        snprintf(d->impl[0], sizeof d->impl[0], "%s", impl_name(fpd));
        snprintf(d->impl[1], sizeof d->impl[1], "%s", impl_name(dpd));
        snprintf(d->impl[2], sizeof d->impl[2], "%s", impl_name(wpd));
        if (dnnl_primitive_create(&d->fwd, fpd) != dnnl_success ||
            dnnl_primitive_create(&d->bwd_data, dpd) != dnnl_success ||
            dnnl_primitive_create(&d->bwd_weights, wpd) != dnnl_success) {
            amp_errorf(why, whylen, "oneDNN %s primitive creation failed", what);
            st = AMP_ERR_DEVICE;
        }
    }
    return build_end(d, e, l, st, &ux, &uy, &uw, fpd, dpd, wpd, why, whylen);
}

/* ---- A convolution as im2col + matmul (the matmul form) ----
 *
 * oneDNN's convolutions run far below the GEMM peak on small maps (a 5 x 5
 * map of 512 channels in yolov3-tiny at 160 px: its backward-weights at a
 * sixth of the peak), and their weights go through blocked layouts twice a
 * step. As one matrix product the same layer is P x K by K x N, with P =
 * batch x out_h x out_w positions, K = c x size^2 and N filters:
 *   forward           y[P, N]   = col[P, K] W^T     (W: N x K, darknet's OIHW)
 *   backward-weights  dW[N, K]  = dy^T col
 *   backward-data     dcol[P, K] = dy W, then col2im
 * with the input in NHWC (one reorder from darknet's NCHW), the windows
 * unrolled by im2col.c in darknet's weights order, the output read back as
 * NHWC. The weights, by far the larger operand on small maps, keep darknet's
 * layout: they are converted, and their gradient added, without a
 * transposition (one costs 3-7 ms a step on yolov3-tiny's 4.7 M weights,
 * against the 1.4 ms of one of the layer's matmuls). The rounding points are
 * the direct form's: the input, weights, output, incoming gradient and weight
 * gradient are stored in the half dtype; the data gradient is summed in
 * float32 (dcol, then col2im) and rounded once, as a convolution's
 * backward-data rounds its float32 sums once. */

static void *data_of(const dmem *m)
{
    void *p = NULL;
    return dnnl_memory_get_data_handle(m->m, &p) == dnnl_success ? p : NULL;
}

/* oneDNN-owned storage of dims and tag. */
static amp_status mem_tag(dmem *m, int nd, const dnnl_dims_t dims, dnnl_data_type_t dt,
                          dnnl_format_tag_t tag, dnnl_engine_t e, char *why, size_t whylen)
{
    dnnl_memory_desc_t md;
    AMP_FORWARD_IF_ERROR(DNNL_CHECK(dnnl_memory_desc_init_by_tag(&md, nd, dims, dt, tag)));
    return mem_own(m, &md, e, why, whylen);
}

/* m: owner's storage seen as md. */
static amp_status mem_view_on(dmem *m, const dnnl_memory_desc_t *md, const dmem *owner,
                              dnnl_engine_t e, char *why, size_t whylen)
{
    AMP_FORWARD_IF_ERROR(mem_view(m, md, e, why, whylen));
    return DNNL_CHECK(dnnl_memory_set_data_handle(m->m, data_of(owner)));
}

/* m: owner's storage as a rows x cols matrix, row-major or, transposed, the
 * owner's cols x rows matrix read by columns. */
static amp_status mem_matrix_on(dmem *m, dnnl_dim_t rows, dnnl_dim_t cols, int transposed,
                                const dmem *owner, dnnl_engine_t e, char *why, size_t whylen)
{
    const dnnl_dims_t dims = {rows, cols};
    const dnnl_dims_t strides = {transposed ? 1 : cols, transposed ? rows : 1};
    dnnl_memory_desc_t md;
    AMP_FORWARD_IF_ERROR(DNNL_CHECK(
        dnnl_memory_desc_init_by_strides(&md, 2, dims, owner->md.data_type, strides)));
    return mem_view_on(m, &md, owner, e, why, whylen);
}

/* The matmul primitive c = a b into *p, its implementation's name in impl. */
static amp_status matmul(dnnl_primitive_t *p, char impl[48], const dmem *a, const dmem *b,
                         const dmem *c, dnnl_engine_t e, char *why, size_t whylen)
{
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    const char *type = a->md.data_type == dnnl_bf16 ? "bfloat16" : "float32";
    AMP_RETURN_ERROR_IF(dnnl_matmul_desc_init(&md, &a->md, &b->md, NULL, &c->md) != dnnl_success ||
                            dnnl_primitive_desc_create(&pd, &md, NULL, e, NULL) != dnnl_success,
                        AMP_ERR_INVALID, why, whylen, "no oneDNN %s matmul %ldx%ld by %ldx%ld",
                        type, (long)a->md.dims[0], (long)a->md.dims[1], (long)b->md.dims[0],
                        (long)b->md.dims[1]);
    snprintf(impl, 48, "%s", impl_name(pd));
    dnnl_status_t st = dnnl_primitive_create(p, pd);
    dnnl_primitive_desc_destroy(pd);
    AMP_RETURN_ERROR_IF(st != dnnl_success, AMP_ERR_DEVICE, why, whylen,
                        "oneDNN matmul primitive creation failed (status %d)", (int)st);
    return AMP_OK;
}

/* Every buffer, view, matmul and reorder of the matmul form. */
static amp_status mm_parts(amp_dnnl_conv *d, dnnl_engine_t e, const layer *l, char *why,
                           size_t whylen)
{
    const dnnl_data_type_t dt = d->dt, f32 = dnnl_f32;
    amp_dnnl_mm *m = &d->mm;
    const dnnl_dim_t P = (dnnl_dim_t)l->batch * l->out_h * l->out_w;
    const dnnl_dim_t K = (dnnl_dim_t)l->c * l->size * l->size, N = l->n;
    const dnnl_dims_t xd = {l->batch, l->c, l->h, l->w}, yd = {l->batch, l->n, l->out_h, l->out_w};
    const dnnl_dims_t wd = {l->n, l->c, l->size, l->size};
    const dnnl_dims_t pk = {P, K}, pn = {P, N}, nk = {N, K};
    dnnl_memory_desc_t ux, uy, uw;
    AMP_FORWARD_IF_ERROR(DNNL_CHECK(dnnl_memory_desc_init_by_tag(&ux, 4, xd, f32, dnnl_nchw)));
    AMP_FORWARD_IF_ERROR(DNNL_CHECK(dnnl_memory_desc_init_by_tag(&uy, 4, yd, f32, dnnl_nchw)));
    AMP_FORWARD_IF_ERROR(DNNL_CHECK(dnnl_memory_desc_init_by_tag(&uw, 4, wd, f32, dnnl_oihw)));
    dmem *users[] = {&d->x_user, &d->y_user, &d->w_user, &d->dy_user, &d->dw_user, &d->dx_user};
    const dnnl_memory_desc_t *umd[] = {&ux, &uy, &uw, &uy, &uw, &ux};
    for (int i = 0; i < 6; ++i) AMP_FORWARD_IF_ERROR(mem_view(users[i], umd[i], e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_tag(&d->x, 4, xd, dt, dnnl_nhwc, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_tag(&d->w_fwd, 4, wd, dt, dnnl_oihw, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_tag(&d->dy_bw, 4, yd, dt, dnnl_nhwc, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_tag(&m->col, 2, pk, dt, dnnl_ab, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_tag(&d->y, 2, pn, dt, dnnl_ab, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_tag(&d->dw, 2, nk, dt, dnnl_ab, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_tag(&m->dcol, 2, pk, f32, dnnl_ab, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_tag(&m->dxa, 4, xd, f32, dnnl_nhwc, e, why, whylen));
    if (dt != f32) AMP_FORWARD_IF_ERROR(mem_tag(&m->dxh, 4, xd, dt, dnnl_nhwc, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_matrix_on(&m->w_t, K, N, 1, &d->w_fwd, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_matrix_on(&m->w_nk, N, K, 0, &d->w_fwd, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_matrix_on(&m->dy_t, N, P, 1, &d->dy_bw, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_matrix_on(&m->dy_pn, P, N, 0, &d->dy_bw, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_view_on(&m->y4, &d->dy_bw.md, &d->y, e, why, whylen));
    AMP_FORWARD_IF_ERROR(mem_view_on(&m->dw4, &d->w_fwd.md, &d->dw, e, why, whylen));
    AMP_FORWARD_IF_ERROR(matmul(&d->fwd, d->impl[0], &m->col, &m->w_t, &d->y, e, why, whylen));
    AMP_FORWARD_IF_ERROR(
        matmul(&d->bwd_data, d->impl[1], &m->dy_pn, &m->w_nk, &m->dcol, e, why, whylen));
    AMP_FORWARD_IF_ERROR(
        matmul(&d->bwd_weights, d->impl[2], &m->dy_t, &m->col, &d->dw, e, why, whylen));
    const dmem *dx = dt != f32 ? &m->dxh : &m->dxa; /* the rounded data gradient */
    AMP_FORWARD_IF_ERROR(reorder(&d->r_x, &d->x_user, &d->x, 0, e, why, whylen));
    AMP_FORWARD_IF_ERROR(reorder(&d->r_w_fwd, &d->w_user, &d->w_fwd, 0, e, why, whylen));
    AMP_FORWARD_IF_ERROR(reorder(&d->r_y, &m->y4, &d->y_user, 0, e, why, whylen));
    AMP_FORWARD_IF_ERROR(reorder(&d->r_dy_bw, &d->dy_user, &d->dy_bw, 0, e, why, whylen));
    AMP_FORWARD_IF_ERROR(reorder(&d->r_dw, &m->dw4, &d->dw_user, 1, e, why, whylen));
    AMP_FORWARD_IF_ERROR(reorder(&d->r_dx, dx, &d->dx_user, 1, e, why, whylen));
    if (dt != f32) AMP_FORWARD_IF_ERROR(reorder(&m->r_dxh, &m->dxa, &m->dxh, 0, e, why, whylen));
    m->shape = (amp_conv_shape){l->batch, l->h, l->w, l->c, l->out_h, l->out_w,
                                l->size, l->stride, l->pad};
    return AMP_OK;
}

/* The matmul form for l's current shape, or why not (everything released). */
static amp_status mm_build(amp_dnnl_conv *d, dnnl_engine_t e, const layer *l, char *why,
                           size_t whylen)
{
    AMP_RETURN_ERROR_IF(l->type != CONVOLUTIONAL || l->groups != 1, AMP_ERR_INVALID, why, whylen,
                        "im2col + matmul: not an ungrouped convolution");
    AMP_RETURN_ERROR_IF(l->size * l->size > AMP_IM2COL_MAX_WINDOW, AMP_ERR_INVALID, why, whylen,
                        "im2col + matmul: a %dx%d kernel", l->size, l->size);
    amp_status st = mm_parts(d, e, l, why, whylen);
    if (st != AMP_OK) {
        conv_release(d);
        return st;
    }
    d->matmul = 1;
    d->batch = l->batch;
    d->h = l->h;
    d->w = l->w;
    d->w_fwd_version = d->w_bwd_version = 0;
    return AMP_OK;
}

/* l's emulation (emulated.c): where oneDNN cannot run a shape or a primitive failed. */
static void emulated_forward(layer l, network net)
{
    if (l.type == CONNECTED) amp_emulated_connected_forward(l, net);
    else if (l.type == DECONVOLUTIONAL) amp_emulated_deconv_forward(l, net);
    else amp_emulated_conv_forward(l, net);
}

static void emulated_backward(layer l, network net)
{
    if (l.type == CONNECTED) amp_emulated_connected_backward(l, net);
    else if (l.type == DECONVOLUTIONAL) amp_emulated_deconv_backward(l, net);
    else amp_emulated_conv_backward(l, net);
}

/* Multiply-adds of one pass (forward, backward-data or backward-weights) of
 * a layer (DARKNET_AMP_PROFILE). */
static double layer_macs(const layer *l)
{
    if (l->type == CONNECTED) return (double)l->batch * l->inputs * l->outputs;
    if (l->type == DECONVOLUTIONAL)
        return (double)l->batch * l->h * l->w * l->c * l->n * l->size * l->size;
    return (double)l->batch * l->out_h * l->out_w * l->n * (l->c / l->groups) * l->size * l->size;
}

/* Runs one primitive. A failure is not expected once the primitive exists;
 * the caller redoes a forward in the emulation, and stops training on a
 * backward left half done. */
static amp_status run(amp_layer *al, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args)
{
    const struct amp_dnnl_ctx *c = cpu_net_of(al->owner)->dnnl;
    dnnl_status_t st = dnnl_primitive_execute(p, c->stream, nargs, args);
    if (st == dnnl_success) st = dnnl_stream_wait(c->stream);
    return st == dnnl_success ? AMP_OK : AMP_ERR_DEVICE;
}

static amp_status run_reorder(amp_layer *al, dnnl_primitive_t p, const dmem *src, const dmem *dst)
{
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, src->m}, {DNNL_ARG_TO, dst->m}};
    return run(al, p, 2, a);
}

static void set(dmem *m, void *p) { dnnl_memory_set_data_handle(m->m, p); }

/* Half numerics on float32 kernels (d->rounded): n float32 values at p
 * rounded in place, at rounding point point. counts: amp_network_flushed's,
 * for the incoming gradient. */
static void round_values(amp_layer *al, const amp_dnnl_conv *d, amp_round_point point, float *p,
                         size_t n, int counts)
{
    amp_net *an = al->owner;
    if (d->rounded == AMP_DTYPE_FLOAT32 || !p || cpu_net_of(an)->unrounded >> point & 1u) return;
    cpu_net *cn = cpu_net_of(an);
    amp_cpu_round_half(d->rounded, p, n, counts ? &cn->grad_nonzero : NULL, &cn->grad_flushed);
}

/* The same for an owned buffer (a oneDNN layout, its padding included: zeros
 * stay zeros). */
static void round_half(amp_layer *al, const amp_dnnl_conv *d, amp_round_point point,
                       const dmem *m, int counts)
{
    void *p = NULL;
    if (dnnl_memory_get_data_handle(m->m, &p) != dnnl_success) return;
    round_values(al, d, point, p, dnnl_memory_desc_get_size(&m->md) / sizeof(float), counts);
}

/* The half copy of the weights in one layout, refreshed when they changed. */
static amp_status weights_for(amp_layer *al, amp_dnnl_conv *d, const layer *l,
                              dnnl_primitive_t r, dmem *dst, unsigned long *version)
{
    if (*version == al->owner->weights_version) return AMP_OK;
    set(&d->w_user, l->weights);
    AMP_FORWARD_IF_ERROR(run_reorder(al, r, &d->w_user, dst));
    round_half(al, d, AMP_ROUND_W, dst, 0);
    *version = al->owner->weights_version;
    return AMP_OK;
}

/* The input, in oneDNN's layout (rounded for float16) and, in the matmul
 * form, unrolled into windows. */
static amp_status input_for(amp_layer *al, amp_dnnl_conv *d, const float *input)
{
    set(&d->x_user, (void *)input);
    AMP_FORWARD_IF_ERROR(run_reorder(al, d->r_x, &d->x_user, &d->x));
    round_half(al, d, AMP_ROUND_X, &d->x, 0);
    if (d->matmul)
        amp_im2col_nhwc(data_of(&d->x), data_of(&d->mm.col), d->dt == dnnl_bf16 ? 2 : 4,
                        &d->mm.shape);
    return AMP_OK;
}

/* The convolution or GEMM of a forward into l->output, half-rounded; no tail. */
static amp_status forward_core(amp_layer *al, amp_dnnl_conv *d, const layer *l, const float *input)
{
    set(&d->y_user, l->output);
    AMP_FORWARD_IF_ERROR(weights_for(al, d, l, d->r_w_fwd, &d->w_fwd, &d->w_fwd_version));
    AMP_FORWARD_IF_ERROR(input_for(al, d, input));
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, d->matmul ? d->mm.col.m : d->x.m},
                            {DNNL_ARG_WEIGHTS, d->matmul ? d->mm.w_t.m : d->w_fwd.m},
                            {DNNL_ARG_DST, d->y.m}};
    AMP_FORWARD_IF_ERROR(run(al, d->fwd, 3, a));
    AMP_FORWARD_IF_ERROR(run_reorder(al, d->r_y, d->matmul ? &d->mm.y4 : &d->y, &d->y_user));
    round_values(al, d, AMP_ROUND_Y, l->output, (size_t)l->outputs * l->batch, 0);
    return AMP_OK;
}

/* The data gradient in the matmul form: dcol = dy W, folded back (col2im)
 * in float32, rounded once; the rounded array in *out. */
static amp_status mm_data_gradient(amp_layer *al, amp_dnnl_conv *d, const dmem **out)
{
    amp_dnnl_mm *m = &d->mm;
    dnnl_exec_arg_t b[3] = {{DNNL_ARG_SRC, m->dy_pn.m}, {DNNL_ARG_WEIGHTS, m->w_nk.m},
                            {DNNL_ARG_DST, m->dcol.m}};
    AMP_FORWARD_IF_ERROR(run(al, d->bwd_data, 3, b));
    amp_col2im_nhwc(data_of(&m->dcol), data_of(&m->dxa), &m->shape);
    *out = &m->dxa;
    if (m->r_dxh) {
        AMP_FORWARD_IF_ERROR(run_reorder(al, m->r_dxh, &m->dxa, &m->dxh));
        *out = &m->dxh;
    } else {
        round_half(al, d, AMP_ROUND_DX, &m->dxa, 0);
    }
    return AMP_OK;
}

/* The weight and data gradients through oneDNN, added into darknet's arrays. */
static amp_status gradients(amp_layer *al, amp_dnnl_conv *d, layer l, network net)
{
    set(&d->dy_user, l.delta);
    set(&d->dw_user, l.weight_updates);
    AMP_FORWARD_IF_ERROR(run_reorder(al, d->r_dy_bw, &d->dy_user, &d->dy_bw));
    round_half(al, d, AMP_ROUND_DY, &d->dy_bw, 1);
    /* a recurrent sub-layer: the input is the last time step's */
    if (al->sub) AMP_FORWARD_IF_ERROR(input_for(al, d, net.input));
    if (d->r_x_bw) AMP_FORWARD_IF_ERROR(run_reorder(al, d->r_x_bw, &d->x, &d->x_bw));
    dnnl_exec_arg_t w[3] = {{DNNL_ARG_SRC, d->x_bw.m}, {DNNL_ARG_DIFF_DST, d->dy_bw.m},
                            {DNNL_ARG_DIFF_WEIGHTS, d->dw.m}};
    if (d->matmul) { /* dW = dy^T col */
        w[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, d->mm.dy_t.m};
        w[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, d->mm.col.m};
        w[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, d->dw.m};
    }
    AMP_FORWARD_IF_ERROR(run(al, d->bwd_weights, 3, w));
    round_half(al, d, AMP_ROUND_DW, &d->dw, 0);
    AMP_FORWARD_IF_ERROR(run_reorder(al, d->r_dw, d->matmul ? &d->mm.dw4 : &d->dw, &d->dw_user));
    if (!net.delta) return AMP_OK;
    set(&d->dx_user, net.delta);
    const dmem *dx = &d->dx;
    if (d->matmul) {
        AMP_FORWARD_IF_ERROR(
            weights_for(al, d, &l, d->r_w_fwd, &d->w_fwd, &d->w_fwd_version));
        AMP_FORWARD_IF_ERROR(mm_data_gradient(al, d, &dx));
    } else {
        if (d->r_dy_bd) {
            AMP_FORWARD_IF_ERROR(run_reorder(al, d->r_dy_bd, &d->dy_user, &d->dy_bd));
            round_half(al, d, AMP_ROUND_DY, &d->dy_bd, 0);
        }
        AMP_FORWARD_IF_ERROR(weights_for(al, d, &l, d->r_w_bwd ? d->r_w_bwd : d->r_w_fwd,
                                         &d->w_bwd,
                                         d->r_w_bwd ? &d->w_bwd_version : &d->w_fwd_version));
        dnnl_exec_arg_t b[3] = {{DNNL_ARG_DIFF_DST, d->dy_bd.m}, {DNNL_ARG_WEIGHTS, d->w_bwd.m},
                                {DNNL_ARG_DIFF_SRC, d->dx.m}};
        AMP_FORWARD_IF_ERROR(run(al, d->bwd_data, 3, b));
        round_half(al, d, AMP_ROUND_DX, &d->dx, 0);
    }
    return run_reorder(al, d->r_dx, dx, &d->dx_user);
}

/* ---- Which form a convolution takes ---- */

/* oneDNN's reference kernels ("ref:any") are slower than darknet's own GEMM:
 * in auto mode a layer only goes to oneDNN with optimised ones. */
static int is_reference(const char *impl) { return strncmp(impl, "ref", 3) == 0; }

static int has_reference(const amp_dnnl_conv *d)
{
    return is_reference(d->impl[0]) || is_reference(d->impl[1]) || is_reference(d->impl[2]);
}

/* Maps of at most this many positions per image are timed both ways in auto
 * mode; on larger ones oneDNN's convolution runs near the GEMM peak (400-680
 * GFLOP/s from 10 x 10 up in yolov3-tiny at 160 px, against 120-250 on 5 x 5;
 * docs/benchmarks.md), and im2col's buffer would be size^2 times the input. */
#define AMP_MATMUL_MAX_POSITIONS 1024

/* Seconds of one forward and backward of d (the weights converted, as in a
 * training step) on zero-filled scratch arrays: darknet's own arrays and
 * statistics are not touched. < 0 when a primitive failed. */
static double time_once(amp_layer *al, amp_dnnl_conv *d, const layer *l, float *scratch)
{
    const size_t nx = (size_t)l->batch * l->inputs, ny = (size_t)l->batch * l->outputs;
    layer t = *l;
    network n = {0};
    n.input = scratch;
    n.delta = scratch + nx;
    t.output = n.delta + nx;
    t.delta = t.output + ny;
    t.weights = t.delta + ny;
    t.weight_updates = t.weights + l->nweights;
    d->w_fwd_version = d->w_bwd_version = al->owner->weights_version + 1;
    const double t0 = amp_clock();
    const int ok = forward_core(al, d, &t, n.input) == AMP_OK && gradients(al, d, t, n) == AMP_OK;
    const double dt = amp_clock() - t0;
    d->w_fwd_version = d->w_bwd_version = 0;
    return ok ? dt : -1;
}

/* The best of three timings of each of a and b, after a warm-up, taken in
 * turn (a, b, a, b, ...) so that a change in the machine's load falls on both. */
static void time_both(amp_layer *al, amp_dnnl_conv *a, amp_dnnl_conv *b, const layer *l,
                      double *ta, double *tb)
{
    *ta = *tb = -1;
    const size_t n = 2 * ((size_t)l->batch * (l->inputs + l->outputs) + l->nweights);
    float *scratch = calloc(n, sizeof *scratch);
    if (!scratch) return;
    double best[2] = {-1, -1};
    int failed[2] = {0, 0};
    amp_dnnl_conv *form[2] = {a, b};
    for (int i = 0; i < 4; ++i) /* 0: the warm-up */
        for (int k = 0; k < 2; ++k) {
            if (failed[k]) continue;
            const double t = time_once(al, form[k], l, scratch);
            failed[k] = t < 0;
            if (failed[k]) best[k] = -1;
            else if (i && (best[k] < 0 || t < best[k])) best[k] = t;
        }
    free(scratch);
    *ta = best[0];
    *tb = best[1];
}

/* A form wins on timing only when it is faster by this factor. Closer calls
 * go by a fixed rule, the matmul form for maps of at most
 * AMP_MATMUL_SURE_POSITIONS positions per image, so that the choice, and with
 * it the order of float32 sums and the training trajectory, does not flip
 * from run to run with the machine's load. */
#define AMP_FORM_MARGIN 1.25
#define AMP_MATMUL_SURE_POSITIONS 32

/* DARKNET_AMP_CONV=auto: both forms built and timed, the faster kept in d
 * (the direct one already there, with status st); the choice recorded. */
static amp_status choose(amp_layer *al, amp_dnnl_conv *d, const layer *l, amp_status st,
                         char *why, size_t whylen)
{
    const cpu_net *cn = cpu_net_of(al->owner);
    amp_dnnl_conv *m = calloc(1, sizeof *m);
    AMP_RETURN_ERROR_IF(!m, AMP_ERR_NOMEM, why, whylen, "out of memory");
    m->dt = d->dt;
    m->rounded = d->rounded;
    char whym[AMP_MSG_LEN];
    amp_status sm = mm_build(m, cn->dnnl->engine, l, whym, sizeof whym);
    if (sm == AMP_OK && cn->path == AMP_CPU_AUTO && has_reference(m)) {
        conv_release(m);
        sm = AMP_ERR_INVALID;
    }
    double td = -1, tm = -1;
    if (st == AMP_OK && sm == AMP_OK) time_both(al, d, m, l, &td, &tm);
    int use_mm = sm == AMP_OK && (st != AMP_OK || (tm >= 0 && td < 0));
    if (sm == AMP_OK && st == AMP_OK && tm >= 0 && td >= 0)
        use_mm = tm * AMP_FORM_MARGIN < td   ? 1
                 : td * AMP_FORM_MARGIN < tm ? 0
                                             : l->out_h * l->out_w <= AMP_MATMUL_SURE_POSITIONS;
    amp_dnnl_choice keep = d->choice;
    if (use_mm) {
        conv_release(d);
        *d = *m;
        st = AMP_OK;
    } else {
        conv_release(m);
    }
    free(m);
    d->choice = keep;
    if (st == AMP_OK && keep.n < AMP_DNNL_CHOICES) {
        d->choice.shape[keep.n].batch = l->batch;
        d->choice.shape[keep.n].h = l->h;
        d->choice.shape[keep.n].w = l->w;
        d->choice.shape[keep.n].matmul = use_mm;
        d->choice.shape[keep.n].t_direct = td;
        d->choice.shape[keep.n].t_matmul = tm;
        d->choice.n++;
    }
    return st;
}

/* The primitives of l's kind for its current shape; a convolution in the
 * form DARKNET_AMP_CONV asks for, or chose before for this shape. */
static amp_status layer_build(amp_layer *al, amp_dnnl_conv *d, const layer *l, char *why,
                              size_t whylen)
{
    const cpu_net *cn = cpu_net_of(al->owner);
    const dnnl_engine_t e = cn->dnnl->engine;
    if (l->type != CONVOLUTIONAL) return gemm_layer_build(d, e, l, why, whylen);
    if (cn->conv_form == AMP_CONV_MATMUL && l->groups == 1) return mm_build(d, e, l, why, whylen);
    if (cn->conv_form == AMP_CONV_AUTO)
        for (int i = 0; i < d->choice.n; ++i)
            if (d->choice.shape[i].batch == l->batch && d->choice.shape[i].h == l->h &&
                d->choice.shape[i].w == l->w)
                return d->choice.shape[i].matmul ? mm_build(d, e, l, why, whylen)
                                                 : conv_build(d, e, l, why, whylen);
    amp_status st = conv_build(d, e, l, why, whylen);
    if (cn->conv_form == AMP_CONV_DIRECT || l->groups != 1) return st;
    /* auto: a small map, or a shape oneDNN's convolution cannot run */
    if (st == AMP_OK && (l->out_h * l->out_w > AMP_MATMUL_MAX_POSITIONS ||
                         (cn->path == AMP_CPU_AUTO && has_reference(d))))
        return st;
    return choose(al, d, l, st, why, whylen);
}

/* The layer's label for what was built: the form ("im2col + matmul") and,
 * for half numerics on float32 kernels, so. A convolution may change form
 * with its shape (random=1), and its label with it. */
static void relabel(amp_layer *al, amp_dnnl_conv *d, const layer *l)
{
    const char *form = d->matmul                        ? "im2col + matmul"
                       : l->type == CONVOLUTIONAL       ? "oneDNN convolution"
                       : l->type == DECONVOLUTIONAL     ? "oneDNN deconvolution"
                                                        : "oneDNN inner product";
    snprintf(d->label, sizeof d->label, "%s%s", form,
             d->rounded != AMP_DTYPE_FLOAT32 ? " on float32 kernels" : "");
    al->label = d->label;
}

static amp_status ensure_shape(amp_layer *al, const layer *l)
{
    amp_dnnl_conv *d = cpu_layer_of(al)->dnnl;
    if (d->batch == l->batch && d->h == l->h && d->w == l->w) return AMP_OK;
    char why[AMP_MSG_LEN];
    conv_release(d);
    amp_status st = layer_build(al, d, l, why, sizeof why);
    if (st == AMP_OK) relabel(al, d, l);
    if (st != AMP_OK)
        fprintf(stderr, "amp: layer %d: oneDNN cannot run %dx%dx%d: %s; emulated\n", al->index,
                l->w, l->h, l->c, why);
    return st;
}

/* A forward that could not run here runs in the emulation (said once). */
static void fall_back_forward(amp_layer *al, amp_dnnl_conv *d, layer l, network net)
{
    if (!d->warned++)
        fprintf(stderr, "amp: layer %d: a oneDNN primitive failed in forward; emulated\n",
                al->index);
    emulated_forward(l, net);
}

/* A layer's forward: the input and (once per weights version) the weights
 * to oneDNN's layouts, the primitive, the output back into l.output, then the
 * float32 tail. */
static void layer_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_dnnl_conv *d = cpu_layer_of(al)->dnnl;
    const int profile = al->owner->env.profile;
    double t0 = profile ? amp_clock() : 0;
    d->onednn_forward = 0;
    if (ensure_shape(al, &l) != AMP_OK) { /* said why */
        emulated_forward(l, net);
        return;
    }
    if (forward_core(al, d, &l, net.input) != AMP_OK) {
        fall_back_forward(al, d, l, net);
        return;
    }
    d->onednn_forward = 1;
    double t1 = profile ? amp_clock() : 0;
    /* l.output: the half-rounded convolution or GEMM; out_c biases (filters,
     * or a connected layer's outputs) over out_h * out_w positions */
    amp_tail_forward(l, net, l.out_c, l.out_h * l.out_w, cpu_net_of(al->owner)->bn_formula);
    if (profile) {
        al->prof.fwd_s += amp_clock() - t0;
        al->prof.gemm_s += t1 - t0;
        al->prof.gflop += 2e-9 * layer_macs(&l);
        al->prof.calls++;
    }
}

static void layer_backward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_dnnl_conv *d = cpu_layer_of(al)->dnnl;
    if (!d->onednn_forward) { /* the forward fell back: its buffers are the emulation's */
        emulated_backward(l, net);
        return;
    }
    const int profile = al->owner->env.profile;
    double t0 = profile ? amp_clock() : 0;
    amp_tail_backward(l, net, l.out_c, l.out_h * l.out_w);
    double t1 = profile ? amp_clock() : 0;
    /* A failure mid-way leaves the gradients incomplete: the network's error
     * stops training before the step is used. */
    if (gradients(al, d, l, net) != AMP_OK)
        amp_net_fail(al->owner, AMP_ERR_DEVICE,
                     "amp: layer %d: a oneDNN primitive failed in backward; its gradients are "
                     "incomplete", al->index);
    if (profile) {
        double t2 = amp_clock();
        al->prof.bwd_s += t2 - t0;
        al->prof.gemm_s += t2 - t1;
        al->prof.gflop += 2e-9 * layer_macs(&l) * (net.delta ? 2 : 1);
        al->prof.calls++;
    }
}

amp_status amp_onednn_install(amp_layer *al, layer *l, amp_dtype dtype, char *why,
                              size_t whylen)
{
    const int conv = l->type == CONVOLUTIONAL;
    AMP_RETURN_ERROR_IF(!conv && l->type != DECONVOLUTIONAL && l->type != CONNECTED,
                        AMP_ERR_INVALID, why, whylen,
                        "not a convolutional, deconvolutional or connected layer");
    cpu_net *cn = cpu_net_of(al->owner);
    struct amp_dnnl_ctx *ctx; /* layer_build finds it in cn */
    AMP_FORWARD_IF_ERROR(ctx_of(cn, &ctx, why, whylen));
    (void)ctx;
    amp_dnnl_conv *d = calloc(1, sizeof *d);
    AMP_RETURN_ERROR_IF(!d, AMP_ERR_NOMEM, why, whylen, "out of memory");
    /* float16 (oneDNN 2.6 has no float16 convolution on CPUs), and bfloat16
     * where the CPU has no bfloat16 instructions (oneDNN's bfloat16 kernels
     * are then its reference ones, slower than darknet's GEMM): the product
     * of two half values is exact in float32, so float32 kernels on operands
     * rounded to half, results rounded where a GPU stores half, keep every
     * rounding point of the emulation; only the order of the sums changes. */
    int native_bf16 = 0;
    (void)amp_onednn_isa(&native_bf16);
    d->dt = dtype == AMP_DTYPE_BFLOAT16 && native_bf16 ? dnnl_bf16 : dnnl_f32;
    d->rounded = d->dt == dnnl_f32 ? dtype : AMP_DTYPE_FLOAT32;
    amp_status st = layer_build(al, d, l, why, whylen);
    if (st == AMP_OK && cn->path == AMP_CPU_AUTO && has_reference(d)) {
        amp_errorf(why, whylen, "oneDNN has only reference kernels here (%s, %s, %s)", d->impl[0],
                   d->impl[1], d->impl[2]);
        conv_release(d);
        st = AMP_ERR_INVALID;
    }
    if (st != AMP_OK) {
        free(d);
        return st;
    }
    cpu_layer_of(al)->dnnl = d;
    al->forward = layer_forward;
    al->backward = layer_backward;
    cpu_layer_of(al)->runner = AMP_CPU_RUNS_ONEDNN;
    relabel(al, d, l);
    return AMP_OK;
}

int amp_onednn_fallbacks(const cpu_layer *c)
{
    if (!c || !c->dnnl) return 0;
    return c->dnnl->warned + (c->dnnl->batch == 0); /* failed primitives; a shape it cannot run */
}

int amp_onednn_form(const cpu_layer *c, double *t_direct, double *t_matmul)
{
    *t_direct = *t_matmul = -1;
    const amp_dnnl_conv *d = c ? c->dnnl : NULL;
    if (!d || !d->batch || !d->bwd_weights) return -1;
    for (int i = 0; i < d->choice.n; ++i)
        if (d->choice.shape[i].batch == d->batch && d->choice.shape[i].h == d->h &&
            d->choice.shape[i].w == d->w) {
            *t_direct = d->choice.shape[i].t_direct;
            *t_matmul = d->choice.shape[i].t_matmul;
        }
    return d->matmul;
}

void amp_onednn_free(cpu_layer *c)
{
    if (!c || !c->dnnl) return;
    conv_release(c->dnnl);
    free(c->dnnl);
    c->dnnl = NULL;
}

#endif

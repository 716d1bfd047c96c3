/* Half-precision convolutions on the CPU through oneDNN: forward,
 * backward-data and backward-weights as oneDNN primitives with bfloat16
 * tensors and float32 accumulation (AVX512-BF16 or AMX kernels where the CPU
 * has them), or the same primitives in float32 (amp_dtype=float32 with
 * DARKNET_AMP_CPU=onednn, so a benchmark can tell the gain of the precision
 * from the gain of the library).
 *
 * Numerics are those of the emulation (half.c) and of a GPU: inputs,
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
const char *amp_onednn_isa(int *native_bf16)
{
    *native_bf16 = 0;
    return "none (built without oneDNN)";
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
    int round16;        /* float16: float32 primitives, every operand and result
                           rounded to float16 where the emulation rounds it */
    int onednn_forward; /* the last forward ran here, not in the fallback */
    int warned;         /* a forward fell back after a failed primitive: said once */
    char impl[3][48];   /* fwd, bwd-data, bwd-weights implementation names */
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
                                 &d->r_dw, &d->r_dx};
    for (size_t i = 0; i < sizeof prims / sizeof prims[0]; ++i) prim_free(prims[i]);
    /* aliases point at an owner earlier in this list: free from the end */
    dmem *mems[] = {&d->x_user, &d->y_user, &d->w_user, &d->dy_user, &d->dw_user, &d->dx_user,
                    &d->x, &d->y, &d->w_fwd, &d->dy_bw, &d->dw, &d->dx,
                    &d->w_bwd, &d->dy_bd, &d->x_bw};
    const int n = (int)(sizeof mems / sizeof mems[0]);
    for (int i = n - 1; i >= 0; --i) mem_free(mems[i], (const dmem *const *)mems, i);
    d->batch = 0;
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

/* The primitives of l's kind for its current shape. */
static amp_status layer_build(amp_dnnl_conv *d, dnnl_engine_t e, const layer *l, char *why,
                              size_t whylen)
{
    return l->type == CONVOLUTIONAL ? conv_build(d, e, l, why, whylen)
                                    : gemm_layer_build(d, e, l, why, whylen);
}

/* l's emulation (half.c): where oneDNN cannot run a shape or a primitive failed. */
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

/* float16: an owned buffer (a oneDNN layout, its padding included: zeros
 * stay zeros) rounded in place. counts: amp_network_flushed's, for the
 * incoming gradient. */
static void round16(amp_layer *al, const dmem *m, int counts)
{
    void *p = NULL;
    if (dnnl_memory_get_data_handle(m->m, &p) != dnnl_success || !p) return;
    amp_net *an = al->owner;
    amp_cpu_round_f16(p, dnnl_memory_desc_get_size(&m->md) / sizeof(float),
                      counts ? &an->grad_nonzero : NULL, &an->grad_flushed);
}

/* The half copy of the weights in one layout, refreshed when they changed. */
static amp_status weights_for(amp_layer *al, const layer *l, dnnl_primitive_t r, dmem *dst,
                              unsigned long *version)
{
    if (*version == al->owner->weights_version) return AMP_OK;
    amp_dnnl_conv *d = cpu_layer_of(al)->dnnl;
    set(&d->w_user, l->weights);
    AMP_FORWARD_IF_ERROR(run_reorder(al, r, &d->w_user, dst));
    if (d->round16) round16(al, dst, 0);
    *version = al->owner->weights_version;
    return AMP_OK;
}

static amp_status ensure_shape(amp_layer *al, const layer *l)
{
    amp_dnnl_conv *d = cpu_layer_of(al)->dnnl;
    if (d->batch == l->batch && d->h == l->h && d->w == l->w) return AMP_OK;
    char why[AMP_MSG_LEN];
    conv_release(d);
    amp_status st = layer_build(d, cpu_net_of(al->owner)->dnnl->engine, l, why, sizeof why);
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

/* The weight and data gradients through oneDNN, added into darknet's arrays. */
static amp_status gradients(amp_layer *al, amp_dnnl_conv *d, layer l, network net)
{
    set(&d->dy_user, l.delta);
    set(&d->dw_user, l.weight_updates);
    AMP_FORWARD_IF_ERROR(run_reorder(al, d->r_dy_bw, &d->dy_user, &d->dy_bw));
    if (d->round16) round16(al, &d->dy_bw, 1);
    if (al->sub) { /* a recurrent sub-layer: x holds the last time step's input */
        set(&d->x_user, net.input);
        AMP_FORWARD_IF_ERROR(run_reorder(al, d->r_x, &d->x_user, &d->x));
        if (d->round16) round16(al, &d->x, 0);
    }
    if (d->r_x_bw) AMP_FORWARD_IF_ERROR(run_reorder(al, d->r_x_bw, &d->x, &d->x_bw));
    dnnl_exec_arg_t w[3] = {{DNNL_ARG_SRC, d->x_bw.m}, {DNNL_ARG_DIFF_DST, d->dy_bw.m},
                            {DNNL_ARG_DIFF_WEIGHTS, d->dw.m}};
    AMP_FORWARD_IF_ERROR(run(al, d->bwd_weights, 3, w));
    if (d->round16) round16(al, &d->dw, 0);
    AMP_FORWARD_IF_ERROR(run_reorder(al, d->r_dw, &d->dw, &d->dw_user));
    if (!net.delta) return AMP_OK;
    set(&d->dx_user, net.delta);
    if (d->r_dy_bd) {
        AMP_FORWARD_IF_ERROR(run_reorder(al, d->r_dy_bd, &d->dy_user, &d->dy_bd));
        if (d->round16) round16(al, &d->dy_bd, 0);
    }
    AMP_FORWARD_IF_ERROR(weights_for(al, &l, d->r_w_bwd ? d->r_w_bwd : d->r_w_fwd, &d->w_bwd,
                                     d->r_w_bwd ? &d->w_bwd_version : &d->w_fwd_version));
    dnnl_exec_arg_t b[3] = {{DNNL_ARG_DIFF_DST, d->dy_bd.m}, {DNNL_ARG_WEIGHTS, d->w_bwd.m},
                            {DNNL_ARG_DIFF_SRC, d->dx.m}};
    AMP_FORWARD_IF_ERROR(run(al, d->bwd_data, 3, b));
    if (d->round16) round16(al, &d->dx, 0);
    return run_reorder(al, d->r_dx, &d->dx, &d->dx_user);
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
    set(&d->x_user, net.input);
    set(&d->y_user, l.output);
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, d->x.m}, {DNNL_ARG_WEIGHTS, d->w_fwd.m},
                            {DNNL_ARG_DST, d->y.m}};
    if (weights_for(al, &l, d->r_w_fwd, &d->w_fwd, &d->w_fwd_version) != AMP_OK ||
        run_reorder(al, d->r_x, &d->x_user, &d->x) != AMP_OK) {
        fall_back_forward(al, d, l, net);
        return;
    }
    if (d->round16) round16(al, &d->x, 0);
    if (run(al, d->fwd, 3, a) != AMP_OK || run_reorder(al, d->r_y, &d->y, &d->y_user) != AMP_OK) {
        fall_back_forward(al, d, l, net);
        return;
    }
    if (d->round16) amp_cpu_round_f16(l.output, (size_t)l.outputs * l.batch, NULL, NULL);
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

/* oneDNN's reference kernels ("ref:any") are slower than darknet's own GEMM:
 * in auto mode a layer only goes to oneDNN with optimised ones. */
static int is_reference(const char *impl) { return strncmp(impl, "ref", 3) == 0; }

amp_status amp_onednn_install(amp_layer *al, layer *l, amp_dtype dtype, char *why,
                              size_t whylen)
{
    const int conv = l->type == CONVOLUTIONAL;
    AMP_RETURN_ERROR_IF(!conv && l->type != DECONVOLUTIONAL && l->type != CONNECTED,
                        AMP_ERR_INVALID, why, whylen,
                        "not a convolutional, deconvolutional or connected layer");
    cpu_net *cn = cpu_net_of(al->owner);
    struct amp_dnnl_ctx *c;
    AMP_FORWARD_IF_ERROR(ctx_of(cn, &c, why, whylen));
    amp_dnnl_conv *d = calloc(1, sizeof *d);
    AMP_RETURN_ERROR_IF(!d, AMP_ERR_NOMEM, why, whylen, "out of memory");
    d->dt = dtype == AMP_DTYPE_BFLOAT16 ? dnnl_bf16 : dnnl_f32;
    /* float16: oneDNN 2.6 has no float16 convolution on CPUs, but the product
     * of two float16 values is exact in float32: float32 kernels on operands
     * rounded to float16, results rounded where a GPU stores half, keep every
     * rounding point of the emulation; only the order of the sums changes. */
    d->round16 = dtype == AMP_DTYPE_FLOAT16;
    amp_status st = layer_build(d, c->engine, l, why, whylen);
    if (st == AMP_OK && cn->path == AMP_CPU_AUTO &&
        (is_reference(d->impl[0]) || is_reference(d->impl[1]) || is_reference(d->impl[2]))) {
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
    al->impl = AMP_IMPL_ONEDNN;
    return AMP_OK;
}

int amp_onednn_fallbacks(const cpu_layer *c)
{
    if (!c || !c->dnnl) return 0;
    return c->dnnl->warned + (c->dnnl->batch == 0); /* failed primitives; a shape it cannot run */
}

void amp_onednn_free(cpu_layer *c)
{
    if (!c || !c->dnnl) return;
    conv_release(c->dnnl);
    free(c->dnnl);
    c->dnnl = NULL;
}

#endif

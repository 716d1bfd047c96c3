/* oneDNN's own primitives for a half layer: a convolution's forward,
 * backward-data and backward-weights (the direct form), and the same three
 * for a deconvolution or an inner product (a connected layer, or a recurrent
 * layer's connected sub-layer), with their memories and reorders between
 * darknet's float32 NCHW arrays and oneDNN's layouts.
 */
#include "onednn.h"

#include <string.h>

/* The memories and reorders of the primitive descriptors fpd, dpd and wpd. */
static amp_status conv_memories(amp_dnnl_conv *d, dnnl_engine_t e, const dnnl_memory_desc_t *ux,
                                const dnnl_memory_desc_t *uy, const dnnl_memory_desc_t *uw,
                                const_dnnl_primitive_desc_t fpd, const_dnnl_primitive_desc_t dpd,
                                const_dnnl_primitive_desc_t wpd, char *why, size_t whylen)
{
#define MD(pd, q) dnnl_primitive_desc_query_md(pd, q, 0)
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_view(&d->x_user, ux, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_view(&d->y_user, uy, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_view(&d->w_user, uw, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_view(&d->dy_user, uy, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_view(&d->dw_user, uw, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_view(&d->dx_user, ux, e, why, whylen));
    /* the input, the output and the incoming gradient: darknet's side's
     * storage itself where oneDNN works in its layout */
    AMP_FORWARD_IF_ERROR(
        amp_dnnl_mem_user_or_own(d, &d->x, MD(fpd, dnnl_query_src_md), &d->x_user, e, why, whylen));
    AMP_FORWARD_IF_ERROR(
        amp_dnnl_mem_user_or_own(d, &d->y, MD(fpd, dnnl_query_dst_md), &d->y_user, e, why, whylen));
    AMP_FORWARD_IF_ERROR(
        amp_dnnl_mem_own(&d->w_fwd, MD(fpd, dnnl_query_weights_md), d, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_user_or_own(d, &d->dy_bw, MD(wpd, dnnl_query_diff_dst_md),
                                                  &d->dy_user, e, why, whylen));
    AMP_FORWARD_IF_ERROR(
        amp_dnnl_mem_own(&d->dw, MD(wpd, dnnl_query_diff_weights_md), d, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_own(&d->dx, MD(dpd, dnnl_query_diff_src_md), d, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_alias_or_own(&d->w_bwd, &d->w_fwd,
                                                   MD(dpd, dnnl_query_weights_md), d, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_alias_or_own(
        &d->dy_bd, &d->dy_bw, MD(dpd, dnnl_query_diff_dst_md), d, e, why, whylen));
    AMP_FORWARD_IF_ERROR(
        amp_dnnl_mem_alias_or_own(&d->x_bw, &d->x, MD(wpd, dnnl_query_src_md), d, e, why, whylen));
#undef MD
    if (!amp_dnnl_is_user(d, &d->x))
        AMP_FORWARD_IF_ERROR(amp_dnnl_reorder(&d->r_x, &d->x_user, &d->x, 0, e, why, whylen));
    if (!amp_dnnl_is_user(d, &d->y))
        AMP_FORWARD_IF_ERROR(amp_dnnl_reorder(&d->r_y, &d->y, &d->y_user, 0, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_reorder(&d->r_w_fwd, &d->w_user, &d->w_fwd, 0, e, why, whylen));
    if (!amp_dnnl_is_user(d, &d->dy_bw))
        AMP_FORWARD_IF_ERROR(
            amp_dnnl_reorder(&d->r_dy_bw, &d->dy_user, &d->dy_bw, 0, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_reorder(&d->r_dw, &d->dw, &d->dw_user, 1, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_reorder(&d->r_dx, &d->dx, &d->dx_user, 1, e, why, whylen));
    if (d->w_bwd.m != d->w_fwd.m)
        AMP_FORWARD_IF_ERROR(
            amp_dnnl_reorder(&d->r_w_bwd, &d->w_user, &d->w_bwd, 0, e, why, whylen));
    if (d->dy_bd.m != d->dy_bw.m)
        AMP_FORWARD_IF_ERROR(
            amp_dnnl_reorder(&d->r_dy_bd, &d->dy_user, &d->dy_bd, 0, e, why, whylen));
    if (d->x_bw.m != d->x.m)
        AMP_FORWARD_IF_ERROR(amp_dnnl_reorder(&d->r_x_bw, &d->x, &d->x_bw, 0, e, why, whylen));
    const dmem *const internal[AMP_T_COUNT] = {&d->x, &d->y, &d->dy_bw,
                                               d->r_dy_bd ? &d->dy_bd : NULL, &d->dx};
    return amp_dnnl_images_build(d, e, ux, uy, internal, why, whylen);
}

/* oneDNN 2.6's AMX backward-weights kernel ("jit:avx512_core_amx_bf16")
 * gives wrong weight gradients for convolutions of few input channels on
 * wide maps: a first layer of 3 channels (or 4, or 8) into 16 at 384 x 384
 * and up, from its second run on (non-finite or ~1e38 values, whatever the
 * scratchpad holds; yolov3-tiny at its 416 px then skips every step and can
 * corrupt the heap). Measured in oneDNN alone (scripts/onednn_shapes.c's
 * shapes, each pass run three times), not in 2.6's other passes or at 16
 * input channels. Such a layer takes the next implementation oneDNN offers
 * (its AVX512-BF16 kernel, as fast on these shapes: 5.9 against 6.6 ms at
 * 320 px, batch 8). */
#define AMP_DNNL_AMX_BWD_W "jit:avx512_core_amx_bf16"
#define AMP_DNNL_AMX_BWD_W_MIN_CHANNELS 16

static amp_status weights_pd(dnnl_primitive_desc_t *wpd, const dnnl_convolution_desc_t *wd,
                             dnnl_engine_t e, const_dnnl_primitive_desc_t fpd, int channels)
{
    if (channels >= AMP_DNNL_AMX_BWD_W_MIN_CHANNELS)
        return dnnl_primitive_desc_create(wpd, wd, amp_dnnl_attr(), e, fpd) == dnnl_success
                   ? AMP_OK
                   : AMP_ERR_INVALID;
    dnnl_primitive_desc_iterator_t it = NULL;
    if (dnnl_primitive_desc_iterator_create(&it, wd, amp_dnnl_attr(), e, fpd) != dnnl_success)
        return AMP_ERR_INVALID;
    amp_status st = AMP_ERR_INVALID;
    do {
        dnnl_primitive_desc_t pd = dnnl_primitive_desc_iterator_fetch(it);
        if (!pd) break;
        if (strcmp(amp_dnnl_impl_name(pd), AMP_DNNL_AMX_BWD_W) != 0) {
            *wpd = pd;
            st = AMP_OK;
            break;
        }
        dnnl_primitive_desc_destroy(pd);
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    return st;
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
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(
        dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, ax,
                                           aw, NULL, ay, strides, pad_l, pad_r)));
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_primitive_desc_create(fpd, &cd, amp_dnnl_attr(), e, NULL)));
    AMP_RETURN_ERROR_IF(dnnl_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, ax,
                                                                 aw, ay, strides, pad_l,
                                                                 pad_r) != dnnl_success ||
                            dnnl_primitive_desc_create(dpd, &dd, amp_dnnl_attr(), e, *fpd) != dnnl_success,
                        AMP_ERR_INVALID, why, whylen, "no oneDNN %s backward-data convolution",
                        type);
    AMP_RETURN_ERROR_IF(dnnl_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct,
                                                                    ax, adw, NULL, ay, strides,
                                                                    pad_l, pad_r) != dnnl_success ||
                            weights_pd(wpd, &wd, e, *fpd, l->c / l->groups) != AMP_OK,
                        AMP_ERR_INVALID, why, whylen, "no oneDNN %s backward-weights convolution",
                        type);
    snprintf(d->impl[0], sizeof d->impl[0], "%s", amp_dnnl_impl_name(*fpd));
    snprintf(d->impl[1], sizeof d->impl[1], "%s", amp_dnnl_impl_name(*dpd));
    snprintf(d->impl[2], sizeof d->impl[2], "%s", amp_dnnl_impl_name(*wpd));
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
        amp_dnnl_release(d);
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
amp_status amp_dnnl_conv_build(amp_dnnl_conv *d, dnnl_engine_t e, const layer *l, char *why,
                               size_t whylen)
{
    const dnnl_data_type_t dt = d->dt, f32 = dnnl_f32;
    const int g = l->groups;
    dnnl_dims_t xd = {l->batch, l->c, l->h, l->w}, yd = {l->batch, l->n, l->out_h, l->out_w};
    dnnl_dims_t wd = {l->n, l->c, l->size, l->size};
    dnnl_dims_t wgd = {g, l->n / g, l->c / g, l->size, l->size};
    const int wnd = g > 1 ? 5 : 4;
    dnnl_memory_desc_t ux, uy, uw, ax, ay, aw, adw;
    const dnnl_data_type_t uin = amp_dnnl_user_type(d, 0), uout = amp_dnnl_user_type(d, 1);
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(
        dnnl_memory_desc_init_by_tag(&ux, 4, xd, uin, amp_dnnl_user_tag(d, 0))));
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(
        dnnl_memory_desc_init_by_tag(&uy, 4, yd, uout, amp_dnnl_user_tag(d, 1))));
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(
        &uw, wnd, g > 1 ? wgd : wd, f32, g > 1 ? dnnl_goihw : dnnl_oihw)));
    amp_dnnl_md_any(&ax, 4, xd, dt);
    amp_dnnl_md_any(&ay, 4, yd, dt);
    amp_dnnl_md_any(&aw, wnd, g > 1 ? wgd : wd, dt);
    /* the weight gradient in float32 (never through half, as on a GPU): the
     * reorder adds it to weight_updates, the momentum history, in float32 */
    amp_dnnl_md_any(&adw, wnd, g > 1 ? wgd : wd, f32);
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
amp_status amp_dnnl_gemm_layer_build(amp_dnnl_conv *d, dnnl_engine_t e, const layer *l, char *why,
                                     size_t whylen)
{
    const dnnl_data_type_t dt = d->dt, f32 = dnnl_f32;
    const dnnl_data_type_t uin = amp_dnnl_user_type(d, 0), uout = amp_dnnl_user_type(d, 1);
    const int ip = l->type == CONNECTED;
    int nd = ip ? 2 : 4, ynd = nd;
    dnnl_dims_t xd = {l->batch, l->inputs}, yd = {l->batch, l->outputs};
    dnnl_dims_t wd = {l->outputs, l->inputs};
    dnnl_format_tag_t tx = ip ? dnnl_nc : amp_dnnl_user_tag(d, 0), tw = ip ? dnnl_oi : dnnl_iohw;
    const amp_layer *al = l->hook_data;
    if (ip && uin != f32 && al && al->index > 0) {
        /* a half input is the previous layer's NHWC tensor: darknet's weights
         * read it in CHW order, so the inner product takes it as 4-D, the
         * weights as OIHW */
        const layer *p = &al->owner->net->layers[al->index - 1];
        if ((long)p->out_c * p->out_h * p->out_w == l->inputs && p->out_h * p->out_w > 1) {
            const dnnl_dims_t x4 = {l->batch, p->out_c, p->out_h, p->out_w};
            const dnnl_dims_t w4 = {l->outputs, p->out_c, p->out_h, p->out_w};
            memcpy(xd, x4, sizeof xd);
            memcpy(wd, w4, sizeof wd);
            nd = 4;
            tx = dnnl_nhwc;
            tw = dnnl_oihw;
        }
    }
    if (!ip) {
        const dnnl_dims_t x4 = {l->batch, l->c, l->h, l->w};
        const dnnl_dims_t y4 = {l->batch, l->n, l->out_h, l->out_w};
        const dnnl_dims_t w4 = {l->n, l->c, l->size, l->size};
        memcpy(xd, x4, sizeof xd);
        memcpy(yd, y4, sizeof yd);
        memcpy(wd, w4, sizeof wd);
    }
    dnnl_memory_desc_t ux, uy, uw, ax, ay, aw, adw;
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&ux, nd, xd, uin, tx)));
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(
        &uy, ynd, yd, uout, ip ? dnnl_nc : amp_dnnl_user_tag(d, 1))));
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&uw, nd, wd, f32, tw)));
    amp_dnnl_md_any(&ax, nd, xd, dt);
    amp_dnnl_md_any(&ay, ynd, yd, dt);
    amp_dnnl_md_any(&aw, nd, wd, dt);
    amp_dnnl_md_any(&adw, nd, wd, f32); /* the weight gradient in float32, as a convolution's */

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
    if (dnnl_primitive_desc_create(&fpd, &fd, amp_dnnl_attr(), e, NULL) != dnnl_success ||
        dnnl_primitive_desc_create(&dpd, &dd, amp_dnnl_attr(), e, fpd) != dnnl_success ||
        dnnl_primitive_desc_create(&wpd, &wdd, amp_dnnl_attr(), e, fpd) != dnnl_success) {
        amp_errorf(why, whylen, "no oneDNN %s %s for this shape", type, what);
        st = AMP_ERR_INVALID;
    }
    if (st == AMP_OK) {
        snprintf(d->impl[0], sizeof d->impl[0], "%s", amp_dnnl_impl_name(fpd));
        snprintf(d->impl[1], sizeof d->impl[1], "%s", amp_dnnl_impl_name(dpd));
        snprintf(d->impl[2], sizeof d->impl[2], "%s", amp_dnnl_impl_name(wpd));
        if (dnnl_primitive_create(&d->fwd, fpd) != dnnl_success ||
            dnnl_primitive_create(&d->bwd_data, dpd) != dnnl_success ||
            dnnl_primitive_create(&d->bwd_weights, wpd) != dnnl_success) {
            amp_errorf(why, whylen, "oneDNN %s primitive creation failed", what);
            st = AMP_ERR_DEVICE;
        }
    }
    return build_end(d, e, l, st, &ux, &uy, &uw, fpd, dpd, wpd, why, whylen);
}

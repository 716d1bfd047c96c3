/* A convolution as im2col + matmul through oneDNN (the matmul form).
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
 * the direct form's: the input, weights, output and incoming gradient are
 * stored in the half dtype; the weight gradient is a half x half -> float32
 * matmul, added to weight_updates unrounded; the data gradient is summed in
 * float32 (dcol, then col2im) and rounded once, as a convolution's
 * backward-data rounds its float32 sums once.
 */
#include "onednn.h"

/* The matmul primitive c = a b into *p, its implementation's name in impl. */
static amp_status matmul(dnnl_primitive_t *p, char impl[48], const dmem *a, const dmem *b,
                         const dmem *c, dnnl_engine_t e, char *why, size_t whylen)
{
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    const char *type = a->md.data_type == dnnl_bf16 ? "bfloat16" : "float32";
    AMP_RETURN_ERROR_IF(dnnl_matmul_desc_init(&md, &a->md, &b->md, NULL, &c->md) != dnnl_success ||
                            dnnl_primitive_desc_create(&pd, &md, amp_dnnl_attr(), e, NULL) != dnnl_success,
                        AMP_ERR_INVALID, why, whylen, "no oneDNN %s matmul %ldx%ld by %ldx%ld",
                        type, (long)a->md.dims[0], (long)a->md.dims[1], (long)b->md.dims[0],
                        (long)b->md.dims[1]);
    snprintf(impl, 48, "%s", amp_dnnl_impl_name(pd));
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
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(
        &ux, 4, xd, amp_dnnl_user_type(d, 0), amp_dnnl_user_tag(d, 0))));
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(
        &uy, 4, yd, amp_dnnl_user_type(d, 1), amp_dnnl_user_tag(d, 1))));
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&uw, 4, wd, f32, dnnl_oihw)));
    dmem *users[] = {&d->x_user, &d->y_user, &d->w_user, &d->dy_user, &d->dw_user, &d->dx_user};
    const dnnl_memory_desc_t *umd[] = {&ux, &uy, &uw, &uy, &uw, &ux};
    for (int i = 0; i < 6; ++i)
        AMP_FORWARD_IF_ERROR(amp_dnnl_mem_view(users[i], umd[i], e, why, whylen));
    /* the input, the incoming gradient and the output (P x N is NHWC): the
     * plan's half tensors themselves where the dtypes agree */
    dnnl_memory_desc_t x4, y4, ypn;
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&x4, 4, xd, dt, dnnl_nhwc)));
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&y4, 4, yd, dt, dnnl_nhwc)));
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&ypn, 2, pn, dt, dnnl_ab)));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_user_or_own(d, &d->x, &x4, &d->x_user, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_tag(&d->w_fwd, 4, wd, dt, dnnl_oihw, d, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_user_or_own(d, &d->dy_bw, &y4, &d->dy_user, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_tag(&m->col, 2, pk, dt, dnnl_ab, d, e, why, whylen));
    if (dnnl_memory_desc_equal(&y4, &d->y_user.md))
        AMP_FORWARD_IF_ERROR(amp_dnnl_mem_user(d, &d->y, &ypn, e, why, whylen));
    else
        AMP_FORWARD_IF_ERROR(amp_dnnl_mem_own(&d->y, &ypn, d, e, why, whylen));
    /* the weight gradient in float32, as the direct form's (N x K is OIHW) */
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_tag(&d->dw, 2, nk, f32, dnnl_ab, d, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_tag(&m->dcol, 2, pk, f32, dnnl_ab, d, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_tag(&m->dxa, 4, xd, f32, dnnl_nhwc, d, e, why, whylen));
    if (dt != f32)
        AMP_FORWARD_IF_ERROR(amp_dnnl_mem_tag(&m->dxh, 4, xd, dt, dnnl_nhwc, d, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_matrix_on(d, &m->w_t, K, N, 1, &d->w_fwd, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_matrix_on(d, &m->w_nk, N, K, 0, &d->w_fwd, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_matrix_on(d, &m->dy_t, N, P, 1, &d->dy_bw, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_matrix_on(d, &m->dy_pn, P, N, 0, &d->dy_bw, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_view_on(d, &m->y4, &d->dy_bw.md, &d->y, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_view_on(d, &m->dw4, &uw, &d->dw, e, why, whylen));
    AMP_FORWARD_IF_ERROR(matmul(&d->fwd, d->impl[0], &m->col, &m->w_t, &d->y, e, why, whylen));
    AMP_FORWARD_IF_ERROR(
        matmul(&d->bwd_data, d->impl[1], &m->dy_pn, &m->w_nk, &m->dcol, e, why, whylen));
    AMP_FORWARD_IF_ERROR(
        matmul(&d->bwd_weights, d->impl[2], &m->dy_t, &m->col, &d->dw, e, why, whylen));
    const dmem *dx = dt != f32 ? &m->dxh : &m->dxa; /* the rounded data gradient */
    if (!amp_dnnl_is_user(d, &d->x))
        AMP_FORWARD_IF_ERROR(amp_dnnl_reorder(&d->r_x, &d->x_user, &d->x, 0, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_reorder(&d->r_w_fwd, &d->w_user, &d->w_fwd, 0, e, why, whylen));
    if (!amp_dnnl_is_user(d, &d->y))
        AMP_FORWARD_IF_ERROR(amp_dnnl_reorder(&d->r_y, &m->y4, &d->y_user, 0, e, why, whylen));
    if (!amp_dnnl_is_user(d, &d->dy_bw))
        AMP_FORWARD_IF_ERROR(
            amp_dnnl_reorder(&d->r_dy_bw, &d->dy_user, &d->dy_bw, 0, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_reorder(&d->r_dw, &m->dw4, &d->dw_user, 1, e, why, whylen));
    AMP_FORWARD_IF_ERROR(amp_dnnl_reorder(&d->r_dx, dx, &d->dx_user, 1, e, why, whylen));
    if (dt != f32)
        AMP_FORWARD_IF_ERROR(amp_dnnl_reorder(&m->r_dxh, &m->dxa, &m->dxh, 0, e, why, whylen));
    m->shape = (amp_conv_shape){l->batch, l->h, l->w, l->c, l->out_h, l->out_w,
                                l->size, l->stride, l->pad};
    const dmem *const internal[AMP_T_COUNT] = {&d->x, &m->y4, &d->dy_bw, NULL, dx};
    return amp_dnnl_images_build(d, e, &ux, &uy, internal, why, whylen);
}

/* The matmul form for l's current shape, or why not (everything released). */
amp_status amp_dnnl_mm_build(amp_dnnl_conv *d, dnnl_engine_t e, const layer *l, char *why,
                             size_t whylen)
{
    AMP_RETURN_ERROR_IF(l->type != CONVOLUTIONAL || l->groups != 1, AMP_ERR_INVALID, why, whylen,
                        "im2col + matmul: not an ungrouped convolution");
    AMP_RETURN_ERROR_IF(l->size * l->size > AMP_IM2COL_MAX_WINDOW, AMP_ERR_INVALID, why, whylen,
                        "im2col + matmul: a %dx%d kernel", l->size, l->size);
    amp_status st = mm_parts(d, e, l, why, whylen);
    if (st != AMP_OK) {
        amp_dnnl_release(d);
        return st;
    }
    d->matmul = 1;
    d->batch = l->batch;
    d->h = l->h;
    d->w = l->w;
    d->w_fwd_version = d->w_bwd_version = 0;
    return AMP_OK;
}

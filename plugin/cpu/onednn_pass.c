/* A half layer's passes through oneDNN on the primitives built for its
 * shape: the forward's convolution or GEMM (the weights converted once per
 * weights version, the input reordered, and in the matmul form unrolled),
 * and the backward's weight and data gradients, added into darknet's
 * arrays; with the rounding points of half numerics on float32 kernels.
 * onednn_layer.c runs them for darknet, onednn_form.c to time the forms.
 */
#include "onednn.h"

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
static void amp_dnnl_round_half(amp_layer *al, const amp_dnnl_conv *d, amp_round_point point,
                                const dmem *m, int counts)
{
    void *p = NULL;
    if (dnnl_memory_get_data_handle(m->m, &p) != dnnl_success) return;
    round_values(al, d, point, p, dnnl_memory_desc_get_size(&m->md) / sizeof(float), counts);
}

/* darknet's side into oneDNN's layout (the input, an incoming gradient), or
 * back (the output; the data gradient, added): reorder r, or a few images at
 * a time through a float32 buffer where d has one (amp_dnnl_image); no
 * reorder (r NULL) where oneDNN works on darknet's side's storage itself. */
static amp_status transfer(amp_layer *al, amp_dnnl_conv *d, amp_dnnl_transfer t,
                           dnnl_primitive_t r, const dmem *src, const dmem *dst)
{
    const amp_dnnl_image *im = &d->image[t];
    const int to_oneDNN = t != AMP_T_Y && t != AMP_T_DX;
    if (!r && !im->r) /* (the output's storage was given before the forward) */
        return to_oneDNN ? amp_dnnl_bind_user(d, (dmem *)dst, amp_dnnl_data_of(src)) : AMP_OK;
    if (!im->r) return amp_dnnl_run_reorder(al, r, src, dst);
    const dmem *user = to_oneDNN ? src : dst, *inner = to_oneDNN ? dst : src;
    uint16_t *u = amp_dnnl_data_of(user);
    char *base = amp_dnnl_data_of(inner);
    const amp_dtype dt = al->owner->scaler->opt.dtype;
    float *img = amp_cpu_reserve(&cpu_net_of(al->owner)->img32, im->elems);
    amp_dnnl_image *w = &d->image[t];
    amp_dnnl_set(&w->img, img);
    for (dnnl_dim_t b = 0; b < user->md.dims[0] / im->images; ++b) {
        uint16_t *ub = u + (size_t)b * im->elems;
        amp_dnnl_set(&w->part, base + (size_t)b * im->part_bytes);
        if (to_oneDNN) {
            amp_cpu_from_half(dt, ub, img, im->elems);
            AMP_FORWARD_IF_ERROR(amp_dnnl_run_reorder(al, im->r, &im->img, &im->part));
            continue;
        }
        AMP_FORWARD_IF_ERROR(amp_dnnl_run_reorder(al, im->r, &im->part, &im->img));
        if (t == AMP_T_DX) amp_cpu_add_half(dt, ub, img, im->elems);
        else amp_cpu_to_half(dt, img, ub, im->elems); /* the output's rounding */
    }
    return AMP_OK;
}

/* The half copy of the weights in one layout, refreshed when they changed. */
static amp_status weights_for(amp_layer *al, amp_dnnl_conv *d, const layer *l,
                              dnnl_primitive_t r, dmem *dst, unsigned long *version)
{
    if (*version == al->owner->weights_version) return AMP_OK;
    amp_dnnl_set(&d->w_user, l->weights);
    AMP_FORWARD_IF_ERROR(amp_dnnl_run_reorder(al, r, &d->w_user, dst));
    amp_dnnl_round_half(al, d, AMP_ROUND_W, dst, 0);
    *version = al->owner->weights_version;
    return AMP_OK;
}

/* The input, in oneDNN's layout (rounded for float16) and, in the matmul
 * form, unrolled into windows. */
static amp_status input_for(amp_layer *al, amp_dnnl_conv *d, const float *input)
{
    amp_dnnl_set(&d->x_user, (void *)input);
    AMP_FORWARD_IF_ERROR(transfer(al, d, AMP_T_X, d->r_x, &d->x_user, &d->x));
    amp_dnnl_round_half(al, d, AMP_ROUND_X, &d->x, 0);
    if (d->matmul)
        amp_im2col_nhwc(amp_dnnl_data_of(&d->x), amp_dnnl_data_of(&d->mm.col),
                        d->dt == dnnl_bf16 ? 2 : 4, &d->mm.shape);
    return AMP_OK;
}

/* The convolution or GEMM of a forward into l->output, half-rounded; no tail. */
amp_status amp_dnnl_forward_core(amp_layer *al, amp_dnnl_conv *d, const layer *l,
                                 const float *input)
{
    AMP_FORWARD_IF_ERROR(amp_dnnl_bind(al, d, 0));
    d->w_fwd_version = d->w_bwd_version = 0; /* in the arena: made again in each pass */
    amp_dnnl_set(&d->y_user, l->output);
    if (amp_dnnl_is_user(d, &d->y)) AMP_FORWARD_IF_ERROR(amp_dnnl_bind_user(d, &d->y, l->output));
    AMP_FORWARD_IF_ERROR(weights_for(al, d, l, d->r_w_fwd, &d->w_fwd, &d->w_fwd_version));
    AMP_FORWARD_IF_ERROR(input_for(al, d, input));
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, d->matmul ? d->mm.col.m : d->x.m},
                            {DNNL_ARG_WEIGHTS, d->matmul ? d->mm.w_t.m : d->w_fwd.m},
                            {DNNL_ARG_DST, d->y.m}};
    AMP_FORWARD_IF_ERROR(amp_dnnl_run(al, d->fwd, 3, a));
    AMP_FORWARD_IF_ERROR(
        transfer(al, d, AMP_T_Y, d->r_y, d->matmul ? &d->mm.y4 : &d->y, &d->y_user));
    /* (a half output array: the reorder rounded it) */
    if (amp_dnnl_user_type(d, 1) == dnnl_f32)
        round_values(al, d, AMP_ROUND_Y, l->output, (size_t)l->outputs * l->batch, 0);
    return AMP_OK;
}

/* The data gradient in the matmul form: dcol = dy W, folded back (col2im)
 * in float32, rounded once; the rounded array in *out. */
static amp_status amp_dnnl_mm_data_gradient(amp_layer *al, amp_dnnl_conv *d, const dmem **out)
{
    amp_dnnl_mm *m = &d->mm;
    dnnl_exec_arg_t b[3] = {{DNNL_ARG_SRC, m->dy_pn.m}, {DNNL_ARG_WEIGHTS, m->w_nk.m},
                            {DNNL_ARG_DST, m->dcol.m}};
    AMP_FORWARD_IF_ERROR(amp_dnnl_run(al, d->bwd_data, 3, b));
    amp_col2im_nhwc(amp_dnnl_data_of(&m->dcol), amp_dnnl_data_of(&m->dxa), &m->shape);
    *out = &m->dxa;
    if (m->r_dxh) {
        AMP_FORWARD_IF_ERROR(amp_dnnl_run_reorder(al, m->r_dxh, &m->dxa, &m->dxh));
        *out = &m->dxh;
    } else {
        amp_dnnl_round_half(al, d, AMP_ROUND_DX, &m->dxa, 0);
    }
    return AMP_OK;
}

/* The weight and data gradients through oneDNN, added into darknet's arrays. */
amp_status amp_dnnl_gradients(amp_layer *al, amp_dnnl_conv *d, layer l, network net)
{
    AMP_FORWARD_IF_ERROR(amp_dnnl_bind(al, d, net.delta != NULL));
    d->w_fwd_version = d->w_bwd_version = 0;
    amp_dnnl_set(&d->dy_user, l.delta);
    amp_dnnl_set(&d->dw_user, l.weight_updates);
    AMP_FORWARD_IF_ERROR(transfer(al, d, AMP_T_DY_BW, d->r_dy_bw, &d->dy_user, &d->dy_bw));
    /* counted here unless the tail rounded it into half storage and counted there */
    amp_dnnl_round_half(al, d, AMP_ROUND_DY, &d->dy_bw, amp_dnnl_user_type(d, 1) == dnnl_f32);
    /* the input again: the forward's copy was in the arena, which the layers
     * after this one have used since (a recurrent sub-layer: the input is
     * the last time step's) */
    AMP_FORWARD_IF_ERROR(input_for(al, d, net.input));
    if (d->r_x_bw) AMP_FORWARD_IF_ERROR(amp_dnnl_run_reorder(al, d->r_x_bw, &d->x, &d->x_bw));
    dnnl_exec_arg_t w[3] = {{DNNL_ARG_SRC, d->x_bw.m}, {DNNL_ARG_DIFF_DST, d->dy_bw.m},
                            {DNNL_ARG_DIFF_WEIGHTS, d->dw.m}};
    if (d->matmul) { /* dW = dy^T col */
        w[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, d->mm.dy_t.m};
        w[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, d->mm.col.m};
        w[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, d->dw.m};
    }
    AMP_FORWARD_IF_ERROR(amp_dnnl_run(al, d->bwd_weights, 3, w));
    /* (the weight gradient stays float32: added to the history unrounded) */
    AMP_FORWARD_IF_ERROR(
        amp_dnnl_run_reorder(al, d->r_dw, d->matmul ? &d->mm.dw4 : &d->dw, &d->dw_user));
    if (!net.delta) return AMP_OK;
    amp_dnnl_set(&d->dx_user, net.delta);
    const dmem *dx = &d->dx;
    if (d->matmul) {
        AMP_FORWARD_IF_ERROR(
            weights_for(al, d, &l, d->r_w_fwd, &d->w_fwd, &d->w_fwd_version));
        AMP_FORWARD_IF_ERROR(amp_dnnl_mm_data_gradient(al, d, &dx));
    } else {
        if (d->r_dy_bd) {
            AMP_FORWARD_IF_ERROR(
                transfer(al, d, AMP_T_DY_BD, d->r_dy_bd, &d->dy_user, &d->dy_bd));
            amp_dnnl_round_half(al, d, AMP_ROUND_DY, &d->dy_bd, 0);
        }
        AMP_FORWARD_IF_ERROR(weights_for(al, d, &l, d->r_w_bwd ? d->r_w_bwd : d->r_w_fwd,
                                         &d->w_bwd,
                                         d->r_w_bwd ? &d->w_bwd_version : &d->w_fwd_version));
        dnnl_exec_arg_t b[3] = {{DNNL_ARG_DIFF_DST, d->dy_bd.m}, {DNNL_ARG_WEIGHTS, d->w_bwd.m},
                                {DNNL_ARG_DIFF_SRC, d->dx.m}};
        AMP_FORWARD_IF_ERROR(amp_dnnl_run(al, d->bwd_data, 3, b));
        amp_dnnl_round_half(al, d, AMP_ROUND_DX, &d->dx, 0);
    }
    return transfer(al, d, AMP_T_DX, d->r_dx, dx, &d->dx_user);
}

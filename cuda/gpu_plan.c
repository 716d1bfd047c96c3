/* Device-free decisions of the GPU half path (gpu_plan.h). */
#include "gpu_plan.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static int fits_int(long long a, long long b, long long c, long long d)
{
    return a > 0 && b > 0 && c > 0 && d > 0 && a * b * c * d <= INT_MAX;
}

amp_status amp_conv_dims_make(int batch, int c, int h, int w, int filters, int size, int stride,
                              int pad, int groups, int out_h, int out_w, amp_conv_dims *d,
                              char *why, size_t whylen)
{
    if (groups < 1 || c % groups || filters % groups) {
        snprintf(why, whylen, "groups=%d does not divide %d channels and %d filters", groups, c,
                 filters);
        return AMP_ERR_INVALID;
    }
    if (size < 1 || stride < 1 || pad < 0) {
        snprintf(why, whylen, "size %d, stride %d, pad %d", size, stride, pad);
        return AMP_ERR_INVALID;
    }
    int oh = h + 2 * pad >= size ? (h + 2 * pad - size) / stride + 1 : 0;
    int ow = w + 2 * pad >= size ? (w + 2 * pad - size) / stride + 1 : 0;
    if (oh != out_h || ow != out_w) {
        snprintf(why, whylen, "output %dx%d where cuDNN computes %dx%d", out_w, out_h, ow, oh);
        return AMP_ERR_INVALID;
    }
    if (!fits_int(batch, c, h, w) || !fits_int(batch, filters, oh, ow) ||
        !fits_int(filters, c / groups, size, size)) {
        snprintf(why, whylen, "a tensor of batch %d, %dx%dx%d in, %dx%dx%d out is empty or has "
                              "2^31 elements or more",
                 batch, c, h, w, filters, oh, ow);
        return AMP_ERR_INVALID;
    }
    d->n = batch, d->c = c, d->h = h, d->w = w;
    d->k = filters, d->cg = c / groups, d->size = size;
    d->stride = stride, d->pad = pad, d->groups = groups;
    d->out_h = oh, d->out_w = ow;
    return AMP_OK;
}

int amp_algo_pick(const amp_algo_candidate *c, int n, size_t limit)
{
    for (int i = 0; i < n; ++i)
        if (c[i].ok && c[i].memory <= limit) return i;
    return -1;
}

amp_gemm_call amp_gemm_colmajor(int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc)
{
    amp_gemm_call g;
    g.trans_first = tb != 0;
    g.trans_second = ta != 0;
    g.m = n;
    g.n = m;
    g.k = k;
    g.first_is_b = 1;
    g.ld_first = ldb;
    g.ld_second = lda;
    g.ldc = ldc;
    return g;
}

amp_yolo_kept amp_yolo_kept_of(int w, int h, int n, int classes, int batch)
{
    /* an anchor's block: x, y, w, h, objectness, classes, each w x h cells;
     * darknet activates x, y and from objectness on */
    const size_t wh = (size_t)w * h;
    const amp_yolo_kept k = {2 * wh, 2 * wh, (4 + 1 + (size_t)classes) * wh, (size_t)n * batch};
    return k;
}

int amp_wgrad_chunk(int batch, size_t per_image, size_t out_hw, size_t limit)
{
    size_t nb = per_image ? limit / per_image : (size_t)batch;
    if (out_hw && nb > (size_t)INT_MAX / out_hw) nb = (size_t)INT_MAX / out_hw;
    if (nb > (size_t)batch) nb = (size_t)batch;
    return nb < 1 ? 1 : (int)nb;
}

amp_gpu_storage amp_gpu_storage_of(const amp_gpu_layer_plan *p)
{
    amp_gpu_storage s = {0};
    /* NHWC where a neighbour's tensor is half; a batch-norm input in half
     * alone saves nothing on the device (a float32 output keeps darknet's
     * tail, which reads darknet's float32 x) */
    s.planned = p->converts && (p->out_half || p->in_half);
    s.output_half = p->out_half;
    /* a half output's tail (tail.cu) makes x_norm and the activation's input
     * again from x in half; a float32 output keeps darknet's tail and arrays */
    s.x_h = s.planned && p->out_half && p->x_half;
    s.drop_x = s.x_h && p->batch_normalize;
    s.drop_activation_input = p->out_half && p->converts && p->needs_input;
    s.darknet_tail = p->converts && !p->out_half;
    if (!p->converts) return s;
    const int in_half = s.planned && p->in_half;
    s.in_scratch = !in_half;
    s.dx_scratch = !in_half || !p->in_first;
    s.out_scratch = !(s.planned && p->out_half);
    s.dx32_scratch = s.planned && !in_half;
    s.dyc_scratch = !s.planned;
    return s;
}

int amp_algo_pick_deterministic(const amp_algo_candidate *c, int n, size_t limit)
{
    for (int i = 0; i < n; ++i)
        if (c[i].ok && c[i].deterministic && c[i].memory <= limit) return i;
    return amp_algo_pick(c, n, limit);
}

amp_status amp_gpu_plan_setting(const char *value, int *plan, char *err, size_t errlen)
{
    if (!value || !*value || !strcmp(value, "half")) {
        *plan = 1;
        return AMP_OK;
    }
    if (!strcmp(value, "float32")) {
        *plan = 0;
        return AMP_OK;
    }
    snprintf(err, errlen, "amp: DARKNET_AMP_GPU_PLAN=%.32s: expected half (the default: the "
                          "activation plan on the GPU) or float32 (float32 tensors between layers)",
             value);
    return AMP_ERR_INVALID;
}

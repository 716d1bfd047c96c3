/* gpu.plan_kernels' host references: the CPU backend's own functions on a layer
 * made of the test's arrays (host_ref.h). */
#include "host_ref.h"

#include "cpu.h"

static layer layer_of(const host_tail *t)
{
    layer l = {0};
    l.batch = t->batch;
    l.out_c = l.n = t->c;
    l.out_h = 1;
    l.out_w = t->hw;
    l.outputs = t->c * t->hw;
    l.activation = (ACTIVATION)t->act;
    l.batch_normalize = t->batch_normalize;
    l.scales = t->scales;
    l.biases = t->biases;
    l.mean = t->mean;
    l.variance = t->variance;
    l.rolling_mean = t->rolling_mean;
    l.rolling_variance = t->rolling_variance;
    l.bias_updates = t->bias_updates;
    l.scale_updates = t->scale_updates;
    l.mean_delta = t->mean_delta;
    l.variance_delta = t->variance_delta;
    return l;
}

static amp_tail_half half_of(host_tail *t)
{
    amp_tail_half th = {0};
    th.x = t->x;
    th.y = t->y;
    th.dh = t->dh;
    th.bf16 = t->bf16;
    th.cudnn = t->cudnn;
    th.from_half = 1;
    th.nonzero = &t->nonzero;
    th.flushed = &t->flushed;
    return th;
}

void host_tail_forward(host_tail *t)
{
    network net = {0};
    net.train = t->train;
    const amp_tail_half th = half_of(t);
    amp_tail_forward_nhwc(layer_of(t), net, t->c, t->hw, t->cudnn ? AMP_BN_CUDNN : AMP_BN_DARKNET_CPU,
                          &th);
}

void host_tail_backward(host_tail *t)
{
    network net = {0};
    net.train = t->train;
    const amp_tail_half th = half_of(t);
    amp_tail_backward_nhwc(layer_of(t), net, t->c, t->hw, &th);
}

static amp_dtype dtype_of(int bf16)
{
    return bf16 ? AMP_DTYPE_BFLOAT16 : AMP_DTYPE_FLOAT16;
}

void host_to_half_nhwc(int bf16, const float *x, uint16_t *h, int batch, int c, int hw)
{
    amp_cpu_to_half_nhwc(dtype_of(bf16), x, h, batch, c, hw);
}

void host_from_half_nhwc(int bf16, const uint16_t *h, float *x, int batch, int c, int hw)
{
    amp_cpu_from_half_nhwc(dtype_of(bf16), h, x, batch, c, hw);
}

void host_add_half_nhwc(int bf16, uint16_t *h, const float *x, int batch, int c, int hw)
{
    amp_cpu_add_half_nhwc(dtype_of(bf16), h, x, batch, c, hw);
}

static layer pool_layer(const host_pool *p)
{
    layer l = {0};
    l.type = MAXPOOL;
    l.batch = p->batch, l.h = p->h, l.w = p->w, l.c = p->c;
    l.out_h = p->out_h, l.out_w = p->out_w, l.out_c = p->c;
    l.size = p->size, l.stride = p->stride, l.pad = p->pad;
    l.outputs = p->out_h * p->out_w * p->c;
    l.inputs = p->h * p->w * p->c;
    return l;
}

void host_maxpool_forward(const host_pool *p, int bf16, const uint16_t *in, uint16_t *out, int *idx)
{
    const layer l = pool_layer(p);
    amp_maxpool_nhwc_forward(&l, dtype_of(bf16), in, out, idx);
}

void host_maxpool_backward(const host_pool *p, int bf16, const uint16_t *d, const int *idx,
                           uint16_t *dst)
{
    const layer l = pool_layer(p);
    amp_maxpool_nhwc_backward(&l, dtype_of(bf16), d, idx, dst);
}

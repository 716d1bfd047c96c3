/* The plugin's threaded max-pooling (plugin/cpu/maxpool.c) against darknet's
 * own forward_maxpool_layer/backward_maxpool_layer, bit for bit: outputs,
 * the index of each window's maximum, and the gradient added into net.delta.
 *
 * Shapes: the 2x2 stride-2 fast path on even and odd sizes (an odd size
 * leaves a last window half outside the input, which the general code
 * takes), yolov3-tiny's 2x2 stride-1 pool, a 3x3 stride-2 pool and explicit
 * padding. Inputs hold ties (values drawn from a few levels, so the
 * first-maximum rule decides) and signed zeros; net.delta starts non-zero
 * (the gradient must be added, not written). No -FLT_MAX or -inf: a window of
 * nothing else has no maximum in darknet (index -1), and its backward then
 * writes before net.delta.
 *
 * Then the half form (the activation plan's, amp_maxpool_nhwc_forward and
 * _backward) on NHWC float16 and bfloat16 tensors of the same inputs
 * (rounded to half, and transposed), against darknet's on their float32
 * values, bit for bit: each maximum (exact in half), its index (NHWC,
 * mapped to darknet's NCHW), and the input's delta, which the half form
 * sums in float32 in darknet's order and rounds once per element: the
 * reference's float32 sums rounded to half.
 */
#include "cpu.h"
#include "check.h"
#include "math/half_format.h"

#include "maxpool_layer.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int h, w, c, size, stride, pad;
} shape;

static float level(unsigned *seed)
{
    static const float levels[] = {-1e30f, -2.5f, -0.0f, 0.0f, 0.5f, 0.5f, 1.0f, 3.0f};
    return levels[rand_r(seed) % 8] + (rand_r(seed) % 4 == 0 ? 0.25f : 0.0f);
}

static int same(const void *a, const void *b, size_t bytes)
{
    return memcmp(a, b, bytes) == 0;
}

static void run_shape(const shape *s)
{
    const int batch = 3;
    layer l = make_maxpool_layer(batch, s->h, s->w, s->c, s->size, s->stride, s->pad);
    const size_t nin = (size_t)batch * s->h * s->w * s->c, nout = (size_t)batch * l.outputs;
    float *in = malloc(nin * sizeof(float)), *dref = malloc(nin * sizeof(float));
    float *dgot = malloc(nin * sizeof(float)), *out_ref = malloc(nout * sizeof(float));
    int *idx_ref = malloc(nout * sizeof(int));
    unsigned seed = 7u + (unsigned)s->h * 31u + (unsigned)s->size;
    for (size_t i = 0; i < nin; ++i) in[i] = level(&seed);
    for (size_t i = 0; i < nout; ++i) l.delta[i] = (float)(rand_r(&seed) % 1000) / 997.0f;
    for (size_t i = 0; i < nin; ++i) dref[i] = dgot[i] = (float)(rand_r(&seed) % 100) / 101.0f;

    network net;
    memset(&net, 0, sizeof net);
    net.input = in;
    net.delta = dref;
    forward_maxpool_layer(l, net);
    memcpy(out_ref, l.output, nout * sizeof(float));
    memcpy(idx_ref, l.indexes, nout * sizeof(int));
    backward_maxpool_layer(l, net);

    memset(l.output, 0x7f, nout * sizeof(float));
    memset(l.indexes, 0x7f, nout * sizeof(int));
    net.delta = dgot;
    amp_maxpool_forward(l, net);
    amp_maxpool_backward(l, net);

    size_t diff_out = 0, diff_idx = 0, diff_delta = 0;
    for (size_t i = 0; i < nout; ++i) {
        diff_out += !same(&out_ref[i], &l.output[i], sizeof(float));
        diff_idx += idx_ref[i] != l.indexes[i];
    }
    for (size_t i = 0; i < nin; ++i) diff_delta += !same(&dref[i], &dgot[i], sizeof(float));
    CHECK(!diff_out && !diff_idx && !diff_delta,
          "maxpool %dx%dx%d size %d stride %d pad %d -> %dx%d: %zu of %zu outputs, %zu indexes, "
          "%zu of %zu delta elements differ from darknet's (bit for bit)",
          s->w, s->h, s->c, s->size, s->stride, s->pad, l.out_w, l.out_h, diff_out, nout,
          diff_idx, diff_delta, nin);
    free(in), free(dref), free(dgot), free(out_ref), free(idx_ref);
    free_layer(l);
}

static float half_round(amp_dtype dt, float v)
{
    return dt == AMP_DTYPE_BFLOAT16 ? amp_bf16_to_f32(amp_f32_to_bf16(v))
                                    : amp_f16_to_f32(amp_f32_to_f16(v));
}

static uint16_t half_bits(amp_dtype dt, float v)
{
    return dt == AMP_DTYPE_BFLOAT16 ? amp_f32_to_bf16(v) : amp_f32_to_f16(v);
}

static float widen(amp_dtype dt, uint16_t h)
{
    return dt == AMP_DTYPE_BFLOAT16 ? amp_bf16_to_f32(h) : amp_f16_to_f32(h);
}

/* NCHW index of image b, channel c, position p, and the NHWC one. */
static size_t nchw(int b, int c, int p, int cn, int hw)
{
    return ((size_t)b * cn + c) * hw + p;
}

static size_t nhwc(int b, int c, int p, int cn, int hw)
{
    return ((size_t)b * hw + p) * cn + c;
}

static void run_half(const shape *s, amp_dtype dt)
{
    const int batch = 3;
    layer l = make_maxpool_layer(batch, s->h, s->w, s->c, s->size, s->stride, s->pad);
    const int hw = s->h * s->w, ohw = l.out_h * l.out_w, c_n = s->c;
    const size_t nin = (size_t)batch * hw * c_n, nout = (size_t)batch * l.outputs;
    float *in = malloc(nin * sizeof(float)), *dref = malloc(nin * sizeof(float));
    uint16_t *hin = malloc(nin * sizeof(uint16_t)), *hout = malloc(nout * sizeof(uint16_t));
    uint16_t *hd = malloc(nout * sizeof(uint16_t)), *hdx = malloc(nin * sizeof(uint16_t));
    int *idx = malloc(nout * sizeof(int));
    unsigned seed = 11u + (unsigned)s->w * 17u + (unsigned)s->stride + (unsigned)dt;
    for (size_t i = 0; i < nin; ++i) { /* float16 has no -1e30: its largest negative */
        const float v = level(&seed);
        in[i] = half_round(dt, dt == AMP_DTYPE_FLOAT16 && v < -65504.f ? -65504.f : v);
    }
    for (size_t i = 0; i < nout; ++i)
        l.delta[i] = half_round(dt, (float)(rand_r(&seed) % 1000) / 997.0f);
    for (size_t i = 0; i < nin; ++i) dref[i] = half_round(dt, (float)(rand_r(&seed) % 100) / 101.0f);
    for (int b = 0; b < batch; ++b)
        for (int c = 0; c < c_n; ++c)
            for (int p = 0; p < hw; ++p) {
                hin[nhwc(b, c, p, c_n, hw)] = half_bits(dt, in[nchw(b, c, p, c_n, hw)]);
                hdx[nhwc(b, c, p, c_n, hw)] = half_bits(dt, dref[nchw(b, c, p, c_n, hw)]);
            }
    for (int b = 0; b < batch; ++b)
        for (int c = 0; c < c_n; ++c)
            for (int p = 0; p < ohw; ++p)
                hd[nhwc(b, c, p, c_n, ohw)] = half_bits(dt, l.delta[nchw(b, c, p, c_n, ohw)]);

    network net;
    memset(&net, 0, sizeof net);
    net.input = in;
    net.delta = dref;
    forward_maxpool_layer(l, net);
    backward_maxpool_layer(l, net);
    memset(hout, 0x7f, nout * sizeof(uint16_t));
    memset(idx, 0x7f, nout * sizeof(int));
    amp_maxpool_nhwc_forward(&l, dt, hin, hout, idx);
    amp_maxpool_nhwc_backward(&l, dt, hd, idx, hdx);

    size_t diff_out = 0, diff_idx = 0, diff_delta = 0;
    for (int b = 0; b < batch; ++b)
        for (int c = 0; c < c_n; ++c)
            for (int p = 0; p < ohw; ++p) {
                const size_t r = nchw(b, c, p, c_n, ohw), o = nhwc(b, c, p, c_n, ohw);
                const float got = widen(dt, hout[o]);
                diff_out += !same(&l.output[r], &got, sizeof(float));
                /* the NHWC input index as darknet's NCHW one */
                const int at = idx[o], ip = at / c_n % hw, ib = at / c_n / hw, ic = at % c_n;
                diff_idx += at < 0 ? l.indexes[r] != -1
                                   : (size_t)l.indexes[r] != nchw(ib, ic, ip, c_n, hw);
            }
    for (int b = 0; b < batch; ++b)
        for (int c = 0; c < c_n; ++c)
            for (int p = 0; p < hw; ++p) {
                const float want = half_round(dt, dref[nchw(b, c, p, c_n, hw)]);
                const float got = widen(dt, hdx[nhwc(b, c, p, c_n, hw)]);
                diff_delta += !same(&want, &got, sizeof(float));
            }
    CHECK(!diff_out && !diff_idx && !diff_delta,
          "half form, %s NHWC, maxpool %dx%dx%d size %d stride %d pad %d -> %dx%d: %zu of %zu "
          "outputs, %zu indexes, %zu of %zu delta elements differ from darknet's (bit for bit; "
          "the delta: darknet's float32 sums rounded once)",
          amp_dtype_name(dt), s->w, s->h, s->c, s->size, s->stride, s->pad, l.out_w, l.out_h,
          diff_out, nout, diff_idx, diff_delta, nin);
    free(in), free(dref), free(hin), free(hout), free(hd), free(hdx), free(idx);
    free_layer(l);
}

int main(void)
{
    const shape shapes[] = {
        {16, 16, 4, 2, 2, 1},  /* darknet's default padding: size - 1 */
        {13, 11, 3, 2, 2, 1},  /* odd: the last window half outside */
        {13, 13, 5, 2, 1, 1},  /* yolov3-tiny's stride-1 pool */
        {9, 8, 2, 3, 2, 2},    /* 3x3 stride 2 */
        {10, 12, 3, 2, 2, 0},  /* no padding */
        {7, 9, 2, 2, 2, 2},    /* padding that shifts the windows */
        {64, 64, 48, 2, 2, 1}, /* enough work for the threads */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
        run_shape(&shapes[i]);
        run_half(&shapes[i], AMP_DTYPE_FLOAT16);
        run_half(&shapes[i], AMP_DTYPE_BFLOAT16);
    }
    return check_report();
}

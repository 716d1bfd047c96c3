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
 */
#include "cpu.h"
#include "check.h"

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
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) run_shape(&shapes[i]);
    return check_report();
}

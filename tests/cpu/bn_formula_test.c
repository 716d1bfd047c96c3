/* The half layers' float32 batch-norm on the CPU (plugin/cpu/tail.c) in both its
 * formulas, against the formulas written out in double precision:
 * - AMP_BN_DARKNET_CPU, darknet's forward_batchnorm_layer: unbiased variance,
 *   (x - mean) / (sqrt(var) + 1e-6);
 * - AMP_BN_CUDNN, cudnnBatchNormalizationForwardTraining as darknet's GPU
 *   layers call it: biased variance, (x - mean) / sqrt(var + 1e-5), the
 *   rolling variance fed the unbiased estimate; and its backward, the exact
 *   gradient of that forward (cudnnBatchNormalizationBackward).
 * The GPU half layers' tests compare against a CPU reference with the cuDNN
 * formula (tests/parity/backend_parity.c); this shows that reference is cuDNN's, and that
 * darknet's CPU formula is not a usable stand-in: with 4 values per channel
 * the two normalised outputs differ by about 15%.
 *
 * Bound: 1e-5 relative to the largest value of each tensor (float sums of
 * a few hundred terms against double).
 */
#include "cpu.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 2, C = 3, SIZE = 2, N = BATCH * SIZE }; /* 4 values per channel */

typedef struct {
    float x[BATCH * C * SIZE], dy[BATCH * C * SIZE];
    float scale[C], bias[C];
} inputs;

static float *arr(size_t n)
{
    return calloc(n, sizeof(float));
}

static layer make(const inputs *in)
{
    layer l;
    memset(&l, 0, sizeof l);
    l.batch = BATCH;
    l.batch_normalize = 1;
    l.activation = LINEAR;
    l.out_c = C;
    l.outputs = C * SIZE;
    size_t n = (size_t)BATCH * C * SIZE;
    l.output = arr(n), l.x = arr(n), l.x_norm = arr(n), l.delta = arr(n);
    l.mean = arr(C), l.variance = arr(C), l.rolling_mean = arr(C), l.rolling_variance = arr(C);
    l.scales = arr(C), l.biases = arr(C), l.scale_updates = arr(C), l.bias_updates = arr(C);
    l.mean_delta = arr(C), l.variance_delta = arr(C);
    memcpy(l.output, in->x, sizeof in->x);
    memcpy(l.scales, in->scale, sizeof in->scale);
    memcpy(l.biases, in->bias, sizeof in->bias);
    for (int f = 0; f < C; ++f) l.rolling_variance[f] = 1;
    return l;
}

/* The reference, in double: forward outputs y, normalised xn, rolling
 * variance rv; backward dx, dscale, dbias. */
typedef struct {
    double y[BATCH * C * SIZE], dx[BATCH * C * SIZE], rv[C], dscale[C], dbias[C];
} reference;

static void reference_of(const inputs *in, int cudnn, reference *r)
{
    for (int f = 0; f < C; ++f) {
        double m = 0, v = 0;
        for (int b = 0; b < BATCH; ++b)
            for (int i = 0; i < SIZE; ++i) m += in->x[(b * C + f) * SIZE + i];
        m /= N;
        for (int b = 0; b < BATCH; ++b)
            for (int i = 0; i < SIZE; ++i) {
                double d = in->x[(b * C + f) * SIZE + i] - m;
                v += d * d;
            }
        double vb = v / N, vu = v / (N - 1);
        double den = cudnn ? sqrt(vb + 1e-5) : sqrt(vu) + 1e-6;
        r->rv[f] = .99 * 1 + .01 * vu; /* both feed the unbiased variance */
        double sdy = 0, sdyxn = 0;
        for (int b = 0; b < BATCH; ++b)
            for (int i = 0; i < SIZE; ++i) {
                int k = (b * C + f) * SIZE + i;
                double xn = (in->x[k] - m) / den;
                r->y[k] = in->scale[f] * xn + in->bias[f];
                sdy += in->dy[k];
                sdyxn += in->dy[k] * xn;
            }
        r->dscale[f] = sdyxn;
        r->dbias[f] = sdy;
        /* dx = scale / den * (dy - mean(dy) - xn * mean(dy * xn)), exact for
         * the biased-variance forward */
        for (int b = 0; b < BATCH; ++b)
            for (int i = 0; i < SIZE; ++i) {
                int k = (b * C + f) * SIZE + i;
                double xn = (in->x[k] - m) / den;
                r->dx[k] = in->scale[f] / den * (in->dy[k] - sdy / N - xn * sdyxn / N);
            }
    }
}

static double rel(const float *got, const double *ref, int n)
{
    double max = 0, d = 0;
    for (int i = 0; i < n; ++i) max = fmax(max, fabs(ref[i]));
    for (int i = 0; i < n; ++i) d = fmax(d, fabs(got[i] - ref[i]));
    return d / (max > 0 ? max : 1);
}

int main(void)
{
    inputs in;
    srand(5);
    for (int i = 0; i < BATCH * C * SIZE; ++i) {
        in.x[i] = (float)rand() / RAND_MAX * 4 - 2;
        in.dy[i] = (float)rand() / RAND_MAX * 2 - 1;
    }
    for (int f = 0; f < C; ++f) in.scale[f] = .5f + f, in.bias[f] = .1f * f;
    network net;
    memset(&net, 0, sizeof net);
    net.train = 1;
    const int n = BATCH * C * SIZE;
    const char *names[] = {"darknet's CPU formula", "cuDNN's formula"};
    reference r[2];
    float y[2][BATCH * C * SIZE];
    for (int cudnn = 0; cudnn < 2; ++cudnn) {
        reference_of(&in, cudnn, &r[cudnn]);
        layer l = make(&in);
        amp_tail_forward(l, net, C, SIZE, cudnn ? AMP_BN_CUDNN : AMP_BN_DARKNET_CPU, NULL);
        memcpy(y[cudnn], l.output, sizeof y[cudnn]);
        double ey = rel(l.output, r[cudnn].y, n), ev = rel(l.rolling_variance, r[cudnn].rv, C);
        CHECK(ey <= 1e-5 && ev <= 1e-5, "%s, forward: outputs within %.2g, rolling variance "
              "within %.2g of the formula in double (bound 1e-5)", names[cudnn], ey, ev);
        if (cudnn) { /* the backward: the exact gradient of cuDNN's forward */
            memcpy(l.delta, in.dy, sizeof in.dy);
            amp_tail_backward(l, net, C, SIZE, NULL);
            double edx = rel(l.delta, r[1].dx, n), eds = rel(l.scale_updates, r[1].dscale, C),
                   edb = rel(l.bias_updates, r[1].dbias, C);
            CHECK(edx <= 1e-5 && eds <= 1e-5 && edb <= 1e-5,
                  "%s, backward: data gradient within %.2g, scale gradient %.2g, bias gradient "
                  "%.2g of the exact gradient in double (bound 1e-5)", names[1], edx, eds, edb);
        }
    }
    /* How far apart the two formulas are: what a mixed comparison would see. */
    double apart = 0, max = 0;
    for (int i = 0; i < n; ++i) {
        apart = fmax(apart, fabs((double)y[0][i] - y[1][i]));
        max = fmax(max, fabs((double)y[1][i]));
    }
    CHECK(apart / max > 0.05, "the two formulas differ by %.1f%% of the largest output with %d "
          "values per channel: the GPU's tests need cuDNN's formula in their CPU reference",
          100 * apart / max, N);
    return check_report();
}
